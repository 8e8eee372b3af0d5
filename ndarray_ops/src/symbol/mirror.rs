//! Recomputation during the backward pass (MXNet's "mirror", Chen et al.'s sublinear-memory
//! training): some forward entries are not kept for the backward pass but computed again from
//! kept ones right before the backward nodes that read them.
//!
//! The pass works on a training graph (the forward outputs, then the gradients). A forward node
//! chosen for recomputation gets a *mirror*: the same op with the same attributes (plus
//! `__mirror__`), whose inputs are the mirrors of chosen inputs and the original entries of the
//! others. Backward nodes read mirrors in place of the chosen nodes' outputs, so the originals
//! die at the end of the forward pass. Mirrors are reached only through backward nodes, so the
//! graph's order (a post-order walk from the outputs) places each one right before the first
//! backward node that needs it, and the ordinary planner plans, verifies and shares their memory
//! like any other entry.
//!
//! Never recomputed: ops drawing random numbers (Dropout keeps its output, so the backward pass
//! sees the forward pass's mask), ops keeping state for their backward node, assignments, and
//! ops writing their inputs — except BatchNorm (fused with ReLU or not), whose mirror recomputes the same batch
//! statistics without folding them into the moving averages a second time.
//!
//! Which nodes: a planned trade-off, not a fixed rule. A cost model gives each node a time
//! (FLOPs at a compute rate plus bytes at a memory rate); the candidates are a ladder from
//! "nothing" through "every cheap node" (elementwise, activations, normalisation, pooling:
//! MXNet's rule) to "every node but one cut point in `s`" (Chen's checkpoints: a cut point's
//! output alone carries the forward pass on, as a residual block's does) for falling `s`, with,
//! between them, prefixes: "every node but the cut points, up to the `k`-th cut point", then
//! every cheap node or nothing (a network's first stages hold the largest activations for the
//! same recomputation, so a prefix often buys most of the memory for part of the time). Each
//! rung is built and its memory's lower bound computed by the planner; a budget takes the
//! cheapest rung within it, `auto` the smallest memory whose recomputation stays within a
//! fraction of the step's estimated time.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::{infer, IndexedGraph, Inferred, Node, NodeEntry, Symbol};
use crate::error::{invalid, Result};
use crate::ops::{Cost, Flops, StateUse};
use crate::resources::Resource;
use crate::DType;

pub use crate::ops::graph::MIRROR_ATTR;

/// How much of the forward pass to recompute during backward.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Mirror {
    /// Keep every forward entry the backward pass reads.
    #[default]
    Off,
    /// The least recomputation whose memory (the plan's lower bound, per device) fits in this
    /// many bytes; a bind is refused when no choice fits.
    Budget(u64),
    /// The smallest memory whose recomputation costs at most this fraction of a training step's
    /// estimated time (`auto` alone: 0.3).
    Auto(f64),
    /// MXNet's rule (`MXNET_BACKWARD_DO_MIRROR=1`), whatever it saves: recompute every cheap
    /// node (elementwise, activations, normalisation, pooling), keep the heavy ones' outputs.
    Cheap,
}

/// The fraction of a step `auto` may spend recomputing.
const AUTO_OVERHEAD: f64 = 0.3;

impl FromStr for Mirror {
    type Err = String;

    /// `off` (or `0`), `auto`, `auto:F` (a fraction of the step time), `cheap`, or a budget in bytes with
    /// an optional `K`/`M`/`G` (powers of 1024) suffix and `B`: `1500000000`, `800M`, `1.5GB`.
    fn from_str(s: &str) -> std::result::Result<Mirror, String> {
        let t = s.trim();
        let lower = t.to_ascii_lowercase();
        let bad = || {
            format!(
                "mirror setting {s:?} is not `off`, `auto`, `auto:FRACTION`, `cheap` or a byte \
                 budget such as `800M` or `1.5G`"
            )
        };
        if lower == "off" || lower == "0" {
            return Ok(Mirror::Off);
        }
        if lower == "cheap" {
            return Ok(Mirror::Cheap);
        }
        if lower == "auto" {
            return Ok(Mirror::Auto(AUTO_OVERHEAD));
        }
        if let Some(f) = lower.strip_prefix("auto:") {
            return match f.trim().parse::<f64>() {
                Ok(f) if f.is_finite() && f >= 0.0 => Ok(Mirror::Auto(f)),
                _ => Err(bad()),
            };
        }
        let digits = lower.trim_end_matches('b');
        let (number, scale) = match digits.chars().last() {
            Some('k') => (&digits[..digits.len() - 1], 1u64 << 10),
            Some('m') => (&digits[..digits.len() - 1], 1 << 20),
            Some('g') => (&digits[..digits.len() - 1], 1 << 30),
            _ => (digits, 1),
        };
        match number.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 && v * (scale as f64) < u64::MAX as f64 => {
                Ok(Mirror::Budget((v * scale as f64) as u64))
            }
            _ => Err(bad()),
        }
    }
}

