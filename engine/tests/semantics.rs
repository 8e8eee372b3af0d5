//! The engine contract, checked on every engine.
#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use common::{engine, engines, watchdog};
use engine::{Context, EngineBuilder, EngineError, EngineKind, FnProperty, Op};

fn log_op(
    log: &Arc<Mutex<Vec<String>>>,
    s: &str,
) -> impl FnOnce(&engine::RunContext) -> engine::OpResult + Send + 'static {
    let (log, s) = (log.clone(), s.to_string());
    move |_| {
        log.lock().unwrap().push(s);
        Ok(())
    }
}

#[test]
fn writes_and_reads_take_effect_in_push_order() {
    watchdog("push order", 60, || {
        for e in engines() {
            let v = e.new_var();
            let log = Arc::new(Mutex::new(Vec::new()));
            for i in 0..50 {
                let name = format!("w{i}");
                e.push(Op::sync("w", log_op(&log, &name)).write(&v))
                    .unwrap();
                // A read between writes must see exactly the writes before it.
                let (l2, want) = (log.clone(), name.clone());
                e.push(
                    Op::sync("r", move |_| {
                        assert_eq!(l2.lock().unwrap().last(), Some(&want));
                        Ok(())
                    })
                    .read(&v),
                )
                .unwrap();
            }
            e.wait_for_all()
                .unwrap_or_else(|err| panic!("{:?}: {err}", e.kind()));
            let got = log.lock().unwrap().clone();
            let want: Vec<String> = (0..50).map(|i| format!("w{i}")).collect();
            assert_eq!(got, want, "{:?}", e.kind());
            assert_eq!(v.version(), 50, "{:?}", e.kind());
        }
    });
}

#[test]
fn consecutive_reads_run_concurrently() {
    watchdog("concurrent reads", 60, || {
        for kind in [EngineKind::ThreadedPooled, EngineKind::ThreadedPerDevice] {
            let e = engine(kind);
            let v = e.new_var();
            // Both reads must be running at once to pass the barrier.
            let barrier = Arc::new(Barrier::new(2));
            for _ in 0..2 {
                let b = barrier.clone();
                e.push(
                    Op::sync("read", move |_| {
                        b.wait();
                        Ok(())
                    })
                    .read(&v),
                )
                .unwrap();
            }
            e.wait_for_all().unwrap();
            assert_eq!(v.version(), 0);
        }
    });
}

