//! Operator fusion: every shared model bound with fusion computes what it computes without,
//! bit for bit (the fused ops run the same arithmetic), in a training step (outputs, every
//! gradient, BatchNorm's moving statistics) and in inference (forward with and without
//! training mode, in an executor bound without gradients); the fused graph has fewer nodes and
//! plans no more memory; fused nodes name what they replace.

mod common;

use std::collections::HashMap;

use ndarray_ops::symbol::fuse::{FusionReport, FUSED_ATTR};
use ndarray_ops::{BindOptions, Executor, GradReq};
use ndarray_ops::{Runtime, Symbol};
use storage::Context;

use common::{sorted, watchdog};

/// What a run gave: every output, gradient and auxiliary state by name; the plan's lower
/// bound; the graph's node count; what was fused.
struct Run {
    values: Vec<(String, Vec<f32>)>,
    lower_bound: u64,
    nodes: usize,
    report: FusionReport,
    exec_symbol: Symbol,
}

/// Binds `sym` (with a gradient for every argument but the data and label when `train`), fills
/// arguments and auxiliary states from a fixed pattern, runs a training step (`train`) or two
/// forward passes (inference, then training mode in the same inference bind).
fn run(sym: &Symbol, data: &[usize], train: bool, fusion: bool) -> Run {
    let rt = Runtime::with_engine(engine::EngineKind::ThreadedPerDevice);
    rt.seed(7).unwrap();
    let shapes: HashMap<String, Vec<usize>> = [("data".to_string(), data.to_vec())].into();
    let grad_req: HashMap<String, GradReq> = match train {
        true => sym
            .list_arguments()
            .into_iter()
            .filter(|a| a != "data" && !a.ends_with("label"))
            .map(|a| (a, GradReq::Write))
            .collect(),
        false => HashMap::new(),
    };
    let opts = BindOptions {
        grad_req,
        fusion: Some(fusion),
        ..BindOptions::default()
    };
    let exec =
        Executor::bind_with_options(&rt, Context::cpu(0), sym, &shapes, HashMap::new(), &opts)
            .unwrap();
    // The arguments keep their order (head gradients follow them in a training graph).
    let args = sym.list_arguments();
    assert_eq!(exec.symbol().list_arguments()[..args.len()], args[..]);
    let mut names: Vec<(String, ndarray_ops::NDArray)> = exec.arg_dict().into_iter().collect();
    names.extend(exec.aux_dict());
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (k, (name, a)) in names.iter().enumerate() {
        let n = a.size();
        let v: Vec<f32> = match name.ends_with("label") || name == "data" {
            // Labels, and data that may be token ids: small whole numbers.
            true => (0..n).map(|i| ((i * 7 + k) % 10) as f32).collect(),
            false if name.ends_with("_var") => {
                (0..n).map(|i| 0.5 + (i % 5) as f32 * 0.25).collect()
            }
            false => (0..n)
                .map(|i| (((i * 2654435761 + k * 97) % 2001) as f32 / 1000.0 - 1.0) * 0.3)
                .collect(),
        };
        rt.from_vec(v, a.shape(), Context::cpu(0))
            .unwrap()
            .copy_into(a)
            .unwrap();
    }
    let outputs = |tag: &str| -> Vec<(String, Vec<f32>)> {
        exec.outputs()
            .iter()
            .enumerate()
            .map(|(i, o)| (format!("{tag} output{i}"), o.to_vec::<f32>().unwrap()))
            .collect()
    };
    let mut values = vec![];
    if train {
        exec.forward(true).unwrap();
        exec.backward().unwrap();
        values.extend(outputs("training"));
        values.extend(
            sorted(exec.grad_dict())
                .into_iter()
                .map(|(k, v)| (format!("grad:{k}"), v)),
        );
    } else {
        exec.forward(false).unwrap();
        values.extend(outputs("inference"));
        exec.forward(true).unwrap();
        values.extend(outputs("training-mode"));
    }
    values.extend(
        sorted(exec.aux_dict())
            .into_iter()
            .map(|(k, v)| (format!("aux:{k}"), v)),
    );
    // The bound graph's listing names what each fused node replaces.
    let listing = exec.debug_str();
    for (_, names) in &exec.fusion_report().fused {
        assert!(
            listing.contains(&format!("(fuses {})", names.join(","))),
            "{listing}"
        );
    }
    Run {
        values,
        lower_bound: exec.memory_report().lower_bound_bytes,
        nodes: exec.symbol().indexed().nodes.len(),
        report: exec.fusion_report().clone(),
        exec_symbol: exec.symbol().clone(),
    }
}

