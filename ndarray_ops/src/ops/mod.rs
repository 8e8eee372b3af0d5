//! The op registry, shared by the imperative API and (later) the symbolic layer.
//!
//! Each op declares, under its MXNet name: how many inputs, its attributes (parsed from strings,
//! as MXNet's JSON stores them), shape and dtype inference, its CPU kernel, which inputs may
//! share memory with which outputs (in place), whether it is an identity (reshape-like), and
//! which inputs its backward pass does not need. `invoke` checks a call synchronously (arity,
//! contexts, shapes, dtypes), allocates the outputs and pushes one engine op that runs the
//! kernel when the inputs are ready.

mod add_n;
pub(crate) mod batch_norm;
pub(crate) mod binary;
pub(crate) mod conv;
mod creation;
pub(crate) mod elemwise;
mod fully_connected;
pub(crate) mod fused;
pub(crate) mod gather;
mod gather_nd;
pub(crate) mod scalar;
// Compiled without the `cuda` feature too: the op table names each op's GPU kernel, and the
// tests run the kernels on a host emulator. Only the driver (`gpu::cuda`) needs the feature.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) mod gpu;
pub(crate) mod lanes;
mod leaky_relu;
mod linalg;
mod lockstep;
pub(crate) mod loss;
pub(crate) mod math;
pub(crate) mod names;
mod nn;
mod norm;
mod par;
pub mod params;
pub(crate) mod partial_shapes;
mod permute;
pub(crate) mod pooling;
mod reduce;
#[cfg(test)]
mod reference;
mod reshape_like;
pub(crate) mod rnn;
mod roi;
mod select;
pub(crate) mod shape;
mod shape_grad;
pub mod signature;
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod simd;
pub(crate) mod softmax;
pub(crate) mod sort;
mod stack;
mod stochastic;
pub(crate) mod unary;
mod update;
mod vecmath;
mod vision;

pub(crate) use conv::bilinear_upsampling;
pub(crate) use nn::require_float;
pub use stochastic::IS_TRAIN;
// What the GPU back end shares with the CPU kernels: attribute parsing and layouts.
pub(crate) use {
    conv::deconv_as_conv,
    conv::has_bias,
    creation::arange_params,
    gather_nd::starts_of as gather_nd_starts,
    lanes::{block_size, mask_params as sequence_params, pick_layout, pick_wrap},
    linalg::{product, transposes},
    loss::class_of,
    math::hard_sigmoid_params,
    nn::{clip_bounds, one_hot_params, transpose_axes},
    norm::{eps as norm_eps, layout as norm_layout, Scale},
    reduce::axes_of as reduced_axes,
    roi::{align_plan, pooling_windows},
    shape::{concat_axis, split_params, take_layout, take_mode, take_row},
    stack::stack_axis,
    stochastic::{dropout_active, dropout_p},
    vision::{plane_taps, PlaneTaps},
};

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::gpu::ops::GpuKernel;
use crate::resources::{KernelRes, Resource};
use crate::DType;

mod attrs;
mod cheap;
pub(crate) mod family;
pub(crate) mod grad;
pub mod graph;
mod tensor;

pub use attrs::*;
pub use cheap::*;
pub(crate) use family::{Binary, Member};
pub(crate) use graph::GradFn;
pub use graph::{GradReq, Node, NodeEntry};
pub(crate) use tensor::*;

/// How many inputs an op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    /// Exactly this many.
    Exactly(usize),
    /// At least this many.
    AtLeast(usize),
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arity::Exactly(n) => write!(f, "exactly {n}"),
            Arity::AtLeast(n) => write!(f, "at least {n}"),
        }
    }
}

/// What an op's inference gives: the output shapes and dtypes.
pub type Infer = Result<(Vec<Vec<usize>>, Vec<DType>)>;
/// What a kernel gives: `Err` with a message when it fails.
pub(crate) type KResult = std::result::Result<(), String>;
/// Shape and dtype inference: input shapes and dtypes to output shapes and dtypes.
pub type InferFn = fn(&str, &Attrs, &[Vec<usize>], &[DType]) -> Infer;
/// Shape inference on partial shapes, both ways: from what is known so far of the inputs and
/// the outputs (`None`: nothing; a dimension of 0: unknown, as in MXNet), the shapes they must
/// have (weights from the data shape, the other operand of a same-shape op, the data's batch
/// from the output's). What it cannot tell stays `None` or 0.
pub type InferPartialFn =
    fn(&str, &Attrs, &[Option<Vec<usize>>], &[Option<Vec<usize>>]) -> Result<Partial>;

