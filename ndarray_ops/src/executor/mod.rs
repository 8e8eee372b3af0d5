//! Binds a symbol to arrays on a device and runs it: one engine op per node, in graph order,
//! through the same op registry as the imperative API, pushed through a bulk pusher.
//!
//! Memory: arguments, auxiliary states and `write` gradients are the bound arrays themselves;
//! every other entry lives in one planned arena per device (see [`memory`]): in-place sharing as
//! [`crate::plan`] decides it, offsets from a `storage::plan` solver, and engine dependencies
//! wherever two buffers share addresses, so the plan is safe on the threaded engines. With
//! [`MemoryPlanning::NoReuse`] every entry gets its own block instead (the reference).

mod bind;
mod memory;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use storage::plan::SolverKind;
use storage::Context;

use crate::error::{invalid, shape_error, some_names, NdError, Result};
use crate::imperative::{prepare, Invocation};
use crate::ops::{Attrs, GradReq, IS_TRAIN};
use crate::resources::OpState;
use crate::symbol::fuse::FusionReport;
use crate::symbol::mirror::{Mirror, MirrorReport};
use crate::symbol::Inferred;
use crate::{NDArray, Runtime, Symbol};

use memory::Arena;

/// How a bound graph's internal entries get memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryPlanning {
    /// One arena per device, laid out by this solver (in-place sharing and reuse).
    Arena(SolverKind),
    /// Every entry in a block of its own (no sharing at all): the reference for the arena.
    NoReuse,
}

impl Default for MemoryPlanning {
    /// The strong solver with a 20 ms budget (it stops early near the lower bound).
    fn default() -> Self {
        MemoryPlanning::Arena(SolverKind::Strong(Duration::from_millis(20)))
    }
}

/// Options of [`Executor::bind_with_options`].
#[derive(Clone, Debug, Default)]
pub struct BindOptions {
    /// How internal entries get memory.
    pub memory: MemoryPlanning,
    /// Gradient requests by argument name (arguments not named get none). Empty: no backward.
    pub grad_req: HashMap<String, GradReq>,
    /// Devices of context groups (nodes' `__ctx_group__` attribute) for model parallelism.
    /// Empty: every node on the bind's context.
    pub group2ctx: HashMap<String, Context>,
    /// Gradient arrays to write (or add) into, by argument name; the others are allocated.
    pub grad_arrays: HashMap<String, NDArray>,
    /// Recomputation of forward entries during backward, with gradients (see
    /// [`crate::symbol::mirror`]). `None`: as `MXRS_BACKWARD_MIRROR` says (off when unset).
    pub mirror: Option<Mirror>,
    /// Operator fusion (see [`crate::symbol::fuse`]). `None`: as `MXRS_FUSION` says (on when
    /// unset).
    pub fusion: Option<bool>,
}

/// A symbol bound to arrays.
pub struct Executor {
    rt: Arc<Runtime>,
    ctx: Context,
    symbol: Symbol,
    inferred: Inferred,
    /// One array per entry (variables: the bound argument or auxiliary array).
    entries: Vec<NDArray>,
    arg_names: Vec<String>,
    aux_names: Vec<String>,
    /// Graph outputs that are the symbol's own (the rest are gradients).
    num_outputs: usize,
    /// With a gradient graph: which nodes the forward pass runs.
    forward_nodes: Option<Vec<bool>>,
    /// Nodes with nothing to run (assignments whose value was computed in place).
    skip: Vec<bool>,
    /// The head-gradient arguments, in output order (with gradients).
    head_names: Vec<String>,
    /// Each node's attributes for inference and for training (`__is_train__` set), made once.
    node_attrs: Vec<[Attrs; 2]>,
    /// Gradient arrays of the arguments differentiated, with their requests.
    grads: Vec<(String, NDArray, GradReq)>,
    /// Per gradient, the backward node after which an `add` gradient is added (see
    /// `bind::Layout::add_after`).
    add_after: Vec<Option<usize>>,
    /// The same by node: the gradients added right after it (so a pass does not search every
    /// gradient at every node).
    adds_at: Vec<Vec<usize>>,
    /// The device of each node.
    devices: Vec<Context>,
    /// What each forward node of a stateful op keeps for its backward node, given to both.
    states: Vec<Option<OpState>>,
    /// Per node, bit `k` set where nothing reads its output `k` (see [`unread_outputs`]).
    unread: Vec<u64>,
    /// The planned arena of each device (none with [`MemoryPlanning::NoReuse`]).
    arenas: Vec<Arena>,
    /// Memory figures per device.
    memory: Vec<(Context, MemoryReport)>,
    /// What the recomputation pass chose, when it ran.
    mirror: Option<MirrorReport>,
    /// What the fusion pass fused at bind.
    fusion: FusionReport,
    /// The pass pushed last, which decides whether a backward pass may run.
    last: Mutex<LastPass>,
}

