"""``mx.metric``: evaluation metrics accumulated over batches (``update(labels, preds)``) and
read with ``get()`` as ``(name, value)``. Each keeps a local total (``reset_local`` clears it:
a training loop's per-interval figure) and a global one (``reset`` clears both), as MXNet's do.
``create`` makes one by name (``acc``, ``top_k_accuracy``, ``f1``, ``mcc``, ``perplexity``,
``mae``, ``mse``, ``rmse``, ``ce``, ``nll_loss``, ``pearsonr``, ``pcc``, ``loss``), from a
function (a ``CustomMetric``) or a list (a ``CompositeEvalMetric``)."""

from __future__ import annotations

import math
import numbers
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from . import registry
from .ndarray.ndarray import NDArray

__all__ = [
    "F1",
    "MAE",
    "MCC",
    "MSE",
    "PCC",
    "RMSE",
    "Accuracy",
    "Caffe",
    "CompositeEvalMetric",
    "CrossEntropy",
    "CustomMetric",
    "EvalMetric",
    "Loss",
    "NegativeLogLikelihood",
    "PearsonCorrelation",
    "Perplexity",
    "TopKAccuracy",
    "Torch",
    "alias",
    "check_label_shapes",
    "create",
    "np",
    "register",
]

_numpy = np


def _host(x: Any) -> _numpy.ndarray:
    return x.asnumpy() if isinstance(x, NDArray) else _numpy.asarray(x)


def check_label_shapes(labels: Any, preds: Any, wrap: bool = False, shape: bool = False) -> tuple:
    """Raises ``ValueError`` unless ``labels`` and ``preds`` are as many (``shape``: of one
    shape); with ``wrap``, a single array is returned as a list of one."""
    a, b = (labels.shape, preds.shape) if shape else (len(labels), len(preds))
    if a != b:
        raise ValueError(f"Shape of labels {a} does not match shape of predictions {b}")
    if wrap:
        labels = [labels] if isinstance(labels, NDArray) else labels
        preds = [preds] if isinstance(preds, NDArray) else preds
    return labels, preds


