//! The gradient pass and backward: analytic gradients against finite differences (f64), the sum
//! over an entry used twice, grad_req add, and clear errors.

use std::collections::HashMap;
use std::sync::Arc;

use engine::EngineKind;
use ndarray_ops::{invoke_on, Attrs, Executor, GradReq, NDArray, Runtime, Symbol};
use storage::Context;

fn f64_var(name: &str) -> Symbol {
    Symbol::var_with(name, Attrs::new().with("__dtype__", 1))
}

/// x -> FC(6) -> act -> {FC(4), FC(4)} -> add -> SoftmaxOutput: the activation feeds two layers.
fn net(act: &str) -> Symbol {
    let x = f64_var("x");
    let (w1, b1, w2, b2, w3) = (
        f64_var("w1"),
        f64_var("b1"),
        f64_var("w2"),
        f64_var("b2"),
        f64_var("w3"),
    );
    let h = Symbol::op(
        "FullyConnected",
        "fc1",
        &[&x, &w1, &b1],
        Attrs::new().with("num_hidden", 6),
    )
    .unwrap();
    let a = Symbol::op(
        "Activation",
        "act",
        &[&h],
        Attrs::new().with("act_type", act),
    )
    .unwrap();
    let p = Symbol::op(
        "FullyConnected",
        "fc2",
        &[&a, &w2, &b2],
        Attrs::new().with("num_hidden", 4),
    )
    .unwrap();
    let q = Symbol::op(
        "FullyConnected",
        "fc3",
        &[&a, &w3],
        Attrs::new().with("num_hidden", 4).with("no_bias", true),
    )
    .unwrap();
    let s = Symbol::op("elemwise_add", "sum", &[&p, &q], Attrs::new()).unwrap();
    Symbol::op(
        "SoftmaxOutput",
        "out",
        &[&s, &f64_var("label")],
        Attrs::new(),
    )
    .unwrap()
}

fn shapes() -> HashMap<String, Vec<usize>> {
    HashMap::from([("x".into(), vec![5, 3]), ("label".into(), vec![5])])
}

fn fill(rt: &Arc<Runtime>, a: &NDArray, lo: f64, hi: f64) {
    let shape = format!("{:?}", a.shape())
        .replace('[', "(")
        .replace(']', ")");
    invoke_on(
        rt,
        a.ctx(),
        "_random_uniform",
        &[],
        &Attrs::new()
            .with("low", lo)
            .with("high", hi)
            .with("shape", shape)
            .with("dtype", "float64"),
        Some(&[a]),
    )
    .unwrap();
}

/// Cross-entropy of the softmax output against the labels.
fn loss(exec: &Executor, labels: &[f64]) -> f64 {
    loss_in(exec, labels, false)
}

/// The same, with training-mode behaviour (BatchNorm's batch statistics).
fn loss_in(exec: &Executor, labels: &[f64], train: bool) -> f64 {
    exec.forward(train).unwrap();
    let p = exec.outputs()[0].to_vec::<f64>().unwrap();
    labels
        .iter()
        .enumerate()
        .map(|(i, &l)| -p[i * 4 + l as usize].ln())
        .sum()
}

/// Compares each element of `arg`'s analytic gradient with a central finite difference of
/// `objective`, restoring the argument afterwards.
fn assert_matches_finite_differences(
    rt: &Arc<Runtime>,
    arg: &NDArray,
    analytic: &[f64],
    objective: impl Fn() -> f64,
    what: &str,
) {
    let base = arg.to_vec::<f64>().unwrap();
    let set = |v: Vec<f64>| {
        rt.from_vec(v, arg.shape(), Context::cpu(0))
            .unwrap()
            .copy_into(arg)
            .unwrap()
    };
    for (i, &g) in analytic.iter().enumerate() {
        let eps = 1e-6;
        let mut v = base.clone();
        v[i] += eps;
        set(v.clone());
        let up = objective();
        v[i] -= 2.0 * eps;
        set(v);
        let down = objective();
        set(base.clone());
        let numeric = (up - down) / (2.0 * eps);
        assert!(
            (g - numeric).abs() <= 1e-5 * (1.0 + numeric.abs()),
            "{what}[{i}]: analytic {g}, numeric {numeric}"
        );
    }
}

