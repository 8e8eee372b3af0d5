//! Float32 convolutions as implicit GEMMs, where the GEMM runs (AVX-512, or AVX2 and FMA):
//! the GEMM ([`crate::gemm`]) packs its strips of the column matrix straight from the data
//! ([`Columns`]) instead of reading a column matrix that im2col wrote, so the columns (7 MiB
//! for a 3x3 convolution of 64 channels over 56x56) never pass through memory.
//!
//! ```text
//! forward          Y_g  = W_g x cols(X_g)                    (Columns over the data)
//! weight gradient  dW_g += dY_g x cols(X_g)^T                (Columns over the data, transposed)
//! data gradient    stride 1: dX_g = W'_g x cols'(dY_g)       (a convolution of dY, see below)
//!                  otherwise: dcol = W_g^T x dY_g, then col2im
//! ```
//!
//! With stride 1 the data gradient is itself a convolution: of the output gradient, padded by
//! `d * (k - 1) - p`, with the window flipped and the filters and channels swapped (`W'`, built
//! per call: `cg x fg x kh x kw`, small beside the data). So it too packs its strips from its
//! input, and neither the data gradient's columns nor col2im's scatter are needed.

use std::ops::Range;

use super::backward::col2im;
use super::{by_phase, Conv, ConvDims, Tap};
use crate::gemm::{sgemm_packing, sgemm_then, transpose16, Batches, Epilogue, Mat, Source, NR};
use crate::ops::par::{for_ranges, Shared};
use crate::resources::KernelRes;
use crate::DType;

/// Whether a convolution of `dtype` runs here: f32 where the GEMM runs, with a window that
/// needs columns (a 1x1 window of stride 1 without padding reads the data as they are).
pub(super) fn applies(c: &Conv, dtype: DType) -> bool {
    !c.columns_are_input() && dtype == DType::F32 && crate::gemm::available()
}

/// Output pixels a product should cover at least: a convolution over small images (ResNet's
/// last stage: 7x7) takes this many images' pixels per product, so that the product's columns
/// fill the kernel's 32-wide strips (49 pixels pad to 64) and, in the weight gradient, its
/// depth blocks are deep (each depth block reads and writes all of `dW` once).
const PRODUCT_PIXELS: usize = 2048;

/// Images per product for images of `pixels` output pixels, at most `n`.
fn images_per_product(n: usize, pixels: usize) -> usize {
    PRODUCT_PIXELS.div_ceil(pixels.max(1)).clamp(1, n.max(1))
}

/// `out = conv(x, w)`, each element then through `epilogue` (its rows the filters).
///
/// # Safety
/// The pointers hold the shapes `dims` gives (data, weights, output); the output is disjoint
/// from the inputs; [`applies`] holds; the epilogue's constants cover the filters.
pub(super) unsafe fn forward(
    c: &Conv,
    d: &ConvDims,
    (x, wt, out): (*const f32, *const f32, *mut f32),
    epilogue: &Epilogue<'_>,
    res: &mut KernelRes,
) -> Result<(), String> {
    let stage = Staging::of(c);
    let taps = stage.taps(c, d);
    let (pixels, plane) = (d.ho * d.wo, d.h * d.w);
    let chunk = images_per_product(d.n, pixels);
    let by = match stage.len(d) {
        0 => std::ptr::null_mut(),
        len => res.temp(chunk * len * 4)?.cast::<f32>(),
    };
    for first in (0..d.n).step_by(chunk) {
        let images = chunk.min(d.n - first);
        for g in 0..c.groups {
            // SAFETY: images `first..first + images`, group `g` lie inside each buffer (the
            // contract); `by` holds `chunk` images' staged group data.
            unsafe {
                let xg = x.add((first * d.ch + g * d.cg) * plane);
                let (input, hw) = stage.stage(c, d, xg, images, by);
                let phased = stage == Staging::Phased;
                let b = Columns::new(input, hw, (d.ho, d.wo), &taps, (phased, false));
                let a = Mat::row_major(wt.add(g * d.fg * d.rows), d.rows);
                let og = Mat::row_major(out.add((first * c.filters + g * d.fg) * pixels), pixels);
                let cm = Batches::new(og, (pixels, images), (c.filters * pixels) as isize);
                let then = epilogue.rows_from(g * d.fg);
                sgemm_then(d.fg, d.rows, images * pixels, &a, &b, cm, &then, 0.0);
            }
        }
    }
    Ok(())
}

