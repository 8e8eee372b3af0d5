//! Binds a symbol to arrays on a device and runs it: one engine op per node, in graph order,
//! through the same op registry as the imperative API.
//!
//! Today every entry gets its own array (no memory reuse); the memory report gives what the
//! planner would need for the same entries (`planned_bytes`, greedy offsets from
//! `storage::plan`) beside that (`no_reuse_bytes`). The gradient pass, the planned arena and
//! bulking follow.

use std::collections::HashMap;
use std::sync::Arc;

use storage::plan::{lower_bound, solve, Buffer, Problem, SolverKind};
use storage::Context;

use crate::error::{invalid, NdError, Result};
use crate::ops::{prepare, IS_TRAIN};
use crate::symbol::{gradient, head_grad_names, infer, Inferred};
use crate::{NDArray, Runtime, Symbol};

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
    /// Gradient arrays of the arguments differentiated, with their requests.
    grads: Vec<(String, NDArray, GradReq)>,
}

/// Memory figures of a bound graph's internal entries (arguments and auxiliary states excluded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// Every internal entry in its own block.
    pub no_reuse_bytes: u64,
    /// The planner's arena for the bound graph's liveness (forward, and backward when bound with
    /// gradients).
    pub planned_bytes: u64,
    /// The lower bound for that liveness.
    pub lower_bound_bytes: u64,
}

impl Executor {
    /// Infers every shape from `shapes` (by argument name), allocates arguments (zeros),
    /// auxiliary states (zeros; `*_var` states ones, as BatchNorm expects) and every internal entry.
    pub fn simple_bind(
        rt: &Arc<Runtime>,
        ctx: Context,
        symbol: &Symbol,
        shapes: &HashMap<String, Vec<usize>>,
    ) -> Result<Executor> {
        Executor::bind_with(rt, ctx, symbol, shapes, HashMap::new())
    }

    /// Binds given arrays (arguments and auxiliary states by name); shapes of the rest are
    /// inferred from them, and those arrays are allocated as in [`Executor::simple_bind`].
    pub fn bind(
        rt: &Arc<Runtime>,
        ctx: Context,
        symbol: &Symbol,
        arrays: HashMap<String, NDArray>,
    ) -> Result<Executor> {
        Executor::bind_with(rt, ctx, symbol, &HashMap::new(), arrays)
    }

