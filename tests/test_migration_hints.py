"""check_migration's hints: each only where the evidence fits it, read from the TF1 graph itself."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from test_migration import NAMES, V1, X, Y, keras_twin, model_fn
from test_migration_steps import bn_model_fn, bn_twin, log_loss

from hooks2callbacks import check_migration
from hooks2callbacks._estimator import EstimatorSpec
from hooks2callbacks.migration._hints import _streaming


def test_the_adam_hint_reads_the_tf1_graphs_own_epsilon():
    params = {"optimizer": lambda: V1.train.AdamOptimizer(0.1, epsilon=1e-9)}
    faithful = check_migration(
        model_fn,
        keras_twin(keras.optimizers.Adam(0.1, epsilon=1e-9)),
        log_loss,
        (X, Y),
        steps=6,
        names=NAMES,
        params=params,
    )
    assert faithful.ok, str(faithful)
    assert not any("epsilon" in note for note in faithful.notes)  # the graph's 1e-9 is the Keras one's
    report = check_migration(
        model_fn, keras_twin(keras.optimizers.Adam(0.1)), log_loss, (X, Y), steps=6, names=NAMES, params=params
    )
    hints = {d.hint for d in report.differences if d.hint}
    assert any("Adam(epsilon=1e-09)" in h for h in hints), str(report)
    assert not any("1e-08" in h for h in hints)


def test_the_batch_norm_hint_names_tf1s_unbiased_variance():
    report = check_migration(bn_model_fn, bn_twin(), log_loss, (X, Y), steps=3, names={"cross_entropy": "loss"})
    first = report.differences[0]
    assert first.key == "variable batch_normalization/moving_variance"
    assert "unbiased" in first.hint and "fused_batch_norm" in first.hint


def test_the_names_map_hint_names_the_key_that_holds_tf1s_values():
    hooks = lambda: [V1.train.LoggingTensorHook({"loss": "cross_entropy:0"}, every_n_iter=1)]  # noqa: E731
    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=4, names={"cross_entropy": "accuracy"})
    first = report.differences[0]
    assert "the Keras log key 'loss' holds TF1's values" in first.hint


def test_no_names_map_hint_where_no_key_holds_tf1s_values():
    # A rate off by 1%: the loss differs, and the names map is right.
    report = check_migration(model_fn, keras_twin(keras.optimizers.SGD(0.0505)), log_loss, (X, Y), steps=6, names=NAMES)
    assert not report.ok
    assert not any(d.hint and "names maps" in d.hint for d in report.differences), str(report)


def custom_slots_model_fn(features, labels, mode, params):
    """Momentum with slots named as a custom optimizer names them (`<var>/adam_m`), not as Keras's SGD does."""
    hidden = V1.layers.dense(features, 16, activation=tf.nn.relu, name="dense")
    logits = V1.layers.dense(hidden, 3, name="dense_1")
    loss = tf.identity(V1.losses.sparse_softmax_cross_entropy(labels, logits), name="cross_entropy")
    variables = V1.trainable_variables()
    updates = []
    for variable, grad in zip(variables, tf.gradients(loss, variables), strict=True):
        slot = V1.get_variable(
            variable.op.name + "/adam_m", variable.shape, initializer=V1.zeros_initializer(), trainable=False
        )
        new = slot.assign(0.9 * slot + grad)
        updates.append(variable.assign_sub(0.05 * new))
    step = V1.train.get_global_step()
    return EstimatorSpec(mode, loss=loss, train_op=tf.group(*updates, V1.assign_add(step, 1)))


def test_custom_optimizer_slots_get_an_assignment_map_hint():
    hooks = lambda: [V1.train.CheckpointSaverHook("model_dir", save_steps=100)]  # noqa: E731
    model = keras_twin(keras.optimizers.SGD(0.05, momentum=0.9))
    report = check_migration(custom_slots_model_fn, model, hooks, (X, Y), steps=2, names=NAMES, per_step=False)
    names = [d for d in report.differences if d.key.endswith(" names")]
    assert names, str(report)
    assert "assignment_map={" in names[0].hint and "'dense/kernel/adam_m': 'dense/kernel/Momentum'" in names[0].hint


def test_a_streaming_accuracy_is_found_under_drift_where_one_sample_flipped():
    # Keras's batch accuracies, and TF1's streaming accuracy of the same batches with one sample of
    # step 3 classified otherwise (the sides drift under another Adam epsilon): still the running mean.
    batches = [3 / 32, 1 / 32, 4 / 32, 2 / 32, 5 / 32, 3 / 32]
    streaming = list(np.cumsum(batches) / np.arange(1, 7))
    for k in range(3, 6):
        streaming[k] += 1 / (32 * (k + 1))
    assert _streaming(streaming, batches, drifting=True)
    assert not _streaming(streaming, batches)  # no drift: the running means exactly
    assert not _streaming([b + 0.01 for b in batches], batches, drifting=True)  # another value, not a mean
