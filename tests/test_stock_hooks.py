"""The stock hooks of tf.compat.v1.train, unchanged, on a real small Keras fit/evaluate.

Expected values come from the run itself (the logs Keras reports, recorded by a
plain Keras callback in the same call) or from the hooks' TF1 semantics; time
is a fake clock, so nothing here sleeps.
"""

from __future__ import annotations

import logging
import math
import re
import warnings
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from support import (
    TF1_NAMES,
    ClockExhausted,
    Recorder,
    Tick,
    iterations,
    make_data,
    make_model,
    nan_sample_weight,
    needs_backend,
    read_scalars,
    tf1_mlp,
    weights_of,
)
from tf_slim.training.evaluation import SummaryAtEndHook

from hooks2callbacks import HookCallback, log_tensor

T = tf.compat.v1.train
X, Y = make_data()  # 320 samples
BATCH = 32
STEPS_PER_EPOCH = len(X) // BATCH  # 10


# -- helpers -------------------------------------------------------------------


def fit(K, model, hooks, epochs=1, x=X, y=Y, extra_callbacks=(), **kwargs):
    """Runs `model.fit` with the hooks; returns the Recorder."""
    recorder = Recorder(K, x, y, kwargs.get("sample_weight"))
    callbacks = [*extra_callbacks, recorder, HookCallback(hooks, mode=kwargs.pop("mode", "train"))]
    model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, shuffle=False, callbacks=callbacks, **kwargs)
    return recorder


@pytest.fixture
def hook_log():
    """The messages the stock hooks log through the `tensorflow` logger, as (level, message)."""
    records: list[tuple[int, str]] = []

    class Collect(logging.Handler):
        def emit(self, record):
            if record.filename == "basic_session_run_hooks.py":
                records.append((record.levelno, record.getMessage()))

    logger = tf.get_logger()
    handler = Collect(level=logging.DEBUG)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


_STAT = re.compile(r"(\w+) = (\S+?)(?:,|$| \()")
_ELAPSED = re.compile(r" \((\d+\.\d{3}) sec\)$")


def parse_stats(message: str) -> dict[str, float]:
    """Parses LoggingTensorHook's default line `tag = value, tag = value (x.xxx sec)`."""
    return {tag: float(value) for tag, value in _STAT.findall(message)}


def elapsed_of(message: str) -> str | None:
    match = _ELAPSED.search(message)
    return None if match is None else match.group(1)


def picked(logs: dict, keys=("loss", "accuracy")) -> dict:
    return {key: logs[key] for key in keys}


def batch_values(logs: dict, keys=("loss", "accuracy")) -> Any:
    """The batch's own values (`Recorder.*_batch`), to float32 rounding: computed apart from the step."""
    return pytest.approx(picked(logs, keys), rel=1e-6)


def info_messages(records) -> list[str]:
    return [message for level, message in records if level == logging.INFO]


