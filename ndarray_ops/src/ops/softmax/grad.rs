//! The softmax family's gradient rules: softmax and log_softmax read their output and the
//! output's gradient; SoftmaxOutput, a loss head, reads its output and the label alone.

use std::sync::Arc;

use crate::error::Result;
use crate::ops::grad::{make, need, op1, out};
use crate::ops::names::op_name;
use crate::ops::{Node, NodeEntry};

/// One backward node `(ograd, output) -> data gradient` of op `bw`.
fn through_output(
    bw: &'static str,
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    Ok(vec![Some(op1(
        bw,
        format!("{}_backward", n.name),
        vec![need(n, og)?, out(n, 0)],
        n.attrs.clone(),
    )?)])
}

pub(super) fn softmax(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    through_output(op_name!("_backward_softmax"), n, og)
}

pub(super) fn log_softmax(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    through_output(op_name!("_backward_log_softmax"), n, og)
}

/// SoftmaxOutput ignores the head gradient, as MXNet's loss heads do.
pub(super) fn softmax_output(
    n: &Arc<Node>,
    _og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let bw = make(
        op_name!("_backward_SoftmaxOutput"),
        format!("{}_backward", n.name),
        vec![out(n, 0), n.inputs[1].clone()],
        n.attrs.clone(),
    )?;
    Ok(vec![Some(out(&bw, 0)), Some(out(&bw, 1))])
}
