//! Convolutions by cuDNN (`cuda` feature), where the library loads: the columns of im2col are
//! never written, which is most of what the GEMM path spends beside the GEMMs. Like MXNet, a
//! convolution uses cuDNN unless its `cudnn_off` attribute says not to; `MXRS_CUDNN=0` turns it
//! off for the process. Without the library every convolution takes the im2col path, whose
//! results are the same up to rounding.
//!
//! The candidates for each convolution shape are the algorithms cuDNN's heuristics list
//! (`cudnnGetConvolution*Algorithm_v7`) within the op's `workspace` (MB, MXNet's attribute) and
//! without tensor-core math: float32 stays float32, as in our GEMMs (`CUDNN_FMA_MATH`; TF32
//! would round inputs to 10 bits). As MXNet does by default, the first call of a shape times
//! them and keeps the fastest (`MXRS_CUDNN_AUTOTUNE=0`, or the op's `cudnn_tune` set to `off`,
//! takes the heuristics' first instead). The choice is remembered per shape and device.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

use cudarc::cudnn::result::{self as dnn, CudnnError};
use cudarc::cudnn::sys;
use cudarc::driver::CudaStream;

use super::{ConvCall, ConvPass, ConvShape};

/// Whether cuDNN can be used: the library loads, is version 8 or later, and `MXRS_CUDNN` is not
/// `0`. Decided once per process.
pub(crate) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        if std::env::var("MXRS_CUDNN").is_ok_and(|v| v.trim() == "0") {
            return false;
        }
        // cudarc panics where a library or symbol is missing: look first, and catch the rest.
        std::panic::catch_unwind(|| {
            // SAFETY: loads NVIDIA's cuDNN library by its usual names, nothing else.
            let present = unsafe { sys::is_culib_present() };
            present && dnn::get_version() >= 8000
        })
        .unwrap_or(false)
    })
}

/// Whether convolutions may time cuDNN's algorithms (`MXRS_CUDNN_AUTOTUNE` is not `0`), read
/// once.
fn autotune() -> bool {
    static TUNE: OnceLock<bool> = OnceLock::new();
    *TUNE.get_or_init(|| !std::env::var("MXRS_CUDNN_AUTOTUNE").is_ok_and(|v| v.trim() == "0"))
}

/// The library's version (`CUDNN_VERSION`: major * 10000 + minor * 100 + patch); only once
/// [`available`] said yes.
pub(crate) fn version() -> usize {
    dnn::get_version()
}

/// Runs `call` on `stream`, with workspace from `scratch`.
pub(super) fn convolve(
    stream: &CudaStream,
    scratch: impl Fn(usize) -> Result<*mut u8, String>,
    call: &ConvCall,
) -> Result<(), String> {
    let handle = handle_for(stream)?;
    let d = Descriptors::new(call).map_err(|e| cudnn_error("describing the convolution", e))?;
    let shape = (stream.context().ordinal(), call.shape);
    let (algo, bytes) = match remembered(&shape)? {
        Some(choice) => choice,
        None => {
            let choice = choose(handle, &d, call, stream, &scratch)?;
            remember(shape, choice)?;
            choice
        }
    };
    let workspace = if bytes == 0 {
        std::ptr::null_mut()
    } else {
        scratch(bytes)?
    };
    // SAFETY: this thread's handle on the stream, live descriptors of the call's shapes, device
    // pointers to buffers of those shapes (the op layer's promise) and a workspace of the size
    // cuDNN asked for.
    unsafe { run(handle, &d, call, algo, workspace, bytes) }
        .map_err(|e| cudnn_error(call.shape.pass.name(), e))
}

