"""MXNet 1.9.1's memory for training a model graph with and without its mirror
(`MXNET_BACKWARD_DO_MIRROR=1`), the baseline beside `plan --train --mirror` (docs/benchmarks.md,
recomputation).

    python tools/mxnet_mirror_baseline.py graphs/resnet50_v1-symbol.json 32,3,224,224 [--time N]

Binds the graph for training (every argument but the data getting a gradient) in a fresh
process per setting, reads the bytes MXNet's planner allocates from the executor's debug
string, and with --time also the median forward+backward time of N steps. Prints one JSON line.
"""

import json
import os
import re
import subprocess
import sys


def child(path, shape, iters):
    import time

    import mxnet as mx
    import numpy as np

    sym = mx.sym.load(path)
    grads = {n: ("null" if n == "data" else "write") for n in sym.list_arguments()}
    exe = sym.simple_bind(mx.cpu(), data=shape, grad_req=grads)
    found = re.search(r"Total (\d+) MB allocated", exe.debug_str())
    out = {"mb": int(found.group(1)) if found else None}
    if iters:
        rng = np.random.RandomState(0)
        for d in (exe.arg_dict, exe.aux_dict):
            for n, v in d.items():
                v[:] = 1.0 if "var" in n else rng.uniform(-0.1, 0.1, v.shape)
        ts = []
        for i in range(iters + 1):
            t = time.perf_counter()
            exe.forward(is_train=True)
            exe.backward([mx.nd.ones(o.shape) for o in exe.outputs])
            mx.nd.waitall()
            if i:
                ts.append((time.perf_counter() - t) * 1e3)
        out["forward_backward_ms"] = sorted(ts)[len(ts) // 2]
    print(json.dumps(out))


def main():
    if sys.argv[1] == "--child":
        child(sys.argv[2], tuple(int(v) for v in sys.argv[3].split(",")), int(sys.argv[4]))
        return
    path, shape = sys.argv[1], sys.argv[2]
    iters = int(sys.argv[sys.argv.index("--time") + 1]) if "--time" in sys.argv else 0
    result = {"model": os.path.basename(path), "shape": shape}
    for mirror in ("0", "1"):
        env = dict(os.environ, MXNET_BACKWARD_DO_MIRROR=mirror, MXNET_SUBGRAPH_BACKEND="NONE")
        line = (
            subprocess.run(
                [sys.executable, __file__, "--child", path, shape, str(iters)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        key = "mirror" if mirror == "1" else "plain"
        for k, v in json.loads(line).items():
            result[f"{key}_{k}"] = v
    print(json.dumps(result))


if __name__ == "__main__":
    main()
