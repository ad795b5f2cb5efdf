"""Hooks that need more than a graph: the file-writing hooks' TF1 schedule, and refused hooks.

The file-writing stock hooks run under a real TF1 MonitoredSession and under
HookCallback with the same arguments; their schedules (listener calls,
checkpoint steps, summary steps and values, step-counter steps) must match.
"""

from __future__ import annotations

import keras
import pytest
import tensorflow as tf
from support import (
    BeforeStep,
    FakeClock,
    RecordingListener,
    checkpoint_steps,
    iterations,
    make_data,
    make_model,
    read_scalars,
    run_tf1,
)
from tensorflow.python.training import basic_session_run_hooks, training_util

from hooks2callbacks import HookCallback

T = tf.compat.v1.train
X, Y = make_data()  # 320 samples: 10 steps an epoch at batch 32


def scalars(directory, tag) -> list[tuple[int, float]]:
    return [(step, round(value, 5)) for step, value in read_scalars(directory).get(tag, [])]


def file_writing_hooks(directory, listener, stop_at=None, **timing):
    """A factory for the TF1 file-writing hooks, with a summary of the (stale) step."""

    def make_hooks():
        step = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        tf.compat.v1.summary.scalar("stale_step", tf.cast(step, tf.float32))
        hooks = [
            T.CheckpointSaverHook(str(directory), listeners=[listener], **timing.get("checkpoint", {"save_steps": 4})),
            T.SummarySaverHook(
                output_dir=str(directory),
                summary_op=tf.compat.v1.summary.merge_all(),
                **timing.get("summary", {"save_steps": 3}),
            ),
            T.StepCounterHook(output_dir=str(directory), **timing.get("counter", {"every_n_steps": 5})),
        ]
        if stop_at is not None:
            hooks.append(T.StopAtStepHook(last_step=stop_at))
        return hooks

    return make_hooks


def run_both(tmp_path, max_steps=20, stop_at=None, clock=None, stop_after=lambda step: False, K=keras, **timing):
    """Runs the file-writing hooks in TF1 and in Keras; returns what each system recorded."""
    seen = {}
    for system in ("tf1", "keras"):
        directory = tmp_path / system
        listener = RecordingListener(stop_after)
        make_hooks = file_writing_hooks(directory, listener, stop_at, **timing)
        if system == "tf1":
            run_tf1(make_hooks, max_steps, before_step=clock and (lambda: setattr(clock, "now", clock.now + 3)))
            final_step = None
        else:
            model = make_model(K)
            ticks = [BeforeStep(lambda: setattr(clock, "now", clock.now + 3))] if clock else []
            callback = HookCallback(lambda ticks=ticks, make_hooks=make_hooks: [*ticks, *make_hooks()])
            model.fit(X, Y, batch_size=32, epochs=max_steps // 10, verbose=0, callbacks=[callback])
            final_step = iterations(model)
        seen[system] = {
            "listener": listener.calls,
            "checkpoints": checkpoint_steps(directory),
            "summary": scalars(directory, "stale_step"),
            "counter_steps": [step for step, _ in scalars(directory, "global_step/sec")],
            "final_step": final_step,
        }
    return seen


def assert_same_schedule(seen):
    for key in ("listener", "checkpoints", "summary", "counter_steps"):
        assert seen["keras"][key] == seen["tf1"][key], key


# -- the TF1 schedule -----------------------------------------------------------


@pytest.mark.parametrize("stop_at", [None, 13])
def test_file_writing_hooks_follow_the_tf1_step_schedule(K, tmp_path, stop_at):
    seen = run_both(tmp_path, stop_at=stop_at, K=K)
    assert_same_schedule(seen)
    last = 20 if stop_at is None else stop_at
    assert seen["keras"]["final_step"] == last
    # Saved at creation, every 4 steps, and at the end unless just saved.
    expected = sorted({0, *range(4, last + 1, 4), last})[-5:]  # a Scaffold's saver keeps 5
    assert seen["keras"]["checkpoints"] == expected
    assert seen["keras"]["listener"][0] == ("begin",)
    assert seen["keras"]["listener"][-1] == ("end", last)
    assert seen["keras"]["summary"]  # the check above compared real, non-empty schedules
    assert seen["keras"]["counter_steps"]


def test_file_writing_hooks_with_save_secs_follow_the_tf1_clock(tmp_path, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(basic_session_run_hooks, "time", clock)
    seen = run_both(
        tmp_path,
        clock=clock,
        checkpoint={"save_secs": 10},
        summary={"save_secs": 7},
        counter={"every_n_steps": None, "every_n_secs": 8},
    )
    assert_same_schedule(seen)
    assert len(seen["keras"]["listener"]) > 6  # several timed saves happened


def test_a_listener_asking_to_stop_stops_training_where_tf1_stops(tmp_path):
    seen = run_both(tmp_path, stop_after=lambda step: step >= 8)
    assert_same_schedule(seen)
    assert seen["keras"]["final_step"] == 8


# -- refused hooks ---------------------------------------------------------------


def profiler_hook(directory):
    # Its constructor makes a v1 FileWriter, which TF2 allows only in a graph.
    with tf.Graph().as_default():
        return T.ProfilerHook(save_steps=5, output_dir=directory)


def graph_saver():
    with tf.Graph().as_default():
        tf.compat.v1.Variable(1.0, name="v")
        return T.Saver()


@pytest.mark.parametrize(
    "make_hook, message",
    [
        (
            profiler_hook,
            r"item 0 is a ProfilerHook\. .*no step stats.*keras\.callbacks\.TensorBoard\(log_dir, profile_batch",
        ),
        (
            lambda d: T.CheckpointSaverHook(d, save_steps=5, saver=graph_saver()),
            r"item 0 is a CheckpointSaverHook given its own saver= or scaffold=.*Leave both out",
        ),
        (
            lambda d: T.CheckpointSaverHook(d, save_steps=5, scaffold=T.Scaffold()),
            r"CheckpointSaverHook given its own saver= or scaffold=",
        ),
    ],
)
def test_hooks_that_cannot_work_are_refused_at_construction(tmp_path, make_hook, message):
    with pytest.raises(TypeError, match=message):
        HookCallback([make_hook(str(tmp_path))])
    # One hook without a list is refused as well, with the same reason.
    alone = message.replace(r"item 0 is a", r"HookCallback\(hooks=\.\.\.\) got a")
    with pytest.raises(TypeError, match=alone):
        HookCallback(make_hook(str(tmp_path)))
    with pytest.raises(TypeError, match=alone.replace("hooks=", "chief_only_hooks=")):
        HookCallback([], chief_only_hooks=make_hook(str(tmp_path)))


def test_a_refused_hook_from_a_factory_is_refused_at_fit_naming_the_factory(tmp_path):
    def make_hooks():
        return [T.ProfilerHook(save_steps=5, output_dir=str(tmp_path))]  # built in the adapter graph

    model = make_model()
    with pytest.raises(TypeError, match=r"What the hooks factory .*make_hooks\(\) returned: item 0 is a ProfilerHook"):
        model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[HookCallback(make_hooks)])
