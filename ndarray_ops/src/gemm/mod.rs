//! `c = a b + beta c` in single precision on x86-64 CPUs with AVX-512 or AVX2: the product
//! under the CPU kernels' convolutions (im2col GEMMs), FullyConnected and RNN steps. Elsewhere
//! (or for f64) the callers use `matrixmultiply` instead.
//!
//! The algorithm is Goto's, as BLIS lays it out:
//!
//! ```text
//! cut the depth into equal blocks of at most KC, and the columns of c into blocks of nc, as
//! many as make a packed block of b half the second-level cache (`caches`):
//! for each block of columns, and each block of the depth (kc):
//!     pack that block of b into strips NR columns wide (each kc x NR, row after row); where
//!     b's rows are contiguous, each whole strip is packed by the kernel instead, as the first
//!     strip of a reads it from b (below)
//!     for each block of MC rows of c:
//!         (a with strided rows only) pack that block of a into strips MR rows tall
//!         (a with rows a multiple of 4 KiB apart) copy that block's rows to rows a cache
//!                    line more than kc apart (`aliases`)
//!         kc <= l1_depth: for each strip of b, for each strip of MR rows of a (the b
//!                    strip stays in the first-level cache; l1_depth is 256 there for 48 KiB)
//!         kc > l1_depth: for each strip of a, for each strip of b (the b strip no longer
//!                    fits there; the a strip, at most 24 KiB, does, and the block of b
//!                    streams from the second-level cache)
//!             the micro-kernel adds the MR x NR product of the two into c
//! ```
//!
//! The AVX-512 micro-kernel ([`avx512::kernel`]) keeps its 12 x 32 tile of `c` in 24 of the
//! 32 vector registers for the whole depth block: each step of depth loads one 32-wide row of
//! the `b` strip (two registers), broadcasts each of `a`'s 12 values and runs 24 fused
//! multiply-adds, so the two FMA units, not the loads, set its pace. A broadcast reads one
//! float wherever it lies, so row-major `a` (the weights of every convolution) is read in place
//! by 12 row pointers instead of being packed; the `b` strip is reused by every strip of `a`.
//! A `b` with contiguous rows (a 1x1 convolution's input, a data gradient's output gradient)
//! is packed on the way: the first strip of `a` reads each step's row of `b` where it lies
//! (prefetched a few steps ahead) and stores it into the packed strip beside its FMAs. A pass
//! of its own copied the strips from rows a page apart, and on the products of 64 filters,
//! whose every value of `b` meets only 64 rows of `a`, took a quarter to a third of the time
//! (64 x 576 x 3136 on two cores: 198 -> 257 GFLOP/s). With 16 registers of 8 lanes, the AVX2
//! kernel ([`avx2::kernel`]) computes the same tile as up to four blocks of 6 x 16, each over
//! the whole depth block, summing every element in the same order (the same bits).
//!
//! Threads: the product is cut into one part per rayon thread, along the columns of `c` (each
//! part then packs all of `a` again) or along its rows (each packs all of `b`), whichever gives
//! more parts and, at a tie, repeats less packing. The parts share nothing: no locks, no
//! barriers, one `rayon::scope` per product.

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod avx2;
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod avx512;
mod caches;
mod epilogue;
mod isa;
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod lanes;
mod strassen;

use std::cell::RefCell;

pub(crate) use epilogue::{normalized, Epilogue, Norm};
pub(crate) use isa::{available, avx512, half_l2_floats, isa, Isa};
pub(crate) use strassen::Strassen;

/// Rows of the micro-kernel's tile of `c` (broadcast values of `a` per step of depth).
pub(crate) const MR: usize = 12;
/// Columns of the micro-kernel's tile of `c` (two 16-lane registers).
pub(crate) const NR: usize = 32;
/// Most depth of one block: a `b` strip is at most `KC * NR` floats (64 KiB). 512 timed at or
/// above 256 on every convolution shape of ResNet-50 (a fourth as many passes over `c`).
const KC: usize = 512;
/// Rows of `a` taken at a time (a multiple of [`MR`]): 480 KiB, in the second-level cache.
const MC: usize = 20 * MR;
/// Products of fewer multiply-adds than this run on the calling thread alone: a part of one
/// would take a few microseconds, as long as waking a thread.
const THREAD_WORK: usize = 1 << 19;

