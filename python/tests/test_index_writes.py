"""Writes through an index (``x[key] = value``) are ops on the engine that write only the
selected elements: they match numpy's results, writes from several threads into disjoint
regions all land, and a failed array stays failed when part of it is written."""

from __future__ import annotations

import threading

import mxrs as mx
import numpy as np
import pytest


def same(x: mx.nd.NDArray, a: np.ndarray) -> None:
    np.testing.assert_array_equal(x.asnumpy(), a)


@pytest.mark.parametrize(
    "key, value",
    [
        ((slice(None), 2), 5.0),
        ((slice(None, None, -2), slice(1, 5, 3)), 7.0),
        ((1, Ellipsis), np.arange(6)),
        ((slice(1, 3), None, slice(None, None, -1)), np.arange(6)),
        ((-1, slice(None, None, 2)), np.array([3.5])),
        ((slice(0, 4, 2), slice(4, 0, -1)), np.arange(8).reshape(2, 4)),
        ((slice(2, 2), 1), 9.0),
    ],
)
def test_region_writes_match_numpy(key: tuple, value: object) -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = mx.nd.array(a)
    a[key] = value
    x[key] = value if isinstance(value, float) else mx.nd.array(np.asarray(value))
    same(x, a)


def test_a_one_element_array_fills_any_selection() -> None:
    a = np.zeros((3, 4), dtype=np.float32)
    x = mx.nd.array(a)
    x[1, 2] = mx.nd.array([4.0])
    x[:, 0] = mx.nd.array([2.0])
    x[0] = mx.nd.array([1.0])
    a[1, 2], a[:, 0], a[0] = 4.0, 2.0, 1.0
    same(x, a)


def test_a_value_that_views_the_array_is_read_before_the_write() -> None:
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    x = mx.nd.array(a)
    x[:, 1:] = x[:, :-1]
    a[:, 1:] = a[:, :-1].copy()
    same(x, a)
    x[1:3, 0] = x[0, 3:5]
    a[1:3, 0] = a[0, 3:5].copy()
    same(x, a)


def test_writes_of_disjoint_columns_from_threads_all_land() -> None:
    # Each thread writes its own column, many times, into arrays written by the others at the
    # same time; a write that read the array and wrote it back whole would lose the others'.
    cols, rounds = 6, 60
    failures: list[BaseException] = []
    for _ in range(rounds):
        x = mx.nd.zeros((32, cols))

        def write(c: int, x: mx.nd.NDArray = x) -> None:
            try:
                for k in range(4):
                    x[:, c] = c + 1 + k
            except BaseException as e:  # noqa: BLE001 - reported below
                failures.append(e)

        threads = [threading.Thread(target=write, args=(c,)) for c in range(cols)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive(), "a writing thread hung"
        assert not failures, failures
        want = np.tile(np.arange(1, cols + 1, dtype=np.float32) + 3, (32, 1))
        same(x, want)


def test_a_partial_write_does_not_clear_a_failed_array() -> None:
    table = mx.nd.ones((3, 2))
    a = mx.nd.take(table, mx.nd.array([0, 7], dtype="int64"), mode="raise")
    a[0] = 1
    with pytest.raises(mx.MXNetError, match="index 7"):
        a.asnumpy()
    b = mx.nd.take(table, mx.nd.array([7, 0], dtype="int64"), mode="raise")
    b[:, 1] = 2
    with pytest.raises(mx.MXNetError, match="index 7"):
        b.asnumpy()
    # A write of the whole array replaces what the failed op left.
    c = mx.nd.take(table, mx.nd.array([7, 0], dtype="int64"), mode="raise")
    c[:] = 3
    same(c, np.full((2, 2), 3, dtype=np.float32))
    try:
        mx.nd.waitall()
    except mx.MXNetError:
        pass


def test_complex_values_are_refused() -> None:
    x = mx.nd.zeros((2, 3))
    with pytest.raises(TypeError, match="complex"):
        x[:, 1] = np.array([1 + 2j, 3j])
