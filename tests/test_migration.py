"""check_migration: a TF1 model_fn's run under MonitoredSession and its Keras twin's under HookCallback, compared."""

from __future__ import annotations

import random

import keras
import modelled_hooks
import numpy as np
import pytest
import tensorflow as tf
from support import TF1_NAMES, make_data

import hooks2callbacks
from hooks2callbacks import check_migration
from hooks2callbacks._estimator import EstimatorSpec
from hooks2callbacks._graph import AdapterGraph

V1 = tf.compat.v1
X, Y = make_data(320)


def model_fn(features, labels, mode, params):
    """A TF1 Estimator model_fn of support's MLP, with tf.compat.v1.layers (tf_keras's legacy layers)."""
    hidden = V1.layers.dense(features, 16, activation=tf.nn.relu, name=TF1_NAMES[0])
    logits = V1.layers.dense(hidden, 3, name=TF1_NAMES[1])
    if mode == "infer":
        return EstimatorSpec(mode, predictions={"logits": logits})
    loss = tf.identity(V1.losses.sparse_softmax_cross_entropy(labels, logits), name="cross_entropy")
    # As tensorflow/models' official r1 MNIST logged it: the streaming accuracy's update.
    accuracy = V1.metrics.accuracy(labels, tf.argmax(logits, axis=1))
    tf.identity(accuracy[1], name="train_accuracy")
    if mode == "eval":
        return EstimatorSpec(mode, loss=loss, eval_metric_ops={"accuracy": accuracy})
    optimizer = params.get("optimizer", lambda: V1.train.GradientDescentOptimizer(0.05))()
    return EstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, V1.train.get_global_step()))


def keras_twin(optimizer=None, names=TF1_NAMES, dict_output=False):
    keras.utils.set_random_seed(1)  # other weights than the TF1 graph's: the check gives both the same start
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(16, activation="relu", name=names[0])(inputs)
    logits = keras.layers.Dense(3, name=names[1])(hidden)
    model = keras.Model(inputs, {"logits": logits} if dict_output else logits)
    model.compile(
        optimizer or keras.optimizers.SGD(0.05),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def under_keras() -> bool:
    """Whether a hooks factory is being called on the Keras side (to plant a difference there)."""
    return isinstance(V1.get_default_graph(), AdapterGraph)


NAMES = {"cross_entropy": "loss", "train_accuracy": "accuracy"}


def only(report, hook):
    found = [d for d in report.differences if d.hook == hook]
    assert found, str(report)
    return found


# -- faithful migrations report ok ----------------------------------------------------


@pytest.fixture
def v1_shapes():
    """TF1 shapes (`dim.value`), as the parameter count hook (modelled on OpenNMT-tf's) needs them."""
    V1.disable_v2_tensorshape()
    yield
    V1.enable_v2_tensorshape()


def test_a_faithful_migration_with_the_stock_hooks_and_a_parameter_count_hook_is_ok_in_train_mode(v1_shapes):
    def hooks():
        return [
            V1.train.StopAtStepHook(last_step=12),
            V1.train.LoggingTensorHook({"loss": "cross_entropy:0"}, every_n_iter=3),
            V1.train.NanTensorHook("cross_entropy:0"),
            V1.train.CheckpointSaverHook("model_dir", save_steps=5),
            V1.train.StepCounterHook(every_n_steps=4, output_dir="model_dir"),
            V1.train.SummarySaverHook(
                save_steps=2,
                output_dir="model_dir",
                summary_op=V1.summary.scalar("loss", V1.get_default_graph().get_tensor_by_name("cross_entropy:0")),
            ),
            # A parameter count hook modelled on OpenNMT-tf 1.x's (tests/modelled_hooks.py).
            modelled_hooks.ParameterCountHook(),
        ]

    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=20, names=NAMES)
    assert report.ok, str(report)
    assert report.steps == {"tf1": 12, "keras": 12}
    counts = report.compared
    assert counts["1 LoggingTensorHook"]["lines"] == 4  # steps 0, 3, 6, 9: each line compared
    assert counts["3 CheckpointSaverHook"]["checkpoints"] == 4  # 0, 5, 10, and 12 at end()
    assert counts["4 StepCounterHook"]["summaries"] == 2  # global_step/sec, by presence
    assert counts["5 SummarySaverHook"]["summaries"] == 6
    assert counts["0 StopAtStepHook"]["calls"] == 2 + 2 * 12  # begin, after_create_session, 12 steps
    assert counts["6 ParameterCountHook"]["lines"] == 1  # "Number of trainable parameters: 195"
    assert "OK" in str(report)
    report.assert_ok()


