//! The updates' CPU kernel: each element on its own, split across threads by ranges, in double
//! whatever the weights' dtype (MXNet's attributes are floats: 0.1 updates as 0.1f).

use super::{member, AdamParams, MomentumParams, Params, Update, UpdateParams};
use crate::ops::par::for_ranges;
use crate::ops::{Call, KResult, TensorRef};
use crate::resources::KernelRes;
use crate::Element;

fn e2s(e: crate::NdError) -> String {
    e.to_string()
}

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

pub(super) fn assign_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, _, ins, outs) = call.parts();
    crate::ops::copy_unless_same(&ins[1], &outs[0]);
    Ok(())
}

pub(super) fn update_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let u = member(def)?;
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
        match u {
            Update::Sgd => for_ranges(n, 2, |lo, hi| {
                for i in lo..hi {
                    let wt = r(&ins[0], i);
                    w(&outs[0], i, wt - lr * prepared_grad(r(&ins[1], i), wt, rescale, clip, wd));
                }
            }),
            Update::SgdMom => {
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
            Update::Adam => {
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
        }
    });
    Ok(())
}
