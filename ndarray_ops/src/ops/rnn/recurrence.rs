//! The recurrence forward: a pass over the sequence, its layers one at a time or two at once,
//! and one step of it (the backward steps are `backward_steps`).

use std::ops::Range;

use ndarray::s;

use super::cell::LstmRow;
use super::*;
use crate::ops::lockstep::{lockstep, wavefront};
use crate::ops::par::wide;

// ---- the recurrence -------------------------------------------------------------------------

/// One pass over a batch: its sizes, the parameters and where each slot's lie, and how far each
/// sample runs.
pub(crate) struct Pass<'a, T> {
    pub(crate) r: Rnn,
    pub(crate) steps: usize,
    pub(crate) batch: usize,
    pub(super) params: &'a [T],
    pub(super) slots: Vec<Slot>,
    /// Steps each sample runs (all `steps` without `use_sequence_length`).
    pub(super) lens: Vec<usize>,
    /// Units each step is cut into along the hidden units ([`units_for`]).
    pub(super) units: usize,
    /// Weights packed by earlier passes over the same parameters, where the node keeps them.
    pub(super) packs: Option<&'a Packs>,
    /// Whether products of the shapes it fits run on Strassen's split ([`Weights`]): on
    /// unless `MXRS_RNN_STRASSEN` turns it off.
    pub(super) strassen: bool,
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
            units: units_for(r.hidden),
            packs: None,
            strassen: strassen_setting().unwrap_or(true),
        }
    }

    /// The pass taking its packed weights from `packs` and keeping there those it packs.
    pub(crate) fn with_packs(self, packs: &'a Packs) -> Self {
        Pass {
            packs: Some(packs),
            ..self
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

impl<'a, T: Real> Pass<'a, T> {
    /// `view` as weights the steps multiply by.
    pub(super) fn weights(&self, view: ArrayView2<'a, T>) -> Weights<'a, T> {
        Weights::new(view, self.packs, self.strassen)
    }
}

// ---- the steps, cut into units --------------------------------------------------------------

/// Units a step's work is cut into along the hidden units, each a [`lockstep`] unit: one per
/// thread (two per thread measured a little slower: each unit's rows of the trace are shorter
/// runs of memory), none narrower than 32 hidden units (the GEMM's tile is 32 columns wide).
pub(super) fn units_for(hidden: usize) -> usize {
    (hidden / 32).clamp(1, rayon::current_num_threads().max(1))
}

/// Hidden units per unit (the last unit may have fewer) out of `hidden` cut into `units`.
fn unit_width(hidden: usize, units: usize) -> usize {
    hidden.div_ceil(units.max(1))
}

/// Unit `u`'s hidden units out of `hidden` cut into `units`.
pub(super) fn unit_cols(hidden: usize, units: usize, u: usize) -> Range<usize> {
    let w = unit_width(hidden, units);
    (u * w).min(hidden)..((u + 1) * w).min(hidden)
}

/// The first `N` gates' slices over `cols` of a row of gates `h` wide each starting at
/// `at` (the rest empty): what one unit of a step owns of a sample's gates.
///
/// # Safety
/// The row lies inside the buffer, and nobody else reads or writes these columns while the
/// slices live.
pub(super) unsafe fn gate_cols<'s, T>(
    p: Shared<T>,
    at: usize,
    h: usize,
    cols: &Range<usize>,
    gates: usize,
) -> [&'s mut [T]; 4] {
    std::array::from_fn(|q| match q < gates {
        // SAFETY: the contract.
        true => unsafe {
            std::slice::from_raw_parts_mut(p.get().add(at + q * h + cols.start), cols.len())
        },
        false => &mut [][..],
    })
}

/// The first `parts` blocks of `h` of the row at `at` of `buf` (a trace's gates or extra
/// values), each over the columns `cols` (the rest empty), to read: [`gate_cols`]'s shared
/// twin.
pub(super) fn row_cols<'s, T>(
    buf: &'s [T],
    (at, h): (usize, usize),
    parts: usize,
    cols: &Range<usize>,
) -> [&'s [T]; 4] {
    std::array::from_fn(|q| match q < parts {
        true => &buf[at + q * h + cols.start..at + q * h + cols.end],
        false => &[][..],
    })
}

/// Columns `cols` of the `rows x width` row-major matrix at `p`, as a matrix view to write.
///
/// # Safety
/// The block lies inside the buffer, and nobody else reads or writes it while the view lives.
pub(super) unsafe fn block_mut<'s, T>(
    p: Shared<T>,
    rows: usize,
    width: usize,
    cols: &Range<usize>,
) -> ArrayViewMut2<'s, T> {
    use ndarray::ShapeBuilder;
    // SAFETY: the contract.
    unsafe {
        ArrayViewMut2::from_shape_ptr(
            (rows, cols.len()).strides((width, 1)),
            p.get().add(cols.start),
        )
    }
}

