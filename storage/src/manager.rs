//! A storage manager: one per context, thread-safe, handing out owned [`Handle`]s from a pooling
//! policy, keeping [`Stats`], enforcing an optional byte limit and recording allocation traces.
//!
//! On exhaustion (the limit, or the device refusing) the manager releases every cached block and
//! retries once; if the request still does not fit, it returns `OutOfMemory` naming the request,
//! in use, reserved, cached and the limit. It never aborts the process.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::device::{self, Device, RawBlock, ALIGN};
use crate::pools::{self, Policy};
use crate::stats::{human, Stats};
use crate::trace::{Trace, TraceEvent};
use crate::{Context, StorageError};

/// Which pooling policy a manager uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Every alloc and free goes to the device.
    Unpooled,
    /// Sizes rounded up to a power of two below the cutoff and to a multiple of it above; freed
    /// blocks cached by rounded size.
    PooledRound {
        /// The cutoff in bytes (a power of two).
        cutoff: usize,
    },
    /// Freed blocks cached by exact (aligned) size.
    PooledExact,
    /// Best fit with coalescing: regions split into chunks, size-class bins, neighbours merged.
    Bfc,
}

impl PoolKind {
    /// The default cutoff of `PooledRound`: 16 MiB.
    pub const DEFAULT_CUTOFF: usize = 1 << 24;

    /// Every kind with default parameters, in a fixed order.
    pub const ALL: [PoolKind; 4] = [
        PoolKind::Unpooled,
        PoolKind::PooledRound {
            cutoff: PoolKind::DEFAULT_CUTOFF,
        },
        PoolKind::PooledExact,
        PoolKind::Bfc,
    ];

    /// The name used in `MXRS_STORAGE_POOL_TYPE` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Unpooled => "unpooled",
            PoolKind::PooledRound { .. } => "pooled_round",
            PoolKind::PooledExact => "pooled_exact",
            PoolKind::Bfc => "bfc",
        }
    }

    /// Parses a name as [`PoolKind::name`] prints it (`round`, `exact`, `naive` also accepted).
    pub fn parse(s: &str) -> Option<PoolKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "unpooled" | "naive" | "none" => Some(PoolKind::Unpooled),
            "pooled_round" | "round" => Some(PoolKind::PooledRound {
                cutoff: PoolKind::DEFAULT_CUTOFF,
            }),
            "pooled_exact" | "exact" | "pooled" => Some(PoolKind::PooledExact),
            "bfc" => Some(PoolKind::Bfc),
            _ => None,
        }
    }
}

/// A block a policy hands out: where, how many bytes it occupies, and the policy's own tag.
#[derive(Debug)]
pub(crate) struct Block {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) size: usize,
    pub(crate) token: usize,
    pub(crate) fd: Option<i32>,
}

// SAFETY: like RawBlock, a Block is an owned region of memory.
unsafe impl Send for Block {}

impl Block {
    pub(crate) fn whole(raw: RawBlock) -> Block {
        Block {
            ptr: raw.ptr,
            size: raw.size,
            token: 0,
            fd: raw.fd,
        }
    }

    pub(crate) fn into_raw(self) -> RawBlock {
        RawBlock {
            ptr: self.ptr,
            size: self.size,
            fd: self.fd,
        }
    }
}

/// Why a policy could not serve a request.
pub(crate) enum AllocError {
    /// Out of room (limit or device): worth releasing the cache and retrying.
    Exhausted,
    /// Anything else: reported as is.
    Failed(StorageError),
}

/// The device as a policy sees it: every byte taken or returned is counted and checked against
/// the limit here, so no policy can get the accounting wrong.
pub(crate) struct Backing<'a> {
    pub(crate) device: &'a dyn Device,
    pub(crate) stats: &'a mut Stats,
}

impl Backing<'_> {
    /// `size` bytes (a multiple of `ALIGN`) from the device, if they fit under the limit.
    pub(crate) fn reserve(&mut self, size: usize) -> Result<RawBlock, AllocError> {
        if let Some(limit) = self.stats.limit {
            if self.stats.reserved.saturating_add(size) > limit {
                return Err(AllocError::Exhausted);
            }
        }
        match self.device.alloc(size) {
            Ok(raw) => {
                self.stats.on_reserve(size);
                Ok(raw)
            }
            Err(StorageError::Device { .. }) => Err(AllocError::Exhausted),
            Err(e) => Err(AllocError::Failed(e)),
        }
    }

    /// Returns a block to the device.
    pub(crate) fn unreserve(&mut self, raw: RawBlock) {
        self.stats.on_unreserve(raw.size);
        // SAFETY: every RawBlock a policy holds came from `reserve` on this device, and a policy
        // only unreserves blocks that no handle refers to any more.
        unsafe { self.device.free(raw) }
    }
}

