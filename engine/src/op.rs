//! Ops: what a user pushes ([`Op`]) and what the engine keeps while it waits ([`OpBlock`]).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;
use storage::Context;

use crate::error::{BoxError, OpFailure, OpResult};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering, TakeOnce};
use crate::var::{Access, Var};

/// How an op is scheduled (MXNet's `FnProperty`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FnProperty {
    /// Runs on the compute workers of its context.
    Normal,
    /// A copy from host to its device: runs on the copy workers.
    CopyToDevice,
    /// A copy from its device to host: runs on the copy workers.
    CopyFromDevice,
    /// Urgent CPU work (e.g. feeding data): runs on the priority worker, ahead of normal ops.
    CpuPrioritized,
    /// Only launches work (e.g. on a GPU stream) and completes through its [`Completion`]: runs
    /// at once on whichever thread made it ready, never occupying a worker.
    Async,
    /// Frees a deleted var's resources; never skipped because of poison.
    Delete,
}

/// What an op sees when it runs.
#[derive(Clone, Debug)]
pub struct RunContext {
    /// The device the op was pushed for.
    pub ctx: Context,
    /// The stream of the op's GPU, which the worker running it queues on (GPU contexts, `cuda`
    /// feature, GPU present; see [`crate::cuda`]).
    #[cfg(feature = "cuda")]
    pub stream: Option<Arc<cudarc::driver::CudaStream>>,
}

impl RunContext {
    pub(crate) fn new(ctx: Context) -> Self {
        RunContext {
            ctx,
            #[cfg(feature = "cuda")]
            stream: None,
        }
    }
}

pub(crate) type SyncFn = Box<dyn FnOnce(&RunContext) -> OpResult + Send + 'static>;
type AsyncFn = Box<dyn FnOnce(&RunContext, Completion) + Send + 'static>;

/// The work a user's op does.
pub(crate) enum UserFn {
    Sync(SyncFn),
    Async(AsyncFn),
}

/// The work a scheduled op does: a user's, or the engine's own.
pub(crate) enum OpFn {
    Sync(SyncFn),
    Async(AsyncFn),
    /// The function given to `delete_var`.
    Delete(Box<dyn FnOnce() + Send + 'static>),
    /// The marker `wait_for_var` pushes: reports and clears the var's poison.
    Wait(Arc<Oneshot>),
    /// Consecutive synchronous CPU ops fused into one scheduled unit.
    /// Boxed: a unit's body is large, and every op record would carry its size.
    Bulk(Box<crate::bulk::BulkBody>),
}

/// The vars the engine holds for a pushed op or unit.
pub(crate) type VarList = SmallVec<[Var; 4]>;

/// The vars an op names before it is pushed: borrowed, so that building and bulking an op costs
/// no reference-count traffic on its vars (the engine clones what it keeps).
pub(crate) type VarRefs<'a> = SmallVec<[&'a Var; 4]>;

/// An op to push: a closure, the vars it reads and writes, where and how it runs. It borrows
/// its vars until it is pushed, so it is built where it is pushed; a helper that makes ops
/// without vars returns `Op<'a>` for any `'a` (`fn make<'a>() -> Op<'a>`), and the caller adds
/// the vars.
///
/// ```
/// use engine::{EngineBuilder, EngineKind, Op};
/// let engine = EngineBuilder::new(EngineKind::ThreadedPerDevice).build();
/// let (a, b) = (engine.new_var(), engine.new_var());
/// engine.push(Op::sync("copy", |_| Ok(())).read(&a).write(&b)).unwrap();
/// engine.wait_for_var(&b).unwrap();
/// assert_eq!(b.version(), 1);
/// ```
pub struct Op<'a> {
    pub(crate) name: Cow<'static, str>,
    pub(crate) func: UserFn,
    /// The vars it writes, then those it reads (see [`Op::var_lists`]): one list, so that
    /// looking at both costs one check of where the list keeps its items.
    pub(crate) vars: VarRefs<'a>,
    pub(crate) n_writes: usize,
    pub(crate) ctx: Context,
    pub(crate) prop: FnProperty,
    pub(crate) priority: i32,
    pub(crate) cheap: bool,
    pub(crate) alone: bool,
}

