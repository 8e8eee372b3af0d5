//! Every registered op can be invoked by hand, backward ops included, with inputs no graph
//! would give it. Kernels index their inputs by the shapes inference accepted, so inference is
//! what keeps them in bounds: these tests give ops wrong inputs and check that each one is
//! refused with an error or runs, and that none panics. Arrays are allocated one by one
//! (unpooled storage), so that under AddressSanitizer (`.ci/asan`) a read past an input is
//! reported where it happens.

use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::ops::Arity;
use ndarray_ops::symbol::{gradient, head_grad_names, infer};
use ndarray_ops::{ops, Attrs, DType, NDArray, Runtime, Symbol};
use storage::{Context, PoolKind, StorageConfig};

/// The inline engine (a kernel's panic surfaces in the call that pushed it) on storage that
/// allocates every array by itself.
fn runtime() -> Arc<Runtime> {
    let storage = StorageConfig {
        kind: PoolKind::Unpooled,
        ..StorageConfig::default()
    };
    Runtime::new(EngineBuilder::new(EngineKind::Naive).build(), storage)
}

/// An op's inputs: shapes and dtypes.
type Inputs = Vec<(Vec<usize>, DType)>;

/// What happened to one call.
#[derive(Debug)]
enum Outcome {
    /// `invoke` returned an error: nothing was pushed.
    Refused(String),
    /// The kernel ran and failed without panicking.
    Failed(String),
    Ran,
}

/// Invokes `op` on arrays of these shapes and dtypes (filled with 0s and 1s, which are valid
/// indices, labels and positions) and waits for it; a panic on either side is an `Err`.
fn call(
    rt: &Arc<Runtime>,
    op: &str,
    attrs: &Attrs,
    inputs: &[(Vec<usize>, DType)],
) -> Result<Outcome, String> {
    let arrays = inputs
        .iter()
        .map(|(shape, dtype)| array(rt, shape, *dtype, |i| (i % 2) as f32))
        .collect();
    run(rt, op, attrs, inputs, arrays)
}

/// [`call`] with values drawn from 0 to 3, -1, 7, 1e30 and NaN.
fn call_with_values(
    rt: &Arc<Runtime>,
    op: &str,
    attrs: &Attrs,
    inputs: &[(Vec<usize>, DType)],
    rng: &mut Rng,
) -> Result<Outcome, String> {
    const ODD: [f32; 4] = [-1.0, 7.0, 1e30, f32::NAN];
    let arrays = inputs
        .iter()
        .map(|(shape, dtype)| {
            array(rt, shape, *dtype, |_| match rng.below(10) {
                k @ 0..=3 => ODD[k],
                k => (k - 4) as f32 / 2.0,
            })
        })
        .collect();
    run(rt, op, attrs, inputs, arrays)
}

fn array(
    rt: &Arc<Runtime>,
    shape: &[usize],
    dtype: DType,
    value: impl FnMut(usize) -> f32,
) -> NDArray {
    let n: usize = shape.iter().product();
    let a = rt
        .from_vec((0..n).map(value).collect(), shape, Context::cpu(0))
        .unwrap();
    match dtype {
        DType::F32 => a,
        d => ndarray_ops::invoke("Cast", &[&a], &Attrs::new().with("dtype", d.name()), None)
            .unwrap()
            .remove(0),
    }
}

fn run(
    rt: &Arc<Runtime>,
    op: &str,
    attrs: &Attrs,
    inputs: &[(Vec<usize>, DType)],
    arrays: Vec<NDArray>,
) -> Result<Outcome, String> {
    let refs: Vec<&NDArray> = arrays.iter().collect();
    let run = catch_unwind(AssertUnwindSafe(|| {
        let outs = match ndarray_ops::invoke_on(rt, Context::cpu(0), op, &refs, attrs, None) {
            Ok(outs) => outs,
            Err(e) => return Outcome::Refused(e.to_string()),
        };
        for o in &outs {
            if let Err(e) = o.wait_to_read() {
                return Outcome::Failed(e.to_string());
            }
        }
        Outcome::Ran
    }));
    let _ = rt.engine().wait_for_all();
    match run {
        Err(_) => Err(format!("{op} {inputs:?} panicked on the calling thread")),
        Ok(Outcome::Failed(e)) if e.contains("panicked") => Err(format!("{op} {inputs:?}: {e}")),
        Ok(outcome) => Ok(outcome),
    }
}

