//! The unary family: one array in, one function of each element out (`exp`, `sin`, `relu`,
//! `floor`, ...), `_backward_math` (the gradient through any member), and `Activation` with its
//! backward op, whose `act_type` names a member. Every member is a [`Unary`]; its function,
//! derivative, CPU kernel, gradient rule and GPU code match on it.
//!
//! Files: `mod.rs` the members, their functions and derivatives, and the op table; `kernel.rs`
//! the CPU kernels; `grad.rs` the gradient rule; `activation.rs` Activation and
//! `_backward_Activation`; `gpu.rs` and `unary.cu` the GPU kernels.

mod activation;
pub(crate) mod gpu;
mod grad;
pub(crate) mod kernel;

use std::f64::consts::{LN_10, LN_2, PI};

pub use activation::{ActType, ActivationParams};

use super::elemwise::infer_unary;
use super::family::Member;
use super::{same_dtypes, Arity, Attrs, OpDef};
use crate::error::{invalid, Result};
use crate::ops::Infer;
use crate::DType;

/// A member of the unary family, named for its op. Its discriminant is its code in the GPU
/// kernels (`UNARY_*` in the device code, written from [`Unary::c_defines`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unary {
    Negative,
    Abs,
    Square,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Reciprocal,
    Cbrt,
    Rcbrt,
    Log1p,
    Expm1,
    Log2,
    Log10,
    Erf,
    Sin,
    Cos,
    Tan,
    Arcsin,
    Arccos,
    Arctan,
    Sinh,
    Cosh,
    Arcsinh,
    Arccosh,
    Arctanh,
    Degrees,
    Radians,
    Softsign,
    Round,
    Rint,
    Fix,
    Trunc,
    Floor,
    Ceil,
    Sign,
    Relu,
    Sigmoid,
    Tanh,
    SoftRelu,
}

/// A derivative, as a function of the input or the output.
pub(crate) type Derivative = fn(f64) -> f64;

/// What a member's derivative is written in: the backward node reads only that value, so the
/// other is not kept alive for it.
#[derive(Clone, Copy)]
pub(crate) enum Deriv {
    /// Zero almost everywhere: no gradient flows (rounding, `sign`, as MXNet).
    Zero,
    /// A function of the forward input.
    OfInput(Derivative),
    /// A function of the forward output.
    OfOutput(Derivative),
}

impl Unary {
    /// Every member, in code order.
    pub(crate) const ALL: [Unary; 40] = [
        Unary::Negative,
        Unary::Abs,
        Unary::Square,
        Unary::Exp,
        Unary::Log,
        Unary::Sqrt,
        Unary::Rsqrt,
        Unary::Reciprocal,
        Unary::Cbrt,
        Unary::Rcbrt,
        Unary::Log1p,
        Unary::Expm1,
        Unary::Log2,
        Unary::Log10,
        Unary::Erf,
        Unary::Sin,
        Unary::Cos,
        Unary::Tan,
        Unary::Arcsin,
        Unary::Arccos,
        Unary::Arctan,
        Unary::Sinh,
        Unary::Cosh,
        Unary::Arcsinh,
        Unary::Arccosh,
        Unary::Arctanh,
        Unary::Degrees,
        Unary::Radians,
        Unary::Softsign,
        Unary::Round,
        Unary::Rint,
        Unary::Fix,
        Unary::Trunc,
        Unary::Floor,
        Unary::Ceil,
        Unary::Sign,
        Unary::Relu,
        Unary::Sigmoid,
        Unary::Tanh,
        Unary::SoftRelu,
    ];

