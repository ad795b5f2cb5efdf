"""Batch values: each step's own loss and metric values, as TF1 tensors held them.

Keras logs hold running means since the epoch (or the evaluation) began. A TF1
hook that fetched `"loss"` got that batch's loss. Deriving a batch's value from
two means is exact only for equal-size, unweighted batches, so the values are
computed inside Keras's own compiled step instead:

    wrapped_step(data):                  # the model's own step, wrapped
        logs = model's step(data)        # untouched: Keras's state and logs stay its own,
                                         # and so is its graph: no op of it gains an input
                                         # or a control output (graph rewrites see those)
        for each metric the step updated (recorded by its `update_state`):
            state = what its update added to each state variable (one
                    `assign_add` each: that is the state of the batch alone),
                    else its reset state updated with the same arguments
                    (Keras 3's stateless API; a custom metric's too)
            (summed across replicas under tf.distribute: the global batch)
            value = the metric's result on that state, read without writing
                    its variables                # the batch's own value
        return logs without their float32 scalars
               + {BATCH: pack(those scalars, the values)}    # one output

    function(*args):                     # what Keras's loop calls for the run
        out = compiled(*args)            # built once by the model's make_*_function;
                                         # Keras 3 on TensorFlow, one step per
                                         # execution: its compiled step called
                                         # directly (see `_direct_step`)
        pop BATCH and bring it to numpy, once    # other callbacks never see it
        put Keras's scalars back into the logs as the Python floats that Keras's
            conversion (`pythonify_logs`) would make of them  (Keras 3, training)
        return out

One output for the step's values costs less than Keras's own two or more:
TF's Python handling of a function's outputs and Keras's conversion of each
log value cost several µs a step per value (`benchmarks/batch_values.py`).

A key maps to its metric by identity: the tensor a metric's `result()` returned
is the value the step put under that key. A metric is *derivable* when the class
that defines its `update_state` is Keras's own: Keras's metrics only ever add a
batch's contribution to their state, so the state from the reset state is that
batch alone. On Keras 3, a metric with its own `update_state` gets its batch state
from that update run again, apart, from its reset state (the stateless metric
API), where that is exact and changes nothing else (`_flavours._why_no_rerun`); on tf_keras,
which has no stateless API, it has no batch value. Fetching a key with no batch
value is an error rather than a silent mean. A key that is no metric's result (a
value a custom `train_step` returns) passes through.

The wrapped function is built once per model and compiled function (a new
`compile()` makes Keras build a new one) and cached, so `fit` does not retrace
it. It replaces `model.train_function` (or `test_function`) only for a run of
a `HookCallback`; outside one, the model is exactly as Keras made it.
"""

from __future__ import annotations

import math
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, cast

import keras
import tensorflow as tf

from hooks2callbacks import _tensors
from hooks2callbacks._batch_logs import BatchLogs, LoopLogs, Slot, to_numpy, unpack
from hooks2callbacks._flavours import ABSENT, Flavour, Keras3, Patches, TfKeras, derivable, is_tf_keras, recording
from hooks2callbacks._seams import compiled_loss_keys, keras3_multi_step, tf_keras_test_runner

# The log key that carries the batch values out of the step; no Keras metric is named so.
# It sorts after every log key Keras makes: tf_keras orders its step counter's update after
# the step's *first* output (`_minimum_control_deps`, in tf.nest's sorted order), which must
# stay one of Keras's own.
BATCH_KEY = "~hooks2callbacks_batch_values"


class _StepInfo:
    """What tracing the wrapped step found out, for the Python side."""

    def __init__(self) -> None:
        # The keys that carry a batch value, in the order their values are packed
        # (flattened, one after another) into one output.
        self.layout: tuple[Slot, ...] = ()
        self.underivable: dict[str, str] = {}  # key -> why it has none
        # Keras's own float32 scalar logs travel packed first in the same output
        # (Keras 3, training); `order` then gives back the logs' keys in Keras's
        # order, each with its place in the packed output, or -1 for a log value
        # left as it is. Empty when none travels so.
        self.order: tuple[tuple[str, int], ...] = ()
        self.runs = 0  # Python runs of the wrapped step: one per trace where Keras compiles


