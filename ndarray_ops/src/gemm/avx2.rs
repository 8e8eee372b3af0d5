//! The AVX2 micro-kernel, for x86-64 CPUs without AVX-512: the same 12 x 32 tile of `c` as
//! [`super::avx512`], computed as up to four blocks of at most 6 x 16.
//!
//! ```text
//! for each group of at most 6 rows of the tile (4 where that wastes fewer, see `groups`):
//!     for each half of the tile's columns (16, two 8-lane registers; one where nr <= 16):
//!         over the whole depth: load the half's row of b (2 registers), broadcast each of
//!         the group's values of a, one FMA per register: 12 accumulators, 15 of the 16
//!         registers in use, so the two FMA units set the pace
//!         store the block
//! ```
//!
//! Each block runs the depth from the first step to the last, so every element of `c` is
//! summed in the order the AVX-512 kernel sums it, with the same fused multiply-adds: the two
//! kernels give the same bits. A `b` strip read where it lies is packed by the first group's
//! two blocks (each stores its half of every step); the second group reads the packed strip.

use std::arch::x86_64::*;

use super::lanes::{accumulate, prefetch_tile, Lanes};
use super::{Mat, Strip, NR};

/// The AVX2 register: 8 floats.
pub(super) struct Avx2;

impl Lanes for Avx2 {
    type V = __m256;
    const LANES: usize = 8;
    /// A step here takes half as long as with AVX-512, so twice as many steps ahead are the
    /// same time ahead (on 64 x 576 x 3136, one core of a Zen 3: 8 steps 69-70 GFLOP/s, 16 to
    /// 64 steps 72-75).
    const AHEAD: usize = 16;
    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: the trait's contract.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        // SAFETY: the trait's contract.
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
}

/// Columns of one block: two 8-lane registers.
const HALF: usize = NR / 2;

/// `c[..mr, ..nr] = a x b` (or `+=` with `add`): the contract of [`super::avx512::kernel`]
/// with `M == MR`.
///
/// # Safety
/// The CPU has AVX2 and FMA; the rest as [`super::avx512::kernel`].
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn kernel(
    kc: usize,
    (a, ars, acs): (*const f32, isize, isize),
    b: Strip,
    c: Mat<*mut f32>,
    mr: usize,
    nr: usize,
    add: bool,
) {
    // SAFETY: the contract; compiled with AVX2 and FMA.
    unsafe { prefetch_tile(c, mr, nr) };
    let (rows, count) = groups(mr);
    let mut b = b;
    for g in 0..count {
        let first = g * rows;
        let mine = rows.min(mr - first);
        let a_g = match acs {
            1 => a.wrapping_offset(first as isize * ars),
            _ => a.wrapping_add(first),
        };
        for h in 0..nr.div_ceil(HALF) {
            let half = Strip {
                src: b.src.wrapping_add(h * HALF),
                stride: b.stride,
                fill: b.fill.map(|f| f.wrapping_add(h * HALF)),
            };
            let cols = HALF.min(nr - h * HALF);
            let at = c.at(first, h * HALF);
            // SAFETY: the group's `mine` rows of `a` and the half's columns of the strip and
            // of `c` lie inside the caller's (the contract); the CPU has AVX2 and FMA.
            unsafe {
                match rows {
                    4 => block::<4>(kc, (a_g, ars, acs), half, at, (mine, cols), add),
                    _ => block::<6>(kc, (a_g, ars, acs), half, at, (mine, cols), add),
                }
            }
        }
        if let Some(packed) = b.fill {
            // Both halves of the strip are packed now: the other group reads them there.
            b = Strip::packed(packed.cast_const());
        }
    }
}

/// Rows per group and groups for a tile of `mr` rows: groups of 6 (12 accumulators), or of 4
/// where 6 would compute rows past `mr` that 4 do not (a last strip of 4, 7 or 8 rows).
fn groups(mr: usize) -> (usize, usize) {
    match mr {
        0..=4 => (4, 1),
        5..=6 => (6, 1),
        7..=8 => (4, 2),
        _ => (6, 2),
    }
}

/// One block: rows `..mr` (`mr <= R`) and columns `..nr` (`nr <= 16`) of `c` from `a`'s
/// rows (in place, `acs == 1`, rows past `mr` reading row `mr - 1` again; or packed, steps
/// [`super::MR`] apart) and a 16-wide half of a strip of `b`.
///
/// # Safety
/// The CPU has AVX2 and FMA; as [`kernel`] for the block's rows and columns.
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn block<const R: usize>(
    kc: usize,
    (a, ars, acs): (*const f32, isize, isize),
    b: Strip,
    c: Mat<*mut f32>,
    (mr, nr): (usize, usize),
    add: bool,
) {
    // SAFETY: the contract; compiled with AVX2 and FMA.
    let acc = unsafe { accumulate::<Avx2, R>(kc, (a, ars, acs), b, mr) };
    // SAFETY: the block's elements of `c` (the contract).
    unsafe { store(&acc, c, (mr, nr), add) };
}

