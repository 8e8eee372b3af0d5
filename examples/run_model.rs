//! Binds a real MXNet model with random weights and times its forward pass.
//!
//! `cargo run --release --example run_model -- graphs/resnet18_v1-symbol.json --shape data=1,3,224,224 [--iters N] [--engine KIND] [--json]`
//!
//! Prints the output shapes, the median forward time and the memory report. (Backward comes
//! with the gradient pass.)

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashMap;
use std::time::Instant;

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::{invoke_on, Attrs, Executor, Runtime, Symbol};
use storage::{Context, StorageConfig};

fn main() {
    if let Err(e) = run() {
        eprintln!("run_model: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (mut file, mut shapes, mut iters, mut json, mut kind) = (
        None,
        HashMap::new(),
        10usize,
        false,
        EngineKind::ThreadedPerDevice,
    );
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = true,
            "--iters" => {
                iters = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("--iters needs a positive number")?
            }
            "--engine" => {
                let v = args.next().ok_or("--engine needs a name")?;
                kind = EngineKind::parse(&v).ok_or(format!("unknown engine {v:?}"))?;
            }
            "--shape" => {
                let spec = args.next().ok_or("--shape needs name=d0,d1,...")?;
                let (name, dims) = spec
                    .split_once('=')
                    .ok_or(format!("--shape {spec:?}: expected name=d0,d1,..."))?;
                let dims: Vec<usize> = dims
                    .split(',')
                    .map(|d| {
                        d.trim()
                            .parse::<usize>()
                            .map_err(|e| format!("--shape {spec:?}: {e}"))
                    })
                    .collect::<Result<_, _>>()?;
                shapes.insert(name.to_string(), dims);
            }
            f if !f.starts_with("--") && file.is_none() => file = Some(f.to_string()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let file = file.ok_or("give a *-symbol.json file")?;
    let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let sym = Symbol::from_json(&text).map_err(|e| format!("{file}: {e}"))?;
    if shapes.is_empty() {
        let side = file.replace("-symbol.json", "-shapes.json");
        if let Ok(t) = std::fs::read_to_string(&side) {
            shapes = serde_json::from_str(&t).map_err(|e| format!("{side}: {e}"))?;
        }
    }
    let rt = Runtime::new(EngineBuilder::new(kind).build(), StorageConfig::default());
    rt.seed(0).map_err(|e| e.to_string())?;
    let ctx = Context::cpu(0);
    let exec = Executor::simple_bind(&rt, ctx, &sym, &shapes).map_err(|e| e.to_string())?;
    // Random weights and inputs, small enough that activations stay finite.
    for (name, a) in exec.arg_dict() {
        let shape = format!("{:?}", a.shape())
            .replace('[', "(")
            .replace(']', ")");
        let attrs = Attrs::new()
            .with("low", -0.05)
            .with("high", 0.05)
            .with("shape", shape)
            .with("dtype", a.dtype().name());
        let _ = name;
        invoke_on(&rt, ctx, "_random_uniform", &[], &attrs, Some(&[&a]))
            .map_err(|e| e.to_string())?;
    }
    let mut times = vec![];
    for i in 0..iters + 2 {
        let t = Instant::now();
        exec.forward(false).map_err(|e| e.to_string())?;
        for o in exec.outputs() {
            o.wait_to_read().map_err(|e| e.to_string())?;
        }
        if i >= 2 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    let forward_ms = times[times.len() / 2];
    let mem = exec.memory_report();
    let out_shapes: Vec<Vec<usize>> = exec.outputs().iter().map(|o| o.shape().to_vec()).collect();
    if json {
        println!(
            "{}",
            serde_json::json!({"forward_ms": forward_ms, "planned_bytes": mem.planned_bytes, "no_reuse_bytes": mem.no_reuse_bytes, "lower_bound_bytes": mem.lower_bound_bytes, "output_shapes": out_shapes, "engine": kind.name(), "iters": iters})
        );
    } else {
        println!("{file}: outputs {out_shapes:?}");
        println!(
            "forward: {forward_ms:.2} ms (median of {iters}, {})",
            kind.name()
        );
        println!(
            "internal entries: {} bytes without reuse, {} planned, lower bound {}",
            mem.no_reuse_bytes, mem.planned_bytes, mem.lower_bound_bytes
        );
    }
    Ok(())
}
