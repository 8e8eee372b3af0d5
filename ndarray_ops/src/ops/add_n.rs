//! add_n (ElementWiseSum): the elementwise sum of any number of arrays, which also
//! aggregates gradients.

use super::par::{for_ranges, Shared};
use super::{same_dtypes, same_shapes, Arity, Attrs, OpDef};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

fn infer_add_n(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    same_shapes(op, s)?;
    Ok((vec![s[0].clone()], vec![dt]))
}

/// `add_n`: the output is summed a block at a time into a buffer on the stack, input after
/// input (vectorized), then written, so that an output that is one of the inputs is read before
/// it is written; blocks are independent, so a large sum is split across threads. Each element
/// is `((0 + x0) + x1) + ...`, in input order, as an element-at-a-time loop sums it.
fn add_n_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, _, ins, outs) = call.parts();
    const BLOCK: usize = 512;
    let n = outs[0].len();
    crate::with_dtype!(outs[0].dtype, T => {
        let o = Shared::new(outs[0].ptr::<T>());
        let xs: Vec<Shared<T>> = ins.iter().map(|t| Shared::new(t.ptr::<T>())).collect();
        for_ranges(n.div_ceil(BLOCK), BLOCK * (ins.len() + 1), |lo, hi| {
            let mut acc = [T::default(); BLOCK];
            for b in lo..hi {
                let (start, len) = (b * BLOCK, BLOCK.min(n - b * BLOCK));
                let acc = &mut acc[..len];
                acc.fill(T::default());
                for x in &xs {
                    // SAFETY: every input has the output's length; this block is read here only
                    // (an input that is the output is written below, after every read of it).
                    let x = unsafe { std::slice::from_raw_parts(x.get().add(start), len) };
                    for (a, &v) in acc.iter_mut().zip(x) {
                        *a = a.add(v);
                    }
                }
                // SAFETY: this block of the output is this range's alone, and its reads are done.
                unsafe { std::slice::from_raw_parts_mut(o.get().add(start), len) }
                    .copy_from_slice(acc);
            }
        });
    });
    Ok(())
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[OpDef {
        aliases: &["ElementWiseSum", "_grad_add"],
        inplace: &[(0, 0)],
        ..OpDef::new("add_n", Arity::AtLeast(1), infer_add_n, add_n_kernel)
    }
    .pointwise(true)
    .grad(grad::add_n)
    .on_gpu(gpu::reduce::add_n)];
    OPS
}
