//! A recurrence across rayon's threads: steps that each split into independent units, every
//! unit of a step needing every unit of the step before (an RNN's time steps, cut by hidden
//! units). One parallel region runs all the steps, where a region per step (a GEMM's, then the
//! gates') cost a quarter of an LSTM's time in waking and parking threads.
//!
//! The units are dealt to `R` roles (unit `u` to role `u % R`), and a role is held by one
//! thread for the whole loop, so a unit's data (an RNN unit's weights, its part of the state)
//! stays in one core's cache from step to step (units claimed from one counter by whichever
//! thread came first moved between cores every other step, and ran a third slower for it):
//!
//! ```text
//! each thread that joins, the caller included:
//!     take a free role (none left: return)
//!     for each step s:
//!         wait until done >= s * units              (every unit of the steps before)
//!             (waiting long, and a role is still free: take it, run its units of the
//!              steps before, which can only be the first)
//!         run the units of every role held, for step s; done += 1 after each
//! ```
//!
//! The wait always ends: a role that is held is run by a thread that is running, and one that
//! nobody took holds up the first step only, so the waiters take it over. The caller alone
//! runs every unit when no helper comes (the pool busy with other kernels): unlike a barrier of
//! a fixed number of threads, which two such loops sharing a pool could deadlock. `done`
//! reaching `s * units` means every unit of the steps before `s` is done: no unit of step `s`
//! or later starts before it does, so the first `s * units` units to finish are exactly those
//! of the steps before. A unit that panics marks the loop poisoned; the waiters see it and
//! stop, and rayon's scope hands the panic on.
//!
//! [`wavefront`] is the loop's one-way twin, a pipeline of two stages (two RNN layers, the
//! upper a step behind the lower): the leader runs its steps on the calling thread and never
//! waits; the follower runs step `s` on another thread once the leader has finished step `s`:
//!
//! ```text
//! caller: spawn the follower; for each step s: lead(s), led = s + 1;
//!         then follow every step itself if nobody took the follower (the pool busy)
//! follower (taken once): for each step s: wait until led > s; follow(s)
//! ```
//!
//! Where a lockstep's every step waits for its slowest unit, a wavefront's follower waits only
//! while it has caught up, and the leader never: a step that runs long on one core holds the
//! other up only when the follower has no slack left.

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How long a thread waits for a step before it takes over roles nobody took: a helper that
/// is coming wakes within tens of microseconds.
#[cfg(not(loom))]
const ADOPT_AFTER: std::time::Duration = std::time::Duration::from_micros(500);

/// One round of a wait that has looked `spins` times: a step takes microseconds, so spin a
/// little, then give the core away.
fn pause(spins: &mut u32) {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    if *spins < 256 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
    *spins = spins.saturating_add(1);
}

/// The loop's shared counters.
pub(crate) struct Counters {
    /// Units finished (release: their writes happen before a waiter's acquire load).
    done: AtomicUsize,
    /// Whether each role has its thread (taken once, for the whole loop).
    taken: Vec<AtomicBool>,
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

/// One thread's part of a loop: the roles it holds, and the loop's shape and work.
struct Holder<'c, W> {
    counters: &'c Counters,
    steps: usize,
    units: usize,
    work: &'c W,
    roles: Vec<usize>,
}

impl<W: Fn(usize, usize) + Sync> Holder<'_, W> {
    /// Runs role `r`'s units of step `s`.
    fn run(&self, r: usize, s: usize) {
        let roles = self.counters.taken.len();
        for u in (r..self.units).step_by(roles) {
            let poison = Poison(&self.counters.poisoned);
            (self.work)(s, u);
            drop(poison);
            self.counters.done.fetch_add(1, Ordering::Release);
        }
    }

    /// Waits until `s * units` units are done, taking over the roles nobody took if that
    /// takes long; false when the loop is poisoned instead.
    fn wait_for_step(&mut self, s: usize) -> bool {
        let c = self.counters;
        let count = s * self.units;
        #[cfg(not(loom))]
        let start = std::time::Instant::now();
        let mut spins = 0u32;
        while c.done.load(Ordering::Acquire) < count {
            if c.poisoned.load(Ordering::Acquire) {
                return false;
            }
            #[cfg(not(loom))]
            let adopt = spins >= 256 && start.elapsed() >= ADOPT_AFTER;
            // Loom explores taking over at every wait.
            #[cfg(loom)]
            let adopt = true;
            if adopt {
                // A free role has run no unit, so no step past the first has begun: its units
                // of step 0 are all it owes.
                while let Some(r) = c.take(0) {
                    debug_assert!(s <= 1, "role {r} free at step {s}");
                    for s0 in 0..s {
                        self.run(r, s0);
                    }
                    self.roles.push(r);
                }
            }
            pause(&mut spins);
        }
        true
    }
}

