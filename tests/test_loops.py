"""Hooks in a training loop of the user's own (keras.io's "Writing a training loop from scratch").

The loop drives `keras.callbacks.CallbackList([HookCallback(...)], model=model)` by
hand, as the `keras.callbacks.Callback` docstring shows; the model is not compiled
and the optimizer is handed to the callback. The same hooks run under a real
`MonitoredSession` on the TF1 twin of the model (`support.tf1_mlp`) for comparison.

The JAX and PyTorch loops run in `test_backends.py`'s process per backend, with the contract suites.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import (
    BATCH,
    N_CLASSES,
    N_FEATURES,
    N_HIDDEN,
    TF1_NAMES,
    checkpoint_steps,
    fit_in_order,
    make_data,
    make_model,
    needs_backend,
    run_tf1_mlp,
    tf1_mlp,
    weights_of,
)
from tensorflow.python.training import training_util

from hooks2callbacks import HookCallback, restore_checkpoint, restore_tf1_checkpoint

X, Y = make_data()
on_tensorflow = needs_backend("tensorflow", reason="the loop of keras.io's TensorFlow guide")


def mlp(K: Any = keras) -> Any:
    """`support.make_model`'s MLP (same weights), not compiled, as the guides build theirs."""
    K.utils.set_random_seed(0)
    return K.Sequential(
        [
            K.Input((N_FEATURES,)),
            K.layers.Dense(N_HIDDEN, activation="relu", name=TF1_NAMES[0]),
            K.layers.Dense(N_CLASSES, name=TF1_NAMES[1]),
        ]
    )


def batch(i: int) -> tuple[np.ndarray, np.ndarray]:
    """The i-th batch of `BATCH`, in order, the 10 batches repeating as in `support.run_tf1_mlp`."""
    part = slice(i % 10 * BATCH, (i % 10 + 1) * BATCH)
    return X[part], Y[part]


def tf_loop(model: Any, optimizer: Any, callbacks: list[Any], steps: int, K: Any = keras, **logs: Any) -> list[float]:
    """keras.io's TensorFlow loop (tf.function, GradientTape), with the lines hooks need.

    Args:
        logs: Extra log keys, each a function of (logits, y) passed at every batch end.

    Returns:
        The losses the loop passed, one per step run.
    """
    loss_fn = K.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights, strict=True))
        return loss, logits

    callback_list = K.callbacks.CallbackList(callbacks, model=model)
    passed: list[float] = []
    callback_list.on_train_begin()
    for step in range(steps):
        callback_list.on_train_batch_begin(step)
        x, y = batch(step)
        loss, logits = train_step(x, y)
        passed.append(float(loss))
        callback_list.on_train_batch_end(step, {"loss": loss, **{k: f(logits, y) for k, f in logs.items()}})
        if getattr(model, "stop_training", False):  # set by on_train_begin when callbacks are listed
            break
    callback_list.on_train_end()
    return passed