class _Wrapped:
    """The model's compiled step around the wrapped `train_step`/`test_step`, for one mode."""

    def __init__(self, model: Any, mode: str, flavour: Flavour) -> None:
        self.mode = mode
        self.info = _StepInfo()
        self.users = 0
        self.latest: Any = None  # the latest step's packed batch values
        self.steps = 0  # calls so far: a batch whose count did not move ran no step of ours
        self._flavour = flavour
        self._jax = not is_tf_keras(model) and keras.backend.backend() == "jax"
        self._step_name = "train_step" if mode == "train" else "test_step"
        self._function_name = "train_function" if mode == "train" else "test_function"
        self._patches = Patches()
        # Keras's own logs are handed over as the Python floats Keras would make of
        # them: in training only, where the logs reach nothing but callbacks
        # (evaluate() may return the last step's logs to its caller as they are).
        self._fold = flavour.converts_logs and mode == "train"
        self._model_ref = weakref.ref(model)
        self._tf_function_names: tuple[str, ...] = ()
        if is_tf_keras(model) and mode == "train":
            self._tf_function_names = ("train_tf_function",)
        self._tf_functions: dict[str, Any] = {}
        self._own_tf_functions: dict[str, Any] = {}
        self.original = getattr(model, self._function_name)
        self.compiled = self._build(model)
        self._direct = None if self._jax or is_tf_keras(model) else _direct_step(self.compiled)
        self._warned_random = False
        # The batch's tensors it outputs (`_tensors`), and the latest step's.
        self.tensors = _tensors.Outputs()
        self.latest_tensors: Mapping[str, Any] = {}
        self._unpack = _unpack_for(model)
        self._iterator: Any = None  # the iterator that `_concrete` was made for
        self._concrete: Any = None

    # -- building -------------------------------------------------------------

    def _build(self, model: Any) -> Any:
        """Builds the compiled function with the model's own make_*_function."""
        names = [self._function_name, *self._tf_function_names]
        saved = {name: model.__dict__.get(name, ABSENT) for name in names}
        self._patch_step(model)
        try:
            make = model.make_train_function if self.mode == "train" else model.make_test_function
            make(force=True)
            # tf_keras's TensorBoard reads the tf.function that ran (`train_tf_function`).
            self._tf_functions = {name: getattr(model, name) for name in self._tf_function_names}
            return getattr(model, self._function_name)
        finally:
            for name, value in saved.items():
                if value is ABSENT:
                    model.__dict__.pop(name, None)
                else:
                    object.__setattr__(model, name, value)
            self._patches.undo()

    def _patch_step(self, model: Any) -> None:
        step = getattr(model, self._step_name)
        info = self.info

        def wrapped_step(*args: Any) -> Any:
            return self._run_step(step, info, args)

        self._patches.set(model, self._step_name, lambda original: wrapped_step)

    def _patch_metrics(self, model: Any) -> None:
        flavour, patches = self._flavour, self._patches

        def patch_leaf(metric: Any) -> None:
            def make_update(original: Callable[..., Any]) -> Callable[..., Any]:
                def update_state(*args: Any, **kwargs: Any) -> Any:
                    if not recording.active or recording.inside or id(metric) in recording.updating:
                        return original(*args, **kwargs)
                    recording.updating.add(id(metric))
                    # Variables its first update made (in an earlier trace) are watched from now on.
                    flavour.watch(metric, patches)
                    try:
                        return flavour.record_update(metric, original, args, kwargs)
                    finally:
                        recording.updating.discard(id(metric))

                return update_state

            def make_result(original: Callable[..., Any]) -> Callable[..., Any]:
                def result(*args: Any, **kwargs: Any) -> Any:
                    value = original(*args, **kwargs)
                    if recording.active and not recording.inside:
                        recording.results[id(value)] = metric
                    return value

                return result

            self._patches.set(metric, "update_state", make_update)
            self._patches.set(metric, "result", make_result)
            flavour.watch(metric, self._patches)

        def patch_container(container: Any) -> None:
            def make_build(original: Callable[..., Any]) -> Callable[..., Any]:
                def build(*args: Any, **kwargs: Any) -> Any:
                    built = original(*args, **kwargs)
                    for leaf in flavour.leaves(model):
                        patch_leaf(leaf)
                    return built

                return build

            self._patches.set(container, "build", make_build)

        for container in flavour.containers(model):
            patch_container(container)
        for leaf in flavour.leaves(model):
            patch_leaf(leaf)

    # -- running --------------------------------------------------------------

    def _run_step(self, step: Callable[..., Any], info: _StepInfo, args: Any) -> Any:
        if recording.active:  # a step inside a step: not ours to record
            return step(*args)
        info.runs += 1
        recording.active = True
        recording.states, recording.results = {}, {}
        self.tensors.start()
        try:
            out = step(*args)
        finally:
            recording.active = False
        model = self._model_ref()
        # The step's data is its last argument (JAX's steps take their state first).
        tensors = self.tensors.finish(model, args[-1], self._unpack) if args else {}
        if not tf.executing_eagerly():
            self._warn_stateful_random(tf.compat.v1.get_default_graph())
        states, results = recording.states, recording.results
        recording.states, recording.results = {}, {}
        logs = out[0] if self._jax else out
        if not isinstance(logs, dict):
            info.layout, info.underivable, info.order = (), {}, ()
            for name in self.tensors.wanted:
                self.tensors.why[name] = "the step returns no dict of logs to carry it"
            return out
        derived: list[tuple[str, Any, tuple[int, ...]]] = []
        underivable: dict[str, str] = {}
        for key, value in logs.items():
            metric = results.get(id(value))
            if metric is None:
                continue  # not a metric's result: a value the step returns as is
            why = _why_underivable(metric, states, value)
            if why is None:
                derived.append((key, metric, tuple(int(d) for d in value.shape)))
            else:
                underivable[key] = why
        values = self._flavour.batch_values([m for _, m, _ in derived], [states[m] for _, m, _ in derived])
        for (key, metric, _), value in zip(derived, values, strict=True):
            if isinstance(value, str):
                underivable[key] = f"it is the result of the metric {_metric_name(metric)}, which {value}"
        derived, values = [d for d in derived if d[0] not in underivable], [v for v in values if not isinstance(v, str)]
        # TF's Python handling of a function's outputs, and Keras's conversion of
        # each log value, cost several µs a step per value: Keras's own scalar logs
        # travel in the batch values' output, to be converted with them, once.
        folded = [k for k, v in logs.items() if self._foldable(v)] if self._fold else []
        info.order = tuple((k, folded.index(k) if k in folded else -1) for k in logs) if folded else ()
        info.layout = _layout([(key, shape) for key, _, shape in derived], start=len(folded))
        info.underivable = underivable
        if derived or folded:
            packed = [logs[k] for k in folded] + values
            logs = {k: v for k, v in logs.items() if k not in folded}
            logs[BATCH_KEY] = self._flavour.pack(packed)
        if tensors:
            logs = {**logs, _tensors.TENSORS_KEY: tensors}
        return (logs, *out[1:]) if self._jax else logs

    def _warn_stateful_random(self, graph: Any) -> None:
        """Warns once per step function about TF stateful random ops, which it cannot run as Keras's own did."""
        if self._warned_random:
            return
        found = [op.name for op in graph.get_operations() if op.type in _STATEFUL_RANDOM]
        if not found:
            return
        self._warned_random = True
        listed = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        warnings.warn(
            f"HookCallback: the {self._step_name} of this model uses TF's stateful random ops ({listed}). "
            "Their state lives in the kernels of one compiled function, and HookCallback runs the step "
            "in a function of its own to give hooks each batch's own values. A fit with HookCallback "
            "draws what the same seeded fit without it draws, and its steps never repeat each other's "
            "noise across HookCallback fits; but its function starts the streams anew, so it repeats "
            "the noise of a fit of this model without HookCallback before it (and such a fit after "
            "it repeats its noise), as a Keras recompile does. For noise that does not depend on the "
            "function, draw it with keras.random and a keras.random.SeedGenerator (Keras 3's random "
            "layers do), with TF's stateless random ops (tf.random.stateless_normal, ...), or with "
            "tf.random.Generator (tf_keras: tf_keras.backend.experimental.enable_tf_random_generator()); "
            "or pass HookCallback(..., values='running_mean') and fetch none of the batch's tensors "
            "(features, labels, predictions), which keeps Keras's own step.",
            UserWarning,
            stacklevel=2,
        )

    @staticmethod
    def _foldable(value: Any) -> bool:
        # Only float32 scalars: their Python float is what Keras's conversion makes.
        return len(getattr(value, "shape", (None,))) == 0 and keras.backend.standardize_dtype(value.dtype) == "float32"

    def _run(self, args: tuple[Any, ...]) -> Any:
        if self._direct is None or len(args) != 1:
            return self.compiled(*args)
        # Every step of a run goes one way, the first too: a switch of functions
        # mid-run would start TF's stateful random streams over.
        iterator = args[0]
        if iterator is not self._iterator:  # once per epoch iterator
            self._iterator, self._concrete = iterator, self._concrete_for(iterator)
        concrete = self._concrete
        return self.compiled(*args) if concrete is None else concrete(iterator)

    def _concrete_for(self, iterator: Any) -> Any:
        """The direct step's concrete function for `iterator` (a lookup, no retrace), or None where it cannot serve."""
        model = self._model_ref()
        if model is None or model.steps_per_execution != 1 or not isinstance(iterator, _ITERATORS):
            return None
        if tf.config.functions_run_eagerly():  # honoured by Keras's own call only
            return None
        return cast(Any, self._direct).get_concrete_function(iterator)

    def __call__(self, *args: Any) -> Any:
        out = self._run(args)
        self.steps += 1
        logs = out[0] if self._jax else out
        packed = logs.pop(BATCH_KEY, None)
        if self.tensors.wanted:
            self.latest_tensors = logs.pop(_tensors.TENSORS_KEY, {})
        info = self.info
        if not info.order:
            self.latest = packed  # brought to numpy if a hook reads a value
            return out
        flat = to_numpy(packed)
        numbers = flat.tolist()  # float32 to Python float is exact: what Keras's conversion gives
        self.latest = unpack(flat, numbers, info.layout)
        logs = {key: logs[key] if index < 0 else numbers[index] for key, index in info.order}
        return (logs, *out[1:]) if self._jax else logs

    # -- a run ----------------------------------------------------------------

    def attach(self, model: Any) -> None:
        """Makes the model's loop call this function, for a run."""
        if self.users == 0:
            current = getattr(model, self._function_name)
            self._patch_step(model)
            self._patch_metrics(model)
            _tensors.record_predictions(model, self._patches.set, is_tf_keras(model))
            if self.mode == "eval" and is_tf_keras(model):
                tf_keras_test_runner(current, self)
        # Every run's, not only the first: one that began while the model had
        # its own function back (set by other code) runs with the batch values too.
        if self.users == 0:
            self._own_tf_functions = {name: model.__dict__.get(name, ABSENT) for name in self._tf_functions}
        object.__setattr__(model, self._function_name, self)
        for name, function in self._tf_functions.items():
            object.__setattr__(model, name, function)
        self.users += 1

    def detach(self, model: Any) -> None:
        """Ends a run; the last one gives the model back its own function."""
        self.users -= 1
        if self.users == 0:
            self._iterator = self._concrete = None  # hold no data pipeline past the run
            self.latest_tensors = {}  # nor a batch
            self.latest = None
            self._patches.undo()
            if getattr(model, self._function_name, None) is self:
                object.__setattr__(model, self._function_name, self.original)
            for name, own in self._own_tf_functions.items():
                if model.__dict__.get(name) is self._tf_functions[name]:
                    if own is ABSENT:
                        model.__dict__.pop(name, None)
                    else:
                        object.__setattr__(model, name, own)


