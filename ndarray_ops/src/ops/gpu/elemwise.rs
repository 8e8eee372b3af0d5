//! Elementwise ops on the GPU outside the typed families: fill, clip and hard_sigmoid, where,
//! one_hot, LeakyReLU and prelu with their gradients.

use super::args::{int, kernel_args, ptr, Dim};
use super::ops::{copy, e2s};
use super::reduce::channel_sum;
use super::Stream;
use crate::ops::Attrs;
use crate::ops::Call;
use crate::ops::KResult;

kernel_args! {
    /// `out[t] = value`.
    struct Fill [fill] {
        /// Elements.
        n: i64,
        /// The array filled.
        out: *mut f32,
        /// The value.
        value: f32,
    }

    /// `out = scale * x + shift`, clamped to `[lo, hi]`.
    struct ClampAffine [clamp_affine] {
        /// Elements.
        n: i64,
        /// The result.
        out: *mut f32,
        /// The data.
        x: *mut f32,
        /// What `x` is multiplied by.
        scale: f32,
        /// What is added then.
        shift: f32,
        /// The lowest value.
        lo: f32,
        /// The highest value.
        hi: f32,
    }

    /// where: `out = cond != 0 ? x : y`.
    struct Where [where_select] {
        /// Elements.
        n: i64,
        /// The result.
        out: *mut f32,
        /// The condition, one per `per_cond` elements.
        cond: *mut f32,
        /// Taken where the condition holds.
        x: *mut f32,
        /// Taken elsewhere.
        y: *mut f32,
        /// Elements per condition value.
        per_cond: i64,
    }

    /// one_hot: rows of `depth`, `on` at each row's index, else `off`.
    struct OneHot [one_hot] {
        /// Elements of `out`.
        n: i64,
        /// The rows.
        out: *mut f32,
        /// One index per row.
        idx: *mut f32,
        /// Columns per row.
        depth: Dim,
        /// The value at the index.
        on: f32,
        /// The value elsewhere.
        off: f32,
    }

    /// prelu's gamma gradient's terms: `out = ograd * data` where `data <= 0`, else 0.
    struct PreluTerms [prelu_terms] {
        /// Elements.
        n: i64,
        /// The terms.
        out: *mut f32,
        /// The output's gradient.
        ograd: *mut f32,
        /// The data.
        data: *mut f32,
    }

    /// LeakyReLU and prelu, and their data's gradient.
    struct Leaky [leaky_fwd, leaky_bwd] {
        /// Elements.
        n: i64,
        /// The result.
        out: *mut f32,
        /// The data, or (backward) the output's gradient.
        x: *mut f32,
        /// The data (backward).
        data: *mut f32,
        /// prelu's slopes; null: `slope`.
        gamma: *mut f32,
        /// 0 leaky, 1 elu, 2 selu, 3 gelu.
        kind: i64,
        /// Slopes in `gamma`: one, one per channel, or one per element.
        gamma_len: i64,
        /// The data's channels.
        channels: i64,
        /// Elements after the channel axis.
        inner: Dim,
        /// The slope without gamma.
        slope: f32,
    }
}

/// Sets the `n` floats at `out` to `value`.
pub(crate) fn fill(s: &dyn Stream, out: *mut f32, n: usize, value: f64) -> KResult {
    let a = Fill {
        n: int(n),
        out,
        value: value as f32,
    };
    s.run(k::fill, n, &a)
}

/// clip and hard_sigmoid: an affine map, clamped.
pub(crate) fn clamp(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (scale, shift, lo, hi) = match op {
        "clip" => {
            let (lo, hi) = crate::ops::clip_bounds(op, attrs).map_err(e2s)?;
            (1.0, 0.0, lo, hi)
        }
        _ => {
            let (alpha, beta) = crate::ops::hard_sigmoid_params(op, attrs).map_err(e2s)?;
            (alpha, beta, 0.0, 1.0)
        }
    };
    let n = outs[0].len();
    let a = ClampAffine {
        n: int(n),
        out: ptr(&outs[0]),
        x: ptr(&ins[0]),
        scale: scale as f32,
        shift: shift as f32,
        lo: lo as f32,
        hi: hi as f32,
    };
    s.run(k::clamp_affine, n, &a)
}

