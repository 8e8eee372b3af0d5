"""``mx.test_utils``: the helpers MXNet's own tests use, so that tests written for MXNet run
here: comparisons, random arrays and shapes, the default context, and numerical and symbolic
checks of an op's forward and backward passes."""

from __future__ import annotations

import functools
import json
import logging  # noqa: F401 - the imports are exported too (see below)
import math
import numbers
import os
import sys
import time  # noqa: F401
from collections import OrderedDict  # noqa: F401
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.random as rnd  # noqa: F401
import numpy.testing as npt  # noqa: F401

import mxrs as mx  # noqa: F401

from . import ndarray as nd
from .context import Context, current_context
from .io import DataIter
from .ndarray import array  # noqa: F401
from .ndarray.ndarray import NDArray
from .runtime import Features  # noqa: F401
from .symbol.symbol import Symbol
from .util import getenv, setenv, use_np  # noqa: F401

# No ``__all__``: MXNet's tests take this module's names by ``from mxnet.test_utils import *``,
# and rely on getting its imports too (``mx``, ``np``, ``rnd``, ``npt``, ``os``, ...).

_DEFAULT: list[Context] = []


def default_context() -> Context:
    """The context tests run on (``set_default_context``), else the current one."""
    return _DEFAULT[-1] if _DEFAULT else current_context()


def set_default_context(ctx: Context) -> None:
    """Sets the context tests run on."""
    _DEFAULT[:] = [ctx]


def _np(a: Any) -> np.ndarray:
    return a.asnumpy() if isinstance(a, NDArray) else np.asarray(a)


def same(a: Any, b: Any) -> bool:
    """Whether the two hold exactly the same values."""
    return bool(np.array_equal(_np(a), _np(b)))


def default_dtype() -> type:
    """The dtype tests make their data in."""
    return np.float32


def default_rtols() -> dict[np.dtype, float]:
    """The relative tolerance of a comparison, by the dtype of its data."""
    loose = {np.float16: 1e-2, np.float32: 1e-4, np.float64: 1e-5}
    exact = (np.bool_, np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64)
    return {**{np.dtype(t): v for t, v in loose.items()}, **{np.dtype(t): 0 for t in exact}}


def default_atols() -> dict[np.dtype, float]:
    """The absolute tolerance of a comparison, by the dtype of its data."""
    loose = {np.float16: 1e-1, np.float32: 1e-3, np.float64: 1e-20}
    exact = (np.bool_, np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64)
    return {**{np.dtype(t): v for t, v in loose.items()}, **{np.dtype(t): 0 for t in exact}}


def default_numeric_eps() -> dict[np.dtype, float]:
    """The step of finite differences, by dtype (powers of two: the step is exact)."""
    return {
        np.dtype(np.float16): 2.0**-6,
        np.dtype(np.float32): 2.0**-9,
        np.dtype(np.float64): 2.0**-14,
    }


def effective_dtype(dat: Any) -> np.dtype:
    """The dtype whose tolerance a comparison of ``dat`` uses (its own: the kernels here keep
    float32's precision)."""
    return np.dtype(dat.dtype)


def get_tolerance(dat: Any, tol: float | None, default_tol: dict) -> float:
    """``tol``, else the default for ``dat``'s dtype (0 for a number)."""
    if tol is not None:
        return tol
    if isinstance(dat, numbers.Number):
        return 0
    return default_tol.get(effective_dtype(dat), 0)