#[test]
fn a_write_excludes_reads_and_writes() {
    watchdog("write exclusion", 60, || {
        for e in engines() {
            let v = e.new_var();
            let active = Arc::new(AtomicUsize::new(0));
            let violations = Arc::new(AtomicUsize::new(0));
            for i in 0..200 {
                let (a, bad) = (active.clone(), violations.clone());
                let write = i % 3 == 0;
                let op = Op::sync("op", move |_| {
                    const W: usize = 1 << 20;
                    let before = a.fetch_add(if write { W } else { 1 }, Ordering::SeqCst);
                    if (write && before != 0) || (!write && before >= W) {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                    std::thread::yield_now();
                    a.fetch_sub(if write { W } else { 1 }, Ordering::SeqCst);
                    Ok(())
                });
                e.push(if write { op.write(&v) } else { op.read(&v) })
                    .unwrap();
            }
            e.wait_for_all().unwrap();
            assert_eq!(violations.load(Ordering::SeqCst), 0, "{:?}", e.kind());
            assert_eq!(v.version(), 67);
        }
    });
}

#[test]
fn duplicate_vars_and_read_write_overlap_are_deduplicated() {
    watchdog("dedup", 30, || {
        for e in engines() {
            let (a, b) = (e.new_var(), e.new_var());
            e.push(
                Op::sync("dup", |_| Ok(()))
                    .reads([&a, &a, &b])
                    .writes([&a, &b, &b]),
            )
            .unwrap();
            e.push(Op::sync("dup2", |_| Ok(())).read(&a).read(&a))
                .unwrap();
            e.wait_for_all().unwrap();
            assert_eq!((a.version(), b.version()), (1, 1), "{:?}", e.kind());
        }
    });
}

#[test]
fn delete_var_runs_after_pending_ops_and_kills_the_var() {
    watchdog("delete", 30, || {
        for e in engines() {
            let v = e.new_var();
            let log = Arc::new(Mutex::new(Vec::new()));
            for i in 0..5 {
                let l = log.clone();
                e.push(
                    Op::sync("slow", move |_| {
                        std::thread::sleep(Duration::from_millis(2));
                        l.lock().unwrap().push(i);
                        Ok(())
                    })
                    .write(&v),
                )
                .unwrap();
            }
            let l = log.clone();
            e.delete_var(Box::new(move || l.lock().unwrap().push(99)), &v)
                .unwrap();
            assert!(v.is_deleted());
            let err = e.push(Op::sync("late", |_| Ok(())).read(&v)).unwrap_err();
            assert!(matches!(err, EngineError::DeadVar { .. }), "{err}");
            assert!(
                err.to_string().contains("late") && err.to_string().contains("deleted"),
                "{err}"
            );
            assert!(matches!(
                e.wait_for_var(&v),
                Err(EngineError::DeadVar { .. })
            ));
            assert!(matches!(
                e.delete_var(Box::new(|| ()), &v),
                Err(EngineError::DeadVar { .. })
            ));
            e.wait_for_all().unwrap();
            assert_eq!(
                *log.lock().unwrap(),
                vec![0, 1, 2, 3, 4, 99],
                "{:?}",
                e.kind()
            );
        }
    });
}

#[test]
fn failures_poison_written_vars_and_propagate() {
    watchdog("poison", 30, || {
        for e in engines() {
            let (a, b, c, other) = (e.new_var(), e.new_var(), e.new_var(), e.new_var());
            e.push(Op::sync("boom", |_| Err("disk on fire".into())).write(&a))
                .unwrap();
            let ran = Arc::new(AtomicUsize::new(0));
            let r = ran.clone();
            e.push(
                Op::sync("downstream", move |_| {
                    r.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .read(&a)
                .write(&b),
            )
            .unwrap();
            let r = ran.clone();
            e.push(
                Op::sync("healthy", move |_| {
                    r.fetch_add(10, Ordering::SeqCst);
                    Ok(())
                })
                .write(&other),
            )
            .unwrap();
            e.push(Op::sync("panics", |_| panic!("index out of range")).write(&c))
                .unwrap();

            let err = e.wait_for_var(&b).unwrap_err();
            let f = err.failure().expect("an op failure");
            assert_eq!(
                (f.op.as_str(), f.message.as_str(), f.panicked),
                ("boom", "disk on fire", false)
            );
            assert_eq!(err.to_string(), "op 'boom' failed: disk on fire");
            // Reported once: cleared for b and for every other var the failure reached.
            e.wait_for_var(&b).unwrap();
            assert!(a.poison().is_none(), "{:?}", e.kind());
            e.wait_for_var(&a).unwrap();
            let err = e.wait_for_var(&c).unwrap_err();
            assert!(
                err.failure().unwrap().panicked && err.to_string().contains("index out of range")
            );
            // 'boom' was reported through b; nothing else is unreported.
            e.wait_for_all().unwrap();
            assert_eq!(
                ran.load(Ordering::SeqCst),
                10,
                "{:?}: downstream must be skipped",
                e.kind()
            );
            assert_eq!(b.version(), 1, "a skipped write still completes");
            // The engine keeps serving.
            e.push(Op::sync("after", |_| Ok(())).write(&other)).unwrap();
            e.wait_for_var(&other).unwrap();
            assert_eq!(other.version(), 2);
        }
    });
}

/// A resource var orders its ops but never holds a failure: a failing op poisons its other
/// writes, and the next op on the resource runs — pushed alone, or later in the same bulk unit.
#[test]
fn failures_do_not_poison_resource_vars() {
    watchdog("resource vars", 30, || {
        for e in engines() {
            let (res, out, log) = (
                e.new_resource_var(),
                e.new_var(),
                Arc::new(Mutex::new(vec![])),
            );
            assert!(res.is_resource() && !out.is_resource());
            e.push(
                Op::sync("fails", |_| Err("bad input".into()))
                    .write(&out)
                    .write(&res),
            )
            .unwrap();
            e.push(Op::sync("next", log_op(&log, "next")).write(&res))
                .unwrap();
            e.wait_for_var(&res).unwrap();
            assert_eq!(*log.lock().unwrap(), ["next"], "{:?}", e.kind());
            assert_eq!(res.version(), 2, "both writes count");
            let err = e.wait_for_var(&out).unwrap_err();
            assert_eq!(err.failure().map(|f| f.op.as_str()), Some("fails"));

            let other = e.new_var();
            let mut bulk = e.bulk();
            bulk.push(
                Op::sync("fails", |_| Err("bad input".into()))
                    .write(&other)
                    .write(&res),
            )
            .unwrap();
            bulk.push(Op::sync("bulked next", log_op(&log, "bulked next")).write(&res))
                .unwrap();
            bulk.push(Op::sync("behind the failure", log_op(&log, "skipped")).read(&other))
                .unwrap();
            bulk.flush().unwrap();
            e.wait_for_var(&res).unwrap();
            assert_eq!(
                *log.lock().unwrap(),
                ["next", "bulked next"],
                "{:?}",
                e.kind()
            );
            assert!(e.wait_for_var(&other).is_err());
            e.wait_for_all().unwrap();
        }
    });
}

#[test]
fn wait_for_all_reports_the_earliest_unreported_failure() {
    watchdog("wait_for_all", 30, || {
        for e in engines() {
            let vars: Vec<_> = (0..4).map(|_| e.new_var()).collect();
            for (i, v) in vars.iter().enumerate() {
                e.push(
                    Op::sync(format!("fail{i}"), move |_| {
                        std::thread::sleep(Duration::from_millis(4 - i as u64));
                        Err(format!("#{i}").into())
                    })
                    .write(v),
                )
                .unwrap();
            }
            let err = e.wait_for_all().unwrap_err();
            assert_eq!(err.failure().unwrap().op, "fail0", "{:?}", e.kind());
            e.wait_for_all().unwrap();
            // wait_for_all reported every failure: none is raised again.
            for v in &vars {
                e.wait_for_var(v).unwrap();
            }
        }
    });
}

#[test]
fn async_ops_complete_from_other_threads() {
    watchdog("async", 30, || {
        for e in engines() {
            let v = e.new_var();
            let seen = Arc::new(AtomicUsize::new(0));
            for i in 0..20 {
                let s = seen.clone();
                e.push(
                    Op::asynchronous("remote", move |_, done| {
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_micros(200));
                            // Ordered: each write sees all earlier ones.
                            assert_eq!(s.fetch_add(1, Ordering::SeqCst), i);
                            done.complete(Ok(()));
                        });
                    })
                    .write(&v),
                )
                .unwrap();
            }
            e.wait_for_var(&v).unwrap();
            assert_eq!(seen.load(Ordering::SeqCst), 20);
            assert_eq!(v.version(), 20);
            // A forgotten completion is an error, not a hang.
            e.push(Op::asynchronous("forgot", |_, done| drop(done)).write(&v))
                .unwrap();
            let err = e.wait_for_var(&v).unwrap_err();
            assert!(
                err.to_string().contains("without calling complete"),
                "{err}"
            );
            e.push(
                Op::asynchronous("failed", |_, done| done.complete(Err("dma error".into())))
                    .prop(FnProperty::Async)
                    .write(&v),
            )
            .unwrap();
            assert_eq!(
                e.wait_for_var(&v).unwrap_err().to_string(),
                "op 'failed' failed: dma error"
            );
        }
    });
}

