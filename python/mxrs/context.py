"""Devices: ``mx.cpu()``, ``mx.gpu(i)``, ``mx.Context`` and the current default device."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from typing_extensions import Self


__all__ = ["Context", "cpu", "cpu_pinned", "current_context", "gpu", "num_gpus"]

_DEVTYPES = {1: "cpu", 2: "gpu", 3: "cpu_pinned", 5: "cpu_shared"}
_DEVIDS = {v: k for k, v in _DEVTYPES.items()}


class Context:
    """A device: type (``cpu``, ``gpu``, ``cpu_pinned``) and id. Used as ``with mx.gpu(0):``
    it becomes the default device of arrays made inside the block (per thread, as in MXNet)."""

    _local = threading.local()

    #: MXNet's device codes: by code and by name.
    devtype2str: ClassVar[dict[int, str]] = dict(_DEVTYPES)
    devstr2type: ClassVar[dict[str, int]] = dict(_DEVIDS)

    def __init__(self, device_type: str | Context, device_id: int = 0) -> None:
        if isinstance(device_type, Context):
            self._typeid = _DEVIDS[device_type.device_type]
            self.device_id = device_type.device_id
            self._old: list = []
            return
        if device_type not in _DEVIDS:
            raise ValueError(f"unknown device type {device_type!r} (cpu, gpu, cpu_pinned)")
        self._typeid = _DEVIDS[device_type]
        self.device_id = int(device_id)
        self._old = []

    @property
    def device_type(self) -> str:
        """The device's kind: ``cpu``, ``gpu`` or ``cpu_pinned``."""
        return _DEVTYPES[self._typeid]

    def empty_cache(self) -> None:
        """Hands the memory the device's pool keeps cached back to the device, once every
        pushed op has run."""
        from . import _native

        _native.empty_cache(self.device_type, self.device_id)

    @property
    def device_typeid(self) -> int:
        """MXNet's number for the device type (1: cpu, 2: gpu, 3: cpu_pinned)."""
        return _DEVIDS[self.device_type]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Context)
            and self.device_type == other.device_type
            and self.device_id == other.device_id
        )

    def __hash__(self) -> int:
        return hash((self.device_type, self.device_id))

    def __repr__(self) -> str:
        return f"{self.device_type}({self.device_id})"

    __str__ = __repr__

    def __enter__(self) -> Self:
        if not hasattr(self, "_old"):
            self._old = []
        self._old.append(getattr(Context._local, "value", None))
        Context._local.value = self
        return self

    def __exit__(self, *exc: object) -> None:
        Context._local.value = self._old.pop()

    @staticmethod
    def default_ctx() -> Context:
        """The current default device."""
        return current_context()


def cpu(device_id: int = 0) -> Context:
    """The CPU."""
    return Context("cpu", device_id)


def cpu_pinned(device_id: int = 0) -> Context:
    """Page-locked host memory (fast copies to and from GPUs)."""
    return Context("cpu_pinned", device_id)


def gpu(device_id: int = 0) -> Context:
    """GPU ``device_id``."""
    return Context("gpu", device_id)


def current_context() -> Context:
    """The default device of this thread: the innermost ``with ctx:`` block's, else the CPU."""
    value: Context | None = getattr(Context._local, "value", None)
    return value if value is not None else Context("cpu", 0)


def num_gpus() -> int:
    """How many GPUs the runtime can use (0 in a build without the GPU back end)."""
    from . import _native

    return int(_native.num_gpus())
