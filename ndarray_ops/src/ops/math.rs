//! Unary math beyond the activations (trigonometry, rounding, logarithms, powers), each with its
//! derivative, and the one backward op that applies any of them, `_backward_math`; plus the
//! unary ops that compute nothing from their input's values: `zeros_like`, `ones_like`,
//! `BlockGrad` and `Cast`.
//!
//! Each function is one row of `math_ops!` below: its forward map and its derivative, written in
//! the input (`sin`: cos x) or in the output (`tan`: 1 + y²). The backward node reads only that
//! one value, so the other is not kept alive for it. Rounding and `sign` are flat almost
//! everywhere: no backward node at all, as MXNet gives them a zero gradient. Everything is
//! computed in f64 and rounded to the array's type.

use std::f64::consts::{LN_10, LN_2, PI};

use super::par::{for_ranges, Shared};
use super::params::{op_params, Params};
use super::{same_dtypes, Arity, Attrs, OpDef, TensorRef};
use crate::error::{invalid, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// What a function's derivative is written in.
#[derive(Clone, Copy)]
pub(crate) enum Deriv {
    /// Zero almost everywhere: no gradient flows.
    Zero,
    /// A function of the forward input.
    OfInput(fn(f64) -> f64),
    /// A function of the forward output.
    OfOutput(fn(f64) -> f64),
}

/// One unary math op.
pub(crate) struct MathFn {
    pub name: &'static str,
    /// The function, for the tests (kernels inline the same expression through `forward`).
    #[cfg(test)]
    pub f: fn(f64) -> f64,
    pub deriv: Deriv,
}

pub(crate) fn softsign(x: f64) -> f64 {
    x / (1.0 + x.abs())
}

fn rint(x: f64) -> f64 {
    let down = x.floor();
    if x - down <= 0.5 {
        down
    } else {
        down + 1.0
    }
}

fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}

macro_rules! deriv {
    (zero) => {
        Deriv::Zero
    };
    (x $d:expr) => {
        Deriv::OfInput($d)
    };
    (y $d:expr) => {
        Deriv::OfOutput($d)
    };
}

/// Forward inputs the backward pass does not read: all of them unless the derivative is written
/// in the input.
macro_rules! ignores {
    (x) => {
        &[]
    };
    ($other:ident) => {
        &[0]
    };
}

/// A function of f64 as itself (its closure's argument typed by the bound).
fn of_f64(f: impl Fn(f64) -> f64 + Sync) -> impl Fn(f64) -> f64 + Sync {
    f
}

