//! The op registry, shared by the imperative API and (later) the symbolic layer.
//!
//! Each op declares, under its MXNet name: how many inputs, its attributes (parsed from strings,
//! as MXNet's JSON stores them), shape and dtype inference, its CPU kernel, which inputs may
//! share memory with which outputs (in place), whether it is an identity (reshape-like), and
//! which inputs its backward pass does not need. `invoke` checks a call synchronously (arity,
//! contexts, shapes, dtypes), allocates the outputs and pushes one engine op that runs the
//! kernel when the inputs are ready.

mod backward;
pub(crate) mod conv;
mod depthwise;
pub(crate) mod elemwise;
mod extra;
pub(crate) mod gather;
mod gather_nd;
pub(crate) mod lanes;
mod linalg;
pub(crate) mod loss;
pub(crate) mod math;
mod mxnet_params;
mod nn;
mod norm;
mod par;
pub(crate) mod partial_shapes;
mod permute;
pub(crate) mod pooling;
mod reduce;
#[cfg(test)]
mod reference;
pub(crate) mod rnn;
mod roi;
pub(crate) mod shape;
pub(crate) mod sort;
mod stochastic;
mod vision;

#[cfg(any(feature = "cuda", test))]
pub(crate) use backward::softmax_output_scale;
pub(crate) use elemwise::{broadcast_twin, scalar_of};
pub(crate) use extra::bilinear_upsampling;
pub(crate) use nn::softmax_axis;
pub(crate) use reduce::norm_ord;
pub(crate) use rnn::gradient_inputs as rnn_gradient_inputs;
pub use stochastic::IS_TRAIN;
// What the GPU back end shares with the CPU kernels: attribute parsing and layouts.
#[cfg(any(feature = "cuda", test))]
pub(crate) use {
    conv::has_bias,
    extra::{arange_params, deconv_as_conv, stack_axis, LeakyAct},
    gather_nd::starts_of as gather_nd_starts,
    lanes::{block_size, mask_params as sequence_params, pick_layout, pick_wrap},
    linalg::product,
    loss::class_of,
    math::hard_sigmoid_params,
    nn::{one_hot_params, transpose_axes},
    norm::{eps as norm_eps, layout as norm_layout, Scale},
    reduce::axes_of as reduced_axes,
    roi::{align_plan, pooling_windows},
    shape::{axis_attr, split_params, take_layout, take_row},
    stochastic::{bn_axis, bn_eps_momentum, bn_flags, dropout_active, dropout_p, random_params},
    vision::{plane_taps, PlaneTaps},
};

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};

use engine::Op;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use crate::array::NDArray;
use crate::error::{invalid, shape_error, NdError, Result};
use crate::resources::{DeviceResources, KernelRes, OpState, Resource, StateSlot};
use crate::runtime::Runtime;
use crate::DType;

/// A pointer and length into a chunk, handed to kernels.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawBuf {
    pub(crate) ptr: *mut u8,
    pub(crate) bytes: usize,
}

// SAFETY: a RawBuf is only dereferenced inside engine ops that name the chunk's var, so the
// engine orders every access to the memory and the chunk's delete op keeps it alive until then.
unsafe impl Send for RawBuf {}
// SAFETY: as above; sharing the pointer value itself is harmless.
unsafe impl Sync for RawBuf {}

/// A shape, stored inline up to 6 dimensions (no allocation on the hot path of small ops).
pub(crate) type Dims = smallvec::SmallVec<[usize; 6]>;

/// An op's inputs, then its outputs, as its kernel sees them: one allocation per op, and a
/// small closure to move around (a tiny op's closure is built, boxed and called once each).
pub(crate) struct Tensors {
    all: Vec<TensorRef>,
    inputs: usize,
}

impl Tensors {
    fn new(inputs: &[&NDArray], outputs: &[NDArray]) -> Tensors {
        let mut all = Vec::with_capacity(inputs.len() + outputs.len());
        all.extend(inputs.iter().map(|a| a.tensor()));
        all.extend(outputs.iter().map(NDArray::tensor));
        Tensors {
            all,
            inputs: inputs.len(),
        }
    }

    /// The inputs (a kernel runner may point one at a copy) and the outputs.
    pub(crate) fn split(&mut self) -> (&mut [TensorRef], &[TensorRef]) {
        let (ins, outs) = self.all.split_at_mut(self.inputs);
        (ins, outs)
    }
}