impl<'a, T: Real> Pass<'a, T> {
    /// The state sample `n` carries into time `t` in direction `d`: the step before in the
    /// direction's order, or `None` at its first step (the initial state).
    pub(super) fn before(&self, d: usize, t: usize, n: usize) -> Option<usize> {
        match d {
            0 => t.checked_sub(1),
            _ => (t + 1 < self.lens[n]).then_some(t + 1),
        }
    }

    /// Whether [`Pass::forward_layers`] runs its layers two at a time as a [`wavefront`]: on a
    /// pool of two threads, in one direction, with no dropout between layers (its mask is
    /// drawn between one layer and the next), and where the products give the same sums cut
    /// into steps as whole ([`Real::packs`]; `matrixmultiply`'s may differ in the last bit).
    /// Products on Strassen's split ([`Weights`]) sum in an order that follows their shape, so
    /// with it the pairs agree with the layers one by one to within rounding, as the plain
    /// products' results do with the split's.
    /// With more threads, cutting each step along the hidden units keeps them all busy.
    pub(crate) fn pairs(&self) -> bool {
        T::packs()
            && self.r.dirs == 1
            && self.r.layers >= 2
            && !self.r.drops()
            && rayon::current_num_threads() == 2
    }

    /// Floats of one layer's step scratch cut into `units`: per unit its gates' hidden
    /// projections, `G` blocks of `(N, w)` (not the LSTM's: it adds them onto the input
    /// projections in the trace); and the second state buffer.
    fn scratch_for(&self, units: usize) -> usize {
        let w = unit_width(self.r.hidden, units);
        let gates = match self.r.lstm() {
            true => 0,
            false => self.r.gh() / self.r.hidden,
        };
        self.batch * (gates * w * units + self.r.hidden)
    }

    /// Floats of scratch [`Pass::forward_layer`] takes, and [`Pass::forward_pair`] (two
    /// layers of one unit each) where the pass runs in pairs.
    pub(crate) fn step_scratch(&self) -> usize {
        let one = self.scratch_for(self.units);
        match self.pairs() {
            true => one.max(2 * self.scratch_for(1)),
            false => one,
        }
    }

    /// Floats of trace an inference pass takes: one direction's, which every layer and
    /// direction reuses, or two layers' where the pass runs in pairs (a pair's layers run at
    /// once).
    pub(crate) fn scratch_traces(&self) -> usize {
        self.trace_len() * if self.pairs() { 2 } else { 1 }
    }

    /// The input projection of direction `d` of layer `l` for as many rows as `gates` holds,
    /// several steps' at once, into the trace's `gates` `(rows, G*H)` from `input`'s rows
    /// (its bias is added step by step); on the pool's threads (`wide`) or on this one. An
    /// element is the same sum however the rows are cut: both ways run the one GEMM, whose sum
    /// for an element does not depend on the rows around it.
    fn input_projection(&self, (l, d): (usize, usize), input: &[T], gates: &mut [T], wide: bool) {
        let (s, gh) = (self.slot(l, d), self.r.gh());
        let m = gates.len() / gh;
        let wx = mat(&self.params[s.wx..], gh, s.input);
        let (x, mut c) = (mat(input, m, s.input), mat_mut(gates, m, gh));
        let weights = self.weights(wx.reversed_axes());
        match wide {
            true => weights.product_wide(&x, &mut c),
            false => weights.product(&x, &mut c, false),
        }
    }

