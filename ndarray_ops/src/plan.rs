//! The graph side of memory planning: from a graph in execution order to a `storage::plan`
//! problem, with in-place sharing as NNVM's `PlanMemory` decides it.
//!
//! An output may take over an input's buffer when the op allows that pair (its registry entry's
//! `inplace` pairs, or any pair for identity ops such as Flatten), the input is not externally
//! owned (arguments, weights, bound gradients), this op is the input's last reader and reads it
//! once, the buffer is large enough, and no other output of the op took it already. The shared
//! buffer then lives from the input's producer to the output's last reader. Ops the registry
//! does not know get no in-place sharing.

use std::collections::HashMap;

use serde::Deserialize;
use storage::plan::{Buffer, Problem};

use crate::error::{invalid, Result};
use crate::ops::lookup;
use crate::ops::names::op_name;
use crate::symbol::mirror::{self, Mirror, MirrorReport};
use crate::symbol::{gradient, head_grad_names, infer, Inferred};
use crate::Symbol;

#[derive(Deserialize)]
struct BoundNode {
    op: Option<String>,
    #[serde(default)]
    name: String,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
}

#[derive(Deserialize)]
struct BoundGraph {
    nodes: Vec<BoundNode>,
    entry_shapes: HashMap<String, Vec<u64>>,
    outputs: Vec<usize>,
    #[serde(default)]
    gradient_outputs_external: HashMap<String, usize>,
    mxnet_planner_bytes: Option<u64>,
}

/// A node as the planner sees it: op name (None for variables), name, input and output entries.
pub type DescNode = (Option<String>, String, Vec<usize>, Vec<usize>);

/// A graph in execution order, as the planner sees it.
pub struct GraphDesc {
    /// Nodes in execution order.
    pub nodes: Vec<DescNode>,
    /// Bytes of every entry.
    pub entry_bytes: Vec<u64>,
    /// Entries owned outside the plan (arguments, weights, auxiliary states, bound gradients).
    pub external: Vec<bool>,
    /// Graph outputs (kept to the end).
    pub outputs: Vec<usize>,
}

impl GraphDesc {
    /// An inferred graph in its own order, with the given external entries and kept outputs.
    pub fn of(inf: &Inferred, external: Vec<bool>, outputs: Vec<usize>) -> GraphDesc {
        let g = &inf.graph;
        let nodes = g
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let inputs = g.inputs[i].iter().map(|&(s, k)| g.entry(s, k)).collect();
                let outputs = (0..n.num_outputs()).map(|k| g.entry(i, k)).collect();
                (
                    n.op.map(|d| d.name.to_string()),
                    n.name.clone(),
                    inputs,
                    outputs,
                )
            })
            .collect();
        GraphDesc {
            nodes,
            entry_bytes: inf
                .shapes
                .iter()
                .zip(&inf.dtypes)
                .map(|(s, d)| (s.iter().product::<usize>() * d.size()) as u64)
                .collect(),
            external,
            outputs,
        }
    }
}

/// A planning problem and how it was formed.
pub struct GraphProblem {
    /// Buffers after in-place sharing.
    pub problem: Problem,
    /// Internal entries before sharing.
    pub entries: usize,
    /// Entries that took over an input's buffer.
    pub inplace: usize,
    /// The buffer of each entry (`None` for external entries and entries no node makes).
    pub buffer_of: Vec<Option<usize>>,
    /// MXNet's own plan size for the same graph, when the file gives it.
    pub mxnet_bytes: Option<u64>,
}