/// What a kernel sees of an array: memory, shape and dtype (row-major, contiguous).
#[derive(Clone, Debug)]
pub(crate) struct TensorRef {
    pub(crate) buf: RawBuf,
    pub(crate) shape: Dims,
    pub(crate) dtype: DType,
}

impl TensorRef {
    pub(crate) fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub(crate) fn ptr<T>(&self) -> *mut T {
        self.buf.ptr.cast()
    }

    /// # Safety
    /// The caller holds read access to the memory (an engine op reading its var) and nothing
    /// writes it through another reference meanwhile.
    pub(crate) unsafe fn slice<T>(&self) -> &[T] {
        // SAFETY: per the caller's contract; the pointer is aligned (64-byte blocks, offsets in
        // whole elements) and the length is within the block.
        unsafe { std::slice::from_raw_parts(self.ptr::<T>(), self.len()) }
    }

    /// Every element as f64 (index, label and length inputs of any dtype).
    ///
    /// # Safety
    /// As for [`TensorRef::slice`]: the caller holds read access to the memory.
    pub(crate) unsafe fn to_f64s(&self) -> Vec<f64> {
        crate::with_dtype!(self.dtype, T => {
            // SAFETY: per the caller's contract.
            unsafe { self.slice::<T>() }.iter().map(|v| crate::Element::to_f64(*v)).collect()
        })
    }

    /// # Safety
    /// The caller holds write access to the memory and no other reference to it exists.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut<T>(&self) -> &mut [T] {
        // SAFETY: per the caller's contract, as for `slice`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr::<T>(), self.len()) }
    }

    /// Copies this tensor's bytes over `dst`'s (ranges may overlap).
    ///
    /// # Safety
    /// Read access to `self`, write access to `dst`, and `dst` at least as large.
    pub(crate) unsafe fn copy_bytes_to(&self, dst: &TensorRef) {
        // SAFETY: per the caller's contract.
        unsafe { std::ptr::copy(self.buf.ptr, dst.buf.ptr, self.buf.bytes.min(dst.buf.bytes)) }
    }

    pub(crate) fn overlaps(&self, other: &TensorRef) -> bool {
        let (a, b) = (self.buf.ptr as usize, other.buf.ptr as usize);
        a < b + other.buf.bytes
            && b < a + self.buf.bytes
            && self.buf.bytes > 0
            && other.buf.bytes > 0
    }

    pub(crate) fn same_memory(&self, other: &TensorRef) -> bool {
        self.buf.ptr == other.buf.ptr && self.buf.bytes == other.buf.bytes
    }
}

/// FullyConnected's sizes from its data and weight `(hidden, k)`: rows `m` (the data flattened to
/// `k` columns), `hidden`, `k` — what its CPU and GPU kernels, forward and backward, work on.
pub(crate) fn fc_dims(x: &TensorRef, w: &TensorRef) -> (usize, usize, usize) {
    let (hidden, k) = (w.shape[0], w.shape[1]);
    (x.len().checked_div(k).unwrap_or(0), hidden, k)
}

/// An op's attributes as strings (MXNet's JSON form), with typed getters that name the op and the
/// key in their errors. Cloning shares the map (kernels keep a copy without allocating).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs(Arc<BTreeMap<String, Value>>);

/// One attribute: its text, and its number once a kernel has asked for one. Kernels read their
/// attributes every time they run, and a map is shared by every run of its node (or, for
/// `x + 1.0` in a loop, by every op of the loop), so a number is parsed once per map.
#[derive(Clone)]
pub(crate) struct Value {
    text: String,
    number: OnceLock<Option<f64>>,
}

impl Value {
    fn new(text: String) -> Value {
        Value {
            text,
            number: OnceLock::new(),
        }
    }

    fn number(&self) -> Option<f64> {
        *self.number.get_or_init(|| self.text.trim().parse().ok())
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.text == other.text
    }
}

impl Eq for Value {}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl Attrs {
    /// No attributes (one shared empty map: making one costs no allocation).
    pub fn new() -> Self {
        static EMPTY: OnceLock<Attrs> = OnceLock::new();
        EMPTY
            .get_or_init(|| Attrs(Arc::new(BTreeMap::new())))
            .clone()
    }

