"""MXNet's data iterators: ``DataBatch``, ``DataDesc``, the ``DataIter`` protocol
(``next`` is ``iter_next`` then ``getdata``, ``getlabel``, ``getpad``, ``getindex``), the
in-memory ``NDArrayIter`` that ``Module.fit`` reads, ``CSVIter`` over CSV files, and the
wrappers ``ResizeIter`` and ``PrefetchingIter``."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ndarray.ndarray import NDArray, array
from .utils import _named

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "CSVIter",
    "DataBatch",
    "DataDesc",
    "DataIter",
    "NDArrayIter",
    "PrefetchingIter",
    "ResizeIter",
]


class DataDesc(namedtuple("DataDesc", ["name", "shape", "dtype", "layout"])):
    """A named input: its shape, dtype and layout (``NCHW``, ...)."""

    def __new__(
        cls, name: str, shape: tuple, dtype: Any = np.float32, layout: str = "NCHW"
    ) -> Self:
        return super().__new__(cls, name, tuple(shape), dtype, layout)

    def __repr__(self) -> str:
        return f"DataDesc[{self.name},{self.shape},{self.dtype},{self.layout}]"

    @staticmethod
    def get_batch_axis(layout: str | None) -> int:
        """The axis of ``layout`` that is the batch (``N``; 0 when there is no layout)."""
        return 0 if layout is None else layout.find("N")

    @staticmethod
    def get_list(shapes: list[tuple], types: list[tuple] | None) -> list[DataDesc]:
        """``DataDesc`` of ``(name, shape)`` pairs, with dtypes from ``(name, dtype)`` pairs."""
        dtypes = dict(types) if types is not None else {}
        return [DataDesc(name, shape, dtypes.get(name, np.float32)) for name, shape in shapes]


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

    def __init__(self, batch_size: int = 0) -> None:
        self.batch_size = batch_size

    def next(self) -> DataBatch:
        """The next batch; ``StopIteration`` at the end. By default ``iter_next`` then the
        ``get*`` methods, as MXNet's base iterator does."""
        if self.iter_next():
            return DataBatch(
                data=self.getdata(), label=self.getlabel(), pad=self.getpad(), index=self.getindex()
            )
        raise StopIteration

    def reset(self) -> None:
        """Starts over."""

    def iter_next(self) -> bool:
        """Moves to the next batch; False at the end."""
        raise NotImplementedError(f"{type(self).__name__}.iter_next")

    def getdata(self) -> list[NDArray]:
        """The current batch's data."""
        raise NotImplementedError(f"{type(self).__name__}.getdata")

    def getlabel(self) -> list[NDArray] | None:
        """The current batch's labels."""
        raise NotImplementedError(f"{type(self).__name__}.getlabel")

    def getindex(self) -> Any:
        """The current batch's example indices, or None."""
        return None

    def getpad(self) -> int:
        """How many examples at the end of the current batch are padding."""
        raise NotImplementedError(f"{type(self).__name__}.getpad")


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
        return [DataDesc(k, (self.batch_size, *v.shape[1:]), v.dtype.type) for k, v in self.data]

    @property
    def provide_label(self) -> list[DataDesc]:
        """Names and batch shapes of the labels."""
        return [DataDesc(k, (self.batch_size, *v.shape[1:]), v.dtype.type) for k, v in self.label]

    @property
    def idx(self) -> np.ndarray:
        """The order this epoch takes the examples in (shuffled or not)."""
        return self._order

    @property
    def cursor(self) -> int:
        """Where the last batch began (``-batch_size`` before the first), as MXNet counts."""
        return self._cursor - self.batch_size

    def hard_reset(self) -> None:
        """Starts over, dropping examples a ``roll_over`` epoch carried."""
        self._carry = np.arange(0)
        self.reset()

    def reset(self) -> None:
        order = np.random.permutation(self.num_data) if self.shuffle else np.arange(self.num_data)
        self._order = np.concatenate([self._carry, order]) if self.last == "roll_over" else order
        self._carry = np.arange(0)
        self._cursor = 0
        self._batch: np.ndarray = np.arange(0)
        self._pad = 0

    def iter_next(self) -> bool:
        start, n = self._cursor, len(self._order)
        if start >= n:
            return False
        idx = self._order[start : start + self.batch_size]
        pad = self.batch_size - len(idx)
        if pad:
            if self.last == "discard":
                return False
            if self.last == "roll_over":
                self._carry = idx
                return False
            # From the start again, as many times as it takes (a batch larger than the data).
            idx = np.concatenate([idx, np.resize(self._order, pad)])
        self._cursor = start + self.batch_size
        self._batch, self._pad = idx, pad
        return True

    def _take(self, items: list[tuple[str, np.ndarray]]) -> list[NDArray]:
        supported = ("float32", "float64", "int32", "int64", "uint8")
        return [
            array(v[self._batch], dtype=v.dtype if v.dtype.name in supported else "float32")
            for _, v in items
        ]

    def getdata(self) -> list[NDArray]:
        return self._take(self.data)

    def getlabel(self) -> list[NDArray]:
        return self._take(self.label)

    def getpad(self) -> int:
        return self._pad

    def getindex(self) -> np.ndarray:
        return self._batch

    def next(self) -> DataBatch:
        if not self.iter_next():
            raise StopIteration
        return DataBatch(
            self.getdata(),
            self.getlabel(),
            pad=self.getpad(),
            index=self.getindex(),
            provide_data=self.provide_data,
            provide_label=self.provide_label,
        )