/// A matrix in memory: element `(i, j)` at `ptr + i * rs + j * cs`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mat<P> {
    /// Element `(0, 0)`.
    pub ptr: P,
    /// Stride between rows, in elements.
    pub rs: isize,
    /// Stride between columns, in elements.
    pub cs: isize,
}

// SAFETY: a `Mat` is an address and strides; the contract of [`sgemm`] says which threads touch
// which elements (each part of `c` is written by one thread, `a` and `b` are only read).
unsafe impl<P> Send for Mat<P> {}
// SAFETY: as for `Send`.
unsafe impl<P> Sync for Mat<P> {}

impl<P: Copy> Mat<P> {
    /// A row-major matrix at `ptr` whose rows lie `rs` elements apart.
    pub(crate) fn row_major(ptr: P, rs: usize) -> Self {
        Mat {
            ptr,
            rs: rs as isize,
            cs: 1,
        }
    }

    /// The matrix from row `i` and column `j` on.
    fn at(self, i: usize, j: usize) -> Self
    where
        P: Offset,
    {
        Mat {
            ptr: self
                .ptr
                .offset_by(i as isize * self.rs + j as isize * self.cs),
            ..self
        }
    }
}

/// A strip of `b` as the micro-kernel reads it: `kc` steps of [`NR`] floats, step `p` at
/// `src + p * stride`. Packed, `stride` is `NR`; read where `b` lies (its rows contiguous),
/// `stride` is its row stride, and `fill`, when given, is the packed strip the kernel copies
/// each step into as it reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Strip {
    pub src: *const f32,
    pub stride: usize,
    pub fill: Option<*mut f32>,
}

impl Strip {
    /// A packed strip at `src`.
    fn packed(src: *const f32) -> Strip {
        Strip {
            src,
            stride: NR,
            fill: None,
        }
    }
}

/// Pointer arithmetic for both pointer kinds, wrapping: a view's corner may be computed for an
/// empty block and never read.
pub(crate) trait Offset: Copy {
    fn offset_by(self, n: isize) -> Self;
}
impl Offset for *const f32 {
    fn offset_by(self, n: isize) -> Self {
        self.wrapping_offset(n)
    }
}
impl Offset for *mut f32 {
    fn offset_by(self, n: isize) -> Self {
        self.wrapping_offset(n)
    }
}

/// `c = a b + beta c` for an `m x k` matrix `a`, a `k x n` matrix `b` and an `m x n` matrix
/// `c`. With `beta == 0` the old contents of `c` are never read (they may be NaN).
///
/// # Safety
/// [`available`] must be true; every element of the three matrices must be valid to read (and
/// `c`'s to write) at the given strides, and `c` must not overlap `a` or `b`; no two elements of
/// `c` may share an address.
pub(crate) unsafe fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    a: Mat<*const f32>,
    b: Mat<*const f32>,
    beta: f32,
    c: Mat<*mut f32>,
) {
    if turn(m, k, n, a, b, c) {
        // c^T = b^T a^T: the same products with the kernel's rows and columns swapped.
        let t = |x: Mat<*const f32>| Mat {
            rs: x.cs,
            cs: x.rs,
            ..x
        };
        let ct = Mat {
            rs: c.cs,
            cs: c.rs,
            ..c
        };
        // SAFETY: the same elements as the caller's, transposed.
        return unsafe { sgemm_packing(n, k, m, &t(b), &t(a), beta, Batches::whole(ct)) };
    }
    // SAFETY: the caller's contract.
    unsafe { sgemm_packing(m, k, n, &a, &b, beta, Batches::whole(c)) }
}

/// Elements the kernel computes for an `m x n` product, padding included.
fn padded(m: usize, n: usize) -> usize {
    m.div_ceil(MR) * MR * n.div_ceil(NR) * NR
}

/// A rough cost, in cycles of one core, of an `m x k x n` product in this orientation: the
/// kernel's multiply-adds (two vectors of them a cycle, padding included), packing `a` when
/// its rows are not contiguous (once per column block, an element a cycle), packing `b` (a
/// quarter cycle an element when its rows are contiguous and copied whole, a cycle when its
/// columns are), and storing a tile an element at a time when `c`'s rows are not contiguous
/// (once per depth block).
fn cost(m: usize, k: usize, n: usize, a_rows: bool, b_rows: bool, c_rows: bool) -> usize {
    let kernel = padded(m, n) * k / (2 * isa().map_or(16, Isa::lanes));
    let pack_a = if a_rows {
        0
    } else {
        m * k * n.div_ceil(block_columns(depth_step(k)))
    };
    let pack_b = if b_rows { k * n / 4 } else { k * n };
    let store = if c_rows { 0 } else { m * n * k.div_ceil(KC) };
    kernel + pack_a + pack_b + store
}

