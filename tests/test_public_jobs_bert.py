"""check_migration on google-research/bert's real `run_classifier` and `run_pretraining` jobs, unchanged.

The jobs are `bert.run_classifier.model_fn_builder` and `bert.run_pretraining.model_fn_builder` of
PyPI `bert-tensorflow==1.0.4` (with its `modeling.BertModel` and `optimization.create_optimizer`),
imported, not copied. The only help they get is `install_estimator_aliases()` and
`tests/estimator_era/pypi_jobs.py`: tf.contrib's layers from tf_slim, TF 1.x's TensorShape while a
model_fn builds, and the two modules' absl flags allowed in one process. The BertConfig is tiny, the
pretrained checkpoint a freshly saved `modeling.BertModel`, the schedule the job's own (warmup,
then polynomial decay) with step counts small enough for both phases to run in the checked steps.
Each job is first run as written, under a plain `tf.compat.v1.train.MonitoredTrainingSession`;
then `check_migration` compares it, Estimator's hooks and all, with a Keras 3 twin of the real
network, in train and in eval.

The twin reuses `tests/test_real_jobs.py`'s parts for its BERT-shaped job (the optimizer twin,
the schedule, the dropout that draws the TF1 graph's mask, the assignment map, the race check).
"""

from __future__ import annotations

import math
import os
import sys
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from hooks2callbacks import check_migration
from hooks2callbacks._estimator import TPUEstimatorSpec
from hooks2callbacks.migration._tf1 import _legacy_layers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "estimator_era"))
import pypi_jobs  # noqa: E402
from test_real_jobs import (  # noqa: E402
    BATCH,
    RATE,
    SEED,
    STEPS,
    TOTAL_STEPS,
    WARMUP_STEPS,
    AdamWeightDecay,
    BertLikeTwin,
    WarmupThenDecay,
    assert_rate_race_listed,
    bert_assignment_map,
    estimator_hooks_factory,
    named_loss,
    tf1_dropout,
)

V1 = tf.compat.v1

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the twin is TensorFlow-backend")

bert = pypi_jobs.import_bert()

LENGTH, LABELS = 8, 3
CONFIG = bert.modeling.BertConfig(
    vocab_size=30,
    hidden_size=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=16,
    hidden_act="gelu",
    hidden_dropout_prob=0.0,  # no dropout inside the encoder: legal, and the classifier's stays
    attention_probs_dropout_prob=0.0,
    max_position_embeddings=16,
    type_vocab_size=2,
)
KEEP = 0.9  # run_classifier.create_model's dropout on the pooled output in training, hard-coded


