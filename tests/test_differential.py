"""The same recording hooks under TF1's MonitoredSession and under HookCallback."""

from __future__ import annotations

import functools

import keras
import pytest
import tensorflow as tf
from support import RecordingHook, run_keras, run_tf1


@pytest.mark.parametrize("stop_at", [None, 0, 3, 9, 14])
@pytest.mark.parametrize("n_hooks", [1, 3])
def test_call_sequence_matches_monitored_session(K, stop_at, n_hooks):
    records = {}
    for system, run in (("tf1", run_tf1), ("keras", functools.partial(run_keras, K))):
        calls: list = []
        hooks = [RecordingHook(f"h{i}", calls, stop_at=stop_at if i == n_hooks - 1 else None) for i in range(n_hooks)]
        run(hooks, max_steps=20)
        records[system] = calls
    assert records["keras"] == records["tf1"]
    assert records["tf1"][-1][1] == "end"


@pytest.mark.parametrize("kwargs", [dict(num_steps=7), dict(last_step=13), dict(last_step=40)])
def test_stop_at_step_hook_stops_where_tf1_stops(K, kwargs):
    records = {}
    for system, run in (("tf1", run_tf1), ("keras", functools.partial(run_keras, K))):
        calls: list = []
        hooks = [RecordingHook("rec", calls), tf.compat.v1.train.StopAtStepHook(**kwargs)]
        run(hooks, max_steps=20)
        records[system] = calls
    assert records["keras"] == records["tf1"]


# -- the model's variables: real hooks under MonitoredSession and under HookCallback --
#
# `run_tf1_mlp` trains the same MLP as a TF1 graph (same initial weights, data
# order and plain SGD) under a real MonitoredSession; `fit_mlp` trains the Keras
# model. Without hooks the two end within 1e-8 of each other, so what a hook
# reads or writes is compared at a tight tolerance.

import importlib  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402

import modelled_hooks  # noqa: E402
import numpy as np  # noqa: E402
from support import (  # noqa: E402
    BATCH,
    TF1_NAMES,
    fit_mlp,
    iterations,
    make_data,
    make_model,
    read_scalars,
    run_tf1_mlp,
    tf1_mlp,
    weights_of,
)
from tensorboard.backend.event_processing import event_accumulator  # noqa: E402
from tensorflow.python.training import training_util  # noqa: E402

V1 = tf.compat.v1
WEIGHTS = ("dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias")
TOLERANCE = 1e-5


def initial_weights(K):
    return weights_of(make_model(K, layer_names=TF1_NAMES))


def assert_same_weights(tf1_values, model, atol=TOLERANCE):
    for name, value in zip(WEIGHTS, weights_of(model), strict=True):
        np.testing.assert_allclose(value, tf1_values[name], atol=atol, err_msg=name)


def learning_rate_of(model):
    return float(np.asarray(model.optimizer.learning_rate))


@pytest.fixture
def v1_shapes():
    """TF1 shapes (`dim.value`), as TF1 code run under TF2 needs them, for both loops."""
    V1.disable_v2_tensorshape()
    yield
    V1.enable_v2_tensorshape()


