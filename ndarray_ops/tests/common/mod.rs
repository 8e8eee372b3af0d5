//! Helpers shared by the integration tests.

use std::collections::HashMap;
use std::sync::Arc;

use ndarray_ops::symbol::CTX_GROUP;
use ndarray_ops::{
    Attrs, BindOptions, DType, DataParallel, Executor, GradReq, NDArray, Runtime, Sgd, Symbol,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use storage::Context;

/// Runs `f` on a thread and fails the test if it takes longer than `secs` (a hang).
#[allow(dead_code)]
pub fn watchdog<T: Send + 'static>(
    what: &str,
    secs: u64,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let out = f();
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(()) => handle.join().expect("the test thread panicked"),
        Err(_) => panic!("{what}: no result within {secs} s (a hang)"),
    }
}

/// An array of `shape` on `cpu(0)` drawn uniformly from `[low, high)` by the runtime's
/// generator (`_random_uniform`).
#[allow(dead_code)]
pub fn uniform(rt: &Arc<Runtime>, shape: &[usize], low: f64, high: f64) -> NDArray {
    let shape = format!("{shape:?}").replace('[', "(").replace(']', ")");
    let attrs = Attrs::new()
        .with("low", low)
        .with("high", high)
        .with("shape", shape);
    ndarray_ops::invoke_on(rt, Context::cpu(0), "_random_uniform", &[], &attrs, None)
        .unwrap()
        .remove(0)
}

/// A `write` request for the gradient of every argument of `sym` except those named in `except`
/// (data and labels).
#[allow(dead_code)]
pub fn write_grads(sym: &Symbol, except: &[&str]) -> HashMap<String, GradReq> {
    sym.list_arguments()
        .into_iter()
        .filter(|a| !except.contains(&a.as_str()))
        .map(|a| (a, GradReq::Write))
        .collect()
}

#[allow(dead_code)]
/// `graphs/mlp-symbol.json` built in code, with the file's node names and attributes.
pub fn mlp_in_code() -> Symbol {
    let mut h = Symbol::var("data");
    for (i, n) in [(0, 512), (1, 512), (2, 10)] {
        let w = Symbol::var(&format!("mlp_dense{i}_weight"));
        let b = Symbol::var(&format!("mlp_dense{i}_bias"));
        h = Symbol::op(
            "FullyConnected",
            &format!("mlp_dense{i}_fwd"),
            &[&h, &w, &b],
            Attrs::new()
                .with("flatten", "True")
                .with("no_bias", "False")
                .with("num_hidden", n),
        )
        .unwrap();
        if i < 2 {
            h = Symbol::op(
                "Activation",
                &format!("mlp_dense{i}_relu_fwd"),
                &[&h],
                Attrs::new().with("act_type", "relu"),
            )
            .unwrap();
        }
    }
    h
}

/// A random graph of layers of parallel branches over a pool of entries: every branch starts
/// from a random entry and applies 1-3 random unary or binary elementwise ops (the binary ones
/// take a second random entry), so branches are unordered with each other and entries die at
/// scattered points. The output sums every entry nothing else read. With `groups`, each op node
/// is put in a random one of them or left to placement (for model parallelism).
#[allow(dead_code)]
pub fn random_graph(rng: &mut StdRng, n_weights: usize, groups: &[&str]) -> Symbol {
    let mut pool: Vec<(Symbol, bool)> = vec![(Symbol::var("x"), false)];
    for w in 0..n_weights {
        pool.push((Symbol::var(&format!("w{w}")), false));
    }
    let mut id = 0;
    let mut name = |op: &str| {
        id += 1;
        format!("{op}{id}")
    };
    let attrs = |rng: &mut StdRng| match rng.gen_range(0..=groups.len()) {
        k if k < groups.len() => Attrs::new().with(CTX_GROUP, groups[k]),
        _ => Attrs::new(),
    };
    let layers = rng.gen_range(2..5);
    for _ in 0..layers {
        let width = rng.gen_range(2..7);
        let mut ends = vec![];
        for _ in 0..width {
            let pick = rng.gen_range(0..pool.len());
            pool[pick].1 = true;
            let mut h = pool[pick].0.clone();
            for _ in 0..rng.gen_range(1..4) {
                let a = attrs(rng);
                h = match rng.gen_range(0..7) {
                    0 => Symbol::op("tanh", &name("tanh"), &[&h], a),
                    1 => Symbol::op("sigmoid", &name("sigmoid"), &[&h], a),
                    2 => Symbol::op("relu", &name("relu"), &[&h], a),
                    3 => Symbol::op(
                        "_mul_scalar",
                        &name("mul_scalar"),
                        &[&h],
                        a.with("scalar", 0.75),
                    ),
                    k => {
                        let other = rng.gen_range(0..pool.len());
                        pool[other].1 = true;
                        let op = if k == 4 {
                            "elemwise_mul"
                        } else {
                            "elemwise_add"
                        };
                        Symbol::op(op, &name(op), &[&h, &pool[other].0], a)
                    }
                }
                .unwrap();
            }
            ends.push((h, false));
        }
        pool.extend(ends);
    }
    let leaves: Vec<&Symbol> = pool
        .iter()
        .filter(|(_, read)| !read)
        .map(|(s, _)| s)
        .collect();
    Symbol::op("add_n", "total", &leaves, Attrs::new()).unwrap()
}

