"""``mx.init``: how parameters start. An initializer is called with a parameter's description
(its name, as an ``InitDesc`` carrying the variable's attributes, or a plain name) and its
array, and fills the array, as MXNet's do: a variable's own ``__init__`` attribute (set by
``mx.sym.Variable(init=...)``) wins; otherwise the name's ending says: ``weight`` is the
initializer's own rule, ``bias``, ``beta``, a moving mean and ``min`` start at zero, ``gamma``,
a moving variance and ``max`` at one, an ``upsampling`` weight bilinear. Any other name is
refused, naming it."""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import registry
from .ndarray import random as ndrandom
from .ndarray.ndarray import NDArray, load

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "Bilinear",
    "Constant",
    "InitDesc",
    "Initializer",
    "LSTMBias",
    "Load",
    "MSRAPrelu",
    "Mixed",
    "Normal",
    "One",
    "Orthogonal",
    "Uniform",
    "Xavier",
    "Zero",
    "alias",
    "create",
    "register",
]

_LOG = logging.getLogger(__name__)


class InitDesc(str):
    """A parameter's name with its variable's attributes (``attrs``) and the initializer that
    started the call (``global_init``)."""

    attrs: dict[str, str]
    global_init: Any

    def __new__(
        cls, name: str, attrs: dict[str, str] | None = None, global_init: Any = None
    ) -> Self:
        desc = super().__new__(cls, name)
        desc.attrs = dict(attrs or {})
        desc.global_init = global_init
        return desc


# Name endings and what they start as, in the order they are tried.
_ZERO_ENDINGS = ("moving_mean", "running_mean", "moving_inv_var", "moving_avg", "min")
_ONE_ENDINGS = ("moving_var", "running_var", "max")


class Initializer:
    """Fills parameters by their description (see the module's doc); subclasses give
    ``_init_weight``."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._verbose = False
        self._print_func: Callable[[NDArray], str] | None = None

    def set_verbosity(
        self, verbose: bool = False, print_func: Callable | None = None
    ) -> Initializer:
        """Logs each parameter filled, with ``print_func(array)`` (by default its root mean
        square)."""
        self._verbose = verbose
        self._print_func = print_func or (lambda x: str((x.norm() / math.sqrt(x.size)).asscalar()))
        return self

    def dumps(self) -> str:
        """The initializer as MXNet's JSON (``["uniform", {"scale": 0.07}]``)."""
        return json.dumps([type(self).__name__.lower(), self._kwargs])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Initializer):
            return NotImplemented
        return type(self) is type(other) and self._kwargs == other._kwargs

    __hash__ = object.__hash__

    def __call__(self, desc: Any, arr: NDArray) -> None:
        if not isinstance(arr, NDArray):
            raise TypeError(f"{type(self).__name__}: the array is a {type(arr).__name__}")
        name = str(desc)
        attrs = desc.attrs if isinstance(desc, InitDesc) else {}
        if isinstance(desc, InitDesc) and desc.global_init is None:
            desc.global_init = self
        if attrs.get("__init__"):
            create(attrs["__init__"])._init_weight(desc, arr)
            how = attrs["__init__"]
        elif name.startswith("upsampling") and not isinstance(desc, InitDesc):
            Bilinear()._init_weight(desc, arr)
            how = "bilinear"
        elif name.startswith("stn_loc") and name.endswith("weight"):
            arr[:] = 0.0
            how = "zero"
        elif name.startswith("stn_loc") and name.endswith("bias"):
            arr[:] = np.array([1.0, 0, 0, 0, 1.0, 0])
            how = "identity transform"
        elif name.endswith("weight"):
            self._init_weight(desc, arr)
            how = "weight"
        elif name.endswith("bias"):
            self._init_bias(desc, arr)
            how = "bias"
        elif name.endswith("gamma"):
            self._init_gamma(desc, arr)
            how = "gamma"
        elif name.endswith("beta"):
            self._init_beta(desc, arr)
            how = "beta"
        elif name.endswith(_ZERO_ENDINGS):
            arr[:] = 0.0
            how = "zero"
        elif name.endswith(_ONE_ENDINGS):
            arr[:] = 1.0
            how = "one"
        else:
            self._init_default(desc, arr)
            return
        if self._verbose and self._print_func is not None:
            _LOG.info("Initialized %s as %s: %s", name, how, self._print_func(arr))

    def _init_bias(self, _: Any, arr: NDArray) -> None:
        arr[:] = 0.0

    def _init_gamma(self, _: Any, arr: NDArray) -> None:
        arr[:] = 1.0

    def _init_beta(self, _: Any, arr: NDArray) -> None:
        arr[:] = 0.0

    def _init_weight(self, name: Any, arr: NDArray) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not fill weights")

    def _init_default(self, name: Any, _: NDArray) -> None:
        raise ValueError(
            f"no initialization rule for {name!s}: the defaults cover names ending in weight, "
            "bias, gamma, beta and the moving statistics; give the variable an init "
            "(mx.sym.Variable(name, init=mx.init.Zero()))"
        )


