//! The executor: symbolic forward equals a node-by-node imperative evaluation with the same
//! weights, on every engine; binding checks shapes.

use std::collections::HashMap;
use std::sync::Arc;

mod common;

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::{invoke, invoke_on, Attrs, DType, Executor, NDArray, Runtime, Symbol};
use storage::{Context, StorageConfig};

fn graph(model: &str) -> (Symbol, HashMap<String, Vec<usize>>) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../graphs");
    let sym =
        Symbol::from_json(&std::fs::read_to_string(format!("{dir}/{model}-symbol.json")).unwrap())
            .unwrap();
    let shapes = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/{model}-shapes.json")).unwrap(),
    )
    .unwrap();
    (sym, shapes)
}

fn runtime(kind: EngineKind) -> Arc<Runtime> {
    let rt = Runtime::new(
        EngineBuilder::new(kind).cpu_workers(2).build(),
        StorageConfig::default(),
    );
    rt.seed(7).unwrap();
    rt
}

/// Fills every argument with seeded uniform noise.
fn randomize(rt: &Arc<Runtime>, exec: &Executor) {
    let mut names: Vec<_> = exec.arg_dict().into_iter().collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, a) in names {
        let shape = format!("{:?}", a.shape())
            .replace('[', "(")
            .replace(']', ")");
        invoke_on(
            rt,
            a.ctx(),
            "_random_uniform",
            &[],
            &Attrs::new()
                .with("low", -0.1)
                .with("high", 0.1)
                .with("shape", shape),
            Some(&[&a]),
        )
        .unwrap();
    }
}

/// Evaluates the graph op by op with fresh arrays (the imperative path).
fn imperative(exec: &Executor) -> Vec<Vec<f32>> {
    let sym = exec.symbol();
    let g = sym.indexed();
    let vars: HashMap<String, NDArray> =
        exec.arg_dict().into_iter().chain(exec.aux_dict()).collect();
    let mut values: Vec<Vec<NDArray>> = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if n.is_variable() {
            values.push(vec![vars[&n.name].copy_to(Context::cpu(0)).unwrap()]);
            continue;
        }
        let ins: Vec<&NDArray> = g.inputs[i].iter().map(|&(s, k)| &values[s][k]).collect();
        values.push(invoke(n.op_name(), &ins, &n.attrs, None).unwrap());
    }
    g.outputs
        .iter()
        .map(|&(n, k)| values[n][k].to_vec::<f32>().unwrap())
        .collect()
}

#[test]
fn forward_equals_imperative_evaluation_on_every_engine() {
    for model in ["mlp", "resnet18_v1"] {
        let (sym, mut shapes) = graph(model);
        if model == "resnet18_v1" {
            shapes.insert("data".into(), vec![1, 3, 224, 224]);
        }
        let mut results = vec![];
        for kind in EngineKind::ALL {
            let rt = runtime(kind);
            let exec = Executor::simple_bind(&rt, Context::cpu(0), &sym, &shapes).unwrap();
            randomize(&rt, &exec);
            let want = imperative(&exec);
            exec.forward(false).unwrap();
            let got: Vec<Vec<f32>> = exec
                .outputs()
                .iter()
                .map(|o| o.to_vec::<f32>().unwrap())
                .collect();
            assert_eq!(
                got, want,
                "{model} on {kind:?}: symbolic and imperative differ"
            );
            assert!(got[0].iter().all(|v| v.is_finite()));
            results.push(got);
        }
        assert!(
            results.windows(2).all(|w| w[0] == w[1]),
            "{model}: engines differ"
        );
    }
}

