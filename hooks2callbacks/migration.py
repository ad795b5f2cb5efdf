"""`check_migration`: a job's hooks under its TF1 `model_fn` and under its Keras model, compared.

The check runs the same hooks twice, each time from the same weights over the
same batches, and records what each hook saw and did:

    same start:
        TF1 graph = model_fn(features, labels, mode, params), features and
            labels from the batches (a one-shot iterator, as an input_fn's)
        its initial variables -> a checkpoint -> restore_tf1_checkpoint(keras_model,
            assignment_map=...)          # a name that cannot be matched: an error, now
    TF1 side (in a directory of its own, made the working directory):
        hooks = factory()                # inside the TF1 graph, each wrapped in a recorder
        MonitoredSession(hooks): run train_op (train), the loss and the
            eval_metric_ops' update ops (eval) or the predictions (predict)
            until `steps` runs, a stop, or the end of the data
    Keras side (in another directory):
        fit / evaluate / predict(callbacks=[HookCallback(wrapped factory, mode, names, values)])
    compare, hook by hook (the i-th hook of each side):
        the calls in order (method, step), what before_run returned, after_run's
        results leaf by leaf (type, dtype, shape, value), request_stop, the lines
        the hook logged, the summaries it wrote (tag by tag), the checkpoints it
        wrote (by step and TF1 name) and the other files it made

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
import math
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from hooks2callbacks._checkpoint import restore_tf1_checkpoint
from hooks2callbacks._dispatch import HOOK_METHODS, as_hook_list, is_factory
from hooks2callbacks._estimator import ModeKeys
from hooks2callbacks._fetch import UnknownLogKeyError
from hooks2callbacks.callback import HookCallback

MODES = ("train", "eval", "predict")
_TF1_MODE = {"train": ModeKeys.TRAIN, "eval": ModeKeys.EVAL, "predict": ModeKeys.PREDICT}
_SessionRunHook: Any = tf.compat.v1.train.SessionRunHook
_TF1_ADAM_EPSILON = 1e-8

# -- the report ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Difference:
    """One thing a hook saw or did differently under Keras than under TF1.

    Attributes:
        hook: The hook, as `"<index> <class>"` (its place in the factory's list),
            or `"(run)"` for the run itself (the step it stopped at, an error).
        method: The hook method (`"after_run"`), or `"files"`, `"run"`.
        step: The session run it happened in (0 for the first), or None for
            `begin`, `after_create_session` and the run itself.
        key: What differs: `"calls"`, `"returned"`, `"results['loss']"`,
            `"request_stop"`, `"log[0]"`, `"summary 'loss'"`,
            `"checkpoint model.ckpt-10"`, `"file <path>"`, `"stopped at"`, `"error"`.
        tf1: The TF1 side's value (`None` where it had none).
        keras: The Keras side's value.
        kind: What kind of difference: `"calls"`, `"value"`, `"type"`, `"dtype"`,
            `"shape"`, `"missing"` (on one side only), `"stop"`, `"error"`.
        hint: A known cause, where one fits, with its fix; else None.
    """

    hook: str
    method: str
    step: int | None
    key: str
    tf1: Any
    keras: Any
    kind: str
    hint: str | None = None

    def __str__(self) -> str:
        where = f"{self.method}" + ("" if self.step is None else f" step {self.step}")
        text = f"{where} {self.key}: TF1 {_short(self.tf1)}, Keras {_short(self.keras)} ({self.kind})"
        return text + (f"\n      hint: {self.hint}" if self.hint else "")


@dataclasses.dataclass
class MigrationReport:
    """What `check_migration` found; `print()` it for a table, `assert_ok()` it in a test.

    Attributes:
        mode: The mode checked.
        ok: True when every hook saw and did the same on both sides.
        differences: Every difference found, per hook in the order they happened.
        hooks: The hooks compared, as `"<index> <class>"`.
        compared: Per hook, how many items of each kind were compared (calls,
            values, log lines, summaries, checkpoints, files).
        steps: The session runs each side made: `{"tf1": n, "keras": m}`.
        not_compared: What was not compared, and why.
        notes: What else the check found (the restore's notes, a shuffled dataset).
        keras_error: The exception the Keras side raised (also an `error`
            difference), with its traceback; None when it ran through.
    """

    mode: str
    differences: list[Difference]
    hooks: list[str]
    compared: dict[str, dict[str, int]]
    steps: dict[str, int]
    not_compared: list[str]
    notes: list[str]
    keras_error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return not self.differences

    def __str__(self) -> str:
        found = {d.hook for d in self.differences}
        head = (
            f"check_migration ({self.mode}): "
            + ("OK, every hook saw and did the same" if self.ok else f"{len(self.differences)} differences")
            + f"; session runs: TF1 {self.steps.get('tf1')}, Keras {self.steps.get('keras')}"
        )
        kinds = ("calls", "values", "lines", "summaries", "checkpoints", "files")
        rows = [["hook", *kinds, "first difference"]]
        for hook in self.hooks:
            counts = self.compared.get(hook, {})
            first = next((d for d in self.differences if d.hook == hook), None)
            rows.append([hook, *(str(counts.get(k, 0)) for k in kinds), "-" if first is None else str(first)])
        for hook in sorted(found - set(self.hooks)):
            first = next(d for d in self.differences if d.hook == hook)
            rows.append([hook, *("" for _ in kinds), str(first)])
        widths = [max(len(r[i].split("\n")[0]) for r in rows) for i in range(len(kinds) + 1)]
        lines = [head, ""]
        for row in rows:
            cells = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
            lines.append("  ".join([*cells, row[-1]]).rstrip())
        for title, items in (("Not compared:", self.not_compared), ("Notes:", self.notes)):
            if items:
                lines += ["", title, *(f"  - {item}" for item in items)]
        return "\n".join(lines)

    def assert_ok(self) -> None:
        """Raises AssertionError with the report's table unless every hook saw and did the same.

        Raises:
            AssertionError: There is a difference.
        """
        if not self.ok:
            shown = "\n".join(f"  {d.hook}: {d}" for d in self.differences[:20])
            more = f"\n  ... and {len(self.differences) - 20} more" if len(self.differences) > 20 else ""
            raise AssertionError(f"{self}\n\nAll differences:\n{shown}{more}") from self.keras_error


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray) and value.size > 6:
        return f"array(shape={value.shape}, dtype={value.dtype}, first={value.ravel()[:3].tolist()}...)"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


# -- what each side records ------------------------------------------------------


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

    def new_files(self) -> list[str]:
        found = set()
        for directory, _, names in os.walk(self.root):
            for name in names:
                found.add(os.path.relpath(os.path.join(directory, name), self.root))
        new = sorted(found - self.files)
        self.files = found
        return new


_active: list[_Side] = []  # the side running now (one at a time), for the log handler and summaries


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
        methods[method] = _recording(method, original, events, side)
    recorder_cls = type(
        cls.__name__, (cls,), {**methods, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    )
    recorder: Any = object.__new__(recorder_cls)
    recorder.__dict__ = hook.__dict__  # the hook's own state, shared
    return recorder


def _recording(method: str, original: Callable[..., Any], events: list[_Event], side: _Side) -> Callable[..., Any]:
    @functools.wraps(original)
    def record(self: Any, *args: Any) -> Any:
        step = side.step if method in ("before_run", "after_run") else (side.step if method == "end" else None)
        event = _Event(method, step)
        events.append(event)
        context = args[0] if method in ("before_run", "after_run") else None
        stopped = bool(getattr(context, "stop_requested", False))
        asked = next((e for e in reversed(events) if e.method == "before_run"), None)
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
        if method == "before_run":
            event.items["returned"], event.fetch_names = _describe_args(returned)
        if context is not None and not stopped and context.stop_requested:
            event.items["request_stop"] = True
        return returned

    return record


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


# -- data -----------------------------------------------------------------------------


def _batches(data: Any, steps: int | None, batch_size: int, mode: str) -> tuple[list[tuple[Any, Any]], bool]:
    """The batches both sides get, in order, and whether a dataset gives another order each pass."""
    if isinstance(data, tf.data.Dataset):
        elements = data if steps is None else data.take(steps)
        batches = [_split(tf.nest.map_structure(np.asarray, e), mode) for e in elements]
        again = next(iter(data), None)
        shuffled = bool(batches) and again is not None and not _same_batch(_split(again, mode)[0], batches[0][0])
        if not batches:
            raise ValueError("check_migration(data=...): the dataset gave no batch.")
        return batches, shuffled
    if mode == "predict" and not isinstance(data, (tuple, list)):
        data = (data, None)
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise TypeError(
            f"check_migration(data=...) takes (x, y) arrays or a batched tf.data.Dataset of (features, "
            f"labels), got {_kind(data)}."
        )
    x, y = data
    n = len(tf.nest.flatten(x)[0])
    if not n:
        raise ValueError("check_migration(data=...): the arrays hold no sample.")
    per_pass = math.ceil(n / batch_size)
    count = per_pass if steps is None or mode != "train" and steps > per_pass else steps
    batches = []
    for i in range(count):
        part = slice(i % per_pass * batch_size, (i % per_pass + 1) * batch_size)
        batches.append(
            (
                tf.nest.map_structure(lambda a, part=part: np.asarray(a)[part], x),
                None if y is None else tf.nest.map_structure(lambda a, part=part: np.asarray(a)[part], y),
            )
        )
    return batches, False


def _split(element: Any, mode: str) -> tuple[Any, Any]:
    if isinstance(element, tuple) and len(element) == 2:
        return element[0], element[1]
    if mode == "predict":
        return element, None
    raise TypeError(
        f"check_migration(data=...): the dataset's elements are {_kind(element)}; in {mode} mode they "
        "must be (features, labels) pairs, as an Estimator's input_fn gave them."
    )


def _same_batch(a: Any, b: Any) -> bool:
    try:
        return all(np.array_equal(p, q) for p, q in zip(tf.nest.flatten(a), tf.nest.flatten(b), strict=True))
    except ValueError:
        return False


def _kind(value: Any) -> str:
    if isinstance(value, np.ndarray) or hasattr(value, "shape"):
        return f"an array of shape {tuple(value.shape)} and dtype {getattr(value, 'dtype', '?')}"
    if isinstance(value, Mapping):
        return "a dict {" + ", ".join(f"{k!r}: {_kind(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} (" + ", ".join(_kind(v) for v in value) + ")"
    return f"{value!r} of type {type(value).__name__}"


def _check_inputs(model: Any, features: Any) -> None:
    """Raises when the batches' features are not of the structure the Keras model takes."""
    inputs = getattr(model, "inputs", None)
    if not inputs:
        return  # a subclassed model: fit() will say
    flat = tf.nest.flatten(features)
    shapes = [tuple(t.shape) for t in inputs]
    fits = len(flat) == len(shapes) and all(
        len(np.shape(a)) == len(s) and all(d is None or d == e for d, e in zip(s[1:], np.shape(a)[1:], strict=True))
        for a, s in zip(flat, shapes, strict=True)
    )
    if not fits:
        wanted = ", ".join(f"(batch, {', '.join(str(d) for d in s[1:])})" for s in shapes)
        raise ValueError(
            f"check_migration(data=...): the batches' features are {_kind(features)}, and the Keras "
            f"model takes {len(shapes)} input(s) of shape {wanted}. Pass data whose features fit the "
            "model's inputs, as model.fit() takes them (and as the model_fn's features were)."
        )


# -- the TF1 side ---------------------------------------------------------------------


class _Tf1Run:
    """The TF1 graph built from model_fn; its initial values written to `prefix`."""

    def __init__(self, model_fn: Any, batches: list[tuple[Any, Any]], mode: str, params: Any) -> None:
        self.graph = tf.Graph()
        self.batches = batches
        self.mode = mode
        with self.graph.as_default():
            v1 = tf.compat.v1
            # As Estimator made it: a ref variable in GLOBAL_STEP, and the read hooks take.
            self.global_step = v1.get_variable(
                "global_step",
                [],
                tf.int64,
                v1.zeros_initializer(),
                trainable=False,
                use_resource=False,
                collections=[v1.GraphKeys.GLOBAL_VARIABLES, v1.GraphKeys.GLOBAL_STEP],
            )
            from tensorflow.python.training import training_util  # pylint: disable=import-outside-toplevel

            read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
            features, labels = self._inputs()
            # The step's read happens before the increment, so hooks see the stale step as the
            # stock hooks assume (Estimator left it to the scheduler).
            with tf.control_dependencies([read]), _legacy_layers():
                spec = model_fn(features=features, labels=labels, mode=_TF1_MODE[mode], params=params or {})
            self.fetches = self._fetches(spec)
            self.trainable = [v.op.name for v in v1.trainable_variables()]
            self.adam = any(v.op.name.endswith("/Adam") for v in v1.global_variables())
            self.saver = v1.train.Saver(v1.global_variables(), max_to_keep=None)

    def _inputs(self) -> tuple[Any, Any]:
        features, labels = self.batches[0]
        pairs = labels is not None and self.mode != "predict"
        first = (features, labels) if pairs else features

        def signature(a: Any) -> tf.TensorSpec:
            a = np.asarray(a)
            return tf.TensorSpec((None, *a.shape[1:]), tf.as_dtype(a.dtype))

        def generate() -> Iterator[Any]:
            for f, y in self.batches:
                yield (f, y) if pairs else f

        dataset = tf.data.Dataset.from_generator(generate, output_signature=tf.nest.map_structure(signature, first))
        element = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        return element if pairs else (element, None)

    def _fetches(self, spec: Any) -> Any:
        mode = self.mode
        loss = getattr(spec, "loss", None)
        if mode == "train":
            if loss is None or getattr(spec, "train_op", None) is None:
                raise ValueError(
                    f"check_migration(model_fn=...): in train mode the model_fn must return an EstimatorSpec "
                    f"with a loss and a train_op (as Estimator required), got loss={loss!r}, "
                    f"train_op={getattr(spec, 'train_op', None)!r}. Return "
                    "EstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, global_step))."
                )
            return spec.train_op
        if mode == "eval":
            if loss is None:
                raise ValueError(
                    f"check_migration(model_fn=...): in eval mode the model_fn must return an EstimatorSpec "
                    f"with a loss (as Estimator required), got {spec!r}."
                )
            updates = [value[1] for value in (getattr(spec, "eval_metric_ops", None) or {}).values()]
            return [loss, *updates]
        predictions = getattr(spec, "predictions", None)
        if predictions is None:
            raise ValueError(
                f"check_migration(model_fn=...): in predict mode the model_fn must return an EstimatorSpec "
                f"with predictions, got {spec!r}."
            )
        return predictions

    def save_initial(self, directory: str) -> str:
        with self.graph.as_default(), tf.compat.v1.Session(graph=self.graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return str(self.saver.save(session, os.path.join(directory, "initial.ckpt"), write_meta_graph=False))

    def run(self, factory: Callable[[], Any], side: _Side, steps: int | None, prefix: str) -> None:
        with self.graph.as_default():
            hooks = [_wrap(h, i, side) for i, h in enumerate(_call_factory(factory, "TF1"))]
            scaffold = tf.compat.v1.train.Scaffold(init_fn=lambda _, session: self.saver.restore(session, prefix))
            creator = tf.compat.v1.train.ChiefSessionCreator(scaffold=scaffold)
            limit = len(self.batches) if steps is None else steps
            with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=hooks) as session:
                while side.step < limit and not session.should_stop():
                    session.run(self.fetches)
                    side.step += 1


@contextlib.contextmanager
def _legacy_layers() -> Iterator[None]:
    """`tf.compat.v1.layers` as tf_keras's legacy layers, for a model_fn that builds with them.

    Under Keras 3, TensorFlow's `tf.compat.v1.layers` raises "not available with
    Keras 3"; tf_keras (`pip install tf-keras`) still has them, as TF1 had them.
    """
    v1 = tf.compat.v1
    try:
        v1.layers.dense  # noqa: B018  # TF's lazy loader raises here under Keras 3
        yield
        return
    except AttributeError:
        pass
    try:
        from tf_keras.api._v1.keras.__internal__.legacy import layers  # pylint: disable=import-outside-toplevel
    except ImportError:
        yield  # the model_fn fails on its own line, with TF's message
        return
    previous = v1.__dict__.get("layers")
    v1.layers = layers
    try:
        yield
    finally:
        if previous is None:
            del v1.layers
        else:
            v1.layers = previous


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


# -- the Keras side -----------------------------------------------------------------


def _run_keras(
    model: Any,
    batches: list[tuple[Any, Any]],
    mode: str,
    callback: HookCallback,
    side: _Side,
) -> None:
    xs = [f for f, _ in batches]
    sizes = [len(tf.nest.flatten(f)[0]) for f in xs]
    batch_size = sizes[0]
    regular = all(s == batch_size for s in sizes[:-1]) and sizes[-1] <= batch_size
    common = {"verbose": 0, "callbacks": [callback]}

    def joined(parts: list[Any]) -> Any:
        return tf.nest.map_structure(lambda *a: np.concatenate(a), *parts)

    def generate() -> Iterator[Any]:
        for f, y in batches:
            yield f if mode == "predict" else (f, y)

    if mode == "predict":
        if regular:
            model.predict(joined(xs), batch_size=batch_size, **common)
        else:
            model.predict(generate(), steps=len(batches), **common)
    elif regular:
        x, y = joined(xs), joined([y for _, y in batches])
        if mode == "train":
            model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, **common)
        else:
            model.evaluate(x, y, batch_size=batch_size, **common)
    elif mode == "train":
        model.fit(generate(), steps_per_epoch=len(batches), epochs=1, **common)
    else:
        model.evaluate(generate(), steps=len(batches), **common)


def _counting(factory: Callable[[], Any], side: _Side) -> Callable[[], list[Any]]:
    """The Keras side's factory: the hooks wrapped, and a last hook that counts the steps."""

    class _Count(_SessionRunHook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            side.step += 1

    def make() -> list[Any]:
        return [*(_wrap(h, i, side) for i, h in enumerate(_call_factory(factory, "Keras"))), _Count()]

    return make


# -- files ----------------------------------------------------------------------------

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


# -- comparison -----------------------------------------------------------------------


class _Compare:
    def __init__(self, rtol: float, atol: float) -> None:
        self.rtol, self.atol = rtol, atol

    def value(self, a: Any, b: Any) -> str | None:
        """The kind of difference between two recorded values, or None when they are the same."""
        if isinstance(a, _Time) or isinstance(b, _Time):
            return None if type(a) is type(b) else "value"
        if type(a) is not type(b):
            return "type"
        if isinstance(a, dict):
            return None if a.keys() == b.keys() and all(self.value(a[k], b[k]) is None for k in a) else "value"
        if isinstance(a, (np.ndarray, np.generic)):
            if a.dtype != b.dtype:
                return "dtype"
            if np.shape(a) != np.shape(b):
                return "shape"
            if a.dtype.kind in "fc":
                return None if np.allclose(a, b, rtol=self.rtol, atol=self.atol, equal_nan=True) else "value"
            return None if np.array_equal(a, b) else "value"
        if isinstance(a, float):
            return None if math.isclose(a, b, rel_tol=self.rtol, abs_tol=self.atol) or a != a and b != b else "value"
        if isinstance(a, (int, str, bytes, bool, type(None))):
            return None if a == b else "value"
        return None if repr(a) == repr(b) else "value"

    def line(self, a: str, b: str) -> bool:
        """Whether two log lines say the same: text exactly, numbers within tolerance, times by presence."""
        a, b = _untimed(a), _untimed(b)
        if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
            return False
        for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b), strict=True):
            if x == y:
                continue
            if not any(c in x + y for c in ".eEn") or not math.isclose(
                float(x), float(y), rel_tol=max(self.rtol, 1e-6), abs_tol=self.atol
            ):
                return False
        return True