#[test]
fn gradients_match_finite_differences() {
    for act in ["tanh", "sigmoid", "softrelu", "relu"] {
        let rt = Runtime::with_engine(EngineKind::ThreadedPerDevice);
        rt.seed(3).unwrap();
        let sym = net(act);
        let req: HashMap<String, GradReq> = ["x", "w1", "b1", "w2", "b2", "w3"]
            .iter()
            .map(|n| (n.to_string(), GradReq::Write))
            .collect();
        let exec = Executor::simple_bind_grad(&rt, Context::cpu(0), &sym, &shapes(), &req).unwrap();
        let args = exec.arg_dict();
        let mut names: Vec<_> = args.keys().cloned().collect();
        names.sort();
        for n in &names {
            if n != "label" {
                fill(&rt, &args[n], -1.0, 1.0);
            }
        }
        let labels = vec![0.0, 3.0, 1.0, 2.0, 1.0];
        rt.from_vec(labels.clone(), &[5], Context::cpu(0))
            .unwrap()
            .copy_into(&args["label"])
            .unwrap();
        exec.forward(true).unwrap();
        exec.backward().unwrap();
        let grads = exec.grad_dict();
        for name in ["x", "w1", "b1", "w2", "b2", "w3"] {
            let analytic = grads[name].to_vec::<f64>().unwrap();
            assert_matches_finite_differences(
                &rt,
                &args[name],
                &analytic,
                || loss(&exec, &labels),
                &format!("{act}: d loss / d {name}"),
            );
        }
    }
}

/// conv (stride, pad, groups, bias) -> relu -> pool -> flatten -> FC -> SoftmaxOutput.
fn cnn(pool: &str) -> Symbol {
    let x = f64_var("x");
    let c = Symbol::op(
        "Convolution",
        "conv",
        &[&x, &f64_var("cw"), &f64_var("cb")],
        Attrs::new()
            .with("kernel", "(3,3)")
            .with("num_filter", 4)
            .with("pad", "(1,1)")
            .with("stride", "(1,1)")
            .with("num_group", 2),
    )
    .unwrap();
    let a = Symbol::op(
        "Activation",
        "act",
        &[&c],
        Attrs::new().with("act_type", "tanh"),
    )
    .unwrap();
    let p = Symbol::op(
        "Pooling",
        "pool",
        &[&a],
        Attrs::new()
            .with("kernel", "(2,2)")
            .with("stride", "(2,2)")
            .with("pool_type", pool),
    )
    .unwrap();
    let f = Symbol::op("Flatten", "flat", &[&p], Attrs::new()).unwrap();
    let o = Symbol::op(
        "FullyConnected",
        "fc",
        &[&f, &f64_var("fw"), &f64_var("fb")],
        Attrs::new().with("num_hidden", 4),
    )
    .unwrap();
    Symbol::op(
        "SoftmaxOutput",
        "out",
        &[&o, &f64_var("label")],
        Attrs::new(),
    )
    .unwrap()
}

fn check(sym: &Symbol, shapes: HashMap<String, Vec<usize>>, wrt: &[&str], what: &str) {
    check_in(sym, shapes, wrt, what, false)
}

fn check_in(
    sym: &Symbol,
    shapes: HashMap<String, Vec<usize>>,
    wrt: &[&str],
    what: &str,
    train: bool,
) {
    let rt = Runtime::with_engine(EngineKind::ThreadedPerDevice);
    rt.seed(11).unwrap();
    let req: HashMap<String, GradReq> = wrt
        .iter()
        .map(|n| (n.to_string(), GradReq::Write))
        .collect();
    let exec = Executor::simple_bind_grad(&rt, Context::cpu(0), sym, &shapes, &req).unwrap();
    let args = exec.arg_dict();
    let mut names: Vec<_> = args.keys().cloned().collect();
    names.sort();
    for n in &names {
        if n != "label" {
            fill(&rt, &args[n], -1.0, 1.0);
        }
    }
    let labels = vec![0.0, 3.0];
    rt.from_vec(labels.clone(), &[2], Context::cpu(0))
        .unwrap()
        .copy_into(&args["label"])
        .unwrap();
    exec.forward(true).unwrap();
    exec.backward().unwrap();
    let grads = exec.grad_dict();
    for name in wrt {
        let analytic = grads[*name].to_vec::<f64>().unwrap();
        assert_matches_finite_differences(
            &rt,
            &args[*name],
            &analytic,
            || loss_in(&exec, &labels, train),
            &format!("{what}: d loss / d {name}"),
        );
    }
}

