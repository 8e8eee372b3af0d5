//! The ops' GPU implementations: each checks nothing the shape inference already checked, sizes
//! its launches from the tensors and runs kernels and GEMMs on a [`Stream`], in the stream's
//! order. They mirror the CPU kernels (`crate::ops`) and are tested against them.

use super::{ConvCall, ConvPass, ConvShape, Gemm, KArgs, Stream};
use crate::ops::conv::{conv_params, ConvDims};
use crate::ops::elemwise::broadcast_strides;
use crate::ops::gather::strides;
use crate::ops::pooling::{pool_params, PoolType};
use crate::ops::KResult;
use crate::ops::{fc_dims, Attrs, OpDef, TensorRef};
use crate::resources::StateSlot;
use crate::DType;

/// A GPU kernel: the op's name, attributes, inputs and outputs (device memory), the stream.
type KernelFn = fn(&str, &Attrs, &[TensorRef], &[TensorRef], &dyn Stream) -> KResult;

/// A GPU kernel of an op whose bound nodes keep state (`crate::ops::StateUse`): the same, and
/// the node's state when the executor gave it one.
type StatefulFn =
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

fn plain_kernel(def: &OpDef) -> Option<KernelFn> {
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

fn copy(_: &str, _: &Attrs, ins: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    if ins[0].same_memory(&outs[0]) {
        return Ok(());
    }
    let bytes = ins[0].buf.bytes.min(outs[0].buf.bytes);
    s.copy(ins[0].buf.ptr, outs[0].buf.ptr, bytes)
}

fn fill(op: &str, _: &Attrs, _: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    let one = matches!(op, "_ones" | "ones_like");
    fill_with(s, &outs[0], if one { 1.0 } else { 0.0 })
}

/// The unary functions of `unary_fwd` and `unary_bwd`, each at its code in `kernels.cu`: the
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

fn unary_code(op: &str) -> Option<usize> {
    UNARY.iter().position(|u| *u == op)
}

fn unary(op: &str, _: &Attrs, ins: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    let code = unary_code(op).ok_or_else(|| format!("{op} is not a unary function"))?;
    let n = outs[0].len();
    let a = KArgs::new(n).t(0, &outs[0]).t(1, &ins[0]).i(1, code);
    s.launch("unary_fwd", n, &a)
}

/// Whether the gradient rows of `threads` (outer, column) pairs, each with a list of `count`
/// indices, are added by sorting the lists by row rather than by one thread per pair walking
/// its whole list: where those threads alone would not fill a GPU and each would walk long
/// enough (an Embedding's gradient over a large batch of tokens, a long sort's gradient) to
/// outweigh the sort's launches (a bitonic network: 55 for 1,024 indices). Positions are
/// packed beside rows in 32 bits.
fn sort_rows(threads: usize, count: usize) -> bool {
    threads < FILLS_A_GPU && (1024..1 << 32).contains(&count)
}

/// Adds gradient rows back into the rows their indices name, in index order:
/// `_backward_take` (one list shared by every (outer, column) pair) and `_backward_topk` (a list
/// per pair: `per_pair`). `a` carries the layout `take_bwd` reads (p0 zeroed, p1, p2; i1 =
/// `inner`, i2 rows, i3 = `count`, i4 wrap). Long lists are sorted by row (their positions
/// beside them), then added by one thread per (outer, index, column), where each row's run
/// sums its gradient rows.
pub(super) fn add_rows(
    s: &dyn Stream,
    a: KArgs,
    (outer, inner, count): (usize, usize, usize),
    per_pair: bool,
) -> KResult {
    let pairs = outer * inner;
    let a = a.i(5, usize::from(per_pair));
    if !sort_rows(pairs, count) {
        return s.launch("take_bwd", pairs, &a.i(0, pairs));
    }
    let padded = count.next_power_of_two();
    let lists = if per_pair { pairs } else { 1 };
    let entries = lists * padded;
    let keys = s.scratch(entries * 8)?.cast::<f32>();
    let a = a.p(3, keys).i(6, padded);
    s.launch("take_keys", entries, &a.i(0, entries))?;
    super::sort::bitonic(s, keys, entries, padded)?;
    let n = outer * count * inner;
    s.launch("take_runs", n, &a.i(0, n))
}

/// take(table, indices), Embedding(indices, weight) and `_backward_take(ograd, indices,
/// table)`: rows gathered, or their gradients added back row by row.
fn take(op: &str, attrs: &Attrs, ins: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    let (table, idx) = match op {
        "Embedding" => (&ins[1], &ins[0]),
        "take" => (&ins[0], &ins[1]),
        _ => (&outs[0], &ins[1]),
    };
    let (outer, rows, inner) = crate::ops::take_layout(op, attrs, &table.shape).map_err(e2s)?;
    if rows == 0 && idx.len() > 0 {
        return Err(format!("{op}: cannot index an empty axis"));
    }
    let wrap = usize::from(attrs.get("mode") == Some("wrap"));
    if attrs.get("mode") == Some("raise") {
        // Checked on the host with the CPU's code; the kernel then clamps nothing.
        for i in s.download(idx)? {
            crate::ops::take_row(attrs, f64::from(i), rows)?;
        }
    }
    let args = |n: usize| {
        KArgs::new(n)
            .i(1, inner)
            .i(2, rows.max(1))
            .i(3, idx.len())
            .i(4, wrap)
            .t(2, idx)
    };
    if op == "_backward_take" {
        fill_with(s, &outs[0], 0.0)?;
        let a = args(0).t(0, &outs[0]).t(1, &ins[0]);
        return add_rows(s, a, (outer, inner, idx.len()), false);
    }
    let n = outs[0].len();
    s.launch("take_fwd", n, &args(n).t(0, &outs[0]).t(1, table))
}

/// pick and its gradient (`_backward_pick(ograd, index, data)`): one index per (outer, inner)
/// of the data's layout around the axis picked from. batch_take is pick over the last axis,
/// clipped.
fn pick(op: &str, attrs: &Attrs, ins: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    let backward = op == "_backward_pick";
    let data = if backward { &outs[0] } else { &ins[0] };
    let ([lanes, inner], wrap) = match op {
        "batch_take" => ([data.shape.last().copied().unwrap_or(1), 1], false),
        _ => {
            let (_, _, [_, lanes, inner]) =
                crate::ops::pick_layout(op, attrs, &data.shape).map_err(e2s)?;
            (
                [lanes, inner],
                crate::ops::pick_wrap(op, attrs).map_err(e2s)?,
            )
        }
    };
    let n = ins[1].len();
    if lanes == 0 && n > 0 {
        return Err(format!(
            "{op}: cannot pick from an empty axis (data {:?})",
            data.shape
        ));
    }
    if backward {
        fill_with(s, &outs[0], 0.0)?;
    }
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, &ins[0])
        .t(2, &ins[1])
        .i(1, inner.max(1))
        .i(2, lanes.max(1))
        .i(3, usize::from(wrap))
        .i(4, usize::from(backward));
    s.launch("pick", n, &a)
}

/// softmax_cross_entropy(data (n, k), label (n,)) -> (1,), and its gradient
/// `(ograd (1,), data, label) -> d data`. The CPU refuses a label that is not a class index, so
/// the labels are read back and checked with its code (one wait for the device per call).
fn cross_entropy(
    op: &str,
    _: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let backward = op == "_backward_softmax_cross_entropy";
    let (x, label) = if backward {
        (&ins[1], &ins[2])
    } else {
        (&ins[0], &ins[1])
    };
    let (rows, k) = (x.shape[0], x.shape[1]);
    for l in s.download(label)? {
        crate::ops::class_of(f64::from(l), k, op)?;
    }
    let args = |n: usize, mode: usize| {
        KArgs::new(n)
            .t(0, &outs[0])
            .t(1, x)
            .t(2, label)
            .i(1, k)
            .i(2, mode)
    };
    if rows == 0 {
        // A zero loss; no gradient to write.
        return match backward {
            true => Ok(()),
            false => fill_with(s, &outs[0], 0.0),
        };
    }
    // Each row's log-sum-exp from its maximum and sum of exponentials, as softmax finds them.
    let figures = lane_args(&x.shape, 1, 1.0, false)
        .on(&[&outs[0], x])
        .figures(s, lane_parts(rows, k))?;
    if backward {
        let n = rows * k;
        return s.launch("cross_entropy", n, &args(n, 1).p(5, figures).t(4, &ins[0]));
    }
    // The rows' losses, then their sum as one row of partial sums.
    let losses = s.scratch(partial_doubles(1, rows) * 8)?.cast::<f32>();
    let a = args(rows, 0).p(5, figures).p(3, losses);
    s.launch("cross_entropy", rows, &a)?;
    let (sums, p) = fold_partials(s, losses, 1, rows)?;
    let total = KArgs::new(1).t(0, &outs[0]).p(1, sums).i(1, p).f(0, 1.0);
    s.launch("chan_total", 1, &total)
}

/// `_arange`: `start + step * (k / repeat)`, in double as the CPU computes it.
fn arange(op: &str, attrs: &Attrs, _: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    let (start, step, _, repeat) = crate::ops::arange_params(op, attrs).map_err(e2s)?;
    let n = outs[0].len();
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .i(1, repeat)
        .bits(2, start)
        .bits(3, step);
    s.launch("arange", n, &a)
}

/// `_backward_math(ograd, v)`: the gradient through the function named by `fn`.
fn unary_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let f = attrs.get("fn").unwrap_or_default();
    let code = unary_code(f).ok_or_else(|| format!("{op}: {f:?} is not a unary function"))?;
    let n = outs[0].len();
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, &ins[0])
        .t(2, &ins[1])
        .i(1, code);
    s.launch("unary_bwd", n, &a)
}

fn act_code(op: &str, attrs: &Attrs) -> Result<usize, String> {
    let kind = match op {
        "Activation" | "_backward_Activation" => attrs.get("act_type").unwrap_or("relu"),
        other => other,
    };
    Ok(match kind {
        "relu" => 0,
        "sigmoid" => 1,
        "tanh" => 2,
        "softrelu" => 3,
        "softsign" => 4,
        other => return Err(format!("{op}: act_type {other:?} has no GPU kernel")),
    })
}

