"""The Estimator user's kit (`hooks2callbacks._estimator`): `tf.estimator` hook files imported
unchanged, and a `model_dir` written as `Estimator.train`/`evaluate` wrote it.

Where the truth is TF1's, the same MLP is built as a TF1 graph (`support.tf1_mlp`) and run under a
real `MonitoredTrainingSession(checkpoint_dir=...)` with Estimator's own hooks, and the two
`model_dir`s are compared: checkpoints, event tags and steps, log lines.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import types
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import (
    BATCH,
    TF1_NAMES,
    FinalValues,
    checkpoint_steps,
    iterations,
    make_data,
    make_model,
    read_scalars,
    run_tf1_mlp,
    tf1_mlp,
    weights_of,
)

import hooks2callbacks
from hooks2callbacks import HookCallback, estimator_hooks, install_estimator_aliases

T = tf.compat.v1.train
X, Y = make_data()  # 320 samples: 10 steps an epoch at batch 32
ERA = os.path.join(os.path.dirname(__file__), "estimator_era")


def fit(model, callbacks, epochs):
    """`epochs` passes over the 10 batches in order: the batch of global step s is s % 10, as in TF1's loop."""
    model.fit(X, Y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)


# -- install_estimator_aliases -------------------------------------------------------------


def test_the_aliases_are_tf1s_own_classes_idempotent_and_name_the_tf2_way_for_the_rest():
    installed = install_estimator_aliases()
    assert install_estimator_aliases() == installed  # idempotent: the same objects
    for name in ("SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues", "SecondOrStepTimer"):
        assert getattr(tf.estimator, name) is getattr(T, name) is installed[name]
    for name in ("CheckpointSaverListener", "LoggingTensorHook", "StopAtStepHook", "NanTensorHook", "FinalOpsHook"):
        assert getattr(tf.compat.v1.estimator, name) is getattr(T, name)
    assert (tf.estimator.ModeKeys.TRAIN, tf.estimator.ModeKeys.EVAL, tf.estimator.ModeKeys.PREDICT) == (
        "train",
        "eval",
        "infer",
    )
    spec = tf.estimator.EstimatorSpec(mode="train", loss=1.0, training_hooks=[T.StopAtStepHook(last_step=1)])
    assert spec.mode == "train" and spec.loss == 1.0 and spec.train_op is None and spec.evaluation_hooks == ()
    assert spec._fields == (
        "mode",
        "predictions",
        "loss",
        "train_op",
        "eval_metric_ops",
        "export_outputs",
        "training_chief_hooks",
        "training_hooks",
        "scaffold",
        "evaluation_hooks",
        "prediction_hooks",
    )
    with pytest.raises(AttributeError, match=r"tf\.estimator\.Estimator .*install_estimator_aliases.*model\.fit"):
        tf.estimator.Estimator  # noqa: B018


def test_a_real_tf_estimator_is_left_alone():
    install_estimator_aliases()
    ours = tf.estimator
    real = types.ModuleType("tensorflow_estimator.python.estimator.api._v2.estimator")
    try:
        tf.estimator = real  # what TF <= 2.15 with tensorflow_estimator had there
        assert install_estimator_aliases() == {}
        assert tf.estimator is real
    finally:
        tf.estimator = ours


@pytest.fixture
def official_hooks():
    """tensorflow/models' official/utils/logs/hooks.py and logger.py, as the PyPI package
    tf-models-official 2.1.0.dev2 ships them (a test extra), imported after the opt-in."""
    install_estimator_aliases()
    return importlib.import_module("official.utils.logs.hooks"), importlib.import_module("official.utils.logs.logger")


def benchmark_lines(messages):
    """The "Benchmark metric: {...}" lines the real BaseBenchmarkLogger logged, less their timestamps."""
    return [re.sub(r"'timestamp': '[^']*'", "'timestamp': ''", m) for m in messages if m.startswith("Benchmark metric")]


