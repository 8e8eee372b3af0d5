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
//! (`softmax::softmax`, `softmax::softmax_grad`).
//!
//! The forward pass keeps, as hidden outputs as MXNet does, each group's mean and
//! `sqrt(var + eps)` (L2Normalization: the norm), which the backward op reads instead of
//! recomputing them.

mod kernel;

use super::family::Member;
use super::par::{for_ranges, map_lanes, wide, Shared};
use super::params::{attr_enum, op_params, Params, PositiveInt};
use super::reduce::fold_run;
use super::{check_against_forward, norm_axes, same_dtypes, Arity, Attrs, OpDef, Outputs};
use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};
use kernel::*;

/// A member of the normalization family, named for its forward op; the backward op
/// (`_backward_<name>`) carries the same member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Norm {
    Layer,
    Instance,
    Group,
    L2,
    SoftmaxActivation,
}

impl Norm {
    /// Every member.
    const ALL: [Norm; 5] = [
        Norm::Layer,
        Norm::Instance,
        Norm::Group,
        Norm::L2,
        Norm::SoftmaxActivation,
    ];

    /// The forward op's name: the family's one name table.
    const fn name(self) -> &'static str {
        match self {
            Norm::Layer => "LayerNorm",
            Norm::Instance => "InstanceNorm",
            Norm::Group => "GroupNorm",
            Norm::L2 => "L2Normalization",
            Norm::SoftmaxActivation => "SoftmaxActivation",
        }
    }

    /// The backward op's name.
    const fn backward_name(self) -> &'static str {
        match self {
            Norm::Layer => "_backward_LayerNorm",
            Norm::Instance => "_backward_InstanceNorm",
            Norm::Group => "_backward_GroupNorm",
            Norm::L2 => "_backward_L2Normalization",
            Norm::SoftmaxActivation => "_backward_SoftmaxActivation",
        }
    }

    /// The member whose forward or backward op is named `op` (inference, which receives the
    /// op's name, reads the name table backwards).
    fn of(op: &str) -> Result<Norm> {
        Norm::ALL
            .into_iter()
            .find(|m| m.name() == op || m.backward_name() == op)
            .ok_or_else(|| invalid(op, "is not a normalization op"))
    }
}

