"""`CallbackHook`: Keras callbacks in a TF1 loop do what the same callbacks do under `fit`.

Each test trains `support.tf1_mlp` under a real `MonitoredTrainingSession` with
`CallbackHook`, and the same MLP (same initial weights, same batches in the same
order) under Keras's `fit`, and compares what the same callbacks did on both
sides, for Keras 3 and tf_keras (the `K` fixture).
"""

from __future__ import annotations

import csv
import glob
import os
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import _X, _Y, BATCH, TF1_NAMES, FinalValues, make_model, tf1_mlp, weights_of

from hooks2callbacks import CallbackHook, restore_tf1_checkpoint

SPE = 3  # batches per epoch: the first SPE batches of the shared data, every epoch
EVENTS = (
    "on_train_begin",
    "on_train_end",
    "on_epoch_begin",
    "on_epoch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_test_begin",
    "on_test_end",
    "on_test_batch_begin",
    "on_test_batch_end",
)


def Recorder(K: Any) -> Any:
    """A callback of package `K` that records every call, `(event, *args)`, logs as a dict copy."""

    class Recording(K.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[Any, ...]] = []

        def set_params(self, params: Any) -> None:
            super().set_params(params)
            self.calls.append(("set_params", dict(params)))

        def set_model(self, model: Any) -> None:
            super().set_model(model)
            self.calls.append(("set_model",))

    for event in EVENTS:

        def record(self: Any, *args: Any, _event: str = event, **kwargs: Any) -> None:
            args = (*args, *kwargs.values())
            self.calls.append((_event, *[dict(a) if isinstance(a, dict) else a for a in args]))

        setattr(Recording, event, record)
    return Recording()


def assert_same_calls(tf1: list[tuple[Any, ...]], fit: list[tuple[Any, ...]]) -> None:
    """The same events with the same indices and log keys; log values equal to float32 rounding."""
    assert [c[0] for c in tf1] == [c[0] for c in fit]
    for ours, theirs in zip(tf1, fit, strict=True):
        assert len(ours) == len(theirs), (ours, theirs)
        for a, b in zip(ours, theirs, strict=True):
            if isinstance(a, dict) and a and isinstance(next(iter(a.values())), float):
                assert sorted(a) == sorted(b), (ours, theirs)
                np.testing.assert_allclose([a[k] for k in sorted(a)], [b[k] for k in sorted(b)], rtol=2e-5)
            else:
                assert a == b, (ours, theirs)


def train_tf1(
    K: Any,
    callbacks: list[Any],
    epochs: int,
    x: np.ndarray = _X,
    hooks: Callable[[], list[Any]] = list,
    validation: tuple[np.ndarray, np.ndarray] | None = None,
    samples: int = SPE * BATCH,
    **hook_args: Any,
) -> dict[str, Any]:
    """Trains the TF1 MLP from a fresh `make_model(K)`'s weights with `CallbackHook(callbacks)`.

    Returns:
        The graph's variables at the end, by name.
    """
    weights = weights_of(make_model(K, layer_names=TF1_NAMES))
    final = FinalValues()
    with tf.Graph().as_default() as graph:
        train_op = tf1_mlp(weights)
        labels = graph.get_tensor_by_name("y:0")
        predicted = tf.argmax(graph.get_tensor_by_name("logits:0"), 1)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(predicted, labels), tf.float32))
        tf.identity(tf.shape(labels)[0], name="batch_size")

        def evaluate(session: Any) -> dict[str, Any]:
            assert validation is not None
            loss, acc = session.run(["loss:0", accuracy], {"x:0": validation[0], "y:0": validation[1]})
            return {"loss": loss, "accuracy": acc}

        hook = CallbackHook(
            callbacks,
            logs={"loss": "loss", "accuracy": accuracy},
            steps_per_epoch=SPE,
            epochs=epochs,
            validation=evaluate if validation is not None else None,
            **hook_args,
        )
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook, *hooks(), final]) as session:
            step = 0
            while not session.should_stop():
                # The epoch's first `samples` samples in batches of BATCH, as fit batches them.
                batch = slice(step % SPE * BATCH, min((step % SPE + 1) * BATCH, samples))
                session.run(train_op, {"x:0": x[batch], "y:0": _Y[batch]})
                step += 1
    return final.values


