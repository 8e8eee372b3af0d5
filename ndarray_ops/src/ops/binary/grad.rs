//! The binary family's gradient ([`Binary`]): one rule for every member, broadcasting or on
//! same-shape operands, matched exhaustively; the members' groups keep the backward nodes MXNet
//! builds (a broadcasting op's gradients summed back to each operand's shape).

use std::sync::Arc;

use super::Binary;
use crate::error::{invalid, Result};
use crate::ops::family::Member;
use crate::ops::grad::*;
use crate::ops::names::op_name;
use crate::ops::{Attrs, Node, NodeEntry};

/// The gradient of a broadcasting binary op (`broadcast_add`, ...).
pub(crate) fn broadcasting(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    binary(n, og, false)
}

/// The gradient of a same-shape binary op (`elemwise_add`, `_maximum`, ...).
pub(crate) fn same_shaped(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    binary(n, og, true)
}

/// The gradient of a binary op, by its member.
fn binary(n: &Arc<Node>, og: &[Option<NodeEntry>], same: bool) -> Result<Vec<Option<NodeEntry>>> {
    let def =
        n.op.ok_or_else(|| invalid("gradient", "a variable has no gradient rule"))?;
    let member = Member::binary(def).map_err(|e| invalid(def.name, e))?;
    match member {
        Binary::Add if same => add(n, og),
        Binary::Add | Binary::Sub | Binary::Mul | Binary::Div if same => same_shape(member, n, og),
        Binary::Add | Binary::Sub | Binary::Mul | Binary::Div => broadcast(member, n, og),
        Binary::Maximum | Binary::Minimum | Binary::Power | Binary::Hypot | Binary::Mod => {
            select(member, n, og)
        }
        Binary::Equal
        | Binary::NotEqual
        | Binary::Greater
        | Binary::GreaterEqual
        | Binary::Lesser
        | Binary::LesserEqual
        | Binary::LogicalAnd
        | Binary::LogicalOr
        | Binary::LogicalXor => none(n, og),
    }
}

/// A member that [`binary`] sends to a group it is not in.
fn not_here(n: &Node, member: Binary) -> crate::NdError {
    invalid(
        n.op_name(),
        format!("node '{}': {member:?} has no rule in this group", n.name),
    )
}

fn add(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    Ok(vec![Some(g.clone()), Some(g)])
}

/// Same-shape binary arithmetic.
fn same_shape(
    member: Binary,
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let (a, b, y) = (n.inputs[0].clone(), n.inputs[1].clone(), out(n, 0));
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    Ok(match member {
        Binary::Sub => vec![
            Some(g.clone()),
            Some(op1(
                op_name!("negative"),
                name("rhs"),
                vec![g],
                Attrs::new(),
            )?),
        ],
        Binary::Mul => vec![
            Some(op1(
                op_name!("elemwise_mul"),
                name("lhs"),
                vec![g.clone(), b],
                Attrs::new(),
            )?),
            Some(op1(
                op_name!("elemwise_mul"),
                name("rhs"),
                vec![g, a],
                Attrs::new(),
            )?),
        ],
        // d(a / b) = g / b and -g * y / b
        Binary::Div => {
            let da = op1(
                op_name!("elemwise_div"),
                name("lhs"),
                vec![g.clone(), b.clone()],
                Attrs::new(),
            )?;
            let gy = op1(
                op_name!("elemwise_mul"),
                name("gy"),
                vec![g, y],
                Attrs::new(),
            )?;
            let q = op1(
                op_name!("elemwise_div"),
                name("q"),
                vec![gy, b],
                Attrs::new(),
            )?;
            vec![
                Some(da),
                Some(op1(
                    op_name!("negative"),
                    name("rhs"),
                    vec![q],
                    Attrs::new(),
                )?),
            ]
        }
        other => return Err(not_here(n, other)),
    })
}

/// Broadcasting arithmetic: each operand's gradient is summed back to the operand's shape.
fn broadcast(
    member: Binary,
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let (a, b, y) = (n.inputs[0].clone(), n.inputs[1].clone(), out(n, 0));
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    let to = |t: &str, x: NodeEntry, like: NodeEntry| {
        op1(
            op_name!("_sum_to_like"),
            name(t),
            vec![x, like],
            Attrs::new(),
        )
    };
    let (da, db) = match member {
        Binary::Add => (g.clone(), g),
        Binary::Sub => (
            g.clone(),
            op1(op_name!("negative"), name("neg"), vec![g], Attrs::new())?,
        ),
        Binary::Mul => (
            op1(
                op_name!("broadcast_mul"),
                name("gb"),
                vec![g.clone(), b.clone()],
                Attrs::new(),
            )?,
            op1(
                op_name!("broadcast_mul"),
                name("ga"),
                vec![g, a.clone()],
                Attrs::new(),
            )?,
        ),
        // d(a / b) = g / b and -g * y / b
        Binary::Div => {
            let gy = op1(
                op_name!("broadcast_mul"),
                name("gy"),
                vec![g.clone(), y],
                Attrs::new(),
            )?;
            let q = op1(
                op_name!("broadcast_div"),
                name("q"),
                vec![gy, b.clone()],
                Attrs::new(),
            )?;
            (
                op1(
                    op_name!("broadcast_div"),
                    name("gb"),
                    vec![g, b.clone()],
                    Attrs::new(),
                )?,
                op1(op_name!("negative"), name("neg"), vec![q], Attrs::new())?,
            )
        }
        other => return Err(not_here(n, other)),
    };
    Ok(vec![Some(to("lhs", da, a)?), Some(to("rhs", db, b)?)])
}

/// broadcast_maximum/minimum (ties go to the left operand) and broadcast_power.
fn select(
    member: Binary,
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let (a, b, y) = (n.inputs[0].clone(), n.inputs[1].clone(), out(n, 0));
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    let bin =
        |t: &str, op: &str, x: NodeEntry, z: NodeEntry| op1(op, name(t), vec![x, z], Attrs::new());
    let (da, db) = match member {
        op @ (Binary::Maximum | Binary::Minimum) => {
            let (left, right) = if op == Binary::Maximum {
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
        Binary::Power => {
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
                op1(op_name!("log"), name("ln"), vec![a.clone()], Attrs::new())?,
            )?;
            (da, db)
        }
        // d hypot(a, b) = a / y and b / y
        Binary::Hypot => {
            let gy = bin("gy", "broadcast_div", g, y)?;
            (
                bin("ga", "broadcast_mul", gy.clone(), a.clone())?,
                bin("gb", "broadcast_mul", gy, b.clone())?,
            )
        }
        // d mod(a, b) = 1 and -floor(a / b)
        Binary::Mod => {
            let q = bin("q", "broadcast_div", a.clone(), b.clone())?;
            let fq = op1(op_name!("floor"), name("fq"), vec![q], Attrs::new())?;
            let gb = bin("gb", "broadcast_mul", g.clone(), fq)?;
            (
                g,
                op1(op_name!("negative"), name("db"), vec![gb], Attrs::new())?,
            )
        }
        other => return Err(not_here(n, other)),
    };
    let to = |t: &str, x: NodeEntry, like: NodeEntry| {
        op1(
            op_name!("_sum_to_like"),
            name(t),
            vec![x, like],
            Attrs::new(),
        )
    };
    Ok(vec![Some(to("lhs", da, a)?), Some(to("rhs", db, b)?)])
}