/// What an [`InferPartialFn`] proposes: shapes for the inputs and the outputs, by position
/// (shorter lists, `None` and 0 dimensions propose nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Partial {
    /// Proposed input shapes.
    pub inputs: Vec<Option<Vec<usize>>>,
    /// Proposed output shapes.
    pub outputs: Vec<Option<Vec<usize>>>,
}
/// One call of a kernel, on either device: the op, its attributes, its inputs and its outputs
/// (allocated, of the inferred shapes).
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    /// The op called.
    pub def: &'a OpDef,
    /// Its attributes.
    pub attrs: &'a Attrs,
    /// Its inputs.
    pub ins: &'a [TensorRef],
    /// Its outputs.
    pub outs: &'a [TensorRef],
}

impl<'a> Call<'a> {
    /// The op, attributes, inputs and outputs, for a kernel to take apart in one line.
    pub(crate) fn parts(self) -> (&'a OpDef, &'a Attrs, &'a [TensorRef], &'a [TensorRef]) {
        (self.def, self.attrs, self.ins, self.outs)
    }
}

/// A CPU kernel: the call and the kernel's per-device resources.
pub(crate) type KernelFn = fn(Call, &mut KernelRes) -> KResult;

/// One registered op.
pub struct OpDef {
    /// MXNet's name.
    pub name: &'static str,
    /// Other names it answers to.
    pub aliases: &'static [&'static str],
    /// Inputs taken.
    pub arity: Arity,
    /// Shape and dtype inference.
    pub infer: InferFn,
    pub(crate) kernel: KernelFn,
    /// (input, output) pairs that may share memory.
    pub inplace: &'static [(usize, usize)],
    /// The output is the input reinterpreted (reshape, flatten): always shares.
    pub identity: bool,
    /// Inputs the backward pass does not read.
    pub backward_ignores: &'static [usize],
    /// Whether the kernel handles an output that is exactly one of its inputs (else such inputs
    /// are copied first).
    pub(crate) alias_safe: bool,
    /// Inputs the kernel also writes (BatchNorm's moving statistics): written, not just read.
    pub mutate_inputs: &'static [usize],
    /// Assignments, `(input, output)`: the output is the input's new value (optimizer updates,
    /// `_assign`), so a bound graph keeps it in the input's memory when nothing reads the input
    /// afterwards (see [`crate::plan::assign_aliases`]).
    pub assign: &'static [(usize, usize)],
    /// Per-device resources the kernel uses.
    pub resources: &'static [Resource],
    /// Inference on partial shapes in both directions, for ops whose [`OpDef::infer`] cannot
    /// tell everything (parameters from the data, inputs from outputs).
    pub infer_partial: Option<InferPartialFn>,
    /// Whether a bound node keeps state from its forward pass for its backward node.
    pub(crate) state: StateUse,
    /// The gradient rule: the backward nodes that give the gradients of a node's inputs from
    /// those of its outputs. `None`: the symbolic gradient pass and autograd refuse the op.
    pub(crate) gradient: Option<GradFn>,
    /// The GPU kernel (its launches on a stream; the `cuda` feature runs them on a device, the
    /// tests on a host emulator). `None`: the op runs on CPU arrays only.
    pub(crate) gpu: Option<GpuKernel>,
    /// The op's member of a typed family ([`family`]); its kernels and rule match on it.
    pub(crate) member: Member,
    /// How many outputs a node has ([`num_outputs`]).
    pub(crate) outputs: Outputs,
    /// Whether the kernel maps each element (or the elements at one position of same-shape
    /// operands) on its own, so that a fused elementwise program may run it tile by tile
    /// (`symbol::fuse`, `_fused_elemwise`).
    pub(crate) pointwise: bool,
    /// What the recomputation planner's cost model charges a node (`symbol::mirror`).
    pub(crate) cost: Cost,
}

