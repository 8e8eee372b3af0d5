//! One level of Strassen's product, in Winograd's ordering, for products by a constant `b` (an
//! RNN's hidden weights, multiplied at every step): seven products of half the size in each
//! dimension instead of eight, an eighth fewer multiply-adds. `b`'s four sums are formed and
//! packed once, beside its three plain blocks; `a`'s four sums at each product.
//!
//! ```text
//! a = [a11 a12; a21 a22] in blocks of m/2 x k/2, b = [b11 b12; b21 b22] in blocks of k/2 x n/2
//! once:         t1 = b12 - b11   t2 = b22 - t1   t3 = b22 - b12   t4 = b21 - t2
//! each product: s1 = a21 + a22   s2 = s1 - a11   s3 = a11 - a21   s4 = a12 - s2
//!     u  = a11 b11               p = s1 t1
//!     c11 (+)= a12 b21;  c11 += u
//!     u += s2 t2;  u += p
//!     c12 (+)= s4 b22;   c12 += u
//!     u += s3 t3
//!     c21 (+)= a22 t4;   c21 += u - p
//!     c22 (+)= u
//! ```
//!
//! `u` and `p` (`m/2 x n/2` each) stay in the first-level cache on an RNN step's shapes; the
//! products into `c`'s blocks add to them in the kernel's epilogue. Each element of `c` is summed
//! in another order than the plain product's, so the two differ in the last bits. Its error is
//! bounded by the size of the whole rows of `a` and columns of `b` rather than by each element's
//! own terms, so an element much smaller than its neighbours can keep fewer correct digits than
//! in the plain product.
//!
//! A two-layer LSTM of 256 units at batch 32: its forward pass 11.35 -> 10.85 ms on two Zen 4
//! cores. Its backward products (depth 1024, 128 columns a unit) measured no faster split, and
//! stay plain.

use std::cell::RefCell;

use super::{serial, Aligned, Batches, Epilogue, Mat, Packed};

thread_local! {
    /// Each thread's buffers for `a`'s four sums, `u` and `p`, kept between products.
    static SCRATCH: RefCell<Aligned> = RefCell::new(Aligned::default());
}

/// `b` (`k x n`) split for [`Strassen::product`]: its blocks `b11`, `b21`, `b22` and sums `t1`,
/// `t2`, `t3`, `t4`, each packed.
pub(crate) struct Strassen {
    parts: [Packed; 7],
    k: usize,
    n: usize,
}

/// The parts' order in [`Strassen::parts`].
const B11: usize = 0;
const B21: usize = 1;
const B22: usize = 2;
const T1: usize = 3;
const T2: usize = 4;
const T3: usize = 5;
const T4: usize = 6;

impl Strassen {
    /// Whether an `m x k x n` product pays for the split: even sizes, and halves that keep
    /// the kernel's tiles whole and its depth loop long (`a`'s sums and the passes over `u`
    /// cost about `1/k` of the product's time per element).
    pub(crate) fn fits(m: usize, k: usize, n: usize) -> bool {
        m.is_multiple_of(2)
            && k.is_multiple_of(2)
            && n.is_multiple_of(2 * super::NR)
            && m >= 16
            && k >= 256
    }

