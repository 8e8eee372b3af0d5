//! `engine`: a threaded dependency engine with versioned variables, in the tradition of MXNet.
//!
//! Ops are closures that declare the [`Var`]s they read and write. For each var, the order of
//! pushes is the order of effect: reads between two writes may run together, nothing else may.
//! Every completed write bumps the var's version. An op that fails (returns `Err` or panics)
//! poisons the vars it writes; later ops touching a poisoned var are skipped and pass the poison
//! on, and `wait_for_var` / `wait_for_all` report it. Results of any program equal those of the
//! inline [`EngineKind::Naive`] engine.
//!
//! ```
//! use engine::{EngineBuilder, EngineKind, Op};
//! use std::sync::{Arc, atomic::{AtomicI64, Ordering}};
//!
//! let engine = EngineBuilder::new(EngineKind::ThreadedPerDevice).build();
//! let x = engine.new_var();
//! let cell = Arc::new(AtomicI64::new(1));
//! for _ in 0..10 {
//!     let c = cell.clone();
//!     engine.push(Op::sync("double", move |_| { c.fetch_add(c.load(Ordering::SeqCst), Ordering::SeqCst); Ok(()) }).write(&x)).unwrap();
//! }
//! engine.wait_for_var(&x).unwrap();
//! assert_eq!(cell.load(Ordering::SeqCst), 1024);
//! assert_eq!(x.version(), 10);
//! ```

#![warn(missing_docs)]

mod bulk;
mod config;
mod core;
#[cfg(feature = "cuda")]
pub mod cuda;
mod deferred;
mod error;
mod naive;
mod op;
mod pool;
mod profiler;
mod sync;
mod threaded;
mod var;

#[cfg(all(test, loom))]
mod loom_tests;

use std::borrow::Cow;

pub use crate::core::running_at_push;
pub use bulk::{BulkPusher, BulkUnit};
pub use config::{env, EngineBuilder, EngineConfig, EngineKind};
pub use error::{BoxError, EngineError, OpFailure, OpResult};
pub use naive::NaiveEngine;
pub use op::{Completion, FnProperty, Op, RunContext};
pub use profiler::{Mark, OpStats, ProfileEvent, Profiler, UserMark};
pub use storage::Context;
pub use threaded::ThreadedEngine;
pub use var::Var;

/// What every engine offers. Hold engines as `Arc<dyn Engine>`; [`EngineBuilder`] makes them.
pub trait Engine: Send + Sync {
    /// Which engine this is.
    fn kind(&self) -> EngineKind;

    /// A number unique to this engine within the process; its vars carry it, so that a var of
    /// another engine is refused.
    fn id(&self) -> u64;

    /// A fresh var, version 0.
    fn new_var(&self) -> Var;

    /// A fresh *resource* var: it orders the ops that use it as any var does, but a failing op
    /// does not poison it (it poisons the op's other writes). For state that no op's result
    /// depends on being right after a failure — scratch space, a random generator — and that
    /// every later op of a device shares: poisoning it would fail every one of them.
    fn new_resource_var(&self) -> Var;

    /// Schedules `op`; returns at once (the inline engine runs it first). Refuses, with nothing
    /// scheduled, an op naming a deleted var or another engine's var.
    fn push(&self, op: Op<'_>) -> Result<(), EngineError>;

    /// Schedules the ops a [`BulkPusher`] fused (use `engine.bulk()`), leaving `unit` empty.
    fn push_bulk(&self, unit: &mut BulkUnit) -> Result<(), EngineError>;

    /// Runs `f` once every op pushed earlier on `var` has finished; `var` is dead from this call
    /// on, and any later use of it is an error. `f` runs even if `var` is poisoned.
    fn delete_var(&self, f: Box<dyn FnOnce() + Send>, var: &Var) -> Result<(), EngineError>;

    /// Returns once every op pushed earlier that writes `var` has finished; reports the failure
    /// poisoning `var`, if any, and clears it.
    fn wait_for_var(&self, var: &Var) -> Result<(), EngineError>;

    /// Returns once every op pushed earlier has finished; reports the earliest-pushed failure not
    /// yet reported and forgets the others (vars stay poisoned until `wait_for_var`).
    fn wait_for_all(&self) -> Result<(), EngineError>;

    /// The largest unit `engine.bulk()` fuses.
    fn bulk_size(&self) -> usize;

    /// Sets the imperative bulk size, as MXNet's `engine.set_bulk_size`, and returns the one set
    /// before: from now on up to `size` consecutive synchronous CPU ops given to
    /// [`Engine::push`], from any thread, are held back and scheduled as one unit; 0 or 1 turns
    /// it off (the default). Held ops count as pushed: they are scheduled before any other op,
    /// bulk push, `delete_var` or wait, so results and errors are those of pushing them one by
    /// one. Ops held at the call are scheduled first.
    fn set_imperative_bulk_size(&self, size: usize) -> Result<usize, EngineError>;

    /// The imperative bulk size set last (0: off).
    fn imperative_bulk_size(&self) -> usize;

    /// The profiler, when it is on.
    fn profiler(&self) -> Option<&Profiler>;
}

impl dyn Engine {
    /// Pushes a synchronous op.
    pub fn push_sync(
        &self,
        name: impl Into<Cow<'static, str>>,
        ctx: Context,
        reads: &[&Var],
        writes: &[&Var],
        f: impl FnOnce(&RunContext) -> OpResult + Send + 'static,
    ) -> Result<(), EngineError> {
        self.push(
            Op::sync(name, f)
                .on(ctx)
                .writes(writes.iter().copied())
                .reads(reads.iter().copied()),
        )
    }

    /// Pushes an asynchronous op, complete when its [`Completion`] is.
    pub fn push_async(
        &self,
        name: impl Into<Cow<'static, str>>,
        ctx: Context,
        reads: &[&Var],
        writes: &[&Var],
        f: impl FnOnce(&RunContext, Completion) + Send + 'static,
    ) -> Result<(), EngineError> {
        self.push(
            Op::asynchronous(name, f)
                .on(ctx)
                .writes(writes.iter().copied())
                .reads(reads.iter().copied()),
        )
    }

    /// A pusher that fuses consecutive synchronous CPU ops into units of [`Engine::bulk_size`].
    pub fn bulk(&self) -> BulkPusher<'_> {
        BulkPusher::new(self, self.bulk_size())
    }

    /// A pusher that fuses up to `size` ops per unit.
    pub fn bulk_with(&self, size: usize) -> BulkPusher<'_> {
        BulkPusher::new(self, size)
    }
}

fn write_profile_on_drop(profiler: Option<&Profiler>) {
    if let Some(p) = profiler {
        if let Some(path) = p.output() {
            if let Err(e) = p.write(path) {
                eprintln!("engine profiler: cannot write {}: {e}", path.display());
            }
        }
    }
}
