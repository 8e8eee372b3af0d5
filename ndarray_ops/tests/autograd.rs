//! Imperative autograd: recorded NDArray programs differentiate as the symbolic executor does
//! (on real model graphs run op by op), as finite differences say (on a program with views,
//! broadcasting, reuse and constants), and misuse is refused with a reason.

use std::collections::HashMap;
use std::sync::Arc;

mod common;

use common::uniform;
use engine::EngineKind;
use ndarray_ops::{autograd, invoke, Attrs, DType, Executor, GradReq, NDArray, Runtime, Symbol};
use storage::Context;

const CPU: Context = Context::cpu(0);

fn runtime() -> Arc<Runtime> {
    let rt = Runtime::with_engine(EngineKind::ThreadedPerDevice);
    rt.seed(7).unwrap();
    rt
}

fn graph(name: &str) -> Symbol {
    let path = format!(
        "{}/../graphs/{name}-symbol.json",
        env!("CARGO_MANIFEST_DIR")
    );
    Symbol::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn values(a: &NDArray) -> Vec<f64> {
    a.to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect()
}

/// The largest difference between two gradients, relative to the larger of their largest
/// magnitudes.
fn relative_difference(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = a.iter().chain(b).fold(1e-30f64, |m, v| m.max(v.abs()));
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
        / scale
}

/// Each graph is run twice on the same random weights, inputs and head gradients: bound and
/// trained by the executor, and op by op through `invoke` inside `autograd::record` with a
/// gradient attached to every argument but the data. Every gradient must agree (the same
/// kernels on the same values; only the order of some float sums may differ), as must the
/// outputs: the real MLP, ResNet-18 and MobileNet files (BatchNorm in training mode, depthwise
/// convolutions), and a two-layer bidirectional LSTM through the fused RNN op (three outputs,
/// so three head gradients; its backward op runs without the forward pass's kept trace here).
#[test]
fn recorded_graphs_differentiate_as_the_executor_does() {
    let lstm = {
        let names = ["data", "parameters", "state", "state_cell"];
        let vars: Vec<Symbol> = names.iter().map(|n| Symbol::var(n)).collect();
        let attrs = Attrs::new()
            .with("mode", "lstm")
            .with("state_size", 8)
            .with("num_layers", 2)
            .with("bidirectional", true)
            .with("state_outputs", true);
        Symbol::op("RNN", "rnn", &vars.iter().collect::<Vec<_>>(), attrs).unwrap()
    };
    let cases = [
        (graph("mlp"), vec![4, 784]),
        (graph("resnet18_v1"), vec![2, 3, 32, 32]),
        (graph("mobilenet1.0"), vec![2, 3, 32, 32]),
        (lstm, vec![5, 3, 4]),
    ];
    for (sym, data) in cases {
        compare_with_executor(&sym, data);
    }
}

fn compare_with_executor(sym: &Symbol, data: Vec<usize>) {
    let rt = runtime();
    let name = sym.list_outputs().join(",");
    let shapes = HashMap::from([("data".to_string(), data)]);
    let args: Vec<String> = sym
        .list_arguments()
        .into_iter()
        .filter(|a| a != "data")
        .collect();
    let req = args.iter().map(|w| (w.clone(), GradReq::Write)).collect();
    let exec = Executor::simple_bind_grad(&rt, CPU, sym, &shapes, &req).unwrap();
    let mut given: HashMap<String, NDArray> = HashMap::new();
    for (n, a) in exec.arg_dict().into_iter().chain(exec.aux_dict()) {
        let v = match n.contains("var") {
            true => uniform(&rt, a.shape(), 0.5, 1.5),
            false => uniform(&rt, a.shape(), -0.5, 0.5),
        };
        v.copy_into(&a).unwrap();
        given.insert(n, v);
    }
    // The imperative run's own copies, taken before the executor's forward pass updates the
    // running statistics.
    let mut arrays: HashMap<String, NDArray> = given
        .iter()
        .map(|(n, v)| (n.clone(), v.copy_to(CPU).unwrap()))
        .collect();
    exec.forward(true).unwrap();
    exec.backward().unwrap();

    for w in &args {
        arrays
            .get_mut(w)
            .unwrap()
            .attach_grad(GradReq::Write)
            .unwrap();
    }
    let g = sym.indexed();
    let outputs = autograd::record(|| {
        let mut vals: Vec<Vec<NDArray>> = Vec::new();
        for (i, n) in g.nodes.iter().enumerate() {
            if n.is_variable() {
                vals.push(vec![arrays[&n.name].clone()]);
                continue;
            }
            let ins: Vec<&NDArray> = g.inputs[i].iter().map(|&(s, k)| &vals[s][k]).collect();
            vals.push(invoke(n.op_name(), &ins, &n.attrs, None).unwrap());
        }
        g.outputs
            .iter()
            .map(|&(n, k)| vals[n][k].clone())
            .collect::<Vec<_>>()
    });
    let heads: Vec<&NDArray> = outputs.iter().collect();
    let head_names: Vec<String> = g
        .outputs
        .iter()
        .map(|&(n, k)| format!("{}_head_grad{k}", g.nodes[n].name))
        .collect();
    let head_grads: Vec<&NDArray> = head_names.iter().map(|h| &given[h]).collect();
    autograd::backward(&heads, Some(&head_grads)).unwrap();

    for (ours, theirs) in outputs.iter().zip(exec.outputs()) {
        let d = relative_difference(&values(ours), &values(&theirs));
        assert!(d < 1e-5, "{name}: outputs differ by {d}");
    }
    // The recorded program as a symbol, through JSON and bound with the arrays it read, runs
    // to the same outputs.
    let (recorded, read) = autograd::get_symbol(&heads).unwrap();
    let recorded = Symbol::from_json(&recorded.to_json()).unwrap();
    let shapes = read
        .iter()
        .map(|(n, a)| (n.clone(), a.shape().to_vec()))
        .collect();
    let again = Executor::simple_bind(&rt, CPU, &recorded, &shapes).unwrap();
    let bound: Vec<_> = again
        .arg_dict()
        .into_iter()
        .chain(again.aux_dict())
        .collect();
    assert_eq!(bound.len(), read.len(), "{name}: one array per variable");
    for (n, a) in bound {
        read[&n].copy_into(&a).unwrap();
    }
    again.forward(true).unwrap();
    for (ours, theirs) in outputs.iter().zip(again.outputs()) {
        let d = relative_difference(&values(ours), &values(&theirs));
        assert!(
            d < 1e-5,
            "{name}: the recorded symbol's outputs differ by {d}"
        );
    }
    let grads = exec.grad_dict();
    for w in args.iter().filter(|w| !w.contains("head_grad")) {
        let ours = values(&arrays[w].grad().unwrap());
        let theirs = values(&grads[w]);
        let d = relative_difference(&ours, &theirs);
        assert!(d < 1e-4, "{name}: gradient of {w} differs by {d}");
        assert!(
            ours.iter().any(|&v| v != 0.0),
            "{name}: gradient of {w} is zero"
        );
    }
}

/// `f(x, w, b) = sum(tanh(x . w + b) * x[0..2] reshaped)` with `b` broadcast over rows, `x`
/// read three times (twice through views) and a constant factor: the recorded gradients of all
/// three inputs against central differences in float64.
#[test]
fn gradients_match_finite_differences() {
    let rt = runtime();
    let f64_array = |v: Vec<f64>, shape: &[usize]| rt.from_vec(v, shape, CPU).unwrap();
    let x0: Vec<f64> = (0..12).map(|i| (i as f64 * 0.37).sin()).collect();
    let w0: Vec<f64> = (0..12).map(|i| (i as f64 * 0.91).cos() * 0.5).collect();
    let b0: Vec<f64> = vec![0.1, -0.2, 0.3];
    let c = f64_array(vec![1.5, -0.5, 2.0, 0.25, 1.0, -1.0], &[2, 3]);
    let f = |x: &NDArray, w: &NDArray, b: &NDArray| -> NDArray {
        let h = (&x.dot(w).unwrap() + b).unwrap(); // (3, 3): x is (3, 4), w (4, 3), b (1, 3)
        let t = h.apply("tanh", &Attrs::new()).unwrap();
        let rows = t.slice(1, 3).unwrap(); // (2, 3)
        let xs = x
            .reshape(&[12])
            .unwrap()
            .slice(0, 6)
            .unwrap()
            .reshape(&[2, 3])
            .unwrap();
        let p = (&(&rows * &xs).unwrap() * &c).unwrap();
        p.sum(&[], false).unwrap()
    };
    let scalar = |a: &NDArray| a.to_vec::<f64>().unwrap()[0];
    let (mut x, mut w, mut b) = (
        f64_array(x0.clone(), &[3, 4]),
        f64_array(w0.clone(), &[4, 3]),
        f64_array(b0.clone(), &[1, 3]),
    );
    for a in [&mut x, &mut w, &mut b] {
        a.attach_grad(GradReq::Write).unwrap();
    }
    let y = autograd::record(|| f(&x, &w, &b));
    y.backward().unwrap();
    let inputs = [(&x0, &[3usize, 4][..]), (&w0, &[4, 3]), (&b0, &[1, 3])];
    for (which, got) in [x.grad(), w.grad(), b.grad()].into_iter().enumerate() {
        let got = got.unwrap().to_vec::<f64>().unwrap();
        for j in 0..got.len() {
            let at = |delta: f64| {
                let arrays: Vec<NDArray> = inputs
                    .iter()
                    .enumerate()
                    .map(|(k, (v, s))| {
                        let mut v = (*v).clone();
                        if k == which {
                            v[j] += delta;
                        }
                        f64_array(v, s)
                    })
                    .collect();
                scalar(&f(&arrays[0], &arrays[1], &arrays[2]))
            };
            let h = 1e-6;
            let numeric = (at(h) - at(-h)) / (2.0 * h);
            assert!(
                (numeric - got[j]).abs() < 1e-7,
                "input {which}, element {j}: recorded {} against {numeric}",
                got[j]
            );
        }
    }
}

/// `Add` gradients accumulate over backward passes, `Write` ones are replaced, `Null` ones are
/// left alone; a graph may be differentiated again; gradients stop at `detach` and `pause`.
#[test]
fn gradient_requests_detach_and_pause() {
    let rt = runtime();
    let v = |x: Vec<f32>| rt.from_vec(x, &[3], CPU).unwrap();
    let (mut a, mut b, mut n) = (
        v(vec![1.0, 2.0, 3.0]),
        v(vec![4.0, 5.0, 6.0]),
        v(vec![1.0; 3]),
    );
    a.attach_grad(GradReq::Add).unwrap();
    b.attach_grad(GradReq::Write).unwrap();
    n.attach_grad(GradReq::Null).unwrap();
    let y = autograd::record(|| {
        let ab = (&a * &b).unwrap();
        let stopped = (&a.detach() * 100.0).unwrap();
        let paused = autograd::pause(|| {
            assert!(!autograd::is_recording());
            (&b * 100.0).unwrap()
        });
        assert!(autograd::is_recording());
        let s = (&(&ab + &stopped).unwrap() + &paused).unwrap();
        (&s * &n).unwrap().sum(&[], false).unwrap()
    });
    assert!(!autograd::is_recording());
    y.backward().unwrap();
    y.backward().unwrap();
    let grad = |x: &NDArray| x.grad().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(grad(&a), vec![8.0, 10.0, 12.0], "twice b, added");
    assert_eq!(grad(&b), vec![1.0, 2.0, 3.0], "a, written");
    assert_eq!(grad(&n), vec![0.0; 3], "null: untouched");
    assert!(y.grad().is_none() && a.detach().grad().is_none());
}

/// Recording in training mode runs Dropout as training does (some outputs zeroed, the rest
/// scaled), and its gradient is the same mask; in inference mode it is the identity.
#[test]
fn dropout_follows_the_recording_mode() {
    let rt = runtime();
    let mut x = rt.ones(&[1000], DType::F32, CPU).unwrap();
    x.attach_grad(GradReq::Write).unwrap();
    let p = Attrs::new().with("p", 0.5);
    let y = autograd::record(|| x.apply("Dropout", &p).unwrap());
    y.backward().unwrap();
    let (out, grad) = (
        y.to_vec::<f32>().unwrap(),
        x.grad().unwrap().to_vec::<f32>().unwrap(),
    );
    let dropped = out.iter().filter(|&&v| v == 0.0).count();
    assert!((300..700).contains(&dropped), "{dropped} of 1000 dropped");
    assert_eq!(
        out, grad,
        "the gradient of x -> mask * x / (1 - p) at ones is the output"
    );
    let y = autograd::record_with(false, || x.apply("Dropout", &p).unwrap());
    y.backward().unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0; 1000]);
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![1.0; 1000]);
}

