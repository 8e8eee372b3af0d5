//! Free on death, failures at wait, and the same programs on every engine.

use std::sync::Arc;
use std::time::Duration;

use engine::{EngineBuilder, EngineKind, Op};
use ndarray_ops::{invoke, Attrs, DType, NDArray, Runtime};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use storage::{Context, PoolKind, StorageConfig};

fn runtime(kind: EngineKind, pool: PoolKind) -> Arc<Runtime> {
    let storage = StorageConfig {
        kind: pool,
        ..StorageConfig::default()
    };
    Runtime::new(EngineBuilder::new(kind).cpu_workers(2).build(), storage)
}

/// An op that writes `x` slowly, so whatever reads `x` next waits for it.
fn slow_writer(rt: &Runtime, x: &NDArray, ms: u64) {
    rt.engine()
        .push(
            Op::sync("slow", move |_| {
                std::thread::sleep(Duration::from_millis(ms));
                Ok(())
            })
            .write(x.var()),
        )
        .unwrap();
}

#[test]
fn a_dropped_array_keeps_its_block_until_pending_readers_finish() {
    for kind in [EngineKind::ThreadedPooled, EngineKind::ThreadedPerDevice] {
        // An exact-size pool hands a freed block straight to the next request of that size, so
        // returning the block too early would be caught.
        let rt = runtime(kind, PoolKind::PooledExact);
        let ctx = Context::cpu(0);
        let pool = rt.storage(ctx);
        let a = rt.full(&[4096], 7.0, DType::F32, ctx).unwrap();
        let x = rt.zeros(&[4096], DType::F32, ctx).unwrap();
        x.wait_to_read().unwrap();
        slow_writer(&rt, &x, 300);
        let c = (&a + &x).unwrap(); // reads `a` once the slow writer is done
        let in_use_with_a = pool.stats().in_use;
        drop(a);
        // The delete op waits behind `c`: the block is still in use.
        assert_eq!(
            pool.stats().in_use,
            in_use_with_a,
            "{kind:?}: block released before its reader ran"
        );
        // A new array of the same size must get another block: fill it with 99 right away.
        let d = rt.full(&[4096], 99.0, DType::F32, ctx).unwrap();
        d.wait_to_read().unwrap();
        assert_eq!(
            c.to_vec::<f32>().unwrap(),
            vec![7.0; 4096],
            "{kind:?}: the reader saw reused memory"
        );
        rt.wait_all().unwrap();
        // Now the block is back in the pool.
        assert!(pool.stats().in_use < in_use_with_a + 4096 * 4, "{kind:?}");
        drop((c, d, x));
        rt.wait_all().unwrap();
        assert_eq!(pool.stats().in_use, 0, "{kind:?}: every block returned");
    }
}

#[test]
fn a_failing_kernel_surfaces_at_wait_on_what_depends_on_it() {
    let rt = runtime(EngineKind::ThreadedPerDevice, PoolKind::Bfc);
    let a = rt.ones(&[3], DType::F32, Context::cpu(0)).unwrap();
    rt.engine()
        .push(Op::sync("corrupt_input", |_| Err("sensor unplugged".into())).write(a.var()))
        .unwrap();
    let b = (&a * 2.0).unwrap(); // the call itself succeeds: it is checked, not run
    let c = (&b + 1.0).unwrap();
    let e = c.to_vec::<f32>().unwrap_err();
    assert!(
        e.to_string().contains("corrupt_input") && e.to_string().contains("sensor unplugged"),
        "{e}"
    );
    // Unrelated arrays keep working.
    let z = rt.ones(&[2], DType::F32, Context::cpu(0)).unwrap();
    assert_eq!((&z + &z).unwrap().to_vec::<f32>().unwrap(), vec![2.0, 2.0]);
}

