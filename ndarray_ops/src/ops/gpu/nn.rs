//! Layers and heads on the GPU: FullyConnected, BatchNorm, the norms over
//! lanes, the loss heads, Dropout and the random generators.

use super::args::{int, kernel_args, ptr};
use super::ops::{e2s, fill_with};
use super::reduce::sum_axes;
use super::Stream;
use crate::ops::Attrs;
use crate::ops::Call;
use crate::ops::KResult;

kernel_args! {

    /// Dropout: `mask` drawn from the seed, `out = x * mask`.
    struct Dropout [dropout] {
        /// Elements.
        n: i64,
        /// The result.
        out: *mut f32,
        /// The mask, out.
        mask: *mut f32,
        /// The data.
        x: *mut f32,
        /// The draws' seed.
        seed: i64,
        /// The probability of dropping.
        p: f32,
        /// The mask's value where kept.
        scale: f32,
    }

    /// The regression outputs' gradient.
    struct Regression [regression_bwd] {
        /// Elements.
        n: i64,
        /// The gradient.
        out: *mut f32,
        /// The prediction.
        pred: *mut f32,
        /// The label.
        label: *mut f32,
        /// 1: the error's sign (MAE).
        mae: i64,
        /// The gradient's scale.
        scale: f32,
    }

    /// `out[t] = value / max(count[0], 1)`.
    struct FillRatio [fill_ratio] {
        /// Elements.
        n: i64,
        /// The result.
        out: *mut f32,
        /// One float on the device.
        count: *mut f32,
        /// The numerator.
        value: f32,
    }

    /// `_random_uniform` and `_random_normal` from a seed.
    struct RandomFill [random_fill] {
        /// Elements.
        n: i64,
        /// The draws.
        out: *mut f32,
        /// The draws' seed.
        seed: i64,
        /// 1: normal; 0: uniform.
        normal: i64,
        /// The low end, or the mean.
        lo: f32,
        /// The high end, or the deviation.
        hi: f32,
    }
}

/// The seed a random op's GPU kernel draws from: an attribute the engine op sets when it runs,
/// from the device's generator, so that draws follow the order of the ops on that device as the
/// CPU's do.
pub(crate) const SEED: &str = "__seed__";

/// (outer, len, inner) around `axis` of `shape`.
pub(super) fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

/// LogisticRegressionOutput's prediction: the data's sigmoid.
pub(crate) fn logistic(call: Call, s: &dyn Stream) -> KResult {
    let (_, _, ins, outs) = call.parts();
    use crate::ops::unary::{gpu::apply, Unary};
    apply(
        s,
        Unary::Sigmoid,
        outs[0].ptr(),
        ins[0].ptr(),
        outs[0].len(),
    )
}

/// `_backward_*RegressionOutput(out, label) -> (d data, d label)`: `grad_scale` over the
/// outputs per sample times the prediction's error (MAE: its sign); the label's gradient is 0.
pub(crate) fn regression_backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let label = &ins[1];
    let per_sample = label.len() / label.shape.first().copied().unwrap_or(1).max(1);
    let scale = crate::ops::loss::grad_scale(op, attrs).map_err(e2s)?;
    let n = outs[0].len();
    let a = Regression {
        n: int(n),
        out: ptr(&outs[0]),
        pred: ptr(&ins[0]),
        label: ptr(label),
        mae: i64::from(op == "_backward_MAERegressionOutput"),
        scale: (scale / per_sample.max(1) as f64) as f32,
    };
    s.run(k::regression_bwd, n, &a)?;
    fill_with(s, &outs[1], 0.0)
}

/// `_backward_MakeLoss(out) -> d data`: `grad_scale`, over the batch (`normalization=batch`) or
/// over the count of outputs above `valid_thresh` (`valid`, counted on the device).
pub(crate) fn make_loss_backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (y, d) = (&ins[0], &outs[0]);
    use crate::ops::params::Normalization;
    let (scale, normalization, thresh) =
        crate::ops::loss::make_loss_params(op, attrs).map_err(e2s)?;
    match normalization {
        Normalization::Null => fill_with(s, d, scale),
        Normalization::Batch => fill_with(
            s,
            d,
            scale / y.shape.first().copied().unwrap_or(1).max(1) as f64,
        ),
        Normalization::Valid => {
            let n = y.len();
            let flags = s.scratch(n * 4 + 4)?.cast::<f32>();
            // SAFETY: the scratch holds n flags and then the count.
            let count = unsafe { flags.add(n) };
            let greater = crate::ops::scalar::Scalar::Greater;
            crate::ops::scalar::gpu::scalar_on(s, greater, flags, y.ptr(), n, thresh)?;
            let all: Vec<usize> = (0..y.shape.len()).collect();
            sum_axes(s, op, (flags, &y.shape), &all, count, 1.0)?;
            let m = d.len();
            let a = FillRatio {
                n: int(m),
                out: ptr(d),
                count,
                value: scale as f32,
            };
            s.run(k::fill_ratio, m, &a)
        }
    }
}

/// The seed the engine op drew for a random op's kernel.
pub(crate) fn seed_of(op: &str, attrs: &Attrs) -> Result<u64, String> {
    attrs
        .get(SEED)
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| format!("{op}: no {SEED} attribute for its random draws"))
}

/// `_random_uniform` and `_random_normal`: each element a function of the seed and its index,
/// as Dropout's masks (other numbers than the CPU's generator, the same distributions).
pub(crate) fn random_fill(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, _, outs) = call.parts();
    use crate::ops::stochastic::{sampler, Sampler};
    let (m, op) = (sampler(def)?, def.name);
    let (a, b) = m.params(attrs).map_err(e2s)?;
    let n = outs[0].len();
    let args = RandomFill {
        n: int(n),
        out: ptr(&outs[0]),
        seed: seed_of(op, attrs)? as i64,
        normal: i64::from(m == Sampler::Normal),
        lo: a as f32,
        hi: b as f32,
    };
    s.run(k::random_fill, n, &args)
}

/// Dropout: `data -> (out, mask)`. Each element's draw is a hash of the op's seed and its index,
/// so no generator state lives on the GPU; the masks differ from the CPU's (another generator)
/// but hold the same values with the same probabilities.
pub(crate) fn dropout(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let p = crate::ops::dropout_p(op, attrs).map_err(e2s)?;
    let active = crate::ops::dropout_active(op, attrs).map_err(e2s)? && p > 0.0;
    let (seed, p, keep) = match active {
        false => (0, 0.0, 1.0),
        true => (seed_of(op, attrs)?, p, 1.0 / (1.0 - p)),
    };
    let n = ins[0].len();
    let a = Dropout {
        n: int(n),
        out: ptr(&outs[0]),
        mask: ptr(&outs[1]),
        x: ptr(&ins[0]),
        seed: seed as i64,
        p: p as f32,
        scale: keep as f32,
    };
    s.run(k::dropout, n, &a)
}
