//! Engine overhead per no-op op, for every engine, beside a bare `crossbeam-deque` pool (the
//! floor: what running the same boxed closures on the same number of threads costs with no
//! dependency tracking at all).
//!
//! `cargo run --release --example engine_bench -- [--json] [--threads N] [--repeats R] [--scale F] [--only ENGINE] [--bulk-size N] [--workload NAME[,NAME...]]`
//!
//! Workloads (ns per op, median of R runs):
//! * independent: 1,000,000 ops, op i writes var i % 1024, then `wait_for_all`;
//! * chain: 100,000 ops all writing one var;
//! * chain_bulk: the same chain pushed through a bulk pusher (units of 16, or `--bulk-size N`);
//! * fanout: 10,000 rounds of 8 ops reading one var and writing 8 others, then 1 op reading
//!   those 8 and writing the first;
//! * independent_cheap / chain_cheap (extra keys): independent and chain with every op marked
//!   `Op::cheap`, so a threaded engine runs each on the pushing thread when it is ready at push;
//! * independent_split (extra keys `independent_push_alone_ns`, `independent_run_alone_ns`,
//!   threaded engines): the independent workload with the compute workers held back while it is
//!   pushed, then released: what each side costs when the other is not running beside it;
//! * chain_bulk_split (extra keys `chain_bulk_push_alone_ns`, `chain_bulk_run_alone_ns`): the
//!   same for the bulked chain;
//! * independent_profiled (extra keys `independent_profiled_ns`, `profiler_cost`): the
//!   independent workload on a fresh engine of the same kind with the profiler on (recording
//!   every op, writing no file), and its cost beside the unprofiled run;
//! * crossed (extra key `crossed_ns`): 4 threads pushing at once, 250,000 ops each, every op
//!   writing one of 8 vars and reading the next one, so that the threads' read and write sets
//!   cross (wall time per op over all four).
//!
//! Beside the floor, with the independent workload, the same bare pool with jobs that carry
//! more: `floor_boxed_ns`, 16 bytes each (so each job is one allocation the pusher makes and the
//! worker frees); `floor_op_sized_ns`, 168 bytes each (an op record's size);
//! `floor_with_var_ns`, op-sized jobs that each lock one of 1024 var-sized records on both
//! sides (the least an engine with per-var state does per op); and `line_transfer_ns`, how long
//! one cache line takes to move between two threads' cores (this machine alternates between
//! ~37 and ~220 ns, and every hand-over follows it).

#[path = "common/global_allocator.rs"]
mod global_allocator;

#[allow(dead_code)]
#[path = "common/cli.rs"]
mod cli;

#[path = "common/stats.rs"]
mod stats;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use clap::{CommandFactory, FromArgMatches, Parser};
use crossbeam_deque::{Injector, Steal, Worker};
use engine::{Engine, EngineBuilder, EngineKind, Op, Var};

/// Engine overhead per no-op op, for every engine, beside a bare crossbeam-deque pool (the
/// floor) on the same number of threads.
#[derive(Parser)]
#[command(name = "engine_bench", allow_negative_numbers = true)]
pub struct Args {
    /// Print one JSON line instead of a table.
    #[arg(long)]
    json: bool,
    /// Compute workers of each engine (and threads of the bare pool).
    #[arg(long, default_value_t = 1, value_parser = cli::positive)]
    threads: usize,
    /// Runs of each workload (the median is reported).
    #[arg(long, value_name = "R", default_value_t = 5, value_parser = cli::positive)]
    repeats: usize,
    /// Scales every workload's op count (0.01: a hundredth of the ops).
    #[arg(long, value_name = "F", default_value_t = 1.0, value_parser = positive_scale)]
    scale: f64,
    /// Measure only this engine.
    #[arg(long, value_name = "ENGINE", value_parser = cli::engine_kind)]
    only: Option<EngineKind>,
    /// Ops per unit in the bulked chain (16, as MXNet's figure).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = cli::positive)]
    bulk_size: usize,
    /// Run only these workloads, in the bench's own order (the others report 0), e.g. to
    /// profile one alone or to see what an earlier workload does to a later one.
    #[arg(long = "workload", value_name = "NAME", value_delimiter = ',', value_parser = workload)]
    workload: Option<Vec<String>>,
}

/// Every workload `--workload` can name, in the order a run times them.
const WORKLOADS: [&str; 10] = [
    "independent",
    "chain",
    "chain_bulk",
    "fanout",
    "independent_cheap",
    "chain_cheap",
    "independent_split",
    "chain_bulk_split",
    "independent_profiled",
    "crossed",
];