fn activation(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let n = outs[0].len();
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, &ins[0])
        .i(1, act_code(op, attrs)?);
    s.launch("act_fwd", n, &a)
}

fn activation_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let n = outs[0].len();
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, &ins[0])
        .t(2, &ins[1])
        .i(1, act_code(op, attrs)?);
    s.launch("act_bwd", n, &a)
}

/// The `binary` kernel's code for `op`.
fn binary_code(op: &str) -> Option<usize> {
    Some(match crate::ops::broadcast_twin(op) {
        "elemwise_add" | "broadcast_add" => 0,
        "elemwise_sub" | "broadcast_sub" => 1,
        "elemwise_mul" | "broadcast_mul" => 2,
        "elemwise_div" | "broadcast_div" => 3,
        "broadcast_maximum" => 4,
        "broadcast_minimum" => 5,
        "broadcast_power" => 6,
        "broadcast_equal" => 7,
        "broadcast_not_equal" => 8,
        "broadcast_greater" => 9,
        "broadcast_greater_equal" => 10,
        "broadcast_lesser" => 11,
        "broadcast_lesser_equal" => 12,
        "broadcast_hypot" => 13,
        "broadcast_mod" => 14,
        "broadcast_logical_and" => 15,
        "broadcast_logical_or" => 16,
        "broadcast_logical_xor" => 17,
        _ => return None,
    })
}

/// The most dims the `binary` kernel indexes (its arguments hold four dims and two strides each).
const BINARY_RANK: usize = 4;

/// The dims of a broadcast `out = a op b` as the `binary` kernel walks them: `[dim, a's stride,
/// b's stride]` per dim, outermost first, with size-1 dims dropped and each dim merged into the
/// one outside it wherever both inputs step through the pair as through one dim. Equal shapes
/// become one dim, a bias added along one axis at most three.
fn broadcast_dims(a: &[usize], b: &[usize], out: &[usize]) -> Vec<[usize; 3]> {
    let (sa, sb) = (broadcast_strides(a, out), broadcast_strides(b, out));
    let mut dims: Vec<[usize; 3]> = Vec::with_capacity(out.len());
    for (d, &n) in out.iter().enumerate().filter(|(_, &n)| n != 1) {
        match dims.last_mut() {
            Some(last) if last[1] == sa[d] * n && last[2] == sb[d] * n => {
                *last = [last[0] * n, sa[d], sb[d]];
            }
            _ => dims.push([n, sa[d], sb[d]]),
        }
    }
    dims
}

fn binary(op: &str, _: &Attrs, ins: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    let code = binary_code(op).ok_or_else(|| format!("no binary kernel for {op}"))?;
    let (a, b, out) = (&ins[0], &ins[1], &outs[0]);
    let dims = broadcast_dims(&a.shape, &b.shape, &out.shape);
    if dims.len() > BINARY_RANK {
        return Err(format!(
            "{op}: broadcasting {:?} and {:?} to {:?} takes {} dims after merging; the GPU \
             kernel walks at most {BINARY_RANK}",
            a.shape,
            b.shape,
            out.shape,
            dims.len()
        ));
    }
    let n = out.len();
    let mut k = KArgs::new(n)
        .t(0, out)
        .t(1, a)
        .t(2, b)
        .i(1, code)
        .i(2, dims.len());
    for (d, [dim, sa, sb]) in dims.into_iter().enumerate() {
        k = k.i(3 + d, dim).i(7 + d, sa).i(11 + d, sb);
    }
    s.launch("binary", n, &k)
}

/// `out = a * b` over `n` elements (buffers of equal length; `out` may be either).
pub(super) fn multiply(
    s: &dyn Stream,
    out: *mut f32,
    a: *mut f32,
    b: *mut f32,
    n: usize,
) -> KResult {
    let code = binary_code("elemwise_mul").ok_or("no binary kernel for elemwise_mul")?;
    let k = KArgs::new(n)
        .p(0, out)
        .p(1, a)
        .p(2, b)
        .i(1, code)
        .i(2, 1)
        .i(3, n)
        .i(7, 1)
        .i(11, 1);
    s.launch("binary", n, &k)
}

fn scalar(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let value = crate::ops::scalar_of(op, attrs).map_err(e2s)?;
    scalar_with(s, op, &outs[0], &ins[0], value)
}

/// The `scalar` kernel's code for a scalar op (the `binary` kernel's codes), and whether the
/// scalar is the left operand.
fn scalar_code(op: &str) -> Option<(usize, bool)> {
    Some(match op {
        "_plus_scalar" => (0, false),
        "_minus_scalar" => (1, false),
        "_rminus_scalar" => (1, true),
        "_mul_scalar" => (2, false),
        "_div_scalar" => (3, false),
        "_rdiv_scalar" => (3, true),
        "_maximum_scalar" => (4, false),
        "_minimum_scalar" => (5, false),
        "_power_scalar" => (6, false),
        "_rpower_scalar" => (6, true),
        "_equal_scalar" => (7, false),
        "_not_equal_scalar" => (8, false),
        "_greater_scalar" => (9, false),
        "_greater_equal_scalar" => (10, false),
        "_lesser_scalar" => (11, false),
        "_lesser_equal_scalar" => (12, false),
        "_hypot_scalar" => (13, false),
        "_mod_scalar" => (14, false),
        "smooth_l1" => (18, false),
        _ => return None,
    })
}

/// `out = x (op) value` for a scalar op's name, by the `scalar` kernel (which reads each index
/// before writing it, so `out` may be `x`).
fn scalar_with(s: &dyn Stream, op: &str, out: &TensorRef, x: &TensorRef, value: f64) -> KResult {
    let (code, left) = scalar_code(op).ok_or_else(|| format!("{op} is not a scalar op"))?;
    let n = out.len();
    let a = KArgs::new(n)
        .t(0, out)
        .t(1, x)
        .i(1, code)
        .i(2, usize::from(left))
        .f(0, value);
    s.launch("scalar", n, &a)
}

/// clip and hard_sigmoid: an affine map, clamped.
fn clamp(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (scale, shift, lo, hi) = match op {
        "clip" => (
            1.0,
            0.0,
            attrs.float(op, "a_min", None).map_err(e2s)?,
            attrs.float(op, "a_max", None).map_err(e2s)?,
        ),
        _ => {
            let (alpha, beta) = crate::ops::hard_sigmoid_params(op, attrs).map_err(e2s)?;
            (alpha, beta, 0.0, 1.0)
        }
    };
    let n = outs[0].len();
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, &ins[0])
        .f(0, scale)
        .f(1, shift)
        .f(2, lo)
        .f(3, hi);
    s.launch("clamp_affine", n, &a)
}

/// where(condition, x, y): the condition has x's shape or one value per row of x's first axis.
fn select(_: &str, _: &Attrs, ins: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    let (c, o) = (&ins[0], &outs[0]);
    let n = o.len();
    let per_row = if c.len() == n { 1 } else { n / c.len().max(1) };
    let a = KArgs::new(n)
        .t(0, o)
        .t(1, c)
        .t(2, &ins[1])
        .t(3, &ins[2])
        .i(1, per_row.max(1));
    s.launch("where_select", n, &a)
}

fn one_hot(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (depth, on, off) = crate::ops::one_hot_params(op, attrs).map_err(e2s)?;
    let n = outs[0].len();
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, &ins[0])
        .i(1, depth.max(1))
        .f(0, on)
        .f(1, off);
    s.launch("one_hot", n, &a)
}

/// max, min, prod, argmax, argmin (`reduce_lanes`, or split into parts over few long lanes) and
/// norm (squares or magnitudes summed as `sum` sums, then a square root for ord 2).
fn reduce_other(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (x, out) = (&ins[0], &outs[0]);
    let nd = x.shape.len();
    if op == "norm" {
        let axes = crate::ops::reduced_axes(op, attrs, nd).map_err(e2s)?;
        let (f, root) = match crate::ops::norm_ord(op, attrs).map_err(e2s)? {
            1 => ("abs", false),
            _ => ("square", true),
        };
        let n = x.len();
        let mapped = s.scratch(n * 4)?.cast::<f32>();
        let code = |f: &str| unary_code(f).ok_or_else(|| format!("{f} is not a unary function"));
        s.launch(
            "unary_fwd",
            n,
            &KArgs::new(n).p(0, mapped).t(1, x).i(1, code(f)?),
        )?;
        sum_axes(s, op, (mapped, &x.shape), &axes, out.ptr(), 1.0)?;
        if !root {
            return Ok(());
        }
        let m = out.len();
        let a = KArgs::new(m).t(0, out).t(1, out).i(1, code("sqrt")?);
        return s.launch("unary_fwd", m, &a);
    }
    let code = match op {
        "max" => 0,
        "min" => 1,
        "prod" => 2,
        "argmax" => 3,
        _ => 4,
    };
    let axes = match op {
        // One axis, or none: the flattened data.
        "argmax" | "argmin" => match attrs.ints(op, "axis").map_err(e2s)? {
            None => (0..nd).collect(),
            Some(a) => crate::ops::norm_axes(op, &a, nd).map_err(e2s)?,
        },
        _ => crate::ops::reduced_axes(op, attrs, nd).map_err(e2s)?,
    };
    let count: usize = axes.iter().map(|&a| x.shape[a]).product();
    let n = out.len();
    let consecutive = axes.windows(2).all(|w| w[1] == w[0] + 1);
    let (src, layout) = match (axes.first(), axes.last()) {
        (Some(_), Some(&last)) if consecutive => {
            let inner: usize = x.shape[last + 1..].iter().product();
            (x.ptr(), (count, inner))
        }
        (Some(_), Some(_)) => {
            // The kept axes first, the reduced ones last: each lane is contiguous.
            let steps = strides(&x.shape);
            let order = (0..nd)
                .filter(|d| !axes.contains(d))
                .chain(axes.iter().copied());
            let moved = s.scratch(x.len() * 4)?.cast::<f32>();
            strided_copy(s, op, moved, x.ptr(), order.map(|d| [x.shape[d], steps[d]]))?;
            (moved, (count, 1))
        }
        _ => (x.ptr(), (1, 1)),
    };
    let a = KArgs::new(n)
        .t(0, out)
        .p(1, src)
        .i(1, layout.0)
        .i(2, layout.1.max(1))
        .i(3, code);
    let split = lane_parts(n, layout.0);
    if split == 1 {
        return s.launch("reduce_lanes", n, &a);
    }
    let a = a.p(2, s.scratch(n * split * 16)?.cast()).i(4, split);
    s.launch("reduce_parts", n * split, &a.i(0, n * split))?;
    s.launch("reduce_join", n, &a.i(0, n))
}

