//! A runtime: the engine that runs kernels and the storage managers that hold arrays. It makes
//! arrays; arrays of one runtime never mix with another's.

use std::sync::{Arc, OnceLock};

use engine::{Engine, EngineBuilder, EngineKind, Op};
use ndarray::ArrayD;
use parking_lot::RwLock;
use rand::SeedableRng;
use storage::{Context, StorageConfig, StorageManager, StorageRegistry};

use crate::array::NDArray;
use crate::error::{shape_error, Result};
use crate::resources::{device_seed, DeviceResources};
use crate::{DType, Element};

/// An engine plus per-context storage.
pub struct Runtime {
    engine: Arc<dyn Engine>,
    storage: StorageRegistry,
    resources: RwLock<Vec<Arc<DeviceResources>>>,
    seed: std::sync::atomic::AtomicU64,
    pub(crate) id: u64,
}

static NEXT_RUNTIME: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Runtime {
    /// A runtime on `engine` with storage configured by `storage`.
    pub fn new(engine: Arc<dyn Engine>, storage: StorageConfig) -> Arc<Runtime> {
        Arc::new(Runtime {
            engine,
            storage: StorageRegistry::new(storage),
            resources: RwLock::new(Vec::new()),
            seed: std::sync::atomic::AtomicU64::new(0),
            id: NEXT_RUNTIME.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// A runtime on a fresh engine of `kind` (default settings) with default storage.
    pub fn with_engine(kind: EngineKind) -> Arc<Runtime> {
        Runtime::new(EngineBuilder::new(kind).build(), StorageConfig::default())
    }

    /// The process-wide runtime, configured from the `MXRS_*` environment variables the first
    /// time it is asked for. A bad variable is reported then and every time after.
    pub fn global() -> Result<Arc<Runtime>> {
        static GLOBAL: OnceLock<Result<Arc<Runtime>>> = OnceLock::new();
        GLOBAL.get_or_init(|| Runtime::from_env(|b| b)).clone()
    }

    /// A fresh runtime configured from the `MXRS_*` environment variables as [`Runtime::global`]
    /// is, with `adjust` applied to the engine's settings after them (a program's own flags,
    /// such as an engine chosen on its command line).
    pub fn from_env(adjust: impl FnOnce(EngineBuilder) -> EngineBuilder) -> Result<Arc<Runtime>> {
        let engine = adjust(EngineBuilder::from_env()?).build();
        let storage = StorageConfig::from_env()?;
        Ok(Runtime::new(engine, storage))
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    /// The storage manager of `ctx`.
    pub fn storage(&self, ctx: Context) -> StorageManager {
        self.storage.manager(ctx)
    }

    /// Every storage manager used so far.
    pub fn storage_managers(&self) -> Vec<StorageManager> {
        self.storage.managers()
    }

    /// The resources of `ctx` (random generator, temp space), created on first use.
    pub(crate) fn resources(&self, ctx: Context) -> Arc<DeviceResources> {
        if let Some(r) = self.resources.read().iter().find(|r| r.ctx == ctx) {
            return r.clone();
        }
        let mut all = self.resources.write();
        if let Some(r) = all.iter().find(|r| r.ctx == ctx) {
            return r.clone();
        }
        let seed = self.seed.load(std::sync::atomic::Ordering::Relaxed);
        let r = DeviceResources::new(
            ctx,
            self.storage(ctx),
            self.engine.new_resource_var(),
            self.engine.new_resource_var(),
            seed,
        );
        all.push(r.clone());
        r
    }

    /// Reseeds every device's random generator (in push order: ops pushed before still draw from
    /// the old stream). The same seed gives the same random numbers on every engine.
    pub fn seed(&self, seed: u64) -> Result<()> {
        self.seed.store(seed, std::sync::atomic::Ordering::Relaxed);
        for r in self.resources.read().iter() {
            let res = r.clone();
            self.engine.push(
                Op::sync("seed", move |_| {
                    *res.rng.lock() = rand::rngs::StdRng::seed_from_u64(device_seed(seed, res.ctx));
                    Ok(())
                })
                .on(r.ctx)
                .write(&r.rng_var),
            )?;
        }
        Ok(())
    }

    /// Waits for every pushed op (and, for GPU ops, for their devices to run them); reports the
    /// first unreported kernel failure.
    pub fn wait_all(&self) -> Result<()> {
        self.engine.wait_for_all()?;
        #[cfg(feature = "cuda")]
        crate::gpu::cuda::settle_all()?;
        Ok(())
    }

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

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Runtime#{}({:?})", self.id, self.engine.kind())
    }
}