def get_tols(x: Any, y: Any, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """The tolerances of comparing ``x`` and ``y``: the given ones, else the looser of the two
    dtypes' defaults."""
    rtol = max(get_tolerance(x, rtol, default_rtols()), get_tolerance(y, rtol, default_rtols()))
    atol = max(get_tolerance(x, atol, default_atols()), get_tolerance(y, atol, default_atols()))
    return rtol, atol


def get_rtol(rtol: float | None = None, dtype: Any = np.float32) -> float:
    """``rtol``, else ``dtype``'s default."""
    return default_rtols().get(np.dtype(dtype), 0) if rtol is None else rtol


def get_atol(atol: float | None = None, dtype: Any = np.float32) -> float:
    """``atol``, else ``dtype``'s default."""
    return default_atols().get(np.dtype(dtype), 0) if atol is None else atol


def get_etol(etol: float | None = None) -> float:
    """The share of elements a comparison may miss (0 unless given)."""
    return 0 if etol is None else etol


def almost_equal(
    a: Any,
    b: Any,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    use_broadcast: bool = True,
) -> bool:
    """Whether ``|a - b| <= atol + rtol * |b|`` everywhere (tolerances by dtype by default)."""
    rtol, atol = get_tols(a, b, rtol, atol)
    x, y = _np(a), _np(b)
    if not use_broadcast and x.shape != y.shape:
        return False
    return bool(np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan))


def assert_almost_equal(
    a: Any,
    b: Any,
    rtol: float | None = None,
    atol: float | None = None,
    names: tuple[str, str] = ("a", "b"),
    equal_nan: bool = False,
    use_broadcast: bool = True,
    mismatches: tuple[int, int] = (10, 10),
) -> None:
    """Raises ``AssertionError`` naming the worst element unless ``almost_equal``."""
    rtol, atol = get_tols(a, b, rtol, atol)
    x, y = _np(a), _np(b)
    if not use_broadcast and x.shape != y.shape:
        raise AssertionError(f"{names[0]} has shape {x.shape}, {names[1]} {y.shape}")
    np.testing.assert_allclose(
        x, y, rtol=rtol, atol=atol, equal_nan=equal_nan, err_msg=f"{names[0]} and {names[1]} differ"
    )


def assert_almost_equal_ignore_nan(
    a: Any, b: Any, rtol: float | None = None, atol: float | None = None, names: Any = ("a", "b")
) -> None:
    """``assert_almost_equal`` over the elements where neither is NaN."""
    x, y = np.copy(_np(a)), np.copy(_np(b))
    nan = np.logical_or(np.isnan(x), np.isnan(y))
    x[nan], y[nan] = 0, 0
    assert_almost_equal(x, y, rtol, atol, names)


def assert_almost_equal_with_err(
    a: Any,
    b: Any,
    rtol: float | None = None,
    atol: float | None = None,
    etol: float | None = None,
    names: tuple[str, str] = ("a", "b"),
    equal_nan: bool = False,
    mismatches: tuple[int, int] = (10, 10),
) -> None:
    """Raises unless at most a share ``etol`` of the elements are outside the tolerances."""
    rtol, atol = get_tols(a, b, rtol, atol)
    x, y = _np(a), _np(b)
    close = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan)
    share = 1.0 - float(np.mean(close)) if close.size else 0.0
    if share > get_etol(etol):
        raise AssertionError(
            f"{names[0]} and {names[1]} differ in {share:.2%} of the elements (allowed {etol})"
        )


def same_array(array1: NDArray, array2: NDArray) -> bool:
    """Whether the two arrays share memory: a change through one shows through the other."""
    array1[:] += 1
    shared = same(array1.asnumpy(), array2.asnumpy())
    array1[:] -= 1
    return shared and same(array1.asnumpy(), array2.asnumpy())


def np_reduce(dat: np.ndarray, axis: Any, keepdims: bool, numpy_reduce_func: Callable) -> Any:
    """``numpy_reduce_func`` over ``axis`` (an int, a list or None: all), one axis at a time,
    keeping the reduced axes as length 1 when ``keepdims``."""
    axes = [axis] if isinstance(axis, int) else (range(dat.ndim) if axis is None else list(axis))
    axes = sorted(a % dat.ndim if dat.ndim else a for a in axes)
    out = dat
    for a in reversed(axes):
        out = numpy_reduce_func(out, axis=a)
    if keepdims:
        shape = list(dat.shape)
        for a in axes:
            shape[a] = 1
        out = np.reshape(out, shape)
    return out


