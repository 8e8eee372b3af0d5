//! Operator fusion: passes over the graph a bind runs that replace groups of nodes by one node
//! of a fused op ([`crate::ops`]'s `fused` module), which runs the group's arithmetic in fewer
//! passes over memory and as one engine op. Two passes, at two points of a bind:
//!
//! - [`apply`], on the symbol before the gradient pass (so a fused node gets its backward node
//!   from the fused op's gradient rule): BatchNorm whose output only ReLU reads (`Activation`
//!   with `act_type=relu`, or `relu`) into `_fused_BatchNormReLU`, in training and inference;
//!   and without gradients, a Convolution whose output only a BatchNorm reads, with that
//!   BatchNorm (and its ReLU) into `_fused_Convolution` (`_fused_ConvolutionBias` where the
//!   convolution has a bias, which it adds first, as the unfused convolution does), the
//!   normalization being the convolution's epilogue. With gradients the convolution's output
//!   is needed by BatchNorm's backward pass, so the convolution stays apart.
//! - [`apply_elementwise`], on the whole graph after the gradient and recomputation passes:
//!   trees of same-shape elementwise nodes into `_fused_elemwise` programs, forward and
//!   backward (a residual sum and its ReLU, an LSTM cell's gates, a sum of gradients and ReLU's
//!   gradient).
//!
//! The copy nodes, placement and the memory planner (with its verifier) then see the fused
//! graph. A group is fused only where its inner entries have no reader outside it and are not
//! outputs of the graph; BatchNorm only over axis 1 (the convolution's channels, NCHW) and
//! without its statistics as outputs. A fused node keeps its last node's name (so the graph's
//! output names do not change) and lists the nodes it replaces in its `__fused__` attribute,
//! which `Executor::debug_str` prints; the profiler records the fused op's name. Arguments keep
//! their order: a fused node takes its inputs in the order its members listed them.
//!
//! `MXRS_FUSION=0` (or `BindOptions::fusion`) turns both off.

use std::collections::HashMap;
use std::sync::Arc;

use super::{IndexedGraph, Node, NodeEntry, Symbol};
use crate::error::{invalid, Result};
use crate::ops::fused::{conv_op, Arg, Step, PROGRAM_ATTR};
use crate::ops::params::{BatchNormParams, Params};
use crate::ops::{lookup, Attrs};

/// The attribute naming the nodes a fused node replaces, comma-separated in graph order.
pub const FUSED_ATTR: &str = "__fused__";

/// Whether fusion is on, as `MXRS_FUSION` says: `0`, `off` or `false` turn it off; `1`, `on`,
/// `true` or unset leave it on.
pub fn enabled_from_env() -> Result<bool> {
    crate::switches::switch("MXRS_FUSION").map_err(|reason| invalid("MXRS_FUSION", reason))
}

/// What the pass fused: per fused node, its op and the nodes it replaced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FusionReport {
    /// (fused op, names of the replaced nodes in graph order), one per fused node.
    pub fused: Vec<(&'static str, Vec<String>)>,
}

impl FusionReport {
    /// How many nodes the pass removed.
    pub fn nodes_removed(&self) -> usize {
        self.fused.iter().map(|(_, names)| names.len() - 1).sum()
    }
}

/// What stands in place of a group of nodes: a fused node at the group's last node, reading
/// `inputs`: what the members read there, as (member node, input slot).
struct Fused {
    op: &'static str,
    attrs: Attrs,
    inputs: Vec<(usize, usize)>,
    /// The replaced nodes, in graph order; the last one's place and name are the fused node's.
    members: Vec<usize>,
}

