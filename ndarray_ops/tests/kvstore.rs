//! The KVStore within one process, as MXNet's `test_kvstore.py` exercises it: init and pull,
//! pushes of one value per device summed, an updater, int and string keys, optimizers against
//! their formulas, optimizer state saved and restored bit for bit, clear errors for a key that
//! was never initialized, a shape that differs, an updater that pushes; and several threads
//! pushing one key with none of their sums lost.

use std::sync::Arc;
use std::time::Duration;

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::kvstore::{Key, Optimizer};
use ndarray_ops::{KVStore, NDArray, Runtime, Sgd};
use storage::{Context, StorageConfig};

mod common;

use common::watchdog;

fn rt() -> Arc<Runtime> {
    Runtime::new(
        EngineBuilder::new(EngineKind::ThreadedPerDevice)
            .cpu_workers(2)
            .jitter(Duration::from_micros(20))
            .build(),
        StorageConfig::default(),
    )
}

fn arr(rt: &Arc<Runtime>, v: &[f32], ctx: Context) -> NDArray {
    rt.from_vec(v.to_vec(), &[v.len()], ctx).unwrap()
}

fn values(a: &NDArray) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

#[test]
fn init_then_pull_gives_the_value_into_every_output() {
    let rt = rt();
    let kv = KVStore::create(&rt, "local").unwrap();
    assert_eq!((kv.kind(), kv.rank(), kv.num_workers()), ("local", 0, 1));
    let v = arr(&rt, &[1.0, 2.0, 3.0], Context::cpu(0));
    kv.init(3, &v).unwrap();
    // The store keeps a copy: changing the array given does not change the store.
    v.fill(9.0).unwrap();
    let outs: Vec<NDArray> = (0..3)
        .map(|d| rt.zeros(&[3], v.dtype(), Context::cpu(d)).unwrap())
        .collect();
    let refs: Vec<&NDArray> = outs.iter().collect();
    kv.pull(3, &refs, 0).unwrap();
    for o in &outs {
        assert_eq!(values(o), vec![1.0, 2.0, 3.0]);
    }
}

#[test]
fn broadcast_stores_the_value_and_copies_it_out() {
    let rt = rt();
    for kind in ["local", "device"] {
        let kv = KVStore::create(&rt, kind).unwrap();
        let v = arr(&rt, &[4.0, 5.0], Context::cpu(1));
        let outs: Vec<NDArray> = (0..2)
            .map(|d| rt.zeros(&[2], v.dtype(), Context::cpu(d)).unwrap())
            .collect();
        let refs: Vec<&NDArray> = outs.iter().collect();
        kv.broadcast("w", &v, &refs, 0).unwrap();
        for o in &outs {
            assert_eq!(values(o), vec![4.0, 5.0], "{kind}");
        }
        // Stored as init stores: a second broadcast of the key is refused, naming it.
        let err = kv.broadcast("w", &v, &refs, 0).unwrap_err().to_string();
        assert!(err.contains("'w' is already initialized"), "{err}");
    }
}

#[test]
fn a_push_of_several_devices_values_stores_their_sum() {
    for kind in ["local", "device"] {
        let rt = rt();
        let kv = KVStore::create(&rt, kind).unwrap();
        let shape = [2, 3];
        let init = rt
            .zeros(&shape, ndarray_ops::DType::F32, Context::cpu(1))
            .unwrap();
        kv.init("w", &init).unwrap();
        let pushed: Vec<NDArray> = (0..4)
            .map(|d| {
                let v: Vec<f32> = (0..6).map(|i| (i * (d + 1)) as f32 + 0.25).collect();
                rt.from_vec(v, &shape, Context::cpu(d)).unwrap()
            })
            .collect();
        let refs: Vec<&NDArray> = pushed.iter().collect();
        // Twice: without an updater each push replaces the value with the new sum.
        for _ in 0..2 {
            kv.push("w", &refs, 0).unwrap();
        }
        let out = rt.zeros(&shape, init.dtype(), Context::cpu(2)).unwrap();
        kv.pull("w", &[&out], 0).unwrap();
        let want: Vec<f32> = (0..6)
            .map(|i| (0..4).map(|d| (i * (d + 1)) as f32 + 0.25).sum())
            .collect();
        assert_eq!(values(&out), want, "kind {kind}");
    }
}

