"""Each seam of `hooks2callbacks._seams` finds its internal on the installed versions.

CI runs this file on the newest versions and on the floor of `setup.cfg`
(`.ci/floor.txt`): a Keras that moves an internal fails here by name, before
any behaviour test has to explain it.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import make_data, make_model, needs_backend

from hooks2callbacks import HookCallback, _runs, _seams

T = tf.compat.v1.train
X, Y = make_data(64)


def trained(K: Any) -> Any:
    model = make_model(K)
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0)
    return model


@needs_backend("tensorflow", reason="Keras 3's TensorFlow trainer only")
def test_keras3_multi_step_is_the_compiled_function_of_keras_train_function():
    model = trained(keras)
    assert isinstance(_seams.keras3_multi_step(model.train_function), tf.types.experimental.PolymorphicFunction)
    assert _seams.keras3_multi_step(lambda iterator: None) is None


@needs_backend("tensorflow", reason="Keras 3's TensorFlow trainer only")
def test_keras3_train_batch_hands_the_step_x_and_y_as_fit_does_and_trains_as_train_on_batch():
    seen = []

    class Recording(keras.Sequential):
        def train_step(self, data):
            seen.append(len(data))  # at tracing: the structure the step was handed
            return super().train_step(data)

    def model():
        keras.utils.set_random_seed(3)
        made = Recording([keras.Input((8,)), keras.layers.Dense(3)])
        made.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return made

    seams, fitted = model(), model()
    logs = _seams.keras3_train_batch(seams, X[:32], Y[:32])
    fitted.fit(X[:32], Y[:32], batch_size=32, epochs=1, shuffle=False, verbose=0)
    assert set(seen) == {2}  # (x, y): train_on_batch would hand (x, y, None)
    np.testing.assert_allclose(float(logs["loss"]), fitted.history.history["loss"][0], rtol=1e-6)
    for a, b in zip(seams.weights, fitted.weights, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_keras3_metric_containers_and_their_leaves():
    model = trained(keras)
    containers = _seams.keras3_metric_containers(model)
    assert model._compile_metrics in containers and model._compile_loss in containers
    names = [m.name for m in _seams.keras3_compile_metrics_leaves(model)]
    assert "accuracy" in names and "loss" in names


def test_tf_keras_metric_containers_loss_metric_and_test_runner():
    tf_keras = pytest.importorskip("tf_keras")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("tf_keras is TensorFlow-only")
    model = trained(tf_keras)
    assert _seams.tf_keras_metric_containers(model) == [model.compiled_metrics, model.compiled_loss]
    assert _seams.tf_keras_loss_metric(model).name == "loss"

    found: list[Any] = []

    class Redirect(tf_keras.callbacks.Callback):
        def on_test_begin(self, logs: Any = None) -> None:
            _seams.tf_keras_test_runner(self.model.test_function, lambda iterator: found.append(True) or {})

    model.evaluate(X, Y, batch_size=32, verbose=0, callbacks=[Redirect()])
    assert found == [True, True]  # both batches ran the replacement


def test_compiled_loss_keys_are_the_loss_and_each_outputs_loss(K):
    assert _seams.compiled_loss_keys(trained(K)) == {"loss"}
    inputs = K.Input((8,))
    model = K.Model(inputs, [K.layers.Dense(3, name="a")(inputs), K.layers.Dense(3, name="b")(inputs)])
    model.compile("sgd", loss=["mse", "mse"], metrics=[["mae"], []])
    model.fit(X, (np.zeros((64, 3)), np.zeros((64, 3))), batch_size=32, verbose=0)
    assert _seams.compiled_loss_keys(model) == {"loss", "a_loss", "b_loss"}
    assert _seams.compiled_loss_keys(object()) is None


def test_tf_keras_test_runner_outside_evaluate_is_a_clear_error():
    with pytest.raises(RuntimeError, match="values='running_mean'"):
        _seams.tf_keras_test_runner(object(), None)


def test_optimizer_micro_steps_counts_every_batch_under_gradient_accumulation():
    model = make_model(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.1, gradient_accumulation_steps=2), loss=model.loss)
    model.fit(X, Y, batch_size=16, epochs=1, verbose=0)  # 4 batches: 2 applied updates
    assert int(np.asarray(_seams.optimizer_micro_steps(model.optimizer))) == 4
    assert int(np.asarray(model.optimizer.iterations)) == 2


@needs_backend("jax", reason="JAX's tracers")
def test_jax_nested_tracer_tells_the_gradient_trace_from_the_step_trace():
    import jax

    seen: dict[str, bool] = {}

    def inner(w: Any) -> Any:
        seen["grad"] = _seams.jax_nested_tracer([w])
        return (w * w).sum()

    @jax.jit
    def step(w: Any) -> Any:
        seen["jit"] = _seams.jax_nested_tracer([w])
        return jax.grad(inner)(w)

    step(np.ones(3, "float32"))
    assert seen == {"jit": False, "grad": True}


@pytest.mark.parametrize("stop_after", [1, None], ids=["stopped_mid_epoch", "to_the_end"])
def test_keras3_close_stopped_epoch_closes_the_epoch_generator_a_stop_left_suspended(stop_after):
    seen = []

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            self.model.stop_training = batch == stop_after

        def on_train_end(self, logs=None):
            loop = _runs.loop_frame()
            generator = loop.f_locals["epoch_iterator"]._epoch_iterator
            before = inspect.getgeneratorstate(generator)
            _seams.keras3_close_stopped_epoch(loop)
            seen.append((before, inspect.getgeneratorstate(generator)))

    make_model(keras).fit(X, Y, batch_size=16, epochs=1, verbose=0, callbacks=[Stop()])
    before = inspect.GEN_SUSPENDED if stop_after is not None else inspect.GEN_CLOSED
    assert seen == [(before, inspect.GEN_CLOSED)]
    _seams.keras3_close_stopped_epoch(None)  # no loop, and a frame without Keras's local: left alone
    _seams.keras3_close_stopped_epoch(sys._getframe())


def test_is_default_strategy():
    assert _seams.is_default_strategy(tf.distribute.get_strategy())
    assert not _seams.is_default_strategy(tf.distribute.OneDeviceStrategy("/cpu:0"))


def test_nan_hook_loss_gives_a_nan_tensor_hook_its_tensor():
    graph = tf.Graph()
    with graph.as_default():
        loss = tf.constant(float("nan"), name="loss_value")
        hook = T.NanTensorHook("loss")
        _seams.nan_hook_loss(hook, loss)
        hook.begin()
        assert hook.before_run(None).fetches is loss  # what the hook fetches each step
    with pytest.raises(AttributeError, match="_loss_tensor"):
        _seams.nan_hook_loss(T.StopAtStepHook(num_steps=1), loss)


def test_a_hook_callback_run_reaches_its_seams(K):
    """The seams in use: a run with batch values in training and evaluation, on this flavour."""
    model = make_model(K)
    final = T.FinalOpsHook("loss")
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[HookCallback(T.LoggingTensorHook(["loss"], 1))])
    eval_hook = HookCallback(final, mode="eval", values="batch")
    result = model.evaluate(X[:32], Y[:32], batch_size=32, verbose=0, return_dict=True, callbacks=[eval_hook])
    assert final.final_ops_values == pytest.approx(result["loss"], rel=1e-6)  # one batch: its own loss is the mean


class _OwnLoss(keras.Model):
    """A Keras 3 model with no compiled loss: its loss is its own `compute_loss` (as a migrated
    Estimator job's often is), and a metric of its own whose name ends in `_loss`."""

    def __init__(self) -> None:
        super().__init__(name="own_loss")
        self.dense = keras.layers.Dense(3)

    def call(self, x: Any) -> Any:
        return self.dense(x)

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None, sample_weight: Any = None, **kw: Any):
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, y_pred, from_logits=True))


