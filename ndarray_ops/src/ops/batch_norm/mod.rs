//! BatchNorm (MXNet's: batch statistics in training, which also update the moving mean and
//! variance with `momentum`; the moving ones otherwise, or with `use_global_stats`) and its
//! backward op: every part of the op, CPU and GPU, in this folder. The fused BatchNorm-ReLU and
//! Convolution-BatchNorm ops (`ops::fused`) run these kernels too.
//!
//! Files: `mod.rs` the attributes, settings, inference and op table; `forward.rs` and
//! `lanes.rs` the CPU kernels (the float32 lanes); `backward.rs` `_backward_BatchNorm`;
//! `partial.rs` partial shapes; `grad.rs` the gradient rules; `gpu.rs` and `batch_norm.cu` the
//! GPU kernels.

mod backward;
mod forward;
pub(crate) mod gpu;
pub(crate) mod grad;
mod lanes;
pub(crate) mod partial;

pub(crate) use backward::{bn_backward, infer_bn_backward};
pub(crate) use forward::{bn_forward, bn_inference_map};

use super::params::{op_params, Params};
use super::{norm_axes, same_dtypes, Arity, Attrs, Flops, OpDef, Outputs};
use crate::error::{shape_error, NdError, Result};
use crate::ops::stochastic::is_train;
use crate::ops::Infer;
use crate::DType;

op_params! {
    /// BatchNorm's attributes. `eps` is a double whose default is the float `1e-3f`
    /// (0.0010000000474974513) and `momentum` a float (0.9 blends as 0.9f), as MXNet holds
    /// them: a float64 model agrees with MXNet to rounding only with these exact values
    /// (tests/mxnet_files.rs).
    pub struct BatchNormParams for "BatchNorm" {
        eps: f64,
        momentum: f32,
        fix_gamma: bool,
        use_global_stats: bool,
        output_mean_var: bool,
        axis: i64,
        cudnn_off: bool,
    }
}

/// What a BatchNorm node (or its backward node) computes with, read from its attributes and
/// its data's shape, once per run.
pub(crate) struct Bn {
    /// (outer, channels, inner) around the channel axis.
    pub(crate) layout: (usize, usize, usize),
    pub(crate) eps: f64,
    pub(crate) momentum: f64,
    /// gamma read as 1, its gradient 0.
    pub(crate) fix_gamma: bool,
    /// Normalize by the batch's own statistics (training, unless `use_global_stats`).
    pub(crate) batch_stats: bool,
    /// Fold the batch statistics into the moving ones: not in a node recomputed during
    /// backward (the forward pass did, once).
    pub(crate) update_moving: bool,
}

impl Bn {
    /// `[mean, scale, beta]` of the map `(x - mean)·scale + beta` that normalizes a channel of
    /// these statistics (gamma read as 1 with `fix_gamma`).
    fn affine(&self, mean: f64, var: f64, gamma: f64, beta: f64) -> [f64; 3] {
        let g = if self.fix_gamma { 1.0 } else { gamma };
        [mean, g / (var + self.eps).sqrt(), beta]
    }
}

/// [`Bn`] for data of shape `shape` (at least 2 dimensions).
pub(crate) fn bn_settings(op: &str, attrs: &Attrs, shape: &[usize]) -> Result<Bn> {
    let a = BatchNormParams::get(op, attrs)?;
    let axis = norm_axes(op, &[a.axis], shape.len())?[0];
    let mirrored = attrs.bool(op, super::graph::MIRROR_ATTR, false)?;
    Ok(Bn {
        layout: (
            shape[..axis].iter().product(),
            shape[axis],
            shape[axis + 1..].iter().product(),
        ),
        eps: a.eps,
        momentum: f64::from(a.momentum),
        fix_gamma: a.fix_gamma,
        batch_stats: is_train(op, attrs)? && !a.use_global_stats,
        update_moving: !mirrored,
    })
}

pub(super) fn infer_bn(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    if !dt.is_float() {
        return Err(NdError::DType {
            op: op.into(),
            arg: "data".into(),
            found: dt.to_string(),
            expected: "float32 or float64".into(),
        });
    }
    if s[0].len() < 2 {
        return Err(shape_error(
            op,
            "data",
            s[0].clone(),
            "at least 2 dimensions",
        ));
    }
    // Read here too so that a bad value fails at bind rather than when the op runs.
    let (_, c, _) = bn_settings(op, attrs, &s[0])?.layout;
    for (i, name) in [
        (1, "gamma"),
        (2, "beta"),
        (3, "moving_mean"),
        (4, "moving_var"),
    ] {
        if s[i] != [c] {
            return Err(shape_error(
                op,
                name,
                s[i].clone(),
                format!("[{c}] (the channels of data {:?})", s[0]),
            ));
        }
    }
    // Outputs: the normalized data, then the mean and variance used (MXNet's hidden outputs).
    Ok((vec![s[0].clone(), vec![c], vec![c]], vec![dt; 3]))
}

/// BatchNorm's passes over its bytes in the recomputation planner's model: in training it
/// reads its input for the batch statistics and again to normalize, with more arithmetic per
/// element (fitted to a ResNet-50 step's per-op times: see `symbol::mirror`).
pub(crate) const BN_PASSES: f64 = 2.5;

/// BatchNorm's counts: the output, then the batch's mean and variance, hidden unless
/// `output_mean_var` (also those of the fused ops that end in a BatchNorm).
pub(crate) fn bn_outputs(op: &str, attrs: &Attrs) -> Result<(usize, usize)> {
    Ok(super::norm_outputs(
        BatchNormParams::get(op, attrs)?.output_mean_var,
    ))
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            alias_safe: false,
            mutate_inputs: &[3, 4],
            infer_partial: Some(partial::batch_norm),
            gradient: Some(grad::batch_norm),
            outputs: Outputs::By(bn_outputs),
            ..OpDef::new("BatchNorm", Arity::Exactly(5), infer_bn, forward::bn_kernel)
        }
        .cost(Flops::One, BN_PASSES)
        .on_gpu(gpu::batch_norm),
        OpDef {
            alias_safe: false,
            outputs: Outputs::all(3),
            ..OpDef::new(
                "_backward_BatchNorm",
                Arity::Exactly(5),
                infer_bn_backward,
                backward::bn_backward_kernel,
            )
        }
        .on_gpu(gpu::batch_norm_backward),
    ];
    OPS
}