/// A forward op, its inputs' shapes, and the arguments to differentiate: its gradient graph
/// holds the backward ops to try, with the inputs the gradient pass gives them.
struct Forward {
    op: &'static str,
    attrs: Attrs,
    inputs: Vec<(&'static str, Vec<usize>)>,
    wrt: &'static [&'static str],
}

fn fwd(
    op: &'static str,
    attrs: &[(&str, &str)],
    inputs: &[(&'static str, &[usize])],
    wrt: &'static [&'static str],
) -> Forward {
    Forward {
        op,
        attrs: attrs.iter().fold(Attrs::new(), |a, (k, v)| a.with(k, v)),
        inputs: inputs.iter().map(|(n, s)| (*n, s.to_vec())).collect(),
        wrt,
    }
}

/// One forward op per backward op the registry has.
#[rustfmt::skip]
fn forwards() -> Vec<Forward> {
    const D: &[&str] = &["data"];
    const PARAMS: &[&str] = &["data", "gamma", "beta"];
    vec![
        fwd("FullyConnected", &[("num_hidden", "4")],
            &[("data", &[2, 3]), ("weight", &[4, 3]), ("bias", &[4])], &["data", "weight", "bias"]),
        fwd("Activation", &[("act_type", "tanh")], &[("data", &[2, 3])], D),
        fwd("SoftmaxOutput", &[], &[("data", &[2, 3]), ("label", &[2])], D),
        fwd("Convolution", &[("kernel", "(3,3)"), ("num_filter", "3")],
            &[("data", &[1, 2, 5, 5]), ("weight", &[3, 2, 3, 3]), ("bias", &[3])],
            &["data", "weight", "bias"]),
        fwd("Deconvolution", &[("kernel", "(3,3)"), ("num_filter", "3")],
            &[("data", &[1, 2, 3, 3]), ("weight", &[2, 3, 3, 3])], &["data", "weight"]),
        fwd("BatchNorm", &[],
            &[("data", &[2, 3, 2, 2]), ("gamma", &[3]), ("beta", &[3]), ("moving_mean", &[3]),
              ("moving_var", &[3])], PARAMS),
        fwd("_fused_BatchNormReLU", &[],
            &[("data", &[2, 3, 2, 2]), ("gamma", &[3]), ("beta", &[3]), ("moving_mean", &[3]),
              ("moving_var", &[3])], PARAMS),
        fwd("softmax", &[], &[("data", &[2, 3])], D),
        fwd("log_softmax", &[], &[("data", &[2, 3])], D),
        fwd("sum", &[("axis", "1")], &[("data", &[2, 3])], D),
        fwd("broadcast_add", &[], &[("lhs", &[2, 3]), ("rhs", &[1, 3])], &["lhs", "rhs"]),
        fwd("slice", &[("begin", "(0,1)"), ("end", "(2,3)")], &[("data", &[3, 4])], D),
        fwd("Concat", &[("dim", "1"), ("num_args", "2")], &[("a", &[2, 3]), ("b", &[2, 2])],
            &["a", "b"]),
        fwd("take", &[], &[("a", &[4, 3]), ("indices", &[2])], &["a"]),
        fwd("LeakyReLU", &[("act_type", "prelu")], &[("data", &[2, 3]), ("gamma", &[3])],
            &["data", "gamma"]),
        fwd("tile", &[("reps", "(2,1)")], &[("data", &[2, 3])], D),
        fwd("SequenceLast", &[("use_sequence_length", "true")],
            &[("data", &[3, 2, 2]), ("sequence_length", &[2])], D),
        fwd("SequenceMask", &[("use_sequence_length", "true")],
            &[("data", &[3, 2, 2]), ("sequence_length", &[2])], D),
        fwd("pick", &[], &[("data", &[2, 3]), ("index", &[2])], D),
        fwd("gather_nd", &[], &[("data", &[3, 4]), ("indices", &[2, 2])], D),
        fwd("MakeLoss", &[], &[("data", &[2, 3])], D),
        fwd("softmax_cross_entropy", &[], &[("data", &[2, 3]), ("label", &[2])], D),
        fwd("sin", &[], &[("data", &[2, 3])], D),
        fwd("SoftmaxActivation", &[], &[("data", &[2, 3])], D),
        fwd("LayerNorm", &[], &[("data", &[2, 3]), ("gamma", &[3]), ("beta", &[3])], PARAMS),
        fwd("InstanceNorm", &[], &[("data", &[2, 3, 4]), ("gamma", &[3]), ("beta", &[3])],
            PARAMS),
        fwd("GroupNorm", &[("num_groups", "2")],
            &[("data", &[2, 4, 3]), ("gamma", &[2]), ("beta", &[2])], PARAMS),
        fwd("L2Normalization", &[], &[("data", &[2, 3])], D),
        fwd("Pooling", &[("kernel", "(2,2)"), ("stride", "(2,2)"), ("pool_type", "max")],
            &[("data", &[1, 2, 4, 4])], D),
        fwd("RNN", &[("mode", "lstm"), ("state_size", "3"), ("num_layers", "1")],
            &[("data", &[2, 1, 2]), ("parameters", &[84]), ("state", &[1, 1, 3]),
              ("state_cell", &[1, 1, 3])], &["data", "parameters"]),
        fwd("ROIPooling", &[("pooled_size", "(2,2)"), ("spatial_scale", "1")],
            &[("data", &[2, 1, 4, 4]), ("rois", &[2, 5])], D),
        fwd("_contrib_ROIAlign", &[("pooled_size", "(2,2)"), ("spatial_scale", "1")],
            &[("data", &[2, 1, 4, 4]), ("rois", &[2, 5])], D),
        fwd("topk", &[("k", "2"), ("ret_typ", "value")], &[("data", &[2, 4])], D),
        fwd("_contrib_AdaptiveAvgPooling2D", &[("output_size", "(2,2)")],
            &[("data", &[1, 2, 4, 4])], D),
        fwd("_contrib_BilinearResize2D", &[("height", "5"), ("width", "4")],
            &[("data", &[1, 2, 3, 3])], D),
        fwd("Crop", &[("h_w", "(3,3)"), ("num_args", "1")], &[("data", &[1, 2, 5, 5])], D),
        fwd("LinearRegressionOutput", &[], &[("data", &[2, 3]), ("label", &[2, 3])], D),
        fwd("LogisticRegressionOutput", &[], &[("data", &[2, 3]), ("label", &[2, 3])], D),
        fwd("MAERegressionOutput", &[], &[("data", &[2, 3]), ("label", &[2, 3])], D),
    ]
}

/// Ops whose inputs are read by the shapes the forward op gave them.
fn is_backward(op: &str) -> bool {
    op.starts_with("_backward_") || matches!(op, "_broadcast_backward" | "_sum_to_like")
}

/// Backward ops whose first input may change shape and still fit: the forward output itself
/// (SoftmaxOutput's classes, MakeLoss's anything), the data masked (SequenceMask's steps), a
/// gradient broadcast from its operand (`_sum_to_like`).
const FREE_FIRST_INPUT: &[&str] = &[
    "_backward_SoftmaxOutput",
    "_backward_MakeLoss",
    "_backward_SequenceMask",
    "_sum_to_like",
];

/// Each backward op in `f`'s gradient graph: its attributes and its inputs' shapes and dtypes.
type Invocation = (String, Attrs, Inputs);

fn backward_invocations(f: &Forward) -> Vec<Invocation> {
    let vars: Vec<Symbol> = f.inputs.iter().map(|(n, _)| Symbol::var(n)).collect();
    let refs: Vec<&Symbol> = vars.iter().collect();
    let sym = Symbol::op(f.op, "f", &refs, f.attrs.clone()).unwrap();
    let mut known: HashMap<String, Vec<usize>> = f
        .inputs
        .iter()
        .map(|(n, s)| (n.to_string(), s.clone()))
        .collect();
    let outputs = infer(&sym, &known, &HashMap::new())
        .unwrap()
        .output_shapes();
    for (name, k) in head_grad_names(&sym) {
        known.insert(name, outputs[k].clone());
    }
    let wrt: Vec<String> = f.wrt.iter().map(|s| s.to_string()).collect();
    let grad = gradient(&sym, &wrt).unwrap();
    let inferred = infer(&grad, &known, &HashMap::new()).unwrap();
    let g = &inferred.graph;
    let mut found = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        let Some(def) = node.op.filter(|d| is_backward(d.name)) else {
            continue;
        };
        let inputs = g.inputs[i]
            .iter()
            .map(|&(n, k)| {
                let e = g.entry(n, k);
                (inferred.shapes[e].clone(), inferred.dtypes[e])
            })
            .collect();
        found.push((def.name.to_string(), node.attrs.clone(), inputs));
    }
    found
}

