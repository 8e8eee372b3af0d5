"""mx.kv within one process, with the cases of MXNet 1.9.1's test_kvstore.py: one key and
lists of keys, the sum of one value per device, an updater, str keys, the optimizer through the
store against its formula, optimizer states saved and restored, broadcast, clear errors; and
Module training through a store equal to training without one."""

from __future__ import annotations

from pathlib import Path

import mxrs as mx
import numpy as np
import pytest

SHAPE = (4, 4)
KEYS = [5, 7, 11]


def check(arr: mx.nd.NDArray, value: float) -> None:
    np.testing.assert_array_equal(arr.asnumpy(), np.full(arr.shape, value, dtype=np.float32))


def fresh(kind: str = "local") -> mx.kv.KVStore:
    kv = mx.kv.create(kind)
    kv.init(3, mx.nd.zeros(SHAPE))
    kv.init(KEYS, [mx.nd.zeros(SHAPE)] * len(KEYS))
    return kv


def test_single_key_and_lists_of_keys() -> None:
    kv = fresh()
    assert kv.type == "local" and kv.rank == 0 and kv.num_workers == 1
    kv.push(3, mx.nd.ones(SHAPE) * 4)
    out = mx.nd.empty(SHAPE)
    kv.pull(3, out=out)
    check(out, 4)
    kv.push(KEYS, [mx.nd.ones(SHAPE) * 4] * len(KEYS))
    outs = [mx.nd.empty(SHAPE) for _ in KEYS]
    kv.pull(KEYS, out=outs)
    for o in outs:
        check(o, 4)


@pytest.mark.parametrize("kind", ["local", "device"])
def test_values_of_several_devices_are_summed(kind: str) -> None:
    kv = fresh(kind)
    devices = [mx.cpu(i) for i in range(4)]
    kv.push(3, [mx.nd.ones(SHAPE, ctx=d) for d in devices])
    outs = [mx.nd.empty(SHAPE, ctx=d) for d in devices]
    kv.pull(3, out=outs)
    for o in outs:
        check(o, len(devices))
    kv.push(KEYS, [[mx.nd.ones(SHAPE, ctx=d) * 2 for d in devices]] * len(KEYS))
    for k in KEYS:
        outs = [mx.nd.empty(SHAPE, ctx=d) for d in devices]
        kv.pull(k, out=outs)
        for o in outs:
            check(o, 2 * len(devices))
    # pushpull writes the sum back into the values when no out is given.
    vals = [mx.nd.ones(SHAPE, ctx=d) for d in devices]
    kv.pushpull(3, vals)
    for v in vals:
        check(v, len(devices))


def test_updater_runs_on_every_push() -> None:
    kv = fresh()

    def updater(key: int, recv: mx.nd.NDArray, local: mx.nd.NDArray) -> None:
        local += recv * 2

    kv.set_updater(updater)
    for _ in range(3):
        kv.push(3, [mx.nd.ones(SHAPE, ctx=mx.cpu(i)) for i in range(2)])
    out = mx.nd.empty(SHAPE)
    kv.pull(3, out=out)
    check(out, 3 * 2 * 2)


def test_str_keys() -> None:
    kv = mx.kv.create()
    kv.init("fc1_weight", mx.nd.ones(SHAPE))
    kv.init(["a", "b"], [mx.nd.zeros(SHAPE), mx.nd.zeros((2,))])
    kv.push("b", mx.nd.array([1.0, 2.0]))
    out = mx.nd.empty((2,))
    kv.pull("b", out=out)
    np.testing.assert_array_equal(out.asnumpy(), [1.0, 2.0])
    kv.pull("fc1_weight", out=[mx.nd.empty(SHAPE)])


