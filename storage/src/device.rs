//! Device back ends: raw allocate and free, nothing cached.
//!
//! * `cpu(i)`: host memory from the global allocator, 64-byte aligned.
//! * `cpu_shared(i)`: a `memfd` mapped shared; its file descriptor lets another process map the
//!   same pages (`/proc/<pid>/fd/<fd>`).
//! * `cpu_pinned(i)`: page-locked host memory through the CUDA driver (`cuda` feature and a GPU);
//!   otherwise `Unavailable`.
//! * `gpu(i)`: device memory through the CUDA driver (`cuda` feature and a GPU); otherwise
//!   `Unavailable`. Its "pointers" are device addresses, not host pointers.

use std::alloc::Layout;
use std::ptr::NonNull;

use crate::{Context, DeviceType, StorageError};

/// Every block is aligned to at least this many bytes.
pub const ALIGN: usize = 64;

/// A block as a back end hands it out.
#[derive(Debug)]
pub(crate) struct RawBlock {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) size: usize,
    /// The shared-memory file this block is mapped from (`cpu_shared` only).
    pub(crate) fd: Option<i32>,
}

// SAFETY: a RawBlock is an owned region of memory (like a Box<[u8]>); nothing in it is tied to
// the thread that allocated it.
unsafe impl Send for RawBlock {}

/// Raw allocation on one device.
pub(crate) trait Device: Send + Sync {
    fn ctx(&self) -> Context;

    /// `size` bytes (a positive multiple of [`ALIGN`]), aligned to [`ALIGN`].
    fn alloc(&self, size: usize) -> Result<RawBlock, StorageError>;

    /// Gives a block back to the device.
    ///
    /// # Safety
    /// `block` came from `self.alloc` and nothing uses its memory afterwards.
    unsafe fn free(&self, block: RawBlock);
}

/// The back end for a context.
pub(crate) fn for_context(ctx: Context) -> Box<dyn Device> {
    match ctx.dev_type {
        DeviceType::Cpu => Box::new(CpuDevice { ctx }),
        DeviceType::CpuShared => Box::new(SharedDevice { ctx }),
        DeviceType::CpuPinned | DeviceType::Gpu => cuda_device(ctx),
    }
}

fn layout(ctx: Context, size: usize) -> Result<Layout, StorageError> {
    Layout::from_size_align(size, ALIGN).map_err(|e| StorageError::TooLarge {
        ctx,
        requested: size,
        reason: e.to_string(),
    })
}

struct CpuDevice {
    ctx: Context,
}

impl Device for CpuDevice {
    fn ctx(&self) -> Context {
        self.ctx
    }

    fn alloc(&self, size: usize) -> Result<RawBlock, StorageError> {
        let layout = layout(self.ctx, size)?;
        // SAFETY: the layout has a non-zero size (managers never ask for 0 bytes).
        let ptr = unsafe { std::alloc::alloc(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| StorageError::Device {
            ctx: self.ctx,
            op: format!("allocating {size} bytes"),
            reason: "the system allocator returned null".into(),
        })?;
        Ok(RawBlock {
            ptr,
            size,
            fd: None,
        })
    }

    unsafe fn free(&self, block: RawBlock) {
        let layout = Layout::from_size_align(block.size, ALIGN).expect("validated at alloc");
        // SAFETY: allocated by `alloc` above with this same layout; the caller promises no reuse.
        unsafe { std::alloc::dealloc(block.ptr.as_ptr(), layout) }
    }
}

struct SharedDevice {
    ctx: Context,
}

impl SharedDevice {
    fn os_error(&self, op: String) -> StorageError {
        StorageError::Device {
            ctx: self.ctx,
            op,
            reason: std::io::Error::last_os_error().to_string(),
        }
    }
}

impl Device for SharedDevice {
    fn ctx(&self) -> Context {
        self.ctx
    }

    fn alloc(&self, size: usize) -> Result<RawBlock, StorageError> {
        layout(self.ctx, size)?;
        let name = c"mxrs-shared";
        // SAFETY: plain system calls on a fresh descriptor; every failure is checked.
        unsafe {
            let fd = libc::memfd_create(name.as_ptr(), 0);
            if fd < 0 {
                return Err(self.os_error("memfd_create".into()));
            }
            if libc::ftruncate(fd, size as libc::off_t) != 0 {
                let e = self.os_error(format!("sizing shared memory to {size} bytes"));
                libc::close(fd);
                return Err(e);
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if p == libc::MAP_FAILED {
                let e = self.os_error(format!("mapping {size} bytes of shared memory"));
                libc::close(fd);
                return Err(e);
            }
            Ok(RawBlock {
                ptr: NonNull::new(p.cast()).expect("mmap succeeded"),
                size,
                fd: Some(fd),
            })
        }
    }

    unsafe fn free(&self, block: RawBlock) {
        // SAFETY: the mapping and descriptor came from `alloc`; the caller promises no reuse.
        unsafe {
            libc::munmap(block.ptr.as_ptr().cast(), block.size);
            if let Some(fd) = block.fd {
                libc::close(fd);
            }
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_device(ctx: Context) -> Box<dyn Device> {
    Box::new(Missing {
        ctx,
        reason: "this build has no CUDA support (build with --features cuda)".into(),
    })
}

#[cfg(feature = "cuda")]
fn cuda_device(ctx: Context) -> Box<dyn Device> {
    match crate::cuda::CudaDevice::open(ctx) {
        Ok(d) => Box::new(d),
        Err(reason) => Box::new(Missing { ctx, reason }),
    }
}

/// A device this build or machine lacks: every allocation says why.
struct Missing {
    ctx: Context,
    reason: String,
}

impl Device for Missing {
    fn ctx(&self) -> Context {
        self.ctx
    }

    fn alloc(&self, _size: usize) -> Result<RawBlock, StorageError> {
        Err(StorageError::Unavailable {
            ctx: self.ctx,
            reason: self.reason.clone(),
        })
    }

    unsafe fn free(&self, _block: RawBlock) {
        unreachable!("a missing device never hands out blocks")
    }
}
