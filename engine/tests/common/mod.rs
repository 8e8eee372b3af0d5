//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use engine::{Engine, EngineBuilder, EngineKind};

/// Runs `f` on its own thread and fails the test if it has not finished within `secs`: a hang
/// becomes a failure instead of a stuck CI job. Under Miri, which interprets the program a few
/// hundred times slower, the limit is a hundred times longer.
pub fn watchdog<T: Send + 'static>(
    what: &str,
    secs: u64,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let secs = if cfg!(miri) { secs * 100 } else { secs };
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let out = f();
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => handle
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p)),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The closure panicked: surface its panic.
            match handle.join() {
                Err(p) => std::panic::resume_unwind(p),
                Ok(_) => unreachable!("sender dropped without sending"),
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still running after {secs}s (hang)")
        }
    }
}

/// Every engine, with enough workers that independent ops can overlap.
pub fn engines() -> Vec<Arc<dyn Engine>> {
    EngineKind::ALL.iter().map(|&k| engine(k)).collect()
}

pub fn engine(kind: EngineKind) -> Arc<dyn Engine> {
    EngineBuilder::new(kind)
        .pooled_workers(3)
        .cpu_workers(2)
        .copy_workers(1)
        .bulk_size(4)
        .build()
}
