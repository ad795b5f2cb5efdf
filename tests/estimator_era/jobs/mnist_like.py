"""An MNIST-on-TPU-shaped Estimator job, written for this project's tests.

Modelled on tensorflow/tpu's `models/official/mnist/mnist_tpu.py` (its `model_fn`, run with
`use_tpu=False`). It reproduces the behaviours of that job that matter to `check_migration`, in
code of its own (none of theirs), on 8x8 images:

- a network of `tf.compat.v1.layers` classes (two Conv2D with max pooling, a Dense, a Dropout of
  0.4 in training, the logits' Dense), so that its variables are `conv2d/kernel`, `dense_1/bias`;
- a sparse softmax cross-entropy loss, an exponentially decayed rate, and
  `GradientDescentOptimizer.minimize(loss, global_step)`, which increments the step itself;
- a spec with `TPUEstimatorSpec`'s fields, `eval_metrics` as `(metric_fn, (labels, logits))`
  with `tf.compat.v1.metrics.accuracy`;
- the conv layers warm-started from a checkpoint as Estimator's
  `WarmStartSettings(ckpt, vars_to_warm_start="conv2d.*")` did: `tf.compat.v1.train.warm_start`
  after the model_fn built the graph (see `warm_started`).

Its layers are looked up as `tf.compat.v1.layers` when the model_fn runs: under Keras 3 that
needs tf_keras's legacy layers there, which `check_migration` puts in place.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from hooks2callbacks._estimator import TPUEstimatorSpec

V1 = tf.compat.v1

SIDE, CLASSES = 8, 10
RATE, DECAY_STEPS, DECAY = 0.05, 4, 0.5


def network(images, training):
    """The logits of `images` ([batch, SIDE, SIDE, 1], values 0 to 255)."""
    layers = V1.layers
    x = images / 255.0
    for filters in (8, 8):
        x = layers.Conv2D(filters, 3, padding="same", activation=tf.nn.relu)(x)
        x = layers.MaxPooling2D(2, 2, padding="same")(x)
    x = layers.Dense(32, activation=tf.nn.relu)(layers.Flatten()(x))
    x = layers.Dropout(0.4)(x, training=training)
    return layers.Dense(CLASSES)(x)


def model_fn(features, labels, mode, params):
    """The job's model_fn: train with SGD on the decayed rate, or eval with its accuracy."""
    del params
    logits = network(features, training=mode == "train")
    loss = V1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == "train":
        global_step = V1.train.get_or_create_global_step()
        rate = V1.train.exponential_decay(RATE, global_step, DECAY_STEPS, DECAY)
        train_op = V1.train.GradientDescentOptimizer(rate).minimize(loss, global_step)
        return TPUEstimatorSpec(mode=mode, loss=loss, train_op=train_op)

    def metric_fn(labels, logits):
        predicted = tf.argmax(logits, axis=1, output_type=tf.int32)
        return {"accuracy": V1.metrics.accuracy(labels=labels, predictions=predicted)}

    return TPUEstimatorSpec(mode=mode, loss=loss, eval_metrics=(metric_fn, (labels, logits)))


def warm_started(warm_start_from):
    """`model_fn` as Estimator ran it with `WarmStartSettings(warm_start_from, vars_to_warm_start="conv2d.*")`."""

    def warm(features, labels, mode, params):
        spec = model_fn(features, labels, mode, params)
        V1.train.warm_start(warm_start_from, vars_to_warm_start="conv2d.*")
        return spec

    return warm


def pretrained_checkpoint(directory, seed=4):
    """The warm start's checkpoint: the job's own network, freshly initialised and saved."""
    with tf.Graph().as_default():
        V1.set_random_seed(seed)
        network(tf.zeros([1, SIDE, SIDE, 1]), training=False)
        with V1.Session() as session:
            session.run(V1.global_variables_initializer())
            return V1.train.Saver().save(session, os.path.join(directory, "pretrained.ckpt"))


def data(n, seed=3):
    rng = np.random.RandomState(seed)
    return rng.uniform(0, 255, (n, SIDE, SIDE, 1)).astype(np.float32), rng.randint(0, CLASSES, n).astype(np.int32)
