//! UpSampling: `nearest` repeats each pixel (a gather op); `bilinear` is, as in MXNet, a
//! depthwise Deconvolution whose weight is the bilinear kernel.

use super::deconv::{deconv_kernel, infer_deconv};
use crate::error::{invalid, Result};
use crate::ops::gather::{Gather, SampleType, UpSamplingParams};
use crate::ops::params::Params;
use crate::ops::Call;
use crate::ops::{Attrs, Infer, KResult};
use crate::resources::KernelRes;
use crate::DType;

/// UpSampling's `bilinear` mode is, as in MXNet, a depthwise Deconvolution with the weight
/// input (MXNet initializes it to a bilinear kernel; it is learned like any weight): kernel
/// `2s - s % 2`, stride `s`, padding `ceil((s - 1) / 2)`, one group per channel, no bias.
/// Returns that Deconvolution's attributes, or `None` for `nearest` (a gather op).
pub(crate) fn bilinear_upsampling(op: &str, attrs: &Attrs) -> Result<Option<Attrs>> {
    let up = UpSamplingParams::get(op, attrs)?;
    if up.sample_type != SampleType::Bilinear {
        return Ok(None);
    }
    // Bilinear needs num_filter (the channels), which MXNet defaults to 0 for nearest.
    let (s, f) = (up.scale.0, up.num_filter);
    if f == 0 {
        return Err(invalid(
            op,
            "bilinear takes num_filter, the channels, of at least 1",
        ));
    }
    if up.num_args.unwrap_or(2) != 2 {
        return Err(invalid(
            op,
            "bilinear takes num_args=2: the data and the weight",
        ));
    }
    let k = 2 * s - s % 2;
    let p = (s - 1).div_ceil(2);
    Ok(Some(
        Attrs::new()
            .with("kernel", format!("({k}, {k})"))
            .with("stride", format!("({s}, {s})"))
            .with("pad", format!("({p}, {p})"))
            .with("num_filter", f)
            .with("num_group", f)
            .with("no_bias", "True"),
    ))
}

pub(super) fn infer_upsampling(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    match bilinear_upsampling(op, attrs)? {
        Some(deconv) => infer_deconv(op, &deconv, s, d),
        None => {
            if s.len() != 1 {
                return Err(invalid(
                    op,
                    format!("nearest takes one input, got {}", s.len()),
                ));
            }
            crate::ops::gather::infer_gather(Gather::UpSampling, attrs, s, d)
        }
    }
}

pub(super) fn upsampling_kernel(call: Call, res: &mut KernelRes) -> KResult {
    match bilinear_upsampling(call.def.name, call.attrs).map_err(|e| e.to_string())? {
        Some(deconv) => deconv_kernel(
            Call {
                attrs: &deconv,
                ..call
            },
            res,
        ),
        None => crate::ops::gather::gather_kernel(call, res),
    }
}
