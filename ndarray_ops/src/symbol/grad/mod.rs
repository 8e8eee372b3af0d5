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
use crate::ops::math::Deriv;
use crate::ops::{lookup, Attrs};

mod math;
mod nn;
mod shape;

use crate::ops::names::op_name;
use math::*;
use nn::*;
use shape::*;

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

/// One backward node `op` of `n`'s attributes, reading `ins`, whose outputs are the gradients
/// of `n`'s inputs in order.
fn backward_node(n: &Arc<Node>, op: &str, ins: Vec<NodeEntry>) -> Result<Vec<Option<NodeEntry>>> {
    let bw = make(op, format!("{}_backward", n.name), ins, n.attrs.clone())?;
    Ok((0..n.inputs.len()).map(|k| Some(out(&bw, k))).collect())
}

/// Whether the gradient pass can differentiate op `op` (it has a rule).
#[cfg(test)]
pub(crate) fn has_rule(op: &str) -> bool {
    rule(op).is_some()
}

/// The gradient rule of an op, for the ops that have one.
fn rule(op: &str) -> Option<GradFn> {
    Some(match op {
        "FullyConnected" => fully_connected,
        // Before the gather ops: bilinear UpSampling is a Deconvolution.
        "UpSampling" => upsampling,
        "Activation" => activation,
        "SoftmaxOutput" => softmax_output,
        "elemwise_add" => add,
        "negative" | "exp" | "log" | "sqrt" | "square" | "relu" | "sigmoid" | "tanh"
        | "softrelu" => unary,
        "_plus_scalar" | "_minus_scalar" | "_rminus_scalar" | "_mul_scalar" | "_div_scalar"
        | "_rdiv_scalar" | "_rpower_scalar" | "_mod_scalar" | "_hypot_scalar" | "smooth_l1" => {
            scalar
        }
        "elemwise_sub" | "elemwise_mul" | "elemwise_div" => elemwise,
        "dot" | "batch_dot" => dot,
        "softmax" | "log_softmax" => softmax,
        "sum" | "mean" => reduction,
        "broadcast_add" | "broadcast_sub" | "broadcast_mul" | "broadcast_div" => broadcast,
        "Embedding" => embedding,
        "abs" | "clip" | "_maximum_scalar" | "_minimum_scalar" | "_power_scalar"
        | "hard_sigmoid" => masked,
        "LeakyReLU" => leaky_relu,
        "LinearRegressionOutput"
        | "LogisticRegressionOutput"
        | "MAERegressionOutput"
        | "MakeLoss"
        | "make_loss"
        | "softmax_cross_entropy" => loss,
        "LayerNorm" | "InstanceNorm" | "GroupNorm" | "L2Normalization" | "SoftmaxActivation" => {
            normalization
        }
        op if crate::ops::math::find(op).is_some() => math,
        op if crate::ops::gather::is_gather(op) => gather,
        "Cast" => cast,
        "zeros_like" | "ones_like" | "BlockGrad" => none,
        "stack" => stack,
        "where" => where_,
        "add_n" => add_n,
        "take" => take,
        "broadcast_maximum" | "broadcast_minimum" | "broadcast_power" | "broadcast_hypot"
        | "broadcast_mod" | "_maximum" | "_minimum" | "_power" | "_hypot" | "_mod" => {
            broadcast_select
        }
        "max" | "min" => extremum,
        "prod" | "norm" => product_or_norm,
        "pick" => pick,
        "depth_to_space" | "space_to_depth" => depth_space,
        "sort" | "topk" | "argsort" => sort,
        "SequenceMask" | "SequenceLast" | "SequenceReverse" => sequence,
        "argmax"
        | "batch_take"
        | "argmin"
        | "one_hot"
        | "broadcast_equal"
        | "broadcast_not_equal"
        | "broadcast_greater"
        | "broadcast_greater_equal"
        | "broadcast_lesser"
        | "broadcast_lesser_equal"
        | "_equal_scalar"
        | "_greater_scalar"
        | "_lesser_scalar"
        | "_not_equal_scalar"
        | "_greater_equal_scalar"
        | "_lesser_equal_scalar"
        | "broadcast_logical_and"
        | "broadcast_logical_or"
        | "broadcast_logical_xor"
        | "_equal"
        | "_not_equal"
        | "_greater"
        | "_greater_equal"
        | "_lesser"
        | "_lesser_equal"
        | "_logical_and"
        | "_logical_or"
        | "_logical_xor" => none,
        "Convolution" | "Deconvolution" => convolution,
        "Pooling" => pooling,
        "BatchNorm" => batch_norm,
        "Dropout" => dropout,
        "RNN" => rnn,
        "_contrib_AdaptiveAvgPooling2D"
        | "_contrib_BilinearResize2D"
        | "Crop"
        | "ROIPooling"
        | "_contrib_ROIAlign" => vision,
        "gather_nd" | "scatter_nd" => gather_nd,
        "Flatten" | "Reshape" | "reshape" | "expand_dims" | "squeeze" => flatten,
        "transpose" => transpose,
        "slice" | "slice_axis" => slice,
        "Concat" => concat,
        "SliceChannel" => split,
        "_copy" | "_CrossDeviceCopy" => identity,
        _ => return None,
    })
}

/// Whether an op starts its own gradient (a loss), ignoring head gradients.
fn is_loss(op: &str) -> bool {
    crate::ops::loss::is_loss(op)
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