#[test]
fn binding_checks_shapes_and_names() {
    let (sym, _) = graph("mlp");
    let rt = runtime(EngineKind::ThreadedPerDevice);
    let ctx = Context::cpu(0);
    let data = rt.zeros(&[4, 784], DType::F32, ctx).unwrap();
    let exec = Executor::bind(&rt, ctx, &sym, HashMap::from([("data".to_string(), data)])).unwrap();
    assert_eq!(exec.outputs()[0].shape(), &[4, 10]);
    assert_eq!(exec.arg_dict()["mlp_dense0_weight"].shape(), &[512, 784]);
    let m = exec.memory_report();
    assert!(m.lower_bound_bytes <= m.planned_bytes && m.planned_bytes <= m.no_reuse_bytes);
    assert!(exec.debug_str().contains("FullyConnected"));
    let bad_w = rt.zeros(&[3, 3], DType::F32, ctx).unwrap();
    let arrays = HashMap::from([
        (
            "data".to_string(),
            rt.zeros(&[4, 784], DType::F32, ctx).unwrap(),
        ),
        ("mlp_dense0_weight".to_string(), bad_w),
    ]);
    let e = Executor::bind(&rt, ctx, &sym, arrays).err().unwrap();
    assert!(e.to_string().contains("mlp_dense0_weight"), "{e}");
    let stray = HashMap::from([
        (
            "data".to_string(),
            rt.zeros(&[4, 784], DType::F32, ctx).unwrap(),
        ),
        ("nope".to_string(), rt.zeros(&[1], DType::F32, ctx).unwrap()),
    ]);
    assert!(Executor::bind(&rt, ctx, &sym, stray)
        .err()
        .unwrap()
        .to_string()
        .contains("nope"));
    assert!(Executor::simple_bind(&rt, ctx, &sym, &HashMap::new()).is_err());
}

/// Trains one step of the MLP file's graph (with a SoftmaxOutput head) and returns the outputs
/// and every gradient.
fn step(sym: &Symbol, kind: EngineKind) -> (Vec<f32>, Vec<(String, Vec<f32>)>) {
    step_on(&runtime(kind), sym)
}

/// One forward and backward pass of `sym` under a softmax loss: the output and every gradient.
fn step_on(rt: &Arc<Runtime>, sym: &Symbol) -> (Vec<f32>, Vec<(String, Vec<f32>)>) {
    let rt = rt.clone();
    let label = Symbol::var("label");
    let loss = Symbol::op("SoftmaxOutput", "loss", &[sym, &label], Attrs::new()).unwrap();
    let shapes = HashMap::from([
        ("data".to_string(), vec![8, 784]),
        ("label".to_string(), vec![8]),
    ]);
    let req = common::write_grads(&loss, &["label"]);
    let exec = Executor::simple_bind_grad(&rt, Context::cpu(0), &loss, &shapes, &req).unwrap();
    randomize(&rt, &exec);
    rt.from_vec(
        vec![1.0f32, 0.0, 9.0, 3.0, 3.0, 7.0, 2.0, 5.0],
        &[8],
        Context::cpu(0),
    )
    .unwrap()
    .copy_into(&exec.arg_dict()["label"])
    .unwrap();
    exec.forward(true).unwrap();
    exec.backward().unwrap();
    (
        exec.outputs()[0].to_vec::<f32>().unwrap(),
        sorted_grads(&exec),
    )
}

/// The executor's gradients by name, in name order.
fn sorted_grads(exec: &Executor) -> Vec<(String, Vec<f32>)> {
    let mut grads: Vec<(String, Vec<f32>)> = exec
        .grad_dict()
        .into_iter()
        .map(|(k, v)| (k, v.to_vec::<f32>().unwrap()))
        .collect();
    grads.sort_by(|a, b| a.0.cmp(&b.0));
    grads
}

#[test]
fn the_executor_bulks_runs_of_nodes_without_changing_results() {
    let (mlp, _) = graph("mlp");
    let mut results = Vec::new();
    for bulk in [1, 4] {
        let rt = Runtime::new(
            EngineBuilder::new(EngineKind::ThreadedPerDevice)
                .cpu_workers(2)
                .bulk_size(bulk)
                .profiler(None)
                .build(),
            StorageConfig::default(),
        );
        rt.seed(7).unwrap();
        results.push(step_on(&rt, &mlp));
        rt.engine().wait_for_all().unwrap();
        let events = rt.engine().profiler().unwrap().events();
        let units = events
            .iter()
            .filter(|e| e.name.starts_with("bulk["))
            .count();
        assert_eq!(units > 0, bulk > 1, "bulk size {bulk}: {units} fused units");
    }
    assert_eq!(results[0], results[1]);
}

