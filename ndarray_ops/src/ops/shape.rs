//! Ops that move or select data: Concat, SliceChannel (split), slice, slice_axis, take,
//! Embedding, and the reshape family (Reshape, expand_dims, squeeze), which are identities.

use super::params::{attr_enum, op_params, Params, Positive, PositiveInt};
use super::{norm_axes, same_dtypes, Arity, Attrs, OpDef, Outputs};
use crate::error::{invalid, shape_error, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::DType;

op_params! {
    /// Concat's attributes.
    pub struct ConcatParams for "Concat" {
        num_args: Option<usize>,
        dim: i64,
    }
}

op_params! {
    /// SliceChannel's attributes.
    pub struct SliceChannelParams for "SliceChannel" {
        num_outputs: Positive<{ super::MAX_NODE_OUTPUTS as u32 }>,
        axis: i64,
        squeeze_axis: bool,
    }
}

op_params! {
    /// slice's attributes: per axis from the first, `None` for the axis's default.
    pub struct SliceParams for "slice" {
        begin: Vec<Option<i64>>,
        end: Vec<Option<i64>>,
        step: Vec<Option<i64>>,
    }
}

op_params! {
    /// slice_axis's attributes.
    pub struct SliceAxisParams for "slice_axis" {
        axis: i64,
        begin: i64,
        end: Option<i64>,
    }
}

attr_enum! {
    /// What take does with an index outside the axis.
    pub enum TakeMode {
        /// Clamps it to the axis.
        Clip = "clip",
        /// Wraps it around.
        Wrap = "wrap",
        /// Refuses it.
        Raise = "raise",
    }
}

op_params! {
    /// take's attributes.
    pub struct TakeParams for "take" {
        axis: i64,
        mode: TakeMode,
    }
}

op_params! {
    /// Embedding's attributes.
    pub struct EmbeddingParams for "Embedding" {
        input_dim: PositiveInt,
        output_dim: PositiveInt,
        sparse_grad: bool,
    }
}

op_params! {
    /// Reshape's attributes.
    pub struct ReshapeParams for "Reshape" {
        shape: Vec<i64>,
        reverse: bool,
        target_shape: Vec<i64>,
        keep_highest: bool,
    }
}

op_params! {
    /// expand_dims's attributes.
    pub struct ExpandDimsParams for "expand_dims" {
        axis: i64,
    }
}

op_params! {
    /// squeeze's attributes.
    pub struct SqueezeParams for "squeeze" {
        axis: Option<Vec<i64>>,
    }
}

/// Concat's axis (and its gradient's), of `ndim`.
pub(crate) fn concat_axis(op: &str, attrs: &Attrs, ndim: usize) -> Result<usize> {
    Ok(norm_axes(op, &[ConcatParams::get(op, attrs)?.dim], ndim)?[0])
}

/// Copies `rows` blocks of `len` elements from `src` (stride `src_stride`) to `dst` (stride
/// `dst_stride`), in bytes.
///
/// # Safety
/// Every block lies inside its buffer; `src` and `dst` do not overlap.
unsafe fn copy_blocks(
    src: *const u8,
    src_stride: usize,
    dst: *mut u8,
    dst_stride: usize,
    rows: usize,
    len: usize,
) {
    for r in 0..rows {
        // SAFETY: per the function's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(r * src_stride), dst.add(r * dst_stride), len)
        };
    }
}

pub(super) fn outer_inner(shape: &[usize], axis: usize) -> (usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis + 1..].iter().product(),
    )
}

// ---- Concat ---------------------------------------------------------------------------------

fn infer_concat(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    if let Some(n) = ConcatParams::get(op, attrs)?.num_args {
        if n != s.len() {
            return Err(invalid(
                op,
                format!("num_args={n} but {} inputs given", s.len()),
            ));
        }
    }
    let axis = concat_axis(op, attrs, s[0].len())?;
    let mut out = s[0].clone();
    for (i, x) in s.iter().enumerate().skip(1) {
        let same_rest = x.len() == out.len()
            && x.iter()
                .zip(&out)
                .enumerate()
                .all(|(d, (a, b))| d == axis || a == b);
        if !same_rest {
            return Err(shape_error(
                op,
                format!("input {i}"),
                x.clone(),
                format!("the shape of input 0 {:?} except along axis {axis}", s[0]),
            ));
        }
        out[axis] += x[axis];
    }
    Ok((vec![out], vec![dt]))
}

