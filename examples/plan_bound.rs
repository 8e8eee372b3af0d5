//! Plans MXNet's own bound graphs (`graphs/*-bound.json`: MXNet's graph and execution order)
//! with every solver, beside the lower bound and MXNet's own plan size, for a like-for-like
//! comparison. In-place sharing follows our op registry's rules (ops it does not know, such as
//! MXNet's `_backward_*` ops, get none); the liveness-only bound is reported beside it.
//!
//! `cargo run --release --example plan_bound -- [--json] [FILE...]`

use std::time::{Duration, Instant};

use clap::Parser;
use ndarray_ops::plan::bound_graph_problem;
use storage::plan::{lower_bound, mxnet, solve, verify, SolverKind};

/// Plans MXNet's own bound graphs (graphs/*-bound.json) with every solver, beside the lower
/// bound and MXNet's own plan size.
#[derive(Parser)]
#[command(name = "plan_bound")]
struct Args {
    /// Print one JSON line instead of a table.
    #[arg(long)]
    json: bool,
    /// The bound-graph dumps (default: every graphs/*-bound.json).
    files: Vec<String>,
}

fn main() {
    let Args { json, mut files } = Args::parse();
    if files.is_empty() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/graphs");
        let mut found: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.path().to_string_lossy().into_owned())
                    .filter(|p| p.ends_with("-bound.json"))
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        files = found;
    }
    let solvers = [
        SolverKind::NnvmBlocks(16),
        SolverKind::NnvmAuto,
        SolverKind::GreedyBySize,
        SolverKind::BestFitHeap,
        SolverKind::Strong(Duration::from_millis(200)),
    ];
    if !json {
        println!(
            "{:<38} {:>14} {:>14} {:>9} {:>9} {:>9} {:>9} {:>8}",
            "graph", "lower bound", "best plan", "strong", "greedy", "nnvm16", "nnvm auto", "ms"
        );
    }
    for f in files {
        let text = match std::fs::read_to_string(&f) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("plan_bound: cannot read {f}: {e}");
                std::process::exit(2);
            }
        };
        let (liveness, gp) = match (mxnet::liveness_problem(&text), bound_graph_problem(&text)) {
            (Ok(l), Ok(g)) => (l.0, g),
            (Err(e), _) => {
                eprintln!("plan_bound: {f}: {e}");
                std::process::exit(2);
            }
            (_, Err(e)) => {
                eprintln!("plan_bound: {f}: {e}");
                std::process::exit(2);
            }
        };
        let (p, mxnet_bytes) = (gp.problem, gp.mxnet_bytes);
        let liveness_bound = lower_bound(&liveness);
        let lb = lower_bound(&p);
        let mut res = serde_json::Map::new();
        let mut arenas = vec![];
        let mut strong_ms = 0.0;
        for k in solvers {
            let t = Instant::now();
            let plan = solve(&p, k);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if let Err(e) = verify(&p, &plan) {
                eprintln!(
                    "plan_bound: {f}: {} produced an invalid plan: {e}",
                    plan.solver
                );
                std::process::exit(1);
            }
            if matches!(k, SolverKind::Strong(_)) {
                strong_ms = ms;
            }
            arenas.push(plan.arena);
            res.insert(plan.solver.clone(), serde_json::json!({"bytes": plan.arena, "ratio_to_lower_bound": plan.arena as f64 / lb.max(1) as f64, "plan_ms": ms}));
        }
        let name = std::path::Path::new(&f)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or(f.clone());
        let best = *arenas.iter().min().unwrap_or(&0);
        if json {
            println!(
                "{}",
                serde_json::json!({"graph": name, "entries": gp.entries, "inplace_entries": gp.inplace, "buffers": p.buffers.len(), "no_reuse_bytes": liveness.total_bytes(), "liveness_lower_bound_bytes": liveness_bound, "lower_bound_bytes": lb, "planned_bytes": best, "ratio_to_lower_bound": best as f64 / lb.max(1) as f64, "mxnet_bytes": mxnet_bytes, "solvers": res})
            );
        } else {
            let r = |a: u64| a as f64 / lb.max(1) as f64;
            println!(
                "{name:<38} {lb:>14} {best:>14} {:>9.4} {:>9.4} {:>9.4} {:>9.4} {:>8.1}",
                r(arenas[4]),
                r(arenas[2]),
                r(arenas[0]),
                r(arenas[1]),
                strong_ms
            );
            if let Some(m) = mxnet_bytes {
                println!(
                    "{:<38} in place: {} of {} entries; liveness-only bound {liveness_bound}; MXNet's plan {m}: ours is {:.4}x of it",
                    "",
                    gp.inplace,
                    gp.entries,
                    best as f64 / m as f64
                );
            }
        }
    }
}
