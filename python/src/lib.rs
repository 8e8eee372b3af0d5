//! The native half of the `mxrs` Python package (`mxrs._native`): arrays, op calls, the
//! autograd switches and the op signatures the Python layer writes its `mx.nd.<op>` functions
//! from. The Python layer (`python/mxrs`) gives these MXNet's names and argument conventions.
//!
//! Everything that may wait for the engine or compute runs with the GIL released, so Python
//! threads run beside it and beside each other; every runtime error is raised as
//! `MXNetError` with the runtime's message.

mod arith;
mod dlpack;
mod kvstore;
mod symbol;

use std::sync::{Arc, OnceLock};

use ndarray_ops::ops::signature::AttrType;
use ndarray_ops::{autograd, invoke_on, Attrs, DType, GradReq, NDArray, NdError, Runtime, Span};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use storage::Context;

create_exception!(
    _native,
    MXNetError,
    PyException,
    "An error the runtime reported: a bad call, a failed op, a bad file."
);

pub(crate) fn err(e: NdError) -> PyErr {
    MXNetError::new_err(e.to_string())
}

/// The process's runtime, configured from the `MXRS_*` environment variables (the package
/// maps MXNet's onto them first) when first asked for. It always has a profiler, paused unless
/// `MXRS_PROFILER_OUTPUT` turned it on, so that `mx.profiler.set_state("run")` works at any
/// time; paused, it costs one relaxed load per op.
pub(crate) fn runtime() -> PyResult<Arc<Runtime>> {
    static RT: OnceLock<Result<Arc<Runtime>, NdError>> = OnceLock::new();
    RT.get_or_init(|| {
        let mut from_env = false;
        let rt = Runtime::from_env(|b| {
            from_env = b.config().profiler.is_some();
            match from_env {
                true => b,
                false => b.profiler(None),
            }
        })?;
        if let (false, Some(p)) = (from_env, rt.engine().profiler()) {
            p.pause();
        }
        Ok(rt)
    })
    .clone()
    .map_err(err)
}

fn profiler() -> PyResult<Arc<Runtime>> {
    let rt = runtime()?;
    match rt.engine().profiler() {
        Some(_) => Ok(rt),
        None => Err(MXNetError::new_err(
            "the engine was built without a profiler",
        )),
    }
}

/// Starts (`true`) or stops recording ops in the profiler.
#[pyfunction]
fn profiler_set_running(on: bool) -> PyResult<()> {
    let rt = profiler()?;
    if let Some(p) = rt.engine().profiler() {
        match on {
            true => p.resume(),
            false => p.pause(),
        }
    }
    Ok(())
}

/// The profiler's table of time per op name.
#[pyfunction]
fn profiler_summary() -> PyResult<String> {
    let rt = profiler()?;
    Ok(rt
        .engine()
        .profiler()
        .map(|p| p.summary_table())
        .unwrap_or_default())
}

/// Writes the recorded ops to `path` as a Chrome trace (chrome://tracing, Perfetto), after
/// every pushed op has run.
#[pyfunction]
fn profiler_dump(py: Python<'_>, path: &str) -> PyResult<()> {
    let rt = profiler()?;
    py.detach(|| rt.wait_all()).map_err(err)?;
    let p = rt
        .engine()
        .profiler()
        .map(|p| p.write(std::path::Path::new(path)));
    match p {
        Some(Err(e)) => Err(MXNetError::new_err(format!(
            "profiler: cannot write {path}: {e}"
        ))),
        _ => Ok(()),
    }
}

/// Nanoseconds since the profiler started (where a span marked later starts).
#[pyfunction]
fn profiler_now() -> PyResult<u64> {
    let rt = profiler()?;
    Ok(rt.engine().profiler().map_or(0, |p| p.now_ns()))
}

/// Marks what `kind` says in the trace, under `domain`: a `span` from `start` (a
/// `profiler_now` reading) to now, a `counter`'s new `value`, an `instant` of `scope`.
#[pyfunction]
#[pyo3(signature = (kind, domain, name, start=0, value=0.0, scope="process"))]
fn profiler_mark(
    kind: &str,
    domain: &str,
    name: &str,
    start: u64,
    value: f64,
    scope: &str,
) -> PyResult<()> {
    let rt = profiler()?;
    let Some(p) = rt.engine().profiler() else {
        return Ok(());
    };
    match kind {
        "span" => p.mark_span(domain, name, start),
        "counter" => p.mark_counter(domain, name, value),
        "instant" => p.mark_instant(domain, name, scope),
        other => {
            return Err(MXNetError::new_err(format!(
                "profiler: unknown mark {other:?} (span, counter, instant)"
            )))
        }
    }
    Ok(())
}

