"""``mx.sym.Symbol``: a graph (the outputs of some nodes), built from variables and ops."""

from __future__ import annotations

import json
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _native
from ..base import MXNetError, NotImplementedForSymbol, attr_str, dtype_name
from ..context import Context, current_context

if TYPE_CHECKING:
    from ..ndarray.ndarray import NDArray
    from .executor import Executor

__all__ = ["Group", "Symbol", "Variable", "load", "load_json", "var"]


class _Names:
    """Default node names as MXNet makes them: the current name manager's (``mx.name``), by
    default the op's name in lower case and a counter (``fullyconnected0``), per thread."""

    @classmethod
    def get(cls, name: str | None, hint: str) -> str:
        from ..name import NameManager

        return NameManager.current.get(name, hint)


def _wrap(handle: Any) -> Symbol:
    s = Symbol.__new__(Symbol)
    s._h = handle
    return s


def _apply(
    op: str, inputs: Sequence[Symbol], attrs: dict[str, Any] | None, name: str | None
) -> Symbol:
    from ..attribute import AttrScope

    merged = AttrScope.current.for_op(None)
    merged.update(attrs or {})
    pairs = [(k, attr_str(v)) for k, v in merged.items() if v is not None]
    node = _Names.get(name, op.lower())
    return _wrap(_native.Sym.op(op, node, [s._h for s in inputs], pairs))


