"""Writes python/tests/fixtures/mxnet_api.json: the public names of the modules of MXNet 1.9.1
that the Python package covers, each function's signature, and the public methods and
properties of each class defined there. Names and signatures only: no MXNet code.

    /tmp/mx/venv/bin/python tools/mxnet_api_names.py > python/tests/fixtures/mxnet_api.json

(a venv with MXNet 1.9.1 and numpy 1.23, as the other MXNet tools here use).

A module's public names are those of its ``__all__`` and every other name not starting with
``_`` whose object is MXNet's own (``__all__`` alone misses names MXNet code calls, such as
``mx.base.py_str`` and the generated op functions): a function or class whose ``__module__`` is in
the ``mxnet`` package, a submodule of ``mxnet``, or a plain value (a constant). Names that a
module only imports from the standard library or numpy are left out.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import types

MODULES = [
    "mxnet",
    "mxnet.base",
    "mxnet.ndarray",
    "mxnet.ndarray.random",
    "mxnet.ndarray.linalg",
    "mxnet.ndarray.contrib",
    "mxnet.ndarray.sparse",
    "mxnet.ndarray.image",
    "mxnet.ndarray.op",
    "mxnet.ndarray.utils",
    "mxnet.symbol",
    "mxnet.symbol.random",
    "mxnet.symbol.linalg",
    "mxnet.symbol.contrib",
    "mxnet.symbol.sparse",
    "mxnet.symbol.image",
    "mxnet.symbol.op",
    "mxnet.autograd",
    "mxnet.context",
    "mxnet.test_utils",
    "mxnet.io",
    "mxnet.kvstore",
    "mxnet.optimizer",
    "mxnet.initializer",
    "mxnet.metric",
    "mxnet.module",
    "mxnet.model",
    "mxnet.profiler",
    "mxnet.random",
    "mxnet.runtime",
    "mxnet.name",
    "mxnet.attribute",
    "mxnet.engine",
    "mxnet.util",
    "mxnet.recordio",
    "mxnet.lr_scheduler",
    "mxnet.callback",
    "mxnet.monitor",
    "mxnet.visualization",
    "mxnet.executor",
]


def own(obj: object) -> bool:
    """Whether ``obj`` is MXNet's own (not imported from the standard library or numpy)."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__.startswith("mxnet")
    if inspect.isclass(obj) or inspect.isroutine(obj):
        # The generated op functions say ``ndarray`` or ``symbol``.
        home = getattr(obj, "__module__", None) or ""
        return home.startswith("mxnet") or home in ("ndarray", "symbol")
    return not callable(obj)


def signature(obj: object) -> str | None:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return None


def kind(obj: object) -> str:
    if isinstance(obj, types.ModuleType):
        return "module"
    if inspect.isclass(obj):
        return "class"
    if callable(obj):
        return "function"
    return "value"


def members(cls: type) -> dict[str, dict]:
    """The public methods and properties of a class, inherited ones included (those of
    ``object`` and of classes outside MXNet left out)."""
    out = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        owner = next((c for c in cls.__mro__ if name in vars(c)), None)
        if owner is None or not owner.__module__.startswith("mxnet"):
            continue
        value = vars(owner)[name]
        if isinstance(value, property):
            out[name] = {"kind": "property"}
        elif isinstance(value, (staticmethod, classmethod)) or inspect.isroutine(value):
            fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            out[name] = {"kind": "method", "signature": signature(fn)}
        else:
            out[name] = {"kind": "attribute"}
    return out


def main() -> None:
    api: dict[str, dict] = {}
    classes: dict[str, dict] = {}
    for modname in MODULES:
        mod = importlib.import_module(modname)
        names = list(getattr(mod, "__all__", []))
        names += [n for n in dir(mod) if not n.startswith("_")]
        entries = {}
        for name in sorted(set(names)):
            if not hasattr(mod, name):
                continue
            obj = getattr(mod, name)
            if not own(obj):
                continue
            entry = {"kind": kind(obj)}
            if entry["kind"] == "function":
                entry["signature"] = signature(obj)
            if entry["kind"] == "class":
                qual = f"{obj.__module__}.{obj.__qualname__}"
                entry["class"] = qual
                classes.setdefault(qual, members(obj))
            entries[name] = entry
        api[modname] = entries
    json.dump(
        {"mxnet": "1.9.1", "modules": api, "classes": classes},
        sys.stdout,
        indent=1,
        sort_keys=True,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
