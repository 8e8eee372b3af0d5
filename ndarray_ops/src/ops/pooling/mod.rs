//! 2-D Pooling (NCHW; max, avg, sum; global; valid or full rounding) and its gradient.
//!
//! A pooling window is a convolution's window without weights, so it runs on the same [`Tap`]s
//! as the direct (depthwise) convolution: for one output row, each tap of the window reads one
//! input row, shifted, over the output columns whose window holds that tap inside the input.
//! An output row is then the maximum (or sum) over taps of contiguous runs, a loop that
//! vectorizes, where a loop over each output's window compared one element at a time on a
//! branch the data decides. Max pooling keeps beside each running maximum where it came from
//! (the first maximum in row-major order, as a loop over the window finds it), with a select
//! instead of a branch. A horizontal stride above 1 reads the input with its columns grouped by
//! phase (`by_phase`), where every tap's run is contiguous. A pooling with one output per plane
//! (global pooling) has taps of one element each; it reads its window's rows whole instead.
//!
//! Float planes keep their maxima and sums in their own type (as MXNet's kernels do); integer
//! planes keep them in f64, so that a window's sum does not wrap. Planes split across threads.

pub(crate) mod gpu;

use crate::ops::Call;
use std::ops::Range;

use super::conv::{by_phase, check_layout, from_phase, out_len, Layout, Tap};
use super::par::{for_ranges, Shared};
use super::params::{attr_enum, op_params, Params, Window};
use super::reduce::fold_run;
use super::{Arity, Attrs, Flops, OpDef, Outputs};
use crate::error::{invalid, shape_error, Result};
use crate::ops::grad;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

attr_enum! {
    /// What a pooling window computes.
    pub enum PoolType {
        /// Its maximum.
        Max = "max",
        /// Its mean.
        Avg = "avg",
        /// Its sum.
        Sum = "sum",
    }
}

attr_enum! {
    /// How the output's size rounds.
    pub enum PoolingConvention {
        /// Down: only windows wholly inside the padded input.
        Valid = "valid",
        /// Up: a last window may stick out.
        Full = "full",
    }
}

op_params! {
    /// Pooling's attributes.
    pub struct PoolingParams for "Pooling" {
        kernel: Window,
        pool_type: PoolType,
        global_pool: bool,
        cudnn_off: bool,
        pooling_convention: PoolingConvention,
        stride: Window,
        pad: Window,
        count_include_pad: Option<bool>,
        layout: Option<Layout>,
    }
}

/// A pooling as its kernels take it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pool {
    pub(crate) kind: PoolType,
    pub(crate) k: (usize, usize),
    pub(crate) s: (usize, usize),
    pub(crate) p: (usize, usize),
    pub(crate) ceil: bool,
    pub(crate) count_pad: bool,
}

/// The pooling of `attrs` over data of `shape` (a global pooling's window is the whole plane).
pub(crate) fn pool_params(op: &str, attrs: &Attrs, shape: &[usize]) -> Result<Pool> {
    let a = PoolingParams::get(op, attrs)?;
    check_layout(op, a.layout)?;
    if shape.len() != 4 {
        return Err(shape_error(op, "data", shape, "4 dimensions (N, C, H, W)"));
    }
    // The kernels keep a maximum's position in a plane as a u32.
    if shape[2].saturating_mul(shape[3]) >= NONE_YET as usize {
        return Err(shape_error(
            op,
            "data",
            shape,
            format!("planes (H x W) of fewer than {NONE_YET} elements"),
        ));
    }
    let p = if a.global_pool {
        Pool {
            kind: a.pool_type,
            k: (shape[2], shape[3]),
            s: (1, 1),
            p: (0, 0),
            ceil: false,
            count_pad: true,
        }
    } else {
        Pool {
            kind: a.pool_type,
            k: a.kernel.required(op, "kernel")?,
            s: a.stride.or((1, 1)),
            p: a.pad.or((0, 0)),
            ceil: a.pooling_convention == PoolingConvention::Full,
            count_pad: a.count_include_pad.unwrap_or(true),
        }
    };
    if p.k.0 == 0 || p.k.1 == 0 || p.s.0 == 0 || p.s.1 == 0 {
        return Err(invalid(
            op,
            format!("kernel {:?} and stride {:?} must be positive", p.k, p.s),
        ));
    }
    Ok(p)
}

