//! Crop, AdaptiveAvgPooling2D and BilinearResize2D on the GPU, and their gradients. The CPU's
//! description of one plane (which inputs each output element reads, with what weight:
//! [`PlaneTaps`]) is uploaded as a sparse matrix, and one kernel, `resample`, computes every
//! plane's weighted sums: the forward pass with the matrix, summing in double as the CPU does,
//! the gradient with its transpose, each input's entries in the order the CPU adds into that
//! input and rounded to float after every add, as the CPU's accumulation is — no atomics.

use super::args::{int, kernel_args, ptr, Dim};
use super::ops::{e2s, fill_with};
use super::{buckets, Stream};
use crate::ops::family::Member;
use crate::ops::Call;
use crate::ops::KResult;
use crate::ops::{plane_taps, PlaneTaps, TensorRef};

kernel_args! {
    /// Resampling one plane at a time: `dst[p, r]` = the weighted sum over row `r`'s taps of
    /// `src[p, ..]`, for every plane `p` and row `r`.
    struct Resample [resample] {
        /// Elements of `dst`: planes times rows.
        n: i64,
        /// The output (planes, rows).
        dst: *mut f32,
        /// The input (planes, cols).
        src: *mut f32,
        /// `[row starts (rows + 1), each row's input offsets, their weights as doubles' bits]`.
        table: *const i64,
        /// Outputs per plane.
        rows: Dim,
        /// Inputs per plane.
        cols: i64,
        /// 0: sum in double and round once (the forward passes); 1: round after every add, as
        /// the CPU's gradients add into float.
        round_each_add: i64,
    }
}

/// Crop, BilinearResize2D and AdaptiveAvgPooling2D: `(data[, like]) -> out`.
pub(crate) fn resample(call: Call, s: &dyn Stream) -> KResult {
    run(call, s, false)
}

/// Their backward ops: `(ograd, data[, like]) -> (d data[, d like])`.
pub(crate) fn resample_backward(call: Call, s: &dyn Stream) -> KResult {
    run(call, s, true)
}

/// The op's member's taps, as a weighted sum forward or its transpose backward.
fn run(call: Call, s: &dyn Stream, backward: bool) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let Member::Resample(r) = def.member else {
        return Err(format!("{op} is not a resampling op"));
    };
    let (x, y, like) = match backward {
        true => (&outs[0], &ins[0], ins.get(2)),
        false => (&ins[0], &outs[0], ins.get(1)),
    };
    let plane = plane_taps(
        r,
        (op, attrs),
        &x.shape,
        &y.shape,
        like.map(|t| &t.shape[..]),
    )
    .map_err(e2s)?;
    let planes = x.shape[0] * x.shape[1];
    let (inp, out) = (x.shape[2] * x.shape[3], y.shape[2] * y.shape[3]);
    if backward {
        if let Some(dlike) = outs.get(1) {
            fill_with(s, dlike, 0.0)?;
        }
        let t = transpose(&plane, inp);
        sums(s, x, y, planes, (inp, out), &table(&t), true)
    } else {
        sums(s, y, x, planes, (out, inp), &table(&plane), false)
    }
}

/// `dst` (planes of `rows`) = the matrix's rows of weighted sums of `src` (planes of `cols`).
fn sums(
    s: &dyn Stream,
    dst: &TensorRef,
    src: &TensorRef,
    planes: usize,
    (rows, cols): (usize, usize),
    table: &[i64],
    round_each_add: bool,
) -> KResult {
    let n = planes * rows;
    if n == 0 {
        return Ok(());
    }
    let table = s.upload(table)?;
    let a = Resample {
        n: int(n),
        dst: ptr(dst),
        src: ptr(src),
        table: table.cast(),
        rows: Dim::new(rows),
        cols: int(cols),
        round_each_add: i64::from(round_each_add),
    };
    s.run(k::resample, n, &a)
}

/// `[row starts..., offsets..., weights' bits...]`, as `resample` reads it.
pub(super) fn table(p: &PlaneTaps) -> Vec<i64> {
    let mut t: Vec<i64> = p.starts.iter().map(|&k| k as i64).collect();
    t.extend(p.taps.iter().map(|&(i, _)| i as i64));
    t.extend(p.taps.iter().map(|&(_, w)| w.to_bits() as i64));
    t
}

/// The transpose of `p` (`inputs` rows): each input's (output, weight) entries in the order of
/// the outputs, and of the taps within one output — the CPU gradient's order of adds.
pub(crate) fn transpose(p: &PlaneTaps, inputs: usize) -> PlaneTaps {
    // Which output each tap belongs to.
    let owner: Vec<usize> = (0..p.starts.len() - 1)
        .flat_map(|o| std::iter::repeat_n(o, p.starts[o + 1] - p.starts[o]))
        .collect();
    let (starts, list) = buckets(p.taps.iter().map(|&(i, _)| Some(i)), inputs);
    let taps = list.iter().map(|&k| (owner[k], p.taps[k].1)).collect();
    PlaneTaps { starts, taps }
}
