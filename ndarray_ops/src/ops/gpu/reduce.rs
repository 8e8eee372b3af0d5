//! Reductions on the GPU: sums over axes and channels in partial sums, add_n, and the gradients
//! of broadcasts (sums back to the input's shape).

use super::args::{int, kernel_args, ptr, Dim};
use super::ops::e2s;
use super::shape::strided_copy;
use super::Stream;
use crate::ops::elemwise::broadcast_strides;
use crate::ops::gather::strides;
use crate::ops::reduce::Reduce;
use crate::ops::scalar::Scalar;
use crate::ops::Call;
use crate::ops::KResult;
use crate::ops::TensorRef;

kernel_args! {
    /// `out = ins[0] + ... + ins[count - 1]`.
    struct AddN [add_n] {
        /// Elements.
        n: i64,
        /// The sum (may be one of the inputs).
        out: *mut f32,
        /// The inputs.
        ins: [*mut f32; ADD_N_WIDTH],
        /// Inputs used.
        count: i64,
    }

    /// `out[t] += bias[(t / inner) % channels]`.
    struct AddBias [add_bias] {
        /// Elements.
        n: i64,
        /// The data, added to.
        out: *mut f32,
        /// One bias per channel.
        bias: *mut f32,
        /// Elements after the channel axis.
        inner: Dim,
        /// Channels.
        channels: Dim,
    }

    /// Per-channel partial sums of an (outer, channels, inner) layout.
    struct ChanPartial [chan_partial] {
        /// Channels.
        channels: i64,
        /// `parts` partial sums per channel and plane.
        out: *mut f64,
        /// The data.
        x: *mut f32,
        /// What mode 2 multiplies the data by.
        other: *mut f32,
        /// Elements before the channel axis.
        outer: i64,
        /// Elements after it.
        inner: i64,
        /// Partial sums per channel.
        parts: i64,
        /// 0 sums, 1 sums and sums of squares, 2 sums and sums of products with `other`.
        mode: i64,
    }

    /// Runs of `run` partial sums added up.
    struct ChanFold [chan_fold] {
        /// Sums written: rows times `ceil(parts / run)`.
        n: i64,
        /// The folded sums.
        out: *mut f64,
        /// The partial sums.
        src: *const f64,
        /// Partial sums per output.
        run: i64,
        /// Partial sums per row.
        parts: i64,
    }

    /// `out[c] = scale *` the sum of row `c`'s partial sums.
    struct ChanTotal [chan_total] {
        /// Rows.
        n: i64,
        /// One sum per row.
        out: *mut f32,
        /// The partial sums, `parts` per row.
        partials: *const f64,
        /// Partial sums per row.
        parts: i64,
        /// What the sums are multiplied by.
        scale: f32,
    }
}

/// Inputs the `add_n` kernel sums in one launch.
pub(super) const ADD_N_WIDTH: usize = 7;