@pytest.fixture
def logged():
    """Messages the hooks modelled on public ones log at INFO (to the `tensorflow` and `deepr`
    loggers)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            if record.filename == "modelled_hooks.py":
                messages.append(record.getMessage())

    handler = Collect(level=logging.INFO)
    loggers = [tf.get_logger(), logging.getLogger("deepr")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
    yield messages
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_parameter_count_and_variable_statistics_hooks_log_what_tf1_logged(K, v1_shapes, logged):
    # tf_keras's SGD has momentum slots (at momentum 0) that TF1's GradientDescentOptimizer
    # had not: left out by the hook's own exclusions, as Adam's were.
    excluded = ("adam", "beta", "stopping", "step", "sgd/")
    hooks = lambda: [modelled_hooks.ParameterCountHook(), modelled_hooks.VariableStatisticsHook(excluded=excluded)]  # noqa: E731
    run_tf1_mlp(hooks, initial_weights(K), steps=2)
    tf1, logged[:] = list(logged), []
    fit_mlp(K, hooks, steps=2)
    assert "Number of trainable parameters: 195" in tf1
    assert logged == tf1  # counts, and each variable's norm and zeros read through session.run


def test_the_parameter_count_hook_on_an_unbuilt_tf_keras_model_fails_clearly_rather_than_count_0(v1_shapes, logged):
    # Under TF1 the graph held the variables from begin() on; a tf_keras model given no input
    # shape makes them only in its first step. The hook must not log "0 parameters".
    tf_keras = pytest.importorskip("tf_keras")
    model = tf_keras.Sequential([tf_keras.layers.Dense(4), tf_keras.layers.Dense(3)])
    model.compile("sgd", tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(ValueError, match=r"do not exist yet") as raised:
        fit_mlp(None, [modelled_hooks.ParameterCountHook()], steps=1, model=model)
    assert "Raised in ParameterCountHook.begin()" in "\n".join(raised.value.__notes__)
    assert not any("Number of trainable parameters" in line for line in logged)


class AfterUpdate(V1.train.SessionRunHook):
    """Reads the weight norm in a run of its own after each step: the value after the update."""

    def begin(self):
        self.norm = tf.linalg.global_norm(V1.trainable_variables())
        self.values = []

    def after_run(self, run_context, run_values):
        self.values.append(float(run_context.session.run(self.norm)))


def test_weight_norm_summary_holds_the_value_after_each_update(K, tmp_path):
    # Under TF1 the summary op runs in the step's own run, racing with the
    # update (its value differs between identical runs); the adapter computes
    # it after Keras's step, which is the value a run after the step reads.
    def hooks(directory, recorder=None):
        def make():
            V1.summary.scalar("weight_norm", tf.linalg.global_norm(V1.trainable_variables()))
            V1.summary.histogram("kernel", V1.get_default_graph().get_tensor_by_name("dense/kernel:0"))
            summaries = V1.train.SummarySaverHook(save_steps=3, output_dir=directory, summary_op=V1.summary.merge_all())
            return [summaries] + ([recorder] if recorder else [])

        return make

    after = AfterUpdate()
    run_tf1_mlp(hooks(str(tmp_path / "tf1"), after), initial_weights(K), steps=10)
    fit_mlp(K, hooks(str(tmp_path / "keras")), steps=10)
    tf1, keras_ = read_scalars(tmp_path / "tf1")["weight_norm"], read_scalars(tmp_path / "keras")["weight_norm"]
    assert [s for s, _ in keras_] == [s for s, _ in tf1] == [1, 4, 7, 10]
    np.testing.assert_allclose([v for _, v in keras_], [after.values[s - 1] for s, _ in tf1], atol=TOLERANCE)
    histograms = {}
    for name in ("tf1", "keras"):
        events = event_accumulator.EventAccumulator(
            str(tmp_path / name), size_guidance={event_accumulator.HISTOGRAMS: 0}
        )
        events.Reload()
        histograms[name] = [(e.step, e.histogram_value.num) for e in events.Histograms("kernel")]
    assert histograms["keras"] == histograms["tf1"] == [(s, 8 * 16) for s in (1, 4, 7, 10)]


def test_a_broadcast_hook_like_horovods_writes_the_root_values_into_keras_as_into_tf1(K, monkeypatch):
    """A hook modelled on Horovod's TF1 `BroadcastGlobalVariablesHook` (tests/modelled_hooks.py)."""
    root = make_model(K, layer_names=TF1_NAMES)
    for layer in root.layers:
        layer.set_weights([w + 0.5 for w in layer.get_weights()])  # the root rank's weights differ
    monkeypatch.setattr(modelled_hooks, "ROOT_VALUES", dict(zip(WEIGHTS, weights_of(root), strict=True)))

    class Listed(V1.train.SessionRunHook):
        def begin(self):
            self.names = [v.name for v in V1.global_variables()]

    listed = {"tf1": Listed(), "keras": Listed()}
    tf1 = run_tf1_mlp([modelled_hooks.BroadcastVariablesHook(0), listed["tf1"]], initial_weights(K), steps=5)
    model = fit_mlp(K, [modelled_hooks.BroadcastVariablesHook(0), listed["keras"]], steps=5)
    assert listed["tf1"].names == [
        "global_step:0",
        "dense/kernel:0",
        "dense/bias:0",
        "dense_1/kernel:0",
        "dense_1/bias:0",
        "learning_rate:0",
    ]
    # tf_keras's SGD adds its (momentum 0) slots, which a TF1 GradientDescentOptimizer did not have.
    extra = listed["keras"].names[6:]
    assert listed["keras"].names[:6] == listed["tf1"].names and all(n.startswith("SGD/m/") for n in extra)
    assert_same_weights(tf1, model)  # trained on from the root's weights
    assert iterations(model) == tf1["global_step"] == 5


def write_tf1_checkpoint(directory, K, steps=7, learning_rate=0.02, scopes=TF1_NAMES):
    """Trains `tf1_mlp` from other initial weights and saves it with a TF1 Saver; returns the values saved."""
    other = [w * 2.0 + 0.1 for w in initial_weights(K)]
    data_x, data_y = make_data()
    with tf.Graph().as_default():
        train_op = tf1_mlp(other, learning_rate, scopes)
        saver = V1.train.Saver()
        with V1.Session() as session:
            session.run(V1.global_variables_initializer())
            for i in range(steps):
                session.run(train_op, {"x:0": data_x[i * 32 : (i + 1) * 32], "y:0": data_y[i * 32 : (i + 1) * 32]})
            values = {v.op.name: session.run(v) for v in V1.global_variables()}
            saver.save(session, os.path.join(str(directory), "model.ckpt"), global_step=steps)
    return values


class StepsSeen(V1.train.SessionRunHook):
    """Keeps the (stale) global steps and the kernel at session creation."""

    def begin(self):
        self.step = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        self.seen = []

    def after_create_session(self, session, coord):
        self.kernel_at_creation = session.run("dense/kernel:0")

    def before_run(self, run_context):
        return V1.train.SessionRunArgs(self.step)

    def after_run(self, run_context, run_values):
        self.seen.append(int(run_values.results))


