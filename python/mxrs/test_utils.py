"""``mx.test_utils``: the helpers MXNet's own tests use, so that tests written for MXNet run
here: comparisons, random arrays and shapes, the default context, and numerical and symbolic
checks of an op's forward and backward passes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import ndarray as nd
from .context import Context, current_context
from .ndarray.ndarray import NDArray
from .symbol.symbol import Symbol

__all__ = [
    "almost_equal",
    "assert_almost_equal",
    "assert_exception",
    "check_numeric_gradient",
    "check_symbolic_backward",
    "check_symbolic_forward",
    "default_context",
    "rand_ndarray",
    "rand_shape_2d",
    "rand_shape_3d",
    "rand_shape_nd",
    "same",
    "set_default_context",
]

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


def almost_equal(
    a: Any, b: Any, rtol: float | None = None, atol: float | None = None, equal_nan: bool = False
) -> bool:
    """Whether ``|a - b| <= atol + rtol * |b|`` everywhere (defaults 1e-5 and 1e-20)."""
    return bool(
        np.allclose(
            _np(a),
            _np(b),
            rtol=1e-5 if rtol is None else rtol,
            atol=1e-20 if atol is None else atol,
            equal_nan=equal_nan,
        )
    )


def assert_almost_equal(
    a: Any,
    b: Any,
    rtol: float | None = None,
    atol: float | None = None,
    names: tuple[str, str] = ("a", "b"),
    equal_nan: bool = False,
) -> None:
    """Raises ``AssertionError`` naming the worst element unless ``almost_equal``."""
    x, y = _np(a), _np(b)
    np.testing.assert_allclose(
        x,
        y,
        rtol=1e-5 if rtol is None else rtol,
        atol=1e-20 if atol is None else atol,
        equal_nan=equal_nan,
        err_msg=f"{names[0]} and {names[1]} differ",
    )


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


def _location(sym: Symbol, location: Any, dtype: Any) -> dict[str, np.ndarray]:
    names = sym.list_arguments()
    if isinstance(location, dict):
        return {k: _np(v).astype(dtype) for k, v in location.items()}
    return {k: _np(v).astype(dtype) for k, v in zip(names, location)}


def _aux(sym: Symbol, aux_states: Any, dtype: Any) -> dict[str, np.ndarray]:
    if aux_states is None:
        return {}
    if isinstance(aux_states, dict):
        return {k: _np(v).astype(dtype) for k, v in aux_states.items()}
    return {k: _np(v).astype(dtype) for k, v in zip(sym.list_auxiliary_states(), aux_states)}


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
    expected: Sequence[Any],
    rtol: float = 1e-4,
    atol: float | None = None,
    aux_states: Any = None,
    ctx: Context | None = None,
    equal_nan: bool = False,
    dtype: Any = np.float32,
) -> list[np.ndarray]:
    """Runs ``sym`` forward at ``location`` and compares its outputs with ``expected``."""
    ctx = ctx or default_context()
    ex = _bind(sym, _location(sym, location, dtype), _aux(sym, aux_states, dtype), ctx, "null")
    outs = [o.asnumpy() for o in ex.forward(is_train=False)]
    for i, (got, want) in enumerate(zip(outs, expected)):
        assert_almost_equal(got, _np(want), rtol, atol, (f"output {i}", "expected"), equal_nan)
    return outs


def check_symbolic_backward(
    sym: Symbol,
    location: Any,
    out_grads: Sequence[Any],
    expected: Any,
    rtol: float = 1e-5,
    atol: float | None = None,
    aux_states: Any = None,
    grad_req: Any = "write",
    ctx: Context | None = None,
    equal_nan: bool = False,
    dtype: Any = np.float32,
) -> dict[str, np.ndarray]:
    """Runs ``sym`` forward and backward with ``out_grads`` and compares the arguments'
    gradients with ``expected`` (a dict by name or a list in argument order)."""
    ctx = ctx or default_context()
    loc = _location(sym, location, dtype)
    ex = _bind(sym, loc, _aux(sym, aux_states, dtype), ctx, grad_req)
    ex.forward(is_train=True)
    ex.backward([nd.array(_np(g), ctx=ctx, dtype=dtype) for g in out_grads])
    if not isinstance(expected, dict):
        expected = dict(zip(sym.list_arguments(), expected))
    got = {k: ex.grad_dict[k].asnumpy() for k in expected}
    for k, want in expected.items():
        assert_almost_equal(
            got[k], _np(want), rtol, atol, (f"gradient of {k}", "expected"), equal_nan
        )
    return got


def check_numeric_gradient(
    sym: Symbol,
    location: Any,
    aux_states: Any = None,
    numeric_eps: float = 1e-4,
    rtol: float = 1e-2,
    atol: float | None = None,
    grad_nodes: Sequence[str] | None = None,
    ctx: Context | None = None,
    dtype: Any = np.float64,
) -> None:
    """Compares the symbolic gradient of ``sum(outputs * random projection)`` with central
    differences, for every argument in ``grad_nodes`` (default: all)."""
    ctx = ctx or default_context()
    loc = _location(sym, location, dtype)
    aux = _aux(sym, aux_states, dtype)
    nodes = list(grad_nodes or loc.keys())
    ex = _bind(sym, loc, aux, ctx, {k: ("write" if k in nodes else "null") for k in loc})
    outs = ex.forward(is_train=True)
    rng = np.random.RandomState(11)
    proj = [rng.uniform(-1, 1, o.shape).astype(dtype) for o in outs]
    ex.backward([nd.array(p, ctx=ctx, dtype=dtype) for p in proj])
    symbolic = {k: ex.grad_dict[k].asnumpy() for k in nodes}

    def value(at: dict[str, np.ndarray]) -> float:
        e = _bind(sym, at, aux, ctx, "null")
        return float(sum((o.asnumpy() * p).sum() for o, p in zip(e.forward(is_train=True), proj)))

    for k in nodes:
        numeric = np.zeros_like(loc[k])
        flat = numeric.reshape(-1)
        for i in range(flat.size):
            plus = {n: v.copy() for n, v in loc.items()}
            minus = {n: v.copy() for n, v in loc.items()}
            plus[k].reshape(-1)[i] += numeric_eps / 2
            minus[k].reshape(-1)[i] -= numeric_eps / 2
            flat[i] = (value(plus) - value(minus)) / numeric_eps
        assert_almost_equal(
            symbolic[k],
            numeric,
            rtol,
            atol if atol is not None else 1e-6,
            (f"symbolic gradient of {k}", "numeric"),
        )
