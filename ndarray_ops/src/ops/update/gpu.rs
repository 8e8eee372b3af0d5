//! The updates on the GPU (`update.cu`): SGD with and without momentum, and Adam in double.

use super::{member, AdamParams, MomentumParams, Params, Update, UpdateParams};
use crate::ops::gpu::args::{int, kernel_args, ptr};
use crate::ops::gpu::ops::e2s;
use crate::ops::gpu::Stream;
use crate::ops::{Call, KResult};

kernel_args! {
    /// sgd_update and sgd_mom_update.
    struct Sgd [sgd, sgd_mom] {
        /// Elements.
        n: i64,
        /// The new weights.
        out: *mut f32,
        /// The new momentum (`sgd_mom`).
        mom_out: *mut f32,
        /// The weights.
        w: *mut f32,
        /// The gradient.
        grad: *mut f32,
        /// The momentum (`sgd_mom`).
        mom: *mut f32,
        /// The learning rate.
        lr: f32,
        /// Weight decay.
        wd: f32,
        /// What the gradient is multiplied by first.
        rescale: f32,
        /// The gradient's bound (none where not positive).
        clip: f32,
        /// The momentum's decay.
        momentum: f32,
    }

    /// adam_update, in double.
    struct Adam [adam] {
        /// Elements.
        n: i64,
        /// The new weights.
        out: *mut f32,
        /// The new mean.
        mean_out: *mut f32,
        /// The new variance.
        var_out: *mut f32,
        /// The weights.
        w: *mut f32,
        /// The gradient.
        grad: *mut f32,
        /// The mean.
        mean: *mut f32,
        /// The variance.
        var: *mut f32,
        /// The learning rate.
        lr: f32,
        /// Weight decay.
        wd: f32,
        /// What the gradient is multiplied by first.
        rescale: f32,
        /// The gradient's bound (none where not positive).
        clip: f32,
        /// The mean's decay.
        beta1: f32,
        /// The variance's decay.
        beta2: f32,
        /// Added to the deviation.
        epsilon: f32,
    }
}

/// sgd_update(weight, grad) and sgd_mom_update(weight, grad, mom) -> (weight[, mom]).
pub(crate) fn sgd(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let u = member(def)?;
    let p = UpdateParams::get(op, attrs).map_err(e2s)?;
    let n = outs[0].len();
    let a = Sgd {
        n: int(n),
        out: ptr(&outs[0]),
        mom_out: std::ptr::null_mut(),
        w: ptr(&ins[0]),
        grad: ptr(&ins[1]),
        mom: std::ptr::null_mut(),
        lr: p.lr,
        wd: p.wd,
        rescale: p.rescale_grad,
        clip: p.clip_gradient,
        momentum: 0.0,
    };
    match u {
        Update::Sgd => s.run(k::sgd, n, &a),
        Update::SgdMom | Update::Adam => {
            let a = Sgd {
                mom_out: ptr(&outs[1]),
                mom: ptr(&ins[2]),
                momentum: MomentumParams::get(op, attrs).map_err(e2s)?.momentum,
                ..a
            };
            s.run(k::sgd_mom, n, &a)
        }
    }
}

/// adam_update(weight, grad, mean, var) -> (weight, mean, var).
pub(crate) fn adam(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (p, q) = (
        UpdateParams::get(op, attrs).map_err(e2s)?,
        AdamParams::get(op, attrs).map_err(e2s)?,
    );
    let n = outs[0].len();
    let a = Adam {
        n: int(n),
        out: ptr(&outs[0]),
        mean_out: ptr(&outs[1]),
        var_out: ptr(&outs[2]),
        w: ptr(&ins[0]),
        grad: ptr(&ins[1]),
        mean: ptr(&ins[2]),
        var: ptr(&ins[3]),
        lr: p.lr,
        wd: p.wd,
        rescale: p.rescale_grad,
        clip: p.clip_gradient,
        beta1: q.beta1,
        beta2: q.beta2,
        epsilon: q.epsilon,
    };
    s.run(k::adam, n, &a)
}