/// The pass an executor pushed last. A backward pass differentiates the forward pass before
/// it, reading the entries that pass wrote, and the memory plan lets the backward pass reuse
/// their memory once their last reader has run: so each backward pass needs a forward pass of
/// its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LastPass {
    /// Nothing since the bind (or a pass that failed while pushing).
    Nothing,
    /// A forward pass, in training or not: a backward pass may follow.
    Forward,
    /// A backward pass, which may have overwritten the forward entries it read.
    Backward,
}

/// Memory figures of a bound graph's internal entries (arguments, auxiliary states and bound
/// gradients excluded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// Every internal entry in its own block.
    pub no_reuse_bytes: u64,
    /// The planner's arena for the bound graph (forward, and backward when bound with gradients),
    /// by the solver the executor was bound with (greedy by size when it was bound without reuse).
    pub planned_bytes: u64,
    /// The lower bound for that graph's liveness after in-place sharing.
    pub lower_bound_bytes: u64,
    /// What the executor holds for internal entries: the arena, or every block without reuse.
    pub allocated_bytes: u64,
    /// Bytes of the arrays the bind allocated for good (weights, auxiliary states, gradients),
    /// taken from the top of the arena's block (64-byte aligned sizes).
    pub long_lived_bytes: u64,
    /// Internal entries.
    pub entries: usize,
    /// Entries sharing an input's buffer.
    pub inplace: usize,
}

/// Per node of `g`, bit `k` set where no node reads its output `k` and it is no output of the
/// graph: a gradient nobody asked for (an input's, with `grad_req` null), which the kernel may
/// leave unwritten. (The first 64 outputs of a node; others count as read.)
fn unread_outputs(g: &crate::symbol::IndexedGraph) -> Vec<u64> {
    let mut read = vec![false; g.num_entries()];
    for &(n, k) in g.inputs.iter().flatten().chain(&g.outputs) {
        read[g.entry(n, k)] = true;
    }
    g.nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (0..n.num_outputs().min(64))
                .filter(|&k| !read[g.entry(i, k)])
                .fold(0u64, |bits, k| bits | 1 << k)
        })
        .collect()
}

impl Executor {
    /// Infers every shape from `shapes` (by argument name), allocates arguments (zeros),
    /// auxiliary states (zeros; `*_var` states ones, as BatchNorm expects) and the arena.
    pub fn simple_bind(
        rt: &Arc<Runtime>,
        ctx: Context,
        symbol: &Symbol,
        shapes: &HashMap<String, Vec<usize>>,
    ) -> Result<Executor> {
        Executor::bind_with_options(
            rt,
            ctx,
            symbol,
            shapes,
            HashMap::new(),
            &BindOptions::default(),
        )
    }

    /// Binds given arrays (arguments and auxiliary states by name); shapes of the rest are
    /// inferred from them, and those arrays are allocated as in [`Executor::simple_bind`].
    pub fn bind(
        rt: &Arc<Runtime>,
        ctx: Context,
        symbol: &Symbol,
        arrays: HashMap<String, NDArray>,
    ) -> Result<Executor> {
        Executor::bind_with_options(
            rt,
            ctx,
            symbol,
            &HashMap::new(),
            arrays,
            &BindOptions::default(),
        )
    }

    /// Like [`Executor::simple_bind`], plus the gradient graph: `backward` computes the gradients
    /// of the arguments whose request is not `Null` (arguments not named are `Null`). Loss ops
    /// (SoftmaxOutput) start their own gradient; other outputs take head gradients, arguments
    /// named `<node>_head_grad<k>` (set them through `arg_dict`).
    pub fn simple_bind_grad(
        rt: &Arc<Runtime>,
        ctx: Context,
        symbol: &Symbol,
        shapes: &HashMap<String, Vec<usize>>,
        grad_req: &HashMap<String, GradReq>,
    ) -> Result<Executor> {
        let opts = BindOptions {
            grad_req: grad_req.clone(),
            ..BindOptions::default()
        };
        Executor::bind_with_options(rt, ctx, symbol, shapes, HashMap::new(), &opts)
    }