    /// Adds one.
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        Arc::make_mut(&mut self.0).insert(key.to_string(), Value::new(value.to_string()));
        self
    }

    /// The raw string.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.text.as_str())
    }

    /// Every attribute, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.text.as_str()))
    }

    /// A float attribute.
    pub fn f64(&self, op: &str, key: &str, default: Option<f64>) -> Result<f64> {
        match self.0.get(key) {
            Some(v) => v.number().ok_or_else(|| {
                invalid(op, format!("attribute {key}={:?} is not a number", v.text))
            }),
            None => default.ok_or_else(|| invalid(op, format!("attribute {key} is required"))),
        }
    }

    /// [`Attrs::ints`] whose every entry lies in `range`: a window's sizes, strides, paddings or
    /// offsets, which are multiplied and added into shapes, so that a huge one is refused
    /// instead of wrapping that arithmetic.
    pub fn ints_in(
        &self,
        op: &str,
        key: &str,
        range: RangeInclusive<i64>,
    ) -> Result<Option<Vec<i64>>> {
        let v = self.ints(op, key)?;
        if let Some(bad) = v.iter().flatten().find(|x| !range.contains(x)) {
            return Err(invalid(
                op,
                format!(
                    "attribute {key}={:?} has {bad}, outside {} to {}",
                    self.get(key).unwrap_or_default(),
                    range.start(),
                    range.end()
                ),
            ));
        }
        Ok(v)
    }

    /// A whole-number attribute (an axis length, a count) within `range`: `3`, or `3.0` as a
    /// float-formatting writer leaves it, but never `2.5`, NaN or a number past the range, which
    /// a cast would silently truncate or saturate into a shape or a list's length.
    pub fn int(
        &self,
        op: &str,
        key: &str,
        default: Option<i64>,
        range: RangeInclusive<i64>,
    ) -> Result<i64> {
        let Some(v) = self.0.get(key) else {
            return default.ok_or_else(|| invalid(op, format!("attribute {key} is required")));
        };
        // The bounds used are 32-bit, so they and every whole number between them are exact.
        match v.number() {
            Some(n)
                if n.fract() == 0.0
                    && (*range.start() as f64..=*range.end() as f64).contains(&n) =>
            {
                Ok(n as i64)
            }
            _ => Err(invalid(
                op,
                format!(
                    "attribute {key}={:?} is not a whole number from {} to {}",
                    v.text,
                    range.start(),
                    range.end()
                ),
            )),
        }
    }

    /// [`Attrs::int`] for a count or a length, which can be no less than `range`'s start and is
    /// used as a `usize`.
    pub fn count(
        &self,
        op: &str,
        key: &str,
        default: Option<usize>,
        range: RangeInclusive<u32>,
    ) -> Result<usize> {
        let range = i64::from(*range.start())..=i64::from(*range.end());
        let default = default.map(|d| d as i64);
        Ok(self.int(op, key, default, range)? as usize)
    }

    /// A float attribute that MXNet holds as a C `float` (a clip bound, a slope, an optimizer's
    /// rate): rounded to float precision, as MXNet computes with it (0.1 is 0.1f, even for
    /// float64 arrays).
    pub fn float(&self, op: &str, key: &str, default: Option<f64>) -> Result<f64> {
        Ok(f64::from(self.f64(op, key, default)? as f32))
    }

    /// A boolean attribute (`true`/`false`/`1`/`0`, any case).
    pub fn bool(&self, op: &str, key: &str, default: bool) -> Result<bool> {
        match self.get(key).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) if v == "true" || v == "1" => Ok(true),
            Some(v) if v == "false" || v == "0" => Ok(false),
            Some(v) => Err(invalid(
                op,
                format!("attribute {key}={v:?} is not a boolean"),
            )),
        }
    }

    /// The dtype named by `dtype` (MXNet's names: `float32`, `int64`, ...); float32 when
    /// absent, as MXNet's ops default.
    pub fn dtype(&self, op: &str) -> Result<DType> {
        match self.get("dtype") {
            None => Ok(DType::F32),
            Some(name) => {
                DType::parse(name).ok_or_else(|| invalid(op, format!("dtype {name:?} is unknown")))
            }
        }
    }

    /// An integer tuple such as `(0, 2)`, `[1]`, `1` or `()`; `None` when absent or `None`.
    pub fn ints(&self, op: &str, key: &str) -> Result<Option<Vec<i64>>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let t = v
            .trim()
            .trim_start_matches(['(', '['])
            .trim_end_matches([')', ']']);
        if t.eq_ignore_ascii_case("none") {
            return Ok(None);
        }
        t.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<i64>().map_err(|_| {
                    invalid(
                        op,
                        format!("attribute {key}={v:?} is not a tuple of integers"),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }
}

/// How many inputs an op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    /// Exactly this many.
    Exactly(usize),
    /// At least this many.
    AtLeast(usize),
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
/// A CPU kernel: inputs and outputs (already allocated, inferred shapes).
pub(crate) type KernelFn = fn(&str, &Attrs, &[TensorRef], &[TensorRef], &mut KernelRes) -> KResult;

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
}

