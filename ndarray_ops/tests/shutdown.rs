//! Dropping a runtime while an executor's forward pass still runs, then the executor, leaves no
//! thread and no storage behind, whichever thread ends up dropping the engine's last handle.
//! Alone in its test binary, because it counts the process's threads.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use engine::{EngineBuilder, EngineKind, Op};
use ndarray_ops::{Executor, Runtime, Symbol};
use storage::{Context, StorageConfig};

/// The process's live threads, from `/proc` (`None` where there is no `/proc`).
fn threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Threads:"))?;
    line["Threads:".len()..].trim().parse().ok()
}

fn mlp() -> (Symbol, HashMap<String, Vec<usize>>) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../graphs");
    let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).unwrap();
    let sym = Symbol::from_json(&read("mlp-symbol.json")).unwrap();
    (sym, serde_json::from_str(&read("mlp-shapes.json")).unwrap())
}

/// The thread count once it has not changed for 200 ms (at most 5 s).
fn steady_threads() -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut last, mut since) = (threads().unwrap(), Instant::now());
    while since.elapsed() < Duration::from_millis(200) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        let now = threads().unwrap();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    last
}

#[test]
fn dropping_a_runtime_during_a_forward_pass_leaks_nothing() {
    if threads().is_none() {
        eprintln!("no /proc/self/status here: thread counts not checked");
        return;
    }
    let (sym, shapes) = mlp();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The kernels' own thread pool starts with the first kernel and stays: count from after
        // a first round, once the count has been steady for a while.
        let mut start = usize::MAX;
        for round in 0..51 {
            let kind = match round % 2 {
                0 => EngineKind::ThreadedPooled,
                _ => EngineKind::ThreadedPerDevice,
            };
            let engine = EngineBuilder::new(kind).cpu_workers(2).build();
            let rt = Runtime::new(engine, StorageConfig::default());
            let ctx = Context::cpu(0);
            let pool = rt.storage(ctx);
            let exec = Executor::simple_bind(&rt, ctx, &sym, &shapes).unwrap();
            // Hold the forward pass back behind a slow write of its data, so that it is still
            // running when the runtime and then the executor go: the arrays' delete functions,
            // run on workers, drop the engine's last handle.
            let data = exec.arg_dict()["data"].clone();
            let slow = Op::sync("slow", |_| {
                std::thread::sleep(Duration::from_millis(3));
                Ok(())
            });
            rt.engine().push(slow.write(data.var())).unwrap();
            exec.forward(false).unwrap();
            drop((data, rt, exec));
            if round == 0 {
                start = steady_threads();
                continue;
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let (now, in_use) = (threads().unwrap(), pool.stats().in_use);
                if now <= start && in_use == 0 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "round {round} ({kind:?}): {now} threads ({start} at the start), \
                     {in_use} bytes of storage still in use"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the rounds failed or hung (see the panic above)");
}
