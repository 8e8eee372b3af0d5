//! Storage managers against the system allocator, and their fragmentation on the committed traces.
//!
//! `cargo run --release --example storage_bench -- [--json] [--quick]`
//!
//! * alloc_free_ns: per size, ns for one alloc + write to the first page + free, median of
//!   batches, for `std::alloc` (the system allocator, 64-byte aligned) and each manager (warm:
//!   the pools have seen the size before).
//! * traces: each committed trace replayed through a fresh manager of each kind: fragmentation
//!   (peak reserved / peak requested) and replay time.

#[path = "common/stats.rs"]
mod stats;

use std::alloc::Layout;
use std::time::Instant;

use clap::Parser;
use storage::{Context, PoolKind, StorageManager, Trace};

const SIZES: [usize; 5] = [4096, 65536, 1 << 20, 16 << 20, 64 << 20];
const TRACES: [(&str, &str); 2] = [
    ("training", include_str!("../storage/traces/training.trace")),
    ("stress", include_str!("../storage/traces/stress.trace")),
];

/// Median over `batches` of the mean ns per call of `f` over `per_batch` calls.
fn time_per_call(batches: usize, per_batch: usize, mut f: impl FnMut()) -> f64 {
    f();
    stats::median(
        (0..batches)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..per_batch {
                    f();
                }
                t.elapsed().as_nanos() as f64 / per_batch as f64
            })
            .collect(),
    )
}

fn per_batch(size: usize, quick: bool) -> usize {
    let n = if size >= 16 << 20 { 40 } else { 2000 };
    if quick {
        n / 10
    } else {
        n
    }
}

fn system(size: usize, quick: bool) -> f64 {
    let layout = Layout::from_size_align(size, 64).expect("valid layout");
    time_per_call(9, per_batch(size, quick), || {
        // SAFETY: non-zero layout; the block is written once and freed with the same layout.
        unsafe {
            let p = std::alloc::alloc(layout);
            assert!(!p.is_null(), "system allocator out of memory");
            std::ptr::write_volatile(p, 1u8);
            std::alloc::dealloc(p, layout);
        }
    })
}

fn manager(m: &StorageManager, size: usize, quick: bool) -> f64 {
    time_per_call(9, per_batch(size, quick), || {
        let mut h = m.alloc(size).expect("allocation");
        h.write(0, &[1]).expect("host memory");
        drop(h);
    })
}

/// Storage allocation speed per size: every manager beside the system allocator.
#[derive(Parser)]
#[command(name = "storage_bench")]
struct Args {
    /// Print one JSON line instead of a table.
    #[arg(long)]
    json: bool,
    /// Fewer calls per size, for a quick look.
    #[arg(long)]
    quick: bool,
}

fn main() {
    let Args { json, quick } = Args::parse();
    let mut alloc = serde_json::Map::new();
    let mut speedups = serde_json::Map::new();
    let mut table = vec![];
    let sys: Vec<f64> = SIZES.iter().map(|&s| system(s, quick)).collect();
    let mut row = |name: &str, ns: Vec<f64>| {
        let cells: serde_json::Map<String, serde_json::Value> = SIZES
            .iter()
            .zip(&ns)
            .map(|(s, v)| (s.to_string(), (*v).into()))
            .collect();
        let ratios: serde_json::Map<String, serde_json::Value> = SIZES
            .iter()
            .zip(ns.iter().zip(&sys))
            .map(|(s, (v, b))| (s.to_string(), (b / v).into()))
            .collect();
        alloc.insert(name.to_string(), cells.into());
        if name != "system" {
            speedups.insert(name.to_string(), ratios.into());
        }
        table.push((name.to_string(), ns));
    };
    row("system", sys.clone());
    for kind in PoolKind::ALL {
        let m = StorageManager::new(Context::cpu(0), kind);
        row(
            kind.name(),
            SIZES.iter().map(|&s| manager(&m, s, quick)).collect(),
        );
    }

    let mut traces = serde_json::Map::new();
    let mut trace_lines = vec![];
    for (name, text) in TRACES {
        let trace: Trace = text.parse().expect("committed traces parse");
        let mut per = serde_json::Map::new();
        for kind in PoolKind::ALL {
            let m = StorageManager::new(Context::cpu(0), kind);
            let r = trace.replay(&m).expect("replay fits in memory");
            trace_lines.push(format!(
                "{name:<9} {:<13} fragmentation {:>6.3}  peak reserved {:>10}  replay {:>8.2} ms",
                kind.name(),
                r.fragmentation,
                storage::human(r.peak_reserved),
                r.replay_ms
            ));
            per.insert(
                kind.name().into(),
                serde_json::json!({
                    "fragmentation": r.fragmentation,
                    "replay_ms": r.replay_ms,
                    "peak_reserved": r.peak_reserved,
                    "peak_requested": r.peak_requested,
                }),
            );
        }
        traces.insert(name.into(), per.into());
    }

    let report = serde_json::json!({
        "alloc_free_ns": alloc,
        "speedup_vs_system": speedups,
        "traces": traces,
    });
    if json {
        println!("{report}");
        return;
    }
    println!(
        "ns per alloc + first-page write + free (median), and speed-up over the system allocator"
    );
    print!("{:<14}", "");
    for s in SIZES {
        print!("{:>18}", storage::human(s));
    }
    println!();
    for (name, ns) in table {
        print!("{name:<14}");
        for (v, b) in ns.iter().zip(&sys) {
            print!("{:>10.0} ({:>5.1}x)", v, b / v);
        }
        println!();
    }
    println!();
    for l in trace_lines {
        println!("{l}");
    }
}