/// A recorded loop of 100,000 ops differentiates, and its graph is released, without
/// overflowing a thread's default stack.
#[test]
fn a_long_recorded_chain_neither_overflows_nor_leaks() {
    std::thread::spawn(|| {
        let rt = runtime();
        let mut x = rt.ones(&[1], DType::F64, CPU).unwrap();
        x.attach_grad(GradReq::Write).unwrap();
        let steps = 100_000;
        rt.wait_all().unwrap();
        let before = rt.storage(CPU).stats().in_use;
        let y = autograd::record(|| {
            let mut y = x.clone();
            for _ in 0..steps {
                y = (&y * 1.00001).unwrap();
            }
            y
        });
        y.backward().unwrap();
        let want = 1.00001f64.powi(steps);
        let got = x.grad().unwrap().to_vec::<f64>().unwrap()[0];
        assert!((got - want).abs() < 1e-9 * want, "{got} vs {want}");
        assert!(rt.storage(CPU).stats().in_use > before + steps as usize * 8);
        drop(y);
        rt.wait_all().unwrap();
        assert_eq!(
            rt.storage(CPU).stats().in_use,
            before,
            "every recorded array released"
        );
    })
    .join()
    .unwrap();
}

/// Misuse is refused at the call with what was wrong, and nothing is written.
#[test]
fn misuse_is_refused_with_a_reason() {
    let rt = runtime();
    let mut x = rt.ones(&[2, 2], DType::F32, CPU).unwrap();
    let plain = rt.ones(&[2, 2], DType::F32, CPU).unwrap();
    let err = |r: ndarray_ops::Result<()>| r.unwrap_err().to_string();

    let e = err(plain.backward());
    assert!(e.contains("not in a recorded graph"), "{e}");
    let mut ints = rt.ones(&[2], DType::I32, CPU).unwrap();
    let e = err(ints.attach_grad(GradReq::Write));
    assert!(e.contains("int32 arrays have no gradient"), "{e}");
    assert!(ints.grad().is_none());
    assert!(x.grad().is_none());
    x.attach_grad(GradReq::Write).unwrap();
    let y = autograd::record(|| (&x * 2.0).unwrap());

    autograd::record(|| {
        let e = err(x.add_inplace(&plain));
        assert!(e.contains("writes in place"), "{e}");
        assert!(err(x.fill(3.0)).contains("writes in place"));
        assert!(err(plain.copy_into(&y)).contains("writes in place"));
        let e = err(invoke(
            "_mul_scalar",
            &[&x],
            &Attrs::new().with("scalar", 2),
            Some(&[&plain]),
        )
        .map(drop));
        assert!(e.contains("while recording"), "{e}");
    });
    assert_eq!(
        x.to_vec::<f32>().unwrap(),
        vec![1.0; 4],
        "nothing was written"
    );
    assert_eq!(plain.to_vec::<f32>().unwrap(), vec![1.0; 4]);
    // Outside a recording, arrays with gradients are written as any other (an optimizer step).
    x.add_inplace(&plain).unwrap();

    let wrong = rt.ones(&[3], DType::F32, CPU).unwrap();
    let e = err(autograd::backward(&[&y], Some(&[&wrong])));
    assert!(e.contains("head gradient 0 is [3]"), "{e}");
    let e = err(autograd::backward(&[&y], Some(&[])));
    assert!(e.contains("0 head gradients given for 1 heads"), "{e}");
    let e = err(autograd::backward(&[], None));
    assert!(e.contains("no head arrays"), "{e}");
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![0.0; 4]);
}

