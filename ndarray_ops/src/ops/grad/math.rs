//! Gradient rules of products, `where`, casts, and the helpers other rules build with.

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

/// Cast: the output gradient cast back to the input's dtype.
pub(crate) fn cast(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    Ok(vec![Some(op1(
        op_name!("_cast_like"),
        format!("{}_backward", n.name),
        vec![need(n, og)?, n.inputs[0].clone()],
        Attrs::new(),
    )?)])
}

pub(crate) fn identity(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    Ok(vec![Some(need(n, og)?)])
}
