//! The unary family's CPU kernels: one loop per member with its function inlined, and
//! `_backward_math`'s product of the output gradient with a member's derivative.

use crate::ops::Call;
use rten_simd::SimdUnaryOp;
use rten_vecmath::Exp;

use super::{backward_member, member, Unary};
use crate::ops::elemwise::unary_map;
use crate::ops::par::{for_ranges, Shared};
use crate::ops::vecmath::{Sigmoid, Tanh};
use crate::ops::{KResult, TensorRef};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// `o = m(a)`. Single-precision floats keep their own precision for the transcendental
/// functions (exp, tanh and sigmoid vectorized, see [`vec_map`]); negation, abs, square and
/// relu stay in the array's type; the rest go through f64, each member's loop with its own
/// expression inlined (a call through a pointer per element blocks vectorization).
pub(crate) fn forward<T: Element>(m: Unary, a: &TensorRef, o: &TensorRef) {
    if T::DTYPE == DType::F32 {
        match m {
            Unary::Exp => return vec_map(&Exp {}, a, o),
            Unary::Tanh => return vec_map(&Tanh, a, o),
            Unary::Sigmoid => return vec_map(&Sigmoid, a, o),
            Unary::Log => return unary_map::<f32>(a, o, f32::ln),
            Unary::Sqrt => return unary_map::<f32>(a, o, f32::sqrt),
            _ => {}
        }
    }
    let zero = T::default();
    macro_rules! go {
        ($f:expr) => {
            unary_map::<T>(a, o, $f)
        };
    }
    macro_rules! via {
        ($($m:ident)|*) => {
            match m {
                $(Unary::$m => go!(|x: T| T::from_f64(Unary::$m.eval(x.to_f64()))),)*
                Unary::Negative => go!(move |x: T| zero.sub(x)),
                Unary::Abs => go!(move |x: T| if x < zero { zero.sub(x) } else { x }),
                Unary::Square => go!(|x: T| x.mul(x)),
                Unary::Relu => go!(move |x: T| if x > zero { x } else { zero }),
            }
        };
    }
    via!(
        Exp | Log
            | Sqrt
            | Rsqrt
            | Reciprocal
            | Cbrt
            | Rcbrt
            | Log1p
            | Expm1
            | Log2
            | Log10
            | Erf
            | Sin
            | Cos
            | Tan
            | Arcsin
            | Arccos
            | Arctan
            | Sinh
            | Cosh
            | Arcsinh
            | Arccosh
            | Arctanh
            | Degrees
            | Radians
            | Softsign
            | Round
            | Rint
            | Fix
            | Trunc
            | Floor
            | Ceil
            | Sign
            | Sigmoid
            | Tanh
            | SoftRelu
    )
}

/// `out = op(a)` over f32 arrays through vectorized functions (`rten-vecmath`'s exp, our
/// [`crate::ops::vecmath`]'s tanh and sigmoid), which pick the widest instruction set the CPU
/// has at run time (libm's calls go one element at a time): exp within 1 ulp of the correctly
/// rounded result, tanh within 3, sigmoid within 4 (the
/// `vectorized_exp_tanh_and_sigmoid_stay_within_their_ulps` test holds them to it). Chunks
/// split across threads.
fn vec_map(op: &(impl SimdUnaryOp<f32> + Sync), a: &TensorRef, out: &TensorRef) {
    let (sa, so) = (Shared::new(a.ptr::<f32>()), Shared::new(out.ptr::<f32>()));
    for_ranges(out.len(), 1, |lo, hi| {
        let (pa, po) = (sa.get(), so.get());
        // SAFETY: same length; disjoint ranges per call; the output is either exactly the input
        // (one mutable slice) or disjoint from it (a shared and a mutable slice).
        unsafe {
            if pa == po {
                op.map_mut(std::slice::from_raw_parts_mut(po.add(lo), hi - lo));
            } else {
                let dst = po.add(lo).cast::<std::mem::MaybeUninit<f32>>();
                op.map(
                    std::slice::from_raw_parts(pa.add(lo), hi - lo),
                    std::slice::from_raw_parts_mut(dst, hi - lo),
                );
            }
        }
    });
}

pub(super) fn unary_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let m = member(def)?;
    crate::with_dtype!(outs[0].dtype, T => forward::<T>(m, &ins[0], &outs[0]));
    Ok(())
}

/// `_backward_math(ograd, v)`: `ograd * f'(v)`, in f64, rounded once.
pub(super) fn backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let (_, d) = backward_member(def.name, attrs).map_err(|e| e.to_string())?;
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
