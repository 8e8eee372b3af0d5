//! Symbols: every real MXNet model loads, infers shapes identical to MXNet's own (entry by
//! entry), round-trips through JSON; bad files are errors naming the problem, never panics.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;

use ndarray_ops::symbol::infer;
use ndarray_ops::{Attrs, DType, Executor, NdError, Runtime, Symbol};
use storage::Context;

fn graphs() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../graphs"))
}

const MODELS: [&str; 5] = ["mlp", "mobilenet1.0", "resnet18_v1", "resnet50_v1", "vgg16"];

fn load(model: &str) -> (Symbol, HashMap<String, Vec<usize>>) {
    let text = std::fs::read_to_string(graphs().join(format!("{model}-symbol.json"))).unwrap();
    let shapes: HashMap<String, Vec<usize>> = serde_json::from_str(
        &std::fs::read_to_string(graphs().join(format!("{model}-shapes.json"))).unwrap(),
    )
    .unwrap();
    (
        Symbol::from_json(&text).unwrap_or_else(|e| panic!("{model}: {e}")),
        shapes,
    )
}

#[test]
fn real_models_infer_the_same_shapes_as_mxnet() {
    for model in MODELS {
        let (sym, shapes) = load(model);
        let inf = infer(&sym, &shapes, &HashMap::new()).unwrap_or_else(|e| panic!("{model}: {e}"));
        let classes = if model == "mlp" { 10 } else { 1000 };
        assert_eq!(inf.output_shapes(), vec![vec![32, classes]], "{model}");
        // MXNet's dump of the same graph at batch 32 lists every entry's shape by entry id.
        let bound: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(graphs().join(format!("{model}-inference-b32-bound.json")))
                .unwrap(),
        )
        .unwrap();
        let theirs = bound["entry_shapes"].as_object().unwrap();
        assert_eq!(theirs.len(), inf.shapes.len(), "{model}: entry count");
        for (id, shape) in theirs {
            let want: Vec<usize> = shape
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let id: usize = id.parse().unwrap();
            assert_eq!(inf.shapes[id], want, "{model}: entry {id}");
        }
        // Node order is MXNet's too.
        let names: Vec<&str> = bound["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap())
            .collect();
        let ours: Vec<&str> = inf.graph.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(ours, names, "{model}: node order");
    }
}

#[test]
fn real_models_round_trip_through_json() {
    for model in MODELS {
        let text = std::fs::read_to_string(graphs().join(format!("{model}-symbol.json"))).unwrap();
        let original: serde_json::Value = serde_json::from_str(&text).unwrap();
        let sym = Symbol::from_json(&text).unwrap();
        let saved = sym.to_json();
        let again = Symbol::from_json(&saved).unwrap();
        assert_eq!(
            again.to_json(),
            saved,
            "{model}: load -> save -> load changed the graph"
        );
        let ours: serde_json::Value = serde_json::from_str(&saved).unwrap();
        for key in ["arg_nodes", "node_row_ptr", "heads"] {
            assert_eq!(ours[key], original[key], "{model}: {key}");
        }
        let (a, b) = (
            ours["nodes"].as_array().unwrap(),
            original["nodes"].as_array().unwrap(),
        );
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert_eq!(
                (&x["op"], &x["name"], &x["inputs"]),
                (&y["op"], &y["name"], &y["inputs"]),
                "{model}"
            );
            let attrs =
                |v: &serde_json::Value| v.get("attrs").cloned().unwrap_or(serde_json::json!({}));
            assert_eq!(attrs(x), attrs(y), "{model}: attrs of {}", x["name"]);
        }
    }
}

