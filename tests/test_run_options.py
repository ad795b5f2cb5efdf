"""What a hook can ask of a session beyond fetches: RunOptions, run_metadata, session.run's options.

Each request is honoured, or refused, or warned about once, naming the hook, the
field and the way out (the table in docs/errors.md names these tests). Where TF1's
`MonitoredSession` is the truth (the merged `run_values.options`, `run_metadata`,
the out-of-memory report), the same hooks run under it and the results are compared.
"""

from __future__ import annotations

import re
import sys
import warnings
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import make_data, make_model, needs_backend, run_tf1
from tensorflow.core.protobuf import debug_pb2

from hooks2callbacks import HookCallback

T = tf.compat.v1.train
RunOptions = tf.compat.v1.RunOptions
X, Y = make_data(96)  # 3 batches of 32
BATCH = 32


def fit(model: Any, *callbacks: Any, x: np.ndarray = X, y: np.ndarray = Y) -> Any:
    return model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=list(callbacks))


class OomReportingHook(T.SessionRunHook):
    """The request of NVIDIA DeepLearningExamples' `OomReportingHook` (UNet_3D_Medical's
    `runtime/hooks.py`, and UNet_Medical, EfficientDet and their forks), written here: its whole
    job is, every step, no fetches and the allocations reported on an out-of-memory error."""

    def before_run(self, run_context: Any) -> Any:
        return T.SessionRunArgs(fetches=[], options=RunOptions(report_tensor_allocations_upon_oom=True))


class Asks(T.SessionRunHook):
    """A hook asking for `options` (and fetching `fetches`) every step, keeping what `after_run` got."""

    def __init__(self, options: Any, fetches: Any = None) -> None:
        self.options = options
        self.fetches = fetches
        self.seen: list[tuple[Any, Any]] = []
        self.results: list[Any] = []

    def before_run(self, run_context):
        return T.SessionRunArgs(self.fetches, options=self.options)

    def after_run(self, run_context, run_values):
        # Copies: what the protos held at this step.
        options = RunOptions()
        options.CopyFrom(run_values.options)
        self.seen.append((options, type(run_values.run_metadata)))
        self.results.append(run_values.results)
        self.metadata = run_values.run_metadata


def ours(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if str(w.message).startswith("HookCallback:")]


# -- report_tensor_allocations_upon_oom ---------------------------------------------------------------

# 2**40 float32 (4 TiB): more than any machine has, refused by the allocator without allocating.
IMPOSSIBLE = 2**40
MARK = 1000.0  # a feature value that makes the layer ask for it


class AsksTheImpossible:
    """A layer (mixed into each flavour's Layer) whose step asks for 2**40 floats on a batch holding `MARK`.

    The size depends on the data, so Grappler cannot fold the fill into a constant (a constant
    fill of that size fails to fold, as InvalidArgumentError, after a minute).
    """

    def call(self, x):
        size = tf.cast(tf.reduce_max(x) >= MARK, tf.int64) * IMPOSSIBLE
        return x + tf.reduce_sum(tf.fill(tf.reshape(size, [1]), 0.0))


