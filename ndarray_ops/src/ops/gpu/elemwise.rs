//! Elementwise ops on the GPU outside the typed families: fill, clip and hard_sigmoid, where,
//! one_hot, LeakyReLU and prelu with their gradients.

use super::args::{int, kernel_args, ptr, Dim};
use super::ops::{copy, e2s};
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

/// clip: the data clamped to `[a_min, a_max]`.
pub(crate) fn clip(call: Call, s: &dyn Stream) -> KResult {
    let (lo, hi) = crate::ops::clip_bounds(call.def.name, call.attrs).map_err(e2s)?;
    clamp(call, s, (1.0, 0.0), (lo, hi))
}

/// hard_sigmoid: `alpha x + beta` clamped to `[0, 1]`.
pub(crate) fn hard_sigmoid(call: Call, s: &dyn Stream) -> KResult {
    let (alpha, beta) = crate::ops::hard_sigmoid_params(call.def.name, call.attrs).map_err(e2s)?;
    clamp(call, s, (alpha, beta), (0.0, 1.0))
}

/// `scale x + shift`, clamped to `[lo, hi]`.
fn clamp(call: Call, s: &dyn Stream, (scale, shift): (f64, f64), (lo, hi): (f64, f64)) -> KResult {
    let (_, _, ins, outs) = call.parts();
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
