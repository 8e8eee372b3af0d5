"""MXNet's fluent methods: ``x.sin()`` is ``mx.nd.sin(x)``, ``s.sin()`` is ``mx.sym.sin(s)``,
with the same further arguments (positional attributes included). Arrays and symbols get a
method for every op of this list that their namespace has and that they do not define
themselves (the hand-written ones keep MXNet's named parameters)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FLUENT", "attach"]

#: The ops MXNet 1.x offers as methods of NDArray and Symbol.
FLUENT = (
    "abs", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctanh", "argmax",
    "argmax_channel", "argmin", "argsort", "broadcast_axes", "broadcast_like", "broadcast_to",
    "cbrt", "ceil", "clip", "cos", "cosh", "degrees", "depth_to_space", "diag", "exp",
    "expand_dims", "expm1", "fix", "flatten", "flip", "floor", "log", "log10", "log1p", "log2",
    "log_softmax", "max", "mean", "min", "nanprod", "nansum", "norm", "one_hot", "ones_like",
    "pad", "pick", "prod", "radians", "rcbrt", "reciprocal", "relu", "repeat", "reshape_like",
    "rint", "round", "rsqrt", "shape_array", "sigmoid", "sign", "sin", "sinh", "size_array",
    "slice", "slice_axis", "slice_like", "softmax", "softmin", "sort", "space_to_depth",
    "split", "split_v2", "sqrt", "square", "squeeze", "sum", "swapaxes", "take", "tan", "tanh",
    "tile", "topk", "transpose", "trunc", "zeros_like",
)  # fmt: skip


def _method(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    method.__name__ = name
    method.__qualname__ = name
    method.__doc__ = f"``{name}`` of this one and the further arguments (a fluent method)."
    return method


def attach(cls: type, namespace: dict[str, Any]) -> None:
    """Gives ``cls`` a fluent method for each op of ``FLUENT`` in ``namespace`` it lacks."""
    for name in FLUENT:
        fn = namespace.get(name)
        if fn is not None and not hasattr(cls, name):
            setattr(cls, name, _method(fn, name))