    /// Splits and packs the `k x n` matrix `b` (even sizes).
    ///
    /// # Safety
    /// Every element of `b`'s `k x n` block is valid to read.
    pub(crate) unsafe fn new(k: usize, n: usize, b: Mat<*const f32>) -> Self {
        assert!(
            k.is_multiple_of(2) && n.is_multiple_of(2),
            "Strassen's split needs even sizes, not {k}x{n}"
        );
        let (k2, n2) = (k / 2, n / 2);
        let at = |i: usize, j: usize| b.at(i * k2, j * n2);
        // SAFETY: every block is inside `b` (the contract).
        let get = |blk: Mat<*const f32>, i: usize, j: usize| unsafe { *blk.at(i, j).ptr };
        let (b11, b12, b21, b22) = (at(0, 0), at(0, 1), at(1, 0), at(1, 1));
        let mut sums = vec![[0.0f32; 4]; k2 * n2];
        for i in 0..k2 {
            for j in 0..n2 {
                let t1 = get(b12, i, j) - get(b11, i, j);
                let t2 = get(b22, i, j) - t1;
                let t3 = get(b22, i, j) - get(b12, i, j);
                let t4 = get(b21, i, j) - t2;
                sums[i * n2 + j] = [t1, t2, t3, t4];
            }
        }
        let plain = |blk: Mat<*const f32>| {
            // SAFETY: a `k2 x n2` block inside `b`.
            unsafe { Packed::new(k2, n2, blk) }
        };
        let sum = |s: usize| {
            let base = sums.as_ptr().cast::<f32>().wrapping_add(s);
            let view = Mat {
                ptr: base,
                rs: (4 * n2) as isize,
                cs: 4,
            };
            // SAFETY: the `k2 x n2` values of sum `s` inside `sums`.
            unsafe { Packed::new(k2, n2, view) }
        };
        Strassen {
            parts: [
                plain(b11),
                plain(b21),
                plain(b22),
                sum(0),
                sum(1),
                sum(2),
                sum(3),
            ],
            k,
            n,
        }
    }

    /// Rows (depth) and columns of `b`.
    pub(crate) fn dim(&self) -> (usize, usize) {
        (self.k, self.n)
    }

    /// [`Strassen::product`] cut by rows into one part per thread of the pool (each part's
    /// rows even; few rows run on the calling thread alone).
    ///
    /// # Safety
    /// As [`Strassen::product`].
    pub(crate) unsafe fn product_wide(
        &self,
        m: usize,
        a: Mat<*const f32>,
        c: Mat<*mut f32>,
        add: bool,
    ) {
        let threads = match m.saturating_mul(self.k).saturating_mul(self.n) < super::THREAD_WORK {
            true => 1,
            false => rayon::current_num_threads().max(1),
        };
        let rows = m.div_ceil(threads).next_multiple_of(2);
        let part = move |i0: usize| {
            // SAFETY: rows `i0..` of `a` and `c`, this part's alone; the rest as the contract.
            unsafe { self.product(rows.min(m - i0), a.at(i0, 0), c.at(i0, 0), add) }
        };
        if rows >= m {
            return part(0);
        }
        rayon::scope(|s| {
            for i0 in (rows..m).step_by(rows) {
                s.spawn(move |_| part(i0));
            }
            part(0);
        });
    }

