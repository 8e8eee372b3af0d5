//! MXNet's fused recurrent op `RNN` — modes `rnn_relu`, `rnn_tanh`, `lstm` and `gru`, stacked
//! layers, one or two directions, per-sample sequence lengths — and its backward op.
//!
//! Layout, as MXNet's: data `(T, N, I)`, time first; the parameters one flat vector holding, for
//! each layer and then each direction, the input weights `(G*H, In)` and the hidden weights
//! `(G*H, H)`, then every bias in the same order (input bias `G*H`, hidden bias `G*H`); the
//! states `(L*D, N, H)`, indexed `layer * D + direction`. Gates in order: LSTM i, f, g, o; GRU
//! r, z, n (the candidate `tanh(x_n + r * (W_hn h + b_hn))`, then `h' = (1 - z) n + z h`). A
//! bidirectional layer's output is `[forward, backward]` along the features, and is the next
//! layer's input.
//!
//! Per layer and direction the input projection of every step is one GEMM over all `T*N` rows
//! and only the hidden projection runs step by step; the backward pass likewise gathers every
//! step's gate gradients and makes the weight gradients and the input gradient in one GEMM each.
//!
//! A training forward pass of a bound node keeps every layer's output and every step's gates in
//! the node's [`OpState`](crate::resources::OpState), as MXNet's CPU op keeps them in its op
//! state (a hidden output cannot hold them: MXNet's files fix the op's output count), and the
//! backward node reads them. Without a kept trace — an imperative call, a forward pass not in
//! training, a GPU node — the backward op first runs the forward pass again into its temp
//! space: one more forward's work.

use ndarray::{ArrayView2, ArrayViewMut2};
use rten_simd::SimdUnaryOp;
use rten_vecmath::{Sigmoid, Tanh};

use super::par::{for_ranges, Shared};
use super::stochastic::dropout_mask;
use super::{Arity, Attrs, OpDef, StateUse, TensorRef, IS_TRAIN};
use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::{Infer, KResult};
use crate::resources::{KernelRes, Resource, StateSlot};
use crate::{DType, Element};

/// The recurrence of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Relu,
    Tanh,
    Lstm,
    Gru,
}

impl Mode {
    fn gates(self) -> usize {
        match self {
            Mode::Relu | Mode::Tanh => 1,
            Mode::Lstm => 4,
            Mode::Gru => 3,
        }
    }
}

/// An RNN node's attributes, checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rnn {
    pub(crate) mode: Mode,
    pub(crate) hidden: usize,
    pub(crate) layers: usize,
    pub(crate) dirs: usize,
    state_outputs: bool,
    pub(crate) seq_len: bool,
    /// Dropout probability on each layer's output but the last's, in training.
    pub(crate) p: f64,
    /// Whether the node runs in training (`__is_train__`).
    pub(crate) train: bool,
}

/// Where one (layer, direction)'s weights and biases start in the flat parameter vector, and
/// the width of its input.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub(crate) wx: usize,
    pub(crate) wh: usize,
    pub(crate) bx: usize,
    pub(crate) bh: usize,
    pub(crate) input: usize,
}

impl Rnn {
    pub(crate) fn parse(op: &str, attrs: &Attrs) -> Result<Rnn> {
        let mode = match attrs.get("mode") {
            Some("rnn_relu") => Mode::Relu,
            Some("rnn_tanh") => Mode::Tanh,
            Some("lstm") => Mode::Lstm,
            Some("gru") => Mode::Gru,
            Some(other) => {
                return Err(invalid(
                    op,
                    format!("mode {other:?} is not one of rnn_relu, rnn_tanh, lstm, gru"),
                ))
            }
            None => return Err(invalid(op, "attribute mode is required")),
        };
        // MXNet holds both as unsigned 32-bit integers.
        let count = |key: &str| attrs.count(op, key, None, 1..=u32::MAX);
        let (hidden, layers) = (count("state_size")?, count("num_layers")?);
        // What MXNet accepts only with cuDNN, refused rather than ignored.
        if attrs.get("projection_size").is_some_and(|v| v != "None") {
            return Err(invalid(op, "projection_size (LSTMP) is not supported"));
        }
        for key in ["lstm_state_clip_min", "lstm_state_clip_max"] {
            if attrs.get(key).is_some_and(|v| v != "None") {
                return Err(invalid(
                    op,
                    format!("{key} (cell clipping) is not supported"),
                ));
            }
        }
        let p = attrs.f64(op, "p", Some(0.0))?;
        if !(0.0..1.0).contains(&p) {
            return Err(invalid(op, format!("p={p} is outside [0, 1)")));
        }
        Ok(Rnn {
            mode,
            hidden,
            layers,
            dirs: if attrs.bool(op, "bidirectional", false)? {
                2
            } else {
                1
            },
            state_outputs: attrs.bool(op, "state_outputs", false)?,
            seq_len: attrs.bool(op, "use_sequence_length", false)?,
            p,
            train: attrs.bool(op, IS_TRAIN, false)?,
        })
    }

    /// Whether a forward pass drops units of the layers' outputs below the top one (in
    /// training, as MXNet's Dropout; it does nothing at inference).
    pub(crate) fn drops(&self) -> bool {
        self.p > 0.0 && self.layers > 1 && self.train
    }

    pub(crate) fn lstm(&self) -> bool {
        self.mode == Mode::Lstm
    }

    /// Gate rows of a weight matrix.
    pub(crate) fn gh(&self) -> usize {
        self.mode.gates() * self.hidden
    }

    /// Inputs: data, parameters, state, then LSTM's cell state, then the sequence lengths.
    pub(crate) fn inputs(&self) -> usize {
        3 + usize::from(self.lstm()) + usize::from(self.seq_len)
    }

    /// Inputs that have a gradient (all but the sequence lengths).
    fn grad_inputs(&self) -> usize {
        3 + usize::from(self.lstm())
    }

    /// Outputs: the sequence, then with `state_outputs` the final state and LSTM's final cell.
    pub(crate) fn outputs(&self) -> usize {
        if self.state_outputs {
            2 + usize::from(self.lstm())
        } else {
            1
        }
    }

    /// Every (layer, direction)'s slot and the parameter count, for data `input` wide.
    fn slots(&self, input: usize) -> (Vec<Slot>, usize) {
        let (gh, h) = (self.gh(), self.hidden);
        let mut slots = Vec::with_capacity(self.layers * self.dirs);
        let mut at = 0;
        for l in 0..self.layers {
            let input = if l == 0 { input } else { self.dirs * h };
            for _ in 0..self.dirs {
                slots.push(Slot {
                    wx: at,
                    wh: at + gh * input,
                    bx: 0,
                    bh: 0,
                    input,
                });
                at += gh * (input + h);
            }
        }
        for s in &mut slots {
            s.bx = at;
            s.bh = at + gh;
            at += 2 * gh;
        }
        (slots, at)
    }