    /// The general bind: shapes for arguments not given, given arrays (arguments and auxiliary
    /// states by name), and options (gradients, memory planning, device placement). `ctx` is the
    /// default device: every node without a context group, and none placed by propagation.
    pub fn bind_with_options(
        rt: &Arc<Runtime>,
        ctx: Context,
        symbol: &Symbol,
        shapes: &HashMap<String, Vec<usize>>,
        mut given: HashMap<String, NDArray>,
        opts: &BindOptions,
    ) -> Result<Executor> {
        let full = bind::full_graph(symbol, ctx, shapes, &given, opts)?;
        let g = &full.inferred.graph;
        // Plan first, then take one block per device for the arena and the long-lived arrays.
        let layout = bind::layout(&full, opts);
        let long_lived = bind::long_lived_bytes(&full, &given, opts);
        let plans = memory::plan(
            &full,
            &layout.external,
            &layout.kept,
            &long_lived,
            opts.memory,
        )?;
        let mut blocks = memory::Blocks::new(rt, &plans, opts.memory)?;
        let arrays = bind::bind_arrays(rt, &full, &layout, &mut given, opts, &mut blocks)?;
        let mut skip = vec![false; g.nodes.len()];
        for &t in &layout.aliases.noops {
            skip[t] = true;
        }
        let memory = memory::allocate(rt, &full, arrays.bound, plans, &blocks)?;
        let forward_nodes = (!full.wrt.is_empty()).then(|| full.forward_nodes());
        let states = full.kept_states(rt);
        let unread = unread_outputs(g);
        let mut adds_at = vec![Vec::new(); g.nodes.len()];
        for (k, node) in layout.add_after.iter().enumerate() {
            if let Some(node) = node {
                adds_at[*node].push(k);
            }
        }
        let node_attrs = g
            .nodes
            .iter()
            .map(|n| {
                [false, true].map(|train| match n.op {
                    Some(_) => n.attrs.clone().with(IS_TRAIN, train),
                    None => Attrs::new(),
                })
            })
            .collect();
        let (arg_names, aux_names) = (
            full.symbol.list_arguments(),
            full.symbol.list_auxiliary_states(),
        );
        Ok(Executor {
            rt: rt.clone(),
            ctx,
            symbol: full.symbol,
            inferred: full.inferred,
            devices: full.devices,
            states,
            unread,
            entries: memory.entries,
            arg_names,
            aux_names,
            num_outputs: full.num_outputs,
            forward_nodes,
            skip,
            head_names: full.head_names,
            node_attrs,
            grads: arrays.grads,
            adds_at,
            add_after: layout.add_after,
            arenas: memory.arenas,
            memory: memory.reports,
            mirror: full.mirror,
            fusion: full.fusion,
            last: Mutex::new(LastPass::Nothing),
        })
    }

    /// Pushes one op per node; returns at once (wait on the outputs). `is_train` selects training
    /// behaviour (batch statistics in BatchNorm, dropout masks).
    pub fn forward(&self, is_train: bool) -> Result<()> {
        let mut last = self.last.lock();
        *last = LastPass::Nothing;
        self.run_nodes(is_train, true)?;
        *last = LastPass::Forward;
        Ok(())
    }

    /// Pushes the backward nodes, then writes or adds each argument's gradient into its gradient
    /// array: the gradient of the forward pass pushed last (normally `forward(true)`; after
    /// `forward(false)`, of the inference pass). Each backward pass needs a forward pass of its
    /// own, after the bind and after the backward pass before it; otherwise it is refused,
    /// nothing pushed.
    pub fn backward(&self) -> Result<()> {
        let mut last = self.last.lock();
        self.check_backward(*last)?;
        self.run_backward(&mut last)
    }

    /// The backward pass itself, once [`Executor::check_backward`] has let it through (the
    /// caller holding `last` from the check to here).
    fn run_backward(&self, last: &mut LastPass) -> Result<()> {
        *last = LastPass::Backward;
        self.run_nodes(true, false)?;
        let g = &self.inferred.graph;
        for (k, (_, grad, req)) in self.grads.iter().enumerate() {
            if *req == GradReq::Add && self.add_after[k].is_none() {
                let (n, i) = g.outputs[self.num_outputs + k];
                grad.add_inplace(&self.entries[g.entry(n, i)])?;
            }
        }
        Ok(())
    }