impl Mirror {
    /// The setting of `MXRS_BACKWARD_MIRROR`: `Off` when unset; a value that does not parse
    /// (an empty one included) is refused, naming the variable.
    pub fn from_env() -> Result<Mirror> {
        match std::env::var("MXRS_BACKWARD_MIRROR") {
            Err(_) => Ok(Mirror::Off),
            Ok(v) => v
                .parse()
                .map_err(|e: String| invalid("MXRS_BACKWARD_MIRROR", e)),
        }
    }
}

impl fmt::Display for Mirror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mirror::Off => write!(f, "off"),
            Mirror::Budget(b) => write!(f, "{b}"),
            Mirror::Auto(x) => write!(f, "auto:{x}"),
            Mirror::Cheap => write!(f, "cheap"),
        }
    }
}

/// What the pass chose.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MirrorReport {
    /// Forward nodes recomputed during backward.
    pub recomputed_nodes: usize,
    /// The lower bound of the training graph's memory without recomputation (bytes).
    pub unmirrored_bound_bytes: u64,
    /// The same with the chosen recomputation.
    pub bound_bytes: u64,
    /// The recomputation's estimated time over a training step's (forward, then a backward
    /// pass of about 2.5 times its cost), by the cost model.
    pub estimated_overhead: f64,
    /// Cut points kept as checkpoints between recomputed segments: one in this many (0: no
    /// segments; nothing or only cheap nodes recomputed).
    pub checkpoint_every: usize,
    /// Recomputed segments stop at this cut point, counted from the input (0: they run to the
    /// end); past it, only cheap nodes or nothing are recomputed.
    pub segments_end_at_cut: usize,
}

/// The cost model's rates, fitted to the per-op times of a ResNet-50 training step (batch 32,
/// `run_model --train --profile` on a 2-vCPU VM): convolutions ran at 84 GFLOP/s, ReLU and
/// additions moved 16-20 GB/s. Only the ratio between nodes matters, not the seconds. Each op
/// states its FLOPs per output element and its passes over its bytes in its definition
/// (`OpDef::cost`, fitted in the same run: 2.5 for training BatchNorm, 5 for pooling).
const FLOPS_PER_S: f64 = 84e9;
const BYTES_PER_S: f64 = 16e9;

/// A training step's time over its forward pass's, measured on the same ResNet-50 step (the
/// backward pass computes two gradients per convolution, and BatchNorm's backward reads more).
const STEP_OVER_FORWARD: f64 = 3.5;
/// FLOPs per output element from which a node counts as heavy.
const HEAVY: f64 = 32.0;

/// A node's estimated run time (seconds) from its FLOPs and the bytes it moves.
fn node_cost(g: &IndexedGraph, inf: &Inferred, i: usize) -> (f64, bool) {
    let n = &g.nodes[i];
    let elems = |(s, k): (usize, usize)| inf.shapes[g.entry(s, k)].iter().product::<usize>();
    let size = |(s, k): (usize, usize)| inf.dtypes[g.entry(s, k)].size();
    let out: usize = (0..n.num_outputs()).map(|k| elems((i, k))).sum();
    let bytes: usize = g.inputs[i]
        .iter()
        .map(|&e| elems(e) * size(e))
        .chain((0..n.num_outputs()).map(|k| elems((i, k)) * size((i, k))))
        .sum();
    let weight = |k: usize| g.inputs[i].get(k).map(|&(s, o)| &inf.shapes[g.entry(s, o)]);
    let cost = n.op.map_or(Cost::ELEMENTWISE, |d| d.cost);
    let per_out = match cost.flops {
        Flops::One => 1.0,
        // Each output element: a dot product over the weight's input channels and window.
        Flops::Window => {
            weight(1).map_or(1.0, |w| 2.0 * w.iter().skip(1).product::<usize>() as f64)
        }
        Flops::WeightRow => weight(1).map_or(1.0, |w| 2.0 * w.get(1).copied().unwrap_or(1) as f64),
        Flops::Inner => weight(0).map_or(1.0, |a| 2.0 * a.last().copied().unwrap_or(1) as f64),
    };
    let flops = per_out * out as f64;
    (
        flops / FLOPS_PER_S + cost.passes * bytes as f64 / BYTES_PER_S,
        per_out >= HEAVY,
    )
}