/// Whether to compute `c^T = b^T a^T` instead, by [`cost`]: the kernel's 32-wide vectors run
/// along the rows of `c`, so a `c` of few columns pads most of the last vector; `a` is read in
/// place only when its rows are contiguous, `b` is packed whole, and a tile is stored a vector
/// at a time only along contiguous rows of `c`. An LSTM's step (`h W^T`, 32 x 256 by 256 x
/// 1024) turned reads `W` in place instead of packing all of it.
fn turn(
    m: usize,
    k: usize,
    n: usize,
    a: Mat<*const f32>,
    b: Mat<*const f32>,
    c: Mat<*mut f32>,
) -> bool {
    let straight = cost(m, k, n, a.cs == 1, b.cs == 1, c.cs == 1);
    let turned = cost(n, k, m, b.rs == 1, a.rs == 1, c.rs == 1);
    turned < straight
}

/// `c = a b + beta c` with `a` and `b` read through their own packing (a convolution's input
/// seen as its column matrix, never written out) and `c` possibly cut into batches. As
/// [`sgemm`], without turning the product.
///
/// # Safety
/// As [`sgemm`], with `a`'s `m x k` and `b`'s `k x n` elements valid to pack and `c`'s `m x n`
/// elements valid to read and write.
pub(crate) unsafe fn sgemm_packing(
    m: usize,
    k: usize,
    n: usize,
    a: &impl Rows,
    b: &impl Source,
    beta: f32,
    c: Batches<*mut f32>,
) {
    // SAFETY: the caller's contract.
    unsafe { sgemm_then(m, k, n, a, b, c, &Epilogue::default(), beta) }
}

/// [`sgemm_packing`], then `epilogue` on each element of `c`, tile by tile as each is
/// finished.
///
/// # Safety
/// As [`sgemm_packing`]; the epilogue's constants cover `c`'s `m` rows.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn sgemm_then(
    m: usize,
    k: usize,
    n: usize,
    a: &impl Rows,
    b: &impl Source,
    c: Batches<*mut f32>,
    epilogue: &Epilogue<'_>,
    beta: f32,
) {
    let threads = match m.saturating_mul(n).saturating_mul(k) < THREAD_WORK {
        true => 1,
        false => rayon::current_num_threads().max(1),
    };
    // SAFETY: the caller's contract.
    unsafe { product((m, k, n), a, b, beta, c, threads, epilogue) }
}

/// As [`sgemm_packing`], on the calling thread alone: for callers that split their work across
/// threads themselves (Winograd's chunks of tiles, one thread each).
///
/// # Safety
/// As [`sgemm_packing`].
pub(crate) unsafe fn sgemm_serial(
    m: usize,
    k: usize,
    n: usize,
    a: &impl Rows,
    b: &impl Source,
    beta: f32,
    c: Batches<*mut f32>,
) {
    // SAFETY: the caller's contract.
    unsafe { product((m, k, n), a, b, beta, c, 1, &Epilogue::default()) }
}

