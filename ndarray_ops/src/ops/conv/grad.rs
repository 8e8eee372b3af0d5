//! Convolution's, Deconvolution's and UpSampling's gradient rules: each one backward node.

use std::sync::Arc;

use crate::error::Result;
use crate::ops::grad::{backward_node, gather, make, need, out};
use crate::ops::names::op_name;
use crate::ops::{Node, NodeEntry};

/// Convolution: one backward op reading `(ograd, data, weight)`.
pub(crate) fn convolution(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
    backward_node(n, op_name!("_backward_Convolution"), ins)
}

/// Deconvolution: likewise, its own backward op.
pub(crate) fn deconvolution(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
    backward_node(n, op_name!("_backward_Deconvolution"), ins)
}

/// UpSampling: nearest is a gather op; bilinear is a Deconvolution, whose backward op takes
/// that Deconvolution's attributes.
pub(crate) fn upsampling(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    match super::upsampling::bilinear_upsampling(n.op_name(), &n.attrs)? {
        None => gather(n, og),
        Some(deconv) => {
            let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
            let bw = make(
                op_name!("_backward_Deconvolution"),
                format!("{}_backward", n.name),
                ins,
                deconv,
            )?;
            Ok(vec![Some(out(&bw, 0)), Some(out(&bw, 1))])
        }
    }
}