/// Binds `sym` with gradients of every weight, sets `x`, the weights and the head gradient from
/// `seed`, runs the passes `F F B F B` (forward twice, backward after a repeated forward,
/// forward again) and returns every output and gradient after each backward. `opts` gives the
/// memory planning and placement, and the gradient requests (when it names none, every weight's
/// is `write`).
#[allow(dead_code)]
pub fn run_passes(
    rt: &Arc<Runtime>,
    sym: &Symbol,
    n: usize,
    seed: u64,
    opts: BindOptions,
) -> Vec<Vec<f32>> {
    let args = sym.list_arguments();
    let shapes = args.iter().map(|a| (a.clone(), vec![n])).collect();
    let grad_req = match opts.grad_req.is_empty() {
        true => args
            .iter()
            .filter(|a| a.starts_with('w'))
            .map(|a| (a.clone(), GradReq::Write))
            .collect(),
        false => opts.grad_req.clone(),
    };
    let opts = BindOptions { grad_req, ..opts };
    let exec =
        Executor::bind_with_options(rt, Context::cpu(0), sym, &shapes, HashMap::new(), &opts)
            .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut names: Vec<_> = exec.arg_dict().into_iter().collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let fill = |a: &NDArray, rng: &mut StdRng| {
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
        rt.from_vec(v, &[n], Context::cpu(0))
            .unwrap()
            .copy_into(a)
            .unwrap();
    };
    for (_, a) in &names {
        fill(a, &mut rng);
    }
    let x = exec.arg_dict()["x"].clone();
    let mut seen = vec![];
    let record = |exec: &Executor, seen: &mut Vec<Vec<f32>>| {
        seen.push(exec.outputs()[0].to_vec::<f32>().unwrap());
        let mut grads: Vec<_> = exec.grad_dict().into_iter().collect();
        grads.sort_by(|a, b| a.0.cmp(&b.0));
        seen.extend(grads.iter().map(|(_, g)| g.to_vec::<f32>().unwrap()));
    };
    exec.forward(true).unwrap();
    fill(&x, &mut rng);
    exec.forward(true).unwrap();
    exec.backward().unwrap();
    record(&exec, &mut seen);
    fill(&x, &mut rng);
    exec.forward(true).unwrap();
    exec.backward().unwrap();
    record(&exec, &mut seen);
    seen
}

/// Attributes placing a node in context group `group` (none: left to placement).
#[allow(dead_code)]
fn in_group(group: Option<&str>) -> Attrs {
    match group {
        Some(g) => Attrs::new().with(CTX_GROUP, g),
        None => Attrs::new(),
    }
}

/// An MLP of three dense layers and a softmax loss; the first two layers in context group `a`,
/// the rest in `b` (when `groups`).
#[allow(dead_code)]
pub fn mlp(groups: bool) -> Symbol {
    let g = |name: &'static str| groups.then_some(name);
    let mut h = Symbol::var("data");
    for (i, (hidden, group)) in [(32, g("a")), (24, g("a")), (10, g("b"))]
        .into_iter()
        .enumerate()
    {
        let w = Symbol::var(&format!("fc{i}_weight"));
        let b = Symbol::var(&format!("fc{i}_bias"));
        h = Symbol::op(
            "FullyConnected",
            &format!("fc{i}"),
            &[&h, &w, &b],
            in_group(group).with("num_hidden", hidden),
        )
        .unwrap();
        if i < 2 {
            h = Symbol::op(
                "Activation",
                &format!("act{i}"),
                &[&h],
                in_group(group).with("act_type", "tanh"),
            )
            .unwrap();
        }
    }
    Symbol::op(
        "SoftmaxOutput",
        "softmax",
        &[&h, &Symbol::var("label")],
        in_group(g("b")),
    )
    .unwrap()
}