/// Recording is per thread: another thread's ops during a recording stay outside the graph.
#[test]
fn recording_is_per_thread() {
    let rt = runtime();
    let mut x = rt.ones(&[2], DType::F32, CPU).unwrap();
    x.attach_grad(GradReq::Write).unwrap();
    let other = autograd::record(|| {
        let x = x.clone();
        std::thread::spawn(move || {
            assert!(!autograd::is_recording());
            (&x * 2.0).unwrap()
        })
        .join()
        .unwrap()
    });
    assert!(other
        .backward()
        .unwrap_err()
        .to_string()
        .contains("not in a recorded graph"));
}

/// Views of recorded arrays are recorded as the ops they are (`Reshape`, `slice_axis`, a copy),
/// down to a single element.
#[test]
fn views_of_recorded_arrays_are_recorded() {
    let rt = runtime();
    let mut x = rt
        .from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], CPU)
        .unwrap();
    x.attach_grad(GradReq::Write).unwrap();
    let y = autograd::record(|| {
        let row = x.at(1).unwrap(); // [4, 5, 6]
        let e = row.at(2).unwrap(); // 6, 0-d
        let c = x.copy_to(CPU).unwrap().reshape(&[6]).unwrap();
        (&(&c * &e).unwrap().sum(&[], false).unwrap() * 1.0).unwrap()
    });
    y.backward().unwrap();
    // d/dx sum(x * x[1][2]) = x[1][2] everywhere, plus sum(x) at [1][2].
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![6.0, 6.0, 6.0, 6.0, 6.0, 27.0]
    );
}

