"""Hooks that need more than a graph: checkpoints of the Keras model, refused hooks.

The file-writing stock hooks run under a real TF1 MonitoredSession and under
HookCallback with the same arguments; their schedules (listener calls,
checkpoint steps, summary steps and values, step-counter steps) must match.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import BeforeStep, FakeClock, checkpoint_steps, iterations, make_data, make_model, read_scalars, run_tf1
from tensorflow.python.training import basic_session_run_hooks, training_util

from hooks2callbacks import HookCallback, restore_checkpoint

T = tf.compat.v1.train
X, Y = make_data()  # 320 samples: 10 steps an epoch at batch 32


class RecordingListener(T.CheckpointSaverListener):
    """Records the listener calls with their steps; `after_save` returns `stop_after(step)`."""

    def __init__(self, stop_after=lambda step: False) -> None:
        self.calls: list = []
        self.stop_after = stop_after

    def begin(self):
        self.calls.append(("begin",))

    def before_save(self, session, global_step_value):
        self.calls.append(("before_save", int(global_step_value)))

    def after_save(self, session, global_step_value):
        self.calls.append(("after_save", int(global_step_value)))
        return self.stop_after(int(global_step_value))

    def end(self, session, global_step_value):
        self.calls.append(("end", int(global_step_value)))


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


# -- what the checkpoints hold ------------------------------------------------------


def fit_with_checkpoints(directory, epochs=1, K=keras, **hook_kwargs):
    model = make_model(K)
    model.fit(
        X,
        Y,
        batch_size=32,
        epochs=epochs,
        verbose=0,
        shuffle=False,
        callbacks=[HookCallback([T.CheckpointSaverHook(str(directory), **hook_kwargs)])],
    )
    return model


def test_restoring_the_latest_checkpoint_gives_identical_weights_and_step(K, tmp_path):
    trained = fit_with_checkpoints(tmp_path, save_steps=3, K=K)
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-10")

    fresh = make_model(K)
    assert restore_checkpoint(fresh, str(tmp_path)) == str(tmp_path / "model.ckpt-10")
    for restored, saved in zip(fresh.get_weights(), trained.get_weights(), strict=True):
        np.testing.assert_array_equal(restored, saved)
    assert iterations(fresh) == 10
    np.testing.assert_array_equal(fresh.predict(X, verbose=0), trained.predict(X, verbose=0))


def test_the_plain_tensorflow_one_liner_restores_the_weights(tmp_path):
    trained = fit_with_checkpoints(tmp_path, save_steps=5)
    fresh = make_model()
    tf.train.Checkpoint(model=fresh).read(tf.train.latest_checkpoint(str(tmp_path))).expect_partial()
    for restored, saved in zip(fresh.get_weights(), trained.get_weights(), strict=True):
        np.testing.assert_array_equal(restored, saved)


def test_an_earlier_checkpoint_holds_the_weights_of_its_step(tmp_path):
    fit_with_checkpoints(tmp_path, save_steps=4)
    # The weights after 4 steps, by training a second model 4 steps.
    reference = make_model()
    reference.fit(X[:128], Y[:128], batch_size=32, epochs=1, verbose=0, shuffle=False)
    fresh = make_model()
    restore_checkpoint(fresh, str(tmp_path / "model.ckpt-4"))
    assert iterations(fresh) == 4
    for restored, expected in zip(fresh.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(restored, expected, rtol=1e-6)


def test_training_resumed_from_a_checkpoint_continues_the_global_step(tmp_path):
    fit_with_checkpoints(tmp_path, save_steps=100)
    resumed = make_model()
    restore_checkpoint(resumed, str(tmp_path))
    listener = RecordingListener()
    resumed.fit(
        X,
        Y,
        batch_size=32,
        epochs=1,
        verbose=0,
        callbacks=[HookCallback([T.CheckpointSaverHook(str(tmp_path), save_steps=100, listeners=[listener])])],
    )
    assert listener.calls[1:] == [
        ("before_save", 10),
        ("after_save", 10),
        ("before_save", 20),
        ("after_save", 20),
        ("end", 20),
    ]
    assert checkpoint_steps(str(tmp_path))[-2:] == [10, 20]


def test_at_most_five_checkpoints_are_kept_as_by_a_scaffold_saver(tmp_path):
    fit_with_checkpoints(tmp_path, epochs=2, save_steps=2)
    assert checkpoint_steps(str(tmp_path)) == [12, 14, 16, 18, 20]
    indexes = sorted(name for name in os.listdir(tmp_path) if name.endswith(".index"))
    assert indexes == [f"model.ckpt-{step}.index" for step in (12, 14, 16, 18, 20)]


def test_restore_checkpoint_errors_say_what_to_pass(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"no checkpoint there\. Pass the directory a CheckpointSaverHook wrote to"
    ):
        restore_checkpoint(make_model(), str(tmp_path))
    fit_with_checkpoints(tmp_path, save_steps=5)
    other = keras.Sequential([keras.Input((8,)), keras.layers.Dense(5), keras.layers.Dense(3)])
    other.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=r"do not match the checkpoint's.*architecture that was saved"):
        restore_checkpoint(other, str(tmp_path))
    unbuilt = keras.Sequential([keras.layers.Dense(3)])
    with pytest.raises(ValueError, match=r"the model is not built.*keras.Input"):
        restore_checkpoint(unbuilt, str(tmp_path))


def test_restore_checkpoint_of_an_estimator_model_dir_is_a_short_error_naming_the_way_out(tmp_path):
    # What an Estimator's model_dir holds: a name-based checkpoint of a TF1 Saver.
    with tf.Graph().as_default():
        tf.compat.v1.Variable(np.ones((8, 16), "float32"), name="dense/kernel")
        tf.compat.v1.train.get_or_create_global_step()
        saver = T.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(tmp_path / "model.ckpt"), global_step=7)
    with pytest.raises(ValueError) as info:
        restore_checkpoint(make_model(), str(tmp_path))
    message = str(info.value)
    assert "this is a name-based TF1 checkpoint" in message and "['dense/kernel', 'global_step']" in message
    assert "tf.compat.v1.train.init_from_checkpoint" in message and "assignment_map" in message
    assert len(message) < 700  # no dump of the variables' values


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


@pytest.mark.parametrize(
    "keep, kept", [(2, [9, 10]), (None, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), (5, [6, 7, 8, 9, 10])]
)
def test_keep_checkpoint_max_keeps_the_newest_checkpoints_as_estimator_did(tmp_path, keep, kept):
    model = make_model(keras)
    hook = T.CheckpointSaverHook(str(tmp_path), save_steps=1)
    callback = HookCallback([hook]) if keep == 5 else HookCallback([hook], keep_checkpoint_max=keep)
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    assert checkpoint_steps(tmp_path) == kept


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "5"])
def test_keep_checkpoint_max_must_be_a_positive_int_or_none(bad):
    with pytest.raises(ValueError, match=r"keep_checkpoint_max=\.\.\.\) takes a positive int .* got"):
        HookCallback([], keep_checkpoint_max=bad)


SCRIPT_LOGGING_AS_TF1 = """
import numpy as np, tempfile, tensorflow as tf, keras
from hooks2callbacks import HookCallback
tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)  # as TF1 scripts did
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile("sgd", "mse")
hooks = [
    tf.compat.v1.train.CheckpointSaverHook(tempfile.mkdtemp(), save_steps=1),
    tf.compat.v1.train.LoggingTensorHook(["loss"], every_n_iter=1),
]
model.fit(np.zeros((64, 4)), np.zeros((64, 2)), batch_size=32, epochs=1, verbose=0, callbacks=[HookCallback(hooks)])
"""


def test_with_tf1_style_logging_each_hook_line_prints_once_after_a_checkpoint():
    """What the user's terminal shows: TF's checkpoint writer must not make absl configure the root logger."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT_LOGGING_AS_TF1],
        cwd=pathlib.Path(__file__).parent.parent,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("INFO:tensorflow:")]
    saves = [line for line in lines if "Saving checkpoints for" in line]
    losses = [line for line in lines if "loss = " in line]
    assert len(saves) == 3 and len(set(saves)) == 3, lines  # steps 0, 1, 2, each once
    assert len(losses) == 2, lines