def random_arrays(*shapes: Sequence[int]) -> Any:
    """Normal random numpy arrays of the default dtype, one per shape (an empty shape gives a
    0-d array); one array alone is returned as it is."""
    arrays = [np.array(np.random.randn(*s), dtype=default_dtype()) for s in shapes]
    return arrays[0] if len(arrays) == 1 else arrays


def random_uniform_arrays(*shapes: Sequence[int], **kwargs: Any) -> list[np.ndarray]:
    """Uniform random numpy arrays in [low, high), one per shape."""
    low, high = kwargs.pop("low", 0.0), kwargs.pop("high", 1.0)
    dtype = kwargs.pop("dtype", default_dtype())
    if kwargs:
        raise TypeError(f"unexpected arguments: {sorted(kwargs)}")
    return [np.random.uniform(low, high, size=s).astype(dtype) for s in shapes]


def random_sample(population: Sequence[Any], k: int) -> list:
    """``k`` distinct elements of ``population`` in random order (numpy's generator)."""
    if not 0 <= k <= len(population):
        raise ValueError(f"random_sample: k={k} for a population of {len(population)}")
    picked = np.random.permutation(len(population))[:k]
    return [population[i] for i in picked]


def assign_each(the_input: np.ndarray, function: Callable | None) -> np.ndarray:
    """``function`` applied to every element (a copy when ``function`` is None)."""
    if function is None:
        return np.array(the_input)
    return np.vectorize(function)(the_input).astype(np.asarray(the_input).dtype)


def assign_each2(input1: np.ndarray, input2: np.ndarray, function: Callable | None) -> np.ndarray:
    """``function`` applied to every pair of elements of two arrays of one shape."""
    if function is None:
        return np.array(input1)
    return np.vectorize(function)(input1, input2).astype(np.asarray(input1).dtype)


def collapse_sum_like(a: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``a`` summed over the axes that broadcasting ``shape`` to ``a.shape`` added or widened."""
    shape = tuple(shape)
    if int(np.prod(shape)) == 0 or a.size == 0:
        return np.zeros(shape, dtype=a.dtype)
    lead = a.ndim - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape) if d != a.shape[lead + i]]
    return np.sum(a, axis=tuple(axes)).reshape(shape)


@contextmanager
def discard_stderr() -> Iterator[None]:
    """Sends what is written to the process's standard error (native code's too) nowhere
    while the block runs."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


@contextmanager
def environment(*args: Any) -> Iterator[None]:
    """Sets environment variables for the block (``environment(name, value)`` or
    ``environment({name: value, ...})``; a value of None unsets one) and restores them after,
    once every pushed op has run. The runtime reads its settings when it starts: a variable
    it reads at start takes effect only in a process that starts inside the block."""
    if len(args) == 1 and isinstance(args[0], dict):
        wanted = dict(args[0])
    elif len(args) == 2:
        wanted = {args[0]: args[1]}
    else:
        raise TypeError("environment takes a dict, or a name and a value")
    saved = {k: os.environ.get(k) for k in wanted}

    def apply(values: dict[str, Any]) -> None:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = str(v)

    apply(wanted)
    try:
        yield
    finally:
        nd.waitall()
        apply(saved)


def retry(n: int) -> Callable:
    """A decorator: runs the test up to ``n`` times, failing only when every run fails."""
    if n <= 0:
        raise ValueError("retry needs n > 0")

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def run(*args: Any, **kwargs: Any) -> Any:
            for attempt in range(n):
                try:
                    return f(*args, **kwargs)
                except AssertionError:
                    if attempt == n - 1:
                        raise
            return None

        return run

    return decorate


def list_gpus() -> list[int]:
    """The ids of the GPUs the runtime sees."""
    from .context import num_gpus

    return list(range(num_gpus()))


def assert_exception(
    f: Callable[..., Any], exception_type: type, *args: Any, **kwargs: Any
) -> None:
    """Raises ``AssertionError`` unless ``f(*args, **kwargs)`` raises ``exception_type``."""
    try:
        f(*args, **kwargs)
    except exception_type:
        return
    raise AssertionError(f"{getattr(f, '__name__', f)} did not raise {exception_type.__name__}")


