"""mx.nd.NDArray against numpy: creation, arithmetic with broadcasting and scalars (plain,
reflected, in place), comparisons, views, copies, dtypes, indexing, and the generated op
functions. The cases follow the subjects of MXNet 1.9.1's test_ndarray.py."""

from __future__ import annotations

import mxrs as mx
import numpy as np
import pytest


def same(a: mx.nd.NDArray, b: np.ndarray, tol: float = 1e-6) -> None:
    np.testing.assert_allclose(a.asnumpy(), b, rtol=tol, atol=tol)


def test_creation_matches_numpy() -> None:
    a = np.random.uniform(-1, 1, (3, 4)).astype(np.float32)
    x = mx.nd.array(a)
    assert x.shape == (3, 4) and x.dtype == np.float32 and x.size == 12 and x.ndim == 2
    assert x.context == mx.cpu(0)
    same(x, a)
    same(mx.nd.zeros((2, 3)), np.zeros((2, 3)))
    same(mx.nd.ones(4), np.ones(4))
    same(mx.nd.full((2, 2), 7.5), np.full((2, 2), 7.5))
    same(mx.nd.arange(2, 11, 3), np.arange(2, 11, 3))
    same(mx.nd.zeros_like(x), np.zeros((3, 4)))
    same(mx.nd.ones_like(x), np.ones((3, 4)))
    assert mx.nd.empty((5, 2)).shape == (5, 2)
    # Lists and numpy arrays of any dtype default to float32, as in MXNet 1.9.1.
    assert mx.nd.array([1, 2, 3]).dtype == np.float32
    assert mx.nd.array(np.arange(3, dtype=np.int64)).dtype == np.float32
    assert mx.nd.array(np.arange(3, dtype=np.int64), dtype="int64").dtype == np.int64
    assert mx.nd.array([1, 2], dtype="float64").dtype == np.float64


@pytest.mark.parametrize(
    "shape_a, shape_b", [((3, 4), (3, 4)), ((3, 4), (1, 4)), ((2, 3, 4), (3, 1)), ((5,), (1,))]
)
def test_arithmetic_broadcasts_as_numpy(shape_a: tuple, shape_b: tuple) -> None:
    a = np.random.uniform(0.5, 2, shape_a).astype(np.float32)
    b = np.random.uniform(0.5, 2, shape_b).astype(np.float32)
    x, y = mx.nd.array(a), mx.nd.array(b)
    same(x + y, a + b)
    same(x - y, a - b)
    same(x * y, a * b)
    same(x / y, a / b, 1e-5)
    same(x**y, a**b, 1e-5)
    same(x % y, np.mod(a, b), 1e-5)
    same(mx.nd.broadcast_maximum(x, y), np.maximum(a, b))


def test_scalars_plain_and_reflected() -> None:
    a = np.random.uniform(0.5, 2, (4, 3)).astype(np.float32)
    x = mx.nd.array(a)
    same(x + 2, a + 2)
    same(2 + x, 2 + a)
    same(x - 2, a - 2)
    same(2 - x, 2 - a)
    same(x * 3, a * 3)
    same(3 * x, 3 * a)
    same(x / 4, a / 4)
    same(4 / x, 4 / a, 1e-5)
    same(x**2, a**2, 1e-5)
    same(2**x, 2**a, 1e-5)
    same(-x, -a)
    same(abs(-x), a)


def test_operators_take_numpy_operands_and_refuse_other_types() -> None:
    # Arrays and Python numbers take the native path; the rest the Python rule: both give
    # arrays of the one array type, with numpy's values.
    a = np.random.uniform(0.5, 2, (2, 3)).astype(np.float32)
    x = mx.nd.array(a)
    for got, want in [
        (x + np.float32(2), a + 2),
        (np.float64(3) - x, 3 - a),
        (x * np.ones((2, 3), np.float32), a),
        (np.full((2, 3), 2, np.float32) / x, 2 / a),
        (True + x, a + 1),
        (x + 2**40, a + np.float32(2**40)),
    ]:
        assert type(got) is mx.nd.NDArray
        same(got, want, 1e-5)
    with pytest.raises(TypeError, match="cannot be combined"):
        _ = x + "1"
    with pytest.raises(TypeError, match="cannot be combined"):
        _ = [1] - x


def test_an_array_keeps_its_identity_when_a_gradient_is_attached() -> None:
    x = mx.nd.array([1.0, 2.0])
    y = x * 1
    x.attach_grad()
    with mx.autograd.record():
        z = x * x + y
    z.backward()
    same(x.grad, np.array([2.0, 4.0], np.float32))
    assert isinstance(x, mx.nd.NDArray) and x.handle is x


