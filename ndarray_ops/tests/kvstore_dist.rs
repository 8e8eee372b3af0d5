//! The KVStore across processes (`dist_sync`, the `mpi` feature). Each test here launches this
//! same test binary under `mpiexec -n 2`, running one `*_rank` function per rank, and checks what
//! the ranks printed: rank 0's value broadcast at init, sums over ranks and devices (many small
//! buckets among them, their packed buffers reused; a value ready at its push summed on the
//! pushing thread, yet after the sums whose tickets come first), an optimizer whose weights are bit for bit
//! the same on both ranks and equal to its formula, a size that differs between ranks refused
//! on both naming the rank, a failed gradient on one rank refused on both with the weights left
//! equal and the next push working, and a rank that stalls ending the job with a clear message
//! within the timeout instead of hanging. For
//! `dist_async`: every rank's pushes applied once each by rank 0, with nothing lost; a pull
//! after a barrier seeing them all; staleness counted as the updates a gradient did not see; a
//! failed update on rank 0 reported to the rank that pushed it; pulls in flight together, each
//! reply landing in its own key's array while another key's is held back; and a dead rank 0,
//! or one alive that never answers, failing a pull within the timeout. The sums, the optimizer
//! and the errors run again, and payloads up to 4 MB through both kinds, with MPICH sending
//! through TCP as between machines.
#![cfg(feature = "mpi")]

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::kvstore::Optimizer;
use ndarray_ops::{invoke, Attrs, KVStore, NDArray, Runtime, Sgd};
use storage::{Context, StorageConfig};

/// Set in the ranks' environment: the `*_rank` functions run only there.
const RANK_ENV: &str = "MXRS_TEST_MPI_RANK";

/// Whether `mpiexec` runs here; these tests say so and pass where it does not (`.ci/run`
/// installs MPICH, so they run there).
fn have_mpiexec() -> bool {
    let found = Command::new("mpiexec").arg("--version").output().is_ok();
    if !found {
        eprintln!("skipped: no mpiexec here (install MPICH or Open MPI to run the MPI tests)");
    }
    found
}

