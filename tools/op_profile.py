"""Where a training step's time goes, by layer type, in mxrs and in PyTorch on the same CPU: the
per-op profile table of docs/benchmarks.md.

    cargo build --release --example run_model
    python tools/op_profile.py [--rows resnet18_v1:1,resnet50_v1:1,resnet18_v1:16] [--iters 5] [--json]

Run it with a Python that has torch and torchvision (never needed to build or test mxrs). For
each row (model and batch) it runs `run_model --train --profile` (the engine's profiler over the
timed forward+backward steps, with bulking off so that each op is its own record) and the same torchvision model's training step under
`torch.profiler` (forward in training mode, backward with head gradients of ones), and sums
each side's per-op times into layer types: convolution forward and backward, BatchNorm forward
and backward, ReLU forward and backward, pooling, fully connected, additions, and the rest. The
times are per step: an op's wall time on the thread that ran it (PyTorch's self CPU time; the
engine's per-op records), so where two ops run side by side on the two workers their times add
up to more than the step, which is reported beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_MODEL = os.path.join(ROOT, "target", "release", "examples", "run_model")
sys.path.insert(0, os.path.join(ROOT, "tools"))

KINDS = [
    "conv",
    "conv_backward",
    "batchnorm",
    "batchnorm_backward",
    "relu",
    "relu_backward",
    "pooling",
    "pooling_backward",
    "fully_connected",
    "add",
    "other",
]

# mxrs op names (registry names, as the engine's profiler records them) by layer type.
OURS = {
    "Convolution": "conv",
    "_backward_Convolution": "conv_backward",
    "BatchNorm": "batchnorm",
    "_backward_BatchNorm": "batchnorm_backward",
    "Activation": "relu",
    "relu": "relu",
    "_backward_Activation": "relu_backward",
    "_backward_relu": "relu_backward",
    "Pooling": "pooling",
    "_backward_Pooling": "pooling_backward",
    "FullyConnected": "fully_connected",
    "_backward_FullyConnected": "fully_connected",
    "elemwise_add": "add",
    "_grad_add": "add",
    "add_n": "add",
    "ElementWiseSum": "add",
    "broadcast_add": "add",
    # Fused nodes (operator fusion, on unless MXRS_FUSION=0): BatchNorm+ReLU counts as
    # BatchNorm, an elementwise program (a residual sum and its ReLU, sums of gradients) as an
    # addition; `MXRS_FUSION=0` in the environment profiles the unfused graph instead.
    "_fused_BatchNormReLU": "batchnorm",
    "_backward_fused_BatchNormReLU": "batchnorm_backward",
    "_fused_elemwise": "add",
}


def torch_kind(name: str) -> str:
    """The layer type of a PyTorch (aten) op by its name."""
    n = name.lower()
    if "convolution_backward" in n:
        return "conv_backward"
    if "convolution" in n or "conv2d" in n:
        return "conv"
    if "batch_norm" in n and "backward" in n:
        return "batchnorm_backward"
    if "batch_norm" in n:
        return "batchnorm"
    if "threshold_backward" in n:
        return "relu_backward"
    if "relu" in n or "clamp_min" in n:
        return "relu"
    if "pool" in n and "backward" in n:
        return "pooling_backward"
    if "pool" in n:
        return "pooling"
    if n.startswith("aten::addmm") or n in ("aten::mm", "aten::linear", "aten::matmul"):
        return "fully_connected"
    if n.startswith("aten::add"):
        return "add"
    return "other"


def ours(model: str, batch: int, iters: int) -> dict:
    path = os.path.join(ROOT, "graphs", f"{model}-symbol.json")
    with open(os.path.join(ROOT, "graphs", f"{model}-shapes.json")) as fh:
        dims = json.load(fh)["data"]
    shape = ",".join(str(d) for d in [batch] + dims[1:])
    args = [RUN_MODEL, path, "--shape", f"data={shape}", "--train", "--profile"]
    # Bulking off: a unit of several ops is one record in the profile.
    env = dict(os.environ, MXRS_ENGINE_BULK_SIZE="1")
    out = subprocess.run(
        args + ["--iters", str(iters), "--json"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    report = json.loads(out.strip().splitlines()[-1])
    kinds: dict[str, float] = defaultdict(float)
    for entry in report["profile"]:
        kinds[OURS.get(entry["op"], "other")] += entry["total_ns"] / 1e6 / iters
    return {"step_ms": report["forward_backward_ms"], "kinds_ms": dict(kinds)}


def theirs(model: str, batch: int, iters: int) -> dict:
    import time

    import torch
    from torch_cpu_baseline import model_and_input

    net, x = model_and_input(model, batch)
    net.train()

    def step() -> None:
        net.zero_grad(set_to_none=True)
        out = net(x)
        out.backward(torch.ones_like(out))

    for _ in range(3):
        step()
    times = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(iters):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
    kinds: dict[str, float] = defaultdict(float)
    for e in prof.key_averages():
        kinds[torch_kind(e.key)] += e.self_cpu_time_total / 1e3 / iters
    times.sort()
    return {"step_ms": times[len(times) // 2], "kinds_ms": dict(kinds)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="resnet18_v1:1,resnet50_v1:1,resnet18_v1:16")
    p.add_argument("--iters", type=int, default=5, help="profiled steps per side (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args()
    rows = []
    for row in args.rows.split(","):
        model, batch = row.split(":")
        a, b = ours(model, int(batch), args.iters), theirs(model, int(batch), args.iters)
        rows.append({"model": model, "batch": int(batch), "mxrs": a, "torch": b})
    if args.json:
        print(json.dumps({"iters": args.iters, "rows": rows}))
        return
    for r in rows:
        a, b = r["mxrs"], r["torch"]
        print(
            f"\n{r['model']} batch {r['batch']}: step {a['step_ms']:.1f} ms (mxrs), "
            f"{b['step_ms']:.1f} ms (PyTorch)"
        )
        print(f"{'layer type':20} {'mxrs ms':>9} {'torch ms':>9} {'ratio':>6}")
        for k in KINDS:
            x, y = a["kinds_ms"].get(k, 0.0), b["kinds_ms"].get(k, 0.0)
            ratio = f"{x / y:6.2f}" if y > 0 else "     -"
            print(f"{k:20} {x:9.1f} {y:9.1f} {ratio}")


if __name__ == "__main__":
    main()
