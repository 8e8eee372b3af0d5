//! LeakyReLU on the GPU (`leaky_relu.cu`): one kernel for the activation at each element, one
//! for the data's gradient, and prelu's gamma gradient as per-element terms summed per slope.

use super::LeakyAct;
use crate::ops::gpu::args::{int, kernel_args, ptr, Dim};
use crate::ops::gpu::ops::e2s;
use crate::ops::gpu::reduce::channel_sum;
use crate::ops::gpu::Stream;
use crate::ops::{Attrs, Call, KResult};

kernel_args! {
    /// prelu's gamma gradient's terms: `out = ograd * data` where `data <= 0`, else 0.
    struct PreluTerms [prelu_terms] {
        /// Elements.
        n: i64,
        /// The terms.
        out: *mut f32,
        /// The output's gradient.
        ograd: *mut f32,
        /// The data.
        data: *mut f32,
    }

    /// LeakyReLU and prelu, and their data's gradient.
    struct Leaky [leaky_fwd, leaky_bwd] {
        /// Elements.
        n: i64,
        /// The result.
        out: *mut f32,
        /// The data, or (backward) the output's gradient.
        x: *mut f32,
        /// The data (backward).
        data: *mut f32,
        /// prelu's slopes; null: `slope`.
        gamma: *mut f32,
        /// 0 leaky, 1 elu, 2 selu, 3 gelu.
        kind: i64,
        /// Slopes in `gamma`: one, one per channel, or one per element.
        gamma_len: i64,
        /// The data's channels.
        channels: i64,
        /// Elements after the channel axis.
        inner: Dim,
        /// The slope without gamma.
        slope: f32,
    }
}

/// The `leaky_fwd` kernel's code and slope for LeakyReLU's `act_type` (prelu: leaky, its slopes
/// read from gamma).
fn leaky_code(op: &str, attrs: &Attrs) -> Result<(usize, f64), String> {
    Ok(match LeakyAct::of(op, attrs).map_err(e2s)? {
        LeakyAct::Leaky(slope) => (0, slope),
        LeakyAct::Elu(slope) => (1, slope),
        LeakyAct::Selu => (2, 0.0),
        LeakyAct::Gelu => (3, 0.0),
        LeakyAct::Prelu => (0, 0.0),
    })
}

/// LeakyReLU: `data[, gamma] -> out` (gamma: prelu's slopes).
pub(crate) fn leaky_relu(call: Call, s: &dyn Stream) -> KResult {
    run(call, s, true)
}

/// `_backward_LeakyReLU`: `(output gradient, data[, gamma]) -> data gradient[, gamma gradient]`.
pub(crate) fn leaky_relu_backward(call: Call, s: &dyn Stream) -> KResult {
    run(call, s, false)
}

/// Either pass: `forward`, or the gradient.
fn run(call: Call, s: &dyn Stream, forward: bool) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let (code, slope) = leaky_code(def.name, attrs)?;
    let n = outs[0].len();
    let data = if forward { &ins[0] } else { &ins[1] };
    let mut a = Leaky {
        n: int(n),
        out: ptr(&outs[0]),
        x: ptr(&ins[0]),
        data: ptr(data),
        gamma: std::ptr::null_mut(),
        kind: int(code),
        gamma_len: 0,
        channels: 0,
        inner: Dim::new(0),
        slope: slope as f32,
    };
    // prelu's gamma (the input after the data), laid out as the CPU's GammaIndex reads it.
    if let Some(gamma) = ins.get(if forward { 1 } else { 2 }) {
        let channels = data.shape.get(1).copied().unwrap_or(1);
        let inner: usize = data.shape.iter().skip(2).product();
        a.gamma = ptr(gamma);
        a.gamma_len = int(gamma.len());
        a.channels = int(channels);
        a.inner = Dim::new(inner);
        if let Some(dgamma) = outs.get(1) {
            // Before the data's gradient, which may be written over the output's gradient:
            // each element's term, summed per gamma entry (one, one per channel, or each its own).
            let terms = s.scratch(n * 4)?.cast::<f32>();
            let t = PreluTerms {
                n: int(n),
                out: terms,
                ograd: ptr(&ins[0]),
                data: ptr(data),
            };
            s.run(k::prelu_terms, n, &t)?;
            let layout = match gamma.len() {
                1 => (1, 1, n),
                len if len == channels => (n / (channels * inner).max(1), channels, inner),
                len => (1, len, 1),
            };
            channel_sum(s, dgamma.ptr(), terms, layout, 1.0)?;
        }
    }
    match forward {
        true => s.run(k::leaky_fwd, n, &a),
        false => s.run(k::leaky_bwd, n, &a),
    }
}
