//! Bulk execution: consecutive synchronous CPU ops pushed through one [`BulkPusher`] are fused
//! into units of up to `bulk_size` ops, each scheduled once. A unit takes read access to every
//! var its members only read and write access to every var any member writes, and runs its
//! members in push order, so results, versions and errors are those of pushing them one by one.
//!
//! The pusher builds the unit as ops arrive: each op's closure and name move into a member, its
//! vars move into the unit's lists the first time the unit sees them and get a small slot
//! number; a member keeps only its vars' slots. An op so costs one record of about one cache line
//! (what the worker must read back) and no reference-count traffic beyond dropping the handles
//! the caller gave it.

use std::borrow::Cow;

use smallvec::SmallVec;
use storage::Context;

use crate::core::check_vars;
use crate::error::EngineError;
use crate::op::{dedup, Op, SyncFn, UserFn, VarList};
use crate::var::Var;
use crate::Engine;

/// Most distinct vars in one unit (slots are `u8`); an op that would pass it starts a new unit.
const MAX_SLOTS: usize = 255;

/// Most vars one bulked op may list; an op with more is pushed alone. It keeps a member within
/// one cache line, which is what the worker reads back for each op.
const MEMBER_VARS: usize = 22;

/// One op inside a unit.
pub(crate) struct BulkMember {
    pub(crate) name: Cow<'static, str>,
    pub(crate) func: SyncFn,
    pub(crate) vars: MemberVars,
}

/// The slots of a member's vars: those it reads, then those it writes (deduplicated as for any
/// op).
#[derive(Clone, Copy)]
pub(crate) struct MemberVars {
    slots: [u8; MEMBER_VARS],
    n_slots: u8,
    n_reads: u8,
}

impl MemberVars {
    /// The slots of its vars, reads first.
    pub(crate) fn slots(&self) -> &[u8] {
        &self.slots[..usize::from(self.n_slots)]
    }

    pub(crate) fn read_slots(&self) -> &[u8] {
        &self.slots[..usize::from(self.n_reads)]
    }

    pub(crate) fn write_slots(&self) -> &[u8] {
        &self.slots[usize::from(self.n_reads)..usize::from(self.n_slots)]
    }
}

/// What a scheduled unit runs: its members, and the slot of each var in the unit's `reads` and
/// `writes` lists (in their order), so that poison found on those vars can be given to members.
#[derive(Default)]
pub(crate) struct BulkBody {
    pub(crate) members: Vec<BulkMember>,
    pub(crate) read_slots: SmallVec<[u8; 4]>,
    pub(crate) write_slots: SmallVec<[u8; 4]>,
    /// Per var of the unit's `writes`, how many members write it (its version bumps).
    pub(crate) bumps: SmallVec<[u64; 4]>,
}

/// Ops fused into one scheduled unit. Only a [`BulkPusher`] makes one; engines take it whole
/// through [`Engine::push_bulk`].
pub struct BulkUnit {
    pub(crate) members: Vec<BulkMember>,
    /// Vars some member reads and none writes, and their slots.
    pub(crate) reads: VarList,
    pub(crate) read_slots: SmallVec<[u8; 4]>,
    /// Vars some member writes, their slots, and how many members write each (version bumps).
    pub(crate) writes: VarList,
    pub(crate) write_slots: SmallVec<[u8; 4]>,
    pub(crate) bumps: SmallVec<[u64; 4]>,
    pub(crate) ctx: Context,
    pub(crate) priority: i32,
}

impl BulkUnit {
    fn new() -> Self {
        BulkUnit {
            members: Vec::new(),
            reads: SmallVec::new(),
            read_slots: SmallVec::new(),
            writes: SmallVec::new(),
            write_slots: SmallVec::new(),
            bumps: SmallVec::new(),
            ctx: Context::cpu(0),
            priority: 0,
        }
    }

    /// How many ops it holds.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it holds no op.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Moves what the engine schedules into `body` (an emptied body of an earlier unit, whose
    /// member list the unit keeps for its next ops) and returns the unit's vars.
    pub(crate) fn take_into(&mut self, body: &mut BulkBody) -> (VarList, VarList) {
        body.members.clear();
        std::mem::swap(&mut self.members, &mut body.members);
        body.read_slots = std::mem::take(&mut self.read_slots);
        body.write_slots = std::mem::take(&mut self.write_slots);
        body.bumps = std::mem::take(&mut self.bumps);
        (
            std::mem::take(&mut self.reads),
            std::mem::take(&mut self.writes),
        )
    }