def rand_shape_2d(dim0: int = 10, dim1: int = 10) -> tuple[int, int]:
    """A random 2-d shape, each side from 1 to its bound."""
    return (np.random.randint(1, dim0 + 1), np.random.randint(1, dim1 + 1))


def rand_shape_3d(dim0: int = 10, dim1: int = 10, dim2: int = 10) -> tuple[int, int, int]:
    """A random 3-d shape."""
    return (
        np.random.randint(1, dim0 + 1),
        np.random.randint(1, dim1 + 1),
        np.random.randint(1, dim2 + 1),
    )


def rand_shape_nd(num_dim: int, dim: int = 10) -> tuple[int, ...]:
    """A random shape of ``num_dim`` axes, each from 1 to ``dim``."""
    return tuple(np.random.randint(1, dim + 1, size=num_dim).tolist())


def rand_ndarray(
    shape: Sequence[int],
    stype: str = "default",
    density: Any = None,
    dtype: Any = None,
    ctx: Context | None = None,
) -> NDArray:
    """A dense array of uniform values in [0, 1)."""
    if stype != "default":
        raise ValueError("rand_ndarray: only dense (default) storage exists here")
    values = np.random.uniform(0, 1, tuple(shape))
    return nd.array(values, ctx=ctx or default_context(), dtype=dtype or "float32")


def _dtype_of(v: Any, dtype: Any) -> Any:
    # MXNet's ``dtype="asnumpy"``: each value keeps its own dtype.
    return _np(v).dtype if isinstance(dtype, str) and dtype == "asnumpy" else dtype


def _location(sym: Symbol, location: Any, dtype: Any) -> dict[str, np.ndarray]:
    names = sym.list_arguments()
    if isinstance(location, dict):
        if set(location) != set(names):
            raise ValueError(
                f"the location's names {sorted(location)} are not the symbol's arguments "
                f"{sorted(names)}"
            )
        items = list(location.items())
    else:
        items = list(zip(names, location))
    return {k: _np(v).astype(_dtype_of(v, dtype)) for k, v in items}


def _aux(sym: Symbol, aux_states: Any, dtype: Any) -> dict[str, np.ndarray]:
    if aux_states is None:
        return {}
    if not isinstance(aux_states, dict):
        aux_states = dict(zip(sym.list_auxiliary_states(), aux_states))
    return {k: _np(v).astype(_dtype_of(v, dtype)) for k, v in aux_states.items()}


def _bind(
    sym: Symbol, loc: dict[str, np.ndarray], aux: dict[str, np.ndarray], ctx: Context, grad_req: Any
) -> Any:
    args = {k: nd.array(v, ctx=ctx, dtype=v.dtype) for k, v in loc.items()}
    grads = {k: nd.zeros(v.shape, ctx, v.dtype) for k, v in loc.items()}
    auxs = {k: nd.array(v, ctx=ctx, dtype=v.dtype) for k, v in aux.items()}
    return sym.bind(ctx, args, args_grad=grads, grad_req=grad_req, aux_states=auxs)


def check_symbolic_forward(
    sym: Symbol,
    location: Any,
    expected: Sequence[Any] | dict[str, Any],
    rtol: float | None = None,
    atol: float | None = None,
    aux_states: Any = None,
    ctx: Context | None = None,
    equal_nan: bool = False,
    dtype: Any = np.float32,
) -> list[np.ndarray]:
    """Runs ``sym`` forward at ``location`` (a list in argument order or a dict by name) and
    compares its outputs with ``expected`` (a list, or a dict by output name); ``dtype``: the
    inputs' dtype, or ``"asnumpy"`` to keep each one's own. Tolerances by dtype unless given."""
    ctx = ctx or default_context()
    ex = _bind(sym, _location(sym, location, dtype), _aux(sym, aux_states, dtype), ctx, "null")
    outs = [o.asnumpy() for o in ex.forward(is_train=False)]
    if isinstance(expected, dict):
        expected = [expected[k] for k in sym.list_outputs()]
    for i, (got, want) in enumerate(zip(outs, expected)):
        assert_almost_equal(got, _np(want), rtol, atol, (f"output {i}", "expected"), equal_nan)
    return outs


