"""Faults mid-training: what the user sees, which hook methods ran, and that nothing leaks.

The contract (docs/errors.md, "Errors and guarantees") is TF1's `MonitoredSession`'s:
an exception propagates unchanged, `after_run` of the failing step and every
`end()` are skipped. The call sequences are compared with a real
`MonitoredSession` running the same hooks. After each fault: the adapter's
session is closed, events written so far are on disk, no thread is left
behind, and the next `fit` works, with the same or a new `HookCallback`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from support import (
    RecordingHook,
    checkpoint_steps,
    iterations,
    make_data,
    make_model,
    nan_sample_weight,
    needs_backend,
    read_scalars,
    run_tf1,
)
from tensorflow.python.summary.writer.writer_cache import FileWriterCache

from hooks2callbacks import HookCallback, log_tensor, restore_checkpoint

T = tf.compat.v1.train
X, Y = make_data()  # 10 batches of 32
METHODS = ["begin", "after_create_session", "before_run", "after_run", "end"]


class Boom(Exception):
    pass


class FailingHook(RecordingHook):
    """A RecordingHook whose `method` raises `error` on its third step (or at once, outside steps)."""

    def __init__(self, calls: list, method: str | None, error: type[BaseException] = Boom) -> None:
        super().__init__("failing", calls)
        self.method = method
        self.error = error
        self.steps = 0

    def _maybe_fail(self, method: str) -> None:
        if method == self.method and (method in ("begin", "after_create_session", "end") or self.steps > 2):
            raise self.error(method)

    def begin(self):
        super().begin()
        self._maybe_fail("begin")

    def after_create_session(self, session, coord):
        self.session = session
        super().after_create_session(session, coord)
        self._maybe_fail("after_create_session")

    def before_run(self, run_context):
        self.steps += 1
        args = super().before_run(run_context)
        self._maybe_fail("before_run")
        return args

    def after_run(self, run_context, run_values):
        super().after_run(run_context, run_values)
        self._maybe_fail("after_run")

    def end(self, session):
        super().end(session)
        self._maybe_fail("end")


@contextlib.contextmanager
def no_thread_left_behind() -> Iterator[None]:
    """Checks that the block leaves no new thread but SummaryWriterCache's writers' own.

    TF keeps one cached writer (with its thread) per directory for the
    process, as in TF1; closing it would lose data (test_runs.py).
    """
    before = set(threading.enumerate())
    yield
    writers = {w.event_writer._worker for w in FileWriterCache._cache.values()}  # pylint: disable=protected-access
    assert set(threading.enumerate()) - before - writers == set()


def fit(model: Any, callback: HookCallback, epochs: int = 1, x: Any = X, y: Any = Y, **kwargs: Any) -> None:
    model.fit(x, y, batch_size=32, epochs=epochs, verbose=0, shuffle=False, callbacks=[callback], **kwargs)


def summary_values(directory: Any, tag: str) -> dict[int, float]:
    """The values of `tag` in the event files of `directory`, by step, as read from disk."""
    return dict(read_scalars(directory).get(tag, []))


@pytest.mark.parametrize("method", METHODS)
def test_an_error_in_a_hook_method_follows_monitored_session(K, method):
    records = {}
    for system in ("tf1", "keras"):
        calls: list = []
        hooks = [RecordingHook("before", calls), FailingHook(calls, method), RecordingHook("after", calls)]
        with pytest.raises(Boom) as info:
            if system == "tf1":
                run_tf1(hooks, max_steps=10)
            else:
                with no_thread_left_behind():
                    callback = HookCallback(hooks)
                    fit(make_model(K), callback)
        records[system] = calls
    assert records["keras"] == records["tf1"]
    # What the user sees: the hook's own exception and traceback, and a note naming the call.
    assert info.value.args == (method,)
    assert info.traceback[-1].name == "_maybe_fail"
    assert f"Raised in FailingHook.{method}(), called by HookCallback." in info.value.__notes__
    # The run is closed (no real session left open), and the same hooks work again.
    session = getattr(hooks[1], "session", None)  # None when begin failed: no session yet
    assert callback._runner is None or callback._runner.closed
    assert session is None or (session._runner.closed and session._session is None)
    hooks[1].method = None
    calls = hooks[0].calls
    calls.clear()
    fit(make_model(K), callback)
    assert calls[-1] == ("after", "end")


def test_keyboard_interrupt_from_a_hook_propagates_as_in_monitored_session(K):
    records = {}
    for system in ("tf1", "keras"):
        calls: list = []
        hooks = [FailingHook(calls, "after_run", KeyboardInterrupt), RecordingHook("after", calls)]
        with pytest.raises(KeyboardInterrupt) as info:
            if system == "tf1":
                run_tf1(hooks, max_steps=10)
            else:
                with no_thread_left_behind():
                    fit(make_model(K), HookCallback(hooks))
        records[system] = calls
    assert records["keras"] == records["tf1"]
    assert ("failing", "after_run", 2, False) == records["keras"][-1]  # the third step, mid-epoch
    assert "Raised in FailingHook.after_run(), called by HookCallback." in info.value.__notes__
    hooks[0].method = None
    fit(make_model(K), HookCallback(hooks))  # a new callback with the same hooks works


def test_events_written_before_an_error_are_on_disk(K, tmp_path):
    calls: list = []
    recorder = RecordingHook("rec", calls, fetches="loss")
    failing = FailingHook(calls, "after_run")

    def make_hooks():
        summary = tf.compat.v1.summary.scalar("loss", log_tensor("loss"))
        return [recorder, T.SummarySaverHook(save_steps=1, output_dir=str(tmp_path), summary_op=summary), failing]

    with no_thread_left_behind(), pytest.raises(Boom):
        fit(make_model(K), HookCallback(make_hooks))
    # Read back with nothing flushed by the test: every step the summary hook saw, the failing one too.
    on_disk = summary_values(tmp_path, "loss")
    assert sorted(on_disk) == list(range(1, len(recorder.results) + 1)) and len(on_disk) == 3
    np.testing.assert_allclose([on_disk[s] for s in sorted(on_disk)], recorder.results, rtol=1e-6)


class FailsOnFifthBatch:
    """A layer (mixed into each flavour's Layer) that raises on the 5th batch."""

    def build(self, input_shape):
        self.count = self.add_weight(shape=(), initializer="zeros", trainable=False, name="count")

    def call(self, x):
        self.count.assign_add(1.0)
        tf.debugging.assert_less(self.count, 5.0, message="fifth batch")
        return x


def failing_model(K: Any) -> Any:
    """The small model behind a `FailsOnFifthBatch` layer of Keras package `K`."""
    layer = type("Fails", (FailsOnFifthBatch, K.layers.Layer), {})()
    model = K.Sequential([K.Input((X.shape[1],)), layer, make_model(K)])
    model.compile("sgd", K.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


@needs_backend("tensorflow", reason="the failing layer raises through a TF op")
@pytest.mark.parametrize("cleanup", ["with", "close", "next-begin"])
def test_an_error_in_the_model_step_leaves_a_run_that_is_closed_later(K, tmp_path, cleanup):
    calls: list = []

    def make_hooks():
        summary = tf.compat.v1.summary.scalar("loss", log_tensor("loss"))
        return [
            RecordingHook("h", calls),
            T.SummarySaverHook(save_steps=1, output_dir=str(tmp_path), summary_op=summary),
        ]

    with no_thread_left_behind():
        with HookCallback(make_hooks) as callback:
            with pytest.raises(tf.errors.InvalidArgumentError, match="fifth batch"):
                fit(failing_model(K), callback)
            # Keras calls no callback on its own errors: the run is still open, end() not called.
            left_open = callback._runner
            assert not left_open.closed and ("h", "end") not in calls
            if cleanup == "close":
                callback.close()
            elif cleanup == "next-begin":
                # The next run in this thread closes it, whichever callback it is.
                fit(make_model(K), HookCallback(RecordingHook("next", calls)))
        assert left_open.closed and ("h", "end") not in calls
    # The 4 steps that ran were flushed to disk when the run was closed.
    assert sorted(summary_values(tmp_path, "loss")) == [1, 2, 3, 4]


def test_nan_loss_stops_with_the_earlier_checkpoints_intact(K, tmp_path):
    weights = nan_sample_weight(len(X), 4 * 32, 5 * 32)  # the 5th batch; the inputs stay finite
    hooks = [T.CheckpointSaverHook(str(tmp_path), save_steps=2), T.NanTensorHook("loss")]
    model = make_model(K)
    with no_thread_left_behind(), pytest.raises(T.NanLossDuringTrainingError) as info:
        fit(model, HookCallback(hooks), sample_weight=weights)
    assert "Raised in NanTensorHook.after_run(), called by HookCallback." in info.value.__notes__
    assert iterations(model) == 5 and not np.isfinite(model.get_weights()[0]).all()
    # Saved at 0, 2 and 4; end() (the final save, of NaN weights) was skipped as in TF1.
    assert checkpoint_steps(tmp_path) == [0, 2, 4]
    reference = make_model(K)
    reference.fit(X[:128], Y[:128], batch_size=32, epochs=1, verbose=0, shuffle=False)
    restored = make_model(K)
    assert restore_checkpoint(restored, str(tmp_path)) == str(tmp_path / "model.ckpt-4")
    for weights, expected in zip(restored.get_weights(), reference.get_weights(), strict=True):
        assert np.isfinite(weights).all()
        np.testing.assert_allclose(weights, expected, rtol=1e-6)


@contextlib.contextmanager
def unwritable(directory: Any) -> Iterator[None]:
    """Makes `directory` refuse new files, as a root-owned mount or a revoked permission would."""
    if os.geteuid() == 0:  # root ignores permission bits; the immutable attribute stops root too
        result = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot make a directory unwritable as root here: chattr: {result.stderr.strip()}")
        undo = ["chattr", "-i", str(directory)]
    else:
        os.chmod(directory, 0o500)
        undo = ["chmod", "700", str(directory)]
    try:
        yield
    finally:
        subprocess.run(undo, check=True)


def test_a_checkpoint_directory_made_unwritable_mid_run_is_a_clear_error(K, tmp_path):
    directory = tmp_path / "ckpt"
    stack = contextlib.ExitStack()

    def revoke(batch, logs):
        if batch == 2:  # after the checkpoint of step 2
            stack.enter_context(unwritable(directory))

    model = make_model(K)
    revoker = K.callbacks.LambdaCallback(on_train_batch_end=revoke)
    hooks = [T.CheckpointSaverHook(str(directory), save_steps=2)]
    with stack, no_thread_left_behind(), pytest.raises(OSError) as info:
        model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[HookCallback(hooks), revoker])
    message = str(info.value)
    assert f"Could not write the checkpoint {directory}/model.ckpt-4 of the Keras model" in message
    assert f"Check that {directory} is writable and has free space" in message
    # TF's own error is in the message (Keras's traceback filter drops `__cause__`).
    assert "ckpt/model.ckpt-4_temp" in message and ("not permitted" in message or "denied" in message)
    assert "Raised in CheckpointSaverHook.after_run(), called by HookCallback." in info.value.__notes__
    # The earlier checkpoints survive, and the newest of them restores.
    assert checkpoint_steps(directory) == [0, 2]
    restored = make_model(K)
    assert restore_checkpoint(restored, str(directory)) == str(directory / "model.ckpt-2")
    assert iterations(restored) == 2


DIES_OF_A_MODEL_ERROR = """
import sys
sys.path.insert(0, {tests!r})
import tensorflow as tf
import keras
from hooks2callbacks import HookCallback, log_tensor
from test_faults import X, Y, failing_model

def make_hooks():
    summary = tf.compat.v1.summary.scalar("loss", log_tensor("loss"))
    return [tf.compat.v1.train.SummarySaverHook(save_steps=1, output_dir={out!r}, summary_op=summary)]

failing_model(keras).fit(X, Y, batch_size=32, verbose=0, shuffle=False, callbacks=[HookCallback(make_hooks)])
"""


@pytest.mark.slow
@needs_backend("tensorflow", reason="the failing layer raises through a TF op")
def test_a_script_that_dies_of_a_model_error_still_writes_its_events(tmp_path):
    # Nothing closes the run but the interpreter's exit; TF's writer would
    # otherwise flush only after 120 s, so the events would be lost.
    script = DIES_OF_A_MODEL_ERROR.format(tests=os.path.dirname(__file__), out=str(tmp_path))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1 and "fifth batch" in result.stderr
    assert sorted(summary_values(tmp_path, "loss")) == [1, 2, 3, 4]
