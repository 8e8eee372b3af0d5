//! LeakyReLU's gradient rule.

use std::sync::Arc;

use crate::error::Result;
use crate::ops::grad::{backward_node, need};
use crate::ops::names::op_name;
use crate::ops::{Node, NodeEntry};

/// LeakyReLU: one backward node reading the output gradient, the data and prelu's gamma.
pub(super) fn leaky_relu(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = vec![need(n, og)?];
    ins.extend(n.inputs.iter().cloned());
    backward_node(n, op_name!("_backward_LeakyReLU"), ins)
}
