"""``mx.io``: ``DataBatch``, ``DataDesc``, the ``DataIter`` protocol and the iterators
(``NDArrayIter``, ``CSVIter``, ``ResizeIter``, ``PrefetchingIter``)."""

from __future__ import annotations

from . import io, utils
from .io import (
    CSVIter,
    DataBatch,
    DataDesc,
    DataIter,
    NDArrayIter,
    PrefetchingIter,
    ResizeIter,
)

__all__ = [
    "CSVIter",
    "DataBatch",
    "DataDesc",
    "DataIter",
    "NDArrayIter",
    "PrefetchingIter",
    "ResizeIter",
    "io",
    "utils",
]
