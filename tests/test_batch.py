"""Batch values (`hooks2callbacks._batch`): hooks see each batch's own loss and metrics.

The reference is computed apart from the training step: `Recorder` runs
`test_on_batch` of a copy of the model that holds the weights the step started
from, on that batch alone. Values must agree to float32 rounding.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import keras
import modelled_hooks
import numpy as np
import pytest
import tensorflow as tf
from support import (
    N_CLASSES,
    N_FEATURES,
    OnlyAfterRun,
    Recorder,
    RunningMax,
    Tick,
    make_data,
    make_model,
    needs_backend,
    run_tf1_mlp,
    weights_of,
)

from hooks2callbacks import BatchValueError, HookCallback, log_tensor
from hooks2callbacks._batch import _cache
from hooks2callbacks._flavours import derivable

T = tf.compat.v1.train
X, Y = make_data(100)  # batches of 32: 32, 32, 32 and a smaller last one of 4
X_320, Y_320 = make_data()  # 10 batches of 32, as `run_tf1_mlp` reads them
BATCH = 32
WEIGHTS = np.random.default_rng(1).uniform(0.25, 2.0, size=len(X)).astype("float32")
CLASS_WEIGHT = {0: 0.5, 1: 2.0, 2: 1.25}


def weighted_model(K: Any) -> Any:
    """The small MLP with a plain and a weighted metric, and a top-2 accuracy."""
    K.utils.set_random_seed(0)
    model = K.Sequential([K.Input((N_FEATURES,)), K.layers.Dense(16, activation="relu"), K.layers.Dense(N_CLASSES)])
    model.compile(
        optimizer=K.optimizers.SGD(0.05),
        loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy", K.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2")],
        weighted_metrics=[K.metrics.SparseCategoricalAccuracy(name="weighted_accuracy")],
    )
    return model


class Seen(T.SessionRunHook):
    """Fetches every key of `keys` by name at every step and keeps the results."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.results: list[dict[str, float]] = []

    def before_run(self, run_context: Any) -> Any:
        return T.SessionRunArgs({key: key for key in self.keys})

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.results.append(run_values.results)


KEYS = ("loss", "accuracy", "top2", "weighted_accuracy")


@pytest.mark.parametrize("weighting", ["none", "sample_weight", "class_weight"])
def test_each_batch_own_values_over_epochs_with_a_smaller_last_batch(K, weighting):
    model = weighted_model(K)
    kwargs: dict[str, Any] = {}
    per_sample = None
    if weighting == "sample_weight":
        kwargs["sample_weight"] = per_sample = WEIGHTS
    elif weighting == "class_weight":
        kwargs["class_weight"] = CLASS_WEIGHT
        per_sample = np.array([CLASS_WEIGHT[int(c)] for c in Y], dtype="float32")
    recorder = Recorder(K, X, Y, sample_weight=per_sample, reference=weighted_model)
    hook = Seen(KEYS)
    history = model.fit(
        X, Y, batch_size=BATCH, epochs=3, verbose=0, shuffle=False, callbacks=[recorder, HookCallback(hook)], **kwargs
    )
    assert len(hook.results) == len(recorder.train_batch) == 3 * 4
    for step, (seen, own) in enumerate(zip(hook.results, recorder.train_batch, strict=True)):
        assert seen == pytest.approx({key: own[key] for key in KEYS}, rel=1e-6, abs=1e-7), f"step {step}"
    # Keras's running means are something else after each epoch's first step...
    assert hook.results[1]["loss"] != pytest.approx(recorder.train_logs[1]["loss"], rel=1e-3)
    # ...and stay what other callbacks and History get.
    assert history.history["loss"] == [recorder.train_logs[i]["loss"] for i in (3, 7, 11)]


