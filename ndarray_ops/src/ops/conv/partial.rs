//! Convolution's, Deconvolution's and UpSampling's shape rules on partial shapes (see
//! `ops::partial_shapes`): weights from the data, and the data from the output.

use super::conv_params;
use crate::ops::partial_shapes::{inputs, Found, Known};
use crate::ops::Attrs;

/// Convolution: weight (num_filter, channels / num_group, kh, kw), bias (num_filter); back from
/// the output, the data's batch and the spatial sizes that give the output's
/// (`(out - 1) * stride + dilate * (kernel - 1) + 1 - 2 * pad`, as MXNet takes them).
pub(crate) fn convolution(op: &str, attrs: &Attrs, ins: &Known, outs: &Known) -> Found {
    let c = conv_params(op, attrs)?;
    let (filters, groups) = (c.filters, c.groups);
    let kernel = [c.k.0, c.k.1];
    let mut proposed = vec![None; ins.len()];
    if let Some(Some(x)) = ins.first() {
        if x.len() >= 2 && ins.len() > 1 {
            let mut w = vec![filters, x[1] / groups];
            w.extend(&kernel);
            proposed[1] = Some(w);
        }
    }
    if ins.len() > 2 {
        proposed[2] = Some(vec![filters]);
    }
    if let Some(Some(y)) = outs.first() {
        let spatial = kernel.len();
        if y.len() == spatial + 2 {
            let (stride, dilate, pad) = ([c.s.0, c.s.1], [c.d.0, c.d.1], [c.p.0, c.p.1]);
            let channels = ins
                .get(1)
                .cloned()
                .flatten()
                .and_then(|w| w.get(1).map(|c| c * groups))
                .unwrap_or(0);
            let mut x = vec![y[0], channels];
            for i in 0..spatial {
                let size = match y[2 + i] {
                    0 => 0,
                    o => ((o - 1) * stride[i] + dilate[i] * (kernel[i].max(1) - 1) + 1)
                        .saturating_sub(2 * pad[i]),
                };
                x.push(size);
            }
            proposed[0] = Some(x);
        }
    }
    inputs(proposed)
}

/// Deconvolution: weight (channels, num_filter / num_group, kh, kw), bias (num_filter).
pub(crate) fn deconvolution(op: &str, attrs: &Attrs, ins: &Known, _outs: &Known) -> Found {
    let c = conv_params(op, attrs)?;
    let (filters, groups) = (c.filters, c.groups);
    let kernel = [c.k.0, c.k.1];
    let mut out = vec![None; ins.len()];
    if let Some(Some(x)) = ins.first() {
        if x.len() >= 2 && ins.len() > 1 {
            let mut w = vec![x[1], filters / groups];
            w.extend(kernel);
            out[1] = Some(w);
        }
    }
    if ins.len() > 2 {
        out[2] = Some(vec![filters]);
    }
    inputs(out)
}

/// UpSampling: bilinear's weight is its Deconvolution's; nearest has no parameters.
pub(crate) fn upsampling(op: &str, attrs: &Attrs, ins: &Known, outs: &Known) -> Found {
    match super::upsampling::bilinear_upsampling(op, attrs)? {
        Some(deconv) => deconvolution(op, &deconv, ins, outs),
        None => inputs(vec![None; ins.len()]),
    }
}
