//! A failing batch is reported once, and everything is usable after it: an executor, a
//! data-parallel trainer and autograd each run a failing batch (a `take` in mode `raise` given an
//! index out of range), report it at the first wait, and then compute the next valid batch
//! exactly as a twin that never saw the failure.

use std::collections::HashMap;
use std::sync::Arc;

mod common;

use ndarray_ops::{autograd, invoke, Attrs, DataParallel, Executor, GradReq, NDArray, Runtime};
use ndarray_ops::{Sgd, Symbol};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use storage::Context;

const CPU: Context = Context::cpu(0);
/// Rows of the lookup table; an index of `ROWS` or more makes `take` fail.
const ROWS: usize = 12;
const BATCH: usize = 8;

/// `take(table, idx, mode=raise)`, a dense layer and a softmax loss.
fn lookup_net() -> Symbol {
    let raise = Attrs::new().with("mode", "raise");
    let rows = Symbol::op(
        "take",
        "lookup",
        &[&Symbol::var("table"), &Symbol::var("idx")],
        raise,
    )
    .unwrap();
    let (w, b) = (Symbol::var("fc_weight"), Symbol::var("fc_bias"));
    let fc = Symbol::op(
        "FullyConnected",
        "fc",
        &[&rows, &w, &b],
        Attrs::new().with("num_hidden", 5),
    )
    .unwrap();
    Symbol::op(
        "SoftmaxOutput",
        "softmax",
        &[&fc, &Symbol::var("label")],
        Attrs::new(),
    )
    .unwrap()
}

fn shapes() -> HashMap<String, Vec<usize>> {
    HashMap::from([
        ("idx".to_string(), vec![BATCH]),
        ("label".to_string(), vec![BATCH]),
        ("table".to_string(), vec![ROWS, 6]),
    ])
}

/// A batch of indices and labels; with `bad`, index `bad` is out of range.
fn batch(rt: &Arc<Runtime>, rng: &mut StdRng, bad: Option<usize>) -> (NDArray, NDArray) {
    let mut idx: Vec<f32> = (0..BATCH).map(|_| rng.gen_range(0..ROWS) as f32).collect();
    if let Some(k) = bad {
        idx[k] = (ROWS + 87) as f32;
    }
    let label: Vec<f32> = (0..BATCH).map(|_| rng.gen_range(0..5) as f32).collect();
    (
        rt.from_vec(idx, &[BATCH], CPU).unwrap(),
        rt.from_vec(label, &[BATCH], CPU).unwrap(),
    )
}

/// Every argument but the batch, seeded.
fn params(
    rt: &Arc<Runtime>,
    seed: u64,
    shapes: &HashMap<String, Vec<usize>>,
) -> Vec<(String, NDArray)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut names: Vec<_> = shapes
        .iter()
        .filter(|(n, _)| *n != "idx" && *n != "label")
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|(n, s)| (n.clone(), common::random(rt, s, &mut rng, CPU)))
        .collect()
}

fn values(m: HashMap<String, NDArray>) -> Vec<(String, Vec<f32>)> {
    common::sorted(m)
}

fn expect_take_failure(err: impl std::fmt::Display) {
    let err = err.to_string();
    assert!(err.contains("take") || err.contains("lookup"), "{err}");
}

#[test]
fn an_executor_is_usable_after_a_failed_batch() {
    let rt = common::threaded_runtime(3);
    let sym = lookup_net();
    let bind_shapes = shapes();
    let reqs = common::write_grads(&sym, &["idx", "label"]);
    let bind = |rt: &Arc<Runtime>| {
        let exec = Executor::simple_bind_grad(rt, CPU, &sym, &bind_shapes, &reqs).unwrap();
        let args = exec.arg_dict();
        let arg_shapes = args.iter().map(|(k, v)| (k.clone(), v.shape().to_vec()));
        for (name, a) in params(rt, 5, &arg_shapes.collect()) {
            a.copy_into(&args[&name]).unwrap();
        }
        exec
    };
    let (exec, twin) = (bind(&rt), bind(&rt));
    let run = |exec: &Executor, (idx, label): &(NDArray, NDArray)| {
        idx.copy_into(&exec.arg_dict()["idx"]).unwrap();
        label.copy_into(&exec.arg_dict()["label"]).unwrap();
        exec.forward(true).unwrap();
        exec.backward().unwrap();
    };
    let mut rng = StdRng::seed_from_u64(9);
    let bad = batch(&rt, &mut rng, Some(3));
    let good: Vec<_> = (0..3).map(|_| batch(&rt, &mut rng, None)).collect();

    run(&exec, &bad);
    // Reported at the first wait that reaches it (the output), then by nothing else.
    expect_take_failure(exec.outputs()[0].to_vec::<f32>().unwrap_err());
    exec.outputs()[0].wait_to_read().unwrap();
    rt.wait_all().unwrap();
    for b in &good {
        run(&exec, b);
        run(&twin, b);
        assert_eq!(
            exec.outputs()[0].to_vec::<f32>().unwrap(),
            twin.outputs()[0].to_vec::<f32>().unwrap()
        );
        assert_eq!(values(exec.grad_dict()), values(twin.grad_dict()));
    }

    // A failing batch reported by wait_all instead: the same.
    run(&exec, &bad);
    expect_take_failure(rt.wait_all().unwrap_err());
    rt.wait_all().unwrap();
    run(&exec, &good[0]);
    run(&twin, &good[0]);
    assert_eq!(values(exec.grad_dict()), values(twin.grad_dict()));
}

