//! GPU and pinned host memory through the CUDA driver (`cuda` feature), loaded dynamically: the
//! build needs no CUDA toolkit, and on a machine without a driver the device reports itself
//! unavailable instead of failing.

use std::panic::catch_unwind;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use cudarc::driver::{result, CudaContext};

use crate::device::{Device, RawBlock};
use crate::{Context, DeviceType, StorageError};

/// Whether the CUDA driver library can be loaded. Asked before calling cudarc, which panics
/// (and the panic hook prints a backtrace) when it cannot find the library.
pub(crate) fn driver_loadable() -> bool {
    static LOADABLE: OnceLock<bool> = OnceLock::new();
    *LOADABLE.get_or_init(|| {
        ["libcuda.so.1", "libcuda.so"].into_iter().any(|name| {
            // SAFETY: the system's CUDA driver library, which cudarc loads the same way.
            unsafe { libloading::Library::new(name) }.is_ok()
        })
    })
}

/// Whether a CUDA driver and at least one GPU can be used here.
pub fn gpu_available() -> bool {
    driver_loadable()
        && catch_unwind(|| {
            result::init().is_ok() && CudaContext::device_count().is_ok_and(|n| n > 0)
        })
        .unwrap_or(false)
}

/// How many GPUs can be used here (0 without a CUDA driver).
pub fn gpu_count() -> usize {
    if !driver_loadable() {
        return 0;
    }
    catch_unwind(|| match result::init() {
        Ok(()) => CudaContext::device_count().map_or(0, |n| n.max(0) as usize),
        Err(_) => 0,
    })
    .unwrap_or(0)
}

pub(crate) struct CudaDevice {
    ctx: Context,
    cuda: Arc<CudaContext>,
}

impl CudaDevice {
    /// Opens the GPU behind `ctx` (for `cpu_pinned(i)`, GPU `i` owns the pinned memory).
    pub(crate) fn open(ctx: Context) -> Result<CudaDevice, String> {
        if !driver_loadable() {
            return Err("the CUDA driver library cannot be loaded on this machine".into());
        }
        let opened = catch_unwind(|| CudaContext::new(ctx.dev_id as usize));
        match opened {
            Ok(Ok(cuda)) => Ok(CudaDevice { ctx, cuda }),
            Ok(Err(e)) => Err(format!("CUDA device {} cannot be opened: {e}", ctx.dev_id)),
            Err(_) => Err("the CUDA driver library cannot be loaded on this machine".into()),
        }
    }

    fn error(&self, op: String, e: impl std::fmt::Display) -> StorageError {
        StorageError::Device {
            ctx: self.ctx,
            op,
            reason: e.to_string(),
        }
    }
}

impl Device for CudaDevice {
    fn ctx(&self) -> Context {
        self.ctx
    }

    fn alloc(&self, size: usize) -> Result<RawBlock, StorageError> {
        self.cuda
            .bind_to_thread()
            .map_err(|e| self.error("binding the CUDA context".into(), e))?;
        let ptr = match self.ctx.dev_type {
            DeviceType::Gpu => {
                // SAFETY: a plain driver allocation; the result is checked.
                let dptr =
                    unsafe { result::malloc_sync(size) }.map_err(|e| StorageError::Device {
                        ctx: self.ctx,
                        op: format!("cuMemAlloc of {size} bytes"),
                        reason: e.to_string(),
                    })?;
                dptr as usize as *mut u8
            }
            _ => {
                // SAFETY: a plain driver allocation; the result is checked.
                unsafe { result::malloc_host(size, 0) }
                    .map_err(|e| self.error(format!("cuMemHostAlloc of {size} bytes"), e))?
                    .cast()
            }
        };
        let ptr =
            NonNull::new(ptr).ok_or_else(|| self.error("allocation".into(), "null pointer"))?;
        Ok(RawBlock {
            ptr,
            size,
            fd: None,
        })
    }

    unsafe fn free(&self, block: RawBlock) {
        let _ = self.cuda.bind_to_thread();
        // SAFETY: the block came from `alloc` on this device; the caller promises no reuse.
        unsafe {
            let _ = match self.ctx.dev_type {
                DeviceType::Gpu => result::free_sync(block.ptr.as_ptr() as usize as u64),
                _ => result::free_host(block.ptr.as_ptr().cast()),
            };
        }
    }
}
