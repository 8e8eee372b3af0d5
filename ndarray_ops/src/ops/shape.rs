//! Ops that move or select data: Concat, SliceChannel (split), slice, slice_axis, take,
//! Embedding, and the reshape family (Reshape, expand_dims, squeeze), which are identities.

use super::{norm_axes, same_dtypes, Arity, Attrs, OpDef, TensorRef};
use crate::error::{invalid, NdError, Result};
use crate::resources::KernelRes;
use crate::{DType, Element};

type Infer = Result<(Vec<Vec<usize>>, Vec<DType>)>;
type KResult = std::result::Result<(), String>;

pub(super) fn axis_attr(
    op: &str,
    attrs: &Attrs,
    key: &str,
    default: i64,
    ndim: usize,
) -> Result<usize> {
    let a = attrs
        .ints(op, key)?
        .and_then(|v| v.first().copied())
        .unwrap_or(default);
    Ok(norm_axes(op, &[a], ndim)?[0])
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
    if let Some(n) = attrs.ints(op, "num_args")?.and_then(|v| v.first().copied()) {
        if n as usize != s.len() {
            return Err(invalid(
                op,
                format!("num_args={n} but {} inputs given", s.len()),
            ));
        }
    }
    let axis = axis_attr(op, attrs, "dim", 1, s[0].len())?;
    let mut out = s[0].clone();
    for (i, x) in s.iter().enumerate().skip(1) {
        let same_rest = x.len() == out.len()
            && x.iter()
                .zip(&out)
                .enumerate()
                .all(|(d, (a, b))| d == axis || a == b);
        if !same_rest {
            return Err(NdError::Shape {
                op: op.into(),
                arg: format!("input {i}"),
                found: x.clone(),
                expected: format!("the shape of input 0 {:?} except along axis {axis}", s[0]),
            });
        }
        out[axis] += x[axis];
    }
    Ok((vec![out], vec![dt]))
}

fn concat_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let o = &outs[0];
    let axis = axis_attr(op, attrs, "dim", 1, o.shape.len()).map_err(|e| e.to_string())?;
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

fn split_params(op: &str, attrs: &Attrs, shape: &[usize]) -> Result<(usize, usize, bool)> {
    let n = attrs.f64(op, "num_outputs", None)?;
    let axis = axis_attr(op, attrs, "axis", 1, shape.len())?;
    let squeeze = attrs.bool(op, "squeeze_axis", false)?;
    if n < 1.0 || n.fract() != 0.0 || !shape[axis].is_multiple_of(n as usize) {
        return Err(invalid(
            op,
            format!("num_outputs={n} does not divide axis {axis} of shape {shape:?} evenly"),
        ));
    }
    let n = n as usize;
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

fn split_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
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

/// Resolves a begin/end pair (negative from the end, None = the whole axis) against `dim`.
fn range(op: &str, begin: Option<i64>, end: Option<i64>, dim: usize) -> Result<(usize, usize)> {
    let fix = |v: i64| if v < 0 { v + dim as i64 } else { v };
    let (b, e) = (fix(begin.unwrap_or(0)), end.map_or(dim as i64, fix));
    if b < 0 || e > dim as i64 || b > e {
        return Err(invalid(
            op,
            format!("range {begin:?}..{end:?} is outside an axis of length {dim}"),
        ));
    }
    Ok((b as usize, e as usize))
}

/// Per axis, the kept range.
pub(super) fn slice_ranges(
    op: &str,
    attrs: &Attrs,
    shape: &[usize],
) -> Result<Vec<(usize, usize)>> {
    let parse = |key: &str| -> Result<Vec<Option<i64>>> {
        let Some(v) = attrs.get(key) else {
            return Ok(vec![]);
        };
        let t = v
            .trim()
            .trim_start_matches(['(', '['])
            .trim_end_matches([')', ']']);
        t.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                if s.eq_ignore_ascii_case("none") {
                    Ok(None)
                } else {
                    s.parse::<i64>().map(Some).map_err(|_| {
                        invalid(
                            op,
                            format!("{key}={v:?} is not a tuple of integers or None"),
                        )
                    })
                }
            })
            .collect()
    };
    if op == "slice_axis" {
        let axis = axis_attr(op, attrs, "axis", 0, shape.len())?;
        let begin = attrs.ints(op, "begin")?.and_then(|v| v.first().copied());
        let end = attrs.ints(op, "end")?.and_then(|v| v.first().copied());
        let mut r: Vec<(usize, usize)> = shape.iter().map(|&d| (0, d)).collect();
        r[axis] = range(op, begin, end, shape[axis])?;
        return Ok(r);
    }
    let (begin, end) = (parse("begin")?, parse("end")?);
    if begin.len() > shape.len() || end.len() > shape.len() {
        return Err(invalid(
            op,
            format!("begin {begin:?} / end {end:?} name more axes than shape {shape:?} has"),
        ));
    }
    if let Some(step) = attrs.get("step") {
        if parse("step")?.iter().any(|s| s.is_some_and(|v| v != 1)) {
            return Err(invalid(
                op,
                format!("step={step:?}: only step 1 is supported"),
            ));
        }
    }
    shape
        .iter()
        .enumerate()
        .map(|(d, &n)| {
            range(
                op,
                begin.get(d).copied().flatten(),
                end.get(d).copied().flatten(),
                n,
            )
        })
        .collect()
}