/// One cuDNN call of `call`'s pass with `algo`.
///
/// # Safety
/// As in [`convolve`]: live handle and descriptors, valid device pointers, and `bytes` of
/// workspace at `workspace`.
unsafe fn run(
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    call: &ConvCall,
    algo: Algo,
    workspace: *mut u8,
    bytes: usize,
) -> Result<(), CudnnError> {
    let (alpha, beta) = (1.0f32, 0.0f32);
    let (alpha, beta) = ((&alpha as *const f32).cast(), (&beta as *const f32).cast());
    let ws = workspace.cast();
    match algo {
        Algo::Forward(algo) => dnn::convolution_forward(
            handle,
            alpha,
            d.x,
            call.data.cast(),
            d.w,
            call.filter.cast(),
            d.conv,
            algo,
            ws,
            bytes,
            beta,
            d.y,
            call.out.cast(),
        ),
        Algo::Data(algo) => dnn::convolution_backward_data(
            handle,
            alpha,
            d.w,
            call.filter.cast(),
            d.y,
            call.out.cast(),
            d.conv,
            algo,
            ws,
            bytes,
            beta,
            d.x,
            call.data.cast(),
        ),
        Algo::Filter(algo) => dnn::convolution_backward_filter(
            handle,
            alpha,
            d.x,
            call.data.cast(),
            d.y,
            call.out.cast(),
            d.conv,
            algo,
            ws,
            bytes,
            beta,
            d.w,
            call.filter.cast(),
        ),
    }
}

fn cudnn_error(what: &str, e: CudnnError) -> String {
    format!("cuDNN, {what}: {e:?}")
}

/// A cuDNN handle of this thread, bound to one stream.
struct Handle(sys::cudnnHandle_t);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by `cudnnCreate`, destroyed once, here. Nothing to do on failure at
        // thread exit.
        let _ = unsafe { dnn::destroy_handle(self.0) };
    }
}

thread_local! {
    /// One cuDNN handle per stream this thread has run convolutions on (handles are not to be
    /// shared between threads).
    static HANDLES: RefCell<Vec<(usize, Handle)>> = const { RefCell::new(Vec::new()) };
}

fn handle_for(stream: &CudaStream) -> Result<sys::cudnnHandle_t, String> {
    let key = stream.cu_stream() as usize;
    HANDLES.with(|handles| {
        let mut handles = handles.borrow_mut();
        if let Some((_, h)) = handles.iter().find(|(k, _)| *k == key) {
            return Ok(h.0);
        }
        let h = Handle(dnn::create_handle().map_err(|e| cudnn_error("creating a handle", e))?);
        // SAFETY: a live handle and the stream's driver handle (the runtime's stream type is
        // the same object).
        unsafe { dnn::set_stream(h.0, stream.cu_stream().cast()) }
            .map_err(|e| cudnn_error("setting the stream", e))?;
        let raw = h.0;
        handles.push((key, h));
        Ok(raw)
    })
}

/// The descriptors of one call, destroyed on drop.
struct Descriptors {
    x: sys::cudnnTensorDescriptor_t,
    y: sys::cudnnTensorDescriptor_t,
    w: sys::cudnnFilterDescriptor_t,
    conv: sys::cudnnConvolutionDescriptor_t,
}

impl Descriptors {
    fn new(call: &ConvCall) -> Result<Descriptors, CudnnError> {
        let int = |v: usize| v as c_int;
        let dims = |s: [usize; 4]| s.map(int);
        let f32_ = sys::cudnnDataType_t::CUDNN_DATA_FLOAT;
        let nchw = sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
        // Each descriptor is owned by `d` as soon as it exists, so an error drops it.
        let mut d = Descriptors {
            x: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
        };
        d.x = dnn::create_tensor_descriptor()?;
        d.y = dnn::create_tensor_descriptor()?;
        d.w = dnn::create_filter_descriptor()?;
        d.conv = dnn::create_convolution_descriptor()?;
        // SAFETY: descriptors just created, set once each.
        unsafe {
            dnn::set_tensor4d_descriptor(d.x, nchw, f32_, dims(call.shape.x))?;
            dnn::set_tensor4d_descriptor(d.y, nchw, f32_, dims(call.shape.y))?;
            dnn::set_filter4d_descriptor(d.w, f32_, nchw, dims(call.shape.w))?;
            dnn::set_convolution2d_descriptor(
                d.conv,
                int(call.shape.pad.0),
                int(call.shape.pad.1),
                int(call.shape.stride.0),
                int(call.shape.stride.1),
                int(call.shape.dilate.0),
                int(call.shape.dilate.1),
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                f32_,
            )?;
            dnn::set_convolution_group_count(d.conv, int(call.shape.groups))?;
            dnn::set_convolution_math_type(d.conv, sys::cudnnMathType_t::CUDNN_FMA_MATH)?;
        }
        Ok(d)
    }
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each non-null descriptor was created above and is destroyed once.
        unsafe {
            if !self.x.is_null() {
                let _ = dnn::destroy_tensor_descriptor(self.x);
            }
            if !self.y.is_null() {
                let _ = dnn::destroy_tensor_descriptor(self.y);
            }
            if !self.w.is_null() {
                let _ = dnn::destroy_filter_descriptor(self.w);
            }
            if !self.conv.is_null() {
                let _ = dnn::destroy_convolution_descriptor(self.conv);
            }
        }
    }
}

