//! The two threaded engines: one dependency [`Core`] each, differing only in where ready ops run.
//!
//! * `ThreadedPooled`: one shared compute pool for every device, plus a copy pool.
//! * `ThreadedPerDevice`: per device context, a compute pool, a one-thread priority pool and a
//!   copy pool, started when the first op for that context arrives. With the `cuda` feature,
//!   the workers of a `gpu(i)` context queue on that GPU's one stream (see [`crate::cuda`]),
//!   handed to ops in their [`RunContext`].

use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use parking_lot::Mutex;
use storage::Context;

use crate::bulk::BulkUnit;
use crate::config::EngineConfig;
use crate::core::{Core, Dispatch};
use crate::deferred::{Deferred, Schedule};
use crate::error::EngineError;
use crate::op::{FnProperty, Op, OpRef, RunContext};
use crate::pool::{Pool, WorkerInit};
use crate::profiler::Profiler;
use crate::var::Var;
use crate::{Engine, EngineKind};

/// Worker threads of every pool, joined at shutdown.
#[derive(Default)]
struct Threads(Mutex<Vec<JoinHandle<()>>>);

impl Threads {
    fn keep(&self, handles: Vec<JoinHandle<()>>) {
        self.0.lock().extend(handles);
    }

    fn contains_current(&self) -> bool {
        let me = std::thread::current().id();
        self.0.lock().iter().any(|h| h.thread().id() == me)
    }

    fn join(&self) {
        let handles = std::mem::take(&mut *self.0.lock());
        let me = std::thread::current().id();
        // The last engine handle may be dropped by an op on a worker: that worker cannot join
        // itself; it exits on its own once it returns to its (stopped) pool.
        for h in handles.into_iter().filter(|h| h.thread().id() != me) {
            // A worker only panics on a bug in the engine itself; nothing is left to clean up.
            let _ = h.join();
        }
    }
}

fn is_copy(op: &OpRef) -> bool {
    matches!(
        op.prop,
        FnProperty::CopyToDevice | FnProperty::CopyFromDevice
    )
}

/// What each worker of a device's pools starts with: the context and, for GPUs, the device's stream.
fn worker_init(ctx: Context) -> WorkerInit {
    Arc::new(move |_index| {
        #[allow(unused_mut)]
        let mut rctx = RunContext::new(ctx);
        #[cfg(feature = "cuda")]
        if ctx.dev_type == storage::DeviceType::Gpu {
            rctx.stream = crate::cuda::device_stream(ctx.dev_id);
        }
        rctx
    })
}

struct PooledDispatch {
    compute_threads: usize,
    copy_threads: usize,
    pools: OnceLock<(Arc<Pool>, Arc<Pool>)>,
    threads: Threads,
}

impl Dispatch for PooledDispatch {
    fn dispatch(&self, core: &Arc<Core>, op: OpRef) {
        let (compute, copy) = self.pools.get_or_init(|| {
            let init = worker_init(Context::cpu(0));
            let (compute, h1) = Pool::start(core, "pooled", self.compute_threads, init.clone());
            let (copy, h2) = Pool::start(core, "pooled-copy", self.copy_threads, init);
            self.threads.keep(h1);
            self.threads.keep(h2);
            (compute, copy)
        });
        if is_copy(&op) {
            copy.submit(op)
        } else {
            compute.submit(op)
        }
    }

    fn shutdown(&self) {
        if let Some((a, b)) = self.pools.get() {
            a.stop();
            b.stop();
        }
        self.threads.join();
    }

    fn is_worker(&self) -> bool {
        self.threads.contains_current()
    }
}

struct DevicePools {
    ctx: Context,
    compute: Arc<Pool>,
    priority: Arc<Pool>,
    copy: Arc<Pool>,
}

/// One link of the device list: a list that only grows, linked through `OnceLock`s, so that
/// finding a device is a few plain loads. A lock or a reference count would be written by every
/// dispatch, from pushers and workers alike, and bounce between their cores.
struct DeviceNode {
    pools: DevicePools,
    next: OnceLock<Box<DeviceNode>>,
}

struct PerDeviceDispatch {
    config: EngineConfig,
    /// The devices in the order they were first used.
    devices: OnceLock<Box<DeviceNode>>,
    /// Held while a device's pools start, so that each device gets one set.
    starting: Mutex<()>,
    threads: Threads,
}

impl PerDeviceDispatch {
    fn devices(&self) -> impl Iterator<Item = &DevicePools> {
        std::iter::successors(self.devices.get(), |node| node.next.get()).map(|node| &node.pools)
    }

    fn device(&self, core: &Arc<Core>, ctx: Context) -> &DevicePools {
        if let Some(d) = self.devices().find(|d| d.ctx == ctx) {
            return d;
        }
        let _starting = self.starting.lock();
        // The last link, unless another thread started this device meanwhile.
        let mut link = &self.devices;
        while let Some(node) = link.get() {
            if node.pools.ctx == ctx {
                return &node.pools;
            }
            link = &node.next;
        }
        let compute_threads = if ctx.is_cpu() {
            self.config.cpu_workers
        } else {
            self.config.gpu_workers
        };
        let init = worker_init(ctx);
        let (compute, h1) = Pool::start(core, &format!("{ctx}"), compute_threads, init.clone());
        let (priority, h2) = Pool::start(
            core,
            &format!("{ctx}-prio"),
            self.config.priority_workers,
            init.clone(),
        );
        let (copy, h3) = Pool::start(core, &format!("{ctx}-copy"), self.config.copy_workers, init);
        for h in [h1, h2, h3] {
            self.threads.keep(h);
        }
        let node = link.get_or_init(|| {
            Box::new(DeviceNode {
                pools: DevicePools {
                    ctx,
                    compute,
                    priority,
                    copy,
                },
                next: OnceLock::new(),
            })
        });
        &node.pools
    }
}