/// How an op takes part in a forward node's kept state ([`crate::resources::OpState`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StateUse {
    /// None.
    No,
    /// A forward op that keeps state when bound for training.
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
            .chain(reduce::ops())
            .chain(linalg::ops())
            .chain(nn::ops())
            .chain(shape::ops())
            .chain(conv::ops())
            .chain(pooling::ops())
            .chain(stochastic::ops())
            .chain(backward::ops())
            .chain(backward::more_ops())
            .chain(backward::norm_ops())
            .chain(backward::grad_ops())
            .chain(backward::shape_grad_ops())
            .chain(backward::take_grad_ops())
            .chain(extra::ops())
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

/// Any value of a C `int`, what MXNet keeps most integer attributes in (a signed count whose
/// negative values mean "all" or "adaptive", an axis).
pub(crate) const C_INT: RangeInclusive<i64> = i32::MIN as i64..=i32::MAX as i64;

/// The sizes MXNet keeps in a C `int` (`num_hidden`, `input_dim`, a scale): what a model file
/// may give one, at least 1.
pub(crate) const POSITIVE_INT: RangeInclusive<u32> = 1..=i32::MAX as u32;

/// How many outputs a node of op `def` with `attrs` has, hidden ones included (what MXNet's
/// files record in `node_row_ptr`), and how many of them are visible to users.
pub fn num_outputs(def: &OpDef, attrs: &Attrs) -> Result<(usize, usize)> {
    let op = def.name;
    Ok(match op {
        "SliceChannel" => {
            let n = output_count(op, attrs, "num_outputs")?;
            (n, n)
        }
        "BatchNorm" => (
            3,
            if attrs.bool(op, "output_mean_var", false)? {
                3
            } else {
                1
            },
        ),
        "Dropout" => (2, 1),
        // The per-group statistics the backward op reads are hidden outputs, as in MXNet.
        "LayerNorm" | "GroupNorm" => (
            3,
            if attrs.bool(op, "output_mean_var", false)? {
                3
            } else {
                1
            },
        ),
        "InstanceNorm" => (3, 1),
        // Values keep their indices as a hidden output, as in MXNet.
        "sort" => (2, 1),
        "topk" => match attrs.get("ret_typ") {
            Some("value") => (2, 1),
            Some("both") => (2, 2),
            _ => (1, 1),
        },
        "_backward_LinearRegressionOutput"
        | "_backward_LogisticRegressionOutput"
        | "_backward_MAERegressionOutput" => (2, 2),
        "L2Normalization" => (2, 1),
        "_backward_LayerNorm" | "_backward_InstanceNorm" | "_backward_GroupNorm" => (3, 3),
        "Pooling" => {
            let max = attrs.get("pool_type").unwrap_or("max") == "max";
            if max {
                (2, 1)
            } else {
                (1, 1)
            }
        }
        "sgd_mom_update" => (2, 1),
        "_backward_LeakyReLU" => {
            let n = match attrs.get("act_type") {
                Some("prelu") => 2,
                _ => 1,
            };
            (n, n)
        }
        "_backward_FullyConnected" => {
            let n = if attrs.bool(op, "no_bias", false)? {
                2
            } else {
                3
            };
            (n, n)
        }
        "_backward_SoftmaxOutput" => (2, 2),
        "_backward_BatchNorm" => (3, 3),
        "_backward_Concat" => {
            let n = output_count(op, attrs, "num_args")?;
            (n, n)
        }
        "_backward_Convolution" | "_backward_Deconvolution" => {
            let n = if conv::has_bias(op, attrs)? { 3 } else { 2 };
            (n, n)
        }
        "adam_update" => (3, 1),
        "ROIPooling" => (2, 1),
        "_backward_BilinearResize2D" | "_backward_Crop" => {
            let n = vision::grad_outputs(op, attrs)?;
            (n, n)
        }
        "RNN" => {
            let n = rnn::num_outputs(op, attrs)?;
            (n, n)
        }
        "_backward_RNN" => {
            let n = rnn::num_grad_outputs(op, attrs)?;
            (n, n)
        }
        _ => (1, 1),
    })
}

