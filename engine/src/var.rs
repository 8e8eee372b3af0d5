//! Versioned variables and their dependency state machine.
//!
//! Every var keeps a FIFO of the ops waiting on it. An op asks for *read* or *write* access on
//! each of its vars; it runs once every var has granted it. A var grants:
//!
//! * a read at once when no write is running and nobody is queued ahead of it (so consecutive reads
//!   run together), otherwise it queues;
//! * a write at once when nothing is running and nobody is queued, otherwise it queues.
//!
//! When the last running read or the running write completes, the var grants the head of its
//! queue: every read up to the next write, or every write up to the next read as a *run*. The
//! first write of a run is granted; the others wait in the var's `run`, and each completing
//! write of the run grants the next one itself, without taking the lock. Completed writes bump
//! the version.
//!
//! Why runs: pushers take the lock on every push. If the worker took it on every completion too,
//! a chain of writes pushed faster than it runs (the common shape: an optimizer updating one
//! weight, a loop writing one array) would move the lock's cache line between the pushing and
//! the running core twice per op. In a run the worker touches only the var's holder-side line
//! (version, poison flag, run), which pushers never write, and the lock once per run.
//!
//! Invariants (checked by the loom models in `loom_tests.rs`):
//! * `writing` implies `running_reads == 0`;
//! * a non-empty queue implies something is running (a write, or reads with a write at the head),
//!   so every queued op is eventually granted by some completion;
//! * grants happen in push order, so the order of pushes is the order of effect;
//! * `run` is non-empty only while `writing`, and only the op holding write access touches it
//!   (or whoever grants that access, under the lock, before granting it).

use std::collections::VecDeque;
use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::error::{OpFailure, Poison};
use crate::op::OpRef;

/// Ops a completion unblocked; usually none or one.
pub(crate) type Granted = smallvec::SmallVec<[OpRef; 4]>;
use crate::sync::{AtomicBool, AtomicU64, Exclusive, Mutex, MutexGuard, Ordering};

/// A handle to a versioned variable of one engine. Cloning the handle does not copy the var.
#[derive(Clone)]
pub struct Var {
    /// Taken by `drop`, which may keep the var for reuse (see `spare`).
    pub(crate) inner: ManuallyDrop<Arc<VarInner>>,
}

impl Drop for Var {
    fn drop(&mut self) {
        // SAFETY: `inner` is taken once, here, and the handle is not used afterwards.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        spare::keep(inner);
    }
}

pub(crate) struct VarInner {
    pub(crate) id: u64,
    pub(crate) engine: u64,
    /// A resource var: it orders its ops but never holds a failure (see
    /// [`Engine::new_resource_var`](crate::Engine::new_resource_var)). Fixed at creation.
    pub(crate) resource: bool,
    /// Set once, under `state`'s lock, by `delete_var`; readable without it.
    deleted: AtomicBool,
    /// What pushers lock on every push.
    state: Mutex<VarState>,
    /// What the op holding write access changes, on cache lines pushers do not write.
    held: CachePadded<Held>,
}

/// The var's holder side.
struct Held {
    /// Completed writes; changed only by the op holding write access (so a plain store loses
    /// no update), readable by anyone.
    version: AtomicU64,
    /// Mirrors `state.poison.is_some()` so that the common, healthy case costs no lock. Changed
    /// under the lock by the op holding write access, so that op may read it without the lock.
    poisoned: AtomicBool,
    /// The rest of the run of writes the var is granting, in push order.
    run: Exclusive<VecDeque<OpRef>>,
}

/// Whether an op asks for shared or exclusive access to a var.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

struct Pending {
    op: OpRef,
    access: Access,
}

/// The part of a var guarded by its lock.
pub(crate) struct VarState {
    queue: VecDeque<Pending>,
    running_reads: usize,
    writing: bool,
    /// The failure the last write left, if it failed (cleared by the next write that
    /// succeeds); it stops ops only while it has not been reported.
    poison: Option<Poison>,
}

