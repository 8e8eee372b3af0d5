"""Common NN ops, as MXNet 1.9.1's test_operator.py checks them: forward against numpy, and
symbolic gradients against central differences (``check_numeric_gradient``) in float64."""

from __future__ import annotations

import mxrs as mx
import numpy as np
import pytest
from mxrs.test_utils import assert_almost_equal, check_numeric_gradient, check_symbolic_forward

RNG = np.random.RandomState(1234)


def u(*shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape)


@pytest.mark.parametrize(
    "act, ref",
    [
        ("relu", lambda x: np.maximum(x, 0)),
        ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
        ("tanh", np.tanh),
        ("softrelu", lambda x: np.log1p(np.exp(x))),
        ("softsign", lambda x: x / (1 + np.abs(x))),
    ],
)
def test_activation(act: str, ref) -> None:
    x = u(3, 4) + 0.05 * np.sign(u(3, 4))  # away from relu's kink
    sym = mx.sym.Activation(mx.sym.var("x"), act_type=act)
    check_symbolic_forward(sym, [x], [ref(x)], rtol=1e-5, atol=1e-6, dtype=np.float64)
    check_numeric_gradient(sym, [x], numeric_eps=1e-6, rtol=1e-5, dtype=np.float64)


def test_leaky_relu_and_elu() -> None:
    x = u(4, 5)
    x[np.abs(x) < 0.05] = 0.3
    leaky = mx.sym.LeakyReLU(mx.sym.var("x"), act_type="leaky", slope=0.1)
    check_symbolic_forward(leaky, [x], [np.where(x > 0, x, 0.1 * x)], dtype=np.float64)
    check_numeric_gradient(leaky, [x], numeric_eps=1e-6, rtol=1e-5, dtype=np.float64)
    elu = mx.sym.LeakyReLU(mx.sym.var("x"), act_type="elu", slope=0.5)
    check_symbolic_forward(elu, [x], [np.where(x > 0, x, 0.5 * (np.exp(x) - 1))], dtype=np.float64)
    check_numeric_gradient(elu, [x], numeric_eps=1e-6, rtol=1e-5, dtype=np.float64)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax(axis: int) -> None:
    x = u(3, 4, 5)
    e = np.exp(x - x.max(axis, keepdims=True))
    sm = e / e.sum(axis, keepdims=True)
    check_symbolic_forward(
        mx.sym.softmax(mx.sym.var("x"), axis=axis), [x], [sm], rtol=1e-6, dtype=np.float64
    )
    check_symbolic_forward(
        mx.sym.log_softmax(mx.sym.var("x"), axis=axis),
        [x],
        [np.log(sm)],
        rtol=1e-6,
        dtype=np.float64,
    )
    check_numeric_gradient(
        mx.sym.softmax(mx.sym.var("x"), axis=axis),
        [x],
        numeric_eps=1e-6,
        rtol=1e-5,
        dtype=np.float64,
    )


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int) -> np.ndarray:
    n, _, h, wd = x.shape
    f, _c, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, f, ho, wo))
    for i in range(ho):
        for j in range(wo):
            patch = xp[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3])) + b
    return out


@pytest.mark.parametrize("stride, pad", [(1, 0), (2, 1)])
def test_convolution(stride: int, pad: int) -> None:
    x, w, b = u(2, 3, 6, 5), u(4, 3, 3, 3), u(4)
    sym = mx.sym.Convolution(
        mx.sym.var("x"),
        kernel=(3, 3),
        stride=(stride, stride),
        pad=(pad, pad),
        num_filter=4,
        name="c",
    )
    loc = {"x": x, "c_weight": w, "c_bias": b}
    check_symbolic_forward(sym, loc, [conv2d(x, w, b, stride, pad)], rtol=1e-6, dtype=np.float64)
    check_numeric_gradient(sym, loc, numeric_eps=1e-6, rtol=1e-5, dtype=np.float64)


@pytest.mark.parametrize("pool_type", ["max", "avg"])
def test_pooling(pool_type: str) -> None:
    x = u(2, 3, 6, 6)
    sym = mx.sym.Pooling(mx.sym.var("x"), kernel=(2, 2), stride=(2, 2), pool_type=pool_type)
    blocks = x.reshape(2, 3, 3, 2, 3, 2)
    want = blocks.max(axis=(3, 5)) if pool_type == "max" else blocks.mean(axis=(3, 5))
    check_symbolic_forward(sym, [x], [want], dtype=np.float64)
    check_numeric_gradient(sym, [x], numeric_eps=1e-6, rtol=1e-5, dtype=np.float64)
    g = mx.sym.Pooling(mx.sym.var("x"), global_pool=True, pool_type=pool_type, kernel=(1, 1))
    full = x.max(axis=(2, 3)) if pool_type == "max" else x.mean(axis=(2, 3))
    check_symbolic_forward(g, [x], [full[:, :, None, None]], dtype=np.float64)


