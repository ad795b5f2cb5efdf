"""Fetch resolution: what `SessionRunArgs.fetches` means when Keras runs the step.

A fetch structure is compiled once into a `Plan`; a hook that returns the same
fetches object every step (as the stock hooks do) reuses it. Each leaf is one of:

* a Keras log key (`'loss'`, `'loss:0'`, or the adapter graph's tensor for it):
  the step's value (the batch's own, or Keras's running mean with
  `values="running_mean"`: see `hooks2callbacks._batch`), with no graph run;
* the global step (the variable, its tensors, its name, or the model's
  `optimizer.iterations`): the step's value, with no graph run;
* an eager `tf.Variable` or Keras variable, or the adapter graph's variable
  for one (`"dense/kernel:0"`, `"learning_rate"`): its current Keras value,
  with no graph run (a rate a schedule computes: its value at the step the
  hooks see, the rate that trained the step: `_model.Entry.read_at`);
* any other tensor or op of the adapter graph ("derived"): computed by one real
  `Session.run` for the step, with the log values fed to their placeholders.
  Compiling finds which model variables it reads or writes, for the session
  to sync (`hooks2callbacks._model`).

A name means what `AdapterGraph.meaning` says (a hook's op, the names map, a
model variable, else a log key), except that a name meaning the learning rate
gives the log value of that name when the step's logs hold one.

Every leaf's value is what `Session.run` gives for its tensor (`fetched`, the
one place that decides it): a numpy scalar of the tensor's dtype for a 0-d
value (`np.float32` for a log key, whose tensor is a float32 placeholder;
`np.int64` for the global step), an `ndarray` otherwise, `bytes` for a string.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from hooks2callbacks._graph import AdapterGraph, log_key_of
from hooks2callbacks._keras_state import accumulation_steps, optimizer_of, read_variable
from hooks2callbacks._model import LEARNING_RATE, Entry, writes_ref
from hooks2callbacks._tensors import missing_help, root_of

# resolve(logs, step, ran) -> results. `step` is a numpy int64, as TF1 returns the
# int64 variable's value; `ran` maps derived elements to their values.
Resolver = Callable[[Mapping[str, Any], np.int64, Mapping[Any, Any]], Any]

ACCEPTED = (
    "a Keras log key (str such as 'loss' or 'loss:0'), a tensor, op or variable of "
    "the adapter graph, the global step, an eager tf.Variable or keras.Variable, "
    "or a dict, list, tuple or namedtuple of these"
)


def fetched(value: Any) -> Any:
    """`value` as `Session.run` gives a tensor's value: the one place that decides the types hooks see.

    Keras's logs hold Python floats (its `pythonify_logs`) and Keras variables read
    as 0-d arrays; TF1's `Session.run` gave a numpy scalar of the tensor's dtype for
    a 0-d tensor and an `ndarray` for any other. A log key's tensor in the adapter
    graph is a float32 placeholder, so its number is `np.float32` (exact: Keras's
    float32 values became those Python floats). Structures (a batch root's dict or
    list of leaves) are converted leaf by leaf.

    Args:
        value: A log value, a variable's value or a batch tensor's value.

    Returns:
        The value as TF1 hooks got it.
    """
    kind = type(value)
    if kind is float or kind is int:
        return np.float32(value)
    if kind is np.ndarray:
        return value[()] if not value.shape else value  # 0-d: its scalar (bytes for a string)
    if kind is dict:
        return {k: fetched(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return kind(fetched(v) for v in value)
    return value


class UnknownLogKeyError(ValueError):
    """A hook fetched Keras log keys that the step's logs do not contain (the message names them all)."""

    __module__ = "hooks2callbacks"  # as tracebacks show it: the public name


@dataclasses.dataclass(frozen=True)
class Plan:
    """A compiled fetch structure.

    Attributes:
        fetches: The structure it was compiled from (kept so identity caching is safe).
        resolve: Builds the results from the logs, the step and the graph run's values.
        derived: Graph elements that need a real `Session.run`.
        fed_keys: Log keys whose placeholders the derived elements depend on.
        reads: Model variables (mirror entries) they only read, fed their Keras values.
        loads: Model variables they write or otherwise use, loaded from Keras first.
        stores: The model variables they write, whose values go back into Keras.
        uses_step: Whether they read or write the global step (so it must be set first).
        writes_step: Whether they write the global step.
    """

    fetches: Any
    resolve: Resolver
    derived: tuple[Any, ...]
    fed_keys: tuple[str, ...] = ()
    reads: tuple[Entry, ...] = ()
    loads: tuple[Entry, ...] = ()
    stores: tuple[Entry, ...] = ()
    uses_step: bool = False
    writes_step: bool = False


