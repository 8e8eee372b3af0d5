"""``mx.mod.Module``: a symbol with its parameters, bound for training or inference on one
device, with MXNet's workflow: ``bind``, ``init_params``, ``init_optimizer``, then
``forward``/``backward``/``update`` per batch, or ``fit``, ``predict`` and ``score`` over an
iterator."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from . import initializer as init_mod
from . import kvstore as kv_mod
from . import metric as metric_mod
from . import model
from . import optimizer as opt_mod
from .base import MXNetError
from .context import Context, current_context
from .io import DataBatch, DataDesc, DataIter
from .ndarray.ndarray import NDArray, concatenate
from .ndarray.ndarray import load as nd_load
from .ndarray.ndarray import save as nd_save
from .symbol.executor import Executor
from .symbol.symbol import Symbol

__all__ = ["BaseModule", "Module"]


def _names_shapes(descs: Sequence[Any] | None) -> list[tuple[str, tuple]]:
    out = []
    for d in descs or []:
        if isinstance(d, DataDesc):
            out.append((d.name, tuple(d.shape)))
        else:
            name, shape = d[0], d[1]
            out.append((name, tuple(shape)))
    return out


class BaseModule:
    """What every module offers on top of forward, backward and update. A module type gives
    the methods and properties below that raise ``NotImplementedError`` here."""

    def _missing(self, what: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} does not give {what}")

    # ---- what a module type gives ------------------------------------------------------------

    @property
    def symbol(self) -> Symbol:
        """The graph."""
        raise self._missing("symbol")

    @property
    def data_names(self) -> list[str]:
        """The names of the data inputs."""
        raise self._missing("data_names")

    @property
    def output_names(self) -> list[str]:
        """The names of the outputs."""
        raise self._missing("output_names")

    @property
    def data_shapes(self) -> list[DataDesc]:
        """The data inputs' descriptions."""
        raise self._missing("data_shapes")

    @property
    def label_shapes(self) -> list[DataDesc]:
        """The labels' descriptions."""
        raise self._missing("label_shapes")

    @property
    def output_shapes(self) -> list[tuple[str, tuple]]:
        """The outputs' names and shapes."""
        raise self._missing("output_shapes")

    def bind(self, data_shapes: Any, label_shapes: Any = None, **kwargs: Any) -> None:
        """Allocates what the shapes need."""
        raise self._missing("bind")

    def init_params(self, initializer: Any = None, *args: Any, **kwargs: Any) -> None:
        """Fills the parameters."""
        raise self._missing("init_params")

    def init_optimizer(self, *args: Any, **kwargs: Any) -> None:
        """Sets the optimizer."""
        raise self._missing("init_optimizer")

    def get_params(self) -> tuple[dict[str, NDArray], dict[str, NDArray]]:
        """The parameters and auxiliary states."""
        raise self._missing("get_params")

    def set_params(self, arg_params: dict, aux_params: dict, **kwargs: Any) -> None:
        """Sets the parameters and auxiliary states."""
        raise self._missing("set_params")

    def forward(self, data_batch: DataBatch, is_train: bool | None = None) -> None:
        """A forward pass."""
        raise self._missing("forward")

    def backward(self, out_grads: Any = None) -> None:
        """A backward pass."""
        raise self._missing("backward")

    def update(self) -> None:
        """An optimizer step."""
        raise self._missing("update")

    def get_outputs(self, merge_multi_context: bool = True) -> list[NDArray]:
        """The outputs of the last forward pass."""
        raise self._missing("get_outputs")

    def get_input_grads(self, merge_multi_context: bool = True) -> list[NDArray]:
        """The data's gradients."""
        raise self._missing("get_input_grads")

    def update_metric(self, eval_metric: Any, labels: Any, pad: int = 0) -> None:
        """Accumulates a metric over the last outputs."""
        raise self._missing("update_metric")

    def install_monitor(self, mon: Any) -> None:
        """Has a monitor watch the module's executors."""
        raise self._missing("install_monitor")

    def get_states(self, merge_multi_context: bool = True) -> list[NDArray]:
        """The states of a stateful graph (none here: states are bound as inputs)."""
        return []

    def set_states(self, states: Any = None, value: Any = None) -> None:
        """Sets the states of a stateful graph (none here)."""
        if states or value is not None:
            raise MXNetError(f"{type(self).__name__} has no states to set")

    # ---- what every module offers on top -------------------------------------------------------

    def prepare(self, data_batch: DataBatch, sparse_row_id_fn: Any = None) -> None:
        """Readies the module for a batch (with dense storage, nothing to do)."""

    def iter_predict(
        self, eval_data: DataIter, num_batch: int | None = None, reset: bool = True, **kwargs: Any
    ) -> Any:
        """Yields ``(outputs, batch number, batch)`` over ``eval_data``, padding dropped."""
        if reset:
            eval_data.reset()
        for nbatch, batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                return
            self.forward(batch, is_train=False)
            keep = batch.data[0].shape[0] - batch.pad
            yield [o[0:keep] for o in self.get_outputs()], nbatch, batch

    def save_params(self, fname: str) -> None:
        """Writes the parameters as MXNet does (``arg:NAME``, ``aux:NAME``)."""
        arg, aux = self.get_params()
        params = {f"arg:{k}": v for k, v in arg.items()}
        params.update({f"aux:{k}": v for k, v in aux.items()})
        nd_save(fname, params)

    def load_params(self, fname: str) -> None:
        """Reads parameters ``save_params`` (or MXNet) wrote."""
        loaded = nd_load(fname)
        if not isinstance(loaded, dict):
            raise MXNetError(f"load_params: {fname} holds arrays without names")
        arg, aux = {}, {}
        for key, value in loaded.items():
            kind, _, name = key.partition(":")
            if kind not in ("arg", "aux"):
                raise MXNetError(f"load_params: {key!r} in {fname} is neither arg: nor aux:")
            (arg if kind == "arg" else aux)[name] = value
        self.set_params(arg, aux)

    def fit(
        self,
        train_data: DataIter,
        eval_data: DataIter | None = None,
        eval_metric: Any = "acc",
        epoch_end_callback: Any = None,
        batch_end_callback: Any = None,
        kvstore: Any = "local",
        optimizer: Any = "sgd",
        optimizer_params: Any = (("learning_rate", 0.01),),
        initializer: init_mod.Initializer | None = None,
        arg_params: dict | None = None,
        aux_params: dict | None = None,
        allow_missing: bool = False,
        force_rebind: bool = False,
        force_init: bool = False,
        begin_epoch: int = 0,
        num_epoch: int | None = None,
        validation_metric: Any = None,
        monitor: Any = None,
    ) -> None:
        """Trains for ``num_epoch`` epochs over ``train_data``, logging the metric per epoch
        (and on ``eval_data`` when given)."""
        if num_epoch is None:
            raise ValueError("fit: num_epoch is required")
        self.bind(
            train_data.provide_data,
            train_data.provide_label,
            for_training=True,
            force_rebind=force_rebind,
        )
        self.init_params(
            initializer or init_mod.Uniform(0.01),
            arg_params,
            aux_params,
            allow_missing=allow_missing,
            force_init=force_init,
        )
        self.init_optimizer(kvstore=kvstore, optimizer=optimizer, optimizer_params=optimizer_params)
        if monitor is not None:
            self.install_monitor(monitor)
        metric = metric_mod.create(eval_metric)
        for epoch in range(begin_epoch, num_epoch):
            tic = time.time()
            metric.reset()
            train_data.reset()
            for nbatch, batch in enumerate(train_data):
                if monitor is not None:
                    monitor.tic()
                self.forward_backward(batch)
                self.update()
                if monitor is not None:
                    monitor.toc_print()
                self.update_metric(metric, batch.label)
                for cb in _callbacks(batch_end_callback):
                    cb(model.BatchEndParam(epoch, nbatch, metric, None))
            for name, value in metric.get_name_value():
                self.logger.info("Epoch[%d] Train-%s=%f", epoch, name, value)
            self.logger.info("Epoch[%d] Time cost=%.3f", epoch, time.time() - tic)
            arg, aux = self.get_params()
            for cb in _callbacks(epoch_end_callback):
                cb(epoch, self.symbol, arg, aux)
            if eval_data is not None:
                for name, value in self.score(eval_data, validation_metric or eval_metric):
                    self.logger.info("Epoch[%d] Validation-%s=%f", epoch, name, value)
        if self._kvstore is not None and self._kvstore.type == "dist_async":
            # Each rank's last pull saw what rank 0 had applied then; after the barrier every
            # rank's pushes are in rank 0's weights, and every rank takes them.
            self._kvstore.barrier()
            for n in self.param_names:
                self._kvstore.pull(n, out=self._executor.arg_dict[n])

    def forward_backward(self, data_batch: DataBatch) -> None:
        """A training forward pass and its backward pass."""
        self.forward(data_batch, is_train=True)
        self.backward()

    def score(
        self,
        eval_data: DataIter,
        eval_metric: Any,
        num_batch: int | None = None,
        reset: bool = True,
    ) -> list[tuple[str, float]]:
        """The metric over ``eval_data`` (inference mode)."""
        metric = metric_mod.create(eval_metric)
        if reset:
            eval_data.reset()
        for nbatch, batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                break
            self.forward(batch, is_train=False)
            self.update_metric(metric, batch.label, pad=batch.pad)
        return metric.get_name_value()

    def predict(
        self,
        eval_data: DataIter,
        num_batch: int | None = None,
        merge_batches: bool = True,
        reset: bool = True,
    ) -> Any:
        """The outputs over ``eval_data``, padding dropped, batches joined."""
        if reset:
            eval_data.reset()
        outs: list[list[NDArray]] = []
        for nbatch, batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                break
            self.forward(batch, is_train=False)
            keep = batch.data[0].shape[0] - batch.pad
            outs.append([o[0:keep].copy() for o in self.get_outputs()])
        if not merge_batches:
            return outs
        merged = [concatenate([b[i] for b in outs]) for i in range(len(outs[0]))] if outs else []
        return merged[0] if len(merged) == 1 else merged


