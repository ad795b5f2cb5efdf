"""check_migration on tensorflow/models' REAL official r1 ResNet CIFAR-10 job, run unchanged.

The job is imported from the PyPI package tf-models-official 2.1.0.dev2 (a test extra), never
copied: `official.r1.resnet.resnet_run_loop.resnet_model_fn` builds `cifar10_main.Cifar10Model`
(`resnet_model.Model`: `tf.compat.v1.layers` convolutions and fused batch norm), its loss with
weight decay, the job's piecewise rate (`resnet_run_loop.learning_rate_with_decay`), TF1's
`MomentumOptimizer`, the tensors its logging hook asks for (`learning_rate`, `cross_entropy`,
`train_accuracy`), its summaries and its `eval_metric_ops` (`accuracy`, `accuracy_top_5`). Its
flags are defined by `cifar10_main.define_cifar_flags()` and parsed at their defaults, as its own
test did; the logging hook is the one its `resnet_main` got from
`official.utils.logs.hooks_helper.get_train_hooks(flags.hooks, ...)`.

What differs from `cifar10_main.cifar10_model_fn`, which the test cannot call as it is (its
schedule is fixed at CIFAR-10's 50,000 images and epochs 91, 136 and 182): the same call of
`resnet_model_fn` with the job's arguments (weight decay 2e-4 on every variable, momentum 0.9, the
decay rates 1, 0.1, 0.01) and a tiny configuration: ResNet-8, channels_last, batches of 8, an epoch
of 3 batches, boundaries at epochs 1 and 2 (steps 3 and 6), the base rate 0.1 (`batch_denom` the
batch size). `as_estimator_ran` does, in the graph, what Estimator did around a `model_fn`:
`WarmStartSettings(checkpoint, vars_to_warm_start='^(?!.*dense)')` as resnet_main passed it (in
train, `tf.compat.v1.train.warm_start` after the model_fn, as `Estimator.train` did), and, in eval,
the restore of a trained checkpoint that `Estimator.evaluate` began with.

The Keras twin is ResNet-8 v1 (the job's `resnet_version` flag defaults to 1), one Keras weight per
TF1 variable, the job's loss (weight decay included), the piecewise schedule, and two pieces that
docs/check-migration.md gives and this test runs as the page has them: TF1's fused batch norm ("Batch
norm as TF1 had it") and TF1's momentum update ("Momentum as TF1 had it").
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from test_migration_steps import docs_code, docs_tf1_batch_normalization

import hooks2callbacks
from hooks2callbacks import check_migration, estimator_hooks, log_tensor
from hooks2callbacks.migration import side
from hooks2callbacks.migration._tf1 import _legacy_layers

hooks2callbacks.install_estimator_aliases()  # the job says tf.estimator.ModeKeys, tf.estimator.EstimatorSpec
from official.r1.resnet import cifar10_main, resnet_run_loop  # noqa: E402
from official.utils.logs import hooks_helper  # noqa: E402

V1 = tf.compat.v1

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the twin is TensorFlow-backend")

BATCH, SEED, STEPS = 8, 7, 8
RESNET_SIZE, WEIGHT_DECAY, MOMENTUM = 8, 2e-4, 0.9  # cifar10_model_fn's weight decay and momentum
EPOCH_IMAGES, BOUNDARY_EPOCHS, DECAY_RATES = 3 * BATCH, [1, 2], [1, 0.1, 0.01]
NOT_WARM = "^(?!.*dense)"  # resnet_main's vars_to_warm_start: all but the dense layer


def job_flags():
    """The job's absl flags, defined as its own test did (`define_cifar_flags`), parsed at their defaults.

    `resnet_model_fn` reads `flags.FLAGS.enable_lars` and `fp16_implementation`. Defined once per
    process (absl refuses a second definition), and alongside another job's flags in the same
    process: google-research/bert's modules define some of the same names (`data_dir`) at import,
    before or after this, so either side's definition may replace the other's (the two jobs read
    none of them in their model_fns).
    """
    if "resnet_version" not in flags.FLAGS:
        existing = {name: flags.FLAGS[name] for name in flags.FLAGS}
        before = {name: flag.allow_override for name, flag in existing.items()}
        for flag in existing.values():
            flag.allow_override = True
        try:
            cifar10_main.define_cifar_flags()
        finally:
            for name, flag in existing.items():
                flag.allow_override = before[name]
        for module, defined in flags.FLAGS.flags_by_module_dict().items():
            if module.startswith("official."):
                for flag in defined:
                    flag.allow_override = True  # a later module (bert's) may define the same names
    if not flags.FLAGS.is_parsed():
        flags.FLAGS(["test"])
    return flags.FLAGS


def job_model_fn(features, labels, mode, params):
    """The job's `resnet_model_fn`, called as `cifar10_model_fn` calls it, with the tiny schedule."""
    options = job_flags()
    learning_rate_fn = resnet_run_loop.learning_rate_with_decay(
        batch_size=BATCH,
        batch_denom=BATCH,
        num_images=EPOCH_IMAGES,
        boundary_epochs=BOUNDARY_EPOCHS,
        decay_rates=DECAY_RATES,
    )
    return resnet_run_loop.resnet_model_fn(
        features=features,
        labels=labels,
        mode=mode,
        model_class=cifar10_main.Cifar10Model,
        resnet_size=RESNET_SIZE,
        weight_decay=WEIGHT_DECAY,
        learning_rate_fn=learning_rate_fn,
        momentum=MOMENTUM,
        data_format="channels_last",
        resnet_version=int(options.resnet_version),
        loss_scale=1,
        loss_filter_fn=lambda _: True,  # cifar10_model_fn's: weight decay on every variable
        dtype=tf.float32,
        fine_tune=options.fine_tune,
    )


