//! Binds a real MXNet model with random weights and times it.
//!
//! `cargo run --release --example run_model -- graphs/resnet18_v1-symbol.json --shape data=1,3,224,224 [--train [--mirror BUDGET|auto|cheap]] [--iters N] [--engine KIND] [--ctx cpu(0)|gpu(0)] [--profile] [--params FILE] [--save-params FILE] [--graph] [--json]`
//!
//! `--params FILE` loads weights from an MXNet `.params` file (a checkpoint's `arg:`/`aux:`
//! keys, or Gluon's plain names) over the random ones; `--save-params FILE` writes the bound
//! arguments and auxiliary states after the run, in the same format (`arg:`/`aux:` keys).
//!
//! Prints the output shapes, the median forward time (inference mode) and, with `--train`, the
//! median forward+backward time (training mode; gradients of every argument but the inputs named
//! by `--shape`; head gradients of ones), and the memory report. `--profile` turns the engine's
//! profiler on and prints its per-op totals over the last timed iterations (forward+backward
//! with `--train`, else forward; the 20 largest; in `--json`, key `profile`, every op).

#[path = "common/global_allocator.rs"]
mod global_allocator;

#[allow(dead_code)]
#[path = "common/cli.rs"]
mod cli;
#[path = "common/weights.rs"]
mod weights;

use std::collections::HashMap;
use std::time::Instant;

use clap::Parser;
use engine::EngineKind;
use ndarray_ops::symbol::mirror::Mirror;
use ndarray_ops::{ndfile, BindOptions, Executor, Runtime, Symbol};
use storage::Context;

