//! One LSTM step of one sample over a run of hidden units, fused: the biases, the four gates'
//! activations, the new cell, its tanh and the new state in one pass through registers. As
//! separate passes (the biases, each activation over its block, the cell, the state, the
//! copies to the output and the next state) each went back to memory, and they took a sixth of
//! an LSTM's forward pass. The arithmetic is the unfused formula's, operation for operation,
//! so both give the same bits:
//!
//! ```text
//! v_q = (x_q + bx_q) + (h_q + bh_q)            for the gates q = i, f, g, o
//! i, f, o = sigmoid(v_i, v_f, v_o);  g = tanh(v_g)
//! c' = f c + i g;  h' = o tanh(c')
//! ```

use rten_simd::ops::NumOps;
use rten_simd::{Isa, SimdOp, SimdUnaryOp};
use rten_vecmath::{Sigmoid, Tanh};

use super::recurrence::Real;

/// One sample's run of `w` hidden units at one step: what [`Real::lstm_row`] reads and writes.
pub(crate) struct LstmRow<'s, T> {
    /// The gates' hidden projections (`h_q` above), `w` each.
    pub hidden: [&'s [T]; 4],
    /// The gates' input projections (`x_q`, the trace's row); with `kept` they come back as
    /// the activated gates, which the backward pass reads.
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
        hidden,
        input,
        biases: (bx, bh),
        cell,
        state: (next, out),
        mut kept,
    } = row;
    let one = T::one();
    let sigmoid = |v: T| one / (one + (-v).exp());
    for j in 0..cell.len() {
        let v = |q: usize| (input[q][j] + bx[q][j]) + (hidden[q][j] + bh[q][j]);
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

/// The formula a vector at a time through `rten-vecmath`'s sigmoid and tanh (the functions the
/// unfused pass called over whole blocks), a masked vector for a ragged end.
impl SimdOp for LstmRow<'_, f32> {
    type Output = ();

    #[inline(always)]
    fn eval<I: Isa>(self, isa: I) {
        let ops = isa.f32();
        let LstmRow {
            hidden,
            input,
            biases: (bx, bh),
            cell,
            state: (next, out),
            kept,
        } = self;
        let w = cell.len();
        let lanes = ops.len();
        let all_there = hidden.iter().chain(&bx).chain(&bh).all(|s| s.len() == w)
            && input.iter().all(|s| s.len() == w)
            && next.len() == w
            && out.len() == w
            && kept.as_ref().is_none_or(|k| k.iter().all(|s| s.len() == w));
        assert!(all_there, "LSTM row: every run must hold {w} hidden units");
        let input = input.map(|s| s.as_mut_ptr());
        let kept = kept.map(|k| k.map(|s| s.as_mut_ptr()));
        let (cell, next, out) = (cell.as_mut_ptr(), next.as_mut_ptr(), out.as_mut_ptr());
        for j in (0..w).step_by(lanes) {
            let mask = ops.first_n_mask((w - j).min(lanes));
            // Macros, not closures: a closure is a function of its own, compiled without the
            // vector features `eval` is inlined under.
            macro_rules! load {
                ($p:expr) => {
                    // SAFETY: each run holds `w` elements (asserted above), so the lanes the
                    // mask keeps, `j..min(j + lanes, w)`, lie inside it; the others are not read.
                    unsafe { ops.load_ptr_mask($p.add(j), mask) }
                };
            }
            macro_rules! store {
                ($v:expr, $p:expr) => {
                    // SAFETY: as for `load`; nothing else borrows the written runs meanwhile
                    // (each came as a `&mut`).
                    unsafe { ops.store_ptr_mask($v, $p.add(j), mask) }
                };
            }
            let mut v = [ops.zero(); 4];
            for q in 0..4 {
                let x = ops.add(load!(input[q]), load!(bx[q].as_ptr()));
                v[q] = ops.add(x, ops.add(load!(hidden[q].as_ptr()), load!(bh[q].as_ptr())));
            }
            let i = Sigmoid::apply(isa, v[0]);
            let f = Sigmoid::apply(isa, v[1]);
            let g = Tanh::apply(isa, v[2]);
            let o = Sigmoid::apply(isa, v[3]);
            let c = ops.add(ops.mul(f, load!(cell)), ops.mul(i, g));
            let tc = Tanh::apply(isa, c);
            let h = ops.mul(o, tc);
            store!(c, cell);
            store!(h, next);
            store!(h, out);
            if let Some([kc, ktc]) = kept {
                for (q, a) in [i, f, g, o].into_iter().enumerate() {
                    store!(a, input[q]);
                }
                store!(c, kc);
                store!(tc, ktc);
            }
        }
    }
}
