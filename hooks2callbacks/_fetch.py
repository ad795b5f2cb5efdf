"""Fetch resolution: what `SessionRunArgs.fetches` means when Keras runs the step.

A fetch structure is compiled once into a `Plan`; a hook that returns the same
fetches object every step (as the stock hooks do) reuses it. Each leaf is one of:

* a Keras log key (`'loss'`, `'loss:0'`, or the adapter graph's tensor for it):
  the value Keras reported, unchanged, with no graph run;
* the global step (the variable, its tensors, its name, or the model's
  `optimizer.iterations`): the step's value, with no graph run;
* an eager `tf.Variable` or Keras variable: its current value;
* any other tensor or op of the adapter graph ("derived"): computed by one real
  `Session.run` for the step, with the log values fed to their placeholders.
"""

from __future__ import annotations

import collections.abc
import dataclasses
from typing import Any, Callable, Mapping

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

from hooks2callbacks._graph import AdapterGraph, log_key_of

# resolve(logs, step, ran) -> results. `step` is a numpy int64, as TF1 returns the
# int64 variable's value; `ran` maps derived elements to their values.
Resolver = Callable[[Mapping[str, Any], np.int64, Mapping[Any, Any]], Any]

ACCEPTED = (
    "a Keras log key (str such as 'loss' or 'loss:0'), a tensor or op of the "
    "adapter graph, the global step, an eager tf.Variable or keras.Variable, "
    "or a dict, list, tuple or namedtuple of these"
)


class UnknownLogKeyError(ValueError):
    """A hook fetched a Keras log key that the step's logs do not contain."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """A compiled fetch structure.

    Attributes:
        fetches: The structure it was compiled from (kept so identity caching is safe).
        resolve: Builds the results from the logs, the step and the graph run's values.
        derived: Graph elements that need a real `Session.run`.
        fed_keys: Log keys whose placeholders the derived elements depend on.
    """

    fetches: Any
    resolve: Resolver
    derived: tuple[Any, ...]
    fed_keys: tuple[str, ...]


def log_value(logs: Mapping[str, Any], key: str, where: str) -> Any:
    """Returns `logs[key]`, or raises an error naming `where` and the available keys."""
    try:
        return logs[key]
    except KeyError:
        raise UnknownLogKeyError(
            f"{where} fetched the Keras log key {key!r}, which this step's logs do "
            f"not contain. Available log keys: {sorted(logs)}. Fetch one of those, "
            f"or the global step."
        ) from None


def read_variable(variable: Any, model: Any = None) -> Any:
    """Reads an eager TF or Keras variable from inside the adapter graph's context."""
    # Keras's JAX trainer keeps the state outside the variables during an epoch;
    # this writes it back (as `Callback.model` does), so the value is current.
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()
    # tf.init_scope does not leave a graph entered with as_default().
    with context.eager_mode():
        return keras.ops.convert_to_numpy(variable)


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
        ValueError: A tensor or op of another graph, or an unknown graph name.
    """
    derived: list[Any] = []
    iterations = getattr(getattr(model, "optimizer", None), "iterations", None)

    def leaf(obj: Any) -> Resolver:
        if isinstance(obj, str):
            return name_leaf(obj)
        if iterations is not None and obj is iterations:
            return _step
        if isinstance(obj, (tf.Tensor, tf.Operation)) or _is_graph_variable(obj):
            if obj.graph is not graph:
                whose = (
                    "the adapter graph of another run (an earlier fit/evaluate, or another "
                    "HookCallback); each run has its own graph"
                    if isinstance(obj.graph, AdapterGraph)
                    else "another graph"
                )
                raise ValueError(
                    f"{where} fetched {obj!r}, which belongs to {whose}. Hooks must build "
                    "their tensors in begin() of the run that fetches them, when the run's "
                    "graph is the default graph, or fetch log keys by name."
                )
            return graph_leaf(obj)
        if isinstance(obj, (tf.Variable, keras.Variable)):
            return lambda logs, step, ran: read_variable(obj, model)
        raise TypeError(
            f"{where} fetched {obj!r} of type {type(obj).__name__}. Accepted: {ACCEPTED}."
        )

    def name_leaf(name: str) -> Resolver:
        key = log_key_of(name)
        if name in graph.step_tensor_names or key == graph.global_step.op.name:
            return _step
        element = graph.existing_element(name)
        if element is not None:
            return graph_leaf(element)
        if ":" in name and not name.endswith(":0"):
            raise ValueError(
                f"{where} fetched {name!r}, which names no tensor of the adapter graph; "
                "a Keras log key is fetched as 'key' or 'key:0'."
            )
        return lambda logs, step, ran: log_value(logs, key, where)

    def graph_leaf(element: Any) -> Resolver:
        key = graph.placeholder_keys.get(element)
        if key is not None:
            return lambda logs, step, ran: log_value(logs, key, where)
        if graph.is_step(element):
            return _step
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
    return Plan(fetches, resolve, unique, _fed_keys(unique, graph))


_MAX_DEPTH = 100


def _step(logs: Mapping[str, Any], step: np.int64, ran: Mapping[Any, Any]) -> np.int64:
    return step


def _is_graph_variable(obj: Any) -> bool:
    return isinstance(obj, tf.Variable) and _has_graph(obj)


def _has_graph(obj: Any) -> bool:
    try:
        return obj.graph is not None
    except (AttributeError, RuntimeError):
        return False


def _fed_keys(elements: tuple[Any, ...], graph: AdapterGraph) -> tuple[str, ...]:
    """Returns the log keys whose placeholders `elements` depend on."""
    seen: set[tf.Operation] = set()
    stack = [e if isinstance(e, tf.Operation) else e.op for e in elements]
    keys: list[str] = []
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        for tensor in op.outputs:
            key = graph.placeholder_keys.get(tensor)
            if key is not None:
                keys.append(key)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return tuple(sorted(set(keys)))