#[test]
fn an_updater_changes_the_stored_value_from_every_push() {
    let rt = rt();
    let kv = KVStore::create(&rt, "local").unwrap();
    let ones = arr(&rt, &[1.0; 4], Context::cpu(0));
    kv.init(Key::Int(0), &ones).unwrap();
    kv.init(Key::from("bias"), &ones).unwrap();
    // MXNet's test updater: stored += 2 * merged.
    kv.set_updater(|_: &Key, merged: &NDArray, stored: &NDArray| {
        let twice = (merged * 2.0)?;
        stored.add_inplace(&twice)
    })
    .unwrap();
    let grads: Vec<NDArray> = (0..2)
        .map(|d| arr(&rt, &[0.5, 1.0, 1.5, 2.0], Context::cpu(d)))
        .collect();
    let refs: Vec<&NDArray> = grads.iter().collect();
    for _ in 0..3 {
        kv.push(0, &refs, 0).unwrap();
    }
    kv.push("bias", &refs[..1], 0).unwrap();
    let out = rt.zeros(&[4], ones.dtype(), Context::cpu(0)).unwrap();
    kv.pull(0, &[&out], 0).unwrap();
    // 1 + 3 pushes x 2 x (g + g).
    assert_eq!(values(&out), vec![7.0, 13.0, 19.0, 25.0]);
    kv.pull("bias", &[&out], 0).unwrap();
    assert_eq!(values(&out), vec![2.0, 3.0, 4.0, 5.0]);
    assert_eq!(kv.keys(), vec![Key::Int(0), Key::from("bias")]);
}

/// Runs `steps` pushes of seeded gradients through `kv` on key 0 and returns the weight.
fn run_steps(rt: &Arc<Runtime>, kv: &KVStore, steps: std::ops::Range<usize>) -> Vec<f32> {
    for s in steps {
        let g: Vec<f32> = (0..5)
            .map(|i| ((s * 7 + i * 3) % 11) as f32 * 0.1 - 0.5)
            .collect();
        let grads: Vec<NDArray> = (0..2)
            .map(|d| rt.from_vec(g.clone(), &[5], Context::cpu(d)).unwrap())
            .collect();
        let refs: Vec<&NDArray> = grads.iter().collect();
        kv.push(0, &refs, -1).unwrap();
    }
    let out = rt
        .zeros(&[5], ndarray_ops::DType::F32, Context::cpu(0))
        .unwrap();
    kv.pull(0, &[&out], -1).unwrap();
    values(&out)
}

#[test]
fn sgd_with_momentum_follows_its_formula() {
    let rt = rt();
    let kv = KVStore::create(&rt, "local").unwrap();
    let w0 = [0.3f32, -0.2, 0.1, 0.0, 1.0];
    kv.init(0, &arr(&rt, &w0, Context::cpu(0))).unwrap();
    let (lr, momentum, wd, rescale) = (0.1f32, 0.9f32, 0.01f32, 0.5f32);
    let sgd = Sgd {
        lr: lr.into(),
        momentum: momentum.into(),
        wd: wd.into(),
    };
    kv.set_optimizer(Optimizer::sgd(sgd).rescale_grad(rescale.into()))
        .unwrap();
    let got = run_steps(&rt, &kv, 0..4);
    // MXNet's sgd_mom_update: mom = momentum * mom - lr * (rescale * g + wd * w); w += mom.
    let (mut w, mut mom) = (w0.to_vec(), vec![0f32; 5]);
    for s in 0..4 {
        for i in 0..5 {
            let g = ((s * 7 + i * 3) % 11) as f32 * 0.1 - 0.5;
            let merged = g + g;
            mom[i] = momentum * mom[i] - lr * (rescale * merged + wd * w[i]);
            w[i] += mom[i];
        }
    }
    for (a, b) in got.iter().zip(&w) {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{got:?} vs {w:?}");
    }
}