/// Refuses an attribute that MXNet's op of the same name does not take either, naming the
/// ones it does: a misspelt attribute would otherwise be ignored, and the op would compute
/// something else than asked. Attributes starting with `__` are the graph's own (context
/// groups, training mode, dtype pins) and `num_args` is how variadic ops count their inputs;
/// both always pass. Ops MXNet does not have are not checked.
pub(crate) fn check_attr_names(op: &str, attrs: &Attrs) -> Result<()> {
    let table = mxnet_params::MXNET_PARAMS;
    let Ok(i) = table.binary_search_by(|(name, _)| (*name).cmp(op)) else {
        return Ok(());
    };
    let known = table[i].1;
    match attrs
        .iter()
        .map(|(k, _)| k)
        .find(|k| !k.starts_with("__") && *k != "num_args" && !known.contains(k))
    {
        None => Ok(()),
        Some(key) => Err(invalid(
            op,
            format!(
                "unknown attribute {key:?} (MXNet's {op} takes {})",
                match known.is_empty() {
                    true => "none".to_string(),
                    false => known.join(", "),
                }
            ),
        )),
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

/// Runs op `name` on `inputs` imperatively: checks the call now, returns the outputs at once
/// and pushes the kernel to the engine. With `out`, writes into those arrays instead of new ones.
pub fn invoke(
    name: &str,
    inputs: &[&NDArray],
    attrs: &Attrs,
    out: Option<&[&NDArray]>,
) -> Result<Vec<NDArray>> {
    let first = inputs.first().ok_or_else(|| {
        invalid(
            name,
            "needs at least one input (invoke_on runs ops without inputs)",
        )
    })?;
    invoke_on(first.runtime(), first.ctx(), name, inputs, attrs, out)
}

/// Like [`invoke`], on an explicit runtime and context (ops without inputs, such as the random
/// generators, need it). While this thread records ([`crate::autograd::record`]), the op runs
/// in the recording's mode and joins the graph when an input is in it.
pub fn invoke_on(
    rt: &Arc<Runtime>,
    ctx: storage::Context,
    name: &str,
    inputs: &[&NDArray],
    attrs: &Attrs,
    out: Option<&[&NDArray]>,
) -> Result<Vec<NDArray>> {
    let push = |attrs: &Attrs| {
        let call = Call {
            name,
            inputs,
            attrs,
            out,
            also_writes: &[],
            state: None,
        };
        prepare(rt, ctx, call, |op| rt.engine().push(op))
    };
    let Some(train) = crate::autograd::mode() else {
        return push(attrs);
    };
    for o in out.into_iter().flatten() {
        crate::autograd::check_write(name, o)?;
    }
    let in_graph = inputs.iter().any(|a| a.entry().is_some());
    if in_graph && out.is_some() {
        return Err(invalid(
            name,
            "writes into given arrays while recording an input's graph; autograd records ops \
             that make new arrays (leave `out` out)",
        ));
    }
    let attrs = crate::autograd::recorded_attrs(attrs, train);
    let outputs = push(&attrs)?;
    crate::autograd::record_op(name, attrs, inputs, outputs)
}

/// Ops touching at most this many elements (inputs and outputs together) are marked cheap
/// ([`engine::Op::cheap`]): a few microseconds at worst (a dot of 18x18 matrices), so when one is
/// runnable at once the pushing thread runs it rather than paying a hand-over to a worker.
const CHEAP_ELEMENTS: usize = 1024;

/// Marks `op` cheap when it touches at most [`CHEAP_ELEMENTS`] elements: the one rule for every
/// op the NDArray layer pushes (registry ops, fills, writes, copies, reads back).
pub(crate) fn cheap_if_small(op: Op<'_>, elements: usize) -> Op<'_> {
    match elements <= CHEAP_ELEMENTS {
        true => op.cheap(),
        false => op,
    }
}

/// One call of an op, as [`prepare`] takes it.
pub(crate) struct Call<'c> {
    pub(crate) name: &'c str,
    pub(crate) inputs: &'c [&'c NDArray],
    pub(crate) attrs: &'c Attrs,
    /// Arrays to write the results into; new ones when `None`.
    pub(crate) out: Option<&'c [&'c NDArray]>,
    /// Vars the op writes besides its outputs (the executor's memory-reuse dependencies).
    pub(crate) also_writes: &'c [engine::Var],
    /// The bound node's kept state (executor only; see [`StateUse`]).
    pub(crate) state: Option<&'c OpState>,
}

