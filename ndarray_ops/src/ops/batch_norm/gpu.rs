//! BatchNorm on the GPU, forward and backward (`batch_norm.cu`): per-channel sums by the
//! reduction kernels, then one kernel for each channel's statistics and one over the elements.

use super::Bn;
use crate::ops::gpu::args::{int, kernel_args, ptr, Dim};
use crate::ops::gpu::ops::e2s;
use crate::ops::gpu::reduce::{channel_partials, reduction_scratch, ChannelSums};
use crate::ops::gpu::Stream;
use crate::ops::Call;
use crate::ops::{Attrs, KResult};

kernel_args! {
    /// BatchNorm's per-channel statistics and scale.
    struct BnPrepare [bn_prepare] {
        /// Channels.
        channels: i64,
        /// The mean used, out.
        mean: *mut f32,
        /// The variance used, out.
        var: *mut f32,
        /// gamma.
        gamma: *mut f32,
        /// beta.
        beta: *mut f32,
        /// The moving mean.
        moving_mean: *mut f32,
        /// The moving variance.
        moving_var: *mut f32,
        /// `gamma / sqrt(var + eps)`, out, for `bn_apply`.
        scale: *mut f32,
        /// Two planes of partial sums of x and x^2 (batch statistics).
        sums: *const f64,
        /// 1: the batch's statistics.
        batch_stats: i64,
        /// 1: gamma taken as 1.
        fix_gamma: i64,
        /// Partial sums per channel.
        parts: i64,
        /// 1: the moving statistics are updated.
        update_moving: i64,
        /// Added to the variance.
        eps: f32,
        /// The moving statistics' momentum.
        momentum: f32,
        /// Elements per channel.
        count: f32,
    }

    /// `out = (x - mean[c]) * scale[c] + beta[c]`.
    struct BnApply [bn_apply] {
        /// Elements.
        n: i64,
        /// The result.
        out: *mut f32,
        /// The data.
        x: *mut f32,
        /// Per channel, from `bn_prepare`.
        scale: *mut f32,
        /// Per channel.
        beta: *mut f32,
        /// Per channel.
        mean: *mut f32,
        /// Elements after the channel axis.
        inner: Dim,
        /// Channels.
        channels: Dim,
    }

    /// BatchNorm's gamma and beta gradients and its data gradient's coefficients.
    struct BnBwdPrepare [bn_bwd_prepare] {
        /// Channels.
        channels: i64,
        /// gamma's gradient.
        dgamma: *mut f32,
        /// beta's gradient.
        dbeta: *mut f32,
        /// gamma.
        gamma: *mut f32,
        /// The variance the forward pass used.
        var: *mut f32,
        /// ka, kb, kc out, `channels` each.
        coef: *mut f32,
        /// The mean the forward pass used.
        mean: *mut f32,
        /// Two planes of partial sums of dy and dy * x.
        sums: *const f64,
        /// 1: the batch's statistics.
        batch_stats: i64,
        /// 1: gamma taken as 1.
        fix_gamma: i64,
        /// Partial sums per channel.
        parts: i64,
        /// Added to the variance.
        eps: f32,
        /// Elements per channel.
        count: f32,
    }

    /// `dx = ka[c] * (dy - kb[c] - (x - mean[c]) * kc[c])`.
    struct BnBwdApply [bn_bwd_apply] {
        /// Elements.
        n: i64,
        /// The data's gradient.
        dx: *mut f32,
        /// The output's gradient.
        dy: *mut f32,
        /// The data.
        x: *mut f32,
        /// Per channel.
        mean: *mut f32,
        /// Per channel.
        ka: *mut f32,
        /// Per channel.
        kb: *mut f32,
        /// Per channel.
        kc: *mut f32,
        /// Elements after the channel axis.
        inner: Dim,
        /// Channels.
        channels: Dim,
    }
}

pub(super) fn bn_setup(op: &str, attrs: &Attrs, shape: &[usize]) -> Result<Bn, String> {
    super::bn_settings(op, attrs, shape).map_err(e2s)
}

pub(crate) fn batch_norm(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let b = bn_setup(op, attrs, &ins[0].shape)?;
    let (outer, c, inner) = b.layout;
    let momentum = b.momentum;
    let x = &ins[0];
    let (partials, scale) = reduction_scratch(s, ChannelSums::AndSquares, b.layout, c)?;
    let (sums, p) = if b.batch_stats {
        channel_partials(s, partials, ChannelSums::AndSquares, x.ptr(), b.layout)?
    } else {
        (std::ptr::null_mut(), 0)
    };
    let a = BnPrepare {
        channels: int(c),
        mean: ptr(&outs[1]),
        var: ptr(&outs[2]),
        gamma: ptr(&ins[1]),
        beta: ptr(&ins[2]),
        moving_mean: ptr(&ins[3]),
        moving_var: ptr(&ins[4]),
        scale,
        sums: sums.cast(),
        batch_stats: i64::from(b.batch_stats),
        fix_gamma: i64::from(b.fix_gamma),
        parts: int(p),
        update_moving: i64::from(b.update_moving),
        eps: b.eps as f32,
        momentum: momentum as f32,
        count: (outer * inner).max(1) as f32,
    };
    s.run(k::bn_prepare, c, &a)?;
    let n = x.len();
    let a = BnApply {
        n: int(n),
        out: ptr(&outs[0]),
        x: ptr(x),
        scale,
        beta: ptr(&ins[2]),
        mean: ptr(&outs[1]),
        inner: Dim::new(inner),
        channels: Dim::new(c),
    };
    s.run(k::bn_apply, n, &a)
}

pub(crate) fn batch_norm_backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (dy, x, gamma, mean, var) = (&ins[0], &ins[1], &ins[2], &ins[3], &ins[4]);
    let b = bn_setup(op, attrs, &x.shape)?;
    let (outer, c, inner) = b.layout;
    let sums = ChannelSums::AndProducts(x.ptr());
    let (partials, coef) = reduction_scratch(s, sums, b.layout, 3 * c)?;
    let (totals, p) = channel_partials(s, partials, sums, dy.ptr(), b.layout)?;
    let a = BnBwdPrepare {
        channels: int(c),
        dgamma: ptr(&outs[1]),
        dbeta: ptr(&outs[2]),
        gamma: ptr(gamma),
        var: ptr(var),
        coef,
        mean: ptr(mean),
        sums: totals.cast(),
        batch_stats: i64::from(b.batch_stats),
        fix_gamma: i64::from(b.fix_gamma),
        parts: int(p),
        eps: b.eps as f32,
        count: (outer * inner).max(1) as f32,
    };
    s.run(k::bn_bwd_prepare, c, &a)?;
    let n = x.len();
    // SAFETY: the scratch holds ka, kb and kc, c floats each.
    let (kb, kc) = unsafe { (coef.add(c), coef.add(2 * c)) };
    let a = BnBwdApply {
        n: int(n),
        dx: ptr(&outs[0]),
        dy: ptr(dy),
        x: ptr(x),
        mean: ptr(mean),
        ka: coef,
        kb,
        kc,
        inner: Dim::new(inner),
        channels: Dim::new(c),
    };
    s.run(k::bn_bwd_apply, n, &a)
}