/// Binds a real MXNet model with random weights and times it: output shapes, the median
/// forward time (and with --train forward+backward), and the memory report.
#[derive(Parser)]
#[command(name = "run_model", allow_negative_numbers = true)]
struct Args {
    /// The model's *-symbol.json (input shapes default to the *-shapes.json beside it).
    file: String,
    /// An input's shape (repeat for each input).
    #[arg(long = "shape", value_name = "NAME=D0,D1,...", value_parser = cli::shape)]
    shapes: Vec<(String, Vec<usize>)>,
    /// Timed iterations (the median is reported).
    #[arg(long, default_value_t = 10, value_parser = cli::positive)]
    iters: usize,
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Also time forward+backward in training mode (gradients of every argument but the
    /// inputs named by --shape, head gradients of ones).
    #[arg(long)]
    train: bool,
    /// The engine (default: MXRS_ENGINE, else threaded_per_device).
    #[arg(long = "engine", value_name = "KIND", value_parser = cli::engine_kind)]
    kind: Option<EngineKind>,
    /// The device to bind on, such as cpu(0) or gpu(0).
    #[arg(long, default_value = "cpu(0)")]
    ctx: Context,
    /// Turn the engine's profiler on and print its per-op totals over the last timed
    /// iterations (the 20 largest).
    #[arg(long)]
    profile: bool,
    /// Load weights from an MXNet .params file over the random ones.
    #[arg(long, value_name = "FILE")]
    params: Option<String>,
    /// Write the bound arguments and auxiliary states afterwards, as an MXNet .params file.
    #[arg(long, value_name = "FILE")]
    save_params: Option<String>,
    /// With --train: recompute forward entries during backward, under a byte budget (`800M`),
    /// `auto` / `auto:FRACTION`, `cheap` (MXNet's rule) or `off` (default: MXRS_BACKWARD_MIRROR).
    #[arg(long, value_name = "BUDGET|auto|cheap|off", value_parser = cli::mirror)]
    mirror: Option<Mirror>,
    /// Print the bound graph: every node with its op, output shapes and bytes, and the nodes
    /// each fused node replaces (operator fusion: on unless MXRS_FUSION=0).
    #[arg(long)]
    graph: bool,
}

fn main() {
    cli::run_or_exit("run_model", run);
}

fn run() -> Result<(), String> {
    let a = Args::parse();
    let shapes = cli::given_or_sidecar(&a.file, &a.shapes)?;
    let err = |e: ndarray_ops::NdError| e.to_string();
    let text =
        std::fs::read_to_string(&a.file).map_err(|e| format!("cannot read {}: {e}", a.file))?;
    let sym = Symbol::from_json(&text).map_err(|e| format!("{}: {e}", a.file))?;
    // The engine and storage follow the MXRS_* variables; --engine overrides the engine kind.
    let rt = Runtime::from_env(|b| {
        let b = match a.kind {
            Some(k) => b.kind(k),
            None => b,
        };
        // Keeps a trace file MXRS_PROFILER_OUTPUT asked for.
        match a.profile && b.config().profiler.is_none() {
            true => b.profiler(None),
            false => b,
        }
    })
    .map_err(err)?;
    let profiler = rt.engine().profiler();
    let kind = rt.engine().kind();
    rt.seed(0).map_err(err)?;
    let ctx = a.ctx;
    let exec = if a.train {
        let req = weights::training_grads(&sym, &shapes);
        let opts = BindOptions {
            grad_req: req,
            mirror: a.mirror,
            ..BindOptions::default()
        };
        Executor::bind_with_options(&rt, ctx, &sym, &shapes, HashMap::new(), &opts).map_err(err)?
    } else {
        Executor::simple_bind(&rt, ctx, &sym, &shapes).map_err(err)?
    };
    // Random weights and inputs; head gradients of 1.
    weights::randomize(&rt, &exec).map_err(err)?;
    let loaded = match &a.params {
        Some(path) => Some(load_params(&exec, path)?),
        None => None,
    };
    if a.mirror.is_some() && !a.train {
        return Err("--mirror recomputes during backward: give --train too".into());
    }
    let grads: Vec<_> = exec.grad_dict().into_values().collect();
    let time = |step: &dyn Fn() -> ndarray_ops::Result<()>| -> Result<f64, String> {
        let mut times = vec![];
        for i in 0..a.iters + 2 {
            let t = Instant::now();
            step().map_err(err)?;
            for o in exec.outputs().iter().chain(&grads) {
                o.wait_to_read().map_err(err)?;
            }
            if i >= 2 {
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            // Profile this run's timed iterations only.
            if i == 1 {
                profiler.inspect(|p| p.reset());
            }
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    };
    let forward_ms = time(&|| exec.forward(false))?;
    let forward_backward_ms = if a.train {
        Some(time(&|| {
            exec.forward(true)?;
            exec.backward()
        })?)
    } else {
        None
    };
    if let Some(path) = &a.save_params {
        // The learned arguments: not the inputs named by --shape, nor head gradients.
        let mut learned = exec.arg_dict();
        learned.retain(|n, _| !shapes.contains_key(n) && !n.contains("_head_grad"));
        ndfile::save_params(path, &learned, &exec.aux_dict()).map_err(err)?;
    }
    let mem = exec.memory_report();
    let out_shapes: Vec<Vec<usize>> = exec.outputs().iter().map(|o| o.shape().to_vec()).collect();
    const TOP: usize = 20;
    if a.json {
        let mut report = serde_json::json!({"forward_ms": forward_ms, "forward_backward_ms": forward_backward_ms, "planned_bytes": mem.planned_bytes, "no_reuse_bytes": mem.no_reuse_bytes, "lower_bound_bytes": mem.lower_bound_bytes, "allocated_bytes": mem.allocated_bytes, "inplace_entries": mem.inplace, "output_shapes": out_shapes, "engine": kind.name(), "context": ctx.to_string(), "iters": a.iters});
        if let Some(r) = exec.mirror_report() {
            report["mirror_recomputed_nodes"] = r.recomputed_nodes.into();
            report["unmirrored_lower_bound_bytes"] = r.unmirrored_bound_bytes.into();
            report["mirror_estimated_overhead"] = r.estimated_overhead.into();
        }
        // Nodes the fusion pass made, and the op of each.
        report["fused_nodes"] = exec.fusion_report().fused.len().into();
        report["fused_nodes_removed"] = exec.fusion_report().nodes_removed().into();
        if let Some((n_args, n_aux)) = loaded {
            report["params_loaded"] =
                serde_json::json!({"arguments": n_args, "auxiliary_states": n_aux});
        }
        if !ctx.is_cpu() {
            // Which path the GPU's convolutions took: a cuDNN version, or null for im2col.
            report["cudnn"] = ndarray_ops::cudnn_version().into();
        }
        if let Some(p) = profiler {
            // Every op, largest totals first (the text report shows the first TOP).
            let top: Vec<_> = p.summary().into_iter().map(|s| {
                serde_json::json!({"op": s.name, "context": s.ctx.to_string(), "count": s.count, "total_ns": s.total_ns, "min_ns": s.min_ns, "max_ns": s.max_ns})
            }).collect();
            report["profile"] = top.into();
        }
        println!("{report}");
    } else {
        if a.graph {
            print!("{}", exec.debug_str());
        }
        println!("{}: outputs {out_shapes:?}", a.file);
        if let (Some((n_args, n_aux)), Some(path)) = (loaded, &a.params) {
            println!("weights: {n_args} arguments and {n_aux} auxiliary states from {path}");
        }
        println!(
            "forward: {forward_ms:.2} ms (median of {}, {} on {ctx})",
            a.iters,
            kind.name()
        );
        if let Some(fb) = forward_backward_ms {
            println!(
                "forward+backward: {fb:.2} ms (training mode, median of {})",
                a.iters
            );
        }
        println!(
            "internal entries: {} ({} in place), {} bytes without reuse, {} planned, lower bound {}, {} allocated",
            mem.entries, mem.inplace, mem.no_reuse_bytes, mem.planned_bytes, mem.lower_bound_bytes, mem.allocated_bytes
        );
        let fusion = exec.fusion_report();
        if !fusion.fused.is_empty() {
            println!(
                "fused: {} nodes in place of {}",
                fusion.fused.len(),
                fusion.fused.len() + fusion.nodes_removed()
            );
        }
        if let Some(r) = exec.mirror_report() {
            println!(
                "recomputed during backward: {} nodes, estimated {:.1}% of a step; lower bound without recomputation {}",
                r.recomputed_nodes,
                100.0 * r.estimated_overhead,
                r.unmirrored_bound_bytes
            );
        }
        if let Some(p) = profiler {
            let what = match a.train {
                true => "forward+backward",
                false => "forward",
            };
            println!("\nengine profile of the timed {what} iterations, largest totals first:");
            for line in p.summary_table().lines().take(TOP + 1) {
                println!("{line}");
            }
        }
    }
    Ok(())
}

/// Loads a `.params` file into the bound arrays: `arg:`/`aux:` keys as a checkpoint writes
/// them, else plain names (Gluon's `save_parameters`), each found among the auxiliary states
/// or else the arguments. Returns how many arguments and auxiliary states it set.
fn load_params(exec: &Executor, path: &str) -> Result<(usize, usize), String> {
    let (rt, ctx) = exec.context();
    let named = ndfile::load(path, rt, ctx)
        .and_then(|l| l.into_named())
        .map_err(|e| e.to_string())?;
    let (args, aux) = match ndfile::split_params(named.clone()) {
        Ok(split) => split,
        Err(_) => {
            let aux_names = exec.aux_dict();
            named
                .into_iter()
                .partition(|(name, _)| !aux_names.contains_key(name))
        }
    };
    exec.copy_params_from(&args, &aux, false)
        .map_err(|e| format!("{path}: {e}"))?;
    Ok((args.len(), aux.len()))
}
