//! Storage managers: blocks never overlap, statistics add up, limits and errors, threads, and
//! every policy behaves the same from the outside.

use std::sync::Arc;

use proptest::prelude::*;
use storage::{Context, Handle, PoolKind, StorageConfig, StorageError, StorageManager};

#[derive(Clone, Debug)]
enum Step {
    Alloc(usize),
    Free(usize, bool),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0usize..5000).prop_map(Step::Alloc),
        1 => (5000usize..(3 << 20)).prop_map(Step::Alloc),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(i, d)| Step::Free(i, d)),
    ]
}

fn kind() -> impl Strategy<Value = PoolKind> {
    prop_oneof![
        Just(PoolKind::Unpooled),
        Just(PoolKind::PooledRound { cutoff: 1 << 20 }),
        Just(PoolKind::PooledExact),
        Just(PoolKind::Bfc),
    ]
}

fn check_consistent(m: &StorageManager, live: &[Handle]) {
    let s = m.stats();
    assert_eq!(s.in_use, live.iter().map(Handle::capacity).sum::<usize>());
    assert_eq!(s.requested, live.iter().map(Handle::size).sum::<usize>());
    assert!(s.reserved >= s.in_use && s.peak_reserved >= s.reserved && s.peak_in_use >= s.in_use);
    let mut ranges: Vec<(usize, usize)> = live
        .iter()
        .map(|h| (h.addr(), h.addr() + h.capacity()))
        .collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "live blocks overlap: {:x?} and {:x?}",
            w[0],
            w[1]
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn random_sequences_keep_blocks_apart_and_stats_exact(kind in kind(), steps in prop::collection::vec(step(), 1..150)) {
        let m = StorageManager::new(Context::cpu(0), kind);
        let mut live: Vec<Handle> = Vec::new();
        for s in steps {
            match s {
                Step::Alloc(size) => {
                    let mut h = m.alloc(size).unwrap();
                    prop_assert!(h.addr().is_multiple_of(64) && h.capacity() >= size.max(1));
                    // The memory is really ours: write both ends.
                    let end = h.capacity() - 1;
                    h.write(0, &[0xAB]).unwrap();
                    h.write(end, &[0xCD]).unwrap();
                    live.push(h);
                }
                Step::Free(i, direct) if !live.is_empty() => {
                    let h = live.swap_remove(i % live.len());
                    let mut b = [0u8; 1];
                    h.read(0, &mut b).unwrap();
                    prop_assert_eq!(b[0], 0xAB);
                    if direct { m.direct_free(h) } else { m.free(h) }
                }
                Step::Free(..) => {}
            }
            check_consistent(&m, &live);
        }
        drop(live);
        m.release_all();
        let s = m.stats();
        prop_assert_eq!((s.in_use, s.requested, s.reserved), (0, 0, 0));
        prop_assert_eq!(s.allocs, s.frees);
    }
}

#[test]
fn pools_reuse_blocks_and_unpooled_does_not() {
    for kind in PoolKind::ALL {
        let m = StorageManager::new(Context::cpu(0), kind);
        for _ in 0..10 {
            drop(m.alloc(100_000).unwrap());
        }
        let s = m.stats();
        let expect_hits = if kind == PoolKind::Unpooled { 0 } else { 9 };
        assert_eq!((s.cache_hits, s.allocs), (expect_hits, 10), "{kind:?}");
        assert_eq!(s.largest_request, 100_000);
        if kind != PoolKind::Unpooled {
            assert!(s.reserved > 0 && s.in_use == 0, "{kind:?} keeps its cache");
            m.release_all();
            assert_eq!(m.stats().reserved, 0, "{kind:?} releases its cache");
        }
    }
}

#[test]
fn direct_free_returns_memory_to_the_device() {
    for kind in PoolKind::ALL {
        let m = StorageManager::new(Context::cpu(0), kind);
        let h = m.alloc(3 << 20).unwrap();
        h.direct_free();
        assert_eq!(m.stats().reserved, 0, "{kind:?}");
    }
}

#[test]
fn round_pool_rounds_and_exact_pool_does_not() {
    let round = StorageManager::new(Context::cpu(0), PoolKind::PooledRound { cutoff: 1 << 20 });
    assert_eq!(round.alloc(65 * 1024).unwrap().capacity(), 128 * 1024);
    assert_eq!(round.alloc((1 << 20) + 1).unwrap().capacity(), 2 << 20);
    let exact = StorageManager::new(Context::cpu(0), PoolKind::PooledExact);
    assert_eq!(
        exact.alloc(65 * 1024 + 3).unwrap().capacity(),
        65 * 1024 + 64
    );
}