def test_a_restore_hook_modelled_on_tensor2tensors_warm_starts_keras_from_a_tf1_checkpoint(K, tmp_path):
    saved = write_tf1_checkpoint(tmp_path, K)
    seen = {"tf1": StepsSeen(), "keras": StepsSeen()}
    checkpoint = str(tmp_path)
    # Everything but tf_keras's SGD slots, which the TF1 graph had not (a no-op elsewhere).
    restore = lambda: modelled_hooks.ScopedRestoreHook(checkpoint, exclude=["SGD"])  # noqa: E731
    tf1 = run_tf1_mlp([restore(), seen["tf1"]], initial_weights(K), steps=3)
    model = fit_mlp(K, [restore(), seen["keras"]], steps=3)
    # Restored at session creation: weights, learning rate and global step, as under TF1.
    np.testing.assert_allclose(seen["keras"].kernel_at_creation, saved["dense/kernel"])
    np.testing.assert_allclose(seen["tf1"].kernel_at_creation, saved["dense/kernel"])
    assert seen["keras"].seen == seen["tf1"].seen == [7, 8, 9]
    assert learning_rate_of(model) == pytest.approx(tf1["learning_rate"]) == pytest.approx(0.02)
    assert_same_weights(tf1, model)
    assert iterations(model) == tf1["global_step"] == 10


class WarmStart(StepsSeen):
    """init_from_checkpoint with an assignment_map from other scope names, as in TF's own docstring."""

    def __init__(self, checkpoint):
        self.checkpoint = checkpoint

    def begin(self):
        super().begin()
        V1.train.init_from_checkpoint(self.checkpoint, {"tf1_model/hidden/": "dense/", "tf1_model/logits/": "dense_1/"})


def test_init_from_checkpoint_with_an_assignment_map_restores_renamed_weights_only(K, tmp_path):
    saved = write_tf1_checkpoint(tmp_path, K, scopes=("tf1_model/hidden", "tf1_model/logits"))
    hooks = {"tf1": WarmStart(str(tmp_path)), "keras": WarmStart(str(tmp_path))}
    tf1 = run_tf1_mlp([hooks["tf1"]], initial_weights(K), steps=4)
    model = fit_mlp(K, [hooks["keras"]], steps=4)
    for hook in hooks.values():
        np.testing.assert_allclose(hook.kernel_at_creation, saved["tf1_model/hidden/kernel"])
    assert hooks["keras"].seen == hooks["tf1"].seen == [0, 1, 2, 3]  # the step was not in the map
    assert_same_weights(tf1, model)
    assert learning_rate_of(model) == pytest.approx(tf1["learning_rate"]) == pytest.approx(0.05)


def test_a_plateau_hook_like_tensor2tensors_halves_the_learning_rate_as_under_tf1(K, tmp_path):
    """A hook modelled on tensor2tensor's `PlateauOpHook` (tests/modelled_hooks.py)."""
    # The "eval" events the hook reads: a loss that no longer decreases.
    events = tmp_path / "eval"
    with tf.Graph().as_default():
        writer = V1.summary.FileWriter(str(events))
        for step in range(6):
            writer.add_summary(V1.Summary(value=[V1.Summary.Value(tag="loss", simple_value=1.0)]), step)
        writer.close()
    rates = {}

    class Rate(V1.train.SessionRunHook):
        def __init__(self, name):
            self.name = name

        def before_run(self, run_context):
            return V1.train.SessionRunArgs("learning_rate:0")

        def after_run(self, run_context, run_values):
            rates.setdefault(self.name, []).append(float(run_values.results))

    def hooks(name):
        def make():
            rate = V1.get_default_graph().get_tensor_by_name("learning_rate:0")
            decay = V1.assign(rate, rate * 0.5)
            plateau = modelled_hooks.OpOnPlateauHook(
                str(events), "loss", decay, num_plateau_steps=2, every_n_steps=2, only_once=True
            )
            return [plateau, Rate(name)]

        return make

    tf1 = run_tf1_mlp(hooks("tf1"), initial_weights(K), steps=8)
    model = fit_mlp(K, hooks("keras"), steps=8)
    # The plateau is seen after step 0 and the op runs with step 1's fetches, once. TF1
    # fetched the rate in that same run, racing with the assign (it read 0.05 here);
    # the adapter reads after the step's writes. From step 2 on they agree.
    assert rates["tf1"][:2] == pytest.approx([0.05, 0.05]) and rates["keras"][:2] == pytest.approx([0.05, 0.025])
    assert rates["keras"][2:] == pytest.approx(rates["tf1"][2:]) == [0.025] * 6
    assert learning_rate_of(model) == pytest.approx(tf1["learning_rate"]) == pytest.approx(0.025)
    # Step 1's update raced with the assign under TF1 too, so TF1's weights vary
    # by up to one step's difference; the adapter's are those of a TF1 run that
    # assigns right after step 1, before step 2.
    assert_same_weights(tf1, model, atol=0.01)

    class DecayAfterStep1(V1.train.SessionRunHook):
        def begin(self):
            rate = V1.get_default_graph().get_tensor_by_name("learning_rate:0")
            self.decay, self.steps = V1.assign(rate, rate * 0.5), 0

        def after_run(self, run_context, run_values):
            self.steps += 1
            if self.steps == 2:
                run_context.session.run(self.decay)

    assert_same_weights(run_tf1_mlp([DecayAfterStep1()], initial_weights(K), steps=8), model)


