"""``mx.random``: seeding, and the samplers of ``mx.nd.random``."""

from __future__ import annotations

from typing import Any

from . import _native
from .ndarray.random import exponential, normal, randint, randn, shuffle, uniform

__all__ = ["exponential", "normal", "randint", "randn", "seed", "shuffle", "uniform"]


def seed(seed_state: int, ctx: Any = "all") -> None:
    """Seeds the random generators of every device (the same seed gives the same draws)."""
    _native.seed(int(seed_state))
