"""Fetch resolution: structures and every kind of leaf (bad fetches: test_bad_input.py)."""

from __future__ import annotations

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import Recorder, make_data, make_model

from hooks2callbacks import HookCallback

X, Y = make_data()
Pair = collections.namedtuple("Pair", ["loss", "step"])


class FetchHook:
    """Fetches `build()` (called in begin, inside the adapter graph) every step."""

    def __init__(self, build):
        self.build = build
        self.results = []

    def begin(self):
        self.fetches = self.build(tf.compat.v1.get_default_graph())

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self.fetches)

    def after_run(self, run_context, run_values):
        self.results.append(run_values.results)


def fit_with(hook, epochs=1, model=None):
    """Trains with the hook; returns each step's own loss and metrics (`Recorder.train_batch`)."""
    model = model or make_model()
    recorder = Recorder(keras, X, Y)
    model.fit(X, Y, batch_size=32, epochs=epochs, verbose=0, shuffle=False, callbacks=[recorder, HookCallback(hook)])
    return recorder.train_batch


def test_nested_structure_keeps_its_shape_and_the_batch_values():
    hook = FetchHook(
        lambda g: {
            "by_name": ["loss", "accuracy:0"],
            "pair": Pair(g.get_tensor_by_name("loss:0"), tf.compat.v1.train.get_global_step()),
            "tuple": ("global_step:0", collections.OrderedDict(a="loss")),
        }
    )
    batches = fit_with(hook)
    for step, (results, batch) in enumerate(zip(hook.results, batches, strict=True)):
        loss, accuracy = results["by_name"]
        assert [loss, accuracy] == pytest.approx([batch["loss"], batch["accuracy"]], rel=1e-6)
        assert results == {
            "by_name": [loss, accuracy],
            "pair": Pair(loss, step),
            "tuple": (step, collections.OrderedDict(a=loss)),
        }
        assert type(results["pair"]) is Pair and type(results["tuple"][1]) is collections.OrderedDict
        # As Session.run gave a float32 tensor's value (Keras's logs hold a Python float).
        assert type(loss) is np.float32
    assert type(hook.results[0]["pair"].step) is np.int64


def test_derived_ops_run_with_the_log_values_fed():
    hook = FetchHook(
        lambda g: {
            "double": g.get_tensor_by_name("loss:0") * 2.0,
            "step_plus": tf.compat.v1.train.get_global_step() + 100,
            "group": tf.no_op(),
        }
    )
    batches = fit_with(hook)
    for step, (results, batch) in enumerate(zip(hook.results, batches, strict=True)):
        assert results["double"] == pytest.approx(2 * batch["loss"], rel=1e-6)
        assert results["step_plus"] == step + 100  # the stale step, as in TF1's merged run
        assert results["group"] is None


def test_a_names_entry_pointing_at_the_op_name_of_a_hooks_own_tensor_fetches_that_tensor():
    # names={"cross_entropy": "doubled"}: the op name of a tensor the hook made in begin(). Fetched as a
    # tensor ("cross_entropy:0") it is that tensor's value; the op's own name fetches the op, whose
    # value in TF1's Session.run is None.
    hook = FetchHook(
        lambda g: (
            tf.identity(g.get_tensor_by_name("loss:0") * 2.0, name="doubled"),
            {"by_map": "cross_entropy:0", "own": "doubled:0", "op": "doubled"},
        )[1]
    )
    model = make_model()
    recorder = Recorder(keras, X, Y)
    callback = HookCallback(hook, names={"cross_entropy": "doubled"})
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[recorder, callback])
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        tf.identity(tf.constant(1.0), name="doubled")
        tf1_op_value = session.run("doubled")
    for results, batch in zip(hook.results, recorder.train_batch, strict=True):
        assert results["by_map"] == results["own"] == pytest.approx(2 * batch["loss"], rel=1e-6)
        assert results["op"] is tf1_op_value is None


def test_optimizer_iterations_counts_as_the_global_step():
    model = make_model()
    hook = FetchHook(lambda g: model.optimizer.iterations)
    fit_with(hook, model=model)
    assert hook.results == list(range(10))


def test_eager_variables_give_their_current_value():
    counter = tf.Variable(5.0)
    keras_var = keras.Variable(3.0)

    class Bump(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            counter.assign_add(1.0)

    hook = FetchHook(lambda g: [counter, keras_var])
    model = make_model()
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[Bump(), HookCallback(hook)])
    assert [float(r[0]) for r in hook.results] == [6.0 + i for i in range(10)]
    assert all(float(r[1]) == 3.0 for r in hook.results)


@pytest.mark.slow
def test_op_count_is_constant_over_2000_steps_with_a_graph_run_each_step():
    counts = []

    class Count(FetchHook):
        def after_run(self, run_context, run_values):
            super().after_run(run_context, run_values)
            counts.append(len(run_context.session.graph.get_operations()))

    # "d" is derived from a log value, so every step makes a real graph run.
    hook = Count(
        lambda g: {"l": "loss", "a": g.get_tensor_by_name("accuracy:0"), "d": g.get_tensor_by_name("loss:0") + 1}
    )
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(32).repeat()
    make_model().fit(dataset, epochs=4, steps_per_epoch=500, verbose=0, shuffle=False, callbacks=[HookCallback(hook)])
    assert len(counts) == 2000 and len(set(counts)) == 1
    assert [r["d"] for r in hook.results] == pytest.approx([r["l"] + 1 for r in hook.results])


def test_tensor_names_looked_up_in_the_first_before_run_work():
    class LateLookup:
        def before_run(self, run_context):
            graph = run_context.session.graph
            return tf.compat.v1.train.SessionRunArgs(graph.get_tensor_by_name("accuracy:0"))

        def after_run(self, run_context, run_values):
            self.last = run_values.results

    hook = LateLookup()
    batches = fit_with(hook)
    assert hook.last == pytest.approx(batches[-1]["accuracy"], rel=1e-6)


def test_logs_view_is_indexable_by_tensor():
    class Tutorial:
        def begin(self):
            self.loss = tf.compat.v1.get_default_graph().get_tensor_by_name("loss:0")

        def after_run(self, run_context, run_values):
            self.last = run_values.results[self.loss]

    hook = Tutorial()
    batches = fit_with(hook)
    assert hook.last == pytest.approx(batches[-1]["loss"], rel=1e-6)