fn concat_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let o = &outs[0];
    let axis = concat_axis(op, attrs, o.shape.len()).map_err(|e| e.to_string())?;
    let es = o.dtype.size();
    let (outer, inner) = outer_inner(&o.shape, axis);
    let dst_stride = o.shape[axis] * inner * es;
    let mut offset = 0;
    for t in ins {
        let len = t.shape[axis] * inner * es;
        // SAFETY: each input block lies inside its buffer; the output was allocated for all of
        // them; inputs overlapping the output were copied by `run_kernel`.
        unsafe {
            copy_blocks(
                t.buf.ptr,
                len,
                o.buf.ptr.add(offset),
                dst_stride,
                outer,
                len,
            )
        };
        offset += len;
    }
    Ok(())
}

// ---- SliceChannel / split -------------------------------------------------------------------

pub(crate) fn split_params(
    op: &str,
    attrs: &Attrs,
    shape: &[usize],
) -> Result<(usize, usize, bool)> {
    let a = SliceChannelParams::get(op, attrs)?;
    let (n, squeeze) = (a.num_outputs.0, a.squeeze_axis);
    let axis = norm_axes(op, &[a.axis], shape.len())?[0];
    if !shape[axis].is_multiple_of(n) {
        return Err(invalid(
            op,
            format!("num_outputs={n} does not divide axis {axis} of shape {shape:?} evenly"),
        ));
    }
    if squeeze && shape[axis] != n {
        return Err(invalid(
            op,
            "squeeze_axis needs pieces of size 1 along the axis",
        ));
    }
    Ok((n, axis, squeeze))
}

fn infer_split(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let (n, axis, squeeze) = split_params(op, attrs, &s[0])?;
    let mut piece = s[0].clone();
    piece[axis] /= n;
    if squeeze {
        piece.remove(axis);
    }
    Ok((vec![piece; n], vec![d[0]; n]))
}

fn split_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let x = &ins[0];
    let (n, axis, _) = split_params(op, attrs, &x.shape).map_err(|e| e.to_string())?;
    let es = x.dtype.size();
    let (outer, inner) = outer_inner(&x.shape, axis);
    let len = x.shape[axis] / n * inner * es;
    for (k, o) in outs.iter().enumerate() {
        // SAFETY: piece k of every row lies inside the input; each output holds `outer` pieces.
        unsafe {
            copy_blocks(
                x.buf.ptr.add(k * len),
                x.shape[axis] * inner * es,
                o.buf.ptr,
                len,
                outer,
                len,
            )
        };
    }
    Ok(())
}

// ---- slice_axis / slice ---------------------------------------------------------------------

/// What a slice keeps of one axis: `len` elements from `start`, `step` apart.
#[derive(Clone, Copy, Debug)]
pub(super) struct AxisSlice {
    start: usize,
    step: isize,
    len: usize,
}

/// One axis's slice as Python and MXNet read `begin:end:step`: negative positions count from
/// the end; with a positive step the defaults are the whole axis, with a negative one from the
/// last element down to the first. Positions outside the axis are an error.
fn axis_slice(
    op: &str,
    begin: Option<i64>,
    end: Option<i64>,
    step: i64,
    dim: usize,
) -> Result<AxisSlice> {
    let n = dim as i64;
    let fix = |v: i64| if v < 0 { v + n } else { v };
    let bad = || {
        invalid(
            op,
            format!("range {begin:?}..{end:?} step {step} is outside an axis of length {dim}"),
        )
    };
    match step {
        0 => Err(invalid(op, "a step of 0 slices nothing")),
        s if s > 0 => {
            let (b, e) = (fix(begin.unwrap_or(0)), end.map_or(n, fix));
            if b < 0 || e > n || b > e {
                return Err(bad());
            }
            Ok(AxisSlice {
                start: b as usize,
                step: s as isize,
                len: ((e - b) as usize).div_ceil(s as usize),
            })
        }
        s => {
            // From `b` down to just above `e` (-1: through the first element).
            let (b, e) = (begin.map_or(n - 1, fix), end.map_or(-1, fix));
            if b >= n || e < -1 || e > b {
                return Err(bad());
            }
            Ok(AxisSlice {
                start: b.max(0) as usize,
                step: s as isize,
                len: ((b - e) as usize).div_ceil(s.unsigned_abs() as usize),
            })
        }
    }
}

