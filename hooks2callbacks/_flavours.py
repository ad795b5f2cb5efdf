"""How each Keras flavour's metrics are recorded inside the model's step: Keras 3 (any backend) and tf_keras.

`_batch` wraps the model's compiled step; while it traces, every metric's update goes through
its flavour's `record_update`, which keeps the batch's own state of the metric (what the update
added to each state variable, or the update run again apart from its reset state), and
`batch_values` reads the metric's result on that state. The two flavours differ in how a metric
can be read on a state that is not its own: Keras 3 has a stateless metric API, tf_keras has not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from hooks2callbacks._seams import (
    jax_nested_tracer,
    keras3_compile_metrics_leaves,
    keras3_metric_containers,
    tf_keras_loss_metric,
    tf_keras_metric_containers,
)

_KERAS_MODULES = ("keras.", "tf_keras.")


def is_tf_keras(model: Any) -> bool:
    return type(model).__module__.startswith("tf_keras") or any(
        k.__module__.startswith("tf_keras.") for k in type(model).__mro__
    )


def derivable(metric: Any) -> bool:
    """Whether `metric`'s state from its reset state, updated with one batch, is that batch's.

    True when the class that defines its `update_state` is Keras's own: every
    Keras metric adds each batch's contribution to its state.
    """
    for klass in type(metric).__mro__:
        if "update_state" in vars(klass):
            return klass.__module__.startswith(_KERAS_MODULES)
    return False


class Recording(threading.local):
    """What the step being run (or traced) in this thread has recorded.

    Thread-local: under `tf.distribute`, each replica traces the step in a thread of its own.
    """

    def __init__(self) -> None:
        self.active = False
        self.inside = False  # in our own batch computation: metric calls pass through
        # metric -> its batch state, or (tf_keras) why it has none
        self.states: dict[Any, Any] = {}
        self.results: dict[int, Any] = {}  # id(tensor a metric's result() returned) -> metric
        # While a Keras 3 metric updates: id(variable) -> the values its assign_add got,
        # and a list of any other writes to those variables (see `_watch`).
        self.taps: dict[int, list[Any]] | None = None
        self.other_writes: list[Any] = []
        self.adding = 0  # inside a watched assign_add, whose own assign is that add
        # The metrics whose update is being recorded: the train and the eval step of one
        # fit (validation) both patch the same metrics and variables, and an update or an
        # add is recorded once, by the outermost patch.
        self.updating: set[int] = set()


recording = Recording()


class Patches:
    """Instance-level method overrides, undone together."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []
        self._patched: set[tuple[int, str]] = set()

    def set(self, obj: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        if (id(obj), name) in self._patched:
            return
        previous = obj.__dict__.get(name, ABSENT)
        original = getattr(obj, name)
        object.__setattr__(obj, name, make(original))
        self._undo.append((obj, name, previous))
        self._patched.add((id(obj), name))

    def undo(self) -> None:
        for obj, name, previous in reversed(self._undo):
            if previous is ABSENT:
                object.__delattr__(obj, name)
            else:
                object.__setattr__(obj, name, previous)
        self._undo.clear()
        self._patched.clear()


ABSENT = object()


def _watch(variable: Any, patches: Patches) -> None:
    """Makes `variable`'s writes recorded while its metric updates in this thread (at trace time)."""

    def make_assign_add(original: Callable[..., Any]) -> Callable[..., Any]:
        def assign_add(value: Any, *args: Any, **kwargs: Any) -> Any:
            added = None if recording.taps is None else recording.taps.get(id(variable))
            if added is None or recording.adding:
                return original(value, *args, **kwargs)
            added.append(value)
            recording.adding += 1
            try:
                return original(value, *args, **kwargs)
            finally:
                recording.adding -= 1

        return assign_add

    def make_other(original: Callable[..., Any]) -> Callable[..., Any]:
        def write(value: Any, *args: Any, **kwargs: Any) -> Any:
            if recording.taps is not None and id(variable) in recording.taps and not recording.adding:
                recording.other_writes.append(value)
            return original(value, *args, **kwargs)

        return write

    patches.set(variable, "assign_add", make_assign_add)
    patches.set(variable, "assign", make_other)
    patches.set(variable, "assign_sub", make_other)


class Flavour:
    """How one Keras flavour's metrics are recorded; see `Keras3` and `TfKeras`."""

    def leaves(self, model: Any) -> list[Any]:
        raise NotImplementedError

    def containers(self, model: Any) -> list[Any]:
        raise NotImplementedError

    # Whether Keras passes every callback its logs as Python numbers (`pythonify_logs`),
    # so that the step may hand them over already converted (see `_Wrapped`).
    converts_logs = False

    def watch(self, metric: Any, patches: Patches) -> None:
        """Prepares `metric` for `record_update`, for a run (undone with `patches`)."""
        for variable in metric.variables:
            _watch(variable, patches)

    def record_update(self, metric: Any, original: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """Runs `metric`'s own update, recording its batch state in `recording.states`.

        Keras's own metrics reset to zeros and add each batch's contribution with
        one `assign_add` per variable, so the value added *is* the state of that
        batch alone, to the bit (0 + x = x): the metric's own update is watched,
        and nothing is computed twice, nor written, nor ordered differently. The
        training computation is the graph Keras builds: no op of it gains an input
        or a control output, which graph rewrites (oneDNN's fusions) would see.
        """
        if not derivable(metric):
            return self.record_own_update(metric, original, args, kwargs)
        variables = list(metric.variables)
        taps: dict[int, list[Any]] = {id(v): [] for v in variables}
        saved = recording.taps, recording.other_writes
        recording.taps, recording.other_writes = taps, []
        try:
            result = original(*args, **kwargs)
            other_writes = recording.other_writes
        finally:
            recording.taps, recording.other_writes = saved
        added = [taps[id(v)] for v in variables]
        made_now = len(metric.variables) != len(variables)
        if not other_writes and not made_now and all(len(a) == 1 for a in added):
            batch: Any = [self.as_state(v, a[0]) for v, a in zip(variables, added, strict=True)]
        else:  # another kind of update (or variables it made just now)
            batch = self.apart(metric, args, kwargs, made_now)
        previous = recording.states.get(metric)
        if isinstance(previous, str):
            return result
        if not isinstance(batch, str) and jax_nested_tracer(batch):
            batch = _IN_JAX_GRADIENT
        if isinstance(batch, str) or previous is None:
            recording.states[metric] = batch
        else:  # a second update in the step: both batches' contributions
            recording.states[metric] = [p + b for p, b in zip(previous, batch, strict=True)]
        return result

    def record_own_update(self, metric: Any, original: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """`record_update` for a metric whose class defines its own `update_state`."""
        raise NotImplementedError

    def as_state(self, variable: Any, added: Any) -> Any:
        """What `variable.assign_add(added)` adds to zeros: `added` in the variable's dtype and shape."""
        raise NotImplementedError

    def apart(self, metric: Any, args: Any, kwargs: Any, made_now: bool) -> Any:
        """The batch state of a Keras metric that did not add once per variable, or why it has none."""
        raise NotImplementedError

    def batch_values(self, metrics: list[Any], states: list[Any]) -> list[Any]:
        """The batch values of `metrics` from their batch `states` (a str: why one has none)."""
        raise NotImplementedError

    def pack(self, values: list[Any]) -> Any:
        """`values`, flattened into one vector."""
        raise NotImplementedError


class Keras3(Flavour):
    """Keras 3, any backend: the batch state is what the metric's update added."""

    converts_logs = True

    def leaves(self, model: Any) -> list[Any]:
        return keras3_compile_metrics_leaves(model)

    def containers(self, model: Any) -> list[Any]:
        return keras3_metric_containers(model)

    def record_own_update(self, metric: Any, original: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        # Its own update_state need not add: its batch state is that update run
        # again, apart, from its reset state, where that is exact (`_why_no_rerun`).
        result = original(*args, **kwargs)
        why = "this step updated twice" if metric in recording.states else _why_no_rerun(metric, args, kwargs)
        batch = self._from_reset(metric, args, kwargs) if why is None else why
        nested = not isinstance(batch, str) and jax_nested_tracer(batch)
        recording.states[metric] = _IN_JAX_GRADIENT if nested else batch
        return result

    def as_state(self, variable: Any, added: Any) -> Any:
        value = keras.ops.convert_to_tensor(added, dtype=variable.dtype)
        if tuple(value.shape) != tuple(variable.shape):
            value = keras.ops.broadcast_to(value, variable.shape)
        return value

    def apart(self, metric: Any, args: Any, kwargs: Any, made_now: bool) -> Any:
        return self._from_reset(metric, args, kwargs)

    @staticmethod
    def _from_reset(metric: Any, args: Any, kwargs: Any) -> list[Any]:
        """The metric's state after its reset state is updated with `args` alone."""
        recording.inside = True
        try:
            batch = metric.stateless_update_state(metric.stateless_reset_state(), *args, **kwargs)
            # Keras before 3.13 loses the static shape of confusion-matrix states
            # (`variable + tp` under an unknown batch size), which `stateless_result` refuses.
            batch = [keras.ops.reshape(b, v.shape) for b, v in zip(batch, metric.variables, strict=True)]
        finally:
            recording.inside = False
        return batch

    def batch_values(self, metrics: list[Any], states: list[Any]) -> list[Any]:
        states = _sum_across_replicas(states)
        recording.inside = True
        try:
            return [_result_of(metric, state) for metric, state in zip(metrics, states, strict=True)]
        finally:
            recording.inside = False

    def pack(self, values: list[Any]) -> Any:
        ops = keras.ops
        dtype = "float64" if any(keras.backend.standardize_dtype(v.dtype) == "float64" for v in values) else "float32"
        values = [ops.cast(v, dtype) for v in values]
        if all(len(v.shape) == 0 for v in values):  # one op, where reshapes and a concat are three
            return ops.stack(values)
        return ops.concatenate([ops.reshape(v, (-1,)) for v in values])


def _result_of(metric: Any, state: list[Any]) -> Any:
    """`metric.result()` on `state`, read inside the scope that maps its variables to `state`.

    `stateless_result` reads the result outside its scope: a `result()` that returns a
    state variable itself (`return self.total`) would give the variable's own value.
    """
    with keras.StatelessScope(state_mapping=list(zip(metric.variables, state, strict=True))):
        return keras.tree.map_structure(lambda v: v.value if isinstance(v, keras.Variable) else v, metric.result())


class TfKeras(Flavour):
    """tf_keras: no stateless API, so a metric's result on its batch state is read with the
    state in place of its variables, as the attributes that hold them, for that one call.

    The batch state is what the metric's update added (see `Flavour.record_update`);
    nothing writes the metric's variables but its own update.
    """

    def leaves(self, model: Any) -> list[Any]:
        found = list(model.metrics)
        loss_metric = tf_keras_loss_metric(model)
        if loss_metric is not None and not any(m is loss_metric for m in found):
            found.append(loss_metric)
        return found

    def containers(self, model: Any) -> list[Any]:
        return tf_keras_metric_containers(model)

    def record_own_update(self, metric: Any, original: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        # Its own update_state need not add, and tf_keras cannot run it apart from its state.
        recording.states[metric] = None
        return original(*args, **kwargs)

    def as_state(self, variable: Any, added: Any) -> Any:
        value = tf.convert_to_tensor(added, dtype=variable.dtype)  # as `assign_add` converts it
        if value.shape != variable.shape:
            value = tf.broadcast_to(value, variable.shape)
        return value

    def apart(self, metric: Any, args: Any, kwargs: Any, made_now: bool) -> Any:
        if made_now:  # F1Score
            return "makes its state in its first update, in the step"
        return (
            "updates its state otherwise than by adding the batch's contribution to each "
            "variable once, and tf_keras cannot run that update apart from the metric's state"
        )

    def batch_values(self, metrics: list[Any], states: list[Any]) -> list[Any]:
        # The class's own `result`, not the instance's, which tf_keras wraps in a cross-replica merge.
        return [
            _with_state(metric, state, type(metric).result)
            for metric, state in zip(metrics, _sum_across_replicas(states), strict=True)
        ]

    def pack(self, values: list[Any]) -> Any:
        dtype = tf.float64 if any(v.dtype == tf.float64 for v in values) else tf.float32
        packed = tf.concat([tf.reshape(tf.cast(v, dtype), [-1]) for v in values], 0)
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            # Every replica holds the same values. tf_keras sums what replicas return
            # (reduction "auto"), except a value that is one tensor for all replicas,
            # as its own merged metric results are: make ours so.
            packed = context.merge_call(
                lambda strategy, per_replica: strategy.experimental_local_results(per_replica)[0], args=(packed,)
            )
        return packed


def _with_state(metric: Any, state: list[Any], result: Callable[[Any], Any]) -> Any:
    """`result(metric)` with `state` in place of the metric's variables; a str: why it cannot be read so.

    The attributes of `metric` that hold its variables hold the state tensors
    for the call: nothing is written, and the step's graph gains no op on the
    metric's variables.
    """
    variables = list(metric.variables)
    held = {name: value for name, value in vars(metric).items() if any(value is v for v in variables)}
    if sorted(id(v) for v in held.values()) != sorted(id(v) for v in variables):
        return "holds its state variables other than as its attributes, so its result cannot be read on a batch state"
    swap = {name: state[next(i for i, v in enumerate(variables) if v is value)] for name, value in held.items()}
    for name, value in swap.items():
        object.__setattr__(metric, name, value)
    try:
        return tf.identity(result(metric))
    except (AttributeError, TypeError) as error:
        # A `result()` that calls a variable's own methods (`read_value()`): the key
        # has no batch value, and a hook that fetches it gets this reason.
        return f"computes its result with its variables' own methods, not their values ({error})"
    finally:
        for name, value in held.items():
            object.__setattr__(metric, name, value)


def _sum_across_replicas(states: list[Any]) -> list[Any]:
    """The global batch's state: each replica's batch state, summed (TF models only)."""
    if not states or not isinstance(tf.nest.flatten(states)[0], tf.Tensor):
        return states  # JAX or PyTorch: no tf.distribute

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return states
    return context.all_reduce(tf.distribute.ReduceOp.SUM, states)


_IN_JAX_GRADIENT = (
    "updates it inside a transformation of the step (JAX's gradient, as Keras's "
    "per-output loss trackers), whose values cannot be taken out of it"
)


def _why_no_rerun(metric: Any, args: Any, kwargs: Any) -> str | None:
    """Why a Keras 3 metric's own `update_state`, run again from its reset state, would not give
    its batch state exactly, or would change the step; None where it is exact.

    Run again in a `StatelessScope`, the update writes none of the metric's variables. It
    must write nothing else either, nor draw TF stateful random numbers (the step's
    streams would move): on TensorFlow, its ops are traced apart first and checked. Under
    tf.distribute, the replicas' states of such a metric cannot be combined (only Keras's
    own metrics add).
    """
    flat = [t for t in tf.nest.flatten((args, kwargs)) if isinstance(t, tf.Tensor)]
    if not flat:
        return None  # JAX or PyTorch: the scope holds every write of a Keras variable
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        return (
            f"is updated on {context.num_replicas_in_sync} replicas, and its class defines its own "
            "update_state, so the replicas' batch states cannot be combined into the global batch's"
        )
    specs = tf.nest.map_structure(lambda t: tf.TensorSpec.from_tensor(t) if isinstance(t, tf.Tensor) else t, args)
    kwarg_specs = tf.nest.map_structure(
        lambda t: tf.TensorSpec.from_tensor(t) if isinstance(t, tf.Tensor) else t, kwargs
    )

    def rerun(*inner: Any, **inner_kwargs: Any) -> Any:
        recording.inside = True
        try:
            return metric.stateless_update_state(metric.stateless_reset_state(), *inner, **inner_kwargs)
        finally:
            recording.inside = False

    graph = tf.function(rerun, autograph=False).get_concrete_function(*specs, **kwarg_specs).graph
    effects = sorted({op.type for op in graph.get_operations() if op.op_def.is_stateful and op.type not in _READS})
    if effects:
        return (
            "defines its own update_state, which, run again from the reset state for the batch "
            f"alone, would also run the stateful ops {effects} (writes or random draws outside its "
            "state) and so change the step"
        )
    return None


# Stateful op types that change nothing: an update that reads other variables is still exact.
_READS = frozenset({"ReadVariableOp", "VarHandleOp", "VarIsInitializedOp", "Placeholder", "NoOp"})
