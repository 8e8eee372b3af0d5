//! Ops whose every output element is one input element, or a constant: broadcast_to,
//! broadcast_axis, broadcast_like, tile, repeat, reverse, SwapAxis, Pad, UpSampling (nearest)
//! and slice_like. One mechanism serves them all and their gradients. (`pick`, `SequenceMask`,
//! `SequenceLast` and `SequenceReverse`, at the end, also read one element or a constant, but
//! which depends on data; `depth_to_space` and `space_to_depth` mix axes: they list each
//! output element's source instead.)
//!
//! Each op describes, per output axis, which input index every index along that axis reads
//! (an [`AxisRule`]; `None` is padding). An output element reads the sum of its indices'
//! offsets, so broadcasting is an axis of zeros, tiling `i % n`, repeating `i / r`, reversing
//! `n - 1 - i`, swapping axes reading another axis's stride, padding `None` or a clamped or
//! reflected index. The CPU kernels walk the output row by row along its last axis: the other
//! axes laid out as one offset per index (4 bytes where the input has fewer than 2^32
//! elements), the row as a few runs of copies, fills or reversed copies that the rule gives
//! without visiting its indices, or as offsets where runs would be short. The backward op
//! `_backward_gather` builds the same layout from the data's and the output gradient's shapes
//! and adds each output
//! gradient element into the input element it read: a broadcast's sum, a tile's sum of tiles,
//! padding's crop.

use super::params::{attr_enum, int32s, op_params, Params, PositiveInt};
use super::permute::permute;
use super::{norm_axes, times, Arity, Attrs, OpDef};
use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

mod layout;
mod rules;

use layout::*;
pub(crate) use layout::{walks, Walk, Walks};
use rules::*;

use super::family::Member;

/// A member of the gather family, named for its op. Each one's output shape, index rules and
/// gradient check match on it; `_backward_gather` names its forward member in `__fwd__`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gather {
    BroadcastTo,
    BroadcastAxis,
    BroadcastLike,
    Tile,
    Repeat,
    Reverse,
    SwapAxis,
    Pad,
    SliceLike,
    /// Nearest UpSampling (registered with Convolution's folder, whose bilinear mode is a
    /// Deconvolution).
    UpSampling,
}

impl Gather {
    /// Every member; those before [`Gather::UpSampling`] are registered here.
    pub(crate) const ALL: [Gather; 10] = [
        Gather::BroadcastTo,
        Gather::BroadcastAxis,
        Gather::BroadcastLike,
        Gather::Tile,
        Gather::Repeat,
        Gather::Reverse,
        Gather::SwapAxis,
        Gather::Pad,
        Gather::SliceLike,
        Gather::UpSampling,
    ];

    /// The op's name: the family's one name table.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Gather::BroadcastTo => "broadcast_to",
            Gather::BroadcastAxis => "broadcast_axis",
            Gather::BroadcastLike => "broadcast_like",
            Gather::Tile => "tile",
            Gather::Repeat => "repeat",
            Gather::Reverse => "reverse",
            Gather::SwapAxis => "SwapAxis",
            Gather::Pad => "Pad",
            Gather::SliceLike => "slice_like",
            Gather::UpSampling => "UpSampling",
        }
    }

    /// The member named `name` (the name table read backwards).
    pub(crate) fn named(name: &str) -> Option<Gather> {
        Gather::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The op's other names.
    const fn aliases(self) -> &'static [&'static str] {
        match self {
            Gather::BroadcastAxis => &["broadcast_axes"],
            Gather::Reverse => &["flip"],
            Gather::SwapAxis => &["swapaxes"],
            Gather::Pad => &["pad"],
            Gather::BroadcastTo
            | Gather::BroadcastLike
            | Gather::Tile
            | Gather::Repeat
            | Gather::SliceLike
            | Gather::UpSampling => &[],
        }
    }

    /// Its inputs: the data, and for two members a second whose shape is the output's.
    const fn arity(self) -> usize {
        match self {
            Gather::BroadcastLike | Gather::SliceLike => 2,
            Gather::BroadcastTo
            | Gather::BroadcastAxis
            | Gather::Tile
            | Gather::Repeat
            | Gather::Reverse
            | Gather::SwapAxis
            | Gather::Pad
            | Gather::UpSampling => 1,
        }
    }
}