def _write_whole(fname: str, data: bytes) -> None:
    # A temporary file beside the target, renamed over it: a failed write loses nothing.
    tmp = f"{fname}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, fname)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _callbacks(cb: Any) -> list:
    if cb is None:
        return []
    return list(cb) if isinstance(cb, (list, tuple)) else [cb]


class Module(BaseModule):
    """A symbol bound on one device, its parameters, and an optimizer."""

    def __init__(
        self,
        symbol: Symbol,
        data_names: Sequence[str] = ("data",),
        label_names: Sequence[str] | None = ("softmax_label",),
        logger: Any = logging,
        context: Context | Sequence[Context] | None = None,
        work_load_list: Any = None,
        fixed_param_names: Sequence[str] | None = None,
        state_names: Any = None,
        group2ctxs: Any = None,
        compression_params: Any = None,
    ) -> None:
        if isinstance(context, (list, tuple)):
            if len(context) != 1:
                raise MXNetError(
                    "Module: one context is supported (data parallel training "
                    "across contexts is the Rust DataParallel trainer's)"
                )
            context = context[0]
        self._symbol = symbol
        self.logger = logger
        self.context = context if context is not None else current_context()
        args = symbol.list_arguments()
        self._data_names = list(data_names)
        self._label_names = [n for n in (label_names or []) if n in args]
        for n in self.data_names:
            if n not in args:
                raise MXNetError(f"Module: data {n!r} is not an argument of the symbol ({args})")
        inputs = set(self.data_names) | set(self.label_names)
        self.param_names = [n for n in args if n not in inputs]
        self.aux_names = symbol.list_auxiliary_states()
        self.fixed = set(fixed_param_names or [])
        self.binded = self.params_initialized = self.optimizer_initialized = False
        self.for_training = False
        self._exec: Executor | None = None
        self._arg_params: dict[str, NDArray] = {}
        self._aux_params: dict[str, NDArray] = {}
        self._updater: opt_mod.Updater | None = None
        self._kvstore: kv_mod.KVStore | None = None

    @property
    def symbol(self) -> Symbol:
        """The graph."""
        return self._symbol

    @property
    def data_names(self) -> list[str]:
        """The names of the data inputs."""
        return self._data_names

    @property
    def label_names(self) -> list[str]:
        """The names of the labels (those the graph takes)."""
        return self._label_names

    @property
    def output_names(self) -> list[str]:
        """The names of the outputs."""
        return self._symbol.list_outputs()

    # ---- binding ---------------------------------------------------------------------------

    def bind(
        self,
        data_shapes: Any,
        label_shapes: Any = None,
        for_training: bool = True,
        inputs_need_grad: bool = False,
        force_rebind: bool = False,
        shared_module: Any = None,
        grad_req: str = "write",
    ) -> None:
        """Allocates the executor for these input shapes (parameters keep their values when
        rebinding)."""
        if self.binded and not force_rebind:
            return
        shapes = dict(_names_shapes(data_shapes))
        shapes.update(_names_shapes(label_shapes))
        reqs = {}
        for n in self.symbol.list_arguments():
            trainable = n in self.param_names and n not in self.fixed
            if for_training and (trainable or (inputs_need_grad and n in self.data_names)):
                reqs[n] = grad_req
            else:
                reqs[n] = "null"
        self._exec = self.symbol.simple_bind(self.context, grad_req=reqs, **shapes)
        self.for_training = for_training
        self.binded = True
        if self.params_initialized:
            self._exec.copy_params_from(self._arg_params, self._aux_params)

    @property
    def data_shapes(self) -> list[DataDesc]:
        """The bound data shapes."""
        return [DataDesc(n, self._executor.arg_dict[n].shape) for n in self.data_names]

    @property
    def label_shapes(self) -> list[DataDesc]:
        """The bound label shapes."""
        return [DataDesc(n, self._executor.arg_dict[n].shape) for n in self.label_names]

    @property
    def output_shapes(self) -> list[tuple[str, tuple]]:
        """The outputs' names and shapes."""
        return list(zip(self.symbol.list_outputs(), (o.shape for o in self._executor.outputs)))

    @property
    def _executor(self) -> Executor:
        if self._exec is None:
            raise MXNetError("Module: call bind first")
        return self._exec

    # ---- parameters ------------------------------------------------------------------------

    def init_params(
        self,
        initializer: Any = None,
        arg_params: dict | None = None,
        aux_params: dict | None = None,
        allow_missing: bool = False,
        force_init: bool = False,
        allow_extra: bool = False,
    ) -> None:
        """Fills the parameters: from ``arg_params``/``aux_params`` where given, else with
        ``initializer`` (``Uniform(0.01)`` by default)."""
        if self.params_initialized and not force_init:
            return
        ex = self._executor
        init = initializer if initializer is not None else init_mod.Uniform(0.01)
        # Each parameter is described with its variable's attributes, so that a variable's own
        # ``init`` (its ``__init__`` attribute) wins, as in MXNet.
        attrs = self.symbol.attr_dict()
        for names, bound, given in (
            (self.param_names, ex.arg_dict, arg_params),
            (self.aux_names, ex.aux_dict, aux_params),
        ):
            for n in names:
                if given is not None and n in given:
                    given[n].copyto(bound[n])
                elif given is not None and not allow_missing:
                    raise MXNetError(f"init_params: {n} is missing from the parameters given")
                else:
                    init(init_mod.InitDesc(n, attrs.get(n, {})), bound[n])
            if given is not None and not allow_extra:
                extra = sorted(set(given) - set(names))
                if extra:
                    raise MXNetError(f"init_params: parameters the symbol does not have: {extra}")
        self._arg_params = {n: ex.arg_dict[n] for n in self.param_names}
        self._aux_params = {n: ex.aux_dict[n] for n in self.aux_names}
        self.params_initialized = True

    def get_params(self) -> tuple[dict[str, NDArray], dict[str, NDArray]]:
        """Copies of the parameters and auxiliary states."""
        ex = self._executor
        return (
            {n: ex.arg_dict[n].copy() for n in self.param_names},
            {n: ex.aux_dict[n].copy() for n in self.aux_names},
        )

    def set_params(
        self,
        arg_params: dict,
        aux_params: dict,
        allow_missing: bool = False,
        force_init: bool = True,
        allow_extra: bool = False,
    ) -> None:
        """Sets the parameters from the given dicts."""
        self.init_params(
            None,
            arg_params,
            aux_params,
            allow_missing=allow_missing,
            force_init=force_init,
            allow_extra=allow_extra,
        )

    def save_checkpoint(
        self,
        prefix: str,
        epoch: int,
        save_optimizer_states: bool = False,
        remove_amp_cast: bool = True,
    ) -> None:
        """Writes ``PREFIX-symbol.json`` and ``PREFIX-EPOCH.params``."""
        arg, aux = self.get_params()
        model.save_checkpoint(prefix, epoch, self.symbol, arg, aux)
        if save_optimizer_states:
            self.save_optimizer_states(f"{prefix}-{epoch:04d}.states")

    @staticmethod
    def load(prefix: str, epoch: int, load_optimizer_states: bool = False, **kwargs: Any) -> Module:
        """A module from a checkpoint; its parameters are set when it is bound."""
        sym, arg, aux = model.load_checkpoint(prefix, epoch)
        mod = Module(sym, **kwargs)
        mod._arg_params, mod._aux_params = arg, aux
        mod.params_initialized = True
        if load_optimizer_states:
            mod._preload_opt_states = f"{prefix}-{epoch:04d}.states"
        return mod

    def save_optimizer_states(self, fname: str) -> None:
        """Writes the optimizer's states (pickled, as MXNet's updater does), whole or not at
        all."""
        if self._kvstore is not None:
            self._kvstore.save_optimizer_states(fname)
            return
        if self._updater is None:
            raise MXNetError("save_optimizer_states: call init_optimizer first")
        _write_whole(fname, self._updater.get_states())

    def load_optimizer_states(self, fname: str) -> None:
        """Reads the optimizer's states ``save_optimizer_states`` wrote."""
        if self._kvstore is not None:
            self._kvstore.load_optimizer_states(fname)
            return
        if self._updater is None:
            raise MXNetError("load_optimizer_states: call init_optimizer first")
        with open(fname, "rb") as f:
            self._updater.set_states(f.read())

    def borrow_optimizer(self, shared_module: Module) -> None:
        """Uses ``shared_module``'s optimizer (and store), which must be initialized."""
        if not shared_module.optimizer_initialized:
            raise MXNetError("borrow_optimizer: the shared module has no optimizer yet")
        self._updater, self._kvstore = shared_module._updater, shared_module._kvstore
        self.optimizer_initialized = True

    def reshape(self, data_shapes: Any, label_shapes: Any = None) -> None:
        """Binds anew for other input shapes, keeping the parameters."""
        feeds = dict(_names_shapes(data_shapes))
        feeds.update(_names_shapes(label_shapes))
        self._exec = self._executor.reshape(**feeds)

    # ---- training --------------------------------------------------------------------------

    def init_optimizer(
        self,
        kvstore: Any = "local",
        optimizer: Any = "sgd",
        optimizer_params: Any = (("learning_rate", 0.01),),
        force_init: bool = False,
    ) -> None:
        """Sets the optimizer (a name and its parameters, or an ``Optimizer``). With a
        ``KVStore`` or the name of one across processes (``dist_sync``), the store sums the
        gradients and runs the optimizer, as MXNet's Module does: every rank starts from rank
        0's parameters and applies the same update to the same sum. With ``dist_async`` rank 0
        applies each rank's gradient as it arrives (scaled by that rank's batch). On one device
        a local store has nothing to sum, so the update runs here."""
        if self.optimizer_initialized and not force_init:
            return
        kv = None
        if isinstance(kvstore, kv_mod.KVStore):
            kv = kvstore
        elif isinstance(kvstore, str) and kvstore.startswith("dist"):
            kv = kv_mod.create(kvstore)
        params = dict(optimizer_params)
        if isinstance(optimizer, str):
            batch = self._executor.arg_dict[self.data_names[0]].shape[0]
            if kv is not None and kv.type.startswith("dist") and "sync" in kv.type:
                batch *= kv.num_workers
            params.setdefault("rescale_grad", 1.0 / batch)
            params["param_idx2name"] = dict(enumerate(self.param_names))
        opt = opt_mod.create(optimizer, **params)
        self._updater = opt_mod.get_updater(opt)
        self._kvstore = kv
        if kv is not None:
            args = self._executor.arg_dict
            for n in self.param_names:
                kv.init(n, args[n])
                kv.pull(n, out=args[n])
            kv.set_updater(self._updater)
        self.optimizer_initialized = True
        preload = getattr(self, "_preload_opt_states", None)
        if preload is not None:
            self.load_optimizer_states(preload)
            self._preload_opt_states = None

    def install_monitor(self, mon: Any) -> None:
        """Has ``mon`` (an ``mx.monitor.Monitor``) watch the bound executor."""
        mon.install(self._executor)

    def forward(self, data_batch: DataBatch, is_train: bool | None = None) -> None:
        """Copies the batch in and pushes the forward pass (training mode by default when
        bound for training)."""
        ex = self._executor
        train = self.for_training if is_train is None else is_train
        feeds: dict[str, Any] = dict(zip(self.data_names, data_batch.data))
        if data_batch.label is not None and self.label_names:
            feeds.update(zip(self.label_names, data_batch.label))
        first = feeds[self.data_names[0]]
        if first.shape != ex.arg_dict[self.data_names[0]].shape:
            self._exec = ex.reshape(**{k: v.shape for k, v in feeds.items()})
            ex = self._exec
        ex.forward(is_train=train, **feeds)

    def backward(self, out_grads: Any = None) -> None:
        """Pushes the backward pass."""
        self._executor.backward(out_grads)

    def update(self) -> None:
        """One optimizer step of every trainable parameter from its gradient (through the
        store, when there is one: every gradient pushed, then every parameter pulled, the
        first layers' first)."""
        if self._updater is None:
            raise MXNetError("Module: call init_optimizer first")
        ex = self._executor
        trained = [(i, n) for i, n in enumerate(self.param_names) if n in ex.grad_dict]
        if self._kvstore is None:
            for i, n in trained:
                self._updater(i, ex.grad_dict[n], ex.arg_dict[n])
            return
        for i, n in reversed(trained):
            self._kvstore.push(n, ex.grad_dict[n], priority=-i)
        for i, n in trained:
            self._kvstore.pull(n, out=ex.arg_dict[n], priority=-i)

    def get_outputs(self, merge_multi_context: bool = True) -> list[NDArray]:
        """The outputs of the last forward pass."""
        return self._executor.outputs

    def get_input_grads(self, merge_multi_context: bool = True) -> list[NDArray]:
        """The data's gradients (bound with ``inputs_need_grad``)."""
        return [self._executor.grad_dict[n] for n in self.data_names]

    def update_metric(
        self, eval_metric: metric_mod.EvalMetric, labels: list[NDArray], pad: int = 0
    ) -> None:
        """Accumulates the metric over the last outputs (padding excluded)."""
        outs = self.get_outputs()
        if pad:
            keep = outs[0].shape[0] - pad
            outs = [o[0:keep] for o in outs]
            labels = [y[0:keep] for y in labels]
        eval_metric.update(labels, outs)
