//! Float32 3x3 convolutions of stride 1 by Winograd's minimal filtering F(2x2, 3x3): each
//! 2x2 block of output pixels (a tile) from the 4x4 block of input under it, in 16
//! multiplications per channel and filter instead of 36, the rest additions.
//!
//! ```text
//! U[xi][f][c] = (G  w[f][c]  G^T)[xi]     every filter and channel, once per call
//! V[xi][c][t] = (B^T d[c][t] B)[xi]       every channel's 4x4 input block of tile t
//! M[xi]       = U[xi] x V[xi]             16 products (filters x channels by channels x tiles)
//! y[f][t]     = A^T M[.][f][t] A          the tile's 2x2 outputs
//! ```
//!
//! with `xi` the 16 positions of a 4x4 block and, for F(2x2, 3x3):
//!
//! ```text
//! B^T = | 1  0 -1  0 |     G = |  1    0    0  |     A^T = | 1  1  1  0 |
//!       | 0  1  1  0 |         | 1/2  1/2  1/2 |           | 0  1 -1 -1 |
//!       | 0 -1  1  0 |         | 1/2 -1/2  1/2 |
//!       | 0  1  0 -1 |         |  0    0    1  |
//! ```
//!
//! The products carry 16/36 of a direct convolution's multiply-adds and run on the GEMM's
//! micro-kernel; the transforms are additions over contiguous rows of tiles. The tiles are
//! taken a run of tile rows at a time (a chunk, a few MiB of `V` and `M`), and each of a
//! chunk's three steps is split across threads: the input transform by channel, the products
//! by position, the output transform by filter. The same code computes a 3x3 convolution's
//! data gradient: the convolution of the output gradient with the window flipped and the
//! filters and channels swapped, padded by `2 - p`. The sums are grouped differently from a
//! direct convolution's, so results differ from it by rounding (a few units in the last place
//! of the inputs' magnitude); `MXRS_CONV_WINOGRAD=0` turns it off.

use std::sync::OnceLock;

use super::conv::{Conv, ConvDims};
use super::par::{for_ranges, Shared};
use crate::gemm::{sgemm_serial, Batches, Mat};
use crate::resources::KernelRes;
use crate::DType;

/// Floats of `V` and `M` a chunk of tiles takes at most (8 MiB), unless one tile row needs
/// more.
const CHUNK_FLOATS: usize = 2 << 20;

/// Tiles below which a convolution keeps the implicit GEMM: ResNet's last stage at batch 1
/// (16 tiles of 512 channels) pads each product's 32-wide strips by half and reads all of
/// `U` (16 MiB) for a few columns.
const MIN_TILES: usize = 64;

/// One convolution as this file computes it: `out (n, f, ho, wo) = conv(x (n, ch, h, w), w)`
/// with a 3x3 window of stride 1 and padding `p`.
#[derive(Clone, Copy, Debug)]
struct Problem {
    n: usize,
    ch: usize,
    f: usize,
    h: usize,
    w: usize,
    ho: usize,
    wo: usize,
    p: (usize, usize),
}

impl Problem {
    /// Tile rows and tiles per row of one image.
    fn tiles(&self) -> (usize, usize) {
        (self.ho.div_ceil(2), self.wo.div_ceil(2))
    }

    /// Whether the products are large enough to pay for the transforms.
    fn worth(&self) -> bool {
        let (th, tw) = self.tiles();
        self.ch >= 16 && self.f >= 16 && self.n * th * tw >= MIN_TILES
    }
}

/// Whether `MXRS_CONV_WINOGRAD` leaves Winograd's convolutions on (unset, `1`, `on`, `true`);
/// read once.
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("MXRS_CONV_WINOGRAD").map_or(true, |v| {
            !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "0" | "off" | "false"
            )
        })
    })
}

