//! The softmax family on the GPU: softmax, log_softmax and SoftmaxOutput as lanes of the
//! lane-softmax kernels the norms share (`gpu/lanes.rs`), and SoftmaxOutput's gradient
//! (`softmax.cu`), whose labels are checked by the CPU's own code first.

use super::{softmax_axis, softmax_output_scale};
use crate::ops::gpu::args::{int, kernel_args, ptr};
use crate::ops::gpu::lanes::lane_args;
use crate::ops::gpu::ops::{e2s, fill_with};
use crate::ops::gpu::Stream;
use crate::ops::{Call, KResult, TensorRef};

kernel_args! {
    /// SoftmaxOutput's gradient: `(prob - onehot(label)) * scale`.
    struct SoftmaxOutputBwd [softmax_output_bwd] {
        /// Elements.
        n: i64,
        /// The data's gradient.
        dx: *mut f32,
        /// The output (probabilities).
        prob: *mut f32,
        /// One label per row.
        label: *mut f32,
        /// Classes per row.
        classes: i64,
        /// 1: rows labelled `ignore` pass no gradient.
        has_ignore: i64,
        /// The gradient's scale.
        scale: f32,
        /// The ignored label.
        ignore: f32,
    }
}

/// softmax or log_softmax (`log`), or (`backward`) their gradient `(ograd, output) -> data
/// gradient`, along the attributes' axis.
fn lanes(call: Call, s: &dyn Stream, log: bool, backward: bool) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let x = &ins[0];
    let (axis, temp) = softmax_axis(def.name, attrs, x.shape.len()).map_err(e2s)?;
    let ts: Vec<&TensorRef> = outs.iter().take(1).chain(ins).collect();
    lane_args(&x.shape, axis, temp, log)
        .on(&ts)
        .run(s, backward)
}

pub(crate) fn softmax(call: Call, s: &dyn Stream) -> KResult {
    lanes(call, s, false, false)
}

pub(crate) fn log_softmax(call: Call, s: &dyn Stream) -> KResult {
    lanes(call, s, true, false)
}

pub(crate) fn softmax_backward(call: Call, s: &dyn Stream) -> KResult {
    lanes(call, s, false, true)
}

pub(crate) fn log_softmax_backward(call: Call, s: &dyn Stream) -> KResult {
    lanes(call, s, true, true)
}

/// A softmax over axis 1 (the class axis), at no temperature, as on the CPU.
pub(crate) fn softmax_output(call: Call, s: &dyn Stream) -> KResult {
    let (_, _, ins, outs) = call.parts();
    let shape = &ins[0].shape;
    lane_args(shape, 1.min(shape.len() - 1), 1.0, false)
        .on(&[&outs[0], &ins[0]])
        .run(s, false)
}

/// `(output, label) -> (data gradient, zeros)`. The labels are read back and checked, and the
/// scale worked out, by the CPU's own code; the kernel then needs no error path.
pub(crate) fn softmax_output_backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let (p, label) = (&ins[0], &ins[1]);
    let classes = p.shape[1];
    let labels: Vec<f64> = s.download(label)?.into_iter().map(f64::from).collect();
    let (scale, ignore) = softmax_output_scale(def.name, attrs, &labels, classes).map_err(e2s)?;
    let total = p.len();
    let a = SoftmaxOutputBwd {
        n: int(total),
        dx: ptr(&outs[0]),
        prob: ptr(p),
        label: ptr(label),
        classes: int(classes),
        has_ignore: i64::from(ignore.is_some()),
        scale: scale as f32,
        ignore: ignore.unwrap_or(0.0) as f32,
    };
    s.run(k::softmax_output_bwd, total, &a)?;
    fill_with(s, &outs[1], 0.0)
}