    /// Runs every layer on `xs` with no dropout between them: the layers below the top write
    /// their outputs one after the other into `mid`, the top into `top`. `traces` holds a trace
    /// per layer, one after the other, or (an inference pass) [`Pass::scratch_traces`] that
    /// the layers share. Layers run in pairs where [`Pass::pairs`] says so; arguments
    /// otherwise as [`Pass::forward_layer`]'s.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_layers(
        &self,
        xs: &[T],
        (mid, top): (&mut [T], &mut [T]),
        traces: &mut [T],
        (h0, c0): (&[T], &[T]),
        (hy, cy): (&mut [T], &mut [T]),
        scratch: &mut [T],
        keep: bool,
    ) -> KResult {
        let (layers, ll, tl) = (
            self.r.layers,
            self.layer_len(),
            self.trace_len() * self.r.dirs,
        );
        // Pairs hand work from one of rayon's threads to the other several times a layer. From
        // inside the pool each hand-over lands on the other thread's queue while it still looks
        // for work; from outside, each is injected into the pool and a sleeping thread woken.
        if self.pairs() && rayon::current_thread_index().is_none() {
            return rayon::scope(|_| {
                self.forward_layers(xs, (mid, top), traces, (h0, c0), (hy, cy), scratch, keep)
            });
        }
        let per_layer = traces.len() >= layers * tl;
        let mut l = 0;
        while l < layers {
            let span = if self.pairs() && l + 1 < layers { 2 } else { 1 };
            let tr = match per_layer {
                true => &mut traces[l * tl..(l + span) * tl],
                false => &mut traces[..],
            };
            let (below, rest) = mid.split_at_mut((l * ll).min(mid.len()));
            let input: &[T] = if l == 0 { xs } else { &below[(l - 1) * ll..] };
            // Layer `l`'s place in `mid` (none for the top), then the next layer's.
            let (first, rest) = rest.split_at_mut(ll.min(rest.len()));
            if span == 2 {
                let upper: &mut [T] = match l + 2 == layers {
                    true => &mut *top,
                    false => &mut rest[..ll],
                };
                self.forward_pair(
                    l,
                    input,
                    (first, upper),
                    tr,
                    (h0, c0),
                    (hy, cy),
                    scratch,
                    keep,
                )?;
            } else {
                let output: &mut [T] = match l + 1 == layers {
                    true => &mut *top,
                    false => first,
                };
                self.forward_layer(l, input, output, tr, h0, c0, hy, cy, scratch, keep)?;
            }
            l += span;
        }
        Ok(())
    }

    /// Runs layer `l` (both directions) on `input` `(T, N, In)` into `output` `(T, N, D*H)`,
    /// leaving each direction's trace in `traces` (one after the other, or all in one when
    /// `traces` holds one) and the final states in `hy` / `cy` `(L*D, N, H)`. `scratch` holds
    /// [`Pass::step_scratch`] floats. Without `keep` the trace is scratch, and only the
    /// projections are written to it.
    ///
    /// Each step runs as [`lockstep`] units, one per run of hidden units (all of an LSTM's four
    /// gates for them): a unit's products need only the state before, and the gates of a
    /// hidden unit only its own pre-activations, so a step is one round of units, writing the
    /// next state into the other of two buffers ([`LayerSteps`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_layer(
        &self,
        l: usize,
        input: &[T],
        output: &mut [T],
        traces: &mut [T],
        h0: &[T],
        c0: &[T],
        hy: &mut [T],
        cy: &mut [T],
        scratch: &mut [T],
        keep: bool,
    ) -> KResult {
        let (rows, gh, tl) = (self.steps * self.batch, self.r.gh(), self.trace_len());
        let out = Shared::new(output.as_mut_ptr());
        for d in 0..self.r.dirs {
            let trace = match traces.len() >= (d + 1) * tl {
                true => &mut traces[d * tl..(d + 1) * tl],
                false => &mut traces[..tl],
            };
            self.input_projection((l, d), input, &mut trace[..rows * gh], true);
            let units = self.units;
            // SAFETY: the buffers are the layer's, sized from the pass; the steps run here.
            let steps = unsafe {
                self.layer_steps((l, d), units, trace, out, (h0, c0), (hy, cy), scratch, keep)
            };
            lockstep(self.steps, units, |s, u| steps.run(s, u));
            steps.finish();
        }
        Ok(())
    }

    /// Runs layers `l` and `l + 1` of a one-direction pass at once, as a [`wavefront`] of one
    /// thread per layer: the lower layer's step `t` on the calling thread, then the upper's a
    /// step behind on the other. The upper layer's input projection is made step by step, as
    /// the lower layer's output arrives, its gates' columns cut in two: the lower thread makes
    /// the first part after its step, the upper the second before its own. Each thread then
    /// does the same work per step (one layer's hidden product and cell, half an input
    /// projection) and neither waits on the other within a layer's step; their weights (one
    /// `W_h`, half a `W_x`: 1.5 MiB for an LSTM of 256) stay in each core's cache. The upper
    /// layer's last step, after the lower's last, is shared by the two threads.
    ///
    /// `outputs` are the two layers' outputs (the lower's is the upper's input), `traces` the
    /// two layers' traces one after the other; the rest as [`Pass::forward_layer`]'s. The
    /// products and cells are those of two calls of `forward_layer`, element for element, so
    /// the results are the same bits (within rounding where the products run on Strassen's
    /// split, which cuts them by their own shapes).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_pair(
        &self,
        l: usize,
        input: &[T],
        (lower_out, upper_out): (&mut [T], &mut [T]),
        traces: &mut [T],
        (h0, c0): (&[T], &[T]),
        (hy, cy): (&mut [T], &mut [T]),
        scratch: &mut [T],
        keep: bool,
    ) -> KResult {
        let (nb, gh, tl) = (self.batch, self.r.gh(), self.trace_len());
        let rows = self.steps * nb;
        let (lower_trace, upper_trace) = traces.split_at_mut(tl);
        let (lower_scratch, upper_scratch) = scratch.split_at_mut(self.scratch_for(1));
        // The lower layer's projection for the rows of its last steps is left to the
        // follower's first round, which would otherwise wait for the leader's first step: as
        // many rows as that step's work (its hidden product and half a projection, 1.5 steps'
        // rows of this one), never the first step's own.
        let head = rows - (3 * nb / 2).min(rows.saturating_sub(nb));
        self.input_projection((l, 0), input, &mut lower_trace[..head * gh], true);
        let tail = Shared::new(lower_trace[head * gh..].as_mut_ptr());
        let below = Shared::new(lower_out.as_mut_ptr());
        let upper_gates = Shared::new(upper_trace.as_mut_ptr());
        // SAFETY: the buffers are the layers', sized from the pass, each layer's apart from the
        // other's; the steps run here.
        let (lower, upper) = unsafe {
            (
                self.layer_steps(
                    (l, 0),
                    1,
                    lower_trace,
                    below,
                    (h0, c0),
                    (hy, cy),
                    lower_scratch,
                    keep,
                ),
                self.layer_steps(
                    (l + 1, 0),
                    1,
                    upper_trace,
                    Shared::new(upper_out.as_mut_ptr()),
                    (h0, c0),
                    (hy, cy),
                    upper_scratch,
                    keep,
                ),
            )
        };
        // The upper layer's `W_x` in two parts of its gates' columns, whole GEMM tiles each.
        let s = self.slot(l + 1, 0);
        let wx = mat(&self.params[s.wx..], gh, s.input);
        let cut = (gh / 2).div_ceil(32).saturating_mul(32).min(gh);
        let parts = [0..cut, cut..gh];
        let weights = parts
            .clone()
            .map(|c| self.weights(wx.slice_move(s![c, ..]).reversed_axes()));
        let project = |t: usize, p: usize| {
            // SAFETY: row `t` of the lower layer's output is written by its step `t`, which
            // has finished (the wavefront's order), and is only read from then on; part `p` of
            // the upper trace's row `t` is this call's alone (the other part is the other
            // thread's, and the upper step `t` reads the row only after both).
            let (x, mut c) = unsafe {
                (
                    std::slice::from_raw_parts(below.get().add(t * nb * s.input), nb * s.input),
                    block_mut(
                        Shared::new(upper_gates.get().wrapping_add(t * nb * gh)),
                        nb,
                        gh,
                        &parts[p],
                    ),
                )
            };
            weights[p].product(&mat(x, nb, s.input), &mut c, false);
        };
        // The upper layer's last step, which the leader would otherwise watch, cut into two
        // units of hidden units (for 64 or more): the leader makes the whole projection of its
        // row, then each thread runs a unit (a two-layer LSTM of 256 units: 11.37 -> 11.23 ms a
        // pass, with the cells' two passes). Only with kept packs: the units' weights are
        // packed apart from the whole step's (1 MiB more for that LSTM), once for all passes;
        // packed at every pass, they would cost about what the cut saves.
        let (last, units) = (self.steps - 1, units_for(self.r.hidden));
        let halves =
            (units == 2 && self.packs.is_some() && self.scratch_for(units) <= self.scratch_for(1))
                .then(|| upper.cut(units, self.step_weights((l + 1, 0), units)));
        // Each thread packs the weights it multiplies by before the first step, both at once:
        // packed at its first product, the follower's started a step behind and ended one.
        rayon::join(
            || {
                lower.prepare();
                weights[0].prepare(nb);
                if let Some(h) = &halves {
                    h.prepare_unit(0);
                }
            },
            || {
                upper.prepare();
                weights[1].prepare(nb);
                if let Some(h) = &halves {
                    h.prepare_unit(1);
                }
            },
        );
        // The leader's first step beside the rest of its projection, then the wavefront from
        // the leader's second step and the follower's first.
        rayon::join(
            || {
                lower.run(0, 0);
                project(0, 0);
            },
            || {
                // SAFETY: the trace's rows from `head` on, which the first step (rows below
                // `nb <= head`) does not touch; no step reads them before the join.
                let gates =
                    unsafe { std::slice::from_raw_parts_mut(tail.get(), (rows - head) * gh) };
                let rest = &input[head * self.slot(l, 0).input..];
                self.input_projection((l, 0), rest, gates, false);
            },
        );
        wavefront(
            self.steps,
            |t| {
                if t > 0 {
                    lower.run(t, 0);
                    project(t, 0);
                }
                if t == last && halves.is_some() {
                    project(t, 1);
                }
            },
            |t| {
                if t < last || halves.is_none() {
                    project(t, 1);
                    upper.run(t, 0);
                }
            },
        );
        if let Some(halves) = &halves {
            rayon::join(|| halves.run(last, 0), || halves.run(last, 1));
        }
        lower.finish();
        upper.finish();
        Ok(())
    }

    /// Direction `d` of layer `l` set up to run its steps cut into `units`: the layer's initial
    /// state copied into its place in `hy` / `cy`, where the steps leave the final one. The
    /// trace's gates hold the input projections by the time each step runs.
    ///
    /// # Safety
    /// `trace` (the direction's), `out` (the layer's output, `(T, N, D*H)`) and `scratch`
    /// ([`Pass::scratch_for`] `units`) stay valid and are touched only by the steps while the
    /// result lives; so is the layer's state in `hy` / `cy`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn layer_steps<'p>(
        &'p self,
        (l, d): (usize, usize),
        units: usize,
        trace: &mut [T],
        out: Shared<T>,
        (h0, c0): (&[T], &[T]),
        (hy, cy): (&mut [T], &mut [T]),
        scratch: &mut [T],
        keep: bool,
    ) -> LayerSteps<'p, 'a, T> {
        let (h, gh, nb) = (self.r.hidden, self.r.gh(), self.batch);
        let rows = self.steps * nb;
        let s = self.slot(l, d);
        let k = l * self.r.dirs + d;
        let (gate_buf, extra) = trace.split_at_mut(rows * gh);
        let blocks = self.step_weights((l, d), units);
        let state = k * nb * h..(k + 1) * nb * h;
        hy[state.clone()].copy_from_slice(&h0[state.clone()]);
        if self.r.lstm() {
            cy[state.clone()].copy_from_slice(&c0[state.clone()]);
        }
        // Without a cell (not LSTM) `cy` may be empty and is never read.
        let cell_at = state.start.min(cy.len());
        let (work, spare) = scratch.split_at_mut(self.scratch_for(units) - nb * h);
        LayerSteps {
            unit: Unit {
                pass: self,
                d,
                biases: (&self.params[s.bx..s.bx + gh], &self.params[s.bh..s.bh + gh]),
                out,
                gates: Shared::new(gate_buf.as_mut_ptr()),
                extra: Shared::new(extra.as_mut_ptr()),
                cell: Shared::new(cy[cell_at..].as_mut_ptr()),
                keep,
            },
            blocks,
            bufs: [
                Shared::new(hy[state].as_mut_ptr()),
                Shared::new(spare.as_mut_ptr()),
            ],
            work: Shared::new(work.as_mut_ptr()),
            per_unit: work.len() / units,
            units,
        }
    }

    /// Direction `d` of layer `l`'s hidden weights as its steps' `units` multiply by them: unit
    /// `u`'s product for gate `q` at `u * G + q`, the gate's rows of `W_h` for the unit's
    /// hidden units, transposed; or, for an LSTM's step in one unit, all of `W_h` transposed as
    /// one block (its gates' columns of the trace are one run: one product instead of `G`, and
    /// one set of Strassen's sums of the state).
    fn step_weights(&self, (l, d): (usize, usize), units: usize) -> Vec<Weights<'a, T>> {
        let (h, gh) = (self.r.hidden, self.r.gh());
        let wh = mat(&self.params[self.slot(l, d).wh..], gh, h);
        if units == 1 && self.r.lstm() {
            return vec![self.weights(wh.reversed_axes())];
        }
        (0..units)
            .flat_map(|u| {
                let c = unit_cols(h, units, u);
                (0..gh / h).map(move |q| {
                    self.weights(
                        wh.slice_move(s![q * h + c.start..q * h + c.end, ..])
                            .reversed_axes(),
                    )
                })
            })
            .collect()
    }
}