def as_estimator_ran(checkpoint):
    """The job's model_fn with what Estimator did in the graph around it (a wrapper written for this test).

    The graph's seed first (RunConfig's `tf_random_seed`). In train, `Estimator.train` ran
    `warm_start(*WarmStartSettings)` after the model_fn: resnet_main's settings warm-start every
    trainable variable but the dense layer's from the pretrained checkpoint. In eval,
    `Estimator.evaluate` restored the trained checkpoint, every variable (moving statistics too).
    The loss is also named `total_loss` for the hooks (Estimator's own hooks took `spec.loss`).
    """

    def model_fn(features, labels, mode, params):
        V1.set_random_seed(SEED)
        spec = job_model_fn(features, labels, mode, params)
        if mode == "train":
            V1.train.warm_start(checkpoint, vars_to_warm_start=NOT_WARM)
        else:
            V1.train.init_from_checkpoint(checkpoint, {"resnet_model/": "resnet_model/"})
        tf.identity(spec.loss, name="total_loss")
        return spec

    return model_fn


def cifar_data(count, training=True, seed=SEED):
    """`count` CIFAR-10 records (a label byte, then the image depth-major), decoded by the job's own
    `parse_record` (random crop and flip in training, per-image standardization), once, seeded."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, cifar10_main.NUM_CLASSES, count, dtype=np.uint8)
    images = rng.integers(0, 256, (count, 3, 32, 32), dtype=np.uint8)
    tf.random.set_seed(seed)
    parsed = [
        cifar10_main.parse_record(tf.constant(bytes([label]) + image.tobytes()), training, tf.float32)
        for label, image in zip(labels, images, strict=True)
    ]
    return np.stack([p[0].numpy() for p in parsed]), np.array([p[1].numpy() for p in parsed])


def pretrained_checkpoint(directory):
    """The "pretrained" checkpoint resnet_main warm-started from: the same network, other initial
    weights (another graph seed), trained 2 steps by the job itself so its batch norm statistics moved."""
    x, y = cifar_data(BATCH, seed=SEED + 1)
    with tf.Graph().as_default(), _legacy_layers():
        V1.set_random_seed(SEED + 1)
        V1.train.get_or_create_global_step()
        spec = job_model_fn(tf.constant(x), tf.constant(y), "train", {})
        saver = V1.train.Saver([v for v in V1.global_variables() if v.op.name.startswith("resnet_model/")])
        with V1.Session() as session:
            session.run([V1.global_variables_initializer(), V1.local_variables_initializer()])
            session.run(spec.train_op)
            session.run(spec.train_op)
            return saver.save(session, f"{directory}/pretrained/model.ckpt", write_meta_graph=False)


def job_hooks():
    """The job's training hooks as resnet_main made them (`--hooks` defaults to LoggingTensorHook of
    `learning_rate`, `cross_entropy`, `train_accuracy`), logging every step here."""
    return hooks_helper.get_train_hooks(job_flags().hooks, model_dir="model_dir", batch_size=BATCH, every_n_iter=1)


def estimator_train_hooks(last_step):
    """What Estimator.train added to every run (NanTensorHook, the loss line), the job's hooks, the step limit.

    On the Keras side, the tensors the job's model_fn named for its logging hook are built where the
    batch is known (the adapter graph, from the batch's labels and predictions), as the model_fn
    built them: the batch's cross entropy, and the streaming accuracy since the session began.
    """

    def hooks():
        if side() == "keras":
            labels, logits = tf.cast(log_tensor("labels"), tf.int32), log_tensor("predictions")
            tf.identity(V1.losses.sparse_softmax_cross_entropy(labels, logits), name="cross_entropy")
            tf.identity(V1.metrics.accuracy(labels, tf.argmax(logits, axis=1))[1], name="train_accuracy")
        return [
            V1.train.NanTensorHook("total_loss:0"),
            V1.train.LoggingTensorHook({"loss": "total_loss"}, every_n_iter=1),
            *job_hooks(),
            V1.train.StopAtStepHook(last_step=last_step),
        ]

    return hooks


def estimator_eval_hooks():
    """Each batch's loss and the job's two metrics so far (their update ops, by the names the job's
    graph gave them), and what Estimator.evaluate did at the end (its results logged and written)."""
    metrics = {"accuracy": "accuracy/update_op", "accuracy_top_5": "mean/update_op"}
    return [
        V1.train.LoggingTensorHook({"loss": "total_loss", **metrics}, every_n_iter=1),
        *estimator_hooks("model_dir", mode="eval"),
    ]


# --- The job as written, under a plain MonitoredTrainingSession. ---


def test_the_resnet_job_runs_as_written_under_tf1(tmp_path):
    """The model_fn (warm start, fused batch norm, weight decay, its piecewise rate, Momentum, the
    batch norm updates grouped into the train op) under a plain MonitoredTrainingSession."""
    pretrained = pretrained_checkpoint(str(tmp_path))
    x, y = cifar_data(BATCH)
    with tf.Graph().as_default(), _legacy_layers():
        step = V1.train.get_or_create_global_step()
        spec = as_estimator_ran(pretrained)(tf.constant(x), tf.constant(y), "train", {})
        variables = {v.op.name: v for v in V1.global_variables()}
        warm = [n for n in variables if n.startswith("resnet_model/") and not n.endswith("/Momentum")]
        with V1.train.MonitoredTrainingSession(checkpoint_dir=None, hooks=job_hooks()) as session:
            started = session.run({n: variables[n] for n in warm})
            rates, losses = [], []
            for _ in range(STEPS):
                _, loss, rate = session.run([spec.train_op, spec.loss, "learning_rate:0"])
                losses.append(loss)
                rates.append(rate)
            final_step = session.run(step)
            moving = session.run(variables["resnet_model/batch_normalization/moving_variance"])
    trainable = [n for n in warm if not n.endswith(("/moving_mean", "/moving_variance"))]
    assert len(trainable) == 10 + 2 * 10 + 2  # 10 convolutions, 10 batch norms, the dense layer
    for name in trainable:
        value = tf.train.load_variable(pretrained, name)
        if "dense" in name:
            assert not np.array_equal(started[name], value), name  # vars_to_warm_start='^(?!.*dense)'
        else:
            np.testing.assert_array_equal(started[name], value, err_msg=name)
    # A regex warm-starts trainable variables only: the moving statistics start at TF1's 0 and 1.
    np.testing.assert_array_equal(started["resnet_model/batch_normalization/moving_variance"], np.ones(16))
    assert not np.array_equal(moving, np.ones(16))  # the update ops grouped into the train op ran
    assert final_step == STEPS  # apply_gradients(grad_vars, global_step) increments it
    # The piecewise rate of learning_rate_with_decay: 0.1 up to step 3, 0.01 up to step 6, then 0.001.
    np.testing.assert_allclose(rates, [0.1] * 4 + [0.01] * 3 + [0.001], rtol=1e-6)
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


# --- Its Keras twin. ---


def conv_names():
    """The job's variable scopes in the order it makes them (ResNet-8 v1: each block layer has one
    block, whose projection shortcut comes first)."""
    return [f"conv2d_{i}" if i else "conv2d" for i in range(10)], [
        f"batch_normalization_{i}" if i else "batch_normalization" for i in range(10)
    ]


class ResNet8V1(keras.Model):
    """ResNet-8 v1 for CIFAR-10 in Keras, channels_last, its layers named as the job's scopes."""

    def __init__(self, batch_norm):
        super().__init__(name="resnet_twin")
        convs, norms = conv_names()
        sizes = [(3, 16, 1), (1, 16, 1), (3, 16, 1), (3, 16, 1)]
        sizes += [(1, 32, 2), (3, 32, 2), (3, 32, 1), (1, 64, 2), (3, 64, 2), (3, 64, 1)]
        self.convs = [
            keras.layers.Conv2D(filters, kernel, strides, "same" if strides == 1 else "valid", use_bias=False, name=n)
            for n, (kernel, filters, strides) in zip(convs, sizes, strict=True)
        ]
        self.norms = [batch_norm(momentum=0.997, epsilon=1e-5, name=n) for n in norms]
        self.dense = keras.layers.Dense(cifar10_main.NUM_CLASSES, name="dense")

    def conv_norm(self, x, i, training):
        conv = self.convs[i]
        if conv.strides[0] > 1 and conv.kernel_size[0] > 1:  # the job's fixed_padding
            x = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
        return self.norms[i](conv(x), training=training)

    def call(self, images, training=False):
        x = tf.nn.relu(self.conv_norm(images, 0, training))
        for first in (1, 4, 7):  # each block layer's one block: projection, conv, conv
            shortcut = self.conv_norm(x, first, training)
            y = tf.nn.relu(self.conv_norm(x, first + 1, training))
            x = tf.nn.relu(self.conv_norm(y, first + 2, training) + shortcut)
        return self.dense(tf.reduce_mean(x, axis=[1, 2]))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The job's loss: the mean cross entropy plus 2e-4 times the L2 loss of every variable."""
        cross_entropy = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(y, tf.int32), logits=y_pred)
        )
        l2 = tf.add_n([tf.nn.l2_loss(w) for w in self.trainable_weights])
        return cross_entropy + WEIGHT_DECAY * l2