class Load(V1.train.SessionRunHook):
    """`variable.load(value, session)`: at session creation, and again after step 3."""

    def begin(self):
        self.bias = [v for v in V1.global_variables() if v.op.name == "dense_1/bias"][0]
        self.steps = 0

    def after_create_session(self, session, coord):
        self.bias.load(np.array([0.5, -0.5, 0.25], np.float32), session)

    def after_run(self, run_context, run_values):
        self.steps += 1
        if self.steps == 3:
            self.bias.load(np.zeros(3, np.float32), run_context.session)


def test_variable_load_sets_the_keras_weight_as_under_tf1(K):
    tf1 = run_tf1_mlp([Load()], initial_weights(K), steps=6)
    model = fit_mlp(K, [Load()], steps=6)
    assert_same_weights(tf1, model)


def test_a_rate_feeding_hook_modelled_on_resnets_feeds_the_rate_for_each_step_as_under_tf1(K):
    """A hook modelled on tensorflow/models' TF1 ResNet `_LearningRateSetterHook`
    (tests/modelled_hooks.py) feeds the rate (0.1, where the model was built with 0.05) in every
    step's SessionRunArgs. Under TF1 the step trains at the fed rate and the variable keeps its own
    value; so does Keras's step here."""
    hooks = lambda: [modelled_hooks.FedRateHook("global_step:0", "learning_rate:0")]  # noqa: E731
    tf1 = run_tf1_mlp(hooks, initial_weights(K), steps=6)
    model = fit_mlp(K, hooks, steps=6)
    assert_same_weights(tf1, model)
    assert learning_rate_of(model) == pytest.approx(0.05) and tf1["learning_rate"] == pytest.approx(0.05)
    # And the feed made the difference: at the model's own rate the weights end elsewhere.
    unfed = fit_mlp(K, [], steps=6)
    assert not np.allclose(weights_of(unfed)[0], weights_of(model)[0], atol=1e-4)


from hooks2callbacks import HookCallback, install_estimator_aliases, log_tensor  # noqa: E402

X_, _ = make_data()


class KeepPredictions(tf.compat.v1.train.SessionRunHook):
    """Keeps what each step's `original_args.fetches` gave, re-fetched as Estimator's predict hooks did."""

    def __init__(self) -> None:
        self.original: list = []
        self.results: list = []

    def before_run(self, run_context):
        self.original.append(run_context.original_args.fetches)
        return tf.compat.v1.train.SessionRunArgs(run_context.original_args.fetches)

    def after_run(self, run_context, run_values):
        self.results.append(run_values.results)


def test_predict_hooks_see_the_predictions_as_original_args_as_under_estimators_predict_loop(K):
    """Estimator's predict loop ran `mon_sess.run(predictions)`, so a predict hook found the
    predictions in `run_context.original_args.fetches` (OpenNMT-tf's LogPredictionTimeHook
    re-fetched them, as tests/modelled_hooks.py's PredictionTimeHook does). In predict mode they
    are the step's `"outputs"`: here a dict, as a model_fn's predictions were."""
    inputs = K.Input((X_.shape[1],))
    hidden = K.layers.Dense(16, activation="relu")(inputs)
    logits = K.layers.Dense(3)(hidden)
    model = K.Model(inputs, {"logits": logits, "probabilities": K.layers.Softmax()(logits)})
    kernel, bias, kernel_1, bias_1 = weights_of(model)
    seen = {}
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, X_.shape[1]])
        tf1_logits = tf.matmul(tf.nn.relu(tf.matmul(x, kernel) + bias), kernel_1) + bias_1
        predictions = {"logits": tf1_logits, "probabilities": tf.nn.softmax(tf1_logits)}
        seen["tf1"] = hooks = [modelled_hooks.PredictionTimeHook(), KeepPredictions()]
        with tf.compat.v1.train.MonitoredSession(hooks=hooks) as session:
            for start in (0, 32):
                session.run(predictions, {x: X_[start : start + 32]})
        assert hooks[1].original == [predictions, predictions]
    seen["keras"] = hooks = [modelled_hooks.PredictionTimeHook(), KeepPredictions()]
    out = model.predict(X_[:64], batch_size=32, verbose=0, callbacks=[HookCallback(hooks, mode="predict")])
    assert [o.name for o in hooks[1].original] == ["keras_logs/outputs:0"] * 2
    for system in ("tf1", "keras"):
        timer, keep = seen[system]
        assert timer.examples == 64
        assert [sorted(r) for r in keep.results] == [["logits", "probabilities"]] * 2
        for key in ("logits", "probabilities"):
            assert all(isinstance(r[key], np.ndarray) for r in keep.results)
            np.testing.assert_allclose(np.concatenate([r[key] for r in keep.results]), out[key], atol=1e-5)


# -- what session.run gives: types, dtypes and shapes, for every kind of fetch --