impl Pool {
    /// The window of output `y` along one axis of `n` (kernel `k`, stride `s`, padding `p`):
    /// the input positions it holds, and its extent clipped to the padded input (what MXNet's
    /// average divides by unless `count_include_pad` is off).
    fn span(y: usize, n: usize, (k, s, p): (usize, usize, usize)) -> (Range<usize>, isize) {
        let start = (y * s) as isize - p as isize;
        let end = (start + k as isize).min((n + p) as isize);
        let inside = (start.max(0) as usize)..(end.max(0) as usize).min(n);
        (inside, end - start)
    }

    /// What the average of each output divides by (`ho * wo`, row-major).
    fn divisors(&self, (h, w): (usize, usize), (ho, wo): (usize, usize)) -> Vec<f64> {
        let rows: Vec<_> = (0..ho)
            .map(|y| Self::span(y, h, (self.k.0, self.s.0, self.p.0)))
            .collect();
        let cols: Vec<_> = (0..wo)
            .map(|x| Self::span(x, w, (self.k.1, self.s.1, self.p.1)))
            .collect();
        let mut out = Vec::with_capacity(ho * wo);
        for (ry, py) in &rows {
            for (rx, px) in &cols {
                let n = if self.count_pad {
                    py * px
                } else {
                    (ry.len() * rx.len()) as isize
                };
                out.push(n.max(1) as f64);
            }
        }
        out
    }

    /// The first input position (row-major in a plane `w` wide) of output `(y, x)`'s window,
    /// or `None` when the window holds none.
    fn first_position(&self, (y, x): (usize, usize), (h, w): (usize, usize)) -> Option<usize> {
        let (ry, _) = Self::span(y, h, (self.k.0, self.s.0, self.p.0));
        let (rx, _) = Self::span(x, w, (self.k.1, self.s.1, self.p.1));
        (!ry.is_empty() && !rx.is_empty()).then_some(ry.start * w + rx.start)
    }
}

/// The type a window's maximum or sum is kept in.
pub(crate) trait Pooled: Element {
    /// Floats: themselves; integers: f64.
    type Acc: Element;
}

impl Pooled for f32 {
    type Acc = f32;
}
impl Pooled for f64 {
    type Acc = f64;
}
impl Pooled for i32 {
    type Acc = f64;
}
impl Pooled for i64 {
    type Acc = f64;
}
impl Pooled for u8 {
    type Acc = f64;
}

/// No position yet: what a window's argmax holds until an element beats minus infinity.
const NONE_YET: u32 = u32::MAX;

/// What every plane of one call (forward or backward) shares: the planes' sizes, the window's
/// taps, what each output's average divides by, and the column stride the planes are read or
/// written by phase with (1: as they are).
struct Plane {
    h: usize,
    w: usize,
    ho: usize,
    wo: usize,
    taps: Vec<Tap>,
    divisors: Vec<f64>,
    phase: usize,
}

impl Plane {
    /// Planes of data `x` `(N, C, H, W)` pooled into `out` `(N, C, Ho, Wo)`. With one output
    /// per plane ([`Plane::single`]) there are no taps and no phases.
    fn new(p: &Pool, x: &[usize], out: &[usize]) -> Self {
        let (h, w, ho, wo) = (x[2], x[3], out[2], out[3]);
        let single = ho * wo == 1;
        Plane {
            h,
            w,
            ho,
            wo,
            taps: match single {
                true => vec![],
                false => Tap::window(p.k, p.s, p.p, (1, 1), w, wo),
            },
            divisors: match p.kind {
                PoolType::Avg => p.divisors((h, w), (ho, wo)),
                _ => vec![1.0; ho * wo],
            },
            phase: if single { 1 } else { p.s.1 },
        }
    }

