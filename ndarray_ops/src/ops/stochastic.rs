//! Ops whose behaviour depends on training mode or randomness: BatchNorm (batch statistics and
//! moving-average updates in training, moving statistics in inference), Dropout (seeded masks),
//! and the random generators.
//!
//! Training mode is the attribute `__is_train__` (the executor sets it from `forward(is_train)`;
//! imperative callers pass it), as MXNet's op context carries `is_train`.

use rand::Rng;
use rand_distr::{Distribution, Normal};

use super::bn_lanes;
use super::par::{for_ranges, Shared};
use super::params::{attr_enum, op_params, Params};
use super::{norm_axes, same_dtypes, Arity, Attrs, Flops, OpDef, Outputs, TensorRef};
use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::{Infer, KResult};
use crate::resources::{KernelRes, Resource};
use crate::{DType, Element};

/// The training-mode attribute.
pub const IS_TRAIN: &str = "__is_train__";

fn is_train(op: &str, attrs: &Attrs) -> Result<bool> {
    attrs.bool(op, IS_TRAIN, false)
}

// ---- BatchNorm ------------------------------------------------------------------------------

op_params! {
    /// BatchNorm's attributes. `eps` is a double whose default is the float `1e-3f`
    /// (0.0010000000474974513) and `momentum` a float (0.9 blends as 0.9f), as MXNet holds
    /// them: a float64 model agrees with MXNet to rounding only with these exact values
    /// (tests/mxnet_files.rs).
    pub struct BatchNormParams for "BatchNorm" {
        eps: f64,
        momentum: f32,
        fix_gamma: bool,
        use_global_stats: bool,
        output_mean_var: bool,
        axis: i64,
        cudnn_off: bool,
    }
}

/// What a BatchNorm node (or its backward node) computes with, read from its attributes and
/// its data's shape, once per run.
pub(crate) struct Bn {
    /// (outer, channels, inner) around the channel axis.
    pub(crate) layout: (usize, usize, usize),
    pub(crate) eps: f64,
    pub(crate) momentum: f64,
    /// gamma read as 1, its gradient 0.
    pub(crate) fix_gamma: bool,
    /// Normalize by the batch's own statistics (training, unless `use_global_stats`).
    pub(crate) batch_stats: bool,
    /// Fold the batch statistics into the moving ones: not in a node recomputed during
    /// backward (the forward pass did, once).
    pub(crate) update_moving: bool,
}

impl Bn {
    /// `[mean, scale, beta]` of the map `(x - mean)·scale + beta` that normalizes a channel of
    /// these statistics (gamma read as 1 with `fix_gamma`).
    fn affine(&self, mean: f64, var: f64, gamma: f64, beta: f64) -> [f64; 3] {
        let g = if self.fix_gamma { 1.0 } else { gamma };
        [mean, g / (var + self.eps).sqrt(), beta]
    }
}

/// [`Bn`] for data of shape `shape` (at least 2 dimensions).
pub(crate) fn bn_settings(op: &str, attrs: &Attrs, shape: &[usize]) -> Result<Bn> {
    let a = BatchNormParams::get(op, attrs)?;
    let axis = norm_axes(op, &[a.axis], shape.len())?[0];
    let mirrored = attrs.bool(op, super::graph::MIRROR_ATTR, false)?;
    Ok(Bn {
        layout: (
            shape[..axis].iter().product(),
            shape[axis],
            shape[axis + 1..].iter().product(),
        ),
        eps: a.eps,
        momentum: f64::from(a.momentum),
        fix_gamma: a.fix_gamma,
        batch_stats: is_train(op, attrs)? && !a.use_global_stats,
        update_moving: !mirrored,
    })
}

pub(super) fn infer_bn(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    if !dt.is_float() {
        return Err(NdError::DType {
            op: op.into(),
            arg: "data".into(),
            found: dt.to_string(),
            expected: "float32 or float64".into(),
        });
    }
    if s[0].len() < 2 {
        return Err(shape_error(
            op,
            "data",
            s[0].clone(),
            "at least 2 dimensions",
        ));
    }
    // Read here too so that a bad value fails at bind rather than when the op runs.
    let (_, c, _) = bn_settings(op, attrs, &s[0])?.layout;
    for (i, name) in [
        (1, "gamma"),
        (2, "beta"),
        (3, "moving_mean"),
        (4, "moving_var"),
    ] {
        if s[i] != [c] {
            return Err(shape_error(
                op,
                name,
                s[i].clone(),
                format!("[{c}] (the channels of data {:?})", s[0]),
            ));
        }
    }
    // Outputs: the normalized data, then the mean and variance used (MXNet's hidden outputs).
    Ok((vec![s[0].clone(), vec![c], vec![c]], vec![dt; 3]))
}

