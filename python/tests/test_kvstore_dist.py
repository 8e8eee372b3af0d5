"""mx.kv across processes: the digits CNN trained with ``Module.fit`` and a ``dist_sync`` store
by two processes under ``mpiexec``, each on its share of every batch, ends with the same
parameters on both and a held-out accuracy like one process's; with a ``dist_async`` store
(rank 0 running the Python updater for both) the same parameters on both at the end, a good
accuracy and the staleness reported; ``pushpull`` of one key and of a list, into the value and
into outs, summing over the ranks. Skipped (saying why) where the package was built without
the ``mpi`` feature or ``mpiexec`` is missing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import mxrs as mx
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "python" / "train_cnn_module.py"


def _on_two_ranks(args: list[str]) -> list[dict]:
    """The JSON lines printed by ``python ARGS`` run by two ranks under ``mpiexec``."""
    if not mx._native.KV_ACROSS_PROCESSES:
        pytest.skip("the package was built without the mpi feature")
    if shutil.which("mpiexec") is None:
        pytest.skip("no mpiexec here")
    run = subprocess.run(
        ["mpiexec", "-n", "2", sys.executable, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=SCRIPT.parent,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [json.loads(m) for m in re.findall(r"\{[^{}]*\}", run.stdout)]
    assert sorted(r["rank"] for r in lines) == [0, 1], run.stdout
    return lines


def _two_ranks(kind: str) -> list[dict]:
    """The JSON lines of the CNN example run by two ranks with a ``kind`` store."""
    return _on_two_ranks([str(SCRIPT), "--kvstore", kind, "--json", "--epochs", "10"])


PUSHPULL = """
import json
import mxrs as mx
kv = mx.kv.create("dist_sync")
r = kv.rank
for k in ("w", "a", "b"):
    kv.init(k, mx.nd.zeros((3,)))
g = mx.nd.array([1.0 + r, 2.0, 10.0 * r])
kv.pushpull("w", g)
h = mx.nd.array([r, r, r])
outs = [mx.nd.zeros((3,)), mx.nd.zeros((3,))]
kv.pushpull(["a", "b"], [g, h], out=outs)
print(json.dumps({"rank": r, "into_value": g.asnumpy().tolist(),
                  "into_outs": [o.asnumpy().tolist() for o in outs]}))
"""


def test_pushpull_sums_over_the_ranks_into_the_value_or_out() -> None:
    lines = _on_two_ranks(["-c", PUSHPULL])
    for line in lines:
        # One key, into the value: (1 + 2, 2 + 2, 0 + 10) on both ranks.
        assert line["into_value"] == [3.0, 4.0, 10.0], line
        # Two keys into their outs: that sum pushed by both ranks, and 0 + 1.
        assert line["into_outs"] == [[6.0, 8.0, 20.0], [1.0, 1.0, 1.0]], line


def test_module_fit_with_dist_async_ends_with_rank_0s_parameters_on_both() -> None:
    lines = _two_ranks("dist_async")
    assert all(r["workers"] == 2 for r in lines)
    assert lines[0]["params_sha256"] == lines[1]["params_sha256"]
    assert lines[0]["test_accuracy"] > 0.9
    # Every update was counted on rank 0, and rank 1 heard the same tally at its last pull.
    assert lines[0]["staleness_updates"] > 0
    assert lines[0]["staleness_updates"] == lines[1]["staleness_updates"]


def test_module_fit_on_two_processes_gives_both_the_same_parameters() -> None:
    lines = _two_ranks("dist_sync")
    assert all(r["workers"] == 2 for r in lines)
    assert lines[0]["params_sha256"] == lines[1]["params_sha256"]
    assert lines[0]["test_accuracy"] > 0.95
