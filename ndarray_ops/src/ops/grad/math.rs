//! Gradient rules of products, reductions, `where`, casts, and the helpers other rules build with.

use super::*;
use crate::ops::names::op_name;

/// One forward op as a backward node with a single output.
pub(crate) fn op1(
    op: &str,
    name: String,
    inputs: Vec<NodeEntry>,
    attrs: Attrs,
) -> Result<NodeEntry> {
    Ok(out(&make(op, name, inputs, attrs)?, 0))
}

pub(crate) fn scaled(n: &Node, tag: &str, g: NodeEntry, by: f64) -> Result<NodeEntry> {
    op1(
        op_name!("_mul_scalar"),
        format!("{}_{tag}", n.name),
        vec![g],
        Attrs::new().with("scalar", by),
    )
}

/// `dot` (2-D) and `batch_dot` with their transposes: each input gradient is another product of
/// the output gradient with the other input.
pub(crate) fn dot(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let op = n.op_name();
    let (a, b) = (n.inputs[0].clone(), n.inputs[1].clone());
    let (ta, tb) = crate::ops::transposes(op, &n.attrs)?;
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

pub(crate) fn reduction(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let attrs = n.attrs.clone().with("__reduce__", n.op_name());
    Ok(vec![Some(op1(
        op_name!("_broadcast_backward"),
        format!("{}_backward", n.name),
        vec![need(n, og)?, n.inputs[0].clone()],
        attrs,
    )?)])
}

pub(crate) fn where_(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let cond = n.inputs[0].clone();
    let zero = scaled(n, "zero", g.clone(), 0.0)?;
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    Ok(vec![
        None,
        Some(op1(
            op_name!("where"),
            name("x"),
            vec![cond.clone(), g.clone(), zero.clone()],
            Attrs::new(),
        )?),
        Some(op1(
            op_name!("where"),
            name("y"),
            vec![cond, zero, g],
            Attrs::new(),
        )?),
    ])
}

/// Ops whose outputs do not depend smoothly on their inputs: no gradient flows (as in MXNet).
pub(crate) fn none(n: &Arc<Node>, _og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    Ok(vec![None; n.inputs.len()])
}

pub(crate) fn add_n(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    Ok(vec![Some(g); n.inputs.len()])
}

/// A value of reduction `n`'s output shape spread back over its input's shape.
pub(crate) fn spread(n: &Arc<Node>, tag: &str, v: NodeEntry) -> Result<NodeEntry> {
    op1(
        op_name!("_broadcast_backward"),
        format!("{}_backward_{tag}", n.name),
        vec![v, n.inputs[0].clone()],
        n.attrs.clone().with("__reduce__", "sum"),
    )
}

/// max/min over axes: the gradient goes to every element equal to the result.
pub(crate) fn extremum(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let x = n.inputs[0].clone();
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    let spread = |t: &str, v: NodeEntry| spread(n, t, v);
    let mask = op1(
        op_name!("broadcast_equal"),
        name("mask"),
        vec![x.clone(), spread("y", out(n, 0))?],
        Attrs::new(),
    )?;
    Ok(vec![Some(op1(
        op_name!("elemwise_mul"),
        name("out"),
        vec![spread("g", need(n, og)?)?, mask],
        Attrs::new(),
    )?)])
}

/// Cast: the output gradient cast back to the input's dtype.
pub(crate) fn cast(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    Ok(vec![Some(op1(
        op_name!("_cast_like"),
        format!("{}_backward", n.name),
        vec![need(n, og)?, n.inputs[0].clone()],
        Attrs::new(),
    )?)])
}

/// prod: `y / x` spread back; norm: `x / y` (ord 2) or `sign(x)` (ord 1), times the spread
/// output gradient.
pub(crate) fn product_or_norm(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let x = n.inputs[0].clone();
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    let spread = |t: &str, v: NodeEntry| spread(n, t, v);
    let g = spread("g", need(n, og)?)?;
    let mul = |t: &str, a: NodeEntry, b: NodeEntry| {
        op1(op_name!("elemwise_mul"), name(t), vec![a, b], Attrs::new())
    };
    let div = |t: &str, a: NodeEntry, b: NodeEntry| {
        op1(op_name!("elemwise_div"), name(t), vec![a, b], Attrs::new())
    };
    let d = match (n.op_name(), crate::ops::norm_ord("norm", &n.attrs)?) {
        ("prod", _) => div("out", mul("gy", g, spread("y", out(n, 0))?)?, x.clone())?,
        (_, 2) => div("out", mul("gx", g, x.clone())?, spread("y", out(n, 0))?)?,
        _ => mul(
            "out",
            g,
            op1(
                op_name!("sign"),
                name("sign"),
                vec![x.clone()],
                Attrs::new(),
            )?,
        )?,
    };
    Ok(vec![Some(d)])
}

pub(crate) fn identity(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    Ok(vec![Some(need(n, og)?)])
}