def log_value(
    logs: Mapping[str, Any], key: str, where: str, keys: Sequence[str] = (), names: Mapping[str, Any] | None = None
) -> Any:
    """Returns `logs[key]`.

    Args:
        logs: The step's logs.
        key: The log key.
        where: Who fetched it, for the error.
        keys: Every log key of the same fetch, so that the error names all missing ones.
        names: The names map, shown in the error.

    Raises:
        UnknownLogKeyError: `key` is not in `logs`.
    """
    try:
        return logs[key]
    except KeyError:
        missing = list(dict.fromkeys(k for k in (key, *keys) if k not in logs))
        what = (
            f"the Keras log key {missing[0]!r}"
            if len(missing) == 1
            else (f"the Keras log keys {', '.join(map(repr, missing))}")
        )
        from_loop = getattr(logs, "from_loop", False)
        hints = "".join(missing_help(k, from_loop) for k in missing if root_of(k) is not None)
        for k in missing:
            close = difflib.get_close_matches(k, list(logs), n=1, cutoff=0.8)
            entries = [n for n, t in (names or {}).items() if isinstance(t, str) and log_key_of(t) == k]
            if entries:  # the key came from the names map: the entry is what to correct
                hints += f" The names map sends {entries[0]!r} to {k!r}, which names no log key of this step"
                hints += f" (did you mean {close[0]!r}?); correct that entry." if close else "; correct that entry."
            elif close:
                hints += f" Did you mean {close[0]!r} for {k!r}?"
        raise UnknownLogKeyError(
            f"{where} fetched {what}, which this step's logs do not contain.{hints} Available log keys: "
            f"{sorted(logs)}. Names map: {describe_names(names or {})}. Fetch one of those keys or "
            "the global step, or map each TF1 name to a log key or a Keras variable with "
            "HookCallback(names={'tf1_name': 'loss'})."
        ) from None


def describe_names(names: Mapping[str, Any]) -> str:
    """The names map as messages show it: names as given, variables by their Keras path."""
    if not names:
        return "none (HookCallback(names=...) was not given)"
    return repr(
        {
            k: v if isinstance(v, str) else f"<variable {getattr(v, 'path', getattr(v, 'name', v))}>"
            for k, v in names.items()
        }
    )


