//! Shape inference in both directions, as MXNet's: unknown dimensions (0) filled from whatever
//! knows them, inputs from outputs as well as outputs from inputs.
//!
//! The partial-shape cases of MXNet's own `test_infer_shape.py`, and a word language model as
//! Gluon exports it (`tests/data/mxnet/lm-*`, written by MXNet 1.9.1 through
//! `tools/mxnet_fixtures.py --gluon-lm`): two LSTM cells unrolled over five steps whose begin
//! states are `_zeros` of shape `(0, 24)`, the batch left for inference to take from what
//! consumes them. It must infer every entry as MXNet does from the data shape alone, bind,
//! plan at its lower bound and compute MXNet's output and gradients.

use std::collections::HashMap;
use std::sync::Arc;

mod common;

use common::{floats, largest, relative_error};
use ndarray_ops::symbol::{infer, infer_partial, Inferred};
use ndarray_ops::{ndfile, Attrs, DType, Executor, GradReq, Runtime, Symbol};
use storage::Context;

const CPU: Context = Context::cpu(0);
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mxnet");

fn var(name: &str, shape: &str) -> Symbol {
    Symbol::var_with(name, Attrs::new().with("__shape__", shape))
}

fn op(name: &str, inputs: &[&Symbol], attrs: Attrs) -> Symbol {
    Symbol::op(name, &format!("{name}_node"), inputs, attrs).unwrap()
}

fn shapes(list: &[(&str, &[usize])]) -> HashMap<String, Vec<usize>> {
    list.iter()
        .map(|(n, s)| (n.to_string(), s.to_vec()))
        .collect()
}

fn inferred(sym: &Symbol) -> Inferred {
    infer(sym, &HashMap::new(), &HashMap::new()).unwrap()
}

fn shape_of<'a>(i: &'a Inferred, name: &str) -> &'a [usize] {
    i.shape_of(name, 0).unwrap()
}

#[test]
fn elementwise_operands_fill_each_others_unknown_dimensions() {
    let (a, b) = (var("a", "(0, 10)"), var("b", "(12, 0)"));
    let i = inferred(&op("elemwise_add", &[&a, &b], Attrs::new()));
    assert_eq!(shape_of(&i, "a"), [12, 10]);
    assert_eq!(shape_of(&i, "b"), [12, 10]);
}

/// MXNet's `test_transpose_infer_shape_back` and `_mixed`: `_ones` of unknown dimensions
/// (-1, as 0) take them back through a transpose from what its output meets.
#[test]
fn transpose_passes_known_dimensions_both_ways() {
    let ones = |shape: &str, name: &str| {
        Symbol::op("_ones", name, &[], Attrs::new().with("shape", shape)).unwrap()
    };
    let known = ones("(2, 3)", "known");
    let open = ones("(-1, -1)", "open");
    let t = op("transpose", &[&open], Attrs::new());
    let i = inferred(&op("elemwise_add", &[&known, &t], Attrs::new()));
    assert_eq!(shape_of(&i, "open"), [3, 2]);
    let half = ones("(3, -1)", "half");
    let t = op("transpose", &[&half], Attrs::new());
    let i = inferred(&op(
        "elemwise_add",
        &[&ones("(2, -1)", "other"), &t],
        Attrs::new(),
    ));
    assert_eq!(shape_of(&i, "half"), [3, 2]);
    assert_eq!(shape_of(&i, "other"), [2, 3]);
    // With axes: output axis k is input axis axes[k].
    let d = var("d", "(0, 3, 0)");
    let t = op("transpose", &[&d], Attrs::new().with("axes", "(1, 0, 2)"));
    let i = inferred(&op(
        "elemwise_add",
        &[&t, &var("e", "(3, 5, 7)")],
        Attrs::new(),
    ));
    assert_eq!(shape_of(&i, "d"), [5, 3, 7]);
}

