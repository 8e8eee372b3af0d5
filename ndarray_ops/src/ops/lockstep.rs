//! A recurrence across rayon's threads: steps that each split into independent units, every
//! unit of a step needing every unit of the step before (an RNN's time steps, cut by hidden
//! units). One parallel region runs all the steps, where a region per step (a GEMM's, then the
//! gates') cost a quarter of an LSTM's time in waking and parking threads.
//!
//! The protocol, for `steps x units` units numbered `s * units + u`:
//!
//! ```text
//! each thread that joins, the caller included:
//!     loop: i = next.fetch_add(1); stop when i is past the last unit
//!           wait until done >= (i / units) * units     (every unit of the steps before)
//!           run unit i; done += 1
//! ```
//!
//! Units are claimed in order, and a claimed unit is run by a thread that is running: it waits
//! only for units claimed before it, which by the same argument finish. So the wait always ends
//! whatever number of threads joins. The caller alone runs every unit when no helper comes (the
//! pool busy with other kernels): unlike a barrier of a fixed number of threads, which two such
//! loops sharing a pool could deadlock. `done` reaching `s * units` means every unit of the
//! steps before `s` is done: no unit of step `s` or later starts before it does, so the first
//! `s * units` units to finish are exactly those of the steps before. A unit that panics marks
//! the loop poisoned; the waiters see it and stop, and rayon's scope hands the panic on.

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The loop's shared counters.
pub(crate) struct Counters {
    /// The next unit to claim.
    next: AtomicUsize,
    /// Units finished (release: their writes happen before a waiter's acquire load).
    done: AtomicUsize,
    /// A unit panicked: nobody waits any longer.
    poisoned: AtomicBool,
}

/// Marks the loop poisoned when dropped during a panic (a unit that unwinds).
struct Poison<'a>(&'a AtomicBool);

impl Drop for Poison<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

impl Counters {
    pub(crate) fn new() -> Self {
        Counters {
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Claims and runs units until none is left (or another thread's unit panicked).
    pub(crate) fn drain(&self, steps: usize, units: usize, work: &(impl Fn(usize, usize) + Sync)) {
        let total = steps * units;
        loop {
            // Relaxed: the order between units comes from `done`; a claim only needs to be
            // unique.
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= total {
                return;
            }
            let (s, u) = (i / units, i % units);
            if !self.wait_for(s * units) {
                return;
            }
            let poison = Poison(&self.poisoned);
            work(s, u);
            drop(poison);
            self.done.fetch_add(1, Ordering::Release);
        }
    }

    /// Waits until `count` units are done; false when the loop is poisoned instead.
    fn wait_for(&self, count: usize) -> bool {
        let mut spins = 0u32;
        while self.done.load(Ordering::Acquire) < count {
            if self.poisoned.load(Ordering::Acquire) {
                return false;
            }
            // A step's units take microseconds: spin a little, then give the core away.
            #[cfg(loom)]
            loom::thread::yield_now();
            #[cfg(not(loom))]
            if spins < 256 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            spins = spins.saturating_add(1);
        }
        true
    }
}

/// Runs `work(step, unit)` for every unit of `steps` steps of `units` units each: a step's
/// units in parallel on up to `units` of rayon's threads, each step after every unit of the one
/// before has finished (see the module's protocol).
pub(crate) fn lockstep(steps: usize, units: usize, work: impl Fn(usize, usize) + Sync) {
    let threads = rayon::current_num_threads().min(units);
    if threads <= 1 || steps == 0 {
        for s in 0..steps {
            for u in 0..units {
                work(s, u);
            }
        }
        return;
    }
    let counters = Counters::new();
    rayon::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(|_| counters.drain(steps, units, &work));
        }
        counters.drain(steps, units, &work);
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Every unit runs once, each after every unit of the step before (checked by a log of
    /// what each unit saw), for thread counts from one to more than the units.
    #[test]
    fn every_unit_runs_once_after_the_step_before() {
        for (steps, units) in [(1, 1), (5, 1), (7, 2), (13, 3), (40, 8)] {
            let done: Vec<AtomicUsize> = (0..steps * units).map(|_| AtomicUsize::new(0)).collect();
            let late = Mutex::new(Vec::new());
            lockstep(steps, units, |s, u| {
                if s > 0
                    && done[(s - 1) * units..s * units]
                        .iter()
                        .any(|d| d.load(Ordering::SeqCst) == 0)
                {
                    late.lock().unwrap().push((s, u));
                }
                done[s * units + u].fetch_add(1, Ordering::SeqCst);
            });
            assert!(
                late.lock().unwrap().is_empty(),
                "{steps}x{units}: ran early {late:?}"
            );
            assert!(
                done.iter().all(|d| d.load(Ordering::SeqCst) == 1),
                "{steps}x{units}"
            );
        }
    }

    /// A unit that panics ends the loop with its panic on the caller, not a hang of the other
    /// threads waiting for it.
    #[test]
    fn a_panicking_unit_ends_the_loop() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(|| {
                lockstep(50, 4, |s, u| {
                    if (s, u) == (3, 1) {
                        panic!("unit (3, 1) failed");
                    }
                })
            });
            let _ = tx.send(r.is_err());
        });
        let panicked = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the loop hung after a unit panicked");
        assert!(panicked, "the unit's panic did not reach the caller");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// Two threads drain three steps of two units; unit `(s, u)` reads the whole state the
    /// step before wrote into one of two buffers and writes its own part of the other (the
    /// RNN's double-buffered hidden state). Loom checks every interleaving for a read that
    /// races a write, and the values for a unit run before the step before it finished.
    #[test]
    fn steps_see_the_whole_step_before() {
        loom::model(|| {
            const STEPS: usize = 3;
            const UNITS: usize = 2;
            let counters = Arc::new(Counters::new());
            /// The two state buffers, shared as the RNN shares its own: through unsynchronized
            /// cells whose every access loom tracks.
            struct Buffers([[UnsafeCell<usize>; UNITS]; 2]);
            // SAFETY: loom fails the model on any access to a cell that races another.
            unsafe impl Sync for Buffers {}
            let state = Arc::new(Buffers(std::array::from_fn(|_| {
                std::array::from_fn(|_| UnsafeCell::new(0))
            })));
            let work = {
                let state = state.clone();
                move |s: usize, u: usize| {
                    for cell in &state.0[s % 2] {
                        // SAFETY: loom checks that no write to the buffer is concurrent.
                        let v = cell.with(|p| unsafe { *p });
                        assert_eq!(v, s, "unit ({s}, {u}) ran before the step before finished");
                    }
                    // SAFETY: as above.
                    state.0[(s + 1) % 2][u].with_mut(|p| unsafe { *p = s + 1 });
                }
            };
            let helper = {
                let (counters, work) = (counters.clone(), work.clone());
                loom::thread::spawn(move || counters.drain(STEPS, UNITS, &work))
            };
            counters.drain(STEPS, UNITS, &work);
            helper.join().unwrap();
        });
    }
}
