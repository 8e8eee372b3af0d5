"""The digits data set (data/digits.csv.gz: 1,797 8x8 images, values 0..16) with the same
seeded 80/20 split the Rust examples use, so the accuracies compare."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

PATH = Path(__file__).resolve().parents[2] / "data" / "digits.csv.gz"
MASK = (1 << 64) - 1


def load(seed: int = 42) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: features scaled to [0, 1], float32 labels."""
    with gzip.open(PATH, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    # Fisher-Yates with the xorshift generator of examples/common/digits.rs.
    s = (seed + 0x9E3779B97F4A7C15) & MASK
    order = list(range(len(rows)))
    for i in range(len(order) - 1, 0, -1):
        s ^= (s << 13) & MASK
        s ^= s >> 7
        s ^= (s << 17) & MASK
        j = s % (i + 1)
        order[i], order[j] = order[j], order[i]
    rows = rows[order]
    cut = len(rows) * 4 // 5
    x, y = rows[:, :64] / 16.0, rows[:, 64]
    return x[:cut], y[:cut], x[cut:], y[cut:]