/// Per axis, what `slice` (`begin`, `end`, `step` tuples, `None` for a default) or
/// `slice_axis` (one axis, `begin`, `end`) keeps.
pub(super) fn slice_ranges(op: &str, attrs: &Attrs, shape: &[usize]) -> Result<Vec<AxisSlice>> {
    let whole = |d: usize| AxisSlice {
        start: 0,
        step: 1,
        len: d,
    };
    if op == "slice_axis" {
        let a = SliceAxisParams::get(op, attrs)?;
        let axis = norm_axes(op, &[a.axis], shape.len())?[0];
        let mut r: Vec<AxisSlice> = shape.iter().map(|&d| whole(d)).collect();
        r[axis] = axis_slice(op, Some(a.begin), a.end, 1, shape[axis])?;
        return Ok(r);
    }
    let a = SliceParams::get(op, attrs)?;
    let (begin, end, step) = (&a.begin, &a.end, &a.step);
    if begin.len() > shape.len() || end.len() > shape.len() || step.len() > shape.len() {
        return Err(invalid(
            op,
            format!(
                "begin {begin:?} / end {end:?} / step {step:?} name more axes than shape {shape:?} has"
            ),
        ));
    }
    shape
        .iter()
        .enumerate()
        .map(|(d, &n)| {
            let at = |v: &[Option<i64>]| v.get(d).copied().flatten();
            axis_slice(op, at(begin), at(end), at(step).unwrap_or(1), n)
        })
        .collect()
}

/// `slice` or `slice_axis` on data of shape `x` as a gather: output axis `d` walks input axis
/// `d` from the slice's start by its step (the GPU runs slices through its gather kernels).
pub(crate) fn slice_walks(op: &str, attrs: &Attrs, x: &[usize]) -> Result<super::gather::Walks> {
    let axes = slice_ranges(op, attrs, x)?
        .iter()
        .enumerate()
        .map(|(d, s)| super::gather::Walk {
            from: Some(d),
            index: (0..s.len)
                .map(|i| Some((s.start as isize + i as isize * s.step) as usize))
                .collect(),
        })
        .collect();
    Ok(super::gather::Walks {
        input: x.to_vec(),
        axes,
    })
}

/// How many contiguous elements each run of [`slice_runs`] has: the last axis's kept length
/// where its step is 1, else 1.
pub(super) fn slice_run_len(slices: &[AxisSlice]) -> usize {
    match slices.last() {
        Some(s) if s.step == 1 => s.len,
        _ => 1,
    }
}