    /// `c = a b`, or with `add` `c += a b`, on the calling thread, for `a` of `m` (even) rows.
    ///
    /// # Safety
    /// [`super::available`] is true; `a`'s `m x k` elements are valid to read and `c`'s `m x n`
    /// to read and write, at their strides, with contiguous rows (`cs == 1`), `c` apart from
    /// `a` and no two of its elements at one address.
    pub(crate) unsafe fn product(&self, m: usize, a: Mat<*const f32>, c: Mat<*mut f32>, add: bool) {
        assert!(
            m.is_multiple_of(2) && a.cs == 1 && c.cs == 1,
            "Strassen's split needs an even number of rows ({m}) and contiguous rows"
        );
        let (m2, k2, n2) = (m / 2, self.k / 2, self.n / 2);
        if m2 == 0 || k2 == 0 || n2 == 0 {
            return;
        }
        let ab = |i: usize, j: usize| a.at(i * m2, j * k2);
        let cb = |i: usize, j: usize| c.at(i * m2, j * n2);
        let (a11, a12, a22) = (ab(0, 0), ab(0, 1), ab(1, 1));
        SCRATCH.with_borrow_mut(|buf| {
            let (sk, un) = (m2 * k2, m2 * n2);
            let buf = buf.slice(4 * sk + 2 * un);
            let (s, rest) = buf.split_at_mut(4 * sk);
            let (u, p) = rest.split_at_mut(un);
            // SAFETY: the four blocks of `a` (the contract); `s` holds four of their size.
            unsafe { sums(m2, k2, [ab(0, 0), ab(0, 1), ab(1, 0), ab(1, 1)], s) };
            let sum = |i: usize| Mat::row_major(s[i * sk..].as_ptr(), k2);
            let (s1, s2, s3, s4) = (sum(0), sum(1), sum(2), sum(3));
            let um = Mat::row_major(u.as_mut_ptr(), n2);
            let pm = Mat::row_major(p.as_mut_ptr(), n2);
            let mul = |x: Mat<*const f32>, part: usize, beta: f32, out: Mat<*mut f32>| {
                // A few rows are cut into calls of equal strips (16 as 8 + 8, not the
                // kernel's 12 + 4, whose 4-row tiles run at half its rate).
                let calls = match m2 <= 2 * super::MR {
                    true => m2.div_ceil(super::MR),
                    false => 1,
                };
                let rows = m2.div_ceil(calls).next_multiple_of(4);
                for i0 in (0..m2).step_by(rows) {
                    // SAFETY: rows `i0..` of an `m2 x k2` block (of `a` or of the sums) by a
                    // `k2 x n2` part into an `m2 x n2` block (of `c` or of the scratch), apart
                    // from both (the contract).
                    unsafe {
                        serial(
                            (i0, rows.min(m2 - i0)),
                            k2,
                            (0, n2),
                            &x,
                            &self.parts[part],
                            (beta, Batches::whole(out)),
                            &Epilogue::default(),
                        )
                    }
                }
            };
            // Each block of `c` is first met by a product into it, whose tiles fetch its rows
            // ahead, then by the merge, which finds them cached; `c22`, which no product
            // writes, is fetched while `u` takes its last product.
            let beta = if add { 1.0 } else { 0.0 };
            let merge_into = |c: Mat<*mut f32>, p: Option<Mat<*mut f32>>, add: bool| {
                // SAFETY: `u`, `p` and each block of `c` hold `m2 x n2` elements at their
                // strides, rows contiguous, `c` apart from `u` and `p`.
                unsafe { merge(m2, n2, c, um, p, add) }
            };
            mul(a11, B11, 0.0, um);
            mul(s1, T1, 0.0, pm);
            mul(a12, B21, beta, cb(0, 0));
            merge_into(cb(0, 0), None, true);
            mul(s2, T2, 1.0, um);
            // SAFETY: `u` and `p`, `m2 x n2` each, apart.
            unsafe { merge(m2, n2, um, pm, None, true) };
            mul(s4, B22, beta, cb(0, 1));
            merge_into(cb(0, 1), None, true);
            fetch(m2, n2, cb(1, 1));
            mul(s3, T3, 1.0, um);
            mul(a22, T4, beta, cb(1, 0));
            merge_into(cb(1, 0), Some(pm), true);
            merge_into(cb(1, 1), None, add);
        });
    }
}

/// Asks for the `m x n` block `c`'s rows (contiguous) to be brought into the cache.
fn fetch(m: usize, n: usize, c: Mat<*mut f32>) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    for i in 0..m {
        for j in (0..n).step_by(16) {
            // SAFETY: a prefetch reads nothing and faults on no address.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    c.at(i, j).ptr.cast_const().cast::<i8>(),
                )
            };
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = (m, n, c);
}

/// `unsafe fn $name(args)` calling the `#[inline(always)]` function `$body` with them,
/// compiled for the widest vectors the products use here (one copy per instruction set), so
/// that its loops are vectorized with them.
macro_rules! vectorized {
    ($(#[$doc:meta])* $name:ident = $body:ident($($arg:ident: $ty:ty),*)) => {
        $(#[$doc])*
        unsafe fn $name($($arg: $ty),*) {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($arg: $ty),*) {
                    // SAFETY: the caller's contract.
                    unsafe { $body($($arg),*) }
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) {
                    // SAFETY: the caller's contract.
                    unsafe { $body($($arg),*) }
                }
                match super::isa() {
                    // SAFETY: the CPU has the instruction set `isa` names.
                    Some(super::Isa::Avx512) => return unsafe { avx512($($arg),*) },
                    // SAFETY: as above.
                    Some(super::Isa::Avx2) => return unsafe { avx2($($arg),*) },
                    None => {}
                }
            }
            // SAFETY: the caller's contract.
            unsafe { $body($($arg),*) }
        }
    };
}

