//! The inline engine: every op runs on the pushing thread before `push` returns (an async op is
//! waited for). Pushes from several threads are not ordered against each other. It is the reference the threaded engines are checked against, so it shares
//! only the `Var` type with them and none of their dependency machinery.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::core::{check_vars, next_engine_id};
use crate::error::{panic_message, EngineError, OpFailure, OpResult};
use crate::op::{dedup, Completion, Oneshot, Op, OpFn, RunContext};
use crate::profiler::Profiler;
use crate::var::Var;
use crate::{Engine, EngineKind};

/// Runs each op inline, in push order.
pub struct NaiveEngine {
    id: u64,
    next_var: std::sync::atomic::AtomicU64,
    /// Unreported root failures, in push order (so the first is the earliest pushed).
    failures: Mutex<Vec<Arc<OpFailure>>>,
    profiler: Option<Arc<Profiler>>,
}

impl NaiveEngine {
    pub(crate) fn new(profiler: Option<Arc<Profiler>>) -> Self {
        NaiveEngine {
            id: next_engine_id(),
            next_var: std::sync::atomic::AtomicU64::new(0),
            failures: Mutex::new(Vec::new()),
            profiler,
        }
    }

    fn fail(&self, op: &str, message: String, panicked: bool) -> Arc<OpFailure> {
        let f = Arc::new(OpFailure {
            op: op.to_string(),
            message,
            panicked,
        });
        self.failures.lock().push(f.clone());
        f
    }

    fn run(&self, op: Op) -> Result<(), EngineError> {
        check_vars(self.id, &op.name, op.vars())?;
        let (name, func, ctx) = (op.name, op.func, op.ctx);
        let (mut reads, mut writes) = (op.reads, op.writes);
        dedup(&mut reads, &mut writes);
        let poisoned = reads.iter().chain(writes.iter()).find_map(Var::poison);
        let t0 = self.profiler.as_ref().map(|p| p.now_ns());
        let rctx = RunContext::new(ctx);
        let failure = match (poisoned, func) {
            (_, OpFn::Delete(f)) => catch_unwind(AssertUnwindSafe(f))
                .err()
                .map(|p| self.fail(&name, panic_message(&*p), true)),
            (Some(root), _) => Some(root),
            (None, OpFn::Sync(f)) => match catch_unwind(AssertUnwindSafe(|| f(&rctx))) {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(self.fail(&name, e.to_string(), false)),
                Err(p) => Some(self.fail(&name, panic_message(&*p), true)),
            },
            (None, OpFn::Async(f)) => {
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
                    .map(|e| self.fail(&name, e.message.clone(), false))
            }
            (None, OpFn::Bulk(_) | OpFn::Wait(_)) => {
                return Err(EngineError::InvalidOp {
                    op: name.into_owned(),
                    reason: "engine-internal op pushed to the naive engine".into(),
                })
            }
        };
        if let (Some(p), Some(t0)) = (&self.profiler, t0) {
            p.record(&name, t0, ctx);
        }
        for w in &writes {
            let mut g = w.lock();
            if let Some(f) = &failure {
                g.set_poison(f.clone());
            }
            g.bump(1);
        }
        Ok(())
    }
}

impl Engine for NaiveEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Naive
    }

    fn new_var(&self) -> Var {
        let id = self
            .next_var
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Var::new(id, self.id)
    }

    fn push(&self, op: Op) -> Result<(), EngineError> {
        self.run(op)
    }

    fn push_bulk(&self, ops: Vec<Op>) -> Result<(), EngineError> {
        ops.into_iter().try_for_each(|op| self.run(op))
    }

    fn delete_var(&self, f: Box<dyn FnOnce() + Send>, var: &Var) -> Result<(), EngineError> {
        check_vars(self.id, "delete_var", std::iter::once(var))?;
        var.lock().mark_deleted();
        if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
            self.fail("delete_var", panic_message(&*p), true);
        }
        Ok(())
    }

    fn wait_for_var(&self, var: &Var) -> Result<(), EngineError> {
        check_vars(self.id, "wait_for_var", std::iter::once(var))?;
        match var.lock().take_poison() {
            Some(p) => {
                self.failures.lock().retain(|f| !Arc::ptr_eq(f, &p));
                Err(EngineError::OpFailed(p))
            }
            None => Ok(()),
        }
    }

    fn wait_for_all(&self) -> Result<(), EngineError> {
        let mut failures = self.failures.lock();
        let first = failures.first().cloned();
        failures.clear();
        match first {
            Some(f) => Err(EngineError::OpFailed(f)),
            None => Ok(()),
        }
    }

    fn bulk_size(&self) -> usize {
        1
    }

    fn profiler(&self) -> Option<&Profiler> {
        self.profiler.as_deref()
    }
}

impl Drop for NaiveEngine {
    fn drop(&mut self) {
        crate::write_profile_on_drop(self.profiler.as_deref());
    }
}