/// The member `def` is, as an error message where it is none.
pub(crate) fn member(def: &OpDef) -> std::result::Result<Gather, String> {
    match def.member {
        Member::Gather(m) => Ok(m),
        _ => Err(format!("{} is not an op of the gather family", def.name)),
    }
}

/// Row-major strides of a dense `shape`, in elements.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

op_params! {
    /// broadcast_to's attributes.
    pub struct BroadcastToParams for "broadcast_to" { shape: Vec<i64> }
}

op_params! {
    /// broadcast_axis's attributes.
    pub struct BroadcastAxisParams for "broadcast_axis" { axis: Vec<i64>, size: Vec<i64> }
}

op_params! {
    /// broadcast_like's attributes.
    pub struct BroadcastLikeParams for "broadcast_like" {
        lhs_axes: Option<Vec<i64>>,
        rhs_axes: Option<Vec<i64>>,
    }
}

op_params! {
    /// tile's attributes.
    pub struct TileParams for "tile" { reps: Vec<i64> }
}

op_params! {
    /// repeat's attributes (0 repeats leaves an empty array, as in MXNet).
    pub struct RepeatParams for "repeat" { repeats: usize, axis: Option<i64> }
}

op_params! {
    /// reverse's attributes.
    pub struct ReverseParams for "reverse" { axis: Vec<i64> }
}

op_params! {
    /// SwapAxis's attributes.
    pub struct SwapAxisParams for "SwapAxis" { dim1: i64, dim2: i64 }
}

attr_enum! {
    /// What Pad reads outside its input.
    pub enum PadMode {
        /// Nothing: the constant.
        Constant = "constant",
        /// The edge element.
        Edge = "edge",
        /// Mirrored about the edge elements, which are not repeated.
        Reflect = "reflect",
    }
}

op_params! {
    /// Pad's attributes.
    pub struct PadParams for "Pad" { mode: PadMode, pad_width: Vec<i64>, constant_value: f64 }
}

attr_enum! {
    /// How UpSampling fills the larger image.
    pub enum SampleType {
        /// Each pixel repeated (a gather op).
        Nearest = "nearest",
        /// A learned depthwise Deconvolution initialised to bilinear weights.
        Bilinear = "bilinear",
    }
}

op_params! {
    /// UpSampling's attributes.
    pub struct UpSamplingParams for "UpSampling" {
        scale: PositiveInt,
        num_filter: usize,
        sample_type: SampleType,
        num_args: Option<usize>,
    }
}

op_params! {
    /// slice_like's attributes.
    pub struct SliceLikeParams for "slice_like" { axes: Vec<i64> }
}

/// The value Pad fills its border with in constant mode (the other gather ops fill nothing).
pub(crate) fn fill_value(m: Gather, attrs: &Attrs) -> Result<f64> {
    match m {
        Gather::Pad => Ok(PadParams::get(m.name(), attrs)?.constant_value),
        Gather::BroadcastTo
        | Gather::BroadcastAxis
        | Gather::BroadcastLike
        | Gather::Tile
        | Gather::Repeat
        | Gather::Reverse
        | Gather::SwapAxis
        | Gather::SliceLike
        | Gather::UpSampling => Ok(0.0),
    }
}

fn positive(op: &str, key: &str, v: i64) -> Result<usize> {
    if v < 1 {
        return Err(invalid(op, format!("{key}={v} is not a positive integer")));
    }
    Ok(v as usize)
}

