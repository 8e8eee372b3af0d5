//! Several devices (CPU contexts with their own workers and pools): a graph placed on two
//! devices equals the same graph on one; data-parallel training over 2 and 4 devices matches one
//! device on the whole batch, and a learning rate set between steps governs the later ones; a
//! device out of memory fails its own bind, clearly, and nothing else.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::symbol::CTX_GROUP;
use ndarray_ops::{Attrs, BindOptions, DataParallel, Executor, Runtime, Sgd, Symbol};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use storage::{Context, StorageConfig};

mod common;

use common::{labels, mlp, random, seeded_data_parallel, shapes, sorted, step_random, train_over};

fn runtime(storage: StorageConfig) -> Arc<Runtime> {
    Runtime::new(
        EngineBuilder::new(EngineKind::ThreadedPerDevice)
            .cpu_workers(2)
            .jitter(Duration::from_micros(50))
            .build(),
        storage,
    )
}

/// What a placed run saw (outputs and gradients by name), where each node ran, the executor.
type Placed = (Vec<(String, Vec<f32>)>, Vec<(String, Context)>, Executor);

/// Binds `sym` (with `group2ctx`), sets seeded arguments, runs forward and backward twice;
/// returns the outputs, the gradients and where each node ran.
fn run_placed(rt: &Arc<Runtime>, sym: &Symbol, group2ctx: HashMap<String, Context>) -> Placed {
    let grad_req = common::write_grads(sym, &["label"]);
    let opts = BindOptions {
        grad_req,
        group2ctx,
        ..BindOptions::default()
    };
    let exec =
        Executor::bind_with_options(rt, Context::cpu(0), sym, &shapes(8), HashMap::new(), &opts)
            .unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let mut args: Vec<_> = exec.arg_dict().into_iter().collect();
    args.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seen = vec![];
    for round in 0..2 {
        for (name, a) in &args {
            let v = if name == "label" {
                labels(rt, 8, &mut rng)
            } else {
                random(rt, a.shape(), &mut rng, Context::cpu(0))
            };
            v.copy_into(a).unwrap();
        }
        exec.forward(true).unwrap();
        exec.backward().unwrap();
        seen.push((
            format!("output {round}"),
            exec.outputs()[0].to_vec().unwrap(),
        ));
        seen.extend(sorted(exec.grad_dict()));
    }
    (seen, exec.node_devices(), exec)
}

#[test]
fn a_graph_placed_on_two_devices_equals_the_graph_on_one() {
    let rt = runtime(StorageConfig::default());
    let (cpu0, cpu1) = (Context::cpu(0), Context::cpu(1));
    let (single, _, _) = run_placed(&rt, &mlp(false), HashMap::new());
    let groups = HashMap::from([("a".to_string(), cpu0), ("b".to_string(), cpu1)]);
    let (placed, devices, exec) = run_placed(&rt, &mlp(true), groups);
    assert_eq!(placed, single, "outputs and gradients on two devices");
    let device = |name: &str| {
        devices
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no node {name}"))
            .1
    };
    // Annotated nodes, their backward nodes, and weights by their consumers.
    assert_eq!(device("fc0"), cpu0);
    assert_eq!(device("fc2"), cpu1);
    assert_eq!(device("fc2_backward"), cpu1);
    assert_eq!(device("fc1_backward"), cpu0);
    assert_eq!(device("fc2_weight"), cpu1);
    assert_eq!(device("fc0_weight"), cpu0);
    assert_eq!(exec.arg_dict()["fc2_weight"].ctx(), cpu1);
    assert_eq!(exec.grad_dict()["fc2_weight"].ctx(), cpu1);
    // One copy forward (act1 to b), one backward (the gradient of act1 back to a), and the
    // data gradient, made on a, wanted where the data lives.
    let copies: Vec<_> = devices
        .iter()
        .filter(|(n, _)| n.contains("_copy_to_"))
        .collect();
    assert!(copies.len() >= 2, "{copies:?}");
    let per_device = exec.memory_by_device();
    assert_eq!(
        per_device.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        vec![cpu0, cpu1]
    );
    assert!(per_device.iter().all(|(_, m)| m.allocated_bytes > 0));
}

