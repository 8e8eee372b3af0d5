//! The reduction family's gradient rule, matched on the member: sum's and mean's gradient is
//! the output gradient spread back over the input (`_broadcast_backward`, which divides by the
//! count for mean); max's and min's goes to every element equal to the result; prod's is
//! `y / x` and norm's `x / y` (ord 2) or `sign(x)` (ord 1), times the spread output gradient;
//! argmax and argmin have none.

use std::sync::Arc;

use super::{member, norm_ord, Reduce};
use crate::error::{invalid, Result};
use crate::ops::grad::{need, op1, out};
use crate::ops::names::op_name;
use crate::ops::{Attrs, Node, NodeEntry};

/// A value of reduction `n`'s output shape spread back over its input's shape.
fn spread(n: &Arc<Node>, tag: &str, v: NodeEntry) -> Result<NodeEntry> {
    op1(
        op_name!("_broadcast_backward"),
        format!("{}_backward_{tag}", n.name),
        vec![v, n.inputs[0].clone()],
        n.attrs.clone().with("__reduce__", Reduce::Sum.name()),
    )
}

/// The gradient of a reduction, by its member.
pub(crate) fn reduce(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let def =
        n.op.ok_or_else(|| invalid("gradient", "a variable has no gradient rule"))?;
    let m = member(def).map_err(|e| invalid(def.name, e))?;
    let x = n.inputs[0].clone();
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    let spread = |t: &str, v: NodeEntry| spread(n, t, v);
    let mul = |t: &str, a: NodeEntry, b: NodeEntry| {
        op1(op_name!("elemwise_mul"), name(t), vec![a, b], Attrs::new())
    };
    let div = |t: &str, a: NodeEntry, b: NodeEntry| {
        op1(op_name!("elemwise_div"), name(t), vec![a, b], Attrs::new())
    };
    let d = match m {
        Reduce::Sum | Reduce::Mean => op1(
            op_name!("_broadcast_backward"),
            format!("{}_backward", n.name),
            vec![need(n, og)?, x],
            n.attrs.clone().with("__reduce__", m.name()),
        )?,
        Reduce::Max | Reduce::Min => {
            let mask = op1(
                op_name!("broadcast_equal"),
                name("mask"),
                vec![x, spread("y", out(n, 0))?],
                Attrs::new(),
            )?;
            mul("out", spread("g", need(n, og)?)?, mask)?
        }
        Reduce::Prod => {
            let g = spread("g", need(n, og)?)?;
            div("out", mul("gy", g, spread("y", out(n, 0))?)?, x)?
        }
        Reduce::Norm => {
            let g = spread("g", need(n, og)?)?;
            match norm_ord(def.name, &n.attrs)? {
                2 => div("out", mul("gx", g, x)?, spread("y", out(n, 0))?)?,
                _ => {
                    let sign = op1(op_name!("sign"), name("sign"), vec![x], Attrs::new())?;
                    mul("out", g, sign)?
                }
            }
        }
        Reduce::Argmax | Reduce::Argmin => return Ok(vec![None]),
    };
    Ok(vec![Some(d)])
}