/// Reads one of MXNet's bound-graph dumps (`*-bound.json`: MXNet's own graph and execution order)
/// and forms its planning problem with in-place sharing (float32 entries, 64-byte alignment).
pub fn bound_graph_problem(json: &str) -> Result<GraphProblem> {
    let g: BoundGraph = serde_json::from_str(json)
        .map_err(|e| invalid("bound graph", format!("not an MXNet bound graph: {e}")))?;
    // The entries the nodes make, numbered densely in the order of their ids (MXNet's ids are
    // already 0..n; a file with gaps, or a huge id, is renumbered rather than sized by its ids).
    let mut ids: Vec<usize> = g
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter().copied())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let index: HashMap<usize, usize> = ids.iter().enumerate().map(|(i, &e)| (e, i)).collect();
    let n_entries = ids.len();
    let dense = |e: usize, what: &str, node: &str| {
        index.get(&e).copied().ok_or_else(|| {
            invalid(
                "bound graph",
                format!("{what} entry {e}{node} is made by no node of the graph"),
            )
        })
    };
    let mut nodes = Vec::with_capacity(g.nodes.len());
    for n in g.nodes {
        let at = format!(" of node '{}'", n.name);
        let inputs = n.inputs.iter().map(|&e| dense(e, "input", &at));
        let inputs = inputs.collect::<Result<Vec<_>>>()?;
        let outputs = n.outputs.iter().map(|&e| dense(e, "output", &at));
        let outputs = outputs.collect::<Result<Vec<_>>>()?;
        nodes.push((n.op, n.name, inputs, outputs));
    }
    let outputs = g.outputs.iter().map(|&e| dense(e, "graph output", ""));
    let outputs = outputs.collect::<Result<Vec<_>>>()?;
    let mut external = vec![false; n_entries];
    for n in nodes.iter().filter(|n| n.0.is_none()) {
        for &e in &n.3 {
            external[e] = true;
        }
    }
    for e in g.gradient_outputs_external.values() {
        if let Some(&i) = index.get(e) {
            external[i] = true;
        }
    }
    let mut entry_bytes = vec![0u64; n_entries];
    for (&e, b) in ids.iter().zip(entry_bytes.iter_mut()) {
        let s = g
            .entry_shapes
            .get(&e.to_string())
            .ok_or_else(|| invalid("bound graph", format!("entry {e} has no shape")))?;
        *b = s
            .iter()
            .try_fold(4u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| {
                invalid(
                    "bound graph",
                    format!("entry {e}: shape {s:?} of float32 is more than 2^64 bytes"),
                )
            })?;
    }
    // Every offset a plan can give is at most the sum of all sizes: that sum must fit too.
    if entry_bytes
        .iter()
        .try_fold(0u64, |a, &b| a.checked_add(b))
        .is_none()
    {
        return Err(invalid(
            "bound graph",
            "the entries' sizes add up to more than 2^64 bytes",
        ));
    }
    let desc = GraphDesc {
        nodes,
        entry_bytes,
        external,
        outputs,
    };
    let mut p = graph_problem(&desc)?;
    p.mxnet_bytes = g.mxnet_planner_bytes;
    Ok(p)
}

/// The planning problem of `symbol` bound with `shapes`: inference only, or (`train`) with the
/// gradients of every argument not given a shape (MXNet's "training": grad_req write for the
/// parameters, null for the data). Arguments, auxiliary states, head gradients and bound
/// gradients are external; the symbol's outputs live to the end. Returns the problem and the
/// number of nodes.
pub fn symbol_problem(
    symbol: &Symbol,
    shapes: &HashMap<String, Vec<usize>>,
    train: bool,
) -> Result<(GraphProblem, usize)> {
    let desc = symbol_desc(symbol, shapes, train)?;
    Ok((graph_problem(&desc)?, desc.nodes.len()))
}

/// The graph [`symbol_problem`] plans, before the in-place pass (for reordering).
pub fn symbol_desc(
    symbol: &Symbol,
    shapes: &HashMap<String, Vec<usize>>,
    train: bool,
) -> Result<GraphDesc> {
    Ok(symbol_desc_mirrored(symbol, shapes, train, Mirror::Off)?.0)
}

/// [`symbol_desc`] with recomputation during backward chosen under `mirror` (training only),
/// and what was chosen.
pub fn symbol_desc_mirrored(
    symbol: &Symbol,
    shapes: &HashMap<String, Vec<usize>>,
    train: bool,
    mirror: Mirror,
) -> Result<(GraphDesc, Option<MirrorReport>)> {
    let symbol = symbol.with_copy_nodes()?;
    let forward = infer(&symbol, shapes, &HashMap::new())?;
    let mut all_shapes = shapes.clone();
    let n_forward = symbol.outputs().len();
    let no_dtypes = HashMap::new();
    let (graph, report) = if train {
        let wrt: Vec<String> = symbol
            .list_arguments()
            .into_iter()
            .filter(|a| !shapes.contains_key(a))
            .collect();
        let out_shapes = forward.output_shapes();
        for (name, i) in head_grad_names(&symbol) {
            all_shapes.insert(name, out_shapes[i].clone());
        }
        let full = gradient(&symbol, &wrt)?;
        let bound = |g: &Symbol| training_bound(g, n_forward, &all_shapes, &no_dtypes);
        mirror::apply(&full, n_forward, &all_shapes, &no_dtypes, mirror, &bound)?
    } else {
        (symbol.clone(), None)
    };
    let inf = infer(&graph, &all_shapes, &no_dtypes)?;
    Ok((training_desc(&inf, n_forward), report))
}

