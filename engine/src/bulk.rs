//! Bulk execution: consecutive synchronous CPU ops pushed through one [`BulkPusher`] are fused
//! into units of up to `bulk_size` ops, each scheduled once. A unit takes read access to every
//! var its members only read and write access to every var any member writes, and runs its
//! members in push order, so results, versions and errors are those of pushing them one by one.
//!
//! The pusher builds the unit as ops arrive: each op's closure and name move into the unit's
//! `Members`, its vars move into the unit's lists the first time the unit sees them and get a
//! small slot number; a member keeps only its vars' slots. An op so costs about 20 bytes that the
//! worker must read back (a third of a cache line) and no reference-count traffic beyond
//! dropping the handles the caller gave it.

use std::borrow::Cow;

use smallvec::SmallVec;
use storage::Context;

use crate::core::check_vars;
use crate::error::EngineError;
use crate::op::{distinct, split_lists, Op, SyncFn, UserFn, VarList};
use crate::var::{Access, Var};
use crate::Engine;

/// Most distinct vars in one unit (slots are `u8`); an op that would pass it starts a new unit,
/// and an op listing more vars than this is pushed alone.
const MAX_SLOTS: usize = 255;

/// A unit's ops, kept column by column so that the pusher appends a few small values per op
/// (the closure, two counts, a byte per var) and the worker reads back about a third of a cache
/// line per op, instead of a whole record each. Names are kept as runs: an op named like the op
/// before it (the usual case in a loop) adds nothing.
#[derive(Default)]
pub(crate) struct Members {
    funcs: Vec<SyncFn>,
    /// Per op, how many of its slots are reads and writes; its slots lie in `slots`, after the
    /// previous op's, writes first.
    counts: Vec<(u8, u8)>,
    slots: Vec<u8>,
    /// Each name with the index of the first op of its run.
    names: Vec<(usize, Cow<'static, str>)>,
}

impl Members {
    /// Lists with room for `n` ops of one or two vars each.
    fn with_capacity(n: usize) -> Self {
        Members {
            funcs: Vec::with_capacity(n),
            counts: Vec::with_capacity(n),
            slots: Vec::with_capacity(2 * n),
            names: Vec::with_capacity(1),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.funcs.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }

    /// Empties the lists, keeping their room.
    pub(crate) fn clear(&mut self) {
        self.funcs.clear();
        self.counts.clear();
        self.slots.clear();
        self.names.clear();
    }

    /// Starts an op: `push_slot` then appends the slots of the vars it writes, then of those it
    /// reads, and `end_op` says how many of each there were.
    fn start_op(&mut self, name: Cow<'static, str>, func: SyncFn) {
        let same = |last: &str| {
            last.len() == name.len()
                && (std::ptr::eq(last.as_ptr(), name.as_ptr()) || *last == *name)
        };
        if !self.names.last().is_some_and(|(_, last)| same(last)) {
            self.names.push((self.funcs.len(), name));
        }
        self.funcs.push(func);
    }

    fn push_slot(&mut self, slot: u8) {
        self.slots.push(slot);
    }

    /// Ends the op started last: how many of its slots are reads and writes (each fits in a
    /// byte, as a bulked op lists at most `MAX_SLOTS` vars).
    fn end_op(&mut self, reads: u8, writes: u8) {
        self.counts.push((reads, writes));
    }

    fn first_name(&self) -> Option<&Cow<'static, str>> {
        self.names.first().map(|(_, n)| n)
    }

    /// Takes the ops out in order; `clear` then empties what is left (slots and names).
    pub(crate) fn drain(&mut self) -> Drain<'_> {
        Drain {
            funcs: self.funcs.drain(..),
            counts: &self.counts,
            slots: &self.slots,
            names: &self.names,
            k: 0,
            at: 0,
            run: 0,
        }
    }
}

/// One op of a unit, as [`Members::drain`] gives it.
pub(crate) struct Member<'a> {
    pub(crate) name: &'a Cow<'static, str>,
    pub(crate) func: SyncFn,
    pub(crate) reads: &'a [u8],
    pub(crate) writes: &'a [u8],
}