    /// The parameter count `slots` reaches for data `input` wide, or `None` past `usize`:
    /// computed without listing the slots, so that attributes asking for more parameters than
    /// could exist are refused before anything is sized by them.
    fn param_count(&self, input: usize) -> Option<usize> {
        let (gh, h, dirs) = (self.gh(), self.hidden, self.dirs);
        let first = gh.checked_mul(input.checked_add(h)?)?;
        let above = gh.checked_mul(dirs.checked_mul(h)?.checked_add(h)?)?;
        let biases = 2 * gh;
        let per_dir = first
            .checked_add(above.checked_mul(self.layers - 1)?)?
            .checked_add(biases.checked_mul(self.layers)?)?;
        per_dir.checked_mul(dirs)
    }

    /// The shape each input must have for data of shape `x`.
    fn input_shapes(&self, op: &str, x: &[usize]) -> Result<Vec<Vec<usize>>> {
        let params = self.param_count(x[2]).ok_or_else(|| {
            invalid(
                op,
                format!(
                    "{} layers of state_size {} over data {x:?} need more parameters than fit \
                     in memory",
                    self.layers, self.hidden
                ),
            )
        })?;
        let state = vec![self.layers * self.dirs, x[1], self.hidden];
        let mut v = vec![x.to_vec(), vec![params], state.clone()];
        if self.lstm() {
            v.push(state);
        }
        if self.seq_len {
            v.push(vec![x[1]]);
        }
        Ok(v)
    }
}

/// How many outputs an RNN node has (all visible, as in MXNet).
pub(super) fn num_outputs(op: &str, attrs: &Attrs) -> Result<usize> {
    Ok(Rnn::parse(op, attrs)?.outputs())
}

/// How many outputs `_backward_RNN` has: a gradient for each input but the sequence lengths.
pub(super) fn num_grad_outputs(op: &str, attrs: &Attrs) -> Result<usize> {
    Ok(Rnn::parse(op, attrs)?.grad_inputs())
}

/// How many of an RNN node's inputs get a gradient (the first ones).
pub(crate) fn gradient_inputs(attrs: &Attrs) -> Result<usize> {
    Ok(Rnn::parse("RNN", attrs)?.grad_inputs())
}

/// Data is `(T, N, I)` and float (the backward shape rule passes a float dtype: it checks the
/// shape alone).
fn check_data(op: &str, x: &[usize], d: DType) -> Result<()> {
    if x.len() != 3 {
        return Err(shape_error(
            op,
            "data",
            x.to_vec(),
            "3 dimensions (sequence length, batch, features)",
        ));
    }
    if !d.is_float() {
        return Err(NdError::DType {
            op: op.into(),
            arg: "data".into(),
            found: d.to_string(),
            expected: "float32 or float64".into(),
        });
    }
    Ok(())
}

const INPUT_NAMES: [&str; 5] = [
    "data",
    "parameters",
    "state",
    "state_cell",
    "sequence_length",
];

fn input_name(r: &Rnn, k: usize) -> &'static str {
    // Without a cell state the sequence lengths are the fourth input.
    if k == 3 && !r.lstm() {
        INPUT_NAMES[4]
    } else {
        INPUT_NAMES[k]
    }
}

/// Checks inputs `s` (dtypes `d`) against what data `s[0]` asks for.
fn check_inputs(op: &str, r: &Rnn, s: &[Vec<usize>], d: &[DType]) -> Result<()> {
    if s.len() != r.inputs() {
        return Err(invalid(
            op,
            format!(
                "takes {} inputs (data, parameters, state{}{}), got {}",
                r.inputs(),
                if r.lstm() { ", state_cell" } else { "" },
                if r.seq_len { ", sequence_length" } else { "" },
                s.len()
            ),
        ));
    }
    check_data(op, &s[0], d[0])?;
    for (k, want) in r.input_shapes(op, &s[0])?.into_iter().enumerate().skip(1) {
        let arg = input_name(r, k);
        if s[k] != want {
            return Err(shape_error(
                op,
                arg,
                s[k].clone(),
                format!("{want:?} (for data {:?})", s[0]),
            ));
        }
        if k < r.grad_inputs() && d[k] != d[0] {
            return Err(NdError::DType {
                op: op.into(),
                arg: arg.into(),
                found: d[k].to_string(),
                expected: format!("{} (the data's)", d[0]),
            });
        }
    }
    Ok(())
}

fn infer_rnn(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let r = Rnn::parse(op, attrs)?;
    check_inputs(op, &r, s, d)?;
    let x = &s[0];
    let mut shapes = vec![vec![x[0], x[1], r.dirs * r.hidden]];
    shapes.extend(std::iter::repeat_n(
        vec![r.layers * r.dirs, x[1], r.hidden],
        r.outputs() - 1,
    ));
    Ok((shapes, vec![d[0]; r.outputs()]))
}

/// The parameters' and states' shapes follow from the data's.
fn infer_rnn_inputs(
    op: &str,
    attrs: &Attrs,
    ins: &[Option<Vec<usize>>],
    _outs: &[Option<Vec<usize>>],
) -> Result<super::Partial> {
    let r = Rnn::parse(op, attrs)?;
    let mut out = vec![None; ins.len()];
    if let Some(Some(x)) = ins.first() {
        check_data(op, x, DType::F32)?;
        for (o, want) in out.iter_mut().zip(r.input_shapes(op, x)?) {
            *o = Some(want);
        }
    }
    Ok(super::Partial {
        inputs: out,
        outputs: vec![],
    })
}

/// `_backward_RNN`'s inputs: the gradient of each output, then the forward node's inputs.
fn infer_rnn_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let r = Rnn::parse(op, attrs)?;
    let heads = r.outputs();
    if s.len() != heads + r.inputs() {
        return Err(invalid(
            op,
            format!(
                "takes {} output gradients and {} inputs, got {} arrays",
                heads,
                r.inputs(),
                s.len()
            ),
        ));
    }
    let grads: Vec<_> = (0..heads).map(|k| (k, &s[k][..], d[k])).collect();
    super::check_against_forward(op, "RNN", attrs, (&s[heads..], &d[heads..]), &grads)?;
    let n = r.grad_inputs();
    Ok((s[heads..heads + n].to_vec(), d[heads..heads + n].to_vec()))
}

// ---- the recurrence -------------------------------------------------------------------------

