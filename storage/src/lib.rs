//! `storage`: device contexts, raw device back ends, pooled storage managers with statistics and
//! limits, allocation traces, and (with the planner) solvers for static memory plans.
//!
//! ```
//! use storage::{Context, PoolKind, StorageManager};
//! let m = StorageManager::new(Context::cpu(0), PoolKind::Bfc);
//! let h = m.alloc(1 << 20).unwrap();
//! assert!(h.capacity() >= 1 << 20 && h.addr() % 64 == 0);
//! drop(h); // back to the pool
//! let again = m.alloc(1 << 20).unwrap();
//! assert_eq!(m.stats().cache_hits, 1);
//! # drop(again);
//! ```
//!
//! Nothing here knows about arrays, graphs or the engine; the engine uses [`Context`] only.

#![warn(missing_docs)]

mod context;
#[cfg(feature = "cuda")]
mod cuda;
mod device;
mod error;
mod manager;
pub mod plan;
mod pools;
mod registry;
mod stats;
mod trace;

pub use context::{Context, DeviceType, ParseContextError};
#[cfg(feature = "cuda")]
pub use cuda::{gpu_available, gpu_count};
pub use device::ALIGN;
pub use error::StorageError;
pub use manager::{Handle, PoolKind, StorageManager};
pub use registry::{env, lookup_in, StorageConfig, StorageRegistry};
pub use stats::{human, parse_bytes, Stats};
pub use trace::{ReplayReport, Trace, TraceEvent};

/// Whether a CUDA driver and at least one GPU can be used here (always false without the `cuda`
/// feature).
#[cfg(not(feature = "cuda"))]
pub fn gpu_available() -> bool {
    false
}

/// How many GPUs can be used here (always 0 without the `cuda` feature).
#[cfg(not(feature = "cuda"))]
pub fn gpu_count() -> usize {
    0
}