/// Whether `c` is a convolution this file computes: f32 on an AVX-512 CPU, one group, a 3x3
/// window of stride 1 and dilation 1, padding at most 2 (so that its data gradient's padding,
/// `2 - p`, is one too).
fn eligible(c: &Conv, dtype: DType) -> bool {
    enabled()
        && dtype == DType::F32
        && crate::gemm::available()
        && c.groups == 1
        && c.k == (3, 3)
        && c.s == (1, 1)
        && c.d == (1, 1)
        && c.p.0 <= 2
        && c.p.1 <= 2
}

fn forward_problem(c: &Conv, d: &ConvDims) -> Problem {
    Problem {
        n: d.n,
        ch: d.ch,
        f: c.filters,
        h: d.h,
        w: d.w,
        ho: d.ho,
        wo: d.wo,
        p: c.p,
    }
}

/// The data gradient as a convolution of the output gradient.
fn data_gradient_problem(c: &Conv, d: &ConvDims) -> Problem {
    Problem {
        n: d.n,
        ch: c.filters,
        f: d.ch,
        h: d.ho,
        w: d.wo,
        ho: d.h,
        wo: d.w,
        p: (2 - c.p.0, 2 - c.p.1),
    }
}

/// Whether the forward pass of `c` over `d` runs here.
pub(super) fn forward_applies(c: &Conv, d: &ConvDims, dtype: DType) -> bool {
    eligible(c, dtype) && forward_problem(c, d).worth()
}

/// Whether the data gradient of `c` over `d` runs here.
pub(super) fn data_gradient_applies(c: &Conv, d: &ConvDims, dtype: DType) -> bool {
    eligible(c, dtype) && data_gradient_problem(c, d).worth()
}

/// `out = conv(x, w)` (no bias: the caller adds it).
///
/// # Safety
/// The pointers hold the shapes `d` gives (data, weights, output); the output is disjoint from
/// the inputs; [`forward_applies`] holds.
pub(super) unsafe fn forward(
    c: &Conv,
    d: &ConvDims,
    (x, wt, out): (*const f32, *const f32, *mut f32),
    res: &mut KernelRes,
) -> Result<(), String> {
    // SAFETY: the caller's contract.
    unsafe { run(&forward_problem(c, d), (x, wt, false), out, res) }
}

/// `dx` of a convolution from its output gradient `dy`, overwritten.
///
/// # Safety
/// The pointers hold the shapes `d` gives (output gradient, weights, data gradient); `dx` is
/// disjoint from the inputs; [`data_gradient_applies`] holds.
pub(super) unsafe fn data_gradient(
    c: &Conv,
    d: &ConvDims,
    (dy, wt): (*const f32, *const f32),
    dx: *mut f32,
    res: &mut KernelRes,
) -> Result<(), String> {
    // SAFETY: the caller's contract.
    unsafe { run(&data_gradient_problem(c, d), (dy, wt, true), dx, res) }
}

/// The convolution `pr` of `x` into `out`; `wt` holds its weights `(f, ch, 3, 3)`, or with
/// `flipped` the weights `(ch, f, 3, 3)` of the convolution whose data gradient `pr` is.
///
/// # Safety
/// As [`forward`], for `pr`'s shapes.
unsafe fn run(
    pr: &Problem,
    inputs: (*const f32, *const f32, bool),
    out: *mut f32,
    res: &mut KernelRes,
) -> Result<(), String> {
    let rows = chunk_rows(pr);
    let temp = res.temp(temp_floats(pr, rows) * 4)?.cast::<f32>();
    // SAFETY: the temp space holds what `compute` needs; the rest is the caller's contract.
    unsafe { compute(pr, inputs, out, temp, rows) };
    Ok(())
}

/// Tile rows per chunk: as many as `CHUNK_FLOATS` holds, at least one.
fn chunk_rows(pr: &Problem) -> usize {
    let (th, tw) = pr.tiles();
    (CHUNK_FLOATS / (16 * (pr.ch + pr.f) * tw)).clamp(1, pr.n * th)
}