    /// [`Executor::backward`] with head gradients: `head_grads[k]` is copied into the head
    /// gradient of the `k`-th output that takes one (outputs of loss ops take none), as MXNet's
    /// `backward(out_grads)`.
    pub fn backward_with(&self, head_grads: &[NDArray]) -> Result<()> {
        if self.head_names.len() != head_grads.len() {
            return Err(invalid(
                "backward",
                format!(
                    "{} head gradients given; the outputs take {}",
                    head_grads.len(),
                    self.head_names.len()
                ),
            ));
        }
        let mut last = self.last.lock();
        self.check_backward(*last)?;
        let args = self.arg_dict();
        for (src, name) in head_grads.iter().zip(&self.head_names) {
            // A head no gradient depends on is not bound; it is dropped.
            if let Some(dst) = args.get(name) {
                src.copy_into(dst)?;
            }
        }
        self.run_backward(&mut last)
    }

    /// Refuses a backward pass the executor cannot run: bound without gradients (or with every
    /// request null), or with no forward pass since the bind or the last backward pass.
    fn check_backward(&self, last: LastPass) -> Result<()> {
        if self.forward_nodes.is_none() {
            return Err(invalid(
                "backward",
                "the executor computes no gradients: it was bound without gradients \
                 (simple_bind), or with every grad_req null",
            ));
        }
        let before = match last {
            LastPass::Forward => return Ok(()),
            LastPass::Nothing => "no forward pass has run since the bind",
            LastPass::Backward => {
                "a backward pass already ran since the last forward pass, and the memory plan \
                 lets it reuse the forward entries it read"
            }
        };
        Err(invalid(
            "backward",
            format!("each backward pass needs a forward pass of its own; {before}"),
        ))
    }

    /// Gradient arrays by argument name.
    pub fn grad_dict(&self) -> HashMap<String, NDArray> {
        self.grads
            .iter()
            .map(|(n, g, _)| (n.clone(), g.clone()))
            .collect()
    }

    /// Pushes the nodes of one pass in order through a bulk pusher, so runs of consecutive
    /// CPU nodes (up to the engine's bulk size) are scheduled as one unit, as MXNet's executor
    /// bulks segments of its graph.
    fn run_nodes(&self, is_train: bool, forward: bool) -> Result<()> {
        let g = &self.inferred.graph;
        let engine = self.rt.engine();
        // Arenas are locked in one order (by device), so concurrent passes cannot deadlock.
        let mut passes: Vec<_> = self.arenas.iter().map(Arena::pass).collect();
        let mut bulk = engine.bulk();
        for (i, n) in g.nodes.iter().enumerate() {
            let Some(def) = n.op.filter(|_| !self.skip[i]) else {
                continue;
            };
            if let Some(mask) = &self.forward_nodes {
                if mask[i] != forward {
                    continue;
                }
            }
            let inputs: Vec<&NDArray> = g.inputs[i]
                .iter()
                .map(|&(s, k)| &self.entries[g.entry(s, k)])
                .collect();
            let outputs: Vec<&NDArray> = (0..n.num_outputs())
                .map(|k| &self.entries[g.entry(i, k)])
                .collect();
            let at_node = |e: NdError| {
                invalid(
                    if forward { "forward" } else { "backward" },
                    format!("node '{}': {e}", n.name),
                )
            };
            let deps: Vec<_> = passes.iter_mut().flat_map(|p| p.reuse_deps(i)).collect();
            if def.name == "_CrossDeviceCopy" {
                let op = inputs[0]
                    .copy_op(outputs[0], "_CrossDeviceCopy")
                    .map_err(at_node)?;
                bulk.push(op.writes(&deps)).map_err(|e| at_node(e.into()))?;
            } else {
                let attrs = &self.node_attrs[i][usize::from(is_train)];
                let ctx = self.devices[i];
                let call = Invocation {
                    name: def.name,
                    inputs: &inputs,
                    attrs,
                    out: Some(&outputs),
                    also_writes: &deps,
                    state: self.states[i].as_ref(),
                    unread: self.unread[i],
                };
                prepare(&self.rt, ctx, call, |op| bulk.push(op)).map_err(at_node)?;
            }
            // `add` gradients this node made go into their arrays before anything can reuse
            // the entry's memory: a later node taking those addresses writes the entry's var,
            // so it waits for this read.
            for &k in &self.adds_at[i] {
                let grad = &self.grads[k].1;
                let (n, out) = g.outputs[self.num_outputs + k];
                let entry = &self.entries[g.entry(n, out)];
                let call = Invocation {
                    name: "elemwise_add",
                    inputs: &[grad, entry],
                    attrs: &Attrs::new(),
                    out: Some(&[grad]),
                    also_writes: &[],
                    state: None,
                    unread: 0,
                };
                prepare(&self.rt, grad.ctx(), call, |add| bulk.push(add)).map_err(at_node)?;
            }
        }
        bulk.flush()?;
        Ok(())
    }

