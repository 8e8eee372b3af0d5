"""Shared fixtures: a fixed seed for numpy's generator in every test."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _seed() -> None:
    np.random.seed(7)
