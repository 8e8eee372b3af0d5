//! `ndarray_ops`: the array and graph layer on top of [`engine`] and [`storage`].
//!
//! The asynchronous imperative [`NDArray`], made by a [`Runtime`] (an engine plus per-context
//! storage); the op registry and its CPU (and, with the `cuda` feature, GPU) kernels
//! ([`ops::invoke`]); imperative differentiation of recorded NDArray programs ([`autograd`]);
//! [`Symbol`]s with MXNet's JSON, inference and the gradient pass; the memory
//! planner's graph side ([`plan`]); the [`Executor`] that binds and runs a symbol in its planned
//! arena; the data-parallel trainer ([`DataParallel`]); and MXNet's NDArray files and
//! checkpoints ([`ndfile`]).
//!
//! ```
//! use ndarray_ops::{DType, Runtime};
//! use engine::EngineKind;
//! use storage::Context;
//!
//! let rt = Runtime::with_engine(EngineKind::ThreadedPerDevice);
//! let a = rt.arange(0.0, 6.0, 1.0, DType::F32, Context::cpu(0)).unwrap().reshape(&[2, 3]).unwrap();
//! let b = rt.full(&[3], 10.0, DType::F32, Context::cpu(0)).unwrap();
//! let c = (&a + &b).unwrap();                   // returns at once; the engine computes it
//! assert_eq!(c.to_vec::<f32>().unwrap(), vec![10.0, 11.0, 12.0, 13.0, 14.0, 15.0]);
//! ```

#![warn(missing_docs)]

mod array;
pub mod autograd;
mod dtype;
mod error;
mod executor;
mod files;
pub mod fuzz;
pub(crate) mod gemm;
mod imperative;
pub mod kvstore;
pub mod ndfile;
mod operators;
pub mod ops;
pub mod plan;
mod region;
mod resources;
mod runtime;
mod switches;
pub mod symbol;
mod trainer;

pub use array::NDArray;
pub use dtype::{DType, Element};
pub use error::{NdError, Result};
pub use executor::{BindOptions, Executor, MemoryPlanning, MemoryReport};
pub use imperative::{invoke, invoke_on};
pub use kvstore::{KVStore, Sgd};
pub use ops::{Attrs, GradReq};
pub use region::Span;
pub use resources::Resource;
pub use runtime::Runtime;
pub use symbol::Symbol;
pub use trainer::DataParallel;

pub use engine;
pub use storage;

/// The vector instruction set the CPU kernels run with here: `"avx512"` or `"avx2"` (the widest
/// this CPU has, or the one `MXRS_CPU` names), or `None` where they take the portable path.
pub fn cpu_vector_isa() -> Option<&'static str> {
    gemm::isa().map(|isa| match isa {
        gemm::Isa::Avx512 => "avx512",
        gemm::Isa::Avx2 => "avx2",
    })
}

/// The cuDNN version GPU convolutions run on (`9_14_00` for 9.14.0), or `None` where they take
/// the im2col path: the `cuda` feature is off, the library cannot be loaded, or `MXRS_CUDNN=0`.
pub fn cudnn_version() -> Option<usize> {
    #[cfg(feature = "cuda")]
    if ops::gpu::cudnn::available() {
        return Some(ops::gpu::cudnn::version());
    }
    None
}