/// Runs test `name` of this binary on 2 ranks; returns (success, stdout, stderr).
fn launch(name: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = Command::new("mpiexec");
    cmd.args(["-n", "2"])
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(RANK_ENV, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("mpiexec runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether a launched job failed: `mpiexec`'s status says so, or a rank's output says it ended
/// the job. MPICH's launcher now and then reports 0 for a job that a rank ended with
/// `MPI_Abort` (a race in how it collects the ranks' exit statuses; about one run in twelve
/// of the stalled-rank test here), so its status alone cannot tell.
fn job_failed(ok: bool, err: &str) -> bool {
    !ok || err.contains("; ending the job")
}

fn in_rank() -> bool {
    std::env::var_os(RANK_ENV).is_some()
}

/// The lines rank `r` printed with `tag`, without the prefix.
fn lines(out: &str, r: usize, tag: &str) -> Vec<String> {
    // The test harness's own output may share a line with a rank's first line.
    let prefix = format!("rank{r} {tag} ");
    out.lines()
        .filter_map(|l| Some(l[l.find(&prefix)? + prefix.len()..].to_string()))
        .collect()
}

fn rt() -> Arc<Runtime> {
    runtime(EngineBuilder::new(EngineKind::ThreadedPerDevice))
}

/// A runtime whose engine records every op it runs.
fn traced_rt() -> Arc<Runtime> {
    runtime(EngineBuilder::new(EngineKind::ThreadedPerDevice).profiler(None))
}

fn runtime(engine: EngineBuilder) -> Arc<Runtime> {
    Runtime::new(engine.cpu_workers(1).build(), StorageConfig::default())
}

fn values(a: &NDArray) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

fn bits(v: &[f32]) -> String {
    v.iter()
        .map(|x| format!("{:08x}", x.to_bits()))
        .collect::<Vec<_>>()
        .join(",")
}

/// MPICH's hints (over UCX) to send through TCP even between ranks of one host, as between
/// machines: its network path, where a large message waits for the receiver's progress (a
/// rendezvous) instead of going through shared memory. Other MPI libraries ignore them.
const OVER_TCP: &[(&str, &str)] = &[("MPIR_CVAR_NOLOCAL", "1"), ("UCX_TLS", "tcp,self")];

#[test]
fn sums_optimizers_and_errors_across_two_ranks() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    check_sums_optimizers_and_errors(&[]);
}

#[test]
fn sums_optimizers_and_errors_across_two_ranks_over_tcp() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    check_sums_optimizers_and_errors(OVER_TCP);
}

/// Runs `sums_optimizers_and_errors_rank` on two ranks with `env` and checks what they print.
fn check_sums_optimizers_and_errors(env: &[(&str, &str)]) {
    let (ok, out, err) = launch("sums_optimizers_and_errors_rank", env);
    assert!(ok, "the ranks failed:\n{out}\n{err}");
    for r in 0..2 {
        assert_eq!(lines(&out, r, "workers"), vec!["2"], "{out}");
        // Rank 0's initial value, on both.
        assert_eq!(lines(&out, r, "init"), vec!["[1.0, 2.0, 3.0]"], "{out}");
        // (1 + 2) per rank and device, two devices each: 2 * (1 + 2) * [1, 1, 1] ...
        assert_eq!(lines(&out, r, "sum"), vec!["[6.0, 12.0, 18.0]"], "{out}");
        // Key 10 + k, element i: (10k + i) + (10k + i + 1).
        assert_eq!(
            lines(&out, r, "bucket"),
            vec!["[[1.0], [21.0, 23.0, 25.0, 27.0, 29.0], [41.0, 43.0]]"],
            "{out}"
        );
        assert_eq!(lines(&out, r, "captured"), vec!["[10.0, 12.0]"], "{out}");
        assert_eq!(lines(&out, r, "alone"), vec!["true copies 2"], "{out}");
        // Two pushes of 2 devices x (1 + 2), then x (2 + 4).
        assert_eq!(lines(&out, r, "twice"), vec!["[18.0, 18.0]"], "{out}");
        // 1 + 2 from each way; one copy each.
        assert_eq!(
            lines(&out, r, "pushpull"),
            vec!["[3.0, 3.0, 3.0, 3.0] [3.0, 3.0, 3.0, 3.0] copies 1 / 1"],
            "{out}"
        );
        // Four rounds of a sum and a pull's copy, each on the pushing thread.
        assert_eq!(
            lines(&out, r, "in_place"),
            vec![format!("[3.0, 3.0, 3.0, 3.0] {:?}", ["here"; 8])],
            "{out}"
        );
        // (10 + 11) and (100 + 200), each key's own.
        assert_eq!(lines(&out, r, "in_turn"), vec!["21 300 true"], "{out}");
        let bad = lines(&out, r, "mismatch");
        assert_eq!(bad.len(), 1, "{out}");
        assert!(
            bad[0].contains("key 'bad'") && bad[0].contains("rank 0: 3, rank 1: 4 elements"),
            "{bad:?}"
        );
        // Rank 1 reports its own op's failure; rank 0 that a rank gave nothing.
        let failed = lines(&out, r, "failed");
        assert_eq!(failed.len(), 1, "{out}");
        let why = ["1 of 2 ranks had no value to give", "index 7 is outside"][r];
        assert!(failed[0].contains(why), "{failed:?}");
        assert_eq!(lines(&out, r, "formula"), vec!["ok"], "{out}");
    }
    // Bit for bit the same weights on both ranks, before and after the failed push.
    let w0 = lines(&out, 0, "weights");
    assert_eq!(w0.len(), 3, "{out}");
    assert_eq!(w0, lines(&out, 1, "weights"));
    assert_eq!(w0[0], w0[1], "the failed push changed the weights");
    assert_ne!(w0[1], w0[2], "the push after the failure did nothing");
}

#[test]
fn sums_optimizers_and_errors_rank() {
    if !in_rank() {
        return;
    }
    let rt = rt();
    let kv = KVStore::create(&rt, "dist_sync").unwrap();
    let (rank, n) = (kv.rank(), kv.num_workers());
    let say = |tag: &str, what: String| println!("rank{rank} {tag} {what}");
    say("workers", n.to_string());
    let host = Context::cpu(0);
    let mine: Vec<f32> = (1..=3).map(|i| (i * (rank + 1)) as f32).collect();
    kv.init(0, &rt.from_vec(mine, &[3], host).unwrap()).unwrap();
    let out = rt.zeros(&[3], ndarray_ops::DType::F32, host).unwrap();
    kv.pull(0, &[&out], 0).unwrap();
    say("init", format!("{:?}", values(&out)));

    // Without an updater the value becomes the sum over ranks and devices.
    let grads: Vec<NDArray> = (0..2)
        .map(|d| {
            let g: Vec<f32> = (1..=3).map(|i| (i * (rank + 1)) as f32).collect();
            rt.from_vec(g, &[3], Context::cpu(d)).unwrap()
        })
        .collect();
    let refs: Vec<&NDArray> = grads.iter().collect();
    kv.push(0, &refs, 0).unwrap();
    kv.pull(0, &[&out], 0).unwrap();
    say("sum", format!("{:?}", values(&out)));

    // Three keys pushed before a pull travel as one packed bucket.
    let sizes = [1usize, 5, 2];
    for (k, &n) in sizes.iter().enumerate() {
        kv.init(
            10 + k as i32,
            &rt.zeros(&[n], ndarray_ops::DType::F32, host).unwrap(),
        )
        .unwrap();
    }
    let pushed: Vec<NDArray> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let v: Vec<f32> = (0..n).map(|i| (10 * k + i + rank) as f32).collect();
            rt.from_vec(v, &[n], host).unwrap()
        })
        .collect();
    for (k, v) in pushed.iter().enumerate() {
        kv.push(10 + k as i32, &[v], 0).unwrap();
    }
    let mut got = vec![];
    for (k, &n) in sizes.iter().enumerate() {
        let o = rt.zeros(&[n], ndarray_ops::DType::F32, host).unwrap();
        kv.pull(10 + k as i32, &[&o], 0).unwrap();
        got.push(values(&o));
    }
    say("bucket", format!("{got:?}"));

    // A pushed array written again before the bucket is sent: the sum is of what was pushed.
    let later = rt.from_vec(vec![5f32, 6.0], &[2], host).unwrap();
    kv.init(20, &rt.zeros(&[2], ndarray_ops::DType::F32, host).unwrap())
        .unwrap();
    kv.push(20, &[&later], 0).unwrap();
    later.fill(100.0).unwrap();
    let o = rt.zeros(&[2], ndarray_ops::DType::F32, host).unwrap();
    kv.pull(20, &[&o], 0).unwrap();
    say("captured", format!("{:?}", values(&o)));

    // Values of 64 KB or more go at their push, each alone and read where they lie (no copy):
    // written again right after the push, the sum is still of what was pushed. Large and small
    // keys pushed in one round each get their own sum; only the small ones are copied, once
    // each, into their bucket's packed buffer.
    let traced = traced_rt();
    let kv4 = KVStore::create(&traced, "dist_sync").unwrap();
    let lens = [1usize << 15, 3, (1 << 15) + 5, 7];
    let expect = |k: usize, i: usize, r: usize| ((i % 97) + 1000 * k + r) as f32;
    let sent: Vec<NDArray> = lens
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let v = (0..n).map(|i| expect(k, i, rank)).collect();
            traced.from_vec(v, &[n], host).unwrap()
        })
        .collect();
    for (k, &n) in lens.iter().enumerate() {
        let zeros = traced.zeros(&[n], ndarray_ops::DType::F32, host).unwrap();
        kv4.init(30 + k as i32, &zeros).unwrap();
    }
    traced.wait_all().unwrap();
    let copies_before = traced.engine().profiler().unwrap().events().len();
    for (k, v) in sent.iter().enumerate() {
        kv4.push(30 + k as i32, &[v], 0).unwrap();
        v.fill(-1.0).unwrap();
    }
    let mut right = true;
    for (k, &n) in lens.iter().enumerate() {
        let o = traced.zeros(&[n], ndarray_ops::DType::F32, host).unwrap();
        kv4.pull(30 + k as i32, &[&o], 0).unwrap();
        let got = values(&o);
        right &= (0..n).all(|i| got[i] == expect(k, i, 0) + expect(k, i, 1));
    }
    traced.wait_all().unwrap();
    let events = traced.engine().profiler().unwrap().events();
    let copied = events[copies_before..]
        .iter()
        .filter(|e| e.name == "kvstore_pack")
        .count();
    say("alone", format!("{right} copies {copied}"));
    drop(kv4);

    // A second store, with a summing updater: two pushes of a key from two devices each,
    // without a pull between them, both count.
    let kv2 = KVStore::create(&rt, "dist_sync").unwrap();
    kv2.init(0, &rt.zeros(&[2], ndarray_ops::DType::F32, host).unwrap())
        .unwrap();
    kv2.set_updater(
        |_: &ndarray_ops::kvstore::Key, merged: &NDArray, stored: &NDArray| {
            stored.add_inplace(merged)
        },
    )
    .unwrap();
    for p in 0..2 {
        let v = ((rank + 1) * (p + 1)) as f32;
        let vs: Vec<NDArray> = (0..2)
            .map(|d| rt.from_vec(vec![v; 2], &[2], Context::cpu(d)).unwrap())
            .collect();
        let refs: Vec<&NDArray> = vs.iter().collect();
        kv2.push(0, &refs, 0).unwrap();
    }
    let o = rt.zeros(&[2], ndarray_ops::DType::F32, host).unwrap();
    kv2.pull(0, &[&o], 0).unwrap();
    say("twice", format!("{:?}", values(&o)));
    drop(kv2);

    // A small value is copied once, into its bucket's packed buffer, whether its bucket goes at
    // once (`pushpull`) or waits for the pull (the caller may write the array meanwhile). Seen
    // in the engine's profile.
    let traced = traced_rt();
    let kv3 = KVStore::create(&traced, "dist_sync").unwrap();
    let sent = traced
        .from_vec(vec![(rank + 1) as f32; 4], &[4], host)
        .unwrap();
    let o = traced.zeros(&[4], ndarray_ops::DType::F32, host).unwrap();
    kv3.init(0, &o).unwrap();
    let copies = |rt: &Arc<Runtime>| {
        rt.wait_all().unwrap();
        let events = rt.engine().profiler().unwrap().events();
        events.iter().filter(|e| e.name == "kvstore_pack").count()
    };
    kv3.pushpull(0, &[&sent], &[&o], 0).unwrap();
    let (pushpull_sum, pushpull_copies) = (values(&o), copies(&traced));
    kv3.push(0, &[&sent], 0).unwrap();
    kv3.pull(0, &[&o], 0).unwrap();
    let push_copies = copies(&traced) - pushpull_copies;
    say(
        "pushpull",
        format!(
            "{pushpull_sum:?} {:?} copies {pushpull_copies} / {push_copies}",
            values(&o)
        ),
    );
    // A value ready at its push is summed on the pushing thread when the communication thread
    // is idle (a pause lets it finish what came before), and the pull's copy then runs there
    // too: no hand-over to that thread or to a worker.
    let me = std::thread::current()
        .name()
        .unwrap_or_default()
        .to_string();
    let before = traced.engine().profiler().unwrap().events().len();
    let mut sums = Vec::new();
    for _ in 0..4 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        kv3.push(0, &[&sent], 0).unwrap();
        kv3.pull(0, &[&o], 0).unwrap();
        sums.push(values(&o)[0]);
    }
    traced.wait_all().unwrap();
    let events = traced.engine().profiler().unwrap().events();
    let ran: Vec<&str> = events[before..]
        .iter()
        .filter(|e| matches!(e.name.as_str(), "kvstore_allreduce" | "pull_copy"))
        .map(|e| match e.thread_name == me {
            true => "here",
            false => "elsewhere",
        })
        .collect();
    say("in_place", format!("{sums:?} {ran:?}"));
    drop(kv3);

    // A sum ready at its push still waits for the sums whose tickets come first: on rank 0 key
    // 50's value comes from a slow op, so its sum (64 KiB: alone) runs when that op ends, while
    // key 51's is ready at its push and must not run in place ahead of it. Out of order, rank
    // 0's key 51 would be summed with rank 1's key 50.
    let kv5 = KVStore::create(&rt, "dist_sync").unwrap();
    let n = 1 << 14;
    for k in [50, 51] {
        kv5.init(k, &rt.zeros(&[n], ndarray_ops::DType::F32, host).unwrap())
            .unwrap();
    }
    let first = rt.zeros(&[n], ndarray_ops::DType::F32, host).unwrap();
    if rank == 0 {
        let slow = engine::Op::sync("slow", |_| {
            std::thread::sleep(Duration::from_millis(100));
            Ok(())
        })
        .write(first.var());
        rt.engine().push(slow).unwrap();
    }
    first.fill(10.0 + rank as f64).unwrap();
    let second = rt
        .from_vec(vec![100.0 * (rank + 1) as f32; n], &[n], host)
        .unwrap();
    second.wait_to_read().unwrap();
    kv5.push(50, &[&first], 0).unwrap();
    kv5.push(51, &[&second], 0).unwrap();
    let outs: Vec<NDArray> = (0..2)
        .map(|_| rt.zeros(&[n], ndarray_ops::DType::F32, host).unwrap())
        .collect();
    kv5.pull(50, &[&outs[0]], 0).unwrap();
    kv5.pull(51, &[&outs[1]], 0).unwrap();
    let got: Vec<Vec<f32>> = outs.iter().map(values).collect();
    let whole = |v: &[f32]| v.iter().all(|x| *x == v[0]);
    say(
        "in_turn",
        format!(
            "{} {} {}",
            got[0][0],
            got[1][0],
            whole(&got[0]) && whole(&got[1])
        ),
    );
    drop(kv5);

    // A size that differs between ranks.
    let size = 3 + rank;
    let bad = rt.zeros(&[size], ndarray_ops::DType::F32, host).unwrap();
    let e = kv.init("bad", &bad).unwrap_err().to_string();
    say("mismatch", e);

    // SGD with momentum, the same on both ranks, against its formula.
    let w0 = [0.5f32, -0.25, 1.0];
    kv.init("w", &rt.from_vec(w0.to_vec(), &[3], host).unwrap())
        .unwrap();
    let sgd = Sgd {
        lr: 0.1,
        momentum: 0.9,
        wd: 0.0,
    };
    kv.set_optimizer(Optimizer::sgd(sgd)).unwrap();
    let grad = |step: usize, r: usize| -> Vec<f32> {
        (0..3)
            .map(|i| ((step + i + r) % 5) as f32 * 0.5 - 1.0)
            .collect()
    };
    let (mut w, mut mom) = (w0.to_vec(), [0f32; 3]);
    for step in 0..4 {
        let g = rt.from_vec(grad(step, rank), &[3], host).unwrap();
        kv.push("w", &[&g], 0).unwrap();
        for i in 0..3 {
            let sum = grad(step, 0)[i] + grad(step, 1)[i];
            mom[i] = 0.9 * mom[i] - 0.1 * sum;
            w[i] += mom[i];
        }
    }
    kv.pull("w", &[&out], 0).unwrap();
    let got = values(&out);
    let close = got.iter().zip(&w).all(|(a, b)| (a - b).abs() < 1e-6);
    say(
        "formula",
        if close {
            "ok".into()
        } else {
            format!("{got:?} vs {w:?}")
        },
    );
    say("weights", bits(&got));

    // Rank 1's gradient comes from an op that fails (an index out of range): both ranks'
    // pushes fail, neither applies the update, and the ranks stay in step.
    let g = if rank == 1 {
        let table = rt.from_vec(vec![1f32; 6], &[2, 3], host).unwrap();
        let idx = rt.from_vec(vec![7f32], &[1], host).unwrap();
        let attrs = Attrs::new().with("mode", "raise");
        let rows = invoke("take", &[&table, &idx], &attrs, None).unwrap();
        rows.into_iter().next().unwrap().reshape(&[3]).unwrap()
    } else {
        rt.from_vec(vec![1f32; 3], &[3], host).unwrap()
    };
    kv.push("w", &[&g], 0).unwrap();
    let e = kv.pull("w", &[&out], 0).and_then(|()| out.wait_to_read());
    say("failed", format!("{:?}", e.map_err(|e| e.to_string())));
    let _ = rt.wait_all();
    say("weights", bits(&values(&out)));
    let g = rt.from_vec(grad(9, rank), &[3], host).unwrap();
    kv.push("w", &[&g], 0).unwrap();
    kv.pull("w", &[&out], 0).unwrap();
    say("weights", bits(&values(&out)));
    kv.barrier().unwrap();
}

