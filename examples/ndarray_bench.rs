//! NDArray overheads and kernel speed, each beside a plain `ndarray` baseline in the same run.
//!
//! `cargo run --release --example ndarray_bench -- [--json] [--quick] [--tiny-only]`
//! (`--tiny-only` skips the kernel workloads, e.g. to profile the per-op path alone).
//!
//! * tiny_chain_ns: `x = x + 1` on a (4,) f32 array, 100,000 times (each op depends on the
//!   last, allocates its output and frees its input through the engine), then wait;
//! * tiny_independent_ns: the same over 64 arrays round-robin (64 independent chains);
//! * add_gbps: a 1000x1000 f32 `a + b` (3 x 4 MB moved) against `&a + &b` in `ndarray`;
//! * dot_gflops: a 1024x1024 f32 `dot` against `ndarray`'s `dot`;
//! * reverse_gbps: a 1000x1000 f32 `reverse` along its last axis (2 x 4 MB moved, the gather
//!   family's CPU loop) against copying `ndarray`'s reversed view;
//! * transpose_gbps: a 1000x1000 f32 `transpose` (2 x 4 MB moved) and heads_transpose_gbps: a
//!   (32, 128, 8, 64) f32 `transpose` with axes (0, 2, 1, 3) (attention's split into heads,
//!   2 x 8 MB), each against `ndarray`'s permuted view copied into standard layout;
//! * sum_gbps: a 1000x1000 f32 `sum` over its last axis (4 MB read) against `ndarray`'s
//!   `sum_axis`;
//! * exp_gbps and softmax_gbps: a 1000x1000 f32 `exp`, and `softmax` over its last axis (2 x 4
//!   MB moved), against `ndarray` mapping with libm's `expf` (softmax row by row in f32: max,
//!   exp, sum, divide);
//! * maxpool_gbps: ResNet's max pooling (3x3 windows, stride 2, pad 1) over (4, 64, 112, 112)
//!   f32, and avgpool_gbps: Inception's average pooling (3x3, stride 1, pad 1) over (4, 192, 28,
//!   28), GB/s of the input read and the output written, each against a loop over every
//!   output's window of an `ndarray` array (the planes split across as many scoped threads as
//!   the machine has cores).
//!
//! Each kernel repetition waits for its result (latency, engine round trip included), so the
//! output block is recycled while hot, as in the `ndarray` loop; pushing them all before one wait
//! keeps many 4 MB outputs in flight, beyond the cache, and measures memory bandwidth instead.

#[path = "common/global_allocator.rs"]
mod global_allocator;

#[path = "common/stats.rs"]
mod stats;

use std::time::Instant;

use clap::Parser;
use engine::EngineBuilder;
use ndarray::Array2;
use ndarray_ops::{DType, NDArray, Runtime};
use storage::{Context, StorageConfig};

/// Median of `reps` timed runs after three untimed ones, for ours and the baseline alike. The
/// untimed runs grow the pools and fault pages in; on this machine a kernel workload also needs a
/// couple of runs before rayon's threads and the cores settle (the first 1000x1000 adds after the
/// tiny-op workloads run at half speed for one to three runs of 100, in this version and the
/// earlier ones alike), which a single warm-up run left in the median about half the time.
fn best_of(reps: usize, mut f: impl FnMut() -> f64) -> f64 {
    for _ in 0..3 {
        f();
    }
    stats::median((0..reps).map(|_| f()).collect())
}

/// NDArray overheads (tiny ops) and kernel speed (add, dot), each beside a plain ndarray
/// baseline in the same run.
#[derive(Parser)]
#[command(name = "ndarray_bench")]
struct Args {
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Fewer ops and repetitions, for a quick look.
    #[arg(long)]
    quick: bool,
    /// Only the tiny-op workloads (e.g. to profile the per-op path alone).
    #[arg(long)]
    tiny_only: bool,
}

