//! Choosing and sizing an engine: a builder in code, environment variables over the defaults.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::EngineError;
use crate::naive::NaiveEngine;
use crate::profiler::Profiler;
use crate::threaded::ThreadedEngine;
use crate::Engine;

/// Which engine to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// Runs every op inline at push; the reference.
    Naive,
    /// One shared work-stealing pool plus a copy pool.
    ThreadedPooled,
    /// Per device: compute workers, a priority worker, copy workers.
    ThreadedPerDevice,
}

impl EngineKind {
    /// Every kind, in a fixed order.
    pub const ALL: [EngineKind; 3] = [
        EngineKind::Naive,
        EngineKind::ThreadedPooled,
        EngineKind::ThreadedPerDevice,
    ];

    /// The name used in `MXRS_ENGINE_TYPE` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Naive => "naive",
            EngineKind::ThreadedPooled => "threaded_pooled",
            EngineKind::ThreadedPerDevice => "threaded_per_device",
        }
    }

    /// Parses a name as [`EngineKind::name`] prints it (MXNet's class names are accepted too).
    pub fn parse(s: &str) -> Option<EngineKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "naive" | "naiveengine" => Some(EngineKind::Naive),
            "threaded_pooled" | "threadedengine" | "pooled" => Some(EngineKind::ThreadedPooled),
            "threaded_per_device" | "threadedengineperdevice" | "per_device" => {
                Some(EngineKind::ThreadedPerDevice)
            }
            _ => None,
        }
    }
}

/// The environment variables the engine reads (see docs/configuration.md).
pub mod env {
    /// `naive`, `threaded_pooled` or `threaded_per_device`.
    pub const ENGINE_TYPE: &str = "MXRS_ENGINE_TYPE";
    /// Threads of the shared pool of `threaded_pooled`.
    pub const NUM_WORKER_THREADS: &str = "MXRS_NUM_WORKER_THREADS";
    /// Compute workers per CPU context (`threaded_per_device`).
    pub const CPU_WORKER_NTHREADS: &str = "MXRS_CPU_WORKER_NTHREADS";
    /// Compute workers per GPU context (`threaded_per_device`).
    pub const GPU_WORKER_NTHREADS: &str = "MXRS_GPU_WORKER_NTHREADS";
    /// Priority workers per context (`threaded_per_device`).
    pub const CPU_PRIORITY_NTHREADS: &str = "MXRS_CPU_PRIORITY_NTHREADS";
    /// Copy workers per context (and of `threaded_pooled`).
    pub const COPY_WORKER_NTHREADS: &str = "MXRS_COPY_WORKER_NTHREADS";
    /// Largest number of ops fused into one bulk unit (1 turns bulking off).
    pub const BULK_SIZE: &str = "MXRS_ENGINE_BULK_SIZE";
    /// Turns the profiler on and names the Chrome trace file written when the engine is dropped.
    pub const PROFILER_OUTPUT: &str = "MXRS_PROFILER_OUTPUT";
    /// Maximum random delay before each op, in microseconds (testing aid; 0 is off).
    pub const JITTER_US: &str = "MXRS_ENGINE_JITTER_US";
    /// `0` makes the threaded engines hand every op to a worker, cheap ones included (default 1).
    pub const INLINE_CHEAP: &str = "MXRS_ENGINE_INLINE_CHEAP";
}

/// Every setting of an engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Which engine.
    pub kind: EngineKind,
    /// Threads of the shared pool (`threaded_pooled`).
    pub pooled_workers: usize,
    /// Compute workers per CPU context (`threaded_per_device`).
    pub cpu_workers: usize,
    /// Compute workers per GPU context (`threaded_per_device`).
    pub gpu_workers: usize,
    /// Priority workers per context (`threaded_per_device`).
    pub priority_workers: usize,
    /// Copy workers per context, or of the pooled engine.
    pub copy_workers: usize,
    /// Largest bulk unit.
    pub bulk_size: usize,
    /// Profiler on, and where to write its trace on drop (None: in memory only).
    pub profiler: Option<Option<PathBuf>>,
    /// Testing aid for the threaded engines: every op first sleeps a pseudo-random 0..=this many
    /// microseconds, to expose missing dependencies (0: off).
    pub jitter_us: u64,
    /// Whether a threaded engine runs an op marked [`crate::Op::cheap`] on the pushing thread
    /// when it is runnable at push (see `Op::cheap`).
    pub inline_cheap: bool,
}

impl EngineConfig {
    pub(crate) fn profiler(&self) -> Option<Arc<Profiler>> {
        self.profiler
            .as_ref()
            .map(|out| Arc::new(Profiler::new(out.clone())))
    }
}

/// Builds an engine. Defaults: 1 compute worker per CPU context, 2 per GPU, 1 priority and 1
/// copy worker per context, a shared pool as large as the machine, bulk units of 16, no profiler.
#[derive(Clone, Debug)]
pub struct EngineBuilder {
    config: EngineConfig,
}

fn parse_count(var: &str, value: &str, max: usize) -> Result<usize, EngineError> {
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(EngineError::Config {
            var: var.to_string(),
            value: value.to_string(),
            expected: match max {
                usize::MAX => "a whole number of at least 1".into(),
                max => format!("a whole number of at least 1 and at most {max}"),
            },
        }),
    }
}

/// Most worker threads one pool may be given through the environment: each is an OS thread
/// with its own stack, and a count past what the system can start would fail at the first op.
pub(crate) const MAX_WORKERS: usize = 1024;

