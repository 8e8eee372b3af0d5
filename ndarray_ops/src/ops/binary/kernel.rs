//! The binary family's CPU kernel: one loop per member, the member's function inlined.

use super::Binary;
use crate::ops::elemwise::binary_map;
use crate::ops::family::Member;
use crate::ops::TensorRef;
use crate::ops::{Call, KResult};
use crate::resources::KernelRes;
use crate::Element;

/// MXNet's `mod`: the remainder with the divisor's sign (Python's `%`), and 0 for a zero divisor.
pub(crate) fn modulo(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        return 0.0;
    }
    let r = a % b;
    if r != 0.0 && (r < 0.0) != (b < 0.0) {
        r + b
    } else {
        r
    }
}

pub(crate) fn truth<T: Element>(c: bool) -> T {
    T::from_f64(if c { 1.0 } else { 0.0 })
}

/// Runs `binary_map` with the member's function inlined into the loop (a function pointer per
/// element would block vectorization: it cost 10x on a large add).
fn binary_dispatch<T: Element>(b: Binary, x: &TensorRef, y: &TensorRef, o: &TensorRef) {
    let zero = T::default();
    macro_rules! go {
        ($f:expr) => {
            binary_map::<T>(x, y, o, $f)
        };
    }
    match b {
        Binary::Add => go!(T::add),
        Binary::Sub => go!(T::sub),
        Binary::Mul => go!(T::mul),
        Binary::Div => go!(T::div),
        Binary::Maximum => go!(|a, b| if b > a { b } else { a }),
        Binary::Minimum => go!(|a, b| if b < a { b } else { a }),
        Binary::Power => go!(|a: T, b: T| T::from_f64(a.to_f64().powf(b.to_f64()))),
        Binary::Equal => go!(|a, b| truth(a == b)),
        Binary::NotEqual => go!(|a, b| truth(a != b)),
        Binary::Greater => go!(|a, b| truth(a > b)),
        Binary::GreaterEqual => go!(|a, b| truth(a >= b)),
        Binary::Lesser => go!(|a, b| truth(a < b)),
        Binary::LesserEqual => go!(|a, b| truth(a <= b)),
        Binary::Hypot => go!(|a: T, b: T| T::from_f64(a.to_f64().hypot(b.to_f64()))),
        Binary::Mod => go!(|a: T, b: T| T::from_f64(modulo(a.to_f64(), b.to_f64()))),
        Binary::LogicalAnd => go!(move |a, b| truth(a != zero && b != zero)),
        Binary::LogicalOr => go!(move |a, b| truth(a != zero || b != zero)),
        Binary::LogicalXor => go!(move |a, b| truth((a != zero) != (b != zero))),
    }
}

pub(super) fn binary_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let b = Member::binary(def)?;
    crate::with_dtype!(outs[0].dtype, T => binary_dispatch::<T>(b, &ins[0], &ins[1], &outs[0]));
    Ok(())
}
