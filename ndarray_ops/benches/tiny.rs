//! Per-op overhead of tiny NDArray ops (shape (4,), f32), the workloads of
//! `examples/ndarray_bench.rs`, with cheap ops run inline when ready (the default) and with every
//! op handed to a worker (`inline_cheap(false)`), measured side by side.
//!
//! `cargo bench -p ndarray_ops --bench tiny`

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::{EngineBuilder, EngineKind};
use ndarray_ops::{DType, NDArray, Runtime};
use storage::{Context, StorageConfig};

const OPS: usize = 10_000;

fn runtime(inline_cheap: bool) -> Arc<Runtime> {
    let engine = EngineBuilder::new(EngineKind::ThreadedPerDevice)
        .inline_cheap(inline_cheap)
        .build();
    Runtime::new(engine, StorageConfig::default())
}

fn timed(iters: u64, mut run: impl FnMut()) -> Duration {
    let t = Instant::now();
    for _ in 0..iters {
        run();
    }
    t.elapsed()
}

fn benches(c: &mut Criterion) {
    let ctx = Context::cpu(0);
    let mut g = c.benchmark_group("tiny_op");
    g.throughput(Throughput::Elements(OPS as u64));
    g.sample_size(20);
    for inline in [true, false] {
        let rt = runtime(inline);
        let mode = if inline { "inline_cheap" } else { "to_worker" };
        g.bench_function(BenchmarkId::new("chain", mode), |b| {
            b.iter_custom(|iters| {
                timed(iters, || {
                    let mut x = rt.zeros(&[4], DType::F32, ctx).expect("zeros");
                    for _ in 0..OPS {
                        x = (&x + 1.0).expect("add");
                    }
                    x.wait_to_read().expect("wait");
                })
            })
        });
        g.bench_function(BenchmarkId::new("in_place", mode), |b| {
            let x = rt.zeros(&[4], DType::F32, ctx).expect("zeros");
            b.iter_custom(|iters| {
                timed(iters, || {
                    for _ in 0..OPS {
                        x.add_scalar_inplace(1.0).expect("add");
                    }
                    x.wait_to_read().expect("wait");
                })
            })
        });
        g.bench_function(BenchmarkId::new("independent64", mode), |b| {
            b.iter_custom(|iters| {
                timed(iters, || {
                    let mut xs: Vec<NDArray> = (0..64)
                        .map(|_| rt.zeros(&[4], DType::F32, ctx).expect("zeros"))
                        .collect();
                    for i in 0..OPS {
                        xs[i % 64] = (&xs[i % 64] + 1.0).expect("add");
                    }
                    rt.wait_all().expect("wait");
                })
            })
        });
    }
    g.finish();
}

criterion_group!(tiny, benches);
criterion_main!(tiny);
