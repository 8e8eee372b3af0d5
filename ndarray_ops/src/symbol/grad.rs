//! The gradient pass: from a symbol and the arguments to differentiate, a symbol whose outputs
//! are the original outputs followed by one gradient per argument.
//!
//! Nodes are visited in reverse graph order. Each op's gradient rule turns the gradients of its
//! outputs into backward nodes for its inputs; an entry used by several nodes gets the sum of
//! their contributions (`add_n`). Loss ops (SoftmaxOutput) start their own gradient; every other
//! graph output takes a head-gradient argument named `<node>_head_grad<k>`. Backward nodes read
//! only what their rule names, so inputs the backward pass ignores are not kept alive by it.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Node, NodeEntry, Symbol};
use crate::error::{invalid, Result};
use crate::ops::{lookup, Attrs};

type GradFn = fn(&Arc<Node>, &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>>;

fn out(node: &Arc<Node>, index: usize) -> NodeEntry {
    NodeEntry {
        node: node.clone(),
        index,
        version: 0,
    }
}

fn make(op: &str, name: String, inputs: Vec<NodeEntry>, attrs: Attrs) -> Result<Arc<Node>> {
    Symbol::node(lookup(op)?, &name, attrs, inputs)
}

fn need(node: &Node, og: &[Option<NodeEntry>]) -> Result<NodeEntry> {
    og.first().cloned().flatten().ok_or_else(|| {
        invalid(
            node.op_name(),
            format!("node '{}' has no output gradient", node.name),
        )
    })
}

fn fully_connected(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
    let bw = make(
        "_backward_FullyConnected",
        format!("{}_backward", n.name),
        ins,
        n.attrs.clone(),
    )?;
    Ok((0..n.inputs.len()).map(|k| Some(out(&bw, k))).collect())
}

fn activation(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let bw = make(
        "_backward_Activation",
        format!("{}_backward", n.name),
        vec![need(n, og)?, out(n, 0)],
        n.attrs.clone(),
    )?;
    Ok(vec![Some(out(&bw, 0))])
}

fn softmax_output(n: &Arc<Node>, _og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let bw = make(
        "_backward_SoftmaxOutput",
        format!("{}_backward", n.name),
        vec![out(n, 0), n.inputs[1].clone()],
        n.attrs.clone(),
    )?;
    Ok(vec![Some(out(&bw, 0)), Some(out(&bw, 1))])
}

fn convolution(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
    let bw = make(
        "_backward_Convolution",
        format!("{}_backward", n.name),
        ins,
        n.attrs.clone(),
    )?;
    Ok((0..n.inputs.len()).map(|k| Some(out(&bw, k))).collect())
}

fn pooling(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone()];
    let bw = make(
        "_backward_Pooling",
        format!("{}_backward", n.name),
        ins,
        n.attrs.clone(),
    )?;
    Ok(vec![Some(out(&bw, 0))])
}

fn batch_norm(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    // Reads the mean and variance the forward pass used (its hidden outputs).
    let ins = vec![
        need(n, og)?,
        n.inputs[0].clone(),
        n.inputs[1].clone(),
        out(n, 1),
        out(n, 2),
    ];
    let bw = make(
        "_backward_BatchNorm",
        format!("{}_backward", n.name),
        ins,
        n.attrs.clone(),
    )?;
    // No gradient for the moving statistics (auxiliary states).
    Ok(vec![
        Some(out(&bw, 0)),
        Some(out(&bw, 1)),
        Some(out(&bw, 2)),
        None,
        None,
    ])
}

fn flatten(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone()];
    let bw = make(
        "reshape_like",
        format!("{}_backward", n.name),
        ins,
        Attrs::new(),
    )?;
    Ok(vec![Some(out(&bw, 0))])
}

fn add(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    Ok(vec![Some(g.clone()), Some(g)])
}

fn identity(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    Ok(vec![Some(need(n, og)?)])
}

/// The gradient rule of an op, for the ops that have one so far.
fn rule(op: &str) -> Option<GradFn> {
    Some(match op {
        "FullyConnected" => fully_connected,
        "Activation" => activation,
        "SoftmaxOutput" => softmax_output,
        "elemwise_add" => add,
        "Convolution" => convolution,
        "Pooling" => pooling,
        "BatchNorm" => batch_norm,
        "Flatten" | "Reshape" | "reshape" => flatten,
        "_copy" => identity,
        _ => return None,
    })
}

/// Whether an op starts its own gradient (a loss), ignoring head gradients.
fn is_loss(op: &str) -> bool {
    op == "SoftmaxOutput"
}

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
            "add_n",
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
        if og.iter().all(Option::is_none) && !is_loss(def.name) {
            continue;
        }
        let f = rule(def.name).ok_or_else(|| {
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
    for name in wrt {
        let v = g
            .nodes
            .iter()
            .position(|n| n.is_variable() && &n.name == name)
            .ok_or_else(|| {
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
                    "_mul_scalar",
                    format!("{name}_zero_grad"),
                    vec![out(&g.nodes[v], 0)],
                    Attrs::new().with("scalar", 0),
                )?,
                0,
            ),
        };
        outputs.push(grad);
    }
    Ok(Symbol { outputs })
}