vectorized! {
    /// `a`'s four sums, `s1..s4` as above, each `m x k` row-major one after the other in `out`,
    /// from its blocks `[a11, a12, a21, a22]` (rows contiguous).
    ///
    /// # Safety
    /// Each block's `m x k` elements are valid to read; `out` holds `4 m k` floats.
    sums = sum_rows(m: usize, k: usize, blocks: [Mat<*const f32>; 4], out: &mut [f32])
}

vectorized! {
    /// `c = u - p`, or with `add` `c += u - p` (`u` alone without `p`), over `m x n` blocks
    /// with contiguous rows.
    ///
    /// # Safety
    /// The three blocks' elements are valid (to read; `c`'s to write), `c` apart from the
    /// others.
    merge = merge_rows(
        m: usize,
        n: usize,
        c: Mat<*mut f32>,
        u: Mat<*mut f32>,
        p: Option<Mat<*mut f32>>,
        add: bool
    )
}

/// [`sums`]' loops, inlined into the vectorized copies.
///
/// # Safety
/// As [`sums`].
#[inline(always)]
unsafe fn sum_rows(m: usize, k: usize, blocks: [Mat<*const f32>; 4], out: &mut [f32]) {
    let [b11, b12, b21, b22] = blocks;
    let (s1s, rest) = out.split_at_mut(m * k);
    let (s2s, rest) = rest.split_at_mut(m * k);
    let (s3s, s4s) = rest.split_at_mut(m * k);
    for i in 0..m {
        // SAFETY: row `i` of each block, `k` contiguous floats (the contract).
        let (r11, r12, r21, r22) = unsafe {
            (
                std::slice::from_raw_parts(b11.at(i, 0).ptr, k),
                std::slice::from_raw_parts(b12.at(i, 0).ptr, k),
                std::slice::from_raw_parts(b21.at(i, 0).ptr, k),
                std::slice::from_raw_parts(b22.at(i, 0).ptr, k),
            )
        };
        let row = i * k..(i + 1) * k;
        let (o1, o2) = (&mut s1s[row.clone()], &mut s2s[row.clone()]);
        let (o3, o4) = (&mut s3s[row.clone()], &mut s4s[row]);
        for j in 0..k {
            let s1 = r21[j] + r22[j];
            let s2 = s1 - r11[j];
            o1[j] = s1;
            o2[j] = s2;
            o3[j] = r11[j] - r21[j];
            o4[j] = r12[j] - s2;
        }
    }
}

/// [`merge`]'s loops, inlined into the vectorized copies.
///
/// # Safety
/// As [`merge`].
#[inline(always)]
unsafe fn merge_rows(
    m: usize,
    n: usize,
    c: Mat<*mut f32>,
    u: Mat<*mut f32>,
    p: Option<Mat<*mut f32>>,
    add: bool,
) {
    for i in 0..m {
        // SAFETY: row `i` of each block: `n` contiguous elements (the contract).
        let (cr, ur) = unsafe {
            (
                std::slice::from_raw_parts_mut(c.at(i, 0).ptr, n),
                std::slice::from_raw_parts(u.at(i, 0).ptr.cast_const(), n),
            )
        };
        match p {
            None if add => {
                for j in 0..n {
                    cr[j] += ur[j];
                }
            }
            None => cr.copy_from_slice(ur),
            Some(p) => {
                // SAFETY: as above.
                let pr = unsafe { std::slice::from_raw_parts(p.at(i, 0).ptr.cast_const(), n) };
                for j in 0..n {
                    cr[j] = if add {
                        cr[j] + (ur[j] - pr[j])
                    } else {
                        ur[j] - pr[j]
                    };
                }
            }
        }
    }
}