#[test]
fn many_small_buckets_reuse_their_packed_buffers_and_sum_exactly() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    // A bucket of 256 bytes: a round of pushes fills a bucket every few keys, so the packed
    // buffers go round while the buckets before are still being summed.
    let (ok, out, err) = launch(
        "small_buckets_rank",
        &[("MXRS_KVSTORE_BUCKET_BYTES", "256")],
    );
    assert!(ok, "the ranks failed:\n{out}\n{err}");
    for r in 0..2 {
        assert_eq!(lines(&out, r, "rounds"), vec!["5 of 5 exact"], "{out}");
    }
}

#[test]
fn large_values_sum_and_travel_exactly_over_shared_memory_and_tcp() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    for env in [&[][..], OVER_TCP] {
        let mut env = env.to_vec();
        env.push(("MXRS_KVSTORE_TIMEOUT", "60"));
        let (ok, out, err) = launch("large_values_rank", &env);
        assert!(ok, "the ranks failed ({env:?}):\n{out}\n{err}");
        for r in 0..2 {
            // Each size summed exactly by push + pull and by pushpull, three rounds.
            assert_eq!(
                lines(&out, r, "sync"),
                vec!["1024 4096 65536 1048576 exact"],
                "{env:?}\n{out}"
            );
            // Rank 0 applied its 3 pushes and rank 1's 3 of the 4 MB gradient.
            assert_eq!(lines(&out, r, "async"), vec!["exact"], "{env:?}\n{out}");
        }
        // The optimizer's weights bit for bit the same on both ranks.
        let w = lines(&out, 0, "weights");
        assert_eq!(w.len(), 1, "{out}");
        assert_eq!(w, lines(&out, 1, "weights"), "{env:?}");
    }
}