# The optimizer docs/check-migration.md shows under "Momentum as TF1 had it", run as the page gives it.
TF1Momentum = docs_code("Momentum as TF1 had it", "TF1Momentum")


def piecewise_rate():
    """The job's schedule, as a migrating user writes it: 0.1 * batch / batch_denom, times the decay
    rates after each boundary (`int(batches per epoch * epoch)`), the global step compared with `<=`."""
    boundaries = [int(EPOCH_IMAGES / BATCH * epoch) for epoch in BOUNDARY_EPOCHS]
    return keras.optimizers.schedules.PiecewiseConstantDecay(boundaries, [0.1 * rate for rate in DECAY_RATES])


def resnet_twin(batch_norm=None, optimizer=None):
    model = ResNet8V1(batch_norm or docs_tf1_batch_normalization())
    model(np.zeros((1, 32, 32, 3), np.float32))
    model.compile(
        optimizer or TF1Momentum(piecewise_rate(), momentum=MOMENTUM),
        metrics=[
            keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
            keras.metrics.SparseTopKCategoricalAccuracy(5, name="accuracy_top_5"),
        ],
        steps_per_execution=1,
    )
    return model


def assignment_map(model):
    """The TF1 names of the twin's weights (the job's scope `resnet_model/`) and of its optimizer's
    accumulations (TF1's slots `<variable>/Momentum`)."""
    names = {}
    optimizer = model.optimizer
    if isinstance(optimizer, TF1Momentum):
        optimizer.build(model.trainable_variables)
        for weight, accumulation in zip(model.trainable_variables, optimizer.accumulations, strict=True):
            tf1_name = weight.path.removeprefix(f"{model.name}/")  # the model's own scope is not in TF1 names
            names[f"resnet_model/{tf1_name}/Momentum"] = accumulation.path
    names["resnet_model/"] = "/"
    return names


