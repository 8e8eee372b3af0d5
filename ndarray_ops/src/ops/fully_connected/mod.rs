//! FullyConnected, `y = x W^T + b` over the data flattened to rows (or over its last axis
//! without `flatten`), and its backward op: every part of the op, CPU and GPU, in this folder.
//!
//! Files: `mod.rs` the attributes, inference, the CPU forward kernel and the op table;
//! `backward.rs` `_backward_FullyConnected`; `partial.rs` partial shapes both ways; `grad.rs`
//! the gradient rule; `gpu.rs` the GPU kernels (the stream's GEMMs).

mod backward;
pub(crate) mod gpu;
mod grad;
mod partial;

use crate::ops::Call;
use ndarray::ShapeBuilder;

use super::params::{op_params, Params, PositiveInt};
use super::{require_float, Arity, Attrs, Flops, OpDef, Outputs, TensorRef};
use crate::error::{invalid, shape_error, Result};
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// FullyConnected's sizes from its data and weight `(hidden, k)`: rows `m` (the data flattened to
/// `k` columns), `hidden`, `k` — what its CPU and GPU kernels, forward and backward, work on.
pub(crate) fn fc_dims(x: &TensorRef, w: &TensorRef) -> (usize, usize, usize) {
    let (hidden, k) = (w.shape[0], w.shape[1]);
    (x.len().checked_div(k).unwrap_or(0), hidden, k)
}

op_params! {
    /// FullyConnected's attributes.
    pub struct FullyConnectedParams for "FullyConnected" {
        num_hidden: PositiveInt,
        no_bias: bool,
        flatten: bool,
    }
}

fn infer_fc(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = require_float(op, d)?;
    let a = FullyConnectedParams::get(op, attrs)?;
    let no_bias = a.no_bias;
    let want = if no_bias { 2 } else { 3 };
    if s.len() != want {
        return Err(invalid(
            op,
            format!(
                "takes {want} inputs (data, weight{}) with no_bias={no_bias}, got {}",
                if no_bias { "" } else { ", bias" },
                s.len()
            ),
        ));
    }
    let (hidden, flatten) = (a.num_hidden.0, a.flatten);
    let x = &s[0];
    if x.is_empty() {
        return Err(shape_error(op, "data", x.clone(), "at least 1 dimension"));
    }
    let (k, mut out) = if flatten {
        (x[1..].iter().product(), vec![x[0]])
    } else {
        (x[x.len() - 1], x[..x.len() - 1].to_vec())
    };
    if s[1] != [hidden, k] {
        return Err(shape_error(
            op,
            "weight",
            s[1].clone(),
            format!("[{hidden}, {k}] (num_hidden, input features of data {x:?})"),
        ));
    }
    if !no_bias && s[2] != [hidden] {
        return Err(shape_error(op, "bias", s[2].clone(), format!("[{hidden}]")));
    }
    out.push(hidden);
    Ok((vec![out], vec![dt]))
}

fn fc_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (x, w, y) = (&ins[0], &ins[1], &outs[0]);
    let (m, hidden, k) = fc_dims(x, w);
    crate::with_dtype!(y.dtype, T => {
        // SAFETY: shapes were inferred from these buffers; the output is disjoint from inputs.
        unsafe {
            let xv = ndarray::ArrayView2::from_shape_ptr((m, k), x.ptr::<T>() as *const T);
            let wt = ndarray::ArrayView2::from_shape_ptr((k, hidden).strides((1, k)), w.ptr::<T>() as *const T);
            let mut yv = ndarray::ArrayViewMut2::from_shape_ptr((m, hidden), y.ptr::<T>());
            T::gemm(&xv, &wt, &mut yv);
            if !FullyConnectedParams::get(op, attrs).map_err(|e| e.to_string())?.no_bias {
                let b = ins[2].slice::<T>();
                for mut row in yv.rows_mut() {
                    for (v, bias) in row.iter_mut().zip(b) {
                        *v = v.add(*bias);
                    }
                }
            }
        }
    });
    Ok(())
}

/// The backward op's outputs: the data's and the weight's gradients, and the bias's unless
/// `no_bias`.
fn grad_outputs(op: &str, attrs: &Attrs) -> Result<(usize, usize)> {
    let n = if FullyConnectedParams::get(op, attrs)?.no_bias {
        2
    } else {
        3
    };
    Ok((n, n))
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            alias_safe: false,
            infer_partial: Some(partial::fully_connected),
            gradient: Some(grad::fully_connected),
            ..OpDef::new("FullyConnected", Arity::AtLeast(2), infer_fc, fc_kernel)
        }
        .cost(Flops::WeightRow, 1.0)
        .on_gpu(gpu::fully_connected),
        OpDef {
            alias_safe: false,
            outputs: Outputs::By(grad_outputs),
            ..OpDef::new(
                "_backward_FullyConnected",
                Arity::Exactly(3),
                backward::infer_fc_backward,
                backward::fc_backward_kernel,
            )
        }
        .on_gpu(gpu::fully_connected_backward),
    ];
    OPS
}