/// What a node of an op costs in the recomputation planner's model (`symbol::mirror`): its
/// FLOPs per output element, and how many times it goes over its bytes against once for an
/// elementwise op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Cost {
    /// FLOPs per output element.
    pub(crate) flops: Flops,
    /// Passes over the bytes it reads and writes.
    pub(crate) passes: f64,
}

/// FLOPs per output element, from the shapes of a node's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flops {
    /// About one: elementwise ops, copies, reductions.
    One,
    /// A dot product over the weight's (input 1) dimensions after its first: a convolution's
    /// input channels and window.
    Window,
    /// A dot product over the weight's (input 1) second dimension: FullyConnected.
    WeightRow,
    /// A dot product over the first input's last dimension: matrix products.
    Inner,
}

impl Cost {
    /// An elementwise op's: one FLOP per output element, one pass.
    pub(crate) const ELEMENTWISE: Cost = Cost {
        flops: Flops::One,
        passes: 1.0,
    };
}

/// How many outputs a node of an op has: all of them, hidden ones included (what MXNet's files
/// record in `node_row_ptr`: BatchNorm's saved statistics, Dropout's mask), and how many of
/// them users see, in that order.
#[derive(Clone, Copy)]
pub(crate) enum Outputs {
    /// The same counts whatever the attributes.
    Fixed(usize, usize),
    /// Counts that follow the attributes (a split's pieces, a bias gradient only with a bias).
    By(fn(&str, &Attrs) -> Result<(usize, usize)>),
}

impl Outputs {
    /// `n` outputs, every one visible.
    pub(crate) const fn all(n: usize) -> Outputs {
        Outputs::Fixed(n, n)
    }
}

/// How an op takes part in a forward node's kept state ([`crate::resources::OpState`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StateUse {
    /// None.
    No,
    /// A forward op that keeps state when bound: for its backward node in training, and on a
    /// CPU what it derives from its inputs between passes (see `resources::OpState`).
    Keeps,
    /// The backward op of this forward op: it reads the state of the forward node whose inputs
    /// are its own last inputs.
    ReadsOf(&'static str),
}

impl OpDef {
    /// An op with the common defaults: no aliases, no in-place pairs, not an identity, every input
    /// read by its backward pass, aliasing handled by the kernel, nothing mutated, no resources, no
    /// partial shape rule. The op tables override fields with struct update syntax.
    pub(crate) const fn new(
        name: &'static str,
        arity: Arity,
        infer: InferFn,
        kernel: KernelFn,
    ) -> OpDef {
        OpDef {
            name,
            aliases: &[],
            arity,
            infer,
            kernel,
            inplace: &[],
            identity: false,
            backward_ignores: &[],
            alias_safe: true,
            mutate_inputs: &[],
            assign: &[],
            resources: &[],
            infer_partial: None,
            state: StateUse::No,
            gradient: None,
            gpu: None,
            member: Member::None,
            outputs: Outputs::Fixed(1, 1),
            pointwise: false,
            cost: Cost::ELEMENTWISE,
        }
    }