#[test]
fn wrong_annotations_are_clear_errors() {
    let rt = runtime(StorageConfig::default());
    let only_a = HashMap::from([("a".to_string(), Context::cpu(0))]);
    let opts = BindOptions {
        group2ctx: only_a,
        ..BindOptions::default()
    };
    let err = Executor::bind_with_options(
        &rt,
        Context::cpu(0),
        &mlp(true),
        &shapes(4),
        HashMap::new(),
        &opts,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("'b'") && err.contains("fc2"), "{err}");

    // BatchNorm on cpu(1) updating moving statistics that live on cpu(0).
    let x = Symbol::var("x");
    let stat = |n: &str| Symbol::var_with(n, Attrs::new().with(CTX_GROUP, "a"));
    let bn = Symbol::op(
        "BatchNorm",
        "bn",
        &[
            &x,
            &Symbol::var("gamma"),
            &Symbol::var("beta"),
            &stat("mean"),
            &stat("var"),
        ],
        Attrs::new().with(CTX_GROUP, "b"),
    )
    .unwrap();
    let opts = BindOptions {
        group2ctx: HashMap::from([
            ("a".to_string(), Context::cpu(0)),
            ("b".to_string(), Context::cpu(1)),
        ]),
        ..BindOptions::default()
    };
    let x_shape = HashMap::from([("x".to_string(), vec![4, 3])]);
    let err =
        Executor::bind_with_options(&rt, Context::cpu(0), &bn, &x_shape, HashMap::new(), &opts)
            .err()
            .unwrap()
            .to_string();
    assert!(err.contains("two devices") && err.contains("mean"), "{err}");

    // A given array on another device than its variable's group.
    let given = HashMap::from([(
        "fc2_weight".to_string(),
        rt.zeros(&[10, 24], ndarray_ops::DType::F32, Context::cpu(0))
            .unwrap(),
    )]);
    let opts = BindOptions {
        group2ctx: HashMap::from([
            ("a".to_string(), Context::cpu(0)),
            ("b".to_string(), Context::cpu(1)),
        ]),
        ..BindOptions::default()
    };
    let err =
        Executor::bind_with_options(&rt, Context::cpu(0), &mlp(true), &shapes(4), given, &opts)
            .err()
            .unwrap()
            .to_string();
    assert!(
        err.contains("fc2_weight") && err.contains("cpu(1)"),
        "{err}"
    );
}

/// Three seeded steps over two and four devices end at one device's weights.
#[test]
fn data_parallel_training_over_two_and_four_devices_matches_one_device() {
    let rt = runtime(StorageConfig::default());
    let one = train_over(&rt, &[Context::cpu(0)]);
    for n in [2, 4] {
        let contexts: Vec<Context> = (0..n).map(Context::cpu).collect();
        let many = train_over(&rt, &contexts);
        for ((name, a), (_, b)) in many.iter().zip(&one) {
            let worst = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0f32, f32::max);
            assert!(worst < 1e-5, "{n} devices: {name} differs by {worst}");
        }
        assert_eq!(many.len(), one.len());
    }
}

/// A learning rate set between steps (a schedule) governs the steps pushed after it and no
/// step pushed before: plain SGD at rate 0 leaves every weight as it was.
#[test]
fn a_learning_rate_set_between_steps_applies_to_the_later_steps() {
    let rt = runtime(StorageConfig::default());
    let sgd = Sgd {
        lr: 0.5,
        momentum: 0.0,
        wd: 0.0,
    };
    let contexts = [Context::cpu(0), Context::cpu(1)];
    let (mut dp, mut rng, start) = seeded_data_parallel(&rt, &contexts, 8, sgd, 3);
    let mut step = |dp: &DataParallel| step_random(&rt, dp, 8, &mut rng);
    let moved = |a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)]| {
        a.iter().zip(b).all(|((name, x), (_, y))| {
            assert_eq!(x.len(), y.len(), "{name}");
            x.iter().zip(y).any(|(p, q)| p != q)
        })
    };
    // Pushed at 0.5, then the rate drops before the step has run.
    step(&dp);
    dp.set_lr(0.0).unwrap();
    dp.wait().unwrap();
    let first = sorted(dp.params());
    assert!(
        moved(&first, &start),
        "the step pushed at 0.5 moved every weight"
    );
    step(&dp);
    step(&dp);
    dp.wait().unwrap();
    assert_eq!(
        sorted(dp.params()),
        first,
        "steps at rate 0 changed a weight"
    );
    dp.set_lr(0.5).unwrap();
    step(&dp);
    dp.wait().unwrap();
    assert!(moved(&sorted(dp.params()), &first), "back at 0.5");
}