def test_batch_norm_training_forward_and_gradient() -> None:
    x, gamma, beta = u(4, 3, 2, 2), u(3, lo=0.5, hi=1.5), u(3)
    sym = mx.sym.BatchNorm(mx.sym.var("x"), fix_gamma=False, eps=1e-5, name="bn")
    loc = {"x": x, "bn_gamma": gamma, "bn_beta": beta}
    aux = {"bn_moving_mean": np.zeros(3), "bn_moving_var": np.ones(3)}
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    want = (x - mean) / np.sqrt(var + 1e-5) * gamma[None, :, None, None] + beta[None, :, None, None]
    ex = sym.bind(
        mx.cpu(),
        {k: mx.nd.array(v, dtype="float64") for k, v in loc.items()},
        aux_states={k: mx.nd.array(v, dtype="float64") for k, v in aux.items()},
        grad_req="null",
    )
    assert_almost_equal(ex.forward(is_train=True)[0], want, rtol=1e-6, atol=1e-8)
    check_numeric_gradient(
        sym, loc, aux_states=aux, numeric_eps=1e-6, rtol=1e-4, atol=1e-6, dtype=np.float64
    )


def test_fully_connected_without_flatten_and_embedding() -> None:
    x, w, b = u(2, 3, 4), u(5, 4), u(5)
    sym = mx.sym.FullyConnected(mx.sym.var("x"), num_hidden=5, flatten=False, name="f")
    loc = {"x": x, "f_weight": w, "f_bias": b}
    check_symbolic_forward(sym, loc, [x @ w.T + b], rtol=1e-6, dtype=np.float64)
    check_numeric_gradient(sym, loc, numeric_eps=1e-6, rtol=1e-5, dtype=np.float64)
    idx, table = np.array([[0, 3], [2, 2]], dtype=np.float64), u(4, 3)
    emb = mx.sym.Embedding(mx.sym.var("i"), input_dim=4, output_dim=3, name="e")
    check_symbolic_forward(
        emb, {"i": idx, "e_weight": table}, [table[idx.astype(int)]], dtype=np.float64
    )


def test_concat_split_transpose_and_reductions_gradients() -> None:
    a, b = u(2, 3), u(2, 2)
    cat = mx.sym.concat(mx.sym.var("a"), mx.sym.var("b"), dim=1)
    check_symbolic_forward(cat, [a, b], [np.concatenate([a, b], 1)], dtype=np.float64)
    check_numeric_gradient(cat * cat, [a, b], numeric_eps=1e-6, rtol=1e-5, dtype=np.float64)
    x = u(2, 3, 4)
    parts = mx.sym.SliceChannel(mx.sym.var("x"), num_outputs=2, axis=2)
    check_symbolic_forward(parts, [x], np.split(x, 2, axis=2), dtype=np.float64)
    check_numeric_gradient(
        mx.sym.transpose(mx.sym.var("x"), axes=(2, 0, 1)),
        [x],
        numeric_eps=1e-6,
        rtol=1e-5,
        dtype=np.float64,
    )
    for op in ("sum", "mean", "max"):
        s = getattr(mx.sym, op)(mx.sym.var("x"), axis=1)
        check_numeric_gradient(s, [x], numeric_eps=1e-6, rtol=1e-5, dtype=np.float64)
    y = u(1, 3, 1)
    check_numeric_gradient(
        mx.sym.broadcast_mul(mx.sym.var("x"), mx.sym.var("y")),
        [x, y],
        numeric_eps=1e-6,
        rtol=1e-5,
        dtype=np.float64,
    )


def test_dropout_scales_what_it_keeps() -> None:
    x = mx.nd.ones((2000,))
    with mx.autograd.train_mode():
        y = mx.nd.Dropout(x, p=0.25).asnumpy()
    kept = y[y != 0]
    np.testing.assert_allclose(kept, 1 / 0.75)
    assert 0.2 < (y == 0).mean() < 0.3
    np.testing.assert_array_equal(mx.nd.Dropout(x, p=0.25).asnumpy(), np.ones(2000))