/// `dx` and `dw` of a convolution from its output gradient `dy` (the bias gradient is the
/// caller's).
///
/// # Safety
/// The pointers hold the shapes `dims` gives; the gradients are disjoint from each other and
/// from the inputs; [`applies`] holds.
pub(super) unsafe fn backward(
    c: &Conv,
    d: &ConvDims,
    (dy, x, wt): (*const f32, *const f32, *const f32),
    (dx, dw): (*mut f32, *mut f32),
    res: &mut KernelRes,
) -> Result<(), String> {
    // A 3x3 window of stride 1 goes through Winograd's tiles: both gradients, or (where the
    // data gradient's tiles are enough but the output's are not) the data gradient after the
    // loop below.
    let winograd = super::winograd::data_gradient_applies(c, d, DType::F32);
    // Nothing reads the data gradient of a bound graph's first convolution (its data asks for
    // none): it is left unwritten.
    let want_dx = res.wanted(0);
    if winograd && super::winograd::weight_gradient_applies(c, d, DType::F32) {
        // SAFETY: the caller's contract.
        return unsafe {
            super::winograd::weight_gradient(c, d, (dy, x), dw, res)?;
            match want_dx {
                true => super::winograd::data_gradient(c, d, (dy, wt), dx, res),
                false => Ok(()),
            }
        };
    }
    let stage = Staging::of(c);
    let taps = stage.taps(c, d);
    let (pixels, plane) = (d.ho * d.wo, d.h * d.w);
    let chunk = images_per_product(d.n, pixels);
    // The data gradient as a convolution of dY where its padding is a padding (stride 1), and
    // where flipping the weights (`cg * fg * taps` copies) costs less than the columns would
    // (a write and col2im's read of `cg * taps * pixels` per image): ResNet's 3x3 convolutions
    // of 512 channels on 7x7 at batch 1 ran at half the rate flipped.
    let flipped = !winograd
        && want_dx
        && c.s == (1, 1)
        && c.p.0 <= c.d.0 * (c.k.0 - 1)
        && c.p.1 <= c.d.1 * (c.k.1 - 1)
        && d.fg <= 2 * plane * d.n;
    let back_taps = match flipped {
        true => {
            let pad = (c.d.0 * (c.k.0 - 1) - c.p.0, c.d.1 * (c.k.1 - 1) - c.p.1);
            Tap::window(c.k, (1, 1), pad, c.d, d.wo, d.w)
        }
        false => Vec::new(),
    };
    // Temp space: the flipped weights of every group, or an image's data-gradient columns
    // (neither for Winograd's, nor without a data gradient); then a chunk's staged group data.
    let first_part = match (flipped, winograd || !want_dx) {
        (true, _) => c.groups * d.cg * d.fg * c.k.0 * c.k.1,
        (false, true) => 0,
        (false, false) => d.rows * pixels,
    };
    let second = chunk * stage.len(d);
    let temp = res.temp((first_part + second) * 4)?.cast::<f32>();
    // SAFETY: the temp space holds `first_part + second` floats; every slice below lies inside
    // its buffer (the contract).
    unsafe {
        let (work, by) = (temp, temp.add(first_part));
        if flipped {
            flip(c, d, wt, work);
        }
        for first in (0..d.n).step_by(chunk) {
            let images = chunk.min(d.n - first);
            for g in 0..c.groups {
                let xg = x.add((first * d.ch + g * d.cg) * plane);
                let dxg = dx.add((first * d.ch + g * d.cg) * plane);
                let dyg = dy.add((first * c.filters + g * d.fg) * pixels);
                // Weight gradient: dY_g x cols(X_g)^T, summed over the chunk's images (the
                // product's depth) and over chunks.
                let (input, hw) = stage.stage(c, d, xg, images, by);
                let phased = stage == Staging::Phased;
                let b = Columns::new(input, hw, (d.ho, d.wo), &taps, (phased, true));
                let dym = Mat::row_major(dyg, pixels);
                let a = Batches::new(dym, (pixels, images), (c.filters * pixels) as isize);
                let cm = Mat::row_major(dw.add(g * d.fg * d.rows), d.rows);
                // The first chunk writes `dW`, the others add to it.
                let beta = if first == 0 { 0.0 } else { 1.0 };
                sgemm_packing(
                    d.fg,
                    images * pixels,
                    d.rows,
                    &a,
                    &b,
                    beta,
                    Batches::whole(cm),
                );
                // Data gradient as a product over dY's columns: the flipped weights into dX
                // (stride 1), or W_g^T into the staged layout (the weight gradient is done with
                // `by`), then spread over dX's sampled pixels (a subsampled 1x1 window).
                let w_t = Mat {
                    ptr: wt.add(g * d.fg * d.rows),
                    rs: 1,
                    cs: d.rows as isize,
                };
                let over_dy = match (flipped, stage) {
                    _ if winograd || !want_dx => continue,
                    (true, _) => {
                        let k = d.fg * c.k.0 * c.k.1;
                        let wg = Mat::row_major(work.add(g * d.cg * k).cast_const(), k);
                        let dxm = Mat::row_major(dxg, plane);
                        let dest = Batches::new(dxm, (plane, images), (d.ch * plane) as isize);
                        Some((wg, k, &back_taps, (d.h, d.w), dest))
                    }
                    (false, Staging::Subsampled) => {
                        let staged = Mat::row_major(by, pixels);
                        let dest = Batches::new(staged, (pixels, images), (d.cg * pixels) as isize);
                        Some((w_t, d.fg, &taps, (d.ho, d.wo), dest))
                    }
                    (false, _) => None,
                };
                if let Some((a, k, dy_taps, (h, w), dest)) = over_dy {
                    let dy_in = (dyg, c.filters * pixels);
                    let b = Columns::new(dy_in, (d.ho, d.wo), (h, w), dy_taps, (false, false));
                    sgemm_packing(d.cg, k, images * h * w, &a, &b, 0.0, dest);
                    if !flipped {
                        unstage(c, d, by, images, dxg);
                    }
                    continue;
                }
                // Data gradient: W_g^T x dY_g into columns, scattered back, image by image.
                for i in 0..images {
                    let (dxi, dyi) = (dxg.add(i * d.ch * plane), dyg.add(i * c.filters * pixels));
                    let (cols, b) = (Mat::row_major(work, pixels), Mat::row_major(dyi, pixels));
                    crate::gemm::sgemm(d.rows, d.fg, pixels, w_t, b, 0.0, cols);
                    std::slice::from_raw_parts_mut(dxi, d.cg * plane).fill(0.0);
                    col2im::<f32>(work, d.cg, d.h, d.w, c, d.ho, d.wo, dxi);
                }
            }
        }
        if winograd && want_dx {
            // SAFETY: the caller's contract; the weight gradient no longer needs the temp
            // space this takes over.
            super::winograd::data_gradient(c, d, (dy, wt), dx, res)?;
        }
    }
    Ok(())
}