/// Floats of temp space for chunks of `rows` tile rows: `U`, then a chunk's `V` and `M`.
fn temp_floats(pr: &Problem, rows: usize) -> usize {
    16 * pr.f * pr.ch + 16 * (pr.ch + pr.f) * rows * pr.tiles().1
}

/// [`run`] in chunks of `chunk` tile rows, in `temp`.
///
/// # Safety
/// As [`run`]; `temp` holds [`temp_floats`]`(pr, chunk)` floats; the CPU has AVX-512F.
unsafe fn compute(
    pr: &Problem,
    (x, wt, flipped): (*const f32, *const f32, bool),
    out: *mut f32,
    temp: *mut f32,
    chunk: usize,
) {
    let (th, tw) = pr.tiles();
    let tile_rows = pr.n * th;
    let u_len = 16 * pr.f * pr.ch;
    // SAFETY: `temp` holds `U`, then a chunk's `V` and `M`; the rest is the caller's contract.
    unsafe {
        let (v, m) = (temp.add(u_len), temp.add(u_len + 16 * pr.ch * chunk * tw));
        transform_weights(pr, wt, flipped, temp);
        for r0 in (0..tile_rows).step_by(chunk) {
            let rows = (r0, chunk.min(tile_rows - r0));
            transform_input(pr, x, rows, v);
            multiply(pr, temp, v, m, rows.1 * tw);
            transform_output(pr, m, rows, out);
        }
    }
}

/// `U[xi][f][c] = (G w[f][c] G^T)[xi]`, split across threads by filter.
///
/// # Safety
/// `wt` holds `f * ch * 9` floats, `u` `16 * f * ch`.
unsafe fn transform_weights(pr: &Problem, wt: *const f32, flipped: bool, u: *mut f32) {
    let (f, ch) = (pr.f, pr.ch);
    let (wt, u) = (Shared::new(wt), Shared::new(u.cast_const()));
    for_ranges(f, ch * 64, |lo, hi| {
        for o in lo..hi {
            for i in 0..ch {
                let mut g = [[0f32; 3]; 3];
                for (ky, row) in g.iter_mut().enumerate() {
                    for (kx, v) in row.iter_mut().enumerate() {
                        // Flipped: this convolution's filter `o` is the original's channel
                        // `o`, its channel `i` the original's filter `i`, its window reversed.
                        let at = match flipped {
                            false => (o * ch + i) * 9 + ky * 3 + kx,
                            true => (i * f + o) * 9 + (2 - ky) * 3 + (2 - kx),
                        };
                        // SAFETY: inside the weights (the contract).
                        *v = unsafe { wt.read(at) };
                    }
                }
                // G g (4x3), then (G g) G^T (4x4).
                let gg = [
                    g[0],
                    std::array::from_fn(|j| 0.5 * (g[0][j] + g[1][j] + g[2][j])),
                    std::array::from_fn(|j| 0.5 * (g[0][j] - g[1][j] + g[2][j])),
                    g[2],
                ];
                for (r, t) in gg.iter().enumerate() {
                    let row = [
                        t[0],
                        0.5 * (t[0] + t[1] + t[2]),
                        0.5 * (t[0] - t[1] + t[2]),
                        t[2],
                    ];
                    for (q, &value) in row.iter().enumerate() {
                        // SAFETY: inside `U`; row `o` of every position is this range's.
                        unsafe { u.write(((r * 4 + q) * f + o) * ch + i, value) };
                    }
                }
            }
        }
    });
}