/// One direction of one layer set up to run its steps ([`Pass::layer_steps`]): what its
/// units share ([`Unit`]), their weights, and the two state buffers the steps write by turns.
struct LayerSteps<'p, 'a, T> {
    unit: Unit<'p, 'a, T>,
    /// Unit `u`'s product for gate `q`, at `u * G + q`: the gate's rows of `W_h` for the unit's
    /// hidden units, transposed (or [`Pass::step_weights`]' one block of an LSTM's one unit).
    blocks: Vec<Weights<'a, T>>,
    /// The state before a step and after it, by turns: its place in `hy`, then a spare.
    bufs: [Shared<T>; 2],
    /// Each unit's `per_unit` floats of scratch (the hidden projections of the modes without
    /// a cell).
    work: Shared<T>,
    per_unit: usize,
    units: usize,
}

impl<'a, T: Real> LayerSteps<'_, 'a, T> {
    /// Unit `u` of step `step`. Its products need only the state before; the LSTM adds its
    /// hidden projections onto the input projections in the trace and runs its cell fused,
    /// a call per sample ([`Real::lstm_row`]); the other modes keep their hidden
    /// projections gate after gate over every sample, so that each activation is one call over
    /// the whole block.
    fn run(&self, step: usize, u: usize) {
        let unit = &self.unit;
        let p = unit.pass;
        let (h, gh, nb) = (p.r.hidden, p.r.gh(), p.batch);
        let gates = gh / h;
        let cols = unit_cols(h, self.units, u);
        let (from, to) = (self.bufs[step % 2], self.bufs[(step + 1) % 2]);
        // SAFETY: the state before this step is only read during the step (the steps' order:
        // every unit of the step before has finished writing it, and the next step's units,
        // which write it again, start after this one's); the unit's scratch is its own.
        let (h_prev, work) = unsafe {
            (
                std::slice::from_raw_parts(from.get(), nb * h),
                self.work.piece_mut(u, self.per_unit),
            )
        };
        let lstm = p.r.lstm();
        let pre = match lstm {
            true => &mut [][..],
            false => &mut work[..gates * nb * cols.len()],
        };
        let t = time(unit.d, step, p.steps);
        let lhs = mat(h_prev, nb, h);
        let whole = lstm && self.blocks.len() == self.units;
        if whole {
            // One block for all gates (an LSTM in one unit): the step's whole rows of the
            // trace.
            let at = Shared::new(unit.gates.get().wrapping_add(t * nb * gh));
            // SAFETY: the step's rows of the trace, this unit's alone during the step.
            let mut rows = unsafe { block_mut(at, nb, gh, &(0..gh)) };
            self.blocks[u].product(&lhs, &mut rows, true);
        }
        for q in (0..gates).filter(|_| !whole) {
            let weights = &self.blocks[u * gates + q];
            match lstm {
                // The LSTM adds its hidden projections onto the input projections in the
                // trace's rows: the product's tiles fetch those rows ahead (a row a page apart
                // from the next, which the cell stalled on when reading them itself), and the
                // cell reads the sums while they are cached.
                true => {
                    let at = Shared::new(unit.gates.get().wrapping_add(t * nb * gh + q * h));
                    // SAFETY: the step's rows of the trace, this unit's columns of gate `q`:
                    // this unit's alone during the step.
                    weights.product(&lhs, &mut unsafe { block_mut(at, nb, gh, &cols) }, true);
                }
                false => {
                    let block = &mut pre[q * nb * cols.len()..(q + 1) * nb * cols.len()];
                    weights.product(&lhs, &mut mat_mut(block, nb, cols.len()), false);
                }
            }
        }
        // SAFETY: this unit alone touches its hidden units' columns of the buffers during the
        // step.
        wide(|| unsafe { unit.step(t, &cols, pre, h_prev, to) });
    }

    /// Packs every unit's weights now instead of at each one's first product.
    fn prepare(&self) {
        for w in &self.blocks {
            w.prepare(self.unit.pass.batch);
        }
    }

    /// Packs unit `u`'s weights now.
    fn prepare_unit(&self, u: usize) {
        let per = self.blocks.len() / self.units;
        for w in &self.blocks[u * per..(u + 1) * per] {
            w.prepare(self.unit.pass.batch);
        }
    }

    /// The same steps over the same state and buffers cut into `units`, which multiply by
    /// `blocks` ([`Pass::step_weights`] for as many units); their scratch is this one's, cut
    /// in as many pieces (the caller sees that it holds them: [`Pass::scratch_for`]).
    fn cut(&self, units: usize, blocks: Vec<Weights<'a, T>>) -> Self {
        LayerSteps {
            unit: self.unit.clone(),
            blocks,
            bufs: self.bufs,
            work: self.work,
            per_unit: self.per_unit * self.units / units,
            units,
        }
    }

    /// Leaves the final state in `hy`: after an odd number of steps it is in the spare.
    fn finish(&self) {
        let p = self.unit.pass;
        if p.steps % 2 == 1 {
            // SAFETY: both buffers hold a state of `N*H` floats and lie apart; the steps are
            // done.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.bufs[1].get(),
                    self.bufs[0].get(),
                    p.batch * p.r.hidden,
                )
            };
        }
    }
}

