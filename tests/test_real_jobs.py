"""check_migration on Estimator jobs shaped like real public ones (tests/estimator_era/jobs/, see its README).

The jobs are written for this project; each reproduces the behaviours of a public job that matter
to the check (its docstring names the job and the behaviours): `bert_like` is modelled on
google-research/bert's `run_classifier.py` and `optimization.py`, `mnist_like` on tensorflow/tpu's
`models/official/mnist/mnist_tpu.py`. Each job's model_fn is first run as written, under a plain
`tf.compat.v1.train.MonitoredTrainingSession`; then `check_migration` compares it, hooks and all,
with a Keras twin written the way a migrating user would write it.
"""

from __future__ import annotations

import ast
import os
import re
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
from jobs import bert_like, mnist_like  # noqa: E402

V1 = tf.compat.v1

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the twins are TensorFlow-backend")

BATCH, SEED, STEPS = 8, 7, 8
# The job's schedule, shortened: linear warmup over 3 steps, then linear decay to 0 at step 10.
RATE, TOTAL_STEPS, WARMUP_STEPS = 1e-2, 10, 3


def named_loss(model_fn, seeds=None):
    """The job's model_fn as Estimator ran it: the graph's seed set first (RunConfig(tf_random_seed)),
    its loss also named `total_loss` (a hooks factory asks for tensors by name; Estimator's own hooks
    took `spec.loss` itself); `seeds` receives the seeds TF1 gave the dropout's random op."""

    def named(features, labels, mode, params):
        V1.set_random_seed(SEED)
        spec = model_fn(features, labels, mode, params)
        if spec.loss is not None:
            tf.identity(spec.loss, name="total_loss")
        if seeds is not None:
            for op in V1.get_default_graph().get_operations():
                if op.type == "RandomUniform" and "dropout" in op.name:
                    seeds.seed, seeds.seed2 = op.get_attr("seed"), op.get_attr("seed2")
        return spec

    return named


def estimator_hooks_factory(last_step=None):
    """What Estimator.train added to every run (NanTensorHook, the loss line), plus the job's step limit."""

    def hooks():
        made = [
            V1.train.NanTensorHook("total_loss:0"),
            V1.train.LoggingTensorHook({"loss": "total_loss"}, every_n_iter=1),
        ]
        if last_step is not None:
            made.append(V1.train.StopAtStepHook(last_step=last_step))
        return made

    return hooks


def tf1_dropout(x, seeds, rate):
    """The TF1 graph's dropout mask: its stateful RandomUniform, with the seeds TF1 gave it, draws the
    same numbers step after step; kept values scaled by 1 / (1 - rate), as `tf.compat.v1.nn.dropout`."""
    noise = tf.raw_ops.RandomUniform(shape=tf.shape(x), dtype=tf.float32, seed=seeds.seed, seed2=seeds.seed2)
    return x * tf.constant(1 / (1 - rate), tf.float32) * tf.cast(noise >= rate, tf.float32)


# --- The BERT-classifier-shaped job and its Keras twin. ---


def keras_name(tf1_name):
    return tf1_name.replace("/", "__")


def keras_name_to_tf1(path):
    return path.split("/")[-1].replace("__", "/")


H, INNER = bert_like.HIDDEN, bert_like.INNER
BERT_WEIGHTS = {
    "bert/embeddings/word_embeddings": (bert_like.VOCAB, H),
    "bert/embeddings/position_embeddings": (bert_like.LENGTH, H),
    "bert/embeddings/LayerNorm/beta": (H,),
    "bert/embeddings/LayerNorm/gamma": (H,),
    "bert/encoder/intermediate/kernel": (H, INNER),
    "bert/encoder/intermediate/bias": (INNER,),
    "bert/encoder/output/kernel": (INNER, H),
    "bert/encoder/output/bias": (H,),
    "bert/encoder/output/LayerNorm/beta": (H,),
    "bert/encoder/output/LayerNorm/gamma": (H,),
    "bert/pooler/kernel": (H, H),
    "bert/pooler/bias": (H,),
    "output_weights": (bert_like.LABELS, H),
    "output_bias": (bert_like.LABELS,),
}