/// Visits what a slice keeps of an array of `shape` as runs of [`slice_run_len`] contiguous
/// elements, in the slice's row-major order: `f(offset, k)` for run k starting at element
/// `offset` of the whole array.
pub(super) fn slice_runs(slices: &[AxisSlice], shape: &[usize], mut f: impl FnMut(usize, usize)) {
    let nd = shape.len();
    if nd == 0 || slices.iter().any(|s| s.len == 0) {
        return;
    }
    let mut strides = vec![1isize; nd];
    for d in (0..nd - 1).rev() {
        strides[d] = strides[d + 1] * shape[d + 1] as isize;
    }
    // With a unit step the last axis is one run; otherwise it is walked like the others.
    let outer = match slices[nd - 1].step {
        1 => nd - 1,
        _ => nd,
    };
    let runs: usize = slices[..outer].iter().map(|s| s.len).product();
    let mut idx = vec![0usize; outer];
    for k in 0..runs {
        let offset: isize = (0..nd)
            .map(|d| {
                let i = if d < outer { idx[d] as isize } else { 0 };
                (slices[d].start as isize + i * slices[d].step) * strides[d]
            })
            .sum();
        f(offset as usize, k);
        for d in (0..outer).rev() {
            idx[d] += 1;
            if idx[d] < slices[d].len {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn infer_slice(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let r = slice_ranges(op, attrs, &s[0])?;
    Ok((vec![r.iter().map(|a| a.len).collect()], vec![d[0]]))
}

fn slice_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (x, o) = (&ins[0], &outs[0]);
    let r = slice_ranges(op, attrs, &x.shape).map_err(|e| e.to_string())?;
    let es = x.dtype.size();
    let run = slice_run_len(&r) * es;
    slice_runs(&r, &x.shape, |offset, k| {
        // SAFETY: every kept position lies inside the input (`axis_slice` checked the ranges);
        // run k of the output holds exactly one run; input and output are disjoint.
        unsafe {
            std::ptr::copy_nonoverlapping(x.buf.ptr.add(offset * es), o.buf.ptr.add(k * run), run)
        };
    });
    Ok(())
}

// ---- take / Embedding -----------------------------------------------------------------------

/// `take`'s axis (Embedding's is 0), normalized against a table of `ndim` dimensions.
fn take_axis(op: &str, attrs: &Attrs, ndim: usize) -> Result<usize> {
    match op {
        "take" | "_backward_take" => {
            Ok(norm_axes(op, &[TakeParams::get(op, attrs)?.axis], ndim)?[0])
        }
        _ => Ok(0),
    }
}

/// The table's layout around the taken axis: (outer, rows, inner) element counts.
pub(crate) fn take_layout(
    op: &str,
    attrs: &Attrs,
    table: &[usize],
) -> Result<(usize, usize, usize)> {
    let axis = take_axis(op, attrs, table.len())?;
    Ok((
        table[..axis].iter().product(),
        table[axis],
        table[axis + 1..].iter().product(),
    ))
}

/// How a take (or Embedding, which clamps) treats an index outside its axis.
pub(crate) fn take_mode(op: &str, attrs: &Attrs) -> Result<TakeMode> {
    match op {
        "take" | "_backward_take" => Ok(TakeParams::get(op, attrs)?.mode),
        _ => Ok(TakeMode::Clip),
    }
}

/// The row an index selects: MXNet's default mode (`clip`) clamps it into the axis, `wrap`
/// takes it modulo the axis, `raise` refuses one outside.
pub(crate) fn take_row(mode: TakeMode, i: f64, rows: usize) -> std::result::Result<usize, String> {
    if rows == 0 {
        return Err("take: cannot index an empty axis".to_string());
    }
    let i = i as i64;
    let n = rows as i64;
    match mode {
        TakeMode::Wrap => Ok(i.rem_euclid(n) as usize),
        TakeMode::Raise if !(0..n).contains(&i) => Err(format!(
            "take: index {i} is outside an axis of length {rows} (mode raise)"
        )),
        _ => Ok(i.clamp(0, n - 1) as usize),
    }
}

fn infer_take(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    // take(a, indices); Embedding(data = indices, weight).
    let (table, idx, dt) = if op == "Embedding" {
        (&s[1], &s[0], d[1])
    } else {
        (&s[0], &s[1], d[0])
    };
    if op == "Embedding" {
        let a = EmbeddingParams::get(op, attrs)?;
        let (i, o) = (a.input_dim.0, a.output_dim.0);
        if *table != [i, o] {
            return Err(shape_error(
                op,
                "weight",
                table.clone(),
                format!("[{i}, {o}] (input_dim, output_dim)"),
            ));
        }
    }
    if table.is_empty() {
        return Err(shape_error(
            op,
            "table",
            table.clone(),
            "at least 1 dimension",
        ));
    }
    // The indices' shape takes the place of the taken axis.
    let axis = take_axis(op, attrs, table.len())?;
    let mut out = table[..axis].to_vec();
    out.extend_from_slice(idx);
    out.extend_from_slice(&table[axis + 1..]);
    Ok((vec![out], vec![dt]))
}

fn take_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (table, idx) = if op == "Embedding" {
        (&ins[1], &ins[0])
    } else {
        (&ins[0], &ins[1])
    };
    let (outer, rows, inner) = take_layout(op, attrs, &table.shape).map_err(|e| e.to_string())?;
    let es = table.dtype.size();
    // SAFETY: read access to the indices.
    let indices = unsafe { idx.to_f64s() };
    let mode = take_mode(op, attrs).map_err(|e| e.to_string())?;
    let picked: Vec<usize> = indices
        .iter()
        .map(|&i| take_row(mode, i, rows))
        .collect::<std::result::Result<_, _>>()?;
    let run = inner * es;
    for o in 0..outer {
        for (k, &r) in picked.iter().enumerate() {
            // SAFETY: row r of block o lies in the table; slot k of block o in the output; the
            // two are disjoint.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    table.buf.ptr.add((o * rows + r) * run),
                    outs[0].buf.ptr.add((o * picked.len() + k) * run),
                    run,
                )
            };
        }
    }
    Ok(())
}

