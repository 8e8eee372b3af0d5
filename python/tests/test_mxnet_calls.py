"""What MXNet code calls, beyond the ops themselves: positional attributes, MXNet's reshape
codes, in-place views, the free functions of mx.nd and mx.sym, dtype rules of mx.nd.array,
name and attribute scopes, Symbol's children, attributes, pickling and refusals, the monitor,
the profiler's objects, mx.runtime, mx.util and the test helpers. Every expected value here was
produced by MXNet 1.9.1 (the same calls, run with MXNET_SUBGRAPH_BACKEND=NONE)."""

from __future__ import annotations

import json
import pickle

import mxrs as mx
import numpy as np
import pytest


def same(x: mx.nd.NDArray, a: object) -> None:
    np.testing.assert_array_equal(x.asnumpy(), np.asarray(a))


# ---- op functions -------------------------------------------------------------------------


def test_attributes_may_follow_the_inputs_by_position() -> None:
    same(mx.nd.clip(mx.nd.array([-1, 0.5, 2]), 0, 1), [0, 0.5, 1])
    same(mx.nd.one_hot(mx.nd.array([1, 0]), 3, 5, -1), [[-1, 5, -1], [5, -1, -1]])
    with pytest.raises(TypeError, match="by position and by name"):
        mx.nd.clip(mx.nd.array([1.0]), 0, a_min=1)
    with pytest.raises(TypeError, match="positional values"):
        mx.nd.relu(mx.nd.array([1.0]), 3)
    s = mx.sym.clip(mx.sym.Variable("x"), 0, 1)
    assert s.list_attr()["a_min"] == "0" and s.list_attr()["a_max"] == "1"


@pytest.mark.parametrize(
    "codes, reverse, shape",
    [
        ((0, -1), False, (2, 60)),
        ((-2,), False, (2, 3, 4, 5)),
        ((2, -2), False, (2, 3, 4, 5)),
        ((-3, -2), False, (6, 4, 5)),
        ((-4, 1, 2, -2), False, (1, 2, 3, 4, 5)),
        ((2, -4, -1, 3, -2), False, (2, 1, 3, 4, 5)),
        ((0, 0, -3), False, (2, 3, 20)),
        ((-1, 5), True, (24, 5)),
        ((0, -1), True, (4, 30)),
        ((-3, -1), False, (6, 20)),
    ],
)
def test_reshape_takes_mxnet_s_codes(codes: tuple, reverse: bool, shape: tuple) -> None:
    x = mx.nd.array(np.arange(120).reshape(2, 3, 4, 5))
    y = x.reshape(codes, reverse=reverse)
    assert y.shape == shape
    same(y, np.arange(120).reshape(shape))


def test_in_place_flatten_squeeze_and_expand_dims_are_views() -> None:
    x = mx.nd.zeros((2, 1, 3))
    for view, shape in [
        (x.flatten(inplace=True), (2, 3)),
        (x.squeeze(inplace=True), (2, 3)),
        (x.squeeze(axis=1, inplace=True), (2, 3)),
        (x.expand_dims(0, inplace=True), (1, 2, 1, 3)),
    ]:
        assert view.shape == shape
        view[:] = 7
        same(x, np.full((2, 1, 3), 7))
        x[:] = 0
    with pytest.raises(mx.MXNetError):
        x.squeeze(axis=0, inplace=True)


def test_free_functions_of_nd_take_arrays_and_numbers() -> None:
    same(mx.nd.maximum(mx.nd.array([1, 5]), 3), [3, 5])
    same(mx.nd.power(2, mx.nd.array([1, 3])), [2, 8])
    same(mx.nd.modulo(7, mx.nd.array([4, 5])), [3, 2])
    same(mx.nd.subtract(10, mx.nd.array([1, 2])), [9, 8])
    same(mx.nd.greater(2, mx.nd.array([1, 3])), [1, 0])
    same(mx.nd.logical_xor(mx.nd.array([0, 2]), 1), [1, 0])
    same(mx.nd.logical_not(mx.nd.array([0, 2, -1])), [1, 0, 0])
    assert mx.nd.maximum(2, 3) == 3
    same(mx.nd.linspace(0, 1, 5), [0, 0.25, 0.5, 0.75, 1])
    same(mx.nd.linspace(0, 1, 4, endpoint=False), [0, 0.25, 0.5, 0.75])
    same(mx.nd.eye(3, 4, 1), np.eye(3, 4, 1))
    assert mx.nd.moveaxis(mx.nd.zeros((4, 1, 2, 3)), [3, 0], [1, 0]).shape == (4, 3, 1, 2)
    with pytest.raises(ValueError):
        mx.nd.moveaxis(mx.nd.zeros((1, 2, 3)), 3, 0)
    parts = mx.nd.split_v2(mx.nd.zeros((6, 4)), (1, 4), axis=0)
    assert [p.shape for p in parts] == [(1, 4), (3, 4), (2, 4)]
    out = mx.nd.zeros((2, 3))
    mx.nd.onehot_encode(mx.nd.array([2, 0]), out)
    same(out, [[0, 0, 1], [1, 0, 0]])
    same(mx.nd.contrib.isnan(mx.nd.array([np.nan, 1, np.inf])), [1, 0, 0])
    same(mx.nd.contrib.isinf(mx.nd.array([np.nan, 1, -np.inf])), [0, 0, 1])
    same(mx.nd.contrib.isfinite(mx.nd.array([np.nan, 1, np.inf])), [0, 1, 0])


