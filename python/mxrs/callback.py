"""``mx.callback``: what ``Module.fit`` calls at the end of each batch or epoch: logging the
speed and the metric, a progress bar, checkpoints."""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from .model import save_checkpoint

__all__ = [
    "LogValidationMetricsCallback",
    "ProgressBar",
    "Speedometer",
    "do_checkpoint",
    "log_train_metric",
    "module_checkpoint",
]

_LOG = logging.getLogger(__name__)


def module_checkpoint(
    mod: Any, prefix: str, period: int = 1, save_optimizer_states: bool = False
) -> Callable[..., None]:
    """An epoch-end callback saving ``mod``'s checkpoint every ``period`` epochs."""
    period = max(1, int(period))

    def _callback(iter_no: int, sym: Any = None, arg: Any = None, aux: Any = None) -> None:
        if (iter_no + 1) % period == 0:
            mod.save_checkpoint(prefix, iter_no + 1, save_optimizer_states)

    return _callback


def do_checkpoint(prefix: str, period: int = 1) -> Callable[..., None]:
    """An epoch-end callback writing ``PREFIX-symbol.json`` and ``PREFIX-EPOCH.params`` every
    ``period`` epochs (numbered from 1)."""
    period = max(1, int(period))

    def _callback(iter_no: int, sym: Any, arg: Any, aux: Any) -> None:
        if (iter_no + 1) % period == 0:
            save_checkpoint(prefix, iter_no + 1, sym, arg, aux)

    return _callback


def log_train_metric(period: int, auto_reset: bool = False) -> Callable[[Any], None]:
    """A batch-end callback logging the training metric every ``period`` batches (and
    resetting it after, with ``auto_reset``)."""

    def _callback(param: Any) -> None:
        if param.nbatch % period == 0 and param.eval_metric is not None:
            for name, value in param.eval_metric.get_name_value():
                _LOG.info("Iter[%d] Batch[%d] Train-%s=%f", param.epoch, param.nbatch, name, value)
            if auto_reset:
                param.eval_metric.reset()

    return _callback


class Speedometer:
    """A batch-end callback logging samples per second (and the metric) every ``frequent``
    batches; the metric is reset after each log with ``auto_reset``."""

    def __init__(self, batch_size: int, frequent: int = 50, auto_reset: bool = True) -> None:
        self.batch_size, self.frequent, self.auto_reset = batch_size, frequent, auto_reset
        self.init = False
        self.tic = 0.0
        self.last_count = 0

    def __call__(self, param: Any) -> None:
        count = param.nbatch
        if self.last_count > count:
            self.init = False
        self.last_count = count
        if not self.init:
            self.init = True
            self.tic = time.time()
            return
        if count % self.frequent != 0:
            return
        elapsed = max(time.time() - self.tic, 1e-9)
        speed = self.frequent * self.batch_size / elapsed
        if param.eval_metric is not None:
            pairs = param.eval_metric.get_name_value()
            if self.auto_reset:
                param.eval_metric.reset()
            text = "".join(f"\t{name}={value:f}" for name, value in pairs)
            _LOG.info(
                "Epoch[%d] Batch [%d-%d]\tSpeed: %.2f samples/sec%s",
                param.epoch, count - self.frequent, count, speed, text,
            )  # fmt: skip
        else:
            _LOG.info("Iter[%d] Batch [%d]\tSpeed: %.2f samples/sec", param.epoch, count, speed)
        self.tic = time.time()


class ProgressBar:
    """A batch-end callback drawing a progress bar of ``total`` batches on standard output."""

    def __init__(self, total: int, length: int = 80) -> None:
        self.bar_len, self.total = length, total

    def __call__(self, param: Any) -> None:
        done = min(param.nbatch + 1, self.total)
        filled = round(self.bar_len * done / float(self.total))
        percents = math.ceil(100.0 * done / float(self.total))
        bar = "=" * filled + "-" * (self.bar_len - filled)
        sys.stdout.write(f"[{bar}] {percents}%\r")
        sys.stdout.flush()


class LogValidationMetricsCallback:
    """An evaluation-end callback logging each validation metric."""

    def __call__(self, param: Any) -> None:
        if param.eval_metric is None:
            return
        for name, value in param.eval_metric.get_name_value():
            _LOG.info("Epoch[%d] Validation-%s=%f", param.epoch, name, value)
