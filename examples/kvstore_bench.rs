//! The sum across processes through a `dist_sync` KVStore against the MPI library's own
//! allreduce, on the same payloads in the same run (`--features mpi`, under `mpiexec`):
//!
//! `cargo build --release --features mpi --example kvstore_bench && mpiexec -n 2 target/release/examples/kvstore_bench [--json] [--max-bytes N]`
//!
//! Two ranks on one host sum through shared memory; to time them as between machines, make
//! MPICH (over UCX) send through TCP: `MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self mpiexec ...`.
//!
//! Per payload (1 KB to 64 MB, float32), the mean seconds of a push and a pull of one key
//! waited for (the store's whole round, as a trainer uses it: the array pulled into is the one
//! the store keeps, `init_shared`, so the sum over the ranks lands in it), of a `pushpull` of
//! the same and of `MPI_Allreduce`
//! alone, each as algorithm bandwidth (payload bytes per second); `ratio` and
//! `pushpull_ratio` are the store's bandwidth over MPI's.
//!
//! Then, as a trainer's gradients travel, many keys at once: per payload up to 1 MB, a round
//! of pushes of [`KEYS`] keys of that size, then their pulls, waited for, against as many
//! `MPI_Allreduce` calls of the payload, each on arrays of its own (what a store without
//! buckets would make); `ratio` is MPI's time over the store's. Rank 0 prints. JSON:
//! `{"processes", "results": [{"bytes", "store_seconds", "mpi_seconds", "store_gbps",
//! "mpi_gbps", "ratio", "pushpull_seconds", "pushpull_gbps", "pushpull_ratio"}],
//! "min_ratio_from_64k", "min_pushpull_ratio_from_64k",
//! "keys": [{"bytes", "keys", "store_seconds", "mpi_seconds", "ratio"}]}`.

#[path = "common/global_allocator.rs"]
mod global_allocator;

use std::time::Instant;

use clap::Parser;
use ndarray_ops::kvstore::KVStore;
use ndarray_ops::{DType, Runtime};
use storage::Context;

/// Bandwidth of sums across processes: the store against MPI's own allreduce.
#[derive(Parser)]
#[command(name = "kvstore_bench")]
struct Args {
    /// Print one JSON line.
    #[arg(long)]
    json: bool,
    /// The largest payload, in bytes (from 1 KB, times 4 each step).
    #[arg(long, default_value_t = 64 << 20)]
    max_bytes: usize,
}

/// Keys pushed together in a round of the many-keys measurement.
const KEYS: usize = 64;

/// Repetitions for a payload: about 64 MB moved, at least 5 and at most 2,000.
fn iterations(bytes: usize) -> usize {
    ((64 << 20) / bytes).clamp(5, 2000)
}