/// The product of [`sgemm_packing`] cut into at most `threads` parts, one per thread.
///
/// # Safety
/// As [`sgemm_packing`].
unsafe fn product(
    (m, k, n): (usize, usize, usize),
    a: &impl Rows,
    b: &impl Source,
    beta: f32,
    c: Batches<*mut f32>,
    threads: usize,
    epilogue: &Epilogue<'_>,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 || (beta != 0.0 && beta != 1.0) {
        // The kernels either overwrite `c` or add to it: any other `beta` scales `c` first.
        // SAFETY: the caller's contract.
        unsafe { scale(m, n, beta, c) };
        if k == 0 {
            return;
        }
    }
    let beta = if beta == 0.0 { 0.0 } else { 1.0 };
    // The product as given (no turn), cut into its threads' parts.
    let parts_n = threads.min(n.div_ceil(NR));
    let parts_m = threads.min(m.div_ceil(MR));
    let by_columns = match parts_n.cmp(&parts_m) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => m <= n,
    };
    let (parts, len, unit) = if by_columns {
        (parts_n, n, NR)
    } else {
        (parts_m, m, MR)
    };
    // Whole tiles per part, so that only the last part has a ragged edge.
    let step = len.div_ceil(unit).div_ceil(parts) * unit;
    let part = move |lo: usize| {
        let hi = (lo + step).min(len);
        // SAFETY: the part's rows or columns of `c` are its own; the rest as the caller's.
        unsafe {
            if by_columns {
                serial((0, m), k, (lo, hi - lo), a, b, (beta, c), epilogue);
            } else {
                serial((lo, hi - lo), k, (0, n), a, b, (beta, c), epilogue);
            }
        }
    };
    if parts <= 1 {
        return part(0);
    }
    rayon::scope(|s| {
        for lo in (step..len).step_by(step) {
            s.spawn(move |_| part(lo));
        }
        part(0);
    });
}

/// A matrix cut into batches of `cols` columns that lie `stride` elements apart (a
/// convolution's output, or its output gradient, over a run of images: one image's pixels per
/// batch): element `(i, b * cols + j)` at `ptr + b * stride + i * rs + j * cs`. A product reads
/// its `a` ([`Rows`]) and writes its `c` this way; one batch is the matrix itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batches<P> {
    mat: Mat<P>,
    /// Columns per batch; `usize::MAX` for one batch.
    cols: usize,
    stride: isize,
}

impl<P: Offset> Batches<P> {
    /// The matrix as one batch.
    pub(crate) fn whole(mat: Mat<P>) -> Self {
        Batches {
            mat,
            cols: usize::MAX,
            stride: 0,
        }
    }

    /// `mat` in `batches` batches of `cols` columns (`cols > 0`), batch `b` at
    /// `mat.ptr + b * stride`.
    pub(crate) fn new(mat: Mat<P>, (cols, batches): (usize, usize), stride: isize) -> Self {
        match batches {
            0 | 1 => Self::whole(mat),
            _ => Batches { mat, cols, stride },
        }
    }

    /// The matrix from `(i, j)` on, inside `j`'s batch, and how many columns that batch has
    /// left from `j`.
    fn at(&self, i: usize, j: usize) -> (Mat<P>, usize) {
        let (b, j) = (j / self.cols, j % self.cols);
        let mat = Mat {
            ptr: self.mat.ptr.offset_by(b as isize * self.stride),
            ..self.mat
        };
        (mat.at(i, j), self.cols - j)
    }

    /// Element `(i, j)`.
    fn element(&self, i: usize, j: usize) -> P {
        self.at(i, j).0.ptr
    }
}

/// `c = beta c` (`beta == 0` writes zeros without reading `c`).
///
/// # Safety
/// `c`'s `m x n` elements are valid to read and write.
unsafe fn scale(m: usize, n: usize, beta: f32, c: Batches<*mut f32>) {
    for i in 0..m {
        for j in 0..n {
            let e = c.element(i, j);
            // SAFETY: `(i, j)` is inside `c` (the caller's contract).
            unsafe { *e = if beta == 0.0 { 0.0 } else { *e * beta } };
        }
    }
}

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
    /// first reads it ([`Strip::fill`]) instead of in a pass of its own.
    fn rows(&self) -> Option<Mat<*const f32>> {
        None
    }
}

/// Elements of a matrix from which [`Packed::new`] packs on the pool's threads (an LSTM's
/// 256 x 1024 weights are twice as many).
const PACK_WIDE: usize = 1 << 17;

/// A `k x n` matrix `b` packed once for many products (an RNN's hidden weights, multiplied at
/// every step): per block of [`depth_step`] steps, the strips of all `n` columns, as [`Source::pack`]
/// lays them out, so a product reads its blocks in place.
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

thread_local! {
    /// Each thread's packing buffers (`a`'s block, `b`'s block), kept between products: a
    /// fresh megabyte per product would be mapped and faulted in every time.
    static PACKED: RefCell<(Aligned, Aligned)> = RefCell::new((Aligned::default(), Aligned::default()));
}

/// A buffer of floats whose start is aligned to a cache line.
#[derive(Default)]
struct Aligned(Vec<f32>);