def _compare_hook(
    name: str, tf1: list[_Event], keras: list[_Event], compare: _Compare, counts: dict[str, int]
) -> list[Difference]:
    found: list[Difference] = []
    calls = [(e.method, e.step) for e in tf1], [(e.method, e.step) for e in keras]
    counts["calls"] = min(len(calls[0]), len(calls[1]))
    if calls[0] != calls[1]:
        at = next((i for i, (p, q) in enumerate(zip(*calls, strict=False)) if p != q), min(map(len, calls)))
        first = [c[at] if at < len(c) else None for c in calls]
        step = next((c[1] for c in first if c is not None), None)
        found.append(Difference(name, (first[0] or first[1] or ("?",))[0], step, "calls", first[0], first[1], "calls"))
    by_call = {}
    seen: dict[tuple[str, Any], int] = {}
    for event in keras:
        key = (event.method, event.step)
        seen[key] = seen.get(key, 0) + 1
        by_call[(key[0], key[1], seen[key])] = event
    seen = {}
    for event in tf1:
        key = (event.method, event.step)
        seen[key] = seen.get(key, 0) + 1
        other = by_call.get((key[0], key[1], seen[key]))
        if other is None:
            continue
        for items, kind_count in ((event.items, "values"), (event.summaries, "summaries")):
            theirs = other.items if items is event.items else other.summaries
            for item in sorted(set(items) | set(theirs)):
                counted = (
                    "checkpoints"
                    if item.startswith("checkpoint ")
                    else "files"
                    if item.startswith("file ")
                    else kind_count
                )
                counts[counted] = counts.get(counted, 0) + 1
                a, b = items.get(item), theirs.get(item)
                if item not in items or item not in theirs:
                    if item == "request_stop":
                        found.append(Difference(name, event.method, event.step, item, bool(a), bool(b), "stop"))
                    else:
                        found.append(
                            Difference(name, event.method, event.step, item, _present(a), _present(b), "missing")
                        )
                    continue
                if item.startswith("checkpoint "):
                    found += _compare_checkpoint(name, event, item, a or {}, b or {}, compare)
                    continue
                kind = compare.value(a, b)
                if kind is not None:
                    found.append(Difference(name, event.method, event.step, item, a, b, kind))
        counts["lines"] = counts.get("lines", 0) + max(len(event.lines), len(other.lines))
        for i in range(max(len(event.lines), len(other.lines))):
            a = event.lines[i] if i < len(event.lines) else None
            b = other.lines[i] if i < len(other.lines) else None
            if a is None or b is None or not compare.line(a, b):
                found.append(Difference(name, event.method, event.step, f"log[{i}]", a, b, "value"))
    return sorted(found, key=_when)