/// A seeded array of `shape` with values in [-0.5, 0.5) on `ctx`.
#[allow(dead_code)]
pub fn random(rt: &Arc<Runtime>, shape: &[usize], rng: &mut StdRng, ctx: Context) -> NDArray {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-0.5..0.5)).collect();
    rt.from_vec(v, shape, ctx).unwrap()
}

/// `n` seeded class labels (0 to 9) on `cpu(0)`.
#[allow(dead_code)]
pub fn labels(rt: &Arc<Runtime>, n: usize, rng: &mut StdRng) -> NDArray {
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(0..10) as f32).collect();
    rt.from_vec(v, &[n], Context::cpu(0)).unwrap()
}

/// Input shapes of [`mlp`] for a batch of `batch`.
#[allow(dead_code)]
pub fn shapes(batch: usize) -> HashMap<String, Vec<usize>> {
    HashMap::from([
        ("data".to_string(), vec![batch, 20]),
        ("label".to_string(), vec![batch]),
    ])
}

/// The arrays' values, by name.
#[allow(dead_code)]
pub fn sorted(m: HashMap<String, NDArray>) -> Vec<(String, Vec<f32>)> {
    let mut v: Vec<_> = m
        .into_iter()
        .map(|(k, a)| (k, a.to_vec::<f32>().unwrap()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// [`mlp`] data-parallel over `contexts` for batches of `batch`, its parameters drawn from
/// a generator seeded with `seed` (in name order); returns it, the generator and the
/// parameters it starts from, by name.
#[allow(dead_code)]
pub fn seeded_data_parallel(
    rt: &Arc<Runtime>,
    contexts: &[Context],
    batch: usize,
    sgd: Sgd,
    seed: u64,
) -> (DataParallel, StdRng, Vec<(String, Vec<f32>)>) {
    let dp = DataParallel::new(
        rt,
        &mlp(false),
        contexts,
        &shapes(batch),
        &["data", "label"],
        sgd,
    )
    .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut init: Vec<_> = dp.params().into_iter().collect();
    init.sort_by(|a, b| a.0.cmp(&b.0));
    let init: HashMap<String, NDArray> = init
        .into_iter()
        .map(|(k, a)| (k, random(rt, a.shape(), &mut rng, Context::cpu(0))))
        .collect();
    dp.set_params(&init).unwrap();
    (dp, rng, sorted(init))
}

/// Pushes one step of `dp` on a random batch of `batch` samples drawn from `rng`.
#[allow(dead_code)]
pub fn step_random(rt: &Arc<Runtime>, dp: &DataParallel, batch: usize, rng: &mut StdRng) {
    let x = random(rt, &[batch, 20], rng, Context::cpu(0));
    let y = labels(rt, batch, rng);
    dp.step(&[("data", &x), ("label", &y)]).unwrap();
}

/// Trains [`mlp`] data-parallel over `contexts` for three seeded steps of SGD with momentum;
/// checks that every device ends with the same weights and that every parameter moved, and
/// returns the parameters by name.
#[allow(dead_code)]
pub fn train_over(rt: &Arc<Runtime>, contexts: &[Context]) -> Vec<(String, Vec<f32>)> {
    let batch = 16;
    let sgd = Sgd {
        lr: 0.5,
        momentum: 0.9,
        wd: 1e-3,
    };
    let (dp, mut rng, start) = seeded_data_parallel(rt, contexts, batch, sgd, 9);
    for _ in 0..3 {
        step_random(rt, &dp, batch, &mut rng);
    }
    dp.wait().unwrap();
    // Every device holds the same weights after the broadcast.
    for exec in &dp.executors()[1..] {
        let args = exec.arg_dict();
        for (k, w) in dp.params() {
            assert_eq!(
                args[&k].to_vec::<f32>().unwrap(),
                w.to_vec::<f32>().unwrap(),
                "{k} on {}",
                args[&k].ctx()
            );
        }
    }
    let end = sorted(dp.params());
    // Training moved every parameter.
    for ((name, a), (_, b)) in end.iter().zip(&start) {
        assert!(
            a.iter().zip(b).any(|(x, y)| (x - y).abs() > 1e-4),
            "{name} did not move"
        );
    }
    end
}

/// The elements of an array of any dtype, as f64 (exact for every dtype but i64 beyond 2^53).
#[allow(dead_code)]
pub fn floats(a: &NDArray) -> Vec<f64> {
    match a.dtype() {
        DType::F64 => a.to_vec::<f64>().unwrap(),
        DType::F32 => a
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        DType::I32 => a
            .to_vec::<i32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        DType::I64 => a
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(|x| x as f64)
            .collect(),
        DType::U8 => a
            .to_vec::<u8>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
    }
}

/// The largest magnitude in `v`.
#[allow(dead_code)]
pub fn largest(v: &[f64]) -> f64 {
    v.iter().fold(0f64, |m, x| m.max(x.abs()))
}

/// The largest difference between `got` and `want`, relative to the largest magnitude in
/// `want`, and where it is. Where `want` is below `noise` (or all zero), `got` must be too
/// (then 0, else infinity).
#[allow(dead_code)]
pub fn relative_error(got: &[f64], want: &[f64], noise: f64) -> (f64, usize) {
    let scale = largest(want);
    if scale < noise || scale == 0.0 {
        return match largest(got) < noise.max(f64::MIN_POSITIVE) {
            true => (0.0, 0),
            false => (f64::INFINITY, 0),
        };
    }
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs() / scale)
        .enumerate()
        .fold(
            (0.0, 0),
            |(m, at), (k, e)| if e > m { (e, k) } else { (m, at) },
        )
}

/// A threaded per-device runtime with two CPU workers and the default storage, seeded.
#[allow(dead_code)]
pub fn threaded_runtime(seed: u64) -> Arc<Runtime> {
    let rt = Runtime::new(
        engine::EngineBuilder::new(engine::EngineKind::ThreadedPerDevice)
            .cpu_workers(2)
            .build(),
        storage::StorageConfig::default(),
    );
    rt.seed(seed).unwrap();
    rt
}

/// A threaded per-device runtime with the default settings.
#[allow(dead_code)]
pub fn rt() -> Arc<Runtime> {
    Runtime::with_engine(engine::EngineKind::ThreadedPerDevice)
}

/// Deterministic values in [-2, 2) without zeros (so division is tame).
#[allow(dead_code)]
pub fn data(shape: &[usize], seed: u64) -> ndarray::ArrayD<f64> {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = ((s >> 33) as f64 / (1u64 << 31) as f64) * 4.0 - 2.0;
            if x.abs() < 0.05 {
                0.5
            } else {
                x
            }
        })
        .collect();
    ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v).unwrap()
}