def data(n, seed=2):
    """Features as run_classifier's input_fn parsed them (input_ids, input_mask, segment_ids,
    label_ids), and the labels (the same label_ids) for Keras."""
    rng = np.random.RandomState(seed)
    lengths = rng.randint(LENGTH // 2, LENGTH + 1, n)
    positions = np.arange(LENGTH)[None, :]
    mask = (positions < lengths[:, None]).astype(np.int32)
    second = rng.randint(1, LENGTH // 2, n)  # where the second segment starts
    features = {
        "input_ids": (rng.randint(1, CONFIG.vocab_size, (n, LENGTH)) * mask).astype(np.int32),
        "input_mask": mask,
        "segment_ids": ((positions >= second[:, None]) * mask).astype(np.int32),
        "label_ids": rng.randint(0, LABELS, n).astype(np.int32),
    }
    return features, features["label_ids"]


def pretrained_checkpoint(directory, seed=1):
    """A "pretrained" BERT: `modeling.BertModel` built with the tiny config, initialised, saved."""
    with tf.Graph().as_default(), _legacy_layers(), pypi_jobs.tf1_tensor_shapes():
        V1.set_random_seed(seed)
        features, _ = data(2)
        bert.modeling.BertModel(
            config=CONFIG,
            is_training=False,
            input_ids=tf.constant(features["input_ids"]),
            input_mask=tf.constant(features["input_mask"]),
            token_type_ids=tf.constant(features["segment_ids"]),
        )
        with V1.Session() as session:
            session.run(V1.global_variables_initializer())
            return V1.train.Saver().save(session, os.path.join(directory, "bert_model.ckpt"))


def classifier_model_fn(init_checkpoint):
    """run_classifier's model_fn, as its main() built it (use_tpu=False, no one-hot embeddings)."""
    return pypi_jobs.tf1_shapes(
        bert.run_classifier.model_fn_builder(
            bert_config=CONFIG,
            num_labels=LABELS,
            init_checkpoint=init_checkpoint,
            learning_rate=RATE,
            num_train_steps=TOTAL_STEPS,
            num_warmup_steps=WARMUP_STEPS,
            use_tpu=False,
            use_one_hot_embeddings=False,
        )
    )


# --- The Keras twin of the real network. ---


def bert_weights(config, labels):
    """The TF1 variables of run_classifier's graph, by name: their shapes."""
    h, inner = config.hidden_size, config.intermediate_size
    weights = {
        "bert/embeddings/word_embeddings": (config.vocab_size, h),
        "bert/embeddings/token_type_embeddings": (config.type_vocab_size, h),
        "bert/embeddings/position_embeddings": (config.max_position_embeddings, h),
        "bert/embeddings/LayerNorm/beta": (h,),
        "bert/embeddings/LayerNorm/gamma": (h,),
    }
    for i in range(config.num_hidden_layers):
        layer = f"bert/encoder/layer_{i}"
        for dense, (inputs, units) in {
            "attention/self/query": (h, h),
            "attention/self/key": (h, h),
            "attention/self/value": (h, h),
            "attention/output/dense": (h, h),
            "intermediate/dense": (h, inner),
            "output/dense": (inner, h),
        }.items():
            weights[f"{layer}/{dense}/kernel"] = (inputs, units)
            weights[f"{layer}/{dense}/bias"] = (units,)
        for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
            weights[f"{layer}/{norm}/beta"] = (h,)
            weights[f"{layer}/{norm}/gamma"] = (h,)
    weights["bert/pooler/dense/kernel"] = (h, h)
    weights["bert/pooler/dense/bias"] = (h,)
    weights["output_weights"] = (labels, h)
    weights["output_bias"] = (labels,)
    return weights


WEIGHTS = bert_weights(CONFIG, LABELS)


class BertTwin(BertLikeTwin):
    """run_classifier's network in Keras: BERT's embeddings, transformer layers and pooler, the
    classifier head; one weight per TF1 variable, its dropout drawing the TF1 graph's mask."""

    def norm(self, x, scope):
        """tf-slim's layer_norm (what contrib's was): moments over the last axis, epsilon 1e-12."""
        mean, variance = tf.nn.moments(x, [-1], keepdims=True)
        return tf.nn.batch_normalization(x, mean, variance, self.w(f"{scope}/beta"), self.w(f"{scope}/gamma"), 1e-12)

    def dense(self, x, scope, activation=None):
        y = tf.nn.bias_add(tf.matmul(x, self.w(f"{scope}/kernel")), self.w(f"{scope}/bias"))
        return y if activation is None else activation(y)

    def encode(self, features):
        """`modeling.BertModel`: the sequence output [batch, length, hidden] and the pooled output."""
        c = CONFIG
        heads, size = c.num_attention_heads, c.hidden_size // c.num_attention_heads
        ids = features["input_ids"]
        batch, length = tf.shape(ids)[0], ids.shape[1]
        x = tf.reshape(tf.gather(self.w("bert/embeddings/word_embeddings"), tf.reshape(ids, [-1])), [batch, length, -1])
        token_types = tf.one_hot(tf.reshape(features["segment_ids"], [-1]), depth=c.type_vocab_size)
        x += tf.reshape(tf.matmul(token_types, self.w("bert/embeddings/token_type_embeddings")), [batch, length, -1])
        x += self.w("bert/embeddings/position_embeddings")[None, :length]
        x = self.norm(x, "bert/embeddings/LayerNorm")
        # Every query attends to the keys of the example's mask: -10000 added to the others' scores.
        mask = tf.cast(tf.reshape(features["input_mask"], [batch, 1, length]), tf.float32)
        mask = tf.ones([batch, length, 1], tf.float32) * mask
        adder = (1.0 - mask[:, None]) * -10000.0

        def split(t):
            return tf.transpose(tf.reshape(t, [batch, length, heads, size]), [0, 2, 1, 3])

        flat = tf.reshape(x, [-1, c.hidden_size])
        for i in range(c.num_hidden_layers):
            layer = f"bert/encoder/layer_{i}"
            query, key, value = (
                split(self.dense(flat, f"{layer}/attention/self/{n}")) for n in ("query", "key", "value")
            )
            scores = tf.matmul(query, key, transpose_b=True) * (1.0 / math.sqrt(float(size)))
            probabilities = tf.nn.softmax(scores + adder)
            context = tf.reshape(tf.transpose(tf.matmul(probabilities, value), [0, 2, 1, 3]), [-1, heads * size])
            attended = self.dense(context, f"{layer}/attention/output/dense")
            attended = self.norm(attended + flat, f"{layer}/attention/output/LayerNorm")
            inner = self.dense(attended, f"{layer}/intermediate/dense", bert.modeling.gelu)
            flat = self.norm(self.dense(inner, f"{layer}/output/dense") + attended, f"{layer}/output/LayerNorm")
        sequence = tf.reshape(flat, [batch, length, c.hidden_size])
        return sequence, self.dense(sequence[:, 0], "bert/pooler/dense", tf.tanh)

    def call(self, features, training=False):
        _, pooled = self.encode(features)
        if training:
            pooled = tf1_dropout(pooled, self.seeds, 1.0 - KEEP)
        logits = tf.nn.bias_add(tf.matmul(pooled, self.w("output_weights"), transpose_b=True), self.w("output_bias"))
        return tf.nn.log_softmax(logits)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The job's loss: the mean of the per-example cross entropies."""
        return tf.reduce_mean(per_example_loss(y, y_pred))


def per_example_loss(labels, log_probabilities):
    one_hot = tf.one_hot(tf.reshape(tf.cast(labels, tf.int32), [-1]), LABELS)
    return -tf.reduce_sum(one_hot * log_probabilities, axis=-1)


def bert_twin(seeds):
    """The twin, compiled with the job's optimizer and schedule, and its eval metrics by the job's names."""
    model = BertTwin(seeds, weights=WEIGHTS)
    model(data(BATCH)[0])
    model.compile(
        AdamWeightDecay(WarmupThenDecay()),
        metrics=[
            keras.metrics.SparseCategoricalAccuracy(name="eval_accuracy"),
            keras.metrics.MeanMetricWrapper(per_example_loss, name="eval_loss"),
        ],
        steps_per_execution=1,
    )
    return model


def test_run_classifier_runs_as_written_under_tf1(tmp_path):
    """The real model_fn (its warm start, dropout, AdamWeightDecayOptimizer and schedule, its own
    step increment) under a plain MonitoredTrainingSession; its eval spec converts to
    eval_metric_ops that run."""
    init = pretrained_checkpoint(str(tmp_path))
    features, _ = data(BATCH)
    model_fn = classifier_model_fn(init)
    with tf.Graph().as_default(), _legacy_layers():
        step = V1.train.get_or_create_global_step()
        V1.set_random_seed(SEED)
        spec = model_fn({k: tf.constant(v) for k, v in features.items()}, None, "train", {})
        assert isinstance(spec, TPUEstimatorSpec)
        names = {v.op.name for v in V1.trainable_variables()}
        slots = sorted(v.op.name for v in V1.global_variables() if v.op.name.endswith(("/adam_m", "/adam_v")))
        warm = {v.op.name: v for v in V1.global_variables() if v.op.name.startswith("bert/")}
        warm = {name: v for name, v in warm.items() if not name.endswith(("/adam_m", "/adam_v"))}
        with V1.train.MonitoredTrainingSession(checkpoint_dir=None) as session:
            started = session.run(warm)
            losses = [session.run([spec.train_op, spec.loss])[1] for _ in range(STEPS)]
            final_step = session.run(step)
    assert names == set(WEIGHTS)  # the twin has one weight per TF1 variable
    assert slots == sorted(f"{name}/adam_{kind}" for name in WEIGHTS for kind in "mv")
    assert sorted(started) == sorted(n for n in WEIGHTS if n.startswith("bert/"))
    for name, value in started.items():  # warm-started: every bert/ variable from the checkpoint
        np.testing.assert_array_equal(value, tf.train.load_variable(init, name), err_msg=name)
    assert final_step == STEPS  # the job's own global_step.assign(global_step + 1)
    assert all(np.isfinite(losses)) and min(losses[WARMUP_STEPS:]) < losses[0], losses
    with tf.Graph().as_default(), _legacy_layers():
        V1.train.get_or_create_global_step()
        spec = model_fn({k: tf.constant(v) for k, v in features.items()}, None, "eval", {})
        ops = spec.as_estimator_spec()
        with V1.train.MonitoredSession() as session:
            session.run([update for _, update in ops.eval_metric_ops.values()])
            results, loss = session.run([{k: value for k, (value, _) in ops.eval_metric_ops.items()}, spec.loss])
    assert sorted(results) == ["eval_accuracy", "eval_loss"] and 0 <= results["eval_accuracy"] <= 1
    # the names the eval check's hooks fetch them by
    assert {ops.eval_metric_ops[key][1].op.name: key for key in results} == EVAL_NAMES
    assert results["eval_loss"] == pytest.approx(loss, rel=1e-6)  # one batch: its mean is the batch's loss


def check_classifier(tmp_path, mode):
    init = pretrained_checkpoint(str(tmp_path))
    seeds = types.SimpleNamespace(seed=None, seed2=None)  # not a dict: Keras would track a copy
    model = bert_twin(seeds)
    steps = STEPS if mode == "train" else None
    return check_migration(
        named_loss(classifier_model_fn(init), seeds),
        model,
        estimator_hooks_factory(last_step=steps) if mode == "train" else eval_hooks,
        data(BATCH * 4),
        steps=steps,
        mode=mode,
        batch_size=BATCH,
        names={"total_loss": "loss", **(EVAL_NAMES if mode == "eval" else {})},
        values="batch" if mode == "train" else None,
        assignment_map=bert_assignment_map(model, weights=WEIGHTS),
    )


# tf.metrics' ops in run_classifier's metric_fn, by name: the Keras metrics of the job's names.
EVAL_NAMES = {"mean/update_op": "eval_loss", "accuracy/update_op": "eval_accuracy"}


def eval_hooks():
    """Estimator.evaluate's hooks for the job, and a hook logging its eval metrics step by step
    (tf.metrics' update ops: the evaluation's aggregate so far)."""
    return [
        *estimator_hooks_factory()(),
        V1.train.LoggingTensorHook({key: name for name, key in EVAL_NAMES.items()}, every_n_iter=1),
    ]


def test_check_migration_run_classifier_train(tmp_path):
    report = check_classifier(tmp_path, "train")
    report.assert_ok()
    assert_rate_race_listed(report)
    assert report.per_step_steps == STEPS


def test_check_migration_run_classifier_eval(tmp_path):
    """Eval: each batch's loss, and the job's `eval_loss` (`tf.metrics.mean(per_example_loss)`)
    and `eval_accuracy` as TF1 held them, the evaluation's aggregates so far; Keras's too."""
    report = check_classifier(tmp_path, "eval")
    report.assert_ok()
    assert report.steps == {"tf1": 4, "keras": 4}
    values = report.values
    for side in ("tf1", "keras"):
        losses = [v for _, v in values[("1 LoggingTensorHook", "results['loss']")][side]]
        eval_loss = [v for _, v in values[("2 LoggingTensorHook", "results['eval_loss']")][side]]
        # equal batches: the aggregate at step k is the mean of the batches' losses so far
        assert eval_loss == pytest.approx([np.mean(losses[: k + 1]) for k in range(4)], rel=1e-5), side
        assert eval_loss[1] != pytest.approx(losses[1], rel=1e-5), side  # not the batch's own


# --- run_pretraining: the masked LM and next sentence prediction, on the same twin's encoder. ---

PREDICTIONS = 3  # max_predictions_per_seq


def pretraining_data(n, seed=3):
    """Features as run_pretraining's input_fn parsed them, and the labels (next_sentence_labels) for Keras."""
    features, _ = data(n, seed)
    rng = np.random.RandomState(seed)
    lengths = features["input_mask"].sum(axis=1)
    positions = np.stack([rng.choice(length, PREDICTIONS, replace=False) for length in lengths])
    weights = (rng.rand(n, PREDICTIONS) < 0.8).astype(np.float32)  # some predictions are padding
    weights[:, 0] = 1.0
    del features["label_ids"]
    features.update(
        masked_lm_positions=(positions * weights).astype(np.int32),  # padding: position 0, weight 0
        masked_lm_ids=(rng.randint(1, CONFIG.vocab_size, (n, PREDICTIONS)) * weights).astype(np.int32),
        masked_lm_weights=weights,
        next_sentence_labels=rng.randint(0, 2, (n, 1)).astype(np.int32),
    )
    return features, features["next_sentence_labels"]


def pretraining_model_fn(init_checkpoint):
    """run_pretraining's model_fn, as its main() built it (use_tpu=False, no one-hot embeddings)."""
    return pypi_jobs.tf1_shapes(
        bert.run_pretraining.model_fn_builder(
            bert_config=CONFIG,
            init_checkpoint=init_checkpoint,
            learning_rate=RATE,
            num_train_steps=TOTAL_STEPS,
            num_warmup_steps=WARMUP_STEPS,
            use_tpu=False,
            use_one_hot_embeddings=False,
        )
    )


PRETRAINING_WEIGHTS = {
    **{name: shape for name, shape in WEIGHTS.items() if name.startswith("bert/")},
    "cls/predictions/transform/dense/kernel": (CONFIG.hidden_size, CONFIG.hidden_size),
    "cls/predictions/transform/dense/bias": (CONFIG.hidden_size,),
    "cls/predictions/transform/LayerNorm/beta": (CONFIG.hidden_size,),
    "cls/predictions/transform/LayerNorm/gamma": (CONFIG.hidden_size,),
    "cls/predictions/output_bias": (CONFIG.vocab_size,),
    "cls/seq_relationship/output_weights": (2, CONFIG.hidden_size),
    "cls/seq_relationship/output_bias": (2,),
}

# run_pretraining's metric_fn's tf.metrics, by their update ops' names: the Keras metrics of the job's names.
PRETRAINING_EVAL_NAMES = {
    "accuracy/update_op": "masked_lm_accuracy",
    "mean/update_op": "masked_lm_loss",
    "accuracy_1/update_op": "next_sentence_accuracy",
    "mean_1/update_op": "next_sentence_loss",
}


class PretrainingTwin(BertTwin):
    """run_pretraining's network in Keras: the encoder, the masked LM head (a transform, then the
    word embeddings, tied, with a bias of its own) and the next sentence head. Its eval metrics
    are weighted means, as the job's `tf.metrics` (the masked LM's by `masked_lm_weights`)."""

    def __init__(self, weights):
        super().__init__(None, weights=weights)
        self.job_metrics = {
            name: keras.metrics.Mean(name=name) for name in sorted(set(PRETRAINING_EVAL_NAMES.values()))
        }

    def call(self, features, training=False):
        sequence, pooled = self.encode(features)
        batch, length = tf.shape(sequence)[0], sequence.shape[1]
        offsets = tf.reshape(tf.range(0, batch, dtype=tf.int32) * length, [-1, 1])
        positions = tf.reshape(features["masked_lm_positions"] + offsets, [-1])
        x = tf.gather(tf.reshape(sequence, [-1, CONFIG.hidden_size]), positions)
        x = self.norm(
            self.dense(x, "cls/predictions/transform/dense", bert.modeling.gelu), "cls/predictions/transform/LayerNorm"
        )
        words = tf.matmul(x, self.w("bert/embeddings/word_embeddings"), transpose_b=True)
        words = tf.nn.bias_add(words, self.w("cls/predictions/output_bias"))
        sentences = tf.matmul(pooled, self.w("cls/seq_relationship/output_weights"), transpose_b=True)
        sentences = tf.nn.bias_add(sentences, self.w("cls/seq_relationship/output_bias"))
        return {"masked_lm": tf.nn.log_softmax(words), "next_sentence": tf.nn.log_softmax(sentences)}

    @staticmethod
    def per_example(x, y, y_pred):
        ids = tf.reshape(x["masked_lm_ids"], [-1])
        masked_lm = -tf.reduce_sum(y_pred["masked_lm"] * tf.one_hot(ids, CONFIG.vocab_size), axis=[-1])
        labels = tf.reshape(y, [-1])
        next_sentence = -tf.reduce_sum(tf.one_hot(labels, 2) * y_pred["next_sentence"], axis=-1)
        return ids, labels, masked_lm, next_sentence

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The job's loss: the masked LM's weighted mean (+1e-5 below), plus next sentence's mean."""
        _, _, masked_lm, next_sentence = self.per_example(x, y, y_pred)
        weights = tf.reshape(x["masked_lm_weights"], [-1])
        masked_lm_loss = tf.reduce_sum(weights * masked_lm) / (tf.reduce_sum(weights) + 1e-5)
        return masked_lm_loss + tf.reduce_mean(next_sentence)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        ids, labels, masked_lm, next_sentence = self.per_example(x, y, y_pred)
        weights = tf.reshape(x["masked_lm_weights"], [-1])
        hits = tf.cast(tf.equal(tf.argmax(y_pred["masked_lm"], axis=-1, output_type=tf.int32), ids), tf.float32)
        self.job_metrics["masked_lm_accuracy"].update_state(hits, weights)
        self.job_metrics["masked_lm_loss"].update_state(masked_lm, weights)
        right = tf.equal(tf.argmax(y_pred["next_sentence"], axis=-1, output_type=tf.int32), labels)
        self.job_metrics["next_sentence_accuracy"].update_state(tf.cast(right, tf.float32))
        self.job_metrics["next_sentence_loss"].update_state(next_sentence)
        return super().compute_metrics(x, y, y_pred, sample_weight)


def pretraining_twin():
    model = PretrainingTwin(PRETRAINING_WEIGHTS)
    model(pretraining_data(BATCH)[0])
    model.compile(AdamWeightDecay(WarmupThenDecay()), steps_per_execution=1)
    return model


def test_run_pretraining_runs_as_written_under_tf1(tmp_path):
    """run_pretraining's model_fn under a plain MonitoredTrainingSession: warm-started encoder, the
    heads' variables, its own step increment; its eval spec's four metrics run."""
    init = pretrained_checkpoint(str(tmp_path))
    features, _ = pretraining_data(BATCH)
    model_fn = pretraining_model_fn(init)
    with tf.Graph().as_default(), _legacy_layers():
        step = V1.train.get_or_create_global_step()
        spec = model_fn({k: tf.constant(v) for k, v in features.items()}, None, "train", {})
        names = {v.op.name for v in V1.trainable_variables()}
        word = next(v for v in V1.global_variables() if v.op.name == "bert/embeddings/word_embeddings")
        with V1.train.MonitoredTrainingSession(checkpoint_dir=None) as session:
            started = session.run(word)
            losses = [session.run([spec.train_op, spec.loss])[1] for _ in range(STEPS)]
            final_step = session.run(step)
    assert names == set(PRETRAINING_WEIGHTS)
    np.testing.assert_array_equal(started, tf.train.load_variable(init, "bert/embeddings/word_embeddings"))
    assert final_step == STEPS and all(np.isfinite(losses)) and min(losses[WARMUP_STEPS:]) < losses[0], losses
    with tf.Graph().as_default(), _legacy_layers():
        V1.train.get_or_create_global_step()
        ops = model_fn({k: tf.constant(v) for k, v in features.items()}, None, "eval", {}).as_estimator_spec()
        with V1.train.MonitoredSession() as session:
            session.run([update for _, update in ops.eval_metric_ops.values()])
            results = session.run({k: value for k, (value, _) in ops.eval_metric_ops.items()})
    assert sorted(results) == sorted(PRETRAINING_EVAL_NAMES.values())
    assert all(np.isfinite(v) for v in results.values()), results
    assert {pair[1].op.name: key for key, pair in ops.eval_metric_ops.items()} == PRETRAINING_EVAL_NAMES


def check_pretraining(tmp_path, mode):
    init = pretrained_checkpoint(str(tmp_path))
    model = pretraining_twin()
    steps = STEPS if mode == "train" else None

    def eval_hooks():
        logged = {key: name for name, key in PRETRAINING_EVAL_NAMES.items()}
        return [*estimator_hooks_factory()(), V1.train.LoggingTensorHook(logged, every_n_iter=1)]

    return check_migration(
        named_loss(pretraining_model_fn(init)),
        model,
        estimator_hooks_factory(last_step=steps) if mode == "train" else eval_hooks,
        pretraining_data(BATCH * 4),
        steps=steps,
        mode=mode,
        batch_size=BATCH,
        names={"total_loss": "loss", **(PRETRAINING_EVAL_NAMES if mode == "eval" else {})},
        values="batch" if mode == "train" else None,
        assignment_map=bert_assignment_map(model, weights=PRETRAINING_WEIGHTS),
    )


@pytest.mark.slow
def test_check_migration_run_pretraining_train(tmp_path):
    """Slow (about 20 s here): the optimizer, schedule and race are run_classifier's, checked above."""
    report = check_pretraining(tmp_path, "train")
    report.assert_ok()
    assert_rate_race_listed(report)
    assert report.per_step_steps == STEPS


def test_check_migration_run_pretraining_eval(tmp_path):
    """Eval: the job's four tf.metrics (weighted by masked_lm_weights where the job weighted them)
    as the evaluation's aggregates, on both sides."""
    report = check_pretraining(tmp_path, "eval")
    report.assert_ok()
    for key in PRETRAINING_EVAL_NAMES.values():
        values = report.values[("2 LoggingTensorHook", f"results['{key}']")]
        assert len(values["tf1"]) == len(values["keras"]) == 4, key