struct Inner {
    policy: Box<dyn Policy>,
    stats: Stats,
    trace: Option<Vec<TraceEvent>>,
    next_id: u64,
}

struct Shared {
    ctx: Context,
    kind: PoolKind,
    device: Box<dyn Device>,
    inner: Mutex<Inner>,
}

/// The storage manager of one context. Cheap to clone (shared).
#[derive(Clone)]
pub struct StorageManager {
    shared: Arc<Shared>,
}

/// An owned block of device memory. Dropping it (or [`StorageManager::free`]) returns it to its
/// manager's pool; [`Handle::direct_free`] returns it to the device. There is no way to free it
/// twice.
pub struct Handle {
    block: Option<Block>,
    requested: usize,
    id: u64,
    owner: Arc<Shared>,
}

// SAFETY: a Handle owns its memory exclusively (like Box<[u8]>) and its manager is thread-safe.
unsafe impl Send for Handle {}
// SAFETY: shared references only read the pointer and sizes; writes need `&mut`.
unsafe impl Sync for Handle {}

impl StorageManager {
    /// A manager for `ctx` with the given policy and no limit.
    pub fn new(ctx: Context, kind: PoolKind) -> StorageManager {
        StorageManager::with_device(device::for_context(ctx), kind, None)
    }

    /// A manager for `ctx` with the given policy and byte limit.
    pub fn with_limit(ctx: Context, kind: PoolKind, limit: Option<usize>) -> StorageManager {
        StorageManager::with_device(device::for_context(ctx), kind, limit)
    }

    pub(crate) fn with_device(
        device: Box<dyn Device>,
        kind: PoolKind,
        limit: Option<usize>,
    ) -> StorageManager {
        let stats = Stats {
            limit,
            ..Stats::default()
        };
        StorageManager {
            shared: Arc::new(Shared {
                ctx: device.ctx(),
                kind,
                inner: Mutex::new(Inner {
                    policy: pools::new_policy(kind),
                    stats,
                    trace: None,
                    next_id: 0,
                }),
                device,
            }),
        }
    }

    /// The context this manager allocates on.
    pub fn ctx(&self) -> Context {
        self.shared.ctx
    }

    /// The policy.
    pub fn kind(&self) -> PoolKind {
        self.shared.kind
    }

    /// A block of at least `size` bytes (0 is allowed), aligned to at least 64 bytes.
    pub fn alloc(&self, size: usize) -> Result<Handle, StorageError> {
        let ctx = self.shared.ctx;
        let mut inner = self.shared.inner.lock();
        let Inner {
            policy,
            stats,
            trace,
            next_id,
        } = &mut *inner;
        let aligned = align_request(ctx, size)?;
        let mut backing = Backing {
            device: &*self.shared.device,
            stats,
        };
        let mut attempt = policy.alloc(aligned, &mut backing);
        if matches!(attempt, Err(AllocError::Exhausted)) {
            backing.stats.oom_retries += 1;
            policy.release_cached(&mut backing);
            attempt = policy.alloc(aligned, &mut backing);
        }
        let (block, hit) = match attempt {
            Ok(ok) => ok,
            Err(AllocError::Failed(e)) => return Err(e),
            Err(AllocError::Exhausted) => {
                stats.ooms += 1;
                return Err(StorageError::OutOfMemory {
                    ctx,
                    requested: size,
                    block: policy.block_size(aligned),
                    in_use: stats.in_use,
                    reserved: stats.reserved,
                    cached: stats.cached(),
                    limit: stats
                        .limit
                        .map_or_else(|| "the device's capacity".into(), |l| format!("{l} bytes")),
                });
            }
        };
        stats.on_alloc(size, block.size, hit);
        let id = *next_id;
        *next_id += 1;
        if let Some(t) = trace {
            t.push(TraceEvent::Alloc { id, bytes: size });
        }
        Ok(Handle {
            block: Some(block),
            requested: size,
            id,
            owner: self.shared.clone(),
        })
    }

    /// Returns a block to the pool (the same as dropping it).
    pub fn free(&self, handle: Handle) {
        drop(handle)
    }

    /// Returns a block straight to the device, bypassing the cache.
    pub fn direct_free(&self, handle: Handle) {
        handle.direct_free()
    }

    /// Returns every cached block to the device.
    pub fn release_all(&self) {
        let mut inner = self.shared.inner.lock();
        let Inner { policy, stats, .. } = &mut *inner;
        let mut backing = Backing {
            device: &*self.shared.device,
            stats,
        };
        policy.release_cached(&mut backing);
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.shared.inner.lock().stats.clone()
    }

    /// Starts the peaks again from the current values.
    pub fn reset_peak(&self) {
        self.shared.inner.lock().stats.reset_peak();
    }

