"""Calls from several Python threads at once (the GIL is released while the runtime works),
and waiting. The cases follow the subjects of MXNet 1.9.1's test_engine.py and
test_exc_handling.py."""

from __future__ import annotations

import threading
import time

import mxrs as mx
import numpy as np
import pytest


def test_threads_compute_the_same_as_one_thread() -> None:
    a = np.random.uniform(-1, 1, (64, 64)).astype(np.float32)

    def chain() -> np.ndarray:
        x, w = mx.nd.array(a), mx.nd.array(a)
        for _ in range(20):
            x = mx.nd.dot(x, w).tanh() * 0.5
        return x.asnumpy()

    want = chain()
    ref = a.astype(np.float64)
    for _ in range(20):
        ref = np.tanh(ref @ a) * 0.5
    np.testing.assert_allclose(want, ref, atol=1e-4)
    results: dict = {}
    errors: list = []

    def work(k: int) -> None:
        try:
            results[k] = chain()
        except Exception as e:  # noqa: BLE001 - any failure is reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(results) == 4
    for r in results.values():
        np.testing.assert_array_equal(r, want)


def test_recording_is_per_thread() -> None:
    seen: list = []
    with mx.autograd.record():
        t = threading.Thread(target=lambda: seen.append(mx.autograd.is_recording()))
        t.start()
        t.join()
        assert mx.autograd.is_recording()
    assert seen == [False]


def test_waitall_raises_a_failure_then_recovers() -> None:
    bad = mx.nd.take(mx.nd.ones((2, 2)), mx.nd.array([5], dtype="int64"), mode="raise")
    del bad
    try:
        mx.nd.waitall()
    except mx.MXNetError as e:
        assert "index 5" in str(e)
    x = mx.nd.ones((3,)) * 2
    mx.nd.waitall()
    np.testing.assert_array_equal(x.asnumpy(), [2, 2, 2])


def test_bulk_gives_the_results_of_running_op_by_op() -> None:
    with mx.engine.bulk(10):
        x = mx.nd.ones((10,))
        x *= 2
        x += 1
        x.wait_to_read()
        x += 1
        assert (x.asnumpy() == 4).all()
        for _ in range(100):
            x += 1
        y = x * 2
    assert (x.asnumpy() == 104).all()
    assert (y.asnumpy() == 208).all()


def test_set_bulk_size_returns_the_size_before() -> None:
    assert mx.engine.set_bulk_size(16) == 0
    try:
        with mx.engine.bulk(4):
            assert mx.engine.set_bulk_size(4) == 4
        assert mx.engine.set_bulk_size(0) == 16
    finally:
        mx.engine.set_bulk_size(0)
    with pytest.raises(ValueError, match="at least 0"):
        mx.engine.set_bulk_size(-1)


def test_bulked_ops_from_threads_and_their_failures() -> None:
    """Bulking is shared by every thread: each thread's chain is right, and a failure inside a
    unit is raised when its result is read."""
    out: dict = {}

    def chain(k: int) -> None:
        x = mx.nd.full((3,), k)
        for _ in range(200):
            x = x + 1
        out[k] = x.asnumpy()

    with mx.engine.bulk(8):
        threads = [threading.Thread(target=chain, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        bad = mx.nd.take(mx.nd.ones((2, 2)), mx.nd.array([5], dtype="int64"), mode="raise")
        with pytest.raises(mx.MXNetError, match="index 5"):
            (bad + 1).asnumpy()
    for k in range(4):
        np.testing.assert_array_equal(out[k], [k + 200] * 3)


def test_profiler_records_the_ops_run_while_on(tmp_path) -> None:
    import json

    mx.profiler.set_config(filename=str(tmp_path / "trace.json"))
    mx.nd.waitall()
    mx.profiler.dumps(reset=True)
    mx.profiler.set_state("run")
    a = mx.nd.ones((8, 8))
    mx.nd.dot(a, a).wait_to_read()
    mx.profiler.set_state("stop")
    mx.nd.relu(a).wait_to_read()  # not recorded
    table = mx.profiler.dumps()
    assert "dot" in table and "relu" not in table
    mx.profiler.dump()
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert any(e.get("name") == "dot" for e in events)
    with pytest.raises(ValueError):
        mx.profiler.set_state("go")


def test_mxnet_environment_variables_are_honoured() -> None:
    import os
    import subprocess
    import sys

    env = dict(os.environ, MXNET_ENGINE_TYPE="NaiveEngine", MXNET_CPU_WORKER_NTHREADS="2")
    env.pop("MXRS_ENGINE_TYPE", None)
    env.pop("MXRS_CPU_WORKER_NTHREADS", None)
    code = (
        "import os, mxrs as mx\n"
        "print(os.environ['MXRS_ENGINE_TYPE'], os.environ['MXRS_CPU_WORKER_NTHREADS'])\n"
        "print((mx.nd.ones((2,)) * 3).asnumpy().tolist())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split("\n")
    assert out[0] == "NaiveEngine 2" and out[1] == "[3.0, 3.0]"
    env["MXNET_ENGINE_TYPE"] = "NoSuchEngine"
    bad = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "MXRS_ENGINE_TYPE" in bad.stderr


def test_the_gil_is_released_while_the_runtime_works() -> None:
    # While the main thread waits for a long chain of products, another Python thread runs:
    # its ticks inside the wait's interval prove the wait let go of the GIL.
    a = mx.nd.random.uniform(shape=(500, 500))
    x = a
    for _ in range(40):
        x = mx.nd.dot(x, a) * 0.001
    ticks: list = []
    done = threading.Event()

    def tick() -> None:
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    t = threading.Thread(target=tick)
    t.start()
    begin = time.perf_counter()
    x.wait_to_read()
    end = time.perf_counter()
    done.set()
    t.join(timeout=60)
    inside = [s for s in ticks if begin < s < end]
    assert end - begin > 0.01, "the chain finished before the wait; make it longer"
    assert len(inside) >= 3, (len(inside), end - begin)
