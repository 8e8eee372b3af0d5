//! Backward ops (MXNet's `_backward_*` names) and the elementwise sum that aggregates gradients.

use super::nn::Normalization;
use super::par::{for_ranges, map_lanes, Shared};
use super::params::Params;
use super::{
    check_against_forward, named_forward, same_dtypes, same_shapes, Arity, Attrs, OpDef, Outputs,
    TensorRef,
};
use crate::error::{shape_error, Result};
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

// ---- _backward_SoftmaxOutput: (output, label) -> (data grad, label grad) ---------------------

fn infer_softmax_output_backward(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    if s[0].len() != 2 || s[1] != [s[0][0]] {
        return Err(shape_error(
            op,
            "label",
            s[1].clone(),
            format!(
                "[{}] for a 2-D output {:?}",
                s[0].first().copied().unwrap_or(0),
                s[0]
            ),
        ));
    }
    Ok((vec![s[0].clone(), s[1].clone()], vec![d[0], d[1]]))
}

/// SoftmaxOutput's gradient scale and ignored label (with `use_ignore`), once its labels are
/// checked: each names a class (its integer part, as MXNet reads it) unless it is ignored. A
/// label outside `[0, classes)`, or NaN, would silently train towards nothing, so it is refused.
/// The CPU kernel and the GPU path both ask this.
pub(crate) fn softmax_output_scale(
    op: &str,
    attrs: &Attrs,
    labels: &[f64],
    classes: usize,
) -> Result<(f64, Option<f64>)> {
    let a = super::nn::SoftmaxOutputParams::get(op, attrs)?;
    let scale = f64::from(a.grad_scale);
    // With use_ignore, rows labelled ignore_label pass no gradient and do not count as valid.
    let ignore = a.use_ignore.then_some(f64::from(a.ignore_label));
    let ignored = |l: f64| ignore == Some(l);
    let class = |l: f64| (0.0..classes as f64).contains(&l);
    if let Some((i, l)) = labels
        .iter()
        .enumerate()
        .find(|&(_, &l)| !ignored(l) && !class(l))
    {
        return Err(crate::error::invalid(
            op,
            format!(
                "label {l} of row {i} is not a class in [0, {classes}) (rows to skip need \
                 use_ignore=True with their ignore_label)"
            ),
        ));
    }
    // MXNet divides in float: grad_scale / count as 2.0f / 3.0f.
    let per = |count: usize| f64::from(scale as f32 / count.max(1) as f32);
    let scale = match a.normalization {
        Normalization::Batch => per(labels.len()),
        Normalization::Valid => per(labels.iter().filter(|&&l| !ignored(l)).count()),
        Normalization::Null => scale,
    };
    Ok((scale, ignore))
}

fn softmax_output_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (p, label) = (&ins[0], &ins[1]);
    let (n, c) = (p.shape[0], p.shape[1]);
    // SAFETY: read access to the labels.
    let labels = unsafe { label.to_f64s() };
    let (scale, ignore) = softmax_output_scale(op, attrs, &labels, c).map_err(|e| e.to_string())?;
    let ignored = |l: f64| ignore == Some(l);
    crate::with_dtype!(p.dtype, T => {
        // SAFETY: read access to the inputs, exclusive access to the disjoint outputs.
        let (pv, g, lg) = unsafe { (p.slice::<T>(), outs[0].slice_mut::<T>(), outs[1].slice_mut::<T>()) };
        for i in 0..n {
            for j in 0..c {
                let hit = if labels[i] as usize == j && labels[i] >= 0.0 { 1.0 } else { 0.0 };
                let v = if ignored(labels[i]) { 0.0 } else { (pv[i * c + j].to_f64() - hit) * scale };
                g[i * c + j] = T::from_f64(v);
            }
        }
        lg.fill(T::default());
    });
    Ok(())
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            aliases: &["ElementWiseSum", "_grad_add"],
            inplace: &[(0, 0)],
            ..OpDef::new("add_n", Arity::AtLeast(1), infer_add_n, add_n_kernel)
        }
        .pointwise(true)
        .grad(grad::add_n)
        .on_gpu(gpu::reduce::add_n),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_SoftmaxOutput",
                Arity::Exactly(2),
                infer_softmax_output_backward,
                softmax_output_backward_kernel,
            )
        }
        .outputs(Outputs::all(2))
        .on_gpu(gpu::nn::softmax_output_backward),
    ];
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

// ---- softmax / log_softmax: (ograd, output) -> input grad -----------------------------------

fn infer_like_first(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, &d[..2])?;
    if s[0] != s[1] {
        return Err(shape_error(
            op,
            "input 1",
            s[1].clone(),
            format!("{:?} like the gradient", s[0]),
        ));
    }
    Ok((vec![s[0].clone()], vec![dt]))
}

fn softmax_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (g, y) = (&ins[0], &ins[1]);
    let (axis, temp) = super::softmax_axis(op, attrs, g.shape.len()).map_err(|e| e.to_string())?;
    let log = op == "_backward_log_softmax";
    softmax_grad(g, y, &outs[0], (&g.shape, axis, temp, log));
    Ok(())
}

/// The gradient of a softmax (`log`: log-softmax) along `axis` of `shape` at temperature
/// `temp`: from the output gradient `g` and the forward output `y` into `dx`, which the caller
/// has exclusive access to and which is disjoint from both.
pub(crate) fn softmax_grad(
    g: &TensorRef,
    y: &TensorRef,
    dx: &TensorRef,
    (shape, axis, temp, log): (&[usize], usize, f64, bool),
) {
    crate::with_dtype!(g.dtype, T => {
        // SAFETY: read access to the inputs, exclusive access to the disjoint output.
        let (gv, yv, dx) = unsafe { (g.slice::<T>(), y.slice::<T>(), Shared::new(dx.ptr::<T>())) };
        map_lanes(shape, axis, [gv, yv], dx, |_: &mut (), _, [g, y], dx| {
            // y = log softmax: dx = (g - softmax * sum(g)) / temp; y = softmax:
            // dx = y * (g - sum(g * y)) / temp.
            let (g, y) = (|k: usize| g[k].to_f64(), |k: usize| y[k].to_f64());
            let n = dx.len();
            let total: f64 = match log {
                true => (0..n).map(g).sum(),
                false => (0..n).map(|k| g(k) * y(k)).sum(),
            };
            for (k, d) in dx.iter_mut().enumerate() {
                *d = T::from_f64(match log {
                    true => (g(k) - y(k).exp() * total) / temp,
                    false => y(k) * (g(k) - total) / temp,
                });
            }
        });
    });
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
                "_backward_softmax",
                Arity::Exactly(2),
                infer_like_first,
                softmax_backward_kernel,
            )
        }
        .on_gpu(gpu::lanes::softmax),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_log_softmax",
                Arity::Exactly(2),
                infer_like_first,
                softmax_backward_kernel,
            )
        }
        .on_gpu(gpu::lanes::softmax),
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