class Fetch(tf.compat.v1.train.SessionRunHook):
    """A custom hook that fetches tensors by name, as TF1 code did, and keeps what it got."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.seen: list[dict[str, Any]] = []

    def begin(self) -> None:
        # As the stock hooks read it: the value from before the step's increment.
        self.step = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access

    def before_run(self, run_context: Any) -> Any:
        return tf.compat.v1.train.SessionRunArgs({"step": self.step, **{n: n for n in self.names}})

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.seen.append(run_values.results)


def hooks(directory: Any, logged: list[Any], fetch: Fetch) -> Any:
    """The hooks each side runs: stop, logging (its formatter records), a custom fetch, checkpoints, NaN.

    A factory, called in the graph where the loss tensor is (`NanTensorHook` takes the tensor).
    """

    def factory() -> list[Any]:
        loss = tf.compat.v1.get_default_graph().get_tensor_by_name("loss:0")
        return [
            tf.compat.v1.train.StopAtStepHook(last_step=7),
            tf.compat.v1.train.LoggingTensorHook(
                ["loss"], every_n_iter=1, formatter=lambda values: logged.append(values["loss"]) or ""
            ),
            fetch,
            tf.compat.v1.train.CheckpointSaverHook(str(directory), save_steps=3),
            tf.compat.v1.train.NanTensorHook(loss),
        ]

    return factory


@on_tensorflow
@pytest.mark.parametrize("flavour", ["keras", "tf_keras"])
def test_tf_loop_runs_hooks_as_monitored_session_does(tmp_path, flavour):
    if flavour == "tf_keras" and importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf_keras is not installed")
    K = keras if flavour == "keras" else __import__("tf_keras")
    model = mlp(K)
    start = weights_of(model)
    optimizer = K.optimizers.SGD(0.05)
    keras_logged: list[Any] = []
    keras_fetch = Fetch("loss:0")
    callback = HookCallback(hooks(tmp_path / "keras", keras_logged, keras_fetch), optimizer=optimizer)
    passed = tf_loop(model, optimizer, [callback], steps=20, K=K)

    tf1_logged: list[Any] = []
    tf1_fetch = Fetch("loss:0")
    final = run_tf1_mlp(hooks(tmp_path / "tf1", tf1_logged, tf1_fetch), start, steps=20)

    # The same stop step, and the hooks saw exactly the losses the loop passed.
    assert len(passed) == len(tf1_logged) == 7
    assert [float(v) for v in keras_logged] == passed
    assert [float(r["loss:0"]) for r in keras_fetch.seen] == passed
    assert [int(r["step"]) for r in keras_fetch.seen] == [int(r["step"]) for r in tf1_fetch.seen] == list(range(7))
    assert type(keras_fetch.seen[0]["loss:0"]) is type(tf1_fetch.seen[0]["loss:0"]) is np.float32
    np.testing.assert_allclose(passed, [float(v) for v in tf1_logged], rtol=1e-5)
    # Checkpoints at the same steps, each holding the weights after the steps it is named for.
    assert checkpoint_steps(tmp_path / "keras") == checkpoint_steps(tmp_path / "tf1") == [0, 3, 6, 7]
    assert int(optimizer.iterations.numpy()) == 7
    for name in ("dense/kernel", "dense_1/bias"):
        np.testing.assert_allclose(
            tf.train.load_variable(str(tmp_path / "keras"), name), final[name], rtol=1e-5, atol=1e-6
        )
    path = str(tmp_path / "keras" / "model.ckpt-3")
    assert (
        tf.train.load_variable(path, "global_step")
        == tf.train.load_variable(str(tmp_path / "tf1" / "model.ckpt-3"), "global_step")
        == 3
    )
    replay = mlp(K)
    replay_optimizer = K.optimizers.SGD(0.05)
    tf_loop(replay, replay_optimizer, [], steps=3, K=K)
    names = ("dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias")
    for name, weight in zip(names, weights_of(replay), strict=True):
        np.testing.assert_array_equal(tf.train.load_variable(path, name), weight)
    # And restore_checkpoint reads it back into a model and the loop's optimizer.
    restored, restored_optimizer = mlp(K), K.optimizers.SGD(0.05)
    restore_checkpoint(restored, str(tmp_path / "keras"), optimizer=restored_optimizer)
    for a, b in zip(weights_of(restored), weights_of(model), strict=True):
        np.testing.assert_array_equal(a, b)
    assert int(restored_optimizer.iterations.numpy()) == 7


@on_tensorflow
def test_loop_logs_are_the_steps_values_with_the_batch_tensors(tmp_path):
    model, optimizer = mlp(), keras.optimizers.SGD(0.05)
    fetch = Fetch("loss", "predictions", "labels")
    logits: list[np.ndarray] = []
    callback = HookCallback([fetch], optimizer=optimizer)
    passed = tf_loop(
        model,
        optimizer,
        [callback],
        steps=3,
        predictions=lambda p, y: logits.append(p.numpy()) or p,
        labels=lambda p, y: y,
    )
    assert len(fetch.seen) == 3
    for step, results in enumerate(fetch.seen):
        assert results["loss"] == np.float32(passed[step])
        np.testing.assert_array_equal(results["labels"], batch(step)[1])
        np.testing.assert_array_equal(results["predictions"], logits[step])
        assert results["predictions"].shape == (BATCH, N_CLASSES)


@on_tensorflow
def test_a_loop_after_a_hooked_fit_gives_hooks_the_loops_own_values():
    model = make_model(layer_names=TF1_NAMES)
    fit_in_order(model, [HookCallback([Fetch("loss")])], steps=3)
    fetch = Fetch("loss")
    nan_hook = tf.compat.v1.train.NanTensorHook("loss", fail_on_nan_loss=False)
    callback_list = keras.callbacks.CallbackList([HookCallback([fetch, nan_hook])], model=model)
    passed = [6.8, 14.9, float("nan"), 2.5]
    callback_list.on_train_begin()
    for step, loss in enumerate(passed):
        callback_list.on_train_batch_begin(step)
        callback_list.on_train_batch_end(step, {"loss": loss})
        if model.stop_training:
            break
    callback_list.on_train_end()
    seen = [float(r["loss"]) for r in fetch.seen]
    assert seen[:2] == [np.float32(6.8), np.float32(14.9)]
    assert np.isnan(seen[2]) and len(seen) == 3  # NanTensorHook saw the NaN and stopped the loop


@on_tensorflow
def test_optimizer_argument_gives_the_global_step_and_what_checkpoints_hold(tmp_path):
    model = make_model(layer_names=TF1_NAMES)  # compiled with one optimizer, trained with another
    other = keras.optimizers.SGD(0.05)
    tf_loop(model, other, [], steps=2)
    saver = tf.compat.v1.train.CheckpointSaverHook(str(tmp_path), save_steps=2)
    fetch = Fetch()
    tf_loop(model, other, [HookCallback([fetch, saver], optimizer=other)], steps=4)
    assert [int(r["step"]) for r in fetch.seen] == [2, 3, 4, 5]
    assert checkpoint_steps(tmp_path) == [2, 4, 6]
    assert tf.train.load_variable(str(tmp_path), "global_step") == 6
    assert int(model.optimizer.iterations.numpy()) == 0  # the compiled one never stepped, nor was saved as the step


@on_tensorflow
def test_run_begin_sets_stop_training_false_as_fit_does():
    model, optimizer = mlp(), keras.optimizers.SGD(0.05)
    assert not hasattr(model, "stop_training")
    keras.callbacks.CallbackList([HookCallback([], optimizer=optimizer)], model=model).on_train_begin()
    assert model.stop_training is False


def test_a_model_with_no_optimizer_is_refused_naming_optimizer_and_the_page():
    callback_list = keras.callbacks.CallbackList([HookCallback([Fetch()])], model=mlp())
    with pytest.raises(
        ValueError, match=r"a training loop of a model without an optimizer.*optimizer=optimizer.*custom-loops.md"
    ):
        callback_list.on_train_begin()


def test_optimizer_argument_refuses_what_counts_no_steps():
    with pytest.raises(
        TypeError, match=r"HookCallback\(optimizer=...\) takes the Keras optimizer .*got 'sgd' of type str"
    ):
        HookCallback([], optimizer="sgd")
    with pytest.raises(TypeError, match="not an instance|got <class"):
        HookCallback([], optimizer=keras.optimizers.SGD)
    if importlib.util.find_spec("torch") is None:
        return
    import torch

    with pytest.raises(TypeError, match=r"torch.optim optimizer SGD, which counts no steps.*keras.optimizers.Adam"):
        HookCallback([], optimizer=torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1))


@on_tensorflow
def test_batches_after_a_stop_and_batches_before_begin_are_warned_of():
    model, optimizer = mlp(), keras.optimizers.SGD(0.05)
    stop = tf.compat.v1.train.StopAtStepHook(last_step=1)
    callback_list = keras.callbacks.CallbackList([HookCallback([stop], optimizer=optimizer)], model=model)
    callback_list.on_train_begin()
    callback_list.on_train_batch_begin(0)
    callback_list.on_train_batch_end(0, {"loss": 1.0})
    assert model.stop_training is True
    # A loop that does not check model.stop_training goes on.
    with pytest.warns(
        UserWarning, match=r"batches keep coming after a hook requested a stop.*if model.stop_training: break"
    ):
        callback_list.on_train_batch_begin(1)
    callback_list.on_train_batch_end(1, {"loss": 1.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # once a run
        callback_list.on_train_batch_begin(2)
    callback_list.on_train_end()
    fresh = keras.callbacks.CallbackList([HookCallback([stop], optimizer=optimizer)], model=model)
    with pytest.warns(UserWarning, match=r"got on_train_batch_begin with no run begun.*callbacks.on_train_begin\(\)"):
        fresh.on_train_batch_begin(0)


@on_tensorflow
def test_a_per_replica_value_is_refused_naming_the_hook_and_key():
    from tensorflow.python.distribute.values import PerReplica  # what strategy.run returns

    model, optimizer = mlp(), keras.optimizers.SGD(0.05)
    callback_list = keras.callbacks.CallbackList([HookCallback([Fetch("loss")], optimizer=optimizer)], model=model)
    callback_list.on_train_begin()
    callback_list.on_train_batch_begin(0)
    with pytest.raises(ValueError, match=r"'loss' holds a tf.distribute per-replica value.*strategy.reduce") as raised:
        callback_list.on_train_batch_end(0, {"loss": PerReplica((tf.constant(1.0), tf.constant(2.0)))})
    assert "Fetch.before_run" in "".join(getattr(raised.value, "__notes__", []))


# -- JAX and PyTorch --------------------------------------------------------------


@needs_backend("jax", "torch", reason="a Keras 3 model on JAX or PyTorch is no TF trackable")
def test_checkpoint_saver_under_fit_writes_tf1_names_read_back_exactly(tmp_path):
    model = make_model(layer_names=TF1_NAMES)
    saver = tf.compat.v1.train.CheckpointSaverHook(str(tmp_path), save_steps=2)
    fit_in_order(model, [HookCallback([saver])], steps=5)
    assert checkpoint_steps(tmp_path) == [0, 2, 4, 5]
    assert tf.train.load_variable(str(tmp_path), "global_step") == 5
    names = dict(tf.train.list_variables(str(tmp_path)))
    assert {"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias", "global_step"} <= set(names)
    restored = make_model(layer_names=TF1_NAMES)
    restore_checkpoint(restored, str(tmp_path))
    for a, b in zip(weights_of(restored), weights_of(model), strict=True):
        np.testing.assert_array_equal(a, b)
    assert int(keras.ops.convert_to_numpy(restored.optimizer.iterations)) == 5


@needs_backend("jax", "torch", reason="a Keras 3 model on JAX or PyTorch is no TF trackable")
def test_restore_tf1_checkpoint_reads_a_tf1_saver_checkpoint_into_the_model(tmp_path):
    """An Estimator's checkpoint (a TF1 `Saver`'s, by name) into a JAX or PyTorch model: weights and step."""
    model = make_model(layer_names=TF1_NAMES)
    weights = [w + 1.0 for w in weights_of(model)]
    with tf.Graph().as_default():
        tf1_mlp(weights)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(tf.compat.v1.assign(tf.compat.v1.train.get_global_step(), 7))
            tf.compat.v1.train.Saver().save(session, str(tmp_path / "model.ckpt"), global_step=7)
    restore_tf1_checkpoint(model, str(tmp_path))
    for a, b in zip(weights_of(model), weights, strict=True):
        np.testing.assert_array_equal(a, b)
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 7


@needs_backend("jax", reason="keras.io's JAX loop: a stateless step, its state held outside the model")
def test_jax_loop_runs_hooks_as_monitored_session_does(tmp_path):
    import jax

    model, optimizer = mlp(), keras.optimizers.SGD(0.05)
    start = weights_of(model)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def compute_loss(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss_fn(y, logits), non_trainable

    grad_fn = jax.value_and_grad(compute_loss, has_aux=True)

    @jax.jit
    def train_step(state, x, y):
        trainable, non_trainable, optimizer_vars = state
        (loss, non_trainable), grads = grad_fn(trainable, non_trainable, x, y)
        trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads, trainable)
        return loss, (trainable, non_trainable, optimizer_vars)

    logged: list[Any] = []
    fetch = Fetch("loss", "dense_1/bias:0")
    callback = HookCallback(hooks(tmp_path / "jax", logged, fetch), optimizer=optimizer)
    callback_list = keras.callbacks.CallbackList([callback], model=model)
    passed, biases = [], []
    callback_list.on_train_begin()
    state = callback.state()  # the variables' values: hooks' begin() may have written them
    for step in range(20):
        callback_list.on_train_batch_begin(step)
        loss, state = train_step(state, *batch(step))
        passed.append(float(loss))
        biases.append(np.asarray(state[0][3]))
        # The state reaches the Keras variables only where hooks read them (here: every step).
        callback_list.on_train_batch_end(step, {"loss": loss, "state": state})
        state = callback.state()
        if model.stop_training:
            break
    callback_list.on_train_end()

    tf1_logged: list[Any] = []
    final = run_tf1_mlp(hooks(tmp_path / "tf1", tf1_logged, Fetch("loss:0")), start, steps=20)
    assert len(passed) == len(tf1_logged) == 7
    assert [float(v) for v in logged] == [float(r["loss"]) for r in fetch.seen] == passed
    for seen, bias in zip(fetch.seen, biases, strict=True):  # the weights after the step, not the start's
        np.testing.assert_array_equal(seen["dense_1/bias:0"], bias)
    np.testing.assert_allclose(passed, [float(v) for v in tf1_logged], rtol=1e-5)
    assert checkpoint_steps(tmp_path / "jax") == checkpoint_steps(tmp_path / "tf1") == [0, 3, 6, 7]
    for name in ("dense/kernel", "dense_1/bias"):
        np.testing.assert_allclose(
            tf.train.load_variable(str(tmp_path / "jax"), name), final[name], rtol=1e-5, atol=1e-6
        )


class AssignBias(tf.compat.v1.train.SessionRunHook):
    """Sets dense_1/bias to [1, 2, 3] with an assign op, at session creation or in a step's fetches."""

    def __init__(self, at_step: int | None = None) -> None:
        self.at_step = at_step
        self.steps = 0

    def begin(self) -> None:
        bias = tf.compat.v1.get_default_graph().get_tensor_by_name("dense_1/bias:0")
        self.assign = tf.compat.v1.assign(bias, [1.0, 2.0, 3.0])

    def after_create_session(self, session: Any, coord: Any) -> None:
        if self.at_step is None:
            session.run(self.assign)

    def before_run(self, run_context: Any) -> Any:
        self.steps += 1
        return tf.compat.v1.train.SessionRunArgs(self.assign) if self.steps - 1 == self.at_step else None