#[test]
fn a_limit_releases_the_cache_and_retries_once_before_failing() {
    for kind in PoolKind::ALL {
        let m = StorageManager::with_limit(Context::cpu(0), kind, Some(4 << 20));
        // Cache 1 MiB (BFC: a 2 MiB region), then ask for 3.5 MiB: it fits only once the cache
        // is released.
        drop(m.alloc(1 << 20).unwrap());
        let h = m.alloc(7 << 19).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let s = m.stats();
        if kind != PoolKind::Unpooled {
            assert_eq!(s.oom_retries, 1, "{kind:?}");
        }
        assert!(s.reserved <= 4 << 20);
        // Now a request that cannot fit at all: a clear error, nothing lost.
        let err = m.alloc(1 << 20).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, StorageError::OutOfMemory { .. }),
            "{kind:?}: {msg}"
        );
        for needle in [
            "cpu(0)",
            "asked for 1048576 bytes",
            "in use",
            "reserved",
            "cached",
            "limit of 4194304 bytes",
        ] {
            assert!(msg.contains(needle), "{kind:?}: {msg:?} lacks {needle:?}");
        }
        assert_eq!(m.stats().ooms, 1);
        drop(h);
        assert!(
            m.alloc(3 << 20).is_ok(),
            "{kind:?} recovers once memory is free"
        );
    }
}

#[test]
fn impossible_requests_are_errors_not_aborts() {
    let m = StorageManager::new(Context::cpu(0), PoolKind::Bfc);
    let e = m.alloc(usize::MAX - 10).unwrap_err();
    assert!(matches!(e, StorageError::TooLarge { .. }), "{e}");
    let e = m.alloc(1 << 60).unwrap_err();
    assert!(e.to_string().contains("cpu(0)"), "{e}");
}

#[test]
fn gpu_contexts_without_a_gpu_say_so() {
    if storage::gpu_available() {
        return;
    }
    for ctx in [Context::gpu(0), Context::cpu_pinned(0)] {
        let m = StorageManager::new(ctx, PoolKind::Bfc);
        let e = m.alloc(1024).unwrap_err();
        assert!(matches!(e, StorageError::Unavailable { .. }), "{e}");
        assert!(e.to_string().contains(&ctx.to_string()), "{e}");
    }
}

#[test]
fn threads_share_a_manager_safely() {
    for kind in PoolKind::ALL {
        let m = Arc::new(StorageManager::new(Context::cpu(0), kind));
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    let mut rng = 0x1234_5678_u64 + t as u64;
                    let mut next = move || {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng
                    };
                    let mut live: Vec<Handle> = Vec::new();
                    // Miri checks every byte it is given; fewer rounds keep it to minutes.
                    for _ in 0..if cfg!(miri) { 60 } else { 2000 } {
                        if next() % 2 == 0 || live.is_empty() {
                            let size = (next() % 200_000) as usize;
                            let mut h = m.alloc(size).unwrap();
                            let pattern = vec![t; h.capacity().min(256)];
                            h.write(0, &pattern).unwrap();
                            live.push(h);
                        } else {
                            let h = live.swap_remove((next() % live.len() as u64) as usize);
                            let mut got = vec![0u8; h.capacity().min(256)];
                            h.read(0, &mut got).unwrap();
                            assert!(
                                got.iter().all(|&b| b == t),
                                "another thread wrote into our block"
                            );
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = m.stats();
        assert_eq!((s.in_use, s.allocs), (0, s.frees), "{kind:?}");
    }
}

#[test]
fn summary_is_a_readable_table() {
    let m = StorageManager::with_limit(Context::cpu(1), PoolKind::Bfc, Some(1 << 30));
    let _h = m.alloc(1536).unwrap();
    let s = m.summary();
    for needle in [
        "storage of cpu(1) (bfc)",
        "in use",
        "reserved",
        "cache hits",
        "1.00 GiB",
    ] {
        assert!(s.contains(needle), "{s}");
    }
}

#[test]
fn environment_configures_pool_and_limits() {
    let env = storage::lookup_in;
    let c = StorageConfig::from_lookup(env(&[
        ("MXRS_STORAGE_POOL_TYPE", "round"),
        ("MXRS_POOL_ROUND_CUTOFF", "1M"),
        ("MXRS_MEMORY_LIMIT", "2G, cpu(1)=512M"),
    ]))
    .unwrap();
    assert_eq!(c.kind, PoolKind::PooledRound { cutoff: 1 << 20 });
    assert_eq!(c.limit_for(Context::cpu(0)), Some(2 << 30));
    assert_eq!(c.limit_for(Context::cpu(1)), Some(512 << 20));
    for (var, value, needle) in [
        ("MXRS_STORAGE_POOL_TYPE", "magic", "one of unpooled"),
        ("MXRS_POOL_ROUND_CUTOFF", "1000", "power of two"),
        ("MXRS_MEMORY_LIMIT", "tpu(0)=1G", "unknown device type"),
        ("MXRS_MEMORY_LIMIT", "cpu(0)=lots", "byte count"),
        ("MXRS_MEMORY_LIMIT", "", "not an empty value"),
        ("MXRS_MEMORY_LIMIT", " , ", "not an empty value"),
    ] {
        let pairs: &'static [(&'static str, &'static str)] = Box::leak(Box::new([(var, value)]));
        let e = StorageConfig::from_lookup(env(pairs)).unwrap_err();
        assert!(
            e.to_string().contains(var) && e.to_string().contains(needle),
            "{e}"
        );
    }
}