def test_a_faithful_migration_is_ok_in_eval_mode():
    def hooks():
        return [
            V1.train.LoggingTensorHook({"loss": "cross_entropy:0", "accuracy": "accuracy/update_op:0"}, every_n_iter=1)
        ]

    names = {"cross_entropy": "loss", "accuracy/update_op": "accuracy"}
    report = check_migration(model_fn, keras_twin(), hooks, (X[:128], Y[:128]), steps=None, mode="eval", names=names)
    assert report.ok, str(report)
    assert report.steps == {"tf1": 4, "keras": 4}
    assert report.compared["0 LoggingTensorHook"]["lines"] == 4


def test_a_faithful_migration_is_ok_in_predict_mode_with_a_prediction_timing_hook():
    # A hook modelled on OpenNMT-tf's LogPredictionTimeHook re-fetches what the predict loop ran;
    # its lines hold a time.
    hooks = lambda: [modelled_hooks.PredictionTimeHook()]  # noqa: E731
    report = check_migration(model_fn, keras_twin(dict_output=True), hooks, X[:96], steps=None, mode="predict")
    assert report.ok, str(report)
    assert report.steps == {"tf1": 3, "keras": 3}
    assert report.compared["0 PredictionTimeHook"]["values"] == 6  # before_run, and the logits, each step
    assert report.compared["0 PredictionTimeHook"]["lines"] == 2  # total and average times, by presence


# -- planted differences: the right hook, step and key ----------------------------------


def test_a_wrong_names_map_is_reported_on_the_hook_step_and_key_with_a_hint():
    hooks = lambda: [V1.train.LoggingTensorHook({"loss": "cross_entropy:0"}, every_n_iter=1)]  # noqa: E731
    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=4, names={"cross_entropy": "accuracy"})
    first = only(report, "0 LoggingTensorHook")[0]
    assert (first.method, first.step, first.key, first.kind) == ("after_run", 0, "results['loss']", "value")
    assert "names maps 'cross_entropy' to 'accuracy'" in first.hint
    assert isinstance(first.tf1, np.float32) and isinstance(first.keras, np.float32)


def test_a_streaming_tf1_metric_mapped_to_a_batch_value_is_reported_from_the_second_step_with_a_hint():
    hooks = lambda: [V1.train.LoggingTensorHook({"acc": "train_accuracy:0"}, every_n_iter=1)]  # noqa: E731
    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=6, names=NAMES)
    found = only(report, "0 LoggingTensorHook")
    values = [d for d in found if d.key == "results['acc']"]
    assert values[0].step >= 1  # at the first step the aggregate is the batch's
    assert "streaming tf.metrics" in values[0].hint
    assert any(d.key.startswith("log[") for d in found)  # its line says so too


def test_a_hook_that_stops_one_step_later_is_reported_where_tf1_stopped():
    hooks = lambda: [V1.train.StopAtStepHook(last_step=6 if under_keras() else 5)]  # noqa: E731
    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=10)
    first = only(report, "0 StopAtStepHook")[0]
    assert (first.method, first.step, first.key) == ("after_run", 4, "request_stop")
    assert (first.tf1, first.keras) == (True, False)
    assert report.steps == {"tf1": 5, "keras": 6}
    assert any(d.key == "stopped at" for d in only(report, "(run)"))


def test_a_checkpoint_written_at_other_steps_is_reported_by_step_and_file():
    hooks = lambda: [V1.train.CheckpointSaverHook("model_dir", save_steps=4 if under_keras() else 3)]  # noqa: E731
    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=6)
    found = only(report, "0 CheckpointSaverHook")
    first = found[0]
    assert (first.method, first.step, first.key, first.kind) == (
        "after_run",
        2,
        "checkpoint model_dir/model.ckpt-3",
        "missing",
    )
    assert (first.tf1, first.keras) == ("written", None)
    assert any(d.key == "checkpoint model_dir/model.ckpt-4" and d.tf1 is None for d in found)


def test_a_renamed_summary_tag_is_reported_on_the_summary_hook():
    def hooks():
        tag = "loss_renamed" if under_keras() else "loss"
        loss = V1.get_default_graph().get_tensor_by_name("cross_entropy:0")
        summary = V1.summary.scalar(tag, loss)
        return [V1.train.SummarySaverHook(save_steps=2, output_dir="model_dir", summary_op=summary)]

    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=4, names=NAMES)
    found = only(report, "0 SummarySaverHook")
    first_step = {(d.key, d.tf1 is None, d.keras is None) for d in found if (d.method, d.step) == ("after_run", 0)}
    assert first_step == {
        ("results['summary'][0]", False, False),  # the summary the hook fetched: its tags differ
        ("summary 'loss' @ 1", False, True),  # what it wrote: TF1's tag only under TF1
        ("summary 'loss_renamed' @ 1", True, False),
    }
    assert found[0].tf1 == {"summary 'loss'": pytest.approx(found[0].tf1["summary 'loss'"])}