_ORDER = {"begin": 0, "after_create_session": 1, "before_run": 2, "after_run": 3, "end": 4}


def _when(difference: Difference) -> tuple[int, int]:
    """Orders a hook's differences as the calls happened (a sort is stable: the order of each call's items stays)."""
    step = difference.step if difference.step is not None else -1
    return (step + (1 if difference.method == "end" else 0), _ORDER.get(difference.method, 5))


def _present(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, dict):
        return "written"
    return value


def _compare_checkpoint(
    name: str, event: _Event, item: str, a: dict[str, Any], b: dict[str, Any], compare: _Compare
) -> list[Difference]:
    found = []
    # Keras's optimizer keeps its rate as a variable; a TF1 graph whose rate was a constant had none.
    only_tf1, only_keras = sorted(set(a) - set(b)), sorted(set(b) - set(a) - {"learning_rate"})
    if only_tf1 or only_keras:
        found.append(Difference(name, event.method, event.step, f"{item} names", only_tf1, only_keras, "missing"))
    for variable in sorted(set(a) & set(b)):
        kind = compare.value(a[variable], b[variable])
        if kind is not None:
            found.append(
                Difference(name, event.method, event.step, f"{item} {variable}", a[variable], b[variable], kind)
            )
    return found


# -- hints ----------------------------------------------------------------------------


