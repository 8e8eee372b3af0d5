//! Neural-network ops: clip, one_hot, transpose, Flatten, and the optimizer updates that write
//! into the weight (as MXNet's do).

use super::partial_shapes::{inputs, Found, Known};
use super::Partial;
use crate::ops::Call;

use super::params::{op_params, Params};
use super::{norm_axes, same_dtypes, Arity, Attrs, OpDef};
use crate::error::{invalid, NdError, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

fn e2s(e: crate::NdError) -> String {
    e.to_string()
}

pub(crate) fn require_float(op: &str, d: &[DType]) -> Result<DType> {
    let dt = same_dtypes(op, d)?;
    if dt.is_float() {
        Ok(dt)
    } else {
        Err(NdError::DType {
            op: op.into(),
            arg: "input 0".into(),
            found: dt.to_string(),
            expected: "float32 or float64".into(),
        })
    }
}

// ---- clip ---------------------------------------------------------------------------------

op_params! {
    /// clip's attributes.
    pub struct ClipParams for "clip" {
        a_min: f32,
        a_max: f32,
    }
}

/// clip's bounds.
pub(crate) fn clip_bounds(op: &str, attrs: &Attrs) -> Result<(f64, f64)> {
    let a = ClipParams::get(op, attrs)?;
    Ok((f64::from(a.a_min), f64::from(a.a_max)))
}

fn infer_clip(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let (lo, hi) = clip_bounds(op, attrs)?;
    if lo.is_nan() || hi.is_nan() {
        return Err(invalid(
            op,
            format!("a_min {lo} and a_max {hi} must both be numbers"),
        ));
    }
    if lo > hi {
        return Err(invalid(op, format!("a_min {lo} is above a_max {hi}")));
    }
    Ok((vec![s[0].clone()], vec![d[0]]))
}

fn clip_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let (lo, hi) = clip_bounds(def.name, attrs).map_err(e2s)?;
    crate::with_dtype!(outs[0].dtype, T => super::elemwise::unary_map::<T>(&ins[0], &outs[0], move |v: T| {
        T::from_f64(v.to_f64().clamp(lo, hi))
    }));
    Ok(())
}

// ---- one_hot, transpose, Flatten ------------------------------------------------------------

/// one_hot's `depth` (the length of the axis it adds; 0 is an empty one, as in MXNet) and its
/// on and off values, all read at bind so that a bad one fails there.
pub(crate) fn one_hot_params(op: &str, attrs: &Attrs) -> Result<(usize, f64, f64)> {
    let a = OneHotParams::get(op, attrs)?;
    Ok((a.depth, a.on_value, a.off_value))
}

op_params! {
    /// one_hot's attributes (`dtype` is read by the generic dtype rule).
    pub struct OneHotParams for "one_hot" {
        depth: usize,
        on_value: f64,
        off_value: f64,
    }
}

fn infer_one_hot(op: &str, attrs: &Attrs, s: &[Vec<usize>], _d: &[DType]) -> Infer {
    let (depth, _, _) = one_hot_params(op, attrs)?;
    let dt = attrs.dtype(op)?;
    let mut out = s[0].clone();
    out.push(depth);
    Ok((vec![out], vec![dt]))
}

fn one_hot_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (depth, on, off) = one_hot_params(op, attrs).map_err(e2s)?;
    // SAFETY: read access to the indices.
    let idx = unsafe { ins[0].to_f64s() };
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: exclusive access to the (disjoint) output.
        let out = unsafe { outs[0].slice_mut::<T>() };
        out.fill(T::from_f64(off));
        for (row, &i) in idx.iter().enumerate() {
            // Out-of-range indices give an all-off row, as in MXNet.
            if i >= 0.0 && (i as usize) < depth {
                out[row * depth + i as usize] = T::from_f64(on);
            }
        }
    });
    Ok(())
}

op_params! {
    /// transpose's attributes.
    pub struct TransposeParams for "transpose" { axes: Vec<i64> }
}