/// where(condition, x, y): the condition has x's shape or one value per row of x's first axis.
pub(crate) fn select(call: Call, s: &dyn Stream) -> KResult {
    let (_, _, ins, outs) = call.parts();
    let (c, o) = (&ins[0], &outs[0]);
    let n = o.len();
    let per_row = if c.len() == n { 1 } else { n / c.len().max(1) };
    let a = Where {
        n: int(n),
        out: ptr(o),
        cond: ptr(c),
        x: ptr(&ins[1]),
        y: ptr(&ins[2]),
        per_cond: int(per_row.max(1)),
    };
    s.run(k::where_select, n, &a)
}

pub(crate) fn one_hot(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (depth, on, off) = crate::ops::one_hot_params(op, attrs).map_err(e2s)?;
    let n = outs[0].len();
    let a = OneHot {
        n: int(n),
        out: ptr(&outs[0]),
        idx: ptr(&ins[0]),
        depth: Dim::new(depth.max(1)),
        on: on as f32,
        off: off as f32,
    };
    s.run(k::one_hot, n, &a)
}

/// `_assign(variable, value)`: the value, into the variable.
pub(crate) fn assign(call: Call, s: &dyn Stream) -> KResult {
    let attrs = Attrs::new();
    copy(
        Call {
            attrs: &attrs,
            ins: &call.ins[1..],
            ..call
        },
        s,
    )
}

/// The `leaky_fwd` kernel's code and slope for LeakyReLU's `act_type` (prelu: leaky, its slopes
/// read from gamma).
pub(super) fn leaky_code(op: &str, attrs: &Attrs) -> Result<(usize, f64), String> {
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
pub(crate) fn leaky_relu(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (code, slope) = leaky_code(op, attrs)?;
    let n = outs[0].len();
    let forward = op == "LeakyReLU";
    let data = if forward { &ins[0] } else { &ins[1] };
    let mut a = Leaky {
        n: int(n),
        out: ptr(&outs[0]),
        x: ptr(&ins[0]),
        data: ptr(data),
        gamma: std::ptr::null_mut(),
        kind: int(code),
        gamma_len: 0,
        channels: 0,
        inner: Dim::new(0),
        slope: slope as f32,
    };
    // prelu's gamma (the input after the data), laid out as the CPU's GammaIndex reads it.
    if let Some(gamma) = ins.get(if forward { 1 } else { 2 }) {
        let channels = data.shape.get(1).copied().unwrap_or(1);
        let inner: usize = data.shape.iter().skip(2).product();
        a.gamma = ptr(gamma);
        a.gamma_len = int(gamma.len());
        a.channels = int(channels);
        a.inner = Dim::new(inner);
        if let Some(dgamma) = outs.get(1) {
            // Before the data's gradient, which may be written over the output's gradient:
            // each element's term, summed per gamma entry (one, one per channel, or each its own).
            let terms = s.scratch(n * 4)?.cast::<f32>();
            let t = PreluTerms {
                n: int(n),
                out: terms,
                ograd: ptr(&ins[0]),
                data: ptr(data),
            };
            s.run(k::prelu_terms, n, &t)?;
            let layout = match gamma.len() {
                1 => (1, 1, n),
                len if len == channels => (n / (channels * inner).max(1), channels, inner),
                len => (1, len, 1),
            };
            channel_sum(s, dgamma.ptr(), terms, layout, 1.0)?;
        }
    }
    match forward {
        true => s.run(k::leaky_fwd, n, &a),
        false => s.run(k::leaky_bwd, n, &a),
    }
}