_ITERATORS = (tf.data.Iterator, tf.distribute.DistributedIterator)
# TF's random ops whose state is in their kernel (not in a variable, as tf.random.Generator's).
_STATEFUL_RANDOM = frozenset(
    {
        "RandomStandardNormal",
        "RandomUniform",
        "RandomUniformInt",
        "TruncatedNormal",
        "ParameterizedTruncatedNormal",
        "RandomShuffle",
        "Multinomial",
        "RandomGamma",
        "RandomPoisson",
        "RandomPoissonV2",
    }
)


def _direct_step(function: Any) -> Any:
    """The compiled step of Keras 3's TensorFlow `function`, without its Python around each call.

    Keras's `function(iterator)` (`TensorFlowTrainer._make_function`) calls a
    `tf.function` that returns the step's outputs in a `tf.experimental.Optional`,
    then asks that eagerly for `has_value()` and `get_value()`; and the call
    itself has TF work out the iterator's trace type every step. On the small
    MLP of `benchmarks/` that is about a third of the step (`batch_values.py`).
    With one step per execution the Optional always holds a value (an exhausted
    iterator raises `OutOfRangeError` in the step, which Keras's loop catches),
    so the value is taken inside the graph, and the function is called through
    its concrete function for the iterator's type.

    Returns:
        A `tf.function` of the iterator that returns the step's outputs, or None
        where `function` is not the one Keras 3's TensorFlow trainer makes: the
        wrapped step is then called as Keras made it.
    """
    multi = keras3_multi_step(function)
    if not isinstance(multi, tf.types.experimental.PolymorphicFunction):
        return None  # run_eagerly: nothing compiled to call directly

    def step(iterator: Any) -> Any:
        return multi(iterator).get_value()

    return tf.function(step, autograph=False)