class EvalMetric:
    """A running metric: ``sum_metric / num_inst``, locally and globally."""

    def __init__(
        self,
        name: str,
        output_names: list[str] | None = None,
        label_names: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.name = str(name)
        self.output_names, self.label_names = output_names, label_names
        self._has_global_stats = kwargs.pop("has_global_stats", False)
        self._kwargs = kwargs
        self.reset()

    def __str__(self) -> str:
        return f"EvalMetric: {dict(self.get_name_value())}"

    def get_config(self) -> dict[str, Any]:
        """What makes the metric again with ``create(**config)``: its class and arguments."""
        config = dict(self._kwargs)
        config.update(
            metric=type(self).__name__,
            name=self.name,
            output_names=self.output_names,
            label_names=self.label_names,
        )
        return config

    def update_dict(self, label: dict[str, Any], pred: dict[str, Any]) -> None:
        """``update`` from outputs and labels by name (``output_names``, ``label_names``)."""
        preds = [pred[n] for n in self.output_names] if self.output_names else list(pred.values())
        labels = [label[n] for n in self.label_names] if self.label_names else list(label.values())
        self.update(labels, preds)

    def update(self, labels: Any, preds: Any) -> None:
        """Accumulates a batch."""
        raise NotImplementedError(f"{type(self).__name__}.update")

    def _add(self, total: float, count: float) -> None:
        self.sum_metric += total
        self.global_sum_metric += total
        self.num_inst += count
        self.global_num_inst += count

    def reset(self) -> None:
        """Forgets everything accumulated, local and global."""
        self.num_inst, self.sum_metric = 0, 0.0
        self.global_num_inst, self.global_sum_metric = 0, 0.0

    def reset_local(self) -> None:
        """Forgets the local totals only."""
        self.num_inst, self.sum_metric = 0, 0.0

    def _value(self, total: float, count: float) -> float:
        return total / count if count else float("nan")

    def get(self) -> tuple[Any, Any]:
        """``(name, value)`` of the local totals; NaN before any update."""
        return (self.name, self._value(self.sum_metric, self.num_inst))

    def get_global(self) -> tuple[Any, Any]:
        """``(name, value)`` of the global totals (the local ones without global stats)."""
        if not self._has_global_stats:
            return self.get()
        return (self.name, self._value(self.global_sum_metric, self.global_num_inst))

    @staticmethod
    def _pairs(name: Any, value: Any) -> list[tuple[str, float]]:
        names = name if isinstance(name, list) else [name]
        values = value if isinstance(value, list) else [value]
        return list(zip(names, values))

    def get_name_value(self) -> list[tuple[str, float]]:
        """``get`` as a list of ``(name, value)`` pairs."""
        return self._pairs(*self.get())

    def get_global_name_value(self) -> list[tuple[str, float]]:
        """``get_global`` as a list of ``(name, value)`` pairs."""
        return self._pairs(*self.get_global())


register = registry.get_register_func(EvalMetric, "metric")
alias = registry.get_alias_func(EvalMetric, "metric")
_create = registry.get_create_func(EvalMetric, "metric")


def create(metric: Any, *args: Any, **kwargs: Any) -> EvalMetric:
    """A metric: itself, by name, a ``CustomMetric`` of a function, or a composite of a list."""
    if callable(metric) and not isinstance(metric, (type, EvalMetric)):
        return CustomMetric(metric, *args, **kwargs)
    if isinstance(metric, (list, tuple)):
        composite = CompositeEvalMetric()
        for child in metric:
            composite.add(create(child, *args, **kwargs))
        return composite
    if isinstance(metric, type) and issubclass(metric, EvalMetric):
        return metric(*args, **kwargs)
    kwargs.pop("metric", None)
    return _create(metric, *args, **kwargs)


@register
@alias("composite")
class CompositeEvalMetric(EvalMetric):
    """Several metrics updated together; ``get`` gives their names and values as lists."""

    def __init__(
        self,
        metrics: list[Any] | None = None,
        name: str = "composite",
        output_names: list[str] | None = None,
        label_names: list[str] | None = None,
    ) -> None:
        self.metrics: list[EvalMetric] = [create(m) for m in metrics or []]
        super().__init__(name, output_names, label_names, has_global_stats=True)

    def add(self, metric: Any) -> None:
        """Adds a metric (or what ``create`` makes one from)."""
        self.metrics.append(create(metric))

    def get_metric(self, index: int) -> EvalMetric:
        """The ``index``-th metric."""
        return self.metrics[index]

    def update_dict(self, labels: dict[str, Any], preds: dict[str, Any]) -> None:
        if self.label_names is not None:
            labels = OrderedDict((k, v) for k, v in labels.items() if k in self.label_names)
        if self.output_names is not None:
            preds = OrderedDict((k, v) for k, v in preds.items() if k in self.output_names)
        for m in self.metrics:
            m.update_dict(labels, preds)

    def update(self, labels: Any, preds: Any) -> None:
        for m in self.metrics:
            m.update(labels, preds)

    def reset(self) -> None:
        for m in getattr(self, "metrics", []):
            m.reset()

    def reset_local(self) -> None:
        for m in self.metrics:
            m.reset_local()

    def _gather(self, pairs: list[tuple[Any, Any]]) -> tuple[list, list]:
        names: list = []
        values: list = []
        for name, value in pairs:
            names += name if isinstance(name, list) else [name]
            values += value if isinstance(value, list) else [value]
        return names, values

    def get(self) -> tuple[list, list]:
        return self._gather([m.get() for m in self.metrics])

    def get_global(self) -> tuple[list, list]:
        return self._gather([m.get_global() for m in self.metrics])

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["metrics"] = [m.get_config() for m in self.metrics]
        return config


@register
@alias("acc")
class Accuracy(EvalMetric):
    """The share of examples whose highest-scoring class (along ``axis``) is the label."""

    def __init__(
        self,
        axis: int = 1,
        name: str = "accuracy",
        output_names: list[str] | None = None,
        label_names: list[str] | None = None,
    ) -> None:
        super().__init__(name, output_names, label_names, axis=axis, has_global_stats=True)
        self.axis = axis

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            p, y = _host(pred), _host(label)
            if p.shape != y.shape:
                p = p.argmax(axis=self.axis)
            p, y = p.astype("int32").ravel(), y.astype("int32").ravel()
            check_label_shapes(y, p)
            self._add(float((p == y).sum()), len(p))


@register
@alias("top_k_accuracy", "top_k_acc")
class TopKAccuracy(EvalMetric):
    """The share of examples whose label is among the ``top_k`` highest-scoring classes."""

    def __init__(
        self,
        top_k: int = 1,
        name: str = "top_k_accuracy",
        output_names: list[str] | None = None,
        label_names: list[str] | None = None,
    ) -> None:
        super().__init__(name, output_names, label_names, top_k=top_k, has_global_stats=True)
        if top_k <= 1:
            raise ValueError("TopKAccuracy: use Accuracy for top_k of 1")
        self.top_k = top_k
        self.name += f"_{top_k}"

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            p, y = _host(pred).astype("float32"), _host(label).astype("int32").ravel()
            if p.ndim > 2:
                raise ValueError(f"TopKAccuracy: predictions of {p.ndim} axes (at most 2)")
            if p.ndim == 1:
                hits = float((p.astype("int32") == y).sum())
            else:
                k = min(self.top_k, p.shape[1])
                best = _numpy.argsort(-p, axis=1, kind="stable")[:, :k]
                hits = float((best == y[:, None]).any(axis=1).sum())
            self._add(hits, p.shape[0])


class _Confusion:
    """Counts of a binary classifier's outcomes, local and global."""

    def __init__(self) -> None:
        self.local = _numpy.zeros(
            4
        )  # true positives, false positives, false negatives, true negatives
        self.total = _numpy.zeros(4)

    def add(self, label: Any, pred: Any) -> None:
        y, p = _host(label).astype("int32").ravel(), _host(pred)
        check_label_shapes(y, p)
        if len(_numpy.unique(y)) > 2:
            raise ValueError("this metric supports binary classification only")
        guess = p.argmax(axis=1) == 1
        truth = y == 1
        counts = _numpy.array(
            [
                (guess & truth).sum(),
                (guess & ~truth).sum(),
                (~guess & truth).sum(),
                (~guess & ~truth).sum(),
            ],
            dtype=float,
        )
        self.local += counts
        self.total += counts

    @staticmethod
    def fscore(c: _numpy.ndarray) -> float:
        tp, fp, fn, _ = c
        precision = tp / (tp + fp) if tp + fp > 0 else 0.0
        recall = tp / (tp + fn) if tp + fn > 0 else 0.0
        return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0

    @staticmethod
    def mcc(c: _numpy.ndarray) -> float:
        tp, fp, fn, tn = c
        if not c.sum():
            return 0.0
        terms = [t for t in (tp + fp, tp + fn, tn + fp, tn + fn) if t != 0]
        return float((tp * tn - fp * fn) / math.sqrt(float(_numpy.prod(terms))))


class _Binary(EvalMetric):
    """F1 and MCC: ``macro`` averages each batch's score, ``micro`` scores all counts."""

    score: Callable[[_numpy.ndarray], float]

    def __init__(
        self,
        name: str,
        output_names: list[str] | None,
        label_names: list[str] | None,
        average: str,
    ) -> None:
        if average not in ("macro", "micro"):
            raise ValueError(f"average {average!r} is not macro or micro")
        self.average = average
        self.counts = _Confusion()
        super().__init__(name, output_names, label_names, has_global_stats=True)

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            self.counts.add(label, pred)
        c = self.counts
        if self.average == "macro":
            self.sum_metric += type(self).score(c.local)
            self.global_sum_metric += type(self).score(c.total)
            self.num_inst += 1
            self.global_num_inst += 1
            c.local[:] = 0
            c.total[:] = 0
        else:
            self.sum_metric = type(self).score(c.local) * c.local.sum()
            self.global_sum_metric = type(self).score(c.total) * c.total.sum()
            self.num_inst, self.global_num_inst = c.local.sum(), c.total.sum()

    def reset(self) -> None:
        super().reset()
        self.counts = _Confusion()

    def reset_local(self) -> None:
        super().reset_local()
        self.counts.local[:] = 0


@register
class F1(_Binary):
    """The F1 score of a binary classifier (class 1 is positive)."""

    score = staticmethod(_Confusion.fscore)

    def __init__(
        self,
        name: str = "f1",
        output_names: list[str] | None = None,
        label_names: list[str] | None = None,
        average: str = "macro",
    ) -> None:
        super().__init__(name, output_names, label_names, average)


@register
class MCC(_Binary):
    """Matthews' correlation coefficient of a binary classifier."""

    score = staticmethod(_Confusion.mcc)

    def __init__(
        self,
        name: str = "mcc",
        output_names: list[str] | None = None,
        label_names: list[str] | None = None,
        average: str = "macro",
    ) -> None:
        super().__init__(name, output_names, label_names, average)


@register
class Perplexity(EvalMetric):
    """``exp`` of the mean negative log-probability of the labels (those equal to
    ``ignore_label`` left out)."""

    def __init__(
        self,
        ignore_label: int | None,
        axis: int = -1,
        name: str = "perplexity",
        output_names: list[str] | None = None,
        label_names: list[str] | None = None,
    ) -> None:
        super().__init__(
            name, output_names, label_names, ignore_label=ignore_label, has_global_stats=True
        )
        self.ignore_label, self.axis = ignore_label, axis

    def update(self, labels: Any, preds: Any) -> None:
        if len(labels) != len(preds):
            raise ValueError(f"Perplexity: {len(labels)} labels for {len(preds)} predictions")
        for label, pred in zip(labels, preds):
            p, y = _host(pred), _host(label).astype("int64").ravel()
            probs = _numpy.moveaxis(p, self.axis, -1).reshape(-1, p.shape[self.axis])
            picked = probs[_numpy.arange(len(y)), y].astype("float64")
            keep = (
                _numpy.ones(len(y), bool) if self.ignore_label is None else y != self.ignore_label
            )
            loss = -_numpy.log(_numpy.maximum(1e-10, picked[keep])).sum()
            self._add(float(loss), int(keep.sum()))

    def _value(self, total: float, count: float) -> float:
        return math.exp(total / count) if count else float("nan")


class _Regression(EvalMetric):
    """A regression error averaged over batches (each batch's mean counts once)."""

    def error(self, label: _numpy.ndarray, pred: _numpy.ndarray) -> float:
        raise NotImplementedError

    def __init__(
        self, name: str, output_names: list[str] | None = None, label_names: list[str] | None = None
    ) -> None:
        super().__init__(name, output_names, label_names, has_global_stats=True)

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            y, p = _host(label), _host(pred)
            y = y.reshape(y.shape[0], 1) if y.ndim == 1 else y
            p = p.reshape(p.shape[0], 1) if p.ndim == 1 else p
            self._add(float(self.error(y, p)), 1)


@register
class MAE(_Regression):
    """Mean absolute error."""

    def __init__(
        self, name: str = "mae", output_names: Any = None, label_names: Any = None
    ) -> None:
        super().__init__(name, output_names, label_names)

    def error(self, label: _numpy.ndarray, pred: _numpy.ndarray) -> float:
        return float(_numpy.abs(label - pred).mean())


@register
class MSE(_Regression):
    """Mean squared error."""

    def __init__(
        self, name: str = "mse", output_names: Any = None, label_names: Any = None
    ) -> None:
        super().__init__(name, output_names, label_names)

    def error(self, label: _numpy.ndarray, pred: _numpy.ndarray) -> float:
        return float(((label - pred) ** 2.0).mean())


@register
class RMSE(_Regression):
    """Root mean squared error."""

    def __init__(
        self, name: str = "rmse", output_names: Any = None, label_names: Any = None
    ) -> None:
        super().__init__(name, output_names, label_names)

    def error(self, label: _numpy.ndarray, pred: _numpy.ndarray) -> float:
        return float(_numpy.sqrt(((label - pred) ** 2.0).mean()))


class _LogLoss(EvalMetric):
    """The mean of ``-log(p + eps)`` of each example's label's probability."""

    def __init__(self, eps: float, name: str, output_names: Any, label_names: Any) -> None:
        super().__init__(name, output_names, label_names, eps=eps, has_global_stats=True)
        self.eps = eps

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            y, p = _host(label).ravel().astype("int64"), _host(pred)
            if y.shape[0] != p.shape[0]:
                raise ValueError(f"{self.name}: {y.shape[0]} labels for {p.shape[0]} predictions")
            prob = p[_numpy.arange(y.shape[0]), y]
            self._add(float((-_numpy.log(prob + self.eps)).sum()), y.shape[0])


@register
@alias("ce")
class CrossEntropy(_LogLoss):
    """Cross-entropy of the predicted distributions and the labels."""

    def __init__(
        self,
        eps: float = 1e-12,
        name: str = "cross-entropy",
        output_names: Any = None,
        label_names: Any = None,
    ) -> None:
        super().__init__(eps, name, output_names, label_names)


@register
@alias("nll_loss")
class NegativeLogLikelihood(_LogLoss):
    """Negative log-likelihood of the labels under the predicted distributions."""

    def __init__(
        self,
        eps: float = 1e-12,
        name: str = "nll-loss",
        output_names: Any = None,
        label_names: Any = None,
    ) -> None:
        super().__init__(eps, name, output_names, label_names)


@register
@alias("pearsonr")
class PearsonCorrelation(EvalMetric):
    """Pearson's correlation of predictions and labels: ``macro`` averages each batch's,
    ``micro`` correlates everything seen."""

    def __init__(
        self,
        name: str = "pearsonr",
        output_names: Any = None,
        label_names: Any = None,
        average: str = "macro",
    ) -> None:
        self.average = average
        super().__init__(name, output_names, label_names, has_global_stats=True)

    def reset(self) -> None:
        super().reset()
        # n, sum x, sum y, sum x^2, sum y^2, sum xy (labels x, predictions y), for ``micro``.
        self._moments = _numpy.zeros(6)

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            check_label_shapes(label, pred, False, True)
            x, y = _host(label).ravel().astype("float64"), _host(pred).ravel().astype("float64")
            if self.average == "macro":
                self._add(float(_numpy.corrcoef(y, x)[0, 1]), 1)
            else:
                self._moments += [
                    len(x),
                    x.sum(),
                    y.sum(),
                    (x * x).sum(),
                    (y * y).sum(),
                    (x * y).sum(),
                ]
                self.num_inst += 1
                self.global_num_inst += 1

    def get(self) -> tuple[str, float]:
        if self.num_inst == 0:
            return (self.name, float("nan"))
        if self.average == "macro":
            return (self.name, self.sum_metric / self.num_inst)
        n, sx, sy, sxx, syy, sxy = self._moments
        cov = sxy - sx * sy / n
        return (self.name, float(cov / math.sqrt((sxx - sx * sx / n) * (syy - sy * sy / n))))


@register
class PCC(EvalMetric):
    """Matthews' correlation generalized to several classes, from the confusion matrix."""

    def __init__(
        self,
        name: str = "pcc",
        output_names: Any = None,
        label_names: Any = None,
        has_global_stats: bool = True,
    ) -> None:
        self.k = 2
        super().__init__(name, output_names, label_names, has_global_stats=has_global_stats)

    @staticmethod
    def _score(cm: _numpy.ndarray) -> float:
        n, x, y = cm.sum(), cm.sum(axis=1), cm.sum(axis=0)
        cov_xx, cov_yy = (x * (n - x)).sum(), (y * (n - y)).sum()
        if cov_xx == 0 or cov_yy == 0:
            return float("nan")
        return float((cm.diagonal() * n - x * y).sum() / math.sqrt(cov_xx * cov_yy))

    def _grow(self, k: int) -> None:
        pad = ((0, k - self.k), (0, k - self.k))
        self.lcm, self.gcm = _numpy.pad(self.lcm, pad), _numpy.pad(self.gcm, pad)
        self.k = k

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            y, p = _host(label).astype("int32"), _host(pred)
            p = p.argmax(axis=1) if p.shape != y.shape else p.astype("int32")
            top = int(max(p.max(), y.max())) + 1
            if top > self.k:
                self._grow(top)
            cm = _numpy.zeros((self.k, self.k))
            _numpy.add.at(cm, (p.ravel(), y.ravel()), 1)
            self.lcm += cm
            self.gcm += cm
        self.num_inst += 1
        self.global_num_inst += 1

    @property
    def sum_metric(self) -> float:  # type: ignore[override]
        return self._score(self.lcm) * self.num_inst

    @sum_metric.setter
    def sum_metric(self, value: float) -> None:
        pass

    @property
    def global_sum_metric(self) -> float:  # type: ignore[override]
        return self._score(self.gcm) * self.global_num_inst

    @global_sum_metric.setter
    def global_sum_metric(self, value: float) -> None:
        pass

    def reset(self) -> None:
        self.global_num_inst = 0
        self.gcm = _numpy.zeros((self.k, self.k))
        self.reset_local()

    def reset_local(self) -> None:
        self.num_inst = 0
        self.lcm = _numpy.zeros((self.k, self.k))


@register
class Loss(EvalMetric):
    """The mean of the outputs themselves (losses); the labels are not read."""

    def __init__(
        self, name: str = "loss", output_names: Any = None, label_names: Any = None
    ) -> None:
        super().__init__(name, output_names, label_names, has_global_stats=True)

    def update(self, _: Any, preds: Any) -> None:
        for pred in [preds] if isinstance(preds, NDArray) else preds:
            p = _host(pred)
            self._add(float(p.sum()), p.size)


@register
class Torch(Loss):
    """``Loss`` under the name MXNet's Torch plugin used."""

    def __init__(
        self, name: str = "torch", output_names: Any = None, label_names: Any = None
    ) -> None:
        super().__init__(name, output_names, label_names)


@register
class Caffe(Loss):
    """``Loss`` under the name MXNet's Caffe plugin used."""

    def __init__(
        self, name: str = "caffe", output_names: Any = None, label_names: Any = None
    ) -> None:
        super().__init__(name, output_names, label_names)


@register
class CustomMetric(EvalMetric):
    """A metric of a function ``feval(label, pred)`` of numpy arrays returning a value per
    batch, or ``(sum, count)``."""

    def __init__(
        self,
        feval: Callable[..., Any],
        name: str | None = None,
        allow_extra_outputs: bool = False,
        output_names: Any = None,
        label_names: Any = None,
    ) -> None:
        if name is None:
            name = feval.__name__
            if "<" in name:
                name = f"custom({name})"
        super().__init__(
            name,
            output_names,
            label_names,
            feval=feval,
            allow_extra_outputs=allow_extra_outputs,
            has_global_stats=True,
        )
        self._feval, self._allow_extra_outputs = feval, allow_extra_outputs

    def update(self, labels: Any, preds: Any) -> None:
        if not self._allow_extra_outputs:
            labels, preds = check_label_shapes(labels, preds, True)
        for pred, label in zip(preds, labels):
            value = self._feval(_host(label), _host(pred))
            if isinstance(value, tuple):
                self._add(value[0], value[1])
            else:
                self._add(value, 1)

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError("a CustomMetric's function cannot be written as a config")


def np(
    numpy_feval: Callable[..., Any], name: str | None = None, allow_extra_outputs: bool = False
) -> CustomMetric:
    """A ``CustomMetric`` of a function of numpy arrays."""

    def feval(label: Any, pred: Any) -> Any:
        return numpy_feval(label, pred)

    feval.__name__ = numpy_feval.__name__
    return CustomMetric(feval, name, allow_extra_outputs)


#: MXNet's names of the types a value or a name may have, which this module checks against.
numeric_types = (float, int, _numpy.generic, numbers.Number)
string_types = (str,)
