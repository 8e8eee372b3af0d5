//! FullyConnected on the GPU, forward and backward: the stream's GEMMs, then the bias.

use super::{fc_dims, FullyConnectedParams};
use crate::ops::gpu::ops::e2s;
use crate::ops::gpu::reduce::{add_bias, channel_sum};
use crate::ops::gpu::{Gemm, Stream};
use crate::ops::params::Params;
use crate::ops::Call;
use crate::ops::{Attrs, KResult};

fn no_bias(op: &str, attrs: &Attrs) -> Result<bool, String> {
    Ok(FullyConnectedParams::get(op, attrs).map_err(e2s)?.no_bias)
}

pub(crate) fn fully_connected(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (x, w, y) = (&ins[0], &ins[1], &outs[0]);
    let (m, hidden, k) = fc_dims(x, w);
    s.gemm(&Gemm {
        ta: false,
        tb: true,
        m,
        n: hidden,
        k,
        a: x.ptr(),
        lda: k,
        b: w.ptr(),
        ldb: k,
        c: y.ptr(),
        ldc: hidden,
        beta: 0.0,
    })?;
    if !no_bias(op, attrs)? {
        add_bias(s, y, &ins[2], (hidden, 1))?;
    }
    Ok(())
}

pub(crate) fn fully_connected_backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (dy, x, w) = (&ins[0], &ins[1], &ins[2]);
    let (m, hidden, k) = fc_dims(x, w);
    // dx = dy w; dw = dy^T x.
    s.gemm(&Gemm {
        ta: false,
        tb: false,
        m,
        n: k,
        k: hidden,
        a: dy.ptr(),
        lda: hidden,
        b: w.ptr(),
        ldb: k,
        c: outs[0].ptr(),
        ldc: k,
        beta: 0.0,
    })?;
    s.gemm(&Gemm {
        ta: true,
        tb: false,
        m: hidden,
        n: k,
        k: m,
        a: dy.ptr(),
        lda: hidden,
        b: x.ptr(),
        ldb: k,
        c: outs[1].ptr(),
        ldc: k,
        beta: 0.0,
    })?;
    if !no_bias(op, attrs)? {
        channel_sum(s, outs[2].ptr(), dy.ptr(), (m, hidden, 1), 1.0)?;
    }
    Ok(())
}
