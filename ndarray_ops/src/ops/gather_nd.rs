//! Indexing by coordinate tuples: `gather_nd`, `scatter_nd` and the gradient of gather_nd
//! (`_backward_gather_nd`, a scatter that adds), plus the older `batch_take`.
//!
//! `indices` has shape `(M, Y...)`: column `y` is a coordinate into the first `M` axes of the
//! indexed array `X`, and names the block `X[i0, .., iM-1, ...]` of `prod(X[M..])` elements.
//! gather_nd copies block `y` of `X` to position `y` of its `(Y..., X[M..])` output; scatter_nd
//! writes position `y` of its data into block `y` of a zero `X` (a later column wins where two
//! name the same block, as in MXNet); the gradient of gather_nd adds instead. Negative
//! coordinates count from the end, as in MXNet; a coordinate outside its axis fails the op,
//! naming it.

use super::gather::strides;
use super::{Arity, Attrs, OpDef, TensorRef};
use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// The `shape` attribute of scatter_nd and `_backward_gather_nd` (the indexed array's shape).
fn shape_attr(op: &str, attrs: &Attrs) -> Result<Vec<usize>> {
    let v = attrs
        .ints(op, "shape")?
        .ok_or_else(|| invalid(op, "attribute shape is required"))?;
    if v.is_empty() || v.iter().any(|&d| d < 0) {
        return Err(invalid(
            op,
            format!("shape={v:?} is not a non-empty list of sizes"),
        ));
    }
    Ok(v.iter().map(|&d| d as usize).collect())
}

/// Checks `indices` against the indexed shape `x`: returns `M` and the shape of the positions
/// and blocks together, `(Y..., X[M..])`.
fn layout(op: &str, indices: &[usize], x: &[usize]) -> Result<(usize, Vec<usize>)> {
    if indices.len() < 2 {
        return Err(shape_error(
            op,
            "indices",
            indices,
            "at least 2 dimensions (M coordinates, then the positions)",
        ));
    }
    let m = indices[0];
    if m == 0 || m > x.len() {
        return Err(shape_error(
            op,
            "indices",
            indices,
            format!(
                "1 to {} coordinates along its first axis (the indexed array {x:?})",
                x.len()
            ),
        ));
    }
    let mut out = indices[1..].to_vec();
    out.extend_from_slice(&x[m..]);
    Ok((m, out))
}

fn infer_gather_nd(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let (_, out) = layout(op, &s[1], &s[0])?;
    Ok((vec![out], vec![d[0]]))
}

/// scatter_nd(data, indices) and `_backward_gather_nd(ograd, indices[, like])`: the output is
/// the `shape` attribute, or the third input's shape (how the gradient pass writes it, shapes
/// being unknown when gradients are built).
fn infer_scatter_nd(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    if s.len() > 3 {
        return Err(invalid(
            op,
            format!(
                "takes data, indices and at most one array giving the shape, got {} inputs",
                s.len()
            ),
        ));
    }
    let x = match s.get(2) {
        Some(like) => like.clone(),
        None => shape_attr(op, attrs)?,
    };
    // As gather_nd's backward op the third input is the data, whose gradient this is.
    if op == "_backward_gather_nd" && d.get(2).is_some_and(|&x| x != d[0]) {
        return Err(NdError::DType {
            op: op.into(),
            arg: "data".into(),
            found: d[2].to_string(),
            expected: format!("{}, the output gradient's", d[0]),
        });
    }
    let (_, want) = layout(op, &s[1], &x)?;
    if s[0] != want {
        return Err(shape_error(
            op,
            "data",
            s[0].clone(),
            format!("{want:?} (indices {:?} into an array of shape {x:?})", s[1]),
        ));
    }
    Ok((vec![x], vec![d[0]]))
}

/// For each position, the offset in the indexed array `x` where its block starts.
fn block_starts(
    op: &str,
    indices: &TensorRef,
    x: &[usize],
) -> std::result::Result<Vec<usize>, String> {
    // SAFETY: read access to the indices.
    let coords = unsafe { indices.to_f64s() };
    starts_of(op, indices.shape[0], &coords, x)
}

/// [`block_starts`] from the `m` coordinate rows of the indices' values (`coords`); the GPU
/// reads its indices back and checks them here.
pub(crate) fn starts_of(
    op: &str,
    m: usize,
    coords: &[f64],
    x: &[usize],
) -> std::result::Result<Vec<usize>, String> {
    let positions = coords.len() / m.max(1);
    let st = strides(x);
    (0..positions)
        .map(|p| {
            (0..m).try_fold(0usize, |at, axis| {
                let v = coords[axis * positions + p];
                let n = x[axis] as f64;
                let i = if v < 0.0 { v + n } else { v };
                if v.fract() != 0.0 || !(0.0..n).contains(&i) {
                    return Err(format!(
                        "{op}: index {v} (coordinate {axis} of position {p}) is outside axis \
                         {axis} of size {}",
                        x[axis]
                    ));
                }
                Ok(at + i as usize * st[axis])
            })
        })
        .collect()
}