fn main() {
    let Args {
        json,
        quick,
        tiny_only,
    } = Args::parse();
    // The threaded per-device engine unless the MXRS_* variables say otherwise (e.g.
    // MXRS_ENGINE_INLINE_CHEAP=0 hands every tiny op to a worker).
    let engine = match EngineBuilder::from_env() {
        Ok(b) => b.build(),
        Err(e) => {
            eprintln!("ndarray_bench: {e}");
            std::process::exit(2);
        }
    };
    let rt = Runtime::new(engine, StorageConfig::default());
    let ctx = Context::cpu(0);
    let n_tiny = if quick { 10_000 } else { 100_000 };
    let reps = if quick { 3 } else { 5 };
    let ok = |r: ndarray_ops::Result<NDArray>| r.expect("bench op");

    let tiny_chain = best_of(reps, || {
        let mut x = ok(rt.zeros(&[4], DType::F32, ctx));
        let t = Instant::now();
        for _ in 0..n_tiny {
            x = ok(&x + 1.0);
        }
        x.wait_to_read().expect("wait");
        t.elapsed().as_nanos() as f64 / n_tiny as f64
    });
    let tiny_inplace = best_of(reps, || {
        let x = ok(rt.zeros(&[4], DType::F32, ctx));
        let t = Instant::now();
        for _ in 0..n_tiny {
            x.add_scalar_inplace(1.0).expect("op");
        }
        x.wait_to_read().expect("wait");
        t.elapsed().as_nanos() as f64 / n_tiny as f64
    });
    let tiny_independent = best_of(reps, || {
        let mut xs: Vec<NDArray> = (0..64)
            .map(|_| ok(rt.zeros(&[4], DType::F32, ctx)))
            .collect();
        let t = Instant::now();
        for i in 0..n_tiny {
            xs[i % 64] = ok(&xs[i % 64] + 1.0);
        }
        rt.wait_all().expect("wait");
        t.elapsed().as_nanos() as f64 / n_tiny as f64
    });

    let k = match tiny_only {
        true => Kernels::default(),
        false => kernels(&rt, ctx, quick, reps),
    };

    let report = serde_json::json!({
        "tiny_chain_ns": tiny_chain,
        "tiny_inplace_chain_ns": tiny_inplace,
        "tiny_independent_ns": tiny_independent,
        "add_gbps": k.add_gbps,
        "ndarray_add_gbps": k.nd_add_gbps,
        "dot_gflops": k.dot_gflops,
        "ndarray_dot_gflops": k.nd_dot_gflops,
        "reverse_gbps": k.reverse_gbps,
        "ndarray_reverse_gbps": k.nd_reverse_gbps,
        "transpose_gbps": k.transpose.0,
        "ndarray_transpose_gbps": k.transpose.1,
        "heads_transpose_gbps": k.heads_transpose.0,
        "ndarray_heads_transpose_gbps": k.heads_transpose.1,
        "sum_gbps": k.sum.0,
        "ndarray_sum_gbps": k.sum.1,
        "exp_gbps": k.exp.0,
        "ndarray_exp_gbps": k.exp.1,
        "softmax_gbps": k.softmax.0,
        "ndarray_softmax_gbps": k.softmax.1,
        "maxpool_gbps": k.maxpool.0,
        "ndarray_maxpool_gbps": k.maxpool.1,
        "avgpool_gbps": k.avgpool.0,
        "ndarray_avgpool_gbps": k.avgpool.1,
        "mxnet_1_9_1_tiny_op_from_python_ns": [17000, 26000],
    });
    if json {
        println!("{report}");
    } else {
        println!("tiny (4,) f32 op, dependent chain:      {tiny_chain:>8.0} ns/op  (in place: {tiny_inplace:.0} ns/op)");
        println!("tiny op, 64 independent chains:         {tiny_independent:>8.0} ns/op  (MXNet 1.9.1 from Python: 17,000-26,000)");
        if tiny_only {
            return;
        }
        println!("1000x1000 f32 add:                      {:>8.2} GB/s  (ndarray: {:.2} GB/s, ratio {:.2})", k.add_gbps, k.nd_add_gbps, k.nd_add_gbps / k.add_gbps);
        println!(
            "1024x1024 f32 dot:                      {:>8.2} GFLOP/s (ndarray: {:.2}, ratio {:.2})",
            k.dot_gflops,
            k.nd_dot_gflops,
            k.nd_dot_gflops / k.dot_gflops
        );
        println!("1000x1000 f32 reverse (last axis):      {:>8.2} GB/s  (ndarray: {:.2} GB/s, ratio {:.2})", k.reverse_gbps, k.nd_reverse_gbps, k.nd_reverse_gbps / k.reverse_gbps);
        for (name, (ours, nd)) in [
            ("1000x1000 f32 transpose:               ", k.transpose),
            ("(32,128,8,64) f32 transpose (0,2,1,3): ", k.heads_transpose),
            ("1000x1000 f32 sum over the last axis:  ", k.sum),
            ("1000x1000 f32 exp:                     ", k.exp),
            ("1000x1000 f32 softmax (last axis):     ", k.softmax),
            ("3x3/2 max pool, (4,64,112,112) f32:    ", k.maxpool),
            ("3x3/1 avg pool, (4,192,28,28) f32:     ", k.avgpool),
        ] {
            println!(
                "{name}{ours:>8.2} GB/s  (ndarray: {nd:.2} GB/s, ratio {:.2})",
                nd / ours
            );
        }
    }
}