impl Dispatch for PerDeviceDispatch {
    fn dispatch(&self, core: &Arc<Core>, op: OpRef) {
        let device = self.device(core, op.ctx);
        if is_copy(&op) {
            device.copy.submit(op)
        } else if op.effective_priority() > 0 {
            device.priority.submit(op)
        } else {
            device.compute.submit(op)
        }
    }

    fn shutdown(&self) {
        for d in self.devices() {
            d.compute.stop();
            d.priority.stop();
            d.copy.stop();
        }
        self.threads.join();
    }

    fn is_worker(&self) -> bool {
        self.threads.contains_current()
    }
}

/// `ThreadedPooled` or `ThreadedPerDevice`.
pub struct ThreadedEngine {
    core: Arc<Core>,
    kind: EngineKind,
    bulk_size: usize,
    /// Ops held back by the imperative bulk size.
    deferred: Deferred,
}

impl ThreadedEngine {
    pub(crate) fn new(kind: EngineKind, config: EngineConfig) -> Self {
        let profiler = config.profiler();
        let (bulk_size, jitter_us, inline_cheap) =
            (config.bulk_size, config.jitter_us, config.inline_cheap);
        let dispatch: Box<dyn Dispatch> = match kind {
            EngineKind::ThreadedPooled => Box::new(PooledDispatch {
                compute_threads: config.pooled_workers,
                copy_threads: config.copy_workers,
                pools: OnceLock::new(),
                threads: Threads::default(),
            }),
            _ => Box::new(PerDeviceDispatch {
                config,
                devices: OnceLock::new(),
                starting: Mutex::new(()),
                threads: Threads::default(),
            }),
        };
        ThreadedEngine {
            core: Core::new(dispatch, profiler, jitter_us, inline_cheap),
            kind,
            bulk_size,
            deferred: Deferred::new(),
        }
    }
}

impl Schedule for ThreadedEngine {
    fn id(&self) -> u64 {
        self.core.id
    }

    fn push_now(&self, op: Op<'_>) -> Result<(), EngineError> {
        self.core.push(op)
    }

    fn push_unit_now(&self, unit: &mut BulkUnit) -> Result<(), EngineError> {
        self.core.push_bulk(unit)
    }
}

impl Engine for ThreadedEngine {
    fn kind(&self) -> EngineKind {
        self.kind
    }

    fn id(&self) -> u64 {
        self.core.id
    }

    fn new_var(&self) -> Var {
        self.core.new_var(false)
    }

    fn new_resource_var(&self) -> Var {
        self.core.new_var(true)
    }

    fn push(&self, op: Op<'_>) -> Result<(), EngineError> {
        self.deferred.push(self, op)
    }

    fn push_bulk(&self, unit: &mut BulkUnit) -> Result<(), EngineError> {
        self.deferred.flush(self)?;
        self.core.push_bulk(unit)
    }

    fn delete_var(&self, f: Box<dyn FnOnce() + Send>, var: &Var) -> Result<(), EngineError> {
        self.deferred.flush(self)?;
        self.core.delete_var(f, var)
    }

    fn wait_for_var(&self, var: &Var) -> Result<(), EngineError> {
        self.deferred.flush(self)?;
        self.core.wait_for_var(var)
    }

    fn wait_for_all(&self) -> Result<(), EngineError> {
        self.deferred.flush(self)?;
        self.core.wait_for_all()
    }

    fn bulk_size(&self) -> usize {
        self.bulk_size
    }

    fn set_imperative_bulk_size(&self, size: usize) -> Result<usize, EngineError> {
        self.deferred.set_size(self, size)
    }

    fn imperative_bulk_size(&self) -> usize {
        self.deferred.size()
    }

    fn profiler(&self) -> Option<&Profiler> {
        self.core.profiler.as_deref()
    }
}

impl Drop for ThreadedEngine {
    /// Drains every pushed op, joins every worker, then writes the profile if one was asked for.
    ///
    /// The last handle may go on a thread the drain waits for: inside an op or a delete function
    /// (an array's storage holding the last handle), or on a worker. Waiting there would wait for
    /// itself, so that thread hands the drain and the joins to a thread of their own and returns;
    /// the engine is gone, every worker joined, once the ops pushed before have finished.
    fn drop(&mut self) {
        // Held ops were checked when they were taken; what fails later is the ops' own error.
        let _ = self.deferred.flush(&*self);
        let core = self.core.clone();
        let close = move || {
            core.wait_idle();
            core.shutdown();
            crate::write_profile_on_drop(core.profiler.as_deref());
        };
        if !self.core.on_own_thread() {
            return close();
        }
        let closer = std::thread::Builder::new().name("mxrs-engine-close".into());
        if let Err(e) = closer.spawn(close) {
            // No thread to wait on: stop the workers now (each but this one is joined; pending
            // ops are dropped unrun) rather than wait for this thread's own op.
            eprintln!("engine: cannot start a thread to close the engine ({e}); stopping it now");
            self.core.shutdown();
        }
    }
}
