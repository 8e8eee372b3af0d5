//! The recurrence backward: a layer's steps from its last to its first, cut among threads by
//! samples (each unit runs its samples through every step alone) or, for few samples, by
//! hidden units in lockstep; and the gradient through one step of the modes without a cell.

use std::ops::Range;

use ndarray::s;

use super::cell::LstmGradRow;
use super::recurrence::{block_mut, gate_cols, row_cols, unit_cols};
use super::*;
use crate::ops::lockstep::lockstep;

impl<T: Real> Pass<'_, T> {
    /// The backward recurrence of direction `d` of layer `l`, from its last step in the
    /// direction's order to its first: `y` is the layer's output and `dy` its gradient,
    /// `trace` the direction's; `dh` (and LSTM's `dc`) come in as the final states' gradients
    /// and leave as the initial states'. Leaves every step's gate gradients in `dgx` / `dgh`
    /// (the input and hidden projections', `(T*N, G*H)`; `dgh` only for GRU, empty otherwise,
    /// the hidden projection's then being `dgx`) and the state each step started from in
    /// `hprev` `(T*N, H)`. `scratch` holds `2 * N * H`.
    ///
    /// A round of a unit first finishes the state gradient the round before left (its part of
    /// `dgh_t' W_h`), then runs its part of the gates backward for this round's step; one round
    /// more finishes the initial state's gradient. The units ([`Pass::units`]) are cut
    /// ([`BackCut`]):
    /// - by samples, with at least [`UNIT_SAMPLES`] a unit: a unit's rounds need only its own
    ///   samples' rows, so each runs all of its rounds with no wait, multiplying by the whole
    ///   of `W_h`;
    /// - else by hidden units, as in [`Pass::forward_layer`]: a unit's part of `dgh_t' W_h`
    ///   needs every unit's gate gradients of step `t`, so the units run a round at a time in
    ///   [`lockstep`], each multiplying by its hidden units' columns of `W_h`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn backward_steps(
        &self,
        (l, d): (usize, usize),
        (y, dy): (&[T], &[T]),
        trace: &[T],
        (h0, c0): (&[T], &[T]),
        (dh, dc): (&mut [T], &mut [T]),
        (dgx, dgh, hprev): (&mut [T], &mut [T], &mut [T]),
        scratch: &mut [T],
    ) {
        let r = self.r;
        let (h, gh, nb, steps, ew) = (r.hidden, r.gh(), self.batch, self.steps, self.extra());
        let (rows, width, gates, units) = (steps * nb, self.width(), gh / h, self.units);
        let s = self.slot(l, d);
        let st = (l * r.dirs + d) * nb * h;
        let (gate_buf, extra) = trace.split_at(rows * gh);
        let wh = mat(&self.params[s.wh..], gh, h);
        let cut = BackCut::new(nb, h, units);
        // Plain products (no Strassen's split): split, these shapes (depth `G*H`, a unit's
        // columns) made a two-layer LSTM's training step 0.5-1% slower.
        let blocks: Vec<Weights<'_, T>> = match cut {
            BackCut::Samples { .. } => vec![Weights::new(wh, self.packs, false)],
            BackCut::Hidden { .. } => (0..units)
                .map(|u| {
                    Weights::new(
                        wh.slice_move(s![.., unit_cols(h, units, u)]),
                        self.packs,
                        false,
                    )
                })
                .collect(),
        };
        let (through, bypass) = scratch.split_at_mut(nb * h);
        // Only GRU's hidden projection has gate gradients of its own; the other modes' are
        // the input projection's.
        let split = !dgh.is_empty();
        let (pgx, pgh, php) = (
            Shared::new(dgx.as_mut_ptr()),
            Shared::new(if split {
                dgh.as_mut_ptr()
            } else {
                dgx.as_mut_ptr()
            }),
            Shared::new(hprev.as_mut_ptr()),
        );
        let (pdh, pdc) = (Shared::new(dh.as_mut_ptr()), Shared::new(dc.as_mut_ptr()));
        let (pth, pby) = (
            Shared::new(through.as_mut_ptr()),
            Shared::new(bypass.as_mut_ptr()),
        );
        let (lstm, gru) = (r.lstm(), matches!(r.mode, Mode::Gru));
        let round = |round: usize, u: usize| {
            let (ns, cols, block) = cut.unit(u);
            let w = cols.len();
            // The unit's `w` elements of a buffer from `at` on (`at` names a sample's row
            // plus `cols.start`).
            // SAFETY: sample `n`'s columns `cols` of the state gradients, the bypass, the
            // projection back, the cell gradient and the previous states lie inside their
            // buffers (sized from the same dimensions), and this unit alone touches them
            // during the round (`n` one of its samples `ns`).
            let own = |p: Shared<T>, at: usize| unsafe {
                std::slice::from_raw_parts_mut(p.get().add(at), w)
            };
            if round > 0 {
                // The state gradient after step `t`: back through the hidden projection, plus
                // GRU's bypass; samples past their length carry theirs unchanged.
                let t = time(d, steps - round, steps);
                // SAFETY: the unit's samples' rows of that step's gate gradients are only read
                // during this round (every unit of the round before, or this unit itself, has
                // written them).
                let dg_t = unsafe { pgh.piece(t, nb * gh) };
                let dg_t = mat(dg_t, nb, gh).slice_move(s![ns.clone(), ..]);
                // The unit's samples' rows of a state buffer, its columns `cols`.
                let rows_of = |p: Shared<T>| Shared::new(p.get().wrapping_add(ns.start * h));
                let weights = &blocks[block];
                if !gru && ns.clone().all(|n| t < self.lens[n]) {
                    // Nothing to add, no sample to leave as it was: straight into `dh`.
                    // SAFETY: as for `own`.
                    let mut out = unsafe { block_mut(rows_of(pdh), ns.len(), h, &cols) };
                    weights.product(&dg_t, &mut out, false);
                } else {
                    // SAFETY: as for `own`.
                    let mut out = unsafe { block_mut(rows_of(pth), ns.len(), h, &cols) };
                    weights.product(&dg_t, &mut out, false);
                    for n in ns.clone().filter(|&n| t < self.lens[n]) {
                        let at = n * h + cols.start;
                        let dhn = own(pdh, at);
                        dhn.copy_from_slice(own(pth, at));
                        if gru {
                            dhn.iter_mut()
                                .zip(&*own(pby, at))
                                .for_each(|(g, &b)| *g = *g + b);
                        }
                    }
                }
            }
            if round == steps {
                return;
            }
            let t = time(d, steps - 1 - round, steps);
            // The state's whole gradient, carried plus the output's, for the modes that take it
            // as a slice (the LSTM's row sums the two itself): no allocation per round there.
            let mut dh_f = vec![T::zero(); if lstm { 0 } else { w }];
            for n in ns.clone() {
                let row = t * nb + n;
                // SAFETY: row `row`'s columns `cols` of each gate's gradients are this unit's
                // alone during the round.
                let (gx, gh_row) = unsafe {
                    (
                        gate_cols(pgx, row * gh, h, &cols, gates),
                        gate_cols(pgh, row * gh, h, &cols, if split { gates } else { 0 }),
                    )
                };
                let hp_row = own(php, row * h + cols.start);
                if t >= self.lens[n] {
                    gx.into_iter()
                        .chain(gh_row)
                        .for_each(|g| g.fill(T::default()));
                    hp_row.fill(T::default());
                    continue;
                }
                let prev = self.before(d, t, n).map(|p| p * nb + n);
                match prev {
                    Some(p) => hp_row.copy_from_slice(&y[p * width + d * h + cols.start..][..w]),
                    None => hp_row.copy_from_slice(&h0[st + n * h + cols.start..][..w]),
                }
                let c_prev: &[T] = match (lstm, prev) {
                    (false, _) => &[],
                    (true, Some(p)) => &extra[p * ew + cols.start..][..w],
                    (true, None) => &c0[st + n * h + cols.start..][..w],
                };
                let dhn = own(pdh, n * h + cols.start);
                let dy_row = &dy[row * width + d * h + cols.start..][..w];
                if lstm {
                    T::lstm_grad_row(LstmGradRow {
                        dh: (dhn, dy_row),
                        dc: own(pdc, n * h + cols.start),
                        gates: row_cols(gate_buf, (row * gh, h), gates, &cols),
                        tc: row_cols(extra, (row * ew, h), ew / h, &cols)[1],
                        c_prev,
                        dgates: gx,
                    });
                    continue;
                }
                for ((f, &a), &b) in dh_f.iter_mut().zip(&*dhn).zip(dy_row) {
                    *f = a + b;
                }
                // GRU's part that bypasses the hidden projection waits in the bypass buffer
                // for the next round.
                let by = own(pby, n * h + cols.start);
                step_backward(
                    r.mode,
                    &dh_f,
                    row_cols(gate_buf, (row * gh, h), gates, &cols),
                    row_cols(extra, (row * ew, h), ew / h, &cols),
                    hp_row,
                    gx,
                    gh_row,
                    by,
                );
            }
        };
        match cut {
            BackCut::Samples { .. } => {
                lockstep(1, units, |_, u| (0..=steps).for_each(|s| round(s, u)));
            }
            BackCut::Hidden { .. } => lockstep(steps + 1, units, round),
        }
    }
}

