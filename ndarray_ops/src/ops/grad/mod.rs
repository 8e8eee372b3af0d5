//! Gradient rules, by family (`math`, `nn`, `shape`): each turns a node's output gradients into
//! backward nodes for its inputs, and is named by its op's definition (`OpDef::gradient`). The
//! gradient pass that calls them is `symbol::gradient`.

use std::sync::Arc;

use super::{lookup, Attrs, Node, NodeEntry};
use crate::error::{invalid, Result};

mod math;
mod nn;
mod shape;

pub(crate) use math::*;
pub(crate) use nn::*;
pub(crate) use shape::*;

pub(crate) fn out(node: &Arc<Node>, index: usize) -> NodeEntry {
    NodeEntry {
        node: node.clone(),
        index,
        version: 0,
    }
}

pub(crate) fn make(
    op: &str,
    name: String,
    inputs: Vec<NodeEntry>,
    attrs: Attrs,
) -> Result<Arc<Node>> {
    Node::new(lookup(op)?, &name, attrs, inputs)
}

pub(crate) fn need(node: &Node, og: &[Option<NodeEntry>]) -> Result<NodeEntry> {
    og.first().cloned().flatten().ok_or_else(|| {
        invalid(
            node.op_name(),
            format!("node '{}' has no output gradient", node.name),
        )
    })
}

/// One backward node `op` of `n`'s attributes, reading `ins`, whose outputs are the gradients
/// of `n`'s inputs in order.
pub(crate) fn backward_node(
    n: &Arc<Node>,
    op: &str,
    ins: Vec<NodeEntry>,
) -> Result<Vec<Option<NodeEntry>>> {
    let bw = make(op, format!("{}_backward", n.name), ins, n.attrs.clone())?;
    Ok((0..n.inputs.len()).map(|k| Some(out(&bw, k))).collect())
}

/// Whether an op starts its own gradient (a loss), ignoring head gradients.
pub(crate) fn is_loss(op: &str) -> bool {
    super::loss::is_loss(op)
}