fn workload(name: &str) -> Result<String, String> {
    match WORKLOADS.contains(&name) {
        true => Ok(name.to_string()),
        false => Err(format!(
            "unknown workload {name:?} (known: {})",
            WORKLOADS.join(", ")
        )),
    }
}

fn positive_scale(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
        _ => Err(format!("expected a positive number, found {v:?}")),
    }
}

/// The command line's description, with the workloads `--workload` knows listed after the
/// options.
fn command() -> clap::Command {
    let names = WORKLOADS.join(", ");
    Args::command().after_help(format!("Workloads: {names} (see the source's header)."))
}

/// Reads the command line (without the program name); `--help` is an `Err` holding the help.
pub fn parse_args(argv: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let argv = std::iter::once("engine_bench".to_string()).chain(argv);
    let matches = command()
        .try_get_matches_from(argv)
        .map_err(|e| e.to_string())?;
    Args::from_arg_matches(&matches).map_err(|e| e.to_string())
}

/// `a / b`, or 0 when `b` was not measured (a workload left out reports 0).
fn ratio(a: f64, b: f64) -> f64 {
    match b > 0.0 {
        true => a / b,
        false => 0.0,
    }
}

/// Times `f` (which returns the number of ops it ran) `repeats` times; median ns per op.
fn measure(repeats: usize, mut f: impl FnMut() -> usize) -> f64 {
    stats::median(
        (0..repeats)
            .map(|_| {
                let t = Instant::now();
                let n = f();
                t.elapsed().as_nanos() as f64 / n as f64
            })
            .collect(),
    )
}

/// What each job of the bare pool carries.
#[derive(Clone, Copy)]
enum Floor {
    /// A no-op closure (zero-sized: its box allocates nothing).
    Bare,
    /// A closure holding 16 bytes: each job is one allocation, made by the pusher and freed by
    /// the worker, and nothing else.
    Boxed,
    /// A closure as large as an op record (168 bytes), with no var.
    OpSized,
    /// The least a dependency engine does per op: a closure as large as an op record, holding a
    /// handle to one of 1024 var-sized records (job i: record i % 1024) that the pusher locks
    /// before submitting and the worker locks after running it.
    WithVar,
}

/// A var-sized record: a lock and the state behind it.
type VarRecord = Arc<std::sync::Mutex<[u64; 12]>>;

/// The floor: `n` boxed no-op closures through an injector to `threads` workers.
fn bare_pool(threads: usize, n: usize, floor: Floor) -> usize {
    type Job = Box<dyn FnOnce() + Send>;
    let injector = Arc::new(Injector::<Job>::new());
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (inj, done, stop) = (injector.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                let local = Worker::<Job>::new_fifo();
                loop {
                    let job = local.pop().or_else(|| loop {
                        match inj.steal_batch_and_pop(&local) {
                            Steal::Success(j) => break Some(j),
                            Steal::Retry => continue,
                            Steal::Empty => break None,
                        }
                    });
                    match job {
                        Some(j) => {
                            j();
                            done.fetch_add(1, Ordering::Release);
                        }
                        None if stop.load(Ordering::Acquire) => return,
                        None => std::thread::yield_now(),
                    }
                }
            })
        })
        .collect();
    let records: Vec<VarRecord> = match floor {
        Floor::Bare | Floor::Boxed | Floor::OpSized => Vec::new(),
        Floor::WithVar => (0..1024).map(|_| Arc::default()).collect(),
    };
    for i in 0..n {
        match floor {
            Floor::Bare => injector.push(Box::new(|| {})),
            Floor::Boxed => injector.push(carrying::<2>(i)),
            Floor::OpSized => injector.push(carrying::<21>(i)),
            Floor::WithVar => {
                let var = records[i % records.len()].clone();
                bump(&var, 0);
                // With the handle, the closure is 168 bytes: the engine's op record.
                let payload = [i as u64; 20];
                injector.push(Box::new(move || {
                    std::hint::black_box(&payload);
                    bump(&var, 1);
                }))
            }
        }
    }
    while done.load(Ordering::Acquire) < n {
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Release);
    for w in workers {
        w.join().expect("bench worker");
    }
    n
}

/// A no-op job holding `WORDS` words (its box allocates `8 * WORDS` bytes).
fn carrying<const WORDS: usize>(i: usize) -> Box<dyn FnOnce() + Send> {
    let payload = [i as u64; WORDS];
    Box::new(move || {
        std::hint::black_box(&payload);
    })
}

