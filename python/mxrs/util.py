"""``mx.util``: environment access and the switches of MXNet's numpy mode.

This runtime has MXNet 1.x's array semantics only: numpy mode (``mx.np``, zero-size and 0-d
shapes by ``set_np_shape``) is not built. Asking whether it is on answers False; turning it on
raises an ``MXNetError`` that says so, rather than running with other semantics than asked."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

from .base import MXNetError

__all__ = [
    "get_gpu_count",
    "getenv",
    "is_np_array",
    "is_np_shape",
    "np_array",
    "np_shape",
    "reset_np",
    "set_np",
    "set_np_shape",
    "setenv",
    "use_np",
    "use_np_array",
    "use_np_shape",
]


def getenv(name: str) -> str | None:
    """The environment variable ``name``, or None when unset."""
    return os.environ.get(name)


def setenv(name: str, value: str | None) -> None:
    """Sets (or, with None, unsets) the environment variable ``name``."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = str(value)


def get_gpu_count() -> int:
    """How many GPUs the runtime can use."""
    from . import _native

    return int(_native.num_gpus())


def _refuse(what: str) -> MXNetError:
    return MXNetError(
        f"{what}: numpy mode (mx.np semantics) is not available in this runtime, which has "
        "MXNet 1.x's NDArray semantics"
    )


def is_np_shape() -> bool:
    """Whether numpy's shape semantics are on (never, here)."""
    return False


def is_np_array() -> bool:
    """Whether numpy's array semantics are on (never, here)."""
    return False


def set_np_shape(active: bool) -> bool:
    """Turns numpy's shape semantics on or off; returns the previous state. Turning them on
    raises: they are not available."""
    if active:
        raise _refuse("set_np_shape(True)")
    return False


def set_np(shape: bool = True, array: bool = True, dtype: bool = False) -> None:
    """Turns numpy mode on (refused: not available) or, with both False, off."""
    if shape or array or dtype:
        raise _refuse("set_np")


def reset_np() -> None:
    """Turns numpy mode off (it is always off here)."""


class _NpScope:
    """``with np_shape(active):`` / ``with np_array(active):``: off is accepted, on refused."""

    def __init__(self, what: str, active: bool) -> None:
        self._what, self._active = what, active

    def __enter__(self) -> Self:
        if self._active:
            raise _refuse(self._what)
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return run


def np_shape(active: bool = True) -> _NpScope:
    """A scope (or decorator) with numpy's shape semantics on or off; on is refused."""
    return _NpScope("np_shape", active)


def np_array(active: bool = True) -> _NpScope:
    """A scope (or decorator) with numpy's array semantics on or off; on is refused."""
    return _NpScope("np_array", active)


def use_np_shape(func: Callable) -> Callable:
    """Runs ``func`` with numpy's shape semantics (refused when called: not available)."""
    return np_shape(True)(func)


def use_np_array(func: Callable) -> Callable:
    """Runs ``func`` with numpy's array semantics (refused when called: not available)."""
    return np_array(True)(func)


def use_np(func: Callable) -> Callable:
    """Runs ``func`` in numpy mode (refused when called: not available)."""
    return use_np_shape(use_np_array(func))
