//! The stages of a bind before memory: the graph to run (gradients, copy nodes, placement,
//! inference), then the arrays the caller owns (arguments, auxiliary states, gradients).

use std::collections::HashMap;
use std::sync::Arc;

use storage::Context;

use super::memory::Blocks;
use super::{BindOptions, GradReq};
use crate::error::{invalid, NdError, Result};
use crate::ops::StateUse;
use crate::plan::{assign_aliases, training_bound, Aliases, GraphDesc};
use crate::resources::OpState;
use crate::symbol::fuse::{self, FusionReport};
use crate::symbol::mirror::{self, Mirror, MirrorReport};
use crate::symbol::{gradient, head_grad_names, infer, place, Inferred, Placed};
use crate::{DType, NDArray, Runtime, Symbol};

/// The graph a bind runs: the symbol's outputs followed by the requested gradients, with copy
/// nodes, a device per node, and every shape and dtype.
pub(super) struct FullGraph {
    pub(super) symbol: Symbol,
    pub(super) inferred: Inferred,
    /// The device of each node.
    pub(super) devices: Vec<Context>,
    /// The device of each entry.
    pub(super) entry_device: Vec<Context>,
    /// The symbol's own outputs (the rest are gradients).
    pub(super) num_outputs: usize,
    /// Arguments differentiated, in gradient-output order.
    pub(super) wrt: Vec<String>,
    /// Head-gradient arguments, in output order (empty without gradients).
    pub(super) head_names: Vec<String>,
    /// What the recomputation pass chose, when it ran.
    pub(super) mirror: Option<MirrorReport>,
    /// What the fusion pass fused.
    pub(super) fusion: FusionReport,
}

impl FullGraph {
    /// Each entry's device as a small integer (equal devices, equal ids).
    pub(super) fn entry_device_ids(&self) -> Vec<usize> {
        let mut distinct: Vec<Context> = vec![];
        self.entry_device
            .iter()
            .map(|d| match distinct.iter().position(|x| x == d) {
                Some(i) => i,
                None => {
                    distinct.push(*d);
                    distinct.len() - 1
                }
            })
            .collect()
    }

    /// The nodes the forward pass runs: what the symbol's own outputs need.
    pub(super) fn forward_nodes(&self) -> Vec<bool> {
        let g = &self.inferred.graph;
        g.needed_by(&g.outputs[..self.num_outputs])
    }

    /// The kept state of each node ([`OpState`]): one for each forward node of an op that
    /// keeps state, shared with the backward node that reads it — the backward node of that op
    /// whose last inputs are the forward node's inputs, with the same attributes, when exactly
    /// one forward node answers that (twins with the same inputs draw different dropout masks,
    /// so an ambiguous backward node keeps nothing and recomputes, or refuses with dropout).
    /// Only with gradients and when both nodes run on the same device. Every other forward node
    /// of such an op on a CPU gets one of its own, unpaired (what it keeps between passes, the
    /// RNN's packed weights); any other node gets none.
    pub(super) fn kept_states(&self, rt: &Runtime) -> Vec<Option<OpState>> {
        let g = &self.inferred.graph;
        let mut states: Vec<Option<OpState>> = vec![None; g.nodes.len()];
        let forward = self.forward_nodes();
        let keeps = |i: usize| g.nodes[i].op.is_some_and(|d| d.state == StateUse::Keeps);
        if !self.wrt.is_empty() {
            self.pair_states(rt, &forward, &mut states);
        }
        for (i, state) in states.iter_mut().enumerate() {
            if state.is_none() && forward[i] && keeps(i) && self.devices[i].is_cpu() {
                *state = Some(OpState::new(rt.engine().new_var(), false));
            }
        }
        states
    }

    /// The paired states of [`Self::kept_states`].
    fn pair_states(&self, rt: &Runtime, forward: &[bool], states: &mut [Option<OpState>]) {
        let g = &self.inferred.graph;
        for (j, bw) in g.nodes.iter().enumerate() {
            let Some(StateUse::ReadsOf(op)) = bw.op.map(|d| d.state) else {
                continue;
            };
            let ins = &g.inputs[j];
            let mut pairs = (0..g.nodes.len()).filter(|&i| {
                let n = &g.nodes[i];
                forward[i]
                    && n.op
                        .is_some_and(|d| d.name == op && d.state == StateUse::Keeps)
                    && n.attrs == bw.attrs
                    && ins.ends_with(&g.inputs[i])
            });
            let (Some(i), None) = (pairs.next(), pairs.next()) else {
                continue;
            };
            if self.devices[i] != self.devices[j] {
                continue;
            }
            let state = states[i]
                .get_or_insert_with(|| OpState::new(rt.engine().new_var(), true))
                .clone();
            states[j] = Some(state);
        }
    }
}

