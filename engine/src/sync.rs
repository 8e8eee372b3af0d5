//! One place that picks the synchronization primitives: `loom`'s under `--cfg loom` (so the model
//! checker explores the very code production runs), `parking_lot` and `std` otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::thread_local;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::thread_local;

/// Orders a SeqCst read-modify-write before this thread's later SeqCst loads: already so in the
/// Rust memory model (SeqCst operations have one total order that respects program order, and
/// on x86 the locked instruction is a full barrier), so a no-op there; loom models SeqCst
/// accesses as acquire/release only, so its models get the fence they need to see it.
#[inline]
pub(crate) fn fence_after_seq_cst_rmw() {
    #[cfg(loom)]
    fence(Ordering::SeqCst);
}

/// A mutex whose `lock` cannot fail (poisoning is meaningless here: ops run outside every lock).
pub(crate) struct Mutex<T>(
    #[cfg(loom)] loom::sync::Mutex<T>,
    #[cfg(not(loom))] parking_lot::Mutex<T>,
);

#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;
#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(loom)]
        return Mutex(loom::sync::Mutex::new(value));
        #[cfg(not(loom))]
        return Mutex(parking_lot::Mutex::new(value));
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(loom)]
        return self.0.lock().unwrap_or_else(|e| e.into_inner());
        #[cfg(not(loom))]
        return self.0.lock();
    }
}

/// A condition variable paired with [`Mutex`].
pub(crate) struct Condvar(
    #[cfg(loom)] loom::sync::Condvar,
    #[cfg(not(loom))] parking_lot::Condvar,
);

impl Condvar {
    pub(crate) fn new() -> Self {
        #[cfg(loom)]
        return Condvar(loom::sync::Condvar::new());
        #[cfg(not(loom))]
        return Condvar(parking_lot::Condvar::new());
    }

    /// Blocks until notified; the guard is released while waiting and held again on return.
    #[cfg(loom)]
    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks until notified; the guard is released while waiting and held again on return.
    #[cfg(not(loom))]
    pub(crate) fn wait<'a, T>(&self, mut guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(&mut guard);
        guard
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// A value reached by one thread at a time, handed from thread to thread by the engine's own
/// release/acquire pairs (a wait count, a pool's queue) rather than by a lock of its own. Costs no
/// atomic instruction; under loom the cell checks that no two threads ever reach it concurrently.
pub(crate) struct Exclusive<T>(
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
);

// SAFETY: the value is reached only through `with_mut`, whose callers guarantee that one thread
// at a time does so, after synchronizing with whoever reached it before; the value may therefore
// be used from any thread, hence `T: Send`.
unsafe impl<T: Send> Sync for Exclusive<T> {}

impl<T> Exclusive<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(loom)]
        return Exclusive(loom::cell::UnsafeCell::new(value));
        #[cfg(not(loom))]
        return Exclusive(std::cell::UnsafeCell::new(value));
    }

    /// Runs `f` on the value.
    ///
    /// # Safety
    /// No other thread may be inside `with_mut` on this cell at the same time, and the previous
    /// call from another thread must happen before this one (through a release/acquire pair).
    pub(crate) unsafe fn with_mut<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        #[cfg(loom)]
        // SAFETY: exclusive access is the caller's promise; loom checks it.
        return self.0.with_mut(|p| f(unsafe { &mut *p }));
        #[cfg(not(loom))]
        // SAFETY: exclusive access is the caller's promise.
        return f(unsafe { &mut *self.0.get() });
    }
}

/// A value moved out once, by the one thread entitled to it: an op's record holds its closure
/// this way, and only the thread running the op takes it. Unlike a mutex it costs no atomic
/// instruction.
pub(crate) struct TakeOnce<T>(Exclusive<Option<T>>);

impl<T> TakeOnce<T> {
    pub(crate) fn new(value: T) -> Self {
        TakeOnce(Exclusive::new(Some(value)))
    }

    /// Moves the value out (`None` once taken).
    ///
    /// # Safety
    /// As for [`Exclusive::with_mut`]: no other thread may call `take` at the same time, and a
    /// call on another thread must happen before this one.
    pub(crate) unsafe fn take(&self) -> Option<T> {
        // SAFETY: the caller's promise is `with_mut`'s.
        unsafe { self.0.with_mut(Option::take) }
    }
}
