//! The executor's planned arena: safe under the threaded engine (random wide graphs with random
//! delays equal the Naive engine without reuse, bit for bit) and invisible to training (the same
//! weights, bit for bit, as training without reuse).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::{
    invoke, Attrs, BindOptions, DType, Executor, GradReq, MemoryPlanning, NDArray, Runtime, Symbol,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use storage::{Context, StorageConfig};

mod common;

const CPU: Context = Context::cpu(0);

fn naive() -> Arc<Runtime> {
    Runtime::new(
        EngineBuilder::new(EngineKind::Naive).build(),
        StorageConfig::default(),
    )
}

/// Four compute workers on two cores, each op delayed up to `jitter`, bulking off so that every
/// node is scheduled on its own.
fn threaded(jitter: Duration) -> Arc<Runtime> {
    Runtime::new(
        EngineBuilder::new(EngineKind::ThreadedPerDevice)
            .cpu_workers(4)
            .bulk_size(1)
            .jitter(jitter)
            .build(),
        StorageConfig::default(),
    )
}

#[test]
fn random_wide_graphs_on_the_threaded_engine_with_reuse_equal_naive_without_reuse() {
    let mut rng = StdRng::seed_from_u64(2026);
    let reference_rt = naive();
    let rt = threaded(Duration::from_micros(300));
    let mut shared = 0;
    for case in 0..40 {
        let weights = rng.gen_range(1..4);
        let sym = common::random_graph(&mut rng, weights, &[]);
        let n = rng.gen_range(256..2048);
        // The reference writes every weight's gradient. Odd cases accumulate some of them
        // instead (added in the backward pass, right after the node that makes them): those
        // must read g1 after the first backward and g1 + g2 after the second.
        let mut weights: Vec<String> = sym
            .list_arguments()
            .into_iter()
            .filter(|a| a.starts_with('w'))
            .collect();
        weights.sort();
        let adds: Vec<bool> = weights
            .iter()
            .map(|_| case % 2 == 1 && rng.gen_bool(0.6))
            .collect();
        let no_reuse = BindOptions {
            memory: MemoryPlanning::NoReuse,
            ..BindOptions::default()
        };
        let reference = common::run_passes(&reference_rt, &sym, n, case, no_reuse);
        let with_reuse = BindOptions {
            grad_req: weights
                .iter()
                .zip(&adds)
                .map(|(w, &add)| (w.clone(), if add { GradReq::Add } else { GradReq::Write }))
                .collect(),
            ..BindOptions::default()
        };
        let planned = common::run_passes(&rt, &sym, n, case, with_reuse);
        let mut expected = reference.clone();
        let per_pass = 1 + weights.len();
        for (j, _) in adds.iter().enumerate().filter(|(_, add)| **add) {
            let (first, second) = (1 + j, per_pass + 1 + j);
            let sum: Vec<f32> = reference[first]
                .iter()
                .zip(&reference[second])
                .map(|(a, b)| a + b)
                .collect();
            expected[second] = sum;
        }
        assert_eq!(planned, expected, "case {case}: {:?}", sym.list_outputs());
        let shapes = sym
            .list_arguments()
            .into_iter()
            .map(|a| (a, vec![n]))
            .collect();
        let exec = Executor::simple_bind(&rt, CPU, &sym, &shapes).unwrap();
        let m = exec.memory_report();
        // Each buffer starts on a 64-byte boundary: a graph with nothing to reuse (a few
        // entries, all live together once fused) may round up past the sum of its entries.
        assert!(
            m.allocated_bytes <= m.no_reuse_bytes + 64 * m.entries as u64,
            "case {case}: {m:?}"
        );
        if m.allocated_bytes < m.no_reuse_bytes {
            shared += 1;
        }
    }
    // The test only means something if the plans do reuse memory.
    assert!(shared >= 30, "only {shared} of 40 graphs reuse memory");
}

