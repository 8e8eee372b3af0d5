"""``mx.name``: how ops made without a name are named. The current manager (per thread, set
with ``with NameManager():`` or ``with Prefix("net_"):``) turns an op's hint into a name:
``fullyconnected0``, ``fullyconnected1``, ... in a fresh manager; a ``Prefix`` puts its prefix
before every op's name, given or made."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["NameManager", "Prefix", "current"]


class _Current(type):
    """Gives the class a ``current`` property: this thread's manager."""

    @property
    def current(cls) -> Any:
        local = cls._local  # type: ignore[attr-defined]
        if getattr(local, "value", None) is None:
            local.value = cls._fresh()  # type: ignore[attr-defined]
        return local.value

    @current.setter
    def current(cls, value: Any) -> None:
        cls._local.value = value  # type: ignore[attr-defined]


class NameManager(metaclass=_Current):
    """Names ops by a counter per hint; a ``with`` block makes it this thread's manager."""

    _local = threading.local()

    def __init__(self) -> None:
        self._counter: dict[str, int] = {}
        self._old: NameManager | None = None

    @classmethod
    def _fresh(cls) -> NameManager:
        return NameManager()

    def get(self, name: str | None, hint: str) -> str:
        """``name`` when given, else ``hint`` and the number of names made from it so far."""
        if name:
            return name
        k = self._counter.get(hint, 0)
        self._counter[hint] = k + 1
        return f"{hint}{k}"

    def __enter__(self) -> Self:
        self._old = NameManager.current
        NameManager.current = self
        return self

    def __exit__(self, *exc: object) -> None:
        NameManager.current = self._old


class Prefix(NameManager):
    """A manager that puts ``prefix`` before every name, given or made."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self._prefix = prefix

    def get(self, name: str | None, hint: str) -> str:
        """The prefix before what a plain manager would give."""
        return self._prefix + super().get(name, hint)


def current() -> NameManager:
    """This thread's name manager."""
    return NameManager.current