/// Fewest samples a unit of the backward steps cut by samples takes. With fewer, each unit's
/// product streams the whole of `W_h` for a few rows, and the lockstep of hidden units wins:
/// a two-layer LSTM of 256 hidden units on two threads, training step by samples against by
/// hidden units (medians of alternating runs), batch 2 (1 sample a unit) 1.18x, 8 (4) 1.01x,
/// 16 (8) 0.93x, 32 (16) 0.985x, 64 (32) 0.94x.
const UNIT_SAMPLES: usize = 8;

/// How the backward steps are cut into `units` (see [`Pass::backward_steps`]).
#[derive(Clone, Copy)]
enum BackCut {
    /// Runs of samples, every hidden unit: unit `u` takes samples `u * nb / units` on.
    Samples { nb: usize, h: usize, units: usize },
    /// Runs of hidden units ([`unit_cols`]), every sample.
    Hidden { nb: usize, h: usize, units: usize },
}

impl BackCut {
    fn new(nb: usize, h: usize, units: usize) -> Self {
        match units > 1 && nb / units >= UNIT_SAMPLES {
            true => BackCut::Samples { nb, h, units },
            false => BackCut::Hidden { nb, h, units },
        }
    }

    /// Unit `u`'s samples, its hidden units, and which of the steps' weight blocks it
    /// multiplies by.
    fn unit(self, u: usize) -> (Range<usize>, Range<usize>, usize) {
        match self {
            BackCut::Samples { nb, h, units } => (u * nb / units..(u + 1) * nb / units, 0..h, 0),
            BackCut::Hidden { nb, h, units } => (0..nb, unit_cols(h, units, u), u),
        }
    }
}

