//! Pushes from several threads at once, with crossed read and write sets, must never deadlock
//! and must be linearizable: the effect on every var follows one global order of whole pushes.
//!
//! Each op reads its vars' values and writes, to each var it writes, a value unique to (op, var)
//! derived from everything it saw. From what the ops saw we rebuild the order of effect on each
//! var (a writer follows the writer whose value it overwrote; a reader follows the writer whose
//! value it saw and precedes the next writer), add each thread's own push order, and look for one
//! order of whole pushes that respects all of it. Running the pushes one by one in that order,
//! with plain values and no engine, must then reproduce every value every op saw and every var's
//! final value.
#![cfg(not(loom))]

mod common;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use common::watchdog;
use engine::{Engine, EngineBuilder, EngineKind, Op, Var};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One pushed op: which vars it reads and writes (distinct, none in both).
#[derive(Clone, Debug)]
struct Push {
    reads: Vec<usize>,
    writes: Vec<usize>,
    cheap: bool,
}

/// What one op saw when it ran: the value of each read var, then of each written var before it
/// wrote it.
type Seen = Vec<u64>;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value op `id` writes to var `var` after seeing `seen`; unique per (op, var) in practice.
fn written(id: usize, var: usize, seen: &[u64]) -> u64 {
    let h = seen
        .iter()
        .fold(mix(id as u64 * 1_000 + var as u64), |h, &s| mix(h ^ s));
    // Zero is every var's initial value: never write it.
    h | 1
}

/// Random crossed pushes: every op touches 1 to 4 of `vars` vars, each read or written.
fn programs(rng: &mut StdRng, threads: usize, per_thread: usize, vars: usize) -> Vec<Vec<Push>> {
    (0..threads)
        .map(|_| {
            (0..per_thread)
                .map(|_| {
                    let n = rng.gen_range(1..=4.min(vars));
                    let mut picked: Vec<usize> = Vec::new();
                    while picked.len() < n {
                        let v = rng.gen_range(0..vars);
                        if !picked.contains(&v) {
                            picked.push(v);
                        }
                    }
                    let (mut reads, mut writes) = (Vec::new(), Vec::new());
                    for v in picked {
                        match rng.gen_bool(0.5) {
                            true => writes.push(v),
                            false => reads.push(v),
                        }
                    }
                    Push {
                        reads,
                        writes,
                        cheap: rng.gen_bool(0.3),
                    }
                })
                .collect()
        })
        .collect()
}

/// Runs every thread's pushes on `engine` at once, released together by a barrier. Returns what
/// every op saw (indexed by thread, then push) and the vars' final values.
fn run(engine: Arc<dyn Engine>, progs: &[Vec<Push>], vars: usize) -> (Vec<Vec<Seen>>, Vec<u64>) {
    let handles: Arc<Vec<Var>> = Arc::new((0..vars).map(|_| engine.new_var()).collect());
    let values: Arc<Vec<AtomicU64>> = Arc::new((0..vars).map(|_| AtomicU64::new(0)).collect());
    let seen: Arc<Vec<Vec<Mutex<Seen>>>> = Arc::new(
        progs
            .iter()
            .map(|p| p.iter().map(|_| Mutex::new(Vec::new())).collect())
            .collect(),
    );
    let start = Arc::new(Barrier::new(progs.len()));
    let pushers: Vec<_> = progs
        .iter()
        .enumerate()
        .map(|(t, prog)| {
            let (engine, handles, values, seen, start) = (
                engine.clone(),
                handles.clone(),
                values.clone(),
                seen.clone(),
                start.clone(),
            );
            let prog = prog.clone();
            std::thread::spawn(move || {
                start.wait();
                for (k, p) in prog.into_iter().enumerate() {
                    let (values, seen) = (values.clone(), seen.clone());
                    let id = t * 1_000_000 + k;
                    let (reads, writes) = (p.reads.clone(), p.writes.clone());
                    let mut op = Op::sync("crossed", move |_| {
                        // The engine grants this op exclusive access to its writes and shared
                        // access to its reads, so relaxed loads and stores see a consistent state.
                        let mut s: Seen = reads
                            .iter()
                            .chain(&writes)
                            .map(|&v| values[v].load(Ordering::Relaxed))
                            .collect();
                        let out: Vec<u64> = writes.iter().map(|&w| written(id, w, &s)).collect();
                        for (&w, x) in writes.iter().zip(out) {
                            values[w].store(x, Ordering::Relaxed);
                        }
                        std::mem::swap(&mut *seen[t][k].lock().unwrap(), &mut s);
                        Ok(())
                    });
                    for &r in &p.reads {
                        op = op.read(&handles[r]);
                    }
                    for &w in &p.writes {
                        op = op.write(&handles[w]);
                    }
                    if p.cheap {
                        op = op.cheap();
                    }
                    engine.push(op).unwrap();
                }
            })
        })
        .collect();
    for p in pushers {
        p.join().unwrap();
    }
    engine.wait_for_all().unwrap();
    let seen = seen
        .iter()
        .map(|ops| ops.iter().map(|s| s.lock().unwrap().clone()).collect())
        .collect();
    let finals = values.iter().map(|v| v.load(Ordering::Relaxed)).collect();
    (seen, finals)
}