#[test]
fn a_device_over_its_memory_limit_fails_its_bind_and_the_others_keep_working() {
    let storage = StorageConfig {
        limits: HashMap::from([(Context::cpu(1), 4096)]),
        ..StorageConfig::default()
    };
    let rt = runtime(storage);
    let big = HashMap::from([
        ("data".to_string(), vec![64, 20]),
        ("label".to_string(), vec![64]),
    ]);
    let err = Executor::simple_bind(&rt, Context::cpu(1), &mlp(false), &big)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("cpu(1)") && err.contains("limit"), "{err}");
    // The same failure through data parallelism names the device.
    let sgd = Sgd {
        lr: 0.1,
        momentum: 0.0,
        wd: 0.0,
    };
    let contexts = [Context::cpu(0), Context::cpu(1)];
    let err = DataParallel::new(&rt, &mlp(false), &contexts, &big, &["data", "label"], sgd)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("binding on cpu(1)"), "{err}");
    // cpu(0) is unaffected.
    let exec = Executor::simple_bind(&rt, Context::cpu(0), &mlp(false), &big).unwrap();
    exec.forward(false).unwrap();
    assert_eq!(exec.outputs()[0].to_vec::<f32>().unwrap().len(), 640);
    rt.wait_all().unwrap();
}

/// Trains the MLP for three steps on `ctx` (seeded data and weights); returns the weights.
fn train_alone(rt: &Arc<Runtime>, ctx: Context) -> Vec<(String, Vec<f32>)> {
    let grad_req = common::write_grads(&mlp(false), &["data", "label"]);
    let opts = BindOptions {
        grad_req,
        ..BindOptions::default()
    };
    let exec = Executor::bind_with_options(rt, ctx, &mlp(false), &shapes(8), HashMap::new(), &opts)
        .unwrap();
    let mut rng = StdRng::seed_from_u64(21);
    let args = exec.arg_dict();
    let mut names: Vec<&String> = args.keys().collect();
    names.sort();
    for name in &names {
        random(rt, args[*name].shape(), &mut rng, Context::cpu(0))
            .copy_into(&args[*name])
            .unwrap();
    }
    let grads = exec.grad_dict();
    let sgd = Attrs::new().with("lr", 0.1);
    for _ in 0..3 {
        random(rt, &[8, 20], &mut rng, Context::cpu(0))
            .copy_into(&args["data"])
            .unwrap();
        labels(rt, 8, &mut rng).copy_into(&args["label"]).unwrap();
        exec.forward(true).unwrap();
        exec.backward().unwrap();
        for name in &names {
            if let Some(g) = grads.get(*name) {
                let w = &args[*name];
                ndarray_ops::invoke("sgd_update", &[w, g], &sgd, Some(&[w])).unwrap();
            }
        }
    }
    sorted(exec.arg_dict())
}

#[test]
fn executors_driven_from_several_threads_on_their_own_devices_match_one_thread() {
    let reference = train_alone(
        &Runtime::new(
            EngineBuilder::new(EngineKind::Naive).build(),
            StorageConfig::default(),
        ),
        Context::cpu(0),
    );
    let rt = runtime(StorageConfig::default());
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let rt = rt.clone();
                s.spawn(move || train_alone(&rt, Context::cpu(i)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r, &reference, "the executor on cpu({i})");
    }
    // Each device's pool served its own executor.
    let used: Vec<Context> = rt
        .storage_managers()
        .iter()
        .filter(|m| m.stats().peak_in_use > 0)
        .map(|m| m.ctx())
        .collect();
    assert!((0..4).all(|i| used.contains(&Context::cpu(i))), "{used:?}");
}

