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
//! micro-kernel; the transforms are additions and lane shuffles, a vector of tiles at a time
//! (16 with AVX-512, 8 with AVX2: [`tiles`], written once over
//! [`super::simd::Lanes`]). The tiles are taken
//! a run of tile rows at a time (a chunk: about 1 MiB of `V` and `M`), and a chunk runs on one
//! thread from its input transform to its outputs, in that thread's own slot of `V` and `M`,
//! which stay in its core's cache (split by step across threads, the transforms wrote and the
//! products read them from memory). The same code computes a 3x3 convolution's data gradient:
//! the convolution of the output gradient with the window flipped and the filters and channels
//! swapped, padded by `2 - p`. The sums are grouped differently from a direct convolution's, so
//! results differ from it by rounding (a few units in the last place of the inputs' magnitude);
//! `MXRS_CONV_WINOGRAD=0` turns it off.

use std::sync::OnceLock;

use super::{Conv, ConvDims};
use crate::gemm::{sgemm_serial, Batches, Epilogue, Mat};
use crate::ops::par::{for_ranges, Shared};
use crate::resources::KernelRes;
use crate::DType;

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod tiles;

/// Floats of `V` and `M` a chunk of tiles takes at most, unless it would hold fewer than
/// [`MIN_CHUNK_TILES`] tiles: half the core's second-level cache, as the GEMM's packed block
/// of `b` ([`crate::gemm::half_l2_floats`]: 1 MiB on a Sapphire Rapids core of 2 MiB, 512 KiB
/// on a Zen 4 core of 1 MiB), so that a chunk's `V` and `M` stay there between the
/// transforms and the products.
fn chunk_floats() -> usize {
    crate::gemm::half_l2_floats()
}

/// Floats of temp space the slots of one convolution take at most (64 MiB), unless one slot
/// needs more: on a CPU of many cores, a slot per thread would take a slot's size (for the
/// weight gradient of 512 filters and channels, 16 MiB of sums) times the cores.
const SLOTS_FLOATS: usize = 16 << 20;

/// Tiles a chunk holds at least: its products' columns, which the micro-kernel takes 32 at a
/// time.
const MIN_CHUNK_TILES: usize = 64;

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

/// Whether `MXRS_CONV_WINOGRAD` leaves Winograd's convolutions on (unset, `1`, `on`, `true`) or
/// turns them off (`0`, `off`, `false`); read once. Any other value is an error, which the
/// first convolution that would run here reports.
fn enabled() -> Result<bool, String> {
    static ON: OnceLock<Result<bool, String>> = OnceLock::new();
    ON.get_or_init(|| {
        crate::switches::switch("MXRS_CONV_WINOGRAD")
            .map_err(|reason| format!("MXRS_CONV_WINOGRAD={reason}"))
    })
    .clone()
}

/// Whether `c` is a convolution this file computes: f32 where the GEMM runs, one group, a 3x3
/// window of stride 1 and dilation 1, padding at most 2 (so that its data gradient's padding,
/// `2 - p`, is one too).
fn eligible(c: &Conv, dtype: DType) -> bool {
    enabled().unwrap_or(true)
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
    epilogue: &Epilogue<'_>,
    res: &mut KernelRes,
) -> Result<(), String> {
    // SAFETY: the caller's contract.
    unsafe { run(&forward_problem(c, d), (x, wt, false), (out, epilogue), res) }
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
    unsafe {
        run(
            &data_gradient_problem(c, d),
            (dy, wt, true),
            (dx, &Epilogue::default()),
            res,
        )
    }
}

/// Whether the weight gradient of `c` over `d` runs here.
pub(super) fn weight_gradient_applies(c: &Conv, d: &ConvDims, dtype: DType) -> bool {
    eligible(c, dtype) && forward_problem(c, d).worth()
}