def fit(
    K: Any,
    callbacks: list[Any],
    epochs: int,
    x: np.ndarray = _X,
    validation: Any = None,
    model: Any = None,
    samples: int = SPE * BATCH,
) -> Any:
    """The Keras side: the same MLP, the same first SPE batches each epoch, under `fit`."""
    model = model or make_model(K, layer_names=TF1_NAMES)
    n = samples
    model.fit(
        x[:n],
        _Y[:n],
        batch_size=BATCH,
        epochs=epochs,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
        validation_data=validation,
        validation_batch_size=BATCH,
    )
    return model


def tf1_weights(values: dict[str, Any]) -> list[np.ndarray]:
    return [values[f"{scope}/{name}"] for scope in TF1_NAMES for name in ("kernel", "bias")]


def csv_rows(path: Any) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def scalars(directory: Any) -> dict[str, list[tuple[int, float]]]:
    """TF2 scalar summaries (tensor events) of one TensorBoard run directory: tag -> [(step, value)]."""
    found: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "events*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "scalars":
                    found.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    return found


# -- the core: events and logs in fit's order ------------------------------------------------------


def test_events_and_logs_are_those_of_fit(K):
    ours, theirs = Recorder(K), Recorder(K)
    train_tf1(K, [ours], epochs=2)
    fit(K, [theirs], epochs=2)
    assert_same_calls(ours.calls, theirs.calls)
    # Two epochs of SPE batches each, counted from the global step, as fit counts them.
    assert [c[1] for c in ours.calls if c[0] == "on_epoch_begin"] == [0, 1]
    assert [c[1] for c in ours.calls if c[0] == "on_train_batch_end"] == [*range(SPE)] * 2


def test_batch_size_weighs_the_running_means_as_keras_does_for_a_smaller_last_batch(K):
    # Batches of 32, 32 and 16 each epoch: Keras weighs each batch's loss by its size.
    samples = SPE * BATCH - BATCH // 2
    ours, theirs = Recorder(K), Recorder(K)
    train_tf1(K, [ours], epochs=2, samples=samples, batch_size="batch_size")
    fit(K, [theirs], epochs=2, samples=samples)
    assert_same_calls(ours.calls, theirs.calls)


def test_csv_logger_history_and_tensorboard_match_fit(K, tmp_path):
    ours = [K.callbacks.CSVLogger(str(tmp_path / "tf1.csv")), K.callbacks.TensorBoard(str(tmp_path / "tf1"))]
    theirs = [K.callbacks.CSVLogger(str(tmp_path / "fit.csv")), K.callbacks.TensorBoard(str(tmp_path / "fit"))]
    history = K.callbacks.History()
    train_tf1(K, [*ours, history], epochs=3)
    model = fit(K, theirs, epochs=3)

    rows, fit_rows = csv_rows(tmp_path / "tf1.csv"), csv_rows(tmp_path / "fit.csv")
    assert [list(r) for r in rows] == [list(r) for r in fit_rows]
    for row, fit_row in zip(rows, fit_rows, strict=True):
        assert row["epoch"] == fit_row["epoch"]
        np.testing.assert_allclose(float(row["loss"]), float(fit_row["loss"]), rtol=2e-5)
        np.testing.assert_allclose(float(row["accuracy"]), float(fit_row["accuracy"]), rtol=2e-5)

    assert history.epoch == model.history.epoch == [0, 1, 2]
    assert sorted(history.history) == sorted(model.history.history)
    for key, values in history.history.items():
        np.testing.assert_allclose(values, model.history.history[key], rtol=2e-5)

    tf1_scalars, fit_scalars = scalars(tmp_path / "tf1" / "train"), scalars(tmp_path / "fit" / "train")
    # Keras 3's TensorBoard logs the rate of a Keras optimizer only (an isinstance check): the
    # stand-in is none, so `epoch_learning_rate` is the one tag that fit writes and CallbackHook does not.
    fit_scalars.pop("epoch_learning_rate", None)
    assert sorted(tf1_scalars) == sorted(fit_scalars) and tf1_scalars
    for tag, points in tf1_scalars.items():
        assert [s for s, _ in points] == [s for s, _ in fit_scalars[tag]]
        np.testing.assert_allclose([v for _, v in points], [v for _, v in fit_scalars[tag]], rtol=2e-5)


