"""Hooks in TF1 graph mode (`hooks2callbacks._graph_mode`): tf_keras under `disable_eager_execution()`.

Every scenario runs in one subprocess (`graph_mode_run.py`, the `graph_mode_results`
fixture), since graph mode cannot be undone. The truth is TF1 itself: the same hooks
under a real `MonitoredSession` over the same model built in plain TF1 (same weights,
same batches; `twin`). Eager tf_keras (`_dispatch.HookRunner`) is compared too: the
two sources of values give hooks the same calls and values.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_keras3_in_graph_mode_gets_a_clear_error(graph_mode_results):
    message = graph_mode_results["keras3"]
    assert message is not None
    assert "Keras 3 does not run in TF1 graph mode" in message
    assert "tf_keras" in message and "disable_eager_execution()" in message
    assert "HookCallback(mode='train', hooks=[StopAtStepHook])" in message


def test_predict_hooks_in_graph_mode_are_refused_naming_the_way_out(graph_mode_results):
    message = graph_mode_results["predict"]
    assert message is not None
    assert "hooks in predict() are not supported in TF1 graph mode yet" in message
    assert "without HookCallback" in message and "eagerly" in message


def test_estimator_hooks_in_graph_mode_are_refused_naming_the_hooks_to_use(graph_mode_results):
    message = graph_mode_results["estimator_hooks"]
    assert message is not None
    assert "not supported in TF1 graph mode" in message and "CheckpointSaverHook(model_dir" in message


def _calls(result):
    return [call[0] for call in result]


def test_fit_calls_hooks_in_monitored_sessions_order(graph_mode_results):
    graph, twin = graph_mode_results["graph"]["fit"], graph_mode_results["twin"]["fit"]
    assert _calls(graph["calls"]) == _calls(twin["calls"])
    # Stopped by StopAtStepHook(last_step=8) in the second epoch, after the same step.
    assert _calls(graph["calls"]).count("after_run") == 8
    assert graph["calls"][-1] == twin["calls"][-1] == ["end", 8]
    # after_create_session gets Keras's own tf.compat.v1.Session, as MonitoredSession gave its own.
    assert graph["calls"][1] == twin["calls"][1] == ["after_create_session", "Session", 0]


def test_fit_gives_each_step_its_own_values_as_tf1(graph_mode_results):
    graph, twin = graph_mode_results["graph"]["fit"], graph_mode_results["twin"]["fit"]
    ours = [c for c in graph["calls"] if c[0] == "after_run"]
    theirs = [c for c in twin["calls"] if c[0] == "after_run"]
    for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        # loss (the batch's own), its type, the derived tensor built in begin(), the op's
        # result (None), the step re-read with run_context.session.run, the hook's own variable.
        assert a[1] == pytest.approx(b[1], rel=1e-6) and a[2] == b[2] == "float32"
        assert a[5] == pytest.approx(b[5], rel=1e-6)
        assert a[6] is b[6] is False
        assert a[7:] == b[7:]
        assert a[9] == 2.0 * index  # the hook's feed of its own placeholder
        # The global step, stale: TF1's fetch of the variable beside its update is unordered
        # (tf1-contract, fifth round), so TF1 saw the stale value or the new one.
        assert a[3] == index and a[4] == b[4] == "int64"
        assert b[3] in (index, index + 1)
    for ours_w, theirs_w in zip(graph["weights"], twin["weights"], strict=True):
        np.testing.assert_allclose(ours_w, theirs_w, rtol=1e-6)


def test_the_graph_is_finalized_for_hooks_after_begin(graph_mode_results):
    graph, twin = graph_mode_results["graph"]["fit"], graph_mode_results["twin"]["fit"]
    refused = [c for c in graph["calls"] if c[0] in ("refused", "built an op")]
    assert refused == [c for c in twin["calls"] if c[0] in ("refused", "built an op")]
    assert refused == [["refused", "Graph is finalized and cannot be modified."]]


def test_stock_hooks_log_and_count_as_under_monitored_session(graph_mode_results):
    graph, twin = graph_mode_results["graph"]["fit"], graph_mode_results["twin"]["fit"]
    assert [line.split(" (")[0] for line in graph["lines"]] == [line.split(" (")[0] for line in twin["lines"]]
    assert len(graph["lines"]) == 3
    assert graph["events"] == twin["events"]  # "global_step/sec" at the same steps
    assert graph["events"]


def test_evaluate_gives_each_batch_its_loss_at_the_trained_step(graph_mode_results):
    graph, twin = graph_mode_results["graph"]["evaluate"], graph_mode_results["twin"]["evaluate"]
    assert _calls(graph) == _calls(twin)
    ours = [c for c in graph if c[0] == "after_run"]
    theirs = [c for c in twin if c[0] == "after_run"]
    assert len(ours) == 3
    for a, b in zip(ours, theirs, strict=True):
        assert a[1] == pytest.approx(b[1], rel=1e-6)
        assert a[3] == b[3] == 8 and a[7:] == b[7:]


def test_run_options_are_merged_and_honoured(graph_mode_results):
    seen = graph_mode_results["options"]["seen"]
    assert len(seen) == 6
    for index, (trace_level, timeout, oom, traced_matmul) in enumerate(seen):
        # ProfilerHook(save_steps=2) asks for FULL_TRACE (3) on every other step; the max wins.
        assert timeout == 60000 and oom is False
        assert trace_level == (3 if index % 2 == 1 else 0)
        assert traced_matmul is (trace_level == 3)  # run_metadata.step_stats of the real run


def test_profiler_hook_writes_timelines_of_the_steps_ops(graph_mode_results):
    timelines = graph_mode_results["options"]["timelines"]
    assert timelines == {"timeline-2.json": True, "timeline-4.json": True, "timeline-6.json": True}


def test_oom_report_requested_by_a_hook_is_in_the_error(graph_mode_results):
    message = graph_mode_results["oom"]
    assert message is not None
    assert "OOM when allocating tensor with shape[1099511627776]" in message
    assert "Current usage from device" in message  # TF1's allocation report


def test_graph_mode_and_eager_tf_keras_give_hooks_the_same(graph_mode_results):
    graph, eager = graph_mode_results["graph"], graph_mode_results["eager"]
    for run in ("fit", "evaluate"):
        ours = graph[run]["calls"] if run == "fit" else graph[run]
        theirs = eager[run]["calls"] if run == "fit" else eager[run]
        assert _calls(ours) == _calls(theirs)
        for a, b in zip(ours, theirs, strict=True):
            if a[0] == "after_run":
                assert a[1] == pytest.approx(b[1], rel=1e-6) and a[5] == pytest.approx(b[5], rel=1e-6)
                assert a[2:5] == b[2:5] and a[6:] == b[6:]
            elif a[0] == "after_create_session":  # Keras's Session; eager's adapter session
                assert (a[1], b[1], a[2]) == ("Session", "AdapterSession", b[2])
            else:
                assert a == b
    assert [line.split(" (")[0] for line in graph["fit"]["lines"]] == [
        line.split(" (")[0] for line in eager["fit"]["lines"]
    ]
    assert graph["fit"]["events"] == eager["fit"]["events"]
    for ours_w, theirs_w in zip(graph["fit"]["weights"], eager["fit"]["weights"], strict=True):
        np.testing.assert_allclose(ours_w, theirs_w, rtol=1e-6)


def test_checkpoints_and_summaries_as_under_monitored_session(graph_mode_results):
    ours, theirs = graph_mode_results["files"], graph_mode_results["twin_files"]
    # CheckpointSaverHook(save_steps=3) over 6 steps: 0 (at session creation), 3, 6; TF1 names.
    assert ours["checkpoints"] == theirs["checkpoints"] == [0, 3, 6]
    assert ours["global_step"] == theirs["global_step"] == 6
    np.testing.assert_allclose(ours["kernel"], theirs["kernel"], rtol=1e-6)
    assert ours["kernel"] == ours["weights"]  # the model's weights at the last step
    # SummarySaverHook(save_steps=2) over the loss: the same steps and the batches' own losses.
    assert [s[0] for s in ours["summaries"]] == [s[0] for s in theirs["summaries"]] == [1, 3, 5]
    np.testing.assert_allclose([s[1] for s in ours["summaries"]], [s[1] for s in theirs["summaries"]], rtol=1e-6)


def test_checkpoints_restore_both_ways(graph_mode_results):
    files = graph_mode_results["files"]
    assert files["restored_in_tf1"] == files["kernel"]  # tf_keras's checkpoint into plain TF1
    assert files["restored_from_tf1"] == files["tf1_kernel"]  # TF1's into tf_keras, by a hook
