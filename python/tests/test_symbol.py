"""mx.sym: building graphs (default names, variables made for missing inputs, optional inputs
left out by attributes), arithmetic, composition, Group and get_internals, JSON round trips,
shape inference in both directions with the partial cases of MXNet 1.9.1's
test_infer_shape.py, dtype inference, and errors. The cases follow the subjects of MXNet
1.9.1's test_symbol.py."""

from __future__ import annotations

from pathlib import Path

import mxrs as mx
import numpy as np
import pytest


def mlp() -> mx.sym.Symbol:
    data = mx.sym.Variable("data")
    fc1 = mx.sym.FullyConnected(data=data, name="fc1", num_hidden=16)
    act = mx.sym.Activation(fc1, act_type="relu", name="relu1")
    fc2 = mx.sym.FullyConnected(act, name="fc2", num_hidden=4)
    return mx.sym.SoftmaxOutput(fc2, name="softmax")


def test_arguments_outputs_and_auxiliary_states() -> None:
    net = mlp()
    assert net.list_arguments() == [
        "data",
        "fc1_weight",
        "fc1_bias",
        "fc2_weight",
        "fc2_bias",
        "softmax_label",
    ]
    assert net.list_outputs() == ["softmax_output"]
    bn = mx.sym.BatchNorm(mx.sym.var("x"), name="bn")
    assert bn.list_arguments() == ["x", "bn_gamma", "bn_beta"]
    assert bn.list_auxiliary_states() == ["bn_moving_mean", "bn_moving_var"]
    nb = mx.sym.FullyConnected(mx.sym.var("x"), num_hidden=3, no_bias=True, name="nb")
    assert nb.list_arguments() == ["x", "nb_weight"]
    lstm = mx.sym.RNN(mx.sym.var("x"), state_size=4, num_layers=1, mode="lstm", name="r")
    assert lstm.list_arguments() == ["x", "r_parameters", "r_state", "r_state_cell"]


def test_default_names_count_per_op() -> None:
    x = mx.sym.var("x")
    a = mx.sym.relu(x)
    b = mx.sym.relu(x)
    assert a.name != b.name and a.name.startswith("relu") and b.name.startswith("relu")


def test_arithmetic_and_composition() -> None:
    x, y = mx.sym.var("x"), mx.sym.var("y")
    z = (x * 2 + y) / 4 - 1
    ex = z.bind(mx.cpu(), {"x": mx.nd.array([1.0, 2.0]), "y": mx.nd.array([3.0, 5.0])})
    np.testing.assert_allclose(ex.forward()[0].asnumpy(), (np.array([1, 2]) * 2 + [3, 5]) / 4 - 1)
    inner = mx.sym.relu(mx.sym.var("a"))
    outer = mx.sym.exp(mx.sym.var("b"))
    composed = outer(b=inner)
    assert composed.list_arguments() == ["a"]
    out = composed.eval(a=mx.nd.array([-1.0, 1.0]))[0]
    np.testing.assert_allclose(out.asnumpy(), np.exp([0.0, 1.0]), rtol=1e-6)


def test_group_internals_and_indexing() -> None:
    net = mlp()
    internals = net.get_internals()
    assert "fc1_output" in internals.list_outputs()
    fc1 = internals["fc1_output"]
    assert fc1.list_outputs() == ["fc1_output"]
    g = mx.sym.Group([fc1, net])
    assert g.list_outputs() == ["fc1_output", "softmax_output"]
    assert len(g) == 2 and g[1].list_outputs() == ["softmax_output"]
    split = mx.sym.SliceChannel(mx.sym.var("x"), num_outputs=3, name="s")
    assert len(split) == 3 and split[2].list_outputs() == ["s_output2"]


def test_json_round_trip_and_files(tmp_path: Path) -> None:
    net = mlp()
    again = mx.sym.load_json(net.tojson())
    assert again.tojson() == net.tojson()
    net.save(str(tmp_path / "net-symbol.json"))
    assert mx.sym.load(str(tmp_path / "net-symbol.json")).list_arguments() == net.list_arguments()
    with pytest.raises(mx.MXNetError):
        mx.sym.load_json("{not json")


def test_infer_shape_both_ways() -> None:
    net = mlp()
    arg, out, aux = net.infer_shape(data=(8, 10))
    assert arg == [(8, 10), (16, 10), (16,), (4, 16), (4,), (8,)]
    assert out == [(8, 4)] and aux == []
    assert mlp().infer_shape() == (None, None, None)
    arg, out, _ = mlp().infer_shape_partial()
    assert arg[0] == () and out == [()]
    # Parameters from a data shape whose batch is unknown (0); the batch stays unknown.
    data = mx.sym.var("data")
    fc = mx.sym.FullyConnected(data, num_hidden=5, name="fc")
    arg, out, _ = fc.infer_shape_partial(data=(0, 7))
    assert arg == [(0, 7), (5, 7), (5,)] and out == [(0, 5)]
    # Elementwise ops take unknown dimensions from each other.
    a, b = mx.sym.var("a"), mx.sym.var("b")
    arg, out, _ = (a + b).infer_shape_partial(a=(0, 3), b=(4, 0))
    assert arg == [(4, 3), (4, 3)] and out == [(4, 3)]
    with pytest.raises(mx.MXNetError):
        (a + b).infer_shape(a=(2, 3), b=(3, 2))


def test_infer_type() -> None:
    x = mx.sym.var("x")
    arg, out, _ = mx.sym.relu(x).infer_type(x="float64")
    assert arg == [np.float64] and out == [np.float64]
    arg, out, _ = mx.sym.Cast(x, dtype="int32").infer_type(x=np.float32)
    assert out == [np.int32]


def test_bad_graphs_raise() -> None:
    x = mx.sym.var("x")
    with pytest.raises(mx.MXNetError, match="unknown attribute"):
        mx.sym.FullyConnected(x, num_hiden=3)
    with pytest.raises(mx.MXNetError, match="outputs"):
        mx.sym.relu(mx.sym.SliceChannel(x, num_outputs=2))
    with pytest.raises(TypeError):
        mx.sym.relu(x, 3)