/// One row of the profiler's statistics: (domain, name, count, total ns, min ns, max ns).
type StatRow = (String, String, u64, u64, u64, u64);

/// Per op name, then per marked span name and domain, a [`StatRow`]. Ops are under the domain
/// `operator`.
#[pyfunction]
fn profiler_stats() -> PyResult<Vec<StatRow>> {
    let rt = profiler()?;
    let Some(p) = rt.engine().profiler() else {
        return Ok(Vec::new());
    };
    let mut out: Vec<_> = p
        .summary()
        .into_iter()
        .map(|s| {
            (
                "operator".to_string(),
                s.name,
                s.count,
                s.total_ns,
                s.min_ns,
                s.max_ns,
            )
        })
        .collect();
    let mut spans: std::collections::BTreeMap<(String, String), (u64, u64, u64, u64)> =
        std::collections::BTreeMap::new();
    for m in p.marks() {
        if let engine::Mark::Span { start_ns, end_ns } = m.mark {
            let ns = end_ns - start_ns;
            let e = spans
                .entry((m.domain, m.name))
                .or_insert((0, 0, u64::MAX, 0));
            *e = (e.0 + 1, e.1 + ns, e.2.min(ns), e.3.max(ns));
        }
    }
    out.extend(
        spans
            .into_iter()
            .map(|((d, n), (c, t, lo, hi))| (d, n, c, t, lo, hi)),
    );
    Ok(out)
}

/// Forgets what the profiler recorded.
#[pyfunction]
fn profiler_reset() -> PyResult<()> {
    let rt = profiler()?;
    if let Some(p) = rt.engine().profiler() {
        p.reset();
    }
    Ok(())
}

/// A device as Python names it: `("cpu", 0)`, `("gpu", 1)`.
pub(crate) fn context(dev_type: &str, dev_id: u32) -> PyResult<Context> {
    match dev_type {
        "cpu" => Ok(Context::cpu(dev_id)),
        "cpu_pinned" => Ok(Context::cpu_pinned(dev_id)),
        "cpu_shared" => Ok(Context::cpu_shared(dev_id)),
        "gpu" => Ok(Context::gpu(dev_id)),
        other => Err(MXNetError::new_err(format!(
            "unknown device type {other:?} (cpu or gpu)"
        ))),
    }
}

pub(crate) fn dtype(name: &str) -> PyResult<DType> {
    DType::parse(name).ok_or_else(|| {
        MXNetError::new_err(format!(
            "dtype {name:?} is not supported (float32, float64, int32, int64, uint8)"
        ))
    })
}

/// `mx.nd.NDArray`: a view of device memory the engine writes asynchronously. The type is
/// native, so that its arithmetic operators run without a Python frame; the Python layer adds
/// its other methods to it (`mxrs/ndarray/ndarray.py`). A Python object stays the same array
/// when a gradient is attached, which gives the handle a new autograd entry: hence the lock,
/// held only to read or swap the handle, never across a wait.
#[pyclass(module = "mxrs.ndarray", name = "NDArray", frozen, weakref)]
pub(crate) struct Array {
    a: parking_lot::RwLock<NDArray>,
}

impl Array {
    /// The handle (a clone: the lock is not held).
    pub(crate) fn handle(&self) -> NDArray {
        self.with(NDArray::clone)
    }

    /// Runs `f` on the handle under the read lock (no clone; `f` must not wait for Python).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&NDArray) -> R) -> R {
        // Recursive: a second reader on this thread must not queue behind a waiting writer.
        f(&self.a.read_recursive())
    }
}

pub(crate) fn wrap(a: NDArray) -> Array {
    Array {
        a: parking_lot::RwLock::new(a),
    }
}

#[pymethods]
impl Array {
    /// The shape.
    #[getter]
    fn _shape(&self) -> Vec<usize> {
        self.with(|a| a.shape().to_vec())
    }

