//! One manager per context, configured by a builder or by environment variables read once.

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::RwLock;

use crate::stats::parse_bytes;
use crate::{Context, PoolKind, StorageError, StorageManager};

/// The environment variables the storage layer reads (see docs/configuration.md).
pub mod env {
    /// `unpooled`, `pooled_round`, `pooled_exact` or `bfc`.
    pub const POOL_TYPE: &str = "MXRS_STORAGE_POOL_TYPE";
    /// `PooledRound`'s cutoff in bytes (a power of two; suffixes K, M, G allowed).
    pub const ROUND_CUTOFF: &str = "MXRS_POOL_ROUND_CUTOFF";
    /// A byte limit for every context (`4G`), or per context (`cpu(0)=1G,gpu(0)=8G`).
    pub const MEMORY_LIMIT: &str = "MXRS_MEMORY_LIMIT";
}

/// Settings for the managers of every context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageConfig {
    /// The policy of every manager.
    pub kind: PoolKind,
    /// A limit for contexts not named in `limits`.
    pub default_limit: Option<usize>,
    /// Per-context limits.
    pub limits: HashMap<Context, usize>,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            kind: PoolKind::Bfc,
            default_limit: None,
            limits: HashMap::new(),
        }
    }
}

/// A `lookup` for the `from_lookup` constructors (this crate's, the engine's, the GPU kernel
/// cache's) that reads settings from `pairs` instead of the environment: for tests, or a
/// program that keeps its settings elsewhere.
pub fn lookup_in<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

impl StorageConfig {
    /// Defaults (`bfc`, no limits) overridden by the `MXRS_*` environment variables.
    pub fn from_env() -> Result<Self, StorageError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`StorageConfig::from_env`], reading variables through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, StorageError> {
        let bad = |what: &str, value: &str, expected: &str| StorageError::Config {
            what: what.into(),
            value: value.into(),
            expected: expected.into(),
        };
        let mut c = StorageConfig::default();
        if let Some(v) = lookup(env::POOL_TYPE) {
            c.kind = PoolKind::parse(&v).ok_or_else(|| {
                bad(
                    env::POOL_TYPE,
                    &v,
                    "one of unpooled, pooled_round, pooled_exact, bfc",
                )
            })?;
        }
        if let Some(v) = lookup(env::ROUND_CUTOFF) {
            let cutoff = parse_bytes(&v)
                .filter(|n| n.is_power_of_two() && *n >= 64)
                .ok_or_else(|| bad(env::ROUND_CUTOFF, &v, "a power of two of at least 64 bytes"))?;
            if let PoolKind::PooledRound { .. } = c.kind {
                c.kind = PoolKind::PooledRound { cutoff };
            }
        }
        if let Some(v) = lookup(env::MEMORY_LIMIT) {
            let expected = "a byte count (4G) or a list like cpu(0)=1G,gpu(0)=8G";
            // An empty value would set no limit at all, silently: unset the variable for that.
            if v.split(',').all(|p| p.trim().is_empty()) {
                return Err(bad(
                    env::MEMORY_LIMIT,
                    &v,
                    "a byte count (4G) or a list like cpu(0)=1G,gpu(0)=8G, not an empty value \
                     (unset the variable for no limit)",
                ));
            }
            for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                match part.split_once('=') {
                    None => {
                        c.default_limit = Some(
                            parse_bytes(part)
                                .ok_or_else(|| bad(env::MEMORY_LIMIT, &v, expected))?,
                        )
                    }
                    Some((ctx, bytes)) => {
                        let ctx: Context = ctx.parse().map_err(|e: crate::ParseContextError| {
                            bad(env::MEMORY_LIMIT, &v, &e.to_string())
                        })?;
                        let bytes = parse_bytes(bytes)
                            .ok_or_else(|| bad(env::MEMORY_LIMIT, &v, expected))?;
                        c.limits.insert(ctx, bytes);
                    }
                }
            }
        }
        Ok(c)
    }

    /// The limit for `ctx`.
    pub fn limit_for(&self, ctx: Context) -> Option<usize> {
        self.limits.get(&ctx).copied().or(self.default_limit)
    }
}

/// The managers of every context, created on first use.
#[derive(Debug)]
pub struct StorageRegistry {
    config: StorageConfig,
    /// Few contexts per process: a list under a read-mostly lock is the cheapest lookup.
    managers: RwLock<Vec<StorageManager>>,
}

impl StorageRegistry {
    /// A registry with these settings.
    pub fn new(config: StorageConfig) -> Self {
        StorageRegistry {
            config,
            managers: RwLock::new(Vec::new()),
        }
    }

    /// The process-wide registry, configured from the environment the first time it is asked
    /// for. A bad variable is reported then and every time after.
    pub fn global() -> Result<&'static StorageRegistry, StorageError> {
        static GLOBAL: OnceLock<Result<StorageRegistry, StorageError>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| StorageConfig::from_env().map(StorageRegistry::new))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The manager of `ctx`.
    pub fn manager(&self, ctx: Context) -> StorageManager {
        if let Some(m) = self.managers.read().iter().find(|m| m.ctx() == ctx) {
            return m.clone();
        }
        let mut all = self.managers.write();
        if let Some(m) = all.iter().find(|m| m.ctx() == ctx) {
            return m.clone();
        }
        let m = StorageManager::with_limit(ctx, self.config.kind, self.config.limit_for(ctx));
        all.push(m.clone());
        m
    }

    /// The settings.
    pub fn config(&self) -> &StorageConfig {
        &self.config
    }

    /// Every manager created so far.
    pub fn managers(&self) -> Vec<StorageManager> {
        let mut v: Vec<_> = self.managers.read().clone();
        v.sort_by_key(|m| m.ctx());
        v
    }
}
