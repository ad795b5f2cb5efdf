"""Open runs and summary writers: flushed at each run's end, kept open as in TF1."""

from __future__ import annotations

import threading

import pytest
import tensorflow as tf
from support import make_data, make_model, read_scalars
from tensorflow.python.summary.writer.writer_cache import FileWriterCache

from hooks2callbacks import HookCallback

T = tf.compat.v1.train
X, Y = make_data(96)  # 3 steps a fit


def step_rate_steps(directory) -> list[int]:
    return [step for step, _ in read_scalars(directory).get("global_step/sec", [])]


def test_fits_in_quick_succession_lose_no_events_and_add_no_threads(tmp_path):
    hook = T.StepCounterHook(every_n_steps=1, output_dir=str(tmp_path))
    model = make_model()
    model.fit(X, Y, batch_size=32, verbose=0, callbacks=[HookCallback(hook)])
    threads = set(threading.enumerate())
    writer = FileWriterCache._cache[str(tmp_path)]
    for _ in range(3):  # within a second or so: a new writer would overwrite the event file
        model.fit(X, Y, batch_size=32, verbose=0, callbacks=[HookCallback(hook)])
    assert set(threading.enumerate()) == threads and FileWriterCache._cache[str(tmp_path)] is writer
    # Read without flushing: the rates of all 4 fits are on disk (step 1 only sets the baseline).
    assert step_rate_steps(tmp_path) == list(range(2, 13))


class DoubleLoss(tf.compat.v1.train.SessionRunHook):
    """Builds an op on the loss, so the run holds a real session, and sees each batch's loss."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.session = None

    def begin(self) -> None:
        self.calls.append("begin")
        self.double = tf.multiply(tf.compat.v1.get_default_graph().get_tensor_by_name("loss:0"), 2.0)

    def after_create_session(self, session, coord) -> None:
        self.session = session

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self.double)

    def after_run(self, run_context, run_values) -> None:
        self.calls.append("after_run")

    def end(self, session) -> None:
        self.calls.append("end")


def _interrupted_fit(K):
    """A hooked fit that Ctrl-C stops in Keras's loop: another callback raises KeyboardInterrupt."""
    from hooks2callbacks import _runs

    def interrupt(batch, logs):
        if batch == 1:
            raise KeyboardInterrupt

    model = make_model(K)
    hook = DoubleLoss()
    callback = HookCallback(hook)
    model.make_train_function()
    own = model.train_function  # Keras's own step function, made before any run
    try:
        model.fit(
            X,
            Y,
            batch_size=32,
            epochs=1,
            verbose=0,
            callbacks=[callback, K.callbacks.LambdaCallback(on_train_batch_end=interrupt)],
        )
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the fit was not interrupted")
    runner = callback._runner
    # Keras called no callback after the interrupt: the run is still open, the model's step ours.
    assert runner is not None and not runner.closed and runner in _runs._open
    assert model.train_function is not own and hook.session._session is not None
    return model, hook, runner, own


@pytest.mark.parametrize("call", ["fit", "evaluate", "predict"])
def test_after_an_interrupted_fit_the_next_unhooked_keras_call_gives_the_model_back_and_closes_the_run(K, call):
    from hooks2callbacks import _runs

    model, hook, runner, own = _interrupted_fit(K)
    if call == "fit":
        model.fit(X, Y, batch_size=32, epochs=1, verbose=0)
    elif call == "evaluate":
        model.evaluate(X, Y, batch_size=32, verbose=0)
    else:
        model.predict(X, batch_size=32, verbose=0)
    assert runner.closed and runner not in _runs._open
    assert hook.session._session is None  # the real session is closed
    assert model.train_function is own  # Keras's own, not the run's wrapped step
    assert not [name for name in vars(model) if name.startswith("make_")]  # no override left behind
    assert hook.calls == ["begin", "after_run", "after_run"]  # no end(), as TF1 after an error
