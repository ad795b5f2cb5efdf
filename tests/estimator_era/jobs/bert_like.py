"""A BERT-classifier-shaped Estimator job, written for this project's tests.

Modelled on google-research/bert's `run_classifier.py` (its `model_fn_builder`), with the
optimizer of its `optimization.py` and the variable scopes of its `modeling.py`. It reproduces
the behaviours of that job that matter to `check_migration`, in code of its own (none of theirs):

- an encoder under the `bert/` scope (embeddings, layer norm, one feed-forward block, a tanh
  pooler), warm-started from a pretrained checkpoint with `init_from_checkpoint`;
- the classifier head's `output_weights`/`output_bias` at the root scope, and a dropout on the
  pooled output in training (keep 0.9), a stateful random op seeded from the graph's seed;
- a `tf.compat.v1.train.Optimizer` subclass doing Adam without bias correction and with
  decoupled weight decay (none for LayerNorm and bias variables), whose slots are variables
  named `<variable>/adam_m` and `<variable>/adam_v`; gradients clipped to global norm 1;
- the learning rate computed from the global step: a linear warmup, then a linear
  (polynomial, power 1) decay to 0;
- `train_op = tf.group(update, global_step.assign(global_step + 1))`: the optimizer does not
  increment the step, and nothing orders the rate's read of the step before that write (the race
  TF1 let the scheduler decide);
- a spec with `TPUEstimatorSpec`'s fields, `eval_metrics` as `(metric_fn, tensors)` with
  `tf.compat.v1.metrics` (accuracy, mean loss).
"""

from __future__ import annotations

import os
import re

import numpy as np
import tensorflow as tf

from hooks2callbacks._estimator import TPUEstimatorSpec

V1 = tf.compat.v1

VOCAB, HIDDEN, INNER, LENGTH, LABELS = 30, 16, 32, 12, 3
KEEP = 0.9  # the classifier's dropout keeps 0.9 of the pooled output
NO_DECAY = ("LayerNorm", "bias")


def _weight(name, shape, stddev=0.02):
    return V1.get_variable(name, shape, initializer=V1.truncated_normal_initializer(stddev=stddev))


def _zeros(name, shape):
    return V1.get_variable(name, shape, initializer=V1.zeros_initializer())


def _normalized(x, scope):
    """Layer normalisation over the last axis, with `beta` and `gamma` in `scope` (epsilon 1e-12)."""
    with V1.variable_scope(scope):
        beta = _zeros("beta", [HIDDEN])
        gamma = V1.get_variable("gamma", [HIDDEN], initializer=V1.ones_initializer())
    mean, variance = tf.nn.moments(x, [-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta


def _affine(x, scope, inputs, units):
    with V1.variable_scope(scope):
        return tf.matmul(x, _weight("kernel", [inputs, units])) + _zeros("bias", [units])


def gelu(x):
    """GELU's tanh form."""
    return 0.5 * x * (1.0 + tf.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x * x * x)))


