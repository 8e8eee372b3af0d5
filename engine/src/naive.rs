//! The inline engine: every op runs on the pushing thread before `push` returns (an async op is
//! waited for). Pushes from several threads run one whole push at a time (an op pushing from
//! inside itself runs its push nested), so they are linearizable as on the threaded engines. It
//! is the reference the threaded engines are checked against, so it shares only the `Var` type
//! with them and none of their dependency machinery.

use std::borrow::{Borrow, Cow};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use parking_lot::{Mutex, ReentrantMutex};
use smallvec::SmallVec;

use crate::bulk::{BulkBody, BulkUnit};
use crate::core::{check_vars, next_engine_id, refuse_inside_op, MemberScope, RunningScope};
use crate::deferred::{Deferred, Schedule};
use crate::error::{panic_message, EngineError, Failure, OpFailure, OpResult, Poison};
use crate::op::{distinct, Completion, Oneshot, Op, RunContext, UserFn, VarRefs};
use crate::profiler::Profiler;
use crate::var::{Access, Var};
use crate::{Engine, EngineKind};
use storage::Context;

/// The sequence number every op and wait has here. Every op pushed before a wait has run when
/// the wait reports a failure, so a report (made "at" this number) stops nothing after it, while
/// an unreported failure stops every op (`Failure::stops`).
const INLINE_SEQ: u64 = 0;

/// Runs each op inline, in push order.
pub struct NaiveEngine {
    id: u64,
    next_var: std::sync::atomic::AtomicU64,
    /// Unreported root failures, in push order (so the first is the earliest pushed).
    failures: Mutex<Vec<Poison>>,
    profiler: Option<Arc<Profiler>>,
    /// Held while a push (or a delete function) runs, so that pushes from several threads run
    /// one at a time; reentrant, because an op may push more ops from inside itself.
    one_at_a_time: ReentrantMutex<()>,
    /// Ops held back by the imperative bulk size. Every entry point takes `one_at_a_time`
    /// before it, so the two locks are always taken in that order.
    deferred: Deferred,
}

impl NaiveEngine {
    pub(crate) fn new(profiler: Option<Arc<Profiler>>) -> Self {
        NaiveEngine {
            id: next_engine_id(),
            next_var: std::sync::atomic::AtomicU64::new(0),
            failures: Mutex::new(Vec::new()),
            profiler,
            one_at_a_time: ReentrantMutex::new(()),
            deferred: Deferred::new(),
        }
    }

    fn var(&self, resource: bool) -> Var {
        let id = self
            .next_var
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Var::new(id, self.id, resource)
    }

    fn fail(&self, op: &str, message: String, panicked: bool) -> Poison {
        let f = Failure::new(OpFailure {
            op: op.to_string(),
            message,
            panicked,
        });
        self.failures.lock().push(f.clone());
        f
    }

    fn run(&self, op: Op<'_>) -> Result<(), EngineError> {
        check_vars(self.id, &op.name, op.vars.iter().copied())?;
        // Room for a fan-in's vars, so that splitting an op's vars allocates nothing.
        let (mut reads, mut writes) = (SmallVec::<[&Var; 8]>::new(), SmallVec::<[&Var; 8]>::new());
        let (op_reads, op_writes) = op.var_lists();
        for (v, access, read) in distinct(op_reads, op_writes) {
            if read {
                reads.push(v);
            }
            if access == Access::Write {
                writes.push(v);
            }
        }
        let _whole = self.one_at_a_time.lock();
        // Inside the closure a wait is refused, as on the threaded engines.
        let _running = RunningScope::enter(self.id, op.name.clone());
        self.execute(&op.name, op.func, op.ctx, &reads, &writes);
        Ok(())
    }