def test_early_stopping_stops_at_fit_epoch_and_restores_its_weights(K):
    def stopper() -> Any:
        # No epoch improves on the first by 10: training stops after epoch 1 and restores epoch 0's weights.
        return K.callbacks.EarlyStopping(monitor="loss", min_delta=10.0, patience=1, restore_best_weights=True)

    ours, theirs = stopper(), stopper()
    recorded, fit_recorded = Recorder(K), Recorder(K)
    values = train_tf1(K, [ours, recorded], epochs=6)
    model = fit(K, [theirs, fit_recorded], epochs=6)
    assert ours.stopped_epoch == theirs.stopped_epoch > 0
    assert_same_calls(recorded.calls, fit_recorded.calls)
    for tf1_weight, keras_weight in zip(tf1_weights(values), weights_of(model), strict=True):
        np.testing.assert_allclose(tf1_weight, keras_weight, rtol=1e-5, atol=1e-6)


def test_terminate_on_nan_stops_at_fit_step(K):
    # `inf` in an input makes the next layer's `inf - inf` NaN (oneDNN's relu may map a NaN input to 0).
    x = _X.copy()
    x[BATCH + 3, 0] = np.inf
    ours, theirs = Recorder(K), Recorder(K)
    train_tf1(K, [K.callbacks.TerminateOnNaN(), ours], epochs=3, x=x)
    fit(K, [K.callbacks.TerminateOnNaN(), theirs], epochs=3, x=x)
    ends = [c for c in ours.calls if c[0] == "on_train_batch_end"]
    assert len(ends) == 2 and np.isnan(ends[-1][2]["loss"])
    assert_same_calls(ours.calls, theirs.calls)
    assert ours.calls[-2][0] == "on_epoch_end" and ours.calls[-1][0] == "on_train_end"


def test_validation_function_gives_val_logs_as_fit_validation(K, tmp_path):
    validation = (_X[-BATCH:], _Y[-BATCH:])
    ours = K.callbacks.CSVLogger(str(tmp_path / "tf1.csv"))
    theirs = K.callbacks.CSVLogger(str(tmp_path / "fit.csv"))
    train_tf1(K, [ours], epochs=2, validation=validation)
    fit(K, [theirs], epochs=2, validation=validation)
    rows, fit_rows = csv_rows(tmp_path / "tf1.csv"), csv_rows(tmp_path / "fit.csv")
    assert [list(r) for r in rows] == [list(r) for r in fit_rows]
    for row, fit_row in zip(rows, fit_rows, strict=True):
        for key in ("val_loss", "val_accuracy", "loss"):
            np.testing.assert_allclose(float(row[key]), float(fit_row[key]), rtol=2e-5)


# -- the learning rate: a TF1 variable the callbacks read and set ----------------------------------


class RateRead(tf.compat.v1.train.SessionRunHook):
    """Fetches the `learning_rate` variable in each step's run: the rate that step's training read."""

    def __init__(self) -> None:
        self.rates: list[float] = []

    def before_run(self, run_context: Any) -> Any:
        return tf.compat.v1.train.SessionRunArgs("learning_rate:0")

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.rates.append(float(run_values.results))


def RateSeen(K: Any) -> Any:
    """A callback that keeps `model.optimizer.learning_rate` at each batch's begin."""

    class Seen(K.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.rates: list[float] = []

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.rates.append(float(np.asarray(self.model.optimizer.learning_rate)))

    return Seen()


@pytest.mark.parametrize(
    "scheduler",
    [
        lambda K: K.callbacks.LearningRateScheduler(lambda epoch, rate: 0.05 * 0.5**epoch),
        # No epoch improves on the first by 10: the rate halves at each epoch's end from the second on.
        lambda K: K.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0, min_delta=10.0),
    ],
    ids=["LearningRateScheduler", "ReduceLROnPlateau"],
)
def test_rate_schedulers_set_the_tf1_variable_training_reads(K, scheduler):
    read, seen, fit_seen = RateRead(), RateSeen(K), RateSeen(K)
    values = train_tf1(K, [scheduler(K), seen], epochs=3, hooks=lambda: [read], learning_rate="learning_rate")
    model = fit(K, [scheduler(K), fit_seen], epochs=3)
    np.testing.assert_allclose(seen.rates, fit_seen.rates, rtol=1e-6)
    np.testing.assert_allclose(read.rates, fit_seen.rates, rtol=1e-6)
    assert len(set(read.rates)) > 1  # the rate changed
    for tf1_weight, keras_weight in zip(tf1_weights(values), weights_of(model), strict=True):
        np.testing.assert_allclose(tf1_weight, keras_weight, rtol=1e-5, atol=1e-6)