/// Checks a call, builds its engine op and hands it to `push` (the engine, or the executor's bulk
/// pusher); returns the arrays it writes. The op borrows its vars from the arrays, so it is
/// pushed here, while the outputs it makes are still in hand.
pub(crate) fn prepare(
    rt: &Arc<Runtime>,
    ctx: storage::Context,
    call: Call<'_>,
    push: impl FnOnce(Op<'_>) -> std::result::Result<(), engine::EngineError>,
) -> Result<Vec<NDArray>> {
    let Call {
        name,
        inputs,
        attrs,
        out,
        also_writes,
        state,
    } = call;
    let rt = rt.clone();
    let def = lookup(name)?;
    let op = def.name;
    let ok = match def.arity {
        Arity::Exactly(n) => inputs.len() == n,
        Arity::AtLeast(n) => inputs.len() >= n,
    };
    if !ok {
        return Err(invalid(
            op,
            format!("takes {:?} inputs, got {}", def.arity, inputs.len()),
        ));
    }
    for (i, a) in inputs.iter().enumerate() {
        if !Arc::ptr_eq(a.runtime(), &rt) {
            return Err(invalid(op, format!("input {i} belongs to another runtime")));
        }
        if a.ctx() != ctx {
            return Err(NdError::Context {
                op: op.into(),
                arg: format!("input {i}"),
                found: a.ctx().to_string(),
                expected: ctx.to_string(),
            });
        }
    }
    let inferred = infer_outputs(def, attrs, inputs)?;
    let (oshapes, odtypes) = (&inferred.0, &inferred.1);
    let device_kernel = match ctx.is_cpu() {
        true => None,
        false => {
            let dtypes = inputs
                .iter()
                .map(|a| a.dtype())
                .chain(odtypes.iter().copied());
            Some(device_kernel(def, ctx, dtypes)?)
        }
    };
    let outputs: Vec<NDArray> = match out {
        Some(out) => {
            if out.len() != oshapes.len() {
                return Err(invalid(
                    op,
                    format!("writes {} outputs, {} given", oshapes.len(), out.len()),
                ));
            }
            // An op that reads nothing takes its shape from its `shape` attribute, where a 0
            // is a dimension left to inference (Gluon's begin states, `(0, H)`): a graph binds
            // it to the inferred size, and the given output's size is the one to fill.
            let partial = inputs.is_empty() && attrs.get("shape").is_some();
            let fits = |o: &NDArray, s: &[usize]| {
                o.shape() == s
                    || (partial
                        && o.shape().len() == s.len()
                        && o.shape()
                            .iter()
                            .zip(s)
                            .all(|(&have, &want)| want == 0 || have == want))
            };
            for (i, (o, (s, d))) in out.iter().zip(oshapes.iter().zip(odtypes)).enumerate() {
                if !fits(o, s)
                    || o.dtype() != *d
                    || o.ctx() != ctx
                    || !Arc::ptr_eq(o.runtime(), &rt)
                {
                    return Err(shape_error(
                        op,
                        format!("output {i}"),
                        o.shape().to_vec(),
                        format!(
                            "shape {s:?}, dtype {d} on {ctx} (it is {} on {})",
                            o.dtype(),
                            o.ctx()
                        ),
                    ));
                }
            }
            out.iter().map(|o| (*o).clone()).collect()
        }
        None => oshapes
            .iter()
            .zip(odtypes)
            .enumerate()
            .map(|(k, (s, d))| {
                rt.empty(s, *d, ctx).map_err(|e| match e {
                    NdError::Storage(source) => {
                        NdError::OutputMemory(Box::new(crate::error::OutputMemoryError {
                            op: def.name.to_string(),
                            output: k,
                            shape: s.clone(),
                            dtype: d.name().to_string(),
                            source,
                        }))
                    }
                    other => other,
                })
            })
            .collect::<Result<_>>()?,
    };
    let mut tensors = Tensors::new(inputs, &outputs);
    let mutated = def
        .mutate_inputs
        .iter()
        .filter_map(|&i| inputs.get(i).copied());
    // The forward node writes its kept state, the backward node reads it.
    let keeps = def.state == StateUse::Keeps;
    let state_writes = state.filter(|_| keeps).map(|s| &s.var);
    let state_reads = state.filter(|_| !keeps).map(|s| &s.var);
    let slot = state.map(|s| s.slot.clone());
    if let Some(kernel) = device_kernel {
        // A random op's GPU kernel takes a seed drawn, when it runs, from the device's generator.
        let rng = def
            .resources
            .contains(&Resource::Random)
            .then(|| rt.resources(ctx));
        let engine_op = device_op(&rt, ctx, def, kernel, attrs, tensors, rng.clone(), slot)
            .on(ctx)
            .writes(outputs.iter().chain(mutated).map(NDArray::var))
            .writes(rng.iter().map(|r| &r.rng_var))
            .writes(also_writes)
            .writes(state_writes)
            .reads(inputs.iter().map(|a| a.var()).chain(state_reads));
        push(engine_op)?;
        return Ok(outputs);
    }
    let (kernel, alias_safe, attrs2) = (def.kernel, def.alias_safe, attrs.clone());
    let res = (!def.resources.is_empty()).then(|| rt.resources(ctx));
    let wants_rng = def.resources.contains(&Resource::Random);
    let wants_temp = def.resources.contains(&Resource::TempSpace);
    let resource_vars = res.iter().flat_map(|r| {
        let rng = wants_rng.then_some(&r.rng_var);
        let temp = wants_temp.then_some(&r.temp_var);
        rng.into_iter().chain(temp)
    });
    let writes = outputs
        .iter()
        .chain(mutated)
        .map(NDArray::var)
        .chain(resource_vars)
        .chain(also_writes)
        .chain(state_writes);
    let held = res.clone();
    let engine_op = Op::sync(op, move |_| {
        let (mut rng, mut temp) = match &held {
            Some(r) => (
                wants_rng.then(|| r.rng.lock()),
                wants_temp.then(|| r.temp.lock()),
            ),
            None => (None, None),
        };
        let mut kept = slot.as_ref().map(|s| s.lock());
        let mut kres = KernelRes {
            rng: rng.as_deref_mut(),
            temp: temp.as_deref_mut(),
            state: kept.as_deref_mut(),
        };
        let (ins, outs) = tensors.split();
        run_kernel(op, kernel, alias_safe, &attrs2, ins, outs, &mut kres).map_err(Into::into)
    })
    .on(ctx)
    .writes(writes)
    .reads(inputs.iter().map(|a| a.var()).chain(state_reads));
    let elements: usize = inputs.iter().map(|a| a.size()).sum::<usize>()
        + outputs.iter().map(NDArray::size).sum::<usize>();
    push(cheap_if_small(engine_op, elements))?;
    Ok(outputs)
}

/// What runs an op on a GPU: a kernel of the GPU back end (`cuda` builds); nothing otherwise.
#[cfg(feature = "cuda")]
type DeviceKernel = crate::gpu::ops::GpuKernel;
#[cfg(not(feature = "cuda"))]
type DeviceKernel = std::convert::Infallible;

/// The GPU kernel of `def` for these dtypes on `ctx`, or why there is none.
fn device_kernel(
    def: &OpDef,
    ctx: storage::Context,
    dtypes: impl IntoIterator<Item = DType>,
) -> Result<DeviceKernel> {
    #[cfg(feature = "cuda")]
    return crate::gpu::ops::check(def, dtypes).map_err(|reason| NdError::Context {
        op: def.name.into(),
        arg: "inputs".into(),
        found: ctx.to_string(),
        expected: format!("a CPU context ({reason})"),
    });
    #[cfg(not(feature = "cuda"))]
    {
        let _ = dtypes;
        Err(crate::array::no_device(def.name, ctx))
    }
}

/// The engine op running a GPU kernel (without the vars and context, which the caller adds).
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
fn device_op<'a>(
    rt: &Arc<Runtime>,
    ctx: storage::Context,
    def: &'static OpDef,
    kernel: DeviceKernel,
    attrs: &Attrs,
    tensors: Tensors,
    rng: Option<Arc<DeviceResources>>,
    state: Option<Arc<Mutex<StateSlot>>>,
) -> Op<'a> {
    let pool = rt.storage(ctx);
    crate::gpu::cuda::kernel_op(def, kernel, attrs.clone(), tensors, pool, rng, state)
}