impl Var {
    /// A fresh var; `resource`: one that never holds a failure.
    pub(crate) fn new(id: u64, engine: u64, resource: bool) -> Var {
        let fresh = VarInner {
            id,
            engine,
            resource,
            deleted: AtomicBool::new(false),
            state: Mutex::new(VarState {
                queue: VecDeque::new(),
                running_reads: 0,
                writing: false,
                poison: None,
            }),
            held: CachePadded::new(Held {
                version: AtomicU64::new(0),
                poisoned: AtomicBool::new(false),
                run: Exclusive::new(VecDeque::new()),
            }),
        };
        let inner = match spare::take() {
            Some(mut dead) => match Arc::get_mut(&mut dead) {
                Some(slot) => {
                    *slot = fresh;
                    dead
                }
                None => Arc::new(fresh),
            },
            None => Arc::new(fresh),
        };
        Var {
            inner: ManuallyDrop::new(inner),
        }
    }

    /// A number unique among the vars of its engine (used in errors and traces).
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// How many writes to this var have completed (run, failed or skipped).
    pub fn version(&self) -> u64 {
        self.inner.held.version.load(Ordering::Acquire)
    }

    /// Whether `delete_var` was called on it; a deleted var cannot be used in new ops.
    pub fn is_deleted(&self) -> bool {
        self.inner.deleted.load(Ordering::Acquire)
    }

    /// The failure poisoning this var, if any and not yet reported (without reporting it,
    /// unlike `wait_for_var`).
    pub fn poison(&self) -> Option<Arc<OpFailure>> {
        if !self.inner.maybe_poisoned() {
            return None;
        }
        let s = self.inner.state.lock();
        s.poison
            .as_ref()
            .filter(|p| p.is_live())
            .map(|p| p.root.clone())
    }

    /// The failure it holds that stops the op pushed with sequence number `seq`, if any (the
    /// healthy case costs one flag read).
    pub(crate) fn live_poison(&self, seq: u64) -> Option<Poison> {
        match self.inner.maybe_poisoned() {
            true => self.lock().poison(seq),
            false => None,
        }
    }

    /// Whether it is a resource var (made by `new_resource_var`: never poisoned).
    pub fn is_resource(&self) -> bool {
        self.inner.resource
    }

    /// Whether two handles name the same var.
    pub fn same(&self, other: &Var) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn lock(&self) -> VarGuard<'_> {
        VarGuard {
            inner: &self.inner,
            state: self.inner.state.lock(),
        }
    }

    /// A granted write has finished after `bumps` writes (an op counts one, a bulk of ops one per
    /// member that writes this var, a wait marker none). `poison` is set when it failed; a
    /// write that succeeded clears the var's poison (it holds fresh data). The caller holds
    /// write access, which passes on to the next write of a run without the lock when the
    /// write succeeded on a healthy var; otherwise the lock is taken.
    pub(crate) fn complete_write(&self, bumps: u64, poison: Option<Poison>, granted: &mut Granted) {
        if poison.is_none() && !self.inner.maybe_poisoned() && self.inner.pass_run(bumps, granted) {
            return;
        }
        self.lock().complete_write(bumps, poison, granted);
    }

    /// Address of the shared state, used to deduplicate vars cheaply.
    pub(crate) fn key(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }
}

/// Dead vars kept for reuse, as MXNet keeps its vars in an object pool. Every new NDArray makes a
/// var and every dropped one ends it, so a loop of small ops would allocate and free one per op;
/// and a var is over-aligned (its holder side has cache lines of its own), which some allocators
/// serve slowly: glibc's `posix_memalign` splits a larger chunk and frees the pieces on every
/// call. One list for every engine and thread, because a var's last handle is often dropped on a
/// worker (with a finished op) and the next var made on the pushing thread. A var is kept when
/// its last handle goes, so nothing can reach it; `Var::new` overwrites it whole.
#[cfg(not(loom))]
mod spare {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::VarInner;

    /// At most this many (256 KB).
    const MAX: usize = 1024;

    static SPARE: Mutex<Vec<Arc<VarInner>>> = Mutex::new(Vec::new());

    /// Keeps `inner` for reuse if this was its last handle and the list has room.
    pub(super) fn keep(inner: Arc<VarInner>) {
        // A stale count can only say "not last" (a handle's clone needs a live handle, and
        // only this one is left when the count is 1); `Var::new` checks uniqueness again with
        // `Arc::get_mut`, which orders every other handle's drop before the reuse.
        if Arc::strong_count(&inner) == 1 {
            let mut spare = SPARE.lock();
            if spare.len() < MAX {
                spare.push(inner);
            }
        }
    }

    /// A dead var to overwrite, if one is kept.
    pub(super) fn take() -> Option<Arc<VarInner>> {
        SPARE.lock().pop()
    }
}

