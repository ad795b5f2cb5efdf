"""Training is untouched by `HookCallback`: the same seeded run with and without it, compared to the bit.

Each case trains a small real model twice from the same seed: once with a
train-mode and an eval-mode `HookCallback` whose hooks fetch values every step
(so batch values are on), once without. Compared exactly (`np.testing.assert_equal`):
the weights, the optimizer's variables and `iterations`, `History`, every
event another callback saw with its logs, and `evaluate()`'s results.

TF's stateful random ops are the one exception (`test_tf_stateful_random_ops_*`):
their state lives in the kernels of one compiled function, which a wrapped
step cannot share, so there the test asks for a warning and no noise drawn twice.
"""

from __future__ import annotations

import csv
import pathlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import pytest
import step_graph
import tensorflow as tf
from support import N_CLASSES, N_FEATURES, RunningMax, iterations, make_data

from hooks2callbacks import BatchValueError, HookCallback

T = tf.compat.v1.train
X, Y = make_data(200)
XV, YV = make_data(64, seed=1)
BATCH = 32
EPOCHS = 2
SAMPLE_WEIGHT = np.random.default_rng(3).uniform(0.25, 2.0, size=len(X)).astype("float32")
TF_ONLY = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow only")


class Fetch(T.SessionRunHook):
    """Fetches the global step and `keys` by name every step, as a TF1 logging hook would."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.steps: list[int] = []
        self.results: list[dict[str, Any]] = []

    def begin(self) -> None:
        self._step = T.get_global_step()

    def before_run(self, run_context: Any) -> Any:
        return T.SessionRunArgs({"step": self._step, "values": {k: k for k in self.keys}})

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.steps.append(int(run_values.results["step"]))
        self.results.append(run_values.results["values"])


def Events(K: Any) -> Any:
    """A callback of Keras package `K` recording every event with a copy of its logs."""

    class EventRecorder(K.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.events: list[tuple[Any, ...]] = []

        def _add(self, *event: Any) -> None:
            logs = event[-1]
            self.events.append((*event[:-1], None if logs is None else {k: np.asarray(v) for k, v in logs.items()}))

    for name in [
        f"on_{when}_{what}"
        for when in ("train", "test", "predict")
        for what in ("begin", "end", "batch_begin", "batch_end")
    ] + ["on_epoch_begin", "on_epoch_end"]:

        def record(self: Any, *args: Any, _name: str = name, **kwargs: Any) -> None:
            logs = kwargs.get("logs", args[-1] if args and not isinstance(args[-1], int) else None)
            self._add(_name, *[a for a in args if isinstance(a, int)], logs)

        setattr(EventRecorder, name, record)
    return EventRecorder()


def mlp(K: Any, *layers: Any, metrics: Any = ("accuracy",), optimizer: Any = None, **compile_args: Any) -> Any:
    K.utils.set_random_seed(0)
    model = K.Sequential(
        [K.Input((N_FEATURES,)), *layers, K.layers.Dense(16, activation="relu"), K.layers.Dense(N_CLASSES)]
    )
    model.compile(
        optimizer=optimizer or K.optimizers.SGD(0.05),
        loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=list(metrics),
        **compile_args,
    )
    return model


def optimizer_state(model: Any) -> list[np.ndarray]:
    variables = model.optimizer.variables
    variables = variables() if callable(variables) else variables
    return [np.asarray(keras.ops.convert_to_numpy(v)) for v in variables]


class Run:
    """One training run of a case, and everything about it that the comparison reads."""

    def __init__(
        self,
        K: Any,
        build: Callable[[Any], Any],
        fit: Callable[[Any, list[Any]], Any],
        keys: tuple[str, ...],
        with_hooks: bool,
        extra: Callable[[], list[Any]] = list,
        first: bool = True,
        data: tuple[Any, Any] = (XV, YV),
    ) -> None:
        self.model = model = build(K)
        events = Events(K)
        hooks = (
            [HookCallback(Fetch(keys)), HookCallback(Fetch(("loss",)), mode="eval", values="batch")]
            if with_hooks
            else []
        )
        self.fetched = hooks
        callbacks = [*hooks, events, *extra()] if first else [events, *extra(), *hooks]
        self.history = fit(model, callbacks)
        evaluated = model.evaluate(*data, batch_size=BATCH, verbose=0, return_dict=True, callbacks=hooks[1:])
        self.state = {
            "weights": model.get_weights(),
            "optimizer": optimizer_state(model),
            "iterations": iterations(model),
            "history": self.history.history,
            "events": events.events,
            "evaluate": evaluated,
        }


def assert_untouched(K: Any, build: Callable[[Any], Any], fit: Callable[[Any, list[Any]], Any], **run: Any) -> Run:
    """Runs the case with and without HookCallback and compares everything to the bit; returns the run with."""
    keys = run.pop("keys", ("loss",))
    with_hooks = Run(K, build, fit, keys, True, **run)
    without = Run(K, build, fit, keys, False, **run)
    np.testing.assert_equal(with_hooks.state, without.state)
    fetched = with_hooks.fetched[0].hooks[0]
    assert fetched.results and all(set(r) == set(keys) for r in fetched.results)  # the hooks did see values
    return with_hooks


def fit_arrays(**kwargs: Any) -> Callable[[Any, list[Any]], Any]:
    epochs = kwargs.pop("epochs", EPOCHS)

    def fit(model: Any, callbacks: list[Any]) -> Any:
        return model.fit(
            X,
            Y,
            batch_size=BATCH,
            epochs=epochs,
            verbose=0,
            shuffle=False,
            validation_data=(XV, YV),
            callbacks=callbacks,
            **kwargs,
        )

    return fit


# -- data ----------------------------------------------------------------------


def test_arrays_with_validation(K):
    assert_untouched(K, mlp, fit_arrays(), keys=("loss", "accuracy"))


def test_a_dataset_of_unknown_length(K):
    def data(x: Any, y: Any) -> Any:
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).filter(lambda a, b: True)

    def fit(model: Any, callbacks: list[Any]) -> Any:
        return model.fit(data(X, Y), epochs=EPOCHS, verbose=0, validation_data=data(XV, YV), callbacks=callbacks)

    assert_untouched(K, mlp, fit, keys=("loss", "accuracy"))


def batches(n: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    i = 0
    while n is None or i < n:
        part = slice(i % 6 * BATCH, (i % 6 + 1) * BATCH)
        yield X[part], Y[part]
        i += 1


def test_a_generator(K):
    def fit(model: Any, callbacks: list[Any]) -> Any:
        return model.fit(batches(), steps_per_epoch=4, epochs=EPOCHS, verbose=0, callbacks=callbacks)

    assert_untouched(K, mlp, fit, keys=("loss", "accuracy"))


def test_a_py_dataset_or_sequence(K):
    base = getattr(K.utils, "PyDataset", None) or K.utils.Sequence

    class Batches(base):  # type: ignore[misc, valid-type]
        def __len__(self) -> int:
            return 5

        def __getitem__(self, index: int) -> Any:
            part = slice(index * BATCH, (index + 1) * BATCH)
            return X[part], Y[part]

    def fit(model: Any, callbacks: list[Any]) -> Any:
        return model.fit(Batches(), epochs=EPOCHS, verbose=0, shuffle=False, callbacks=callbacks)

    assert_untouched(K, mlp, fit, keys=("loss", "accuracy"))


def test_sample_weights_with_weighted_metrics(K):
    def build(K: Any) -> Any:
        return mlp(K, weighted_metrics=[K.metrics.SparseCategoricalAccuracy(name="wacc")])

    assert_untouched(K, build, fit_arrays(sample_weight=SAMPLE_WEIGHT), keys=("loss", "accuracy", "wacc"))


def test_class_weights(K):
    assert_untouched(K, mlp, fit_arrays(class_weight={0: 0.5, 1: 2.0, 2: 1.25}), keys=("loss", "accuracy"))


def test_steps_per_execution(K):
    if K is keras and keras.backend.backend() == "torch":
        pytest.skip("Keras 3's PyTorch backend takes steps_per_execution=1 only")

    def build(K: Any) -> Any:
        return mlp(K, steps_per_execution=3)

    run = assert_untouched(K, build, fit_arrays(), keys=("loss", "accuracy"))
    # 7 batches an epoch: executions of 3, 3 and 1 steps, each seen as its last step.
    assert run.fetched[0].hooks[0].steps == [2, 5, 6, 9, 12, 13]


def test_hooks_fetching_the_batch_tensors_every_step(K):
    """The step that also outputs the batch's tensors trains as Keras's own: with Dropout's
    noise, sample weights, and validation. (Dropout is seeded: an unseeded Keras 3 Dropout
    draws differently in a process's first fit than in later ones, with or without HookCallback.)"""

    def build(K: Any) -> Any:
        return mlp(K, K.layers.Dropout(0.5, seed=2))

    keys = ("loss", "features", "labels", "sample_weight", "predictions")
    run = assert_untouched(K, build, fit_arrays(sample_weight=SAMPLE_WEIGHT), keys=keys)
    results = run.fetched[0].hooks[0].results
    starts = [i * BATCH for i in range(-(-len(X) // BATCH))] * EPOCHS
    assert len(results) == len(starts)
    for result, start in zip(results, starts, strict=True):
        np.testing.assert_array_equal(result["features"], X[start : start + BATCH])
        np.testing.assert_array_equal(result["labels"], Y[start : start + BATCH])
        np.testing.assert_array_equal(result["sample_weight"], SAMPLE_WEIGHT[start : start + BATCH])
        assert result["predictions"].shape == (len(result["labels"]), N_CLASSES)


# -- models --------------------------------------------------------------------


def test_a_functional_model_with_two_outputs(K):
    def build(K: Any) -> Any:
        K.utils.set_random_seed(0)
        inputs = K.Input((N_FEATURES,))
        hidden = K.layers.Dense(16, activation="relu")(inputs)
        model = K.Model(inputs, [K.layers.Dense(N_CLASSES, name="a")(hidden), K.layers.Dense(1, name="b")(hidden)])
        model.compile(
            optimizer=K.optimizers.SGD(0.05),
            loss=[K.losses.SparseCategoricalCrossentropy(from_logits=True), "mse"],
            metrics=[["accuracy"], ["mae"]],
        )
        return model

    target = (X[:, :1] * 2).astype("float32")

    def fit(model: Any, callbacks: list[Any]) -> Any:
        return model.fit(X, (Y, target), batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=False, callbacks=callbacks)

    # On JAX, Keras updates the per-output loss trackers inside the gradient's trace:
    # their keys have no batch value there (a BatchValueError when fetched).
    keys = ("loss", "a_accuracy", "b_mae")
    if keras.backend.backend() != "jax" or K is not keras:
        keys += ("a_loss", "b_loss")
    assert_untouched(K, build, fit, keys=keys, data=(XV, (YV, (XV[:, :1] * 2).astype("float32"))))
    if keys[-1] != "b_loss":
        with pytest.raises(BatchValueError, match="JAX's gradient"):
            fit(build(K), [HookCallback(Fetch(("a_loss",)))])


def test_a_subclassed_model_with_its_own_train_step_and_metric_tracker(K):
    """The pattern of Keras's guide to a custom train_step, given no input shape."""

    class Custom(K.Model):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = K.layers.Dense(16, activation="relu")
            self.out = K.layers.Dense(N_CLASSES)
            self.loss_tracker = K.metrics.Mean(name="loss")
            self.xent = K.losses.SparseCategoricalCrossentropy(from_logits=True)

        def call(self, x: Any) -> Any:
            return self.out(self.hidden(x))

        @property
        def metrics(self) -> list[Any]:
            return [self.loss_tracker]

        def train_step(self, data: Any) -> Any:
            x, y = data
            with tf.GradientTape() as tape:
                loss = self.xent(y, self(x, training=True))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
            self.loss_tracker.update_state(loss)
            return {"loss": self.loss_tracker.result()}

        def test_step(self, data: Any) -> Any:
            x, y = data
            self.loss_tracker.update_state(self.xent(y, self(x, training=False)))
            return {"loss": self.loss_tracker.result()}

    if keras.backend.backend() != "tensorflow" and K is keras:
        pytest.skip("a train_step with tf.GradientTape is the TensorFlow backend's pattern")

    def build(K: Any) -> Any:
        K.utils.set_random_seed(0)
        model = Custom()
        model.compile(optimizer=K.optimizers.Adam(0.01))
        return model

    assert_untouched(K, build, fit_arrays(), keys=("loss",))


def test_batch_norm_dropout_and_keras_random_layers(K):
    def build(K: Any) -> Any:
        return mlp(K, K.layers.GaussianNoise(0.1, seed=1), K.layers.BatchNormalization(), K.layers.Dropout(0.3, seed=2))

    assert_untouched(K, build, fit_arrays(), keys=("loss", "accuracy"))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(K, policy):
    """On a CPU with 16-bit oneDNN kernels this compares fused kernels too; the graph
    tests below check on every CPU that the step leaves them fusable."""

    def build(K: Any) -> Any:
        K.mixed_precision.set_global_policy(policy)
        try:
            return mlp(K)
        finally:
            K.mixed_precision.set_global_policy("float32")

    assert_untouched(K, build, fit_arrays(), keys=("loss", "accuracy", "predictions"))


# -- optimizers ----------------------------------------------------------------


def test_adam_with_ema(K):
    if keras.backend.backend() == "jax":
        pytest.skip("Keras 3.15's JAX fit with use_ema fails without HookCallback too (Array has been deleted)")

    def build(K: Any) -> Any:
        return mlp(K, optimizer=K.optimizers.Adam(0.01, use_ema=True, ema_overwrite_frequency=3))

    assert_untouched(K, build, fit_arrays(), keys=("loss", "accuracy"))


def test_a_scheduled_learning_rate_fetched_every_step(K):
    """Hooks get the step's own scheduled rate from the schedule, outside Keras's step."""

    def build(K: Any) -> Any:
        return mlp(K, optimizer=K.optimizers.SGD(K.optimizers.schedules.ExponentialDecay(0.1, 3, 0.5)))

    run = assert_untouched(K, build, fit_arrays(), keys=("loss", "learning_rate"))
    rates = [r["learning_rate"] for r in run.fetched[0].hooks[0].results]
    assert rates == pytest.approx([0.1 * 0.5 ** (s / 3) for s in range(len(rates))], rel=1e-6)


def test_gradient_accumulation_counts_applied_updates(K):
    if K is not keras:
        pytest.skip("tf_keras's optimizers have no gradient_accumulation_steps")

    def build(K: Any) -> Any:
        return mlp(K, optimizer=K.optimizers.Adam(0.01, gradient_accumulation_steps=2))

    run = assert_untouched(K, build, fit_arrays(), keys=("loss", "accuracy"))
    # 7 batches an epoch, 14 in all: 7 applied updates, as TF1's global step counted apply_gradients.
    assert run.state["iterations"] == 7
    assert run.fetched[0].hooks[0].steps == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]


def test_under_gradient_accumulation_stock_hooks_count_optimizer_updates(K, caplog):
    """StopAtStepHook(last_step=5) stops after exactly 5 applied updates (10 micro-batches), and
    LoggingTensorHook logs the global step it fetches (it failed in begin() before)."""
    if K is not keras:
        pytest.skip("tf_keras's optimizers have no gradient_accumulation_steps")
    model = mlp(K, optimizer=K.optimizers.Adam(0.01, gradient_accumulation_steps=2))
    fetch = Fetch(("loss",))
    hooks = [T.StopAtStepHook(last_step=5), T.LoggingTensorHook({"step": "global_step"}, every_n_iter=2), fetch]
    with caplog.at_level("INFO", logger="tensorflow"):
        model.fit(X, Y, batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=False, callbacks=[HookCallback(hooks)])
    assert iterations(model) == 5
    assert fetch.steps == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    # every_n_iter counts hook calls, one per micro-batch: steps 0, 1, 2, ... every second call.
    logged = [r.getMessage().split(" (")[0] for r in caplog.records if r.getMessage().startswith("step = ")]
    assert logged == ["step = 0", "step = 1", "step = 2", "step = 3", "step = 4"]


# -- metrics -------------------------------------------------------------------


@pytest.mark.parametrize("fetched", [False, True], ids=["hooks_fetch_the_loss", "hooks_fetch_the_metric"])
def test_a_custom_stateful_metric(K, fetched):
    """Keras 3 runs its update again, apart, for the batch value (tf_keras has none to fetch)."""
    if K is keras and keras.backend.backend() == "jax":
        pytest.skip("this metric fails Keras 3.15's JAX symbolic build (compute_output_spec) without HookCallback too")
    if fetched and K is not keras:
        pytest.skip("tf_keras gives such a metric no batch value (a BatchValueError, tests/test_batch.py)")

    def build(K: Any) -> Any:
        return mlp(K, metrics=["accuracy", RunningMax(K)])

    keys = ("loss", "accuracy", "running_max") if fetched else ("loss", "accuracy")
    assert_untouched(K, build, fit_arrays(), keys=keys)


# -- how functions run -----------------------------------------------------------


@TF_ONLY
def test_run_functions_eagerly_with_a_step_that_reads_numpy(K):
    class Eager(K.Sequential):
        def train_step(self, data: Any) -> Any:
            self.seen = float(tf.reduce_sum(data[0]).numpy())  # only an eager step can
            return super().train_step(data)

    def build(K: Any) -> Any:
        K.utils.set_random_seed(0)
        model = Eager([K.Input((N_FEATURES,)), K.layers.Dense(16, activation="relu"), K.layers.Dense(N_CLASSES)])
        model.compile(
            optimizer=K.optimizers.SGD(0.05),
            loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        return model

    tf.config.run_functions_eagerly(True)
    try:
        assert_untouched(K, build, fit_arrays(), keys=("loss", "accuracy"))
    finally:
        tf.config.run_functions_eagerly(False)


@TF_ONLY
def test_jit_compile(K):
    def build(K: Any) -> Any:
        return mlp(K, jit_compile=True)

    assert_untouched(K, build, fit_arrays(), keys=("loss", "accuracy"))


# -- other callbacks -----------------------------------------------------------


@pytest.mark.parametrize("first", [True, False], ids=["hooks_first", "hooks_last"])
def test_other_callbacks(K, tmp_path, first):
    runs = iter(range(2))

    def extra() -> list[Any]:
        directory = tmp_path / str(next(runs))
        return [
            K.callbacks.EarlyStopping(monitor="val_loss", patience=0, min_delta=0.05),
            K.callbacks.ReduceLROnPlateau(monitor="loss", patience=0, min_delta=0.05, factor=0.5),
            K.callbacks.ModelCheckpoint(
                str(directory / "best.weights.h5"), save_weights_only=True, save_best_only=True
            ),
            K.callbacks.TensorBoard(str(directory / "logs")),
            K.callbacks.TerminateOnNaN(),
            K.callbacks.CSVLogger(str(directory / "log.csv")),
        ]

    run = assert_untouched(K, mlp, fit_arrays(epochs=5), keys=("loss", "accuracy"), extra=extra, first=first)
    assert len(run.state["history"]["loss"]) < 5  # EarlyStopping did stop
    tables = [list(csv.reader(open(tmp_path / str(i) / "log.csv"))) for i in range(2)]
    assert tables[0] == tables[1]


@pytest.mark.parametrize("first", [True, False], ids=["hooks_first", "hooks_last"])
def test_backup_and_restore_in_either_order(K, tmp_path, first):
    """Resumed after an interruption, hooks see the restored step, as TF1 hooks saw it after a restore."""

    class Interrupt(K.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if iterations(self.model) == 9:
                raise KeyboardInterrupt("preempted")

    class StopAt17(K.callbacks.Callback):
        """What StopAtStepHook(last_step=17) does, for the run without HookCallback."""

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if iterations(self.model) >= 17:
                self.model.stop_training = True

    def train(with_hooks: bool, directory: pathlib.Path) -> tuple[Any, list[int]]:
        model = mlp(K)
        backup = lambda: K.callbacks.BackupAndRestore(str(directory), save_freq=3)  # noqa: E731
        with pytest.raises(KeyboardInterrupt):
            model.fit(X, Y, batch_size=BATCH, epochs=4, verbose=0, shuffle=False, callbacks=[backup(), Interrupt()])
        model = mlp(K)
        fetch = Fetch(("loss",))
        stop = T.StopAtStepHook(last_step=17)
        hooks = [HookCallback([stop, fetch])] if with_hooks else [StopAt17()]
        callbacks = [*hooks, backup()] if first else [backup(), *hooks]
        model.fit(X, Y, batch_size=BATCH, epochs=4, verbose=0, shuffle=False, callbacks=callbacks)
        return model, fetch.steps

    model, steps = train(True, tmp_path / "with")
    assert steps[0] == 9 and steps[-1] == 16 and iterations(model) == 17
    plain, _ = train(False, tmp_path / "without")
    assert iterations(plain) == 17
    for ours, theirs in zip(plain.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_equal(ours, theirs)


# -- runs ----------------------------------------------------------------------


def test_a_fit_after_a_fit_and_an_evaluate_between(K):
    def fit(model: Any, callbacks: list[Any]) -> Any:
        model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
        model.evaluate(XV, YV, batch_size=BATCH, verbose=0, callbacks=callbacks[1:2] if callbacks[:1] else [])
        return model.fit(X, Y, batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=False, callbacks=callbacks)

    assert_untouched(K, mlp, fit, keys=("loss", "accuracy"))


# -- TF's stateful random ops ----------------------------------------------------


def NoiseLayer(K: Any) -> Any:
    """A layer that draws TF stateful noise (`tf.random.normal`), as much TF1-era code does."""

    class Noise(K.layers.Layer):
        def call(self, x: Any, training: Any = None) -> Any:
            return x + tf.random.normal(tf.shape(x), stddev=0.1) if training else x

    return Noise()


class Draws(T.SessionRunHook):
    """Keeps each step's loss on the same fixed batch: a replay of noise gives a repeated loss."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def before_run(self, run_context: Any) -> Any:
        return T.SessionRunArgs("loss")

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.losses.append(run_values.results)


@TF_ONLY
def test_tf_stateful_random_ops_warn_and_never_replay_noise(K):
    def build(K: Any) -> Any:
        model = mlp(K, NoiseLayer(K), optimizer=K.optimizers.SGD(0.0))  # fixed weights: only the noise varies
        return model

    model = build(K)
    same = (np.repeat(X[:BATCH], 4, axis=0), np.repeat(Y[:BATCH], 4, axis=0))
    means: list[float] = []
    keep = K.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: means.append(logs["loss"]))
    model.fit(*same, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[keep])  # a plain fit first
    plain = [(k + 1) * m - k * (means[k - 1] if k else 0.0) for k, m in enumerate(means)]  # each batch's loss
    draws = Draws()
    with pytest.warns(UserWarning, match="RandomStandardNormal") as caught:
        for _ in range(2):
            model.fit(*same, batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=[HookCallback(draws)])
    assert len([w for w in caught if "RandomStandardNormal" in str(w.message)]) == 1  # once per model
    assert len(draws.losses) == 16 and len(set(draws.losses)) == 16  # no step drew noise another drew
    # A new function starts the streams anew, as a Keras recompile does (the warning says so).
    np.testing.assert_allclose(draws.losses[:4], plain, rtol=1e-5)


def test_a_step_without_stateful_random_ops_does_not_warn(K):
    model = mlp(K)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[HookCallback(Fetch(("loss",)))])


# -- the step's graph ------------------------------------------------------------
#
# On a CPU with 16-bit oneDNN kernels (avx512_fp16, amx_bf16), a Keras op that gains
# a control output is no longer fused, and rounds otherwise: the weights differ
# there and nowhere else. These check the graph itself, on any CPU (`step_graph`).


def _step_graphs(K: Any, mode: str, keys: tuple[str, ...], policy: str) -> tuple[Any, Any]:
    """The graphs of Keras's own compiled step and of the step HookCallback runs, for one model."""
    K.mixed_precision.set_global_policy(policy)
    try:
        model = mlp(K)
    finally:
        K.mixed_precision.set_global_policy("float32")
    name = "train_function" if mode == "train" else "test_function"
    model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0) if mode == "train" else model.evaluate(
        X, Y, batch_size=BATCH, verbose=0
    )
    original = step_graph.traced(getattr(model, name), X, Y, BATCH)
    graphs: list[Any] = []

    class Grab(K.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if not graphs:
                graphs.append(step_graph.traced(getattr(model, name), X, Y, BATCH))

        on_test_batch_end = on_train_batch_end

    callbacks = [HookCallback(Fetch(keys), mode=mode, values="batch"), Grab()]
    if mode == "train":
        model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)
    else:
        model.evaluate(X, Y, batch_size=BATCH, verbose=0, callbacks=callbacks)
    assert graphs, "the wrapped step was not traced"
    return original, graphs[0]


FETCHES = {"values": ("loss", "accuracy"), "tensors": ("features", "labels", "predictions")}


# Every mode and fetch at float32; the 16-bit policies (whose train step scales the loss) in training.
CASES = [
    *((mode, fetch, "float32") for mode in ("train", "eval") for fetch in sorted(FETCHES)),
    *(("train", fetch, policy) for policy in ("mixed_float16", "mixed_bfloat16") for fetch in sorted(FETCHES)),
]


@TF_ONLY
@pytest.mark.slow
@pytest.mark.parametrize("mode, fetch, policy", CASES, ids=["-".join(case) for case in CASES])
def test_the_wrapped_step_leaves_keras_training_computation_as_keras_built_it(K, mode, fetch, policy):
    original, wrapped = _step_graphs(K, mode, FETCHES[fetch], policy)
    found = step_graph.changes(original, wrapped)
    assert not found, "\n".join(found)


@TF_ONLY
def test_the_graph_check_sees_a_control_output_and_an_input_added():
    """What the check is for: a dependency that graph rewrites see fails it; a new data consumer does not."""
    w = tf.Variable(tf.ones((4, 3)))
    total = tf.Variable(0.0)
    spec = tf.TensorSpec((None, 4))

    def keras_like(x: Any) -> Any:
        y = tf.nn.bias_add(tf.matmul(x, w), tf.zeros(3))
        total.assign_add(tf.reduce_sum(y))
        return y

    def reads_y(x: Any) -> Any:  # a new data consumer: allowed
        y = keras_like(x)
        return y, tf.reduce_max(y)

    def depends_on_y(x: Any) -> Any:  # the old tf_keras batch state: a control output on the BiasAdd
        y = tf.nn.bias_add(tf.matmul(x, w), tf.zeros(3))
        with tf.control_dependencies([y]):
            copy = tf.identity(total)
        total.assign_add(tf.reduce_sum(y))
        return y, copy

    def graph(function: Callable[..., Any]) -> Any:
        return tf.function(function).get_concrete_function(spec).graph

    assert step_graph.changes(graph(keras_like), graph(reads_y)) == []
    found = step_graph.changes(graph(keras_like), graph(depends_on_y))
    assert any(line.startswith("gained a control output: /BiasAdd") for line in found), found


@pytest.mark.slow
def test_tf1_graph_mode_fit_is_untouched(graph_mode_results):
    """tf_keras under disable_eager_execution(), with dropout and momentum, seeded: the same
    weights to the bit with and without HookCallback, whose hooks join the step's Session.run."""
    unhooked, hooked = graph_mode_results["invariance"]
    assert hooked == unhooked