/// `V[xi][c][t]` for the chunk's tile rows `r0..r0 + rows` (tile row `r`: image `r / th`, row
/// `r % th`), split across threads by channel. `V[xi]` is `ch x tiles`, row-major.
///
/// # Safety
/// `x` holds the problem's input; `v` holds `16 * ch * rows * tw` floats.
unsafe fn transform_input(pr: &Problem, x: *const f32, (r0, rows): (usize, usize), v: *mut f32) {
    let (th, tw) = pr.tiles();
    let tiles = rows * tw;
    let (x, v) = (Shared::new(x), Shared::new(v.cast_const()));
    let pr = *pr;
    for_ranges(pr.ch, tiles * 16, move |lo, hi| {
        // Four input rows padded to `2 * tw + 2` columns, then their sums split into even and
        // odd columns.
        let len = 2 * tw + 2;
        let mut padded = vec![0f32; 4 * len];
        let mut halves = vec![0f32; 8 * (tw + 1)];
        for c in lo..hi {
            for r in r0..r0 + rows {
                let (img, ty) = (r / th, r % th);
                for (k, row) in padded.chunks_exact_mut(len).enumerate() {
                    let y = (2 * ty + k).wrapping_sub(pr.p.0);
                    row.fill(0.0);
                    if y < pr.h {
                        // SAFETY: row `y` of channel `c` of image `img` is inside `x`.
                        let from = unsafe { x.piece((img * pr.ch + c) * pr.h + y, pr.w) };
                        row[pr.p.1..pr.p.1 + pr.w].copy_from_slice(from);
                    }
                }
                let t0 = (r - r0) * tw;
                // SAFETY: the CPU has AVX-512 (`eligible`); the writes are channel `c`'s
                // columns `t0..t0 + tw` of each `V[xi]`, this range's alone.
                unsafe {
                    input_rows(&padded, &mut halves, tw);
                    for xi in 0..16 {
                        let to = v.get().add((xi * pr.ch + c) * tiles + t0);
                        input_columns(&halves, xi, tw, to);
                    }
                }
            }
        }
    });
}

/// `B^T d` down the four padded rows `d0..d3` (`len = 2 * tw + 2` each), each of the four
/// sums split into its even columns and its odd ones: `halves[2 * k]` and `halves[2 * k + 1]`,
/// `tw + 1` floats each.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg_attr(
    all(target_arch = "x86_64", not(miri)),
    target_feature(enable = "avx512f")
)]
unsafe fn input_rows(padded: &[f32], halves: &mut [f32], tw: usize) {
    let len = 2 * tw + 2;
    let half = tw + 1;
    let d = |k: usize, j: usize| padded[k * len + j];
    for j in 0..half {
        for (parity, col) in [(0, 2 * j), (1, 2 * j + 1)] {
            let (a, b, c, e) = (d(0, col), d(1, col), d(2, col), d(3, col));
            halves[parity * half + j] = a - c;
            halves[(2 + parity) * half + j] = b + c;
            halves[(4 + parity) * half + j] = c - b;
            halves[(6 + parity) * half + j] = b - e;
        }
    }
}

/// Position `xi = 4 * k + q` of every tile in a row: `(B^T d)_k B` column `q`, from the even
/// (`e`) and odd (`o`) columns of sum `k`: `e0 - e1`, `o0 + e1`, `e1 - o0`, `o0 - o1`, where
/// `e0, o0` are the tile's first two columns and `e1, o1` the next two.
///
/// # Safety
/// The CPU has AVX-512F; `to` holds `tw` floats.
#[cfg_attr(
    all(target_arch = "x86_64", not(miri)),
    target_feature(enable = "avx512f")
)]
unsafe fn input_columns(halves: &[f32], xi: usize, tw: usize, to: *mut f32) {
    let half = tw + 1;
    let (k, q) = (xi / 4, xi % 4);
    let e = &halves[2 * k * half..][..half];
    let o = &halves[(2 * k + 1) * half..][..half];
    // SAFETY: the contract.
    let to = unsafe { std::slice::from_raw_parts_mut(to, tw) };
    match q {
        0 => (0..tw).for_each(|j| to[j] = e[j] - e[j + 1]),
        1 => (0..tw).for_each(|j| to[j] = o[j] + e[j + 1]),
        2 => (0..tw).for_each(|j| to[j] = e[j + 1] - o[j]),
        _ => (0..tw).for_each(|j| to[j] = o[j] - o[j + 1]),
    }
}

