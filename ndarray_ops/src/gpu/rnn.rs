//! The fused RNN on the GPU: the CPU kernel's plan (`ops/rnn.rs`) with the stream's GEMMs and
//! one kernel per step each way. Per layer and direction, every step's input projection is one
//! GEMM and each step one hidden-projection GEMM plus `rnn_step_fwd`; the backward op runs the
//! forward pass again into scratch, then per step `rnn_step_bwd` and one GEMM for the state's
//! gradient, and makes the weight, bias and input gradients in one GEMM each.
//!
//! Differences from the CPU kernel: the biases are added inside the step kernel (the same sums
//! in the same order), the previous state is read where the forward pass left it (the layer's
//! output one step back, or the initial state) instead of being gathered, and per-sample
//! sequence lengths are refused (`gpu::ops::check`).

use super::{Gemm, KArgs, Stream};
use crate::ops::rnn::{Mode, Pass, Rnn};
use crate::ops::{Attrs, TensorRef};

type KResult = Result<(), String>;

/// Element `k` of a device buffer (no host access: pointer arithmetic only).
fn at(p: *mut f32, k: usize) -> *mut f32 {
    p.wrapping_add(k)
}

fn mode_code(m: Mode) -> usize {
    match m {
        Mode::Relu => 0,
        Mode::Tanh => 1,
        Mode::Lstm => 2,
        Mode::Gru => 3,
    }
}

/// Device scratch for `n` floats.
fn floats(s: &dyn Stream, n: usize) -> Result<*mut f32, String> {
    Ok(s.scratch(n.max(1) * 4)?.cast())
}

/// `C (m x n) = op(A) op(B) + beta C`, row-major with the given row strides.
#[allow(clippy::too_many_arguments)]
fn gemm(
    s: &dyn Stream,
    (ta, tb): (bool, bool),
    (m, n, k): (usize, usize, usize),
    (a, lda): (*const f32, usize),
    (b, ldb): (*const f32, usize),
    (c, ldc): (*mut f32, usize),
    beta: f32,
) -> KResult {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // No terms (a one-step sequence has no step before another): C = beta C, which a GEMM
        // library may leave unwritten.
        if beta == 0.0 {
            if ldc != n {
                return Err(format!("RNN: a strided {m}x{n} product over nothing"));
            }
            s.launch("fill", m * n, &KArgs::new(m * n).p(0, c).f(0, 0.0))?;
        }
        return Ok(());
    }
    s.gemm(&Gemm {
        ta,
        tb,
        m,
        n,
        k,
        a,
        lda,
        b,
        ldb,
        c,
        ldc,
        beta,
    })
}

/// The device buffers of one forward pass.
struct Forward {
    /// Layer `l`'s output, `(T, N, D*H)`.
    outputs: Vec<*mut f32>,
    /// (Layer, direction)'s trace: every step's gates, then every step's extra values.
    traces: Vec<*mut f32>,
    /// The final states `(L*D, N, H)`, and LSTM's cells.
    hy: *mut f32,
    cy: *mut f32,
}

/// Runs every layer, leaving each layer's output and each (layer, direction)'s trace where
/// `fwd` says (one trace may serve all when the caller keeps none).
fn forward(
    s: &dyn Stream,
    p: &Pass<'_, f32>,
    params: *mut f32,
    x: *mut f32,
    (h0, c0): (*mut f32, *mut f32),
    fwd: &Forward,
) -> KResult {
    let r = p.r;
    let (h, gh, nb, steps, ew) = (r.hidden, r.gh(), p.batch, p.steps, p.extra());
    let (rows, width) = (steps * nb, p.width());
    let hp = floats(s, nb * gh)?;
    for l in 0..r.layers {
        let input = if l == 0 { x } else { fwd.outputs[l - 1] };
        let out = fwd.outputs[l];
        for d in 0..r.dirs {
            let slot = p.slot(l, d);
            let k = l * r.dirs + d;
            let trace = fwd.traces[k.min(fwd.traces.len() - 1)];
            let extra = at(trace, rows * gh);
            // Every step's input projection; the biases join in the step kernel.
            gemm(
                s,
                (false, true),
                (rows, gh, slot.input),
                (input, slot.input),
                (at(params, slot.wx), slot.input),
                (trace, gh),
                0.0,
            )?;
            let state = k * nb * h;
            let (hs, cs) = (at(fwd.hy, state), at(fwd.cy, state));
            s.copy(at(h0, state).cast(), hs.cast(), nb * h * 4)?;
            if r.lstm() {
                s.copy(at(c0, state).cast(), cs.cast(), nb * h * 4)?;
            }
            for step in 0..steps {
                let t = crate::ops::rnn::time(d, step, steps);
                gemm(
                    s,
                    (false, true),
                    (nb, gh, h),
                    (hs, h),
                    (at(params, slot.wh), h),
                    (hp, gh),
                    0.0,
                )?;
                let a = KArgs::new(nb * h)
                    .i(1, h)
                    .i(2, mode_code(r.mode))
                    .i(3, h)
                    .i(4, width)
                    .p(0, at(trace, t * nb * gh))
                    .p(1, hp)
                    .p(2, at(params, slot.bx))
                    .p(3, at(params, slot.bh))
                    .p(4, hs)
                    .p(5, cs)
                    .p(6, at(extra, t * nb * ew))
                    .p(7, at(out, t * nb * width + d * h));
                s.launch("rnn_step_fwd", nb * h, &a)?;
            }
        }
    }
    Ok(())
}

