//! Imperative bulking, as MXNet's `engine.set_bulk_size`: while a bulk size above one is set,
//! the synchronous CPU ops pushed through [`crate::Engine::push`], from any thread, are held in
//! one shared unit and scheduled together when it is full, instead of one by one.
//!
//! Held ops count as pushed: the unit is pushed first whenever anything must see them — a
//! non-fusable push, a bulk push, a var's deletion, a wait, the size changing, the engine
//! closing — so results, versions and errors equal those of pushing the ops one by one.
//!
//! Invariants:
//! - `size` is only written under the unit's lock, after the unit was pushed; so a thread that
//!   reads `size <= 1` (acquire) sees no held op (the fast path takes no lock).
//! - Whatever runs under the lock runs with the unit empty (it is pushed before anything runs),
//!   so a call from inside that code on the same thread (an op run inline, a delete function)
//!   needs nothing from the unit: it bypasses it instead of taking the lock again.
//! - A thread holding the lock never waits for another thread's progress (pushing does not
//!   block on ops), so a worker's op may take it. The inline engine, which runs ops on the
//!   pushing thread under its own reentrant lock, takes that lock first (one lock order).

use crate::bulk::BulkUnit;
use crate::error::EngineError;
use crate::op::Op;
use crate::sync::{AtomicUsize, Mutex, Ordering};

// No `const { }` initializer: loom's `thread_local!` does not accept it.
#[allow(clippy::missing_const_for_thread_local)]
mod tls {
    use std::cell::Cell;
    crate::sync::thread_local! {
    /// The engine whose held-ops lock this thread holds (0: none; see the module's invariants).
    pub(super) static HOLDING: Cell<u64> = Cell::new(0);
    }
}
use tls::HOLDING;

/// Marks this thread as holding engine `id`'s lock until dropped.
struct Holding(u64);

impl Holding {
    fn enter(id: u64) -> Self {
        Holding(HOLDING.with(|h| h.replace(id)))
    }
}

fn holding(id: u64) -> bool {
    HOLDING.with(|h| h.get() == id)
}

impl Drop for Holding {
    fn drop(&mut self) {
        HOLDING.with(|h| h.set(self.0));
    }
}

/// How an engine schedules at once: its push and bulk push without the held unit.
pub(crate) trait Schedule {
    fn id(&self) -> u64;
    fn push_now(&self, op: Op<'_>) -> Result<(), EngineError>;
    fn push_unit_now(&self, unit: &mut BulkUnit) -> Result<(), EngineError>;
}

/// The held unit of one engine and its size.
pub(crate) struct Deferred {
    /// At most this many ops per unit; 0 or 1: off.
    size: AtomicUsize,
    unit: Mutex<BulkUnit>,
}

impl Deferred {
    pub(crate) fn new() -> Self {
        Deferred {
            size: AtomicUsize::new(0),
            unit: Mutex::new(BulkUnit::new()),
        }
    }

    /// The size set last.
    pub(crate) fn size(&self) -> usize {
        self.size.load(Ordering::Acquire)
    }

    /// Whether held ops need looking at: a size is set and this thread is not inside code run
    /// under the lock.
    fn active(&self, engine: u64) -> bool {
        self.size.load(Ordering::Acquire) > 1 && !holding(engine)
    }

    /// Pushes `op`, holding it back while a size is set and it can be fused.
    pub(crate) fn push(&self, engine: &impl Schedule, op: Op<'_>) -> Result<(), EngineError> {
        if !self.active(engine.id()) {
            return engine.push_now(op);
        }
        let mut unit = self.unit.lock();
        let _holding = Holding::enter(engine.id());
        let size = self.size.load(Ordering::Relaxed);
        unit.offer(
            op,
            size,
            engine.id(),
            |op| engine.push_now(op),
            |u| engine.push_unit_now(u),
        )
    }

    /// Pushes the held ops, if any: before anything that must see every op pushed so far.
    pub(crate) fn flush(&self, engine: &impl Schedule) -> Result<(), EngineError> {
        if !self.active(engine.id()) {
            return Ok(());
        }
        let mut unit = self.unit.lock();
        let _holding = Holding::enter(engine.id());
        match unit.is_empty() {
            true => Ok(()),
            false => engine.push_unit_now(&mut unit),
        }
    }

    /// Sets the size (0 or 1: off) after pushing the held ops; returns the previous size.
    pub(crate) fn set_size(
        &self,
        engine: &impl Schedule,
        size: usize,
    ) -> Result<usize, EngineError> {
        if holding(engine.id()) {
            // Called from code run under the lock, further up this thread's stack: the unit
            // is empty there, so the size may change without taking the lock again.
            return Ok(self.size.swap(size, Ordering::AcqRel));
        }
        let mut unit = self.unit.lock();
        let _holding = Holding::enter(engine.id());
        if !unit.is_empty() {
            engine.push_unit_now(&mut unit)?;
        }
        Ok(self.size.swap(size, Ordering::AcqRel))
    }
}