/// `M[xi] = U[xi] x V[xi]` for the chunk's `tiles` tiles, the 16 products split across
/// threads.
///
/// # Safety
/// `u`, `v` and `m` hold `U`, the chunk's `V` and room for its `M`; the CPU has AVX-512F.
unsafe fn multiply(pr: &Problem, u: *const f32, v: *const f32, m: *mut f32, tiles: usize) {
    let (f, ch) = (pr.f, pr.ch);
    let (u, v, m) = (Shared::new(u), Shared::new(v), Shared::new(m.cast_const()));
    for_ranges(16, f * ch * tiles, move |lo, hi| {
        for xi in lo..hi {
            // SAFETY: the blocks lie inside the buffers; `M[xi]` is this range's alone.
            unsafe {
                let a = Mat::row_major(u.get().add(xi * f * ch).cast_const(), ch);
                let b = Mat::row_major(v.get().add(xi * ch * tiles).cast_const(), tiles);
                let c = Mat::row_major(m.get().add(xi * f * tiles), tiles);
                sgemm_serial(f, ch, tiles, &a, &b, Batches::whole(c));
            }
        }
    });
}

/// The outputs of the chunk's tile rows, `A^T M A` per tile, split across threads by filter.
///
/// # Safety
/// `m` holds the chunk's `M`; `out` the problem's output; the CPU has AVX-512F.
unsafe fn transform_output(pr: &Problem, m: *const f32, (r0, rows): (usize, usize), out: *mut f32) {
    let (th, tw) = pr.tiles();
    let tiles = rows * tw;
    let (m, out) = (Shared::new(m), Shared::new(out.cast_const()));
    let pr = *pr;
    for_ranges(pr.f, tiles * 16, move |lo, hi| {
        let mut lines = vec![0f32; 4 * tw];
        for o in lo..hi {
            for r in r0..r0 + rows {
                let (img, ty) = (r / th, r % th);
                let t0 = (r - r0) * tw;
                // SAFETY: the chunk's `M` holds every position's row `o`, columns
                // `t0..t0 + tw`, written before this step began.
                let at = |xi: usize| unsafe {
                    std::slice::from_raw_parts(m.get().add((xi * pr.f + o) * tiles + t0), tw)
                };
                // SAFETY: the CPU has AVX-512F (the contract).
                unsafe { output_tiles(&at, &mut lines, tw) };
                for a in 0..2 {
                    let y = 2 * ty + a;
                    if y >= pr.ho {
                        break;
                    }
                    // SAFETY: row `y` of filter `o` of image `img` is this range's alone.
                    let to = unsafe { out.piece_mut((img * pr.f + o) * pr.ho + y, pr.wo) };
                    let (left, right) =
                        (&lines[2 * a * tw..][..tw], &lines[(2 * a + 1) * tw..][..tw]);
                    for (j, v) in to.iter_mut().enumerate() {
                        *v = if j % 2 == 0 {
                            left[j / 2]
                        } else {
                            right[j / 2]
                        };
                    }
                }
            }
        }
    });
}

