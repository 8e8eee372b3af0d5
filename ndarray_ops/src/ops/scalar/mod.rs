//! The scalar family: an array and a number, `x (op) s` or `s (op) x` (`_plus_scalar`,
//! `_rdiv_scalar`, `_greater_scalar`, ...), and `smooth_l1`. Every member is a [`Scalar`]; its
//! CPU kernel, gradient rule and GPU code match on it. Each member but `smooth_l1` applies a
//! member of the binary family with the number as one operand, and the GPU runs it with the
//! binary family's codes.
//!
//! Files: `mod.rs` the members, the scalar attribute, inference and op table; `kernel.rs` the
//! CPU kernel; `grad.rs` the gradient rule; `gpu.rs` and `scalar.cu` the GPU kernel.

pub(crate) mod gpu;
mod grad;
mod kernel;

use super::binary::Binary;
use super::elemwise::infer_unary;
use super::family::Member;
use super::{Arity, Attrs, OpDef};
use crate::error::Result;
use crate::ops::Infer;
use crate::DType;

/// A member of the scalar family, named for its op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scalar {
    Plus,
    Minus,
    RMinus,
    Mul,
    Div,
    RDiv,
    Maximum,
    Minimum,
    Power,
    RPower,
    Equal,
    NotEqual,
    Greater,
    GreaterEqual,
    Lesser,
    LesserEqual,
    Hypot,
    Mod,
    SmoothL1,
}

impl Scalar {
    /// Every member.
    pub(crate) const ALL: [Scalar; 19] = [
        Scalar::Plus,
        Scalar::Minus,
        Scalar::RMinus,
        Scalar::Mul,
        Scalar::Div,
        Scalar::RDiv,
        Scalar::Maximum,
        Scalar::Minimum,
        Scalar::Power,
        Scalar::RPower,
        Scalar::Equal,
        Scalar::NotEqual,
        Scalar::Greater,
        Scalar::GreaterEqual,
        Scalar::Lesser,
        Scalar::LesserEqual,
        Scalar::Hypot,
        Scalar::Mod,
        Scalar::SmoothL1,
    ];

    /// The op's name: the family's one name table.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Scalar::Plus => "_plus_scalar",
            Scalar::Minus => "_minus_scalar",
            Scalar::RMinus => "_rminus_scalar",
            Scalar::Mul => "_mul_scalar",
            Scalar::Div => "_div_scalar",
            Scalar::RDiv => "_rdiv_scalar",
            Scalar::Maximum => "_maximum_scalar",
            Scalar::Minimum => "_minimum_scalar",
            Scalar::Power => "_power_scalar",
            Scalar::RPower => "_rpower_scalar",
            Scalar::Equal => "_equal_scalar",
            Scalar::NotEqual => "_not_equal_scalar",
            Scalar::Greater => "_greater_scalar",
            Scalar::GreaterEqual => "_greater_equal_scalar",
            Scalar::Lesser => "_lesser_scalar",
            Scalar::LesserEqual => "_lesser_equal_scalar",
            Scalar::Hypot => "_hypot_scalar",
            Scalar::Mod => "_mod_scalar",
            Scalar::SmoothL1 => "smooth_l1",
        }
    }

    /// The binary member the op applies with the number as one operand, and whether the number
    /// is the left operand; `None` for `smooth_l1`, a function of its own.
    pub(crate) const fn binary(self) -> Option<(Binary, bool)> {
        Some(match self {
            Scalar::Plus => (Binary::Add, false),
            Scalar::Minus => (Binary::Sub, false),
            Scalar::RMinus => (Binary::Sub, true),
            Scalar::Mul => (Binary::Mul, false),
            Scalar::Div => (Binary::Div, false),
            Scalar::RDiv => (Binary::Div, true),
            Scalar::Maximum => (Binary::Maximum, false),
            Scalar::Minimum => (Binary::Minimum, false),
            Scalar::Power => (Binary::Power, false),
            Scalar::RPower => (Binary::Power, true),
            Scalar::Equal => (Binary::Equal, false),
            Scalar::NotEqual => (Binary::NotEqual, false),
            Scalar::Greater => (Binary::Greater, false),
            Scalar::GreaterEqual => (Binary::GreaterEqual, false),
            Scalar::Lesser => (Binary::Lesser, false),
            Scalar::LesserEqual => (Binary::LesserEqual, false),
            Scalar::Hypot => (Binary::Hypot, false),
            Scalar::Mod => (Binary::Mod, false),
            Scalar::SmoothL1 => return None,
        })
    }

    /// Whether the member's backward pass reads the input: not where the gradient is a
    /// constant multiple of the output gradient, a function of the output, or nothing.
    const fn backward_ignores(self) -> &'static [usize] {
        match self {
            Scalar::RDiv
            | Scalar::Maximum
            | Scalar::Minimum
            | Scalar::Power
            | Scalar::Hypot
            | Scalar::SmoothL1 => &[],
            _ => &[0],
        }
    }

    /// Whether a fused elementwise program runs the op (`symbol::fuse`).
    const fn fused_elementwise(self) -> bool {
        matches!(
            self,
            Scalar::Plus
                | Scalar::Minus
                | Scalar::RMinus
                | Scalar::Mul
                | Scalar::Div
                | Scalar::RDiv
                | Scalar::Maximum
                | Scalar::Minimum
        )
    }

    /// The op's `scalar`: a double, and required although MXNet's table defaults it to 1 (an
    /// arithmetic op without its operand is a mistake worth an error); smooth_l1's sigma is a
    /// float, 1 by default.
    pub(crate) fn value(self, attrs: &Attrs) -> Result<f64> {
        match self {
            Scalar::SmoothL1 => attrs.float(self.name(), "scalar", Some(1.0)),
            _ => attrs.f64(self.name(), "scalar", None),
        }
    }
}

