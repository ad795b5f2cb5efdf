"""The graph that hooks see: a TF1 graph whose tensors stand for Keras values.

Hooks build ops in `begin()` against the default graph, look tensors up by name
and fetch them. In Keras there is no such graph, so the adapter makes one per
run (one `fit`, one validation pass, one `evaluate`):

* a TF1-style global step: a non-resource `int64` variable named
  `global_step` in the `GLOBAL_STEP` collection, and a read tensor placed in
  TF's global-step-read cache, so `tf.compat.v1.train.get_global_step()` and
  `training_util._get_or_create_global_step_read()` both find ours;
* one placeholder per Keras log key that a hook names (`float32`; the batch's
  tensors, `features`, `labels`, ..., as `hooks2callbacks._tensors` says). Keras often
  builds its compiled metrics only at the first batch end, so the keys are not
  known in `begin()`; a name that is not in the graph is taken to be a log key
  and its placeholder is made on first lookup. Whether the key really exists is
  checked at the first step that fetches it.

A name means a log key unless the graph has a non-summary op of that name.
The placeholders live under `keras_logs/`, so that the TF1 idiom
`tf.compat.v1.summary.scalar("loss", loss)` gets its tag "loss" rather than
"loss_1"; and the summary op it makes, named "loss" too, does not hide the log
key from `LoggingTensorHook(["loss"])`.

The graph also stands for the Keras model, as a TF1 model graph did:

* its variables and its optimizer's, as TF1 variables (`hooks2callbacks._model`),
  made when hook code first asks for them: the collections `GLOBAL_VARIABLES`,
  `TRAINABLE_VARIABLES`, `MODEL_VARIABLES` and the variable store, or a name
  such as `"dense/kernel:0"` or `"learning_rate"`;
* `LOSSES` holds the `"loss"` log-key tensor, so `tf.compat.v1.losses.get_losses()`
  and `get_total_loss()` give the loss (Keras's loss already includes the
  regularization losses, so `REGULARIZATION_LOSSES` stays empty);
* the names map of `HookCallback(names=...)` gives TF1 names to log keys and
  variables that Keras names differently.

A name is looked up in that order: an op of the graph (hooks' ops, the global
step), the names map, a mirror variable, else a log key. Hook code that reads a
collection a TF1 `model_fn` filled and Keras does not (see `FOREIGN_KEYS`, and
any collection not named in `tf.compat.v1.GraphKeys`) while it is empty gets a
`UserWarning`: such a hook would run silently wrong.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import warnings
from collections.abc import Mapping
from types import FrameType
from typing import Any

import tensorflow as tf

from hooks2callbacks._seams import context, graph_mode_on, meta_graph, ops, training_util
from hooks2callbacks._tensors import placeholder_dtype, root_of

# Names TF accepts for an op; anything else cannot be a graph lookup anyway.
OP_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/>]*$")
_LOG_SCOPE = "keras_logs/"
# Ops whose output is a serialized Summary: nobody fetches those by name, and
# they are named after the value they summarize.
_SUMMARY_OPS = frozenset(
    {
        "ScalarSummary",
        "HistogramSummary",
        "ImageSummary",
        "AudioSummaryV2",
        "TensorSummary",
        "TensorSummaryV2",
        "MergeSummary",
    }
)
_KEYS = tf.compat.v1.GraphKeys
# The collections that hold the model's variables (the mirror's), and the
# variable store that `get_variable` and `init_from_checkpoint` search.
_MODEL_KEYS = frozenset(
    {_KEYS.GLOBAL_VARIABLES, _KEYS.TRAINABLE_VARIABLES, _KEYS.MODEL_VARIABLES, ("__variable_store",)}
)
# GraphKeys that a TF1 model_fn filled and a Keras model leaves empty. Other
# GraphKeys (SUMMARIES, UPDATE_OPS, LOCAL_VARIABLES, QUEUE_RUNNERS, ...) are
# TF's own business, and any name outside GraphKeys is the model_fn's.
FOREIGN_KEYS = frozenset(
    {
        _KEYS.REGULARIZATION_LOSSES,
        _KEYS.TRAIN_OP,
        _KEYS.ACTIVATIONS,
        _KEYS.WEIGHTS,
        _KEYS.BIASES,
        _KEYS.MOVING_AVERAGE_VARIABLES,
        _KEYS.METRIC_VARIABLES,
    }
)
_BATCH_HINT = (
    " The batch's tensors have names of their own: log_tensor('predictions'), 'features', 'labels' "
    "and 'sample_weight' (docs: What hooks see, the batch's tensors)."
)
_HINTS = {
    _KEYS.REGULARIZATION_LOSSES: (
        " Keras's loss already includes the model's regularization losses, so get_total_loss() is right without them."
    ),
    "predictions": _BATCH_HINT,
    "features": _BATCH_HINT,
    "labels": _BATCH_HINT,
}
_GRAPH_KEYS = frozenset(v for k, v in vars(_KEYS).items() if k.isupper() and isinstance(v, str))
# Code that reads collections for its own purposes: TF and Keras, and this package.
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_OPS_FILE = ops.__file__
_META_GRAPH_FILE = meta_graph.__file__
_FRAMEWORK = tuple(
    os.path.dirname(os.path.abspath(spec.origin)) + os.sep
    for spec in map(importlib.util.find_spec, ("tensorflow", "keras", "tf_keras", "tensorboard"))
    if spec is not None and spec.origin
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
            graph.building_function,
            graph.as_default,
            graph._device_function_stack,  # pylint: disable=protected-access
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
        # Set by the run (`HookRunner`): the model mirror, the names map (TF1
        # name -> log key, name or variable) and who is calling, for messages.
        self.mirror: Any = None
        self.names: Mapping[str, Any] = {}
        self.owner: Any = None
        self.model: Any = None  # for the dtypes of the batch's tensors
        # The batch's tensors (`_tensors`) that hook code looked up or fetched.
        self.batch_names: set[str] = set()
        self._warned: set[Any] = set()
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
            self._step_initializer = self.global_step.initializer
            self._step_feed = tf.compat.v1.placeholder(tf.int64, [], name="global_step_feed")
            self.step_assign = tf.compat.v1.assign(self.global_step, self._step_feed).op
        self.step_tensor_names = frozenset({self.global_step.name, self.global_step.value().name, read.name})
        self.init_op: tf.Operation | None = None
        self.scope = DefaultGraphScope(self)
        self._own_ops = len(self.get_operations())

    # -- what the session needs --------------------------------------------

    def step_feed(self, value: Any) -> dict[tf.Tensor, Any]:
        """Returns the feed that sets the graph's global step to `value`."""
        return {self._step_feed: value}

    def seal(self) -> None:
        """Builds the initializer and finalizes the graph, as TF1's Scaffold does.

        Mirror variables are loaded from Keras when a run needs them, so only
        those that `init_from_checkpoint` gave an initializer are initialized.
        Sealing does not build the mirror.
        """
        mirror = self.mirror
        variables = [
            v for v in tf.Graph.get_collection(self, _KEYS.GLOBAL_VARIABLES) if mirror is None or not mirror.owns(v)
        ]
        restored = [e.variable.initializer for e in mirror.restored()] if mirror is not None else []
        with self.as_default():
            self.init_op = tf.group(
                tf.compat.v1.variables_initializer(variables),
                tf.compat.v1.local_variables_initializer(),
                tf.compat.v1.tables_initializer(),
                *restored,
                name="hooks2callbacks_init",
            )
        self.finalize()

    def step_restored(self) -> bool:
        """Whether `init_from_checkpoint` gave the global step an initializer (a warm start of the step)."""
        return self.global_step.initializer is not self._step_initializer

    def restores(self) -> bool:
        """Whether the session must be made at once, to restore what `init_from_checkpoint` set up."""
        return self.step_restored() or bool(self.mirror is not None and self.mirror.restored())

    def built_by_hooks(self) -> bool:
        """Whether hooks (or the model's variables they asked for) added ops, which a session will run."""
        return any(op not in self.placeholder_keys for op in self.get_operations()[self._own_ops :])

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
            tensor = self.tensor_of(self.meaning(key))
            return tensor if allow_tensor and (not allow_operation or ":" in obj) else tensor.op

    def meaning(self, key: str) -> Any:
        """What a name that is no op of the graph means: a mirror `Entry`, a graph element, or a log key (str).

        Args:
            key: An op name (`"dense/kernel"`, `"cross_entropy"`), without `:0`.
        """
        seen = {key}
        target = self.names.get(key)
        while isinstance(target, str):  # a name for another name
            element = self.existing_element(target)
            if element is not None:
                # A model variable's bare name means the variable (its value), not its op: once the
                # mirror is built, `"learning_rate"` is an op of the graph.
                entry = self.mirror.by_op.get(element) if self.mirror is not None else None
                return element if entry is None else entry
            key = log_key_of(target)
            if key in seen:
                break
            seen.add(key)
            target = self.names.get(key)
        mirror = self.mirror
        if target is not None and mirror is not None:
            entry = mirror.of_variable(target)
            if entry is not None:
                return entry
            if mirror.is_step(target):
                return self.global_step._ref()  # pylint: disable=protected-access
        entry = mirror.find(key) if mirror is not None else None
        return entry if entry is not None else key

    def tensor_of(self, meaning: Any) -> tf.Tensor:
        """The tensor for what `meaning` returned: a mirror variable's, a log key's, or the element's."""
        if isinstance(meaning, str):
            return self.log_tensor(meaning)
        if isinstance(meaning, tf.Operation):
            return meaning.outputs[0] if meaning.outputs else meaning
        if isinstance(meaning, tf.Tensor):
            return meaning
        return self.mirror.tensor(meaning)

    # -- collections ----------------------------------------------------------

    def get_collection(self, name: Any, scope: Any = None) -> list[Any]:
        if name in _MODEL_KEYS or name == _KEYS.LOSSES:
            self._fill(name)
        items = super().get_collection(name, scope)
        if not items and (name in FOREIGN_KEYS or isinstance(name, str) and name not in _GRAPH_KEYS):
            self._warn_empty(name)
        return items

    def get_collection_ref(self, name: Any) -> list[Any]:
        if name in _MODEL_KEYS or name == _KEYS.LOSSES:
            self._fill(name)
        return super().get_collection_ref(name)

    def _fill(self, name: Any) -> None:
        if name != _KEYS.LOSSES:
            if self.mirror is not None:
                # A FileWriter's meta-graph export reads every collection: for a model
                # with no weights yet it lists none. Any other read is an error then.
                if self.mirror.ready() or not _exporting_meta_graph():
                    self.mirror.build()
            return
        loss = self.log_tensor("loss")
        if loss not in super().get_collection(name):
            with Unsealed(self):
                self.add_to_collection(name, loss)

    def _warn_empty(self, name: str) -> None:
        if name in self._warned or not _called_by_hook_code():
            return
        self._warned.add(name)
        caller = getattr(self.owner, "caller", "A hook")
        warnings.warn(
            f"HookCallback: {caller} read the graph collection {name!r}, which is empty. A TF1 "
            "model_fn filled it, and a Keras model does not, so the hook sees nothing there (a "
            "count of 0, nothing to log or broadcast). HookCallback fills GLOBAL_VARIABLES, "
            "TRAINABLE_VARIABLES and MODEL_VARIABLES (the model's and optimizer's variables) and "
            f"LOSSES (the loss).{_HINTS.get(name, '')} Fill this one yourself in a hooks factory, "
            f"before making the hooks (tf.compat.v1.add_to_collection({name!r}, "
            "hooks2callbacks.log_tensor('some_key'))), or change the hook to fetch log keys or variables.",
            UserWarning,
            stacklevel=3,
        )

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
        return key if OP_NAME.match(key) else None

    def log_tensor(self, key: str) -> tf.Tensor:
        """Returns the placeholder standing for log key `key`, making it if needed."""
        tensor = self.log_tensors.get(key)
        if tensor is not None:
            return tensor
        dtype = tf.float32
        if root_of(key) is not None:
            self.batch_names.add(key)
            dtype = placeholder_dtype(self.model, key)
        with Unsealed(self), self.as_default(), self.name_scope(None), self.control_dependencies(None):
            tensor = tf.compat.v1.placeholder(dtype, shape=None, name=_LOG_SCOPE + key)
        self.log_tensors[key] = tensor
        self.placeholder_keys[tensor] = key
        self.placeholder_keys[tensor.op] = key
        return tensor


