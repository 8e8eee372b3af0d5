"""Executors: simple_bind and bind, forward with keyword inputs, backward with and without
head gradients against autograd and numpy, gradient requests, copy_params_from, reshape, and
an MXNet 1.9.1 checkpoint run to MXNet's own outputs, gradients and running statistics. The
cases follow the subjects of MXNet 1.9.1's test_executor.py."""

from __future__ import annotations

from pathlib import Path

import mxrs as mx
import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "ndarray_ops" / "tests" / "data" / "mxnet"


def test_simple_bind_forward_backward_matches_numpy() -> None:
    x, w = mx.sym.var("x"), mx.sym.var("w")
    y = mx.sym.dot(x, w) * mx.sym.var("s")
    ex = y.simple_bind(mx.cpu(), x=(3, 4), w=(4, 2), s=(3, 2))
    a = np.random.uniform(-1, 1, (3, 4)).astype(np.float32)
    b = np.random.uniform(-1, 1, (4, 2)).astype(np.float32)
    s = np.random.uniform(-1, 1, (3, 2)).astype(np.float32)
    out = ex.forward(is_train=True, x=mx.nd.array(a), w=mx.nd.array(b), s=mx.nd.array(s))
    np.testing.assert_allclose(out[0].asnumpy(), (a @ b) * s, rtol=1e-5, atol=1e-6)
    head = np.random.uniform(-1, 1, (3, 2)).astype(np.float32)
    ex.backward(mx.nd.array(head))
    np.testing.assert_allclose(ex.grad_dict["x"].asnumpy(), (head * s) @ b.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ex.grad_dict["w"].asnumpy(), a.T @ (head * s), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ex.grad_dict["s"].asnumpy(), head * (a @ b), rtol=1e-5, atol=1e-6)
    assert [g is not None for g in ex.grad_arrays] == [True, True, True]


def test_bind_with_given_arrays_and_grad_reqs() -> None:
    x = mx.sym.var("x")
    y = mx.sym.sum(mx.sym.square(x))
    xv = mx.nd.array([1.0, 2.0, 3.0])
    gv = mx.nd.zeros((3,))
    ex = y.bind(mx.cpu(), {"x": xv}, args_grad={"x": gv}, grad_req="add")
    for _ in range(2):
        ex.forward(is_train=True)
        ex.backward(mx.nd.ones((1,)))
    np.testing.assert_allclose(gv.asnumpy(), 2 * 2 * np.array([1.0, 2.0, 3.0]))
    # Without gradient arrays, bind computes no gradients, as MXNet's.
    ex2 = y.bind(mx.cpu(), [xv])
    assert ex2.grad_dict == {}
    np.testing.assert_allclose(ex2.forward()[0].asnumpy(), [14.0])


def test_softmax_output_starts_its_own_gradient() -> None:
    data = mx.sym.var("data")
    out = mx.sym.SoftmaxOutput(data, name="sm")
    ex = out.simple_bind(mx.cpu(), data=(2, 3))
    logits = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.0]], dtype=np.float32)
    label = np.array([2, 0], dtype=np.float32)
    ex.forward(is_train=True, data=mx.nd.array(logits), sm_label=mx.nd.array(label))
    ex.backward()
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    want = p.copy()
    want[[0, 1], [2, 0]] -= 1
    np.testing.assert_allclose(ex.grad_dict["data"].asnumpy(), want, rtol=1e-5, atol=1e-6)


def test_executor_agrees_with_autograd() -> None:
    rng = np.random.RandomState(5)
    a = rng.uniform(-1, 1, (4, 6)).astype(np.float32)
    w = rng.uniform(-1, 1, (5, 6)).astype(np.float32)
    b = rng.uniform(-1, 1, (5,)).astype(np.float32)
    net = mx.sym.sum(mx.sym.tanh(mx.sym.FullyConnected(mx.sym.var("x"), num_hidden=5, name="f")))
    ex = net.simple_bind(mx.cpu(), x=(4, 6))
    ex.copy_params_from({"f_weight": mx.nd.array(w), "f_bias": mx.nd.array(b)})
    ex.forward(is_train=True, x=mx.nd.array(a))
    ex.backward(mx.nd.ones((1,)))
    xw = mx.nd.array(w)
    xw.attach_grad()
    with mx.autograd.record():
        y = mx.nd.FullyConnected(mx.nd.array(a), xw, mx.nd.array(b), num_hidden=5).tanh().sum()
    y.backward()
    np.testing.assert_allclose(ex.outputs[0].asnumpy(), y.asnumpy(), rtol=1e-5)
    np.testing.assert_allclose(
        ex.grad_dict["f_weight"].asnumpy(), xw.grad.asnumpy(), rtol=1e-5, atol=1e-6
    )


