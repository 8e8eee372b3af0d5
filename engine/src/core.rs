//! The dependency core of the threaded engines: pushing ops onto vars, running them when every
//! var has granted them, and completing them (poison, versions, grants, idle signal).
//!
//! Where ready ops run is left to a [`Dispatch`] (worker pools in production, a plain queue in the
//! loom models), so the models check exactly this code.
//!
//! An op's `wait` starts at (number of vars + 1). Each var that grants it takes one off; the pusher
//! takes the last one after appending to every var, so an op never starts while it is still
//! being appended. Whoever takes `wait` to zero makes the op ready.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use smallvec::SmallVec;

use crate::bulk::{BulkBody, BulkUnit};
use crate::error::{panic_message, EngineError, Failure, OpFailure, OpResult, Poison};
use crate::op::{
    distinct, Bumps, Completion, FnProperty, Op, OpBlock, OpFn, OpRef, RunContext, VarList,
};
use crate::profiler::Profiler;
use crate::sync::{fence, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering, TakeOnce};
use crate::var::{Access, Granted, Var, VarGuard};

/// Where ready ops go.
pub(crate) trait Dispatch: Send + Sync + 'static {
    /// Arranges for `core.execute(op, ..)` to be called on some worker.
    fn dispatch(&self, core: &Arc<Core>, op: OpRef);
    /// Stops and joins every worker (but the calling thread, if it is one); called once, after
    /// the engine went idle.
    fn shutdown(&self);
    /// Whether the calling thread is one of the workers `shutdown` joins.
    fn is_worker(&self) -> bool;
}

/// How a finished op leaves the vars it wrote.
pub(crate) enum Outcome {
    Ok,
    /// Every written var is poisoned with this failure.
    Poison(Poison),
    /// A bulk unit: per written var, the poison its members left and how many of them wrote it.
    Unit {
        poison: SmallVec<[Option<Poison>; 4]>,
        bumps: SmallVec<[u64; 4]>,
    },
}

pub(crate) struct Core {
    pub(crate) id: u64,
    next_var: AtomicU64,
    /// What pushers write on every op, and ops finished (written by workers), each on cache
    /// lines of its own, apart from the fields workers read on every op: a pusher and a worker
    /// would otherwise bounce one line per op. The engine is idle when `pushed` equals
    /// `finished`; `waiters` tells finishers whether anyone needs to hear that.
    pushes: CachePadded<Pushes>,
    finished: CachePadded<AtomicUsize>,
    waiters: AtomicUsize,
    idle: Mutex<()>,
    idle_cv: Condvar,
    /// Root failures not yet reported, by push order.
    failures: Mutex<BTreeMap<u64, Poison>>,
    dispatch: Box<dyn Dispatch>,
    pub(crate) profiler: Option<Arc<Profiler>>,
    /// Testing aid: each op sleeps up to this many microseconds before it runs (0: never).
    jitter_us: u64,
    /// Whether cheap ops runnable at push run on the pushing thread.
    inline_cheap: bool,
    /// Emptied bodies of finished bulk units, handed back to pushers so that a unit does not
    /// allocate (and free across threads) its body and member list every time. Boxes, because
    /// the op record holds a unit's body boxed and this hands that very allocation back.
    #[allow(clippy::vec_box)]
    spare_bodies: CachePadded<Mutex<Vec<Box<BulkBody>>>>,
}

/// The counters every push bumps.
struct Pushes {
    /// Sequence numbers: push order, which orders failures.
    next_seq: AtomicU64,
    /// Ops pushed, engine markers included.
    pushed: AtomicUsize,
}