def test_in_place_operators_write_the_same_array() -> None:
    a = np.random.uniform(1, 2, (3, 3)).astype(np.float32)
    x = mx.nd.array(a)
    handle = x.handle
    x += 1
    x *= mx.nd.array(a)
    x -= 0.5
    x /= 2
    assert x.handle is handle
    same(x, ((a + 1) * a - 0.5) / 2, 1e-5)


def test_comparisons_give_ones_and_zeros() -> None:
    a = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    b = np.array([[3, 2, 1], [4, 0, 9]], dtype=np.float32)
    x, y = mx.nd.array(a), mx.nd.array(b)
    same(x == y, (a == b).astype(np.float32))
    same(x != y, (a != b).astype(np.float32))
    same(x > y, (a > b).astype(np.float32))
    same(x >= 2, (a >= 2).astype(np.float32))
    same(x < 4, (a < 4).astype(np.float32))
    same(x <= y, (a <= b).astype(np.float32))


def test_reshape_is_a_view_and_copies_are_not() -> None:
    x = mx.nd.arange(12)
    v = x.reshape((3, -1))
    assert v.shape == (3, 4)
    assert x.reshape(2, -1).shape == (2, 6)
    assert v.reshape((0, 2, -1)).shape == (3, 2, 2)
    v[:] = 1
    same(x, np.ones(12))
    c = x.copy()
    c[:] = 5
    same(x, np.ones(12))
    same(c, np.full(12, 5))
    with pytest.raises(mx.MXNetError):
        x.reshape((5, -1))


def test_copyto_astype_and_contexts() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = mx.nd.array(a)
    y = mx.nd.zeros((2, 3))
    x.copyto(y)
    same(y, a)
    z = x.copyto(mx.cpu(0))
    same(z, a)
    assert x.as_in_context(mx.cpu(0)) is x
    i = x.astype("int32")
    assert i.dtype == np.int32
    np.testing.assert_array_equal(i.asnumpy(), a.astype(np.int32))
    assert x.astype(np.float32, copy=False) is x
    assert mx.nd.array([3.5]).asscalar() == 3.5
    with pytest.raises(ValueError):
        x.asscalar()
    np.testing.assert_array_equal(np.asarray(x), a)
    assert x.tolist() == a.tolist()


def test_basic_indexing_matches_numpy() -> None:
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    x = mx.nd.array(a)
    for key in [
        1,
        -1,
        slice(1, 3),
        slice(None, None, 2),
        (1, 2),
        (slice(None), 1),
        (Ellipsis, 2),
        (1, slice(1, 4, 2), slice(None, None, -1)),
        (None, 1),
        (slice(0, 2), None, slice(1, 3)),
        (0, 1, 2),
    ]:
        want = a[key]
        got = x[key]
        want = want.reshape(1) if want.ndim == 0 else want
        assert got.shape == want.shape, key
        same(got, want)


def test_first_axis_indexing_gives_views() -> None:
    x = mx.nd.zeros((4, 3))
    x[1] = 5
    x[2:4] = mx.nd.ones((2, 3))
    row = x[0]
    row[:] = 7
    want = np.zeros((4, 3))
    want[0], want[1], want[2:4] = 7, 5, 1
    same(x, want)


def test_setitem_elsewhere_and_advanced_indices() -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = mx.nd.array(a)
    x[:, 1:3] = 0
    a[:, 1:3] = 0
    same(x, a)
    x[1, ::2] = mx.nd.array([9, 9, 9])
    a[1, ::2] = 9
    same(x, a)
    idx = mx.nd.array([3, 0], dtype="int64")
    same(x[idx], a[[3, 0]])
    rows, cols = mx.nd.array([0, 2], dtype="int64"), mx.nd.array([5, 1], dtype="int64")
    same(x[rows, cols], a[[0, 2], [5, 1]])


def test_reductions_and_fluent_methods() -> None:
    a = np.random.uniform(-1, 1, (3, 4, 5)).astype(np.float32)
    x = mx.nd.array(a)
    same(x.sum(), np.array([a.sum()]), 1e-5)
    same(x.sum(axis=1), a.sum(axis=1), 1e-5)
    same(x.mean(axis=(0, 2), keepdims=True), a.mean(axis=(0, 2), keepdims=True), 1e-5)
    same(x.max(axis=2), a.max(axis=2))
    same(x.argmax(axis=1), a.argmax(axis=1).astype(np.float32))
    same(x.T, a.T)
    same(x.transpose((1, 0, 2)), a.transpose(1, 0, 2))
    same(x.exp(), np.exp(a), 1e-5)
    same(x.clip(-0.5, 0.5), np.clip(a, -0.5, 0.5))
    same(x.softmax(), np.exp(a) / np.exp(a).sum(-1, keepdims=True), 1e-5)


