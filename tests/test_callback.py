"""HookCallback: the Keras-event mapping, stop, modes, reuse and factories (bad input: test_bad_input.py)."""

from __future__ import annotations

import gc
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import OnlyAfterRun, Recorder, RecordingHook, iterations, make_data, make_model, needs_backend
from tensorflow.python.data.ops import iterator_ops
from tensorflow.python.training import training_util

from hooks2callbacks import HookCallback, log_tensor

X, Y = make_data()  # 320 samples: 10 batches of 32


def fit(model, hooks, **kwargs):
    kwargs.setdefault("epochs", 1)
    return model.fit(X, Y, batch_size=32, verbose=0, callbacks=[HookCallback(hooks)], **kwargs)


def steps_seen(calls, name, event="after_run"):
    return [c[2] for c in calls if c[0] == name and c[1] == event]


def test_event_order_and_shared_stop_within_a_step(K):
    calls: list = []
    first = RecordingHook("first", calls, stop_at=2)
    second = RecordingHook("second", calls)
    fit(make_model(K), [first, second])
    expected = [
        ("first", "begin"),
        ("second", "begin"),
        ("first", "after_create_session"),
        ("second", "after_create_session"),
    ]
    for step in range(3):
        expected += [
            ("first", "before_run", False),
            ("second", "before_run", False),
            ("first", "after_run", step, False),
            ("second", "after_run", step, step == 2),
        ]
    expected += [("first", "end"), ("second", "end")]
    assert calls == expected


def test_stop_request_stops_training_after_that_step(K):
    model = make_model(K)
    fit(model, RecordingHook("h", [], stop_at=4), epochs=5)
    assert iterations(model) == 5


def test_global_step_is_stale_and_continues_across_epochs_and_fits(K):
    calls: list = []
    model = make_model(K)
    fit(model, RecordingHook("h", calls), epochs=2)
    assert steps_seen(calls, "h") == list(range(20))
    calls.clear()
    fit(model, RecordingHook("h", calls), epochs=1)  # the same model: the step carries on
    assert steps_seen(calls, "h") == list(range(20, 30))


@needs_backend("tensorflow", "jax", reason="Keras's torch backend requires steps_per_execution=1")
def test_steps_per_execution_calls_hooks_once_per_execution_as_its_last_step(K):
    calls: list = []
    model = make_model(K, steps_per_execution=5)
    with pytest.warns(UserWarning, match=r"steps_per_execution=5.*count those calls as steps: RecordingHook"):
        fit(model, RecordingHook("h", calls), epochs=2)
    # Each execution of 5 steps is seen as its last step: stale values 4, 9, ...
    assert steps_seen(calls, "h") == [4, 9, 14, 19]
    assert iterations(model) == 20


def test_one_callback_is_reusable_across_fits_and_starts_fresh(K):
    calls: list = []
    hook = RecordingHook("h", calls)
    callback = HookCallback(hook)
    model = make_model(K)
    graphs = []
    for _ in range(2):
        model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[callback])
        graphs.append(hook.global_step.graph)
    assert calls.count(("h", "begin")) == 2 and calls.count(("h", "end")) == 2
    assert graphs[0] is not graphs[1]
    assert steps_seen(calls, "h")[-1] == 19


def test_train_mode_ignores_validation_and_eval_mode_runs_each_pass(K):
    train_calls: list = []
    eval_calls: list = []
    train_hook = RecordingHook("train", train_calls)
    eval_hook = RecordingHook("eval", eval_calls)
    x_val, y_val = make_data(64, seed=1)
    make_model(K).fit(
        X,
        Y,
        batch_size=32,
        epochs=2,
        verbose=0,
        validation_data=(x_val, y_val),
        callbacks=[HookCallback(train_hook), HookCallback(eval_hook, mode="eval")],
    )
    assert len(steps_seen(train_calls, "train")) == 20
    # Two validation passes of 2 batches, each a whole begin..end, at the train step reached.
    events = [c[1] for c in eval_calls]
    one_pass = ["begin", "after_create_session", "before_run", "after_run", "before_run", "after_run", "end"]
    assert events == one_pass * 2
    assert steps_seen(eval_calls, "eval") == [10, 10, 20, 20]