def test_free_functions_of_sym() -> None:
    a, b = mx.sym.Variable("a"), mx.sym.Variable("b")
    out = mx.sym.Group([mx.sym.maximum(a, b), mx.sym.pow(a, 2), mx.sym.minimum(3, b)])
    got = out.eval(a=mx.nd.array([1, 4]), b=mx.nd.array([2, 2]))
    for g, want in zip(got, [[2, 4], [1, 16], [2, 2]]):
        same(g, want)
    assert mx.sym.maximum(2, 3) == 3
    x = mx.sym.Variable("x")
    same((x - True).eval(x=mx.nd.array([2, 3]))[0], [1, 2])
    same(mx.sym.logical_not(x).eval(x=mx.nd.array([0, 1]))[0], [1, 0])


def test_array_makes_float32_unless_told_as_mxnet() -> None:
    assert mx.nd.array(np.arange(3, dtype=np.int64)).dtype == np.float32
    assert mx.nd.array(np.zeros(2, dtype=np.float64)).dtype == np.float32
    assert mx.nd.array(mx.nd.zeros(2, dtype="int32")).dtype == np.int32
    with pytest.raises(TypeError, match="complex"):
        mx.nd.array(np.array([1 + 1j]))
    assert not bool(mx.nd.array([])) and bool(mx.nd.ones((1,)))


def test_randint_refuses_bounds_its_dtype_cannot_hold() -> None:
    with pytest.raises(mx.MXNetError, match="int32"):
        mx.nd.random.randint(0, 2**40, shape=(3,))
    x = mx.nd.random.randint(2**33, 2**33 + 5, shape=(50,), dtype="int64").asnumpy()
    assert x.dtype == np.int64 and x.min() >= 2**33 and x.max() < 2**33 + 5


def test_load_frombuffer_reads_what_save_wrote(tmp_path: object) -> None:
    path = f"{tmp_path}/a.nd"
    mx.nd.save(path, {"w": mx.nd.array([1, 2]), "b": mx.nd.array([[3]])})
    with open(path, "rb") as f:
        loaded = mx.nd.load_frombuffer(f.read())
    same(loaded["w"], [1, 2])
    same(loaded["b"], [[3]])
    with pytest.raises(mx.MXNetError):
        mx.nd.load_frombuffer(b"not an ndarray file")


# ---- symbols ------------------------------------------------------------------------------


def test_name_and_attribute_scopes() -> None:
    data = mx.sym.Variable("data")
    with mx.name.Prefix("net_"):
        fc = mx.sym.FullyConnected(data, num_hidden=4)
        act = mx.sym.Activation(fc, act_type="relu", name="act")
    assert act.list_arguments() == [
        "data",
        "net_fullyconnected0_weight",
        "net_fullyconnected0_bias",
    ]
    assert act.list_outputs() == ["net_act_output"]
    with mx.name.NameManager():
        assert mx.sym.relu(data).name == "relu0"
    with mx.AttrScope(ctx_group="4", __tag__="great"):
        v = mx.sym.Variable("v", attr={"__tag__": "no"})
        with mx.AttrScope(__inner__="1"):
            f2 = mx.sym.FullyConnected(v, num_hidden=2, name="f2")
    assert (v.attr("ctx_group"), v.attr("__tag__")) == ("4", "no")
    assert (f2.attr("ctx_group"), f2.attr("__inner__"), f2.attr("__tag__")) == ("4", "1", "great")
    assert mx.sym.Variable("outside").attr("ctx_group") is None
    with pytest.raises(ValueError):
        mx.AttrScope(x=1)


def test_children_attributes_pickling_and_refusals() -> None:
    data = mx.sym.Variable("data")
    fc1 = mx.sym.FullyConnected(data=data, name="fc1", num_hidden=10)
    net = mx.sym.FullyConnected(data=fc1, name="fc2", num_hidden=100)
    assert net.get_children().list_outputs() == ["fc1_output", "fc2_weight", "fc2_bias"]
    assert net.get_children().get_children().list_outputs() == ["data", "fc1_weight", "fc1_bias"]
    assert net.get_children()["fc2_weight"].get_children() is None
    sliced = mx.sym.SliceChannel(data, num_outputs=3, name="slice")
    assert sliced.get_children().list_outputs() == ["data"]
    assert net.attr_dict()["fc2"]["num_hidden"] == "100"
    again = pickle.loads(pickle.dumps(net))
    assert again.tojson() == net.tojson()
    with pytest.raises(mx.base.NotImplementedForSymbol):
        bool(data)
    with pytest.raises(mx.base.NotImplementedForSymbol):
        data.asnumpy()
    magnitude = abs(data)
    assert magnitude.list_outputs() == [magnitude.name + "_output"]
    composed = net(data=mx.sym.Variable("x"), name="ignored")
    assert composed.list_arguments()[0] == "x"


def test_fluent_methods_of_arrays_and_symbols() -> None:
    x = mx.nd.array([[1, -2], [3, -4]])
    same(x.abs(), [[1, 2], [3, 4]])
    same(x.clip(-1, 1), [[1, -1], [1, -1]])
    same(x.flip(axis=1), [[-2, 1], [-4, 3]])
    s = mx.sym.Variable("s").sin()
    same(s.eval(s=mx.nd.array([0.0]))[0], [0])


# ---- executors, monitor, profiler -----------------------------------------------------------


