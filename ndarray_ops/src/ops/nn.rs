//! Neural-network ops: clip, one_hot, transpose, Flatten, and the optimizer updates that write
//! into the weight (as MXNet's do).

use super::partial_shapes::{inputs, Found, Known};
use super::Partial;
use crate::ops::Call;

use super::par::for_ranges;
use super::params::{op_params, Params};
use super::{norm_axes, same_dtypes, Arity, Attrs, OpDef, Outputs, TensorRef};
use crate::error::{invalid, shape_error, NdError, Result};
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

// ---- optimizer updates ----------------------------------------------------------------------

/// The gradient as SGD sees it: rescaled, clipped, plus weight decay.
fn prepared_grad(g: f64, w: f64, rescale: f64, clip: f64, wd: f64) -> f64 {
    clipped(g * rescale, clip) + wd * w
}

/// The gradient as Adam sees it: rescaled plus weight decay, then clipped (MXNet's order).
fn adam_grad(g: f64, w: f64, rescale: f64, clip: f64, wd: f64) -> f64 {
    clipped(g * rescale + wd * w, clip)
}

/// `g` clamped to `[-clip, clip]`; a bound that is not positive turns clipping off.
fn clipped(g: f64, clip: f64) -> f64 {
    if clip > 0.0 {
        g.clamp(-clip, clip)
    } else {
        g
    }
}

op_params! {
    /// What every optimizer update reads: its step and how the gradient is prepared first.
    /// MXNet holds them as floats: 0.1 updates as 0.1f, even for float64 weights.
    pub struct UpdateParams for "sgd_update", "sgd_mom_update", "adam_update" {
        lr: f32,
        wd: f32,
        rescale_grad: f32,
        clip_gradient: f32,
    }
}

op_params! {
    /// sgd_mom_update's momentum, beside [`UpdateParams`].
    pub struct MomentumParams for "sgd_mom_update" { momentum: f32 }
}

op_params! {
    /// adam_update's moment decays and epsilon, beside [`UpdateParams`].
    pub struct AdamParams for "adam_update" { beta1: f32, beta2: f32, epsilon: f32 }
}

fn infer_update(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = require_float(op, d)?;
    UpdateParams::get(op, attrs)?;
    for (i, x) in s.iter().enumerate().skip(1) {
        if *x != s[0] {
            return Err(shape_error(
                op,
                format!("input {i}"),
                x.clone(),
                format!("the weight's shape {:?}", s[0]),
            ));
        }
    }
    // Outputs: the new weight, then the new optimizer states (callers pass the states as `out`
    // to update them in place).
    let outputs = s.len() - 1;
    Ok((vec![s[0].clone(); outputs.max(1)], vec![dt; outputs.max(1)]))
}

fn infer_assign(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    if s[1] != s[0] || d[1] != d[0] {
        return Err(shape_error(
            op,
            "value",
            s[1].clone(),
            format!("the variable's shape {:?} and dtype {}", s[0], d[0]),
        ));
    }
    Ok((vec![s[0].clone()], vec![d[0]]))
}

fn assign_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, _, ins, outs) = call.parts();
    super::copy_unless_same(&ins[1], &outs[0]);
    Ok(())
}

fn update_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let p = UpdateParams::get(op, attrs).map_err(e2s)?;
    let (lr, wd, rescale, clip) = (
        f64::from(p.lr),
        f64::from(p.wd),
        f64::from(p.rescale_grad),
        f64::from(p.clip_gradient),
    );
    let n = outs[0].len();
    // Elements are independent: a large update is split across threads by ranges, and each
    // element is read and written by the one thread that owns its range.
    crate::with_dtype!(outs[0].dtype, T => {
        let r = |t: &TensorRef, i: usize| -> f64 {
            // SAFETY: i < n = the shared length; raw reads tolerate outputs aliasing inputs;
            // only this range's thread touches element i.
            unsafe { (*t.ptr::<T>().add(i)).to_f64() }
        };
        let w = |t: &TensorRef, i: usize, v: f64| {
            // SAFETY: as above, for writes.
            unsafe { *t.ptr::<T>().add(i) = T::from_f64(v) }
        };
        match op {
            "sgd_update" => for_ranges(n, 2, |lo, hi| {
                for i in lo..hi {
                    let wt = r(&ins[0], i);
                    w(&outs[0], i, wt - lr * prepared_grad(r(&ins[1], i), wt, rescale, clip, wd));
                }
            }),
            "sgd_mom_update" => {
                let mom = f64::from(MomentumParams::get(op, attrs).map_err(e2s)?.momentum);
                for_ranges(n, 3, |lo, hi| {
                    for i in lo..hi {
                        let wt = r(&ins[0], i);
                        let m = mom * r(&ins[2], i) - lr * prepared_grad(r(&ins[1], i), wt, rescale, clip, wd);
                        w(&outs[1], i, m);
                        w(&outs[0], i, wt + m);
                    }
                });
            }
            "adam_update" => {
                let a = AdamParams::get(op, attrs).map_err(e2s)?;
                let (b1, b2, eps) = (f64::from(a.beta1), f64::from(a.beta2), f64::from(a.epsilon));
                for_ranges(n, 4, |lo, hi| {
                    for i in lo..hi {
                        let wt = r(&ins[0], i);
                        let g = adam_grad(r(&ins[1], i), wt, rescale, clip, wd);
                        let mean = b1 * r(&ins[2], i) + (1.0 - b1) * g;
                        let var = b2 * r(&ins[3], i) + (1.0 - b2) * g * g;
                        w(&outs[1], i, mean);
                        w(&outs[2], i, var);
                        w(&outs[0], i, wt - lr * mean / (var.sqrt() + eps));
                    }
                });
            }
            _ => return Err(format!("no kernel for {op}")),
        }
    });
    Ok(())
}

/// An optimizer update of `arity` inputs: the weight (input 0) and states (inputs 2..)
/// assigned their new values (`assign`, as input-output pairs).
const fn update(name: &'static str, arity: usize, assign: &'static [(usize, usize)]) -> OpDef {
    OpDef {
        inplace: &[(0, 0)],
        assign,
        // The weight's new value, then each state's, hidden: users see the weight.
        outputs: Outputs::Fixed(assign.len(), 1),
        ..OpDef::new(name, Arity::Exactly(arity), infer_update, update_kernel)
    }
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
        .on_gpu(gpu::elemwise::clamp),
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
        update("sgd_update", 2, &[(0, 0)]).on_gpu(gpu::nn::sgd),
        update("sgd_mom_update", 3, &[(0, 0), (2, 1)]).on_gpu(gpu::nn::sgd),
        update("adam_update", 4, &[(0, 0), (2, 1), (3, 2)]).on_gpu(gpu::nn::adam),
        // `_assign(var, rhs)`: the variable's new value is `rhs`.
        OpDef {
            assign: &[(0, 0)],
            backward_ignores: &[0, 1],
            ..OpDef::new("_assign", Arity::Exactly(2), infer_assign, assign_kernel)
        }
        .on_gpu(gpu::elemwise::assign),
    ];
    OPS
}
