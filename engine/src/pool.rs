//! A worker pool: work-stealing deques (`crossbeam-deque`) for ordinary ops, a heap for ops with
//! a priority, and a sleep protocol that never loses a wake-up.
//!
//! Where a ready op goes: a non-zero priority goes to the heap; otherwise a worker of this pool
//! pushes it onto its own deque (the op it just unblocked usually runs next, on the same core),
//! and any other thread pushes it onto the shared injector. A worker looks, in order, at the heap
//! (positive priorities), its deque, the injector, its siblings' deques, then the heap again
//! (negative priorities).
//!
//! Sleeping: a worker with nothing to do spins briefly, then registers as a sleeper and looks once
//! more before blocking; a submitter publishes its op and then checks for sleepers. Both sides
//! order these steps with SeqCst fences, so either the worker sees the op or the submitter sees
//! the sleeper and hands it a wake-up token.

use std::cell::RefCell;
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_deque::{Injector, Steal, Stealer, Worker};
use parking_lot::{Condvar, Mutex};

use crate::core::Core;
use crate::op::{OpRef, RunContext};

static NEXT_POOL: AtomicUsize = AtomicUsize::new(1);

std::thread_local! {
    /// The pool this thread works for and its own deque.
    static LOCAL: RefCell<Option<(usize, Worker<OpRef>)>> = const { RefCell::new(None) };
}

struct Prioritized(OpRef);

impl Prioritized {
    fn key(&self) -> (i32, std::cmp::Reverse<u64>) {
        (self.0.effective_priority(), std::cmp::Reverse(self.0.seq))
    }
}

impl PartialEq for Prioritized {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Prioritized {}
impl PartialOrd for Prioritized {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Prioritized {
    /// Higher priority first; among equals, earlier pushed first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.key().cmp(&other.key())
    }
}

/// A fixed set of worker threads serving one queue.
pub(crate) struct Pool {
    id: usize,
    injector: Injector<OpRef>,
    stealers: Vec<Stealer<OpRef>>,
    heap: Mutex<BinaryHeap<Prioritized>>,
    heap_len: AtomicUsize,
    sleepers: AtomicUsize,
    /// Wake-up tokens handed to sleepers, never more than there are sleepers.
    tokens: Mutex<usize>,
    wake: Condvar,
    shutdown: AtomicBool,
}

/// How a worker finds its CUDA stream (if any) when it starts.
pub(crate) type WorkerInit = Arc<dyn Fn(usize) -> RunContext + Send + Sync>;

impl Pool {
    /// Starts `threads` workers named `{label}#{i}` that run ops with `core`.
    pub(crate) fn start(
        core: &Arc<Core>,
        label: &str,
        threads: usize,
        init: WorkerInit,
    ) -> (Arc<Pool>, Vec<JoinHandle<()>>) {
        let threads = threads.max(1);
        let workers: Vec<Worker<OpRef>> = (0..threads).map(|_| Worker::new_fifo()).collect();
        let pool = Arc::new(Pool {
            id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
            injector: Injector::new(),
            stealers: workers.iter().map(Worker::stealer).collect(),
            heap: Mutex::new(BinaryHeap::new()),
            heap_len: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            tokens: Mutex::new(0),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
        });
        let handles = workers
            .into_iter()
            .enumerate()
            .map(|(i, local)| {
                let (pool, core, init) = (pool.clone(), core.clone(), init.clone());
                std::thread::Builder::new()
                    .name(format!("{label}#{i}"))
                    .spawn(move || pool.work(i, local, &core, &*init))
                    .unwrap_or_else(|e| panic!("cannot spawn engine worker {label}#{i}: {e}"))
            })
            .collect();
        (pool, handles)
    }