    /// Sets (or removes) the byte limit on reserved memory. Memory already reserved is kept.
    pub fn set_limit(&self, limit: Option<usize>) {
        self.shared.inner.lock().stats.limit = limit;
    }

    /// A human-readable table of the counters.
    pub fn summary(&self) -> String {
        let title = format!("storage of {} ({})", self.ctx(), self.kind().name());
        self.stats().summary(&title)
    }

    /// Starts recording every alloc and free (replacing any recording in progress).
    pub fn start_trace(&self) {
        self.shared.inner.lock().trace = Some(Vec::new());
    }

    /// Stops recording and returns what was recorded, if a recording was running.
    pub fn take_trace(&self) -> Option<Trace> {
        self.shared
            .inner
            .lock()
            .trace
            .take()
            .map(|events| Trace { events })
    }
}

impl fmt::Debug for StorageManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StorageManager({}, {})", self.ctx(), self.kind().name())
    }
}

fn align_request(ctx: Context, size: usize) -> Result<usize, StorageError> {
    size.max(1)
        .checked_next_multiple_of(ALIGN)
        .filter(|&s| s <= isize::MAX as usize)
        .ok_or_else(|| StorageError::TooLarge {
            ctx,
            requested: size,
            reason: "larger than the address space".into(),
        })
}

impl Shared {
    fn release(&self, block: Block, requested: usize, id: u64, pooled: bool) {
        let mut inner = self.inner.lock();
        let Inner {
            policy,
            stats,
            trace,
            ..
        } = &mut *inner;
        stats.on_free(requested, block.size);
        if let Some(t) = trace {
            t.push(TraceEvent::Free { id });
        }
        let mut backing = Backing {
            device: &*self.device,
            stats,
        };
        if pooled {
            policy.free(block, &mut backing);
        } else {
            policy.direct_free(block, &mut backing);
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last handle is gone (each holds the manager): give the cache back.
        let inner = self.inner.get_mut();
        let mut backing = Backing {
            device: &*self.device,
            stats: &mut inner.stats,
        };
        inner.policy.release_cached(&mut backing);
    }
}

impl Handle {
    /// The start of the block: a host address on CPU contexts, a device address on GPUs.
    pub fn as_ptr(&self) -> *mut u8 {
        self.block().ptr.as_ptr()
    }

    /// The address as an integer (for overlap checks and debugging).
    pub fn addr(&self) -> usize {
        self.as_ptr() as usize
    }

    /// Bytes asked for.
    pub fn size(&self) -> usize {
        self.requested
    }

    /// Bytes the block occupies (at least `size`).
    pub fn capacity(&self) -> usize {
        self.block().size
    }

    /// The context the block lives on.
    pub fn ctx(&self) -> Context {
        self.owner.ctx
    }

    /// A number unique within its manager (the id used in traces).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The file descriptor another process can map (`cpu_shared` blocks only): the block starts at
    /// offset 0 of `/proc/<pid>/fd/<fd>`.
    pub fn shared_fd(&self) -> Option<i32> {
        self.block().fd
    }

    /// Copies `data` into the block at `offset` (host contexts only).
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), StorageError> {
        self.check_host_range(offset, data.len(), "write")?;
        // SAFETY: the range lies inside this handle's block (checked), which `&mut self` owns.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr().add(offset), data.len())
        };
        Ok(())
    }

    /// Copies bytes of the block at `offset` into `out` (host contexts only). Bytes never written
    /// hold whatever the block held before.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), StorageError> {
        self.check_host_range(offset, out.len(), "read")?;
        // SAFETY: the range lies inside this handle's block (checked); u8 has no invalid values,
        // and the memory came from an allocator, so it is readable.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    fn check_host_range(&self, offset: usize, len: usize, op: &str) -> Result<(), StorageError> {
        let ctx = self.ctx();
        if !ctx.is_cpu() {
            return Err(StorageError::Unavailable {
                ctx,
                reason: format!("{op}: device memory is not addressable from the host"),
            });
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.capacity())
        {
            return Err(StorageError::TooLarge {
                ctx,
                requested: len,
                reason: format!(
                    "{op} of {len} bytes at offset {offset} overruns a block of {} bytes",
                    self.capacity()
                ),
            });
        }
        Ok(())
    }

    /// Returns the block straight to the device, bypassing the pool.
    pub fn direct_free(mut self) {
        if let Some(block) = self.block.take() {
            self.owner.release(block, self.requested, self.id, false);
        }
    }

    fn block(&self) -> &Block {
        self.block.as_ref().expect("a live handle holds its block")
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            self.owner.release(block, self.requested, self.id, true);
        }
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Handle#{}({} bytes of {} at {:#x} on {})",
            self.id,
            self.requested,
            human(self.capacity()),
            self.addr(),
            self.ctx()
        )
    }
}