#[test]
fn convolution_pooling_flatten_gradients_match_finite_differences() {
    for pool in ["avg", "max"] {
        let shapes = HashMap::from([("x".into(), vec![2, 2, 6, 6]), ("label".into(), vec![2])]);
        check(&cnn(pool), shapes, &["x", "cw", "cb", "fw", "fb"], pool);
    }
}

#[test]
fn batchnorm_gradients_match_finite_differences_in_training_mode() {
    let x = f64_var("x");
    let aux = |n: &str| Symbol::var_with(n, Attrs::new().with("__dtype__", 1));
    let bn = Symbol::op(
        "BatchNorm",
        "bn",
        &[
            &x,
            &f64_var("gamma"),
            &f64_var("beta"),
            &aux("mean"),
            &aux("var"),
        ],
        Attrs::new().with("fix_gamma", false).with("eps", 1e-5),
    )
    .unwrap();
    let a = Symbol::op(
        "Activation",
        "act",
        &[&bn],
        Attrs::new().with("act_type", "tanh"),
    )
    .unwrap();
    let f = Symbol::op("Flatten", "flat", &[&a], Attrs::new()).unwrap();
    let o = Symbol::op(
        "FullyConnected",
        "fc",
        &[&f, &f64_var("fw"), &f64_var("fb")],
        Attrs::new().with("num_hidden", 4),
    )
    .unwrap();
    let sym = Symbol::op(
        "SoftmaxOutput",
        "out",
        &[&o, &f64_var("label")],
        Attrs::new(),
    )
    .unwrap();
    assert_eq!(sym.list_auxiliary_states(), vec!["mean", "var"]);
    let shapes = HashMap::from([("x".into(), vec![2, 3, 2, 2]), ("label".into(), vec![2])]);
    check_in(
        &sym,
        shapes,
        &["x", "gamma", "beta", "fw"],
        "batchnorm",
        true,
    );
}

#[test]
fn grad_req_add_accumulates_and_errors_are_clear() {
    let rt = Runtime::with_engine(EngineKind::ThreadedPerDevice);
    rt.seed(5).unwrap();
    let sym = net("tanh");
    let req = HashMap::from([
        ("w1".to_string(), GradReq::Add),
        ("w2".to_string(), GradReq::Write),
    ]);
    let exec = Executor::simple_bind_grad(&rt, Context::cpu(0), &sym, &shapes(), &req).unwrap();
    let args = exec.arg_dict();
    for (n, a) in &args {
        if n != "label" {
            fill(&rt, a, -1.0, 1.0);
        }
    }
    exec.forward(true).unwrap();
    exec.backward().unwrap();
    let once = exec.grad_dict()["w1"].to_vec::<f64>().unwrap();
    exec.forward(true).unwrap();
    exec.backward().unwrap();
    let twice = exec.grad_dict()["w1"].to_vec::<f64>().unwrap();
    for (a, b) in once.iter().zip(&twice) {
        assert!((2.0 * a - b).abs() < 1e-12, "add: {a} then {b}");
    }
    assert!(!exec.grad_dict().contains_key("x"), "x was not asked for");
    let bad = HashMap::from([("nope".to_string(), GradReq::Write)]);
    assert!(
        Executor::simple_bind_grad(&rt, Context::cpu(0), &sym, &shapes(), &bad)
            .err()
            .unwrap()
            .to_string()
            .contains("nope")
    );
    let plain = Executor::simple_bind(&rt, Context::cpu(0), &sym, &shapes()).unwrap();
    assert!(plain
        .backward()
        .unwrap_err()
        .to_string()
        .contains("without gradients"));
    // An op without a gradient rule (here a backward op: no second derivatives) is reported at
    // bind, naming the node.
    let og = Symbol::var("og");
    let data = Symbol::var("data");
    let pool = Attrs::new()
        .with("kernel", "(2,2)")
        .with("stride", "(2,2)")
        .with("pool_type", "max");
    let bw = Symbol::op("_backward_Pooling", "bw", &[&og, &data], pool).unwrap();
    let shapes = HashMap::from([
        ("og".into(), vec![1, 2, 2, 2]),
        ("data".into(), vec![1, 2, 4, 4]),
    ]);
    let req = HashMap::from([("data".to_string(), GradReq::Write)]);
    let e = Executor::simple_bind_grad(&rt, Context::cpu(0), &bw, &shapes, &req)
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("'bw'") && e.to_string().contains("not implemented"),
        "{e}"
    );
}