#[test]
fn forward_and_backward_agree_across_engines_and_with_the_graph_built_in_code() {
    let (loaded, _) = graph("mlp");
    let built = common::mlp_in_code();
    let reference = step(&loaded, EngineKind::Naive);
    assert_eq!(reference.1.len(), 7, "data and six parameters");
    for kind in EngineKind::ALL {
        assert_eq!(step(&loaded, kind), reference, "loaded graph on {kind:?}");
        assert_eq!(
            step(&built, kind),
            reference,
            "graph built in code on {kind:?}"
        );
    }
}

#[test]
fn outputs_that_repeat_or_are_inputs_get_copies() {
    let rt = runtime(EngineKind::ThreadedPerDevice);
    let x = Symbol::var("x");
    let r = Symbol::op("relu", "r", &[&x], Attrs::new()).unwrap();
    let sym = Symbol::group(&[r.clone(), r, x]);
    let exec = Executor::simple_bind(
        &rt,
        Context::cpu(0),
        &sym,
        &HashMap::from([("x".into(), vec![4])]),
    )
    .unwrap();
    rt.from_vec(vec![-1.0f32, 2.0, -3.0, 4.0], &[4], Context::cpu(0))
        .unwrap()
        .copy_into(&exec.arg_dict()["x"])
        .unwrap();
    exec.forward(false).unwrap();
    let outs = exec.outputs();
    assert_eq!(outs.len(), 3);
    for (i, a) in outs.iter().enumerate() {
        for b in &outs[i + 1..] {
            assert!(!a.shares_chunk(b), "two outputs share storage");
        }
        assert!(
            !a.shares_chunk(&exec.arg_dict()["x"]),
            "an output shares the input's storage"
        );
    }
    assert_eq!(outs[0].to_vec::<f32>().unwrap(), vec![0.0, 2.0, 0.0, 4.0]);
    assert_eq!(
        outs[1].to_vec::<f32>().unwrap(),
        outs[0].to_vec::<f32>().unwrap()
    );
    assert_eq!(outs[2].to_vec::<f32>().unwrap(), vec![-1.0, 2.0, -3.0, 4.0]);
    assert!(exec.debug_str().contains("_copy"));
}

#[test]
fn backward_takes_head_gradients_and_bind_takes_gradient_arrays() {
    let rt = runtime(EngineKind::ThreadedPerDevice);
    let ctx = Context::cpu(0);
    // y = x * w (elementwise): dy/dw = x * head.
    let (x, w) = (Symbol::var("x"), Symbol::var("w"));
    let y = Symbol::op("elemwise_mul", "y", &[&x, &w], Attrs::new()).unwrap();
    let shapes = HashMap::from([("x".to_string(), vec![4]), ("w".to_string(), vec![4])]);
    let mine = rt.zeros(&[4], DType::F32, ctx).unwrap();
    let opts = ndarray_ops::BindOptions {
        grad_req: HashMap::from([("w".to_string(), ndarray_ops::GradReq::Write)]),
        grad_arrays: HashMap::from([("w".to_string(), mine.clone())]),
        ..Default::default()
    };
    let exec = Executor::bind_with_options(&rt, ctx, &y, &shapes, HashMap::new(), &opts).unwrap();
    let args = exec.arg_dict();
    rt.from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4], ctx)
        .unwrap()
        .copy_into(&args["x"])
        .unwrap();
    exec.forward(true).unwrap();
    let head = rt
        .from_vec(vec![10.0f32, 20.0, 30.0, 40.0], &[4], ctx)
        .unwrap();
    exec.backward_with(std::slice::from_ref(&head)).unwrap();
    assert_eq!(mine.to_vec::<f32>().unwrap(), vec![10.0, 40.0, 90.0, 160.0]);
    assert!(exec.grad_dict()["w"].shares_chunk(&mine));
    let err = exec.backward_with(&[]).err().unwrap().to_string();
    assert!(
        err.contains("0 head gradients") && err.contains("take 1"),
        "{err}"
    );
    // A gradient array of the wrong shape, or for an argument without a request, is refused.
    for (name, shape) in [("w", vec![5]), ("x", vec![4])] {
        let opts = ndarray_ops::BindOptions {
            grad_req: HashMap::from([("w".to_string(), ndarray_ops::GradReq::Write)]),
            grad_arrays: HashMap::from([(
                name.to_string(),
                rt.zeros(&shape, DType::F32, ctx).unwrap(),
            )]),
            ..Default::default()
        };
        let err = Executor::bind_with_options(&rt, ctx, &y, &shapes, HashMap::new(), &opts)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(&format!("'{name}'")), "{err}");
    }
}