/// The gradient through one step of one sample over a run of hidden units, for the modes
/// without a cell (LSTM's is [`Real::lstm_grad_row`]). In: `dh` the gradient of the step's
/// output state (carried plus the layer output's), the step's gates `g` and extra values `e`,
/// the state before it `h_prev`. Out: each gate's gradients of the input projection `dgx`
/// and, for GRU, of the hidden projection `dgh` (they differ in its candidate; the other
/// modes' are the same, and `dgh` is not written), and GRU's part of the previous state's
/// gradient that bypasses the hidden projection (`z * dh`) to `dh_direct`.
#[allow(clippy::too_many_arguments)]
fn step_backward<T: Real>(
    mode: Mode,
    dh: &[T],
    g: [&[T]; 4],
    e: [&[T]; 4],
    h_prev: &[T],
    dgx: [&mut [T]; 4],
    dgh: [&mut [T]; 4],
    dh_direct: &mut [T],
) {
    let one = T::one();
    for j in 0..dh.len() {
        match mode {
            Mode::Gru => {
                let (r, z, n) = (g[0][j], g[1][j], g[2][j]);
                let dn = dh[j] * (one - z) * (one - n * n);
                let dz = dh[j] * (h_prev[j] - n) * z * (one - z);
                let dr = dn * e[0][j] * r * (one - r);
                for (k, v) in [dr, dz, dn].into_iter().enumerate() {
                    dgx[k][j] = v;
                }
                dgh[0][j] = dr;
                dgh[1][j] = dz;
                dgh[2][j] = dn * r;
                dh_direct[j] = dh[j] * z;
            }
            Mode::Tanh => {
                let y = g[0][j];
                dgx[0][j] = dh[j] * (one - y * y);
            }
            Mode::Relu => {
                dgx[0][j] = if g[0][j] > T::zero() {
                    dh[j]
                } else {
                    T::zero()
                };
            }
            Mode::Lstm => unreachable!("the LSTM's step gradient is its own row"),
        }
    }
}