// ---- Reshape, expand_dims, squeeze (identities) ----------------------------------------------

/// The shape MXNet's Reshape codes give for input shape `x`. Walking the codes and the input's
/// dimensions together: a positive code is that size, 0 copies the next input dimension, -1 is
/// inferred from the element count (one at most), -2 copies all the remaining input dimensions,
/// -3 merges the next two, and -4 splits the next one into the two sizes that follow it (one
/// of which may be -1).
fn reshape_codes(op: &str, x: &[usize], spec: &[i64]) -> Result<Vec<usize>> {
    let n: usize = x.iter().product();
    let (mut out, mut infer_at, mut src) = (Vec::with_capacity(spec.len()), None, 0);
    let input = |at: usize, code: i64| {
        x.get(at).copied().ok_or_else(|| {
            invalid(
                op,
                format!(
                    "shape code {code} needs input dimension {at}, but the input {x:?} has none"
                ),
            )
        })
    };
    let mut codes = spec.iter().copied();
    while let Some(v) = codes.next() {
        match v {
            v if v > 0 => {
                out.push(v as usize);
                src += 1;
            }
            0 => {
                out.push(input(src, 0)?);
                src += 1;
            }
            -1 if infer_at.is_none() => {
                infer_at = Some(out.len());
                out.push(1);
                src += 1;
            }
            -1 => return Err(invalid(op, format!("shape {spec:?} has more than one -1"))),
            -2 => {
                out.extend(x.iter().skip(src));
                src = x.len().max(src);
            }
            -3 => {
                out.push(input(src, -3)? * input(src + 1, -3)?);
                src += 2;
            }
            -4 => {
                let dim = input(src, -4)?;
                src += 1;
                let (Some(a), Some(b)) = (codes.next(), codes.next()) else {
                    return Err(invalid(
                        op,
                        format!("shape {spec:?}: -4 needs two sizes after it"),
                    ));
                };
                let split = match (a, b) {
                    (-1, b) if b > 0 && dim % b as usize == 0 => (dim / b as usize, b as usize),
                    (a, -1) if a > 0 && dim % a as usize == 0 => (a as usize, dim / a as usize),
                    (a, b) if a > 0 && b > 0 && a.checked_mul(b) == Some(dim as i64) => {
                        (a as usize, b as usize)
                    }
                    _ => {
                        return Err(invalid(
                            op,
                            format!(
                            "shape {spec:?}: -4 cannot split input dimension {dim} into ({a}, {b})"
                        ),
                        ))
                    }
                };
                out.extend([split.0, split.1]);
            }
            v => {
                return Err(invalid(
                    op,
                    format!("shape code {v} is not one of MXNet's (a size, 0, -1, -2, -3, -4)"),
                ))
            }
        }
    }
    if let Some(i) = infer_at {
        let known = super::element_count(op, &out)?;
        if known == 0 || !n.is_multiple_of(known) {
            return Err(shape_error(
                op,
                "data",
                x,
                format!("a size divisible into shape {spec:?}"),
            ));
        }
        out[i] = n / known;
    }
    Ok(out)
}