class Symbol:
    """A graph: the outputs of some nodes. Arithmetic with symbols and numbers adds nodes."""

    __slots__ = ("__weakref__", "_h")

    def __init__(self, handle: Any) -> None:
        self._h = handle

    # ---- what it is -----------------------------------------------------------------------

    @property
    def name(self) -> str | None:
        """The node's name, for a symbol with one output."""
        return self._h.name()

    @property
    def handle(self) -> Any:
        """The native graph this wraps."""
        return self._h

    def attr(self, key: str) -> str | None:
        """Attribute ``key`` of the node (one output), or None; a plain key also finds the
        hidden ``__key__`` an attribute scope gave an op."""
        attrs = dict(self._h.attrs())
        return attrs.get(key, attrs.get(f"__{key}__"))

    def list_attr(self) -> dict[str, str]:
        """The node's attributes (one output)."""
        return dict(self._h.attrs())

    def list_arguments(self) -> list[str]:
        """Names of the arguments (inputs and parameters), in graph order."""
        return self._h.list_arguments()

    def list_outputs(self) -> list[str]:
        """Names of the outputs (``fc1_output``, ...)."""
        return self._h.list_outputs()

    def list_auxiliary_states(self) -> list[str]:
        """Names of the auxiliary states (BatchNorm's moving statistics)."""
        return self._h.list_auxiliary_states()

    def list_inputs(self) -> list[str]:
        """Arguments and auxiliary states."""
        return self.list_arguments() + self.list_auxiliary_states()

    def __len__(self) -> int:
        return self._h.num_outputs()

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self)))

    def __getitem__(self, index: int | str) -> Symbol:
        if isinstance(index, str):
            names = self.list_outputs()
            if index not in names:
                raise ValueError(f"no output named {index!r} (outputs: {names})")
            index = names.index(index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"output {index} of a symbol with {len(self)} outputs")
        return _wrap(self._h.get_output(index % len(self)))

    def get_internals(self) -> Symbol:
        """Every node's outputs, as MXNet's ``get_internals`` (index by ``<node>_output``)."""
        return _wrap(self._h.get_internals())

    def get_children(self) -> Symbol | None:
        """The inputs of this symbol's output nodes, grouped; None for a variable."""
        h = self._h.get_children()
        return None if h is None else _wrap(h)

    def attr_dict(self) -> dict[str, dict[str, str]]:
        """The attributes of every node of the graph that has some, by node name."""
        nodes = json.loads(self.tojson())["nodes"]
        return {n["name"]: dict(n["attrs"]) for n in nodes if n.get("attrs")}

    def copy(self) -> Symbol:
        """A copy of the graph."""
        return self.__copy__()

    def reshape(self, *args: Any, **kwargs: Any) -> Symbol:
        """``mx.sym.reshape`` of this symbol."""
        from . import op

        return op.Reshape(self, *args, **kwargs)

    # An NDArray's methods that a graph has no values for: MXNet's Symbol raises on them too.
    def asnumpy(self) -> Any:
        """Not for a symbol: raises ``NotImplementedForSymbol``."""
        raise NotImplementedForSymbol(self.asnumpy, None)

    def asscalar(self) -> Any:
        """Not for a symbol: raises ``NotImplementedForSymbol``."""
        raise NotImplementedForSymbol(self.asscalar, None)

    def astype(self, *args: Any, **kwargs: Any) -> Any:
        """Not for a symbol: raises ``NotImplementedForSymbol``."""
        raise NotImplementedForSymbol(self.astype, None)

    def as_in_context(self, *args: Any, **kwargs: Any) -> Any:
        """Not for a symbol: raises ``NotImplementedForSymbol``."""
        raise NotImplementedForSymbol(self.as_in_context, None)

    def detach(self) -> Any:
        """Not for a symbol: raises ``NotImplementedForSymbol``."""
        raise NotImplementedForSymbol(self.detach, None)

    def backward(self, *args: Any, **kwargs: Any) -> Any:
        """Not for a symbol: raises ``NotImplementedForSymbol``."""
        raise NotImplementedForSymbol(self.backward, None)

    def wait_to_read(self) -> Any:
        """Not for a symbol: raises ``NotImplementedForSymbol``."""
        raise NotImplementedForSymbol(self.wait_to_read, None)

    def __repr__(self) -> str:
        name = self.name
        return f"<Symbol {name}>" if name else f"<Symbol group [{', '.join(self.list_outputs())}]>"

    # ---- files ----------------------------------------------------------------------------

    def tojson(self) -> str:
        """MXNet's JSON of the graph."""
        return self._h.to_json()

    def save(self, fname: str) -> None:
        """Writes the JSON to ``fname`` (whole or not at all)."""
        self._h.save(str(fname))

    # ---- composition ----------------------------------------------------------------------

    def __call__(self, *args: Symbol, **kwargs: Any) -> Symbol:
        """This graph with its variables replaced: by name (keywords) or in argument order.
        ``name`` is accepted as in MXNet, where it names only a lone op's node: the graph's
        nodes keep theirs."""
        kwargs.pop("name", None)
        names = self.list_arguments()
        mapping = dict(zip(names, args))
        mapping.update(kwargs)
        return _wrap(self._h.compose({k: v._h for k, v in mapping.items()}))

    compose = __call__

    # ---- inference ------------------------------------------------------------------------

    def infer_shape_partial(self, *args: Any, **kwargs: Any) -> tuple:
        """Shapes from those given (by position in ``list_arguments`` or by name), in both
        directions: ``(arg_shapes, out_shapes, aux_shapes)``, unknown dimensions 0 and unknown
        shapes ``()``."""
        known = dict(zip(self.list_arguments(), args))
        known.update(kwargs)
        known = {k: list(v) for k, v in known.items() if v is not None}
        arg, out, aux = self._h.infer_shape(known)
        return ([tuple(s) for s in arg], [tuple(s) for s in out], [tuple(s) for s in aux])

    def infer_shape(self, *args: Any, **kwargs: Any) -> tuple:
        """As ``infer_shape_partial``, but ``(None, None, None)`` unless every shape is
        known (as MXNet)."""
        arg, out, aux = self.infer_shape_partial(*args, **kwargs)
        if any(not s or 0 in s for s in arg + out + aux):
            return (None, None, None)
        return (arg, out, aux)

    def infer_type(self, *args: Any, **kwargs: Any) -> tuple:
        """Dtypes from those given: ``(arg_types, out_types, aux_types)`` as numpy types."""
        known = dict(zip(self.list_arguments(), args))
        known.update(kwargs)
        known = {k: dtype_name(v) for k, v in known.items() if v is not None}
        arg, out, aux = self._h.infer_type(known)
        t = np.dtype
        return ([t(x).type for x in arg], [t(x).type for x in out], [t(x).type for x in aux])

    # ---- binding --------------------------------------------------------------------------

    def simple_bind(
        self,
        ctx: Context | None = None,
        grad_req: str | dict[str, str] = "write",
        type_dict: dict[str, Any] | None = None,
        mirror: str | None = None,
        **shapes: Any,
    ) -> Executor:
        """Binds with arrays allocated from the shapes given (and inferred). ``mirror``:
        recomputation during backward (a byte budget such as ``"800M"``, ``"auto"``,
        ``"cheap"`` or ``"off"``; ``None`` follows ``MXRS_BACKWARD_MIRROR``)."""
        from .executor import bind

        # As MXNet, keywords whose values are not shapes (tuples, lists) are ignored.
        shapes = {k: v for k, v in shapes.items() if isinstance(v, (tuple, list))}
        return bind(self, ctx, shapes=shapes, grad_req=grad_req, type_dict=type_dict, mirror=mirror)

    def bind(
        self,
        ctx: Context | None,
        args: dict[str, NDArray] | Sequence[NDArray],
        args_grad: dict[str, NDArray] | Sequence[NDArray] | None = None,
        grad_req: str | dict[str, str] = "write",
        aux_states: dict[str, NDArray] | Sequence[NDArray] | None = None,
        group2ctx: Any = None,
        shared_exec: Any = None,
        mirror: str | None = None,
    ) -> Executor:
        """Binds to the given argument arrays (a dict or a list in ``list_arguments`` order),
        gradient arrays and auxiliary states; ``mirror`` as in ``simple_bind``."""
        from .executor import bind

        return bind(
            self,
            ctx,
            args=args,
            args_grad=args_grad,
            grad_req=grad_req,
            aux_states=aux_states,
            mirror=mirror,
        )

    def eval(self, ctx: Context | None = None, **kwargs: NDArray) -> list[NDArray]:
        """Binds to ``kwargs`` and runs forward once; the outputs."""
        return self.bind(ctx or current_context(), kwargs, grad_req="null").forward()

    # ---- arithmetic -----------------------------------------------------------------------

    def _binary(self, other: Any, array_op: str, scalar_op: str, reflect: bool = False) -> Symbol:
        if isinstance(other, Symbol):
            a, b = (other, self) if reflect else (self, other)
            return _apply(array_op, [a, b], None, None)
        if isinstance(other, numbers.Number):
            return _apply(scalar_op, [self], {"scalar": float(other)}, None)
        raise TypeError(f"a Symbol and a {type(other).__name__} cannot be combined")

    def __add__(self, o: Any) -> Symbol:
        return self._binary(o, "elemwise_add", "_plus_scalar")

    __radd__ = __add__

    def __sub__(self, o: Any) -> Symbol:
        return self._binary(o, "elemwise_sub", "_minus_scalar")

    def __rsub__(self, o: Any) -> Symbol:
        return self._binary(o, "elemwise_sub", "_rminus_scalar", reflect=True)

    def __mul__(self, o: Any) -> Symbol:
        return self._binary(o, "elemwise_mul", "_mul_scalar")

    __rmul__ = __mul__

    def __truediv__(self, o: Any) -> Symbol:
        return self._binary(o, "elemwise_div", "_div_scalar")

    def __rtruediv__(self, o: Any) -> Symbol:
        return self._binary(o, "elemwise_div", "_rdiv_scalar", reflect=True)

    def __pow__(self, o: Any) -> Symbol:
        return self._binary(o, "_power", "_power_scalar")

    def __rpow__(self, o: Any) -> Symbol:
        return self._binary(o, "_power", "_rpower_scalar", reflect=True)

    def __mod__(self, o: Any) -> Symbol:
        return self._binary(o, "_mod", "_mod_scalar")

    def __neg__(self) -> Symbol:
        return self * -1.0

    def __eq__(self, o: object) -> Symbol:  # type: ignore[override]
        return self._binary(o, "_equal", "_equal_scalar")

    def __ne__(self, o: object) -> Symbol:  # type: ignore[override]
        return self._binary(o, "_not_equal", "_not_equal_scalar")

    def __hash__(self) -> int:
        return id(self)

    def __gt__(self, o: Any) -> Symbol:
        return self._binary(o, "_greater", "_greater_scalar")

    def __ge__(self, o: Any) -> Symbol:
        return self._binary(o, "_greater_equal", "_greater_equal_scalar")

    def __lt__(self, o: Any) -> Symbol:
        return self._binary(o, "_lesser", "_lesser_scalar")

    def __le__(self, o: Any) -> Symbol:
        return self._binary(o, "_lesser_equal", "_lesser_equal_scalar")

    def __bool__(self) -> bool:
        raise NotImplementedForSymbol(self.__bool__, "bool")

    def __abs__(self) -> Symbol:
        return _apply("abs", [self], None, None)

    def __reduce__(self) -> tuple:
        # Pickled as its JSON, as MXNet does.
        return (load_json, (self.tojson(),))

    def __copy__(self) -> Symbol:
        return _wrap(self._h)

    def __deepcopy__(self, memo: Any) -> Symbol:
        return load_json(self.tojson())


