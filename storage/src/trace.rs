//! Allocation traces: a text format (`a <id> <bytes>` allocates, `f <id>` frees, `#` comments),
//! a replayer that runs a trace through any manager, recording (see
//! [`StorageManager::start_trace`]) and generators for the two traces committed in `traces/`.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::Instant;

use serde::Serialize;

use crate::{Handle, StorageError, StorageManager};

/// One line of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// Allocation `id` of `bytes` bytes.
    Alloc {
        /// Names the allocation in its later `Free`.
        id: u64,
        /// Bytes asked for.
        bytes: usize,
    },
    /// Frees allocation `id`.
    Free {
        /// The allocation.
        id: u64,
    },
}

/// A sequence of allocation events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// The events in order.
    pub events: Vec<TraceEvent>,
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.events {
            match e {
                TraceEvent::Alloc { id, bytes } => writeln!(f, "a {id} {bytes}")?,
                TraceEvent::Free { id } => writeln!(f, "f {id}")?,
            }
        }
        Ok(())
    }
}

impl FromStr for Trace {
    type Err = StorageError;

    /// Parses and checks a trace: every id is allocated once and freed at most once, after.
    fn from_str(text: &str) -> Result<Trace, StorageError> {
        let mut events = Vec::new();
        let mut live = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |reason: String| StorageError::Trace { line, reason };
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let parts: Vec<&str> = content.split_whitespace().collect();
            let num = |s: &str, what: &str| {
                s.parse::<u64>()
                    .map_err(|_| err(format!("{what} {s:?} is not a non-negative integer")))
            };
            match parts.as_slice() {
                ["a", id, bytes] => {
                    let id = num(id, "id")?;
                    let bytes = usize::try_from(num(bytes, "size")?)
                        .map_err(|_| err(format!("size {bytes} does not fit this machine")))?;
                    if live.insert(id, line).is_some() {
                        return Err(err(format!("id {id} is allocated again while still live")));
                    }
                    events.push(TraceEvent::Alloc { id, bytes });
                }
                ["f", id] => {
                    let id = num(id, "id")?;
                    if live.remove(&id).is_none() {
                        return Err(err(format!("id {id} is freed but not live")));
                    }
                    events.push(TraceEvent::Free { id });
                }
                _ => {
                    return Err(err(format!(
                        "expected 'a <id> <bytes>' or 'f <id>', found {content:?}"
                    )))
                }
            }
        }
        Ok(Trace { events })
    }
}

/// What replaying a trace through a manager measured.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    /// The manager's policy.
    pub manager: String,
    /// Peak bytes held from the device.
    pub peak_reserved: usize,
    /// Peak bytes asked for and live.
    pub peak_requested: usize,
    /// Peak bytes in live blocks (after rounding).
    pub peak_in_use: usize,
    /// `peak_reserved / peak_requested`.
    pub fragmentation: f64,
    /// Wall time of the replay.
    pub replay_ms: f64,
    /// Allocations served from the cache.
    pub cache_hits: u64,
    /// Allocations that went to the device.
    pub device_allocs: u64,
}

impl Trace {
    /// Runs the trace through `manager` (starting from its current state, peaks reset), then
    /// frees whatever the trace left live.
    pub fn replay(&self, manager: &StorageManager) -> Result<ReplayReport, StorageError> {
        manager.reset_peak();
        let before = manager.stats();
        let mut live: HashMap<u64, Handle> = HashMap::with_capacity(1024);
        let t = Instant::now();
        for e in &self.events {
            match *e {
                TraceEvent::Alloc { id, bytes } => {
                    live.insert(id, manager.alloc(bytes)?);
                }
                TraceEvent::Free { id } => {
                    live.remove(&id);
                }
            }
        }
        let replay_ms = t.elapsed().as_secs_f64() * 1e3;
        drop(live);
        let s = manager.stats();
        Ok(ReplayReport {
            manager: manager.kind().name().to_string(),
            peak_reserved: s.peak_reserved,
            peak_requested: s.peak_requested,
            peak_in_use: s.peak_in_use,
            fragmentation: s.fragmentation(),
            replay_ms,
            cache_hits: s.cache_hits - before.cache_hits,
            device_allocs: s.device_allocs - before.device_allocs,
        })
    }

    /// The largest total of live requested bytes at any point.
    pub fn peak_live_bytes(&self) -> usize {
        let mut sizes = HashMap::new();
        let (mut live, mut peak) = (0usize, 0usize);
        for e in &self.events {
            match *e {
                TraceEvent::Alloc { id, bytes } => {
                    sizes.insert(id, bytes);
                    live += bytes;
                    peak = peak.max(live);
                }
                TraceEvent::Free { id } => live -= sizes.remove(&id).unwrap_or(0),
            }
        }
        peak
    }

