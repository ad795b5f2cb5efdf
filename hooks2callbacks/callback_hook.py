"""Keras callbacks inside TF1 training loops: `CallbackHook`, a `SessionRunHook` that runs them.

The other direction of `HookCallback`: a job that still trains under
`tf.compat.v1.train.MonitoredTrainingSession` (or `MonitoredSession`, or a
`Session` loop that calls hooks) runs Keras callbacks, Keras 3's or tf_keras's,
as `fit` would call them. Each hook method calls the callbacks through their
own package's `CallbackList`, in an eager context of their own (Keras 3's
callbacks run TF2 ops, which a finalized graph refuses):

    begin()                       resolve `logs` (tensors or names), the global step, the
                                  `learning_rate` variable and `variables`; build the ops the
                                  stand-in model runs (assigns, a Saver), before the graph is
                                  finalized
    after_create_session(s)       step = s.run(global step); CallbackList(callbacks,
                                  model=stand-in, epochs, steps): set_model, set_params;
                                  on_train_begin (on_test_begin in mode="eval")
    before_run(ctx)               [first batch of an epoch] on_epoch_begin(epoch);
                                  on_train_batch_begin(batch); fetch the `logs` tensors and the
                                  step's read of the global step, in the step's own run
    after_run(ctx, values)        batch logs = the epoch's running means (as Keras's metrics);
                                  on_train_batch_end(batch, logs)
                                  if model.stop_training: on_epoch_end(epoch, logs); stop
                                  elif the epoch's last batch: on_epoch_end(epoch, logs +
                                  val_* of validation(session)); stop if model.stop_training or
                                  `epochs` are done
    end(s)                        [an epoch still open] on_epoch_end(epoch, its logs);
                                  on_train_end(last epoch logs) (on_test_end in mode="eval")

    epoch = global step // steps_per_epoch, batch = global step % steps_per_epoch.

A callback that raises ends the run as a raising hook does under MonitoredSession:
the exception propagates (with a note naming the callback and its method), `end()` is
not called, and so `on_train_end` is not, as under `fit`, which has no try/finally.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import tensorflow as tf

from hooks2callbacks import _seams

__all__ = ["CallbackHook"]

_MODES = ("train", "eval")
_KERAS3_WEIGHTS_SUFFIX = ".weights.h5"
_RATE_HELP = (
    "Pass CallbackHook(..., learning_rate=<the TF1 variable the optimizer reads, or its name>) for "
    "model.optimizer.learning_rate to read and set it."
)


def _flavour(callbacks: Sequence[Any]) -> Any:
    """The Keras package whose `CallbackList` calls `callbacks`: keras (3) or tf_keras, never both."""
    import keras  # pylint: disable=import-outside-toplevel

    packages = set()
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.Callback):
            packages.add("keras")
            continue
        tf_keras = sys.modules.get("tf_keras")
        if tf_keras is not None and isinstance(callback, tf_keras.callbacks.Callback):
            if type(callback).__module__.endswith("callbacks_v1"):
                # tf_keras's TensorBoard picks its TF1 class when made while a graph is the default.
                raise TypeError(
                    f"CallbackHook(callbacks=...) received tf_keras's TF1 {type(callback).__name__} "
                    f"({type(callback).__module__}), which tf_keras makes when the callback is constructed "
                    "while a TF1 graph is the default; it needs a Keras model's session. Construct it "
                    "outside `with tf.Graph().as_default():`, where tf_keras makes its TF2 one."
                )
            packages.add("tf_keras")
            continue
        raise TypeError(
            f"CallbackHook(callbacks=...) received {callback!r} of type {type(callback).__name__}, which is "
            "not a Keras callback. Pass instances of keras.callbacks.Callback (Keras 3) or "
            "tf_keras.callbacks.Callback subclasses."
        )
    if len(packages) > 1:
        raise TypeError(
            "CallbackHook(callbacks=...) received Keras 3 and tf_keras callbacks together; each package's "
            "CallbackList calls only its own. Use two CallbackHooks, one per package."
        )
    if packages == {"tf_keras"}:
        return sys.modules["tf_keras"]
    return keras


class _Numeric:
    """A number that Keras's `backend.get_value`/`convert_to_numpy` and `float()` read."""

    # `tf.is_tensor` honours it: tf_keras's `backend.get_value` then returns `numpy()`, a number,
    # not this live object (which `logs["lr"]` would otherwise hold, and History keep).
    is_tensor_like = True

    def __init__(self, read: Callable[[], Any], dtype: tf.DType) -> None:
        self._read = read
        self.dtype = dtype

    def numpy(self) -> Any:
        return self._read()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self._read(), dtype=dtype)

    def __float__(self) -> float:
        return float(self._read())

    def __int__(self) -> int:
        return int(self._read())

    def __repr__(self) -> str:
        return repr(self._read())


