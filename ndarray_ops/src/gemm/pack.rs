//! Packing: the blocks of `a` and `b` laid out as the micro-kernel reads them (strips of
//! [`MR`] rows of `a`, of [`NR`] columns of `b`, step after step of depth), from row- or
//! column-major sources, and `b` kept packed across products ([`Packed`]).

use super::{depth_step, Batches, Mat, MR, NR};

/// Where the packing of `b` reads from.
pub(crate) trait Source: Sync {
    /// Packs the `kc x nc` block of `b` at row `p0`, column `j0` into strips of [`NR`]
    /// columns: strip `t` holds, for each step `p`, the row `b[p0 + p, j0 + t*NR ..][..NR]`,
    /// columns past the block's `nc` zeros.
    ///
    /// # Safety
    /// The block lies inside `b`; `out` holds `nc.div_ceil(NR) * NR * kc` floats.
    unsafe fn pack(&self, p0: usize, kc: usize, j0: usize, nc: usize, out: &mut [f32]);

    /// The same block already packed, when `b` is kept packed ([`Packed`]).
    fn packed(&self, _p0: usize, _kc: usize, _j0: usize, _nc: usize) -> Option<&[f32]> {
        None
    }

    /// `b` itself where its rows are contiguous: the kernel then packs each whole strip as it
    /// first reads it ([`super::Strip::fill`]) instead of in a pass of its own.
    fn rows(&self) -> Option<Mat<*const f32>> {
        None
    }
}

/// Elements of a matrix from which [`Packed::new`] packs on the pool's threads (an LSTM's
/// 256 x 1024 weights are twice as many).
const PACK_WIDE: usize = 1 << 17;

/// A `k x n` matrix `b` packed once for many products (an RNN's hidden weights, multiplied at
/// every step): per block of [`depth_step`] steps, the strips of all `n` columns, as
/// [`Source::pack`] lays them out, so a product reads its blocks in place.
pub(crate) struct Packed {
    data: Vec<f32>,
    /// Where the cache-line-aligned strips start in `data`.
    skip: usize,
    k: usize,
    n: usize,
}

impl Packed {
    /// Packs the `k x n` matrix `b`.
    ///
    /// # Safety
    /// Every element of `b`'s `k x n` block is valid to read.
    pub(crate) unsafe fn new(k: usize, n: usize, b: Mat<*const f32>) -> Self {
        let width = n.div_ceil(NR) * NR;
        let mut data = vec![0.0f32; width * k + 16];
        let skip = data.as_ptr().align_offset(64).min(15);
        let step = depth_step(k);
        // A large matrix is packed on the pool's threads, a run of whole strips each.
        let strips = n.div_ceil(NR);
        let parts = match k * n >= PACK_WIDE {
            true => rayon::current_num_threads().clamp(1, strips),
            false => 1,
        };
        let per = strips.div_ceil(parts).max(1) * NR;
        for pc in (0..k).step_by(step) {
            let kc = step.min(k - pc);
            let block = &mut data[skip + pc * width..skip + (pc + kc) * width];
            // Part `i`: the strips from column `i * per`.
            let pack = move |i: usize, part: &mut [f32]| {
                let j0 = i * per;
                // SAFETY: the part's rows and columns are inside `b` (the contract), and
                // `part` holds its strips.
                unsafe { pack_b(kc, per.min(n - j0), b.at(pc, j0), part) }
            };
            // One part stays on the calling thread: a scope entered from outside the pool
            // would hand it to a pool thread and wait.
            match parts {
                1 => pack(0, block),
                _ => rayon::scope(|s| {
                    for (i, part) in block.chunks_mut(per * kc).enumerate() {
                        s.spawn(move |_| pack(i, part));
                    }
                }),
            }
        }
        Packed { data, skip, k, n }
    }

    /// Rows (depth) and columns.
    pub(crate) fn dim(&self) -> (usize, usize) {
        (self.k, self.n)
    }

    /// The strips of the `kc x nc` block at `(p0, j0)`: `p0` starts a block of
    /// [`depth_step`] steps and `j0` a strip.
    fn block(&self, p0: usize, kc: usize, j0: usize, nc: usize) -> &[f32] {
        assert!(
            p0.is_multiple_of(depth_step(self.k))
                && j0.is_multiple_of(NR)
                && p0 + kc <= self.k
                && j0 + nc <= self.n,
            "packed block ({p0}, {j0}) of {kc}x{nc} is not one of a {}x{} matrix's",
            self.k,
            self.n
        );
        let at = self.skip + p0 * self.n.div_ceil(NR) * NR + j0 * kc;
        &self.data[at..at + nc.div_ceil(NR) * NR * kc]
    }
}

impl Source for Packed {
    unsafe fn pack(&self, p0: usize, kc: usize, j0: usize, nc: usize, out: &mut [f32]) {
        out.copy_from_slice(self.block(p0, kc, j0, nc));
    }

