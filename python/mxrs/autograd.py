"""``mx.autograd``: record ops on arrays with a gradient attached, then differentiate.

    x = mx.nd.array([1, 2, 3]); x.attach_grad()
    with mx.autograd.record():
        y = (x * x).sum()
    y.backward()            # x.grad is 2 * x

Recording and training mode are per thread, as in MXNet."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import _native
from .ndarray.ndarray import NDArray

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "backward",
    "grad",
    "is_recording",
    "is_training",
    "mark_variables",
    "pause",
    "predict_mode",
    "record",
    "set_recording",
    "set_training",
    "train_mode",
]


class _Scope:
    """Sets recording and training mode on entry and restores them on exit."""

    def __init__(self, recording: bool | None, training: bool | None) -> None:
        self._want = (recording, training)
        self._old = (False, False)

    def __enter__(self) -> Self:
        rec, train = self._want
        old_rec = _native.set_recording(rec) if rec is not None else _native.is_recording()
        old_train = _native.set_training(train) if train is not None else _native.is_training()
        self._old = (old_rec, old_train)
        return self

    def __exit__(self, *exc: object) -> None:
        _native.set_recording(self._old[0])
        _native.set_training(self._old[1])


def record(train_mode: bool = True) -> _Scope:
    """A scope that records ops for differentiation, in training mode unless asked not to."""
    return _Scope(True, train_mode)


def pause(train_mode: bool = False) -> _Scope:
    """A scope that does not record (inside ``record``), in inference mode unless asked."""
    return _Scope(False, train_mode)


def train_mode() -> _Scope:
    """A scope in training mode (Dropout drops, BatchNorm uses batch statistics)."""
    return _Scope(None, True)


def predict_mode() -> _Scope:
    """A scope in inference mode."""
    return _Scope(None, False)


def is_recording() -> bool:
    """Whether this thread records."""
    return _native.is_recording()


def is_training() -> bool:
    """Whether this thread runs ops in training mode."""
    return _native.is_training()


def set_recording(is_recording: bool) -> bool:
    """Turns recording on or off; returns the previous setting."""
    return _native.set_recording(bool(is_recording))


def set_training(train_mode: bool) -> bool:
    """Turns training mode on or off; returns the previous setting."""
    return _native.set_training(bool(train_mode))


def _list(x: NDArray | Sequence[NDArray] | None) -> list[NDArray] | None:
    if x is None:
        return None
    return [x] if isinstance(x, NDArray) else list(x)


def backward(
    heads: NDArray | Sequence[NDArray],
    head_grads: NDArray | Sequence[NDArray | None] | None = None,
    retain_graph: bool = False,
    train_mode: bool = True,
) -> None:
    """Back-propagates from ``heads`` (seeded with ``head_grads``, ones by default) into the
    gradient arrays of the arrays marked with ``attach_grad``."""
    hs = _list(heads) or []
    gs = _list(head_grads)
    if gs is not None and any(g is None for g in gs):
        gs = [g if g is not None else h.ones_like() for h, g in zip(hs, gs)]
    _native.backward(list(hs), None if gs is None else list(gs))


def grad(
    heads: NDArray | Sequence[NDArray],
    variables: NDArray | Sequence[NDArray],
    head_grads: NDArray | Sequence[NDArray] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    train_mode: bool = True,
) -> list[NDArray]:
    """The gradients of ``heads`` with respect to ``variables``, as new arrays."""
    hs, vs, gs = _list(heads) or [], _list(variables) or [], _list(head_grads)
    res = _native.grad(list(hs), list(vs), None if gs is None else list(gs))
    return list(res)


def mark_variables(
    variables: NDArray | Sequence[NDArray],
    gradients: NDArray | Sequence[NDArray],
    grad_reqs: str | Sequence[str] = "write",
) -> None:
    """Marks ``variables`` for differentiation (as ``attach_grad``), their gradients then
    written into ``gradients``' memory."""
    vs, gs = _list(variables) or [], _list(gradients) or []
    reqs = [grad_reqs] * len(vs) if isinstance(grad_reqs, str) else list(grad_reqs)
    if not len(vs) == len(gs) == len(reqs):
        raise ValueError("mark_variables: variables, gradients and grad_reqs differ in length")
    for v, g, r in zip(vs, gs, reqs):
        v._attach_grad(r, g)
