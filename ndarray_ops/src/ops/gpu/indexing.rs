//! Ops that read by index on the GPU: take and Embedding, pick, softmax_cross_entropy, arange,
//! and the row sums their gradients add up.

use super::args::{int, kernel_args, ptr, Dim};
use super::lanes::lane_args;
use super::ops::{e2s, fill_with};
use super::reduce::{fold_partials, lane_parts, partial_doubles, total, FILLS_A_GPU};
use super::Stream;
use crate::ops::Call;
use crate::ops::KResult;
use crate::ops::TensorRef;

kernel_args! {
    /// take / Embedding: `out` (outer, count, inner) = the rows of `table` (outer, rows, inner)
    /// that `idx` names, clipped or wrapped into the rows.
    struct Take [take_fwd] {
        /// Elements of `out`.
        n: i64,
        /// The rows read.
        out: *mut f32,
        /// The table.
        table: *mut f32,
        /// The indices (floats).
        idx: *mut f32,
        /// The table's elements after its indexed axis.
        inner: Dim,
        /// The indexed axis's length (at least 1).
        rows: i64,
        /// Indices.
        count: Dim,
        /// 1: an index wraps into the rows; 0: it is clipped.
        wrap: i64,
    }

    /// Gradient rows added back into the rows their indices name (see [`add_rows`]).
    struct AddRows [take_bwd, take_keys, take_runs] {
        /// Threads: (outer, column) pairs for `take_bwd`, entries for `take_keys`, (outer,
        /// entry, column) for `take_runs`.
        n: i64,
        /// The gradient (outer, rows, inner), zeroed first.
        grad: *mut f32,
        /// The output's gradient (outer, count, inner).
        ograd: *mut f32,
        /// The indices: one list, or (`per_pair`) one per (outer, column) pair.
        idx: *mut f32,
        /// The lists sorted by row (`take_keys`, `take_runs`).
        keys: *mut i64,
        /// Elements after the indexed axis.
        inner: Dim,
        /// The indexed axis's length.
        rows: i64,
        /// Indices per list.
        count: Dim,
        /// 1: an index wraps into the rows; 0: it is clipped.
        wrap: i64,
        /// 1: a list per (outer, column) pair.
        per_pair: i64,
        /// Entries per sorted list, a power of two.
        padded: Dim,
    }

    /// pick and its gradient: one element per (outer, inner) of the lanes.
    struct Pick [pick] {
        /// Indices.
        n: i64,
        /// The elements picked, or (backward) the data's gradient, zeroed first.
        out: *mut f32,
        /// The data (outer, lanes, inner), or (backward) the output's gradient.
        src: *mut f32,
        /// One index per (outer, inner).
        idx: *mut f32,
        /// Elements after the picked axis.
        inner: Dim,
        /// The picked axis's length (at least 1).
        lanes: i64,
        /// 1: an index wraps into the lanes; 0: it is clipped.
        wrap: i64,
        /// 1: the gradient.
        backward: i64,
    }

    /// `_arange`: `out[t] = start + step * (t / repeat)`, in double.
    struct Arange [arange] {
        /// Elements.
        n: i64,
        /// The output.
        out: *mut f32,
        /// How many times each value repeats.
        repeat: Dim,
        /// The first value.
        start: f64,
        /// The step between values.
        step: f64,
    }

    /// softmax_cross_entropy's losses per row, or its gradient.
    struct CrossEntropy [cross_entropy] {
        /// Rows (losses), or scores (the gradient).
        n: i64,
        /// The scores' gradient (gradient = 1).
        grad: *mut f32,
        /// The scores (rows, classes).
        x: *mut f32,
        /// The class of each row.
        label: *mut f32,
        /// Each row's loss (gradient = 0).
        loss: *mut f64,
        /// The loss's gradient, one element (gradient = 1).
        ograd: *mut f32,
        /// Each row's maximum and sum of exponentials (softmax's figures).
        figures: *const f64,
        /// Scores per row.
        classes: Dim,
        /// 1: the gradient; 0: the losses.
        gradient: i64,
    }
}

/// Where gradient rows go back: `grad` (outer, rows, inner; zeroed) += `ograd` (outer, count,
/// inner) at the rows `idx` names (one list, or one per (outer, column) pair).
pub(super) struct Rows {
    pub(super) grad: *mut f32,
    pub(super) ograd: *mut f32,
    pub(super) idx: *mut f32,
    pub(super) outer: usize,
    pub(super) inner: usize,
    pub(super) rows: usize,
    pub(super) count: usize,
    pub(super) wrap: bool,
}