/// How an input list differs from the one the gradient pass gives.
#[derive(Clone, Copy, PartialEq)]
enum Change {
    /// One dimension one larger or one smaller.
    Resized,
    /// The last dimension dropped, or a dimension of 2 appended.
    Reranked,
    /// Another dtype.
    Retyped,
}

/// The input lists one change away from `inputs`, with the index of the input changed.
fn one_change_away(inputs: &[(Vec<usize>, DType)]) -> Vec<(usize, Change, Inputs)> {
    let mut out = Vec::new();
    for (j, (shape, dtype)) in inputs.iter().enumerate() {
        let mut with = |s: Vec<usize>, d: DType, change: Change| {
            let mut v = inputs.to_vec();
            v[j] = (s, d);
            out.push((j, change, v));
        };
        for p in 0..shape.len() {
            for size in [shape[p] + 1, shape[p].wrapping_sub(1)] {
                if size != usize::MAX {
                    let mut s = shape.clone();
                    s[p] = size;
                    with(s, *dtype, Change::Resized);
                }
            }
        }
        if !shape.is_empty() {
            with(shape[..shape.len() - 1].to_vec(), *dtype, Change::Reranked);
        }
        with([shape.as_slice(), &[2]].concat(), *dtype, Change::Reranked);
        for other in [DType::F64, DType::U8].into_iter().filter(|d| d != dtype) {
            with(shape.clone(), other, Change::Retyped);
        }
    }
    out
}