# -- weights: get, set, save through ops built in begin() ------------------------------------------


def test_model_checkpoint_weights_only_writes_a_tf1_checkpoint_restore_tf1_checkpoint_loads(K, tmp_path):
    # Keras 3's ModelCheckpoint(save_weights_only=True) insists on `.weights.h5`: the stand-in drops the
    # suffix and writes a TF1 checkpoint at the rest. tf_keras's takes a checkpoint prefix as it is.
    suffix = ".weights.h5" if K is keras else ""
    checkpoint = K.callbacks.ModelCheckpoint(str(tmp_path / f"w-{{epoch:02d}}{suffix}"), save_weights_only=True)
    values = train_tf1(K, [checkpoint], epochs=2)
    trained = fit(K, [], epochs=2)
    assert sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "w-*.index"))) == ["w-01.index", "w-02.index"]
    assert tf.train.load_variable(str(tmp_path / "w-02"), "global_step") == 2 * SPE

    restored = make_model(K, layer_names=TF1_NAMES)
    restore_tf1_checkpoint(restored, str(tmp_path / "w-02"))
    for tf1_weight, restored_weight, keras_weight in zip(
        tf1_weights(values), weights_of(restored), weights_of(trained), strict=True
    ):
        np.testing.assert_array_equal(restored_weight, tf1_weight)
        np.testing.assert_allclose(restored_weight, keras_weight, rtol=1e-5, atol=1e-6)


# -- evaluation, stops and faults ------------------------------------------------------------------


def test_eval_mode_calls_test_events_as_evaluate_and_tensorboard_writes_the_same(K, tmp_path):
    ours, theirs = Recorder(K), Recorder(K)
    boards = K.callbacks.TensorBoard(str(tmp_path / "tf1")), K.callbacks.TensorBoard(str(tmp_path / "keras"))
    model = make_model(K, layer_names=TF1_NAMES)
    weights = weights_of(model)
    steps = 4
    with tf.Graph().as_default() as graph:
        tf1_mlp(weights)
        predicted = tf.argmax(graph.get_tensor_by_name("logits:0"), 1)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(predicted, graph.get_tensor_by_name("y:0")), tf.float32))
        logs = {"loss": "loss", "accuracy": accuracy}
        hook = CallbackHook([ours, boards[0]], logs=logs, steps_per_epoch=steps, mode="eval")
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            for step in range(steps):
                batch = slice(step * BATCH, (step + 1) * BATCH)
                session.run("loss:0", {"x:0": _X[batch], "y:0": _Y[batch]})
    x, y = _X[: steps * BATCH], _Y[: steps * BATCH]
    model.evaluate(x, y, batch_size=BATCH, verbose=0, callbacks=[theirs, boards[1]])
    assert_same_calls(ours.calls, theirs.calls)
    assert ours.calls[-1][0] == "on_test_end"
    tf1_scalars, keras_scalars = scalars(tmp_path / "tf1" / "validation"), scalars(tmp_path / "keras" / "validation")
    assert sorted(tf1_scalars) == sorted(keras_scalars) and tf1_scalars
    for tag, points in tf1_scalars.items():
        assert [s for s, _ in points] == [s for s, _ in keras_scalars[tag]]
        np.testing.assert_allclose([v for _, v in points], [v for _, v in keras_scalars[tag]], rtol=2e-5)


def test_a_stop_by_another_hook_closes_the_epoch_as_a_stop_in_fit(K):
    class StopAt(K.callbacks.Callback):
        """Stops fit after the first batch of epoch 1."""

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if (self.epoch, batch) == (1, 0):
                self.model.stop_training = True

    ours, theirs = Recorder(K), Recorder(K)
    # TF1: StopAtStepHook ends the loop after the first batch of epoch 1; the hook closes that epoch in end().
    train_tf1(K, [ours], epochs=3, hooks=lambda: [tf.compat.v1.train.StopAtStepHook(last_step=SPE + 1)])
    fit(K, [StopAt(), theirs], epochs=3)
    assert_same_calls(ours.calls, theirs.calls)
    assert [c[0] for c in ours.calls].count("on_train_end") == 1