    /// Its input names and attributes (types, defaults, descriptions); `None` for backward ops,
    /// whose nodes carry their forward node's attributes.
    pub fn signature(&self) -> Option<&'static signature::Signature> {
        signature::signature(self.name)
    }

    /// This op with a gradient rule ([`OpDef::gradient`]).
    pub(crate) const fn grad(self, rule: GradFn) -> OpDef {
        OpDef {
            gradient: Some(rule),
            ..self
        }
    }

    /// This op with a GPU kernel ([`OpDef::gpu`]).
    pub(crate) const fn on_gpu(self, kernel: crate::ops::gpu::ops::KernelFn) -> OpDef {
        OpDef {
            gpu: Some(GpuKernel::Plain(kernel)),
            ..self
        }
    }

    /// This op with a GPU kernel that keeps state between a forward node and its backward node.
    pub(crate) const fn on_gpu_stateful(self, kernel: crate::ops::gpu::ops::StatefulFn) -> OpDef {
        OpDef {
            gpu: Some(GpuKernel::Stateful(kernel)),
            ..self
        }
    }

    /// This op as a member of a typed family ([`OpDef::member`]).
    pub(crate) const fn member(self, member: Member) -> OpDef {
        OpDef { member, ..self }
    }

    /// This op with these output counts ([`OpDef::outputs`]).
    pub(crate) const fn outputs(self, outputs: Outputs) -> OpDef {
        OpDef { outputs, ..self }
    }

    /// This op marked as pointwise or not ([`OpDef::pointwise`]).
    pub(crate) const fn pointwise(self, pointwise: bool) -> OpDef {
        OpDef { pointwise, ..self }
    }

    /// This op with its cost in the recomputation planner's model ([`OpDef::cost`]).
    pub(crate) const fn cost(self, flops: Flops, passes: f64) -> OpDef {
        OpDef {
            cost: Cost { flops, passes },
            ..self
        }
    }

    /// This op with a rule for partial shapes ([`OpDef::infer_partial`]).
    pub(crate) const fn partial(self, rule: InferPartialFn) -> OpDef {
        OpDef {
            infer_partial: Some(rule),
            ..self
        }
    }
}

/// Older names MXNet still registers for these ops, which model files saved by older versions
/// (and some exporters) carry: `_Plus` nodes in an old ResNet, `Softmax` heads.
const LEGACY_ALIASES: &[(&str, &str)] = &[
    ("_Plus", "elemwise_add"),
    ("_plus", "elemwise_add"),
    ("_add", "elemwise_add"),
    ("_Minus", "elemwise_sub"),
    ("_minus", "elemwise_sub"),
    ("_sub", "elemwise_sub"),
    ("_Mul", "elemwise_mul"),
    ("_mul", "elemwise_mul"),
    ("_Div", "elemwise_div"),
    ("_div", "elemwise_div"),
    ("_PlusScalar", "_plus_scalar"),
    ("_MinusScalar", "_minus_scalar"),
    ("_RMinusScalar", "_rminus_scalar"),
    ("_MulScalar", "_mul_scalar"),
    ("_DivScalar", "_div_scalar"),
    ("_RDivScalar", "_rdiv_scalar"),
    ("_MaximumScalar", "_maximum_scalar"),
    ("_MinimumScalar", "_minimum_scalar"),
    ("_PowerScalar", "_power_scalar"),
    ("_EqualScalar", "_equal_scalar"),
    ("_GreaterScalar", "_greater_scalar"),
    ("_LesserScalar", "_lesser_scalar"),
    ("broadcast_plus", "broadcast_add"),
    ("broadcast_minus", "broadcast_sub"),
    ("sum_axis", "sum"),
    ("max_axis", "max"),
    ("min_axis", "min"),
    ("flatten", "Flatten"),
    ("Softmax", "SoftmaxOutput"),
    ("choose_element_0index", "pick"),
];

/// Every op by name. Imperative calls look their op up each time, so the map hashes with
/// rustc's fast hasher rather than the default DoS-resistant one (the keys are our own names).
fn registry() -> &'static FxHashMap<&'static str, &'static OpDef> {
    static REG: OnceLock<FxHashMap<&'static str, &'static OpDef>> = OnceLock::new();
    REG.get_or_init(|| {
        let mut m = FxHashMap::default();
        for def in elemwise::ops()
            .iter()
            .chain(binary::ops())
            .chain(binary::backward_ops())
            .chain(scalar::ops())
            .chain(unary::ops())
            .chain(reduce::ops())
            .chain(reduce::backward_ops())
            .chain(linalg::ops())
            .chain(nn::ops())
            .chain(update::ops())
            .chain(softmax::ops())
            .chain(fully_connected::ops())
            .chain(shape::ops())
            .chain(conv::ops())
            .chain(pooling::ops())
            .chain(stochastic::ops())
            .chain(batch_norm::ops())
            .chain(add_n::ops())
            .chain(reshape_like::ops())
            .chain(shape_grad::shape_grad_ops())
            .chain(shape_grad::take_grad_ops())
            .chain(stack::ops())
            .chain(creation::ops())
            .chain(select::ops())
            .chain(leaky_relu::ops())
            .chain(math::ops())
            .chain(norm::ops())
            .chain(loss::ops())
            .chain(gather::ops())
            .chain(lanes::ops())
            .chain(sort::ops())
            .chain(rnn::ops())
            .chain(gather_nd::ops())
            .chain(vision::ops())
            .chain(roi::ops())
            .chain(fused::ops())
        {
            m.insert(def.name, def);
            for a in def.aliases {
                m.insert(*a, def);
            }
        }
        for (alias, name) in LEGACY_ALIASES {
            if let Some(def) = m.get(name).copied() {
                m.insert(alias, def);
            }
        }
        m
    })
}