/// The planner's view of a bound graph whose first `n_forward` outputs are the forward pass's
/// (kept to the end) and the rest gradients (written into bound arrays): variables and
/// gradients external, assignments in their variables' memory.
fn training_desc(inf: &Inferred, n_forward: usize) -> GraphDesc {
    let g = &inf.graph;
    let mut external = vec![false; g.num_entries()];
    for (i, n) in g.nodes.iter().enumerate() {
        if n.is_variable() {
            external[g.entry(i, 0)] = true;
        }
    }
    for &(n, k) in &g.outputs[n_forward..] {
        external[g.entry(n, k)] = true;
    }
    let outputs = g.outputs[..n_forward]
        .iter()
        .map(|&(n, k)| g.entry(n, k))
        .collect();
    let mut desc = GraphDesc::of(inf, external, outputs);
    for (e, _) in assign_aliases(&desc, &[]).entries {
        desc.external[e] = true;
    }
    desc
}

/// The memory lower bound of the training graph `graph` ([`training_desc`]'s view): what the
/// recomputation pass compares its choices by.
pub(crate) fn training_bound(
    graph: &Symbol,
    n_forward: usize,
    shapes: &HashMap<String, Vec<usize>>,
    dtypes: &HashMap<String, crate::DType>,
) -> Result<u64> {
    let inf = infer(graph, shapes, dtypes)?;
    let gp = graph_problem(&training_desc(&inf, n_forward))?;
    Ok(storage::plan::lower_bound(&gp.problem))
}

/// A topological order chosen to lower peak memory (beyond the references, which plan in the
/// order they are given): list scheduling that, among the nodes whose inputs are ready, runs the
/// one that adds the fewest live bytes — its internal outputs minus the internal inputs it reads
/// last, plus what a consumer it alone unblocks would free right after — earliest original
/// position first among equals. Variables run first (they allocate
/// nothing). The same entries, nodes and outputs, in another order.
pub fn reorder_for_memory(g: &GraphDesc) -> GraphDesc {
    let n = g.nodes.len();
    let n_entries = g.entry_bytes.len();
    let internal = |e: usize| !g.external.get(e).copied().unwrap_or(true);
    let mut producer = vec![usize::MAX; n_entries];
    for (t, (_, _, _, outs)) in g.nodes.iter().enumerate() {
        for &e in outs {
            if let Some(p) = producer.get_mut(e) {
                *p = t;
            }
        }
    }
    let mut waiting = vec![0usize; n];
    let mut consumers: Vec<Vec<usize>> = vec![vec![]; n];
    let mut readers_left = vec![0usize; n_entries];
    for (t, (_, _, ins, _)) in g.nodes.iter().enumerate() {
        for &e in ins {
            if let Some(r) = readers_left.get_mut(e) {
                *r += 1;
            }
            if let Some(&p) = producer.get(e).filter(|&&p| p != usize::MAX) {
                waiting[t] += 1;
                consumers[p].push(t);
            }
        }
    }
    let kept: Vec<bool> = (0..n_entries).map(|e| g.outputs.contains(&e)).collect();
    let cost = |t: usize, readers_left: &[usize]| -> i64 {
        let (_, _, ins, outs) = &g.nodes[t];
        let alloc: u64 = outs
            .iter()
            .filter(|&&e| internal(e))
            .map(|&e| g.entry_bytes[e])
            .sum();
        let mut freed = 0u64;
        for (k, &e) in ins.iter().enumerate() {
            let here = ins.iter().filter(|&&x| x == e).count();
            let first = ins.iter().position(|&x| x == e) == Some(k);
            if first && internal(e) && !kept[e] && readers_left[e] == here {
                freed += g.entry_bytes[e];
            }
        }
        alloc as i64 - freed as i64
    };
    // One step of lookahead: a node that allocates but lets a consumer run at once and free
    // more (a big intermediate reduced right away) scores by the pair.
    let score = |t: usize, readers_left: &[usize], waiting: &[usize]| -> i64 {
        let own = cost(t, readers_left);
        let next = consumers[t]
            .iter()
            .filter(|&&c| waiting[c] == consumers[t].iter().filter(|&&x| x == c).count())
            .map(|&c| cost(c, readers_left))
            .min()
            .unwrap_or(0);
        own + next.min(0)
    };
    let mut ready: Vec<usize> = (0..n).filter(|&t| waiting[t] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while !ready.is_empty() {
        let pick = (0..ready.len())
            .min_by_key(|&k| {
                let t = ready[k];
                let variable = g.nodes[t].0.is_none();
                (!variable, score(t, &readers_left, &waiting), t)
            })
            .unwrap_or(0);
        let t = ready.swap_remove(pick);
        order.push(t);
        for &e in &g.nodes[t].2 {
            if let Some(r) = readers_left.get_mut(e) {
                *r = r.saturating_sub(1);
            }
        }
        for &c in &consumers[t] {
            waiting[c] -= 1;
            if waiting[c] == 0 {
                ready.push(c);
            }
        }
    }
    GraphDesc {
        nodes: order.into_iter().map(|t| g.nodes[t].clone()).collect(),
        entry_bytes: g.entry_bytes.clone(),
        external: g.external.clone(),
        outputs: g.outputs.clone(),
    }
}

/// Where assignments put their results (see [`assign_aliases`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aliases {
    /// `(entry, variable entry)`: the entry lives in the variable's memory.
    pub entries: Vec<(usize, usize)>,
    /// `_assign` nodes whose value was computed straight into the variable: nothing to run.
    pub noops: Vec<usize>,
}