/// The member `def` is, as an error message where it is none (a kernel or rule of the family
/// registered on another op).
pub(crate) fn member(def: &OpDef) -> std::result::Result<Scalar, String> {
    match def.member {
        Member::Scalar(s) => Ok(s),
        _ => Err(format!("{} is not an op of the scalar family", def.name)),
    }
}

/// Inference of a member's op: the output is the input's shape and dtype; the `scalar` is
/// read here too, so that a missing or malformed one fails at the call.
fn infer<const M: usize>(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    Scalar::ALL[M].value(attrs)?;
    infer_unary(op, attrs, s, d)
}

pub(super) fn ops() -> &'static [OpDef] {
    /// Member `M` of [`Scalar::ALL`]'s op (its index a constant, so that its inference, which
    /// receives only the op's name, knows the member).
    const fn def<const M: usize>() -> OpDef {
        let m = Scalar::ALL[M];
        OpDef {
            inplace: &[(0, 0)],
            backward_ignores: m.backward_ignores(),
            ..OpDef::new(
                m.name(),
                Arity::Exactly(1),
                infer::<M>,
                kernel::scalar_kernel,
            )
        }
        .pointwise(m.fused_elementwise())
        .member(Member::Scalar(m))
        .grad(grad::scalar)
        .on_gpu(gpu::scalar)
    }
    static OPS: [OpDef; 19] = [
        def::<0>(),
        def::<1>(),
        def::<2>(),
        def::<3>(),
        def::<4>(),
        def::<5>(),
        def::<6>(),
        def::<7>(),
        def::<8>(),
        def::<9>(),
        def::<10>(),
        def::<11>(),
        def::<12>(),
        def::<13>(),
        def::<14>(),
        def::<15>(),
        def::<16>(),
        def::<17>(),
        def::<18>(),
    ];
    &OPS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_is_registered_and_carries_itself() {
        for s in Scalar::ALL {
            let def = crate::ops::lookup(s.name()).expect("registered");
            assert_eq!(member(def), Ok(s), "{}", s.name());
        }
        assert_eq!(
            member(crate::ops::lookup("dot").unwrap()),
            Err("dot is not an op of the scalar family".to_string())
        );
    }
}