impl Member<'_> {
    /// Its slots, reads first: the order in which an op's vars are searched for poison.
    pub(crate) fn slots(&self) -> impl Iterator<Item = u8> + '_ {
        self.reads.iter().chain(self.writes).copied()
    }
}

/// The iterator of [`Members::drain`]. A unit's first op always starts a name run, so every op
/// has a name.
pub(crate) struct Drain<'a> {
    funcs: std::vec::Drain<'a, SyncFn>,
    counts: &'a [(u8, u8)],
    slots: &'a [u8],
    names: &'a [(usize, Cow<'static, str>)],
    /// The next op, its first slot, and its name's run.
    k: usize,
    at: usize,
    run: usize,
}

impl<'a> Iterator for Drain<'a> {
    type Item = Member<'a>;

    fn next(&mut self) -> Option<Member<'a>> {
        let func = self.funcs.next()?;
        let (r, w) = self.counts[self.k];
        let (r, w) = (usize::from(r), usize::from(w));
        let (writes, rest) = self.slots[self.at..].split_at(w);
        self.at += r + w;
        if self
            .names
            .get(self.run + 1)
            .is_some_and(|(first, _)| *first == self.k)
        {
            self.run += 1;
        }
        self.k += 1;
        Some(Member {
            name: &self.names[self.run].1,
            func,
            reads: &rest[..r],
            writes,
        })
    }
}

/// What a scheduled unit runs: its members, and the slot of each var in the unit's `reads` and
/// `writes` lists (in their order), so that poison found on those vars can be given to members.
#[derive(Default)]
pub(crate) struct BulkBody {
    pub(crate) members: Members,
    pub(crate) read_slots: SmallVec<[u8; 4]>,
    pub(crate) write_slots: SmallVec<[u8; 4]>,
    /// Per var of the unit's `writes`, how many members write it (its version bumps).
    pub(crate) bumps: SmallVec<[u64; 4]>,
}

impl BulkBody {
    /// An empty body whose lists have room for `n` members. Its lists go to the pusher's unit
    /// for its next ops (see [`BulkUnit::take_into`]), which so do not grow op by op.
    pub(crate) fn with_capacity(n: usize) -> Self {
        BulkBody {
            members: Members::with_capacity(n),
            ..BulkBody::default()
        }
    }
}

/// Ops fused into one scheduled unit. Only a [`BulkPusher`] makes one; engines take it whole
/// through [`Engine::push_bulk`].
pub struct BulkUnit {
    pub(crate) members: Members,
    /// Every var the members list, in the order they first did; a var's index is its slot.
    /// With each, how many members write it (its version bumps; 0: only read).
    vars: Vec<(Var, u64)>,
    pub(crate) ctx: Context,
    pub(crate) priority: i32,
    /// Emptied bodies of earlier units this pusher took from its engine in one go, used before
    /// it takes more.
    #[allow(clippy::vec_box)]
    pub(crate) spare: Vec<Box<BulkBody>>,
}