#[test]
fn arguments_outputs_and_auxiliary_states() {
    let (sym, _) = load("resnet18_v1");
    let aux = sym.list_auxiliary_states();
    assert_eq!(aux.len(), 40);
    assert!(aux
        .iter()
        .all(|a| a.ends_with("running_mean") || a.ends_with("running_var")));
    let args = sym.list_arguments();
    assert_eq!(args[0], "data");
    assert_eq!(args.len() + aux.len(), 103);
    assert_eq!(sym.list_outputs(), vec!["resnetv10_dense0_fwd_output"]);
    let internals = sym.get_internals();
    assert!(internals
        .list_outputs()
        .contains(&"resnetv10_pool0_fwd_output".to_string()));
    assert!(sym.get_output(1).is_err());
}

#[test]
fn graphs_built_in_code_match_loaded_ones_and_compose() {
    // The MLP file, built in code.
    let h = common::mlp_in_code();
    let (loaded, shapes) = load("mlp");
    assert_eq!(h.list_arguments(), loaded.list_arguments());
    let (a, b) = (
        infer(&h, &shapes, &HashMap::new()).unwrap(),
        infer(&loaded, &shapes, &HashMap::new()).unwrap(),
    );
    assert_eq!(a.shapes, b.shapes);
    // Composition: feed the MLP from a Flatten of an image input.
    let img = Symbol::var("img");
    let flat = Symbol::op("Flatten", "flat", &[&img], Attrs::new()).unwrap();
    let composed = h
        .compose(&HashMap::from([("data".to_string(), flat)]))
        .unwrap();
    assert_eq!(composed.list_arguments()[0], "img");
    let inf = infer(
        &composed,
        &HashMap::from([("img".into(), vec![8, 28, 28])]),
        &HashMap::new(),
    )
    .unwrap();
    assert_eq!(inf.output_shapes(), vec![vec![8, 10]]);
    assert!(infer(&h, &HashMap::new(), &HashMap::new())
        .unwrap_err()
        .to_string()
        .contains("'data'"));
}

