//! The AVX-512 micro-kernel: a 12 x 32 tile of `c` held in 24 registers over a depth block
//! (4 or 8 rows for a ragged last strip of `a`, so that its missing rows cost nothing).

use std::arch::x86_64::*;

use super::lanes::{accumulate, prefetch_tile, Lanes};
use super::{Mat, Offset, Strip, NR};

/// The AVX-512 register: 16 floats.
pub(super) struct Avx512;

impl Lanes for Avx512 {
    type V = __m512;
    const LANES: usize = 16;
    /// Each step is a row of `b` of its own, on a page of its own (a 64 x 576 x 3136 product on
    /// one core: 133 -> 150 GFLOP/s; 4 and 12 measured the same).
    const AHEAD: usize = 8;
    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        // SAFETY: the trait's contract.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        // SAFETY: the trait's contract.
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
}

/// `c[..mr, ..nr] = a x b` (or `+=` with `add`) for `a` of `M` rows (`mr <= M <= MR`) and `b`
/// a strip of `kc` rows of [`NR`] values ([`Strip`]: packed, or read where it lies and packed
/// on the way). `a` is read where it lies when its rows are contiguous
/// (`acs == 1`: rows past `mr` read row `mr - 1` again), else from a packed strip (`ars == 1`,
/// `acs == MR`, rows past `mr` zeros). Rows and columns of the tile past `mr` and `nr` are
/// computed and not stored.
///
/// # Safety
/// The CPU has AVX-512F; the `mr x kc` elements of `a` at strides `ars`, `acs` (all [`super::MR`] rows
/// when `acs != 1`) and `kc` steps of `b` are valid to read (and to write at `b.fill`); the
/// tile's `mr x nr` elements of `c` are valid to read and write.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn kernel<const M: usize>(
    kc: usize,
    (a, ars, acs): (*const f32, isize, isize),
    b: Strip,
    c: Mat<*mut f32>,
    mr: usize,
    nr: usize,
    add: bool,
) {
    // SAFETY: the contract; compiled with AVX-512F.
    let acc = unsafe {
        prefetch_tile(c, mr, nr);
        accumulate::<Avx512, M>(kc, (a, ars, acs), b, mr)
    };
    if c.cs == 1 {
        // Rows of the tile are contiguous: masked loads and stores cover a ragged right edge.
        let lanes = |n: usize| -> __mmask16 { ((1u32 << n.min(16)) - 1) as __mmask16 };
        let (m0, m1) = (lanes(nr), lanes(nr.saturating_sub(16)));
        for (i, row) in acc.iter().enumerate() {
            if i >= mr {
                break;
            }
            let p = c.at(i, 0).ptr;
            let q = p.offset_by(16);
            let (mut v0, mut v1) = (row[0], row[1]);
            // SAFETY: the masks cover the tile's `nr` columns of row `i` only; masked-off lanes
            // are neither read nor written.
            unsafe {
                if add {
                    v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, p));
                    v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, q));
                }
                _mm512_mask_storeu_ps(p, m0, v0);
                _mm512_mask_storeu_ps(q, m1, v1);
            }
        }
    } else if c.rs == 1 && c.cs > 0 {
        // Columns of the tile are contiguous (a turned product's `c`): the tile is transposed
        // in registers, 16 columns at a time, and each column stored as one masked vector
        // (element by element, a turned LSTM step spent an eighth of its time storing).
        let mut tile = [[0f32; NR]; 16];
        for (row, out) in acc.iter().zip(tile.iter_mut()) {
            // SAFETY: `out` holds 32 floats.
            unsafe {
                _mm512_storeu_ps(out.as_mut_ptr(), row[0]);
                _mm512_storeu_ps(out.as_mut_ptr().add(16), row[1]);
            }
        }
        let rows = ((1u32 << mr) - 1) as __mmask16;
        let mut cols = [[0f32; 16]; 16];
        for j0 in (0..nr).step_by(16) {
            // SAFETY: the 16 rows of `tile` from column `j0` and the 16 of `cols` lie inside
            // them; the CPU has AVX-512F.
            unsafe {
                transpose16(
                    tile.as_ptr().cast::<f32>().add(j0),
                    NR,
                    cols.as_mut_ptr().cast::<f32>(),
                    16,
                )
            };
            for (j, col) in cols.iter().enumerate().take(nr - j0) {
                let p = c.at(0, j0 + j).ptr;
                // SAFETY: the mask covers the tile's `mr` rows of column `j0 + j`, which are
                // contiguous; masked-off lanes are neither read nor written.
                unsafe {
                    let mut v = _mm512_loadu_ps(col.as_ptr());
                    if add {
                        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(rows, p));
                    }
                    _mm512_mask_storeu_ps(p, rows, v);
                }
            }
        }
    } else {
        let mut tile = [[0f32; NR]; M];
        for (row, out) in acc.iter().zip(tile.iter_mut()) {
            // SAFETY: `out` holds 32 floats.
            unsafe {
                _mm512_storeu_ps(out.as_mut_ptr(), row[0]);
                _mm512_storeu_ps(out.as_mut_ptr().add(16), row[1]);
            }
        }
        // Neither axis of the tile is contiguous in `c`: element by element.
        let store = |i: usize, j: usize| {
            let e = c.at(i, j).ptr;
            let v = tile[i][j];
            // SAFETY: `(i, j)` is inside the tile.
            unsafe { *e = if add { *e + v } else { v } };
        };
        (0..mr).for_each(|i| (0..nr).for_each(|j| store(i, j)));
    }
}