#[test]
fn fully_connected_takes_its_datas_batch_from_its_output() {
    let a = var("a", "(0, 10)");
    let (w, bias) = (Symbol::var("w"), Symbol::var("bias"));
    let fc = op(
        "FullyConnected",
        &[&a, &w, &bias],
        Attrs::new().with("num_hidden", 21),
    );
    let c = var("c", "(5, 0)");
    let i = inferred(&op("elemwise_add", &[&fc, &c], Attrs::new()));
    assert_eq!(shape_of(&i, "a"), [5, 10]);
    assert_eq!(shape_of(&i, "c"), [5, 21]);
    assert_eq!(shape_of(&i, "w"), [21, 10]);
}

#[test]
fn slice_channel_takes_its_input_from_a_piece() {
    let a = var("a", "(0, 10)");
    let attrs = Attrs::new()
        .with("num_outputs", 10)
        .with("axis", 1)
        .with("squeeze_axis", true);
    let pieces = op("SliceChannel", &[&a], attrs);
    let c = var("c", "(5,)");
    let i = inferred(&op(
        "elemwise_add",
        &[&pieces.get_output(1).unwrap(), &c],
        Attrs::new(),
    ));
    assert_eq!(shape_of(&i, "a"), [5, 10]);

    let a = var("a", "(0, 15, 0)");
    let pieces = op("SliceChannel", &[&a], Attrs::new().with("num_outputs", 3));
    let c = var("c", "(3, 5, 2)");
    let i = inferred(&op(
        "elemwise_add",
        &[&pieces.get_output(1).unwrap(), &c],
        Attrs::new(),
    ));
    assert_eq!(shape_of(&i, "a"), [3, 15, 2]);
}

#[test]
fn convolution_takes_its_datas_batch_and_size_from_its_output() {
    let a = var("a", "(0, 10, 0, 0)");
    let (w, bias) = (Symbol::var("w"), Symbol::var("bias"));
    let attrs = Attrs::new()
        .with("num_filter", 21)
        .with("kernel", "(3, 3)")
        .with("dilate", "(1, 1)")
        .with("pad", "(1, 1)");
    let conv = op("Convolution", &[&a, &w, &bias], attrs);
    let c = var("c", "(5, 21, 32, 32)");
    let i = inferred(&op("elemwise_add", &[&conv, &c], Attrs::new()));
    assert_eq!(shape_of(&i, "a"), [5, 10, 32, 32]);
    assert_eq!(shape_of(&i, "w"), [21, 10, 3, 3]);
}

#[test]
fn concat_and_its_output_fill_each_other() {
    let (a, b) = (var("a", "(0, 10)"), var("b", "(0, 5)"));
    let cat = op(
        "Concat",
        &[&a, &b],
        Attrs::new().with("num_args", 2).with("dim", 1),
    );
    let d = var("d", "(2, 0)");
    let i = inferred(&op("elemwise_add", &[&d, &cat], Attrs::new()));
    assert_eq!(shape_of(&i, "a"), [2, 10]);
    assert_eq!(shape_of(&i, "b"), [2, 5]);
    assert_eq!(shape_of(&i, "d"), [2, 15]);

    // One input's length along the axis from the output's.
    let (a, b) = (var("a", "(4, 3)"), var("b", "(4, 0)"));
    let cat = op("Concat", &[&a, &b], Attrs::new().with("num_args", 2));
    let d = var("d", "(4, 10)");
    let i = inferred(&op("elemwise_add", &[&cat, &d], Attrs::new()));
    assert_eq!(shape_of(&i, "b"), [4, 7]);
}

#[test]
fn reshape_takes_its_inputs_one_unknown_dimension_from_its_outputs_size() {
    let a = var("a", "(0, 6)");
    let r = op("Reshape", &[&a], Attrs::new().with("shape", "(-1,)"));
    let c = var("c", "(24,)");
    let i = inferred(&op("elemwise_add", &[&r, &c], Attrs::new()));
    assert_eq!(shape_of(&i, "a"), [4, 6]);
}

#[test]
fn stack_and_unary_ops_pass_shapes_back_to_their_inputs() {
    let (a, b) = (var("a", "(0, 3)"), var("b", "(0, 3)"));
    let s = op("stack", &[&a, &b], Attrs::new().with("num_args", 2));
    let t = op("tanh", &[&s], Attrs::new());
    let c = var("c", "(2, 7, 3)");
    let i = inferred(&op("elemwise_mul", &[&t, &c], Attrs::new()));
    assert_eq!(shape_of(&i, "a"), [7, 3]);
    assert_eq!(shape_of(&i, "b"), [7, 3]);
}

