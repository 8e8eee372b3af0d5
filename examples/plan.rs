//! Plans the memory of a model's bound graph.
//!
//! `cargo run --release --example plan -- FILE-symbol.json --shape data=32,3,224,224 [--train] [--reorder] [--solver NAME] [--json] [--svg OUT.svg] [--mxnet-bound FILE-bound.json]`
//!
//! `--reorder` also plans the graph in a memory-aware topological order and adds
//! `reordered_lower_bound_bytes` and `reordered_planned_bytes` (the fixed-order figures stay as
//! they are).
//! `cargo run --release --example plan -- --table` (every model in graphs/: inference at batch 1
//! and 32, training at batch 1 and 32, beside MXNet 1.9.1's own totals)
//!
//! Solvers: strong (default), greedy, heap, nnvm (match range 16), nnvm_auto. `--mxnet-bound`
//! plans exactly MXNet's graph and order from its dump and adds `mxnet_bytes`.

#[allow(dead_code)]
#[path = "common/cli.rs"]
mod cli;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use clap::Parser;
use ndarray_ops::plan::{
    bound_graph_problem, graph_problem, reorder_for_memory, symbol_desc, symbol_desc_mirrored,
    GraphDesc, GraphProblem,
};
use ndarray_ops::symbol::mirror::Mirror;
use ndarray_ops::Symbol;
use storage::plan::{lower_bound, solve, verify, Plan, Problem, SolverKind};

fn solver(name: &str) -> Result<SolverKind, String> {
    Ok(match name {
        "strong" => SolverKind::Strong(Duration::from_millis(500)),
        "greedy" | "greedy_by_size" => SolverKind::GreedyBySize,
        "heap" | "best_fit_heap" => SolverKind::BestFitHeap,
        "nnvm" => SolverKind::NnvmBlocks(16),
        "nnvm_auto" => SolverKind::NnvmAuto,
        other => {
            return Err(format!(
                "unknown solver {other:?} (strong, greedy, heap, nnvm, nnvm_auto)"
            ))
        }
    })
}

/// The graph replanned in a memory-aware order: its lower bound and plan.
fn reordered(desc: &GraphDesc, kind: SolverKind) -> Result<(u64, u64), String> {
    let gp = graph_problem(&reorder_for_memory(desc)).map_err(|e| e.to_string())?;
    let plan = solve(&gp.problem, kind);
    verify(&gp.problem, &plan).map_err(|e| format!("reordered: invalid plan: {e}"))?;
    Ok((lower_bound(&gp.problem), plan.arena))
}

struct Outcome {
    nodes: usize,
    gp: GraphProblem,
    lb: u64,
    nnvm: u64,
    plan: Plan,
    ms: f64,
}

fn plan(gp: GraphProblem, nodes: usize, kind: SolverKind) -> Result<Outcome, String> {
    let lb = lower_bound(&gp.problem);
    let nnvm = solve(&gp.problem, SolverKind::NnvmBlocks(16)).arena;
    let t = Instant::now();
    let plan = solve(&gp.problem, kind);
    let ms = t.elapsed().as_secs_f64() * 1e3;
    verify(&gp.problem, &plan).map_err(|e| format!("{}: invalid plan: {e}", plan.solver))?;
    Ok(Outcome {
        nodes,
        gp,
        lb,
        nnvm,
        plan,
        ms,
    })
}

/// Time across, address up, one rectangle per buffer.
fn svg(p: &Problem, plan: &Plan) -> String {
    let (w, h) = (1200.0, 700.0);
    let steps = p.steps().max(1) as f64;
    let arena = plan.arena.max(1) as f64;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{}" font-family="sans-serif" font-size="9">"#,
        h + 40.0
    );
    let _ = write!(
        s,
        r#"<text x="4" y="14" font-size="13">{} buffers, arena {} bytes, {} — time (steps) across, address up; red: recomputed during backward</text>"#,
        p.buffers.len(),
        plan.arena,
        plan.solver
    );
    for (i, (b, &off)) in p.buffers.iter().zip(&plan.offsets).enumerate() {
        let x = b.start as f64 / steps * w;
        let bw = ((b.end - b.start + 1) as f64 / steps * w).max(1.0);
        let y = 30.0 + h - (off + b.size) as f64 / arena * h;
        let bh = (b.size as f64 / arena * h).max(0.5);
        // Buffers recomputed during backward (mirror copies) stand out in one strong colour.
        let fill = match b.name.contains("_mirror") {
            true => "hsl(8,85%,50%)".to_string(),
            false => format!("hsl({},40%,78%)", (i * 47) % 360),
        };
        let _ = write!(
            s,
            r##"<rect x="{x:.1}" y="{y:.1}" width="{bw:.1}" height="{bh:.1}" fill="{fill}" stroke="#333" stroke-width="0.3"><title>{} ({} bytes, steps {}..{})</title></rect>"##,
            b.name, b.size, b.start, b.end
        );
        if bh > 10.0 && bw > 40.0 {
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                x + 2.0,
                y + 9.0,
                b.name.chars().take((bw / 6.0) as usize).collect::<String>()
            );
        }
    }
    s + "</svg>"
}

