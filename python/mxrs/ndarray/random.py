"""``mx.nd.random``: arrays of random numbers from each device's generator (seeded by
``mx.random.seed``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from ..base import MXNetError, dtype_name
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
    """Whole numbers drawn uniformly from [low, high). Bounds the dtype cannot hold are
    refused (rather than saturated)."""
    name = dtype_name(dtype)
    info = np.iinfo(name) if name in ("int8", "uint8", "int32", "int64") else None
    # The draw is made in float64, exact for whole numbers up to 2**53.
    top = min(info.max + 1, 2**53) if info is not None else 2**53
    bottom = max(info.min, -(2**53)) if info is not None else -(2**53)
    if not bottom <= int(low) < int(high) <= top:
        raise MXNetError(
            f"randint: [{low}, {high}) is empty or does not fit in {name} "
            f"([{bottom}, {top}) can be drawn); give dtype='int64' for wider bounds"
        )
    draw = uniform(float(low), float(high), shape, "float64", ctx)
    result = invoke("floor", [draw]).astype(dtype)
    if out is not None:
        result.copyto(out)
        return out
    return result