def jax_sgd_loop(model: Any, optimizer: Any, callback: Any, steps: int, take_state: bool = True) -> Any:
    """keras.io's JAX loop handing its state to the hooks (`"state"`), taking it back (`callback.state()`)."""
    import jax

    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def compute_loss(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss_fn(y, logits), non_trainable

    grad_fn = jax.value_and_grad(compute_loss, has_aux=True)

    @jax.jit
    def train_step(state, x, y):
        trainable, non_trainable, optimizer_vars = state
        (loss, non_trainable), grads = grad_fn(trainable, non_trainable, x, y)
        trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads, trainable)
        return loss, (trainable, non_trainable, optimizer_vars)

    callback_list = keras.callbacks.CallbackList([callback], model=model)
    callback_list.on_train_begin()
    state = callback.state()
    for step in range(steps):
        callback_list.on_train_batch_begin(step)
        loss, state = train_step(state, *batch(step))
        callback_list.on_train_batch_end(step, {"loss": loss, "state": state})
        if take_state:
            state = callback.state()
    callback_list.on_train_end()
    return state


@needs_backend("jax", reason="a stateless loop's state, held outside the model")
def test_jax_loop_state_takes_the_hooks_writes_as_monitored_session_does():
    # A write at session creation (TF1's order is defined there; in a step's fetches it raced the train op).
    at_step = None
    model, optimizer = mlp(), keras.optimizers.SGD(0.05)
    start = weights_of(model)
    state = jax_sgd_loop(model, optimizer, HookCallback([AssignBias(at_step)], optimizer=optimizer), steps=3)
    final = run_tf1_mlp([AssignBias(at_step)], start, steps=3)
    np.testing.assert_allclose(np.asarray(state[0][3]), final["dense_1/bias"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(state[0][0]), final["dense/kernel"], rtol=1e-5, atol=1e-6)
    assert int(np.asarray(state[2][0])) == 3  # the optimizer's iterations, in the loop's state


@needs_backend("jax", reason="a stateless loop's state, held outside the model")
def test_jax_loop_that_keeps_its_own_state_after_a_write_is_refused_naming_the_way_out():
    model, optimizer = mlp(), keras.optimizers.SGD(0.05)
    callback = HookCallback([AssignBias(at_step=0)], optimizer=optimizer)
    with pytest.raises(ValueError, match=r"does not hold that write.*state = callback.state\(\)"):
        jax_sgd_loop(model, optimizer, callback, steps=3, take_state=False)


@needs_backend("torch", reason="keras.io's PyTorch loop with a Keras optimizer")
def test_torch_loop_runs_hooks_as_monitored_session_does(tmp_path):
    import torch

    model, optimizer = mlp(), keras.optimizers.SGD(0.05)
    start = weights_of(model)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    logged: list[Any] = []
    fetch = Fetch("loss")
    callback_list = keras.callbacks.CallbackList(
        [HookCallback(hooks(tmp_path / "torch", logged, fetch), optimizer=optimizer)], model=model
    )
    passed = []
    callback_list.on_train_begin()
    for step in range(20):
        callback_list.on_train_batch_begin(step)
        x, y = batch(step)
        logits = model(torch.from_numpy(x), training=True)
        loss = loss_fn(torch.from_numpy(y), logits)
        model.zero_grad()
        loss.backward()
        grads = [v.value.grad for v in model.trainable_weights]
        with torch.no_grad():
            optimizer.apply(grads, model.trainable_weights)
        passed.append(float(loss))
        callback_list.on_train_batch_end(step, {"loss": loss.detach()})
        if model.stop_training:
            break
    callback_list.on_train_end()

    tf1_logged: list[Any] = []
    final = run_tf1_mlp(hooks(tmp_path / "tf1", tf1_logged, Fetch("loss:0")), start, steps=20)
    assert len(passed) == len(tf1_logged) == 7
    assert [float(v) for v in logged] == [float(r["loss"]) for r in fetch.seen] == passed
    np.testing.assert_allclose(passed, [float(v) for v in tf1_logged], rtol=1e-5)
    assert checkpoint_steps(tmp_path / "torch") == checkpoint_steps(tmp_path / "tf1") == [0, 3, 6, 7]
    for name in ("dense/kernel", "dense_1/bias"):
        np.testing.assert_allclose(
            tf.train.load_variable(str(tmp_path / "torch"), name), final[name], rtol=1e-5, atol=1e-6
        )