#[test]
fn higher_priority_runs_first_on_a_busy_pool() {
    watchdog("priority", 30, || {
        for kind in [EngineKind::ThreadedPooled, EngineKind::ThreadedPerDevice] {
            let e = EngineBuilder::new(kind)
                .pooled_workers(1)
                .cpu_workers(1)
                .build();
            // Every worker that could run the ops below waits at the gate until all are pushed:
            // the compute worker, and on the per-device engine the priority worker too (else it
            // may take 'high' before 'higher' is pushed). The ops are pushed only once both are
            // inside their gate op: a worker that had not yet taken it would take 'high' first,
            // as higher than the gate's priority (seen on a 16-core machine, and under Miri).
            let gated = match kind {
                EngineKind::ThreadedPerDevice => [0, 1].as_slice(),
                _ => [0].as_slice(),
            };
            let gate = Arc::new(Barrier::new(gated.len() + 1));
            let (entered, at_gate) = std::sync::mpsc::channel();
            for &prio in gated {
                let (g, entered) = (gate.clone(), entered.clone());
                e.push(
                    Op::sync("gate", move |_| {
                        entered.send(()).unwrap();
                        g.wait();
                        Ok(())
                    })
                    .priority(prio),
                )
                .unwrap();
            }
            for _ in gated {
                at_gate.recv().unwrap();
            }
            let order = Arc::new(Mutex::new(Vec::new()));
            for (name, prio) in [("low", -1), ("normal", 0), ("high", 5), ("higher", 9)] {
                let o = order.clone();
                e.push(
                    Op::sync(name, move |_| {
                        o.lock().unwrap().push(name);
                        Ok(())
                    })
                    .priority(prio),
                )
                .unwrap();
            }
            gate.wait();
            e.wait_for_all().unwrap();
            let order = order.lock().unwrap().clone();
            // On the per-device engine positive priorities run on the priority worker, so only
            // their order among themselves and against 'low' is fixed.
            let pos = |n| order.iter().position(|x| *x == n).unwrap();
            assert!(pos("higher") < pos("high"), "{kind:?}: {order:?}");
            assert!(pos("normal") < pos("low"), "{kind:?}: {order:?}");
            if kind == EngineKind::ThreadedPooled {
                assert_eq!(order, ["higher", "high", "normal", "low"]);
            }
        }
    });
}

