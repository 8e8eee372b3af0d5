//! Imperative bulking (`Engine::set_imperative_bulk_size`): ops are held back and scheduled as
//! one unit, yet every call that must see them does, on every engine.
#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{engines, watchdog};
use engine::{EngineKind, Op, Var};

fn counting<'a>(ran: &Arc<AtomicUsize>) -> Op<'a> {
    let ran = ran.clone();
    Op::sync("count", move |_| {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
}

/// Polls `f` for up to ten seconds.
fn eventually(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn ops_are_held_until_the_unit_is_full_or_a_wait_needs_them() {
    for e in engines() {
        let kind = e.kind();
        watchdog(&format!("{kind:?}"), 30, move || {
            assert_eq!(e.set_imperative_bulk_size(4).unwrap(), 0);
            assert_eq!(e.imperative_bulk_size(), 4);
            let (x, ran) = (e.new_var(), Arc::new(AtomicUsize::new(0)));
            for _ in 0..3 {
                e.push(counting(&ran).write(&x)).unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(
                ran.load(Ordering::SeqCst),
                0,
                "{kind:?}: three of four are held"
            );
            e.wait_for_var(&x).unwrap();
            assert_eq!(
                (ran.load(Ordering::SeqCst), x.version()),
                (3, 3),
                "{kind:?}"
            );
            // A fourth op fills the unit, which is scheduled without any wait.
            for _ in 0..4 {
                e.push(counting(&ran).write(&x)).unwrap();
            }
            eventually("a full unit runs", || ran.load(Ordering::SeqCst) == 7);
            assert_eq!(e.set_imperative_bulk_size(0).unwrap(), 4);
        });
    }
}

#[test]
fn a_held_op_is_scheduled_before_anything_that_must_follow_it() {
    for e in engines() {
        let kind = e.kind();
        watchdog(&format!("{kind:?}"), 30, move || {
            e.set_imperative_bulk_size(64).unwrap();
            let ran = Arc::new(AtomicUsize::new(0));
            // A non-fusable op (asynchronous) pushes the held ones first: it sees them done.
            let x = e.new_var();
            e.push(counting(&ran).write(&x)).unwrap();
            let (seen, r) = (Arc::new(AtomicUsize::new(0)), ran.clone());
            let s = seen.clone();
            e.push(
                Op::asynchronous("after", move |_, done| {
                    s.store(r.load(Ordering::SeqCst), Ordering::SeqCst);
                    done.complete(Ok(()));
                })
                .read(&x),
            )
            .unwrap();
            e.wait_for_all().unwrap();
            assert_eq!(seen.load(Ordering::SeqCst), 1, "{kind:?}");
            // Deleting a var runs its delete function after the held ops on it.
            let y = e.new_var();
            e.push(counting(&ran).write(&y)).unwrap();
            let (at_delete, r) = (Arc::new(AtomicUsize::new(0)), ran.clone());
            let d = at_delete.clone();
            e.delete_var(
                Box::new(move || d.store(r.load(Ordering::SeqCst), Ordering::SeqCst)),
                &y,
            )
            .unwrap();
            e.wait_for_all().unwrap();
            assert_eq!(at_delete.load(Ordering::SeqCst), 2, "{kind:?}");
            // Turning bulking off schedules what is held.
            let z = e.new_var();
            e.push(counting(&ran).write(&z)).unwrap();
            assert_eq!(e.set_imperative_bulk_size(1).unwrap(), 64);
            eventually("turning bulking off runs the held op", || {
                ran.load(Ordering::SeqCst) == 3
            });
        });
    }
}

/// A wait on another thread sees the ops this thread holds: the unit is shared, not per thread.
#[test]
fn a_wait_on_another_thread_sees_held_ops() {
    for e in engines() {
        let kind = e.kind();
        watchdog(&format!("{kind:?}"), 30, move || {
            e.set_imperative_bulk_size(16).unwrap();
            let (x, ran) = (e.new_var(), Arc::new(AtomicUsize::new(0)));
            e.push(counting(&ran).write(&x)).unwrap();
            let (e2, x2, r2) = (e.clone(), x.clone(), ran.clone());
            let waiter = std::thread::spawn(move || {
                e2.wait_for_var(&x2).unwrap();
                r2.load(Ordering::SeqCst)
            });
            assert_eq!(waiter.join().unwrap(), 1, "{kind:?}");
        });
    }
}

/// A failing held op poisons its writes as when pushed alone, and the wait reports it.
#[test]
fn a_held_failure_is_reported_at_the_wait() {
    for e in engines() {
        let kind = e.kind();
        watchdog(&format!("{kind:?}"), 30, move || {
            e.set_imperative_bulk_size(8).unwrap();
            let (x, y) = (e.new_var(), e.new_var());
            e.push(Op::sync("boom", |_| Err("bad input".into())).write(&x))
                .unwrap();
            let ran = Arc::new(AtomicUsize::new(0));
            e.push(counting(&ran).read(&x).write(&y)).unwrap();
            let err = e.wait_for_var(&y).unwrap_err().to_string();
            assert!(
                err.contains("boom") && err.contains("bad input"),
                "{kind:?}: {err}"
            );
            assert_eq!(
                ran.load(Ordering::SeqCst),
                0,
                "{kind:?}: skipped after the failure"
            );
            assert_eq!((x.version(), y.version()), (1, 1), "{kind:?}");
        });
    }
}

/// Ops running inside a held unit may push ops, delete vars and change the size (the inline
/// engine runs them on the pushing thread, under the unit's lock): no deadlock, nothing lost.
#[test]
fn ops_inside_a_held_unit_may_push_delete_and_resize() {
    for e in engines() {
        let kind = e.kind();
        watchdog(&format!("{kind:?}"), 30, move || {
            e.set_imperative_bulk_size(4).unwrap();
            let (x, y, doomed) = (e.new_var(), e.new_var(), e.new_var());
            let ran = Arc::new(AtomicUsize::new(0));
            let (tx, rx) = mpsc::channel::<()>();
            let (inner_e, inner_y, inner_ran) = (e.clone(), y.clone(), ran.clone());
            let inner_doomed = doomed.clone();
            let tx = std::sync::Mutex::new(Some(tx));
            e.push(
                Op::sync("outer", move |_| {
                    inner_e.push(counting(&inner_ran).write(&inner_y))?;
                    let tx = tx.lock().unwrap().take();
                    inner_e.delete_var(Box::new(move || drop(tx)), &inner_doomed)?;
                    inner_e.set_imperative_bulk_size(2)?;
                    Ok(())
                })
                .write(&x),
            )
            .unwrap();
            e.wait_for_var(&x).unwrap();
            e.wait_for_all().unwrap();
            assert_eq!(ran.load(Ordering::SeqCst), 1, "{kind:?}");
            let dropped = rx.recv_timeout(Duration::from_secs(10));
            assert_eq!(
                dropped,
                Err(mpsc::RecvTimeoutError::Disconnected),
                "delete ran"
            );
            assert!(doomed.is_deleted());
            assert_eq!(e.imperative_bulk_size(), 2, "{kind:?}");
        });
    }
}

/// Several threads pushing with bulking on, and the same program one by one on a fresh engine,
/// leave every var at the same version; and each thread's chain sums in its own order.
#[test]
fn several_pushers_with_bulking_lose_no_op() {
    for kind in EngineKind::ALL {
        watchdog(&format!("{kind:?}"), 60, move || {
            let e = common::engine(kind);
            e.set_imperative_bulk_size(7).unwrap();
            let shared: Arc<Var> = Arc::new(e.new_var());
            let sum = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..4)
                .map(|t| {
                    let (e, shared, sum) = (e.clone(), shared.clone(), sum.clone());
                    std::thread::spawn(move || {
                        let own = e.new_var();
                        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
                        for k in 0..2_000usize {
                            let (sum, order) = (sum.clone(), order.clone());
                            let op = Op::sync("add", move |_| {
                                sum.fetch_add(t * 10_000 + k, Ordering::SeqCst);
                                order.lock().unwrap().push(k);
                                Ok(())
                            });
                            let op = match k % 5 {
                                0 => op.write(&shared).write(&own),
                                _ => op.read(&shared).write(&own),
                            };
                            e.push(op).unwrap();
                        }
                        e.wait_for_var(&own).unwrap();
                        assert_eq!(own.version(), 2_000);
                        let order = order.lock().unwrap();
                        assert!(
                            order.windows(2).all(|w| w[0] < w[1]),
                            "thread {t} out of order"
                        );
                        assert_eq!(order.len(), 2_000);
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            e.wait_for_all().unwrap();
            let want: usize = (0..4)
                .map(|t| (0..2_000).map(|k| t * 10_000 + k).sum::<usize>())
                .sum();
            assert_eq!(sum.load(Ordering::SeqCst), want);
            assert_eq!(shared.version(), 4 * 400);
        });
    }
}