/// Under loom every model run makes its own vars (their atomics belong to that run), so none is
/// kept.
#[cfg(loom)]
mod spare {
    use std::sync::Arc;

    use super::VarInner;

    pub(super) fn keep(_: Arc<VarInner>) {}

    pub(super) fn take() -> Option<Arc<VarInner>> {
        None
    }
}

impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Var#{}(v{})", self.id(), self.version())
    }
}

/// A locked var: the only way to touch its dependency state.
pub(crate) struct VarGuard<'a> {
    inner: &'a VarInner,
    state: MutexGuard<'a, VarState>,
}

impl VarGuard<'_> {
    pub(crate) fn is_deleted(&self) -> bool {
        self.inner.deleted.load(Ordering::Acquire)
    }

    pub(crate) fn mark_deleted(&mut self) {
        self.inner.deleted.store(true, Ordering::Release);
    }

    /// Whether nothing runs on the var and nothing waits for it.
    pub(crate) fn is_idle(&self) -> bool {
        let s = &*self.state;
        !s.writing && s.running_reads == 0 && s.queue.is_empty()
    }

    /// Asks for access for `op`. Returns true when granted at once; otherwise `op` is queued and
    /// will be returned by a later `complete_*` call.
    pub(crate) fn append(&mut self, op: &OpRef, access: Access) -> bool {
        let s = &mut *self.state;
        let granted = match access {
            Access::Read => !s.writing && s.queue.is_empty(),
            Access::Write => !s.writing && s.running_reads == 0 && s.queue.is_empty(),
        };
        if granted {
            match access {
                Access::Read => s.running_reads += 1,
                Access::Write => s.writing = true,
            }
            if s.poison.is_some() {
                op.mark_suspect();
            }
        } else {
            s.queue.push_back(Pending {
                op: op.clone(),
                access,
            });
        }
        granted
    }

    /// A granted read has finished; pushes the ops this unblocks onto `granted`.
    pub(crate) fn complete_read(&mut self, granted: &mut Granted) {
        let s = &mut *self.state;
        debug_assert!(s.running_reads > 0 && !s.writing);
        s.running_reads -= 1;
        if s.running_reads == 0 {
            Self::grant_head(self.inner, s, granted);
        }
    }

    /// [`Var::complete_write`] under the lock: a failed write, or the last write of a run.
    fn complete_write(&mut self, bumps: u64, poison: Option<Poison>, granted: &mut Granted) {
        let s = &mut *self.state;
        debug_assert!(s.writing && s.running_reads == 0);
        match poison.filter(|_| !self.inner.resource) {
            Some(p) => {
                s.poison = Some(p);
                self.inner.held.poisoned.store(true, Ordering::Release);
            }
            None if s.poison.is_some() => {
                s.poison = None;
                self.inner.held.poisoned.store(false, Ordering::Release);
            }
            None => {}
        }
        if !self.inner.pass_run(bumps, granted) {
            self.inner.count_writes(bumps);
            s.writing = false;
            Self::grant_head(self.inner, s, granted);
        }
    }

    /// The current poison, if it stops the op pushed with sequence number `seq`. Stable while
    /// the caller holds access to the var: only writes (exclusive) change it, and a report
    /// takes effect after the reporting wait in push order.
    pub(crate) fn poison(&self, seq: u64) -> Option<Poison> {
        self.state.poison.clone().filter(|p| p.stops(seq))
    }

    /// Removes the poison and returns it (what `wait_for_var` reports, unless a wait on another
    /// var it reached reported it already).
    pub(crate) fn take_poison(&mut self) -> Option<Poison> {
        self.inner.held.poisoned.store(false, Ordering::Release);
        self.state.poison.take()
    }

    /// Sets the poison (`Some`) or clears it (`None`: a write succeeded) directly; used by the
    /// inline engine, which has no queues.
    pub(crate) fn set_poison(&mut self, p: Option<Poison>) {
        if self.inner.resource {
            return;
        }
        self.inner
            .held
            .poisoned
            .store(p.is_some(), Ordering::Release);
        self.state.poison = p;
    }

    /// Bumps the version directly; used by the inline engine, which has no queues.
    pub(crate) fn bump(&mut self, n: u64) {
        self.inner.count_writes(n);
    }

    /// Grants the head of the queue: every read up to the next write, or the first write of a
    /// run of them, the rest going to the var's `run`. An op granted while the var is poisoned is
    /// marked so that it looks for the poison before running (the poison cannot change while it
    /// holds access: only writers set or clear it).
    fn grant_head(inner: &VarInner, s: &mut VarState, granted: &mut Granted) {
        debug_assert!(!s.writing && s.running_reads == 0);
        let poisoned = s.poison.is_some();
        let mut grant = |op: OpRef| {
            if poisoned {
                op.mark_suspect();
            }
            granted.push(op);
        };
        match s.queue.front().map(|p| p.access) {
            None => {}
            Some(Access::Write) => {
                let p = s.queue.pop_front().expect("head exists");
                s.writing = true;
                if s.queue.front().is_some_and(|p| p.access == Access::Write) {
                    // SAFETY: nobody holds write access (`writing` was false), so nobody else
                    // reaches `run`; the op granted below reaches it after this, through its
                    // wait count.
                    unsafe {
                        inner.held.run.with_mut(|run| {
                            debug_assert!(run.is_empty());
                            while s.queue.front().is_some_and(|p| p.access == Access::Write) {
                                run.push_back(s.queue.pop_front().expect("head exists").op);
                            }
                        })
                    };
                }
                grant(p.op);
            }
            Some(Access::Read) => {
                while s.queue.front().is_some_and(|p| p.access == Access::Read) {
                    let p = s.queue.pop_front().expect("head exists");
                    s.running_reads += 1;
                    grant(p.op);
                }
            }
        }
    }
}

