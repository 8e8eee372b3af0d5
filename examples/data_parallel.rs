//! Data-parallel scaling on CPU contexts: trains one model with the whole batch split over 1, 2,
//! ... contexts (each its own engine workers and storage pool) and reports samples per second.
//!
//! `cargo run --release --example data_parallel -- [FILE-symbol.json] [--batch N] [--steps N] [--max-contexts N] [--profile] [--json]`
//!
//! Default model: `graphs/mlp-symbol.json` (784-512-512-10) with a softmax loss, batch 256, on
//! random data; every run starts from the same weights. JSON:
//! `{"model", "batch", "steps", "results": [{"contexts", "samples_per_second"}], "speedup",
//! "kernel_threads"}`, where `speedup` is the largest context count's samples/s over one
//! context's, and
//! `kernel_threads` says whether GEMMs thread on their own (`MATMUL_NUM_THREADS`; with
//! `MATMUL_NUM_THREADS=1 RAYON_NUM_THREADS=1` each context's kernels use one core, so the contexts
//! are what runs in parallel). With `--profile` (the engine's profiler on, which costs some
//! speed) each result adds `reductions` and `reductions_during_backward`: the gradient
//! reductions that started while some backward kernel was still running.

#[path = "common/global_allocator.rs"]
mod global_allocator;

#[allow(dead_code)]
#[path = "common/cli.rs"]
mod cli;

use std::collections::HashMap;
use std::time::Instant;

use clap::Parser;
use ndarray_ops::{Attrs, DataParallel, NDArray, Runtime, Sgd, Symbol};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use storage::Context;

/// Data-parallel scaling on CPU contexts: trains one model with the batch split over 1, 2, ...
/// contexts and reports samples per second.
#[derive(Parser)]
#[command(name = "data_parallel", allow_negative_numbers = true)]
struct Args {
    /// The model's *-symbol.json (a softmax loss is put on top).
    #[arg(default_value = "graphs/mlp-symbol.json")]
    file: String,
    /// Samples per step, split over the contexts.
    #[arg(long, default_value_t = 256, value_parser = cli::positive)]
    batch: usize,
    /// Timed training steps per context count.
    #[arg(long, default_value_t = 30, value_parser = cli::positive)]
    steps: usize,
    /// The most contexts tried (1, 2, ... up to it).
    #[arg(long, default_value_t = 2, value_parser = cli::positive)]
    max_contexts: usize,
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Turn the engine's profiler on and count the gradient reductions that overlap backward.
    #[arg(long)]
    profile: bool,
}

fn random(rt: &std::sync::Arc<Runtime>, shape: &[usize], rng: &mut StdRng) -> NDArray {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-0.1..0.1)).collect();
    rt.from_vec(v, shape, Context::cpu(0)).expect("host array")
}

/// Of the gradient reductions (`reduce_copy` ops), how many started while a backward kernel
/// was still running: the overlap of communication with backward.
fn overlap(events: &[engine::ProfileEvent]) -> (usize, usize) {
    let backward: Vec<(u64, u64)> = events
        .iter()
        .filter(|e| e.name.starts_with("_backward_"))
        .map(|e| (e.start_ns, e.end_ns))
        .collect();
    let copies: Vec<u64> = events
        .iter()
        .filter(|e| e.name == "reduce_copy")
        .map(|e| e.start_ns)
        .collect();
    let during = copies
        .iter()
        .filter(|&&t| backward.iter().any(|&(s, e)| s <= t && t < e))
        .count();
    (during, copies.len())
}