/// `got` equals `want` to 1e-9 relative (NaN where `want` is NaN).
#[allow(dead_code)]
pub fn close(got: &ndarray::ArrayD<f64>, want: &ndarray::ArrayD<f64>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (g, w) in got.iter().zip(want.iter()) {
        let ok = (g - w).abs() <= 1e-9 * (1.0 + w.abs()) || (g.is_nan() && w.is_nan());
        assert!(ok, "{what}: got {g}, want {w}");
    }
}

/// Op `name`'s first output, as f64.
#[allow(dead_code)]
pub fn run1(name: &str, inputs: &[&NDArray], attrs: &Attrs) -> ndarray::ArrayD<f64> {
    ndarray_ops::invoke(name, inputs, attrs, None).unwrap()[0]
        .to_ndarray::<f64>()
        .unwrap()
}

/// Smooth deterministic values in [-1, 1] (a sine of the index), different per seed.
#[allow(dead_code)]
pub fn wave(shape: &[usize], seed: u64) -> ndarray::ArrayD<f64> {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| ((i as f64 + 1.0) * 0.619 + seed as f64 * 2.3).sin())
        .collect();
    ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v).unwrap()
}

/// `a` as an NDArray on `cpu(0)`.
#[allow(dead_code)]
pub fn nd(rt: &Arc<Runtime>, a: &ndarray::ArrayD<f64>) -> NDArray {
    rt.from_array(a, Context::cpu(0)).unwrap()
}

/// `a` as an NDArray of `dtype` on `cpu(0)`: f32 (each value rounded) or f64.
#[allow(dead_code)]
pub fn nd_as(rt: &Arc<Runtime>, a: &ndarray::ArrayD<f64>, dtype: DType) -> NDArray {
    match dtype {
        DType::F32 => rt
            .from_array(&a.mapv(|v| v as f32), Context::cpu(0))
            .unwrap(),
        _ => nd(rt, a),
    }
}

/// Every output of op `name`, as f64.
#[allow(dead_code)]
pub fn run_all(name: &str, inputs: &[&NDArray], attrs: &Attrs) -> Vec<ndarray::ArrayD<f64>> {
    ndarray_ops::invoke(name, inputs, attrs, None)
        .unwrap()
        .iter()
        .map(|a| a.to_ndarray().unwrap())
        .collect()
}

/// A shape large enough that its kernels split their work across threads; under Miri (where
/// passes split from a few dozen elements, and every element costs thousands of times more) the
/// small one.
#[allow(dead_code)]
pub fn large<const N: usize>(full: [usize; N], miri: [usize; N]) -> [usize; N] {
    if cfg!(miri) {
        miri
    } else {
        full
    }
}