/// The kernels' element types: the gates compute in the data's own precision, a gate's
/// activation over a sample's whole slice at once (so that float slices go through the
/// vectorized functions).
pub(crate) trait Real: Element + num_traits::Float {
    /// `x = tanh(x)` for every element.
    fn tanh_all(xs: &mut [Self]);
    /// `x = 1 / (1 + e^-x)` for every element.
    fn sigmoid_all(xs: &mut [Self]);
}

/// Floats take `rten-vecmath`'s vectorized functions (within 3 ulp for tanh and 4 for the
/// sigmoid of the correctly rounded values; the `Activation` op uses the same ones). Per
/// element through libm, `expf` and the double `exp` that a float `tanh` needed to stay fast
/// took 10–15% of a two-layer LSTM's training step.
impl Real for f32 {
    fn tanh_all(xs: &mut [f32]) {
        Tanh {}.map_mut(xs);
    }

    fn sigmoid_all(xs: &mut [f32]) {
        Sigmoid {}.map_mut(xs);
    }
}

impl Real for f64 {
    fn tanh_all(xs: &mut [f64]) {
        xs.iter_mut().for_each(|x| *x = x.tanh());
    }

    fn sigmoid_all(xs: &mut [f64]) {
        xs.iter_mut().for_each(|x| *x = 1.0 / (1.0 + (-*x).exp()));
    }
}

/// `acc[i] += v[i]`.
fn add_to<T: Element>(acc: &mut [T], v: &[T]) {
    for (a, &b) in acc.iter_mut().zip(v) {
        *a = a.add(b);
    }
}

/// A row-major matrix view of the first `r * c` elements of `s`.
fn mat<T>(s: &[T], r: usize, c: usize) -> ArrayView2<'_, T> {
    // The callers size every buffer from the same dimensions.
    ArrayView2::from_shape((r, c), &s[..r * c]).unwrap_or_else(|e| panic!("{r}x{c} view: {e}"))
}

fn mat_mut<T>(s: &mut [T], r: usize, c: usize) -> ArrayViewMut2<'_, T> {
    ArrayViewMut2::from_shape((r, c), &mut s[..r * c])
        .unwrap_or_else(|e| panic!("{r}x{c} view: {e}"))
}

/// Adds `bias` to every `bias.len()`-wide row of `rows`.
fn add_rows<T: Element>(rows: &mut [T], bias: &[T]) {
    for row in rows.chunks_exact_mut(bias.len()) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v = v.add(b);
        }
    }
}

/// `acc += ` the column sums of the `acc.len()`-wide rows of `rows`.
fn sum_rows<T: Element>(rows: &[T], acc: &mut [T]) {
    for row in rows.chunks_exact(acc.len()) {
        for (a, &v) in acc.iter_mut().zip(row) {
            *a = a.add(v);
        }
    }
}

/// One pass over a batch: its sizes, the parameters and where each slot's lie, and how far each
/// sample runs.
pub(crate) struct Pass<'a, T> {
    pub(crate) r: Rnn,
    pub(crate) steps: usize,
    pub(crate) batch: usize,
    params: &'a [T],
    slots: Vec<Slot>,
    /// Steps each sample runs (all `steps` without `use_sequence_length`).
    lens: Vec<usize>,
}

/// Step `s` of direction `d` is time `t`: forward in time, or backward from the end.
pub(crate) fn time(d: usize, s: usize, steps: usize) -> usize {
    if d == 0 {
        s
    } else {
        steps - 1 - s
    }
}

impl<'a, T> Pass<'a, T> {
    /// The pass over data of shape `data` with these parameters and, per sample, how many
    /// steps it runs (all of them without `lens`).
    pub(crate) fn new(r: Rnn, data: &[usize], params: &'a [T], lens: Option<Vec<usize>>) -> Self {
        let (steps, batch) = (data[0], data[1]);
        Pass {
            r,
            steps,
            batch,
            params,
            slots: r.slots(data[2]).0,
            lens: lens.unwrap_or_else(|| vec![steps; batch]),
        }
    }

    pub(crate) fn slot(&self, l: usize, d: usize) -> Slot {
        self.slots[l * self.r.dirs + d]
    }

    pub(crate) fn width(&self) -> usize {
        self.r.dirs * self.r.hidden
    }

    /// Elements of one layer's output, `(T, N, D*H)`.
    pub(crate) fn layer_len(&self) -> usize {
        self.steps * self.batch * self.width()
    }

    /// Width of a trace's extra values per step: LSTM's new cell and its tanh, GRU's hidden
    /// part of the candidate.
    pub(crate) fn extra(&self) -> usize {
        match self.r.mode {
            Mode::Lstm => 2 * self.r.hidden,
            Mode::Gru => self.r.hidden,
            Mode::Tanh | Mode::Relu => 0,
        }
    }

    /// Elements of one (layer, direction)'s trace: every step's activated gates, then every
    /// step's extra values.
    pub(crate) fn trace_len(&self) -> usize {
        self.steps * self.batch * (self.r.gh() + self.extra())
    }
}

