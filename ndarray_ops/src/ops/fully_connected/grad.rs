//! FullyConnected's gradient rule: one backward node reading `(ograd, data, weight)`.

use std::sync::Arc;

use crate::error::Result;
use crate::ops::grad::{backward_node, need};
use crate::ops::names::op_name;
use crate::ops::{Node, NodeEntry};

/// FullyConnected: one backward op reading `(ograd, data, weight)`.
pub(crate) fn fully_connected(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
    backward_node(n, op_name!("_backward_FullyConnected"), ins)
}