/// MXNet 1.9.1's own totals (graphs/README.md): inference b1, inference b32, training b1, training b32.
const MXNET: [(&str, [u64; 4]); 5] = [
    ("mlp", [4_136, 132_352, 7_312, 233_984]),
    (
        "resnet18_v1",
        [7_432_096, 237_831_168, 24_737_088, 790_396_416],
    ),
    (
        "resnet50_v1",
        [9_842_688, 314_840_064, 91_055_424, 2_907_186_688],
    ),
    (
        "mobilenet1.0",
        [6_631_424, 212_210_688, 43_656_512, 1_394_294_272],
    ),
    (
        "vgg16",
        [29_820_928, 954_269_696, 79_552_320, 2_545_674_240],
    ),
];

fn table() -> Result<(), String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/graphs");
    println!("| model | mode | batch | lower bound | planned | ratio | NNVM (16) | MXNet 1.9.1 | planned / MXNet | plan ms | reordered: bound | reordered: planned |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut ratios = vec![];
    for (model, mx) in MXNET {
        let text = std::fs::read_to_string(format!("{dir}/{model}-symbol.json"))
            .map_err(|e| format!("{model}: {e}"))?;
        let sym = Symbol::from_json(&text).map_err(|e| e.to_string())?;
        let (side, base) = cli::sidecar_shapes(&format!("{dir}/{model}-symbol.json"))?;
        let base = base.ok_or(format!("{model}: no {side}"))?;
        for (k, (train, batch)) in [(false, 1usize), (false, 32), (true, 1), (true, 32)]
            .into_iter()
            .enumerate()
        {
            let shapes: HashMap<String, Vec<usize>> = base
                .iter()
                .map(|(n, s)| {
                    (
                        n.clone(),
                        std::iter::once(batch)
                            .chain(s[1..].iter().copied())
                            .collect(),
                    )
                })
                .collect();
            let desc = symbol_desc(&sym, &shapes, train).map_err(|e| format!("{model}: {e}"))?;
            let kind = SolverKind::Strong(Duration::from_millis(500));
            let gp = graph_problem(&desc).map_err(|e| format!("{model}: {e}"))?;
            let o = plan(gp, desc.nodes.len(), kind)?;
            let (rlb, rplanned) = reordered(&desc, kind)?;
            let ratio = o.plan.arena as f64 / o.lb.max(1) as f64;
            ratios.push(ratio);
            println!(
                "| {model} | {} | {batch} | {} | {} | {ratio:.4} | {} | {} | {:.3} | {:.1} | {rlb} | {rplanned} |",
                if train { "training" } else { "inference" },
                o.lb,
                o.plan.arena,
                o.nnvm,
                mx[k],
                o.plan.arena as f64 / mx[k] as f64,
                o.ms
            );
        }
    }
    let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
    println!(
        "\ngeometric mean of planned / lower bound: {geo:.4}; worst {:.4}",
        ratios.iter().cloned().fold(0.0, f64::max)
    );
    Ok(())
}

/// Plans the memory of a model's bound graph: its lower bound, our plan and NNVM's, and with
/// --table every model in graphs/ beside MXNet 1.9.1's own totals.
#[derive(Parser)]
#[command(name = "plan")]
struct Args {
    /// The model's *-symbol.json (input shapes default to the *-shapes.json beside it).
    file: Option<String>,
    /// An input's shape (repeat for each input).
    #[arg(long = "shape", value_name = "NAME=D0,D1,...", value_parser = cli::shape)]
    shapes: Vec<(String, Vec<usize>)>,
    /// Plan the training graph (forward and backward) instead of inference.
    #[arg(long)]
    train: bool,
    /// Also plan the graph in a memory-aware topological order.
    #[arg(long)]
    reorder: bool,
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Draw the plan (buffers over time) into this SVG file.
    #[arg(long = "svg", value_name = "FILE")]
    svg_out: Option<String>,
    /// Plan exactly MXNet's graph and order from its bound-graph dump (adds mxnet_bytes).
    #[arg(long = "mxnet-bound", value_name = "FILE")]
    bound: Option<String>,
    /// The solver: strong, greedy, heap, nnvm (match range 16) or nnvm_auto.
    #[arg(long = "solver", value_name = "NAME", default_value = "strong", value_parser = solver)]
    kind: SolverKind,
    /// Every model in graphs/ at batch 1 and 32, inference and training, beside MXNet's totals.
    #[arg(long)]
    table: bool,
    /// With --train: recompute forward entries during backward, under a byte budget (`800M`,
    /// `1.5G`) or `auto` / `auto:FRACTION` (the least memory within that share of a step's time).
    #[arg(long, value_name = "BUDGET|auto", value_parser = cli::mirror)]
    mirror: Option<Mirror>,
}

