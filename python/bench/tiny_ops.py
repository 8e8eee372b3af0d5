"""Per-op cost from Python of a tiny op, ``c = a + b`` on 1-element arrays: a chain (each op
reads the previous result) and independent ops (each reads the same inputs), for mxrs and, in
the same run, numpy and PyTorch eager where installed. The figure is the best of several
repeats of N ops, divided by N, the final wait included; the repeats of the cases alternate.

    python python/bench/tiny_ops.py [--ops N] [--repeats R] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable

import mxrs as mx
import numpy as np


def measure(ops: int, repeats: int) -> dict:
    """Each repeat runs every case once, in turn, so that a slow spell of a shared machine falls
    on all of them alike; a case's figure is its best repeat."""
    out: dict = {"ops": ops, "repeats": repeats}
    cases: dict[str, Callable[[], None]] = {}

    a, b = mx.nd.ones((1,)), mx.nd.ones((1,))

    def mx_chain() -> None:
        c = a
        for _ in range(ops):
            c = c + b
        c.wait_to_read()

    def mx_independent() -> None:
        c = a
        for _ in range(ops):
            c = a + b
        c.wait_to_read()

    cases["mxrs_chain_us"], cases["mxrs_independent_us"] = mx_chain, mx_independent

    na, nb = np.ones(1, dtype=np.float32), np.ones(1, dtype=np.float32)

    def np_chain() -> None:
        c = na
        for _ in range(ops):
            c = c + nb

    def np_independent() -> None:
        for _ in range(ops):
            na + nb

    cases["numpy_chain_us"], cases["numpy_independent_us"] = np_chain, np_independent

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        ta, tb = torch.ones(1), torch.ones(1)

        def torch_chain() -> None:
            c = ta
            for _ in range(ops):
                c = c + tb

        def torch_independent() -> None:
            for _ in range(ops):
                ta + tb

        cases["torch_chain_us"], cases["torch_independent_us"] = torch_chain, torch_independent
        out["torch_version"] = torch.__version__

    for run in cases.values():
        run()  # warm up
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for key, run in cases.items():
            t0 = time.perf_counter()
            run()
            times[key].append(time.perf_counter() - t0)
    for key, ts in times.items():
        out[key] = min(ts) / ops * 1e6
    if torch is not None:
        out["ratio_chain_vs_torch"] = out["mxrs_chain_us"] / out["torch_chain_us"]
        out["ratio_independent_vs_torch"] = out["mxrs_independent_us"] / out["torch_independent_us"]
    out["ratio_chain_vs_numpy"] = out["mxrs_chain_us"] / out["numpy_chain_us"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=20000, help="ops per repeat (default 20000)")
    p.add_argument("--repeats", type=int, default=7, help="repeats, the best kept (default 7)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args()
    r = measure(args.ops, args.repeats)
    if args.json:
        print(json.dumps(r))
        return
    for k, v in r.items():
        print(f"{k:28} {v:.3f}" if isinstance(v, float) else f"{k:28} {v}")


if __name__ == "__main__":
    main()
