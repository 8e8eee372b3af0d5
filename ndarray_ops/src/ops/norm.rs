//! The normalizations other than BatchNorm: LayerNorm, InstanceNorm, GroupNorm (each
//! `gamma * (x - mean) / sqrt(var + eps) + beta` over its own groups of elements) and
//! L2Normalization (`x / sqrt(sum x² + eps)`), with their backward ops.
//!
//! All four are one computation over a different grouping of the same array: `Groups` names,
//! for a group and a position in it, the element, so one forward and one backward loop serve
//! every op. A group is `len` elements `inner` apart; the groups are every (outer, inner) pair.
//! LayerNorm groups along its axis and scales by the position in the group; InstanceNorm groups
//! each (sample, channel) and GroupNorm each (sample, group of channels), both scaling per
//! group (MXNet 1.9.1's GroupNorm has one gamma per group, not per channel).
//!
//! SoftmaxActivation (MXNet's older softmax: over the last axis, or over the channels at each
//! position) groups as the others do, and hands its groups to the softmax kernel as lanes
//! (`nn::softmax`, `backward::softmax_grad`).
//!
//! The forward pass keeps, as hidden outputs as MXNet does, each group's mean and
//! `sqrt(var + eps)` (L2Normalization: the norm), which the backward op reads instead of
//! recomputing them.

use super::par::{for_ranges, map_lanes, wide, Shared};
use super::params::{attr_enum, op_params, Params, PositiveInt};
use super::reduce::fold_run;
use super::{
    check_against_forward, norm_axes, same_dtypes, Arity, Attrs, OpDef, Outputs, TensorRef,
};
use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// `outer * inner` groups of `len` elements each, `inner` apart.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Groups {
    pub(crate) outer: usize,
    pub(crate) len: usize,
    pub(crate) inner: usize,
}

impl Groups {
    pub(crate) fn count(self) -> usize {
        self.outer * self.inner
    }

    /// The array's shape as (outer, len, inner): the groups are its lanes along axis 1, in
    /// the order of their index.
    fn shape(self) -> [usize; 3] {
        [self.outer, self.len, self.inner]
    }

    /// The element at position `k` of group `g`.
    fn at(self, g: usize, k: usize) -> usize {
        let (o, i) = (g / self.inner, g % self.inner);
        (o * self.len + k) * self.inner + i
    }
}

/// Which of gamma's entries scales an element.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scale {
    /// The element's position in its group (LayerNorm: one gamma along the axis).
    ByPosition,
    /// The group's outer index modulo the count (InstanceNorm: channels; GroupNorm: groups).
    ByGroup(usize),
}

impl Scale {
    /// Gamma's entry for every element of group `g`, or `None` where it goes by position.
    fn of_group(self, g: usize, groups: Groups) -> Option<usize> {
        match self {
            Scale::ByPosition => None,
            Scale::ByGroup(m) => Some((g / groups.inner) % m),
        }
    }
}

op_params! {
    /// LayerNorm's attributes.
    pub struct LayerNormParams for "LayerNorm" {
        axis: i64,
        eps: f32,
        output_mean_var: bool,
    }
}

op_params! {
    /// InstanceNorm's attributes.
    pub struct InstanceNormParams for "InstanceNorm" {
        eps: f32,
    }
}

op_params! {
    /// GroupNorm's attributes.
    pub struct GroupNormParams for "GroupNorm" {
        num_groups: PositiveInt,
        eps: f32,
        output_mean_var: bool,
    }
}

attr_enum! {
    /// What L2Normalization normalizes over.
    pub enum L2Mode {
        /// Each sample (all but the first axis).
        Instance = "instance",
        /// The channels at each position.
        Channel = "channel",
        /// The positions of each channel.
        Spatial = "spatial",
    }
}

op_params! {
    /// L2Normalization's attributes.
    pub struct L2NormalizationParams for "L2Normalization" {
        eps: f32,
        mode: L2Mode,
    }
}

attr_enum! {
    /// What SoftmaxActivation's softmax runs over.
    pub enum SoftmaxMode {
        /// The last axis.
        Instance = "instance",
        /// The channels at each position.
        Channel = "channel",
    }
}