def test_monitor_callback_names_follow_mxnet() -> None:
    data = mx.sym.Variable("data", shape=(2, 3))
    fc = mx.sym.FullyConnected(data, num_hidden=4, name="fc")
    act = mx.sym.Activation(fc, act_type="relu", name="act")
    exe = act.simple_bind(mx.cpu(), grad_req="null")
    names: list[str] = []
    exe.set_monitor_callback(lambda n, a: names.append(n))
    exe.forward()
    assert names == ["fc_output", "act_output"]
    names.clear()
    exe.set_monitor_callback(lambda n, a: names.append(n), monitor_all=True)
    exe.forward()
    assert names[:7] == [
        "data",
        "fc_data",
        "fc_weight",
        "fc_weight",
        "fc_bias",
        "fc_bias",
        "fc_output",
    ]
    assert names[-1] == "act_output"
    mon = mx.mon.Monitor(1, pattern="fc.*")
    exe2 = act.simple_bind(mx.cpu(), grad_req="null")
    exe2.arg_dict["fc_weight"][:] = 2
    mon.install(exe2)
    mon.tic()
    exe2.forward()
    stats = mon.toc()
    assert [(s, n) for s, n, _ in stats] == [(1, "fc_output"), (1, "fc_weight"), (1, "fc_bias")]
    # The statistic is the root mean square: 2 for a weight of twos.
    assert float(stats[1][2]) == pytest.approx(2.0)


def test_profiler_objects_are_marked_in_the_trace(tmp_path: object) -> None:
    path = f"{tmp_path}/trace.json"
    mx.profiler.set_config(filename=path)
    mx.profiler.set_state("run")
    mx.profiler.dumps(reset=True)
    domain = mx.profiler.Domain("PythonDomain")
    task = mx.profiler.Task(domain, "work")
    task.start()
    (mx.nd.ones((10, 10)) + 1).wait_to_read()
    task.stop()
    counter = mx.profiler.Counter(domain, "items", 5)
    counter += 2
    mx.profiler.Marker(domain, "here").mark("process")
    event = mx.profiler.Event("step")
    event.start()
    event.stop()
    mx.profiler.dump()
    stats = json.loads(mx.profiler.dumps(format="json"))
    mx.profiler.set_state("stop")
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    mine = [e for e in events if e.get("pid") == "PythonDomain"]
    assert [(e["ph"], e["name"]) for e in mine] == [
        ("X", "work"),
        ("C", "items"),
        ("C", "items"),
        ("i", "here"),
    ]
    assert mine[2]["args"]["items"] == 7
    assert stats["Time"]["PythonDomain"]["work"]["Count"] == 1
    assert stats["Time"]["event"]["step"]["Count"] == 1
    assert stats["Time"]["operator"]["_plus_scalar"]["Count"] >= 1
    assert set(stats) == {"Time", "Memory", "Unit"}


# ---- runtime, util, test helpers ----------------------------------------------------------


def test_runtime_features_and_numpy_mode_switches() -> None:
    features = mx.runtime.Features()
    assert features is mx.runtime.Features()
    assert features.is_enabled("PROFILER") and not features.is_enabled("MKLDNN")
    assert features.is_enabled("CUDA") == (mx.runtime.Features()["CUDA"].enabled)
    with pytest.raises(RuntimeError):
        features.is_enabled("NO_SUCH_FEATURE")
    assert not mx.is_np_shape() and not mx.is_np_array()
    with mx.np_shape(False):
        pass
    with pytest.raises(mx.MXNetError, match="numpy mode"), mx.np_shape(True):
        pass

    @mx.use_np
    def numpy_mode() -> None:
        pass

    with pytest.raises(mx.MXNetError, match="numpy mode"):
        numpy_mode()


def test_test_helpers_mxnet_s_tests_import() -> None:
    from mxrs import test_utils as tu

    with tu.environment("MXRS_SOME_SETTING", "on"):
        assert tu.getenv("MXRS_SOME_SETTING") == "on"
    assert tu.getenv("MXRS_SOME_SETTING") is None
    a = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(
        tu.np_reduce(a, (0, 2), True, np.sum), a.sum((0, 2), keepdims=True)
    )
    picked = tu.random_sample(list(range(10)), 4)
    assert len(set(picked)) == 4 and set(picked) <= set(range(10))
    assert tu.default_numeric_eps()[np.dtype(np.float32)] == 2.0**-9
    # Tolerances by dtype, as MXNet's: float32 compares to 1e-4 relative, 1e-3 absolute.
    tu.assert_almost_equal(np.float32([1.0]), np.float32([1.00005]))
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(np.float64([1.0]), np.float64([1.00005]))
    with tu.discard_stderr():
        pass
    assert tu.same_array(mx.nd.zeros(3), mx.nd.zeros(3)) is False
    x = mx.nd.zeros(3)
    assert tu.same_array(x, x[:]) is True


def test_none_inputs_none_attributes_copies_and_binds_as_mxnet() -> None:
    x = mx.nd.array([[1, 2, 3], [4, 5, 6]])
    same(mx.nd.slice_axis(x, axis=1, begin=1, end=None), [[2, 3], [5, 6]])
    y = mx.nd.zeros((2,), dtype="float64")
    mx.nd.array([1.5, 2]).copyto(y)
    assert y.dtype == np.float64
    same(y, [1.5, 2])
    a, b = mx.sym.Variable("a"), mx.sym.Variable("b")
    # simple_bind's keywords that are not shapes are ignored, as MXNet's are.
    exe = (a == b).simple_bind(mx.cpu(), a=(2,), b=(2,), axis=1, mode="clip")
    exe.forward(a=mx.nd.array([1, 2]), b=mx.nd.array([1, 3]))
    same(exe.outputs[0], [1, 0])
    conv = mx.sym.Convolution(
        mx.sym.Variable("x"), mx.sym.Variable("w"), None, num_filter=2, kernel=(1, 1), no_bias=True
    )
    assert conv.list_arguments() == ["x", "w"]