    fn bind_with(
        rt: &Arc<Runtime>,
        ctx: Context,
        symbol: &Symbol,
        shapes: &HashMap<String, Vec<usize>>,
        mut given: HashMap<String, NDArray>,
    ) -> Result<Executor> {
        // Each output gets storage of its own (MXNet's copy nodes).
        let symbol = &symbol.with_copy_nodes()?;
        // Given arrays fix their own shapes and dtypes.
        let dtypes = given.iter().map(|(k, v)| (k.clone(), v.dtype())).collect();
        let mut shapes = shapes.clone();
        shapes.extend(given.iter().map(|(k, v)| (k.clone(), v.shape().to_vec())));
        let inferred = infer(symbol, &shapes, &dtypes)?;
        let g = &inferred.graph;
        let (arg_names, aux_names) = (symbol.list_arguments(), symbol.list_auxiliary_states());
        let mut entries = Vec::with_capacity(g.num_entries());
        for (i, n) in g.nodes.iter().enumerate() {
            for k in 0..n.num_outputs() {
                let e = g.entry(i, k);
                let (shape, dtype) = (&inferred.shapes[e], inferred.dtypes[e]);
                let array = match given.remove(&n.name).filter(|_| n.is_variable()) {
                    Some(a) => {
                        if a.shape() != shape.as_slice() || a.dtype() != dtype || a.ctx() != ctx {
                            return Err(NdError::Shape {
                                op: "bind".into(),
                                arg: n.name.clone(),
                                found: a.shape().to_vec(),
                                expected: format!(
                                    "shape {shape:?}, dtype {dtype} on {ctx} (it is {} on {})",
                                    a.dtype(),
                                    a.ctx()
                                ),
                            });
                        }
                        a
                    }
                    None if n.is_variable() => {
                        let one = aux_names.contains(&n.name) && n.name.ends_with("var");
                        rt.full(shape, if one { 1.0 } else { 0.0 }, dtype, ctx)?
                    }
                    None => rt.empty(shape, dtype, ctx)?,
                };
                entries.push(array);
            }
        }
        if let Some(name) = given.keys().next() {
            return Err(invalid(
                "bind",
                format!("array '{name}' names no argument or auxiliary state of the symbol"),
            ));
        }
        let num_outputs = symbol.outputs().len();
        Ok(Executor {
            rt: rt.clone(),
            ctx,
            symbol: symbol.clone(),
            inferred,
            entries,
            arg_names,
            aux_names,
            num_outputs,
            forward_nodes: None,
            grads: vec![],
        })
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
        let args = symbol.list_arguments();
        if let Some(bad) = grad_req.keys().find(|k| !args.contains(k)) {
            return Err(invalid(
                "simple_bind",
                format!("grad_req names '{bad}', which is not an argument"),
            ));
        }
        let wrt: Vec<String> = args
            .iter()
            .filter(|a| grad_req.get(*a).is_some_and(|r| *r != GradReq::Null))
            .cloned()
            .collect();
        let forward = infer(symbol, shapes, &HashMap::new())?;
        // Head gradients take their output's shape and dtype.
        let (out_shapes, out_dtypes) = (forward.output_shapes(), forward.output_dtypes());
        let mut heads = HashMap::new();
        for (name, i) in head_grad_names(symbol) {
            heads.insert(name, rt.zeros(&out_shapes[i], out_dtypes[i], ctx)?);
        }
        let full = gradient(symbol, &wrt)?;
        let mut exec = Executor::bind_with(rt, ctx, &full, shapes, heads)?;
        exec.num_outputs = symbol.outputs().len();
        // The forward pass runs what the symbol's own outputs need.
        let g = &exec.inferred.graph;
        let mut needed = vec![false; g.nodes.len()];
        let mut stack: Vec<usize> = g.outputs[..exec.num_outputs]
            .iter()
            .map(|&(n, _)| n)
            .collect();
        while let Some(n) = stack.pop() {
            if !std::mem::replace(&mut needed[n], true) {
                stack.extend(g.inputs[n].iter().map(|&(s, _)| s));
            }
        }
        exec.forward_nodes = Some(needed);
        for name in wrt {
            let arg =
                exec.arg_dict().get(&name).cloned().ok_or_else(|| {
                    invalid("simple_bind", format!("no array for argument '{name}'"))
                })?;
            let grad = rt.zeros(arg.shape(), arg.dtype(), ctx)?;
            exec.grads.push((name.clone(), grad, grad_req[&name]));
        }
        Ok(exec)
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
            let (n, i) = g.outputs[self.num_outputs + k];
            let computed = &self.entries[g.entry(n, i)];
            match req {
                GradReq::Write => computed.copy_into(grad)?,
                GradReq::Add => grad.add_inplace(computed)?,
                GradReq::Null => {}
            }
        }
        Ok(())
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
        let mut bulk = engine.bulk();
        for (i, n) in g.nodes.iter().enumerate() {
            let Some(def) = n.op else { continue };
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
            let attrs = n.attrs.clone().with(IS_TRAIN, is_train);
            let at_node = |e: NdError| {
                invalid(
                    if forward { "forward" } else { "backward" },
                    format!("node '{}': {e}", n.name),
                )
            };
            let (op, _) = prepare(
                &self.rt,
                self.ctx,
                def.name,
                &inputs,
                &attrs,
                Some(&outputs),
            )
            .map_err(at_node)?;
            bulk.push(op).map_err(|e| at_node(e.into()))?;
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

    /// The bound graph's internal entries as a planning problem (one step per node, in the order
    /// `forward` then `backward` run them).
    pub fn plan_problem(&self) -> Problem {
        let g = &self.inferred.graph;
        let mut last_use: Vec<Option<u32>> = vec![None; g.num_entries()];
        for (i, ins) in g.inputs.iter().enumerate() {
            for &(s, k) in ins {
                last_use[g.entry(s, k)] = Some(i as u32);
            }
        }
        let outputs: Vec<usize> = g.outputs.iter().map(|&(n, k)| g.entry(n, k)).collect();
        let last = g.nodes.len().saturating_sub(1) as u32;
        let mut buffers = vec![];
        for (i, n) in g.nodes.iter().enumerate() {
            if n.is_variable() {
                continue;
            }
            for k in 0..n.num_outputs() {
                let e = g.entry(i, k);
                let size = (self.inferred.shapes[e].iter().product::<usize>()
                    * self.inferred.dtypes[e].size()) as u64;
                let end = if outputs.contains(&e) {
                    last
                } else {
                    last_use[e].unwrap_or(i as u32).max(i as u32)
                };
                buffers.push(Buffer {
                    size,
                    start: i as u32,
                    end,
                    align: 64,
                    name: format!("{}:{k}", n.name),
                });
            }
        }
        Problem {
            buffers,
            groups: vec![],
        }
    }

    /// Memory of the internal entries: without reuse, and as the planner would place them.
    pub fn memory_report(&self) -> MemoryReport {
        let p = self.plan_problem();
        MemoryReport {
            no_reuse_bytes: p.total_bytes(),
            planned_bytes: solve(&p, SolverKind::GreedyBySize).arena,
            lower_bound_bytes: lower_bound(&p),
        }
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
        let m = self.memory_report();
        s += &format!(
            "internal entries: {} bytes without reuse, {} planned, lower bound {}\n",
            m.no_reuse_bytes, m.planned_bytes, m.lower_bound_bytes
        );
        s
    }
}