def check_resnet(tmp_path, mode, model=None, per_step=True, batch=BATCH, steps=STEPS):
    pretrained = pretrained_checkpoint(str(tmp_path))
    model = model or resnet_twin()
    train = mode == "train"
    return check_migration(
        as_estimator_ran(pretrained),
        model,
        estimator_train_hooks(steps) if train else estimator_eval_hooks,
        cifar_data(batch * 4, training=train),
        steps=steps if train else None,
        mode=mode,
        batch_size=batch,
        names={"total_loss": "loss"}
        if train
        else {"total_loss": "loss", "accuracy": "accuracy", "accuracy_top_5": "accuracy_top_5"},
        # train: each batch's own values, as the TF1 tensors held them; eval: the default (the loss the
        # batch's, the metrics the aggregates since evaluate() began, as TF1's streaming update ops)
        values="batch" if train else None,
        assignment_map=assignment_map(model),
        per_step=per_step,
    )


def test_check_migration_resnet_train(tmp_path):
    """ok in train: every hook's calls, values and lines (the job's learning_rate, cross_entropy and
    train_accuracy at every step), and each step from TF1's weights, batch norm statistics included."""
    report = check_resnet(tmp_path, "train")
    report.assert_ok()
    assert report.per_step_steps == STEPS
    assert report.nondeterminism == []  # apply_gradients increments the step after the update read the rate
    assert report.compared["2 LoggingTensorHook"]["lines"] == STEPS
    rates = report.values[("2 LoggingTensorHook", "results['learning_rate']")]
    for side_rates in rates.values():
        # the boundaries at steps 3 and 6 are inside the checked steps
        np.testing.assert_allclose([r for _, r in side_rates], [0.1] * 4 + [0.01] * 3 + [0.001], rtol=1e-6)


