//! The ops the fusion pass ([`crate::symbol::fuse`]) puts in place of chains of nodes. Each
//! runs the same arithmetic as the chain it replaces, in fewer passes over memory and one
//! engine op:
//!
//! - `_fused_BatchNormReLU`: BatchNorm with ReLU
//!   applied to each element as it is written; its backward op masks the output gradient and
//!   runs BatchNorm's gradient on it, channel by channel while the channel is in cache.
//!   Bit-identical to BatchNorm then ReLU, forward and backward.
//! - `_fused_Convolution` (`_fused_ConvolutionBias` for a convolution with a bias): a
//!   Convolution followed by BatchNorm and, when `act_type` is `relu`, ReLU, for graphs bound
//!   without gradients. In inference the normalization is the convolution's epilogue
//!   ([`crate::gemm::Epilogue`]): the GEMM applies the bias, `(y - mean)·scale + beta` and
//!   ReLU per channel to each tile as it finishes it. Where the convolution's path has no
//!   epilogue (depthwise, float64), and with `forward(is_train=true)`, whose batch statistics
//!   are taken from the output as BatchNorm would, the normalization runs over the written
//!   output in place; either way the node means what the nodes it replaces meant.
//! - `_fused_elemwise`: a tree of same-shape elementwise nodes (arithmetic, scalar ops,
//!   activations, ReLU's gradient) as a program over tiles: each tile of the output is computed
//!   by running every member's own kernel on tile-sized views, the intermediate tiles staying
//!   in cache instead of going to memory as whole tensors. The members' kernels are the unfused
//!   ones, so the results are the same bits.

use super::conv::{conv_params, partial::convolution};
use super::partial_shapes::{Found, Known};
use crate::ops::Call;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::batch_norm::{
    bn_backward, bn_forward, bn_inference_map, infer_bn, infer_bn_backward, BN_PASSES,
};
use super::conv::{conv_then, infer_conv};
use super::par::for_ranges;
use super::tensor::RawBuf;
use super::{lookup, same_dtypes, same_shapes, Arity, Attrs, Flops, OpDef, Outputs, TensorRef};
use crate::error::{invalid, shape_error, Result};
use crate::ops::{Infer, KResult};
use crate::resources::{KernelRes, Resource};
use crate::DType;

/// The fused op of a convolution (with a bias or without), BatchNorm and perhaps ReLU.
pub(crate) const fn conv_op(bias: bool) -> &'static str {
    match bias {
        true => "_fused_ConvolutionBias",
        false => "_fused_Convolution",
    }
}

/// The fused convolution's op (with a bias or without): its inputs those of [`conv_inputs`],
/// then BatchNorm's four, the last two (the moving mean and variance) mutated.
const fn conv_bn_def(bias: bool) -> OpDef {
    let (inputs, mutated): (usize, &'static [usize]) = match bias {
        true => (7, &[5, 6]),
        false => (6, &[4, 5]),
    };
    OpDef {
        alias_safe: false,
        mutate_inputs: mutated,
        infer_partial: Some(partial_fused_convolution),
        resources: &[Resource::TempSpace],
        outputs: Outputs::By(super::batch_norm::bn_outputs),
        ..OpDef::new(
            conv_op(bias),
            Arity::Exactly(inputs),
            infer_conv_bn,
            conv_bn_kernel,
        )
    }
}

/// The inputs of a fused convolution that are the convolution's: data, weight and, for
/// `_fused_ConvolutionBias`, the bias. BatchNorm's parameters and moving statistics follow, in
/// the order the unfused graph lists them (so the graph's arguments keep their order); two op
/// names, because the moving statistics, which the op mutates, then sit at different slots.
pub(crate) fn conv_inputs(op: &str) -> usize {
    match op {
        "_fused_ConvolutionBias" => 3,
        _ => 2,
    }
}

/// Whether `op` is one of these ops. Only the fusion pass makes their nodes, on graphs bound
/// on the CPU, with their members' attributes: like backward ops they have no signature of
/// their own, and they have no GPU kernel.
#[cfg(test)]
pub(crate) fn is_fused(op: &str) -> bool {
    op.starts_with("_fused_") || op == "_backward_fused_BatchNormReLU"
}

/// Whether a fused node applies ReLU after its normalization.
pub(crate) fn applies_relu(attrs: &Attrs) -> bool {
    attrs.get("act_type") == Some("relu")
}

fn bn_relu_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    bn_forward(op, attrs, ins, outs, true)
}