def check_symbolic_backward(
    sym: Symbol,
    location: Any,
    out_grads: Any,
    expected: Any,
    rtol: float | None = None,
    atol: float | None = None,
    aux_states: Any = None,
    grad_req: Any = "write",
    ctx: Context | None = None,
    grad_stypes: Any = None,
    equal_nan: bool = False,
    dtype: Any = np.float32,
) -> dict[str, np.ndarray]:
    """Runs ``sym`` forward and backward with ``out_grads`` (a list, or a dict by output name)
    and compares the arguments' gradients with ``expected`` (a dict by name or a list in
    argument order; None for one not to check)."""
    ctx = ctx or default_context()
    if grad_stypes and any(t != "default" for t in grad_stypes.values()):
        raise ValueError("check_symbolic_backward: only dense (default) gradients exist here")
    loc = _location(sym, location, dtype)
    ex = _bind(sym, loc, _aux(sym, aux_states, dtype), ctx, grad_req)
    if isinstance(out_grads, dict):
        out_grads = [out_grads[k] for k in sym.list_outputs()]
    ex.forward(is_train=True)
    heads = [nd.array(_np(g), ctx=ctx, dtype=_dtype_of(g, dtype)) for g in out_grads]
    ex.backward(heads)
    if not isinstance(expected, dict):
        expected = dict(zip(sym.list_arguments(), expected))
    got = {k: ex.grad_dict[k].asnumpy() for k in expected if k in ex.grad_dict}
    for k, want in expected.items():
        if want is None or k not in got:
            continue
        assert_almost_equal(
            got[k], _np(want), rtol, atol, (f"gradient of {k}", "expected"), equal_nan
        )
    return got


def check_numeric_gradient(
    sym: Symbol,
    location: Any,
    aux_states: Any = None,
    numeric_eps: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    grad_nodes: Any = None,
    use_forward_train: bool = True,
    ctx: Context | None = None,
    grad_stype_dict: Any = None,
    dtype: Any = np.float32,
) -> None:
    """Compares the symbolic gradient of ``sum(outputs * random projection)`` with central
    differences, for every argument in ``grad_nodes`` (default: all; a dict gives each its
    gradient request). ``numeric_eps`` defaults by dtype (``default_numeric_eps``), the
    tolerances too; float64 is the dtype for a tight check."""
    ctx = ctx or default_context()
    loc = _location(sym, location, dtype)
    aux = _aux(sym, aux_states, dtype)
    eps = numeric_eps if numeric_eps is not None else default_numeric_eps()[np.dtype(dtype)]
    if isinstance(grad_nodes, dict):
        nodes = list(grad_nodes)
    else:
        nodes = list(grad_nodes or loc.keys())
    ex = _bind(sym, loc, aux, ctx, {k: ("write" if k in nodes else "null") for k in loc})
    outs = ex.forward(is_train=use_forward_train)
    rng = np.random.RandomState(11)
    proj = [rng.uniform(-1, 1, o.shape).astype(o.dtype) for o in outs]
    ex.backward([nd.array(p, ctx=ctx, dtype=p.dtype) for p in proj])
    symbolic = {k: ex.grad_dict[k].asnumpy() for k in nodes}

    def value(at: dict[str, np.ndarray]) -> float:
        e = _bind(sym, at, aux, ctx, "null")
        values = e.forward(is_train=use_forward_train)
        return float(sum((o.asnumpy().astype(np.float64) * p).sum() for o, p in zip(values, proj)))

    for k in nodes:
        numeric = np.zeros(loc[k].shape, dtype=np.float64)
        flat = numeric.reshape(-1)
        for i in range(flat.size):
            plus = {n: v.copy() for n, v in loc.items()}
            minus = {n: v.copy() for n, v in loc.items()}
            plus[k].reshape(-1)[i] += eps / 2
            minus[k].reshape(-1)[i] -= eps / 2
            flat[i] = (value(plus) - value(minus)) / eps
        assert_almost_equal(
            symbolic[k].astype(np.float64),
            numeric,
            rtol if rtol is not None else get_rtol(None, dtype),
            atol
            if atol is not None
            else (1e-6 if np.dtype(dtype) == np.float64 else get_atol(None, dtype)),
            (f"symbolic gradient of {k}", "numeric"),
        )