fn err(text: &str) -> String {
    match Symbol::from_json(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn malformed_files_are_clear_errors() {
    let var = r#"{"op": "null", "name": "x", "inputs": []}"#;
    let cases = [
        ("not json", "not valid JSON"),
        ("{}", "\"nodes\""),
        (&format!(r#"{{"nodes": [{var}], "heads": []}}"#), "heads"),
        (
            &format!(
                r#"{{"nodes": [{var}, {{"op": "Frobnicate", "name": "f", "inputs": [[0, 0, 0]]}}], "heads": [[1, 0, 0]]}}"#
            ),
            "node 1 ('f') uses op 'Frobnicate'",
        ),
        (
            &format!(
                r#"{{"nodes": [{var}, {{"op": "relu", "name": "r", "inputs": [[2, 0, 0]]}}, {{"op": "relu", "name": "s", "inputs": [[1, 0, 0]]}}], "heads": [[2, 0, 0]]}}"#
            ),
            "does not come before it",
        ),
        (
            &format!(
                r#"{{"nodes": [{var}, {{"op": "relu", "name": "r", "inputs": [[0, 3, 0]]}}], "heads": [[1, 0, 0]]}}"#
            ),
            "uses output 3",
        ),
        (
            &format!(r#"{{"nodes": [{var}], "heads": [[5, 0, 0]]}}"#),
            "head 0 refers to node 5",
        ),
        (
            &format!(r#"{{"nodes": [{var}], "heads": [["a", 0]]}}"#),
            "head 0",
        ),
        (
            &format!(r#"{{"nodes": [{var}], "node_row_ptr": [0, 7], "heads": [[0, 0, 0]]}}"#),
            "node_row_ptr",
        ),
        (
            &format!(
                r#"{{"nodes": [{var}, {{"op": "Activation", "name": "a", "inputs": []}}], "heads": [[1, 0, 0]]}}"#
            ),
            "node 'a' has 0 inputs",
        ),
    ];
    for (text, needle) in cases {
        let e = err(text);
        assert!(e.contains(needle), "{text}: {e}");
    }
    // A node_row_ptr that disagrees with an op's output count (Dropout has a hidden mask output).
    let bn = r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}, {"op": "Dropout", "name": "d", "inputs": [[0, 0, 0]]}], "node_row_ptr": [0, 1, 2], "heads": [[1, 0, 0]]}"#;
    assert!(err(bn).contains("node_row_ptr"));
    let bad_ptr = r#"{"nodes": [{"op": "null", "name": "x", "inputs": []}, {"op": "Dropout", "name": "d", "inputs": [[0, 0, 0]]}, {"op": "relu", "name": "r", "inputs": [[1, 0, 0]]}], "node_row_ptr": [0, 1, 2, 3], "heads": [[2, 0, 0]]}"#;
    assert!(err(bad_ptr).contains("node 2 ('r'"));
    // Deep nesting is refused by the parser, not by the stack.
    let deep = "[".repeat(100_000);
    assert!(err(&deep).contains("not valid JSON"));
}

/// `fc`: 4 outputs of the input `x` through the weight `w`, no bias.
fn fully_connected_4(w: &Symbol) -> Symbol {
    let x = Symbol::var("x");
    Symbol::op(
        "FullyConnected",
        "fc",
        &[&x, w],
        Attrs::new().with("num_hidden", 4).with("no_bias", true),
    )
    .unwrap()
}

#[test]
fn shape_clashes_and_huge_shapes_are_errors() {
    let w = Symbol::var_with("w", Attrs::new().with("__shape__", "(4, 5)"));
    let fc = fully_connected_4(&w);
    let e = infer(
        &fc,
        &HashMap::from([("x".into(), vec![2, 3])]),
        &HashMap::new(),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, NdError::Shape { .. })
            && msg.contains("'fc'")
            && msg.contains("'w'")
            && msg.contains("[4, 5]")
            && msg.contains("[4, 3]"),
        "{msg}"
    );
    let e = infer(
        &fc,
        &HashMap::from([("x".into(), vec![1 << 40, 1 << 40])]),
        &HashMap::new(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("2^48"), "{e}");
    let huge = Symbol::var_with(
        "h",
        Attrs::new().with("__shape__", "(99999999999999, 99999999999999, 9999999)"),
    );
    let r = Symbol::op("relu", "r", &[&huge], Attrs::new()).unwrap();
    assert!(infer(&r, &HashMap::new(), &HashMap::new()).is_err());
    // Pooling keeps positions within a plane in 32 bits: a plane of 2^32 elements is refused.
    let x = Symbol::var("x");
    let pool = Attrs::new().with("kernel", "(2, 2)");
    let p = Symbol::op("Pooling", "p", &[&x], pool).unwrap();
    let shapes = HashMap::from([("x".into(), vec![1, 1, 1 << 16, 1 << 16])]);
    let e = infer(&p, &shapes, &HashMap::new()).unwrap_err().to_string();
    assert!(e.contains("'p'") && e.contains("planes"), "{e}");
    let shapes = HashMap::from([("x".into(), vec![1, 1, 1 << 16, (1 << 16) - 1])]);
    assert!(infer(&p, &shapes, &HashMap::new()).is_ok());
}

#[test]
fn misspelt_inputs_and_unknown_dimensions_are_named() {
    let fc = fully_connected_4(&Symbol::var("fc_weight"));
    let refused = |shapes: &[(&str, Vec<usize>)], dtypes: &[(&str, DType)]| {
        let shapes = shapes
            .iter()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect();
        let dtypes = dtypes.iter().map(|(n, d)| (n.to_string(), *d)).collect();
        infer(&fc, &shapes, &dtypes).unwrap_err().to_string()
    };
    // A shape for a name the graph does not have is refused, listing the names it does have.
    let e = refused(&[("xx", vec![2, 3])], &[]);
    assert!(
        e.contains("'xx'") && e.contains("'x'") && e.contains("'fc_weight'"),
        "{e}"
    );
    let e = refused(&[("x", vec![2, 3])], &[("w", DType::F64)]);
    assert!(e.contains("'w'"), "{e}");
    // A 0 dimension is unknown (MXNet's convention); the error says so.
    let e = refused(&[("x", vec![0, 3])], &[]);
    assert!(e.contains("0 dimension") && e.contains("'x' [0, 3]"), "{e}");
}

/// A small deterministic generator for the fuzzer.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn mutated_files_and_random_bytes_never_panic() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let started = std::time::Instant::now();
    let (mut accepted, mut tried) = (0, 0);
    for model in ["mlp", "resnet18_v1", "vgg16"] {
        let text = std::fs::read_to_string(graphs().join(format!("{model}-symbol.json"))).unwrap();
        let shapes: HashMap<String, Vec<usize>> = serde_json::from_str(
            &std::fs::read_to_string(graphs().join(format!("{model}-shapes.json"))).unwrap(),
        )
        .unwrap();
        let bytes = text.as_bytes();
        for _ in 0..300 {
            let mut m = bytes.to_vec();
            for _ in 0..(rng.next() % 4 + 1) {
                let at = (rng.next() as usize) % m.len();
                match rng.next() % 4 {
                    0 => m[at] = b"0123456789[]{},:\"-e. "[rng.next() as usize % 21],
                    1 => {
                        m.remove(at);
                    }
                    2 => m.insert(at, b"9"[0]),
                    _ => {
                        // Grow a number into a huge one.
                        for _ in 0..12 {
                            m.insert(at, b'9');
                        }
                    }
                }
            }
            let Ok(s) = String::from_utf8(m) else {
                continue;
            };
            tried += 1;
            let outcome = std::panic::catch_unwind(|| match Symbol::from_json(&s) {
                Ok(sym) => {
                    let _ = infer(&sym, &shapes, &HashMap::new());
                    true
                }
                Err(_) => false,
            });
            accepted +=
                usize::from(outcome.expect("a mutated file made the loader or inference panic"));
        }
    }
    for _ in 0..300 {
        let len = (rng.next() % 200) as usize;
        let junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let s = String::from_utf8_lossy(&junk).into_owned();
        assert!(std::panic::catch_unwind(|| Symbol::from_json(&s).is_err())
            .expect("random bytes made the loader panic"));
    }
    assert!(
        started.elapsed().as_secs() < 120,
        "fuzzing took too long: a hang?"
    );
    println!("{accepted} of {tried} mutated files still loaded");
}

/// A graph saved by an older MXNet names its ops by their older names (`_Plus`, `_MulScalar`,
/// `Softmax`); they load as today's ops and are written back under today's names.
#[test]
fn older_op_names_load_as_todays_ops() {
    let text = r#"{
      "nodes": [
        {"op": "null", "name": "a", "inputs": []},
        {"op": "null", "name": "b", "inputs": []},
        {"op": "_Plus", "name": "sum", "inputs": [[0, 0, 0], [1, 0, 0]]},
        {"op": "_MulScalar", "name": "twice", "attrs": {"scalar": "2"}, "inputs": [[2, 0, 0]]},
        {"op": "null", "name": "label", "inputs": []},
        {"op": "Softmax", "name": "prob", "inputs": [[3, 0, 0], [4, 0, 0]]}
      ],
      "arg_nodes": [0, 1, 4],
      "heads": [[5, 0, 0]]
    }"#;
    let sym = Symbol::from_json(text).unwrap();
    let saved = sym.to_json();
    for (old, new) in [
        ("_Plus", "elemwise_add"),
        ("_MulScalar", "_mul_scalar"),
        ("\"Softmax\"", "SoftmaxOutput"),
    ] {
        assert!(
            !saved.contains(old) && saved.contains(new),
            "{old}: {saved}"
        );
    }
    let rt = Runtime::with_engine(engine::EngineKind::Naive);
    let shapes: HashMap<String, Vec<usize>> =
        [("a", vec![2, 3]), ("b", vec![2, 3]), ("label", vec![2])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
    let exec = Executor::simple_bind(&rt, Context::cpu(0), &sym, &shapes).unwrap();
    exec.forward(false).unwrap();
    let p = exec.outputs()[0].to_vec::<f32>().unwrap();
    // Zero inputs: a uniform distribution over the three classes.
    assert!(p.iter().all(|v| (v - 1.0 / 3.0).abs() < 1e-6), "{p:?}");
}

/// Parameter shapes follow from the data's for Deconvolution and bilinear UpSampling (a
/// depthwise Deconvolution: kernel 2s - s % 2), as MXNet's files leave them out.
#[test]
fn deconvolution_and_bilinear_upsampling_weights_follow_from_the_data() {
    let rt = Runtime::with_engine(engine::EngineKind::Naive);
    let data = Symbol::var("data");
    let up = Symbol::op(
        "UpSampling",
        "up",
        &[&data, &Symbol::var("up_weight")],
        Attrs::new()
            .with("scale", 3)
            .with("num_filter", 4)
            .with("sample_type", "bilinear")
            .with("num_args", 2),
    )
    .unwrap();
    let deconv = Symbol::op(
        "Deconvolution",
        "deconv",
        &[
            &up,
            &Symbol::var("deconv_weight"),
            &Symbol::var("deconv_bias"),
        ],
        Attrs::new()
            .with("kernel", "(2, 2)")
            .with("stride", "(2, 2)")
            .with("num_filter", 6)
            .with("num_group", 2)
            .with("no_bias", "False"),
    )
    .unwrap();
    let shapes = HashMap::from([("data".to_string(), vec![2, 4, 5, 5])]);
    let exec = Executor::simple_bind(&rt, Context::cpu(0), &deconv, &shapes).unwrap();
    let args = exec.arg_dict();
    assert_eq!(args["up_weight"].shape(), [4, 1, 5, 5]);
    assert_eq!(args["deconv_weight"].shape(), [4, 3, 2, 2]);
    assert_eq!(args["deconv_bias"].shape(), [6]);
    assert_eq!(exec.outputs()[0].shape(), [2, 6, 30, 30]);
}

/// Variables given no dtype take their layer's data's, as MXNet's type inference gives them
/// (`float64` data binds `float64` weights and biases, through a chain of layers); indices pass
/// nothing on, and what stays unknown is float32.
#[test]
fn weights_take_the_dtype_of_their_layer_s_data() {
    let data = Symbol::var("data");
    let layer = |x: &Symbol, name: &str, n: usize| {
        let (w, b) = (
            Symbol::var(&format!("{name}_weight")),
            Symbol::var(&format!("{name}_bias")),
        );
        let attrs = Attrs::new().with("num_hidden", n);
        Symbol::op("FullyConnected", name, &[x, &w, &b], attrs).unwrap()
    };
    let fc2 = layer(&layer(&data, "fc1", 3), "fc2", 2);
    let rows = Symbol::op(
        "take",
        "rows",
        &[&Symbol::var("table"), &Symbol::var("idx")],
        Attrs::new(),
    )
    .unwrap();
    let shapes = HashMap::from([
        ("data".to_string(), vec![4, 5]),
        ("table".to_string(), vec![6, 2]),
        ("idx".to_string(), vec![3]),
    ]);
    let dtypes = HashMap::from([
        ("data".to_string(), DType::F64),
        ("idx".to_string(), DType::I64),
    ]);
    let g = Symbol::group(&[fc2, rows]);
    let inf = infer(&g, &shapes, &dtypes).unwrap();
    let dtype_of = |name: &str| {
        let n = inf.graph.nodes.iter().position(|n| n.name == name).unwrap();
        inf.dtypes[inf.graph.entry(n, 0)]
    };
    for name in ["fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "fc2"] {
        assert_eq!(dtype_of(name), DType::F64, "{name}");
    }
    assert_eq!(dtype_of("table"), DType::F32);
    assert_eq!(dtype_of("idx"), DType::I64);
}