def test_eval_mode_with_evaluate_and_stop_evaluating(K):
    calls: list = []
    model = make_model(K)
    hook = RecordingHook("h", calls, fetches="loss")
    stopper = RecordingHook("stop", [], stop_at=0)
    seen: list = []

    count = K.callbacks.LambdaCallback(on_test_batch_end=lambda batch, logs: seen.append(logs["loss"]))
    model.evaluate(X, Y, batch_size=32, verbose=0, callbacks=[count, HookCallback([hook, stopper], mode="eval")])
    if K is keras:
        assert len(seen) == 1  # stopped after the first batch
    else:
        assert len(seen) == 10  # tf_keras cannot stop evaluate(): it runs on, unseen by the hooks
    assert hook.results == seen[:1]
    assert calls[-1] == ("h", "end")


def test_predict_mode_sees_outputs(K):
    hook = RecordingHook("h", [], fetches="outputs")
    out = make_model(K).predict(X[:64], batch_size=32, verbose=0, callbacks=[HookCallback(hook, mode="predict")])
    assert len(hook.results) == 2
    assert hook.results[0].shape == (32, 3)
    assert (hook.results[1] == out[32:]).all()


@pytest.mark.parametrize(
    "mode, call",
    [
        ("train", lambda m, cb: m.evaluate(X, Y, verbose=0, callbacks=[cb])),
        ("train", lambda m, cb: m.predict(X, verbose=0, callbacks=[cb])),
        ("eval", lambda m, cb: m.predict(X, verbose=0, callbacks=[cb])),
        ("predict", lambda m, cb: m.fit(X, Y, verbose=0, callbacks=[cb])),
        ("predict", lambda m, cb: m.evaluate(X, Y, verbose=0, callbacks=[cb])),
    ],
)
def test_callback_passed_to_a_loop_of_another_mode_is_an_error(K, mode, call):
    with pytest.raises(ValueError, match=rf"HookCallback\(mode='{mode}'.*Use HookCallback\(\.\.\., mode="):
        call(make_model(K), HookCallback(RecordingHook("h", []), mode=mode))


def test_repr_names_mode_and_hooks():
    callback = HookCallback([tf.compat.v1.train.StopAtStepHook(last_step=1), RecordingHook("h", [])], mode="eval")
    assert repr(callback) == "HookCallback(mode='eval', hooks=[StopAtStepHook, RecordingHook])"


def test_duck_typed_hook_with_one_method_gets_the_logs_view(K):
    hook = OnlyAfterRun()
    recorder = Recorder(K, X, Y)
    model = make_model(K)
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[HookCallback(hook), recorder])
    # The view holds each batch's own values, under Keras's own keys.
    assert [dict(r) for r in hook.results] == [pytest.approx(batch, rel=1e-6) for batch in recorder.train_batch]
    assert [sorted(r) for r in hook.results] == [sorted(logs) for logs in recorder.train_logs]
    # tf_keras may hand callbacks tensors; hooks get what Session.run gave for a float32 tensor.
    assert {type(value) for view in hook.results for value in view.values()} == {np.float32}
    view = hook.results[-1]
    assert view["loss"] == view["loss:0"] == pytest.approx(recorder.train_batch[-1]["loss"], rel=1e-6)
    with pytest.raises(TypeError):
        view["loss"] = 1.0  # read-only


