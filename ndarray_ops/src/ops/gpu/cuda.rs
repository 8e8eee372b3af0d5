//! The CUDA [`Stream`] (`cuda` feature): kernels compiled once by NVRTC and loaded per device,
//! GEMMs by cuBLAS, everything on the device's one stream (`engine::cuda`).
//!
//! An op's work is queued on its device's stream and the op ends there, without waiting for the
//! GPU: the engine starts an op only after the ops it depends on have ended, and every op
//! touching a device's memory queues on that device's stream, so the stream runs the work in
//! dependency order while the engine's workers run ahead (as CUDA programs do within one
//! stream). Memory an op hands back (its scratch, a deleted array) is reused only by work queued
//! after it. Where the host needs the results, the wait is explicit: copies to and from the host
//! complete once their transfer is done (a per-device thread waits for an event recorded behind
//! each, so copy workers never block, and a fault of the device fails them), and waiting for a
//! GPU array, or for everything, waits for its stream too ([`settle`]). `MXRS_GPU_SYNC=1` makes every op wait for its stream instead, so a kernel fault
//! is reported by the op that caused it and the profiler times kernels, not launches.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{result as blas, CudaBlas};
use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaStream, LaunchConfig, PushKernelArg,
};
use engine::{Completion, FnProperty, Op, RunContext};
use rand::Rng;
use storage::{Context, Handle, StorageManager};

use super::args::{self, RawArgs, MAX_ARGS_BYTES};
use super::nn::SEED;
use super::ops::{fill_with, run, GpuKernel};
use super::{ptx_cache, ConvCall, DeviceBlock, Gemm, Stream};
use crate::ops::{Attrs, OpDef, TensorRef};
use crate::resources::{DeviceResources, StateSlot};

/// Threads per block of every launch; grids are capped, the kernels' loops cover the rest.
const BLOCK: u32 = 256;
const MAX_BLOCKS: usize = 65_535;

/// A kernel's argument struct, copied into a buffer of the largest size any takes: the driver
/// copies as many bytes as the kernel's parameter has.
#[repr(C, align(16))]
struct Param([u8; MAX_ARGS_BYTES]);

// SAFETY: plain bytes, passed by address as a kernel parameter.
unsafe impl cudarc::driver::DeviceRepr for Param {}

impl Param {
    fn copy(args: &RawArgs) -> Param {
        let mut p = Param([0; MAX_ARGS_BYTES]);
        // SAFETY: `args` points at a live struct of `args.bytes` bytes, at most
        // `MAX_ARGS_BYTES` (checked where each struct is declared); copied as bytes, so
        // padding is carried as it is.
        unsafe {
            std::ptr::copy_nonoverlapping(
                args.ptr,
                p.0.as_mut_ptr(),
                args.bytes.min(MAX_ARGS_BYTES),
            )
        };
        p
    }
}

/// The kernels loaded on one device, by name.
struct Module {
    functions: HashMap<&'static str, CudaFunction>,
}

/// The PTX of the kernels ([`args::source`]), made once per process (it does not depend on the device): read from
/// the kernel cache when an earlier process compiled the same source with the same NVRTC,
/// otherwise compiled now and stored there (see `ptx_cache`).
fn ptx() -> Result<&'static str, String> {
    static PTX: OnceLock<Result<String, String>> = OnceLock::new();
    PTX.get_or_init(|| ptx_in(ptx_cache::dir_from(|k| std::env::var(k).ok()).as_deref()))
        .as_deref()
        .map_err(Clone::clone)
}

/// The PTX through the cache in `dir` (`None`: no cache).
pub(crate) fn ptx_in(dir: Option<&std::path::Path>) -> Result<String, String> {
    let (major, minor) = nvrtc_version()?;
    let version = format!("nvrtc {major}.{minor}");
    // The inputs of the PTX: the source, the compiler, its options (cudarc's defaults).
    let key = ptx_cache::key(&[
        args::source().as_bytes(),
        version.as_bytes(),
        b"default options",
    ]);
    ptx_cache::cached(dir, key, holds_every_kernel, compile_ptx)
}

fn holds_every_kernel(ptx: &str) -> bool {
    args::kernel_names().all(|name| ptx.contains(&format!(".entry {name}(")))
}