fn run() -> Result<(), String> {
    let Args {
        file,
        shapes,
        train,
        reorder,
        json,
        svg_out,
        bound,
        kind,
        table: whole_table,
        mirror,
    } = Args::parse();
    if mirror.is_some() && !train {
        return Err("--mirror recomputes during backward: give --train too".into());
    }
    let mut mirror_report = None;
    if whole_table {
        return table();
    }
    let mut shapes = cli::shapes(shapes)?;
    let mut reordered_figures = None;
    let o = match (&bound, &file) {
        (Some(b), _) => {
            let text = std::fs::read_to_string(b).map_err(|e| format!("cannot read {b}: {e}"))?;
            let gp = bound_graph_problem(&text).map_err(|e| format!("{b}: {e}"))?;
            let nodes = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["nodes"].as_array().map(Vec::len))
                .unwrap_or(0);
            plan(gp, nodes, kind)?
        }
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f).map_err(|e| format!("cannot read {f}: {e}"))?;
            let sym = Symbol::from_json(&text).map_err(|e| format!("{f}: {e}"))?;
            if shapes.is_empty() {
                let (side, found) = cli::sidecar_shapes(f)?;
                shapes = found.ok_or(format!("give --shape (no {side})"))?;
            }
            let (desc, report) =
                symbol_desc_mirrored(&sym, &shapes, train, mirror.unwrap_or_default())
                    .map_err(|e| e.to_string())?;
            mirror_report = report;
            if reorder {
                reordered_figures = Some(reordered(&desc, kind)?);
            }
            let gp = graph_problem(&desc).map_err(|e| e.to_string())?;
            plan(gp, desc.nodes.len(), kind)?
        }
        (None, None) => {
            return Err("give a *-symbol.json file, --mxnet-bound FILE, or --table".into())
        }
    };
    if let Some(path) = &svg_out {
        std::fs::write(path, svg(&o.gp.problem, &o.plan))
            .map_err(|e| format!("cannot write {path}: {e}"))?;
    }
    let ratio = o.plan.arena as f64 / o.lb.max(1) as f64;
    if json {
        let mut v = serde_json::json!({
            "nodes": o.nodes, "entries": o.gp.entries, "buffers": o.gp.problem.buffers.len(), "inplace_entries": o.gp.inplace,
            "no_reuse_bytes": o.gp.problem.total_bytes(), "lower_bound_bytes": o.lb, "nnvm_bytes": o.nnvm,
            "planned_bytes": o.plan.arena, "ratio_to_lower_bound": ratio, "solver": o.plan.solver, "plan_ms": o.ms,
        });
        if let Some(m) = o.gp.mxnet_bytes {
            v["mxnet_bytes"] = m.into();
        }
        if let Some((lb, planned)) = reordered_figures {
            v["reordered_lower_bound_bytes"] = lb.into();
            v["reordered_planned_bytes"] = planned.into();
        }
        if let Some(r) = &mirror_report {
            v["mirror_recomputed_nodes"] = r.recomputed_nodes.into();
            v["unmirrored_lower_bound_bytes"] = r.unmirrored_bound_bytes.into();
            v["mirror_estimated_overhead"] = r.estimated_overhead.into();
            v["mirror_checkpoint_every"] = r.checkpoint_every.into();
            v["mirror_segments_end_at_cut"] = r.segments_end_at_cut.into();
        }
        println!("{v}");
    } else {
        println!(
            "{} nodes, {} internal entries ({} shared in place) in {} buffers",
            o.nodes,
            o.gp.entries,
            o.gp.inplace,
            o.gp.problem.buffers.len()
        );
        println!("no reuse {} bytes; lower bound {}; NNVM (range 16) {}; {} {} ({ratio:.4}x the bound) in {:.1} ms", o.gp.problem.total_bytes(), o.lb, o.nnvm, o.plan.solver, o.plan.arena, o.ms);
        if let Some(m) = o.gp.mxnet_bytes {
            println!(
                "MXNet's own plan: {m} bytes; ours is {:.4}x of it",
                o.plan.arena as f64 / m as f64
            );
        }
        if let Some((lb, planned)) = reordered_figures {
            println!("memory-aware order: lower bound {lb}, planned {planned}");
        }
        if let Some(r) = &mirror_report {
            let until = match r.segments_end_at_cut {
                0 => String::new(),
                k => format!(", segments up to cut point {k}"),
            };
            println!(
                "recomputed during backward: {} nodes (a checkpoint every {} cut points{until}), estimated {:.1}% of a step; bound without recomputation {} ({:.3}x)",
                r.recomputed_nodes,
                r.checkpoint_every,
                100.0 * r.estimated_overhead,
                r.unmirrored_bound_bytes,
                o.plan.arena as f64 / r.unmirrored_bound_bytes.max(1) as f64
            );
        }
    }
    Ok(())
}

fn main() {
    cli::run_or_exit("plan", run);
}