def test_chief_only_hooks_run_first_in_one_process_as_under_monitored_training_session(K):
    """MonitoredTrainingSession's non-distributed path lists chief_only_hooks before hooks (they
    came after, so their log lines came out in another order than TF1's)."""
    tf1_calls: list = []
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        # As `run_tf1`: the hooks' step read comes before the increment (else it races with it).
        with tf.control_dependencies([training_util._get_or_create_global_step_read()]):
            train_op = tf.compat.v1.assign_add(step, 1)
        with tf.compat.v1.train.MonitoredTrainingSession(
            hooks=[RecordingHook("every", tf1_calls, stop_at=1)],
            chief_only_hooks=[RecordingHook("chief", tf1_calls)],
            log_step_count_steps=None,
        ) as session:
            while not session.should_stop():
                session.run(train_op)
    calls: list = []
    model = make_model(K)
    callback = HookCallback(RecordingHook("every", calls, stop_at=1), chief_only_hooks=[RecordingHook("chief", calls)])
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[callback])
    names = [c[0] for c in calls]
    assert names == [c[0] for c in tf1_calls] == ["chief", "every"] * (len(calls) // 2)  # one process: the chief
    assert [c[1] for c in calls[::2]] == [c[1] for c in calls[1::2]]  # the same events
    assert steps_seen(calls, "chief") == [0, 1]


def test_hooks_and_chief_only_hooks_may_each_be_a_factory(K, tmp_path):
    calls: list = []
    made: list = []

    def chief_hooks():
        made.append(tf.compat.v1.get_default_graph())
        tf.compat.v1.summary.scalar("loss", log_tensor("loss"))
        summary = tf.compat.v1.summary.merge_all()
        return [
            RecordingHook("chief", calls),
            tf.compat.v1.train.SummarySaverHook(save_steps=1, output_dir=str(tmp_path), summary_op=summary),
        ]

    callback = HookCallback(lambda: RecordingHook("every", calls, stop_at=1), chief_only_hooks=chief_hooks)
    assert repr(callback).endswith(
        "chief_only_hooks=test_hooks_and_chief_only_hooks_may_each_be_a_factory.<locals>.chief_hooks)"
    )
    make_model(K).fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[callback])
    assert [c[0] for c in calls] == ["chief", "every"] * (len(calls) // 2)
    assert steps_seen(calls, "chief") == [0, 1] and len(made) == 1
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path))


def test_chief_only_hooks_are_not_called_off_the_chief(K):
    calls: list = []
    chief_calls: list = []
    callback = HookCallback(
        RecordingHook("every", calls, stop_at=1), chief_only_hooks=RecordingHook("chief", chief_calls), is_chief=False
    )
    make_model(K).fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[callback])
    assert chief_calls == []
    assert steps_seen(calls, "every") == [0, 1] and calls[-1] == ("every", "end")


def test_repr_names_chief_only_hooks():
    callback = HookCallback([], chief_only_hooks=[RecordingHook("h", [])])
    assert repr(callback) == "HookCallback(mode='train', hooks=[], chief_only_hooks=[RecordingHook])"


def test_empty_hook_list_is_a_no_op(K):
    model = make_model(K)
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[HookCallback([])])
    assert iterations(model) == 10


class FetchEachStep(tf.compat.v1.train.SessionRunHook):
    def __init__(self, fetches):
        self.fetches = fetches
        self.values: list = []

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self.fetches)

    def after_run(self, run_context, run_values):
        self.values.append(np.array(run_values.results))


def test_an_eager_variable_fetched_each_step_has_that_steps_value(K):
    # Keras's JAX trainer keeps the weights outside the variables during an
    # epoch; a stale read would repeat the epoch's first value.
    model = make_model(K)
    model.build((None, X.shape[1]))
    hook = FetchEachStep(model.layers[0].kernel)
    fit(model, hook, epochs=2)
    assert len({value.tobytes() for value in hook.values}) == len(hook.values) == 20
    np.testing.assert_array_equal(hook.values[-1], np.asarray(model.layers[0].kernel))


# -- a hooks factory ---------------------------------------------------------------


def test_a_hooks_factory_builds_new_hooks_in_each_run_s_adapter_graph(K):
    calls: list = []
    graphs: list = []

    def make_hooks():
        graphs.append(tf.compat.v1.get_default_graph())
        return [RecordingHook(f"run{len(graphs)}", calls)]

    callback = HookCallback(make_hooks)
    assert repr(callback) == (
        "HookCallback(mode='train', hooks="
        "test_a_hooks_factory_builds_new_hooks_in_each_run_s_adapter_graph.<locals>.make_hooks)"
    )
    model = make_model(K)
    for _ in range(2):
        model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[callback])
    assert len(graphs) == 2 and graphs[0] is not graphs[1]
    assert all(graph.get_collection("global_step") for graph in graphs)  # the adapter graph's step
    assert steps_seen(calls, "run1") == list(range(10))
    assert steps_seen(calls, "run2") == list(range(10, 20))