/// Inputs the `add_n` kernel sums in one launch.
const ADD_N_WIDTH: usize = 7;

fn add_n(_: &str, _: &Attrs, ins: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    let n = outs[0].len();
    let sum = |dst: *mut f32, first: Option<*mut f32>, rest: &[TensorRef]| {
        let mut a = KArgs::new(n).p(0, dst);
        let mut k = 1;
        if let Some(p) = first {
            a = a.p(1, p);
            k = 2;
        }
        for t in rest {
            a = a.t(k, t);
            k += 1;
        }
        s.launch("add_n", n, &a.i(1, k - 1))
    };
    if ins.len() <= ADD_N_WIDTH {
        return sum(outs[0].ptr(), None, ins);
    }
    // More inputs than one launch takes: accumulate in scratch (an input may be the output, so the
    // output is written only at the end).
    let acc = s.scratch(outs[0].buf.bytes)?.cast::<f32>();
    let (head, mut rest) = ins.split_at(ADD_N_WIDTH);
    sum(acc, None, head)?;
    while !rest.is_empty() {
        let (part, tail) = rest.split_at(rest.len().min(ADD_N_WIDTH - 1));
        sum(acc, Some(acc), part)?;
        rest = tail;
    }
    s.copy(acc.cast(), outs[0].buf.ptr, outs[0].buf.bytes)
}

/// How many partial sums per channel the reductions start with: enough threads to keep a GPU's
/// memory busy (a quarter million in flight; too few left BatchNorm's sums at a tenth of the
/// memory's speed), each summing at least 32 elements.
fn parts(channels: usize, per_channel: usize) -> usize {
    const THREADS: usize = 1 << 18;
    (per_channel / 32)
        .min(THREADS / channels.max(1))
        .clamp(1, 1 << 12)
}

/// How many threads, each with a lane of its own, count as filling a GPU: about a quarter of
/// the 270,336 an H100's 132 SMs hold at once (chosen, not measured on a GPU).
const FILLS_A_GPU: usize = 1 << 16;

/// How many parts each of `lanes` lanes of `len` elements is split into for a reduction along
/// them (1: one thread per lane): where the lanes alone would not fill a GPU (a classifier's
/// classes over a small batch, a whole array's maximum), as [`parts`] splits channels.
pub(super) fn lane_parts(lanes: usize, len: usize) -> usize {
    match lanes >= FILLS_A_GPU {
        true => 1,
        false => parts(lanes, len),
    }
}

/// How many partial sums one `chan_fold` thread adds.
const FOLD: usize = 32;

/// Doubles of scratch [`channel_partials`] needs for `parts` partial sums in each of `sums`
/// planes of `channels` channels: the partial sums and, folded, a second buffer for what each
/// fold leaves.
fn partial_doubles(sums: usize, parts: usize) -> usize {
    sums * (parts + parts.div_ceil(FOLD))
}

/// What [`channel_partials`] sums per channel (`chan_partial`'s modes in `kernels.cu`).
#[derive(Clone, Copy)]
enum ChannelSums {
    /// The data.
    Plain,
    /// The data and its squares, two planes.
    AndSquares,
    /// The data and its products with another tensor of the same layout, two planes.
    AndProducts(*mut f32),
}

impl ChannelSums {
    fn planes(self) -> usize {
        match self {
            ChannelSums::Plain => 1,
            _ => 2,
        }
    }
}

/// Per-channel partial sums over an `(outer, channels, inner)` layout, folded until at most
/// [`FOLD`] are left per channel and plane; returns where they are (doubles, planes one after
/// another) and how many each channel has. `partials` holds [`partial_doubles`] doubles.
fn channel_partials(
    s: &dyn Stream,
    partials: *mut f32,
    sums: ChannelSums,
    src: *mut f32,
    (outer, channels, inner): (usize, usize, usize),
) -> Result<(*mut f32, usize), String> {
    let p = parts(channels, outer * inner);
    let (mode, other) = match sums {
        ChannelSums::Plain => (0, std::ptr::null_mut()),
        ChannelSums::AndSquares => (1, std::ptr::null_mut()),
        ChannelSums::AndProducts(other) => (2, other),
    };
    let a = KArgs::new(channels)
        .p(0, partials)
        .p(1, src)
        .p(2, other)
        .i(1, outer)
        .i(2, inner)
        .i(3, p)
        .i(4, mode);
    s.launch("chan_partial", channels * p, &a)?;
    fold_partials(s, partials, sums.planes() * channels, p)
}

/// Adds up runs of [`FOLD`] of each of `rows` rows of `p` partial sums (doubles at `partials`,
/// with room after them for a second buffer, as [`partial_doubles`] counts) until at most
/// [`FOLD`] are left per row; returns where they are and how many each row has.
fn fold_partials(
    s: &dyn Stream,
    partials: *mut f32,
    rows: usize,
    mut p: usize,
) -> Result<(*mut f32, usize), String> {
    // SAFETY: the scratch holds the second buffer after the partial sums.
    let (mut from, mut to) = (
        partials,
        unsafe { partials.cast::<f64>().add(rows * p) }.cast(),
    );
    while p > FOLD {
        let folded = p.div_ceil(FOLD);
        let a = KArgs::new(rows * folded)
            .p(0, to)
            .p(1, from)
            .i(1, FOLD)
            .i(2, p);
        s.launch("chan_fold", rows * folded, &a)?;
        (from, to, p) = (to, from, folded);
    }
    Ok((from, p))
}

/// A per-channel sum over an `(outer, channels, inner)` layout into `out`, times `scale`.
fn channel_sum(
    s: &dyn Stream,
    out: *mut f32,
    src: *mut f32,
    layout: (usize, usize, usize),
    scale: f64,
) -> KResult {
    let channels = layout.1;
    let (partials, _) = reduction_scratch(s, ChannelSums::Plain, layout, 0)?;
    let (sums, p) = channel_partials(s, partials, ChannelSums::Plain, src, layout)?;
    let a = KArgs::new(channels)
        .p(0, out)
        .p(1, sums)
        .i(1, p)
        .f(0, scale);
    s.launch("chan_total", channels, &a)
}

/// Scratch for [`channel_partials`] of `sums` over `layout`, plus `extra` floats after it;
/// returns (partials, extra).
fn reduction_scratch(
    s: &dyn Stream,
    sums: ChannelSums,
    (outer, channels, inner): (usize, usize, usize),
    extra: usize,
) -> Result<(*mut f32, *mut f32), String> {
    let p = parts(channels, outer * inner);
    let partial_bytes = partial_doubles(sums.planes() * channels, p) * 8;
    let base = s.scratch(partial_bytes + extra * 4)?;
    // SAFETY: the scratch block holds both parts.
    let extra = unsafe { base.add(partial_bytes) };
    Ok((base.cast(), extra.cast()))
}

fn no_bias(op: &str, attrs: &Attrs) -> Result<bool, String> {
    attrs.bool(op, "no_bias", false).map_err(e2s)
}

fn fully_connected(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (x, w, y) = (&ins[0], &ins[1], &outs[0]);
    let (m, hidden, k) = fc_dims(x, w);
    s.gemm(&Gemm {
        ta: false,
        tb: true,
        m,
        n: hidden,
        k,
        a: x.ptr(),
        lda: k,
        b: w.ptr(),
        ldb: k,
        c: y.ptr(),
        ldc: hidden,
        beta: 0.0,
    })?;
    if !no_bias(op, attrs)? {
        let n = y.len();
        let a = KArgs::new(n).t(0, y).t(1, &ins[2]).i(1, 1).i(2, hidden);
        s.launch("add_bias", n, &a)?;
    }
    Ok(())
}

fn fully_connected_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (dy, x, w) = (&ins[0], &ins[1], &ins[2]);
    let (m, hidden, k) = fc_dims(x, w);
    // dx = dy w; dw = dy^T x.
    s.gemm(&Gemm {
        ta: false,
        tb: false,
        m,
        n: k,
        k: hidden,
        a: dy.ptr(),
        lda: hidden,
        b: w.ptr(),
        ldb: k,
        c: outs[0].ptr(),
        ldc: k,
        beta: 0.0,
    })?;
    s.gemm(&Gemm {
        ta: true,
        tb: false,
        m: hidden,
        n: k,
        k: m,
        a: dy.ptr(),
        lda: hidden,
        b: x.ptr(),
        ldb: k,
        c: outs[1].ptr(),
        ldc: k,
        beta: 0.0,
    })?;
    if !no_bias(op, attrs)? {
        channel_sum(s, outs[2].ptr(), dy.ptr(), (m, hidden, 1), 1.0)?;
    }
    Ok(())
}

/// The im2col / col2im arguments of one convolution.
fn conv_args(
    n: usize,
    c: &crate::ops::conv::Conv,
    h: usize,
    w: usize,
    ho: usize,
    wo: usize,
) -> KArgs {
    KArgs::new(n)
        .i(1, h)
        .i(2, w)
        .i(3, c.k.0)
        .i(4, c.k.1)
        .i(5, c.s.0)
        .i(6, c.s.1)
        .i(7, c.p.0)
        .i(8, c.p.1)
        .i(9, c.d.0)
        .i(10, c.d.1)
        .i(11, ho)
        .i(12, wo)
}

/// How a convolution walks its batch: `chunk` images at a time, each chunk's columns in one
/// scratch buffer, so that a chunk is one im2col launch and one (batched) GEMM per group rather
/// than one of each per image — per-image products of a late ResNet layer (7x7 planes) are too
/// small to fill a GPU. The chunk is as large as the op's `workspace` (MXNet's attribute, in MB,
/// default 1024) allows for `per_image` bytes of scratch.
fn conv_chunk(op: &str, attrs: &Attrs, n: usize, per_image: usize) -> Result<usize, String> {
    let bytes = workspace_bytes(op, attrs)?;
    Ok((bytes / per_image.max(1)).clamp(1, n.max(1)))
}