class _Rate(_Numeric):
    """The learning rate as Keras callbacks hold it: `assign` (tf_keras's `set_value`) writes the TF1 variable."""

    def __init__(self, read: Callable[[], Any], write: Callable[[Any], None], dtype: tf.DType) -> None:
        super().__init__(read, dtype)
        self.assign = write


class _Optimizer:
    """`model.optimizer` of the stand-in: the step count and, where a variable is named, the rate."""

    def __init__(self, hook: CallbackHook) -> None:
        self._hook = hook
        # Eager, so that TensorBoard can use it as a summary step; set to the global step when read.
        self._iterations = tf.Variable(np.int64(0), trainable=False, name="iterations")

    @property
    def iterations(self) -> Any:
        # Assigned on read only: an eager assign every step would cost more than the rest of a step's work.
        self._iterations.assign(self._hook._step, read_value=False)  # pylint: disable=protected-access
        return self._iterations

    @property
    def learning_rate(self) -> _Rate:
        return self._hook._rate("optimizer.learning_rate")  # pylint: disable=protected-access

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._hook._rate("optimizer.learning_rate").assign(value)  # pylint: disable=protected-access

    # tf_keras's callbacks read and set `lr`.
    lr = learning_rate


class TF1Model:
    """What `callback.model` is under `CallbackHook`: the TF1 graph's model, as far as callbacks need one.

    `stop_training = True` requests a stop (after the epoch's `on_epoch_end`, as
    in `fit`). `optimizer.learning_rate` reads and sets the TF1 variable passed
    as `CallbackHook(learning_rate=...)`; `optimizer.iterations` is the global
    step. `get_weights`, `set_weights` and `save_weights` work on
    `CallbackHook(variables=...)` (the trainable variables by default) through
    ops built in `begin()`. What needs a Keras model (`save`, `layers`, ...)
    raises an error naming the callback and what to do instead.
    """

    def __init__(self, hook: CallbackHook) -> None:
        self._hook = hook
        self.stop_training = False
        self.stop_evaluating = False
        self.optimizer = _Optimizer(hook)
        # tf_keras's TensorBoard writes its batch summaries at these counters.
        self._train_counter = tf.Variable(np.int64(0), trainable=False, name="train_counter")
        self._test_counter = tf.Variable(np.int64(0), trainable=False, name="test_counter")
        self.distribute_strategy = tf.distribute.get_strategy()
        self.metrics: list[Any] = []
        self.history: Any = None
        # TensorBoard(write_graph=True) writes a Keras model's graph and train function; there are none.
        self.train_function = None
        self.train_tf_function = None
        self._is_graph_network = False

    def get_weights(self) -> list[np.ndarray]:
        """The values of the hook's variables, in their order."""
        hook = self._hook
        return list(hook._session_run(hook._variables))  # pylint: disable=protected-access

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Assigns `weights` to the hook's variables, in their order.

        Raises:
            ValueError: Their number or shapes differ from the variables'.
        """
        self._hook._set_weights(weights)  # pylint: disable=protected-access

    def save_weights(self, filepath: str, overwrite: bool = True, **kwargs: Any) -> None:
        """Writes a TF1 (name-based) checkpoint of the graph's variables at `filepath`.

        Keras 3's `ModelCheckpoint(save_weights_only=True)` insists on a
        `.weights.h5` name: the suffix is dropped, and the checkpoint's prefix is
        the rest (`model-01.weights.h5` writes `model-01.index` and its data),
        which `restore_tf1_checkpoint` and `tf.train.load_variable` read.
        """
        del overwrite, kwargs  # a TF1 Saver always overwrites
        self._hook._save(filepath)  # pylint: disable=protected-access

    def save(self, filepath: Any = None, *args: Any, **kwargs: Any) -> None:
        """Refused: the TF1 graph is no Keras model to save whole.

        Raises:
            NotImplementedError: Always, naming the callback and the way out.
        """
        raise NotImplementedError(
            f"{_caller(self._hook)} called model.save({filepath!r}) under CallbackHook, but a TF1 graph is not "
            "a Keras model that can be saved whole. Save weights instead (ModelCheckpoint(..., "
            "save_weights_only=True) writes a TF1 checkpoint that restore_tf1_checkpoint loads), or keep "
            "TF1's CheckpointSaverHook for the full checkpoint."
        )

    def load_weights(self, filepath: Any, *args: Any, **kwargs: Any) -> None:
        """Refused: a TF1 loop restores its variables when the session is made.

        Raises:
            NotImplementedError: Always, naming the callback and the way out.
        """
        raise NotImplementedError(
            f"{_caller(self._hook)} called model.load_weights({filepath!r}) under CallbackHook, but a TF1 "
            "session restores its variables when it is made. Pass checkpoint_dir= to "
            "MonitoredTrainingSession (or a Scaffold with an init_fn) instead."
        )

    def __getattr__(self, name: str) -> Any:
        # Only reached for what the stand-in does not have.
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{_caller(self._hook)} read model.{name} under CallbackHook, which stands in for the TF1 graph "
            "and has only stop_training, optimizer (learning_rate, iterations), get_weights, set_weights, "
            "save_weights, metrics and history. Use that callback in the Keras job, or write a callback "
            "that needs only these."
        )


def _caller(hook: CallbackHook) -> str:
    """The callback (class name) whose method is on the stack, for messages; else 'A callback'."""
    frame = sys._getframe(1)  # pylint: disable=protected-access
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and any(owner is c for c in hook.callbacks):
            return f"{type(owner).__name__}.{frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "A callback"


def _raising_callback(error: BaseException, callbacks: Sequence[Any]) -> str | None:
    """The callback and method (`EarlyStopping.on_epoch_end`) deepest in `error`'s traceback."""
    found = None
    tb = error.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if owner is not None and any(owner is c for c in callbacks):
            found = f"{type(owner).__name__}.{tb.tb_frame.f_code.co_name}"
        tb = tb.tb_next
    return found


