//! The normalizations' CPU kernels: one forward and one backward loop over the groups of any
//! member, the affine parameters' gradients in an order fixed by the shape, and
//! SoftmaxActivation's softmax over its groups.

use super::*;
use crate::ops::Call;

pub(super) fn norm_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let e = |e: NdError| e.to_string();
    let x = &ins[0];
    let (groups, scale, _, _) = layout(op, attrs, &x.shape).map_err(e)?;
    let eps = eps(op, attrs).map_err(e)?;
    let l2 = member(def)? == Norm::L2;
    crate::with_dtype!(x.dtype, T => {
        // SAFETY: read access to data, gamma and beta, exclusive access to the outputs (the
        // registry copies an input that overlaps an output: not alias-safe).
        let (xs, affine) = unsafe {
            (x.slice::<T>(), (!l2).then(|| (ins[1].slice::<T>(), ins[2].slice::<T>())))
        };
        let stat = |k: usize| Shared::new(outs[k].ptr::<T>());
        let (first, second) = (stat(1), if l2 { stat(1) } else { stat(2) });
        let n = groups.len as f64;
        let add = |a: f64, b: f64| a + b;
        map_lanes(&groups.shape(), 1, [xs], stat(0), |_: &mut (), g, [x], y| {
            let (mean, denom) = if l2 {
                let sq = fold_run(x, 0.0, |s, v: T| s + v.to_f64() * v.to_f64(), add);
                (0.0, (sq + eps).sqrt())
            } else {
                let mean = fold_run(x, 0.0, |s, v: T| s + v.to_f64(), add) / n;
                let var = fold_run(x, 0.0, |s, v: T| s + (v.to_f64() - mean).powi(2), add) / n;
                (mean, (var + eps).sqrt())
            };
            let norm = |v: T| (v.to_f64() - mean) / denom;
            match (affine, scale.of_group(g, groups)) {
                (None, _) => y.iter_mut().zip(x).for_each(|(o, &v)| *o = T::from_f64(norm(v))),
                (Some((gamma, beta)), None) => {
                    for ((o, &v), (c, b)) in y.iter_mut().zip(x).zip(gamma.iter().zip(beta)) {
                        *o = T::from_f64(norm(v) * c.to_f64() + b.to_f64());
                    }
                }
                (Some((gamma, beta)), Some(c)) => {
                    let (c, b) = (gamma[c].to_f64(), beta[c].to_f64());
                    y.iter_mut().zip(x).for_each(|(o, &v)| *o = T::from_f64(norm(v) * c + b));
                }
            }
            // SAFETY: group `g`'s statistics are written by this call alone.
            unsafe {
                if l2 {
                    first.write(g, T::from_f64(denom));
                } else {
                    first.write(g, T::from_f64(mean));
                    second.write(g, T::from_f64(denom));
                }
            }
        });
    });
    Ok(())
}

pub(super) fn norm_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let e = |e: NdError| e.to_string();
    let (groups, scale, scales, _) = layout(op, attrs, &ins[1].shape).map_err(e)?;
    let l2 = member(def)? == Norm::L2;
    let n = groups.len as f64;
    crate::with_dtype!(ins[1].dtype, T => {
        // SAFETY: read access to the inputs, exclusive access to the outputs (the registry
        // copies an input that overlaps an output: not alias-safe). L2: ins = (ograd, out,
        // norm); else (ograd, data, gamma, mean, std).
        let ins: Vec<&[T]> = ins.iter().map(|t| unsafe { t.slice::<T>() }).collect();
        let (og, xs) = (ins[0], ins[1]);
        let (affine, std) = match l2 {
            true => (None, ins[2]),
            false => (Some((ins[2], ins[3])), ins[4]),
        };
        map_lanes(&groups.shape(), 1, [og, xs], Shared::new(outs[0].ptr::<T>()), |parts: &mut Vec<(f64, f64)>, g, [og, x], dx| {
            // Gamma and the mean of this group, or nothing for L2Normalization.
            let affine = affine.map(|(gamma, mean)| (gamma, scale.of_group(g, groups), mean[g].to_f64()));
            let lane = Lane { og, x, affine, denom: std[g].to_f64(), n };
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            if crate::ops::par::has_wide() {
                // SAFETY: `has_wide` found the features this twin is compiled for.
                return unsafe { avx2::backward_lane(lane, parts, dx) };
            }
            backward_lane(lane, parts, dx);
        });
        if let Some((_, mean)) = affine {
            let outs = (Shared::new(outs[1].ptr::<T>()), Shared::new(outs[2].ptr::<T>()));
            param_grads(og, xs, (mean, std), (groups, scale, scales), outs);
        }
    });
    Ok(())
}

