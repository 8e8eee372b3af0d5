"""The free functions of ``mx.nd`` that are not one op: arithmetic and comparisons of arrays
and numbers with broadcasting (``add``, ``maximum``, ``power``, ``equal``, ...), ``moveaxis``,
``linspace``, ``eye``, ``onehot_encode``, ``split_v2``, ``histogram`` and ``load_frombuffer``.

The binary functions follow MXNet's rule: two numbers give a number; an array and a number
run the op's scalar form; two arrays the broadcasting form."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _native
from ..base import MXNetError, numeric_types
from ..context import Context, current_context
from .ndarray import NDArray, array, full, invoke

__all__ = [
    "add",
    "divide",
    "equal",
    "eye",
    "greater",
    "greater_equal",
    "histogram",
    "lesser",
    "lesser_equal",
    "linspace",
    "load_frombuffer",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "modulo",
    "moveaxis",
    "multiply",
    "not_equal",
    "onehot_encode",
    "power",
    "split_v2",
    "subtract",
    "true_divide",
]


def _number(x: Any) -> bool:
    return isinstance(x, numeric_types) and not isinstance(x, (bool, np.bool_))


def _binary(
    lhs: Any,
    rhs: Any,
    array_op: str,
    scalar_op: str | None,
    rscalar_op: str | None,
    numbers: Callable[[Any, Any], Any],
) -> Any:
    """MXNet's dispatch of a binary function (see the module's doc). ``rscalar_op`` is the
    scalar form with the number on the left (None: the op is symmetric, ``scalar_op`` serves;
    missing: the number is made an array of the other's shape)."""
    if _number(lhs) and _number(rhs):
        return numbers(lhs, rhs)
    if isinstance(lhs, NDArray) and isinstance(rhs, NDArray):
        return invoke(array_op, [lhs, rhs])
    if isinstance(lhs, NDArray) and _number(rhs):
        if scalar_op is None:
            return invoke(array_op, [lhs, full(lhs.shape, rhs, lhs.context, lhs._dtype)])
        return invoke(scalar_op, [lhs], {"scalar": float(rhs)})
    if _number(lhs) and isinstance(rhs, NDArray):
        if rscalar_op is None:
            return invoke(array_op, [full(rhs.shape, lhs, rhs.context, rhs._dtype), rhs])
        return invoke(rscalar_op, [rhs], {"scalar": float(lhs)})
    raise TypeError(f"{array_op}: operands of types {type(lhs).__name__} and {type(rhs).__name__}")


def add(lhs: Any, rhs: Any) -> Any:
    """``lhs + rhs``, broadcasting."""
    return _binary(lhs, rhs, "broadcast_add", "_plus_scalar", "_plus_scalar", operator.add)


def subtract(lhs: Any, rhs: Any) -> Any:
    """``lhs - rhs``, broadcasting."""
    return _binary(lhs, rhs, "broadcast_sub", "_minus_scalar", "_rminus_scalar", operator.sub)


def multiply(lhs: Any, rhs: Any) -> Any:
    """``lhs * rhs``, broadcasting."""
    return _binary(lhs, rhs, "broadcast_mul", "_mul_scalar", "_mul_scalar", operator.mul)


def divide(lhs: Any, rhs: Any) -> Any:
    """``lhs / rhs``, broadcasting."""
    return _binary(lhs, rhs, "broadcast_div", "_div_scalar", "_rdiv_scalar", operator.truediv)


true_divide = divide


def modulo(lhs: Any, rhs: Any) -> Any:
    """``lhs % rhs``, broadcasting."""
    return _binary(lhs, rhs, "broadcast_mod", "_mod_scalar", None, operator.mod)


def power(base: Any, exp: Any) -> Any:
    """``base ** exp``, broadcasting."""
    return _binary(base, exp, "broadcast_power", "_power_scalar", "_rpower_scalar", operator.pow)


def maximum(lhs: Any, rhs: Any) -> Any:
    """The larger of each pair, broadcasting."""
    return _binary(lhs, rhs, "broadcast_maximum", "_maximum_scalar", "_maximum_scalar", max)


def minimum(lhs: Any, rhs: Any) -> Any:
    """The smaller of each pair, broadcasting."""
    return _binary(lhs, rhs, "broadcast_minimum", "_minimum_scalar", "_minimum_scalar", min)


def _compare(fn: Callable[[Any, Any], bool]) -> Callable[[Any, Any], float]:
    # Two numbers compare to 1.0 or 0.0, as the arrays' comparisons give.
    return lambda a, b: 1.0 if fn(a, b) else 0.0


def equal(lhs: Any, rhs: Any) -> Any:
    """1 where ``lhs == rhs``, else 0, broadcasting."""
    op = _compare(operator.eq)
    return _binary(lhs, rhs, "broadcast_equal", "_equal_scalar", "_equal_scalar", op)


def not_equal(lhs: Any, rhs: Any) -> Any:
    """1 where ``lhs != rhs``, else 0, broadcasting."""
    op = _compare(operator.ne)
    return _binary(lhs, rhs, "broadcast_not_equal", "_not_equal_scalar", "_not_equal_scalar", op)


def greater(lhs: Any, rhs: Any) -> Any:
    """1 where ``lhs > rhs``, else 0, broadcasting."""
    op = _compare(operator.gt)
    return _binary(lhs, rhs, "broadcast_greater", "_greater_scalar", "_lesser_scalar", op)


def greater_equal(lhs: Any, rhs: Any) -> Any:
    """1 where ``lhs >= rhs``, else 0, broadcasting."""
    op = _compare(operator.ge)
    fwd, rev = "_greater_equal_scalar", "_lesser_equal_scalar"
    return _binary(lhs, rhs, "broadcast_greater_equal", fwd, rev, op)


def lesser(lhs: Any, rhs: Any) -> Any:
    """1 where ``lhs < rhs``, else 0, broadcasting."""
    op = _compare(operator.lt)
    return _binary(lhs, rhs, "broadcast_lesser", "_lesser_scalar", "_greater_scalar", op)


def lesser_equal(lhs: Any, rhs: Any) -> Any:
    """1 where ``lhs <= rhs``, else 0, broadcasting."""
    op = _compare(operator.le)
    fwd, rev = "_lesser_equal_scalar", "_greater_equal_scalar"
    return _binary(lhs, rhs, "broadcast_lesser_equal", fwd, rev, op)


def logical_and(lhs: Any, rhs: Any) -> Any:
    """1 where both are non-zero, else 0, broadcasting."""
    op = _compare(lambda a, b: bool(a) and bool(b))
    return _binary(lhs, rhs, "broadcast_logical_and", None, None, op)


def logical_not(data: NDArray, out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """1 where the value is zero, else 0 (no gradient flows through it)."""
    return invoke("_equal_scalar", [data], {"scalar": 0.0}, out=out)


def logical_or(lhs: Any, rhs: Any) -> Any:
    """1 where either is non-zero, else 0, broadcasting."""
    op = _compare(lambda a, b: bool(a) or bool(b))
    return _binary(lhs, rhs, "broadcast_logical_or", None, None, op)


def logical_xor(lhs: Any, rhs: Any) -> Any:
    """1 where exactly one is non-zero, else 0, broadcasting."""
    op = _compare(lambda a, b: bool(a) != bool(b))
    return _binary(lhs, rhs, "broadcast_logical_xor", None, None, op)


def moveaxis(
    tensor: NDArray, source: int | Sequence[int], destination: int | Sequence[int]
) -> NDArray:
    """The array with axes ``source`` moved to ``destination`` (the others keep their order)."""
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    n = tensor.ndim
    if len(src) != len(dst):
        raise ValueError("moveaxis: source and destination need as many axes")
    for a in src + dst:
        if not -n <= int(a) < n:
            raise ValueError(f"moveaxis: axis {a} is out of range for {n} axes")
    src = [int(a) % n for a in src]
    dst = [int(a) % n for a in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError("moveaxis: repeated axes")
    order = [a for a in range(n) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return invoke("transpose", [tensor], {"axes": tuple(order)})


def linspace(
    start: float,
    stop: float,
    num: int,
    endpoint: bool = True,
    ctx: Context | None = None,
    dtype: Any = np.float32,
) -> NDArray:
    """``num`` evenly spaced values from ``start`` to ``stop`` (included unless ``endpoint`` is
    False)."""
    values = np.linspace(start, stop, int(num), endpoint=endpoint)
    return array(values, ctx=ctx or current_context(), dtype=dtype)


def eye(
    N: int, M: int = 0, k: int = 0, ctx: Context | None = None, dtype: Any = None, **kwargs: Any
) -> NDArray:
    """An ``N`` x ``M`` (``M`` 0: ``N``) array with ones on diagonal ``k``."""
    values = np.eye(int(N), int(M) or None, int(k))
    return array(values, ctx=ctx or current_context(), dtype=dtype or np.float32)


def onehot_encode(indices: NDArray, out: NDArray) -> NDArray:
    """Writes the one-hot rows of ``indices`` into ``out`` (its columns are the classes)."""
    depth = out.shape[1]
    return invoke("one_hot", [indices], {"depth": depth, "dtype": out._dtype}, out=out)


def split_v2(
    ary: NDArray,
    indices_or_sections: int | Sequence[int],
    axis: int = 0,
    squeeze_axis: bool = False,
) -> NDArray | list[NDArray]:
    """``ary`` cut along ``axis``: into that many equal parts (an int), or at the given
    indices (a sequence)."""
    n = ary.shape[axis]
    if isinstance(indices_or_sections, int):
        if indices_or_sections <= 0 or n % indices_or_sections:
            raise MXNetError(f"split_v2: {n} does not split into {indices_or_sections} equal parts")
        step = n // indices_or_sections
        bounds = list(range(0, n + 1, step))
    else:
        bounds = [0, *[int(i) for i in indices_or_sections], n]
    parts = []
    for b, e in zip(bounds[:-1], bounds[1:]):
        part = invoke("slice_axis", [ary], {"axis": axis, "begin": b, "end": max(b, e)})
        if squeeze_axis and part.shape[axis] == 1:
            part = invoke("squeeze", [part], {"axis": axis})
        parts.append(part)
    return parts[0] if len(parts) == 1 else parts


def histogram(a: NDArray, bins: int | NDArray = 10, range: Any = None) -> tuple[NDArray, NDArray]:
    """Counts of ``a``'s values in ``bins`` (a count over ``range``, or the bins' edges) and the
    edges, as numpy's ``histogram`` (counts as int64)."""
    edges = bins.asnumpy() if isinstance(bins, NDArray) else bins
    if not isinstance(bins, NDArray) and range is None:
        raise ValueError("histogram: a count of bins needs a range")
    counts, out_edges = np.histogram(a.asnumpy(), bins=edges, range=range)
    return (
        array(counts, ctx=a.context, dtype="int64"),
        array(out_edges, ctx=a.context, dtype=a._dtype),
    )


def load_frombuffer(buf: bytes) -> list[NDArray] | dict[str, NDArray]:
    """The arrays of an MXNet NDArray file's bytes: a dict when it has names, else a list."""
    if not isinstance(buf, (bytes, bytearray, memoryview)):
        raise TypeError(f"load_frombuffer takes bytes, not {type(buf).__name__}")
    c = current_context()
    arrays, names = _native.load_bytes(bytes(buf), c.device_type, c.device_id)
    return dict(zip(names, arrays)) if names else list(arrays)


# ---- mx.nd.contrib's functions written in terms of ops ------------------------------------


def isinf(data: NDArray) -> NDArray:
    """1 where the value is infinite (either sign), else 0."""
    return invoke("_equal_scalar", [invoke("abs", [data])], {"scalar": float("inf")})


def isnan(data: NDArray) -> NDArray:
    """1 where the value is NaN, else 0."""
    return invoke("broadcast_not_equal", [data, data])


def isfinite(data: NDArray) -> NDArray:
    """1 where the value is neither infinite nor NaN, else 0."""
    finite = invoke("_not_equal_scalar", [invoke("abs", [data])], {"scalar": float("inf")})
    return invoke("broadcast_mul", [finite, invoke("broadcast_equal", [data, data])])


#: The functions above, by name, that ``mx.nd.contrib`` holds.
CONTRIB = {"isinf": isinf, "isnan": isnan, "isfinite": isfinite}
