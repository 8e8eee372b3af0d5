//! Loss heads besides SoftmaxOutput: the regression outputs (Linear, Logistic, MAE), MakeLoss
//! and `make_loss`, which start their own gradient as MXNet's do (the head gradient given to
//! `backward` is ignored), and `softmax_cross_entropy`, an ordinary op whose scalar output
//! takes a head gradient.
//!
//! A regression output's forward pass is its prediction (the data, or its sigmoid); its
//! gradient is `grad_scale / m * (out - label)` (MAE: the sign of it), `m` being the outputs
//! per sample (the label's size over its first dimension).

use super::params::{op_params, Params};
use super::softmax::Normalization;
use super::{same_dtypes, Arity, Attrs, OpDef, Outputs, TensorRef};
use crate::error::{shape_error, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// Whether `op` is a loss head that ignores head gradients.
pub(crate) fn is_loss(op: &str) -> bool {
    matches!(
        op,
        "SoftmaxOutput"
            | "LinearRegressionOutput"
            | "LogisticRegressionOutput"
            | "MAERegressionOutput"
            | "MakeLoss"
            | "make_loss"
    )
}

op_params! {
    /// The regression outputs' attributes.
    pub struct RegressionParams for "LinearRegressionOutput", "LogisticRegressionOutput",
        "MAERegressionOutput" {
        grad_scale: f32,
    }
}

op_params! {
    /// MakeLoss's attributes.
    pub struct MakeLossParams for "MakeLoss" {
        grad_scale: f32,
        valid_thresh: f32,
        normalization: Normalization,
    }
}

/// A regression output's `grad_scale`.
pub(crate) fn grad_scale(op: &str, attrs: &Attrs) -> Result<f64> {
    Ok(f64::from(RegressionParams::get(op, attrs)?.grad_scale))
}

/// MakeLoss's `grad_scale`, its `normalization` and `valid_thresh`; `make_loss` (which has
/// none of them) takes their defaults.
pub(crate) fn make_loss_params(op: &str, attrs: &Attrs) -> Result<(f64, Normalization, f64)> {
    let a = MakeLossParams::get(op, attrs)?;
    Ok((
        f64::from(a.grad_scale),
        a.normalization,
        f64::from(a.valid_thresh),
    ))
}

/// `(data, label) -> prediction`. The label has the data's elements: its shape, or, for data
/// of one output per sample `(n, 1)`, `(n,)`.
fn infer_regression(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    grad_scale(op, attrs)?;
    let (x, label) = (&s[0], &s[1]);
    let same_count = x.iter().product::<usize>() == label.iter().product::<usize>();
    if label != x && !(same_count && label.first() == x.first()) {
        return Err(shape_error(
            op,
            "label",
            label.clone(),
            format!("{x:?} (the data's shape)"),
        ));
    }
    Ok((vec![x.clone()], vec![same_dtypes(op, d)?]))
}

/// LogisticRegressionOutput's prediction: the data's sigmoid (the other heads predict the data
/// itself, a copy).
fn logistic_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, _, ins, outs) = call.parts();
    let sigmoid = super::unary::Unary::Sigmoid;
    crate::with_dtype!(outs[0].dtype, T => {
        super::unary::kernel::forward::<T>(sigmoid, &ins[0], &outs[0])
    });
    Ok(())
}

/// `(out, label) -> (d data, d label)`; the label's gradient is zero.
/// `(output, label)`: the output has the data's shape, so they fit the forward op as its inputs.
fn infer_regression_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    let forward = op.trim_start_matches("_backward_");
    super::check_against_forward(op, forward, attrs, (s, d), &[])?;
    Ok((vec![s[0].clone(), s[1].clone()], vec![dt; 2]))
}

/// The squared-error heads' gradient: the prediction's error.
fn squared_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    regression_backward(def, attrs, ins, outs, false)
}

/// MAERegressionOutput's gradient: the sign of the prediction's error.
fn mae_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    regression_backward(def, attrs, ins, outs, true)
}

