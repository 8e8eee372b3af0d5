//! One LSTM step of one sample over a run of hidden units, fused: the biases, the four gates'
//! activations and the new cell, then its tanh and the new state, in one call whose two
//! passes over each chunk of the run stay in the first-level cache. As separate passes (the
//! biases, each activation over its block, the cell, the state, the copies to the output and
//! the next state) each went back to memory, and they took a sixth of an LSTM's forward pass.
//! The arithmetic is the unfused formula's, operation for operation, so both give the same
//! bits; the biases are added in MXNet's order, after the input and hidden projections' sum
//! `s_q` (the step's product adds the one onto the other):
//!
//! ```text
//! v_q = (s_q + bx_q) + bh_q                    for the gates q = i, f, g, o
//! i, f, o = sigmoid(v_i, v_f, v_o);  g = tanh(v_g)
//! c' = f c + i g;  h' = o tanh(c')
//! ```

use crate::ops::vecmath::{Sigmoid, Tanh};
use rten_simd::ops::NumOps;
use rten_simd::{Isa, Simd, SimdOp, SimdUnaryOp};

use super::real::Real;

/// One sample's run of `w` hidden units at one step: what [`Real::lstm_row`] reads and writes.
pub(crate) struct LstmRow<'s, T> {
    /// The gates' projections, input plus hidden (`s_q` above, the trace's row), `w` each;
    /// with `kept` they come back as the activated gates, which the backward pass reads.
    pub input: [&'s mut [T]; 4],
    /// The input and the hidden biases' runs, per gate.
    pub biases: ([&'s [T]; 4], [&'s [T]; 4]),
    /// The cell: in, the step before's; out, the new one.
    pub cell: &'s mut [T],
    /// The new state, written here and to the layer's output row.
    pub state: (&'s mut [T], &'s mut [T]),
    /// Where the trace keeps the new cell and its tanh, for a backward pass.
    pub kept: Option<[&'s mut [T]; 2]>,
}

/// The formula element by element, for the element types without a vectorized version.
pub(super) fn lstm_row_scalar<T: Real>(row: LstmRow<'_, T>) {
    let LstmRow {
        input,
        biases: (bx, bh),
        cell,
        state: (next, out),
        mut kept,
    } = row;
    let one = T::one();
    let sigmoid = |v: T| one / (one + (-v).exp());
    for j in 0..cell.len() {
        let v = |q: usize| (input[q][j] + bx[q][j]) + bh[q][j];
        let (i, f, g, o) = (sigmoid(v(0)), sigmoid(v(1)), v(2).tanh(), sigmoid(v(3)));
        let c = f * cell[j] + i * g;
        let tc = c.tanh();
        let h = o * tc;
        cell[j] = c;
        next[j] = h;
        out[j] = h;
        if let Some([kc, ktc]) = kept.as_mut() {
            for (q, a) in [i, f, g, o].into_iter().enumerate() {
                input[q][j] = a;
            }
            kc[j] = c;
            ktc[j] = tc;
        }
    }
}

/// Hidden units a forward row's two passes take at a time (a multiple of every vector width).
const PARK: usize = 256;

/// The formula a vector at a time through [`crate::ops::vecmath`]'s sigmoid and tanh (the
/// functions the unfused pass calls over whole blocks), a masked vector for a ragged end.
impl SimdOp for LstmRow<'_, f32> {
    type Output = ();

    #[inline(always)]
    fn eval<I: Isa>(self, isa: I) {
        let ops = isa.f32();
        let LstmRow {
            input,
            biases: (bx, bh),
            cell,
            state: (next, out),
            kept,
        } = self;
        let w = cell.len();
        let lanes = ops.len();
        let all_there = bx.iter().chain(&bh).all(|s| s.len() == w)
            && input.iter().all(|s| s.len() == w)
            && next.len() == w
            && out.len() == w
            && kept.as_ref().is_none_or(|k| k.iter().all(|s| s.len() == w));
        assert!(all_there, "LSTM row: every run must hold {w} hidden units");
        let input = input.map(|s| s.as_mut_ptr());
        let kept = kept.map(|k| k.map(|s| s.as_mut_ptr()));
        let (cell, next, out) = (cell.as_mut_ptr(), next.as_mut_ptr(), out.as_mut_ptr());
        // Two passes over each chunk of the row: the gates and the new cell, then the cell's
        // tanh and the state, the output gate parked between them. In one pass, each vector's
        // chain (four activations, the cell, its tanh) was longer than the core overlapped
        // with the next vector's: 32 rows of 256 units took about 18 µs on one core of a Zen 4,
        // in two about 15 (the same bits: each element's arithmetic is unchanged).
        let mut park = [0f32; PARK];
        for j0 in (0..w).step_by(PARK) {
            let end = (j0 + PARK).min(w);
            for j in (j0..end).step_by(lanes) {
                let at = Lanes::new(ops, w, j);
                // SAFETY: every run holds `w` elements (asserted above), so the lanes `at`
                // keeps lie inside each, and `park` holds those from `j0`; the written runs
                // came as `&mut`, nothing else borrows them.
                unsafe {
                    let mut v = [ops.zero(); 4];
                    for q in 0..4 {
                        let x = ops.add(at.load(input[q]), at.load(bx[q].as_ptr()));
                        v[q] = ops.add(x, at.load(bh[q].as_ptr()));
                    }
                    let i = Sigmoid::apply(isa, v[0]);
                    let f = Sigmoid::apply(isa, v[1]);
                    let g = Tanh::apply(isa, v[2]);
                    let o = Sigmoid::apply(isa, v[3]);
                    let c = ops.add(ops.mul(f, at.load(cell)), ops.mul(i, g));
                    at.store(c, cell);
                    at.from(j0).store(o, park.as_mut_ptr());
                    if let Some([kc, _]) = kept {
                        for (q, a) in [i, f, g, o].into_iter().enumerate() {
                            at.store(a, input[q]);
                        }
                        at.store(c, kc);
                    }
                }
            }
            for j in (j0..end).step_by(lanes) {
                let at = Lanes::new(ops, w, j);
                // SAFETY: as above.
                unsafe {
                    let tc = Tanh::apply(isa, at.load(cell));
                    let h = ops.mul(at.from(j0).load(park.as_ptr()), tc);
                    at.store(h, next);
                    at.store(h, out);
                    if let Some([_, ktc]) = kept {
                        at.store(tc, ktc);
                    }
                }
            }
        }
    }
}

