"""``mx.engine``: bulk execution of imperative ops, as in MXNet 1.x.

While a bulk size above one is set, up to that many consecutive imperative ops are handed to
the engine's workers as one unit instead of one by one, which saves the hand-over of each
small op. Held ops count as pushed: reading a result (``asnumpy``, ``wait_to_read``,
``waitall``) and any op that cannot join a unit schedule them first, so results are the same."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from . import _native

__all__ = ["bulk", "set_bulk_size"]


def set_bulk_size(size: int) -> int:
    """Sets how many consecutive imperative ops run as one unit (0 or 1: each alone, the
    default) and returns the size set before."""
    if int(size) < 0:
        raise ValueError(f"bulk size must be at least 0, got {size}")
    return int(_native.set_bulk_size(int(size)))


@contextmanager
def bulk(size: int) -> Iterator[None]:
    """Runs the block with bulk size ``size``, then restores the size set before::

    with mx.engine.bulk(10):
        for _ in range(100):
            x += 1
    """
    prev = set_bulk_size(size)
    try:
        yield
    finally:
        set_bulk_size(prev)