    /// The op's name: the family's one name table.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Unary::Negative => "negative",
            Unary::Abs => "abs",
            Unary::Square => "square",
            Unary::Exp => "exp",
            Unary::Log => "log",
            Unary::Sqrt => "sqrt",
            Unary::Rsqrt => "rsqrt",
            Unary::Reciprocal => "reciprocal",
            Unary::Cbrt => "cbrt",
            Unary::Rcbrt => "rcbrt",
            Unary::Log1p => "log1p",
            Unary::Expm1 => "expm1",
            Unary::Log2 => "log2",
            Unary::Log10 => "log10",
            Unary::Erf => "erf",
            Unary::Sin => "sin",
            Unary::Cos => "cos",
            Unary::Tan => "tan",
            Unary::Arcsin => "arcsin",
            Unary::Arccos => "arccos",
            Unary::Arctan => "arctan",
            Unary::Sinh => "sinh",
            Unary::Cosh => "cosh",
            Unary::Arcsinh => "arcsinh",
            Unary::Arccosh => "arccosh",
            Unary::Arctanh => "arctanh",
            Unary::Degrees => "degrees",
            Unary::Radians => "radians",
            Unary::Softsign => "softsign",
            Unary::Round => "round",
            Unary::Rint => "rint",
            Unary::Fix => "fix",
            Unary::Trunc => "trunc",
            Unary::Floor => "floor",
            Unary::Ceil => "ceil",
            Unary::Sign => "sign",
            Unary::Relu => "relu",
            Unary::Sigmoid => "sigmoid",
            Unary::Tanh => "tanh",
            Unary::SoftRelu => "softrelu",
        }
    }

    /// The member named `name` (the name table read backwards).
    pub(crate) fn named(name: &str) -> Option<Unary> {
        Unary::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The member's code in the GPU kernels.
    pub(crate) const fn code(self) -> usize {
        self as usize
    }

    /// The members' codes as C `#define`s (`#define UNARY_SIN 15`), for the device code.
    pub(crate) fn c_defines() -> String {
        Unary::ALL
            .iter()
            .map(|m| {
                let name = m.name().to_ascii_uppercase();
                format!("#define UNARY_{name} {}\n", m.code())
            })
            .collect()
    }

    /// The function, in f64. The CPU kernel inlines it into its loop with the member known,
    /// so each member's loop holds only its own expression.
    #[inline(always)]
    pub(crate) fn eval(self, x: f64) -> f64 {
        match self {
            Unary::Negative => -x,
            Unary::Abs => x.abs(),
            Unary::Square => x * x,
            Unary::Exp => x.exp(),
            Unary::Log => x.ln(),
            Unary::Sqrt => x.sqrt(),
            Unary::Rsqrt => 1.0 / x.sqrt(),
            Unary::Reciprocal => 1.0 / x,
            Unary::Cbrt => x.cbrt(),
            Unary::Rcbrt => 1.0 / x.cbrt(),
            Unary::Log1p => x.ln_1p(),
            Unary::Expm1 => x.exp_m1(),
            Unary::Log2 => x.log2(),
            Unary::Log10 => x.log10(),
            Unary::Erf => libm::erf(x),
            Unary::Sin => x.sin(),
            Unary::Cos => x.cos(),
            Unary::Tan => x.tan(),
            Unary::Arcsin => x.asin(),
            Unary::Arccos => x.acos(),
            Unary::Arctan => x.atan(),
            Unary::Sinh => x.sinh(),
            Unary::Cosh => x.cosh(),
            Unary::Arcsinh => x.asinh(),
            Unary::Arccosh => x.acosh(),
            Unary::Arctanh => x.atanh(),
            Unary::Degrees => x * (180.0 / PI),
            Unary::Radians => x * (PI / 180.0),
            Unary::Softsign => x / (1.0 + x.abs()),
            // `round` takes halves away from zero, as C's; MXNet's `rint` takes them down (its
            // documentation: "for input n.5 rint returns n while round returns n+1").
            Unary::Round => x.round(),
            Unary::Rint => {
                let down = x.floor();
                if x - down <= 0.5 {
                    down
                } else {
                    down + 1.0
                }
            }
            Unary::Fix | Unary::Trunc => x.trunc(),
            Unary::Floor => x.floor(),
            Unary::Ceil => x.ceil(),
            Unary::Sign => {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            }
            Unary::Relu => x.max(0.0),
            Unary::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Unary::Tanh => x.tanh(),
            // log(1 + e^x) without overflow for large x.
            Unary::SoftRelu => {
                if x > 20.0 {
                    x
                } else {
                    x.exp().ln_1p()
                }
            }
        }
    }

    /// The derivative, written in the input (`sin`: cos x) or in the output (`tan`: 1 + y²).
    pub(crate) fn deriv(self) -> Deriv {
        use Deriv::{OfInput as X, OfOutput as Y};
        match self {
            Unary::Negative => X(|_| -1.0),
            Unary::Abs => X(|x| Unary::Sign.eval(x)),
            Unary::Square => X(|x| 2.0 * x),
            Unary::Exp => Y(|y| y),
            Unary::Log => X(|x| 1.0 / x),
            Unary::Sqrt => Y(|y| 0.5 / y),
            Unary::Rsqrt => X(|x| -0.5 / (x * x.sqrt())),
            Unary::Reciprocal => X(|x| -1.0 / (x * x)),
            Unary::Cbrt => Y(|y| 1.0 / (3.0 * y * y)),
            Unary::Rcbrt => X(|x| -1.0 / (3.0 * x * x.cbrt())),
            Unary::Log1p => X(|x| 1.0 / (1.0 + x)),
            Unary::Expm1 => X(f64::exp),
            Unary::Log2 => X(|x| 1.0 / (x * LN_2)),
            Unary::Log10 => X(|x| 1.0 / (x * LN_10)),
            Unary::Erf => X(|x| 2.0 / PI.sqrt() * (-x * x).exp()),
            Unary::Sin => X(f64::cos),
            Unary::Cos => X(|x| -x.sin()),
            Unary::Tan => Y(|y| 1.0 + y * y),
            Unary::Arcsin => X(|x| 1.0 / (1.0 - x * x).sqrt()),
            Unary::Arccos => X(|x| -1.0 / (1.0 - x * x).sqrt()),
            Unary::Arctan => X(|x| 1.0 / (1.0 + x * x)),
            Unary::Sinh => X(f64::cosh),
            Unary::Cosh => X(f64::sinh),
            Unary::Arcsinh => X(|x| 1.0 / (x * x + 1.0).sqrt()),
            Unary::Arccosh => X(|x| 1.0 / (x * x - 1.0).sqrt()),
            Unary::Arctanh => X(|x| 1.0 / (1.0 - x * x)),
            Unary::Degrees => X(|_| 180.0 / PI),
            Unary::Radians => X(|_| PI / 180.0),
            Unary::Softsign => X(|x| 1.0 / ((1.0 + x.abs()) * (1.0 + x.abs()))),
            Unary::Round
            | Unary::Rint
            | Unary::Fix
            | Unary::Trunc
            | Unary::Floor
            | Unary::Ceil
            | Unary::Sign => Deriv::Zero,
            Unary::Relu => Y(ActType::Relu.derivative()),
            Unary::Sigmoid => Y(ActType::Sigmoid.derivative()),
            Unary::Tanh => Y(ActType::Tanh.derivative()),
            Unary::SoftRelu => Y(ActType::SoftRelu.derivative()),
        }
    }

    /// Forward inputs the backward pass does not read: the input, unless the member's rule
    /// reads it (the plans, and their figures against MXNet's, follow from these).
    const fn backward_ignores(self) -> &'static [usize] {
        match self {
            Unary::Negative
            | Unary::Exp
            | Unary::Sqrt
            | Unary::Cbrt
            | Unary::Tan
            | Unary::Tanh
            | Unary::Sigmoid
            | Unary::Round
            | Unary::Rint
            | Unary::Fix
            | Unary::Trunc
            | Unary::Floor
            | Unary::Ceil
            | Unary::Sign => &[0],
            // Relu's and SoftRelu's rules read only the output, but the input is kept for
            // them, as the plans measured against MXNet's assume.
            Unary::Abs
            | Unary::Square
            | Unary::Log
            | Unary::Rsqrt
            | Unary::Reciprocal
            | Unary::Rcbrt
            | Unary::Log1p
            | Unary::Expm1
            | Unary::Log2
            | Unary::Log10
            | Unary::Erf
            | Unary::Sin
            | Unary::Cos
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
            | Unary::Relu
            | Unary::SoftRelu => &[],
        }
    }

    /// Whether a fused elementwise program runs the op (`symbol::fuse`): the members MXNet's
    /// own fusion takes and the models use.
    const fn fused_elementwise(self) -> bool {
        matches!(
            self,
            Unary::Negative
                | Unary::Abs
                | Unary::Square
                | Unary::Exp
                | Unary::Log
                | Unary::Sqrt
                | Unary::Relu
                | Unary::Tanh
                | Unary::Sigmoid
                | Unary::SoftRelu
        )
    }
}

