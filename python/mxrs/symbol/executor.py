"""``Executor``: a symbol bound to arrays. ``forward`` and ``backward`` push the graph's ops
and return at once; the outputs, the gradients and the auxiliary states are arrays that fill
in when the engine has run them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import _native
from ..base import MXNetError
from ..context import Context, current_context
from ..ndarray.ndarray import NDArray
from ..ndarray.ndarray import zeros as nd_zeros

if TYPE_CHECKING:
    from .symbol import Symbol

__all__ = ["Executor", "bind"]


def _named(
    names: list[str], arrays: dict[str, NDArray] | Sequence[NDArray] | None, what: str
) -> dict[str, NDArray]:
    if arrays is None:
        return {}
    if isinstance(arrays, dict):
        return dict(arrays)
    arrays = list(arrays)
    if len(arrays) != len(names):
        raise MXNetError(f"bind: {len(arrays)} {what} given for {len(names)} ({names})")
    return dict(zip(names, arrays))


def bind(
    symbol: Symbol,
    ctx: Context | None,
    shapes: dict[str, Any] | None = None,
    args: dict[str, NDArray] | Sequence[NDArray] | None = None,
    args_grad: dict[str, NDArray] | Sequence[NDArray] | None = None,
    grad_req: str | dict[str, str] | Sequence[str] = "write",
    aux_states: dict[str, NDArray] | Sequence[NDArray] | None = None,
    type_dict: dict[str, Any] | None = None,
    mirror: str | None = None,
) -> Executor:
    """Binds ``symbol`` (see ``Symbol.simple_bind`` and ``Symbol.bind``). ``mirror``
    recomputes forward entries during backward to save memory: a byte budget (``"800M"``),
    ``"auto"``, ``"auto:0.5"``, ``"cheap"`` (MXNet's ``MXNET_BACKWARD_DO_MIRROR=1``) or
    ``"off"``; ``None`` follows ``MXRS_BACKWARD_MIRROR``."""
    c = Context(ctx) if ctx is not None else current_context()
    arg_names = symbol.list_arguments()
    if isinstance(grad_req, str):
        reqs = dict.fromkeys(arg_names, grad_req)
    elif isinstance(grad_req, dict):
        reqs = {k: grad_req.get(k, "null") for k in arg_names}
    else:
        reqs = dict(zip(arg_names, grad_req))
    given = _named(arg_names, args, "arguments")
    given.update(_named(symbol.list_auxiliary_states(), aux_states, "auxiliary states"))
    grads = _named(arg_names, args_grad, "gradient arrays")
    if args is not None and args_grad is None and isinstance(grad_req, str):
        # MXNet's bind without gradient arrays computes no gradients.
        reqs = dict.fromkeys(arg_names, "null")
    if type_dict:
        given, grads = _typed_arrays(symbol, c, shapes or {}, type_dict, reqs)
        shapes = {}
    # As MXNet, gradient arrays of arguments that get no gradient are left alone.
    grads = {k: v for k, v in grads.items() if reqs.get(k, "null") != "null"}
    handle = _native.bind(
        symbol.handle,
        c.device_type,
        c.device_id,
        {k: list(v) for k, v in (shapes or {}).items()},
        {k: v.handle for k, v in given.items()},
        {k: v for k, v in reqs.items() if v != "null"},
        {k: v.handle for k, v in grads.items()},
        mirror,
    )
    return Executor(handle, symbol, c)


def _typed_arrays(
    symbol: Symbol,
    ctx: Context,
    shapes: dict[str, Any],
    type_dict: dict[str, Any],
    reqs: dict[str, str],
) -> tuple[dict[str, NDArray], dict[str, NDArray]]:
    """Arguments, auxiliary states and gradients allocated with the dtypes asked for (zeros;
    BatchNorm's ``*_var`` states ones), for ``simple_bind(type_dict=...)``."""
    arg_shapes, _, aux_shapes = symbol.infer_shape(**shapes)
    if arg_shapes is None:
        raise MXNetError(f"simple_bind: shapes {shapes} do not determine every argument's shape")
    arg_types, _, aux_types = symbol.infer_type(**type_dict)
    given: dict[str, NDArray] = {}
    grads: dict[str, NDArray] = {}
    for name, shape, dtype in zip(symbol.list_arguments(), arg_shapes, arg_types):
        given[name] = nd_zeros(shape, ctx, dtype)
        if reqs.get(name, "null") != "null":
            grads[name] = nd_zeros(shape, ctx, dtype)
    for name, shape, dtype in zip(symbol.list_auxiliary_states(), aux_shapes, aux_types):
        given[name] = nd_zeros(shape, ctx, dtype)
        if name.endswith("_var"):
            given[name][:] = 1
    return given, grads


class Executor:
    """A bound symbol."""

    def __init__(self, handle: Any, symbol: Symbol, ctx: Context) -> None:
        self._h = handle
        self._symbol = symbol
        self._ctx = ctx
        self.outputs: list[NDArray] = list(handle.outputs())
        names = set(symbol.list_arguments())
        # The runtime's executor also binds the head gradients as arguments; MXNet's does not
        # list them.
        self.arg_dict: dict[str, NDArray] = {
            k: v for k, v in handle.arg_dict().items() if k in names
        }
        self.grad_dict: dict[str, NDArray] = handle.grad_dict()
        self.aux_dict: dict[str, NDArray] = handle.aux_dict()
        self._monitor: tuple[Callable[[str, NDArray], Any], bool] | None = None
        self._monitor_exe: Executor | None = None

    @property
    def arg_arrays(self) -> list[NDArray]:
        """The argument arrays in ``list_arguments`` order."""
        return [self.arg_dict[n] for n in self._symbol.list_arguments()]

    @property
    def grad_arrays(self) -> list[NDArray | None]:
        """The gradient arrays in ``list_arguments`` order (None where not computed)."""
        return [self.grad_dict.get(n) for n in self._symbol.list_arguments()]

    @property
    def aux_arrays(self) -> list[NDArray]:
        """The auxiliary arrays in ``list_auxiliary_states`` order."""
        return [self.aux_dict[n] for n in self._symbol.list_auxiliary_states()]

    @property
    def output_dict(self) -> dict[str, NDArray]:
        """The outputs by name."""
        return dict(zip(self._symbol.list_outputs(), self.outputs))

    def forward(self, is_train: bool = False, **kwargs: Any) -> list[NDArray]:
        """Copies ``kwargs`` (by argument name) into the bound arguments, then pushes the
        forward pass; returns the outputs."""
        for name, value in kwargs.items():
            if name not in self.arg_dict:
                raise MXNetError(f"forward: no argument named {name!r}")
            dst = self.arg_dict[name]
            if isinstance(value, NDArray):
                if value.dtype != dst.dtype:
                    value = value.astype(dst.dtype)
                value.copyto(dst)
            else:
                dst[:] = value
        self._h.forward(bool(is_train))
        if self._monitor is not None:
            self._run_monitor(bool(is_train))
        return self.outputs

    def set_monitor_callback(
        self, callback: Callable[[str, NDArray], Any], monitor_all: bool = False
    ) -> None:
        """Calls ``callback(name, array)`` after each forward pass for every op's outputs
        (``<node>_output``, ...), in graph order; with ``monitor_all``, each op's inputs
        before its outputs too (``<node>_<input>``, a variable under its own name first)."""
        self._monitor = (callback, bool(monitor_all))

    def _run_monitor(self, is_train: bool) -> None:
        # The graph's every entry, computed by an executor of its internals bound to this
        # one's argument and auxiliary arrays (the same arrays: it sees the same values).
        callback, monitor_all = self._monitor  # type: ignore[misc]
        internals = self._symbol.get_internals()
        if self._monitor_exe is None:
            self._monitor_exe = bind(
                internals, self._ctx, args=dict(self.arg_dict), aux_states=dict(self.aux_dict)
            )
        values = self._monitor_exe.forward(is_train)
        names = internals.list_outputs()
        nodes = self._symbol.handle.nodes()
        entry: dict[tuple[int, int], tuple[str, NDArray]] = {}
        k = 0
        for i, (_, _, visible, _, _) in enumerate(nodes):
            for j in range(visible):
                entry[(i, j)] = (names[k], values[k])
                k += 1
        for i, (node, op, visible, inputs, input_names) in enumerate(nodes):
            if op == "null":
                continue
            if monitor_all:
                for n, (src, index) in enumerate(inputs):
                    if (src, index) not in entry:
                        continue
                    name, value = entry[(src, index)]
                    if nodes[src][1] == "null":
                        # A variable is reported under its own name first, as MXNet does.
                        callback(name, value)
                    arg = input_names[n] if n < len(input_names) else f"arg{n}"
                    callback(f"{node}_{arg}", value)
            for j in range(visible):
                callback(*entry[(i, j)])

    def backward(
        self, out_grads: NDArray | Sequence[NDArray] | None = None, is_train: bool = True
    ) -> None:
        """Pushes the backward pass, with the gradients of the outputs that are not losses."""
        if out_grads is None:
            self._h.backward(None)
            return
        grads = [out_grads] if isinstance(out_grads, NDArray) else list(out_grads)
        # As MXNet, a head gradient of another dtype than its output is converted.
        grads = [
            g if o is None or g.dtype == o.dtype else g.astype(o.dtype)
            for g, o in zip(grads, self.outputs + [None] * len(grads))
        ]
        self._h.backward([g.handle for g in grads])

    def copy_params_from(
        self,
        arg_params: dict[str, NDArray],
        aux_params: dict[str, NDArray] | None = None,
        allow_extra_params: bool = False,
    ) -> None:
        """Copies parameters (and auxiliary states) into the bound arrays, by name."""
        self._h.copy_params_from(
            {k: v.handle for k, v in arg_params.items()},
            {k: v.handle for k, v in (aux_params or {}).items()},
            allow_extra_params,
        )

    def reshape(
        self, partial_shaping: bool = False, allow_up_sizing: bool = False, **shapes: Any
    ) -> Executor:
        """A new executor for new input shapes, sharing nothing but the parameters' values."""
        new = bind(
            self._symbol, self._ctx, shapes=shapes, grad_req={k: "write" for k in self.grad_dict}
        )
        params = {k: v for k, v in self.arg_dict.items() if k not in shapes}
        new.copy_params_from(params, self.aux_dict, allow_extra_params=True)
        return new

    def debug_str(self) -> str:
        """The bound graph and its memory, as text."""
        return self._h.debug_str()