/// Element `i` of rank `rank`'s value in round `round`: integers, so that any order of the sum
/// gives the same float.
fn large_grad(round: usize, i: usize, rank: usize) -> f32 {
    ((i * 13 + round * 5 + rank * 3) % 1000) as f32
}

/// Payloads from 4 KB to 4 MB through `dist_sync` (alone at their push from 64 KB, packed below;
/// push + pull and `pushpull`) and a 4 MB gradient each rank sends to rank 0 through
/// `dist_async`: messages large enough that MPI moves them in several pieces.
#[test]
fn large_values_rank() {
    if !in_rank() {
        return;
    }
    let rt = rt();
    let host = Context::cpu(0);
    let kv = KVStore::create(&rt, "dist_sync").unwrap();
    let rank = kv.rank();
    let sizes = [1024usize, 4096, 65536, 1 << 20];
    let mut exact = true;
    for (k, &n) in sizes.iter().enumerate() {
        let stored = rt.zeros(&[n], ndarray_ops::DType::F32, host).unwrap();
        kv.init(k as i32, &stored).unwrap();
        let out = rt.zeros(&[n], ndarray_ops::DType::F32, host).unwrap();
        for round in 0..3 {
            let v = (0..n).map(|i| large_grad(round, i, rank)).collect();
            let g = rt.from_vec(v, &[n], host).unwrap();
            match round % 2 {
                0 => {
                    kv.push(k as i32, &[&g], 0).unwrap();
                    kv.pull(k as i32, &[&out], 0).unwrap();
                }
                _ => kv.pushpull(k as i32, &[&g], &[&out], 0).unwrap(),
            }
            let got = values(&out);
            exact &= (0..n).all(|i| got[i] == large_grad(round, i, 0) + large_grad(round, i, 1));
        }
    }
    let verdict = if exact { "exact" } else { "wrong" };
    let list: Vec<String> = sizes.iter().map(|n| n.to_string()).collect();
    println!("rank{rank} sync {} {verdict}", list.join(" "));

    // An optimizer's step on a 4 MB weight: the same bits on both ranks.
    let w = rt
        .from_vec(vec![0.5f32; 1 << 20], &[1 << 20], host)
        .unwrap();
    kv.init("w", &w).unwrap();
    let sgd = Sgd {
        lr: 0.1,
        momentum: 0.9,
        wd: 0.0,
    };
    kv.set_optimizer(Optimizer::sgd(sgd)).unwrap();
    for round in 0..2 {
        let v = (0..1 << 20)
            .map(|i| large_grad(round, i, rank) * 1e-3)
            .collect();
        let g = rt.from_vec(v, &[1 << 20], host).unwrap();
        kv.push("w", &[&g], 0).unwrap();
    }
    kv.pull("w", &[&w], 0).unwrap();
    let got = values(&w);
    let digest = got.iter().fold(0u64, |h, x| {
        (h ^ u64::from(x.to_bits())).wrapping_mul(0x0100_0000_01b3)
    });
    println!("rank{rank} weights {digest:016x}");
    kv.barrier().unwrap();
    drop(kv);

    // dist_async: both ranks push a 4 MB gradient three times; rank 0 adds each as it comes.
    let kv = KVStore::create(&rt, "dist_async").unwrap();
    let n = 1 << 20;
    let a = rt.zeros(&[n], ndarray_ops::DType::F32, host).unwrap();
    kv.init("a", &a).unwrap();
    kv.set_updater(
        |_: &ndarray_ops::kvstore::Key, merged: &NDArray, stored: &NDArray| {
            stored.add_inplace(merged)
        },
    )
    .unwrap();
    for round in 0..3 {
        let v = (0..n).map(|i| large_grad(round, i, rank)).collect();
        let g = rt.from_vec(v, &[n], host).unwrap();
        kv.push("a", &[&g], 0).unwrap();
    }
    kv.barrier().unwrap();
    kv.pull("a", &[&a], 0).unwrap();
    let got = values(&a);
    let want = |i: usize| -> f32 {
        (0..3)
            .flat_map(|round| (0..2).map(move |r| large_grad(round, i, r)))
            .sum()
    };
    let verdict = if (0..n).all(|i| got[i] == want(i)) {
        "exact"
    } else {
        "wrong"
    };
    println!("rank{rank} async {verdict}");
    kv.barrier().unwrap();
}

