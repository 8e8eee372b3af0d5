//! LeakyReLU: leaky, elu, selu, gelu and prelu (a slope learnt per channel), with its backward
//! op. `grad.rs` holds the gradient rule, `gpu.rs` and `leaky_relu.cu` the GPU kernels.

pub(crate) mod gpu;
mod grad;

use super::params::{attr_enum, op_params, Params};
use super::partial_shapes::{inputs, Found, Known};
use super::{same_dtypes, Arity, Attrs, OpDef, Outputs};
use crate::error::{invalid, shape_error, Result};
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// SELU's constants (Klambauer et al.), in double; MXNet's are rounded to float.
const SELU_ALPHA: f64 = 1.673_263_242_354_377_3;
const SELU_LAMBDA: f64 = 1.050_700_987_355_480_5;

attr_enum! {
    /// LeakyReLU's function (MXNet's `rrelu` is not supported).
    pub enum LeakyType {
        /// `x` above 0, `slope * x` below.
        Leaky = "leaky",
        /// `x` above 0, `slope * (exp(x) - 1)` below.
        Elu = "elu",
        /// The self-normalizing ELU.
        Selu = "selu",
        /// `x * Phi(x)`.
        Gelu = "gelu",
        /// Leaky with a learnt slope per channel (`gamma`).
        Prelu = "prelu",
    }
}

op_params! {
    /// LeakyReLU's attributes.
    pub struct LeakyReLUParams for "LeakyReLU" {
        act_type: LeakyType,
        slope: f32,
        lower_bound: f32,
        upper_bound: f32,
    }
}

/// LeakyReLU's activation. `prelu` learns its slope per channel (input `gamma`); MXNet's
/// `rrelu`, with random slopes, is refused.
#[derive(Clone, Copy)]
pub(crate) enum LeakyAct {
    Leaky(f64),
    Elu(f64),
    Selu,
    /// The exact form, `x * Phi(x)`, as MXNet computes it.
    Gelu,
    Prelu,
}

impl LeakyAct {
    pub(crate) fn of(op: &str, attrs: &Attrs) -> Result<LeakyAct> {
        let a = LeakyReLUParams::get(op, attrs)?;
        let slope = f64::from(a.slope);
        Ok(match a.act_type {
            LeakyType::Leaky => LeakyAct::Leaky(slope),
            LeakyType::Elu => LeakyAct::Elu(slope),
            LeakyType::Selu => LeakyAct::Selu,
            LeakyType::Gelu => LeakyAct::Gelu,
            LeakyType::Prelu => LeakyAct::Prelu,
        })
    }

    /// The output at `x`, `gamma` being prelu's slope there.
    fn apply(self, x: f64, gamma: f64) -> f64 {
        match self {
            LeakyAct::Gelu => 0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2)),
            LeakyAct::Selu if x > 0.0 => SELU_LAMBDA * x,
            LeakyAct::Selu => SELU_LAMBDA * SELU_ALPHA * x.exp_m1(),
            _ if x > 0.0 => x,
            LeakyAct::Leaky(slope) => slope * x,
            LeakyAct::Elu(slope) => slope * x.exp_m1(),
            LeakyAct::Prelu => gamma * x,
        }
    }

    /// The derivative at `x`.
    fn derivative(self, x: f64, gamma: f64) -> f64 {
        match self {
            LeakyAct::Gelu => {
                let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
                0.5 * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2)) + x * pdf
            }
            LeakyAct::Selu if x > 0.0 => SELU_LAMBDA,
            _ if x > 0.0 => 1.0,
            LeakyAct::Leaky(slope) => slope,
            LeakyAct::Elu(slope) => slope * x.exp(),
            LeakyAct::Selu => SELU_LAMBDA * SELU_ALPHA * x.exp(),
            LeakyAct::Prelu => gamma,
        }
    }
}

/// Where prelu's slope for each element of `data` sits in `gamma`: one per channel (axis 1),
/// one for all, or one per element.
#[derive(Clone, Copy)]
struct GammaIndex {
    len: usize,
    channels: usize,
    inner: usize,
}

impl GammaIndex {
    fn new(data: &[usize], gamma_len: usize) -> GammaIndex {
        GammaIndex {
            len: gamma_len,
            channels: data.get(1).copied().unwrap_or(1),
            inner: data.iter().skip(2).product(),
        }
    }

    fn of(self, i: usize) -> usize {
        match self.len {
            1 => 0,
            n if n == self.channels => (i / self.inner) % n,
            _ => i,
        }
    }
}