def _metric_name(metric: Any) -> str:
    return f"{type(metric).__name__}(name={getattr(metric, 'name', '?')!r})"


def _why_underivable(metric: Any, states: Mapping[Any, Any], value: Any) -> str | None:
    name = _metric_name(metric)
    if not derivable(metric) and states.get(metric) is None:  # tf_keras: no batch state is computed
        return (
            f"it is the result of the metric {name}, whose class defines its own update_state, "
            "so its state after one batch need not be that batch's alone, and tf_keras cannot run "
            "that update apart from the metric's state (Keras 3 does: its stateless metric API "
            "gives such a metric its batch value)"
        )
    if metric not in states:
        return f"it is the result of the metric {name}, which this step did not update"
    if isinstance(states[metric], str):
        return f"it is the result of the metric {name}, which {states[metric]}"
    if any(d is None for d in getattr(value, "shape", (None,))):
        return f"it is the result of the metric {name}, whose shape is not known when the step is traced"
    return None


# model -> {mode: _Wrapped}; a new compile() gives the model new functions, and so new entries.
_cache: weakref.WeakKeyDictionary[Any, dict[str, _Wrapped]] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


class BatchSource:
    """The batch values of one run: attaches the wrapped function, reads its values.

    Args:
        model: The Keras model (Keras 3, any backend, or tf_keras).
        mode: `"train"` or `"eval"`.
        values: Whether hooks get the metrics' batch values (else Keras's own logs).
        tensors: The batch's tensors that hooks asked for (`_tensors`).
        keys: Which log keys get their batch value, the others Keras's own; None: every key.

    Raises:
        ValueError: Another run of this model's step, compiled already, lacks `tensors`.
    """

    def __init__(
        self,
        model: Any,
        mode: str,
        values: bool = True,
        tensors: frozenset[str] = frozenset(),
        keys: Callable[[str], bool] | None = None,
    ) -> None:
        self._model = model
        self._values = values
        self._keys = keys
        self._filtered: tuple[Any, tuple[Slot, ...], dict[str, str]] = (None, (), {})
        function_name = "train_function" if mode == "train" else "test_function"
        current = getattr(model, function_name, None)
        with _cache_lock:
            entries = _cache.setdefault(model, {})
            wrapped = current if isinstance(current, _Wrapped) else entries.get(mode)
            if wrapped is not None and wrapped.users == 0:
                if wrapped.original is not current:
                    wrapped = None  # a new compile(): Keras's new function
                elif not wrapped.tensors.covers(tensors):
                    # Compiled without them: a new step, which outputs these and the earlier
                    # ones, so that runs asking for either share it.
                    tensors = tensors | frozenset(wrapped.tensors.wanted)
                    wrapped = None
            if wrapped is None:
                flavour: Flavour = TfKeras() if is_tf_keras(model) else Keras3()
                wrapped = entries[mode] = _Wrapped(model, mode, flavour)
            if not wrapped.tensors.want(tensors):
                raise ValueError(
                    f"HookCallback: the hooks of this run fetch the batch's {sorted(tensors)}, but "
                    f"another HookCallback of the same {mode} run began first, and the model's step "
                    "is compiled without them. Pass all hooks that fetch the batch's tensors to that "
                    "HookCallback, or list the HookCallback whose hooks fetch them first."
                )
            wrapped.attach(model)
        self._wrapped: _Wrapped | None = wrapped
        self._steps = wrapped.steps  # the wrapped step's calls at the latest batch end (or the start)

    def logs(self, logs: Mapping[str, Any]) -> BatchLogs | LoopLogs:
        """The step's logs as hooks see them: batch values where there are some."""
        wrapped = self._wrapped
        if wrapped is None:
            return BatchLogs(logs, None, (), {})
        if wrapped.steps == self._steps:
            # No step of the model's ran for this batch (its caller ran its own): what the
            # wrapped step holds is an earlier batch's, never this one's.
            return LoopLogs(logs)
        self._steps = wrapped.steps
        if not self._values:
            return BatchLogs(logs, None, (), {}, wrapped.tensors, wrapped.latest_tensors)
        layout, underivable = wrapped.info.layout, wrapped.info.underivable
        if self._keys is not None:
            if self._filtered[0] is not underivable:  # a new dict each trace of the step
                keep = self._keys
                self._filtered = (
                    underivable,
                    tuple(slot for slot in layout if keep(slot[0])),
                    {key: why for key, why in underivable.items() if keep(key)},
                )
            _, layout, underivable = self._filtered
        return BatchLogs(logs, wrapped.latest, layout, underivable, wrapped.tensors, wrapped.latest_tensors)

    def close(self) -> None:
        """Gives the model back its own function (when no other run uses ours)."""
        wrapped, self._wrapped = self._wrapped, None
        if wrapped is not None:
            with _cache_lock:
                wrapped.detach(self._model)


