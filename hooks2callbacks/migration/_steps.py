"""The per-step comparison: each train step of both sides from the same weights, TF1's of that step.

The free-running comparison (the hooks' record) lets both sides train on their
own: after a few steps float order alone (another summation order, another
fused kernel) has moved the weights a few ulps apart, and the difference grows
with each step. A real difference (a rate off by 1%, a batch norm that moves
its statistics otherwise) is then hard to tell from that drift. So, in train
mode, the check also runs each step from the same start:

    TF1, without hooks, from the same initial checkpoint:
        for each step k: its variables (in memory); run (loss, train_op)
        (the train op's own races in the order the Keras side is judged by: read before write)
    Keras, for each step k:
        restore_tf1_values(model, variables k)       # as restore_tf1_checkpoint: weights, slots, step
        loss = model.fit(batch k)                     # one step, its data as fit gives it: (x, y)
        compare loss with TF1's step k, and each variable with TF1's after step k

Nothing compounds: each step starts from TF1's own weights, so float order
gives differences of a few ulps, and a real difference shows at its first step
with tight tolerances. The free-running differences that stay within the drift
tolerances, before the first step at which this comparison parted, are drift
(`MigrationReport.drift`), not the verdict.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from hooks2callbacks._flavours import is_tf_keras
from hooks2callbacks._keras_state import optimizer_of, write_variable
from hooks2callbacks._model import saved_variables
from hooks2callbacks._seams import keras3_train_batch
from hooks2callbacks._tf1_names import optimizer_variables
from hooks2callbacks._tf1_restore import restore_tf1_values
from hooks2callbacks.migration._races import RaceWatch
from hooks2callbacks.migration._report import Difference
from hooks2callbacks.migration._tf1 import _Tf1Run

PER_STEP = "(per step)"
# What Keras keeps in other variables than TF1 did, and compares elsewhere (the step) or not at all.
_NOT_WEIGHTS = ("global_step", "learning_rate", "beta1_power", "beta2_power")


def per_step(
    tf1_run: _Tf1Run,
    keras_model: Any,
    prefix: str,
    steps: int,
    assignment_map: Mapping[str, str] | None,
    compare: Any,
    order: int = 0,
    start: list[Any] | None = None,
) -> tuple[list[Difference], int]:
    """Each of the first `steps` train steps, from TF1's weights of that step, on both sides.

    Args:
        tf1_run: A fresh TF1 graph of the model_fn in train mode (not run yet).
        keras_model: The Keras model (its weights are overwritten step by step).
        prefix: The initial checkpoint both sides start from.
        steps: How many steps to compare.
        assignment_map: As `check_migration`'s.
        compare: The `_Compare` with the per-step tolerances.
        order: Where the train op itself raced (a rate read from the step the same
            run writes), the order to run TF1's step in: the one the free-running
            comparison matched (an index of `_races.ORDERS`).
        start: The Keras optimizer's variables as they were before the free-running
            run (`optimizer_state`), written back before step 0: where the restore
            cannot reach the optimizer's state, step 0 still starts from the same
            (initial) state on both sides.

    Returns:
        The differences, at most one per step and variable (hook `"(per step)"`),
        and the number of steps compared.
    """
    graph = tf1_run.graph
    with graph.as_default():
        watch = RaceWatch(graph, tf1_run.fetches)
        watch.order(watch.run_races(), order)
        v1 = tf.compat.v1
        saved = {v.op.name: v for v in v1.global_variables()}  # what tf1_run.saver saves, by the same names
        init = [v1.global_variables_initializer(), v1.local_variables_initializer()]
        with v1.Session(graph=graph) as session:
            # The global step first, as in _Tf1Run.save_initial: the model_fn's initializers (a warm
            # start's) were built under the dependency on its read.
            session.run(tf1_run.global_step.initializer)
            session.run(init)
            tf1_run.saver.restore(session, prefix)
            # before[k]: TF1's variables before step k (the state after step k - 1).
            before, losses, after = [session.run(saved)], [], []
            for _ in range(steps):
                try:
                    loss, _ = session.run([tf1_run.loss, tf1_run.fetches])
                except tf.errors.OutOfRangeError:
                    break
                losses.append(loss)
                after.append(session.run(saved))
                before.append(after[-1])
    found: list[Difference] = []
    for k in range(len(losses)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the free-running start already said what a restore leaves
            restored = restore_tf1_values(keras_model, before[k], assignment_map, f"TF1's variables before step {k}")
        if k == 0 and start is not None:
            variables = optimizer_variables(optimizer_of(keras_model))
            for variable, value in zip(variables, start, strict=True):
                write_variable(variable, value, keras_model)
        keras_loss = np.asarray(train_one_step(keras_model, *tf1_run.batches[k]), dtype=np.asarray(losses[k]).dtype)
        if compare.value(np.asarray(losses[k]), keras_loss) is not None:
            found.append(Difference(PER_STEP, "train step", k, "loss", losses[k], keras_loss, "value"))
        for variable in saved_variables(keras_model)[0]:
            name = restored.restored.get(variable.name, variable.name)
            if name in _NOT_WEIGHTS or name not in after[k]:
                continue
            a, b = np.asarray(after[k][name]), np.asarray(variable.read())
            kind = compare.value(a, b)
            if kind is not None:
                found.append(Difference(PER_STEP, "train step", k, f"variable {name}", a, b, kind))
    return found, len(losses)


def train_one_step(model: Any, features: Any, labels: Any) -> Any:
    """One train step of `model` on one batch, its `train_step` called as `fit` calls it; the step's loss.

    `fit` hands the step `(x, y)` when there are no sample weights; Keras 3's
    `train_on_batch` hands it `(x, y, None)`, which keras.io's guide step
    ("Customizing what happens in fit()": `x, y = data`) cannot unpack. tf_keras's
    `train_on_batch` hands `(x, y)`, as its `fit`. The metrics start afresh, so the
    loss is this batch's.
    """
    if is_tf_keras(model):
        model.reset_metrics()
        return model.train_on_batch(features, labels, return_dict=True)["loss"]
    logs = keras3_train_batch(model, features, labels)
    if logs is not None:
        return np.asarray(logs["loss"])
    # Another backend: a fit of one batch and one epoch hands the step what fit hands it.
    size = len(tf.nest.flatten(features)[0])
    history = model.fit(features, labels, batch_size=size, epochs=1, shuffle=False, verbose=0)
    return history.history["loss"][-1]


def optimizer_state(model: Any) -> list[Any] | None:
    """The values of the model's optimizer's variables (None without an optimizer), to write back later."""
    optimizer = optimizer_of(model)
    if optimizer is None:
        return None
    with tf.init_scope():
        return [np.array(v) for v in optimizer_variables(optimizer)]