#[test]
fn adam_follows_its_formula() {
    let rt = rt();
    let kv = KVStore::create(&rt, "device").unwrap();
    let w0 = [0.3f32, -0.2, 0.1, 0.0, 1.0];
    kv.init(0, &arr(&rt, &w0, Context::cpu(0))).unwrap();
    kv.set_optimizer(Optimizer::adam(0.01)).unwrap();
    let got = run_steps(&rt, &kv, 0..3);
    // MXNet's adam_update (no bias correction in the op): m = b1 m + (1 - b1) g,
    // v = b2 v + (1 - b2) g^2, w -= lr m / (sqrt(v) + eps).
    let (mut w, mut m, mut v) = (w0.to_vec(), vec![0f64; 5], vec![0f64; 5]);
    for s in 0..3 {
        for i in 0..5 {
            let g = ((s * 7 + i * 3) % 11) as f32 * 0.1 - 0.5;
            let g = f64::from(g + g);
            m[i] = 0.9 * m[i] + 0.1 * g;
            v[i] = 0.999 * v[i] + 0.001 * g * g;
            w[i] -= (0.01 * m[i] / (v[i].sqrt() + 1e-8)) as f32;
        }
    }
    for (a, b) in got.iter().zip(&w) {
        assert!((a - b).abs() <= 1e-5, "{got:?} vs {w:?}");
    }
}

