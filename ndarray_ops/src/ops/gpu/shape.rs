//! Ops that move data on the GPU: transpose and strided copies, dot/batch_dot, split, Concat,
//! stack, the sequence ops and depth_to_space/space_to_depth.

use super::args::{int, kernel_args, ptr, Dim, MAX_RANK};
use super::nn::around;
use super::ops::{e2s, fill_with};
use super::{Gemm, Stream};
use crate::ops::gather::strides;
use crate::ops::Call;
use crate::ops::KResult;
use crate::ops::TensorRef;

/// depth_to_space: a permutation of the data viewed with its blocks as axes of their own.
pub(crate) fn depth_to_space(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let b = crate::ops::block_size(op, attrs).map_err(e2s)?;
    let x = &ins[0].shape;
    // (n, b, b, c, h, w) -> (n, c, h, b, w, b)
    let view = [x[0], b, b, x[1] / (b * b), x[2], x[3]];
    permuted(s, op, (ins, outs), view, [0, 3, 4, 1, 5, 2])
}

/// space_to_depth: the inverse permutation of depth_to_space.
pub(crate) fn space_to_depth(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let b = crate::ops::block_size(op, attrs).map_err(e2s)?;
    let x = &ins[0].shape;
    // (n, c, h, b, w, b) -> (n, b, b, c, h, w)
    let view = [x[0], x[1], x[2] / b, b, x[3] / b, b];
    permuted(s, op, (ins, outs), view, [0, 3, 5, 1, 2, 4])
}

/// The input seen as `view`, its axes copied out in `order`.
fn permuted(
    s: &dyn Stream,
    op: &str,
    (ins, outs): (&[TensorRef], &[TensorRef]),
    view: [usize; 6],
    order: [usize; 6],
) -> KResult {
    let steps = strides(&view);
    let dims = order.map(|d| [view[d], steps[d]]);
    strided_copy(s, op, outs[0].ptr(), ins[0].ptr(), dims)
}

/// The most dims the `permute` kernel walks (after merging).
pub(super) const PERMUTE_RANK: usize = MAX_RANK;

kernel_args! {
    /// `out` = `x` read along `dims`, with `x`'s stride along each.
    struct Permute [permute] {
        /// Elements.
        n: i64,
        /// The output (dense).
        out: *mut f32,
        /// The source.
        x: *mut f32,
        /// Dims used.
        rank: i64,
        /// The output's dims, outermost first.
        dims: [Dim; MAX_RANK],
        /// The source's stride along each dim.
        strides: [i64; MAX_RANK],
    }

    /// Rows `[src_first, src_first + rows)` of `src` (outer, src_len, inner) go to rows
    /// `[dst_first, dst_first + rows)` of `dst` (outer, dst_len, inner).
    struct AxisCopy [axis_copy] {
        /// Elements copied.
        n: i64,
        /// The destination.
        dst: *mut f32,
        /// The source.
        src: *mut f32,
        /// Elements after the axis.
        inner: Dim,
        /// The source's axis length.
        src_len: i64,
        /// The destination's axis length.
        dst_len: i64,
        /// The source's first row copied.
        src_first: i64,
        /// Rows copied.
        rows: Dim,
        /// The destination's first row written.
        dst_first: i64,
    }

    /// The sequence ops (see `kernels/shape.cu`).
    struct Sequence [sequence] {
        /// Elements of `out`.
        n: i64,
        /// The output.
        out: *mut f32,
        /// The data (or the output's gradient).
        x: *mut f32,
        /// The batch's lengths; null: every sequence is whole.
        lengths: *mut f32,
        /// 0 SequenceMask, 1 SequenceLast, 2 SequenceReverse, 3 SequenceLast's gradient.
        mode: i64,
        /// 0: (steps, batch, inner); 1: (batch, steps, inner).
        time_axis: i64,
        /// Steps.
        steps: Dim,
        /// Sequences.
        batch: Dim,
        /// Elements per (step, sequence).
        inner: Dim,
        /// SequenceMask's value past each length.
        value: f32,
    }
}

/// Writes `dst` (dense) from `src` read along `dims`: the destination's dims, outermost first,
/// each with the source's stride along it (0 repeats the source, as a broadcast). Size-1 dims
/// are dropped and neighbours the source steps through as one dim merged (a batch of matrix
/// transposes is three dims, whatever the rank), for the `permute` kernel.
pub(crate) fn strided_copy(
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
    let mut a = Permute {
        n: int(n),
        out: dst,
        x: src,
        rank: int(merged.len()),
        dims: [Dim::new(0); MAX_RANK],
        strides: [0; MAX_RANK],
    };
    for (d, [dim, step]) in merged.into_iter().enumerate() {
        a.dims[d] = Dim::new(dim);
        a.strides[d] = int(step);
    }
    s.run(k::permute, n, &a)
}

/// transpose: the output's dims with the input's stride along each.
pub(crate) fn transpose(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let x = &ins[0];
    let axes = crate::ops::transpose_axes(op, attrs, x.shape.len()).map_err(e2s)?;
    let steps = strides(&x.shape);
    let dims = axes.iter().map(|&ax| [x.shape[ax], steps[ax]]);
    strided_copy(s, op, outs[0].ptr(), x.ptr(), dims)
}