fn tensors(ts: &[TensorRef]) -> Vec<*mut f32> {
    ts.iter().map(|t| t.ptr::<f32>()).collect()
}

/// `RNN(data, parameters, state[, state_cell])`.
pub(super) fn rnn(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let r = Rnn::parse(op, attrs).map_err(|e| e.to_string())?;
    let x = &ins[0];
    let p = Pass::new(r, &x.shape, &[], None);
    let (i, o) = (tensors(ins), tensors(outs));
    let state = r.layers * r.dirs * p.batch * r.hidden;
    let mut outputs = (0..r.layers.saturating_sub(1))
        .map(|_| floats(s, p.layer_len()))
        .collect::<Result<Vec<_>, _>>()?;
    outputs.push(o[0]);
    let fwd = Forward {
        outputs,
        traces: vec![floats(s, p.trace_len())?],
        hy: if r.outputs() > 1 {
            o[1]
        } else {
            floats(s, state)?
        },
        cy: if r.outputs() > 2 {
            o[2]
        } else {
            floats(s, state)?
        },
    };
    let c0 = if r.lstm() { i[3] } else { std::ptr::null_mut() };
    forward(s, &p, i[1], i[0], (i[2], c0), &fwd)
}

/// `_backward_RNN(dy[, dhy[, dcy]], data, parameters, state[, state_cell])`.
pub(super) fn rnn_backward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let r = Rnn::parse(op, attrs).map_err(|e| e.to_string())?;
    let heads = r.outputs();
    let x = &ins[heads];
    let p = Pass::new(r, &x.shape, &[], None);
    let (i, o) = (tensors(ins), tensors(outs));
    let (h, gh, nb, steps, ew) = (r.hidden, r.gh(), p.batch, p.steps, p.extra());
    let (rows, width) = (steps * nb, p.width());
    let (xs, params, h0) = (i[heads], i[heads + 1], i[heads + 2]);
    let c0 = if r.lstm() {
        i[heads + 3]
    } else {
        std::ptr::null_mut()
    };
    let state = r.layers * r.dirs * nb * h;
    let fwd = Forward {
        outputs: (0..r.layers)
            .map(|_| floats(s, p.layer_len()))
            .collect::<Result<_, _>>()?,
        traces: (0..r.layers * r.dirs)
            .map(|_| floats(s, p.trace_len()))
            .collect::<Result<_, _>>()?,
        hy: floats(s, state)?,
        cy: floats(s, state)?,
    };
    forward(s, &p, params, xs, (h0, c0), &fwd)?;

    let (dx, dparams, dh0) = (o[0], o[1], o[2]);
    let dc0 = if r.lstm() { o[3] } else { std::ptr::null_mut() };
    super::ops::fill_with(s, &outs[1], 0.0)?;
    let dg = floats(s, rows * 2 * gh)?;
    let (dh, dc) = (floats(s, nb * h)?, floats(s, nb * h)?);
    let ones = floats(s, rows)?;
    s.launch("fill", rows, &KArgs::new(rows).p(0, ones).f(0, 1.0))?;
    // The gradient of a layer's output: the head gradient on top, then two buffers in turn.
    let below = [floats(s, p.layer_len())?, floats(s, p.layer_len())?];
    let mut dy = i[0];
    for l in (0..r.layers).rev() {
        let input = if l == 0 { xs } else { fwd.outputs[l - 1] };
        let y = fwd.outputs[l];
        let target = if l == 0 { dx } else { below[l % 2] };
        for d in 0..r.dirs {
            let slot = p.slot(l, d);
            let k = l * r.dirs + d;
            let (trace, st) = (fwd.traces[k], k * nb * h);
            let extra = at(trace, rows * gh);
            match heads > 1 {
                true => s.copy(at(i[1], st).cast(), dh.cast(), nb * h * 4)?,
                false => s.launch("fill", nb * h, &KArgs::new(nb * h).p(0, dh).f(0, 0.0))?,
            }
            if r.lstm() {
                match heads > 2 {
                    true => s.copy(at(i[2], st).cast(), dc.cast(), nb * h * 4)?,
                    false => s.launch("fill", nb * h, &KArgs::new(nb * h).p(0, dc).f(0, 0.0))?,
                }
            }
            for step in (0..steps).rev() {
                let t = crate::ops::rnn::time(d, step, steps);
                // The state and cell the step started from.
                let prev = match d {
                    0 => t.checked_sub(1),
                    _ => (t + 1 < steps).then_some(t + 1),
                };
                let (h_prev, h_stride, c_prev, c_stride) = match prev {
                    Some(q) => (
                        at(y, q * nb * width + d * h),
                        width,
                        at(extra, q * nb * ew),
                        ew.max(1),
                    ),
                    None => (at(h0, st), h, at(c0, st), h),
                };
                let a = KArgs::new(nb * h)
                    .i(1, h)
                    .i(2, mode_code(r.mode))
                    .i(3, width)
                    .i(4, h_stride)
                    .i(5, c_stride)
                    .p(0, at(dg, t * nb * 2 * gh))
                    .p(1, at(trace, t * nb * gh))
                    .p(2, at(extra, t * nb * ew))
                    .p(3, dh)
                    .p(4, dc)
                    .p(5, at(dy, t * nb * width + d * h))
                    .p(6, h_prev)
                    .p(7, c_prev);
                s.launch("rnn_step_bwd", nb * h, &a)?;
                // dh = (the bypass the kernel left) + the hidden projection's gradient W_h.
                gemm(
                    s,
                    (false, false),
                    (nb, h, gh),
                    (at(dg, t * nb * 2 * gh + gh), 2 * gh),
                    (at(params, slot.wh), h),
                    (dh, h),
                    1.0,
                )?;
            }
            s.copy(dh.cast(), at(dh0, st).cast(), nb * h * 4)?;
            if r.lstm() {
                s.copy(dc.cast(), at(dc0, st).cast(), nb * h * 4)?;
            }
            // Weight gradients over every step: dW_x = dG_x^T X, dW_h = dG_h^T H_prev, where
            // H_prev is the layer's output one step back, or the initial state at the first
            // step (t = 0 forward in time, T - 1 backward).
            let dgh = at(dg, gh);
            gemm(
                s,
                (true, false),
                (gh, slot.input, rows),
                (dg, 2 * gh),
                (input, slot.input),
                (at(dparams, slot.wx), slot.input),
                0.0,
            )?;
            let (dg_row, y_row, first) = match d {
                0 => (nb, 0, 0),
                _ => (0, nb, steps - 1),
            };
            gemm(
                s,
                (true, false),
                (gh, h, (steps - 1) * nb),
                (at(dgh, dg_row * 2 * gh), 2 * gh),
                (at(y, y_row * width + d * h), width),
                (at(dparams, slot.wh), h),
                0.0,
            )?;
            gemm(
                s,
                (true, false),
                (gh, h, nb),
                (at(dgh, first * nb * 2 * gh), 2 * gh),
                (at(h0, st), h),
                (at(dparams, slot.wh), h),
                1.0,
            )?;
            // Bias gradients: column sums as a product with ones.
            gemm(
                s,
                (false, false),
                (1, gh, rows),
                (ones, rows),
                (dg, 2 * gh),
                (at(dparams, slot.bx), gh),
                0.0,
            )?;
            gemm(
                s,
                (false, false),
                (1, gh, rows),
                (ones, rows),
                (dgh, 2 * gh),
                (at(dparams, slot.bh), gh),
                0.0,
            )?;
            // The input's gradient, both directions adding into it.
            gemm(
                s,
                (false, false),
                (rows, slot.input, gh),
                (dg, 2 * gh),
                (at(params, slot.wx), slot.input),
                (target, slot.input),
                if d == 0 { 0.0 } else { 1.0 },
            )?;
        }
        dy = target;
    }
    Ok(())
}
