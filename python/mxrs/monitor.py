"""``mx.monitor``: statistics of a bound graph's arrays while it trains. A ``Monitor`` installed
on executors (``Module.install_monitor``) records, every ``interval`` batches, ``stat_func`` of
each op output (and, with ``monitor_all``, each op input) whose name matches ``pattern``, and of
the arguments and auxiliary states at ``toc``."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from typing import Any

from .ndarray.ndarray import NDArray

__all__ = ["Monitor"]

_LOG = logging.getLogger(__name__)


def _rms(x: NDArray) -> NDArray:
    # The default statistic: the root mean square, ``norm(x) / sqrt(size)``.
    return x.norm() / math.sqrt(x.size)


class Monitor:
    """Records ``stat_func`` of the matching arrays every ``interval`` batches (``tic`` before
    the batch's forward pass, ``toc`` after its backward pass)."""

    def __init__(
        self,
        interval: int,
        stat_func: Callable[[NDArray], Any] | None = None,
        pattern: str = ".*",
        sort: bool = False,
        monitor_all: bool = False,
    ) -> None:
        self.interval = int(interval)
        self.stat_func = stat_func or _rms
        self.re_prog = re.compile(pattern)
        self.sort = sort
        self.monitor_all = monitor_all
        self.activated = False
        self.queue: list[tuple[int, str, Any]] = []
        self.step = 0
        self.exes: list[Any] = []

    def stat_helper(self, name: str, array: NDArray) -> None:
        """The executors' callback: records the statistic of a matching array while active."""
        if self.activated and self.re_prog.match(name):
            self.queue.append((self.step, name, self.stat_func(array)))

    def install(self, exe: Any) -> None:
        """Watches executor ``exe``."""
        exe.set_monitor_callback(self.stat_helper, self.monitor_all)
        self.exes.append(exe)

    def tic(self) -> None:
        """Starts a batch: every ``interval`` batches, the batch's arrays are recorded."""
        if self.step % self.interval == 0:
            for exe in self.exes:
                for a in list(exe.arg_arrays) + list(exe.aux_arrays):
                    a.wait_to_read()
            self.queue = []
            self.activated = True
        self.step += 1

    def toc(self) -> list[tuple[int, str, str]]:
        """Ends a batch: the recorded (batch, name, statistic as text) of a recorded batch,
        the arguments' and auxiliary states' included; an empty list otherwise."""
        if not self.activated:
            return []
        for exe in self.exes:
            named = list(zip(exe._symbol.list_arguments(), exe.arg_arrays))
            named += list(zip(exe._symbol.list_auxiliary_states(), exe.aux_arrays))
            for name, a in named:
                if self.re_prog.match(name):
                    self.queue.append((self.step, name, self.stat_func(a)))
        self.activated = False
        if self.sort:
            self.queue.sort(key=lambda item: item[1])
        res = []
        for step, name, stats in self.queue:
            values = stats if isinstance(stats, list) else [stats]
            text = ""
            for v in values:
                if not isinstance(v, NDArray):
                    raise TypeError(f"Monitor: stat_func gave a {type(v).__name__}, not NDArray")
                text += (str(v.asscalar()) if v.size == 1 else str(v.asnumpy())) + "\t"
            res.append((step, name, text))
        self.queue = []
        return res

    def toc_print(self) -> None:
        """``toc``, logged one line per array."""
        for step, name, text in self.toc():
            _LOG.info("Batch: %7d %30s %s", step, name, text)
