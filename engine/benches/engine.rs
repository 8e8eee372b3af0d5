//! Criterion benches of engine overhead per no-op op (the same workloads as
//! `examples/engine_bench.rs`, smaller): `cargo bench -p engine`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::{Engine, EngineBuilder, EngineKind, Op, Var};

const OPS: usize = 20_000;

fn noop<'a>() -> Op<'a> {
    Op::sync("noop", |_| Ok(()))
}

fn timed(iters: u64, mut run: impl FnMut()) -> Duration {
    let t = Instant::now();
    for _ in 0..iters {
        run();
    }
    t.elapsed()
}

fn workloads(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(OPS as u64));
    g.sample_size(20);
    for kind in EngineKind::ALL {
        let e: Arc<dyn Engine> = EngineBuilder::new(kind).build();
        let vars: Vec<Var> = (0..1024).map(|_| e.new_var()).collect();
        let outs: Vec<Var> = (0..8).map(|_| e.new_var()).collect();
        g.bench_function(BenchmarkId::new("independent", kind.name()), |b| {
            b.iter_custom(|iters| {
                timed(iters, || {
                    for i in 0..OPS {
                        e.push(noop().write(&vars[i % 1024])).unwrap();
                    }
                    e.wait_for_all().unwrap();
                })
            })
        });
        g.bench_function(BenchmarkId::new("chain", kind.name()), |b| {
            b.iter_custom(|iters| {
                timed(iters, || {
                    for _ in 0..OPS {
                        e.push(noop().write(&vars[0])).unwrap();
                    }
                    e.wait_for_var(&vars[0]).unwrap();
                })
            })
        });
        g.bench_function(BenchmarkId::new("chain_bulk16", kind.name()), |b| {
            b.iter_custom(|iters| {
                timed(iters, || {
                    {
                        let mut bulk = e.bulk_with(16);
                        for _ in 0..OPS {
                            bulk.push(noop().write(&vars[0])).unwrap();
                        }
                    }
                    e.wait_for_var(&vars[0]).unwrap();
                })
            })
        });
        g.bench_function(BenchmarkId::new("fanout8", kind.name()), |b| {
            b.iter_custom(|iters| {
                timed(iters, || {
                    for _ in 0..OPS / 9 {
                        for o in &outs {
                            e.push(noop().read(&vars[0]).write(o)).unwrap();
                        }
                        e.push(noop().reads(&outs).write(&vars[0])).unwrap();
                    }
                    e.wait_for_all().unwrap();
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, workloads);
criterion_main!(benches);