    /// Runs one op whose vars are checked and deduplicated, then poisons (or, when it ran,
    /// clears) and bumps its writes. `reads` holds every var it reads, the ones it updates
    /// included: an unreported failure on one of them stops it. The caller marks it as the
    /// running op. `name` is the `Cow` the profiler keeps a copy of (no allocation when static).
    #[allow(clippy::ptr_arg)]
    fn execute<V: Borrow<Var>>(
        &self,
        name: &Cow<'static, str>,
        func: UserFn,
        ctx: Context,
        reads: &[V],
        writes: &[V],
    ) {
        let poisoned = reads
            .iter()
            .find_map(|v| v.borrow().live_poison(INLINE_SEQ));
        let t0 = self.profiler.as_ref().and_then(|p| p.start());
        let rctx = RunContext::new(ctx);
        let failure = match (poisoned, func) {
            (Some(root), _) => Some(root),
            (None, UserFn::Sync(f)) => match catch_unwind(AssertUnwindSafe(|| f(&rctx))) {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(self.fail(name, e.to_string(), false)),
                Err(p) => Some(self.fail(name, panic_message(&*p), true)),
            },
            (None, UserFn::Async(f)) => {
                let shot = Arc::new(Oneshot::new());
                let tx = shot.clone();
                let done = Completion::new(move |r: OpResult| {
                    tx.send(r.err().map(|e| {
                        Arc::new(OpFailure {
                            op: String::new(),
                            message: e.to_string(),
                            panicked: false,
                        })
                    }))
                });
                // A panic drops `done` while unwinding, which completes it with an error.
                let _ = catch_unwind(AssertUnwindSafe(|| f(&rctx, done)));
                shot.recv()
                    .map(|e| self.fail(name, e.message.clone(), false))
            }
        };
        if let (Some(p), Some(t0)) = (&self.profiler, t0) {
            p.record(name, t0, ctx);
        }
        Self::complete_writes(writes, failure);
    }

    /// Counts a write on each of `writes`, poisoning them when the op failed and clearing their
    /// poison when it ran.
    fn complete_writes<V: Borrow<Var>>(writes: &[V], failure: Option<Poison>) {
        for w in writes {
            let mut g = w.borrow().lock();
            g.set_poison(failure.clone());
            g.bump(1);
        }
    }
}

impl Engine for NaiveEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Naive
    }

    fn id(&self) -> u64 {
        self.id
    }

    fn new_var(&self) -> Var {
        self.var(false)
    }

    fn new_resource_var(&self) -> Var {
        self.var(true)
    }

    fn push(&self, op: Op<'_>) -> Result<(), EngineError> {
        let _whole = self.one_at_a_time.lock();
        self.deferred.push(self, op)
    }

    /// Runs the held ops, then the unit's (see `run_unit`).
    fn push_bulk(&self, unit: &mut BulkUnit) -> Result<(), EngineError> {
        let _whole = self.one_at_a_time.lock();
        self.deferred.flush(self)?;
        self.run_unit(unit)
    }

    fn delete_var(&self, f: Box<dyn FnOnce() + Send>, var: &Var) -> Result<(), EngineError> {
        check_vars(self.id, "delete_var", std::iter::once(var))?;
        let _whole = self.one_at_a_time.lock();
        self.deferred.flush(self)?;
        var.lock().mark_deleted();
        let result = {
            let _running = RunningScope::enter(self.id, Cow::Borrowed("delete_var"));
            catch_unwind(AssertUnwindSafe(f))
        };
        if let Err(p) = result {
            self.fail("delete_var", panic_message(&*p), true);
        }
        Ok(())
    }

    fn wait_for_var(&self, var: &Var) -> Result<(), EngineError> {
        refuse_inside_op(self.id, "wait_for_var")?;
        check_vars(self.id, "wait_for_var", std::iter::once(var))?;
        self.flush_held()?;
        // A failure is reported once: not again if a wait on another var it reached did.
        match var.lock().take_poison().filter(|p| p.report(INLINE_SEQ)) {
            Some(p) => {
                self.failures.lock().retain(|f| !Arc::ptr_eq(f, &p));
                Err(EngineError::OpFailed(p.root.clone()))
            }
            None => Ok(()),
        }
    }

    fn wait_for_all(&self) -> Result<(), EngineError> {
        refuse_inside_op(self.id, "wait_for_all")?;
        self.flush_held()?;
        let failures = std::mem::take(&mut *self.failures.lock());
        // Every failure is reported now; the earliest not reported before is returned.
        let first = failures
            .into_iter()
            .filter(|f| f.report(INLINE_SEQ))
            .reduce(|first, _| first);
        match first {
            Some(f) => Err(EngineError::OpFailed(f.root.clone())),
            None => Ok(()),
        }
    }

    fn bulk_size(&self) -> usize {
        1
    }

    fn set_imperative_bulk_size(&self, size: usize) -> Result<usize, EngineError> {
        let _whole = self.one_at_a_time.lock();
        self.deferred.set_size(self, size)
    }

    fn imperative_bulk_size(&self) -> usize {
        self.deferred.size()
    }

    fn profiler(&self) -> Option<&Profiler> {
        self.profiler.as_deref()
    }
}