/// Whether NVRTC can be loaded. cudarc panics (and the panic hook prints a backtrace) when it
/// cannot find the library, so look first; its own search covers more names, hence callers
/// catch panics as well.
fn nvrtc_present() -> Result<(), String> {
    let present = [
        "libnvrtc.so",
        "libnvrtc.so.12",
        "libnvrtc.so.13",
        "libnvrtc.so.11",
    ]
    .into_iter()
    // SAFETY: NVIDIA's NVRTC library, which cudarc loads the same way.
    .any(|name| unsafe { libloading::Library::new(name) }.is_ok());
    match present {
        true => Ok(()),
        false => Err(nvrtc_missing()),
    }
}

fn nvrtc_missing() -> String {
    "the NVRTC library (libnvrtc) cannot be loaded on this machine".to_string()
}

fn nvrtc_version() -> Result<(i32, i32), String> {
    nvrtc_present()?;
    let (mut major, mut minor) = (0, 0);
    let status = std::panic::catch_unwind(move || {
        // SAFETY: two valid out-pointers; the library is present (checked above).
        let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        (r, major, minor)
    })
    .map_err(|_| nvrtc_missing())?;
    match status {
        (cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS, major, minor) => Ok((major, minor)),
        (r, ..) => Err(format!("NVRTC could not say its version: {r:?}")),
    }
}

/// Compiles the kernels with NVRTC (loaded at run time: without it, GPU ops fail with this error).
pub(crate) fn compile_ptx() -> Result<String, String> {
    nvrtc_present()?;
    std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx(args::source()))
        .map_err(|_| nvrtc_missing())?
        .map(|ptx| ptx.to_src())
        .map_err(|e| format!("NVRTC rejected the kernels: {e:?}"))
}

fn module(ctx: &Arc<CudaContext>) -> Result<Arc<Module>, String> {
    static MODULES: Mutex<Vec<(usize, Arc<Module>)>> = Mutex::new(Vec::new());
    let mut modules = MODULES.lock().map_err(|e| e.to_string())?;
    let ordinal = ctx.ordinal();
    if let Some((_, m)) = modules.iter().find(|(o, _)| *o == ordinal) {
        return Ok(m.clone());
    }
    let loaded = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx()?))
        .map_err(|e| format!("loading the kernels on GPU {ordinal}: {e}"))?;
    let mut functions = HashMap::new();
    for name in args::kernel_names() {
        let f = loaded
            .load_function(name)
            .map_err(|e| format!("kernel {name} on GPU {ordinal}: {e}"))?;
        functions.insert(name, f);
    }
    let m = Arc::new(Module { functions });
    modules.push((ordinal, m.clone()));
    Ok(m)
}

thread_local! {
    /// One cuBLAS handle per stream this thread has run GEMMs on.
    static BLAS: RefCell<Vec<(usize, CudaBlas)>> = const { RefCell::new(Vec::new()) };
}

/// The stream to run on, its device's context bound to this thread.
fn bound_stream(rctx: &RunContext) -> Result<Arc<CudaStream>, String> {
    let stream = stream_for(rctx.ctx)?;
    stream
        .context()
        .bind_to_thread()
        .map_err(|e| driver_error("binding the CUDA context", e))?;
    Ok(stream)
}

/// The stream of `ctx`'s GPU: the one the engine's workers for it are given, and the one a
/// thread the engine gave none (inline and pooled engines) must use, so that it is the same.
fn stream_for(ctx: Context) -> Result<Arc<CudaStream>, String> {
    engine::cuda::device_stream(ctx.dev_id).ok_or_else(|| match storage::gpu_available() {
        true => format!("GPU {} gives no stream", ctx.dev_id),
        false => "no usable GPU: the CUDA driver cannot be loaded or finds no device".into(),
    })
}

/// Whether every op waits for its stream (`MXRS_GPU_SYNC=1`), read once.
fn sync_each_op() -> bool {
    static SYNC: OnceLock<bool> = OnceLock::new();
    *SYNC.get_or_init(|| std::env::var("MXRS_GPU_SYNC").is_ok_and(|v| v.trim() == "1"))
}

/// Waits until the GPU of `ctx` has run everything queued on its stream so far (nothing for
/// other contexts); a fault of a kernel queued earlier is reported here.
pub(crate) fn settle(ctx: Context) -> Result<(), storage::StorageError> {
    if ctx.is_cpu() {
        return Ok(());
    }
    let stream = stream_for(ctx).map_err(|reason| device_failure(ctx, reason))?;
    wait_for(ctx, &stream)
}