def test_a_raising_callback_ends_the_run_as_a_raising_hook_and_is_named(K):
    class Boom(K.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if epoch == 1:
                raise RuntimeError("boom")

    ours, theirs = Recorder(K), Recorder(K)
    with pytest.raises(RuntimeError, match="boom") as raised:
        train_tf1(K, [ours, Boom()], epochs=3)
    assert any("Raised by Boom.on_epoch_end, called by CallbackHook" in note for note in raised.value.__notes__)
    with pytest.raises(RuntimeError, match="boom"):
        fit(K, [theirs, Boom()], epochs=3)
    # As under fit, which has no try/finally: no on_train_end (MonitoredSession skips end()).
    assert_same_calls(ours.calls, theirs.calls)
    assert "on_train_end" not in [c[0] for c in ours.calls]


def MetricsLogger(K: Any) -> Any:
    """A third-party logger in the shape of W&B's `WandbMetricsLogger`, with a list for the W&B run.

    Written against Keras's documented callback API only: `on_batch_end` (which
    `on_train_batch_end` calls), `on_epoch_end`, and `model.optimizer`'s
    `learning_rate` and `iterations`.
    """

    class Logger(K.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.logged: list[dict[str, Any]] = []

        def _learning_rate(self) -> float:
            return float(np.asarray(self.model.optimizer.learning_rate))

        def on_batch_end(self, batch: int, logs: Any = None) -> None:
            step = int(np.asarray(self.model.optimizer.iterations))
            self.logged.append(
                {"batch/batch_step": step, "batch/learning_rate": self._learning_rate()}
                | {f"batch/{k}": v for k, v in (logs or {}).items()}
            )

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.logged.append(
                {"epoch/epoch": epoch, "epoch/learning_rate": self._learning_rate()}
                | {f"epoch/{k}": v for k, v in (logs or {}).items()}
            )

    return Logger()


def test_a_third_party_logger_works_unchanged(K):
    ours, theirs = MetricsLogger(K), MetricsLogger(K)
    train_tf1(K, [ours], epochs=2, learning_rate="learning_rate")
    fit(K, [theirs], epochs=2)
    assert [sorted(row) for row in ours.logged] == [sorted(row) for row in theirs.logged]
    for row, fit_row in zip(ours.logged, theirs.logged, strict=True):
        np.testing.assert_allclose([row[k] for k in sorted(row)], [fit_row[k] for k in sorted(row)], rtol=2e-5)


# -- what the stand-in refuses, and bad input ------------------------------------------------------


def test_model_save_is_refused_naming_the_callback_and_the_way_out(tmp_path):
    with pytest.raises(NotImplementedError, match=r"ModelCheckpoint\._save_model called model\.save") as raised:
        train_tf1(keras, [keras.callbacks.ModelCheckpoint(str(tmp_path / "m.keras"))], epochs=1)
    assert "save_weights_only=True" in str(raised.value)


def test_a_rate_read_without_a_named_variable_names_the_argument(K):
    with pytest.raises((AttributeError, ValueError)) as raised:
        train_tf1(K, [K.callbacks.LearningRateScheduler(lambda epoch, rate: rate)], epochs=1)
    text = "\n".join([str(raised.value), *getattr(raised.value, "__notes__", [])])
    # The method that read it differs by version (Keras 3.15: `_update_optimizer_lr`).
    assert "found no learning rate" in text or "no learning-rate variable was named" in text
    assert "LearningRateScheduler." in text and "CallbackHook(..., learning_rate=" in text


def test_bad_arguments_are_refused_in_the_constructor():
    tf_keras = pytest.importorskip("tf_keras")
    with pytest.raises(TypeError, match=r"CallbackHook\(callbacks=...\) received .*object"):
        CallbackHook([object()], steps_per_epoch=1)
    with pytest.raises(TypeError, match="Keras 3 and tf_keras callbacks together"):
        CallbackHook([keras.callbacks.History(), tf_keras.callbacks.History()])
    with pytest.raises(ValueError, match=r"steps_per_epoch=...\) must be a positive int; received 0"):
        CallbackHook([], steps_per_epoch=0)
    with pytest.raises(ValueError, match=r"mode=...\) must be one of \('train', 'eval'\); received 'predict'"):
        CallbackHook([], mode="predict")
    with pytest.raises(ValueError, match=r"aggregates=...\) names \['auc'\], which are not keys of logs \['loss'\]"):
        CallbackHook([], logs={"loss": "loss"}, aggregates=["auc"])


def test_tf_keras_tensorboard_made_inside_a_graph_is_refused_with_the_way_out(tmp_path):
    tf_keras = pytest.importorskip("tf_keras")
    with tf.Graph().as_default():
        board = tf_keras.callbacks.TensorBoard(str(tmp_path))
        with pytest.raises(TypeError, match=r"tf_keras's TF1 TensorBoard .*Construct it outside"):
            CallbackHook([board])


def test_names_that_are_not_in_the_graph_are_refused_in_begin():
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        with pytest.raises(ValueError, match=r"cannot fetch logs\['loss'\] = 'loss:0'"):
            CallbackHook([], logs={"loss": "loss"}).begin()
        with pytest.raises(ValueError, match=r"learning_rate=...\) names 'rate', which is not a variable"):
            CallbackHook([], learning_rate="rate").begin()
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="found no global step"):
            CallbackHook([]).begin()


def test_eval_mode_needs_no_global_step_and_ends_with_the_mean_of_the_batches(K):
    values = [np.float32(v) for v in (0.5, 1.25, 2.0)]
    ours = Recorder(K)
    with tf.Graph().as_default():
        value = tf.compat.v1.placeholder(tf.float32, [], name="value")
        loss = tf.identity(value, name="loss")
        hook = CallbackHook([ours], logs={"loss": loss}, steps_per_epoch=len(values), mode="eval")
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            fetched = [session.run(loss, {value: v}) for v in values]
    ends = [c for c in ours.calls if c[0] in ("on_test_batch_end", "on_test_end")]
    expected = [float(np.mean(np.asarray(fetched[: i + 1], np.float32), dtype=np.float32)) for i in range(3)]
    assert [c[-1]["loss"] for c in ends] == [*expected, expected[-1]]


def test_lambda_callback_sees_the_epochs_and_logs_of_fit(K):
    def seen() -> tuple[list[Any], Any]:
        epochs: list[Any] = []
        return epochs, K.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: epochs.append((epoch, dict(logs))))

    (ours, ours_callback), (theirs, theirs_callback) = seen(), seen()
    train_tf1(K, [ours_callback], epochs=2)
    fit(K, [theirs_callback], epochs=2)
    assert [e for e, _ in ours] == [e for e, _ in theirs] == [0, 1]
    for (_, logs), (_, fit_logs) in zip(ours, theirs, strict=True):
        assert sorted(logs) == sorted(fit_logs)
        np.testing.assert_allclose([logs[k] for k in sorted(logs)], [fit_logs[k] for k in sorted(logs)], rtol=2e-5)