/// The symbol with its BatchNorm chains fused (before the gradient pass); `inference` when it
/// is bound without gradients, which lets convolutions fold too.
pub fn apply(symbol: &Symbol, inference: bool) -> Result<(Symbol, FusionReport)> {
    let g = symbol.indexed();
    let readers = readers(&g);
    let only_reader = |node: usize, reader: usize| readers[g.entry(node, 0)] == [Some(reader)];
    let slots = |node: usize, r: std::ops::Range<usize>| -> Vec<(usize, usize)> {
        r.map(|k| (node, k)).collect()
    };
    let mut groups: Vec<Fused> = vec![];
    for (b, n) in g.nodes.iter().enumerate() {
        if n.op_name() != "BatchNorm" || !bn_fusible(n)? {
            continue;
        }
        // A ReLU reading the BatchNorm's output, its only reader.
        let relu = match readers[g.entry(b, 0)].as_slice() {
            [Some(r)] if is_relu(&g.nodes[*r]) => Some(*r),
            _ => None,
        };
        let conv = match g.inputs[b][0] {
            (c, 0) if inference && only_reader(c, b) && conv_fusible(&g.nodes[c])? => Some(c),
            _ => None,
        };
        let mut attrs = n.attrs.clone();
        let (op, mut inputs) = match conv {
            Some(c) => {
                for (k, v) in g.nodes[c].attrs.iter() {
                    if attrs.get(k).is_none() {
                        attrs = attrs.with(k, v);
                    }
                }
                if relu.is_some() {
                    attrs = attrs.with("act_type", "relu");
                }
                let bias = g.inputs[c].len() > 2;
                (conv_op(bias), slots(c, 0..g.inputs[c].len()))
            }
            None if relu.is_some() => ("_fused_BatchNormReLU", vec![(b, 0)]),
            None => continue,
        };
        inputs.extend(slots(b, 1..g.inputs[b].len()));
        groups.push(Fused {
            op,
            attrs,
            inputs,
            members: [conv, Some(b), relu].into_iter().flatten().collect(),
        });
    }
    rebuild(symbol, &g, groups)
}

/// The graph a bind runs (forward outputs first, `num_outputs` of them, then gradients) with
/// its trees of elementwise nodes fused into `_fused_elemwise` nodes. A tree grows from a
/// node to the elementwise nodes whose output only it reads, on the same side of the graph
/// (forward or backward: a forward node fused into a backward one would run late and keep
/// its inputs alive). Runs after the gradient and recomputation passes, so an entry a
/// backward node reads has a reader outside the tree and is never fused away.
pub fn apply_elementwise(symbol: &Symbol, num_outputs: usize) -> Result<(Symbol, FusionReport)> {
    let g = symbol.indexed();
    let readers = readers(&g);
    let forward = g.needed_by(&g.outputs[..num_outputs.min(g.outputs.len())]);
    let pointwise = |i: usize| g.nodes[i].op.is_some_and(|d| d.pointwise);
    let mut member = vec![false; g.nodes.len()];
    let mut groups = vec![];
    // From the last node back, so that each tree is found from its root.
    for root in (0..g.nodes.len()).rev() {
        if !pointwise(root) || member[root] {
            continue;
        }
        let mut tree = vec![root];
        let mut k = 0;
        while k < tree.len() {
            let m = tree[k];
            for &(s, _) in &g.inputs[m] {
                let rs = &readers[g.entry(s, 0)];
                let only_m = !rs.is_empty() && rs.iter().all(|r| *r == Some(m));
                if pointwise(s)
                    && !member[s]
                    && !tree.contains(&s)
                    && only_m
                    && forward[s] == forward[root]
                {
                    tree.push(s);
                }
            }
            k += 1;
        }
        if tree.len() < 2 {
            continue;
        }
        tree.sort_unstable();
        for &m in &tree {
            member[m] = true;
        }
        groups.push(program_of(&g, tree)?);
    }
    rebuild(symbol, &g, groups)
}

/// The fused node of a tree of elementwise nodes (sorted, the root last): its inputs are the
/// entries the tree reads from outside, each once; its program has a step per member.
fn program_of(g: &IndexedGraph, tree: Vec<usize>) -> Result<Fused> {
    let mut inputs: Vec<(usize, usize)> = vec![];
    let mut sources: Vec<(usize, usize)> = vec![];
    let mut steps = vec![];
    for &m in &tree {
        let n = &g.nodes[m];
        let mut args = vec![];
        for (slot, &src) in g.inputs[m].iter().enumerate() {
            args.push(match tree.iter().position(|&t| t == src.0) {
                Some(j) => Arg::Step(j),
                None => Arg::Input(match sources.iter().position(|&s| s == src) {
                    Some(k) => k,
                    None => {
                        sources.push(src);
                        inputs.push((m, slot));
                        sources.len() - 1
                    }
                }),
            });
        }
        steps.push(Step {
            op: n.op_name().to_string(),
            attrs: n
                .attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            args,
        });
    }
    let program = serde_json::to_string(&steps)
        .map_err(|e| invalid("_fused_elemwise", format!("program not written: {e}")))?;
    Ok(Fused {
        op: "_fused_elemwise",
        attrs: Attrs::new().with(PROGRAM_ATTR, program),
        inputs,
        members: tree,
    })
}