class _RunningMeans:
    """The epoch-to-date means Keras's `Mean` metrics log: float32 totals and count, reset per epoch.

    Each batch weighs its size, as Keras weighs the loss (`sample_weight=batch_size`) and counts a
    mean metric's samples; without sizes, every batch weighs 1.
    """

    def __init__(self) -> None:
        self.totals: dict[str, np.float32] = {}
        self.count = np.float32(0)

    def reset(self) -> None:
        self.totals = {}
        self.count = np.float32(0)

    def add(self, values: Mapping[str, Any], weight: Any = 1) -> dict[str, float]:
        weight = np.float32(weight)
        self.count = np.float32(self.count + weight)
        means = {}
        for key, value in values.items():
            total = np.float32(self.totals.get(key, np.float32(0)) + np.float32(value) * weight)
            self.totals[key] = total
            means[key] = float(total / self.count)
        return means


class CallbackHook(_seams.SessionRunHook):
    """Runs Keras callbacks (Keras 3's or tf_keras's) in a TF1 training or evaluation loop.

    Example:

        hook = CallbackHook([keras.callbacks.CSVLogger("log.csv")], logs={"loss": loss},
                            steps_per_epoch=100)
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
            while not session.should_stop():
                session.run(train_op)

    Each step's `logs` are fetched in the step's own `session.run`. Callbacks see
    in batch logs the epoch's running mean of each (what Keras logs for the loss
    and mean metrics; each batch weighs its `batch_size`), and the same in epoch logs; keys
    in `aggregates` hold values already aggregated (TF1's `tf.compat.v1.metrics`
    values, aggregated since the session began) and are passed as fetched.

    Args:
        callbacks: Keras callbacks, all of Keras 3 or all of tf_keras.
        logs: Log key to a tensor, or a tensor's name (`"loss"` means `"loss:0"`),
            whose value each step gives.
        steps_per_epoch: Global steps per epoch: an epoch ends after the step
            whose global step count is a multiple of it, and at the loop's end.
        epochs: `params["epochs"]`; given, the hook requests a stop after that
            many epochs (counted from global step 0). Defaults to None.
        mode: `"train"` (the `on_train_*` and epoch events) or `"eval"` (the
            `on_test_*` events, for an evaluation loop). Defaults to `"train"`.
        learning_rate: The TF1 variable (or its name) that `optimizer.learning_rate`
            reads and sets (`ReduceLROnPlateau`, `LearningRateScheduler`).
            Defaults to None: reading the rate is an error naming this argument.
        variables: The variables of `get_weights`/`set_weights`/`save_weights`, in
            order. Defaults to the graph's trainable variables at `begin()`.
        validation: Called with the session at each epoch's end (train mode); the
            dict it returns (`{"loss": ..., "accuracy": ...}`, as `evaluate`
            returns) is added to the epoch logs as `val_loss`, `val_accuracy`.
        aggregates: Keys of `logs` passed to callbacks as fetched, not averaged.
        batch_size: A tensor (or its name) holding each step's number of samples,
            such as `tf.shape(x)[0]`, fetched with the logs: the running means
            weigh each batch by it, as Keras's do. Defaults to None: every batch
            weighs the same, which is Keras's mean for batches of equal size.

    Raises:
        TypeError: A callback is not a Keras callback, or the callbacks mix Keras 3
            and tf_keras, or `logs`/`validation` has the wrong type.
        ValueError: `steps_per_epoch`, `epochs` or `mode` is out of range, or
            `aggregates` names a key not in `logs`.
    """

    def __init__(
        self,
        callbacks: Sequence[Any],
        logs: Mapping[str, Any] | None = None,
        steps_per_epoch: int = 1,
        epochs: int | None = None,
        mode: str = "train",
        learning_rate: Any = None,
        variables: Sequence[Any] | None = None,
        validation: Callable[[Any], Mapping[str, Any]] | None = None,
        aggregates: Sequence[str] = (),
        batch_size: Any = None,
    ) -> None:
        self.callbacks = list(callbacks)
        self._keras = _flavour(self.callbacks)
        logs = dict(logs or {})
        if any(not isinstance(key, str) for key in logs):
            raise TypeError(f"CallbackHook(logs=...) keys must be log names (str); received {list(logs)!r}.")
        if not isinstance(steps_per_epoch, int) or isinstance(steps_per_epoch, bool) or steps_per_epoch < 1:
            raise ValueError(f"CallbackHook(steps_per_epoch=...) must be a positive int; received {steps_per_epoch!r}.")
        if epochs is not None and (not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1):
            raise ValueError(f"CallbackHook(epochs=...) must be a positive int or None; received {epochs!r}.")
        if mode not in _MODES:
            raise ValueError(f"CallbackHook(mode=...) must be one of {_MODES}; received {mode!r}.")
        if validation is not None and not callable(validation):
            raise TypeError(
                f"CallbackHook(validation=...) must be a function of the session returning a dict of "
                f"evaluation results; received {validation!r}."
            )
        unknown = sorted(set(aggregates) - set(logs))
        if unknown:
            raise ValueError(
                f"CallbackHook(aggregates=...) names {unknown}, which are not keys of logs {sorted(logs)}."
            )
        self._log_specs = logs
        self._aggregates = frozenset(aggregates)
        self._batch_size_spec = batch_size
        self.steps_per_epoch = steps_per_epoch
        self.epochs = epochs
        self.mode = mode
        self._rate_spec = learning_rate
        self._variable_specs = None if variables is None else list(variables)
        self._validation = validation
        # Its counters are eager variables: made outside whatever graph is the default here.
        with self._eager():
            self.model = TF1Model(self)
        # The callback that read the rate when none was named, for the note on the error that follows.
        self._missing_rate: str | None = None
        # The run's state, set again at each run's begin() and after_create_session().
        self._started = False
        self._step = 0
        self._epoch_open = False
        self._open_epoch = 0

    # -- begin(): everything that adds to the graph -------------------------------------------------

    def begin(self) -> None:
        """Resolves the tensors and variables and builds the stand-in model's ops."""
        graph = tf.compat.v1.get_default_graph()
        self._graph = graph
        self._started = False
        self._keys = list(self._log_specs)
        # A flat list: Session.run's fetch mappers cost per level of nesting, at every step.
        fetches = [self._element(graph, spec, f"logs[{key!r}]") for key, spec in self._log_specs.items()]
        # The batch size, where given, comes after the logs, and the step's read last.
        self._weighted = self._batch_size_spec is not None
        if self._weighted:
            fetches.append(self._element(graph, self._batch_size_spec, "batch_size"))
        self._global_step = tf.compat.v1.train.get_global_step(graph)
        if self._global_step is not None:
            # What the stock hooks fetch: the step's value before the train op increments it; it comes last.
            fetches.append(_seams.training_util._get_or_create_global_step_read(graph))  # pylint: disable=protected-access
        elif self.mode == "train":
            raise ValueError(
                "CallbackHook.begin found no global step in the graph; epochs are counted in global steps. "
                "Create one with tf.compat.v1.train.get_or_create_global_step() and pass it to "
                "optimizer.minimize(..., global_step=...)."
            )
        self._run_args = _seams.SessionRunArgs(fetches)
        specs = self._variable_specs
        if specs is None:
            specs = tf.compat.v1.trainable_variables()
        self._variables = [self._variable(graph, spec, "variables") for spec in specs]
        self._weight_inputs = [
            tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape, name="callback_hook_weight") for v in self._variables
        ]
        self._assign_weights = tf.group(
            *[v.assign(p) for v, p in zip(self._variables, self._weight_inputs, strict=True)]
        )
        self._rate_variable = None
        if self._rate_spec is not None:
            rate = self._variable(graph, self._rate_spec, "learning_rate")
            self._rate_variable = rate
            self._rate_input = tf.compat.v1.placeholder(rate.dtype.base_dtype, [], name="callback_hook_rate")
            self._assign_rate = rate.assign(self._rate_input)
        # A Saver of no variables is an error; save_weights then says there is nothing to save.
        saveable = tf.compat.v1.global_variables() or tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS
        )
        self._saver = tf.compat.v1.train.Saver(max_to_keep=None, save_relative_paths=True) if saveable else None

    def _element(self, graph: tf.Graph, spec: Any, what: str) -> Any:
        try:
            if isinstance(spec, str) and ":" not in spec:
                spec = f"{spec}:0"
            return graph.as_graph_element(spec)
        except (KeyError, ValueError, TypeError) as error:
            raise ValueError(
                f"CallbackHook.begin cannot fetch {what} = {spec!r}: {error}. Pass a tensor of this graph or "
                "its name ('loss' or 'loss:0')."
            ) from error

    def _variable(self, graph: tf.Graph, spec: Any, what: str) -> Any:
        if isinstance(spec, str):
            name = spec if ":" in spec else f"{spec}:0"
            found = [v for v in tf.compat.v1.global_variables() if v.name == name]
            if not found:
                names = sorted(v.op.name for v in tf.compat.v1.global_variables())
                raise ValueError(
                    f"CallbackHook(..., {what}=...) names {spec!r}, which is not a variable of the graph; its "
                    f"global variables are {names}."
                )
            return found[0]
        if not isinstance(spec, tf.Variable) or spec.graph is not graph:
            raise TypeError(
                f"CallbackHook(..., {what}=...) must hold TF1 variables of the graph the loop runs (or their "
                f"names); received {spec!r}."
            )
        return spec

    # -- the session's side -------------------------------------------------------------------------

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Reads the global step and starts the run: `set_model`, `set_params`, `on_train_begin`.

        MonitoredSession calls it again when it recreates a session after an
        `AbortedError` or `UnavailableError` (its recoverable session): the run
        goes on, from the restored global step, without a second `on_train_begin`.
        """
        self._session = session
        self._step = 0 if self._global_step is None else int(session.run(self._global_step))
        if self._started:
            if self._epoch_open and self._step // self.steps_per_epoch != self._open_epoch:
                # Restored into another epoch: the open one is dropped (it has no end in TF1 either),
                # and the restored step's epoch begins afresh at the next step.
                self._epoch_open = False
            return
        self._started = True
        self._means = _RunningMeans()
        self._epoch_open = False
        self._epoch_logs: dict[str, Any] | None = None
        self._batch = 0
        self._ended = False
        model = self.model
        model.stop_training = False
        model.stop_evaluating = False
        with self._calling("set_model/set_params"):
            self._list = self._keras.callbacks.CallbackList(
                self.callbacks,
                add_history=False,
                add_progbar=False,
                model=model,
                verbose=0,
                # evaluate() gives its callbacks epochs=1.
                epochs=self.epochs if self.mode == "train" or self.epochs is not None else 1,
                steps=self.steps_per_epoch,
            )
        self._sync_counters()
        if self.mode == "train":
            with self._calling("on_train_begin"):
                self._list.on_train_begin()
        else:
            with self._calling("on_test_begin"):
                self._list.on_test_begin()

    def before_run(self, run_context: Any) -> Any:
        """Calls `on_epoch_begin` at an epoch's first batch, then the batch's begin; fetches the logs."""
        if self.mode == "train":
            if not self._epoch_open:
                self._means.reset()
                self._epoch_open = True
                self._open_epoch = self._step // self.steps_per_epoch
                with self._calling("on_epoch_begin"):
                    self._list.on_epoch_begin(self._step // self.steps_per_epoch)
            self._batch = self._step % self.steps_per_epoch
            with self._calling("on_train_batch_begin"):
                self._list.on_train_batch_begin(self._batch)
        else:
            with self._calling("on_test_batch_begin"):
                self._list.on_test_batch_begin(self._batch)
        return self._run_args

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Calls the batch's end with the running means, and the epoch's end at its last batch."""
        results = run_values.results
        fetched = dict(zip(self._keys, results, strict=False))
        logs: dict[str, Any] = self._means.add(
            {k: v for k, v in fetched.items() if k not in self._aggregates} if self._aggregates else fetched,
            results[len(self._keys)] if self._weighted else 1,
        )
        logs.update({k: _python(fetched[k]) for k in self._aggregates})
        model = self.model
        if self.mode == "eval":
            self._epoch_logs = dict(logs)
            with self._calling("on_test_batch_end"):
                self._list.on_test_batch_end(self._batch, logs)
            self._batch += 1
            if model.stop_evaluating:
                run_context.request_stop()
            return
        self._step = int(results[-1]) + 1
        self._sync_counters()
        with self._calling("on_train_batch_end"):
            self._list.on_train_batch_end(self._batch, logs)
        if model.stop_training or self._step % self.steps_per_epoch == 0:
            self._end_epoch(dict(logs), run_context.session)
            done = self.epochs is not None and self._step >= self.epochs * self.steps_per_epoch
            if model.stop_training or done:
                run_context.request_stop()
        else:
            self._epoch_logs = dict(logs)

    def end(self, session: Any) -> None:
        """Closes an open epoch and calls `on_train_end` (`on_test_end`) once."""
        if self._ended:
            return
        self._ended = True
        if self.mode == "eval":
            with self._calling("on_test_end"):
                self._list.on_test_end(self._epoch_logs or {})
            return
        if self._epoch_open and self._epoch_logs is not None:
            self._end_epoch(dict(self._epoch_logs), session)
        with self._calling("on_train_end"):
            self._list.on_train_end(self._epoch_logs)

    def _end_epoch(self, logs: dict[str, Any], session: Any) -> None:
        if self._validation is not None:
            results = self._validation(session)
            if not isinstance(results, Mapping):
                raise TypeError(
                    f"CallbackHook(validation=...) returned {results!r}; it must return a dict of evaluation "
                    "results such as {'loss': 0.4}, which the epoch logs get as val_loss."
                )
            logs.update({f"val_{key}": _python(value) for key, value in results.items()})
        epoch = (self._step - 1) // self.steps_per_epoch
        with self._calling("on_epoch_end"):
            self._list.on_epoch_end(epoch, logs)
        self._epoch_logs = logs
        self._epoch_open = False

    # -- what the stand-in model runs ---------------------------------------------------------------

    def _sync_counters(self) -> None:
        # tf_keras's TensorBoard holds this counter (from set_model) and reads it itself; Keras 3 reads
        # `optimizer.iterations`, which is set when read.
        if self._keras.__name__ == "tf_keras":
            with self._eager():
                self.model._train_counter.assign(self._step, read_value=False)  # pylint: disable=protected-access

    def _session_run(self, fetches: Any, feed_dict: Any = None) -> Any:
        with self._graph.as_default():
            return self._session.run(fetches, feed_dict)

    def _rate(self, what: str) -> _Rate:
        variable = self._rate_variable
        if variable is None:
            caller = _caller(self)
            self._missing_rate = caller
            raise AttributeError(
                f"{caller} read model.{what} under CallbackHook, but no learning-rate variable was named. {_RATE_HELP}"
            )
        return _Rate(
            lambda: self._session_run(variable),
            lambda value: self._session_run(self._assign_rate, {self._rate_input: np.asarray(value)}),
            variable.dtype.base_dtype,
        )

    def _set_weights(self, weights: Sequence[Any]) -> None:
        weights = list(weights)
        shapes = [tuple(v.shape) for v in self._variables]
        got = [tuple(np.shape(w)) for w in weights]
        if got != shapes:
            raise ValueError(
                f"{_caller(self)} called model.set_weights with shapes {got}; CallbackHook's variables "
                f"({[v.op.name for v in self._variables]}) have shapes {shapes}."
            )
        self._session_run(self._assign_weights, dict(zip(self._weight_inputs, weights, strict=True)))

    def _save(self, filepath: str) -> None:
        path = os.fspath(filepath)
        if path.endswith(_KERAS3_WEIGHTS_SUFFIX):
            path = path[: -len(_KERAS3_WEIGHTS_SUFFIX)]
        if self._saver is None:
            raise ValueError(
                f"{_caller(self)} called model.save_weights({filepath!r}), but the graph has no variables."
            )
        with self._graph.as_default():
            self._saver.save(self._session, path, write_meta_graph=False)

    # -- calling the callbacks ----------------------------------------------------------------------

    @contextmanager
    def _eager(self) -> Iterator[None]:
        with _seams.eager_outside_graph():
            yield

    @contextmanager
    def _calling(self, method: str) -> Iterator[None]:
        self._missing_rate = None
        try:
            with self._eager():
                yield
        except Exception as error:
            name = _raising_callback(error, self.callbacks) or f"A callback's {method}"
            if hasattr(error, "add_note"):  # Python 3.11+; 3.10's traceback names the callback's frame
                error.add_note(f"Raised by {name}, called by CallbackHook ({self.mode} mode) in a TF1 loop.")
                # Keras 3's LearningRateScheduler asks hasattr(optimizer, "learning_rate") and raises its own
                # error, which cannot name the argument that was missing.
                if self._missing_rate is not None:
                    error.add_note(f"{self._missing_rate} found no learning rate: {_RATE_HELP}")

            raise


def _python(value: Any) -> Any:
    """A fetched scalar as the Python number Keras's logs hold; arrays stay arrays."""
    array = np.asarray(value)
    return array.item() if array.ndim == 0 else array
