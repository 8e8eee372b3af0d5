//! GPU workers' streams (`cuda` feature). The driver is loaded dynamically; on a machine without
//! one, workers of `gpu(i)` contexts simply run without a stream and the ops decide what to do.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};

/// A new stream on device `dev_id` for one worker, or `None` when there is no usable GPU.
pub(crate) fn worker_stream(dev_id: u32) -> Option<Arc<CudaStream>> {
    if !storage::gpu_available() {
        return None;
    }
    // cudarc panics when the driver library cannot be loaded; that only means "no GPU here".
    catch_unwind(AssertUnwindSafe(|| {
        let ctx = CudaContext::new(dev_id as usize).ok()?;
        ctx.new_stream().ok()
    }))
    .ok()
    .flatten()
}
