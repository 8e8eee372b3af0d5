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

__all__ = [
    "MXNetError",
    "NotImplementedForSymbol",
    "NotSupportedForSparseNDArray",
    "attr_str",
    "data_dir",
    "data_dir_default",
    "dtype_name",
    "install_ops",
    "integer_types",
    "mx_real_t",
    "numeric_types",
    "py_str",
    "string_types",
]

#: The types MXNet code tests numbers and strings against.
string_types = (str,)
integer_types = (int, np.integer)
numeric_types = (float, int, np.generic)
#: MXNet's default real type.
mx_real_t = np.float32


def py_str(x: bytes | str) -> str:
    """Bytes (UTF-8) or a string as a string."""
    return x.decode("utf-8") if isinstance(x, bytes) else x


def _as_list(obj: Any) -> list:
    """``obj`` itself when it is a list or tuple (as a list), else ``[obj]``."""
    return list(obj) if isinstance(obj, (list, tuple)) else [obj]


class _NotForThisType(MXNetError):  # type: ignore[misc, valid-type]
    """A function the array or graph it was called on does not have."""

    _tail = ""

    def __init__(self, function: Any, alias: str | None = None, *args: Any) -> None:
        self.function = getattr(function, "__name__", str(function))
        self.alias = alias
        self.arg_types = [str(type(a)) for a in args]
        super().__init__(self._message())

    def _message(self) -> str:
        msg = f"Function {self.function}"
        if self.alias:
            msg += f' (namely operator "{self.alias}")'
        if self.arg_types:
            msg += " with arguments (" + ", ".join(self.arg_types) + ")"
        return msg + self._tail


class NotImplementedForSymbol(_NotForThisType):  # type: ignore[misc, valid-type]
    """Raised by an NDArray function that a Symbol does not have."""

    _tail = " is not implemented for Symbol and only available in NDArray."


class NotSupportedForSparseNDArray(_NotForThisType):  # type: ignore[misc, valid-type]
    """Raised by a function that a sparse NDArray does not support."""

    _tail = " is not supported for SparseNDArray and only available in NDArray."


def data_dir_default() -> str:
    """Where data sets and models are kept unless ``MXNET_HOME`` says otherwise."""
    import os

    return os.path.join(os.path.expanduser("~"), ".mxnet")


def data_dir() -> str:
    """``MXNET_HOME``, else ``data_dir_default()``."""
    import os

    return os.getenv("MXNET_HOME", data_dir_default())


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
