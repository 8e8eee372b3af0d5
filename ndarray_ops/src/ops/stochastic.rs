//! Ops whose behaviour depends on training mode or randomness: BatchNorm (batch statistics and
//! moving-average updates in training, moving statistics in inference), Dropout (seeded masks),
//! and the random generators.
//!
//! Training mode is the attribute `__is_train__` (the executor sets it from `forward(is_train)`;
//! imperative callers pass it), as MXNet's op context carries `is_train`.

use crate::ops::Call;
use rand::Rng;
use rand_distr::{Distribution, Normal};

use super::family::Member;
use super::params::{attr_enum, op_params, Params};
use super::{Arity, Attrs, OpDef, Outputs};
use crate::error::{invalid, NdError, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::{Infer, KResult};
use crate::resources::{KernelRes, Resource};
use crate::{DType, Element};

/// The training-mode attribute.
pub const IS_TRAIN: &str = "__is_train__";

pub(crate) fn is_train(op: &str, attrs: &Attrs) -> Result<bool> {
    attrs.bool(op, IS_TRAIN, false)
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

fn dropout_kernel(call: Call, res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
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

/// A member of the sampler family: the distribution an op draws from, named for its op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sampler {
    Uniform,
    Normal,
}

impl Sampler {
    /// Every member.
    const ALL: [Sampler; 2] = [Sampler::Uniform, Sampler::Normal];

    /// The op's name: the family's one name table.
    const fn name(self) -> &'static str {
        match self {
            Sampler::Uniform => "_random_uniform",
            Sampler::Normal => "_random_normal",
        }
    }

    /// The member named `op` (inference receives the op's name).
    fn of(op: &str) -> Result<Sampler> {
        Sampler::ALL
            .into_iter()
            .find(|m| m.name() == op)
            .ok_or_else(|| invalid(op, "is not a sampler"))
    }

    /// Its two parameters: uniform's (low, high), normal's (loc, scale).
    pub(crate) fn params(self, attrs: &Attrs) -> Result<(f64, f64)> {
        let op = self.name();
        match self {
            Sampler::Uniform => UniformParams::get(op, attrs).map(|p| (p.low, p.high)),
            Sampler::Normal => NormalParams::get(op, attrs).map(|p| (p.loc, p.scale)),
        }
    }
}

/// The member `def` is, as an error message where it is none.
pub(crate) fn sampler(def: &OpDef) -> std::result::Result<Sampler, String> {
    match def.member {
        Member::Sampler(m) => Ok(m),
        _ => Err(format!("{} is not a sampler", def.name)),
    }
}

fn infer_random(op: &str, attrs: &Attrs, _s: &[Vec<usize>], _d: &[DType]) -> Infer {
    let m = Sampler::of(op)?;
    let (shape, dtype) = match m {
        Sampler::Uniform => {
            let p = UniformParams::get(op, attrs)?;
            (p.shape.clone(), p.dtype)
        }
        Sampler::Normal => {
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
    let (a, b) = m.params(attrs)?;
    match m {
        Sampler::Uniform if a > b => {
            return Err(invalid(op, format!("low {a} is above high {b}")));
        }
        Sampler::Normal if b < 0.0 => {
            return Err(invalid(op, format!("scale {b} is negative")));
        }
        Sampler::Uniform | Sampler::Normal => {}
    }
    Ok((vec![shape.iter().map(|&d| d as usize).collect()], vec![dt]))
}

fn random_kernel(call: Call, res: &mut KernelRes) -> KResult {
    let (def, attrs, _, outs) = call.parts();
    let (m, op) = (sampler(def)?, def.name);
    let (a, b) = m.params(attrs).map_err(|e| e.to_string())?;
    let rng = res.rng()?;
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: exclusive access to the output.
        let out = unsafe { outs[0].slice_mut::<T>() };
        match m {
            Sampler::Uniform => {
                for v in out.iter_mut() {
                    *v = T::from_f64(a + (b - a) * rng.gen::<f64>());
                }
            }
            Sampler::Normal => {
                let normal = Normal::new(a, b).map_err(|e| format!("{op}: {e}"))?;
                for v in out.iter_mut() {
                    *v = T::from_f64(normal.sample(rng));
                }
            }
        }
    });
    Ok(())
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
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
                Sampler::Uniform.name(),
                Arity::Exactly(0),
                infer_random,
                random_kernel,
            )
        }
        .member(Member::Sampler(Sampler::Uniform))
        .on_gpu(gpu::nn::random_fill),
        OpDef {
            aliases: &["normal", "random_normal"],
            alias_safe: false,
            resources: &[Resource::Random],
            ..OpDef::new(
                Sampler::Normal.name(),
                Arity::Exactly(0),
                infer_random,
                random_kernel,
            )
        }
        .member(Member::Sampler(Sampler::Normal))
        .on_gpu(gpu::nn::random_fill),
    ];
    OPS
}