def binary_model(K: Any) -> Any:
    """A binary classifier with Keras's confusion-matrix metrics, whose state is counts."""
    K.utils.set_random_seed(0)
    model = K.Sequential(
        [K.Input((N_FEATURES,)), K.layers.Dense(8, activation="relu"), K.layers.Dense(1, activation="sigmoid")]
    )
    model.compile(
        optimizer=K.optimizers.SGD(0.05),
        loss="binary_crossentropy",
        metrics=[
            K.metrics.AUC(name="auc"),
            K.metrics.Precision(name="precision"),
            K.metrics.Recall(name="recall"),
            K.metrics.F1Score(threshold=0.5, name="f1"),
        ],
    )
    return model


# Constructor arguments of the Keras metrics that need some.
REQUIRED = {
    "IoU": dict(num_classes=3, target_class_ids=[0]),
    "MeanIoU": dict(num_classes=3),
    "OneHotIoU": dict(num_classes=3, target_class_ids=[0]),
    "OneHotMeanIoU": dict(num_classes=3),
    "MeanMetricWrapper": dict(fn=keras.losses.mean_squared_error),
    "PrecisionAtRecall": dict(recall=0.5),
    "RecallAtPrecision": dict(precision=0.5),
    "SensitivityAtSpecificity": dict(specificity=0.5),
    "SpecificityAtSensitivity": dict(sensitivity=0.5),
}
KERAS_METRICS = sorted(
    name
    for name in dir(keras.metrics)
    if isinstance(getattr(keras.metrics, name), type)
    and issubclass(getattr(keras.metrics, name), keras.metrics.Metric)
    and name != "Metric"
)


@pytest.mark.parametrize("name", KERAS_METRICS)
def test_every_keras_metric_is_derivable_and_resets_to_zeros(name):
    # A batch's state is what the metric's update added to its state (or, for a
    # metric that assigns, its reset state updated with the batch): the state of
    # the batch alone only if the reset state is zeros, as it is for these.
    metric = getattr(keras.metrics, name)(**REQUIRED.get(name, {}))
    assert derivable(metric)
    for value in metric.stateless_reset_state():
        assert not np.any(keras.ops.convert_to_numpy(value))


def test_confusion_matrix_metrics_give_the_metric_of_the_batch_alone(K):
    labels = (X[:, 0] > 0).astype("float32").reshape(-1, 1)
    keys = ("loss", "auc", "precision", "recall", "f1")
    recorder = Recorder(K, X, labels, reference=binary_model)
    hook = Seen(keys)
    binary_model(K).fit(
        X, labels, batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=[recorder, HookCallback(hook)]
    )
    for step, (seen, own) in enumerate(zip(hook.results, recorder.train_batch, strict=True)):
        assert seen == pytest.approx({key: np.ravel(own[key])[0] for key in keys}, rel=1e-5, abs=1e-6), f"step {step}"
    assert hook.results[2]["auc"] != pytest.approx(recorder.train_logs[2]["auc"], rel=1e-3)


def test_evaluate_and_validation_passes_give_each_batch_own_values(K):
    model = make_model(K)
    train = Seen(("loss", "accuracy"))
    validation = Seen(("loss", "accuracy"))
    recorder = Recorder(K, X, Y)
    model.fit(
        X,
        Y,
        batch_size=BATCH,
        epochs=2,
        verbose=0,
        shuffle=False,
        validation_data=(X, Y),
        callbacks=[recorder, HookCallback(train), HookCallback(validation, mode="eval", values="batch")],
    )
    assert len(validation.results) == len(recorder.test_batch) == 2 * 4
    for seen, own in zip(validation.results, recorder.test_batch, strict=True):
        assert seen == pytest.approx(own, rel=1e-6)
    for seen, own in zip(train.results, recorder.train_batch, strict=True):
        assert seen == pytest.approx(own, rel=1e-6)

    evaluated = Seen(("loss", "accuracy"))
    recorder = Recorder(K, X, Y)
    results = model.evaluate(
        X,
        Y,
        batch_size=BATCH,
        verbose=0,
        return_dict=True,
        callbacks=[recorder, HookCallback(evaluated, mode="eval", values="batch")],
    )
    for seen, own in zip(evaluated.results, recorder.test_batch, strict=True):
        assert seen == pytest.approx(own, rel=1e-6)
    # evaluate() still returns Keras's aggregate over the whole evaluation.
    assert results == pytest.approx(recorder.test_logs[-1], rel=0)


