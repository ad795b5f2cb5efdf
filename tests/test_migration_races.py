"""check_migration and TF1's own nondeterminism: a fetch that reads a variable the same run writes, unordered."""

from __future__ import annotations

import keras
import tensorflow as tf
from test_migration import NAMES, V1, X, Y, keras_twin, model_fn, under_keras

from hooks2callbacks import check_migration
from hooks2callbacks._estimator import EstimatorSpec
from hooks2callbacks.migration._races import RaceWatch

EVAL_NAMES = {"cross_entropy": "loss", "accuracy/update_op": "accuracy", "accuracy/value": "accuracy"}


def step_and_loss():
    # A user's hook: the global step variable fetched next to the loss, in the run that increments it.
    return [V1.train.LoggingTensorHook({"loss": "cross_entropy:0", "step": V1.train.get_global_step()}, every_n_iter=1)]


def test_the_global_step_fetched_next_to_the_loss_is_ok_in_train_mode_and_listed_as_tf1s_own():
    report = check_migration(model_fn, keras_twin(), step_and_loss, (X, Y), steps=6, names=NAMES)
    assert report.ok, str(report)
    (race,) = report.nondeterminism
    assert "results['step']" in race and "'global_step:0'" in race and "'global_step'" in race
    assert "AssignAdd" in race  # the write: the optimizer's increment
    assert "matched 'read before write' at every step" in race
    assert "TF1's own nondeterminism:" in str(report)


def test_the_global_step_fetched_next_to_the_loss_is_ok_in_eval_mode():
    # An eval run writes no global step: nothing to race with, and nothing listed.
    report = check_migration(
        model_fn, keras_twin(), step_and_loss, (X[:128], Y[:128]), steps=None, mode="eval", names=NAMES
    )
    assert report.ok, str(report)
    assert report.nondeterminism == []


def test_a_metric_value_fetched_with_its_update_op_in_eval_is_ok_and_listed_as_tf1s_own():
    def hooks():
        return [V1.train.LoggingTensorHook({"acc": "accuracy/value:0"}, every_n_iter=1)]

    report = check_migration(
        model_fn, keras_twin(), hooks, (X[:128], Y[:128]), steps=None, mode="eval", names=EVAL_NAMES
    )
    assert report.ok, str(report)
    (race,) = report.nondeterminism
    assert "'accuracy/value:0'" in race and "accuracy/" in race and "AssignAdd" in race
    assert "matched 'read after write' at every step" in race


def test_a_keras_value_that_neither_order_gives_is_a_difference_with_the_races_hint_not_the_names_map():
    def hooks():
        step = V1.train.get_global_step()
        # TF1: the variable itself (racing with its increment); Keras: a step 5 off, which no order gives.
        return [V1.train.LoggingTensorHook({"step": step + 5 if under_keras() else step}, every_n_iter=1)]

    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=3, names=NAMES)
    found = [d for d in report.differences if d.key == "results['step']"]
    assert [d.step for d in found] == [0, 1, 2], str(report)
    assert all("TF1's own nondeterminism" in d.hint and "names maps" not in d.hint for d in found)
    assert "matched neither order" in report.nondeterminism[0]


def test_a_read_the_graph_orders_before_the_write_is_no_race():
    # The check's own step read (the stale step hooks are given) feeds the train op: ordered, not listed.
    def hooks():
        if under_keras():
            return [V1.train.LoggingTensorHook({"step": V1.train.get_global_step()}, every_n_iter=1)]
        (read,) = tf.compat.v1.get_collection("global_step_read_op_cache")
        return [V1.train.LoggingTensorHook({"step": read}, every_n_iter=1)]

    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=3, names=NAMES)
    assert report.ok, str(report)
    assert report.nondeterminism == []