    /// The unit's name: its only member's, else `bulk[n]` (static for the usual sizes, so that a
    /// unit costs no allocation for its name).
    pub(crate) fn name(&self) -> Cow<'static, str> {
        const NAMES: [&str; 17] = [
            "bulk[0]", "bulk[1]", "bulk[2]", "bulk[3]", "bulk[4]", "bulk[5]", "bulk[6]", "bulk[7]",
            "bulk[8]", "bulk[9]", "bulk[10]", "bulk[11]", "bulk[12]", "bulk[13]", "bulk[14]",
            "bulk[15]", "bulk[16]",
        ];
        match self.members.len() {
            1 => self.members[0].name.clone(),
            n if n < NAMES.len() => Cow::Borrowed(NAMES[n]),
            n => Cow::Owned(format!("bulk[{n}]")),
        }
    }

    fn slot_of(&self, key: usize) -> Option<u8> {
        let find = |vars: &VarList, slots: &[u8]| {
            let i = vars.iter().position(|v| v.key() == key)?;
            Some(slots[i])
        };
        find(&self.writes, &self.write_slots).or_else(|| find(&self.reads, &self.read_slots))
    }

    fn n_slots(&self) -> usize {
        self.reads.len() + self.writes.len()
    }

    /// Whether `op` may join: same context and priority as the members so far, and room for
    /// its vars.
    fn accepts(&self, op: &Op<'_>) -> bool {
        if self.members.is_empty() {
            return true;
        }
        if op.ctx != self.ctx || op.priority != self.priority {
            return false;
        }
        let listed = op.reads.len() + op.writes.len();
        self.n_slots() + listed <= MAX_SLOTS
            || self.n_slots()
                + op.vars()
                    .filter(|v| self.slot_of(v.key()).is_none())
                    .count()
                <= MAX_SLOTS
    }

    /// Adds a checked, bulkable op that [`BulkUnit::accepts`] as the last member.
    fn add(&mut self, op: Op<'_>) {
        let UserFn::Sync(func) = op.func else {
            unreachable!("BulkPusher adds only synchronous ops");
        };
        if self.members.is_empty() {
            self.ctx = op.ctx;
            self.priority = op.priority;
        }
        let (mut reads, mut writes) = (op.reads, op.writes);
        dedup(&mut reads, &mut writes);
        // The member goes in first and its slots (bytes) are written in place: building them
        // on the stack and then copying the whole record stalls on store forwarding.
        self.members.push(BulkMember {
            name: op.name,
            func,
            vars: MemberVars {
                slots: [0; MEMBER_VARS],
                n_slots: 0,
                n_reads: 0,
            },
        });
        let n_reads = reads.len() as u8;
        for v in reads {
            let slot = self.read_slot(v);
            self.note(slot);
        }
        for v in writes {
            let slot = self.write_slot(v);
            self.note(slot);
        }
        if let Some(m) = self.members.last_mut() {
            m.vars.n_reads = n_reads;
        }
    }

    /// The slot of a var a new member reads, giving it one if the unit has not seen it.
    fn read_slot(&mut self, v: &Var) -> u8 {
        match self.slot_of(v.key()) {
            Some(slot) => slot,
            None => {
                let slot = self.n_slots() as u8;
                self.reads.push(v.clone());
                self.read_slots.push(slot);
                slot
            }
        }
    }

    /// The slot of a var a new member writes, counting the write.
    fn write_slot(&mut self, v: &Var) -> u8 {
        let key = v.key();
        if let Some(i) = self.writes.iter().position(|x| x.key() == key) {
            self.bumps[i] += 1;
            return self.write_slots[i];
        }
        // A var read by earlier members and written by this one becomes a write of the unit,
        // keeping its slot.
        let slot = match self.reads.iter().position(|x| x.key() == key) {
            Some(i) => {
                self.reads.remove(i);
                self.read_slots.remove(i)
            }
            None => self.n_slots() as u8,
        };
        self.writes.push(v.clone());
        self.write_slots.push(slot);
        self.bumps.push(1);
        slot
    }

    /// Appends a slot to the last member's.
    fn note(&mut self, slot: u8) {
        let vars = &mut self
            .members
            .last_mut()
            .expect("a member was just added")
            .vars;
        vars.slots[usize::from(vars.n_slots)] = slot;
        vars.n_slots += 1;
    }
}

/// Collects ops and pushes them as fused units. Created by `engine.bulk()`; what it still
/// holds is pushed on [`BulkPusher::flush`] and on drop.
pub struct BulkPusher<'e> {
    engine: &'e dyn Engine,
    engine_id: u64,
    size: usize,
    unit: BulkUnit,
}

impl<'e> BulkPusher<'e> {
    pub(crate) fn new(engine: &'e dyn Engine, size: usize) -> Self {
        BulkPusher {
            engine,
            engine_id: engine.id(),
            size: size.max(1),
            unit: BulkUnit::new(),
        }
    }

    /// Adds an op. A bulkable op (see [`Op::is_bulkable`]) joins the current unit, which is pushed
    /// when it is full; any other op first pushes the current unit, then itself, so push order is
    /// kept. Vars are checked here, so a foreign or dead var is reported by this call and the
    /// op is not taken.
    pub fn push(&mut self, op: Op<'_>) -> Result<(), EngineError> {
        check_vars(self.engine_id, &op.name, op.vars())?;
        if !op.is_bulkable() || self.size == 1 || op.reads.len() + op.writes.len() > MEMBER_VARS {
            self.flush()?;
            return self.engine.push(op);
        }
        if !self.unit.accepts(&op) {
            self.flush()?;
        }
        self.unit.add(op);
        if self.unit.len() >= self.size {
            self.flush()?;
        }
        Ok(())
    }

    /// Pushes the ops collected so far as one unit.
    pub fn flush(&mut self) -> Result<(), EngineError> {
        if self.unit.is_empty() {
            return Ok(());
        }
        self.engine.push_bulk(&mut self.unit)
    }

    /// How many ops are waiting for the next flush.
    pub fn pending(&self) -> usize {
        self.unit.len()
    }
}

impl Drop for BulkPusher<'_> {
    fn drop(&mut self) {
        // Every op was checked when it was added; what can still fail is reported by the ops'
        // own errors at wait time.
        let _ = self.flush();
    }
}