def test_hooks_that_cannot_see_values_leave_the_model_its_own_step(K):
    class OnlyBegin(T.SessionRunHook):  # no before_run, after_run, after_create_session or end
        def begin(self):
            self.began = True

    model = make_model(K)
    hook = OnlyBegin()
    model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[HookCallback([hook, T.SessionRunHook()])])
    assert hook.began
    assert _cache.get(model) is None  # no step of its own was built


def test_running_mean_gives_the_logs_keras_reports(K):
    model = make_model(K)
    hook = OnlyAfterRun()
    recorder = Recorder(K, X, Y, reference=None)
    model.fit(
        X,
        Y,
        batch_size=BATCH,
        epochs=2,
        verbose=0,
        shuffle=False,
        callbacks=[recorder, HookCallback(hook, values="running_mean")],
    )
    assert [dict(view) for view in hook.results] == recorder.train_logs
    assert _cache.get(model) is None  # no step of its own was built


def test_training_and_other_callbacks_are_exactly_as_without_hook_callback(K):
    def run(with_hooks: bool) -> tuple[Any, list[dict], list[np.ndarray]]:
        model = make_model(K)
        recorder = Recorder(K, X, Y, reference=None)
        callbacks = [recorder] + ([HookCallback(Seen(("loss", "accuracy")))] if with_hooks else [])
        history = model.fit(
            X, Y, batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=callbacks, validation_data=(X, Y)
        )
        return history.history, recorder.train_logs, model.get_weights()

    history, logs, weights = run(True)
    plain_history, plain_logs, plain_weights = run(False)
    assert history == plain_history and logs == plain_logs
    for a, b in zip(weights, plain_weights, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_dataset_of_unknown_size_ends_each_epoch_as_without_hook_callback(K):
    """The last step of an epoch of unknown length finds the data exhausted; Keras ends the epoch there."""

    def dataset() -> Any:
        data = tf.data.Dataset.from_tensor_slices((X, Y)).batch(BATCH)
        return data.filter(lambda x, y: True)  # Keras no longer knows how many batches there are

    def run(with_hooks: bool) -> tuple[Any, list[dict], list[np.ndarray], list[dict]]:
        model = make_model(K)
        recorder = Recorder(K, X, Y, reference=None)
        seen = Seen(("loss", "accuracy"))
        hooks = [HookCallback(seen), HookCallback(Seen(("loss",)), mode="eval", values="batch")]
        callbacks = [recorder] + (hooks if with_hooks else [])
        history = model.fit(dataset(), epochs=3, verbose=0, callbacks=callbacks, validation_data=dataset())
        return history.history, recorder.train_logs, model.get_weights(), seen.results

    history, logs, weights, seen = run(True)
    plain_history, plain_logs, plain_weights, _ = run(False)
    assert len(logs) == 3 * 4 and len(seen) == 3 * 4
    assert history == plain_history and logs == plain_logs
    for a, b in zip(weights, plain_weights, strict=True):
        np.testing.assert_array_equal(a, b)


@needs_backend("tensorflow", reason="Keras 3's TensorFlow trainer only")
def test_keras_3_tensorflow_calls_the_compiled_step_directly():
    """Without Keras's eager Optional and per-call dispatch around it (see `_batch._direct_step`)."""

    class Direct(T.SessionRunHook):
        def __init__(self) -> None:
            self.direct: list[bool] = []

        def before_run(self, run_context: Any) -> Any:
            return T.SessionRunArgs("loss")

        def after_run(self, run_context: Any, run_values: Any) -> None:
            self.direct.append(_cache[model]["train"]._concrete is not None)

    model = make_model(keras)
    hook = Direct()
    model.fit(X, Y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[HookCallback(hook)])
    # Every step, the first too: a run never switches functions (TF's stateful random
    # ops would start their streams over in the new one).
    assert hook.direct == [True] * 8
    assert _cache[model]["train"]._concrete is None  # the run holds no iterator past its end


def test_the_step_is_built_once_and_the_model_given_back_between_runs(K):
    def overrides(model: Any) -> list[tuple[int, str, Any]]:
        """The instance-level methods of the model and its metrics and containers."""
        objects = [
            model,
            *model.metrics,
            *(
                getattr(model, n, None)
                for n in ("_compile_metrics", "_compile_loss", "compiled_metrics", "compiled_loss")
            ),
        ]
        return [
            (id(o), name, vars(o)[name])
            for o in objects
            if o is not None
            for name in ("train_step", "update_state", "result", "build")
            if name in vars(o)
        ]

    model = make_model(K)
    model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0)  # Keras builds its own train function
    own_function, own_overrides = model.train_function, overrides(model)
    for _ in range(3):
        model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[HookCallback(Seen(("loss",)))])
        # Between runs the model is exactly Keras's: its own function, no overrides of ours.
        assert model.train_function is own_function
        assert overrides(model) == own_overrides
    wrapped = _cache[model]["train"]
    assert wrapped.original is own_function and wrapped.users == 0
    if keras.backend.backend() != "torch" or K.__name__ == "tf_keras":
        # Traced once for full batches and once for the smaller last one, not once per fit.
        assert wrapped.info.runs <= 2
    # A new compile() gives the model a new function, and the adapter a new step.
    model.compile(optimizer=model.optimizer, loss=model.loss, metrics=["accuracy"])
    model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[HookCallback(Seen(("loss",)))])
    assert _cache[model]["train"] is not wrapped


