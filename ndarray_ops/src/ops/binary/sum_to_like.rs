//! `_sum_to_like`, the gradient of a broadcast operand: the output's gradient summed back to
//! the operand's shape.

use crate::error::shape_error;
use crate::ops::gpu;
use crate::ops::par::Walk;
use crate::ops::Call;
use crate::ops::{Arity, Attrs, OpDef};
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

fn infer_sum_to_like(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let (g, like) = (&s[0], &s[1]);
    // `like` broadcasts to the gradient's shape: aligned at the right, each of its dimensions
    // is 1 or the gradient's.
    let lead = g.len().checked_sub(like.len());
    let fits =
        lead.is_some_and(|lead| like.iter().zip(&g[lead..]).all(|(&l, &n)| l == 1 || l == n));
    if !fits {
        return Err(shape_error(
            op,
            "like",
            like.clone(),
            format!("a shape that broadcasts to the gradient's {g:?}"),
        ));
    }
    Ok((vec![like.clone()], vec![d[0]]))
}

fn sum_to_like_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, _, ins, outs) = call.parts();
    let (g, o) = (&ins[0], &outs[0]);
    let (gs, os) = (&g.shape, &o.shape);
    // Each element of the gradient adds into the operand element it was broadcast from.
    let ostride = crate::ops::elemwise::broadcast_strides(os, gs);
    crate::with_dtype!(o.dtype, T => {
        // SAFETY: read access to the gradient, exclusive access to the disjoint output.
        let (gv, out) = unsafe { (g.slice::<T>(), o.slice_mut::<T>()) };
        out.fill(T::default());
        Walk::new(gs, &ostride, &ostride).each(0, gv.len(), |k, dst, _| {
            out[dst] = out[dst].add(gv[k]);
        });
    });
    Ok(())
}

pub(crate) fn backward_ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[OpDef {
        alias_safe: false,
        ..OpDef::new(
            "_sum_to_like",
            Arity::Exactly(2),
            infer_sum_to_like,
            sum_to_like_kernel,
        )
    }
    .on_gpu(gpu::reduce::sum_to_like)];
    OPS
}
