"""check_migration's per-step comparison: each step from TF1's weights of that step, so drift does not compound."""

from __future__ import annotations

import pathlib

import keras
import numpy as np
import tensorflow as tf
from test_migration import NAMES, V1, X, Y, keras_twin, model_fn

from hooks2callbacks import check_migration
from hooks2callbacks._estimator import EstimatorSpec


def log_loss():
    return [V1.train.LoggingTensorHook({"loss": "cross_entropy:0"}, every_n_iter=1)]


def per_step(report):
    return [d for d in report.differences if d.hook == "(per step)"]


def test_a_rate_off_by_one_percent_is_found_at_the_first_step_from_the_same_weights():
    # With the loose free-running tolerances a real job needs for drift, the free-running loss
    # parts late (from step 6 here, or not within the 10 steps, as the initial weights fall), like
    # drift; from the same weights the first step already differs.
    report = check_migration(
        model_fn, keras_twin(keras.optimizers.SGD(0.0505)), log_loss, (X, Y), steps=10, names=NAMES, rtol=1e-3
    )
    found = per_step(report)
    assert found, str(report)
    first = found[0]
    assert (first.method, first.step, first.key) == ("train step", 0, "variable dense/kernel")
    size, index = first.max_diff
    assert size > 1e-6 and len(index) == 2
    # The largest element of the difference is the one named.
    assert np.isclose(np.abs(first.tf1 - first.keras)[index], size)
    assert "max |diff|" in str(first) and f"at index {index}" in str(first)
    assert {d.step for d in found} == set(range(10))  # every step, each from TF1's own weights
    free = [d for d in report.differences if d.hook == "0 LoggingTensorHook" and d.key == "results['loss']"]
    assert all(d.step > 0 and d.parted_at == free[0].step for d in free)


def test_the_same_rate_passes_per_step():
    report = check_migration(model_fn, keras_twin(), log_loss, (X, Y), steps=10, names=NAMES)
    assert report.ok, str(report)
    assert report.per_step_steps == 10


def bn_model_fn(features, labels, mode, params):
    """TF1's fused batch norm (tf.compat.v1.layers, as official r1 ResNet built it) between two dense layers."""
    training = mode == "train"
    hidden = tf.reshape(V1.layers.dense(features, 16, name="dense"), [-1, 1, 1, 16])  # fused: 4-D only
    hidden = V1.layers.batch_normalization(hidden, training=training, fused=True, name="batch_normalization")
    logits = V1.layers.dense(tf.nn.relu(tf.reshape(hidden, [-1, 16])), 3, name="dense_1")
    loss = tf.identity(V1.losses.sparse_softmax_cross_entropy(labels, logits), name="cross_entropy")
    if mode == "eval":
        return EstimatorSpec(mode, loss=loss)
    with tf.control_dependencies(V1.get_collection(V1.GraphKeys.UPDATE_OPS)):
        train_op = V1.train.GradientDescentOptimizer(0.05).minimize(loss, V1.train.get_global_step())
    return EstimatorSpec(mode, loss=loss, train_op=train_op)


def bn_twin():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((8,))
    hidden = keras.layers.Reshape((1, 1, 16))(keras.layers.Dense(16, name="dense")(inputs))
    hidden = keras.layers.BatchNormalization(momentum=0.99, epsilon=1e-3, name="batch_normalization")(hidden)
    logits = keras.layers.Dense(3, name="dense_1")(keras.layers.ReLU()(keras.layers.Reshape((16,))(hidden)))
    model = keras.Model(inputs, logits)
    model.compile(keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_batch_norms_biased_variance_is_found_at_the_first_step_on_the_moving_variance():
    # Training uses the batch's own statistics, so the loss the hooks see is the same on both sides:
    # only the moving variance (n/(n-1) apart in its update) differs, from the first step.
    report = check_migration(bn_model_fn, bn_twin(), log_loss, (X, Y), steps=6, names={"cross_entropy": "loss"})
    assert not report.ok
    assert [d for d in report.differences if d.hook != "(per step)"] == [], str(report)
    first = per_step(report)[0]
    assert (first.step, first.key) == (0, "variable batch_normalization/moving_variance"), str(report)
    # TF1's fused batch norm moves toward the unbiased variance: larger than Keras's everywhere.
    assert np.all(first.tf1 > first.keras)


def test_float_order_in_the_free_running_comparison_is_drift_not_the_verdict():
    # Adam with TF1's own epsilon: each step from the same weights is equal, and the free-running
    # trajectories part by float order alone, which a zero tolerance shows.
    params = {"optimizer": lambda: V1.train.AdamOptimizer(0.1)}
    hooks = lambda: [*log_loss(), V1.train.CheckpointSaverHook("model_dir", save_steps=5)]  # noqa: E731
    model = keras_twin(keras.optimizers.Adam(0.1, epsilon=1e-8))
    report = check_migration(model_fn, model, hooks, (X, Y), steps=12, names=NAMES, params=params, rtol=0, atol=0)
    assert report.ok, str(report)
    assert report.drift, "no drift at zero tolerance: the test no longer shows what it is for"
    assert all(d.hint is None and d.step >= (d.parted_at or 0) for d in report.drift)
    text = str(report)
    assert "Drift (float order" in text and "from step" in text
    strict = check_migration(
        model_fn,
        keras_twin(keras.optimizers.Adam(0.1, epsilon=1e-8)),
        hooks,
        (X, Y),
        steps=12,
        names=NAMES,
        params=params,
        rtol=0,
        atol=0,
        per_step=False,
    )
    assert not strict.ok and not strict.drift  # without the per-step comparison nothing is drift


def docs_code(section, name):
    """`name`, defined by the first Python block under `## <section>` in docs/check-migration.md, run as
    the page gives it."""
    page = (pathlib.Path(__file__).parent.parent / "docs" / "check-migration.md").read_text()
    code = page.split(f"## {section}", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, "docs/check-migration.md", "exec"), namespace)  # noqa: S102
    return namespace[name]


def docs_tf1_batch_normalization():
    """The layer docs/check-migration.md shows under "Batch norm as TF1 had it"."""
    return docs_code("Batch norm as TF1 had it", "TF1BatchNormalization")


def test_the_docs_tf1_batch_norm_layer_passes_the_per_step_comparison():
    layer = docs_tf1_batch_normalization()
    keras.utils.set_random_seed(1)
    inputs = keras.Input((8,))
    hidden = keras.layers.Reshape((1, 1, 16))(keras.layers.Dense(16, name="dense")(inputs))
    hidden = layer(name="batch_normalization")(hidden)
    logits = keras.layers.Dense(3, name="dense_1")(keras.layers.ReLU()(keras.layers.Reshape((16,))(hidden)))
    model = keras.Model(inputs, logits)
    model.compile(keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    report = check_migration(bn_model_fn, model, log_loss, (X, Y), steps=6, names={"cross_entropy": "loss"})
    assert report.ok, str(report)
    assert report.per_step_steps == 6
