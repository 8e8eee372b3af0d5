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