    /// Whether each plane has one output, whose window's rows are read whole.
    fn single(&self) -> bool {
        self.ho * self.wo == 1
    }
}

/// What one thread's planes reuse: an output row of maxima or sums and of their positions, an
/// output row of scaled gradients, and the taps live in the current row.
struct Scratch<T: Pooled> {
    best: Vec<T::Acc>,
    at: Vec<u32>,
    scaled: Vec<T>,
    live: Vec<Live>,
}

impl<T: Pooled> Scratch<T> {
    fn new(pl: &Plane) -> Self {
        Scratch {
            best: vec![T::Acc::default(); pl.wo],
            at: vec![NONE_YET; pl.wo],
            scaled: vec![T::default(); pl.wo],
            live: Vec::with_capacity(pl.taps.len()),
        }
    }
}

/// A tap whose input row lies inside the input, for one output row: output column `x` in
/// `cols` reads `input[read + x - cols.start]` (the rows grouped by phase), which is plane
/// position `at + (x - cols.start) * step`.
#[derive(Clone, Debug)]
struct Live {
    cols: Range<usize>,
    read: usize,
    at: usize,
}

/// Output columns a max pooling row takes eight at a time, the running maxima kept in
/// registers across the window's taps (each tap updating a row in memory instead stored with a
/// masked store, which the next tap's load waited for).
const BLOCK: usize = 8;

/// One output row of max pooling over `input` (grouped by phase when the stride is above 1):
/// each output's maximum in `best` and, in `at`, its position in the plane ([`NONE_YET`] where
/// no element beat minus infinity). The columns every live tap reads go eight at a time; the
/// few at the edges, one at a time.
#[inline(always)]
fn max_row<T: Pooled>(pl: &Plane, y: usize, input: &[T], s: &mut Scratch<T>) {
    s.live.clear();
    for tap in &pl.taps {
        if let (Some(iy), Some((cols, run))) = (tap.input_row(y, pl.h), tap.run()) {
            let (read, at) = (iy * pl.w + run.start, iy * pl.w + tap.first_input());
            s.live.push(Live { cols, read, at });
        }
    }
    // Neighbouring outputs' inputs lie the column stride apart, which `phase` is.
    let step = pl.phase;
    let live = &s.live[..];
    let lo = live.iter().map(|l| l.cols.start).max().unwrap_or(0);
    let hi = live.iter().map(|l| l.cols.end).min().unwrap_or(0).max(lo);
    let blocks = lo + (hi - lo) / BLOCK * BLOCK;
    let lowest = T::Acc::from_f64(f64::NEG_INFINITY);
    for x in (0..lo).chain(blocks..pl.wo) {
        let (mut best, mut at) = (lowest, NONE_YET);
        for l in live.iter().filter(|l| l.cols.contains(&x)) {
            let v = T::Acc::from_f64(input[l.read + x - l.cols.start].to_f64());
            // Strictly greater: the first maximum stays, and NaN never enters.
            if v > best {
                (best, at) = (v, (l.at + (x - l.cols.start) * step) as u32);
            }
        }
        (s.best[x], s.at[x]) = (best, at);
    }
    for x in (lo..blocks).step_by(BLOCK) {
        let (mut best, mut at) = ([lowest; BLOCK], [NONE_YET; BLOCK]);
        for l in live {
            let run = &input[l.read + x - l.cols.start..][..BLOCK];
            let first = (l.at + (x - l.cols.start) * step) as u32;
            for k in 0..BLOCK {
                let v = T::Acc::from_f64(run[k].to_f64());
                let gt = v > best[k];
                best[k] = if gt { v } else { best[k] };
                at[k] = if gt { first + (k * step) as u32 } else { at[k] };
            }
        }
        s.best[x..x + BLOCK].copy_from_slice(&best);
        s.at[x..x + BLOCK].copy_from_slice(&at);
    }
}

