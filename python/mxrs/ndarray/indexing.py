"""``NDArray.__getitem__`` and ``__setitem__`` with MXNet's (numpy's basic) rules: integers,
slices with steps, ``None``, ``Ellipsis`` and NDArray indices.

Reading: an integer or a step-1 slice on the first axis alone is a view sharing memory (as in
MXNet); anything else is the ``slice`` op, then a reshape that drops the axes indexed by an
integer and adds those given ``None``; an NDArray index takes rows (``take``), a tuple of
NDArrays gathers elements (``gather_nd``). Writing: into a first-axis view, by a copy or a fill;
elsewhere with integers and slices, by a strided region write on the engine; with array indices,
through numpy (read back, changed and written whole)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base import MXNetError
from .ndarray import NDArray, array, invoke


def _expand(key: Any, ndim: int) -> list[Any]:
    items = list(key) if isinstance(key, tuple) else [key]
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise MXNetError("an index can only have one Ellipsis")
    used = sum(1 for k in items if k is not None and k is not Ellipsis)
    if used > ndim:
        raise MXNetError(f"too many indices ({used}) for an array of {ndim} dimensions")
    if Ellipsis in items:
        i = items.index(Ellipsis)
        items[i : i + 1] = [slice(None)] * (ndim - used)
    else:
        items += [slice(None)] * (ndim - used)
    return items


def _first_axis_view(x: NDArray, key: Any) -> NDArray | None:
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool) and x.ndim >= 1:
        n = x.shape[0]
        i = int(key) + n if key < 0 else int(key)
        if not 0 <= i < n:
            raise IndexError(f"index {key} is out of bounds for axis 0 of size {n}")
        return x._at(i)
    if isinstance(key, slice) and key.step in (None, 1) and x.ndim >= 1:
        start, stop, _ = key.indices(x.shape[0])
        return x._slice(start, max(start, stop))
    return None


def _plan(x: NDArray, items: list[Any]) -> tuple[list, list, list, list[int]]:
    begin, end, step, shape = [], [], [], []
    axis = 0
    for k in items:
        if k is None:
            shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(k, slice):
            s, e, st = k.indices(n)
            begin.append(s)
            end.append(e if e >= 0 else None)
            step.append(st)
            shape.append(len(range(s, e, st)))
        elif isinstance(k, (int, np.integer)):
            i = int(k) + n if k < 0 else int(k)
            if not 0 <= i < n:
                raise IndexError(f"index {k} is out of bounds for axis {axis} of size {n}")
            begin.append(i)
            end.append(i + 1)
            step.append(1)
        else:
            raise MXNetError(f"index {k!r} of type {type(k).__name__} is not supported")
        axis += 1
    return begin, end, step, shape


def get_item(x: NDArray, key: Any) -> NDArray:
    """``x[key]``."""
    if isinstance(key, (list, np.ndarray)):
        key = array(key, ctx=x.context, dtype="int64")
    if isinstance(key, NDArray):
        return invoke("take", [x, key], {"axis": 0, "mode": "clip"})
    if isinstance(key, tuple) and key and all(isinstance(k, NDArray) for k in key):
        idx = invoke("stack", list(key), {"axis": 0, "num_args": len(key)})
        return invoke("gather_nd", [x, idx])
    view = _first_axis_view(x, key)
    if view is not None:
        return view
    begin, end, step, shape = _plan(x, _expand(key, x.ndim))
    out = invoke("slice", [x], {"begin": tuple(begin), "end": tuple(end), "step": tuple(step)})
    # MXNet 1.x has no 0-d arrays: an element picked by integers alone has shape (1,).
    shape = shape or [1]
    return out.reshape(shape) if tuple(shape) != out.shape else out


def _spans(x: NDArray, items: list[Any]) -> tuple[list[tuple[int, int, int]], list[int]]:
    """The region a basic key selects, per axis as (first index, step, count), and the shape
    numpy gives the selection (axes indexed by an integer dropped, ``None`` axes added)."""
    spans, shape = [], []
    axis = 0
    for k in items:
        if k is None:
            shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(k, slice):
            s, e, st = k.indices(n)
            count = len(range(s, e, st))
            spans.append((s if count else 0, st, count))
            shape.append(count)
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            i = int(k) + n if k < 0 else int(k)
            if not 0 <= i < n:
                raise IndexError(f"index {k} is out of bounds for axis {axis} of size {n}")
            spans.append((i, 1, 1))
        else:
            raise MXNetError(f"index {k!r} of type {type(k).__name__} is not supported")
        axis += 1
    return spans, shape


def _value_of_shape(x: NDArray, value: Any, shape: list[int]) -> NDArray:
    """``value`` as an array of ``x``'s dtype and device broadcast to ``shape`` (numpy's rule:
    trailing axes line up; a one-element value fills any shape)."""
    if not isinstance(value, NDArray):
        a = np.asarray(value)
        if np.iscomplexobj(a):
            raise TypeError("complex values cannot be written into an NDArray")
        if a.size == int(np.prod(shape)):
            a = a.reshape(shape)
        return array(np.broadcast_to(a, shape), ctx=x.context, dtype=x._dtype)
    v = value if value._dtype == x._dtype else value.astype(x._dtype)
    want = 1
    for d in shape:
        want *= d
    if v.size == want:
        return v.reshape(shape) if v.shape != tuple(shape) else v
    if v.ndim < len(shape):
        v = v.reshape((1,) * (len(shape) - v.ndim) + v.shape)
    return v.broadcast_to(tuple(shape))


def set_item(x: NDArray, key: Any, value: Any) -> None:
    """``x[key] = value``: every write is an op on the engine that writes only the selected
    elements (a copy into a first-axis view, or a strided region write), ordered by ``x``'s
    var like any other write."""
    view = _first_axis_view(x, key) if not isinstance(key, tuple) or key == () else None
    if key == slice(None) or key is Ellipsis or key == ():
        view = x
    if view is not None:
        if isinstance(value, (int, float, np.number, bool)) and not isinstance(value, complex):
            view._fill(float(value))
        else:
            _value_of_shape(x, value, list(view.shape)).copyto(view)
        return
    advanced = isinstance(key, (NDArray, list, np.ndarray)) or (
        isinstance(key, tuple) and any(isinstance(k, (NDArray, list, np.ndarray)) for k in key)
    )
    if advanced:
        # Indices given as arrays: written through numpy and copied back whole.
        whole = x.asnumpy()
        k = tuple(_np_key(i) for i in key) if isinstance(key, tuple) else _np_key(key)
        whole[k] = value.asnumpy() if isinstance(value, NDArray) else value
        array(whole, ctx=x.context, dtype=x._dtype).copyto(x)
        return
    spans, shape = _spans(x, _expand(key, x.ndim))
    if isinstance(value, (int, float, np.number, bool)) and not isinstance(value, complex):
        x._assign_region(spans, float(value))
        return
    v = _value_of_shape(x, value, shape)
    v = v.reshape([c for _, _, c in spans]) if spans else v
    if v._shares_memory(x):
        v = v.copy()
    x._assign_region(spans, v)


def _np_key(k: Any) -> Any:
    return k.asnumpy().astype(np.int64) if isinstance(k, NDArray) else k


def _region_spans(x: NDArray, begin: Any, end: Any, step: Any = ()) -> list[tuple[int, int, int]]:
    """The region MXNet's ``slice`` attributes select (per axis from the first; None, or an
    axis not given, is the whole axis), as spans ``(first, step, count)``."""
    begin, end = tuple(begin), tuple(end)
    step = tuple(step or ())
    spans = []
    for axis, n in enumerate(x.shape):
        b = begin[axis] if axis < len(begin) else None
        e = end[axis] if axis < len(end) else None
        s = step[axis] if axis < len(step) else None
        start, stop, stride = slice(b, e, s).indices(n)
        count = len(range(start, stop, stride))
        spans.append((start if count else 0, stride, count))
    return spans


def slice_assign(x: NDArray, rhs: Any, begin: Any, end: Any, step: Any = ()) -> NDArray:
    """Writes ``rhs`` into the region of ``x`` the slice selects, in place; returns ``x``."""
    spans = _region_spans(x, begin, end, step)
    if isinstance(rhs, (int, float, np.number, bool)) and not isinstance(rhs, complex):
        x._assign_region(spans, float(rhs))
        return x
    v = _value_of_shape(x, rhs, [c for _, _, c in spans])
    if v._shares_memory(x):
        v = v.copy()
    x._assign_region(spans, v)
    return x


def internal_slice_assign(
    lhs: NDArray,
    rhs: NDArray,
    begin: Any = (),
    end: Any = (),
    step: Any = (),
    out: Any = None,
    **_: Any,
) -> NDArray:
    """``_slice_assign`` (``_crop_assign``): ``lhs`` with ``rhs`` in the slice's region, written
    into ``out`` (``lhs`` itself when ``out`` is ``lhs``; a copy when not given)."""
    target = out if out is not None else lhs.copy()
    if target is not lhs and not target._same_view(lhs):
        lhs.copyto(target)
    return slice_assign(target, rhs, begin, end, step)


def internal_slice_assign_scalar(
    data: NDArray,
    scalar: float = 0.0,
    begin: Any = (),
    end: Any = (),
    step: Any = (),
    out: Any = None,
    **_: Any,
) -> NDArray:
    """``_slice_assign_scalar`` (``_crop_assign_scalar``): ``data`` with ``scalar`` in the
    slice's region, written into ``out`` as ``internal_slice_assign`` does."""
    target = out if out is not None else data.copy()
    if target is not data and not target._same_view(data):
        data.copyto(target)
    return slice_assign(target, float(scalar), begin, end, step)