impl<T: Real> Pass<'_, T> {
    /// The state sample `n` carries into time `t` in direction `d`: the step before in the
    /// direction's order, or `None` at its first step (the initial state).
    fn before(&self, d: usize, t: usize, n: usize) -> Option<usize> {
        match d {
            0 => t.checked_sub(1),
            _ => (t + 1 < self.lens[n]).then_some(t + 1),
        }
    }

    /// Runs layer `l` (both directions) on `input` `(T, N, In)` into `output` `(T, N, D*H)`,
    /// leaving each direction's trace in `traces` (one after the other, or all in one when
    /// `traces` holds one) and the final states in `hy` / `cy` `(L*D, N, H)`.
    #[allow(clippy::too_many_arguments)]
    fn forward_layer(
        &self,
        l: usize,
        input: &[T],
        output: &mut [T],
        traces: &mut [T],
        h0: &[T],
        c0: &[T],
        hy: &mut [T],
        cy: &mut [T],
        hp: &mut [T],
    ) -> KResult {
        let (h, gh, nb, ew) = (self.r.hidden, self.r.gh(), self.batch, self.extra());
        let (rows, width) = (self.steps * nb, self.width());
        let tl = self.trace_len();
        for d in 0..self.r.dirs {
            let s = self.slot(l, d);
            let k = l * self.r.dirs + d;
            let trace = match traces.len() >= (d + 1) * tl {
                true => &mut traces[d * tl..(d + 1) * tl],
                false => &mut traces[..tl],
            };
            let (gates, extra) = trace.split_at_mut(rows * gh);
            // Every step's input projection at once.
            let wx = mat(&self.params[s.wx..], gh, s.input);
            T::gemm(
                &mat(input, rows, s.input),
                &wx.t(),
                &mut mat_mut(gates, rows, gh),
            );
            add_rows(gates, &self.params[s.bx..s.bx + gh]);
            let wh = mat(&self.params[s.wh..], gh, h);
            let bh = &self.params[s.bh..s.bh + gh];
            let state = k * nb * h..(k + 1) * nb * h;
            hy[state.clone()].copy_from_slice(&h0[state.clone()]);
            if self.r.lstm() {
                cy[state.clone()].copy_from_slice(&c0[state.clone()]);
            }
            let hs = &mut hy[state.clone()];
            for step in 0..self.steps {
                let t = time(d, step, self.steps);
                T::gemm(&mat(hs, nb, h), &wh.t(), &mut mat_mut(hp, nb, gh));
                add_rows(&mut hp[..nb * gh], bh);
                // Samples are independent: a large step splits across threads by samples.
                let lstm = self.r.lstm();
                let (po, pg, pe) = (
                    Shared::new(output.as_mut_ptr()),
                    Shared::new(gates.as_mut_ptr()),
                    Shared::new(extra.as_mut_ptr()),
                );
                // Without a cell (not LSTM) `cy` may be empty and is never read.
                let cell_at = state.start.min(cy.len());
                let (ph, pc) = (
                    Shared::new(hs.as_mut_ptr()),
                    Shared::new(cy[cell_at..].as_mut_ptr()),
                );
                let hp: &[T] = hp;
                for_ranges(nb, gh * 16, |lo, hi| {
                    for n in lo..hi {
                        let row = t * nb + n;
                        // SAFETY: sample `n`'s row of the output, gates, extra values, state
                        // and cell lie inside their buffers (sized from the same dimensions)
                        // and this range alone touches them.
                        unsafe {
                            let out = std::slice::from_raw_parts_mut(
                                po.get().add(row * width + d * h),
                                h,
                            );
                            if t >= self.lens[n] {
                                out.fill(T::default());
                                continue;
                            }
                            let g = pg.piece_mut(row, gh);
                            let e = pe.piece_mut(row, ew);
                            let hn = ph.piece_mut(n, h);
                            let cn = if lstm {
                                pc.piece_mut(n, h)
                            } else {
                                &mut [][..]
                            };
                            step_forward(self.r.mode, g, &hp[n * gh..(n + 1) * gh], hn, cn, e);
                            out.copy_from_slice(hn);
                        }
                    }
                });
            }
        }
        Ok(())
    }
}

/// One step of one sample: `g` holds the input projection and comes back as the activated
/// gates; `hp` is the hidden projection; `h` (and LSTM's `c`) the state, updated; `e` the
/// trace's extra values (LSTM: the new cell and its tanh; GRU: the candidate's hidden part).
fn step_forward<T: Real>(mode: Mode, g: &mut [T], hp: &[T], h: &mut [T], c: &mut [T], e: &mut [T]) {
    let hs = h.len();
    match mode {
        Mode::Lstm => {
            add_to(g, hp);
            let (ifg, go) = g.split_at_mut(2 * hs);
            let (gg, o) = go.split_at_mut(hs);
            T::sigmoid_all(ifg);
            T::tanh_all(gg);
            T::sigmoid_all(o);
            let (i, f) = ifg.split_at(hs);
            let (cn, tc) = e.split_at_mut(hs);
            for j in 0..hs {
                cn[j] = f[j] * c[j] + i[j] * gg[j];
            }
            tc.copy_from_slice(cn);
            T::tanh_all(tc);
            c.copy_from_slice(cn);
            for j in 0..hs {
                h[j] = o[j] * tc[j];
            }
        }
        Mode::Gru => {
            let (rz, n) = g.split_at_mut(2 * hs);
            add_to(rz, &hp[..2 * hs]);
            T::sigmoid_all(rz);
            let (r, z) = rz.split_at(hs);
            let hn = &hp[2 * hs..3 * hs];
            e.copy_from_slice(hn);
            for j in 0..hs {
                n[j] = n[j] + r[j] * hn[j];
            }
            T::tanh_all(n);
            for j in 0..hs {
                h[j] = (T::one() - z[j]) * n[j] + z[j] * h[j];
            }
        }
        Mode::Tanh => {
            add_to(g, hp);
            T::tanh_all(g);
            h.copy_from_slice(g);
        }
        Mode::Relu => {
            add_to(g, hp);
            for v in g.iter_mut() {
                *v = v.max(T::zero());
            }
            h.copy_from_slice(g);
        }
    }
}

/// The gradient through one step of one sample. In: `dh` the gradient of the step's output
/// state (carried plus the layer output's), `dc` LSTM's carried cell gradient, the step's gates
/// `g` and extra values `e`, the state before it `h_prev` / `c_prev`. Out: the gradients of the
/// input projection `dgx` and of the hidden projection `dgh` (they differ only in GRU's
/// candidate), `dc` becomes the previous cell's gradient, and the part of the previous state's
/// gradient that bypasses the hidden projection (GRU's `z * dh`) goes to `dh_direct`.
#[allow(clippy::too_many_arguments)]
fn step_backward<T: Real>(
    mode: Mode,
    dh: &[T],
    dc: &mut [T],
    g: &[T],
    e: &[T],
    h_prev: &[T],
    c_prev: &[T],
    dgx: &mut [T],
    dgh: &mut [T],
    dh_direct: &mut [T],
) {
    let hs = dh.len();
    let one = T::one();
    for j in 0..hs {
        match mode {
            Mode::Lstm => {
                let (i, f, gg, o) = (g[j], g[hs + j], g[2 * hs + j], g[3 * hs + j]);
                let tc = e[hs + j];
                let dct = dc[j] + dh[j] * o * (one - tc * tc);
                let ds = [
                    dct * gg * i * (one - i),
                    dct * c_prev[j] * f * (one - f),
                    dct * i * (one - gg * gg),
                    dh[j] * tc * o * (one - o),
                ];
                for (k, v) in ds.into_iter().enumerate() {
                    dgx[k * hs + j] = v;
                    dgh[k * hs + j] = v;
                }
                dc[j] = dct * f;
                dh_direct[j] = T::zero();
            }
            Mode::Gru => {
                let (r, z, n) = (g[j], g[hs + j], g[2 * hs + j]);
                let dn = dh[j] * (one - z) * (one - n * n);
                let dz = dh[j] * (h_prev[j] - n) * z * (one - z);
                let dr = dn * e[j] * r * (one - r);
                for (k, v) in [dr, dz, dn].into_iter().enumerate() {
                    dgx[k * hs + j] = v;
                }
                dgh[j] = dr;
                dgh[hs + j] = dz;
                dgh[2 * hs + j] = dn * r;
                dh_direct[j] = dh[j] * z;
            }
            Mode::Tanh => {
                let y = g[j];
                dgx[j] = dh[j] * (one - y * y);
                dgh[j] = dgx[j];
                dh_direct[j] = T::zero();
            }
            Mode::Relu => {
                dgx[j] = if g[j] > T::zero() { dh[j] } else { T::zero() };
                dgh[j] = dgx[j];
                dh_direct[j] = T::zero();
            }
        }
    }
}