/// `grad_scale` over the outputs per sample times the prediction's error, or (`mae`) its sign;
/// zero for the label.
fn regression_backward(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    mae: bool,
) -> KResult {
    let op = def.name;
    let scale = grad_scale(op, attrs).map_err(|e| e.to_string())?;
    let label = &ins[1];
    let per_sample = label.len() / label.shape.first().copied().unwrap_or(1).max(1);
    let k = scale / per_sample.max(1) as f64;
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: read access to the prediction and label, exclusive access to the gradients
        // (not planned in place: the op is not alias-safe).
        let (y, l, dx, dl) = unsafe {
            (ins[0].slice::<T>(), label.slice::<T>(), outs[0].slice_mut::<T>(), outs[1].slice_mut::<T>())
        };
        for ((dx, y), l) in dx.iter_mut().zip(y).zip(l) {
            let diff = y.to_f64() - l.to_f64();
            let g = if mae { diff.signum() * (diff != 0.0) as u8 as f64 } else { diff };
            *dx = T::from_f64(k * g);
        }
        dl.fill(T::from_f64(0.0));
    });
    Ok(())
}

/// MakeLoss's gradient: `grad_scale`, divided by the batch size (`normalization=batch`) or by
/// the count of elements above `valid_thresh` (`valid`, at least 1).
fn make_loss_scale(op: &str, attrs: &Attrs, out: &TensorRef) -> Result<f64> {
    let (scale, normalization, thresh) = make_loss_params(op, attrs)?;
    Ok(match normalization {
        Normalization::Null => scale,
        Normalization::Batch => scale / out.shape.first().copied().unwrap_or(1).max(1) as f64,
        Normalization::Valid => {
            let valid = crate::with_dtype!(out.dtype, T => {
                // SAFETY: read access to the output.
                unsafe { out.slice::<T>() }.iter().filter(|v| v.to_f64() > thresh).count()
            });
            scale / valid.max(1) as f64
        }
    })
}

fn infer_make_loss(_: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    Ok((vec![s[0].clone()], vec![d[0]]))
}

/// MakeLoss's attributes are read here too, so that a malformed one fails at the call.
fn infer_make_loss_scaled(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    make_loss_params(op, attrs)?;
    infer_make_loss(op, attrs, s, d)
}

/// `_backward_MakeLoss(out) -> d data`.
fn make_loss_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let v = make_loss_scale(op, attrs, &ins[0]).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: exclusive access to the output, which is not the input (not alias-safe).
        unsafe { outs[0].slice_mut::<T>() }.fill(T::from_f64(v));
    });
    Ok(())
}

/// `softmax_cross_entropy(data (n, k), label (n,)) -> (1,)`: the summed negative log
/// likelihood of the labels.
fn infer_cross_entropy(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let (x, label) = (&s[0], &s[1]);
    if x.len() != 2 || label.len() != 1 || label[0] != x[0] {
        return Err(shape_error(
            op,
            "data, label",
            [x.clone(), label.clone()].concat(),
            "data (n, k) and label (n,)",
        ));
    }
    Ok((vec![vec![1]], vec![same_dtypes(op, d)?]))
}

/// The class a label names, checked against the row width `k`.
pub(crate) fn class_of(label: f64, k: usize, op: &str) -> std::result::Result<usize, String> {
    if label < 0.0 || label as usize >= k || label.fract() != 0.0 {
        return Err(format!(
            "{op}: label {label} is not a class index below {k}"
        ));
    }
    Ok(label as usize)
}

/// Each row of `x` (rows of `k` scores) as f64, with its label's class and its log-sum-exp:
/// what the cross entropy and its gradient both start from.
fn scored_rows<T: Element>(
    x: &[T],
    labels: &[T],
    k: usize,
    op: &str,
) -> std::result::Result<Vec<(Vec<f64>, usize, f64)>, String> {
    x.chunks(k.max(1))
        .zip(labels)
        .map(|(row, label)| {
            let row: Vec<f64> = row.iter().map(|v| v.to_f64()).collect();
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            Ok((row, class_of(label.to_f64(), k, op)?, lse))
        })
        .collect()
}

fn cross_entropy_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let op = def.name;
    let k = ins[0].shape[1];
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: read access to the inputs, exclusive access to the output.
        let (x, l, out) = unsafe { (ins[0].slice::<T>(), ins[1].slice::<T>(), outs[0].slice_mut::<T>()) };
        let rows = scored_rows(x, l, k, op)?;
        out[0] = T::from_f64(rows.iter().map(|(row, c, lse)| lse - row[*c]).sum());
    });
    Ok(())
}