/// Deconvolution (stride, pad, dilation, groups, with and without bias) against finite
/// differences of data, weight and bias.
#[test]
fn deconvolution_gradient_matches_finite_differences() {
    let base = || {
        Attrs::new()
            .with("kernel", "(3,2)")
            .with("num_filter", 4)
            .with("stride", "(2,1)")
            .with("pad", "(1,0)")
            .with("dilate", "(1,2)")
            .with("num_group", 2)
    };
    check_op(
        "Deconvolution",
        base().with("no_bias", false),
        &[vec![2, 4, 3, 3], vec![4, 2, 3, 2], vec![4]],
        (-1.0, 1.0),
    );
    // No `no_bias`: MXNet's Deconvolution has no bias by default.
    check_op(
        "Deconvolution",
        base(),
        &[vec![1, 4, 2, 3], vec![4, 2, 3, 2]],
        (-1.0, 1.0),
    );
    // With adj, and with target_shape (pad and adj derived from it).
    check_op(
        "Deconvolution",
        base().with("adj", "(1,0)"),
        &[vec![1, 4, 2, 3], vec![4, 2, 3, 2]],
        (-1.0, 1.0),
    );
    check_op(
        "Deconvolution",
        base().with("target_shape", "(4,4)"),
        &[vec![1, 4, 2, 3], vec![4, 2, 3, 2]],
        (-1.0, 1.0),
    );
}

/// Checks an op's gradient with random head gradients r: the loss is sum(r * y).
fn check_op(op: &str, attrs: Attrs, shapes: &[Vec<usize>], range: (f64, f64)) {
    let rt = Runtime::with_engine(EngineKind::ThreadedPerDevice);
    rt.seed(17).unwrap();
    let names: Vec<String> = (0..shapes.len()).map(|i| format!("in{i}")).collect();
    let vars: Vec<Symbol> = names.iter().map(|n| f64_var(n)).collect();
    let refs: Vec<&Symbol> = vars.iter().collect();
    let sym = Symbol::op(op, "node", &refs, attrs).unwrap();
    let shape_map: HashMap<String, Vec<usize>> =
        names.iter().cloned().zip(shapes.iter().cloned()).collect();
    let req: HashMap<String, GradReq> = names.iter().map(|n| (n.clone(), GradReq::Write)).collect();
    let exec = Executor::simple_bind_grad(&rt, Context::cpu(0), &sym, &shape_map, &req)
        .unwrap_or_else(|e| panic!("{op}: {e}"));
    let args = exec.arg_dict();
    for n in &names {
        fill(&rt, &args[n], range.0, range.1);
    }
    let head = &args["node_head_grad0"];
    fill(&rt, head, -1.0, 1.0);
    let r = head.to_vec::<f64>().unwrap();
    exec.forward(false).unwrap();
    exec.backward().unwrap();
    let objective = || {
        exec.forward(false).unwrap();
        exec.outputs()[0]
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .zip(&r)
            .map(|(y, r)| y * r)
            .sum::<f64>()
    };
    let grads = exec.grad_dict();
    for n in &names {
        let analytic = grads[n].to_vec::<f64>().unwrap();
        assert_matches_finite_differences(
            &rt,
            &args[n],
            &analytic,
            objective,
            &format!("{op}: d/d {n}"),
        );
    }
}