def check_consistency(
    sym: Symbol | Sequence[Symbol],
    ctx_list: Sequence[dict[str, Any]],
    scale: float = 1.0,
    grad_req: Any = "write",
    arg_params: dict[str, Any] | None = None,
    aux_params: dict[str, Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    raise_on_err: bool = True,
    ground_truth: dict[str, Any] | None = None,
    equal_nan: bool = False,
    use_uniform: bool = False,
    rand_type: Any = np.float64,
) -> dict[str, Any]:
    """Runs one symbol (or one per entry) bound as each entry of ``ctx_list`` says (``ctx``,
    the input shapes, ``type_dict``) on the same random inputs, and checks that their outputs
    (and, unless ``grad_req`` is ``null``, their gradients after a backward pass from the
    first executor's outputs) agree with those of the most precise one, or with
    ``ground_truth``. Returns the reference values by name."""
    if len(ctx_list) < 2:
        raise ValueError("check_consistency needs at least two contexts")
    syms = [sym] * len(ctx_list) if isinstance(sym, Symbol) else list(sym)
    output_names, arg_names = syms[0].list_outputs(), syms[0].list_arguments()
    exes = []
    for s, ctx in zip(syms, ctx_list):
        if s.list_arguments() != arg_names or s.list_outputs() != output_names:
            raise ValueError("check_consistency: the symbols differ in arguments or outputs")
        exes.append(s.simple_bind(grad_req=grad_req, **ctx))
    arg_params = dict(arg_params or {})
    aux_params = dict(aux_params or {})
    # Inputs are drawn in name order, so that a seed gives the same inputs.
    for name, arr in sorted(exes[0].arg_dict.items()):
        if name not in arg_params:
            if use_uniform:
                values = np.random.uniform(-0.92 * scale, 0.92 * scale, size=arr.shape)
            else:
                values = np.random.normal(size=arr.shape, scale=scale)
            arg_params[name] = values.astype(rand_type)
    for name in exes[0].aux_dict:
        aux_params.setdefault(name, 0)
    for exe in exes:
        for name, arr in exe.arg_dict.items():
            arr[:] = arg_params[name]
        for name, arr in exe.aux_dict.items():
            arr[:] = aux_params[name]
        if grad_req == "add":
            for arr in exe.grad_arrays:
                if arr is not None:
                    arr[:] = 0

    def size_of(dtype: Any) -> int:
        return np.dtype(dtype).itemsize

    dtypes = [np.dtype(exe.outputs[0].dtype) for exe in exes]
    ref = int(np.argmax([size_of(d) for d in dtypes]))
    truth = ground_truth
    if truth is None:
        truth = dict(exes[ref].output_dict)
        if grad_req != "null":
            truth.update(exes[ref].grad_dict)

    def compare(arr: Any, want: Any, what: str) -> None:
        try:
            assert_almost_equal(arr, want, rtol=rtol, atol=atol, equal_nan=equal_nan)
        except AssertionError:
            if raise_on_err:
                raise
            print(f"check_consistency: {what} differs")

    for exe in exes:
        exe.forward(is_train=False)
    for i, exe in enumerate(exes):
        if i != ref:
            for name, arr in zip(output_names, exe.outputs):
                compare(arr, truth[name], f"output {name} of context {i}")
    if grad_req != "null":
        for exe in exes:
            exe.forward(is_train=True)
        # The head gradients: the first executor's outputs, in the least precise dtype.
        least = [
            min((e.outputs[k].dtype for e in exes), key=size_of) for k in range(len(output_names))
        ]
        heads = [out.astype(dt).asnumpy() for out, dt in zip(exes[0].outputs, least)]
        for exe in exes:
            exe.backward(
                [nd.array(h, ctx=exe._ctx, dtype=o.dtype) for h, o in zip(heads, exe.outputs)]
            )
        for i, exe in enumerate(exes):
            if i == ref:
                continue
            for name, arr in zip(output_names + arg_names, exe.outputs + exe.grad_arrays):
                if truth.get(name) is None:
                    continue
                compare(arr, truth[name], f"{name} of context {i} after backward")
    return truth


# ---- more of the helpers MXNet's tests import ---------------------------------------------


def simple_forward(
    sym: Symbol, ctx: Context | None = None, is_train: bool = False, **inputs: Any
) -> Any:
    """``sym``'s outputs as numpy arrays for numpy ``inputs`` by name (one output alone)."""
    ctx = ctx or default_context()
    ex = sym.bind(ctx, args={k: nd.array(v, ctx=ctx) for k, v in inputs.items()})
    outs = [o.asnumpy() for o in ex.forward(is_train=is_train)]
    return outs[0] if len(outs) == 1 else outs


def same_symbol_structure(sym1: Symbol, sym2: Symbol) -> bool:
    """Whether the two graphs have the same op at every node position."""
    nodes1 = json.loads(sym1.tojson())["nodes"]
    nodes2 = json.loads(sym2.tojson())["nodes"]
    return all(a["op"] == b["op"] for a, b in zip(nodes1, nodes2))


def checkShapes(a: Any, b: Any) -> None:
    """Raises ``AssertionError`` unless the two have one shape."""
    if _np(a).shape != _np(b).shape:
        raise AssertionError(f"a.shape = {_np(a).shape} and b.shape = {_np(b).shape} are not equal")


def assert_allclose(
    a: Any, b: Any, rtol: float = 1e-7, atol: float = 0, equal_nan: bool = True
) -> None:
    """numpy's ``assert_allclose`` with MXNet's defaults (NaNs equal)."""
    np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol, equal_nan=equal_nan)


