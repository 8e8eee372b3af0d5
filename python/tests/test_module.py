"""mx.optimizer against the update formulas in numpy, mx.io.NDArrayIter's batching, mx.metric
against numpy, mx.init, and mx.mod.Module: fit on the digits data to the accuracy the Rust
trainer reaches, predict, score, parameters and checkpoints. The cases follow the subjects of
MXNet 1.9.1's test_module.py, test_io.py, test_metric.py and test_optimizer.py."""

from __future__ import annotations

import gzip
from pathlib import Path

import mxrs as mx
import numpy as np
import pytest

DIGITS = Path(__file__).resolve().parents[2] / "data" / "digits.csv.gz"


def arrays(*shape: int) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.random.uniform(-1, 1, shape).astype(np.float64),
        np.random.uniform(-1, 1, shape).astype(np.float64),
    )


@pytest.mark.parametrize("momentum, wd, clip", [(0.0, 0.0, None), (0.9, 0.01, 0.3)])
def test_sgd_steps_as_the_formula(momentum: float, wd: float, clip: float | None) -> None:
    w0, g = arrays(5)
    opt = mx.optimizer.SGD(
        learning_rate=0.1, momentum=momentum, wd=wd, rescale_grad=0.5, clip_gradient=clip
    )
    upd = mx.optimizer.get_updater(opt)
    w = mx.nd.array(w0, dtype="float64")
    mom, want = np.zeros(5), w0.copy()
    for _ in range(3):
        upd(0, mx.nd.array(g, dtype="float64"), w)
        gg = g * 0.5
        if clip is not None:
            gg = np.clip(gg, -clip, clip)
        mom = momentum * mom - 0.1 * (gg + wd * want)
        want = want + mom
    np.testing.assert_allclose(w.asnumpy(), want, rtol=1e-6)


def test_adam_nag_rmsprop_step_as_their_formulas() -> None:
    w0, g = arrays(6)
    # Adam, bias-corrected.
    w = mx.nd.array(w0, dtype="float64")
    upd = mx.optimizer.get_updater(mx.optimizer.Adam(learning_rate=0.01))
    m, v, want = np.zeros(6), np.zeros(6), w0.copy()
    for t in range(1, 4):
        upd(0, mx.nd.array(g, dtype="float64"), w)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        lr = 0.01 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        want = want - lr * m / (np.sqrt(v) + 1e-8)
    np.testing.assert_allclose(w.asnumpy(), want, rtol=1e-5)
    # NAG with momentum.
    w = mx.nd.array(w0, dtype="float64")
    upd = mx.optimizer.get_updater(mx.optimizer.NAG(learning_rate=0.1, momentum=0.9))
    mom, want = np.zeros(6), w0.copy()
    for _ in range(3):
        upd(0, mx.nd.array(g, dtype="float64"), w)
        mom = 0.9 * mom + g
        want = want - 0.1 * (g + 0.9 * mom)
    np.testing.assert_allclose(w.asnumpy(), want, rtol=1e-10)
    # RMSProp.
    w = mx.nd.array(w0, dtype="float64")
    upd = mx.optimizer.get_updater(mx.optimizer.RMSProp(learning_rate=0.01, gamma1=0.9))
    n, want = np.zeros(6), w0.copy()
    for _ in range(3):
        upd(0, mx.nd.array(g, dtype="float64"), w)
        n = 0.9 * n + 0.1 * g * g
        want = want - 0.01 * g / np.sqrt(n + 1e-8)
    np.testing.assert_allclose(w.asnumpy(), want, rtol=1e-10)
    with pytest.raises(ValueError):
        mx.optimizer.create("adagrad-ish")


def test_ndarray_iter_batches_pads_discards_and_rolls_over() -> None:
    x = np.arange(10 * 2, dtype=np.float32).reshape(10, 2)
    y = np.arange(10, dtype=np.float32)
    it = mx.io.NDArrayIter(x, y, batch_size=4)
    batches = list(it)
    assert [b.pad for b in batches] == [0, 0, 2]
    np.testing.assert_array_equal(batches[2].label[0].asnumpy(), [8, 9, 0, 1])
    assert it.provide_data[0].name == "data" and it.provide_data[0].shape == (4, 2)
    assert it.provide_label[0].name == "softmax_label"
    it.reset()
    assert len(list(it)) == 3
    assert len(list(mx.io.NDArrayIter(x, y, batch_size=4, last_batch_handle="discard"))) == 2
    roll = mx.io.NDArrayIter(x, y, batch_size=4, last_batch_handle="roll_over")
    assert len(list(roll)) == 2
    roll.reset()
    first = next(roll)
    np.testing.assert_array_equal(first.label[0].asnumpy(), [8, 9, 0, 1])
    seen = np.concatenate(
        [b.label[0].asnumpy() for b in mx.io.NDArrayIter(x, y, batch_size=5, shuffle=True)]
    )
    assert sorted(seen.tolist()) == list(range(10))
    named = mx.io.NDArrayIter({"a": x, "b": x}, batch_size=5)
    assert [d.name for d in named.provide_data] == ["a", "b"]
    with pytest.raises(ValueError):
        mx.io.NDArrayIter(x, y[:5])


