//! `mx.kv`'s native half: the runtime's KVStore, with a Python callable as its updater.
//!
//! Calls release the GIL; the updater, which a push runs, takes it back to call Python. A
//! push waiting for the store's updater lock so never holds the GIL that the updater running
//! on another thread needs.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use ndarray_ops::kvstore::{KVStore, Key, Updater};
use ndarray_ops::{NDArray, NdError};
use pyo3::prelude::*;

use crate::{err, handles, runtime, wrap, Array};

/// A key from Python: an int or a str.
fn key_of(obj: &Bound<'_, PyAny>) -> PyResult<Key> {
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(Key::Int(i));
    }
    if let Ok(s) = obj.extract::<String>() {
        return Ok(Key::Str(s));
    }
    Err(crate::MXNetError::new_err(format!(
        "a KVStore key is an int or a str, not {}",
        obj.get_type().name()?
    )))
}

fn key_to_py(py: Python<'_>, key: &Key) -> PyResult<Py<PyAny>> {
    Ok(match key {
        Key::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
        Key::Str(s) => s.into_pyobject(py)?.into_any().unbind(),
    })
}

/// A Python callable `f(key, merged, stored)` as a store's updater.
struct PyUpdater(Py<PyAny>);

impl Updater for PyUpdater {
    fn update(&mut self, key: &Key, merged: &NDArray, stored: &NDArray) -> ndarray_ops::Result<()> {
        Python::attach(|py| {
            let call = || -> PyResult<()> {
                let k = key_to_py(py, key)?;
                let g = Py::new(py, wrap(merged.clone()))?;
                let w = Py::new(py, wrap(stored.clone()))?;
                self.0.call1(py, (k, g, w))?;
                Ok(())
            };
            call().map_err(|e| NdError::Invalid {
                op: "kvstore updater".into(),
                reason: format!("key {key}: {e}"),
            })
        })
    }
}

/// A key-value store (`mx.kv.create`).
#[pyclass(module = "mxrs._native", name = "KVStore", frozen)]
pub(crate) struct KV {
    /// Dropped by hand, with the GIL released (see `Drop`).
    kv: ManuallyDrop<Arc<KVStore>>,
}

impl Drop for KV {
    fn drop(&mut self) {
        // SAFETY: `kv` is taken once, here, and not used after.
        let kv = unsafe { ManuallyDrop::take(&mut self.kv) };
        // A `dist_async` store's drop meets the other ranks at a barrier, during which rank
        // 0's communication thread may run a Python updater for them: it needs the GIL.
        Python::attach(|py| py.detach(move || drop(kv)));
    }
}

#[pymethods]
impl KV {
    /// A store of `kind`: `local`, `device`, or across processes `dist_sync` /
    /// `dist_device_sync` / `dist_async` (a package built with the `mpi` feature, launched
    /// with mpiexec).
    #[new]
    fn new(kind: &str) -> PyResult<KV> {
        let kv = KVStore::create(&runtime()?, kind).map_err(err)?;
        Ok(KV {
            kv: ManuallyDrop::new(Arc::new(kv)),
        })
    }

    /// The kind's name.
    #[getter]
    fn kind(&self) -> &'static str {
        self.kv.kind()
    }

    /// This process's rank.
    #[getter]
    fn rank(&self) -> usize {
        self.kv.rank()
    }

    /// How many processes share the store.
    #[getter]
    fn num_workers(&self) -> usize {
        self.kv.num_workers()
    }

    /// Stores a copy of `value` under `key`.
    fn init(&self, py: Python<'_>, key: &Bound<'_, PyAny>, value: Py<Array>) -> PyResult<()> {
        let (key, kv, v) = (key_of(key)?, Arc::clone(&self.kv), value.get().handle());
        py.detach(move || kv.init(key, &v)).map_err(err)
    }

    /// Sums `values` and updates `key`'s value from the sum.
    fn push(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        values: Vec<Py<Array>>,
        priority: i32,
    ) -> PyResult<()> {
        let (key, kv, vs) = (key_of(key)?, Arc::clone(&self.kv), handles(&values));
        py.detach(move || {
            let refs: Vec<&NDArray> = vs.iter().collect();
            kv.push(key, &refs, priority)
        })
        .map_err(err)
    }

    /// Copies `key`'s value into every array of `outs`.
    fn pull(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        outs: Vec<Py<Array>>,
        priority: i32,
    ) -> PyResult<()> {
        let (key, kv, os) = (key_of(key)?, Arc::clone(&self.kv), handles(&outs));
        py.detach(move || {
            let refs: Vec<&NDArray> = os.iter().collect();
            kv.pull(key, &refs, priority)
        })
        .map_err(err)
    }

    /// A push of `values`, then a pull into `outs`; across processes the values are summed
    /// where they lie.
    fn pushpull(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        values: Vec<Py<Array>>,
        outs: Vec<Py<Array>>,
        priority: i32,
    ) -> PyResult<()> {
        let key = key_of(key)?;
        let (kv, vs, os) = (Arc::clone(&self.kv), handles(&values), handles(&outs));
        py.detach(move || {
            let values: Vec<&NDArray> = vs.iter().collect();
            let outs: Vec<&NDArray> = os.iter().collect();
            kv.pushpull(key, &values, &outs, priority)
        })
        .map_err(err)
    }

    /// Installs `f(key, merged, stored)` as the updater (`None`: pushes replace the value).
    fn set_updater(&self, py: Python<'_>, f: Option<Py<PyAny>>) -> PyResult<()> {
        let kv = Arc::clone(&self.kv);
        match f {
            Some(f) => py.detach(move || kv.set_updater(PyUpdater(f))),
            None => py.detach(move || kv.clear_updater()),
        }
        .map_err(err)
    }

    /// Waits for every process.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        let kv = Arc::clone(&self.kv);
        py.detach(move || kv.barrier()).map_err(err)
    }

    /// A `dist_async` store's staleness so far as `(updates, total, max)`; `None` for the
    /// other kinds.
    #[getter]
    fn staleness(&self) -> Option<(u64, u64, u64)> {
        self.kv.staleness().map(|s| (s.updates, s.total, s.max))
    }
}

/// Registers the class, and `KV_ACROSS_PROCESSES`: whether this build has stores across
/// processes (the `mpi` feature).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("KV_ACROSS_PROCESSES", cfg!(feature = "mpi"))?;
    m.add_class::<KV>()
}
