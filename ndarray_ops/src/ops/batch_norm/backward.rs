//! `_backward_BatchNorm`: `(ograd, data, gamma, mean, var) -> (data, gamma, beta grads)` from
//! the statistics the forward pass used (its hidden outputs).

use super::forward::ChannelRuns;
use super::lanes;
use crate::ops::par::{for_ranges, Shared};
use crate::ops::Call;
use crate::ops::{check_against_forward, same_dtypes, Attrs, Infer, KResult, TensorRef};
use crate::resources::KernelRes;
use crate::{DType, Element};

pub(crate) fn infer_bn_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    // The forward inputs: beta is shaped like gamma, and the batch statistics the forward pass
    // used like the moving ones.
    let fwd = [&s[1], &s[2], &s[2], &s[3], &s[4]].map(|x| x.clone());
    check_against_forward(
        op,
        "BatchNorm",
        attrs,
        (&fwd, &[dt; 5]),
        &[(0, &s[0], d[0])],
    )?;
    Ok((vec![s[1].clone(), s[2].clone(), s[2].clone()], vec![dt; 3]))
}

pub(super) fn bn_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    bn_backward(op, attrs, &ins[0], None, &ins[1..], outs)
}

/// BatchNorm's backward pass: from the output gradient `dy`, (data, gamma, mean used, variance
/// used) in `ins`, into (data, gamma, beta) gradients in `outs`. With `relu_out` (the output of
/// a fused `_fused_BatchNormReLU`), `dy` is first masked where that output is not
/// positive, as ReLU's backward pass does, into the data gradient's memory: the same
/// arithmetic as ReLU's backward node then BatchNorm's, so the results are bit-identical.
pub(crate) fn bn_backward(
    op: &str,
    attrs: &Attrs,
    dy: &TensorRef,
    relu_out: Option<&TensorRef>,
    ins: &[TensorRef],
    outs: &[TensorRef],
) -> KResult {
    let e = |e: crate::NdError| e.to_string();
    let x = &ins[0];
    let super::Bn {
        layout: (outer, c, inner),
        eps,
        fix_gamma,
        batch_stats,
        ..
    } = super::bn_settings(op, attrs, &x.shape).map_err(e)?;
    let m = (outer * inner).max(1) as f64;
    let runs = ChannelRuns { c, inner, outer };
    crate::with_dtype!(x.dtype, T => {
        let [dy, y] = [dy, relu_out.unwrap_or(dy)].map(|t| Shared::new(t.ptr::<T>()));
        let [xs, gamma, mean, var] = [0, 1, 2, 3].map(|k| Shared::new(ins[k].ptr::<T>()));
        let [dx, dgamma, dbeta] = [0, 1, 2].map(|k| Shared::new(outs[k].ptr::<T>()));
        // Channels are independent: a range of them is done by one thread.
        for_ranges(c, 2 * outer * inner, |lo, hi| {
            for ch in lo..hi {
                // SAFETY: (every block below) read access to the inputs; exclusive access to
                // the three outputs, which are disjoint from them. This range alone touches
                // channel `ch`: its elements of the data and gradients, its entries of the
                // statistics.
                let [mu, var, gamma] = [mean, var, gamma].map(|p| {
                    // SAFETY: entry `ch` of a statistic, read only.
                    unsafe { p.read(ch) }.to_f64()
                });
                // SAFETY: channel `ch`'s runs of X, read only.
                let xs = || unsafe { runs.of(xs, ch) };
                let inv = 1.0 / (var + eps).sqrt();
                let g = if fix_gamma { 1.0 } else { gamma };
                let (sum_dy, sum_dy_xc) = match relu_out {
                    // dY where the output is positive (ReLU's gradient), into dX's runs,
                    // summed as it is written.
                    // SAFETY: channel `ch`'s runs of dY and Y, read only; dX's are this
                    // range's alone, and no other slice of them lives meanwhile.
                    Some(_) => unsafe { runs.of(dy, ch).zip(runs.of(y, ch)).zip(xs()).zip(runs.of_mut(dx, ch)) }
                        .map(|(((d, y), x), o)| lanes::masked_sums(d, y, x, o, mu))
                        .fold((0.0, 0.0), |(a, b), (c, d)| (a + c, b + d)),
                    // SAFETY: channel `ch`'s runs of dY, read only.
                    None => unsafe { runs.of(dy, ch) }
                        .zip(xs())
                        .map(|(d, x)| lanes::sums(d, x, mu))
                        .fold((0.0, 0.0), |(a, b), (c, d)| (a + c, b + d)),
                };
                let sum_dy_xhat = sum_dy_xc * inv;
                // SAFETY: entry `ch` of dBeta and dGamma is this range's alone.
                unsafe {
                    dbeta.write(ch, T::from_f64(sum_dy));
                    dgamma.write(ch, T::from_f64(if fix_gamma { 0.0 } else { sum_dy_xhat }));
                }
                // With batch statistics, x's own share of the mean and variance comes off:
                // g·inv·(dy - Σdy/m - x̂·Σdy·x̂/m), x centred before scaling (as in the
                // forward pass, so that data far from zero does not cancel).
                let (k, shift, tilt) = match batch_stats {
                    true => (g * inv, g * inv * (sum_dy / m), g * inv * inv * (sum_dy_xhat / m)),
                    false => (g * inv, 0.0, 0.0),
                };
                // SAFETY: channel `ch`'s runs of dX are this range's alone; with the mask they
                // hold the gradient summed above, whose slices are no longer alive.
                let dxs = unsafe { runs.of_mut(dx, ch) };
                let c = [k, shift, tilt, mu];
                match relu_out {
                    Some(_) => xs().zip(dxs).for_each(|(xr, or)| lanes::data_grad(None, xr, or, c)),
                    // SAFETY: channel `ch`'s runs of dY, read only.
                    None => unsafe { runs.of(dy, ch) }
                        .zip(xs())
                        .zip(dxs)
                        .for_each(|((dr, xr), or)| lanes::data_grad(Some(dr), xr, or, c)),
                }
            }
        });
    });
    Ok(())
}
