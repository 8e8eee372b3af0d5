//! The fused RNN on the GPU: the CPU kernel's plan (`super`) with the stream's GEMMs and
//! one kernel per step each way. Per layer and direction, every step's input projection is one
//! GEMM and each step one hidden-projection GEMM plus `rnn_step_fwd`; backward, per step
//! `rnn_step_bwd` and one GEMM for the state's gradient, then the weight, bias and input
//! gradients in one GEMM each.
//!
//! A bound node in training keeps every layer's output and trace in device memory ([`Kept`],
//! its op state) for its backward node; without one (imperative calls) the backward op runs the
//! forward pass again into scratch. Dropout between layers draws each layer's mask from a seed
//! with the `dropout` kernel's hash (as the Dropout op does), and the kept state holds that seed:
//! the backward pass draws the same masks again instead of keeping them. Per-sample sequence
//! lengths are read back and checked with the CPU's rule (one wait for the device per call),
//! then uploaded as a table the step kernels read.
//!
//! Differences from the CPU kernel: the biases are added inside the step kernel (the same sums
//! in the same order); the previous state is read where the forward pass left it (the layer's
//! output one step back, or the initial state) instead of being gathered; the masks come from
//! another generator (the same values with the same probabilities).

use crate::ops::gpu::args::{int, kernel_args, Dim};
use crate::ops::gpu::elemwise::fill;
use crate::ops::gpu::{DeviceBlock, Gemm, Stream};
use crate::ops::rnn::{Mode, Pass, Rnn};
use crate::ops::Call;
use crate::ops::KResult;
use crate::ops::TensorRef;
use crate::resources::StateSlot;

kernel_args! {
    /// One step of one layer in one direction, forward (see `kernels/rnn.cu`).
    struct RnnStepFwd [rnn_step_fwd] {
        /// Threads: samples times hidden units.
        n: i64,
        /// The step's gates: the input projection in, the activated gates out.
        gates: *mut f32,
        /// The hidden projection (no bias).
        hp: *mut f32,
        /// The input bias.
        bx: *mut f32,
        /// The hidden bias.
        bh: *mut f32,
        /// The state, updated.
        state: *mut f32,
        /// The cell (LSTM), updated.
        cell: *mut f32,
        /// The step's extra values, kept for the backward pass.
        extra: *mut f32,
        /// The step's output.
        out: *mut f32,
        /// Per-sample lengths; null: every sequence whole.
        lens: *const i64,
        /// Hidden units.
        hidden: Dim,
        /// 0 rnn_relu, 1 rnn_tanh, 2 lstm, 3 gru.
        mode: i64,
        /// The state's row stride.
        state_stride: i64,
        /// The output's row stride.
        out_stride: i64,
        /// The step's time.
        time: i64,
    }

    /// One step of one layer in one direction, backward (see `kernels/rnn.cu`).
    struct RnnStepBwd [rnn_step_bwd] {
        /// Threads: samples times hidden units.
        n: i64,
        /// The step's gate gradients: the input projection's, then the hidden projection's.
        dgates: *mut f32,
        /// The step's gates.
        gates: *mut f32,
        /// The step's extra values.
        extra: *mut f32,
        /// The carried state gradient in; its part bypassing the hidden projection out.
        dh: *mut f32,
        /// The carried cell gradient (LSTM), updated.
        dc: *mut f32,
        /// The step's output gradient.
        dy: *mut f32,
        /// The state after the step before (null at the direction's first step).
        h_prev: *mut f32,
        /// That step's cell.
        c_prev: *mut f32,
        /// Per-sample lengths; null: every sequence whole.
        lens: *const i64,
        /// The initial state.
        h0: *mut f32,
        /// The initial cell.
        c0: *mut f32,
        /// The hidden-projection gate gradients at each sample's first step.
        dgates_first: *mut f32,
        /// Hidden units.
        hidden: Dim,
        /// 0 rnn_relu, 1 rnn_tanh, 2 lstm, 3 gru.
        mode: i64,
        /// `dy`'s row stride.
        dy_stride: i64,
        /// `h_prev`'s row stride.
        h_stride: i64,
        /// `c_prev`'s row stride.
        c_stride: i64,
        /// The step's time.
        time: i64,
        /// The direction.
        dir: i64,
        /// Steps in the sequence.
        steps: i64,
    }
}

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
            fill(s, c, m * n, 0.0)?;
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

