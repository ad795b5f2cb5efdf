"""The graph that hooks see: a TF1 graph whose tensors stand for Keras values.

Hooks build ops in `begin()` against the default graph, look tensors up by name
and fetch them. In Keras there is no such graph, so the adapter makes one per
run (one `fit`, one validation pass, one `evaluate`):

* a TF1-style global step: a non-resource `int64` variable named
  `global_step` in the `GLOBAL_STEP` collection, and a read tensor placed in
  TF's global-step-read cache, so `tf.compat.v1.train.get_global_step()` and
  `training_util._get_or_create_global_step_read()` both find ours;
* one `float32` placeholder per Keras log key that a hook names. Keras often
  builds its compiled metrics only at the first batch end, so the keys are not
  known in `begin()`; a name that is not in the graph is taken to be a log key
  and its placeholder is made on first lookup. Whether the key really exists is
  checked at the first step that fetches it.

A name means a log key unless the graph has a non-summary op of that name.
The placeholders live under `keras_logs/`, so that the TF1 idiom
`tf.compat.v1.summary.scalar("loss", loss)` gets its tag "loss" rather than
"loss_1"; and the summary op it makes, named "loss" too, does not hide the log
key from `LoggingTensorHook(["loss"])`.
"""

from __future__ import annotations

import re
from typing import Any

import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.framework import ops
from tensorflow.python.training import training_util

# Names TF accepts for an op; anything else cannot be a graph lookup anyway.
_OP_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/>]*$")
_LOG_SCOPE = "keras_logs/"
# Ops whose output is a serialized Summary: nobody fetches those by name, and
# they are named after the value they summarize.
_SUMMARY_OPS = frozenset(
    {"ScalarSummary", "HistogramSummary", "ImageSummary", "AudioSummaryV2", "TensorSummary",
     "TensorSummaryV2", "MergeSummary"}
)


def log_key_of(name: str) -> str:
    """Returns the Keras log key a tensor name refers to (`'loss:0'` -> `'loss'`)."""
    return name[:-2] if name.endswith(":0") else name


class DefaultGraphScope:
    """`with graph.as_default():` as one flat, reusable context manager.

    The hot path enters the adapter graph twice per step. `Graph.as_default()`
    nests three generator context managers (about 20 µs a use here); this does
    the same three things directly: record the context switch, push the graph
    on the default-graph stack, and leave eager mode. `tests/test_graph.py`
    checks it against `as_default()`.
    """

    __slots__ = ("_graph", "_switch", "_was_eager")

    def __init__(self, graph: tf.Graph) -> None:
        self._graph = graph
        # What `context_switches.push` would record, made once.
        self._switch = context.ContextSwitch(
            graph.building_function, graph.as_default, graph._device_function_stack  # pylint: disable=protected-access
        )
        self._was_eager: list[bool] = []

    def __enter__(self) -> tf.Graph:
        graph = self._graph
        ctx = context.context()
        ctx.context_switches.stack.append(self._switch)
        ops._default_graph_stack.stack.append(graph)  # pylint: disable=protected-access
        data = ctx._thread_local_data  # pylint: disable=protected-access
        self._was_eager.append(data.is_eager)
        data.is_eager = False
        return graph

    def __exit__(self, *exc_info: Any) -> None:
        ctx = context.context()
        ctx._thread_local_data.is_eager = self._was_eager.pop()  # pylint: disable=protected-access
        stack = ops._default_graph_stack.stack  # pylint: disable=protected-access
        if stack and stack[-1] is self._graph:
            stack.pop()
        elif self._graph in stack:
            stack.remove(self._graph)
        ctx.context_switches.pop()


