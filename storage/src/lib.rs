//! `storage`: device contexts, raw device back ends, pooled storage managers with statistics and
//! limits, and solvers for static memory plans.
//!
//! Nothing here knows about arrays, graphs or the engine; the engine uses [`Context`] only.

#![warn(missing_docs)]

mod context;

pub use context::{Context, DeviceType, ParseContextError};
