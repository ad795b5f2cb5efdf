"""Shared test helpers: a small real model, data, a recording hook, and the two
training loops that differential tests compare (TF1's MonitoredSession, Keras fit)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorflow.python.training import training_util

from hooks2callbacks import HookCallback

N_FEATURES = 8
N_HIDDEN = 16
N_CLASSES = 3
LEARNING_RATE = 0.05


def make_data(n: int = 320, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Returns `n` random samples of a 3-class problem."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, N_FEATURES)).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0).astype("int64")
    return x, y


def make_model(
    K: Any = keras,
    steps_per_execution: int = 1,
    metrics: tuple[str, ...] = ("accuracy",),
    layer_names: tuple[str | None, str | None] = (None, None),
    learning_rate: Any = LEARNING_RATE,
) -> keras.Model:
    """Returns a compiled small MLP of the Keras package `K` (keras or tf_keras).

    Layers are named by Keras (`dense_7`, ...) unless `layer_names` names them;
    `("dense", "dense_1")` gives the names TF1's `tf.compat.v1.layers` gave, so
    its variables are `dense/kernel:0` ... in the adapter graph, as in `tf1_mlp`.
    """
    K.utils.set_random_seed(0)
    model = K.Sequential(
        [
            K.Input((N_FEATURES,)),
            K.layers.Dense(N_HIDDEN, activation="relu", name=layer_names[0]),
            K.layers.Dense(N_CLASSES, name=layer_names[1]),
        ]
    )
    model.compile(
        optimizer=K.optimizers.SGD(learning_rate),
        loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=list(metrics),
        steps_per_execution=steps_per_execution,
    )
    return model


def nan_sample_weight(n: int, nan_from: int, nan_to: int | None = None) -> np.ndarray:
    """Sample weights of 1, NaN for samples `nan_from:nan_to`: the loss of their batches is NaN.

    The NaN comes from the weighting, not the inputs: whether NaN inputs survive
    the model depends on the CPU (oneDNN's ReLU maps NaN to 0 on some x86 CPUs),
    whereas a NaN weight makes the weighted loss NaN on every machine.
    """
    weights = np.ones(n, dtype="float32")
    weights[nan_from:nan_to] = np.nan
    return weights


def checkpoint_steps(directory: Any) -> list[int]:
    """The global steps of the checkpoints that the directory's state file lists."""
    state = tf.train.get_checkpoint_state(str(directory))
    return [int(path.rsplit("-", 1)[1]) for path in state.all_model_checkpoint_paths]


def read_scalars(directory: Any) -> dict[str, list[tuple[int, float]]]:
    """The scalar summaries in the event files of `directory`, read from disk: tag -> [(step, value)]."""
    events = EventAccumulator(str(directory))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def iterations(model: Any) -> int:
    """The model's optimizer step count."""
    return int(np.asarray(model.optimizer.iterations))


class FakeClock:
    """Stands in for the `time` module of basic_session_run_hooks; sleeping only advances it."""

    def __init__(self, max_sleeps: int = 20) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.max_sleeps = max_sleeps

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if len(self.sleeps) >= self.max_sleeps:
            raise ClockExhausted(f"slept {len(self.sleeps)} times")
        self.now += seconds


class BeforeStep(tf.compat.v1.train.SessionRunHook):
    """Listed first among the hooks, calls `advance` before each step's other hooks: what `run_tf1`'s
    `before_step` does before each `session.run`, after every hook's `begin`/`after_create_session`.

    (A Keras callback listed before `HookCallback` would run before the hooks' `begin()`
    too, which happens at the first batch.)
    """

    def __init__(self, advance: Callable[[], None]) -> None:
        self.advance = advance

    def before_run(self, run_context: Any) -> None:
        self.advance()


class RecordingListener(tf.compat.v1.train.CheckpointSaverListener):
    """Records the listener calls with their steps; `after_save` returns `stop_after(step)`."""

    def __init__(self, stop_after=lambda step: False) -> None:
        self.calls: list = []
        self.stop_after = stop_after

    def begin(self):
        self.calls.append(("begin",))

    def before_save(self, session, global_step_value):
        self.calls.append(("before_save", int(global_step_value)))

    def after_save(self, session, global_step_value):
        self.calls.append(("after_save", int(global_step_value)))
        return self.stop_after(int(global_step_value))

    def end(self, session, global_step_value):
        self.calls.append(("end", int(global_step_value)))


class ClockExhausted(RuntimeError):
    """Raised by FakeClock.sleep instead of hanging forever."""


def Tick(K: Any, clock: FakeClock, seconds: float) -> Any:
    """A callback of Keras package `K` advancing `clock` by `seconds` at each train batch begin."""

    def tick(batch: int, logs: Any) -> None:
        clock.now += seconds

    return K.callbacks.LambdaCallback(on_train_batch_begin=tick)


def needs_backend(*backends: str, reason: str) -> pytest.MarkDecorator:
    """Skips a test unless Keras 3 runs on one of `backends`."""
    backend = keras.backend.backend()
    return pytest.mark.skipif(backend not in backends, reason=f"not on KERAS_BACKEND={backend}: {reason}")


class OnlyAfterRun:
    """A duck-typed hook with one method: keeps each step's `results`."""

    def __init__(self) -> None:
        self.results: list[Any] = []

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.results.append(run_values.results)


class RecordingHook(tf.compat.v1.train.SessionRunHook):
    """Records every call as `(name, event, detail)` into a shared list.

    Args:
        name: This hook's name in the record.
        calls: The list to append to (shared across hooks to see the order).
        fetches: What `before_run` asks for, or None.
        stop_at: `request_stop()` in `after_run` when the stale global step reaches it.
    """

    def __init__(self, name: str, calls: list, fetches: Any = None, stop_at: int | None = None) -> None:
        self.name = name
        self.calls = calls
        self.fetches = fetches
        self.stop_at = stop_at
        self.results: list[Any] = []
        self.global_step: Any = None

    def begin(self) -> None:
        if tf.compat.v1.train.get_global_step() is None:
            raise RuntimeError("RecordingHook needs a global step in the default graph")
        # As the stock hooks do: in TF1 only this tensor is read before the
        # step's increment (a fetched variable races with it).
        self.global_step = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        self.calls.append((self.name, "begin"))

    def after_create_session(self, session, coord) -> None:
        self.calls.append((self.name, "after_create_session"))

    def before_run(self, run_context):
        self.calls.append((self.name, "before_run", run_context.stop_requested))
        fetches = {"step": self.global_step}
        if self.fetches is not None:
            fetches["user"] = self.fetches
        return tf.compat.v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values) -> None:
        step = int(run_values.results["step"])
        self.results.append(run_values.results.get("user"))
        self.calls.append((self.name, "after_run", step, run_context.stop_requested))
        if self.stop_at is not None and step >= self.stop_at:
            run_context.request_stop()

    def end(self, session) -> None:
        self.calls.append((self.name, "end"))


