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
from support import BATCH, TF1_NAMES, FinalValues, _X, _Y, make_model, tf1_mlp, weights_of

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
                batch = slice(step % SPE * BATCH, (step % SPE + 1) * BATCH)
                session.run(train_op, {"x:0": x[batch], "y:0": _Y[batch]})
                step += 1
    return final.values


def fit(
    K: Any, callbacks: list[Any], epochs: int, x: np.ndarray = _X, validation: Any = None, model: Any = None
) -> Any:
    """The Keras side: the same MLP, the same first SPE batches each epoch, under `fit`."""
    model = model or make_model(K, layer_names=TF1_NAMES)
    n = SPE * BATCH
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
    # Batch logs are the epoch's running means: the second batch's is the mean of the first two losses.
    assert [c[1] for c in ours.calls if c[0] == "on_epoch_begin"] == [0, 1]


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
