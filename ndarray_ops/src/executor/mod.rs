//! Binds a symbol to arrays on a device and runs it: one engine op per node, in graph order,
//! through the same op registry as the imperative API, pushed through a bulk pusher.
//!
//! Memory: arguments, auxiliary states and `write` gradients are the bound arrays themselves;
//! every other entry lives in one planned arena per device (see [`memory`]): in-place sharing as
//! [`crate::plan`] decides it, offsets from a `storage::plan` solver, and engine dependencies
//! wherever two buffers share addresses, so the plan is safe on the threaded engines. With
//! [`MemoryPlanning::NoReuse`] every entry gets its own block instead (the reference).

mod memory;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use storage::plan::{lower_bound, solve, verify, SolverKind};
use storage::Context;

use crate::error::{invalid, NdError, Result};
use crate::ops::{prepare, IS_TRAIN};
use crate::plan::{assign_aliases, graph_problem, GraphDesc};
use crate::symbol::{gradient, head_grad_names, infer, place, Inferred, Placed};
use crate::{NDArray, Runtime, Symbol};

use memory::Arena;

/// What `backward` does with an argument's gradient (MXNet's `grad_req`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradReq {
    /// Overwrite the gradient array.
    Write,
    /// Add to the gradient array (accumulate over several backward passes).
    Add,
    /// No gradient.
    Null,
}

/// How a bound graph's internal entries get memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryPlanning {
    /// One arena per device, laid out by this solver (in-place sharing and reuse).
    Arena(SolverKind),
    /// Every entry in a block of its own (no sharing at all): the reference for the arena.
    NoReuse,
}

impl Default for MemoryPlanning {
    /// The strong solver with a 20 ms budget (it stops early at the lower bound).
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
    /// Gradient arrays of the arguments differentiated, with their requests.
    grads: Vec<(String, NDArray, GradReq)>,
    /// The device of each node.
    devices: Vec<Context>,
    /// The planned arena of each device (none with [`MemoryPlanning::NoReuse`]).
    arenas: Vec<Arena>,
    /// Memory figures per device.
    memory: Vec<(Context, MemoryReport)>,
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
    /// Internal entries, and how many of them share an input's buffer in place.
    pub entries: usize,
    /// Entries sharing an input's buffer.
    pub inplace: usize,
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
        // Given arrays fix their own shapes and dtypes.
        let mut dtypes: HashMap<_, _> = given.iter().map(|(k, v)| (k.clone(), v.dtype())).collect();
        let mut shapes = shapes.clone();
        shapes.extend(given.iter().map(|(k, v)| (k.clone(), v.shape().to_vec())));
        let full = if wrt.is_empty() {
            symbol.clone()
        } else {
            // Head gradients take their output's shape and dtype.
            let forward = infer(symbol, &shapes, &dtypes)?;
            let (out_shapes, out_dtypes) = (forward.output_shapes(), forward.output_dtypes());
            for (name, i) in head_grad_names(symbol) {
                shapes.insert(name.clone(), out_shapes[i].clone());
                dtypes.insert(name, out_dtypes[i]);
            }
            gradient(symbol, &wrt)?
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
            let var_device = |name: &str| {
                g.nodes
                    .iter()
                    .position(|n| n.is_variable() && n.name == name)
                    .map(|i| first.devices[i])
            };
            let wanted: Vec<Option<Context>> = (0..num_outputs)
                .map(|_| None)
                .chain(wrt.iter().map(|a| var_device(a)))
                .collect();
            place(&full, &opts.group2ctx, ctx, &wanted)?
        };
        let (full, devices) = (placed.symbol, placed.devices);
        let inferred = infer(&full, &shapes, &dtypes)?;
        let g = &inferred.graph;
        let (arg_names, aux_names) = (full.list_arguments(), full.list_auxiliary_states());
        let n = g.num_entries();
        let entry_device: Vec<Context> = (0..g.nodes.len())
            .flat_map(|i| std::iter::repeat_n(devices[i], g.nodes[i].num_outputs()))
            .collect();
        let mut bound: Vec<Option<NDArray>> = vec![None; n];