class Unsealed:
    """Unfinalizes a finalized graph for the duration of a `with` block.

    Log-key tensors, the model's variables and `LOSSES` are made on first need,
    which may come after the graph was finalized (a name looked up in `before_run`).
    """

    __slots__ = ("_graph", "_sealed")

    def __init__(self, graph: tf.Graph) -> None:
        self._graph = graph
        self._sealed = False

    def __enter__(self) -> None:
        self._sealed = self._graph.finalized
        if self._sealed:
            self._graph._unsafe_unfinalize()  # pylint: disable=protected-access

    def __exit__(self, *exc_info: Any) -> None:
        if self._sealed:
            self._graph.finalize()


def _exporting_meta_graph() -> bool:
    """Whether the collection read in progress is part of a meta-graph export."""
    frame: FrameType | None = sys._getframe(1)  # pylint: disable=protected-access
    while frame is not None:
        if frame.f_code.co_filename == _META_GRAPH_FILE:
            return True
        frame = frame.f_back
    return False


def _called_by_hook_code() -> bool:
    """Whether the collection read in progress comes from hook code rather than TF or Keras.

    Skips this package and `ops.get_collection` (the public wrapper); the next
    frame is the reader.
    """
    frame: FrameType | None = sys._getframe(2)  # pylint: disable=protected-access
    while frame is not None and (
        frame.f_code.co_filename.startswith(_PACKAGE) or frame.f_code.co_filename == _OPS_FILE
    ):
        frame = frame.f_back
    return frame is not None and not frame.f_code.co_filename.startswith(_FRAMEWORK)