/// Gradient pass (for the arguments with a request), copy nodes, placement and inference.
pub(super) fn full_graph(
    symbol: &Symbol,
    ctx: Context,
    shapes: &HashMap<String, Vec<usize>>,
    given: &HashMap<String, NDArray>,
    opts: &BindOptions,
) -> Result<FullGraph> {
    let args = symbol.list_arguments();
    if let Some(bad) = opts.grad_req.keys().find(|k| !args.contains(k)) {
        return Err(invalid(
            "bind",
            format!("grad_req names '{bad}', which is not an argument"),
        ));
    }
    let wrt: Vec<String> = args
        .iter()
        .filter(|a| opts.grad_req.get(*a).is_some_and(|r| *r != GradReq::Null))
        .cloned()
        .collect();
    let num_outputs = symbol.outputs().len();
    // Fused ops run on the CPU: graphs placed on other devices are left as they are.
    let fusing = match opts.fusion {
        Some(f) => f,
        None => fuse::enabled_from_env()?,
    } && opts.group2ctx.is_empty()
        && ctx.is_cpu();
    let (fused, fusion) = match fusing {
        true => fuse::apply(symbol, wrt.is_empty())?,
        false => (symbol.clone(), FusionReport::default()),
    };
    let symbol = &fused;
    // Given arrays fix their own shapes and dtypes.
    let mut dtypes: HashMap<String, DType> =
        given.iter().map(|(k, v)| (k.clone(), v.dtype())).collect();
    let mut shapes = shapes.clone();
    shapes.extend(given.iter().map(|(k, v)| (k.clone(), v.shape().to_vec())));
    let mut head_names = vec![];
    let mut mirror_report = None;
    let full = if wrt.is_empty() {
        symbol.clone()
    } else {
        // Head gradients take their output's shape and dtype.
        let forward = infer(symbol, &shapes, &dtypes)?;
        let (out_shapes, out_dtypes) = (forward.output_shapes(), forward.output_dtypes());
        let full = gradient(symbol, &wrt)?;
        // A head gradient no gradient depends on (the output of `BlockGrad`, `floor`, ...) is
        // not an argument of the full graph; `backward_with` still takes it, and drops it.
        let arguments = full.list_arguments();
        for (name, i) in head_grad_names(symbol) {
            if arguments.contains(&name) {
                shapes.insert(name.clone(), out_shapes[i].clone());
                dtypes.insert(name.clone(), out_dtypes[i]);
            }
            head_names.push(name);
        }
        let policy = match opts.mirror {
            Some(m) => m,
            None => Mirror::from_env()?,
        };
        let bound = |g: &Symbol| training_bound(g, num_outputs, &shapes, &dtypes);
        let (full, report) = mirror::apply(&full, num_outputs, &shapes, &dtypes, policy, &bound)?;
        mirror_report = report;
        full
    };
    let (full, fusion) = match fusing {
        true => {
            let (full, elementwise) = fuse::apply_elementwise(&full, num_outputs)?;
            (
                full,
                FusionReport {
                    fused: [fusion.fused, elementwise.fused].concat(),
                },
            )
        }
        false => (full, fusion),
    };
    // Each output gets storage of its own (MXNet's copy nodes), then every node a device.
    let full = full.with_copy_nodes()?;
    let placed = if opts.group2ctx.is_empty() {
        let devices = vec![ctx; full.indexed().nodes.len()];
        Placed {
            symbol: full,
            devices,
        }
    } else {
        // Gradients are wanted where their arguments live.
        let first = place(&full, &opts.group2ctx, ctx, &[])?;
        let g = first.symbol.indexed();
        let mut var_device: HashMap<&str, Context> = HashMap::new();
        for (i, n) in g.nodes.iter().enumerate().filter(|(_, n)| n.is_variable()) {
            var_device
                .entry(n.name.as_str())
                .or_insert(first.devices[i]);
        }
        let wanted: Vec<Option<Context>> = (0..num_outputs)
            .map(|_| None)
            .chain(wrt.iter().map(|a| var_device.get(a.as_str()).copied()))
            .collect();
        place(&full, &opts.group2ctx, ctx, &wanted)?
    };
    let inferred = infer(&placed.symbol, &shapes, &dtypes)?;
    let g = &inferred.graph;
    let entry_device = (0..g.nodes.len())
        .flat_map(|i| std::iter::repeat_n(placed.devices[i], g.nodes[i].num_outputs()))
        .collect();
    Ok(FullGraph {
        symbol: placed.symbol,
        inferred,
        devices: placed.devices,
        entry_device,
        num_outputs,
        wrt,
        head_names,
        mirror: mirror_report,
        fusion,
    })
}