/// Blocks of rows whose partial sums LayerNorm's gamma and beta gradients add up.
const ROW_BLOCKS: usize = 32;

/// `dg += og * (x - m) * inv` and `db += og` along one group starting at `start`, `inner`
/// apart (contiguous groups as slices, which vectorize).
#[inline(always)]
fn add_row<T: Element>(
    (dg, db): (&mut [f64], &mut [f64]),
    (og, x): (&[T], &[T]),
    (start, inner): (usize, usize),
    (m, inv): (f64, f64),
) {
    let sums = dg.iter_mut().zip(db.iter_mut());
    if inner == 1 {
        let run = start..start + sums.len();
        for ((a, b), (o, v)) in sums.zip(og[run.clone()].iter().zip(&x[run])) {
            *a += o.to_f64() * (v.to_f64() - m) * inv;
            *b += o.to_f64();
        }
    } else {
        for (k, (a, b)) in sums.enumerate() {
            let i = start + k * inner;
            *a += og[i].to_f64() * (x[i].to_f64() - m) * inv;
            *b += og[i].to_f64();
        }
    }
}

/// Gamma's and beta's gradients into `dgamma` / `dbeta` (`scales` entries each, written
/// whole): `sum og * (x - mean) / std` and `sum og` over the elements each entry scales. By
/// position (LayerNorm) the rows fall in `ROW_BLOCKS` fixed blocks summed in parallel, whose
/// partial sums then add up in block order; by group, the groups' sums are taken in parallel
/// and added into their entries in group order. Either way the order of every addition is
/// fixed by the shape alone, so the gradients do not depend on the thread count.
fn param_grads<T: Element>(
    og: &[T],
    x: &[T],
    (mean, std): (&[T], &[T]),
    (groups, scale, scales): (Groups, Scale, usize),
    (dgamma, dbeta): (Shared<T>, Shared<T>),
) {
    let count = groups.count();
    match scale {
        Scale::ByPosition => {
            // Rows in a fixed number of blocks (so that the sums do not depend on the thread
            // count), each block summing its rows into its own partial sums, read in row order
            // from contiguous rows; then the blocks' sums add up in block order per position.
            let len = groups.len;
            let rows = count.div_ceil(ROW_BLOCKS).max(1);
            let blocks = count.div_ceil(rows);
            let mut partial = vec![0.0; blocks * 2 * len];
            let parts = Shared::new(partial.as_mut_ptr());
            for_ranges(blocks, rows * 2 * len, |lo, hi| {
                for b in lo..hi {
                    // SAFETY: block `b`'s partial sums belong to this range alone.
                    let (dg, db) = unsafe { parts.piece_mut(b, 2 * len) }.split_at_mut(len);
                    wide(|| {
                        for g in b * rows..((b + 1) * rows).min(count) {
                            let (m, inv) = (mean[g].to_f64(), 1.0 / std[g].to_f64());
                            add_row((dg, db), (og, x), (groups.at(g, 0), groups.inner), (m, inv));
                        }
                    });
                }
            });
            for_ranges(len, 2 * blocks, |lo, hi| {
                for k in lo..hi {
                    let block = |b: usize| &partial[b * 2 * len..(b + 1) * 2 * len];
                    let (a, b) = (0..blocks)
                        .map(block)
                        .fold((0.0, 0.0), |(a, b), p| (a + p[k], b + p[len + k]));
                    // SAFETY: entries `lo..hi` (inside both outputs, `len` long) belong to this
                    // range alone.
                    unsafe {
                        dgamma.write(k, T::from_f64(a));
                        dbeta.write(k, T::from_f64(b));
                    }
                }
            });
        }
        Scale::ByGroup(_) => {
            let mut sums = vec![(0.0, 0.0); count];
            let each = Shared::new(sums.as_mut_ptr());
            for_ranges(count, 2 * groups.len, |lo, hi| {
                for g in lo..hi {
                    let (m, s) = (mean[g].to_f64(), std[g].to_f64());
                    let (mut sg, mut sb) = (0.0, 0.0);
                    let (start, inner) = (groups.at(g, 0), groups.inner);
                    for i in (0..groups.len).map(|k| start + k * inner) {
                        sg += og[i].to_f64() * (x[i].to_f64() - m);
                        sb += og[i].to_f64();
                    }
                    // SAFETY: group `g`'s sums belong to this range alone.
                    unsafe { each.write(g, (sg / s, sb)) };
                }
            });
            let (mut dg, mut db) = (vec![0.0; scales], vec![0.0; scales]);
            for (g, (sg, sb)) in sums.into_iter().enumerate() {
                if let Some(c) = scale.of_group(g, groups) {
                    dg[c] += sg;
                    db[c] += sb;
                }
            }
            for (c, (a, b)) in dg.into_iter().zip(db).enumerate() {
                // SAFETY: this thread alone writes the outputs, `scales` long.
                unsafe {
                    dgamma.write(c, T::from_f64(a));
                    dbeta.write(c, T::from_f64(b));
                }
            }
        }
    }
}