def _kind(value):
    """A value's type, dtype and shape, as a comparison of what two runs fetched sees them."""
    if isinstance(value, dict):
        return {k: _kind(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_kind(v) for v in value)
    return (type(value), getattr(value, "dtype", None), getattr(value, "shape", None))


class FetchKinds(V1.train.SessionRunHook):
    """Fetches one of each kind: a log key (the loss), model variables (the 0-d rate, a kernel), the
    global step, the batch's labels and predictions (TF1: the model_fn's `y` and `logits`), tensors
    derived from them, a string, and variables the hook makes (ref and resource) and an op."""

    def __init__(self):
        self.results = []

    def begin(self):
        g = V1.get_default_graph()
        loss, logits = g.get_tensor_by_name("loss:0"), g.get_tensor_by_name("logits:0")
        ref = V1.get_variable("ref_counter", initializer=np.int32(3), use_resource=False)
        resource = V1.get_variable("resource_counter", initializer=np.float64(0.5), use_resource=True)
        self.fetches = {
            "loss": "loss:0",
            "rate": "learning_rate:0",
            "kernel": "dense/kernel:0",
            "step": V1.train.get_global_step(),
            "labels": "y:0",
            "logits": logits,
            "double_loss": loss * 2.0,
            "argmax": tf.argmax(logits, 1),
            "text": tf.strings.as_string(loss),
            "hook_variables": [ref, resource],
            "op": tf.no_op(),
        }

    def before_run(self, run_context):
        return V1.train.SessionRunArgs(self.fetches)

    def after_run(self, run_context, run_values):
        self.results.append(run_values.results)


def test_every_kind_of_fetch_comes_back_as_session_run_gave_it(K):
    """TF1's Session.run gave a numpy scalar of the tensor's dtype for a 0-d value (np.float32 for
    the float32 loss and rate, np.int64 for the step), an ndarray otherwise, bytes for a string, None
    for an op; HookCallback gave log keys as Python floats and the rate as a 0-d ndarray."""
    model = make_model(K, layer_names=TF1_NAMES)
    tf1, keras_side = FetchKinds(), FetchKinds()
    run_tf1_mlp([tf1], weights_of(model), 3)
    fit_mlp(K, [keras_side], 3, model=model, names={"y": "labels", "logits": "predictions"})
    for ours, theirs in zip(keras_side.results, tf1.results, strict=True):
        expected = _kind(theirs)
        if keras.backend.backend() == "jax" and K is keras:
            # JAX holds integers as int32 (without jax_enable_x64): the batch's labels are as the step had them.
            expected["labels"] = (np.ndarray, np.dtype("int32"), expected["labels"][2])
        assert _kind(ours) == expected
        assert type(ours["text"]) is bytes and ours["op"] is None
        for key in ("loss", "double_loss", "rate"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-5)
        np.testing.assert_array_equal(ours["labels"], theirs["labels"])
        np.testing.assert_allclose(ours["logits"], theirs["logits"], atol=1e-5)
        assert ours["hook_variables"] == theirs["hook_variables"] == [3, 0.5]
    assert [r["text"] for r in keras_side.results] == [b"%f" % r["loss"] for r in keras_side.results]


def _tf_lines(caplog_messages, prefix):
    return [m.split(" (")[0] for m in caplog_messages if m.startswith(prefix)]


def test_estimators_own_logging_hook_with_the_global_step_variable_logs_tf1s_lines(K, tf_info):
    """`LoggingTensorHook({"loss": loss, "step": get_global_step()})`, which Estimator.train added to
    every run, failed with `TypeError: Variable is unhashable`. Its lines are TF1's, character for
    character in the loss (np.float32's format), with the step one less: TF1's fetch of the ref
    variable itself read it after the run's increment, HookCallback gives every fetch of the global
    step the step's value before it (as the stock hooks' step read)."""

    def hooks():
        loss = V1.get_default_graph().get_tensor_by_name("loss:0")
        return [V1.train.LoggingTensorHook({"loss": loss, "step": V1.train.get_global_step()}, every_n_iter=2)]

    model = make_model(K, layer_names=TF1_NAMES)
    run_tf1_mlp(hooks, weights_of(model), 6)
    tf1 = _tf_lines(tf_info, "loss = ")
    tf_info.clear()
    fit_mlp(K, hooks, 6, model=model)
    ours = _tf_lines(tf_info, "loss = ")
    assert len(ours) == len(tf1) == 3
    tf1_losses = [line.split(", step = ")[0] for line in tf1]
    our_losses = [line.split(", step = ")[0] for line in ours]
    if keras.backend.backend() == "tensorflow" or K is not keras:
        assert our_losses == tf1_losses
    else:  # another backend's kernels may round the loss one float32 unit apart: the same format, close values
        assert [text.removeprefix("loss = ") for text in our_losses] == [
            str(np.float32(text.removeprefix("loss = "))) for text in our_losses
        ]
        assert [float(t.removeprefix("loss = ")) for t in our_losses] == pytest.approx(
            [float(t.removeprefix("loss = ")) for t in tf1_losses], rel=1e-6
        )
    assert [int(line.split(", step = ")[1]) for line in ours] == [int(line.split(", step = ")[1]) - 1 for line in tf1]


BENCHMARK_METRIC = re.compile(
    r"Benchmark metric: \{'name': '(\w+)', 'value': ([^,]+), 'unit': None, 'global_step': ([^,]+),"
)


def test_the_official_models_logging_metric_hook_logs_the_rate_and_the_loss_as_under_tf1(K, tf_info):
    """tensorflow/models' LoggingMetricHook adds the global step variable to its tensors (it failed:
    unhashable), and its logger drops a value that is not a `numbers.Number` (the rate, a 0-d
    ndarray, was dropped). The hook and the logger are the PyPI package tf-models-official
    2.1.0.dev2's (a test extra), imported after `install_estimator_aliases()`; the logger's
    `BaseBenchmarkLogger` logs each metric as "Benchmark metric: {...}" at INFO, and a dropped
    value as a warning, "Metric value to log should be a number"."""
    install_estimator_aliases()  # metric_hook.py subclasses tf.estimator.LoggingTensorHook
    metric_hook = importlib.import_module("official.utils.logs.metric_hook")
    logger = importlib.import_module("official.utils.logs.logger")

    def hooks():
        return [
            metric_hook.LoggingMetricHook(
                {"loss": "loss", "learning_rate": "learning_rate"},
                metric_logger=logger.BaseBenchmarkLogger(),
                every_n_iter=1,
            )
        ]

    def logged():
        """The metrics logged, as (name, value, the global step's repr), and the warnings of drops."""
        metrics = [match.groups() for match in map(BENCHMARK_METRIC.match, tf_info) if match]
        drops = [m for m in tf_info if m.startswith("Metric value to log should be a number")]
        tf_info.clear()
        return [(name, float(value), step) for name, value, step in metrics], drops

    model = make_model(K, layer_names=TF1_NAMES)
    run_tf1_mlp(hooks, weights_of(model), 4)
    tf1, tf1_drops = logged()
    fit_mlp(K, hooks, 4, model=model)
    ours, our_drops = logged()
    assert our_drops == tf1_drops == []
    names = [name for name, _, _ in ours]
    assert names == [name for name, _, _ in tf1] == ["learning_rate", "loss"] * 4
    assert [v for _, v, _ in ours] == pytest.approx([v for _, v, _ in tf1], rel=1e-6)
    # The global step as the logger printed it: an np.int64 on both sides (its repr), as TF1's fetch gave it.
    for _, _, step in ours + tf1:
        assert step == repr(np.int64(int(re.search(r"(\d+)\)?$", step).group(1)))), (ours, tf1)


# A model_fn's schedules on the global step, and the Keras schedules that compute the same rates.
SCHEDULES = {
    "piecewise_constant": (
        lambda step: V1.train.piecewise_constant(step, [2, 4], [0.1, 0.05, 0.01]),
        lambda K: K.optimizers.schedules.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01]),
    ),
    "exponential_decay": (
        lambda step: V1.train.exponential_decay(0.1, step, decay_steps=2, decay_rate=0.5),
        lambda K: K.optimizers.schedules.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5),
    ),
}


