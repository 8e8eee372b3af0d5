//! The optimizer updates that write into the weight, as MXNet's do: `sgd_update`,
//! `sgd_mom_update` and `adam_update` (a typed family: [`Update`]), and `_assign`, the
//! variable's new value. `kernel.rs` holds the CPU kernel, `gpu.rs` and `update.cu` the GPU's;
//! both match on the member.

pub(crate) mod gpu;
mod kernel;

use super::family::Member;
use super::params::{op_params, Params};
use super::{require_float, Arity, Attrs, OpDef, Outputs};
use crate::error::shape_error;
use crate::ops::Infer;
use crate::DType;

/// An optimizer update: which rule moves the weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Update {
    /// `w -= lr * g`.
    Sgd,
    /// `m = momentum * m - lr * g; w += m`.
    SgdMom,
    /// Adam's moments and step, in double.
    Adam,
}

impl Update {
    /// MXNet's name of the op.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Update::Sgd => "sgd_update",
            Update::SgdMom => "sgd_mom_update",
            Update::Adam => "adam_update",
        }
    }

    /// The states the update reads and writes beside the weight (inputs 2.., outputs 1..).
    const fn assign(self) -> &'static [(usize, usize)] {
        match self {
            Update::Sgd => &[(0, 0)],
            Update::SgdMom => &[(0, 0), (2, 1)],
            Update::Adam => &[(0, 0), (2, 1), (3, 2)],
        }
    }
}

/// The update `def` is, or an error naming the op.
fn member(def: &OpDef) -> Result<Update, String> {
    match def.member {
        Member::Update(u) => Ok(u),
        _ => Err(format!("{} is not an optimizer update", def.name)),
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

/// The op of update `u`: the weight (input 0) and the states (inputs 2..) assigned their new
/// values; the weight's new value is the visible output, the states' hidden ones.
const fn update(u: Update) -> OpDef {
    let assign = u.assign();
    OpDef {
        inplace: &[(0, 0)],
        assign,
        outputs: Outputs::Fixed(assign.len(), 1),
        member: Member::Update(u),
        ..OpDef::new(
            u.name(),
            Arity::Exactly(assign.len() + 1),
            infer_update,
            kernel::update_kernel,
        )
    }
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        update(Update::Sgd).on_gpu(gpu::sgd),
        update(Update::SgdMom).on_gpu(gpu::sgd),
        update(Update::Adam).on_gpu(gpu::adam),
        // `_assign(var, rhs)`: the variable's new value is `rhs`.
        OpDef {
            assign: &[(0, 0)],
            backward_ignores: &[0, 1],
            ..OpDef::new(
                "_assign",
                Arity::Exactly(2),
                infer_assign,
                kernel::assign_kernel,
            )
        }
        .on_gpu(crate::ops::gpu::elemwise::assign),
    ];
    OPS
}
