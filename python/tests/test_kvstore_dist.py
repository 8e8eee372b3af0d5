"""mx.kv across processes: the digits CNN trained with ``Module.fit`` and a ``dist_sync`` store
by two processes under ``mpiexec``, each on its share of every batch, ends with the same
parameters on both and a held-out accuracy like one process's; with a ``dist_async`` store
(rank 0 running the Python updater for both) the same parameters on both at the end, a good
accuracy and the staleness reported. Skipped (saying why) where the package was built without
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


def _two_ranks(kind: str) -> list[dict]:
    """The JSON lines of the CNN example run by two ranks with a ``kind`` store."""
    if not mx._native.KV_ACROSS_PROCESSES:
        pytest.skip("the package was built without the mpi feature")
    if shutil.which("mpiexec") is None:
        pytest.skip("no mpiexec here")
    cmd = ["mpiexec", "-n", "2", sys.executable, str(SCRIPT)]
    run = subprocess.run(
        [*cmd, "--kvstore", kind, "--json", "--epochs", "10"],
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
