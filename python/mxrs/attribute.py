"""``mx.attribute``: attributes given to every symbol made in a scope. ``with
AttrScope(ctx_group="dev1"):`` adds ``ctx_group`` to each variable and op made in the block
(attributes given at creation win); scopes nest, the inner adding to the outer's."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .name import _Current

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["AttrScope"]


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
        """``get(attr)`` for an op's node: the scope's plain keys hidden as ``__key__`` (an op
        refuses attributes it does not take; hidden ones it keeps), ``attr`` as given."""
        out = {k if k.startswith("__") else f"__{k}__": v for k, v in self._attr.items()}
        out.update(attr or {})
        return out

    def for_variable(self, attr: dict[str, str] | None) -> dict[str, str]:
        """``get(attr)`` for a variable: every key as given and hidden (``ctx_group`` and
        ``__ctx_group__``), as MXNet keeps both."""
        out = self.get(attr)
        out.update({f"__{k}__": v for k, v in out.items() if not k.startswith("__")})
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
