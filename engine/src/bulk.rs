//! Bulk execution: consecutive synchronous CPU ops pushed through one [`BulkPusher`] are fused
//! into units of up to `bulk_size` ops, each scheduled once. A unit takes read access to every
//! var its members only read and write access to every var any member writes, and runs its
//! members in push order, so results, versions and errors are those of pushing them one by one.

use crate::error::EngineError;
use crate::op::Op;
use crate::var::Var;
use crate::Engine;

/// Collects ops and pushes them as fused units. Created by `engine.bulk()`; what it still
/// holds is pushed on [`BulkPusher::flush`] and on drop.
pub struct BulkPusher<'e> {
    engine: &'e dyn Engine,
    size: usize,
    ops: Vec<Op>,
}

impl<'e> BulkPusher<'e> {
    pub(crate) fn new(engine: &'e dyn Engine, size: usize) -> Self {
        BulkPusher {
            engine,
            size: size.max(1),
            ops: Vec::new(),
        }
    }

    /// Adds an op. A bulkable op (see [`Op::is_bulkable`]) joins the current unit, which is pushed
    /// when it is full; any other op first pushes the current unit, then itself, so push order is
    /// kept. Vars are checked here, so a dead var is reported by this call.
    pub fn push(&mut self, op: Op) -> Result<(), EngineError> {
        let dead = op.vars().find(|v| v.is_deleted()).map(Var::id);
        if let Some(var) = dead {
            return Err(EngineError::DeadVar {
                op: op.name.into_owned(),
                var,
            });
        }
        if !op.is_bulkable() || self.size == 1 {
            self.flush()?;
            return self.engine.push(op);
        }
        if self.ops.first().is_some_and(|first| first.ctx != op.ctx) {
            self.flush()?;
        }
        self.ops.push(op);
        if self.ops.len() >= self.size {
            self.flush()?;
        }
        Ok(())
    }

    /// Pushes the ops collected so far as one unit.
    pub fn flush(&mut self) -> Result<(), EngineError> {
        match self.ops.len() {
            0 => Ok(()),
            1 => self.engine.push(self.ops.pop().expect("one op")),
            _ => self.engine.push_bulk(std::mem::take(&mut self.ops)),
        }
    }

    /// How many ops are waiting for the next flush.
    pub fn pending(&self) -> usize {
        self.ops.len()
    }
}

impl Drop for BulkPusher<'_> {
    fn drop(&mut self) {
        // Every op was checked when it was added; what can still fail is reported by the ops'
        // own errors at wait time.
        let _ = self.flush();
    }
}