/// The op's `workspace` attribute in bytes.
fn workspace_bytes(op: &str, attrs: &Attrs) -> Result<usize, String> {
    let mb = attrs.f64(op, "workspace", Some(1024.0)).map_err(e2s)?;
    if mb.is_nan() || mb <= 0.0 {
        return Err(format!(
            "{op}: workspace must be a positive number of MB, got {mb}"
        ));
    }
    Ok((mb * (1 << 20) as f64) as usize)
}

/// Runs one pass of a convolution through the stream's convolution library (cuDNN), unless the
/// op's `cudnn_off` says not to, the batch is empty or the stream has none; whether it did.
/// `[data, filter, out]` as [`ConvCall`] names them.
fn by_library(
    op: &str,
    attrs: &Attrs,
    c: &crate::ops::conv::Conv,
    d: &ConvDims,
    pass: ConvPass,
    [data, filter, out]: [*mut f32; 3],
    s: &dyn Stream,
) -> Result<bool, String> {
    // cuDNN's 4-D descriptors take int dimensions and strides: larger tensors take im2col.
    let fits = |len: usize| len <= i32::MAX as usize;
    let sizes = [
        d.n * d.ch * d.h * d.w,
        d.n * c.filters * d.ho * d.wo,
        c.filters * d.cg * c.k.0 * c.k.1,
    ];
    if d.n == 0
        || !sizes.into_iter().all(fits)
        || attrs.bool(op, "cudnn_off", false).map_err(e2s)?
    {
        return Ok(false);
    }
    let shape = ConvShape {
        pass,
        x: [d.n, d.ch, d.h, d.w],
        w: [c.filters, d.cg, c.k.0, c.k.1],
        y: [d.n, c.filters, d.ho, d.wo],
        pad: c.p,
        stride: c.s,
        dilate: c.d,
        groups: c.groups,
        workspace: workspace_bytes(op, attrs)?,
        tune: attrs.get("cudnn_tune") != Some("off"),
    };
    let call = ConvCall {
        shape,
        data,
        filter,
        out,
    };
    match s.conv(&call) {
        Some(done) => done.map(|()| true).map_err(|e| format!("{op}: {e}")),
        None => Ok(false),
    }
}

/// im2col over `nb` images of one channel group: `src` is the first image's group, the images
/// `image` floats apart; `dst` gets (rows, nb, plane).
#[allow(clippy::too_many_arguments)]
fn im2col(
    s: &dyn Stream,
    c: &crate::ops::conv::Conv,
    (h, w, ho, wo): (usize, usize, usize, usize),
    rows: usize,
    nb: usize,
    src: *mut f32,
    image: usize,
    dst: *mut f32,
) -> KResult {
    let n = rows * nb * ho * wo;
    let a = conv_args(n, c, h, w, ho, wo)
        .p(0, dst)
        .p(1, src)
        .i(13, nb)
        .i(14, image);
    s.launch("im2col", n, &a)
}

fn convolution(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let c = conv_params(op, attrs).map_err(e2s)?;
    let (x, wt, o) = (&ins[0], &ins[1], &outs[0]);
    let dims = c.dims(&x.shape, &o.shape);
    let pointers = [x.ptr(), wt.ptr(), o.ptr()];
    if !by_library(op, attrs, &c, &dims, ConvPass::Forward, pointers, s)? {
        conv_forward_columns(op, attrs, &c, &dims, [x, wt, o], s)?;
    }
    if c.bias {
        let total = o.len();
        let a = KArgs::new(total)
            .t(0, o)
            .t(1, &ins[2])
            .i(1, dims.ho * dims.wo)
            .i(2, c.filters);
        s.launch("add_bias", total, &a)?;
    }
    Ok(())
}

/// The forward pass by im2col and batched GEMMs.
fn conv_forward_columns(
    op: &str,
    attrs: &Attrs,
    c: &crate::ops::conv::Conv,
    dims: &ConvDims,
    [x, wt, o]: [&TensorRef; 3],
    s: &dyn Stream,
) -> KResult {
    let ConvDims {
        n,
        ch,
        h,
        w,
        ho,
        wo,
        cg,
        fg,
        rows,
    } = *dims;
    let plane = ho * wo;
    let direct = c.columns_are_input();
    let chunk = if direct {
        n
    } else {
        conv_chunk(op, attrs, n, rows * plane * 4)?
    };
    let col = if direct {
        std::ptr::null_mut()
    } else {
        s.scratch(chunk * rows * plane * 4)?.cast::<f32>()
    };
    for first in (0..n).step_by(chunk) {
        let nb = chunk.min(n - first);
        for g in 0..c.groups {
            // SAFETY: (pointer arithmetic) image `first`, group `g` lies inside each tensor.
            let (src, wg, og) = unsafe {
                (
                    x.ptr::<f32>().add((first * ch + g * cg) * h * w),
                    wt.ptr::<f32>().add(g * fg * rows),
                    o.ptr::<f32>().add((first * c.filters + g * fg) * plane),
                )
            };
            // Image b's columns: at b * stride, rows ld apart.
            let (b, ld, stride) = if direct {
                (src, plane, ch * h * w)
            } else {
                im2col(s, c, (h, w, ho, wo), rows, nb, src, ch * h * w, col)?;
                (col, nb * plane, plane)
            };
            let gemm = Gemm {
                ta: false,
                tb: false,
                m: fg,
                n: plane,
                k: rows,
                a: wg,
                lda: rows,
                b,
                ldb: ld,
                c: og,
                ldc: plane,
                beta: 0.0,
            };
            s.gemm_batched(&gemm, nb, [0, stride, c.filters * plane])?;
        }
    }
    Ok(())
}

fn convolution_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let c = conv_params(op, attrs).map_err(e2s)?;
    let (dy, x, wt) = (&ins[0], &ins[1], &ins[2]);
    let dims = c.dims(&x.shape, &dy.shape);
    let (dx, dw) = (&outs[0], &outs[1]);
    let data = [dx.ptr(), wt.ptr(), dy.ptr()];
    let filter = [x.ptr(), dw.ptr(), dy.ptr()];
    if !(by_library(op, attrs, &c, &dims, ConvPass::Data, data, s)?
        && by_library(op, attrs, &c, &dims, ConvPass::Filter, filter, s)?)
    {
        conv_backward_columns(op, attrs, &c, &dims, [dy, x, wt], [Some(dx), Some(dw)], s)?;
    }
    if c.bias {
        let layout = (dims.n, c.filters, dims.ho * dims.wo);
        channel_sum(s, outs[2].ptr(), dy.ptr(), layout, 1.0)?;
    }
    Ok(())
}

/// Deconvolution: the transpose of the convolution `deconv_as_conv` describes (data of the
/// Deconvolution's output shape, filters as many as its input channels), so its forward pass is
/// that convolution's data-gradient pass with the input as the output gradient.
fn deconvolution(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (x, wt, y) = (&ins[0], &ins[1], &outs[0]);
    let c =
        crate::ops::deconv_as_conv(op, attrs, (x.shape[2], x.shape[3]), x.shape[1]).map_err(e2s)?;
    let dims = c.dims(&y.shape, &x.shape);
    let pointers = [y.ptr(), wt.ptr(), x.ptr()];
    if !by_library(op, attrs, &c, &dims, ConvPass::Data, pointers, s)? {
        // The convolution's data (`y`) is read only for a filter gradient, not asked here.
        conv_backward_columns(op, attrs, &c, &dims, [x, y, wt], [Some(y), None], s)?;
    }
    if crate::ops::has_bias(op, attrs).map_err(e2s)? {
        let total = y.len();
        let a = KArgs::new(total)
            .t(0, y)
            .t(1, &ins[2])
            .i(1, y.shape[2] * y.shape[3])
            .i(2, y.shape[1]);
        s.launch("add_bias", total, &a)?;
    }
    Ok(())
}

/// `_backward_Deconvolution(ograd, data, weight)`: the data's gradient is the transposed
/// convolution's forward pass over the output gradient, the weight's its filter gradient with
/// the output gradient as data and the data as output gradient.
fn deconvolution_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (dy, x, wt) = (&ins[0], &ins[1], &ins[2]);
    let c =
        crate::ops::deconv_as_conv(op, attrs, (x.shape[2], x.shape[3]), x.shape[1]).map_err(e2s)?;
    let dims = c.dims(&dy.shape, &x.shape);
    let (dx, dw) = (&outs[0], &outs[1]);
    if !by_library(
        op,
        attrs,
        &c,
        &dims,
        ConvPass::Forward,
        [dy.ptr(), wt.ptr(), dx.ptr()],
        s,
    )? {
        conv_forward_columns(op, attrs, &c, &dims, [dy, wt, dx], s)?;
    }
    if !by_library(
        op,
        attrs,
        &c,
        &dims,
        ConvPass::Filter,
        [dy.ptr(), dw.ptr(), x.ptr()],
        s,
    )? {
        conv_backward_columns(op, attrs, &c, &dims, [x, dy, wt], [None, Some(dw)], s)?;
    }
    if crate::ops::has_bias(op, attrs).map_err(e2s)? {
        let layout = (dy.shape[0], dy.shape[1], dy.shape[2] * dy.shape[3]);
        channel_sum(s, outs[2].ptr(), dy.ptr(), layout, 1.0)?;
    }
    Ok(())
}

/// UpSampling: nearest is a gather, bilinear a depthwise Deconvolution (as on the CPU).
fn upsampling(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    match crate::ops::bilinear_upsampling(op, attrs).map_err(e2s)? {
        Some(deconv) => deconvolution(op, &deconv, ins, outs, s),
        None => super::gather::gather(op, attrs, ins, outs, s),
    }
}