class BertLikeTwin(keras.Model):
    """The job's network in Keras, one weight per TF1 variable; its dropout draws the TF1 graph's mask."""

    def __init__(self, seeds, weights=None):
        super().__init__(name="bert_twin")
        self.seeds = seeds
        for name, shape in (weights or BERT_WEIGHTS).items():
            initializer = "ones" if name.endswith("gamma") else "zeros" if name.endswith(("beta", "bias")) else None
            weight = self.add_weight(name=keras_name(name), shape=shape, initializer=initializer)
            setattr(self, keras_name(name), weight)

    def w(self, name):
        return getattr(self, keras_name(name))

    def norm(self, x, scope):
        mean, variance = tf.nn.moments(x, [-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + 1e-12) * self.w(f"{scope}/gamma") + self.w(f"{scope}/beta")

    def affine(self, x, scope):
        return tf.matmul(x, self.w(f"{scope}/kernel")) + self.w(f"{scope}/bias")

    def call(self, features, training=False):
        x = tf.gather(self.w("bert/embeddings/word_embeddings"), features["input_ids"])
        x = self.norm(x + self.w("bert/embeddings/position_embeddings")[None], "bert/embeddings/LayerNorm")
        flat = tf.reshape(x, [-1, H])
        inner = bert_like.gelu(self.affine(flat, "bert/encoder/intermediate"))
        flat = self.norm(self.affine(inner, "bert/encoder/output") + flat, "bert/encoder/output/LayerNorm")
        x = tf.reshape(flat, [-1, bert_like.LENGTH, H])
        mask = tf.cast(features["input_mask"], tf.float32)[:, :, None]
        pooled = tf.reduce_sum(x * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
        pooled = tf.tanh(self.affine(pooled, "bert/pooler"))
        if training:
            pooled = tf1_dropout(pooled, self.seeds, 1.0 - bert_like.KEEP)
        logits = tf.matmul(pooled, self.w("output_weights"), transpose_b=True) + self.w("output_bias")
        return tf.nn.log_softmax(logits)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The job's loss: the mean of the per-example cross entropies."""
        one_hot = tf.one_hot(tf.reshape(y, [-1]), bert_like.LABELS)
        return tf.reduce_mean(-tf.reduce_sum(one_hot * y_pred, axis=-1))


class WarmupThenDecay(keras.optimizers.schedules.LearningRateSchedule):
    """The job's rate: linear warmup, then linear decay to 0; `ahead` steps ahead (TF1's other order)."""

    def __init__(self, ahead=0):
        self.ahead = ahead

    def __call__(self, step):
        step = tf.cast(step + self.ahead, tf.float32)
        decayed = RATE * (1.0 - tf.minimum(step, float(TOTAL_STEPS)) / float(TOTAL_STEPS))
        warming = tf.cast(step < WARMUP_STEPS, tf.float32)
        return warming * (RATE * step / float(WARMUP_STEPS)) + (1.0 - warming) * decayed


class AdamWeightDecay(keras.optimizers.Optimizer):
    """The job's optimizer in Keras: Adam without bias correction, decoupled weight decay, slots
    `adam_m` and `adam_v`, gradients clipped to global norm 1."""

    def __init__(self, learning_rate, weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6):
        super().__init__(learning_rate=learning_rate, global_clipnorm=1.0, name="AdamWeightDecay")
        self.weight_decay_rate, self.beta_1, self.beta_2, self.epsilon = weight_decay, beta_1, beta_2, epsilon

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.adam_m = [self.add_variable_from_reference(v, "adam_m") for v in variables]
        self.adam_v = [self.add_variable_from_reference(v, "adam_v") for v in variables]
        self.decays = [not any(re.search(p, keras_name_to_tf1(v.path)) for p in bert_like.NO_DECAY) for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        m, v = self.adam_m[index], self.adam_v[index]
        next_m = self.beta_1 * m + (1.0 - self.beta_1) * gradient
        next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(gradient)
        update = next_m / (tf.sqrt(next_v) + self.epsilon)
        if self.decays[index]:
            update += self.weight_decay_rate * variable
        self.assign(variable, variable - tf.cast(learning_rate, variable.dtype) * update)
        self.assign(m, next_m)
        self.assign(v, next_v)


def bert_twin(seeds, ahead=0):
    model = BertLikeTwin(seeds)
    model(bert_like.data(BATCH)[0])
    model.compile(AdamWeightDecay(WarmupThenDecay(ahead)), steps_per_execution=1)
    return model


def bert_assignment_map(model, slots=True, weights=None):
    """The TF1 names of the twin's weights and, with `slots`, of its optimizer's `adam_m`, `adam_v`.

    The slots' part is what check_migration proposes (see the slot-map test below).
    """
    names = {name: keras_name(name) for name in weights or BERT_WEIGHTS}
    if slots:
        optimizer = model.optimizer
        optimizer.build(model.trainable_variables)
        for weight, m, v in zip(model.trainable_variables, optimizer.adam_m, optimizer.adam_v, strict=True):
            names[f"{keras_name_to_tf1(weight.path)}/adam_m"] = m.path
            names[f"{keras_name_to_tf1(weight.path)}/adam_v"] = v.path
    return names


def test_bert_like_job_runs_as_written_under_tf1(tmp_path):
    """The model_fn (warm start, dropout, its Adam with weight decay, its own step increment) under
    a plain MonitoredTrainingSession; its eval spec converts to eval_metric_ops that run."""
    init = bert_like.pretrained_checkpoint(str(tmp_path))
    features, _ = bert_like.data(BATCH)
    model_fn = bert_like.model_fn_builder(init, RATE, TOTAL_STEPS, WARMUP_STEPS)
    with tf.Graph().as_default():
        step = V1.train.get_or_create_global_step()
        V1.set_random_seed(SEED)
        spec = model_fn({k: tf.constant(v) for k, v in features.items()}, None, "train", {})
        assert isinstance(spec, TPUEstimatorSpec)
        word = next(v for v in V1.global_variables() if v.op.name == "bert/embeddings/word_embeddings")
        slots = sorted(v.op.name for v in V1.global_variables() if v.op.name.endswith(("/adam_m", "/adam_v")))
        with V1.train.MonitoredTrainingSession(checkpoint_dir=None) as session:
            started = session.run(word)
            losses = [session.run([spec.train_op, spec.loss])[1] for _ in range(6)]
            final_step = session.run(step)
    np.testing.assert_array_equal(started, tf.train.load_variable(init, "bert/embeddings/word_embeddings"))
    assert final_step == 6  # the job's own global_step.assign(global_step + 1)
    assert slots == sorted(f"{name}/adam_{kind}" for name in BERT_WEIGHTS for kind in "mv")
    assert all(np.isfinite(losses)) and min(losses[3:]) < losses[0]
    with tf.Graph().as_default():
        V1.train.get_or_create_global_step()
        ops = model_fn({k: tf.constant(v) for k, v in features.items()}, None, "eval", {}).as_estimator_spec()
        with V1.train.MonitoredSession() as session:
            session.run([update for _, update in ops.eval_metric_ops.values()])
            results = session.run({k: value for k, (value, _) in ops.eval_metric_ops.items()})
    assert sorted(results) == ["eval_accuracy", "eval_loss"] and 0 <= results["eval_accuracy"] <= 1


def check_bert(tmp_path, mode, ahead=0, hooks=None, assignment_map=None, per_step=True, model=None):
    init = bert_like.pretrained_checkpoint(str(tmp_path))
    seeds = types.SimpleNamespace(seed=None, seed2=None)  # not a dict: Keras would track a copy
    model = model or bert_twin(seeds, ahead)
    if model.seeds is not seeds:
        model.seeds = seeds
    steps = STEPS if mode == "train" else None
    return check_migration(
        named_loss(bert_like.model_fn_builder(init, RATE, TOTAL_STEPS, WARMUP_STEPS), seeds),
        model,
        hooks or estimator_hooks_factory(last_step=steps),
        bert_like.data(BATCH * 4),
        steps=steps,
        mode=mode,
        batch_size=BATCH,
        names={"total_loss": "loss"},
        values="batch",
        assignment_map=bert_assignment_map(model) if assignment_map is None else assignment_map,
        per_step=per_step,
    )


def assert_rate_race_listed(report):
    """TF1's own race, listed as such with its evidence, never as a difference.

    The rate is computed from the global step, and the same run writes the step with
    `global_step.assign(global_step + 1)`, with no edge ordering the read and the write: TF1
    trained step k at the rate of step k or k + 1, as its scheduler chose.
    """
    races = [r for r in report.nondeterminism if "'global_step'" in r and "reads the variable" in r]
    assert races, report.nondeterminism
    assert all("Assign" in r for r in races)
    assert not any("names maps" in (d.hint or "") for d in report.differences)


def test_check_migration_bert_like_train(tmp_path):
    """The twin as the job means it (the rate of step k at step k): one of the orders TF1 allowed."""
    report = check_bert(tmp_path, "train")
    report.assert_ok()
    assert_rate_race_listed(report)
    assert report.per_step_steps == STEPS


@pytest.mark.slow
def test_check_migration_bert_like_train_in_the_other_order(tmp_path):
    """The twin with the rate one step ahead: the other order TF1 allowed, ok too, step by step as
    well (the per-step comparison runs TF1's step in the order the free-running one matched)."""
    report = check_bert(tmp_path, "train", ahead=1)
    report.assert_ok()
    assert_rate_race_listed(report)
    assert report.per_step_steps == STEPS
    assert all("matched 'read after write'" in r for r in report.nondeterminism), report.nondeterminism


def test_check_migration_bert_like_eval(tmp_path):
    check_bert(tmp_path, "eval").assert_ok()


@pytest.mark.slow
def test_check_migration_proposes_the_slot_map_once_and_compares_checkpoints_through_it(tmp_path):
    """The check proposes, once and as code, the assignment_map of the slots it cannot match by name
    (`<variable>/adam_m` by its variable, kind and shape); with it, the slots are restored and the
    checkpoints a CheckpointSaverHook wrote compare by TF1 name."""

    def hooks():
        return [*estimator_hooks_factory(last_step=4)(), V1.train.CheckpointSaverHook("model_dir", save_steps=2)]

    def check(model, assignment_map):
        # the names are the point here; the train test above compares each step
        return check_bert(tmp_path, "train", hooks=hooks, assignment_map=assignment_map, per_step=False, model=model)

    model = bert_twin(None)
    weights = bert_assignment_map(model, slots=False)
    first = check(model, weights)
    # Said once, as the cause of what the per-step comparison could not compare.
    proposed = [n for n in [first.cause or "", *first.notes] if "slot_map = {" in n]
    assert len(proposed) == 1 and proposed[0] == first.cause, first.notes
    assert not any("keep their values" in n for n in first.notes), first.notes
    code = proposed[0][proposed[0].index("slot_map = ") :]
    slot_map = ast.literal_eval(code[len("slot_map = ") : code.index("}") + 1])
    assert len(slot_map) == 2 * len(model.trainable_weights)
    for theirs, mine in slot_map.items():
        variable, kind = theirs.rsplit("/", 1)
        assert kind in ("adam_m", "adam_v") and mine.endswith(f"{keras_name(variable)}_{kind}"), (theirs, mine)
    # Without it, the Keras side's checkpoints hold the slots under Keras's names: a difference.
    assert any(d.key.endswith(" names") and d.key.startswith("checkpoint") for d in first.differences), first
    second = check(bert_twin(None), {**weights, **slot_map})
    second.assert_ok()
    assert second.cause is None
    assert not any("slot_map" in n or "keep their values" in n for n in second.notes), second.notes
    assert second.compared["3 CheckpointSaverHook"]["checkpoints"] > 0


# --- The MNIST-TPU-shaped job and its Keras twin. ---


class MnistLikeTwin(keras.Model):
    """The job's network in Keras; its dropout draws the TF1 graph's mask."""

    def __init__(self, seeds):
        super().__init__(name="mnist_twin")
        self.seeds = seeds
        self.conv = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="conv2d")
        self.conv_1 = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="conv2d_1")
        self.pool = keras.layers.MaxPooling2D(2, 2, padding="same")
        self.dense = keras.layers.Dense(32, activation="relu", name="dense")
        self.dense_1 = keras.layers.Dense(mnist_like.CLASSES, name="dense_1")

    def call(self, images, training=False):
        y = self.pool(self.conv_1(self.pool(self.conv(images / 255.0))))
        y = self.dense(tf.reshape(y, [tf.shape(y)[0], -1]))
        if training:
            y = tf1_dropout(y, self.seeds, 0.4)
        return self.dense_1(y)


def mnist_twin(seeds):
    model = MnistLikeTwin(seeds)
    model(mnist_like.data(BATCH)[0])
    rate = keras.optimizers.schedules.ExponentialDecay(mnist_like.RATE, mnist_like.DECAY_STEPS, mnist_like.DECAY)
    model.compile(
        keras.optimizers.SGD(rate),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=1,
    )
    return model


def mnist_pretrained(directory):
    with _legacy_layers():  # the job's tf.compat.v1.layers, as check_migration gives them
        return mnist_like.pretrained_checkpoint(directory)


def test_mnist_like_job_runs_as_written_under_tf1(tmp_path):
    """The model_fn (tf.compat.v1.layers, dropout, exponential decay, minimize's own increment, the
    conv layers warm-started) under a plain MonitoredTrainingSession."""
    warm = mnist_pretrained(str(tmp_path))
    x, y = mnist_like.data(BATCH)
    with tf.Graph().as_default(), _legacy_layers():
        step = V1.train.get_or_create_global_step()
        spec = mnist_like.warm_started(warm)(tf.constant(x), tf.constant(y), "train", {})
        kernel = next(v for v in V1.global_variables() if v.op.name == "conv2d/kernel")
        with V1.train.MonitoredTrainingSession(checkpoint_dir=None) as session:
            started = session.run(kernel)
            losses = [session.run([spec.train_op, spec.loss])[1] for _ in range(4)]
            final_step, trained = session.run([step, kernel])
    np.testing.assert_array_equal(started, tf.train.load_variable(warm, "conv2d/kernel"))
    assert final_step == 4  # minimize(loss, global_step) increments it
    # Its dropout is unseeded here (as a job run without tf_random_seed): the loss is not monotone.
    assert all(np.isfinite(losses)) and not np.array_equal(trained, started)


def check_mnist(tmp_path, mode):
    warm = mnist_pretrained(str(tmp_path))
    seeds = types.SimpleNamespace(seed=None, seed2=None)
    steps = STEPS if mode == "train" else None
    return check_migration(
        named_loss(mnist_like.warm_started(warm), seeds),
        mnist_twin(seeds),
        estimator_hooks_factory(last_step=steps),
        mnist_like.data(BATCH * 4),
        steps=steps,
        mode=mode,
        batch_size=BATCH,
        names={"total_loss": "loss"},
        values="batch",
    )


def test_check_migration_mnist_like_train(tmp_path):
    check_mnist(tmp_path, "train").assert_ok()


def test_check_migration_mnist_like_eval(tmp_path):
    check_mnist(tmp_path, "eval").assert_ok()