class StepSeeingStopAtStepHook(T.StopAtStepHook):
    """The stock StopAtStepHook, also keeping the (stale) global step each after_run got."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seen: list[int] = []

    def after_run(self, run_context, run_values):
        self.seen.append(int(run_values.results))
        super().after_run(run_context, run_values)


# -- StopAtStepHook --------------------------------------------------------------


@pytest.mark.parametrize("kwargs, stop", [(dict(num_steps=7), 7), (dict(last_step=13), 13)])
def test_stop_at_step_hook_stops_training_exactly_there(K, kwargs, stop):
    model = make_model(K)
    hook = StepSeeingStopAtStepHook(**kwargs)
    recorder = fit(K, model, hook, epochs=3)
    assert iterations(model) == stop
    assert len(recorder.train_logs) == stop
    assert hook.seen == list(range(stop))  # the stale step, as in TF1


def test_stop_at_step_hook_past_the_data_lets_fit_finish(K):
    model = make_model(K)
    recorder = fit(K, model, T.StopAtStepHook(last_step=10 * STEPS_PER_EPOCH), epochs=2)
    assert iterations(model) == 2 * STEPS_PER_EPOCH
    assert len(recorder.train_logs) == 2 * STEPS_PER_EPOCH


def test_stop_at_step_hook_num_steps_counts_from_the_step_at_begin(K):
    model = make_model(K)
    fit(K, model, T.StopAtStepHook(num_steps=7), epochs=3)
    first = iterations(model)
    assert first == 7
    hook = StepSeeingStopAtStepHook(num_steps=4)
    recorder = fit(K, model, hook, epochs=3)
    assert iterations(model) == first + 4
    assert len(recorder.train_logs) == 4
    assert hook.seen == list(range(first, first + 4))


def test_stop_at_step_hook_last_step_is_absolute_on_a_second_fit(K):
    model = make_model(K)
    fit(K, model, T.StopAtStepHook(num_steps=7), epochs=3)
    recorder = fit(K, model, T.StopAtStepHook(last_step=12), epochs=3)
    assert iterations(model) == 12
    assert len(recorder.train_logs) == 12 - 7


def test_stop_at_step_hook_already_past_last_step_runs_one_step_as_in_tf1(K):
    # StopAtStepHook only checks in after_run, so TF1's MonitoredSession also
    # runs one step when the global step is already at last_step.
    model = make_model(K)
    fit(K, model, T.StopAtStepHook(num_steps=7), epochs=3)
    recorder = fit(K, model, T.StopAtStepHook(last_step=7), epochs=3)
    assert iterations(model) == 8
    assert len(recorder.train_logs) == 1


NOT_ON_TORCH = needs_backend("tensorflow", "jax", reason="Keras's torch backend requires steps_per_execution=1")


@NOT_ON_TORCH
@pytest.mark.filterwarnings("ignore:HookCallback. the model was compiled with steps_per_execution")
@pytest.mark.parametrize("per_execution, last_step", [(5, 7), (5, 10), (3, 7), (3, 6)])
def test_stop_at_step_hook_with_steps_per_execution_sees_each_execution_as_its_last_step(K, per_execution, last_step):
    model = make_model(K, steps_per_execution=per_execution)
    hook = StepSeeingStopAtStepHook(last_step=last_step)
    recorder = fit(K, model, hook, epochs=3)
    stop = iterations(model)
    assert stop == math.ceil(last_step / per_execution) * per_execution
    assert hook.seen == list(range(per_execution - 1, stop, per_execution))
    assert len(recorder.train_logs) == stop // per_execution


@NOT_ON_TORCH
@pytest.mark.parametrize(
    "per_execution, kwargs",
    [(5, dict(last_step=10)), (5, dict(num_steps=10)), (5, dict(last_step=7)), (3, dict(last_step=6))],
)
def test_stop_at_step_hook_with_steps_per_execution_stops_at_the_first_boundary_reaching_it(K, per_execution, kwargs):
    model = make_model(K, steps_per_execution=per_execution)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(K, model, T.StopAtStepHook(**kwargs), epochs=3)
    # StopAtStepHook is scheduled by the global step: it needs no warning.
    assert not [w for w in caught if "steps_per_execution" in str(w.message)]
    target = kwargs.get("last_step", kwargs.get("num_steps"))  # the step at begin is 0
    assert iterations(model) == math.ceil(target / per_execution) * per_execution


# -- LoggingTensorHook -----------------------------------------------------------


def test_logging_tensor_hook_every_n_iter_logs_each_batch_own_values(K, hook_log):
    every = 3
    model = make_model(K)
    recorder = fit(K, model, T.LoggingTensorHook(["loss", "accuracy"], every_n_iter=every), epochs=2)
    messages = info_messages(hook_log)
    logged_iterations = list(range(0, 2 * STEPS_PER_EPOCH, every))  # local iterations 0, N, 2N...
    assert len(messages) == len(logged_iterations)
    for message, i in zip(messages, logged_iterations, strict=True):
        assert list(parse_stats(message)) == ["loss", "accuracy"]  # tag order is the list's
        assert parse_stats(message) == batch_values(recorder.train_batch[i])
    assert elapsed_of(messages[0]) is None and all(elapsed_of(m) is not None for m in messages[1:])


def test_logging_tensor_hook_at_end_logs_the_last_step_values(K, hook_log):
    model = make_model(K)
    recorder = fit(K, model, T.LoggingTensorHook(["loss", "accuracy"], every_n_iter=4, at_end=True), epochs=1)
    messages = info_messages(hook_log)
    periodic = list(range(0, STEPS_PER_EPOCH, 4))
    assert len(messages) == len(periodic) + 1
    assert [parse_stats(m) for m in messages[:-1]] == [batch_values(recorder.train_batch[i]) for i in periodic]
    assert parse_stats(messages[-1]) == batch_values(recorder.train_batch[-1])


def test_logging_tensor_hook_only_at_end_logs_once(K, hook_log):
    model = make_model(K)
    recorder = fit(K, model, T.LoggingTensorHook(["loss"], at_end=True), epochs=2)
    messages = info_messages(hook_log)
    assert len(messages) == 1 and parse_stats(messages[0]) == batch_values(recorder.train_batch[-1], ["loss"])


def test_logging_tensor_hook_formatter_gets_the_tags_and_values(K, hook_log):
    seen: list[dict] = []

    def formatter(values):
        seen.append(dict(values))
        return "xent={xent!r} acc={acc!r}".format(**values)

    hook = T.LoggingTensorHook({"xent": "loss", "acc": "accuracy:0"}, every_n_iter=5, formatter=formatter)
    model = make_model(K)
    recorder = fit(K, model, hook, epochs=1)
    logged_iterations = list(range(0, STEPS_PER_EPOCH, 5))
    assert seen == [
        pytest.approx({"xent": recorder.train_batch[i]["loss"], "acc": recorder.train_batch[i]["accuracy"]}, rel=1e-6)
        for i in logged_iterations
    ]
    assert info_messages(hook_log) == ["xent={xent!r} acc={acc!r}".format(**v) for v in seen]


def test_logging_tensor_hook_every_n_secs_follows_the_clock(K, hook_log, clock):
    # Seconds that pass before each step; the hook logs at the first step, then at
    # the first step at least `every` seconds after the last logged one (TF1's
    # SecondOrStepTimer), and reports the seconds since then.
    every = 2.5
    advances = [0.5, 1.0, 1.0, 0.25, 3.0, 0.5, 0.5, 0.5, 2.0, 0.125]
    assert len(advances) == STEPS_PER_EPOCH
    ticker = K.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: setattr(clock, "now", clock.now + advances[batch])
    )

    expected: list[tuple[int, float | None]] = []  # (iteration, seconds since the last log)
    now, last = clock.now, None
    for i, advance in enumerate(advances):
        now += advance
        if last is None or now >= last + every:
            expected.append((i, None if last is None else now - last))
            last = now

    model = make_model(K)
    recorder = fit(K, model, T.LoggingTensorHook(["loss", "accuracy"], every_n_secs=every), extra_callbacks=[ticker])
    messages = info_messages(hook_log)
    assert len(expected) >= 3 and len(messages) == len(expected)
    for message, (i, elapsed) in zip(messages, expected, strict=True):
        assert parse_stats(message) == batch_values(recorder.train_batch[i])
        assert elapsed_of(message) == (None if elapsed is None else f"{elapsed:.3f}")
    assert clock.sleeps == []


@pytest.mark.parametrize("values", [None, "batch"])
def test_logging_tensor_hook_in_eval_mode_logs_the_eval_values(K, hook_log, values):
    """By default an eval hook sees each name as an Estimator's eval graph held it: the
    batch's loss (`EstimatorSpec.loss`) and the accuracy aggregated so far (a streaming
    `tf.metrics` value); values="batch" gives each batch's own accuracy too. The line at
    end() is evaluate()'s result either way, as Estimator reported it."""
    model = make_model(K)
    fit(K, model, T.StopAtStepHook(num_steps=3))  # change the weights a little first
    hook_log.clear()
    recorder = Recorder(K)
    hooks = [T.StopAtStepHook(num_steps=1), T.LoggingTensorHook(["loss", "accuracy"], every_n_iter=2, at_end=True)]
    results = model.evaluate(
        X,
        Y,
        batch_size=BATCH,
        verbose=0,
        return_dict=True,
        callbacks=[recorder, HookCallback(hooks, mode="eval", values=values)],
    )
    # StopAtStepHook is a training hook: evaluation does not advance the global step.
    assert len(recorder.test_logs) == STEPS_PER_EPOCH
    assert iterations(model) == 3
    messages = info_messages(hook_log)
    periodic = list(range(0, STEPS_PER_EPOCH, 2))
    assert len(messages) == len(periodic) + 1
    accuracy = recorder.test_logs if values is None else recorder.test_batch
    expected = [
        batch_values({"loss": recorder.test_batch[i]["loss"], "accuracy": accuracy[i]["accuracy"]}) for i in periodic
    ]
    assert [parse_stats(m) for m in messages[:-1]] == expected
    assert parse_stats(messages[-1]) == batch_values(results)
    assert recorder.test_batch[-1]["loss"] != pytest.approx(results["loss"])  # not the last batch's
    # Keras's own result is still its mean over the whole evaluation.
    assert picked(results) == picked(recorder.test_logs[-1])


