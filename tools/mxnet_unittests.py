"""Runs MXNet 1.9.1's own unit test files against the installed ``mxrs`` package, with
``import mxnet`` redirected to ``mxrs``, and prints per file how many test functions were
selected, passed and failed, and the failures grouped by cause.

    # a checkout of apache/mxnet at tag 1.9.1 (only its tests/python folder is read)
    git -C MXNET_GIT archive 1.9.1 tests/python | tar -x -C /tmp/mxsrc
    python3 tools/mxnet_unittests.py /tmp/mxsrc --python target/pytest-venv/bin/python

How it runs: one pytest process per file, from the file's own folder (its ``common.py`` and
``../common`` are found as in MXNet's CI), with a pytest plugin written to a temporary folder
that makes ``import mxnet`` and ``import mxnet.X`` return ``mxrs`` and ``mxrs.X`` (the same
module objects, not copies). Seeds are fixed (``MXNET_TEST_SEED``, ``MXNET_MODULE_SEED``), and
each test function has a time limit (``--timeout``): one that runs past it fails with cause
``timeout``. The Python given by ``--python`` needs the package installed, with pytest and nose
(MXNet 1.9.1's tests import ``nose.tools``): ``--install`` installs the latter two with pip.

What is counted apart, and why (the rule, applied per test function by name and by the file's
own markers):
- ``gpu``: tests that need a GPU (their names say ``gpu``, ``cuda`` or ``cudnn``);
- ``gluon``: tests of ``mx.gluon``, out of scope until the Gluon work lands (they use
  ``mx.gluon`` or ``gluon.``);
- ``numpy``: tests of numpy mode (``mx.np``, ``mx.npx``, ``use_np``), out of scope;
- ``network``: tests that download (``download``, ``get_mnist``, ``get_cifar``);
- ``skipped``: tests the file itself skips (``unittest.skip``, ``SkipTest``).
Everything else counts: passed or failed. A file that fails at import counts each of its
selected tests as failed with the import's error as the cause.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

FILES = [
    "test_ndarray",
    "test_symbol",
    "test_autograd",
    "test_executor",
    "test_exc_handling",
    "test_engine",
    "test_kvstore",
    "test_profiler",
    "test_io",
    "test_operator",
    "test_sparse_ndarray",
    "test_sparse_operator",
]

# The pytest plugin: the alias of mxnet to mxrs, a time limit per test, and a record of each
# test's outcome with the last line of its error.
PLUGIN = r'''
import importlib, importlib.abc, importlib.machinery, json, os, signal, sys, traceback

import mxrs

class _Alias(importlib.abc.Loader):
    """Loads `mxnet.X` as the module `mxrs.X` itself."""

    def __init__(self, target):
        self.target = target
        self.spec = target.__spec__

    def create_module(self, spec):
        return self.target

    def exec_module(self, module):
        # The import machinery set the alias's spec on the module: give it its own back.
        module.__spec__ = self.spec


class _Redirect(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "mxnet" and not name.startswith("mxnet."):
            return None
        ours = "mxrs" + name[len("mxnet"):]
        try:
            module = importlib.import_module(ours)
        except ModuleNotFoundError as e:
            if e.name == ours:
                return None
            raise
        return importlib.machinery.ModuleSpec(name, _Alias(module))


sys.meta_path.insert(0, _Redirect())
for _name, _module in list(sys.modules.items()):
    if _name == "mxrs" or _name.startswith("mxrs."):
        sys.modules["mxnet" + _name[len("mxrs"):]] = _module

_LIMIT = float(os.environ.get("MXRS_TEST_TIMEOUT", "120"))
_RESULTS = os.environ["MXRS_TEST_RESULTS"]


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout(f"ran past the time limit of {_LIMIT:g} s")


import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, _LIMIT)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _cause(report):
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.splitlines()[0] if crash.message else "error"
    if isinstance(longrepr, tuple):
        return str(longrepr[2]).splitlines()[0]
    text = str(longrepr).strip().splitlines()
    return text[-1] if text else "error"


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        record = {
            "test": report.nodeid.split("::", 1)[-1],
            "when": report.when,
            "outcome": report.outcome,
            "cause": "" if report.outcome == "passed" else _cause(report),
        }
        with open(_RESULTS, "a") as f:
            f.write(json.dumps(record) + "\n")


def pytest_collectreport(report):
    if report.failed:
        with open(_RESULTS, "a") as f:
            f.write(json.dumps({"test": "<import>", "when": "collect", "outcome": "failed",
                                "cause": _cause(report)}) + "\n")
'''

# Which tests are counted apart (see the rule above): a GPU test by its name, the others by
# what their source (decorators included) uses.
GPU = re.compile(r"gpu|cuda|cudnn", re.IGNORECASE)
APART = [
    ("gluon", re.compile(r"\bgluon\b|\bnn\.|HybridBlock")),
    ("numpy", re.compile(r"\bmx\.np\b|\bnpx\b|use_np|\bnp_array\b|numpy_shape")),
    ("network", re.compile(r"download|get_mnist|get_cifar|urlopen")),
]


def test_functions(path: Path) -> dict[str, str]:
    """The file's test functions (module-level ``test_*``) with their source."""
    text = path.read_text()
    tree = ast.parse(text)
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            decos = "".join(ast.get_source_segment(text, d) or "" for d in node.decorator_list)
            out[node.name] = decos + "\n" + (ast.get_source_segment(text, node) or "")
    return out


def counted_apart(name: str, source: str) -> str | None:
    """Which group a test is counted in apart from the pass rate, if any (see the rule above)."""
    if GPU.search(name):
        return "gpu"
    return next((group for group, pattern in APART if pattern.search(source)), None)


