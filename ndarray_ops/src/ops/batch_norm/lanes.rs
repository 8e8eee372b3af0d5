//! BatchNorm's loops over one run of a channel (`inner` contiguous elements), forward and
//! backward. For `f32` on a CPU with AVX-512, or AVX2 and FMA (where the GEMM's kernels run),
//! they run sixteen lanes of `f32` at a time (one register or two: the same bits), sums
//! carried to `f64` every block of 1,024 elements; elsewhere (and for `f64`, which must agree
//! with MXNet to rounding) in `f64`. Sums go block by block on both paths, so a sum over a run
//! is the same whether its terms come from memory or were just computed into a block (the
//! fused BatchNorm+ReLU's masked gradient): fused and unfused graphs agree bit for bit.

use crate::gemm::normalized;
use crate::Element;

/// Elements per block of a sum: its `f32` partial sums are carried to `f64` at the end.
const BLOCK: usize = 1024;

/// `r` as `f32`s where `T` is `f32`.
fn as_f32<T: Element>(r: &[T]) -> Option<&[f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        // SAFETY: `T` is `f32`: the same slice, typed as it is.
        .then(|| unsafe { std::slice::from_raw_parts(r.as_ptr().cast::<f32>(), r.len()) })
}

/// `r` as mutable `f32`s where `T` is `f32`.
fn as_f32_mut<T: Element>(r: &mut [T]) -> Option<&mut [f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        // SAFETY: `T` is `f32`: the same slice, typed as it is.
        .then(|| unsafe { std::slice::from_raw_parts_mut(r.as_mut_ptr().cast::<f32>(), r.len()) })
}

fn lanes() -> bool {
    crate::gemm::available()
}

/// Runs `body` compiled for the vectors of the GEMM's instruction set: AVX-512F, or AVX2 and
/// FMA (`par::wide`). Each body is one call to an `#[inline(always)]` loop, so that the loop
/// is compiled inside the twin with the features.
#[inline(always)]
fn vectorized<R>(body: impl FnOnce() -> R) -> R {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        #[target_feature(enable = "avx512f")]
        fn avx512<R>(body: impl FnOnce() -> R) -> R {
            body()
        }
        if crate::gemm::avx512() {
            // SAFETY: the CPU has AVX-512F (checked).
            return unsafe { avx512(body) };
        }
    }
    crate::ops::par::wide(body)
}

// ---- forward --------------------------------------------------------------------------------

/// `Σ x` over a run.
pub(super) fn sum<T: Element>(x: &[T]) -> f64 {
    if let (Some(x), true) = (as_f32(x), lanes()) {
        return vectorized(|| sum_sq_lanes(x, None));
    }
    super::forward::sum_zip(x, x, |v, _| v)
}

/// `Σ (x - mean)²` over a run.
pub(super) fn squares<T: Element>(x: &[T], mean: f64) -> f64 {
    if let (Some(x), true) = (as_f32(x), lanes()) {
        return vectorized(|| sum_sq_lanes(x, Some(mean as f32)));
    }
    super::forward::sum_zip(x, x, |v, _| (v - mean) * (v - mean))
}

