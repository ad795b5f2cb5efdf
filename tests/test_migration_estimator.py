"""check_migration with Estimator's own hooks (estimator_hooks), the side a factory runs on, and metric keys."""

from __future__ import annotations

from test_migration import NAMES, V1, X, Y, keras_twin, model_fn

from hooks2callbacks import check_migration, estimator_hooks, log_tensor
from hooks2callbacks._estimator import EstimatorSpec
from hooks2callbacks.migration import side


def test_estimator_hooks_in_a_factory_run_on_both_sides():
    def hooks():
        return estimator_hooks("model_dir", save_checkpoints_steps=4, save_summary_steps=2, log_step_count_steps=3)

    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=8, names=NAMES)
    assert report.ok, str(report)
    counts = report.compared
    assert counts["1 CheckpointSaverHook"]["checkpoints"] == 3  # 0, 4, 8
    assert counts["3 SummarySaverHook"]["summaries"] == 4  # the loss summary Estimator added, steps 1, 3, 5, 7
    assert counts["5 LoggingTensorHook"]["lines"] == 3
    # Estimator's "loss = ..., step = ..." line fetched the global step variable next to the train op.
    (race,) = report.nondeterminism
    assert race.startswith("5 LoggingTensorHook results['step']") and "'global_step'" in race


def summaries_model_fn(features, labels, mode, params):
    """The model_fn with summaries of its own, as official r1 ResNet's wrote its cross entropy and others
    their logits' histogram: Estimator's SummarySaverHook merged them with its loss summary.

    (Not its streaming accuracy: a tf.metrics update runs in TF1 only in the runs that fetch it, so
    a summary of it every other step is the accuracy of those steps' batches, where Keras's
    `accuracy` is every batch's.)"""
    spec = model_fn(features, labels, mode, params)
    graph = V1.get_default_graph()
    V1.summary.scalar("batch_loss", graph.get_tensor_by_name("cross_entropy:0"))
    V1.summary.histogram("logits", graph.get_tensor_by_name("dense_1/BiasAdd:0"))
    return spec


def test_summaries_in_the_model_fn_are_hinted_with_the_way_out_and_ok_once_built_on_the_keras_side():
    def estimator_only():
        return estimator_hooks("model_dir", save_summary_steps=2, log_step_count_steps=None)

    report = check_migration(summaries_model_fn, keras_twin(), estimator_only, (X, Y), steps=6, names=NAMES)
    assert report.differences and all(d.hook == "2 SummarySaverHook" for d in report.differences), str(report)
    missing = {d.key.split("'")[1] for d in report.differences if d.kind == "missing"}
    assert missing == {"batch_loss", "logits"}, str(report)
    hints = {d.key: d.hint or "" for d in report.differences}
    assert all("the TF1 graph's own summary ops" in hint for hint in hints.values()), str(report)
    assert "tf.compat.v1.summary.histogram('logits', log_tensor(...))" in hints["summary 'logits' (histo)"]

    def built_on_both_sides():
        if side() == "keras":  # the model_fn's summaries, from the Keras logs that hold their values
            V1.summary.scalar("batch_loss", log_tensor("loss"))
            V1.summary.histogram("logits", log_tensor("predictions"))
        return estimator_only()

    report = check_migration(summaries_model_fn, keras_twin(), built_on_both_sides, (X, Y), steps=6, names=NAMES)
    assert report.ok, str(report)
    assert report.compared["2 SummarySaverHook"]["summaries"] == 9  # loss, batch_loss, logits at steps 1, 3, 5


def test_a_factory_asks_which_side_it_is_on():
    seen = []

    def hooks():
        seen.append(side())
        loss = "loss" if side() == "keras" else "cross_entropy:0"  # a name each side knows
        return [V1.train.LoggingTensorHook({"loss": loss}, every_n_iter=1)]

    report = check_migration(model_fn, keras_twin(), hooks, (X, Y), steps=3)
    assert report.ok, str(report)
    assert seen == ["tf1", "keras"]
    assert side() is None


def metric_keys_model_fn(features, labels, mode, params):
    logits = V1.layers.dense(V1.layers.dense(features, 16, activation="relu", name="dense"), 3, name="dense_1")
    loss = V1.losses.sparse_softmax_cross_entropy(labels, logits)
    accuracy = V1.metrics.accuracy(labels, V1.argmax(logits, axis=1), name="eval_acc_scope")
    return EstimatorSpec(mode, loss=loss, eval_metric_ops={"eval_accuracy": accuracy})


def test_the_eval_check_takes_the_eval_metric_ops_keys_the_user_knows():
    def hooks():
        return [V1.train.LoggingTensorHook({"acc": "eval_acc_scope/update_op:0"}, every_n_iter=1)]

    report = check_migration(
        metric_keys_model_fn,
        keras_twin(),
        hooks,
        (X[:128], Y[:128]),
        steps=None,
        mode="eval",
        names={"eval_accuracy": "accuracy"},
    )
    assert report.ok, str(report)
    assert report.compared["0 LoggingTensorHook"]["lines"] == 4


def test_an_eval_metric_ops_key_named_as_the_keras_log_key_is_taken_too():
    # official r1 ResNet's eval_metric_ops={"accuracy": ...}, and a Keras metric named "accuracy":
    # names={"accuracy": "accuracy"} gave HookCallback a name mapped to itself (a "circle" error).
    def model_fn(features, labels, mode, params):
        spec = metric_keys_model_fn(features, labels, mode, params)
        return spec._replace(eval_metric_ops={"accuracy": spec.eval_metric_ops["eval_accuracy"]})

    def hooks():
        return [V1.train.LoggingTensorHook({"acc": "eval_acc_scope/update_op:0"}, every_n_iter=1)]

    names = {"accuracy": "accuracy"}
    report = check_migration(model_fn, keras_twin(), hooks, (X[:128], Y[:128]), steps=None, mode="eval", names=names)
    assert report.ok, str(report)
    assert report.compared["0 LoggingTensorHook"]["lines"] == 4


def test_estimator_hooks_in_eval_mode_write_what_estimator_evaluate_wrote_on_both_sides():
    def hooks():
        return estimator_hooks("model_dir", mode="eval")

    names = {"cross_entropy": "loss", "accuracy/update_op": "accuracy"}
    report = check_migration(model_fn, keras_twin(), hooks, (X[:128], Y[:128]), steps=None, mode="eval", names=names)
    assert report.ok, str(report)
    counts = report.compared["0 _EvalResultsWriter"]
    assert counts["lines"] == 1  # "Saving dict for global step 0: accuracy = ..., global_step = 0, loss = ..."
    assert counts["summaries"] == 2  # accuracy and loss, at the global step