/// A lane mask of the first `n` of 8 lanes (all lanes for `n >= 8`).
#[target_feature(enable = "avx2")]
#[inline]
fn lanes(n: usize) -> __m256i {
    let index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(8) as i32), index)
}

/// Writes (or with `add` adds) the block's `mr x nr` values into `c`.
///
/// # Safety
/// The CPU has AVX2; the block's `mr x nr` elements of `c` are valid to read and write.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn store<const R: usize>(
    acc: &[[__m256; 2]; R],
    c: Mat<*mut f32>,
    (mr, nr): (usize, usize),
    add: bool,
) {
    if c.cs == 1 {
        // Rows contiguous: a masked vector per 8 columns.
        let masks = [lanes(nr), lanes(nr.saturating_sub(8))];
        for (i, row) in acc.iter().enumerate().take(mr) {
            for (v, (&value, &mask)) in row.iter().zip(&masks).enumerate() {
                if v * 8 >= nr {
                    break;
                }
                let p = c.at(i, v * 8).ptr;
                // SAFETY: the mask covers the block's columns of row `i` only; masked-off
                // lanes are neither read nor written.
                unsafe {
                    let value = match add {
                        true => _mm256_add_ps(value, _mm256_maskload_ps(p, mask)),
                        false => value,
                    };
                    _mm256_maskstore_ps(p, mask, value);
                }
            }
        }
    } else if c.rs == 1 && c.cs > 0 {
        // Columns contiguous (a turned product's `c`): each 8 x 8 quarter transposed in
        // registers, then one masked vector per column.
        let mask = lanes(mr);
        for v in (0..2).take_while(|v| v * 8 < nr) {
            let rows: [__m256; 8] = std::array::from_fn(|i| {
                if i < R {
                    acc[i][v]
                } else {
                    _mm256_setzero_ps()
                }
            });
            let cols = transpose8(rows);
            for (j, &col) in cols.iter().enumerate().take(nr - v * 8) {
                let p = c.at(0, v * 8 + j).ptr;
                // SAFETY: the mask covers the block's `mr` rows of the column, contiguous;
                // masked-off lanes are neither read nor written.
                unsafe {
                    let col = match add {
                        true => _mm256_add_ps(col, _mm256_maskload_ps(p, mask)),
                        false => col,
                    };
                    _mm256_maskstore_ps(p, mask, col);
                }
            }
        }
    } else {
        // Neither axis contiguous: element by element.
        let mut tile = [[0f32; HALF]; R];
        for (row, out) in acc.iter().zip(tile.iter_mut()) {
            // SAFETY: `out` holds 16 floats.
            unsafe {
                _mm256_storeu_ps(out.as_mut_ptr(), row[0]);
                _mm256_storeu_ps(out.as_mut_ptr().add(8), row[1]);
            }
        }
        for (i, row) in tile.iter().enumerate().take(mr) {
            for (j, &v) in row.iter().enumerate().take(nr) {
                let e = c.at(i, j).ptr;
                // SAFETY: `(i, j)` is inside the block.
                unsafe { *e = if add { *e + v } else { v } };
            }
        }
    }
}

/// The 8 x 8 transpose of eight rows: pairs, then pairs of pairs within each 128-bit lane,
/// then the lanes of rows four apart.
#[target_feature(enable = "avx2")]
#[inline]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t: [__m256; 8] = std::array::from_fn(|i| match i % 2 {
        0 => _mm256_unpacklo_ps(r[i], r[i + 1]),
        _ => _mm256_unpackhi_ps(r[i - 1], r[i]),
    });
    let mut q = [_mm256_setzero_ps(); 8];
    for g in 0..2 {
        let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
        q[4 * g] = _mm256_shuffle_ps::<0x44>(a, c);
        q[4 * g + 1] = _mm256_shuffle_ps::<0xEE>(a, c);
        q[4 * g + 2] = _mm256_shuffle_ps::<0x44>(b, d);
        q[4 * g + 3] = _mm256_shuffle_ps::<0xEE>(b, d);
    }
    std::array::from_fn(|j| match j < 4 {
        true => _mm256_permute2f128_ps::<0x20>(q[j], q[j + 4]),
        false => _mm256_permute2f128_ps::<0x31>(q[j - 4], q[j]),
    })
}

/// [`super::avx512::transpose16`] in four 8 x 8 quarters.
///
/// # Safety
/// The CPU has AVX2; the 16 rows of 16 floats at `src` are valid to read and those at `dst`
/// valid to write.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn transpose16(
    src: *const f32,
    src_stride: usize,
    dst: *mut f32,
    dst_stride: usize,
) {
    for bi in 0..2 {
        for bj in 0..2 {
            // SAFETY: rows `8 bi..` and columns `8 bj..` of the source, rows `8 bj..` and
            // columns `8 bi..` of the destination (the contract).
            unsafe {
                let rows: [__m256; 8] = std::array::from_fn(|i| {
                    _mm256_loadu_ps(src.add((8 * bi + i) * src_stride + 8 * bj))
                });
                for (j, col) in transpose8(rows).iter().enumerate() {
                    _mm256_storeu_ps(dst.add((8 * bj + j) * dst_stride + 8 * bi), *col);
                }
            }
        }
    }
}
