//! Ops that read by index on the GPU: take and Embedding, pick, softmax_cross_entropy, arange,
//! and the row sums their gradients add up.

use super::nn::lane_args;
use super::ops::{e2s, fill_with};
use super::reduce::{fold_partials, lane_parts, partial_doubles, FILLS_A_GPU};
use super::{KArgs, Stream};
use crate::ops::KResult;
use crate::ops::{Attrs, TensorRef};

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
pub(crate) fn take(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
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
pub(crate) fn pick(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
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
pub(crate) fn cross_entropy(
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
pub(crate) fn arange(
    op: &str,
    attrs: &Attrs,
    _: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let (start, step, _, repeat) = crate::ops::arange_params(op, attrs).map_err(e2s)?;
    let n = outs[0].len();
    let a = KArgs::new(n)
        .t(0, &outs[0])
        .i(1, repeat)
        .bits(2, start)
        .bits(3, step);
    s.launch("arange", n, &a)
}