def test_two_hook_callbacks_in_one_fit_share_the_step(K):
    model = make_model(K)
    first, second = Seen(("loss",)), Seen(("loss", "accuracy"))
    recorder = Recorder(K, X, Y)
    model.fit(
        X,
        Y,
        batch_size=BATCH,
        epochs=1,
        verbose=0,
        shuffle=False,
        callbacks=[recorder, HookCallback(first), HookCallback(second)],
    )
    assert [r["loss"] for r in first.results] == [r["loss"] for r in second.results]
    assert [r["loss"] for r in first.results] == pytest.approx([b["loss"] for b in recorder.train_batch], rel=1e-6)
    assert _cache[model]["train"].users == 0


def test_a_model_error_leaves_the_step_until_the_run_is_closed(K):
    class Failing(K.layers.Layer):
        def call(self, inputs):
            return inputs

    model = make_model(K)
    model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0)
    own_function = model.train_function
    with HookCallback(Seen(("loss",))) as callback:
        with pytest.raises(ValueError):
            model.fit(X[:, :3], Y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[callback])
        assert model.train_function is not own_function  # the run is still open
    assert model.train_function is own_function  # closed on leaving the with block


class CountingMetric:
    """A stateful metric with its own update_state: it counts the batches it has seen."""

    @staticmethod
    def make(K: Any) -> Any:
        class Counted(K.metrics.Metric):
            def __init__(self, name: str = "counted", **kwargs: Any) -> None:
                super().__init__(name=name, **kwargs)
                self.seen = self.add_weight(name="seen", initializer="zeros")

            def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
                self.seen.assign_add(1.0)

            def result(self) -> Any:
                return self.seen * 1.0

        return Counted()


def custom_metric_model(K: Any, *metrics: Any) -> Any:
    model = make_model(K)
    model.compile(optimizer=K.optimizers.SGD(0.05), loss=model.loss, metrics=["accuracy", *metrics])
    return model


