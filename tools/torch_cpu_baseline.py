"""PyTorch's own CPU time for the models `run_model` times, the baseline in docs/benchmarks.md.

    python tools/torch_cpu_baseline.py [--iters 10]
    python tools/torch_cpu_baseline.py --model resnet18_v1 --batch 16 [--iters 10]
    python tools/torch_cpu_baseline.py --gemm

ResNet-18 and ResNet-50 (torchvision, batch 1, 224x224), the MLP 784-512-512-10 (batch 64) and
a two-layer LSTM of 256 units over 35 steps at batch 32 (`torch.nn.LSTM`, the word language
model's shape), all float32 on the CPU with PyTorch's default thread count. Each is timed as
`run_model` times its graphs: forward in eval mode without autograd, then forward+backward in
training mode (every parameter getting a gradient, head gradients of ones), medians of
`--iters` steps after 3 untimed ones. Prints one JSON line of medians in ms.

`--model NAME --batch B` times one model (resnet18_v1, resnet50_v1, mobilenet1.0 — MobileNet
v1 as MXNet's model zoo builds it —, mlp, lstm2) and adds its multiply-adds per sample
(`macs`, counted by hooks on the convolutions and linear layers; for the LSTM from its sizes).
`--gemm` prints the GFLOP/s of a 2048x2048 float32 matrix product (MKL), the cores' measured
GEMM peak. `tools/cpu_bench.py` runs these beside `run_model`, alternating.

`--conv-gemms FILE` reads `conv_bench --json`'s output and times the same products through
PyTorch's GEMM (MKL): per direction (forward, backward data, backward weight) the ms and
GFLOP/s over every non-depthwise layer, weighted as conv_bench weights them, and their share of
MKL's 2048 product timed in the same run; beside them the same shares of our GEMM from FILE
(against its own 2048 product). How near a GEMM comes to the peak on these shapes, ours and the
reference BLAS's:

    target/release/examples/conv_bench graphs/resnet50_v1-symbol.json --json > conv.json
    python tools/torch_cpu_baseline.py --conv-gemms conv.json
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


def mobilenet_v1(classes: int = 1000) -> torch.nn.Module:
    """MobileNet v1 at width 1.0, as MXNet's Gluon model zoo builds `mobilenet1.0`."""
    nn = torch.nn

    def block(cin: int, cout: int, stride: int, groups: int = 1, k: int = 3) -> list:
        return [
            nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        ]

    layers = block(3, 32, 2)
    spec = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1),
            (256, 512, 2)] + [(512, 512, 1)] * 5 + [(512, 1024, 2), (1024, 1024, 1)]
    for cin, cout, stride in spec:
        layers += block(cin, cin, stride, groups=cin) + block(cin, cout, 1, k=1)
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1024, classes)]
    return nn.Sequential(*layers)


def model_and_input(name: str, batch: int) -> tuple:
    """The PyTorch model standing for one of ours, and an input batch."""
    nn = torch.nn
    image = torch.rand(batch, 3, 224, 224)
    if name == "resnet18_v1":
        return torchvision.models.resnet18(), image
    if name == "resnet50_v1":
        return torchvision.models.resnet50(), image
    if name == "mobilenet1.0":
        return mobilenet_v1(), image
    if name == "mlp":
        mlp = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
        )
        return mlp, torch.rand(batch, 784)
    if name == "lstm2":
        return nn.LSTM(256, 256, num_layers=2), torch.rand(35, batch, 256)
    raise SystemExit(f"unknown model {name!r}")


def macs_per_sample(model: torch.nn.Module, x: torch.Tensor, batch: int) -> float:
    """Multiply-adds of one forward pass per sample: convolutions and linear layers (hooks),
    or an LSTM's gate products."""
    if isinstance(model, torch.nn.LSTM):
        steps, h = x.shape[0], model.hidden_size
        total = sum(4 * h * (model.input_size if k == 0 else h) + 4 * h * h
                    for k in range(model.num_layers))
        return float(total * steps)
    count = [0.0]

    def hook(mod, _inp, out):
        if isinstance(mod, torch.nn.Conv2d):
            per_out = mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1]
            count[0] += per_out * out.numel()
        elif isinstance(mod, torch.nn.Linear):
            count[0] += mod.in_features * out.numel()

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    with torch.no_grad():
        model.eval()(x)
    for hd in handles:
        hd.remove()
    return count[0] / batch


def gemm_gflops(n: int = 2048, iters: int = 10) -> float:
    """GFLOP/s of an n x n float32 matrix product, best of `iters`."""
    a, b = torch.rand(n, n), torch.rand(n, n)
    a @ b
    best = float("inf")
    for _ in range(iters):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def median_seconds(step, reps: int) -> float:
    """Median seconds of `step` over `reps` runs after one untimed run."""
    step()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def conv_gemms(path: str, reps: int) -> dict:
    """MKL on conv_bench's GEMM shapes beside ours (see the module's docstring)."""
    with open(path) as f:
        ours = json.load(f)
    peak_flop = 2 * 2048**3 / 1e9
    square = torch.rand(2048, 2048), torch.rand(2048, 2048)
    peak = peak_flop / median_seconds(lambda: square[0] @ square[1], reps)
    directions = ("forward", "backward_data", "backward_weight")
    totals = {d: [0.0, 0.0] for d in directions}
    for layer in ours["layers"]:
        if layer["depthwise"]:
            continue
        m, k, n = layer["m"], layer["k"], layer["n"]
        products, count = layer["products"], layer["count"]
        flop = 2 * m * k * n * products / 1e9
        for d, (r, inner, c) in zip(directions, [(m, k, n), (k, m, n), (m, n, k)]):
            a, b = torch.rand(r, inner), torch.rand(inner, c)
            out = torch.empty(r, c)

            def run(a=a, b=b, out=out, products=products) -> None:
                for _ in range(products):
                    torch.mm(a, b, out=out)

            totals[d][0] += median_seconds(run, reps) * count
            totals[d][1] += flop * count
    report = {"torch": torch.__version__, "threads": torch.get_num_threads(),
              "graph": ours["graph"], "batch": ours["batch"],
              "mkl_2048_gflops": peak, "ours_2048_gflops": ours["gemm_2048_gflops"]}
    for d, (seconds, flop) in totals.items():
        ours_ms = ours["totals"][f"gemm_{d}_ms"]
        report[f"mkl_{d}_ms"] = seconds * 1e3
        report[f"mkl_{d}_of_peak"] = flop / seconds / peak
        report[f"ours_{d}_ms"] = ours_ms
        report[f"ours_{d}_of_peak"] = flop / (ours_ms / 1e3) / ours["gemm_2048_gflops"]
    return report


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--model")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--gemm", action="store_true")
    p.add_argument("--conv-gemms", metavar="FILE")
    a = p.parse_args()
    torch.manual_seed(0)
    if a.conv_gemms:
        print(json.dumps(conv_gemms(a.conv_gemms, reps=5)))
        return
    if a.gemm:
        print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                          "gemm_2048_gflops": gemm_gflops()}))
        return
    if a.model:
        model, x = model_and_input(a.model, a.batch)
        report = {"torch": torch.__version__, "threads": torch.get_num_threads(),
                  "model": a.model, "batch": a.batch,
                  "macs": macs_per_sample(model, x, a.batch)}
        report.update(bench(model, x, a.iters))
        print(json.dumps(report))
        return
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