/// `(ograd, output, data, gamma, mean, var)`: BatchNorm's backward inputs with the fused
/// node's output, whose sign is ReLU's mask.
fn infer_bn_relu_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    if s[1] != s[0] {
        return Err(shape_error(
            op,
            "output",
            s[1].clone(),
            format!("{:?} like the gradient", s[0]),
        ));
    }
    same_dtypes(op, &d[..2])?;
    // The rest are BatchNorm's backward inputs: (ograd, data, gamma, mean, var).
    let (shapes, dtypes) = (
        [0, 2, 3, 4, 5].map(|i| s[i].clone()),
        [0, 2, 3, 4, 5].map(|i| d[i]),
    );
    infer_bn_backward(op, attrs, &shapes, &dtypes)
}

fn bn_relu_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    bn_backward(op, attrs, &ins[0], Some(&ins[1]), &ins[2..], outs)
}

/// `(data, weight, gamma, beta, moving_mean, moving_var)`: the convolution's output shape,
/// then BatchNorm's on it.
fn infer_conv_bn(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let k = conv_inputs(op);
    let (conv, _) = infer_conv(op, attrs, &s[..k], &d[..k])?;
    let mut bn_shapes = vec![conv[0].clone()];
    bn_shapes.extend_from_slice(&s[k..]);
    infer_bn(op, attrs, &bn_shapes, &[d[0]; 5])
}

fn conv_bn_kernel(call: Call, res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let k = conv_inputs(op);
    let map = bn_inference_map(op, attrs, &outs[0].shape, &ins[k..k + 4], outs)?;
    let norm = map.as_deref().map(|m| (m, applies_relu(attrs)));
    if conv_then(op, attrs, &ins[..k], &outs[..1], norm, res)? {
        return Ok(());
    }
    let mut bn_ins = vec![outs[0].clone()];
    bn_ins.extend_from_slice(&ins[k..]);
    bn_forward(op, attrs, &bn_ins, outs, applies_relu(attrs))
}

/// The attribute holding a `_fused_elemwise` node's program (JSON: a list of [`Step`]s).
pub(crate) const PROGRAM_ATTR: &str = "__program__";

/// Elements per tile of a fused elementwise node: every step's tile of a float32 program of a
/// few steps stays in the first-level cache.
const TILE: usize = 2048;

/// Where a step's operand comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Arg {
    /// The fused node's input.
    Input(usize),
    /// An earlier step's result.
    Step(usize),
}

/// One step of a fused elementwise program: a member node's op and attributes, and its
/// operands. The last step's result is the output.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Step {
    pub(crate) op: String,
    pub(crate) attrs: Vec<(String, String)>,
    pub(crate) args: Vec<Arg>,
}

/// A program read from a node's attributes, each op looked up.
fn program(
    op: &str,
    attrs: &Attrs,
    inputs: usize,
) -> Result<Vec<(&'static OpDef, Attrs, Vec<Arg>)>> {
    let text = attrs
        .get(PROGRAM_ATTR)
        .ok_or_else(|| invalid(op, format!("has no {PROGRAM_ATTR} attribute")))?;
    let steps: Vec<Step> = serde_json::from_str(text)
        .map_err(|e| invalid(op, format!("{PROGRAM_ATTR} is not a program: {e}")))?;
    if steps.is_empty() {
        return Err(invalid(op, format!("{PROGRAM_ATTR} has no steps")));
    }
    let mut out = Vec::with_capacity(steps.len());
    for (j, step) in steps.into_iter().enumerate() {
        for a in &step.args {
            let ok = match *a {
                Arg::Input(k) => k < inputs,
                Arg::Step(i) => i < j,
            };
            if !ok {
                return Err(invalid(
                    op,
                    format!("step {j} ({}) reads {a:?}, which it cannot", step.op),
                ));
            }
        }
        let def = lookup(&step.op)?;
        if !def.pointwise {
            return Err(invalid(
                op,
                format!(
                    "step {j} ({}) is not an elementwise op a program may run",
                    step.op
                ),
            ));
        }
        let attrs = step
            .attrs
            .iter()
            .fold(Attrs::new(), |a, (k, v)| a.with(k, v));
        out.push((def, attrs, step.args));
    }
    Ok(out)
}

/// Every input and the output share one shape and dtype; the program's steps are checked here
/// (against the members' own inference on that shape), so a bad one fails at bind.
fn infer_elemwise(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    same_shapes(op, s)?;
    for (def, step_attrs, args) in program(op, attrs, s.len())? {
        let (shapes, dtypes) = (def.infer)(
            def.name,
            &step_attrs,
            &vec![s[0].clone(); args.len()],
            &vec![dt; args.len()],
        )?;
        if shapes != [s[0].clone()] || dtypes != [dt] {
            return Err(invalid(
                op,
                format!(
                    "step {} does not map {:?} {dt} to itself elementwise",
                    def.name, s[0]
                ),
            ));
        }
    }
    Ok((vec![s[0].clone()], vec![dt]))
}