/// One output row of sum pooling: each output's window sum in `sum`.
#[inline(always)]
fn sum_row<T: Pooled>(pl: &Plane, y: usize, input: &[T], sum: &mut [T::Acc]) {
    sum.fill(T::Acc::default());
    for tap in &pl.taps {
        if let (Some(iy), Some((cols, run))) = (tap.input_row(y, pl.h), tap.run()) {
            let row = &input[iy * pl.w..(iy + 1) * pl.w];
            for (s, &v) in sum[cols].iter_mut().zip(&row[run]) {
                *s = s.add(T::Acc::from_f64(v.to_f64()));
            }
        }
    }
}

/// One plane of the forward pass: `out` (and for max pooling its argmax `mask`) from `input`.
#[inline(always)]
fn forward_plane<T: Pooled>(
    p: &Pool,
    pl: &Plane,
    input: &[T],
    (out, mask): (&mut [T], Option<&mut [T]>),
    s: &mut Scratch<T>,
) {
    let wo = pl.wo.max(1);
    match mask {
        Some(mask) => {
            let rows = out.chunks_exact_mut(wo).zip(mask.chunks_exact_mut(wo));
            for (y, (out, mask)) in rows.enumerate() {
                max_row::<T>(pl, y, input, s);
                let found = s.best.iter().zip(&s.at);
                for (x, ((o, m), (&b, &a))) in out.iter_mut().zip(mask).zip(found).enumerate() {
                    // An empty window (all padding) gives 0, as MXNet's does.
                    let empty = a == NONE_YET && p.first_position((y, x), (pl.h, pl.w)).is_none();
                    *o = T::from_f64(if empty { 0.0 } else { b.to_f64() });
                    *m = T::from_f64(if a == NONE_YET { 0.0 } else { f64::from(a) });
                }
            }
        }
        None => {
            for (y, out) in out.chunks_exact_mut(wo).enumerate() {
                sum_row::<T>(pl, y, input, &mut s.best);
                let divisors = &pl.divisors[y * wo..(y + 1) * wo];
                for ((o, &sum), &d) in out.iter_mut().zip(&s.best).zip(divisors) {
                    *o = T::from_f64(sum.to_f64() / d);
                }
            }
        }
    }
}

/// One plane of the gradient: `dx` (grouped by phase for average and sum pooling when the
/// stride is above 1) from the output gradient `dy` and, for max pooling, the data `input`
/// (grouped by phase likewise). `dx` is written whole.
#[inline(always)]
fn backward_plane<T: Pooled>(
    p: &Pool,
    pl: &Plane,
    (dy, input): (&[T], &[T]),
    dx: &mut [T],
    s: &mut Scratch<T>,
) {
    let wo = pl.wo.max(1);
    dx.fill(T::default());
    for (y, dy) in dy.chunks_exact(wo).enumerate() {
        if p.kind == PoolType::Max {
            // Each output's gradient goes to its window's first maximum (its first element when
            // none beat minus infinity, all NaN say).
            max_row::<T>(pl, y, input, s);
            for (x, (&g, &a)) in dy.iter().zip(&s.at).enumerate() {
                let to = match a {
                    NONE_YET => p.first_position((y, x), (pl.h, pl.w)),
                    a => Some(a as usize),
                };
                if let Some(to) = to {
                    dx[to] = dx[to].add(g);
                }
            }
            continue;
        }
        // Average and sum share each output's gradient over its window.
        let divisors = &pl.divisors[y * wo..(y + 1) * wo];
        for ((scaled, &g), &d) in s.scaled.iter_mut().zip(dy).zip(divisors) {
            *scaled = T::from_f64(g.to_f64() * (1.0 / d));
        }
        for tap in &pl.taps {
            if let (Some(iy), Some((cols, run))) = (tap.input_row(y, pl.h), tap.run()) {
                let row = &mut dx[iy * pl.w..(iy + 1) * pl.w];
                for (d, &g) in row[run].iter_mut().zip(&s.scaled[cols]) {
                    *d = d.add(g);
                }
            }
        }
    }
}