impl EngineBuilder {
    /// Defaults for `kind`.
    pub fn new(kind: EngineKind) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        EngineBuilder {
            config: EngineConfig {
                kind,
                pooled_workers: cores,
                cpu_workers: 1,
                gpu_workers: 2,
                priority_workers: 1,
                copy_workers: 1,
                bulk_size: 16,
                profiler: None,
                jitter_us: 0,
                inline_cheap: true,
            },
        }
    }

    /// Defaults (`threaded_per_device`), overridden by the `MXRS_*` environment variables.
    /// A variable with a value that cannot be used is an error naming it.
    pub fn from_env() -> Result<Self, EngineError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`EngineBuilder::from_env`], reading variables through `lookup` (for tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, EngineError> {
        let mut b = EngineBuilder::new(EngineKind::ThreadedPerDevice);
        if let Some(v) = lookup(env::ENGINE_TYPE) {
            b.config.kind = EngineKind::parse(&v).ok_or_else(|| EngineError::Config {
                var: env::ENGINE_TYPE.into(),
                value: v.clone(),
                expected: "one of naive, threaded_pooled, threaded_per_device".into(),
            })?;
        }
        // The largest value each count takes (bulk sizes are not threads).
        let (threads, any) = (MAX_WORKERS, usize::MAX);
        let counts: [(&str, &mut usize, usize); 6] = [
            (
                env::NUM_WORKER_THREADS,
                &mut b.config.pooled_workers,
                threads,
            ),
            (env::CPU_WORKER_NTHREADS, &mut b.config.cpu_workers, threads),
            (env::GPU_WORKER_NTHREADS, &mut b.config.gpu_workers, threads),
            (
                env::CPU_PRIORITY_NTHREADS,
                &mut b.config.priority_workers,
                threads,
            ),
            (
                env::COPY_WORKER_NTHREADS,
                &mut b.config.copy_workers,
                threads,
            ),
            (env::BULK_SIZE, &mut b.config.bulk_size, any),
        ];
        for (var, slot, max) in counts {
            if let Some(v) = lookup(var) {
                *slot = parse_count(var, &v, max)?;
            }
        }
        if let Some(v) = lookup(env::JITTER_US) {
            b.config.jitter_us = v.trim().parse().map_err(|_| EngineError::Config {
                var: env::JITTER_US.into(),
                value: v.clone(),
                expected: "a whole number of microseconds".into(),
            })?;
        }
        if let Some(v) = lookup(env::INLINE_CHEAP) {
            b.config.inline_cheap = match v.trim() {
                "1" => true,
                "0" => false,
                _ => {
                    return Err(EngineError::Config {
                        var: env::INLINE_CHEAP.into(),
                        value: v.clone(),
                        expected: "0 or 1".into(),
                    })
                }
            };
        }
        if let Some(path) = lookup(env::PROFILER_OUTPUT).filter(|p| !p.is_empty()) {
            b.config.profiler = Some(Some(PathBuf::from(path)));
        }
        Ok(b)
    }

    /// Testing aid: every op on a threaded engine first sleeps up to `max` (rounded to
    /// microseconds), so that tests explore unusual execution orders.
    pub fn jitter(mut self, max: std::time::Duration) -> Self {
        self.config.jitter_us = max.as_micros().min(u128::from(u64::MAX)) as u64;
        self
    }

    /// Whether cheap ops runnable at push run on the pushing thread (default on; see
    /// [`crate::Op::cheap`]).
    pub fn inline_cheap(mut self, on: bool) -> Self {
        self.config.inline_cheap = on;
        self
    }

    /// Which engine.
    pub fn kind(mut self, kind: EngineKind) -> Self {
        self.config.kind = kind;
        self
    }

    /// Threads of the shared pool (`threaded_pooled`).
    pub fn pooled_workers(mut self, n: usize) -> Self {
        self.config.pooled_workers = n.max(1);
        self
    }

    /// Compute workers per CPU context (`threaded_per_device`).
    pub fn cpu_workers(mut self, n: usize) -> Self {
        self.config.cpu_workers = n.max(1);
        self
    }

    /// Compute workers per GPU context (`threaded_per_device`).
    pub fn gpu_workers(mut self, n: usize) -> Self {
        self.config.gpu_workers = n.max(1);
        self
    }

    /// Copy workers per context (or of the pooled engine).
    pub fn copy_workers(mut self, n: usize) -> Self {
        self.config.copy_workers = n.max(1);
        self
    }

    /// Priority workers per context (`threaded_per_device`).
    pub fn priority_workers(mut self, n: usize) -> Self {
        self.config.priority_workers = n.max(1);
        self
    }

    /// Largest bulk unit (1 turns bulking off).
    pub fn bulk_size(mut self, n: usize) -> Self {
        self.config.bulk_size = n.max(1);
        self
    }

    /// Turns the profiler on; with a path, the Chrome trace is written there when the engine is
    /// dropped.
    pub fn profiler(mut self, output: Option<PathBuf>) -> Self {
        self.config.profiler = Some(output);
        self
    }

    /// The settings so far.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Starts the engine (threaded engines start their workers on first use).
    pub fn build(self) -> Arc<dyn Engine> {
        match self.config.kind {
            EngineKind::Naive => Arc::new(NaiveEngine::new(self.config.profiler())),
            kind => Arc::new(ThreadedEngine::new(kind, self.config)),
        }
    }
}