class _Wrapper(DataIter):
    """An iterator over batches another makes: ``iter_next`` sets ``current_batch``, which
    ``next`` and the ``get*`` methods give."""

    current_batch: DataBatch | None = None

    def next(self) -> DataBatch:
        if not self.iter_next():
            raise StopIteration
        assert self.current_batch is not None
        return self.current_batch

    def getdata(self) -> list[NDArray]:
        return self.current_batch.data  # type: ignore[union-attr]

    def getlabel(self) -> list[NDArray] | None:
        return self.current_batch.label  # type: ignore[union-attr]

    def getindex(self) -> Any:
        return self.current_batch.index  # type: ignore[union-attr]

    def getpad(self) -> int:
        return self.current_batch.pad  # type: ignore[union-attr]


class ResizeIter(_Wrapper):
    """``data_iter`` as ``size`` batches an epoch, starting it over when it runs out (with
    ``reset_internal``, at each ``reset`` too)."""

    def __init__(self, data_iter: DataIter, size: int, reset_internal: bool = True) -> None:
        super().__init__(data_iter.batch_size)
        self.data_iter, self.size, self.reset_internal = data_iter, size, reset_internal
        self.cur = 0
        self.current_batch: DataBatch | None = None
        self.provide_data = data_iter.provide_data
        self.provide_label = data_iter.provide_label
        self.default_bucket_key = getattr(data_iter, "default_bucket_key", None)

    def reset(self) -> None:
        self.cur = 0
        if self.reset_internal:
            self.data_iter.reset()

    def iter_next(self) -> bool:
        if self.cur == self.size:
            return False
        try:
            self.current_batch = self.data_iter.next()
        except StopIteration:
            self.data_iter.reset()
            self.current_batch = self.data_iter.next()
        self.cur += 1
        return True


class PrefetchingIter(_Wrapper):
    """Reads the next batch of each of ``iters`` on a thread of its own while the current one
    is used; a batch joins their data and labels (renamed by ``rename_data`` /
    ``rename_label``, one dict per iterator)."""

    def __init__(
        self,
        iters: DataIter | list[DataIter],
        rename_data: list[dict[str, str]] | None = None,
        rename_label: list[dict[str, str]] | None = None,
    ) -> None:
        self.iters = iters if isinstance(iters, list) else [iters]
        super().__init__(self.iters[0].batch_size)
        self.rename_data, self.rename_label = rename_data, rename_label
        self.current_batch: DataBatch | None = None
        self._pool = ThreadPoolExecutor(max_workers=len(self.iters))
        self._pending = [self._pool.submit(self._fetch, it) for it in self.iters]

    @staticmethod
    def _fetch(it: DataIter) -> DataBatch | None:
        try:
            return it.next()
        except StopIteration:
            return None

    def _renamed(self, attr: str, renames: list[dict[str, str]] | None) -> list[DataDesc]:
        out = []
        for k, it in enumerate(self.iters):
            mapping = renames[k] if renames else {}
            for d in getattr(it, attr):
                desc = d if isinstance(d, DataDesc) else DataDesc(*d)
                out.append(desc._replace(name=mapping.get(desc.name, desc.name)))
        return out

    @property
    def provide_data(self) -> list[DataDesc]:
        """The iterators' data descriptions, renamed."""
        return self._renamed("provide_data", self.rename_data)

    @property
    def provide_label(self) -> list[DataDesc]:
        """The iterators' label descriptions, renamed."""
        return self._renamed("provide_label", self.rename_label)

    def reset(self) -> None:
        for f in self._pending:
            f.result()
        for it in self.iters:
            it.reset()
        self._pending = [self._pool.submit(self._fetch, it) for it in self.iters]

    def iter_next(self) -> bool:
        batches = [f.result() for f in self._pending]
        if any(b is None for b in batches):
            if not all(b is None for b in batches):
                raise ValueError("PrefetchingIter: the iterators ran out at different batches")
            return False
        self.current_batch = DataBatch(
            [a for b in batches for a in b.data],
            [a for b in batches for a in b.label or []],
            pad=batches[0].pad,
            index=batches[0].index,
            provide_data=self.provide_data,
            provide_label=self.provide_label,
        )
        self._pending = [self._pool.submit(self._fetch, it) for it in self.iters]
        return True


class CSVIter(NDArrayIter):
    """Batches of rows of CSV files: ``data_csv`` (each row reshaped to ``data_shape``) and,
    when given, ``label_csv`` (to ``label_shape``; without it, labels are zeros). With
    ``round_batch`` the last batch takes rows from the start, else it is dropped short."""

    def __init__(
        self,
        data_csv: str,
        data_shape: tuple,
        label_csv: str | None = None,
        label_shape: tuple = (1,),
        batch_size: int = 1,
        round_batch: bool = True,
        dtype: Any = "float32",
        data_name: str = "data",
        label_name: str = "softmax_label",
        **kwargs: Any,
    ) -> None:
        data = _read_csv(data_csv, tuple(data_shape), dtype)
        if label_csv is not None:
            label = _read_csv(label_csv, tuple(label_shape), dtype)
        else:
            label = np.zeros((len(data), *tuple(label_shape)), dtype=dtype)
        if tuple(label_shape) == (1,):
            label = label.reshape(len(label))
        super().__init__(
            data,
            label,
            batch_size=batch_size,
            last_batch_handle="pad" if round_batch else "discard",
            data_name=data_name,
            label_name=label_name,
        )


def _read_csv(path: str, shape: tuple, dtype: Any) -> np.ndarray:
    rows = np.loadtxt(path, delimiter=",", dtype=dtype, ndmin=2)
    want = int(np.prod(shape))
    if rows.shape[1] != want:
        raise ValueError(
            f"CSVIter: {path} has rows of {rows.shape[1]} values; shape {shape} takes {want}"
        )
    return rows.reshape((rows.shape[0], *shape))