def test_logging_tensor_hook_in_eval_mode_logs_each_validation_pass_of_fit(K, hook_log):
    model = make_model(K)
    n_val = 3 * BATCH
    hook = T.LoggingTensorHook(["loss"], every_n_iter=2)
    recorder = fit(K, model, hook, epochs=2, mode="eval", validation_data=(X[:n_val], Y[:n_val]))
    assert len(recorder.test_logs) == 2 * 3
    # Each pass is a run of its own: the local iteration count restarts at 0. In eval
    # mode the loss is the batch's, as EstimatorSpec.loss held it.
    expected = [recorder.test_batch[p * 3 + i]["loss"] for p in range(2) for i in (0, 2)]
    assert [parse_stats(m)["loss"] for m in info_messages(hook_log)] == pytest.approx(expected, rel=1e-6)


# -- NanTensorHook ---------------------------------------------------------------

NAN_FROM = 100  # samples from here on have a NaN weight (the inputs stay finite)
FIRST_NAN_BATCH = NAN_FROM // BATCH
NAN_WEIGHTS = nan_sample_weight(len(X), NAN_FROM)


def first_nan_step(logs: list[dict]) -> int:
    return next(i for i, step_logs in enumerate(logs) if np.isnan(step_logs["loss"]))


def test_nan_tensor_hook_raises_on_nan_loss(K, hook_log):
    model = make_model(K)
    recorder = Recorder(K)
    with pytest.raises(T.NanLossDuringTrainingError) as info:
        model.fit(
            X,
            Y,
            sample_weight=NAN_WEIGHTS,
            batch_size=BATCH,
            epochs=2,
            verbose=0,
            shuffle=False,
            callbacks=[recorder, HookCallback(T.NanTensorHook("loss"))],
        )
    assert first_nan_step(recorder.train_logs) == FIRST_NAN_BATCH
    assert len(recorder.train_logs) == FIRST_NAN_BATCH + 1
    assert iterations(model) == FIRST_NAN_BATCH + 1
    assert any("NanTensorHook.after_run" in note for note in getattr(info.value, "__notes__", []))
    assert (logging.ERROR, "Model diverged with loss = NaN.") in hook_log


