"""DLPack: arrays go to numpy without a copy (the view shares memory and keeps it alive after
the array is gone) and come back from numpy and from raw capsules; a capsule is used once; an
unconsumed capsule frees its tensor."""

from __future__ import annotations

import gc
import weakref

import mxrs as mx
import numpy as np
import pytest


def test_numpy_views_the_memory_without_a_copy() -> None:
    x = mx.nd.arange(6).reshape((2, 3))
    view = np.from_dlpack(x)
    np.testing.assert_array_equal(view, np.arange(6).reshape(2, 3))
    x[:] = 7  # the view shares the memory
    x.wait_to_read()
    np.testing.assert_array_equal(view, np.full((2, 3), 7))
    del x
    gc.collect()
    # The view keeps the memory alive after the array is gone.
    assert view.sum() == 42
    assert mx.nd.ones((2,)).__dlpack_device__() == (1, 0)


def test_pending_writes_are_waited_for() -> None:
    a = mx.nd.ones((256, 256))
    b = mx.nd.dot(a, a)  # still running when exported, maybe
    np.testing.assert_array_equal(np.from_dlpack(b)[0, :3], [256, 256, 256])


def test_from_dlpack_shares_the_producers_memory() -> None:
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    alive = weakref.ref(src)
    y = mx.nd.from_dlpack(src)
    src[0, 0] = 100.0  # no copy: the array sees the producer's writes
    assert y.asnumpy()[0, 0] == 100.0
    y[:] = 5.0  # and the producer sees the array's
    y.wait_to_read()
    np.testing.assert_array_equal(src, np.full((3, 4), 5.0))
    del src
    gc.collect()
    assert alive() is not None, "the array keeps the producer's memory"
    np.testing.assert_array_equal((y + 1).asnumpy(), np.full((3, 4), 6.0))
    del y
    mx.nd.waitall()
    gc.collect()
    assert alive() is None, "the producer's deleter ran once the array was gone"


def test_our_own_capsule_gives_back_the_array_with_its_order() -> None:
    a = mx.nd.ones((64, 64))
    b = mx.nd.from_dlpack(a.to_dlpack_for_read())
    a += 1  # ordered before the read below: b is a handle of a's memory and var
    np.testing.assert_array_equal(b.asnumpy(), np.full((64, 64), 2.0))


def test_unaligned_memory_is_copied() -> None:
    raw = np.zeros(17, dtype=np.uint8)
    unaligned = raw[1:].view(np.float32)
    unaligned[:] = [1.5, 2.5, 3.5, 4.5]
    y = mx.nd.from_dlpack(unaligned)
    unaligned[:] = 0.0
    np.testing.assert_array_equal(y.asnumpy(), [1.5, 2.5, 3.5, 4.5])


def test_from_dlpack_consumes_the_capsule() -> None:
    src = np.arange(12, dtype=np.int64).reshape(3, 4)
    y = mx.nd.from_dlpack(src)
    assert y.dtype == np.int64 and y.shape == (3, 4)
    np.testing.assert_array_equal(y.asnumpy(), src)
    cap = mx.nd.ones((2, 2)).to_dlpack_for_read()
    z = mx.nd.from_dlpack(cap)
    np.testing.assert_array_equal(z.asnumpy(), np.ones((2, 2)))
    with pytest.raises(mx.MXNetError, match="already used"):
        mx.nd.from_dlpack(cap)
    # Each dtype round-trips.
    for dtype in ["float32", "float64", "int32", "int64", "uint8"]:
        a = mx.nd.array(np.arange(5), dtype=dtype)
        back = mx.nd.from_dlpack(a.to_dlpack_for_write())
        assert back.dtype == np.dtype(dtype).type
        np.testing.assert_array_equal(back.asnumpy(), np.arange(5).astype(dtype))


def test_unsupported_tensors_are_refused() -> None:
    with pytest.raises(mx.MXNetError, match="dtype"):
        mx.nd.from_dlpack(np.arange(3, dtype=np.int16))
    with pytest.raises(mx.MXNetError, match="row-major"):
        mx.nd.from_dlpack(np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2])
    with pytest.raises(mx.MXNetError, match="capsule"):
        mx.nd.from_dlpack(object())


def test_an_unconsumed_capsule_is_freed() -> None:
    for _ in range(200):
        cap = mx.nd.zeros((64, 64)).to_dlpack_for_read()
        del cap
    gc.collect()
