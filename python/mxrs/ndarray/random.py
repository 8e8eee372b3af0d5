"""``mx.nd.random``: arrays of random numbers from each device's generator (seeded by
``mx.random.seed``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from ..base import MXNetError, dtype_name
from ..context import Context, current_context
from .ndarray import NDArray, invoke

__all__ = [
    "exponential",
    "exponential_like",
    "normal",
    "normal_like",
    "randint",
    "randn",
    "shuffle",
    "uniform",
    "uniform_like",
]

Shape = Union[int, Sequence[int]]


def _shape(shape: Shape) -> tuple:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def _into(result: NDArray, out: NDArray | None) -> NDArray:
    """``result``, or its values copied into ``out`` when given (for samplers made of ops)."""
    if out is None:
        return result
    result.copyto(out)
    return out


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
    return _into(result, out)


def randn(*shape: int, loc: float = 0.0, scale: float = 1.0, **kwargs: Any) -> NDArray:
    """Normal draws of the shape given by the positional arguments (``randn(2, 3)``)."""
    return normal(loc, scale, shape or (1,), **kwargs)


def exponential(
    scale: float = 1.0,
    shape: Shape = (1,),
    dtype: Any = None,
    ctx: Context | None = None,
    out: NDArray | None = None,
) -> NDArray:
    """Draws from the exponential distribution of mean ``scale``: ``-scale * log(1 - U)`` of
    uniform draws ``U`` from the same seeded generator."""
    u = uniform(0.0, 1.0, shape, "float64", ctx)
    draw = invoke("log", [invoke("_rminus_scalar", [u], {"scalar": 1.0})])
    result = invoke("_mul_scalar", [draw], {"scalar": -float(scale)}).astype(dtype_name(dtype))
    return _into(result, out)


def shuffle(data: NDArray, out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """``data`` with its rows (first axis) in a random order from the seeded generator: the
    order of a sort of uniform keys, so every order is as likely."""
    keys = uniform(0.0, 1.0, (data.shape[0],), "float64", data.context)
    order = invoke("argsort", [keys], {"axis": 0, "dtype": "int64"})
    return invoke("take", [data, order], {"axis": 0}, out=out)


def _like(sampler: Any) -> Any:
    def sample(data: NDArray, *args: Any, **kwargs: Any) -> NDArray:
        return sampler(*args, shape=data.shape, dtype=data.dtype, ctx=data.context, **kwargs)

    sample.__name__ = f"{sampler.__name__}_like"
    sample.__doc__ = f"``{sampler.__name__}`` draws of ``data``'s shape, dtype and device."
    return sample


uniform_like = _like(uniform)
normal_like = _like(normal)
exponential_like = _like(exponential)