/// The member `def` is, as an error message where it is none.
pub(crate) fn member(def: &OpDef) -> std::result::Result<Norm, String> {
    match def.member {
        Member::Norm(m) => Ok(m),
        _ => Err(format!(
            "{} is not an op of the normalization family",
            def.name
        )),
    }
}

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
    // L2Normalization and SoftmaxActivation's channel mode: no gamma; the statistics' shape is
    // the groups'.
    let by_mode = |mode: L2Mode| -> Result<(Groups, Scale, usize, Vec<usize>)> {
        need(2)?;
        let (n, c) = (shape[0], shape[1]);
        let rest: usize = shape[1..].iter().product();
        Ok(match mode {
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
        })
    };
    Ok(match Norm::of(op)? {
        Norm::Layer => {
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
        Norm::Instance => {
            need(3)?;
            let (n, c) = (shape[0], shape[1]);
            let groups = Groups {
                outer: n * c,
                len: spatial(),
                inner: 1,
            };
            (groups, Scale::ByGroup(c), c, vec![n, c])
        }
        Norm::Group => {
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
        Norm::SoftmaxActivation => match SoftmaxActivationParams::get(op, attrs)?.mode {
            SoftmaxMode::Instance => {
                need(1)?;
                let last = shape[shape.len() - 1];
                let groups = Groups {
                    outer: shape.iter().product::<usize>() / last.max(1),
                    len: last,
                    inner: 1,
                };
                (groups, Scale::ByPosition, 0, vec![])
            }
            SoftmaxMode::Channel => by_mode(L2Mode::Channel)?,
        },
        Norm::L2 => by_mode(L2NormalizationParams::get(op, attrs)?.mode)?,
    })
}

/// The `eps` of a norm (LayerNorm, InstanceNorm, GroupNorm, L2Normalization), forward or
/// backward.
pub(crate) fn eps(op: &str, attrs: &Attrs) -> Result<f64> {
    let eps = match Norm::of(op)? {
        Norm::Layer => LayerNormParams::get(op, attrs)?.eps,
        Norm::Instance => InstanceNormParams::get(op, attrs)?.eps,
        Norm::Group => GroupNormParams::get(op, attrs)?.eps,
        Norm::L2 => L2NormalizationParams::get(op, attrs)?.eps,
        Norm::SoftmaxActivation => return Err(invalid(op, "has no eps")),
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
    if Norm::of(op)? == Norm::L2 {
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

/// Backward of the affine norms: `(ograd, data, gamma, mean, std) -> (d data, d gamma,
/// d beta)`; of L2Normalization: `(ograd, out, norm) -> d data`.
/// L2Normalization: `(ograd, out, norm)`, where the output has the data's shape; the others:
/// `(ograd, data, gamma, mean, std)`, beta shaped like gamma. Checked against the forward op,
/// the kept statistics as its hidden outputs.
fn infer_norm_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    let m = Norm::of(op)?;
    let forward = m.name();
    match m {
        Norm::L2 => {
            let grads = [(0, &s[0][..], dt), (0, &s[1][..], dt), (1, &s[2][..], dt)];
            check_against_forward(op, forward, attrs, (&s[1..2], &d[1..2]), &grads)?;
            Ok((vec![s[1].clone()], vec![dt]))
        }
        Norm::Layer | Norm::Instance | Norm::Group => {
            let fwd = [s[1].clone(), s[2].clone(), s[2].clone()];
            let grads = [(0, &s[0][..], dt), (1, &s[3][..], dt), (2, &s[4][..], dt)];
            check_against_forward(op, forward, attrs, (&fwd, &[dt; 3]), &grads)?;
            Ok((vec![s[1].clone(), s[2].clone(), s[2].clone()], vec![dt; 3]))
        }
        Norm::SoftmaxActivation => Err(invalid(op, "has its own backward op's inference")),
    }
}

/// SoftmaxActivation: `data -> out`, a softmax over each group (`mode` instance or channel).
fn infer_softmax_activation(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    check_float(op, d[0])?;
    layout(op, attrs, &s[0])?;
    Ok((vec![s[0].clone()], vec![d[0]]))
}

/// `(ograd, output)`, the output shaped like the data.
fn infer_softmax_activation_backward(
    op: &str,
    attrs: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Infer {
    let grads = [(0, &s[0][..], d[0]), (0, &s[1][..], d[1])];
    check_against_forward(
        op,
        Norm::SoftmaxActivation.name(),
        attrs,
        (&s[1..], &d[1..]),
        &grads,
    )?;
    Ok((vec![s[1].clone()], vec![d[0]]))
}

pub(super) fn ops() -> &'static [OpDef] {
    const fn norm(m: Norm) -> OpDef {
        OpDef {
            infer_partial: Some(infer_params),
            alias_safe: false,
            ..OpDef::new(m.name(), Arity::Exactly(3), infer_norm, norm_kernel)
        }
        .member(Member::Norm(m))
    }
    const fn backward(m: Norm, inputs: usize) -> OpDef {
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                m.backward_name(),
                Arity::Exactly(inputs),
                infer_norm_backward,
                norm_backward_kernel,
            )
        }
        .member(Member::Norm(m))
    }
    static OPS: &[OpDef] = &[
        // The per-group statistics the backward op reads are hidden outputs, as in MXNet.
        norm(Norm::Layer)
            .outputs(Outputs::By(|op, attrs| {
                Ok(super::norm_outputs(
                    LayerNormParams::get(op, attrs)?.output_mean_var,
                ))
            }))
            .grad(grad::layer_norm)
            .on_gpu(gpu::lanes::normalization),
        norm(Norm::Instance)
            .outputs(Outputs::Fixed(3, 1))
            .grad(grad::instance_norm)
            .on_gpu(gpu::lanes::normalization),
        norm(Norm::Group)
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
            ..norm(Norm::L2)
        }
        .on_gpu(gpu::lanes::normalization),
        backward(Norm::Layer, 5)
            .outputs(Outputs::all(3))
            .on_gpu(gpu::lanes::normalization),
        backward(Norm::Instance, 5)
            .outputs(Outputs::all(3))
            .on_gpu(gpu::lanes::normalization),
        backward(Norm::Group, 5)
            .outputs(Outputs::all(3))
            .on_gpu(gpu::lanes::normalization),
        backward(Norm::L2, 3).on_gpu(gpu::lanes::normalization),
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            gradient: Some(grad::softmax_activation),
            ..OpDef::new(
                Norm::SoftmaxActivation.name(),
                Arity::Exactly(1),
                infer_softmax_activation,
                softmax_activation_kernel,
            )
        }
        .member(Member::Norm(Norm::SoftmaxActivation))
        .on_gpu(gpu::lanes::softmax_activation),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                Norm::SoftmaxActivation.backward_name(),
                Arity::Exactly(2),
                infer_softmax_activation_backward,
                softmax_activation_backward_kernel,
            )
        }
        .member(Member::Norm(Norm::SoftmaxActivation))
        .on_gpu(gpu::lanes::softmax_activation),
    ];
    OPS
}