/// [`settle`] for every GPU used so far.
pub(crate) fn settle_all() -> Result<(), storage::StorageError> {
    for stream in engine::cuda::device_streams() {
        wait_for(Context::gpu(stream.context().ordinal() as u32), &stream)?;
    }
    Ok(())
}

fn wait_for(ctx: Context, stream: &CudaStream) -> Result<(), storage::StorageError> {
    stream
        .synchronize()
        .map_err(|e| device_failure(ctx, driver_error("a GPU op queued earlier failed", e)))
}

fn device_failure(ctx: Context, reason: String) -> storage::StorageError {
    storage::StorageError::Device {
        ctx,
        op: "waiting for the GPU's stream".into(),
        reason,
    }
}

/// One op's view of its stream: kernels, GEMMs, copies, and scratch from the device's pool
/// (handed back when the op ends, after the stream has finished with it).
struct DeviceStream<'a> {
    stream: &'a Arc<CudaStream>,
    module: Arc<Module>,
    pool: &'a StorageManager,
    held: RefCell<Vec<Handle>>,
}

fn driver_error(what: &str, e: impl std::fmt::Debug) -> String {
    format!("{what}: {e:?}")
}

impl DeviceBlock for Handle {
    fn ptr(&self) -> *mut u8 {
        self.as_ptr()
    }
}

impl Stream for DeviceStream<'_> {
    fn launch_raw(
        &self,
        kernel: &'static str,
        threads: usize,
        args: RawArgs,
    ) -> Result<(), String> {
        if threads == 0 {
            return Ok(());
        }
        let f = self
            .module
            .functions
            .get(kernel)
            .ok_or_else(|| format!("kernel {kernel} is not loaded"))?;
        let blocks = threads.div_ceil(BLOCK as usize).min(MAX_BLOCKS) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let param = Param::copy(&args);
        // SAFETY: every kernel takes one argument struct, `args` is the one `kernel` takes (its
        // `Kernel` constant says so) and the driver copies that struct's size from `param`; the
        // op layer fills it with device pointers to buffers of the sizes the kernel reads,
        // valid until the op ends.
        unsafe { self.stream.launch_builder(f).arg(&param).launch(cfg) }
            .map(|_| ())
            .map_err(|e| driver_error(kernel, e))
    }

    fn gemm_batched(&self, g: &Gemm, batch: usize, strides: [usize; 3]) -> Result<(), String> {
        if g.m == 0 || g.n == 0 || batch == 0 {
            return Ok(());
        }
        let key = self.stream.cu_stream() as usize;
        BLAS.with(|handles| {
            let mut handles = handles.borrow_mut();
            if !handles.iter().any(|(k, _)| *k == key) {
                let h =
                    CudaBlas::new(self.stream.clone()).map_err(|e| driver_error("cuBLAS", e))?;
                handles.push((key, h));
            }
            let (_, h) = handles
                .iter()
                .find(|(k, _)| *k == key)
                .ok_or("cuBLAS handle")?;
            let op = |t: bool| match t {
                true => cublasOperation_t::CUBLAS_OP_T,
                false => cublasOperation_t::CUBLAS_OP_N,
            };
            // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
            let alpha = 1.0f32;
            let int = |v: usize| {
                i32::try_from(v).map_err(|_| format!("GEMM dimension {v} exceeds cuBLAS's int"))
            };
            // SAFETY: device pointers to `batch` matrices of these sizes and strides, per the
            // op layer.
            unsafe {
                blas::sgemm_strided_batched(
                    *h.handle(),
                    op(g.tb),
                    op(g.ta),
                    int(g.n)?,
                    int(g.m)?,
                    int(g.k)?,
                    &alpha,
                    g.b,
                    int(g.ldb)?,
                    strides[1] as i64,
                    g.a,
                    int(g.lda)?,
                    strides[0] as i64,
                    &g.beta,
                    g.c,
                    int(g.ldc)?,
                    strides[2] as i64,
                    int(batch)?,
                )
            }
            .map_err(|e| driver_error("cublasSgemmStridedBatched", e))
        })
    }

    fn copy(&self, src: *const u8, dst: *mut u8, bytes: usize) -> Result<(), String> {
        // SAFETY: device buffers of at least `bytes`, per the op layer.
        unsafe {
            sys::cuMemcpyAsync(dst as u64, src as u64, bytes, self.stream.cu_stream()).result()
        }
        .map_err(|e| driver_error("cuMemcpyAsync", e))
    }

    fn conv(&self, call: &ConvCall) -> Option<Result<(), String>> {
        super::cudnn::available()
            .then(|| super::cudnn::convolve(self.stream, |bytes| self.scratch(bytes), call))
    }

    fn scratch(&self, bytes: usize) -> Result<*mut u8, String> {
        let h = self
            .pool
            .alloc(bytes.max(1))
            .map_err(|e| format!("GPU scratch: {e}"))?;
        let p = h.as_ptr();
        self.held.borrow_mut().push(h);
        Ok(p)
    }

    fn download(&self, t: &TensorRef) -> Result<Vec<f32>, String> {
        let mut host = vec![0f32; t.len()];
        // SAFETY: `t` is a device buffer of `t.len()` floats and `host` has room for them; the
        // stream is waited for before `host` is read.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                host.as_mut_ptr().cast(),
                t.ptr::<f32>() as u64,
                std::mem::size_of_val(host.as_slice()),
                self.stream.cu_stream(),
            )
            .result()
        }
        .map_err(|e| driver_error("cuMemcpyDtoHAsync", e))?;
        self.stream
            .synchronize()
            .map_err(|e| driver_error("waiting for a read back", e))?;
        Ok(host)
    }

    fn lasting(&self, bytes: usize) -> Result<Box<dyn DeviceBlock>, String> {
        let h = self
            .pool
            .alloc(bytes.max(1))
            .map_err(|e| format!("GPU memory kept for a backward node: {e}"))?;
        Ok(Box::new(h))
    }

    fn upload(&self, table: &[i64]) -> Result<*mut u8, String> {
        let bytes = std::mem::size_of_val(table);
        let p = self.scratch(bytes)?;
        // SAFETY: fresh device scratch of `bytes`. From pageable host memory the call returns
        // once the table is staged, so it may be dropped after; the transfer runs in stream
        // order, before the kernels queued behind it read it.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                p as u64,
                table.as_ptr().cast(),
                bytes,
                self.stream.cu_stream(),
            )
            .result()
        }
        .map_err(|e| driver_error("cuMemcpyHtoDAsync", e))?;
        Ok(p)
    }
}