/// Per-sample sequence lengths as the step kernels read them: an i64 table in device memory, or
/// null where every sequence runs all `steps`. `ins` are the forward op's inputs.
fn lengths(s: &dyn Stream, r: &Rnn, ins: &[TensorRef], steps: usize) -> Result<*mut f32, String> {
    if !r.seq_len {
        return Ok(std::ptr::null_mut());
    }
    let read = s.download(&ins[r.inputs() - 1])?;
    let lens = crate::ops::rnn::sequence_lengths(read.into_iter().map(f64::from), steps)?;
    let table: Vec<i64> = lens.into_iter().map(|l| l as i64).collect();
    Ok(s.upload(&table)?.cast())
}

/// Layer `l`'s mask seed: the op's seed and the layer mixed (splitmix64's finalizer), so that
/// the layers draw unrelated streams from the `dropout` kernel's hash.
pub(crate) fn layer_seed(seed: u64, l: usize) -> u64 {
    let mut z = seed ^ (l as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Dropout between layers: layer `l + 1` reads layer `l`'s output times a mask drawn from the
/// seed and `l` (each element 0, with probability `p`, or `1 / (1 - p)`).
#[derive(Clone, Copy)]
struct Masks {
    seed: u64,
    p: f64,
    /// Room for one layer's dropped output and its mask.
    dropped: *mut f32,
    mask: *mut f32,
}

impl Masks {
    fn new(s: &dyn Stream, seed: u64, p: &Pass<'_, f32>) -> Result<Masks, String> {
        Ok(Masks {
            seed,
            p: p.r.p,
            dropped: floats(s, p.layer_len())?,
            mask: floats(s, p.layer_len())?,
        })
    }

    /// Draws layer `l`'s mask into `self.mask` and returns its output `y` (`len` elements) times
    /// it, in `self.dropped`.
    fn apply(&self, s: &dyn Stream, l: usize, y: *mut f32, len: usize) -> Result<*mut f32, String> {
        let a = crate::ops::gpu::nn::Dropout {
            n: len as i64,
            out: self.dropped,
            mask: self.mask,
            x: y,
            seed: layer_seed(self.seed, l) as i64,
            p: self.p as f32,
            scale: (1.0 / (1.0 - self.p)) as f32,
        };
        s.run(crate::ops::gpu::nn::k::dropout, len, &a)?;
        Ok(self.dropped)
    }
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
    /// Per-sample lengths ([`lengths`]).
    lens: *mut f32,
    /// Dropout between layers, in training.
    masks: Option<Masks>,
}

impl Forward {
    /// What layer `l` reads: the data, or the layer below's output (through its mask).
    fn input_of(
        &self,
        s: &dyn Stream,
        p: &Pass<'_, f32>,
        l: usize,
        x: *mut f32,
    ) -> Result<*mut f32, String> {
        match (l, self.masks) {
            (0, _) => Ok(x),
            (_, Some(m)) => m.apply(s, l - 1, self.outputs[l - 1], p.layer_len()),
            (_, None) => Ok(self.outputs[l - 1]),
        }
    }
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
        let input = fwd.input_of(s, p, l, x)?;
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
                let a = RnnStepFwd {
                    n: int(nb * h),
                    gates: at(trace, t * nb * gh),
                    hp,
                    bx: at(params, slot.bx),
                    bh: at(params, slot.bh),
                    state: hs,
                    cell: cs,
                    extra: at(extra, t * nb * ew),
                    out: at(out, t * nb * width + d * h),
                    lens: fwd.lens.cast(),
                    hidden: Dim::new(h),
                    mode: int(mode_code(r.mode)),
                    state_stride: int(h),
                    out_stride: int(width),
                    time: int(t),
                };
                s.run(k::rnn_step_fwd, nb * h, &a)?;
            }
        }
    }
    Ok(())
}

