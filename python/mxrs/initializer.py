"""``mx.init``: how parameters start. An initializer is called with a parameter's name and its
array and fills the array; biases, BatchNorm's beta and moving mean start at zero and gamma and
the moving variance at one whatever the initializer (as in MXNet)."""

from __future__ import annotations

import json
import math
from typing import Any

from .ndarray import random as ndrandom
from .ndarray.ndarray import NDArray

__all__ = ["Constant", "Initializer", "Normal", "One", "Uniform", "Xavier", "Zero"]


class Initializer:
    """Fills parameters by name: the rules for biases and normalization parameters, then
    ``_init_weight`` for the rest."""

    def __call__(self, name: Any, arr: NDArray) -> None:
        name = str(name)
        if name.endswith(("bias", "beta", "moving_mean", "running_mean")):
            arr[:] = 0.0
        elif name.endswith(("gamma", "moving_var", "running_var")):
            arr[:] = 1.0
        else:
            self._init_weight(name, arr)

    def _init_weight(self, name: str, arr: NDArray) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not fill weights")

    def dumps(self) -> str:
        """The initializer as MXNet's JSON (``["uniform", {"scale": 0.07}]``)."""
        return json.dumps([type(self).__name__.lower(), self.__dict__])


class Uniform(Initializer):
    """Weights drawn from [-scale, scale)."""

    def __init__(self, scale: float = 0.07) -> None:
        self.scale = scale

    def _init_weight(self, name: str, arr: NDArray) -> None:
        ndrandom.uniform(-self.scale, self.scale, arr.shape, dtype=arr.dtype, out=arr)


class Normal(Initializer):
    """Weights drawn from a normal distribution of deviation ``sigma``."""

    def __init__(self, sigma: float = 0.01) -> None:
        self.sigma = sigma

    def _init_weight(self, name: str, arr: NDArray) -> None:
        ndrandom.normal(0.0, self.sigma, arr.shape, dtype=arr.dtype, out=arr)


class Constant(Initializer):
    """Every weight ``value``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def _init_weight(self, name: str, arr: NDArray) -> None:
        arr[:] = self.value


class Zero(Constant):
    """Every weight zero."""

    def __init__(self) -> None:
        super().__init__(0.0)


class One(Constant):
    """Every weight one."""

    def __init__(self) -> None:
        super().__init__(1.0)


class Xavier(Initializer):
    """Glorot's scaling: ``uniform`` or ``gaussian`` with variance ``magnitude / n``, where n
    is the fan-in (``in``), fan-out (``out``) or their mean (``avg``)."""

    def __init__(
        self, rnd_type: str = "uniform", factor_type: str = "avg", magnitude: float = 3.0
    ) -> None:
        if rnd_type not in ("uniform", "gaussian"):
            raise ValueError(f"Xavier: rnd_type {rnd_type!r} is not uniform or gaussian")
        if factor_type not in ("avg", "in", "out"):
            raise ValueError(f"Xavier: factor_type {factor_type!r} is not avg, in or out")
        self.rnd_type, self.factor_type, self.magnitude = rnd_type, factor_type, magnitude

    def _init_weight(self, name: str, arr: NDArray) -> None:
        shape = arr.shape
        if len(shape) < 2:
            raise ValueError(f"Xavier: {name} has shape {shape}; it needs at least 2 axes")
        receptive = math.prod(shape[2:]) if len(shape) > 2 else 1
        fan_in, fan_out = shape[1] * receptive, shape[0] * receptive
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[self.factor_type]
        scale = math.sqrt(self.magnitude / factor)
        if self.rnd_type == "uniform":
            ndrandom.uniform(-scale, scale, shape, dtype=arr.dtype, out=arr)
        else:
            ndrandom.normal(0.0, scale, shape, dtype=arr.dtype, out=arr)