/// Whether the gradient rows of `threads` (outer, column) pairs, each with a list of `count`
/// indices, are added by sorting the lists by row rather than by one thread per pair walking
/// its whole list: where those threads alone would not fill a GPU and each would walk long
/// enough (an Embedding's gradient over a large batch of tokens, a long sort's gradient) to
/// outweigh the sort's launches (a bitonic network: 55 for 1,024 indices). Positions are
/// packed beside rows in 32 bits.
pub(super) fn sort_rows(threads: usize, count: usize) -> bool {
    threads < FILLS_A_GPU && (1024..1 << 32).contains(&count)
}

/// Adds gradient rows back into the rows their indices name, in index order:
/// `_backward_take` (one list shared by every (outer, column) pair) and `_backward_topk` (a list
/// per pair: `per_pair`). Long lists are sorted by row (their positions beside them), then
/// added by one thread per (outer, index, column), where each row's run sums its gradient rows.
pub(super) fn add_rows(s: &dyn Stream, r: Rows, per_pair: bool) -> KResult {
    let pairs = r.outer * r.inner;
    let mut a = AddRows {
        n: int(pairs),
        grad: r.grad,
        ograd: r.ograd,
        idx: r.idx,
        keys: std::ptr::null_mut(),
        inner: Dim::new(r.inner),
        rows: int(r.rows),
        count: Dim::new(r.count),
        wrap: i64::from(r.wrap),
        per_pair: i64::from(per_pair),
        padded: Dim::new(0),
    };
    if !sort_rows(pairs, r.count) {
        return s.run(k::take_bwd, pairs, &a);
    }
    let padded = r.count.next_power_of_two();
    let lists = if per_pair { pairs } else { 1 };
    let entries = lists * padded;
    a.keys = s.scratch(entries * 8)?.cast::<i64>();
    a.padded = Dim::new(padded);
    a.n = int(entries);
    s.run(k::take_keys, entries, &a)?;
    super::sort::bitonic(s, a.keys, entries, padded)?;
    let n = r.outer * r.count * r.inner;
    a.n = int(n);
    s.run(k::take_runs, n, &a)
}

/// take(table, indices): rows of the table gathered.
pub(crate) fn take(call: Call, s: &dyn Stream) -> KResult {
    gather_rows(call, s, (&call.ins[0], &call.ins[1]))
}

/// Embedding(indices, weight): rows of the weight gathered.
pub(crate) fn embedding(call: Call, s: &dyn Stream) -> KResult {
    gather_rows(call, s, (&call.ins[1], &call.ins[0]))
}

/// `_backward_take(ograd, indices, table)`: the gradients added back row by row.
pub(crate) fn take_backward(call: Call, s: &dyn Stream) -> KResult {
    let (_, _, ins, outs) = call.parts();
    let (outer, rows, inner, wrap) = take_rows(call, s, (&outs[0], &ins[1]))?;
    fill_with(s, &outs[0], 0.0)?;
    let r = Rows {
        grad: ptr(&outs[0]),
        ograd: ptr(&ins[0]),
        idx: ptr(&ins[1]),
        outer,
        inner,
        rows: rows.max(1),
        count: ins[1].len(),
        wrap,
    };
    add_rows(s, r, false)
}

/// The table's layout around its indexed axis (outer, rows, inner) and whether indices wrap;
/// with `mode=raise` the indices are checked on the host with the CPU's code first, so that
/// the kernels clamp nothing.
fn take_rows(
    call: Call,
    s: &dyn Stream,
    (table, idx): (&TensorRef, &TensorRef),
) -> Result<(usize, usize, usize, bool), String> {
    let (def, attrs, _, _) = call.parts();
    let op = def.name;
    let (outer, rows, inner) = crate::ops::take_layout(op, attrs, &table.shape).map_err(e2s)?;
    if rows == 0 && idx.len() > 0 {
        return Err(format!("{op}: cannot index an empty axis"));
    }
    let mode = crate::ops::take_mode(op, attrs).map_err(e2s)?;
    if mode == crate::ops::params::TakeMode::Raise {
        for i in s.download(idx)? {
            crate::ops::take_row(mode, f64::from(i), rows)?;
        }
    }
    Ok((
        outer,
        rows,
        inner,
        mode == crate::ops::params::TakeMode::Wrap,
    ))
}

/// Rows of `table` gathered by `idx` into the output.
fn gather_rows(call: Call, s: &dyn Stream, (table, idx): (&TensorRef, &TensorRef)) -> KResult {
    let (_, rows, inner, wrap) = take_rows(call, s, (table, idx))?;
    let out = &call.outs[0];
    let n = out.len();
    let a = Take {
        n: int(n),
        out: ptr(out),
        table: ptr(table),
        idx: ptr(idx),
        inner: Dim::new(inner),
        rows: int(rows.max(1)),
        count: Dim::new(idx.len()),
        wrap: i64::from(wrap),
    };
    s.run(k::take_fwd, n, &a)
}

