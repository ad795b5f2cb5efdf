"""Checkpoints (`hooks2callbacks._checkpoint`): what CheckpointSaverHook writes, read back by
Keras, by TF1's own Saver and readers, and TF1 (Estimator) checkpoints read into Keras.

Where the truth is TF1's, the same model is built as a TF1 graph (`support.tf1_mlp`) and run
under a real MonitoredSession.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import warnings

import installed
import keras
import numpy as np
import pytest
import tensorflow as tf
from support import (
    BATCH,
    TF1_NAMES,
    BeforeStep,
    RecordingListener,
    checkpoint_steps,
    fit_in_order,
    fit_mlp,
    iterations,
    make_data,
    make_model,
    run_tf1_mlp,
    tf1_mlp,
    weights_of,
)

from hooks2callbacks import HookCallback, restore_checkpoint, restore_tf1_checkpoint

T = tf.compat.v1.train
X, Y = make_data()  # 320 samples: 10 steps an epoch at batch 32


# -- what the checkpoints hold ------------------------------------------------------


def fit_with_checkpoints(directory, epochs=1, K=keras, **hook_kwargs):
    model = make_model(K)
    model.fit(
        X,
        Y,
        batch_size=32,
        epochs=epochs,
        verbose=0,
        shuffle=False,
        callbacks=[HookCallback([T.CheckpointSaverHook(str(directory), **hook_kwargs)])],
    )
    return model


def test_restoring_the_latest_checkpoint_gives_identical_weights_and_step(K, tmp_path):
    trained = fit_with_checkpoints(tmp_path, save_steps=3, K=K)
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-10")

    fresh = make_model(K)
    assert restore_checkpoint(fresh, str(tmp_path)) == str(tmp_path / "model.ckpt-10")
    for restored, saved in zip(fresh.get_weights(), trained.get_weights(), strict=True):
        np.testing.assert_array_equal(restored, saved)
    assert iterations(fresh) == 10
    np.testing.assert_array_equal(fresh.predict(X, verbose=0), trained.predict(X, verbose=0))


def test_the_plain_tensorflow_one_liner_restores_the_weights(tmp_path):
    trained = fit_with_checkpoints(tmp_path, save_steps=5)
    fresh = make_model()
    tf.train.Checkpoint(model=fresh).read(tf.train.latest_checkpoint(str(tmp_path))).expect_partial()
    for restored, saved in zip(fresh.get_weights(), trained.get_weights(), strict=True):
        np.testing.assert_array_equal(restored, saved)


def test_an_earlier_checkpoint_holds_the_weights_of_its_step(tmp_path):
    fit_with_checkpoints(tmp_path, save_steps=4)
    # The weights after 4 steps, by training a second model 4 steps.
    reference = make_model()
    reference.fit(X[:128], Y[:128], batch_size=32, epochs=1, verbose=0, shuffle=False)
    fresh = make_model()
    restore_checkpoint(fresh, str(tmp_path / "model.ckpt-4"))
    assert iterations(fresh) == 4
    for restored, expected in zip(fresh.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(restored, expected, rtol=1e-6)


def test_training_resumed_from_a_checkpoint_continues_the_global_step(tmp_path):
    fit_with_checkpoints(tmp_path, save_steps=100)
    resumed = make_model()
    restore_checkpoint(resumed, str(tmp_path))
    listener = RecordingListener()
    resumed.fit(
        X,
        Y,
        batch_size=32,
        epochs=1,
        verbose=0,
        callbacks=[HookCallback([T.CheckpointSaverHook(str(tmp_path), save_steps=100, listeners=[listener])])],
    )
    assert listener.calls[1:] == [
        ("before_save", 10),
        ("after_save", 10),
        ("before_save", 20),
        ("after_save", 20),
        ("end", 20),
    ]
    assert checkpoint_steps(str(tmp_path))[-2:] == [10, 20]


def test_at_most_five_checkpoints_are_kept_as_by_a_scaffold_saver(tmp_path):
    fit_with_checkpoints(tmp_path, epochs=2, save_steps=2)
    assert checkpoint_steps(str(tmp_path)) == [12, 14, 16, 18, 20]
    indexes = sorted(name for name in os.listdir(tmp_path) if name.endswith(".index"))
    assert indexes == [f"model.ckpt-{step}.index" for step in (12, 14, 16, 18, 20)]


def test_restore_checkpoint_errors_say_what_to_pass(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"no checkpoint there\. Pass the directory a CheckpointSaverHook wrote to"
    ):
        restore_checkpoint(make_model(), str(tmp_path))
    fit_with_checkpoints(tmp_path, save_steps=5)
    other = keras.Sequential([keras.Input((8,)), keras.layers.Dense(5), keras.layers.Dense(3)])
    other.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=r"do not match the checkpoint's.*architecture that was saved"):
        restore_checkpoint(other, str(tmp_path))
    unbuilt = keras.Sequential([keras.layers.Dense(3)])
    with pytest.raises(ValueError, match=r"the model is not built.*keras.Input"):
        restore_checkpoint(unbuilt, str(tmp_path))


def test_restore_checkpoint_of_an_estimator_model_dir_is_a_short_error_naming_the_way_out(tmp_path):
    # What an Estimator's model_dir holds: a name-based checkpoint of a TF1 Saver.
    with tf.Graph().as_default():
        tf.compat.v1.Variable(np.ones((8, 16), "float32"), name="dense/kernel")
        tf.compat.v1.train.get_or_create_global_step()
        saver = T.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(tmp_path / "model.ckpt"), global_step=7)
    with pytest.raises(ValueError) as info:
        restore_checkpoint(make_model(), str(tmp_path))
    message = str(info.value)
    assert "this is a name-based TF1 checkpoint" in message and "['dense/kernel', 'global_step']" in message
    assert "hooks2callbacks.restore_tf1_checkpoint(model, path)" in message and "assignment_map" in message
    assert len(message) < 700  # no dump of the variables' values


# -- checkpoints that TF1 tools read by name ----------------------------------------


def adam_mlp(K):
    """`make_model`'s MLP with TF1's layer names, on Adam with TF1's epsilon convention made equal."""
    model = make_model(K, layer_names=TF1_NAMES)
    model.compile(
        optimizer=K.optimizers.Adam(0.01, epsilon=1e-7),
        loss=K.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def test_checkpoints_hold_the_tf1_names_and_a_tf1_saver_continues_from_them(K, tmp_path):
    """What CheckpointSaverHook writes holds every variable a TF1 Saver of the same graph saved,
    by its TF1 name: a TF1 Adam graph restores it whole, and its next step is Keras's next step."""
    model = adam_mlp(K)
    hooks = [T.CheckpointSaverHook(str(tmp_path), save_steps=100), T.StopAtStepHook(last_step=7)]
    fit_in_order(model, [HookCallback(hooks)], steps=8)
    prefix = tf.train.latest_checkpoint(str(tmp_path))
    assert prefix == str(tmp_path / "model.ckpt-7")
    assert tf.train.load_variable(prefix, "global_step") == 7
    named = {name for name, _ in tf.train.list_variables(prefix) if ".ATTRIBUTES" not in name}
    layers = {f"{s}/{v}" for s in TF1_NAMES for v in ("kernel", "bias")}
    slots = {f"{layer}/{slot}" for layer in layers for slot in ("Adam", "Adam_1")}
    assert (
        named
        == {"_CHECKPOINTABLE_OBJECT_GRAPH", "global_step", "learning_rate", "beta1_power", "beta2_power"}
        | layers
        | slots
    )
    # restore_checkpoint still reads the object-based keys of the same file.
    fresh = adam_mlp(K)
    restore_checkpoint(fresh, prefix)
    assert iterations(fresh) == 7
    for restored, saved in zip(weights_of(fresh), weights_of(model), strict=True):
        np.testing.assert_array_equal(restored, saved)

    # TF1: the same MLP under TF1's AdamOptimizer, every global variable restored by a Saver.
    batch = slice(7 * BATCH, 8 * BATCH)
    initial = weights_of(make_model(K))  # overwritten by the restore
    with tf.Graph().as_default():
        train_op = tf1_mlp(initial, optimizer=lambda rate: T.AdamOptimizer(rate, epsilon=1e-7))
        with tf.compat.v1.Session() as session:
            T.Saver().restore(session, prefix)  # fails on any variable the checkpoint lacks
            names = [v.op.name for v in tf.compat.v1.global_variables()]
            restored = dict(zip(names, session.run(tf.compat.v1.global_variables()), strict=True))
            session.run(train_op, {"x:0": X[batch], "y:0": Y[batch]})
            after = [session.run(f"{name}:0") for name in sorted(layers)]
    assert sorted(names) == sorted(named - {"_CHECKPOINTABLE_OBJECT_GRAPH"})
    assert restored["global_step"] == 7
    np.testing.assert_allclose(restored["beta1_power"], 0.9**8, rtol=1e-6)
    for layer, value in zip(("dense/kernel", "dense/bias"), weights_of(model)[:2], strict=True):
        np.testing.assert_array_equal(restored[layer], value)
    # Keras's next step on the same batch.
    model.fit(X[batch], Y[batch], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    keras_after = dict(
        zip(("dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"), weights_of(model), strict=True)
    )
    for name, value in zip(sorted(layers), after, strict=True):
        np.testing.assert_allclose(value, keras_after[name], rtol=1e-5, atol=1e-7)


def test_an_eval_hook_restores_a_checkpoint_with_a_tf1_saver_of_all_global_variables(K, tmp_path):
    """A TF1 eval graph held the model's variables and the global step, no optimizer state:
    a Saver of all of them (what an EMA-restoring eval hook builds) restores a checkpoint
    that CheckpointSaverHook wrote, into the Keras model."""
    trained = adam_mlp(K)
    fit_in_order(trained, [HookCallback([T.CheckpointSaverHook(str(tmp_path), save_steps=100)])], steps=6)

    class Restore(T.SessionRunHook):
        def begin(self):
            self.names = sorted(v.op.name for v in tf.compat.v1.global_variables())
            self.saver = T.Saver()

        def after_create_session(self, session, coord):
            self.saver.restore(session, tf.train.latest_checkpoint(str(tmp_path)))

    evaluated, restore = adam_mlp(K), Restore()
    results = evaluated.evaluate(X, Y, batch_size=BATCH, verbose=0, callbacks=[HookCallback(restore, mode="eval")])
    assert restore.names == ["dense/bias", "dense/kernel", "dense_1/bias", "dense_1/kernel", "global_step"]
    for got, saved in zip(weights_of(evaluated), weights_of(trained), strict=True):
        np.testing.assert_array_equal(got, saved)
    np.testing.assert_allclose(results, trained.evaluate(X, Y, batch_size=BATCH, verbose=0), rtol=1e-6)


def test_estimators_stop_at_checkpoint_step_hook_reads_the_checkpointed_step_back_and_stops_as_under_tf1(tmp_path):
    """tensorflow/estimator's own `_StopAtCheckpointStepHook` (run unchanged from the installed
    tensorflow-estimator 2.15.0, tests/installed.py) reads "global_step" from the
    newest checkpoint by name: it stops where it stops under a real MonitoredSession."""
    estimator = installed.estimator_hooks()
    stops = {}
    for side in ("tf1", "keras"):
        directory = str(tmp_path / side)
        ran: list[None] = []

        def hooks(directory=directory, ran=ran):
            return [
                BeforeStep(lambda: ran.append(None)),
                T.CheckpointSaverHook(directory, save_steps=4),
                estimator.StopAtCheckpointStepHook(directory, last_step=8, wait_after_file_check_secs=0),
            ]

        if side == "tf1":
            run_tf1_mlp(hooks, weights_of(make_model(layer_names=TF1_NAMES)), steps=20)
        else:
            fit_mlp(keras, hooks, steps=20)
        stops[side] = (len(ran), checkpoint_steps(directory))
    assert stops["keras"] == stops["tf1"]
    assert stops["keras"][0] == 8


# -- continuing an Estimator run: TF1 checkpoints read into Keras ------------------------

RATE = 0.01


def tf1_train(directory, weights, steps, optimizer, scopes=TF1_NAMES):
    """Trains `tf1_mlp` `steps` more steps under MonitoredTrainingSession(checkpoint_dir=directory),
    as Estimator.train did: it restores the newest checkpoint there first, and saves at its end.

    Returns:
        Each step's loss, as the step's own `loss` tensor held it.
    """
    losses = []
    with tf.Graph().as_default():
        train_op = tf1_mlp(weights, RATE, scopes, optimizer=optimizer)
        loss, step = tf.compat.v1.get_default_graph().get_tensor_by_name("loss:0"), T.get_global_step()
        with T.MonitoredTrainingSession(
            checkpoint_dir=str(directory), save_summaries_steps=None, log_step_count_steps=None
        ) as session:
            for _ in range(steps):
                i = session.run(step) % 10  # the batches in order, as the Keras side reads them
                batch = slice(i * BATCH, (i + 1) * BATCH)
                losses.append(session.run([loss, train_op], {"x:0": X[batch], "y:0": Y[batch]})[0])
    return losses


class Losses(T.SessionRunHook):
    def __init__(self):
        self.values = []

    def before_run(self, run_context):
        return T.SessionRunArgs("loss")

    def after_run(self, run_context, run_values):
        self.values.append(run_values.results)


def copy_of_step_10(tmp_path):
    """The step-10 checkpoint of `tmp_path/run`, copied for Keras to read: TF1 continues in the original."""
    keras_dir = tmp_path / "keras"
    keras_dir.mkdir()
    for name in os.listdir(tmp_path / "run"):
        if name.startswith(("model.ckpt-10", "checkpoint")):
            (keras_dir / name).write_bytes((tmp_path / "run" / name).read_bytes())
    return keras_dir


def continue_in_keras(model, directory, steps, **restore_kwargs):
    report = restore_tf1_checkpoint(model, str(directory), **restore_kwargs)
    losses = Losses()
    x, y = np.concatenate([X, X]), np.concatenate([Y, Y])
    n = steps * BATCH
    model.fit(x[:n], y[:n], batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[HookCallback(losses)])
    return report, losses.values


OPTIMIZERS = {
    # TF1's optimizer, and Keras's with the same hyperparameters (TF1's defaults for epsilon).
    "adam": (lambda rate: T.AdamOptimizer(rate), lambda K: K.optimizers.Adam(RATE, epsilon=1e-8)),
    "momentum": (lambda rate: T.MomentumOptimizer(rate, 0.9), lambda K: K.optimizers.SGD(RATE, momentum=0.9)),
    "adagrad": (
        lambda rate: T.AdagradOptimizer(rate, initial_accumulator_value=0.1),
        lambda K: K.optimizers.Adagrad(RATE, initial_accumulator_value=0.1, epsilon=1e-12),
    ),
    "rmsprop": (
        lambda rate: T.RMSPropOptimizer(rate, decay=0.9, momentum=0.5, epsilon=1e-10),
        lambda K: K.optimizers.RMSprop(RATE, rho=0.9, momentum=0.5, epsilon=1e-10),
    ),
}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_an_estimator_run_continues_in_keras_as_under_tf1(K, tmp_path, optimizer):
    """10 steps under TF1 write an Estimator-style checkpoint; 20 more steps, continued under TF1
    and in Keras from it (weights, the optimizer's state, the global step), give the same losses."""
    tf1_optimizer, keras_optimizer = OPTIMIZERS[optimizer]
    start = weights_of(make_model(K, layer_names=TF1_NAMES))
    tf1_train(tmp_path / "run", start, 10, tf1_optimizer)
    keras_dir = copy_of_step_10(tmp_path)
    tf1_losses = tf1_train(tmp_path / "run", start, 20, tf1_optimizer)

    model = make_model(K, layer_names=TF1_NAMES)
    model.compile(optimizer=keras_optimizer(K), loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    report, keras_losses = continue_in_keras(model, keras_dir, 20)
    assert report.global_step == 10 and report.not_restored == [] and report.notes == []
    assert keras_losses == pytest.approx(tf1_losses, abs=1e-5)
    assert iterations(model) == 30
    assert "dense/kernel <- dense/kernel" in str(report)


class LazyAdamOptimizer(T.AdamOptimizer):
    """Written after TF 1.x's `tf.contrib.opt.LazyAdamOptimizer` (gone with tf.contrib): Adam's state
    under Adam's names (`<variable>/Adam`, `Adam_1`, `beta1_power`, `beta2_power`), but a sparse
    gradient (an embedding lookup's) updates the moments and the variable of the rows it holds only."""

    def _apply_sparse(self, grad, var):
        beta1_power, beta2_power = (tf.cast(p, var.dtype.base_dtype) for p in self._get_beta_accumulators())
        beta1, beta2 = (tf.cast(b, var.dtype.base_dtype) for b in (self._beta1_t, self._beta2_t))
        rate = tf.cast(self._lr_t, var.dtype.base_dtype) * tf.sqrt(1 - beta2_power) / (1 - beta1_power)
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        rows = grad.indices
        m_rows = beta1 * tf.gather(m, rows) + (1 - beta1) * grad.values
        v_rows = beta2 * tf.gather(v, rows) + (1 - beta2) * tf.square(grad.values)
        m_update = tf.compat.v1.scatter_update(m, rows, m_rows)
        v_update = tf.compat.v1.scatter_update(v, rows, v_rows)
        step = rate * m_rows / (tf.sqrt(v_rows) + tf.cast(self._epsilon_t, var.dtype.base_dtype))
        return tf.group(tf.compat.v1.scatter_sub(var, rows, step), m_update, v_update)


def test_the_lazy_adam_of_the_tests_is_lazy_where_tf1s_adam_is_not():
    """Two steps on an embedding table, row 0 looked up first, then row 1: LazyAdam leaves row 0's
    first moment as step 1 left it, TF1's AdamOptimizer decays every row's."""
    moments = {}
    for optimizer in (LazyAdamOptimizer, T.AdamOptimizer):
        with tf.Graph().as_default():
            table = tf.compat.v1.get_variable("table", initializer=np.ones((3, 2), np.float32), use_resource=False)
            row = tf.compat.v1.placeholder(tf.int32, [1])
            train = optimizer(0.1).minimize(tf.reduce_sum(tf.nn.embedding_lookup(table, row)))
            (m,) = (v for v in tf.compat.v1.global_variables() if v.op.name == "table/Adam")
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(train, {row: [0]})
                after_one = session.run(m)[0]
                session.run(train, {row: [1]})
                moments[optimizer.__name__] = (after_one, session.run(m))
    lazy_one, lazy = moments["LazyAdamOptimizer"]
    dense_one, dense = moments["AdamOptimizer"]
    np.testing.assert_array_equal(lazy_one, dense_one)  # the same first step
    np.testing.assert_array_equal(lazy[0], lazy_one)
    np.testing.assert_allclose(dense[0], 0.9 * dense_one, rtol=1e-6)
    np.testing.assert_array_equal(lazy[2], 0)


class UnderScope:
    """A model_fn's `with tf.variable_scope(scope):` around its optimizer, as zjy-ucas/ChineseNER's
    `model.py` builds its Adam under "optimizer": TF1 names the state `<scope>/<variable>/<slot>` and,
    for Adam, `<scope>/beta1_power`."""

    def __init__(self, make, scope="optimizer"):
        self.make, self.scope = make, scope

    def __call__(self, rate):
        self.optimizer = self.make(rate)
        return self

    def minimize(self, loss, global_step):
        with tf.compat.v1.variable_scope(self.scope):
            return self.optimizer.minimize(loss, global_step=global_step)


SCOPED = {**OPTIMIZERS, "lazy_adam": (LazyAdamOptimizer, OPTIMIZERS["adam"][1])}


@pytest.mark.parametrize("optimizer", list(SCOPED))
def test_an_optimizer_under_a_scope_gets_its_map_proposed_and_continues_as_under_tf1_with_it(tmp_path, optimizer):
    """The state of an optimizer built under a variable scope, restored with the map the report
    proposes (no map given): every name under the scope paired with its variable's slot of its kind,
    and the continued run's losses TF1's. (The MLP's gradients are dense: LazyAdam's steps are Adam's.)"""
    tf1_optimizer, keras_optimizer = SCOPED[optimizer]
    start = weights_of(make_model(layer_names=TF1_NAMES))
    tf1_train(tmp_path / "run", start, 10, UnderScope(tf1_optimizer))
    keras_dir = copy_of_step_10(tmp_path)
    tf1_losses = tf1_train(tmp_path / "run", start, 20, UnderScope(tf1_optimizer))
    with tf.Graph().as_default():
        scoped = sorted(n for n, _ in tf.train.list_variables(str(keras_dir)) if n.startswith("optimizer/"))

    def compiled():
        model = make_model(layer_names=TF1_NAMES)
        model.compile(
            optimizer=keras_optimizer(keras), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        return model

    with pytest.warns(UserWarning, match="assignment_map"):
        first = restore_tf1_checkpoint(compiled(), str(keras_dir))
    assert sorted(first.proposed_map) == scoped and sorted(first.unused) == scoped, str(first)
    assert all(theirs == f"optimizer/{mine}" for theirs, mine in first.proposed_map.items()), str(first)
    model = compiled()
    report, keras_losses = continue_in_keras(model, keras_dir, 20, assignment_map=first.proposed_map)
    assert report.not_restored == [] and report.unused == [] and report.proposed_map == {}, str(report)
    assert keras_losses == pytest.approx(tf1_losses, abs=1e-5)


def test_the_report_names_what_was_restored_and_a_warning_says_what_was_not(K, tmp_path):
    """An Estimator trained with plain gradient descent continued on Adam: the weights and the step
    are restored, Adam's slots cannot be, and the report and a warning say so."""
    tf1_train(tmp_path, weights_of(make_model(K, layer_names=TF1_NAMES)), 3, T.GradientDescentOptimizer)
    model = make_model(K, layer_names=TF1_NAMES)
    model.compile(optimizer=K.optimizers.Adam(RATE), loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.warns(UserWarning, match=r"optimizer's variables not in the checkpoint keep their values"):
        report = restore_tf1_checkpoint(model, str(tmp_path))
    assert report.path == str(tmp_path / "model.ckpt-3") and report.global_step == 3
    assert set(report.restored) == {"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias", "learning_rate"}
    assert sorted(report.not_restored) == sorted(
        f"{w}/{s}" for w in ("dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias") for s in ("Adam", "Adam_1")
    )
    assert iterations(model) == 3
    text = str(report)
    assert text.startswith(f"Restored 5 variables from {tmp_path / 'model.ckpt-3'}, and the global step 3")
    assert "Not in the checkpoint, left as they were: dense/kernel/Adam" in text


def uncompiled_mlp(K):
    """`make_model`'s MLP with TF1's layer names, built and never compiled: it has no optimizer."""
    compiled = make_model(K, layer_names=TF1_NAMES)
    model = K.Sequential(
        [
            K.Input((compiled.input_shape[-1],)),
            K.layers.Dense(compiled.layers[0].units, activation="relu", name=TF1_NAMES[0]),
            K.layers.Dense(compiled.layers[1].units, name=TF1_NAMES[1]),
        ]
    )
    assert getattr(model, "optimizer", None) is None
    return model


def test_the_global_step_into_an_uncompiled_model_is_warned_of_naming_the_fix(K, tmp_path):
    """The model has no optimizer.iterations to hold the checkpoint's step (nor Adam's slots):
    both were only report lines; now each is a warning naming the variables and the fix."""
    tf1_train(tmp_path, weights_of(make_model(K, layer_names=TF1_NAMES)), 3, T.AdamOptimizer)
    model = uncompiled_mlp(K)
    with pytest.warns(UserWarning) as caught:
        report = restore_tf1_checkpoint(model, str(tmp_path))
    messages = [str(w.message) for w in caught]
    step = [m for m in messages if "global_step (3) was not restored" in m]
    assert len(step) == 1 and "the model is not compiled" in step[0] and "Compile the model" in step[0]
    slots = [m for m in messages if "optimizer state" in m]
    assert len(slots) == 1 and "'dense/kernel/Adam'" in slots[0] and "'beta1_power'" in slots[0]
    assert "keras.optimizers.Adam(epsilon=1e-8)" in slots[0]
    assert report.global_step is None and "global_step" in report.unused
    assert any("global_step (3) was not restored" in note for note in report.notes)
    np.testing.assert_array_equal(weights_of(model)[0], tf.train.load_variable(str(tmp_path), "dense/kernel"))


def test_slots_of_another_optimizer_are_warned_of_naming_the_fix(K, tmp_path):
    """An Estimator trained with Adam continued on SGD: the weights and the step are restored,
    Adam's slots go nowhere, and a warning names them and the optimizer to compile with."""
    tf1_train(tmp_path, weights_of(make_model(K, layer_names=TF1_NAMES)), 3, T.AdamOptimizer)
    model = make_model(K, layer_names=TF1_NAMES)  # SGD
    with pytest.warns(UserWarning, match=r"'dense/kernel/Adam', 'dense/kernel/Adam_1'.*another optimizer than") as w:
        report = restore_tf1_checkpoint(model, str(tmp_path))
    message = next(str(x.message) for x in w if "another optimizer" in str(x.message))
    assert "the model's SGD" in message and "'beta1_power'" in message
    assert "keras.optimizers.Adam(epsilon=1e-8)" in message
    assert report.global_step == 3 and iterations(model) == 3
    assert any("dense_1/bias/Adam_1" in note for note in report.notes)


def test_plain_gradient_descent_continued_on_sgd_warns_of_nothing(K, tmp_path):
    """TF1's GradientDescentOptimizer kept no slots; tf_keras's SGD keeps momentum slots at momentum 0
    too, which no step reads: nothing of TF1's state is left behind, and nothing is warned of."""
    tf1_train(tmp_path, weights_of(make_model(K, layer_names=TF1_NAMES)), 3, T.GradientDescentOptimizer)
    model = make_model(K, layer_names=TF1_NAMES)  # SGD, momentum 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = restore_tf1_checkpoint(model, str(tmp_path))
    assert report.global_step == 3 and report.proposed_map == {}


def test_the_report_names_the_adam_epsilon_difference(K, tmp_path):
    """TF1's AdamOptimizer epsilon is 1e-8 and Keras's Adam's 1e-7: the report says so when the
    checkpoint holds Adam's state and the model's Adam has another epsilon, and is silent at 1e-8."""
    tf1_train(tmp_path, weights_of(make_model(K, layer_names=TF1_NAMES)), 3, T.AdamOptimizer)
    notes = {}
    for epsilon in (1e-7, 1e-8):
        model = make_model(K, layer_names=TF1_NAMES)
        model.compile(optimizer=K.optimizers.Adam(RATE, epsilon=epsilon), loss="sparse_categorical_crossentropy")
        notes[epsilon] = restore_tf1_checkpoint(model, str(tmp_path)).notes
    assert notes[1e-8] == []
    assert len(notes[1e-7]) == 1 and "epsilon=1e-07" in notes[1e-7][0]
    assert "keras.optimizers.Adam(epsilon=1e-8)" in notes[1e-7][0]


def test_an_assignment_map_restores_from_other_scopes(tmp_path):
    start = weights_of(make_model(layer_names=TF1_NAMES))
    tf1_train(tmp_path, start, 2, T.GradientDescentOptimizer, scopes=("mlp/hidden", "mlp/logits"))
    with tf.Graph().as_default():
        expected = tf.train.load_checkpoint(str(tmp_path)).get_tensor("mlp/hidden/kernel")
    model = make_model(layer_names=TF1_NAMES)
    with pytest.raises(ValueError, match=r"no variable for the model's \['dense/kernel'.*mlp/hidden/kernel"):
        restore_tf1_checkpoint(model, str(tmp_path))
    np.testing.assert_array_equal(weights_of(model)[0], start[0])  # nothing was restored
    report = restore_tf1_checkpoint(model, str(tmp_path), {"mlp/hidden/": "dense/", "mlp/logits/": "dense_1/"})
    assert report.restored["dense/kernel"] == "mlp/hidden/kernel"
    np.testing.assert_array_equal(weights_of(model)[0], expected)
    # A scope mapped to the root, as init_from_checkpoint's {"scope/": "/"} does.
    named = make_model(layer_names=("hidden", "logits"))
    report = restore_tf1_checkpoint(named, str(tmp_path), {"mlp/": "/"})
    assert report.restored["hidden/kernel"] == "mlp/hidden/kernel" and report.global_step == 2
    np.testing.assert_array_equal(weights_of(named)[0], expected)


def test_restore_tf1_checkpoint_errors_say_what_to_pass(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"restore_tf1_checkpoint\(model, .*\): no checkpoint there"):
        restore_tf1_checkpoint(make_model(), str(tmp_path))
    tf1_train(tmp_path, weights_of(make_model(layer_names=TF1_NAMES)), 1, T.GradientDescentOptimizer)
    with pytest.raises(ValueError, match=r"assignment_map must be a dict from checkpoint names"):
        restore_tf1_checkpoint(make_model(layer_names=TF1_NAMES), str(tmp_path), {"a": 1})
    layers = [keras.Input((8,)), keras.layers.Dense(5, name="dense"), keras.layers.Dense(3, name="dense_1")]
    wider = keras.Sequential(layers)
    wider.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=r"'dense/kernel' has shape \(8, 5\) in the model, and 'dense/kernel' has"):
        restore_tf1_checkpoint(wider, str(tmp_path))


def test_a_keras_checkpoint_restores_by_tf1_names_too(tmp_path):
    """What CheckpointSaverHook writes holds the TF1 names, so the name-based restore reads it as well."""
    trained = make_model(layer_names=TF1_NAMES)
    trained.compile(optimizer=keras.optimizers.SGD(RATE, momentum=0.9), loss=trained.loss)
    fit_in_order(trained, [HookCallback([T.CheckpointSaverHook(str(tmp_path), save_steps=100)])], steps=5)
    fresh = make_model(layer_names=TF1_NAMES)
    fresh.compile(optimizer=keras.optimizers.SGD(RATE, momentum=0.9), loss=fresh.loss)
    report = restore_tf1_checkpoint(fresh, str(tmp_path))
    assert report.global_step == 5 and report.not_restored == []
    assert report.restored["dense/kernel/Momentum"] == "dense/kernel/Momentum"
    for got, saved in zip(fresh.optimizer.variables, trained.optimizer.variables, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(saved), rtol=1e-6)


def test_momentum_under_a_schedule_is_restored_at_the_rate_of_the_checkpoints_last_step(tmp_path):
    """TF1's MomentumOptimizer kept `a` (variable -= rate * a), Keras's SGD keeps m = -rate * a: under a
    piecewise rate (official r1 ResNet's), at the rate the checkpoint's last step trained at. It was
    left out ("no one rate"), and Keras continued from a zero momentum."""
    boundary, rates = 5, [RATE * 10, RATE]

    def momentum(_):  # the rate from the global step, as the model_fn computed it
        return T.MomentumOptimizer(T.piecewise_constant(T.get_global_step(), [boundary], rates), 0.9)

    start = weights_of(make_model(layer_names=TF1_NAMES))
    tf1_train(tmp_path / "run", start, 10, momentum)  # 10 steps: the batches in the order Keras reads them
    keras_dir = copy_of_step_10(tmp_path)
    tf1_losses = tf1_train(tmp_path / "run", start, 6, momentum)

    model = make_model(layer_names=TF1_NAMES)
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([boundary], rates)
    model.compile(optimizer=keras.optimizers.SGD(schedule, momentum=0.9), loss=model.loss)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TF1 graph's unused rate variable
        report, keras_losses = continue_in_keras(model, keras_dir, 6)
    assert report.global_step == 10 and report.restored["dense/kernel/Momentum"] == "dense/kernel/Momentum"
    # Steps 10 to 15 train at the rate of step 9, the one the accumulator was converted at: the same losses.
    assert keras_losses == pytest.approx(tf1_losses, abs=1e-5)


@pytest.mark.parametrize(
    "keep, kept", [(2, [9, 10]), (None, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), (5, [6, 7, 8, 9, 10])]
)
def test_keep_checkpoint_max_keeps_the_newest_checkpoints_as_estimator_did(tmp_path, keep, kept):
    model = make_model(keras)
    hook = T.CheckpointSaverHook(str(tmp_path), save_steps=1)
    callback = HookCallback([hook]) if keep == 5 else HookCallback([hook], keep_checkpoint_max=keep)
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    assert checkpoint_steps(tmp_path) == kept


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "5"])
def test_keep_checkpoint_max_must_be_a_positive_int_or_none(bad):
    with pytest.raises(ValueError, match=r"keep_checkpoint_max=\.\.\.\) takes a positive int .* got"):
        HookCallback([], keep_checkpoint_max=bad)


SCRIPT_LOGGING_AS_TF1 = """
import numpy as np, tempfile, tensorflow as tf, keras
from hooks2callbacks import HookCallback
{set_level}
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile("sgd", "mse")
hooks = [
    tf.compat.v1.train.CheckpointSaverHook(tempfile.mkdtemp(), save_steps=1),
    tf.compat.v1.train.LoggingTensorHook(["loss"], every_n_iter=1),
]
model.fit(np.zeros((64, 4)), np.zeros((64, 2)), batch_size=32, epochs=1, verbose=0, callbacks=[HookCallback(hooks)])
"""


@pytest.mark.parametrize(
    "set_level",
    [
        "tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)",  # as TF1 scripts did
        'tf.get_logger().setLevel("INFO")',  # as the README does
    ],
)
def test_with_tf1_style_logging_each_hook_line_prints_once_after_a_checkpoint(set_level):
    """What the user's terminal shows: TF's checkpoint writer must not make absl configure the root logger."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT_LOGGING_AS_TF1.format(set_level=set_level)],
        cwd=pathlib.Path(__file__).parent.parent,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("INFO:tensorflow:")]
    saves = [line for line in lines if "Saving checkpoints for" in line]
    losses = [line for line in lines if "loss = " in line]
    assert len(saves) == 3 and len(set(saves)) == 3, lines  # steps 0, 1, 2, each once
    assert len(losses) == 2, lines


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the job's twin is TensorFlow-backend")
def test_under_tf1_shapes_restore_estimator_hooks_and_the_check_work(tmp_path):
    """`disable_v2_tensorshape()` (what BERT's `shape[-1].value` needs) is process-wide: tf1_shapes_run.py
    turns it on in a process of its own and runs restore_tf1_checkpoint (the map proposed across the
    optimizer's scope, then pasted), estimator_hooks through that map, and check_migration."""
    script = pathlib.Path(__file__).parent / "tf1_shapes_run.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(script.parent.parent), str(script.parent)])}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, text=True, timeout=600
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("ok ")]
    assert done.returncode == 0 and len(lines) == 4, done.stdout + done.stderr[-4000:]
