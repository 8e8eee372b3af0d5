//! The unary family's gradient rule: one for every member, matched exhaustively. The members
//! MXNet differentiates with forward ops (negative, exp, log, sqrt, square, abs) build those
//! nodes; the activations go through `_backward_Activation`; the rest through one
//! `_backward_math` node that reads the value their derivative is written in; the flat ones
//! (rounding, sign) get no gradient, as in MXNet.

use std::sync::Arc;

use super::{member, ActType, Deriv, Unary};
use crate::error::{invalid, Result};
use crate::ops::grad::{need, op1, out, scaled};
use crate::ops::names::op_name;
use crate::ops::{Attrs, Node, NodeEntry};

/// The gradient of a unary op, by its member.
pub(crate) fn unary(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let def =
        n.op.ok_or_else(|| invalid("gradient", "a variable has no gradient rule"))?;
    let m = member(def).map_err(|e| invalid(def.name, e))?;
    let (x, y) = (n.inputs[0].clone(), out(n, 0));
    let name = |t: &str| format!("{}_backward{t}", n.name);
    let two =
        |op: &'static str, a: NodeEntry, b: NodeEntry| op1(op, name(""), vec![a, b], Attrs::new());
    let activation = |act: ActType| {
        op1(
            op_name!("_backward_Activation"),
            name(""),
            vec![need(n, og)?, y.clone()],
            Attrs::new().with("act_type", act.word()),
        )
    };
    let d = match m {
        Unary::Negative => op1(
            op_name!("negative"),
            name(""),
            vec![need(n, og)?],
            Attrs::new(),
        )?,
        Unary::Exp => two(op_name!("elemwise_mul"), need(n, og)?, y)?,
        Unary::Log => two(op_name!("elemwise_div"), need(n, og)?, x)?,
        Unary::Sqrt => two(
            op_name!("elemwise_div"),
            scaled(n, "half", need(n, og)?, 0.5)?,
            y,
        )?,
        Unary::Square => two(
            op_name!("elemwise_mul"),
            scaled(n, "twice", x, 2.0)?,
            need(n, og)?,
        )?,
        // d|x| = x / |x|
        Unary::Abs => {
            let sign = op1(
                op_name!("elemwise_div"),
                name("_sign"),
                vec![x, y],
                Attrs::new(),
            )?;
            op1(
                op_name!("elemwise_mul"),
                name("_out"),
                vec![need(n, og)?, sign],
                Attrs::new(),
            )?
        }
        Unary::Relu => activation(ActType::Relu)?,
        Unary::Sigmoid => activation(ActType::Sigmoid)?,
        Unary::Tanh => activation(ActType::Tanh)?,
        Unary::SoftRelu => activation(ActType::SoftRelu)?,
        Unary::Rsqrt
        | Unary::Reciprocal
        | Unary::Cbrt
        | Unary::Rcbrt
        | Unary::Log1p
        | Unary::Expm1
        | Unary::Log2
        | Unary::Log10
        | Unary::Erf
        | Unary::Sin
        | Unary::Cos
        | Unary::Tan
        | Unary::Arcsin
        | Unary::Arccos
        | Unary::Arctan
        | Unary::Sinh
        | Unary::Cosh
        | Unary::Arcsinh
        | Unary::Arccosh
        | Unary::Arctanh
        | Unary::Degrees
        | Unary::Radians
        | Unary::Softsign
        | Unary::Round
        | Unary::Rint
        | Unary::Fix
        | Unary::Trunc
        | Unary::Floor
        | Unary::Ceil
        | Unary::Sign => {
            let at = match m.deriv() {
                Deriv::Zero => return Ok(vec![None]),
                Deriv::OfInput(_) => x,
                Deriv::OfOutput(_) => y,
            };
            op1(
                op_name!("_backward_math"),
                name(""),
                vec![need(n, og)?, at],
                Attrs::new().with("fn", m.name()),
            )?
        }
    };
    Ok(vec![Some(d)])
}