/// Assign semantics, NNVM's three cases. An op that assigns output `k` to input `i` (optimizer
/// updates, `_assign`), where input `i` is an external entry (a variable) that no later node
/// reads:
/// 1. the output lives in the variable's memory (the update writes the variable in place);
/// 2. for `_assign(var, rhs)`, when `rhs` is an internal entry read only by the assign and no node
///    reads the variable between `rhs`'s producer and the assign, `rhs` itself is computed into
///    the variable and the assign has nothing left to do;
/// 3. otherwise the assign copies `rhs` into the variable (case 1 for its output).
///
/// `device` gives each entry's device (aliases never cross devices); entries read after the end
/// (graph outputs) count as read by a later node.
pub fn assign_aliases(g: &GraphDesc, device: &[usize]) -> Aliases {
    let n_entries = g.entry_bytes.len();
    let same = |a: usize, b: usize| device.get(a) == device.get(b);
    // Per entry, the steps that read it (graph outputs are read at an extra, final step).
    let mut readers: Vec<Vec<usize>> = vec![vec![]; n_entries];
    for (t, (_, _, inputs, _)) in g.nodes.iter().enumerate() {
        for &e in inputs {
            if let Some(r) = readers.get_mut(e) {
                r.push(t);
            }
        }
    }
    for &e in &g.outputs {
        if let Some(r) = readers.get_mut(e) {
            r.push(g.nodes.len());
        }
    }
    let mut producer = vec![usize::MAX; n_entries];
    for (t, (_, _, _, outputs)) in g.nodes.iter().enumerate() {
        for &e in outputs {
            if let Some(p) = producer.get_mut(e) {
                *p = t;
            }
        }
    }
    let external = |e: usize| g.external.get(e).copied().unwrap_or(true);
    let mut out = Aliases::default();
    for (t, (op, _, inputs, outputs)) in g.nodes.iter().enumerate() {
        let Some(def) = op.as_deref().and_then(|op| lookup(op).ok()) else {
            continue;
        };
        for &(i, k) in def.assign {
            let (Some(&var), Some(&o)) = (inputs.get(i), outputs.get(k)) else {
                continue;
            };
            let read_later = readers[var].iter().any(|&r| r > t);
            if !external(var) || external(o) || read_later || !same(var, o) {
                continue;
            }
            out.entries.push((o, var));
            if def.name != "_assign" {
                continue;
            }
            let Some(&rhs) = inputs.get(1) else { continue };
            let p = producer[rhs];
            let only_here = readers[rhs].iter().all(|&r| r == t);
            let var_quiet = readers[var].iter().all(|&r| r <= p || r == t);
            if p != usize::MAX && !external(rhs) && only_here && var_quiet && same(rhs, var) {
                out.entries.push((rhs, var));
                out.noops.push(t);
            }
        }
    }
    out
}