@needs_backend("tensorflow", reason="HookCallback's graph hooks: TensorFlow backend")
def test_compiled_loss_keys_of_a_keras3_model_compiled_without_a_loss_and_eval_hooks_get_its_loss():
    """Keras 3's `_compile_loss` is None without a compiled loss, and `model.compiled_loss` a
    deprecated method: the keys are `{"loss"}`, and an eval hook gets each batch's own loss
    (it raised AttributeError: 'function' object has no attribute 'metrics')."""
    model = _OwnLoss()

    def per_example(y: Any, y_pred: Any) -> Any:
        return keras.losses.sparse_categorical_crossentropy(y, y_pred, from_logits=True)

    model.compile("sgd", metrics=[keras.metrics.MeanMetricWrapper(per_example, name="eval_loss")])
    assert _seams.compiled_loss_keys(model) == {"loss"}
    seen: list[dict[str, float]] = []

    class Record(T.SessionRunHook):
        def before_run(self, run_context: Any) -> Any:
            return T.SessionRunArgs({"loss": "loss:0", "eval_loss": "eval_loss:0"})

        def after_run(self, run_context: Any, run_values: Any) -> None:
            seen.append(run_values.results)

    model.evaluate(X, Y, batch_size=32, verbose=0, callbacks=[HookCallback(lambda: [Record()], mode="eval")])
    assert _seams.compiled_loss_keys(model) == {"loss"}
    batches = [(X[i : i + 32], Y[i : i + 32]) for i in (0, 32)]
    own = [float(model.compute_loss(y=y, y_pred=model(x))) for x, y in batches]
    assert [s["loss"] for s in seen] == pytest.approx(own, rel=1e-5)
    # eval_loss is a metric: the evaluation's aggregate (the mean of both batches), not the batch's own
    assert seen[1]["eval_loss"] == pytest.approx(np.mean(own), rel=1e-5)
    assert seen[1]["eval_loss"] != pytest.approx(own[1], rel=1e-3)


def test_eager_outside_graph_runs_tf2_ops_while_a_finalized_graph_is_the_default():
    with tf.Graph().as_default() as graph:
        graph.finalize()
        with pytest.raises(RuntimeError, match="Graph is finalized"):
            tf.constant(1.0)
        with _seams.eager_outside_graph():
            assert tf.executing_eagerly()
            assert float(keras.ops.add(tf.constant(1.0), 1.0)) == 2.0
        assert not tf.executing_eagerly()
        assert graph.get_operations() == []


def test_graph_mode_on_is_process_wide_not_the_default_graph():
    # Eager here (graph mode itself is tested in a subprocess: tests/test_graph_mode.py).
    assert _seams.graph_mode_on() is False
    with tf.Graph().as_default():  # the adapter graph's situation: still not graph mode
        assert not tf.compat.v1.executing_eagerly_outside_functions()
        assert _seams.graph_mode_on() is False


def test_tf_keras_graph_step_is_the_class_of_graph_mode_steps_and_keras_get_session():
    pytest.importorskip("tf_keras")
    step_class, get_session = _seams.tf_keras_graph_step()
    assert step_class.__name__ == "GraphExecutionFunction" and callable(step_class.__call__)
    assert {"inputs", "outputs", "updates_op"} <= set(step_class.__init__.__code__.co_names)
    assert callable(get_session)
