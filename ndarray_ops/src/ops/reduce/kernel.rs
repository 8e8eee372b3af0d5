//! The reductions' CPU kernel: folds over merged groups of axes (interleaved lanes where the
//! order changes only rounding), and the index of each lane's first extreme element.

use super::{axes_of, member, norm_ord, ArgExtremeParams, Reduce};
use crate::ops::norm_axes;
use crate::ops::par::{for_ranges, Shared};
use crate::ops::params::Params;
use crate::ops::{Call, KResult};
use crate::resources::KernelRes;
use crate::Element;

/// Reduces `x` (of shape `shape`) over `axes`: every output element (in the kept axes'
/// row-major order) folds its inputs into `init` with `add`; partial folds join with `merge`.
/// `interleave`: whether a run may be folded in interleaved partial folds, which changes only
/// rounding for sums and products, but not for max and min, where the first of equal values
/// (zeros of either sign) must win as the scan meets them.
///
/// Axes of size 1 are dropped and neighbouring axes of the same kind merged, leaving
/// alternating groups of kept and reduced axes; the innermost reduced group is folded first,
/// then each further one over the partial results. A group folds either contiguous runs (the
/// last group: `LANES` interleaved partial folds, joined at the end, so that the adds
/// vectorize, where `interleave` allows) or whole rows of the kept axes after it, added row by
/// row in order.
fn reduce<T, A>(
    x: &[T],
    shape: &[usize],
    axes: &[usize],
    (init, interleave): (A, bool),
    add: impl Fn(A, T) -> A + Sync,
    merge: impl Fn(A, A) -> A + Sync,
) -> Vec<A>
where
    T: Copy + Sync,
    A: Copy + Send + Sync,
{
    // (size, reduced) per group.
    let mut groups: Vec<(usize, bool)> = Vec::new();
    for (d, &n) in shape.iter().enumerate().filter(|&(_, &n)| n != 1) {
        let reduced = axes.contains(&d);
        match groups.last_mut() {
            Some((m, r)) if *r == reduced => *m *= n,
            _ => groups.push((n, reduced)),
        }
    }
    let sizes = |groups: &[(usize, bool)], j: usize| {
        let outer = groups[..j].iter().map(|g| g.0).product::<usize>();
        let inner = groups[j + 1..].iter().map(|g| g.0).product::<usize>();
        (outer, groups[j].0, inner)
    };
    let Some(j) = groups.iter().rposition(|g| g.1) else {
        return x.iter().map(|&v| add(init, v)).collect();
    };
    let mut acc = fold_group(x, sizes(&groups, j), (init, interleave), &add, &merge);
    groups.remove(j);
    while let Some(j) = groups.iter().rposition(|g| g.1) {
        acc = fold_group(&acc, sizes(&groups, j), (init, interleave), &merge, &merge);
        groups.remove(j);
    }
    acc
}

/// Interleaved partial folds of a contiguous run: 8 lanes of 4-byte elements fill one AVX
/// register.
const LANES: usize = 8;

/// One group of `r` reduced indices between `outer` and `inner` kept ones: `(outer, inner)`
/// folds of `src` (shape `(outer, r, inner)`), split across threads by `outer`; contiguous
/// runs in interleaved lanes where `interleave` says the fold's order does not matter.
fn fold_group<S, A>(
    src: &[S],
    (outer, r, inner): (usize, usize, usize),
    (init, interleave): (A, bool),
    add: &(impl Fn(A, S) -> A + Sync),
    merge: &(impl Fn(A, A) -> A + Sync),
) -> Vec<A>
where
    S: Copy + Sync,
    A: Copy + Send + Sync,
{
    let mut out = vec![init; outer * inner];
    let dst = Shared::new(out.as_mut_ptr());
    for_ranges(outer, r * inner, |lo, hi| {
        // SAFETY: rows `lo..hi` of the output (each `inner` long, inside it) belong to this
        // range alone.
        let rows =
            unsafe { std::slice::from_raw_parts_mut(dst.get().add(lo * inner), (hi - lo) * inner) };
        for (o, row) in (lo..hi).zip(rows.chunks_exact_mut(inner.max(1))) {
            let src = &src[o * r * inner..(o + 1) * r * inner];
            if inner == 1 && interleave {
                row[0] = fold_run(src, init, add, merge);
            } else {
                for k in src.chunks_exact(inner.max(1)) {
                    for (a, &v) in row.iter_mut().zip(k) {
                        *a = add(*a, v);
                    }
                }
            }
        }
    });
    out
}