def test_check_consistency_compares_bindings_and_debug_str_totals() -> None:
    from mxrs.test_utils import check_consistency

    x = mx.sym.Variable("x")
    y = mx.sym.FullyConnected(x, num_hidden=3, name="fc")
    ctx = [
        {"ctx": mx.cpu(), "x": (2, 4), "type_dict": {"x": np.float64}},
        {"ctx": mx.cpu(), "x": (2, 4), "type_dict": {"x": np.float32}},
    ]
    truth = check_consistency(y, ctx)
    assert set(truth) >= {"fc_output", "x", "fc_weight", "fc_bias"}
    with pytest.raises(AssertionError):
        check_consistency([y, mx.sym.relu(y, name="fc")], ctx, ground_truth=None)
    # MXNet's closing line of debug_str, which scripts parse; gradients need more memory.
    data = mx.sym.Variable("data")
    for _ in range(4):
        data = data * data
    lines = data.simple_bind(mx.cpu(), data=(64, 1024)).debug_str().splitlines()
    assert lines[-1].startswith("Total ") and lines[-1].endswith(" MB allocated")


def test_rows_of_one_array_copy_into_each_other_and_0d_sources_keep_their_shape() -> None:
    a_np = np.arange(16, dtype=np.float32).reshape(4, 4)
    a = mx.nd.array(a_np)
    a_np[0] = a_np[1]
    a[0] = a[1]
    a_np[2, :] = a_np[3]
    a[2, :] = a[3]
    same(a, a_np)
    assert mx.nd.array(np.ones([])).shape == ()
    x = mx.nd.zeros((3,))
    x[0] = np.array([5.0])
    same(x, [5, 0, 0])


def test_ndarray_iter_names_pads_and_shuffles_as_mxnet() -> None:
    it = mx.io.NDArrayIter([np.zeros((4, 2)), np.ones((4, 3))], [], batch_size=2)
    assert [d.name for d in it.provide_data] == ["_0_data", "_1_data"]
    assert it.provide_label == []
    data = np.arange(10)
    big = mx.io.NDArrayIter(data=data, batch_size=205, shuffle=False, last_batch_handle="pad")
    want = np.concatenate((np.tile(data, 20), np.arange(5)))
    np.testing.assert_array_equal(big.next().data[0].asnumpy(), want)
    shuffled = mx.io.NDArrayIter(data[:, None], batch_size=1, shuffle=True)
    order = shuffled.idx
    got = [int(b.data[0].asnumpy()[0, 0]) for b in shuffled]
    assert got == [int(i) for i in order] and sorted(got) == list(range(10))
    assert str(mx.io.DataBatch(data=[mx.nd.ones((2, 3))])) == (
        "DataBatch: data shapes: [(2, 3)] label shapes: None"
    )


def test_print_summary_prints_mxnet_s_table(capsys: pytest.CaptureFixture) -> None:
    # fixtures/mxnet_print_summary.txt is what MXNet 1.9.1 printed for this graph and shape.
    from pathlib import Path

    data = mx.sym.Variable("data")
    c = mx.sym.Convolution(data, kernel=(3, 3), num_filter=8, name="conv")
    b = mx.sym.BatchNorm(c, name="bn")
    f = mx.sym.FullyConnected(mx.sym.Flatten(b, name="flat"), num_hidden=10, name="fc")
    mx.viz.print_summary(f, shape={"data": (1, 3, 8, 8)})
    want = (Path(__file__).parent / "fixtures" / "mxnet_print_summary.txt").read_text()
    assert capsys.readouterr().out == want
    import importlib.util

    if importlib.util.find_spec("graphviz") is None:
        with pytest.raises(ImportError, match="graphviz"):
            mx.viz.plot_network(f)
    else:
        source = mx.viz.plot_network(f, shape={"data": (1, 3, 8, 8)}).source
        assert "Convolution" in source and "8x6x6" in source and "conv_weight" not in source


def test_operator_arguments_and_head_gradients_of_another_dtype() -> None:
    from mxrs.operator import OperatorArguments, get_operator_arguments

    args = get_operator_arguments("FullyConnected")
    assert isinstance(args, OperatorArguments) and args.narg == 6
    assert args.names == ["data", "weight", "bias", "num_hidden", "no_bias", "flatten"]
    assert args.types[3:] == [
        "int, required",
        "boolean, optional, default=0",
        "boolean, optional, default=1",
    ]
    assert get_operator_arguments("Activation").types[1] == (
        "{'relu', 'sigmoid', 'softrelu', 'softsign', 'tanh'}, required"
    )
    assert "FullyConnected" in mx.operator.get_all_registered_operators()
    x = mx.sym.Variable("x")
    exe = (x * 2).simple_bind(mx.cpu(), x=(2,))
    exe.forward(is_train=True, x=mx.nd.array([1, 2]))
    exe.backward(mx.nd.array([1, 1], dtype="float64"))
    same(exe.grad_dict["x"], [2, 2])
    parts = mx.sym.split_v2(x, (1, 3), axis=0).eval(x=mx.nd.zeros((5, 2)))
    assert [p.shape for p in parts] == [(1, 2), (2, 2), (2, 2)]


