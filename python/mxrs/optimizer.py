"""``mx.optimizer``: SGD (with momentum), NAG, Adam and RMSProp, updating weights in place
from their gradients. SGD and Adam run the registry's fused update ops (``sgd_update``,
``sgd_mom_update``, ``adam_update``); NAG and RMSProp compose elementwise ops. Every update is
pushed onto the engine like any op."""

from __future__ import annotations

import math
import pickle
from typing import Any, ClassVar

from .ndarray.ndarray import NDArray, invoke, zeros

__all__ = [
    "DCASGD",
    "FTML",
    "NAG",
    "SGD",
    "SGLD",
    "AdaDelta",
    "AdaGrad",
    "Adam",
    "Adamax",
    "Ftrl",
    "Nadam",
    "Optimizer",
    "RMSProp",
    "Signum",
    "Test",
    "Updater",
    "ccSGD",
    "create",
    "get_updater",
    "register",
]


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

    opt_registry: ClassVar[dict[str, type]] = {}

    @staticmethod
    def register(klass: type) -> type:
        """Makes an optimizer class known to ``create_optimizer`` by its name in lower case."""
        Optimizer.opt_registry[klass.__name__.lower()] = klass
        return klass

    @staticmethod
    def create_optimizer(name: str, **kwargs: Any) -> Optimizer:
        """An optimizer by its registered name (``sgd``, ``adam``, ``adagrad``, ...)."""
        key = name.lower()
        if key not in Optimizer.opt_registry:
            raise ValueError(
                f"unknown optimizer {name!r} (one of {sorted(Optimizer.opt_registry)})"
            )
        return Optimizer.opt_registry[key](**kwargs)

    def set_lr_scale(self, args_lrscale: dict) -> None:
        """Older name of :meth:`set_lr_mult`."""
        self.set_lr_mult(args_lrscale)

    def create_state_multi_precision(self, index: Any, weight: NDArray) -> Any:
        """The state of a weight (the float32 and float64 weights here need no master copy)."""
        return self.create_state(index, weight)

    def update_multi_precision(
        self, index: Any, weight: NDArray, grad: NDArray, state: Any
    ) -> None:
        """:meth:`update` (as above, no master copy is kept)."""
        self.update(index, weight, grad, state)

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
        return _clipped(self, grad) + self._wd(index) * weight

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
        return _zeros_like(weight, 2)

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


def _zeros_like(weight: NDArray, n: int) -> tuple[NDArray, ...]:
    """``n`` arrays of zeros of the weight's shape, device and dtype (an optimizer's state)."""
    return tuple(zeros(weight.shape, weight.context, weight.dtype) for _ in range(n))


def _clipped(opt: Optimizer, grad: NDArray) -> NDArray:
    """The gradient rescaled and clipped (without weight decay)."""
    g = grad * opt.rescale_grad
    return g.clip(-opt.clip_gradient, opt.clip_gradient) if opt.clip_gradient is not None else g


class AdaGrad(Optimizer):
    """AdaGrad: steps scaled by the root of the sum of squared gradients so far."""

    def __init__(self, eps: float = 1e-7, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.float_stable_eps = eps

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return zeros(weight.shape, weight.context, weight.dtype)

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_count(index)
        lr, wd = self._lr(index), self._wd(index)
        g = _clipped(self, grad)
        state += g * g
        weight[:] = weight - lr * (g / (state + self.float_stable_eps).sqrt() + wd * weight)


class AdaDelta(Optimizer):
    """AdaDelta: steps from running means of squared gradients and squared steps (no rate)."""

    def __init__(self, rho: float = 0.9, epsilon: float = 1e-5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rho, self.epsilon = rho, epsilon

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return (zeros(weight.shape, weight.context), zeros(weight.shape, weight.context))

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        wd = self._wd(index)
        self._update_count(index)
        g = _clipped(self, grad)
        acc_g, acc_delta = state
        acc_g[:] = self.rho * acc_g + (1.0 - self.rho) * g * g
        step = (acc_delta + self.epsilon).sqrt() / (acc_g + self.epsilon).sqrt() * g
        acc_delta[:] = self.rho * acc_delta + (1.0 - self.rho) * step * step
        weight[:] = weight - (step + wd * weight)


class Adamax(Optimizer):
    """Adamax: Adam with the infinity norm of the gradients in place of the second moment."""

    def __init__(
        self, learning_rate: float = 0.002, beta1: float = 0.9, beta2: float = 0.999, **kwargs: Any
    ) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2 = beta1, beta2

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return _zeros_like(weight, 2)

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_count(index)
        t = self._index_update_count[index]
        lr = self._lr(index) / (1.0 - self.beta1**t)
        g = grad * self.rescale_grad + self._wd(index) * weight
        if self.clip_gradient is not None:
            g = g.clip(-self.clip_gradient, self.clip_gradient)
        m, u = state
        m[:] = self.beta1 * m + (1.0 - self.beta1) * g
        u[:] = invoke("broadcast_maximum", [self.beta2 * u, g.abs()])
        weight[:] = weight - lr * m / u


class Nadam(Optimizer):
    """Adam with Nesterov momentum and a warming momentum schedule (``schedule_decay``)."""

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        schedule_decay: float = 0.004,
        **kwargs: Any,
    ) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.schedule_decay = schedule_decay
        self.m_schedule = 1.0

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return _zeros_like(weight, 2)

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_count(index)
        lr, t = self._lr(index), self._index_update_count[index]
        g = grad * self.rescale_grad + self._wd(index) * weight
        if self.clip_gradient is not None:
            g = g.clip(-self.clip_gradient, self.clip_gradient)
        mu_t = self.beta1 * (1.0 - 0.5 * 0.96 ** (t * self.schedule_decay))
        mu_next = self.beta1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * self.schedule_decay))
        self.m_schedule *= mu_t
        schedule_next = self.m_schedule * mu_next
        m, v = state
        m[:] = self.beta1 * m + (1.0 - self.beta1) * g
        v[:] = self.beta2 * v + (1.0 - self.beta2) * g * g
        m_bar = (1.0 - mu_t) * (g / (1.0 - self.m_schedule)) + mu_next * (m / (1.0 - schedule_next))
        v_hat = v / (1.0 - self.beta2**t)
        weight[:] = weight - lr * m_bar / (v_hat.sqrt() + self.epsilon)