fn main() -> ndarray_ops::Result<()> {
    let args = Args::parse();
    let rt = Runtime::from_env(|b| b)?;
    let kv = KVStore::create(&rt, "dist_sync")?;
    let host = Context::cpu(0);
    let mut results = vec![];
    let mut bytes = 1024;
    let mut key = 0;
    while bytes <= args.max_bytes {
        let n = bytes / 4;
        let iters = iterations(bytes);
        let value = rt.full(&[n], 1.0, DType::F32, host)?;
        // As a trainer does: the store keeps the array pulled into as its own, so the sum lands
        // there with no copy.
        let out = rt.zeros(&[n], DType::F32, host)?;
        kv.init_shared(key, &out)?;
        // The store (push then pull, and pushpull) and MPI alternately, twice, keeping each
        // one's better mean.
        let (mut store, mut pushpull, mut mpi) = (f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..2 {
            kv.push(key, &[&value], 0)?;
            kv.pull(key, &[&out], 0)?;
            out.wait_to_read()?;
            kv.barrier()?;
            let start = Instant::now();
            for _ in 0..iters {
                kv.push(key, &[&value], 0)?;
                kv.pull(key, &[&out], 0)?;
                out.wait_to_read()?;
            }
            store = store.min(start.elapsed().as_secs_f64() / iters as f64);
            kv.barrier()?;
            let start = Instant::now();
            for _ in 0..iters {
                kv.pushpull(key, &[&value], &[&out], 0)?;
                out.wait_to_read()?;
            }
            pushpull = pushpull.min(start.elapsed().as_secs_f64() / iters as f64);
            mpi = mpi.min(kv.mpi_allreduce_seconds(n, iters)?);
        }
        check_sum(&kv, &out)?;
        let gbps = |s: f64| bytes as f64 / s / 1e9;
        results.push(serde_json::json!({
            "bytes": bytes, "store_seconds": store, "mpi_seconds": mpi,
            "store_gbps": gbps(store), "mpi_gbps": gbps(mpi), "ratio": mpi / store,
            "pushpull_seconds": pushpull, "pushpull_gbps": gbps(pushpull),
            "pushpull_ratio": mpi / pushpull,
        }));
        if !args.json && kv.rank() == 0 {
            println!(
                "{bytes:>10} B: store {:>9.1} us ({:>6.2} GB/s), MPI {:>9.1} us ({:>6.2} GB/s), ratio {:.2}, pushpull {:>9.1} us, ratio {:.2}",
                store * 1e6,
                gbps(store),
                mpi * 1e6,
                gbps(mpi),
                mpi / store,
                pushpull * 1e6,
                mpi / pushpull
            );
        }
        bytes *= 4;
        key += 1;
    }
    let keyed = many_keys(&rt, &kv, args.max_bytes.min(1 << 20), key, args.json)?;
    let min_from_64k = |field: &str| {
        results
            .iter()
            .filter(|r| r["bytes"].as_u64().unwrap_or(0) >= 64 << 10)
            .filter_map(|r| r[field].as_f64())
            .fold(f64::MAX, f64::min)
    };
    if args.json && kv.rank() == 0 {
        let report = serde_json::json!({
            "processes": kv.num_workers(), "results": results,
            "min_ratio_from_64k": min_from_64k("ratio"),
            "min_pushpull_ratio_from_64k": min_from_64k("pushpull_ratio"),
            "keys": keyed,
        });
        println!("{report}");
    }
    Ok(())
}

/// An error unless `out`, pulled after pushes of ones, holds the number of ranks.
fn check_sum(kv: &KVStore, out: &ndarray_ops::NDArray) -> ndarray_ops::Result<()> {
    let sum = out.to_vec::<f32>()?[0];
    match sum == kv.num_workers() as f32 {
        true => Ok(()),
        false => Err(ndarray_ops::NdError::Invalid {
            op: "kvstore_bench".into(),
            reason: format!("the sum of ones over the ranks came out {sum}"),
        }),
    }
}

/// The many-keys measurement (see the module's doc), payloads from 1 KB to `max_bytes`, on
/// keys numbered from `first_key`; each payload's line printed unless `json`.
fn many_keys(
    rt: &std::sync::Arc<Runtime>,
    kv: &KVStore,
    max_bytes: usize,
    first_key: i32,
    json: bool,
) -> ndarray_ops::Result<Vec<serde_json::Value>> {
    let host = Context::cpu(0);
    let mut rows = vec![];
    let mut bytes = 1024;
    let mut base = first_key;
    while bytes <= max_bytes {
        let n = bytes / 4;
        let iters = ((64 << 20) / (bytes * KEYS)).clamp(5, 500);
        let values = (0..KEYS)
            .map(|_| rt.full(&[n], 1.0, DType::F32, host))
            .collect::<ndarray_ops::Result<Vec<_>>>()?;
        let outs = (0..KEYS)
            .map(|_| rt.zeros(&[n], DType::F32, host))
            .collect::<ndarray_ops::Result<Vec<_>>>()?;
        let keys: Vec<i32> = (base..).take(KEYS).collect();
        for (k, o) in keys.iter().zip(&outs) {
            kv.init_shared(*k, o)?;
        }
        let round = || -> ndarray_ops::Result<()> {
            for (k, v) in keys.iter().zip(&values) {
                kv.push(*k, &[v], 0)?;
            }
            for (k, o) in keys.iter().zip(&outs) {
                kv.pull(*k, &[o], 0)?;
            }
            outs.iter().try_for_each(|o| o.wait_to_read())
        };
        let (mut store, mut mpi) = (f64::MAX, f64::MAX);
        for _ in 0..2 {
            round()?;
            kv.barrier()?;
            let start = Instant::now();
            for _ in 0..iters {
                round()?;
            }
            store = store.min(start.elapsed().as_secs_f64() / iters as f64);
            mpi = mpi.min(kv.mpi_allreduce_seconds_over(n, KEYS, iters * KEYS)? * KEYS as f64);
        }
        for o in &outs {
            check_sum(kv, o)?;
        }
        rows.push(serde_json::json!({
            "bytes": bytes, "keys": KEYS, "store_seconds": store, "mpi_seconds": mpi,
            "ratio": mpi / store,
        }));
        if !json && kv.rank() == 0 {
            println!(
                "{KEYS} keys x {bytes:>8} B: store {:>9.1} us, MPI {:>9.1} us ({KEYS} allreduces), ratio {:.2}",
                store * 1e6,
                mpi * 1e6,
                mpi / store
            );
        }
        bytes *= 4;
        base += KEYS as i32;
    }
    Ok(rows)
}
