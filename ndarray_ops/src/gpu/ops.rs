//! Which GPU kernel runs each op ([`kernel_for`]), and how a call is checked and run. The
//! kernels live in modules by op family, beside the CPU's: `elemwise`, `indexing`, `reduce`,
//! `conv`, `nn`, `shape`, `gather`, `gather_nd`, `resample`, `roi`, `rnn` and `sort`. Each
//! checks nothing the shape inference already checked, sizes its launches from the tensors and
//! runs kernels and GEMMs on a [`Stream`], in the stream's order; each is tested against the
//! CPU kernel of its op.

use super::conv::{
    convolution, convolution_backward, deconvolution, deconvolution_backward, pooling,
    pooling_backward, upsampling,
};
use super::elemwise::{
    activation, activation_backward, assign, binary, binary_code, clamp, leaky_relu, one_hot,
    scalar, scalar_code, select, unary, unary_backward, unary_code,
};
use super::indexing::{arange, cross_entropy, pick, take};
use super::nn::{
    adam, batch_norm, batch_norm_backward, dropout, fully_connected, fully_connected_backward,
    logistic, make_loss_backward, normalization, random_fill, regression_backward, sgd, softmax,
    softmax_activation, softmax_output, softmax_output_backward,
};
use super::reduce::{add_n, broadcast_backward, reduce, reduce_other, sum_to_like};
use super::shape::{
    concat, concat_backward, depth_space, matmul, sequence, split, stack, transpose,
};
use super::{KArgs, Stream};
use crate::ops::KResult;
use crate::ops::{Attrs, OpDef, TensorRef};
use crate::resources::StateSlot;
use crate::DType;

/// A GPU kernel: the op's name, attributes, inputs and outputs (device memory), the stream.
pub(super) type KernelFn = fn(&str, &Attrs, &[TensorRef], &[TensorRef], &dyn Stream) -> KResult;

/// A GPU kernel of an op whose bound nodes keep state (`crate::ops::StateUse`): the same, and
/// the node's state when the executor gave it one.
pub(super) type StatefulFn =
    fn(&str, &Attrs, &[TensorRef], &[TensorRef], &dyn Stream, Option<&mut StateSlot>) -> KResult;

/// The GPU implementation of an op.
#[derive(Clone, Copy)]
pub(crate) enum GpuKernel {
    /// A function of the inputs alone.
    Plain(KernelFn),
    /// One that may keep state from a forward node for its backward node (the fused RNN).
    Stateful(StatefulFn),
}

/// The GPU implementation of `def`, if it has one.
pub(crate) fn kernel_for(def: &OpDef) -> Option<GpuKernel> {
    match def.name {
        "RNN" => Some(GpuKernel::Stateful(super::rnn::rnn)),
        "_backward_RNN" => Some(GpuKernel::Stateful(super::rnn::rnn_backward)),
        _ => plain_kernel(def).map(GpuKernel::Plain),
    }
}