/// What a bound node's training forward pass keeps on the device for its backward node: every
/// layer's output and every (layer, direction)'s trace for data of one shape, the sequence
/// lengths they were computed with (so the backward pass reads none back), and the seed of the
/// masks between layers.
struct Kept {
    /// Steps, batch and input width of the data the trace is for.
    data: [usize; 3],
    /// Whether the last forward pass left its trace here (one outside training does not).
    valid: bool,
    /// `(L, T, N, D*H)`.
    ys: Box<dyn DeviceBlock>,
    /// `(L*D)` traces of `Pass::trace_len` elements.
    traces: Box<dyn DeviceBlock>,
    /// The lengths' i64 table, where the op takes them.
    lens: Option<Box<dyn DeviceBlock>>,
    seed: u64,
}

impl Kept {
    /// The slot's record for `p` on `data`, made (or remade, for another shape) with room for
    /// it; not valid until a forward pass has filled it.
    fn for_pass<'s>(
        slot: &'s mut StateSlot,
        s: &dyn Stream,
        p: &Pass<'_, f32>,
        data: &[usize],
    ) -> Result<&'s mut Kept, String> {
        let data = [data[0], data[1], data[2]];
        let fits = slot
            .as_ref()
            .and_then(|b| b.downcast_ref::<Kept>())
            .is_some_and(|k| k.data == data);
        if !fits {
            // The old blocks go back to the pool before the new ones are taken.
            *slot = None;
            let r = p.r;
            *slot = Some(Box::new(Kept {
                data,
                valid: false,
                ys: s.lasting(r.layers * p.layer_len() * 4)?,
                traces: s.lasting(r.layers * r.dirs * p.trace_len() * 4)?,
                lens: match r.seq_len {
                    true => Some(s.lasting(p.batch * 8)?),
                    false => None,
                },
                seed: 0,
            }));
        }
        let k = slot
            .as_mut()
            .and_then(|b| b.downcast_mut::<Kept>())
            .ok_or("RNN: the node's state holds something else")?;
        k.valid = false;
        Ok(k)
    }

    /// The trace the last forward pass kept for data of this shape, if it kept one.
    fn valid<'s>(slot: Option<&'s mut StateSlot>, data: &[usize]) -> Option<&'s Kept> {
        slot?
            .as_ref()?
            .downcast_ref::<Kept>()
            .filter(|k| k.valid && k.data[..] == data[..3])
    }

    /// The kept buffers as a forward pass writes them.
    fn buffers(&self, p: &Pass<'_, f32>, masks: Option<Masks>) -> Forward {
        let r = p.r;
        let lens = self
            .lens
            .as_ref()
            .map_or(std::ptr::null_mut(), |b| b.ptr().cast());
        let (ys, traces) = (self.ys.ptr().cast(), self.traces.ptr().cast());
        Forward {
            outputs: (0..r.layers).map(|l| at(ys, l * p.layer_len())).collect(),
            traces: (0..r.layers * r.dirs)
                .map(|k| at(traces, k * p.trace_len()))
                .collect(),
            hy: std::ptr::null_mut(),
            cy: std::ptr::null_mut(),
            lens,
            masks,
        }
    }
}

fn tensors(ts: &[TensorRef]) -> Vec<*mut f32> {
    ts.iter().map(|t| t.ptr::<f32>()).collect()
}

