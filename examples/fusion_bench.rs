//! Operator fusion's effect, measured in pairs: a model bound with fusion beside the same
//! model bound without, in one process, for inference and for a training step.
//!
//! `cargo run --release --example fusion_bench -- graphs/resnet50_v1-symbol.json --shape data=1,3,224,224 [--rounds 7] [--json]`
//!
//! Binds the graph four times with the same random weights: for inference (no gradients) and
//! for training (every argument but the inputs getting a gradient, head gradients of ones),
//! each with and without fusion. Each round runs a forward pass of both inference executors
//! and a forward+backward step of both training executors, waited for, which one goes first
//! alternating from round to round; the fused time over the unfused one is the median over
//! rounds of the ratio within a round, so drift of the machine's speed between rounds cancels.
//! Prints per mode the nodes fused, both medians, the ratio and its range, and the planned
//! memory's lower bound of each.

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
use ndarray_ops::{BindOptions, Executor, Runtime, Symbol};
use storage::Context;

#[derive(Parser)]
#[command(name = "fusion_bench")]
struct Args {
    /// The graph (`*-symbol.json`).
    file: String,
    /// Input shapes, `name=d0,d1,...` (default: the `*-shapes.json` file beside the graph).
    #[arg(long = "shape", value_parser = cli::shape)]
    shapes: Vec<(String, Vec<usize>)>,
    /// Timed rounds (after one untimed round).
    #[arg(long, default_value_t = 7, value_parser = cli::positive)]
    rounds: usize,
    /// Print one JSON line.
    #[arg(long)]
    json: bool,
}

fn main() {
    cli::run_or_exit("fusion_bench", run);
}

fn run() -> Result<(), String> {
    let a = Args::parse();
    let shapes = cli::given_or_sidecar(&a.file, &a.shapes)?;
    let err = |e: ndarray_ops::NdError| e.to_string();
    let sym = Symbol::load(&a.file).map_err(|e| format!("{}: {e}", a.file))?;
    let rt = Runtime::from_env(|b| b).map_err(err)?;
    let ctx = Context::cpu(0);
    let training = weights::training_grads(&sym, &shapes);
    let bind = |grad_req: &HashMap<String, ndarray_ops::GradReq>, fusion: bool| {
        let opts = BindOptions {
            grad_req: grad_req.clone(),
            fusion: Some(fusion),
            ..BindOptions::default()
        };
        let exec = Executor::bind_with_options(&rt, ctx, &sym, &shapes, HashMap::new(), &opts)
            .map_err(err)?;
        // The same random weights in every executor: the same seed before each draw.
        rt.seed(0).map_err(err)?;
        weights::randomize(&rt, &exec).map_err(err)?;
        Ok::<Executor, String>(exec)
    };
    let step = |e: &Executor, train: bool| -> Result<f64, String> {
        let t = Instant::now();
        e.forward(train).map_err(err)?;
        if train {
            e.backward().map_err(err)?;
        }
        for g in e.grad_dict().values().chain(&e.outputs()) {
            g.wait_to_read().map_err(err)?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let mut modes = Vec::new();
    for (mode, req, train) in [
        ("inference", HashMap::new(), false),
        ("training", training, true),
    ] {
        let pair = [bind(&req, false)?, bind(&req, true)?];
        for e in &pair {
            step(e, train)?;
        }
        let mut times = [Vec::new(), Vec::new()];
        for round in 0..a.rounds {
            for k in 0..2 {
                let i = (round + k) % 2;
                times[i].push(step(&pair[i], train)?);
            }
        }
        let ratios: Vec<f64> = times[1].iter().zip(&times[0]).map(|(f, u)| f / u).collect();
        let (lo, hi) = ratios
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), &r| (l.min(r), h.max(r)));
        let report = pair[1].fusion_report();
        let row = serde_json::json!({
            "mode": mode,
            "fused_nodes": report.fused.len(),
            "nodes_removed": report.nodes_removed(),
            "unfused_ms": stats::median(times[0].clone()),
            "fused_ms": stats::median(times[1].clone()),
            "fused_over_unfused": stats::median(ratios.clone()),
            "fused_over_unfused_range": [lo, hi],
            "unfused_lower_bound_bytes": pair[0].memory_report().lower_bound_bytes,
            "fused_lower_bound_bytes": pair[1].memory_report().lower_bound_bytes,
        });
        if !a.json {
            println!(
                "{mode}: {} fused nodes in place of {}; {:.2} ms fused, {:.2} ms unfused: {:.3}x ({lo:.3}-{hi:.3}); lower bound {} fused, {} unfused",
                report.fused.len(),
                report.fused.len() + report.nodes_removed(),
                stats::median(times[1].clone()),
                stats::median(times[0].clone()),
                stats::median(ratios),
                row["fused_lower_bound_bytes"],
                row["unfused_lower_bound_bytes"],
            );
        }
        modes.push(row);
    }
    if a.json {
        let report = serde_json::json!({"graph": a.file, "rounds": a.rounds, "modes": modes});
        println!("{report}");
    }
    Ok(())
}