#[test]
fn optimizer_states_saved_and_loaded_continue_bit_for_bit() {
    let dir = std::env::temp_dir().join(format!("mxrs-kv-states-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("states.nd");
    let rt = rt();
    let w0 = [0.3f32, -0.2, 0.1, 0.0, 1.0];
    let sgd = Sgd {
        lr: 0.05,
        momentum: 0.9,
        wd: 0.0,
    };
    let a = KVStore::create(&rt, "local").unwrap();
    a.init(0, &arr(&rt, &w0, Context::cpu(0))).unwrap();
    a.set_optimizer(Optimizer::sgd(sgd)).unwrap();
    let middle = run_steps(&rt, &a, 0..3);
    a.save_optimizer_states(&path).unwrap();
    let end = run_steps(&rt, &a, 3..6);

    let b = KVStore::create(&rt, "local").unwrap();
    b.init(0, &arr(&rt, &middle, Context::cpu(0))).unwrap();
    b.set_optimizer(Optimizer::sgd(sgd)).unwrap();
    b.load_optimizer_states(&path).unwrap();
    assert_eq!(run_steps(&rt, &b, 3..6), end);

    // Without the momentum the continuation differs: the states mattered.
    let c = KVStore::create(&rt, "local").unwrap();
    c.init(0, &arr(&rt, &middle, Context::cpu(0))).unwrap();
    c.set_optimizer(Optimizer::sgd(sgd)).unwrap();
    assert_ne!(run_steps(&rt, &c, 3..6), end);

    // States of another optimizer are refused, naming the key.
    let d = KVStore::create(&rt, "local").unwrap();
    d.init(0, &arr(&rt, &middle, Context::cpu(0))).unwrap();
    d.set_optimizer(Optimizer::adam(0.1)).unwrap();
    let err = d.load_optimizer_states(&path).unwrap_err().to_string();
    assert!(
        err.contains("key 0") && err.contains("1 optimizer states"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mistakes_are_clear_errors() {
    let rt = rt();
    let kv = KVStore::create(&rt, "local").unwrap();
    let v = arr(&rt, &[1.0, 2.0], Context::cpu(0));
    let err = kv.push(5, &[&v], 0).unwrap_err().to_string();
    assert!(err.contains("key 5 was not initialized"), "{err}");
    let err = kv.pull("fc1_weight", &[&v], 0).unwrap_err().to_string();
    assert!(
        err.contains("key 'fc1_weight' was not initialized"),
        "{err}"
    );
    kv.init(5, &v).unwrap();
    let err = kv.init(5, &v).unwrap_err().to_string();
    assert!(err.contains("key 5 is already initialized"), "{err}");
    let wrong = arr(&rt, &[1.0, 2.0, 3.0], Context::cpu(0));
    let err = kv.push(5, &[&v, &wrong], 0).unwrap_err().to_string();
    assert!(
        err.contains("array 1 of key 5") && err.contains("[2]"),
        "{err}"
    );
    let err = kv.pull(5, &[], 0).unwrap_err().to_string();
    assert!(err.contains("no arrays"), "{err}");
    let err = kv.set_learning_rate(0.1).unwrap_err().to_string();
    assert!(err.contains("no optimizer"), "{err}");
    if !cfg!(feature = "mpi") {
        for kind in ["dist_sync", "dist_async"] {
            let err = KVStore::create(&rt, kind).unwrap_err().to_string();
            assert!(err.contains("`mpi` feature"), "{err}");
        }
    }
    let err = KVStore::create(&rt, "nccl2").unwrap_err().to_string();
    assert!(err.contains("unknown kind 'nccl2'"), "{err}");
    // Nothing was lost: the key still holds its value.
    let out = rt.zeros(&[2], v.dtype(), Context::cpu(0)).unwrap();
    kv.pull(5, &[&out], 0).unwrap();
    assert_eq!(values(&out), vec![1.0, 2.0]);
}

#[test]
fn an_updater_that_pushes_to_its_store_is_an_error_not_a_hang() {
    watchdog("reentrant push", 60, || {
        let rt = rt();
        let kv = Arc::new(KVStore::create(&rt, "local").unwrap());
        let v = arr(&rt, &[1.0, 2.0], Context::cpu(0));
        kv.init(0, &v).unwrap();
        kv.init(1, &v).unwrap();
        let inner = Arc::downgrade(&kv);
        kv.set_updater(move |_: &Key, merged: &NDArray, stored: &NDArray| {
            let kv = inner.upgrade().expect("the store");
            // Reading the store from the updater is allowed ...
            let seen = stored.runtime().zeros(&[2], stored.dtype(), stored.ctx())?;
            kv.pull(1, &[&seen], 0)?;
            // ... pushing to it is not.
            kv.push(1, &[merged], 0)?;
            stored.add_inplace(merged)
        })
        .unwrap();
        let err = kv.push(0, &[&v], 0).unwrap_err().to_string();
        assert!(err.contains("inside the store's own updater"), "{err}");
        // The store is still usable afterwards.
        kv.set_updater(|_: &Key, merged: &NDArray, stored: &NDArray| stored.add_inplace(merged))
            .unwrap();
        kv.push(0, &[&v], 0).unwrap();
        let out = rt.zeros(&[2], v.dtype(), Context::cpu(0)).unwrap();
        kv.pull(0, &[&out], 0).unwrap();
        assert_eq!(values(&out), vec![2.0, 4.0]);
    });
}

#[test]
fn threads_pushing_one_key_lose_no_sum() {
    watchdog("concurrent pushes", 120, || {
        let rt = rt();
        let kv = Arc::new(KVStore::create(&rt, "local").unwrap());
        let n = 64;
        kv.init(
            "acc",
            &rt.zeros(&[n], ndarray_ops::DType::F32, Context::cpu(0))
                .unwrap(),
        )
        .unwrap();
        kv.set_updater(|_: &Key, merged: &NDArray, stored: &NDArray| stored.add_inplace(merged))
            .unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (kv, rt) = (kv.clone(), rt.clone());
                std::thread::spawn(move || {
                    for s in 0..50 {
                        let v: Vec<f32> = (0..n).map(|i| ((t * 50 + s + i) % 8) as f32).collect();
                        let a = rt
                            .from_vec(v.clone(), &[n], Context::cpu((t % 2) as u32))
                            .unwrap();
                        let b = rt.from_vec(v, &[n], Context::cpu(2)).unwrap();
                        kv.push("acc", &[&a, &b], 0).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let out = rt
            .zeros(&[n], ndarray_ops::DType::F32, Context::cpu(0))
            .unwrap();
        kv.pull("acc", &[&out], 0).unwrap();
        let want: Vec<f32> = (0..n)
            .map(|i| {
                (0..4)
                    .flat_map(|t| (0..50).map(move |s| 2.0 * ((t * 50 + s + i) % 8) as f32))
                    .sum()
            })
            .collect();
        assert_eq!(values(&out), want);
    });
}
