//! Loom models of the dependency core: the production `Core`, `Var` state machine, wait
//! counters, completion and idle signalling, with loom threads standing in for pool workers.
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p engine --release --lib`.

use std::collections::VecDeque;
use std::sync::Arc;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Mutex as LoomMutex;

use crate::core::{Core, Dispatch};
use crate::op::{Op, OpRef, RunContext};
use crate::var::Var;

/// Ready ops wait here until a model thread runs them.
#[derive(Default)]
struct Queue(LoomMutex<VecDeque<OpRef>>);

struct QueueDispatch(Arc<Queue>);

impl Dispatch for QueueDispatch {
    fn dispatch(&self, _core: &Arc<Core>, op: OpRef) {
        self.0 .0.lock().unwrap().push_back(op);
    }
    fn shutdown(&self) {}
    fn is_worker(&self) -> bool {
        false
    }
}

fn core() -> (Arc<Core>, Arc<Queue>) {
    let q = Arc::new(Queue::default());
    (
        Core::new(Box::new(QueueDispatch(q.clone())), None, 0, false),
        q,
    )
}

/// A worker: runs ready ops until `done` of them have finished overall.
fn worker(core: Arc<Core>, q: Arc<Queue>, finished: Arc<AtomicUsize>, total: usize) {
    while finished.load(Ordering::SeqCst) < total {
        let op = q.0.lock().unwrap().pop_front();
        match op {
            Some(op) => {
                let ctx = op.ctx;
                core.execute(op, &RunContext::new(ctx));
                finished.fetch_add(1, Ordering::SeqCst);
            }
            None => loom::thread::yield_now(),
        }
    }
}

fn spawn_workers(
    core: &Arc<Core>,
    q: &Arc<Queue>,
    total: usize,
    n: usize,
) -> (Arc<AtomicUsize>, Vec<loom::thread::JoinHandle<()>>) {
    let finished = Arc::new(AtomicUsize::new(0));
    let handles = (0..n)
        .map(|_| {
            let (c, q, f) = (core.clone(), q.clone(), finished.clone());
            loom::thread::spawn(move || worker(c, q, f, total))
        })
        .collect();
    (finished, handles)
}

fn join(handles: Vec<loom::thread::JoinHandle<()>>) {
    for h in handles {
        h.join().unwrap();
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Shared log of (op, event) for checking overlap and order.
type Log = Arc<LoomMutex<Vec<(&'static str, bool)>>>;

fn logged<'a>(name: &'static str, log: &Log) -> Op<'a> {
    let log = log.clone();
    Op::sync(name, move |_| {
        log.lock().unwrap().push((name, true));
        log.lock().unwrap().push((name, false));
        Ok(())
    })
}

/// Where in a copy of a [`Log`] the op `name` started (`start`) or ended.
fn event_at(log: &[(&str, bool)], name: &str, start: bool) -> usize {
    log.iter()
        .position(|e| e.0 == name && e.1 == start)
        .unwrap_or_else(|| panic!("no event ({name}, start: {start}) in {log:?}"))
}

#[test]
fn reads_run_together_writes_alone_in_push_order() {
    model(|| {
        let (core, q) = core();
        let v: Var = core.new_var(false);
        let log: Log = Arc::default();
        core.push(logged("r1", &log).read(&v)).unwrap();
        core.push(logged("r2", &log).read(&v)).unwrap();
        // Both reads were granted at once: both are ready before anything ran.
        assert_eq!(q.0.lock().unwrap().len(), 2);
        core.push(logged("w", &log).write(&v)).unwrap();
        core.push(logged("r3", &log).read(&v)).unwrap();
        assert_eq!(q.0.lock().unwrap().len(), 2, "w and r3 wait");
        let (_, hs) = spawn_workers(&core, &q, 4, 2);
        join(hs);
        core.wait_for_all().unwrap();
        let log = log.lock().unwrap().clone();
        let pos = |n: &str, start: bool| event_at(&log, n, start);
        // The write starts after both earlier reads ended and ends before the later read starts.
        assert!(pos("w", true) > pos("r1", false) && pos("w", true) > pos("r2", false));
        assert!(pos("r3", true) > pos("w", false));
        assert_eq!(v.version(), 1);
    });
}

#[test]
fn writes_from_two_pushers_are_exclusive_and_counted() {
    model(|| {
        let (core, q) = core();
        let v = core.new_var(false);
        let inside = Arc::new(AtomicUsize::new(0));
        fn make<'a>(inside: &Arc<AtomicUsize>) -> Op<'a> {
            let inside = inside.clone();
            Op::sync("w", move |_| {
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two writes overlap"
                );
                inside.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            })
        }
        let (c2, v2, i2) = (core.clone(), v.clone(), inside.clone());
        let pusher = loom::thread::spawn(move || c2.push(make(&i2).write(&v2)).unwrap());
        core.push(make(&inside).write(&v)).unwrap();
        let (_, hs) = spawn_workers(&core, &q, 2, 1);
        pusher.join().unwrap();
        join(hs);
        core.wait_for_all().unwrap();
        assert_eq!(v.version(), 2);
    });
}

#[test]
fn delete_runs_after_pending_ops_and_refuses_later_pushes() {
    model(|| {
        let (core, q) = core();
        let v = core.new_var(false);
        let log: Log = Arc::default();
        core.push(logged("r", &log).read(&v)).unwrap();
        core.push(logged("w", &log).write(&v)).unwrap();
        let l = log.clone();
        core.delete_var(Box::new(move || l.lock().unwrap().push(("del", true))), &v)
            .unwrap();
        assert!(core.push(Op::sync("late", |_| Ok(())).read(&v)).is_err());
        let (_, hs) = spawn_workers(&core, &q, 2, 2);
        join(hs);
        core.wait_for_all().unwrap();
        let log = log.lock().unwrap().clone();
        assert_eq!(log.last(), Some(&("del", true)));
        assert_eq!(log.len(), 5);
    });
}

/// A delete racing with the worker finishing the var's last op: whether it finds the var busy
/// (and appends a marker) or idle (and runs at once on the deleting thread), it runs exactly
/// once, after the op.
#[test]
fn delete_racing_with_the_last_op_runs_once_after_it() {
    model(|| {
        let (core, q) = core();
        let v = core.new_var(false);
        let log: Log = Arc::default();
        core.push(logged("w", &log).write(&v)).unwrap();
        let (_, hs) = spawn_workers(&core, &q, 1, 1);
        let l = log.clone();
        core.delete_var(Box::new(move || l.lock().unwrap().push(("del", true))), &v)
            .unwrap();
        join(hs);
        core.wait_for_all().unwrap();
        let log = log.lock().unwrap().clone();
        assert_eq!(log, vec![("w", true), ("w", false), ("del", true)]);
        assert!(v.is_deleted());
    });
}

/// An op that counts its runs in `ran`.
fn counting<'a>(name: &'static str, ran: &Arc<AtomicUsize>) -> Op<'a> {
    let ran = ran.clone();
    Op::sync(name, move |_| {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
}

#[test]
fn poison_propagates_and_wait_for_var_reports_it_once() {
    model(|| {
        let (core, q) = core();
        let (a, b) = (core.new_var(false), core.new_var(false));
        let ran = Arc::new(AtomicUsize::new(0));
        core.push(Op::sync("fail", |_| Err("bad".into())).write(&a))
            .unwrap();
        core.push(counting("next", &ran).read(&a).write(&b))
            .unwrap();
        let (_, hs) = spawn_workers(&core, &q, 2, 2);
        join(hs);
        let err = core.wait_for_var(&b).unwrap_err();
        assert_eq!(err.failure().unwrap().op, "fail");
        assert!(core.wait_for_var(&b).is_ok());
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert_eq!((a.version(), b.version()), (1, 1));
        // Reported through b, so wait_for_all has nothing left to say.
        core.wait_for_all().unwrap();
    });
}

/// An op learns of poison when a var grants it: either queued behind the failing write (granted
/// by its completion) or appended after it (granted at push). Both must skip the op.
#[test]
fn poison_reaches_an_op_pushed_while_the_failing_write_runs() {
    model(|| {
        let (core, q) = core();
        let (a, b) = (core.new_var(false), core.new_var(false));
        let ran = Arc::new(AtomicUsize::new(0));
        core.push(Op::sync("fail", |_| Err("bad".into())).write(&a))
            .unwrap();
        let (_, hs) = spawn_workers(&core, &q, 2, 1);
        core.push(counting("next", &ran).read(&a).write(&b))
            .unwrap();
        join(hs);
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        let err = core.wait_for_var(&b).unwrap_err();
        assert_eq!(err.failure().unwrap().op, "fail");
        assert_eq!(b.version(), 1);
    });
}

/// A failing write poisons its ordinary var but not a resource var it also writes: the next
/// write of the resource, queued behind it or pushed while it runs, runs.
#[test]
fn a_failure_leaves_a_resource_var_unpoisoned() {
    model(|| {
        let (core, q) = core();
        let (a, res) = (core.new_var(false), core.new_var(true));
        let ran = Arc::new(AtomicUsize::new(0));
        core.push(
            Op::sync("fail", |_| Err("bad".into()))
                .write(&a)
                .write(&res),
        )
        .unwrap();
        let (_, hs) = spawn_workers(&core, &q, 2, 1);
        core.push(counting("next", &ran).write(&res)).unwrap();
        join(hs);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        core.wait_for_var(&res).unwrap();
        assert_eq!(res.version(), 2);
        assert_eq!(
            core.wait_for_var(&a).unwrap_err().failure().unwrap().op,
            "fail"
        );
    });
}

#[test]
fn wait_for_var_returns_after_a_concurrent_write() {
    model(|| {
        let (core, q) = core();
        let v = core.new_var(false);
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        core.push(
            Op::sync("w", move |_| {
                d.store(1, Ordering::SeqCst);
                Ok(())
            })
            .write(&v),
        )
        .unwrap();
        let (_, hs) = spawn_workers(&core, &q, 1, 1);
        core.wait_for_var(&v).unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 1);
        join(hs);
    });
}

#[test]
fn wait_for_all_races_with_finishing_workers() {
    model(|| {
        let (core, q) = core();
        let (a, b) = (core.new_var(false), core.new_var(false));
        let done = Arc::new(AtomicUsize::new(0));
        for v in [&a, &b] {
            let d = done.clone();
            core.push(
                Op::sync("w", move |_| {
                    d.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .write(v),
            )
            .unwrap();
        }
        let (_, hs) = spawn_workers(&core, &q, 2, 2);
        // Must neither return early nor miss the last finisher's wake-up.
        core.wait_for_all().unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 2);
        join(hs);
    });
}

/// Writes queued behind a running write are granted as a run: each completion hands write access
/// to the next without the var's lock. The run's last write also waits on another var, so its
/// two grants (from the run and from that var's writer) race.
#[test]
fn a_run_of_writes_passes_access_along_in_push_order() {
    model(|| {
        let (core, q) = core();
        let (v, b) = (core.new_var(false), core.new_var(false));
        let log: Log = Arc::default();
        core.push(logged("wb", &log).write(&b)).unwrap();
        core.push(logged("w1", &log).write(&v)).unwrap();
        core.push(logged("w2", &log).write(&v)).unwrap();
        core.push(logged("w3", &log).write(&v).write(&b)).unwrap();
        let (_, hs) = spawn_workers(&core, &q, 4, 2);
        join(hs);
        core.wait_for_all().unwrap();
        let log = log.lock().unwrap().clone();
        let pos = |n: &str, start: bool| event_at(&log, n, start);
        for (before, after) in [("w1", "w2"), ("w2", "w3"), ("wb", "w3")] {
            assert!(
                pos(after, true) > pos(before, false),
                "{before} before {after}"
            );
        }
        assert_eq!((v.version(), b.version()), (3, 2));
    });
}

/// A write of a run that fails poisons the var for the rest of the run, whose updates (ops
/// reading and writing the var) are skipped, and a wait marker queued behind the run reports the
/// failure once.
#[test]
fn a_failing_write_poisons_the_rest_of_its_run() {
    model(|| {
        let (core, q) = core();
        let v = core.new_var(false);
        let ran = Arc::new(AtomicUsize::new(0));
        core.push(counting("w1", &ran).read(&v).write(&v)).unwrap();
        core.push(Op::sync("fail", |_| Err("bad".into())).write(&v))
            .unwrap();
        core.push(counting("w3", &ran).read(&v).write(&v)).unwrap();
        let (_, hs) = spawn_workers(&core, &q, 3, 2);
        let err = core.wait_for_var(&v).unwrap_err();
        assert_eq!(err.failure().unwrap().op, "fail");
        join(hs);
        assert_eq!(ran.load(Ordering::SeqCst), 1, "only w1 ran");
        assert_eq!(v.version(), 3);
        core.wait_for_all().unwrap();
    });
}

/// A write of a run that only overwrites the var runs after a failed write and clears the
/// failure, so the update behind it runs too and a wait on the var succeeds; the failure is
/// still reported once, by `wait_for_all`.
#[test]
fn an_overwrite_in_a_run_clears_the_failure_before_it() {
    model(|| {
        let (core, q) = core();
        let v = core.new_var(false);
        let ran = Arc::new(AtomicUsize::new(0));
        core.push(Op::sync("fail", |_| Err("bad".into())).write(&v))
            .unwrap();
        core.push(counting("overwrite", &ran).write(&v)).unwrap();
        core.push(counting("update", &ran).read(&v).write(&v))
            .unwrap();
        let (_, hs) = spawn_workers(&core, &q, 3, 2);
        core.wait_for_var(&v).unwrap();
        join(hs);
        assert_eq!(ran.load(Ordering::SeqCst), 2, "both ran");
        assert_eq!(v.version(), 3);
        let err = core.wait_for_all().unwrap_err();
        assert_eq!(err.failure().unwrap().op, "fail");
        core.wait_for_all().unwrap();
    });
}

/// An op that writes `w` and reads `r`, logging when it starts and ends.
fn crossed<'a>(name: &'static str, log: &Log, w: &'a Var, r: &'a Var) -> Op<'a> {
    logged(name, log).write(w).read(r)
}

/// Two ops conflicting on a var never overlap: one ends before the other starts.
fn serialized(log: &[(&str, bool)], a: &str, b: &str) -> bool {
    let pos = |n: &str, start: bool| event_at(log, n, start);
    pos(a, false) < pos(b, true) || pos(b, false) < pos(a, true)
}

#[test]
fn two_pushers_with_crossed_vars_never_deadlock() {
    // X writes a and reads b while Y writes b and reads a: appended one var at a time, X could
    // queue first on a and Y first on b, each then waiting for the other forever. Every
    // interleaving of the two pushes with a worker must run both.
    model(|| {
        let (core, q) = core();
        let (a, b) = (core.new_var(false), core.new_var(false));
        let log: Log = Arc::default();
        let (c2, a2, b2, l2) = (core.clone(), a.clone(), b.clone(), log.clone());
        let pusher = loom::thread::spawn(move || c2.push(crossed("y", &l2, &b2, &a2)).unwrap());
        let (_, hs) = spawn_workers(&core, &q, 2, 1);
        core.push(crossed("x", &log, &a, &b)).unwrap();
        pusher.join().unwrap();
        join(hs);
        core.wait_for_all().unwrap();
        let log = log.lock().unwrap().clone();
        assert!(
            serialized(&log, "x", "y"),
            "crossed ops overlapped: {log:?}"
        );
        assert_eq!((a.version(), b.version()), (1, 1));
    });
}

#[test]
fn three_pushers_in_a_cycle_never_deadlock() {
    // X writes a and reads b, Y writes b and reads c, Z writes c and reads a: appended one var at
    // a time, each could queue first on the var it writes and then behind the next one's write.
    // Each pair conflicts on one var, so each pair runs one after the other.
    model(|| {
        let (core, q) = core();
        let vars: Arc<Vec<Var>> = Arc::new((0..3).map(|_| core.new_var(false)).collect());
        let log: Log = Arc::default();
        let names = ["x", "y", "z"];
        let pushers: Vec<_> = (1..3)
            .map(|i| {
                let (c, v, l) = (core.clone(), vars.clone(), log.clone());
                loom::thread::spawn(move || {
                    c.push(crossed(names[i], &l, &v[i], &v[(i + 1) % 3]))
                        .unwrap()
                })
            })
            .collect();
        core.push(crossed("x", &log, &vars[0], &vars[1])).unwrap();
        join(pushers);
        // This thread runs the ops once every push is in, so the appends race only each other.
        let finished = Arc::new(AtomicUsize::new(0));
        worker(core.clone(), q, finished, 3);
        core.wait_for_all().unwrap();
        let log = log.lock().unwrap().clone();
        for (p, q) in [("x", "y"), ("y", "z"), ("z", "x")] {
            assert!(serialized(&log, p, q), "{p} and {q} overlapped: {log:?}");
        }
        assert!(vars.iter().all(|v| v.version() == 1));
    });
}

/// The imperative bulking of a threaded engine over a model core.
struct Held {
    core: Arc<Core>,
    deferred: crate::deferred::Deferred,
}

impl crate::deferred::Schedule for Held {
    fn id(&self) -> u64 {
        self.core.id
    }
    fn push_now(&self, op: Op<'_>) -> Result<(), crate::EngineError> {
        self.core.push(op)
    }
    fn push_unit_now(&self, unit: &mut crate::BulkUnit) -> Result<(), crate::EngineError> {
        self.core.push_bulk(unit)
    }
}

/// An op held back on one thread comes before a push another thread makes after seeing it
/// pushed, while a third thread turns bulking off (the size's lock-free fast path).
#[test]
fn a_held_op_precedes_a_later_push_from_another_thread_while_bulking_turns_off() {
    model(|| {
        let (core, q) = core();
        let held = Arc::new(Held {
            core: core.clone(),
            deferred: crate::deferred::Deferred::new(),
        });
        held.deferred.set_size(&*held, 4).unwrap();
        let x = core.new_var(false);
        let log: Log = Arc::default();
        let pushed = Arc::new(AtomicUsize::new(0));
        let a = {
            let (held, x, log, pushed) = (held.clone(), x.clone(), log.clone(), pushed.clone());
            loom::thread::spawn(move || {
                held.deferred
                    .push(&*held, logged("a", &log).write(&x))
                    .unwrap();
                pushed.store(1, Ordering::Release);
            })
        };
        let off = {
            let held = held.clone();
            loom::thread::spawn(move || {
                held.deferred.set_size(&*held, 0).unwrap();
            })
        };
        while pushed.load(Ordering::Acquire) == 0 {
            loom::thread::yield_now();
        }
        held.deferred
            .push(&*held, logged("b", &log).write(&x))
            .unwrap();
        held.deferred.flush(&*held).unwrap();
        join(vec![a, off]);
        held.deferred.flush(&*held).unwrap();
        // Run what is ready on this thread, until nothing is (running an op may ready the next).
        loop {
            let op = q.0.lock().unwrap().pop_front();
            let Some(op) = op else { break };
            let ctx = op.ctx;
            core.execute(op, &RunContext::new(ctx));
        }
        let log = log.lock().unwrap().clone();
        assert!(
            event_at(&log, "b", true) > event_at(&log, "a", false),
            "{log:?}"
        );
        assert_eq!(x.version(), 2);
    });
}