/// `RNN(data, parameters, state[, state_cell][, sequence_length])`.
pub(crate) fn rnn(call: Call, s: &dyn Stream, state: Option<&mut StateSlot>) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let r = Rnn::parse(op, attrs).map_err(|e| e.to_string())?;
    let x = &ins[0];
    let p = Pass::new(r, &x.shape, &[], None);
    let (i, o) = (tensors(ins), tensors(outs));
    let lens = lengths(s, &r, ins, p.steps)?;
    let seed = match r.drops() {
        true => crate::ops::gpu::nn::seed_of(op, attrs)?,
        false => 0,
    };
    let masks = match r.drops() {
        true => Some(Masks::new(s, seed, &p)?),
        false => None,
    };
    let nstate = r.layers * r.dirs * p.batch * r.hidden;
    let hy = match r.outputs() > 1 {
        true => o[1],
        false => floats(s, nstate)?,
    };
    let cy = match r.outputs() > 2 {
        true => o[2],
        false => floats(s, nstate)?,
    };
    let c0 = if r.lstm() { i[3] } else { std::ptr::null_mut() };
    // A bound node in training keeps every layer's output and trace for its backward node;
    // otherwise one trace serves every layer, and only the layers below the top need room.
    let kept = match state {
        Some(slot) if r.train => Some(Kept::for_pass(slot, s, &p, &x.shape)?),
        Some(slot) => {
            if let Some(k) = slot.as_mut().and_then(|b| b.downcast_mut::<Kept>()) {
                k.valid = false;
            }
            None
        }
        None => None,
    };
    match kept {
        Some(k) => {
            let fwd = Forward {
                hy,
                cy,
                ..k.buffers(&p, masks)
            };
            if !lens.is_null() {
                s.copy(lens.cast(), fwd.lens.cast(), p.batch * 8)?;
            }
            forward(s, &p, i[1], i[0], (i[2], c0), &fwd)?;
            let top = fwd.outputs[r.layers - 1];
            s.copy(top.cast(), o[0].cast(), p.layer_len() * 4)?;
            k.seed = seed;
            k.valid = true;
        }
        None => {
            let mut outputs = (0..r.layers - 1)
                .map(|_| floats(s, p.layer_len()))
                .collect::<Result<Vec<_>, _>>()?;
            outputs.push(o[0]);
            let fwd = Forward {
                outputs,
                traces: vec![floats(s, p.trace_len())?],
                hy,
                cy,
                lens,
                masks,
            };
            forward(s, &p, i[1], i[0], (i[2], c0), &fwd)?;
        }
    }
    Ok(())
}