/// Every backward op, given what its gradient pass gives it, runs; given values out of range
/// in those inputs, or inputs one change of shape or dtype away, it refuses them or runs, and
/// never panics; and a gradient of another size or dtype than the forward output's is refused
/// at the call, before a kernel could read past it.
#[test]
fn backward_ops_refuse_inputs_their_forward_op_could_not_have_made() {
    let rt = runtime();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut covered = BTreeSet::new();
    let mut problems = Vec::new();
    let (mut tried, mut refused) = (0, 0);
    for f in forwards() {
        let found = backward_invocations(&f);
        assert!(!found.is_empty(), "{}'s gradient has no backward op", f.op);
        for (op, attrs, inputs) in found {
            match call(&rt, &op, &attrs, &inputs) {
                Ok(Outcome::Ran) => {}
                other => problems.push(format!(
                    "{op} as the gradient pass calls it, {inputs:?}: {other:?}"
                )),
            }
            // Values no forward op would have made: indices, labels, regions and positions
            // out of range, NaN.
            for _ in 0..20 {
                if let Err(panic) = call_with_values(&rt, &op, &attrs, &inputs, &mut rng) {
                    problems.push(panic);
                }
            }
            for (j, change, changed) in one_change_away(&inputs) {
                tried += 1;
                match call(&rt, &op, &attrs, &changed) {
                    Err(panic) => problems.push(panic),
                    Ok(Outcome::Refused(_)) => refused += 1,
                    Ok(outcome)
                        if j == 0
                            && change != Change::Reranked
                            && !FREE_FIRST_INPUT.contains(&op.as_str()) =>
                    {
                        problems.push(format!(
                            "{op} accepted an output gradient of another size or dtype, \
                             {changed:?}: {outcome:?}"
                        ))
                    }
                    Ok(_) => {}
                }
            }
            covered.insert(op);
        }
    }
    let registered: BTreeSet<String> = ops::op_names()
        .into_iter()
        .filter(|n| is_backward(n))
        .map(String::from)
        .collect();
    let missing: Vec<_> = registered.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "backward ops no case reaches: {missing:?}"
    );
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    println!(
        "{} backward ops, {tried} changed input lists, {refused} refused",
        covered.len()
    );
}

