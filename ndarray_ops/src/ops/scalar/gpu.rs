//! The scalar family on the GPU (`scalar.cu`): one kernel for every member, by the binary
//! family's code of the function it applies.

use super::{member, Scalar};
use crate::ops::binary::Binary;
use crate::ops::gpu::args::{int, kernel_args, ptr};
use crate::ops::gpu::ops::e2s;
use crate::ops::gpu::Stream;
use crate::ops::Call;
use crate::ops::{KResult, TensorRef};

kernel_args! {
    /// `out = x (op) scalar`, or `scalar (op) x`.
    struct ScalarArgs [scalar] {
        /// Elements.
        n: i64,
        /// The result (may be `x`).
        out: *mut f32,
        /// The array operand.
        x: *mut f32,
        /// The operation ([`Scalar::code`]).
        code: i64,
        /// 1: the scalar is the left operand.
        left: i64,
        /// The scalar.
        scalar: f32,
    }
}

/// The scalar kernels' code for `smooth_l1` (of `x` with sigma `y`), after the binary family's
/// codes (`SMOOTH_L1` in the device code).
pub(crate) const SMOOTH_L1: usize = Binary::ALL.len();

impl Scalar {
    /// The `scalar` kernel's code for the member (the `binary` kernel's codes), and whether the
    /// scalar is the left operand.
    pub(crate) const fn code(self) -> (usize, bool) {
        match self.binary() {
            Some((b, left)) => (b.code(), left),
            None => (SMOOTH_L1, false),
        }
    }
}

pub(crate) fn scalar(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let m = member(def)?;
    let value = m.value(attrs).map_err(e2s)?;
    scalar_with(s, m, &outs[0], &ins[0], value)
}

/// `out = x (m) value` by the `scalar` kernel (which reads each index before writing it, so
/// `out` may be `x`).
pub(crate) fn scalar_with(
    s: &dyn Stream,
    m: Scalar,
    out: &TensorRef,
    x: &TensorRef,
    value: f64,
) -> KResult {
    scalar_on(s, m, ptr(out), ptr(x), out.len(), value)
}

/// `out = x (m) value` over `n` floats at device pointers (`out` may be `x`).
pub(crate) fn scalar_on(
    s: &dyn Stream,
    m: Scalar,
    out: *mut f32,
    x: *mut f32,
    n: usize,
    value: f64,
) -> KResult {
    let (code, left) = m.code();
    let a = ScalarArgs {
        n: int(n),
        out,
        x,
        code: int(code),
        left: i64::from(left),
        scalar: value as f32,
    };
    s.run(k::scalar, n, &a)
}