/// The member `def` is, as an error message where it is none (a kernel or rule of the family
/// registered on another op).
pub(crate) fn member(def: &OpDef) -> std::result::Result<Unary, String> {
    match def.member {
        Member::Unary(m) => Ok(m),
        _ => Err(format!("{} is not an op of the unary family", def.name)),
    }
}

/// `_backward_math`'s `fn`: the member whose derivative it applies, one with a nonzero one.
fn backward_member(op: &str, attrs: &Attrs) -> Result<(Unary, Derivative)> {
    let name = attrs.get("fn").ok_or_else(|| {
        invalid(
            op,
            "attribute fn (the function to differentiate) is required",
        )
    })?;
    let m = Unary::named(name)
        .ok_or_else(|| invalid(op, format!("{name:?} is not a unary math function")))?;
    match m.deriv() {
        Deriv::OfInput(d) | Deriv::OfOutput(d) => Ok((m, d)),
        Deriv::Zero => Err(invalid(op, format!("{name} has a zero gradient"))),
    }
}

/// `_backward_math(ograd, v)`, with attribute `fn`: `ograd * f'(v)`.
fn infer_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    backward_member(op, attrs)?;
    same_dtypes(op, d)?;
    if s[1] != s[0] {
        return Err(invalid(
            op,
            format!(
                "the output gradient has shape {:?}, the value it is taken at {:?}",
                s[0], s[1]
            ),
        ));
    }
    Ok((vec![s[0].clone()], vec![d[0]]))
}

