//! Whichever thread drops an engine's last handle, the engine drains, joins its workers and
//! leaves no thread behind. Alone in its test binary, because it counts the process's threads.
#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::watchdog;
use engine::{Engine, EngineBuilder, EngineKind, Op};

/// The process's live threads, from `/proc` (`None` where there is no `/proc`).
fn threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Threads:"))?;
    line["Threads:".len()..].trim().parse().ok()
}

/// Waits up to ten seconds for the thread count to come back to `start`.
fn settle(start: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = threads().expect("counted before");
        if now <= start {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {now} threads, {start} at the start (workers leaked)"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How the last handle goes.
#[derive(Clone, Copy, Debug)]
enum Last {
    /// In a delete function run on a worker after a pending op.
    InDeleteFunction,
    /// In an op's closure, with more ops queued behind it.
    InOp,
}

/// Sleeps `ms`, writing `v`.
fn slow<'a>(v: &'a engine::Var, ms: u64) -> Op<'a> {
    Op::sync("slow", move |_| {
        std::thread::sleep(Duration::from_millis(ms));
        Ok(())
    })
    .write(v)
}

/// One engine whose last handle goes as `last` says, with eight ops still queued behind a slower
/// op when it goes. Returns how many of those eight ran.
fn round(kind: EngineKind, last: Last) -> Arc<AtomicUsize> {
    let e: Arc<dyn Engine> = EngineBuilder::new(kind)
        .pooled_workers(2)
        .cpu_workers(2)
        .build();
    let (v, gate, w) = (e.new_var(), e.new_var(), e.new_var());
    e.push(slow(&v, 2)).unwrap();
    e.push(slow(&gate, 6)).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..8 {
        let ran = ran.clone();
        let behind = Op::sync("behind", move |_| {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        e.push(behind.read(&gate).write(&w)).unwrap();
    }
    let handle = e.clone();
    match last {
        Last::InDeleteFunction => e.delete_var(Box::new(move || drop(handle)), &v).unwrap(),
        Last::InOp => {
            let op = Op::sync("drops the engine", move |_| {
                drop(handle);
                Ok(())
            });
            e.push(op.write(&v)).unwrap();
        }
    }
    drop((v, gate, w));
    drop(e);
    ran
}

#[test]
fn the_last_handle_dropped_anywhere_leaves_no_thread_behind() {
    let Some(start) = threads() else {
        eprintln!("no /proc/self/status here: thread counts not checked");
        return;
    };
    watchdog("engine shutdown rounds", 120, move || {
        for r in 0..50 {
            for kind in [EngineKind::ThreadedPooled, EngineKind::ThreadedPerDevice] {
                for last in [Last::InDeleteFunction, Last::InOp] {
                    let ran = round(kind, last);
                    let what = format!("round {r}, {kind:?}, last handle {last:?}");
                    // The watchdog's own thread runs this.
                    settle(start + 1, &what);
                    // The engine drained before it stopped: nothing pushed was dropped unrun.
                    assert_eq!(ran.load(Ordering::SeqCst), 8, "{what}: ops dropped unrun");
                }
            }
        }
    });
}