impl VarInner {
    /// Counts `n` completed writes. Called only by the op holding write access (or the inline
    /// engine under the lock), so a plain store loses no update and costs no atomic
    /// read-modify-write.
    fn count_writes(&self, n: u64) {
        if n > 0 {
            let v = self.held.version.load(Ordering::Relaxed);
            self.held.version.store(v + n, Ordering::Release);
        }
    }

    /// Hands write access to the next write of the run, if there is one: counts the finished
    /// write's `bumps` and grants the next (marked if the var is poisoned). Returns false, having
    /// done nothing, when the run is empty. The caller holds write access.
    fn pass_run(&self, bumps: u64, granted: &mut Granted) -> bool {
        // SAFETY: the caller holds write access, so it is the one thread reaching `run`;
        // whoever reached it before granted that access, through the op's wait count.
        let Some(next) = (unsafe { self.held.run.with_mut(VecDeque::pop_front) }) else {
            return false;
        };
        self.count_writes(bumps);
        if self.maybe_poisoned() {
            next.mark_suspect();
        }
        granted.push(next);
        true
    }

    /// Cheap check used on the hot path before looking for poison under the lock.
    pub(crate) fn maybe_poisoned(&self) -> bool {
        self.held.poisoned.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{EngineBuilder, EngineKind, Op};

    /// A var whose last handle is dropped is kept and made again whole, for any engine: the new
    /// var has version 0, no poison, is not deleted and takes ops, whatever the old one was.
    #[test]
    fn a_reused_var_starts_fresh() {
        let old_engine = EngineBuilder::new(EngineKind::Naive).build();
        let v = old_engine.new_var();
        old_engine
            .push(Op::sync("write", |_| Ok(())).write(&v))
            .unwrap();
        let fail = Op::sync("fail", |_| Err("failed on purpose".into())).write(&v);
        old_engine.push(fail).unwrap();
        assert_eq!(v.version(), 2);
        assert!(v.poison().is_some());
        old_engine.delete_var(Box::new(|| {}), &v).unwrap();
        assert!(v.is_deleted());
        let key = v.key();
        drop(v);

        // Other tests drop and make vars too, so look for the old one among a few new ones
        // (all kept alive, so none goes back while looking).
        let engine = EngineBuilder::new(EngineKind::ThreadedPerDevice).build();
        let mut made = Vec::new();
        let reused = loop {
            assert!(made.len() < 4096, "the dropped var was not reused");
            let var = engine.new_var();
            if var.key() == key {
                break var;
            }
            made.push(var);
        };
        assert_eq!(reused.version(), 0);
        assert!(reused.poison().is_none());
        assert!(!reused.is_deleted());
        engine
            .push(Op::sync("write", |_| Ok(())).write(&reused))
            .unwrap();
        engine.wait_for_var(&reused).unwrap();
        assert_eq!(reused.version(), 1);
    }
}