/// pick(data, index): one index per (outer, inner) of the data's layout around the axis picked
/// from.
pub(crate) fn pick(call: Call, s: &dyn Stream) -> KResult {
    picked(call, s, &call.ins[0], false)
}

/// `_backward_pick(ograd, index, data)`: the gradient added at each picked element.
pub(crate) fn pick_backward(call: Call, s: &dyn Stream) -> KResult {
    picked(call, s, &call.outs[0], true)
}

/// batch_take(data, index): pick over the last axis, clipped.
pub(crate) fn batch_take(call: Call, s: &dyn Stream) -> KResult {
    let data = &call.ins[0];
    let lanes = data.shape.last().copied().unwrap_or(1);
    run_pick(call, s, data, ([lanes, 1], false), false)
}

/// pick or its gradient, the layout and wrapping from the attributes.
fn picked(call: Call, s: &dyn Stream, data: &TensorRef, backward: bool) -> KResult {
    let (def, attrs, _, _) = call.parts();
    let (_, _, [_, lanes, inner]) =
        crate::ops::pick_layout(def.name, attrs, &data.shape).map_err(e2s)?;
    let wrap = crate::ops::pick_wrap(def.name, attrs).map_err(e2s)?;
    run_pick(call, s, data, ([lanes, inner], wrap), backward)
}

/// The `pick` kernel over `lanes` of `inner` elements of `data` (the gradient's output when
/// `backward`, zeroed first).
fn run_pick(
    call: Call,
    s: &dyn Stream,
    data: &TensorRef,
    ([lanes, inner], wrap): ([usize; 2], bool),
    backward: bool,
) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let n = ins[1].len();
    if lanes == 0 && n > 0 {
        return Err(format!(
            "{}: cannot pick from an empty axis (data {:?})",
            def.name, data.shape
        ));
    }
    if backward {
        fill_with(s, &outs[0], 0.0)?;
    }
    let a = Pick {
        n: int(n),
        out: ptr(&outs[0]),
        src: ptr(&ins[0]),
        idx: ptr(&ins[1]),
        inner: Dim::new(inner.max(1)),
        lanes: int(lanes.max(1)),
        wrap: i64::from(wrap),
        backward: i64::from(backward),
    };
    s.run(k::pick, n, &a)
}

/// softmax_cross_entropy(data (n, k), label (n,)) -> (1,).
pub(crate) fn cross_entropy(call: Call, s: &dyn Stream) -> KResult {
    entropy(call, s, false)
}

/// `_backward_softmax_cross_entropy(ograd (1,), data, label) -> d data`.
pub(crate) fn cross_entropy_backward(call: Call, s: &dyn Stream) -> KResult {
    entropy(call, s, true)
}

/// The loss, or (`backward`) its gradient. The CPU refuses a label that is not a class index,
/// so the labels are read back and checked with its code (one wait for the device per call).
fn entropy(call: Call, s: &dyn Stream, backward: bool) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let op = def.name;
    let (x, label) = if backward {
        (&ins[1], &ins[2])
    } else {
        (&ins[0], &ins[1])
    };
    let (rows, k) = (x.shape[0], x.shape[1]);
    for l in s.download(label)? {
        crate::ops::class_of(f64::from(l), k, op)?;
    }
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
    let mut a = CrossEntropy {
        n: int(rows),
        grad: std::ptr::null_mut(),
        x: ptr(x),
        label: ptr(label),
        loss: std::ptr::null_mut(),
        ograd: std::ptr::null_mut(),
        figures,
        classes: Dim::new(k),
        gradient: 0,
    };
    if backward {
        let n = rows * k;
        a.n = int(n);
        a.grad = ptr(&outs[0]);
        a.ograd = ptr(&ins[0]);
        a.gradient = 1;
        return s.run(k::cross_entropy, n, &a);
    }
    // The rows' losses, then their sum as one row of partial sums.
    let losses = s.scratch(partial_doubles(1, rows) * 8)?;
    a.loss = losses.cast::<f64>();
    s.run(k::cross_entropy, rows, &a)?;
    let (sums, p) = fold_partials(s, losses.cast::<f32>(), 1, rows)?;
    total(s, ptr(&outs[0]), sums, (1, p), 1.0)
}

/// `_arange`: `start + step * (k / repeat)`, in double as the CPU computes it.
pub(crate) fn arange(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, _, outs) = call.parts();
    let op = def.name;
    let (start, step, _, repeat) = crate::ops::arange_params(op, attrs).map_err(e2s)?;
    let n = outs[0].len();
    let a = Arange {
        n: int(n),
        out: ptr(&outs[0]),
        repeat: Dim::new(repeat),
        start,
        step,
    };
    s.run(k::arange, n, &a)
}
