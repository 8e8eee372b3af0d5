//! BatchNorm's gradient rules: one backward node reading the output gradient, the data, gamma
//! and the statistics the forward pass used.

use std::sync::Arc;

use crate::error::Result;
use crate::ops::grad::{make, need, out};
use crate::ops::names::op_name;
use crate::ops::{Node, NodeEntry};

/// BatchNorm.
pub(crate) fn batch_norm(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    rule(n, og, false)
}

/// BatchNorm fused with ReLU, whose backward node also reads the output (the sign of which is
/// ReLU's mask).
pub(crate) fn batch_norm_relu(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    rule(n, og, true)
}

fn rule(n: &Arc<Node>, og: &[Option<NodeEntry>], relu: bool) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = vec![need(n, og)?];
    if relu {
        ins.push(out(n, 0));
    }
    // Reads the mean and variance the forward pass used (its hidden outputs).
    ins.extend([
        n.inputs[0].clone(),
        n.inputs[1].clone(),
        out(n, 1),
        out(n, 2),
    ]);
    let op = match relu {
        true => op_name!("_backward_fused_BatchNormReLU"),
        false => op_name!("_backward_BatchNorm"),
    };
    let bw = make(op, format!("{}_backward", n.name), ins, n.attrs.clone())?;
    // No gradient for the moving statistics (auxiliary states).
    Ok(vec![
        Some(out(&bw, 0)),
        Some(out(&bw, 1)),
        Some(out(&bw, 2)),
        None,
        None,
    ])
}