    /// Queues a ready op.
    pub(crate) fn submit(&self, op: OpRef) {
        let more_than_one = if op.effective_priority() != 0 {
            self.heap.lock().push(Prioritized(op));
            self.heap_len.fetch_add(1, Ordering::SeqCst);
            true
        } else {
            let mut op = Some(op);
            let local_len = LOCAL.with(|l| match &*l.borrow() {
                Some((id, w)) if *id == self.id => {
                    w.push(op.take().expect("op present"));
                    Some(w.len())
                }
                _ => None,
            });
            match (local_len, op) {
                // Our own next op: wake a sibling only if there is more than we will take.
                (Some(len), _) => len > 1,
                (None, Some(op)) => {
                    self.injector.push(op);
                    true
                }
                (None, None) => unreachable!("an op is either pushed locally or still here"),
            }
        };
        if more_than_one {
            self.notify_one();
        }
    }

    fn notify_one(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let mut tokens = self.tokens.lock();
            if *tokens < self.sleepers.load(Ordering::SeqCst) {
                *tokens += 1;
                self.wake.notify_one();
            }
        }
    }

    /// Asks every worker to exit once it finds no work.
    pub(crate) fn stop(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        let _tokens = self.tokens.lock();
        self.wake.notify_all();
    }

    fn work(
        &self,
        index: usize,
        local: Worker<OpRef>,
        core: &Arc<Core>,
        init: &dyn Fn(usize) -> RunContext,
    ) {
        let rctx_template = init(index);
        LOCAL.with(|l| *l.borrow_mut() = Some((self.id, local)));
        crate::core::start_retiring();
        loop {
            match self.find_work(index) {
                Some(op) => {
                    let mut rctx = rctx_template.clone();
                    rctx.ctx = op.ctx;
                    core.execute(op, &rctx);
                }
                None => {
                    if !self.idle(index) {
                        break;
                    }
                }
            }
        }
        crate::core::stop_retiring();
        LOCAL.with(|l| *l.borrow_mut() = None);
    }

    fn pop_heap(&self, positive: bool) -> Option<OpRef> {
        if self.heap_len.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut heap = self.heap.lock();
        let top = heap.peek()?.0.effective_priority();
        if positive && top <= 0 {
            return None;
        }
        let op = heap.pop()?.0;
        self.heap_len.fetch_sub(1, Ordering::SeqCst);
        Some(op)
    }

    fn find_work(&self, index: usize) -> Option<OpRef> {
        if let Some(op) = self.pop_heap(true) {
            return Some(op);
        }
        let local = LOCAL.with(|l| {
            let l = l.borrow();
            let (_, w) = l.as_ref().expect("worker deque installed");
            if let Some(op) = w.pop() {
                return Some(op);
            }
            loop {
                match self.injector.steal_batch_and_pop(w) {
                    Steal::Success(op) => return Some(op),
                    Steal::Retry => continue,
                    Steal::Empty => break,
                }
            }
            let n = self.stealers.len();
            for k in 1..n {
                loop {
                    match self.stealers[(index + k) % n].steal_batch_and_pop(w) {
                        Steal::Success(op) => return Some(op),
                        Steal::Retry => continue,
                        Steal::Empty => break,
                    }
                }
            }
            None
        });
        local.or_else(|| self.pop_heap(false))
    }

    fn has_work(&self) -> bool {
        self.heap_len.load(Ordering::SeqCst) > 0
            || !self.injector.is_empty()
            || self.stealers.iter().any(|s| !s.is_empty())
    }

    /// Waits for work; returns false when the pool is shutting down and idle.
    fn idle(&self, _index: usize) -> bool {
        const SPINS: u32 = 200;
        for i in 0..SPINS {
            if self.has_work() {
                return true;
            }
            if i < SPINS / 2 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // About to sleep: keep nothing alive meanwhile.
        crate::core::flush_retired();
        let mut tokens = self.tokens.lock();
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.has_work() {
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            return true;
        }
        while *tokens == 0 && !self.shutdown.load(Ordering::SeqCst) {
            self.wake.wait(&mut tokens);
        }
        if *tokens > 0 {
            *tokens -= 1;
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        !self.shutdown.load(Ordering::SeqCst) || self.has_work()
    }
}