/// Whether node `n` may be recomputed: a deterministic op with no state, writing only its
/// outputs (BatchNorm aside; see the module's header), with inputs (a source such as `_zeros`
/// may take its shape from its readers, which a copy read only by backward nodes lacks).
fn recomputable(n: &Node) -> bool {
    let Some(def) = n.op else {
        return false;
    };
    !n.inputs.is_empty()
        && !def.resources.contains(&Resource::Random)
        && def.state == StateUse::No
        && def.assign.is_empty()
        && (def.mutate_inputs.is_empty()
            || matches!(def.name, "BatchNorm" | "_fused_BatchNormReLU"))
        && def.name != "_CrossDeviceCopy"
}

/// Which copies of a recomputed node a reader gets.
#[derive(Clone, Copy, PartialEq)]
enum Family {
    /// The one mirror of a heavy node.
    Shared,
    /// Copies read by heavy mirrors (recomputing a segment).
    Chain,
    /// Copies read by one backward node.
    Late,
}

/// Mirrors made on demand, each with the copies of its inputs it reads.
struct Copies<'g> {
    g: &'g IndexedGraph,
    recompute: &'g [bool],
    shared: &'g [bool],
    costs: &'g [f64],
    made: [HashMap<usize, Arc<Node>>; 3],
    /// The estimated time of every copy made.
    cost: f64,
}

impl Copies<'_> {
    fn family(&self, i: usize, reader: Family) -> Family {
        match (self.shared[i], reader) {
            (true, _) => Family::Shared,
            (false, Family::Late) => Family::Late,
            (false, _) => Family::Chain,
        }
    }

    /// The copy of forward node `root` a reader of `family` gets (`None`: the original),
    /// making it and every copy it needs first (an explicit stack: chains of cheap nodes may be
    /// as long as the graph).
    fn get(&mut self, root: usize, reader: Family) -> Result<Option<Arc<Node>>> {
        if !self.recompute[root] {
            return Ok(None);
        }
        let want = self.family(root, reader);
        let mut stack = vec![(root, want)];
        while let Some(&(i, fam)) = stack.last() {
            if self.made[fam as usize].contains_key(&i) {
                stack.pop();
                continue;
            }
            let inputs = &self.g.inputs[i];
            let missing: Vec<(usize, Family)> = inputs
                .iter()
                .map(|&(s, _)| (s, self.family(s, fam)))
                .filter(|&(s, f)| self.recompute[s] && !self.made[f as usize].contains_key(&s))
                .collect();
            if !missing.is_empty() {
                stack.extend(missing);
                continue;
            }
            let node = &self.g.nodes[i];
            let entries = node
                .inputs
                .iter()
                .zip(inputs)
                .map(|(orig, &(s, k))| match self.recompute[s] {
                    true => NodeEntry {
                        node: self.made[self.family(s, fam) as usize][&s].clone(),
                        index: k,
                        version: 0,
                    },
                    false => orig.clone(),
                })
                .collect();
            let def = node
                .op
                .ok_or_else(|| invalid("mirror", "a variable cannot be recomputed"))?;
            let attrs = node.attrs.clone().with(MIRROR_ATTR, true);
            let copy = Node::new(def, &format!("{}_mirror", node.name), attrs, entries)?;
            self.made[fam as usize].insert(i, copy);
            self.cost += self.costs[i];
            stack.pop();
        }
        Ok(self.made[want as usize].get(&root).cloned())
    }
}

