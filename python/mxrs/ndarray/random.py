"""``mx.nd.random``: arrays of random numbers from each device's generator (seeded by
``mx.random.seed``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

from ..base import dtype_name
from ..context import Context, current_context
from .ndarray import NDArray, invoke

__all__ = ["normal", "randint", "uniform"]

Shape = Union[int, Sequence[int]]


def _shape(shape: Shape) -> tuple:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def _ctx(ctx: Context | None) -> Context:
    return current_context() if ctx is None else ctx


def uniform(
    low: float = 0.0,
    high: float = 1.0,
    shape: Shape = (1,),
    dtype: Any = None,
    ctx: Context | None = None,
    out: NDArray | None = None,
) -> NDArray:
    """Values drawn uniformly from [low, high)."""
    attrs = {"low": low, "high": high, "shape": _shape(shape), "dtype": dtype_name(dtype)}
    return invoke("_random_uniform", [], attrs, out=out, ctx=_ctx(ctx))


def normal(
    loc: float = 0.0,
    scale: float = 1.0,
    shape: Shape = (1,),
    dtype: Any = None,
    ctx: Context | None = None,
    out: NDArray | None = None,
) -> NDArray:
    """Values drawn from a normal distribution of mean ``loc`` and deviation ``scale``."""
    attrs = {"loc": loc, "scale": scale, "shape": _shape(shape), "dtype": dtype_name(dtype)}
    return invoke("_random_normal", [], attrs, out=out, ctx=_ctx(ctx))


def randint(
    low: int,
    high: int,
    shape: Shape = (1,),
    dtype: Any = "int32",
    ctx: Context | None = None,
    out: NDArray | None = None,
) -> NDArray:
    """Whole numbers drawn uniformly from [low, high)."""
    draw = uniform(float(low), float(high), shape, "float64", ctx)
    result = invoke("floor", [draw]).astype(dtype)
    if out is not None:
        result.copyto(out)
        return out
    return result