/// One sample's run of `w` hidden units at one step of the backward pass: what
/// [`Real::lstm_grad_row`] reads and writes. With `dh = carried + dy` the gradient of the
/// step's state, `o`, `tc = tanh(c')` and the other gates from the trace:
///
/// ```text
/// dc~ = dc + dh o (1 - tc^2)
/// di = dc~ g i (1 - i);  df = dc~ c f (1 - f);  dg = dc~ i (1 - g^2);  do = dh tc o (1 - o)
/// dc  = dc~ f                                   (the cell before's gradient)
/// ```
pub(crate) struct LstmGradRow<'s, T> {
    /// The state's gradient carried from the step after, and the layer output's.
    pub dh: (&'s [T], &'s [T]),
    /// The cell's gradient: in, the new cell's; out, the cell before's.
    pub dc: &'s mut [T],
    /// The activated gates i, f, g, o and the new cell's tanh, from the trace.
    pub gates: [&'s [T]; 4],
    pub tc: &'s [T],
    /// The cell before the step.
    pub c_prev: &'s [T],
    /// The gates' pre-activation gradients.
    pub dgates: [&'s mut [T]; 4],
}

/// The backward formula element by element, for the element types without a vectorized
/// version.
pub(super) fn lstm_grad_row_scalar<T: Real>(row: LstmGradRow<'_, T>) {
    let LstmGradRow {
        dh: (carried, dy),
        dc,
        gates: [i, f, g, o],
        tc,
        c_prev,
        dgates,
    } = row;
    let one = T::one();
    for j in 0..dc.len() {
        let dh = carried[j] + dy[j];
        let dct = dc[j] + dh * o[j] * (one - tc[j] * tc[j]);
        let ds = [
            dct * g[j] * i[j] * (one - i[j]),
            dct * c_prev[j] * f[j] * (one - f[j]),
            dct * i[j] * (one - g[j] * g[j]),
            dh * tc[j] * o[j] * (one - o[j]),
        ];
        for (q, d) in ds.into_iter().enumerate() {
            dgates[q][j] = d;
        }
        dc[j] = dct * f[j];
    }
}

/// The backward formula a vector at a time, operation for operation as the scalar one.
impl SimdOp for LstmGradRow<'_, f32> {
    type Output = ();

    #[inline(always)]
    fn eval<I: Isa>(self, isa: I) {
        let ops = isa.f32();
        let LstmGradRow {
            dh: (carried, dy),
            dc,
            gates,
            tc,
            c_prev,
            dgates,
        } = self;
        let w = dc.len();
        let lanes = ops.len();
        let all_there = [carried, dy, tc, c_prev]
            .iter()
            .chain(&gates)
            .all(|s| s.len() == w)
            && dgates.iter().all(|s| s.len() == w);
        assert!(
            all_there,
            "LSTM gradient row: every run must hold {w} hidden units"
        );
        let dgates = dgates.map(|s| s.as_mut_ptr());
        let dc = dc.as_mut_ptr();
        for j in (0..w).step_by(lanes) {
            let at = Lanes::new(ops, w, j);
            let one = ops.one();
            // SAFETY: as in the forward row.
            unsafe {
                let dh = ops.add(at.load(carried.as_ptr()), at.load(dy.as_ptr()));
                let (i, f) = (at.load(gates[0].as_ptr()), at.load(gates[1].as_ptr()));
                let (g, o) = (at.load(gates[2].as_ptr()), at.load(gates[3].as_ptr()));
                let tc = at.load(tc.as_ptr());
                let dct = ops.add(
                    at.load(dc),
                    ops.mul(ops.mul(dh, o), ops.sub(one, ops.mul(tc, tc))),
                );
                let ds = [
                    ops.mul(ops.mul(ops.mul(dct, g), i), ops.sub(one, i)),
                    ops.mul(
                        ops.mul(ops.mul(dct, at.load(c_prev.as_ptr())), f),
                        ops.sub(one, f),
                    ),
                    ops.mul(ops.mul(dct, i), ops.sub(one, ops.mul(g, g))),
                    ops.mul(ops.mul(ops.mul(dh, tc), o), ops.sub(one, o)),
                ];
                for (q, d) in ds.into_iter().enumerate() {
                    at.store(d, dgates[q]);
                }
                at.store(ops.mul(dct, f), dc);
            }
        }
    }
}

