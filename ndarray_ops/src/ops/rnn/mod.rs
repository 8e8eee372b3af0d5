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
//!
//! Files: `mod.rs` the attributes, inference and op table; `recurrence.rs`, `cell.rs`,
//! `kernels.rs`, `weights.rs`, `real.rs`, `backward_steps.rs` the CPU kernels; `grad.rs` the
//! gradient rule; `gpu.rs` and `rnn.cu` the GPU kernels.

use super::vecmath::{Sigmoid, Tanh};
use ndarray::{ArrayView2, ArrayViewMut2};
use rten_simd::{SimdOp, SimdUnaryOp};

use super::par::Shared;
use super::params::{attr_enum, op_params, Params, Positive};
use super::stochastic::dropout_mask;
use super::{Arity, Attrs, OpDef, Outputs, StateUse, TensorRef, IS_TRAIN};
use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::{Infer, KResult};
use crate::resources::{KernelRes, Resource, StateSlot};
use crate::{DType, Element};

mod backward_steps;
mod cell;
pub(crate) mod gpu;
mod grad;
mod kernels;
mod real;
mod recurrence;
mod weights;

use kernels::*;
pub(crate) use kernels::{masks_lost, sequence_lengths};
pub(crate) use real::Real;
use real::{mat, mat_mut, sum_rows};
pub(crate) use recurrence::{time, Pass};
use weights::{strassen_setting, Packs, Weights};

attr_enum! {
    /// The recurrence of one layer.
    pub enum Mode {
        /// A plain cell with ReLU.
        Relu = "rnn_relu",
        /// A plain cell with tanh.
        Tanh = "rnn_tanh",
        /// Long short-term memory.
        Lstm = "lstm",
        /// Gated recurrent unit.
        Gru = "gru",
    }
}

op_params! {
    /// The fused RNN's attributes.
    pub struct RNNParams for "RNN" {
        state_size: Positive,
        num_layers: Positive,
        bidirectional: bool,
        mode: Mode,
        p: f64,
        state_outputs: bool,
        projection_size: Option<i64>,
        lstm_state_clip_min: Option<f64>,
        lstm_state_clip_max: Option<f64>,
        use_sequence_length: bool,
    }
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
    /// The fused RNN's parameters (parsed on the node's first run, then kept with its
    /// attributes).
    pub(crate) fn parse(op: &str, attrs: &Attrs) -> Result<Rnn> {
        attrs.parsed(op, Rnn::read).map(|r| *r)
    }

    fn read(op: &str, attrs: &Attrs) -> Result<Rnn> {
        let a = RNNParams::read(op, attrs)?;
        // What MXNet accepts only with cuDNN, refused rather than ignored.
        if a.projection_size.is_some() {
            return Err(invalid(op, "projection_size (LSTMP) is not supported"));
        }
        for (key, clip) in [
            ("lstm_state_clip_min", a.lstm_state_clip_min),
            ("lstm_state_clip_max", a.lstm_state_clip_max),
        ] {
            if clip.is_some() {
                return Err(invalid(
                    op,
                    format!("{key} (cell clipping) is not supported"),
                ));
            }
        }
        if !(0.0..1.0).contains(&a.p) {
            return Err(invalid(op, format!("p={} is outside [0, 1)", a.p)));
        }
        Ok(Rnn {
            mode: a.mode,
            hidden: a.state_size.0,
            layers: a.num_layers.0,
            dirs: if a.bidirectional { 2 } else { 1 },
            state_outputs: a.state_outputs,
            seq_len: a.use_sequence_length,
            p: a.p,
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
            x,
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

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            infer_partial: Some(infer_rnn_inputs),
            alias_safe: false,
            resources: &[Resource::TempSpace, Resource::Random],
            state: StateUse::Keeps,
            gradient: Some(grad::rnn),
            outputs: Outputs::By(|op, attrs| {
                let n = Rnn::parse(op, attrs)?.outputs();
                Ok((n, n))
            }),
            ..OpDef::new("RNN", Arity::AtLeast(3), infer_rnn, rnn_kernel)
        }
        .on_gpu_stateful(gpu::rnn),
        OpDef {
            alias_safe: false,
            resources: &[Resource::TempSpace],
            state: StateUse::ReadsOf("RNN"),
            // A gradient for each input but the sequence lengths.
            outputs: Outputs::By(|op, attrs| {
                let n = Rnn::parse(op, attrs)?.grad_inputs();
                Ok((n, n))
            }),
            ..OpDef::new(
                "_backward_RNN",
                Arity::AtLeast(4),
                infer_rnn_backward,
                rnn_backward_kernel,
            )
        }
        .on_gpu_stateful(gpu::rnn_backward),
    ];
    OPS
}

#[cfg(test)]
mod tests;
