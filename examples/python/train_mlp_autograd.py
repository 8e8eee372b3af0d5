"""Trains the digits MLP (64-128-64-10, ReLU) imperatively: arrays, autograd and an SGD
optimizer with momentum, as the Rust train_digits example trains it symbolically.

    python examples/python/train_mlp_autograd.py [--epochs 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import mxrs as mx
from digits import load


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=20, help="passes over the training set")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args()
    mx.random.seed(7)
    xtr, ytr, xte, yte = load()
    sizes = [64, 128, 64, 10]
    init = mx.init.Xavier()
    params = []
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        w, b = mx.nd.zeros((n_out, n_in)), mx.nd.zeros((n_out,))
        init(f"fc{i}_weight", w)
        for a in (w, b):
            a.attach_grad()
        params += [w, b]
    batch = 32
    opt = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=1e-4, rescale_grad=1.0 / batch)
    upd = mx.optimizer.get_updater(opt)

    def forward(x: mx.nd.NDArray) -> mx.nd.NDArray:
        h = x
        for i in range(0, len(params), 2):
            h = mx.nd.FullyConnected(h, params[i], params[i + 1], num_hidden=params[i].shape[0])
            if i + 2 < len(params):
                h = h.relu()
        return h

    xtr_nd, ytr_nd = mx.nd.array(xtr), mx.nd.array(ytr)
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        if epoch == args.epochs * 3 // 4:
            opt.set_learning_rate(opt.learning_rate / 10)
        for start in range(0, len(xtr) - batch + 1, batch):
            x, y = xtr_nd[start : start + batch], ytr_nd[start : start + batch]
            with mx.autograd.record():
                loss = mx.nd.softmax_cross_entropy(forward(x), y)
            loss.backward()
            for k, a in enumerate(params):
                upd(k, a.grad, a)
    mx.nd.waitall()
    seconds = time.perf_counter() - t0
    pred = forward(mx.nd.array(xte)).asnumpy().argmax(1)
    acc = float((pred == yte).mean())
    out = {
        "test_accuracy": acc,
        "seconds": seconds,
        "epochs": args.epochs,
        "samples_per_second": args.epochs * (len(xtr) // batch) * batch / seconds,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"MLP (autograd): test accuracy {acc:.4f} in {seconds:.2f} s")


if __name__ == "__main__":
    main()