impl BulkUnit {
    pub(crate) fn new() -> Self {
        BulkUnit {
            members: Members::default(),
            vars: Vec::new(),
            ctx: Context::cpu(0),
            priority: 0,
            spare: Vec::new(),
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
    /// member lists the unit keeps for its next ops) and returns the vars the unit reads (none
    /// of its members writes them) and writes.
    pub(crate) fn take_into(&mut self, body: &mut BulkBody) -> (VarList, VarList) {
        body.members.clear();
        std::mem::swap(&mut self.members, &mut body.members);
        body.read_slots.clear();
        body.write_slots.clear();
        body.bumps.clear();
        let (mut reads, mut writes) = (VarList::new(), VarList::new());
        for (slot, (v, bumps)) in self.vars.drain(..).enumerate() {
            // Slots fit in a byte: a unit holds at most `MAX_SLOTS` vars.
            let slot = slot as u8;
            if bumps == 0 {
                reads.push(v);
                body.read_slots.push(slot);
            } else {
                writes.push(v);
                body.write_slots.push(slot);
                body.bumps.push(bumps);
            }
        }
        (reads, writes)
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
            1 => self
                .members
                .first_name()
                .cloned()
                .unwrap_or(Cow::Borrowed("bulk[1]")),
            n if n < NAMES.len() => Cow::Borrowed(NAMES[n]),
            n => Cow::Owned(format!("bulk[{n}]")),
        }
    }

    /// The one rule of every pusher that fuses: a bulkable op (see [`Op::is_bulkable`]) joins
    /// this unit, which `push_unit` takes when it is full (`size` ops) or when the op cannot
    /// join it (another context or priority, no room for its vars); any other op first has
    /// the unit pushed, then goes to `push` alone, so push order is kept. Vars are checked
    /// here, so a foreign or dead var is reported by this call and the op is not taken.
    pub(crate) fn offer(
        &mut self,
        op: Op<'_>,
        size: usize,
        engine_id: u64,
        push: impl FnOnce(Op<'_>) -> Result<(), EngineError>,
        mut push_unit: impl FnMut(&mut BulkUnit) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        check_vars(engine_id, &op.name, op.vars.iter().copied())?;
        if !op.is_bulkable() || size <= 1 || op.vars.len() > MAX_SLOTS {
            if !self.is_empty() {
                push_unit(self)?;
            }
            return push(op);
        }
        let Op {
            name,
            func: UserFn::Sync(func),
            ref vars,
            n_writes,
            ctx,
            priority,
            ..
        } = op
        else {
            unreachable!("a bulkable op is synchronous");
        };
        let (reads, writes) = split_lists(vars, n_writes);
        if !self.accepts(ctx, priority, reads, writes) {
            push_unit(self)?;
        }
        if self.is_empty() {
            (self.ctx, self.priority) = (ctx, priority);
        }
        self.add(name, func, reads, writes);
        if self.len() >= size {
            push_unit(self)?;
        }
        Ok(())
    }

    fn slot_of(&self, v: &Var) -> Option<usize> {
        let key = v.key();
        self.vars.iter().position(|(x, _)| x.key() == key)
    }

    /// Whether an op on `ctx` with `priority`, listing `reads` and `writes`, may join: same
    /// context and priority as the members so far, and room for its vars.
    fn accepts(&self, ctx: Context, priority: i32, reads: &[&Var], writes: &[&Var]) -> bool {
        if self.members.is_empty() {
            return true;
        }
        if ctx != self.ctx || priority != self.priority {
            return false;
        }
        let listed = reads.len() + writes.len();
        let new = |v: &&&Var| self.slot_of(v).is_none();
        self.vars.len() + listed <= MAX_SLOTS
            || self.vars.len() + reads.iter().chain(writes).filter(new).count() <= MAX_SLOTS
    }

    /// Adds a checked, bulkable op that [`BulkUnit::accepts`] as the last member. Its vars are
    /// deduplicated here, as for any op: a var listed twice counts once, and a var both read
    /// and written is written, and listed among the member's reads too (it updates the var, so
    /// a failure on it stops the member).
    fn add(&mut self, name: Cow<'static, str>, func: SyncFn, reads: &[&Var], writes: &[&Var]) {
        self.members.start_op(name, func);
        // An op writing one var and reading nothing (a chain's usual member) needs no
        // deduplication.
        if let ([], [w]) = (reads, writes) {
            let slot = self.take_slot(w, 1);
            self.members.push_slot(slot);
            self.members.end_op(0, 1);
            return;
        }
        let (mut n_reads, mut n_writes) = (0u8, 0u8);
        // `distinct` gives the writes first; the slots of the updated ones are listed again
        // as the first reads.
        let mut updated: SmallVec<[u8; 4]> = SmallVec::new();
        for (v, access, read) in distinct(reads, writes) {
            let bumps = match access {
                Access::Read => {
                    for slot in updated.drain(..) {
                        self.members.push_slot(slot);
                        n_reads += 1;
                    }
                    n_reads += 1;
                    0
                }
                Access::Write => {
                    n_writes += 1;
                    1
                }
            };
            let slot = self.take_slot(v, bumps);
            self.members.push_slot(slot);
            if access == Access::Write && read {
                updated.push(slot);
            }
        }
        for slot in updated {
            self.members.push_slot(slot);
            n_reads += 1;
        }
        self.members.end_op(n_reads, n_writes);
    }

    /// The slot of a var a new member lists, giving it one if the unit has not seen it, and
    /// counting `bumps` more writes of it.
    fn take_slot(&mut self, v: &Var, bumps: u64) -> u8 {
        let slot = match self.slot_of(v) {
            Some(slot) => {
                self.vars[slot].1 += bumps;
                slot
            }
            None => {
                self.vars.push((v.clone(), bumps));
                self.vars.len() - 1
            }
        };
        // `accepts` kept the unit within `MAX_SLOTS` vars.
        slot as u8
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
        let engine = self.engine;
        self.unit.offer(
            op,
            self.size,
            self.engine_id,
            |op| engine.push(op),
            |u| engine.push_bulk(u),
        )
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn noop() -> SyncFn {
        Box::new(|_| Ok(()))
    }

    /// What a unit's members say, in order: name, read slots, write slots.
    type Drained = Vec<(String, Vec<u8>, Vec<u8>)>;

    fn drained(body: &mut BulkBody) -> Drained {
        let out = body
            .members
            .drain()
            .map(|m| (m.name.to_string(), m.reads.to_vec(), m.writes.to_vec()))
            .collect();
        body.members.clear();
        out
    }

    /// Names come back per op from their runs (equal names, static or owned, share a run), and
    /// each op's slots come back split into its deduplicated reads and writes, a var it both
    /// reads and writes among the writes and, first, among the reads.
    #[test]
    fn a_unit_gives_back_each_op_with_its_name_and_slots() {
        let v: Vec<Var> = (0..4).map(|i| Var::new(i, 1, false)).collect();
        let mut unit = BulkUnit::new();
        let owned = |s: &str| Cow::Owned(s.to_string());
        unit.add("a".into(), noop(), &[&v[0]], &[&v[1]]);
        unit.add("a".into(), noop(), &[&v[1], &v[1]], &[&v[2], &v[2]]);
        unit.add("b".into(), noop(), &[&v[3], &v[0]], &[&v[0]]);
        unit.add(owned("b"), noop(), &[], &[&v[1]]);
        unit.add(owned("c"), noop(), &[&v[3]], &[]);
        unit.add("a".into(), noop(), &[&v[2]], &[&v[2]]);
        assert_eq!(unit.len(), 6);
        assert_eq!(unit.members.names.len(), 4, "runs: a, b, c, a");

        let mut body = BulkBody::with_capacity(2);
        let (reads, writes) = unit.take_into(&mut body);
        // Slots in order of first sight, an op's writes before its reads: v1 = 0, v0 = 1,
        // v2 = 2, v3 = 3. v0 is written by the third op, so the unit writes v1, v0 and v2 and
        // reads only v3.
        let ids = |l: &VarList| l.iter().map(|x| x.id()).collect::<Vec<_>>();
        assert_eq!((ids(&reads), ids(&writes)), (vec![3], vec![1, 0, 2]));
        assert_eq!(body.read_slots.as_slice(), &[3]);
        assert_eq!(body.write_slots.as_slice(), &[0, 1, 2]);
        assert_eq!(body.bumps.as_slice(), &[2, 1, 2]);
        let expect = |n: &str, r: &[u8], w: &[u8]| (n.to_string(), r.to_vec(), w.to_vec());
        assert_eq!(
            drained(&mut body),
            vec![
                expect("a", &[1], &[0]),
                expect("a", &[0], &[2]),
                expect("b", &[1, 3], &[1]),
                expect("b", &[], &[0]),
                expect("c", &[3], &[]),
                expect("a", &[2], &[2]),
            ]
        );
        assert!(unit.is_empty());
        assert!(body.members.is_empty());
    }
}