/// What the kernel workloads measured, each beside `ndarray` doing the same in the same run.
#[derive(Default)]
struct Kernels {
    add_gbps: f64,
    nd_add_gbps: f64,
    dot_gflops: f64,
    nd_dot_gflops: f64,
    reverse_gbps: f64,
    nd_reverse_gbps: f64,
    /// (ours, `ndarray`'s), GB/s.
    transpose: (f64, f64),
    heads_transpose: (f64, f64),
    sum: (f64, f64),
    exp: (f64, f64),
    softmax: (f64, f64),
    maxpool: (f64, f64),
    avgpool: (f64, f64),
}

/// The kernel workloads: GB/s of a 1000x1000 add, GFLOP/s of a 1024x1024 dot, GB/s of a
/// 1000x1000 reverse, of two transposes, of a sum, an exp, a softmax and two poolings, each
/// beside `ndarray` doing the same in this run.
fn kernels(rt: &std::sync::Arc<Runtime>, ctx: Context, quick: bool, reps: usize) -> Kernels {
    let ok = |r: ndarray_ops::Result<NDArray>| r.expect("bench op");
    // 1000x1000 f32 add: bytes read and written per op.
    let (m, bytes) = (1000usize, 3.0 * 1000.0 * 1000.0 * 4.0);
    let pa = Array2::<f32>::from_shape_fn((m, m), |(i, j)| (i * m + j) as f32 * 1e-3);
    let pb = pa.mapv(|v| v * 0.5);
    let (a, b) = (
        ok(rt.from_array(&pa.clone().into_dyn(), ctx)),
        ok(rt.from_array(&pb.clone().into_dyn(), ctx)),
    );
    let add_reps = if quick { 20 } else { 100 };
    let add_gbps = best_of(reps, || {
        let t = Instant::now();
        for _ in 0..add_reps {
            ok(&a + &b).wait_to_read().expect("wait");
        }
        bytes * add_reps as f64 / t.elapsed().as_secs_f64() / 1e9
    });
    let nd_add_gbps = best_of(reps, || {
        let t = Instant::now();
        for _ in 0..add_reps {
            std::hint::black_box(&pa + &pb);
        }
        bytes * add_reps as f64 / t.elapsed().as_secs_f64() / 1e9
    });

    let k = 1024usize;
    let flops = 2.0 * (k * k * k) as f64;
    let da = Array2::<f32>::from_shape_fn((k, k), |(i, j)| ((i + 2 * j) % 7) as f32 * 0.1);
    let db = da.t().to_owned();
    let (na, nb) = (
        ok(rt.from_array(&da.clone().into_dyn(), ctx)),
        ok(rt.from_array(&db.clone().into_dyn(), ctx)),
    );
    let dot_reps = if quick { 2 } else { 5 };
    let dot_gflops = best_of(reps, || {
        let t = Instant::now();
        for _ in 0..dot_reps {
            ok(na.dot(&nb)).wait_to_read().expect("wait");
        }
        flops * dot_reps as f64 / t.elapsed().as_secs_f64() / 1e9
    });
    let nd_dot_gflops = best_of(reps, || {
        let t = Instant::now();
        for _ in 0..dot_reps {
            std::hint::black_box(da.dot(&db));
        }
        flops * dot_reps as f64 / t.elapsed().as_secs_f64() / 1e9
    });

    // Reverse along the last axis: 4 MB read, 4 MB written.
    let attrs = ndarray_ops::Attrs::new().with("axis", 1);
    let rev_bytes = 2.0 * (m * m * 4) as f64;
    let reverse_gbps = best_of(reps, || {
        let t = Instant::now();
        for _ in 0..add_reps {
            let y = ndarray_ops::invoke("reverse", &[&a], &attrs, None).expect("bench op");
            y[0].wait_to_read().expect("wait");
        }
        rev_bytes * add_reps as f64 / t.elapsed().as_secs_f64() / 1e9
    });
    let nd_reverse_gbps = best_of(reps, || {
        let t = Instant::now();
        for _ in 0..add_reps {
            std::hint::black_box(pa.slice(ndarray::s![.., ..;-1]).to_owned());
        }
        rev_bytes * add_reps as f64 / t.elapsed().as_secs_f64() / 1e9
    });
    // Transposes: the array read once and written once, ours beside `ndarray`'s permuted view
    // copied into standard layout.
    let transpose = |shape: &[usize], axes: &[usize], n_reps: usize| {
        let len: usize = shape.iter().product();
        let plain = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(shape), |i| i[0] as f32);
        let x = ok(rt.from_array(&plain, ctx));
        let attrs = ndarray_ops::Attrs::new().with(
            "axes",
            format!("{axes:?}").replace('[', "(").replace(']', ")"),
        );
        let bytes = 2.0 * (len * 4 * n_reps) as f64;
        let ours = best_of(reps, || {
            let t = Instant::now();
            for _ in 0..n_reps {
                let y = ndarray_ops::invoke("transpose", &[&x], &attrs, None).expect("bench op");
                y[0].wait_to_read().expect("wait");
            }
            bytes / t.elapsed().as_secs_f64() / 1e9
        });
        let nd = best_of(reps, || {
            let t = Instant::now();
            for _ in 0..n_reps {
                let v = plain.view().permuted_axes(ndarray::IxDyn(axes));
                std::hint::black_box(v.as_standard_layout().into_owned());
            }
            bytes / t.elapsed().as_secs_f64() / 1e9
        });
        (ours, nd)
    };
    // One op on `a` beside a baseline computing the same from `pa`, GB/s of `moved` bytes
    // per repetition.
    let beside = |op: &str, attrs: ndarray_ops::Attrs, moved: usize, baseline: &dyn Fn()| {
        let bytes = (moved * add_reps) as f64;
        let ours = best_of(reps, || {
            let t = Instant::now();
            for _ in 0..add_reps {
                let y = ndarray_ops::invoke(op, &[&a], &attrs, None).expect("bench op");
                y[0].wait_to_read().expect("wait");
            }
            bytes / t.elapsed().as_secs_f64() / 1e9
        });
        let theirs = best_of(reps, || {
            let t = Instant::now();
            for _ in 0..add_reps {
                baseline();
            }
            bytes / t.elapsed().as_secs_f64() / 1e9
        });
        (ours, theirs)
    };
    let mb = m * m * 4;
    let by_row = || ndarray_ops::Attrs::new().with("axis", 1);
    // Sum over the last axis: 4 MB read.
    let sum = beside("sum", by_row(), mb, &|| {
        std::hint::black_box(pa.sum_axis(ndarray::Axis(1)));
    });
    // exp, and softmax over the last axis: 4 MB read, 4 MB written; the baselines map with
    // libm's `expf` (softmax row by row: max, exp, sum, divide, in f32).
    let exp = beside("exp", ndarray_ops::Attrs::new(), 2 * mb, &|| {
        std::hint::black_box(pa.mapv(f32::exp));
    });
    let softmax = beside("softmax", by_row(), 2 * mb, &|| {
        let mut y = pa.clone();
        for mut row in y.rows_mut() {
            let max = row.fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            row.mapv_inplace(|v| (v - max).exp());
            let z = row.sum();
            row.mapv_inplace(|v| v / z);
        }
        std::hint::black_box(y);
    });
    // Pooling with 3x3 windows and pad 1: input read, output written.
    let pool = |kind: &str, shape: [usize; 4], stride: usize, n_reps: usize| {
        let plain = ndarray::Array4::<f32>::from_shape_fn(shape, |(a, b, c, d)| {
            ((a * 7 + b * 13 + c * 31 + d * 17) % 101) as f32 * 0.01
        });
        let x = ok(rt.from_array(&plain.clone().into_dyn(), ctx));
        let attrs = ndarray_ops::Attrs::new()
            .with("pool_type", kind)
            .with("kernel", "(3, 3)")
            .with("stride", format!("({stride}, {stride})"))
            .with("pad", "(1, 1)");
        let (ho, wo) = ((shape[2] - 1) / stride + 1, (shape[3] - 1) / stride + 1);
        let out_len = shape[0] * shape[1] * ho * wo;
        let bytes = ((plain.len() + out_len) * 4 * n_reps) as f64;
        let ours = best_of(reps, || {
            let t = Instant::now();
            for _ in 0..n_reps {
                let y = ndarray_ops::invoke("Pooling", &[&x], &attrs, None).expect("bench op");
                y[0].wait_to_read().expect("wait");
            }
            bytes / t.elapsed().as_secs_f64() / 1e9
        });
        let max = kind == "max";
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let window = |o: usize, n: usize| (o * stride).saturating_sub(1)..(o * stride + 2).min(n);
        let nd = best_of(reps, || {
            let t = Instant::now();
            for _ in 0..n_reps {
                let mut out = ndarray::Array4::<f32>::zeros((shape[0], shape[1], ho, wo));
                let per = shape[1].div_ceil(threads);
                std::thread::scope(|s| {
                    let ins = plain.axis_chunks_iter(ndarray::Axis(1), per);
                    for (xin, mut o) in ins.zip(out.axis_chunks_iter_mut(ndarray::Axis(1), per)) {
                        s.spawn(move || {
                            for ((i, c, y, xx), v) in o.indexed_iter_mut() {
                                let win = xin.slice(ndarray::s![
                                    i,
                                    c,
                                    window(y, shape[2]),
                                    window(xx, shape[3])
                                ]);
                                *v = match max {
                                    true => win.fold(f32::NEG_INFINITY, |m, &v| m.max(v)),
                                    false => win.sum() / 9.0,
                                };
                            }
                        });
                    }
                });
                std::hint::black_box(out);
            }
            bytes / t.elapsed().as_secs_f64() / 1e9
        });
        (ours, nd)
    };
    let pool_reps = if quick { 5 } else { 20 };
    Kernels {
        maxpool: pool("max", [4, 64, 112, 112], 2, pool_reps),
        avgpool: pool("avg", [4, 192, 28, 28], 1, pool_reps),
        add_gbps,
        nd_add_gbps,
        dot_gflops,
        nd_dot_gflops,
        reverse_gbps,
        nd_reverse_gbps,
        transpose: transpose(&[m, m], &[1, 0], add_reps),
        heads_transpose: transpose(&[32, 128, 8, 64], &[0, 2, 1, 3], add_reps / 2),
        sum,
        exp,
        softmax,
    }
}