fn infer_slice(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let r = slice_ranges(op, attrs, &s[0])?;
    Ok((vec![r.iter().map(|(b, e)| e - b).collect()], vec![d[0]]))
}

fn slice_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let (x, o) = (&ins[0], &outs[0]);
    let r = slice_ranges(op, attrs, &x.shape).map_err(|e| e.to_string())?;
    let es = x.dtype.size();
    let nd = x.shape.len();
    if o.len() == 0 {
        return Ok(());
    }
    // Copy the innermost axis as contiguous runs, iterating over the outer index space.
    let mut strides = vec![1usize; nd];
    for d in (0..nd.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * x.shape[d + 1];
    }
    let run = (r[nd - 1].1 - r[nd - 1].0) * es;
    let rows = o.len() / (r[nd - 1].1 - r[nd - 1].0);
    let mut idx: Vec<usize> = r.iter().map(|(b, _)| *b).collect();
    for row in 0..rows {
        let src: usize = idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>() * es;
        // SAFETY: `idx` stays within the kept ranges, so the run lies inside the input; row
        // `row` of the output holds exactly one run; input and output are disjoint.
        unsafe { std::ptr::copy_nonoverlapping(x.buf.ptr.add(src), o.buf.ptr.add(row * run), run) };
        for d in (0..nd.saturating_sub(1)).rev() {
            idx[d] += 1;
            if idx[d] < r[d].1 {
                break;
            }
            idx[d] = r[d].0;
        }
    }
    Ok(())
}

// ---- take / Embedding -----------------------------------------------------------------------

fn infer_take(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    // take(a, indices); Embedding(data = indices, weight).
    let (table, idx, dt) = if op == "Embedding" {
        (&s[1], &s[0], d[1])
    } else {
        (&s[0], &s[1], d[0])
    };
    if op == "take"
        && attrs
            .ints(op, "axis")?
            .and_then(|v| v.first().copied())
            .unwrap_or(0)
            != 0
    {
        return Err(invalid(op, "only axis 0 is supported"));
    }
    if op == "Embedding" {
        let (i, o) = (
            attrs.f64(op, "input_dim", None)? as usize,
            attrs.f64(op, "output_dim", None)? as usize,
        );
        if *table != [i, o] {
            return Err(NdError::Shape {
                op: op.into(),
                arg: "weight".into(),
                found: table.clone(),
                expected: format!("[{i}, {o}] (input_dim, output_dim)"),
            });
        }
    }
    if table.is_empty() {
        return Err(NdError::Shape {
            op: op.into(),
            arg: "table".into(),
            found: table.clone(),
            expected: "at least 1 dimension".into(),
        });
    }
    let mut out = idx.clone();
    out.extend_from_slice(&table[1..]);
    Ok((vec![out], vec![dt]))
}

fn take_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let (table, idx) = if op == "Embedding" {
        (&ins[1], &ins[0])
    } else {
        (&ins[0], &ins[1])
    };
    let wrap = attrs.get("mode") == Some("wrap");
    let rows = table.shape[0];
    let row_bytes = table.len() / rows.max(1) * table.dtype.size();
    let indices: Vec<f64> = crate::with_dtype!(idx.dtype, T => {
        // SAFETY: read access to the indices.
        unsafe { idx.slice::<T>() }.iter().map(|v| v.to_f64()).collect()
    });
    if rows == 0 && !indices.is_empty() {
        return Err(format!("{op}: cannot index an empty table"));
    }
    for (k, &i) in indices.iter().enumerate() {
        // MXNet's default mode clips out-of-range indices; "wrap" takes them modulo the rows.
        let i = i as i64;
        let r = if wrap {
            i.rem_euclid(rows as i64) as usize
        } else {
            i.clamp(0, rows as i64 - 1) as usize
        };
        // SAFETY: row `r` lies in the table; slot `k` in the output; they are disjoint.
        unsafe {
            std::ptr::copy_nonoverlapping(
                table.buf.ptr.add(r * row_bytes),
                outs[0].buf.ptr.add(k * row_bytes),
                row_bytes,
            )
        };
    }
    Ok(())
}

