"""``mx.io``: ``DataBatch``, ``DataDesc`` and ``NDArrayIter``, the in-memory iterator that
``Module.fit`` reads."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .ndarray.ndarray import NDArray, array

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["DataBatch", "DataDesc", "DataIter", "NDArrayIter"]


class DataDesc(namedtuple("DataDesc", ["name", "shape", "dtype", "layout"])):
    """A named input: its shape, dtype and layout (``NCHW``, ...)."""

    def __new__(
        cls, name: str, shape: tuple, dtype: Any = np.float32, layout: str = "NCHW"
    ) -> Self:
        return super().__new__(cls, name, tuple(shape), dtype, layout)


class DataBatch:
    """One batch: ``data`` and ``label`` lists, ``pad`` (examples at the end that repeat the
    start, to fill the last batch), and the descriptions."""

    def __init__(
        self,
        data: list[NDArray],
        label: list[NDArray] | None = None,
        pad: int = 0,
        index: Any = None,
        provide_data: list | None = None,
        provide_label: list | None = None,
    ) -> None:
        self.data, self.label, self.pad, self.index = data, label, pad, index
        self.provide_data, self.provide_label = provide_data, provide_label

    def __str__(self) -> str:
        def shapes(arrays: list[NDArray] | None) -> str:
            return "None" if arrays is None else str([a.shape for a in arrays])

        return (
            f"{type(self).__name__}: data shapes: {shapes(self.data)} "
            f"label shapes: {shapes(self.label)}"
        )


class DataIter:
    """An iterator of ``DataBatch`` that can start over (``reset``)."""

    batch_size = 0

    def __iter__(self) -> Iterator[DataBatch]:
        return self

    def __next__(self) -> DataBatch:
        return self.next()

    def next(self) -> DataBatch:
        """The next batch; ``StopIteration`` at the end."""
        raise NotImplementedError

    def reset(self) -> None:
        """Starts over."""
        raise NotImplementedError


def _named(data: Any, default: str) -> list[tuple[str, np.ndarray]]:
    # MXNet's naming: one array is ``default``; several, ``_0_default``, ``_1_default``, ...
    if data is None or (isinstance(data, list) and not data):
        return []
    if isinstance(data, (np.ndarray, NDArray, list)) and not (
        isinstance(data, list) and data and isinstance(data[0], (np.ndarray, NDArray))
    ):
        data = [data]
    if isinstance(data, dict):
        items = list(data.items())
    else:
        several = len(data) > 1
        items = [(f"_{i}_{default}" if several else default, d) for i, d in enumerate(data)]
    return [(k, v.asnumpy() if isinstance(v, NDArray) else np.asarray(v)) for k, v in items]


class NDArrayIter(DataIter):
    """Batches of in-memory arrays (numpy or NDArray; one, a list or a dict by name), with
    optional shuffling; the last batch is padded from the start (``pad``), discarded, or
    rolled over into the next epoch, as ``last_batch_handle`` says."""

    def __init__(
        self,
        data: Any,
        label: Any = None,
        batch_size: int = 1,
        shuffle: bool = False,
        last_batch_handle: str = "pad",
        data_name: str = "data",
        label_name: str = "softmax_label",
    ) -> None:
        self.data = _named(data, data_name)
        self.label = _named(label, label_name)
        if not self.data:
            raise ValueError("NDArrayIter: no data")
        self.num_data = len(self.data[0][1])
        for name, arr in self.data + self.label:
            if len(arr) != self.num_data:
                raise ValueError(
                    f"NDArrayIter: {name} has {len(arr)} rows, the data {self.num_data}"
                )
        if last_batch_handle not in ("pad", "discard", "roll_over"):
            raise ValueError(
                f"last_batch_handle {last_batch_handle!r} is not pad, discard or roll_over"
            )
        if batch_size < 1:
            raise ValueError("NDArrayIter: batch_size must be at least 1")
        self.batch_size, self.shuffle, self.last = batch_size, shuffle, last_batch_handle
        self._order = np.arange(self.num_data)
        self._carry: np.ndarray = np.arange(0)
        self.reset()

    @property
    def provide_data(self) -> list[DataDesc]:
        """Names and batch shapes of the data."""
        return [DataDesc(k, (self.batch_size, *v.shape[1:]), v.dtype) for k, v in self.data]

    @property
    def provide_label(self) -> list[DataDesc]:
        """Names and batch shapes of the labels."""
        return [DataDesc(k, (self.batch_size, *v.shape[1:]), v.dtype) for k, v in self.label]

    @property
    def idx(self) -> np.ndarray:
        """The order this epoch takes the examples in (shuffled or not)."""
        return self._order

    @property
    def cursor(self) -> int:
        """Where the last batch began (``-batch_size`` before the first), as MXNet counts."""
        return self._cursor - self.batch_size

    def reset(self) -> None:
        order = np.random.permutation(self.num_data) if self.shuffle else np.arange(self.num_data)
        self._order = np.concatenate([self._carry, order]) if self.last == "roll_over" else order
        self._carry = np.arange(0)
        self._cursor = 0

    def next(self) -> DataBatch:
        start, n = self._cursor, len(self._order)
        if start >= n:
            raise StopIteration
        idx = self._order[start : start + self.batch_size]
        pad = self.batch_size - len(idx)
        if pad:
            if self.last == "discard":
                raise StopIteration
            if self.last == "roll_over":
                self._carry = idx
                raise StopIteration
            # From the start again, as many times as it takes (a batch larger than the data).
            idx = np.concatenate([idx, np.resize(self._order, pad)])
        self._cursor = start + self.batch_size

        def take(items: list[tuple[str, np.ndarray]]) -> list[NDArray]:
            return [
                array(
                    v[idx],
                    dtype=v.dtype
                    if v.dtype.name in ("float32", "float64", "int32", "int64", "uint8")
                    else "float32",
                )
                for _, v in items
            ]

        return DataBatch(
            take(self.data),
            take(self.label),
            pad=pad,
            index=idx,
            provide_data=self.provide_data,
            provide_label=self.provide_label,
        )
