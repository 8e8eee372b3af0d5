"""``mx.runtime``: the features of this build and machine, by MXNet's names
(``mx.runtime.Features().is_enabled("CUDA")``)."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from . import _native

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Feature", "Features", "feature_list"]


class Feature:
    """One feature: its name and whether it is enabled."""

    def __init__(self, name: str, enabled: bool) -> None:
        self._name, self._enabled = name, enabled

    @property
    def name(self) -> str:
        """The feature's name (``CUDA``, ``CPU_AVX2``, ...)."""
        return self._name

    @property
    def enabled(self) -> bool:
        """Whether this build, on this machine, has it."""
        return self._enabled

    def __repr__(self) -> str:
        return ("✔ " if self._enabled else "✖ ") + self._name


def feature_list() -> list[Feature]:
    """Every feature, in MXNet's order."""
    return [Feature(name, on) for name, on in _native.features()]


class Features(collections.OrderedDict):
    """The features by name, as a mapping to :class:`Feature` (one instance per process, as
    the build and the machine do not change)."""

    instance: Features | None = None

    def __new__(cls) -> Self:
        if cls.instance is None:
            cls.instance = super().__new__(cls)
            super(Features, cls.instance).__init__((f.name, f) for f in feature_list())
        return cls.instance

    def __init__(self) -> None:
        pass

    def __repr__(self) -> str:
        return str(list(self.values()))

    def is_enabled(self, feature_name: str) -> bool:
        """Whether the feature is enabled; an unknown name raises ``RuntimeError``."""
        name = feature_name.upper()
        if name not in self:
            known = ", ".join(self.keys())
            raise RuntimeError(f"feature {feature_name!r} is unknown; the features are: {known}")
        return self[name].enabled
