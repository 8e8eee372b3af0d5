"""``mx.lr_scheduler``: learning rates as a function of the update count. An optimizer given
``lr_scheduler=`` asks it for the rate of each step, passing ``num_update``, the most updates
any one weight has had. Each scheduler may warm up first: for ``warmup_steps`` updates the rate
rises linearly from ``warmup_begin_lr`` to ``base_lr`` (``warmup_mode="linear"``) or stays at
``warmup_begin_lr`` (``"constant"``)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

__all__ = [
    "CosineScheduler",
    "FactorScheduler",
    "LRScheduler",
    "MultiFactorScheduler",
    "PolyScheduler",
]

_LOG = logging.getLogger(__name__)


class LRScheduler:
    """The rate at update ``num_update``: ``scheduler(num_update)``. ``base_lr`` is the rate
    after warm-up (an optimizer sets it to its own learning rate)."""

    def __init__(
        self,
        base_lr: float = 0.01,
        warmup_steps: int = 0,
        warmup_begin_lr: float = 0,
        warmup_mode: str = "linear",
    ) -> None:
        if not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps must be a whole number >= 0, not {warmup_steps!r}")
        if warmup_begin_lr > base_lr:
            raise ValueError(f"warmup_begin_lr {warmup_begin_lr} is above base_lr {base_lr}")
        if warmup_mode not in ("linear", "constant"):
            raise ValueError(f"warmup_mode {warmup_mode!r} is not linear or constant")
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.warmup_begin_lr = warmup_begin_lr
        self.warmup_final_lr = base_lr
        self.warmup_mode = warmup_mode

    def get_warmup_lr(self, num_update: int) -> float:
        """The rate at ``num_update`` during warm-up."""
        if num_update >= self.warmup_steps:
            raise ValueError(f"update {num_update} is past the {self.warmup_steps} warm-up steps")
        if self.warmup_mode == "constant":
            return self.warmup_begin_lr
        span = self.warmup_final_lr - self.warmup_begin_lr
        return self.warmup_begin_lr + span * num_update / self.warmup_steps

    def __call__(self, num_update: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} gives no rate")


class FactorScheduler(LRScheduler):
    """The rate times ``factor`` every ``step`` updates (after warm-up), never below
    ``stop_factor_lr``: update ``n`` has ``base_lr * factor ** (ceil(n / step) - 1)``."""

    def __init__(
        self,
        step: int,
        factor: float = 1,
        stop_factor_lr: float = 1e-8,
        base_lr: float = 0.01,
        warmup_steps: int = 0,
        warmup_begin_lr: float = 0,
        warmup_mode: str = "linear",
    ) -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if step < 1:
            raise ValueError(f"step must be at least 1, not {step}")
        if factor > 1.0:
            raise ValueError(f"factor {factor} would raise the rate; it must be at most 1")
        self.step, self.factor, self.stop_factor_lr = step, factor, stop_factor_lr
        # Updates up to ``count + step`` run at ``base_lr``; ``base_lr`` falls as they pass.
        self.count = 0

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        while num_update > self.count + self.step:
            self.count += self.step
            self.base_lr = max(self.base_lr * self.factor, self.stop_factor_lr)
            _LOG.info("Update[%d]: Change learning rate to %0.5e", num_update, self.base_lr)
        return self.base_lr


class MultiFactorScheduler(LRScheduler):
    """The rate times ``factor`` once each update count of ``step`` (increasing) is passed."""

    def __init__(
        self,
        step: Sequence[int],
        factor: float = 1,
        base_lr: float = 0.01,
        warmup_steps: int = 0,
        warmup_begin_lr: float = 0,
        warmup_mode: str = "linear",
    ) -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        steps = list(step)
        if not steps or any(s < 1 for s in steps):
            raise ValueError(f"step must list update counts of at least 1, not {step!r}")
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f"step must increase, not {step!r}")
        if factor > 1.0:
            raise ValueError(f"factor {factor} would raise the rate; it must be at most 1")
        self.step, self.factor = steps, factor
        self.cur_step_ind, self.count = 0, 0

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        while self.cur_step_ind < len(self.step) and num_update > self.step[self.cur_step_ind]:
            self.count = self.step[self.cur_step_ind]
            self.cur_step_ind += 1
            self.base_lr *= self.factor
            _LOG.info("Update[%d]: Change learning rate to %0.5e", num_update, self.base_lr)
        return self.base_lr


class _Decay(LRScheduler):
    """A rate falling from ``base_lr`` to ``final_lr`` over the updates from the end of warm-up
    to ``max_update``, by ``shape(progress)`` (1 at the start, 0 at the end), then staying."""

    def __init__(
        self,
        max_update: int,
        base_lr: float,
        final_lr: float,
        warmup_steps: int,
        warmup_begin_lr: float,
        warmup_mode: str,
    ) -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if not isinstance(max_update, int) or max_update < 1:
            raise ValueError(f"max_update must be a whole number >= 1, not {max_update!r}")
        self.base_lr_orig, self.max_update, self.final_lr = base_lr, max_update, final_lr
        self.max_steps = max_update - warmup_steps

    def shape(self, progress: float) -> float:
        raise NotImplementedError

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        if num_update <= self.max_update:
            progress = (num_update - self.warmup_steps) / self.max_steps
            span = self.base_lr_orig - self.final_lr
            self.base_lr = self.final_lr + span * self.shape(progress)
        return self.base_lr


class PolyScheduler(_Decay):
    """Polynomial decay: ``final_lr + (base_lr - final_lr) * (1 - progress) ** pwr``."""

    def __init__(
        self,
        max_update: int,
        base_lr: float = 0.01,
        pwr: float = 2,
        final_lr: float = 0,
        warmup_steps: int = 0,
        warmup_begin_lr: float = 0,
        warmup_mode: str = "linear",
    ) -> None:
        super().__init__(max_update, base_lr, final_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        self.power = pwr

    def shape(self, progress: float) -> float:
        return (1.0 - progress) ** self.power


class CosineScheduler(_Decay):
    """Cosine decay: ``final_lr + (base_lr - final_lr) * (1 + cos(pi * progress)) / 2``."""

    def __init__(
        self,
        max_update: int,
        base_lr: float = 0.01,
        final_lr: float = 0,
        warmup_steps: int = 0,
        warmup_begin_lr: float = 0,
        warmup_mode: str = "linear",
    ) -> None:
        super().__init__(max_update, base_lr, final_lr, warmup_steps, warmup_begin_lr, warmup_mode)

    def shape(self, progress: float) -> float:
        return (1.0 + math.cos(math.pi * progress)) / 2.0