/// `_backward_RNN(dy[, dhy[, dcy]], data, parameters, state[, state_cell][, sequence_length])`.
pub(crate) fn rnn_backward(call: Call, s: &dyn Stream, state: Option<&mut StateSlot>) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let r = Rnn::parse(op, attrs).map_err(|e| e.to_string())?;
    let heads = r.outputs();
    let x = &ins[heads];
    let p = Pass::new(r, &x.shape, &[], None);
    let (i, o) = (tensors(ins), tensors(outs));
    let (h, gh, nb, steps) = (r.hidden, r.gh(), p.batch, p.steps);
    let (rows, width, ew) = (steps * nb, p.width(), p.extra());
    let (xs, params, h0) = (i[heads], i[heads + 1], i[heads + 2]);
    let c0 = if r.lstm() {
        i[heads + 3]
    } else {
        std::ptr::null_mut()
    };
    let fwd = match Kept::valid(state, &x.shape) {
        Some(k) => {
            let masks = match r.drops() {
                true => Some(Masks::new(s, k.seed, &p)?),
                false => None,
            };
            k.buffers(&p, masks)
        }
        // Without the forward node's state the masks it drew are lost.
        None if r.drops() => return Err(crate::ops::rnn::masks_lost(op, &r)),
        None => {
            let lens = lengths(s, &r, &ins[heads..], steps)?;
            let nstate = r.layers * r.dirs * nb * h;
            let fwd = Forward {
                outputs: (0..r.layers)
                    .map(|_| floats(s, p.layer_len()))
                    .collect::<Result<_, _>>()?,
                traces: (0..r.layers * r.dirs)
                    .map(|_| floats(s, p.trace_len()))
                    .collect::<Result<_, _>>()?,
                hy: floats(s, nstate)?,
                cy: floats(s, nstate)?,
                lens,
                masks: None,
            };
            forward(s, &p, params, xs, (h0, c0), &fwd)?;
            fwd
        }
    };

    let (dx, dparams, dh0) = (o[0], o[1], o[2]);
    let dc0 = if r.lstm() { o[3] } else { std::ptr::null_mut() };
    crate::ops::gpu::ops::fill_with(s, &outs[1], 0.0)?;
    let dg = floats(s, rows * 2 * gh)?;
    let (dh, dc) = (floats(s, nb * h)?, floats(s, nb * h)?);
    // Each sample's hidden-projection gate gradients at its first step (the one that read the
    // initial state).
    let dg_first = floats(s, nb * gh)?;
    let ones = floats(s, rows)?;
    fill(s, ones, rows, 1.0)?;
    // The gradient of a layer's output: the head gradient on top, then two buffers in turn.
    let below = [floats(s, p.layer_len())?, floats(s, p.layer_len())?];
    let mut dy = i[0];
    for l in (0..r.layers).rev() {
        let input = fwd.input_of(s, &p, l, xs)?;
        let y = fwd.outputs[l];
        let target = if l == 0 { dx } else { below[l % 2] };
        for d in 0..r.dirs {
            let slot = p.slot(l, d);
            let k = l * r.dirs + d;
            let (trace, st) = (fwd.traces[k], k * nb * h);
            let extra = at(trace, rows * gh);
            match heads > 1 {
                true => s.copy(at(i[1], st).cast(), dh.cast(), nb * h * 4)?,
                false => fill(s, dh, nb * h, 0.0)?,
            }
            if r.lstm() {
                match heads > 2 {
                    true => s.copy(at(i[2], st).cast(), dc.cast(), nb * h * 4)?,
                    false => fill(s, dc, nb * h, 0.0)?,
                }
            }
            // A sample whose sequence is empty has no first step.
            fill(s, dg_first, nb * gh, 0.0)?;
            for step in (0..steps).rev() {
                let t = crate::ops::rnn::time(d, step, steps);
                // The step before in the direction's order, where there is one for full
                // sequences (the kernel takes the initial state where a sample starts).
                let prev = match d {
                    0 => t.checked_sub(1),
                    _ => (t + 1 < steps).then_some(t + 1),
                };
                let (h_prev, c_prev) = match prev {
                    Some(q) => (at(y, q * nb * width + d * h), at(extra, q * nb * ew)),
                    None => (std::ptr::null_mut(), std::ptr::null_mut()),
                };
                let c0_here = if r.lstm() { at(c0, st) } else { c0 };
                let a = RnnStepBwd {
                    n: int(nb * h),
                    dgates: at(dg, t * nb * 2 * gh),
                    gates: at(trace, t * nb * gh),
                    extra: at(extra, t * nb * ew),
                    dh,
                    dc,
                    dy: at(dy, t * nb * width + d * h),
                    h_prev,
                    c_prev,
                    lens: fwd.lens.cast(),
                    h0: at(h0, st),
                    c0: c0_here,
                    dgates_first: dg_first,
                    hidden: Dim::new(h),
                    mode: int(mode_code(r.mode)),
                    dy_stride: int(width),
                    h_stride: int(width),
                    c_stride: int(ew.max(1)),
                    time: int(t),
                    dir: int(d),
                    steps: int(steps),
                };
                s.run(k::rnn_step_bwd, nb * h, &a)?;
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
            // H_prev is the layer's output one step back (0 past a sequence's end, where the
            // gate gradients are 0 too), or the initial state at a sample's first step.
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
            let (dg_row, y_row) = match d {
                0 => (nb, 0),
                _ => (0, nb),
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
                (dg_first, gh),
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
        // What reached this layer went through the mask of the layer below's output.
        if let (true, Some(m)) = (l > 0, fwd.masks) {
            crate::ops::binary::gpu::multiply(s, target, target, m.mask, p.layer_len())?;
        }
        dy = target;
    }
    Ok(())
}