        // Variables: given arrays or fresh ones, on their devices.
        for (i, node) in g.nodes.iter().enumerate().filter(|(_, v)| v.is_variable()) {
            let e = g.entry(i, 0);
            let (shape, dtype, dev) = (&inferred.shapes[e], inferred.dtypes[e], devices[i]);
            bound[e] = Some(match given.remove(&node.name) {
                Some(a) => {
                    if a.shape() != shape.as_slice() || a.dtype() != dtype || a.ctx() != dev {
                        return Err(NdError::Shape {
                            op: "bind".into(),
                            arg: node.name.clone(),
                            found: a.shape().to_vec(),
                            expected: format!(
                                "shape {shape:?}, dtype {dtype} on {dev} (it is {} on {})",
                                a.dtype(),
                                a.ctx()
                            ),
                        });
                    }
                    a
                }
                None => {
                    let one = aux_names.contains(&node.name) && node.name.ends_with("var");
                    rt.full(shape, if one { 1.0 } else { 0.0 }, dtype, dev)?
                }
            });
        }
        if let Some(name) = given.keys().next() {
            return Err(invalid(
                "bind",
                format!("array '{name}' names no argument or auxiliary state of the symbol"),
            ));
        }
        // Gradients: `write` gradients are computed straight into the bound array; `add`
        // gradients into a planned entry kept to the end, then added.
        let mut grads = vec![];
        let mut kept: Vec<usize> = g.outputs[..num_outputs]
            .iter()
            .map(|&(n, k)| g.entry(n, k))
            .collect();
        let mut given_grads = opts.grad_arrays.clone();
        if let Some(bad) = given_grads.keys().find(|k| !wrt.contains(k)) {
            return Err(invalid(
                "bind",
                format!("a gradient array is given for '{bad}', which has no gradient request"),
            ));
        }
        for (k, name) in wrt.iter().enumerate() {
            let (node, i) = g.outputs[num_outputs + k];
            let e = g.entry(node, i);
            let (shape, dtype, dev) = (&inferred.shapes[e], inferred.dtypes[e], entry_device[e]);
            let grad = match given_grads.remove(name) {
                Some(a)
                    if a.shape() == shape.as_slice() && a.dtype() == dtype && a.ctx() == dev =>
                {
                    a
                }
                Some(a) => {
                    return Err(NdError::Shape {
                        op: "bind".into(),
                        arg: format!("gradient of '{name}'"),
                        found: a.shape().to_vec(),
                        expected: format!(
                            "shape {shape:?}, dtype {dtype} on {dev} (it is {} on {})",
                            a.dtype(),
                            a.ctx()
                        ),
                    })
                }
                None => rt.zeros(shape, dtype, dev)?,
            };
            let req = opts.grad_req[name];
            match req {
                GradReq::Write => bound[e] = Some(grad.clone()),
                _ => kept.push(e),
            }
            grads.push((name.clone(), grad, req));
        }
        // Assignments write into their variables (NNVM's assign cases).
        let device_index: Vec<usize> = entry_device
            .iter()
            .map(|d| devices.iter().position(|x| x == d).unwrap_or(0))
            .collect();
        let external = bound.iter().map(Option::is_some).collect();
        let aliases = assign_aliases(
            &GraphDesc::of(&inferred, external, kept.clone()),
            &device_index,
        );
        for &(e, var) in &aliases.entries {
            bound[e] = bound[var].clone();
        }
        let mut skip = vec![false; g.nodes.len()];
        for &t in &aliases.noops {
            skip[t] = true;
        }
        // One plan and one arena per device.
        let mut device_list: Vec<Context> = devices.clone();
        device_list.sort_by_key(|c| c.to_string());
        device_list.dedup();
        let solver = match opts.memory {
            MemoryPlanning::Arena(kind) => kind,
            MemoryPlanning::NoReuse => SolverKind::GreedyBySize,
        };
        let mut entries: Vec<Option<NDArray>> = bound.clone();
        let mut memory = Vec::with_capacity(device_list.len());
        let mut arenas = Vec::new();
        for &dev in &device_list {
            let external = (0..n)
                .map(|e| bound[e].is_some() || entry_device[e] != dev)
                .collect();
            let kept_here = kept.iter().copied().filter(|&e| entry_device[e] == dev);
            let desc = GraphDesc::of(&inferred, external, kept_here.collect());
            let gp = graph_problem(&desc)?;
            let mine: Vec<usize> = (0..n)
                .filter(|&e| bound[e].is_none() && entry_device[e] == dev)
                .collect();
            let no_reuse_bytes = mine.iter().map(|&e| desc.entry_bytes[e]).sum();
            let plan = solve(&gp.problem, solver);
            verify(&gp.problem, &plan).map_err(|e| {
                invalid("bind", format!("the memory plan for {dev} is invalid: {e}"))
            })?;
            let arena = match opts.memory {
                MemoryPlanning::Arena(_) => Some(
                    Arena::new(rt, dev, &gp.problem, &plan, g.nodes.len())
                        .map_err(|e| invalid("bind", format!("memory for {dev}: {e}")))?,
                ),
                MemoryPlanning::NoReuse => None,
            };
            for &e in &mine {
                let (shape, dtype) = (&inferred.shapes[e], inferred.dtypes[e]);
                entries[e] = Some(match (&arena, gp.buffer_of[e]) {
                    (Some(arena), Some(b)) => arena.entry(b, shape, dtype)?,
                    _ => rt.empty(shape, dtype, dev)?,
                });
            }
            memory.push((
                dev,
                MemoryReport {
                    no_reuse_bytes,
                    planned_bytes: plan.arena,
                    lower_bound_bytes: lower_bound(&gp.problem),
                    allocated_bytes: arena.as_ref().map_or(no_reuse_bytes, Arena::bytes),
                    entries: gp.entries,
                    inplace: gp.inplace,
                },
            ));
            arenas.extend(arena);
        }
        let entries = entries
            .into_iter()
            .enumerate()
            .map(|(e, a)| a.ok_or_else(|| invalid("bind", format!("entry {e} got no array"))))
            .collect::<Result<Vec<_>>>()?;
        // With gradients, the forward pass runs what the symbol's own outputs need.
        let forward_nodes = (!wrt.is_empty()).then(|| {
            let mut needed = vec![false; g.nodes.len()];
            let mut stack: Vec<usize> = g.outputs[..num_outputs].iter().map(|&(n, _)| n).collect();
            while let Some(n) = stack.pop() {
                if !std::mem::replace(&mut needed[n], true) {
                    stack.extend(g.inputs[n].iter().map(|&(s, _)| s));
                }
            }
            needed
        });
        Ok(Executor {
            rt: rt.clone(),
            ctx,
            symbol: full,
            inferred,
            devices,
            entries,
            arg_names,
            aux_names,
            num_outputs,
            forward_nodes,
            skip,
            head_names: if wrt.is_empty() {
                vec![]
            } else {
                head_grad_names(symbol)
                    .into_iter()
                    .map(|(n, _)| n)
                    .collect()
            },
            grads,
            arenas,
            memory,
        })
    }

    /// Pushes one op per node; returns at once (wait on the outputs). `is_train` selects training
    /// behaviour (batch statistics in BatchNorm, dropout masks).
    pub fn forward(&self, is_train: bool) -> Result<()> {
        self.run_nodes(is_train, true)
    }

    /// Pushes the backward nodes, then writes or adds each argument's gradient into its gradient
    /// array. Call after `forward(true)`.
    pub fn backward(&self) -> Result<()> {
        if self.forward_nodes.is_none() {
            return Err(invalid(
                "backward",
                "the executor was bound without gradients (use simple_bind_grad)",
            ));
        }
        self.run_nodes(true, false)?;
        let g = &self.inferred.graph;
        for (k, (_, grad, req)) in self.grads.iter().enumerate() {
            if *req == GradReq::Add {
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
        let args = self.arg_dict();
        let heads: Vec<&NDArray> = self
            .head_names
            .iter()
            .filter_map(|name| args.get(name))
            .collect();
        if heads.len() != head_grads.len() {
            return Err(invalid(
                "backward",
                format!(
                    "{} head gradients given; the outputs take {}",
                    head_grads.len(),
                    heads.len()
                ),
            ));
        }
        for (src, dst) in head_grads.iter().zip(heads) {
            src.copy_into(dst)?;
        }
        self.backward()
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
            let op = if def.name == "_CrossDeviceCopy" {
                inputs[0].copy_op(outputs[0]).map_err(at_node)?
            } else {
                let attrs = n.attrs.clone().with(IS_TRAIN, is_train);
                let ctx = self.devices[i];
                prepare(&self.rt, ctx, def.name, &inputs, &attrs, Some(&outputs))
                    .map_err(at_node)?
                    .0
            };
            let deps: Vec<_> = passes.iter_mut().flat_map(|p| p.reuse_deps(i)).collect();
            bulk.push(op.writes(&deps)).map_err(|e| at_node(e.into()))?;
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
            entries: 0,
            inplace: 0,
        };
        for (_, m) in &self.memory {
            total.no_reuse_bytes += m.no_reuse_bytes;
            total.planned_bytes += m.planned_bytes;
            total.lower_bound_bytes += m.lower_bound_bytes;
            total.allocated_bytes += m.allocated_bytes;
            total.entries += m.entries;
            total.inplace += m.inplace;
        }
        total
    }

    /// Memory of the internal entries on each device the graph uses.
    pub fn memory_by_device(&self) -> Vec<(Context, MemoryReport)> {
        self.memory.clone()
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
            s += &format!(
                "#{i:<4} {:<16} {:<40} -> {}\n",
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
        s
    }
}