def compile_fetches(fetches: Any, graph: AdapterGraph, model: Any, where: str) -> Plan:
    """Compiles a fetch structure into a `Plan`.

    Args:
        fetches: What the hook asked for.
        graph: The run's adapter graph.
        model: The Keras model, whose `optimizer.iterations` counts as the global step.
        where: Who asked, for error messages (`"MyHook.before_run"`).

    Returns:
        The plan.

    Raises:
        TypeError: A leaf or container of an unsupported type.
        ValueError: A tensor or op of another graph, an unknown graph name, or an op
            that writes a learning rate a schedule computes.
    """
    derived: list[Any] = []
    keys: list[str] = []  # every log key of the plan, for an error naming all missing ones
    names = graph.names
    mirror = graph.mirror
    optimizer = optimizer_of(model)
    # With gradient accumulation `iterations` is computed at each read: no object to match.
    iterations = getattr(optimizer, "iterations", None) if accumulation_steps(optimizer) == 1 else None

    def leaf(obj: Any) -> Resolver:
        if isinstance(obj, str):
            return name_leaf(obj)
        if iterations is not None and obj is iterations:
            return _step
        if isinstance(obj, (tf.Tensor, tf.Operation)) or _is_graph_variable(obj):
            _check_graph(obj, graph, where)
            return graph_leaf(obj)
        if isinstance(obj, (tf.Variable, keras.Variable)):
            return lambda logs, step, ran: fetched(read_variable(obj, model))
        if isinstance(obj, tf.distribute.DistributedValues):
            # What a strategy's run() returns in the graph: one value per replica.
            parts = [leaf(v) for v in obj.values]
            return lambda logs, step, ran: tuple(f(logs, step, ran) for f in parts)
        raise TypeError(f"{where} fetched {obj!r} of type {type(obj).__name__}. Accepted: {ACCEPTED}.")

    def name_leaf(name: str) -> Resolver:
        key = log_key_of(name)
        if name in graph.step_tensor_names or key == graph.global_step.op.name:
            return _step
        element = graph.existing_element(name)
        if element is not None:
            # A model variable's bare name means its value, as a log key's does.
            entry = mirror.by_op.get(element) if mirror is not None and isinstance(element, tf.Operation) else None
            return graph_leaf(element) if entry is None else entry_leaf(entry)
        if ":" in name and not name.endswith(":0"):
            raise ValueError(
                f"{where} fetched {name!r}, which names no tensor of the adapter graph; "
                "a Keras log key is fetched as 'key' or 'key:0'."
            )
        meaning = graph.meaning(key)
        if isinstance(meaning, str):
            return log_leaf(meaning)
        if isinstance(meaning, tf.Operation) and ":" in name and meaning.outputs:
            # A tensor's name mapped to an op's name (`{"cross_entropy": "my_loss"}`, the hook's own
            # `my_loss` tensor): the fetch asked for a tensor, so it gets the op's output, not the op's None.
            meaning = meaning.outputs[0]
        return entry_leaf(meaning) if isinstance(meaning, Entry) else graph_leaf(meaning)

    def entry_leaf(entry: Entry) -> Resolver:
        """A model variable by name: its Keras value (a scheduled rate's at the step), with no graph run."""
        read = entry.reader_at()
        if mirror is not None and entry is mirror.rate:
            # A metric named "learning_rate" wins over the optimizer's rate.
            return lambda logs, step, ran: fetched(logs[LEARNING_RATE] if LEARNING_RATE in logs else read(step))
        return lambda logs, step, ran: fetched(read(step))

    def log_leaf(key: str) -> Resolver:
        keys.append(key)
        if root_of(key) is not None:
            graph.batch_names.add(key)
        return lambda logs, step, ran: fetched(log_value(logs, key, where, keys, names))

    def graph_leaf(element: Any) -> Resolver:
        if graph.is_step(element):
            return _step
        entry = mirror.entry_of_element(element) if mirror is not None else None
        if entry is not None:  # a model variable itself: read it from Keras, no graph run
            read = entry.reader_at()
            return lambda logs, step, ran: fetched(read(step))
        if isinstance(element, tf.Variable):
            # A variable a hook made (ref or resource; unhashable): what Session.run
            # fetches for it, the tensor of its value.
            element = graph.as_graph_element(element, allow_tensor=True, allow_operation=False)
        key = graph.placeholder_keys.get(element)
        if key is not None:
            return log_leaf(key)
        derived.append(element)
        return lambda logs, step, ran: ran[element]

    def node(obj: Any, depth: int) -> Resolver:
        if depth > _MAX_DEPTH:
            raise ValueError(f"{where} fetched a structure nested deeper than {_MAX_DEPTH} levels.")
        if isinstance(obj, collections.abc.Mapping):
            items = [(k, node(v, depth + 1)) for k, v in obj.items()]
            make: Callable[..., Any] = type(obj) if type(obj) in (dict, collections.OrderedDict) else dict
            return lambda logs, step, ran: make([(k, f(logs, step, ran)) for k, f in items])
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            parts = [node(v, depth + 1) for v in obj]
            fields: Callable[..., Any] = type(obj)
            return lambda logs, step, ran: fields(*[f(logs, step, ran) for f in parts])
        if isinstance(obj, (list, tuple)):
            parts = [node(v, depth + 1) for v in obj]
            sequence: Callable[..., Any] = type(obj)
            return lambda logs, step, ran: sequence([f(logs, step, ran) for f in parts])
        return leaf(obj)

    resolve = node(fetches, 0)
    unique = tuple(dict.fromkeys(derived))
    if not unique:
        return Plan(fetches, resolve, unique)
    ops_run = _subgraph(unique)
    fed = {graph.placeholder_keys[t] for op in ops_run for t in op.outputs if t in graph.placeholder_keys}
    reads, loads, stores = mirror.uses(ops_run, where) if mirror is not None else ((), (), ())
    uses_step = graph.global_step.op in ops_run
    writes_step = uses_step and any(writes_ref(op) is graph.global_step.op for op in ops_run)
    return Plan(fetches, resolve, unique, tuple(sorted(fed)), reads, loads, stores, uses_step, writes_step)


_MAX_DEPTH = 100