/// `W'` of every group: `W'[g][ci][f][ky][kx] = W[g*fg + f][ci][kh-1-ky][kw-1-kx]`, the
/// weights of the convolution that is the data gradient. Rows `(g, ci)` of `W'` are written
/// whole, split across threads; the `fg` windows a row reads (one per filter) stay cached for
/// the next channel's row.
///
/// # Safety
/// `wt` holds the weights, `out` as many floats.
unsafe fn flip(c: &Conv, d: &ConvDims, wt: *const f32, out: *mut f32) {
    let taps = c.k.0 * c.k.1;
    let len = c.filters * d.rows;
    let (w, out) = (Shared::new(wt), Shared::new(out.cast_const()));
    for_ranges(c.groups * d.cg, d.fg * taps, |lo, hi| {
        for row in lo..hi {
            let (g, ci) = (row / d.cg, row % d.cg);
            // SAFETY: the contract; this range alone writes rows `lo..hi` of `out`.
            let (w, to) = unsafe { (w.piece(0, len), out.piece_mut(row, d.fg * taps)) };
            for (f, to) in to.chunks_exact_mut(taps).enumerate() {
                let from = &w[((g * d.fg + f) * d.cg + ci) * taps..][..taps];
                for (v, &x) in to.iter_mut().zip(from.iter().rev()) {
                    *v = x;
                }
            }
        }
    });
}