impl<'a> Op<'a> {
    /// A synchronous op: the closure runs to completion on a worker.
    pub fn sync<F>(name: impl Into<Cow<'static, str>>, f: F) -> Op<'a>
    where
        F: FnOnce(&RunContext) -> OpResult + Send + 'static,
    {
        Op::with_fn(name.into(), UserFn::Sync(Box::new(f)))
    }

    /// An asynchronous op: the closure gets a [`Completion`] and the op is done when that is
    /// completed, from any thread, possibly long after the closure returned.
    pub fn asynchronous<F>(name: impl Into<Cow<'static, str>>, f: F) -> Op<'a>
    where
        F: FnOnce(&RunContext, Completion) + Send + 'static,
    {
        Op::with_fn(name.into(), UserFn::Async(Box::new(f)))
    }

    #[inline]
    fn with_fn(name: Cow<'static, str>, func: UserFn) -> Op<'a> {
        Op {
            name,
            func,
            vars: SmallVec::new(),
            n_writes: 0,
            ctx: Context::cpu(0),
            prop: FnProperty::Normal,
            priority: 0,
            cheap: false,
            alone: false,
        }
    }

    /// Adds a var the op reads.
    #[inline]
    pub fn read(mut self, var: &'a Var) -> Op<'a> {
        self.vars.push(var);
        self
    }

    /// Adds vars the op reads.
    pub fn reads(mut self, vars: impl IntoIterator<Item = &'a Var>) -> Op<'a> {
        vars.into_iter().for_each(|v| self.vars.push(v));
        self
    }

    /// Adds a var the op writes.
    #[inline]
    pub fn write(mut self, var: &'a Var) -> Op<'a> {
        match self.vars.len() == self.n_writes {
            true => self.vars.push(var),
            false => self.vars.insert(self.n_writes, var),
        }
        self.n_writes += 1;
        self
    }

    /// Adds vars the op writes. Cheapest before any read is added (the writes then go at the
    /// end of the list instead of being inserted before the reads).
    pub fn writes(mut self, vars: impl IntoIterator<Item = &'a Var>) -> Op<'a> {
        let before = self.vars.len();
        match before == self.n_writes {
            // Pushed one by one, as in `reads`: `extend` first asks a chained iterator for its
            // size, which walks the chain and costs more than the pushes (an op lists a var or
            // two).
            true => vars.into_iter().for_each(|v| self.vars.push(v)),
            false => self.vars.insert_many(self.n_writes, vars),
        }
        self.n_writes += self.vars.len() - before;
        self
    }

    /// Sets the device whose workers run the op (default `cpu(0)`).
    #[inline]
    pub fn on(mut self, ctx: Context) -> Op<'a> {
        self.ctx = ctx;
        self
    }

    /// Sets the scheduling property (default [`FnProperty::Normal`]).
    #[inline]
    pub fn prop(mut self, prop: FnProperty) -> Op<'a> {
        self.prop = prop;
        self
    }

    /// Sets the priority: among runnable ops of one pool, higher runs first (default 0).
    #[inline]
    pub fn priority(mut self, priority: i32) -> Op<'a> {
        self.priority = priority;
        self
    }

    /// Marks the op cheap: on a worker it takes about a microsecond and never blocks. When a cheap,
    /// normal, CPU op is runnable the moment it is pushed (every var grants it at once), a threaded
    /// engine runs it on the pushing thread instead of handing it to a worker, as TensorFlow's
    /// executor runs inexpensive kernels inline: handing over costs more than the work (the record,
    /// its closure and the vars cross between cores). An op that must wait for its vars is
    /// scheduled as usual. Off with [`crate::EngineBuilder::inline_cheap`] or
    /// `MXRS_ENGINE_INLINE_CHEAP=0`. Run at its push, it may do there what its pusher would wait
    /// for next ([`crate::running_at_push`] tells it where it runs).
    #[inline]
    pub fn cheap(mut self) -> Op<'a> {
        self.cheap = true;
        self
    }

    /// Keeps the op out of bulk units: it is pushed, and runs, as an op of its own. A unit
    /// counts its members' writes when the whole unit completes, so only an op of its own sees,
    /// when it runs, [`Var::version`]s that count every write pushed before it: an op that
    /// knows its inputs' contents by their versions (a cache of something derived from them)
    /// runs alone.
    #[inline]
    pub fn alone(mut self) -> Op<'a> {
        self.alone = true;
        self
    }

    /// The op's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the op may join a bulk unit: synchronous, normal, on a CPU context, and not
    /// [`Op::alone`].
    #[inline]
    pub fn is_bulkable(&self) -> bool {
        matches!(self.func, UserFn::Sync(_))
            && self.prop == FnProperty::Normal
            && self.ctx.is_cpu()
            && !self.alone
    }

    /// The vars it reads and those it writes, as listed (duplicates included).
    #[inline]
    pub(crate) fn var_lists(&self) -> (&[&'a Var], &[&'a Var]) {
        split_lists(&self.vars, self.n_writes)
    }
}

impl fmt::Debug for Op<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (reads, writes) = self.var_lists();
        f.debug_struct("Op")
            .field("name", &self.name)
            .field("reads", &reads)
            .field("writes", &writes)
            .field("ctx", &self.ctx)
            .field("prop", &self.prop)
            .field("priority", &self.priority)
            .field("cheap", &self.cheap)
            .finish()
    }
}

