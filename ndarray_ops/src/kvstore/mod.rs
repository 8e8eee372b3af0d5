//! KVStore: keyed values with a store-side update, as MXNet's KVStore.
//!
//! A store holds one array per key ([`KVStore::init`]). [`KVStore::push`] sums the values given
//! for a key (one per device) into a buffer on the store's device, then applies the updater to
//! the stored value (`update(key, merged, stored)`: an optimizer step) or, without one, makes
//! the sum the stored value. [`KVStore::pull`] copies the stored value into each output. Every
//! step is an engine op ordered by the arrays' vars, so calls return at once and a pull sees
//! every push before it; the ops carry the call's priority, so among runnable ops the engine
//! runs higher ones first (a trainer gives the first layers' pulls the highest, as the next
//! forward pass needs them first).
//!
//! Kinds: `local` keeps values and runs the sum and the update on the CPU; `device` on the
//! device of the value given to `init` (gradients on GPUs stay there). Keys are integers or
//! strings. `dist_sync` and `dist_device_sync` (the `mpi` feature; launched with `mpiexec`) add
//! a sum across processes after the local one: every rank runs the same update on the same sum,
//! so every rank holds the same weights (see `dist`). `dist_async` sends each rank's sum to
//! rank 0, which applies it as it arrives; a pull fetches rank 0's weight as it is then, and the
//! store reports how stale the gradients were (see `dist_async`).
//!
//! Two locks: the updater's, held through a whole push (sum and update, so that two threads
//! pushing one key cannot interleave their sums in the key's buffer), and the table's, held
//! briefly by every call. An updater may so pull from its store; a push or any updater change
//! from inside the updater (which would wait for itself) is an error, not a hang.

mod bucket;
#[cfg(feature = "mpi")]
mod dist;
#[cfg(feature = "mpi")]
mod dist_async;
mod key;
mod optimizer;

use std::collections::BTreeMap;
use std::fmt;
use std::mem::take;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use storage::Context;

use bucket::{bucket_limit, Bucket, Pending, ALONE_BYTES};
pub use key::Key;
pub use optimizer::{Optimizer, Sgd, Updater};

use crate::error::{invalid, shape_error, Result};
use crate::imperative::{prepare, Invocation};
use crate::ops::names::op_name;
use crate::ops::Attrs;
use crate::{ndfile, NDArray, Runtime};

/// Where a store keeps its values and runs its sums and updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// On the CPU (`local`).
    Local,
    /// On the device of each key's initial value (`device`).
    Device,
    /// On the CPU, summed across processes (`dist_sync`).
    DistSync,
    /// On the device of each key's initial value, summed across processes
    /// (`dist_device_sync`).
    DistDeviceSync,
    /// On the CPU; rank 0 applies every rank's pushes as they arrive (`dist_async`).
    DistAsync,
}

impl Kind {
    /// MXNet's name of the kind.
    fn name(self) -> &'static str {
        match self {
            Kind::Local => "local",
            Kind::Device => "device",
            Kind::DistSync => "dist_sync",
            Kind::DistDeviceSync => "dist_device_sync",
            Kind::DistAsync => "dist_async",
        }
    }

    /// Whether values are kept on the CPU (else on each key's device).
    fn on_cpu(self) -> bool {
        matches!(self, Kind::Local | Kind::DistSync | Kind::DistAsync)
    }

    /// Whether the store spans processes.
    fn is_dist(self) -> bool {
        matches!(
            self,
            Kind::DistSync | Kind::DistDeviceSync | Kind::DistAsync
        )
    }

    /// Whether every push is summed over the processes before its update.
    fn sums_ranks(self) -> bool {
        matches!(self, Kind::DistSync | Kind::DistDeviceSync)
    }
}

/// How stale the gradients a `dist_async` store applied were: for each update, how many
/// updates of the same key were applied between the pull of the weight the gradient was
/// computed from and the gradient's arrival (the updates the gradient did not see).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Staleness {
    /// Updates applied, over every key and rank.
    pub updates: u64,
    /// Their staleness, summed.
    pub total: u64,
    /// The largest.
    pub max: u64,
}

impl Staleness {
    /// The mean staleness of an update (0 with none).
    pub fn mean(&self) -> f64 {
        self.total as f64 / self.updates.max(1) as f64
    }

    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    fn record(&mut self, stale: u64) {
        self.updates += 1;
        self.total += stale;
        self.max = self.max.max(stale);
    }
}