/// Lanes `j..` of runs `w` long, a vector's worth, under a mask that keeps those inside the
/// runs: both rows' loads and stores. (Methods inlined always, not closures: a closure is a
/// function of its own, compiled without the vector features `eval` is inlined under.)
#[derive(Clone, Copy)]
struct Lanes<O: NumOps<f32>> {
    ops: O,
    mask: <O::Simd as Simd>::Mask,
    j: usize,
}

impl<O: NumOps<f32>> Lanes<O> {
    #[inline(always)]
    fn new(ops: O, w: usize, j: usize) -> Self {
        let mask = ops.first_n_mask((w - j).min(ops.len()));
        Lanes { ops, mask, j }
    }

    /// The same lanes counted from `j0` (at most `j`): for a buffer that holds a run's
    /// elements from `j0` on.
    #[inline(always)]
    fn from(self, j0: usize) -> Self {
        Lanes {
            j: self.j - j0,
            ..self
        }
    }

    /// # Safety
    /// The run at `p` holds the lanes the mask keeps.
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> O::Simd {
        // SAFETY: the contract; masked-off lanes are not read.
        unsafe { self.ops.load_ptr_mask(p.add(self.j), self.mask) }
    }

    /// # Safety
    /// The run at `p` holds the lanes the mask keeps, and nothing else reads or writes them
    /// meanwhile.
    #[inline(always)]
    unsafe fn store(self, v: O::Simd, p: *mut f32) {
        // SAFETY: the contract; masked-off lanes are not written.
        unsafe { self.ops.store_ptr_mask(v, p.add(self.j), self.mask) }
    }
}