/// A convolution shape on one device, for the remembered choices.
type Key = (usize, ConvShape);

/// The algorithm and workspace (bytes) chosen for each shape so far.
static CHOSEN: Mutex<Option<HashMap<Key, (Algo, usize)>>> = Mutex::new(None);

fn remembered(shape: &Key) -> Result<Option<(Algo, usize)>, String> {
    let chosen = CHOSEN.lock().map_err(|e| e.to_string())?;
    Ok(chosen.as_ref().and_then(|m| m.get(shape).copied()))
}

fn remember(shape: Key, choice: (Algo, usize)) -> Result<(), String> {
    let mut chosen = CHOSEN.lock().map_err(|e| e.to_string())?;
    chosen
        .get_or_insert_with(HashMap::new)
        .insert(shape, choice);
    Ok(())
}

/// An algorithm of one of the three passes.
#[derive(Clone, Copy, Debug)]
enum Algo {
    Forward(sys::cudnnConvolutionFwdAlgo_t),
    Data(sys::cudnnConvolutionBwdDataAlgo_t),
    Filter(sys::cudnnConvolutionBwdFilterAlgo_t),
}

/// One algorithm's performance as cuDNN's heuristics rank it.
struct Ranked {
    algo: Algo,
    ok: bool,
    memory: usize,
    math: sys::cudnnMathType_t,
}

/// The algorithm for `call` and its workspace in bytes: among the algorithms cuDNN's heuristics
/// list that fit the workspace and use no tensor-core math, the first, or with `call.shape.tune` the
/// fastest measured here (see [`fastest`]).
fn choose(
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    call: &ConvCall,
    stream: &CudaStream,
    scratch: &dyn Fn(usize) -> Result<*mut u8, String>,
) -> Result<(Algo, usize), String> {
    let ranked =
        rank(handle, d, call.shape.pass).map_err(|e| cudnn_error("choosing an algorithm", e))?;
    let mut candidates = Vec::new();
    for r in ranked.iter().filter(|r| {
        r.ok && r.memory <= call.shape.workspace
            && matches!(
                r.math,
                sys::cudnnMathType_t::CUDNN_FMA_MATH | sys::cudnnMathType_t::CUDNN_DEFAULT_MATH
            )
    }) {
        // The workspace as cuDNN states it for the algorithm (the ranking's figure can be an
        // estimate).
        // SAFETY: live handle and descriptors.
        let bytes = unsafe { workspace(handle, d, r.algo) }
            .map_err(|e| cudnn_error("sizing the workspace", e))?;
        if bytes <= call.shape.workspace {
            candidates.push((r.algo, bytes));
        }
    }
    let first = *candidates.first().ok_or_else(|| {
        format!(
            "cuDNN has no {} algorithm for data {:?}, filters {:?} within a workspace of {} \
             bytes (set the op's `cudnn_off` or a larger `workspace`)",
            call.shape.pass.name(),
            call.shape.x,
            call.shape.w,
            call.shape.workspace
        )
    })?;
    if !call.shape.tune || !autotune() || candidates.len() == 1 {
        return Ok(first);
    }
    fastest(handle, d, call, stream, scratch, &candidates)
}