fn bump(var: &VarRecord, slot: usize) {
    match var.lock() {
        Ok(mut state) => state[slot] += 1,
        Err(_) => unreachable!("nothing panics while holding a record's lock"),
    }
}

/// How long a cache line takes to move from one thread's core to another's: two threads hand
/// one atomic back and forth; half the round trip, in ns. The clock starts after the first
/// round trip, so the echo thread's start-up is not counted (it dominates short probes).
fn line_transfer(handoffs: u64) -> f64 {
    let rounds = handoffs as usize + 1;
    let line = Arc::new(AtomicUsize::new(0));
    let other = line.clone();
    let echo = std::thread::spawn(move || {
        for i in 0..rounds {
            while other.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            other.store(2 * i + 2, Ordering::Release);
        }
    });
    let mut t = Instant::now();
    for i in 0..rounds {
        if i == 1 {
            t = Instant::now();
        }
        line.store(2 * i + 1, Ordering::Release);
        while line.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / handoffs as f64 / 2.0;
    echo.join().expect("echo thread");
    ns
}

fn noop<'a>(name: &'static str) -> Op<'a> {
    Op::sync(name, |_| Ok(()))
}

fn independent_cheap(e: &dyn Engine, vars: &[Var], n: usize) -> usize {
    for i in 0..n {
        e.push(noop("independent").write(&vars[i % vars.len()]).cheap())
            .expect("push");
    }
    e.wait_for_all().expect("no failures");
    n
}

fn chain_cheap(e: &dyn Engine, var: &Var, n: usize) -> usize {
    for _ in 0..n {
        e.push(noop("chain").write(var).cheap()).expect("push");
    }
    e.wait_for_var(var).expect("no failures");
    n
}