/// The symbol with each group replaced by its fused node, and what was fused. Nodes reading a
/// replaced node read the fused node instead (only a group's last node is read from outside),
/// and a node none of whose inputs changed is kept as it is.
fn rebuild(
    symbol: &Symbol,
    g: &IndexedGraph,
    groups: Vec<Fused>,
) -> Result<(Symbol, FusionReport)> {
    let mut report = FusionReport::default();
    if groups.is_empty() {
        return Ok((symbol.clone(), report));
    }
    let mut taken = vec![false; g.nodes.len()];
    let mut at: HashMap<usize, Fused> = HashMap::new();
    for f in groups {
        for &m in &f.members {
            taken[m] = true;
        }
        at.insert(*f.members.last().unwrap_or(&0), f);
    }
    // The original entry at input slot `slot` of a node, and where it now comes from.
    let entry = |new: &[Option<Arc<Node>>], e: &NodeEntry, (s, k): (usize, usize)| NodeEntry {
        node: new[s].clone().unwrap_or_else(|| e.node.clone()),
        index: k,
        version: e.version,
    };
    let mut new: Vec<Option<Arc<Node>>> = vec![None; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        if let Some(f) = at.remove(&i) {
            let inputs = f
                .inputs
                .iter()
                .map(|&(m, k)| entry(&new, &g.nodes[m].inputs[k], g.inputs[m][k]))
                .collect();
            let names: Vec<String> = f.members.iter().map(|&m| g.nodes[m].name.clone()).collect();
            let def = lookup(f.op)?;
            let attrs = f.attrs.with(FUSED_ATTR, names.join(","));
            new[i] = Some(Node::new(def, &n.name, attrs, inputs)?);
            report.fused.push((def.name, names));
            continue;
        }
        if n.is_variable() || taken[i] || !g.inputs[i].iter().any(|&(s, _)| new[s].is_some()) {
            continue;
        }
        let inputs = n
            .inputs
            .iter()
            .zip(&g.inputs[i])
            .map(|(e, &src)| entry(&new, e, src))
            .collect();
        new[i] = Some(n.with_inputs(inputs));
    }
    let outputs = symbol
        .outputs()
        .iter()
        .zip(&g.outputs)
        .map(|(e, &src)| entry(&new, e, src))
        .collect();
    Ok((Symbol::from_outputs(outputs), report))
}

/// Per entry, its readers: `Some(node)` per input slot that reads it, `None` per graph output
/// it is.
fn readers(g: &IndexedGraph) -> Vec<Vec<Option<usize>>> {
    let mut r: Vec<Vec<Option<usize>>> = vec![vec![]; g.num_entries()];
    for (i, ins) in g.inputs.iter().enumerate() {
        for &(s, k) in ins {
            r[g.entry(s, k)].push(Some(i));
        }
    }
    for &(s, k) in &g.outputs {
        r[g.entry(s, k)].push(None);
    }
    r
}

/// A BatchNorm over axis 1 that does not output its statistics.
fn bn_fusible(n: &Node) -> Result<bool> {
    let p = BatchNormParams::get("BatchNorm", &n.attrs)?;
    Ok(p.axis == 1 && !p.output_mean_var)
}

/// ReLU: `Activation` with `act_type=relu`, or `relu`.
fn is_relu(n: &Node) -> bool {
    match n.op_name() {
        "Activation" => n.attrs.get("act_type") == Some("relu"),
        "relu" => true,
        _ => false,
    }
}

/// A Convolution, channels first.
fn conv_fusible(n: &Node) -> Result<bool> {
    if n.op_name() != "Convolution" {
        return Ok(false);
    }
    // Its attributes must parse (the fused node's kernel reads them).
    crate::ops::conv::conv_params(n.op_name(), &n.attrs)?;
    let channels_first = matches!(
        n.attrs.get("layout"),
        None | Some("None" | "NCW" | "NCHW" | "NCDHW")
    );
    Ok(channels_first)
}