#[test]
fn waiting_inside_an_op_is_an_error_not_a_deadlock() {
    watchdog("wait inside op", 30, || {
        for kind in EngineKind::ALL {
            let e = engine(kind);
            let v = e.new_var();
            // Owned names, so that the refusal shows the running op's own name, not a copy
            // made when it was pushed; once pushed alone, once as a member of a bulk unit.
            for (k, bulked) in [false, true].into_iter().enumerate() {
                let (e2, v2) = (e.clone(), v.clone());
                let name = format!("impatient #{k}");
                let op = Op::sync(name.clone(), move |_| {
                    let err = e2.wait_for_var(&v2).unwrap_err();
                    assert!(matches!(err, EngineError::WaitInsideOp { .. }), "{err}");
                    Err(err.into())
                })
                .write(&v);
                match bulked {
                    false => e.push(op).unwrap(),
                    true => {
                        let mut bulk = e.bulk_with(4);
                        bulk.push(Op::sync("before", |_| Ok(())).write(&v)).unwrap();
                        bulk.push(op).unwrap();
                    }
                }
                let err = e.wait_for_var(&v).unwrap_err().to_string();
                assert!(err.contains("would wait for itself"), "{err}");
                assert!(err.contains(&format!("inside op '{name}'")), "{err}");
            }
        }
    });
}

#[test]
fn waiting_inside_a_delete_function_is_an_error_not_a_deadlock() {
    watchdog("wait inside delete", 30, || {
        for kind in EngineKind::ALL {
            for pending in [false, true] {
                let e = engine(kind);
                let v = e.new_var();
                if pending {
                    // The delete function then runs on a worker, after this op.
                    let slow = Op::sync("slow", |_| {
                        std::thread::sleep(Duration::from_millis(20));
                        Ok(())
                    });
                    e.push(slow.write(&v)).unwrap();
                }
                let seen = Arc::new(Mutex::new(Vec::new()));
                let (e2, seen2) = (e.clone(), seen.clone());
                let f = move || {
                    let all = e2.wait_for_all().unwrap_err();
                    seen2.lock().unwrap().push(all.to_string());
                };
                e.delete_var(Box::new(f), &v).unwrap();
                e.wait_for_all().unwrap();
                let seen = seen.lock().unwrap().clone();
                assert_eq!(seen.len(), 1, "{kind:?}: the delete function did not run");
                assert!(
                    seen[0].contains("wait_for_all called from inside op 'delete_var'"),
                    "{kind:?}, pending {pending}: {}",
                    seen[0]
                );
            }
        }
    });
}

