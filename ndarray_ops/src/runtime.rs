//! A runtime: the engine that runs kernels and the storage managers that hold arrays. It makes
//! arrays; arrays of one runtime never mix with another's.

use std::sync::{Arc, OnceLock};

use engine::{Engine, EngineBuilder, EngineKind, Op};
use parking_lot::RwLock;
use rand::SeedableRng;
use storage::{Context, StorageConfig, StorageManager, StorageRegistry};

use crate::error::Result;
use crate::resources::{device_seed, DeviceResources};

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
        crate::ops::gpu::cuda::settle_all()?;
        Ok(())
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Runtime#{}({:?})", self.id, self.engine.kind())
    }
}
