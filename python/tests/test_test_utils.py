"""mx.test_utils: the checks MXNet's tests are written with, used here on a few ops, and
shown to fail when the expectation is wrong."""

from __future__ import annotations

import mxrs as mx
import numpy as np
import pytest
from mxrs import test_utils as tu


def test_comparisons_and_random_helpers() -> None:
    assert tu.same(mx.nd.ones(3), np.ones(3))
    assert tu.almost_equal(mx.nd.array([1.0]), np.array([1.0 + 1e-7]))
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(mx.nd.array([1.0]), np.array([1.1]))
    tu.assert_exception(mx.nd.ones((2,)).asscalar, ValueError)
    with pytest.raises(AssertionError):
        tu.assert_exception(lambda: None, ValueError)
    s = tu.rand_shape_nd(4, 5)
    assert len(s) == 4 and all(1 <= d <= 5 for d in s)
    assert tu.rand_ndarray(tu.rand_shape_2d()).ndim == 2
    tu.set_default_context(mx.cpu(0))
    assert tu.default_context() == mx.cpu(0)


def test_symbolic_forward_and_backward_checks() -> None:
    x = mx.sym.var("x")
    y = mx.sym.square(x) * 3
    a = np.random.uniform(-1, 1, (3, 4))
    tu.check_symbolic_forward(y, [a], [3 * a * a])
    head = np.random.uniform(-1, 1, (3, 4))
    tu.check_symbolic_backward(y, [a], [head], {"x": 6 * a * head})
    with pytest.raises(AssertionError):
        tu.check_symbolic_forward(y, [a], [2 * a * a])


def test_numeric_gradient_of_layers() -> None:
    data = mx.sym.var("data")
    fc = mx.sym.FullyConnected(data, num_hidden=3, name="fc")
    net = mx.sym.tanh(fc)
    rng = np.random.RandomState(2)
    loc = {
        "data": rng.uniform(-1, 1, (2, 4)),
        "fc_weight": rng.uniform(-1, 1, (3, 4)),
        "fc_bias": rng.uniform(-1, 1, (3,)),
    }
    tu.check_numeric_gradient(net, loc, numeric_eps=1e-6, rtol=1e-5, dtype=np.float64)
    conv = mx.sym.Convolution(data, kernel=(2, 2), num_filter=2, no_bias=True, name="c")
    loc = {"data": rng.uniform(-1, 1, (1, 2, 3, 3)), "c_weight": rng.uniform(-1, 1, (2, 2, 2, 2))}
    tu.check_numeric_gradient(
        mx.sym.sigmoid(conv), loc, numeric_eps=1e-6, rtol=1e-5, dtype=np.float64
    )
