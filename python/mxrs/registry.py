"""``mx.registry``: registries of classes by name (metrics, initializers), made the way MXNet
makes them: ``register`` a class under its name in lower case, ``alias`` it under more names,
``create`` an instance by name (or from the JSON ``["name", {kwargs}]`` a ``dumps`` wrote)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["get_alias_func", "get_create_func", "get_register_func"]

_REGISTRIES: dict[str, dict[str, type]] = {}


def _table(nickname: str) -> dict[str, type]:
    return _REGISTRIES.setdefault(nickname, {})


def get_register_func(base_class: type, nickname: str) -> Callable[[type], type]:
    """A decorator registering a subclass of ``base_class`` by its name in lower case."""
    table = _table(nickname)

    def register(klass: type) -> type:
        if not issubclass(klass, base_class):
            raise TypeError(f"can only register subclasses of {base_class.__name__} as {nickname}s")
        table[klass.__name__.lower()] = klass
        return klass

    return register


def get_alias_func(base_class: type, nickname: str) -> Callable[..., Callable[[type], type]]:
    """A decorator factory registering a class under more names."""
    table = _table(nickname)

    def alias(*names: str) -> Callable[[type], type]:
        def add(klass: type) -> type:
            for n in names:
                table[n.lower()] = klass
            return klass

        return add

    return alias


def get_create_func(base_class: type, nickname: str) -> Callable[..., Any]:
    """A function making an instance: of an instance itself, a registered name, or the JSON
    ``["name", {kwargs}]``."""
    table = _table(nickname)

    def create(what: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(what, base_class):
            return what
        if isinstance(what, str) and what.lstrip().startswith("["):
            name, kw = json.loads(what)
            return create(name, **kw)
        if not isinstance(what, str) or what.lower() not in table:
            raise ValueError(f"unknown {nickname} {what!r} (one of {sorted(table)})")
        return table[what.lower()](*args, **kwargs)

    return create
