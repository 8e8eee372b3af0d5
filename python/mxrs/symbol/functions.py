"""The free functions of ``mx.sym`` that are not one op: ``maximum``, ``minimum``, ``power``
(``pow``) and ``hypot`` of symbols and numbers, ``full`` and ``split_v2``. Two symbols run the
op's two-input form, a symbol and a number its scalar form, two numbers give a number."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from ..base import MXNetError
from .symbol import Symbol, _apply

__all__ = ["full", "hypot", "logical_not", "maximum", "minimum", "pow", "power", "split_v2"]


def _binary(
    left: Any,
    right: Any,
    pair_op: str,
    scalar_op: str,
    rscalar_op: str,
    numbers_fn: Callable[[Any, Any], Any],
) -> Any:
    if isinstance(left, Symbol) and isinstance(right, Symbol):
        return _apply(pair_op, [left, right], None, None)
    if isinstance(left, Symbol) and isinstance(right, numbers.Number):
        return _apply(scalar_op, [left], {"scalar": float(right)}, None)
    if isinstance(left, numbers.Number) and isinstance(right, Symbol):
        return _apply(rscalar_op, [right], {"scalar": float(left)}, None)
    if isinstance(left, numbers.Number) and isinstance(right, numbers.Number):
        return numbers_fn(left, right)
    raise TypeError(
        f"{pair_op}: operands of types {type(left).__name__} and {type(right).__name__}"
    )


def maximum(left: Any, right: Any) -> Any:
    """The larger of each pair."""
    return _binary(left, right, "_maximum", "_maximum_scalar", "_maximum_scalar", max)


def minimum(left: Any, right: Any) -> Any:
    """The smaller of each pair."""
    return _binary(left, right, "_minimum", "_minimum_scalar", "_minimum_scalar", min)


def power(base: Any, exp: Any) -> Any:
    """``base ** exp``."""
    return _binary(base, exp, "_power", "_power_scalar", "_rpower_scalar", lambda a, b: a**b)


pow = power


def hypot(left: Any, right: Any) -> Any:
    """``sqrt(left ** 2 + right ** 2)``."""
    return _binary(left, right, "_hypot", "_hypot_scalar", "_hypot_scalar", math.hypot)


def logical_not(data: Symbol, name: str | None = None, **kwargs: Any) -> Symbol:
    """1 where the value is zero, else 0 (no gradient flows through it)."""
    return _apply("_equal_scalar", [data], {"scalar": 0.0}, name)


def full(
    shape: int | Sequence[int],
    val: float,
    dtype: Any = None,
    name: str | None = None,
    **kwargs: Any,
) -> Symbol:
    """A symbol of ``shape`` whose every element is ``val``."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    ones = _apply("_ones", [], {"shape": shape, "dtype": dtype}, None)
    return _apply("_mul_scalar", [ones], {"scalar": float(val)}, name)


def split_v2(
    ary: Symbol,
    indices_or_sections: int | Sequence[int],
    axis: int = 0,
    squeeze_axis: bool = False,
) -> Symbol:
    """``ary`` cut along ``axis`` into that many equal parts (an int; the axis's length must be
    known: use ``SliceChannel``'s ``num_outputs``) or at the given indices, as a group."""
    from .symbol import Group

    if isinstance(indices_or_sections, int):
        return _apply(
            "SliceChannel",
            [ary],
            {"num_outputs": indices_or_sections, "axis": axis, "squeeze_axis": squeeze_axis},
            None,
        )
    bounds = [0, *[int(i) for i in indices_or_sections]]
    parts = []
    for k, b in enumerate(bounds):
        # The last part runs to the axis's end: slice_axis's end of None.
        end = bounds[k + 1] if k + 1 < len(bounds) else "None"
        part = _apply("slice_axis", [ary], {"axis": axis, "begin": b, "end": end}, None)
        if squeeze_axis:
            part = _apply("squeeze", [part], {"axis": axis}, None)
        parts.append(part)
    if not parts:
        raise MXNetError("split_v2: no parts")
    return Group(parts)
