//! The graph vocabulary (what NNVM is to MXNet): a [`Node`] applies an op to [`NodeEntry`]s of
//! other nodes; a gradient rule ([`GradFn`]) turns a node's output gradients into backward
//! nodes; a [`GradReq`] says what happens to an argument's gradient. Symbols, the gradient pass,
//! autograd's tape and the executor all speak it; it sits with the ops because a node names its
//! op's definition and an op's definition names its gradient rule.

use std::sync::Arc;

use super::{num_outputs, Arity, Attrs, OpDef};
use crate::error::{invalid, NdError, Result};

/// A node: an op applied to entries of other nodes, or a variable (no op).
pub struct Node {
    /// The op; `None` for a variable.
    pub op: Option<&'static OpDef>,
    /// The node's name.
    pub name: String,
    /// Attributes (for variables: `__shape__`, `__dtype__`, ...).
    pub attrs: Attrs,
    /// Inputs.
    pub inputs: Vec<NodeEntry>,
    outputs: (usize, usize),
}

impl Drop for Node {
    /// Releases a chain of nodes one link at a time: a graph a million nodes deep (a recorded
    /// imperative loop) would otherwise drop recursively and overflow the stack.
    fn drop(&mut self) {
        let mut stack = std::mem::take(&mut self.inputs);
        while let Some(entry) = stack.pop() {
            if let Ok(mut node) = Arc::try_unwrap(entry.node) {
                stack.append(&mut node.inputs);
            }
        }
    }
}

impl Node {
    /// A variable named `name` (attributes: `__shape__`, `__dtype__`, ...).
    pub(crate) fn variable(name: &str, attrs: Attrs) -> Arc<Node> {
        Arc::new(Node {
            op: None,
            name: name.to_string(),
            attrs,
            inputs: vec![],
            outputs: (1, 1),
        })
    }

    /// A node of op `def` named `name`, its inputs and attributes checked against the op
    /// (arity, attribute names and values, output count).
    pub(crate) fn new(
        def: &'static OpDef,
        name: &str,
        attrs: Attrs,
        inputs: Vec<NodeEntry>,
    ) -> Result<Arc<Node>> {
        let ok = match def.arity {
            Arity::Exactly(n) => inputs.len() == n,
            Arity::AtLeast(n) => inputs.len() >= n,
        };
        if !ok {
            return Err(invalid(
                def.name,
                format!(
                    "node '{name}' has {} inputs; the op takes {}",
                    inputs.len(),
                    def.arity
                ),
            ));
        }
        let in_node = |e| match e {
            NdError::Invalid { op, reason } => invalid(&op, format!("node '{name}': {reason}")),
            other => other,
        };
        super::signature::check_names(def, &attrs).map_err(in_node)?;
        let outputs = num_outputs(def, &attrs)?;
        super::signature::check_values(def, &attrs).map_err(in_node)?;
        Ok(Arc::new(Node {
            op: Some(def),
            name: name.to_string(),
            attrs,
            inputs,
            outputs,
        }))
    }

    /// The same op, name and attributes over other inputs (already checked, as they match the
    /// node's own in number).
    pub(crate) fn with_inputs(&self, inputs: Vec<NodeEntry>) -> Arc<Node> {
        Arc::new(Node {
            op: self.op,
            name: self.name.clone(),
            attrs: self.attrs.clone(),
            inputs,
            outputs: self.outputs,
        })
    }

    /// Outputs, hidden ones included.
    pub fn num_outputs(&self) -> usize {
        self.outputs.0
    }

    /// Outputs users see.
    pub fn num_visible_outputs(&self) -> usize {
        self.outputs.1
    }

    /// Whether it is a variable.
    pub fn is_variable(&self) -> bool {
        self.op.is_none()
    }

    /// The op's name, or `null` for a variable (as MXNet's JSON writes it).
    pub fn op_name(&self) -> &str {
        self.op.map_or("null", |d| d.name)
    }
}

/// One output of a node. `version` counts writes to a variable (MXNet marks inputs an op mutates
/// with version 1).
#[derive(Clone)]
pub struct NodeEntry {
    /// The node.
    pub node: Arc<Node>,
    /// Which output.
    pub index: usize,
    /// Version (see above).
    pub version: u32,
}

/// The attribute marking a node the recomputation pass copied from the forward graph (BatchNorm's
/// copy reads it to leave the moving statistics alone; the plan's drawing marks its buffers).
pub const MIRROR_ATTR: &str = "__mirror__";

/// A gradient rule: from a node and the gradients of its outputs (`None` where nothing
/// flows back), the gradients of its inputs, as entries of new backward nodes.
pub(crate) type GradFn = fn(&Arc<Node>, &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>>;

/// What `backward` does with an argument's gradient (MXNet's `grad_req`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradReq {
    /// Overwrite the gradient array.
    Write,
    /// Add to the gradient array (accumulate over several forward and backward passes).
    Add,
    /// No gradient.
    Null,
}
