//! Making arrays: a [`Runtime`]'s constructors (empty, filled, ranges, copies of host data).
//! They live with the array, not the runtime, so the runtime below knows nothing of arrays.

use std::sync::Arc;

use ndarray::ArrayD;
use storage::Context;

use super::NDArray;
use crate::error::{shape_error, Result};
use crate::runtime::Runtime;
use crate::{DType, Element};

impl Runtime {
    /// An array whose contents are unspecified until written.
    pub fn empty(self: &Arc<Self>, shape: &[usize], dtype: DType, ctx: Context) -> Result<NDArray> {
        NDArray::alloc(self, shape, dtype, ctx)
    }

    /// An array of `value` (converted to `dtype`).
    pub fn full(
        self: &Arc<Self>,
        shape: &[usize],
        value: f64,
        dtype: DType,
        ctx: Context,
    ) -> Result<NDArray> {
        let a = self.empty(shape, dtype, ctx)?;
        a.fill(value)?;
        Ok(a)
    }

    /// Zeros.
    pub fn zeros(self: &Arc<Self>, shape: &[usize], dtype: DType, ctx: Context) -> Result<NDArray> {
        self.full(shape, 0.0, dtype, ctx)
    }

    /// Ones.
    pub fn ones(self: &Arc<Self>, shape: &[usize], dtype: DType, ctx: Context) -> Result<NDArray> {
        self.full(shape, 1.0, dtype, ctx)
    }

    /// `start, start + step, ...` below `stop` (above, for a negative step), as a 1-D array.
    pub fn arange(
        self: &Arc<Self>,
        start: f64,
        stop: f64,
        step: f64,
        dtype: DType,
        ctx: Context,
    ) -> Result<NDArray> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !stop.is_finite() {
            return Err(crate::error::invalid(
                "arange",
                format!(
                    "start {start}, stop {stop}, step {step}: step must be finite and non-zero"
                ),
            ));
        }
        let n = ((stop - start) / step).ceil().max(0.0) as usize;
        crate::with_dtype!(dtype, T => {
            // Reserved fallibly: a range too long for memory is an error, not an abort.
            let mut v: Vec<T> = Vec::new();
            v.try_reserve_exact(n).map_err(|e| {
                crate::error::invalid(
                    "arange",
                    format!("start {start}, stop {stop}, step {step}: {n} elements: {e}"),
                )
            })?;
            v.extend((0..n).map(|i| T::from_f64(start + step * i as f64)));
            self.from_vec(v, &[n], ctx)
        })
    }

    /// Copies an `ndarray` array in.
    pub fn from_array<T: Element>(
        self: &Arc<Self>,
        a: &ArrayD<T>,
        ctx: Context,
    ) -> Result<NDArray> {
        let v: Vec<T> = a.iter().copied().collect();
        self.from_vec(v, a.shape(), ctx)
    }

    /// An array of `shape` and `dtype` on `ctx` holding `bytes`: the elements in row-major
    /// order, native byte order, exactly the array's size. One copy, made now (through host
    /// memory for a GPU context).
    pub fn from_bytes(
        self: &Arc<Self>,
        bytes: &[u8],
        shape: &[usize],
        dtype: DType,
        ctx: Context,
    ) -> Result<NDArray> {
        let n = crate::ops::element_count("from_bytes", shape)?;
        if bytes.len() != n * dtype.size() {
            return Err(shape_error(
                "from_bytes",
                "shape",
                shape,
                format!(
                    "{} bytes of {dtype} for the {} bytes given",
                    n * dtype.size(),
                    bytes.len()
                ),
            ));
        }
        if !ctx.is_cpu() {
            let host = self.from_bytes(bytes, shape, dtype, Context::cpu(0))?;
            return host.copy_to(ctx);
        }
        let a = self.empty(shape, dtype, ctx)?;
        // SAFETY: `a` was made just now and no one else holds it: no op has been pushed on its
        // var, so nothing reads or writes its block; the block holds `n * dtype.size()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), a.data_ptr(), bytes.len()) };
        Ok(a)
    }

    /// Copies a vector in, with a shape whose element count must match.
    pub fn from_vec<T: Element>(
        self: &Arc<Self>,
        data: Vec<T>,
        shape: &[usize],
        ctx: Context,
    ) -> Result<NDArray> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(shape_error(
                "from_vec",
                "shape",
                shape,
                format!("{} elements to hold the {} values given", n, data.len()),
            ));
        }
        let a = self.empty(shape, T::DTYPE, ctx)?;
        a.write_from(data)?;
        Ok(a)
    }
}
