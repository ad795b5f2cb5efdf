"""The same recording hooks under TF1's MonitoredSession and under HookCallback."""

from __future__ import annotations

import functools

import pytest
import tensorflow as tf

from support import RecordingHook, run_keras, run_tf1


@pytest.mark.parametrize("stop_at", [None, 0, 3, 9, 14])
@pytest.mark.parametrize("n_hooks", [1, 3])
def test_call_sequence_matches_monitored_session(K, stop_at, n_hooks):
    records = {}
    for system, run in (("tf1", run_tf1), ("keras", functools.partial(run_keras, K))):
        calls: list = []
        hooks = [RecordingHook(f"h{i}", calls, stop_at=stop_at if i == n_hooks - 1 else None) for i in range(n_hooks)]
        run(hooks, max_steps=20)
        records[system] = calls
    assert records["keras"] == records["tf1"]
    assert records["tf1"][-1][1] == "end"


@pytest.mark.parametrize("kwargs", [dict(num_steps=7), dict(last_step=13), dict(last_step=40)])
def test_stop_at_step_hook_stops_where_tf1_stops(K, kwargs):
    records = {}
    for system, run in (("tf1", run_tf1), ("keras", functools.partial(run_keras, K))):
        calls: list = []
        hooks = [RecordingHook("rec", calls), tf.compat.v1.train.StopAtStepHook(**kwargs)]
        run(hooks, max_steps=20)
        records[system] = calls
    assert records["keras"] == records["tf1"]