/// `(ograd (1,), data, label) -> d data = ograd * (softmax(data) - one_hot(label))`.
fn infer_cross_entropy_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let forward = "softmax_cross_entropy";
    super::check_against_forward(op, forward, attrs, (&s[1..], &d[1..]), &[(0, &s[0], d[0])])?;
    Ok((vec![s[1].clone()], vec![same_dtypes(op, &d[..2])?]))
}

fn cross_entropy_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let op = def.name;
    let k = ins[1].shape[1];
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: read access to the inputs, exclusive access to the output (not alias-safe).
        let (g, x, l, dx) = unsafe {
            (ins[0].slice::<T>(), ins[1].slice::<T>(), ins[2].slice::<T>(), outs[0].slice_mut::<T>())
        };
        let g = g[0].to_f64();
        for ((row, c, lse), drow) in scored_rows(x, l, k, op)?.into_iter().zip(dx.chunks_mut(k.max(1))) {
            for (j, (d, v)) in drow.iter_mut().zip(&row).enumerate() {
                let p = (v - lse).exp() - if j == c { 1.0 } else { 0.0 };
                *d = T::from_f64(g * p);
            }
        }
    });
    Ok(())
}

pub(super) fn ops() -> &'static [OpDef] {
    const fn regression(name: &'static str, kernel: super::KernelFn) -> OpDef {
        OpDef {
            infer_partial: Some(super::partial_shapes::label_like_data),
            inplace: &[(0, 0)],
            backward_ignores: &[0],
            ..OpDef::new(name, Arity::Exactly(2), infer_regression, kernel)
        }
    }
    const fn regression_backward(name: &'static str, kernel: super::KernelFn) -> OpDef {
        OpDef {
            alias_safe: false,
            ..OpDef::new(name, Arity::Exactly(2), infer_regression_backward, kernel)
        }
        // The data's gradient and the label's.
        .outputs(Outputs::all(2))
    }
    static OPS: &[OpDef] = &[
        regression("LinearRegressionOutput", super::copy_kernel)
            .grad(grad::linear_regression)
            .on_gpu(gpu::ops::copy),
        regression("LogisticRegressionOutput", logistic_kernel)
            .grad(grad::logistic_regression)
            .on_gpu(gpu::nn::logistic),
        regression("MAERegressionOutput", super::copy_kernel)
            .grad(grad::mae_regression)
            .on_gpu(gpu::ops::copy),
        regression_backward("_backward_LinearRegressionOutput", squared_backward_kernel)
            .on_gpu(gpu::nn::regression_backward),
        regression_backward(
            "_backward_LogisticRegressionOutput",
            squared_backward_kernel,
        )
        .on_gpu(gpu::nn::regression_backward),
        regression_backward("_backward_MAERegressionOutput", mae_backward_kernel)
            .on_gpu(gpu::nn::regression_backward),
        OpDef {
            identity: true,
            backward_ignores: &[0],
            gradient: Some(grad::make_loss_scaled),
            ..OpDef::new(
                "MakeLoss",
                Arity::Exactly(1),
                infer_make_loss_scaled,
                super::copy_kernel,
            )
        }
        .on_gpu(gpu::ops::copy),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_MakeLoss",
                Arity::Exactly(1),
                infer_make_loss,
                make_loss_backward_kernel,
            )
        }
        .on_gpu(gpu::nn::make_loss_backward),
        OpDef {
            identity: true,
            gradient: Some(grad::make_loss),
            ..OpDef::new(
                "make_loss",
                Arity::Exactly(1),
                infer_make_loss,
                super::copy_kernel,
            )
        }
        .on_gpu(gpu::ops::copy),
        OpDef {
            alias_safe: false,
            gradient: Some(grad::softmax_cross_entropy),
            ..OpDef::new(
                "softmax_cross_entropy",
                Arity::Exactly(2),
                infer_cross_entropy,
                cross_entropy_kernel,
            )
        }
        .on_gpu(gpu::indexing::cross_entropy),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_softmax_cross_entropy",
                Arity::Exactly(3),
                infer_cross_entropy_backward,
                cross_entropy_backward_kernel,
            )
        }
        .on_gpu(gpu::indexing::cross_entropy_backward),
    ];
    OPS
}