/// The training graph `full` with the forward nodes marked in `recompute` recomputed during
/// backward, and the estimated time of the recomputation.
///
/// A recomputed node marked `shared` (a heavy one) gets one mirror, reading *chain* copies of
/// its recomputed inputs, which only heavy mirrors read. Each backward node gets *late* copies
/// of its own of the other recomputed nodes it reads (and of the ones those read, down to a
/// heavy mirror or a kept entry). When the backward pass reaches a segment, the walk from its
/// first backward node recomputes the segment's heavy nodes (each chain copy dying as soon as
/// the next heavy mirror has read it), and a backward node's late copies are recomputed right
/// before it and die right after: a segment holds its heavy nodes' outputs, not every entry
/// between its checkpoints. Cheap nodes so run once per backward reader: time spent for memory.
/// A backward node reading a `small` entry (by entry id) of a recomputed node reads the original
/// instead: BatchNorm's batch statistics are kept rather than worth a whole recomputation.
pub(crate) fn with_mirrors(
    full: &Symbol,
    g: &IndexedGraph,
    forward: &[bool],
    recompute: &[bool],
    shared: &[bool],
    costs: &[f64],
    small: &[bool],
) -> Result<(Symbol, f64)> {
    let n = g.nodes.len();
    let mut copies = Copies {
        g,
        recompute,
        shared,
        costs,
        made: Default::default(),
        cost: 0.0,
    };
    // Backward nodes whose inputs changed, rebuilt; `None`: the original.
    let mut rebuilt: Vec<Option<Arc<Node>>> = vec![None; n];
    for i in (0..n).filter(|&i| !forward[i]) {
        let node = &g.nodes[i];
        let Some(def) = node.op else {
            continue;
        };
        // A backward op reading its forward node's kept state finds that node by its inputs,
        // so the forward entries it reads stay the originals.
        let keeps = matches!(def.state, StateUse::ReadsOf(_));
        copies.made[Family::Late as usize].clear();
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for (orig, &(s, k)) in node.inputs.iter().zip(&g.inputs[i]) {
            let copy = match forward[s] {
                true if keeps || small[g.entry(s, k)] => None,
                true => copies.get(s, Family::Late)?,
                false => rebuilt[s].clone(),
            };
            inputs.push(match copy {
                Some(node) => NodeEntry {
                    node,
                    index: k,
                    version: 0,
                },
                None => orig.clone(),
            });
        }
        let same = inputs
            .iter()
            .zip(&node.inputs)
            .all(|(a, b)| Arc::ptr_eq(&a.node, &b.node));
        if !same {
            rebuilt[i] = Some(Node::new(def, &node.name, node.attrs.clone(), inputs)?);
        }
    }
    let outputs = full
        .outputs()
        .iter()
        .zip(&g.outputs)
        .map(|(orig, &(s, k))| match &rebuilt[s] {
            Some(node) if !forward[s] => NodeEntry {
                node: node.clone(),
                index: k,
                version: 0,
            },
            _ => orig.clone(),
        })
        .collect();
    Ok((Symbol::from_outputs(outputs), copies.cost))
}

/// One rung of the ladder: which nodes it recomputes, its cost, and its memory bound.
struct Rung {
    /// Per node of the training graph: recomputed.
    recompute: Vec<bool>,
    /// The estimated time of the copies it makes (known once built).
    cost: f64,
    /// One cut point in this many kept (0: no segments).
    every: usize,
    /// Segments end at this cut point (0: they do not end early).
    prefix: usize,
}