/// Samples per second of `steps` training steps over `n` contexts (after two warm-up steps),
/// and how many gradient reductions overlapped a backward kernel.
fn measure(
    sym: &Symbol,
    data_shape: &[usize],
    a: &Args,
    n: usize,
) -> Result<(f64, (usize, usize)), String> {
    let err = |e: ndarray_ops::NdError| e.to_string();
    let rt = Runtime::from_env(|b| if a.profile { b.profiler(None) } else { b }).map_err(err)?;
    let shapes = HashMap::from([
        ("data".to_string(), data_shape.to_vec()),
        ("softmax_label".to_string(), vec![a.batch]),
    ]);
    let contexts: Vec<Context> = (0..n as u32).map(Context::cpu).collect();
    let sgd = Sgd {
        lr: 0.01,
        momentum: 0.9,
        wd: 0.0,
    };
    let dp = DataParallel::new(
        &rt,
        sym,
        &contexts,
        &shapes,
        &["data", "softmax_label"],
        sgd,
    )
    .map_err(err)?;
    let mut rng = StdRng::seed_from_u64(3);
    let mut params: Vec<_> = dp.params().into_iter().collect();
    params.sort_by(|x, y| x.0.cmp(&y.0));
    let init = params
        .iter()
        .map(|(k, p)| (k.clone(), random(&rt, p.shape(), &mut rng)))
        .collect();
    dp.set_params(&init).map_err(err)?;
    let x = random(&rt, data_shape, &mut rng);
    let labels: Vec<f32> = (0..a.batch).map(|_| rng.gen_range(0..10) as f32).collect();
    let y = rt
        .from_vec(labels, &[a.batch], Context::cpu(0))
        .map_err(err)?;
    let batch = [("data", &x), ("softmax_label", &y)];
    for _ in 0..2 {
        dp.step(&batch).map_err(err)?;
    }
    dp.wait().map_err(err)?;
    let t0 = Instant::now();
    for _ in 0..a.steps {
        dp.step(&batch).map_err(err)?;
    }
    dp.wait().map_err(err)?;
    let sps = (a.steps * a.batch) as f64 / t0.elapsed().as_secs_f64();
    let events = rt
        .engine()
        .profiler()
        .map(|p| p.events())
        .unwrap_or_default();
    Ok((sps, overlap(&events)))
}

fn run() -> Result<(), String> {
    let a = Args::parse();
    let text =
        std::fs::read_to_string(&a.file).map_err(|e| format!("cannot read {}: {e}", a.file))?;
    let net = Symbol::from_json(&text).map_err(|e| e.to_string())?;
    let sym = Symbol::op(
        "SoftmaxOutput",
        "softmax",
        &[&net, &Symbol::var("softmax_label")],
        Attrs::new(),
    )
    .map_err(|e| e.to_string())?;
    // The data shape: the model's shapes file with the batch replaced.
    let (side, shapes) = cli::sidecar_shapes(&a.file)?;
    let mut data_shape = shapes
        .and_then(|mut m| m.remove("data"))
        .ok_or(format!("{side}: no data shape"))?;
    data_shape[0] = a.batch;
    let mut results = vec![];
    for n in 1..=a.max_contexts {
        let (sps, (during, reductions)) = measure(&sym, &data_shape, &a, n)?;
        let mut r = serde_json::json!({"contexts": n, "samples_per_second": sps});
        if a.profile {
            r["reductions"] = reductions.into();
            r["reductions_during_backward"] = during.into();
        }
        if !a.json {
            print!("{n} context(s): {sps:.0} samples/s");
            if a.profile {
                print!("; {during} of {reductions} gradient reductions started while backward was running");
            }
            println!();
        }
        results.push(r);
    }
    let first = results[0]["samples_per_second"].as_f64().unwrap_or(1.0);
    let last = results[results.len() - 1]["samples_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    let speedup = last / first;
    // Kernels thread on their own unless told not to (see docs/benchmarks.md, data-parallel scaling).
    let kernel_threads = std::env::var("MATMUL_NUM_THREADS").unwrap_or_else(|_| "all cores".into());
    if a.json {
        println!(
            "{}",
            serde_json::json!({"model": a.file, "batch": a.batch, "steps": a.steps, "results": results, "speedup": speedup, "kernel_threads": kernel_threads})
        );
    } else {
        println!("speedup with {} contexts: {speedup:.2}x", a.max_contexts);
    }
    Ok(())
}

fn main() {
    cli::run_or_exit("data_parallel", run);
}