/// Round `round`, key `k`, element `i` of rank `rank`'s gradient.
fn small_grad(round: usize, k: usize, i: usize, rank: usize) -> f32 {
    (1000 * round + 10 * k + i + 7 * rank) as f32
}

#[test]
fn small_buckets_rank() {
    if !in_rank() {
        return;
    }
    let rt = rt();
    let kv = KVStore::create(&rt, "dist_sync").unwrap();
    let rank = kv.rank();
    let host = Context::cpu(0);
    let lens: Vec<usize> = (0..24).map(|k| 1 + (k * 7) % 30).collect();
    let stored: Vec<NDArray> = lens
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let a = rt.zeros(&[n], ndarray_ops::DType::F32, host).unwrap();
            kv.init_shared(k as i32, &a).unwrap();
            a
        })
        .collect();
    let mut exact = 0;
    for round in 0..5 {
        for (k, &n) in lens.iter().enumerate() {
            let v = (0..n).map(|i| small_grad(round, k, i, rank)).collect();
            let g = rt.from_vec(v, &[n], host).unwrap();
            kv.push(k as i32, &[&g], 0).unwrap();
            // Written again at once: the sum is of what was pushed.
            g.fill(-1e6).unwrap();
        }
        for (k, s) in stored.iter().enumerate() {
            kv.pull(k as i32, &[s], 0).unwrap();
        }
        let right = (0..lens.len()).all(|k| {
            let got = values(&stored[k]);
            (0..lens[k]).all(|i| got[i] == small_grad(round, k, i, 0) + small_grad(round, k, i, 1))
        });
        exact += usize::from(right);
    }
    println!("rank{rank} rounds {exact} of 5 exact");
}

#[test]
fn a_stalled_rank_ends_the_job_with_a_message_within_the_timeout() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    a_timeout_ends_the_job(
        "a_stalled_rank",
        "rank 0: the sum of key 0 across ranks did not complete within 2 s",
    );
}