/// The backward pass by im2col, GEMMs and col2im: the data's gradient, the filters' or both
/// (Deconvolution asks for one at a time).
fn conv_backward_columns(
    op: &str,
    attrs: &Attrs,
    c: &crate::ops::conv::Conv,
    dims: &ConvDims,
    [dy, x, wt]: [&TensorRef; 3],
    [dx, dw]: [Option<&TensorRef>; 2],
    s: &dyn Stream,
) -> KResult {
    let ConvDims {
        n,
        ch,
        h,
        w,
        ho,
        wo,
        cg,
        fg,
        rows,
    } = *dims;
    let plane = ho * wo;
    let direct = c.columns_are_input();
    // Per image: x's columns and dY's planes regrouped as (fg, nb, plane), and unless dX comes
    // straight from the GEMM, dX's columns.
    let per_image = (rows * plane + fg * plane + if direct { 0 } else { rows * plane }) * 4;
    let chunk = conv_chunk(op, attrs, n, per_image)?;
    let col = s.scratch(chunk * per_image)?.cast::<f32>();
    // SAFETY: the scratch holds the three buffers, one after another.
    let (dyt, dcol) = unsafe {
        let dyt = col.add(chunk * rows * plane);
        (dyt, dyt.add(chunk * fg * plane))
    };
    let one = crate::ops::conv::Conv {
        k: (1, 1),
        s: (1, 1),
        p: (0, 0),
        d: (1, 1),
        ..*c
    };
    if let (0, Some(dw)) = (n, dw) {
        fill_with(s, dw, 0.0)?;
    }
    for first in (0..n).step_by(chunk) {
        let nb = chunk.min(n - first);
        for g in 0..c.groups {
            // SAFETY: (pointer arithmetic) image `first`, group `g` lies inside each tensor.
            let (xg, dyg, wg) = unsafe {
                (
                    x.ptr::<f32>().add((first * ch + g * cg) * h * w),
                    dy.ptr::<f32>().add((first * c.filters + g * fg) * plane),
                    wt.ptr::<f32>().add(g * fg * rows),
                )
            };
            let (filters, image) = (c.filters * plane, ch * h * w);
            // dY's planes regrouped: for dW, and for dX unless it comes straight from the GEMM.
            if dw.is_some() || !direct {
                im2col(s, &one, (ho, wo, ho, wo), fg, nb, dyg, filters, dyt)?;
            }
            if let Some(dw) = dw {
                im2col(s, c, (h, w, ho, wo), rows, nb, xg, ch * h * w, col)?;
                // SAFETY: (pointer arithmetic) group `g`'s filters lie inside dW.
                let dwg = unsafe { dw.ptr::<f32>().add(g * fg * rows) };
                conv_filter_gemm(s, (fg, rows, nb * plane), dyt, col, dwg, first == 0)?;
            }
            let Some(dx) = dx else { continue };
            // SAFETY: (pointer arithmetic) image `first`, group `g` lies inside dX.
            let dxg = unsafe { dx.ptr::<f32>().add((first * ch + g * cg) * h * w) };
            // dX: W_g^T dY_g, straight into dX when the columns are the input, else into
            // columns gathered back.
            let gemm = Gemm {
                ta: true,
                tb: false,
                m: rows,
                n: plane,
                k: fg,
                a: wg,
                lda: rows,
                b: dyg,
                ldb: plane,
                c: dxg,
                ldc: plane,
                beta: 0.0,
            };
            if direct {
                s.gemm_batched(&gemm, nb, [0, filters, image])?;
            } else {
                let gemm = Gemm {
                    n: nb * plane,
                    b: dyt,
                    ldb: nb * plane,
                    c: dcol,
                    ldc: nb * plane,
                    ..gemm
                };
                s.gemm(&gemm)?;
                let a = conv_args(nb * cg * h * w, c, h, w, ho, wo)
                    .p(0, dxg)
                    .p(1, dcol)
                    .i(13, nb)
                    .i(14, image)
                    .i(15, cg);
                s.launch("col2im", nb * cg * h * w, &a)?;
            }
        }
    }
    Ok(())
}

/// dW_g (+)= dY_g col^T over a chunk's images at once: `(fg, rows, k = images * plane)`; the
/// first chunk writes, the later ones add.
fn conv_filter_gemm(
    s: &dyn Stream,
    (fg, rows, k): (usize, usize, usize),
    dyt: *mut f32,
    col: *mut f32,
    dwg: *mut f32,
    first: bool,
) -> KResult {
    s.gemm(&Gemm {
        ta: false,
        tb: true,
        m: fg,
        n: rows,
        k,
        a: dyt,
        lda: k,
        b: col,
        ldb: k,
        c: dwg,
        ldc: rows,
        beta: if first { 0.0 } else { 1.0 },
    })
}

/// The pooling kernels' arguments: `n` threads over data of `x_shape` pooled to `ho x wo`.
fn pool_args(
    op: &str,
    attrs: &Attrs,
    x_shape: &[usize],
    n: usize,
    ho: usize,
    wo: usize,
) -> Result<KArgs, String> {
    let p = pool_params(op, attrs, x_shape).map_err(e2s)?;
    let kind = match p.kind {
        PoolType::Max => 0,
        PoolType::Avg => 1,
        PoolType::Sum => 2,
    };
    Ok(KArgs::new(n)
        .i(1, x_shape[2])
        .i(2, x_shape[3])
        .i(3, ho)
        .i(4, wo)
        .i(5, p.k.0)
        .i(6, p.k.1)
        .i(7, p.s.0)
        .i(8, p.s.1)
        .i(9, p.p.0)
        .i(10, p.p.1)
        .i(11, kind)
        .i(12, usize::from(p.count_pad)))
}

fn pooling(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (x, o) = (&ins[0], &outs[0]);
    let n = o.len();
    let mut a = pool_args(op, attrs, &x.shape, n, o.shape[2], o.shape[3])?
        .t(0, o)
        .t(1, x);
    if let Some(mask) = outs.get(1) {
        a = a.t(2, mask).i(13, 1);
    }
    s.launch("pool_fwd", n, &a)
}

fn pooling_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (dy, x) = (&ins[0], &ins[1]);
    let n = x.len();
    let (ho, wo) = (dy.shape[2], dy.shape[3]);
    let mut a = pool_args(op, attrs, &x.shape, n, ho, wo)?
        .t(0, &outs[0])
        .t(1, dy)
        .t(2, x);
    // Max pooling (kind 0 in slot 11): find each window's maximum once, not once per pixel
    // under the window.
    let (windows, plane) = (dy.len(), x.shape[2] * x.shape[3]);
    if a.i[11] == 0 && windows > 0 && plane < 1 << 24 {
        let at = s.scratch(windows * 4)?.cast::<f32>();
        s.launch("pool_argmax", windows, &a.i(0, windows).p(0, at).t(1, x))?;
        a = a.p(3, at);
    }
    s.launch("pool_bwd", n, &a)
}

/// BatchNorm's settings: (outer, channels, inner) around the axis, eps, fix_gamma, and whether
/// the batch's own statistics are used.
struct BnSetup {
    layout: (usize, usize, usize),
    eps: f64,
    fix_gamma: bool,
    batch_stats: bool,
}

fn bn_setup(op: &str, attrs: &Attrs, shape: &[usize]) -> Result<BnSetup, String> {
    let axis = crate::ops::bn_axis(op, attrs, shape.len()).map_err(e2s)?;
    let (fix_gamma, batch_stats) = crate::ops::bn_flags(op, attrs).map_err(e2s)?;
    Ok(BnSetup {
        layout: around(shape, axis),
        eps: crate::ops::bn_eps_momentum(op, attrs).map_err(e2s)?.0,
        fix_gamma,
        batch_stats,
    })
}

fn batch_norm(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let b = bn_setup(op, attrs, &ins[0].shape)?;
    let (outer, c, inner) = b.layout;
    let (_, momentum) = crate::ops::bn_eps_momentum(op, attrs).map_err(e2s)?;
    let x = &ins[0];
    let (partials, scale) = reduction_scratch(s, ChannelSums::AndSquares, b.layout, c)?;
    let (sums, p) = if b.batch_stats {
        channel_partials(s, partials, ChannelSums::AndSquares, x.ptr(), b.layout)?
    } else {
        (std::ptr::null_mut(), 0)
    };
    let a = KArgs::new(c)
        .t(0, &outs[1])
        .t(1, &outs[2])
        .t(2, &ins[1])
        .t(3, &ins[2])
        .t(4, &ins[3])
        .t(5, &ins[4])
        .p(6, scale)
        .p(7, sums)
        .i(1, usize::from(b.batch_stats))
        .i(2, usize::from(b.fix_gamma))
        .i(3, p)
        .f(0, b.eps)
        .f(1, momentum)
        .f(2, (outer * inner).max(1) as f64);
    s.launch("bn_prepare", c, &a)?;
    let n = x.len();
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, x)
        .p(2, scale)
        .t(3, &ins[2])
        .t(4, &outs[1])
        .i(1, inner)
        .i(2, c);
    s.launch("bn_apply", n, &a)
}

fn batch_norm_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (dy, x, gamma, mean, var) = (&ins[0], &ins[1], &ins[2], &ins[3], &ins[4]);
    let b = bn_setup(op, attrs, &x.shape)?;
    let (outer, c, inner) = b.layout;
    let sums = ChannelSums::AndProducts(x.ptr());
    let (partials, coef) = reduction_scratch(s, sums, b.layout, 3 * c)?;
    let (totals, p) = channel_partials(s, partials, sums, dy.ptr(), b.layout)?;
    let a = KArgs::new(c)
        .t(0, &outs[1])
        .t(1, &outs[2])
        .t(2, gamma)
        .t(3, var)
        .p(4, coef)
        .t(5, mean)
        .p(6, totals)
        .i(1, usize::from(b.batch_stats))
        .i(2, usize::from(b.fix_gamma))
        .i(3, p)
        .f(0, b.eps)
        .f(1, (outer * inner).max(1) as f64);
    s.launch("bn_bwd_prepare", c, &a)?;
    let n = x.len();
    // SAFETY: the scratch holds ka, kb and kc, c floats each.
    let (kb, kc) = unsafe { (coef.add(c), coef.add(2 * c)) };
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, dy)
        .t(2, x)
        .t(3, mean)
        .p(4, coef)
        .p(5, kb)
        .p(6, kc)
        .i(1, inner)
        .i(2, c);
    s.launch("bn_bwd_apply", n, &a)
}

