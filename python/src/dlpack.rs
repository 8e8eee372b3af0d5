//! DLPack: arrays handed to other libraries (numpy, PyTorch, JAX) without a copy, and arrays
//! taken from them.
//!
//! Export: the array's pending writes are waited for, then a `DLManagedTensor` pointing at its
//! memory goes out in a capsule named `dltensor`. The tensor keeps a clone of the array, so the
//! memory lives until the consumer calls the tensor's deleter (or the capsule dies unconsumed,
//! when its destructor calls it). As with MXNet's `to_dlpack_for_read`, the consumer sees later
//! writes of the array: the view shares its memory.
//!
//! Import, without a copy: the capsule is marked used (`used_dltensor`) and its tensor (CPU
//! memory, one of our dtypes, row-major) becomes the memory of a new array, which calls the
//! producer's deleter once the array, its views and every op pushed on them are done. As with
//! MXNet's `from_dlpack`, the array and the producer's tensor share that memory: a write on one
//! side is seen on the other, and the caller orders them (`wait_to_read` before writing the
//! source). A capsule this module exported gives back a handle of the array it came from (same
//! memory, and ops on both stay ordered). Memory not aligned for its dtype is copied.

use std::ffi::{c_void, CStr};

use ndarray_ops::{DType, NDArray};
use pyo3::ffi;
use pyo3::prelude::*;

use crate::{err, runtime, wrap, Array, MXNetError};

const NAME: &CStr = c"dltensor";
const USED: &CStr = c"used_dltensor";

/// DLPack's device types used here.
const CPU: i32 = 1;
const CUDA: i32 = 2;
const CUDA_HOST: i32 = 3;

#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

/// What an exported tensor owns: the array (keeping its memory alive) and the shape the tensor
/// points at.
struct Keep {
    array: NDArray,
    shape: Vec<i64>,
}

fn dl_dtype(d: DType) -> DlDataType {
    let (code, bits) = match d {
        DType::F32 => (2, 32),
        DType::F64 => (2, 64),
        DType::I32 => (0, 32),
        DType::I64 => (0, 64),
        DType::U8 => (1, 8),
    };
    DlDataType {
        code,
        bits,
        lanes: 1,
    }
}

fn our_dtype(t: &DlDataType) -> Option<DType> {
    match (t.code, t.bits, t.lanes) {
        (2, 32, 1) => Some(DType::F32),
        (2, 64, 1) => Some(DType::F64),
        (0, 32, 1) => Some(DType::I32),
        (0, 64, 1) => Some(DType::I64),
        (1, 8, 1) => Some(DType::U8),
        _ => None,
    }
}

/// The deleter of tensors we export: frees the tensor and releases the array.
unsafe extern "C" fn delete_exported(t: *mut DlManagedTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: `t` and its `manager_ctx` were made by `Box::into_raw` in `export`, and DLPack
    // calls the deleter once.
    unsafe {
        let t = Box::from_raw(t);
        drop(Box::from_raw(t.manager_ctx.cast::<Keep>()));
    }
}

/// The destructor of capsules we export: a capsule still named `dltensor` was never consumed,
/// so its tensor is deleted here; a consumed one (`used_dltensor`) is the consumer's to delete.
unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: CPython calls this with the capsule being destroyed; the name check tells whether
    // it still owns its tensor, which is then the pointer `export` stored.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, NAME.as_ptr()) == 1 {
            let t = ffi::PyCapsule_GetPointer(capsule, NAME.as_ptr()).cast::<DlManagedTensor>();
            if let Some(delete) = (*t).deleter {
                delete(t);
            }
        } else {
            // A destructor must not leave an exception set.
            ffi::PyErr_Clear();
        }
    }
}

/// Hands `array` out as a DLPack capsule, after its pending writes (and, for `for_write`, its
/// pending reads).
#[pyfunction]
#[pyo3(signature = (array, for_write=false))]
pub(crate) fn to_dlpack(py: Python<'_>, array: &Array, for_write: bool) -> PyResult<Py<PyAny>> {
    let a = array.handle();
    py.detach(|| match for_write {
        true => a.wait_to_write(),
        false => a.wait_to_read(),
    })
    .map_err(err)?;
    let ctx = a.ctx();
    let device_type = match ctx.dev_type.name() {
        "gpu" => CUDA,
        "cpu_pinned" => CUDA_HOST,
        _ => CPU,
    };
    let mut keep = Box::new(Keep {
        shape: a.shape().iter().map(|&d| d as i64).collect(),
        array: a.clone(),
    });
    let tensor = Box::new(DlManagedTensor {
        dl_tensor: DlTensor {
            data: a.data_ptr().cast(),
            device: DlDevice {
                device_type,
                device_id: ctx.dev_id as i32,
            },
            ndim: a.ndim() as i32,
            dtype: dl_dtype(a.dtype()),
            shape: keep.shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        },
        manager_ctx: Box::into_raw(keep).cast(),
        deleter: Some(delete_exported),
    });
    let raw = Box::into_raw(tensor);
    // SAFETY: `raw` is a valid tensor that the capsule owns from here on; the name is static.
    let capsule =
        unsafe { ffi::PyCapsule_New(raw.cast(), NAME.as_ptr(), Some(capsule_destructor)) };
    if capsule.is_null() {
        // SAFETY: the capsule was not made, so the tensor is still ours to delete.
        unsafe { delete_exported(raw) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `PyCapsule_New` returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) }.unbind())
}

/// A producer's tensor that an array's memory lives in; dropping it calls the producer's deleter.
struct Borrowed(*mut DlManagedTensor);