/// How a convolution's input is copied before its columns read it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Staging {
    /// Read where it lies.
    AsIs,
    /// Each row grouped by phase ([`by_phase`]): with a horizontal stride a tap's columns are
    /// every `s`-th, and copying runs of a phased copy beats reading them one by one where the
    /// window is wider than the stride, so that taps share the copy (the first 7x7
    /// convolution of a ResNet, stride 2: 71 -> 114 GFLOP/s).
    Phased,
    /// A 1x1 window with a stride and no padding reads one pixel in `s0 * s1`: those pixels
    /// are copied out (as wide as the output), and the columns are that copy read with stride
    /// 1 (ResNet's projection shortcuts ran at half their GEMM's rate reading every other
    /// element).
    Subsampled,
}

impl Staging {
    fn of(c: &Conv) -> Self {
        if c.k == (1, 1) && c.p == (0, 0) && c.s != (1, 1) {
            Staging::Subsampled
        } else if c.s.1 > 1 && c.k.1 > c.s.1 {
            Staging::Phased
        } else {
            Staging::AsIs
        }
    }

    /// Floats of one image's staged group data.
    fn len(self, d: &ConvDims) -> usize {
        match self {
            Staging::AsIs => 0,
            Staging::Phased => d.cg * d.h * d.w,
            Staging::Subsampled => d.cg * d.ho * d.wo,
        }
    }

    /// The taps that the columns read the staged data with.
    fn taps(self, c: &Conv, d: &ConvDims) -> Vec<Tap> {
        match self {
            Staging::Subsampled => Tap::window((1, 1), (1, 1), (0, 0), (1, 1), d.wo, d.wo),
            _ => Tap::window(c.k, c.s, c.p, c.d, d.w, d.wo),
        }
    }

    /// Stages the group data of `images` images (the first at `xg`, one image's channels
    /// apart) into `by`, one image after another; returns what the columns read: the first
    /// image's data and the distance to the next, and the planes' height and width.
    ///
    /// # Safety
    /// `xg` holds the images' group data and `by` `images * self.len(d)` floats; the two are
    /// disjoint.
    unsafe fn stage(
        self,
        c: &Conv,
        d: &ConvDims,
        xg: *const f32,
        images: usize,
        by: *mut f32,
    ) -> ((*const f32, usize), (usize, usize)) {
        let (plane, len) = (d.h * d.w, self.len(d));
        if self == Staging::AsIs {
            return ((xg, d.ch * plane), (d.h, d.w));
        }
        // Plane by plane (image, channel), split across threads.
        let (src, dst) = (Shared::new(xg), Shared::new(by.cast_const()));
        let out_plane = len / d.cg.max(1);
        for_ranges(images * d.cg, plane, |lo, hi| {
            for k in lo..hi {
                let (i, ch) = (k / d.cg, k % d.cg);
                // SAFETY: plane `ch` of image `i` lies inside the images' group data, and its
                // staged plane inside `by` (the contract); this range alone writes it.
                let (from, to) =
                    unsafe { (src.piece(i * d.ch + ch, plane), dst.piece_mut(k, out_plane)) };
                match self {
                    Staging::AsIs => {}
                    Staging::Phased => by_phase(from, d.w, c.s.1, to),
                    Staging::Subsampled => {
                        for (y, out) in to.chunks_exact_mut(d.wo).enumerate() {
                            let row = &from[y * c.s.0 * d.w..][..d.w];
                            for (o, &v) in out.iter_mut().zip(row.iter().step_by(c.s.1)) {
                                *o = v;
                            }
                        }
                    }
                }
            }
        });
        match self {
            Staging::Subsampled => ((by.cast_const(), len), (d.ho, d.wo)),
            _ => ((by.cast_const(), len), (d.h, d.w)),
        }
    }
}