/// What the memory plan leaves alone, and what it keeps.
pub(super) struct Layout {
    /// Entries that are not planned: variables, `write` gradients (the gradient arrays), and
    /// entries an assignment keeps in its variable.
    pub(super) external: Vec<bool>,
    /// Internal entries kept to the end of a pass (outputs, `add` gradients added after it).
    pub(super) kept: Vec<usize>,
    /// Assignments (NNVM's cases).
    pub(super) aliases: Aliases,
    /// Per differentiated argument (in `wrt` order), the backward node after which its `add`
    /// gradient is added into the gradient array, within the pass. `None`: a `write` or `null`
    /// request, or a gradient no backward node makes (added after the pass, from a kept entry).
    pub(super) add_after: Vec<Option<usize>>,
}

/// The layout of `full` under `opts`: needs no arrays, so memory can be planned before any is
/// allocated.
pub(super) fn layout(full: &FullGraph, opts: &BindOptions) -> Layout {
    let g = &full.inferred.graph;
    let mut external = vec![false; g.num_entries()];
    for (i, _) in g.nodes.iter().enumerate().filter(|(_, n)| n.is_variable()) {
        external[g.entry(i, 0)] = true;
    }
    let mut kept: Vec<usize> = g.outputs[..full.num_outputs]
        .iter()
        .map(|&(n, k)| g.entry(n, k))
        .collect();
    // An `add` gradient made by a backward node is added into the gradient array right after
    // that node, in the same pass, so its entry lives only until then (MXNet's kAddTo writes it
    // there directly); one made elsewhere (a variable, a forward node, an assignment) is kept to
    // the end and added after the pass.
    let forward = full.forward_nodes();
    let mut add_after = vec![None; full.wrt.len()];
    for (k, name) in full.wrt.iter().enumerate() {
        let (node, i) = g.outputs[full.num_outputs + k];
        let made_in_backward = g.nodes[node]
            .op
            .is_some_and(|def| def.assign.is_empty() && !forward[node]);
        match opts.grad_req[name] {
            GradReq::Write => external[g.entry(node, i)] = true,
            GradReq::Add if made_in_backward => add_after[k] = Some(node),
            _ => kept.push(g.entry(node, i)),
        }
    }
    let desc = GraphDesc::of(&full.inferred, external.clone(), kept.clone());
    let aliases = assign_aliases(&desc, &full.entry_device_ids());
    for &(e, _) in &aliases.entries {
        external[e] = true;
    }
    Layout {
        external,
        kept,
        aliases,
        add_after,
    }
}

/// Bytes per device of the arrays a bind allocates for good: variables not given and gradient
/// arrays not given.
pub(super) fn long_lived_bytes(
    full: &FullGraph,
    given: &HashMap<String, NDArray>,
    opts: &BindOptions,
) -> Vec<(Context, u64)> {
    let (inf, g) = (&full.inferred, &full.inferred.graph);
    let mut out: Vec<(Context, u64)> = vec![];
    let mut add = |dev: Context, e: usize| {
        let b = Blocks::bytes_of(&inf.shapes[e], inf.dtypes[e]);
        match out.iter_mut().find(|(c, _)| *c == dev) {
            Some((_, total)) => *total += b,
            None => out.push((dev, b)),
        }
    };
    for (i, node) in g.nodes.iter().enumerate().filter(|(_, n)| n.is_variable()) {
        if !given.contains_key(&node.name) {
            add(full.devices[i], g.entry(i, 0));
        }
    }
    for (k, name) in full.wrt.iter().enumerate() {
        let (node, i) = g.outputs[full.num_outputs + k];
        let e = g.entry(node, i);
        if !opts.grad_arrays.contains_key(name) {
            add(full.entry_device[e], e);
        }
    }
    out
}

