"""Planned training memory against recomputation time, per model: the curve in
docs/mirror-curve.svg (docs/benchmarks.md, recomputation).

    cargo build --release --example plan && python tools/mirror_curve.py docs/mirror-curve.svg

For each model in graphs/ at batch 32 and each `auto:F` setting, runs `plan --train --mirror`
and plots the planned bytes over the unmirrored lower bound against the cost model's estimate
of the recomputation's share of a step. Standard library only.
"""

import json
import os
import subprocess
import sys

MODELS = ["resnet18_v1", "resnet50_v1", "mobilenet1.0", "vgg16"]
COLOURS = ["#1b6ca8", "#c0392b", "#27ae60", "#8e44ad"]
SHARES = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6]


def points(model):
    seen = []
    for share in SHARES:
        out = subprocess.run(
            [
                "target/release/examples/plan",
                f"graphs/{model}-symbol.json",
                "--train",
                "--mirror",
                f"auto:{share}",
                "--json",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        v = json.loads(out)
        p = (v["mirror_estimated_overhead"], v["planned_bytes"] / v["unmirrored_lower_bound_bytes"])
        if p not in seen:
            seen.append(p)
    return sorted(seen)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "docs/mirror-curve.svg"
    w, h, m = 640, 400, 60
    x = lambda f: m + f / 0.6 * (w - 2 * m)
    y = lambda r: h - m - r * (h - 2 * m)
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            'font-family="sans-serif" font-size="11">'
        ),
        (
            f'<text x="{m}" y="20" font-size="13">Training memory (batch 32) against '
            "recomputation time</text>"
        ),
        f'<line x1="{m}" y1="{y(0)}" x2="{w - m}" y2="{y(0)}" stroke="#333"/>',
        f'<line x1="{m}" y1="{y(0)}" x2="{m}" y2="{y(1)}" stroke="#333"/>',
    ]
    for f in (0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6):
        parts.append(f'<text x="{x(f) - 8}" y="{y(0) + 15}">{f:.1f}</text>')
    for r in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{m - 32}" y="{y(r) + 4}">{r:.2f}</text>')
        parts.append(f'<line x1="{m}" y1="{y(r)}" x2="{w - m}" y2="{y(r)}" stroke="#ddd"/>')
    parts.append(f'<text x="{w / 2 - 120}" y="{h - 20}">estimated recomputation / step time</text>')
    parts.append(f'<text x="8" y="{m - 10}">planned / unmirrored bound</text>')
    for k, (model, colour) in enumerate(zip(MODELS, COLOURS)):
        pts = points(model)
        path_d = " ".join(
            f"{'M' if i == 0 else 'L'}{x(f):.1f},{y(r):.1f}" for i, (f, r) in enumerate(pts)
        )
        parts.append(f'<path d="{path_d}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for f, r in pts:
            parts.append(
                f'<circle cx="{x(f):.1f}" cy="{y(r):.1f}" r="3" fill="{colour}">'
                f"<title>{model}: {r:.3f} at {f:.3f}</title></circle>"
            )
        parts.append(f'<text x="{w - m - 110}" y="{m + 15 * k}" fill="{colour}">{model}</text>')
    parts.append("</svg>")
    with open(path + ".tmp", "w") as fh:
        fh.write("\n".join(parts))
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
