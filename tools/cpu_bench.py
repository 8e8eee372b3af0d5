"""mxrs beside PyTorch on this machine's CPU, alternating, with ratios: the CPU table of
docs/benchmarks.md.

    cargo build --release --example run_model --example cpu_peak
    python tools/cpu_bench.py [--rounds 3] [--iters 10] [--rows resnet18_v1:1,lstm2:32] [--json]

Run it with a Python that has torch and torchvision, or with `--venv DIR`: it then runs itself
with the Python of the venv at DIR, making that venv first where it lacks them (`python -m venv`,
`pip install torch torchvision` from PyPI: about 5.5 GB with the CUDA libraries its wheels
bring, which it does not use on the CPU). PyTorch is never needed to build or test mxrs.

For each row (model and batch) it runs `run_model` and
`tools/torch_cpu_baseline.py --model` one after the other, `--rounds` times, each in a
fresh process (forward from `run_model` bound for inference, forward+backward from
`run_model --train`), and reports per step the median (and min-max) forward and forward+backward
times of each, mxrs / PyTorch, and the GFLOP/s each reaches (multiply-adds counted on the
PyTorch model, two FLOPs each; a training step counted as three forward passes) beside the
cores' measured GEMM peak (`--gemm` of the baseline script: MKL's 2048x2048 product) and their
multiply-add limit (`cpu_peak`: independent vector multiply-adds in registers on every core),
with each time's share of that limit.

The LSTM row runs a graph of one fused RNN node (2 layers of 256 LSTM units over 35 steps of
256 inputs), written here in MXNet's JSON and shaped by `run_model` from its data alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_MODEL = os.path.join(ROOT, "target", "release", "examples", "run_model")
CPU_PEAK = os.path.join(ROOT, "target", "release", "examples", "cpu_peak")
BASELINE = os.path.join(ROOT, "tools", "torch_cpu_baseline.py")
ROWS = "resnet18_v1:1,resnet50_v1:1,resnet18_v1:16,mobilenet1.0:1,lstm2:32"

LSTM2 = {
    "nodes": [
        {"op": "null", "name": "data", "inputs": []},
        {"op": "null", "name": "lstm_parameters", "inputs": []},
        {"op": "null", "name": "lstm_state", "inputs": []},
        {"op": "null", "name": "lstm_state_cell", "inputs": []},
        {
            "op": "RNN",
            "name": "lstm",
            "attrs": {"mode": "lstm", "num_layers": "2", "state_size": "256"},
            "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]],
        },
    ],
    "arg_nodes": [0, 1, 2, 3],
    "node_row_ptr": [0, 1, 2, 3, 4, 5],
    "heads": [[4, 0, 0]],
    "attrs": {"mxnet_version": ["int", 10901]},
}


def run_json(args: list[str]) -> dict:
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def ours(model: str, batch: int, iters: int, graphs: str) -> dict:
    if model == "lstm2":
        path, shape = os.path.join(graphs, "lstm2-symbol.json"), f"35,{batch},256"
    else:
        path = os.path.join(ROOT, "graphs", f"{model}-symbol.json")
        with open(os.path.join(ROOT, "graphs", f"{model}-shapes.json")) as fh:
            dims = json.load(fh)["data"]
        shape = ",".join(str(d) for d in [batch] + dims[1:])
    args = [RUN_MODEL, path, "--shape", f"data={shape}", "--iters", str(iters), "--json"]
    # Forward from a bind without gradients (inference, as PyTorch's eval under no_grad: the
    # fusion pass folds BatchNorm into the convolutions there), forward+backward from a
    # training bind.
    inference = run_json(args)
    training = run_json(args + ["--train"])
    return {**training, "forward_ms": inference["forward_ms"],
            "fused_nodes": inference.get("fused_nodes", 0)}


def theirs(model: str, batch: int, iters: int) -> dict:
    args = [sys.executable, BASELINE, "--model", model, "--batch", str(batch)]
    return run_json(args + ["--iters", str(iters)])


def spread(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def has_torch(python: str) -> bool:
    """Whether `python` imports torch and torchvision."""
    probe = [python, "-c", "import torch, torchvision"]
    return subprocess.run(probe, check=False, capture_output=True).returncode == 0


def into_venv(venv: str, argv: list[str]) -> None:
    """Runs this script again, with `argv`, on the Python of the venv at `venv`, made first
    (with torch and torchvision from PyPI) where it lacks them; does not return."""
    python = os.path.join(os.path.abspath(venv), "bin", "python")
    if not os.path.exists(python) or not has_torch(python):
        print(f"making {venv}: a venv with torch and torchvision (about 5.5 GB from PyPI)",
              file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        pip = [python, "-m", "pip", "install", "--quiet"]
        subprocess.run(pip + ["--upgrade", "pip"], check=True)
        subprocess.run(pip + ["torch", "torchvision"], check=True)
        if not has_torch(python):
            sys.exit(f"cpu_bench: {python} still cannot import torch and torchvision")
    os.execv(python, [python, os.path.abspath(__file__), *argv])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--rows", default=ROWS)
    p.add_argument("--json", action="store_true")
    p.add_argument("--venv", metavar="DIR",
                   help="run with the Python of the venv at DIR, made there with torch and "
                        "torchvision where it lacks them")
    a = p.parse_args()
    # Once running on the venv's Python (its `sys.prefix`), the same arguments go on here.
    if a.venv is not None and os.path.realpath(sys.prefix) != os.path.realpath(a.venv):
        into_venv(a.venv, sys.argv[1:])
    if not has_torch(sys.executable):
        sys.exit(f"cpu_bench: {sys.executable} cannot import torch and torchvision; run it with "
                 "a Python that can, or with --venv DIR to make one")
    peak = run_json([sys.executable, BASELINE, "--gemm"])
    limit = run_json([CPU_PEAK, "--json"])
    report: dict = {"gemm_peak_gflops": round(peak["gemm_2048_gflops"], 1),
                    "fma_peak_gflops": limit["fma_peak_gflops"],
                    "torch": peak["torch"], "torch_threads": peak["threads"],
                    "rounds": a.rounds, "iters": a.iters, "rows": []}
    with tempfile.TemporaryDirectory() as graphs:
        with open(os.path.join(graphs, "lstm2-symbol.json"), "w") as fh:
            json.dump(LSTM2, fh)
        for row in a.rows.split(","):
            model, batch = row.split(":")[0], int(row.split(":")[1])
            times: dict = {k: [] for k in ("mxrs_f", "mxrs_fb", "torch_f", "torch_fb")}
            macs = 0.0
            for _ in range(a.rounds):
                m = ours(model, batch, a.iters, graphs)
                t = theirs(model, batch, a.iters)
                times["mxrs_f"].append(m["forward_ms"])
                times["mxrs_fb"].append(m["forward_backward_ms"])
                times["torch_f"].append(t["forward_ms"])
                times["torch_fb"].append(t["forward_backward_ms"])
                macs = t["macs"]
            med = {k: statistics.median(v) for k, v in times.items()}
            flops = 2 * macs * batch / 1e9  # GFLOP of one forward pass
            entry = {"model": model, "batch": batch, "gflop_forward": round(flops, 3)}
            for step, mult in (("f", 1), ("fb", 3)):
                entry[f"mxrs_{step}_ms"] = spread(times[f"mxrs_{step}"])
                entry[f"torch_{step}_ms"] = spread(times[f"torch_{step}"])
                entry[f"ratio_{step}"] = round(med[f"mxrs_{step}"] / med[f"torch_{step}"], 3)
                entry[f"mxrs_{step}_gflops"] = round(mult * flops / med[f"mxrs_{step}"] * 1e3, 1)
                entry[f"torch_{step}_gflops"] = round(mult * flops / med[f"torch_{step}"] * 1e3, 1)
                for who in ("mxrs", "torch"):
                    entry[f"{who}_{step}_of_fma_peak"] = round(
                        entry[f"{who}_{step}_gflops"] / limit["fma_peak_gflops"], 3)
            report["rows"].append(entry)
            if not a.json:
                print(
                    f"{model} b{batch}: forward {med['mxrs_f']:.1f} vs {med['torch_f']:.1f} ms "
                    f"({entry['ratio_f']:.2f}x), forward+backward {med['mxrs_fb']:.1f} vs "
                    f"{med['torch_fb']:.1f} ms ({entry['ratio_fb']:.2f}x)",
                    flush=True,
                )
    if a.json:
        print(json.dumps(report))
    else:
        print(f"GEMM peak {report['gemm_peak_gflops']} GFLOP/s (MKL, 2048x2048), "
              f"multiply-add limit {report['fma_peak_gflops']} GFLOP/s ({limit['isa']})")


if __name__ == "__main__":
    main()