// ---- Reshape, expand_dims, squeeze (identities) ----------------------------------------------

fn infer_reshape(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let x = &s[0];
    let n: usize = x.iter().product();
    let out: Vec<usize> = match op {
        "expand_dims" => {
            let a = attrs
                .ints(op, "axis")?
                .and_then(|v| v.first().copied())
                .ok_or_else(|| invalid(op, "attribute axis is required"))?;
            let ax = norm_axes(op, &[a], x.len() + 1)?[0];
            let mut out = x.clone();
            out.insert(ax, 1);
            out
        }
        "squeeze" => match attrs.ints(op, "axis")? {
            None => x.iter().copied().filter(|&v| v != 1).collect(),
            Some(a) => {
                let axes = norm_axes(op, &a, x.len())?;
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
            // MXNet's codes: 0 copies the input's dimension, -1 infers one dimension.
            let spec = attrs
                .ints(op, "shape")?
                .ok_or_else(|| invalid(op, "attribute shape is required"))?;
            let mut out = Vec::with_capacity(spec.len());
            let mut infer_at = None;
            for (i, &v) in spec.iter().enumerate() {
                match v {
                    0 => out.push(*x.get(i).ok_or_else(|| {
                        invalid(op, format!("shape code 0 at {i} has no input dimension"))
                    })?),
                    -1 if infer_at.is_none() => {
                        infer_at = Some(i);
                        out.push(1);
                    }
                    v if v > 0 => out.push(v as usize),
                    v => {
                        return Err(invalid(
                            op,
                            format!(
                                "shape code {v} is not supported (0, -1 and positive sizes are)"
                            ),
                        ))
                    }
                }
            }
            if let Some(i) = infer_at {
                let known: usize = out.iter().product();
                if known == 0 || !n.is_multiple_of(known) {
                    return Err(NdError::Shape {
                        op: op.into(),
                        arg: "data".into(),
                        found: x.clone(),
                        expected: format!("a size divisible into shape {spec:?}"),
                    });
                }
                out[i] = n / known;
            }
            out
        }
    };
    if out.iter().product::<usize>() != n {
        return Err(NdError::Shape {
            op: op.into(),
            arg: "data".into(),
            found: x.clone(),
            expected: format!(
                "{} elements for shape {out:?}",
                out.iter().product::<usize>()
            ),
        });
    }
    Ok((vec![out], vec![d[0]]))
}

macro_rules! def {
    ($name:expr, $aliases:expr, $arity:expr, $infer:expr, $kernel:expr, $inplace:expr, $identity:expr, $ign:expr, $alias_safe:expr) => {
        OpDef {
            aliases: $aliases,
            inplace: $inplace,
            identity: $identity,
            backward_ignores: $ign,
            alias_safe: $alias_safe,
            ..OpDef::new($name, $arity, $infer, $kernel)
        }
    };
}

pub(super) fn ops() -> &'static [OpDef] {
    const IP1: &[(usize, usize)] = &[(0, 0)];
    static OPS: &[OpDef] = &[
        def!(
            "Concat",
            &["concat"],
            Arity::AtLeast(1),
            infer_concat,
            concat_kernel,
            &[],
            false,
            &[],
            false
        ),
        def!(
            "SliceChannel",
            &["split"],
            Arity::Exactly(1),
            infer_split,
            split_kernel,
            &[],
            false,
            &[0],
            false
        ),
        def!(
            "slice",
            &["crop"],
            Arity::Exactly(1),
            infer_slice,
            slice_kernel,
            &[],
            false,
            &[0],
            false
        ),
        def!(
            "slice_axis",
            &[],
            Arity::Exactly(1),
            infer_slice,
            slice_kernel,
            &[],
            false,
            &[0],
            false
        ),
        def!(
            "take",
            &[],
            Arity::Exactly(2),
            infer_take,
            take_kernel,
            &[],
            false,
            &[],
            false
        ),
        OpDef {
            infer_inputs: Some(super::param_shapes::embedding),
            ..def!(
                "Embedding",
                &[],
                Arity::Exactly(2),
                infer_take,
                take_kernel,
                &[],
                false,
                &[1],
                false
            )
        },
        def!(
            "Reshape",
            &["reshape"],
            Arity::Exactly(1),
            infer_reshape,
            super::copy_kernel,
            IP1,
            true,
            &[0],
            true
        ),
        def!(
            "expand_dims",
            &[],
            Arity::Exactly(1),
            infer_reshape,
            super::copy_kernel,
            IP1,
            true,
            &[0],
            true
        ),
        def!(
            "squeeze",
            &[],
            Arity::Exactly(1),
            infer_reshape,
            super::copy_kernel,
            IP1,
            true,
            &[0],
            true
        ),
    ];
    OPS
}