/// One group of the affine norms' (or L2Normalization's) gradient: its output gradient `og`
/// and data `x`; gamma with the group's entry (`None`: by position) and mean, where affine;
/// `sqrt(var + eps)` (or the norm); the group's length.
#[derive(Clone, Copy)]
struct Lane<'a, T> {
    og: &'a [T],
    x: &'a [T],
    affine: Option<(&'a [T], Option<usize>, f64)>,
    denom: f64,
    n: f64,
}

/// The data gradient of one group into `dx`, `parts` holding each element's normalized value
/// and the gradient it receives.
#[inline(always)]
fn backward_lane<T: Element>(lane: Lane<T>, parts: &mut Vec<(f64, f64)>, dx: &mut [T]) {
    let Lane {
        og,
        x,
        affine,
        denom,
        n,
    } = lane;
    // Filled by plain loops rather than `extend`, whose iterator fold is not inlined here (and
    // so would not be compiled for AVX2 in the twin).
    parts.resize(x.len(), (0.0, 0.0));
    let each = parts.iter_mut().zip(x.iter().zip(og));
    match affine {
        Some((gamma, fixed, m)) => {
            for (k, (p, (x, og))) in each.enumerate() {
                let c = gamma[fixed.unwrap_or(k)].to_f64();
                *p = ((x.to_f64() - m) / denom, og.to_f64() * c);
            }
        }
        None => each.for_each(|(p, (x, og))| *p = (x.to_f64(), og.to_f64())),
    }
    let add = |a: f64, b: f64| a + b;
    let dot = fold_run(parts, 0.0, |s, (h, d)| s + h * d, add);
    // L2: dx = (g - y * sum(g y)) / norm; affine norms subtract the mean too.
    let (mean_d, dot) = match affine {
        None => (0.0, dot),
        Some(_) => (fold_run(parts, 0.0, |s, (_, d)| s + d, add) / n, dot / n),
    };
    for (o, &(h, d)) in dx.iter_mut().zip(parts.iter()) {
        *o = T::from_f64((d - mean_d - h * dot) / denom);
    }
}

/// [`backward_lane`] compiled for AVX2 and FMA, called when `par::has_wide` says the CPU has
/// them (`map_lanes`' own AVX2 copy does not inline a lane this large).
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod avx2 {
    use super::{Element, Lane};

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn backward_lane<T: Element>(
        lane: Lane<T>,
        parts: &mut Vec<(f64, f64)>,
        dx: &mut [T],
    ) {
        super::backward_lane(lane, parts, dx)
    }
}

pub(super) fn softmax_activation_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (groups, ..) = layout(op, attrs, &ins[0].shape).map_err(|e| e.to_string())?;
    // A softmax over each group: the groups are lanes along axis 1 of (outer, len, inner).
    crate::ops::softmax::softmax(&ins[0], &outs[0], (&groups.shape(), 1, 1.0, false));
    Ok(())
}

/// `_backward_SoftmaxActivation(ograd, out) -> y * (g - sum(g y))` per group.
pub(super) fn softmax_activation_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (groups, ..) = layout(op, attrs, &ins[1].shape).map_err(|e| e.to_string())?;
    let lanes = (&groups.shape()[..], 1, 1.0, false);
    crate::ops::softmax::softmax_grad(&ins[0], &ins[1], &outs[0], lanes);
    Ok(())
}