#[cfg(not(feature = "cuda"))]
#[allow(clippy::too_many_arguments)]
fn device_op<'a>(
    _: &Arc<Runtime>,
    _: storage::Context,
    _: &'static OpDef,
    kernel: DeviceKernel,
    _: &Attrs,
    _: Tensors,
    _: Option<Arc<DeviceResources>>,
    _: Option<Arc<Mutex<StateSlot>>>,
) -> Op<'a> {
    match kernel {}
}

/// Output shapes and dtypes, as an op's inference gives them.
type Inferred = (Vec<Vec<usize>>, Vec<DType>);

/// The last inference made on this thread: inference is a pure function of the op, its
/// attributes and its inputs' shapes and dtypes, and imperative code applies the same op to
/// same-shaped arrays again and again (`x = &x + 1.0` in a loop), so a repeat skips building the
/// shape lists and running the op's rule.
struct LastInference {
    def: &'static OpDef,
    attrs: Attrs,
    shapes: Vec<Vec<usize>>,
    dtypes: Vec<DType>,
    out: Rc<Inferred>,
}

fn infer_outputs(def: &'static OpDef, attrs: &Attrs, inputs: &[&NDArray]) -> Result<Rc<Inferred>> {
    thread_local! {
        static LAST: RefCell<Option<LastInference>> = const { RefCell::new(None) };
    }
    LAST.with(|last| {
        if let Some(m) = &*last.borrow() {
            let same_inputs = m.shapes.len() == inputs.len()
                && inputs
                    .iter()
                    .zip(m.shapes.iter().zip(&m.dtypes))
                    .all(|(a, (s, d))| a.shape() == s.as_slice() && a.dtype() == *d);
            if std::ptr::eq(m.def, def) && same_inputs && m.attrs == *attrs {
                return Ok(m.out.clone());
            }
        }
        let shapes: Vec<Vec<usize>> = inputs.iter().map(|a| a.shape().to_vec()).collect();
        let dtypes: Vec<DType> = inputs.iter().map(|a| a.dtype()).collect();
        check_attr_names(def.name, attrs)?;
        let out = Rc::new((def.infer)(def.name, attrs, &shapes, &dtypes)?);
        *last.borrow_mut() = Some(LastInference {
            def,
            attrs: attrs.clone(),
            shapes,
            dtypes,
            out: out.clone(),
        });
        Ok(out)
    })
}

