//! Recomputation's time, measured in pairs: a training step of a model without recomputation
//! beside the same step under each recomputation setting, in one process.
//!
//! `cargo run --release --example mirror_bench -- graphs/resnet50_v1-symbol.json --shape data=32,3,224,224 --mirror auto:0.3,auto:0.5 [--rounds 5] [--json]`
//!
//! Binds the graph for training (every argument but the inputs getting a gradient, head
//! gradients of ones, the same random weights) once without recomputation and once per
//! setting, then runs rounds: in each, one forward+backward step of every executor, waited
//! for, the order rotating from round to round. A setting's time over the unmirrored step is
//! the median over rounds of the two steps' ratio within a round, so drift of the machine's
//! speed between rounds cancels. Prints, per setting, the planned bytes against the unmirrored
//! lower bound, the cost model's estimate and the measured time over the unmirrored step.

#[allow(dead_code)]
#[path = "common/cli.rs"]
mod cli;
#[path = "common/global_allocator.rs"]
mod global_allocator;
#[path = "common/weights.rs"]
mod weights;

#[path = "common/stats.rs"]
mod stats;

use std::collections::HashMap;
use std::time::Instant;

use clap::Parser;
use ndarray_ops::symbol::mirror::Mirror;
use ndarray_ops::{BindOptions, Executor, Runtime, Symbol};
use storage::Context;

#[derive(Parser)]
#[command(name = "mirror_bench")]
struct Args {
    /// The graph (`*-symbol.json`).
    file: String,
    /// Input shapes, `name=d0,d1,...` (default: the `*-shapes.json` file beside the graph).
    #[arg(long = "shape", value_parser = cli::shape)]
    shapes: Vec<(String, Vec<usize>)>,
    /// Recomputation settings to time against none, comma-separated (`auto:0.3,800M,cheap`).
    #[arg(long, value_delimiter = ',', value_parser = cli::mirror, required = true)]
    mirror: Vec<Mirror>,
    /// Rounds of one step per executor (after one untimed round).
    #[arg(long, default_value_t = 5, value_parser = cli::positive)]
    rounds: usize,
    /// Print one JSON line.
    #[arg(long)]
    json: bool,
}

fn main() {
    cli::run_or_exit("mirror_bench", run);
}

fn run() -> Result<(), String> {
    let a = Args::parse();
    let shapes = cli::given_or_sidecar(&a.file, &a.shapes)?;
    let err = |e: ndarray_ops::NdError| e.to_string();
    let sym = Symbol::load(&a.file).map_err(|e| format!("{}: {e}", a.file))?;
    let rt = Runtime::from_env(|b| b).map_err(err)?;
    let ctx = Context::cpu(0);
    let req = weights::training_grads(&sym, &shapes);
    let settings: Vec<Mirror> = std::iter::once(Mirror::Off)
        .chain(a.mirror.iter().copied())
        .collect();
    let mut execs = Vec::new();
    for m in &settings {
        let opts = BindOptions {
            grad_req: req.clone(),
            mirror: Some(*m),
            ..BindOptions::default()
        };
        let exec = Executor::bind_with_options(&rt, ctx, &sym, &shapes, HashMap::new(), &opts)
            .map_err(|e| format!("--mirror {m}: {e}"))?;
        // The same random weights in every executor: the same seed before each draw.
        rt.seed(0).map_err(err)?;
        weights::randomize(&rt, &exec).map_err(err)?;
        execs.push(exec);
    }
    let step = |e: &Executor| -> Result<f64, String> {
        let t = Instant::now();
        e.forward(true).map_err(err)?;
        e.backward().map_err(err)?;
        for g in e.grad_dict().values().chain(&e.outputs()) {
            g.wait_to_read().map_err(err)?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    for e in &execs {
        step(e)?;
    }
    let mut times = vec![Vec::new(); execs.len()];
    for round in 0..a.rounds {
        for k in 0..execs.len() {
            let i = (round + k) % execs.len();
            times[i].push(step(&execs[i])?);
        }
    }
    let base = execs[0].memory_report().lower_bound_bytes;
    let mut rows = Vec::new();
    for (i, (m, e)) in settings.iter().zip(&execs).enumerate().skip(1) {
        let ratios: Vec<f64> = times[i].iter().zip(&times[0]).map(|(t, b)| t / b).collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), &r| (l.min(r), h.max(r)));
        let planned = e.memory_report().planned_bytes;
        let estimate = e.mirror_report().map_or(0.0, |r| r.estimated_overhead);
        rows.push(serde_json::json!({
            "mirror": m.to_string(),
            "planned_bytes": planned,
            "planned_over_unmirrored_bound": planned as f64 / base as f64,
            "estimated_overhead": estimate,
            "step_ms": stats::median(times[i].clone()),
            "time_over_unmirrored": stats::median(ratios.clone()),
            "time_over_unmirrored_range": [lo, hi],
        }));
        if !a.json {
            println!(
                "{m}: {:.3} of the bound, step {:.0} ms, {:.3}x the unmirrored step ({lo:.3}-{hi:.3}; estimated {:.3})",
                planned as f64 / base as f64,
                stats::median(times[i].clone()),
                stats::median(ratios.clone()),
                1.0 + estimate
            );
        }
    }
    let report = serde_json::json!({
        "graph": a.file,
        "rounds": a.rounds,
        "unmirrored_lower_bound_bytes": base,
        "unmirrored_step_ms": stats::median(times[0].clone()),
        "settings": rows,
    });
    match a.json {
        true => println!("{report}"),
        false => println!("unmirrored step {:.0} ms", stats::median(times[0].clone())),
    }
    Ok(())
}