class Signum(Optimizer):
    """signSGD, or with ``momentum`` Signum: steps of ``lr`` times the sign of the gradient (or
    of its momentum); ``wd_lh`` decays the weight apart from the sign."""

    def __init__(
        self, learning_rate: float = 0.01, momentum: float = 0.9, wd_lh: float = 0.0, **kwargs: Any
    ) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.momentum, self.wd_lh = momentum, wd_lh

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return zeros(weight.shape, weight.context, weight.dtype) if self.momentum != 0.0 else None

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_count(index)
        lr, wd = self._lr(index), self._wd(index)
        g = _clipped(self, grad)
        if state is None:
            weight[:] = (1.0 - lr * wd) * weight - lr * g.sign()
            return
        state[:] = self.momentum * state - (1.0 - self.momentum) * (wd * weight + g)
        weight[:] = (1.0 - lr * self.wd_lh) * weight + lr * state.sign()


class Ftrl(Optimizer):
    """FTRL-Proximal: per-coordinate rates with L1 (``lamda1``) and L2 (``wd``) terms."""

    def __init__(
        self, lamda1: float = 0.01, learning_rate: float = 0.1, beta: float = 1, **kwargs: Any
    ) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.lamda1, self.beta = lamda1, beta

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return (zeros(weight.shape, weight.context), zeros(weight.shape, weight.context))

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_count(index)
        lr, wd = self._lr(index), self._wd(index)
        g = _clipped(self, grad)
        z, n = state
        z[:] = z + g - ((n + g * g).sqrt() - n.sqrt()) * weight / lr
        n[:] = n + g * g
        active = z.abs() > self.lamda1
        weight[:] = (z.sign() * self.lamda1 - z) / ((self.beta + n.sqrt()) / lr + wd) * active


class FTML(Optimizer):
    """Follow the Moving Leader."""

    def __init__(
        self, beta1: float = 0.6, beta2: float = 0.999, epsilon: float = 1e-8, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return _zeros_like(weight, 3)

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_count(index)
        lr, t = self._lr(index), self._index_update_count[index]
        g = grad * self.rescale_grad + self._wd(index) * weight
        if self.clip_gradient is not None:
            g = g.clip(-self.clip_gradient, self.clip_gradient)
        d, v, z = state
        v[:] = self.beta2 * v + (1.0 - self.beta2) * g * g
        d_t = (1.0 - self.beta1**t) / lr * ((v / (1.0 - self.beta2**t)).sqrt() + self.epsilon)
        z[:] = self.beta1 * z + (1.0 - self.beta1) * g - (d_t - self.beta1 * d) * weight
        d[:] = d_t
        weight[:] = -1.0 * z / d_t


class DCASGD(Optimizer):
    """Delay-compensated SGD: the gradient corrected by ``lamda * g * g * (w - w_previous)``."""

    def __init__(self, momentum: float = 0.0, lamda: float = 0.04, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.momentum, self.lamda = momentum, lamda
        self.weight_previous: dict = {}

    def create_state(self, index: Any, weight: NDArray) -> Any:
        mom = zeros(weight.shape, weight.context, weight.dtype) if self.momentum != 0.0 else None
        return (mom, weight.copy())

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_count(index)
        lr, wd = self._lr(index), self._wd(index)
        g = _clipped(self, grad)
        mom, previous = state
        step = -lr * (g + wd * weight + self.lamda * g * g * (weight - previous))
        if mom is not None:
            mom[:] = self.momentum * mom + step
            step = mom
        previous[:] = weight
        weight[:] = weight + step


class SGLD(Optimizer):
    """Stochastic gradient Langevin dynamics: a half step plus noise of variance ``lr``."""

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return None

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        from .ndarray.random import normal

        self._update_count(index)
        lr, wd = self._lr(index), self._wd(index)
        g = _clipped(self, grad)
        noise = normal(0.0, math.sqrt(lr), weight.shape, dtype=weight.dtype, ctx=weight.context)
        weight[:] = weight - lr / 2 * (g + wd * weight) + noise


class ccSGD(SGD):
    """``SGD`` under MXNet's older name."""


class Test(Optimizer):
    """The test optimizer of MXNet's own tests: the weight plus the rescaled gradient."""

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return zeros(weight.shape, weight.context)

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        weight[:] = weight + grad * self.rescale_grad
        state[:] = weight


register = Optimizer.register
for _klass in (
    SGD, NAG, Adam, RMSProp, AdaGrad, AdaDelta, Adamax, Nadam, Signum, Ftrl, FTML, DCASGD, SGLD, ccSGD, Test,
):  # fmt: skip
    register(_klass)


def create(name: str | Optimizer, **kwargs: Any) -> Optimizer:
    """An optimizer: itself, or by its registered name."""
    if isinstance(name, Optimizer):
        return name
    return Optimizer.create_optimizer(name, **kwargs)


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