def test_lr_schedulers_and_optimizer_update_counts_as_mxnet() -> None:
    sched = mx.lr_scheduler
    f = sched.FactorScheduler(step=3, factor=0.5, base_lr=1.0)
    assert [f(n) for n in range(12)] == [1, 1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125]
    m = sched.MultiFactorScheduler(step=[2, 5], factor=0.1, base_lr=1.0)
    assert [round(m(n), 6) for n in range(8)] == [1, 1, 1, 0.1, 0.1, 0.1, 0.01, 0.01]
    p = sched.PolyScheduler(
        10, base_lr=1.0, pwr=2, final_lr=0.1, warmup_steps=2, warmup_begin_lr=0.5
    )
    want = [0.5, 0.75, 1.0, 0.789062, 0.60625, 0.451562, 0.325, 0.226562, 0.15625, 0.114063]
    assert [round(p(n), 6) for n in range(13)] == want + [0.1, 0.1, 0.1]
    c = sched.CosineScheduler(max_update=8, base_lr=2.0, final_lr=0.0)
    assert [round(c(n), 6) for n in range(5)] == [2.0, 1.92388, 1.707107, 1.382683, 1.0]
    # Two weights, four steps: num_update counts steps, not calls; the rate halves every 2.
    opt = mx.optimizer.SGD(
        learning_rate=1.0, lr_scheduler=sched.FactorScheduler(step=2, factor=0.5)
    )
    upd = mx.optimizer.get_updater(opt)
    w = [mx.nd.ones(2), mx.nd.ones(2)]
    for _ in range(4):
        for i in range(2):
            upd(i, mx.nd.ones(2), w[i])
    assert opt.num_update == 4 and opt.learning_rate == 0.5
    same(w[0], [-2, -2])
    with pytest.raises(UserWarning):
        opt.set_learning_rate(0.1)