/// The planning problem of a graph, with NNVM-style in-place sharing by the registry's rules.
pub fn graph_problem(g: &GraphDesc) -> Result<GraphProblem> {
    let n_entries = g.entry_bytes.len();
    let external = &g.external;
    let last_step = g.nodes.len().saturating_sub(1);
    // Reads left per entry; graph outputs are read "after the end".
    let mut reads = vec![0usize; n_entries];
    let mut last_use = vec![None::<usize>; n_entries];
    for (t, (_, name, inputs, _)) in g.nodes.iter().enumerate() {
        for &e in inputs {
            let slot = reads.get_mut(e).ok_or_else(|| {
                invalid(
                    "bound graph",
                    format!("node '{name}' reads entry {e}, which no node makes"),
                )
            })?;
            *slot += 1;
            last_use[e] = Some(t);
        }
    }
    for &e in &g.outputs {
        if e < n_entries {
            reads[e] += 1;
            last_use[e] = Some(last_step);
        }
    }
    // Buffers: (size, start, end, name); entry -> buffer.
    let mut buffers: Vec<(u64, usize, usize, String)> = vec![];
    let mut buffer_of: Vec<Option<usize>> = vec![None; n_entries];
    let (mut entries, mut inplace) = (0, 0);
    for (t, (op, name, inputs, outputs)) in g.nodes.iter().enumerate() {
        let def = op.as_deref().and_then(|op| lookup(op).ok());
        let mut taken = vec![];
        for (k, &out) in outputs.iter().enumerate() {
            if external.get(out).copied().unwrap_or(true) {
                continue;
            }
            entries += 1;
            let out_size = g.entry_bytes[out];
            let end_of_out = last_use[out].unwrap_or(t).max(t);
            // Inputs this output may share, by the op's rules.
            let candidates: Vec<usize> = match def {
                Some(d) if d.identity => (0..inputs.len()).filter(|_| k == 0).collect(),
                Some(d) => d
                    .inplace
                    .iter()
                    .filter(|&&(_, o)| o == k)
                    .map(|&(i, _)| i)
                    .collect(),
                None => vec![],
            };
            let shared = candidates.into_iter().find_map(|i| {
                let e_in = *inputs.get(i)?;
                let b = buffer_of[e_in]?;
                let reads_here = inputs.iter().filter(|&&x| x == e_in).count();
                let last_reader = !external[e_in]
                    && reads[e_in] == reads_here
                    && last_use[e_in] == Some(t)
                    && !g.outputs.contains(&e_in);
                (last_reader && buffers[b].0 >= out_size && !taken.contains(&b)).then_some(b)
            });
            match shared {
                Some(b) => {
                    taken.push(b);
                    buffers[b].2 = buffers[b].2.max(end_of_out);
                    buffer_of[out] = Some(b);
                    inplace += 1;
                }
                None => {
                    buffer_of[out] = Some(buffers.len());
                    buffers.push((out_size, t, end_of_out, format!("{name}:{k}")));
                }
            }
        }
        for &e in inputs {
            reads[e] -= 1;
        }
    }
    let problem = Problem {
        buffers: buffers
            .into_iter()
            .map(|(size, start, end, name)| Buffer {
                size,
                start: start as u32,
                end: end as u32,
                align: 64,
                name,
            })
            .collect(),
        groups: vec![],
    };
    Ok(GraphProblem {
        problem,
        entries,
        inplace,
        buffer_of,
        mxnet_bytes: None,
    })
}

/// A generated deep residual MLP for planning at scale: `blocks` blocks of `FullyConnected`
/// (hidden width cycling through 64, 128, 256, 512, 96) - ReLU - `FullyConnected` (256) plus the
/// block's input; with data of shape `(batch, 256)`. Its training graph has about 12 nodes per
/// block (8,300 blocks: about 100,000 nodes).
pub fn generated_residual_mlp(blocks: usize) -> Result<Symbol> {
    let fc = |name: String, x: &Symbol, hidden: usize| {
        let w = Symbol::var(&format!("{name}_weight"));
        let b = Symbol::var(&format!("{name}_bias"));
        Symbol::op(
            op_name!("FullyConnected"),
            &name,
            &[x, &w, &b],
            crate::Attrs::new().with("num_hidden", hidden),
        )
    };
    let mut h = Symbol::var("data");
    for i in 0..blocks {
        let a = fc(format!("fa{i}"), &h, [64, 128, 256, 512, 96][i % 5])?;
        let r = Symbol::op(
            op_name!("Activation"),
            &format!("relu{i}"),
            &[&a],
            crate::Attrs::new().with("act_type", "relu"),
        )?;
        let b = fc(format!("fb{i}"), &r, 256)?;
        h = Symbol::op(
            op_name!("elemwise_add"),
            &format!("add{i}"),
            &[&h, &b],
            crate::Attrs::new(),
        )?;
    }
    Ok(h)
}