/// Runs `$body` with `$t` the float type of `$dtype` (inference refuses other dtypes).
macro_rules! with_float {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            other => return Err(format!("RNN: dtype {other} is not float32 or float64")),
        }
    };
}

/// Carves one zeroed scratch block into buffers of the given lengths.
fn carve<'a, T: Element>(
    res: &mut KernelRes,
    lens: &[usize],
) -> std::result::Result<Vec<&'a mut [T]>, String> {
    let total: usize = lens.iter().sum();
    let ptr = res
        .temp(total.max(1) * std::mem::size_of::<T>())?
        .cast::<T>();
    // SAFETY: the temp block holds `total` elements of `T` (asked above; the pool aligns to 64
    // bytes), the engine gives this op alone the temp space until it ends, and zeroing makes
    // every element a valid float before any is read.
    let all = unsafe {
        std::ptr::write_bytes(ptr, 0, total);
        std::slice::from_raw_parts_mut(ptr, total)
    };
    let mut rest = all;
    let mut out = Vec::with_capacity(lens.len());
    for &n in lens {
        let (a, b) = rest.split_at_mut(n);
        out.push(a);
        rest = b;
    }
    Ok(out)
}

/// Reads the sequence lengths (an integer in 0..=T per sample), or all T.
fn lengths(
    r: &Rnn,
    ins: &[TensorRef],
    steps: usize,
    batch: usize,
) -> std::result::Result<Vec<usize>, String> {
    if !r.seq_len {
        return Ok(vec![steps; batch]);
    }
    let t = &ins[r.inputs() - 1];
    // SAFETY: read access to the lengths input, `batch` elements (checked at inference).
    sequence_lengths(unsafe { t.to_f64s() }, steps)
}

/// The lengths input's values checked (each an integer in 0..=`steps`), as step counts.
pub(crate) fn sequence_lengths(
    vals: impl IntoIterator<Item = f64>,
    steps: usize,
) -> std::result::Result<Vec<usize>, String> {
    vals.into_iter()
        .enumerate()
        .map(|(n, v)| {
            if v.fract() != 0.0 || !(0.0..=steps as f64).contains(&v) {
                Err(format!(
                    "RNN: sequence_length[{n}] = {v} is not an integer in 0..={steps} (the \
                     sequence length)"
                ))
            } else {
                Ok(v as usize)
            }
        })
        .collect()
}

/// The forward op's inputs as both kernels read them: the sequence, the initial states, and the
/// pass over them with its parameters and sequence lengths.
struct Forward<'a, T> {
    pass: Pass<'a, T>,
    xs: &'a [T],
    h0: &'a [T],
    /// LSTM's initial cell (empty otherwise).
    c0: &'a [T],
}

impl<'a, T: Real> Forward<'a, T> {
    /// # Safety
    /// The caller has read access to `ins` (the forward op's inputs, in order, of dtype `T`)
    /// for `'a`.
    unsafe fn read(r: Rnn, ins: &'a [TensorRef], lens: Vec<usize>) -> Self {
        let x = &ins[0];
        // SAFETY: the caller's read access.
        let (xs, params, h0) =
            unsafe { (x.slice::<T>(), ins[1].slice::<T>(), ins[2].slice::<T>()) };
        let c0: &[T] = if r.lstm() {
            // SAFETY: as above; an LSTM's fourth input is its cell.
            unsafe { ins[3].slice::<T>() }
        } else {
            &[]
        };
        Forward {
            pass: Pass::new(r, &x.shape, params, Some(lens)),
            xs,
            h0,
            c0,
        }
    }
}

/// What a training forward pass keeps for the backward pass: every layer's output and every
/// (layer, direction)'s trace, for data of one shape.
struct Kept<T> {
    /// Steps, batch and input width of the data the trace is for.
    data: [usize; 3],
    /// Whether the last forward pass left its trace here (one outside training does not).
    valid: bool,
    /// `(L, T, N, D*H)`.
    ys: Vec<T>,
    /// `(L*D)` traces of `Pass::trace_len` elements.
    traces: Vec<T>,
    /// With dropout, the masks of the layers' outputs but the top one's, `(L-1, T, N, D*H)`
    /// (each element 0 or `1 / (1 - p)`); empty without.
    masks: Vec<T>,
}

impl<T: Real> Kept<T> {
    /// The slot's record for `pass` on `data`, made (or remade, for another shape or dtype)
    /// with room for it.
    fn for_pass<'s>(slot: &'s mut StateSlot, pass: &Pass<'_, T>, data: &[usize]) -> &'s mut Self {
        let data = [data[0], data[1], data[2]];
        let fits = slot
            .as_ref()
            .and_then(|b| b.downcast_ref::<Kept<T>>())
            .is_some_and(|k| k.data == data);
        if !fits {
            let r = pass.r;
            *slot = Some(Box::new(Kept {
                data,
                valid: false,
                ys: vec![T::default(); r.layers * pass.layer_len()],
                traces: vec![T::default(); r.layers * r.dirs * pass.trace_len()],
                masks: Vec::new(),
            }));
        }
        match slot.as_mut().and_then(|b| b.downcast_mut::<Kept<T>>()) {
            Some(k) => k,
            None => unreachable!("the slot was just filled with this type"),
        }
    }

    /// The trace the last forward pass kept for data of this shape, if it kept one.
    fn valid<'s>(slot: Option<&'s StateSlot>, data: &[usize]) -> Option<&'s Self> {
        slot?
            .as_ref()?
            .downcast_ref::<Kept<T>>()
            .filter(|k| k.valid && k.data[..] == data[..3])
    }
}