/// Runs `f` on the stream of `rctx`'s device; waits for the stream only under `MXRS_GPU_SYNC=1`.
pub(crate) fn run_on_device(
    rctx: &RunContext,
    pool: &StorageManager,
    f: impl FnOnce(&dyn Stream) -> Result<(), String>,
) -> Result<(), String> {
    let stream = bound_stream(rctx)?;
    let s = DeviceStream {
        stream: &stream,
        module: module(stream.context())?,
        pool,
        held: RefCell::default(),
    };
    let ran = f(&s);
    // The scratch goes back to the pool now: only work queued behind this op's reuses it.
    drop(s);
    ran?;
    if sync_each_op() {
        // Kernel faults surface here too.
        stream
            .synchronize()
            .map_err(|e| driver_error("waiting for the stream", e))?;
    }
    Ok(())
}

/// The engine op running `def`'s GPU kernel `kernel` on `ctx`'s workers; `state` is the bound
/// node's kept state, if it has one.
pub(crate) fn kernel_op<'a>(
    def: &'static OpDef,
    kernel: GpuKernel,
    attrs: Attrs,
    mut tensors: crate::ops::Tensors,
    pool: StorageManager,
    rng: Option<Arc<DeviceResources>>,
    state: Option<Arc<parking_lot::Mutex<StateSlot>>>,
) -> Op<'a> {
    Op::sync(def.name, move |rctx| {
        // The engine orders this op's draw after earlier ones: it writes the generator's var.
        let seeded = rng
            .as_ref()
            .map(|r| attrs.clone().with(SEED, r.rng.lock().gen::<u64>()));
        let attrs = seeded.as_ref().unwrap_or(&attrs);
        // Never contended: the engine orders the state's users by its var.
        let mut kept = state.as_ref().map(|s| s.lock());
        run_on_device(rctx, &pool, |s| {
            let (ins, outs) = tensors.split();
            run(
                def,
                kernel,
                def.alias_safe,
                attrs,
                ins,
                outs,
                s,
                kept.as_deref_mut(),
            )
        })
        .map_err(Into::into)
    })
}