/// Launches rank test `name`, in which a rank waits in vain, with a 2 s timeout: the job must
/// fail within a minute, saying `message`, with no rank having printed that it finished.
fn a_timeout_ends_the_job(name: &str, message: &str) {
    let start = Instant::now();
    let (ok, out, err) = launch(name, &[("MXRS_KVSTORE_TIMEOUT", "2")]);
    assert!(
        job_failed(ok, &err),
        "the job should have failed:\n{out}\n{err}"
    );
    assert!(err.contains(message), "{out}\n{err}");
    assert!(
        !out.contains("rank0 finished") && !out.contains("rank1 finished"),
        "{out}\n{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_stalled_rank() {
    if !in_rank() {
        return;
    }
    let rt = rt();
    let kv = KVStore::create(&rt, "dist_sync").unwrap();
    let v = rt.from_vec(vec![1f32; 4], &[4], Context::cpu(0)).unwrap();
    kv.init(0, &v).unwrap();
    if kv.rank() == 1 {
        // Stalls past rank 0's timeout before taking part.
        std::thread::sleep(Duration::from_secs(20));
    }
    kv.push(0, &[&v], 0).unwrap();
    rt.wait_all().unwrap();
}

#[test]
fn a_rank_that_dies_fails_the_job_within_the_timeout() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    // Either MPI's launcher ends the job when a rank exits early, or the survivor's sum times
    // out: never a hang.
    a_death_ends_the_job("a_dying_rank", "rank0 finished", &[], 1);
}

#[test]
fn a_dead_rank_fails_the_job_within_the_timeout_over_tcp() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    // Over a network the dead peer's connection closes instead of going quiet.
    a_death_ends_the_job("a_dying_rank", "rank0 finished", OVER_TCP, 3);
    a_death_ends_the_job("a_dead_async_server", "rank1 finished", OVER_TCP, 3);
}

/// Launches rank test `name`, in which a rank dies, with a 3 s timeout and `env`: the job must
/// fail within a minute and the survivor must not print `survivor_done`, and the output must say
/// why (MPI's launcher's report of the dead rank, the survivor's timeout, or, over a network,
/// MPI's own report of the survivor's failed send to the dead rank). MPICH's launcher, killing
/// the survivor, at times loses every rank's last words (over TCP about one job in twelve), so
/// the job runs up to `tries` times until one says why; every run must end as above.
fn a_death_ends_the_job(name: &str, survivor_done: &str, env: &[(&str, &str)], tries: usize) {
    let mut env = env.to_vec();
    env.push(("MXRS_KVSTORE_TIMEOUT", "3"));
    let mut said = String::new();
    for _ in 0..tries {
        let start = Instant::now();
        let (ok, out, err) = launch(name, &env);
        assert!(
            job_failed(ok, &err),
            "the job should have failed:\n{out}\n{err}"
        );
        assert!(start.elapsed() < Duration::from_secs(60), "{out}\n{err}");
        assert!(!out.contains(survivor_done), "{out}\n{err}");
        said = format!("{out}{err}");
        let words = [
            "BAD TERMINATION",
            "did not complete within",
            "Fatal error in",
        ];
        if words.iter().any(|word| said.contains(word)) {
            return;
        }
    }
    panic!("no word of the dead rank in {tries} runs; the last:\n{said}");
}

#[test]
fn a_dying_rank() {
    if !in_rank() {
        return;
    }
    let rt = rt();
    let kv = KVStore::create(&rt, "dist_sync").unwrap();
    let v = rt.from_vec(vec![1f32; 4], &[4], Context::cpu(0)).unwrap();
    kv.init(0, &v).unwrap();
    if kv.rank() == 1 {
        // Dies as a crashed process does: by a signal, without a word.
        std::process::abort();
    }
    kv.push(0, &[&v], 0).unwrap();
    kv.pull(0, &[&v], 0).unwrap();
    rt.wait_all().unwrap();
    println!("rank0 finished");
}

#[test]
fn a_rank_that_finishes_first_leaves_the_others_to_finish() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    let (ok, out, err) = launch("a_rank_finishing_late", &[]);
    assert!(ok, "the job failed:\n{out}\n{err}");
    assert!(out.contains("rank1 finished"), "{out}\n{err}");
}

#[test]
fn a_rank_finishing_late() {
    if !in_rank() {
        return;
    }
    let rt = rt();
    let kv = KVStore::create(&rt, "dist_sync").unwrap();
    let v = rt.from_vec(vec![1f32; 4], &[4], Context::cpu(0)).unwrap();
    kv.init(0, &v).unwrap();
    kv.push(0, &[&v], 0).unwrap();
    kv.pull(0, &[&v], 0).unwrap();
    rt.wait_all().unwrap();
    if kv.rank() == 1 {
        // Still working (writing a checkpoint, say) when rank 0 exits: MPI's launcher must not
        // take rank 0's exit for a failure and kill this one.
        std::thread::sleep(Duration::from_secs(1));
        println!("rank1 finished");
    }
}

#[test]
fn dist_async_applies_every_push_on_rank_0() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    let (ok, out, err) = launch("dist_async_rank", &[]);
    assert!(ok, "the ranks failed:\n{out}\n{err}");
    for r in 0..2 {
        assert_eq!(lines(&out, r, "kind"), vec!["dist_async 2"], "{out}");
        assert_eq!(lines(&out, r, "init"), vec!["[1.0, 2.0, 3.0]"], "{out}");
        // Without an updater rank 1's push replaced the value.
        assert_eq!(lines(&out, r, "replaced"), vec!["[5.0, 5.0, 5.0]"], "{out}");
        // 5 + 3 pushes of 1 (rank 0) + 3 pushes of 2 (rank 1), each applied once.
        assert_eq!(
            lines(&out, r, "summed"),
            vec!["[14.0, 14.0, 14.0]"],
            "{out}"
        );
        // Rank 0 pushed twice reading the newest weight each time, then rank 1 pushed a
        // gradient of the weight before both: 3 updates, staleness 0, 0 and 2.
        assert_eq!(lines(&out, r, "staleness"), vec!["3 2 2"], "{out}");
    }
    // The failed update is told to the rank that pushed it, at its next pull.
    let failed = lines(&out, 1, "failed");
    assert_eq!(failed.len(), 1, "{out}");
    assert!(
        failed[0].contains("key 'bad' pushed by rank 1 failed") && failed[0].contains("no bad"),
        "{failed:?}"
    );
    assert!(
        lines(&out, 1, "save")[0].contains("runs on rank 0"),
        "{out}"
    );
}