/// Most outputs an attribute may give one node (SliceChannel's `num_outputs`, the pieces of a
/// Concat's gradient). A node lists its outputs, so a count past this is refused instead of
/// sizing that list; a split into more pieces than this is far beyond any model's use.
pub const MAX_NODE_OUTPUTS: usize = 1 << 16;

/// An attribute counting a node's outputs: a whole number from 1 to [`MAX_NODE_OUTPUTS`].
pub(crate) fn output_count(op: &str, attrs: &Attrs, key: &str) -> Result<usize> {
    attrs.count(op, key, None, 1..=MAX_NODE_OUTPUTS as u32)
}

/// The largest element count an array's shape may claim (2^48, far past any memory): shape
/// inference refuses bigger ones, and ops that size an output from attribute values bound it
/// by this before multiplying.
pub const MAX_ELEMENTS: u64 = 1 << 48;

/// The product of `dims` when it is at most [`MAX_ELEMENTS`]; `None` past it, an overflow
/// included.
pub(crate) fn bounded_product(dims: impl IntoIterator<Item = usize>) -> Option<usize> {
    dims.into_iter()
        .try_fold(1u64, |n, d| n.checked_mul(d as u64))
        .filter(|&n| n <= MAX_ELEMENTS)
        .map(|n| n as usize)
}

/// The element count of `shape`, refused past [`MAX_ELEMENTS`], for shapes built from
/// attribute values (a product of those could otherwise wrap around into a plausible count).
pub(crate) fn element_count(op: &str, shape: &[usize]) -> Result<usize> {
    bounded_product(shape.iter().copied())
        .ok_or_else(|| invalid(op, format!("shape {shape:?} has more than 2^48 elements")))
}

/// An output axis `n` times as long as an input's (`n` a size, `k` an attribute): refused past
/// [`MAX_ELEMENTS`] rather than wrapped.
pub(crate) fn times(op: &str, n: usize, k: usize) -> Result<usize> {
    bounded_product([n, k]).ok_or_else(|| {
        invalid(
            op,
            format!("an axis of {n} made {k} times longer is past 2^48"),
        )
    })
}

/// A norm's counts: the output and two hidden statistics, which `output_mean_var` shows.
pub(crate) fn norm_outputs(output_mean_var: bool) -> (usize, usize) {
    (3, if output_mean_var { 3 } else { 1 })
}

/// How many outputs a node of op `def` with `attrs` has, hidden ones included (what MXNet's
/// files record in `node_row_ptr`), and how many of them are visible to users.
pub fn num_outputs(def: &OpDef, attrs: &Attrs) -> Result<(usize, usize)> {
    match def.outputs {
        Outputs::Fixed(all, visible) => Ok((all, visible)),
        Outputs::By(count) => count(def.name, attrs),
    }
}

/// The op registered under `name`.
pub fn lookup(name: &str) -> Result<&'static OpDef> {
    registry()
        .get(name)
        .copied()
        .ok_or_else(|| NdError::UnknownOp(name.to_string()))
}

/// Every registered op name (aliases included), sorted.
pub fn op_names() -> Vec<&'static str> {
    let mut v: Vec<_> = registry().keys().copied().collect();
    v.sort_unstable();
    v
}

/// The kernel of identity ops (reshape family, Flatten, reshape_like): a copy, or nothing when
/// the output already is the input.
pub(crate) fn copy_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, _, ins, outs) = call.parts();
    copy_unless_same(&ins[0], &outs[0]);
    Ok(())
}