def test_a_hooks_factory_may_return_one_hook(K):
    calls: list = []
    fit(make_model(K), lambda: RecordingHook("only", calls))
    assert steps_seen(calls, "only") == list(range(10))


def test_an_error_in_a_hooks_factory_propagates_naming_the_factory(K):
    def make_hooks():
        raise LookupError("no such metric")

    with pytest.raises(LookupError, match="no such metric") as info:
        fit(make_model(K), make_hooks)
    assert any("Raised in the hooks factory" in note and "make_hooks()" in note for note in info.value.__notes__)


def test_a_hooks_factory_returning_non_hooks_is_a_type_error_naming_it(K):
    with pytest.raises(TypeError, match=r"What the hooks factory .*<lambda>\(\) returned takes a hook, .*got 3"):
        fit(make_model(K), lambda: 3)


class GraphSeeingHook(tf.compat.v1.train.SessionRunHook):
    """Notes the default graph in each method."""

    def __init__(self) -> None:
        self.graphs: dict[str, set] = {}

    def _note(self, method):
        self.graphs.setdefault(method, set()).add(id(tf.compat.v1.get_default_graph()))

    def begin(self):
        self._note("begin")

    def before_run(self, run_context):
        self._note("before_run")

    def after_run(self, run_context, run_values):
        self._note("after_run")
        assert not tf.executing_eagerly()  # graph mode, as in a TF1 session loop


def test_a_custom_hook_sees_the_adapter_graph_as_default_at_every_step(K):
    # Stock hooks alone skip the per-step graph switch; a custom hook must not.
    hook = GraphSeeingHook()
    fit(make_model(K), [tf.compat.v1.train.NanTensorHook("loss"), hook])
    assert len(hook.graphs["begin"]) == 1
    assert hook.graphs["before_run"] == hook.graphs["after_run"] == hook.graphs["begin"]


def test_a_run_of_no_batch_still_begins_and_ends_the_hooks(K):
    # As a MonitoredSession opened and closed without a step: begin, after_create_session, end.
    calls: list = []
    model = make_model(K)
    model.fit(
        X, Y, batch_size=32, initial_epoch=2, epochs=2, verbose=0, callbacks=[HookCallback(RecordingHook("h", calls))]
    )
    assert [c[1] for c in calls] == ["begin", "after_create_session", "end"]


# -- notebook re-run habits ----------------------------------------------------


def test_a_callback_listed_twice_runs_its_hooks_once_per_event_and_warns_naming_it(K, tmp_path):
    # The notebook habit: `callbacks.append(callback)` in a cell run twice.
    calls: list = []
    saver = tf.compat.v1.train.CheckpointSaverHook(str(tmp_path), save_steps=100)
    callback = HookCallback([RecordingHook("h", calls)], chief_only_hooks=[saver])
    callbacks = [callback]
    callbacks.append(callback)
    model = make_model(K)
    with pytest.warns(UserWarning, match=r"HookCallback\(mode='train', hooks=\[RecordingHook\].*listed more than once"):
        model.fit(X, Y, batch_size=32, epochs=2, verbose=0, callbacks=callbacks)
    expected = [("h", "begin"), ("h", "after_create_session")]
    for step in range(20):
        expected += [("h", "before_run", False), ("h", "after_run", step, False)]
    assert calls == [*expected, ("h", "end")]
    # The hooks' global step is the optimizer's: the checkpoint of the end is step 20, not 40.
    assert iterations(model) == 20
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest.endswith("-20")
    assert tf.train.load_variable(latest, "global_step") == 20