fn infer_leaky(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let want = match LeakyAct::of(op, attrs)? {
        LeakyAct::Prelu => 2,
        _ => 1,
    };
    if s.len() != want {
        return Err(invalid(
            op,
            format!(
                "act_type {:?} takes {want} input(s) (data{}), got {}",
                LeakyReLUParams::get(op, attrs)?.act_type.word(),
                if want == 2 { ", gamma" } else { "" },
                s.len()
            ),
        ));
    }
    if want == 2 {
        let c = s[0].get(1).copied().unwrap_or(1);
        let n: usize = s[1].iter().product();
        if !(n == 1 || (s[1].len() == 1 && n == c) || s[1] == s[0]) {
            return Err(shape_error(
                op,
                "gamma",
                s[1].clone(),
                format!(
                    "[{c}] (the channels of data {:?}), [1] or data's shape",
                    s[0]
                ),
            ));
        }
    }
    Ok((vec![s[0].clone()], vec![same_dtypes(op, d)?]))
}

fn leaky_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let kind = LeakyAct::of(op, attrs).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => {
        let (x, y) = (ins[0].ptr::<T>(), outs[0].ptr::<T>());
        let gamma = ins.get(1).map(|g| (g.ptr::<T>(), GammaIndex::new(&ins[0].shape, g.len())));
        for i in 0..outs[0].len() {
            // SAFETY: equal lengths, gamma indexed inside its length; raw pointers tolerate the
            // output being exactly the input.
            unsafe {
                let g = gamma.map_or(0.0, |(p, at)| (*p.add(at.of(i))).to_f64());
                *y.add(i) = T::from_f64(kind.apply((*x.add(i)).to_f64(), g));
            }
        }
    });
    Ok(())
}

/// `_backward_LeakyReLU(ograd, data[, gamma])`: the gradients of data and, for prelu, gamma.
/// `(ograd, data[, gamma])`, prelu's gamma as the forward op had it.
fn infer_leaky_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    LeakyAct::of(op, attrs)?;
    let dt = same_dtypes(op, d)?;
    super::check_against_forward(
        op,
        "LeakyReLU",
        attrs,
        (&s[1..], &d[1..]),
        &[(0, &s[0], d[0])],
    )?;
    Ok((s[1..].to_vec(), vec![dt; s.len() - 1]))
}

fn leaky_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let kind = LeakyAct::of(op, attrs).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => {
        let (g, x, dx) = (ins[0].ptr::<T>(), ins[1].ptr::<T>(), outs[0].ptr::<T>());
        let gamma = ins.get(2).map(|t| (t.ptr::<T>(), GammaIndex::new(&ins[1].shape, t.len())));
        let mut dgamma = vec![0.0; ins.get(2).map_or(0, |t| t.len())];
        for i in 0..outs[0].len() {
            // SAFETY: equal lengths, gamma indexed inside its length; dx may be exactly ograd,
            // whose element is read before it is written.
            unsafe {
                let (gi, xi) = ((*g.add(i)).to_f64(), (*x.add(i)).to_f64());
                let slope = gamma.map_or(0.0, |(p, at)| (*p.add(at.of(i))).to_f64());
                if let Some((_, at)) = gamma {
                    if xi <= 0.0 {
                        dgamma[at.of(i)] += gi * xi;
                    }
                }
                *dx.add(i) = T::from_f64(gi * kind.derivative(xi, slope));
            }
        }
        if let Some(out) = outs.get(1) {
            // SAFETY: exclusive access to gamma's gradient.
            for (o, v) in unsafe { out.slice_mut::<T>() }.iter_mut().zip(&dgamma) {
                *o = T::from_f64(*v);
            }
        }
    });
    Ok(())
}

/// LeakyReLU's gradients: the data's, and with `prelu` gamma's.
fn leaky_grad_outputs(op: &str, attrs: &Attrs) -> Result<(usize, usize)> {
    let n = match LeakyReLUParams::get(op, attrs)?.act_type {
        LeakyType::Prelu => 2,
        _ => 1,
    };
    Ok((n, n))
}

/// LeakyReLU: prelu's gamma, when not given, has one slope per channel (axis 1).
fn partial_prelu(_op: &str, _attrs: &Attrs, ins: &Known, _outs: &Known) -> Found {
    let mut out = vec![None; ins.len()];
    if let (Some(Some(x)), Some(None)) = (ins.first(), ins.get(1)) {
        out[1] = Some(vec![x.get(1).copied().unwrap_or(1)]);
    }
    inputs(out)
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            infer_partial: Some(partial_prelu),
            gradient: Some(grad::leaky_relu),
            inplace: &[(0, 0)],
            ..OpDef::new("LeakyReLU", Arity::AtLeast(1), infer_leaky, leaky_kernel)
        }
        .on_gpu(gpu::leaky_relu),
        OpDef {
            inplace: &[(0, 0)],
            ..OpDef::new(
                "_backward_LeakyReLU",
                Arity::AtLeast(2),
                infer_leaky_backward,
                leaky_backward_kernel,
            )
        }
        .outputs(Outputs::By(leaky_grad_outputs))
        .on_gpu(gpu::leaky_relu_backward),
    ];
    OPS
}