/// One key's arrays.
struct Entry {
    /// The value, on the store's device for this key.
    stored: NDArray,
    /// Where a push of several values sums them.
    merged: NDArray,
    /// Per pushed value's position, its copy on the stored value's device (made on the first
    /// push that gives a value from another device).
    staged: Vec<Option<NDArray>>,
    /// Across processes: where the sum over the ranks lands.
    reduced: Option<NDArray>,
    /// In a `dist_async` store: the key's number (its place in the order of inits).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    index: u32,
    /// The sum's attributes, for the last count of values summed (kept: a map made per push
    /// would be parsed per push).
    sum_attrs: (usize, Attrs),
}

/// A key-value store over one runtime's engine.
pub struct KVStore {
    rt: Arc<Runtime>,
    kind: Kind,
    /// The store's identity (for the updater's re-entry check).
    id: u64,
    #[cfg(feature = "mpi")]
    comm: Option<&'static dist::Comm>,
    /// A `dist_async` store's keys, as rank 0 serves them.
    #[cfg(feature = "mpi")]
    table: Option<Arc<dist_async::Table>>,
    entries: Mutex<BTreeMap<Key, Entry>>,
    /// Shared with a `dist_async` store's table, whose updates rank 0 runs for the others.
    updater: Arc<Mutex<Option<Box<dyn Updater>>>>,
    /// Across processes: the values waiting to be summed over the ranks.
    bucket: Mutex<Bucket>,
}

impl fmt::Debug for KVStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KVStore")
            .field("kind", &self.kind)
            .field("keys", &self.entries.lock().len())
            .finish()
    }
}

/// The error of a call naming a key the store was not given.
fn unknown(op: &str, key: &Key) -> crate::NdError {
    invalid(
        &format!("kvstore {op}"),
        format!("key {key} was not initialized (call init first)"),
    )
}

impl KVStore {
    /// A store of kind `name`: `local` or `device` (the `dist_*` kinds need the `mpi` feature
    /// and a launch under `mpiexec`). Every rank creates its `dist_async` stores at the same
    /// points of its program: the creation waits for the other ranks, so that rank 0 serves a
    /// store before any rank sends it a request.
    pub fn create(rt: &Arc<Runtime>, name: &str) -> Result<KVStore> {
        let kind = match name {
            "local" | "local_update_cpu" | "local_allreduce_cpu" => Kind::Local,
            "device" | "local_allreduce_device" => Kind::Device,
            "dist_sync" => Kind::DistSync,
            "dist_device_sync" | "dist_sync_device" => Kind::DistDeviceSync,
            "dist_async" => Kind::DistAsync,
            other => {
                return Err(invalid(
                    "kvstore create",
                    format!(
                        "unknown kind '{other}' (local, device, dist_sync, dist_device_sync, \
                         dist_async)"
                    ),
                ))
            }
        };
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let updater: Arc<Mutex<Option<Box<dyn Updater>>>> = Arc::default();
        #[cfg(feature = "mpi")]
        let comm = match kind.is_dist() {
            true => Some(dist::comm()?),
            false => None,
        };
        #[cfg(feature = "mpi")]
        let table = match (kind, comm) {
            (Kind::DistAsync, Some(c)) => {
                let table = dist_async::Table::new(c, rt, updater.clone(), id);
                // On rank 0 the barrier follows the table to the communication thread.
                c.run(
                    format!("the creation of dist_async store {}", table.id),
                    dist::Work::Barrier,
                )?;
                Some(table)
            }
            _ => None,
        };
        #[cfg(not(feature = "mpi"))]
        if kind.is_dist() {
            return Err(invalid(
                "kvstore create",
                format!(
                    "'{name}' runs across processes over MPI: build with the `mpi` feature and \
                     launch with mpiexec"
                ),
            ));
        }
        Ok(KVStore {
            rt: rt.clone(),
            kind,
            id,
            #[cfg(feature = "mpi")]
            comm,
            #[cfg(feature = "mpi")]
            table,
            entries: Mutex::new(BTreeMap::new()),
            updater,
            bucket: Mutex::new(Bucket::default()),
        })
    }