def normalise(cause: str) -> str:
    """A failure's cause with its numbers and addresses blanked, for grouping."""
    cause = re.sub(r"0x[0-9a-f]+", "0x_", cause)
    cause = re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "N", cause)
    return cause[:160]


def run_file(python: str, folder: Path, name: str, plugin_dir: Path, args) -> dict:
    path = folder / f"{name}.py"
    functions = test_functions(path)
    results = Path(tempfile.mkstemp(prefix=f"{name}-", suffix=".jsonl")[1])
    env = dict(os.environ)
    env.update(
        PYTHONPATH=f"{plugin_dir}{os.pathsep}{env.get('PYTHONPATH', '')}",
        MXRS_TEST_RESULTS=str(results),
        MXRS_TEST_TIMEOUT=str(args.timeout),
        MXNET_TEST_SEED=str(args.seed),
        MXNET_MODULE_SEED=str(args.seed),
        PYTHONHASHSEED="0",
    )
    selected = {n: s for n, s in functions.items()}
    apart = {n: g for n, s in selected.items() if (g := counted_apart(n, s))}
    run = [n for n in selected if n not in apart]
    if args.only:
        run = [n for n in run if re.search(args.only, n)]
    t0 = time.time()
    cmd = [python, "-m", "pytest", "-p", "mxnet_redirect", "-q", "-x" if args.first else "-q"]
    cmd += ["-p", "no:cacheprovider", "--no-header", "-rN", "--tb=line"]
    cmd += [f"{path.name}::{n}" for n in run]
    try:
        proc = subprocess.run(
            cmd,
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=args.timeout * max(1, len(run)) + 120,
        )
        tail = (proc.stdout + proc.stderr)[-2000:]
    except subprocess.TimeoutExpired as e:
        tail = f"the file's run ran past its limit: {e}"
    wall = time.time() - t0
    records = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    results.unlink()
    outcome: dict[str, tuple[str, str]] = {}
    import_error = next((r["cause"] for r in records if r["test"] == "<import>"), None)
    for r in records:
        test = r["test"].split("[", 1)[0]
        if test == "<import>":
            continue
        prev = outcome.get(test)
        # A test's setup, call and teardown each report: a failure in any of them wins.
        if prev is None or (r["outcome"] == "failed" and prev[0] != "failed"):
            outcome[test] = (r["outcome"], r["cause"])
    passed, failed, skipped = [], {}, []
    for n in run:
        state, cause = outcome.get(n, ("failed", import_error or "did not run"))
        if state == "passed":
            passed.append(n)
        elif state == "skipped":
            skipped.append(n)
        else:
            if "ran past the time limit" in cause:
                cause = "timeout"
            failed[n] = cause
    groups = Counter(apart.values())
    groups["skipped"] = len(skipped)
    causes: dict[str, list[str]] = defaultdict(list)
    for n, c in failed.items():
        causes[normalise(c)].append(n)
    return {
        "file": name,
        "functions": len(functions),
        "selected": len(run) - len(skipped),
        "passed": len(passed),
        "failed": len(failed),
        "apart": dict(groups),
        "failures": dict(sorted(causes.items(), key=lambda kv: -len(kv[1]))),
        "wall_s": round(wall, 1),
        "tail": tail if not records else "",
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mxnet_src", help="an apache/mxnet source tree at tag 1.9.1 (its tests/python)")
    p.add_argument("--python", default=sys.executable, help="the Python with mxrs installed")
    p.add_argument("--files", nargs="*", default=FILES, help="test files, without .py")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per test function")
    p.add_argument("--seed", type=int, default=1234, help="MXNET_TEST_SEED")
    p.add_argument("--only", help="a regular expression: run only the tests it matches")
    p.add_argument("--first", action="store_true", help="stop each file at its first failure")
    p.add_argument("--install", action="store_true", help="pip install pytest and nose first")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--causes", type=int, default=8, help="causes listed per file")
    args = p.parse_args()
    folder = Path(args.mxnet_src) / "tests" / "python" / "unittest"
    if not folder.is_dir():
        print(f"no tests/python/unittest under {args.mxnet_src}", file=sys.stderr)
        return 2
    if args.install:
        subprocess.run([args.python, "-m", "pip", "install", "-q", "pytest", "nose"], check=True)
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        plugin_dir = Path(tmp)
        (plugin_dir / "mxnet_redirect.py").write_text(PLUGIN)
        for name in args.files:
            r = run_file(args.python, folder, name, plugin_dir, args)
            report.append(r)
            if not args.json:
                apart = ", ".join(f"{k} {v}" for k, v in sorted(r["apart"].items()) if v)
                share = 100.0 * r["passed"] / max(1, r["selected"])
                print(
                    f"{name}: {r['selected']} selected, {r['passed']} passed, "
                    f"{r['failed']} failed ({share:.0f}%); apart: {apart or 'none'}; "
                    f"{r['wall_s']} s"
                )
                for cause, tests in list(r["failures"].items())[: args.causes]:
                    more = f" +{len(tests) - 4}" if len(tests) > 4 else ""
                    print(f"    {len(tests):3d}  {cause}  [{', '.join(tests[:4])}{more}]")
                if r["tail"]:
                    print("    " + r["tail"].strip().replace("\n", "\n    "))
                sys.stdout.flush()
    sel = sum(r["selected"] for r in report)
    ok = sum(r["passed"] for r in report)
    if args.json:
        print(json.dumps({"files": report, "selected": sel, "passed": ok}))
    else:
        print(f"all: {sel} selected, {ok} passed ({100.0 * ok / max(1, sel):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
