//! # mxrs
//!
//! An MXNet-style deep-learning runtime: a threaded dependency engine with versioned variables,
//! pooled per-device storage, a memory planner, an asynchronous [`NDArray`] with MXNet's ops,
//! [`autograd`], a symbolic [`Executor`] with a gradient pass and a data-parallel trainer.
//!
//! One dependency brings every layer; most programs need only the [`prelude`]:
//!
//! ```
//! use mxrs::prelude::*;
//!
//! # fn main() -> mxrs::Result<()> {
//! let rt = Runtime::with_engine(EngineKind::ThreadedPerDevice);
//! let a = rt.arange(0.0, 6.0, 1.0, DType::F32, Context::cpu(0))?.reshape(&[2, 3])?;
//! let b = rt.full(&[3], 10.0, DType::F32, Context::cpu(0))?;
//! let c = (&a + &b)?; // returns at once; the engine computes it
//! assert_eq!(c.to_vec::<f32>()?, [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]);
//! # Ok(())
//! # }
//! ```
//!
//! ## Layers
//!
//! - [`engine`]: ops are closures with the variables they read and write; an engine runs them
//!   in parallel in an order equivalent to the push order, from any number of pushing threads.
//!   Three engines: [`EngineKind::Naive`] (inline, the reference), `ThreadedPooled` and
//!   `ThreadedPerDevice`.
//! - [`storage`]: [`Context`]s (`cpu(i)`, `gpu(i)`), device back ends, pooled managers with
//!   limits and statistics, and the memory-plan solvers ([`storage::plan`]).
//! - [`ndarray_ops`]: the [`Runtime`] (an engine plus storage), [`NDArray`] and its ops
//!   ([`invoke`] by MXNet name), [`autograd`], [`Symbol`]s with MXNet's JSON, inference and the
//!   gradient pass, the [`Executor`] binding a symbol in its planned arena, the
//!   [`DataParallel`] trainer and MXNet's files ([`ndfile`]).
//!
//! ## Autograd
//!
//! ```
//! use mxrs::prelude::*;
//!
//! # fn main() -> mxrs::Result<()> {
//! let rt = Runtime::with_engine(EngineKind::ThreadedPerDevice);
//! let mut x = rt.from_vec(vec![1.0f32, 2.0, 3.0], &[3], Context::cpu(0))?;
//! x.attach_grad(GradReq::Write)?;
//! let y = autograd::record(|| (&x * &x)?.sum(&[], false))?; // y = sum(x^2)
//! y.backward()?;
//! let dx = x.grad().map(|g| g.to_vec::<f32>()).transpose()?;
//! assert_eq!(dx, Some(vec![2.0, 4.0, 6.0]));
//! # Ok(())
//! # }
//! ```
//!
//! ## Symbols and the executor
//!
//! A graph built with the Symbol API (or read with [`Symbol::load`] from MXNet's JSON) binds from
//! its inputs' shapes; every other shape is inferred and the internal entries are planned into
//! one arena:
//!
//! ```
//! use std::collections::HashMap;
//! use mxrs::prelude::*;
//!
//! # fn main() -> mxrs::Result<()> {
//! let (data, w, b) = (Symbol::var("data"), Symbol::var("fc_weight"), Symbol::var("fc_bias"));
//! let fc = Symbol::op("FullyConnected", "fc", &[&data, &w, &b], Attrs::new().with("num_hidden", 4))?;
//! let net = Symbol::op("Activation", "relu", &[&fc], Attrs::new().with("act_type", "relu"))?;
//!
//! let rt = Runtime::with_engine(EngineKind::ThreadedPerDevice);
//! let shapes = HashMap::from([("data".to_string(), vec![2, 3])]);
//! let exe = Executor::simple_bind(&rt, Context::cpu(0), &net, &shapes)?;
//! exe.arg_dict()["fc_weight"].fill(0.5)?;
//! exe.arg_dict()["data"].fill(1.0)?;
//! exe.forward(false)?;
//! assert_eq!(exe.outputs()[0].shape(), [2, 4]);
//! assert_eq!(exe.outputs()[0].to_vec::<f32>()?, vec![1.5; 8]); // 3 inputs x 0.5, bias 0
//! # Ok(())
//! # }
//! ```
//!
//! ## Errors
//!
//! Every fallible call returns [`Result`], whose [`NdError`] prints as a sentence naming the op,
//! the argument, what was expected and what was found:
//!
//! ```
//! use mxrs::prelude::*;
//!
//! let rt = Runtime::with_engine(EngineKind::Naive);
//! let a = rt.full(&[2, 3], 1.0, DType::F32, Context::cpu(0)).unwrap();
//! let b = rt.full(&[4], 1.0, DType::F32, Context::cpu(0)).unwrap();
//! let err = (&a + &b).unwrap_err();
//! assert!(err.to_string().contains("shape"), "{err}");
//! ```

#![warn(missing_docs)]

pub use engine;
pub use ndarray_ops;
pub use storage;

pub use engine::{Engine, EngineBuilder, EngineKind};
pub use ndarray_ops::{
    autograd, invoke, invoke_on, ndfile, ops, plan, symbol, Attrs, BindOptions, DType,
    DataParallel, Element, Executor, GradReq, MemoryReport, NDArray, NdError, Result, Runtime, Sgd,
    Symbol,
};
pub use storage::Context;

/// What most programs use: arrays, symbols, the executor, contexts, engines and autograd.
pub mod prelude {
    pub use crate::{
        autograd, invoke, Attrs, BindOptions, Context, DType, DataParallel, EngineKind, Executor,
        GradReq, NDArray, NdError, Runtime, Sgd, Symbol,
    };
}

/// The README's Rust program, compiled and run as a doctest so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
