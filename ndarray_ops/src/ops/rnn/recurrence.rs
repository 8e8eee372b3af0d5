//! The recurrence itself: the gates' float math, a pass over the sequence and one step of it,
//! forward and backward.

use super::*;

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
pub(super) fn add_to<T: Element>(acc: &mut [T], v: &[T]) {
    for (a, &b) in acc.iter_mut().zip(v) {
        *a = a.add(b);
    }
}

/// A row-major matrix view of the first `r * c` elements of `s`.
pub(super) fn mat<T>(s: &[T], r: usize, c: usize) -> ArrayView2<'_, T> {
    // The callers size every buffer from the same dimensions.
    ArrayView2::from_shape((r, c), &s[..r * c]).unwrap_or_else(|e| panic!("{r}x{c} view: {e}"))
}

pub(super) fn mat_mut<T>(s: &mut [T], r: usize, c: usize) -> ArrayViewMut2<'_, T> {
    ArrayViewMut2::from_shape((r, c), &mut s[..r * c])
        .unwrap_or_else(|e| panic!("{r}x{c} view: {e}"))
}

/// Adds `bias` to every `bias.len()`-wide row of `rows`.
pub(super) fn add_rows<T: Element>(rows: &mut [T], bias: &[T]) {
    for row in rows.chunks_exact_mut(bias.len()) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v = v.add(b);
        }
    }
}

/// `acc += ` the column sums of the `acc.len()`-wide rows of `rows`.
pub(super) fn sum_rows<T: Element>(rows: &[T], acc: &mut [T]) {
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
    pub(super) params: &'a [T],
    pub(super) slots: Vec<Slot>,
    /// Steps each sample runs (all `steps` without `use_sequence_length`).
    pub(super) lens: Vec<usize>,
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
    pub(super) fn before(&self, d: usize, t: usize, n: usize) -> Option<usize> {
        match d {
            0 => t.checked_sub(1),
            _ => (t + 1 < self.lens[n]).then_some(t + 1),
        }
    }

    /// Runs layer `l` (both directions) on `input` `(T, N, In)` into `output` `(T, N, D*H)`,
    /// leaving each direction's trace in `traces` (one after the other, or all in one when
    /// `traces` holds one) and the final states in `hy` / `cy` `(L*D, N, H)`.
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
pub(super) fn step_forward<T: Real>(
    mode: Mode,
    g: &mut [T],
    hp: &[T],
    h: &mut [T],
    c: &mut [T],
    e: &mut [T],
) {
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
pub(super) fn step_backward<T: Real>(
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