#[test]
fn a_dist_async_barrier_at_once_after_create() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    let (ok, out, err) = launch("served_at_once_rank", &[("MXRS_KVSTORE_TIMEOUT", "10")]);
    assert!(ok, "the ranks failed:\n{out}\n{err}");
    for r in 0..2 {
        assert_eq!(lines(&out, r, "barriers"), vec!["20"], "{out}\n{err}");
    }
}

/// Creates `dist_async` stores one after another and calls `barrier` on each at once: rank 1's
/// barrier first asks rank 0's communication thread for its tally, so rank 0 must not run its
/// half of the barrier on the calling thread before that thread serves the new store.
#[test]
fn served_at_once_rank() {
    if !in_rank() {
        return;
    }
    let rt = rt();
    let mut rank = 0;
    let mut done = 0;
    for _ in 0..20 {
        let kv = KVStore::create(&rt, "dist_async").unwrap();
        rank = kv.rank();
        kv.barrier().unwrap();
        done += 1;
    }
    println!("rank{rank} barriers {done}");
}

#[test]
fn dist_async_rank() {
    if !in_rank() {
        return;
    }
    let rt = rt();
    let kv = KVStore::create(&rt, "dist_async").unwrap();
    let rank = kv.rank();
    let say = |tag: &str, what: String| println!("rank{rank} {tag} {what}");
    say("kind", format!("{} {}", kv.kind(), kv.num_workers()));
    let host = Context::cpu(0);
    let mine = [1f32, 2.0, 3.0].map(|v| v * (rank + 1) as f32);
    kv.init("w", &rt.from_vec(mine.to_vec(), &[3], host).unwrap())
        .unwrap();
    let out = rt.zeros(&[3], ndarray_ops::DType::F32, host).unwrap();
    kv.pull("w", &[&out], 0).unwrap();
    say("init", format!("{:?}", values(&out)));

    if rank == 1 {
        let v = rt.from_vec(vec![5f32; 3], &[3], host).unwrap();
        kv.push("w", &[&v], 0).unwrap();
    }
    kv.barrier().unwrap();
    kv.pull("w", &[&out], 0).unwrap();
    say("replaced", format!("{:?}", values(&out)));

    // Both ranks push at once, without pulls between: every push is applied, once. (Rank 1's
    // pushes follow its set_updater at once: that call's barrier keeps them from reaching rank
    // 0 before its updater is in place.)
    kv.set_updater(
        |_: &ndarray_ops::kvstore::Key, merged: &NDArray, stored: &NDArray| {
            stored.add_inplace(merged)
        },
    )
    .unwrap();
    for _ in 0..3 {
        let g = rt.from_vec(vec![(rank + 1) as f32; 3], &[3], host).unwrap();
        kv.push("w", &[&g], 0).unwrap();
    }
    kv.barrier().unwrap();
    kv.pull("w", &[&out], 0).unwrap();
    say("summed", format!("{:?}", values(&out)));

    // Staleness, in a store of its own: rank 1 reads version 0; rank 0 then pushes twice,
    // reading the newest weight before each; rank 1's gradient then arrives 2 updates late.
    let kv2 = KVStore::create(&rt, "dist_async").unwrap();
    let s = rt.zeros(&[2], ndarray_ops::DType::F32, host).unwrap();
    kv2.init(0, &s).unwrap();
    kv2.pull(0, &[&s], 0).unwrap();
    kv2.barrier().unwrap();
    if rank == 0 {
        for _ in 0..2 {
            kv2.pull(0, &[&s], 0).unwrap();
            kv2.push(0, &[&s], 0).unwrap();
        }
    }
    kv2.barrier().unwrap();
    if rank == 1 {
        kv2.push(0, &[&s], 0).unwrap();
    }
    kv2.barrier().unwrap();
    kv2.pull(0, &[&s], 0).unwrap();
    rt.wait_all().unwrap();
    let t = kv2.staleness().unwrap();
    say("staleness", format!("{} {} {}", t.updates, t.total, t.max));
    drop(kv2);

    // An update that fails on rank 0: the pushing rank hears of it at its next pull.
    let kv3 = KVStore::create(&rt, "dist_async").unwrap();
    kv3.init(
        "bad",
        &rt.zeros(&[2], ndarray_ops::DType::F32, host).unwrap(),
    )
    .unwrap();
    kv3.set_updater(
        |key: &ndarray_ops::kvstore::Key, _: &NDArray, _: &NDArray| {
            Err(ndarray_ops::NdError::Invalid {
                op: "updater".into(),
                reason: format!("no bad {key}"),
            })
        },
    )
    .unwrap();
    if rank == 1 {
        let g = rt.zeros(&[2], ndarray_ops::DType::F32, host).unwrap();
        kv3.push("bad", &[&g], 0).unwrap();
        kv3.barrier().unwrap();
        let o = rt.zeros(&[2], ndarray_ops::DType::F32, host).unwrap();
        kv3.pull("bad", &[&o], 0).unwrap();
        say("failed", o.wait_to_read().unwrap_err().to_string());
        let e = kv3
            .save_optimizer_states("/nonexistent/states")
            .unwrap_err();
        say("save", e.to_string());
    } else {
        kv3.barrier().unwrap();
    }
    drop(kv3);
    kv.barrier().unwrap();
}

