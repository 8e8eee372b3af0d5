//! The softmax family's CPU kernels: a softmax of each lane along an axis (in f32 through the
//! vectorized `exp`), its gradient, and SoftmaxOutput's gradient with its label checks.

use rten_simd::SimdUnaryOp;

use super::{softmax_axis, Normalization, Params, SoftmaxOutputParams};
use crate::error::Result;
use crate::ops::par::{map_lanes, Shared};
use crate::ops::reduce::fold_run;
use crate::ops::{Attrs, Call, KResult, TensorRef};
use crate::resources::KernelRes;
use crate::{DType, Element};

fn e2s(e: crate::NdError) -> String {
    e.to_string()
}

/// softmax or log_softmax (`log`) of the input along the attributes' axis.
fn lane_softmax(call: Call, log: bool) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let a = &ins[0];
    let (axis, temp) = softmax_axis(def.name, attrs, a.shape.len()).map_err(e2s)?;
    softmax(a, &outs[0], (&a.shape, axis, temp, log));
    Ok(())
}

pub(super) fn softmax_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    lane_softmax(call, false)
}

pub(super) fn log_softmax_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    lane_softmax(call, true)
}

/// SoftmaxOutput: a softmax over axis 1 (the class axis), at no temperature (MXNet's takes no
/// such attribute).
pub(super) fn softmax_output_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, _, ins, outs) = call.parts();
    let a = &ins[0];
    softmax(
        a,
        &outs[0],
        (&a.shape, 1.min(a.shape.len() - 1), 1.0, false),
    );
    Ok(())
}

/// Softmax (`log`: log-softmax) of `a` along `axis` of `shape` at temperature `temp`, into
/// `o`, which the caller has exclusive access to and which is disjoint from `a` (the kernels
/// using it are not alias-safe, so the registry copies an aliased input). See
/// [`softmax_lanes`].
pub(crate) fn softmax(a: &TensorRef, o: &TensorRef, lanes: (&[usize], usize, f64, bool)) {
    crate::with_dtype!(o.dtype, T => {
        // SAFETY: read access to the input, exclusive access to the disjoint output.
        let (x, y) = unsafe { (a.slice::<T>(), Shared::new(o.ptr::<T>())) };
        if T::DTYPE == DType::F32 {
            softmax_lanes::<T, f32>(x, y, lanes, |e| rten_vecmath::Exp {}.map_mut(e));
        } else {
            softmax_lanes::<T, f64>(x, y, lanes, |e| e.iter_mut().for_each(|v| *v = v.exp()));
        }
    });
}

/// Softmax (`log`: log-softmax) of every lane of `x` (of `shape`) along `axis` into `y`,
/// computed in `F` (f32 arrays in f32 through the vectorized `exp`, others in f64): per lane
/// s = x / temp - max, z = the sum of exp(s) (in f64, in interleaved partial sums), then
/// exp(s) / z or s - ln z. Each element takes one exp; `exp` maps a lane to its exponentials
/// in place. The output is disjoint from the input.
fn softmax_lanes<T: Element, F: Element>(
    x: &[T],
    y: Shared<T>,
    (shape, axis, temp, log): (&[usize], usize, f64, bool),
    exp: impl Fn(&mut [F]) + Sync,
) {
    // `s` holds the shifted lane, `e` its exponentials where `s` is still needed (log-softmax).
    map_lanes(
        shape,
        axis,
        [x],
        y,
        |(s, e): &mut (Vec<F>, Vec<F>), _, [x], out| {
            s.clear();
            match temp {
                1.0 => s.extend(x.iter().map(|v| F::from_f64(v.to_f64()))),
                _ => s.extend(x.iter().map(|v| F::from_f64(v.to_f64() / temp))),
            }
            // The largest of the lane (NaNs passed over): which of equal zeros wins shifts nothing.
            let larger = |m: F, v: F| if v > m { v } else { m };
            let m = fold_run(s, F::from_f64(f64::NEG_INFINITY), larger, larger);
            s.iter_mut().for_each(|v| *v = v.sub(m));
            let sum = |e: &[F]| fold_run(e, 0.0, |z, v: F| z + v.to_f64(), |a, b| a + b);
            if log {
                e.clear();
                e.extend_from_slice(s);
                exp(e);
                let lnz = F::from_f64(sum(e).ln());
                for (o, v) in out.iter_mut().zip(s.iter()) {
                    *o = T::from_f64(v.sub(lnz).to_f64());
                }
            } else {
                exp(s);
                let z = F::from_f64(sum(s));
                for (o, v) in out.iter_mut().zip(s.iter()) {
                    *o = T::from_f64(v.div(z).to_f64());
                }
            }
        },
    );
}

/// The gradient of softmax or log_softmax (`log`): `(ograd, output) -> data gradient`.
fn lane_softmax_backward(call: Call, log: bool) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let (g, y) = (&ins[0], &ins[1]);
    let (axis, temp) = softmax_axis(def.name, attrs, g.shape.len()).map_err(e2s)?;
    softmax_grad(g, y, &outs[0], (&g.shape, axis, temp, log));
    Ok(())
}

pub(super) fn softmax_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    lane_softmax_backward(call, false)
}

pub(super) fn log_softmax_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    lane_softmax_backward(call, true)
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
    let a = SoftmaxOutputParams::get(op, attrs)?;
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

pub(super) fn softmax_output_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
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
