"""``mx.optimizer``: SGD (with momentum), NAG, Adam and RMSProp, updating weights in place
from their gradients. SGD and Adam run the registry's fused update ops (``sgd_update``,
``sgd_mom_update``, ``adam_update``); NAG and RMSProp compose elementwise ops. Every update is
pushed onto the engine like any op."""

from __future__ import annotations

import pickle
from typing import Any

from .ndarray.ndarray import NDArray, invoke, zeros

__all__ = ["NAG", "SGD", "Adam", "Optimizer", "RMSProp", "Updater", "create", "get_updater"]


class Optimizer:
    """Shared settings: learning rate, weight decay, gradient rescaling and clipping, per
    parameter multipliers (``set_lr_mult``, ``set_wd_mult``), and the update count."""

    def __init__(
        self,
        learning_rate: float = 0.01,
        wd: float = 0.0,
        rescale_grad: float = 1.0,
        clip_gradient: float | None = None,
        lr_mult: dict | None = None,
        wd_mult: dict | None = None,
        param_idx2name: dict | None = None,
        lr_scheduler: Any = None,
        begin_num_update: int = 0,
        **kwargs: Any,
    ) -> None:
        self.lr, self.wd, self.rescale_grad = learning_rate, wd, rescale_grad
        self.clip_gradient = clip_gradient
        self.lr_mult: dict = dict(lr_mult or {})
        self.wd_mult: dict = dict(wd_mult or {})
        self.idx2name: dict = dict(param_idx2name or {})
        self.lr_scheduler = lr_scheduler
        if lr_scheduler is not None:
            lr_scheduler.base_lr = learning_rate
        # As MXNet counts: each weight's updates apart; ``num_update`` is the most any has had.
        self.begin_num_update = self.num_update = begin_num_update
        self._index_update_count: dict = {}

    @property
    def learning_rate(self) -> float:
        """The learning rate now: the scheduler's for ``num_update``, else the base rate."""
        return self.lr_scheduler(self.num_update) if self.lr_scheduler is not None else self.lr

    def set_learning_rate(self, lr: float) -> None:
        """Sets the base learning rate (refused under a scheduler, which sets it)."""
        if self.lr_scheduler is not None:
            raise UserWarning(
                "set_learning_rate: the optimizer's lr_scheduler sets its learning rate"
            )
        self.lr = lr

    def _update_count(self, index: Any) -> None:
        """Counts one more update of weight ``index``."""
        k = self._index_update_count.get(index, self.begin_num_update) + 1
        self._index_update_count[index] = k
        self.num_update = max(self.num_update, k)

    def set_lr_mult(self, args_lr_mult: dict) -> None:
        """Learning-rate multipliers by parameter name or index."""
        self.lr_mult = dict(args_lr_mult)

    def set_wd_mult(self, args_wd_mult: dict) -> None:
        """Weight-decay multipliers by parameter name or index."""
        self.wd_mult = dict(args_wd_mult)

    def _mult(self, table: dict, index: Any) -> float:
        if index in table:
            return table[index]
        return table.get(self.idx2name.get(index), 1.0)

    def _lr(self, index: Any) -> float:
        return self.learning_rate * self._mult(self.lr_mult, index)

    def _wd(self, index: Any) -> float:
        return self.wd * self._mult(self.wd_mult, index)

    def _common(self, index: Any) -> dict:
        return {
            "lr": self._lr(index),
            "wd": self._wd(index),
            "rescale_grad": self.rescale_grad,
            "clip_gradient": -1.0 if self.clip_gradient is None else self.clip_gradient,
        }

    def _grad(self, index: Any, grad: NDArray, weight: NDArray) -> NDArray:
        """The gradient rescaled, clipped, plus the weight decay, as the fused update ops
        compute it (for the optimizers written with elementwise ops)."""
        g = grad * self.rescale_grad
        if self.clip_gradient is not None:
            g = g.clip(-self.clip_gradient, self.clip_gradient)
        return g + self._wd(index) * weight

    def create_state(self, index: Any, weight: NDArray) -> Any:
        """The per-parameter state (momentum, moments), or None."""
        return None

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        """One step of ``weight`` from ``grad``."""
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent, with momentum when ``momentum`` > 0."""

    def __init__(self, momentum: float = 0.0, lazy_update: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.momentum = momentum

    def create_state(self, index: Any, weight: NDArray) -> Any:
        if self.momentum == 0.0:
            return None
        return zeros(weight.shape, weight.context, weight.dtype)

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_count(index)
        attrs = self._common(index)
        if state is None:
            invoke("sgd_update", [weight, grad], attrs, out=weight)
        else:
            attrs["momentum"] = self.momentum
            invoke("sgd_mom_update", [weight, grad, state], attrs, out=[weight, state])


class NAG(Optimizer):
    """Nesterov's accelerated gradient: the step looks ahead along the momentum."""

    def __init__(self, momentum: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.momentum = momentum

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return zeros(weight.shape, weight.context, weight.dtype) if self.momentum else None

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_count(index)
        lr = self._lr(index)
        g = self._grad(index, grad, weight)
        if state is None:
            weight[:] = weight - lr * g
            return
        state[:] = self.momentum * state + g
        weight[:] = weight - lr * (g + self.momentum * state)


class Adam(Optimizer):
    """Adam, with bias-corrected step size, on the fused ``adam_update`` op."""

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        **kwargs: Any,
    ) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return (
            zeros(weight.shape, weight.context, weight.dtype),
            zeros(weight.shape, weight.context, weight.dtype),
        )

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_count(index)
        t = self._index_update_count[index]
        attrs = self._common(index)
        attrs["lr"] *= (1.0 - self.beta2**t) ** 0.5 / (1.0 - self.beta1**t)
        attrs.update(beta1=self.beta1, beta2=self.beta2, epsilon=self.epsilon)
        mean, var = state
        invoke("adam_update", [weight, grad, mean, var], attrs, out=[weight, mean, var])