def test_metrics_match_numpy() -> None:
    pred = np.random.uniform(0.01, 1, (20, 4))
    pred /= pred.sum(1, keepdims=True)
    label = np.random.randint(0, 4, 20).astype(np.float32)
    acc = mx.metric.create("acc")
    acc.update([mx.nd.array(label)], [mx.nd.array(pred)])
    assert acc.get() == ("accuracy", pytest.approx((pred.argmax(1) == label).mean()))
    ce = mx.metric.CrossEntropy()
    ce.update([mx.nd.array(label)], [mx.nd.array(pred)])
    want = -np.log(pred[np.arange(20), label.astype(int)] + 1e-12).mean()
    assert ce.get()[1] == pytest.approx(want, rel=1e-5)
    mse = mx.metric.MSE()
    mse.update([mx.nd.array(label)], [mx.nd.array(pred[:, 0])])
    assert mse.get()[1] == pytest.approx(((label - pred[:, 0]) ** 2).mean(), rel=1e-5)
    both = mx.metric.create(["acc", "mse"])
    assert len(both.get_name_value()) == 2


def test_initializers() -> None:
    w = mx.nd.zeros((50, 40))
    mx.init.Xavier()("fc_weight", w)
    bound = np.sqrt(3.0 / 45)
    v = w.asnumpy()
    assert np.abs(v).max() <= bound and v.std() > bound / 3
    b = mx.nd.ones((4,))
    mx.init.Uniform()("fc_bias", b)
    np.testing.assert_array_equal(b.asnumpy(), 0)
    g = mx.nd.zeros((4,))
    mx.init.Normal()("bn_gamma", g)
    np.testing.assert_array_equal(g.asnumpy(), 1)
    mx.init.Constant(0.5)("w_weight", g)
    np.testing.assert_array_equal(g.asnumpy(), 0.5)
    # A name no rule covers is refused, as MXNet refuses it.
    with pytest.raises(ValueError, match="no initialization rule for w"):
        mx.init.Constant(0.5)("w", g)


def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    with gzip.open(DIGITS, "rt") as f:
        rows = np.loadtxt(f, delimiter=",")
    order = np.random.RandomState(0).permutation(len(rows))
    rows = rows[order]
    x, y = (rows[:, :64] / 16.0).astype(np.float32), rows[:, 64].astype(np.float32)
    cut = len(rows) * 4 // 5
    return x[:cut], y[:cut], x[cut:], y[cut:]


def mlp() -> mx.sym.Symbol:
    net = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=64, name="fc1")
    net = mx.sym.Activation(net, act_type="relu", name="relu1")
    net = mx.sym.FullyConnected(net, num_hidden=10, name="fc2")
    return mx.sym.SoftmaxOutput(net, name="softmax")


def test_module_fits_the_digits(tmp_path: Path) -> None:
    mx.random.seed(1)
    np.random.seed(1)  # the iterator's shuffle
    xtr, ytr, xte, yte = digits()
    train = mx.io.NDArrayIter(xtr, ytr, batch_size=32, shuffle=True)
    test = mx.io.NDArrayIter(xte, yte, batch_size=32)
    mod = mx.mod.Module(mlp())
    mod.fit(
        train,
        eval_data=test,
        num_epoch=10,
        optimizer="adam",
        optimizer_params={"learning_rate": 0.01},
        initializer=mx.init.Xavier(),
    )
    ((name, acc),) = mod.score(test, "acc")
    assert name == "accuracy" and acc > 0.93
    probs = mod.predict(test)
    assert probs.shape == (len(xte), 10)
    np.testing.assert_allclose(probs.asnumpy().sum(1), 1, rtol=1e-5)
    assert (probs.asnumpy().argmax(1) == yte).mean() == pytest.approx(acc)
    # Parameters survive a checkpoint.
    mod.save_checkpoint(str(tmp_path / "mlp"), 10)
    back = mx.mod.Module.load(str(tmp_path / "mlp"), 10)
    back.bind(test.provide_data, test.provide_label, for_training=False)
    assert back.score(test, "acc")[0][1] == pytest.approx(acc)
    arg, aux = mod.get_params()
    assert sorted(arg) == ["fc1_bias", "fc1_weight", "fc2_bias", "fc2_weight"] and aux == {}


def test_module_step_by_step_and_errors() -> None:
    mod = mx.mod.Module(mlp())
    with pytest.raises(mx.MXNetError, match="bind"):
        mod.get_outputs()
    mod.bind([("data", (4, 64))], [("softmax_label", (4,))])
    mod.init_params(mx.init.Xavier())
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.1})
    batch = mx.io.DataBatch([mx.nd.ones((4, 64))], [mx.nd.array([1, 2, 3, 4])])
    before = mod.get_params()[0]["fc2_weight"].asnumpy()
    mod.forward(batch)
    mod.backward()
    mod.update()
    assert mod.get_outputs()[0].shape == (4, 10)
    assert not np.allclose(mod.get_params()[0]["fc2_weight"].asnumpy(), before)
    with pytest.raises(mx.MXNetError, match="not an argument"):
        mx.mod.Module(mlp(), data_names=("pixels",))
    with pytest.raises(mx.MXNetError, match="missing"):
        mod.set_params({"fc1_weight": mx.nd.zeros((64, 64))}, {})