#[test]
fn vars_of_another_engine_are_refused() {
    let a = engine(EngineKind::ThreadedPerDevice);
    let b = engine(EngineKind::Naive);
    let v = b.new_var();
    let err = a.push(Op::sync("x", |_| Ok(())).read(&v)).unwrap_err();
    assert!(matches!(err, EngineError::ForeignVar { .. }), "{err}");
}

#[test]
fn ops_run_on_the_requested_context_and_pool() {
    watchdog("contexts", 30, || {
        let e = engine(EngineKind::ThreadedPerDevice);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let cases = [
            (Context::cpu(0), FnProperty::Normal, "cpu(0)#"),
            (Context::cpu(1), FnProperty::Normal, "cpu(1)#"),
            (Context::cpu(1), FnProperty::CopyToDevice, "cpu(1)-copy#"),
            (Context::cpu(0), FnProperty::CpuPrioritized, "cpu(0)-prio#"),
            (Context::gpu(0), FnProperty::CopyFromDevice, "gpu(0)-copy#"),
        ];
        for (ctx, prop, _) in cases {
            let s = seen.clone();
            e.push(
                Op::sync("where", move |rc| {
                    let name = std::thread::current().name().unwrap_or("").to_string();
                    s.lock().unwrap().push((rc.ctx, name));
                    Ok(())
                })
                .on(ctx)
                .prop(prop)
                .write(&e.new_var()),
            )
            .unwrap();
            e.wait_for_all().unwrap();
        }
        let seen = seen.lock().unwrap().clone();
        for ((ctx, _, prefix), (got_ctx, thread)) in cases.iter().zip(seen) {
            assert_eq!(*ctx, got_ctx);
            assert!(
                thread.starts_with(prefix),
                "{thread} should start with {prefix}"
            );
        }
    });
}

#[test]
fn dropping_the_engine_drains_pending_ops() {
    watchdog("drop drains", 30, || {
        for kind in EngineKind::ALL {
            let done = Arc::new(AtomicUsize::new(0));
            {
                let e = engine(kind);
                let v = e.new_var();
                for _ in 0..100 {
                    let d = done.clone();
                    e.push(
                        Op::sync("tick", move |_| {
                            d.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        })
                        .write(&v),
                    )
                    .unwrap();
                }
            }
            assert_eq!(done.load(Ordering::SeqCst), 100, "{kind:?}");
        }
    });
}

/// Four threads pushing cheap reads and writes on two shared vars, some running inline on their
/// pushers and some on workers: a write never overlaps another op on its var, and every write
/// counts.
#[test]
fn cheap_ops_from_several_pushers_keep_write_exclusion() {
    use std::sync::atomic::AtomicI64;
    watchdog("cheap pushers", 60, || {
        for kind in [EngineKind::ThreadedPooled, EngineKind::ThreadedPerDevice] {
            let e = EngineBuilder::new(kind).build();
            let vars: Vec<_> = (0..2).map(|_| e.new_var()).collect();
            // Per var: -1 while a write runs, else the number of running reads.
            let state: Arc<Vec<AtomicI64>> = Arc::new((0..2).map(|_| AtomicI64::new(0)).collect());
            let writes = Arc::new(AtomicUsize::new(0));
            // Every third op reads; the rest write.
            let ops: usize = if cfg!(miri) { 200 } else { 2000 };
            let writes_each = ops - ops.div_ceil(3);
            std::thread::scope(|scope| {
                for t in 0..4usize {
                    let (e, vars, state, writes) = (&e, &vars, &state, &writes);
                    scope.spawn(move || {
                        for k in 0..ops {
                            let i = (t + k) % 2;
                            let (st, w) = (state.clone(), writes.clone());
                            let op = if k % 3 == 0 {
                                Op::sync("read", move |_| {
                                    assert!(st[i].fetch_add(1, Ordering::SeqCst) >= 0);
                                    std::thread::yield_now();
                                    st[i].fetch_sub(1, Ordering::SeqCst);
                                    Ok(())
                                })
                                .read(&vars[i])
                            } else {
                                Op::sync("write", move |_| {
                                    assert_eq!(st[i].swap(-1, Ordering::SeqCst), 0);
                                    std::thread::yield_now();
                                    w.fetch_add(1, Ordering::SeqCst);
                                    st[i].store(0, Ordering::SeqCst);
                                    Ok(())
                                })
                                .write(&vars[i])
                            };
                            e.push(op.cheap()).unwrap();
                        }
                    });
                }
            });
            e.wait_for_all().unwrap();
            let versions: u64 = vars.iter().map(|v| v.version()).sum();
            assert_eq!(versions as usize, writes.load(Ordering::SeqCst), "{kind:?}");
            assert_eq!(versions as usize, 4 * writes_each, "{kind:?}");
        }
    });
}