    /// The symbol's outputs.
    pub fn outputs(&self) -> Vec<NDArray> {
        let g = &self.inferred.graph;
        g.outputs[..self.num_outputs]
            .iter()
            .map(|&(n, k)| self.entries[g.entry(n, k)].clone())
            .collect()
    }

    fn variable(&self, name: &str) -> Option<&NDArray> {
        let g = &self.inferred.graph;
        let i = g
            .nodes
            .iter()
            .position(|n| n.is_variable() && n.name == name)?;
        self.entries.get(g.entry(i, 0))
    }

    /// Arguments by name.
    pub fn arg_dict(&self) -> HashMap<String, NDArray> {
        self.arg_names
            .iter()
            .filter_map(|n| Some((n.clone(), self.variable(n)?.clone())))
            .collect()
    }

    /// Auxiliary states by name.
    pub fn aux_dict(&self) -> HashMap<String, NDArray> {
        self.aux_names
            .iter()
            .filter_map(|n| Some((n.clone(), self.variable(n)?.clone())))
            .collect()
    }

    /// Copies values into the bound arguments and auxiliary states by name (MXNet's
    /// `copy_params_from`), e.g. a checkpoint's (see [`crate::ndfile::load_checkpoint`]); they
    /// may be on any device. Each must have its array's shape and dtype. A name the symbol does
    /// not have is an error unless `allow_extra` (a checkpoint of a larger model); arrays not
    /// named keep their values. Everything is checked before anything is copied.
    pub fn copy_params_from(
        &self,
        arg_params: &HashMap<String, NDArray>,
        aux_params: &HashMap<String, NDArray>,
        allow_extra: bool,
    ) -> Result<()> {
        let mut copies = Vec::with_capacity(arg_params.len() + aux_params.len());
        for (kind, names, params) in [
            ("argument", &self.arg_names, arg_params),
            ("auxiliary state", &self.aux_names, aux_params),
        ] {
            for (name, value) in params {
                let bound = names
                    .iter()
                    .any(|n| n == name)
                    .then(|| self.variable(name))
                    .flatten();
                let Some(dst) = bound else {
                    if allow_extra {
                        continue;
                    }
                    return Err(invalid(
                        "copy_params_from",
                        format!(
                            "{kind} {name:?} is not one of the symbol's ({})",
                            some_names(names.iter().map(String::as_str))
                        ),
                    ));
                };
                if dst.shape() != value.shape() || dst.dtype() != value.dtype() {
                    return Err(shape_error(
                        "copy_params_from",
                        format!("{kind} {name:?}"),
                        value.shape(),
                        format!(
                            "{:?} ({}) as bound (the value given is {})",
                            dst.shape(),
                            dst.dtype(),
                            value.dtype()
                        ),
                    ));
                }
                copies.push((value, dst));
            }
        }
        for (value, dst) in copies {
            value.copy_into(dst)?;
        }
        Ok(())
    }

    /// The runtime and device it runs on.
    pub fn context(&self) -> (&Arc<Runtime>, Context) {
        (&self.rt, self.ctx)
    }

    /// The symbol it runs.
    pub fn symbol(&self) -> &Symbol {
        &self.symbol
    }