/// The reverse of [`Staging::Subsampled`] for a gradient: writes the staged planes of
/// `images` images (at `by`, one image's `cg` planes of `ho x wo` after another) into their
/// sampled pixels of `dxg` (the first image's group, one image's channels apart), and zeros
/// into every other pixel, in one pass, plane by plane across threads.
///
/// # Safety
/// `by` holds the staged planes and `dxg` the images' group gradients; the two are disjoint.
unsafe fn unstage(c: &Conv, d: &ConvDims, by: *const f32, images: usize, dxg: *mut f32) {
    let (plane, pixels) = (d.h * d.w, d.ho * d.wo);
    let (src, dst) = (Shared::new(by), Shared::new(dxg.cast_const()));
    for_ranges(images * d.cg, plane, |lo, hi| {
        for k in lo..hi {
            let (i, ch) = (k / d.cg, k % d.cg);
            // SAFETY: staged plane `k` lies inside `by`, plane `ch` of image `i` inside the
            // gradient (the contract); this range alone writes it.
            let (from, to) = unsafe { (src.piece(k, pixels), dst.piece_mut(i * d.ch + ch, plane)) };
            for (y, row) in to.chunks_exact_mut(d.w).enumerate() {
                row.fill(0.0);
                if y % c.s.0 != 0 || y / c.s.0 >= d.ho {
                    continue;
                }
                let staged = &from[y / c.s.0 * d.wo..][..d.wo];
                for (v, &g) in row.iter_mut().step_by(c.s.1).zip(staged) {
                    *v = g;
                }
            }
        }
    });
}

/// A group of a run of images seen as its column matrix (row `(channel, tap)`, column `(image,
/// output pixel)`), or as that matrix transposed, without writing it: [`Source::pack`] fills
/// the GEMM's strips from the input rows a strip's columns cross.
struct Columns<'a> {
    /// The group's first input channel of the first image, `h x w` each.
    x: *const f32,
    /// Elements from one image's group data to the next's.
    image: usize,
    h: usize,
    w: usize,
    /// Output rows and columns per image.
    ho: usize,
    wo: usize,
    taps: &'a [Tap],
    /// Whether each input row is grouped by phase ([`by_phase`]), so that a tap of a strided
    /// convolution reads one contiguous run.
    phased: bool,
    /// Whether every tap reads contiguous runs of its input rows (stride 1, or `phased`).
    contiguous: bool,
    transposed: bool,
}

// SAFETY: a `Columns` only reads its input, which the kernel holds for the product's length.
unsafe impl Sync for Columns<'_> {}

