"""mx.autograd: recording, the two mode flags, backward with and without head gradients,
gradient accumulation, grad(), mark_variables, and numerical gradients. The cases follow the
subjects of MXNet 1.9.1's test_autograd.py."""

from __future__ import annotations

import mxrs as mx
import numpy as np
import pytest


def same(a: mx.nd.NDArray, b: np.ndarray, tol: float = 1e-5) -> None:
    np.testing.assert_allclose(a.asnumpy(), b, rtol=tol, atol=tol)


def test_backward_of_a_product_and_a_sum() -> None:
    a = np.random.uniform(-1, 1, (3, 4)).astype(np.float32)
    x = mx.nd.array(a)
    x.attach_grad()
    with mx.autograd.record():
        y = (x * x + 3 * x).sum()
    y.backward()
    same(x.grad, 2 * a + 3)


def test_head_gradients_scale_the_result() -> None:
    a = np.random.uniform(-1, 1, (5,)).astype(np.float32)
    x = mx.nd.array(a)
    x.attach_grad()
    with mx.autograd.record():
        y = x.exp()
    head = np.random.uniform(-1, 1, (5,)).astype(np.float32)
    y.backward(mx.nd.array(head))
    same(x.grad, head * np.exp(a))


def test_grad_req_add_accumulates() -> None:
    x = mx.nd.array([1.0, 2.0])
    x.attach_grad(grad_req="add")
    for _ in range(3):
        with mx.autograd.record():
            y = (x * x).sum()
        y.backward()
    same(x.grad, 3 * 2 * np.array([1.0, 2.0]))


def test_modes_are_separate_flags() -> None:
    assert not mx.autograd.is_recording() and not mx.autograd.is_training()
    with mx.autograd.record():
        assert mx.autograd.is_recording() and mx.autograd.is_training()
        with mx.autograd.pause():
            assert not mx.autograd.is_recording() and not mx.autograd.is_training()
        with mx.autograd.predict_mode():
            assert mx.autograd.is_recording() and not mx.autograd.is_training()
    with mx.autograd.record(train_mode=False):
        assert mx.autograd.is_recording() and not mx.autograd.is_training()
    with mx.autograd.train_mode():
        assert not mx.autograd.is_recording() and mx.autograd.is_training()
    assert not mx.autograd.is_recording() and not mx.autograd.is_training()
    assert mx.autograd.set_recording(True) is False
    assert mx.autograd.set_recording(False) is True


def test_dropout_follows_training_mode_without_recording() -> None:
    x = mx.nd.ones((1000,))
    same(mx.nd.Dropout(x, p=0.5), np.ones(1000))
    with mx.autograd.train_mode():
        y = mx.nd.Dropout(x, p=0.5).asnumpy()
    assert 300 < (y == 0).sum() < 700
    np.testing.assert_allclose(y[y != 0], 2.0)


def test_grad_returns_new_arrays() -> None:
    a = np.random.uniform(0.5, 1.5, (4,)).astype(np.float32)
    x = mx.nd.array(a)
    x.attach_grad()
    with mx.autograd.record():
        y = (x.log() * 2).sum()
    (g,) = mx.autograd.grad(y, [x])
    same(g, 2 / a)


def test_mark_variables_writes_into_the_given_arrays() -> None:
    x = mx.nd.array([1.0, 2.0, 3.0])
    g = mx.nd.zeros((3,))
    mx.autograd.mark_variables([x], [g])
    with mx.autograd.record():
        y = (x * x * x).sum()
    y.backward()
    same(g, 3 * np.array([1.0, 4.0, 9.0]))
    with pytest.raises(mx.MXNetError, match="mark_variables"):
        mx.autograd.mark_variables([x], [mx.nd.zeros((4,))])


def test_layers_match_numerical_gradients() -> None:
    rng = np.random.RandomState(3)
    data = rng.uniform(-1, 1, (2, 3, 5, 5))
    weight = rng.uniform(-1, 1, (4, 3, 3, 3))

    def loss(d: np.ndarray, w: np.ndarray, record: bool = False) -> mx.nd.NDArray:
        dd, ww = mx.nd.array(d, dtype="float64"), mx.nd.array(w, dtype="float64")
        if record:
            ww.attach_grad()
            with mx.autograd.record():
                y = mx.nd.Convolution(dd, ww, kernel=(3, 3), pad=(1, 1), num_filter=4, no_bias=True)
                out = (y.tanh() * y).sum()
            out.backward()
            return ww.grad
        y = mx.nd.Convolution(dd, ww, kernel=(3, 3), pad=(1, 1), num_filter=4, no_bias=True)
        return (y.tanh() * y).sum()

    analytic = loss(data, weight, record=True).asnumpy()
    eps = 1e-6
    for idx in [(0, 0, 0, 0), (1, 2, 1, 1), (3, 1, 2, 0)]:
        w1, w2 = weight.copy(), weight.copy()
        w1[idx] += eps
        w2[idx] -= eps
        numeric = (loss(data, w1).asscalar() - loss(data, w2).asscalar()) / (2 * eps)
        assert abs(numeric - analytic[idx]) < 1e-5 * max(1, abs(numeric)), idx


def test_writing_a_recorded_array_in_place_is_refused() -> None:
    x = mx.nd.ones((2,))
    x.attach_grad()
    with mx.autograd.record(), pytest.raises(mx.MXNetError, match="in place"):
        x += 1