fn rnn_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    res: &mut KernelRes,
) -> KResult {
    let r = Rnn::parse(op, attrs).map_err(|e| e.to_string())?;
    let x = &ins[0];
    let lens = lengths(&r, ins, x.shape[0], x.shape[1])?;
    with_float!(x.dtype, T => {
        // SAFETY: read access to the inputs, write access to the outputs, which the engine
        // keeps apart from the inputs (the op is not alias-safe).
        let Forward { pass, xs, h0, c0 } = unsafe { Forward::<T>::read(r, ins, lens) };
        let state = r.layers * r.dirs * pass.batch * r.hidden;
        // SAFETY: the op's own output, apart from its inputs.
        let out = unsafe { outs[0].slice_mut::<T>() };
        // A bound node in training keeps every layer's output and trace for its backward node;
        // otherwise one trace serves every layer, and only the layers below the top need room.
        let kept = match res.state.take() {
            Some(slot) if r.train => Some(Kept::for_pass(slot, &pass, &x.shape)),
            Some(slot) => {
                if let Some(k) = slot.as_mut().and_then(|b| b.downcast_mut::<Kept<T>>()) {
                    k.valid = false;
                }
                None
            }
            None => None,
        };
        let ll = pass.layer_len();
        let (mid_len, trace_len) = match kept {
            Some(_) => (0, 0),
            None => ((r.layers - 1) * ll, pass.trace_len()),
        };
        // Intermediate layers' outputs, the trace, the hidden projection, the final states
        // when the op does not output them, and with dropout room for one layer: its mask
        // without a kept trace, the next layer's input with one.
        let dropped_len = if r.drops() { ll } else { 0 };
        let mut b = carve::<T>(res, &[mid_len, trace_len, pass.batch * r.gh(), state, state, dropped_len])?.into_iter();
        let mut next = || b.next().unwrap_or_default();
        let (mid, trace, hp, hy_unused, cy_unused) = (next(), next(), next(), next(), next());
        let dropped = next();
        // SAFETY: the op's own outputs, apart from its inputs and from each other.
        let hy: &mut [T] = if r.outputs() > 1 { unsafe { outs[1].slice_mut::<T>() } } else { hy_unused };
        // SAFETY: as for `hy`.
        let cy: &mut [T] = if r.outputs() > 2 { unsafe { outs[2].slice_mut::<T>() } } else { cy_unused };
        let tl = pass.trace_len() * r.dirs;
        // Dropout draws from the device's generator, one number per unit, in the same order
        // on both paths (the Dropout op's mask rule).
        let mut rng = match r.drops() {
            true => Some(res.rng()?),
            false => None,
        };
        match kept {
            Some(k) => {
                // Each layer's output is kept as it was made; what the next layer reads is
                // that times its mask, kept too.
                k.masks.resize(if r.drops() { (r.layers - 1) * ll } else { 0 }, T::default());
                for l in 0..r.layers {
                    let (below, here) = k.ys.split_at_mut(l * ll);
                    let input: &[T] = match (l, &rng) {
                        (0, _) => xs,
                        (_, Some(_)) => dropped,
                        (_, None) => &below[(l - 1) * ll..],
                    };
                    let traces = &mut k.traces[l * tl..(l + 1) * tl];
                    pass.forward_layer(l, input, &mut here[..ll], traces, h0, c0, hy, cy, hp)?;
                    if let Some(rng) = rng.as_deref_mut().filter(|_| l + 1 < r.layers) {
                        let mask = &mut k.masks[l * ll..(l + 1) * ll];
                        dropout_mask(rng, r.p, mask);
                        for ((o, &y), &m) in dropped.iter_mut().zip(&here[..ll]).zip(&*mask) {
                            *o = y * m;
                        }
                    }
                }
                out.copy_from_slice(&k.ys[(r.layers - 1) * ll..]);
                k.valid = true;
            }
            None => {
                for l in 0..r.layers {
                    let (below, here) = mid.split_at_mut(l.min(r.layers - 1) * ll);
                    let input: &[T] = if l == 0 { xs } else { &below[(l - 1) * ll..] };
                    let top = l + 1 == r.layers;
                    let output: &mut [T] = if top { &mut *out } else { &mut here[..ll] };
                    pass.forward_layer(l, input, output, trace, h0, c0, hy, cy, hp)?;
                    if let Some(rng) = rng.as_deref_mut().filter(|_| !top) {
                        dropout_mask(rng, r.p, dropped);
                        for (y, &m) in output.iter_mut().zip(&*dropped) {
                            *y *= m;
                        }
                    }
                }
            }
        }
    });
    Ok(())
}

/// Why a backward pass with dropout between layers cannot run without the forward node's state.
pub(crate) fn masks_lost(op: &str, r: &Rnn) -> String {
    format!(
        "{op}: p={} drops units between layers in training, and the masks are kept only by a \
         bound RNN node for its own backward node (bind the graph; an imperative backward call \
         cannot know them)",
        r.p
    )
}

fn rnn_backward_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    res: &mut KernelRes,
) -> KResult {
    let r = Rnn::parse(op, attrs).map_err(|e| e.to_string())?;
    let heads = r.outputs();
    let fwd = &ins[heads..];
    let x = &fwd[0];
    let lens = lengths(&r, fwd, x.shape[0], x.shape[1])?;
    with_float!(x.dtype, T => {
        // SAFETY: read access to the inputs, write access to the outputs (not alias-safe: the
        // engine keeps them apart).
        let f = unsafe { Forward::<T>::read(r, fwd, lens) };
        // SAFETY: the output gradients, read only.
        let dout = unsafe { ins[0].slice::<T>() };
        // SAFETY: as for `dout`.
        let dhy: &[T] = if heads > 1 { unsafe { ins[1].slice::<T>() } } else { &[] };
        // SAFETY: as for `dout`.
        let dcy: &[T] = if heads > 2 { unsafe { ins[2].slice::<T>() } } else { &[] };
        // SAFETY: the op's own outputs, apart from its inputs and from each other.
        let (dx, dparams, dh0) = unsafe { (outs[0].slice_mut::<T>(), outs[1].slice_mut::<T>(), outs[2].slice_mut::<T>()) };
        // SAFETY: as for `dx`.
        let dc0: &mut [T] = if r.lstm() { unsafe { outs[3].slice_mut::<T>() } } else { &mut [] };
        let state = res.state.take();
        // Without the forward node's state the masks it drew are lost: the gradient of the
        // network without dropout would be silently wrong.
        if state.is_none() && r.drops() {
            return Err(masks_lost(op, &r));
        }
        let kept = Kept::<T>::valid(state.as_deref(), &x.shape);
        backward(&f, dout, dhy, dcy, dx, dparams, dh0, dc0, kept, res)?;
    });
    Ok(())
}

