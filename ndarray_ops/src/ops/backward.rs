//! The elementwise sum that aggregates gradients (add_n), reshape_like, and the backward ops of
//! the reductions and of broadcasting (`_broadcast_backward`, `_sum_to_like`).

use super::par::{for_ranges, Shared};
use super::{check_against_forward, named_forward, same_dtypes, same_shapes, Arity, Attrs, OpDef};
use crate::error::shape_error;
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

// ---- add_n ----------------------------------------------------------------------------------

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

// ---- reshape_like: a's elements in b's shape --------------------------------------------------

fn infer_reshape_like(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    if s[0].iter().product::<usize>() != s[1].iter().product::<usize>() {
        return Err(shape_error(
            op,
            "rhs",
            s[1].clone(),
            format!("as many elements as lhs {:?}", s[0]),
        ));
    }
    Ok((vec![s[1].clone()], vec![d[0]]))
}

pub(super) fn more_ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[OpDef {
        identity: true,
        backward_ignores: &[1],
        inplace: &[(0, 0)],
        ..OpDef::new(
            "reshape_like",
            Arity::Exactly(2),
            infer_reshape_like,
            super::copy_kernel,
        )
    }
    .on_gpu(gpu::ops::copy)];
    OPS
}

// ---- _broadcast_backward: spreads a reduced gradient back over the input's shape -----------
// (ograd of sum/mean, input) -> input grad. Attributes are the reduction's.

fn infer_reduce_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let forward = named_forward(op, attrs, "__reduce__", None, &["sum", "mean"])?;
    check_against_forward(op, forward, attrs, (&s[1..], &d[1..]), &[(0, &s[0], d[0])])?;
    Ok((vec![s[1].clone()], vec![d[0]]))
}

fn reduce_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (g, o) = (&ins[0], &outs[0]);
    let shape = &o.shape;
    let axes = super::reduce::axes_of(op, attrs, shape.len()).map_err(|e| e.to_string())?;
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    let scale = if attrs.get("__reduce__") == Some(super::reduce::Reduce::Mean.name()) {
        1.0 / count.max(1) as f64
    } else {
        1.0
    };
    // The reduced gradient laid out with kept dims (reduced axes have size 1) broadcasts along
    // the reduced axes.
    let kept: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(d, &n)| if axes.contains(&d) { 1 } else { n })
        .collect();
    let gstride = super::elemwise::broadcast_strides(&kept, shape);
    crate::with_dtype!(o.dtype, T => {
        // SAFETY: read access to the gradient, exclusive access to the disjoint output.
        let (gs, out) = unsafe { (g.slice::<T>(), o.slice_mut::<T>()) };
        let mut idx = vec![0usize; shape.len()];
        for v in out.iter_mut() {
            let src: usize = idx.iter().zip(&gstride).map(|(i, s)| i * s).sum();
            *v = T::from_f64(gs[src].to_f64() * scale);
            for d in (0..shape.len()).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    });
    Ok(())
}

// ---- _sum_to_like: sums a broadcast gradient back to an operand's shape ----------------------

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
    let lead = gs.len() - os.len();
    // Each element of the gradient adds into the operand element it was broadcast from.
    let mut ostride = vec![0usize; gs.len()];
    let mut acc = 1;
    for d in (0..os.len()).rev() {
        ostride[d + lead] = if os[d] == 1 { 0 } else { acc };
        acc *= os[d];
    }
    crate::with_dtype!(o.dtype, T => {
        // SAFETY: read access to the gradient, exclusive access to the disjoint output.
        let (gv, out) = unsafe { (g.slice::<T>(), o.slice_mut::<T>()) };
        out.fill(T::default());
        let mut idx = vec![0usize; gs.len()];
        for v in gv {
            let dst: usize = idx.iter().zip(&ostride).map(|(i, s)| i * s).sum();
            out[dst] = out[dst].add(*v);
            for d in (0..gs.len()).rev() {
                idx[d] += 1;
                if idx[d] < gs[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    });
    Ok(())
}

pub(super) fn grad_ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_broadcast_backward",
                Arity::Exactly(2),
                infer_reduce_backward,
                reduce_backward_kernel,
            )
        }
        .on_gpu(gpu::reduce::broadcast_backward),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_sum_to_like",
                Arity::Exactly(2),
                infer_sum_to_like,
                sum_to_like_kernel,
            )
        }
        .on_gpu(gpu::reduce::sum_to_like),
    ];
    OPS
}
