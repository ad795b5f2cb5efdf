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
* A run left open (an interrupt, an error in Keras) is closed, and the model
  gets its own `train_function` back, at the first of these: in IPython or
  Jupyter, the end of the cell that ran the Keras call (its `post_run_cell`
  event); the next `fit`, `evaluate` or `predict` of that model, hooked or not
  (while a run is open, the model's `make_train_function`, `make_test_function`
  and `make_predict_function`, which each of those calls before its first step,
  close it first); the next run of any `HookCallback` in the thread;
  `HookCallback.close()`; interpreter exit.
* A run whose Keras 3 loop stopped mid-epoch (a hook's stop request) closes
  that epoch when it closes: Keras 3 leaves it in a reference cycle that holds
  the epoch's data iterator until the garbage collector runs, which then
  deletes it (and waits on its threads) in some later step.
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

from hooks2callbacks._seams import FileWriterCache, keras3_close_stopped_epoch


class Run(Protocol):
    """What this module needs of a run (a `HookRunner`)."""

    name: str
    model: Any

    def close(self) -> None: ...


class _Record:
    __slots__ = ("frame", "hooks", "in_keras", "model", "thread")

    def __init__(self, frame: FrameType | None, model: Any) -> None:
        self.frame = frame
        self.model = model
        # Started by Keras's own fit/evaluate/predict (not by a loop that drives the callback itself).
        self.in_keras = in_keras(frame)
        self.hooks: Sequence[Any] = ()
        self.thread = threading.get_ident()


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_KERAS_PACKAGES = ("keras.", "tf_keras.")
# Every fit, evaluate and predict calls one of these before its first step (Keras 3 on every
# backend, 3.0 to 3.15; tf_keras 2.15 to 2.21); the model gets an instance-level override of
# each while a run of it is open.
_ENTRY_POINTS = ("make_train_function", "make_test_function", "make_predict_function")
_OVERRIDE = "_hooks2callbacks_closes_stale_runs"
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


def in_keras(frame: FrameType | None) -> bool:
    """Whether `frame` (from `loop_frame`) is Keras's fit/evaluate/predict, not a loop that drives callbacks itself."""
    return frame is not None and str(frame.f_globals.get("__name__", "")).startswith(_KERAS_PACKAGES)


_KERAS_CALLS = frozenset({"fit", "evaluate", "predict"})


def in_keras_call(frame: FrameType | None) -> bool:
    """Whether `frame` or a caller of it is Keras's own fit/evaluate/predict (Keras 3 or tf_keras).

    False for a training loop of the user's own that drives the callbacks: the
    model's compiled step does not run there. True for a callback (or a
    benchmark's rotator) that forwards fit's events to ours.
    """
    while frame is not None:
        if frame.f_code.co_name in _KERAS_CALLS and in_keras(frame):
            return True
        frame = frame.f_back
    return False


def _stack_ids() -> set[int]:
    ids = set()
    frame: FrameType | None = sys._getframe(1)  # pylint: disable=protected-access
    while frame is not None:
        ids.add(id(frame))
        frame = frame.f_back
    return ids


def close_stale(keras_only: bool = False) -> None:
    """Closes the open runs of this thread whose loop has ended (an exception left them open).

    Args:
        keras_only: Only runs that Keras's own fit/evaluate/predict started.
    """
    on_stack = _stack_ids()
    me = threading.get_ident()
    with _lock:
        stale = [
            r
            for r, rec in _open.items()
            if rec.thread == me and id(rec.frame) not in on_stack and (rec.in_keras or not keras_only)
        ]
    for run in stale:
        run.close()


def enter(run: Run, frame: FrameType | None) -> None:
    """Registers `run` as open. Open runs of this thread whose Keras loop has ended are closed first.

    Until it is closed, the next Keras call of its model closes it if an exception
    leaves it open (see the module docstring), and so does the end of the cell in IPython.

    Args:
        run: The run.
        frame: Its Keras loop, as `loop_frame()` found it in `on_*_begin`.
    """
    close_stale()
    with _lock:
        _open[run] = _Record(frame, run.model)
    _watch(run.model)
    _watch_cells()


def _watch(model: Any) -> None:
    """Makes the model's next fit, evaluate or predict close stale runs before it builds its step."""
    attributes = getattr(model, "__dict__", None)
    if attributes is None:
        return
    for name in _ENTRY_POINTS:
        own = getattr(type(model), name, None)
        if own is None or name in attributes:  # ours already, or the user's own override
            continue

        def entry(*args: Any, own_method: Any = own, **kwargs: Any) -> Any:
            close_stale()
            return own_method(model, *args, **kwargs)

        setattr(entry, _OVERRIDE, True)
        attributes[name] = entry  # past Keras's __setattr__: nothing for it to track


def _unwatch(model: Any) -> None:
    attributes = getattr(model, "__dict__", None) or {}
    for name in _ENTRY_POINTS:
        if getattr(attributes.get(name), _OVERRIDE, False):
            del attributes[name]


_cells_watched = False


def _watch_cells() -> None:
    """In IPython, closes at the end of each cell the runs that cell's Keras calls left open."""
    global _cells_watched  # pylint: disable=global-statement
    ipython = sys.modules.get("IPython")
    if _cells_watched or ipython is None:
        return
    shell = ipython.get_ipython()
    if shell is None:
        return
    _cells_watched = True
    # Only runs of Keras's own loops: a loop that drives the callback itself may span cells.
    shell.events.register("post_run_cell", lambda result: close_stale(keras_only=True))


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
        watched = record is not None and not any(r.model is record.model for r in _open.values())
    if watched and record is not None:
        _unwatch(record.model)
    if record is not None:
        keras3_close_stopped_epoch(record.frame)
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
