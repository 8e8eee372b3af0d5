//! Records each op's run (name, start, end, thread, device) and writes Chrome trace JSON, which
//! Perfetto and chrome://tracing open. When no profiler is configured the engine holds `None`
//! and the only cost is one branch per op.

use std::cell::Cell;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use storage::Context;

/// One op's run on one thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileEvent {
    /// The op's name.
    pub name: String,
    /// Nanoseconds since the profiler started.
    pub start_ns: u64,
    /// Nanoseconds since the profiler started.
    pub end_ns: u64,
    /// A small number naming the thread (stable for the process's life).
    pub thread: u64,
    /// The thread's name, if it has one (engine workers do).
    pub thread_name: String,
    /// The device the op ran for.
    pub ctx: Context,
}

/// Collects [`ProfileEvent`]s from every worker.
pub struct Profiler {
    origin: Instant,
    events: Mutex<Vec<ProfileEvent>>,
    output: Option<PathBuf>,
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

std::thread_local! {
    static THREAD_NO: Cell<u64> = const { Cell::new(0) };
}

fn thread_no() -> u64 {
    THREAD_NO.with(|t| {
        if t.get() == 0 {
            t.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

impl Profiler {
    /// A profiler that writes to `output` (if given) when its engine is dropped.
    pub fn new(output: Option<PathBuf>) -> Self {
        Profiler {
            origin: Instant::now(),
            events: Mutex::new(Vec::new()),
            output,
        }
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    pub(crate) fn record(&self, name: &str, start_ns: u64, ctx: Context) {
        let end_ns = self.now_ns();
        let thread = std::thread::current();
        let event = ProfileEvent {
            name: name.to_string(),
            start_ns,
            end_ns,
            thread: thread_no(),
            thread_name: thread.name().unwrap_or("").to_string(),
            ctx,
        };
        self.events.lock().push(event);
    }

    /// Everything recorded so far.
    pub fn events(&self) -> Vec<ProfileEvent> {
        self.events.lock().clone()
    }

    /// Where the trace is written on drop, if anywhere.
    pub fn output(&self) -> Option<&Path> {
        self.output.as_deref()
    }

    /// The trace as Chrome trace-event JSON: one complete ("X") event per op, one process per
    /// device, one track per thread.
    pub fn chrome_trace(&self) -> serde_json::Value {
        let events = self.events.lock();
        let mut out = Vec::with_capacity(events.len() + 16);
        let mut named = std::collections::BTreeSet::new();
        for e in events.iter() {
            let pid = e.ctx.to_string();
            if named.insert((pid.clone(), e.thread)) {
                out.push(serde_json::json!({
                    "ph": "M", "name": "thread_name", "pid": pid, "tid": e.thread,
                    "args": {"name": if e.thread_name.is_empty() { format!("thread {}", e.thread) } else { e.thread_name.clone() }},
                }));
            }
            out.push(serde_json::json!({
                "ph": "X",
                "name": e.name,
                "cat": "op",
                "pid": pid,
                "tid": e.thread,
                "ts": e.start_ns as f64 / 1000.0,
                "dur": (e.end_ns.saturating_sub(e.start_ns)) as f64 / 1000.0,
            }));
        }
        serde_json::json!({ "traceEvents": out, "displayTimeUnit": "ns" })
    }

    /// Writes the Chrome trace to `path`.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let mut f = io::BufWriter::new(std::fs::File::create(path)?);
        serde_json::to_writer(&mut f, &self.chrome_trace())?;
        f.flush()
    }
}
