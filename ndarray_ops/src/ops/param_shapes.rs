//! Backward shape inference: the shapes an op's parameter inputs must have, given its data shape
//! and attributes (what lets a model file leave weight shapes out, as MXNet's files do).

use super::conv::filters_and_groups;
use super::{Attrs, POSITIVE_INT};
use crate::error::Result;

type Known = [Option<Vec<usize>>];
type Found = Result<Vec<Option<Vec<usize>>>>;

/// FullyConnected: weight (num_hidden, features), bias (num_hidden).
pub(super) fn fully_connected(op: &str, attrs: &Attrs, ins: &Known) -> Found {
    let hidden = attrs.count(op, "num_hidden", None, POSITIVE_INT)?;
    let mut out = vec![None; ins.len()];
    if let Some(Some(x)) = ins.first() {
        if !x.is_empty() {
            let k = if attrs.bool(op, "flatten", true)? {
                x[1..].iter().product()
            } else {
                x[x.len() - 1]
            };
            if ins.len() > 1 {
                out[1] = Some(vec![hidden, k]);
            }
        }
    }
    if ins.len() > 2 {
        out[2] = Some(vec![hidden]);
    }
    Ok(out)
}

/// Convolution: weight (num_filter, channels / num_group, kh, kw), bias (num_filter).
pub(super) fn convolution(op: &str, attrs: &Attrs, ins: &Known) -> Found {
    let (filters, groups) = filters_and_groups(op, attrs)?;
    let kernel = attrs.ints(op, "kernel")?.unwrap_or_default();
    let mut out = vec![None; ins.len()];
    if let Some(Some(x)) = ins.first() {
        if x.len() >= 2 && ins.len() > 1 {
            let mut w = vec![filters, x[1] / groups];
            w.extend(kernel.iter().map(|&k| k.max(0) as usize));
            out[1] = Some(w);
        }
    }
    if ins.len() > 2 {
        out[2] = Some(vec![filters]);
    }
    Ok(out)
}

/// Deconvolution: weight (channels, num_filter / num_group, kh, kw), bias (num_filter).
pub(super) fn deconvolution(op: &str, attrs: &Attrs, ins: &Known) -> Found {
    let (filters, groups) = filters_and_groups(op, attrs)?;
    let kernel = attrs.ints(op, "kernel")?.unwrap_or_default();
    let mut out = vec![None; ins.len()];
    if let Some(Some(x)) = ins.first() {
        if x.len() >= 2 && ins.len() > 1 {
            let mut w = vec![x[1], filters / groups];
            w.extend(kernel.iter().map(|&k| k.max(0) as usize));
            out[1] = Some(w);
        }
    }
    if ins.len() > 2 {
        out[2] = Some(vec![filters]);
    }
    Ok(out)
}

/// UpSampling: bilinear's weight is its Deconvolution's; nearest has no parameters.
pub(super) fn upsampling(op: &str, attrs: &Attrs, ins: &Known) -> Found {
    match super::extra::bilinear_upsampling(op, attrs)? {
        Some(deconv) => deconvolution(op, &deconv, ins),
        None => Ok(vec![None; ins.len()]),
    }
}

/// BatchNorm: gamma, beta, moving mean and variance all have the channel count.
pub(super) fn batch_norm(op: &str, attrs: &Attrs, ins: &Known) -> Found {
    let mut out = vec![None; ins.len()];
    if let Some(Some(x)) = ins.first() {
        let axis = attrs
            .ints(op, "axis")?
            .and_then(|v| v.first().copied())
            .unwrap_or(1);
        let axis = if axis < 0 {
            axis + x.len() as i64
        } else {
            axis
        };
        if let Some(&c) = usize::try_from(axis).ok().and_then(|a| x.get(a)) {
            for o in out.iter_mut().skip(1) {
                *o = Some(vec![c]);
            }
        }
    }
    Ok(out)
}

/// Embedding: weight (input_dim, output_dim).
pub(super) fn embedding(op: &str, attrs: &Attrs, ins: &Known) -> Found {
    let mut out = vec![None; ins.len()];
    if ins.len() > 1 {
        out[1] = Some(vec![
            attrs.count(op, "input_dim", None, POSITIVE_INT)?,
            attrs.count(op, "output_dim", None, POSITIVE_INT)?,
        ]);
    }
    Ok(out)
}

/// SoftmaxOutput: the label has the data's batch axis.
pub(super) fn softmax_output(_op: &str, _attrs: &Attrs, ins: &Known) -> Found {
    let mut out = vec![None; ins.len()];
    if let Some(Some(x)) = ins.first() {
        if let (Some(&n), true) = (x.first(), ins.len() > 1) {
            out[1] = Some(vec![n]);
        }
    }
    Ok(out)
}

/// Same-shape ops: every input has the shape of any known one.
pub(super) fn same_shape(_op: &str, _attrs: &Attrs, ins: &Known) -> Found {
    let known = ins.iter().flatten().next().cloned();
    Ok(vec![known; ins.len()])
}

/// LeakyReLU: prelu's gamma, when not given, has one slope per channel (axis 1).
pub(super) fn prelu(_op: &str, _attrs: &Attrs, ins: &Known) -> Found {
    let mut out = vec![None; ins.len()];
    if let (Some(Some(x)), Some(None)) = (ins.first(), ins.get(1)) {
        out[1] = Some(vec![x.get(1).copied().unwrap_or(1)]);
    }
    Ok(out)
}

/// Regression outputs: a label not given has the data's shape (a given one may also drop the
/// data's trailing 1, which the op checks).
pub(super) fn label_like_data(_op: &str, _attrs: &Attrs, ins: &Known) -> Found {
    let mut out = vec![None; ins.len()];
    if let (Some(Some(x)), Some(None)) = (ins.first(), ins.get(1)) {
        out[1] = Some(x.clone());
    }
    Ok(out)
}
