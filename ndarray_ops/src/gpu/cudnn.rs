//! Convolutions by cuDNN (`cuda` feature), where the library loads: the columns of im2col are
//! never written, which is most of what the GEMM path spends beside the GEMMs. Like MXNet, a
//! convolution uses cuDNN unless its `cudnn_off` attribute says not to; `MXRS_CUDNN=0` turns it
//! off for the process. Without the library every convolution takes the im2col path, whose
//! results are the same up to rounding.
//!
//! The algorithm of each convolution shape is cuDNN's first choice by its heuristics
//! (`cudnnGetConvolution*Algorithm_v7`, what PyTorch does unless benchmarking is on) among those
//! within the op's `workspace` (MB, MXNet's attribute) and without tensor-core math: float32
//! stays float32, as in our GEMMs (`CUDNN_FMA_MATH`; TF32 would round inputs to 10 bits). The
//! choice is remembered per shape and device, so only a shape's first call asks cuDNN.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

use cudarc::cudnn::result::{self as dnn, CudnnError};
use cudarc::cudnn::sys;
use cudarc::driver::CudaStream;

use super::{ConvCall, ConvPass};

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
    let (algo, bytes) = algorithm(handle, &d, call, stream.context().ordinal())?;
    let workspace = if bytes == 0 {
        std::ptr::null_mut()
    } else {
        scratch(bytes)?
    };
    let (alpha, beta) = (1.0f32, 0.0f32);
    let (alpha, beta) = ((&alpha as *const f32).cast(), (&beta as *const f32).cast());
    let ws = workspace.cast();
    // SAFETY: live descriptors of the call's shapes; device pointers to buffers of those shapes
    // (the op layer's promise) and a workspace of the size cuDNN asked for; the handle is this
    // thread's, bound to the stream.
    unsafe {
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
    .map_err(|e| cudnn_error(call.pass.name(), e))
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
            dnn::set_tensor4d_descriptor(d.x, nchw, f32_, dims(call.x))?;
            dnn::set_tensor4d_descriptor(d.y, nchw, f32_, dims(call.y))?;
            dnn::set_filter4d_descriptor(d.w, f32_, nchw, dims(call.w))?;
            dnn::set_convolution2d_descriptor(
                d.conv,
                int(call.pad.0),
                int(call.pad.1),
                int(call.stride.0),
                int(call.stride.1),
                int(call.dilate.0),
                int(call.dilate.1),
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                f32_,
            )?;
            dnn::set_convolution_group_count(d.conv, int(call.groups))?;
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
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Shape {
    device: usize,
    pass: ConvPass,
    x: [usize; 4],
    w: [usize; 4],
    y: [usize; 4],
    pad: (usize, usize),
    stride: (usize, usize),
    dilate: (usize, usize),
    groups: usize,
    workspace: usize,
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

/// The algorithm for `call` and its workspace in bytes.
fn algorithm(
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    call: &ConvCall,
    device: usize,
) -> Result<(Algo, usize), String> {
    static CHOSEN: Mutex<Option<HashMap<Shape, (Algo, usize)>>> = Mutex::new(None);
    let shape = Shape {
        device,
        pass: call.pass,
        x: call.x,
        w: call.w,
        y: call.y,
        pad: call.pad,
        stride: call.stride,
        dilate: call.dilate,
        groups: call.groups,
        workspace: call.workspace,
    };
    if let Some(&hit) = CHOSEN
        .lock()
        .map_err(|e| e.to_string())?
        .get_or_insert_with(HashMap::new)
        .get(&shape)
    {
        return Ok(hit);
    }
    let ranked = rank(handle, d, call.pass).map_err(|e| cudnn_error("choosing an algorithm", e))?;
    let fits = |r: &&Ranked| {
        r.ok && r.memory <= call.workspace
            && matches!(
                r.math,
                sys::cudnnMathType_t::CUDNN_FMA_MATH | sys::cudnnMathType_t::CUDNN_DEFAULT_MATH
            )
    };
    let best = ranked.iter().find(fits).ok_or_else(|| {
        format!(
            "cuDNN has no {} algorithm for data {:?}, filters {:?} within a workspace of {} \
             bytes (set the op's `cudnn_off` or a larger `workspace`)",
            call.pass.name(),
            call.x,
            call.w,
            call.workspace
        )
    })?;
    // The workspace as cuDNN states it for the chosen algorithm (the ranking's figure can be
    // an estimate).
    // SAFETY: live handle and descriptors.
    let bytes = unsafe { workspace(handle, d, best.algo) }
        .map_err(|e| cudnn_error("sizing the workspace", e))?;
    let choice = (best.algo, bytes);
    CHOSEN
        .lock()
        .map_err(|e| e.to_string())?
        .get_or_insert_with(HashMap::new)
        .insert(shape, choice);
    Ok(choice)
}

/// cuDNN's heuristic ranking of every algorithm of `pass`, best first.
fn rank(
    handle: sys::cudnnHandle_t,
    d: &Descriptors,
    pass: ConvPass,
) -> Result<Vec<Ranked>, CudnnError> {
    const MAX: usize = 16;
    let mut count: c_int = 0;
    // SAFETY (all three): live handle and descriptors; `perf` holds MAX results, as requested.
    unsafe {
        match pass {
            ConvPass::Forward => {
                let mut perf = [std::mem::zeroed::<sys::cudnnConvolutionFwdAlgoPerf_t>(); MAX];
                dnn::get_convolution_forward_algorithm(
                    handle,
                    d.x,
                    d.w,
                    d.conv,
                    d.y,
                    MAX as c_int,
                    &mut count,
                    perf.as_mut_ptr(),
                )?;
                Ok(perf[..count.max(0) as usize]
                    .iter()
                    .map(|p| Ranked {
                        algo: Algo::Forward(p.algo),
                        ok: p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS,
                        memory: p.memory,
                        math: p.mathType,
                    })
                    .collect())
            }
            ConvPass::Data => {
                let mut perf = [std::mem::zeroed::<sys::cudnnConvolutionBwdDataAlgoPerf_t>(); MAX];
                dnn::get_convolution_backward_data_algorithm(
                    handle,
                    d.w,
                    d.y,
                    d.conv,
                    d.x,
                    MAX as c_int,
                    &mut count,
                    perf.as_mut_ptr(),
                )?;
                Ok(perf[..count.max(0) as usize]
                    .iter()
                    .map(|p| Ranked {
                        algo: Algo::Data(p.algo),
                        ok: p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS,
                        memory: p.memory,
                        math: p.mathType,
                    })
                    .collect())
            }
            ConvPass::Filter => {
                let mut perf =
                    [std::mem::zeroed::<sys::cudnnConvolutionBwdFilterAlgoPerf_t>(); MAX];
                dnn::get_convolution_backward_filter_algorithm(
                    handle,
                    d.x,
                    d.y,
                    d.conv,
                    d.w,
                    MAX as c_int,
                    &mut count,
                    perf.as_mut_ptr(),
                )?;
                Ok(perf[..count.max(0) as usize]
                    .iter()
                    .map(|p| Ranked {
                        algo: Algo::Filter(p.algo),
                        ok: p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS,
                        memory: p.memory,
                        math: p.mathType,
                    })
                    .collect())
            }
        }
    }
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