/// Finds an order of whole pushes that explains what every op saw, then replays the pushes in
/// that order one by one and compares. Panics with the reason when there is none.
fn check_linearizable(progs: &[Vec<Push>], seen: &[Vec<Seen>], finals: &[u64]) {
    // Who wrote each value: (thread, push).
    let mut writer_of: HashMap<(usize, u64), (usize, usize)> = HashMap::new();
    for (t, prog) in progs.iter().enumerate() {
        for (k, p) in prog.iter().enumerate() {
            let s = &seen[t][k];
            assert_eq!(
                s.len(),
                p.reads.len() + p.writes.len(),
                "op {t}.{k} did not run"
            );
            for &w in &p.writes {
                let prev = writer_of.insert((w, written(t * 1_000_000 + k, w, s)), (t, k));
                assert!(prev.is_none(), "two ops wrote the same value to var {w}");
            }
        }
    }
    let node = |t: usize, k: usize| progs[..t].iter().map(Vec::len).sum::<usize>() + k;
    let total: usize = progs.iter().map(Vec::len).sum();
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); total];
    // Per var: the readers of each value (by its writer, `None` for the initial value) and the
    // writer that overwrote it.
    let mut readers: HashMap<(usize, Option<usize>), Vec<usize>> = HashMap::new();
    let mut next_writer: HashMap<(usize, Option<usize>), usize> = HashMap::new();
    for (t, prog) in progs.iter().enumerate() {
        for (k, p) in prog.iter().enumerate() {
            let me = node(t, k);
            if k > 0 {
                edges[node(t, k - 1)].push(me);
            }
            let s = &seen[t][k];
            for (i, &v) in p.reads.iter().chain(&p.writes).enumerate() {
                let from = match s[i] {
                    0 => None,
                    x => {
                        let (wt, wk) = writer_of[&(v, x)];
                        Some(node(wt, wk))
                    }
                };
                if let Some(f) = from {
                    edges[f].push(me);
                }
                if i < p.reads.len() {
                    readers.entry((v, from)).or_default().push(me);
                } else {
                    let other = next_writer.insert((v, from), me);
                    assert!(other.is_none(), "two writes of var {v} overwrote one value");
                }
            }
        }
    }
    for ((v, from), rs) in &readers {
        if let Some(&w) = next_writer.get(&(*v, *from)) {
            for &r in rs {
                edges[r].push(w);
            }
        }
    }
    // Kahn's algorithm: an order of whole pushes respecting every edge, if there is one.
    let mut indegree = vec![0usize; total];
    for e in edges.iter().flatten() {
        indegree[*e] += 1;
    }
    let mut ready: VecDeque<usize> = (0..total).filter(|&n| indegree[n] == 0).collect();
    let mut order = Vec::with_capacity(total);
    while let Some(n) = ready.pop_front() {
        order.push(n);
        for &m in &edges[n] {
            indegree[m] -= 1;
            if indegree[m] == 0 {
                ready.push_back(m);
            }
        }
    }
    assert_eq!(
        order.len(),
        total,
        "no order of whole pushes explains what the ops saw (a cycle among {} ops)",
        total - order.len()
    );
    // The sequential reference: the pushes run one by one in that order.
    let of_node: Vec<(usize, usize)> = progs
        .iter()
        .enumerate()
        .flat_map(|(t, p)| (0..p.len()).map(move |k| (t, k)))
        .collect();
    let mut values = vec![0u64; finals.len()];
    for n in order {
        let (t, k) = of_node[n];
        let p = &progs[t][k];
        let s: Seen = p
            .reads
            .iter()
            .chain(&p.writes)
            .map(|&v| values[v])
            .collect();
        assert_eq!(
            s, seen[t][k],
            "op {t}.{k} saw other values than in sequence"
        );
        for &w in &p.writes {
            values[w] = written(t * 1_000_000 + k, w, &s);
        }
    }
    assert_eq!(
        values, finals,
        "final values differ from the sequential run"
    );
}

fn engine(kind: EngineKind) -> Arc<dyn Engine> {
    EngineBuilder::new(kind)
        .pooled_workers(3)
        .cpu_workers(2)
        .copy_workers(1)
        .build()
}

/// Two threads, each pushing ops that write one var and read the other's: the pattern that
/// deadlocked when an op was appended to its vars one at a time.
#[test]
fn two_pushers_with_crossed_vars_never_deadlock() {
    for kind in EngineKind::ALL {
        watchdog("two crossed pushers", 60, move || {
            let crossed = |w: usize, r: usize| Push {
                reads: vec![r],
                writes: vec![w],
                cheap: false,
            };
            let progs = vec![vec![crossed(0, 1); 20_000], vec![crossed(1, 0); 20_000]];
            let (seen, finals) = run(engine(kind), &progs, 2);
            check_linearizable(&progs, &seen, &finals);
        });
    }
}

/// 2 to 8 threads pushing random crossed read/write sets over a few vars, on every engine,
/// each run checked against a sequential execution of whole pushes.
#[test]
fn random_crossed_pushes_are_linearizable() {
    let mut rng = StdRng::seed_from_u64(0x5EED_0048);
    for round in 0..60 {
        let threads = 2 + round % 7;
        let vars = rng.gen_range(2..8);
        let progs = programs(&mut rng, threads, 2_000, vars);
        let kind = EngineKind::ALL[round % EngineKind::ALL.len()];
        watchdog(
            &format!("round {round}: {threads} pushers over {vars} vars"),
            60,
            move || {
                let (seen, finals) = run(engine(kind), &progs, vars);
                check_linearizable(&progs, &seen, &finals);
            },
        );
    }
}
