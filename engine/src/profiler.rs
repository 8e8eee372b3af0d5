//! Records each op's run (name, start, end, thread, device) and writes Chrome trace JSON, which
//! Perfetto and chrome://tracing open, or a table of per-op totals (MXNet's aggregate stats,
//! PyTorch's `key_averages`). When no profiler is configured the engine holds `None` and the
//! only cost is one branch per op.
//!
//! Programs add marks of their own (MXNet's profiler domains, tasks, frames, events, counters
//! and markers): spans of time, counter values and instants, each under a domain, written into
//! the same trace. They are rare (a few per step), so they share one list.
//!
//! Recording is per thread: each thread appends to a log of its own (its lock is only ever
//! contended by a reader), so workers never wait on each other to record, and an op's name is
//! kept as the op's `Cow` (a static name costs no allocation). Times are raw readings of the
//! CPU's time-stamp counter where there is one (`quanta`; a few ns, against ~30 for the
//! system clock here), turned into nanoseconds only when read. Readers merge the logs.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

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

/// The runs of one op name on one device, added up (see [`Profiler::summary`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpStats {
    /// The op's name.
    pub name: String,
    /// The device it ran for.
    pub ctx: Context,
    /// How many runs were recorded.
    pub count: u64,
    /// Their total time, in ns.
    pub total_ns: u64,
    /// The shortest run, in ns.
    pub min_ns: u64,
    /// The longest run, in ns.
    pub max_ns: u64,
}

impl OpStats {
    /// The mean run, in ns.
    pub fn mean_ns(&self) -> f64 {
        self.total_ns as f64 / self.count.max(1) as f64
    }
}

/// What a program marks in the trace (see [`Profiler::mark_span`] and its siblings).
#[derive(Clone, Debug, PartialEq)]
pub enum Mark {
    /// A span of time (a task, a frame, an event), in ns since the profiler started.
    Span {
        /// When it started.
        start_ns: u64,
        /// When it ended.
        end_ns: u64,
    },
    /// A counter's new value, at `at_ns`.
    Counter {
        /// When it changed.
        at_ns: u64,
        /// The value from then on.
        value: f64,
    },
    /// A moment, with its scope (`process`, `global`, `thread`).
    Instant {
        /// When.
        at_ns: u64,
        /// What it concerns.
        scope: String,
    },
}

/// A program's mark: its domain, name, what it marks and the thread that marked it.
#[derive(Clone, Debug, PartialEq)]
pub struct UserMark {
    /// The domain it belongs to (a trace process of its own).
    pub domain: String,
    /// Its name.
    pub name: String,
    /// What it marks.
    pub mark: Mark,
    /// The thread that marked it.
    pub thread: u64,
}

/// A run as a thread records it: raw clock readings, the name as the op holds it.
struct Record {
    name: Cow<'static, str>,
    start: u64,
    end: u64,
    ctx: Context,
}

/// What one thread recorded for one profiler.
struct ThreadLog {
    profiler: u64,
    thread: u64,
    thread_name: String,
    records: Mutex<Vec<Record>>,
}

/// Collects the runs of ops from every thread that runs them.
pub struct Profiler {
    /// Tells this profiler's logs apart in a thread's list (an engine each, any number at once).
    id: u64,
    clock: Clock,
    /// The reading every time is counted from.
    origin: u64,
    running: AtomicBool,
    /// Every thread's log, in the order threads first recorded.
    logs: Mutex<Vec<Arc<ThreadLog>>>,
    /// What programs marked, in the order they marked it.
    marks: Mutex<Vec<UserMark>>,
    output: Option<PathBuf>,
}

static NEXT_PROFILER: AtomicU64 = AtomicU64::new(1);
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

std::thread_local! {
    static THREAD_NO: Cell<u64> = const { Cell::new(0) };
    /// This thread's logs, one per profiler it has recorded for (usually one). A log outlives
    /// its thread in its profiler's list, so what exited workers recorded can still be read.
    static LOGS: RefCell<Vec<Arc<ThreadLog>>> = const { RefCell::new(Vec::new()) };
}

