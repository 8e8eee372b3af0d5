//! `Activation` (its `act_type` names a unary member, whose kernel it runs) and
//! `_backward_Activation` (`(ograd, output) -> input gradient`: the activations' derivatives
//! are written in the output, so the input need not be kept).

use super::kernel::forward;
use super::Unary;
use crate::error::{shape_error, Result};
use crate::ops::elemwise::binary_map;
use crate::ops::nn::require_float;
use crate::ops::params::{attr_enum, op_params, Params};
use crate::ops::Call;
use crate::ops::{same_dtypes, Arity, Attrs, Infer, KResult, OpDef};
use crate::resources::KernelRes;
use crate::{DType, Element};

attr_enum! {
    /// An Activation's function.
    pub enum ActType {
        /// `max(x, 0)`.
        Relu = "relu",
        /// `1 / (1 + exp(-x))`.
        Sigmoid = "sigmoid",
        /// `tanh(x)`.
        Tanh = "tanh",
        /// `log(1 + exp(x))`.
        SoftRelu = "softrelu",
        /// `x / (1 + |x|)`.
        Softsign = "softsign",
    }
}

op_params! {
    /// Activation's attributes.
    pub struct ActivationParams for "Activation" {
        act_type: ActType,
    }
}

impl ActType {
    /// The unary member it computes.
    pub(crate) const fn member(self) -> Unary {
        match self {
            ActType::Relu => Unary::Relu,
            ActType::Sigmoid => Unary::Sigmoid,
            ActType::Tanh => Unary::Tanh,
            ActType::SoftRelu => Unary::SoftRelu,
            ActType::Softsign => Unary::Softsign,
        }
    }

    /// dy/dx as a function of the output y.
    pub(crate) const fn derivative(self) -> fn(f64) -> f64 {
        match self {
            ActType::Relu => |y| if y > 0.0 { 1.0 } else { 0.0 },
            ActType::Sigmoid => |y| y * (1.0 - y),
            ActType::Tanh => |y| 1.0 - y * y,
            ActType::SoftRelu => |y| 1.0 - (-y).exp(),
            // y = x / (1 + |x|), so 1 + |x| = 1 / (1 - |y|) and dy/dx = (1 - |y|)^2.
            ActType::Softsign => |y| (1.0 - y.abs()) * (1.0 - y.abs()),
        }
    }

    /// The `act_type` of an Activation or `_backward_Activation` node.
    pub(crate) fn of(op: &str, attrs: &Attrs) -> Result<ActType> {
        Ok(ActivationParams::get(op, attrs)?.act_type)
    }
}

fn infer_activation(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    ActType::of(op, attrs)?;
    Ok((vec![s[0].clone()], vec![require_float(op, d)?]))
}

fn activation_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let m = ActType::of(def.name, attrs)
        .map_err(|e| e.to_string())?
        .member();
    crate::with_dtype!(outs[0].dtype, T => forward::<T>(m, &ins[0], &outs[0]));
    Ok(())
}

fn infer_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    ActType::of(op, attrs)?;
    if s[0] != s[1] {
        return Err(shape_error(
            op,
            "output",
            s[1].clone(),
            format!("{:?} like the gradient", s[0]),
        ));
    }
    Ok((vec![s[0].clone()], vec![dt]))
}

/// `dx = dy * f'(y)`, computed in f64 and rounded once. ReLU's derivative, 0 or 1, is exact in
/// every type, so its product is taken in the array's own type, where the loop vectorizes.
fn backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let act = ActType::of(def.name, attrs).map_err(|e| e.to_string())?;
    let f = act.derivative();
    let (dy, y, dx) = (&ins[0], &ins[1], &outs[0]);
    crate::with_dtype!(dx.dtype, T => {
        let (zero, one) = (T::default(), T::from_f64(1.0));
        match act {
            ActType::Relu => binary_map::<T>(dy, y, dx, move |g: T, y: T| {
                g.mul(if y > zero { one } else { zero })
            }),
            _ => binary_map::<T>(dy, y, dx, move |g: T, y: T| {
                T::from_f64(g.to_f64() * f(y.to_f64()))
            }),
        }
    });
    Ok(())
}

/// Activation's gradient: one `_backward_Activation` node on the output.
fn gradient(
    n: &std::sync::Arc<crate::ops::Node>,
    og: &[Option<crate::ops::NodeEntry>],
) -> Result<Vec<Option<crate::ops::NodeEntry>>> {
    use crate::ops::grad::{make, need, out};
    let bw = make(
        crate::ops::names::op_name!("_backward_Activation"),
        format!("{}_backward", n.name),
        vec![need(n, og)?, out(n, 0)],
        n.attrs.clone(),
    )?;
    Ok(vec![Some(out(&bw, 0))])
}

pub(super) const ACTIVATION: OpDef = OpDef {
    inplace: &[(0, 0)],
    backward_ignores: &[0],
    ..OpDef::new(
        "Activation",
        Arity::Exactly(1),
        infer_activation,
        activation_kernel,
    )
}
.pointwise(true)
.grad(gradient)
.on_gpu(super::gpu::activation);

pub(super) const BACKWARD: OpDef = OpDef {
    inplace: &[(0, 0)],
    ..OpDef::new(
        "_backward_Activation",
        Arity::Exactly(2),
        infer_backward,
        backward_kernel,
    )
}
.pointwise(true)
.on_gpu(super::gpu::activation_backward);
