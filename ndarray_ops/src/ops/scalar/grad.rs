//! The scalar family's gradient rule: one for every member, matched exhaustively, each
//! building the backward nodes MXNet's does from forward ops.

use std::sync::Arc;

use super::{member, Scalar};
use crate::error::{invalid, Result};
use crate::ops::grad::{need, op1, out, scaled};
use crate::ops::names::op_name;
use crate::ops::{Attrs, Node, NodeEntry};

/// The gradient of a scalar op, by its member.
pub(crate) fn scalar(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let def =
        n.op.ok_or_else(|| invalid("gradient", "a variable has no gradient rule"))?;
    let m = member(def).map_err(|e| invalid(def.name, e))?;
    let s = m.value(&n.attrs)?;
    let g = || need(n, og);
    let name = format!("{}_backward", n.name);
    let d = match m {
        Scalar::Plus | Scalar::Minus | Scalar::Mod => g()?,
        Scalar::RMinus => op1(op_name!("negative"), name, vec![g()?], Attrs::new())?,
        // d s^x = y ln s
        Scalar::RPower => scaled(
            n,
            "backward",
            op1(
                op_name!("elemwise_mul"),
                format!("{name}_gy"),
                vec![g()?, out(n, 0)],
                Attrs::new(),
            )?,
            s.ln(),
        )?,
        // sigma^2 x inside |x| < 1 / sigma^2, sign(x) outside
        Scalar::SmoothL1 => {
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
                op_name!("where"),
                format!("{name}_factor"),
                vec![inside, quad, lin],
                Attrs::new(),
            )?;
            op1(
                op_name!("elemwise_mul"),
                name,
                vec![g()?, factor],
                Attrs::new(),
            )?
        }
        // d hypot(x, s) = x / y
        Scalar::Hypot => {
            let gx = op1(
                op_name!("elemwise_mul"),
                format!("{name}_gx"),
                vec![g()?, n.inputs[0].clone()],
                Attrs::new(),
            )?;
            op1(
                op_name!("elemwise_div"),
                name,
                vec![gx, out(n, 0)],
                Attrs::new(),
            )?
        }
        Scalar::Mul => scaled(n, "backward", g()?, s)?,
        Scalar::Div => scaled(n, "backward", g()?, 1.0 / s)?,
        // d(s / x) = -y / x
        Scalar::RDiv => {
            let gy = op1(
                op_name!("elemwise_mul"),
                format!("{name}_gy"),
                vec![g()?, out(n, 0)],
                Attrs::new(),
            )?;
            op1(
                op_name!("negative"),
                name.clone(),
                vec![op1(
                    op_name!("elemwise_div"),
                    format!("{name}_q"),
                    vec![gy, n.inputs[0].clone()],
                    Attrs::new(),
                )?],
                Attrs::new(),
            )?
        }
        // The output gradient where the input passes (max: above the scalar, min: below it).
        Scalar::Maximum | Scalar::Minimum => {
            let cmp = match m {
                Scalar::Maximum => op_name!("_greater_scalar"),
                _ => op_name!("_lesser_scalar"),
            };
            let x = n.inputs[0].clone();
            let mask = op1(
                cmp,
                format!("{name}_mask"),
                vec![x],
                Attrs::new().with("scalar", s),
            )?;
            times(n, g()?, mask)?
        }
        // d x^s = s x^(s-1)
        Scalar::Power => {
            let pow = op1(
                op_name!("_power_scalar"),
                format!("{name}_pow"),
                vec![n.inputs[0].clone()],
                Attrs::new().with("scalar", s - 1.0),
            )?;
            times(n, g()?, scaled(n, "coef", pow, s)?)?
        }
        // Comparisons: no gradient flows (as in MXNet).
        Scalar::Equal
        | Scalar::NotEqual
        | Scalar::Greater
        | Scalar::GreaterEqual
        | Scalar::Lesser
        | Scalar::LesserEqual => return Ok(vec![None]),
    };
    Ok(vec![Some(d)])
}

/// `g * factor`, named as the masked rules name their product.
fn times(n: &Node, g: NodeEntry, factor: NodeEntry) -> Result<NodeEntry> {
    op1(
        op_name!("elemwise_mul"),
        format!("{}_backward_out", n.name),
        vec![g, factor],
        Attrs::new(),
    )
}