/// A small convolutional net: Convolution, BatchNorm, relu, pooling, two dense layers, softmax.
fn convnet() -> Symbol {
    let op = |op: &str, name: &str, ins: &[&Symbol], attrs: Attrs| {
        Symbol::op(op, name, ins, attrs).unwrap()
    };
    let data = Symbol::var("data");
    let c = op(
        "Convolution",
        "conv",
        &[
            &data,
            &Symbol::var("conv_weight"),
            &Symbol::var("conv_bias"),
        ],
        Attrs::new()
            .with("kernel", "(3, 3)")
            .with("num_filter", 6)
            .with("pad", "(1, 1)"),
    );
    let bn = op(
        "BatchNorm",
        "bn",
        &[
            &c,
            &Symbol::var("bn_gamma"),
            &Symbol::var("bn_beta"),
            &Symbol::var("bn_moving_mean"),
            &Symbol::var("bn_moving_var"),
        ],
        Attrs::new(),
    );
    let r = op(
        "Activation",
        "relu",
        &[&bn],
        Attrs::new().with("act_type", "relu"),
    );
    let p = op(
        "Pooling",
        "pool",
        &[&r],
        Attrs::new()
            .with("kernel", "(2, 2)")
            .with("stride", "(2, 2)")
            .with("pool_type", "max"),
    );
    let mut h = op("Flatten", "flat", &[&p], Attrs::new());
    for (i, hidden) in [(0, 32), (1, 10)] {
        let w = Symbol::var(&format!("fc{i}_weight"));
        let b = Symbol::var(&format!("fc{i}_bias"));
        h = op(
            "FullyConnected",
            &format!("fc{i}"),
            &[&h, &w, &b],
            Attrs::new().with("num_hidden", hidden),
        );
        if i == 0 {
            h = op(
                "Activation",
                "fc_relu",
                &[&h],
                Attrs::new().with("act_type", "tanh"),
            );
        }
    }
    op(
        "SoftmaxOutput",
        "softmax",
        &[&h, &Symbol::var("label")],
        Attrs::new(),
    )
}

