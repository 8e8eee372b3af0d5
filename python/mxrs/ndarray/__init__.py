"""``mx.nd``: the NDArray, the functions that make arrays, and every registered op as a
function (``mx.nd.FullyConnected``, ``mx.nd.softmax``, ...), written from the op signatures."""

from __future__ import annotations

from ..base import install_ops
from . import functions, random
from .fluent import attach
from .functions import *
from .indexing import internal_slice_assign, internal_slice_assign_scalar
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
from .register import op_function

install_ops("mxrs.ndarray", globals(), op_function)
attach(NDArray, globals())
# MXNet's in-place region writes, under their op names (engine ops of ``indexing.py``).
for _name, _fn in (
    ("_slice_assign", internal_slice_assign),
    ("_crop_assign", internal_slice_assign),
    ("_slice_assign_scalar", internal_slice_assign_scalar),
    ("_crop_assign_scalar", internal_slice_assign_scalar),
):
    setattr(_internal, _name, _fn)
for _name, _fn in functions.CONTRIB.items():
    setattr(contrib, _name, _fn)

__all__ = functions.__all__ + [
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
