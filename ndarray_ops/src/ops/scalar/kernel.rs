//! The scalar family's CPU kernel: one loop per member, the member's function inlined.

use super::{member, Scalar};
use crate::ops::binary::{modulo, truth};
use crate::ops::elemwise::unary_map;
use crate::ops::Call;
use crate::ops::{KResult, TensorRef};
use crate::resources::KernelRes;
use crate::Element;

/// Runs `unary_map` with the member's function of `x` and `s` inlined into the loop.
fn dispatch<T: Element>(m: Scalar, s: f64, a: &TensorRef, o: &TensorRef) {
    let y = T::from_f64(s);
    macro_rules! go {
        ($f:expr) => {
            unary_map::<T>(a, o, $f)
        };
    }
    match m {
        Scalar::Plus => go!(|x: T| x.add(y)),
        Scalar::Minus => go!(|x: T| x.sub(y)),
        Scalar::RMinus => go!(|x: T| y.sub(x)),
        Scalar::Mul => go!(|x: T| x.mul(y)),
        Scalar::Div => go!(|x: T| x.div(y)),
        Scalar::RDiv => go!(|x: T| y.div(x)),
        Scalar::Maximum => go!(|x: T| if y > x { y } else { x }),
        Scalar::Minimum => go!(|x: T| if y < x { y } else { x }),
        Scalar::Power => go!(|x: T| T::from_f64(x.to_f64().powf(s))),
        Scalar::Equal => go!(|x: T| truth(x == y)),
        Scalar::Greater => go!(|x: T| truth(x > y)),
        Scalar::Lesser => go!(|x: T| truth(x < y)),
        Scalar::NotEqual => go!(|x: T| truth(x != y)),
        Scalar::GreaterEqual => go!(|x: T| truth(x >= y)),
        Scalar::LesserEqual => go!(|x: T| truth(x <= y)),
        Scalar::RPower => go!(|x: T| T::from_f64(s.powf(x.to_f64()))),
        Scalar::Mod => go!(|x: T| T::from_f64(modulo(x.to_f64(), s))),
        Scalar::Hypot => go!(|x: T| T::from_f64(x.to_f64().hypot(s))),
        // Quadratic inside |x| < 1 / s^2, linear outside (Fast R-CNN's loss; `scalar` is sigma).
        Scalar::SmoothL1 => go!(|x: T| {
            let (x, s2) = (x.to_f64(), s * s);
            T::from_f64(if x.abs() < 1.0 / s2 {
                0.5 * s2 * x * x
            } else {
                x.abs() - 0.5 / s2
            })
        }),
    }
}

pub(super) fn scalar_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let m = member(def)?;
    let s = m.value(attrs).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => dispatch::<T>(m, s, &ins[0], &outs[0]));
    Ok(())
}
