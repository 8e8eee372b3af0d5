//! The unary family on the GPU (`unary.cu`): one kernel for every member by its code, one for
//! the gradient through a member, and Activation's single-precision kernels by its `act_type`.

use super::{backward_member, member, ActType, Unary};
use crate::ops::gpu::args::{int, kernel_args, ptr};
use crate::ops::gpu::ops::e2s;
use crate::ops::gpu::Stream;
use crate::ops::Call;
use crate::ops::KResult;

kernel_args! {
    /// A function of each element (`unary_fwd`, `act_fwd`), or a gradient through it
    /// (`unary_bwd`, `act_bwd`: `out = x * f'(at)`).
    struct UnaryMap [unary_fwd, unary_bwd, act_fwd, act_bwd] {
        /// Elements.
        n: i64,
        /// The result.
        out: *mut f32,
        /// The data, or the output's gradient.
        x: *mut f32,
        /// Where a derivative is taken (the input or the output); null forward.
        at: *mut f32,
        /// The function: [`Unary::code`] or [`act_code`].
        code: i64,
    }
}

/// The activation kernels' code for `act_type` (`ACT_*` in the device code).
const fn act_code(a: ActType) -> usize {
    match a {
        ActType::Relu => 0,
        ActType::Sigmoid => 1,
        ActType::Tanh => 2,
        ActType::SoftRelu => 3,
        ActType::Softsign => 4,
    }
}

/// The members' and activations' codes as C `#define`s, for the device code.
pub(crate) fn c_defines() -> String {
    let acts = [
        ActType::Relu,
        ActType::Sigmoid,
        ActType::Tanh,
        ActType::SoftRelu,
        ActType::Softsign,
    ];
    let mut s = Unary::c_defines();
    for a in acts {
        let name = a.word().to_ascii_uppercase();
        s += &format!("#define ACT_{name} {}\n", act_code(a));
    }
    s
}

fn run(
    s: &dyn Stream,
    kernel: crate::ops::gpu::args::Kernel<UnaryMap>,
    out: *mut f32,
    (x, at): (*mut f32, *mut f32),
    code: usize,
    n: usize,
) -> KResult {
    let a = UnaryMap {
        n: int(n),
        out,
        x,
        at,
        code: int(code),
    };
    s.run(kernel, n, &a)
}

/// `out = m(x)` over `n` floats (`out` may be `x`).
pub(crate) fn apply(s: &dyn Stream, m: Unary, out: *mut f32, x: *mut f32, n: usize) -> KResult {
    run(s, k::unary_fwd, out, (x, std::ptr::null_mut()), m.code(), n)
}

pub(crate) fn unary(call: Call, s: &dyn Stream) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let m = member(def)?;
    apply(s, m, ptr(&outs[0]), ptr(&ins[0]), outs[0].len())
}

/// `_backward_math(ograd, v)`: the gradient through the member named by `fn`.
pub(crate) fn backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let (m, _) = backward_member(def.name, attrs).map_err(e2s)?;
    let x = (ptr(&ins[0]), ptr(&ins[1]));
    run(s, k::unary_bwd, ptr(&outs[0]), x, m.code(), outs[0].len())
}

pub(crate) fn activation(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let code = act_code(ActType::of(def.name, attrs).map_err(e2s)?);
    let x = (ptr(&ins[0]), std::ptr::null_mut());
    run(s, k::act_fwd, ptr(&outs[0]), x, code, outs[0].len())
}

pub(crate) fn activation_backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let code = act_code(ActType::of(def.name, attrs).map_err(e2s)?);
    let x = (ptr(&ins[0]), ptr(&ins[1]));
    run(s, k::act_bwd, ptr(&outs[0]), x, code, outs[0].len())
}