class AdapterGraph(tf.Graph):
    """A `tf.Graph` holding the global step and lazily made log-key tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.log_tensors: dict[str, tf.Tensor] = {}
        # The placeholder tensors and their ops, each to its log key.
        self.placeholder_keys: dict[tf.Tensor | tf.Operation, str] = {}
        with self.as_default():
            self.global_step = tf.compat.v1.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                use_resource=False,
                name="global_step",
                collections=[
                    tf.compat.v1.GraphKeys.GLOBAL_VARIABLES,
                    tf.compat.v1.GraphKeys.GLOBAL_STEP,
                ],
            )
            # Put in TF's own cache, so hooks that ask for it (StopAtStepHook,
            # StepCounterHook) get a tensor we recognise. TF would build a
            # tf.cond guarding an uninitialised step; ours is always initialised.
            with self.name_scope("global_step/"):
                read = tf.math.add(self.global_step.value(), 0, name="read_value")
            self.add_to_collection(training_util.GLOBAL_STEP_READ_KEY, read)
            self._step_feed = tf.compat.v1.placeholder(tf.int64, [], name="global_step_feed")
            self.step_assign = tf.compat.v1.assign(self.global_step, self._step_feed).op
        self.step_tensor_names = frozenset(
            {self.global_step.name, self.global_step.value().name, read.name}
        )
        self.init_op: tf.Operation | None = None
        self.scope = DefaultGraphScope(self)

    # -- what the session needs --------------------------------------------

    def step_feed(self, value: Any) -> dict[tf.Tensor, Any]:
        """Returns the feed that sets the graph's global step to `value`."""
        return {self._step_feed: value}

    def seal(self) -> None:
        """Builds the initializer and finalizes the graph, as TF1's Scaffold does."""
        with self.as_default():
            self.init_op = tf.group(
                tf.compat.v1.global_variables_initializer(),
                tf.compat.v1.local_variables_initializer(),
                tf.compat.v1.tables_initializer(),
                name="hooks2callbacks_init",
            )
        self.finalize()

    def is_step(self, element: Any) -> bool:
        """Whether `element` (a tensor or variable of this graph) is the global step."""
        if element is self.global_step:
            return True
        return isinstance(element, tf.Tensor) and element.name in self.step_tensor_names

    # -- lazy log-key tensors ----------------------------------------------

    def existing_element(self, name: str) -> Any:
        """Returns the tensor or op called `name`, or None; makes no log-key tensor."""
        try:
            return self._own_element(name, True, True)
        except (KeyError, ValueError):
            return None

    def as_graph_element(self, obj: Any, allow_tensor: bool = True, allow_operation: bool = True) -> Any:
        try:
            return self._own_element(obj, allow_tensor, allow_operation)
        except KeyError:
            key = self._log_key_for_lookup(obj, allow_tensor)
            if key is None:
                raise
            tensor = self.log_tensor(key)
            return tensor if allow_tensor and (not allow_operation or ":" in obj) else tensor.op

    def _own_element(self, obj: Any, allow_tensor: bool, allow_operation: bool) -> Any:
        element = super().as_graph_element(obj, allow_tensor, allow_operation)
        if isinstance(obj, str):
            op = element if isinstance(element, tf.Operation) else element.op
            if op.type in _SUMMARY_OPS:
                raise KeyError(obj)  # the name is the log key's, not the summary's
        return element

    def _log_key_for_lookup(self, obj: Any, allow_tensor: bool) -> str | None:
        # Only output 0 of a plain op name can be a log key: LoggingTensorHook
        # probes "name:1" to check a name is unambiguous, and must miss.
        if not isinstance(obj, str) or not allow_tensor and ":" in obj:
            return None
        if ":" in obj and not obj.endswith(":0"):
            return None
        key = log_key_of(obj)
        return key if _OP_NAME.match(key) else None

    def log_tensor(self, key: str) -> tf.Tensor:
        """Returns the placeholder standing for log key `key`, making it if needed."""
        tensor = self.log_tensors.get(key)
        if tensor is not None:
            return tensor
        sealed = self.finalized
        if sealed:
            self._unsafe_unfinalize()  # pylint: disable=protected-access
        try:
            with self.as_default(), self.name_scope(None):
                tensor = tf.compat.v1.placeholder(tf.float32, shape=None, name=_LOG_SCOPE + key)
        finally:
            if sealed:
                self.finalize()
        self.log_tensors[key] = tensor
        self.placeholder_keys[tensor] = key
        self.placeholder_keys[tensor.op] = key
        return tensor


def log_tensor(key: str) -> tf.Tensor:
    """Returns the tensor standing for Keras log key `key` in the current adapter graph.

    Use it where TF1 code used a `model_fn` tensor: in a hooks factory given to
    `HookCallback`, or in a hook's `begin()`. For example
    `tf.compat.v1.summary.scalar("loss", log_tensor("loss"))`. When fetched,
    it has the value Keras logged for `key` at that step.

    Args:
        key: A log key such as `"loss"` or `"val_accuracy"` (`"loss:0"` also works).

    Returns:
        A `float32` tensor of the adapter graph.

    Raises:
        RuntimeError: Called outside a run of `HookCallback` (the default graph
            is not an adapter graph).
        ValueError: `key` is not a usable tensor name.
    """
    graph = ops.get_default_graph()
    if not isinstance(graph, AdapterGraph):
        raise RuntimeError(
            f"log_tensor({key!r}) was called outside HookCallback: the default graph is not an "
            "adapter graph. Call it inside a hooks factory, HookCallback(lambda: [...]), or in "
            "a hook's begin()."
        )
    name = log_key_of(key) if isinstance(key, str) else None
    if name is None or not _OP_NAME.match(name):
        raise ValueError(f"log_tensor({key!r}): a log key is a name such as 'loss' or 'accuracy'.")
    return graph.log_tensor(name)