/// `dw` of a convolution from its output gradient `dy` and its data `x`, overwritten.
///
/// By the transposition of F(2x2, 3x3) (F(3x3, 2x2)): a tile's 2x2 output gradient `z` and
/// its 4x4 input block `d` add `G^T [(A z A^T) . (B^T d B)] G` to the 3x3 weight gradient, so
/// per position `xi` the sums over tiles are one product, `S[xi] = Z[xi] x V[xi]^T` (filters x
/// tiles by tiles x channels), and `dW = G^T S G`. Each thread sums its chunks into its own
/// `S`; the threads' sums are added at the end, in a fixed order.
///
/// # Safety
/// The pointers hold the shapes `d` gives (output gradient, data, weight gradient); `dw` is
/// disjoint from the inputs; [`weight_gradient_applies`] holds.
pub(super) unsafe fn weight_gradient(
    c: &Conv,
    d: &ConvDims,
    (dy, x): (*const f32, *const f32),
    dw: *mut f32,
    res: &mut KernelRes,
) -> Result<(), String> {
    enabled()?;
    let pr = forward_problem(c, d);
    let cut = Cut::new(&pr, 16 * pr.f * pr.ch);
    let temp = res.temp(cut.groups * cut.slot * 4)?.cast::<f32>();
    // SAFETY: the temp space holds what `compute_weight_gradient` needs; the rest is the
    // caller's contract.
    unsafe { compute_weight_gradient(&pr, (dy, x), dw, temp, cut) };
    Ok(())
}