/// Writes into `dst` (shape `(outer, inner)`, as `T`) the index along the middle axis of each
/// lane's first extreme element of `x` (shape `(outer, r, inner)`), where `better(v, b)` says
/// `v` beats the best so far. Every lane starts at its first element and moves only to a
/// strictly better one, as one scan in order would: the first of equal extremes wins, and a
/// NaN only as the first element. A contiguous lane (`inner == 1`) keeps `LANES` interleaved
/// candidates, joined by value and then by index; strided lanes go a block of neighbouring
/// lanes at a time, row after row, so that every read is contiguous. Lanes split across
/// threads.
fn arg_extreme<T: Element>(
    x: &[T],
    (outer, r, inner): (usize, usize, usize),
    better: impl Fn(T, T) -> bool + Sync,
    dst: &mut [T],
) {
    if r == 0 {
        return dst.fill(T::default());
    }
    // Neighbouring strided lanes walked together: their candidates and indices stay in L1.
    const BLOCK: usize = 256;
    let blocks = inner.div_ceil(BLOCK);
    let out = Shared::new(dst.as_mut_ptr());
    for_ranges(outer * blocks, r * inner.min(BLOCK), |lo, hi| {
        for unit in lo..hi {
            let (o, b) = (unit / blocks, unit % blocks);
            let lanes = &x[o * r * inner..(o + 1) * r * inner];
            let (c0, c1) = (b * BLOCK, (b * BLOCK + BLOCK).min(inner));
            // SAFETY: unit `(o, b)` alone writes columns `c0..c1` of output row `o`.
            let dst =
                unsafe { std::slice::from_raw_parts_mut(out.get().add(o * inner + c0), c1 - c0) };
            if inner == 1 {
                dst[0] = T::from_f64(arg_run(lanes, &better) as f64);
                continue;
            }
            let mut best = [T::default(); BLOCK];
            let mut at = [0usize; BLOCK];
            let (best, at) = (&mut best[..c1 - c0], &mut at[..c1 - c0]);
            best.copy_from_slice(&lanes[c0..c1]);
            for k in 1..r {
                let row = &lanes[k * inner + c0..k * inner + c1];
                for ((b, i), &v) in best.iter_mut().zip(at.iter_mut()).zip(row) {
                    if better(v, *b) {
                        *b = v;
                        *i = k;
                    }
                }
            }
            for (d, &i) in dst.iter_mut().zip(at.iter()) {
                *d = T::from_f64(i as f64);
            }
        }
    });
}

/// The index of the first extreme element of a non-empty contiguous run (see [`arg_extreme`]).
fn arg_run<T: Copy>(run: &[T], better: &impl Fn(T, T) -> bool) -> usize {
    let mut best = [run[0]; LANES];
    let mut at = [0usize; LANES];
    let chunks = run.chunks_exact(LANES);
    let tail = run.len() - chunks.remainder().len();
    for (c, chunk) in chunks.enumerate() {
        for (l, ((b, i), &v)) in best.iter_mut().zip(at.iter_mut()).zip(chunk).enumerate() {
            if better(v, *b) {
                *b = v;
                *i = c * LANES + l;
            }
        }
    }
    // Each lane holds its own first extreme; of equal ones the earliest wins.
    let (mut v, mut i) = (best[0], at[0]);
    for (&w, &j) in best.iter().zip(&at).skip(1) {
        if better(w, v) || (!better(v, w) && j < i) {
            (v, i) = (w, j);
        }
    }
    for (j, &w) in run.iter().enumerate().skip(tail) {
        if better(w, v) {
            (v, i) = (w, j);
        }
    }
    i
}

/// Folds a contiguous run in `LANES` interleaved partial folds (which vectorize), joined by
/// `merge` at the end, then the run's tail in order: for folds whose order changes at most
/// their rounding. Always inlined, so that it runs compiled as its caller is (a `wide` or
/// AVX2 twin's caller included).
#[inline(always)]
pub(crate) fn fold_run<S: Copy, A: Copy>(
    run: &[S],
    init: A,
    add: impl Fn(A, S) -> A,
    merge: impl Fn(A, A) -> A,
) -> A {
    let mut lanes = [init; LANES];
    let chunks = run.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = add(*l, v);
        }
    }
    let a = lanes.into_iter().reduce(merge).unwrap_or(init);
    tail.iter().fold(a, |a, &v| add(a, v))
}

