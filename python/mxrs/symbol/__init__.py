"""``mx.sym``: symbolic graphs. Variables and ops compose into a graph, which is saved and
loaded as MXNet's JSON, has its shapes and dtypes inferred, and binds to arrays as an
``Executor`` for forward and backward passes. Every op a user may call is ``mx.sym.<name>``,
written from the op signatures as ``mx.nd``'s functions are."""

from __future__ import annotations

import types

from .executor import Executor
from .register import make_functions
from .symbol import Group, Symbol, Variable, load, load_json, var

_FUNCTIONS = make_functions()
_internal = types.ModuleType("mxrs.symbol._internal", "Ops whose names start with `_`.")
contrib = types.ModuleType("mxrs.symbol.contrib", "Ops MXNet registers as `_contrib_*`.")
op = types.ModuleType("mxrs.symbol.op", "Every op, by name.")
for _name, _fn in _FUNCTIONS.items():
    setattr(op, _name, _fn)
    if _name.startswith("_contrib_"):
        setattr(contrib, _name[len("_contrib_") :], _fn)
    if _name.startswith("_"):
        setattr(_internal, _name, _fn)
    elif _name not in globals():
        globals()[_name] = _fn

__all__ = [
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