impl Counters {
    /// Counters for a loop of `roles` roles.
    pub(crate) fn new(roles: usize) -> Self {
        Counters {
            done: AtomicUsize::new(0),
            taken: (0..roles.max(1)).map(|_| AtomicBool::new(false)).collect(),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Takes the first free role from `first` on, cyclically.
    fn take(&self, first: usize) -> Option<usize> {
        let roles = self.taken.len();
        (0..roles)
            .map(|i| (first + i) % roles)
            .find(|&r| !self.taken[r].swap(true, Ordering::AcqRel))
    }

    /// Joins the loop as the holder of role `first` (or of the next free one) and runs its
    /// units step by step; returns at once when every role has its thread.
    pub(crate) fn join(
        &self,
        steps: usize,
        units: usize,
        first: usize,
        work: &(impl Fn(usize, usize) + Sync),
    ) {
        let Some(r) = self.take(first) else {
            return;
        };
        let mut holder = Holder {
            counters: self,
            steps,
            units,
            work,
            roles: vec![r],
        };
        for s in 0..holder.steps {
            if !holder.wait_for_step(s) {
                return;
            }
            for i in 0..holder.roles.len() {
                holder.run(holder.roles[i], s);
            }
        }
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
    let counters = Counters::new(threads);
    rayon::scope(|scope| {
        for role in 1..threads {
            let (counters, work) = (&counters, &work);
            scope.spawn(move |_| counters.join(steps, units, role, work));
        }
        counters.join(steps, units, 0, &work);
    });
}

/// A [`wavefront`]'s shared state.
pub(crate) struct Pipe {
    /// The leader's steps finished (release: their writes happen before the follower's
    /// acquire load).
    led: AtomicUsize,
    /// Whether a thread holds the follower.
    taken: AtomicBool,
    /// A step panicked: the follower no longer waits.
    poisoned: AtomicBool,
}

impl Pipe {
    pub(crate) fn new() -> Self {
        Pipe {
            led: AtomicUsize::new(0),
            taken: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Runs the leader's `steps` steps, publishing each as it finishes.
    pub(crate) fn lead(&self, steps: usize, lead: &(impl Fn(usize) + Sync)) {
        for s in 0..steps {
            let poison = Poison(&self.poisoned);
            lead(s);
            drop(poison);
            self.led.store(s + 1, Ordering::Release);
        }
    }

    /// Takes the follower (returns at once when another thread has it) and runs its steps,
    /// each after the leader's; stops when the pipe is poisoned.
    pub(crate) fn follow(&self, steps: usize, follow: &(impl Fn(usize) + Sync)) {
        if self.taken.swap(true, Ordering::AcqRel) {
            return;
        }
        for s in 0..steps {
            let mut spins = 0u32;
            while self.led.load(Ordering::Acquire) <= s {
                if self.poisoned.load(Ordering::Acquire) {
                    return;
                }
                pause(&mut spins);
            }
            let poison = Poison(&self.poisoned);
            follow(s);
            drop(poison);
        }
    }
}

/// Runs `lead(s)` and `follow(s)` for every step `s` of `steps`: the leader's steps in order
/// on the calling thread, the follower's in order on another of rayon's threads, `follow(s)`
/// after `lead(s)` (see the module's protocol). With no other thread the caller runs every
/// `lead` step, then every `follow` step.
pub(crate) fn wavefront(steps: usize, lead: impl Fn(usize) + Sync, follow: impl Fn(usize) + Sync) {
    if rayon::current_num_threads() <= 1 {
        (0..steps).for_each(&lead);
        (0..steps).for_each(&follow);
        return;
    }
    let pipe = Pipe::new();
    rayon::scope(|scope| {
        let (pipe, follow) = (&pipe, &follow);
        scope.spawn(move |_| pipe.follow(steps, follow));
        pipe.lead(steps, &lead);
        pipe.follow(steps, follow);
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

    /// A thread alone in a loop of three roles (its helpers never came: the pool busy) takes
    /// over the two it waits for and runs every unit once, in order.
    #[test]
    fn a_thread_alone_takes_over_the_roles_nobody_took() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (steps, units) = (6, 5);
            let log = Mutex::new(Vec::new());
            Counters::new(3).join(steps, units, 0, &|s, u| log.lock().unwrap().push((s, u)));
            let _ = tx.send(log.into_inner().unwrap());
        });
        let log = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the loop hung waiting for roles nobody took");
        let mut sorted = log.clone();
        sorted.sort();
        let all: Vec<_> = (0..6).flat_map(|s| (0..5).map(move |u| (s, u))).collect();
        assert_eq!(sorted, all, "every unit once");
        assert!(
            log.windows(2).all(|w| w[0].0 <= w[1].0),
            "steps in order: {log:?}"
        );
    }

    /// Every step of both stages runs once, each follower step after its leader step, the
    /// stages' steps in order; a follower nobody takes is run by the caller.
    #[test]
    fn a_wavefront_follows_each_step_after_its_leader() {
        for steps in [0, 1, 2, 9, 200] {
            let led: Vec<AtomicUsize> = (0..steps).map(|_| AtomicUsize::new(0)).collect();
            let log = Mutex::new(Vec::new());
            wavefront(
                steps,
                |s| {
                    led[s].fetch_add(1, Ordering::SeqCst);
                },
                |s| {
                    let seen = led[s].load(Ordering::SeqCst);
                    log.lock().unwrap().push((s, seen));
                },
            );
            let log = log.into_inner().unwrap();
            assert_eq!(
                log,
                (0..steps).map(|s| (s, 1)).collect::<Vec<_>>(),
                "{steps} steps"
            );
        }
        // No helper: the pipe's caller runs both stages.
        let pipe = Pipe::new();
        let log = Mutex::new(Vec::new());
        pipe.lead(3, &|s| log.lock().unwrap().push(("lead", s)));
        pipe.follow(3, &|s| log.lock().unwrap().push(("follow", s)));
        let want = [0, 1, 2].map(|s| ("lead", s)).into_iter();
        let want: Vec<_> = want.chain([0, 1, 2].map(|s| ("follow", s))).collect();
        assert_eq!(log.into_inner().unwrap(), want);
    }

    /// A leader step that panics ends the pipeline with its panic on the caller, not a hang
    /// of the follower waiting for the step.
    #[test]
    fn a_panicking_leader_ends_the_wavefront() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(|| {
                wavefront(
                    50,
                    |s| {
                        if s == 7 {
                            panic!("leader step 7 failed");
                        }
                    },
                    |_| {},
                )
            });
            let _ = tx.send(r.is_err());
        });
        let panicked = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the follower hung after the leader panicked");
        assert!(panicked, "the leader's panic did not reach the caller");
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

    /// Two threads run three steps of three units in two roles; unit `(s, u)` reads the whole
    /// state the step before wrote into one of two buffers and writes its own part of the
    /// other (the RNN's double-buffered hidden state). Loom checks every interleaving (the
    /// helper taking its role first or last, the caller taking it over) for a read that races
    /// a write, and the values for a unit run before the step before it finished.
    #[test]
    fn steps_see_the_whole_step_before() {
        loom::model(|| {
            const STEPS: usize = 3;
            const UNITS: usize = 3;
            let counters = Arc::new(Counters::new(2));
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
                loom::thread::spawn(move || counters.join(STEPS, UNITS, 1, &work))
            };
            counters.join(STEPS, UNITS, 0, &work);
            helper.join().unwrap();
        });
    }

    /// A two-step wavefront: the leader writes each step's cell, the follower reads it and
    /// writes its own. Loom checks every interleaving (the helper taking the follower first,
    /// late, or never, the caller then running it) for a read that races the leader's write.
    #[test]
    fn a_follower_sees_its_leaders_step() {
        loom::model(|| {
            const STEPS: usize = 2;
            struct Cells([UnsafeCell<usize>; STEPS], [UnsafeCell<usize>; STEPS]);
            // SAFETY: loom fails the model on any access to a cell that races another.
            unsafe impl Sync for Cells {}
            let cells = Arc::new(Cells(
                std::array::from_fn(|_| UnsafeCell::new(0)),
                std::array::from_fn(|_| UnsafeCell::new(0)),
            ));
            let pipe = Arc::new(Pipe::new());
            let follow = {
                let cells = cells.clone();
                move |s: usize| {
                    // SAFETY: loom checks that no write to the cell is concurrent.
                    let v = cells.0[s].with(|p| unsafe { *p });
                    assert_eq!(v, s + 1, "follower step {s} ran before its leader's");
                    // SAFETY: as above.
                    cells.1[s].with_mut(|p| unsafe { *p = v });
                }
            };
            let helper = {
                let (pipe, follow) = (pipe.clone(), follow.clone());
                loom::thread::spawn(move || pipe.follow(STEPS, &follow))
            };
            let lead = {
                let cells = cells.clone();
                // SAFETY: as above.
                move |s: usize| cells.0[s].with_mut(|p| unsafe { *p = s + 1 })
            };
            pipe.lead(STEPS, &lead);
            pipe.follow(STEPS, &follow);
            helper.join().unwrap();
            for s in 0..STEPS {
                // SAFETY: both threads are done.
                assert_eq!(cells.1[s].with(|p| unsafe { *p }), s + 1);
            }
        });
    }
}