#[test]
fn elementwise_scalar_and_dot_gradients_match_finite_differences() {
    let s = vec![3, 4];
    for op in [
        "negative", "exp", "square", "relu", "sigmoid", "tanh", "softrelu", "_copy",
    ] {
        check_op(op, Attrs::new(), std::slice::from_ref(&s), (-1.0, 1.0));
    }
    for op in ["log", "sqrt"] {
        check_op(op, Attrs::new(), std::slice::from_ref(&s), (0.5, 1.5));
    }
    for op in [
        "_plus_scalar",
        "_minus_scalar",
        "_rminus_scalar",
        "_mul_scalar",
        "_div_scalar",
        "_rdiv_scalar",
    ] {
        check_op(
            op,
            Attrs::new().with("scalar", 1.7),
            std::slice::from_ref(&s),
            (0.5, 1.5),
        );
    }
    for op in [
        "elemwise_add",
        "elemwise_sub",
        "elemwise_mul",
        "elemwise_div",
    ] {
        check_op(op, Attrs::new(), &[s.clone(), s.clone()], (0.5, 1.5));
    }
    for (ta, tb, a, b) in [
        (false, false, [3, 4], [4, 2]),
        (true, false, [4, 3], [4, 2]),
        (false, true, [3, 4], [2, 4]),
        (true, true, [4, 3], [2, 4]),
    ] {
        check_op(
            "dot",
            Attrs::new().with("transpose_a", ta).with("transpose_b", tb),
            &[a.to_vec(), b.to_vec()],
            (-1.0, 1.0),
        );
    }
    check_op(
        "FullyConnected",
        Attrs::new().with("num_hidden", 3),
        &[vec![2, 5], vec![3, 5], vec![3]],
        (-1.0, 1.0),
    );
}

/// The gradients MXNet gets wrong or computes with float constants (SELU's, GELU's; see
/// `tests/mxnet_ops.rs`) are judged here by finite differences alone.
#[test]
fn leaky_relu_and_unary_math_gradients_match_finite_differences() {
    for act in ["leaky", "elu", "selu", "gelu"] {
        let attrs = Attrs::new().with("act_type", act).with("slope", 0.3);
        check_op("LeakyReLU", attrs, &[vec![3, 4]], (-2.0, 2.0));
    }
    for gamma in [vec![3], vec![1]] {
        check_op(
            "LeakyReLU",
            Attrs::new().with("act_type", "prelu"),
            &[vec![2, 3, 4], gamma],
            (-1.0, 1.0),
        );
    }
    let s = vec![3, 4];
    for op in [
        "sin", "cos", "tan", "arctan", "sinh", "cosh", "arcsinh", "erf", "expm1", "softsign",
        "degrees", "radians", "arcsin", "arccos", "arctanh",
    ] {
        check_op(op, Attrs::new(), std::slice::from_ref(&s), (-0.8, 0.8));
    }
    for op in [
        "rsqrt",
        "reciprocal",
        "cbrt",
        "rcbrt",
        "log1p",
        "log2",
        "log10",
    ] {
        check_op(op, Attrs::new(), std::slice::from_ref(&s), (0.3, 2.0));
    }
    check_op(
        "arccosh",
        Attrs::new(),
        std::slice::from_ref(&s),
        (1.3, 3.0),
    );
    let hard = Attrs::new().with("alpha", 0.3).with("beta", 0.4);
    check_op("hard_sigmoid", hard, std::slice::from_ref(&s), (-3.0, 3.0));
    let cast = Attrs::new().with("dtype", "float64");
    check_op("Cast", cast, std::slice::from_ref(&s), (-1.0, 1.0));
}