/// The engine op setting a GPU array to `value`.
pub(crate) fn fill_op<'a>(t: TensorRef, value: f64, pool: StorageManager) -> Op<'a> {
    Op::sync("fill", move |rctx| {
        run_on_device(rctx, &pool, |s| fill_with(s, &t, value)).map_err(Into::into)
    })
}

/// An asynchronous copy between `from` and `to` (at least one a GPU), run by the GPU side's copy
/// workers: the transfer is queued on that GPU's stream and the op completes when it is done.
/// Between two GPUs the destination's stream carries it, first waiting for the source's stream
/// to reach this point (the ops that wrote the source may still be queued there); the source's
/// later writers wait for the op itself, which ends after the transfer.
pub(crate) fn copy_op<'a>(
    name: &'static str,
    src: TensorRef,
    dst: TensorRef,
    from: Context,
    to: Context,
) -> Op<'a> {
    let (side, prop) = match to.is_cpu() {
        false => (to, FnProperty::CopyToDevice),
        true => (from, FnProperty::CopyFromDevice),
    };
    Op::asynchronous(name, move |rctx, done| {
        // Whole tensors move in (not just their pointer fields, which are not `Send`).
        let (src, dst) = (src, dst);
        let bytes = src.buf.bytes.min(dst.buf.bytes);
        let queued = bound_stream(rctx).and_then(|stream| {
            if !from.is_cpu() && from.dev_id != side.dev_id {
                let source = stream_for(from)?;
                stream
                    .join(&source)
                    .map_err(|e| driver_error("waiting for the source GPU's stream", e))?;
            }
            // SAFETY: the engine keeps both arrays alive and unwritten by others until the op
            // completes; unified addressing tells host from device pointers.
            unsafe {
                sys::cuMemcpyAsync(
                    dst.buf.ptr as u64,
                    src.buf.ptr as u64,
                    bytes,
                    stream.cu_stream(),
                )
                .result()
            }
            .map_err(|e| driver_error("cuMemcpyAsync", e))?;
            Ok(stream)
        });
        match queued {
            Ok(stream) => complete_after(&stream, done),
            Err(e) => done.complete(Err(e.into())),
        }
    })
    .on(side)
    .prop(prop)
}

/// Completes `done` once everything queued on `stream` so far has run, or with the device's
/// error if the stream faults first.
///
/// An event recorded on the stream is handed to the device's completer thread, which waits for
/// it. A host callback on the stream would be lighter, but the driver never calls one once the
/// context has faulted, and the op would then never complete; an event wait returns the fault.
fn complete_after(stream: &Arc<CudaStream>, done: Completion) {
    let recorded = stream.record_event(Some(sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC));
    match recorded {
        Ok(event) => {
            if let Err(unsent) = completer(stream.context().ordinal()).send((event, done)) {
                let (event, done) = unsent.0;
                finish(&event, done);
            }
        }
        Err(e) => done.complete(Err(driver_error("recording the copy's event", e).into())),
    }
}

/// Completes `done` when `event` has happened.
fn finish(event: &CudaEvent, done: Completion) {
    let waited = event
        .synchronize()
        .map_err(|e| driver_error("the GPU's stream failed before the copy ended", e).into());
    done.complete(waited);
}

/// A copy waiting for its transfer: the event after it and the op to complete.
type Pending = (CudaEvent, Completion);

/// The thread that completes device `ordinal`'s copies as their events happen. Events of one
/// stream happen in the order they were recorded, so it waits for them in turn.
fn completer(ordinal: usize) -> Sender<Pending> {
    static TX: Mutex<Vec<(usize, Sender<Pending>)>> = Mutex::new(Vec::new());
    let mut senders = TX.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, tx)) = senders.iter().find(|(o, _)| *o == ordinal) {
        return tx.clone();
    }
    let (tx, rx) = channel::<Pending>();
    let spawned = std::thread::Builder::new()
        .name(format!("mxrs-gpu{ordinal}-completions"))
        .spawn(move || {
            for (event, done) in rx {
                finish(&event, done);
            }
        });
    // Without the thread, sends fail and the copy's worker waits for the event itself.
    let tx = match spawned {
        Ok(_) => tx,
        Err(_) => channel().0,
    };
    senders.push((ordinal, tx.clone()));
    tx
}