/// The backward pass: the layers from the top down, reading every layer's output and every
/// trace from what the forward pass kept, or else from the forward pass run again here.
#[allow(clippy::too_many_arguments)]
fn backward<T: Real>(
    f: &Forward<'_, T>,
    dout: &[T],
    dhy: &[T],
    dcy: &[T],
    dx: &mut [T],
    dparams: &mut [T],
    dh0: &mut [T],
    dc0: &mut [T],
    kept: Option<&Kept<T>>,
    res: &mut KernelRes,
) -> KResult {
    let Forward { pass, xs, h0, c0 } = f;
    let r = pass.r;
    let (h, gh, nb, steps, ew) = (r.hidden, r.gh(), pass.batch, pass.steps, pass.extra());
    let (ll, tl, rows, width) = (pass.layer_len(), pass.trace_len(), steps * nb, pass.width());
    let state = r.layers * r.dirs * nb * h;
    // Room to run the forward pass again only without a kept trace.
    let again = usize::from(kept.is_none());
    let mut b = carve::<T>(
        res,
        &[
            again * r.layers * ll,          // every layer's output
            again * r.layers * r.dirs * tl, // every trace
            nb * gh,                        // the hidden projection
            again * state,                  // final states (not needed)
            again * if r.lstm() { state } else { 0 },
            2 * ll,    // the gradient of a layer's output, and of the one below
            rows * gh, // input projection gradients
            rows * gh, // hidden projection gradients
            rows * h,  // the states the steps started from
            nb * h,    // the carried state gradient
            nb * h,    // its part that bypasses the hidden projection
            if r.lstm() { nb * h } else { 0 }, // LSTM's carried cell gradient
            // With dropout, the layer's input as it read it (the output below times its mask).
            if kept.is_some_and(|k| !k.masks.is_empty()) {
                ll
            } else {
                0
            },
        ],
    )?
    .into_iter();
    let mut next = || b.next().unwrap_or_default();
    let (ys, traces, hp, hy, cy) = (next(), next(), next(), next(), next());
    let (dys, dgx, dgh, hprev, dhbuf, dhn, dcbuf) =
        (next(), next(), next(), next(), next(), next(), next());
    let dropped = next();
    let masks: &[T] = kept.map_or(&[], |k| &k.masks);
    let (ys, traces): (&[T], &[T]) = match kept {
        Some(k) => (&k.ys, &k.traces),
        None => {
            for l in 0..r.layers {
                let (below, here) = ys.split_at_mut(l * ll);
                let input: &[T] = if l == 0 { xs } else { &below[(l - 1) * ll..] };
                let tr = &mut traces[l * r.dirs * tl..(l + 1) * r.dirs * tl];
                pass.forward_layer(l, input, &mut here[..ll], tr, h0, c0, hy, cy, hp)?;
            }
            (ys, traces)
        }
    };
    dparams.fill(T::default());
    let (dy_a, dy_b) = dys.split_at_mut(ll);
    let lstm = r.lstm();
    for l in (0..r.layers).rev() {
        // The gradient of this layer's output, and where the one below's goes.
        let (dy, dbelow): (&[T], &mut [T]) = match r.layers - 1 - l {
            0 => (dout, &mut *dy_a),
            i if i % 2 == 1 => (&*dy_a, &mut *dy_b),
            _ => (&*dy_b, &mut *dy_a),
        };
        let input: &[T] = match l {
            0 => xs,
            _ if masks.is_empty() => &ys[(l - 1) * ll..l * ll],
            _ => {
                let (y, m) = (&ys[(l - 1) * ll..l * ll], &masks[(l - 1) * ll..l * ll]);
                for ((o, &y), &m) in dropped.iter_mut().zip(y).zip(m) {
                    *o = y * m;
                }
                &*dropped
            }
        };
        let y = &ys[l * ll..(l + 1) * ll];
        for d in 0..r.dirs {
            let s = pass.slot(l, d);
            let k = l * r.dirs + d;
            let tr = &traces[k * tl..(k + 1) * tl];
            let (gates, extra) = tr.split_at(rows * gh);
            let st = k * nb * h..(k + 1) * nb * h;
            let dh = &mut dhbuf[..nb * h];
            match dhy.is_empty() {
                true => dh.fill(T::default()),
                false => dh.copy_from_slice(&dhy[st.clone()]),
            }
            let dc = &mut dcbuf[..];
            if r.lstm() && !dcy.is_empty() {
                dc.copy_from_slice(&dcy[st.clone()]);
            } else {
                dc.fill(T::default());
            }
            let wh = mat(&pass.params[s.wh..], gh, h);
            for step in (0..steps).rev() {
                let t = time(d, step, steps);
                // Samples are independent: a large step splits across threads by samples.
                let (pgx, pgh, php) = (
                    Shared::new(dgx.as_mut_ptr()),
                    Shared::new(dgh.as_mut_ptr()),
                    Shared::new(hprev.as_mut_ptr()),
                );
                let (pdc, pdhn) = (Shared::new(dc.as_mut_ptr()), Shared::new(dhn.as_mut_ptr()));
                let dh_ro: &[T] = &*dh;
                for_ranges(nb, gh * 16, |lo, hi| {
                    let (mut dh_f, mut direct) = (vec![T::zero(); h], vec![T::zero(); h]);
                    for n in lo..hi {
                        let row = t * nb + n;
                        // SAFETY: sample `n`'s rows of the gate gradients, the previous states,
                        // the cell gradient and the bypass lie inside their buffers (sized from
                        // the same dimensions) and this range alone touches them.
                        let (gx, gh_row, hp_row, dcn, dhn_row) = unsafe {
                            (
                                pgx.piece_mut(row, gh),
                                pgh.piece_mut(row, gh),
                                php.piece_mut(row, h),
                                if lstm {
                                    pdc.piece_mut(n, h)
                                } else {
                                    &mut [][..]
                                },
                                pdhn.piece_mut(n, h),
                            )
                        };
                        if t >= pass.lens[n] {
                            gx.fill(T::default());
                            gh_row.fill(T::default());
                            hp_row.fill(T::default());
                            continue;
                        }
                        let prev = pass.before(d, t, n).map(|p| p * nb + n);
                        match prev {
                            Some(p) => hp_row
                                .copy_from_slice(&y[p * width + d * h..p * width + (d + 1) * h]),
                            None => hp_row
                                .copy_from_slice(&h0[st.start + n * h..st.start + (n + 1) * h]),
                        }
                        let c_prev: &[T] = match (lstm, prev) {
                            (false, _) => &[],
                            (true, Some(p)) => &extra[p * ew..p * ew + h],
                            (true, None) => &c0[st.start + n * h..st.start + (n + 1) * h],
                        };
                        for j in 0..h {
                            dh_f[j] = dh_ro[n * h + j] + dy[row * width + d * h + j];
                        }
                        step_backward(
                            r.mode,
                            &dh_f,
                            dcn,
                            &gates[row * gh..(row + 1) * gh],
                            &extra[row * ew..(row + 1) * ew],
                            hp_row,
                            c_prev,
                            gx,
                            gh_row,
                            &mut direct,
                        );
                        // Stash the bypassing part in this sample's row of the next gradient.
                        dhn_row.copy_from_slice(&direct);
                    }
                });
                // The previous state's gradient: through the hidden projection, plus the
                // bypass; samples past their length carry theirs unchanged.
                let dg_t = mat(&dgh[t * nb * gh..], nb, gh);
                let mut through = mat_mut(&mut hp[..nb * h], nb, h);
                T::gemm(&dg_t, &wh, &mut through);
                for n in 0..nb {
                    if t >= pass.lens[n] {
                        continue;
                    }
                    for j in 0..h {
                        let i = n * h + j;
                        dh[i] = hp[i] + dhn[i];
                    }
                }
            }
            dh0[st.clone()].copy_from_slice(dh);
            // Weight and bias gradients over every step at once, and the input's gradient.
            let gx_all = mat(dgx, rows, gh);
            let gh_all = mat(dgh, rows, gh);
            let (wx_at, wh_at) = (s.wx, s.wh);
            T::gemm(
                &gx_all.t(),
                &mat(input, rows, s.input),
                &mut mat_mut(&mut dparams[wx_at..], gh, s.input),
            );
            T::gemm(
                &gh_all.t(),
                &mat(hprev, rows, h),
                &mut mat_mut(&mut dparams[wh_at..], gh, h),
            );
            sum_rows(dgx, &mut dparams[s.bx..s.bx + gh]);
            sum_rows(dgh, &mut dparams[s.bh..s.bh + gh]);
            let wx = mat(&pass.params[s.wx..], gh, s.input);
            let target: &mut [T] = if l == 0 { &mut *dx } else { &mut dbelow[..] };
            let mut dxv = mat_mut(target, rows, s.input);
            if d == 0 {
                T::gemm(&gx_all, &wx, &mut dxv);
            } else {
                T::gemm_add(&gx_all, &wx, &mut dxv);
            }
            if r.lstm() {
                dc0[st.clone()].copy_from_slice(dc);
            }
        }
        // What reached the layer below went through its mask.
        if l > 0 && !masks.is_empty() {
            for (g, &m) in dbelow.iter_mut().zip(&masks[(l - 1) * ll..l * ll]) {
                *g = *g * m;
            }
        }
    }
    Ok(())
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            infer_partial: Some(infer_rnn_inputs),
            alias_safe: false,
            resources: &[Resource::TempSpace, Resource::Random],
            state: StateUse::Keeps,
            ..OpDef::new("RNN", Arity::AtLeast(3), infer_rnn, rnn_kernel)
        },
        OpDef {
            alias_safe: false,
            resources: &[Resource::TempSpace],
            state: StateUse::ReadsOf("RNN"),
            ..OpDef::new(
                "_backward_RNN",
                Arity::AtLeast(4),
                infer_rnn_backward,
                rnn_backward_kernel,
            )
        },
    ];
    OPS
}