/// Member `m`'s op.
const fn def(m: Unary) -> OpDef {
    OpDef {
        inplace: &[(0, 0)],
        backward_ignores: m.backward_ignores(),
        ..OpDef::new(
            m.name(),
            Arity::Exactly(1),
            infer_unary,
            kernel::unary_kernel,
        )
    }
    .pointwise(m.fused_elementwise())
    .member(Member::Unary(m))
    .grad(grad::unary)
    .on_gpu(gpu::unary)
}

pub(super) fn ops() -> &'static [OpDef] {
    const MEMBERS: usize = Unary::ALL.len();
    /// Every member's op, then `_backward_math` and Activation's two.
    static OPS: [OpDef; MEMBERS + 3] = {
        const BACKWARD_MATH: OpDef = OpDef {
            inplace: &[(0, 0)],
            ..OpDef::new(
                "_backward_math",
                Arity::Exactly(2),
                infer_backward,
                kernel::backward_kernel,
            )
        }
        .on_gpu(gpu::backward);
        let mut ops = [BACKWARD_MATH; MEMBERS + 3];
        let mut i = 0;
        while i < MEMBERS {
            ops[i] = def(Unary::ALL[i]);
            i += 1;
        }
        ops[MEMBERS + 1] = activation::ACTIVATION;
        ops[MEMBERS + 2] = activation::BACKWARD;
        ops
    };
    &OPS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_is_registered_and_carries_itself() {
        for m in Unary::ALL {
            let def = crate::ops::lookup(m.name()).expect("registered");
            assert_eq!(member(def), Ok(m), "{}", m.name());
            assert_eq!(Unary::named(m.name()), Some(m));
        }
        assert_eq!(
            member(crate::ops::lookup("dot").unwrap()),
            Err("dot is not an op of the unary family".to_string())
        );
    }

    /// Each derivative against a central difference of its function, at points inside every
    /// function's domain (arccosh's starts at 1).
    #[test]
    fn derivatives_match_finite_differences() {
        for m in Unary::ALL {
            for &x in &[0.3, 0.55, 0.8] {
                let x = if m == Unary::Arccosh { x + 1.0 } else { x };
                let h = 1e-6;
                let numeric = (m.eval(x + h) - m.eval(x - h)) / (2.0 * h);
                let exact = match m.deriv() {
                    Deriv::Zero => 0.0,
                    Deriv::OfInput(d) => d(x),
                    Deriv::OfOutput(d) => d(m.eval(x)),
                };
                assert!(
                    (numeric - exact).abs() <= 1e-6 * exact.abs().max(1.0),
                    "{} at {x}: derivative {exact}, finite difference {numeric}",
                    m.name()
                );
            }
        }
    }
}