impl<'a> Columns<'a> {
    /// The columns of the `h x w` channels at `x`, the images `image` elements apart (rows
    /// grouped by phase when `phased`), under `taps` (from [`Tap::window`]) with outputs `ho x
    /// wo`; `transposed` for the matrix `(image, pixel)` by `(channel, tap)`.
    ///
    /// # Safety
    /// `x` holds every channel of every image a row or column of the matrix names, for as long
    /// as the value lives.
    unsafe fn new(
        (x, image): (*const f32, usize),
        (h, w): (usize, usize),
        (ho, wo): (usize, usize),
        taps: &'a [Tap],
        (phased, transposed): (bool, bool),
    ) -> Self {
        Columns {
            x,
            image,
            h,
            w,
            ho,
            wo,
            taps,
            phased,
            contiguous: phased || taps.iter().all(Tap::unit_stride),
            transposed,
        }
    }

    /// Row `r` of the (untransposed) column matrix at the pixels of `runs` into `out`
    /// (`runs.lanes` long; lanes past it, up to `out.len()`, zeros).
    fn fill_runs(&self, r: usize, runs: &Runs, out: &mut [f32]) {
        let taps = self.taps.len();
        let tap = &self.taps[r % taps];
        let len = self.h * self.w;
        for &(q, img, y, x, run) in runs.parts() {
            let part = &mut out[q..q + run];
            let at = img * self.image + r / taps * len;
            // SAFETY: channel `r / taps` of image `img` lies inside the input (the
            // constructor's contract).
            let plane = unsafe { std::slice::from_raw_parts(self.x.add(at), len) };
            match tap.input_row(y, self.h) {
                None => part.fill(0.0),
                Some(iy) => {
                    tap.gather_part(&plane[iy * self.w..(iy + 1) * self.w], x, part, self.phased)
                }
            }
        }
        out[runs.lanes..].fill(0.0);
    }

    /// Rows `rows` of the column matrix at the pixels of `runs` (at most 64), one per line of
    /// `lines`.
    fn fill_lines(&self, rows: Range<usize>, runs: &Runs, lines: &mut [[f32; 64]]) {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if self.contiguous && crate::gemm::available() {
            let out = (lines.as_mut_ptr().cast::<f32>(), 64, runs.lanes);
            // SAFETY: the GEMM runs here (checked); `lines` holds a line of 64 floats per row.
            return unsafe { masked::fill(self, rows, runs, out) };
        }
        for (r, line) in rows.zip(lines.iter_mut()) {
            self.fill_runs(r, runs, &mut line[..runs.lanes]);
        }
    }
}

impl Source for Columns<'_> {
    unsafe fn pack(&self, p0: usize, kc: usize, j0: usize, nc: usize, out: &mut [f32]) {
        // Transposed, a strip's 32 columns are 32 rows of the column matrix: each filled 64
        // pixels at a time into `tile`, whose columns are then the strip's rows (writing down
        // the 64 KiB strip a column at a time would leave the first-level cache).
        const STEPS: usize = 64;
        let mut tile = [[0f32; STEPS]; NR];
        for (t, strip) in out.chunks_exact_mut(NR * kc).enumerate() {
            let (lo, cols) = (j0 + t * NR, NR.min(nc - t * NR));
            if !self.transposed {
                // Every row of the strip reads the same pixels: their output rows are found
                // once per strip.
                let runs = Runs::new(lo, cols, (self.ho, self.wo));
                #[cfg(all(target_arch = "x86_64", not(miri)))]
                if self.contiguous && crate::gemm::available() {
                    // SAFETY: the GEMM runs here (checked); the strip holds `kc` rows of `NR`.
                    unsafe { masked::fill(self, p0..p0 + kc, &runs, (strip.as_mut_ptr(), NR, NR)) };
                    continue;
                }
                for (p, dst) in strip.chunks_exact_mut(NR).enumerate() {
                    self.fill_runs(p0 + p, &runs, dst);
                }
                continue;
            }
            for start in (0..kc).step_by(STEPS) {
                let len = STEPS.min(kc - start);
                let runs = Runs::new(p0 + start, len, (self.ho, self.wo));
                self.fill_lines(lo..lo + cols, &runs, &mut tile);
                for line in &mut tile[cols..] {
                    line[..len].fill(0.0);
                }
                // Whole 16-step blocks by register transposes, the last few steps one by one.
                let whole = len / 16 * 16;
                for p in (0..whole).step_by(16) {
                    for j in (0..NR).step_by(16) {
                        let dst = &mut strip[(start + p) * NR + j..];
                        // SAFETY: `Columns` are built only where the GEMM runs; the
                        // tile's lines `j..j + 16` hold steps `p..p + 16`.
                        unsafe {
                            let src = tile.as_ptr().cast::<f32>().add(j * STEPS + p);
                            transpose16(src, STEPS, dst)
                        };
                    }
                }
                for (p, row) in strip[start * NR..]
                    .chunks_exact_mut(NR)
                    .take(len)
                    .enumerate()
                    .skip(whole)
                {
                    for (v, line) in row.iter_mut().zip(tile.iter()) {
                        *v = line[p];
                    }
                }
            }
        }
    }
}