def _hints(
    differences: list[Difference],
    tf1: _Side,
    keras: _Side,
    names: Mapping[str, Any],
    adam: bool,
    keras_model: Any,
    shuffled: bool,
) -> list[Difference]:
    optimizer = getattr(keras_model, "optimizer", None)
    epsilon = getattr(optimizer, "epsilon", None)
    adam_hint = None
    if (
        adam
        and type(optimizer).__name__ == "Adam"
        and not (isinstance(epsilon, float) and math.isclose(epsilon, _TF1_ADAM_EPSILON, rel_tol=1e-6))
    ):
        adam_hint = (
            f"the Keras model's Adam has epsilon={epsilon}, and TF1's AdamOptimizer 1e-8: every update "
            "differs. Compile keras.optimizers.Adam(epsilon=1e-8) (or the TF1 run's own epsilon)."
        )
    # Under Adam's epsilon difference the two sides drift apart a little: a streaming value
    # is then the running mean of the other side's only to about 1%.
    streaming_rtol = 1e-4 if adam_hint is None else 2e-2
    series: dict[tuple[str, str], tuple[list[Any], list[Any]]] = {}
    for hook, side_events in zip(tf1.hooks, zip(tf1.events, keras.events, strict=False), strict=False):
        for side, events in enumerate(side_events):
            for event in events:
                for item, value in event.items.items():
                    if item.startswith("results") and isinstance(value, (float, np.floating)):
                        series.setdefault((hook, item), ([], []))[side].append(float(value))
    fetched: dict[tuple[str, str], str] = {}
    for hook, events in zip(tf1.hooks, tf1.events, strict=False):
        for event in events:
            for path, fetch in event.fetch_names.items():
                fetched[(hook, path)] = fetch
    hinted = []
    for d in differences:
        hint = None
        fetch = fetched.get((d.hook, d.key), "")
        op = fetch.split(":")[0]
        values = series.get((d.hook, d.key))
        if d.kind == "error" and isinstance(keras.error, UnknownLogKeyError):
            hint = (
                "a TF1 name the hooks use is not in the names map, and no Keras log key is called so: "
                "add it to names=, such as names={'cross_entropy': 'loss'}."
            )
        elif values and _streaming(values[0], values[1], rtol=streaming_rtol):
            hint = (
                f"TF1's value ({fetch or d.key}) is the mean since the run began, a streaming tf.metrics "
                "value, and Keras's the batch's own: build the metric in the hooks factory "
                "(tf.compat.v1.metrics.mean(log_tensor(...))) or pass values='running_mean'."
            )
        elif values and _streaming(values[1], values[0], rtol=streaming_rtol):
            hint = (
                "Keras's value is a running mean and TF1's the batch's: map the name to the batch's value "
                "(values='batch'), or fetch the streaming tf.metrics value on the TF1 side."
            )
        elif adam_hint is not None and d.kind == "value" and _near(d.tf1, d.keras):
            # Adam's epsilon moves every update a little: a near value, not another tensor.
            hint = adam_hint
        elif op and op in names and d.kind in ("value", "shape", "dtype"):
            hint = (
                f"names maps {op!r} to {names[op]!r}, which holds another value than the TF1 tensor "
                f"{fetch!r} held: map it to the log key that holds what that tensor did."
            )
        elif shuffled and d.kind in ("value", "shape"):
            hint = (
                "the dataset gives its batches in another order each pass (shuffled): both sides got the "
                "batches of one pass, but a model_fn or hook that reads the data itself does not. Check "
                "with an unshuffled dataset."
            )
        elif adam_hint is not None and d.kind == "value":
            hint = adam_hint
        hinted.append(dataclasses.replace(d, hint=hint) if hint else d)
    return hinted