/// transpose's order of the axes of an `ndim`-dimensional input (reversed when not given).
pub(crate) fn transpose_axes(op: &str, attrs: &Attrs, ndim: usize) -> Result<Vec<usize>> {
    match &TransposeParams::get(op, attrs)?.axes {
        a if a.is_empty() => Ok((0..ndim).rev().collect()),
        a if a.len() == ndim => norm_axes(op, a, ndim),
        a => Err(invalid(
            op,
            format!("axes {a:?} must name each of the {ndim} axes once"),
        )),
    }
}

fn infer_transpose(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let axes = transpose_axes(op, attrs, s[0].len())?;
    Ok((vec![axes.iter().map(|&a| s[0][a]).collect()], vec![d[0]]))
}

fn transpose_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let axes = transpose_axes(op, attrs, ins[0].shape.len()).map_err(e2s)?;
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: read access to the input; exclusive access to the disjoint output.
        let (x, out) = unsafe { (ins[0].slice::<T>(), outs[0].slice_mut::<T>()) };
        super::permute::permute(x, &ins[0].shape, &axes, out);
    });
    Ok(())
}

fn infer_flatten(_: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let x = &s[0];
    let out = match x.len() {
        0 => vec![1, 1],
        _ => vec![x[0], x[1..].iter().product()],
    };
    Ok((vec![out], vec![d[0]]))
}

/// transpose: output axis `k` is input axis `axes[k]`, so each side's known dimensions give
/// the other's (a begin state of unknown size takes it from what the transposed one meets).
fn partial_transpose(op: &str, attrs: &Attrs, ins: &Known, outs: &Known) -> Found {
    let x = ins.first().cloned().flatten();
    let y = outs.first().cloned().flatten();
    let Some(ndim) = x.as_ref().or(y.as_ref()).map(Vec::len) else {
        return inputs(vec![None]);
    };
    let axes = transpose_axes(op, attrs, ndim)?;
    if axes.len() != ndim || axes.iter().any(|&a| a >= ndim) {
        return inputs(vec![None]);
    }
    let mut input = x.unwrap_or_else(|| vec![0; ndim]);
    let mut output = y.unwrap_or_else(|| vec![0; ndim]);
    if input.len() != ndim || output.len() != ndim {
        return inputs(vec![None]);
    }
    for (k, &a) in axes.iter().enumerate() {
        if input[a] == 0 {
            input[a] = output[k];
        } else if output[k] == 0 {
            output[k] = input[a];
        }
    }
    Ok(Partial {
        inputs: vec![Some(input)],
        outputs: vec![Some(output)],
    })
}

pub(super) fn ops() -> &'static [OpDef] {
    const IP1: &[(usize, usize)] = &[(0, 0)];
    static OPS: &[OpDef] = &[
        OpDef {
            inplace: IP1,
            ..OpDef::new("clip", Arity::Exactly(1), infer_clip, clip_kernel)
        }
        .grad(grad::clip)
        .on_gpu(gpu::elemwise::clip),
        OpDef {
            backward_ignores: &[0],
            alias_safe: false,
            ..OpDef::new("one_hot", Arity::Exactly(1), infer_one_hot, one_hot_kernel)
        }
        .grad(grad::none)
        .on_gpu(gpu::elemwise::one_hot),
        OpDef {
            backward_ignores: &[0],
            alias_safe: false,
            ..OpDef::new(
                "transpose",
                Arity::Exactly(1),
                infer_transpose,
                transpose_kernel,
            )
        }
        .partial(partial_transpose)
        .grad(grad::transpose)
        .on_gpu(gpu::shape::transpose),
        OpDef {
            inplace: IP1,
            identity: true,
            backward_ignores: &[0],
            ..OpDef::new(
                "Flatten",
                Arity::Exactly(1),
                infer_flatten,
                super::copy_kernel,
            )
        }
        .grad(grad::flatten)
        .on_gpu(gpu::ops::copy),
    ];
    OPS
}