#[test]
fn mxnets_partial_shape_cases_leave_unknown_what_mxnet_leaves_unknown() {
    let partial = |sym: &Symbol, given: &[(&str, &[usize])]| -> Vec<Vec<usize>> {
        infer_partial(sym, &shapes(given), &HashMap::new())
            .unwrap()
            .output_shapes()
    };
    let (x, y) = (Symbol::var("x"), Symbol::var("y"));
    let dot = op("dot", &[&x, &y], Attrs::new());
    assert_eq!(
        partial(&dot, &[("x", &[0, 3, 4]), ("y", &[4, 5])]),
        [[0, 3, 5]]
    );
    let bdot = op("batch_dot", &[&x, &y], Attrs::new());
    assert_eq!(
        partial(&bdot, &[("x", &[0, 3, 4]), ("y", &[0, 4, 5])]),
        [[0, 3, 5]]
    );
    assert_eq!(
        partial(&bdot, &[("x", &[0, 3, 4]), ("y", &[0, 0, 5])]),
        [Vec::<usize>::new()]
    );
    let w = Symbol::var("w");
    let emb = op(
        "Embedding",
        &[&x, &w],
        Attrs::new().with("input_dim", 100).with("output_dim", 10),
    );
    assert_eq!(
        partial(&emb, &[("x", &[0, 5]), ("w", &[100, 10])]),
        [[0, 5, 10]]
    );
    let t = op(
        "transpose",
        &[&x],
        Attrs::new().with("axes", "(0, 3, 2, 1)"),
    );
    assert_eq!(partial(&t, &[("x", &[0, 3, 224, 224])]), [[0, 224, 224, 3]]);
    let index = Symbol::var("index");
    let pick = op("pick", &[&x, &index], Attrs::new().with("axis", 1));
    assert_eq!(
        partial(&pick, &[("x", &[0, 3, 3]), ("index", &[0, 3])]),
        [[0, 3]]
    );
    let cond = Symbol::var("cond");
    let w = op("where", &[&cond, &x, &y], Attrs::new());
    assert_eq!(
        partial(&w, &[("cond", &[0, 2]), ("x", &[0, 2]), ("y", &[0, 2])]),
        [[0, 2]]
    );
    // Nothing known: nothing inferred, and no error.
    let sin = op("sin", &[&Symbol::var("data")], Attrs::new());
    let i = infer_partial(&sin, &HashMap::new(), &HashMap::new()).unwrap();
    assert_eq!(i.output_shapes(), [Vec::<usize>::new()]);
    // `infer` itself refuses what it cannot complete, naming it.
    let err = infer(&sin, &HashMap::new(), &HashMap::new()).unwrap_err();
    assert!(err.to_string().contains("cannot infer"), "{err}");
}