/// The output shape of member `m` for its inputs' shapes.
fn out_shape(m: Gather, attrs: &Attrs, s: &[Vec<usize>]) -> Result<Vec<usize>> {
    let (x, op) = (&s[0], m.name());
    Ok(match m {
        Gather::BroadcastTo => {
            let want = &BroadcastToParams::get(op, attrs)?.shape;
            if want.len() != x.len() {
                return Err(shape_error(
                    op,
                    "data",
                    x,
                    format!("{} dimensions", want.len()),
                ));
            }
            // 0 keeps the input's size.
            x.iter()
                .zip(want)
                .map(|(&n, &w)| if w == 0 { n } else { w.max(0) as usize })
                .collect()
        }
        Gather::BroadcastAxis => {
            let p = BroadcastAxisParams::get(op, attrs)?;
            let (axes, sizes) = (&p.axis, &p.size);
            if axes.len() != sizes.len() {
                return Err(invalid(
                    op,
                    format!("axis {axes:?} and size {sizes:?} differ in length"),
                ));
            }
            let mut out = x.clone();
            for (a, &n) in norm_axes(op, axes, x.len())?.into_iter().zip(sizes) {
                out[a] = positive(op, "size", n)?;
            }
            out
        }
        Gather::BroadcastLike => {
            let rhs = &s[1];
            if rhs.len() != x.len() {
                return Err(shape_error(
                    op,
                    "rhs",
                    rhs,
                    format!("{} dimensions like lhs", x.len()),
                ));
            }
            let p = BroadcastLikeParams::get(op, attrs)?;
            match (&p.lhs_axes, &p.rhs_axes) {
                (None, None) => rhs.clone(),
                (Some(la), Some(ra)) if la.len() == ra.len() => {
                    let mut out = x.clone();
                    let ra = norm_axes(op, ra, rhs.len())?;
                    for (l, r) in norm_axes(op, la, x.len())?.into_iter().zip(ra) {
                        out[l] = rhs[r];
                    }
                    out
                }
                (la, ra) => {
                    return Err(invalid(
                        op,
                        format!(
                        "lhs_axes {la:?} and rhs_axes {ra:?} must both be given, alike in length"
                    ),
                    ))
                }
            }
        }
        Gather::Tile => {
            let reps = &TileParams::get(op, attrs)?.reps;
            if reps.iter().any(|&r| r < 0) {
                return Err(invalid(op, format!("reps {reps:?} has a negative count")));
            }
            let n = x.len().max(reps.len());
            let pad = |v: &[usize], k: usize| -> Vec<usize> {
                std::iter::repeat_n(1, k - v.len())
                    .chain(v.iter().copied())
                    .collect()
            };
            let reps: Vec<usize> = reps.iter().map(|&r| r as usize).collect();
            pad(x, n)
                .iter()
                .zip(pad(&reps, n))
                .map(|(&a, b)| times(op, a, b))
                .collect::<Result<_>>()?
        }
        Gather::Repeat => {
            let p = RepeatParams::get(op, attrs)?;
            let r = p.repeats;
            match p.axis {
                None => vec![times(op, x.iter().product(), r)?],
                Some(a) => {
                    let a = norm_axes(op, &[a], x.len())?[0];
                    let mut out = x.clone();
                    out[a] = times(op, out[a], r)?;
                    out
                }
            }
        }
        Gather::Reverse => {
            norm_axes(op, &ReverseParams::get(op, attrs)?.axis, x.len())?;
            x.clone()
        }
        Gather::SwapAxis => {
            let (a, b) = swapped(op, attrs, x.len())?;
            let mut out = x.clone();
            out.swap(a, b);
            out
        }
        Gather::Pad => {
            let widths = pad_widths(op, attrs, x.len())?;
            x.iter().zip(&widths).map(|(n, (b, a))| n + b + a).collect()
        }
        Gather::UpSampling => {
            let k = upsampling_scale(op, attrs, x)?;
            let mut out = x.clone();
            out[2] = times(op, out[2], k)?;
            out[3] = times(op, out[3], k)?;
            out
        }
        Gather::SliceLike => {
            let like = &s[1];
            if like.len() != x.len() {
                return Err(shape_error(
                    op,
                    "shape_like",
                    like,
                    format!("{} dimensions like data", x.len()),
                ));
            }
            let axes = match &SliceLikeParams::get(op, attrs)?.axes {
                a if !a.is_empty() => norm_axes(op, a, x.len())?,
                _ => (0..x.len()).collect(),
            };
            let mut out = x.clone();
            for a in axes {
                if like[a] > x[a] {
                    return Err(shape_error(
                        op,
                        "shape_like",
                        like,
                        format!("at most data's {x:?} along axis {a}"),
                    ));
                }
                out[a] = like[a];
            }
            out
        }
    })
}

fn swapped(op: &str, attrs: &Attrs, ndim: usize) -> Result<(usize, usize)> {
    let p = SwapAxisParams::get(op, attrs)?;
    let v = norm_axes(op, &[p.dim1, p.dim2], ndim)?;
    Ok((v[0], v[1]))
}