/// A pooling with one output per plane (global pooling, for one): there the taps would each
/// read one element, so its window's rows, each a run of the (unphased) plane, are read whole.
/// Writes the output (and for max pooling the argmax) of one plane.
fn single_forward<T: Pooled>(
    p: &Pool,
    (h, w): (usize, usize),
    input: &[T],
    (out, mask): (&mut T, Option<&mut T>),
    divisor: f64,
) {
    if let Some(mask) = mask {
        let (best, at) = single_max(p, (h, w), input);
        let empty = at.is_none() && p.first_position((0, 0), (h, w)).is_none();
        *out = T::from_f64(if empty { 0.0 } else { best.to_f64() });
        *mask = T::from_f64(at.map_or(0.0, |a| a as f64));
        return;
    }
    let (rows, cols) = single_window(p, (h, w));
    let sum = rows.fold(T::Acc::default(), |acc, iy| {
        let run = &input[iy * w..][cols.clone()];
        let add = |s: T::Acc, v: T| s.add(T::Acc::from_f64(v.to_f64()));
        acc.add(fold_run(run, T::Acc::default(), add, |a, b| a.add(b)))
    });
    *out = T::from_f64(sum.to_f64() / divisor);
}

/// The gradient of [`single_forward`]: `dx` (written whole) from the output's gradient `g`.
fn single_backward<T: Pooled>(
    p: &Pool,
    (h, w): (usize, usize),
    (g, input): (T, &[T]),
    dx: &mut [T],
    share: f64,
) {
    dx.fill(T::default());
    if p.kind == PoolType::Max {
        let (_, at) = single_max(p, (h, w), input);
        if let Some(to) = at.or_else(|| p.first_position((0, 0), (h, w))) {
            dx[to] = g;
        }
        return;
    }
    let (rows, cols) = single_window(p, (h, w));
    let g = T::from_f64(g.to_f64() * share);
    for iy in rows {
        dx[iy * w..][cols.clone()].fill(g);
    }
}

/// The rows and columns of the one window of a pooling with one output per plane.
fn single_window(p: &Pool, (h, w): (usize, usize)) -> (Range<usize>, Range<usize>) {
    let (rows, _) = Pool::span(0, h, (p.k.0, p.s.0, p.p.0));
    let (cols, _) = Pool::span(0, w, (p.k.1, p.s.1, p.p.1));
    (rows, cols)
}

/// The first maximum of the one window, and its position (`None` where nothing beat minus
/// infinity).
fn single_max<T: Pooled>(p: &Pool, (h, w): (usize, usize), input: &[T]) -> (T::Acc, Option<usize>) {
    let (rows, cols) = single_window(p, (h, w));
    let (mut best, mut at) = (T::Acc::from_f64(f64::NEG_INFINITY), None);
    for iy in rows {
        for ix in cols.clone() {
            let v = T::Acc::from_f64(input[iy * w + ix].to_f64());
            if v > best {
                (best, at) = (v, Some(iy * w + ix));
            }
        }
    }
    (best, at)
}

/// The plane functions compiled for the widest instruction set the CPU has: AVX2 and FMA
/// twins where `par::has_wide` finds them (too large a body for `par::wide`'s closure to be
/// inlined into its AVX2 copy), the plain ones elsewhere.
mod widest {
    use super::{Plane, Pool, Pooled, Scratch};