def loss_keys(model: Any) -> Callable[[str], bool]:
    """Whether a log key is one of `model`'s compiled losses: a TF1 loss tensor held the batch's value.

    The keys are those the compiled model tracks its loss under: `"loss"`, and for
    a multi-output model each output's `"<output>_loss"` (`_seams.compiled_loss_keys`;
    where that is unknown, made from `model.output_names`). A metric's key is never
    a loss's, whatever its name: a metric named `"eval_loss"` (BERT's `run_classifier`
    names its `tf.metrics.mean(per_example_loss)` so) held, in TF1's evaluation, the
    aggregate since the evaluation began. The predicate is asked once the step has
    run, when the containers that make those metrics lazily are built.
    """

    def is_loss(key: str) -> bool:
        if key == "loss":
            return True
        keys = compiled_loss_keys(model)
        if keys is None:
            outputs = getattr(model, "output_names", None) or ()
            keys = frozenset(f"{name}_loss" for name in outputs) if len(outputs) > 1 else frozenset()
        return key in keys

    return is_loss


def _layout(shapes: list[tuple[str, tuple[int, ...]]], start: int = 0) -> tuple[Slot, ...]:
    """Where each key's value sits in the packed output, from `start` on (see `_StepInfo.layout`)."""
    slots = []
    for key, shape in shapes:
        stop = start + math.prod(shape)
        slots.append((key, start, stop, shape or None))
        start = stop
    return tuple(slots)


def _unpack_for(model: Any) -> Callable[[Any], Any]:
    """The flavour's `unpack_x_y_sample_weight`."""
    if is_tf_keras(model):
        import tf_keras  # only where the model is one

        return cast(Callable[[Any], Any], tf_keras.utils.unpack_x_y_sample_weight)
    return cast(Callable[[Any], Any], keras.utils.unpack_x_y_sample_weight)