/// Runs the program tile by tile: tiles are split among threads; within one, each step's
/// kernel runs on tile-sized views of the inputs and of earlier steps' tiles (scratch of its
/// own per thread), and the last step's tile is copied to the output (so an output sharing an
/// input's memory is safe: a tile is read before it is written).
fn elemwise_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let prog = program(op, attrs, ins.len()).map_err(|e| e.to_string())?;
    let out = &outs[0];
    let (n, dtype) = (out.len(), out.dtype);
    let size = dtype.size();
    let tile_bytes = TILE * size;
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let (out_at, in_at): (usize, Vec<usize>) = (
        out.buf.ptr as usize,
        ins.iter().map(|t| t.buf.ptr as usize).collect(),
    );
    for_ranges(n.div_ceil(TILE), TILE * prog.len(), |lo, hi| {
        let mut scratch = vec![0u64; (prog.len() * tile_bytes).div_ceil(8)];
        let base = scratch.as_mut_ptr().cast::<u8>();
        let mut res = KernelRes {
            rng: None,
            temp: None,
            state: None,
            paired: false,
            unread: 0,
            stamped: &[],
        };
        for t in lo..hi {
            let (off, len) = (t * TILE, TILE.min(n - t * TILE));
            let view = |at: usize| TensorRef {
                buf: RawBuf {
                    ptr: at as *mut u8,
                    bytes: len * size,
                },
                shape: smallvec::smallvec![len],
                dtype,
            };
            let step_at = |j: usize| base as usize + j * tile_bytes;
            for (j, (def, step_attrs, args)) in prog.iter().enumerate() {
                let views: Vec<TensorRef> = args
                    .iter()
                    .map(|a| match *a {
                        Arg::Input(k) => view(in_at[k] + off * size),
                        Arg::Step(i) => view(step_at(i)),
                    })
                    .collect();
                let outs = [view(step_at(j))];
                let call = Call {
                    def,
                    attrs: step_attrs,
                    ins: &views,
                    outs: &outs,
                };
                if let Err(e) = (def.kernel)(call, &mut res) {
                    let mut f = failure.lock().unwrap_or_else(|p| p.into_inner());
                    f.get_or_insert(format!("{op}: step {j} ({}): {e}", def.name));
                    return;
                }
            }
            // SAFETY: the last step's tile holds `len` elements of scratch; tile `t` of the
            // output lies inside it, and only this range writes it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    step_at(prog.len() - 1) as *const u8,
                    (out_at + off * size) as *mut u8,
                    len * size,
                );
            }
        }
    });
    match failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A convolution fused with BatchNorm: the convolution's rule for data and weight (and the
/// data's batch from the output), BatchNorm's parameters have the filter count.
fn partial_fused_convolution(op: &str, attrs: &Attrs, ins: &Known, outs: &Known) -> Found {
    let k = conv_inputs(op);
    let mut found = convolution(op, attrs, &ins[..k.min(ins.len())], outs)?;
    let filters = conv_params(op, attrs)?.filters;
    found.inputs.resize(ins.len(), None);
    for p in found.inputs.iter_mut().skip(k) {
        *p = Some(vec![filters]);
    }
    Ok(found)
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            // The output may overwrite the data when nothing reads the data afterwards (in
            // inference; in training the backward pass reads it).
            inplace: &[(0, 0)],
            mutate_inputs: &[3, 4],
            backward_ignores: &[2, 3, 4],
            gradient: Some(super::batch_norm::grad::batch_norm_relu),
            infer_partial: Some(super::batch_norm::partial::batch_norm),
            outputs: Outputs::By(super::batch_norm::bn_outputs),
            ..OpDef::new(
                "_fused_BatchNormReLU",
                Arity::Exactly(5),
                infer_bn,
                bn_relu_kernel,
            )
        }
        .cost(Flops::One, BN_PASSES),
        OpDef {
            alias_safe: false,
            outputs: Outputs::all(3),
            ..OpDef::new(
                "_backward_fused_BatchNormReLU",
                Arity::Exactly(6),
                infer_bn_relu_backward,
                bn_relu_backward_kernel,
            )
        },
        conv_bn_def(false),
        conv_bn_def(true),
        OpDef {
            // A tile of the output is written after the same tile of every input was read.
            inplace: &[
                (0, 0),
                (1, 0),
                (2, 0),
                (3, 0),
                (4, 0),
                (5, 0),
                (6, 0),
                (7, 0),
            ],
            infer_partial: Some(super::partial_shapes::same_shape),
            ..OpDef::new(
                "_fused_elemwise",
                Arity::AtLeast(1),
                infer_elemwise,
                elemwise_kernel,
            )
        },
    ];
    OPS
}