def test_a_callback_listed_three_times_in_evaluate_and_predict_runs_once_per_event(K):
    calls: list = []
    model = make_model(K)
    evaluating = HookCallback(RecordingHook("e", calls, stop_at=None), mode="eval")
    with pytest.warns(UserWarning, match="listed more than once"):
        model.evaluate(X, Y, batch_size=32, verbose=0, callbacks=[evaluating] * 3)
    assert [c[1] for c in calls] == ["begin", "after_create_session"] + ["before_run", "after_run"] * 10 + ["end"]
    calls.clear()
    predicting = HookCallback(RecordingHook("p", calls), mode="predict")
    with pytest.warns(UserWarning, match="listed more than once"):
        model.predict(X, batch_size=32, verbose=0, callbacks=[predicting, predicting])
    assert [c[1] for c in calls] == ["begin", "after_create_session"] + ["before_run", "after_run"] * 10 + ["end"]


def test_an_eval_callback_listed_twice_in_fit_runs_once_per_validation_pass(K):
    calls: list = []
    callback = HookCallback(RecordingHook("e", calls), mode="eval")
    x_val, y_val = make_data(64, seed=1)
    with pytest.warns(UserWarning, match="listed more than once"):
        make_model(K).fit(
            X, Y, batch_size=32, epochs=2, verbose=0, validation_data=(x_val, y_val), callbacks=[callback, callback]
        )
    one_pass = ["begin", "after_create_session", "before_run", "after_run", "before_run", "after_run", "end"]
    assert [c[1] for c in calls] == one_pass * 2
    assert steps_seen(calls, "e") == [10, 10, 20, 20]


@pytest.mark.parametrize(
    "validation", [{}, {"validation_freq": 3}], ids=["no_validation_data", "validation_freq_beyond_the_epochs"]
)
def test_an_eval_callback_that_fit_never_ran_is_pointed_out_naming_validation_data(K, validation):
    calls: list = []
    callback = HookCallback(RecordingHook("e", calls), mode="eval")
    if validation:
        validation = {**validation, "validation_data": make_data(64, seed=1)}
    with pytest.warns(UserWarning, match=r"mode='eval'.*ran no validation pass.*validation_data="):
        make_model(K).fit(X, Y, batch_size=32, epochs=2, verbose=0, callbacks=[callback], **validation)
    assert calls == []


def test_an_eval_callback_that_fit_ran_raises_no_warning(K, recwarn):
    callback = HookCallback(RecordingHook("e", []), mode="eval")
    make_model(K).fit(
        X, Y, batch_size=32, epochs=2, verbose=0, validation_data=make_data(64, seed=1), callbacks=[callback]
    )
    assert not [w for w in recwarn if "HookCallback" in str(w.message)]


@needs_backend("tensorflow", reason="Keras's other backends read arrays without tf.data")
@pytest.mark.parametrize("stop_at", [None, 12], ids=["to_the_end", "stopped_mid_epoch_by_hooks"])
def test_a_finished_fit_leaves_no_cycle_that_holds_keras_data_iterator(K, stop_at):
    # The run kept Keras's loop frame, whose locals hold the callbacks: a cycle that kept the
    # fit's tf.data iterator until the garbage collector ran, and deleting it then stood still
    # for seconds. A stop mid-epoch left Keras 3's own cycle (its EpochIterator and the epoch's
    # generator), which the run closes: in fit, and in an evaluate that eval hooks stopped.
    model = make_model(K)
    hook = RecordingHook("h", [], fetches="loss", stop_at=stop_at)
    evaluator = RecordingHook("e", [], fetches="loss", stop_at=None if stop_at is None else 0)
    gc.collect()
    gc.disable()
    try:
        # Only the fit's own: another test's data may hold an iterator all along.
        before = {id(o) for o in gc.get_objects() if isinstance(o, iterator_ops.OwnedIterator)}
        model.fit(X, Y, batch_size=32, epochs=2, verbose=0, callbacks=[HookCallback(hook)])
        model.evaluate(X, Y, batch_size=32, verbose=0, callbacks=[HookCallback(evaluator, mode="eval")])
        alive = [o for o in gc.get_objects() if isinstance(o, iterator_ops.OwnedIterator) and id(o) not in before]
    finally:
        gc.enable()
    assert (len(hook.results), len(evaluator.results)) == ((20, 10) if stop_at is None else (13, 1))
    assert alive == []