    /// The kind's MXNet name.
    pub fn kind(&self) -> &'static str {
        self.kind.name()
    }

    /// This process's rank among the store's workers (0 for a store within one process).
    pub fn rank(&self) -> usize {
        #[cfg(feature = "mpi")]
        if let Some(c) = self.comm {
            return c.rank();
        }
        0
    }

    /// How many worker processes share the store (1 within one process).
    pub fn num_workers(&self) -> usize {
        #[cfg(feature = "mpi")]
        if let Some(c) = self.comm {
            return c.size();
        }
        1
    }

    /// Waits until every worker reaches the barrier: at once within one process. In a
    /// `dist_async` store, rank 0 has also taken every push made before the barrier, so a pull
    /// after it sees them.
    pub fn barrier(&self) -> Result<()> {
        self.flush("barrier")?;
        #[cfg(feature = "mpi")]
        if let Some(c) = self.comm {
            if let (Some(t), true) = (&self.table, c.rank() != 0) {
                dist_async::sync(c, t)?;
            }
            return c.run("barrier".to_string(), dist::Work::Barrier);
        }
        Ok(())
    }

    /// Whether the store applies each process's pushes as they arrive (`dist_async`) instead of
    /// summing them over the processes first: a trainer then scales a gradient by its own
    /// batch, not the global one.
    pub fn is_async(&self) -> bool {
        self.kind == Kind::DistAsync
    }

    /// A `dist_async` store's staleness so far: on rank 0 every update's; on the others as rank
    /// 0 told them at their last pull or barrier. `None` for the other kinds.
    pub fn staleness(&self) -> Option<Staleness> {
        #[cfg(feature = "mpi")]
        if let Some(t) = &self.table {
            return Some(t.tally());
        }
        None
    }

    /// The mean seconds of the MPI library's own allreduce of `elements` floats over this
    /// store's processes, `iters` times (every rank must call it): the floor a store's sums are
    /// measured against. An error for a store within one process.
    pub fn mpi_allreduce_seconds(&self, elements: usize, iters: usize) -> Result<f64> {
        self.mpi_allreduce_seconds_over(elements, 1, iters)
    }

    /// [`KVStore::mpi_allreduce_seconds`] through `buffers` pairs of arrays in turn, as a
    /// trainer's gradients lie in arrays of their own (with many, they come from memory rather
    /// than a cache).
    pub fn mpi_allreduce_seconds_over(
        &self,
        elements: usize,
        buffers: usize,
        iters: usize,
    ) -> Result<f64> {
        #[cfg(feature = "mpi")]
        if let Some(c) = self.comm {
            let seconds = Arc::new(Mutex::new(0.0));
            let work = dist::Work::Measure {
                len: elements,
                buffers,
                iters,
                seconds: seconds.clone(),
            };
            c.run(format!("the MPI allreduce of {elements} floats"), work)?;
            return Ok(*seconds.lock());
        }
        let _ = (elements, buffers, iters);
        Err(invalid(
            "kvstore",
            format!("a '{}' store does not span processes", self.kind()),
        ))
    }

    /// The device a key's value initialized from `value` lives on.
    fn home(&self, value: &NDArray) -> Context {
        match self.kind.on_cpu() {
            true => Context::cpu(0),
            false => value.ctx(),
        }
    }

    /// Stores a copy of `value` under `key`. A key is initialized once.
    pub fn init(&self, key: impl Into<Key>, value: &NDArray) -> Result<()> {
        self.init_entry(key.into(), value, false)
    }

    /// Like [`KVStore::init`], but where `value` is on the device the store keeps the key on,
    /// the store keeps `value` itself: a pull into it then costs nothing. For a trainer whose
    /// first device's weights are the stored ones; nothing else may write `value`.
    pub fn init_shared(&self, key: impl Into<Key>, value: &NDArray) -> Result<()> {
        self.init_entry(key.into(), value, true)
    }

    /// Stores a copy of `value` under `key` and copies it into every array of `outs`, as
    /// MXNet's `broadcast`: across processes every rank's `outs` get rank 0's value.
    pub fn broadcast(
        &self,
        key: impl Into<Key>,
        value: &NDArray,
        outs: &[&NDArray],
        priority: i32,
    ) -> Result<()> {
        let key = key.into();
        self.init(key.clone(), value)?;
        self.pull(key, outs, priority)
    }

    fn init_entry(&self, key: Key, value: &NDArray, share: bool) -> Result<()> {
        self.flush("init")?;
        let mut entries = self.entries.lock();
        if entries.contains_key(&key) {
            return Err(invalid(
                "kvstore init",
                format!("key {key} is already initialized"),
            ));
        }
        // Across processes, every rank must name the same key with the same size here.
        #[cfg(feature = "mpi")]
        if let Some(c) = self.comm {
            c.run(
                format!("init of key {key}"),
                dist::Work::Agree {
                    key: key.to_string(),
                    elements: value.size() as u64,
                },
            )?;
        }
        let home = self.home(value);
        let stored = if share && value.ctx() == home {
            value.clone()
        } else {
            let stored = self.rt.empty(value.shape(), value.dtype(), home)?;
            value.copy_into(&stored)?;
            stored
        };
        let merged = self.rt.empty(value.shape(), value.dtype(), home)?;
        let reduced = match self.kind.sums_ranks() {
            true => Some(self.rt.empty(value.shape(), value.dtype(), home)?),
            false => None,
        };
        // Rank 0 serves the key from here on (another rank's first push of it comes after the
        // broadcast below, which rank 0 joins after this).
        #[cfg(feature = "mpi")]
        let index = self
            .table
            .as_ref()
            .map_or(0, |t| t.add(key.clone(), stored.clone()));
        #[cfg(not(feature = "mpi"))]
        let index = 0;
        // Across processes, every rank starts from rank 0's value.
        #[cfg(feature = "mpi")]
        if let Some(c) = self.comm {
            dist::push_broadcast(c, &key, &stored)?;
        }
        entries.insert(
            key,
            Entry {
                stored,
                merged,
                staged: Vec::new(),
                reduced,
                index,
                sum_attrs: (0, Attrs::new()),
            },
        );
        Ok(())
    }

    /// Checks `values` against `key`'s stored value: the same shape and dtype each.
    fn check(op: &str, key: &Key, stored: &NDArray, values: &[&NDArray]) -> Result<()> {
        if values.is_empty() {
            return Err(invalid(
                &format!("kvstore {op}"),
                format!("key {key}: no arrays given"),
            ));
        }
        for (i, v) in values.iter().enumerate() {
            if v.shape() != stored.shape() || v.dtype() != stored.dtype() {
                return Err(shape_error(
                    format!("kvstore {op}"),
                    format!("array {i} of key {key}"),
                    v.shape(),
                    format!(
                        "shape {:?} and dtype {} as initialized (it has {})",
                        stored.shape(),
                        stored.dtype(),
                        v.dtype()
                    ),
                ));
            }
            if !Arc::ptr_eq(v.runtime(), stored.runtime()) {
                return Err(invalid(
                    &format!("kvstore {op}"),
                    format!("array {i} of key {key} belongs to another runtime"),
                ));
            }
        }
        Ok(())
    }

    /// Sums `values` (one per device) into the key's buffer and updates the stored value from
    /// it: with the updater, or by replacing it. Returns at once.
    pub fn push(&self, key: impl Into<Key>, values: &[&NDArray], priority: i32) -> Result<()> {
        let key = key.into();
        let mut updater = self.lock_updater("push")?;
        // A key's buffers serve one push at a time: a push of a key already waiting in the
        // bucket sends the bucket first, before this push writes them.
        if self.bucket.lock().parts.iter().any(|p| p.key == key) {
            self.flush_with(&mut updater)?;
        }
        let (merged, stored, reduced, _index) = {
            let mut entries = self.entries.lock();
            let e = entries.get_mut(&key).ok_or_else(|| unknown("push", &key))?;
            Self::check("push", &key, &e.stored, values)?;
            let merged = self.merge(e, values, priority)?;
            (merged, e.stored.clone(), e.reduced.clone(), e.index)
        };
        // `dist_async`: rank 0 applies its own pushes at once, the others send them to it.
        #[cfg(feature = "mpi")]
        if let (Some(t), Some(c)) = (&self.table, self.comm) {
            return match c.rank() {
                0 => t.apply(&mut updater, _index, &merged, None, priority),
                _ => dist_async::push_send(c, t, _index, &key, &merged, &stored, priority),
            };
        }
        let Some(reduced) = reduced else {
            return run_update(self.id, &mut updater, &key, &merged, &stored, priority);
        };
        // Without an updater the sum is the new value: it lands in the stored array directly.
        let reduced = match updater.is_none() {
            true => stored.clone(),
            false => reduced,
        };
        // Across processes: the value joins the bucket, and its update waits for the bucket's sum.
        // A bucket holds one dtype.
        let bytes = merged.size() * merged.dtype().size();
        let mut bucket = self.bucket.lock();
        if bucket
            .parts
            .iter()
            .any(|p| p.merged.dtype() != merged.dtype())
        {
            drop(bucket);
            self.flush_with(&mut updater)?;
            bucket = self.bucket.lock();
        }
        let full = bytes >= ALONE_BYTES || bucket.bytes + bytes >= bucket_limit();
        let packed = bytes < ALONE_BYTES;
        let merged = match packed {
            true => {
                let span = bucket.slot(&merged)?;
                push_copy(&merged, &span, priority, "kvstore_pack")?;
                bucket.filled += span.size();
                span
            }
            false => merged,
        };
        bucket.parts.push(Pending {
            key,
            merged,
            reduced,
            stored,
            priority,
            packed,
        });
        bucket.bytes += bytes;
        drop(bucket);
        match full {
            true => self.flush_with(&mut updater),
            false => Ok(()),
        }
    }

    /// Sends the bucket: one sum over the ranks of every value in it, then their updates.
    fn flush_with(&self, updater: &mut Option<Box<dyn Updater>>) -> Result<()> {
        let (parts, packed, filled) = {
            let mut b = self.bucket.lock();
            b.bytes = 0;
            let packed = b.packed.take();
            (take(&mut b.parts), packed, take(&mut b.filled))
        };
        if parts.is_empty() {
            return Ok(());
        }
        #[cfg(feature = "mpi")]
        if let Some(c) = self.comm {
            let used = packed
                .as_ref()
                .map(|buf| buf.slice(0, filled + 1))
                .transpose()?;
            dist::push_sum(c, &parts, used.as_ref())?;
        }
        #[cfg(not(feature = "mpi"))]
        let _ = filled;
        if let Some(buf) = packed {
            self.bucket.lock().spare.push_back(buf);
        }
        let mut first_error = None;
        for p in &parts {
            if let Err(e) = run_update(self.id, updater, &p.key, &p.reduced, &p.stored, p.priority)
            {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Sends the bucket, if anything waits in it, before a call that must see its sums.
    fn flush(&self, op: &str) -> Result<()> {
        if self.bucket.lock().parts.is_empty() {
            return Ok(());
        }
        let mut updater = self.lock_updater(op)?;
        self.flush_with(&mut updater)
    }

    /// The updater's lock, refused from inside this store's updater (where it is held).
    fn lock_updater(
        &self,
        op: &str,
    ) -> Result<parking_lot::MutexGuard<'_, Option<Box<dyn Updater>>>> {
        if Updating::inside(self) {
            return Err(invalid(
                &format!("kvstore {op}"),
                "called from inside the store's own updater, which runs within a push",
            ));
        }
        Ok(self.updater.lock())
    }

    /// The sum of `values` on the stored value's device: the value itself when one is given
    /// there, else the key's buffer, after copying the others over.
    fn merge(&self, e: &mut Entry, values: &[&NDArray], priority: i32) -> Result<NDArray> {
        let home = e.stored.ctx();
        if e.staged.len() < values.len() {
            e.staged.resize(values.len(), None);
        }
        let mut parts = Vec::with_capacity(values.len());
        for (i, v) in values.iter().enumerate() {
            if v.ctx() == home {
                parts.push((*v).clone());
                continue;
            }
            let staged = match &e.staged[i] {
                Some(s) => s.clone(),
                None => {
                    let s = self.rt.empty(v.shape(), v.dtype(), home)?;
                    e.staged[i] = Some(s.clone());
                    s
                }
            };
            push_copy(v, &staged, priority, "reduce_copy")?;
            parts.push(staged);
        }
        if parts.len() == 1 {
            return Ok(parts.remove(0));
        }
        let refs: Vec<&NDArray> = parts.iter().collect();
        if e.sum_attrs.0 != refs.len() {
            e.sum_attrs = (refs.len(), Attrs::new().with("num_args", refs.len()));
        }
        push_op(
            op_name!("add_n"),
            &refs,
            &e.sum_attrs.1,
            &e.merged,
            priority,
        )?;
        Ok(e.merged.clone())
    }

    /// Copies `key`'s stored value into every array of `outs`. Returns at once.
    pub fn pull(&self, key: impl Into<Key>, outs: &[&NDArray], priority: i32) -> Result<()> {
        let key = key.into();
        self.flush("pull")?;
        let (stored, _index) = {
            let entries = self.entries.lock();
            let e = entries.get(&key).ok_or_else(|| unknown("pull", &key))?;
            Self::check("pull", &key, &e.stored, outs)?;
            (e.stored.clone(), e.index)
        };
        // `dist_async`: rank 0 reads its weight as it is; the others fetch rank 0's first.
        #[cfg(feature = "mpi")]
        if let (Some(t), Some(c)) = (&self.table, self.comm) {
            match c.rank() {
                0 => t.read_locally(_index),
                _ => dist_async::push_fetch(c, t, _index, &key, &stored, priority)?,
            }
        }
        for o in outs {
            push_copy(&stored, o, priority, "pull_copy")?;
        }
        Ok(())
    }

    /// Overwrites `key`'s stored value with `value`, without the updater (a trainer's
    /// `set_params`). Returns at once.
    pub fn assign(&self, key: impl Into<Key>, value: &NDArray) -> Result<()> {
        let key = key.into();
        self.flush("assign")?;
        let stored = {
            let entries = self.entries.lock();
            let e = entries.get(&key).ok_or_else(|| unknown("assign", &key))?;
            Self::check("assign", &key, &e.stored, &[value])?;
            e.stored.clone()
        };
        push_copy(value, &stored, 0, "kvstore_assign")
    }

    /// [`KVStore::push`] of `values`, then [`KVStore::pull`] into `outs` (across processes the
    /// pull sends the push's bucket at once).
    pub fn pushpull(
        &self,
        key: impl Into<Key>,
        values: &[&NDArray],
        outs: &[&NDArray],
        priority: i32,
    ) -> Result<()> {
        let key = key.into();
        self.push(key.clone(), values, priority)?;
        self.pull(key, outs, priority)
    }

    /// Installs `updater`: every later push updates the stored value with it. In a
    /// `dist_async` store every rank calls it (rank 0's runs every update) and the ranks then
    /// meet at a barrier, so no rank's next push reaches rank 0 before its updater is in place.
    pub fn set_updater(&self, updater: impl Updater + 'static) -> Result<()> {
        self.replace_updater("set_updater", Some(Box::new(updater)))
    }

    /// Removes the updater: later pushes replace the stored value with their sum.
    pub fn clear_updater(&self) -> Result<()> {
        self.replace_updater("clear_updater", None)
    }

    fn replace_updater(&self, op: &str, updater: Option<Box<dyn Updater>>) -> Result<()> {
        self.flush(op)?;
        *self.lock_updater(op)? = updater;
        match self.is_async() {
            true => self.barrier(),
            false => Ok(()),
        }
    }

    /// Installs `optimizer` as the updater; it keeps its state per key on the key's device.
    pub fn set_optimizer(&self, optimizer: Optimizer) -> Result<()> {
        self.set_updater(optimizer::OptimizerUpdater::new(optimizer))
    }

    /// Sets the optimizer's learning rate for the pushes from now on.
    pub fn set_learning_rate(&self, lr: f64) -> Result<()> {
        match self.lock_updater("set_learning_rate")?.as_mut() {
            Some(u) => u.set_learning_rate(lr),
            None => Err(invalid(
                "kvstore set_learning_rate",
                "the store has no optimizer (set_optimizer first)",
            )),
        }
    }

    /// Writes the updater's state (an optimizer's momenta) to `path`, in MXNet's `.nd` format,
    /// atomically: a failure leaves any previous file as it was.
    pub fn save_optimizer_states(&self, path: impl AsRef<Path>) -> Result<()> {
        self.flush("save_optimizer_states")?;
        self.optimizer_here("save_optimizer_states")?;
        let states = match self.lock_updater("save_optimizer_states")?.as_ref() {
            Some(u) => u.states(),
            None => {
                return Err(invalid(
                    "kvstore save_optimizer_states",
                    "the store has no updater (set_optimizer first)",
                ))
            }
        };
        let named: Vec<(&str, &NDArray)> = states.iter().map(|(n, a)| (n.as_str(), a)).collect();
        ndfile::save(path, &named)
    }

    /// Restores the state [`KVStore::save_optimizer_states`] wrote.
    pub fn load_optimizer_states(&self, path: impl AsRef<Path>) -> Result<()> {
        self.flush("load_optimizer_states")?;
        self.optimizer_here("load_optimizer_states")?;
        let mut slot = self.lock_updater("load_optimizer_states")?;
        let u = slot.as_mut().ok_or_else(|| {
            invalid(
                "kvstore load_optimizer_states",
                "the store has no updater (set_optimizer first)",
            )
        })?;
        let ctx = match self.kind.on_cpu() {
            true => Context::cpu(0),
            false => self
                .entries
                .lock()
                .values()
                .next()
                .map_or(Context::cpu(0), |e| e.stored.ctx()),
        };
        let loaded = ndfile::load(path, &self.rt, ctx)?.into_named()?;
        let mut states: Vec<(String, NDArray)> = loaded.into_iter().collect();
        states.sort_by(|a, b| a.0.cmp(&b.0));
        u.load_states(states)
    }

    /// Refuses `op` on a rank of a `dist_async` store other than 0: the optimizer's state lives
    /// on rank 0, which runs every update.
    fn optimizer_here(&self, op: &str) -> Result<()> {
        match self.is_async() && self.rank() != 0 {
            true => Err(invalid(
                &format!("kvstore {op}"),
                format!(
                    "a dist_async store's optimizer runs on rank 0, which holds its state (this \
                     is rank {}): call it there",
                    self.rank()
                ),
            )),
            false => Ok(()),
        }
    }

    /// The keys initialized so far, in order.
    pub fn keys(&self) -> Vec<Key> {
        self.entries.lock().keys().cloned().collect()
    }
}

impl Drop for KVStore {
    /// Sends what waits in the bucket: every rank drops its store at the same point of its
    /// program, and a push is never lost.
    fn drop(&mut self) {
        let _ = self.flush("drop");
        // A `dist_async` store: rank 0 serves the others until every rank is done with it.
        #[cfg(feature = "mpi")]
        if let (Some(t), Some(c)) = (&self.table, self.comm) {
            let _ = self.barrier();
            if c.rank() == 0 {
                c.unserve(t.id);
            }
        }
    }
}

thread_local! {
    /// The store whose updater this thread is running (its id), or 0.
    static UPDATING: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Marks this thread as running the updater of the store with id `store` until dropped.
struct Updating(u64);

impl Updating {
    fn enter(store: u64) -> Updating {
        let before = UPDATING.with(|u| u.replace(store));
        Updating(before)
    }

    fn inside(store: &KVStore) -> bool {
        UPDATING.with(|u| u.get() == store.id)
    }
}

impl Drop for Updating {
    fn drop(&mut self) {
        UPDATING.with(|u| u.set(self.0));
    }
}

/// Updates `stored` from `merged` with `updater` (marking the thread as inside the updater of
/// the store with id `store`), or, without one, by replacing it.
fn run_update(
    store: u64,
    updater: &mut Option<Box<dyn Updater>>,
    key: &Key,
    merged: &NDArray,
    stored: &NDArray,
    priority: i32,
) -> Result<()> {
    match updater.as_mut() {
        Some(u) => {
            let _inside = Updating::enter(store);
            u.update(key, merged, stored)
        }
        None => push_copy(merged, stored, priority, "kvstore_assign"),
    }
}

/// Whether `a` and `b` are one array (the same memory under the same var).
fn same_array(a: &NDArray, b: &NDArray) -> bool {
    a.var().id() == b.var().id() && a.data_ptr() == b.data_ptr()
}

/// Pushes the copy of `src` into `dst` with `priority`, named for the profiler (`reduce_copy`: a
/// value brought to the store's device; `kvstore_pack`: a value into its bucket's packed buffer;
/// `pull_copy`: the stored value sent out); nothing when they are one array.
fn push_copy(src: &NDArray, dst: &NDArray, priority: i32, name: &'static str) -> Result<()> {
    if same_array(src, dst) {
        return Ok(());
    }
    let op = src.copy_op(dst, name)?.priority(priority);
    Ok(src.runtime().engine().push(op)?)
}

/// Pushes registry op `name` of `inputs` into `out` with `priority`.
fn push_op(
    name: &str,
    inputs: &[&NDArray],
    attrs: &Attrs,
    out: &NDArray,
    priority: i32,
) -> Result<()> {
    let rt = out.runtime().clone();
    let call = Invocation {
        name,
        inputs,
        attrs,
        out: Some(&[out]),
        also_writes: &[],
        state: None,
        unread: 0,
    };
    prepare(&rt, out.ctx(), call, |op| {
        rt.engine().push(op.priority(priority))
    })?;
    Ok(())
}
