"""``mx.executor``: the ``Executor`` that ``Symbol.bind`` and ``simple_bind`` return."""

from __future__ import annotations

from .symbol.executor import Executor

__all__ = ["Executor"]