/// `add` gradients are added into their arrays inside the backward pass, right after the node
/// that makes them, so their planned entries do not all live to the end: the MLP's arena with
/// every weight accumulated is smaller than its gradients together (kept to the end, they would
/// all be in the arena at once), and within the `write` arena plus the largest gradient.
#[test]
fn add_gradients_do_not_all_live_to_the_end_of_backward() {
    use ndarray_ops::GradReq;
    let (sym, shapes) = graph("mlp");
    let rt = runtime(EngineKind::ThreadedPerDevice);
    let ctx = Context::cpu(0);
    let weights: Vec<String> = sym
        .list_arguments()
        .into_iter()
        .filter(|a| a.ends_with("weight") || a.ends_with("bias"))
        .collect();
    let bind = |req: GradReq| {
        let reqs = weights.iter().map(|w| (w.clone(), req)).collect();
        Executor::simple_bind_grad(&rt, ctx, &sym, &shapes, &reqs).unwrap()
    };
    let (write, add) = (bind(GradReq::Write), bind(GradReq::Add));
    let grad_bytes: u64 = add
        .grad_dict()
        .values()
        .map(|g| (g.size() * g.dtype().size()) as u64)
        .sum();
    let largest = add
        .grad_dict()
        .values()
        .map(|g| (g.size() * g.dtype().size()) as u64)
        .max()
        .unwrap();
    let (w, a) = (write.memory_report(), add.memory_report());
    assert!(
        a.planned_bytes < grad_bytes && a.planned_bytes <= w.planned_bytes + largest,
        "add arena {} vs gradients {grad_bytes}, write arena {} + largest gradient {largest}",
        a.planned_bytes,
        w.planned_bytes
    );
}

/// A backward pass differentiates the forward pass before it, whose entries the memory plan
/// lets it overwrite: one before any forward pass, or a second one after the same forward pass
/// (which on ResNet-18 changed 61 of its 62 gradients), is refused with the reason and changes
/// nothing; each forward pass then allows one backward pass, which repeats the gradients.
#[test]
fn a_backward_pass_needs_a_forward_pass_of_its_own() {
    let (sym, _) = graph("resnet18_v1");
    let shapes = HashMap::from([("data".to_string(), vec![1, 3, 32, 32])]);
    let rt = runtime(EngineKind::ThreadedPerDevice);
    let ctx = Context::cpu(0);
    let req = common::write_grads(&sym, &["data"]);
    let exec = Executor::simple_bind_grad(&rt, ctx, &sym, &shapes, &req).unwrap();
    randomize(&rt, &exec);
    let head = rt.from_vec(vec![1.0f32; 1000], &[1, 1000], ctx).unwrap();
    let heads = std::slice::from_ref(&head);
    let grads = || sorted_grads(&exec);
    let before = grads();
    let refused = |why: &str| {
        let err = exec.backward_with(heads).err().map(|e| e.to_string());
        let err = err.unwrap_or_else(|| panic!("a backward pass after {why} ran"));
        assert!(
            err.contains("backward") && err.contains("needs a forward pass of its own"),
            "{err}"
        );
        err
    };
    assert!(refused("the bind").contains("since the bind"));
    assert_eq!(grads(), before, "a refused pass changed a gradient");
    exec.forward(true).unwrap();
    exec.backward_with(heads).unwrap();
    let first = grads();
    assert_ne!(first, before);
    assert!(refused("a backward pass").contains("already ran"));
    assert!(exec.backward().is_err());
    assert_eq!(grads(), first, "a refused pass changed a gradient");
    for train in [true, false, true] {
        exec.forward(train).unwrap();
        exec.backward_with(heads).unwrap();
        if train {
            assert_eq!(grads(), first, "forward(true) and backward again");
        }
    }
}