def test_check_migration_resnet_eval(tmp_path):
    """ok in eval, the job's eval_metric_ops taken by their keys (`accuracy`, `accuracy_top_5`): the
    streaming values at every batch, and Estimator.evaluate's results at the end."""
    report = check_resnet(tmp_path, "eval")
    report.assert_ok()
    # The TF1 eval graph has no optimizer: nothing to say of the Keras optimizer's accumulations.
    assert not any("optimizer" in note for note in report.notes), report.notes
    assert report.compared["0 LoggingTensorHook"]["lines"] == 4  # 4 batches
    writer = report.compared["1 _EvalResultsWriter"]
    assert writer["lines"] == 1  # "Saving dict for global step 0: accuracy = ..., accuracy_top_5 = ..., ..."
    assert writer["summaries"] == 3  # accuracy, accuracy_top_5 and loss


@pytest.mark.slow
def test_keras_sgd_under_the_jobs_schedule_is_found_at_the_steps_the_rate_changes(tmp_path):
    """A twin compiled with Keras's SGD(momentum=0.9) and the same schedule: Keras keeps -rate times
    TF1's accumulation, so the first update at a new rate (steps 4 and 7) still carries the old
    rate's momentum. From the same weights the check finds those two steps and no other; the hooks
    see the same until the loss of step 5, computed from step 4's update; the hint names the cause."""
    sgd = keras.optimizers.SGD(piecewise_rate(), momentum=MOMENTUM)
    report = check_resnet(tmp_path, "train", model=resnet_twin(optimizer=sgd))
    assert not report.ok
    per_step = [d for d in report.differences if d.hook == "(per step)"]
    assert {d.step for d in per_step} == {4, 7}, str(report)
    free = [d for d in report.differences if d.hook == "1 LoggingTensorHook" and d.key == "results['loss']"]
    assert free and free[0].step == 5 and all(d.parted_at == 5 for d in free), str(report)
    assert all("Momentum as TF1 had it" in (d.hint or "") for d in [*per_step, *free])


@pytest.mark.slow
def test_keras_batch_normalization_is_found_on_the_moving_variance_with_its_hint(tmp_path):
    """A twin with Keras's BatchNormalization: TF1's fused batch norm moved the moving variance toward
    the unbiased batch variance. One step apart they differ by (1 - 0.997) * variance / (n - 1), n
    the values per channel: with the job's batches of 8 (n 512 to 8192) that is under the per-step
    tolerance (rtol 1e-5); with batches of 2 (n 128 in the last block layer) it is over it, at step 0."""
    report = check_resnet(
        tmp_path, "train", model=resnet_twin(batch_norm=keras.layers.BatchNormalization), batch=2, steps=1
    )
    assert not report.ok
    found = [d for d in report.differences if d.key.endswith("moving_variance")]
    assert found and all(d.hook == "(per step)" and d.step == 0 for d in found), str(report)
    assert all("unbiased batch variance" in d.hint for d in found)
    for d in found:  # TF1's moves toward the larger, unbiased variance: larger where they differ most
        _, index = d.max_diff
        assert d.tf1[index] > d.keras[index], d