fn bn_kernel(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let op = def.name;
    bn_forward(op, attrs, ins, outs, false)
}

/// BatchNorm's forward pass: `ins` are (data, gamma, beta, moving mean, moving variance),
/// `outs` (output, mean used, variance used); `relu` applies ReLU to each output element as it
/// is written (the fused `_fused_BatchNormReLU`, bit-identical to BatchNorm then ReLU).
/// The output may be the data itself (normalized in place).
pub(super) fn bn_forward(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    relu: bool,
) -> KResult {
    let e = |e: crate::NdError| e.to_string();
    let x = &ins[0];
    let bn = bn_settings(op, attrs, &x.shape).map_err(e)?;
    let Bn {
        layout: (outer, c, inner),
        momentum,
        batch_stats,
        update_moving: update,
        ..
    } = bn;
    let count = (outer * inner).max(1) as f64;
    let runs = ChannelRuns { c, inner, outer };
    let in_place = x.buf.ptr == outs[0].buf.ptr;
    crate::with_dtype!(x.dtype, T => {
        let [xs, gamma, beta, mm, mv] = [0, 1, 2, 3, 4].map(|k| Shared::new(ins[k].ptr::<T>()));
        let [ys, mean_out, var_out] = [0, 1, 2].map(|k| Shared::new(outs[k].ptr::<T>()));
        // Channels are independent: a range of them is normalized by one thread.
        for_ranges(c, 3 * outer * inner, |lo, hi| {
            for ch in lo..hi {
                // SAFETY: (every block below) read access to data, gamma and beta; the moving
                // statistics are declared mutated inputs (write access); the outputs are
                // disjoint from the inputs, or the output is the data (`in_place`), whose
                // channel is then read before it is written. This range alone touches channel
                // `ch`: its elements of the data and output, its entries of the statistics.
                let [moving_mean, moving_var, gamma, beta] = [mm, mv, gamma, beta].map(|p| {
                    // SAFETY: entry `ch` of a statistic or parameter, read here.
                    unsafe { p.read(ch) }.to_f64()
                });
                // SAFETY: channel `ch`'s runs of the data, read only while these slices live.
                let x = || unsafe { runs.of(xs, ch) };
                let (mean, var) = if batch_stats {
                    let mean = x().map(bn_lanes::sum).sum::<f64>() / count;
                    let sq: f64 = x().map(|r| bn_lanes::squares(r, mean)).sum();
                    let var = sq / count;
                    let blend = |old: f64, new: f64| T::from_f64(old * momentum + new * (1.0 - momentum));
                    if update {
                        // SAFETY: entry `ch` of the moving statistics is this range's alone.
                        unsafe {
                            mm.write(ch, blend(moving_mean, mean));
                            mv.write(ch, blend(moving_var, var));
                        }
                    }
                    (mean, var)
                } else {
                    (moving_mean, moving_var)
                };
                let c = bn.affine(mean, var, gamma, beta);
                // SAFETY: channel `ch`'s runs of the output are this range's alone; no slice
                // of the data is alive when the output is the data.
                let y_runs = unsafe { runs.of_mut(ys, ch) };
                match (in_place, relu) {
                    (true, false) => y_runs.for_each(|yr| bn_lanes::normalize::<T, false>(None, yr, c)),
                    (true, true) => y_runs.for_each(|yr| bn_lanes::normalize::<T, true>(None, yr, c)),
                    (false, false) => x().zip(y_runs).for_each(|(xr, yr)| bn_lanes::normalize::<T, false>(Some(xr), yr, c)),
                    (false, true) => x().zip(y_runs).for_each(|(xr, yr)| bn_lanes::normalize::<T, true>(Some(xr), yr, c)),
                }
                // SAFETY: entry `ch` of the saved statistics is this range's alone.
                unsafe {
                    mean_out.write(ch, T::from_f64(mean));
                    var_out.write(ch, T::from_f64(var));
                }
            }
        });
    });
    Ok(())
}

