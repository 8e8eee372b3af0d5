"""Trains the digits CNN (3x3 convolution of 16 filters, ReLU, 2x2 max pooling, a 64-unit
layer, softmax) symbolically with ``mx.mod.Module.fit``, as an MXNet 1.x script does.

    python examples/python/train_cnn_module.py [--epochs 20] [--json] [--kvstore KIND]

With ``--kvstore dist_sync`` (the package built with the ``mpi`` feature, launched with
``mpiexec -n N``), each process trains on its share of every batch of 32 and the store sums the
gradients across processes; every process prints its line, with a digest of its parameters
(the same on every rank). With ``--kvstore dist_async`` rank 0 applies each process's gradient
as it arrives, at the rate divided by the processes' number; the line adds the staleness.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import time

import mxrs as mx
import numpy as np
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
    p.add_argument("--kvstore", default=None, help="a store: local, device, dist_sync, dist_async")
    args = p.parse_args()
    kv = mx.kv.create(args.kvstore) if args.kvstore else None
    rank, workers = (kv.rank, kv.num_workers) if kv else (0, 1)
    if not args.json and rank == 0:
        logging.basicConfig(level=logging.INFO)
    # As in an MXNet script: mx.random.seed seeds the initializers, numpy's seed the iterator's
    # shuffle, so that a run is the same run each time on one machine.
    mx.random.seed(7)
    np.random.seed(7)
    xtr, ytr, xte, yte = load()
    # Each process takes its share of every batch of 32 (all of it, alone).
    batch = 32 // workers
    whole = len(xtr) // 32 * 32
    rows = (
        np.arange(whole).reshape(-1, workers, batch)[:, rank].ravel()
        if workers > 1
        else np.arange(len(xtr))
    )
    xtr, ytr = xtr[rows], ytr[rows]
    train = mx.io.NDArrayIter(xtr.reshape(-1, 1, 8, 8), ytr, batch_size=batch, shuffle=True)
    test = mx.io.NDArrayIter(xte.reshape(-1, 1, 8, 8), yte, batch_size=32)
    mod = mx.mod.Module(cnn())
    # dist_async applies each process's share of a batch as an update of its own: a rate
    # divided by the processes' number moves the weights per sample as far as dist_sync does.
    lr = 0.1 / workers if kv is not None and kv.type == "dist_async" else 0.1
    t0 = time.perf_counter()
    mod.fit(
        train,
        eval_data=None if args.json else test,
        num_epoch=args.epochs,
        kvstore=kv,
        optimizer="sgd",
        optimizer_params={"learning_rate": lr, "momentum": 0.9, "wd": 1e-4},
        initializer=mx.init.Xavier(),
    )
    mx.nd.waitall()
    seconds = time.perf_counter() - t0
    ((_, acc),) = mod.score(test, "acc")
    arg, _ = mod.get_params()
    digest = hashlib.sha256()
    for name in sorted(arg):
        digest.update(arg[name].asnumpy().tobytes())
    out = {
        "test_accuracy": acc,
        "seconds": seconds,
        "epochs": args.epochs,
        "samples_per_second": args.epochs * len(xtr) * workers / seconds,
        "rank": rank,
        "workers": workers,
        "params_sha256": digest.hexdigest(),
    }
    if kv is not None and kv.staleness is not None:
        out["staleness_updates"] = kv.staleness["updates"]
        out["staleness_mean"] = kv.staleness["mean"]
        out["staleness_max"] = kv.staleness["max"]
    if args.json:
        print(json.dumps(out))
    elif rank == 0:
        print(f"CNN (Module.fit): test accuracy {acc:.4f} in {seconds:.2f} s")


if __name__ == "__main__":
    main()