def test_a_keras_3_metric_with_its_own_update_state_gets_the_value_of_the_batch_alone():
    """Its own update, run again from its reset state with the stateless API, for the batch alone:
    what `test_on_batch` of the step's starting weights gives, not Keras's running value."""
    # A result() that returns the state variable itself read Keras's running value once; JAX's
    # symbolic build refuses one, with or without HookCallback.
    as_variable = keras.backend.backend() != "jax"
    make = lambda K: custom_metric_model(K, RunningMax(K, as_variable), CountingMetric.make(K))  # noqa: E731
    recorder = Recorder(keras, X, Y, reference=make)
    hook = Seen(("loss", "running_max", "counted"))
    make(keras).fit(
        X, Y, batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=[recorder, HookCallback(hook)]
    )
    assert [r["counted"] for r in hook.results] == [1.0] * 8  # Keras's own: 1, 2, 3, 4 each epoch
    assert [r["counted"] for r in recorder.train_logs] == [1.0, 2.0, 3.0, 4.0] * 2
    for step, (seen, own) in enumerate(zip(hook.results, recorder.train_batch, strict=True)):
        assert seen == pytest.approx({k: own[k] for k in ("loss", "running_max", "counted")}, rel=1e-6), step
    # The running maximum differs from the batch's alone where an earlier batch was larger.
    assert any(
        seen["running_max"] != pytest.approx(logs["running_max"], rel=1e-4)
        for seen, logs in zip(hook.results, recorder.train_logs, strict=True)
    )


def test_a_tf_keras_metric_with_its_own_update_state_is_an_error_only_when_fetched():
    import tf_keras

    # Not fetched: no error, and the other keys have their batch values.
    hook = Seen(("loss", "accuracy"))
    model = custom_metric_model(tf_keras, CountingMetric.make(tf_keras))
    model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[HookCallback(hook)])
    assert len(hook.results) == 4

    model = custom_metric_model(tf_keras, CountingMetric.make(tf_keras))
    with pytest.raises(BatchValueError) as info:
        model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[HookCallback(Seen(("counted",)))])
    message = str(info.value)
    assert "'counted'" in message and "Counted(name='counted')" in message
    assert "defines its own update_state" in message and "tf_keras cannot run that update apart" in message
    assert "values='running_mean'" in message
    assert "Raised in the fetches of Seen.before_run, called by HookCallback." in info.value.__notes__

    # Keras's running value, one argument away.
    model = custom_metric_model(tf_keras, CountingMetric.make(tf_keras))
    hook = Seen(("counted",))
    model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[HookCallback(hook, values="running_mean")])
    assert [r["counted"] for r in hook.results] == [1.0, 2.0, 3.0, 4.0]


@needs_backend("tensorflow", reason="TF stateful ops in a metric's update")
def test_a_keras_3_metric_whose_update_writes_outside_its_state_is_refused_and_not_run_twice():
    """Run again, its write to a variable outside its state would happen twice: no batch value,
    and the update runs once a step, as without HookCallback."""
    outside = tf.Variable(0.0, trainable=False)

    class CountsElsewhere(keras.metrics.Mean):
        def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
            outside.assign_add(1.0)
            super().update_state(keras.ops.mean(y_pred))

    model = custom_metric_model(keras, CountsElsewhere(name="elsewhere"))
    with pytest.raises(BatchValueError, match=r"would also run the stateful ops \['AssignAddVariableOp'\]"):
        model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[HookCallback(Seen(("elsewhere",)))])
    outside.assign(0.0)
    hook = Seen(("loss",))
    custom_metric_model(keras, CountsElsewhere(name="elsewhere")).fit(
        X, Y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[HookCallback(hook)]
    )
    assert len(hook.results) == 4 and float(outside.numpy()) == 4.0


