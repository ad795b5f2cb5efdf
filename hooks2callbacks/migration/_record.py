"""What each side records: every call of each hook, and what it gave, logged, wrote and made.

A recorder is a subclass of the hook's own class made for it, sharing the
hook's `__dict__`: the hook's code runs unchanged, on its own state, and
`isinstance` checks (HookCallback's, a hook's own) still see its class. Each of
its methods records the call, runs the hook's, and notes what changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from hooks2callbacks._hook_list import HOOK_METHODS, as_hook_list
from hooks2callbacks.migration._data import _kind
from hooks2callbacks.migration._races import Race, RaceWatch

_SessionRunHook: Any = tf.compat.v1.train.SessionRunHook


@dataclasses.dataclass
class _Event:
    """One call of a hook method, and what it gave and did."""

    method: str
    step: int | None
    items: dict[str, Any] = dataclasses.field(default_factory=dict)
    lines: list[str] = dataclasses.field(default_factory=list)
    summaries: dict[str, Any] = dataclasses.field(default_factory=dict)
    files: list[str] = dataclasses.field(default_factory=list)
    fetch_names: dict[str, str] = dataclasses.field(default_factory=dict)
    racy: dict[str, Any] = dataclasses.field(default_factory=dict)  # path -> a tensor TF1 read unordered
    read_before: dict[str, Any] = dataclasses.field(default_factory=dict)  # path -> its value before the run


@dataclasses.dataclass
class _Time:
    """A time-dependent value: compared as present or absent."""

    def __repr__(self) -> str:
        return "<time>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Time)

    __hash__ = None  # type: ignore[assignment]


class _Side:
    """One side's record: the hooks' events, the current call (for log lines and summaries), the files."""

    def __init__(self, name: str, root: str) -> None:
        self.name = name
        self.root = root
        self.hooks: list[str] = []
        self.events: list[list[_Event]] = []
        self.current: _Event | None = None
        self.step = 0
        self.files: set[str] = set()
        self.error: BaseException | None = None
        # The TF1 side's: where the graph leaves a read's order to the scheduler, and which
        # order this run gives the hooks (0: read before write, 1: after; see _races).
        self.watch: RaceWatch | None = None
        self.order = 0
        self.races: dict[tuple[str, str], Race] = {}
        self.logs: list[dict[str, float]] = []  # the Keras side's: each batch's logs, as Keras gave them

    def new_files(self) -> list[str]:
        found = set()
        for directory, _, names in os.walk(self.root):
            for name in names:
                found.add(os.path.relpath(os.path.join(directory, name), self.root))
        new = sorted(found - self.files)
        self.files = found
        return new


_active: list[_Side] = []  # the side running now (one at a time), for the log handler and summaries


def side() -> str | None:
    """Which side of `check_migration` is running now: `"tf1"`, `"keras"`, or None outside a check.

    A hooks factory is called once on each side, inside that side's graph; one
    that must build a hook differently on each side asks here:

    ```python
    from hooks2callbacks.migration import side

    def hooks():
        loss = hooks2callbacks.log_tensor("loss") if side() == "keras" else "cross_entropy:0"
        return [tf.compat.v1.train.LoggingTensorHook({"loss": loss}, every_n_iter=10)]
    ```

    Returns:
        `"tf1"` while the TF1 side runs (in either order of `_races`), `"keras"`
        while the Keras side runs, None otherwise.
    """
    if not _active:
        return None
    return "keras" if _active[-1].name == "keras" else "tf1"


class _LogCapture(logging.Handler):
    """Keeps each line logged during a hook's method, for that call."""

    def emit(self, record: logging.LogRecord) -> None:
        side = _active[-1] if _active else None
        if side is not None and side.current is not None:
            side.current.lines.append(record.getMessage())


