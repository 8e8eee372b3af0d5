//! Each GPU's one stream (`cuda` feature). The driver is loaded dynamically; on a machine without
//! one, workers of `gpu(i)` contexts simply run without a stream and the ops decide what to do.
//!
//! Every worker of a device — compute, priority and copy — queues its work on the same stream,
//! and so does any thread the engine gives no stream (the inline and pooled engines' ops look it
//! up here). An op is dispatched only after the ops it depends on have completed, so when those
//! complete as soon as their work is *queued*, the stream still runs the work in dependency
//! order: GPU ops need not wait for the device, and memory a finished op hands back to the pool
//! is reused only by work queued behind it on the same stream.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaStream};

/// The streams opened so far, by device; `None` where a device could not give one.
static STREAMS: Mutex<Vec<(u32, Option<Arc<CudaStream>>)>> = Mutex::new(Vec::new());

/// The stream of GPU `dev_id` (opened on first use, then the same for the whole process), or
/// `None` when there is no usable GPU of that number.
pub fn device_stream(dev_id: u32) -> Option<Arc<CudaStream>> {
    let mut streams = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, s)) = streams.iter().find(|(d, _)| *d == dev_id) {
        return s.clone();
    }
    let opened = open(dev_id);
    streams.push((dev_id, opened.clone()));
    opened
}

/// Every device stream opened so far (what waiting for all GPU work waits on).
pub fn device_streams() -> Vec<Arc<CudaStream>> {
    let streams = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    streams.iter().filter_map(|(_, s)| s.clone()).collect()
}

fn open(dev_id: u32) -> Option<Arc<CudaStream>> {
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