/// Runs each candidate on the call's own buffers (the pass overwrites its result, so the last
/// call of the op sets it right) and keeps the quickest: the wall time from the call to the
/// stream's end, best of two, with the stream drained first. That counts what the call costs
/// the host as well as the GPU: some algorithms' calls hold the host until the GPU catches up
/// (on the H100 with cuDNN 9.14, IMPLICIT_PRECOMP_GEMM's forward calls took 240-330 µs each
/// inside the call, IMPLICIT_GEMM's 90), which leaves the GPU idle while the next ops are
/// queued. A candidate that fails is passed over.
fn fastest(
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    call: &ConvCall,
    stream: &CudaStream,
    scratch: &dyn Fn(usize) -> Result<*mut u8, String>,
    candidates: &[(Algo, usize)],
) -> Result<(Algo, usize), String> {
    let most = candidates.iter().map(|c| c.1).max().unwrap_or(0);
    let workspace = if most == 0 {
        std::ptr::null_mut()
    } else {
        scratch(most)?
    };
    let drain = || {
        stream
            .synchronize()
            .map_err(|e| format!("cuDNN, timing the algorithms: {e:?}"))
    };
    drain()?;
    let mut best: Option<((Algo, usize), std::time::Duration)> = None;
    for &(algo, bytes) in candidates {
        let mut quickest = None;
        for _ in 0..2 {
            let start = std::time::Instant::now();
            // SAFETY: as in `convolve`; the workspace holds the largest candidate's.
            let ran = unsafe { run(handle, d, call, algo, workspace, bytes) };
            drain()?;
            if ran.is_err() {
                quickest = None;
                break;
            }
            let took = start.elapsed();
            quickest = Some(quickest.map_or(took, |q: std::time::Duration| q.min(took)));
        }
        if let Some(took) = quickest {
            if best.is_none_or(|(_, b)| took < b) {
                best = Some(((algo, bytes), took));
            }
        }
    }
    best.map(|(choice, _)| choice).ok_or_else(|| {
        format!(
            "cuDNN: every {} algorithm failed for data {:?}, filters {:?}",
            call.shape.pass.name(),
            call.shape.x,
            call.shape.w
        )
    })
}

/// cuDNN's heuristic ranking of every algorithm of `pass`, best first.
fn rank(
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    pass: ConvPass,
) -> Result<Vec<Ranked>, CudnnError> {
    const MAX: usize = 16;
    // The passes' queries differ in argument order and result type, not in what is done with
    // them: `$get` fills up to MAX `$perf` results, each one a `Ranked` with `$algo`.
    macro_rules! ranked {
        ($perf:ty, $get:path, $algo:path, [$($desc:expr),*]) => {{
            let mut count: c_int = 0;
            // SAFETY: zero is a valid value of every field of the result struct.
            let mut perf = [unsafe { std::mem::zeroed::<$perf>() }; MAX];
            // SAFETY: live handle and descriptors; `perf` holds MAX results, as requested.
            unsafe { $get(handle, $($desc,)* MAX as c_int, &mut count, perf.as_mut_ptr()) }?;
            perf[..count.clamp(0, MAX as c_int) as usize]
                .iter()
                .map(|p| Ranked {
                    algo: $algo(p.algo),
                    ok: p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS,
                    memory: p.memory,
                    math: p.mathType,
                })
                .collect()
        }};
    }
    Ok(match pass {
        ConvPass::Forward => ranked!(
            sys::cudnnConvolutionFwdAlgoPerf_t,
            dnn::get_convolution_forward_algorithm,
            Algo::Forward,
            [d.x, d.w, d.conv, d.y]
        ),
        ConvPass::Data => ranked!(
            sys::cudnnConvolutionBwdDataAlgoPerf_t,
            dnn::get_convolution_backward_data_algorithm,
            Algo::Data,
            [d.w, d.y, d.conv, d.x]
        ),
        ConvPass::Filter => ranked!(
            sys::cudnnConvolutionBwdFilterAlgoPerf_t,
            dnn::get_convolution_backward_filter_algorithm,
            Algo::Filter,
            [d.x, d.y, d.conv, d.w]
        ),
    })
}

/// The workspace `algo` needs.
///
/// # Safety
/// Live handle and descriptors.
unsafe fn workspace(
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    algo: Algo,
) -> Result<usize, CudnnError> {
    match algo {
        Algo::Forward(algo) => {
            dnn::get_convolution_forward_workspace_size(handle, d.x, d.w, d.conv, d.y, algo)
        }
        Algo::Data(algo) => {
            dnn::get_convolution_backward_data_workspace_size(handle, d.w, d.y, d.conv, d.x, algo)
        }
        Algo::Filter(algo) => {
            dnn::get_convolution_backward_filter_workspace_size(handle, d.x, d.y, d.conv, d.w, algo)
        }
    }
}
