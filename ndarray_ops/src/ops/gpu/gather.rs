//! The gather family on the GPU: broadcast_to / broadcast_axis / broadcast_like, tile, repeat,
//! reverse, SwapAxis, Pad, UpSampling (nearest), slice_like, slice and slice_axis, and their
//! gradients (`_backward_gather`, `_backward_slice`). The CPU's description of the op (its
//! [`Walks`]: per output axis, the input index each index reads) is uploaded as a table, and two
//! kernels serve every op:
//!
//! * `gather_fwd`, one index per output element: the sum of its indices' input offsets, or the
//!   fill value where one of them is padding;
//! * `gather_bwd`, one index per input element: the sum of the output gradient over every output
//!   element that read it. Each input axis is walked by one output axis, so those elements are
//!   the product of one bucket per output axis (the indices reading the element's index along
//!   the axis it walks); buckets list their indices in ascending order, so the sum runs in
//!   output order, in double, as the CPU kernel's — the same bits, no atomics. Where few input
//!   elements each sum many terms (a broadcast's or a tile's gradient into a small array), each
//!   sum is split into parts that many threads share, added up by `chan_total`: the same terms
//!   in double, in another order.

use super::args::{int, kernel_args, ptr};
use super::reduce::lane_parts;
use super::{buckets, Stream};
use crate::ops::gather::{walks, Walks};
use crate::ops::shape::slice_walks;
use crate::ops::Call;
use crate::ops::KResult;
use crate::ops::OpDef;
use crate::ops::TensorRef;

/// The most dims `gather_bwd` walks (its per-index arrays are this long).
const GATHER_DIMS: usize = 8;

kernel_args! {
    /// `out[t]` = the data element the table's per-axis offsets name for output element `t`, or
    /// `fill` where an axis's offset is padding.
    struct GatherFwd [gather_fwd] {
        /// Output elements.
        n: i64,
        /// The output.
        out: *mut f32,
        /// The data.
        x: *mut f32,
        /// `[ndim, dims..., each axis's input offsets (-1: padding)...]`.
        table: *const i64,
        /// The value of padding.
        fill: f32,
    }

    /// The data's gradient: each element's sum over the output elements that read it.
    struct GatherBwd [gather_bwd] {
        /// Threads: data elements times `parts`.
        n: i64,
        /// The data's gradient (one part).
        dx: *mut f32,
        /// The output's gradient.
        g: *mut f32,
        /// The backward table ([`backward_table`]).
        table: *const i64,
        /// Each part's sum (doubles, an element's parts together), for `chan_total` (more than
        /// one part).
        partials: *mut f64,
        /// Parts each element's sum is split into.
        parts: i64,
    }
}

/// A member of the gather family (`ops::gather`).
pub(crate) fn gather(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let m = crate::ops::gather::member(def)?;
    let e = |e: crate::NdError| e.to_string();
    let (x, y) = (&ins[0], &outs[0]);
    let fill = crate::ops::gather::fill_value(m, attrs).map_err(e)?;
    let w = walks(m, attrs, &x.shape, &y.shape).map_err(e)?;
    forward(def, &w, fill, x, y, s)
}

/// `_backward_gather`: each output gradient element added into the data element its forward
/// member read.
pub(crate) fn backward_gather(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let e = |e: crate::NdError| e.to_string();
    let (x, y) = (&ins[0], &outs[0]);
    let fwd = crate::ops::gather::forward_member(def.name, attrs).map_err(e)?;
    backward(
        def,
        &walks(fwd, attrs, &y.shape, &x.shape).map_err(e)?,
        x,
        y,
        s,
    )
}

/// slice and slice_axis: a walk of the data's selected region.
pub(crate) fn slice(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let e = |e: crate::NdError| e.to_string();
    let (x, y) = (&ins[0], &outs[0]);
    let w = slice_walks(def.name, attrs, &x.shape).map_err(e)?;
    forward(def, &w, 0.0, x, y, s)
}

/// `_backward_slice`: the output gradient into the region its forward op (`__slice_op__`)
/// read, zeros elsewhere.
pub(crate) fn backward_slice(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let e = |e: crate::NdError| e.to_string();
    let (x, y) = (&ins[0], &outs[0]);
    let fwd = attrs.get("__slice_op__").unwrap_or("slice");
    backward(def, &slice_walks(fwd, attrs, &y.shape).map_err(e)?, x, y, s)
}