/// The output rows that a run of at most 64 consecutive pixels (of a run of images) crosses:
/// for each, the first lane (place in the run), the image, the output row and column it starts
/// at, and its lanes.
struct Runs {
    parts: [(usize, usize, usize, usize, usize); 64],
    len: usize,
    /// The run's length in pixels.
    lanes: usize,
}

impl Runs {
    /// Pixels `from..from + lanes` of images of `ho x wo` outputs (`lanes <= 64`).
    fn new(from: usize, lanes: usize, (ho, wo): (usize, usize)) -> Self {
        let mut runs = Runs {
            parts: [(0, 0, 0, 0, 0); 64],
            len: 0,
            lanes,
        };
        let wo = wo.max(1);
        let (mut q, mut row, mut x) = (0, from / wo, from % wo);
        while q < lanes {
            let run = (wo - x).min(lanes - q);
            runs.parts[runs.len] = (q, row / ho.max(1), row % ho.max(1), x, run);
            runs.len += 1;
            (q, row, x) = (q + run, row + 1, 0);
        }
        runs
    }

    fn parts(&self) -> &[(usize, usize, usize, usize, usize)] {
        &self.parts[..self.len]
    }
}

/// The column rows' runs in masked vector loads: a run of a tap that reads inside its input
/// row is one contiguous stretch of that row (stride 1, or rows grouped by phase), so each
/// vector's piece of it is one masked load, aimed so that lane `q` reads the run's element `q`;
/// lanes of padding stay zero. Memory calls for runs as short as a 7-wide row cost more than
/// the copy (they took a third of a 3x3 convolution's time). Written once over [`Lanes`], so
/// it runs with AVX2 as with AVX-512.
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod masked {
    use std::ops::Range;

    use super::{Columns, Runs, Tap};
    use crate::ops::simd::{widest, Lanes};

    widest! {
        /// [`fill_rows`], with registers for 32 lanes where `runs` and `width` fit them (a
        /// strip of the GEMM), else for 64.
        ///
        /// # Safety
        /// As [`fill_rows`]'s; [`crate::gemm::available`].
        fn fill(
            cols: &Columns<'_>,
            rows: Range<usize>,
            runs: &Runs,
            out: (*mut f32, usize, usize),
        ) => fill_in;
    }

    #[inline(always)]
    unsafe fn fill_in<L: Lanes>(
        l: L,
        cols: &Columns<'_>,
        rows: Range<usize>,
        runs: &Runs,
        out: (*mut f32, usize, usize),
    ) {
        // SAFETY: the caller's contract; the lanes fit the registers chosen.
        unsafe {
            match runs.lanes.max(out.2) <= 32 {
                true => fill_rows::<L, 32>(l, cols, rows, runs, out),
                false => fill_rows::<L, 64>(l, cols, rows, runs, out),
            }
        }
    }

    /// Writes rows `rows` of the column matrix at the pixels of `runs` (at most `LANES`) to
    /// `out`, row `i` of them at `out + i * stride`, `width` floats each (zeros past
    /// `runs.lanes`).
    ///
    /// # Safety
    /// `cols.contiguous`; `runs.lanes` and `width` at most `LANES`, which is at most 64; the
    /// rows' `width` floats at `out` are valid to write.
    #[inline(always)]
    unsafe fn fill_rows<L: Lanes, const LANES: usize>(
        l: L,
        cols: &Columns<'_>,
        rows: Range<usize>,
        runs: &Runs,
        (out, stride, width): (*mut f32, usize, usize),
    ) {
        // The vectors of a row (at most 8: 64 lanes of 8), a constant once the width is known,
        // so the loops over them unroll and the row stays in registers.
        let vectors = LANES / L::N;
        let lane_bits = (1u64 << L::N) - 1;
        let taps = cols.taps.len();
        let plane_len = cols.h * cols.w;
        // A row's loads depend on its tap, not on its channel: each tap's are found once, the
        // first time a row of it comes, as offsets from the channel's plane and lane masks,
        // where they had been found again for every channel.
        let mut found: Vec<Option<Range<usize>>> = vec![None; taps];
        let mut loads: Vec<(isize, u64)> = Vec::new();
        for (i, r) in rows.enumerate() {
            let t = r % taps;
            let range = match &found[t] {
                Some(range) => range.clone(),
                None => {
                    let start = loads.len();
                    plan(cols, &cols.taps[t], runs, &mut loads);
                    found[t] = Some(start..loads.len());
                    start..loads.len()
                }
            };
            let channel = cols.x.wrapping_add(r / taps * plane_len);
            let mut acc = [l.splat(0.0); 8];
            for &(offset, mask) in &loads[range] {
                // Lane `q` reads element `q` from `base`: the base may lie before the row, but
                // only the mask's lanes load, and they read inside it.
                let base = channel.wrapping_offset(offset);
                for (v, reg) in acc.iter_mut().enumerate().take(vectors) {
                    let m = (mask >> (L::N * v)) & lane_bits;
                    if m != 0 {
                        // SAFETY: the set lanes read elements of the tap's input row, inside
                        // the input; the others do not touch memory.
                        *reg = unsafe { l.load_lanes(*reg, base.wrapping_add(L::N * v), m as u32) };
                    }
                }
            }
            let dst = out.wrapping_add(i * stride);
            for (v, reg) in acc.iter().enumerate().take(vectors) {
                let n = width.saturating_sub(L::N * v);
                if n > 0 {
                    // SAFETY: the first `n` floats there are the row's (the contract).
                    unsafe { l.store(dst.wrapping_add(L::N * v), *reg, n) };
                }
            }
        }
    }

    /// Lanes `lo..hi` of a 64-lane mask.
    fn lanes(lo: usize, hi: usize) -> u64 {
        let upto = |n: usize| if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
        upto(hi) & !upto(lo)
    }

    /// Appends the loads of `tap`'s row at the pixels of `runs` to `loads`: for each part of a
    /// run that reads inside its input row, where lane 0 would read (an offset from the
    /// channel's plane) and the lanes that read.
    fn plan(cols: &Columns<'_>, tap: &Tap, runs: &Runs, loads: &mut Vec<(isize, u64)>) {
        let Some((span, at)) = tap.run() else {
            return;
        };
        for &(q, img, y, x, run) in runs.parts() {
            let Some(iy) = tap.input_row(y, cols.h) else {
                continue;
            };
            // The part of this run that reads inside the row: its columns, its lanes, and the
            // row's element under its first lane.
            let (xa, xb) = (x.max(span.start), (x + run).min(span.end));
            if xa >= xb {
                continue;
            }
            let first = match cols.phased {
                true => at.start,
                false => tap.first_input(),
            } + (xa - span.start);
            let (la, lb) = (q + xa - x, q + xb - x);
            let element = img * cols.image + iy * cols.w + first;
            loads.push((element as isize - la as isize, lanes(la, lb)));
        }
    }
}