/// BatchNorm outside training over float32 data of shape `shape`, as [`bn_forward`] would
/// normalize it: per channel `[mean, scale, beta]` of `(x - mean)·scale + beta`, from the
/// moving statistics, the saved mean and variance written to `outs[1]` and `outs[2]` as
/// [`bn_forward`] writes them. `ins` are gamma, beta and the moving mean and variance. `None`
/// (nothing written) where [`bn_forward`] must run itself: batch statistics, or not float32.
pub(super) fn bn_inference_map(
    op: &str,
    attrs: &Attrs,
    shape: &[usize],
    ins: &[TensorRef],
    outs: &[TensorRef],
) -> Result<Option<Vec<[f32; 3]>>, String> {
    let bn = bn_settings(op, attrs, shape).map_err(|e| e.to_string())?;
    if bn.batch_stats || outs[0].dtype != DType::F32 {
        return Ok(None);
    }
    // SAFETY: the parameters and statistics hold one float32 per channel, the saved statistics
    // too (shapes from inference, every input of the data's type); nothing else writes them
    // while the op runs.
    let ([gamma, beta, mm, mv], [mean_out, var_out]) = unsafe {
        (
            [0, 1, 2, 3].map(|k| ins[k].slice::<f32>()),
            [1, 2].map(|k| outs[k].slice_mut::<f32>()),
        )
    };
    let map = (0..bn.layout.1)
        .map(|ch| {
            let (mean, var) = (f64::from(mm[ch]), f64::from(mv[ch]));
            mean_out[ch] = mm[ch];
            var_out[ch] = mv[ch];
            bn.affine(mean, var, f64::from(gamma[ch]), f64::from(beta[ch]))
                .map(|v| v as f32)
        })
        .collect();
    Ok(Some(map))
}

/// Where one channel's elements lie in a tensor laid out (outer, c, inner): `outer` runs of
/// `inner` contiguous elements, `c * inner` apart.
#[derive(Clone, Copy)]
pub(super) struct ChannelRuns {
    pub(super) c: usize,
    pub(super) inner: usize,
    pub(super) outer: usize,
}

impl ChannelRuns {
    /// Channel `ch`'s runs in the tensor at `p`.
    ///
    /// # Safety
    /// `p` holds `outer * c * inner` elements, and nobody writes channel `ch`'s while the runs
    /// are read.
    pub(super) unsafe fn of<'a, T: 'a>(
        self,
        p: Shared<T>,
        ch: usize,
    ) -> impl Iterator<Item = &'a [T]> {
        (0..self.outer).map(move |o| {
            // SAFETY: run `o` of channel `ch` lies inside the tensor (the contract).
            unsafe { p.piece(o * self.c + ch, self.inner) }
        })
    }

    /// Channel `ch`'s runs in the tensor at `p`, to write.
    ///
    /// # Safety
    /// As for [`ChannelRuns::of`], and nobody else reads or writes channel `ch`'s elements
    /// while the runs live.
    pub(super) unsafe fn of_mut<'a, T: 'a>(
        self,
        p: Shared<T>,
        ch: usize,
    ) -> impl Iterator<Item = &'a mut [T]> {
        (0..self.outer).map(move |o| {
            // SAFETY: run `o` of channel `ch` lies inside the tensor and is this caller's alone
            // (the contract).
            unsafe { p.piece_mut(o * self.c + ch, self.inner) }
        })
    }
}

