"""The ``mx.sym.<op>`` functions, written from the op signatures: inputs by position or by
name, attributes by name; inputs not given become variables named ``<node>_<input>``
(``fc1_weight``), as MXNet names them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _native
from ..attribute import HIDDEN_KEYS, AttrScope, hidden_forms
from ..base import MXNetError, attr_str
from ..ndarray.register import _doc
from .symbol import Symbol, Variable, _Names, _wrap

__all__ = ["op_function"]


def op_function(sig: dict[str, Any], op: str) -> Callable[..., Symbol]:
    input_names: list[str] = list(sig["inputs"])
    attr_order: list[str] = [a[0] for a in sig["attrs"]]
    attr_names = set(attr_order)
    nullable = {a[0] for a in sig["attrs"] if a[2]}
    variadic: bool = sig["variadic"]
    counts_inputs = "num_args" in attr_names

    def fn(*args: Any, name: str | None = None, attr: Any = None, **kwargs: Any) -> Symbol:
        given: dict[str, Symbol] = {}
        listed: list[Symbol] = []
        rest = list(args)
        # Inputs by position: symbols, or None for an input not given.
        while rest and (isinstance(rest[0], Symbol) or rest[0] is None):
            if len(listed) >= len(input_names) and not variadic:
                break
            listed.append(rest.pop(0))
        listed = [x for x in listed if x is not None]
        # The positional values after the inputs are attributes, in MXNet's order.
        if rest and (variadic or len(rest) > len(attr_order)):
            raise TypeError(
                f"{op}: {len(rest)} positional values after the inputs; it takes at most "
                f"{0 if variadic else len(attr_order)}: pass attributes by name"
            )
        for k, v in zip(attr_order, rest):
            if k in kwargs:
                raise TypeError(f"{op}: attribute {k!r} given by position and by name")
            kwargs[k] = v
        attrs: dict[str, Any] = {}
        hidden: dict[str, str] = {}
        for k, v in kwargs.items():
            if isinstance(v, Symbol):
                if k not in input_names and not variadic:
                    raise MXNetError(f"{op}: no input named {k!r} (inputs: {input_names})")
                given[k] = v
            elif k in HIDDEN_KEYS and k not in attr_names:
                hidden.update(hidden_forms(k, v))
            elif k in attr_names or k.startswith("__"):
                # None means "not given", or the value None where the attribute takes one.
                if v is not None or k in nullable:
                    attrs[k] = "None" if v is None else v
            else:
                raise MXNetError(
                    f"{op}: unknown attribute {k!r} ({op} takes "
                    f"{', '.join(sorted(attr_names)) or 'none'})"
                )
        node = _Names.get(name, op.lower())
        if variadic:
            inputs = listed + list(given.values())
            if counts_inputs and "num_args" not in attrs:
                attrs["num_args"] = len(inputs)
        else:
            pairs = [(k, attr_str(v)) for k, v in attrs.items()]
            names = _native.input_names(op, pairs)
            if len(listed) > len(names):
                raise MXNetError(f"{op}: {len(listed)} inputs given; it takes {names}")
            inputs = []
            for i, iname in enumerate(names):
                if i < len(listed):
                    inputs.append(listed[i])
                elif iname in given:
                    inputs.append(given[iname])
                else:
                    # A variable made for an input carries the op's ``attr``, as in MXNet.
                    inputs.append(Variable(f"{node}_{iname}", attr=attr))
        merged = AttrScope.current.for_op(attr)
        merged.update(hidden)
        merged.update(attrs)
        pairs = [(k, attr_str(v)) for k, v in merged.items()]
        return _wrap(_native.Sym.op(op, node, [s._h for s in inputs], pairs))

    fn.__name__ = op
    fn.__qualname__ = op
    fn.__doc__ = _doc(sig).replace("NDArray", "Symbol")
    return fn