def Variable(
    name: str,
    attr: dict[str, str] | None = None,
    shape: Sequence[int] | None = None,
    lr_mult: float | None = None,
    wd_mult: float | None = None,
    dtype: Any = None,
    init: Any = None,
    stype: str | None = None,
    **kwargs: Any,
) -> Symbol:
    """A variable: an input or parameter of the graph, bound to an array by name."""
    if not isinstance(name, str):
        raise TypeError("a variable's name must be a string")
    from ..attribute import AttrScope, hidden_forms

    attrs = AttrScope.current.for_variable(attr)
    if shape is not None:
        attrs["__shape__"] = attr_str(tuple(shape))
    if lr_mult is not None:
        attrs.update(hidden_forms("lr_mult", lr_mult))
    if wd_mult is not None:
        attrs.update(hidden_forms("wd_mult", wd_mult))
    if dtype is not None:
        codes = {"float32": 0, "float64": 1, "uint8": 3, "int32": 4, "int64": 6}
        attrs["__dtype__"] = str(codes[dtype_name(dtype)])
    if init is not None:
        attrs["__init__"] = init if isinstance(init, str) else init.dumps()
    for k, v in kwargs.items():
        if not (k.startswith("__") and k.endswith("__")):
            raise ValueError(f"Variable: attribute {k!r} must be of the form __name__")
        attrs[k] = str(v)
    return _wrap(_native.Sym.var(name, list(attrs.items())))


var = Variable


def Group(symbols: Sequence[Symbol]) -> Symbol:
    """The outputs of several symbols as one symbol."""
    if not symbols or not all(isinstance(s, Symbol) for s in symbols):
        raise MXNetError("Group takes a non-empty list of symbols")
    return _wrap(_native.Sym.group([s._h for s in symbols]))


def load(fname: str) -> Symbol:
    """A symbol from a ``-symbol.json`` file (MXNet's or ours)."""
    return _wrap(_native.Sym.load(str(fname)))


def load_json(json_str: str) -> Symbol:
    """A symbol from MXNet's JSON text."""
    return _wrap(_native.Sym.from_json(json_str))