def test_nan_tensor_hook_without_failing_stops_at_the_nan_step(K, hook_log):
    model = make_model(K)
    recorder = fit(K, model, T.NanTensorHook("loss", fail_on_nan_loss=False), epochs=3, sample_weight=NAN_WEIGHTS)
    assert first_nan_step(recorder.train_logs) == FIRST_NAN_BATCH
    assert len(recorder.train_logs) == FIRST_NAN_BATCH + 1
    assert iterations(model) == FIRST_NAN_BATCH + 1
    assert (logging.WARNING, "Model diverged with loss = NaN.") in hook_log


def test_nan_tensor_hook_lets_finite_training_run(K):
    model = make_model(K)
    recorder = fit(K, model, T.NanTensorHook("loss"), epochs=1)
    assert iterations(model) == STEPS_PER_EPOCH
    assert all(np.isfinite(step_logs["loss"]) for step_logs in recorder.train_logs)


# -- FinalOpsHook ----------------------------------------------------------------


def test_final_ops_hook_with_log_key_names_gets_the_last_batch_values(K):
    single = T.FinalOpsHook("loss:0")
    named = T.FinalOpsHook({"loss": "loss", "accuracy": "accuracy:0"})
    model = make_model(K)
    recorder = fit(K, model, [single, named], epochs=2)
    assert single.final_ops_values == pytest.approx(recorder.train_batch[-1]["loss"], rel=1e-6)
    assert named.final_ops_values == batch_values(recorder.train_batch[-1])


class DoubledLossAtEnd(T.SessionRunHook):
    """Builds a FinalOpsHook in begin(), from a tensor derived from the loss, as in a TF1 model_fn."""

    def __init__(self) -> None:
        self.final: T.FinalOpsHook | None = None

    def begin(self):
        loss = tf.compat.v1.get_default_graph().get_tensor_by_name("loss:0")
        self.final = T.FinalOpsHook({"doubled": loss * 2.0, "loss": loss})

    def end(self, session):
        self.final.end(session)


def test_final_ops_hook_evaluates_a_tensor_derived_from_a_log_tensor(K):
    hook = DoubledLossAtEnd()
    model = make_model(K)
    recorder = fit(K, model, hook, epochs=1)
    values = hook.final.final_ops_values
    assert values["loss"] == pytest.approx(recorder.train_batch[-1]["loss"], rel=1e-6)
    assert values["doubled"] == values["loss"] * np.float32(2.0)  # placeholders are float32


