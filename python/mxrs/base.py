"""Errors and shared helpers: every runtime error is raised as :class:`MXNetError`."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _native

MXNetError = _native.MXNetError
"""The error the runtime raises: a bad call, a failed op (raised when its result is read), a
bad file. Its message is the runtime's."""

__all__ = ["MXNetError", "attr_str", "dtype_name", "install_ops"]


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


def install_ops(
    package: str,
    namespace: dict[str, Any],
    make: Callable[[dict[str, Any], str], Callable[..., Any]],
) -> None:
    """Writes one function per op name and alias, made by ``make(signature, op)`` from the
    runtime's op signatures, into a package: names without a leading ``_`` into ``namespace``
    (unless taken), and every name into its ``op`` submodule, ``_`` names into ``_internal``,
    ``_contrib_X`` as ``X`` into ``contrib`` (MXNet's layout for ``mx.nd`` and ``mx.sym``)."""
    op = types.ModuleType(f"{package}.op", "Every op, by name.")
    internal = types.ModuleType(f"{package}._internal", "Ops whose names start with `_`.")
    contrib = types.ModuleType(f"{package}.contrib", "Ops MXNet registers as `_contrib_*`.")
    for sig in _native.signatures():
        for name in [sig["name"], *sig["aliases"]]:
            fn = make(sig, sig["name"])
            setattr(op, name, fn)
            if name.startswith("_contrib_"):
                setattr(contrib, name[len("_contrib_") :], fn)
            if name.startswith("_"):
                setattr(internal, name, fn)
            elif name not in namespace:
                namespace[name] = fn
    namespace.update(op=op, _internal=internal, contrib=contrib)
    # Importable by name too (``import mxnet.ndarray.op``, ``from mxnet.ndarray import op``).
    for module in (op, internal, contrib):
        sys.modules.setdefault(module.__name__, module)