def _streaming(tf1: list[float], keras: list[float], rtol: float = 1e-4) -> bool:
    """Whether the TF1 values are the running means of the Keras ones (and the two differ)."""
    n = min(len(tf1), len(keras))
    if n < 2:
        return False
    means = np.cumsum(keras[:n]) / np.arange(1, n + 1)
    return bool(np.allclose(tf1[:n], means, rtol=rtol, atol=1e-6)) and not np.allclose(tf1[:n], keras[:n], rtol=rtol)


def _near(tf1: Any, keras: Any, rtol: float = 0.05) -> bool:
    """Whether two differing values are numbers within `rtol` of each other (a drift, not another value)."""
    try:
        return bool(np.allclose(np.asarray(tf1, dtype=float), np.asarray(keras, dtype=float), rtol=rtol))
    except (TypeError, ValueError):  # not numbers, or shapes that differ: no drift
        return False


# -- check_migration ----------------------------------------------------------------


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


def check_migration(
    model_fn: Callable[..., Any],
    keras_model: Any,
    hooks: Callable[[], Any],
    data: Any,
    *,
    steps: int | None,
    mode: str = "train",
    names: Mapping[str, Any] | None = None,
    values: str | None = None,
    params: Any = None,
    assignment_map: Mapping[str, str] | None = None,
    batch_size: int = 32,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> MigrationReport:
    """Runs the hooks under the TF1 `model_fn` and under the Keras model, and compares what they saw and did.

    Example:

    ```python
    report = hooks2callbacks.check_migration(
        model_fn, model, lambda: [tf.compat.v1.train.LoggingTensorHook(["loss"], every_n_iter=10)],
        (x, y), steps=100, names={"cross_entropy": "loss"},
    )
    print(report)
    report.assert_ok()
    ```

    Both sides start from the same weights: the TF1 graph's initial variables
    are written to a checkpoint and read into `keras_model` with
    `restore_tf1_checkpoint` (the check trains or evaluates `keras_model`;
    pass a fresh one). Both get the same batches in the same order. Each side
    runs in a temporary working directory of its own, so hooks that write to
    relative paths (`"model_dir"`) write apart; the files are compared by what
    each hook made (checkpoints by TF1 name, summaries by tag and step, other
    files by content). Time-dependent values (`global_step/sec`, "(0.3 sec)"
    in a log line) are compared as present or absent.

    Args:
        model_fn: The TF1 `model_fn(features, labels, mode, params)` returning
            an `EstimatorSpec` (hooks2callbacks's, or any record with its fields).
        keras_model: The compiled, built Keras model that replaces it, its
            weights named as the TF1 graph's (or mapped with `assignment_map`).
        hooks: A zero-argument function returning the hooks: called once per
            side, inside that side's graph, so that each side has its own.
        data: `(x, y)` arrays (cut into batches of `batch_size`, repeated in
            train mode until `steps`) or a batched `tf.data.Dataset` of
            `(features, labels)`. In predict mode `x` alone will do.
        steps: Session runs (train steps, or eval/predict batches) at most.
            None in eval and predict: until the data ends.
        mode: `"train"` (`fit`), `"eval"` (`evaluate`) or `"predict"`.
            Defaults to `"train"`.
        names: `HookCallback(names=...)`: TF1 names Keras calls differently.
        values: `HookCallback(values=...)`. Defaults to None (its default).
        params: The `params` passed to `model_fn`. Defaults to `{}`.
        assignment_map: Where the Keras model's TF1 names differ from the
            graph's: as in `restore_tf1_checkpoint`.
        batch_size: The batch size for `(x, y)` arrays. Defaults to 32.
        rtol: Relative tolerance for floats. Defaults to 1e-5.
        atol: Absolute tolerance for floats. Defaults to 1e-6.

    Returns:
        The report: `.ok`, `.differences`, `print(report)`, `.assert_ok()`.

    Raises:
        ValueError: `mode` is not one of the three; `steps` is not a positive
            int (or None outside train mode); the model_fn returned no loss in
            train or eval mode (or no predictions in predict mode); the data's
            features do not fit the Keras model's inputs; a weight cannot be
            matched between the TF1 graph and the Keras model.
        TypeError: `hooks` is not a zero-argument function, or it returned
            something other than hooks; `model_fn` is not callable; `data` is
            neither arrays nor a dataset.
    """
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"check_migration(mode=...) must be one of {MODES}, got {mode!r}.")
    if not callable(model_fn):
        raise TypeError(f"check_migration(model_fn=...) takes the TF1 model_fn, a function, got {_kind(model_fn)}.")
    if not is_factory(hooks):
        raise TypeError(
            f"check_migration(hooks=...) takes a zero-argument function returning the hooks, got "
            f"{_kind(hooks)}. Each side needs hooks of its own, made in its graph: pass "
            "lambda: [hook1, hook2] (or the function your job made them with)."
        )
    if (
        steps is None
        and mode == "train"
        or steps is not None
        and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1)
    ):
        raise ValueError(
            f"check_migration(steps=...) takes a positive int (None only in eval and predict mode: until "
            f"the data ends), got {steps!r}."
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"check_migration(batch_size=...) takes a positive int, got {batch_size!r}.")
    batches, shuffled = _batches(data, steps, batch_size, mode)
    _check_inputs(keras_model, batches[0][0])
    if mode != "predict" and batches[0][1] is None:
        raise ValueError(f"check_migration(data=...): {mode} mode needs labels: pass (x, y).")
    tf1_run = _Tf1Run(model_fn, batches, mode, params)
    notes: list[str] = []
    not_compared = [
        "event files byte by byte (their names hold a time and a host): their summaries are compared "
        "as each hook wrote them, tag by tag",
        "graph files (.meta, graph.pbtxt): the TF1 graph and HookCallback's adapter graph differ by construction",
        "after_run's results where before_run returned None: TF1 gave None, HookCallback a read-only view "
        "of the step's values",
        "a checkpoint's learning_rate where the TF1 graph had no such variable (Keras's optimizer keeps one)",
    ]
    if shuffled:
        notes.append("the dataset gives another order each pass (shuffled); both sides got the batches of one pass")
    with tempfile.TemporaryDirectory(prefix="check_migration_") as work:
        prefix = tf1_run.save_initial(work)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                restored = restore_tf1_checkpoint(keras_model, prefix, assignment_map)
            except ValueError as error:
                raise ValueError(
                    f"check_migration(): the Keras model cannot start from the TF1 graph's initial weights, "
                    f"so nothing was run. {error}"
                ) from error
        unmatched = [n for n in tf1_run.trainable if n in restored.unused]
        if unmatched:
            raise ValueError(
                f"check_migration(): the TF1 graph's trainable variables {unmatched} match no weight of the "
                f"Keras model (its TF1 names: {sorted(restored.restored)}), so nothing was run. Name the Keras "
                "layers as the TF1 scopes (keras.layers.Dense(..., name='dense')) or pass "
                "assignment_map={'tf1_scope/': 'keras_scope/'}."
            )
        notes += [f"same start: {note}" for note in restored.notes]
        notes += [f"same start: {w.message}" for w in caught if str(w.message) not in " ".join(restored.notes)]
        sides = {name: _Side(name, os.path.join(work, name)) for name in ("tf1", "keras")}
        for side in sides.values():
            os.makedirs(side.root)
        callback = HookCallback(_counting(hooks, sides["keras"]), mode=mode, names=names, values=values)
        with _logs_captured(), _summaries_recorded():
            _run_side(sides["tf1"], lambda: tf1_run.run(hooks, sides["tf1"], steps, prefix))
            try:
                _run_side(sides["keras"], lambda: _run_keras(keras_model, batches, mode, callback, sides["keras"]))
            except Exception as error:  # noqa: BLE001  # a finding: reported, with its type and message
                sides["keras"].error = error
        for side in sides.values():
            _file_items(side)
        report = _report(mode, sides["tf1"], sides["keras"], _Compare(rtol, atol), not_compared, notes)
    report.differences = _hints(
        report.differences, sides["tf1"], sides["keras"], dict(_op_names(names)), tf1_run.adam, keras_model, shuffled
    )
    return report