def test_final_ops_hook_in_eval_mode_gets_the_evaluate_results_whatever_values(K):
    """Estimator.evaluate's FinalOpsHook on streaming metrics gave the evaluation's aggregates
    (in end(), a batch tensor would have pulled another batch): so does end() here, with
    values="batch" too, which gives the steps each batch's own values."""
    model = make_model(K)
    fit(K, model, T.StopAtStepHook(num_steps=3))
    hook = T.FinalOpsHook({"loss": "loss", "accuracy": "accuracy"})
    results = model.evaluate(
        X, Y, batch_size=BATCH, verbose=0, return_dict=True, callbacks=[HookCallback(hook, mode="eval")]
    )
    assert hook.final_ops_values == picked(results)
    last = T.FinalOpsHook({"loss": "loss", "accuracy": "accuracy"})
    recorder = Recorder(K)
    model.evaluate(
        X, Y, batch_size=BATCH, verbose=0, callbacks=[recorder, HookCallback(last, mode="eval", values="batch")]
    )
    assert last.final_ops_values == picked(results)
    assert last.final_ops_values != batch_values(recorder.test_batch[-1])


def test_final_ops_hook_with_the_model_iterations_gets_the_final_step(K):
    model = make_model(K)
    hook = T.FinalOpsHook({"step": model.optimizer.iterations})
    fit(K, model, hook, epochs=2)
    assert hook.final_ops_values["step"] == iterations(model) == 2 * STEPS_PER_EPOCH


def test_final_ops_hook_with_eager_model_variables_gets_their_final_values(K):
    model = make_model(K)
    model.build((None, X.shape[1]))
    kernel = model.layers[0].kernel
    initial = kernel.numpy().copy()
    hook = T.FinalOpsHook({"kernel": kernel, "learning_rate": model.optimizer.learning_rate})
    fit(K, model, hook, epochs=1)
    np.testing.assert_array_equal(hook.final_ops_values["kernel"], kernel.numpy())
    assert not np.array_equal(hook.final_ops_values["kernel"], initial)  # read after training
    assert hook.final_ops_values["learning_rate"] == model.optimizer.learning_rate.numpy()


# -- GlobalStepWaiterHook --------------------------------------------------------


def test_global_step_waiter_hook_at_step_zero_passes_straight_through(K, clock):
    model = make_model(K)
    recorder = fit(K, model, T.GlobalStepWaiterHook(wait_until_step=0), epochs=1)
    assert clock.sleeps == []
    assert iterations(model) == STEPS_PER_EPOCH
    assert len(recorder.train_logs) == STEPS_PER_EPOCH


def test_global_step_waiter_hook_already_past_its_step_does_not_wait(K, clock, hook_log):
    model = make_model(K)
    fit(K, model, T.StopAtStepHook(num_steps=7), epochs=1)
    start = iterations(model)
    recorder = fit(K, model, T.GlobalStepWaiterHook(wait_until_step=start - 2), epochs=1)
    assert clock.sleeps == []
    assert iterations(model) == start + STEPS_PER_EPOCH
    assert len(recorder.train_logs) == STEPS_PER_EPOCH
    assert (logging.INFO, f"Waiting for global step {start - 2} before starting training.") in hook_log


def test_global_step_waiter_hook_below_its_step_polls_and_sleeps(K, clock):
    # Alone, nothing advances the global step while the hook waits (as for a lone
    # TF1 worker), so it sleeps until the fake clock gives up.
    model = make_model(K)
    with pytest.raises(ClockExhausted):
        fit(K, model, T.GlobalStepWaiterHook(wait_until_step=5), epochs=1)
    assert len(clock.sleeps) == clock.max_sleeps and set(clock.sleeps) == {0.5}
    assert iterations(model) == 0


# -- SummarySaverHook and StepCounterHook: event files TensorBoard reads -----------