    /// The dtype's name (`float32`, ...).
    #[getter]
    fn _dtype(&self) -> &'static str {
        self.with(|a| a.dtype().name())
    }

    /// The device, as `(device type, id)`.
    #[getter]
    fn _context(&self) -> (&'static str, u32) {
        let c = self.with(NDArray::ctx);
        (c.dev_type.name(), c.dev_id)
    }

    /// The contents as bytes in native order, once every pending write is done (raises the
    /// error of a failed op that wrote it).
    fn _to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let a = self.handle();
        let bytes = py.detach(move || a.to_bytes()).map_err(err)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Waits until every pending write is done.
    fn _wait_to_read(&self, py: Python<'_>) -> PyResult<()> {
        let a = self.handle();
        py.detach(move || a.wait_to_read()).map_err(err)
    }

    /// A view with another shape of the same element count, sharing memory.
    fn _reshape(&self, shape: Vec<usize>) -> PyResult<Array> {
        self.with(|a| a.reshape(&shape)).map(wrap).map_err(err)
    }

    /// Rows `start..end` of the first axis, sharing memory.
    fn _slice(&self, start: usize, end: usize) -> PyResult<Array> {
        self.with(|a| a.slice(start, end)).map(wrap).map_err(err)
    }

    /// Row `i` of the first axis, sharing memory.
    fn _at(&self, i: usize) -> PyResult<Array> {
        self.with(|a| a.at(i)).map(wrap).map_err(err)
    }

    /// A copy on device `(dev_type, dev_id)`.
    fn _copy_to(&self, dev_type: &str, dev_id: u32) -> PyResult<Array> {
        let ctx = context(dev_type, dev_id)?;
        self.with(|a| a.copy_to(ctx)).map(wrap).map_err(err)
    }

    /// Copies this array's values into `dst` (same shape).
    fn _copy_into(&self, dst: &Array) -> PyResult<()> {
        self.handle().copy_into(&dst.handle()).map_err(err)
    }

    /// Sets every element to `value`.
    fn _fill(&self, value: f64) -> PyResult<()> {
        self.with(|a| a.fill(value)).map_err(err)
    }

    /// Writes `value` (or sets the number `value`) into the strided region of this array given
    /// per axis as `(start, step, count)`: one op on the engine that updates only that region.
    fn _assign_region(
        &self,
        spans: Vec<(usize, isize, usize)>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let spans: Vec<Span> = spans
            .into_iter()
            .map(|(start, step, count)| Span { start, step, count })
            .collect();
        match value.cast::<Array>() {
            Ok(v) => {
                let v = v.get().handle();
                self.with(|a| a.assign_region(&spans, &v)).map_err(err)
            }
            Err(_) => {
                let v: f64 = value.extract()?;
                self.with(|a| a.fill_region(&spans, v)).map_err(err)
            }
        }
    }

    /// Whether both are the same elements of the same memory block.
    fn _same_view(&self, other: &Array) -> bool {
        self.handle().same_view(&other.handle())
    }

    /// Whether both are views of the same memory block.
    fn _shares_memory(&self, other: &Array) -> bool {
        self.handle().shares_chunk(&other.handle())
    }

    /// Attaches a gradient (`write`, `add` or `null`), into `into` when given (else a new zero
    /// array): the array keeps its identity and records into the new gradient from now on.
    #[pyo3(signature = (req, into=None))]
    fn _attach_grad(&self, req: &str, into: Option<&Array>) -> PyResult<()> {
        let req = match req {
            "write" => GradReq::Write,
            "add" => GradReq::Add,
            "null" => GradReq::Null,
            other => {
                return Err(MXNetError::new_err(format!(
                    "grad_req {other:?} is not one of write, add, null"
                )))
            }
        };
        let mut a = self.handle();
        match into {
            Some(g) => a.attach_grad_into(g.handle(), req),
            None => a.attach_grad(req),
        }
        .map_err(err)?;
        *self.a.write() = a;
        Ok(())
    }

    /// The gradient array attached, if any.
    #[getter]
    fn _grad(&self) -> Option<Array> {
        self.with(NDArray::grad).map(wrap)
    }

    /// The same memory outside any recorded graph.
    fn _detach(&self) -> Array {
        wrap(self.with(NDArray::detach))
    }

    fn __add__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        arith::apply(slf, other, arith::ADD)
    }

    fn __radd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        arith::apply(slf, other, arith::ADD)
    }

    fn __sub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        arith::apply(slf, other, arith::SUB)
    }

    fn __rsub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        arith::apply(slf, other, arith::RSUB)
    }

    fn __mul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        arith::apply(slf, other, arith::MUL)
    }

    fn __rmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        arith::apply(slf, other, arith::MUL)
    }

    fn __truediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        arith::apply(slf, other, arith::DIV)
    }

    fn __rtruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        arith::apply(slf, other, arith::RDIV)
    }
}