fn model(file: &str) -> Symbol {
    let path = match file.starts_with("tests/") {
        true => format!("{}/{file}", env!("CARGO_MANIFEST_DIR")),
        false => format!("{}/../graphs/{file}", env!("CARGO_MANIFEST_DIR")),
    };
    Symbol::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Fused and unfused runs agree bit for bit, in training and in inference; where the pass fused
/// something, the graph lost nodes and the plan needs no more memory. With `bn` (a model with
/// BatchNorm before its ReLUs) BatchNorm+ReLU is fused in training, convolutions in inference.
fn check(file: &'static str, data: Vec<usize>, bn: bool) {
    watchdog(file, 300, move || {
        let sym = model(file);
        for train in [true, false] {
            let plain = run(&sym, &data, train, false);
            let fused = run(&sym, &data, train, true);
            assert!(plain.report.fused.is_empty());
            assert_eq!(fused.values.len(), plain.values.len());
            for ((name, g), (_, w)) in fused.values.iter().zip(&plain.values) {
                let same = g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{file} (train {train}): {name} differs with fusion");
            }
            let count = |op: &str| fused.report.fused.iter().filter(|(o, _)| *o == op).count();
            if bn {
                // Inference folds every convolution that only a BatchNorm reads (with a bias
                // or without); training none (BatchNorm's gradient reads the convolution's
                // output), and fuses BatchNorm with ReLU.
                let folds = match train {
                    true => 0,
                    false => conv_bn_pairs(&sym),
                };
                assert_eq!(
                    count("_fused_Convolution") + count("_fused_ConvolutionBias"),
                    folds,
                    "{file}: {:?}",
                    fused.report
                );
                if train {
                    assert!(
                        count("_fused_BatchNormReLU") > 0,
                        "{file}: {:?}",
                        fused.report
                    );
                }
            }
            if !fused.report.fused.is_empty() {
                assert!(
                    fused.nodes < plain.nodes,
                    "{file}: {} nodes fused, {} not",
                    fused.nodes,
                    plain.nodes
                );
                assert!(
                    fused.lower_bound <= plain.lower_bound,
                    "{file} (train {train}): the fused graph needs {} bytes, the unfused {}",
                    fused.lower_bound,
                    plain.lower_bound
                );
                // Every fused node names the nodes it replaced (a fused BatchNorm's backward
                // node carries its attributes, and so the names, too).
                let g = fused.exec_symbol.indexed();
                let fused_nodes: Vec<_> = g
                    .nodes
                    .iter()
                    .filter(|n| n.op_name().starts_with("_fused_"))
                    .collect();
                assert_eq!(fused_nodes.len(), fused.report.fused.len());
                for n in fused_nodes {
                    let names = n.attrs.get(FUSED_ATTR).unwrap_or_default();
                    assert!(names.split(',').count() >= 2, "{}: {names:?}", n.name);
                }
            }
        }
    });
}

/// Convolutions whose output only a BatchNorm reads.
fn conv_bn_pairs(sym: &Symbol) -> usize {
    let g = sym.indexed();
    let mut readers = vec![vec![]; g.nodes.len()];
    for (i, ins) in g.inputs.iter().enumerate() {
        for &(src, _) in ins {
            readers[src].push(i);
        }
    }
    (0..g.nodes.len())
        .filter(|&c| g.nodes[c].op_name() == "Convolution")
        .filter(|&c| matches!(readers[c][..], [r] if g.nodes[r].op_name() == "BatchNorm"))
        .count()
}

/// Convolutions followed by BatchNorm down every float32 path, the epilogue normalizing each
/// GEMM tile as it is finished: Winograd (3x3, stride 1, with a bias, then ReLU), the input as
/// the column matrix (1x1, with a bias, then ReLU), the implicit GEMM (3x3 of stride 2; a
/// grouped 3x3, whose groups take their own filters' constants), and a depthwise one, which
/// normalizes in a second pass; bit for bit as unfused in inference (both modes of forward),
/// with every convolution folded.
#[test]
fn every_convolution_path_folds_its_batchnorm() {
    use ndarray_ops::Attrs;
    fn conv_bn(x: &Symbol, name: &str, conv: Attrs, relu: bool) -> Symbol {
        let op = |op: &str, n: &str, ins: &[&Symbol], a: Attrs| Symbol::op(op, n, ins, a).unwrap();
        let w = Symbol::var(&format!("{name}_weight"));
        let mut ins = vec![x, &w];
        let b = Symbol::var(&format!("{name}_bias"));
        if conv.get("no_bias") == Some("false") {
            ins.push(&b);
        }
        let c = op("Convolution", name, &ins, conv.with("num_filter", 16));
        let p: Vec<Symbol> = ["gamma", "beta", "moving_mean", "moving_var"]
            .iter()
            .map(|k| Symbol::var(&format!("{name}_bn_{k}")))
            .collect();
        let bn_attrs = Attrs::new().with("fix_gamma", false);
        let bn = op(
            "BatchNorm",
            &format!("{name}_bn"),
            &[&c, &p[0], &p[1], &p[2], &p[3]],
            bn_attrs,
        );
        match relu {
            true => op(
                "Activation",
                &format!("{name}_relu"),
                &[&bn],
                Attrs::new().with("act_type", "relu"),
            ),
            false => bn,
        }
    }
    let net = || {
        let k3 = |s: usize| {
            Attrs::new()
                .with("kernel", "(3, 3)")
                .with("pad", "(1, 1)")
                .with("stride", format!("({s}, {s})"))
        };
        let x = Symbol::var("data");
        let x = conv_bn(&x, "winograd", k3(1).with("no_bias", "false"), true);
        let x = conv_bn(
            &x,
            "columns",
            Attrs::new()
                .with("kernel", "(1, 1)")
                .with("no_bias", "false"),
            true,
        );
        let x = conv_bn(&x, "strided", k3(2).with("no_bias", "true"), true);
        let x = conv_bn(
            &x,
            "grouped",
            k3(1).with("num_group", 2).with("no_bias", "false"),
            false,
        );
        conv_bn(
            &x,
            "depthwise",
            k3(1).with("num_group", 16).with("no_bias", "true"),
            true,
        )
    };
    watchdog("conv paths", 300, move || {
        let sym = net();
        let plain = run(&sym, &[2, 16, 20, 20], false, false);
        let fused = run(&sym, &[2, 16, 20, 20], false, true);
        for ((name, g), (_, w)) in fused.values.iter().zip(&plain.values) {
            let same = g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{name} differs with fusion");
        }
        let folds = fused.report.fused.iter();
        let folds = folds.filter(|(op, _)| op.starts_with("_fused_Convolution"));
        assert_eq!(folds.count(), 5, "{:?}", fused.report);
    });
}

#[test]
fn resnet18_fused_equals_unfused() {
    check("resnet18_v1-symbol.json", vec![2, 3, 32, 32], true);
}

#[test]
fn resnet50_fused_equals_unfused() {
    check("resnet50_v1-symbol.json", vec![2, 3, 32, 32], true);
}

#[test]
fn mobilenet_fused_equals_unfused() {
    check("mobilenet1.0-symbol.json", vec![2, 3, 32, 32], true);
}

/// VGG-16 and the MLP have no BatchNorm: only elementwise chains to fuse.
#[test]
fn vgg16_fused_equals_unfused() {
    check("vgg16-symbol.json", vec![1, 3, 32, 32], false);
}

#[test]
fn mlp_fused_equals_unfused() {
    check("mlp-symbol.json", vec![4, 784], false);
}

/// A Gluon LSTM language model unrolled from elementwise ops: its gates (sigmoid, tanh, products
/// and sums) fuse into elementwise programs, forward and backward, with the same bits.
#[test]
fn lstm_language_model_fused_equals_unfused() {
    let file = "tests/data/mxnet/lm-symbol.json";
    check(file, vec![5, 4], false);
    let fused = run(&model(file), &[5, 4], true, true);
    assert!(
        fused
            .report
            .fused
            .iter()
            .any(|(op, names)| *op == "_fused_elemwise" && names.len() >= 3),
        "{:?}",
        fused.report
    );
}

#[test]
fn fusion_setting_is_read_from_the_environment() {
    use ndarray_ops::symbol::fuse::enabled_from_env;
    // One test sets the variable, so the reads do not race with another test's.
    for (value, on) in [
        ("0", false),
        ("off", false),
        ("FALSE", false),
        ("1", true),
        ("on", true),
    ] {
        std::env::set_var("MXRS_FUSION", value);
        assert_eq!(enabled_from_env().unwrap(), on, "{value}");
    }
    std::env::set_var("MXRS_FUSION", "sometimes");
    let err = enabled_from_env().unwrap_err().to_string();
    assert!(
        err.contains("MXRS_FUSION") && err.contains("sometimes"),
        "{err}"
    );
    std::env::remove_var("MXRS_FUSION");
    assert!(enabled_from_env().unwrap());
}

/// A program run imperatively equals its steps run one by one, over several tiles and a
/// partial last one; programs that read what they cannot, or run an op that is not pointwise,
/// are refused when the node is made.
#[test]
fn an_elementwise_program_equals_its_steps_and_bad_ones_are_refused() {
    use ndarray_ops::{invoke, Attrs};
    let rt = Runtime::with_engine(engine::EngineKind::ThreadedPerDevice);
    let n = 2048 * 3 + 100;
    let xs: Vec<f32> = (0..n)
        .map(|i| ((i * 37) % 101) as f32 / 25.0 - 2.0)
        .collect();
    let ys: Vec<f32> = (0..n)
        .map(|i| ((i * 11) % 53) as f32 / 13.0 - 2.0)
        .collect();
    let x = rt.from_vec(xs, &[n], Context::cpu(0)).unwrap();
    let y = rt.from_vec(ys, &[n], Context::cpu(0)).unwrap();
    // relu(tanh(x) * y + 0.5)
    let program = r#"[{"op":"tanh","attrs":[],"args":[{"Input":0}]},
        {"op":"elemwise_mul","attrs":[],"args":[{"Step":0},{"Input":1}]},
        {"op":"_plus_scalar","attrs":[["scalar","0.5"]],"args":[{"Step":1}]},
        {"op":"relu","attrs":[],"args":[{"Step":2}]}]"#;
    let fused = invoke(
        "_fused_elemwise",
        &[&x, &y],
        &Attrs::new().with("__program__", program),
        None,
    )
    .unwrap()
    .remove(0);
    let step = |op: &str, ins: &[&ndarray_ops::NDArray], attrs: Attrs| {
        invoke(op, ins, &attrs, None).unwrap().remove(0)
    };
    let t = step("tanh", &[&x], Attrs::new());
    let m = step("elemwise_mul", &[&t, &y], Attrs::new());
    let p = step("_plus_scalar", &[&m], Attrs::new().with("scalar", "0.5"));
    let want = step("relu", &[&p], Attrs::new()).to_vec::<f32>().unwrap();
    let got = fused.to_vec::<f32>().unwrap();
    assert!(got
        .iter()
        .zip(&want)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    for (bad, says) in [
        (
            r#"[{"op":"relu","attrs":[],"args":[{"Step":0}]}]"#,
            "reads Step(0)",
        ),
        (
            r#"[{"op":"relu","attrs":[],"args":[{"Input":2}]}]"#,
            "reads Input(2)",
        ),
        (
            r#"[{"op":"sum","attrs":[],"args":[{"Input":0}]}]"#,
            "elementwise",
        ),
        // Same shape in and out, but each element reads another: not one a tile may run.
        (
            r#"[{"op":"reverse","attrs":[["axis","0"]],"args":[{"Input":0}]}]"#,
            "not an elementwise op",
        ),
        (r#"[]"#, "no steps"),
        (r#"relu"#, "not a program"),
    ] {
        let err = invoke(
            "_fused_elemwise",
            &[&x, &y],
            &Attrs::new().with("__program__", bad),
            None,
        )
        .err()
        .unwrap_or_else(|| panic!("{bad} was taken"))
        .to_string();
        assert!(err.contains(says), "{bad}: {err}");
    }
}