#[test]
fn a_dead_rank_0_fails_a_dist_async_pull_within_the_timeout() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    a_death_ends_the_job("a_dead_async_server", "rank1 finished", &[], 1);
}

#[test]
fn a_dead_async_server() {
    if !in_rank() {
        return;
    }
    let rt = rt();
    let kv = KVStore::create(&rt, "dist_async").unwrap();
    let v = rt.from_vec(vec![1f32; 4], &[4], Context::cpu(0)).unwrap();
    kv.init(0, &v).unwrap();
    rt.wait_all().unwrap();
    if kv.rank() == 0 {
        std::process::abort();
    }
    kv.push(0, &[&v], 0).unwrap();
    kv.pull(0, &[&v], 0).unwrap();
    rt.wait_all().unwrap();
    println!("rank1 finished");
}

#[test]
fn dist_async_pulls_in_flight_are_answered_out_of_order() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("mxrs-async-pulls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let signal = dir.join("others-pulled");
    let (ok, out, err) = launch(
        "dist_async_pulls_in_flight",
        &[("MXRS_TEST_SIGNAL", signal.to_str().unwrap())],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "the ranks failed:\n{out}\n{err}");
    // Rank 1's pulls of the other keys were answered while key 0's weight was held on rank
    // 0 (pulls one at a time would have waited behind key 0's until the hold timed out).
    assert_eq!(lines(&out, 0, "hold"), vec!["released by rank 1"], "{out}");
    // Every reply landed in its own key's array.
    assert_eq!(lines(&out, 1, "pulled"), vec!["all 8 keys right"], "{out}");
}

#[test]
fn dist_async_pulls_in_flight() {
    if !in_rank() {
        return;
    }
    let signal = std::path::PathBuf::from(std::env::var("MXRS_TEST_SIGNAL").unwrap());
    let rt = rt();
    let kv = KVStore::create(&rt, "dist_async").unwrap();
    let host = Context::cpu(0);
    // Key k holds 4 + k copies of k; rank 0 keeps key 0's array as the store's own.
    let arrays: Vec<NDArray> = (0..8)
        .map(|k| rt.from_vec(vec![k as f32; 4 + k], &[4 + k], host).unwrap())
        .collect();
    kv.init_shared(0, &arrays[0]).unwrap();
    for (k, a) in arrays.iter().enumerate().skip(1) {
        kv.init(k as i32, a).unwrap();
    }
    rt.wait_all().unwrap();
    if kv.rank() == 0 {
        // Holds key 0's weight (an op writing it) until rank 1 says its other pulls came back,
        // or 20 s pass.
        let released = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = released.clone();
        let hold = engine::Op::asynchronous("hold", move |_, done| {
            std::thread::spawn(move || {
                let start = Instant::now();
                while start.elapsed() < Duration::from_secs(20) {
                    if signal.exists() {
                        flag.store(true, std::sync::atomic::Ordering::SeqCst);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                done.complete(Ok(()));
            });
        });
        rt.engine().push(hold.write(arrays[0].var())).unwrap();
        kv.barrier().unwrap();
        kv.barrier().unwrap();
        rt.wait_all().unwrap();
        let how = match released.load(std::sync::atomic::Ordering::SeqCst) {
            true => "released by rank 1",
            false => "timed out",
        };
        println!("rank0 hold {how}");
    } else {
        kv.barrier().unwrap();
        let outs: Vec<NDArray> = (0..8)
            .map(|k| rt.zeros(&[4 + k], ndarray_ops::DType::F32, host).unwrap())
            .collect();
        for (k, o) in outs.iter().enumerate() {
            kv.pull(k as i32, &[o], 0).unwrap();
        }
        for o in &outs[1..] {
            o.wait_to_read().unwrap();
        }
        std::fs::write(&signal, b"").unwrap();
        let right = outs
            .iter()
            .enumerate()
            .all(|(k, o)| values(o) == vec![k as f32; 4 + k]);
        println!(
            "rank1 pulled {}",
            if right {
                "all 8 keys right"
            } else {
                "wrong values"
            }
        );
        kv.barrier().unwrap();
    }
}

#[test]
fn a_dist_async_pull_rank_0_never_answers_ends_the_job_within_the_timeout() {
    if in_rank() || !have_mpiexec() {
        return;
    }
    a_timeout_ends_the_job(
        "an_unanswered_pull",
        "rank 1: the pull of key 0 from rank 0 did not complete within 2 s",
    );
}

#[test]
fn an_unanswered_pull() {
    if !in_rank() {
        return;
    }
    let rt = rt();
    let kv = KVStore::create(&rt, "dist_async").unwrap();
    let w = rt.from_vec(vec![1f32; 4], &[4], Context::cpu(0)).unwrap();
    kv.init_shared(0, &w).unwrap();
    rt.wait_all().unwrap();
    if kv.rank() == 0 {
        // Rank 0 is alive and serving, but key 0's weight stays held by an op that does not
        // finish within the test: its answer to the pull never runs.
        let hold = engine::Op::asynchronous("hold", |_, done| {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(30));
                done.complete(Ok(()));
            });
        });
        rt.engine().push(hold.write(w.var())).unwrap();
    }
    kv.barrier().unwrap();
    if kv.rank() == 1 {
        let out = rt
            .zeros(&[4], ndarray_ops::DType::F32, Context::cpu(0))
            .unwrap();
        kv.pull(0, &[&out], 0).unwrap();
        out.wait_to_read().unwrap();
        println!("rank1 finished");
    } else {
        // Waits outside any collective (whose own timeout would end the job first), its
        // communication thread serving.
        std::thread::sleep(Duration::from_secs(20));
    }
}
