"""Each seam of `hooks2callbacks._seams` finds its internal on the installed versions.

CI runs this file on the newest versions and on the floor of `setup.cfg`
(`.ci/floor.txt`): a Keras that moves an internal fails here by name, before
any behaviour test has to explain it.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import make_data, make_model, needs_backend

from hooks2callbacks import HookCallback, _seams

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
