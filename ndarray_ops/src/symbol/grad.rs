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

fn fully_connected(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
    backward_node(n, "_backward_FullyConnected", ins)
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

/// Convolution and Deconvolution: one backward op reading `(ograd, data, weight)`.
fn convolution(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
    backward_node(n, &format!("_backward_{}", n.op_name()), ins)
}

/// UpSampling: nearest is a gather op; bilinear is a Deconvolution, whose backward op takes
/// that Deconvolution's attributes.
fn upsampling(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    match crate::ops::bilinear_upsampling(n.op_name(), &n.attrs)? {
        None => gather(n, og),
        Some(deconv) => {
            let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
            let bw = make(
                "_backward_Deconvolution",
                format!("{}_backward", n.name),
                ins,
                deconv,
            )?;
            Ok(vec![Some(out(&bw, 0)), Some(out(&bw, 1))])
        }
    }
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

fn dropout(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    // The mask (hidden output 1) already holds 0 or 1 / (1 - p): the gradient is og * mask.
    Ok(vec![Some(op1(
        "elemwise_mul",
        format!("{}_backward", n.name),
        vec![need(n, og)?, out(n, 1)],
        Attrs::new(),
    )?)])
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

/// One forward op as a backward node with a single output.
fn op1(op: &str, name: String, inputs: Vec<NodeEntry>, attrs: Attrs) -> Result<NodeEntry> {
    Ok(out(&make(op, name, inputs, attrs)?, 0))
}

fn scaled(n: &Node, tag: &str, g: NodeEntry, by: f64) -> Result<NodeEntry> {
    op1(
        "_mul_scalar",
        format!("{}_{tag}", n.name),
        vec![g],
        Attrs::new().with("scalar", by),
    )
}

/// Unary math: each rule reuses forward ops on the output gradient, the input and the output.
fn unary(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let (x, y) = (n.inputs[0].clone(), out(n, 0));
    let name = |t: &str| format!("{}_backward{t}", n.name);
    let d = match n.op_name() {
        "negative" => op1("negative", name(""), vec![g], Attrs::new())?,
        "exp" => op1("elemwise_mul", name(""), vec![g, y], Attrs::new())?,
        "log" => op1("elemwise_div", name(""), vec![g, x], Attrs::new())?,
        "sqrt" => op1(
            "elemwise_div",
            name(""),
            vec![scaled(n, "half", g, 0.5)?, y],
            Attrs::new(),
        )?,
        "square" => op1(
            "elemwise_mul",
            name(""),
            vec![scaled(n, "twice", x, 2.0)?, g],
            Attrs::new(),
        )?,
        act @ ("relu" | "sigmoid" | "tanh" | "softrelu") => op1(
            "_backward_Activation",
            name(""),
            vec![g, y],
            Attrs::new().with("act_type", act),
        )?,
        other => {
            return Err(invalid(
                other,
                format!("node '{}': no gradient rule", n.name),
            ))
        }
    };
    Ok(vec![Some(d)])
}

/// Ops with a scalar attribute.
fn scalar(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let s = crate::ops::scalar_of(n.op_name(), &n.attrs)?;
    let name = format!("{}_backward", n.name);
    let d = match n.op_name() {
        "_plus_scalar" | "_minus_scalar" | "_mod_scalar" => g,
        "_rminus_scalar" => op1("negative", name, vec![g], Attrs::new())?,
        // d s^x = y ln s
        "_rpower_scalar" => scaled(
            n,
            "backward",
            op1(
                "elemwise_mul",
                format!("{name}_gy"),
                vec![g, out(n, 0)],
                Attrs::new(),
            )?,
            s.ln(),
        )?,
        // sigma^2 x inside |x| < 1 / sigma^2, sign(x) outside
        "smooth_l1" => {
            let x = n.inputs[0].clone();
            let s2 = s * s;
            let unary = |t: &str, op: &str, v: NodeEntry, a: Attrs| {
                op1(op, format!("{name}_{t}"), vec![v], a)
            };
            let abs = unary("abs", "abs", x.clone(), Attrs::new())?;
            let inside = unary(
                "inside",
                "_lesser_scalar",
                abs,
                Attrs::new().with("scalar", 1.0 / s2),
            )?;
            let quad = unary(
                "quad",
                "_mul_scalar",
                x.clone(),
                Attrs::new().with("scalar", s2),
            )?;
            let lin = unary("lin", "sign", x, Attrs::new())?;
            let factor = op1(
                "where",
                format!("{name}_factor"),
                vec![inside, quad, lin],
                Attrs::new(),
            )?;
            op1("elemwise_mul", name, vec![g, factor], Attrs::new())?
        }
        // d hypot(x, s) = x / y
        "_hypot_scalar" => {
            let gx = op1(
                "elemwise_mul",
                format!("{name}_gx"),
                vec![g, n.inputs[0].clone()],
                Attrs::new(),
            )?;
            op1("elemwise_div", name, vec![gx, out(n, 0)], Attrs::new())?
        }
        "_mul_scalar" => scaled(n, "backward", g, s)?,
        "_div_scalar" => scaled(n, "backward", g, 1.0 / s)?,
        // d(s / x) = -y / x
        "_rdiv_scalar" => {
            let gy = op1(
                "elemwise_mul",
                format!("{name}_gy"),
                vec![g, out(n, 0)],
                Attrs::new(),
            )?;
            op1(
                "negative",
                name.clone(),
                vec![op1(
                    "elemwise_div",
                    format!("{name}_q"),
                    vec![gy, n.inputs[0].clone()],
                    Attrs::new(),
                )?],
                Attrs::new(),
            )?
        }
        other => {
            return Err(invalid(
                other,
                format!("node '{}': no gradient rule", n.name),
            ))
        }
    };
    Ok(vec![Some(d)])
}

/// Same-shape binary arithmetic.
fn elemwise(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let (a, b, y) = (n.inputs[0].clone(), n.inputs[1].clone(), out(n, 0));
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    Ok(match n.op_name() {
        "elemwise_sub" => vec![
            Some(g.clone()),
            Some(op1("negative", name("rhs"), vec![g], Attrs::new())?),
        ],
        "elemwise_mul" => vec![
            Some(op1(
                "elemwise_mul",
                name("lhs"),
                vec![g.clone(), b],
                Attrs::new(),
            )?),
            Some(op1("elemwise_mul", name("rhs"), vec![g, a], Attrs::new())?),
        ],
        // d(a / b) = g / b and -g * y / b
        "elemwise_div" => {
            let da = op1(
                "elemwise_div",
                name("lhs"),
                vec![g.clone(), b.clone()],
                Attrs::new(),
            )?;
            let gy = op1("elemwise_mul", name("gy"), vec![g, y], Attrs::new())?;
            let q = op1("elemwise_div", name("q"), vec![gy, b], Attrs::new())?;
            vec![
                Some(da),
                Some(op1("negative", name("rhs"), vec![q], Attrs::new())?),
            ]
        }
        other => {
            return Err(invalid(
                other,
                format!("node '{}': no gradient rule", n.name),
            ))
        }
    })
}

/// `dot` (2-D) and `batch_dot` with their transposes: each input gradient is another product of
/// the output gradient with the other input.
fn dot(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let op = n.op_name();
    let (a, b) = (n.inputs[0].clone(), n.inputs[1].clone());
    let ta = n.attrs.bool(op, "transpose_a", false)?;
    let tb = n.attrs.bool(op, "transpose_b", false)?;
    let mk = |t: &str, x: NodeEntry, y: NodeEntry, tx: bool, ty: bool| {
        op1(
            op,
            format!("{}_backward_{t}", n.name),
            vec![x, y],
            Attrs::new().with("transpose_a", tx).with("transpose_b", ty),
        )
    };
    let (da, db) = match (ta, tb) {
        (false, false) => (
            mk("lhs", g.clone(), b, false, true)?,
            mk("rhs", a, g, true, false)?,
        ),
        (true, false) => (
            mk("lhs", b, g.clone(), false, true)?,
            mk("rhs", a, g, false, false)?,
        ),
        (false, true) => (
            mk("lhs", g.clone(), b, false, false)?,
            mk("rhs", g, a, true, false)?,
        ),
        (true, true) => (
            mk("lhs", b, g.clone(), true, true)?,
            mk("rhs", g, a, true, true)?,
        ),
    };
    Ok(vec![Some(da), Some(db)])
}

fn softmax(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let bw = if n.op_name() == "log_softmax" {
        "_backward_log_softmax"
    } else {
        "_backward_softmax"
    };
    Ok(vec![Some(op1(
        bw,
        format!("{}_backward", n.name),
        vec![need(n, og)?, out(n, 0)],
        n.attrs.clone(),
    )?)])
}

fn reduction(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let attrs = n.attrs.clone().with("__reduce__", n.op_name());
    Ok(vec![Some(op1(
        "_broadcast_backward",
        format!("{}_backward", n.name),
        vec![need(n, og)?, n.inputs[0].clone()],
        attrs,
    )?)])
}

/// Broadcasting arithmetic: each operand's gradient is summed back to the operand's shape.
fn broadcast(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let (a, b, y) = (n.inputs[0].clone(), n.inputs[1].clone(), out(n, 0));
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    let to = |t: &str, x: NodeEntry, like: NodeEntry| {
        op1("_sum_to_like", name(t), vec![x, like], Attrs::new())
    };
    let (da, db) = match n.op_name() {
        "broadcast_add" => (g.clone(), g),
        "broadcast_sub" => (
            g.clone(),
            op1("negative", name("neg"), vec![g], Attrs::new())?,
        ),
        "broadcast_mul" => (
            op1(
                "broadcast_mul",
                name("gb"),
                vec![g.clone(), b.clone()],
                Attrs::new(),
            )?,
            op1(
                "broadcast_mul",
                name("ga"),
                vec![g, a.clone()],
                Attrs::new(),
            )?,
        ),
        // d(a / b) = g / b and -g * y / b
        "broadcast_div" => {
            let gy = op1(
                "broadcast_mul",
                name("gy"),
                vec![g.clone(), y],
                Attrs::new(),
            )?;
            let q = op1(
                "broadcast_div",
                name("q"),
                vec![gy, b.clone()],
                Attrs::new(),
            )?;
            (
                op1(
                    "broadcast_div",
                    name("gb"),
                    vec![g, b.clone()],
                    Attrs::new(),
                )?,
                op1("negative", name("neg"), vec![q], Attrs::new())?,
            )
        }
        other => {
            return Err(invalid(
                other,
                format!("node '{}': no gradient rule", n.name),
            ))
        }
    };
    Ok(vec![Some(to("lhs", da, a)?), Some(to("rhs", db, b)?)])
}

fn embedding(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
    let w = op1(
        "_backward_take",
        format!("{}_backward", n.name),
        ins,
        Attrs::new(),
    )?;
    // Indices have no gradient.
    Ok(vec![None, Some(w)])
}

fn transpose(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    // The inverse permutation (the default reversal is its own inverse).
    let attrs = match n.attrs.ints("transpose", "axes")? {
        Some(axes) if !axes.is_empty() => {
            let nd = axes.len() as i64;
            let mut inv = vec![0i64; axes.len()];
            for (i, &a) in axes.iter().enumerate() {
                inv[(if a < 0 { a + nd } else { a }) as usize] = i as i64;
            }
            Attrs::new().with("axes", format!("{inv:?}"))
        }
        _ => Attrs::new(),
    };
    Ok(vec![Some(op1(
        "transpose",
        format!("{}_backward", n.name),
        vec![need(n, og)?],
        attrs,
    )?)])
}

fn slice(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let attrs = n.attrs.clone().with("__slice_op__", n.op_name());
    Ok(vec![Some(op1(
        "_backward_slice",
        format!("{}_backward", n.name),
        vec![need(n, og)?, n.inputs[0].clone()],
        attrs,
    )?)])
}

fn concat(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = vec![need(n, og)?];
    ins.extend(n.inputs.iter().cloned());
    let attrs = n.attrs.clone().with("num_args", n.inputs.len());
    let bw = make(
        "_backward_Concat",
        format!("{}_backward", n.name),
        ins,
        attrs,
    )?;
    Ok((0..n.inputs.len()).map(|k| Some(out(&bw, k))).collect())
}

fn split(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let axis = n
        .attrs
        .ints("SliceChannel", "axis")?
        .and_then(|v| v.first().copied())
        .unwrap_or(1);
    let squeeze = n.attrs.bool("SliceChannel", "squeeze_axis", false)?;
    let mut parts = Vec::with_capacity(n.num_outputs());
    for (k, g) in og.iter().enumerate() {
        // An output nobody used contributes zeros.
        let g = match g {
            Some(g) => g.clone(),
            None => scaled(n, &format!("zero{k}"), out(n, k), 0.0)?,
        };
        parts.push(if squeeze {
            op1(
                "expand_dims",
                format!("{}_backward_expand{k}", n.name),
                vec![g],
                Attrs::new().with("axis", axis),
            )?
        } else {
            g
        });
    }
    let attrs = Attrs::new().with("dim", axis).with("num_args", parts.len());
    Ok(vec![Some(op1(
        "Concat",
        format!("{}_backward", n.name),
        parts,
        attrs,
    )?)])
}

/// Gradients that are the output gradient times a mask or factor built from forward ops.
fn masked(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let (x, y) = (n.inputs[0].clone(), out(n, 0));
    let op = n.op_name();
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    let cmp = |t: &str, which: &str, v: f64| {
        op1(
            which,
            name(t),
            vec![x.clone()],
            Attrs::new().with("scalar", v),
        )
    };
    let factor = match op {
        // d|x| = x / |x|
        "abs" => op1(
            "elemwise_div",
            name("sign"),
            vec![x.clone(), y],
            Attrs::new(),
        )?,
        "clip" => {
            let (lo, hi) = (
                n.attrs.float(op, "a_min", None)?,
                n.attrs.float(op, "a_max", None)?,
            );
            op1(
                "elemwise_mul",
                name("inside"),
                vec![
                    cmp("above", "_greater_scalar", lo)?,
                    cmp("below", "_lesser_scalar", hi)?,
                ],
                Attrs::new(),
            )?
        }
        "_maximum_scalar" => cmp("mask", "_greater_scalar", n.attrs.f64(op, "scalar", None)?)?,
        // alpha where the output is strictly inside (0, 1)
        "hard_sigmoid" => {
            let (alpha, _) = crate::ops::math::hard_sigmoid_params(op, &n.attrs)?;
            let on_output = |t: &str, which: &str, v: f64| {
                op1(
                    which,
                    name(t),
                    vec![y.clone()],
                    Attrs::new().with("scalar", v),
                )
            };
            let inside = op1(
                "elemwise_mul",
                name("inside"),
                vec![
                    on_output("above", "_greater_scalar", 0.0)?,
                    on_output("below", "_lesser_scalar", 1.0)?,
                ],
                Attrs::new(),
            )?;
            scaled(n, "slope", inside, alpha)?
        }
        "_minimum_scalar" => cmp("mask", "_lesser_scalar", n.attrs.f64(op, "scalar", None)?)?,
        // d x^s = s x^(s-1)
        "_power_scalar" => {
            let s = n.attrs.f64(op, "scalar", None)?;
            scaled(
                n,
                "coef",
                op1(
                    "_power_scalar",
                    name("pow"),
                    vec![x.clone()],
                    Attrs::new().with("scalar", s - 1.0),
                )?,
                s,
            )?
        }
        other => {
            return Err(invalid(
                other,
                format!("node '{}': no gradient rule", n.name),
            ))
        }
    };
    Ok(vec![Some(op1(
        "elemwise_mul",
        name("out"),
        vec![g, factor],
        Attrs::new(),
    )?)])
}

fn stack(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let axis = n
        .attrs
        .ints("stack", "axis")?
        .and_then(|v| v.first().copied())
        .unwrap_or(0);
    let parts = Symbol::node(
        lookup("SliceChannel")?,
        &format!("{}_backward", n.name),
        Attrs::new()
            .with("num_outputs", n.inputs.len())
            .with("axis", axis)
            .with("squeeze_axis", true),
        vec![need(n, og)?],
    )?;
    Ok((0..n.inputs.len()).map(|k| Some(out(&parts, k))).collect())
}

fn where_(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let cond = n.inputs[0].clone();
    let zero = scaled(n, "zero", g.clone(), 0.0)?;
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    Ok(vec![
        None,
        Some(op1(
            "where",
            name("x"),
            vec![cond.clone(), g.clone(), zero.clone()],
            Attrs::new(),
        )?),
        Some(op1("where", name("y"), vec![cond, zero, g], Attrs::new())?),
    ])
}

/// Ops whose outputs do not depend smoothly on their inputs: no gradient flows (as in MXNet).
fn none(n: &Arc<Node>, _og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    Ok(vec![None; n.inputs.len()])
}

fn add_n(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    Ok(vec![Some(g); n.inputs.len()])
}

fn take(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[1].clone(), n.inputs[0].clone()];
    Ok(vec![
        Some(op1(
            "_backward_take",
            format!("{}_backward", n.name),
            ins,
            n.attrs.clone(),
        )?),
        None,
    ])
}

/// broadcast_maximum/minimum (ties go to the left operand) and broadcast_power.
fn broadcast_select(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let (a, b, y) = (n.inputs[0].clone(), n.inputs[1].clone(), out(n, 0));
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    let bin =
        |t: &str, op: &str, x: NodeEntry, z: NodeEntry| op1(op, name(t), vec![x, z], Attrs::new());
    let (da, db) = match crate::ops::broadcast_twin(n.op_name()) {
        op @ ("broadcast_maximum" | "broadcast_minimum") => {
            let (left, right) = if op == "broadcast_maximum" {
                ("broadcast_greater_equal", "broadcast_lesser")
            } else {
                ("broadcast_lesser_equal", "broadcast_greater")
            };
            let ma = bin("ma", left, a.clone(), b.clone())?;
            let mb = bin("mb", right, a.clone(), b.clone())?;
            (
                bin("ga", "broadcast_mul", g.clone(), ma)?,
                bin("gb", "broadcast_mul", g, mb)?,
            )
        }
        // d a^b = b a^(b-1) = b y / a, and y ln a
        "broadcast_power" => {
            let gy = bin("gy", "broadcast_mul", g, y)?;
            let da = bin(
                "da",
                "broadcast_div",
                bin("gyb", "broadcast_mul", gy.clone(), b.clone())?,
                a.clone(),
            )?;
            let db = bin(
                "db",
                "broadcast_mul",
                gy,
                op1("log", name("ln"), vec![a.clone()], Attrs::new())?,
            )?;
            (da, db)
        }
        // d hypot(a, b) = a / y and b / y
        "broadcast_hypot" => {
            let gy = bin("gy", "broadcast_div", g, y)?;
            (
                bin("ga", "broadcast_mul", gy.clone(), a.clone())?,
                bin("gb", "broadcast_mul", gy, b.clone())?,
            )
        }
        // d mod(a, b) = 1 and -floor(a / b)
        "broadcast_mod" => {
            let q = bin("q", "broadcast_div", a.clone(), b.clone())?;
            let fq = op1("floor", name("fq"), vec![q], Attrs::new())?;
            let gb = bin("gb", "broadcast_mul", g.clone(), fq)?;
            (g, op1("negative", name("db"), vec![gb], Attrs::new())?)
        }
        other => {
            return Err(invalid(
                other,
                format!("node '{}': no gradient rule", n.name),
            ))
        }
    };
    let to = |t: &str, x: NodeEntry, like: NodeEntry| {
        op1("_sum_to_like", name(t), vec![x, like], Attrs::new())
    };
    Ok(vec![Some(to("lhs", da, a)?), Some(to("rhs", db, b)?)])
}

/// A value of reduction `n`'s output shape spread back over its input's shape.
fn spread(n: &Arc<Node>, tag: &str, v: NodeEntry) -> Result<NodeEntry> {
    op1(
        "_broadcast_backward",
        format!("{}_backward_{tag}", n.name),
        vec![v, n.inputs[0].clone()],
        n.attrs.clone().with("__reduce__", "sum"),
    )
}

/// max/min over axes: the gradient goes to every element equal to the result.
fn extremum(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let x = n.inputs[0].clone();
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    let spread = |t: &str, v: NodeEntry| spread(n, t, v);
    let mask = op1(
        "broadcast_equal",
        name("mask"),
        vec![x.clone(), spread("y", out(n, 0))?],
        Attrs::new(),
    )?;
    Ok(vec![Some(op1(
        "elemwise_mul",
        name("out"),
        vec![spread("g", need(n, og)?)?, mask],
        Attrs::new(),
    )?)])
}

/// LeakyReLU: one backward node reading the output gradient, the data and prelu's gamma.
fn leaky_relu(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = vec![need(n, og)?];
    ins.extend(n.inputs.iter().cloned());
    backward_node(n, "_backward_LeakyReLU", ins)
}

/// LayerNorm, InstanceNorm, GroupNorm: one backward node reading the data, gamma and the
/// statistics the forward pass kept; L2Normalization: one reading its output and the norms.
fn normalization(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let op = n.op_name();
    let ins = match op {
        "L2Normalization" => vec![need(n, og)?, out(n, 0), out(n, 1)],
        "SoftmaxActivation" => vec![need(n, og)?, out(n, 0)],
        _ => vec![
            need(n, og)?,
            n.inputs[0].clone(),
            n.inputs[1].clone(),
            out(n, 1),
            out(n, 2),
        ],
    };
    backward_node(n, &format!("_backward_{op}"), ins)
}

/// gather_nd: the output gradient added back into the blocks read (a scatter that adds; the
/// data gives the shape); scatter_nd: the output gradient gathered from the blocks written.
fn gather_nd(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let (g, indices) = (need(n, og)?, n.inputs[1].clone());
    let name = format!("{}_backward", n.name);
    let d = match n.op_name() {
        "gather_nd" => op1(
            "_backward_gather_nd",
            name,
            vec![g, indices, n.inputs[0].clone()],
            Attrs::new(),
        )?,
        _ => op1("gather_nd", name, vec![g, indices], Attrs::new())?,
    };
    Ok(vec![Some(d), None])
}

/// The resampling and region ops of `ops::vision` and `ops::roi`: one backward node reading
/// the output gradient and the forward inputs (ROIPooling: also where each maximum was; the
/// region ops: no gradient for the regions).
fn vision(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let op = n.op_name();
    let name = op.trim_start_matches("_contrib_");
    match op {
        "ROIPooling" => {
            let ins = vec![g, n.inputs[1].clone(), out(n, 1), n.inputs[0].clone()];
            let bw = make(
                "_backward_ROIPooling",
                format!("{}_backward", n.name),
                ins,
                n.attrs.clone(),
            )?;
            Ok(vec![Some(out(&bw, 0)), None])
        }
        "_contrib_ROIAlign" => {
            let ins = vec![g, n.inputs[1].clone(), n.inputs[0].clone()];
            let d = op1(
                "_backward_ROIAlign",
                format!("{}_backward", n.name),
                ins,
                n.attrs.clone(),
            )?;
            Ok(vec![Some(d), None])
        }
        _ => {
            let mut ins = vec![g];
            ins.extend(n.inputs.iter().cloned());
            backward_node(n, &format!("_backward_{name}"), ins)
        }
    }
}

/// RNN: one backward node reading every output's gradient (zeros for an output nothing
/// reads, say the sequence when only the final state is used) and the forward node's inputs.
fn rnn(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = Vec::with_capacity(n.num_visible_outputs() + n.inputs.len());
    for k in 0..n.num_visible_outputs() {
        ins.push(match og.get(k).cloned().flatten() {
            Some(g) => g,
            None => op1(
                "zeros_like",
                format!("{}_head{k}_zeros", n.name),
                vec![out(n, k)],
                Attrs::new(),
            )?,
        });
    }
    ins.extend(n.inputs.iter().cloned());
    let bw = make(
        "_backward_RNN",
        format!("{}_backward", n.name),
        ins,
        n.attrs.clone(),
    )?;
    // The sequence lengths, the last input when given, have no gradient.
    let grads = crate::ops::rnn_gradient_inputs(&n.attrs)?;
    Ok((0..n.inputs.len())
        .map(|k| (k < grads).then(|| out(&bw, k)))
        .collect())
}

/// The loss heads of `ops::loss`: their gradient is their own, not the head gradient's.
fn loss(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let op = n.op_name();
    let name = format!("{}_backward", n.name);
    let y = out(n, 0);
    Ok(match op {
        "make_loss" => vec![Some(op1("ones_like", name, vec![y], Attrs::new())?)],
        "MakeLoss" => vec![Some(op1(
            "_backward_MakeLoss",
            name,
            vec![y],
            n.attrs.clone(),
        )?)],
        "softmax_cross_entropy" => {
            let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
            let d = op1("_backward_softmax_cross_entropy", name, ins, Attrs::new())?;
            vec![Some(d), None]
        }
        _ => {
            let ins = vec![y, n.inputs[1].clone()];
            let bw = make(&format!("_backward_{op}"), name, ins, n.attrs.clone())?;
            vec![Some(out(&bw, 0)), Some(out(&bw, 1))]
        }
    })
}

/// The gather ops (`ops::gather`: broadcast_to, tile, Pad, ...): each output gradient element
/// goes back to the data element it was read from.
fn gather(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let d = op1(
        "_backward_gather",
        format!("{}_backward", n.name),
        vec![need(n, og)?, n.inputs[0].clone()],
        n.attrs.clone().with("__fwd__", n.op_name()),
    )?;
    let mut grads = vec![Some(d)];
    grads.resize(n.inputs.len(), None);
    Ok(grads)
}

/// SequenceMask: the output gradient with the masked steps zeroed; SequenceLast: it at each
/// sequence's last step; SequenceReverse: it reversed back. None for the lengths.
fn sequence(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = vec![need(n, og)?];
    let op = match n.op_name() {
        "SequenceMask" => "_backward_SequenceMask",
        "SequenceReverse" => "SequenceReverse",
        _ => {
            ins.push(n.inputs[0].clone());
            "_backward_SequenceLast"
        }
    };
    ins.extend(n.inputs.get(1).cloned());
    let d = op1(op, format!("{}_backward", n.name), ins, n.attrs.clone())?;
    let mut grads = vec![Some(d)];
    grads.resize(n.inputs.len(), None);
    Ok(grads)
}

/// sort and topk returning values: each value's gradient back where it came from (the
/// indices output); none for indices or masks.
fn sort(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    if !crate::ops::sort::returns_values(n.op_name(), &n.attrs) {
        return Ok(vec![None]);
    }
    let ins = vec![need(n, og)?, out(n, 1), n.inputs[0].clone()];
    let attrs = n.attrs.clone().with("__fwd__", n.op_name());
    let d = op1("_backward_topk", format!("{}_backward", n.name), ins, attrs)?;
    Ok(vec![Some(d)])
}

/// depth_to_space and space_to_depth: each the other's gradient.
fn depth_space(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let other = match n.op_name() {
        "depth_to_space" => "space_to_depth",
        _ => "depth_to_space",
    };
    let d = op1(
        other,
        format!("{}_backward", n.name),
        vec![need(n, og)?],
        n.attrs.clone(),
    )?;
    Ok(vec![Some(d)])
}

/// pick: the output gradient back into the picked elements; none for the index.
fn pick(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[1].clone(), n.inputs[0].clone()];
    let d = op1(
        "_backward_pick",
        format!("{}_backward", n.name),
        ins,
        n.attrs.clone(),
    )?;
    Ok(vec![Some(d), None])
}

/// The unary math functions (`ops::math`): one `_backward_math` node reading the value the
/// derivative is written in; none for the flat ones.
fn math(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let op = n.op_name();
    let at = match crate::ops::math::find(op).map(|m| m.deriv) {
        Some(Deriv::Zero) => return Ok(vec![None]),
        Some(Deriv::OfInput(_)) => n.inputs[0].clone(),
        Some(Deriv::OfOutput(_)) => out(n, 0),
        None => return Err(invalid(op, format!("node '{}': no gradient rule", n.name))),
    };
    Ok(vec![Some(op1(
        "_backward_math",
        format!("{}_backward", n.name),
        vec![need(n, og)?, at],
        Attrs::new().with("fn", op),
    )?)])
}

/// Cast: the output gradient cast back to the input's dtype.
fn cast(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    Ok(vec![Some(op1(
        "_cast_like",
        format!("{}_backward", n.name),
        vec![need(n, og)?, n.inputs[0].clone()],
        Attrs::new(),
    )?)])
}

/// prod: `y / x` spread back; norm: `x / y` (ord 2) or `sign(x)` (ord 1), times the spread
/// output gradient.
fn product_or_norm(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let x = n.inputs[0].clone();
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    let spread = |t: &str, v: NodeEntry| spread(n, t, v);
    let g = spread("g", need(n, og)?)?;
    let mul = |t: &str, a: NodeEntry, b: NodeEntry| {
        op1("elemwise_mul", name(t), vec![a, b], Attrs::new())
    };
    let div = |t: &str, a: NodeEntry, b: NodeEntry| {
        op1("elemwise_div", name(t), vec![a, b], Attrs::new())
    };
    let d = match (n.op_name(), crate::ops::norm_ord("norm", &n.attrs)?) {
        ("prod", _) => div("out", mul("gy", g, spread("y", out(n, 0))?)?, x.clone())?,
        (_, 2) => div("out", mul("gx", g, x.clone())?, spread("y", out(n, 0))?)?,
        _ => mul(
            "out",
            g,
            op1("sign", name("sign"), vec![x.clone()], Attrs::new())?,
        )?,
    };
    Ok(vec![Some(d)])
}

fn add(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    Ok(vec![Some(g.clone()), Some(g)])
}

fn identity(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    Ok(vec![Some(need(n, og)?)])
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
                    "zeros_like",
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
