"""The ``mx.nd.<op>`` functions, written from the runtime's op signatures: every op a user may
call, under its MXNet name and aliases, with MXNet's input and attribute names, defaults and
a docstring listing them."""

from __future__ import annotations

from typing import Any, Callable

from ..base import MXNetError
from .ndarray import NDArray, invoke

__all__ = ["op_function"]


def _doc(sig: dict[str, Any]) -> str:
    lines = [f"Runs the ``{sig['name']}`` op.", "", "Parameters", "----------"]
    for name in sig["inputs"]:
        more = " (any number)" if sig["variadic"] else ""
        lines.append(f"{name} : NDArray{more}")
    for name, ty, or_none, default, doc in sig["attrs"]:
        kind = f"{ty} or None" if or_none else ty
        when = "required" if default is None else f"default={default}"
        lines.append(f"{name} : {kind}, {when}")
        lines.append(f"    {doc}")
    lines += ["out : NDArray, optional", "    The array(s) to write the result into.", ""]
    lines += ["Returns", "-------", "NDArray or list of NDArray"]
    return "\n".join(lines)


def op_function(sig: dict[str, Any], op: str) -> Callable[..., Any]:
    input_names: list[str] = list(sig["inputs"])
    attr_order: list[str] = [a[0] for a in sig["attrs"]]
    attr_names = set(attr_order)
    nullable = {a[0] for a in sig["attrs"] if a[2]}
    variadic: bool = sig["variadic"]
    counts_inputs = "num_args" in attr_names

    def fn(*args: Any, out: Any = None, name: Any = None, ctx: Any = None, **kwargs: Any) -> Any:
        inputs: list[NDArray] = []
        positional = list(args)
        if variadic:
            while positional and isinstance(positional[0], NDArray):
                inputs.append(positional.pop(0))
            if len(positional) == 1 and isinstance(positional[0], (list, tuple)):
                inputs = list(positional.pop(0))
        else:
            # Inputs come first, by position (None: not given) or by name; the positional
            # values after them are attributes, in the order MXNet's generated functions take.
            given: list[Any] = []
            while positional and len(given) < len(input_names):
                if not isinstance(positional[0], NDArray) and positional[0] is not None:
                    break
                given.append(positional.pop(0))
            for i, iname in enumerate(input_names):
                x = given[i] if i < len(given) else kwargs.pop(iname, None)
                if x is not None:
                    if not isinstance(x, NDArray):
                        raise TypeError(
                            f"{op}: input {iname} must be an NDArray, got {type(x).__name__}"
                        )
                    inputs.append(x)
        if positional and variadic:
            raise TypeError(f"{op}: its inputs are arrays; pass attributes by name")
        if positional:
            if len(positional) > len(attr_order):
                raise TypeError(
                    f"{op}: {len(positional)} positional values after the inputs; it takes "
                    f"at most {len(attr_order)} ({', '.join(attr_order)})"
                )
            for k, v in zip(attr_order, positional):
                if k in kwargs:
                    raise TypeError(f"{op}: attribute {k!r} given by position and by name")
                kwargs[k] = v
        attrs = {}
        for k, v in kwargs.items():
            if k not in attr_names and not k.startswith("__"):
                raise MXNetError(
                    f"{op}: unknown attribute {k!r} ({op} takes "
                    f"{', '.join(sorted(attr_names)) or 'none'})"
                )
            # None means "not given", or the value None where the attribute takes one.
            if v is None and k in nullable:
                v = "None"
            attrs[k] = v
        if counts_inputs and "num_args" not in attrs:
            attrs["num_args"] = len(inputs)
        return invoke(op, inputs, attrs, out=out, ctx=ctx)

    fn.__name__ = op
    fn.__qualname__ = op
    fn.__doc__ = _doc(sig)
    return fn