#[test]
fn profiler_writes_a_chrome_trace() {
    watchdog("profiler", 30, || {
        let path = std::env::temp_dir().join(format!("engine-profile-{}.json", std::process::id()));
        {
            let e = EngineBuilder::new(EngineKind::ThreadedPerDevice)
                .profiler(Some(path.clone()))
                .build();
            let v = e.new_var();
            for _ in 0..10 {
                e.push(
                    Op::sync("traced_op", |_| Ok(()))
                        .write(&v)
                        .on(Context::cpu(1)),
                )
                .unwrap();
            }
            e.wait_for_all().unwrap();
            let events = e.profiler().unwrap().events();
            assert_eq!(
                events.iter().filter(|ev| ev.name == "traced_op").count(),
                10
            );
            assert!(events
                .iter()
                .all(|ev| ev.end_ns >= ev.start_ns && ev.ctx == Context::cpu(1)));
            let stats = e.profiler().unwrap().summary();
            assert_eq!(stats.len(), 1);
            assert_eq!((stats[0].name.as_str(), stats[0].count), ("traced_op", 10));
            // Paused, the engine records nothing; resumed, it records again.
            let p = e.profiler().unwrap();
            p.pause();
            e.push(Op::sync("unseen", |_| Ok(())).write(&v)).unwrap();
            e.wait_for_all().unwrap();
            p.resume();
            e.push(Op::sync("seen", |_| Ok(())).write(&v)).unwrap();
            e.wait_for_all().unwrap();
            let names: Vec<String> = p.summary().into_iter().map(|s| s.name).collect();
            assert_eq!(names.len(), 2);
            assert!(names.contains(&"seen".to_string()), "{names:?}");
        }
        let trace: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let evs = trace["traceEvents"].as_array().unwrap();
        let ops: Vec<_> = evs.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(ops.len(), 11);
        assert!(ops.iter().all(|e| e["dur"].is_number()));
        assert_eq!(
            ops.iter()
                .filter(|e| e["name"] == "traced_op" && e["pid"] == "cpu(1)")
                .count(),
            10
        );
        std::fs::remove_file(path).ok();
    });
}

#[test]
fn environment_variables_choose_and_size_the_engine() {
    let env = storage::lookup_in;
    let b = EngineBuilder::from_lookup(env(&[
        ("MXRS_ENGINE_TYPE", "naive"),
        ("MXRS_ENGINE_BULK_SIZE", "8"),
    ]))
    .unwrap();
    assert_eq!(
        (b.config().kind, b.config().bulk_size),
        (EngineKind::Naive, 8)
    );
    let b = EngineBuilder::from_lookup(env(&[("MXRS_CPU_WORKER_NTHREADS", "3")])).unwrap();
    assert_eq!(
        (b.config().kind, b.config().cpu_workers),
        (EngineKind::ThreadedPerDevice, 3)
    );
    let err = EngineBuilder::from_lookup(env(&[("MXRS_ENGINE_TYPE", "turbo")])).unwrap_err();
    assert!(
        err.to_string().contains("MXRS_ENGINE_TYPE") && err.to_string().contains("turbo"),
        "{err}"
    );
    let err = EngineBuilder::from_lookup(env(&[("MXRS_COPY_WORKER_NTHREADS", "0")])).unwrap_err();
    assert!(err.to_string().contains("at least 1"), "{err}");
    // More threads than a pool can be given: refused up front, not a panic at the first op.
    let err =
        EngineBuilder::from_lookup(env(&[("MXRS_CPU_WORKER_NTHREADS", "100000")])).unwrap_err();
    assert!(
        err.to_string().contains("MXRS_CPU_WORKER_NTHREADS")
            && err.to_string().contains("at most 1024"),
        "{err}"
    );
    let b = EngineBuilder::from_lookup(env(&[("MXRS_ENGINE_INLINE_CHEAP", "0")])).unwrap();
    assert!(!b.config().inline_cheap);
    assert!(
        EngineBuilder::new(EngineKind::ThreadedPooled)
            .config()
            .inline_cheap
    );
    let err = EngineBuilder::from_lookup(env(&[("MXRS_ENGINE_INLINE_CHEAP", "yes")])).unwrap_err();
    assert!(
        err.to_string().contains("MXRS_ENGINE_INLINE_CHEAP"),
        "{err}"
    );
}