def test_a_tf_estimator_hook_file_imports_unchanged_and_runs_as_under_a_monitored_session(
    K, official_hooks, clock, tf_info
):
    """tensorflow/models' ExamplesPerSecondHook (`tf.estimator.SessionRunHook`, `SecondOrStepTimer`,
    `SessionRunArgs`), with its own BaseBenchmarkLogger, logs the same lines (examples/sec at the same
    global steps, the same types) through HookCallback as under a real MonitoredSession, on a fake
    clock of 0.5 s a step."""
    hooks, logger = official_hooks
    assert issubclass(hooks.ExamplesPerSecondHook, T.SessionRunHook)

    def tick():
        clock.now += 0.5

    def make():
        metrics = logger.BaseBenchmarkLogger()
        return hooks.ExamplesPerSecondHook(BATCH, every_n_steps=5, warm_steps=2, metric_logger=metrics)

    run_tf1_mlp([make()], weights_of(make_model(K, layer_names=TF1_NAMES)), steps=20, before_step=tick)
    tf1 = benchmark_lines(tf_info)
    tf_info.clear()
    ticker = K.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: tick())
    fit(make_model(K, layer_names=TF1_NAMES), [ticker, HookCallback([make()])], epochs=2)
    assert len(tf1) >= 4 and "'name': 'average_examples_per_sec', 'value': 64.0" in tf1[0], tf1
    assert benchmark_lines(tf_info) == tf1


# -- estimator_hooks: train ------------------------------------------------------------------

SETTINGS = {"save_summary_steps": 5, "save_checkpoints_steps": 10, "log_step_count_steps": 5}


def tf1_estimator_train(model_dir, weights, steps, hooks=()):
    """What `Estimator.train` ran on `tf1_mlp`: MonitoredTrainingSession(checkpoint_dir=model_dir)
    with the `RunConfig` of `SETTINGS`, plus its `loss` summary, NaN guard and loss logger.

    Returns:
        The global variables' values at the end, by name.
    """
    final = FinalValues()
    with tf.Graph().as_default():
        train_op = tf1_mlp(weights)
        graph = tf.compat.v1.get_default_graph()
        loss, step = graph.get_tensor_by_name("loss:0"), T.get_global_step()
        # The TF1 twin names its loss tensor "loss" (hooks fetch it by that name), so TF1 tags
        # Estimator's summary "loss_1"; a model_fn's loss op had another name.
        with graph.name_scope(None):
            tf.compat.v1.summary.scalar("loss", loss)
        estimator = [T.NanTensorHook(loss), T.LoggingTensorHook({"loss": loss, "step": step}, every_n_iter=5)]
        with T.MonitoredTrainingSession(
            checkpoint_dir=str(model_dir),
            save_summaries_steps=SETTINGS["save_summary_steps"],
            save_checkpoint_steps=SETTINGS["save_checkpoints_steps"],
            log_step_count_steps=SETTINGS["log_step_count_steps"],
            hooks=[*hooks, *estimator, final],
        ) as session:
            for _ in range(steps):
                if session.should_stop():
                    break
                # The step read without the hooks (they fetch summaries over the batch's feeds).
                i = session.run_step_fn(lambda step_context: step_context.session.run(step)) % 10
                batch = slice(i * BATCH, (i + 1) * BATCH)
                session.run(train_op, {"x:0": X[batch], "y:0": Y[batch]})
    return final.values


class Killed(Exception):
    """The job was killed: the run ends without `end()`, as a killed TF1 job did."""


class KillDuring(T.SessionRunHook):
    """Kills the job during the step that would make the global step `step`: that step's
    `after_run` (a checkpoint at `step` included) and every `end()` never happen."""

    def __init__(self, step):
        self.step = step

    def after_create_session(self, session, coord):
        self.now = session.run(T.get_global_step())

    def before_run(self, run_context):
        if self.now + 1 == self.step:
            raise Killed

    def after_run(self, run_context, run_values):
        self.now += 1


def log_lines(messages):
    """The loss lines, without their timings; "Restoring parameters" lines, by checkpoint name."""
    lines = [re.sub(r" \(\d+\.\d+ sec\)$", "", m) for m in messages if m.startswith("loss = ")]
    restores = [os.path.basename(m) for m in messages if m.startswith("Restoring parameters from ")]
    return lines, restores


def event_steps(directory):
    """Each tag's steps; the TF1 twin's `loss_1` counts as `loss` (see `tf1_estimator_train`)."""
    steps: dict[str, list[int]] = {}
    for tag, values in read_scalars(directory).items():
        steps.setdefault(tag.replace("loss_1", "loss"), []).extend(step for step, _ in values)
    return {tag: sorted(values) for tag, values in steps.items()}


