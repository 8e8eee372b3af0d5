//! Running an op imperatively: checking the call, inferring and allocating the outputs (or
//! checking the ones given), and pushing one engine op that runs the CPU or GPU kernel.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use parking_lot::Mutex;

use engine::Op;

use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::*;
use crate::resources::{DeviceResources, KernelRes, OpState, Resource, StateSlot};
use crate::runtime::Runtime;
use crate::{DType, NDArray};

/// Runs op `name` on `inputs` imperatively: checks the call now, returns the outputs at once
/// and pushes the kernel to the engine. With `out`, writes into those arrays instead of new ones.
pub fn invoke(
    name: &str,
    inputs: &[&NDArray],
    attrs: &Attrs,
    out: Option<&[&NDArray]>,
) -> Result<Vec<NDArray>> {
    let first = inputs.first().ok_or_else(|| {
        invalid(
            name,
            "needs at least one input (invoke_on runs ops without inputs)",
        )
    })?;
    invoke_on(first.runtime(), first.ctx(), name, inputs, attrs, out)
}

/// Like [`invoke`], on an explicit runtime and context (ops without inputs, such as the random
/// generators, need it). While this thread records ([`crate::autograd::record`]), the op runs
/// in the recording's mode and joins the graph when an input is in it.
pub fn invoke_on(
    rt: &Arc<Runtime>,
    ctx: storage::Context,
    name: &str,
    inputs: &[&NDArray],
    attrs: &Attrs,
    out: Option<&[&NDArray]>,
) -> Result<Vec<NDArray>> {
    let push = |attrs: &Attrs| {
        let call = Invocation {
            name,
            inputs,
            attrs,
            out,
            also_writes: &[],
            state: None,
            unread: 0,
        };
        prepare(rt, ctx, call, |op| rt.engine().push(op))
    };
    let train = match crate::array::tape::mode() {
        Ok(train) => train,
        Err(false) => return push(attrs),
        // Training mode without recording: Dropout and BatchNorm behave as in training.
        Err(true) => return push(&crate::array::tape::recorded_attrs(attrs, true)),
    };
    for o in out.into_iter().flatten() {
        crate::array::tape::check_write(name, o)?;
    }
    let in_graph = inputs.iter().any(|a| a.entry().is_some());
    if in_graph && out.is_some() {
        return Err(invalid(
            name,
            "writes into given arrays while recording an input's graph; autograd records ops \
             that make new arrays (leave `out` out)",
        ));
    }
    let attrs = crate::array::tape::recorded_attrs(attrs, train);
    let outputs = push(&attrs)?;
    crate::array::tape::record_op(name, attrs, inputs, outputs)
}

/// One invocation of an op on arrays, as [`prepare`] takes it.
pub(crate) struct Invocation<'c> {
    pub(crate) name: &'c str,
    pub(crate) inputs: &'c [&'c NDArray],
    pub(crate) attrs: &'c Attrs,
    /// Arrays to write the results into; new ones when `None`.
    pub(crate) out: Option<&'c [&'c NDArray]>,
    /// Vars the op writes besides its outputs (the executor's memory-reuse dependencies).
    pub(crate) also_writes: &'c [engine::Var],
    /// The bound node's kept state (executor only; see [`StateUse`]).
    pub(crate) state: Option<&'c OpState>,
    /// Bit `k` set: nothing reads output `k` (a bound graph's gradient that no argument asked
    /// for), so a kernel may leave it unwritten, as MXNet's `kNullOp` requests.
    pub(crate) unread: u64,
}