    fn packed(&self, p0: usize, kc: usize, j0: usize, nc: usize) -> Option<&[f32]> {
        Some(self.block(p0, kc, j0, nc))
    }
}

impl Source for Mat<*const f32> {
    unsafe fn pack(&self, p0: usize, kc: usize, j0: usize, nc: usize, out: &mut [f32]) {
        // SAFETY: the caller's contract.
        unsafe { pack_b(kc, nc, self.at(p0, j0), out) }
    }

    fn rows(&self) -> Option<Mat<*const f32>> {
        (self.cs == 1 && self.rs >= 0).then_some(*self)
    }
}

/// Where a product's `a` comes from: read where it lies (rows contiguous), or packed.
pub(crate) trait Rows: Sync {
    /// `a` itself, when the micro-kernel reads it in place (its rows contiguous).
    fn direct(&self) -> Option<Mat<*const f32>>;

    /// Packs the `mc x kc` block of `a` at row `i0`, column `p0` into strips of [`MR`] rows:
    /// strip `s` holds, for each step `p`, the column `a[i0 + s*MR ..][..MR, p0 + p]`, rows
    /// past the block's `mc` zeros.
    ///
    /// # Safety
    /// The block lies inside `a`; `out` holds `mc.div_ceil(MR) * MR * kc` floats.
    unsafe fn pack(&self, i0: usize, mc: usize, p0: usize, kc: usize, out: &mut [f32]);
}

impl Rows for Mat<*const f32> {
    fn direct(&self) -> Option<Mat<*const f32>> {
        // Rows of `a` that are contiguous are read where they lie: packing them would cost as
        // much as the products when `c` has few columns (512 x 4608 by 4608 x 49: 71 -> 141
        // GFLOP/s) and saved nothing measurable elsewhere.
        (self.cs == 1).then_some(*self)
    }

    unsafe fn pack(&self, i0: usize, mc: usize, p0: usize, kc: usize, out: &mut [f32]) {
        // SAFETY: the caller's contract.
        unsafe { pack_a(mc, kc, self.at(i0, p0), out) }
    }
}

impl Rows for Batches<*const f32> {
    fn direct(&self) -> Option<Mat<*const f32>> {
        (self.cols == usize::MAX)
            .then(|| self.mat.direct())
            .flatten()
    }

    unsafe fn pack(&self, i0: usize, mc: usize, p0: usize, kc: usize, out: &mut [f32]) {
        // The block's columns, batch by batch: each stretch is an ordinary block of `a`.
        let mut p = 0;
        while p < kc {
            let (mat, left) = self.at(i0, p0 + p);
            let run = left.min(kc - p);
            // SAFETY: the stretch lies inside one batch (the caller's contract).
            unsafe { pack_a_steps(mc, (p, run), kc, mat, out) };
            p += run;
        }
    }
}

/// Packs the `mc x kc` block of `a` into strips of [`MR`] rows: strip `s` holds, for each step
/// `p` of depth, the column `a[s*MR .. s*MR+MR, p]` (rows past `mc` are zeros).
///
/// # Safety
/// Every element of the block must be valid to read.
unsafe fn pack_a(mc: usize, kc: usize, a: Mat<*const f32>, out: &mut [f32]) {
    // SAFETY: the contract.
    unsafe { pack_a_steps(mc, (0, kc), kc, a, out) }
}

/// Packs `kc` columns of an `mc`-row block of `a` as steps `from..from + kc` of strips of
/// [`MR`] rows, `depth` steps each (see [`pack_a`]).
///
/// # Safety
/// Every element of the `mc x kc` block must be valid to read; `out` holds the strips.
unsafe fn pack_a_steps(
    mc: usize,
    (from, kc): (usize, usize),
    depth: usize,
    a: Mat<*const f32>,
    out: &mut [f32],
) {
    for (s, strip) in out.chunks_exact_mut(MR * depth).enumerate() {
        let strip = &mut strip[from * MR..(from + kc) * MR];
        let rows = MR.min(mc - s * MR);
        let a = a.at(s * MR, 0);
        if a.cs == 1 {
            // Rows of `a` are contiguous: read along them, write every MR-th slot.
            for i in 0..rows {
                // SAFETY: row `i` of the strip is inside the block.
                let row = unsafe { std::slice::from_raw_parts(a.at(i, 0).ptr, kc) };
                for (p, &v) in row.iter().enumerate() {
                    strip[p * MR + i] = v;
                }
            }
        } else if a.rs == 1 {
            // Columns of `a` are contiguous (a transposed view): a step's `rows` values are
            // one run.
            for (p, step) in strip.chunks_exact_mut(MR).enumerate() {
                // SAFETY: column `p` of the strip's rows is inside the block.
                let col = unsafe { std::slice::from_raw_parts(a.at(0, p).ptr, rows) };
                match (
                    <&mut [f32; MR]>::try_from(&mut *step),
                    <&[f32; MR]>::try_from(col),
                ) {
                    // A whole step as a copy of known length, inlined.
                    (Ok(step), Ok(col)) => *step = *col,
                    _ => step[..rows].copy_from_slice(col),
                }
            }
        } else {
            for p in 0..kc {
                for i in 0..rows {
                    // SAFETY: `(i, p)` is inside the block.
                    strip[p * MR + i] = unsafe { *a.at(i, p).ptr };
                }
            }
        }
        for p in 0..kc {
            strip[p * MR + rows..(p + 1) * MR].fill(0.0);
        }
    }
}