op_params! {
    /// SoftmaxActivation's attributes.
    pub struct SoftmaxActivationParams for "SoftmaxActivation" {
        mode: SoftmaxMode,
    }
}

/// How `op` groups an array of `shape`: the groups, the scaling, gamma's length and the shape
/// of the per-group statistics.
pub(crate) fn layout(
    op: &str,
    attrs: &Attrs,
    shape: &[usize],
) -> Result<(Groups, Scale, usize, Vec<usize>)> {
    let need = |n: usize| {
        if shape.len() < n {
            Err(shape_error(
                op,
                "data",
                shape,
                format!("at least {n} dimensions"),
            ))
        } else {
            Ok(())
        }
    };
    let spatial = || shape.iter().skip(2).product::<usize>();
    Ok(match op {
        "LayerNorm" | "_backward_LayerNorm" => {
            need(1)?;
            let a = norm_axes(op, &[LayerNormParams::get(op, attrs)?.axis], shape.len())?[0];
            let mut stats = shape.to_vec();
            stats[a] = 1;
            let groups = Groups {
                outer: shape[..a].iter().product(),
                len: shape[a],
                inner: shape[a + 1..].iter().product(),
            };
            (groups, Scale::ByPosition, shape[a], stats)
        }
        "InstanceNorm" | "_backward_InstanceNorm" => {
            need(3)?;
            let (n, c) = (shape[0], shape[1]);
            let groups = Groups {
                outer: n * c,
                len: spatial(),
                inner: 1,
            };
            (groups, Scale::ByGroup(c), c, vec![n, c])
        }
        "GroupNorm" | "_backward_GroupNorm" => {
            need(2)?;
            let (n, c) = (shape[0], shape[1]);
            let g = GroupNormParams::get(op, attrs)?.num_groups.0;
            if !c.is_multiple_of(g) {
                return Err(invalid(
                    op,
                    format!("num_groups={g} does not divide the {c} channels of data {shape:?}"),
                ));
            }
            let groups = Groups {
                outer: n * g,
                len: c / g * spatial(),
                inner: 1,
            };
            (groups, Scale::ByGroup(g), g, vec![n, g])
        }
        // MXNet's `instance` softmax is over the last axis (its data flattened to 2-D).
        "SoftmaxActivation" | "_backward_SoftmaxActivation"
            if SoftmaxActivationParams::get(op, attrs)?.mode == SoftmaxMode::Instance =>
        {
            need(1)?;
            let last = shape[shape.len() - 1];
            let groups = Groups {
                outer: shape.iter().product::<usize>() / last.max(1),
                len: last,
                inner: 1,
            };
            (groups, Scale::ByPosition, 0, vec![])
        }
        _ => {
            // L2Normalization and SoftmaxActivation's channel mode: no gamma; the
            // statistics' shape is the groups'.
            need(2)?;
            let (n, c) = (shape[0], shape[1]);
            let rest: usize = shape[1..].iter().product();
            let mode = match op.ends_with("SoftmaxActivation") {
                true => L2Mode::Channel,
                false => L2NormalizationParams::get(op, attrs)?.mode,
            };
            match mode {
                L2Mode::Instance => (
                    Groups {
                        outer: n,
                        len: rest,
                        inner: 1,
                    },
                    Scale::ByPosition,
                    0,
                    vec![n],
                ),
                L2Mode::Channel => {
                    let mut stats = shape.to_vec();
                    stats.remove(1);
                    let groups = Groups {
                        outer: n,
                        len: c,
                        inner: spatial(),
                    };
                    (groups, Scale::ByPosition, 0, stats)
                }
                L2Mode::Spatial => (
                    Groups {
                        outer: n * c,
                        len: spatial(),
                        inner: 1,
                    },
                    Scale::ByPosition,
                    0,
                    vec![n, c],
                ),
            }
        }
    })
}

/// The `eps` of a norm (LayerNorm, InstanceNorm, GroupNorm, L2Normalization), forward or
/// backward.
pub(crate) fn eps(op: &str, attrs: &Attrs) -> Result<f64> {
    let eps = match op.trim_start_matches("_backward_") {
        "LayerNorm" => LayerNormParams::get(op, attrs)?.eps,
        "InstanceNorm" => InstanceNormParams::get(op, attrs)?.eps,
        "GroupNorm" => GroupNormParams::get(op, attrs)?.eps,
        _ => L2NormalizationParams::get(op, attrs)?.eps,
    };
    Ok(f64::from(eps))
}