impl NaiveEngine {
    /// Runs the held ops, if any, under the engine's lock (the locks' order).
    fn flush_held(&self) -> Result<(), EngineError> {
        let _whole = self.one_at_a_time.lock();
        self.deferred.flush(self)
    }

    /// Runs a unit's members one by one, each exactly as if it had been pushed alone. A member
    /// whose var was deleted after it joined the unit fails, as on the threaded engines.
    fn run_unit(&self, unit: &mut BulkUnit) -> Result<(), EngineError> {
        // The unit's next ops go into this body's emptied lists (see `BulkUnit::take_into`), and
        // the body goes back to the unit afterwards, so bulking allocates nothing per unit.
        let _whole = self.one_at_a_time.lock();
        let mut body = unit
            .spare
            .pop()
            .unwrap_or_else(|| Box::new(BulkBody::with_capacity(unit.len())));
        let (ctx, (reads, writes)) = (unit.ctx, unit.take_into(&mut body));
        let mut by_slot: SmallVec<[Option<&Var>; 16]> =
            smallvec::smallvec![None; reads.len() + writes.len()];
        let unit_vars = reads.iter().zip(&body.read_slots);
        for (v, &slot) in unit_vars.chain(writes.iter().zip(&body.write_slots)) {
            by_slot[usize::from(slot)] = Some(v);
        }
        let of = |slots: &[u8]| -> VarRefs {
            slots
                .iter()
                .filter_map(|&s| by_slot[usize::from(s)])
                .collect()
        };
        let mut running = MemberScope::new(self.id);
        for m in body.members.drain() {
            let (reads, writes) = (of(m.reads), of(m.writes));
            if let Err(e) = check_vars(self.id, m.name, reads.iter().chain(&writes).copied()) {
                let failure = self.fail(m.name, e.to_string(), false);
                Self::complete_writes(&writes, Some(failure));
                continue;
            }
            running.name(m.name);
            self.execute(m.name, UserFn::Sync(m.func), ctx, &reads, &writes);
        }
        drop(running);
        body.members.clear();
        unit.spare.push(body);
        Ok(())
    }
}

impl Schedule for NaiveEngine {
    fn id(&self) -> u64 {
        self.id
    }

    fn push_now(&self, op: Op<'_>) -> Result<(), EngineError> {
        self.run(op)
    }

    fn push_unit_now(&self, unit: &mut BulkUnit) -> Result<(), EngineError> {
        self.run_unit(unit)
    }
}

impl Drop for NaiveEngine {
    fn drop(&mut self) {
        // Held ops were checked when they were taken; what fails is the ops' own error.
        let _ = self.flush_held();
        crate::write_profile_on_drop(self.profiler.as_deref());
    }
}