impl Aligned {
    /// `len` floats starting on a 64-byte boundary (contents unspecified).
    fn slice(&mut self, len: usize) -> &mut [f32] {
        if self.0.len() < len + 16 {
            self.0 = vec![0.0; len + 16];
        }
        let skip = self.0.as_ptr().align_offset(64).min(15);
        &mut self.0[skip..skip + len]
    }
}

/// The depth of each block of a product of depth `k`: `k` cut into as few blocks of at most
/// [`KC`] as it takes, all of one size rounded up to a cache line of floats (the last one
/// shorter), so that no block is a short remainder whose tiles load and store `c` for a few
/// steps each: depth 576 (a 3x3 convolution of 64 channels) was 512 + 64, now 288 + 288.
fn depth_step(k: usize) -> usize {
    let even = k.div_ceil(k.div_ceil(KC).max(1));
    even.next_multiple_of(16).clamp(1, KC)
}

/// Columns of `b` packed at a time at depth `kc`: a block of half the second-level cache
/// (`caches`), in whole strips. A fixed 1,024 columns made blocks of 2 MiB at depth 512,
/// which a cache of 2 MiB could not hold beside `a`.
fn block_columns(kc: usize) -> usize {
    (caches::blocking().b_block / kc.max(1) / NR * NR).max(NR)
}

/// How the micro-kernel reads `a`'s blocks.
#[derive(Clone, Copy)]
enum ARead {
    /// Where they lie: `a`'s rows are contiguous.
    InPlace(Mat<*const f32>),
    /// Their rows copied to rows [`copy_stride`] apart: `a`'s rows are contiguous but lie a
    /// multiple of 4 KiB apart ([`aliases`]).
    Copied(Mat<*const f32>),
    /// Packed into strips of [`MR`] rows ([`Rows::pack`]).
    Packed,
}

impl ARead {
    fn of(a: &impl Rows) -> Self {
        match a.direct() {
            Some(d) if aliases(d.rs) => ARead::Copied(d),
            Some(d) => ARead::InPlace(d),
            None => ARead::Packed,
        }
    }
}

/// Whether rows `rs` floats apart fall into one set of the first-level cache: a multiple of
/// 4 KiB apart (64 sets of 64-byte lines on every x86-64 core this runs on), the 12 rows a
/// tile broadcasts from at each step compete for its 8 or 12 ways, and every strip of `b`
/// reads them again from the second-level cache. Such rows are common: an LSTM's gate
/// gradients (1024 wide, the step products' and the input gradient's `a`), ResNet-50's 1x1
/// convolutions of 1024 and 2048 channels. Copied, the backward steps of a two-layer LSTM of
/// 256 units went from 4.74 to 4.09 ms a layer, its input gradient product from 2.14 to 1.62
/// (medians of 16 alternating runs each).
fn aliases(rs: isize) -> bool {
    rs != 0 && (rs.unsigned_abs() * std::mem::size_of::<f32>()).is_multiple_of(4096)
}

/// Floats between the rows of a block of `a` copied at depth `kc`: whole cache lines, and one
/// more, so that 12 rows fall into 12 sets.
fn copy_stride(kc: usize) -> usize {
    kc.next_multiple_of(16) + 16
}

