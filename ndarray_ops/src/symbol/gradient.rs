//! The gradient pass: from a symbol and the arguments to differentiate, a symbol whose outputs
//! are the original outputs followed by one gradient per argument.
//!
//! Nodes are visited in reverse graph order. Each op's gradient rule (its `OpDef::gradient`; the
//! rules live with the ops, in `ops::grad`) turns the gradients of its
//! outputs into backward nodes for its inputs; an entry used by several nodes gets the sum of
//! their contributions (`add_n`). Loss ops (SoftmaxOutput) start their own gradient; every other
//! graph output takes a head-gradient argument named `<node>_head_grad<k>`. Backward nodes read
//! only what their rule names, so inputs the backward pass ignores are not kept alive by it.

use std::collections::HashMap;

use super::{Node, NodeEntry, Symbol};
use crate::error::{invalid, Result};
use crate::ops::grad::{is_loss, make, out};
use crate::ops::names::op_name;
use crate::ops::Attrs;

/// Names of the head-gradient arguments `gradient` adds, with the output each belongs to.
pub fn head_grad_names(sym: &Symbol) -> Vec<(String, usize)> {
    sym.outputs()
        .iter()
        .enumerate()
        .filter(|(_, e)| !e.node.op.is_some_and(|d| is_loss(d.name)))
        .map(|(i, e)| (format!("{}_head_grad{}", e.node.name, e.index), i))
        .collect()
}

/// The outputs of `sym` followed by the gradients of `wrt` (argument names, in order).
pub fn gradient(sym: &Symbol, wrt: &[String]) -> Result<Symbol> {
    let g = sym.indexed();
    let mut contributions: HashMap<(usize, usize), Vec<NodeEntry>> = HashMap::new();
    let heads: HashMap<usize, String> = head_grad_names(sym)
        .into_iter()
        .map(|(n, i)| (i, n))
        .collect();
    for (i, &(node, k)) in g.outputs.iter().enumerate() {
        if let Some(name) = heads.get(&i) {
            contributions
                .entry((node, k))
                .or_default()
                .push(Symbol::var(name).outputs()[0].clone());
        }
    }
    let sum = |node: &Node, k: usize, mut parts: Vec<NodeEntry>| -> Result<NodeEntry> {
        if parts.len() == 1 {
            return Ok(parts.remove(0));
        }
        let agg = make(
            op_name!("add_n"),
            format!("{}_grad_sum{k}", node.name),
            parts,
            Attrs::new().with("num_args", 0),
        )?;
        Ok(out(&agg, 0))
    };
    for i in (0..g.nodes.len()).rev() {
        let n = &g.nodes[i];
        let Some(def) = n.op else { continue };
        let mut og = Vec::with_capacity(n.num_outputs());
        for k in 0..n.num_outputs() {
            og.push(match contributions.remove(&(i, k)) {
                Some(parts) => Some(sum(n, k, parts)?),
                None => None,
            });
        }
        // A node that reads nothing (`_zeros`, a generator) passes no gradient on.
        if (og.iter().all(Option::is_none) && !is_loss(def.name)) || g.inputs[i].is_empty() {
            continue;
        }
        let f = def.gradient.ok_or_else(|| {
            invalid(
                def.name,
                format!(
                    "node '{}': the gradient of {} is not implemented yet",
                    n.name, def.name
                ),
            )
        })?;
        for (j, grad) in f(n, &og)?.into_iter().enumerate() {
            if let (Some(grad), Some(&(src, idx))) = (grad, g.inputs[i].get(j)) {
                contributions.entry((src, idx)).or_default().push(grad);
            }
        }
    }
    let mut outputs: Vec<NodeEntry> = sym.outputs().to_vec();
    // The first variable of each name, as a search in node order would find it.
    let mut variables: HashMap<&str, usize> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate().filter(|(_, n)| n.is_variable()) {
        variables.entry(n.name.as_str()).or_insert(i);
    }
    for name in wrt {
        let v = variables.get(name.as_str()).copied().ok_or_else(|| {
            invalid(
                "gradient",
                format!("'{name}' is not an argument of the symbol"),
            )
        })?;
        let grad = match contributions.remove(&(v, 0)) {
            Some(parts) => sum(&g.nodes[v], 0, parts)?,
            // An argument the outputs do not depend on has a zero gradient.
            None => out(
                &make(
                    op_name!("zeros_like"),
                    format!("{name}_zero_grad"),
                    vec![out(&g.nodes[v], 0)],
                    Attrs::new(),
                )?,
                0,
            ),
        };
        outputs.push(grad);
    }
    Ok(Symbol { outputs })
}