    /// A synthetic training loop: `steps` steps of a ResNet-like forward and backward at batch
    /// 32. Weights, their gradients and optimizer state live throughout; each forward layer
    /// keeps its output until the backward pass reaches it (LIFO-ish frees), takes short-lived
    /// workspace, and the backward pass allocates gradients of activations that die one layer
    /// later.
    pub fn synthetic_training(steps: usize) -> Trace {
        let mut b = Builder::default();
        // (channels, spatial) per stage, four stages, a few layers each, as in ResNet-18/34.
        let stages = [
            (64usize, 56usize, 4usize),
            (128, 28, 4),
            (256, 14, 4),
            (512, 7, 4),
        ];
        let batch = 32usize;
        let f32s = |n: usize| n * 4;
        let mut layers = vec![(3usize, 224usize, 64usize, 112usize, 7usize)];
        let mut cin = 64;
        for &(c, s, n) in &stages {
            for _ in 0..n {
                layers.push((cin, s, c, s, 3));
                cin = c;
            }
        }
        let weights: Vec<usize> = layers
            .iter()
            .map(|&(ci, _, co, _, k)| f32s(ci * co * k * k))
            .collect();
        let mut persistent = Vec::new();
        for &w in &weights {
            persistent.push(b.alloc(w)); // weight
            persistent.push(b.alloc(w)); // gradient
            persistent.push(b.alloc(w)); // momentum
        }
        for step in 0..steps {
            let input = b.alloc(f32s(batch * 3 * 224 * 224));
            let mut acts = Vec::new();
            for (i, &(_, _, co, so, k)) in layers.iter().enumerate() {
                let ws = b.alloc(f32s(co * k * k * so * 8 + 1024 * (i % 3)));
                let out = b.alloc(f32s(batch * co * so * so));
                let bn = b.alloc(f32s(batch * co * so * so));
                b.free(ws);
                let stat = b.alloc(f32s(co * 2));
                acts.push((out, bn, stat));
            }
            let logits = b.alloc(f32s(batch * 1000 + step % 2));
            let mut grad = b.alloc(f32s(batch * 1000));
            b.free(logits);
            for (i, (out, bn, stat)) in acts.into_iter().enumerate().rev() {
                let (_, _, co, so, k) = layers[i];
                let ws = b.alloc(f32s(co * k * k * so * 8));
                let g_in = b.alloc(f32s(batch * layers[i].0 * layers[i].1 * layers[i].1));
                b.free(ws);
                b.free(grad);
                b.free(stat);
                b.free(bn);
                b.free(out);
                grad = g_in;
            }
            b.free(grad);
            b.free(input);
        }
        for p in persistent.into_iter().rev() {
            b.free(p);
        }
        b.trace
    }

    /// Adversarial sizes: just above powers of two (worst case for rounding), tiny and huge
    /// requests interleaved, random lifetimes, and a few long-lived blocks pinning fragments.
    /// Deterministic for a given seed.
    pub fn synthetic_stress(events: usize, seed: u64) -> Trace {
        let mut b = Builder::default();
        let mut rng = SplitMix(seed);
        let mut live: Vec<u64> = Vec::new();
        let mut pinned = Vec::new();
        while b.trace.events.len() < events {
            let r = rng.next() % 100;
            if r < 45 || live.is_empty() {
                let size = match rng.next() % 6 {
                    0 => (1usize << (rng.next() % 24 + 6)) + 1 + (rng.next() % 64) as usize,
                    1 => (rng.next() % 512) as usize + 1,
                    2 => (rng.next() % (8 << 20)) as usize + 1,
                    3 => ((rng.next() % 48) as usize + 17) << 20,
                    4 => ((rng.next() % 16) as usize + 1) * 4096 * 3,
                    _ => (1usize << (rng.next() % 20 + 8)) - (rng.next() % 32) as usize,
                };
                let id = b.alloc(size);
                if rng.next().is_multiple_of(50) {
                    pinned.push(id);
                } else {
                    live.push(id);
                }
            } else {
                let i = (rng.next() % live.len() as u64) as usize;
                b.free(live.swap_remove(i));
            }
        }
        for id in live.into_iter().chain(pinned) {
            b.free(id);
        }
        b.trace
    }
}

#[derive(Default)]
struct Builder {
    next: u64,
    trace: Trace,
}

impl Builder {
    fn alloc(&mut self, bytes: usize) -> u64 {
        let id = self.next;
        self.next += 1;
        self.trace.events.push(TraceEvent::Alloc { id, bytes });
        id
    }

    fn free(&mut self, id: u64) {
        self.trace.events.push(TraceEvent::Free { id });
    }
}

/// A small, fixed pseudo-random generator, so generated traces never change with a dependency.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