#[cfg(test)]
mod tests {
    use super::{Attrs, Real, Rnn};

    /// `param_count` (checked, used to refuse attributes) and the slots the kernels lay the
    /// parameters out by agree on every mode, depth and direction; past `usize` it refuses.
    #[test]
    fn the_parameter_count_is_where_the_slots_end() {
        for mode in ["rnn_relu", "rnn_tanh", "lstm", "gru"] {
            for (layers, hidden, bidirectional, input) in [
                (1, 1, false, 1),
                (2, 3, true, 5),
                (3, 7, false, 2),
                (4, 2, true, 9),
            ] {
                let attrs = Attrs::new()
                    .with("mode", mode)
                    .with("num_layers", layers)
                    .with("state_size", hidden)
                    .with("bidirectional", bidirectional);
                let r = Rnn::parse("RNN", &attrs).unwrap();
                assert_eq!(
                    r.param_count(input),
                    Some(r.slots(input).1),
                    "{mode} {layers} x {hidden}, bidirectional {bidirectional}, input {input}"
                );
            }
        }
        let huge = Attrs::new()
            .with("mode", "lstm")
            .with("num_layers", u32::MAX)
            .with("state_size", u32::MAX);
        let r = Rnn::parse("RNN", &huge).unwrap();
        assert_eq!(r.param_count(10), None);
        let err = r.input_shapes("RNN", &[4, 2, 10]).unwrap_err().to_string();
        assert!(err.contains("more parameters than fit"), "{err}");
        let too_many = Attrs::new()
            .with("mode", "lstm")
            .with("num_layers", "99999999999999999999")
            .with("state_size", 4);
        let err = Rnn::parse("RNN", &too_many).err().unwrap().to_string();
        assert!(err.contains("from 1 to 4294967295"), "{err}");
    }

    /// The float gates are the double ones to a few float steps, over the whole range, across
    /// the vectorized functions' borders (series, saturation), on odd slice lengths (the
    /// vector tails) and at the infinities; NaN stays NaN.
    #[test]
    fn float_gates_are_the_double_ones_to_a_few_steps() {
        let mut xs: Vec<f32> = (0..16_000).map(|i| -30.0 + i as f32 * 0.00375).collect();
        xs.extend([
            1e-4, -1e-4, 4e-4, 0.55, -0.55, 9.02, -9.02, 20.0, -20.0, 1e-30, 0.0, -0.0,
        ]);
        xs.extend([f32::INFINITY, f32::NEG_INFINITY, 87.0, -87.0, 100.0, -100.0]);
        /// A gate's name, its float slice function and its double reference.
        type Gate = (&'static str, fn(&mut [f32]), fn(f64) -> f64);
        let gates: [Gate; 2] = [
            ("tanh", f32::tanh_all, f64::tanh),
            ("sigmoid", f32::sigmoid_all, |x| 1.0 / (1.0 + (-x).exp())),
        ];
        for (name, all, want_of) in gates {
            for len in [xs.len(), 7, 1] {
                let mut got = xs[..len].to_vec();
                all(&mut got);
                for (&x, &y) in xs.iter().zip(&got) {
                    let want = want_of(f64::from(x));
                    let step = 4.0 * f64::from(f32::EPSILON) * want.abs();
                    let err = (f64::from(y) - want).abs();
                    // Results below the normal range may flush to zero.
                    assert!(
                        err <= step.max(f64::from(f32::MIN_POSITIVE)),
                        "{name}({x}): {y}, want {want}"
                    );
                }
            }
            let mut nan = [f32::NAN; 9];
            all(&mut nan);
            assert!(nan.iter().all(|v| v.is_nan()), "{name}(NaN): {nan:?}");
        }
    }
}
