"""``mx.model``: checkpoints as MXNet writes them, ``PREFIX-symbol.json`` and
``PREFIX-EPOCH.params`` (arguments as ``arg:NAME``, auxiliary states as ``aux:NAME``)."""

from __future__ import annotations

from collections import namedtuple

from . import ndarray as nd
from . import symbol as sym
from .base import MXNetError
from .ndarray.ndarray import NDArray

__all__ = ["BatchEndParam", "load_checkpoint", "load_params", "save_checkpoint"]

#: What a batch-end callback gets: the epoch, the batch's number in it, the metric and the
#: caller's locals (None here).
BatchEndParam = namedtuple("BatchEndParams", ["epoch", "nbatch", "eval_metric", "locals"])


def save_checkpoint(
    prefix: str,
    epoch: int,
    symbol: sym.Symbol,
    arg_params: dict[str, NDArray],
    aux_params: dict[str, NDArray],
    remove_amp_cast: bool = True,
) -> None:
    """Writes ``PREFIX-symbol.json`` and ``PREFIX-%04d.params`` (each whole or not at all)."""
    if symbol is not None:
        symbol.save(f"{prefix}-symbol.json")
    params = {f"arg:{k}": v for k, v in arg_params.items()}
    params.update({f"aux:{k}": v for k, v in aux_params.items()})
    nd.save(f"{prefix}-{epoch:04d}.params", params)


def load_checkpoint(
    prefix: str, epoch: int
) -> tuple[sym.Symbol, dict[str, NDArray], dict[str, NDArray]]:
    """Reads a checkpoint: ``(symbol, arg_params, aux_params)``."""
    symbol = sym.load(f"{prefix}-symbol.json")
    arg, aux = load_params(prefix, epoch)
    return symbol, arg, aux


def load_params(prefix: str, epoch: int) -> tuple[dict[str, NDArray], dict[str, NDArray]]:
    """Reads a checkpoint's parameters: ``(arg_params, aux_params)``."""
    loaded = nd.load(f"{prefix}-{epoch:04d}.params")
    if not isinstance(loaded, dict):
        raise MXNetError(f"{prefix}-{epoch:04d}.params holds arrays without names")
    arg, aux = {}, {}
    for key, value in loaded.items():
        kind, _, name = key.partition(":")
        if kind == "arg":
            arg[name] = value
        elif kind == "aux":
            aux[name] = value
        else:
            raise MXNetError(f"{key!r} in {prefix}-{epoch:04d}.params is neither arg: nor aux:")
    return arg, aux