/// Packs the `kc x nc` block of `b` into strips of [`NR`] columns: strip `t` holds, for each
/// step `p` of depth, the row `b[p, t*NR .. t*NR+NR]` (columns past `nc` are zeros).
///
/// # Safety
/// Every element of the block must be valid to read.
unsafe fn pack_b(kc: usize, nc: usize, b: Mat<*const f32>, out: &mut [f32]) {
    for (t, strip) in out.chunks_exact_mut(NR * kc).enumerate() {
        let cols = NR.min(nc - t * NR);
        let b = b.at(0, t * NR);
        if b.cs == 1 {
            for (p, dst) in strip.chunks_exact_mut(NR).enumerate() {
                // SAFETY: row `p` of the strip is inside the block.
                let src = unsafe { std::slice::from_raw_parts(b.at(p, 0).ptr, cols) };
                if let (Ok(dst), Ok(src)) = (
                    <&mut [f32; NR]>::try_from(&mut *dst),
                    <&[f32; NR]>::try_from(src),
                ) {
                    // A whole row as one copy of known length: inlined as vector moves, where
                    // a copy of run-time length calls `memmove` (a seventh of a product with
                    // 49 columns went to those calls).
                    *dst = *src;
                    continue;
                }
                dst[..cols].copy_from_slice(src);
                dst[cols..].fill(0.0);
            }
        } else {
            // Columns of `b` are contiguous (a transposed view): read down them, 64 steps at a
            // time, so that the strided writes stay within 8 KiB of the strip (the whole strip
            // is 64 KiB, more than the first-level cache).
            for (i, rows) in strip.chunks_mut(64 * NR).enumerate() {
                // SAFETY: the steps are inside the block.
                unsafe { pack_columns(b.at(i * 64, 0), cols, rows) };
            }
        }
    }
}

/// Writes `rows.len() / NR` steps of `cols` columns of `b` (each contiguous in memory) into
/// rows of a strip, zeros past `cols`.
///
/// # Safety
/// Those steps and columns of `b` are valid to read.
unsafe fn pack_columns(b: Mat<*const f32>, cols: usize, rows: &mut [f32]) {
    let steps = rows.len() / NR;
    // Whole 16 x 16 blocks by register transposes where a column's steps are contiguous,
    // the rest element by element.
    let (whole_cols, whole_steps) = match b.rs == 1 && b.cs > 0 {
        true => (cols / 16 * 16, steps / 16 * 16),
        false => (0, 0),
    };
    for j in (0..whole_cols).step_by(16) {
        for p in (0..whole_steps).step_by(16) {
            // SAFETY: the block's 16 columns of 16 steps are inside `b` (the contract) and its
            // 16 rows of 16 inside `rows`; `available()` holds wherever a product runs.
            unsafe { transpose16(b.at(p, j).ptr, b.cs as usize, &mut rows[p * NR + j..]) };
        }
    }
    for j in 0..cols {
        let from = if j < whole_cols { whole_steps } else { 0 };
        for (p, row) in rows.chunks_exact_mut(NR).enumerate().skip(from) {
            // SAFETY: `(p, j)` is inside the block (the contract).
            row[j] = unsafe { *b.at(p, j).ptr };
        }
    }
    for row in rows.chunks_exact_mut(NR) {
        row[cols..].fill(0.0);
    }
}

/// Writes the 16 x 16 block whose row `i` is the 16 floats at `src + i * stride` into `dst`
/// transposed: row `j` of the result at `dst[j * NR..][..16]`.
///
/// # Safety
/// [`super::available`] is true; the 16 rows at `src` are valid to read; `dst` holds
/// `15 * NR + 16` floats.
pub(crate) unsafe fn transpose16(src: *const f32, stride: usize, dst: &mut [f32]) {
    assert!(
        dst.len() >= 15 * NR + 16,
        "transpose16: the block does not fit"
    );
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: the contract; `dst` holds the 16 rows (checked above).
    unsafe {
        match super::isa() {
            Some(super::Isa::Avx512) => {
                super::avx512::transpose16(src, stride, dst.as_mut_ptr(), NR)
            }
            _ => super::avx2::transpose16(src, stride, dst.as_mut_ptr(), NR),
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        let _ = (src, stride, dst);
        unreachable!("transpose16 runs only where available() is true");
    }
}