/// Trains `sym` for a few SGD-with-momentum steps on seeded random batches; returns every
/// weight, auxiliary state and the last output.
fn train(rt: &Arc<Runtime>, sym: &Symbol, memory: MemoryPlanning) -> Vec<(String, Vec<f32>)> {
    let batch = 16;
    let shapes = HashMap::from([
        ("data".to_string(), vec![batch, 1, 8, 8]),
        ("label".to_string(), vec![batch]),
    ]);
    let grad_req = common::write_grads(sym, &["data", "label"]);
    let opts = BindOptions {
        memory,
        grad_req,
        ..BindOptions::default()
    };
    let exec = Executor::bind_with_options(rt, CPU, sym, &shapes, HashMap::new(), &opts).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let mut args: Vec<_> = exec.arg_dict().into_iter().collect();
    args.sort_by(|a, b| a.0.cmp(&b.0));
    let set = |a: &NDArray, lo: f32, hi: f32, rng: &mut StdRng| {
        let v: Vec<f32> = (0..a.size()).map(|_| rng.gen_range(lo..hi)).collect();
        rt.from_vec(v, a.shape(), CPU)
            .unwrap()
            .copy_into(a)
            .unwrap();
    };
    for (name, a) in &args {
        if name.ends_with("gamma") {
            a.fill(1.0).unwrap();
        } else if name != "label" {
            set(a, -0.3, 0.3, &mut rng);
        }
    }
    let grads = exec.grad_dict();
    let moms: HashMap<String, NDArray> = grads
        .iter()
        .map(|(k, g)| (k.clone(), rt.zeros(g.shape(), DType::F32, CPU).unwrap()))
        .collect();
    let sgd = Attrs::new()
        .with("lr", 0.1)
        .with("momentum", 0.9)
        .with("wd", 1e-4)
        .with("rescale_grad", 1.0 / batch as f64);
    let arg_dict = exec.arg_dict();
    for _ in 0..5 {
        set(&arg_dict["data"], 0.0, 1.0, &mut rng);
        let labels: Vec<f32> = (0..batch).map(|_| rng.gen_range(0..10) as f32).collect();
        rt.from_vec(labels, &[batch], CPU)
            .unwrap()
            .copy_into(&arg_dict["label"])
            .unwrap();
        exec.forward(true).unwrap();
        exec.backward().unwrap();
        let mut names: Vec<_> = grads.keys().cloned().collect();
        names.sort();
        for k in names {
            let (w, g, m) = (&arg_dict[&k], &grads[&k], &moms[&k]);
            invoke("sgd_mom_update", &[w, g, m], &sgd, Some(&[w, m])).unwrap();
        }
    }
    let mut out: Vec<(String, Vec<f32>)> = exec
        .arg_dict()
        .into_iter()
        .chain(exec.aux_dict())
        .map(|(k, v)| (k, v.to_vec::<f32>().unwrap()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.push(("output".into(), exec.outputs()[0].to_vec().unwrap()));
    out
}

#[test]
fn training_with_the_planned_arena_is_bit_identical_to_training_without_reuse() {
    let sym = convnet();
    let reference = train(&naive(), &sym, MemoryPlanning::NoReuse);
    let rt = threaded(Duration::from_micros(100));
    let planned = train(&rt, &sym, MemoryPlanning::default());
    assert_eq!(planned.len(), reference.len());
    for ((name, a), (_, b)) in planned.iter().zip(&reference) {
        assert!(
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{name} differs"
        );
    }
    // The arena is smaller than the entries it holds.
    let shapes = HashMap::from([
        ("data".to_string(), vec![16, 1, 8, 8]),
        ("label".to_string(), vec![16]),
    ]);
    let m = Executor::simple_bind(&rt, CPU, &sym, &shapes)
        .unwrap()
        .memory_report();
    assert!(m.allocated_bytes < m.no_reuse_bytes, "{m:?}");
    assert!(m.inplace > 0, "{m:?}");
}

fn v(a: &NDArray) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

#[test]
fn assignments_write_their_variables_in_place() {
    let rt = threaded(Duration::from_micros(20));
    let (w, x, g, m) = (
        Symbol::var("w"),
        Symbol::var("x"),
        Symbol::var("g"),
        Symbol::var("m"),
    );
    // Every variable of these graphs is 256 long.
    let shapes = |sym: &Symbol| -> HashMap<String, Vec<usize>> {
        sym.list_arguments()
            .into_iter()
            .map(|n| (n, vec![256]))
            .collect()
    };
    let set = |exec: &Executor, name: &str, value: f32| {
        exec.arg_dict()[name].fill(f64::from(value)).unwrap();
    };

    // Case 2: w = w - 0.5 * x, with the right-hand side read only by the assign, is computed
    // straight into w; nothing internal remains but the scaled x.
    let scaled = Symbol::op(
        "_mul_scalar",
        "scaled",
        &[&x],
        Attrs::new().with("scalar", 0.5),
    )
    .unwrap();
    let rhs = Symbol::op("elemwise_sub", "rhs", &[&w, &scaled], Attrs::new()).unwrap();
    let assign = Symbol::op("_assign", "assign", &[&w, &rhs], Attrs::new()).unwrap();
    let exec = Executor::simple_bind(&rt, CPU, &assign, &shapes(&assign)).unwrap();
    set(&exec, "w", 3.0);
    set(&exec, "x", 2.0);
    exec.forward(false).unwrap();
    exec.forward(false).unwrap();
    assert_eq!(v(&exec.arg_dict()["w"]), vec![1.0; 256]);
    assert!(exec.outputs()[0].shares_chunk(&exec.arg_dict()["w"]));
    // Fused, `scaled` and `rhs` are one elementwise node computed straight into w.
    assert_eq!(exec.memory_report().allocated_bytes, 0);
    let unfused = BindOptions {
        fusion: Some(false),
        ..BindOptions::default()
    };
    let exec = Executor::bind_with_options(
        &rt,
        CPU,
        &assign,
        &shapes(&assign),
        HashMap::new(),
        &unfused,
    )
    .unwrap();
    set(&exec, "w", 3.0);
    set(&exec, "x", 2.0);
    exec.forward(false).unwrap();
    exec.forward(false).unwrap();
    assert_eq!(v(&exec.arg_dict()["w"]), vec![1.0; 256]);
    assert!(exec.outputs()[0].shares_chunk(&exec.arg_dict()["w"]));
    let m2 = exec.memory_report();
    assert_eq!(
        m2.allocated_bytes, 1024,
        "unfused, only `scaled` is internal: {m2:?}"
    );
    assert!(exec.debug_str().contains("assign"));

    // Case 3: the right-hand side is also an output, so the assign copies it.
    let both = Symbol::group(&[assign.clone(), rhs.clone()]);
    let exec = Executor::simple_bind(&rt, CPU, &both, &shapes(&both)).unwrap();
    set(&exec, "w", 3.0);
    set(&exec, "x", 2.0);
    exec.forward(false).unwrap();
    assert_eq!(v(&exec.arg_dict()["w"]), vec![2.0; 256]);
    assert_eq!(v(&exec.outputs()[1]), vec![2.0; 256]);
    assert!(!exec.outputs()[1].shares_chunk(&exec.arg_dict()["w"]));

    // Case 1: an optimizer update keeps its results in the weight and the momentum.
    let upd = Symbol::op(
        "sgd_mom_update",
        "upd",
        &[&w, &g, &m],
        Attrs::new().with("lr", 0.1).with("momentum", 0.5),
    )
    .unwrap();
    let exec = Executor::simple_bind(&rt, CPU, &upd, &shapes(&upd)).unwrap();
    set(&exec, "w", 1.0);
    set(&exec, "g", 2.0);
    set(&exec, "m", 0.0);
    exec.forward(false).unwrap();
    exec.forward(false).unwrap();
    // m: 0 -> -0.2 -> -0.3; w: 1 -> 0.8 -> 0.5.
    let w_now = v(&exec.arg_dict()["w"]);
    assert!((w_now[0] - 0.5).abs() < 1e-6, "{w_now:?}");
    let m_now = v(&exec.arg_dict()["m"]);
    assert!((m_now[0] + 0.3).abs() < 1e-6, "{m_now:?}");
    assert_eq!(exec.memory_report().allocated_bytes, 0);

    // A later reader of the variable keeps the update out of place: it must see the old value.
    let old_plus = Symbol::op(
        "_plus_scalar",
        "old",
        &[&w],
        Attrs::new().with("scalar", 0.0),
    )
    .unwrap();
    let upd = Symbol::op(
        "sgd_update",
        "upd2",
        &[&w, &g],
        Attrs::new().with("lr", 0.1),
    )
    .unwrap();
    let later = Symbol::group(&[upd, old_plus]);
    let exec = Executor::simple_bind(&rt, CPU, &later, &shapes(&later)).unwrap();
    set(&exec, "w", 1.0);
    set(&exec, "g", 2.0);
    exec.forward(false).unwrap();
    assert_eq!(v(&exec.arg_dict()["w"]), vec![1.0; 256]);
    let new_w = v(&exec.outputs()[0]);
    assert!((new_w[0] - 0.8).abs() < 1e-6);
    assert_eq!(v(&exec.outputs()[1]), vec![1.0; 256]);
}

#[test]
fn a_bind_takes_one_block_per_device_with_long_lived_arrays_at_its_top() {
    let rt = threaded(Duration::ZERO);
    let ctx = Context::cpu(5);
    let sym = convnet();
    let shapes = HashMap::from([
        ("data".to_string(), vec![16, 1, 8, 8]),
        ("label".to_string(), vec![16]),
    ]);
    let grad_req = common::write_grads(&sym, &["data", "label"]);
    let before = rt.storage(ctx).stats().allocs;
    let exec = Executor::simple_bind_grad(&rt, ctx, &sym, &shapes, &grad_req).unwrap();
    assert_eq!(
        rt.storage(ctx).stats().allocs - before,
        1,
        "one block for the whole bind"
    );
    // Weights, auxiliary states and gradients sit above the arena, 64-byte aligned, in the block.
    let m = exec.memory_report();
    let aligned = |a: &NDArray| ((a.size() * a.dtype().size()).div_ceil(64) * 64) as u64;
    let expect: u64 = exec
        .arg_dict()
        .values()
        .chain(exec.aux_dict().values())
        .chain(exec.grad_dict().values())
        .map(aligned)
        .sum();
    assert_eq!(m.long_lived_bytes, expect);
    let block = rt.storage(ctx).stats().in_use as u64;
    assert!(
        block >= m.allocated_bytes + m.long_lived_bytes,
        "{block} {m:?}"
    );
    // Moving variances start at one, everything else at zero.
    assert!(exec.aux_dict()["bn_moving_var"]
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .all(|&v| v == 1.0));
    assert!(exec.grad_dict()["fc0_weight"]
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .all(|&v| v == 0.0));
    // Dropping the executor returns the block once every op on it is done; arrays a user still
    // holds keep it alive.
    let kept = exec.arg_dict()["fc1_weight"].clone();
    drop(exec);
    rt.wait_all().unwrap();
    assert!(rt.storage(ctx).stats().in_use > 0);
    assert_eq!(kept.to_vec::<f32>().unwrap().len(), 10 * 32);
    drop(kept);
    rt.wait_all().unwrap();
    assert_eq!(rt.storage(ctx).stats().in_use, 0);
}