fn gather_nd_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let op = def.name;
    let (x, y) = (&ins[0], &outs[0]);
    let starts = block_starts(op, &ins[1], &x.shape)?;
    let block = x.shape[ins[1].shape[0]..].iter().product::<usize>();
    crate::with_dtype!(y.dtype, T => {
        // SAFETY: read access to the data, exclusive access to the output (not alias-safe).
        let (xs, ys) = unsafe { (x.slice::<T>(), y.slice_mut::<T>()) };
        for (out, &at) in ys.chunks_exact_mut(block.max(1)).zip(&starts) {
            out.copy_from_slice(&xs[at..at + out.len()]);
        }
    });
    Ok(())
}

/// scatter_nd assigns, `_backward_gather_nd` adds.
fn scatter_nd_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let op = def.name;
    let (g, y) = (&ins[0], &outs[0]);
    let starts = block_starts(op, &ins[1], &y.shape)?;
    let block = y.shape[ins[1].shape[0]..].iter().product::<usize>();
    let add = op == "_backward_gather_nd";
    crate::with_dtype!(y.dtype, T => {
        // SAFETY: read access to the data, exclusive access to the output (not alias-safe).
        let (gs, ys) = unsafe { (g.slice::<T>(), y.slice_mut::<T>()) };
        ys.fill(T::default());
        for (src, &at) in gs.chunks_exact(block.max(1)).zip(&starts) {
            let dst = &mut ys[at..at + src.len()];
            if add {
                for (d, &v) in dst.iter_mut().zip(src) {
                    *d = d.add(v);
                }
            } else {
                dst.copy_from_slice(src);
            }
        }
    });
    Ok(())
}

// ---- batch_take(a, indices) ----------------------------------------------------------------

/// MXNet's older form of `pick` over the last axis: `out[k] = a[k, clip(indices[k])]` with `a`
/// seen as `(a.size / K, K)`; the output has the indices' shape.
fn infer_batch_take(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let a = &s[0];
    let lanes = a.last().copied().unwrap_or(0);
    let rows = a.iter().product::<usize>() / lanes.max(1);
    if a.is_empty() || s[1].iter().product::<usize>() != rows {
        return Err(shape_error(
            op,
            "indices",
            s[1].clone(),
            format!("{rows} elements, one per row of a {a:?} (its last axis the lanes)"),
        ));
    }
    Ok((vec![s[1].clone()], vec![d[0]]))
}

fn batch_take_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (_, _, ins, outs) = call.parts();
    let (a, idx, y) = (&ins[0], &ins[1], &outs[0]);
    let lanes = a.shape.last().copied().unwrap_or(1).max(1);
    // SAFETY: read access to the indices.
    let picks: Vec<usize> = unsafe { idx.to_f64s() }
        .into_iter()
        .map(|v| (v as i64).clamp(0, lanes as i64 - 1) as usize)
        .collect();
    crate::with_dtype!(y.dtype, T => {
        // SAFETY: read access to `a`, exclusive access to the output (not alias-safe).
        let (xs, ys) = unsafe { (a.slice::<T>(), y.slice_mut::<T>()) };
        for (k, (out, &j)) in ys.iter_mut().zip(&picks).enumerate() {
            *out = xs[k * lanes + j];
        }
    });
    Ok(())
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            alias_safe: false,
            gradient: Some(grad::gather_nd),
            ..OpDef::new(
                "gather_nd",
                Arity::Exactly(2),
                infer_gather_nd,
                gather_nd_kernel,
            )
        }
        .on_gpu(gpu::gather_nd::gather_nd),
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            gradient: Some(grad::scatter_nd),
            ..OpDef::new(
                "scatter_nd",
                Arity::Exactly(2),
                infer_scatter_nd,
                scatter_nd_kernel,
            )
        }
        .on_gpu(gpu::gather_nd::gather_nd),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_gather_nd",
                Arity::AtLeast(2),
                infer_scatter_nd,
                scatter_nd_kernel,
            )
        }
        .on_gpu(gpu::gather_nd::gather_nd),
        OpDef {
            alias_safe: false,
            gradient: Some(grad::none),
            ..OpDef::new(
                "batch_take",
                Arity::Exactly(2),
                infer_batch_take,
                batch_take_kernel,
            )
        }
        .on_gpu(gpu::indexing::batch_take),
    ];
    OPS
}
