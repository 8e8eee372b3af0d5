"""``mx.nd``: the NDArray, the functions that make arrays, and every registered op as a
function (``mx.nd.FullyConnected``, ``mx.nd.softmax``, ...), written from the op signatures."""

from __future__ import annotations

import types

from . import random
from .ndarray import (
    NDArray,
    arange,
    array,
    concatenate,
    empty,
    from_dlpack,
    full,
    invoke,
    load,
    ones,
    ones_like,
    save,
    to_dlpack_for_read,
    to_dlpack_for_write,
    waitall,
    zeros,
    zeros_like,
)
from .register import make_functions

_FUNCTIONS = make_functions()
_internal = types.ModuleType("mxrs.ndarray._internal", "Ops whose names start with `_`.")
contrib = types.ModuleType("mxrs.ndarray.contrib", "Ops MXNet registers as `_contrib_*`.")
op = types.ModuleType("mxrs.ndarray.op", "Every op, by name.")
for _name, _fn in _FUNCTIONS.items():
    setattr(op, _name, _fn)
    if _name.startswith("_contrib_"):
        setattr(contrib, _name[len("_contrib_") :], _fn)
    if _name.startswith("_"):
        setattr(_internal, _name, _fn)
    elif _name not in globals():
        globals()[_name] = _fn

__all__ = [
    "NDArray",
    "arange",
    "array",
    "concatenate",
    "contrib",
    "empty",
    "from_dlpack",
    "full",
    "invoke",
    "load",
    "ones",
    "ones_like",
    "op",
    "random",
    "save",
    "to_dlpack_for_read",
    "to_dlpack_for_write",
    "waitall",
    "zeros",
    "zeros_like",
]