def _op_names(names: Mapping[str, Any] | None) -> Iterator[tuple[str, Any]]:
    for key, value in (names or {}).items():
        yield key.split(":")[0], value


def _report(
    mode: str, tf1: _Side, keras: _Side, compare: _Compare, not_compared: list[str], notes: list[str]
) -> MigrationReport:
    differences: list[Difference] = []
    compared: dict[str, dict[str, int]] = {}
    if keras.error is not None:
        differences.append(
            Difference(
                "(run)", "run", keras.step, "error", None, f"{type(keras.error).__name__}: {keras.error}", "error"
            )
        )
    if [h.split(" ", 1)[1] for h in tf1.hooks] != [h.split(" ", 1)[1] for h in keras.hooks] and keras.hooks:
        differences.append(Difference("(run)", "hooks", None, "hooks", tf1.hooks, keras.hooks, "calls"))
    for i, hook in enumerate(tf1.hooks):
        counts: dict[str, int] = {}
        compared[hook] = counts
        theirs = keras.events[i] if i < len(keras.events) else []
        differences += _compare_hook(hook, tf1.events[i], theirs, compare, counts)
    if tf1.step != keras.step and keras.error is None:
        differences.append(Difference("(run)", "run", None, "stopped at", tf1.step, keras.step, "stop"))
    return MigrationReport(
        mode,
        differences,
        list(tf1.hooks),
        compared,
        {"tf1": tf1.step, "keras": keras.step},
        not_compared,
        notes,
        keras.error,
    )
