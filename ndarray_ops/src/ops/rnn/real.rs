//! The element types the recurrence computes in (the gates' activations a slice at a time and,
//! for floats, the products on the crate's GEMM), and the matrix views of their buffers.

use super::cell::{lstm_grad_row_scalar, lstm_row_scalar, LstmGradRow, LstmRow};
use super::*;
use crate::gemm;

/// The kernels' element types: the gates compute in the data's own precision, a gate's
/// activation over a sample's whole slice at once (so that float slices go through the
/// vectorized functions).
pub(crate) trait Real: Element + num_traits::Float {
    /// `x = tanh(x)` for every element.
    fn tanh_all(xs: &mut [Self]);
    /// `x = 1 / (1 + e^-x)` for every element.
    fn sigmoid_all(xs: &mut [Self]);
    /// `b` packed for [`Real::gemm_packed`], where that runs.
    fn pack(_b: &ArrayView2<'_, Self>) -> Option<gemm::Packed> {
        None
    }
    /// Whether products run on [`Real::gemm_packed`], whose sum for an element of `c` is the
    /// same however many rows and columns the product has around it.
    fn packs() -> bool {
        false
    }
    /// Whether an `m x k x n` product runs on Strassen's split here ([`gemm::Strassen`]).
    fn splits(_m: usize, _k: usize, _n: usize) -> bool {
        false
    }
    /// `b` split and packed for [`Real::gemm_split`], where that runs.
    fn split(_b: &ArrayView2<'_, Self>) -> Option<gemm::Strassen> {
        None
    }
    /// `c = a b` (with `add`, `c += a b`) by Strassen's split of `b`, on the calling thread
    /// alone or (`wide`) on the pool's threads; false (nothing done) where it cannot run.
    fn gemm_split(
        _a: &ArrayView2<'_, Self>,
        _b: &gemm::Strassen,
        _c: &mut ArrayViewMut2<'_, Self>,
        (_add, _wide): (bool, bool),
    ) -> bool {
        false
    }
    /// One LSTM step of one sample over a run of hidden units ([`LstmRow`]).
    fn lstm_row(row: LstmRow<'_, Self>) {
        lstm_row_scalar(row);
    }
    /// One LSTM step's gradient of one sample over a run of hidden units ([`LstmGradRow`]).
    fn lstm_grad_row(row: LstmGradRow<'_, Self>) {
        lstm_grad_row_scalar(row);
    }
    /// `c = a b` (with `add`, `c += a b`) from `b` packed, on the calling thread alone or
    /// (`wide`) on the pool's threads; false (nothing done) where it cannot run.
    fn gemm_packed(
        _a: &ArrayView2<'_, Self>,
        _b: &gemm::Packed,
        _c: &mut ArrayViewMut2<'_, Self>,
        (_add, _wide): (bool, bool),
    ) -> bool {
        false
    }
}

/// Floats take the vectorized functions of [`crate::ops::vecmath`] (within 4 float steps of
/// the correctly rounded values; the `sigmoid`, `tanh` and `Activation` ops use the same ones). Per
/// element through libm, `expf` and the double `exp` that a float `tanh` needed to stay fast
/// took 10–15% of a two-layer LSTM's training step.
impl Real for f32 {
    fn tanh_all(xs: &mut [f32]) {
        Tanh.map_mut(xs);
    }

    fn sigmoid_all(xs: &mut [f32]) {
        Sigmoid.map_mut(xs);
    }

    fn lstm_row(row: LstmRow<'_, f32>) {
        row.dispatch();
    }

    fn lstm_grad_row(row: LstmGradRow<'_, f32>) {
        row.dispatch();
    }

    fn packs() -> bool {
        gemm::available()
    }

    fn pack(b: &ArrayView2<'_, f32>) -> Option<gemm::Packed> {
        if !gemm::available() {
            return None;
        }
        let (k, n) = b.dim();
        // SAFETY: the view's elements, at its strides; the GEMM runs here.
        Some(unsafe { gemm::Packed::new(k, n, at(b)) })
    }

    fn splits(m: usize, k: usize, n: usize) -> bool {
        gemm::available() && gemm::Strassen::fits(m, k, n)
    }

    fn split(b: &ArrayView2<'_, f32>) -> Option<gemm::Strassen> {
        let (k, n) = b.dim();
        if !Self::splits(16, k, n) {
            return None;
        }
        // SAFETY: the view's elements, at its strides; the GEMM runs here.
        Some(unsafe { gemm::Strassen::new(k, n, at(b)) })
    }

    fn gemm_split(
        a: &ArrayView2<'_, f32>,
        b: &gemm::Strassen,
        c: &mut ArrayViewMut2<'_, f32>,
        (add, wide): (bool, bool),
    ) -> bool {
        let ((m, k), n) = (a.dim(), b.dim().1);
        if !Self::splits(m, k, n)
            || b.dim().0 != k
            || c.dim() != (m, n)
            || a.strides()[1] != 1
            || c.strides()[1] != 1
        {
            return false;
        }
        let cm = at_mut(c);
        // SAFETY: the views' elements at their strides, rows contiguous (checked above); `c`
        // apart from `a` and `b`; the GEMM runs here.
        unsafe {
            match wide {
                true => b.product_wide(m, at(a), cm, add),
                false => b.product(m, at(a), cm, add),
            }
        };
        true
    }

    fn gemm_packed(
        a: &ArrayView2<'_, f32>,
        b: &gemm::Packed,
        c: &mut ArrayViewMut2<'_, f32>,
        (add, wide): (bool, bool),
    ) -> bool {
        let ((m, k), n) = (a.dim(), b.dim().1);
        if !gemm::available() || b.dim().0 != k || c.dim() != (m, n) {
            return false;
        }
        let (am, cm) = (at(a), at_mut(c));
        let beta = if add { 1.0 } else { 0.0 };
        // SAFETY: the views' elements at their strides (`c`'s own, apart from `a` and `b`);
        // the GEMM runs here (checked above).
        unsafe {
            match wide {
                true => gemm::sgemm_packing(m, k, n, &am, b, beta, gemm::Batches::whole(cm)),
                false => gemm::sgemm_serial(m, k, n, &am, b, beta, gemm::Batches::whole(cm)),
            }
        };
        true
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

/// The GEMM's view of `v`'s elements.
fn at(v: &ArrayView2<'_, f32>) -> gemm::Mat<*const f32> {
    let st = v.strides();
    gemm::Mat {
        ptr: v.as_ptr(),
        rs: st[0],
        cs: st[1],
    }
}

/// The GEMM's view of `v`'s elements, to write.
fn at_mut(v: &mut ArrayViewMut2<'_, f32>) -> gemm::Mat<*mut f32> {
    let (rs, cs) = (v.strides()[0], v.strides()[1]);
    gemm::Mat {
        ptr: v.as_mut_ptr(),
        rs,
        cs,
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

/// `acc += ` the column sums of the `acc.len()`-wide rows of `rows`.
pub(super) fn sum_rows<T: Element>(rows: &[T], acc: &mut [T]) {
    for row in rows.chunks_exact(acc.len()) {
        for (a, &v) in acc.iter_mut().zip(row) {
            *a = a.add(v);
        }
    }
}