/// A cheap op runnable at push runs on the pushing thread, which `running_at_push` then says;
/// one that must wait for its var runs on a worker once granted (the push returns first); with
/// inlining off, or when not marked cheap, ops always go to a worker.
#[test]
fn cheap_ops_run_on_the_pushing_thread_only_when_runnable_at_push() {
    watchdog("cheap inline", 60, || {
        for kind in [EngineKind::ThreadedPooled, EngineKind::ThreadedPerDevice] {
            for inline in [true, false] {
                let e = EngineBuilder::new(kind).inline_cheap(inline).build();
                let me = std::thread::current().id();
                let v = e.new_var();
                let ran_on = Arc::new(Mutex::new(Vec::new()));
                let record = |tag: &'static str| {
                    let r = ran_on.clone();
                    move |_: &engine::RunContext| {
                        let at_push = engine::running_at_push();
                        r.lock()
                            .unwrap()
                            .push((tag, std::thread::current().id(), at_push));
                        Ok(())
                    }
                };
                e.push(Op::sync("ready", record("ready")).write(&v).cheap())
                    .unwrap();
                e.push(Op::sync("plain", record("plain")).write(&v))
                    .unwrap();
                e.wait_for_var(&v).unwrap();
                // Behind a slow write, the cheap op cannot run at push.
                let gate = Arc::new(Barrier::new(2));
                let g = gate.clone();
                e.push(
                    Op::sync("slow", move |_| {
                        g.wait();
                        Ok(())
                    })
                    .write(&v),
                )
                .unwrap();
                e.push(Op::sync("queued", record("queued")).read(&v).cheap())
                    .unwrap();
                assert!(
                    ran_on.lock().unwrap().iter().all(|(t, ..)| *t != "queued"),
                    "{kind:?}: the queued cheap op ran before its writer"
                );
                gate.wait();
                e.wait_for_all().unwrap();
                let log = ran_on.lock().unwrap().clone();
                let on_pusher = |tag: &str| log.iter().any(|(t, id, _)| *t == tag && *id == me);
                let at_push = |tag: &str| log.iter().any(|(t, _, at)| *t == tag && *at);
                assert_eq!(on_pusher("ready"), inline, "{kind:?} inline={inline}");
                assert_eq!(at_push("ready"), inline, "{kind:?} inline={inline}");
                assert!(!at_push("plain") && !at_push("queued"), "{kind:?}: {log:?}");
                assert!(
                    !engine::running_at_push(),
                    "{kind:?}: still marked after the push"
                );
                assert!(
                    !on_pusher("plain") && !on_pusher("queued"),
                    "{kind:?}: {log:?}"
                );
                assert_eq!(v.version(), 3);
            }
        }
    });
}