/// `A^T M A` for a row of `tw` tiles, position `xi`'s values from `at(xi)`: `lines` gets the
/// tiles' outputs `y00`, `y01`, `y10`, `y11` as four runs of `tw`.
///
/// # Safety
/// The CPU has AVX-512F; each `at(xi)` holds `tw` floats.
#[cfg_attr(
    all(target_arch = "x86_64", not(miri)),
    target_feature(enable = "avx512f")
)]
unsafe fn output_tiles<'a>(at: &impl Fn(usize) -> &'a [f32], lines: &mut [f32], tw: usize) {
    let rows: [[&[f32]; 4]; 4] = std::array::from_fn(|k| std::array::from_fn(|q| at(4 * k + q)));
    let (top, bottom) = lines.split_at_mut(2 * tw);
    let (y00, y01) = top.split_at_mut(tw);
    let (y10, y11) = bottom.split_at_mut(tw);
    for j in 0..tw {
        // A^T M: the first output row sums rows 0..3 of M, the second takes 1 - 2 - 3.
        let s0: [f32; 4] = std::array::from_fn(|q| rows[0][q][j] + rows[1][q][j] + rows[2][q][j]);
        let s1: [f32; 4] = std::array::from_fn(|q| rows[1][q][j] - rows[2][q][j] - rows[3][q][j]);
        y00[j] = s0[0] + s0[1] + s0[2];
        y01[j] = s0[1] - s0[2] - s0[3];
        y10[j] = s1[0] + s1[1] + s1[2];
        y11[j] = s1[1] - s1[2] - s1[3];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// `compute` in chunks of every size against the definitions of a 3x3 convolution and
    /// of its data gradient (sums in f64), over the paddings 0, 1 and 2 and images whose
    /// sides are odd (tiles cut by the edge) and even.
    #[test]
    fn tiles_match_the_definitions_in_chunks_of_every_size() {
        if !crate::gemm::available() {
            eprintln!("skipped: the CPU has no AVX-512F");
            return;
        }
        let (n, ch, f, h, w) = (2, 3, 5, 7, 6);
        for p in 0..=2 {
            let (ho, wo) = (h + 2 * p - 2, w + 2 * p - 2);
            let x = values(n * ch * h * w, 1);
            let wt = values(f * ch * 9, 2);
            let dy = values(n * f * ho * wo, 3);
            // y[i][o][a][b] = sum x[i][c][a + ky - p][b + kx - p] w[o][c][ky][kx]
            let mut y = vec![0f64; n * f * ho * wo];
            let mut dx = vec![0f64; n * ch * h * w];
            for i in 0..n {
                for o in 0..f {
                    for c in 0..ch {
                        for (a, b, ky, kx) in
                            (0..ho * wo * 9).map(|z| (z / (wo * 9), z / 9 % wo, z % 9 / 3, z % 3))
                        {
                            let (r, s) = ((a + ky).wrapping_sub(p), (b + kx).wrapping_sub(p));
                            if r >= h || s >= w {
                                continue;
                            }
                            let wv = f64::from(wt[(o * ch + c) * 9 + ky * 3 + kx]);
                            let xi = ((i * ch + c) * h + r) * w + s;
                            let yi = ((i * f + o) * ho + a) * wo + b;
                            y[yi] += f64::from(x[xi]) * wv;
                            dx[xi] += f64::from(dy[yi]) * wv;
                        }
                    }
                }
            }
            let forward = Problem {
                n,
                ch,
                f,
                h,
                w,
                ho,
                wo,
                p: (p, p),
            };
            let backward = Problem {
                ch: f,
                f: ch,
                h: ho,
                w: wo,
                ho: h,
                wo: w,
                p: (2 - p, 2 - p),
                ..forward
            };
            for (pr, input, flipped, want) in [(forward, &x, false, &y), (backward, &dy, true, &dx)]
            {
                for chunk in 1..=pr.n * pr.tiles().0 {
                    let mut temp = vec![0f32; temp_floats(&pr, chunk)];
                    let mut got = vec![f32::NAN; want.len()];
                    // SAFETY: the buffers hold the problem's shapes and the temp space.
                    unsafe {
                        compute(
                            &pr,
                            (input.as_ptr(), wt.as_ptr(), flipped),
                            got.as_mut_ptr(),
                            temp.as_mut_ptr(),
                            chunk,
                        )
                    };
                    for (k, (&g, &v)) in got.iter().zip(want.iter()).enumerate() {
                        assert!(
                            (f64::from(g) - v).abs() <= 1e-5,
                            "pad {p}, flipped {flipped}, chunks of {chunk} rows: element {k} \
                             is {g}, the definition gives {v}"
                        );
                    }
                }
            }
        }
    }
}
