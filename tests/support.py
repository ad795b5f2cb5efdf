"""Shared test helpers: a small real model, data, a recording hook, and the two
training loops that differential tests compare (TF1's MonitoredSession, Keras fit)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

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
    K: Any = keras, steps_per_execution: int = 1, metrics: tuple[str, ...] = ("accuracy",)
) -> keras.Model:
    """Returns a compiled small MLP of the Keras package `K` (keras or tf_keras)."""
    K.utils.set_random_seed(0)
    model = K.Sequential(
        [
            K.Input((N_FEATURES,)),
            K.layers.Dense(N_HIDDEN, activation="relu"),
            K.layers.Dense(N_CLASSES),
        ]
    )
    model.compile(
        optimizer=K.optimizers.SGD(LEARNING_RATE),
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


def run_tf1_mlp(
    weights: Sequence[np.ndarray],
    make_hooks: Callable[[dict[str, Any]], Any],
    steps: int,
    x: np.ndarray = _X,
    y: np.ndarray = _Y,
    before_step: Callable[[], None] | None = None,
) -> None:
    """Trains `make_model`'s MLP as a TF1 `model_fn` built it, under a real MonitoredSession.

    The graph starts from `weights` (a Keras model's `get_weights()`), reads `x`, `y`
    in unshuffled batches of `BATCH`, and names what TF1 hooks fetched: `"loss"` and
    `"accuracy"`, each the batch's own value, as TF1 tensors held them.

    Args:
        weights: The initial kernels and biases of the two Dense layers.
        make_hooks: Called in the graph with the model's tensors ("features",
            "labels", "logits", "predictions", "loss", "accuracy"); returns the hooks.
        steps: Train steps to run.
        x, y: The data, repeated.
        before_step: Called before each `session.run` (to advance a fake clock).
    """
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        global_step = v1.train.get_or_create_global_step()
        read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat()
        features, labels = v1.data.make_one_shot_iterator(batches).get_next()
        def dense(inputs: Any, name: str, kernel: np.ndarray, bias: np.ndarray) -> Any:
            # What tf.compat.v1.layers.dense built (gone with Keras 3): dense/kernel, dense/bias.
            with v1.variable_scope(name):
                k = v1.get_variable("kernel", initializer=kernel.astype("float32"), use_resource=False)
                b = v1.get_variable("bias", initializer=bias.astype("float32"), use_resource=False)
            return tf.nn.bias_add(tf.matmul(inputs, k), b)

        hidden = tf.nn.relu(dense(features, "dense", weights[0], weights[1]))
        logits = dense(hidden, "dense_1", weights[2], weights[3])
        loss = tf.identity(v1.losses.sparse_softmax_cross_entropy(labels, logits), name="loss")
        predictions = tf.argmax(logits, 1)
        tf.reduce_mean(tf.cast(tf.equal(labels, predictions), tf.float32), name="accuracy")
        with tf.control_dependencies([read]):  # hooks read the step from before its increment
            train_op = v1.train.GradientDescentOptimizer(LEARNING_RATE).minimize(loss, global_step=global_step)
        graph = v1.get_default_graph()
        tensors = {"features": features, "labels": labels, "logits": logits, "predictions": predictions,
                   "loss": loss, "accuracy": graph.get_tensor_by_name("accuracy:0")}
        with v1.train.MonitoredSession(hooks=make_hooks(tensors)) as session:
            for _ in range(steps):
                if session.should_stop():
                    break
                if before_step is not None:
                    before_step()
                session.run(train_op)


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
      under `HookCallback(values="batch")`. None with `reference=None`.
    """
    ref = None if reference is None else reference(K)  # made now: make_model seeds the RNGs
    train_logs: list[dict] = []
    test_logs: list[dict] = []
    train_batch: list[dict] = []
    test_batch: list[dict] = []
    start: dict[str, Any] = {}

    def own_values(model: Any, weights: Any, batch: int) -> dict:
        ref.set_weights(weights)
        part = slice(batch * batch_size, (batch + 1) * batch_size)
        w = None if sample_weight is None else sample_weight[part]
        values = ref.test_on_batch(x[part], y[part], sample_weight=w, return_dict=True)
        # As Keras's logs: a float where the value is a scalar (F1Score's is per class).
        return {key: float(value) if np.size(value) == 1 and np.ndim(value) == 0 else np.asarray(value)
                for key, value in values.items()}

    def train_begin(batch: int, logs: Any) -> None:
        if ref is not None:
            start["weights"] = recorder.model.get_weights()

    def train_end(batch: int, logs: Any) -> None:
        train_logs.append(dict(logs))
        if ref is not None:
            train_batch.append(own_values(recorder.model, start["weights"], batch))

    def test_end(batch: int, logs: Any) -> None:
        test_logs.append(dict(logs))
        if ref is not None:
            test_batch.append(own_values(recorder.model, recorder.model.get_weights(), batch))

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
        raise ValueError(f"max_steps={max_steps} must be a multiple of steps_per_epoch={steps_per_epoch}, "
                         f"itself in 1..{len(_X) // BATCH}")
    model = make_model(K) if model is None else model
    n = steps_per_epoch * BATCH
    model.fit(_X[:n], _Y[:n], batch_size=BATCH, epochs=max_steps // steps_per_epoch, verbose=0,
              callbacks=[*callbacks, HookCallback(hooks)])
    return iterations(model)