/// Runs a kernel, first copying any input that overlaps an output (unless it is exactly that
/// output and the kernel handles that), so kernels never see partially aliased memory.
fn run_kernel(
    op: &str,
    kernel: KernelFn,
    alias_safe: bool,
    attrs: &Attrs,
    ins: &mut [TensorRef],
    outs: &[TensorRef],
    res: &mut KernelRes,
) -> std::result::Result<(), String> {
    let mut scratch: Vec<Vec<u64>> = Vec::new();
    for t in ins.iter_mut() {
        let clash = outs
            .iter()
            .any(|o| o.overlaps(t) && !(alias_safe && o.same_memory(t)));
        if clash {
            let mut copy = vec![0u64; t.buf.bytes.div_ceil(8)];
            // SAFETY: `t` is readable (the engine ordered this op after its writers); `copy` is a
            // fresh buffer of at least as many bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    t.buf.ptr,
                    copy.as_mut_ptr().cast::<u8>(),
                    t.buf.bytes,
                )
            };
            t.buf.ptr = copy.as_mut_ptr().cast();
            scratch.push(copy);
        }
    }
    kernel(op, attrs, ins, outs, res)
}

/// The kernel of identity ops (reshape family, Flatten, reshape_like): a copy, or nothing when
/// the output already is the input.
pub(crate) fn copy_kernel(
    _: &str,
    _: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> std::result::Result<(), String> {
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