#[cfg(test)]
mod tests {
    /// The device code compiles with NVRTC wherever the library can be loaded (no GPU needed).
    #[test]
    fn nvrtc_compiles_the_kernels() {
        match super::compile_ptx() {
            Ok(ptx) => assert!(super::holds_every_kernel(&ptx), "a kernel is missing"),
            Err(e) => skip_unless_required(e),
        }
    }

    /// A second process (here: a second call) takes the PTX from the cache, as compiled.
    #[test]
    fn the_ptx_cache_keeps_what_nvrtc_compiled() {
        let dir = std::env::temp_dir().join(format!("mxrs-ptx-nvrtc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        match super::ptx_in(Some(&dir)) {
            Ok(first) => {
                let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
                assert_eq!(entries.len(), 1, "one entry: {entries:?}");
                let t = std::time::Instant::now();
                let second = super::ptx_in(Some(&dir)).unwrap();
                assert_eq!(first, second);
                eprintln!("PTX from the cache in {:?}", t.elapsed());
            }
            Err(e) => skip_unless_required(e),
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    const FAULT_CHILD: &str = "MXRS_TEST_FAULT_CHILD";

    /// A kernel that faults makes the waits after it fail instead of hanging: a copy to the GPU
    /// queued behind it (completed from the device's completer thread), a copy back to the host
    /// and waiting for everything. A fault spoils the process's CUDA context, so the test runs
    /// itself again in a child process.
    #[test]
    fn a_device_fault_fails_later_waits_instead_of_hanging() {
        use engine::{EngineBuilder, EngineKind, RunContext};
        use storage::{Context, StorageConfig};

        use crate::ops::gpu::elemwise::fill;
        use crate::{DType, Runtime};

        let name = "gpu::cuda::tests::a_device_fault_fails_later_waits_instead_of_hanging";
        if !storage::gpu_available() {
            return eprintln!("skipped: no usable GPU on this machine");
        }
        if std::env::var_os(FAULT_CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name, "--nocapture", "--test-threads=1"])
                .env(FAULT_CHILD, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
            return;
        }
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_secs(60));
            eprintln!("hung: no answer within 60 s of the fault");
            std::process::exit(3);
        });
        let rt = Runtime::new(
            EngineBuilder::new(EngineKind::ThreadedPerDevice).build(),
            StorageConfig::default(),
        );
        let gpu = Context::gpu(0);
        let a = rt.full(&[1 << 20], 1.0, DType::F32, gpu).unwrap();
        a.wait_to_read().unwrap();
        // A fill through an address no allocation holds, queued like any op's kernels behind
        // ~10 ms of other work, so that the copy below is queued before the fault happens.
        let rctx = RunContext {
            ctx: gpu,
            stream: engine::cuda::device_stream(0),
        };
        super::run_on_device(&rctx, &rt.storage(gpu), |s| {
            let big = 1 << 28;
            let buf = s.scratch(big * 4)?.cast::<f32>();
            for _ in 0..30 {
                fill(s, buf, big, 0.0)?;
            }
            fill(s, 16 as *mut f32, 1 << 20, 0.0)
        })
        .unwrap();
        // A copy from pageable host memory returns once staged and completes after the fault:
        // the engine must hear of it (a copy to the host waits for the stream in its call).
        let host = rt.full(&[4], 1.0, DType::F32, Context::cpu(0)).unwrap();
        let b = host.copy_to(gpu).unwrap();
        let err = rt.engine().wait_for_var(b.var()).unwrap_err().to_string();
        assert!(err.contains("ILLEGAL_ADDRESS"), "{err}");
        let err = a.to_vec::<f32>().unwrap_err().to_string();
        assert!(err.contains("ILLEGAL_ADDRESS"), "{err}");
        let err = rt.wait_all().unwrap_err().to_string();
        assert!(err.contains("ILLEGAL_ADDRESS"), "{err}");
    }

    /// CI installs NVIDIA's NVRTC wheel and sets `MXRS_REQUIRE_NVRTC=1`, so there a missing
    /// library fails the test; elsewhere it says why it skipped.
    fn skip_unless_required(e: String) {
        match e.contains("cannot be loaded") && std::env::var_os("MXRS_REQUIRE_NVRTC").is_none() {
            true => eprintln!("skipped: {e}"),
            false => panic!("{e}"),
        }
    }
}