#[test]
fn a_data_parallel_trainer_is_usable_after_a_failed_step() {
    let rt = common::threaded_runtime(4);
    let sgd = Sgd {
        lr: 0.3,
        momentum: 0.9,
        wd: 0.0,
    };
    let contexts = [Context::cpu(0), Context::cpu(1)];
    let make = || {
        let dp = DataParallel::new(
            &rt,
            &lookup_net(),
            &contexts,
            &shapes(),
            &["idx", "label"],
            sgd,
        )
        .unwrap();
        let shapes: HashMap<String, Vec<usize>> = dp
            .params()
            .iter()
            .map(|(k, a)| (k.clone(), a.shape().to_vec()))
            .collect();
        dp.set_params(&params(&rt, 6, &shapes).into_iter().collect())
            .unwrap();
        dp
    };
    let (dp, twin) = (make(), make());
    let mut rng = StdRng::seed_from_u64(11);
    let steps: Vec<_> = (0..4).map(|_| batch(&rt, &mut rng, None)).collect();
    // The bad index lies in the second device's rows.
    let bad = batch(&rt, &mut rng, Some(BATCH - 1));
    let step = |dp: &DataParallel, (idx, label): &(NDArray, NDArray)| {
        dp.step(&[("idx", idx), ("label", label)]).unwrap()
    };
    step(&dp, &steps[0]);
    step(&dp, &steps[1]);
    step(&dp, &bad);
    expect_take_failure(rt.wait_all().unwrap_err());
    rt.wait_all().unwrap();
    step(&dp, &steps[2]);
    step(&dp, &steps[3]);
    for s in &steps {
        step(&twin, s);
    }
    // The failed step changed nothing (its update was skipped on every device), so the weights
    // are the twin's, bit for bit.
    assert_eq!(values(dp.params()), values(twin.params()));
}

#[test]
fn autograd_is_usable_after_a_failed_step() {
    let rt = common::threaded_runtime(5);
    let mut rng = StdRng::seed_from_u64(13);
    let mut table = common::random(&rt, &[ROWS, 6], &mut rng, CPU);
    table.attach_grad(GradReq::Write).unwrap();
    let raise = Attrs::new().with("mode", "raise");
    let step = |idx: &NDArray| {
        let loss = autograd::record(|| {
            let rows = invoke("take", &[&table, idx], &raise, None)
                .unwrap()
                .remove(0);
            let sq = invoke("square", &[&rows], &Attrs::new(), None)
                .unwrap()
                .remove(0);
            invoke("sum", &[&sq], &Attrs::new(), None)
                .unwrap()
                .remove(0)
        });
        loss.backward().unwrap();
        table.grad().unwrap()
    };
    let (bad, _) = batch(&rt, &mut rng, Some(0));
    let (good, _) = batch(&rt, &mut rng, None);
    expect_take_failure(step(&bad).to_vec::<f32>().unwrap_err());
    rt.wait_all().unwrap();
    let grad = step(&good).to_vec::<f32>().unwrap();
    // d/d table of sum(take(table, idx)^2): 2 * table[row] per occurrence of the row.
    let t = table.to_vec::<f32>().unwrap();
    let idx = good.to_vec::<f32>().unwrap();
    let mut want = vec![0.0f32; ROWS * 6];
    for &i in &idx {
        for c in 0..6 {
            want[i as usize * 6 + c] += 2.0 * t[i as usize * 6 + c];
        }
    }
    assert_eq!(grad, want);
}