/// xorshift64: a fixed, dependency-free sequence for the random calls below.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

/// Attribute names the ops read, and values of every kind: sizes, tuples of every length,
/// negative, zero and huge numbers, non-numbers, names of modes and dtypes.
#[rustfmt::skip]
const KEYS: &[&str] = &[
    "axis", "axes", "scalar", "mode", "shape", "dtype", "keepdims", "num_args", "no_bias",
    "kernel", "stride", "pad", "dilate", "num_filter", "num_group", "num_hidden", "act_type",
    "pool_type", "global_pool", "pooling_convention", "pad_width", "constant_value", "begin",
    "end", "step", "reps", "repeats", "size", "k", "ret_typ", "is_ascend", "depth", "on_value",
    "off_value", "target_shape", "pooled_size", "spatial_scale", "sample_ratio", "block_size",
    "input_dim", "output_dim", "state_size", "num_layers", "bidirectional", "state_outputs",
    "use_sequence_length", "num_outputs", "squeeze_axis", "dim", "dim1", "dim2", "h_w", "offset",
    "center_crop", "output_size", "height", "width", "scale_height", "scale_width", "num_groups",
    "eps", "fix_gamma", "use_global_stats", "output_mean_var", "ord", "a_min", "a_max", "slope",
    "lhs_axes", "rhs_axes", "lhs_begin", "lhs_end", "rhs_begin", "rhs_end", "transpose_a",
    "transpose_b", "flatten", "multi_output", "ignore_label", "use_ignore", "normalization",
    "grad_scale", "lr", "wd", "momentum", "rescale_grad", "clip_gradient", "beta1", "beta2",
    "epsilon", "low", "high", "loc", "scale", "temperature", "start", "stop", "infer_range", "adj",
    "layout", "position_sensitive", "aligned", "align_corners", "fn", "__fwd__", "__reduce__",
    "__slice_op__",
];
/// Attributes that take a tuple (most others take a number or a name).
#[rustfmt::skip]
const TUPLE_KEYS: &[&str] = &[
    "axes", "shape", "kernel", "stride", "pad", "dilate", "pad_width", "begin", "end", "step",
    "reps", "target_shape", "pooled_size", "h_w", "offset", "output_size", "lhs_axes",
    "rhs_axes", "adj",
];
#[rustfmt::skip]
const TUPLES: &[&str] = &[
    "(1,1)", "(2,2)", "(3,3)", "(1,)", "(2,)", "(0,0)", "(1,2)", "(2,1)", "(3,3,3)", "(-1,)",
    "(-1,2)", "(4,4)", "(1,1,1)", "(0,)", "()", "[1,2]", "(1,1,1,1,1,1,1,1,1)",
];
#[rustfmt::skip]
const VALUES: &[&str] = &[
    "0", "1", "2", "3", "4", "-1", "-2", "-3", "7", "100000", "1000000000000", "nan", "inf",
    "-inf", "1e300", "-0.5", "0.5", "true", "false", "True", "abc", "", "None", "max", "sum",
    "avg", "mean", "lstm", "gru", "relu", "prelu", "valid", "full", "raise", "wrap", "clip",
    "float32", "int32", "float64", "uint8", "int64", "both", "indices", "value", "batch", "slice",
    "topk", "sin",
];