class Rates(V1.train.SessionRunHook):
    """Fetches the rate (by `name`), a tensor built on it in `begin()`, and the rate again in its own
    `session.run` after the step."""

    def __init__(self, name):
        self.name = name
        self.seen, self.doubled, self.after = [], [], []

    def begin(self):
        self.double = V1.get_default_graph().get_tensor_by_name(f"{self.name}:0") * 2.0

    def before_run(self, run_context):
        return V1.train.SessionRunArgs([f"{self.name}:0", self.double])

    def after_run(self, run_context, run_values):
        rate, double = run_values.results
        self.seen.append(rate)
        self.doubled.append(double)
        self.after.append(run_context.session.run(f"{self.name}:0"))


@pytest.mark.parametrize("via", ["name", "names map"])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_a_hook_fetching_a_scheduled_rate_sees_the_rate_that_trained_the_step_as_under_tf1(K, tf_info, schedule, via):
    """A model_fn's rate computed from the global step held, in the run of step k, the rate that trained
    step k (the update, which reads it, runs before the increment); a hook's own `session.run` after
    the step ran it at step k+1. Keras's `optimizer.learning_rate` after the step is step k+1's already:
    hooks got it one step ahead, in the rate's log lines and in every op built on it."""
    tf1_schedule, keras_schedule = SCHEDULES[schedule]
    model = make_model(K, layer_names=TF1_NAMES, learning_rate=keras_schedule(K))
    name, names = ("learning_rate", None) if via == "name" else ("lr", {"lr": "learning_rate"})
    sides = {}
    for side, rate_name in (("tf1", "learning_rate"), ("keras", name)):
        rates = Rates(rate_name)
        hooks = [V1.train.LoggingTensorHook({"learning_rate": rate_name}, every_n_iter=1), rates]
        tf_info.clear()
        if side == "tf1":
            final = run_tf1_mlp(hooks, weights_of(model), 6, learning_rate=tf1_schedule)
        else:
            fit_mlp(K, hooks, 6, model=model, names=names)
        sides[side] = rates, _tf_lines(tf_info, "learning_rate = ")
    (tf1, tf1_lines), (ours, our_lines) = sides["tf1"], sides["keras"]
    assert_same_weights(final, model)  # both trained with the same rates
    assert len(tf1.seen) == 6 and len(set(tf1.seen)) > 1  # the rate changes: a step ahead would show
    assert ours.seen == pytest.approx(tf1.seen, rel=1e-6)
    assert [type(r) for r in ours.seen] == [type(r) for r in tf1.seen] == [np.float32] * 6
    assert ours.doubled == pytest.approx(tf1.doubled, rel=1e-6)
    assert ours.after == pytest.approx(tf1.after, rel=1e-6)  # a run of its own: the next step's rate
    assert tf1.after[:-1] == pytest.approx(tf1.seen[1:], rel=1e-6)
    assert our_lines == tf1_lines and len(tf1_lines) == 6


