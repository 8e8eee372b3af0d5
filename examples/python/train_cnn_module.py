"""Trains the digits CNN (3x3 convolution of 16 filters, ReLU, 2x2 max pooling, a 64-unit
layer, softmax) symbolically with ``mx.mod.Module.fit``, as an MXNet 1.x script does.

    python examples/python/train_cnn_module.py [--epochs 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import mxrs as mx
from digits import load


def cnn() -> mx.sym.Symbol:
    data = mx.sym.var("data")
    net = mx.sym.Convolution(data, kernel=(3, 3), pad=(1, 1), num_filter=16, name="conv0")
    net = mx.sym.Activation(net, act_type="relu", name="conv0_relu")
    net = mx.sym.Pooling(net, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool0")
    net = mx.sym.Flatten(net, name="flat")
    net = mx.sym.FullyConnected(net, num_hidden=64, name="fc0")
    net = mx.sym.Activation(net, act_type="relu", name="fc0_relu")
    net = mx.sym.FullyConnected(net, num_hidden=10, name="fc1")
    return mx.sym.SoftmaxOutput(net, name="softmax")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=20, help="passes over the training set")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args()
    if not args.json:
        logging.basicConfig(level=logging.INFO)
    mx.random.seed(7)
    xtr, ytr, xte, yte = load()
    train = mx.io.NDArrayIter(xtr.reshape(-1, 1, 8, 8), ytr, batch_size=32, shuffle=True)
    test = mx.io.NDArrayIter(xte.reshape(-1, 1, 8, 8), yte, batch_size=32)
    mod = mx.mod.Module(cnn())
    t0 = time.perf_counter()
    mod.fit(
        train,
        eval_data=None if args.json else test,
        num_epoch=args.epochs,
        optimizer="sgd",
        optimizer_params={"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4},
        initializer=mx.init.Xavier(),
    )
    mx.nd.waitall()
    seconds = time.perf_counter() - t0
    ((_, acc),) = mod.score(test, "acc")
    out = {
        "test_accuracy": acc,
        "seconds": seconds,
        "epochs": args.epochs,
        "samples_per_second": args.epochs * len(xtr) / seconds,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"CNN (Module.fit): test accuracy {acc:.4f} in {seconds:.2f} s")


if __name__ == "__main__":
    main()