register = registry.get_register_func(Initializer, "initializer")
alias = registry.get_alias_func(Initializer, "initializer")
create = registry.get_create_func(Initializer, "initializer")


@register
class Uniform(Initializer):
    """Weights drawn from [-scale, scale)."""

    def __init__(self, scale: float = 0.07) -> None:
        super().__init__(scale=scale)
        self.scale = scale

    def _init_weight(self, _: Any, arr: NDArray) -> None:
        ndrandom.uniform(-self.scale, self.scale, arr.shape, dtype=arr.dtype, out=arr)


@register
class Normal(Initializer):
    """Weights drawn from a normal distribution of deviation ``sigma``."""

    def __init__(self, sigma: float = 0.01) -> None:
        super().__init__(sigma=sigma)
        self.sigma = sigma

    def _init_weight(self, _: Any, arr: NDArray) -> None:
        ndrandom.normal(0.0, self.sigma, arr.shape, dtype=arr.dtype, out=arr)


@register
class Constant(Initializer):
    """Every weight ``value`` (a number, or an array broadcast to the weight)."""

    def __init__(self, value: Any) -> None:
        super().__init__(value=value)
        self.value = value

    def _init_weight(self, _: Any, arr: NDArray) -> None:
        arr[:] = self.value

    def dumps(self) -> str:
        value = self.value
        if not np.isscalar(value):
            value = (
                value.asnumpy().tolist()
                if isinstance(value, NDArray)
                else np.asarray(value).tolist()
            )
        return json.dumps(["constant", {"value": value}])


@register
@alias("zeros")
class Zero(Initializer):
    """Every weight zero."""

    def _init_weight(self, _: Any, arr: NDArray) -> None:
        arr[:] = 0.0


@register
@alias("ones")
class One(Initializer):
    """Every weight one."""

    def _init_weight(self, _: Any, arr: NDArray) -> None:
        arr[:] = 1.0


@register
class Xavier(Initializer):
    """Glorot's scaling: ``uniform`` or ``gaussian`` with variance ``magnitude / n``, where n
    is the fan-in (``in``), fan-out (``out``) or their mean (``avg``)."""

    def __init__(
        self, rnd_type: str = "uniform", factor_type: str = "avg", magnitude: float = 3
    ) -> None:
        super().__init__(rnd_type=rnd_type, factor_type=factor_type, magnitude=magnitude)
        if rnd_type not in ("uniform", "gaussian"):
            raise ValueError(f"Xavier: rnd_type {rnd_type!r} is not uniform or gaussian")
        if factor_type not in ("avg", "in", "out"):
            raise ValueError(f"Xavier: factor_type {factor_type!r} is not avg, in or out")
        self.rnd_type, self.factor_type, self.magnitude = rnd_type, factor_type, float(magnitude)

    def _init_weight(self, name: Any, arr: NDArray) -> None:
        shape = arr.shape
        if len(shape) < 2:
            raise ValueError(f"Xavier: {name!s} has shape {shape}; it needs at least 2 axes")
        receptive = math.prod(shape[2:]) if len(shape) > 2 else 1
        fan_in, fan_out = shape[1] * receptive, shape[0] * receptive
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[self.factor_type]
        scale = math.sqrt(self.magnitude / factor)
        if self.rnd_type == "uniform":
            ndrandom.uniform(-scale, scale, shape, dtype=arr.dtype, out=arr)
        else:
            ndrandom.normal(0.0, scale, shape, dtype=arr.dtype, out=arr)