def test_a_keras_run_writes_the_model_dir_estimator_train_wrote(K, tmp_path, tf_info):
    start = weights_of(make_model(K, layer_names=TF1_NAMES))
    tf1_estimator_train(tmp_path / "tf1", start, steps=20)
    (tf1_lines, _), tf1_log = log_lines(tf_info), list(tf_info)
    tf_info.clear()
    model = make_model(K, layer_names=TF1_NAMES)
    fit(model, [HookCallback(estimator_hooks(tmp_path / "keras", **SETTINGS))], epochs=2)
    lines, _ = log_lines(tf_info)

    assert checkpoint_steps(tmp_path / "keras") == checkpoint_steps(tmp_path / "tf1") == [0, 10, 20]
    for step in (0, 10, 20):
        path = str(tmp_path / "keras" / f"model.ckpt-{step}")
        reference = str(tmp_path / "tf1" / f"model.ckpt-{step}")
        assert tf.train.load_variable(path, "global_step") == step
        np.testing.assert_allclose(
            tf.train.load_variable(path, "dense/kernel"), tf.train.load_variable(reference, "dense/kernel"), atol=1e-5
        )
    assert (
        event_steps(tmp_path / "keras")
        == event_steps(tmp_path / "tf1")
        == {
            "loss": [1, 6, 11, 16],
            "global_step/sec": [6, 11, 16],
        }
    )
    keras_loss = dict(read_scalars(tmp_path / "keras")["loss"])
    for step, value in read_scalars(tmp_path / "tf1")["loss_1"]:
        assert keras_loss[step] == pytest.approx(value, abs=1e-5)
    # "loss = 1.2901869, step = 1": float32 losses as TF1 printed them, the step after its increment.
    assert [line.split(", step = ")[1] for line in lines] == ["1", "6", "11", "16"]
    assert len(lines) == len(tf1_lines) == 4
    for mine, theirs in zip(lines, tf1_lines, strict=True):
        (a, b), (c, d) = (re.match(r"loss = (\S+), step = (\d+)$", x).groups() for x in (mine, theirs))
        assert b == d and float(a) == pytest.approx(float(c), abs=1e-5) and len(a) <= 10
    assert sum("Saving checkpoints for" in m for m in tf_info) == sum("Saving checkpoints for" in m for m in tf1_log)


def test_keep_checkpoint_max_counts_as_estimators_did(K, tmp_path):
    model = make_model(K, layer_names=TF1_NAMES)
    hooks = estimator_hooks(tmp_path, save_checkpoints_steps=2, keep_checkpoint_max=2, save_summary_steps=None)
    fit(model, [HookCallback(hooks)], epochs=1)  # HookCallback's own default (5) does not apply
    assert checkpoint_steps(tmp_path) == [8, 10]


# -- re-running continues -----------------------------------------------------------------


@pytest.mark.parametrize("writer", ["keras", "estimator"])
def test_a_killed_run_continues_from_its_model_dir_as_under_monitored_training_session(K, tmp_path, tf_info, writer):
    """Killed after step 30 (its last checkpoint at 20), started again with StopAtStepHook(last_step=50):
    it ends at 50 with the weights of TF1's run, which restored model.ckpt-20 and trained 30 steps."""
    start = weights_of(make_model(K, layer_names=TF1_NAMES))
    reference = tmp_path / "tf1"
    with pytest.raises(Killed):
        tf1_estimator_train(reference, start, steps=40, hooks=[KillDuring(30)])
    assert checkpoint_steps(reference) == [0, 10, 20]
    tf_info.clear()
    expected = tf1_estimator_train(reference, start, steps=40, hooks=[T.StopAtStepHook(last_step=50)])
    _, tf1_restores = log_lines(tf_info)

    model_dir = tmp_path / "keras"
    if writer == "estimator":  # an Estimator's name-based checkpoints
        with pytest.raises(Killed):
            tf1_estimator_train(model_dir, start, steps=40, hooks=[KillDuring(30)])
    else:
        killed = HookCallback([*estimator_hooks(model_dir, **SETTINGS), KillDuring(30)])
        with pytest.raises(Killed):
            fit(make_model(K, layer_names=TF1_NAMES), [killed], epochs=4)
    assert checkpoint_steps(model_dir) == [0, 10, 20]
    tf_info.clear()
    # A new process would make a new model: other initial weights, which the restore replaces.
    model = make_model(K, layer_names=TF1_NAMES)
    model.set_weights([w + 1.0 for w in model.get_weights()])
    fit(model, [HookCallback([*estimator_hooks(model_dir, **SETTINGS), T.StopAtStepHook(last_step=50)])], epochs=5)
    _, restores = log_lines(tf_info)

    assert iterations(model) == 50
    assert restores == tf1_restores == ["model.ckpt-20"]
    assert checkpoint_steps(model_dir) == checkpoint_steps(reference) == [10, 20, 30, 40, 50]
    for weight, name in zip(
        model.weights, ["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"], strict=True
    ):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(weight), expected[name], atol=1e-5)
    assert event_steps(model_dir) == event_steps(reference)