/// Pad's (before, after) per axis from `pad_width`, two per axis.
fn pad_widths(op: &str, attrs: &Attrs, ndim: usize) -> Result<Vec<(usize, usize)>> {
    let p = PadParams::get(op, attrs)?;
    let w = &p.pad_width;
    int32s(w, 0).map_err(|e| invalid(op, format!("attribute pad_width={w:?} {e}")))?;
    if w.len() != 2 * ndim {
        return Err(invalid(
            op,
            format!("pad_width {w:?} is not {} widths (two per axis)", 2 * ndim),
        ));
    }
    Ok(w.chunks(2)
        .map(|p| (p[0] as usize, p[1] as usize))
        .collect())
}

/// Nearest UpSampling's factor for data `x` (bilinear is a Deconvolution, rewritten before it
/// gets here).
fn upsampling_scale(op: &str, attrs: &Attrs, x: &[usize]) -> Result<usize> {
    let p = UpSamplingParams::get(op, attrs)?;
    if p.sample_type != SampleType::Nearest {
        return Err(invalid(
            op,
            "sample_type bilinear is a Deconvolution: only nearest is a gather op",
        ));
    }
    if p.num_args.unwrap_or(1) != 1 {
        return Err(invalid(
            op,
            format!("num_args={:?}: only one input is supported", p.num_args),
        ));
    }
    if x.len() != 4 {
        return Err(shape_error(op, "data", x, "(n, c, h, w)"));
    }
    Ok(p.scale.0)
}

/// Whether data of shape `x` broadcasts to `out` (the same rank): each axis 1 or already `out`'s.
fn broadcastable(op: &str, x: &[usize], out: &[usize]) -> Result<()> {
    match (0..out.len()).find(|&d| x[d] != out[d] && x[d] != 1) {
        Some(d) => Err(shape_error(
            op,
            "data",
            x,
            format!(
                "size 1 or {} along axis {d} to broadcast to {out:?}, not {}",
                out[d], x[d]
            ),
        )),
        None => Ok(()),
    }
}

/// Checks everything the kernel's walks will (without building them: they take memory in
/// proportion to the output's axes, which shape inference, and planning a graph, must not).
pub(crate) fn infer_gather(m: Gather, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let (out, op) = (out_shape(m, attrs, s)?, m.name());
    if let Gather::BroadcastTo | Gather::BroadcastAxis | Gather::BroadcastLike = m {
        broadcastable(op, &s[0], &out)?;
    }
    if m == Gather::Pad && PadParams::get(op, attrs)?.mode == PadMode::Reflect {
        let widths = pad_widths(op, attrs, s[0].len())?;
        if let Some(a) = (0..s[0].len()).find(|&a| widths[a].0.max(widths[a].1) >= s[0][a].max(1)) {
            return Err(shape_error(
                op,
                "pad_width",
                &s[0],
                format!("reflect widths below the size along axis {a}"),
            ));
        }
    }
    Ok((vec![out], vec![d[0]]))
}

/// Inference of member `M`'s op (its index a constant: inference receives only the op's name).
fn infer<const M: usize>(_: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    infer_gather(Gather::ALL[M], attrs, s, d)
}

pub(crate) fn gather_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let m = member(def)?;
    let e = |e: NdError| e.to_string();
    let rules = rules(m, attrs, &ins[0].shape, &outs[0].shape).map_err(e)?;
    let fill = fill_value(m, attrs).map_err(e)?;
    let plan = rules.plan(m.name()).map_err(e)?;
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: read access to the data, exclusive access to the output, which is not the
        // data (the op is not alias-safe, so an overlapping input was copied first).
        let (x, y) = unsafe { (ins[0].slice::<T>(), outs[0].slice_mut::<T>()) };
        match &plan {
            Plan::Permute(axes) => permute(x, &rules.input, axes, y),
            Plan::Maps(maps) => maps.gather(x, y, T::from_f64(fill)),
        }
    });
    Ok(())
}

/// `_backward_gather(ograd, data)`, with the forward op in `__fwd__` and its attributes: each
/// output gradient element added into the data element it read.
fn infer_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let fwd = forward_member(op, attrs)?;
    check_backward(fwd, attrs, &s[1], &s[0])?;
    // The gradient is the data's, in the data's dtype.
    super::same_dtypes(op, d)?;
    Ok((vec![s[1].clone()], vec![d[0]]))
}