def bert_like_model_fn(features, labels, mode, params):
    """A rate that reads the global step its own train op increments, as google-research/bert's optimization.py.

    `create_optimizer` there groups `global_step.assign(global_step + 1)` with the update, so nothing orders
    the rate's read of the step before or after the increment.
    """
    hidden = V1.layers.dense(features, 16, activation=tf.nn.relu, name="dense")
    logits = V1.layers.dense(hidden, 3, name="dense_1")
    loss = tf.identity(V1.losses.sparse_softmax_cross_entropy(labels, logits), name="cross_entropy")
    global_step = V1.train.get_or_create_global_step()
    rate = V1.train.polynomial_decay(0.5, global_step, 10, end_learning_rate=0.0, power=1.0)
    train_op = V1.train.GradientDescentOptimizer(rate).minimize(loss)
    return EstimatorSpec(mode, loss=loss, train_op=tf.group(train_op, [global_step.assign(global_step + 1)]))


def test_a_rate_that_reads_the_step_its_own_optimizer_increments_is_ok_and_listed_as_tf1s_own():
    def hooks():
        return [V1.train.LoggingTensorHook({"loss": "cross_entropy:0"}, every_n_iter=1)]

    schedule = keras.optimizers.schedules.PolynomialDecay(0.5, 10, 0.0, power=1.0)
    report = check_migration(
        bert_like_model_fn, keras_twin(keras.optimizers.SGD(schedule)), hooks, (X, Y), steps=8, names=NAMES
    )
    assert report.ok, str(report)
    (race,) = report.nondeterminism
    assert race.startswith("the train op: its op 'PolynomialDecay/Cast")
    assert "'global_step'" in race and "(Assign)" in race and "matched 'read before write'" in race
    # TF1's two runs, one in each order, part where the rate did: their spread, per hook and key.
    assert list(report.tf1_spread) == [("0 LoggingTensorHook", "results['loss']")], report.tf1_spread
    assert report.tf1_spread["0 LoggingTensorHook", "results['loss']"] > 1e-3  # a rate apart, from step 1 on


def test_an_embedding_lookup_of_a_table_the_run_updates_is_a_race_as_a_read_is():
    # A resource variable is read by ReadVariableOp, and by a gather through its handle (an
    # embedding lookup: ResourceGather): a hook's lookup of rows the train op updates races too.
    with tf.Graph().as_default() as graph:
        table = V1.get_variable("table", [10, 4], use_resource=True)
        loss = tf.reduce_sum(tf.nn.embedding_lookup(table, [1, 2, 2]))
        train_op = V1.train.GradientDescentOptimizer(0.1).minimize(loss)
        looked_up = tf.nn.embedding_lookup(table, [2, 3])  # a hook's fetch: not ordered with the update
        read = table.read_value()  # the ReadVariableOp the check already knew
        after = tf.nn.embedding_lookup(table, [2])
        with tf.control_dependencies([train_op]):
            ordered = tf.nn.embedding_lookup(table, [2]) + 0.0  # ordered after the write: no race
        watch = RaceWatch(graph, train_op)
        assert looked_up.op.type == "ResourceGather" or "ResourceGather" in [i.op.type for i in looked_up.op.inputs]
        for tensor in (looked_up, read, after):
            variable, write = watch.race(tensor)
            assert variable == "table" and ("ResourceScatter" in write or "ResourceSparseApply" in write), write
            assert watch.pure(tensor)  # evaluated alone in either order, without side effects
        assert watch.race(ordered) is None


def test_the_races_of_the_train_op_come_in_the_order_of_their_names():
    # BERT's create_optimizer reads the global step twice (its decay and its warmup) in the run that
    # increments it: the report lists each race, in one order on every run (a set's order follows the
    # ops' addresses, and gave one report two texts). Twenty reads, made in reverse name order.
    with tf.Graph().as_default() as graph:
        step = V1.train.get_or_create_global_step()
        weight = V1.get_variable("w", initializer=1.0)
        reads = [tf.cast(step, tf.float32, name=f"rate_{i:02d}") for i in reversed(range(20))]
        train_op = tf.group(V1.assign_sub(weight, tf.add_n(reads) * weight), V1.assign_add(step, 1))
        races = RaceWatch(graph, train_op).run_races()
    assert [read.name.split("/")[0] for read, _, _ in races] == [f"rate_{i:02d}" for i in range(20)]
