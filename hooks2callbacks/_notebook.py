"""`notebook_logging()`: TF's logger set up so that hook lines read well in Jupyter.

Left as TensorFlow sets it up, the `tensorflow` logger writes to stderr, which a
notebook shows apart from stdout: a hook line can appear above a `print()` made
before it. After `logging.basicConfig(level=INFO)` its records also reach the
root logger's handler, so each line prints twice; and a hook line written while
Keras's progress bar is drawn (`verbose=1`) continues the bar's line.

`notebook_logging()` gives the logger one handler that writes to `sys.stdout`
(the stream `print()` and the progress bar use, so the order is kept), stops the
records going on to the root logger, starts each line with the mode of the
`HookCallback` whose hook logged it (`[train]`, `[eval]`, `[predict]`), and
starts a new line first when the last text written to `sys.stdout` left one
open (the progress bar). To know that, it wraps the `write` method of the
`sys.stdout` object it finds (only that object, and only once).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import tensorflow as tf

from hooks2callbacks.callback import HookCallback

_CALLBACK_FILE = sys.modules[HookCallback.__module__].__file__


class _LineEnds:
    """Wraps a stream's `write`: remembers whether the text written so far ends its line."""

    def __init__(self, write: Any) -> None:
        self.write = write
        self.open = False

    def __call__(self, text: str) -> Any:
        if text:
            self.open = not text.endswith("\n")
        return self.write(text)


def _line_ends(stream: Any) -> _LineEnds | None:
    """The line-end tracker of `stream`, installed on its first use."""
    write = getattr(stream, "write", None)
    if isinstance(write, _LineEnds):
        return write
    try:
        stream.write = tracker = _LineEnds(write)
    except (AttributeError, TypeError):  # a stream whose methods cannot be replaced
        return None
    return tracker


def _mode_of_caller() -> str | None:
    """The mode of the `HookCallback` on the call stack (the innermost), or None outside one."""
    frame = sys._getframe(2)  # pylint: disable=protected-access
    while frame is not None:
        if frame.f_code.co_filename == _CALLBACK_FILE:
            owner = frame.f_locals.get("self")
            if isinstance(owner, HookCallback):
                return owner.mode
        frame = frame.f_back  # type: ignore[assignment]
    return None


class NotebookHandler(logging.Handler):
    """Writes TF's log records to the current `sys.stdout`, each on a line of its own.

    A line reads `[train] loss = 2.07, step = 10`: the mode of the `HookCallback`
    whose hook logged it, then the message; a level other than INFO is named
    (`[eval] WARNING: ...`). A record logged outside any `HookCallback` has no mode.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            mode = _mode_of_caller()
            text = self.format(record)
            if record.levelno != logging.INFO:
                text = f"{record.levelname}: {text}"
            if mode is not None:
                text = f"[{mode}] {text}"
            stream = sys.stdout
            tracker = _line_ends(stream)
            if tracker is not None and tracker.open:
                text = "\n" + text  # the progress bar's line is still open
            stream.write(text + "\n")
            stream.flush()
        except Exception:  # as logging's own handlers: a failed log line never stops training
            self.handleError(record)


def notebook_logging(level: int | str = logging.INFO) -> logging.Handler:
    """Sets up TensorFlow's logger for hook lines in a Jupyter notebook (or any console).

    After it, the lines of `LoggingTensorHook`, `StepCounterHook` and any hook
    that logs through `tf.compat.v1.logging` come out once each, on stdout in
    order with `print()` output, each on a line of its own (never glued to
    Keras's progress bar), starting with `[train]`, `[eval]` or `[predict]`.
    Calling it again (a re-run cell) changes nothing more.

    Example:

    ```python
    import hooks2callbacks
    hooks2callbacks.notebook_logging()
    model.fit(x, y, validation_data=(x_val, y_val), callbacks=[HookCallback(hooks)])
    # [train] loss = 2.07, step = 10 (0.031 sec)
    ```

    It replaces the logger's console handlers (plain `logging.StreamHandler`s,
    such as the one TensorFlow adds) with its own, keeps any other handler (a
    `FileHandler`), sets the logger's level, and sets `propagate = False`, so the
    root logger's handlers (`logging.basicConfig`) no longer print TF's records
    a second time.

    Args:
        level: The logger's level. Defaults to INFO, the level at which the
            stock hooks log (TF's own default, WARNING, drops their lines).

    Returns:
        The handler it installed.
    """
    logger = tf.get_logger()
    for handler in list(logger.handlers):
        if type(handler) in (logging.StreamHandler, NotebookHandler):
            logger.removeHandler(handler)
    handler = NotebookHandler()
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    _line_ends(sys.stdout)
    return handler