def test_backup_and_restore_is_refused_naming_it(tmp_path):
    with pytest.raises(AttributeError, match=r"BackupAndRestore\.\w+ read model\.\w+ under CallbackHook"):
        train_tf1(keras, [keras.callbacks.BackupAndRestore(str(tmp_path))], epochs=1)


def test_a_session_recreated_after_an_aborted_step_goes_on_without_a_second_train_begin(K):
    class AbortOnce(tf.compat.v1.train.SessionRunHook):
        """Raises AbortedError once, after the fifth run (global step 4): MonitoredSession recreates its session."""

        def __init__(self) -> None:
            self.runs = 0
            self.aborted = False

        def after_run(self, run_context: Any, run_values: Any) -> None:
            # Counted here, not fetched: a fetch of the step variable races with its increment in TF1.
            self.runs += 1
            if self.runs == 5 and not self.aborted:
                self.aborted = True
                raise tf.errors.AbortedError(None, None, "preempted")

    ours, abort = Recorder(K), AbortOnce()
    train_tf1(K, [ours], epochs=2, hooks=lambda: [abort])
    events = [c[0] for c in ours.calls]
    assert abort.aborted
    assert events.count("on_train_begin") == 1 and events.count("on_train_end") == 1
    # No checkpoint to restore: the new session starts again at global step 0, so epoch 0 begins again,
    # and the run ends after two whole epochs of the new session's steps.
    assert [c[1] for c in ours.calls if c[0] == "on_epoch_begin"] == [0, 1, 0, 1]
    assert [c[1] for c in ours.calls if c[0] == "on_epoch_end"] == [0, 0, 1]
