"""``mx.attribute``: attributes given to every symbol made in a scope. ``with
AttrScope(ctx_group="dev1"):`` adds ``ctx_group`` to each variable and op made in the block
(attributes given at creation win); scopes nest, the inner adding to the outer's."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .name import _Current

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["HIDDEN_KEYS", "AttrScope", "hidden_forms"]

#: The graph attributes MXNet keeps under both their plain and their ``__name__`` names, on
#: variables and ops alike (the runtime lets them pass on any op).
HIDDEN_KEYS = ("ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage")


def hidden_forms(key: str, value: Any) -> dict[str, str]:
    """A hidden key's two forms: ``{key: value, __key__: value}``."""
    return {key: str(value), f"__{key}__": str(value)}


def _hide(key: str) -> str:
    return key if key.startswith("__") else f"__{key}__"


class AttrScope(metaclass=_Current):
    """The attributes of a scope; every value must be a string."""

    _local = threading.local()

    def __init__(self, **kwargs: str) -> None:
        for key, value in kwargs.items():
            if not isinstance(value, str):
                raise ValueError(f"attribute {key!r}: attributes need to be strings")  # noqa: TRY004 - as MXNet
        self._attr = dict(kwargs)
        self._old: AttrScope | None = None

    @classmethod
    def _fresh(cls) -> AttrScope:
        return AttrScope()

    def get(self, attr: dict[str, str] | None) -> dict[str, str]:
        """The scope's attributes updated by ``attr`` (those given at creation)."""
        out = dict(self._attr)
        out.update(attr or {})
        return out

    def for_op(self, attr: dict[str, str] | None) -> dict[str, str]:
        """``get(attr)`` for an op's node: MXNet's hidden keys (``lr_mult``, ``ctx_group``, ...)
        under both their names, other plain keys hidden as ``__key__`` (an op refuses plain
        attributes it does not take; hidden ones it keeps)."""
        out: dict[str, str] = {}
        for k, v in self.get(attr).items():
            out.update(hidden_forms(k, v) if k in HIDDEN_KEYS else {_hide(k): v})
        return out

    def for_variable(self, attr: dict[str, str] | None) -> dict[str, str]:
        """``get(attr)`` for a variable: every key as given, MXNet's hidden keys also as
        ``__key__``, as MXNet keeps both."""
        out: dict[str, str] = {}
        for k, v in self.get(attr).items():
            out.update(hidden_forms(k, v) if k in HIDDEN_KEYS else {k: v})
        return out

    def __enter__(self) -> Self:
        self._old = AttrScope.current
        merged = dict(self._old._attr)
        merged.update(self._attr)
        self._attr = merged
        AttrScope.current = self
        return self

    def __exit__(self, *exc: object) -> None:
        AttrScope.current = self._old