/// `Σ x`, or with a mean `Σ (x - mean)²`, in blocks of sixteen lanes.
#[inline(always)]
fn sum_sq_lanes(x: &[f32], mean: Option<f32>) -> f64 {
    let mut s = 0.0f64;
    for b in x.chunks(BLOCK) {
        let mut a = [0.0f32; 16];
        let c = b.chunks_exact(16);
        let term = |v: f32| match mean {
            Some(m) => (v - m) * (v - m),
            None => v,
        };
        for v in c.remainder() {
            a[0] += term(*v);
        }
        for q in c {
            for k in 0..16 {
                a[k] += term(q[k]);
            }
        }
        s += a.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    s
}

/// A run normalized: `(x - mean)·scale + beta`, then ReLU with `RELU`, written to `y`; from
/// `x`, or (`x` = `None`) from `y` itself, in place.
pub(super) fn normalize<T: Element, const RELU: bool>(
    x: Option<&[T]>,
    y: &mut [T],
    [mean, scale, beta]: [f64; 3],
) {
    // Float32 runs the GEMM epilogue's arithmetic (`normalized`, in f32), on every CPU: a
    // convolution that folds this normalization into its epilogue gives these bits.
    let c = [mean, scale, beta].map(|v| v as f32);
    match (x.map(as_f32), as_f32_mut(y)) {
        (Some(Some(x)), Some(y)) => return vectorized(|| normalize_f32::<RELU>(x, y, c)),
        (None, Some(y)) => return vectorized(|| normalize_in_place_f32::<RELU>(y, c)),
        _ => {}
    }
    let zero = T::default();
    let f = |v: T| {
        let z = T::from_f64((v.to_f64() - mean) * scale + beta);
        if !RELU || z > zero {
            z
        } else {
            zero
        }
    };
    match x {
        Some(x) => x.iter().zip(y).for_each(|(v, o)| *o = f(*v)),
        None => y.iter_mut().for_each(|o| *o = f(*o)),
    }
}

#[inline(always)]
fn normalize_f32<const RELU: bool>(x: &[f32], y: &mut [f32], c: [f32; 3]) {
    for (v, o) in x.iter().zip(y) {
        *o = normalized(*v, c, RELU);
    }
}

#[inline(always)]
fn normalize_in_place_f32<const RELU: bool>(y: &mut [f32], c: [f32; 3]) {
    for o in y.iter_mut() {
        *o = normalized(*o, c, RELU);
    }
}

// ---- backward -------------------------------------------------------------------------------

/// `(Σ dy, Σ dy·(x - mu))` over a run, block by block.
pub(super) fn sums<T: Element>(dy: &[T], x: &[T], mu: f64) -> (f64, f64) {
    dy.chunks(BLOCK)
        .zip(x.chunks(BLOCK))
        .fold((0.0, 0.0), |(s, t), (d, x)| {
            let (a, b) = block_sums(d, x, mu);
            (s + a, t + b)
        })
}

/// [`sums`] of `dy` masked where the output `y` of a fused BatchNorm+ReLU is not positive (as
/// ReLU's backward op computes it: `dy·1` or `dy·0`), written to `out` block by block and
/// summed while the block is in cache.
pub(super) fn masked_sums<T: Element>(
    dy: &[T],
    y: &[T],
    x: &[T],
    out: &mut [T],
    mu: f64,
) -> (f64, f64) {
    let (zero, one) = (T::default(), T::from_f64(1.0));
    let mut acc = (0.0, 0.0);
    for (((d, y), x), o) in dy
        .chunks(BLOCK)
        .zip(y.chunks(BLOCK))
        .zip(x.chunks(BLOCK))
        .zip(out.chunks_mut(BLOCK))
    {
        for ((d, y), o) in d.iter().zip(y).zip(o.iter_mut()) {
            *o = d.mul(if *y > zero { one } else { zero });
        }
        let (a, b) = block_sums(o, x, mu);
        acc = (acc.0 + a, acc.1 + b);
    }
    acc
}

/// `(Σ dy, Σ dy·(x - mu))` over at most one block.
fn block_sums<T: Element>(dy: &[T], x: &[T], mu: f64) -> (f64, f64) {
    if let (Some(d), Some(x), true) = (as_f32(dy), as_f32(x), lanes()) {
        return vectorized(|| block_sums_lanes(d, x, mu as f32));
    }
    let (mut s, mut t) = ([0.0f64; 4], [0.0f64; 4]);
    let (cd, cx) = (dy.chunks_exact(4), x.chunks_exact(4));
    let tail: (f64, f64) =
        cd.remainder()
            .iter()
            .zip(cx.remainder())
            .fold((0.0, 0.0), |(a, b), (d, x)| {
                let d = d.to_f64();
                (a + d, b + d * (x.to_f64() - mu))
            });
    for (qd, qx) in cd.zip(cx) {
        for k in 0..4 {
            let d = qd[k].to_f64();
            s[k] += d;
            t[k] += d * (qx[k].to_f64() - mu);
        }
    }
    (
        (s[0] + s[1]) + (s[2] + s[3]) + tail.0,
        (t[0] + t[1]) + (t[2] + t[3]) + tail.1,
    )
}

#[inline(always)]
fn block_sums_lanes(dy: &[f32], x: &[f32], mu: f32) -> (f64, f64) {
    let (mut a, mut b) = ([0.0f32; 16], [0.0f32; 16]);
    let (cd, cx) = (dy.chunks_exact(16), x.chunks_exact(16));
    for (d, x) in cd.remainder().iter().zip(cx.remainder()) {
        a[0] += d;
        b[0] += d * (x - mu);
    }
    for (qd, qx) in cd.zip(cx) {
        for k in 0..16 {
            a[k] += qd[k];
            b[k] += qd[k] * (qx[k] - mu);
        }
    }
    (
        a.iter().map(|&v| f64::from(v)).sum::<f64>(),
        b.iter().map(|&v| f64::from(v)).sum::<f64>(),
    )
}

/// One run of the data gradient: `k·dy - shift - tilt·(x - mu)`, from `dy`, or (`dy` = `None`)
/// from `out` itself, in place.
pub(super) fn data_grad<T: Element>(
    dy: Option<&[T]>,
    x: &[T],
    out: &mut [T],
    [k, shift, tilt, mu]: [f64; 4],
) {
    if lanes() {
        let c = [k, shift, tilt, mu].map(|v| v as f32);
        match (dy.map(as_f32), as_f32(x), as_f32_mut(out)) {
            (Some(Some(d)), Some(x), Some(o)) => return vectorized(|| data_grad_f32(d, x, o, c)),
            (None, Some(x), Some(o)) => return vectorized(|| data_grad_in_place_f32(x, o, c)),
            _ => {}
        }
    }
    let f = |d: T, x: &T| T::from_f64(k * d.to_f64() - shift - tilt * (x.to_f64() - mu));
    match dy {
        Some(dy) => dy
            .iter()
            .zip(x)
            .zip(out)
            .for_each(|((d, x), o)| *o = f(*d, x)),
        None => x.iter().zip(out).for_each(|(x, o)| *o = f(*o, x)),
    }
}

#[inline(always)]
fn data_grad_f32(dy: &[f32], x: &[f32], out: &mut [f32], [k, shift, tilt, mu]: [f32; 4]) {
    for ((d, x), o) in dy.iter().zip(x).zip(out) {
        *o = k * d - shift - tilt * (x - mu);
    }
}

#[inline(always)]
fn data_grad_in_place_f32(x: &[f32], out: &mut [f32], [k, shift, tilt, mu]: [f32; 4]) {
    for (x, o) in x.iter().zip(out) {
        *o = k * *o - shift - tilt * (x - mu);
    }
}