/// One random program of array ops, returning every array's final contents.
fn program(rt: &Arc<Runtime>, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let ctx = Context::cpu(rng.gen_range(0..2));
    let mut arrays: Vec<NDArray> = (0..6)
        .map(|i| {
            let v: Vec<f32> = (0..12)
                .map(|j| ((i * 12 + j) as f32 * 0.37).sin())
                .collect();
            rt.from_vec(v, &[3, 4], ctx).unwrap()
        })
        .collect();
    for _ in 0..40 {
        let (i, j, k) = (
            rng.gen_range(0..6),
            rng.gen_range(0..6),
            rng.gen_range(0..6),
        );
        let (a, b) = (arrays[i].clone(), arrays[j].clone());
        match rng.gen_range(0..9) {
            0 => arrays[k] = (&a + &b).unwrap(),
            1 => arrays[k] = (&a * &b).unwrap(),
            2 => arrays[k] = (&a - 0.5).unwrap(),
            3 => a.add_inplace(&b).unwrap(),
            4 => arrays[k] = a.apply("tanh", &Attrs::new()).unwrap(),
            5 => {
                let s = a.sum(&[1], true).unwrap();
                arrays[k] = (&b - &s).unwrap();
            }
            6 => {
                let p = invoke(
                    "dot",
                    &[&a, &b],
                    &Attrs::new().with("transpose_b", true),
                    None,
                )
                .unwrap()
                .remove(0);
                arrays[k] = p.dot(&b).unwrap();
            }
            7 => a
                .at(rng.gen_range(0..3))
                .unwrap()
                .mul_scalar_inplace(0.5)
                .unwrap(),
            _ => arrays[k] = b.copy_to(ctx).unwrap(),
        }
    }
    arrays.iter().map(|a| a.to_vec::<f32>().unwrap()).collect()
}

#[test]
fn random_array_programs_agree_on_every_engine() {
    for seed in 0..40 {
        let results: Vec<_> = EngineKind::ALL
            .iter()
            .map(|&k| program(&runtime(k, PoolKind::Bfc), seed))
            .collect();
        for (k, r) in EngineKind::ALL.iter().zip(&results).skip(1) {
            // Bit-identical: same kernels, same order of effects.
            let same = r
                .iter()
                .flatten()
                .zip(results[0].iter().flatten())
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "seed {seed}: {k:?} differs from naive");
        }
    }
}

/// Tiny arrays stay on the calling thread from start to finish: made (`from_vec`, `zeros`),
/// computed on, copied and read back, each op runs where it is pushed once its inputs are
/// ready, so a loop over small arrays never starts out behind a hand-over to a worker. The same
/// steps on arrays too large to be cheap run on the workers, but the ops that only move up to
/// 64 KiB (16 KiB here: writes, fills, copies, reads back) stay on the calling thread.
#[test]
fn tiny_arrays_are_made_computed_copied_and_read_on_the_calling_thread() {
    for kind in [EngineKind::ThreadedPooled, EngineKind::ThreadedPerDevice] {
        for (n, moves_on_caller, on_caller) in [
            (4, true, true),
            (4096, true, false),
            (1 << 15, false, false),
        ] {
            let engine = EngineBuilder::new(kind).profiler(None).build();
            let rt = Runtime::new(engine, StorageConfig::default());
            let ctx = Context::cpu(0);
            let a = rt.from_vec(vec![1.0f32; n], &[n], ctx).unwrap();
            let mut b = rt.zeros(&[n], DType::F32, ctx).unwrap();
            for _ in 0..3 {
                b = (&b + &a).unwrap();
            }
            let c = rt.empty(&[n], DType::F32, ctx).unwrap();
            // The copy's source is ready when it is pushed (where a larger sum ran on a worker).
            b.wait_to_read().unwrap();
            b.copy_into(&c).unwrap();
            assert_eq!(c.to_vec::<f32>().unwrap(), vec![3.0f32; n]);
            rt.wait_all().unwrap();
            let me = std::thread::current().name().unwrap_or("").to_string();
            let events = rt.engine().profiler().expect("profiler on").events();
            let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
            for op in ["write", "fill", "broadcast_add", "copy", "copy_out"] {
                assert!(
                    names.contains(&op),
                    "{kind:?} n={n}: no '{op}' in {names:?}"
                );
            }
            for e in events.iter().filter(|e| e.name != "delete_var") {
                assert_eq!(
                    e.thread_name == me,
                    match e.name.as_str() {
                        "broadcast_add" => on_caller,
                        _ => moves_on_caller,
                    },
                    "{kind:?} n={n}: '{}' ran on '{}'",
                    e.name,
                    e.thread_name
                );
            }
        }
    }
}