def compare_ndarray_tuple(
    t1: Any, t2: Any, rtol: float | None = None, atol: float | None = None
) -> None:
    """``assert_almost_equal`` of two arrays, or of two nested tuples of them, element by
    element; None on either side is not compared."""
    if t1 is None or t2 is None:
        return
    if isinstance(t1, tuple):
        for a, b in zip(t1, t2):
            compare_ndarray_tuple(a, b, rtol, atol)
    else:
        assert_almost_equal(t1, t2, rtol=rtol, atol=atol)


def create_vector(size: int, dtype: Any = np.int64) -> NDArray:
    """``0, 1, ..., size - 1``."""
    return nd.arange(0, size, dtype=dtype)


def create_2d_tensor(rows: int, columns: int, dtype: Any = np.int64) -> NDArray:
    """Row ``i`` holds ``i`` in each of ``columns`` columns."""
    return nd.arange(0, rows, dtype=dtype).reshape((rows, 1)).broadcast_to((rows, columns))


def get_identity_mat(size: int) -> NDArray:
    """The ``size`` x ``size`` identity."""
    return nd.array(np.eye(size))


def get_identity_mat_batch(size: int) -> NDArray:
    """Two ``size`` x ``size`` identities, stacked."""
    return nd.array(np.stack([np.eye(size)] * 2))


def rand_coord_2d(x_low: int, x_high: int, y_low: int, y_high: int) -> tuple[int, int]:
    """A random point of ``[x_low, x_high) x [y_low, y_high)``."""
    return (
        int(np.random.randint(x_low, x_high, dtype=np.int64)),
        int(np.random.randint(y_low, y_high, dtype=np.int64)),
    )