    pub(super) fn forward_plane<T: Pooled>(
        p: &Pool,
        pl: &Plane,
        input: &[T],
        outs: (&mut [T], Option<&mut [T]>),
        scratch: &mut Scratch<T>,
    ) {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if crate::ops::par::has_wide() {
            // SAFETY: `has_wide` found the features this twin is compiled for.
            return unsafe { avx2::forward_plane(p, pl, input, outs, scratch) };
        }
        super::forward_plane(p, pl, input, outs, scratch)
    }

    pub(super) fn backward_plane<T: Pooled>(
        p: &Pool,
        pl: &Plane,
        ins: (&[T], &[T]),
        dx: &mut [T],
        scratch: &mut Scratch<T>,
    ) {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if crate::ops::par::has_wide() {
            // SAFETY: `has_wide` found the features this twin is compiled for.
            return unsafe { avx2::backward_plane(p, pl, ins, dx, scratch) };
        }
        super::backward_plane(p, pl, ins, dx, scratch)
    }

    #[cfg(all(target_arch = "x86_64", not(miri)))]
    mod avx2 {
        use super::super::{Plane, Pool, Pooled, Scratch};

        #[target_feature(enable = "avx2,fma")]
        pub(super) fn forward_plane<T: Pooled>(
            p: &Pool,
            pl: &Plane,
            input: &[T],
            outs: (&mut [T], Option<&mut [T]>),
            scratch: &mut Scratch<T>,
        ) {
            super::super::forward_plane(p, pl, input, outs, scratch)
        }

        #[target_feature(enable = "avx2,fma")]
        pub(super) fn backward_plane<T: Pooled>(
            p: &Pool,
            pl: &Plane,
            ins: (&[T], &[T]),
            dx: &mut [T],
            scratch: &mut Scratch<T>,
        ) {
            super::super::backward_plane(p, pl, ins, dx, scratch)
        }
    }
}

fn infer_pool(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let p = pool_params(op, attrs, &s[0])?;
    let x = &s[0];
    let ho = out_len(op, x[2], p.k.0, p.s.0, p.p.0, 1, p.ceil)?;
    let wo = out_len(op, x[3], p.k.1, p.s.1, p.p.1, 1, p.ceil)?;
    let out = vec![x[0], x[1], ho, wo];
    // Max pooling also writes where each maximum came from (a hidden output, as in MXNet 1.9's
    // CPU build, which its model files record); the backward pass reads it.
    if p.kind == PoolType::Max {
        Ok((vec![out.clone(), out], vec![d[0]; 2]))
    } else {
        Ok((vec![out], vec![d[0]]))
    }
}

fn pool_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (x, o) = (&ins[0], &outs[0]);
    let p = pool_params(op, attrs, &x.shape).map_err(|e| e.to_string())?;
    let pl = &Plane::new(&p, &x.shape, &o.shape);
    let (h, w, ho, wo, s) = (pl.h, pl.w, pl.ho, pl.wo, pl.phase);
    let planes = x.shape[0] * x.shape[1];
    crate::with_dtype!(o.dtype, T => {
        let (src, dst) = (Shared::new(x.ptr::<T>()), Shared::new(o.ptr::<T>()));
        let mask = (p.kind == PoolType::Max).then(|| Shared::new(outs[1].ptr::<T>()));
        for_ranges(planes, ho * wo * p.k.0 * p.k.1, move |lo, hi| {
            let mut phased = vec![T::default(); if s > 1 { h * w } else { 0 }];
            let mut scratch = Scratch::<T>::new(pl);
            for plane in lo..hi {
                // SAFETY: this range alone reads plane `plane` of the input and writes the
                // same plane of the outputs, which are disjoint from the input (not alias-safe).
                let (mut input, out, mask) = unsafe {
                    (
                        src.piece(plane, h * w),
                        dst.piece_mut(plane, ho * wo),
                        mask.map(|m| m.piece_mut(plane, ho * wo)),
                    )
                };
                if pl.single() {
                    single_forward(&p, (h, w), input, (&mut out[0], mask.map(|m| &mut m[0])), pl.divisors[0]);
                    continue;
                }
                if s > 1 {
                    by_phase(input, w, s, &mut phased);
                    input = &phased;
                }
                widest::forward_plane(&p, pl, input, (out, mask), &mut scratch);
            }
        });
    });
    Ok(())
}