/// The whole blocked product on the calling thread, of rows `i0..i0 + m` and columns
/// `j0..j0 + n` of `c`, each tile through `epilogue` once its last block of depth is in.
///
/// # Safety
/// As [`sgemm`], with `k > 0` and `beta` 0 or 1.
unsafe fn serial(
    (i0, m): (usize, usize),
    k: usize,
    (j0, n): (usize, usize),
    a: &impl Rows,
    b: &impl Source,
    (beta, c): (f32, Batches<*mut f32>),
    epilogue: &Epilogue<'_>,
) {
    let read = ARead::of(a);
    let then = epilogue.applies();
    PACKED.with_borrow_mut(|(abuf, bbuf)| {
        let step = depth_step(k);
        let block = block_columns(step);
        // Which strip stays in the first-level cache while the other kind passes by: `b`'s
        // where it fits, else `a`'s (on a 2048^3 product: 280 -> 313 GFLOP/s, median of five
        // alternating rounds, with 1 MiB blocks of `b`).
        let a_stays = step > caches::blocking().l1_depth;
        for jc in (0..n).step_by(block) {
            let nc = block.min(n - jc);
            for pc in (0..k).step_by(step) {
                let kc = step.min(k - pc);
                // Whole strips of a matrix with contiguous rows are packed by the kernel as the
                // first strip of `a` reads them (`fill`); the rest beforehand.
                let (bp, fill) = match b.packed(pc, kc, j0 + jc, nc) {
                    // Never written: only the strips of a matrix's own block are filled.
                    Some(bp) => (bp.as_ptr().cast_mut(), None),
                    None => {
                        let bp = bbuf.slice(nc.div_ceil(NR) * NR * kc);
                        let fill = b.rows();
                        let from = if fill.is_some() { nc / NR * NR } else { 0 };
                        if from < nc {
                            // SAFETY: the block's strips from column `from` are inside `b`.
                            unsafe {
                                b.pack(pc, kc, j0 + jc + from, nc - from, &mut bp[from * kc..])
                            };
                        }
                        (bp.as_mut_ptr(), fill)
                    }
                };
                let add = beta != 0.0 || pc > 0;
                for ic in (0..m).step_by(MC) {
                    let mc = MC.min(m - ic);
                    let strips = mc.div_ceil(MR);
                    let ld = copy_stride(kc);
                    let ap = abuf.slice(match read {
                        ARead::InPlace(_) => 0,
                        ARead::Copied(_) => mc * ld,
                        ARead::Packed => strips * MR * kc,
                    });
                    match read {
                        ARead::InPlace(_) => {}
                        ARead::Copied(src) => {
                            for (r, row) in ap.chunks_exact_mut(ld).enumerate() {
                                // SAFETY: row `r` of the block: `kc` contiguous floats of `a`.
                                let from = unsafe {
                                    std::slice::from_raw_parts(src.at(i0 + ic + r, pc).ptr, kc)
                                };
                                row[..kc].copy_from_slice(from);
                            }
                        }
                        // SAFETY: the block is inside `a`.
                        ARead::Packed => unsafe { a.pack(i0 + ic, mc, pc, kc, ap) },
                    }
                    let b_strips = nc.div_ceil(NR);
                    let (outer, inner) = match a_stays {
                        true => (strips, b_strips),
                        false => (b_strips, strips),
                    };
                    for o in 0..outer {
                        for q in 0..inner {
                            let (t, s) = if a_stays { (q, o) } else { (o, q) };
                            let nr = NR.min(nc - t * NR);
                            let packed = bp.wrapping_add(t * NR * kc);
                            let bs = match fill {
                                Some(src) if ic == 0 && s == 0 && nr == NR => Strip {
                                    src: src.at(pc, j0 + jc + t * NR).ptr,
                                    stride: src.rs as usize,
                                    fill: Some(packed),
                                },
                                _ => Strip::packed(packed.cast_const()),
                            };
                            let mr = MR.min(mc - s * MR);
                            let (a_s, ars, acs) = match read {
                                ARead::InPlace(a) => (a.at(i0 + ic + s * MR, pc).ptr, a.rs, 1),
                                ARead::Copied(_) => (ap[s * MR * ld..].as_ptr(), ld as isize, 1),
                                ARead::Packed => (ap[s * MR * kc..].as_ptr(), 1, MR as isize),
                            };
                            let (i, j) = (i0 + ic + s * MR, j0 + jc + t * NR);
                            // SAFETY: the strips hold `kc` steps each, `a`'s `mr` rows are
                            // inside it; the tile's `mr x nr` elements are inside `c`;
                            // `available()` holds (the contract).
                            unsafe { tile(kc, (a_s, ars, acs), bs, c, (i, j), (mr, nr), add) };
                            if then && pc + kc == k {
                                // SAFETY: the tile's elements, just written by this thread.
                                unsafe { finish(epilogue, c, (i, j), (mr, nr)) };
                            }
                        }
                    }
                }
            }
        }
    });
}