/// Σ f(a, b) over two runs of equal length, in f64 with four partial sums: a single chain of
/// dependent adds would wait out the adder's latency at every element.
pub(super) fn sum_zip<T: Element>(a: &[T], b: &[T], f: impl Fn(f64, f64) -> f64) -> f64 {
    let mut acc = [0.0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (qa, qb) in ca.zip(cb) {
        for k in 0..4 {
            acc[k] += f(qa[k].to_f64(), qb[k].to_f64());
        }
    }
    let tail: f64 = ra
        .iter()
        .zip(rb)
        .map(|(x, y)| f(x.to_f64(), y.to_f64()))
        .sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

// ---- Dropout --------------------------------------------------------------------------------

attr_enum! {
    /// When Dropout drops units.
    pub enum DropoutMode {
        /// In training only.
        Training = "training",
        /// In training and at inference.
        Always = "always",
    }
}

op_params! {
    /// Dropout's attributes.
    pub struct DropoutParams for "Dropout" {
        p: f32,
        mode: DropoutMode,
        axes: Vec<i64>,
        cudnn_off: Option<bool>,
    }
}

/// Dropout's probability of dropping a unit.
pub(crate) fn dropout_p(op: &str, attrs: &Attrs) -> Result<f64> {
    let a = DropoutParams::get(op, attrs)?;
    let p = f64::from(a.p);
    if !(0.0..1.0).contains(&p) {
        return Err(invalid(op, format!("p={p} must be in [0, 1)")));
    }
    // Variational dropout (one mask shared along `axes`) is not implemented; refused rather
    // than ignored.
    if !a.axes.is_empty() {
        return Err(invalid(
            op,
            "axes (a mask shared along axes) is not supported",
        ));
    }
    Ok(p)
}

/// Whether Dropout drops units: in training, or always with `mode="always"`.
pub(crate) fn dropout_active(op: &str, attrs: &Attrs) -> Result<bool> {
    Ok(is_train(op, attrs)? || DropoutParams::get(op, attrs)?.mode == DropoutMode::Always)
}

fn infer_dropout(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    dropout_p(op, attrs)?;
    is_train(op, attrs)?;
    if !d[0].is_float() {
        return Err(NdError::DType {
            op: op.into(),
            arg: "data".into(),
            found: d[0].to_string(),
            expected: "float32 or float64".into(),
        });
    }
    // Outputs: the data with units dropped, and the mask (scaled by 1 / (1 - p)).
    Ok((vec![s[0].clone(), s[0].clone()], vec![d[0], d[0]]))
}

/// A dropout mask: each unit 0 with probability `p`, else `1 / (1 - p)`, one draw per unit in
/// order (Dropout's, and the fused RNN's between its layers).
pub(crate) fn dropout_mask<T: Element>(rng: &mut rand::rngs::StdRng, p: f64, mask: &mut [T]) {
    let keep = T::from_f64(1.0 / (1.0 - p));
    for m in mask {
        *m = if rng.gen::<f64>() < p {
            T::default()
        } else {
            keep
        };
    }
}

fn dropout_kernel(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    res: &mut KernelRes,
) -> KResult {
    let op = def.name;
    let e = |e: crate::NdError| e.to_string();
    let p = dropout_p(op, attrs).map_err(e)?;
    let active = dropout_active(op, attrs).map_err(e)?;
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: read access to the input; exclusive access to the two disjoint outputs.
        let (x, y, mask) = unsafe { (ins[0].slice::<T>(), outs[0].slice_mut::<T>(), outs[1].slice_mut::<T>()) };
        if active && p > 0.0 {
            dropout_mask(res.rng()?, p, mask);
            for ((yv, mv), xv) in y.iter_mut().zip(mask.iter()).zip(x) {
                *yv = xv.mul(*mv);
            }
        } else {
            y.copy_from_slice(x);
            mask.fill(T::from_f64(1.0));
        }
    });
    Ok(())
}

// ---- random generators ----------------------------------------------------------------------

op_params! {
    /// _random_uniform's attributes.
    pub struct UniformParams for "_random_uniform" {
        low: f64,
        high: f64,
        shape: Option<Vec<i64>>,
        dtype: Option<DType>,
    }
}

op_params! {
    /// _random_normal's attributes.
    pub struct NormalParams for "_random_normal" {
        loc: f64,
        scale: f64,
        shape: Option<Vec<i64>>,
        dtype: Option<DType>,
    }
}