macro_rules! math_ops {
    ($($name:literal: $f:expr, $by:ident $(=> $d:expr)?;)*) => {
        const TABLE: &[MathFn] = &[$(MathFn { name: $name, #[cfg(test)] f: $f, deriv: deriv!($by $($d)?) }),*];

        /// Maps `a` into `o` by the function `name`, inlined into the loop (a call through
        /// the table's pointer per element would block vectorization); false if `name` is
        /// not one of these functions.
        fn forward<T: Element>(name: &str, a: &TensorRef, o: &TensorRef) -> bool {
            match name {
                $($name => {
                    let f = of_f64($f);
                    super::elemwise::unary_map::<T>(a, o, |x| T::from_f64(f(x.to_f64())))
                })*
                _ => return false,
            }
            true
        }

        pub(super) fn ops() -> &'static [OpDef] {
            static OPS: &[OpDef] = &[
                $(OpDef {
                    inplace: &[(0, 0)],
                    backward_ignores: ignores!($by),
                    gradient: Some(grad::math),
                    ..OpDef::new($name, Arity::Exactly(1), infer_same, math_kernel)
                }.on_gpu(gpu::elemwise::unary),)*
                OpDef {
                    inplace: &[(0, 0)],
                    ..OpDef::new("_backward_math", Arity::Exactly(2), infer_backward, backward_kernel)
                }.on_gpu(gpu::elemwise::unary_backward),
                OpDef {
                    backward_ignores: &[0],
                    gradient: Some(grad::none),
                    ..OpDef::new("zeros_like", Arity::Exactly(1), infer_same, super::extra::fill_kernel)
                }.on_gpu(gpu::ops::fill),
                OpDef {
                    backward_ignores: &[0],
                    gradient: Some(grad::none),
                    ..OpDef::new("ones_like", Arity::Exactly(1), infer_same, super::extra::fill_kernel)
                }.on_gpu(gpu::ops::fill),
                // The input itself, behind which no gradient flows.
                OpDef {
                    aliases: &["stop_gradient"],
                    identity: true,
                    backward_ignores: &[0],
                    ..OpDef::new("BlockGrad", Arity::Exactly(1), infer_same, super::copy_kernel)
                }.grad(grad::none).on_gpu(gpu::ops::copy),
                OpDef {
                    inplace: &[(0, 0)],
                    gradient: Some(grad::masked),
                    ..OpDef::new("hard_sigmoid", Arity::Exactly(1), infer_hard_sigmoid, hard_sigmoid_kernel)
                }.on_gpu(gpu::elemwise::clamp),
                // Cast's backward: the output gradient in the forward input's dtype.
                OpDef {
                    backward_ignores: &[1],
                    ..OpDef::new("_cast_like", Arity::Exactly(2), infer_cast_like, cast_kernel)
                }.on_gpu(gpu::ops::copy),
                OpDef {
                    aliases: &["cast"],
                    backward_ignores: &[0],
                    gradient: Some(grad::cast),
                    ..OpDef::new("Cast", Arity::Exactly(1), infer_cast, cast_kernel)
                }.on_gpu(gpu::ops::copy),
            ];
            OPS
        }
    };
}

math_ops! {
    "rsqrt": |x| 1.0 / x.sqrt(), x => |x| -0.5 / (x * x.sqrt());
    "reciprocal": |x| 1.0 / x, x => |x| -1.0 / (x * x);
    "cbrt": f64::cbrt, y => |y| 1.0 / (3.0 * y * y);
    "rcbrt": |x| 1.0 / x.cbrt(), x => |x| -1.0 / (3.0 * x * x.cbrt());
    "log1p": f64::ln_1p, x => |x| 1.0 / (1.0 + x);
    "expm1": f64::exp_m1, x => f64::exp;
    "log2": f64::log2, x => |x| 1.0 / (x * LN_2);
    "log10": f64::log10, x => |x| 1.0 / (x * LN_10);
    "erf": libm::erf, x => |x| 2.0 / PI.sqrt() * (-x * x).exp();
    "sin": f64::sin, x => f64::cos;
    "cos": f64::cos, x => |x| -x.sin();
    "tan": f64::tan, y => |y| 1.0 + y * y;
    "arcsin": f64::asin, x => |x| 1.0 / (1.0 - x * x).sqrt();
    "arccos": f64::acos, x => |x| -1.0 / (1.0 - x * x).sqrt();
    "arctan": f64::atan, x => |x| 1.0 / (1.0 + x * x);
    "sinh": f64::sinh, x => f64::cosh;
    "cosh": f64::cosh, x => f64::sinh;
    "arcsinh": f64::asinh, x => |x| 1.0 / (x * x + 1.0).sqrt();
    "arccosh": f64::acosh, x => |x| 1.0 / (x * x - 1.0).sqrt();
    "arctanh": f64::atanh, x => |x| 1.0 / (1.0 - x * x);
    "degrees": |x| x * (180.0 / PI), x => |_| 180.0 / PI;
    "radians": |x| x * (PI / 180.0), x => |_| PI / 180.0;
    "softsign": softsign, x => |x| 1.0 / ((1.0 + x.abs()) * (1.0 + x.abs()));
    // `round` takes halves away from zero, as C's; MXNet's `rint` takes them down (its
    // documentation: "for input n.5 rint returns n while round returns n+1").
    "round": f64::round, zero;
    "rint": rint, zero;
    "fix": f64::trunc, zero;
    "trunc": f64::trunc, zero;
    "floor": f64::floor, zero;
    "ceil": f64::ceil, zero;
    "sign": sign, zero;
}

/// The unary math function named `name`, if it is one of this module's.
pub(crate) fn find(name: &str) -> Option<&'static MathFn> {
    TABLE.iter().find(|m| m.name == name)
}

fn infer_same(_: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    Ok((vec![s[0].clone()], vec![d[0]]))
}

/// `_backward_math(ograd, v)`, with attribute `fn`: `ograd * f'(v)`.
fn infer_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    backward_fn(op, attrs)?;
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

fn backward_fn(op: &str, attrs: &Attrs) -> Result<fn(f64) -> f64> {
    let name = attrs.get("fn").ok_or_else(|| {
        invalid(
            op,
            "attribute fn (the function to differentiate) is required",
        )
    })?;
    match find(name).map(|m| m.deriv) {
        Some(Deriv::OfInput(d) | Deriv::OfOutput(d)) => Ok(d),
        Some(Deriv::Zero) => Err(invalid(op, format!("{name} has a zero gradient"))),
        None => Err(invalid(
            op,
            format!("{name:?} is not a unary math function"),
        )),
    }
}

fn math_kernel(
    def: &OpDef,
    _: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let op = def.name;
    match crate::with_dtype!(outs[0].dtype, T => forward::<T>(op, &ins[0], &outs[0])) {
        true => Ok(()),
        false => Err(format!("{op} is not a unary math function")),
    }
}

fn backward_kernel(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let op = def.name;
    let d = backward_fn(op, attrs).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => {
        let (sg, sv, so) = (
            Shared::new(ins[0].ptr::<T>()),
            Shared::new(ins[1].ptr::<T>()),
            Shared::new(outs[0].ptr::<T>()),
        );
        for_ranges(outs[0].len(), 1, |lo, hi| {
            let (g, v, o) = (sg.get(), sv.get(), so.get());
            for i in lo..hi {
                // SAFETY: equal lengths; disjoint ranges per call; the output is disjoint from
                // or exactly an input, and each element is read before it is written.
                unsafe {
                    *o.add(i) = T::from_f64((*g.add(i)).to_f64() * d((*v.add(i)).to_f64()))
                };
            }
        });
    });
    Ok(())
}

