//! Ops of one array that are no member of the unary family: those that compute nothing from
//! their input's values (`zeros_like`, `ones_like`, `BlockGrad`), the casts (`Cast` and its
//! backward op `_cast_like`), and `hard_sigmoid`, whose function has attributes.

use super::params::{op_params, Params};
use super::{Arity, Attrs, OpDef};
use crate::error::Result;
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            backward_ignores: &[0],
            gradient: Some(grad::none),
            ..OpDef::new(
                "zeros_like",
                Arity::Exactly(1),
                infer_same,
                super::creation::zeros_kernel,
            )
        }
        .on_gpu(gpu::ops::zeros),
        OpDef {
            backward_ignores: &[0],
            gradient: Some(grad::none),
            ..OpDef::new(
                "ones_like",
                Arity::Exactly(1),
                infer_same,
                super::creation::ones_kernel,
            )
        }
        .on_gpu(gpu::ops::ones),
        // The input itself, behind which no gradient flows.
        OpDef {
            aliases: &["stop_gradient"],
            identity: true,
            backward_ignores: &[0],
            ..OpDef::new(
                "BlockGrad",
                Arity::Exactly(1),
                infer_same,
                super::copy_kernel,
            )
        }
        .grad(grad::none)
        .on_gpu(gpu::ops::copy),
        OpDef {
            inplace: &[(0, 0)],
            gradient: Some(grad::hard_sigmoid),
            ..OpDef::new(
                "hard_sigmoid",
                Arity::Exactly(1),
                infer_hard_sigmoid,
                hard_sigmoid_kernel,
            )
        }
        .on_gpu(gpu::elemwise::hard_sigmoid),
        // Cast's backward: the output gradient in the forward input's dtype.
        OpDef {
            backward_ignores: &[1],
            ..OpDef::new(
                "_cast_like",
                Arity::Exactly(2),
                infer_cast_like,
                cast_kernel,
            )
        }
        .on_gpu(gpu::ops::copy),
        OpDef {
            aliases: &["cast"],
            backward_ignores: &[0],
            gradient: Some(grad::cast),
            ..OpDef::new("Cast", Arity::Exactly(1), infer_cast, cast_kernel)
        }
        .on_gpu(gpu::ops::copy),
    ];
    OPS
}

fn infer_same(_: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    Ok((vec![s[0].clone()], vec![d[0]]))
}

op_params! {
    /// Cast's attributes.
    pub struct CastParams for "Cast" { dtype: DType }
}

fn infer_cast(op: &str, attrs: &Attrs, s: &[Vec<usize>], _: &[DType]) -> Infer {
    Ok((vec![s[0].clone()], vec![CastParams::get(op, attrs)?.dtype]))
}

fn cast_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, _, ins, outs) = call.parts();
    crate::with_dtype!(ins[0].dtype, S => {
        crate::with_dtype!(outs[0].dtype, T => {
            // SAFETY: read access to the input, exclusive access to the output (a cast is never
            // planned in place: its dtypes differ or it is not listed as in-place).
            let (x, y) = unsafe { (ins[0].slice::<S>(), outs[0].slice_mut::<T>()) };
            for (y, x) in y.iter_mut().zip(x) {
                *y = T::from_f64(x.to_f64());
            }
        })
    });
    Ok(())
}

fn infer_cast_like(_: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    Ok((vec![s[0].clone()], vec![d[1]]))
}

/// `hard_sigmoid`'s slope and offset: `y = clip(alpha * x + beta, 0, 1)`.
pub(crate) fn hard_sigmoid_params(op: &str, attrs: &Attrs) -> Result<(f64, f64)> {
    let a = HardSigmoidParams::get(op, attrs)?;
    Ok((f64::from(a.alpha), f64::from(a.beta)))
}

op_params! {
    /// hard_sigmoid's attributes.
    pub struct HardSigmoidParams for "hard_sigmoid" {
        alpha: f32,
        beta: f32,
    }
}

fn infer_hard_sigmoid(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    hard_sigmoid_params(op, attrs)?;
    infer_same(op, attrs, s, d)
}

fn hard_sigmoid_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (alpha, beta) = hard_sigmoid_params(op, attrs).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => {
        super::elemwise::unary_map::<T>(&ins[0], &outs[0], |x| {
            T::from_f64((alpha * x.to_f64() + beta).clamp(0.0, 1.0))
        })
    });
    Ok(())
}
