//! The softmax family: `softmax` and `log_softmax` over any axis at any temperature, the
//! `SoftmaxOutput` head (a softmax over the class axis whose gradient is `prob - onehot(label)`),
//! and their backward ops.
//!
//! `kernel.rs` holds the CPU kernels (the lane softmax and its gradient, which the norms'
//! SoftmaxActivation also runs), `grad.rs` the gradient rules, `gpu.rs` and `softmax.cu` the
//! GPU entries (the lane kernels themselves are shared with the norms in `gpu/lanes.rs`).
//! Each op names its own inference and kernels: nothing here asks an op's name.

pub(crate) mod gpu;
mod grad;
mod kernel;

pub(crate) use kernel::{softmax, softmax_grad, softmax_output_scale};

use super::params::{attr_enum, op_params, Params};
use super::partial_shapes::{inputs, Found, Known};
use super::{norm_axes, require_float, same_dtypes, Arity, Attrs, OpDef, Outputs};
use crate::error::{invalid, shape_error, Result};
use crate::ops::Infer;
use crate::DType;

attr_enum! {
    /// What a loss's gradient is divided by.
    pub enum Normalization {
        /// Nothing.
        Null = "null",
        /// The batch size.
        Batch = "batch",
        /// The count of valid (not ignored) samples.
        Valid = "valid",
    }
}

op_params! {
    /// SoftmaxOutput's attributes.
    pub struct SoftmaxOutputParams for "SoftmaxOutput" {
        grad_scale: f32,
        ignore_label: f32,
        multi_output: bool,
        use_ignore: bool,
        preserve_shape: bool,
        normalization: Normalization,
        out_grad: bool,
        smooth_alpha: f32,
    }
}

op_params! {
    /// The attributes of softmax and log_softmax.
    pub struct SoftmaxParams for "softmax", "log_softmax" {
        axis: i64,
        temperature: Option<f64>,
        use_length: Option<bool>,
    }
}

/// A softmax's axis (of `ndim`) and temperature (1 when `None`).
pub(crate) fn softmax_axis(op: &str, attrs: &Attrs, ndim: usize) -> Result<(usize, f64)> {
    let a = SoftmaxParams::get(op, attrs)?;
    if ndim == 0 {
        return Err(invalid(op, "needs at least one dimension"));
    }
    Ok((
        norm_axes(op, &[a.axis], ndim)?[0],
        a.temperature.unwrap_or(1.0),
    ))
}

/// softmax and log_softmax: the data's shape, once the axis is checked.
fn infer_softmax(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = require_float(op, &d[..1])?;
    softmax_axis(op, attrs, s[0].len())?;
    Ok((vec![s[0].clone()], vec![dt]))
}

/// SoftmaxOutput: data `(batch, classes...)` and label `(batch,)`; the output is the softmax of
/// the data. MXNet's options this op does not implement are refused rather than ignored.
fn infer_softmax_output(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = require_float(op, &d[..1])?;
    let a = SoftmaxOutputParams::get(op, attrs)?;
    for (key, on) in [
        ("multi_output", a.multi_output),
        ("preserve_shape", a.preserve_shape),
        ("out_grad", a.out_grad),
    ] {
        if on {
            return Err(invalid(
                op,
                format!("{key}=True is not supported (only {key}=false)"),
            ));
        }
    }
    if a.smooth_alpha != 0.0 {
        return Err(invalid(
            op,
            "smooth_alpha (label smoothing) is not supported",
        ));
    }
    if s[0].is_empty() || s[1].first() != s[0].first() {
        return Err(shape_error(
            op,
            "label",
            s[1].clone(),
            format!("the batch size of data {:?} as its first axis", s[0]),
        ));
    }
    Ok((vec![s[0].clone()], vec![dt]))
}

/// The backward ops of softmax and log_softmax: `(ograd, output) -> data gradient`, all of
/// one shape.
fn infer_softmax_backward(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
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

/// `_backward_SoftmaxOutput`: `(output, label) -> (data gradient, label gradient)`.
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

/// SoftmaxOutput: the label has the data's batch axis.
fn partial_softmax_output(_op: &str, _attrs: &Attrs, ins: &Known, _outs: &Known) -> Found {
    let mut out = vec![None; ins.len()];
    if let Some(Some(x)) = ins.first() {
        if let (Some(&n), true) = (x.first(), ins.len() > 1) {
            out[1] = Some(vec![n]);
        }
    }
    inputs(out)
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            backward_ignores: &[0],
            alias_safe: false,
            ..OpDef::new(
                "softmax",
                Arity::Exactly(1),
                infer_softmax,
                kernel::softmax_kernel,
            )
        }
        .grad(grad::softmax)
        .on_gpu(gpu::softmax),
        OpDef {
            backward_ignores: &[0],
            alias_safe: false,
            ..OpDef::new(
                "log_softmax",
                Arity::Exactly(1),
                infer_softmax,
                kernel::log_softmax_kernel,
            )
        }
        .grad(grad::log_softmax)
        .on_gpu(gpu::log_softmax),
        OpDef {
            infer_partial: Some(partial_softmax_output),
            gradient: Some(grad::softmax_output),
            backward_ignores: &[0],
            alias_safe: false,
            ..OpDef::new(
                "SoftmaxOutput",
                Arity::Exactly(2),
                infer_softmax_output,
                kernel::softmax_output_kernel,
            )
        }
        .on_gpu(gpu::softmax_output),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_softmax",
                Arity::Exactly(2),
                infer_softmax_backward,
                kernel::softmax_backward_kernel,
            )
        }
        .on_gpu(gpu::softmax_backward),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_log_softmax",
                Arity::Exactly(2),
                infer_softmax_backward,
                kernel::log_softmax_backward_kernel,
            )
        }
        .on_gpu(gpu::log_softmax_backward),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_SoftmaxOutput",
                Arity::Exactly(2),
                infer_softmax_output_backward,
                kernel::softmax_output_backward_kernel,
            )
        }
        .outputs(Outputs::all(2))
        .on_gpu(gpu::softmax_output_backward),
    ];
    OPS
}