def impossible_model(K: Any) -> Any:
    layer = type("AsksTheImpossible", (AsksTheImpossible, K.layers.Layer), {})()
    model = K.Sequential([K.Input((X.shape[1],)), layer, make_model(K)])
    model.compile("sgd", K.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def marked_on_third_batch() -> np.ndarray:
    x = X.copy()
    x[2 * BATCH + 5, 0] = MARK
    return x


def report_of(error: BaseException) -> str:
    """What the user sees beyond TF's own message: the notes (3.11+), or the message (3.10)."""
    if sys.version_info >= (3, 11):
        return "\n".join(getattr(error, "__notes__", []))
    return str(error)


@pytest.mark.slow  # TF's allocator waits 10 s before it gives up on an allocation
@needs_backend("tensorflow", reason="the layer runs out of memory through a TF op")
def test_oom_reporting_hook_through_fit_names_the_hook_and_the_step_in_the_out_of_memory_error(K):
    """NVIDIA's OomReportingHook (fetches=[], RunOptions(report_tensor_allocations_upon_oom=True)) in a
    fit whose third step runs out of memory: the error stays TF's ResourceExhaustedError, and says
    which hook asked, for which step, and what TF2 knows of the device's memory."""
    model = impossible_model(K)
    callback = HookCallback([OomReportingHook()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(tf.errors.ResourceExhaustedError) as info:
            fit(model, callback, x=marked_on_third_batch())
    error = info.value
    # TF's own message is all there, and names the device.
    assert "OOM when allocating tensor with shape[1099511627776]" in str(error)
    assert "device:CPU:0" in str(error)
    report = report_of(error)
    assert "OomReportingHook.before_run() asked for RunOptions(report_tensor_allocations_upon_oom=True)" in report
    # The third step: global step 2 (the stale value TF1's hooks read in that step).
    assert "(global step 2)" in report
    # What TF2 knows of that device's memory: its bytes in use and peak, or, where TF recorded no
    # allocation on the CPU's allocator before (a fresh process whose Keras step ran in a graph), none.
    device = "/job:localhost/replica:0/task:0/device:CPU:0: "
    try:
        info = tf.config.experimental.get_memory_info("CPU:0")
    except ValueError as why:
        # A process whose CPU allocator keeps no statistics (TF turns them on only for some runs,
        # so it depends on what ran before in this worker): the report says there are none.
        assert f"{device}no memory statistics (tf.config.experimental.get_memory_info: {why})" in report, report
    else:
        if any(info.values()):
            in_use = r"[\d.]+ MiB in use after the failed step, peak [\d.]+ MiB"
            assert re.search(re.escape(device) + in_use, report), report
        else:
            assert f"{device}TF recorded no allocations on this CPU device" in report, report
    assert "tf.config.experimental.get_memory_info" in report and "TensorBoard(profile_batch=" in report
    # Honoured, so nothing is warned of.
    assert not ours(caught)
    # The report wrapped only the step that asked; the run Keras's error left open is closed
    # later (here by close()), and the model gets its own step function back.
    assert type(model.train_function).__name__ != "_OomReport"
    left_open = callback._runner
    assert not left_open.closed
    callback.close()
    assert left_open.closed and type(model.train_function).__name__ not in ("_OomReport", "_Wrapped")


@pytest.mark.slow  # TF's allocator waits 10 s before it gives up on an allocation
@needs_backend("tensorflow", reason="TF1 alone; the same under any backend")
def test_oom_reporting_hook_under_monitored_session_lists_allocations_on_the_device_hookcallback_names():
    """The same hook under TF1's MonitoredSession, on a graph whose op runs out of memory the same way:
    TF1 lists the allocations of the device. Through fit, that list cannot be made (Keras's step
    takes no RunOptions); the note names the same device and what TF2 can say about it."""
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, X.shape[1]])
        size = tf.cast(tf.reduce_max(x) >= MARK, tf.int64) * IMPOSSIBLE
        step = tf.reduce_sum(tf.fill(tf.reshape(size, [1]), 0.0))
        with T.MonitoredSession(hooks=[OomReportingHook()]) as session:
            with pytest.raises(tf.errors.ResourceExhaustedError) as info:
                session.run(step, {x: marked_on_third_batch()})
    tf1 = str(info.value)
    assert "Current usage from device: /job:localhost/replica:0/task:0/device:CPU:0" in tf1
    # The device TF1 reports on is the one the adapter's note speaks of (for the same error).
    from hooks2callbacks._run_options import _oom_note

    note = _oom_note(info.value, ["OomReportingHook.before_run()"], 0)
    assert "/job:localhost/replica:0/task:0/device:CPU:0" in note


@needs_backend("tensorflow", reason="elsewhere the request is warned of (test_oom_report_on_another_backend_*)")
def test_oom_report_asked_on_a_step_that_fits_changes_nothing_and_warns_of_nothing(K):
    model = make_model(K)
    reference = make_model(K)
    hook = Asks(RunOptions(report_tensor_allocations_upon_oom=True), fetches="loss")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(model, HookCallback([hook]))
    fit(reference)
    assert not ours(caught)
    for got, want in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    # Keras's loop has the model's own function back (no wrapper left behind).
    assert "_OomReport" not in type(model.train_function).__name__
    assert all(options.report_tensor_allocations_upon_oom for options, _ in hook.seen)


@needs_backend("jax", "torch", reason="the backends whose out-of-memory errors are not TensorFlow's")
def test_oom_report_on_another_backend_is_warned_of_once_naming_the_backend(K):
    model = make_model(K)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(model, HookCallback([OomReportingHook()]))
    messages = [m for m in ours(caught) if "report_tensor_allocations_upon_oom" in m]
    assert len(messages) == 1, messages
    assert messages[0].startswith(
        "HookCallback: OomReportingHook.before_run() asked for RunOptions(report_tensor_allocations_upon_oom=True), "
        f"which cannot be honoured here: the model runs on the {keras.backend.backend()} backend"
    )


@needs_backend("tensorflow", reason="tf_keras is TensorFlow-only; tested once, with KERAS_BACKEND=tensorflow")
def test_oom_report_in_tf_keras_evaluate_is_warned_of_once_naming_the_hook():
    tf_keras = pytest.importorskip("tf_keras")
    model = make_model(tf_keras)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.evaluate(X, Y, batch_size=BATCH, verbose=0, callbacks=[HookCallback([OomReportingHook()], mode="eval")])
    messages = ours(caught)
    assert len(messages) == 1, messages
    assert messages[0].startswith(
        "HookCallback: OomReportingHook.before_run() asked for RunOptions(report_tensor_allocations_upon_oom=True), "
        "which cannot be honoured here: tf_keras's evaluate() calls its step through a runner"
    )


def test_oom_report_in_a_training_loop_of_ones_own_is_warned_of_once(K):
    model = make_model(K)
    callbacks = K.callbacks.CallbackList([HookCallback([OomReportingHook()])], model=model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callbacks.on_train_begin()
        for step in range(3):
            callbacks.on_train_batch_begin(step)
            callbacks.on_train_batch_end(step, {"loss": 1.0})
        callbacks.on_train_end()
    messages = [m for m in ours(caught) if "report_tensor_allocations_upon_oom" in m]
    assert len(messages) == 1, messages
    assert "OomReportingHook.before_run()" in messages[0] and "in a training loop of your own" in messages[0]
    assert "Catch tf.errors.ResourceExhaustedError around your step" in messages[0]


# -- every other RunOptions field -----------------------------------------------------------------------

WATCH = debug_pb2.DebugTensorWatch(node_name="loss", debug_ops=["DebugIdentity"])
# (field, RunOptions asking for it, what the warning says the way out is)
WARNED = [
    (
        "timeout_in_ms",
        RunOptions(timeout_in_ms=5000),
        "RunOptions(timeout_in_ms=5000), which cannot be honoured: Keras's step is a compiled function of "
        "its backend, not a Session.run, and takes no RunOptions, so it has no timeout. Remove the option; "
        "under tf.distribute, bound how long collectives wait with "
        "tf.distribute.experimental.CommunicationOptions(timeout_seconds=...).",
    ),
    (
        "inter_op_thread_pool",
        RunOptions(inter_op_thread_pool=1),
        "RunOptions(inter_op_thread_pool=1), which cannot be honoured: Keras's step is not a Session.run: it "
        "runs on its backend's own threads",
    ),
    (
        "output_partition_graphs",
        RunOptions(output_partition_graphs=True),
        "RunOptions(output_partition_graphs=True), which cannot be honoured: Keras's step is not a "
        "Session.run, so no partition graphs come back",
    ),
    (
        "debug_options",
        RunOptions(debug_options=debug_pb2.DebugOptions(debug_tensor_watch_opts=[WATCH])),
        "RunOptions(debug_options=DebugOptions(...)), which cannot be honoured: tfdbg's tensor watches are "
        "not run on Keras's step. Remove the option; on TensorFlow, TF2's debugger dumps the step's tensors: call "
        "tf.debugging.experimental.enable_dump_debug_info(",
    ),
    (
        "experimental",
        RunOptions(experimental=RunOptions.Experimental(collective_graph_key=7)),
        "RunOptions(experimental=Experimental(...)), which cannot be honoured: TF1's MonitoredSession did not "
        "pass a hook's RunOptions.experimental",
    ),
]


@pytest.mark.parametrize("field, options, says", WARNED, ids=[w[0] for w in WARNED])
def test_a_run_option_keras_cannot_honour_is_warned_of_once_naming_the_hook_the_field_and_the_way_out(
    K, field, options, says
):
    hook = Asks(options, fetches="loss")
    model = make_model(K)
    reference = make_model(K)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(model, HookCallback([hook]))
    messages = ours(caught)
    # Once for the run, though the hook asked at each of the 3 steps.
    assert len(messages) == 1, messages
    assert messages[0].startswith(f"HookCallback: Asks.before_run() asked for {says}"), messages[0]
    assert field in messages[0]
    # Training is Keras's own, unchanged; the hook still gets its fetches every step.
    fit(reference)
    for got, want in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert len(hook.seen) == 3


def test_trace_level_is_refused_before_the_first_step(K):
    """(Also in test_bad_input's table, case full-trace.) SOFTWARE_TRACE is refused as FULL_TRACE is."""
    hook = Asks(RunOptions(trace_level=RunOptions.SOFTWARE_TRACE))
    with pytest.raises(ValueError, match=r"Asks\.before_run\(\) requested RunOptions with trace_level=SOFTWARE_TRACE"):
        fit(make_model(K), HookCallback([hook]))
    assert hook.seen == []


# -- what after_run gets: run_values.options and run_values.run_metadata, as under MonitoredSession --------


def two_askers() -> list[Asks]:
    return [
        Asks(RunOptions(timeout_in_ms=1000, report_tensor_allocations_upon_oom=True)),
        Asks(
            RunOptions(
                timeout_in_ms=5000,
                inter_op_thread_pool=0,
                debug_options=debug_pb2.DebugOptions(debug_tensor_watch_opts=[WATCH]),
                experimental=RunOptions.Experimental(collective_graph_key=7),
            )
        ),
    ]


def test_run_values_hold_the_merged_options_and_a_run_metadata_as_under_monitored_session(K):
    """TF1 merges the hooks' RunOptions (the larger number, the OR of flags, the watches extended,
    `experimental` dropped) and gives every hook of the step the merged options and one RunMetadata,
    empty when the step was not traced."""
    tf1_hooks = two_askers()
    run_tf1(tf1_hooks, max_steps=3)
    keras_hooks = two_askers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # each field's own warning is tested above
        fit(make_model(K), HookCallback(keras_hooks))
    for tf1_hook, keras_hook in zip(tf1_hooks, keras_hooks, strict=True):
        assert len(keras_hook.seen) == len(tf1_hook.seen) == 3
        for (keras_options, keras_metadata), (tf1_options, tf1_metadata) in zip(
            keras_hook.seen, tf1_hook.seen, strict=True
        ):
            assert keras_options == tf1_options, (keras_options, tf1_options)
            assert keras_metadata is tf1_metadata is tf.compat.v1.RunMetadata
        # TF1's run with these options (the tfdbg watch) returned step stats; Keras's step, which
        # runs no watch (warned of), returns none: the hooks get an empty RunMetadata.
        assert tf1_hook.metadata.step_stats.dev_stats
        assert keras_hook.metadata == tf.compat.v1.RunMetadata()
    merged = keras_hooks[0].seen[0][0]
    assert merged.timeout_in_ms == 5000 and merged.report_tensor_allocations_upon_oom
    assert len(merged.debug_options.debug_tensor_watch_opts) == 1 and not merged.HasField("experimental")


def test_hooks_that_ask_for_no_options_see_default_options_and_an_empty_run_metadata_as_under_tf1(K):
    """SessionRunArgs(fetches=None): TF1 keeps no fetches for the hook, whose results are None."""
    tf1_hook, keras_hook = Asks(None), Asks(None)
    run_tf1([tf1_hook], max_steps=2)
    fit(make_model(K), HookCallback([keras_hook]))
    assert tf1_hook.results == [None] * 2 and keras_hook.results == [None] * 3
    assert [o for o, _ in tf1_hook.seen] == [RunOptions()] * 2
    assert [o for o, _ in keras_hook.seen] == [RunOptions()] * 3
    assert keras_hook.metadata == tf1_hook.metadata == tf.compat.v1.RunMetadata()


# -- run_context.session.run(..., options=, run_metadata=) ------------------------------------------------


class TracesItsOwnRun(T.SessionRunHook):
    """Runs `fetch` (built in begin by `make`) through run_context.session with FULL_TRACE in after_run."""

    def __init__(self, make: Any) -> None:
        self.make = make
        self.traced: list[set[str]] = []

    def begin(self):
        self.fetch = self.make()

    def after_run(self, run_context, run_values):
        metadata = tf.compat.v1.RunMetadata()
        run_context.session.run(
            self.fetch, options=RunOptions(trace_level=RunOptions.FULL_TRACE), run_metadata=metadata
        )
        self.traced.append({node.node_name for dev in metadata.step_stats.dev_stats for node in dev.node_stats})


def own_op() -> Any:
    # Of a random value: an op of constants would be folded away before it runs.
    return tf.add(tf.random.uniform([]), 2.0, name="hooks_own_add")


def test_session_run_options_and_run_metadata_apply_to_a_hooks_own_ops_as_under_monitored_session(K):
    tf1_hook, keras_hook = TracesItsOwnRun(own_op), TracesItsOwnRun(own_op)
    run_tf1(lambda: [tf1_hook], max_steps=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(make_model(K), HookCallback([keras_hook]))
    assert not ours(caught)
    # The trace of the hook's own run names its op, under TF1 and through fit alike.
    assert all("hooks_own_add" in names for names in tf1_hook.traced)
    assert len(keras_hook.traced) == 3 and all("hooks_own_add" in names for names in keras_hook.traced)


def test_session_run_options_on_values_answered_without_a_run_are_warned_of_once(K):
    """A fetch of a log key (or the global step) is answered from Keras's step: no run, so its
    options have nothing to apply to, and the run_metadata stays empty. Said once, naming the hook."""
    hook = TracesItsOwnRun(lambda: "loss")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(make_model(K), HookCallback([hook]))
    messages = ours(caught)
    assert len(messages) == 1, messages
    assert messages[0].startswith(
        "HookCallback: TracesItsOwnRun.after_run() (through session.run) passed RunOptions(trace_level=FULL_TRACE) to "
        "session.run, but every fetch was answered from Keras's step"
    )
    assert "run_metadata stays empty" in messages[0] and "TensorBoard(profile_batch=...)" in messages[0]
    assert hook.traced == [set()] * 3


# -- run_context.original_args ------------------------------------------------------------------------------


def test_original_args_in_training_are_fetches_none(K):
    """Keras runs the step, with no fetches of its own to show (docs/semantics.md); the predict
    case is test_differential's test_predict_hooks_see_the_predictions_as_original_args_*."""
    seen: list[Any] = []

    class Original:
        def before_run(self, run_context):
            seen.append(run_context.original_args)

    fit(make_model(K), HookCallback([Original()]))
    assert seen == [T.SessionRunArgs(fetches=None)] * 3


# -- graph finalization -------------------------------------------------------------------------------------


class BuildsInBeforeRun(T.SessionRunHook):
    """Builds an op in before_run, after the graph was finalized (a bug TF1 reported the same way)."""

    def before_run(self, run_context):
        tf.constant(1.0, name="late")


def test_an_op_built_after_begin_fails_as_under_monitored_session(K):
    """The graph is finalized after every begin(), as TF1's Scaffold finalized it: the same RuntimeError."""
    with pytest.raises(RuntimeError) as tf1:
        run_tf1([BuildsInBeforeRun()], max_steps=1)
    with pytest.raises(RuntimeError) as ours_:
        fit(make_model(K), HookCallback([BuildsInBeforeRun()]))
    assert str(ours_.value) == str(tf1.value) == "Graph is finalized and cannot be modified."


def test_the_oom_note_for_a_gpu_says_its_memory_in_use_or_why_there_is_none():
    """TF's message for a GPU out-of-memory error names the GPU: its statistics (a GPU machine), or why
    there are none (this GPU is not there)."""
    from hooks2callbacks._run_options import _oom_note

    error = tf.errors.ResourceExhaustedError(
        None,
        None,
        "OOM when allocating tensor with shape[1099511627776] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    )
    note = _oom_note(error, ["OomReportingHook.before_run()", "Other.before_run()"], 7)
    assert note.startswith(
        "HookCallback: OomReportingHook.before_run() and Other.before_run() asked for "
        "RunOptions(report_tensor_allocations_upon_oom=True) for this step (global step 7)."
    )
    if tf.config.list_logical_devices("GPU"):
        assert "/job:localhost/replica:0/task:0/device:GPU:0: " in note and " MiB in use after the failed step" in note
    else:
        assert "/job:localhost/replica:0/task:0/device:GPU:0: no memory statistics (" in note
