"""``mx.sym``: symbolic graphs. Variables and ops compose into a graph, which is saved and
loaded as MXNet's JSON, has its shapes and dtypes inferred, and binds to arrays as an
``Executor`` for forward and backward passes. Every op a user may call is ``mx.sym.<name>``,
written from the op signatures as ``mx.nd``'s functions are."""

from __future__ import annotations

from ..base import install_ops
from ..ndarray.fluent import attach
from . import functions
from .executor import Executor
from .functions import *
from .register import op_function
from .symbol import Group, Symbol, Variable, load, load_json, var

install_ops("mxrs.symbol", globals(), op_function)
attach(Symbol, globals())

__all__ = functions.__all__ + [
    "Executor",
    "Group",
    "Symbol",
    "Variable",
    "contrib",
    "load",
    "load_json",
    "op",
    "var",
]