pub(super) fn plain_kernel(def: &OpDef) -> Option<KernelFn> {
    if def.identity {
        return Some(copy);
    }
    Some(match def.name {
        "_copy" | "_CrossDeviceCopy" => copy,
        "_zeros" | "_ones" | "zeros_like" | "ones_like" => fill,
        op if unary_code(op).is_some() => unary,
        "_backward_math" => unary_backward,
        "take" | "Embedding" | "_backward_take" => take,
        "pick" | "_backward_pick" | "batch_take" => pick,
        "softmax_cross_entropy" | "_backward_softmax_cross_entropy" => cross_entropy,
        "gather_nd" | "scatter_nd" | "_backward_gather_nd" => super::gather_nd::gather_nd,
        "ROIPooling" | "_backward_ROIPooling" | "_contrib_ROIAlign" | "_backward_ROIAlign" => {
            super::roi::roi
        }
        "_arange" => arange,
        "topk" | "sort" | "argsort" | "_backward_topk" => super::sort::sort,
        "Crop"
        | "_backward_Crop"
        | "_contrib_AdaptiveAvgPooling2D"
        | "_backward_AdaptiveAvgPooling2D"
        | "_contrib_BilinearResize2D"
        | "_backward_BilinearResize2D" => super::resample::resample,
        "Activation" | "relu" | "sigmoid" | "tanh" | "softrelu" => activation,
        "_backward_Activation" => activation_backward,
        op if binary_code(op).is_some() => binary,
        op if scalar_code(op).is_some() => scalar,
        "clip" | "hard_sigmoid" => clamp,
        "where" => select,
        "one_hot" => one_hot,
        "max" | "min" | "prod" | "argmax" | "argmin" | "norm" => reduce_other,
        "stack" => stack,
        "_backward_Concat" => concat_backward,
        "adam_update" => adam,
        "SequenceMask"
        | "_backward_SequenceMask"
        | "SequenceLast"
        | "_backward_SequenceLast"
        | "SequenceReverse" => sequence,
        "Cast" | "cast" | "_cast_like" | "LinearRegressionOutput" | "MAERegressionOutput" => copy,
        "LogisticRegressionOutput" => logistic,
        "_backward_LinearRegressionOutput"
        | "_backward_LogisticRegressionOutput"
        | "_backward_MAERegressionOutput" => regression_backward,
        "_backward_MakeLoss" => make_loss_backward,
        "SoftmaxActivation" | "_backward_SoftmaxActivation" => softmax_activation,
        "_assign" => assign,
        "depth_to_space" | "space_to_depth" => depth_space,
        "add_n" => add_n,
        "FullyConnected" => fully_connected,
        "_backward_FullyConnected" => fully_connected_backward,
        "Convolution" => convolution,
        "_backward_Convolution" => convolution_backward,
        "Deconvolution" => deconvolution,
        "_backward_Deconvolution" => deconvolution_backward,
        "UpSampling" => upsampling,
        "Pooling" => pooling,
        "_backward_Pooling" => pooling_backward,
        "BatchNorm" => batch_norm,
        "_backward_BatchNorm" => batch_norm_backward,
        "SoftmaxOutput" => softmax_output,
        "_backward_SoftmaxOutput" => softmax_output_backward,
        "sgd_update" | "sgd_mom_update" => sgd,
        "softmax" | "log_softmax" | "_backward_softmax" | "_backward_log_softmax" => softmax,
        "Dropout" => dropout,
        "_random_uniform" | "_random_normal" => random_fill,
        "LayerNorm"
        | "InstanceNorm"
        | "GroupNorm"
        | "L2Normalization"
        | "_backward_LayerNorm"
        | "_backward_InstanceNorm"
        | "_backward_GroupNorm"
        | "_backward_L2Normalization" => normalization,
        "transpose" => transpose,
        "sum" | "mean" => reduce,
        "_broadcast_backward" => broadcast_backward,
        "_sum_to_like" => sum_to_like,
        "dot" | "batch_dot" => matmul,
        "SliceChannel" => split,
        "Concat" => concat,
        "LeakyReLU" | "_backward_LeakyReLU" => leaky_relu,
        "broadcast_to" | "broadcast_axis" | "broadcast_like" | "tile" | "repeat" | "reverse"
        | "SwapAxis" | "Pad" | "slice_like" | "slice" | "slice_axis" | "_backward_gather"
        | "_backward_slice" => super::gather::gather,
        _ => return None,
    })
}

/// The GPU kernel of `def` for these dtypes, or why there is none.
pub(crate) fn check(
    def: &OpDef,
    dtypes: impl IntoIterator<Item = DType>,
) -> Result<GpuKernel, String> {
    let kernel = kernel_for(def).ok_or_else(|| format!("{} has no GPU kernel", def.name))?;
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
    op: &str,
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
        GpuKernel::Plain(f) => f(op, attrs, ins, outs, s),
        GpuKernel::Stateful(f) => f(op, attrs, ins, outs, s, state),
    }
}

pub(super) fn e2s(e: crate::NdError) -> String {
    e.to_string()
}

/// Sets `t` to `value`.
pub(crate) fn fill_with(s: &dyn Stream, t: &TensorRef, value: f64) -> KResult {
    s.launch("fill", t.len(), &KArgs::new(t.len()).t(0, t).f(0, value))
}

pub(super) fn copy(
    _: &str,
    _: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    if ins[0].same_memory(&outs[0]) {
        return Ok(());
    }
    let bytes = ins[0].buf.bytes.min(outs[0].buf.bytes);
    s.copy(ins[0].buf.ptr, outs[0].buf.ptr, bytes)
}

pub(super) fn fill(
    op: &str,
    _: &Attrs,
    _: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let one = matches!(op, "_ones" | "ones_like");
    fill_with(s, &outs[0], if one { 1.0 } else { 0.0 })
}

/// The unary functions of `unary_fwd` and `unary_bwd`, each at its code in `kernels/elemwise.cu`: the
/// unary ops of `ops::elemwise` that are not activations, then the table of `ops::math`.
pub(crate) const UNARY: &[&str] = &[
    "negative",
    "abs",
    "square",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "cbrt",
    "rcbrt",
    "log1p",
    "expm1",
    "log2",
    "log10",
    "erf",
    "sin",
    "cos",
    "tan",
    "arcsin",
    "arccos",
    "arctan",
    "sinh",
    "cosh",
    "arcsinh",
    "arccosh",
    "arctanh",
    "degrees",
    "radians",
    "softsign",
    "round",
    "rint",
    "fix",
    "trunc",
    "floor",
    "ceil",
    "sign",
];