// No `const { }` initializers: loom's `thread_local!` does not accept them.
#[allow(clippy::missing_const_for_thread_local)]
mod tls {
    use super::{Cell, Cow, RefCell};
    crate::sync::thread_local! {
    /// The op this thread is running, so that a blocking wait from inside it is refused.
    pub(super) static RUNNING: RefCell<Option<(u64, Cow<'static, str>)>> = RefCell::new(None);
    /// Ops made ready while this thread is already running inline ops; drained by the outermost
    /// call so that chains of inline ops do not grow the stack.
    pub(super) static INLINE: RefCell<Option<super::InlineQueue>> = RefCell::new(None);
    /// Finished ops a pool worker has not dropped yet (see [`super::retire`]); `None` on
    /// threads that drop them at once.
    pub(super) static RETIRED: RefCell<Option<Vec<super::OpRef>>> = RefCell::new(None);
    /// Whether this thread runs ops at their push (see [`super::running_at_push`]).
    pub(super) static AT_PUSH: Cell<bool> = Cell::new(false);
    }
}
use tls::{AT_PUSH, INLINE, RETIRED, RUNNING};

/// Whether the calling thread is running ops at their push: a cheap op that every var granted
/// when it was pushed, run by its pusher ([`crate::Op::cheap`]), and the ops that finishing it
/// makes ready there. Such a thread is the caller's, not a pool's, and would wait or push more
/// itself next; an op may do there what would hold a worker up, such as join a collective with
/// another process.
pub fn running_at_push() -> bool {
    AT_PUSH.with(Cell::get)
}

/// Marks this thread as running ops at their push until dropped, restoring the mark before.
struct AtPush(bool);

impl AtPush {
    fn enter() -> AtPush {
        AtPush(AT_PUSH.with(|a| a.replace(true)))
    }
}

impl Drop for AtPush {
    fn drop(&mut self) {
        AT_PUSH.with(|a| a.set(self.0));
    }
}

type InlineQueue = VecDeque<(Arc<Core>, OpRef)>;

/// Resets the inline queue even if something unwinds through it.
struct InlineScope;

impl Drop for InlineScope {
    fn drop(&mut self) {
        INLINE.with(|q| *q.borrow_mut() = None);
    }
}

/// Marks the running op on this thread for the duration of a user closure.
pub(crate) struct RunningScope(Option<(u64, Cow<'static, str>)>);

impl RunningScope {
    pub(crate) fn enter(engine: u64, name: Cow<'static, str>) -> Self {
        RunningScope(RUNNING.with(|r| r.borrow_mut().replace((engine, name))))
    }

    /// Names another op of the same engine as running (the next member of a bulk unit).
    fn rename(&self, name: Cow<'static, str>) {
        RUNNING.with(|r| {
            if let Some((_, running)) = r.borrow_mut().as_mut() {
                *running = name;
            }
        });
    }
}

/// The running-op marker of a bulk unit's members: entered for the first member that runs and
/// renamed only when a member's name differs from the one before (members named alike share
/// one name in the unit, so a loop's ops pay for the marker once per unit).
pub(crate) struct MemberScope<'n> {
    engine: u64,
    entered: Option<(RunningScope, &'n Cow<'static, str>)>,
}

impl<'n> MemberScope<'n> {
    pub(crate) fn new(engine: u64) -> Self {
        MemberScope {
            engine,
            entered: None,
        }
    }

    /// Marks the member named `name` as the running op. It takes the unit's own `Cow` (not a
    /// `&str`): members of one name run share it, which is what the pointer test relies on.
    #[allow(clippy::ptr_arg)]
    pub(crate) fn name(&mut self, name: &'n Cow<'static, str>) {
        match &mut self.entered {
            Some((_, last)) if std::ptr::eq(*last, name) => {}
            Some((scope, last)) => {
                scope.rename(name.clone());
                *last = name;
            }
            None => self.entered = Some((RunningScope::enter(self.engine, name.clone()), name)),
        }
    }
}

impl Drop for RunningScope {
    fn drop(&mut self) {
        let prev = self.0.take();
        RUNNING.with(|r| *r.borrow_mut() = prev);
    }
}

/// Engine ids are process-wide and never modelled by loom, so they use std directly.
static NEXT_ENGINE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub(crate) fn next_engine_id() -> u64 {
    NEXT_ENGINE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Core {
    pub(crate) fn new(
        dispatch: Box<dyn Dispatch>,
        profiler: Option<Arc<Profiler>>,
        jitter_us: u64,
        inline_cheap: bool,
    ) -> Arc<Core> {
        Arc::new(Core {
            id: next_engine_id(),
            next_var: AtomicU64::new(0),
            pushes: CachePadded::new(Pushes {
                next_seq: AtomicU64::new(0),
                pushed: AtomicUsize::new(0),
            }),
            finished: CachePadded::new(AtomicUsize::new(0)),
            waiters: AtomicUsize::new(0),
            idle: Mutex::new(()),
            idle_cv: Condvar::new(),
            failures: Mutex::new(BTreeMap::new()),
            dispatch,
            profiler,
            jitter_us,
            inline_cheap,
            spare_bodies: CachePadded::new(Mutex::new(Vec::new())),
        })
    }

    /// Sleeps a pseudo-random time of up to `jitter_us` (derived from the op's sequence number),
    /// so tests see orders of execution the scheduler rarely produces on its own.
    fn jitter(&self, seq: u64) {
        if self.jitter_us > 0 {
            // splitmix64: consecutive sequence numbers get unrelated delays.
            let mut z = seq
                .wrapping_add(self.id << 32)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            std::thread::sleep(std::time::Duration::from_micros(z % (self.jitter_us + 1)));
        }
    }

    pub(crate) fn new_var(&self, resource: bool) -> Var {
        Var::new(
            self.next_var.fetch_add(1, Ordering::Relaxed),
            self.id,
            resource,
        )
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.pushes.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Refuses vars of other engines and vars already deleted (the common, same-thread case; a
    /// delete racing with this push is caught when appending).
    pub(crate) fn check_vars<'a>(
        &self,
        op: &str,
        vars: impl Iterator<Item = &'a Var>,
    ) -> Result<(), EngineError> {
        check_vars(self.id, op, vars)
    }

    pub(crate) fn push(self: &Arc<Self>, op: Op<'_>) -> Result<(), EngineError> {
        // Cloning first takes each var's cache line for writing once; checking first would read
        // it, then have to claim it again. The lists are filled in place: returning them from a
        // helper copies them back right after writing them, which stalls on store forwarding.
        let (mut held_reads, mut held_writes) = (VarList::new(), VarList::new());
        let mut overwrites = 0u64;
        let (reads, writes) = op.var_lists();
        for (v, access, read) in distinct(reads, writes) {
            match access {
                Access::Read => held_reads.push(v.clone()),
                Access::Write => {
                    if !read && held_writes.len() < 64 {
                        overwrites |= 1 << held_writes.len();
                    }
                    held_writes.push(v.clone())
                }
            }
        }
        self.check_vars(&op.name, held_reads.iter().chain(&held_writes))?;
        let seq = self.next_seq();
        let block = OpBlock {
            wait: AtomicUsize::new(held_reads.len() + held_writes.len() + 1),
            func: TakeOnce::new(op.func.into()),
            reads: held_reads,
            writes: held_writes,
            bumps: Bumps::One,
            name: op.name,
            ctx: op.ctx,
            prop: op.prop,
            priority: op.priority,
            seq,
            cheap: op.cheap,
            dead_var: AtomicU64::new(0),
            overwrites,
            suspect: AtomicBool::new(false),
        };
        self.enqueue(Arc::new(block));
        Ok(())
    }

    /// Schedules a unit built by a [`crate::BulkPusher`] (its ops already checked), leaving it
    /// empty with a recycled member list. Members run in push order inside the unit; member `k`
    /// has sequence number `seq + k` (one reservation for the whole unit).
    pub(crate) fn push_bulk(self: &Arc<Self>, unit: &mut BulkUnit) -> Result<(), EngineError> {
        let n = unit.len();
        if n == 0 {
            return Ok(());
        }
        let name = unit.name();
        let (ctx, priority) = (unit.ctx, unit.priority);
        if unit.spare.is_empty() {
            let mut shared = self.spare_bodies.lock();
            let keep = shared.len().saturating_sub(SPARE_BATCH);
            unit.spare.extend(shared.drain(keep..));
        }
        let spare = unit.spare.pop();
        let mut body = spare.unwrap_or_else(|| Box::new(BulkBody::with_capacity(n)));
        let (reads, writes) = unit.take_into(&mut body);
        let seq = self.pushes.next_seq.fetch_add(n as u64, Ordering::Relaxed);
        let block = OpBlock {
            wait: AtomicUsize::new(reads.len() + writes.len() + 1),
            seq,
            func: TakeOnce::new(OpFn::Bulk(body)),
            reads,
            writes,
            bumps: Bumps::One,
            name,
            ctx,
            prop: FnProperty::Normal,
            priority,
            cheap: false,
            dead_var: AtomicU64::new(0),
            // A unit's members say what they read (see `execute_bulk`).
            overwrites: 0,
            suspect: AtomicBool::new(false),
        };
        self.enqueue(Arc::new(block));
        Ok(())
    }

    fn enqueue(self: &Arc<Self>, op: OpRef) {
        self.pushes.pushed.fetch_add(1, Ordering::SeqCst);
        let granted_now = append_all(&op);
        // An op every var granted at once sits in no queue, so nobody else can touch its count.
        let all_granted = granted_now == op.reads.len() + op.writes.len();
        let n = granted_now + 1;
        if all_granted || op.wait.fetch_sub(n, Ordering::AcqRel) == n {
            // Runnable at push: a cheap op runs here, unless this thread is inside an op of this
            // engine (a worker's op pushing more work keeps the pool's scheduling).
            let here = self.inline_cheap
                && op.cheap
                && op.prop == FnProperty::Normal
                && op.ctx.is_cpu()
                && !self.running_own_op();
            match here {
                true => {
                    let _at_push = AtPush::enter();
                    self.run_inline(op)
                }
                false => self.ready(op),
            }
        }
    }

    /// Takes `n` off the op's wait count and makes it ready if that was the last.
    fn release(self: &Arc<Self>, op: OpRef, n: usize) {
        if op.wait.fetch_sub(n, Ordering::AcqRel) == n {
            self.ready(op);
        }
    }

    fn ready(self: &Arc<Self>, op: OpRef) {
        if op.runs_inline() {
            self.run_inline(op);
        } else {
            self.dispatch.dispatch(self, op);
        }
    }

    /// Runs an inline op on this thread now, or queues it behind the inline op already running.
    fn run_inline(self: &Arc<Self>, op: OpRef) {
        let mut op = Some(op);
        INLINE.with(|q| {
            let mut q = q.borrow_mut();
            match q.as_mut() {
                Some(queue) => queue.push_back((self.clone(), op.take().expect("op present"))),
                None => *q = Some(VecDeque::new()),
            }
        });
        let Some(op) = op else { return };
        let _scope = InlineScope;
        let ctx = op.ctx;
        self.execute(op, &RunContext::new(ctx));
        while let Some((core, next)) = INLINE.with(|q| q.borrow_mut().as_mut()?.pop_front()) {
            let ctx = next.ctx;
            core.execute(next, &RunContext::new(ctx));
        }
    }

    /// Runs a ready op (all its vars granted) and completes it, unless it is asynchronous, in
    /// which case its [`Completion`] completes it.
    pub(crate) fn execute(self: &Arc<Self>, op: OpRef, rctx: &RunContext) {
        // SAFETY: an op becomes ready once (whoever takes its wait count to zero, or its pusher
        // when every var granted it at once) and a ready op is handed to one thread, which
        // acquired it through that count or the hand-over.
        let Some(func) = (unsafe { op.func.take() }) else {
            debug_assert!(false, "op '{}' executed twice", op.name);
            return;
        };
        match func {
            OpFn::Wait(shot) => {
                // Reports the var's failure unless a wait on another var it reached (or
                // `wait_for_all`) already did: a failure is reported once.
                let poison = op.writes[0].lock().take_poison();
                let report = poison.filter(|p| p.report(op.seq)).map(|p| {
                    self.failures.lock().retain(|_, f| !Arc::ptr_eq(f, &p));
                    p.root.clone()
                });
                self.finish(op, Outcome::Ok);
                shot.send(report);
            }
            OpFn::Delete(f) => {
                self.run_delete(op.seq, f, rctx);
                self.finish(op, Outcome::Ok);
            }
            OpFn::Sync(f) => {
                if let Some(root) = self.blocking_failure(&op) {
                    return self.finish(op, Outcome::Poison(root));
                }
                self.jitter(op.seq);
                let t0 = self.profile_start();
                let result = {
                    let _running = RunningScope::enter(self.id, op.name.clone());
                    catch_unwind(AssertUnwindSafe(|| f(rctx)))
                };
                self.profile_end(t0, &op.name, rctx);
                let outcome = self.outcome(op.seq, &op.name, result);
                self.finish(op, outcome);
            }
            OpFn::Async(f) => {
                if let Some(root) = self.blocking_failure(&op) {
                    return self.finish(op, Outcome::Poison(root));
                }
                self.jitter(op.seq);
                let t0 = self.profile_start();
                let (core, pending) = (self.clone(), op.clone());
                let ctx = rctx.clone();
                let completion = Completion::new(move |result: OpResult| {
                    core.profile_end(t0, &pending.name, &ctx);
                    let outcome = core.outcome(pending.seq, &pending.name, Ok(result));
                    core.finish(pending, outcome);
                });
                let _running = RunningScope::enter(self.id, op.name.clone());
                // A panic drops `completion` while unwinding, which completes the op with an error.
                let _ = catch_unwind(AssertUnwindSafe(|| f(rctx, completion)));
            }
            OpFn::Bulk(members) => self.execute_bulk(op, members, rctx),
        }
    }

    /// Runs a bulk unit's members in order, each exactly as if it had been pushed alone: a member
    /// is skipped when a var it reads holds an unreported failure (counting failures left by
    /// earlier members, and clearing those a later member overwrites), or when one of its vars
    /// was deleted by a racing `delete_var`. A member's reads include the vars it updates.
    fn execute_bulk(self: &Arc<Self>, op: OpRef, mut body: Box<BulkBody>, rctx: &RunContext) {
        // The failure poisoning each slot's var, grown only once there is one.
        let mut poison: SmallVec<[Option<Poison>; 4]> = SmallVec::new();
        let set = |poison: &mut SmallVec<_>, slot: u8, failure: Option<&Poison>| {
            let slot = usize::from(slot);
            if poison.len() <= slot {
                poison.resize(slot + 1, None);
            }
            poison[slot] = failure.cloned();
        };
        let mut dead: Option<(u8, Poison)> = None;
        if op.is_suspect() {
            let unit_vars = op.reads.iter().zip(&body.read_slots);
            for (v, &slot) in unit_vars.chain(op.writes.iter().zip(&body.write_slots)) {
                if let Some(p) = self.dead_failure(&op, v) {
                    dead = Some((slot, p));
                } else if let Some(p) = v.live_poison(op.seq) {
                    set(&mut poison, slot, Some(&p));
                }
            }
        }
        let of = |poison: &[Option<Poison>], slot: u8| -> Option<Poison> {
            poison.get(usize::from(slot)).cloned().flatten()
        };
        // The unit gets a trace event of its own, spanning its members' events.
        let unit_t0 = self.profile_start();
        let mut running = MemberScope::new(self.id);
        for (k, m) in body.members.drain().enumerate() {
            let seq = op.seq + k as u64;
            let dead_here = dead
                .as_ref()
                .filter(|(slot, _)| m.slots().any(|s| s == *slot));
            let root = match (dead_here, poison.is_empty()) {
                (Some((_, p)), _) => Some(p.clone()),
                (None, true) => None,
                (None, false) => m.reads.iter().find_map(|&s| of(&poison, s)),
            };
            let failure = match root {
                Some(root) => Some(root),
                None => {
                    self.jitter(seq);
                    let t0 = self.profile_start();
                    running.name(m.name);
                    let result = catch_unwind(AssertUnwindSafe(|| (m.func)(rctx)));
                    self.profile_end(t0, m.name, rctx);
                    match self.outcome(seq, m.name, result) {
                        Outcome::Poison(f) => Some(f),
                        _ => None,
                    }
                }
            };
            if failure.is_none() && poison.is_empty() {
                continue;
            }
            // A resource var never holds a failure, inside a unit as outside.
            let resource = |slot: u8| {
                let unit_writes = op.writes.iter().zip(&body.write_slots);
                unit_writes
                    .filter(|&(_, &s)| s == slot)
                    .any(|(v, _)| v.is_resource())
            };
            // A failure poisons the member's writes; a success leaves them fresh.
            for &w in m.writes {
                if failure.is_none() || !resource(w) {
                    set(&mut poison, w, failure.as_ref());
                }
            }
        }
        drop(running);
        body.members.clear();
        self.profile_end(unit_t0, &op.name, rctx);
        let poison = body.write_slots.iter().map(|&s| of(&poison, s)).collect();
        let bumps = std::mem::take(&mut body.bumps);
        {
            let mut spare = self.spare_bodies.lock();
            if spare.len() < 64 {
                spare.push(body);
            }
        }
        self.finish(op, Outcome::Unit { poison, bumps });
    }

    /// The failure that stops this op from running: a var deleted by a racing `delete_var`, or
    /// an unreported failure on a var it reads (a var it only overwrites does not stop it).
    fn blocking_failure(&self, op: &OpBlock) -> Option<Poison> {
        if !op.is_suspect() {
            return None;
        }
        let vars = op.reads.iter().chain(op.writes.iter());
        if let Some(dead) = vars.clone().find_map(|v| self.dead_failure(op, v)) {
            return Some(dead);
        }
        let updated = op.writes.iter().enumerate();
        let updated = updated.filter(|&(i, _)| i >= 64 || op.overwrites & (1 << i) == 0);
        let mut read = op.reads.iter().chain(updated.map(|(_, v)| v));
        read.find_map(|v| v.live_poison(op.seq))
    }

    /// The failure of an op whose var `v` was deleted by a `delete_var` racing with its push.
    fn dead_failure(&self, op: &OpBlock, v: &Var) -> Option<Poison> {
        let id = op.dead_var().filter(|&id| id == v.id())?;
        let message = format!("var #{id} was deleted by a delete_var that raced with this push");
        Some(self.record(op.seq, &op.name, message, false))
    }

    /// Turns what a closure returned into an outcome, recording new failures.
    fn outcome(&self, seq: u64, name: &str, result: std::thread::Result<OpResult>) -> Outcome {
        match result {
            Ok(Ok(())) => Outcome::Ok,
            Ok(Err(e)) => Outcome::Poison(self.record(seq, name, e.to_string(), false)),
            Err(panic) => Outcome::Poison(self.record(seq, name, panic_message(&*panic), true)),
        }
    }

    fn record(&self, seq: u64, op: &str, message: String, panicked: bool) -> Poison {
        let failure = Failure::new(OpFailure {
            op: op.to_string(),
            message,
            panicked,
        });
        self.failures
            .lock()
            .entry(seq)
            .or_insert_with(|| failure.clone());
        failure
    }

    /// Releases the op's vars, making ready whatever that unblocks, then drops the op.
    pub(crate) fn finish(self: &Arc<Self>, op: OpRef, outcome: Outcome) {
        let mut granted = Granted::new();
        for v in &op.reads {
            v.lock().complete_read(&mut granted);
        }
        for (i, v) in op.writes.iter().enumerate() {
            let (poison, bumps) = match &outcome {
                Outcome::Ok => (None, op.bumps.get()),
                Outcome::Poison(p) => (Some(p.clone()), op.bumps.get()),
                Outcome::Unit { poison, bumps } => (poison[i].clone(), bumps[i]),
            };
            v.complete_write(bumps, poison, &mut granted);
        }
        retire(op);
        for g in granted {
            self.release(g, 1);
        }
        // Pairs with `wait_idle`'s increment and fence: either that sees this op finished, or
        // this sees it waiting.
        let finished = self.finished.fetch_add(1, Ordering::SeqCst) + 1;
        crate::sync::fence_after_seq_cst_rmw();
        if self.waiters.load(Ordering::SeqCst) > 0
            && finished == self.pushes.pushed.load(Ordering::SeqCst)
        {
            let _g = self.idle.lock();
            self.idle_cv.notify_all();
        }
    }

    /// Marks the var deleted and runs `f` once every op appended before has finished,
    /// atomically with respect to other pushes on it: every op appended after is refused. When
    /// nothing is pending on the var, `f` runs here and now; otherwise a delete marker is appended
    /// as a writer and runs `f` when granted.
    pub(crate) fn delete_var(
        self: &Arc<Self>,
        f: Box<dyn FnOnce() + Send>,
        var: &Var,
    ) -> Result<(), EngineError> {
        self.check_vars("delete_var", std::iter::once(var))?;
        let mut f = Some(f);
        let marker = {
            let mut g = var.lock();
            if g.is_deleted() {
                return Err(EngineError::DeadVar {
                    op: "delete_var".into(),
                    var: var.id(),
                });
            }
            g.mark_deleted();
            match g.is_idle() {
                true => None,
                false => {
                    let f = OpFn::Delete(f.take().expect("not yet taken"));
                    let op = self.marker(f, var, "delete_var", FnProperty::Delete);
                    self.pushes.pushed.fetch_add(1, Ordering::SeqCst);
                    let granted = g.append(&op, Access::Write);
                    Some((op, granted))
                }
            }
        };
        match marker {
            Some((op, granted)) => self.release(op, usize::from(granted) + 1),
            // Nothing pending: run `f` now, outside the var's lock.
            None => {
                if let Some(f) = f {
                    let rctx = RunContext::new(storage::Context::cpu(0));
                    self.run_delete(self.next_seq(), f, &rctx);
                }
            }
        }
        Ok(())
    }

    /// Runs a delete function, recording a panic as a failure of the delete.
    /// A delete function runs as an op: a wait from inside it is refused, and an engine whose
    /// last handle it drops knows it is inside one of its own ops.
    fn run_delete(&self, seq: u64, f: Box<dyn FnOnce() + Send>, rctx: &RunContext) {
        let t0 = self.profile_start();
        let result = {
            let _running = RunningScope::enter(self.id, Cow::Borrowed("delete_var"));
            catch_unwind(AssertUnwindSafe(f))
        };
        if let Err(panic) = result {
            self.record(seq, "delete_var", panic_message(&*panic), true);
        }
        self.profile_end(t0, &Cow::Borrowed("delete_var"), rctx);
    }

    /// A one-var op the engine itself pushes (delete and wait markers).
    fn marker(&self, func: OpFn, var: &Var, name: &'static str, prop: FnProperty) -> OpRef {
        Arc::new(OpBlock {
            wait: AtomicUsize::new(2),
            func: TakeOnce::new(func),
            reads: SmallVec::new(),
            writes: smallvec::smallvec![var.clone()],
            bumps: Bumps::Zero,
            name: Cow::Borrowed(name),
            ctx: storage::Context::cpu(0),
            prop,
            priority: 0,
            seq: self.next_seq(),
            cheap: false,
            dead_var: AtomicU64::new(0),
            overwrites: 0,
            suspect: AtomicBool::new(false),
        })
    }

    /// Waits until every op pushed before on `var` has finished, then reports and clears its
    /// poison. The marker is exclusive (no version bump) so that later ops see the poison either
    /// entirely before or entirely after the clear, as on the inline engine.
    pub(crate) fn wait_for_var(self: &Arc<Self>, var: &Var) -> Result<(), EngineError> {
        self.refuse_inside_op("wait_for_var")?;
        self.check_vars("wait_for_var", std::iter::once(var))?;
        let shot = Arc::new(crate::op::Oneshot::new());
        let op = self.marker(
            OpFn::Wait(shot.clone()),
            var,
            "wait_for_var",
            FnProperty::Async,
        );
        let granted = {
            let mut g = var.lock();
            if g.is_deleted() {
                return Err(EngineError::DeadVar {
                    op: "wait_for_var".into(),
                    var: var.id(),
                });
            }
            self.pushes.pushed.fetch_add(1, Ordering::SeqCst);
            g.append(&op, Access::Write)
        };
        self.release(op, usize::from(granted) + 1);
        match shot.recv() {
            Some(f) => Err(EngineError::OpFailed(f)),
            None => Ok(()),
        }
    }

    /// Waits until every op pushed so far has finished; reports the earliest-pushed failure not
    /// yet reported (by `wait_for_var` or an earlier `wait_for_all`) and marks every other one
    /// reported too, so that no failure stops an op or a wait after it.
    pub(crate) fn wait_for_all(&self) -> Result<(), EngineError> {
        self.refuse_inside_op("wait_for_all")?;
        self.wait_idle();
        let failures = std::mem::take(&mut *self.failures.lock());
        // Every failure is reported now (so none stops an op pushed after this call); the
        // earliest pushed that no wait reported before is the one returned.
        let now = self.pushes.next_seq.load(Ordering::Relaxed);
        let first = failures
            .into_values()
            .filter(|f| f.report(now))
            .reduce(|first, _| first);
        match first {
            Some(f) => Err(EngineError::OpFailed(f.root.clone())),
            None => Ok(()),
        }
    }

    pub(crate) fn wait_idle(&self) {
        let mut g = self.idle.lock();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // `finished` never exceeds `pushed`, so equal readings (finished first) mean that when
        // `pushed` was read every op pushed so far had finished.
        while self.finished.load(Ordering::SeqCst) != self.pushes.pushed.load(Ordering::SeqCst) {
            g = self.idle_cv.wait(g);
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        drop(g);
    }

    /// Whether this thread is running an op of this engine (without naming it).
    pub(crate) fn running_own_op(&self) -> bool {
        RUNNING.with(|r| matches!(&*r.borrow(), Some((id, _)) if *id == self.id))
    }

    fn refuse_inside_op(&self, call: &'static str) -> Result<(), EngineError> {
        refuse_inside_op(self.id, call)
    }

    pub(crate) fn shutdown(&self) {
        self.dispatch.shutdown();
    }

    /// Whether waiting for this engine to go idle on the calling thread could wait for itself:
    /// the thread runs one of the engine's ops (a delete function included), or is a worker.
    pub(crate) fn on_own_thread(&self) -> bool {
        self.running_own_op() || self.dispatch.is_worker()
    }

    fn profile_start(&self) -> Option<u64> {
        self.profiler.as_ref().and_then(|p| p.start())
    }

    // The name as the op holds it: the profiler keeps a clone, free for a static name.
    #[allow(clippy::ptr_arg)]
    fn profile_end(&self, start: Option<u64>, name: &Cow<'static, str>, rctx: &RunContext) {
        if let (Some(p), Some(t0)) = (&self.profiler, start) {
            p.record(name, t0, rctx.ctx);
        }
    }
}

/// Appends `op` to every var it names as one step, and returns how many granted it at once.
///
/// Pushes from several threads must not interleave their appends: if op X were queued first on var
/// `a` and op Y first on var `b`, while X also waits on `b` and Y on `a`, neither would ever run.
/// So the pusher locks all of the op's vars before appending to any of them (two-phase locking),
/// taking the locks in one global order, by var id (unique within an engine, and an op's vars all
/// belong to one; an address would differ between loom's replays of a model), so that two pushers
/// never wait for each other's locks. Two pushes sharing a var are then appended to all their
/// shared vars in the same order, the order in which they locked the first shared var: the order of
/// effect on every var follows one global order of whole pushes, and every queue waits only for ops
/// earlier in that order, which cannot wait back. Completions lock one var at a time.
fn append_all(op: &OpRef) -> usize {
    let append = |g: &mut VarGuard<'_>, v: &Var, access: Access| {
        if g.is_deleted() {
            op.mark_dead(v.id());
        }
        usize::from(g.append(op, access))
    };
    // The common shapes first, without gathering the vars into a list.
    match (&op.reads[..], &op.writes[..]) {
        ([], [v]) => append(&mut v.lock(), v, Access::Write),
        ([v], []) => append(&mut v.lock(), v, Access::Read),
        ([r], [w]) => {
            let (first, second) = match r.id() < w.id() {
                true => ((r, Access::Read), (w, Access::Write)),
                false => ((w, Access::Write), (r, Access::Read)),
            };
            let (mut g1, mut g2) = (first.0.lock(), second.0.lock());
            // Both held before either is released; the first goes as soon as it has the op.
            let granted = append(&mut g1, first.0, first.1);
            drop(g1);
            granted + append(&mut g2, second.0, second.1)
        }
        (reads, writes) => {
            let reads = reads.iter().map(|v| (v, Access::Read));
            let mut vars: SmallVec<[(&Var, Access); 16]> = reads
                .chain(writes.iter().map(|v| (v, Access::Write)))
                .collect();
            vars.sort_unstable_by_key(|(v, _)| v.id());
            let guards: SmallVec<[VarGuard<'_>; 16]> = vars.iter().map(|(v, _)| v.lock()).collect();
            // Every lock is held before any is released (two-phase locking), so releasing each
            // var as soon as the op is in its queue keeps the order; a worker finishing an op
            // on that var need not wait for the appends to the vars after it.
            guards
                .into_iter()
                .zip(&vars)
                .map(|(mut g, &(v, access))| append(&mut g, v, access))
                .sum()
        }
    }
}

/// How many finished ops a pool worker holds before dropping them together.
const RETIRE_BATCH: usize = 64;

/// How many spare unit bodies a pusher takes from the engine at once. Workers hand bodies back
/// one by one to a list under a lock; a pusher taking one at a time would pull that lock's line
/// (and the list's) back from the worker's core for every unit.
const SPARE_BATCH: usize = 8;

/// Drops a finished op, or on a pool worker keeps it to drop later with others.
///
/// Dropping an op record releases its vars (a reference count on each var's first cache line)
/// and frees the record to the pusher's allocator. A worker doing that right after every op
/// writes, per op, lines the pusher is about to use again: the var it appends the next op to
/// and the allocator page it takes the next record from. Dropped in batches, consecutive
/// releases of one var and frees to one page cost one transfer together.
fn retire(op: OpRef) {
    let mut op = Some(op);
    let batch = RETIRED.with(|r| {
        let mut r = r.borrow_mut();
        let held = r.as_mut()?;
        held.extend(op.take());
        match held.len() >= RETIRE_BATCH {
            true => Some(std::mem::replace(held, Vec::with_capacity(RETIRE_BATCH))),
            false => None,
        }
    });
    // Outside the borrow, in case dropping a var ever reaches back into the engine.
    drop(batch);
    drop(op);
}

/// Makes this thread (a pool worker) drop finished ops in batches, until [`stop_retiring`].
pub(crate) fn start_retiring() {
    RETIRED.with(|r| *r.borrow_mut() = Some(Vec::with_capacity(RETIRE_BATCH)));
}

/// Drops the finished ops this thread holds (a worker about to wait for work keeps nothing alive).
pub(crate) fn flush_retired() {
    let batch = RETIRED.with(|r| r.borrow_mut().as_mut().map(std::mem::take));
    drop(batch);
}

/// Drops what this thread holds and goes back to dropping ops at once.
pub(crate) fn stop_retiring() {
    let batch = RETIRED.with(|r| r.borrow_mut().take());
    drop(batch);
}

/// Refuses a blocking `call` from inside an op (or delete function) of engine `engine`: the op
/// would wait for work queued behind itself.
pub(crate) fn refuse_inside_op(engine: u64, call: &'static str) -> Result<(), EngineError> {
    RUNNING.with(|r| match &*r.borrow() {
        Some((id, name)) if *id == engine => Err(EngineError::WaitInsideOp {
            call,
            op: name.to_string(),
        }),
        _ => Ok(()),
    })
}

/// Shared by both engines: vars must belong to the engine and be alive.
#[inline]
pub(crate) fn check_vars<'a>(
    engine: u64,
    op: &str,
    vars: impl Iterator<Item = &'a Var>,
) -> Result<(), EngineError> {
    for v in vars {
        if v.inner.engine != engine {
            return Err(EngineError::ForeignVar {
                op: op.to_string(),
                var: v.id(),
                owner: v.inner.engine,
                engine,
            });
        }
        if v.is_deleted() {
            return Err(EngineError::DeadVar {
                op: op.to_string(),
                var: v.id(),
            });
        }
    }
    Ok(())
}