def test_callbacks_log_and_checkpoint(tmp_path: object, caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import os

    metric = mx.metric.Accuracy()
    metric.update([mx.nd.array([1, 0])], [mx.nd.array([[0.1, 0.9], [0.8, 0.2]])])
    speed = mx.callback.Speedometer(batch_size=4, frequent=2)
    with caplog.at_level(logging.INFO, logger="mxrs.callback"):
        for nbatch in range(5):
            speed(mx.model.BatchEndParam(0, nbatch, metric, None))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "samples/sec" in lines[0] and "accuracy=1.000000" in lines[0]
    prefix = os.path.join(str(tmp_path), "net")
    save = mx.callback.do_checkpoint(prefix, period=2)
    net = mx.sym.FullyConnected(mx.sym.Variable("data"), num_hidden=2, name="fc")
    for epoch in range(3):
        save(epoch, net, {"fc_weight": mx.nd.ones((2, 3))}, {})
    assert sorted(os.listdir(str(tmp_path))) == ["net-0002.params", "net-symbol.json"]
    _, arg, _ = mx.model.load_checkpoint(prefix, 2)
    same(arg["fc_weight"], np.ones((2, 3)))


def test_metrics_give_mxnet_s_values() -> None:
    # The values MXNet 1.9.1's metrics gave for the same inputs (two updates each).
    rng = np.random.RandomState(3)
    labels = [mx.nd.array(rng.randint(0, 2, 8)), mx.nd.array(rng.randint(0, 2, 8))]
    preds = [mx.nd.array(rng.dirichlet([1, 1], 8)), mx.nd.array(rng.dirichlet([1, 1], 8))]
    reg_l, reg_p = [mx.nd.array(rng.rand(6))], [mx.nd.array(rng.rand(6))]
    multi_l, multi_p = (
        [mx.nd.array(rng.randint(0, 4, 10))],
        [mx.nd.array(rng.dirichlet([1] * 4, 10))],
    )
    cases = [
        ("acc", {}, labels, preds, "accuracy", 0.125),
        ("top_k_accuracy", {"top_k": 2}, multi_l, multi_p, "top_k_accuracy_2", 0.3),
        ("f1", {}, labels, preds, "f1", 0.125),
        ("f1", {"average": "micro"}, labels, preds, "f1", 0.125),
        ("mcc", {}, labels, preds, "mcc", -0.746032),
        ("mcc", {"average": "micro"}, labels, preds, "mcc", -0.746032),
        ("mae", {}, reg_l, reg_p, "mae", 0.241365),
        ("mse", {}, reg_l, reg_p, "mse", 0.098569),
        ("rmse", {}, reg_l, reg_p, "rmse", 0.313957),
        ("ce", {}, multi_l, multi_p, "cross-entropy", 2.142495),
        ("nll_loss", {}, multi_l, multi_p, "nll-loss", 2.142495),
        ("pearsonr", {}, reg_l, reg_p, "pearsonr", -0.465516),
        ("pearsonr", {"average": "micro"}, reg_l * 2, reg_p * 2, "pearsonr", -0.465516),
        ("pcc", {}, multi_l, multi_p, "pcc", -0.197332),
        ("loss", {}, reg_l, reg_p, "loss", 0.334855),
        ("perplexity", {"ignore_label": None}, multi_l, multi_p, "perplexity", 8.520667),
        ("perplexity", {"ignore_label": 1}, multi_l, multi_p, "perplexity", 7.293305),
    ]
    for key, kwargs, lab, pred, name, value in cases:
        m = mx.metric.create(key, **kwargs)
        m.update(lab, pred)
        m.update(lab, pred)
        got_name, got = m.get()
        assert got_name == name and got == pytest.approx(value, rel=1e-6, abs=1e-6), key
        assert m.get_global_name_value()[0][0] == name
    both = mx.metric.create(["acc", "mse"])
    both.update(labels, preds)
    assert both.get()[0] == ["accuracy", "mse"] and both.get()[1][1] == pytest.approx(0.3255712)
    custom = mx.metric.CustomMetric(
        lambda y, p: (float((y == p.argmax(1)).sum()), len(y)), name="mine"
    )
    custom.update(labels, preds)
    assert custom.get() == ("mine", 0.125)
    acc = mx.metric.Accuracy()
    acc.update(labels, preds)
    acc.reset_local()
    assert np.isnan(acc.get()[1]) and acc.get_global()[1] == 0.125
    assert acc.get_config() == {
        "axis": 1, "metric": "Accuracy", "name": "accuracy", "output_names": None, "label_names": None
    }  # fmt: skip


def test_initializers_as_mxnet() -> None:
    w = mx.nd.zeros((2, 1, 4, 4))
    mx.init.Bilinear()._init_weight("up", w)
    corner, middle = [0.0625, 0.1875, 0.1875, 0.0625], [0.1875, 0.5625, 0.5625, 0.1875]
    np.testing.assert_allclose(w.asnumpy()[1, 0], [corner, middle, middle, corner])
    b = mx.nd.zeros((8,))
    mx.init.LSTMBias(2.0)._init_weight("lstm_bias", b)
    same(b, [0, 0, 2, 2, 0, 0, 0, 0])
    assert mx.init.MSRAPrelu().dumps() == '["msraprelu", {"factor_type": "avg", "slope": 0.25}]'
    assert mx.init.create('["uniform", {"scale": 0.5}]') == mx.init.Uniform(0.5)
    # A variable's own init wins over the module's initializer.
    weight = mx.sym.Variable("fc_weight", init=mx.init.Constant(0.25))
    fc = mx.sym.FullyConnected(mx.sym.Variable("data"), weight, num_hidden=3, name="fc")
    mod = mx.mod.Module(fc, label_names=None)
    mod.bind([("data", (2, 4))])
    mod.init_params(mx.init.Uniform(1.0))
    args, _ = mod.get_params()
    same(args["fc_weight"], np.full((3, 4), 0.25))
    same(args["fc_bias"], np.zeros(3))
    q = mx.nd.zeros((3, 5))
    mx.init.Orthogonal(scale=1.0)._init_weight("q_weight", q)
    np.testing.assert_allclose(q.asnumpy() @ q.asnumpy().T, np.eye(3), atol=1e-5)
    table = mx.nd.zeros((2, 2))
    mixed = mx.init.Mixed(["fc.*", ".*"], [mx.init.One(), mx.init.Zero()])
    mixed("fc_weight", table)
    same(table, np.ones((2, 2)))
    loaded = mx.init.Load({"arg:fc_weight": mx.nd.full((2, 2), 3.0)}, default_init=mx.init.Zero())
    loaded("fc_weight", table)
    same(table, np.full((2, 2), 3))


def test_optimizers_step_as_mxnet() -> None:
    # Each row: the first five weights after three steps from the same start and gradients
    # (clip_gradient 0.8), as MXNet 1.9.1's optimizers left them.
    want = {
        "adagrad": [-0.26897, 0.90797, -0.64523, 0.78186, 0.02975],
        "adadelta": [-0.49878, 0.73901, -0.57424, 0.79717, -0.0161],
        "adamax": [-0.55151, 0.74663, -0.58884, 0.83762, -0.02212],
        "nadam": [-0.55289, 0.74337, -0.58726, 0.83663, -0.02261],
        "signum": [-0.24921, 1.0289, -0.87631, 0.72423, -0.12333],
        "signum0.0": [-0.25465, 0.83894, -0.6847, 0.73461, 0.07679],
        "ftrl": [0.01978, 0.37505, -0.27612, 0.21307, -0.00779],
        "ftml": [-0.29249, 0.90157, -0.65061, 0.80176, 0.03526],
        "dcasgd0.0": [-0.42828, 0.87531, -0.62167, 0.71998, -0.0377],
        "ccsgd0.9": [-0.37868, 1.05878, -0.69338, 0.72767, -0.08051],
        "test": [-1.2855, 0.05941, -0.40122, 1.56086, 0.11038],
    }
    cases = [
        ("adagrad", {"learning_rate": 0.1, "wd": 0.01}),
        ("adadelta", {"wd": 0.01}),
        ("adamax", {"wd": 0.01}),
        ("nadam", {"wd": 0.01}),
        ("signum", {"learning_rate": 0.1, "wd": 0.01, "wd_lh": 0.05}),
        ("signum", {"learning_rate": 0.1, "momentum": 0.0, "wd": 0.01}),
        ("ftrl", {"wd": 0.01}),
        ("ftml", {"learning_rate": 0.1, "wd": 0.01}),
        ("dcasgd", {"learning_rate": 0.1, "momentum": 0.0, "wd": 0.01}),
        ("ccsgd", {"learning_rate": 0.1, "momentum": 0.9}),
        ("test", {"rescale_grad": 0.5}),
    ]
    rng = np.random.RandomState(5)
    w0 = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    grads = [rng.uniform(-1, 1, (3, 4)).astype(np.float32) for _ in range(3)]
    for name, kwargs in cases:
        kwargs = dict(kwargs)
        opt = mx.optimizer.create(
            name, rescale_grad=kwargs.pop("rescale_grad", 1.0), clip_gradient=0.8, **kwargs
        )
        w = mx.nd.array(w0)
        state = opt.create_state(0, w)
        for g in grads:
            opt.update(0, w, mx.nd.array(g), state)
        key = name + str(kwargs.get("momentum", ""))
        np.testing.assert_allclose(w.asnumpy().ravel()[:5], want[key], atol=2e-5, err_msg=key)
    assert isinstance(mx.optimizer.Optimizer.create_optimizer("adagrad"), mx.optimizer.AdaGrad)


def test_csv_resize_and_prefetching_iterators_as_mxnet(tmp_path: object) -> None:
    data_csv, label_csv = f"{tmp_path}/d.csv", f"{tmp_path}/l.csv"
    np.savetxt(data_csv, np.arange(20).reshape(5, 4), delimiter=",")
    np.savetxt(label_csv, np.arange(5), delimiter=",")
    it = mx.io.CSVIter(data_csv=data_csv, data_shape=(2, 2), label_csv=label_csv, batch_size=2)
    got = [(b.data[0].asnumpy().ravel().tolist(), b.label[0].asnumpy().tolist(), b.pad) for b in it]
    assert got[2] == ([16, 17, 18, 19, 0, 1, 2, 3], [4, 0], 1) and len(got) == 3
    assert repr(it.provide_data) == "[DataDesc[data,(2, 2, 2),<class 'numpy.float32'>,NCHW]]"
    resized = mx.io.ResizeIter(mx.io.NDArrayIter(np.arange(6), batch_size=2), 5)
    assert [b.data[0].asnumpy().tolist() for b in resized] == [
        [0, 1],
        [2, 3],
        [4, 5],
        [0, 1],
        [2, 3],
    ]
    both = mx.io.PrefetchingIter(
        [
            mx.io.NDArrayIter(np.arange(4), batch_size=2),
            mx.io.NDArrayIter(np.arange(4) + 10, batch_size=2, data_name="x"),
        ],
        rename_data=[{"data": "a"}, {"x": "b"}],
    )
    batches = [[d.asnumpy().tolist() for d in b.data] for b in both]
    assert batches == [[[0, 1], [10, 11]], [[2, 3], [12, 13]]]
    assert [d.name for d in both.provide_data] == ["a", "b"]
    # The iterator protocol MXNet code drives by hand.
    plain = mx.io.NDArrayIter(np.arange(3), batch_size=2)
    assert plain.iter_next() and plain.getdata()[0].asnumpy().tolist() == [0, 1]
    assert plain.iter_next() and plain.getpad() == 1 and not plain.iter_next()


def test_module_protocol_params_files_and_optimizer_states(tmp_path: object) -> None:
    import os

    data = mx.sym.Variable("data")
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(data, num_hidden=3, name="fc"), name="softmax")
    mod = mx.mod.Module(net)
    assert mod.data_names == ["data"] and mod.label_names == ["softmax_label"]
    assert mod.output_names == ["softmax_output"] and mod.symbol is net
    mod.bind([("data", (4, 5))], [("softmax_label", (4,))])
    mod.init_params(mx.init.Xavier())
    sgd = (("learning_rate", 0.1), ("momentum", 0.9))
    mod.init_optimizer(optimizer="sgd", optimizer_params=sgd)
    batch = mx.io.DataBatch([mx.nd.ones((4, 5))], [mx.nd.array([0, 1, 2, 0])])
    mod.forward_backward(batch)
    mod.update()
    path = os.path.join(str(tmp_path), "m")
    mod.save_checkpoint(path, 1, save_optimizer_states=True)
    assert os.path.exists(path + "-0001.states")
    again = mx.mod.Module.load(path, 1, load_optimizer_states=True)
    again.bind([("data", (4, 5))], [("softmax_label", (4,))])
    again.init_optimizer(optimizer="sgd", optimizer_params=sgd)
    # The same momentum: one more identical step gives identical weights.
    mod.forward_backward(batch)
    mod.update()
    again.forward_backward(batch)
    again.update()
    np.testing.assert_allclose(
        mod.get_params()[0]["fc_weight"].asnumpy(), again.get_params()[0]["fc_weight"].asnumpy()
    )
    mod.save_params(path + ".params")
    fresh = mx.mod.Module(net)
    fresh.bind([("data", (4, 5))], [("softmax_label", (4,))])
    fresh.init_params()
    fresh.load_params(path + ".params")
    same(fresh.get_params()[0]["fc_bias"], mod.get_params()[0]["fc_bias"].asnumpy())
    outs = [
        o[0].shape
        for o, _, _ in fresh.iter_predict(mx.io.NDArrayIter(np.ones((6, 5)), batch_size=4))
    ]
    assert outs == [(4, 3), (2, 3)]
    with pytest.raises(NotImplementedError):
        mx.mod.BaseModule().forward(batch)