def test_generated_op_functions_take_mxnet_arguments() -> None:
    data = np.random.uniform(-1, 1, (2, 5)).astype(np.float32)
    w = np.random.uniform(-1, 1, (3, 5)).astype(np.float32)
    b = np.random.uniform(-1, 1, (3,)).astype(np.float32)
    y = mx.nd.FullyConnected(mx.nd.array(data), mx.nd.array(w), mx.nd.array(b), num_hidden=3)
    same(y, data @ w.T + b, 1e-5)
    y2 = mx.nd.FullyConnected(
        data=mx.nd.array(data), weight=mx.nd.array(w), num_hidden=3, no_bias=True
    )
    same(y2, data @ w.T, 1e-5)
    out = mx.nd.zeros((2, 5))
    r = mx.nd.relu(mx.nd.array(data), out=out)
    assert r is out
    same(out, np.maximum(data, 0))
    c = mx.nd.concat(mx.nd.ones((2, 2)), mx.nd.zeros((2, 1)), dim=1)
    same(c, np.concatenate([np.ones((2, 2)), np.zeros((2, 1))], axis=1))
    parts = mx.nd.split(mx.nd.arange(6).reshape((2, 3)), num_outputs=3, axis=1)
    assert len(parts) == 3 and parts[2].shape == (2, 1)
    same(mx.nd.add_n(mx.nd.ones(3), mx.nd.ones(3), mx.nd.ones(3)), np.full(3, 3))
    assert "num_hidden : int, required" in mx.nd.FullyConnected.__doc__
    assert hasattr(mx.nd._internal, "_plus_scalar")
    assert hasattr(mx.nd.contrib, "BilinearResize2D")


def test_every_signed_op_is_a_function() -> None:
    from mxrs import _native

    for sig in _native.signatures():
        for name in [sig["name"], *sig["aliases"]]:
            assert callable(getattr(mx.nd.op, name)), name


def test_bad_calls_raise_mxnet_error_with_the_runtime_message() -> None:
    x = mx.nd.ones((1, 1, 3, 3))
    with pytest.raises(mx.MXNetError, match="unknown attribute 'kernal'"):
        mx.nd.Convolution(x, x, kernal=(3, 3), num_filter=1, no_bias=True)
    with pytest.raises(mx.MXNetError, match="num_filter is required"):
        mx.nd.Convolution(x, x, kernel=(3, 3), no_bias=True)
    with pytest.raises(mx.MXNetError, match="layout"):
        mx.nd.Convolution(x, x, kernel=(3, 3), num_filter=1, no_bias=True, layout="XYZW")
    with pytest.raises(mx.MXNetError):
        mx.nd.ones((2, 3)) + mx.nd.ones((4, 5))
    assert issubclass(mx.base.MXNetError, Exception)


def test_a_failing_op_raises_when_its_result_is_read() -> None:
    table = mx.nd.ones((3, 2))
    bad = mx.nd.array([0, 7], dtype="int64")
    y = mx.nd.take(table, bad, mode="raise")  # returns at once: the engine runs it later
    with pytest.raises(mx.MXNetError, match="index 7"):
        y.asnumpy()
    # The runtime goes on working after the failure.
    same(mx.nd.ones(2) + 1, np.full(2, 2))
    mx.nd.waitall()


def test_random_is_seeded_and_in_range() -> None:
    mx.random.seed(42)
    a = mx.nd.random.uniform(-2, 3, shape=(1000,)).asnumpy()
    mx.random.seed(42)
    b = mx.nd.random.uniform(-2, 3, shape=(1000,)).asnumpy()
    np.testing.assert_array_equal(a, b)
    assert a.min() >= -2 and a.max() < 3
    n = mx.nd.random.normal(1.0, 2.0, shape=(20000,)).asnumpy()
    assert abs(n.mean() - 1.0) < 0.1 and abs(n.std() - 2.0) < 0.1
    r = mx.nd.random.randint(0, 5, shape=(500,))
    assert r.dtype == np.int32
    v = r.asnumpy()
    assert v.min() >= 0 and v.max() <= 4 and len(set(v.tolist())) == 5
