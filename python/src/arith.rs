//! `NDArray`'s arithmetic operators, run natively: `a + b` and `a * 2.0` go from the
//! interpreter's number slot straight to the op, without a Python frame, an attribute map or a
//! list. Operands this path does not take (numpy arrays and scalars, other types) go to the
//! Python layer's rule (`_scalar_or_array` in `mxrs/ndarray/ndarray.py`), which converts or
//! refuses them, so both paths give the same results and errors.

use ndarray_ops::{invoke_on, Attrs, NDArray};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyFloat, PyInt};

use crate::{err, wrap, Array};

/// One operator: the op on two arrays, the op on an array and a scalar, and whether the array
/// is the right operand (`2 - a`, `b.__rsub__(a)`).
#[derive(Clone, Copy)]
pub(crate) struct Operator {
    pub(crate) array_op: &'static str,
    pub(crate) scalar_op: &'static str,
    pub(crate) reflect: bool,
}

/// `a + b`, `a - b`, ... and their reflected forms, as MXNet's `NDArray` defines them.
pub(crate) const ADD: Operator = op("broadcast_add", "_plus_scalar", false);
pub(crate) const SUB: Operator = op("broadcast_sub", "_minus_scalar", false);
pub(crate) const RSUB: Operator = op("broadcast_sub", "_rminus_scalar", true);
pub(crate) const MUL: Operator = op("broadcast_mul", "_mul_scalar", false);
pub(crate) const DIV: Operator = op("broadcast_div", "_div_scalar", false);
pub(crate) const RDIV: Operator = op("broadcast_div", "_rdiv_scalar", true);

const fn op(array_op: &'static str, scalar_op: &'static str, reflect: bool) -> Operator {
    Operator {
        array_op,
        scalar_op,
        reflect,
    }
}

/// `lhs (op) other`, where `lhs` is the array whose operator Python called.
pub(crate) fn apply(
    lhs: &Bound<'_, Array>,
    other: &Bound<'_, PyAny>,
    o: Operator,
) -> PyResult<Py<PyAny>> {
    let py = lhs.py();
    let out = if let Ok(rhs) = other.cast::<Array>() {
        let (a, b) = match o.reflect {
            true => (rhs.get(), lhs.get()),
            false => (lhs.get(), rhs.get()),
        };
        binary(py, o.array_op, a, b)?
    } else if other.is_exact_instance_of::<PyFloat>() || other.is_exact_instance_of::<PyInt>() {
        scalar(py, o.scalar_op, lhs.get(), other.extract::<f64>()?)?
    } else {
        return fallback(py)?.call1(py, (lhs, other, o.array_op, o.scalar_op, o.reflect));
    };
    Ok(Py::new(py, wrap(out))?.into_any())
}

/// The Python layer's rule for the operands [`apply`] does not take.
fn fallback(py: Python<'_>) -> PyResult<&Py<PyAny>> {
    static RULE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    RULE.get_or_try_init(py, || {
        Ok(py
            .import("mxrs.ndarray.ndarray")?
            .getattr("_scalar_or_array")?
            .unbind())
    })
}

/// Runs `run` on the handles of `arrays`, each locked once: with the GIL held where the
/// operands have at most [`CHEAP_ELEMENTS`](ndarray_ops::ops::CHEAP_ELEMENTS) elements
/// together (the engine then runs the op at once on this thread, or hands it to a worker when
/// its inputs are still pending or its output is large, in less time than releasing the GIL and
/// taking it back costs; a push never waits for another op, so holding the GIL cannot block a
/// thread that needs it), else with the GIL released (the handles locked again there, so that
/// no lock is held while the GIL is taken back).
fn call<R: Send>(
    py: Python<'_>,
    (a, b): (&Array, Option<&Array>),
    run: impl Fn(&[&NDArray]) -> R + Send + Sync,
) -> R {
    let small = with_locked(a, b, |xs| {
        let elements: usize = xs.iter().map(|x| x.size()).sum();
        (elements <= ndarray_ops::ops::CHEAP_ELEMENTS).then(|| run(xs))
    });
    match small {
        Some(r) => r,
        None => py.detach(|| with_locked(a, b, &run)),
    }
}

/// `f` of the handles of `a` and `b`, each under its read lock.
fn with_locked<T>(a: &Array, b: Option<&Array>, f: impl FnOnce(&[&NDArray]) -> T) -> T {
    a.with(|x| match b {
        Some(b) => b.with(|y| f(&[x, y])),
        None => f(&[x]),
    })
}

/// One-output op `name` on two arrays (the handles are read in place, under their locks).
pub(crate) fn binary(py: Python<'_>, name: &str, a: &Array, b: &Array) -> PyResult<NDArray> {
    let mut outs = call(py, (a, Some(b)), |xs| {
        invoke_on(xs[0].runtime(), xs[0].ctx(), name, xs, &Attrs::new(), None)
    })
    .map_err(err)?;
    Ok(outs.swap_remove(0))
}

/// One-output scalar op `name` (`_plus_scalar`, ...) on `data` with `value`.
pub(crate) fn scalar(py: Python<'_>, name: &str, data: &Array, value: f64) -> PyResult<NDArray> {
    let attrs = Attrs::new().with("scalar", value);
    let mut outs = call(py, (data, None), |xs| {
        invoke_on(xs[0].runtime(), xs[0].ctx(), name, xs, &attrs, None)
    })
    .map_err(err)?;
    Ok(outs.swap_remove(0))
}