class RMSProp(Optimizer):
    """RMSProp: steps scaled by a running mean of squared gradients (``gamma1`` its decay)."""

    def __init__(
        self,
        learning_rate: float = 0.001,
        gamma1: float = 0.9,
        gamma2: float = 0.9,
        epsilon: float = 1e-8,
        centered: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.gamma1, self.epsilon = gamma1, epsilon
        if centered:
            raise ValueError("RMSProp: centered=True is not supported")

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return zeros(weight.shape, weight.context, weight.dtype)

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_count(index)
        lr = self._lr(index)
        g = self._grad(index, grad, weight)
        state[:] = self.gamma1 * state + (1.0 - self.gamma1) * g * g
        weight[:] = weight - lr * g / (state + self.epsilon).sqrt()


_REGISTRY = {"sgd": SGD, "nag": NAG, "adam": Adam, "rmsprop": RMSProp}


def create(name: str | Optimizer, **kwargs: Any) -> Optimizer:
    """An optimizer by name (``sgd``, ``nag``, ``adam``, ``rmsprop``)."""
    if isinstance(name, Optimizer):
        return name
    key = name.lower()
    if key not in _REGISTRY:
        raise ValueError(f"unknown optimizer {name!r} (one of {sorted(_REGISTRY)})")
    return _REGISTRY[key](**kwargs)


class Updater:
    """Applies an optimizer to (index, gradient, weight) triples, keeping each index's state."""

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizer = optimizer
        self.states: dict = {}

    def __call__(self, index: Any, grad: NDArray, weight: NDArray) -> None:
        if index not in self.states:
            self.states[index] = self.optimizer.create_state(index, weight)
        self.optimizer.update(index, weight, grad, self.states[index])

    def get_states(self, dump_optimizer: bool = False) -> bytes:
        """The states (with the optimizer, for ``dump_optimizer``), pickled as MXNet does."""
        return pickle.dumps((self.states, self.optimizer) if dump_optimizer else self.states)

    def set_states(self, states: bytes) -> None:
        """Restores what :meth:`get_states` gave."""
        loaded = pickle.loads(states)
        if isinstance(loaded, tuple) and len(loaded) == 2:
            self.states, self.optimizer = loaded
        else:
            self.states = loaded


def get_updater(optimizer: Optimizer) -> Updater:
    """An ``Updater`` for ``optimizer``."""
    return Updater(optimizer)