// ---- _backward_Pooling: (ograd, data) -> data grad ------------------------------------------

/// `(ograd, data)`.
fn infer_pool_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    super::check_against_forward(
        op,
        "Pooling",
        attrs,
        (&s[1..], &d[1..]),
        &[(0, &s[0], d[0])],
    )?;
    Ok((vec![s[1].clone()], vec![d[1]]))
}

fn pool_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (dy, x) = (&ins[0], &ins[1]);
    let p = pool_params(op, attrs, &x.shape).map_err(|e| e.to_string())?;
    let pl = &Plane::new(&p, &x.shape, &dy.shape);
    let (h, w, ho, wo, s) = (pl.h, pl.w, pl.ho, pl.wo, pl.phase);
    let planes = x.shape[0] * x.shape[1];
    // Max pooling reads the data by phase; average and sum write the gradient so.
    let max = p.kind == PoolType::Max;
    crate::with_dtype!(dy.dtype, T => {
        let (dys, xs, dx) = (Shared::new(dy.ptr::<T>()), Shared::new(x.ptr::<T>()), Shared::new(outs[0].ptr::<T>()));
        for_ranges(planes, ho * wo * p.k.0 * p.k.1, move |lo, hi| {
            let phase = |on: bool| vec![T::default(); if s > 1 && on { h * w } else { 0 }];
            let (mut phased_input, mut phased_grad) = (phase(max), phase(!max));
            let mut scratch = Scratch::<T>::new(pl);
            for plane in lo..hi {
                // SAFETY: this range alone reads plane `plane` of the inputs and writes the same
                // plane of the output, which is disjoint from the inputs (not alias-safe).
                let (g, mut input, dx_plane) = unsafe {
                    (
                        dys.piece(plane, ho * wo),
                        xs.piece(plane, h * w),
                        dx.piece_mut(plane, h * w),
                    )
                };
                if pl.single() {
                    single_backward(&p, (h, w), (g[0], input), dx_plane, 1.0 / pl.divisors[0]);
                    continue;
                }
                let mut grad = &mut *dx_plane;
                if s > 1 && max {
                    by_phase(input, w, s, &mut phased_input);
                    input = &phased_input;
                } else if s > 1 {
                    grad = &mut phased_grad;
                }
                widest::backward_plane(&p, pl, (g, input), grad, &mut scratch);
                if s > 1 && !max {
                    from_phase(&phased_grad, w, s, dx_plane);
                }
            }
        });
    });
    Ok(())
}

/// Max pooling keeps where each maximum was as a hidden output, as in MXNet.
fn pool_outputs(op: &str, attrs: &Attrs) -> Result<(usize, usize)> {
    Ok(match PoolingParams::get(op, attrs)?.pool_type {
        PoolType::Max => (2, 1),
        _ => (1, 1),
    })
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            alias_safe: false,
            gradient: Some(grad::pooling),
            outputs: Outputs::By(pool_outputs),
            ..OpDef::new("Pooling", Arity::Exactly(1), infer_pool, pool_kernel)
        }
        // Each input element is read under several windows (fitted to a ResNet-50 step's
        // per-op times: see `symbol::mirror`).
        .cost(Flops::One, 5.0)
        .on_gpu(gpu::pooling),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_Pooling",
                Arity::Exactly(2),
                infer_pool_backward,
                pool_backward_kernel,
            )
        }
        .on_gpu(gpu::pooling_backward),
    ];
    OPS
}
