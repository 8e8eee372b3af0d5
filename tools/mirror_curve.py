"""Planned training memory against recomputation time, per model: the curve in
docs/mirror-curve.svg and the table beside it (docs/benchmarks.md, recomputation).

    cargo build --release --example plan --example mirror_bench
    python tools/mirror_curve.py docs/mirror-curve.svg [--measure] [--models resnet18_v1,...]

For each model in graphs/ at batch 32 and each `auto:F` setting, runs `plan --train --mirror`
and keeps each distinct point: the planned bytes over the unmirrored lower bound, and the cost
model's estimate of the recomputation's share of a step. With `--measure`, also times a
training step at each point against the unmirrored step (`mirror_bench`: every setting bound in
one process, steps alternating, the median of per-round ratios), prints one JSON line per
point, and plots the measured time (filled markers; the estimate hollow). Standard library
only.
"""

import json
import os
import subprocess
import sys

MODELS = ["resnet18_v1", "resnet50_v1", "mobilenet1.0", "vgg16"]
COLOURS = ["#1b6ca8", "#c0392b", "#27ae60", "#8e44ad"]
SHARES = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6]
BATCH = 32
# Rounds of one step per setting: the larger models take seconds a step.
ROUNDS = {"resnet18_v1": 5, "mobilenet1.0": 5, "resnet50_v1": 3, "vgg16": 3}


def run_json(args):
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def points(model):
    """(estimated share, planned / bound, setting) per distinct point, by estimated share."""
    seen = {}
    for share in SHARES:
        v = run_json(
            [
                "target/release/examples/plan",
                f"graphs/{model}-symbol.json",
                "--train",
                "--mirror",
                f"auto:{share}",
                "--json",
            ]
        )
        p = (v["mirror_estimated_overhead"], v["planned_bytes"] / v["unmirrored_lower_bound_bytes"])
        seen.setdefault(p, f"auto:{share}")
    return sorted((f, r, s) for (f, r), s in seen.items())


def measured(model, pts):
    """Measured step time over the unmirrored step, minus one, at each point."""
    settings = [s for f, r, s in pts if (f, r) != (0.0, 1.0)]
    report = run_json(
        [
            "target/release/examples/mirror_bench",
            f"graphs/{model}-symbol.json",
            "--mirror",
            ",".join(settings),
            "--rounds",
            str(ROUNDS.get(model, 3)),
            "--json",
        ]
    )
    by_setting = {row["mirror"]: row for row in report["settings"]}
    out = []
    for f, r, s in pts:
        row = by_setting.get(s, {"time_over_unmirrored": 1.0, "time_over_unmirrored_range": []})
        # The bind timed must be the plan drawn (a stale binary would time another choice).
        if s in by_setting and abs(row["estimated_overhead"] - f) > 1e-9:
            raise SystemExit(f"{model} {s}: mirror_bench chose another rung than plan")
        print(
            json.dumps(
                {
                    "model": model,
                    "mirror": s,
                    "planned_over_bound": round(r, 3),
                    "estimated_overhead": round(f, 3),
                    "time_over_unmirrored": round(row["time_over_unmirrored"], 3),
                    "range": [round(v, 3) for v in row["time_over_unmirrored_range"]],
                    "unmirrored_step_ms": round(report["unmirrored_step_ms"], 1),
                }
            ),
            flush=True,
        )
        out.append(row["time_over_unmirrored"] - 1)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    measure = "--measure" in sys.argv
    models = MODELS
    if "--models" in sys.argv:
        models = sys.argv[sys.argv.index("--models") + 1].split(",")
        args = [a for a in args if a != ",".join(models)]
    path = args[0] if args else "docs/mirror-curve.svg"
    w, h, m = 640, 400, 60
    x = lambda f: m + min(f, 0.8) / 0.8 * (w - 2 * m)
    y = lambda r: h - m - r * (h - 2 * m)
    axis = "measured (filled) and estimated (hollow) recomputation / step time"
    if not measure:
        axis = "estimated recomputation / step time"
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            'font-family="sans-serif" font-size="11">'
        ),
        (
            f'<text x="{m}" y="20" font-size="13">Training memory (batch {BATCH}) against '
            "recomputation time</text>"
        ),
        f'<line x1="{m}" y1="{y(0)}" x2="{w - m}" y2="{y(0)}" stroke="#333"/>',
        f'<line x1="{m}" y1="{y(0)}" x2="{m}" y2="{y(1)}" stroke="#333"/>',
    ]
    for f in (0, 0.2, 0.4, 0.6, 0.8):
        parts.append(f'<text x="{x(f) - 8}" y="{y(0) + 15}">{f:.1f}</text>')
    for r in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{m - 32}" y="{y(r) + 4}">{r:.2f}</text>')
        parts.append(f'<line x1="{m}" y1="{y(r)}" x2="{w - m}" y2="{y(r)}" stroke="#ddd"/>')
    parts.append(f'<text x="{m + 40}" y="{h - 20}">{axis}</text>')
    parts.append(f'<text x="8" y="{m - 10}">planned / unmirrored bound</text>')
    for k, (model, colour) in enumerate(zip(models, COLOURS)):
        pts = points(model)
        shown = measured(model, pts) if measure else [f for f, _, _ in pts]
        line = sorted(zip(shown, (r for _, r, _ in pts)))
        path_d = " ".join(
            f"{'M' if i == 0 else 'L'}{x(f):.1f},{y(r):.1f}" for i, (f, r) in enumerate(line)
        )
        parts.append(f'<path d="{path_d}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for (f, r, s), t in zip(pts, shown):
            parts.append(
                f'<circle cx="{x(t):.1f}" cy="{y(r):.1f}" r="3" fill="{colour}">'
                f"<title>{model} {s}: {r:.3f} of the bound at {t:+.3f}</title></circle>"
            )
            if measure:
                parts.append(
                    f'<circle cx="{x(f):.1f}" cy="{y(r):.1f}" r="3" fill="none" '
                    f'stroke="{colour}"><title>{model} {s}: estimated {f:.3f}</title></circle>'
                )
        parts.append(f'<text x="{w - m - 110}" y="{m + 15 * k}" fill="{colour}">{model}</text>')
    parts.append("</svg>")
    with open(path + ".tmp", "w") as fh:
        fh.write("\n".join(parts))
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