/// Checks a call, builds its engine op and hands it to `push` (the engine, or the executor's bulk
/// pusher); returns the arrays it writes. The op borrows its vars from the arrays, so it is
/// pushed here, while the outputs it makes are still in hand.
pub(crate) fn prepare(
    rt: &Arc<Runtime>,
    ctx: storage::Context,
    call: Invocation<'_>,
    push: impl FnOnce(Op<'_>) -> std::result::Result<(), engine::EngineError>,
) -> Result<Vec<NDArray>> {
    let Invocation {
        name,
        inputs,
        attrs,
        out,
        also_writes,
        state,
        unread,
    } = call;
    let rt = rt.clone();
    let def = lookup(name)?;
    let op = def.name;
    let ok = match def.arity {
        Arity::Exactly(n) => inputs.len() == n,
        Arity::AtLeast(n) => inputs.len() >= n,
    };
    if !ok {
        return Err(invalid(
            op,
            format!("takes {} inputs, got {}", def.arity, inputs.len()),
        ));
    }
    for (i, a) in inputs.iter().enumerate() {
        if !Arc::ptr_eq(a.runtime(), &rt) {
            return Err(invalid(op, format!("input {i} belongs to another runtime")));
        }
        if a.ctx() != ctx {
            return Err(NdError::Context {
                op: op.into(),
                arg: format!("input {i}"),
                found: a.ctx().to_string(),
                expected: ctx.to_string(),
            });
        }
    }
    let inferred = infer_outputs(def, attrs, inputs)?;
    let (oshapes, odtypes) = (&inferred.0, &inferred.1);
    let device_kernel = match ctx.is_cpu() {
        true => None,
        false => {
            let dtypes = inputs
                .iter()
                .map(|a| a.dtype())
                .chain(odtypes.iter().copied());
            Some(device_kernel(def, ctx, dtypes)?)
        }
    };
    let outputs: Vec<NDArray> = match out {
        Some(out) => {
            if out.len() != oshapes.len() {
                return Err(invalid(
                    op,
                    format!("writes {} outputs, {} given", oshapes.len(), out.len()),
                ));
            }
            // An op that reads nothing takes its shape from its `shape` attribute, where a 0
            // is a dimension left to inference (Gluon's begin states, `(0, H)`): a graph binds
            // it to the inferred size, and the given output's size is the one to fill.
            let partial = inputs.is_empty() && attrs.get("shape").is_some();
            let fits = |o: &NDArray, s: &[usize]| {
                o.shape() == s
                    || (partial
                        && o.shape().len() == s.len()
                        && o.shape()
                            .iter()
                            .zip(s)
                            .all(|(&have, &want)| want == 0 || have == want))
            };
            for (i, (o, (s, d))) in out.iter().zip(oshapes.iter().zip(odtypes)).enumerate() {
                if !fits(o, s)
                    || o.dtype() != *d
                    || o.ctx() != ctx
                    || !Arc::ptr_eq(o.runtime(), &rt)
                {
                    return Err(shape_error(
                        op,
                        format!("output {i}"),
                        o.shape(),
                        format!(
                            "shape {s:?}, dtype {d} on {ctx} (it is {} on {})",
                            o.dtype(),
                            o.ctx()
                        ),
                    ));
                }
            }
            out.iter().map(|o| (*o).clone()).collect()
        }
        None => oshapes
            .iter()
            .zip(odtypes)
            .enumerate()
            .map(|(k, (s, d))| {
                rt.empty(s, *d, ctx).map_err(|e| match e {
                    NdError::Storage(source) => {
                        NdError::OutputMemory(Box::new(crate::error::OutputMemoryError {
                            op: def.name.to_string(),
                            output: k,
                            shape: s.clone(),
                            dtype: d.name().to_string(),
                            source,
                        }))
                    }
                    other => other,
                })
            })
            .collect::<Result<_>>()?,
    };
    let mut all = Vec::with_capacity(inputs.len() + outputs.len());
    all.extend(inputs.iter().map(|a| a.tensor()));
    all.extend(outputs.iter().map(NDArray::tensor));
    let mut tensors = Tensors::new(all, inputs.len());
    let mutated = def
        .mutate_inputs
        .iter()
        .filter_map(|&i| inputs.get(i).copied());
    // The forward node writes its kept state, the backward node reads it.
    let keeps = def.state == StateUse::Keeps;
    let state_writes = state.filter(|_| keeps).map(|s| &s.var);
    let state_reads = state.filter(|_| !keeps).map(|s| &s.var);
    let slot = state.map(|s| s.slot.clone());
    let paired = state.is_some_and(|s| s.paired);
    if let Some(kernel) = device_kernel {
        // A random op's GPU kernel takes a seed drawn, when it runs, from the device's generator.
        let rng = def
            .resources
            .contains(&Resource::Random)
            .then(|| rt.resources(ctx));
        let engine_op = device_op(&rt, ctx, def, kernel, attrs, tensors, rng.clone(), slot)
            .on(ctx)
            .writes(outputs.iter().chain(mutated).map(NDArray::var))
            .writes(rng.iter().map(|r| &r.rng_var))
            .writes(also_writes)
            .writes(state_writes)
            .reads(inputs.iter().map(|a| a.var()).chain(state_reads))
            .reads(NDArray::partial_vars(&outputs));
        push(engine_op)?;
        return Ok(outputs);
    }
    let (kernel, alias_safe, attrs2) = (def.kernel, def.alias_safe, attrs.clone());
    let res = (!def.resources.is_empty()).then(|| rt.resources(ctx));
    let wants_rng = def.resources.contains(&Resource::Random);
    let wants_temp = def.resources.contains(&Resource::TempSpace);
    let resource_vars = res.iter().flat_map(|r| {
        let rng = wants_rng.then_some(&r.rng_var);
        let temp = wants_temp.then_some(&r.temp_var);
        rng.into_iter().chain(temp)
    });
    let writes = outputs
        .iter()
        .chain(mutated)
        .map(NDArray::var)
        .chain(resource_vars)
        .chain(also_writes)
        .chain(state_writes);
    let held = res.clone();
    // A node that keeps state may keep there what it derives from its inputs (the RNN's packed
    // weights) and know them again by their versions: it gets its inputs' vars, and runs
    // alone, where their versions count every write pushed before it.
    let stamped: Vec<engine::Var> = match keeps && slot.is_some() {
        true => inputs.iter().map(|a| a.var().clone()).collect(),
        false => Vec::new(),
    };
    let alone = !stamped.is_empty();
    let engine_op = Op::sync(op, move |_| {
        let (mut rng, mut temp) = match &held {
            Some(r) => (
                wants_rng.then(|| r.rng.lock()),
                wants_temp.then(|| r.temp.lock()),
            ),
            None => (None, None),
        };
        let mut kept = slot.as_ref().map(|s| s.lock());
        let mut kres = KernelRes {
            rng: rng.as_deref_mut(),
            temp: temp.as_deref_mut(),
            state: kept.as_deref_mut(),
            paired,
            unread,
            stamped: &stamped,
        };
        let (ins, outs) = tensors.split();
        run_kernel(def, kernel, alias_safe, &attrs2, ins, outs, &mut kres).map_err(Into::into)
    })
    .on(ctx)
    .writes(writes)
    .reads(inputs.iter().map(|a| a.var()).chain(state_reads))
    .reads(NDArray::partial_vars(&outputs));
    let elements: usize = inputs.iter().map(|a| a.size()).sum::<usize>()
        + outputs.iter().map(NDArray::size).sum::<usize>();
    let engine_op = if alone { engine_op.alone() } else { engine_op };
    push(cheap_if_small(engine_op, elements))?;
    Ok(outputs)
}

/// What runs an op on a GPU: a kernel of the GPU back end (`cuda` builds); nothing otherwise.
#[cfg(feature = "cuda")]
pub(crate) type DeviceKernel = crate::ops::gpu::ops::GpuKernel;
#[cfg(not(feature = "cuda"))]
pub(crate) type DeviceKernel = std::convert::Infallible;

/// The GPU kernel of `def` for these dtypes on `ctx`, or why there is none.
pub(crate) fn device_kernel(
    def: &OpDef,
    ctx: storage::Context,
    dtypes: impl IntoIterator<Item = DType>,
) -> Result<DeviceKernel> {
    #[cfg(feature = "cuda")]
    return crate::ops::gpu::ops::check(def, dtypes).map_err(|reason| NdError::Context {
        op: def.name.into(),
        arg: "inputs".into(),
        found: ctx.to_string(),
        expected: format!("a CPU context ({reason})"),
    });
    #[cfg(not(feature = "cuda"))]
    {
        let _ = dtypes;
        Err(crate::array::no_device(def.name, ctx))
    }
}

/// The engine op running a GPU kernel (without the vars and context, which the caller adds).
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn device_op<'a>(
    rt: &Arc<Runtime>,
    ctx: storage::Context,
    def: &'static OpDef,
    kernel: DeviceKernel,
    attrs: &Attrs,
    tensors: Tensors,
    rng: Option<Arc<DeviceResources>>,
    state: Option<Arc<Mutex<StateSlot>>>,
) -> Op<'a> {
    let pool = rt.storage(ctx);
    crate::ops::gpu::cuda::kernel_op(def, kernel, attrs.clone(), tensors, pool, rng, state)
}

