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

use super::permute::permute;
use super::{norm_axes, times, Arity, Attrs, OpDef, TensorRef, POSITIVE_INT};
use crate::error::{invalid, NdError, Result};
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// Row-major strides of a dense `shape`, in elements.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// repeat's `repeats` (0 repeats leaves an empty array, as in MXNet).
fn repeats(op: &str, attrs: &Attrs) -> Result<usize> {
    attrs.count(op, "repeats", None, 0..=i32::MAX as u32)
}

fn positive(op: &str, key: &str, v: i64) -> Result<usize> {
    if v < 1 {
        return Err(invalid(op, format!("{key}={v} is not a positive integer")));
    }
    Ok(v as usize)
}

fn shape_err(op: &str, arg: &str, found: &[usize], expected: String) -> NdError {
    NdError::Shape {
        op: op.into(),
        arg: arg.into(),
        found: found.to_vec(),
        expected,
    }
}

/// The output shape of `op` for its inputs' shapes.
fn out_shape(op: &str, attrs: &Attrs, s: &[Vec<usize>]) -> Result<Vec<usize>> {
    let x = &s[0];
    Ok(match op {
        "broadcast_to" => {
            let want = attrs
                .ints(op, "shape")?
                .ok_or_else(|| invalid(op, "attribute shape is required"))?;
            if want.len() != x.len() {
                return Err(shape_err(
                    op,
                    "data",
                    x,
                    format!("{} dimensions", want.len()),
                ));
            }
            // 0 keeps the input's size.
            x.iter()
                .zip(&want)
                .map(|(&n, &w)| if w == 0 { n } else { w.max(0) as usize })
                .collect()
        }
        "broadcast_axis" => {
            let axes = attrs.ints(op, "axis")?.unwrap_or_default();
            let sizes = attrs.ints(op, "size")?.unwrap_or_default();
            if axes.len() != sizes.len() {
                return Err(invalid(
                    op,
                    format!("axis {axes:?} and size {sizes:?} differ in length"),
                ));
            }
            let mut out = x.clone();
            for (a, n) in norm_axes(op, &axes, x.len())?.into_iter().zip(sizes) {
                out[a] = positive(op, "size", n)?;
            }
            out
        }
        "broadcast_like" => {
            let rhs = &s[1];
            if rhs.len() != x.len() {
                return Err(shape_err(
                    op,
                    "rhs",
                    rhs,
                    format!("{} dimensions like lhs", x.len()),
                ));
            }
            match (attrs.ints(op, "lhs_axes")?, attrs.ints(op, "rhs_axes")?) {
                (None, None) => rhs.clone(),
                (Some(la), Some(ra)) if la.len() == ra.len() => {
                    let mut out = x.clone();
                    let ra = norm_axes(op, &ra, rhs.len())?;
                    for (l, r) in norm_axes(op, &la, x.len())?.into_iter().zip(ra) {
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
        "tile" => {
            let reps = attrs
                .ints(op, "reps")?
                .ok_or_else(|| invalid(op, "attribute reps is required"))?;
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
        "repeat" => {
            let r = repeats(op, attrs)?;
            match attrs.ints(op, "axis")?.and_then(|v| v.first().copied()) {
                None => vec![times(op, x.iter().product(), r)?],
                Some(a) => {
                    let a = norm_axes(op, &[a], x.len())?[0];
                    let mut out = x.clone();
                    out[a] = times(op, out[a], r)?;
                    out
                }
            }
        }
        "reverse" => {
            norm_axes(op, &attrs.ints(op, "axis")?.unwrap_or_default(), x.len())?;
            x.clone()
        }
        "SwapAxis" => {
            let (a, b) = swapped(op, attrs, x.len())?;
            let mut out = x.clone();
            out.swap(a, b);
            out
        }
        "Pad" => {
            let widths = pad_widths(op, attrs, x.len())?;
            x.iter().zip(&widths).map(|(n, (b, a))| n + b + a).collect()
        }
        "UpSampling" => {
            upsampling_check(op, attrs, x)?;
            let k = attrs.count(op, "scale", None, POSITIVE_INT)?;
            let mut out = x.clone();
            out[2] = times(op, out[2], k)?;
            out[3] = times(op, out[3], k)?;
            out
        }
        "slice_like" => {
            let like = &s[1];
            if like.len() != x.len() {
                return Err(shape_err(
                    op,
                    "shape_like",
                    like,
                    format!("{} dimensions like data", x.len()),
                ));
            }
            let axes = match attrs.ints(op, "axes")? {
                Some(a) if !a.is_empty() => norm_axes(op, &a, x.len())?,
                _ => (0..x.len()).collect(),
            };
            let mut out = x.clone();
            for a in axes {
                if like[a] > x[a] {
                    return Err(shape_err(
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
        other => return Err(invalid(other, "is not a gather op")),
    })
}

fn swapped(op: &str, attrs: &Attrs, ndim: usize) -> Result<(usize, usize)> {
    let axis = |key| attrs.int(op, key, Some(0), super::C_INT);
    let (a, b) = (axis("dim1")?, axis("dim2")?);
    let v = norm_axes(op, &[a, b], ndim)?;
    Ok((v[0], v[1]))
}

/// Pad's (before, after) per axis from `pad_width`, two per axis.
fn pad_widths(op: &str, attrs: &Attrs, ndim: usize) -> Result<Vec<(usize, usize)>> {
    let w = attrs
        .ints_in(op, "pad_width", 0..=i64::from(i32::MAX))?
        .ok_or_else(|| invalid(op, "attribute pad_width is required"))?;
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

fn upsampling_check(op: &str, attrs: &Attrs, x: &[usize]) -> Result<()> {
    match attrs.get("sample_type") {
        Some("nearest") => {}
        other => {
            return Err(invalid(
                op,
                format!(
                "sample_type {other:?}: only nearest is supported (bilinear is a Deconvolution)"
            ),
            ))
        }
    }
    if x.len() != 4 {
        return Err(shape_err(op, "data", x, "(n, c, h, w)".into()));
    }
    Ok(())
}

/// Which input index an output index reads along one axis (`None`: padding). A closed set of
/// shapes rather than a closure, so that a long axis can be cut into runs of alike reads
/// without visiting its indices (see [`Index::run`]).
#[derive(Clone, Copy, Debug)]
enum Index {
    /// `i`: an axis kept as it is.
    Same,
    /// `0`: a broadcast axis, or an axis the input lacks (tile's leading ones).
    Zero,
    /// `i % n`: a tiled axis of `n`.
    Wrap(usize),
    /// `i / r`: each index repeated `r` times (repeat, UpSampling).
    Div(usize),
    /// `n - 1 - i`: a reversed axis of `n`.
    Rev(usize),
    /// `i - before` inside an axis of `n`; outside it, as `mode` says.
    Pad {
        n: usize,
        before: usize,
        mode: PadMode,
    },
}

/// What Pad reads outside its input.
#[derive(Clone, Copy, Debug)]
enum PadMode {
    /// Nothing: the constant.
    Constant,
    /// The edge element.
    Edge,
    /// Mirrored about the edge elements, which are not repeated.
    Reflect,
}

impl Index {
    /// The input index read at `i`. (An index past the axis, from shapes that do not belong
    /// together, comes out past it too, for [`AxisRule::read`] to refuse.)
    #[inline]
    fn at(self, i: usize) -> Option<usize> {
        match self {
            Index::Same => Some(i),
            Index::Zero => Some(0),
            Index::Wrap(n) => Some(i % n),
            Index::Div(r) => Some(i / r),
            Index::Rev(n) => Some(n.wrapping_sub(i + 1)),
            Index::Pad { n, before, mode } => {
                let j = i as i64 - before as i64;
                let n = n as i64;
                let k = match mode {
                    _ if (0..n).contains(&j) => j,
                    PadMode::Constant => return None,
                    // An empty axis has no edge: index 0 then reads past it.
                    PadMode::Edge => j.clamp(0, (n - 1).max(0)),
                    PadMode::Reflect if n <= 1 => 0,
                    PadMode::Reflect => {
                        let period = 2 * (n - 1);
                        let m = j.rem_euclid(period);
                        if m < n {
                            m
                        } else {
                            period - m
                        }
                    }
                };
                Some(k as usize)
            }
        }
    }

    /// The run that starts at index `i` and takes at most `rest` indices: what it reads (input
    /// indices, not offsets) and its length, at least 1. Runs need not be the longest
    /// possible, only read what [`Index::at`] says, index by index.
    fn run(self, i: usize, rest: usize) -> (Read, usize) {
        let (read, len) = match self {
            Index::Same => (Read::Up(i), rest),
            Index::Zero => (Read::Same(0), rest),
            Index::Wrap(n) => (Read::Up(i % n), n - i % n),
            Index::Div(r) => (Read::Same(i / r), r - i % r),
            Index::Rev(n) => (Read::Down(n.wrapping_sub(i + 1)), rest),
            Index::Pad { n, before, mode } => {
                let j = i as i64 - before as i64;
                let n = n as i64;
                let (read, len) = match mode {
                    _ if (0..n).contains(&j) => (Read::Up(j as usize), n - j),
                    // Before the input up to its first element; after it, to the row's end.
                    PadMode::Constant if j < 0 => (Read::Pad, -j),
                    PadMode::Constant => (Read::Pad, i64::MAX),
                    PadMode::Edge if j < 0 => (Read::Same(0), -j),
                    PadMode::Edge => (Read::Same((n - 1).max(0) as usize), i64::MAX),
                    PadMode::Reflect if n <= 1 => (Read::Same(0), i64::MAX),
                    PadMode::Reflect => {
                        // Up from 0 to n - 2, then down from n - 1 to 1, and again.
                        let period = 2 * (n - 1);
                        match j.rem_euclid(period) {
                            m if m < n - 1 => (Read::Up(m as usize), n - 1 - m),
                            m => (Read::Down((period - m) as usize), period - m),
                        }
                    }
                };
                (read, len as usize)
            }
        };
        (read, len.min(rest))
    }

    /// Whether no two of an axis's `len` indices read the same input index.
    fn injective(self, len: usize) -> bool {
        match self {
            Index::Same | Index::Rev(_) => true,
            Index::Zero => len <= 1,
            Index::Wrap(n) => len <= n,
            Index::Div(r) => r == 1 || len <= 1,
            Index::Pad { n, before, mode } => {
                matches!(mode, PadMode::Constant) || before == 0 && len <= n
            }
        }
    }

    /// At least as many runs as [`Index::run`] cuts an axis of `len` into, from index 0,
    /// without cutting it.
    fn most_runs(self, len: usize) -> usize {
        match self {
            Index::Same | Index::Zero | Index::Rev(_) => 1,
            Index::Wrap(n) | Index::Div(n) => len.div_ceil(n),
            Index::Pad {
                mode: PadMode::Reflect,
                n,
                ..
            } if n > 1 => len.div_ceil(n - 1) + 2,
            // Before, inside and after the input.
            Index::Pad { .. } => 3,
        }
    }
}

/// One output axis of a gather: the input axis it walks (`None`: none, as tile's leading axes,
/// which read offset 0), its length, and per index along it the input index it reads. A rule
/// rather than a list, so that each consumer lays out only what it needs: the CPU kernels one
/// compact offset per index or a few runs, the GPU's tables the indices.
struct AxisRule {
    from: Option<usize>,
    len: usize,
    index: Index,
}

/// A gather as axis rules: the input's shape as the rules read it (repeat without an axis reads
/// the input flattened) and one [`AxisRule`] per output axis. Every input axis is walked by
/// exactly one output axis, so an input element's readers are the product of its indices'
/// preimages (what the GPU's gradient kernel enumerates).
struct Rules {
    input: Vec<usize>,
    axes: Vec<AxisRule>,
}

impl AxisRule {
    /// The axis cut into runs of alike reads, in order (see [`Index::run`]).
    fn runs(&self) -> impl Iterator<Item = Run> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let (read, len) = self.index.run(at, (at < self.len).then(|| self.len - at)?);
            at += len;
            Some(Run {
                at: at - len,
                len,
                read,
            })
        })
    }

    /// The input index read at `i`, refused when past the end of the axis it walks (shapes that
    /// do not belong together; checked at bind, so only a kernel handed other shapes sees it).
    #[inline]
    fn read(&self, op: &str, input: &[usize], i: usize) -> Result<Option<usize>> {
        let j = self.index.at(i);
        let size = self.from.map_or(1, |a| input[a]);
        match j {
            Some(j) if j >= size => Err(self.past(op, i, j, size)),
            _ => Ok(j),
        }
    }

    #[cold]
    fn past(&self, op: &str, i: usize, j: usize, size: usize) -> NdError {
        match self.from {
            Some(a) => invalid(
                op,
                format!("index {i} of an output axis reads past input axis {a}, of size {size}"),
            ),
            None => invalid(op, format!("index {i} of a new axis reads {j}")),
        }
    }
}

/// The rules of the op's gather from data of shape `x` into an output of shape `out` (checked
/// by `out_shape` for a forward, by [`check_backward`] for a gradient).
fn rules(op: &str, attrs: &Attrs, x: &[usize], out: &[usize]) -> Result<Rules> {
    // Output axis `d` walking input axis `a` through `index`.
    let rule = |d: usize, a: usize, index: Index| AxisRule {
        from: Some(a),
        len: out[d],
        index,
    };
    let same = |d: usize| rule(d, d, Index::Same);
    let mut input = x.to_vec();
    let axes = match op {
        "broadcast_to" | "broadcast_axis" | "broadcast_like" => {
            broadcastable(op, x, out)?;
            (0..out.len())
                .map(|d| match x[d] == out[d] {
                    true => same(d),
                    false => rule(d, d, Index::Zero),
                })
                .collect()
        }
        "tile" => {
            // Leading axes the input lacks read nothing (offset 0).
            let lead = out.len() - x.len();
            (0..out.len())
                .map(|d| match d.checked_sub(lead) {
                    None => AxisRule {
                        from: None,
                        len: out[d],
                        index: Index::Zero,
                    },
                    Some(a) => rule(d, a, Index::Wrap(x[a].max(1))),
                })
                .collect()
        }
        "repeat" => {
            // An empty output reads nothing, so 0 repeats needs no rule of its own.
            let r = repeats(op, attrs)?.max(1);
            match attrs.ints(op, "axis")?.and_then(|v| v.first().copied()) {
                // Flattened: the one output axis walks the contiguous input.
                None => {
                    input = vec![x.iter().product()];
                    vec![rule(0, 0, Index::Div(r))]
                }
                Some(a) => {
                    let a = norm_axes(op, &[a], x.len())?[0];
                    (0..out.len())
                        .map(|d| match d == a {
                            true => rule(d, d, Index::Div(r)),
                            false => same(d),
                        })
                        .collect()
                }
            }
        }
        "reverse" => {
            let axes = norm_axes(op, &attrs.ints(op, "axis")?.unwrap_or_default(), x.len())?;
            (0..out.len())
                .map(|d| match axes.contains(&d) {
                    true => rule(d, d, Index::Rev(x[d])),
                    false => same(d),
                })
                .collect()
        }
        "SwapAxis" => {
            let (a, b) = swapped(op, attrs, x.len())?;
            (0..out.len())
                .map(|d| {
                    let from = if d == a {
                        b
                    } else if d == b {
                        a
                    } else {
                        d
                    };
                    rule(d, from, Index::Same)
                })
                .collect()
        }
        "Pad" => {
            let widths = pad_widths(op, attrs, x.len())?;
            let mode = match attrs.get("mode").unwrap_or("constant") {
                "edge" => PadMode::Edge,
                "reflect" => PadMode::Reflect,
                _ => PadMode::Constant,
            };
            (0..out.len())
                .map(|d| {
                    let (n, before) = (x[d], widths[d].0);
                    rule(d, d, Index::Pad { n, before, mode })
                })
                .collect()
        }
        "UpSampling" => {
            let k = attrs.count(op, "scale", None, POSITIVE_INT)?;
            (0..out.len())
                .map(|d| match d >= 2 {
                    true => rule(d, d, Index::Div(k)),
                    false => same(d),
                })
                .collect()
        }
        "slice_like" => (0..out.len()).map(same).collect(),
        other => return Err(invalid(other, "is not a gather op")),
    };
    Ok(Rules { input, axes })
}

/// An input offset as the CPU kernels keep it per output index: `u32` where the input has fewer
/// than `u32::MAX` elements (nearly always), `usize` otherwise; the type's largest value marks
/// padding. A map of an axis of `n` indices then takes `4n` bytes, where the output's own
/// elements (f32) take `4n` times the other axes' sizes.
trait Offset: Copy {
    const PAD: Self;
    /// `o`, known to be below the input's element count.
    fn new(o: usize) -> Self;
    fn get(self) -> Option<usize>;
}

impl Offset for u32 {
    const PAD: u32 = u32::MAX;
    fn new(o: usize) -> u32 {
        o as u32
    }
    #[inline]
    fn get(self) -> Option<usize> {
        (self != Self::PAD).then_some(self as usize)
    }
}

impl Offset for usize {
    const PAD: usize = usize::MAX;
    fn new(o: usize) -> usize {
        o
    }
    #[inline]
    fn get(self) -> Option<usize> {
        (self != Self::PAD).then_some(self)
    }
}

/// How the CPU kernels walk a gather's output: row by row along the last axis, each row
/// starting at the input offset its other indices add up to (`outer`, one offset per index
/// along each axis but the last), and reading along the row as `row` says.
struct Layout<O> {
    outer: Vec<Vec<O>>,
    row_len: usize,
    row: Row<O>,
}

/// What a row reads, from its first element's input offset.
enum Row<O> {
    /// A few runs of alike reads (copies, fills, reversed copies), when the rule's bound on
    /// their number ([`Index::most_runs`]) is at most a quarter of the row's length...
    Runs(Vec<Run>),
    /// ...or else one offset per element (short runs, as a flattened repeat's runs of two; or
    /// a strided row, which only SwapAxis makes, and whose kernels take [`Plan::Permute`]).
    Offsets(Vec<O>),
}

/// How a CPU kernel moves a gather's elements: a gather that only permutes its input's axes
/// (SwapAxis; slice_like or a broadcast to the same shape) is a transpose, which
/// [`permute`]'s tiles do faster than walking offsets; output axis `d` is input axis
/// `axes[d]`. Any other walks its [`OffsetMaps`].
enum Plan {
    Permute(Vec<usize>),
    Maps(OffsetMaps),
}

/// [`Layout`] in the narrowest offset type that holds the input's offsets.
enum OffsetMaps {
    Narrow(Layout<u32>),
    Wide(Layout<usize>),
}

impl Rules {
    /// Whether every input element is read by one output element at most (a gradient then
    /// needs no sums).
    fn injective(&self) -> bool {
        self.axes.iter().all(|a| a.index.injective(a.len))
    }

    /// How the CPU kernels move the elements (see [`Plan`]).
    fn plan(&self, op: &str) -> Result<Plan> {
        // Each output axis reads one input axis whole, in order.
        let permutation = self.axes.iter().map(|a| match (a.index, a.from) {
            (Index::Same, Some(f)) if a.len == self.input[f] => Some(f),
            _ => None,
        });
        match permutation.collect::<Option<Vec<_>>>() {
            Some(axes) => Ok(Plan::Permute(axes)),
            None => self.offset_maps(op).map(Plan::Maps),
        }
    }

    /// The CPU kernels' layout (see [`OffsetMaps`]).
    fn offset_maps(&self, op: &str) -> Result<OffsetMaps> {
        match self.input.iter().product::<usize>() < u32::MAX as usize {
            true => self.layout(op).map(OffsetMaps::Narrow),
            false => self.layout(op).map(OffsetMaps::Wide),
        }
    }

    fn layout<O: Offset>(&self, op: &str) -> Result<Layout<O>> {
        let offset = |stride: usize, j: Option<usize>| j.map_or(O::PAD, |j| O::new(j * stride));
        let st = strides(&self.input);
        let stride = |a: &AxisRule| a.from.map_or(0, |f| st[f]);
        let Some((last, outer)) = self.axes.split_last() else {
            // A scalar: one row of one element, at offset 0.
            let row = Row::Offsets(vec![O::new(0)]);
            return Ok(Layout {
                outer: Vec::new(),
                row_len: 1,
                row,
            });
        };
        let outer = outer
            .iter()
            .map(|a| self.lay_out_axis(op, a, |j| offset(stride(a), j)))
            .collect::<Result<_>>()?;
        let row = match self.row_runs(op, last, stride(last))? {
            Some(runs) => Row::Runs(runs),
            None => Row::Offsets(self.lay_out_axis(op, last, |j| offset(stride(last), j))?),
        };
        Ok(Layout {
            outer,
            row_len: last.len,
            row,
        })
    }

    /// `f(the index read)` for each index along one output axis.
    fn lay_out_axis<T>(
        &self,
        op: &str,
        a: &AxisRule,
        f: impl Fn(Option<usize>) -> T,
    ) -> Result<Vec<T>> {
        let mut list = index_list(op, a.len)?;
        for i in 0..a.len {
            list.push(f(a.read(op, &self.input, i)?));
        }
        Ok(list)
    }

    /// The runs of an axis the rows walk with input stride `stride`, when they read
    /// consecutive offsets (stride 1, or no input axis) and are few enough (see [`Row`]).
    fn row_runs(&self, op: &str, a: &AxisRule, stride: usize) -> Result<Option<Vec<Run>>> {
        if a.from.is_some() && stride != 1 || a.index.most_runs(a.len) > a.len / 4 {
            return Ok(None);
        }
        a.runs()
            .map(|r| self.check(op, a, r))
            .collect::<Result<_>>()
            .map(Some)
    }

    /// `run`, once it is known to read inside the input axis its rule walks.
    fn check(&self, op: &str, a: &AxisRule, run: Run) -> Result<Run> {
        let size = a.from.map_or(1, |f| self.input[f]);
        let inside = match run.read {
            Read::Pad => true,
            Read::Same(j) => j < size,
            Read::Up(j) => j.checked_add(run.len).is_some_and(|end| end <= size),
            Read::Down(j) => j < size && run.len <= j + 1,
        };
        if !inside {
            // The index that reads outside, for the error.
            for i in run.at..run.at + run.len {
                a.read(op, &self.input, i)?;
            }
            return Err(invalid(
                op,
                format!(
                    "the {} indices from {} read outside their input axis",
                    run.len, run.at
                ),
            ));
        }
        Ok(run)
    }

    /// Per output axis, `f(the index read)` for each index along it.
    #[cfg(any(feature = "cuda", test))]
    fn lay_out<T>(&self, op: &str, f: impl Fn(Option<usize>) -> T) -> Result<Vec<Vec<T>>> {
        let f = &f;
        self.axes
            .iter()
            .map(|a| self.lay_out_axis(op, a, f))
            .collect()
    }
}

/// An empty list with room for the `n` indices of one output axis, refused when that memory
/// cannot be had: an output that fits may still leave no room for a long axis's list (on the
/// GPU, 8 bytes an index and more for a gradient's buckets), and the op then fails with this
/// error instead of aborting the process.
fn index_list<T>(op: &str, n: usize) -> Result<Vec<T>> {
    let mut list = Vec::new();
    list.try_reserve_exact(n).map_err(|_| {
        invalid(
            op,
            format!("cannot allocate the index list of an output axis of {n}"),
        )
    })?;
    Ok(list)
}

/// One output axis of a gather as the GPU's tables take it: the input axis it walks and the
/// input index each index reads (`None`: padding).
#[cfg(any(feature = "cuda", test))]
pub(crate) struct Walk {
    pub(crate) from: Option<usize>,
    pub(crate) index: Vec<Option<usize>>,
}

/// A gather's [`Rules`] laid out as index lists (see [`Walk`]).
#[cfg(any(feature = "cuda", test))]
pub(crate) struct Walks {
    pub(crate) input: Vec<usize>,
    pub(crate) axes: Vec<Walk>,
}

/// The op's gather from data of shape `x` into an output of shape `out` as index lists.
#[cfg(any(feature = "cuda", test))]
pub(crate) fn walks(op: &str, attrs: &Attrs, x: &[usize], out: &[usize]) -> Result<Walks> {
    let rules = rules(op, attrs, x, out)?;
    let lists = rules.lay_out(op, |j| j)?;
    let axes = rules.axes.iter().zip(lists);
    Ok(Walks {
        axes: axes
            .map(|(a, index)| Walk {
                from: a.from,
                index,
            })
            .collect(),
        input: rules.input,
    })
}

/// Checks the op's own attributes beyond shapes (modes, values).
fn check_attrs(op: &str, attrs: &Attrs) -> Result<()> {
    if op == "Pad" {
        match attrs.get("mode").unwrap_or("constant") {
            "constant" | "edge" | "reflect" => {}
            other => {
                return Err(invalid(
                    op,
                    format!("mode {other:?} is not constant, edge or reflect"),
                ))
            }
        }
        attrs.f64(op, "constant_value", Some(0.0))?;
    }
    if op == "UpSampling" {
        let n = attrs.f64(op, "num_args", Some(1.0))?;
        if n != 1.0 {
            return Err(invalid(
                op,
                format!("num_args={n}: only one input is supported"),
            ));
        }
    }
    Ok(())
}

/// Whether data of shape `x` broadcasts to `out` (the same rank): each axis 1 or already `out`'s.
fn broadcastable(op: &str, x: &[usize], out: &[usize]) -> Result<()> {
    match (0..out.len()).find(|&d| x[d] != out[d] && x[d] != 1) {
        Some(d) => Err(shape_err(
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
pub(super) fn infer_gather(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    check_attrs(op, attrs)?;
    let out = out_shape(op, attrs, s)?;
    if matches!(op, "broadcast_to" | "broadcast_axis" | "broadcast_like") {
        broadcastable(op, &s[0], &out)?;
    }
    if op == "Pad" && attrs.get("mode").unwrap_or("constant") == "reflect" {
        let widths = pad_widths(op, attrs, s[0].len())?;
        if let Some(a) = (0..s[0].len()).find(|&a| widths[a].0.max(widths[a].1) >= s[0][a].max(1)) {
            return Err(shape_err(
                op,
                "pad_width",
                &s[0],
                format!("reflect widths below the size along axis {a}"),
            ));
        }
    }
    Ok((vec![out], vec![d[0]]))
}

impl OffsetMaps {
    /// `y[i] = x[offset of i]`, or `pad` where output element `i` is padding.
    fn gather<T: Copy>(&self, x: &[T], y: &mut [T], pad: T) {
        match self {
            OffsetMaps::Narrow(l) => l.gather(x, y, pad),
            OffsetMaps::Wide(l) => l.gather(x, y, pad),
        }
    }

    /// `put(&mut acc[offset of i], g[i])` for every output element `i` that is not padding,
    /// in order.
    fn scatter<T: Copy, A>(&self, g: &[T], acc: &mut [A], put: impl Fn(&mut A, T)) {
        match self {
            OffsetMaps::Narrow(l) => l.scatter(g, acc, put),
            OffsetMaps::Wide(l) => l.scatter(g, acc, put),
        }
    }
}

impl<O: Offset> Layout<O> {
    fn gather<T: Copy>(&self, x: &[T], y: &mut [T], pad: T) {
        self.for_each_row(|i0, base| {
            let row = &mut y[i0..i0 + self.row_len];
            let Some(b) = base else {
                return row.fill(pad);
            };
            let x = &x[b..];
            let runs = match &self.row {
                Row::Runs(runs) => runs,
                Row::Offsets(map) => {
                    for (v, &o) in row.iter_mut().zip(map) {
                        *v = match o.get() {
                            Some(o) => x[o],
                            None => pad,
                        };
                    }
                    return;
                }
            };
            for r in runs {
                let out = &mut row[r.at..r.at + r.len];
                match r.read {
                    Read::Pad => out.fill(pad),
                    Read::Same(o) => out.fill(x[o]),
                    Read::Up(o) => out.copy_from_slice(&x[o..o + r.len]),
                    Read::Down(o) => {
                        let src = &x[o + 1 - r.len..=o];
                        out.iter_mut()
                            .zip(src.iter().rev())
                            .for_each(|(v, &s)| *v = s);
                    }
                }
            }
        });
    }

    fn scatter<T: Copy, A>(&self, g: &[T], acc: &mut [A], put: impl Fn(&mut A, T)) {
        self.for_each_row(|i0, base| {
            let Some(b) = base else { return };
            let (g, acc) = (&g[i0..i0 + self.row_len], &mut acc[b..]);
            let runs = match &self.row {
                Row::Runs(runs) => runs,
                Row::Offsets(map) => {
                    for (&v, &o) in g.iter().zip(map) {
                        if let Some(o) = o.get() {
                            put(&mut acc[o], v);
                        }
                    }
                    return;
                }
            };
            for r in runs {
                let g = &g[r.at..r.at + r.len];
                match r.read {
                    Read::Pad => {}
                    // One by one, in output order, as the element loop would.
                    Read::Same(o) => g.iter().for_each(|&v| put(&mut acc[o], v)),
                    Read::Up(o) => {
                        let dst = &mut acc[o..o + r.len];
                        dst.iter_mut().zip(g).for_each(|(a, &v)| put(a, v));
                    }
                    Read::Down(o) => {
                        let dst = &mut acc[o + 1 - r.len..=o];
                        dst.iter_mut().rev().zip(g).for_each(|(a, &v)| put(a, v));
                    }
                }
            }
        });
    }

    /// Calls `f(index of the row's first element, the input offset of the row's first element
    /// (None: padding))` for every row of the output, in order; the kernels run their inner
    /// loops over the row.
    fn for_each_row(&self, mut f: impl FnMut(usize, Option<usize>)) {
        let outer = &self.outer;
        if self.row_len == 0 || outer.iter().any(Vec::is_empty) {
            return;
        }
        let mut idx = vec![0usize; outer.len()];
        let mut i = 0;
        loop {
            let base =
                (0..outer.len()).try_fold(0, |acc, d| outer[d][idx[d]].get().map(|o| acc + o));
            f(i, base);
            i += self.row_len;
            // Advance the odometer over the axes before the last.
            let mut d = outer.len();
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < outer[d].len() {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
}

/// What a run of a row reads, from the input offset of its first element (from the input
/// index, as [`Index::run`] gives it).
#[derive(Clone, Copy, Debug)]
enum Read {
    /// Padding.
    Pad,
    /// One element, again and again (a broadcast or repeated axis).
    Same(usize),
    /// Consecutive elements, upwards (an unchanged or tiled axis, Pad's middle)...
    Up(usize),
    /// ...or downwards (a reversed axis).
    Down(usize),
}

/// A stretch of a row whose elements read alike (see [`Read`]), from index `at`.
struct Run {
    at: usize,
    len: usize,
    read: Read,
}

pub(super) fn gather_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let e = |e: NdError| e.to_string();
    let rules = rules(op, attrs, &ins[0].shape, &outs[0].shape).map_err(e)?;
    let fill = attrs.f64(op, "constant_value", Some(0.0)).map_err(e)?;
    let plan = rules.plan(op).map_err(e)?;
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
    let fwd = forward_op(op, attrs)?;
    check_backward(fwd, attrs, &s[1], &s[0])?;
    // The gradient is the data's, in the data's dtype.
    super::same_dtypes(op, d)?;
    Ok((vec![s[1].clone()], vec![d[0]]))
}

/// Checks that an output gradient of shape `ograd` is what `fwd` makes of data of shape `data`,
/// so that its rules read only inside the data.
fn check_backward(fwd: &str, attrs: &Attrs, data: &[usize], ograd: &[usize]) -> Result<()> {
    check_attrs(fwd, attrs)?;
    let fits = match fwd {
        // Their output's shape comes from a second input, which the gradient does not see.
        "broadcast_like" => data.len() == ograd.len() && broadcastable(fwd, data, ograd).is_ok(),
        "slice_like" => data.len() == ograd.len() && ograd.iter().zip(data).all(|(g, x)| g <= x),
        _ => out_shape(fwd, attrs, &[data.to_vec()])? == ograd,
    };
    match fits {
        true => Ok(()),
        false => Err(shape_err(
            fwd,
            "ograd",
            ograd,
            format!("the shape {fwd} makes of data {data:?}"),
        )),
    }
}

fn forward_op<'a>(op: &str, attrs: &'a Attrs) -> Result<&'a str> {
    attrs
        .get("__fwd__")
        .ok_or_else(|| invalid(op, "attribute __fwd__ (the forward op) is required"))
}

fn backward_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let e = |e: NdError| e.to_string();
    let fwd = forward_op(op, attrs).map_err(e)?;
    check_backward(fwd, attrs, &outs[0].shape, &ins[0].shape).map_err(e)?;
    let rules = rules(fwd, attrs, &outs[0].shape, &ins[0].shape).map_err(e)?;
    let plan = rules.plan(fwd).map_err(e)?;
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

// ---- pick(data, index): one element per lane along an axis ------------------------------------

/// pick's axis, whether it keeps it, and its layout: (outer, lanes, inner) around the axis.
pub(crate) fn pick_layout(
    op: &str,
    attrs: &Attrs,
    x: &[usize],
) -> Result<(usize, bool, [usize; 3])> {
    let a = attrs
        .ints(op, "axis")?
        .and_then(|v| v.first().copied())
        .unwrap_or(-1);
    let a = norm_axes(op, &[a], x.len())?[0];
    let keep = attrs.bool(op, "keepdims", false)?;
    let dims = [x[..a].iter().product(), x[a], x[a + 1..].iter().product()];
    Ok((a, keep, dims))
}

/// The lane index picked: `mode=clip` clamps, `wrap` wraps around.
fn pick_index(v: f64, lanes: usize, wrap: bool) -> usize {
    let n = lanes.max(1) as i64;
    let i = v as i64;
    if wrap {
        i.rem_euclid(n) as usize
    } else {
        i.clamp(0, n - 1) as usize
    }
}

pub(crate) fn pick_wrap(op: &str, attrs: &Attrs) -> Result<bool> {
    match attrs.get("mode").unwrap_or("clip") {
        "clip" => Ok(false),
        "wrap" => Ok(true),
        other => Err(invalid(op, format!("mode {other:?} is not clip or wrap"))),
    }
}

fn infer_pick(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    pick_wrap(op, attrs)?;
    let (a, keep, _) = pick_layout(op, attrs, &s[0])?;
    let mut out = s[0].clone();
    out.remove(a);
    let mut kept = s[0].clone();
    kept[a] = 1;
    if s[1] != out && s[1] != kept {
        return Err(shape_err(
            op,
            "index",
            &s[1],
            format!("{out:?} (data {:?} without axis {a})", s[0]),
        ));
    }
    Ok((vec![if keep { kept } else { out }], vec![d[0]]))
}

/// For each output element of pick, the offset in data of the element it picks.
fn pick_sources(
    op: &str,
    attrs: &Attrs,
    index: &TensorRef,
    data: &[usize],
) -> std::result::Result<Vec<usize>, String> {
    let e = |e: NdError| e.to_string();
    let (_, _, [_, lanes, inner]) = pick_layout(op, attrs, data).map_err(e)?;
    let wrap = pick_wrap(op, attrs).map_err(e)?;
    let inner = inner.max(1);
    if lanes == 0 && index.len() > 0 {
        return Err(format!("{op}: cannot pick from an empty axis"));
    }
    Ok(crate::with_dtype!(index.dtype, I => {
        // SAFETY: read access to the index.
        unsafe { index.slice::<I>() }
            .iter()
            .enumerate()
            .map(|(k, v)| ((k / inner) * lanes + pick_index(v.to_f64(), lanes, wrap)) * inner + k % inner)
            .collect()
    }))
}

fn pick_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let sources = pick_sources(op, attrs, &ins[1], &ins[0].shape)?;
    read_from(&ins[0], &outs[0], &sources);
    Ok(())
}

/// `_backward_pick(ograd, index, data)`: each output gradient element into the element picked.
fn infer_pick_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let fwd = (&[s[2].clone(), s[1].clone()][..], &[d[2], d[1]][..]);
    super::check_against_forward(op, "pick", attrs, fwd, &[(0, &s[0], d[0])])?;
    Ok((vec![s[2].clone()], vec![d[0]]))
}

fn pick_backward_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let sources = pick_sources(op, attrs, &ins[1], &outs[0].shape)?;
    scatter(&ins[0], &outs[0], &sources);
    Ok(())
}

/// `y[k] = x[sources[k]]`.
fn read_from(x: &TensorRef, y: &TensorRef, sources: &[usize]) {
    crate::with_dtype!(y.dtype, T => {
        // SAFETY: read access to the data, exclusive access to the output (not alias-safe).
        let (x, y) = unsafe { (x.slice::<T>(), y.slice_mut::<T>()) };
        for (y, &j) in y.iter_mut().zip(sources) {
            *y = x[j];
        }
    });
}

/// `dx[sources[k]] = g[k]`, every other element of `dx` zero: the gradient of reading
/// `x[sources[k]]` into element `k` (sources distinct).
fn scatter(g: &TensorRef, dx: &TensorRef, sources: &[usize]) {
    crate::with_dtype!(dx.dtype, T => {
        // SAFETY: read access to the gradient, exclusive access to d data (not alias-safe).
        let (g, dx) = unsafe { (g.slice::<T>(), dx.slice_mut::<T>()) };
        dx.fill(T::default());
        for (g, &j) in g.iter().zip(sources) {
            dx[j] = *g;
        }
    });
}

// ---- SequenceMask(data[, sequence_length]) ------------------------------------------------------

/// Whether SequenceMask uses its lengths, its time axis (0 or 1), and the value it writes.
pub(crate) fn mask_params(op: &str, attrs: &Attrs) -> Result<(bool, usize, f64)> {
    let axis = attrs.f64(op, "axis", Some(0.0))?;
    if axis != 0.0 && axis != 1.0 {
        return Err(invalid(op, format!("axis={axis} is not 0 or 1")));
    }
    Ok((
        attrs.bool(op, "use_sequence_length", false)?,
        axis as usize,
        attrs.float(op, "value", Some(0.0))?,
    ))
}

fn infer_sequence_mask(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let (use_len, axis, _) = mask_params(op, attrs)?;
    let x = &s[0];
    if x.len() < 2 {
        return Err(shape_err(
            op,
            "data",
            x,
            "at least 2 dimensions (time and batch)".into(),
        ));
    }
    if s.len() != 1 + use_len as usize {
        return Err(invalid(
            op,
            format!(
                "takes {} input(s) with use_sequence_length={use_len}, got {}",
                1 + use_len as usize,
                s.len()
            ),
        ));
    }
    let batch = x[1 - axis];
    if use_len && s[1] != [batch] {
        return Err(shape_err(
            op,
            "sequence_length",
            &s[1],
            format!("[{batch}] (data's batch)"),
        ));
    }
    Ok((vec![x.clone()], vec![d[0]]))
}

/// For each element of data shaped `x`, whether it lies past its sequence's length.
fn masked<'a>(axis: usize, x: &'a [usize], lengths: &'a [usize]) -> impl Fn(usize) -> bool + 'a {
    let inner: usize = x[2..].iter().product();
    let (steps, batch) = if axis == 0 {
        (x[0], x[1])
    } else {
        (x[1], x[0])
    };
    move |i: usize| {
        let (a, b) = ((i / inner) / x[1], (i / inner) % x[1]);
        let (t, n) = if axis == 0 { (a, b) } else { (b, a) };
        debug_assert!(t < steps && n < batch);
        t >= lengths[n]
    }
}

fn lengths_of(t: Option<&TensorRef>, x: &[usize], axis: usize) -> Vec<usize> {
    let steps = if axis == 0 { x[0] } else { x[1] };
    match t {
        None => vec![steps; x[1 - axis]],
        Some(t) => crate::with_dtype!(t.dtype, L => {
            // SAFETY: read access to the lengths.
            unsafe { t.slice::<L>() }.iter().map(|v| v.to_f64().max(0.0) as usize).collect()
        }),
    }
}

fn sequence_mask_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let (_, axis, value) = mask_params(op, attrs).map_err(|e| e.to_string())?;
    // Its backward (`_backward_SequenceMask(ograd[, sequence_length])`) masks the gradient
    // with zeros.
    let value = if op == "SequenceMask" { value } else { 0.0 };
    let x = &ins[0];
    let lengths = lengths_of(ins.get(1), &x.shape, axis);
    let past = masked(axis, &x.shape, &lengths);
    crate::with_dtype!(outs[0].dtype, T => {
        let (src, dst) = (x.ptr::<T>(), outs[0].ptr::<T>());
        for i in 0..outs[0].len() {
            // SAFETY: equal lengths; raw pointers tolerate the output being exactly the data.
            unsafe { *dst.add(i) = if past(i) { T::from_f64(value) } else { *src.add(i) } };
        }
    });
    Ok(())
}

/// `(ograd[, sequence_length])`: SequenceMask of the gradient, so its inputs are SequenceMask's.
fn infer_sequence_mask_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    super::check_against_forward(op, "SequenceMask", attrs, (s, d), &[])?;
    Ok((vec![s[0].clone()], vec![d[0]]))
}

// ---- SequenceLast, SequenceReverse -------------------------------------------------------------

/// Data shaped `(steps, batch, inner...)` (axis 0) or `(batch, steps, inner...)` (axis 1): the
/// element of step `t` of sequence `n` at inner position `i`.
#[derive(Clone, Copy)]
struct Steps {
    axis: usize,
    steps: usize,
    batch: usize,
    inner: usize,
}

impl Steps {
    fn of(axis: usize, x: &[usize]) -> Steps {
        let (steps, batch) = if axis == 0 {
            (x[0], x[1])
        } else {
            (x[1], x[0])
        };
        Steps {
            axis,
            steps,
            batch,
            inner: x[2..].iter().product(),
        }
    }

    fn at(self, t: usize, n: usize, i: usize) -> usize {
        let outer = if self.axis == 0 {
            t * self.batch + n
        } else {
            n * self.steps + t
        };
        outer * self.inner + i
    }
}

fn infer_sequence_last(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    infer_sequence_mask(op, attrs, s, d)?;
    let (_, axis, _) = mask_params(op, attrs)?;
    let mut out = s[0].clone();
    out.remove(axis);
    if s[0][axis] == 0 && out.iter().product::<usize>() > 0 {
        return Err(shape_err(
            op,
            "data",
            &s[0],
            "at least one step to take the last of".into(),
        ));
    }
    Ok((vec![out], vec![d[0]]))
}

fn infer_sequence_reverse(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    if mask_params(op, attrs)?.1 != 0 {
        return Err(invalid(
            op,
            "only axis 0 (time first) is supported, as in MXNet",
        ));
    }
    infer_sequence_mask(op, attrs, s, d)
}

/// For each output element, the data element it reads: SequenceLast the last step of its
/// sequence (the first when a length is 0), SequenceReverse the mirror step within its length.
fn sequence_sources(op: &str, st: Steps, lengths: &[usize]) -> Vec<usize> {
    let len = |n: usize| lengths[n].min(st.steps);
    if op.ends_with("SequenceLast") {
        let mut v = Vec::with_capacity(st.batch * st.inner);
        for n in 0..st.batch {
            for i in 0..st.inner {
                v.push(st.at(len(n).max(1) - 1, n, i));
            }
        }
        return v;
    }
    let mut v = vec![0; st.steps * st.batch * st.inner];
    for t in 0..st.steps {
        for n in 0..st.batch {
            let from = if t < len(n) { len(n) - 1 - t } else { t };
            for i in 0..st.inner {
                v[st.at(t, n, i)] = st.at(from, n, i);
            }
        }
    }
    v
}

fn sequence_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let (_, axis, _) = mask_params(op, attrs).map_err(|e| e.to_string())?;
    let x = &ins[0];
    let lengths = lengths_of(ins.get(1), &x.shape, axis);
    let sources = sequence_sources(op, Steps::of(axis, &x.shape), &lengths);
    read_from(x, &outs[0], &sources);
    Ok(())
}

/// `_backward_SequenceLast(ograd, data[, sequence_length])`: each sequence's gradient at its
/// last step, zero elsewhere.
/// `(ograd, data[, sequence_length])`.
fn infer_sequence_last_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    super::check_against_forward(
        op,
        "SequenceLast",
        attrs,
        (&s[1..], &d[1..]),
        &[(0, &s[0], d[0])],
    )?;
    Ok((vec![s[1].clone()], vec![d[0]]))
}

fn sequence_last_backward_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let (_, axis, _) = mask_params(op, attrs).map_err(|e| e.to_string())?;
    let shape = &outs[0].shape;
    let lengths = lengths_of(ins.get(2), shape, axis);
    let sources = sequence_sources(op, Steps::of(axis, shape), &lengths);
    scatter(&ins[0], &outs[0], &sources);
    Ok(())
}

// ---- depth_to_space, space_to_depth -------------------------------------------------------------

pub(crate) fn block_size(op: &str, attrs: &Attrs) -> Result<usize> {
    attrs.count(op, "block_size", None, POSITIVE_INT)
}

/// `depth_to_space` moves blocks of `b * b` channels into `b x b` pixel blocks, `(n, c, h, w)
/// -> (n, c / b², h b, w b)`; `space_to_depth` undoes it.
fn infer_depth_space(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let b = block_size(op, attrs)?;
    let x = &s[0];
    if x.len() != 4 {
        return Err(shape_err(op, "data", x, "(n, c, h, w)".into()));
    }
    let out = if op == "depth_to_space" {
        if !x[1].is_multiple_of(b * b) {
            return Err(shape_err(
                op,
                "data",
                x,
                format!("channels divisible by {}", b * b),
            ));
        }
        vec![x[0], x[1] / (b * b), x[2] * b, x[3] * b]
    } else {
        if !x[2].is_multiple_of(b) || !x[3].is_multiple_of(b) {
            return Err(shape_err(
                op,
                "data",
                x,
                format!("height and width divisible by {b}"),
            ));
        }
        vec![x[0], x[1] * b * b, x[2] / b, x[3] / b]
    };
    Ok((vec![out], vec![d[0]]))
}

/// depth_to_space of a deep array shaped `deep`, as pairs (element of the spread-out array,
/// element of the deep array it holds): `out[n, c, h b + i, w b + j] = x[n, (i b + j) c' + c,
/// h, w]`. space_to_depth is the same pairs read the other way.
fn depth_space_pairs(b: usize, deep: &[usize]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let (n, c, h, w) = (deep[0], deep[1] / (b * b), deep[2], deep[3]);
    let (hb, wb) = (h * b, w * b);
    (0..n * c * hb * wb).map(move |o| {
        let (x, y, ch, s) = (
            o % wb,
            (o / wb) % hb,
            (o / (wb * hb)) % c,
            o / (wb * hb * c),
        );
        let (i, j) = (y % b, x % b);
        let src = ((s * b * b * c + (i * b + j) * c + ch) * h + y / b) * w + x / b;
        (o, src)
    })
}

fn depth_space_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let b = block_size(op, attrs).map_err(|e| e.to_string())?;
    // Element `o` of the spread-out (space) array pairs with element `src` of the deep one.
    let (deep, to_space) = if op == "depth_to_space" {
        (&ins[0].shape, true)
    } else {
        (&outs[0].shape, false)
    };
    let mut sources = vec![0; outs[0].len()];
    for (o, src) in depth_space_pairs(b, deep) {
        if to_space {
            sources[o] = src;
        } else {
            sources[src] = o;
        }
    }
    read_from(&ins[0], &outs[0], &sources);
    Ok(())
}

pub(super) fn ops() -> &'static [OpDef] {
    const fn gather(name: &'static str, aliases: &'static [&'static str], arity: usize) -> OpDef {
        OpDef {
            aliases,
            alias_safe: false,
            // The second input (broadcast_like's rhs, slice_like's shape_like) gives a shape.
            backward_ignores: &[1],
            ..OpDef::new(name, Arity::Exactly(arity), infer_gather, gather_kernel)
        }
    }
    static OPS: &[OpDef] = &[
        gather("broadcast_to", &[], 1),
        gather("broadcast_axis", &["broadcast_axes"], 1),
        gather("broadcast_like", &[], 2),
        gather("tile", &[], 1),
        gather("repeat", &[], 1),
        gather("reverse", &["flip"], 1),
        gather("SwapAxis", &["swapaxes"], 1),
        gather("Pad", &["pad"], 1),
        gather("slice_like", &[], 2),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_gather",
                Arity::Exactly(2),
                infer_backward,
                backward_kernel,
            )
        },
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            ..OpDef::new("pick", Arity::Exactly(2), infer_pick, pick_kernel)
        },
        OpDef {
            inplace: &[(0, 0)],
            backward_ignores: &[0],
            ..OpDef::new(
                "SequenceMask",
                Arity::AtLeast(1),
                infer_sequence_mask,
                sequence_mask_kernel,
            )
        },
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            ..OpDef::new(
                "SequenceLast",
                Arity::AtLeast(1),
                infer_sequence_last,
                sequence_kernel,
            )
        },
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_SequenceLast",
                Arity::AtLeast(2),
                infer_sequence_last_backward,
                sequence_last_backward_kernel,
            )
        },
        // Each the other's gradient.
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            ..OpDef::new(
                "depth_to_space",
                Arity::Exactly(1),
                infer_depth_space,
                depth_space_kernel,
            )
        },
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            ..OpDef::new(
                "space_to_depth",
                Arity::Exactly(1),
                infer_depth_space,
                depth_space_kernel,
            )
        },
        // Its own gradient: reversing twice is the identity.
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            ..OpDef::new(
                "SequenceReverse",
                Arity::AtLeast(1),
                infer_sequence_reverse,
                sequence_kernel,
            )
        },
        OpDef {
            inplace: &[(0, 0)],
            ..OpDef::new(
                "_backward_SequenceMask",
                Arity::AtLeast(1),
                infer_sequence_mask_backward,
                sequence_mask_kernel,
            )
        },
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_pick",
                Arity::Exactly(3),
                infer_pick_backward,
                pick_backward_kernel,
            )
        },
    ];
    OPS
}

