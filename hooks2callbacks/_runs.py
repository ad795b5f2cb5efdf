"""The runs open in this process, and the release of what they hold.

Keras calls no callback when it raises (an error in the model's step, Ctrl-C
during a step), so a run can be left open. This module decides when such a run
is over, and makes sure nothing it holds outlives it:

* Each run records the Keras loop that started it: the frame that called the
  callbacks' `on_*_begin`. When a run begins, an open run of the same thread
  whose loop frame is no longer on the stack was left open by an exception, and
  is closed (without `end()`, as TF1 skips `end()` after an error).
* A hook instance keeps per-run state, so it is in one open run at a time. A
  run that would share a hook with a run still going is refused before any
  hook is called.
* `SummaryWriterCache` writers are flushed whenever a run closes, so what hooks
  wrote is on disk. They stay open, one per directory, as in TF1: a writer
  closed and made anew within the same second would overwrite its event file.
* At interpreter exit, open runs are closed, so their events are on disk.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any, Protocol

from hooks2callbacks._seams import FileWriterCache


class Run(Protocol):
    """What this module needs of a run (a `HookRunner`)."""

    name: str

    def close(self) -> None: ...


class _Record:
    __slots__ = ("frame", "hooks", "thread")

    def __init__(self, frame: FrameType | None) -> None:
        self.frame = frame
        self.hooks: Sequence[Any] = ()
        self.thread = threading.get_ident()


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_lock = threading.RLock()
_open: dict[Run, _Record] = {}
_owners: dict[int, Run] = {}  # id(hook) -> its run; the run holds the hook, so ids stay unique


def loop_frame() -> FrameType | None:
    """The frame of the Keras loop (or user code) that called `on_*_begin`; call it from there."""
    frame: FrameType | None = sys._getframe(1)  # pylint: disable=protected-access
    # Skip this package, then Keras's CallbackList.on_*_begin (or a callback
    # that forwards its events to ours).
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    while frame is not None and frame.f_code.co_name.startswith("on_"):
        frame = frame.f_back
    return frame


def _stack_ids() -> set[int]:
    ids = set()
    frame: FrameType | None = sys._getframe(1)  # pylint: disable=protected-access
    while frame is not None:
        ids.add(id(frame))
        frame = frame.f_back
    return ids


def enter(run: Run, frame: FrameType | None) -> None:
    """Registers `run` as open. Open runs of this thread whose Keras loop has ended are closed first.

    Args:
        run: The run.
        frame: Its Keras loop, as `loop_frame()` found it in `on_*_begin`.
    """
    on_stack = _stack_ids()
    me = threading.get_ident()
    with _lock:
        stale = [r for r, rec in _open.items() if rec.thread == me and id(rec.frame) not in on_stack]
    for other in stale:
        other.close()
    with _lock:
        _open[run] = _Record(frame)


def claim(run: Run, hooks: Sequence[Any]) -> None:
    """Records that the open `run` calls `hooks`.

    Raises:
        ValueError: A hook is in another run that is still going (one hook
            instance in two callbacks of one Keras call, or in two threads).
    """
    with _lock:
        for index, hook in enumerate(hooks):
            other = _owners.get(id(hook))
            if other is not None and other is not run:
                raise ValueError(
                    f"{run.name}: hook {index} ({type(hook).__name__}) is already running in "
                    f"{other.name}. A hook instance keeps the state of one run, so it cannot "
                    "be in two runs at once (two HookCallbacks of one fit(), or a train-mode "
                    "and an eval-mode one). Give each HookCallback its own hook instances."
                )
        _open[run].hooks = hooks
        for hook in hooks:
            _owners[id(hook)] = run


def leave(run: Run) -> None:
    """Unregisters a closed `run` and flushes the summary writers."""
    with _lock:
        record = _open.pop(run, None)
        for hook in record.hooks if record is not None else ():
            if _owners.get(id(hook)) is run:
                del _owners[id(hook)]
    # Stock hooks write through SummaryWriterCache, which flushes only every
    # 120 s; what they wrote must be on disk when the run is over.
    with FileWriterCache._lock:  # pylint: disable=protected-access
        writers = list(FileWriterCache._cache.values())  # pylint: disable=protected-access
    for writer in writers:
        writer.flush()


@atexit.register
def _close_open_runs() -> None:
    with _lock:
        runs = list(_open)
    for run in runs:
        run.close()
