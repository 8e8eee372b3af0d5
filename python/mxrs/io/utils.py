"""Helpers of the iterators: the naming of in-memory data as MXNet names it."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ndarray.ndarray import NDArray

__all__: list[str] = []


def _named(data: Any, default: str) -> list[tuple[str, np.ndarray]]:
    # MXNet's naming: one array is ``default``; several, ``_0_default``, ``_1_default``, ...
    if data is None or (isinstance(data, list) and not data):
        return []
    if isinstance(data, (np.ndarray, NDArray, list)) and not (
        isinstance(data, list) and data and isinstance(data[0], (np.ndarray, NDArray))
    ):
        data = [data]
    if isinstance(data, dict):
        items = list(data.items())
    else:
        several = len(data) > 1
        items = [(f"_{i}_{default}" if several else default, d) for i, d in enumerate(data)]
    # As MXNet: an NDArray keeps its dtype, anything else becomes float32 (``mx.nd.array``).
    return [
        (k, v.asnumpy() if isinstance(v, NDArray) else np.asarray(v, dtype=np.float32))
        for k, v in items
    ]