def run_tf1(hooks: Any, max_steps: int, before_step: Callable[[], None] | None = None) -> None:
    """Trains a graph-mode step counter under a real TF1 MonitoredSession.

    Args:
        hooks: The hooks, or a zero-argument function that builds them in the graph.
        max_steps: The input ends after this many steps.
        before_step: Called before each `session.run` (to advance a fake clock).
    """
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        # TF1 hooks read the step through this tensor; ordering it before the
        # increment makes its value the stale one, as StopAtStepHook assumes.
        read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        with tf.control_dependencies([read]):
            train_op = tf.compat.v1.assign_add(global_step, 1)
        hook_list = hooks() if callable(hooks) else hooks
        with tf.compat.v1.train.MonitoredSession(hooks=hook_list) as session:
            for _ in range(max_steps):
                if session.should_stop():
                    break
                if before_step is not None:
                    before_step()
                session.run(train_op)


BATCH = 32
_X, _Y = make_data()


class _OwnValues(Sequence):
    """Each batch's own loss and metrics, computed when first read: most tests never read them.

    At each batch end the recorder keeps the weights the step started from; the
    first read runs `test_on_batch` of the reference copy on every batch kept.
    """

    def __init__(self, values: Callable[[Any, int], dict]) -> None:
        self._values = values
        self._kept: list[tuple[Any, int]] = []
        self._done: list[dict] = []

    def keep(self, weights: Any, batch: int) -> None:
        self._kept.append((weights, batch))

    def _all(self) -> list[dict]:
        self._done += [self._values(weights, batch) for weights, batch in self._kept[len(self._done) :]]
        return self._done

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._kept)


