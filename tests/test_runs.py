"""Open runs and summary writers: flushed at each run's end, kept open as in TF1."""

from __future__ import annotations

import threading

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