def test_adams_epsilon_is_named_as_the_cause():
    params = {"optimizer": lambda: V1.train.AdamOptimizer(0.1)}
    hooks = lambda: [V1.train.LoggingTensorHook({"loss": "cross_entropy:0"}, every_n_iter=1)]  # noqa: E731
    report = check_migration(
        model_fn, keras_twin(keras.optimizers.Adam(0.1)), hooks, (X, Y), steps=10, names=NAMES, params=params
    )
    assert not report.ok
    assert any(d.hint and "epsilon=1e-07" in d.hint for d in report.differences), str(report)
    fixed = check_migration(
        model_fn,
        keras_twin(keras.optimizers.Adam(0.1, epsilon=1e-8)),
        hooks,
        (X, Y),
        steps=10,
        names=NAMES,
        params=params,
    )
    assert fixed.ok, str(fixed)


def test_a_shuffled_dataset_is_noted():
    data = tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(320, seed=3).batch(32)
    hooks = lambda: [V1.train.LoggingTensorHook({"loss": "cross_entropy:0"}, every_n_iter=1)]  # noqa: E731
    report = check_migration(model_fn, keras_twin(), hooks, data, steps=3, names=NAMES)
    assert report.ok, str(report)  # both sides got the batches of one pass
    assert any("shuffled" in note for note in report.notes)


def test_assert_ok_fails_with_the_table():
    hooks = lambda: [V1.train.StopAtStepHook(last_step=3 if under_keras() else 2)]  # noqa: E731
    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=5)
    with pytest.raises(AssertionError) as raised:
        report.assert_ok()
    text = str(raised.value)
    assert text.startswith(str(report))
    assert "first difference" in text and "0 StopAtStepHook" in text and "request_stop" in text


# -- bad input: clear errors, before anything runs ------------------------------------


def test_a_model_fn_without_a_loss_in_train_mode_is_refused():
    def no_loss(features, labels, mode, params):
        return EstimatorSpec(mode, predictions=V1.layers.dense(features, 3, name="dense"))

    with pytest.raises(ValueError, match=r"in train mode the model_fn must return an EstimatorSpec with a loss"):
        check_migration(no_loss, keras_twin(), lambda: [], (X, Y), steps=2)


def test_data_of_another_structure_than_the_models_inputs_is_refused():
    with pytest.raises(ValueError, match=r"features are an array of shape \(32, 5\).*input\(s\) of shape \(batch, 8\)"):
        check_migration(model_fn, keras_twin(), lambda: [], (X[:, :5], Y), steps=2)


def test_a_factory_that_returns_something_other_than_hooks_is_refused():
    with pytest.raises(TypeError, match=r"the factory, called in the TF1 graph, returned 'loss' of type str"):
        check_migration(model_fn, keras_twin(), lambda: "loss", (X, Y), steps=2)
    with pytest.raises(TypeError, match=r"takes a zero-argument function returning the hooks"):
        check_migration(model_fn, keras_twin(), [V1.train.StopAtStepHook(num_steps=1)], (X, Y), steps=2)


def test_a_mode_not_one_of_the_three_is_refused():
    with pytest.raises(ValueError, match=r"mode=\.\.\.\) must be one of \('train', 'eval', 'predict'\), got 'infer'"):
        check_migration(model_fn, keras_twin(), lambda: [], (X, Y), steps=2, mode="infer")


def test_weights_that_cannot_be_matched_are_an_error_before_any_hook_runs():
    made = []
    with pytest.raises(ValueError, match=r"cannot start from the TF1 graph's initial weights, so nothing was run"):
        check_migration(model_fn, keras_twin(names=("hidden", "out")), lambda: made or [], (X, Y), steps=2)
    assert made == []


def test_the_report_type_is_public():
    assert "check_migration" in hooks2callbacks.__all__ and "MigrationReport" in hooks2callbacks.__all__


def test_the_tf1_start_is_the_same_in_every_check_whatever_the_process_drew_before():
    """`tf.compat.v1.layers` in TF 2.16+ (tf_keras's legacy layers) seed an unseeded initializer from
    Python's `random`: the check seeds it while the model_fn builds, so the start (and the verdict)
    does not depend on what ran before in the process; the caller's random stream is left as it was."""

    def hooks():
        return [V1.train.LoggingTensorHook({"loss": "cross_entropy:0"}, every_n_iter=1)]

    tf_keras = pytest.importorskip("tf_keras")
    tf_keras.utils.set_random_seed(5)  # as an earlier test did: tf_keras then draws from its own generator
    losses = []
    for draws in (0, 3):
        twin = keras_twin()  # (which seeds Python's random itself)
        for _ in range(draws):
            random.random()  # what earlier code in the process drew
        before = random.getstate()
        report = check_migration(model_fn, twin, hooks, (X, Y), steps=1, names=NAMES, per_step=False)
        assert random.getstate() == before
        losses.append(report.values[("0 LoggingTensorHook", "results['loss']")]["tf1"])
    assert losses[0] == losses[1]
