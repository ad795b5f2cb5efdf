"""`notebook_logging()` and a notebook's interrupted cell, in a real Jupyter kernel (`jupyter_client`).

Each test starts a `python3` kernel (ipykernel), runs cells as Jupyter does,
and reads the output messages each cell sent, in the order the front end gets them.
"""

from __future__ import annotations

import os
import queue
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from notebook_runner import _as_shown

jupyter_client = pytest.importorskip("jupyter_client")

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


class Kernel:
    """A running kernel; `run(code)` returns the cell's stream outputs as `(stream name, text)`, in order."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def run(self, code: str, timeout: float = 300) -> list[tuple[str, str]]:
        msg_id = self.client.execute(textwrap.dedent(code))
        outputs: list[tuple[str, str]] = []
        error = None
        while True:
            try:
                message = self.client.get_iopub_msg(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"the cell did not finish in {timeout} s: {code}") from None
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                outputs.append((content["name"], content["text"]))
            elif kind == "error":
                error = content
            elif kind == "status" and content["execution_state"] == "idle":
                break
        outputs.append(("error", f"{error['ename']}: {error['evalue']}") if error else ("ok", ""))
        return outputs


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    manager = jupyter_client.KernelManager(kernel_name="python3")
    manager.kernel_cmd = [
        sys.executable,
        "-m",
        "ipykernel_launcher",
        "-f",
        "{connection_file}",
        "--IPKernelApp.capture_fd_output=False",
    ]
    manager.start_kernel(env=env, cwd=str(ROOT))
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        yield Kernel(client)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


SETUP = """
    import logging
    logging.basicConfig(level=logging.INFO)  # the common set-up that used to print every line twice
    import tensorflow as tf
    import hooks2callbacks
    from hooks2callbacks import HookCallback
    from support import make_data, make_model
    X, Y = make_data()  # 10 batches of 32
    X_VAL, Y_VAL = make_data(64, seed=1)
    hooks2callbacks.notebook_logging()
    hooks2callbacks.notebook_logging()  # the cell run again: still one handler
    """

FIT = """
    print("before fit")
    model = make_model()
    history = model.fit(
        X, Y, batch_size=32, epochs=2, verbose=1, validation_data=(X_VAL, Y_VAL),
        callbacks=[
            HookCallback(tf.compat.v1.train.LoggingTensorHook({"loss": "loss"}, every_n_iter=3)),
            HookCallback(tf.compat.v1.train.LoggingTensorHook({"val_loss": "loss"}, every_n_iter=1), mode="eval"),
        ],
    )
    print("after fit")
    """


def _lines(outputs: list[tuple[str, str]], stream: str) -> list[str]:
    """The lines a front end shows for `stream`: the cell's messages joined, `\\b` and `\\r` applied."""
    return _as_shown("".join(text for name, text in outputs if name == stream)).splitlines()


def test_hook_lines_come_once_each_in_order_on_stdout_with_their_mode_and_apart_from_the_bar(kernel):
    assert kernel.run(SETUP)[-1] == ("ok", "")
    outputs = kernel.run(FIT)
    assert outputs[-1] == ("ok", ""), outputs[-1]
    assert not [text for name, text in outputs if name == "stderr" and "loss" in text], "hook lines on stderr"
    lines = _lines(outputs, "stdout")
    hook_lines = [line for line in lines if "loss = " in line and "━" not in line]
    # Every hook line is a line of its own that starts with its mode: none continues the progress bar.
    glued = [line for line in lines if (" = " in line or "] " in line) and not line.startswith(("[train] ", "[eval] "))]
    assert not glued, glued
    train = [line for line in hook_lines if line.startswith("[train] loss = ")]
    evals = [line for line in hook_lines if line.startswith("[eval] val_loss = ")]
    # Once each: every 3rd of 20 steps (0, 3, ..., 18), and each of 2 validation passes' 2 batches.
    assert len(train) == 7, lines
    assert len(evals) == 4, lines
    assert len(hook_lines) == 11
    # In order with print(): before fit, then the hook lines, then after fit.
    assert lines[0] == "before fit" and lines[-1] == "after fit"
    assert lines.index(train[0]) < lines.index(evals[0]) < lines.index(train[-1]) < lines.index(evals[-1])


def test_an_interrupted_fit_is_closed_and_the_model_given_back_when_its_cell_ends(kernel):
    assert kernel.run(SETUP)[-1] == ("ok", "")
    interrupted = kernel.run(
        """
        from hooks2callbacks import _batch
        model = make_model()
        callback = HookCallback(tf.compat.v1.train.LoggingTensorHook({"loss": "loss"}, every_n_iter=100))

        def interrupt(batch, logs):
            if batch == 2:
                raise KeyboardInterrupt

        model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[
            callback, tf.keras.callbacks.LambdaCallback(on_train_batch_end=interrupt)])
        """
    )
    assert interrupted[-1] == ("error", "KeyboardInterrupt: ")
    after = kernel.run(
        """
        print(callback._runner.closed, isinstance(model.train_function, _batch._Wrapped))
        """
    )
    # The next cell finds the run closed and the model's own step: no Keras call was needed.
    assert _lines(after, "stdout") == ["True False"]