def test_summary_saver_hook_writes_each_batch_own_values_at_their_steps(K, tmp_path):
    def make_hooks():
        tf.compat.v1.summary.scalar("loss", log_tensor("loss"))
        tf.compat.v1.summary.scalar("accuracy", log_tensor("accuracy"))
        summary = tf.compat.v1.summary.merge_all()
        return [
            T.SummarySaverHook(save_steps=3, output_dir=str(tmp_path), summary_op=summary),
            T.LoggingTensorHook(["loss"], every_n_iter=100),
        ]  # the name "loss" is still the key's

    recorder = fit(K, make_model(K), make_hooks, epochs=2)
    scalars = read_scalars(tmp_path)  # fit has returned: the events must be on disk
    assert sorted(scalars) == ["accuracy", "loss"]
    # TF1's schedule: the first step, then every 3 steps; written at the step after the run.
    steps = [1, 4, 7, 10, 13, 16, 19]
    for tag in ("loss", "accuracy"):
        assert [step for step, _ in scalars[tag]] == steps
        expected = [recorder.train_batch[step - 1][tag] for step in steps]
        assert [value for _, value in scalars[tag]] == pytest.approx(expected, rel=1e-6)


def test_summary_saver_hook_in_eval_mode_writes_each_batch_loss_as_the_loss_tensor_held_it(K, tmp_path):
    model = make_model(K)
    fit(K, model, T.StopAtStepHook(num_steps=4))

    def make_hooks():
        tf.compat.v1.summary.scalar("eval_loss", log_tensor("loss"))
        return [T.SummarySaverHook(save_steps=1, output_dir=str(tmp_path), summary_op=tf.compat.v1.summary.merge_all())]

    recorder = Recorder(K)
    model.evaluate(X, Y, batch_size=BATCH, verbose=0, callbacks=[recorder, HookCallback(make_hooks, mode="eval")])
    scalars = read_scalars(tmp_path)["eval_loss"]
    # Evaluation does not advance the global step: every event is at step 4.
    assert {step for step, _ in scalars} == {4}
    # A summary of the loss tensor held each batch's loss, as EstimatorSpec.loss did (the
    # evaluation's mean is written at end(): test_tf_slims_summary_at_end_hook_*).
    assert [value for _, value in scalars] == pytest.approx([v["loss"] for v in recorder.test_batch], rel=1e-6)


def test_tf_slims_summary_at_end_hook_writes_the_evaluation_as_under_tf1(K, tmp_path):
    """tf-slim's SummaryAtEndHook (imported from the PyPI package tf-slim 1.1.0) writes at end()
    the summaries of the eval graph: under TF1 a streaming `tf.metrics.mean` of the loss, here the
    "loss" log key. Both write the evaluation's mean loss, which is evaluate()'s result."""
    model = make_model(K, layer_names=TF1_NAMES)
    weights = weights_of(model)

    def keras_hooks():
        tf.compat.v1.summary.scalar("eval/loss", log_tensor("loss"))
        return [SummaryAtEndHook(log_dir=str(tmp_path / "keras"))]

    results = model.evaluate(
        X, Y, batch_size=BATCH, verbose=0, return_dict=True, callbacks=[HookCallback(keras_hooks, mode="eval")]
    )
    with tf.Graph().as_default():
        tf1_mlp(weights)
        mean_loss, update = tf.compat.v1.metrics.mean(tf.compat.v1.get_default_graph().get_tensor_by_name("loss:0"))
        tf.compat.v1.summary.scalar("eval/loss", mean_loss)
        with tf.compat.v1.train.MonitoredSession(hooks=[SummaryAtEndHook(log_dir=str(tmp_path / "tf1"))]) as session:
            for i in range(len(X) // BATCH):
                batch = slice(i * BATCH, (i + 1) * BATCH)
                session.run(update, {"x:0": X[batch], "y:0": Y[batch]})
    tf1 = read_scalars(tmp_path / "tf1")["eval/loss"]
    keras_scalars = read_scalars(tmp_path / "keras")["eval/loss"]
    assert [step for step, _ in keras_scalars] == [step for step, _ in tf1] == [0]
    assert keras_scalars[0][1] == pytest.approx(tf1[0][1], rel=1e-5)
    assert keras_scalars[0][1] == pytest.approx(results["loss"], rel=1e-6)


def test_step_counter_hook_writes_steps_per_second_by_the_clock(K, tmp_path, clock, hook_log):
    fit(
        K,
        make_model(K),
        T.StepCounterHook(every_n_steps=4, output_dir=str(tmp_path)),
        epochs=2,
        extra_callbacks=[Tick(K, clock, 0.25)],
    )
    rates = read_scalars(tmp_path)["global_step/sec"]
    # The first trigger only starts the timer (step 1); then every 4 steps at 4 steps/s.
    assert rates == [(5, 4.0), (9, 4.0), (13, 4.0), (17, 4.0)]
    assert info_messages(hook_log).count("global_step/sec: 4") == 4