/// `[ndim, dims..., each axis's input offsets (-1: padding)...]`, refused when its memory
/// cannot be had (8 bytes an index along every axis).
fn forward_table(op: &str, w: &Walks) -> Result<Vec<i64>, String> {
    let strides = crate::ops::gather::strides(&w.input);
    let indices: usize = w.axes.iter().map(|a| a.index.len()).sum();
    let mut t = Vec::new();
    t.try_reserve_exact(1 + w.axes.len() + indices)
        .map_err(|_| format!("{op}: cannot allocate the gather table of {indices} indices"))?;
    t.push(w.axes.len() as i64);
    t.extend(w.axes.iter().map(|a| a.index.len() as i64));
    for a in &w.axes {
        let stride = a.from.map_or(0, |f| strides[f]);
        t.extend(
            a.index
                .iter()
                .map(|j| j.map_or(-1, |j| (j * stride) as i64)),
        );
    }
    Ok(t)
}

fn forward(
    def: &OpDef,
    w: &Walks,
    fill: f64,
    x: &TensorRef,
    y: &TensorRef,
    s: &dyn Stream,
) -> KResult {
    let op = def.name;
    let n = y.len();
    if n == 0 {
        return Ok(());
    }
    let table = s.upload(&forward_table(op, w)?)?;
    let a = GatherFwd {
        n: int(n),
        out: ptr(y),
        x: ptr(x),
        table: table.cast(),
        fill: fill as f32,
    };
    s.run(k::gather_fwd, n, &a)
}

/// `[input ndim, output ndim, input dims..., output dims..., each output axis's input axis (-1:
/// none)..., where each output axis's bucket starts begin..., where its bucket lists begin...,
/// then per output axis its bucket starts (one per index of the input axis it walks, and the
/// end) and its buckets' output indices]`.
fn backward_table(w: &Walks) -> Vec<i64> {
    let (ni, no) = (w.input.len(), w.axes.len());
    let mut t = vec![ni as i64, no as i64];
    t.extend(w.input.iter().map(|&d| d as i64));
    t.extend(w.axes.iter().map(|a| a.index.len() as i64));
    t.extend(w.axes.iter().map(|a| a.from.map_or(-1, |d| d as i64)));
    let heads = t.len();
    t.resize(heads + 2 * no, 0);
    for (d, a) in w.axes.iter().enumerate() {
        // A walk of no input axis reads index 0 of a size-1 axis.
        let size = a.from.map_or(1, |f| w.input[f]);
        let (starts, list) = buckets(a.index.iter().copied(), size);
        t[heads + d] = t.len() as i64;
        t.extend(starts.iter().map(|&k| k as i64));
        t[heads + no + d] = t.len() as i64;
        t.extend(list.iter().map(|&k| k as i64));
    }
    t
}

fn backward(def: &OpDef, w: &Walks, g: &TensorRef, dx: &TensorRef, s: &dyn Stream) -> KResult {
    let op = def.name;
    let dims = w.input.len().max(w.axes.len());
    if dims > GATHER_DIMS {
        return Err(format!(
            "{op}: the GPU's gather gradient walks at most {GATHER_DIMS} dims, got {dims} (input {:?}, output gradient {:?})",
            dx.shape, g.shape
        ));
    }
    let n = dx.len();
    if n == 0 {
        return Ok(());
    }
    let table = s.upload(&backward_table(w))?;
    let parts = lane_parts(n, g.len() / n);
    let mut a = GatherBwd {
        n: int(n * parts),
        dx: ptr(dx),
        g: ptr(g),
        table: table.cast(),
        partials: std::ptr::null_mut(),
        parts: int(parts),
    };
    if parts == 1 {
        return s.run(k::gather_bwd, n, &a);
    }
    let partials = s.scratch(n * parts * 8)?;
    a.partials = partials.cast();
    s.run(k::gather_bwd, n * parts, &a)?;
    super::reduce::total(s, ptr(dx), partials.cast(), (n, parts), 1.0)
}