/// Whether `op` is one of this module's (its gradient is `_backward_gather`).
pub(crate) fn is_gather(op: &str) -> bool {
    matches!(
        op,
        "broadcast_to"
            | "broadcast_axis"
            | "broadcast_like"
            | "tile"
            | "repeat"
            | "reverse"
            | "SwapAxis"
            | "Pad"
            | "UpSampling"
            | "slice_like"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(op: &str, attrs: Attrs, x: &[usize]) -> (Vec<usize>, Vec<Option<usize>>) {
        let out = out_shape(op, &attrs, &[x.to_vec()]).unwrap();
        let maps = rules(op, &attrs, x, &out).unwrap();
        let maps = maps.offset_maps(op).unwrap();
        (out, read(&maps, x))
    }

    /// What each output element reads: the input's offsets gathered, padding as `None`.
    fn read(maps: &OffsetMaps, x: &[usize]) -> Vec<Option<usize>> {
        let n: usize = x.iter().product();
        let iota: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let mut y = vec![0.0; maps_len(maps)];
        maps.gather(&iota, &mut y, -1.0);
        y.iter()
            .map(|&v| (v >= 0.0).then_some(v as usize))
            .collect()
    }

    fn maps_len(maps: &OffsetMaps) -> usize {
        match maps {
            OffsetMaps::Narrow(l) => l.len(),
            OffsetMaps::Wide(l) => l.len(),
        }
    }

    impl<O> Layout<O> {
        fn len(&self) -> usize {
            self.outer.iter().map(Vec::len).product::<usize>() * self.row_len
        }
    }

    /// A run read index by index is what [`Index::at`] reads there, for every rule shape,
    /// from every start and with rows shorter and longer than the axis.
    #[test]
    fn index_runs_read_what_at_says() {
        let mut rules = vec![Index::Same, Index::Zero];
        for n in 0..6 {
            rules.extend([Index::Wrap(n.max(1)), Index::Div(n.max(1)), Index::Rev(n)]);
            for before in 0..8 {
                for mode in [PadMode::Constant, PadMode::Edge, PadMode::Reflect] {
                    rules.push(Index::Pad { n, before, mode });
                }
            }
        }
        for index in rules {
            for len in 1..24 {
                assert!(
                    AxisRule {
                        from: None,
                        len,
                        index
                    }
                    .runs()
                    .count()
                        <= index.most_runs(len)
                );
                let mut read: Vec<usize> = (0..len).filter_map(|i| index.at(i)).collect();
                let n = read.len();
                read.sort_unstable();
                read.dedup();
                // Pad's output axis holds the input axis (not empty) and its padding.
                let real = match index {
                    Index::Pad { n, before, .. } => n > 0 && len >= before + n,
                    _ => true,
                };
                let distinct = read.len() == n;
                assert!(!real || index.injective(len) == distinct, "{index:?} {len}");
                for start in 0..len {
                    let (read, n) = index.run(start, len - start);
                    assert!((1..=len - start).contains(&n));
                    for k in 0..n {
                        let got = match read {
                            Read::Pad => None,
                            Read::Same(j) => Some(j),
                            Read::Up(j) => Some(j + k),
                            Read::Down(j) => j.checked_sub(k),
                        };
                        let want = index.at(start + k);
                        // A reversed axis read past its end wraps; a run reading below 0
                        // is refused by the same check (see `Rules::check`).
                        if want.is_some_and(|w| w > 1 << 32) {
                            continue;
                        }
                        assert_eq!(got, want, "{index:?}: run {k} from {start} of {len}");
                    }
                }
            }
        }
    }

    #[test]
    fn maps_read_the_elements_numpy_would() {
        let (s, o) = offsets("tile", Attrs::new().with("reps", "(2,)"), &[3]);
        assert_eq!((s, o), (vec![6], [0, 1, 2, 0, 1, 2].map(Some).to_vec()));
        let (s, o) = offsets(
            "repeat",
            Attrs::new().with("repeats", 2).with("axis", 1),
            &[2, 2],
        );
        assert_eq!(
            (s, o),
            (vec![2, 4], [0, 0, 1, 1, 2, 2, 3, 3].map(Some).to_vec())
        );
        let (_, o) = offsets("reverse", Attrs::new().with("axis", "(0,)"), &[3, 1]);
        assert_eq!(o, [2, 1, 0].map(Some).to_vec());
        let (s, o) = offsets(
            "SwapAxis",
            Attrs::new().with("dim1", 0).with("dim2", 1),
            &[2, 3],
        );
        assert_eq!((s, o), (vec![3, 2], [0, 3, 1, 4, 2, 5].map(Some).to_vec()));
        let pad = |mode: &str| {
            let attrs = Attrs::new().with("mode", mode).with("pad_width", "(2, 1)");
            offsets("Pad", attrs, &[3]).1
        };
        assert_eq!(
            pad("constant"),
            vec![None, None, Some(0), Some(1), Some(2), None]
        );
        assert_eq!(pad("edge"), [0, 0, 0, 1, 2, 2].map(Some).to_vec());
        assert_eq!(pad("reflect"), [2, 1, 0, 1, 2, 1].map(Some).to_vec());
    }

    /// Every output element's offset from the walks' index lists, one element at a time.
    fn reference(w: &Walks) -> Vec<Option<usize>> {
        let st = strides(&w.input);
        let dims: Vec<usize> = w.axes.iter().map(|a| a.index.len()).collect();
        let n: usize = dims.iter().product();
        (0..n)
            .map(|mut i| {
                let mut at = 0;
                for (a, &len) in w.axes.iter().zip(&dims).rev() {
                    let j = a.index[i % len]?;
                    at += a.from.map_or(0, |f| j * st[f]);
                    i /= len;
                }
                Some(at)
            })
            .collect()
    }

    /// Long rows go through runs (copies, fills, reversed copies); what each output element
    /// reads, and what each gradient element sums, are the element-by-element reference's.
    #[test]
    fn runs_read_and_sum_what_the_elements_would() {
        let cases = [
            ("reverse", Attrs::new().with("axis", "(0, 1)"), vec![3, 17]),
            ("reverse", Attrs::new().with("axis", 0), vec![3, 17]),
            ("tile", Attrs::new().with("reps", "(2, 3)"), vec![2, 9]),
            (
                "repeat",
                Attrs::new().with("repeats", 5).with("axis", 1),
                vec![2, 7],
            ),
            ("repeat", Attrs::new().with("repeats", 3), vec![4, 6]),
            (
                "broadcast_to",
                Attrs::new().with("shape", "(3, 20)"),
                vec![3, 1],
            ),
            (
                "broadcast_to",
                Attrs::new().with("shape", "(4, 20)"),
                vec![1, 20],
            ),
            (
                "SwapAxis",
                Attrs::new().with("dim1", 0).with("dim2", 1),
                vec![20, 3],
            ),
            (
                "UpSampling",
                Attrs::new().with("scale", 4).with("sample_type", "nearest"),
                vec![1, 2, 3, 5],
            ),
        ];
        let pads = ["constant", "edge", "reflect"].map(|m| {
            (
                "Pad",
                Attrs::new()
                    .with("mode", m)
                    .with("pad_width", "(0, 0, 0, 0, 1, 2, 7, 9)"),
                vec![1, 2, 3, 12],
            )
        });
        for (op, attrs, x) in cases.into_iter().chain(pads) {
            let out = out_shape(op, &attrs, std::slice::from_ref(&x)).unwrap();
            let maps = rules(op, &attrs, &x, &out)
                .unwrap()
                .offset_maps(op)
                .unwrap();
            let OffsetMaps::Narrow(layout) = &maps else {
                panic!("{op}: wide offsets for a small input")
            };
            // Only SwapAxis (a strided row) and the flattened repeat of 3 (runs too short)
            // read their rows element by element.
            let flat_repeat = op == "repeat" && attrs.get("axis").is_none();
            let by_elements = op == "SwapAxis" || flat_repeat;
            let runs = matches!(layout.row, Row::Runs(_));
            assert_eq!(runs, !by_elements, "{op} {attrs:?}");
            let want = reference(&walks(op, &attrs, &x, &out).unwrap());
            let mut readers = vec![0; x.iter().product()];
            want.iter().flatten().for_each(|&o| readers[o] += 1);
            let injective = rules(op, &attrs, &x, &out).unwrap().injective();
            assert_eq!(injective, readers.iter().all(|&n| n <= 1), "{op} {attrs:?}");
            assert_eq!(read(&maps, &x), want, "{op} {attrs:?}");
            // Gradient: every output element carries its own value, so a term added in the
            // wrong place shows.
            let g: Vec<f64> = (0..want.len()).map(|i| 1.0 + i as f64 * 1e-3).collect();
            let mut acc = vec![0.0; x.iter().product()];
            maps.scatter(&g, &mut acc, |a, v| *a += v);
            let mut expect = vec![0.0; acc.len()];
            for (i, o) in want.iter().enumerate() {
                if let Some(o) = o {
                    expect[*o] += g[i];
                }
            }
            assert_eq!(acc, expect, "{op} gradient");
        }
    }

    /// A gather that only permutes its input's axes goes to the transpose kernel; one that
    /// broadcasts, reverses, pads or repeats walks its maps.
    #[test]
    fn permutations_go_to_the_transpose_kernel() {
        let plan = |op: &str, attrs: Attrs, x: &[usize]| {
            let out = out_shape(op, &attrs, &[x.to_vec()]).unwrap();
            rules(op, &attrs, x, &out).unwrap().plan(op).unwrap()
        };
        let swap = Attrs::new().with("dim1", 0).with("dim2", 2);
        assert!(matches!(plan("SwapAxis", swap, &[2, 3, 4]), Plan::Permute(a) if a == [2, 1, 0]));
        let same = Attrs::new().with("shape", "(2, 3)");
        assert!(matches!(plan("broadcast_to", same, &[2, 3]), Plan::Permute(a) if a == [0, 1]));
        let wider = Attrs::new().with("shape", "(4, 3)");
        assert!(matches!(
            plan("broadcast_to", wider, &[1, 3]),
            Plan::Maps(_)
        ));
        let rev = Attrs::new().with("axis", 0);
        assert!(matches!(plan("reverse", rev, &[2, 3]), Plan::Maps(_)));
    }

    /// The narrow maps (4 bytes an index, for inputs under 2^32 elements) and the wide ones
    /// read the same offsets, padding included; a rule reading past its input axis is refused
    /// instead of reading some other element.
    #[test]
    fn narrow_and_wide_maps_agree_and_reads_stay_inside_the_input() {
        let cases = [
            ("tile", Attrs::new().with("reps", "(2, 1, 3)"), vec![2, 3]),
            ("repeat", Attrs::new().with("repeats", 3), vec![2, 2]),
            ("reverse", Attrs::new().with("axis", "(0, 1)"), vec![3, 2]),
            (
                "Pad",
                Attrs::new().with("pad_width", "(1, 2, 0, 1)"),
                vec![2, 3],
            ),
        ];
        let flat = |maps: &OffsetMaps, x: &[usize]| read(maps, x);
        for (op, attrs, x) in cases {
            let out = out_shape(op, &attrs, std::slice::from_ref(&x)).unwrap();
            let r = rules(op, &attrs, &x, &out).unwrap();
            let narrow = OffsetMaps::Narrow(r.layout(op).unwrap());
            let wide = OffsetMaps::Wide(r.layout(op).unwrap());
            assert_eq!(flat(&narrow, &r.input), flat(&wide, &r.input), "{op}");
            assert!(matches!(r.offset_maps(op).unwrap(), OffsetMaps::Narrow(_)));
        }
        // A reverse's output gradient longer than its data: the rule would read index -1.
        let attrs = Attrs::new().with("axis", 0);
        let r = rules("reverse", &attrs, &[3], &[4]).unwrap();
        let e = r.offset_maps("reverse").err().unwrap().to_string();
        assert!(
            e.contains("index 3 of an output axis reads past input axis 0, of size 3"),
            "{e}"
        );
        let e = check_backward("reverse", &attrs, &[3], &[4])
            .unwrap_err()
            .to_string();
        assert!(e.contains("[4]") && e.contains("data [3]"), "{e}");
        assert!(check_backward("reverse", &attrs, &[3], &[3]).is_ok());
        let like = Attrs::new();
        assert!(check_backward("broadcast_like", &like, &[1, 3], &[4, 3]).is_ok());
        assert!(check_backward("broadcast_like", &like, &[2, 3], &[4, 3]).is_err());
        assert!(check_backward("slice_like", &like, &[5, 3], &[4, 3]).is_ok());
        assert!(check_backward("slice_like", &like, &[3, 3], &[4, 3]).is_err());
    }
}