// SAFETY: DLPack lets a consumer call the deleter from any thread (producers that need the GIL,
// such as numpy, take it in the deleter), and nothing else reads the pointer.
unsafe impl Send for Borrowed {}
// SAFETY: a shared `Borrowed` gives no access to the pointer; only its drop uses it.
unsafe impl Sync for Borrowed {}

impl Drop for Borrowed {
    fn drop(&mut self) {
        // SAFETY: the tensor was consumed by `from_dlpack`, which made this its only owner, so
        // the deleter runs once.
        unsafe {
            if let Some(delete) = (*self.0).deleter {
                delete(self.0);
            }
        }
    }
}

/// Takes the tensor of a DLPack capsule (CPU memory) as a new array's memory, without a copy,
/// and consumes the capsule.
#[pyfunction]
pub(crate) fn from_dlpack(capsule: &Bound<'_, PyAny>) -> PyResult<Array> {
    let ptr = capsule.as_ptr();
    // SAFETY: `ptr` is a live object; `PyCapsule_IsValid` accepts any object.
    if unsafe { ffi::PyCapsule_IsValid(ptr, NAME.as_ptr()) } != 1 {
        // SAFETY: clears the error `PyCapsule_IsValid` may have set.
        unsafe { ffi::PyErr_Clear() };
        return Err(MXNetError::new_err(
            "from_dlpack: not a DLPack capsule named 'dltensor' (already used, or another kind)",
        ));
    }
    // SAFETY: the capsule is valid under that name, so its pointer is a `DLManagedTensor`.
    let t = unsafe { &*ffi::PyCapsule_GetPointer(ptr, NAME.as_ptr()).cast::<DlManagedTensor>() };
    let dl = &t.dl_tensor;
    let fail = |what: String| Err(MXNetError::new_err(format!("from_dlpack: {what}")));
    if dl.device.device_type != CPU && dl.device.device_type != CUDA_HOST {
        return fail(format!(
            "the tensor is on DLPack device type {}; only host memory is taken",
            dl.device.device_type
        ));
    }
    let Some(dtype) = our_dtype(&dl.dtype) else {
        return fail(format!(
            "DLPack dtype (code {}, {} bits, {} lanes) is not one of float32, float64, int32, \
             int64, uint8",
            dl.dtype.code, dl.dtype.bits, dl.dtype.lanes
        ));
    };
    let ndim = usize::try_from(dl.ndim).unwrap_or(0);
    let shape_i64: &[i64] = match ndim {
        0 => &[],
        // SAFETY: DLPack's `shape` holds `ndim` entries (null only when `ndim` is 0).
        _ => unsafe { std::slice::from_raw_parts(dl.shape, ndim) },
    };
    let Ok(shape) = shape_i64
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
    else {
        return fail(format!("negative dimension in shape {shape_i64:?}"));
    };
    if !dl.strides.is_null() && ndim > 0 {
        // SAFETY: non-null `strides` holds `ndim` entries.
        let strides = unsafe { std::slice::from_raw_parts(dl.strides, ndim) };
        let mut want = 1i64;
        for k in (0..ndim).rev() {
            if shape[k] > 1 && strides[k] != want {
                return fail(format!(
                    "strides {strides:?} of shape {shape:?} are not row-major; make it contiguous first"
                ));
            }
            want *= shape_i64[k];
        }
    }
    let n: usize = shape.iter().product();
    let raw = (t as *const DlManagedTensor).cast_mut();
    let rt = runtime()?;
    // A function's address may differ between codegen units; a miss only takes the general
    // path below (shared memory, unordered against the source array).
    let ours = t.deleter.is_some_and(|d| {
        std::ptr::fn_addr_eq(
            d,
            delete_exported as unsafe extern "C" fn(*mut DlManagedTensor),
        )
    });
    if ours {
        // SAFETY: our own tensor: its `manager_ctx` is the `Keep` that `to_dlpack` made.
        let keep = unsafe { &*t.manager_ctx.cast::<Keep>() };
        let array = keep.array.clone();
        // SAFETY: the capsule is valid; renaming it marks it consumed, and the tensor, now
        // ours, is deleted once, here (the array handle was cloned out of it).
        unsafe {
            ffi::PyCapsule_SetName(ptr, USED.as_ptr());
            delete_exported(raw);
        }
        return Ok(wrap(array));
    }
    // SAFETY: DLPack's `data + byte_offset` is the first element.
    let data = unsafe { dl.data.cast::<u8>().add(dl.byte_offset as usize) };
    let array = match n > 0 && (data as usize).is_multiple_of(dtype.size()) {
        true => {
            // SAFETY: the capsule is valid; renaming it marks it consumed, so the producer's
            // tensor is ours until `Borrowed` calls its deleter.
            unsafe { ffi::PyCapsule_SetName(ptr, USED.as_ptr()) };
            let keeper = Box::new(Borrowed(raw));
            // SAFETY: the producer guarantees `data` holds the tensor's `n` row-major elements
            // of this dtype (strides checked above) until its deleter runs, which `keeper` does
            // when the array's memory is released.
            unsafe { NDArray::from_foreign(&rt, data, &shape, dtype, keeper) }.map_err(err)?
        }
        false => {
            let bytes: &[u8] = match n {
                0 => &[],
                // SAFETY: as above; the elements are copied before the deleter runs.
                _ => unsafe { std::slice::from_raw_parts(data, n * dtype.size()) },
            };
            let array = rt
                .from_bytes(bytes, &shape, dtype, storage::Context::cpu(0))
                .map_err(err)?;
            // SAFETY: the capsule is valid; renaming it marks it consumed, and the producer's
            // deleter is called once, here, after the copy.
            unsafe {
                ffi::PyCapsule_SetName(ptr, USED.as_ptr());
                if let Some(delete) = t.deleter {
                    delete(raw);
                }
            }
            array
        }
    };
    Ok(wrap(array))
}