class TwiceUpdated(keras.Model):
    """A custom test_step that updates one Keras `Mean` twice per step: with the MSE, then the MAE."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.tracker = keras.metrics.Mean(name="errors")

    def call(self, x: Any) -> Any:
        return self.dense(x)

    def test_step(self, data: Any) -> Any:
        x, y = data
        error = self(x) - keras.ops.expand_dims(keras.ops.cast(y, "float32"), -1)
        self.tracker.update_state(keras.ops.mean(keras.ops.square(error)))
        self.tracker.update_state(keras.ops.mean(keras.ops.abs(error)))
        return {"errors": self.tracker.result()}

    @property
    def metrics(self) -> list[Any]:
        return [self.tracker]


@needs_backend("tensorflow", "torch", reason="JAX's test_step is stateless: test_step(state, data)")
def test_a_metric_updated_twice_in_a_step_gives_the_mean_of_that_step_alone():
    keras.utils.set_random_seed(0)
    model = TwiceUpdated()
    model.compile()
    model(X[:1])
    hook = Seen(("errors",))
    model.evaluate(X, Y, batch_size=BATCH, verbose=0, callbacks=[HookCallback(hook, mode="eval", values="batch")])
    expected = []
    for start in range(0, len(X), BATCH):
        error = model.predict(X[start : start + BATCH], verbose=0)[:, 0] - Y[start : start + BATCH]
        expected.append((np.mean(error**2) + np.mean(np.abs(error))) / 2)
    assert [r["errors"] for r in hook.results] == pytest.approx(expected, rel=1e-5)
    # Keras's own value is the mean since the evaluation began, which differs.
    assert hook.results[-1]["errors"] != pytest.approx(
        float(keras.ops.convert_to_numpy(model.tracker.result())), rel=1e-3
    )


def iou_model(K: Any) -> Any:
    """The small MLP with Keras's MeanIoU, whose update assigns rather than adds."""
    model = make_model(K)
    model.compile(
        optimizer=K.optimizers.SGD(0.05),
        loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[K.metrics.MeanIoU(num_classes=N_CLASSES, sparse_y_pred=False, name="iou")],
    )
    return model


def test_a_keras_metric_that_assigns_rather_than_adds_is_exact_too(K):
    # MeanIoU's update assigns `total_cm + the batch's confusion matrix`: its batch
    # state is computed apart, from the reset state, rather than read off an add.
    recorder = Recorder(K, X, Y, reference=iou_model)
    hook = Seen(("loss", "iou"))
    iou_model(K).fit(
        X, Y, batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=[recorder, HookCallback(hook)]
    )
    for step, (seen, own) in enumerate(zip(hook.results, recorder.train_batch, strict=True)):
        assert seen == pytest.approx({key: own[key] for key in ("loss", "iou")}, rel=1e-5), f"step {step}"
    assert hook.results[2]["iou"] != pytest.approx(recorder.train_logs[2]["iou"], rel=1e-3)


class PlainValueModel(keras.Model):
    """A custom train_step returning a value that is no metric's result, beside the loss tracker's."""

    def train_step(self, data: Any) -> Any:
        logs = super().train_step(data)
        return {**logs, "constant": keras.ops.convert_to_tensor(7.0)}


@needs_backend("tensorflow", reason="the custom train_step calls the TF backend's super().train_step")
def test_a_value_that_is_no_metric_result_passes_through():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((N_FEATURES,))
    model = PlainValueModel(inputs, keras.layers.Dense(N_CLASSES)(inputs))
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hook = Seen(("loss", "constant"))
    recorder = Recorder(keras, X, Y, reference=None)
    model.fit(X, Y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[recorder, HookCallback(hook)])
    assert [r["constant"] for r in hook.results] == [7.0] * 4
    assert hook.results[1]["loss"] != pytest.approx(recorder.train_logs[1]["loss"], rel=1e-3)


@needs_backend("tensorflow", "jax", reason="Keras's torch backend requires steps_per_execution=1")
@pytest.mark.filterwarnings("ignore:HookCallback. the model was compiled with steps_per_execution")
def test_with_steps_per_execution_the_values_are_each_execution_last_batch(K):
    reference = Seen(("loss", "accuracy"))
    make_model(K).fit(
        X[:96], Y[:96], batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=[HookCallback(reference)]
    )
    model = make_model(K, steps_per_execution=2)
    hook = Seen(("loss", "accuracy"))
    model.fit(X[:96], Y[:96], batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=[HookCallback(hook)])
    # Three batches an epoch: executions of steps (0, 1) and (2); each counts as its last step.
    last_steps = [1, 2, 4, 5]
    assert hook.results == [pytest.approx(reference.results[i], rel=1e-6) for i in last_steps]