pub(super) fn kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let m = member(def)?;
    let op = def.name;
    let e2s = |e: crate::NdError| e.to_string();
    let (a, out) = (&ins[0], &outs[0]);
    crate::with_dtype!(a.dtype, T => {
        // SAFETY: the engine gives this op read access to the input; `run_kernel` copied it if it
        // overlapped the output.
        let x = unsafe { a.slice::<T>() };
        // SAFETY: exclusive access to the output (disjoint from the input).
        let dst = unsafe { out.slice_mut::<T>() };
        let arg_lanes = || -> std::result::Result<_, String> {
            Ok(match ArgExtremeParams::get(op, attrs).map_err(e2s)?.axis {
                None => (1, a.len(), 1),
                Some(ax) => {
                    let ax = norm_axes(op, &[ax], a.shape.len()).map_err(e2s)?[0];
                    let outer = a.shape[..ax].iter().product();
                    (outer, a.shape[ax], a.shape[ax + 1..].iter().product())
                }
            })
        };
        let shape = &a.shape;
        let axes = || axes_of(op, attrs, shape.len()).map_err(e2s);
        let (ninf, inf) = (T::from_f64(f64::NEG_INFINITY), T::from_f64(f64::INFINITY));
        let larger = |m: T, v: T| if v > m { v } else { m };
        let smaller = |m: T, v: T| if v < m { v } else { m };
        let sum = |axes: &[usize]| reduce(x, shape, axes, (T::default(), true), T::add, T::add);
        let r: Vec<T> = match m {
            Reduce::Argmax => {
                arg_extreme(x, arg_lanes()?, |v, b| v > b, dst);
                return Ok(());
            }
            Reduce::Argmin => {
                arg_extreme(x, arg_lanes()?, |v, b| v < b, dst);
                return Ok(());
            }
            Reduce::Sum => sum(&axes()?),
            Reduce::Mean => {
                let axes = axes()?;
                let r = sum(&axes);
                // The mean of nothing is NaN, as in NumPy (0 in an integer type).
                match axes.iter().map(|&d| shape[d]).product::<usize>() {
                    0 => vec![T::from_f64(f64::NAN); r.len()],
                    count => {
                        let n = T::from_f64(count as f64);
                        r.into_iter().map(|x| x.div(n)).collect()
                    }
                }
            }
            Reduce::Max => reduce(x, shape, &axes()?, (ninf, false), larger, larger),
            Reduce::Min => reduce(x, shape, &axes()?, (inf, false), smaller, smaller),
            Reduce::Prod => reduce(x, shape, &axes()?, (T::from_f64(1.0), true), T::mul, T::mul),
            // ord is checked at inference; squares and magnitudes summed in f64.
            Reduce::Norm => {
                let (axes, root) = (axes()?, norm_ord(op, attrs).map_err(e2s)? == 2);
                let add = move |s: f64, v: T| {
                    let v = v.to_f64();
                    s + if root { v * v } else { v.abs() }
                };
                let s = reduce(x, shape, &axes, (0.0, true), add, |s, t| s + t);
                s.into_iter()
                    .map(|s| T::from_f64(if root { s.sqrt() } else { s }))
                    .collect()
            }
        };
        dst.copy_from_slice(&r);
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subset of axes of shapes with axes of size 1 and 0, runs longer and shorter than
    /// the lanes, and (outside Miri) passes large enough to be split across threads: sums and
    /// products of small integers (exact in any order) and max/min keeping the first of equal
    /// zeros are what one scan of the input in order gives.
    #[test]
    fn reductions_fold_what_one_scan_in_order_would() {
        let mut shapes = vec![
            vec![5],
            vec![3, 1, 4],
            vec![2, 0, 3],
            vec![2, 3, 2, 19],
            vec![1, 1],
        ];
        if !cfg!(miri) {
            shapes.push(vec![300, 7, 40]);
        }
        for shape in shapes {
            let n: usize = shape.iter().product();
            // Small integers and zeros of both signs; products of 1s and 2s stay exact.
            let x: Vec<f64> = (0..n)
                .map(|i| match (i * 7919) % 11 {
                    0 => 0.0,
                    1 => -0.0,
                    k => [1.0, 2.0, -1.0][k % 3] * (k / 3) as f64,
                })
                .collect();
            let factors: Vec<f64> = x.iter().map(|v| if *v > 0.0 { 2.0 } else { 1.0 }).collect();
            // Where zeros are the extremes, which of them wins shows in its sign.
            let signed = |s: f64| -> Vec<f64> {
                x.iter()
                    .map(|&v| if v == 0.0 { v } else { s * v.abs() })
                    .collect()
            };
            let (nonpos, nonneg) = (signed(-1.0), signed(1.0));
            for mask in 0..1usize << shape.len() {
                let axes: Vec<usize> = (0..shape.len()).filter(|d| mask >> d & 1 == 1).collect();
                // The reference: one scan in input order into each element's output slot.
                let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
                let slots: usize = kept.iter().map(|&d| shape[d]).product();
                let slot = |mut i: usize| {
                    let (mut s, mut scale) = (0, 1);
                    for d in (0..shape.len()).rev() {
                        if !axes.contains(&d) {
                            s += (i % shape[d]) * scale;
                            scale *= shape[d];
                        }
                        i /= shape[d];
                    }
                    s
                };
                let scan = |v: &[f64], init: f64, f: &dyn Fn(f64, f64) -> f64| {
                    let mut acc = vec![init; slots];
                    v.iter()
                        .enumerate()
                        .for_each(|(i, &x)| acc[slot(i)] = f(acc[slot(i)], x));
                    acc
                };
                let bits = |v: Vec<f64>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let larger = |m: f64, v: f64| if v > m { v } else { m };
                let smaller = |m: f64, v: f64| if v < m { v } else { m };
                let add = |a: f64, b: f64| a + b;
                let mul = |a: f64, b: f64| a * b;
                let what = format!("{shape:?} over {axes:?}");
                let sum = reduce(&x, &shape, &axes, (0.0, true), add, add);
                assert_eq!(sum, scan(&x, 0.0, &add), "sum {what}");
                let prod = reduce(&factors, &shape, &axes, (1.0, true), mul, mul);
                assert_eq!(prod, scan(&factors, 1.0, &mul), "prod {what}");
                let (ninf, inf) = (f64::NEG_INFINITY, f64::INFINITY);
                for v in [&x, &nonpos] {
                    let max = reduce(v, &shape, &axes, (ninf, false), larger, larger);
                    assert_eq!(bits(max), bits(scan(v, ninf, &larger)), "max {what}");
                }
                for v in [&x, &nonneg] {
                    let min = reduce(v, &shape, &axes, (inf, false), smaller, smaller);
                    assert_eq!(bits(min), bits(scan(v, inf, &smaller)), "min {what}");
                }
            }
        }
    }

    /// argmax/argmin along every axis of shapes whose lanes are contiguous and strided, shorter
    /// and longer than the interleaved candidates and the blocks of strided lanes, with ties,
    /// zeros of both signs and NaNs (first and later in a lane): the index one scan of each
    /// lane in order picks.
    #[test]
    fn arg_extremes_are_what_one_scan_in_order_picks() {
        let mut shapes = vec![
            vec![1],
            vec![5],
            vec![3, 0, 2],
            vec![2, 3, 2, 19],
            vec![4, 300],
        ];
        if !cfg!(miri) {
            shapes.push(vec![70, 600]);
            shapes.push(vec![3, 5, 700]);
        }
        for shape in shapes {
            let n: usize = shape.iter().product();
            let x: Vec<f32> = (0..n)
                .map(|i| match (i * 7919) % 23 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => f32::NAN,
                    k => (k % 7) as f32 - 3.0,
                })
                .collect();
            for axis in 0..shape.len() {
                let outer: usize = shape[..axis].iter().product();
                let inner: usize = shape[axis + 1..].iter().product();
                let r = shape[axis];
                let lanes = (outer, r, inner);
                let scan = |better: &dyn Fn(f32, f32) -> bool| {
                    let mut want = vec![0.0f32; outer * inner];
                    for o in 0..outer {
                        for j in 0..inner {
                            let at = |k: usize| x[(o * r + k) * inner + j];
                            let (mut b, mut i) = (if r > 0 { at(0) } else { 0.0 }, 0);
                            for k in 1..r {
                                if better(at(k), b) {
                                    (b, i) = (at(k), k);
                                }
                            }
                            want[o * inner + j] = i as f32;
                        }
                    }
                    want
                };
                let mut got = vec![-1.0f32; outer * inner];
                arg_extreme(&x, lanes, |v, b| v > b, &mut got);
                assert_eq!(got, scan(&|v, b| v > b), "argmax {shape:?} axis {axis}");
                arg_extreme(&x, lanes, |v, b| v < b, &mut got);
                assert_eq!(got, scan(&|v, b| v < b), "argmin {shape:?} axis {axis}");
            }
        }
    }
}
