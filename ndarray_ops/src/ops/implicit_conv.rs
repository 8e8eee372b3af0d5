//! Float32 convolutions on AVX-512 CPUs as implicit GEMMs: the GEMM ([`crate::gemm`]) packs
//! its strips of the column matrix straight from the data ([`Columns`]) instead of reading a
//! column matrix that im2col wrote, so the columns (7 MiB for a 3x3 convolution of 64 channels
//! over 56x56) never pass through memory.
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

use super::backward::col2im;
use super::conv::{by_phase, Conv, ConvDims, Tap};
use crate::gemm::{sgemm_packing, Mat, Source, NR};
use crate::resources::KernelRes;
use crate::DType;

/// Whether a convolution of `dtype` runs here: f32 on a CPU with AVX-512, with a window that
/// needs columns (a 1x1 window of stride 1 without padding reads the data as they are).
pub(super) fn applies(c: &Conv, dtype: DType) -> bool {
    !c.columns_are_input() && dtype == DType::F32 && crate::gemm::available()
}

/// `out = conv(x, w)` (no bias: the caller adds it).
///
/// # Safety
/// The pointers hold the shapes `dims` gives (data, weights, output); the output is disjoint
/// from the inputs; [`applies`] holds.
pub(super) unsafe fn forward(
    c: &Conv,
    d: &ConvDims,
    (x, wt, out): (*const f32, *const f32, *mut f32),
    res: &mut KernelRes,
) -> Result<(), String> {
    let taps = Tap::window(c.k, c.s, c.p, c.d, d.w, d.wo);
    let phased = phases(c);
    let by = match phased {
        true => res.temp(d.cg * d.h * d.w * 4)?.cast::<f32>(),
        false => std::ptr::null_mut(),
    };
    for img in 0..d.n {
        for g in 0..c.groups {
            // SAFETY: image `img`, group `g` lies inside each buffer (the contract); `by` holds
            // a group's data when `phased`.
            unsafe {
                let xg = x.add((img * d.ch + g * d.cg) * d.h * d.w);
                let src = if phased { phase(c, d, xg, by) } else { xg };
                let b = Columns::new(src, (d.h, d.w, d.wo), &taps, (phased, false));
                let a = Mat {
                    ptr: wt.add(g * d.fg * d.rows),
                    rs: d.rows as isize,
                    cs: 1,
                };
                let og = out.add((img * c.filters + g * d.fg) * d.ho * d.wo);
                let cm = Mat {
                    ptr: og,
                    rs: (d.ho * d.wo) as isize,
                    cs: 1,
                };
                sgemm_packing(d.fg, d.rows, d.ho * d.wo, a, &b, 0.0, cm);
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
    let taps = Tap::window(c.k, c.s, c.p, c.d, d.w, d.wo);
    let phased = phases(c);
    // The data gradient as a convolution of dY where its padding is a padding (stride 1), and
    // where flipping the weights (`cg * fg * taps` copies) costs less than the columns would
    // (a write and col2im's read of `cg * taps * pixels` per image): ResNet's 3x3 convolutions
    // of 512 channels on 7x7 at batch 1 ran at half the rate flipped.
    let flipped = c.s == (1, 1)
        && c.p.0 <= c.d.0 * (c.k.0 - 1)
        && c.p.1 <= c.d.1 * (c.k.1 - 1)
        && d.fg <= 2 * d.h * d.w * d.n;
    let back_taps = match flipped {
        true => {
            let pad = (c.d.0 * (c.k.0 - 1) - c.p.0, c.d.1 * (c.k.1 - 1) - c.p.1);
            Tap::window(c.k, (1, 1), pad, c.d, d.wo, d.w)
        }
        false => Vec::new(),
    };
    // Temp space: the flipped weights of every group, or the data gradient's columns; then a
    // group's data by phase.
    let first = match flipped {
        true => c.groups * d.cg * d.fg * c.k.0 * c.k.1,
        false => d.rows * d.ho * d.wo,
    };
    let second = if phased { d.cg * d.h * d.w } else { 0 };
    let temp = res.temp((first + second) * 4)?.cast::<f32>();
    // SAFETY: the temp space holds `first + second` floats; every slice below lies inside its
    // buffer (the contract).
    unsafe {
        let (work, by) = (temp, temp.add(first));
        std::slice::from_raw_parts_mut(dw, c.filters * d.rows).fill(0.0);
        if flipped {
            flip(c, d, wt, work);
        }
        for img in 0..d.n {
            for g in 0..c.groups {
                let xg = x.add((img * d.ch + g * d.cg) * d.h * d.w);
                let dxg = dx.add((img * d.ch + g * d.cg) * d.h * d.w);
                let dyg = dy.add((img * c.filters + g * d.fg) * d.ho * d.wo);
                let pixels = d.ho * d.wo;
                // Weight gradient: dY_g x cols(X_g)^T, summed over images.
                let src = if phased { phase(c, d, xg, by) } else { xg };
                let b = Columns::new(src, (d.h, d.w, d.wo), &taps, (phased, true));
                let a = Mat {
                    ptr: dyg,
                    rs: pixels as isize,
                    cs: 1,
                };
                let cm = Mat {
                    ptr: dw.add(g * d.fg * d.rows),
                    rs: d.rows as isize,
                    cs: 1,
                };
                sgemm_packing(d.fg, pixels, d.rows, a, &b, 1.0, cm);
                let dxm = Mat {
                    ptr: dxg,
                    rs: (d.h * d.w) as isize,
                    cs: 1,
                };
                if flipped {
                    // Data gradient: the flipped weights over dY's columns.
                    let wg = work.add(g * d.cg * d.fg * c.k.0 * c.k.1);
                    let k = d.fg * c.k.0 * c.k.1;
                    let a = Mat {
                        ptr: wg.cast_const(),
                        rs: k as isize,
                        cs: 1,
                    };
                    let b = Columns::new(dyg, (d.ho, d.wo, d.w), &back_taps, (false, false));
                    sgemm_packing(d.cg, k, d.h * d.w, a, &b, 0.0, dxm);
                } else {
                    // Data gradient: W_g^T x dY_g into columns, scattered back.
                    let a = Mat {
                        ptr: wt.add(g * d.fg * d.rows),
                        rs: 1,
                        cs: d.rows as isize,
                    };
                    let cols = Mat {
                        ptr: work,
                        rs: pixels as isize,
                        cs: 1,
                    };
                    let b = Mat {
                        ptr: dyg,
                        rs: pixels as isize,
                        cs: 1,
                    };
                    crate::gemm::sgemm(d.rows, d.fg, pixels, a, b, 0.0, cols);
                    std::slice::from_raw_parts_mut(dxg, d.cg * d.h * d.w).fill(0.0);
                    col2im::<f32>(work, d.cg, d.h, d.w, c, d.ho, d.wo, dxg);
                }
            }
        }
    }
    Ok(())
}

/// `W'` of every group: `W'[g][ci][f][ky][kx] = W[g*fg + f][ci][kh-1-ky][kw-1-kx]`, the
/// weights of the convolution that is the data gradient.
///
/// # Safety
/// `wt` holds the weights, `out` as many floats.
unsafe fn flip(c: &Conv, d: &ConvDims, wt: *const f32, out: *mut f32) {
    let (kh, kw) = c.k;
    let taps = kh * kw;
    let len = c.filters * d.rows;
    // SAFETY: the contract.
    let (w, out) = unsafe {
        (
            std::slice::from_raw_parts(wt, len),
            std::slice::from_raw_parts_mut(out, len),
        )
    };
    for g in 0..c.groups {
        for f in 0..d.fg {
            for ci in 0..d.cg {
                let from = &w[((g * d.fg + f) * d.cg + ci) * taps..][..taps];
                let to = &mut out[((g * d.cg + ci) * d.fg + f) * taps..][..taps];
                for (t, v) in to.iter_mut().enumerate() {
                    *v = from[taps - 1 - t];
                }
            }
        }
    }
}

/// Whether a convolution's columns read the input grouped by phase: with a horizontal stride a
/// tap's columns are every `s`-th, and copying runs of a phased copy beats reading them one by
/// one where the window is wider than the stride, so that taps share the copy (the first 7x7
/// convolution of a ResNet, stride 2: 71 -> 114 GFLOP/s); a 1x1 window of stride 2 reads a
/// fourth of the input, less than the copy would.
fn phases(c: &Conv) -> bool {
    c.s.1 > 1 && c.k.1 > c.s.1
}

/// Copies a group's data into `by` with each row grouped by phase ([`by_phase`]).
///
/// # Safety
/// `xg` holds a group's data and `by` as many floats; the two are disjoint.
unsafe fn phase(c: &Conv, d: &ConvDims, xg: *const f32, by: *mut f32) -> *const f32 {
    let len = d.cg * d.h * d.w;
    // SAFETY: the contract.
    unsafe {
        by_phase(
            std::slice::from_raw_parts(xg, len),
            d.w,
            c.s.1,
            std::slice::from_raw_parts_mut(by, len),
        )
    };
    by.cast_const()
}

/// A group of one image seen as its column matrix (row `(channel, tap)`, column output pixel),
/// or as that matrix transposed, without writing it: [`Source::pack`] fills the GEMM's strips
/// from the input rows a strip's columns cross.
struct Columns<'a> {
    /// The group's first input channel, `h x w` each.
    x: *const f32,
    h: usize,
    w: usize,
    wo: usize,
    taps: &'a [Tap],
    /// Whether each input row is grouped by phase ([`by_phase`]), so that a tap of a strided
    /// convolution reads one contiguous run.
    phased: bool,
    transposed: bool,
}

// SAFETY: a `Columns` only reads its input, which the kernel holds for the product's length.
unsafe impl Sync for Columns<'_> {}

impl<'a> Columns<'a> {
    /// The columns of the `h x w` channels at `x` (rows grouped by phase when `phased`) under
    /// `taps` (from [`Tap::window`]) with outputs `wo` wide; `transposed` for the matrix pixel
    /// by `(channel, tap)`.
    ///
    /// # Safety
    /// `x` holds every channel a row of the matrix names, for as long as the value lives.
    unsafe fn new(
        x: *const f32,
        (h, w, wo): (usize, usize, usize),
        taps: &'a [Tap],
        (phased, transposed): (bool, bool),
    ) -> Self {
        Columns {
            x,
            h,
            w,
            wo,
            taps,
            phased,
            transposed,
        }
    }

    /// Row `r` of the (untransposed) column matrix, pixels `from..from + out.len()`: one run
    /// per output row the pixels cross.
    fn fill(&self, r: usize, from: usize, out: &mut [f32]) {
        let taps = self.taps.len();
        let tap = &self.taps[r % taps];
        let len = self.h * self.w;
        // SAFETY: channel `r / taps` lies inside the input (the constructor's contract).
        let plane = unsafe { std::slice::from_raw_parts(self.x.add(r / taps * len), len) };
        let (mut q, mut y, mut x) = (0, from / self.wo, from % self.wo);
        while q < out.len() {
            let run = (self.wo - x).min(out.len() - q);
            let part = &mut out[q..q + run];
            match tap.input_row(y, self.h) {
                None => part.fill(0.0),
                Some(iy) => {
                    tap.gather_part(&plane[iy * self.w..(iy + 1) * self.w], x, part, self.phased)
                }
            }
            (q, y, x) = (q + run, y + 1, 0);
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
                for (p, dst) in strip.chunks_exact_mut(NR).enumerate() {
                    self.fill(p0 + p, lo, &mut dst[..cols]);
                    dst[cols..].fill(0.0);
                }
                continue;
            }
            for start in (0..kc).step_by(STEPS) {
                let len = STEPS.min(kc - start);
                for (j, line) in tile.iter_mut().enumerate() {
                    match j < cols {
                        true => self.fill(lo + j, p0 + start, &mut line[..len]),
                        false => line[..len].fill(0.0),
                    }
                }
                for (p, row) in strip[start * NR..]
                    .chunks_exact_mut(NR)
                    .take(len)
                    .enumerate()
                {
                    for (v, line) in row.iter_mut().zip(tile.iter()) {
                        *v = line[p];
                    }
                }
            }
        }
    }
}