def Recorder(
    K: Any,
    x: np.ndarray = _X,
    y: np.ndarray = _Y,
    sample_weight: np.ndarray | None = None,
    batch_size: int = BATCH,
    reference: Callable[[Any], Any] | None = make_model,
) -> Any:
    """A callback of Keras package `K` recording, at every batch end, Keras's logs and the batch's own values.

    List it before HookCallback, in a fit/evaluate of `x`, `y` (and `sample_weight`)
    in batches of `batch_size`, unshuffled. It has:

    * `train_logs`, `test_logs`: the logs Keras reported (running means), as dicts;
    * `train_batch`, `test_batch`: each batch's own loss and metrics, computed apart
      from the training step: `test_on_batch` of a copy of the model (`reference(K)`,
      the same architecture and compile) holding the weights the step started
      from, on that batch. This is what TF1 tensors held and what hooks get
      under `HookCallback(values="batch")`. Computed when first read. None with
      `reference=None`.
    """
    ref = None if reference is None else reference(K)  # made now: make_model seeds the RNGs

    def own_values(weights: Any, batch: int) -> dict:
        ref.set_weights(weights)
        part = slice(batch * batch_size, (batch + 1) * batch_size)
        w = None if sample_weight is None else sample_weight[part]
        ref.reset_metrics()  # Keras < 3.15's test_on_batch does not reset them itself
        values = ref.test_on_batch(x[part], y[part], sample_weight=w, return_dict=True)
        # As Keras's logs: a float where the value is a scalar (F1Score's is per class).
        return {
            key: float(value) if np.size(value) == 1 and np.ndim(value) == 0 else np.asarray(value)
            for key, value in values.items()
        }

    train_logs: list[dict] = []
    test_logs: list[dict] = []
    train_batch, test_batch = _OwnValues(own_values), _OwnValues(own_values)
    start: dict[str, Any] = {}

    def train_begin(batch: int, logs: Any) -> None:
        if ref is not None:
            start["weights"] = recorder.model.get_weights()

    def train_end(batch: int, logs: Any) -> None:
        train_logs.append(dict(logs))
        if ref is not None:
            train_batch.keep(start["weights"], batch)

    def test_end(batch: int, logs: Any) -> None:
        test_logs.append(dict(logs))
        if ref is not None:
            test_batch.keep(recorder.model.get_weights(), batch)

    recorder = K.callbacks.LambdaCallback(
        on_train_batch_begin=train_begin, on_train_batch_end=train_end, on_test_batch_end=test_end
    )
    recorder.train_logs, recorder.test_logs = train_logs, test_logs
    recorder.train_batch, recorder.test_batch = train_batch, test_batch
    return recorder


def run_keras(
    K: Any,
    hooks: Any,
    max_steps: int,
    steps_per_epoch: int = 10,
    model: Any = None,
    callbacks: Sequence[Any] = (),
) -> int:
    """Trains for `max_steps` steps under `HookCallback(hooks)`: the Keras side of `run_tf1`.

    Args:
        K: The Keras package (keras or tf_keras).
        hooks: What `HookCallback` gets: hooks or a hooks factory.
        max_steps: Steps to train, a multiple of `steps_per_epoch`: the fit runs
            `max_steps // steps_per_epoch` epochs of `steps_per_epoch` batches of
            `BATCH` samples, so a hook that never stops sees `max_steps` steps, as
            under `run_tf1(hooks, max_steps)`.
        steps_per_epoch: Batches per epoch, at most 10 (the data has 320 samples).
        model: A compiled model of `K` to train further; defaults to a fresh `make_model(K)`.
        callbacks: Keras callbacks run before the `HookCallback` at every event.

    Returns:
        The model's optimizer iterations after the fit.
    """
    if max_steps % steps_per_epoch or not 0 < steps_per_epoch * BATCH <= len(_X):
        raise ValueError(
            f"max_steps={max_steps} must be a multiple of steps_per_epoch={steps_per_epoch}, "
            f"itself in 1..{len(_X) // BATCH}"
        )
    model = make_model(K) if model is None else model
    n = steps_per_epoch * BATCH
    model.fit(
        _X[:n],
        _Y[:n],
        batch_size=BATCH,
        epochs=max_steps // steps_per_epoch,
        verbose=0,
        callbacks=[*callbacks, HookCallback(hooks)],
    )
    return iterations(model)


# -- the same MLP as a TF1 graph, for differential tests of the model's variables --

TF1_NAMES = ("dense", "dense_1")


def weights_of(model: Any) -> list[np.ndarray]:
    """The model's weights as numpy arrays (kernel, bias, kernel, bias)."""
    return [np.asarray(keras.ops.convert_to_numpy(w)) for w in model.weights]