/// Chooses what to recompute in the training graph `full` under `policy`, and returns the graph
/// to bind (unchanged when `Off` or when nothing helps) with what was chosen. `bound` gives a
/// training graph's memory lower bound as the planner sees it on one device.
pub(crate) fn apply(
    full: &Symbol,
    num_outputs: usize,
    shapes: &HashMap<String, Vec<usize>>,
    dtypes: &HashMap<String, DType>,
    policy: Mirror,
    bound: &dyn Fn(&Symbol) -> Result<u64>,
) -> Result<(Symbol, Option<MirrorReport>)> {
    if policy == Mirror::Off {
        return Ok((full.clone(), None));
    }
    let inf = infer(full, shapes, dtypes)?;
    let g = &inf.graph;
    let n = g.nodes.len();
    let forward = g.needed_by(&g.outputs[..num_outputs]);
    let is_output: Vec<bool> = {
        let mut o = vec![false; n];
        for &(s, _) in &g.outputs {
            o[s] = true;
        }
        o
    };
    let (costs, heavy): (Vec<f64>, Vec<bool>) = (0..n).map(|i| node_cost(g, &inf, i)).unzip();
    let step: f64 = STEP_OVER_FORWARD
        * (0..n)
            .filter(|&i| forward[i])
            .map(|i| costs[i])
            .sum::<f64>();
    let candidate: Vec<bool> = (0..n)
        .map(|i| forward[i] && !is_output[i] && recomputable(&g.nodes[i]))
        .collect();
    // Cut points (Chen et al.'s checkpoint candidates): candidates after which no earlier
    // forward entry is read again in the forward pass, so their output alone carries the
    // forward pass on (a residual network's block outputs). Ranked 1, 2, ... in graph order.
    let mut last_read = vec![0usize; n];
    for i in (0..n).filter(|&i| forward[i]) {
        for &(s, _) in &g.inputs[i] {
            last_read[s] = last_read[s].max(i);
        }
    }
    let mut cut_rank = vec![0usize; n];
    let (mut cuts, mut reach) = (0, 0);
    let first_op = (0..n)
        .find(|&i| forward[i] && g.nodes[i].op.is_some())
        .unwrap_or(n);
    for i in (0..n).filter(|&i| forward[i]) {
        if i > first_op && reach <= i && candidate[i] {
            cuts += 1;
            cut_rank[i] = cuts;
        }
        if g.nodes[i].op.is_some() {
            reach = reach.max(last_read[i]);
        }
    }
    // The ladder: nothing; every cheap node (heavy ones kept); prefixes (below); then every
    // candidate but one cut point in `every` (Chen's segments), for falling `every`.
    let mut rungs = vec![Rung {
        recompute: vec![false; n],
        cost: 0.0,
        every: 0,
        prefix: 0,
    }];
    rungs.push(Rung {
        recompute: (0..n).map(|i| candidate[i] && !heavy[i]).collect(),
        cost: 0.0,
        every: 0,
        prefix: 0,
    });
    // Prefixes: every node but the cut points up to the `k`-th cut point only, where a
    // network's activations are largest for the same recomputation, then every cheap node or
    // none, for about eight rising `k`.
    let stride = cuts.div_ceil(8).max(1);
    for k in (stride..cuts).step_by(stride) {
        let end = (0..n).find(|&i| cut_rank[i] == k).unwrap_or(n);
        for rest_cheap in [true, false] {
            rungs.push(Rung {
                recompute: (0..n)
                    .map(|i| match i <= end {
                        true => candidate[i] && cut_rank[i] == 0,
                        false => rest_cheap && candidate[i] && !heavy[i],
                    })
                    .collect(),
                cost: 0.0,
                every: 1,
                prefix: k,
            });
        }
    }
    let mut every = cuts;
    while every >= 1 {
        let keep = |i: usize| cut_rank[i] != 0 && cut_rank[i] % every == 0;
        rungs.push(Rung {
            recompute: (0..n).map(|i| candidate[i] && !keep(i)).collect(),
            cost: 0.0,
            every,
            prefix: 0,
        });
        every = if every > 16 { every * 2 / 3 } else { every - 1 };
    }
    // Entries under 1/16 of their node's largest output (statistics beside the data) are kept.
    let bytes = |e: usize| inf.shapes[e].iter().product::<usize>() * inf.dtypes[e].size();
    let mut small = vec![false; g.num_entries()];
    for i in 0..n {
        let outs = g.entry(i, 0)..g.entry(i, 0) + g.nodes[i].num_outputs();
        let largest = outs.clone().map(bytes).max().unwrap_or(0);
        for e in outs {
            small[e] = bytes(e) * 16 < largest;
        }
    }
    let mut measured: Vec<(u64, Symbol, Rung)> = Vec::with_capacity(rungs.len());
    for mut r in rungs {
        let sym = match r.recompute.iter().any(|&x| x) {
            false => full.clone(),
            true => {
                let (sym, cost) =
                    with_mirrors(full, g, &forward, &r.recompute, &heavy, &costs, &small)?;
                r.cost = cost;
                sym
            }
        };
        measured.push((bound(&sym)?, sym, r));
    }
    let unmirrored = measured[0].0;
    let overhead = |r: &Rung| match step > 0.0 {
        true => r.cost / step,
        false => 0.0,
    };
    let chosen = match policy {
        Mirror::Off => 0,
        Mirror::Cheap => 1,
        Mirror::Budget(b) => {
            let fits = (0..measured.len())
                .filter(|&k| measured[k].0 <= b)
                .min_by(|&x, &y| measured[x].2.cost.total_cmp(&measured[y].2.cost));
            match fits {
                Some(k) => k,
                None => {
                    let least = measured.iter().map(|m| m.0).min().unwrap_or(unmirrored);
                    return Err(invalid(
                        "mirror",
                        format!(
                            "the budget of {b} bytes is below the least this graph plans with \
                             recomputation ({least} bytes; {unmirrored} without)"
                        ),
                    ));
                }
            }
        }
        Mirror::Auto(max) => (0..measured.len())
            .filter(|&k| overhead(&measured[k].2) <= max)
            .min_by_key(|&k| (measured[k].0, k))
            .unwrap_or(0),
    };
    let (bytes, sym, r) = measured.swap_remove(chosen);
    let report = MirrorReport {
        recomputed_nodes: r.recompute.iter().filter(|&&x| x).count(),
        unmirrored_bound_bytes: unmirrored,
        bound_bytes: bytes,
        estimated_overhead: overhead(&r),
        checkpoint_every: r.every,
        segments_end_at_cut: r.prefix,
    };
    Ok((sym, Some(report)))
}