/// Every registered op, called with random inputs (up to four arrays of rank 0 to 4, sizes 0
/// to 4, every dtype, often of one shape; values with NaN, negatives and huge ones) and random
/// attributes, and with the attributes it says are required once it has said so, returns an
/// error or runs, and never panics, on the calling thread or in its kernel.
#[test]
fn random_inputs_and_attributes_never_make_an_op_panic() {
    const TRIALS: usize = 1000;
    let rt = runtime();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut problems = Vec::new();
    let mut ran = 0;
    for op in ops::op_names() {
        // Learned from the op's own errors ("attribute X is required").
        let mut required: Vec<String> = Vec::new();
        for _ in 0..TRIALS {
            // One shape and one dtype shared by the inputs, or each its own.
            const DTYPES: [DType; 5] = [DType::F32, DType::F64, DType::I32, DType::U8, DType::I64];
            let like: Vec<usize> = (0..rng.below(5)).map(|_| rng.below(5)).collect();
            let dtype = [DType::F32, DTYPES[rng.below(5)]][rng.below(2)];
            // As many inputs as the op takes, mostly.
            let count = match (rng.below(8), ops::lookup(op).unwrap().arity) {
                (0, _) => rng.below(5),
                (_, Arity::Exactly(n)) => n,
                (_, Arity::AtLeast(n)) => n + rng.below(3),
            };
            let inputs: Inputs = (0..count)
                .map(|_| match rng.below(4) {
                    0 => {
                        let rank = rng.below(5);
                        let shape = (0..rank).map(|_| rng.below(5)).collect();
                        (shape, DTYPES[rng.below(5)])
                    }
                    _ => (like.clone(), dtype),
                })
                .collect();
            let mut attrs = Attrs::new();
            let keys: Vec<String> = (0..rng.below(5))
                .map(|_| rng.pick(KEYS).to_string())
                .collect();
            for key in required.iter().chain(&keys) {
                let value = match rng.below(4) {
                    0 => rng.pick(VALUES).to_string(),
                    _ if TUPLE_KEYS.contains(&key.as_str()) => rng.pick(TUPLES).to_string(),
                    _ => rng.below(6).to_string(),
                };
                attrs = attrs.with(key, value);
            }
            if rng.below(2) == 0 {
                attrs = attrs.with("num_args", inputs.len());
            }
            match call_with_values(&rt, op, &attrs, &inputs, &mut rng) {
                Err(panic) => problems.push(panic),
                Ok(Outcome::Ran) => ran += 1,
                Ok(Outcome::Refused(e)) => {
                    if let Some(key) = e
                        .split("attribute ")
                        .nth(1)
                        .and_then(|r| r.strip_suffix(" is required"))
                    {
                        if !required.iter().any(|k| k == key) {
                            required.push(key.to_string());
                        }
                    }
                }
                Ok(Outcome::Failed(_)) => {}
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        ran > 10_000,
        "only {ran} calls ran: the inputs hardly reach the kernels"
    );
    println!("{} ops, {ran} calls ran", ops::op_names().len());
}

/// ROIPooling's backward op scatters each gradient to the position its argmax input names. A
/// position outside the plane (which no forward pass writes) is refused by name; before the
/// check, a huge one wrapped around to a position inside the plane and was added there.
#[test]
fn roi_pooling_backward_refuses_an_argmax_outside_the_plane() {
    let rt = runtime();
    let attrs = Attrs::new()
        .with("pooled_size", "(1,1)")
        .with("spatial_scale", "1");
    let arr = |v: Vec<f32>, s: &[usize]| rt.from_vec(v, s, Context::cpu(0)).unwrap();
    let (g, rois, data) = (
        arr(vec![1.0], &[1, 1, 1, 1]),
        arr(vec![0.0, 0.0, 0.0, 1.0, 1.0], &[1, 5]),
        arr(vec![0.0; 4], &[1, 1, 2, 2]),
    );
    for (at, fine) in [
        (3.0, true),
        (-1.0, true),
        (4.0, false),
        (1e30, false),
        (0.5, false),
    ] {
        let argmax = arr(vec![at], &[1, 1, 1, 1]);
        let out = ndarray_ops::invoke(
            "_backward_ROIPooling",
            &[&g, &rois, &argmax, &data],
            &attrs,
            None,
        )
        .unwrap()
        .remove(0);
        match out.to_vec::<f32>() {
            Ok(dx) => {
                assert!(fine, "argmax {at} was taken: {dx:?}");
                let mut want = vec![0.0; 4];
                if at >= 0.0 {
                    want[at as usize] = 1.0;
                }
                assert_eq!(dx, want, "argmax {at}");
            }
            Err(e) => {
                assert!(!fine, "argmax {at}: {e}");
                assert!(
                    e.to_string().contains("not a position in a 4-pixel plane"),
                    "{e}"
                );
            }
        }
    }
}