fn check_float(op: &str, dt: DType) -> Result<()> {
    if dt.is_float() {
        Ok(())
    } else {
        Err(NdError::DType {
            op: op.into(),
            arg: "data".into(),
            found: dt.to_string(),
            expected: "float32 or float64".into(),
        })
    }
}

/// Forward: `(data, gamma, beta) -> (out, mean, std)`; L2Normalization `data -> (out, norm)`.
fn infer_norm(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    check_float(op, dt)?;
    let (_, _, scales, stats) = layout(op, attrs, &s[0])?;
    eps(op, attrs)?;
    if op == "L2Normalization" {
        return Ok((vec![s[0].clone(), stats], vec![dt; 2]));
    }
    for (i, name) in [(1, "gamma"), (2, "beta")] {
        if s[i] != [scales] {
            return Err(shape_error(
                op,
                name,
                s[i].clone(),
                format!("[{scales}] for data {:?}", s[0]),
            ));
        }
    }
    Ok((vec![s[0].clone(), stats.clone(), stats], vec![dt; 3]))
}

/// Gamma's and beta's shapes from the data's, for binding from the data shape alone.
pub(super) fn infer_params(
    op: &str,
    attrs: &Attrs,
    ins: &[Option<Vec<usize>>],
    _outs: &[Option<Vec<usize>>],
) -> Result<super::Partial> {
    let mut out = vec![None; ins.len()];
    if let Some(Some(x)) = ins.first() {
        let (_, _, scales, _) = layout(op, attrs, x)?;
        for o in out.iter_mut().skip(1) {
            *o = Some(vec![scales]);
        }
    }
    Ok(super::Partial {
        inputs: out,
        outputs: vec![],
    })
}

fn norm_kernel(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let op = def.name;
    let e = |e: NdError| e.to_string();
    let x = &ins[0];
    let (groups, scale, _, _) = layout(op, attrs, &x.shape).map_err(e)?;
    let eps = eps(op, attrs).map_err(e)?;
    let l2 = op == "L2Normalization";
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

/// Backward of the affine norms: `(ograd, data, gamma, mean, std) -> (d data, d gamma,
/// d beta)`; of L2Normalization: `(ograd, out, norm) -> d data`.
/// L2Normalization: `(ograd, out, norm)`, where the output has the data's shape; the others:
/// `(ograd, data, gamma, mean, std)`, beta shaped like gamma. Checked against the forward op,
/// the kept statistics as its hidden outputs.
fn infer_norm_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    let forward = op.trim_start_matches("_backward_");
    match op {
        "_backward_L2Normalization" => {
            let grads = [(0, &s[0][..], dt), (0, &s[1][..], dt), (1, &s[2][..], dt)];
            check_against_forward(op, forward, attrs, (&s[1..2], &d[1..2]), &grads)?
        }
        _ => {
            let fwd = [s[1].clone(), s[2].clone(), s[2].clone()];
            let grads = [(0, &s[0][..], dt), (1, &s[3][..], dt), (2, &s[4][..], dt)];
            check_against_forward(op, forward, attrs, (&fwd, &[dt; 3]), &grads)?
        }
    };
    Ok(match op {
        "_backward_L2Normalization" => (vec![s[1].clone()], vec![dt]),
        _ => (vec![s[1].clone(), s[2].clone(), s[2].clone()], vec![dt; 3]),
    })
}

