//! The depth loop both micro-kernels run, generic over the instruction set's vector register.
//!
//! ```text
//! for each step p of depth:
//!     load the step's row of b (two registers: 2 x LANES columns), copying it into the packed
//!         strip on the way when the strip is read where b lies (and asking for the row AHEAD
//!         steps on, which the hardware's prefetchers do not follow)
//!     for each of the R rows of the tile: broadcast a(p, row), one FMA per register
//! ```
//!
//! Each instruction set's file implements [`Lanes`] with its intrinsics and calls [`accumulate`]
//! from a function compiled for that set (`#[target_feature]`). Everything here is
//! `#[inline(always)]`, so it is compiled into that caller, with its features: the generic code
//! costs nothing over writing it out per set, and both sets sum every element in the same order.

use super::{Mat, Strip, MR, NR};

/// One vector register of an instruction set, and the operations the depth loop needs.
///
/// Each function is unsafe: it may be called only from code compiled with the set's features,
/// on a CPU that has them (and the pointers of `load` and `store` are valid for
/// [`Lanes::LANES`] floats).
pub(super) trait Lanes {
    /// The register.
    type V: Copy;
    /// Floats per register.
    const LANES: usize;
    /// Steps of depth ahead that a strip read where `b` lies is prefetched.
    const AHEAD: usize;
    /// A register of zeros.
    unsafe fn zero() -> Self::V;
    /// `LANES` floats from `p`.
    unsafe fn load(p: *const f32) -> Self::V;
    /// `v` to `LANES` floats at `p`.
    unsafe fn store(p: *mut f32, v: Self::V);
    /// `x` in every lane.
    unsafe fn splat(x: f32) -> Self::V;
    /// `a * b + c`, fused.
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
}

/// Asks for the tile's rows (or, for a turned `c`, its columns) before the depth loop, so they
/// arrive while it runs instead of stalling the stores after it (1024^3 with AVX-512: 62 -> 100
/// GFLOP/s on one core). Rows are 32 floats: two lines.
///
/// # Safety
/// As the kernels' contract for `c` (prefetches of addresses outside it are harmless, but the
/// addresses are computed inside it).
#[inline(always)]
pub(super) unsafe fn prefetch_tile(c: Mat<*mut f32>, mr: usize, nr: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        if c.rs == 1 {
            for j in 0..nr {
                _mm_prefetch::<_MM_HINT_T0>(c.at(0, j).ptr as *const i8);
            }
        } else {
            for i in 0..mr {
                _mm_prefetch::<_MM_HINT_T0>(c.at(i, 0).ptr as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(c.at(i, 16).ptr as *const i8);
            }
        }
    }
}

/// The `kc` steps of depth for `R` rows of `a` (`mr <= R` of them real) and two registers'
/// columns of the strip `b`. `a` is read where it lies when its rows are contiguous (`acs ==
/// 1`: rows past `mr` read row `mr - 1` again, so nothing past `a` is read), else from a
/// packed strip (steps [`MR`] apart).
///
/// # Safety
/// Called from code compiled with `L`'s features; the rows of `a` and `kc` steps of `b` are
/// valid to read (and to write at `b.fill`), as the kernels' contract.
#[inline(always)]
pub(super) unsafe fn accumulate<L: Lanes, const R: usize>(
    kc: usize,
    (a, ars, acs): (*const f32, isize, isize),
    b: Strip,
    mr: usize,
) -> [[L::V; 2]; R] {
    // SAFETY: compiled with `L`'s features (the contract).
    let mut acc = [[unsafe { L::zero() }; 2]; R];
    if acs == 1 {
        let rows: [*const f32; R] =
            std::array::from_fn(|i| a.wrapping_offset(i.min(mr - 1) as isize * ars));
        // SAFETY: element `p` of each row is inside `a`; the rest as the contract.
        unsafe { depth::<L, R>(&mut acc, kc, b, |p, i| *rows[i].add(p)) };
    } else {
        // SAFETY: step `p` of the packed strip of `a`; the rest as the contract.
        unsafe { depth::<L, R>(&mut acc, kc, b, |p, i| *a.add(p * MR + i)) };
    }
    acc
}

/// The depth loop into `acc`, `a(p, i)` giving row `i`'s value at step `p`; where the strip is
/// filled on the way, each row of `b` is stored into it as it is loaded (two stores beside the
/// FMAs: the copy costs nothing the FMA units wait for).
///
/// # Safety
/// As [`accumulate`].
#[inline(always)]
unsafe fn depth<L: Lanes, const R: usize>(
    acc: &mut [[L::V; 2]; R],
    kc: usize,
    b: Strip,
    a: impl Fn(usize, usize) -> f32,
) {
    match b.fill {
        None => {
            for p in 0..kc {
                // SAFETY: step `p` of the strip (the contract).
                unsafe {
                    let row = b.src.add(p * b.stride);
                    let pair = [L::load(row), L::load(row.add(L::LANES))];
                    step::<L, R>(acc, pair, |i| a(p, i));
                }
            }
        }
        Some(fill) => {
            for p in 0..kc {
                // SAFETY: step `p` of the strip and of the packed strip being filled (the
                // contract).
                unsafe {
                    let row = b.src.add(p * b.stride);
                    #[cfg(target_arch = "x86_64")]
                    {
                        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                        let ahead = row.wrapping_add(L::AHEAD * b.stride) as *const i8;
                        _mm_prefetch::<_MM_HINT_T0>(ahead);
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
                    }
                    let pair = [L::load(row), L::load(row.add(L::LANES))];
                    L::store(fill.add(p * NR), pair[0]);
                    L::store(fill.add(p * NR + L::LANES), pair[1]);
                    step::<L, R>(acc, pair, |i| a(p, i));
                }
            }
        }
    }
}

/// One step of depth: a row of `b` in two registers, each of the `R` values `a(i)` broadcast,
/// `2 R` FMAs. The loop has a constant trip count and is unrolled, so `acc` stays in registers.
///
/// # Safety
/// Called from code compiled with `L`'s features.
#[inline(always)]
unsafe fn step<L: Lanes, const R: usize>(
    acc: &mut [[L::V; 2]; R],
    [b0, b1]: [L::V; 2],
    a: impl Fn(usize) -> f32,
) {
    for (i, row) in acc.iter_mut().enumerate() {
        // SAFETY: compiled with `L`'s features (the contract).
        unsafe {
            let ai = L::splat(a(i));
            row[0] = L::fma(ai, b0, row[0]);
            row[1] = L::fma(ai, b1, row[1]);
        }
    }
}