/// The epilogue on the `mr x nr` tile of `c` at `(i, j)`, a row's run at a time where the row
/// is contiguous within its batch.
///
/// # Safety
/// The tile's elements are valid to read and write, and nobody else touches them meanwhile.
unsafe fn finish(
    epilogue: &Epilogue<'_>,
    c: Batches<*mut f32>,
    (i, j): (usize, usize),
    (mr, nr): (usize, usize),
) {
    for r in i..i + mr {
        let (at, left) = c.at(r, j);
        if at.cs == 1 && left >= nr {
            // SAFETY: the row's `nr` elements of the tile, contiguous (the contract).
            epilogue.apply(r, unsafe { std::slice::from_raw_parts_mut(at.ptr, nr) });
        } else {
            for col in j..j + nr {
                // SAFETY: element `(r, col)` of the tile (the contract).
                epilogue.apply(r, unsafe {
                    std::slice::from_raw_parts_mut(c.element(r, col), 1)
                });
            }
        }
    }
}

/// The micro-kernel on the tile of `c` at `(i, j)`; a tile that crosses from one batch of `c`
/// into the next is computed in a buffer and copied out element by element.
///
/// # Safety
/// As [`micro`], for the tile's `mr x nr` elements of `c`.
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    kc: usize,
    a: (*const f32, isize, isize),
    b: Strip,
    c: Batches<*mut f32>,
    (i, j): (usize, usize),
    (mr, nr): (usize, usize),
    add: bool,
) {
    let (at, left) = c.at(i, j);
    if left >= nr {
        // SAFETY: the contract.
        return unsafe { micro(kc, a, b, at, mr, nr, add) };
    }
    let mut buf = [[0f32; NR]; MR];
    if add {
        for (ii, row) in buf.iter_mut().enumerate().take(mr) {
            for (jj, v) in row.iter_mut().enumerate().take(nr) {
                // SAFETY: `(i + ii, j + jj)` is inside the tile (the contract).
                *v = unsafe { *c.element(i + ii, j + jj) };
            }
        }
    }
    let local = Mat {
        ptr: buf.as_mut_ptr().cast::<f32>(),
        rs: NR as isize,
        cs: 1,
    };
    // SAFETY: `local` holds the whole tile; the rest as the contract.
    unsafe { micro(kc, a, b, local, mr, nr, add) };
    for (ii, row) in buf.iter().enumerate().take(mr) {
        for (jj, &v) in row.iter().enumerate().take(nr) {
            // SAFETY: as above.
            unsafe { *c.element(i + ii, j + jj) = v };
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
/// [`available`] is true; the 16 rows at `src` are valid to read; `dst` holds `15 * NR + 16`
/// floats.
pub(crate) unsafe fn transpose16(src: *const f32, stride: usize, dst: &mut [f32]) {
    assert!(
        dst.len() >= 15 * NR + 16,
        "transpose16: the block does not fit"
    );
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: the contract; `dst` holds the 16 rows (checked above).
    unsafe {
        match isa() {
            Some(Isa::Avx512) => avx512::transpose16(src, stride, dst.as_mut_ptr(), NR),
            _ => avx2::transpose16(src, stride, dst.as_mut_ptr(), NR),
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        let _ = (src, stride, dst);
        unreachable!("transpose16 runs only where available() is true");
    }
}

/// One tile: `c[..mr, ..nr] (+)= a x b_strip` over `kc` steps, `a` given as its first
/// element and strides (see [`avx512::kernel`]), by the kernel of this machine's [`isa`].
///
/// # Safety
/// [`available`] is true; as [`avx512::kernel`].
#[inline]
unsafe fn micro(
    kc: usize,
    a: (*const f32, isize, isize),
    b: Strip,
    c: Mat<*mut f32>,
    mr: usize,
    nr: usize,
    add: bool,
) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: passed on from the caller.
    unsafe {
        // A ragged strip (the last of `a`'s rows) takes the smallest tile that holds it: an
        // LSTM step's 32 samples are strips of 12, 12 and 8 rows, and 64 filters end in 4.
        match (isa(), mr) {
            (Some(Isa::Avx512), 0..=4) => avx512::kernel::<4>(kc, a, b, c, mr, nr, add),
            (Some(Isa::Avx512), 5..=8) => avx512::kernel::<8>(kc, a, b, c, mr, nr, add),
            (Some(Isa::Avx512), _) => avx512::kernel::<MR>(kc, a, b, c, mr, nr, add),
            _ => avx2::kernel(kc, a, b, c, mr, nr, add),
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        let _ = (kc, a, b, c, mr, nr, add);
        unreachable!("sgemm runs only where available() is true");
    }
}

#[cfg(test)]
mod tests;