def test_optimizer_through_the_store_and_its_states(tmp_path: Path) -> None:
    w0 = np.random.RandomState(0).uniform(-1, 1, SHAPE).astype(np.float32)
    grads = [np.random.RandomState(s).uniform(-1, 1, SHAPE).astype(np.float32) for s in range(6)]

    def run(kv: mx.kv.KVStore, steps: range) -> np.ndarray:
        for s in steps:
            kv.push(0, [mx.nd.array(grads[s]), mx.nd.array(grads[s], ctx=mx.cpu(1))])
        out = mx.nd.empty(SHAPE)
        kv.pull(0, out=out)
        return out.asnumpy()

    def store(start: np.ndarray) -> mx.kv.KVStore:
        kv = mx.kv.create("local")
        kv.init(0, mx.nd.array(start))
        kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9))
        return kv

    a = store(w0)
    middle = run(a, range(3))
    mom, want = np.zeros(SHAPE, np.float32), w0.copy()
    for s in range(3):
        mom = 0.9 * mom - 0.1 * (2 * grads[s])
        want = want + mom
    np.testing.assert_allclose(middle, want, rtol=1e-5, atol=1e-6)
    path = str(tmp_path / "states")
    a.save_optimizer_states(path)
    end = run(a, range(3, 6))
    b = store(middle)
    b.load_optimizer_states(path)
    np.testing.assert_array_equal(run(b, range(3, 6)), end)
    c = store(middle)
    assert not np.array_equal(run(c, range(3, 6)), end), "the momentum made no difference"


def test_broadcast_and_capabilities() -> None:
    kv = mx.kv.create()
    devices = [mx.cpu(i) for i in range(2)]
    outs = [mx.nd.zeros(SHAPE, ctx=d) for d in devices]
    kv.broadcast("w", mx.nd.ones(SHAPE) * 3, out=outs)
    for o in outs:
        check(o, 3)
    # A list of keys, one value and one output each.
    outs = [mx.nd.zeros(SHAPE) for _ in KEYS]
    kv.broadcast(KEYS, [mx.nd.ones(SHAPE) * k for k in KEYS], out=outs)
    for k, o in zip(KEYS, outs):
        check(o, k)
    assert kv.is_capable(mx.kv.KVStore.OPTIMIZER)
    with pytest.raises(ValueError, match="unknown capability 'sparse'"):
        kv.is_capable("sparse")


def test_mistakes_are_errors() -> None:
    kv = mx.kv.create()
    with pytest.raises(mx.MXNetError, match="key 9 was not initialized"):
        kv.push(9, mx.nd.ones(SHAPE))
    kv.init(9, mx.nd.ones(SHAPE))
    with pytest.raises(mx.MXNetError, match="key 9 is already initialized"):
        kv.init(9, mx.nd.ones(SHAPE))
    with pytest.raises(mx.MXNetError, match="array 0 of key 9"):
        kv.push(9, mx.nd.ones((2, 2)))
    with pytest.raises(mx.MXNetError, match="unknown kind 'nccl'"):
        mx.kv.create("nccl")
    with pytest.raises(mx.MXNetError, match="no optimizer"):
        kv.save_optimizer_states("unused")

    def failing(key: int, recv: mx.nd.NDArray, local: mx.nd.NDArray) -> None:
        raise RuntimeError("the updater broke")

    kv.set_updater(failing)
    with pytest.raises(mx.MXNetError, match="key 9: RuntimeError: the updater broke"):
        kv.push(9, mx.nd.ones(SHAPE))


def test_module_through_a_store_equals_module_without_one() -> None:
    def mlp() -> mx.sym.Symbol:
        net = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=8, name="fc1")
        net = mx.sym.Activation(net, act_type="relu")
        net = mx.sym.FullyConnected(net, num_hidden=3, name="fc2")
        return mx.sym.SoftmaxOutput(net, name="softmax")

    rng = np.random.RandomState(3)
    batches = [
        mx.io.DataBatch(
            [mx.nd.array(rng.uniform(-1, 1, (4, 5)))], [mx.nd.array(rng.randint(0, 3, 4))]
        )
        for _ in range(4)
    ]
    trained = []
    for kvstore in [None, mx.kv.create("local")]:
        mx.random.seed(7)
        mod = mx.mod.Module(mlp())
        mod.bind([("data", (4, 5))], [("softmax_label", (4,))])
        mod.init_params(mx.init.Xavier())
        mod.init_optimizer(
            kvstore=kvstore,
            optimizer="sgd",
            optimizer_params={"learning_rate": 0.5, "momentum": 0.9},
        )
        for b in batches:
            mod.forward(b)
            mod.backward()
            mod.update()
        trained.append({k: v.asnumpy() for k, v in mod.get_params()[0].items()})
    assert trained[0].keys() == trained[1].keys()
    for k in trained[0]:
        np.testing.assert_array_equal(trained[0][k], trained[1][k], err_msg=k)


def test_stores_across_processes_need_mpi() -> None:
    try:
        kv = mx.kv.create("dist_sync")
    except mx.MXNetError as e:
        assert "mpi" in str(e)
    else:
        assert kv.num_workers >= 1