def log_tensor(key: str) -> tf.Tensor:
    """Returns the tensor standing for Keras log key `key` in the current adapter graph.

    Use it where TF1 code used a `model_fn` tensor: in a hooks factory given to
    `HookCallback`, or in a hook's `begin()`. For example
    `tf.compat.v1.summary.scalar("loss", log_tensor("loss"))`. When fetched,
    it has the value Keras logged for `key` at that step.

    Args:
        key: A log key such as `"loss"` or `"val_accuracy"` (`"loss:0"` also works),
            a batch tensor's name (`"labels"`), or a TF1 name of the names map
            (`HookCallback(names={"train_accuracy": "accuracy"})`: then
            `log_tensor("train_accuracy")` is the tensor of `"accuracy"`).

    Returns:
        A tensor of the adapter graph: a `float32` placeholder for a log key.

    Raises:
        RuntimeError: Called outside a run of `HookCallback` (the default graph
            is not an adapter graph).
        ValueError: `key` is not a usable tensor name; in TF1 graph mode, the
            model's graph has no tensor of that name (there `log_tensor` is the
            graph's own tensor: the loss as `"loss"`, the metrics by their log keys).
    """
    graph = ops.get_default_graph()
    if not isinstance(graph, AdapterGraph) and graph_mode_on():
        # TF1 graph mode (`_graph_mode`): the model's own graph, where HookCallback names
        # the loss "loss" and each metric by its log key.
        try:
            return graph.get_tensor_by_name(f"{log_key_of(key)}:0")
        except (KeyError, ValueError) as error:
            raise ValueError(
                f"log_tensor({key!r}): in TF1 graph mode the model's graph has no tensor named "
                f"{key!r}. HookCallback names the loss 'loss' and each metric by its log key "
                "(model.metrics_names) at the start of each run; call log_tensor in a hooks "
                "factory or a hook's begin()."
            ) from error
    if not isinstance(graph, AdapterGraph):
        raise RuntimeError(
            f"log_tensor({key!r}) was called outside HookCallback: the default graph is not an "
            "adapter graph. Call it inside a hooks factory, HookCallback(lambda: [...]), or in "
            "a hook's begin()."
        )
    name = log_key_of(key) if isinstance(key, str) else None
    if name is None or not OP_NAME.match(name):
        raise ValueError(f"log_tensor({key!r}): a log key is a name such as 'loss' or 'accuracy'.")
    if name in graph.names:
        # A TF1 name of the names map: the tensor of what it maps to (a log key, a batch
        # tensor, a model variable), as the name itself means in a fetch.
        return graph.tensor_of(graph.meaning(name))
    return graph.log_tensor(name)
