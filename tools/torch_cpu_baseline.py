"""PyTorch's own CPU time for the models `run_model` times, the baseline in docs/benchmarks.md.

    python tools/torch_cpu_baseline.py [--iters 10]

ResNet-18 and ResNet-50 (torchvision, batch 1, 224x224), the MLP 784-512-512-10 (batch 64) and
a two-layer LSTM of 256 units over 35 steps at batch 32 (`torch.nn.LSTM`, the word language
model's shape), all float32 on the CPU with PyTorch's default thread count. Each is timed as
`run_model` times its graphs: forward in eval mode without autograd, then forward+backward in
training mode (every parameter getting a gradient, head gradients of ones), medians of
`--iters` steps after 3 untimed ones. Prints one JSON line of medians in ms.
"""

import argparse
import json
import statistics
import time

import torch
import torchvision


def timed(step, iters: int) -> float:
    """Median wall time of `step` in ms over `iters` runs after 3 warm-ups."""
    times = []
    for i in range(iters + 3):
        start = time.perf_counter()
        step()
        if i >= 3:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def bench(model: torch.nn.Module, x: torch.Tensor, iters: int) -> dict:
    """Forward (inference) and forward+backward (training) medians of one model."""
    model.eval()

    def forward():
        with torch.no_grad():
            model(x)

    fwd = timed(forward, iters)
    model.train()

    def forward_backward():
        model.zero_grad(set_to_none=True)
        out = model(x)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(torch.ones_like(out))

    return {"forward_ms": fwd, "forward_backward_ms": timed(forward_backward, iters)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    torch.manual_seed(0)
    image = torch.rand(1, 3, 224, 224)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    report = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "resnet18_v1": bench(torchvision.models.resnet18(), image, a.iters),
        "resnet50_v1": bench(torchvision.models.resnet50(), image, a.iters),
        "mlp": bench(mlp, torch.rand(64, 784), a.iters),
        "lstm2": bench(torch.nn.LSTM(256, 256, num_layers=2), torch.rand(35, 32, 256), a.iters),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