/// A kernel whose scratch space does not fit under the memory limit fails with the limit in its
/// message; once the limit is raised, the same call computes what a runtime without a limit does.
#[test]
fn a_failed_scratch_allocation_is_reported_once_and_the_next_call_runs() {
    let conv = |x: &NDArray, w: &NDArray| {
        let attrs = Attrs::new()
            .with("kernel", "(3, 3)")
            .with("pad", "(1, 1)")
            .with("num_filter", 16)
            .with("no_bias", true);
        invoke("Convolution", &[x, w], &attrs, None)
            .unwrap()
            .remove(0)
    };
    // In f64, whose convolutions write their columns out (f32 ones may pack them from the
    // data and need no scratch space).
    let inputs = |rt: &Arc<Runtime>| {
        let mut rng = StdRng::seed_from_u64(17);
        let mut random = |shape: &[usize]| {
            let v: Vec<f64> = (0..shape.iter().product::<usize>())
                .map(|_| rng.gen_range(-0.5..0.5))
                .collect();
            rt.from_vec(v, shape, CPU).unwrap()
        };
        (random(&[1, 16, 32, 32]), random(&[16, 16, 3, 3]))
    };
    let free = common::threaded_runtime(6);
    let (x, w) = inputs(&free);
    let want = conv(&x, &w).to_vec::<f64>().unwrap();

    // Unpooled, so that the limit counts every live block (a pool's cached blocks would serve
    // the scratch space without growing).
    let storage = storage::StorageConfig {
        kind: storage::PoolKind::Unpooled,
        ..storage::StorageConfig::default()
    };
    let engine = engine::EngineBuilder::new(engine::EngineKind::ThreadedPerDevice).build();
    let rt = Runtime::new(engine, storage);
    let (x, w) = inputs(&rt);
    rt.wait_all().unwrap();
    // The arrays fit; the convolution's column buffer (16 * 9 rows of 32 * 32, 1.1 MiB) does not.
    let pool = rt.storage(CPU);
    pool.set_limit(Some(pool.stats().in_use + (256 << 10)));
    let err = match conv(&x, &w).to_vec::<f64>() {
        Ok(_) => panic!("the convolution ran under the limit: {}", pool.summary()),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("limit"), "{err}");
    rt.wait_all().unwrap();
    pool.set_limit(None);
    let got = conv(&x, &w).to_vec::<f64>().unwrap();
    assert!(got == want, "the convolution after the failure differs");
}

/// A write through a view of part of a failed array does not clear its failure: the read of the
/// whole raises it (the rest holds memory no op wrote). Only a write of every element (a fill of
/// the whole, a copy into it, an op writing it as `out`) replaces what the failed op left, and
/// the array then reads back as written.
#[test]
fn a_partial_write_keeps_a_failed_array_failed_and_a_whole_write_clears_it() {
    let rt = common::threaded_runtime(3);
    let table = rt
        .from_vec(vec![1.0f32; ROWS * 6], &[ROWS, 6], CPU)
        .unwrap();
    let raise = Attrs::new().with("mode", "raise");
    let failed = || {
        let idx = rt
            .from_vec(vec![0.0f32, ROWS as f32 + 3.0], &[2], CPU)
            .unwrap();
        invoke("take", &[&table, &idx], &raise, None)
            .unwrap()
            .remove(0)
    };
    // Each way of writing a view of one row: a fill, a copy, an op's `out`.
    let a = failed();
    a.at(0).unwrap().fill(1.0).unwrap();
    expect_take_failure(a.to_vec::<f32>().unwrap_err());
    let a = failed();
    let src = rt.from_vec(vec![5.0f32; 6], &[6], CPU).unwrap();
    src.copy_into(&a.at(1).unwrap()).unwrap();
    expect_take_failure(a.to_vec::<f32>().unwrap_err());
    let a = failed();
    let twos = rt.from_vec(vec![2.0f32; 6], &[6], CPU).unwrap();
    invoke(
        "negative",
        &[&twos],
        &Attrs::new(),
        Some(&[&a.at(0).unwrap()]),
    )
    .unwrap();
    expect_take_failure(a.to_vec::<f32>().unwrap_err());
    rt.wait_all().unwrap();

    let a = failed();
    a.fill(4.0).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![4.0f32; 12]);
    let a = failed();
    let src = rt.from_vec(vec![3.0f32; 12], &[2, 6], CPU).unwrap();
    src.copy_into(&a).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![3.0f32; 12]);
    let a = failed();
    invoke("negative", &[&src], &Attrs::new(), Some(&[&a])).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![-3.0f32; 12]);
    // The failures were the vars' to report; the overwritten ones are still the engine's.
    let _ = rt.wait_all();
}
