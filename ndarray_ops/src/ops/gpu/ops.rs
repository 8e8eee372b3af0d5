//! How a GPU call is checked and run; each op names its GPU kernel in its `OpDef` (`gpu`). The
//! kernels live in modules by op family, beside the CPU's: `elemwise`, `indexing`, `reduce`,
//! `conv`, `nn`, `shape`, `gather`, `gather_nd`, `resample`, `roi`, `rnn` and `sort`. Each
//! checks nothing the shape inference already checked, sizes its launches from the tensors and
//! runs kernels and GEMMs on a [`Stream`], in the stream's order; each is tested against the
//! CPU kernel of its op.

use super::Stream;
use crate::ops::Call;
use crate::ops::KResult;
use crate::ops::{Attrs, OpDef, TensorRef};
use crate::resources::StateSlot;
use crate::DType;

/// A GPU kernel: the call (its tensors in device memory) and the stream it launches on.
pub(crate) type KernelFn = fn(Call, &dyn Stream) -> KResult;

/// A GPU kernel of an op whose bound nodes keep state (`crate::ops::StateUse`): the same, and
/// the node's state when the executor gave it one.
pub(crate) type StatefulFn = fn(Call, &dyn Stream, Option<&mut StateSlot>) -> KResult;

/// The GPU implementation of an op.
#[derive(Clone, Copy)]
pub(crate) enum GpuKernel {
    /// A function of the inputs alone.
    Plain(KernelFn),
    /// One that may keep state from a forward node for its backward node (the fused RNN).
    Stateful(StatefulFn),
}

/// The GPU kernel of `def` for these dtypes, or why there is none.
pub(crate) fn check(
    def: &OpDef,
    dtypes: impl IntoIterator<Item = DType>,
) -> Result<GpuKernel, String> {
    let kernel = def
        .gpu
        .ok_or_else(|| format!("{} has no GPU kernel", def.name))?;
    match dtypes.into_iter().find(|d| *d != DType::F32) {
        Some(d) => Err(format!(
            "{}: GPU kernels take float32 arrays, got {d}",
            def.name
        )),
        None => Ok(kernel),
    }
}

/// Runs a GPU kernel, first moving any input that overlaps an output (unless it is exactly that
/// output and the kernel handles that) into scratch memory, as the host path does. `state` is
/// the bound node's kept state, for a stateful kernel.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    def: &OpDef,
    kernel: GpuKernel,
    alias_safe: bool,
    attrs: &Attrs,
    ins: &mut [TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
    state: Option<&mut StateSlot>,
) -> KResult {
    for t in ins.iter_mut() {
        let clash = outs
            .iter()
            .any(|o| o.overlaps(t) && !(alias_safe && o.same_memory(t)));
        if clash {
            let copy = s.scratch(t.buf.bytes)?;
            s.copy(t.buf.ptr, copy, t.buf.bytes)?;
            t.buf.ptr = copy;
        }
    }
    match kernel {
        GpuKernel::Plain(f) => f(
            Call {
                def,
                attrs,
                ins,
                outs,
            },
            s,
        ),
        GpuKernel::Stateful(f) => f(
            Call {
                def,
                attrs,
                ins,
                outs,
            },
            s,
            state,
        ),
    }
}

pub(crate) fn e2s(e: crate::NdError) -> String {
    e.to_string()
}

/// Sets `t` to `value`.
pub(crate) fn fill_with(s: &dyn Stream, t: &TensorRef, value: f64) -> KResult {
    super::elemwise::fill(s, t.ptr(), t.len(), value)
}

pub(crate) fn copy(call: Call, s: &dyn Stream) -> KResult {
    let (_, _, ins, outs) = call.parts();
    if ins[0].same_memory(&outs[0]) {
        return Ok(());
    }
    let bytes = ins[0].buf.bytes.min(outs[0].buf.bytes);
    s.copy(ins[0].buf.ptr, outs[0].buf.ptr, bytes)
}

/// `_zeros` and `zeros_like`.
pub(crate) fn zeros(call: Call, s: &dyn Stream) -> KResult {
    fill_with(s, &call.outs[0], 0.0)
}

/// `_ones` and `ones_like`.
pub(crate) fn ones(call: Call, s: &dyn Stream) -> KResult {
    fill_with(s, &call.outs[0], 1.0)
}
