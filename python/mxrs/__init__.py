"""mxrs: MXNet 1.x's core Python API on the mxrs runtime.

    import mxrs as mx
    a = mx.nd.ones((2, 3))
    b = (a * 2 + 1).sum()
    print(b.asscalar())     # 18.0

Ops return at once and run on the runtime's asynchronous engine; reading values waits for
them. Errors from the runtime are raised as ``mx.base.MXNetError``."""

from __future__ import annotations

import os as _os

# MXNet's environment variables that have an equivalent here, honoured where the MXRS_ one is
# not set (the runtime reads its settings when the first array is made).
_MXNET_ENV = {
    "MXNET_ENGINE_TYPE": "MXRS_ENGINE_TYPE",
    "MXNET_CPU_WORKER_NTHREADS": "MXRS_CPU_WORKER_NTHREADS",
    "MXNET_GPU_WORKER_NTHREADS": "MXRS_GPU_WORKER_NTHREADS",
    "MXNET_CPU_PRIORITY_NTHREADS": "MXRS_CPU_PRIORITY_NTHREADS",
    "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN": "MXRS_ENGINE_BULK_SIZE",
    "MXNET_GPU_MEM_POOL_TYPE": "MXRS_STORAGE_POOL_TYPE",
}
_POOL_TYPES = {"Naive": "pooled_exact", "Round": "pooled_round", "Unpooled": "unpooled"}
for _mxnet, _ours in _MXNET_ENV.items():
    _value = _os.environ.get(_mxnet)
    if _value is not None and _ours not in _os.environ:
        if _mxnet == "MXNET_GPU_MEM_POOL_TYPE":
            _value = _POOL_TYPES.get(_value, _value)
        _os.environ[_ours] = _value

from . import (
    attribute,
    autograd,
    base,
    callback,
    context,
    engine,
    executor,
    initializer,
    io,
    kvstore,
    lr_scheduler,
    metric,
    model,
    module,
    monitor,
    name,
    ndarray,
    operator,
    optimizer,
    profiler,
    random,
    registry,
    runtime,
    symbol,
    test_utils,
    util,
    visualization,
)
from . import initializer as init
from . import kvstore as kv
from . import module as mod
from . import monitor as mon
from . import ndarray as nd
from . import symbol as sym
from . import visualization as viz
from .attribute import AttrScope
from .base import MXNetError
from .context import Context, cpu, cpu_pinned, current_context, gpu, num_gpus
from .util import (
    is_np_array,
    is_np_shape,
    np_array,
    np_shape,
    set_np_shape,
    use_np,
    use_np_array,
    use_np_shape,
)

rnd = random

__version__ = "0.1.0"

__all__ = [
    "AttrScope",
    "Context",
    "MXNetError",
    "attribute",
    "autograd",
    "base",
    "callback",
    "context",
    "cpu",
    "cpu_pinned",
    "current_context",
    "engine",
    "executor",
    "gpu",
    "init",
    "initializer",
    "io",
    "is_np_array",
    "is_np_shape",
    "kv",
    "kvstore",
    "lr_scheduler",
    "metric",
    "mod",
    "model",
    "module",
    "mon",
    "monitor",
    "name",
    "nd",
    "ndarray",
    "np_array",
    "np_shape",
    "num_gpus",
    "operator",
    "optimizer",
    "profiler",
    "random",
    "registry",
    "rnd",
    "runtime",
    "set_np_shape",
    "sym",
    "symbol",
    "test_utils",
    "use_np",
    "use_np_array",
    "use_np_shape",
    "util",
    "visualization",
    "viz",
]
