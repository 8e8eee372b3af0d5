//! Arrays made from attributes alone: `_zeros`, `_ones` (a value everywhere) and `_arange`.

use super::params::{op_params, Params, PositiveInt};
use super::{Arity, Attrs, OpDef, MAX_ELEMENTS};
use crate::error::{invalid, Result};
use crate::ops::gpu;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

fn infer_fill(op: &str, attrs: &Attrs, _s: &[Vec<usize>], _d: &[DType]) -> Infer {
    let shape = attrs
        .ints(op, "shape")?
        .ok_or_else(|| invalid(op, "attribute shape is required"))?;
    // -1, as 0, is a dimension left unknown, which a graph's inference fills from what the
    // output meets (MXNet takes both).
    if shape.iter().any(|&d| d < -1) {
        return Err(invalid(op, format!("shape {shape:?} has a negative size")));
    }
    let dt = attrs.dtype(op)?;
    Ok((
        vec![shape.iter().map(|&d| d.max(0) as usize).collect()],
        vec![dt],
    ))
}

/// `v` in every element of the output: `_zeros`, `_ones`, and `zeros_like`/`ones_like` (whose
/// input only gives the shape).
fn fill(call: Call, v: f64) -> KResult {
    let out = &call.outs[0];
    crate::with_dtype!(out.dtype, T => {
        // SAFETY: exclusive access to the output.
        unsafe { out.slice_mut::<T>() }.fill(T::from_f64(v));
    });
    Ok(())
}

/// `_zeros` and `zeros_like`.
pub(super) fn zeros_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    fill(call, 0.0)
}

/// `_ones` and `ones_like`.
pub(super) fn ones_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    fill(call, 1.0)
}

// ---- _arange -----------------------------------------------------------------------------------

op_params! {
    /// arange's attributes (`dtype` is read by the generic dtype rule).
    pub struct ArangeParams for "_arange" {
        start: f64,
        stop: Option<f64>,
        step: f64,
        repeat: PositiveInt,
        infer_range: bool,
    }
}

/// `_arange`'s values: `start, start + step, ...` below `stop` (or `0..start` without one),
/// each `repeat` times.
pub(crate) fn arange_params(op: &str, attrs: &Attrs) -> Result<(f64, f64, usize, usize)> {
    let a = ArangeParams::get(op, attrs)?;
    let (step, repeat) = (a.step, a.repeat.0);
    let (start, stop) = match a.stop {
        None => (0.0, a.start),
        Some(stop) => (a.start, stop),
    };
    if step == 0.0 || ![start, stop, step].iter().all(|v| v.is_finite()) {
        return Err(invalid(
            op,
            format!("start={start}, stop={stop} and step={step} must be finite, step nonzero"),
        ));
    }
    if a.infer_range {
        return Err(invalid(op, "infer_range is not supported: give stop"));
    }
    let count = ((stop - start) / step).ceil().max(0.0);
    if count * repeat as f64 > MAX_ELEMENTS as f64 {
        return Err(invalid(
            op,
            format!("{count} values, each {repeat} times, are more than 2^48 elements"),
        ));
    }
    Ok((start, step, count as usize, repeat))
}

fn infer_arange(op: &str, attrs: &Attrs, _s: &[Vec<usize>], _d: &[DType]) -> Infer {
    let (_, _, count, repeat) = arange_params(op, attrs)?;
    let dt = attrs.dtype(op)?;
    Ok((vec![vec![count * repeat]], vec![dt]))
}

fn arange_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, _, outs) = call.parts();
    let op = def.name;
    let (start, step, _, repeat) = arange_params(op, attrs).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: exclusive access to the output.
        for (k, v) in unsafe { outs[0].slice_mut::<T>() }.iter_mut().enumerate() {
            *v = T::from_f64(start + step * (k / repeat) as f64);
        }
    });
    Ok(())
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            aliases: &["zeros"],
            alias_safe: false,
            ..OpDef::new("_zeros", Arity::Exactly(0), infer_fill, zeros_kernel)
        }
        .on_gpu(gpu::ops::zeros),
        OpDef {
            aliases: &["ones"],
            alias_safe: false,
            ..OpDef::new("_ones", Arity::Exactly(0), infer_fill, ones_kernel)
        }
        .on_gpu(gpu::ops::ones),
        OpDef {
            aliases: &["arange"],
            alias_safe: false,
            ..OpDef::new("_arange", Arity::Exactly(0), infer_arange, arange_kernel)
        }
        .on_gpu(gpu::indexing::arange),
    ];
    OPS
}
