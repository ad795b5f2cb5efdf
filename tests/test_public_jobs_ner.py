"""check_migration on a sequence-tagging job whose optimizer is built inside its own variable scope.

Written for the project after zjy-ucas/ChineseNER's `model.py` (a public TF1 character-level NER
tagger: a `char_embedding` table read with `tf.nn.embedding_lookup`, a `project/logits` layer, and
`with tf.variable_scope("optimizer"):` around `AdamOptimizer`, its gradients clipped by value to
[-5, 5] before `apply_gradients(..., global_step)`), as an Estimator `model_fn` (the job itself fed a
Session; its BiLSTM and CRF are left out: the optimizer's scope is the point). TF1 names the
optimizer's state `optimizer/<variable>/Adam`, `optimizer/<variable>/Adam_1`, `optimizer/beta1_power`,
`optimizer/beta2_power`.

The Keras twin's `train_step` is keras.io's guide step ("Customizing what happens in fit()": `x, y =
data`, a `GradientTape`, `compute_loss`, `optimizer.apply`, the metrics), with the job's clipping.

Each batch holds each token id once: Keras 3's Adam squares a sparse gradient's rows one by one,
so an id repeated in a batch gets another second moment than TF1's, which sums the rows first
(`test_an_embedding_id_repeated_in_a_batch_is_found_at_step_0`).
"""

from __future__ import annotations

import ast

import keras
import numpy as np
import pytest
import tensorflow as tf

from hooks2callbacks import check_migration
from hooks2callbacks._estimator import EstimatorSpec

V1 = tf.compat.v1
pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the twin's step is TensorFlow's")

VOCAB, LENGTH, DIM, TAGS, BATCH, CLIP, RATE = 96, 6, 8, 4, 16, 5.0, 0.01
STEPS = 4
# The job's names, and the twin's: the table and the projection under other scopes.
WEIGHTS = {"char_embedding/char_embedding": "char_embedding/embeddings", "project/logits/": "logits/"}


def data(repeated=False):
    rng = np.random.default_rng(0)
    if repeated:
        x = rng.integers(0, 12, (STEPS * BATCH, LENGTH))
    else:  # each batch a permutation of the vocabulary: every id once
        x = np.concatenate([rng.permutation(VOCAB).reshape(BATCH, LENGTH) for _ in range(STEPS)])
    return x.astype("int32"), rng.integers(0, TAGS, (STEPS * BATCH, LENGTH)).astype("int32")


def model_fn(features, labels, mode, params):
    with V1.variable_scope("char_embedding"):
        table = V1.get_variable("char_embedding", [VOCAB, DIM])
    embedded = tf.nn.embedding_lookup(table, features)
    with V1.variable_scope("project"), V1.variable_scope("logits"):
        kernel = V1.get_variable("kernel", [DIM, TAGS])
        bias = V1.get_variable("bias", [TAGS], initializer=V1.zeros_initializer())
        logits = tf.matmul(embedded, kernel) + bias
    loss = tf.identity(V1.losses.sparse_softmax_cross_entropy(labels, logits), name="loss")
    if mode == "eval":
        return EstimatorSpec(mode, loss=loss)
    with V1.variable_scope("optimizer"):
        optimizer = V1.train.AdamOptimizer(RATE)
        clipped = [(tf.clip_by_value(g, -CLIP, CLIP), v) for g, v in optimizer.compute_gradients(loss)]
        train_op = optimizer.apply_gradients(clipped, V1.train.get_global_step())
    return EstimatorSpec(mode, loss=loss, train_op=train_op)