def tf1_mlp(
    weights: Sequence[np.ndarray],
    learning_rate: float | Callable[[Any], Any] = 0.05,
    scopes: Sequence[str] = TF1_NAMES,
    optimizer: Callable[[Any], Any] = tf.compat.v1.train.GradientDescentOptimizer,
) -> Any:
    """Builds `make_model`'s MLP in the default graph as a TF1 model_fn did, and returns its train op.

    Non-resource variables from `tf.compat.v1.get_variable`, created in the
    order the adapter graph lists the Keras model's (global step, kernels and
    biases, learning rate), `weights` as initial values, the loss named
    `loss`, plain gradient descent (Keras's SGD without momentum) unless
    `optimizer` (called with the rate variable) makes another TF1 optimizer.
    Inputs are the placeholders `x:0` and `y:0`. A callable `learning_rate` is
    a schedule: called with the global step variable, as a model_fn called
    `tf.compat.v1.train.exponential_decay(..., tf.compat.v1.train.get_global_step(), ...)`,
    its tensor is the rate, named `learning_rate` (no rate variable then).
    """
    v1 = tf.compat.v1
    keys = v1.GraphKeys
    step = v1.get_variable(
        "global_step",
        [],
        tf.int64,
        v1.zeros_initializer(),
        trainable=False,
        use_resource=False,
        collections=[keys.GLOBAL_VARIABLES, keys.GLOBAL_STEP],
    )
    x = v1.placeholder(tf.float32, [None, N_FEATURES], name="x")
    y = v1.placeholder(tf.int64, [None], name="y")
    h = x
    for i, scope in enumerate(scopes):
        with v1.variable_scope(scope):
            kernel = v1.get_variable("kernel", initializer=weights[2 * i], use_resource=False)
            bias = v1.get_variable("bias", initializer=weights[2 * i + 1], use_resource=False)
        h = tf.matmul(h, kernel) + bias
        if i == 0:
            h = tf.nn.relu(h)
    tf.identity(h, name="logits")
    if callable(learning_rate):
        rate = tf.identity(learning_rate(step), name="learning_rate")
    else:
        rate = v1.get_variable(
            "learning_rate", initializer=np.float32(learning_rate), trainable=False, use_resource=False
        )
    loss = tf.identity(tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h)), name="loss")
    # As in `run_tf1`: the step read that hooks use happens before the increment.
    read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
    with tf.control_dependencies([read]):
        return optimizer(rate).minimize(loss, global_step=step)


class FinalValues(tf.compat.v1.train.SessionRunHook):
    """Keeps every global variable's value at `end()`, by name without `:0`."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def end(self, session: Any) -> None:
        variables = tf.compat.v1.global_variables()
        values = session.run(variables)
        self.values = {v.op.name: value for v, value in zip(variables, values, strict=True)}


def run_tf1_mlp(
    hooks: Any,
    weights: Sequence[np.ndarray],
    steps: int,
    learning_rate: float | Callable[[Any], Any] = 0.05,
    scopes: Sequence[str] = TF1_NAMES,
    before_step: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Trains `tf1_mlp` for `steps` batches of `BATCH` (in order) under a real MonitoredSession.

    Args:
        hooks: The hooks, or a zero-argument function that builds them in the graph.
        weights: The initial weights (from a Keras model: `weights_of(model)`).
        steps: Batches to train; the 10 batches of the data repeat, as epochs of a fit would.
        before_step: Called before each `session.run` (to advance a fake clock).

    Returns:
        The global variables' values at the end, by name (`"dense/kernel"`).
    """
    final = FinalValues()
    with tf.Graph().as_default():
        train_op = tf1_mlp(weights, learning_rate, scopes)
        hook_list = list(hooks() if callable(hooks) else hooks)
        with tf.compat.v1.train.MonitoredSession(hooks=[*hook_list, final]) as session:
            for i in range(steps):
                if session.should_stop():
                    break
                if before_step is not None:
                    before_step()
                batch = slice(i % 10 * BATCH, (i % 10 + 1) * BATCH)
                session.run(train_op, {"x:0": _X[batch], "y:0": _Y[batch]})
    return final.values


def fit_in_order(model: Any, callbacks: list[Any], steps: int) -> Any:
    """Trains `model` on `steps` batches of `BATCH` of the shared data, in order, in one epoch."""
    n = steps * BATCH
    model.fit(_X[:n], _Y[:n], batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    return model


def fit_mlp(K: Any, hooks: Any, steps: int, model: Any = None, names: Any = None, **compile_args: Any) -> Any:
    """The Keras side of `run_tf1_mlp`: `steps` batches of `BATCH`, in order, under `HookCallback(hooks)`.

    Returns:
        The model (layers named as TF1 named them), trained.
    """
    model = model or make_model(K, layer_names=TF1_NAMES, **compile_args)
    return fit_in_order(model, [HookCallback(hooks, names=names)], steps)


def RunningMax(K: Any, result_is_variable: bool = True) -> Any:
    """A stateful metric with its own update_state: the largest batch-mean error so far.

    Its `result()` returns its state variable itself, unless `result_is_variable=False`
    (Keras 3.15's JAX symbolic build refuses a variable there, with or without HookCallback).
    """

    class RunningMax(K.metrics.Metric):
        def __init__(self, name: str = "running_max", **kwargs: Any) -> None:
            super().__init__(name=name, **kwargs)
            self.top = self.add_weight(name="top", shape=(), initializer="zeros")

        def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
            err = K.ops.mean(K.ops.abs(y_pred)) if K is keras else tf.reduce_mean(tf.abs(y_pred))
            self.top.assign(K.ops.maximum(self.top.value, err) if K is keras else tf.maximum(self.top, err))

        def result(self) -> Any:
            return self.top if result_is_variable else self.top.value

    return RunningMax()