fn softmax_output(
    _: &str,
    _: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let shape = &ins[0].shape;
    // MXNet's SoftmaxOutput normalizes over axis 1 (the class axis), at no temperature (MXNet's
    // takes no such attribute).
    lane_args(shape, 1.min(shape.len() - 1), 1.0, false)
        .on(&[&outs[0], &ins[0]])
        .run(s, false)
}

fn softmax_output_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (p, label) = (&ins[0], &ins[1]);
    let classes = p.shape[1];
    // The labels are read back and checked, and the scale worked out, by the CPU's own code;
    // the kernel then needs no error path.
    let labels: Vec<f64> = s.download(label)?.into_iter().map(f64::from).collect();
    let (scale, ignore) =
        crate::ops::softmax_output_scale(op, attrs, &labels, classes).map_err(e2s)?;
    let total = p.len();
    let a = KArgs::new(total)
        .t(0, &outs[0])
        .t(1, p)
        .t(2, label)
        .i(1, classes)
        .i(2, usize::from(ignore.is_some()))
        .f(0, scale)
        .f(1, ignore.unwrap_or(0.0));
    s.launch("softmax_output_bwd", total, &a)?;
    fill_with(s, &outs[1], 0.0)
}

fn sgd(op: &str, attrs: &Attrs, ins: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    let get = |k: &str, d: Option<f64>| attrs.f64(op, k, d).map_err(e2s);
    let n = outs[0].len();
    let a = KArgs::new(n)
        .f(0, get("lr", None)?)
        .f(1, get("wd", Some(0.0))?)
        .f(2, get("rescale_grad", Some(1.0))?)
        .f(3, get("clip_gradient", Some(-1.0))?);
    match op {
        "sgd_update" => s.launch("sgd", n, &a.t(0, &outs[0]).t(1, &ins[0]).t(2, &ins[1])),
        _ => {
            let a = a
                .t(0, &outs[0])
                .t(1, &outs[1])
                .t(2, &ins[0])
                .t(3, &ins[1])
                .t(4, &ins[2])
                .f(4, get("momentum", Some(0.0))?);
            s.launch("sgd_mom", n, &a)
        }
    }
}

/// The seed a random op's GPU kernel draws from: an attribute the engine op sets when it runs,
/// from the device's generator, so that draws follow the order of the ops on that device as the
/// CPU's do.
pub(crate) const SEED: &str = "__seed__";

/// (outer, len, inner) around `axis` of `shape`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

/// The lanes along `axis` of `shape` and the softmax kernels' arguments for them (the pointers
/// left to the caller).
fn lane_args(shape: &[usize], axis: usize, temp: f64, log: bool) -> Lanes {
    let (outer, len, inner) = around(shape, axis);
    let count = outer * inner;
    let args = KArgs::new(count)
        .i(1, len)
        .i(2, inner)
        .i(3, usize::from(log))
        .f(0, temp);
    Lanes { count, len, args }
}

/// Lanes a softmax normalizes, and the kernels' arguments.
struct Lanes {
    count: usize,
    len: usize,
    args: KArgs,
}

impl Lanes {
    /// Sets the arrays: `out`, then the data (backward: the output's gradient, then the output).
    fn on(mut self, ts: &[&TensorRef]) -> Lanes {
        for (k, t) in ts.iter().enumerate() {
            self.args = self.args.t(k, t);
        }
        self
    }

    /// Runs the softmax (or, `backward`, its gradient) over the lanes ([`over_lanes`]), so
    /// that a few long lanes (a classifier's or a language model's classes over a small batch)
    /// do not run on a few threads.
    fn run(self, s: &dyn Stream, backward: bool) -> KResult {
        over_lanes(s, self.args, (self.count, self.len), backward, SOFTMAX)
    }

    /// Each lane's figures in device scratch (doubles, two per lane: its maximum and its sum
    /// of exponentials), found in `split` parts per lane.
    fn figures(&self, s: &dyn Stream, split: usize) -> Result<*mut f32, String> {
        let kernels = [SOFTMAX.parts, SOFTMAX.join];
        Ok(lane_figures(s, self.args, (self.count, split), false, kernels)?.1)
    }
}

/// The kernels of an op over lanes (groups) of elements, for [`over_lanes`]: one thread per
/// lane (forward, backward), or the split's three steps.
#[derive(Clone, Copy)]
struct LaneKernels {
    whole: [&'static str; 2],
    parts: &'static str,
    join: &'static str,
    each: &'static str,
}

const SOFTMAX: LaneKernels = LaneKernels {
    whole: ["softmax_lanes", "softmax_lanes_bwd"],
    parts: "softmax_parts",
    join: "softmax_join",
    each: "softmax_each",
};

const NORM: LaneKernels = LaneKernels {
    whole: ["norm_fwd", "norm_bwd"],
    parts: "norm_parts",
    join: "norm_join",
    each: "norm_each",
};

/// Runs an op over `count` lanes of `len` elements with its arguments `a` (`backward`: its
/// gradient): one thread per lane where the lanes alone fill a GPU, else each lane split into
/// parts ([`lane_figures`]) and then one thread per element (`each`, from the figures in p8).
fn over_lanes(
    s: &dyn Stream,
    a: KArgs,
    (count, len): (usize, usize),
    backward: bool,
    k: LaneKernels,
) -> KResult {
    let split = lane_parts(count, len);
    if split == 1 {
        return s.launch(k.whole[usize::from(backward)], count, &a);
    }
    let (a, _) = lane_figures(s, a, (count, split), backward, [k.parts, k.join])?;
    let n = count * len;
    s.launch(k.each, n, &a.i(0, n))
}

/// Each of `count` lanes' two figures (doubles, in device scratch) found in `split` parts per
/// lane: `kernels[0]`, one thread per (lane, part), writes two doubles per part to p7 (i5 the
/// parts per lane, i6 `backward`); `kernels[1]`, one thread per lane, joins them into p8.
/// Returns the arguments with both set, and the figures.
fn lane_figures(
    s: &dyn Stream,
    a: KArgs,
    (count, split): (usize, usize),
    backward: bool,
    kernels: [&'static str; 2],
) -> Result<(KArgs, *mut f32), String> {
    let partials = s.scratch(count * split * 16)?.cast::<f32>();
    let figures = s.scratch(count * 16)?.cast::<f32>();
    let a = a
        .p(7, partials)
        .p(8, figures)
        .i(5, split)
        .i(6, usize::from(backward));
    s.launch(kernels[0], count * split, &a.i(0, count * split))?;
    s.launch(kernels[1], count, &a.i(0, count))?;
    Ok((a, figures))
}

/// softmax and log_softmax over any axis at any temperature, and their backward ops
/// (`(output gradient, output) -> data gradient`).
fn softmax(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let x = &ins[0];
    let axis = crate::ops::softmax_axis(op, attrs, x.shape.len()).map_err(e2s)?;
    let temp = attrs.f64(op, "temperature", Some(1.0)).map_err(e2s)?;
    let lanes = lane_args(&x.shape, axis, temp, op.ends_with("log_softmax"));
    let ts: Vec<&TensorRef> = outs.iter().take(1).chain(ins).collect();
    lanes.on(&ts).run(s, op.starts_with("_backward_"))
}

/// SoftmaxActivation (a softmax over the last axis, as MXNet's `instance` mode flattens the
/// data to 2-D keeping it, or over the channels at each position) and its backward op, as
/// softmax lanes.
fn softmax_activation(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let x = &ins[0];
    let shape = match attrs.get("mode").unwrap_or("instance") {
        "channel" => x.shape.to_vec(),
        _ => {
            let last = x.shape.last().copied().unwrap_or(1);
            vec![x.len() / last.max(1), last]
        }
    };
    let ts: Vec<&TensorRef> = outs.iter().take(1).chain(ins).collect();
    lane_args(&shape, 1, 1.0, false)
        .on(&ts)
        .run(s, op.starts_with("_backward_"))
}

/// LogisticRegressionOutput's prediction: the data's sigmoid.
fn logistic(_: &str, _: &Attrs, ins: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    let n = outs[0].len();
    let sigmoid = 1;
    let a = KArgs::new(n).t(0, &outs[0]).t(1, &ins[0]).i(1, sigmoid);
    s.launch("act_fwd", n, &a)
}

/// `_backward_*RegressionOutput(out, label) -> (d data, d label)`: `grad_scale` over the
/// outputs per sample times the prediction's error (MAE: its sign); the label's gradient is 0.
fn regression_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let label = &ins[1];
    let per_sample = label.len() / label.shape.first().copied().unwrap_or(1).max(1);
    let scale = attrs.float(op, "grad_scale", Some(1.0)).map_err(e2s)?;
    let n = outs[0].len();
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, &ins[0])
        .t(2, label)
        .i(1, usize::from(op == "_backward_MAERegressionOutput"))
        .f(0, scale / per_sample.max(1) as f64);
    s.launch("regression_bwd", n, &a)?;
    fill_with(s, &outs[1], 0.0)
}

/// `_backward_MakeLoss(out) -> d data`: `grad_scale`, over the batch (`normalization=batch`) or
/// over the count of outputs above `valid_thresh` (`valid`, counted on the device).
fn make_loss_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (y, d) = (&ins[0], &outs[0]);
    let scale = attrs.float(op, "grad_scale", Some(1.0)).map_err(e2s)?;
    match attrs.get("normalization").unwrap_or("null") {
        "null" => fill_with(s, d, scale),
        "batch" => fill_with(
            s,
            d,
            scale / y.shape.first().copied().unwrap_or(1).max(1) as f64,
        ),
        "valid" => {
            let thresh = attrs.float(op, "valid_thresh", Some(0.0)).map_err(e2s)?;
            let n = y.len();
            let flags = s.scratch(n * 4 + 4)?.cast::<f32>();
            // SAFETY: the scratch holds n flags and then the count.
            let count = unsafe { flags.add(n) };
            let (greater, _) = scalar_code("_greater_scalar").ok_or("no greater code")?;
            let above = KArgs::new(n).p(0, flags).t(1, y).i(1, greater).f(0, thresh);
            s.launch("scalar", n, &above)?;
            let all: Vec<usize> = (0..y.shape.len()).collect();
            sum_axes(s, op, (flags, &y.shape), &all, count, 1.0)?;
            let m = d.len();
            s.launch(
                "fill_ratio",
                m,
                &KArgs::new(m).t(0, d).p(1, count).f(0, scale),
            )
        }
        other => Err(format!(
            "{op}: normalization {other:?} is not null, batch or valid"
        )),
    }
}