/// dot and batch_dot: one (batched) GEMM.
pub(crate) fn matmul(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
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
pub(super) struct AxisSide {
    ptr: *mut f32,
    len: usize,
    first: usize,
}

/// Copies `rows` rows along an axis from `src` to `dst`, both `(outer, _, inner)` layouts.
pub(super) fn axis_copy(
    s: &dyn Stream,
    (outer, inner): (usize, usize),
    src: AxisSide,
    dst: AxisSide,
    rows: usize,
) -> KResult {
    let n = outer * rows * inner;
    let a = AxisCopy {
        n: int(n),
        dst: dst.ptr,
        src: src.ptr,
        inner: Dim::new(inner),
        src_len: int(src.len),
        dst_len: int(dst.len),
        src_first: int(src.first),
        rows: Dim::new(rows),
        dst_first: int(dst.first),
    };
    s.run(k::axis_copy, n, &a)
}

/// Copies between `whole` and consecutive blocks of its `axis`: block `k` is piece `k` (a
/// pointer and its rows), after the blocks before it. `into_whole` copies the pieces into the
/// whole (Concat, stack), else the whole out into the pieces (SliceChannel, Concat's gradient).
pub(super) fn blocks_along(
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
pub(crate) fn split(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let x = &ins[0];
    let (pieces, axis, _) = crate::ops::split_params(op, attrs, &x.shape).map_err(e2s)?;
    let rows = x.shape[axis] / pieces;
    blocks_along(s, x, axis, outs.iter().map(|o| (o.ptr(), rows)), false)
}

/// Concat: each input after the one before along the axis.
pub(crate) fn concat(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let o = &outs[0];
    let axis = crate::ops::concat_axis(op, attrs, o.shape.len()).map_err(e2s)?;
    blocks_along(
        s,
        o,
        axis,
        ins.iter().map(|x| (x.ptr(), x.shape[axis])),
        true,
    )
}

/// `_backward_Concat(ograd, inputs...)`: each input's rows of the output gradient.
pub(crate) fn concat_backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let g = &ins[0];
    let axis = crate::ops::concat_axis(op, attrs, g.shape.len()).map_err(e2s)?;
    blocks_along(
        s,
        g,
        axis,
        outs.iter().map(|o| (o.ptr(), o.shape[axis])),
        false,
    )
}

/// stack: input `j` is row `j` of the output's new axis.
pub(crate) fn stack(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let o = &outs[0];
    let axis = crate::ops::stack_axis(op, attrs, o.shape.len()).map_err(e2s)?;
    blocks_along(s, o, axis, ins.iter().map(|x| (x.ptr(), 1)), true)
}

/// SequenceMask: the steps past each length set to the attributes' value.
pub(crate) fn sequence_mask(call: Call, s: &dyn Stream) -> KResult {
    let value = crate::ops::sequence_params(call.def.name, call.attrs)
        .map_err(e2s)?
        .2;
    sequence(call, s, (0, value), 0)
}

/// `_backward_SequenceMask`: the gradient past each length set to zero.
pub(crate) fn sequence_mask_backward(call: Call, s: &dyn Stream) -> KResult {
    sequence(call, s, (0, 0.0), 0)
}

/// SequenceLast: each sequence's last step.
pub(crate) fn sequence_last(call: Call, s: &dyn Stream) -> KResult {
    sequence(call, s, (1, 0.0), 0)
}

/// SequenceReverse: each sequence's steps up to its length, reversed.
pub(crate) fn sequence_reverse(call: Call, s: &dyn Stream) -> KResult {
    sequence(call, s, (2, 0.0), 0)
}

/// `_backward_SequenceLast(ograd, data[, lengths])`: the gradient at each last step.
pub(crate) fn sequence_last_backward(call: Call, s: &dyn Stream) -> KResult {
    sequence(call, s, (3, 0.0), 1)
}

/// One `sequence` kernel in `mode` (with the masked value) over the input `data` (its shape
/// gives the steps and batch); the lengths, when given, are the input after it.
fn sequence(call: Call, s: &dyn Stream, (mode, value): (i64, f64), data: usize) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let (_, axis, _) = crate::ops::sequence_params(def.name, attrs).map_err(e2s)?;
    let lengths = ins.get(data + 1);
    let data = &ins[data];
    let x = &data.shape;
    let (steps, batch) = match axis {
        0 => (x[0], x[1]),
        _ => (x[1], x[0]),
    };
    let n = outs[0].len();
    let a = Sequence {
        n: int(n),
        out: ptr(&outs[0]),
        x: ptr(&ins[0]),
        lengths: lengths.map_or(std::ptr::null_mut(), ptr),
        mode,
        time_axis: int(axis),
        steps: Dim::new(steps),
        batch: Dim::new(batch),
        inner: Dim::new(x[2..].iter().product::<usize>().max(1)),
        value: value as f32,
    };
    s.run(k::sequence, n, &a)
}