def test_log_tensor_of_a_names_map_name_is_the_tensor_it_maps_to_as_the_model_fns_was(K):
    """official/r1/mnist named its tensors (`cross_entropy`, `train_accuracy`): with
    `names={"cross_entropy": "loss"}`, `log_tensor("cross_entropy")` made a placeholder for a log key
    "cross_entropy" and failed at the first step. Ops over it give what TF1's gave over the model_fn's."""

    def hooks(tensor):
        def make():
            keep = FetchKinds()
            keep.begin = lambda: setattr(keep, "fetches", {"double": tensor() * 2.0, "name": "cross_entropy:0"})
            return [keep]

        return make

    model = make_model(K, layer_names=TF1_NAMES)
    tf1 = hooks(lambda: tf.identity(V1.get_default_graph().get_tensor_by_name("loss:0"), name="cross_entropy"))
    seen_tf1, seen_keras = [], []
    run_tf1_mlp(lambda: seen_tf1.extend(tf1()) or seen_tf1, weights_of(model), 3)
    ours = hooks(lambda: log_tensor("cross_entropy"))
    fit_mlp(K, lambda: seen_keras.extend(ours()) or seen_keras, 3, model=model, names={"cross_entropy": "loss"})
    tf1_results, keras_results = seen_tf1[0].results, seen_keras[0].results
    assert _kind(keras_results) == _kind(tf1_results)
    for a, b in zip(keras_results, tf1_results, strict=True):
        assert a == pytest.approx(b, rel=1e-5)


# -- eval: each name as a TF1 eval graph held it ------------------------------------


class EvalRecorder(V1.train.SessionRunHook):
    """Fetches `step_fetches` each step, and `end_fetches` in `end()`, as TF1 eval hooks did."""

    def __init__(self, step_fetches: dict[str, str], end_fetches: dict[str, str]) -> None:
        self.step_fetches, self.end_fetches = step_fetches, end_fetches
        self.steps: list[dict[str, object]] = []
        self.at_end: dict[str, object] = {}

    def before_run(self, run_context):
        return V1.train.SessionRunArgs(self.step_fetches)

    def after_run(self, run_context, run_values):
        self.steps.append(run_values.results)

    def end(self, session):
        self.at_end = session.run(self.end_fetches)


def test_eval_hooks_see_the_batch_loss_and_streaming_metrics_then_the_results_at_end(K):
    """In an Estimator's evaluation, `EstimatorSpec.loss` held each batch's loss, a
    `tf.metrics` value the aggregate since the evaluation began, and a fetch in `end()`
    the aggregates Estimator reported: the same names under `evaluate()`'s HookCallback."""
    weights = initial_weights(K)
    x, y = make_data(128, seed=5)
    # TF1: Estimator's eval graph, its loss and eval_metric_ops (the loss's mean added as Estimator did).
    tf1 = EvalRecorder(
        {"loss": "loss:0", "accuracy": "accuracy/update_op:0"},
        {"loss": "mean_loss/value:0", "accuracy": "accuracy/value:0"},
    )
    with tf.Graph().as_default() as graph:
        tf1_mlp(weights)
        logits, labels, loss = (graph.get_tensor_by_name(n) for n in ("logits:0", "y:0", "loss:0"))
        updates = [V1.metrics.accuracy(labels, tf.argmax(logits, 1), name="accuracy")[1]]
        updates.append(V1.metrics.mean(loss, name="mean_loss")[1])
        with V1.train.MonitoredSession(hooks=[tf1]) as session:
            for start in range(0, len(x), BATCH):
                session.run(updates, {"x:0": x[start : start + BATCH], "y:0": y[start : start + BATCH]})
    model = make_model(K, layer_names=TF1_NAMES)
    model.set_weights(weights)
    names = {"loss": "loss:0", "accuracy": "accuracy:0"}
    keras_side = EvalRecorder(names, names)
    callback = HookCallback(keras_side, mode="eval")
    results = model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True, callbacks=[callback])
    assert len(keras_side.steps) == len(tf1.steps) == len(x) // BATCH
    for step, (seen, truth) in enumerate(zip(keras_side.steps, tf1.steps, strict=True)):
        assert seen == pytest.approx(truth, rel=TOLERANCE), f"step {step}"
        assert type(seen["loss"]) is type(truth["loss"]) is np.float32
    # The batch's loss, not the mean so far.
    assert keras_side.steps[1]["loss"] != pytest.approx((tf1.steps[0]["loss"] + tf1.steps[1]["loss"]) / 2, rel=1e-3)
    assert keras_side.at_end == pytest.approx(tf1.at_end, rel=TOLERANCE)
    assert keras_side.at_end == pytest.approx(results, rel=1e-6)


def eval_loss_metric(K, kind):
    """A Keras metric named `eval_loss` of the per-example loss, as BERT's run_classifier named its
    `tf.metrics.mean(per_example_loss)`: a Keras metric object, or a metric function so named."""

    def eval_loss(y_true, y_pred):
        return K.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)

    return K.metrics.MeanMetricWrapper(eval_loss, name="eval_loss") if kind == "metric" else eval_loss


@pytest.mark.parametrize("kind", ["metric", "function"])
def test_an_eval_metric_named_eval_loss_gives_eval_hooks_the_aggregate_as_tf_metrics_mean(K, kind):
    """A key ending in `_loss` is a loss only if the compiled model's loss tracks it: BERT's `eval_loss`,
    `tf.metrics.mean(per_example_loss)`, held the aggregate since the evaluation began, and its
    hooks got that, not the batch's loss."""
    weights = initial_weights(K)
    x, y = make_data(128, seed=5)
    tf1 = EvalRecorder({"loss": "loss:0", "eval_loss": "eval_loss/update_op:0"}, {"eval_loss": "eval_loss/value:0"})
    with tf.Graph().as_default() as graph:
        tf1_mlp(weights)
        logits, labels = graph.get_tensor_by_name("logits:0"), graph.get_tensor_by_name("y:0")
        per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        update = V1.metrics.mean(per_example_loss, name="eval_loss")[1]
        with V1.train.MonitoredSession(hooks=[tf1]) as session:
            for start in range(0, len(x), BATCH):
                session.run(update, {"x:0": x[start : start + BATCH], "y:0": y[start : start + BATCH]})
    model = make_model(K, layer_names=TF1_NAMES, metrics=(eval_loss_metric(K, kind),))
    model.set_weights(weights)
    names = {"loss": "loss:0", "eval_loss": "eval_loss:0"}
    keras_side = EvalRecorder(names, {"eval_loss": "eval_loss:0"})
    results = model.evaluate(
        x, y, batch_size=BATCH, verbose=0, return_dict=True, callbacks=[HookCallback(keras_side, mode="eval")]
    )
    assert len(keras_side.steps) == len(tf1.steps) == len(x) // BATCH
    for step, (seen, truth) in enumerate(zip(keras_side.steps, tf1.steps, strict=True)):
        assert seen == pytest.approx(truth, rel=TOLERANCE), f"step {step}"
    # From the second batch on, the aggregate is not the batch's loss.
    assert keras_side.steps[1]["eval_loss"] != pytest.approx(keras_side.steps[1]["loss"], rel=1e-3)
    assert keras_side.at_end == pytest.approx(tf1.at_end, rel=TOLERANCE)
    assert keras_side.at_end["eval_loss"] == pytest.approx(results["eval_loss"], rel=1e-6)


def test_a_multi_output_models_output_losses_are_the_batchs_in_eval_and_its_metrics_the_aggregates(K):
    """`<output>_loss` keys are the compiled loss's, each batch's own; an output's metric (its key ends
    in `_loss` too, by its function's name) the aggregate: compared with `evaluate()` of that batch
    alone, and of the batches so far."""

    def shifted_loss(y_true, y_pred):  # a metric, whose key ends in _loss
        return K.losses.sparse_categorical_crossentropy(y_true, y_pred + 1.0, from_logits=True)

    K.utils.set_random_seed(0)
    inputs = K.Input((8,))
    hidden = K.layers.Dense(16, activation="relu")(inputs)
    model = K.Model(inputs, [K.layers.Dense(3, name="a")(hidden), K.layers.Dense(3, name="b")(hidden)])
    loss = K.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile("sgd", loss=[loss, loss], metrics=[[shifted_loss], []])
    x, y = make_data(96, seed=4)
    z = (y + 1) % 3

    def evaluate(start, stop, callbacks=()):
        return model.evaluate(
            x[start:stop],
            (y[start:stop], z[start:stop]),
            batch_size=BATCH,
            verbose=0,
            return_dict=True,
            callbacks=list(callbacks),
        )

    metric = next(k for k in evaluate(0, BATCH) if k.startswith("a_") and "shifted" in k)
    losses = ("loss", "a_loss", "b_loss")
    recorder = EvalRecorder({k: k for k in (*losses, metric)}, {})
    evaluate(0, len(x), [HookCallback(recorder, mode="eval")])
    assert len(recorder.steps) == len(x) // BATCH
    for step, seen in enumerate(recorder.steps):
        alone, so_far = evaluate(step * BATCH, (step + 1) * BATCH), evaluate(0, (step + 1) * BATCH)
        assert {k: seen[k] for k in losses} == pytest.approx({k: alone[k] for k in losses}, rel=1e-5), step
        assert seen[metric] == pytest.approx(so_far[metric], rel=1e-5), step
        if step:  # the aggregate is not the batch's value
            assert seen[metric] != pytest.approx(alone[metric], rel=1e-3), step