def test_context_names_and_empty_cache() -> None:
    c = mx.Context(mx.cpu(1))
    assert (c.device_type, c.device_typeid, c.device_id) == ("cpu", 1, 1)
    assert mx.Context.devtype2str[2] == "gpu" and mx.Context.devstr2type["cpu_pinned"] == 3
    x = mx.nd.ones((256, 256)) * 2
    del x
    mx.cpu().empty_cache()
    same(mx.nd.ones((2,)) + 1, [2, 2])


def test_shuffle_exponential_randn_and_like_samplers() -> None:
    x = mx.nd.arange(20).reshape((10, 2))
    mx.random.seed(3)
    a = mx.random.shuffle(x).asnumpy()
    mx.random.seed(3)
    b = mx.random.shuffle(x).asnumpy()
    np.testing.assert_array_equal(a, b)
    assert sorted(a[:, 0].tolist()) == list(range(0, 20, 2)) and (a[:, 1] == a[:, 0] + 1).all()
    assert not np.array_equal(a, x.asnumpy()) or not np.array_equal(
        mx.random.shuffle(x).asnumpy(), a
    )
    # The mean of 20000 exponential draws of scale 2 is 2 within a few standard errors (0.014).
    e = mx.nd.random.exponential(2.0, shape=(20000,)).asnumpy()
    assert e.min() >= 0 and abs(e.mean() - 2.0) < 0.1
    assert mx.random.randn(2, 3).shape == (2, 3)
    like = mx.nd.random.uniform_like(mx.nd.zeros((2, 2), dtype="float64"), low=5, high=6)
    assert like.dtype == np.float64 and (like.asnumpy() >= 5).all()


