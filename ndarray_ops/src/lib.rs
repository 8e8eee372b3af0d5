//! `ndarray_ops`: the array and graph layer on top of [`engine`] and [`storage`].
//!
//! The imperative `NDArray`, the op registry, symbols, graph passes and the executor live here
//! (see the NDArray and symbolic issues); today the crate only re-exports the layers below so that
//! the dependency direction `ndarray_ops -> engine -> storage` is fixed from the start.

pub use engine;
pub use storage;