def check_feeds(feed_dict: Any, graph: AdapterGraph, where: str) -> dict[Any, Any]:
    """Checks a hook's feeds: tensors of the adapter graph (placeholders it built), by tensor or name.

    Returns:
        The feeds, keyed by tensor.

    Raises:
        TypeError: `feed_dict` is not a mapping.
        ValueError: A feed of a log-key tensor or of the global step (their values
            are Keras's), of another graph's tensor, or of a name that is no tensor.
    """
    if not isinstance(feed_dict, collections.abc.Mapping):
        raise TypeError(
            f"{where} passed feed_dict={feed_dict!r} of type {type(feed_dict).__name__}; a "
            "feed_dict is a dict from tensors (or their names) to values."
        )
    feeds: dict[Any, Any] = {}
    for key, value in feed_dict.items():
        tensor = _feed_target(key, graph, where)
        log_key = graph.placeholder_keys.get(tensor)
        if log_key is not None:
            raise ValueError(
                f"{where} feeds {key!r}, the tensor of the Keras log key {log_key!r}. Its value is "
                "the step's own value of that key, and a feed would replace it. Feed only placeholders "
                "the hook built itself in begin(); the model's inputs come from the data given to "
                "fit()/evaluate() (change them with a tf.data map or a keras.utils.PyDataset)."
            )
        if tensor is graph.global_step or graph.is_step(tensor):
            raise ValueError(
                f"{where} feeds {key!r}, the global step. Its value is the Keras optimizer's step "
                "count (model.optimizer.iterations), and a feed would replace it. Feed only "
                "placeholders the hook built itself in begin()."
            )
        entry = graph.mirror.entry_of_element(tensor) if graph.mirror is not None else None
        if entry is not None:
            # Ops read a model variable through its ref or its value tensor (which
            # the run may feed the Keras value): fed at both, the value reaches all.
            feeds[entry.variable.value()] = value
            tensor = graph.mirror.tensor(entry)
        feeds[tensor] = value
    return feeds


def _feed_target(key: Any, graph: AdapterGraph, where: str) -> Any:
    if isinstance(key, str):
        element = graph.existing_element(key)
        if element is None and (":" not in key or key.endswith(":0")):
            meaning = graph.meaning(log_key_of(key))
            # A log key's tensor is refused by the caller, saying why; an unknown name here.
            if not isinstance(meaning, str) or meaning in graph.log_tensors:
                element = graph.tensor_of(meaning)
        if not isinstance(element, tf.Tensor):
            raise ValueError(
                f"{where} feeds {key!r}, which names no tensor of the adapter graph. Feed only "
                "placeholders the hook built in begin(), by tensor or by name. A TF1 model_fn's "
                "placeholders (the model's inputs) are not there: Keras takes its inputs from the "
                "data given to fit()/evaluate(); change them with a tf.data map or a "
                "keras.utils.PyDataset."
            )
        return element
    if isinstance(key, (tf.Tensor, tf.Variable)) and _has_graph(key):
        _check_graph(key, graph, where, "feeds")
        return key
    raise TypeError(
        f"{where} feeds {key!r} of type {type(key).__name__}. A feed_dict key is a tensor of the "
        "adapter graph (a placeholder the hook built in begin()) or its name."
    )


def _check_graph(obj: Any, graph: AdapterGraph, where: str, verb: str = "fetched") -> None:
    if obj.graph is not graph:
        whose = (
            "the adapter graph of another run (an earlier fit/evaluate, or another "
            "HookCallback); each run has its own graph"
            if isinstance(obj.graph, AdapterGraph)
            else "another graph"
        )
        raise ValueError(
            f"{where} {verb} {obj!r}, which belongs to {whose}. Hooks must build "
            "their tensors in begin() of the run that fetches them, when the run's "
            "graph is the default graph, or fetch log keys by name."
        )


def _step(logs: Mapping[str, Any], step: np.int64, ran: Mapping[Any, Any]) -> np.int64:
    return step


def _is_graph_variable(obj: Any) -> bool:
    return isinstance(obj, tf.Variable) and _has_graph(obj)


def _has_graph(obj: Any) -> bool:
    try:
        return obj.graph is not None
    except (AttributeError, RuntimeError):
        return False


def _subgraph(elements: tuple[Any, ...]) -> set[tf.Operation]:
    """The ops a run of `elements` may execute: their inputs and control inputs, transitively."""
    seen: set[tf.Operation] = set()
    stack = [e if isinstance(e, tf.Operation) else e.op for e in elements]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen
