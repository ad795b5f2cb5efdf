"""The Keras model in the adapter graph (`hooks2callbacks._model`): names, collections, reads, writes, names map.

The comparisons with TF1 itself (real hooks under a MonitoredSession) are in
`test_differential.py`; these check the mapping on a real fit of the small
MLP, once per flavour (and on JAX and PyTorch through `test_backends.py`).
"""

from __future__ import annotations

import re
import signal
import warnings

import installed
import keras
import modelled_hooks
import numpy as np
import pytest
import tensorflow as tf
from support import BATCH, TF1_NAMES, Recorder, fit_in_order, iterations, make_data, make_model, weights_of
from tensorflow.python.ops import state_ops

from hooks2callbacks import HookCallback, UnknownLogKeyError, log_tensor
from hooks2callbacks._graph import AdapterGraph
from hooks2callbacks._tf1_names import tf1_name

V1 = tf.compat.v1
X, Y = make_data()


def fit(model, hooks, steps=10, names=None, **kwargs):
    return fit_in_order(model, [HookCallback(hooks, names=names, **kwargs)], steps)


def rate(model):
    return float(np.asarray(model.optimizer.learning_rate))


class Seen(V1.train.SessionRunHook):
    """Records what `tf.compat.v1` shows in `begin()`, and fetches `fetches` each step."""

    def __init__(self, fetches=None):
        self.fetches = fetches
        self.results = []

    def begin(self):
        self.global_names = [v.name for v in V1.global_variables()]
        self.trainable = [v.name for v in V1.trainable_variables()]
        self.model_names = [v.name for v in V1.model_variables()]
        if callable(self.fetches):
            self.fetches = self.fetches()

    def before_run(self, run_context):
        return None if self.fetches is None else V1.train.SessionRunArgs(self.fetches)

    def after_run(self, run_context, run_values):
        if self.fetches is not None:
            self.results.append(run_values.results)


# -- names and collections -----------------------------------------------------------


def test_collections_hold_the_model_variables_by_tf1_names(K):
    seen = Seen()
    fit(make_model(K, layer_names=TF1_NAMES), seen, steps=1)
    weights = ["dense/kernel:0", "dense/bias:0", "dense_1/kernel:0", "dense_1/bias:0"]
    # tf_keras's SGD keeps a momentum slot per weight even at momentum 0; Keras 3's keeps none.
    slots = [] if K is keras else [f"SGD/m/{w}" for w in weights]
    assert seen.global_names == ["global_step:0", *weights, "learning_rate:0", *slots]
    assert seen.trainable == seen.model_names == weights


def test_the_naming_rule_strips_the_model_name_and_what_tf_refuses(K):
    model = make_model(K)  # layers named by Keras: dense_<n>
    kernel = model.weights[0]
    name = tf1_name(kernel, f"{model.name}/")
    assert re.fullmatch(r"dense(_\d+)?/kernel", name), name
    assert tf1_name(type("V", (), {"path": "m/my layer/w:x"})(), "m/") == "my_layer/w_x"
    assert tf1_name(type("V", (), {"path": "_private/w"})()) == "v_private/w"


def test_optimizer_slots_are_global_variables_named_as_tf1_named_them(K):
    model = make_model(K, layer_names=TF1_NAMES)
    model.compile(optimizer=K.optimizers.Adam(0.01), loss=model.loss)
    seen = Seen()
    fit(model, seen, steps=1)
    slots = [
        n for n in seen.global_names if n not in ("global_step:0", "learning_rate:0") and n not in seen.model_names
    ]
    # TF1's AdamOptimizer: `<variable>/Adam` (m) and `<variable>/Adam_1` (v); built before begin().
    expected = {
        f"{w}/{s}:0"
        for w in ("dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias")
        for s in ("Adam", "Adam_1")
    }
    assert set(slots) == expected
    assert not any("iteration" in n for n in seen.global_names)  # the step counter is the global step


@pytest.mark.parametrize(
    ("optimizer", "slots"),
    [
        (lambda K: K.optimizers.Adagrad(0.01), ("Adagrad",)),
        (lambda K: K.optimizers.RMSprop(0.01), ("RMSProp",)),
        (lambda K: K.optimizers.RMSprop(0.01, momentum=0.5), ("RMSProp", "RMSProp_1")),
        (lambda K: K.optimizers.RMSprop(0.01, momentum=0.5, centered=True), ("RMSProp", "RMSProp_1", "RMSProp_2")),
    ],
)
def test_adagrad_and_rmsprop_slots_get_tf1_names_in_tf1_order(K, optimizer, slots):
    model = make_model(K, layer_names=TF1_NAMES)
    model.compile(optimizer=optimizer(K), loss=model.loss)
    seen = Seen([f"dense/kernel/{s}:0" for s in slots])
    fit(model, seen, steps=1)
    names = set(seen.global_names) - set(seen.model_names) - {"global_step:0", "learning_rate:0"}
    assert names == {
        f"{w}/{s}:0" for w in ("dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias") for s in slots
    }
    # Each name holds the slot TF1 kept under it: rms, then (centered) the mean gradient "mg", then momentum.
    kinds = {"Adagrad": "accumulator", "RMSProp": "velocity"}
    kinds["RMSProp_1"], kinds["RMSProp_2"] = ("average_gradient", "momentum") if len(slots) == 3 else ("momentum", None)
    kernel_shape = tuple(model.trainable_weights[0].shape)  # dense/kernel's alone (Keras < 3.9 names
    for slot, value in zip(slots, seen.results[-1], strict=True):  # Adagrad's slots "accumulator")
        (keras_slot,) = [
            v for v in model.optimizer.variables if kinds[slot] in v.name and tuple(v.shape) == kernel_shape
        ]
        np.testing.assert_array_equal(value, np.asarray(keras_slot))


def test_a_run_whose_hooks_never_ask_builds_no_model_variable(K):
    graphs = []

    class Graph(V1.train.SessionRunHook):
        def begin(self):
            graphs.append(V1.get_default_graph())

        def before_run(self, run_context):
            return V1.train.SessionRunArgs(["loss", V1.train.get_global_step()])

    fit(make_model(K), [Graph(), V1.train.StopAtStepHook(last_step=3), V1.train.NanTensorHook("loss")], steps=3)
    (graph,) = graphs
    # Names were looked up ("loss"), so the mirror knows its names; it made no variable.
    assert not graph.mirror.built
    assert not [op for op in graph.get_operations() if op.type == "VariableV2" and op.name != "global_step"]


def test_sealing_does_not_build_and_a_lookup_after_sealing_does():
    model = make_model()
    graph = AdapterGraph()
    from hooks2callbacks._model import ModelMirror

    graph.mirror = ModelMirror(graph, model, {}, train=True)
    graph.seal()
    assert not graph.mirror.built and graph.finalized
    kernel = graph.get_tensor_by_name(f"{model.layers[0].name}/kernel:0")
    assert graph.mirror.built and graph.finalized and kernel.dtype._is_ref_dtype


# -- reads ---------------------------------------------------------------------------------


def test_reads_give_each_step_s_value_after_its_update(K):
    norm_of = lambda: tf.linalg.global_norm(V1.trainable_variables())  # noqa: E731
    seen = Seen(
        lambda: {
            "norm": norm_of(),
            "kernel": "dense/kernel:0",
            "rate": "learning_rate",
            "by_variable": V1.trainable_variables()[2],
        }
    )
    model = fit(make_model(K, layer_names=TF1_NAMES), seen, steps=5)
    kernels = [r["kernel"] for r in seen.results]
    assert all(
        not np.allclose(a, b) for a, b in zip(kernels, kernels[1:], strict=False)
    )  # the trainer's state, each step
    final = weights_of(model)
    np.testing.assert_allclose(kernels[-1], final[0])
    np.testing.assert_allclose(seen.results[-1]["by_variable"], final[2])
    assert seen.results[-1]["norm"] == pytest.approx(float(np.sqrt(sum((w**2).sum() for w in final))), rel=1e-5)
    assert [r["rate"] for r in seen.results] == pytest.approx([0.05] * 5)


def test_a_log_key_named_learning_rate_wins_over_the_optimizer_rate(K):
    # A metric named "learning_rate" whose value is 7 on every batch.
    rate = K.metrics.MeanMetricWrapper(lambda y_true, y_pred: y_pred[:, 0] * 0.0 + 7.0, name="learning_rate")
    model = make_model(K, layer_names=TF1_NAMES)
    model.compile(optimizer=K.optimizers.SGD(0.05), loss=model.loss, metrics=[rate])
    seen = Seen("learning_rate")
    fit(model, seen, steps=2)
    assert seen.results == pytest.approx([7.0, 7.0])


# -- writes -------------------------------------------------------------------------------


class Write(V1.train.SessionRunHook):
    """Runs the ops `make()` builds in begin(), in the fetches of step `at` (counted from 0)."""

    def __init__(self, make, at=0):
        self.make, self.at, self.step = make, at, 0

    def begin(self):
        self.ops = self.make()

    def before_run(self, run_context):
        return V1.train.SessionRunArgs(self.ops) if self.step == self.at else None

    def after_run(self, run_context, run_values):
        self.step += 1


def by_name(name):
    return V1.get_default_graph().get_tensor_by_name(name)


def test_a_write_reaches_keras_before_its_next_step(K):
    # Rate 0 and a zero kernel from step 2 on: if the writes reached Keras, the
    # next steps leave the kernel at zero (the JAX trainer re-reads its state).
    def make():
        return V1.group(
            V1.assign(by_name("learning_rate:0"), 0.0), V1.assign(by_name("dense/kernel:0"), tf.zeros([8, 16]))
        )

    kernels = Seen(lambda: "dense/kernel:0")
    model = fit(make_model(K, layer_names=TF1_NAMES), [Write(make, at=2), kernels], steps=6)
    assert rate(model) == 0.0
    np.testing.assert_array_equal(weights_of(model)[0], np.zeros((8, 16)))
    assert not np.allclose(kernels.results[1], 0) and all(np.all(k == 0) for k in kernels.results[2:])


def test_assign_add_and_assign_sub_change_the_keras_variable(K):
    def make():
        return [V1.assign_add(by_name("dense_1/bias:0"), tf.ones([3])), V1.assign_sub(by_name("learning_rate:0"), 0.01)]

    model = make_model(K, layer_names=TF1_NAMES)
    before = weights_of(model)[3]
    model = fit(model, [Write(make, at=0)], steps=1)
    # The step's update ran first (at rate 0.05), then the writes.
    np.testing.assert_allclose(weights_of(model)[3], before + 1.0, atol=0.2)
    assert rate(model) == pytest.approx(0.04)


class Feed(V1.train.SessionRunHook):
    """Feeds `feeds` in every step's SessionRunArgs, fetching `fetches` (built in begin() if callable)."""

    def __init__(self, feeds, fetches=None):
        self.feeds, self.fetches, self.results = feeds, fetches, []

    def begin(self):
        if callable(self.fetches):
            self.fetches = self.fetches()

    def before_run(self, run_context):
        return V1.train.SessionRunArgs(self.fetches, feed_dict=self.feeds)

    def after_run(self, run_context, run_values):
        self.results.append(run_values.results)


def test_a_fed_learning_rate_trains_that_step_and_the_graph_run_sees_it_too(K):
    fed = Feed({"learning_rate:0": 0.2}, fetches=lambda: by_name("learning_rate:0") * 10)
    model = fit(make_model(K, layer_names=TF1_NAMES), [fed], steps=2)
    reference = fit_in_order(make_model(K, layer_names=TF1_NAMES, learning_rate=0.2), [], steps=2)
    for got, expected in zip(weights_of(model), weights_of(reference), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert fed.results == pytest.approx([2.0, 2.0])
    assert rate(model) == pytest.approx(0.05)  # the variable keeps its own value, as in TF1


def test_session_run_feeds_of_the_learning_rate_reach_only_that_run(K):
    seen = []

    class Probe(V1.train.SessionRunHook):
        def begin(self):
            self.doubled = by_name("learning_rate:0") * 2

        def after_run(self, run_context, run_values):
            seen.append(run_context.session.run(self.doubled, feed_dict={"learning_rate:0": 1.5}))
            seen.append(run_context.session.run(self.doubled))

    model = fit(make_model(K, layer_names=TF1_NAMES), [Probe()], steps=1)
    assert seen == pytest.approx([3.0, 0.1])
    assert rate(model) == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        (
            {"dense/kernel:0": np.zeros((8, 16), "float32")},
            r"feeds 'dense/kernel:0', the TF1 variable of a Keras model",
        ),
        ({"learning_rate:0": [0.1, 0.2]}, r"feeds 'learning_rate:0' a value of shape \(2,\); it has shape \(\)"),
    ],
)
def test_feeds_that_cannot_reach_the_step_are_refused_naming_the_hook(K, feeds, message):
    with pytest.raises(ValueError, match=message) as raised:
        fit(make_model(K, layer_names=TF1_NAMES), [Feed(feeds)], steps=1)
    assert "Feed.before_run()" in str(raised.value)


def test_a_feed_of_a_scheduled_learning_rate_is_refused():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    with pytest.raises(ValueError, match=r"feeds 'learning_rate:0', the learning rate: .*schedule"):
        fit(make_model(learning_rate=schedule, layer_names=TF1_NAMES), [Feed({"learning_rate:0": 0.2})], steps=1)


def test_a_write_to_the_global_step_moves_the_optimizer_step(K):
    seen = []

    class Steps(V1.train.SessionRunHook):
        def begin(self):
            self.read = V1.train.get_global_step()

        def before_run(self, run_context):
            return V1.train.SessionRunArgs(self.read)

        def after_run(self, run_context, run_values):
            seen.append(int(run_values.results))

    model = fit(make_model(K), [Write(lambda: V1.assign(V1.train.get_global_step(), 100), at=1), Steps()], steps=4)
    assert seen == [0, 1, 100, 101] and iterations(model) == 102


def test_the_learning_rate_of_a_schedule_reads_the_steps_own_rate_and_refuses_writes(K):
    schedule = K.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    seen = Seen("learning_rate:0")
    fit(make_model(K, learning_rate=schedule), seen, steps=3)
    # The rate that trained steps 0, 1, 2 (the comparison with TF1 is in test_differential.py).
    assert seen.results == pytest.approx([0.1 * 0.5 ** (s / 10) for s in (0, 1, 2)], rel=1e-5)
    with pytest.raises(
        ValueError,
        match=r"Write\.before_run\(\) runs the op '.*' \(Assign\), which writes "
        r"'learning_rate': the optimizer's learning rate is computed .* by a schedule",
    ):
        fit(make_model(K, learning_rate=schedule), Write(lambda: V1.assign(by_name("learning_rate:0"), 0.0)))


def rates_keras_used(K):
    """A callback that reads the optimizer's rate from Keras itself: at batch begin, the rate the step
    is about to use (Keras 3 computes it from `iterations` then); at batch end, tf_keras's
    `learning_rate`, which holds the rate its last step computed."""

    class RatesKerasUsed(K.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.begin, self.end = [], []

        def on_train_batch_begin(self, batch, logs=None):
            self.begin.append(float(np.asarray(self.model.optimizer.learning_rate)))

        def on_train_batch_end(self, batch, logs=None):
            self.end.append(float(np.asarray(self.model.optimizer.learning_rate)))

    return RatesKerasUsed()


def test_a_scheduled_rate_fetched_by_a_hook_is_the_one_keras_trained_the_step_with(K):
    schedule = K.optimizers.schedules.PiecewiseConstantDecay([1, 3], [0.1, 0.05, 0.01])
    seen, used = Seen("learning_rate"), rates_keras_used(K)
    fit_in_order(make_model(K, learning_rate=schedule), [used, HookCallback(seen)], steps=5)
    assert seen.results == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.01])
    if K is keras:
        assert seen.results == pytest.approx(used.begin)
    else:  # tf_keras: `learning_rate` is the step's own (`_current_learning_rate`) after the step
        assert seen.results == pytest.approx(used.end)