/// Attributes from the `(key, value)` strings the Python layer passes.
pub(crate) fn attrs_of(pairs: Vec<(String, String)>) -> Attrs {
    pairs
        .into_iter()
        .fold(Attrs::new(), |acc, (k, v)| acc.with(&k, v))
}

pub(crate) fn handles(list: &[Py<Array>]) -> Vec<NDArray> {
    list.iter().map(|h| h.get().handle()).collect()
}

/// Makes an array on `(dev_type, dev_id)` from native-order bytes (one copy, made with the
/// GIL held: the bytes are the caller's object's).
/// Returns every block the device's pool keeps cached to the device (MXNet's `empty_cache`),
/// once every pushed op has run.
#[pyfunction]
fn empty_cache(py: Python<'_>, dev_type: &str, dev_id: u32) -> PyResult<()> {
    let (rt, ctx) = (runtime()?, context(dev_type, dev_id)?);
    py.detach(|| rt.wait_all()).map_err(err)?;
    rt.storage(ctx).release_all();
    Ok(())
}

/// How many GPUs the runtime can use.
#[pyfunction]
fn num_gpus() -> usize {
    storage::gpu_count()
}

/// The features of this build and machine, by MXNet's names (`mx.runtime.Features`): what the
/// package was built with and what the CPU offers that the kernels use.
#[pyfunction]
fn features() -> Vec<(&'static str, bool)> {
    #[cfg(target_arch = "x86_64")]
    let cpu = [
        ("CPU_SSE", is_x86_feature_detected!("sse")),
        ("CPU_SSE2", is_x86_feature_detected!("sse2")),
        ("CPU_SSE3", is_x86_feature_detected!("sse3")),
        ("CPU_SSE4_1", is_x86_feature_detected!("sse4.1")),
        ("CPU_SSE4_2", is_x86_feature_detected!("sse4.2")),
        ("CPU_SSE4A", is_x86_feature_detected!("sse4a")),
        ("CPU_AVX", is_x86_feature_detected!("avx")),
        ("CPU_AVX2", is_x86_feature_detected!("avx2")),
        ("F16C", is_x86_feature_detected!("f16c")),
    ];
    #[cfg(not(target_arch = "x86_64"))]
    let cpu: [(&'static str, bool); 0] = [];
    let gpu = cfg!(feature = "cuda");
    let mut out = vec![
        ("CUDA", gpu),
        ("CUDNN", gpu),
        ("NCCL", false),
        ("CUDA_RTC", gpu),
        ("TENSORRT", false),
        ("OPENMP", false),
        ("SSE", cfg!(target_arch = "x86_64")),
        ("JEMALLOC", false),
        ("BLAS_OPEN", false),
        ("BLAS_ATLAS", false),
        ("BLAS_MKL", false),
        ("BLAS_APPLE", false),
        ("LAPACK", false),
        ("MKLDNN", false),
        ("OPENCV", false),
        ("CAFFE", false),
        ("PROFILER", true),
        ("DIST_KVSTORE", cfg!(feature = "mpi")),
        ("CXX14", false),
        ("INT64_TENSOR_SIZE", true),
        ("SIGNAL_HANDLER", false),
        ("DEBUG", cfg!(debug_assertions)),
        ("TVM_OP", false),
    ];
    out.extend(cpu);
    out
}

#[pyfunction]
fn from_bytes(
    data: &[u8],
    shape: Vec<usize>,
    dtype_name: &str,
    dev_type: &str,
    dev_id: u32,
) -> PyResult<Array> {
    let (rt, ctx, dt) = (runtime()?, context(dev_type, dev_id)?, dtype(dtype_name)?);
    rt.from_bytes(data, &shape, dt, ctx).map(wrap).map_err(err)
}

/// An uninitialized array.
#[pyfunction]
fn empty(shape: Vec<usize>, dtype_name: &str, dev_type: &str, dev_id: u32) -> PyResult<Array> {
    runtime()?
        .empty(&shape, dtype(dtype_name)?, context(dev_type, dev_id)?)
        .map(wrap)
        .map_err(err)
}

/// Runs op `name` on `inputs` with `attrs` (strings, as MXNet passes them), on `(dev_type,
/// dev_id)` when it has no inputs, writing into `out` when given; returns the outputs.
#[pyfunction]
#[pyo3(signature = (name, inputs, attrs, out=None, dev_type="cpu", dev_id=0))]
fn invoke(
    py: Python<'_>,
    name: &str,
    inputs: Vec<Py<Array>>,
    attrs: Vec<(String, String)>,
    out: Option<Vec<Py<Array>>>,
    dev_type: &str,
    dev_id: u32,
) -> PyResult<Vec<Array>> {
    let ins = handles(&inputs);
    let outs = out.map(|o| handles(&o));
    let (rt, ctx) = match ins.first() {
        Some(a) => (a.runtime().clone(), a.ctx()),
        None => (runtime()?, context(dev_type, dev_id)?),
    };
    let attrs = attrs_of(attrs);
    let refs: Vec<&NDArray> = ins.iter().collect();
    let out_refs: Option<Vec<&NDArray>> = outs.as_ref().map(|o| o.iter().collect());
    // Recording is per thread, and `detach` keeps this thread: the op is recorded where the
    // Python caller records.
    let mut outs = py
        .detach(|| invoke_on(&rt, ctx, name, &refs, &attrs, out_refs.as_deref()))
        .map_err(err)?;
    // As in MXNet, a call returns the outputs users see (not Dropout's mask, nor BatchNorm's
    // saved statistics unless asked for); a one-output op needs no second look.
    if outs.len() > 1 {
        let def = ndarray_ops::ops::lookup(name).map_err(err)?;
        let (_, visible) = ndarray_ops::ops::num_outputs(def, &attrs).map_err(err)?;
        outs.truncate(visible);
    }
    Ok(outs.into_iter().map(wrap).collect())
}

/// Runs one-output op `name` on `lhs` and `rhs` (the operators' Python fallback).
#[pyfunction]
fn binary(py: Python<'_>, name: &str, lhs: &Array, rhs: &Array) -> PyResult<Array> {
    arith::binary(py, name, lhs, rhs).map(wrap)
}

/// Runs one-output scalar op `name` (`_plus_scalar`, ...) on `data` with `scalar`.
#[pyfunction]
fn scalar(py: Python<'_>, name: &str, data: &Array, scalar: f64) -> PyResult<Array> {
    arith::scalar(py, name, data, scalar).map(wrap)
}

/// Writes arrays to `path` in MXNet's NDArray file format (a temporary file renamed into
/// place): with names when `names` is given (a dict in Python), else as a list.
#[pyfunction]
#[pyo3(signature = (path, arrays, names=None))]
fn save(
    py: Python<'_>,
    path: &str,
    arrays: Vec<Py<Array>>,
    names: Option<Vec<String>>,
) -> PyResult<()> {
    let arrays = handles(&arrays);
    py.detach(|| match &names {
        Some(names) => {
            let pairs: Vec<(&str, &NDArray)> = names
                .iter()
                .map(String::as_str)
                .zip(arrays.iter())
                .collect();
            ndarray_ops::ndfile::save(path, &pairs)
        }
        None => ndarray_ops::ndfile::save_list(path, &arrays.iter().collect::<Vec<_>>()),
    })
    .map_err(err)
}

/// Reads an MXNet NDArray file onto `(dev_type, dev_id)`: `(arrays, names)`, names empty for a
/// file saved from a list.
#[pyfunction]
#[pyo3(signature = (path, dev_type="cpu", dev_id=0))]
fn load(
    py: Python<'_>,
    path: &str,
    dev_type: &str,
    dev_id: u32,
) -> PyResult<(Vec<Array>, Vec<String>)> {
    let (rt, ctx) = (runtime()?, context(dev_type, dev_id)?);
    let loaded = py
        .detach(|| ndarray_ops::ndfile::load(path, &rt, ctx))
        .map_err(err)?;
    Ok((loaded.arrays.into_iter().map(wrap).collect(), loaded.names))
}

/// Reads the bytes of an MXNet NDArray file onto `(dev_type, dev_id)`, as `load` does.
#[pyfunction]
fn load_bytes(
    py: Python<'_>,
    data: Vec<u8>,
    dev_type: &str,
    dev_id: u32,
) -> PyResult<(Vec<Array>, Vec<String>)> {
    let (rt, ctx) = (runtime()?, context(dev_type, dev_id)?);
    let loaded = py
        .detach(|| ndarray_ops::ndfile::read_arrays(&mut data.as_slice(), &rt, ctx))
        .map_err(err)?;
    Ok((loaded.arrays.into_iter().map(wrap).collect(), loaded.names))
}

/// Waits until every pushed op has run; raises the first failure since the last wait.
#[pyfunction]
fn waitall(py: Python<'_>) -> PyResult<()> {
    let rt = runtime()?;
    py.detach(move || rt.wait_all()).map_err(err)
}

/// Sets how many consecutive imperative ops the engine schedules as one unit (0 or 1: each
/// alone); returns the size set before.
#[pyfunction]
fn set_bulk_size(py: Python<'_>, size: usize) -> PyResult<usize> {
    let rt = runtime()?;
    py.detach(move || rt.engine().set_imperative_bulk_size(size))
        .map_err(|e| err(e.into()))
}

/// Seeds every device's random generator.
#[pyfunction]
fn seed(value: u64) -> PyResult<()> {
    runtime()?.seed(value).map_err(err)
}

/// Turns recording on or off for this thread; returns the previous setting.
#[pyfunction]
fn set_recording(on: bool) -> bool {
    autograd::set_recording(on)
}

/// Turns training mode on or off for this thread; returns the previous setting.
#[pyfunction]
fn set_training(on: bool) -> bool {
    autograd::set_training(on)
}

/// Whether this thread records.
#[pyfunction]
fn is_recording() -> bool {
    autograd::is_recording()
}

/// Whether this thread runs ops in training mode.
#[pyfunction]
fn is_training() -> bool {
    autograd::is_training()
}

/// Back-propagates from `heads` (with `head_grads`, ones where `None`) into the gradients of the
/// arrays marked with a gradient.
#[pyfunction]
#[pyo3(signature = (heads, head_grads=None))]
fn backward(
    py: Python<'_>,
    heads: Vec<Py<Array>>,
    head_grads: Option<Vec<Py<Array>>>,
) -> PyResult<()> {
    let heads = handles(&heads);
    let grads = head_grads.map(|g| handles(&g));
    let h: Vec<&NDArray> = heads.iter().collect();
    let g: Option<Vec<&NDArray>> = grads.as_ref().map(|g| g.iter().collect());
    py.detach(|| autograd::backward(&h, g.as_deref()))
        .map_err(err)
}

/// The gradients of `heads` with respect to `variables`, as new arrays (nothing is written
/// into the variables' gradient arrays).
#[pyfunction]
#[pyo3(signature = (heads, variables, head_grads=None))]
fn grad(
    py: Python<'_>,
    heads: Vec<Py<Array>>,
    variables: Vec<Py<Array>>,
    head_grads: Option<Vec<Py<Array>>>,
) -> PyResult<Vec<Array>> {
    let (heads, vars) = (handles(&heads), handles(&variables));
    let grads = head_grads.map(|g| handles(&g));
    let h: Vec<&NDArray> = heads.iter().collect();
    let v: Vec<&NDArray> = vars.iter().collect();
    let g: Option<Vec<&NDArray>> = grads.as_ref().map(|g| g.iter().collect());
    py.detach(|| autograd::grad(&h, &v, g.as_deref()))
        .map(|v| v.into_iter().map(wrap).collect())
        .map_err(err)
}

fn type_name(ty: AttrType) -> String {
    match ty {
        AttrType::Int | AttrType::Count => "int".into(),
        AttrType::Float => "float".into(),
        AttrType::Bool => "bool".into(),
        AttrType::Shape | AttrType::Indices => "shape".into(),
        AttrType::Str => "str".into(),
        AttrType::Choice(words) => format!("{{{}}}", words.join(", ")),
    }
}

/// Every op a user may call, as dicts: `name`, `aliases`, `inputs`, `variadic`, and `attrs`, a
/// list of `(name, type, or_none, default or None when required, description)`.
#[pyfunction]
fn signatures<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let names = ndarray_ops::ops::op_names();
    for name in &names {
        let def = ndarray_ops::ops::lookup(name).map_err(err)?;
        if def.name != *name {
            continue;
        }
        let Some(sig) = def.signature() else {
            continue;
        };
        let aliases: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| {
                *n != def.name && ndarray_ops::ops::lookup(n).is_ok_and(|d| std::ptr::eq(d, def))
            })
            .collect();
        let attrs: Vec<(&str, String, bool, Option<&str>, &str)> = sig
            .attrs
            .iter()
            .map(|a| {
                (
                    a.name,
                    type_name(a.ty),
                    a.or_none,
                    a.default,
                    ndarray_ops::ops::signature::doc(def.name, a.name),
                )
            })
            .collect();
        let d = PyDict::new(py);
        d.set_item("name", def.name)?;
        d.set_item("aliases", aliases)?;
        d.set_item("inputs", sig.inputs.to_vec())?;
        d.set_item("variadic", sig.variadic)?;
        d.set_item("attrs", attrs)?;
        out.append(d)?;
    }
    Ok(out)
}

