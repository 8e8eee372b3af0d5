//! RNN's gradient rule.

use std::sync::Arc;

use crate::error::Result;
use crate::ops::grad::{make, op1, out};
use crate::ops::names::op_name;
use crate::ops::{Attrs, Node, NodeEntry};

/// RNN: one backward node reading every output's gradient (zeros for an output nothing
/// reads, say the sequence when only the final state is used) and the forward node's inputs.
pub(crate) fn rnn(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = Vec::with_capacity(n.num_visible_outputs() + n.inputs.len());
    for k in 0..n.num_visible_outputs() {
        ins.push(match og.get(k).cloned().flatten() {
            Some(g) => g,
            None => op1(
                op_name!("zeros_like"),
                format!("{}_head{k}_zeros", n.name),
                vec![out(n, k)],
                Attrs::new(),
            )?,
        });
    }
    ins.extend(n.inputs.iter().cloned());
    let bw = make(
        op_name!("_backward_RNN"),
        format!("{}_backward", n.name),
        ins,
        n.attrs.clone(),
    )?;
    // The sequence lengths, the last input when given, have no gradient.
    let grads = super::gradient_inputs(&n.attrs)?;
    Ok((0..n.inputs.len())
        .map(|k| (k < grads).then(|| out(&bw, k)))
        .collect())
}