#[cfg(not(feature = "cuda"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn device_op<'a>(
    _: &Arc<Runtime>,
    _: storage::Context,
    _: &'static OpDef,
    kernel: DeviceKernel,
    _: &Attrs,
    _: Tensors,
    _: Option<Arc<DeviceResources>>,
    _: Option<Arc<Mutex<StateSlot>>>,
) -> Op<'a> {
    match kernel {}
}

/// Output shapes and dtypes, as an op's inference gives them.
pub(crate) type Inferred = (Vec<Vec<usize>>, Vec<DType>);

/// The last inference made on this thread: inference is a pure function of the op, its
/// attributes and its inputs' shapes and dtypes, and imperative code applies the same op to
/// same-shaped arrays again and again (`x = &x + 1.0` in a loop), so a repeat skips building the
/// shape lists and running the op's rule.
pub(crate) struct LastInference {
    pub(crate) def: &'static OpDef,
    pub(crate) attrs: Attrs,
    pub(crate) shapes: Vec<Vec<usize>>,
    pub(crate) dtypes: Vec<DType>,
    pub(crate) out: Rc<Inferred>,
}

pub(crate) fn infer_outputs(
    def: &'static OpDef,
    attrs: &Attrs,
    inputs: &[&NDArray],
) -> Result<Rc<Inferred>> {
    thread_local! {
        static LAST: RefCell<Option<LastInference>> = const { RefCell::new(None) };
    }
    LAST.with(|last| {
        if let Some(m) = &*last.borrow() {
            let same_inputs = m.shapes.len() == inputs.len()
                && inputs
                    .iter()
                    .zip(m.shapes.iter().zip(&m.dtypes))
                    .all(|(a, (s, d))| a.shape() == s.as_slice() && a.dtype() == *d);
            if std::ptr::eq(m.def, def) && same_inputs && m.attrs == *attrs {
                return Ok(m.out.clone());
            }
        }
        let shapes: Vec<Vec<usize>> = inputs.iter().map(|a| a.shape().to_vec()).collect();
        let dtypes: Vec<DType> = inputs.iter().map(|a| a.dtype()).collect();
        signature::check_names(def, attrs)?;
        let out = Rc::new((def.infer)(def.name, attrs, &shapes, &dtypes)?);
        signature::check_values(def, attrs)?;
        *last.borrow_mut() = Some(LastInference {
            def,
            attrs: attrs.clone(),
            shapes,
            dtypes,
            out: out.clone(),
        });
        Ok(out)
    })
}

/// Runs a kernel, first copying any input that overlaps an output (unless it is exactly that
/// output and the kernel handles that), so kernels never see partially aliased memory.
pub(crate) fn run_kernel(
    def: &OpDef,
    kernel: KernelFn,
    alias_safe: bool,
    attrs: &Attrs,
    ins: &mut [TensorRef],
    outs: &[TensorRef],
    res: &mut KernelRes,
) -> std::result::Result<(), String> {
    let mut scratch: Vec<Vec<u64>> = Vec::new();
    for t in ins.iter_mut() {
        let clash = outs
            .iter()
            .any(|o| o.overlaps(t) && !(alias_safe && o.same_memory(t)));
        if clash {
            let mut copy = vec![0u64; t.buf.bytes.div_ceil(8)];
            // SAFETY: `t` is readable (the engine ordered this op after its writers); `copy` is a
            // fresh buffer of at least as many bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    t.buf.ptr,
                    copy.as_mut_ptr().cast::<u8>(),
                    t.buf.bytes,
                )
            };
            t.buf.ptr = copy.as_mut_ptr().cast();
            scratch.push(copy);
        }
    }
    kernel(
        crate::ops::Call {
            def,
            attrs,
            ins,
            outs,
        },
        res,
    )
}
