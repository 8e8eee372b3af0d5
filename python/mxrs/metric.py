"""``mx.metric``: Accuracy, CrossEntropy and MSE, accumulated over batches (``update``) and
read with ``get`` (``(name, value)``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .ndarray.ndarray import NDArray

__all__ = ["MSE", "Accuracy", "CompositeEvalMetric", "CrossEntropy", "EvalMetric", "create"]


def _np(x: Any) -> np.ndarray:
    return x.asnumpy() if isinstance(x, NDArray) else np.asarray(x)


class EvalMetric:
    """A running metric: a sum and a count."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name
        self.reset()

    def reset(self) -> None:
        """Forgets what was accumulated."""
        self.sum_metric, self.num_inst = 0.0, 0

    def update(self, labels: list[NDArray], preds: list[NDArray]) -> None:
        """Accumulates a batch."""
        raise NotImplementedError

    def get(self) -> tuple[str, float]:
        """``(name, value)``; NaN before any update."""
        value = self.sum_metric / self.num_inst if self.num_inst else float("nan")
        return (self.name, value)

    def get_name_value(self) -> list[tuple[str, float]]:
        """The ``get`` pairs as a list."""
        return [self.get()]


class Accuracy(EvalMetric):
    """The fraction of examples whose highest-scoring class is the label."""

    def __init__(self, axis: int = 1, name: str = "accuracy", **kwargs: Any) -> None:
        self.axis = axis
        super().__init__(name)

    def update(self, labels: list[NDArray], preds: list[NDArray]) -> None:
        for label, pred in zip(labels, preds):
            p, y = _np(pred), _np(label).astype(np.int64).ravel()
            if p.shape != y.shape:
                p = p.argmax(axis=self.axis)
            p = p.astype(np.int64).ravel()
            if p.shape != y.shape:
                raise ValueError(f"Accuracy: {p.shape[0]} predictions for {y.shape[0]} labels")
            self.sum_metric += float((p == y).sum())
            self.num_inst += len(y)


class CrossEntropy(EvalMetric):
    """The mean of -log(probability of the label)."""

    def __init__(self, eps: float = 1e-12, name: str = "cross-entropy", **kwargs: Any) -> None:
        self.eps = eps
        super().__init__(name)

    def update(self, labels: list[NDArray], preds: list[NDArray]) -> None:
        for label, pred in zip(labels, preds):
            p, y = _np(pred), _np(label).astype(np.int64).ravel()
            prob = p[np.arange(len(y)), y]
            self.sum_metric += float(-np.log(prob + self.eps).sum())
            self.num_inst += len(y)


class MSE(EvalMetric):
    """The mean squared error, per example averaged over batches."""

    def __init__(self, name: str = "mse", **kwargs: Any) -> None:
        super().__init__(name)

    def update(self, labels: list[NDArray], preds: list[NDArray]) -> None:
        for label, pred in zip(labels, preds):
            y, p = _np(label), _np(pred)
            if y.ndim == 1:
                y = y.reshape(-1, 1)
            if p.ndim == 1:
                p = p.reshape(-1, 1)
            self.sum_metric += float(((y - p) ** 2).mean())
            self.num_inst += 1


class CompositeEvalMetric(EvalMetric):
    """Several metrics updated together."""

    def __init__(self, metrics: list[EvalMetric] | None = None, name: str = "composite") -> None:
        self.metrics = list(metrics or [])
        super().__init__(name)

    def add(self, metric: EvalMetric) -> None:
        """Adds one."""
        self.metrics.append(metric)

    def reset(self) -> None:
        for m in getattr(self, "metrics", []):
            m.reset()

    def update(self, labels: list[NDArray], preds: list[NDArray]) -> None:
        for m in self.metrics:
            m.update(labels, preds)

    def get(self) -> tuple[Any, Any]:
        pairs = [m.get() for m in self.metrics]
        return ([n for n, _ in pairs], [v for _, v in pairs])

    def get_name_value(self) -> list[tuple[str, float]]:
        return [m.get() for m in self.metrics]


_REGISTRY = {
    "acc": Accuracy,
    "accuracy": Accuracy,
    "ce": CrossEntropy,
    "cross-entropy": CrossEntropy,
    "mse": MSE,
}


def create(metric: Any, **kwargs: Any) -> EvalMetric:
    """A metric by name (``acc``, ``ce``, ``mse``), a metric itself, or a list of either."""
    if isinstance(metric, EvalMetric):
        return metric
    if isinstance(metric, (list, tuple)):
        return CompositeEvalMetric([create(m) for m in metric])
    if metric not in _REGISTRY:
        raise ValueError(f"unknown metric {metric!r} (one of {sorted(_REGISTRY)})")
    return _REGISTRY[metric](**kwargs)