fn thread_no() -> u64 {
    THREAD_NO.with(|t| {
        if t.get() == 0 {
            t.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

/// Raw clock readings, turned into nanoseconds only when read: the time-stamp counter where
/// there is one (`quanta`). Finding one takes `cpuid`, which Miri cannot execute, so under Miri
/// the readings are the system's monotonic clock in nanoseconds.
struct Clock {
    #[cfg(not(miri))]
    tsc: quanta::Clock,
    #[cfg(miri)]
    origin: std::time::Instant,
}

impl Clock {
    fn new() -> Self {
        Clock {
            #[cfg(not(miri))]
            tsc: quanta::Clock::new(),
            #[cfg(miri)]
            origin: std::time::Instant::now(),
        }
    }

    #[inline]
    fn raw(&self) -> u64 {
        #[cfg(not(miri))]
        return self.tsc.raw();
        #[cfg(miri)]
        return self.origin.elapsed().as_nanos() as u64;
    }

    /// Nanoseconds from reading `start` to reading `end`.
    fn nanos(&self, start: u64, end: u64) -> u64 {
        #[cfg(not(miri))]
        return self.tsc.delta_as_nanos(start, end);
        #[cfg(miri)]
        return end.saturating_sub(start);
    }
}

impl Profiler {
    /// A running profiler that writes to `output` (if given) when its engine is dropped.
    pub fn new(output: Option<PathBuf>) -> Self {
        let clock = Clock::new();
        let origin = clock.raw();
        Profiler {
            id: NEXT_PROFILER.fetch_add(1, Ordering::Relaxed),
            clock,
            origin,
            running: AtomicBool::new(true),
            logs: Mutex::new(Vec::new()),
            marks: Mutex::new(Vec::new()),
            output,
        }
    }

    /// Stops recording: ops that start from now on are not recorded (MXNet's `pause`).
    pub fn pause(&self) {
        self.running.store(false, Ordering::Relaxed);
    }

    /// Records again after [`Profiler::pause`].
    pub fn resume(&self) {
        self.running.store(true, Ordering::Relaxed);
    }

    /// Whether ops starting now are recorded.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    /// Forgets everything recorded so far (to profile a window: reset, run, read).
    pub fn reset(&self) {
        for log in self.logs.lock().iter() {
            log.records.lock().clear();
        }
        self.marks.lock().clear();
    }

    /// Nanoseconds since the profiler started: where a span marked later starts.
    pub fn now_ns(&self) -> u64 {
        self.ns(self.clock.raw())
    }

    fn mark(&self, domain: &str, name: &str, mark: Mark) {
        if self.is_running() {
            self.marks.lock().push(UserMark {
                domain: domain.to_string(),
                name: name.to_string(),
                mark,
                thread: thread_no(),
            });
        }
    }

    /// Marks a span from `start_ns` (a [`Profiler::now_ns`] reading) to now, while running.
    pub fn mark_span(&self, domain: &str, name: &str, start_ns: u64) {
        let end_ns = self.now_ns().max(start_ns);
        self.mark(domain, name, Mark::Span { start_ns, end_ns });
    }

    /// Marks a counter's new value, now, while running.
    pub fn mark_counter(&self, domain: &str, name: &str, value: f64) {
        let at_ns = self.now_ns();
        self.mark(domain, name, Mark::Counter { at_ns, value });
    }

    /// Marks a moment, now, while running.
    pub fn mark_instant(&self, domain: &str, name: &str, scope: &str) {
        let at_ns = self.now_ns();
        let scope = scope.to_string();
        self.mark(domain, name, Mark::Instant { at_ns, scope });
    }

    /// What programs marked, in the order they marked it.
    pub fn marks(&self) -> Vec<UserMark> {
        self.marks.lock().clone()
    }

    /// The reading an op's run starts from, or `None` while paused.
    pub(crate) fn start(&self) -> Option<u64> {
        self.is_running().then(|| self.clock.raw())
    }

    /// Records a run that started at `start` (from [`Profiler::start`]) and ends now. The name
    /// is taken as the op holds it, so that keeping a static one allocates nothing.
    #[allow(clippy::ptr_arg)]
    pub(crate) fn record(&self, name: &Cow<'static, str>, start: u64, ctx: Context) {
        let record = Record {
            name: name.clone(),
            start,
            end: self.clock.raw(),
            ctx,
        };
        // A thread being torn down has no list left; what it runs then goes unrecorded.
        let _ = LOGS.try_with(|logs| {
            let mut logs = logs.borrow_mut();
            match logs.iter().find(|l| l.profiler == self.id) {
                Some(log) => log.records.lock().push(record),
                None => {
                    let log = self.new_log();
                    log.records.lock().push(record);
                    // Logs only this thread still holds belong to profilers that are gone.
                    logs.retain(|l| Arc::strong_count(l) > 1);
                    logs.push(log);
                }
            }
        });
    }

    fn new_log(&self) -> Arc<ThreadLog> {
        let log = Arc::new(ThreadLog {
            profiler: self.id,
            thread: thread_no(),
            thread_name: std::thread::current().name().unwrap_or("").to_string(),
            records: Mutex::new(Vec::new()),
        });
        self.logs.lock().push(log.clone());
        log
    }

    fn ns(&self, raw: u64) -> u64 {
        self.clock.nanos(self.origin, raw)
    }

    /// Everything recorded so far, by start time.
    pub fn events(&self) -> Vec<ProfileEvent> {
        let mut out = Vec::new();
        for log in self.logs.lock().iter() {
            out.extend(log.records.lock().iter().map(|r| ProfileEvent {
                name: r.name.to_string(),
                start_ns: self.ns(r.start),
                end_ns: self.ns(r.end),
                thread: log.thread,
                thread_name: log.thread_name.clone(),
                ctx: r.ctx,
            }));
        }
        out.sort_by_key(|e| (e.start_ns, e.thread));
        out
    }

    /// Per op name and device: how many runs, their total, shortest and longest time; the
    /// largest total first. A bulk unit counts both as itself (`bulk[n]`) and as its members.
    pub fn summary(&self) -> Vec<OpStats> {
        let mut by_op: HashMap<(Cow<'static, str>, Context), OpStats> = HashMap::new();
        for log in self.logs.lock().iter() {
            for r in log.records.lock().iter() {
                let ns = self.clock.nanos(r.start, r.end);
                let s = by_op
                    .entry((r.name.clone(), r.ctx))
                    .or_insert_with(|| OpStats {
                        name: r.name.to_string(),
                        ctx: r.ctx,
                        count: 0,
                        total_ns: 0,
                        min_ns: u64::MAX,
                        max_ns: 0,
                    });
                s.count += 1;
                s.total_ns += ns;
                s.min_ns = s.min_ns.min(ns);
                s.max_ns = s.max_ns.max(ns);
            }
        }
        let mut out: Vec<OpStats> = by_op.into_values().collect();
        out.sort_by(|a, b| (b.total_ns, &a.name, a.ctx).cmp(&(a.total_ns, &b.name, b.ctx)));
        out
    }

    /// [`Profiler::summary`] as a table for people, times in µs.
    pub fn summary_table(&self) -> String {
        let stats = self.summary();
        let width = stats.iter().map(|s| s.name.len()).max().unwrap_or(2).max(2);
        let mut t = format!(
            "{:<width$}  {:<8} {:>9} {:>12} {:>10} {:>10} {:>10}\n",
            "op", "device", "count", "total µs", "mean µs", "min µs", "max µs"
        );
        let us = |ns: u64| ns as f64 / 1e3;
        for s in &stats {
            let _ = writeln!(
                t,
                "{:<width$}  {:<8} {:>9} {:>12.1} {:>10.2} {:>10.2} {:>10.2}",
                s.name,
                s.ctx.to_string(),
                s.count,
                us(s.total_ns),
                s.mean_ns() / 1e3,
                us(s.min_ns),
                us(s.max_ns)
            );
        }
        t
    }

    /// Where the trace is written on drop, if anywhere.
    pub fn output(&self) -> Option<&Path> {
        self.output.as_deref()
    }

    /// The trace as Chrome trace-event JSON: one complete ("X") event per op, one process per
    /// device, one track per thread; then the programs' marks, one process per domain (spans
    /// as complete events, counters as counter events, instants as instant events).
    pub fn chrome_trace(&self) -> serde_json::Value {
        let events = self.events();
        let mut out = Vec::with_capacity(events.len() + 16);
        let mut named = std::collections::BTreeSet::new();
        for e in &events {
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
        let us = |ns: u64| ns as f64 / 1000.0;
        for m in self.marks() {
            let (pid, tid, name) = (&m.domain, m.thread, &m.name);
            out.push(match &m.mark {
                Mark::Span { start_ns, end_ns } => serde_json::json!({
                    "ph": "X", "name": name, "cat": pid, "pid": pid, "tid": tid,
                    "ts": us(*start_ns), "dur": us(end_ns - start_ns),
                }),
                Mark::Counter { at_ns, value } => serde_json::json!({
                    "ph": "C", "name": name, "cat": pid, "pid": pid, "tid": tid,
                    "ts": us(*at_ns), "args": { name: value },
                }),
                Mark::Instant { at_ns, scope } => serde_json::json!({
                    "ph": "i", "name": name, "cat": pid, "pid": pid, "tid": tid,
                    "ts": us(*at_ns),
                    "s": match scope.as_str() { "global" => "g", "thread" => "t", _ => "p" },
                }),
            });
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

impl Drop for Profiler {
    /// Threads keep their logs until they record for another profiler; empty them now.
    fn drop(&mut self) {
        self.reset();
    }
}

impl std::fmt::Debug for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiler")
            .field("running", &self.is_running())
            .field("threads", &self.logs.lock().len())
            .field("output", &self.output)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn run(p: &Profiler, name: &'static str, ctx: Context) {
        if let Some(t0) = p.start() {
            std::thread::sleep(std::time::Duration::from_micros(50));
            p.record(&Cow::Borrowed(name), t0, ctx);
        }
    }

    /// Runs recorded on several threads come back merged, each with its thread, and add up per
    /// name and device in the summary, the largest total first.
    #[test]
    fn threads_record_apart_and_the_summary_adds_them_up() {
        let p = Arc::new(Profiler::new(None));
        let threads: Vec<_> = (0..3)
            .map(|i| {
                let p = p.clone();
                std::thread::Builder::new()
                    .name(format!("recorder#{i}"))
                    .spawn(move || {
                        for _ in 0..4 {
                            run(&p, "conv", Context::cpu(0));
                        }
                        run(&p, "relu", Context::cpu(i));
                    })
                    .unwrap()
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let events = p.events();
        assert_eq!(events.len(), 15);
        assert!(events.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        assert!(events.iter().all(|e| e.end_ns >= e.start_ns + 50_000));
        let names: std::collections::BTreeSet<_> =
            events.iter().map(|e| e.thread_name.as_str()).collect();
        assert_eq!(names.len(), 3, "{names:?}");

        let stats = p.summary();
        assert_eq!(stats.len(), 4, "conv on cpu(0), relu on cpu(0..3)");
        let conv = &stats[0];
        assert_eq!(
            (conv.name.as_str(), conv.ctx, conv.count),
            ("conv", Context::cpu(0), 12)
        );
        assert!(conv.min_ns >= 50_000 && conv.min_ns <= conv.max_ns);
        assert!(conv.mean_ns() >= conv.min_ns as f64 && conv.mean_ns() <= conv.max_ns as f64);
        let total: u64 = events
            .iter()
            .filter(|e| e.name == "conv")
            .map(|e| e.end_ns - e.start_ns)
            .sum();
        // Each run is converted on its own in `events`: rounding may differ by a ns a run.
        assert!(
            conv.total_ns.abs_diff(total) <= 12,
            "{} vs {total}",
            conv.total_ns
        );
        assert!(stats[1..].iter().all(|s| s.name == "relu" && s.count == 1));
        let table = p.summary_table();
        assert_eq!(table.lines().count(), 5, "{table}");
        assert!(table.lines().nth(1).unwrap().starts_with("conv"), "{table}");
    }

    /// Paused, nothing new is recorded; reset forgets what was.
    #[test]
    fn pause_resume_and_reset() {
        let p = Profiler::new(None);
        run(&p, "a", Context::cpu(0));
        p.pause();
        assert!(!p.is_running());
        run(&p, "b", Context::cpu(0));
        p.resume();
        run(&p, "c", Context::cpu(0));
        let names: Vec<String> = p.events().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["a", "c"]);
        p.reset();
        assert!(p.events().is_empty() && p.summary().is_empty());
        run(&p, "d", Context::cpu(0));
        assert_eq!(p.events().len(), 1);
    }

    /// Programs' marks come back in order and go into the trace by kind, under their domain;
    /// paused, none is kept; reset forgets them.
    #[test]
    fn marks_of_spans_counters_and_instants() {
        let p = Profiler::new(None);
        let t0 = p.now_ns();
        std::thread::sleep(std::time::Duration::from_micros(50));
        p.mark_span("py", "task", t0);
        p.mark_counter("py", "count", 6.0);
        p.mark_instant("py", "start", "process");
        p.pause();
        p.mark_counter("py", "count", 7.0);
        p.resume();
        let marks = p.marks();
        assert_eq!(marks.len(), 3);
        match &marks[0].mark {
            Mark::Span { start_ns, end_ns } => assert!(*end_ns >= start_ns + 50_000),
            other => panic!("{other:?}"),
        }
        let trace = p.chrome_trace();
        let events = trace["traceEvents"].as_array().unwrap();
        let kinds: Vec<_> = events.iter().map(|e| e["ph"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["X", "C", "i"]);
        assert_eq!(events[1]["args"]["count"], 6.0);
        assert!(events.iter().all(|e| e["pid"] == "py"));
        p.reset();
        assert!(p.marks().is_empty());
    }

    /// A thread recording for two profilers keeps their runs apart, and drops its log of a
    /// profiler that is gone when it next makes a log.
    #[test]
    fn two_profilers_on_one_thread() {
        let (a, b) = (Profiler::new(None), Profiler::new(None));
        run(&a, "x", Context::cpu(0));
        run(&b, "y", Context::cpu(0));
        run(&a, "x", Context::cpu(0));
        assert_eq!(a.summary()[0].count, 2);
        assert_eq!(b.events().len(), 1);
        drop(a);
        let c = Profiler::new(None);
        run(&c, "z", Context::cpu(0));
        let held = LOGS.with(|l| l.borrow().len());
        assert_eq!(held, 2, "the logs of b and c; a's was dropped");
    }
}
