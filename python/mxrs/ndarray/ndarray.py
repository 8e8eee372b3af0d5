"""``mx.nd.NDArray``: an asynchronous array. Ops on it return at once; the engine runs them
when their inputs are ready, and reading the values (``asnumpy``, ``asscalar``,
``wait_to_read``) waits for them and raises the error of a failed op."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _native
from ..base import MXNetError, attr_str, dtype_name
from ..context import Context, current_context

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "NDArray",
    "arange",
    "array",
    "concatenate",
    "empty",
    "full",
    "invoke",
    "ones",
    "ones_like",
    "waitall",
    "zeros",
    "zeros_like",
]

_SUPPORTED = ("float32", "float64", "int32", "int64", "uint8")

#: Python's ``slice``, under the name MXNet's indexing code gives it.
py_slice = slice


#: The array type: native, so that its arithmetic operators run without a Python frame; the
#: methods of ``_NDArrayMethods`` below are added to it.
NDArray = _native.NDArray


def invoke(
    op: str,
    inputs: Sequence[NDArray],
    attrs: dict | None = None,
    out: NDArray | Sequence[NDArray] | None = None,
    ctx: Context | None = None,
) -> NDArray | list[NDArray]:
    """Runs registered op ``op``: one output is returned as an array, several as a list.
    ``attrs`` values are written as MXNet writes them (``attr_str``); ``out`` receives the
    results; ``ctx`` places an op without inputs."""
    pairs = [(k, attr_str(v)) for k, v in (attrs or {}).items() if v is not None]
    handles = list(inputs)
    outs = None
    if out is not None:
        outs = [out] if isinstance(out, NDArray) else list(out)
    if handles:
        res = _native.invoke(op, handles, pairs, outs)
    else:
        c = ctx if ctx is not None else current_context()
        res = _native.invoke(op, handles, pairs, outs, c.device_type, c.device_id)
    if out is not None:
        return out
    return res[0] if len(res) == 1 else res


def _scalar_or_array(
    lhs: NDArray, rhs: Any, array_op: str, scalar_op: str, reflect: bool = False
) -> NDArray:
    # The operators' rule for what their native path does not take (numpy scalars and arrays,
    # other types): it calls this with the same arguments.
    if isinstance(rhs, NDArray):
        a, b = (rhs, lhs) if reflect else (lhs, rhs)
        return _native.binary(array_op, a, b)
    if isinstance(rhs, numbers.Number) and not isinstance(rhs, complex):
        return _native.scalar(scalar_op, lhs, float(rhs))
    if isinstance(rhs, np.ndarray):
        other = array(rhs, ctx=lhs.context, dtype=lhs.dtype)
        return _scalar_or_array(lhs, other, array_op, scalar_op, reflect)
    raise TypeError(f"an NDArray and a {type(rhs).__name__} cannot be combined")


class _NDArrayMethods:
    """An n-dimensional array on a device, computed asynchronously."""

    # numpy defers to our reflected operators (ndarray + NDArray gives an NDArray).
    __array_priority__ = 1000.0

    # ---- what it is -----------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape."""
        return tuple(self._shape)

    @property
    def dtype(self) -> type:
        """The element type, as a numpy type (``numpy.float32``, ...)."""
        return np.dtype(self._dtype).type

    @property
    def context(self) -> Context:
        """The device it lives on."""
        t, i = self._context
        return Context(t, i)

    ctx = context

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self._shape:
            n *= d
        return n

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self._shape)

    @property
    def stype(self) -> str:
        """Storage type: always ``default`` (dense)."""
        return "default"

    @property
    def writable(self) -> bool:
        """Whether the array may be written (always: no array here is read-only)."""
        return True

    def tostype(self, stype: str) -> NDArray:
        """A copy in storage type ``stype``: ``default`` (dense). The sparse storage types
        (``row_sparse``, ``csr``) are not available here and are refused."""
        if stype != "default":
            raise MXNetError(
                f"tostype: storage type {stype!r} is not available (only dense, 'default')"
            )
        return self.copy()

    @property
    def T(self) -> NDArray:
        """The transpose (axes reversed)."""
        return invoke("transpose", [self])

    @property
    def handle(self) -> Any:
        """The native array (the array itself: the type is native)."""
        return self

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d array")
        return self._shape[0]

    def __reduce__(self) -> tuple:
        # Pickled as its values and its device (an optimizer's saved state holds arrays).
        ctx = self.context
        return (_unpickle, (self.asnumpy(), ctx.device_type, ctx.device_id))

    def __repr__(self) -> str:
        shape = "x".join(str(d) for d in self.shape)
        return f"\n{self.asnumpy()!s}\n<NDArray {shape} @{self.context}>"

    def __bool__(self) -> bool:
        if self.size == 0:
            return False
        if self.size != 1:
            raise ValueError(
                "the truth value of an NDArray with more than one element is ambiguous"
            )
        return bool(self.asscalar())

    def __hash__(self) -> int:
        return id(self)

    # ---- reading and waiting --------------------------------------------------------------

    def asnumpy(self) -> np.ndarray:
        """The values as a new numpy array (waits for pending writes)."""
        raw = self._to_bytes()
        return np.frombuffer(raw, dtype=self._dtype).reshape(self.shape).copy()

    def asscalar(self) -> Any:
        """The one value of a one-element array."""
        if self.size != 1:
            raise ValueError(f"asscalar needs one element, the array has shape {self.shape}")
        return self.asnumpy().reshape(-1)[0]

    def wait_to_read(self) -> None:
        """Waits until every pending write of this array is done."""
        self._wait_to_read()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.asnumpy()
        return a if dtype is None else a.astype(dtype)

    def to_dlpack_for_read(self) -> Any:
        """A DLPack capsule viewing this array's memory (no copy), once its pending writes are
        done. The view shares the memory: later writes of the array show through it."""
        return _native.to_dlpack(self, False)

    def to_dlpack_for_write(self) -> Any:
        """As ``to_dlpack_for_read``, once pending reads are done too, for a consumer that
        writes the memory."""
        return _native.to_dlpack(self, True)

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """The DLPack protocol (``numpy.from_dlpack(x)``, ``torch.from_dlpack(x)``): a view of
        this array's memory, without a copy."""
        return _native.to_dlpack(self, False)

    def __dlpack_device__(self) -> tuple[int, int]:
        """DLPack's device of this array: (1, id) for the CPU, (2, id) for a GPU."""
        t, i = self._context
        return ({"cpu": 1, "gpu": 2, "cpu_pinned": 3}.get(t, 1), i)

    def tolist(self) -> list:
        """The values as nested lists."""
        return self.asnumpy().tolist()

    # ---- copies, views, conversions -------------------------------------------------------

    def astype(self, dtype: Any, copy: bool = True) -> NDArray:
        """The values converted to ``dtype`` (this array when it has it and ``copy`` is False)."""
        name = dtype_name(dtype)
        if not copy and name == self._dtype:
            return self
        return invoke("Cast", [self], {"dtype": name})

    def copy(self) -> NDArray:
        """A copy on the same device."""
        return self.copyto(self.context)

    def copyto(self, other: Context | NDArray) -> NDArray:
        """A copy on device ``other``, or the values written into array ``other``."""
        if isinstance(other, NDArray):
            if other._same_view(self):
                return other
            # As MXNet's copy, a destination of another dtype gets the values converted. A
            # source in the same memory (another row of one array) is copied as any other: the
            # copy op updates the shared var, and tolerates the overlap.
            src = self if other._dtype == self._dtype else self.astype(other._dtype)
            src._copy_into(other)
            return other
        c = Context(other)
        return self._copy_to(c.device_type, c.device_id)

    def as_in_context(self, context: Context) -> NDArray:
        """This array when it is on ``context``, else a copy there."""
        if self.context == context:
            return self
        return self.copyto(context)

    def detach(self) -> NDArray:
        """The same values outside any recorded graph."""
        return self._detach()

    def reshape(self, *shape: Any, **kwargs: Any) -> NDArray:
        """A view with a new shape, sharing memory; MXNet's codes 0, -1, -2, -3, -4 (see
        ``Reshape``) and ``reverse=True``."""
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = tuple(shape[0])
        if "shape" in kwargs:
            shape = tuple(kwargs.pop("shape"))
        return self._reshape(_resolve_shape(self.shape, shape, bool(kwargs.get("reverse"))))

    def reshape_like(self, other: NDArray) -> NDArray:
        """A view with ``other``'s shape."""
        return self.reshape(other.shape)

    def flatten(self, inplace: bool = False) -> NDArray:
        """The array as (first axis, everything else); ``inplace``: a view sharing memory."""
        if inplace:
            rest = 1
            for d in self.shape[1:]:
                rest *= d
            return self._reshape([self.shape[0] if self.shape else 1, rest])
        return invoke("Flatten", [self])

    def expand_dims(self, axis: int, inplace: bool = False) -> NDArray:
        """A new axis of length 1 at ``axis``; ``inplace``: a view sharing memory."""
        if inplace:
            n = self.ndim + 1
            if not -n <= axis < n:
                raise MXNetError(f"expand_dims: axis {axis} is out of range for {n} axes")
            shape = list(self.shape)
            shape.insert(axis % n, 1)
            return self._reshape(shape)
        return invoke("expand_dims", [self], {"axis": axis})

    def broadcast_to(self, shape: Sequence[int]) -> NDArray:
        """The array broadcast to ``shape``."""
        return invoke("broadcast_to", [self], {"shape": tuple(shape)})

    # ---- autograd -------------------------------------------------------------------------

    def attach_grad(self, grad_req: str = "write", stype: str | None = None) -> None:
        """Marks this array as one to differentiate by: ``grad`` receives its gradient."""
        self._attach_grad(grad_req)

    @property
    def grad(self) -> NDArray | None:
        """The gradient array ``attach_grad`` made, or None."""
        return self._grad

    def backward(
        self,
        out_grad: NDArray | None = None,
        retain_graph: bool = False,
        train_mode: bool = True,
    ) -> None:
        """Back-propagates from this array into the gradients of the marked arrays."""
        from .. import autograd

        autograd.backward(
            [self],
            None if out_grad is None else [out_grad],
            retain_graph=retain_graph,
            train_mode=train_mode,
        )

    # ---- arithmetic -----------------------------------------------------------------------

    # + - * / and their reflected forms are the native type's own.

    def __mod__(self, o: Any) -> NDArray:
        return _scalar_or_array(self, o, "broadcast_mod", "_mod_scalar")

    def __rmod__(self, o: Any) -> NDArray:
        return _scalar_or_array(self, o, "broadcast_mod", "_rmod_scalar", reflect=True)

    def __pow__(self, o: Any) -> NDArray:
        return _scalar_or_array(self, o, "broadcast_power", "_power_scalar")

    def __rpow__(self, o: Any) -> NDArray:
        return _scalar_or_array(self, o, "broadcast_power", "_rpower_scalar", reflect=True)

    def __neg__(self) -> NDArray:
        return invoke("negative", [self])

    def __pos__(self) -> NDArray:
        return self

    def __abs__(self) -> NDArray:
        return invoke("abs", [self])

    def __eq__(self, o: object) -> NDArray:  # type: ignore[override]
        return _scalar_or_array(self, o, "broadcast_equal", "_equal_scalar")

    def __ne__(self, o: object) -> NDArray:  # type: ignore[override]
        return _scalar_or_array(self, o, "broadcast_not_equal", "_not_equal_scalar")

    def __gt__(self, o: Any) -> NDArray:
        return _scalar_or_array(self, o, "broadcast_greater", "_greater_scalar")

    def __ge__(self, o: Any) -> NDArray:
        return _scalar_or_array(self, o, "broadcast_greater_equal", "_greater_equal_scalar")

    def __lt__(self, o: Any) -> NDArray:
        return _scalar_or_array(self, o, "broadcast_lesser", "_lesser_scalar")

    def __le__(self, o: Any) -> NDArray:
        return _scalar_or_array(self, o, "broadcast_lesser_equal", "_lesser_equal_scalar")

    def _inplace(self, o: Any, array_op: str, scalar_op: str) -> NDArray:
        if isinstance(o, NDArray):
            invoke(array_op, [self, o], out=self)
        elif isinstance(o, numbers.Number):
            invoke(scalar_op, [self], {"scalar": o}, out=self)
        else:
            raise TypeError(f"an NDArray and a {type(o).__name__} cannot be combined")
        return self

    def __iadd__(self, o: Any) -> Self:
        return self._inplace(o, "broadcast_add", "_plus_scalar")

    def __isub__(self, o: Any) -> Self:
        return self._inplace(o, "broadcast_sub", "_minus_scalar")

    def __imul__(self, o: Any) -> Self:
        return self._inplace(o, "broadcast_mul", "_mul_scalar")

    def __itruediv__(self, o: Any) -> Self:
        return self._inplace(o, "broadcast_div", "_div_scalar")

    __idiv__ = __itruediv__

    def __imod__(self, o: Any) -> Self:
        return self._inplace(o, "broadcast_mod", "_mod_scalar")

    # ---- indexing -------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> NDArray:
        from .indexing import get_item

        return get_item(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        from .indexing import set_item

        set_item(self, key, value)

    def slice_assign(self, rhs: Any, begin: Any, end: Any, step: Any) -> NDArray:
        """Writes ``rhs`` into the region ``slice(begin, end, step)`` selects, in place (one
        engine op); returns this array."""
        from .indexing import slice_assign

        return slice_assign(self, rhs, begin, end, step)

    def slice_assign_scalar(self, value: float, begin: Any, end: Any, step: Any) -> NDArray:
        """Sets the region ``slice(begin, end, step)`` selects to ``value``, in place; returns
        this array."""
        from .indexing import slice_assign

        return slice_assign(self, float(value), begin, end, step)

    # ---- common ops as methods (MXNet's fluent methods) -----------------------------------

    def _fluent(self, op: str, **attrs: Any) -> NDArray:
        return invoke(op, [self], attrs)

    def sum(self, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> NDArray:
        """Sum over ``axis`` (None: all)."""
        return self._fluent("sum", axis=axis, keepdims=keepdims, exclude=exclude)

    def mean(self, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> NDArray:
        """Mean over ``axis`` (None: all)."""
        return self._fluent("mean", axis=axis, keepdims=keepdims, exclude=exclude)

    def max(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        """Maximum over ``axis`` (None: all)."""
        return self._fluent("max", axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        """Minimum over ``axis`` (None: all)."""
        return self._fluent("min", axis=axis, keepdims=keepdims)

    def prod(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        """Product over ``axis`` (None: all)."""
        return self._fluent("prod", axis=axis, keepdims=keepdims)

    def argmax(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        """Index of the maximum along ``axis``."""
        return self._fluent("argmax", axis=axis, keepdims=keepdims)

    def argmin(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        """Index of the minimum along ``axis``."""
        return self._fluent("argmin", axis=axis, keepdims=keepdims)

    def norm(self, ord: int = 2, axis: Any = None, keepdims: bool = False) -> NDArray:
        """The ``ord``-norm over ``axis`` (None: all)."""
        return self._fluent("norm", ord=ord, axis=axis, keepdims=keepdims)

    def transpose(self, axes: Any = None) -> NDArray:
        """Axes permuted (None: reversed)."""
        return self._fluent("transpose", axes=axes)

    def swapaxes(self, dim1: int = 0, dim2: int = 0) -> NDArray:
        """Two axes swapped."""
        return self._fluent("SwapAxis", dim1=dim1, dim2=dim2)

    def clip(self, a_min: float, a_max: float) -> NDArray:
        """Values clipped to [a_min, a_max]."""
        return self._fluent("clip", a_min=a_min, a_max=a_max)

    def exp(self) -> NDArray:
        """e to each element."""
        return self._fluent("exp")

    def log(self) -> NDArray:
        """Natural logarithm of each element."""
        return self._fluent("log")

    def sqrt(self) -> NDArray:
        """Square root of each element."""
        return self._fluent("sqrt")

    def square(self) -> NDArray:
        """Each element squared."""
        return self._fluent("square")

    def relu(self) -> NDArray:
        """max(x, 0)."""
        return self._fluent("relu")

    def sigmoid(self) -> NDArray:
        """1 / (1 + exp(-x))."""
        return self._fluent("sigmoid")

    def tanh(self) -> NDArray:
        """Hyperbolic tangent."""
        return self._fluent("tanh")

    def softmax(self, axis: int = -1) -> NDArray:
        """Softmax along ``axis``."""
        return self._fluent("softmax", axis=axis)

    def log_softmax(self, axis: int = -1) -> NDArray:
        """Log-softmax along ``axis``."""
        return self._fluent("log_softmax", axis=axis)

    def squeeze(self, axis: Any = None, inplace: bool = False) -> NDArray:
        """Axes of length 1 removed (``axis``: those only); ``inplace``: a view sharing memory."""
        if inplace:
            n = self.ndim
            axes = range(n) if axis is None else ([axis] if isinstance(axis, int) else axis)
            drop = {a % n for a in axes if axis is not None or self.shape[a] == 1}
            if any(self.shape[a] != 1 for a in drop):
                raise MXNetError(f"squeeze: axes {sorted(drop)} of {self.shape} are not all 1")
            shape = [d for a, d in enumerate(self.shape) if a not in drop]
            return self._reshape(shape or [1])
        return self._fluent("squeeze", axis=axis)

    def tile(self, reps: Sequence[int]) -> NDArray:
        """Copies along each axis."""
        return self._fluent("tile", reps=tuple(reps))

    def one_hot(self, depth: int, on_value: float = 1.0, off_value: float = 0.0) -> NDArray:
        """One-hot rows of length ``depth``."""
        return self._fluent("one_hot", depth=depth, on_value=on_value, off_value=off_value)

    def zeros_like(self) -> NDArray:
        """Zeros of this shape, dtype and device."""
        return zeros_like(self)

    def ones_like(self) -> NDArray:
        """Ones of this shape, dtype and device."""
        return ones_like(self)


def _graft(methods: type, onto: type) -> None:
    """Gives the native type ``onto`` the methods, properties and class attributes of
    ``methods``, the Python half of the array type."""
    skip = {"__dict__", "__weakref__", "__module__", "__qualname__", "__doc__"}
    for name, value in vars(methods).items():
        if name not in skip:
            setattr(onto, name, value)
    onto.__doc__ = methods.__doc__
    # Python 2's names of true division, for scripts that still call them.
    onto.__div__ = onto.__truediv__
    onto.__rdiv__ = onto.__rtruediv__


_graft(_NDArrayMethods, NDArray)


def _resolve_shape(old: tuple[int, ...], new: Sequence[int], reverse: bool = False) -> list[int]:
    """MXNet's reshape codes: 0 copies the input's dimension, -1 infers one from the rest, -2
    copies every remaining dimension, -3 merges the next two input dimensions, -4 splits one
    into the next two values (one of them may be -1). ``reverse`` reads both from the right."""
    if reverse:
        return _resolve_shape(old[::-1], list(new)[::-1])[::-1]
    out: list[int] = []
    src, i, codes = 0, 0, list(new)
    infer_at = -1

    def bad(why: str) -> MXNetError:
        return MXNetError(f"reshape: shape {tuple(new)} does not fit an array of {old}: {why}")

    while i < len(codes):
        d = int(codes[i])
        if d == 0:
            if src >= len(old):
                raise bad("a 0 past the input's axes")
            out.append(old[src])
            src += 1
        elif d == -1:
            if infer_at >= 0:
                raise bad("more than one -1")
            infer_at = len(out)
            out.append(-1)
            src += 1
        elif d == -2:
            out.extend(old[src:])
            src = len(old)
        elif d == -3:
            if src + 1 >= len(old):
                raise bad("a -3 needs two input axes")
            out.append(old[src] * old[src + 1])
            src += 2
        elif d == -4:
            if i + 2 >= len(codes) or src >= len(old):
                raise bad("a -4 needs an input axis and two values after it")
            a, b = int(codes[i + 1]), int(codes[i + 2])
            whole = old[src]
            if a == -1 and b > 0:
                a = whole // b
            elif b == -1 and a > 0:
                b = whole // a
            if a * b != whole:
                raise bad(f"{whole} does not split into {a} x {b}")
            out += [a, b]
            src += 1
            i += 2
        elif d > 0:
            out.append(d)
            src += 1
        else:
            raise bad(f"code {d} is not one of 0, -1, -2, -3, -4")
        i += 1
    total = 1
    for d in old:
        total *= d
    if infer_at >= 0:
        known = 1
        for k, d in enumerate(out):
            if k != infer_at:
                known *= d
        if known == 0 or total % known:
            raise bad("the -1 cannot be inferred")
        out[infer_at] = total // known
    size = 1
    for d in out:
        size *= d
    if size != total:
        raise bad(f"{size} elements for {total}")
    return out


# ---- making arrays ------------------------------------------------------------------------


def _ctx(ctx: Context | None) -> Context:
    return current_context() if ctx is None else Context(ctx)


def _unpickle(values: np.ndarray, device_type: str, device_id: int) -> NDArray:
    return array(values, ctx=Context(device_type, device_id), dtype=values.dtype)


def array(source: Any, ctx: Context | None = None, dtype: Any = None) -> NDArray:
    """An array with the values of ``source`` (a numpy array, a list, a number or an NDArray).
    The dtype is ``dtype``, else the source's when it is an NDArray, else float32 (MXNet's
    rule: a numpy array of another dtype is converted unless ``dtype`` says otherwise)."""
    if isinstance(source, NDArray):
        out = source.as_in_context(_ctx(ctx)) if ctx is not None else source.copy()
        return out.astype(dtype) if dtype is not None else out
    name = dtype_name(dtype) if dtype is not None else "float32"
    if name not in _SUPPORTED:
        raise MXNetError(f"dtype {name} is not supported ({', '.join(_SUPPORTED)})")
    if np.iscomplexobj(source):
        raise TypeError("array: complex values have no NDArray dtype (give their real part)")
    # ``ascontiguousarray`` would make a 0-d source 1-d; MXNet keeps its shape ``()``.
    a = np.asarray(source, dtype=name)
    a = np.ascontiguousarray(a) if a.ndim else a.reshape(())
    c = _ctx(ctx)
    return _native.from_bytes(a.tobytes(), list(a.shape), name, c.device_type, c.device_id)


def empty(shape: int | Sequence[int], ctx: Context | None = None, dtype: Any = None) -> NDArray:
    """An array whose values are not set."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(int(d) < 0 for d in shape):
        raise MXNetError(f"empty: shape {shape} has a negative dimension")
    c = _ctx(ctx)
    return _native.empty(list(shape), dtype_name(dtype), c.device_type, c.device_id)


def full(
    shape: int | Sequence[int],
    val: float,
    ctx: Context | None = None,
    dtype: Any = None,
    out: NDArray | None = None,
) -> NDArray:
    """An array with every element ``val``."""
    a = out if out is not None else empty(shape, ctx, dtype)
    a._fill(float(val))
    return a


def zeros(
    shape: int | Sequence[int], ctx: Context | None = None, dtype: Any = None, **kwargs: Any
) -> NDArray:
    """An array of zeros."""
    return full(shape, 0.0, ctx, dtype)


def ones(
    shape: int | Sequence[int], ctx: Context | None = None, dtype: Any = None, **kwargs: Any
) -> NDArray:
    """An array of ones."""
    return full(shape, 1.0, ctx, dtype)


def zeros_like(other: NDArray) -> NDArray:
    """Zeros of ``other``'s shape, dtype and device."""
    return full(other.shape, 0.0, other.context, other._dtype)


def ones_like(other: NDArray) -> NDArray:
    """Ones of ``other``'s shape, dtype and device."""
    return full(other.shape, 1.0, other.context, other._dtype)


def arange(
    start: float,
    stop: float | None = None,
    step: float = 1.0,
    repeat: int = 1,
    infer_range: bool = False,
    ctx: Context | None = None,
    dtype: Any = np.float32,
) -> NDArray:
    """Evenly spaced values in [start, stop) (``arange(n)``: 0 to n-1), each ``repeat`` times."""
    return invoke(
        "_arange",
        [],
        {"start": start, "stop": stop, "step": step, "repeat": repeat, "dtype": dtype_name(dtype)},
        ctx=_ctx(ctx),
    )


def concatenate(arrays: Sequence[NDArray], axis: int = 0, always_copy: bool = True) -> NDArray:
    """The arrays joined along ``axis``."""
    return invoke("Concat", list(arrays), {"dim": axis, "num_args": len(arrays)})


def save(fname: str, data: NDArray | Sequence[NDArray] | dict[str, NDArray]) -> None:
    """Writes arrays to ``fname`` in MXNet's format (``.params`` and ``.nd`` files): a dict keeps
    the names, a list or one array does not. The file is written whole or not at all."""
    if isinstance(data, NDArray):
        data = [data]
    if isinstance(data, dict):
        names = list(data.keys())
        if not all(isinstance(k, str) for k in names):
            raise TypeError("save: the dict's keys must be strings")
        _native.save(str(fname), [v for v in data.values()], names)
    else:
        _native.save(str(fname), [v for v in data])


def load(fname: str, ctx: Context | None = None) -> list[NDArray] | dict[str, NDArray]:
    """Reads a file MXNet's ``mx.nd.save`` wrote (or ``save`` here): a dict when it has names,
    else a list."""
    c = _ctx(ctx)
    arrays, names = _native.load(str(fname), c.device_type, c.device_id)
    if names:
        return dict(zip(names, arrays))
    return list(arrays)


def to_dlpack_for_read(data: NDArray) -> Any:
    """``data.to_dlpack_for_read()``."""
    return data.to_dlpack_for_read()


def to_dlpack_for_write(data: NDArray) -> Any:
    """``data.to_dlpack_for_write()``."""
    return data.to_dlpack_for_write()


def from_dlpack(dlpack: Any) -> NDArray:
    """An array with the values of a DLPack capsule or of an object with ``__dlpack__`` (a
    numpy array, a PyTorch tensor), in host memory. The values are copied in: the runtime's
    arrays live in its own pooled storage."""
    capsule = dlpack.__dlpack__() if hasattr(dlpack, "__dlpack__") else dlpack
    return _native.from_dlpack(capsule)


def waitall() -> None:
    """Waits until every pushed op has run; raises the first failure since the last wait."""
    _native.waitall()