/// A head listed twice counts twice, with each of its head gradients; several heads sum.
#[test]
fn repeated_and_several_heads_sum_their_gradients() {
    let rt = runtime();
    let mut x = rt.from_vec(vec![1.0f32, 2.0], &[2], CPU).unwrap();
    x.attach_grad(GradReq::Write).unwrap();
    let (y, z) = autograd::record(|| ((&x * 3.0).unwrap(), (&x * &x).unwrap()));
    let g = |v: Vec<f32>| rt.from_vec(v, &[2], CPU).unwrap();
    let (g1, g2, g3) = (
        g(vec![1.0, 10.0]),
        g(vec![100.0, 1000.0]),
        g(vec![1.0, 1.0]),
    );
    autograd::backward(&[&y, &z, &y], Some(&[&g1, &g3, &g2])).unwrap();
    // 3 * (g1 + g2) + 2x * g3
    let want = vec![3.0 * 101.0 + 2.0, 3.0 * 1010.0 + 4.0];
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), want);
    autograd::backward(&[&y, &y], None).unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![6.0, 6.0]);
}

/// `autograd::grad` returns the gradients as new arrays and leaves the attached ones alone; a
/// variable the heads do not depend on gets zeros; a gradient that is a head gradient passed
/// straight through is a copy; an array without a gradient attached is refused.
#[test]
fn grad_returns_new_arrays() {
    let rt = runtime();
    let v = |x: Vec<f32>| rt.from_vec(x, &[2], CPU).unwrap();
    let (mut x, mut w, mut unused) = (v(vec![1.0, 2.0]), v(vec![5.0, 6.0]), v(vec![0.0, 0.0]));
    for a in [&mut x, &mut w, &mut unused] {
        a.attach_grad(GradReq::Write).unwrap();
    }
    let y = autograd::record(|| (&(&x * &x).unwrap() + &(&w * 3.0).unwrap()).unwrap());
    let g = autograd::grad(&[&y], &[&x, &w, &unused, &x], None).unwrap();
    let got: Vec<Vec<f32>> = g.iter().map(|a| a.to_vec::<f32>().unwrap()).collect();
    assert_eq!(
        got,
        vec![
            vec![2.0, 4.0],
            vec![3.0, 3.0],
            vec![0.0, 0.0],
            vec![2.0, 4.0]
        ]
    );
    assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.0]);

    let seed = v(vec![7.0, 8.0]);
    let through = autograd::grad(&[&x], &[&x], Some(&[&seed]))
        .unwrap()
        .remove(0);
    assert_eq!(through.to_vec::<f32>().unwrap(), vec![7.0, 8.0]);
    assert!(
        !through.shares_chunk(&seed),
        "a copy, not the head gradient itself"
    );

    let plain = v(vec![1.0, 1.0]);
    let e = autograd::grad(&[&y], &[&plain], None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("variable 0 ([2]) has no gradient attached"),
        "{e}"
    );
}

/// Two variables whose gradients are one entry of the pass (both operands of a sum) get arrays
/// of their own.
#[test]
fn grad_results_share_no_memory() {
    let rt = runtime();
    let v = |x: Vec<f32>| rt.from_vec(x, &[2], CPU).unwrap();
    let (mut a, mut b) = (v(vec![1.0, 2.0]), v(vec![3.0, 4.0]));
    a.attach_grad(GradReq::Write).unwrap();
    b.attach_grad(GradReq::Write).unwrap();
    let y = autograd::record(|| {
        let mut sum = invoke("elemwise_add", &[&a, &b], &Attrs::new(), None).unwrap();
        (&sum.remove(0) * 2.0).unwrap()
    });
    let g = autograd::grad(&[&y], &[&a, &b], None).unwrap();
    assert!(!g[0].shares_chunk(&g[1]));
    g[0].fill(0.0).unwrap();
    assert_eq!(g[1].to_vec::<f32>().unwrap(), vec![2.0, 2.0]);
}