class GuideModel(keras.Model):
    """keras.io's "Customizing what happens in fit()" step, as the guide writes it, with the job's clipping."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        gradients = tape.gradient(loss, self.trainable_variables)
        gradients = [tf.clip_by_value(g, -CLIP, CLIP) for g in gradients]
        self.optimizer.apply(gradients, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def twin():
    inputs = keras.Input((LENGTH,), dtype="int32")
    embedded = keras.layers.Embedding(VOCAB, DIM, name="char_embedding")(inputs)
    model = GuideModel(inputs, keras.layers.Dense(TAGS, name="logits")(embedded))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(keras.optimizers.Adam(RATE, epsilon=1e-8), loss)  # TF1's epsilon
    return model


def hooks():
    return [V1.train.LoggingTensorHook({"loss": "loss:0"}, every_n_iter=1)]


def check(assignment_map, mode="train", repeated=False):
    steps = STEPS if mode == "train" else None
    return check_migration(
        model_fn, twin(), hooks, data(repeated), steps=steps, mode=mode, batch_size=BATCH, assignment_map=assignment_map
    )


def proposed_map(report):
    code = report.cause[report.cause.index("slot_map = ") + len("slot_map = ") :]
    return ast.literal_eval(code[: code.index("}") + 1])


def tf1_optimizer_names():
    with tf.Graph().as_default():
        V1.train.get_or_create_global_step()
        x, y = data()
        model_fn(tf.constant(x[:BATCH]), tf.constant(y[:BATCH]), "train", {})
        return sorted(v.op.name for v in V1.global_variables() if v.op.name.startswith("optimizer/"))


@pytest.mark.slow
def test_without_a_map_the_check_proposes_it_and_names_it_as_the_cause_then_with_it_train_and_eval_are_ok():
    first = check(WEIGHTS)
    # The cause once, before the table, with the map as code; not again in the notes.
    assert first.cause is not None and str(first).count("slot_map = {") == 1, str(first)
    # Never a plain OK above a cause that limited the comparison.
    assert "OK, every hook saw and did the same" not in str(first).splitlines()[0], str(first)
    assert not any("keep their values" in n or "slot_map" in n for n in first.notes), first.notes
    slot_map = proposed_map(first)
    # Every name of the TF1 optimizer's state under its scope, each paired with its Keras twin by
    # the variable it belongs to and its kind (m: Adam, v: Adam_1).
    assert sorted(slot_map) == tf1_optimizer_names()
    assert slot_map["optimizer/char_embedding/char_embedding/Adam"] == "char_embedding/embeddings/Adam"
    assert slot_map["optimizer/project/logits/kernel/Adam_1"] == "logits/kernel/Adam_1"
    assert slot_map["optimizer/beta1_power"] == "beta1_power"
    # Step 0 starts from both sides' initial state and is compared; later steps would differ by the
    # state not restored alone, so they are not: no difference is left unexplained.
    assert first.per_step_steps == 1 and first.ok, str(first)

    pasted = {**WEIGHTS, **slot_map}
    train = check(pasted)
    train.assert_ok()
    assert train.cause is None and train.per_step_steps == STEPS
    check(pasted, mode="eval").assert_ok()


@pytest.mark.slow
def test_an_embedding_id_repeated_in_a_batch_is_found_at_step_0():
    # Keras 3's Adam squares each row of the sparse gradient (v += (1 - beta_2) * sum(g_i ** 2)),
    # TF1's sums an id's rows first (v += (1 - beta_2) * (sum g_i) ** 2): from the same weights
    # the first step already differs, on the table.
    first = check(WEIGHTS, repeated=True)
    report = check({**WEIGHTS, **proposed_map(first)}, repeated=True)
    per_step = [d for d in report.differences if d.hook == "(per step)"]
    assert per_step and per_step[0].step == 0, str(report)
    assert per_step[0].key == "variable char_embedding/char_embedding", str(report)


def tf_keras_twin():
    """The twin in tf_keras (Keras 2), its step as tf_keras's guide wrote it (`compiled_loss`,
    `apply_gradients`, `compiled_metrics`)."""
    import tf_keras

    class GuideModel2(tf_keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
            gradients = tape.gradient(loss, self.trainable_variables)
            gradients = [tf.clip_by_value(g, -CLIP, CLIP) for g in gradients]
            self.optimizer.apply_gradients(zip(gradients, self.trainable_variables, strict=True))
            self.compiled_metrics.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    inputs = tf_keras.Input((LENGTH,), dtype="int32")
    embedded = tf_keras.layers.Embedding(VOCAB, DIM, name="char_embedding")(inputs)
    model = GuideModel2(inputs, tf_keras.layers.Dense(TAGS, name="logits")(embedded))
    loss = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(tf_keras.optimizers.Adam(RATE, epsilon=1e-8), loss)
    return model


@pytest.mark.slow
def test_a_tf_keras_twin_with_its_guides_step_gets_the_same_cause_and_map_and_is_ok_with_it():
    pytest.importorskip("tf_keras")
    x, y = data()
    first = check_migration(
        model_fn, tf_keras_twin(), hooks, (x, y), steps=STEPS, batch_size=BATCH, assignment_map=WEIGHTS
    )
    assert first.keras_error is None and first.cause is not None and first.per_step_steps == 1, str(first)
    slot_map = proposed_map(first)
    assert sorted(slot_map) == tf1_optimizer_names()
    report = check_migration(
        model_fn, tf_keras_twin(), hooks, (x, y), steps=STEPS, batch_size=BATCH, assignment_map={**WEIGHTS, **slot_map}
    )
    report.assert_ok()
    assert report.cause is None and report.per_step_steps == STEPS
