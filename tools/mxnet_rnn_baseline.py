"""MXNet 1.9.1's own time for a fused RNN node on this machine's CPU, the baseline beside
`run_model` on the same graph (docs/benchmarks.md).

    python tools/mxnet_rnn_baseline.py OUT-symbol.json [--mode lstm] [--layers 2]
        [--steps 35] [--batch 32] [--input 256] [--hidden 256] [--bidirectional] [--dropout P]
        [--iters 20]

Writes the graph (data -> RNN, the parameters and initial states as arguments) to
OUT-symbol.json, so that ours runs the very file MXNet wrote:

    cargo run --release --example run_model -- OUT-symbol.json --shape data=35,32,256 --train --json

and prints one JSON line: MXNet's median forward (inference) and forward+backward (training,
head gradients of ones, every argument but the data getting a gradient) times in ms.
"""

import argparse
import json
import time

import mxnet as mx
import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--mode", default="lstm")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=35)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--input", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--bidirectional", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0, help="p, between layers in training")
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()

    args = dict(data=mx.sym.var("data"), parameters=mx.sym.var("rnn_parameters"),
                state=mx.sym.var("rnn_state"), state_size=a.hidden, num_layers=a.layers,
                mode=a.mode, bidirectional=a.bidirectional, state_outputs=True, name="rnn")
    if a.dropout > 0:
        args["p"] = a.dropout
    if a.mode == "lstm":
        args["state_cell"] = mx.sym.var("rnn_state_cell")
    sym = mx.sym.RNN(**args)
    with open(a.out, "w") as f:
        f.write(sym.tojson())

    shape = (a.steps, a.batch, a.input)
    grads = {n: ("null" if n == "data" else "write") for n in sym.list_arguments()}
    exe = sym.simple_bind(mx.cpu(), data=shape, grad_req=grads)
    rng = np.random.RandomState(0)
    for n, v in exe.arg_dict.items():
        v[:] = rng.uniform(-0.5, 0.5, v.shape)
    heads = [mx.nd.ones(o.shape) for o in exe.outputs]

    def timed(train):
        times = []
        for i in range(a.iters + 3):
            t = time.perf_counter()
            exe.forward(is_train=train)
            if train:
                exe.backward(heads)
                for g in exe.grad_arrays:
                    if g is not None:
                        g.wait_to_read()
            for o in exe.outputs:
                o.wait_to_read()
            if i >= 3:
                times.append((time.perf_counter() - t) * 1e3)
        return float(np.median(times))

    print(json.dumps({"mode": a.mode, "layers": a.layers, "shape": list(shape),
                      "hidden": a.hidden, "bidirectional": a.bidirectional,
                      "forward_ms": timed(False), "forward_backward_ms": timed(True)}))


if __name__ == "__main__":
    main()
