"""mxrs: MXNet 1.x's core Python API on the mxrs runtime.

    import mxrs as mx
    a = mx.nd.ones((2, 3))
    b = (a * 2 + 1).sum()
    print(b.asscalar())     # 18.0

Ops return at once and run on the runtime's asynchronous engine; reading values waits for
them. Errors from the runtime are raised as ``mx.base.MXNetError``."""

from __future__ import annotations

from . import (
    autograd,
    base,
    context,
    initializer,
    io,
    metric,
    model,
    module,
    ndarray,
    optimizer,
    random,
    symbol,
)
from . import initializer as init
from . import module as mod
from . import ndarray as nd
from . import symbol as sym
from .base import MXNetError
from .context import Context, cpu, cpu_pinned, current_context, gpu

__version__ = "0.1.0"

__all__ = [
    "Context",
    "MXNetError",
    "autograd",
    "base",
    "context",
    "cpu",
    "cpu_pinned",
    "current_context",
    "gpu",
    "init",
    "initializer",
    "io",
    "metric",
    "mod",
    "model",
    "module",
    "nd",
    "ndarray",
    "optimizer",
    "random",
    "sym",
    "symbol",
]