fn infer_reshape(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let x = &s[0];
    let n: usize = x.iter().product();
    let out: Vec<usize> = match op {
        "expand_dims" => {
            let a = ExpandDimsParams::get(op, attrs)?.axis;
            let ax = norm_axes(op, &[a], x.len() + 1)?[0];
            let mut out = x.clone();
            out.insert(ax, 1);
            out
        }
        "squeeze" => match &SqueezeParams::get(op, attrs)?.axis {
            None => x.iter().copied().filter(|&v| v != 1).collect(),
            Some(a) => {
                let axes = norm_axes(op, a, x.len())?;
                if let Some(&bad) = axes.iter().find(|&&a| x[a] != 1) {
                    return Err(invalid(op, format!("axis {bad} of shape {x:?} is not 1")));
                }
                x.iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, &v)| v)
                    .collect()
            }
        },
        _ => {
            let a = ReshapeParams::get(op, attrs)?;
            // MXNet's deprecated form of the same thing; refused rather than ignored.
            if !a.target_shape.is_empty() || a.keep_highest {
                return Err(invalid(
                    op,
                    "target_shape and keep_highest (deprecated in MXNet) are not supported; give shape",
                ));
            }
            // MXNet's default (an empty shape) is no reshape at all: the shape is asked for.
            if attrs.get("shape").is_none() {
                return Err(invalid(op, "attribute shape is required"));
            }
            let spec = &a.shape;
            // `reverse` reads the codes right to left, against the input's last dimensions.
            match a.reverse {
                true => {
                    let rev = |v: &[i64]| v.iter().rev().copied().collect::<Vec<_>>();
                    let xr: Vec<usize> = x.iter().rev().copied().collect();
                    let mut out = reshape_codes(op, &xr, &rev(spec))?;
                    out.reverse();
                    out
                }
                false => reshape_codes(op, x, spec)?,
            }
        }
    };
    let m = super::element_count(op, &out)?;
    if m != n {
        return Err(shape_error(
            op,
            "data",
            x.clone(),
            format!("{m} elements for shape {out:?}"),
        ));
    }
    Ok((vec![out], vec![d[0]]))
}

/// SliceChannel's pieces, every one visible.
fn split_outputs(op: &str, attrs: &Attrs) -> Result<(usize, usize)> {
    let n = SliceChannelParams::get(op, attrs)?.num_outputs.0;
    Ok((n, n))
}

pub(super) fn ops() -> &'static [OpDef] {
    const IP1: &[(usize, usize)] = &[(0, 0)];
    static OPS: &[OpDef] = &[
        OpDef {
            aliases: &["concat"],
            alias_safe: false,
            ..OpDef::new("Concat", Arity::AtLeast(1), infer_concat, concat_kernel)
        }
        .partial(super::partial_shapes::concat)
        .grad(grad::concat)
        .on_gpu(gpu::shape::concat),
        OpDef {
            aliases: &["split"],
            backward_ignores: &[0],
            alias_safe: false,
            ..OpDef::new("SliceChannel", Arity::Exactly(1), infer_split, split_kernel)
        }
        .partial(super::partial_shapes::slice_channel)
        .outputs(Outputs::By(split_outputs))
        .grad(grad::split)
        .on_gpu(gpu::shape::split),
        OpDef {
            aliases: &["crop"],
            backward_ignores: &[0],
            alias_safe: false,
            ..OpDef::new("slice", Arity::Exactly(1), infer_slice, slice_kernel)
        }
        .grad(grad::slice)
        .on_gpu(gpu::gather::slice),
        OpDef {
            backward_ignores: &[0],
            alias_safe: false,
            ..OpDef::new("slice_axis", Arity::Exactly(1), infer_slice, slice_kernel)
        }
        .grad(grad::slice)
        .on_gpu(gpu::gather::slice),
        OpDef {
            alias_safe: false,
            ..OpDef::new("take", Arity::Exactly(2), infer_take, take_kernel)
        }
        .grad(grad::take)
        .on_gpu(gpu::indexing::take),
        OpDef {
            infer_partial: Some(super::partial_shapes::embedding),
            gradient: Some(grad::embedding),
            backward_ignores: &[1],
            alias_safe: false,
            ..OpDef::new("Embedding", Arity::Exactly(2), infer_take, take_kernel)
        }
        .on_gpu(gpu::indexing::embedding),
        OpDef {
            aliases: &["reshape"],
            inplace: IP1,
            identity: true,
            backward_ignores: &[0],
            ..OpDef::new(
                "Reshape",
                Arity::Exactly(1),
                infer_reshape,
                super::copy_kernel,
            )
        }
        .grad(grad::flatten)
        .on_gpu(gpu::ops::copy),
        OpDef {
            inplace: IP1,
            identity: true,
            backward_ignores: &[0],
            ..OpDef::new(
                "expand_dims",
                Arity::Exactly(1),
                infer_reshape,
                super::copy_kernel,
            )
        }
        .grad(grad::flatten)
        .on_gpu(gpu::ops::copy),
        OpDef {
            inplace: IP1,
            identity: true,
            backward_ignores: &[0],
            ..OpDef::new(
                "squeeze",
                Arity::Exactly(1),
                infer_reshape,
                super::copy_kernel,
            )
        }
        .grad(grad::flatten)
        .on_gpu(gpu::ops::copy),
    ];
    OPS
}