#[test]
fn data_parallel_refuses_bad_batches_before_pushing_anything() {
    let rt = runtime(StorageConfig::default());
    let sgd = Sgd {
        lr: 0.1,
        momentum: 0.0,
        wd: 0.0,
    };
    let contexts = [Context::cpu(0), Context::cpu(1)];
    let dp = DataParallel::new(
        &rt,
        &mlp(false),
        &contexts,
        &shapes(8),
        &["data", "label"],
        sgd,
    )
    .unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let before = sorted(dp.params());
    let y = labels(&rt, 8, &mut rng);
    for (x, what) in [
        (random(&rt, &[6, 20], &mut rng, Context::cpu(0)), "[6, 20]"),
        (random(&rt, &[8, 21], &mut rng, Context::cpu(0)), "[8, 21]"),
    ] {
        let err = dp
            .step(&[("label", &y), ("data", &x)])
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("'data'") && err.contains(what) && err.contains("[8, 20]"),
            "{err}"
        );
    }
    let err = dp.step(&[("nope", &y)]).err().unwrap().to_string();
    assert!(err.contains("'nope'"), "{err}");
    assert!(DataParallel::new(&rt, &mlp(false), &[], &shapes(8), &["data"], sgd).is_err());
    let twice = [Context::cpu(0), Context::cpu(0)];
    let err = DataParallel::new(
        &rt,
        &mlp(false),
        &twice,
        &shapes(8),
        &["data", "label"],
        sgd,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("twice"), "{err}");
    dp.wait().unwrap();
    assert_eq!(sorted(dp.params()), before, "nothing ran");
    // The labels were not loaded either: a good step still works.
    let x = random(&rt, &[8, 20], &mut rng, Context::cpu(0));
    dp.step(&[("data", &x), ("label", &y)]).unwrap();
    dp.wait().unwrap();
}

#[test]
fn random_graphs_placed_on_three_devices_equal_one_device_without_reuse() {
    let mut rng = StdRng::seed_from_u64(77);
    let reference_rt = Runtime::new(
        EngineBuilder::new(EngineKind::Naive).build(),
        StorageConfig::default(),
    );
    let rt = Runtime::new(
        EngineBuilder::new(EngineKind::ThreadedPerDevice)
            .cpu_workers(2)
            .bulk_size(1)
            .jitter(Duration::from_micros(200))
            .build(),
        StorageConfig::default(),
    );
    let group2ctx: HashMap<String, Context> = [("a", 0), ("b", 1), ("c", 2)]
        .into_iter()
        .map(|(g, i)| (g.to_string(), Context::cpu(i)))
        .collect();
    let mut crossing = 0;
    for case in 0..25 {
        let weights = rng.gen_range(1..4);
        let sym = common::random_graph(&mut rng, weights, &["a", "b", "c"]);
        let n = rng.gen_range(64..512);
        let no_reuse = BindOptions {
            memory: ndarray_ops::MemoryPlanning::NoReuse,
            ..BindOptions::default()
        };
        let reference = common::run_passes(&reference_rt, &sym, n, case, no_reuse);
        let placed = BindOptions {
            group2ctx: group2ctx.clone(),
            ..BindOptions::default()
        };
        let got = common::run_passes(&rt, &sym, n, case, placed.clone());
        assert_eq!(got, reference, "case {case}");
        let shapes = sym
            .list_arguments()
            .into_iter()
            .map(|a| (a, vec![n]))
            .collect();
        let exec = Executor::bind_with_options(
            &rt,
            Context::cpu(0),
            &sym,
            &shapes,
            HashMap::new(),
            &placed,
        )
        .unwrap();
        if exec.memory_by_device().len() > 1 {
            crossing += 1;
        }
    }
    // The test only means something if graphs do span devices.
    assert!(crossing >= 20, "only {crossing} of 25 graphs span devices");
}