/// MXNet's failure semantics, case by case (its exception-handling tests): a failure is reported
/// once, at the first wait that reaches it, whichever var that is, and then by nothing else.
#[test]
fn a_failure_is_reported_once_by_the_first_wait_that_reaches_it() {
    watchdog("report once", 30, || {
        for e in engines() {
            fn fail<'a>(name: &'static str) -> Op<'a> {
                Op::sync(name, |_| Err("bad draw".into()))
            }
            let kind = e.kind();

            // Several waits: each new failure is raised by its own wait.
            for round in 0..3 {
                let v = e.new_var();
                e.push(fail("draw").write(&v)).unwrap();
                assert!(e.wait_for_var(&v).is_err(), "{kind:?} round {round}");
                let w = e.new_var();
                e.push(fail("draw").write(&w)).unwrap();
                assert!(e.wait_for_all().is_err(), "{kind:?} round {round}");
            }

            // The second output of a failed op: the failure was raised through the first.
            let (out1, out2) = (e.new_var(), e.new_var());
            e.push(fail("two outputs").write(&out1).write(&out2))
                .unwrap();
            assert!(e.wait_for_var(&out1).is_err());
            e.wait_for_var(&out2).unwrap();

            // Downstream first, then the root: raised once, by the downstream wait.
            let (root, mid, down) = (e.new_var(), e.new_var(), e.new_var());
            e.push(fail("root").write(&root)).unwrap();
            e.push(Op::sync("mid", |_| Ok(())).read(&root).write(&mid))
                .unwrap();
            e.push(Op::sync("down", |_| Ok(())).read(&mid).write(&down))
                .unwrap();
            let err = e.wait_for_var(&down).unwrap_err();
            assert_eq!(err.failure().unwrap().op, "root", "{kind:?}");
            e.wait_for_var(&root).unwrap();
            e.wait_for_var(&mid).unwrap();
            e.wait_for_all().unwrap();

            // Several failures, then wait_for_all: the earliest is raised, all are cleared.
            let vars: Vec<_> = (0..3).map(|_| e.new_var()).collect();
            for v in &vars {
                e.push(fail("many").write(v)).unwrap();
            }
            assert!(e.wait_for_all().is_err());
            e.wait_for_all().unwrap();
            for v in &vars {
                e.wait_for_var(v).unwrap();
            }

            // An op updating a failed output (reading and writing it) is skipped and raises
            // the failure at the next wait.
            let a = e.new_var();
            e.push(fail("draw").write(&a)).unwrap();
            let ran = Arc::new(AtomicUsize::new(0));
            let r = ran.clone();
            let update = Op::sync("a = dot(a, a)", move |_| {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            });
            e.push(update.read(&a).write(&a)).unwrap();
            assert!(e.wait_for_var(&a).is_err(), "{kind:?}");
            assert_eq!(ran.load(Ordering::SeqCst), 0, "{kind:?}: the update ran");
        }
    });
}

/// After a failure is reported, the vars it reached are usable again: ops reading them run.
/// Before it is reported, an op that only overwrites a failed var runs (it replaces the data)
/// and clears that var, while ops reading the failed data are skipped. Alone and in bulk units.
#[test]
fn an_overwrite_clears_a_failed_var_and_a_report_clears_every_var() {
    watchdog("overwrite clears", 30, || {
        for e in engines() {
            let kind = e.kind();
            for bulked in [false, true] {
                let (x, y) = (e.new_var(), e.new_var());
                let log = Arc::new(Mutex::new(vec![]));
                let mut bulk = e.bulk_with(8);
                let mut push = |op: Op<'_>| match bulked {
                    true => bulk.push(op).unwrap(),
                    false => e.push(op).unwrap(),
                };
                push(Op::sync("fails", |_| Err("bad batch".into())).write(&x));
                push(
                    Op::sync("reads x", log_op(&log, "skipped"))
                        .read(&x)
                        .write(&y),
                );
                push(Op::sync("overwrites x", log_op(&log, "overwrite")).write(&x));
                push(Op::sync("reads x again", log_op(&log, "read")).read(&x));
                drop(bulk);
                // x holds fresh data: its wait succeeds. y was written by a skipped op: its
                // wait reports the failure, once.
                e.wait_for_var(&x).unwrap();
                assert_eq!(
                    *log.lock().unwrap(),
                    ["overwrite", "read"],
                    "{kind:?}, bulked {bulked}"
                );
                let err = e.wait_for_var(&y).unwrap_err();
                assert_eq!(err.failure().unwrap().op, "fails");
                e.wait_for_all().unwrap();
                // Reported: an op reading y runs again.
                e.push(Op::sync("reads y", log_op(&log, "after")).read(&y))
                    .unwrap();
                e.wait_for_all().unwrap();
                assert_eq!(
                    log.lock().unwrap().last().map(String::as_str),
                    Some("after")
                );
            }
        }
    });
}