/// The arrays a bind owns or was given.
pub(super) struct BoundArrays {
    /// Per entry: the array it is (variables, `write` gradients), or `None` (planned).
    pub(super) bound: Vec<Option<NDArray>>,
    /// Gradient arrays with their requests.
    pub(super) grads: Vec<(String, NDArray, GradReq)>,
}

fn mismatch(arg: String, a: &NDArray, shape: &[usize], dtype: DType, dev: Context) -> NdError {
    NdError::Shape {
        op: "bind".into(),
        arg,
        found: a.shape().to_vec(),
        expected: format!(
            "shape {shape:?}, dtype {dtype} on {dev} (it is {} on {})",
            a.dtype(),
            a.ctx()
        ),
    }
}

/// Variables (given arrays, checked, or fresh ones from the top of their device's block: zeros,
/// `*_var` auxiliary states ones as BatchNorm expects) and gradients: `write` gradients are
/// computed straight into the gradient array; `add` gradients into a planned entry, then added
/// into the gradient array (see [`Layout::add_after`]). Entries an assignment keeps in a variable
/// are that variable's array.
pub(super) fn bind_arrays(
    rt: &Arc<Runtime>,
    full: &FullGraph,
    layout: &Layout,
    given: &mut HashMap<String, NDArray>,
    opts: &BindOptions,
    blocks: &mut Blocks,
) -> Result<BoundArrays> {
    let (inf, g) = (&full.inferred, &full.inferred.graph);
    let aux_names = full.symbol.list_auxiliary_states();
    let mut bound: Vec<Option<NDArray>> = vec![None; g.num_entries()];
    for (i, node) in g.nodes.iter().enumerate().filter(|(_, v)| v.is_variable()) {
        let e = g.entry(i, 0);
        let (shape, dtype, dev) = (&inf.shapes[e], inf.dtypes[e], full.devices[i]);
        bound[e] = Some(match given.remove(&node.name) {
            Some(a) if a.shape() == shape.as_slice() && a.dtype() == dtype && a.ctx() == dev => a,
            Some(a) => return Err(mismatch(node.name.clone(), &a, shape, dtype, dev)),
            None => {
                let one = aux_names.contains(&node.name) && node.name.ends_with("var");
                blocks.long_lived(rt, shape, dtype, dev, if one { 1.0 } else { 0.0 })?
            }
        });
    }
    if let Some(name) = given.keys().next() {
        return Err(invalid(
            "bind",
            format!("array '{name}' names no argument or auxiliary state of the symbol"),
        ));
    }
    let mut given_grads = opts.grad_arrays.clone();
    if let Some(bad) = given_grads.keys().find(|k| !full.wrt.contains(k)) {
        return Err(invalid(
            "bind",
            format!("a gradient array is given for '{bad}', which has no gradient request"),
        ));
    }
    let mut grads = vec![];
    for (k, name) in full.wrt.iter().enumerate() {
        let (node, i) = g.outputs[full.num_outputs + k];
        let e = g.entry(node, i);
        let (shape, dtype, dev) = (&inf.shapes[e], inf.dtypes[e], full.entry_device[e]);
        let grad = match given_grads.remove(name) {
            Some(a) if a.shape() == shape.as_slice() && a.dtype() == dtype && a.ctx() == dev => a,
            Some(a) => {
                return Err(mismatch(
                    format!("gradient of '{name}'"),
                    &a,
                    shape,
                    dtype,
                    dev,
                ))
            }
            None => blocks.long_lived(rt, shape, dtype, dev, 0.0)?,
        };
        let req = opts.grad_req[name];
        if req == GradReq::Write {
            bound[e] = Some(grad.clone());
        }
        grads.push((name.clone(), grad, req));
    }
    for &(e, var) in &layout.aliases.entries {
        bound[e] = bound[var].clone();
    }
    Ok(BoundArrays { bound, grads })
}