fn infer_random(op: &str, attrs: &Attrs, _s: &[Vec<usize>], _d: &[DType]) -> Infer {
    let (shape, dtype) = match op {
        "_random_uniform" => {
            let p = UniformParams::get(op, attrs)?;
            (p.shape.clone(), p.dtype)
        }
        _ => {
            let p = NormalParams::get(op, attrs)?;
            (p.shape.clone(), p.dtype)
        }
    };
    let shape = shape.ok_or_else(|| invalid(op, "attribute shape is required"))?;
    if shape.iter().any(|&d| d < 0) {
        return Err(invalid(op, format!("shape {shape:?} has a negative size")));
    }
    let dt = match dtype {
        None => DType::F32,
        Some(d) if d.is_float() => d,
        Some(d) => {
            return Err(invalid(
                op,
                format!("dtype {:?} is not float32 or float64", d.name()),
            ))
        }
    };
    let (a, b) = random_params(op, attrs)?;
    if op == "_random_uniform" && a > b {
        return Err(invalid(op, format!("low {a} is above high {b}")));
    }
    if op == "_random_normal" && b < 0.0 {
        return Err(invalid(op, format!("scale {b} is negative")));
    }
    Ok((vec![shape.iter().map(|&d| d as usize).collect()], vec![dt]))
}

/// A sampler's two parameters: uniform's (low, high), normal's (loc, scale).
pub(crate) fn random_params(op: &str, attrs: &Attrs) -> Result<(f64, f64)> {
    match op {
        "_random_uniform" => UniformParams::get(op, attrs).map(|p| (p.low, p.high)),
        _ => NormalParams::get(op, attrs).map(|p| (p.loc, p.scale)),
    }
}

fn random_kernel(
    def: &OpDef,
    attrs: &Attrs,
    _ins: &[TensorRef],
    outs: &[TensorRef],
    res: &mut KernelRes,
) -> KResult {
    let op = def.name;
    let (a, b) = random_params(op, attrs).map_err(|e| e.to_string())?;
    let rng = res.rng()?;
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: exclusive access to the output.
        let out = unsafe { outs[0].slice_mut::<T>() };
        if op == "_random_uniform" {
            for v in out.iter_mut() {
                *v = T::from_f64(a + (b - a) * rng.gen::<f64>());
            }
        } else {
            let normal = Normal::new(a, b).map_err(|e| format!("{op}: {e}"))?;
            for v in out.iter_mut() {
                *v = T::from_f64(normal.sample(rng));
            }
        }
    });
    Ok(())
}

/// BatchNorm's passes over its bytes in the recomputation planner's model: in training it
/// reads its input for the batch statistics and again to normalize, with more arithmetic per
/// element (fitted to a ResNet-50 step's per-op times: see `symbol::mirror`).
pub(crate) const BN_PASSES: f64 = 2.5;

/// BatchNorm's counts: the output, then the batch's mean and variance, hidden unless
/// `output_mean_var` (also those of the fused ops that end in a BatchNorm).
pub(crate) fn bn_outputs(op: &str, attrs: &Attrs) -> Result<(usize, usize)> {
    Ok(super::norm_outputs(
        BatchNormParams::get(op, attrs)?.output_mean_var,
    ))
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            alias_safe: false,
            mutate_inputs: &[3, 4],
            infer_partial: Some(super::partial_shapes::batch_norm),
            gradient: Some(grad::batch_norm),
            outputs: Outputs::By(bn_outputs),
            ..OpDef::new("BatchNorm", Arity::Exactly(5), infer_bn, bn_kernel)
        }
        .cost(Flops::One, BN_PASSES)
        .on_gpu(gpu::nn::batch_norm),
        OpDef {
            backward_ignores: &[0],
            alias_safe: false,
            resources: &[Resource::Random],
            gradient: Some(grad::dropout),
            // The mask is a hidden output, as in MXNet.
            outputs: Outputs::Fixed(2, 1),
            ..OpDef::new("Dropout", Arity::Exactly(1), infer_dropout, dropout_kernel)
        }
        .on_gpu(gpu::nn::dropout),
        OpDef {
            aliases: &["uniform", "random_uniform"],
            alias_safe: false,
            resources: &[Resource::Random],
            ..OpDef::new(
                "_random_uniform",
                Arity::Exactly(0),
                infer_random,
                random_kernel,
            )
        }
        .on_gpu(gpu::nn::random_fill),
        OpDef {
            aliases: &["normal", "random_normal"],
            alias_safe: false,
            resources: &[Resource::Random],
            ..OpDef::new(
                "_random_normal",
                Arity::Exactly(0),
                infer_random,
                random_kernel,
            )
        }
        .on_gpu(gpu::nn::random_fill),
    ];
    OPS
}