def test_reshape_keeps_parameters() -> None:
    net = mx.sym.FullyConnected(mx.sym.var("x"), num_hidden=2, name="f")
    ex = net.simple_bind(mx.cpu(), x=(1, 3))
    ex.arg_dict["f_weight"][:] = 1
    ex.arg_dict["f_bias"][:] = 0.5
    big = ex.reshape(x=(4, 3))
    out = big.forward(x=mx.nd.ones((4, 3)))[0]
    np.testing.assert_allclose(out.asnumpy(), np.full((4, 2), 3.5))


def test_bad_binds_raise() -> None:
    net = mx.sym.FullyConnected(mx.sym.var("x"), num_hidden=2, name="f")
    with pytest.raises(mx.MXNetError):
        net.simple_bind(mx.cpu())  # nothing gives the data's shape
    ex = net.simple_bind(mx.cpu(), x=(1, 3))
    with pytest.raises(mx.MXNetError, match="no argument named"):
        ex.forward(y=mx.nd.ones((1, 3)))
    with pytest.raises(mx.MXNetError):
        ex.copy_params_from({"f_weight": mx.nd.ones((5, 5))})


def test_an_mxnet_checkpoint_computes_what_mxnet_computed() -> None:
    sym, arg, aux = mx.model.load_checkpoint(str(FIXTURES / "net64"), 1)
    want = mx.nd.load(str(FIXTURES / "net64-expected.nd"))
    data = want["data"]
    reqs = {n: "write" for n in sym.list_arguments()}
    types = {n: "float64" for n in sym.list_arguments() + sym.list_auxiliary_states()}
    ex = sym.simple_bind(mx.cpu(), grad_req=reqs, type_dict=types, data=data.shape)
    ex.copy_params_from(arg, aux)

    def close(got: mx.nd.NDArray, key: str) -> None:
        np.testing.assert_allclose(
            got.asnumpy(), want[key].asnumpy(), rtol=1e-9, atol=1e-11, err_msg=key
        )

    close(ex.forward(is_train=False, data=data)[0], "infer:output")
    close(ex.forward(is_train=True, data=data)[0], "train:output")
    ex.backward(want["head_grad"])
    for key in want:
        kind, _, name = key.partition(":")
        if kind == "grad":
            close(ex.grad_dict[name], key)
        elif kind == "aux_after":
            close(ex.aux_dict[name], key)


def test_checkpoints_round_trip(tmp_path: Path) -> None:
    sym, arg, aux = mx.model.load_checkpoint(str(FIXTURES / "net"), 1)
    mx.model.save_checkpoint(str(tmp_path / "copy"), 3, sym, arg, aux)
    sym2, arg2, aux2 = mx.model.load_checkpoint(str(tmp_path / "copy"), 3)
    assert sym2.tojson() == sym.tojson()
    assert sorted(arg2) == sorted(arg) and sorted(aux2) == sorted(aux)
    for k in arg:
        np.testing.assert_array_equal(arg2[k].asnumpy(), arg[k].asnumpy())


def _conv_bn_net() -> mx.sym.Symbol:
    x = mx.sym.var("data")
    for k in range(3):
        c = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=8, name=f"conv{k}")
        b = mx.sym.BatchNorm(c, fix_gamma=False, name=f"bn{k}")
        x = mx.sym.Activation(b, act_type="relu", name=f"relu{k}") + (x if k else 0)
    return mx.sym.SoftmaxOutput(mx.sym.FullyConnected(x, num_hidden=4, name="fc"), name="sm")


def _train_step(mirror: str | None) -> dict[str, np.ndarray]:
    net = _conv_bn_net()
    ex = net.simple_bind(mx.cpu(), mirror=mirror, data=(2, 8, 8, 8))
    rng = np.random.RandomState(0)
    for name in sorted(ex.arg_dict):
        arr = ex.arg_dict[name]
        arr[:] = (
            rng.randint(0, 4, arr.shape) if name == "sm_label" else rng.uniform(-1, 1, arr.shape)
        )
    ex.forward(is_train=True)
    ex.backward()
    got = {f"grad:{k}": v.asnumpy() for k, v in ex.grad_dict.items() if v is not None}
    got.update({f"aux:{k}": v.asnumpy() for k, v in ex.aux_dict.items()})
    return got


def test_mirror_recomputes_and_leaves_gradients_and_statistics_bit_equal() -> None:
    want = _train_step(None)
    for mirror in ("cheap", "auto:10"):
        got = _train_step(mirror)
        assert got.keys() == want.keys()
        for key, value in want.items():
            np.testing.assert_array_equal(got[key], value, err_msg=f"{mirror}: {key}")
    with pytest.raises(ValueError, match="not `off`, `auto`"):
        _conv_bn_net().simple_bind(mx.cpu(), mirror="fastest", data=(2, 8, 8, 8))