# -- an Estimator's checkpoint with other names: assignment_map -------------------------------

WEIGHTS = ("dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias")
# BERT's slot names to those of Keras's Adam (the model's TF1 names), as init_from_checkpoint's map.
SLOT_MAP = {f"{w}/adam_{slot}": f"{w}/{mine}" for w in WEIGHTS for slot, mine in (("m", "Adam"), ("v", "Adam_1"))}


class AdamWeightDecayLike:
    """The slots of google-research/bert's `AdamWeightDecayOptimizer` (`optimization.py`): made with
    `tf.get_variable` as `<variable>/adam_m` and `<variable>/adam_v`, updated with Adam's moments
    (without bias correction); the global step incremented beside them, as BERT's
    `create_optimizer` did."""

    def __init__(self, rate):
        self.rate = rate

    def minimize(self, loss, global_step):
        v1 = tf.compat.v1
        params = v1.trainable_variables()
        updates = [global_step.assign_add(1)]
        for grad, param in zip(tf.gradients(loss, params), params, strict=True):
            slots = [
                v1.get_variable(
                    f"{param.op.name}/adam_{kind}",
                    shape=param.shape,
                    dtype=tf.float32,
                    trainable=False,
                    initializer=v1.zeros_initializer(),
                    use_resource=False,
                )
                for kind in ("m", "v")
            ]
            m = 0.9 * slots[0] + 0.1 * grad
            v = 0.999 * slots[1] + 0.001 * tf.square(grad)
            updates += [param.assign_sub(self.rate * m / (tf.sqrt(v) + 1e-6)), slots[0].assign(m), slots[1].assign(v)]
        return tf.group(*updates)


def bert_like_model_dir(model_dir, weights, steps=3):
    """A TF1 job on `AdamWeightDecayLike` under MonitoredTrainingSession(checkpoint_dir=model_dir).

    Returns:
        Its newest checkpoint's variables, by name.
    """
    with tf.Graph().as_default():
        train_op = tf1_mlp(weights, optimizer=AdamWeightDecayLike)
        with T.MonitoredTrainingSession(
            checkpoint_dir=str(model_dir), save_summaries_steps=None, log_step_count_steps=None
        ) as session:
            for i in range(steps):
                session.run(train_op, {"x:0": X[i * BATCH : (i + 1) * BATCH], "y:0": Y[i * BATCH : (i + 1) * BATCH]})
    prefix = tf.train.latest_checkpoint(str(model_dir))
    return {name: tf.train.load_variable(prefix, name) for name, _ in tf.train.list_variables(prefix)}


class Restored(T.SessionRunHook):
    """Reads, when the session is made (after the restore), the model's weights and Adam's slots by TF1 name."""

    def after_create_session(self, session, coord):
        names = [*WEIGHTS, *SLOT_MAP.values(), "global_step"]
        self.values = session.run({name: f"{name}:0" for name in names})