/// `_assign(variable, value)`: the value, into the variable.
fn assign(_: &str, _: &Attrs, ins: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    copy("_assign", &Attrs::new(), &ins[1..], outs, s)
}

/// depth_to_space and space_to_depth: each a permutation of the data viewed with its blocks
/// as axes of their own.
fn depth_space(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let b = crate::ops::gather::block_size(op, attrs).map_err(e2s)?;
    let x = &ins[0].shape;
    let (view, order): (Vec<usize>, [usize; 6]) = match op {
        // (n, b, b, c, h, w) -> (n, c, h, b, w, b)
        "depth_to_space" => (
            vec![x[0], b, b, x[1] / (b * b), x[2], x[3]],
            [0, 3, 4, 1, 5, 2],
        ),
        // (n, c, h, b, w, b) -> (n, b, b, c, h, w)
        _ => (
            vec![x[0], x[1], x[2] / b, b, x[3] / b, b],
            [0, 3, 5, 1, 2, 4],
        ),
    };
    let steps = strides(&view);
    let dims = order.map(|d| [view[d], steps[d]]);
    strided_copy(s, op, outs[0].ptr(), ins[0].ptr(), dims)
}

/// The seed the engine op drew for a random op's kernel.
pub(super) fn seed_of(op: &str, attrs: &Attrs) -> Result<u64, String> {
    attrs
        .get(SEED)
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| format!("{op}: no {SEED} attribute for its random draws"))
}

/// `_random_uniform` and `_random_normal`: each element a function of the seed and its index,
/// as Dropout's masks (other numbers than the CPU's generator, the same distributions).
fn random_fill(
    op: &str,
    attrs: &Attrs,
    _: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (a, b) = crate::ops::random_params(op, attrs).map_err(e2s)?;
    let n = outs[0].len();
    let args = KArgs::new(n)
        .t(0, &outs[0])
        .i(1, seed_of(op, attrs)? as usize)
        .i(2, usize::from(op == "_random_normal"))
        .f(0, a)
        .f(1, b);
    s.launch("random_fill", n, &args)
}

/// Dropout: `data -> (out, mask)`. Each element's draw is a hash of the op's seed and its index,
/// so no generator state lives on the GPU; the masks differ from the CPU's (another generator)
/// but hold the same values with the same probabilities.
fn dropout(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let p = crate::ops::dropout_p(op, attrs).map_err(e2s)?;
    let active = crate::ops::dropout_active(op, attrs).map_err(e2s)? && p > 0.0;
    let (seed, p, keep) = match active {
        false => (0, 0.0, 1.0),
        true => (seed_of(op, attrs)?, p, 1.0 / (1.0 - p)),
    };
    let n = ins[0].len();
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, &outs[1])
        .t(2, &ins[0])
        .i(1, seed as usize)
        .f(0, p)
        .f(1, keep);
    s.launch("dropout", n, &a)
}

/// LayerNorm, InstanceNorm, GroupNorm and L2Normalization, and their backward ops over
/// `ops::norm`'s groups of elements as lanes ([`over_lanes`]: a few long groups, such as an
/// InstanceNorm's images or a LayerNorm over a small batch, split into parts); gamma's and
/// beta's gradients are per-channel sums over the grouping's layout.
fn normalization(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    use crate::ops::Scale;
    let backward = op.starts_with("_backward_");
    let data = &ins[usize::from(backward)];
    let (groups, scale, _, _) = crate::ops::norm_layout(op, attrs, &data.shape).map_err(e2s)?;
    let l2 = op.ends_with("L2Normalization");
    let (per, layout) = match scale {
        Scale::ByPosition => (0, (groups.outer, groups.len, groups.inner)),
        // InstanceNorm and GroupNorm: groups are whole (sample, channel or group) runs.
        Scale::ByGroup(m) if groups.inner == 1 => (m, (groups.outer / m, m, groups.len)),
        Scale::ByGroup(_) => return Err(format!("{op}: groups with inner strides")),
    };
    let a = KArgs::new(groups.count())
        .i(1, groups.len)
        .i(2, groups.inner)
        .i(3, per)
        .i(4, usize::from(l2));
    if !backward {
        let a = a
            .t(0, &outs[0])
            .t(1, data)
            .t(4, &outs[1])
            .f(0, crate::ops::norm_eps(op, attrs).map_err(e2s)?);
        let a = match l2 {
            true => a,
            false => a.t(2, &ins[1]).t(3, &ins[2]).t(5, &outs[2]),
        };
        return over_lanes(s, a, (groups.count(), groups.len), false, NORM);
    }
    // (ograd, out, norm) for L2Normalization, else (ograd, data, gamma, mean, std).
    let a = a.t(0, &outs[0]).t(1, &ins[0]).t(2, data);
    if l2 {
        let a = a.t(5, &ins[2]);
        return over_lanes(s, a, (groups.count(), groups.len), true, NORM);
    }
    // beta's gradient first: the data's gradient may be written over the output's.
    channel_sum(s, outs[2].ptr(), ins[0].ptr(), layout, 1.0)?;
    let scaled = s.scratch(data.buf.bytes)?.cast::<f32>();
    let a = a.t(3, &ins[2]).t(4, &ins[3]).t(5, &ins[4]).p(6, scaled);
    over_lanes(s, a, (groups.count(), groups.len), true, NORM)?;
    channel_sum(s, outs[1].ptr(), scaled, layout, 1.0)
}

/// The most dims the `permute` kernel walks (after merging).
const PERMUTE_RANK: usize = 6;

/// Writes `dst` (dense) from `src` read along `dims`: the destination's dims, outermost first,
/// each with the source's stride along it (0 repeats the source, as a broadcast). Size-1 dims
/// are dropped and neighbours the source steps through as one dim merged (a batch of matrix
/// transposes is three dims, whatever the rank), for the `permute` kernel.
fn strided_copy(
    s: &dyn Stream,
    op: &str,
    dst: *mut f32,
    src: *mut f32,
    dims: impl IntoIterator<Item = [usize; 2]>,
) -> KResult {
    let mut merged: Vec<[usize; 2]> = Vec::new();
    let mut n = 1;
    for [dim, step] in dims {
        n *= dim;
        match merged.last_mut() {
            _ if dim == 1 => {}
            Some(last) if last[1] == step * dim => *last = [last[0] * dim, step],
            _ => merged.push([dim, step]),
        }
    }
    if merged.len() > PERMUTE_RANK {
        return Err(format!(
            "{op}: the GPU kernel walks at most {PERMUTE_RANK} dims, this takes {} after \
             merging ({merged:?})",
            merged.len()
        ));
    }
    let mut a = KArgs::new(n).p(0, dst).p(1, src).i(1, merged.len());
    for (d, [dim, step]) in merged.into_iter().enumerate() {
        a = a.i(2 + d, dim).i(8 + d, step);
    }
    s.launch("permute", n, &a)
}

/// transpose: the output's dims with the input's stride along each.
fn transpose(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let x = &ins[0];
    let axes = crate::ops::transpose_axes(op, attrs, x.shape.len()).map_err(e2s)?;
    let steps = strides(&x.shape);
    let dims = axes.iter().map(|&ax| [x.shape[ax], steps[ax]]);
    strided_copy(s, op, outs[0].ptr(), x.ptr(), dims)
}

/// `out = scale *` the sum of `src` (of `shape`) over `axes` (sorted); `out` holds the other
/// axes in order. Where the kept axes are one block (bias-like sums, sums of everything) the
/// sums run on the data in place as per-channel sums; otherwise the data is first permuted into
/// scratch with the kept axes first.
fn sum_axes(
    s: &dyn Stream,
    op: &str,
    (src, shape): (*mut f32, &[usize]),
    axes: &[usize],
    out: *mut f32,
    scale: f64,
) -> KResult {
    let n: usize = shape.iter().product();
    let kept_size: usize = (0..shape.len())
        .filter(|d| !axes.contains(d))
        .map(|d| shape[d])
        .product();
    // The kept axes of size above 1, and whether they are neighbours once size-1 axes go.
    let big: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] != 1).collect();
    let kept_at: Vec<usize> = (0..big.len())
        .filter(|&i| !axes.contains(&big[i]))
        .collect();
    let block = kept_at.windows(2).all(|w| w[1] == w[0] + 1);
    if block {
        let first = kept_at.first().map_or(0, |&i| big[i]);
        let outer: usize = shape[..first].iter().product::<usize>();
        let layout = (outer, kept_size, n / (outer * kept_size).max(1));
        return channel_sum(s, out, src, layout, scale);
    }
    let steps = strides(shape);
    let order = (0..shape.len())
        .filter(|d| !axes.contains(d))
        .chain(axes.iter().copied());
    let moved = s.scratch(n * 4)?.cast::<f32>();
    strided_copy(s, op, moved, src, order.map(|d| [shape[d], steps[d]]))?;
    channel_sum(s, out, moved, (1, kept_size, n / kept_size.max(1)), scale)
}

/// The reductions `sum` and `mean`.
fn reduce(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let x = &ins[0];
    let axes = crate::ops::reduced_axes(op, attrs, x.shape.len()).map_err(e2s)?;
    let count: usize = axes.iter().map(|&a| x.shape[a]).product();
    let scale = match op {
        // Over nothing the sum is 0 and the scale infinite: NaN, as on the CPU.
        "mean" => 1.0 / count as f64,
        _ => 1.0,
    };
    sum_axes(s, op, (x.ptr(), &x.shape), &axes, outs[0].ptr(), scale)
}