    /// Memory of the internal entries, summed over devices: without reuse, as planned, the
    /// bound, and what is held.
    pub fn memory_report(&self) -> MemoryReport {
        let mut total = MemoryReport {
            no_reuse_bytes: 0,
            planned_bytes: 0,
            lower_bound_bytes: 0,
            allocated_bytes: 0,
            long_lived_bytes: 0,
            entries: 0,
            inplace: 0,
        };
        for (_, m) in &self.memory {
            total.no_reuse_bytes += m.no_reuse_bytes;
            total.planned_bytes += m.planned_bytes;
            total.lower_bound_bytes += m.lower_bound_bytes;
            total.allocated_bytes += m.allocated_bytes;
            total.long_lived_bytes += m.long_lived_bytes;
            total.entries += m.entries;
            total.inplace += m.inplace;
        }
        total
    }

    /// Memory of the internal entries on each device the graph uses.
    pub fn memory_by_device(&self) -> Vec<(Context, MemoryReport)> {
        self.memory.clone()
    }

    /// What recomputation during backward was chosen at bind (`None`: bound without it).
    pub fn mirror_report(&self) -> Option<&MirrorReport> {
        self.mirror.as_ref()
    }

    /// What operator fusion fused at bind (empty when it was off or found nothing).
    pub fn fusion_report(&self) -> &FusionReport {
        &self.fusion
    }

    /// The device of every node of [`Executor::symbol`]'s indexed graph (model parallelism).
    pub fn node_devices(&self) -> Vec<(String, Context)> {
        let g = &self.inferred.graph;
        g.nodes
            .iter()
            .zip(&self.devices)
            .map(|(n, &d)| (n.name.clone(), d))
            .collect()
    }

    /// Every node with its op, output shapes and bytes.
    pub fn debug_str(&self) -> String {
        let g = &self.inferred.graph;
        let mut s = String::new();
        for (i, n) in g.nodes.iter().enumerate() {
            let outs: Vec<String> = (0..n.num_outputs())
                .map(|k| {
                    let e = g.entry(i, k);
                    let bytes = self.inferred.shapes[e].iter().product::<usize>()
                        * self.inferred.dtypes[e].size();
                    format!(
                        "{:?} {} ({} B)",
                        self.inferred.shapes[e], self.inferred.dtypes[e], bytes
                    )
                })
                .collect();
            let fused = n
                .attrs
                .get(crate::symbol::fuse::FUSED_ATTR)
                .map_or(String::new(), |names| format!(" (fuses {names})"));
            s += &format!(
                "#{i:<4} {:<16} {:<40} -> {}{fused}\n",
                n.op_name(),
                n.name,
                outs.join(", ")
            );
        }
        let m = &self.memory_report();
        s += &format!(
            "internal entries: {} ({} in place), {} bytes without reuse, {} planned, lower bound {}, {} allocated\n",
            m.entries, m.inplace, m.no_reuse_bytes, m.planned_bytes, m.lower_bound_bytes, m.allocated_bytes
        );
        // MXNet's closing line, which scripts parse: the internal entries' memory, in MiB.
        s += &format!("Total {} MB allocated\n", m.allocated_bytes >> 20);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a convolution's gradient graph taken with respect to its weights alone, the backward
    /// node's data gradient is the one output nobody reads; taken with respect to the data
    /// too, none is.
    #[test]
    fn the_gradient_nobody_asked_for_is_the_unread_output() {
        let vars: Vec<Symbol> = ["data", "w", "b"].iter().map(|n| Symbol::var(n)).collect();
        let refs: Vec<&Symbol> = vars.iter().collect();
        let attrs = Attrs::new().with("kernel", "(3,3)").with("num_filter", 4);
        let y = Symbol::op("Convolution", "y", &refs, attrs).unwrap();
        for (wrt, want) in [(vec!["w", "b"], 1u64), (vec!["data", "w", "b"], 0)] {
            let wrt: Vec<String> = wrt.into_iter().map(String::from).collect();
            let g = crate::symbol::gradient(&y, &wrt).unwrap().indexed();
            let unread = unread_outputs(&g);
            let backward = g
                .nodes
                .iter()
                .position(|n| n.op.is_some_and(|d| d.name == "_backward_Convolution"))
                .unwrap();
            assert_eq!(unread[backward], want, "gradients of {wrt:?}");
            let others = unread.iter().enumerate().filter(|&(i, _)| i != backward);
            assert!(
                others.clone().all(|(_, &b)| b == 0),
                "{:?}",
                others.collect::<Vec<_>>()
            );
        }
    }
}