/// A workload pushed while every compute worker is held by a spinning op, then run: median ns
/// per op of each phase, or `None` when the workers could not all be held (a worker may take
/// two holding ops at once) or the engine runs ops inline. `push` pushes the workload and
/// returns how many ops it pushed.
fn split(
    e: &dyn Engine,
    threads: usize,
    repeats: usize,
    push: &mut dyn FnMut() -> usize,
) -> Option<(f64, f64)> {
    if e.kind() == EngineKind::Naive {
        return None;
    }
    let gates: Vec<Var> = (0..threads).map(|_| e.new_var()).collect();
    let (mut pushed, mut ran) = (Vec::new(), Vec::new());
    for _ in 0..repeats {
        let (held, go) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        for g in &gates {
            let (held, go) = (held.clone(), go.clone());
            let hold = Op::sync("hold", move |_| {
                held.fetch_add(1, Ordering::AcqRel);
                while !go.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                Ok(())
            });
            e.push(hold.write(g)).expect("push");
        }
        let t = Instant::now();
        while held.load(Ordering::Acquire) < threads && t.elapsed().as_secs() < 2 {
            std::thread::yield_now();
        }
        let all_held = held.load(Ordering::Acquire) == threads;
        let t = Instant::now();
        let n = match all_held {
            true => push(),
            false => 1,
        };
        let push_ns = t.elapsed().as_nanos() as f64 / n as f64;
        go.store(true, Ordering::Release);
        let t = Instant::now();
        e.wait_for_all().expect("no failures");
        if !all_held {
            return None;
        }
        pushed.push(push_ns);
        ran.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    Some((stats::median(pushed), stats::median(ran)))
}

fn independent(e: &dyn Engine, vars: &[Var], n: usize) -> usize {
    push_independent(e, vars, n);
    e.wait_for_all().expect("no failures");
    n
}

fn push_independent(e: &dyn Engine, vars: &[Var], n: usize) -> usize {
    for i in 0..n {
        e.push(noop("independent").write(&vars[i % vars.len()]))
            .expect("push");
    }
    n
}

fn chain(e: &dyn Engine, var: &Var, n: usize) -> usize {
    for _ in 0..n {
        e.push(noop("chain").write(var)).expect("push");
    }
    e.wait_for_var(var).expect("no failures");
    n
}

fn chain_bulk(e: &Arc<dyn Engine>, var: &Var, n: usize, size: usize) -> usize {
    push_chain_bulk(e, var, n, size);
    e.wait_for_var(var).expect("no failures");
    n
}

fn push_chain_bulk(e: &Arc<dyn Engine>, var: &Var, n: usize, size: usize) -> usize {
    let mut bulk = e.bulk_with(size);
    for _ in 0..n {
        bulk.push(noop("chain").write(var)).expect("push");
    }
    n
}

/// An engine of `kind` with `threads` compute workers (on either threaded engine).
fn builder(kind: EngineKind, threads: usize) -> EngineBuilder {
    EngineBuilder::new(kind)
        .pooled_workers(threads)
        .cpu_workers(threads)
}

/// The independent workload on an engine of `kind` with the profiler on (no trace file): median
/// ns per op. A fresh engine per repeat, so that each run starts with an empty profile.
fn profiled(kind: EngineKind, threads: usize, repeats: usize, n: usize) -> f64 {
    stats::median(
        (0..repeats)
            .map(|_| {
                let e = builder(kind, threads).profiler(None).build();
                let vars: Vec<Var> = (0..1024).map(|_| e.new_var()).collect();
                independent(&*e, &vars, 10_000);
                let t = Instant::now();
                independent(&*e, &vars, n);
                t.elapsed().as_nanos() as f64 / n as f64
            })
            .collect(),
    )
}

fn fanout(e: &dyn Engine, src: &Var, outs: &[Var], rounds: usize) -> usize {
    for _ in 0..rounds {
        for o in outs {
            e.push(noop("fan_out").read(src).write(o)).expect("push");
        }
        e.push(noop("fan_in").reads(outs).write(src)).expect("push");
    }
    e.wait_for_all().expect("no failures");
    rounds * (outs.len() + 1)
}

/// How many threads push at once in the crossed workload.
const PUSHERS: usize = 4;

/// `PUSHERS` threads pushing `n` ops between them at once; op `i` of thread `t` writes var
/// `(t + i) % 8` and reads the next one, so every two threads cross on some pair of vars.
fn crossed(e: &dyn Engine, vars: &[Var], n: usize) -> usize {
    let ring = &vars[..8];
    std::thread::scope(|s| {
        for t in 0..PUSHERS {
            s.spawn(move || {
                for i in 0..n / PUSHERS {
                    let k = (t + i) % ring.len();
                    let op = noop("crossed").write(&ring[k]);
                    e.push(op.read(&ring[(k + 1) % ring.len()])).expect("push");
                }
            });
        }
    });
    e.wait_for_all().expect("no failures");
    n / PUSHERS * PUSHERS
}

fn main() {
    let args = Args::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    let report = run(&args);
    match args.json {
        true => println!("{report}"),
        false => print_table(&report, args.repeats),
    }
}

/// Runs the floors and every engine's workloads that `args` asks for; the report in the
/// schema `--json` prints.
pub fn run(args: &Args) -> serde_json::Value {
    let scaled = |n: f64| ((n * args.scale) as usize).max(1);
    let (n_ind, n_chain, rounds) = (scaled(1_000_000.0), scaled(100_000.0), scaled(10_000.0));

    let wanted = |w: &str| {
        args.workload
            .as_ref()
            .is_none_or(|ws| ws.iter().any(|x| x == w))
    };
    // The floors are timed the same way as the engines: push everything, wait for all. They are
    // what `independent` is compared with, so they are skipped when it does not run.
    let ([floor, floor_boxed, floor_op_sized, floor_with_var], transfer) =
        match wanted("independent") {
            true => (
                [Floor::Bare, Floor::Boxed, Floor::OpSized, Floor::WithVar]
                    .map(|f| measure(args.repeats, || bare_pool(args.threads, n_ind, f))),
                stats::median(
                    (0..args.repeats)
                        .map(|_| line_transfer(scaled(200_000.0) as u64))
                        .collect(),
                ),
            ),
            false => ([0.0; 4], 0.0),
        };

    let mut engines = serde_json::Map::new();
    for kind in EngineKind::ALL {
        if args.only.is_some_and(|o| o != kind) {
            continue;
        }
        let e = builder(kind, args.threads).build();
        let vars: Vec<Var> = (0..1024).map(|_| e.new_var()).collect();
        let one = e.new_var();
        let outs: Vec<Var> = (0..8).map(|_| e.new_var()).collect();
        // Warm up: start the workers.
        independent(&*e, &vars, 10_000);
        let timed = |w: &str, f: &mut dyn FnMut() -> usize| match wanted(w) {
            true => measure(args.repeats, f),
            false => 0.0,
        };
        let ind = timed("independent", &mut || independent(&*e, &vars, n_ind));
        let ch = timed("chain", &mut || chain(&*e, &one, n_chain));
        let chb = timed("chain_bulk", &mut || {
            chain_bulk(&e, &one, n_chain, args.bulk_size)
        });
        let fo = timed("fanout", &mut || fanout(&*e, &one, &outs, rounds));
        let ind_cheap = timed("independent_cheap", &mut || {
            independent_cheap(&*e, &vars, n_ind)
        });
        let ch_cheap = timed("chain_cheap", &mut || chain_cheap(&*e, &one, n_chain));
        let timed_split = |w: &str, push: &mut dyn FnMut() -> usize| {
            match wanted(w) {
                true => split(&*e, args.threads, args.repeats, push),
                false => None,
            }
            .unwrap_or((0.0, 0.0))
        };
        let (push_alone, run_alone) = timed_split("independent_split", &mut || {
            push_independent(&*e, &vars, n_ind)
        });
        let (bulk_push_alone, bulk_run_alone) = timed_split("chain_bulk_split", &mut || {
            push_chain_bulk(&e, &one, n_chain, args.bulk_size)
        });
        let cross = timed("crossed", &mut || crossed(&*e, &vars, n_ind));
        let ind_profiled = match wanted("independent_profiled") {
            true => profiled(kind, args.threads, args.repeats, n_ind),
            false => 0.0,
        };
        engines.insert(
            kind.name().to_string(),
            serde_json::json!({
                "independent_ns": ind,
                "chain_ns": ch,
                "chain_bulk_ns": chb,
                "fanout_ns": fo,
                "independent_vs_floor": ratio(ind, floor),
                "chain_bulk_speedup": ratio(ch, chb),
                "independent_cheap_ns": ind_cheap,
                "chain_cheap_ns": ch_cheap,
                "independent_push_alone_ns": push_alone,
                "independent_run_alone_ns": run_alone,
                "chain_bulk_push_alone_ns": bulk_push_alone,
                "chain_bulk_run_alone_ns": bulk_run_alone,
                "independent_profiled_ns": ind_profiled,
                "profiler_cost": ratio(ind_profiled, ind),
                "crossed_ns": cross,
            }),
        );
    }
    serde_json::json!({
        "threads": args.threads,
        "bulk_size": args.bulk_size,
        "floor_independent_ns": floor,
        "floor_boxed_ns": floor_boxed,
        "floor_op_sized_ns": floor_op_sized,
        "floor_with_var_ns": floor_with_var,
        "line_transfer_ns": transfer,
        "engines": engines,
        "mxnet_1_9_1_per_device_ns": {"independent_ns": 739, "chain_ns": 648, "chain_bulk_ns": 253, "fanout_ns": 1013},
    })
}

/// The report for a reader: the floors, then a line per engine.
fn print_table(report: &serde_json::Value, repeats: usize) {
    let ns = |v: &serde_json::Value, key: &str| v[key].as_f64().unwrap_or(0.0);
    println!(
        "ns per no-op op, median of {repeats} runs, {} compute thread(s)",
        report["threads"]
    );
    for (what, key) in [
        ("bare crossbeam-deque pool (floor)", "floor_independent_ns"),
        (
            "the same with 16 bytes per job (one allocation, freed by the worker)",
            "floor_boxed_ns",
        ),
        (
            "the same with an op-sized job (168 bytes)",
            "floor_op_sized_ns",
        ),
        (
            "the same with an op-sized job locking one of 1024 var-sized records on each side",
            "floor_with_var_ns",
        ),
    ] {
        println!("{what}: {:.0} ns/op", ns(report, key));
    }
    println!(
        "one cache line from one core to the other: {:.0} ns\n",
        ns(report, "line_transfer_ns")
    );
    println!(
        "{:<20} {:>12} {:>10} {:>12} {:>10} {:>13}",
        "engine", "independent", "chain", "chain_bulk", "fanout", "vs floor"
    );
    for name in EngineKind::ALL.map(EngineKind::name) {
        let e = &report["engines"][name];
        if e.is_null() {
            continue;
        }
        println!(
            "{:<20} {:>12.0} {:>10.0} {:>12.0} {:>10.0} {:>12.2}x",
            name,
            ns(e, "independent_ns"),
            ns(e, "chain_ns"),
            ns(e, "chain_bulk_ns"),
            ns(e, "fanout_ns"),
            ns(e, "independent_vs_floor")
        );
    }
    println!("\nMXNet 1.9.1 ThreadedEnginePerDevice on this kind of machine: independent 739, chain 648, chain bulked 253, fanout 1013");
}