def test_under_gradient_accumulation_a_scheduled_rate_is_the_one_of_the_update_the_batch_goes_into():
    """Keras 3 computes the rate from its micro-batch counter: an update applied at the last micro-batch
    of its group uses that micro-batch's rate. A micro-batch that applies nothing sees the rate of the
    update it goes into, the rate of its (stale) global step."""
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01])
    model = make_model()
    model.compile(
        optimizer=keras.optimizers.SGD(schedule, gradient_accumulation_steps=2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    seen, used = Seen(["learning_rate", "global_step"]), rates_keras_used(keras)
    fit_in_order(model, [used, HookCallback(seen)], steps=8)
    assert [int(step) for _, step in seen.results] == [0, 0, 1, 1, 2, 2, 3, 3]
    last_of_group = [used.begin[i | 1] for i in range(8)]  # the micro-batch that applies the update
    assert [rate for rate, _ in seen.results] == pytest.approx(last_of_group)
    assert len(set(last_of_group)) > 1


# -- names map and unknown names -----------------------------------------------------------


def test_a_names_map_gives_tf1_names_to_log_keys_and_variables(K):
    model = make_model(K, layer_names=TF1_NAMES)
    # A hook modelled on NVIDIA's TF1 ConvNets TrainingLoggingHook (tests/modelled_hooks.py).
    logger = modelled_hooks.StepMetricsHook(BATCH, steps_per_epoch=10, warmup_steps=0)

    class Ops(V1.train.SessionRunHook):  # builds on the names in begin(), as a model_fn's consumers did
        def begin(self):
            self.double = by_name("cross_entropy_loss_ref:0") * 2.0
            self.half_rate = by_name("learning_rate_ref:0") * 0.5

        def before_run(self, run_context):
            return V1.train.SessionRunArgs([self.double, self.half_rate, "accuracy_ref"])

        def after_run(self, run_context, run_values):
            self.results = run_values.results

    ops = Ops()
    names = {
        "cross_entropy_loss_ref": "loss",
        "l2_loss_ref:0": "loss",
        "total_loss_ref": "loss",
        "learning_rate_ref": model.optimizer.learning_rate,
        "accuracy_ref": "accuracy",
    }
    recorder = Recorder(K, X, Y)  # each batch's own values, what the names stand for
    fit_in_order(model, [recorder, HookCallback([logger, ops], names=names)], steps=3)
    last = recorder.train_batch[-1]
    per_step = [data for step, data in logger.logged if len(step) == 2]
    assert [d["learning_rate"] for d in per_step] == pytest.approx([0.05] * 3)
    assert per_step[-1]["cross_entropy"] == per_step[-1]["total_loss"] == pytest.approx(last["loss"], rel=1e-6)
    assert ops.results == pytest.approx([2 * last["loss"], 0.025, last["accuracy"]], rel=1e-6)


def test_an_unknown_name_error_lists_every_unknown_name_the_keys_and_the_names_map(K):
    hook = Seen(["loss", "cross_entropy:0", {"acc": "train_accuracy"}, "l2_loss"])
    with pytest.raises(UnknownLogKeyError) as info:
        fit(make_model(K), hook, steps=1, names={"total": "loss"})
    message = str(info.value)
    assert message.startswith(
        "Seen.before_run() fetched the Keras log keys 'cross_entropy', 'train_accuracy', 'l2_loss', which this "
        "step's logs do not contain. Available log keys: ['accuracy', 'loss']. Names map: {'total': 'loss'}."
    )
    assert "HookCallback(names={'tf1_name': 'loss'})" in message


# -- Keras variables used in ops, feeds, collections ---------------------------------------------


def test_a_keras_variable_used_in_an_op_stands_for_its_tf1_variable(K):
    model = make_model(K, layer_names=TF1_NAMES)
    variable = model.optimizer.learning_rate

    def make():
        # Keras 3 variables of the TF backend convert through their operators. A
        # tf.Variable's own operators (tf_keras) read the eager value, and JAX and
        # PyTorch variables compute in their backend: there, pass it to a TF op.
        operators = K is keras and keras.backend.backend() == "tensorflow"
        half = variable * 0.5 if operators else tf.multiply(variable, 0.5)
        return {"half": half, "kernel_norm": tf.norm(model.weights[0])}

    seen = Seen(make)
    fit(model, seen, steps=2)
    assert seen.results[-1]["half"] == pytest.approx(0.025)
    assert seen.results[-1]["kernel_norm"] == pytest.approx(float(np.linalg.norm(weights_of(model)[0])), rel=1e-5)


@pytest.mark.parametrize("name, expected", [("assign", 0.025), ("assign_add", 0.075), ("assign_sub", 0.025)])
def test_assign_on_a_keras_variable_writes_its_tf1_variable(K, name, expected):
    """`tf.compat.v1.assign(model.optimizer.learning_rate, ...)` in begin() works as on its TF1
    variable, and so does a write of a weight; the writes reach Keras before its next step."""
    model = make_model(K, layer_names=TF1_NAMES)
    rate, bias = model.optimizer.learning_rate, model.weights[3]
    assign = getattr(tf.compat.v1, name)  # as hook code calls it, at run time
    seen = Seen(lambda: {"rate": assign(rate, tf.multiply(rate, 0.5)), "bias": assign(bias, tf.ones([3]))})
    fit(model, seen, steps=1)
    assert float(np.asarray(model.optimizer.learning_rate)) == pytest.approx(expected)
    np.testing.assert_allclose(np.asarray(keras.ops.convert_to_numpy(bias)), seen.results[0]["bias"])
    if name == "assign":
        np.testing.assert_array_equal(seen.results[0]["bias"], np.ones(3))


@pytest.mark.parametrize("assign", [state_ops.assign, state_ops.assign_add, state_ops.assign_sub])
def test_tfs_own_assign_bound_before_fails_on_a_keras_variable_naming_its_tf1_variable(K, assign):
    """TF's own functions, bound before hooks2callbacks redirected tf.compat.v1's, still cannot
    take a Keras variable; the note names the TF1 variable to pass."""
    model = make_model(K, layer_names=TF1_NAMES)
    rate = model.optimizer.learning_rate
    with pytest.raises(Exception) as raised:  # AttributeError or TF's eager-capture RuntimeError
        fit(model, Seen(lambda: assign(rate, tf.multiply(rate, 0.5))), steps=1)
    notes = "\n".join(raised.value.__notes__)
    assert "Raised in Seen.begin()" in notes
    assert (
        f"called tf.compat.v1.{assign.__name__} on the Keras variable" in notes
        and f"tf.compat.v1.{assign.__name__}(tf.compat.v1.get_default_graph().get_tensor_by_name("
        "'learning_rate:0'), value)"
        in notes
    )


def test_an_eager_variable_not_of_the_model_is_a_clear_error(K):
    stray = tf.Variable(1.0, name="stray")

    with pytest.raises(
        ValueError,
        match=r"Seen\.begin\(\) used the eager variable 'stray:0' in an op of the adapter "
        r"graph, and it is neither the Keras model's nor its optimizer's.*"
        r"HookCallback\(names=\{'some_name': variable\}\)",
    ):
        fit(make_model(K), Seen(lambda: tf.multiply(stray, 2.0)), steps=1)
    seen = Seen(lambda: tf.multiply(stray, 2.0))
    fit(make_model(K), seen, steps=1, names={"stray": stray})  # mapped: it has a TF1 variable
    assert seen.results == [pytest.approx(2.0)]


@pytest.fixture
def signal_handlers():
    """The signal hook (modelled on NVIDIA's) installs SIGUSR1/SIGTERM handlers in its constructor;
    put pytest's back after."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_hook_feeds_a_placeholder_it_built(K, signal_handlers):
    hook = modelled_hooks.SignalStopHook(sync_freq=2)  # modelled on NVIDIA's TrainingPartitionHook
    hook.signal_received = True  # a signal arrived: its all-reduce (over a fed placeholder) says stop
    model = fit(make_model(K), hook, steps=10)
    assert iterations(model) == 1  # the first step fed 1, fetched it back, and stopped


def test_losses_collection_gives_the_keras_loss(K):
    seen = Seen(lambda: {"total": V1.losses.get_total_loss(), "losses": V1.losses.get_losses()})
    model = make_model(K)
    recorder = Recorder(K, X, Y)
    n = 2 * BATCH
    model.fit(
        X[:n], Y[:n], batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[recorder, HookCallback(seen)]
    )
    loss = recorder.train_batch[-1]["loss"]  # the batch's own, as a TF1 loss tensor held it
    assert seen.results[-1]["total"] == pytest.approx(loss, rel=1e-6)
    assert seen.results[-1]["losses"] == [pytest.approx(loss, rel=1e-6)]


def test_an_empty_collection_a_model_fn_filled_warns_once_naming_hook_and_collection(K):
    class Reads(V1.train.SessionRunHook):
        def begin(self):
            V1.get_collection("predictions")
            V1.get_collection("predictions")
            V1.get_collection(V1.GraphKeys.UPDATE_OPS)  # TF's own: no warning
            V1.summary.merge_all()  # reads SUMMARIES: TF's own

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(make_model(K), [Reads(), modelled_hooks.CounterRatesHook(every_n_steps=2)], steps=2)
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 2, messages
    assert messages[0].startswith(
        "HookCallback: Reads.begin() read the graph collection 'predictions', which is empty."
    )
    assert messages[1].startswith("HookCallback: CounterRatesHook.begin() read the graph collection 'counters'")
    assert "Fill this one yourself in a hooks factory" in messages[0]


def test_a_factory_that_fills_a_collection_silences_the_warning(K):
    def make():
        V1.add_to_collection("predictions", log_tensor("loss"))
        return [Seen(lambda: V1.get_collection("predictions"))]

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model = make_model(K)
        fit(model, make, steps=1)


# -- a tf_keras model given no input shape ------------------------------------------------


def unbuilt_tf_keras_model():
    tf_keras = pytest.importorskip("tf_keras")
    model = tf_keras.Sequential([tf_keras.layers.Dense(8, activation="relu"), tf_keras.layers.Dense(3)])
    model.compile("adam", tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    assert not model.built  # tf_keras makes its weights in the first step
    return model


def test_a_tf_keras_model_without_input_shape_runs_hooks_that_do_not_ask_for_its_variables(tmp_path):
    class Fetches(V1.train.SessionRunHook):
        def __init__(self):
            self.results = []

        def before_run(self, run_context):
            return V1.train.SessionRunArgs(["loss", "accuracy"])

        def after_run(self, run_context, run_values):
            self.results.append(run_values.results)

    seen = Fetches()
    counter = V1.train.StepCounterHook(every_n_steps=1, output_dir=str(tmp_path))  # its writer reads every collection
    model = fit(unbuilt_tf_keras_model(), [counter, seen], steps=3)
    assert len(seen.results) == 3 and all(np.isfinite(r).all() for r in seen.results)
    assert model.built
    assert list(tmp_path.glob("events.out.tfevents.*"))


def test_the_step_0_checkpoint_of_a_tf_keras_model_not_yet_built_warns_that_it_holds_no_weights(tmp_path):
    saver = V1.train.CheckpointSaverHook(str(tmp_path), save_steps=2)
    with pytest.warns(UserWarning, match=r"saved .*model.ckpt-0 before the tf_keras model .* made its weights"):
        model = fit(unbuilt_tf_keras_model(), saver, steps=4)
    saved = {name for name, _ in tf.train.list_variables(str(tmp_path / "model.ckpt-4"))}
    assert any(name.startswith("model/") for name in saved)  # later ones hold the weights
    assert len(model.weights) == 4


def test_a_hook_reading_the_variables_of_a_tf_keras_model_not_yet_built_is_told_how_to_build_it():
    with pytest.raises(ValueError, match=r"do not exist yet: tf_keras makes the weights") as raised:
        fit(unbuilt_tf_keras_model(), Seen(), steps=1)
    assert "model.build(input_shape)" in str(raised.value)
    assert "Raised in Seen.begin()" in "\n".join(getattr(raised.value, "__notes__", []))


# -- tf.distribute without a strategy ------------------------------------------------------


def test_a_hook_that_needs_a_cross_replica_context_fails_as_under_an_undistributed_estimator(K):
    # tensorflow/estimator's own early-stopping hook (run unchanged from the installed
    # tensorflow-estimator 2.15.0, tests/installed.py), which Estimator used only under
    # a train_distribute strategy; without one, in_cross_replica_context() is False in TF1 too (see
    # test_distribute.py for the run under MirroredStrategy).
    hook = installed.estimator_hooks().MultiWorkerEarlyStoppingHook(lambda: False, run_every_steps=2)
    with pytest.raises(AssertionError):
        fit(make_model(K), hook, steps=2)