/// What a forward step's units share: the direction, its biases, and the buffers each unit
/// writes its own hidden units' columns of: the layer's output, the trace's gates and extra
/// values, the cell.
#[derive(Clone)]
struct Unit<'p, 'a, T> {
    pass: &'p Pass<'a, T>,
    d: usize,
    /// The input and hidden biases, `G*H` each.
    biases: (&'p [T], &'p [T]),
    out: Shared<T>,
    gates: Shared<T>,
    extra: Shared<T>,
    cell: Shared<T>,
    /// Whether the trace is kept for a backward pass: without, the activated gates and the
    /// extra values are not written back (an inference pass reads only the input projection
    /// from it).
    keep: bool,
}

impl<T: Real> Unit<'_, '_, T> {
    /// Step `t` of the hidden units `cols` of every sample: `pre` holds their hidden
    /// projections, `G` blocks of `(N, w)` (the plain modes and GRU activate them in place;
    /// the LSTM's are already in the trace, added to the input projections);
    /// the state before is `h_prev` `(N, H)`, and the state after goes to `next`. Samples past
    /// their length output zeros and keep their state.
    ///
    /// # Safety
    /// Nobody else touches columns `cols` of the output, the trace, the cell or `next` at
    /// step `t` meanwhile.
    #[inline(always)]
    unsafe fn step(
        &self,
        t: usize,
        cols: &Range<usize>,
        pre: &mut [T],
        h_prev: &[T],
        next: Shared<T>,
    ) {
        let p = self.pass;
        let (h, gh, nb, ew, w) = (p.r.hidden, p.r.gh(), p.batch, p.extra(), cols.len());
        let gates = gh / h;
        let (bx, bh) = self.biases;
        let live = |n: usize| t < p.lens[n];
        // The unit's `w` elements of a buffer from `at` on (each call below names row
        // `t * nb + n`'s columns `cols` of the trace or the output, or sample `n`'s of the cell
        // or `next`).
        let own = |b: Shared<T>, at: usize| {
            // SAFETY: those columns lie inside their buffers (sized from the same dimensions)
            // and are this unit's alone (the contract).
            unsafe { std::slice::from_raw_parts_mut(b.get().add(at), w) }
        };
        let gx = |n: usize, q: usize| own(self.gates, (t * nb + n) * gh + q * h + cols.start);
        let ex = |n: usize, q: usize| own(self.extra, (t * nb + n) * ew + q * h + cols.start);
        let at = |q: usize| q * h + cols.start..q * h + cols.end;
        let block = |q: usize, n: usize| (q * nb + n) * w..(q * nb + n + 1) * w;
        let lstm = matches!(p.r.mode, Mode::Lstm);
        if !lstm {
            // The modes without a cell activate `pre` in place: the biases added, in the
            // order of the unfused formula (GRU's candidate keeps its hidden part apart: it is
            // scaled by the reset gate first), then each activation over a whole block.
            let summed = match p.r.mode {
                Mode::Gru => 2,
                _ => gates,
            };
            for n in (0..nb).filter(|&n| live(n)) {
                for q in 0..summed {
                    let (x, b1, b2) = (gx(n, q), &bx[at(q)], &bh[at(q)]);
                    let r = block(q, n);
                    for (((v, &x), &b1), &b2) in pre[r].iter_mut().zip(&*x).zip(b1).zip(b2) {
                        *v = (x + b1) + (*v + b2);
                    }
                }
            }
            let whole = |q: usize| q * nb * w..(q + 1) * nb * w;
            match p.r.mode {
                Mode::Gru => {
                    T::sigmoid_all(&mut pre[whole(0).start..whole(1).end]);
                    for n in (0..nb).filter(|&n| live(n)) {
                        let (rz, cand) = pre.split_at_mut(whole(2).start);
                        let (x, b1, b2) = (gx(n, 2), &bx[at(2)], &bh[at(2)]);
                        let (r, hn) = (&rz[block(0, n)], &mut cand[n * w..(n + 1) * w]);
                        let mut e = self.keep.then(|| ex(n, 0));
                        for j in 0..w {
                            let hb = hn[j] + b2[j];
                            if let Some(e) = e.as_deref_mut() {
                                e[j] = hb;
                            }
                            hn[j] = (x[j] + b1[j]) + r[j] * hb;
                        }
                    }
                    T::tanh_all(&mut pre[whole(2)]);
                }
                Mode::Tanh => T::tanh_all(pre),
                Mode::Relu => pre.iter_mut().for_each(|v| *v = v.max(T::zero())),
                Mode::Lstm => unreachable!("the LSTM's gates are fused into its cell"),
            }
        }
        for n in 0..nb {
            let row = t * nb + n;
            let out = own(self.out, row * p.width() + self.d * h + cols.start);
            let hn = own(next, n * h + cols.start);
            let prev = &h_prev[n * h + cols.start..n * h + cols.end];
            if !live(n) {
                out.fill(T::default());
                hn.copy_from_slice(prev);
                continue;
            }
            if lstm {
                T::lstm_row(LstmRow {
                    input: std::array::from_fn(|q| gx(n, q)),
                    biases: (
                        std::array::from_fn(|q| &bx[at(q)]),
                        std::array::from_fn(|q| &bh[at(q)]),
                    ),
                    cell: own(self.cell, n * h + cols.start),
                    state: (hn, out),
                    kept: self.keep.then(|| [ex(n, 0), ex(n, 1)]),
                });
                continue;
            }
            for q in (0..gates).filter(|_| self.keep) {
                gx(n, q).copy_from_slice(&pre[block(q, n)]);
            }
            let pre: &[T] = pre;
            let g = |q: usize| &pre[block(q, n)];
            match p.r.mode {
                Mode::Gru => {
                    let (z, cand) = (g(1), g(2));
                    for (((hn, &z), &cand), &prev) in hn.iter_mut().zip(z).zip(cand).zip(prev) {
                        *hn = (T::one() - z) * cand + z * prev;
                    }
                }
                _ => hn.copy_from_slice(g(0)),
            }
            out.copy_from_slice(hn);
        }
    }
}