def test_more_test_helpers() -> None:
    from mxrs import test_utils as tu

    x = mx.sym.Variable("x")
    np.testing.assert_array_equal(tu.simple_forward(x * 2, x=np.array([1.0, 2.0])), [2, 4])
    assert tu.same_symbol_structure(mx.sym.relu(x), mx.sym.relu(mx.sym.Variable("y")))
    assert not tu.same_symbol_structure(mx.sym.relu(x), mx.sym.sigmoid(x))
    rng = np.random.RandomState(0)
    assert tu.mean_check(lambda n: rng.normal(1.0, 2.0, n), 1.0, 2.0, nsamples=20000)
    assert not tu.mean_check(lambda n: rng.normal(1.5, 2.0, n), 1.0, 2.0, nsamples=20000)
    assert tu.var_check(lambda n: rng.normal(0.0, 2.0, n), 2.0, nsamples=20000)
    buckets, probs = tu.gen_buckets_probs_with_ppf(lambda q: q, 4)
    assert buckets == [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)] and probs == [0.25] * 4
    tu.compare_ndarray_tuple((mx.nd.ones(2), (mx.nd.zeros(1),)), (np.ones(2), (np.zeros(1),)))
    with pytest.raises(AssertionError):
        tu.compare_ndarray_tuple(mx.nd.ones(2), np.zeros(2))
    dummy = tu.DummyIter(mx.io.NDArrayIter(np.arange(6), batch_size=2))
    assert dummy.next() is dummy.next()
    np.testing.assert_array_equal(tu.create_2d_tensor(2, 3).asnumpy(), [[0, 0, 0], [1, 1, 1]])


def test_hidden_attribute_keys_as_mxnet() -> None:
    # MXNet's test_attr.py cases: lr_mult and the like under both names, on variables and ops.
    with mx.AttrScope(group="4", data="great"):
        data = mx.sym.Variable(
            "data", attr={"dtype": "data", "group": "1", "force_mirroring": "True"}, lr_mult=1
        )
        other = mx.sym.Variable("data2")
    assert other.attr("group") == "4" and data.attr("group") == "1"
    assert data.attr("lr_mult") == "1" and data.attr("__lr_mult__") == "1"
    assert data.attr("force_mirroring") == "True" and data.attr("__force_mirroring__") == "True"
    var = mx.sym.Variable("x", attr={"mood": "angry"})
    conv = mx.sym.Convolution(
        data=var, name="conv", kernel=(1, 1), num_filter=1, attr={"__mood__": "so so"}, lr_mult=1
    )
    attrs = conv.attr_dict()
    assert attrs["conv"]["lr_mult"] == "1" and attrs["conv"]["__lr_mult__"] == "1"
    assert attrs["conv_weight"]["__mood__"] == "so so" and attrs["x"] == {"mood": "angry"}
    assert mx.init.Constant(mx.nd.ones((2,))).dumps() == '["constant", {"value": [1.0, 1.0]}]'


def test_slice_assign_and_crop_assign_as_mxnet() -> None:
    x = mx.nd.array(np.arange(12).reshape(3, 4))
    assert x.slice_assign(mx.nd.ones((2, 2)), (0, 1), (2, 3), (None, None)) is x
    same(x, [[0, 1, 1, 3], [4, 1, 1, 7], [8, 9, 10, 11]])
    x.slice_assign_scalar(7, (1, None), (3, None), (1, 2))
    same(x, [[0, 1, 1, 3], [7, 1, 7, 7], [7, 9, 7, 11]])
    a = mx.nd.array(np.arange(12).reshape(3, 4))
    b = mx.nd._internal._crop_assign(a, mx.nd.zeros((1, 2)), begin=(2, 1), end=(3, 3))
    same(a, np.arange(12).reshape(3, 4))
    same(b, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 0, 0, 11]])
    c = mx.nd._internal._slice_assign_scalar(a, scalar=5, begin=(0, 0), end=(1, 4), step=(1, 2))
    same(c, [[5, 1, 5, 3], [4, 5, 6, 7], [8, 9, 10, 11]])
    mx.nd._internal._slice_assign(a, mx.nd.full((3, 1), 9), begin=(0, 3), end=(3, 4), out=a)
    same(a[:, 3], [9, 9, 9])