/// `_broadcast_backward` (sum's and mean's gradient): the output's gradient repeated along the
/// reduced axes, divided by their size for mean.
fn broadcast_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (g, o) = (&ins[0], &outs[0]);
    let shape = &o.shape;
    let axes = crate::ops::reduced_axes(op, attrs, shape.len()).map_err(e2s)?;
    // The gradient is laid out as the output with the reduced axes kept as size 1, so it
    // broadcasts along them.
    let kept: Vec<usize> = (0..shape.len())
        .map(|d| if axes.contains(&d) { 1 } else { shape[d] })
        .collect();
    let steps = broadcast_strides(&kept, shape);
    strided_copy(
        s,
        op,
        o.ptr(),
        g.ptr(),
        shape.iter().zip(steps).map(|(&n, st)| [n, st]),
    )?;
    if attrs.get("__reduce__") != Some("mean") {
        return Ok(());
    }
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    scalar_with(s, "_mul_scalar", o, o, 1.0 / count.max(1) as f64)
}

/// `_sum_to_like`: a broadcast operand's gradient, the output's gradient summed over the axes
/// the operand was broadcast along.
fn sum_to_like(
    op: &str,
    _: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (g, o) = (&ins[0], &outs[0]);
    let lead = g.shape.len() - o.shape.len();
    let axes: Vec<usize> = (0..g.shape.len())
        .filter(|&d| d < lead || o.shape[d - lead] == 1)
        .collect();
    sum_axes(s, op, (g.ptr(), &g.shape), &axes, o.ptr(), 1.0)
}

/// dot and batch_dot: one (batched) GEMM.
fn matmul(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let p = crate::ops::product(op, attrs, &ins[0].shape, &ins[1].shape).map_err(e2s)?;
    let (m, k, n) = p.dims;
    let g = Gemm {
        ta: p.ta,
        tb: p.tb,
        m,
        n,
        k,
        a: ins[0].ptr(),
        lda: if p.ta { m } else { k },
        b: ins[1].ptr(),
        ldb: if p.tb { k } else { n },
        c: outs[0].ptr(),
        ldc: n,
        beta: 0.0,
    };
    if k == 0 {
        // No terms: the products are zero (a GEMM over nothing might leave them unwritten).
        return fill_with(s, &outs[0], 0.0);
    }
    s.gemm_batched(&g, p.batch, [m * k, k * n, m * n])
}

/// One side of an [`axis_copy`]: a buffer, the length of its axis and the first row copied.
struct AxisSide {
    ptr: *mut f32,
    len: usize,
    first: usize,
}

/// Copies `rows` rows along an axis from `src` to `dst`, both `(outer, _, inner)` layouts.
fn axis_copy(
    s: &dyn Stream,
    (outer, inner): (usize, usize),
    src: AxisSide,
    dst: AxisSide,
    rows: usize,
) -> KResult {
    let n = outer * rows * inner;
    let a = KArgs::new(n)
        .p(0, dst.ptr)
        .p(1, src.ptr)
        .i(1, inner)
        .i(2, src.len)
        .i(3, dst.len)
        .i(4, src.first)
        .i(5, rows)
        .i(6, dst.first);
    s.launch("axis_copy", n, &a)
}

/// Copies between `whole` and consecutive blocks of its `axis`: block `k` is piece `k` (a
/// pointer and its rows), after the blocks before it. `into_whole` copies the pieces into the
/// whole (Concat, stack), else the whole out into the pieces (SliceChannel, Concat's gradient).
fn blocks_along(
    s: &dyn Stream,
    whole: &TensorRef,
    axis: usize,
    pieces: impl IntoIterator<Item = (*mut f32, usize)>,
    into_whole: bool,
) -> KResult {
    let (outer, len, inner) = around(&whole.shape, axis);
    let mut first = 0;
    for (ptr, rows) in pieces {
        let piece = AxisSide {
            ptr,
            len: rows,
            first: 0,
        };
        let block = AxisSide {
            ptr: whole.ptr(),
            len,
            first,
        };
        let (src, dst) = if into_whole {
            (piece, block)
        } else {
            (block, piece)
        };
        axis_copy(s, (outer, inner), src, dst, rows)?;
        first += rows;
    }
    Ok(())
}

/// SliceChannel: piece `j` of the axis into output `j`.
fn split(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let x = &ins[0];
    let (pieces, axis, _) = crate::ops::split_params(op, attrs, &x.shape).map_err(e2s)?;
    let rows = x.shape[axis] / pieces;
    blocks_along(s, x, axis, outs.iter().map(|o| (o.ptr(), rows)), false)
}

/// Concat: each input after the one before along the axis.
fn concat(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let o = &outs[0];
    let axis = crate::ops::axis_attr(op, attrs, "dim", 1, o.shape.len()).map_err(e2s)?;
    blocks_along(
        s,
        o,
        axis,
        ins.iter().map(|x| (x.ptr(), x.shape[axis])),
        true,
    )
}

/// `_backward_Concat(ograd, inputs...)`: each input's rows of the output gradient.
fn concat_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let g = &ins[0];
    let axis = crate::ops::axis_attr(op, attrs, "dim", 1, g.shape.len()).map_err(e2s)?;
    blocks_along(
        s,
        g,
        axis,
        outs.iter().map(|o| (o.ptr(), o.shape[axis])),
        false,
    )
}

/// stack: input `j` is row `j` of the output's new axis.
fn stack(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let o = &outs[0];
    let axis = crate::ops::stack_axis(op, attrs, o.shape.len()).map_err(e2s)?;
    blocks_along(s, o, axis, ins.iter().map(|x| (x.ptr(), 1)), true)
}

/// adam_update(weight, grad, mean, var) -> (weight, mean, var).
fn adam(op: &str, attrs: &Attrs, ins: &[TensorRef], outs: &[TensorRef], s: &dyn Stream) -> KResult {
    // MXNet's optimizer parameters are floats, as the CPU kernel reads them.
    let get = |k: &str, d: Option<f64>| attrs.float(op, k, d).map_err(e2s);
    let n = outs[0].len();
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, &outs[1])
        .t(2, &outs[2])
        .t(3, &ins[0])
        .t(4, &ins[1])
        .t(5, &ins[2])
        .t(6, &ins[3])
        .f(0, get("lr", None)?)
        .f(1, get("wd", Some(0.0))?)
        .f(2, get("rescale_grad", Some(1.0))?)
        .f(3, get("clip_gradient", Some(-1.0))?)
        .f(4, get("beta1", Some(0.9))?)
        .f(5, get("beta2", Some(0.999))?)
        .f(6, get("epsilon", Some(1e-8))?);
    s.launch("adam", n, &a)
}

/// SequenceMask, SequenceLast, SequenceReverse and the gradients of the first two: one
/// `sequence` kernel, its mode by op; the lengths (when used) are the last input.
fn sequence(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (_, axis, value) = crate::ops::sequence_params(op, attrs).map_err(e2s)?;
    // (mode, masked value, the data, its lengths)
    let (mode, value, data, lengths) = match op {
        "SequenceMask" => (0, value, &ins[0], ins.get(1)),
        "_backward_SequenceMask" => (0, 0.0, &ins[0], ins.get(1)),
        "SequenceLast" => (1, 0.0, &ins[0], ins.get(1)),
        "SequenceReverse" => (2, 0.0, &ins[0], ins.get(1)),
        _ => (3, 0.0, &ins[1], ins.get(2)),
    };
    let x = &data.shape;
    let (steps, batch) = match axis {
        0 => (x[0], x[1]),
        _ => (x[1], x[0]),
    };
    let n = outs[0].len();
    let mut a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, &ins[0])
        .i(1, mode)
        .i(2, axis)
        .i(3, steps)
        .i(4, batch)
        .i(5, x[2..].iter().product::<usize>().max(1))
        .f(0, value);
    if let Some(l) = lengths {
        a = a.t(2, l);
    }
    s.launch("sequence", n, &a)
}

/// The `leaky_fwd` kernel's code and slope for LeakyReLU's `act_type` (prelu: leaky, its slopes
/// read from gamma).
fn leaky_code(op: &str, attrs: &Attrs) -> Result<(usize, f64), String> {
    use crate::ops::LeakyAct;
    Ok(match LeakyAct::of(op, attrs).map_err(e2s)? {
        LeakyAct::Leaky(slope) => (0, slope),
        LeakyAct::Elu(slope) => (1, slope),
        LeakyAct::Selu => (2, 0.0),
        LeakyAct::Gelu => (3, 0.0),
        LeakyAct::Prelu => (0, 0.0),
    })
}

/// LeakyReLU (`data[, gamma] -> out`) and its backward op (`(output gradient, data[, gamma]) ->
/// data gradient[, gamma gradient]`; gamma: prelu's slopes).
fn leaky_relu(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (code, slope) = leaky_code(op, attrs)?;
    let n = outs[0].len();
    let forward = op == "LeakyReLU";
    let data = if forward { &ins[0] } else { &ins[1] };
    let mut a = KArgs::new(n)
        .t(0, &outs[0])
        .t(1, &ins[0])
        .i(1, code)
        .f(0, slope);
    // prelu's gamma (the input after the data), laid out as the CPU's GammaIndex reads it.
    if let Some(gamma) = ins.get(if forward { 1 } else { 2 }) {
        let channels = data.shape.get(1).copied().unwrap_or(1);
        let inner: usize = data.shape.iter().skip(2).product();
        a = a.t(3, gamma).i(2, gamma.len()).i(3, channels).i(4, inner);
        if let Some(dgamma) = outs.get(1) {
            // Before the data's gradient, which may be written over the output's gradient:
            // each element's term, summed per gamma entry (one, one per channel, or each its own).
            let terms = s.scratch(n * 4)?.cast::<f32>();
            let t = KArgs::new(n).p(0, terms).t(1, &ins[0]).t(2, data);
            s.launch("prelu_terms", n, &t)?;
            let layout = match gamma.len() {
                1 => (1, 1, n),
                len if len == channels => (n / (channels * inner).max(1), channels, inner),
                len => (1, len, 1),
            };
            channel_sum(s, dgamma.ptr(), terms, layout, 1.0)?;
        }
    }
    match forward {
        true => s.launch("leaky_fwd", n, &a),
        false => s.launch("leaky_bwd", n, &a.t(2, data)),
    }
}