def _wrap(hook: Any, index: int, side: _Side) -> Any:
    """Returns a recorder of `hook`: its class's subclass, on its `__dict__`, recording each call."""
    cls = type(hook)
    if not hasattr(hook, "__dict__"):
        raise TypeError(
            f"check_migration(hooks=...): item {index} ({cls.__name__}) has no __dict__ (it uses "
            "__slots__), so it cannot be recorded without changing it. Wrap it in a plain "
            "SessionRunHook subclass that forwards each method to it."
        )
    name = f"{index} {cls.__name__}"
    side.hooks.append(name)
    events: list[_Event] = []
    side.events.append(events)
    methods: dict[str, Any] = {}
    for method in HOOK_METHODS:
        original = getattr(cls, method, None)
        if original is None or (issubclass(cls, _SessionRunHook) and original is getattr(_SessionRunHook, method)):
            continue  # not the hook's: HookCallback skips it, and there is nothing to record
        methods[method] = _recording(method, original, events, side, name)
    recorder_cls = type(
        cls.__name__, (cls,), {**methods, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    )
    recorder: Any = object.__new__(recorder_cls)
    recorder.__dict__ = hook.__dict__  # the hook's own state, shared
    return recorder


def _recording(
    method: str, original: Callable[..., Any], events: list[_Event], side: _Side, hook: str
) -> Callable[..., Any]:
    @functools.wraps(original)
    def record(self: Any, *args: Any) -> Any:
        step = side.step if method in ("before_run", "after_run") else (side.step if method == "end" else None)
        event = _Event(method, step)
        events.append(event)
        context = args[0] if method in ("before_run", "after_run") else None
        stopped = bool(getattr(context, "stop_requested", False))
        asked = next((e for e in reversed(events) if e.method == "before_run"), None)
        if method == "after_run" and asked is not None and asked.racy:
            args = (context, _in_order(side, asked, context, args[1]))
        if method == "after_run" and asked is not None and asked.items.get("returned") != "None":
            # Where before_run returned None, TF1 gave None and HookCallback a view of the
            # step's values (said under not_compared).
            event.items.update(_leaves("results", args[1].results))
        side.current = event
        try:
            returned = original(self, *args)
        finally:
            side.current = None
            event.files = side.new_files()
        if method == "end" and isinstance(self, tf.compat.v1.train.FinalOpsHook):
            # What end() ran: the final ops' values, which the hook keeps for its caller.
            event.items.update(_leaves("final_ops_values", self.final_ops_values))
        if method == "before_run":
            event.items["returned"], event.fetch_names = _describe_args(returned)
            if side.watch is not None and returned is not None:
                _watch_races(side, side.watch, hook, event, context, returned)
        if context is not None and not stopped and context.stop_requested:
            event.items["request_stop"] = True
        return returned

    return record


def _watch_races(side: _Side, watch: RaceWatch, hook: str, event: _Event, context: Any, returned: Any) -> None:
    """Notes each fetched leaf that races with the step's run, and its value read before the run."""
    for path, leaf in _paths("results", getattr(returned, "fetches", returned)):
        try:
            element = watch.graph.as_graph_element(leaf, allow_tensor=True, allow_operation=True)
        except (TypeError, ValueError, KeyError):
            continue  # HookCallback's own error, or TF1's, says what was wrong with it
        if isinstance(element, tf.Operation):
            continue
        found = watch.race(element)
        if found is None:
            continue
        side.races.setdefault((hook, path), Race(hook, path, element.name, *found))
        if watch.pure(element):
            event.racy[path] = element
    if event.racy and side.order == 0:
        values = context.session.run(list(event.racy.values()))
        event.read_before = dict(zip(event.racy, values, strict=True))


def _in_order(side: _Side, asked: _Event, context: Any, run_values: Any) -> Any:
    """`run_values` with each racy leaf's value read in this run's order (before or after the write)."""
    if side.order == 0:
        new = asked.read_before
    else:
        new = dict(zip(asked.racy, context.session.run(list(asked.racy.values())), strict=True))
    return run_values._replace(results=_replaced("results", run_values.results, new))


def _replaced(prefix: str, value: Any, new: Mapping[str, Any]) -> Any:
    """`value` with the leaves at the paths in `new` replaced (paths as `_paths` names them)."""
    if prefix in new:
        return new[prefix]
    if isinstance(value, Mapping):
        return {key: _replaced(f"{prefix}[{key!r}]", item, new) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        items = [_replaced(f"{prefix}[{i}]", item, new) for i, item in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, tuple):  # a namedtuple
        return type(value)(*(_replaced(f"{prefix}.{f}", getattr(value, f), new) for f in value._fields))  # type: ignore[attr-defined]
    return value


def _describe_args(args: Any) -> tuple[str, dict[str, str]]:
    """What before_run returned, as structure (compared exactly) and, per leaf, the name fetched."""
    if args is None:
        return "None", {}
    fetches = getattr(args, "fetches", args)
    names: dict[str, str] = {}
    for path, leaf in _paths("results", fetches):
        names[path] = leaf if isinstance(leaf, str) else str(getattr(leaf, "name", type(leaf).__name__))
    feeds = " with feed_dict" if getattr(args, "feed_dict", None) else ""
    # The fetches' structure shows in the results, leaf by leaf; in predict mode a hook that
    # re-fetches original_args fetched the predictions dict in TF1 and "outputs" under Keras.
    return f"SessionRunArgs{feeds}", names


def _paths(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key in sorted(value, key=repr):
            yield from _paths(f"{prefix}[{key!r}]", value[key])
    elif isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        for i, item in enumerate(value):
            yield from _paths(f"{prefix}[{i}]", item)
    elif isinstance(value, tuple):  # a namedtuple
        for field in value._fields:  # type: ignore[attr-defined]
            yield from _paths(f"{prefix}.{field}", getattr(value, field))
    else:
        yield prefix, value


def _leaves(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping) and not isinstance(value, dict):
        value = dict(value)  # a view of the step's values (before_run returned None)
    return {path: _summary_values(leaf) for path, leaf in _paths(prefix, value)}


def _summary_values(leaf: Any) -> Any:
    """A serialized `Summary` (a summary op's result) as its values by tag, else the leaf itself.

    Compared as bytes, two summaries of float32 values one unit apart would differ.
    """
    if not isinstance(leaf, bytes) or not leaf:
        return leaf
    try:
        summary = tf.compat.v1.Summary.FromString(leaf)
    except Exception:  # noqa: BLE001  # not a Summary: the bytes are compared as they are
        return leaf
    if not summary.value or summary.SerializeToString() != leaf:
        return leaf
    return {
        f"summary {v.tag!r}": np.float32(v.simple_value) if v.WhichOneof("value") == "simple_value" else "written"
        for v in summary.value
    }


@contextlib.contextmanager
def _summaries_recorded() -> Iterator[None]:
    """Records each summary a hook writes through a `FileWriter`, for the call that writes it.

    Every stock hook (and `HookCallback`'s writers) writes through
    `FileWriter.add_summary`; what reaches the event file is what went through it.
    """
    writer_cls = tf.compat.v1.summary.FileWriter
    original = writer_cls.add_summary

    def add_summary(writer: Any, summary: Any, global_step: Any = None) -> Any:
        side = _active[-1] if _active else None
        if side is not None and side.current is not None:
            proto = summary
            if isinstance(summary, bytes):
                proto = tf.compat.v1.Summary.FromString(summary)
            for value in proto.value:
                if value.WhichOneof("value") == "simple_value":
                    tag = f"summary {value.tag!r}"
                    key = f"{tag} @ {None if global_step is None else int(global_step)}"
                    side.current.summaries[key] = _Time() if _timed(value.tag) else np.float32(value.simple_value)
                else:
                    side.current.summaries[f"summary {value.tag!r} ({value.WhichOneof('value')})"] = "written"
        return original(writer, summary, global_step)

    writer_cls.add_summary = add_summary
    try:
        yield
    finally:
        writer_cls.add_summary = original


_TIMED_TAG = re.compile(r"(/sec|_per_sec|per_second|sec/|_sec\b|seconds)", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)\b")
_TIMED_LINE = (
    re.compile(r"\(\s*[-+0-9.eE]+\s*sec\)"),
    re.compile(r"((?:[\w/]*sec[\w/]*|[\w/]*per_second[\w/]*)\s*[:=]\s*)[-+0-9.eE]+", re.IGNORECASE),
    re.compile(r"(\btime\b[^:=]*[:=]\s*)[-+0-9.eE]+", re.IGNORECASE),
)


def _timed(tag: str) -> bool:
    return bool(_TIMED_TAG.search(tag))


def _untimed(line: str) -> str:
    line = _TIMED_LINE[0].sub("(<time> sec)", line)
    return _TIMED_LINE[2].sub(r"\1<time>", _TIMED_LINE[1].sub(r"\1<time>", line))


def _call_factory(factory: Callable[[], Any], where: str) -> list[Any]:
    made = factory()
    try:
        return as_hook_list(made, f"check_migration(hooks=...): the factory returned {_kind(made)}, and")
    except TypeError as error:
        raise TypeError(
            f"check_migration(hooks=...): the factory, called in the {where} graph, returned {_kind(made)}. "
            "It must return a list of hooks (SessionRunHook objects), such as "
            "lambda: [tf.compat.v1.train.LoggingTensorHook(['loss'], every_n_iter=10)]."
        ) from error


# -- files ---------------------------------------------------------------------

_CHECKPOINT_PART = re.compile(r"\.(index|data-\d+-of-\d+)$")


def _file_items(side: _Side) -> None:
    """Turns the files each call made into items: checkpoints by TF1 name, other files by content."""
    for events in side.events:
        for event in events:
            for path in event.files:
                full = os.path.join(side.root, path)
                base = os.path.basename(path)
                if path.endswith(".index"):
                    prefix = full[: -len(".index")]
                    event.items[f"checkpoint {path[: -len('.index')]}"] = _checkpoint_values(prefix)
                elif _CHECKPOINT_PART.search(path) or base == "checkpoint" or base.startswith("events.out.tfevents"):
                    continue  # parts of a checkpoint; the state file; event files (by their summaries)
                elif base.endswith((".meta", ".pbtxt", ".pb")) or ".tf1-names" in base:
                    continue
                elif os.path.exists(full):
                    with open(full, "rb") as file:
                        event.items[f"file {path}"] = file.read()


def _checkpoint_values(prefix: str) -> dict[str, np.ndarray]:
    try:
        names = [n for n, _ in tf.train.list_variables(prefix)]
    except (tf.errors.NotFoundError, tf.errors.DataLossError):
        return {}  # removed since (max_to_keep): known by name only
    return {
        name: np.asarray(tf.train.load_variable(prefix, name))
        for name in names
        if not name.startswith("_") and ".ATTRIBUTES" not in name
    }


# -- running a side -----------------------------------------------------------


@contextlib.contextmanager
def _in_directory(path: str) -> Iterator[None]:
    here = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(here)


@contextlib.contextmanager
def _logs_captured() -> Iterator[None]:
    """The TF logger at INFO, its lines kept per hook call, and kept off the console meanwhile."""
    logger = tf.get_logger()
    handler = _LogCapture(level=logging.INFO)
    level, handlers, propagate = logger.level, list(logger.handlers), logger.propagate
    for h in handlers:
        logger.removeHandler(h)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        for h in handlers:
            logger.addHandler(h)
        logger.setLevel(level)
        logger.propagate = propagate


def _run_side(side: _Side, run: Callable[[], None]) -> None:
    _active.append(side)
    try:
        with _in_directory(side.root):
            run()
    finally:
        _active.pop()
        tf.compat.v1.summary.FileWriterCache.clear()  # the next side's writers must open their own files
        side.current = None
    side.new_files()
