"""Errors and shared helpers: every runtime error is raised as :class:`MXNetError`."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _native

MXNetError = _native.MXNetError
"""The error the runtime raises: a bad call, a failed op (raised when its result is read), a
bad file. Its message is the runtime's."""

__all__ = ["MXNetError", "attr_str", "dtype_name"]


def dtype_name(dtype: Any) -> str:
    """MXNet's name for a dtype given as a string, a numpy type or a numpy dtype."""
    if dtype is None:
        return "float32"
    if isinstance(dtype, str):
        return np.dtype(dtype).name if dtype not in ("float32", "float64") else dtype
    return np.dtype(dtype).name


def attr_str(value: Any) -> str:
    """An attribute value as MXNet writes it in a graph: tuples as ``(1, 2)``, booleans as
    ``True``/``False``, dtypes by name, everything else by ``str``."""
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(attr_str(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, (type, np.dtype)):
        return np.dtype(value).name
    return str(value)