/// The inputs a node of `op` with `attrs` takes, by name (a bias only without `no_bias`, ...).
#[pyfunction]
fn input_names(op: &str, attrs: Vec<(String, String)>) -> PyResult<Vec<&'static str>> {
    let def = ndarray_ops::ops::lookup(op).map_err(err)?;
    ndarray_ops::ops::signature::input_names(def.name, &attrs_of(attrs)).map_err(err)
}

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MXNetError", m.py().get_type::<MXNetError>())?;
    m.add_class::<Array>()?;
    m.add_function(wrap_pyfunction!(from_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(num_gpus, m)?)?;
    m.add_function(wrap_pyfunction!(empty_cache, m)?)?;
    m.add_function(wrap_pyfunction!(profiler_now, m)?)?;
    m.add_function(wrap_pyfunction!(profiler_mark, m)?)?;
    m.add_function(wrap_pyfunction!(profiler_stats, m)?)?;
    m.add_function(wrap_pyfunction!(load_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(features, m)?)?;
    m.add_function(wrap_pyfunction!(empty, m)?)?;
    m.add_function(wrap_pyfunction!(invoke, m)?)?;
    m.add_function(wrap_pyfunction!(binary, m)?)?;
    m.add_function(wrap_pyfunction!(scalar, m)?)?;
    m.add_function(wrap_pyfunction!(waitall, m)?)?;
    m.add_function(wrap_pyfunction!(save, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(seed, m)?)?;
    m.add_function(wrap_pyfunction!(set_bulk_size, m)?)?;
    m.add_function(wrap_pyfunction!(set_recording, m)?)?;
    m.add_function(wrap_pyfunction!(set_training, m)?)?;
    m.add_function(wrap_pyfunction!(is_recording, m)?)?;
    m.add_function(wrap_pyfunction!(is_training, m)?)?;
    m.add_function(wrap_pyfunction!(backward, m)?)?;
    m.add_function(wrap_pyfunction!(grad, m)?)?;
    m.add_function(wrap_pyfunction!(signatures, m)?)?;
    m.add_function(wrap_pyfunction!(input_names, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::to_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(dlpack::from_dlpack, m)?)?;
    m.add_function(wrap_pyfunction!(profiler_set_running, m)?)?;
    m.add_function(wrap_pyfunction!(profiler_summary, m)?)?;
    m.add_function(wrap_pyfunction!(profiler_dump, m)?)?;
    m.add_function(wrap_pyfunction!(profiler_reset, m)?)?;
    kvstore::register(m)?;
    m.add_class::<symbol::Sym>()?;
    m.add_class::<symbol::Exec>()?;
    m.add_function(wrap_pyfunction!(symbol::bind, m)?)?;
    Ok(())
}