#[test]
fn a_clash_found_backward_is_an_error_naming_the_node() {
    // The output says batch 5, the data says 4.
    let a = var("a", "(4, 10)");
    let (w, bias) = (Symbol::var("w"), Symbol::var("bias"));
    let fc = op(
        "FullyConnected",
        &[&a, &w, &bias],
        Attrs::new().with("num_hidden", 3),
    );
    let c = var("c", "(5, 3)");
    let err = infer(
        &op("elemwise_add", &[&fc, &c], Attrs::new()),
        &HashMap::new(),
        &HashMap::new(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("elemwise_add_node") || msg.contains("FullyConnected_node"),
        "{msg}"
    );
}

fn lm() -> Symbol {
    Symbol::load(format!("{DIR}/lm-symbol.json")).unwrap()
}

#[test]
fn gluons_lstm_language_model_infers_every_entry_as_mxnet_does_from_the_data_shape() {
    let sym = lm();
    let zeros = sym.to_json().matches("\"_zeros\"").count();
    assert_eq!(zeros, 4, "the graph's begin states");
    let i = infer(&sym, &shapes(&[("data", &[5, 4])]), &HashMap::new()).unwrap();
    let text = std::fs::read_to_string(format!("{DIR}/lm-shapes.json")).unwrap();
    let mxnet: serde_json::Value = serde_json::from_str(&text).unwrap();
    let outputs = mxnet["outputs"].as_object().unwrap();
    assert!(outputs.len() > 150);
    for (key, want) in outputs {
        let want: Vec<usize> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let (name, k) = match key.rsplit_once("_output") {
            Some((name, "")) => (name, 0),
            Some((name, k)) => (name, k.parse().unwrap()),
            None => (key.as_str(), 0),
        };
        assert_eq!(i.shape_of(name, k), Some(&want[..]), "{key}");
    }
}

#[test]
fn gluons_lstm_language_model_binds_from_its_data_shape_and_computes_mxnets_results() {
    let rt: Arc<Runtime> = common::threaded_runtime(0);
    let ck = ndfile::load_checkpoint(&format!("{DIR}/lm"), 0, &rt, CPU).unwrap();
    let expected = ndfile::load(format!("{DIR}/lm-expected.nd"), &rt, CPU)
        .unwrap()
        .into_named()
        .unwrap();
    let req: HashMap<String, GradReq> = ck
        .symbol
        .list_arguments()
        .into_iter()
        .filter(|n| n != "data")
        .map(|n| (n, GradReq::Write))
        .collect();
    let exec =
        Executor::simple_bind_grad(&rt, CPU, &ck.symbol, &shapes(&[("data", &[5, 4])]), &req)
            .unwrap();
    let mem = exec.memory_report();
    assert_eq!(mem.planned_bytes, mem.allocated_bytes);
    assert!(mem.planned_bytes <= mem.lower_bound_bytes + 64, "{mem:?}");
    exec.copy_params_from(&ck.arg_params, &ck.aux_params, false)
        .unwrap();
    expected["data"]
        .copy_into(&exec.arg_dict()["data"])
        .unwrap();
    exec.forward(false).unwrap();
    let out = &exec.outputs()[0];
    assert_eq!(out.shape(), [5, 4, 50]);
    assert_eq!(out.dtype(), DType::F32);
    let (err, at) = relative_error(&floats(out), &floats(&expected["infer:output"]), 1e-12);
    assert!(err < 1e-5, "output off by {err} relative at {at}");
    exec.backward_with(&[expected["head_grad"].clone()])
        .unwrap();
    let grads = exec.grad_dict();
    let mut checked = 0;
    let signal = expected
        .iter()
        .filter(|(k, _)| k.starts_with("grad:"))
        .fold(0f64, |m, (_, v)| m.max(largest(&floats(v))));
    for (key, want) in &expected {
        let Some(name) = key.strip_prefix("grad:") else {
            continue;
        };
        let got = floats(&grads[name]);
        let worst = got
            .iter()
            .zip(floats(want))
            .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= 1e-5 * signal,
            "{name}: off by {worst} (largest gradient {signal})"
        );
        checked += 1;
    }
    assert_eq!(checked, req.len());
}

/// Dtypes are inferred without shapes, as MXNet's `infer_type` does: an op's outputs take its
/// `dtype` attribute, else its first input's dtype; where shapes are known the ops' own rules
/// decide.
#[test]
fn dtypes_are_inferred_without_shapes() {
    let x = Symbol::var("x");
    let relu = Symbol::op("relu", "r", &[&x], Attrs::new()).unwrap();
    let cast = Symbol::op("Cast", "c", &[&relu], Attrs::new().with("dtype", "int32")).unwrap();
    let both = Symbol::group(&[relu, cast]);
    let dtypes = HashMap::from([("x".to_string(), DType::F64)]);
    let i = infer_partial(&both, &HashMap::new(), &dtypes).unwrap();
    assert_eq!(i.output_dtypes(), [DType::F64, DType::I32]);
    let i = infer_partial(&both, &shapes(&[("x", &[2, 3])]), &dtypes).unwrap();
    assert_eq!(i.output_dtypes(), [DType::F64, DType::I32]);
    assert_eq!(i.output_shapes(), [vec![2, 3], vec![2, 3]]);
}