/// An op's list of vars split into its reads and its writes (listed first, `n_writes` of them).
#[inline]
pub(crate) fn split_lists<'v, 'a>(
    vars: &'v [&'a Var],
    n_writes: usize,
) -> (&'v [&'a Var], &'v [&'a Var]) {
    let (writes, reads) = vars.split_at(n_writes);
    (reads, writes)
}

/// An op's vars, each once: its writes, then the reads it does not also write ("write wins", so
/// an op never waits for itself), each kind in the order listed. Every engine, and a bulk unit,
/// takes an op's vars through this, so they all agree on what an op holds. With each var comes
/// whether the op reads it: always for a read; for a write, whether it was listed as read too
/// (an update, such as `a += b`, rather than an overwrite). An unreported failure on a var the
/// op reads stops the op; one on a var it only overwrites does not (the op replaces the data).
pub(crate) fn distinct<'v, 'a: 'v>(
    reads: &'v [&'a Var],
    writes: &'v [&'a Var],
) -> impl Iterator<Item = (&'a Var, Access, bool)> + 'v {
    let listed = |vars: &[&Var], v: &Var| vars.iter().any(|x| x.key() == v.key());
    let writes_once = (0..writes.len())
        .filter(move |&i| !listed(&writes[..i], writes[i]))
        .map(move |i| (writes[i], Access::Write, listed(reads, writes[i])));
    let reads_once = (0..reads.len())
        .filter(move |&i| !listed(writes, reads[i]) && !listed(&reads[..i], reads[i]))
        .map(move |i| (reads[i], Access::Read, true));
    writes_once.chain(reads_once)
}

impl From<UserFn> for OpFn {
    fn from(f: UserFn) -> OpFn {
        match f {
            UserFn::Sync(f) => OpFn::Sync(f),
            UserFn::Async(f) => OpFn::Async(f),
        }
    }
}

/// How many versions each written var gains when an op completes (a bulk unit's counts, one per
/// member writing the var, travel with its body and its outcome instead).
#[derive(Clone, Copy)]
pub(crate) enum Bumps {
    /// An ordinary op: one write each.
    One,
    /// An engine marker (wait, delete): no write.
    Zero,
}

impl Bumps {
    pub(crate) fn get(self) -> u64 {
        match self {
            Bumps::One => 1,
            Bumps::Zero => 0,
        }
    }
}

/// The engine's record of a pushed op while it waits for its vars and runs.
pub(crate) struct OpBlock {
    /// Grants still missing, plus one held by the pusher until every var has seen the op.
    pub(crate) wait: AtomicUsize,
    /// Taken exactly once, by the thread that runs the op.
    pub(crate) func: TakeOnce<OpFn>,
    pub(crate) reads: VarList,
    pub(crate) writes: VarList,
    pub(crate) bumps: Bumps,
    pub(crate) name: Cow<'static, str>,
    pub(crate) ctx: Context,
    pub(crate) prop: FnProperty,
    pub(crate) priority: i32,
    pub(crate) seq: u64,
    /// Pushed as [`Op::cheap`].
    pub(crate) cheap: bool,
    /// Id + 1 of a var that was deleted by a `delete_var` racing with this push (0: none).
    pub(crate) dead_var: AtomicU64,
    /// Bit `i` set: the op only overwrites `writes[i]` (does not read it), so a failure on that
    /// var does not stop it. Writes past the 64th count as read.
    pub(crate) overwrites: u64,
    /// Set when a var granted the op while poisoned, or was dead at push. Only such an op looks
    /// at its vars before running: the healthy path never reads a var's state between being
    /// granted and finishing, which would cost a cache-line transfer per var.
    pub(crate) suspect: AtomicBool,
}

pub(crate) type OpRef = Arc<OpBlock>;

impl OpBlock {
    /// Whether it is cheap bookkeeping that should run on the thread that made it ready.
    pub(crate) fn runs_inline(&self) -> bool {
        matches!(self.prop, FnProperty::Async | FnProperty::Delete)
    }

    /// The priority a pool orders it by; CPU-prioritized ops count as at least 1.
    pub(crate) fn effective_priority(&self) -> i32 {
        if self.prop == FnProperty::CpuPrioritized {
            self.priority.max(1)
        } else {
            self.priority
        }
    }

    pub(crate) fn mark_dead(&self, var_id: u64) {
        self.dead_var.store(var_id + 1, Ordering::Release);
        self.mark_suspect();
    }

    /// Called under the lock of a poisoned var granting the op. The grant's release (the
    /// `wait` count, then the hand-over to a worker) publishes it to whoever runs the op.
    pub(crate) fn mark_suspect(&self) {
        self.suspect.store(true, Ordering::Release);
    }

    /// Whether a var may stop the op from running (see `suspect`).
    pub(crate) fn is_suspect(&self) -> bool {
        self.suspect.load(Ordering::Acquire)
    }

    pub(crate) fn dead_var(&self) -> Option<u64> {
        match self.dead_var.load(Ordering::Acquire) {
            0 => None,
            n => Some(n - 1),
        }
    }
}

/// Completes an asynchronous op. Dropping it without calling [`Completion::complete`] completes
/// the op with an error, so a forgotten handle never hangs the engine.
pub struct Completion {
    done: Option<Box<dyn FnOnce(OpResult) + Send + 'static>>,
}

impl Completion {
    pub(crate) fn new(done: impl FnOnce(OpResult) + Send + 'static) -> Self {
        Completion {
            done: Some(Box::new(done)),
        }
    }

    /// Marks the op done, successfully or not. May be called from any thread.
    pub fn complete(mut self, result: OpResult) {
        if let Some(done) = self.done.take() {
            done(result);
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            let why: BoxError = if std::thread::panicking() {
                "the async op panicked before completing".into()
            } else {
                "the async op dropped its Completion without calling complete()".into()
            };
            done(Err(why));
        }
    }
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Completion")
    }
}