#[test]
fn normalization_gradients_match_finite_differences() {
    let x = vec![2, 4, 3];
    let norm = |op: &str, attrs: Attrs, scales: usize| {
        check_op(
            op,
            attrs,
            &[x.clone(), vec![scales], vec![scales]],
            (-1.0, 1.0),
        );
    };
    norm("LayerNorm", Attrs::new(), 3);
    norm("LayerNorm", Attrs::new().with("axis", 1), 4);
    norm("InstanceNorm", Attrs::new(), 4);
    norm("GroupNorm", Attrs::new().with("num_groups", 2), 2);
    for mode in ["instance", "channel", "spatial"] {
        let attrs = Attrs::new().with("mode", mode);
        check_op(
            "L2Normalization",
            attrs,
            std::slice::from_ref(&x),
            (-1.0, 1.0),
        );
    }
    // MXNet's own gradient is wrong here for 3-D data in instance mode (tests/mxnet_ops.rs).
    for mode in ["instance", "channel"] {
        let attrs = Attrs::new().with("mode", mode);
        check_op(
            "SoftmaxActivation",
            attrs,
            std::slice::from_ref(&x),
            (-2.0, 2.0),
        );
    }
}

#[test]
fn dropout_gradient_is_the_head_gradient_through_the_same_mask() {
    let rt = Runtime::with_engine(EngineKind::ThreadedPerDevice);
    rt.seed(23).unwrap();
    let sym = Symbol::op(
        "Dropout",
        "drop",
        &[&f64_var("x")],
        Attrs::new().with("p", 0.5),
    )
    .unwrap();
    let req = HashMap::from([("x".to_string(), GradReq::Write)]);
    let exec = Executor::simple_bind_grad(
        &rt,
        Context::cpu(0),
        &sym,
        &HashMap::from([("x".into(), vec![200])]),
        &req,
    )
    .unwrap();
    let args = exec.arg_dict();
    fill(&rt, &args["x"], 0.5, 1.5);
    fill(&rt, &args["drop_head_grad0"], -1.0, 1.0);
    exec.forward(true).unwrap();
    exec.backward().unwrap();
    let (x, y) = (
        args["x"].to_vec::<f64>().unwrap(),
        exec.outputs()[0].to_vec::<f64>().unwrap(),
    );
    let (r, g) = (
        args["drop_head_grad0"].to_vec::<f64>().unwrap(),
        exec.grad_dict()["x"].to_vec::<f64>().unwrap(),
    );
    let dropped = y.iter().filter(|v| **v == 0.0).count();
    assert!(dropped > 50 && dropped < 150, "{dropped} of 200 dropped");
    for i in 0..200 {
        let mask = y[i] / x[i];
        assert!(
            (g[i] - r[i] * mask).abs() < 1e-12,
            "element {i}: grad {} vs {}",
            g[i],
            r[i] * mask
        );
    }
}

#[test]
fn where_routes_the_gradient_by_the_condition() {
    let rt = Runtime::with_engine(EngineKind::ThreadedPerDevice);
    rt.seed(29).unwrap();
    let sym = Symbol::op(
        "where",
        "w",
        &[&f64_var("c"), &f64_var("x"), &f64_var("y")],
        Attrs::new(),
    )
    .unwrap();
    let shapes = HashMap::from([
        ("c".into(), vec![6]),
        ("x".into(), vec![6]),
        ("y".into(), vec![6]),
    ]);
    let req = HashMap::from([
        ("x".to_string(), GradReq::Write),
        ("y".to_string(), GradReq::Write),
    ]);
    let exec = Executor::simple_bind_grad(&rt, Context::cpu(0), &sym, &shapes, &req).unwrap();
    let args = exec.arg_dict();
    let cond = vec![1.0, 0.0, 0.0, 2.0, 0.0, -1.0];
    rt.from_vec(cond.clone(), &[6], Context::cpu(0))
        .unwrap()
        .copy_into(&args["c"])
        .unwrap();
    fill(&rt, &args["w_head_grad0"], -1.0, 1.0);
    exec.forward(false).unwrap();
    exec.backward().unwrap();
    let r = args["w_head_grad0"].to_vec::<f64>().unwrap();
    let (dx, dy) = (
        exec.grad_dict()["x"].to_vec::<f64>().unwrap(),
        exec.grad_dict()["y"].to_vec::<f64>().unwrap(),
    );
    for i in 0..6 {
        let (want_x, want_y) = if cond[i] != 0.0 {
            (r[i], 0.0)
        } else {
            (0.0, r[i])
        };
        assert_eq!((dx[i], dy[i]), (want_x, want_y), "element {i}");
    }
}
