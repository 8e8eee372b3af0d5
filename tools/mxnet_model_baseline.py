"""MXNet 1.9.1's own time for a model graph on this machine's CPU, the baseline beside
`run_model` (docs/benchmarks.md, models on the CPU).

    MXNET_SUBGRAPH_BACKEND=NONE python tools/mxnet_model_baseline.py \
        graphs/resnet18_v1-symbol.json 1,3,224,224

Binds the graph with uniform weights (variances 1), times 20 inference forwards and 20 training
forward+backward passes (head gradients of ones, every argument but the data getting a
gradient) after 3 untimed ones, and prints the medians in ms as one JSON line.
"""

import json
import sys
import time

import mxnet as mx
import numpy as np


def main():
    path, shape = sys.argv[1], tuple(int(v) for v in sys.argv[2].split(","))
    sym = mx.sym.load(path)
    grads = {n: ("null" if n == "data" else "write") for n in sym.list_arguments()}
    exe = sym.simple_bind(mx.cpu(), data=shape, grad_req=grads)
    rng = np.random.RandomState(0)
    for d in (exe.arg_dict, exe.aux_dict):
        for n, v in d.items():
            v[:] = 1.0 if "var" in n else rng.uniform(-0.1, 0.1, v.shape)

    def timed(train, iters=20):
        ts = []
        for i in range(iters + 3):
            t = time.perf_counter()
            exe.forward(is_train=train)
            if train:
                exe.backward([mx.nd.ones(o.shape) for o in exe.outputs])
                for g in exe.grad_arrays:
                    if g is not None:
                        g.wait_to_read()
            for o in exe.outputs:
                o.wait_to_read()
            if i >= 3:
                ts.append((time.perf_counter() - t) * 1e3)
        return float(np.median(ts))

    print(json.dumps({"forward_ms": timed(False), "forward_backward_ms": timed(True)}))


if __name__ == "__main__":
    main()
