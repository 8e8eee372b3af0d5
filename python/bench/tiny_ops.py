"""Per-op cost from Python of a tiny op, ``c = a + b`` on 1-element arrays: a chain (each op
reads the previous result) and independent ops (each reads the same inputs), for mxrs and, in
the same run, numpy and PyTorch eager where installed. The figure is the best of several
repeats of N ops, divided by N, the final wait included.

    python python/bench/tiny_ops.py [--ops N] [--repeats R] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable

import mxrs as mx
import numpy as np


def best(run: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(ops: int, repeats: int) -> dict:
    out: dict = {"ops": ops, "repeats": repeats}

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

    mx_chain()
    out["mxrs_chain_us"] = best(mx_chain, repeats) / ops * 1e6
    out["mxrs_independent_us"] = best(mx_independent, repeats) / ops * 1e6

    na, nb = np.ones(1, dtype=np.float32), np.ones(1, dtype=np.float32)

    def np_chain() -> None:
        c = na
        for _ in range(ops):
            c = c + nb

    def np_independent() -> None:
        for _ in range(ops):
            na + nb

    out["numpy_chain_us"] = best(np_chain, repeats) / ops * 1e6
    out["numpy_independent_us"] = best(np_independent, repeats) / ops * 1e6

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

        torch_chain()
        out["torch_chain_us"] = best(torch_chain, repeats) / ops * 1e6
        out["torch_independent_us"] = best(torch_independent, repeats) / ops * 1e6
        out["torch_version"] = torch.__version__
        out["ratio_chain_vs_torch"] = out["mxrs_chain_us"] / out["torch_chain_us"]
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