op_params! {
    /// Cast's attributes.
    pub struct CastParams for "Cast" { dtype: DType }
}

fn infer_cast(op: &str, attrs: &Attrs, s: &[Vec<usize>], _: &[DType]) -> Infer {
    Ok((vec![s[0].clone()], vec![CastParams::get(op, attrs)?.dtype]))
}

fn cast_kernel(
    _: &OpDef,
    _: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    crate::with_dtype!(ins[0].dtype, S => {
        crate::with_dtype!(outs[0].dtype, T => {
            // SAFETY: read access to the input, exclusive access to the output (a cast is never
            // planned in place: its dtypes differ or it is not listed as in-place).
            let (x, y) = unsafe { (ins[0].slice::<S>(), outs[0].slice_mut::<T>()) };
            for (y, x) in y.iter_mut().zip(x) {
                *y = T::from_f64(x.to_f64());
            }
        })
    });
    Ok(())
}

fn infer_cast_like(_: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    Ok((vec![s[0].clone()], vec![d[1]]))
}

/// `hard_sigmoid`'s slope and offset: `y = clip(alpha * x + beta, 0, 1)`.
pub(crate) fn hard_sigmoid_params(op: &str, attrs: &Attrs) -> Result<(f64, f64)> {
    let a = HardSigmoidParams::get(op, attrs)?;
    Ok((f64::from(a.alpha), f64::from(a.beta)))
}

op_params! {
    /// hard_sigmoid's attributes.
    pub struct HardSigmoidParams for "hard_sigmoid" {
        alpha: f32,
        beta: f32,
    }
}

fn infer_hard_sigmoid(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    hard_sigmoid_params(op, attrs)?;
    infer_same(op, attrs, s, d)
}

fn hard_sigmoid_kernel(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let op = def.name;
    let (alpha, beta) = hard_sigmoid_params(op, attrs).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => {
        super::elemwise::unary_map::<T>(&ins[0], &outs[0], |x| {
            T::from_f64((alpha * x.to_f64() + beta).clamp(0.0, 1.0))
        })
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each derivative against a central difference of its function, at points inside every
    /// function's domain (arccosh's starts at 1).
    #[test]
    fn derivatives_match_finite_differences() {
        for m in TABLE {
            for &x in &[0.3, 0.55, 0.8] {
                let x = if m.name == "arccosh" { x + 1.0 } else { x };
                let h = 1e-6;
                let numeric = ((m.f)(x + h) - (m.f)(x - h)) / (2.0 * h);
                let exact = match m.deriv {
                    Deriv::Zero => 0.0,
                    Deriv::OfInput(d) => d(x),
                    Deriv::OfOutput(d) => d((m.f)(x)),
                };
                assert!(
                    (numeric - exact).abs() <= 1e-6 * exact.abs().max(1.0),
                    "{} at {x}: derivative {exact}, finite difference {numeric}",
                    m.name
                );
            }
        }
    }
}
