"""``mx.kv``: key-value stores for data-parallel training, as MXNet 1.x's ``mx.kv``.

    kv = mx.kv.create("local")
    kv.init(3, mx.nd.ones((2, 3)))
    kv.push(3, [mx.nd.ones((2, 3)) * 4, mx.nd.ones((2, 3))])   # summed
    out = mx.nd.zeros((2, 3))
    kv.pull(3, out=out)                                        # 5.0 everywhere

A push sums the values given for a key (one per device) and updates the stored value from the
sum: with the updater (``set_optimizer``, ``set_updater``) or, without one, by replacing it. Calls
return at once; the runtime's engine orders them, so a pull sees every push before it.
``dist_sync`` and ``dist_device_sync`` sum across processes over MPI; with ``dist_async`` rank 0
applies each process's push as it arrives and a pull fetches rank 0's value as it is then
(``staleness`` tells how late the gradients were). They need the package built with the ``mpi``
feature and a launch under ``mpiexec``."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable

from . import _native
from . import optimizer as opt_mod
from .base import MXNetError
from .ndarray.ndarray import NDArray

__all__ = ["KVStore", "create"]


def _pairs(key: Any, value: Any) -> list[tuple[Any, list[NDArray]]]:
    """``(key, [arrays])`` pairs from MXNet's call forms: one key with an array or a list of
    arrays (one per device), or a list of keys with one such value each."""
    if isinstance(key, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(key):
            raise ValueError(f"{len(key)} keys need as many values")
        return [pair for k, v in zip(key, value) for pair in _pairs(k, v)]
    if isinstance(value, NDArray):
        return [(key, [value])]
    values = list(value)
    if not values or not all(isinstance(v, NDArray) for v in values):
        raise ValueError(f"key {key!r}: give an NDArray or a list of NDArrays")
    return [(key, values)]


class KVStore:
    """A key-value store; make one with :func:`create`."""

    #: The capability :meth:`is_capable` names for running an optimizer in the store.
    OPTIMIZER = "optimizer"

    def __init__(self, kind: str = "local") -> None:
        self._kv = _native.KVStore(kind)
        self._type = kind
        self._updater: Callable[..., None] | None = None

    @property
    def type(self) -> str:
        """The kind, as given to :func:`create`."""
        return self._type

    @property
    def rank(self) -> int:
        """This process's rank among the workers."""
        return self._kv.rank

    @property
    def num_workers(self) -> int:
        """How many worker processes share the store."""
        return self._kv.num_workers

    @property
    def staleness(self) -> dict[str, float] | None:
        """A ``dist_async`` store's staleness so far: ``updates`` applied, their ``mean`` and
        ``max`` staleness (updates of a key applied between the pull a gradient came from and
        its arrival); ``None`` for the other kinds."""
        s = self._kv.staleness
        if s is None:
            return None
        updates, total, most = s
        return {"updates": updates, "mean": total / max(updates, 1), "max": most}

    def init(self, key: Any, value: Any) -> None:
        """Stores a copy of ``value`` under ``key`` (int or str, or a list of keys). Across
        processes every rank starts from rank 0's value."""
        for k, vs in _pairs(key, value):
            self._kv.init(k, vs[0])

    def broadcast(self, key: Any, value: Any, out: Any, priority: int = 0) -> None:
        """Stores ``value`` under ``key`` (or each of a list of keys) and copies it into ``out``
        (an array or a list of them, per key), as MXNet 1.9's ``broadcast``: across processes
        every rank's ``out`` gets rank 0's value."""
        self.init(key, value)
        self.pull(key, out=out, priority=priority)

    def is_capable(self, capability: str) -> bool:
        """Whether the store can do ``capability``: :attr:`OPTIMIZER` (every kind runs an
        optimizer where it keeps the weights)."""
        if capability.lower() == self.OPTIMIZER:
            return True
        raise ValueError(f"unknown capability {capability!r} (known: {self.OPTIMIZER!r})")

    def push(self, key: Any, value: Any, priority: int = 0) -> None:
        """Sums the arrays given for ``key`` and updates its value from the sum."""
        for k, vs in _pairs(key, value):
            self._kv.push(k, list(vs), priority)

    def pull(
        self, key: Any, out: Any = None, priority: int = 0, ignore_sparse: bool = True
    ) -> None:
        """Copies ``key``'s value into ``out`` (an array, or a list of them)."""
        if out is None:
            raise ValueError("pull needs out=")
        for k, outs in _pairs(key, out):
            self._kv.pull(k, list(outs), priority)

    def pushpull(self, key: Any, value: Any, out: Any = None, priority: int = 0) -> None:
        """A push of ``value``, then a pull into ``out`` (into ``value`` when not given). One
        key's values are summed across processes where they lie; a list of keys is pushed
        whole before any is pulled, so that small values travel together."""
        out = value if out is None else out
        if not isinstance(key, (list, tuple)):
            ((k, vs),), ((_, outs),) = _pairs(key, value), _pairs(key, out)
            self._kv.pushpull(k, list(vs), list(outs), priority)
            return
        self.push(key, value, priority)
        self.pull(key, out, priority)

    def set_updater(self, updater: Callable[[Any, NDArray, NDArray], None]) -> None:
        """Installs ``updater(key, merged, stored)``, run by every later push."""
        self._updater = updater
        self._kv.set_updater(updater)

    _set_updater = set_updater

    def set_optimizer(self, optimizer: opt_mod.Optimizer) -> None:
        """Runs ``optimizer`` on every push, keeping its state per key in the store."""
        self.set_updater(opt_mod.get_updater(optimizer))

    def barrier(self) -> None:
        """Waits until every worker reaches this point."""
        self._kv.barrier()

    def _optimizer_here(self, what: str) -> None:
        if self.type == "dist_async" and self.rank != 0:
            raise MXNetError(
                f"{what}: a dist_async store's optimizer runs on rank 0, which holds its state "
                f"(this is rank {self.rank}): call it there"
            )

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        """Writes the optimizer's state (and the optimizer with ``dump_optimizer``) to
        ``fname``, atomically: a failure leaves any previous file as it was."""
        self._optimizer_here("save_optimizer_states")
        updater = self._updater
        if not isinstance(updater, opt_mod.Updater):
            raise MXNetError(
                "save_optimizer_states: the store has no optimizer (set_optimizer first)"
            )
        data = updater.get_states(dump_optimizer)
        folder = os.path.dirname(os.path.abspath(fname))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".mxrs-states-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, fname)
        except BaseException:
            os.unlink(tmp)
            raise

    def load_optimizer_states(self, fname: str) -> None:
        """Restores the state :meth:`save_optimizer_states` wrote."""
        self._optimizer_here("load_optimizer_states")
        updater = self._updater
        if not isinstance(updater, opt_mod.Updater):
            raise MXNetError(
                "load_optimizer_states: the store has no optimizer (set_optimizer first)"
            )
        with open(fname, "rb") as f:
            updater.set_states(f.read())


def create(name: str = "local") -> KVStore:
    """A store: ``local`` (sums and updates on the CPU), ``device`` (on each key's device),
    ``dist_sync`` / ``dist_device_sync`` / ``dist_async`` (across processes over MPI)."""
    if not isinstance(name, str):
        raise TypeError("name must be a string")
    return KVStore(name)