def new_orthonormal_matrix_2d(n: int) -> np.ndarray:
    """A random ``n`` x ``n`` orthonormal matrix (the Q of a random symmetric matrix)."""
    x = np.random.randn(n, n)
    return np.linalg.qr(x.T @ x)[0]


def is_op_runnable() -> bool:
    """Whether ops run on the current device (every op has a CPU and a GPU kernel here)."""
    return True


def gen_buckets_probs_with_ppf(ppf: Callable[[float], float], nbuckets: int) -> tuple[list, list]:
    """``nbuckets`` buckets of equal probability of the distribution with quantile function
    ``ppf``: ``([(low, high), ...], [1 / nbuckets, ...])``."""
    if nbuckets <= 0:
        raise ValueError("gen_buckets_probs_with_ppf needs at least one bucket")
    edges = [ppf(i / float(nbuckets)) for i in range(nbuckets + 1)]
    return list(zip(edges[:-1], edges[1:])), [1.0 / nbuckets] * nbuckets


def mean_check(
    generator: Callable[[int], Any], mu: float, sigma: float, nsamples: int = 1000000
) -> bool:
    """Whether the mean of ``generator(nsamples)`` is within three standard errors of ``mu``."""
    mean = float(np.mean(_np(generator(nsamples))))
    return abs(mean - mu) < 3 * sigma / math.sqrt(nsamples)


def var_check(generator: Callable[[int], Any], sigma: float, nsamples: int = 1000000) -> bool:
    """Whether the sample variance of ``generator(nsamples)`` is within three of its standard
    errors of ``sigma ** 2``."""
    var = float(np.var(_np(generator(nsamples)), ddof=1))
    return abs(var - sigma**2) < 3 * math.sqrt(2 * sigma**4 / (nsamples - 1))


def chi_square_check(
    generator: Callable[[int], Any], buckets: list, probs: Sequence[float], nsamples: int = 1000000
) -> tuple[float, np.ndarray, np.ndarray]:
    """Pearson's chi-square test of ``generator(nsamples)`` against ``probs`` over ``buckets``
    (``(low, high)`` ranges, or the values of a discrete distribution): ``(p value, observed,
    expected)``. Needs scipy, as MXNet's does."""
    import scipy.stats

    if len(probs) != len(buckets):
        raise ValueError("chi_square_check: one probability per bucket")
    samples = _np(generator(nsamples)).ravel()
    expected = (nsamples * np.asarray(probs, dtype=np.float32)).astype(np.int64)
    if isinstance(buckets[0], (list, tuple)):
        observed = np.array([((samples >= lo) & (samples < hi)).sum() for lo, hi in buckets])
    else:
        observed = np.array([(samples == b).sum() for b in buckets])
    _, p = scipy.stats.chisquare(f_obs=observed, f_exp=expected)
    return float(p), observed, expected


def verify_generator(
    generator: Callable[[int], Any],
    buckets: list,
    probs: Sequence[float],
    nsamples: int = 1000000,
    nrepeat: int = 5,
    success_rate: float = 0.2,
    alpha: float = 0.05,
) -> list[float]:
    """``chi_square_check`` ``nrepeat`` times; raises unless a share ``success_rate`` of the
    runs has p above ``alpha``. Returns the p values."""
    runs = [chi_square_check(generator, buckets, probs, nsamples) for _ in range(nrepeat)]
    ps = [p for p, _, _ in runs]
    if sum(p > alpha for p in ps) < nrepeat * success_rate:
        raise AssertionError(f"generator test failed: chi-square p values {ps} for {buckets}")
    return ps


class DummyIter(DataIter):
    """An iterator giving the first batch of ``real_iter`` for ever (for timing)."""

    def __init__(self, real_iter: DataIter) -> None:
        super().__init__(real_iter.batch_size)
        self.real_iter = real_iter
        self.provide_data = real_iter.provide_data
        self.provide_label = real_iter.provide_label
        self.the_batch = next(real_iter)

    def next(self) -> Any:
        return self.the_batch