pub(crate) fn add_n(call: Call, s: &dyn Stream) -> KResult {
    let (_, _, ins, outs) = call.parts();
    let n = outs[0].len();
    let sum = |dst: *mut f32, first: Option<*mut f32>, rest: &[TensorRef]| {
        let mut a = AddN {
            n: int(n),
            out: dst,
            ins: [std::ptr::null_mut(); ADD_N_WIDTH],
            count: 0,
        };
        for p in first.into_iter().chain(rest.iter().map(ptr)) {
            a.ins[a.count as usize] = p;
            a.count += 1;
        }
        s.run(k::add_n, n, &a)
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
pub(super) fn parts(channels: usize, per_channel: usize) -> usize {
    const THREADS: usize = 1 << 18;
    (per_channel / 32)
        .min(THREADS / channels.max(1))
        .clamp(1, 1 << 12)
}

/// How many threads, each with a lane of its own, count as filling a GPU: about a quarter of
/// the 270,336 an H100's 132 SMs hold at once (chosen, not measured on a GPU).
pub(super) const FILLS_A_GPU: usize = 1 << 16;

/// How many parts each of `lanes` lanes of `len` elements is split into for a reduction along
/// them (1: one thread per lane): where the lanes alone would not fill a GPU (a classifier's
/// classes over a small batch, a whole array's maximum), as [`parts`] splits channels.
pub(crate) fn lane_parts(lanes: usize, len: usize) -> usize {
    match lanes >= FILLS_A_GPU {
        true => 1,
        false => parts(lanes, len),
    }
}

/// How many partial sums one `chan_fold` thread adds.
pub(super) const FOLD: usize = 32;

/// Doubles of scratch [`channel_partials`] needs for `parts` partial sums in each of `sums`
/// planes of `channels` channels: the partial sums and, folded, a second buffer for what each
/// fold leaves.
pub(super) fn partial_doubles(sums: usize, parts: usize) -> usize {
    sums * (parts + parts.div_ceil(FOLD))
}

/// What [`channel_partials`] sums per channel (`chan_partial`'s modes in `kernels/reduce.cu`).
#[derive(Clone, Copy)]
pub(crate) enum ChannelSums {
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
pub(crate) fn channel_partials(
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
    let a = ChanPartial {
        channels: int(channels),
        out: partials.cast(),
        x: src,
        other,
        outer: int(outer),
        inner: int(inner),
        parts: int(p),
        mode,
    };
    s.run(k::chan_partial, channels * p, &a)?;
    fold_partials(s, partials, sums.planes() * channels, p)
}

/// Adds up runs of [`FOLD`] of each of `rows` rows of `p` partial sums (doubles at `partials`,
/// with room after them for a second buffer, as [`partial_doubles`] counts) until at most
/// [`FOLD`] are left per row; returns where they are and how many each row has.
pub(super) fn fold_partials(
    s: &dyn Stream,
    partials: *mut f32,
    rows: usize,
    mut p: usize,
) -> Result<(*mut f32, usize), String> {
    // SAFETY: the scratch holds the second buffer after the partial sums.
    let (mut from, mut to) = (
        partials,
        unsafe { partials.cast::<f64>().add(rows * p) }.cast::<f32>(),
    );
    while p > FOLD {
        let folded = p.div_ceil(FOLD);
        let a = ChanFold {
            n: int(rows * folded),
            out: to.cast(),
            src: from.cast(),
            run: int(FOLD),
            parts: int(p),
        };
        s.run(k::chan_fold, rows * folded, &a)?;
        (from, to, p) = (to, from, folded);
    }
    Ok((from, p))
}

/// A per-channel sum over an `(outer, channels, inner)` layout into `out`, times `scale`.
pub(crate) fn channel_sum(
    s: &dyn Stream,
    out: *mut f32,
    src: *mut f32,
    layout: (usize, usize, usize),
    scale: f64,
) -> KResult {
    let channels = layout.1;
    let (partials, _) = reduction_scratch(s, ChannelSums::Plain, layout, 0)?;
    let (sums, p) = channel_partials(s, partials, ChannelSums::Plain, src, layout)?;
    total(s, out, sums, (channels, p), scale)
}

/// `out[r]` = `scale` times the sum of row `r`'s `parts` partial sums (doubles at `partials`).
pub(super) fn total(
    s: &dyn Stream,
    out: *mut f32,
    partials: *mut f32,
    (rows, parts): (usize, usize),
    scale: f64,
) -> KResult {
    let a = ChanTotal {
        n: int(rows),
        out,
        partials: partials.cast(),
        parts: int(parts),
        scale: scale as f32,
    };
    s.run(k::chan_total, rows, &a)
}

/// `out[t] += bias[c]` over the `n` elements of an `(outer, channels, inner)` layout.
pub(crate) fn add_bias(
    s: &dyn Stream,
    out: &TensorRef,
    bias: &TensorRef,
    (channels, inner): (usize, usize),
) -> KResult {
    let n = out.len();
    let a = AddBias {
        n: int(n),
        out: ptr(out),
        bias: ptr(bias),
        inner: Dim::new(inner),
        channels: Dim::new(channels),
    };
    s.run(k::add_bias, n, &a)
}

/// Scratch for [`channel_partials`] of `sums` over `layout`, plus `extra` floats after it;
/// returns (partials, extra).
pub(crate) fn reduction_scratch(
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

/// `out = scale *` the sum of `src` (of `shape`) over `axes` (sorted); `out` holds the other
/// axes in order. Where the kept axes are one block (bias-like sums, sums of everything) the
/// sums run on the data in place as per-channel sums; otherwise the data is first permuted into
/// scratch with the kept axes first.
pub(crate) fn sum_axes(
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

/// `_broadcast_backward` (sum's and mean's gradient): the output's gradient repeated along the
/// reduced axes, divided by their size for mean.
pub(crate) fn broadcast_backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
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
    if attrs.get("__reduce__") != Some(Reduce::Mean.name()) {
        return Ok(());
    }
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    crate::ops::scalar::gpu::scalar_with(s, Scalar::Mul, o, o, 1.0 / count.max(1) as f64)
}

/// `_sum_to_like`: a broadcast operand's gradient, the output's gradient summed over the axes
/// the operand was broadcast along.
pub(crate) fn sum_to_like(call: Call, s: &dyn Stream) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let op = def.name;
    let (g, o) = (&ins[0], &outs[0]);
    let lead = g.shape.len() - o.shape.len();
    let axes: Vec<usize> = (0..g.shape.len())
        .filter(|&d| d < lead || o.shape[d - lead] == 1)
        .collect();
    sum_axes(s, op, (g.ptr(), &g.shape), &axes, o.ptr(), 1.0)
}