/// A bound graph whose data asks no gradient lets the first layer's backward kernel skip the
/// data gradient (nothing reads it): the weight gradients come out the same, bit for bit, as
/// with the data's gradient asked for, through every path of the convolution's backward pass
/// (im2col at stride 2, the flipped-weight product, Winograd's tiles) and the fused LSTM's.
#[test]
fn an_unread_data_gradient_changes_no_weight_gradient() {
    use ndarray_ops::{BindOptions, GradReq};
    let rt = runtime(EngineKind::ThreadedPerDevice);
    let ctx = Context::cpu(0);
    let conv = |k: usize, s: usize, filters: usize| {
        Attrs::new()
            .with("kernel", format!("({k},{k})"))
            .with("stride", format!("({s},{s})"))
            .with("pad", format!("({},{})", k / 2, k / 2))
            .with("num_filter", filters)
    };
    let lstm = Attrs::new()
        .with("mode", "lstm")
        .with("num_layers", 2)
        .with("state_size", 32);
    /// An op, its attributes, its argument names (the data first) and their shapes.
    type Case = (&'static str, Attrs, Vec<&'static str>, Vec<Vec<usize>>);
    let cases: Vec<Case> = vec![
        (
            "Convolution",
            conv(7, 2, 8),
            vec!["data", "w", "b"],
            vec![vec![2, 3, 20, 20], vec![8, 3, 7, 7], vec![8]],
        ),
        (
            "Convolution",
            conv(3, 1, 4),
            vec!["data", "w", "b"],
            vec![vec![2, 3, 9, 9], vec![4, 3, 3, 3], vec![4]],
        ),
        (
            "Convolution",
            conv(3, 1, 16),
            vec!["data", "w", "b"],
            vec![vec![1, 16, 24, 24], vec![16, 16, 3, 3], vec![16]],
        ),
        (
            "RNN",
            lstm,
            vec!["data", "w", "state", "cell"],
            vec![
                vec![5, 3, 8],
                vec![4 * 32 * (8 + 32 + 2) + 4 * 32 * (32 + 32 + 2)],
                vec![2, 3, 32],
                vec![2, 3, 32],
            ],
        ),
    ];
    for (op, attrs, names, dims) in cases {
        let vars: Vec<Symbol> = names.iter().map(|n| Symbol::var(n)).collect();
        let refs: Vec<&Symbol> = vars.iter().collect();
        let y = Symbol::op(op, "y", &refs, attrs).unwrap();
        let shapes: HashMap<String, Vec<usize>> = names
            .iter()
            .map(|n| n.to_string())
            .zip(dims.clone())
            .collect();
        let grads = |data: GradReq| {
            let mut req: HashMap<String, GradReq> = names
                .iter()
                .map(|n| (n.to_string(), GradReq::Write))
                .collect();
            req.insert("data".into(), data);
            let opts = BindOptions {
                grad_req: req,
                ..Default::default()
            };
            let exec =
                Executor::bind_with_options(&rt, ctx, &y, &shapes, HashMap::new(), &opts).unwrap();
            let args = exec.arg_dict();
            for (i, (name, shape)) in names.iter().zip(&dims).enumerate() {
                let n: usize = shape.iter().product();
                let v: Vec<f32> = (0..n)
                    .map(|j| ((j * 7919 + i * 104_729) % 1000) as f32 / 1000.0 - 0.5)
                    .collect();
                rt.from_vec(v, shape, ctx)
                    .unwrap()
                    .copy_into(&args[*name])
                    .unwrap();
            }
            exec.forward(true).unwrap();
            let out_shape = exec.outputs()[0].shape().to_vec();
            let n: usize = out_shape.iter().product();
            let head: Vec<f32> = (0..n)
                .map(|j| ((j * 31) % 17) as f32 / 17.0 - 0.4)
                .collect();
            exec.backward_with(&[rt.from_vec(head, &out_shape, ctx).unwrap()])
                .unwrap();
            let g = exec.grad_dict();
            let mut named: Vec<(String, Vec<f32>)> = g
                .iter()
                .map(|(n, a)| (n.clone(), a.to_vec::<f32>().unwrap()))
                .collect();
            named.sort_by(|a, b| a.0.cmp(&b.0));
            named
        };
        let (with, without) = (grads(GradReq::Write), grads(GradReq::Null));
        let data_grad = &with.iter().find(|(n, _)| n == "data").unwrap().1;
        assert!(
            data_grad.iter().any(|&v| v != 0.0),
            "{op}: the data gradient, asked for, was made"
        );
        let with: Vec<_> = with.into_iter().filter(|(n, _)| n != "data").collect();
        assert_eq!(
            with, without,
            "{op}: weight gradients with and without the data's"
        );
    }
}