/// Transposes a 16 x 16 block: row `i` of `src` (16 floats at `src + i * src_stride`) becomes
/// column `i` of `dst` (row `j` of `dst` at `dst + j * dst_stride`). Four rounds of shuffles
/// of whole registers, each pairing rows 1, 2, 4 and then 8 apart, where element-by-element
/// copies cost a load and a store each (the packs that turn columns into rows ran at a
/// third of the speed that way).
///
/// # Safety
/// The CPU has AVX-512F; the 16 rows of 16 floats at `src` are valid to read and those at `dst`
/// valid to write.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn transpose16(
    src: *const f32,
    src_stride: usize,
    dst: *mut f32,
    dst_stride: usize,
) {
    // SAFETY: the contract.
    let mut r: [__m512; 16] =
        std::array::from_fn(|i| unsafe { _mm512_loadu_ps(src.add(i * src_stride)) });
    let mut t = [_mm512_setzero_ps(); 16];
    // Interleave rows 2i and 2i+1 (element pairs).
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // Then pairs of pairs: quads of four rows' elements in each 128-bit lane.
    for i in 0..4 {
        let (a, b, c, d) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
        r[4 * i] = _mm512_shuffle_ps::<0x44>(a, c);
        r[4 * i + 1] = _mm512_shuffle_ps::<0xEE>(a, c);
        r[4 * i + 2] = _mm512_shuffle_ps::<0x44>(b, d);
        r[4 * i + 3] = _mm512_shuffle_ps::<0xEE>(b, d);
    }
    // Then 128-bit lanes of rows four apart, and of rows eight apart.
    for i in 0..2 {
        for j in 0..4 {
            let (a, b) = (r[8 * i + j], r[8 * i + j + 4]);
            t[8 * i + j] = _mm512_shuffle_f32x4::<0x88>(a, b);
            t[8 * i + j + 4] = _mm512_shuffle_f32x4::<0xDD>(a, b);
        }
    }
    for j in 0..8 {
        r[j] = _mm512_shuffle_f32x4::<0x88>(t[j], t[j + 8]);
        r[j + 8] = _mm512_shuffle_f32x4::<0xDD>(t[j], t[j + 8]);
    }
    for (j, v) in r.iter().enumerate() {
        // SAFETY: the contract.
        unsafe { _mm512_storeu_ps(dst.add(j * dst_stride), *v) };
    }
}