/// Copies `src` into `dst` inside a kernel, unless they are the same memory already (an output
/// planned in place of its input).
pub(crate) fn copy_unless_same(src: &TensorRef, dst: &TensorRef) {
    if !src.same_memory(dst) {
        // SAFETY: kernels get read access to their inputs and write access to their outputs;
        // `copy_bytes_to` tolerates overlap.
        unsafe { src.copy_bytes_to(dst) };
    }
}

/// Shared inference checks.
pub(crate) fn same_dtypes(op: &str, dtypes: &[DType]) -> Result<DType> {
    let d = dtypes[0];
    for (i, x) in dtypes.iter().enumerate().skip(1) {
        if *x != d {
            return Err(NdError::DType {
                op: op.into(),
                arg: format!("input {i}"),
                found: x.to_string(),
                expected: format!("{d} like input 0"),
            });
        }
    }
    Ok(d)
}

/// The shape every input shares, refused by the first input of another shape.
pub(crate) fn same_shapes<'a>(op: &str, shapes: &'a [Vec<usize>]) -> Result<&'a [usize]> {
    let s = &shapes[0];
    for (i, x) in shapes.iter().enumerate().skip(1) {
        if x != s {
            return Err(shape_error(
                op,
                format!("input {i}"),
                x.clone(),
                format!("{s:?} like input 0"),
            ));
        }
    }
    Ok(s)
}

/// The forward op that a backward op shared by several forward ops names in attribute `key`
/// (`default` when it is absent), refused unless it is one of `allowed`.
pub(crate) fn named_forward<'a>(
    op: &str,
    attrs: &'a Attrs,
    key: &str,
    default: Option<&'static str>,
    allowed: &[&str],
) -> Result<&'a str> {
    let forward = attrs.get(key).or(default).ok_or_else(|| {
        invalid(
            op,
            format!("attribute {key} (the forward op: one of {allowed:?}) is required"),
        )
    })?;
    if !allowed.contains(&forward) {
        return Err(invalid(
            op,
            format!("{key}={forward:?} is not one of {allowed:?}"),
        ));
    }
    Ok(forward)
}

/// A backward op's inputs, checked against its forward op: the forward inputs it was given must
/// pass `forward`'s own inference, and each output gradient `(output, shape, dtype)` must have
/// the shape and dtype of that forward output. Backward kernels index their inputs by these
/// shapes, so inputs of another shape (a backward op invoked by hand) are refused here instead
/// of being read out of bounds.
pub(crate) fn check_against_forward(
    op: &str,
    forward: &str,
    attrs: &Attrs,
    (shapes, dtypes): (&[Vec<usize>], &[DType]),
    grads: &[(usize, &[usize], DType)],
) -> Result<()> {
    let (outs, out_dtypes) = (lookup(forward)?.infer)(forward, attrs, shapes, dtypes)
        .map_err(|e| invalid(op, format!("its forward inputs do not fit {forward}: {e}")))?;
    for &(k, shape, dtype) in grads {
        let arg = format!("the gradient of {forward}'s output {k}");
        let (Some(want), Some(&want_dtype)) = (outs.get(k), out_dtypes.get(k)) else {
            return Err(invalid(op, format!("{forward} has no output {k}")));
        };
        if shape != want.as_slice() {
            return Err(NdError::Shape {
                op: op.into(),
                arg,
                found: shape.to_vec(),
                expected: format!("{want:?}, the shape {forward} gives that output"),
            });
        }
        if dtype != want_dtype {
            return Err(NdError::DType {
                op: op.into(),
                arg,
                found: dtype.to_string(),
                expected: format!("{want_dtype}, the dtype of that output"),
            });
        }
    }
    Ok(())
}

/// Normalizes possibly negative axes against `ndim`; errors name the op.
pub(crate) fn norm_axes(op: &str, axes: &[i64], ndim: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = ndim as i64;
        let ax = if a < 0 { a + n } else { a };
        if ax < 0 || ax >= n {
            return Err(invalid(
                op,
                format!("axis {a} is out of range for {ndim} dimensions"),
            ));
        }
        if out.contains(&(ax as usize)) {
            return Err(invalid(op, format!("axis {a} is repeated")));
        }
        out.push(ax as usize);
    }
    Ok(out)
}