def adam_model(K):
    model = make_model(K, layer_names=TF1_NAMES)
    model.compile(optimizer=K.optimizers.Adam(0.05), loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def slot_values(model):
    """Adam's slots by TF1 name, through the adapter's own naming (what checkpoints hold)."""
    from hooks2callbacks._model import saved_variables

    return {v.name: v.read() for v in saved_variables(model)[0] if v.name in SLOT_MAP.values()}


def test_an_assignment_map_continues_a_custom_optimizers_slots_and_the_checkpoints_keep_their_names(K, tmp_path):
    """BERT's run_classifier named its slots `<var>/adam_m`, `<var>/adam_v`: with the map, the slots
    are restored exactly, no warning claims they were left behind, and what the run writes (the
    restored step's checkpoint again, and later ones) holds them under BERT's names: the same map
    restores them again, and the TF1 job's own Saver too."""
    tf1 = bert_like_model_dir(tmp_path, weights_of(make_model(K, layer_names=TF1_NAMES)))
    assert tf1["global_step"] == 3 and float(np.abs(tf1["dense/kernel/adam_v"]).max()) > 0
    model, restored = adam_model(K), Restored()
    hooks = estimator_hooks(
        tmp_path, assignment_map=SLOT_MAP, save_checkpoints_steps=2, save_summary_steps=None, log_step_count_steps=None
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(model, [HookCallback([*hooks, restored, T.StopAtStepHook(last_step=5)])], epochs=1)
    assert [str(w.message) for w in caught if "restore" in str(w.message)] == []
    assert hooks[0].report.not_restored == []
    assert {theirs: mine for mine, theirs in hooks[0].report.restored.items() if theirs in SLOT_MAP} == SLOT_MAP
    for name in [*WEIGHTS, "global_step"]:
        np.testing.assert_array_equal(restored.values[name], tf1[name], err_msg=name)
    for theirs, mine in SLOT_MAP.items():
        np.testing.assert_array_equal(restored.values[mine], tf1[theirs], err_msg=mine)
    assert iterations(model) == 5 and checkpoint_steps(tmp_path) == [0, 3, 5]  # 0: the TF1 job's

    # The restored step's checkpoint, written again, and the newest: BERT's names, not Keras's.
    for step in (3, 5):
        names = {name for name, _ in tf.train.list_variables(str(tmp_path / f"model.ckpt-{step}"))}
        assert set(SLOT_MAP) <= names and not set(SLOT_MAP.values()) & names, step
    for theirs in SLOT_MAP:
        np.testing.assert_array_equal(tf.train.load_variable(str(tmp_path / "model.ckpt-3"), theirs), tf1[theirs])
    # The same map restores them (by name) into a new model, with no warning.
    fresh = adam_model(K)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = hooks2callbacks.restore_tf1_checkpoint(fresh, str(tmp_path), assignment_map=SLOT_MAP)
    assert report.global_step == 5 and report.not_restored == []
    trained = slot_values(model)
    assert set(trained) == set(SLOT_MAP.values())
    for name, value in slot_values(fresh).items():
        np.testing.assert_array_equal(value, trained[name], err_msg=name)
    # The TF1 job's own graph restores the whole checkpoint with its Saver.
    initial = weights_of(make_model(K))  # replaced by the restore
    with tf.Graph().as_default():
        tf1_mlp(initial, optimizer=AdamWeightDecayLike)
        with tf.compat.v1.Session() as session:
            T.Saver().restore(session, str(tmp_path / "model.ckpt-5"))  # fails on any name it lacks
            continued = session.run({v.op.name: v for v in tf.compat.v1.global_variables()})
    for theirs, mine in SLOT_MAP.items():
        np.testing.assert_array_equal(continued[theirs], trained[mine], err_msg=theirs)


def test_without_the_map_the_slots_it_left_behind_are_warned_of_with_the_map_to_pass(K, tmp_path):
    bert_like_model_dir(tmp_path, weights_of(make_model(K, layer_names=TF1_NAMES)))
    hooks = estimator_hooks(tmp_path, save_checkpoints_secs=None, save_summary_steps=None, log_step_count_steps=None)
    with pytest.warns(UserWarning, match=r"optimizer's variables not in the checkpoint keep their values") as caught:
        fit(adam_model(K), [HookCallback([*hooks, T.StopAtStepHook(last_step=4)])], epochs=1)
    assert sorted(hooks[0].report.not_restored) == sorted(SLOT_MAP.values())
    message = next(str(w.message) for w in caught if "keep their values" in str(w.message))
    assert "pass assignment_map= (restore_tf1_checkpoint, or estimator_hooks)" in message
    # Each slot paired with BERT's of the same variable and shape, in name order: m with Adam, v with Adam_1.
    assert hooks[0].report.proposed_map == SLOT_MAP


# -- estimator_hooks: eval ------------------------------------------------------------------


def test_eval_results_go_to_model_dir_eval_as_estimator_evaluate_wrote_them(K, tmp_path, tf_info):
    sys.path.insert(0, ERA)
    try:
        estimator_results = importlib.import_module("estimator_results")
    finally:
        sys.path.remove(ERA)
    model = make_model(K, layer_names=TF1_NAMES)
    fit(model, [], epochs=1)  # global step 10
    # TF1: streaming metrics of the same weights over the same batches, then Estimator's writer.
    trained = weights_of(model)
    with tf.Graph().as_default():
        tf1_mlp(trained)
        graph = tf.compat.v1.get_default_graph()
        loss, logits = graph.get_tensor_by_name("loss:0"), graph.get_tensor_by_name("logits:0")
        y = graph.get_tensor_by_name("y:0")
        metrics = {
            "loss": tf.compat.v1.metrics.mean(loss),
            "accuracy": tf.compat.v1.metrics.accuracy(y, tf.argmax(logits, 1)),
        }
        set_step = tf.compat.v1.assign(T.get_global_step(), 10)
        with T.MonitoredSession() as session:
            session.run(set_step)
            for i in range(10):
                batch = slice(i * BATCH, (i + 1) * BATCH)
                session.run([update for _, update in metrics.values()], {"x:0": X[batch], "y:0": Y[batch]})
            results = session.run({name: value for name, (value, _) in metrics.items()})
            results["global_step"] = session.run(T.get_global_step())
    with tf.Graph().as_default():  # Estimator.evaluate ran in graph mode
        estimator_results._write_dict_to_summary(str(tmp_path / "tf1" / "eval"), results, results["global_step"])
    tf1_line = [m for m in tf_info if m.startswith("Saving dict")]
    tf_info.clear()

    logs = model.evaluate(
        X, Y, batch_size=BATCH, verbose=0, return_dict=True,
        callbacks=[HookCallback(estimator_hooks(tmp_path / "keras", mode="eval"), mode="eval")],
    )  # fmt: skip
    mine, theirs = read_scalars(tmp_path / "keras" / "eval"), read_scalars(tmp_path / "tf1" / "eval")
    assert sorted(mine) == sorted(theirs) == ["accuracy", "loss"]
    for tag in theirs:
        ((step, value),), ((tf1_step, tf1_value),) = mine[tag], theirs[tag]
        assert step == tf1_step == 10
        assert value == pytest.approx(tf1_value, abs=1e-5) and value == pytest.approx(logs[tag], abs=1e-6)
    line = [m for m in tf_info if m.startswith("Saving dict")]
    assert [re.sub(r"= [\d.]+", "=", m) for m in line] == [re.sub(r"= [\d.]+", "=", m) for m in tf1_line]

    named = estimator_hooks(tmp_path / "keras", mode="eval", name="holdout")
    model.evaluate(X, Y, batch_size=BATCH, verbose=0, callbacks=[HookCallback(named, mode="eval")])
    assert sorted(read_scalars(tmp_path / "keras" / "eval_holdout")) == ["accuracy", "loss"]


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"mode": "predict"}, ValueError, r"mode=.*'train', 'eval'"),
        ({"save_summary_steps": 0}, ValueError, r"save_summary_steps=.*positive"),
        ({"keep_checkpoint_max": 0}, ValueError, r"keep_checkpoint_max=.*positive int or None"),
        ({"save_checkpoints_steps": 10, "save_checkpoints_secs": 60}, ValueError, r"not both"),
        ({"name": "holdout"}, ValueError, r"mode='eval' only"),
        ({"name": 3, "mode": "eval"}, TypeError, r"name=.*str"),
        ({"assignment_map": ["a"]}, ValueError, r"assignment_map=.*must be a dict from checkpoint names"),
        ({"assignment_map": {"a/": "b/"}, "mode": "eval"}, ValueError, r"mode='eval' restores nothing"),
    ],
)
def test_bad_arguments_fail_at_once_saying_what_works(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        estimator_hooks(tmp_path, **kwargs)


def test_the_hooks_outside_hookcallback_fail_saying_where_they_run(tmp_path):
    with pytest.raises(RuntimeError, match=r"run only inside HookCallback.*checkpoint_dir=model_dir"):
        with tf.Graph().as_default():
            T.get_or_create_global_step()
            with T.MonitoredSession(hooks=estimator_hooks(tmp_path)):
                pass


def test_train_hooks_in_evaluate_fail_saying_which_to_pass(K, tmp_path):
    model = make_model(K, layer_names=TF1_NAMES)
    with pytest.raises(ValueError, match=r"mode='train'.*estimator_hooks\(model_dir, mode='eval'\)"):
        model.evaluate(X, Y, verbose=0, callbacks=[HookCallback(estimator_hooks(tmp_path), mode="eval")])
    assert not os.listdir(tmp_path)  # nothing written


def test_both_names_are_public():
    assert {"estimator_hooks", "install_estimator_aliases"} <= set(hooks2callbacks.__all__)