/// A one-shot slot a blocked caller waits on (`wait_for_var`, async ops on the inline engine).
pub(crate) struct Oneshot {
    slot: Mutex<Option<Option<Arc<OpFailure>>>>,
    cv: Condvar,
    /// Set after `slot` is filled, so a waiter can spin on it before blocking.
    #[cfg(not(loom))]
    sent: std::sync::atomic::AtomicBool,
}

impl Oneshot {
    pub(crate) fn new() -> Self {
        Oneshot {
            slot: Mutex::new(None),
            cv: Condvar::new(),
            #[cfg(not(loom))]
            sent: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub(crate) fn send(&self, value: Option<Arc<OpFailure>>) {
        *self.slot.lock() = Some(value);
        #[cfg(not(loom))]
        self.sent.store(true, std::sync::atomic::Ordering::Release);
        self.cv.notify_all();
    }

    pub(crate) fn recv(&self) -> Option<Arc<OpFailure>> {
        // A short op usually finishes within microseconds; waking from a condition variable
        // takes tens of them on a busy machine, so look for a while before blocking.
        #[cfg(not(loom))]
        for i in 0..4096u32 {
            if self.sent.load(std::sync::atomic::Ordering::Acquire) {
                break;
            }
            if i < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let mut g = self.slot.lock();
        loop {
            if let Some(v) = g.take() {
                return v;
            }
            g = self.cv.wait(g);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Reads and writes added in any order, one by one or in bulk, come back as the two lists
    /// the caller built, each in its own order.
    #[test]
    fn an_op_keeps_its_reads_and_writes_apart_in_order() {
        let v: Vec<Var> = (0..7).map(|i| Var::new(i, 1, false)).collect();
        let op = Op::sync("mixed", |_| Ok(()))
            .read(&v[0])
            .write(&v[1])
            .reads([&v[2], &v[3]])
            .writes([&v[4], &v[5]])
            .read(&v[0])
            .write(&v[6]);
        let ids = |l: &[&Var]| l.iter().map(|x| x.id()).collect::<Vec<_>>();
        let (reads, writes) = op.var_lists();
        assert_eq!(ids(reads), [0, 2, 3, 0]);
        assert_eq!(ids(writes), [1, 4, 5, 6]);
        assert_eq!(op.vars.len(), 8);
        let shown = format!("{op:?}");
        assert!(shown.contains("reads: [Var#0"), "{shown}");
        assert!(shown.contains("writes: [Var#1"), "{shown}");
    }
}