/// The convolution `pr` of `x` into `out`; `wt` holds its weights `(f, ch, 3, 3)`, or with
/// `flipped` the weights `(ch, f, 3, 3)` of the convolution whose data gradient `pr` is.
///
/// # Safety
/// As [`forward`], for `pr`'s shapes.
unsafe fn run(
    pr: &Problem,
    inputs: (*const f32, *const f32, bool),
    out: (*mut f32, &Epilogue<'_>),
    res: &mut KernelRes,
) -> Result<(), String> {
    enabled()?;
    let cut = Cut::new(pr, 0);
    let temp = res.temp((16 * pr.f * pr.ch + cut.groups * cut.slot) * 4)?;
    // SAFETY: the temp space holds what `compute` needs; the rest is the caller's contract.
    unsafe { compute(pr, inputs, out, temp.cast(), cut) };
    Ok(())
}

/// Tile rows per chunk: as many as [`chunk_floats`] holds, but enough for `MIN_CHUNK_TILES`
/// tiles, and few enough that every one of `threads` threads gets a chunk.
fn chunk_rows(pr: &Problem, threads: usize) -> usize {
    let (th, tw) = pr.tiles();
    let fits = chunk_floats() / (16 * (pr.ch + pr.f) * tw);
    let shared = (pr.n * th).div_ceil(threads);
    fits.max(MIN_CHUNK_TILES.div_ceil(tw)).min(shared).max(1)
}

/// How a problem's tiles are cut: chunks of `chunk` tile rows, in `groups` groups of
/// consecutive chunks, each group on one thread in its own slot of `slot` floats of temp space
/// ([`for_chunks`]).
#[derive(Clone, Copy, Debug)]
struct Cut {
    chunk: usize,
    groups: usize,
    slot: usize,
}

impl Cut {
    /// For slots of `fixed` floats (the weight gradient's sums) and a chunk's `V` and `M` (or
    /// `Z`): one group per thread of the rayon pool the chunks run on (the current one, or the
    /// global one outside any pool), as many as [`SLOTS_FLOATS`] holds, at least one.
    fn new(pr: &Problem, fixed: usize) -> Cut {
        let threads = rayon::current_num_threads().max(1);
        let chunk = chunk_rows(pr, threads);
        let slot = fixed + 16 * (pr.ch + pr.f) * chunk * pr.tiles().1;
        let chunks = (pr.n * pr.tiles().0).div_ceil(chunk);
        let groups = threads.min(chunks).min(SLOTS_FLOATS / slot).max(1);
        Cut {
            chunk,
            groups,
            slot,
        }
    }
}

/// [`run`] cut as `cut` says, in `temp`: each chunk on one thread, start to end (input
/// transform, products, output transform), in its group's slot of the temp space, so that its
/// `V` and `M` stay in the thread's core's cache.
///
/// # Safety
/// As [`run`]; `temp` holds `U` (`16 * f * ch` floats) and then `cut.groups` slots;
/// [`crate::gemm::available`] holds.
unsafe fn compute(
    pr: &Problem,
    (x, wt, flipped): (*const f32, *const f32, bool),
    (out, epilogue): (*mut f32, &Epilogue<'_>),
    temp: *mut f32,
    cut: Cut,
) {
    let (tw, chunk) = (pr.tiles().1, cut.chunk);
    let u_len = 16 * pr.f * pr.ch;
    // SAFETY: `temp` holds `U` (the contract).
    unsafe { transform_weights(pr, wt, flipped, temp) };
    let (x, out, temp) = (
        Shared::new(x),
        Shared::new(out.cast_const()),
        Shared::new(temp),
    );
    for_chunks(pr, cut, |slot, rows, _| {
        // SAFETY: the slot's `V` and `M` are this group's; the chunk's outputs too; the rest
        // is the caller's contract.
        unsafe {
            let u = temp.get().cast_const();
            let v = temp.get().add(u_len + slot * cut.slot);
            let m = v.add(16 * pr.ch * chunk * tw);
            transform_input(pr, x.get(), rows, v);
            multiply(pr, u, v, m, rows.1 * tw);
            transform_output(pr, m, rows, (out.get(), epilogue));
        }
    });
}

/// Runs `body(g, rows, first)` for every chunk of `cut.chunk` tile rows (`rows`: its first
/// tile row and how many), in `cut.groups` groups of consecutive chunks, each group on one
/// thread from start to end, in slot `g`; `first` says whether the chunk is its group's
/// first. Which chunks a slot sums is fixed by the sizes and the cut alone, never by which
/// thread ran faster, so the weight gradient's sums come out the same bits run after run (as
/// recomputation's checks ask).
fn for_chunks(pr: &Problem, cut: Cut, body: impl Fn(usize, (usize, usize), bool) + Sync) {
    let (th, tw) = pr.tiles();
    let (tile_rows, chunk, groups) = (pr.n * th, cut.chunk, cut.groups);
    let count = tile_rows.div_ceil(chunk);
    let cost = 16 * (pr.ch * pr.f + 2 * (pr.ch + pr.f)) * chunk * tw;
    for_ranges(
        groups,
        cost.saturating_mul(count.div_ceil(groups)),
        |lo, hi| {
            for g in lo..hi {
                let first = g * count / groups;
                for k in first..(g + 1) * count / groups {
                    body(g, (k * chunk, chunk.min(tile_rows - k * chunk)), k == first);
                }
            }
        },
    );
}

/// [`weight_gradient`] of `pr` cut as `cut` says, in `temp`, each group of chunks on one
/// thread (as [`compute`]), summing into its slot's `S`.
///
/// # Safety
/// As [`weight_gradient`]; `temp` holds `cut.groups` slots; [`crate::gemm::available`] holds.
unsafe fn compute_weight_gradient(
    pr: &Problem,
    (dy, x): (*const f32, *const f32),
    dw: *mut f32,
    temp: *mut f32,
    cut: Cut,
) {
    let (tw, chunk) = (pr.tiles().1, cut.chunk);
    let s_len = 16 * pr.f * pr.ch;
    let (dy, x, temp) = (
        Shared::new(dy),
        Shared::new(x),
        Shared::new(temp.cast_const()),
    );
    for_chunks(pr, cut, |slot, rows, first| {
        // A group's first chunk writes its `S`, the rest add to it.
        let beta = if first { 0.0 } else { 1.0 };
        // SAFETY: the slot is this group's; the rest is the caller's contract.
        unsafe {
            let s = temp.get().add(slot * cut.slot);
            let v = s.add(s_len);
            let z = v.add(16 * pr.ch * chunk * tw);
            transform_input(pr, x.get(), rows, v);
            transform_gradient(pr, dy.get(), rows, z);
            accumulate(pr, z, v, s, rows.1 * tw, beta);
        }
    });
    // The groups have joined: every slot's sums are complete and visible here, added in slot
    // order.
    let sums: Vec<Shared<f32>> = (0..cut.groups)
        // SAFETY: slot `i` lies inside the temp space.
        .map(|i| Shared::new(unsafe { temp.get().add(i * cut.slot) }.cast_const()))
        .collect();
    let dw = Shared::new(dw.cast_const());
    for_ranges(pr.f, pr.ch * 16 * sums.len(), |lo, hi| {
        let from: Vec<*const f32> = sums.iter().map(|s| s.get().cast_const()).collect();
        for o in lo..hi {
            let at = o * pr.ch;
            // SAFETY: the sums of filter `o` lie inside each slot, and its channels' 3x3
            // windows inside `dw` (this range's rows); the GEMM runs here (the contract).
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            unsafe {
                tiles::weight_sums(&from, at, s_len / 16, pr.ch, dw.get().add(at * 9))
            };
        }
    });
}

/// `Z[xi][f][t] = (A z A^T)[xi]` for the chunk's tile rows, `z` a tile's 2x2 output gradient
/// (zeros past the edge). `Z[xi]` is `f x tiles`, row-major.
///
/// # Safety
/// `dy` holds the problem's output gradient; `z` holds `16 * f * rows * tw` floats;
/// [`crate::gemm::available`] holds.
unsafe fn transform_gradient(
    pr: &Problem,
    dy: *const f32,
    (r0, rows): (usize, usize),
    z: *mut f32,
) {
    let (th, tw) = pr.tiles();
    let tiles = rows * tw;
    // The two output rows of a tile row, padded with zeros to whole vectors of 16 tiles (the
    // widest).
    let len = 2 * tw.next_multiple_of(16);
    let mut padded = vec![0f32; 2 * len];
    for o in 0..pr.f {
        for r in r0..r0 + rows {
            let (img, ty) = (r / th, r % th);
            for (a, row) in padded.chunks_exact_mut(len).enumerate() {
                let y = 2 * ty + a;
                row.fill(0.0);
                if y < pr.ho {
                    // SAFETY: row `y` of filter `o` of image `img` is inside `dy`.
                    let from = unsafe {
                        let at = ((img * pr.f + o) * pr.ho + y) * pr.wo;
                        std::slice::from_raw_parts(dy.add(at), pr.wo)
                    };
                    row[..pr.wo].copy_from_slice(from);
                }
            }
            let at = o * tiles + (r - r0) * tw;
            // SAFETY: the writes are filter `o`'s columns of this tile row in each `Z[xi]`;
            // the GEMM runs here (the contract).
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            unsafe {
                tiles::gradient(&padded, len, tw, z, at, pr.f * tiles)
            };
        }
    }
}

/// `S[xi] = Z[xi] x V[xi]^T + beta S[xi]` for the chunk's `tiles` tiles.
///
/// # Safety
/// `z`, `v` and `s` hold the chunk's `Z` and `V` and the thread's `S`;
/// [`crate::gemm::available`] holds.
unsafe fn accumulate(
    pr: &Problem,
    z: *const f32,
    v: *const f32,
    s: *mut f32,
    tiles: usize,
    beta: f32,
) {
    let (f, ch) = (pr.f, pr.ch);
    for xi in 0..16 {
        // SAFETY: the blocks lie inside the buffers (the contract).
        unsafe {
            let a = Mat::row_major(z.add(xi * f * tiles), tiles);
            // V[xi]^T: element (t, c) at c * tiles + t.
            let b = Mat {
                ptr: v.add(xi * ch * tiles),
                rs: 1,
                cs: tiles as isize,
            };
            let c = Mat::row_major(s.add(xi * f * ch), ch);
            sgemm_serial(f, tiles, ch, &a, &b, beta, Batches::whole(c));
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
            // Flipped: this convolution's filter `o` is the original's channel `o`, its channel
            // `i` the original's filter `i`, its window reversed.
            let (first, stride) = match flipped {
                false => (o * ch * 9, 9),
                true => (o * 9, f * 9),
            };
            // SAFETY: filter `o`'s windows lie inside the weights and, in every `U[xi]`, row
            // `o` (this range's); the GEMM runs here (the contract).
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            unsafe {
                tiles::weights(
                    wt.get().add(first),
                    stride,
                    flipped,
                    ch,
                    u.get(),
                    o * ch,
                    f * ch,
                )
            };
        }
    });
}

/// `V[xi][c][t]` for the chunk's tile rows `r0..r0 + rows` (tile row `r`: image `r / th`, row
/// `r % th`). `V[xi]` is `ch x tiles`, row-major.
///
/// # Safety
/// `x` holds the problem's input; `v` holds `16 * ch * rows * tw` floats;
/// [`crate::gemm::available`] holds.
unsafe fn transform_input(pr: &Problem, x: *const f32, (r0, rows): (usize, usize), v: *mut f32) {
    let (th, tw) = pr.tiles();
    let tiles = rows * tw;
    // The four input rows under a tile row, padded with zeros to whole vectors of tiles (each
    // tile row reads `2 * tw + 2` columns, a vector of 16 tiles, the widest, 34).
    let len = 2 * tw.next_multiple_of(16) + 2;
    let mut padded = vec![0f32; 4 * len];
    for c in 0..pr.ch {
        for r in r0..r0 + rows {
            let (img, ty) = (r / th, r % th);
            for (k, row) in padded.chunks_exact_mut(len).enumerate() {
                let y = (2 * ty + k).wrapping_sub(pr.p.0);
                row.fill(0.0);
                if y < pr.h {
                    // SAFETY: row `y` of channel `c` of image `img` is inside `x`.
                    let from = unsafe {
                        std::slice::from_raw_parts(
                            x.add(((img * pr.ch + c) * pr.h + y) * pr.w),
                            pr.w,
                        )
                    };
                    row[pr.p.1..pr.p.1 + pr.w].copy_from_slice(from);
                }
            }
            let at = c * tiles + (r - r0) * tw;
            // SAFETY: the writes are channel `c`'s columns of this tile row in each `V[xi]`;
            // the GEMM runs here (the contract).
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            unsafe {
                tiles::input(&padded, len, tw, v, at, pr.ch * tiles)
            };
        }
    }
}

/// `M[xi] = U[xi] x V[xi]` for the chunk's `tiles` tiles.
///
/// # Safety
/// `u`, `v` and `m` hold `U`, the chunk's `V` and room for its `M`;
/// [`crate::gemm::available`] holds.
unsafe fn multiply(pr: &Problem, u: *const f32, v: *const f32, m: *mut f32, tiles: usize) {
    let (f, ch) = (pr.f, pr.ch);
    for xi in 0..16 {
        // SAFETY: the blocks lie inside the buffers (the contract).
        unsafe {
            let a = Mat::row_major(u.add(xi * f * ch), ch);
            let b = Mat::row_major(v.add(xi * ch * tiles), tiles);
            let c = Mat::row_major(m.add(xi * f * tiles), tiles);
            sgemm_serial(f, ch, tiles, &a, &b, 0.0, Batches::whole(c));
        }
    }
}

/// The outputs of the chunk's tile rows, `A^T M A` per tile.
///
/// # Safety
/// `m` holds the chunk's `M`; `out` the problem's output; [`crate::gemm::available`] holds.
unsafe fn transform_output(
    pr: &Problem,
    m: *const f32,
    (r0, rows): (usize, usize),
    (out, epilogue): (*mut f32, &Epilogue<'_>),
) {
    let then = epilogue.applies();
    let (th, tw) = pr.tiles();
    let tiles = rows * tw;
    for o in 0..pr.f {
        for r in r0..r0 + rows {
            let (img, ty) = (r / th, r % th);
            let from = o * tiles + (r - r0) * tw;
            let at = ((img * pr.f + o) * pr.ho + 2 * ty) * pr.wo;
            let second = 2 * ty + 1 < pr.ho;
            // SAFETY: the chunk's `M` holds every position's row `o`; rows `2 * ty` (and
            // `2 * ty + 1` below `ho`) of filter `o` of image `img` are inside `out`; the GEMM
            // runs here (the contract).
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            unsafe {
                tiles::output(m, from, pr.f * tiles, tw, out.add(at), pr.wo, second)
            };
            if then {
                let len = if second { 2 * pr.wo } else { pr.wo };
                // SAFETY: the rows just written, inside `out` (as above); this chunk's alone.
                epilogue.apply(o, unsafe {
                    std::slice::from_raw_parts_mut(out.add(at), len)
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