# -- against TF1: real hooks, unchanged, on the same model in a MonitoredSession ---------


@pytest.fixture
def tf_info():
    """The INFO messages of the `tensorflow` logger (where TF1 hooks log), as they come."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno == logging.INFO:
                lines.append(record.getMessage())

    logger = tf.get_logger()
    handler, level = Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.mark.parametrize("values", ["batch", "running_mean"])
def test_a_counters_hook_like_opennmts_and_logging_hook_log_what_they_logged_under_tf1(K, clock, tf_info, values):
    """A hook modelled on OpenNMT-tf's `CountersHook` (`tests/modelled_hooks.py`) on a counter that adds
    each batch's correct predictions, and `LoggingTensorHook` on the loss: the lines they log
    under a real MonitoredSession training the same model, and through HookCallback."""
    steps, every = 20, 5
    model = make_model(K)
    start = weights_of(model)

    def tf1_hooks() -> list[Any]:
        graph = tf.compat.v1.get_default_graph()
        predictions = tf.argmax(graph.get_tensor_by_name("logits:0"), 1)
        correct = tf.reduce_sum(tf.cast(tf.equal(graph.get_tensor_by_name("y:0"), predictions), tf.int64))
        modelled_hooks.register_counter("correct", correct)  # in the model_fn
        return [modelled_hooks.CounterRatesHook(every_n_steps=every), T.LoggingTensorHook(["loss"], every_n_iter=every)]

    def keras_hooks() -> list[Any]:
        # The same model_fn line, on the batch's accuracy: batches of 32, so 32 * accuracy correct.
        modelled_hooks.register_counter("correct", tf.round(log_tensor("accuracy") * BATCH))
        return [modelled_hooks.CounterRatesHook(every_n_steps=every), T.LoggingTensorHook(["loss"], every_n_iter=every)]

    run_tf1_mlp(tf1_hooks, start, steps, before_step=lambda: setattr(clock, "now", clock.now + 1.0))
    tf1_lines = list(tf_info)
    tf_info.clear()
    model.fit(
        X_320,
        Y_320,
        batch_size=BATCH,
        epochs=2,
        verbose=0,
        shuffle=False,
        callbacks=[Tick(K, clock, 1.0), HookCallback(keras_hooks, values=values)],
    )
    keras_lines = list(tf_info)

    def parsed(lines: list[str], pattern: str) -> list[float]:
        return [float(m.group(1)) for m in map(re.compile(pattern).match, lines) if m]

    # CounterRatesHook logs "<counter op name>: <rate>" (TF2 names the op of a resource
    # variable's assign_add "AssignAddVariableOp", under TF1 and Keras alike).
    rate, loss = r"^\w+: (-?[\d.]+(?:e[+-]?\d+)?)$", r"^loss = (\S+)"
    tf1_rates, keras_rates = parsed(tf1_lines, rate), parsed(keras_lines, rate)
    tf1_losses, keras_losses = parsed(tf1_lines, loss), parsed(keras_lines, loss)
    # Triggers at steps 0, 5, 10, 15: CounterRatesHook keeps its first count at the second, logs from the third.
    assert len(tf1_rates) == 2 and len(tf1_losses) == 4
    if values == "batch":
        assert keras_rates == tf1_rates  # correct predictions per second, over each 5 steps
        assert keras_losses == pytest.approx(tf1_losses, rel=1e-5)
    else:
        # Keras's running means: the counter adds up means, so the rates drift off, and the
        # loss is a mean over the epoch so far (equal to the batch's only at an epoch's start).
        assert keras_rates != tf1_rates
        assert keras_losses[0] == pytest.approx(tf1_losses[0], rel=1e-5)
        assert keras_losses[1:] != pytest.approx(tf1_losses[1:], rel=1e-3)
