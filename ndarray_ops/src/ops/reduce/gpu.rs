//! The reduction family on the GPU: sum and mean as the back end's sums over axes (partial sums
//! per channel), norm as a unary map then a sum, and max, min, prod, argmax, argmin along lanes
//! (`reduce.cu`: whole lanes, or few long lanes split into parts).

use super::{member, norm_ord, ArgExtremeParams, Reduce};
use crate::ops::gather::strides;
use crate::ops::gpu::args::{int, kernel_args, ptr, Dim};
use crate::ops::gpu::ops::e2s;
use crate::ops::gpu::reduce::{lane_parts, sum_axes};
use crate::ops::gpu::shape::strided_copy;
use crate::ops::gpu::Stream;
use crate::ops::params::Params;
use crate::ops::unary::gpu::apply;
use crate::ops::unary::Unary;
use crate::ops::Call;
use crate::ops::{norm_axes, reduced_axes, KResult, TensorRef};

kernel_args! {
    /// Reductions along the lanes of an (outer, len, inner) layout, whole (`reduce_lanes`) or
    /// in parts (`reduce_parts`, then `reduce_join`).
    struct Lanes [reduce_lanes, reduce_parts, reduce_join] {
        /// Threads: lanes, or (`reduce_parts`) lanes times parts.
        n: i64,
        /// One result per lane.
        out: *mut f32,
        /// The data.
        x: *mut f32,
        /// Two doubles per (lane, part).
        partials: *mut f64,
        /// Elements per lane.
        len: i64,
        /// Elements after the reduced axes.
        inner: Dim,
        /// The member ([`Reduce`]'s code: max, min, prod, argmax or argmin).
        code: i64,
        /// Parts per lane.
        parts: i64,
    }
}

pub(crate) fn reduce(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let (m, op) = (member(def)?, def.name);
    let (x, out) = (&ins[0], &outs[0]);
    let nd = x.shape.len();
    let axes = match m {
        // One axis, or none: the flattened data.
        Reduce::Argmax | Reduce::Argmin => {
            match ArgExtremeParams::get(op, attrs).map_err(e2s)?.axis {
                None => (0..nd).collect(),
                Some(a) => norm_axes(op, &[a], nd).map_err(e2s)?,
            }
        }
        _ => reduced_axes(op, attrs, nd).map_err(e2s)?,
    };
    let count: usize = axes.iter().map(|&a| x.shape[a]).product();
    match m {
        Reduce::Sum => sum_axes(s, op, (x.ptr(), &x.shape), &axes, out.ptr(), 1.0),
        // Over nothing the sum is 0 and the scale infinite: NaN, as on the CPU.
        Reduce::Mean => sum_axes(
            s,
            op,
            (x.ptr(), &x.shape),
            &axes,
            out.ptr(),
            1.0 / count as f64,
        ),
        // Squares or magnitudes summed as `sum` sums, then a square root for ord 2.
        Reduce::Norm => {
            let root = norm_ord(op, attrs).map_err(e2s)? == 2;
            let f = if root { Unary::Square } else { Unary::Abs };
            let mapped = s.scratch(x.len() * 4)?.cast::<f32>();
            apply(s, f, mapped, ptr(x), x.len())?;
            sum_axes(s, op, (mapped, &x.shape), &axes, out.ptr(), 1.0)?;
            match root {
                true => apply(s, Unary::Sqrt, ptr(out), ptr(out), out.len()),
                false => Ok(()),
            }
        }
        Reduce::Max | Reduce::Min | Reduce::Prod | Reduce::Argmax | Reduce::Argmin => {
            along_lanes(s, (m, op), x, out, (&axes, count))
        }
    }
}

/// max, min, prod, argmax, argmin along lanes: `reduce_lanes`, or split into parts over few
/// long lanes. Reduced axes that are not one block are moved last first.
fn along_lanes(
    s: &dyn Stream,
    (m, op): (Reduce, &str),
    x: &TensorRef,
    out: &TensorRef,
    (axes, count): (&[usize], usize),
) -> KResult {
    let nd = x.shape.len();
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
    let mut a = Lanes {
        n: int(n),
        out: ptr(out),
        x: src,
        partials: std::ptr::null_mut(),
        len: int(layout.0),
        inner: Dim::new(layout.1.max(1)),
        code: int(m as usize),
        parts: 1,
    };
    let split = lane_parts(n, layout.0);
    if split == 1 {
        return s.run(k::reduce_lanes, n, &a);
    }
    a.partials = s.scratch(n * split * 16)?.cast();
    a.parts = int(split);
    a.n = int(n * split);
    s.run(k::reduce_parts, n * split, &a)?;
    a.n = int(n);
    s.run(k::reduce_join, n, &a)
}