@register
class MSRAPrelu(Xavier):
    """He's scaling for PReLU layers of negative ``slope``: gaussian, magnitude
    ``2 / (1 + slope ** 2)``."""

    def __init__(self, factor_type: str = "avg", slope: float = 0.25) -> None:
        super().__init__("gaussian", factor_type, 2.0 / (1 + slope**2))
        self._kwargs = {"factor_type": factor_type, "slope": slope}


@register
class Orthogonal(Initializer):
    """An orthogonal matrix (of the weight as ``(rows, the rest)``) times ``scale``: the
    orthonormal factor of a random matrix (``uniform`` or ``normal`` entries)."""

    def __init__(self, scale: float = 1.414, rand_type: str = "uniform") -> None:
        super().__init__(scale=scale, rand_type=rand_type)
        if rand_type not in ("uniform", "normal"):
            raise ValueError(f"Orthogonal: rand_type {rand_type!r} is not uniform or normal")
        self.scale, self.rand_type = scale, rand_type

    def _init_weight(self, _: Any, arr: NDArray) -> None:
        rows, cols = arr.shape[0], int(np.prod(arr.shape[1:]))
        if self.rand_type == "uniform":
            draw = ndrandom.uniform(-1.0, 1.0, (rows, cols)).asnumpy()
        else:
            draw = ndrandom.normal(0.0, 1.0, (rows, cols)).asnumpy()
        u, _, vt = np.linalg.svd(draw, full_matrices=False)
        q = u if u.shape == draw.shape else vt
        arr[:] = self.scale * q.reshape(arr.shape)


@register
class Bilinear(Initializer):
    """The weights of bilinear upsampling (a deconvolution's kernel)."""

    def _init_weight(self, _: Any, arr: NDArray) -> None:
        shape = arr.shape
        f = math.ceil(shape[3] / 2.0)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        x = np.arange(shape[3])[None, :]
        y = np.arange(shape[2])[:, None]
        kernel = (1 - np.abs(x / f - c)) * (1 - np.abs(y / f - c))
        arr[:] = np.broadcast_to(kernel, shape).astype(np.float32)


@register
class LSTMBias(Initializer):
    """An LSTM's bias: zero, but the forget gate's quarter ``forget_bias``."""

    def __init__(self, forget_bias: float = 1.0) -> None:
        super().__init__(forget_bias=forget_bias)
        self.forget_bias = forget_bias

    def _init_weight(self, _: Any, arr: NDArray) -> None:
        hidden = arr.shape[0] // 4
        values = np.zeros(arr.shape, dtype=np.float32)
        values[hidden : 2 * hidden] = self.forget_bias
        arr[:] = values


class Load:
    """Parameters from a file or a dict (``arg:``/``aux:`` prefixes dropped); those it lacks
    from ``default_init``."""

    def __init__(
        self, param: str | dict[str, NDArray], default_init: Any = None, verbose: bool = False
    ) -> None:
        loaded = load(param) if isinstance(param, str) else param
        if not isinstance(loaded, dict):
            raise TypeError("Load: the parameters must be named (a dict, or a file of a dict)")
        self.param = {k[4:] if k.startswith(("arg:", "aux:")) else k: v for k, v in loaded.items()}
        self.default_init, self.verbose = default_init, verbose

    def __call__(self, name: Any, arr: NDArray) -> None:
        key = str(name)
        if key in self.param:
            if arr.shape != self.param[key].shape:
                raise ValueError(
                    f"Load: {key} has shape {arr.shape}, the loaded one {self.param[key].shape}"
                )
            arr[:] = self.param[key]
            if self.verbose:
                _LOG.info("Initialized %s by loading", key)
        elif self.default_init is None:
            raise ValueError(
                f"Load: {key} is not among the loaded parameters and no default_init is given"
            )
        else:
            self.default_init(name, arr)
            if self.verbose:
                _LOG.info("Initialized %s by default", key)


class Mixed:
    """The initializer of the first pattern (a regular expression) the name matches."""

    def __init__(self, patterns: Sequence[str], initializers: Sequence[Any]) -> None:
        if len(patterns) != len(initializers):
            raise ValueError("Mixed: as many patterns as initializers are needed")
        self.map = [(re.compile(p), init) for p, init in zip(patterns, initializers)]

    def __call__(self, name: Any, arr: NDArray) -> None:
        for pattern, init in self.map:
            if pattern.match(str(name)):
                init(name, arr)
                return
        raise ValueError(f"Mixed: {name!s} matches no pattern; add '.*' last for a default")