def encoder(input_ids, input_mask):
    """The `bert/` scope: token and position embeddings, layer norm, one residual block, a tanh pooler.

    Returns:
        The pooled output, [batch, HIDDEN].
    """
    with V1.variable_scope("bert"):
        with V1.variable_scope("embeddings"):
            tokens = tf.gather(_weight("word_embeddings", [VOCAB, HIDDEN]), input_ids)
            positions = _weight("position_embeddings", [LENGTH, HIDDEN])
        x = _normalized(tokens + positions[None], "embeddings/LayerNorm")
        flat = tf.reshape(x, [-1, HIDDEN])
        with V1.variable_scope("encoder"):
            inner = gelu(_affine(flat, "intermediate", HIDDEN, INNER))
            flat = _normalized(_affine(inner, "output", INNER, HIDDEN) + flat, "output/LayerNorm")
        x = tf.reshape(flat, [-1, LENGTH, HIDDEN])
        mask = tf.cast(input_mask, tf.float32)[:, :, None]
        mean = tf.reduce_sum(x * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
        return tf.tanh(_affine(mean, "pooler", HIDDEN, HIDDEN))


def warmup_then_decay(global_step, rate, total_steps, warmup_steps):
    """The rate at the step: `rate * step / warmup` during the warmup, then linear decay to 0 at `total_steps`."""
    step = tf.cast(global_step, tf.float32)
    decayed = V1.train.polynomial_decay(rate, global_step, total_steps, end_learning_rate=0.0, power=1.0)
    warming = tf.cast(step < warmup_steps, tf.float32)
    return warming * (rate * step / float(warmup_steps)) + (1.0 - warming) * decayed


class DecoupledWeightDecayAdam(V1.train.Optimizer):
    """Adam without bias correction, plus `weight_decay * variable` in each update (not in the gradient).

    Its slots are plain variables beside each trained one, `<variable>/adam_m` and `<variable>/adam_v`.
    `apply_gradients` leaves the global step alone (the job increments it itself).
    """

    def __init__(self, learning_rate, weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6, no_decay=NO_DECAY):
        super().__init__(use_locking=False, name="DecoupledWeightDecayAdam")
        self.rate, self.weight_decay = learning_rate, weight_decay
        self.beta1, self.beta2, self.epsilon, self.no_decay = beta1, beta2, epsilon, no_decay

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        del global_step, name  # the job increments the step itself
        ops = []
        for gradient, variable in grads_and_vars:
            if gradient is None:
                continue
            gradient = tf.convert_to_tensor(gradient)  # the embedding's IndexedSlices, dense
            base = variable.op.name
            slots = [
                V1.get_variable(
                    f"{base}/adam_{kind}",
                    variable.shape,
                    tf.float32,
                    initializer=V1.zeros_initializer(),
                    trainable=False,
                )
                for kind in ("m", "v")
            ]
            m = self.beta1 * slots[0] + (1.0 - self.beta1) * gradient
            v = self.beta2 * slots[1] + (1.0 - self.beta2) * tf.square(gradient)
            step = m / (tf.sqrt(v) + self.epsilon)
            if not any(re.search(pattern, base) for pattern in self.no_decay):
                step += self.weight_decay * variable
            ops += [variable.assign(variable - self.rate * step), slots[0].assign(m), slots[1].assign(v)]
        return tf.group(*ops)


def train_op_for(loss, rate, total_steps, warmup_steps):
    """The job's training op: the scheduled rate, clipped gradients, the update, then the step's own increment."""
    global_step = V1.train.get_or_create_global_step()
    optimizer = DecoupledWeightDecayAdam(warmup_then_decay(global_step, rate, total_steps, warmup_steps))
    variables = V1.trainable_variables()
    gradients, _ = tf.clip_by_global_norm(tf.gradients(loss, variables), clip_norm=1.0)
    update = optimizer.apply_gradients(zip(gradients, variables, strict=True), global_step=global_step)
    # Not ordered after the rate's read of the step: the race TF1 left to its scheduler.
    return tf.group(update, global_step.assign(global_step + 1))


def model_fn_builder(init_checkpoint, rate, total_steps, warmup_steps):
    """The job's model_fn: warm start of `bert/`, the classifier head, train or eval."""

    def model_fn(features, labels, mode, params):
        del labels, params  # the labels are features["label_ids"], as the job's input_fn gave them
        training = mode == "train"
        pooled = encoder(features["input_ids"], features["input_mask"])
        if training:
            pooled = V1.nn.dropout(pooled, rate=1.0 - KEEP)
        weights = _weight("output_weights", [LABELS, HIDDEN])
        bias = _zeros("output_bias", [LABELS])
        logits = tf.matmul(pooled, weights, transpose_b=True) + bias
        log_probs = tf.nn.log_softmax(logits)
        label_ids = features["label_ids"]
        per_example = -tf.reduce_sum(tf.one_hot(label_ids, LABELS) * log_probs, axis=-1)
        loss = tf.reduce_mean(per_example)
        if init_checkpoint:
            V1.train.init_from_checkpoint(init_checkpoint, {"bert/": "bert/"})
        if training:
            return TPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op_for(loss, rate, total_steps, warmup_steps))

        def metric_fn(per_example, label_ids, logits):
            predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
            return {
                "eval_accuracy": V1.metrics.accuracy(labels=label_ids, predictions=predicted),
                "eval_loss": V1.metrics.mean(values=per_example),
            }

        return TPUEstimatorSpec(mode=mode, loss=loss, eval_metrics=(metric_fn, [per_example, label_ids, logits]))

    return model_fn


def pretrained_checkpoint(directory, seed=1):
    """A pretrained encoder's checkpoint (the `bert/` scope only), freshly initialised and saved."""
    with tf.Graph().as_default():
        V1.set_random_seed(seed)
        encoder(tf.zeros([1, LENGTH], tf.int32), tf.ones([1, LENGTH], tf.int32))
        with V1.Session() as session:
            session.run(V1.global_variables_initializer())
            return V1.train.Saver().save(session, os.path.join(directory, "pretrained.ckpt"))


def data(n, seed=2):
    """Generated features (as the job's input_fn parsed them) and labels."""
    rng = np.random.RandomState(seed)
    lengths = rng.randint(LENGTH // 2, LENGTH + 1, n)
    mask = (np.arange(LENGTH)[None, :] < lengths[:, None]).astype(np.int32)
    features = {
        "input_ids": (rng.randint(1, VOCAB, (n, LENGTH)) * mask).astype(np.int32),
        "input_mask": mask,
        "label_ids": rng.randint(0, LABELS, n).astype(np.int32),
    }
    return features, features["label_ids"]