fn norm_backward_kernel(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let op = def.name;
    let e = |e: NdError| e.to_string();
    let (groups, scale, scales, _) = layout(op, attrs, &ins[1].shape).map_err(e)?;
    let l2 = op == "_backward_L2Normalization";
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
            if super::par::has_wide() {
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

/// SoftmaxActivation: `data -> out`, a softmax over each group (`mode` instance or channel).
fn infer_softmax_activation(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    check_float(op, d[0])?;
    layout(op, attrs, &s[0])?;
    Ok((vec![s[0].clone()], vec![d[0]]))
}

fn softmax_activation_kernel(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let op = def.name;
    let (groups, ..) = layout(op, attrs, &ins[0].shape).map_err(|e| e.to_string())?;
    // A softmax over each group: the groups are lanes along axis 1 of (outer, len, inner).
    super::nn::softmax(&ins[0], &outs[0], (&groups.shape(), 1, 1.0, false));
    Ok(())
}

/// `_backward_SoftmaxActivation(ograd, out) -> y * (g - sum(g y))` per group.
fn softmax_activation_backward_kernel(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let op = def.name;
    let (groups, ..) = layout(op, attrs, &ins[1].shape).map_err(|e| e.to_string())?;
    let lanes = (&groups.shape()[..], 1, 1.0, false);
    super::backward::softmax_grad(&ins[0], &ins[1], &outs[0], lanes);
    Ok(())
}

/// `(ograd, output)`, the output shaped like the data.
fn infer_softmax_activation_backward(
    op: &str,
    attrs: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Infer {
    let grads = [(0, &s[0][..], d[0]), (0, &s[1][..], d[1])];
    check_against_forward(op, "SoftmaxActivation", attrs, (&s[1..], &d[1..]), &grads)?;
    Ok((vec![s[1].clone()], vec![d[0]]))
}

pub(super) fn ops() -> &'static [OpDef] {
    const fn norm(name: &'static str) -> OpDef {
        OpDef {
            infer_partial: Some(infer_params),
            alias_safe: false,
            ..OpDef::new(name, Arity::Exactly(3), infer_norm, norm_kernel)
        }
    }
    const fn backward(name: &'static str, inputs: usize) -> OpDef {
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                name,
                Arity::Exactly(inputs),
                infer_norm_backward,
                norm_backward_kernel,
            )
        }
    }
    static OPS: &[OpDef] = &[
        // The per-group statistics the backward op reads are hidden outputs, as in MXNet.
        norm("LayerNorm")
            .outputs(Outputs::By(|op, attrs| {
                Ok(super::norm_outputs(
                    LayerNormParams::get(op, attrs)?.output_mean_var,
                ))
            }))
            .grad(grad::layer_norm)
            .on_gpu(gpu::lanes::normalization),
        norm("InstanceNorm")
            .outputs(Outputs::Fixed(3, 1))
            .grad(grad::instance_norm)
            .on_gpu(gpu::lanes::normalization),
        norm("GroupNorm")
            .outputs(Outputs::By(|op, attrs| {
                Ok(super::norm_outputs(
                    GroupNormParams::get(op, attrs)?.output_mean_var,
                ))
            }))
            .grad(grad::group_norm)
            .on_gpu(gpu::lanes::normalization),
        OpDef {
            arity: Arity::Exactly(1),
            infer_partial: None,
            // Its backward reads the output and the norm, not the data.
            backward_ignores: &[0],
            gradient: Some(grad::l2_normalization),
            outputs: Outputs::Fixed(2, 1),
            ..norm("L2Normalization")
        }
        .on_gpu(gpu::lanes::normalization),
        backward("_backward_LayerNorm", 5)
            .outputs(Outputs::all(3))
            .on_gpu(gpu::lanes::normalization),
        backward("_backward_InstanceNorm", 5)
            .outputs(Outputs::all(3))
            .on_gpu(gpu::lanes::normalization),
        backward("_backward_GroupNorm", 5)
            .outputs(Outputs::all(3))
            .on_gpu(gpu::lanes::normalization),
        backward("_backward_L2Normalization", 3).on_gpu(gpu::lanes::normalization),
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            gradient: Some(grad::softmax_activation),
            ..OpDef::new(
                "SoftmaxActivation",
                Arity::Exactly(1),
                infer_softmax_activation,
                softmax_activation_kernel,
            )
        }
        .on_gpu(gpu::lanes::softmax_activation),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_SoftmaxActivation",
                Arity::Exactly(2),
                infer_softmax_activation_backward,
                softmax_activation_backward_kernel,
            )
        }
        .on_gpu(gpu::lanes::softmax_activation),
    ];
    OPS
}