/// Checks that an output gradient of shape `ograd` is what `fwd` makes of data of shape `data`,
/// so that its rules read only inside the data.
fn check_backward(fwd: Gather, attrs: &Attrs, data: &[usize], ograd: &[usize]) -> Result<()> {
    let fits = match fwd {
        // Their output's shape comes from a second input, which the gradient does not see.
        Gather::BroadcastLike => {
            data.len() == ograd.len() && broadcastable(fwd.name(), data, ograd).is_ok()
        }
        Gather::SliceLike => {
            data.len() == ograd.len() && ograd.iter().zip(data).all(|(g, x)| g <= x)
        }
        Gather::BroadcastTo
        | Gather::BroadcastAxis
        | Gather::Tile
        | Gather::Repeat
        | Gather::Reverse
        | Gather::SwapAxis
        | Gather::Pad
        | Gather::UpSampling => out_shape(fwd, attrs, &[data.to_vec()])? == ograd,
    };
    match fits {
        true => Ok(()),
        false => Err(shape_error(
            fwd.name(),
            "ograd",
            ograd,
            format!("the shape {} makes of data {data:?}", fwd.name()),
        )),
    }
}

/// `_backward_gather`'s forward member, named by its `__fwd__`.
pub(crate) fn forward_member(op: &str, attrs: &Attrs) -> Result<Gather> {
    let fwd = attrs
        .get("__fwd__")
        .ok_or_else(|| invalid(op, "attribute __fwd__ (the forward op) is required"))?;
    Gather::named(fwd).ok_or_else(|| invalid(op, format!("__fwd__ {fwd:?} is not a gather op")))
}

fn backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let e = |e: NdError| e.to_string();
    let fwd = forward_member(op, attrs).map_err(e)?;
    check_backward(fwd, attrs, &outs[0].shape, &ins[0].shape).map_err(e)?;
    let rules = rules(fwd, attrs, &outs[0].shape, &ins[0].shape).map_err(e)?;
    let plan = rules.plan(fwd.name()).map_err(e)?;
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: read access to the output gradient, exclusive access to d data (not
        // alias-safe).
        let (g, dx) = unsafe { (ins[0].slice::<T>(), outs[0].slice_mut::<T>()) };
        match &plan {
            Plan::Permute(axes) => {
                // The inverse permutation: data axis `axes[d]` is output axis `d`.
                let mut back = vec![0; axes.len()];
                axes.iter().enumerate().for_each(|(d, &a)| back[a] = d);
                permute(g, &ins[0].shape, &back, dx);
            }
            // Each data element's gradient is one output gradient element or none.
            Plan::Maps(maps) if rules.injective() => {
                dx.fill(T::default());
                maps.scatter(g, dx, |d, v| *d = v);
            }
            Plan::Maps(maps) => {
                // Sums accumulated in f64, one pass in output order.
                let mut acc = vec![0.0f64; dx.len()];
                maps.scatter(g, &mut acc, |a, v: T| *a += v.to_f64());
                for (d, a) in dx.iter_mut().zip(acc) {
                    *d = T::from_f64(a);
                }
            }
        }
    });
    Ok(())
}

pub(super) fn ops() -> &'static [OpDef] {
    /// Member `M` of [`Gather::ALL`]'s op.
    const fn def<const M: usize>() -> OpDef {
        let m = Gather::ALL[M];
        OpDef {
            aliases: m.aliases(),
            alias_safe: false,
            // The second input (broadcast_like's rhs, slice_like's shape_like) gives a shape.
            backward_ignores: &[1],
            ..OpDef::new(
                m.name(),
                Arity::Exactly(m.arity()),
                infer::<M>,
                gather_kernel,
            )
        }
        .member(Member::Gather(m))
        .grad(grad::gather)
        .on_gpu(gpu::gather::gather)
    }
    static OPS: &[OpDef] = &[
        def::<0>(),
        def::<1>(),
        def::<2>(),
        def::<3>(),
        def::<4>(),
        def::<5>(),
        def::<6>(),
        def::<7>(),
        def::<8>(),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_gather",
                Arity::Exactly(2),
                infer_backward,
                backward_kernel,
            )
        }
        .on_gpu(gpu::gather::backward_gather),
    ];
    OPS
}

#[cfg(test)]
mod tests;
