"""The batch's tensors: each step's features, labels, sample weights and predictions, by name.

A TF1 `model_fn` held them as tensors of its graph, and hooks built ops over
them, fetched them and put them in collections. Here each is a name of the
adapter graph, looked up as a log key is (`"features"`, `"features:0"`,
`log_tensor("predictions")`, the names map):

    name            value in a step                                       placeholder dtype
    features        x, as the step got it (`unpack_x_y_sample_weight`)    the model input's, else float32
    labels          y                                                     int64 under a sparse categorical
                                                                          loss (class ids), else float32
    sample_weight   the sample weights (class_weight's too)               float32
    predictions     the model's outputs, as the step passed them to       the model output's, else float32
                    `compute_metrics` (else `compute_loss`, or tf_keras's
                    `compiled_metrics.update_state`); in predict, the
                    predicted batch

A structure has one name per leaf below its root: `features/<key>` for a dict,
`predictions/<output name>` for a list of outputs (the model's `output_names`,
else the index). The root itself is the whole structure: fetched, a dict or
list of arrays.

How they reach hooks (the step is `hooks2callbacks._batch`'s wrapped step):

    first before_run of a run:     # hook code has named what it uses by now
        wanted = the batch names looked up or fetched so far
    wrapped step(data), traced once per compiled function:
        x, y, sample_weight = unpack(data); y_pred as recorded from compute_metrics
        each wanted leaf, gathered across replicas (tf.distribute): the global batch
        logs[TENSORS_KEY] = {leaf name: tensor}      # the step computes nothing more
    the function Keras's loop calls:
        pop logs[TENSORS_KEY]; each to numpy only when a hook reads it

A run whose hooks name none keeps the step it had: the names cost nothing unless
asked. A name asked first after the step was compiled (a later `before_run`)
is an error that says where to name it, never a stale or missing value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from hooks2callbacks._seams import jax_nested_tracer

ROOTS = ("features", "labels", "sample_weight", "predictions")
# The log key that carries the batch's tensors out of the step; no Keras metric is named so.
TENSORS_KEY = "~hooks2callbacks_batch_tensors"  # sorts last, as `_batch.BATCH_KEY` (why there)


def root_of(key: str) -> str | None:
    """The batch root that `key` names or is below (`"features/a"` -> `"features"`), else None."""
    root = key.split("/", 1)[0]
    return root if root in ROOTS else None


class _Step(threading.local):
    """The predictions of the step being traced in this thread (one thread per replica)."""

    def __init__(self) -> None:
        self.recording = False
        self.y_pred: Any = None


_step = _Step()


def record_predictions(
    model: Any, patch: Callable[[Any, str, Callable[[Callable[..., Any]], Any]], None], tf_keras: bool
) -> None:
    """Makes the model's `compute_metrics` and `compute_loss` record `y_pred` while a step is traced;
    on tf_keras, `compiled_metrics.update_state` too (its custom-`train_step` guide's pattern).

    `compute_metrics` wins: on JAX, `compute_loss` runs inside the gradient's
    trace, whose values cannot leave it.

    Args:
        model: The Keras model.
        patch: Sets an instance-level override (`_flavours.Patches.set`), undone at the run's end.
        tf_keras: Whether the model is a tf_keras one.
    """

    def make(first: bool, position: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            def recorded(*args: Any, **kwargs: Any) -> Any:
                if _step.recording and (first or _step.y_pred is None):
                    y_pred = args[position] if len(args) > position else kwargs.get("y_pred")
                    if y_pred is not None and not jax_nested_tracer(y_pred):
                        _step.y_pred = y_pred
                return original(*args, **kwargs)

            return recorded

        return wrap

    patch(model, "compute_metrics", make(True, 2))
    patch(model, "compute_loss", make(False, 2))
    compiled = getattr(model, "compiled_metrics", None) if tf_keras else None
    if compiled is not None:
        patch(compiled, "update_state", make(False, 1))


class Outputs:
    """Which batch names a compiled step outputs, their structure, and why a name has no value.

    `wanted` (the names hooks asked for) may grow until the step is traced.
    """

    def __init__(self) -> None:
        self.wanted: set[str] = set()
        self.traced = False
        # Each name (a root, a part, a leaf) -> its structure, with leaf names as leaves.
        self.parts: dict[str, Any] = {}
        self.why: dict[str, str] = {}  # a wanted name -> why the step has no value for it

    def covers(self, names: frozenset[str]) -> bool:
        """Whether the step outputs `names`, or may still be made to (not traced yet)."""
        return not self.traced or names <= self.wanted

    def want(self, names: frozenset[str]) -> bool:
        """Adds `names` to what the step outputs; False where it is traced without them."""
        if not self.covers(names):
            return False
        self.wanted |= names
        return True

    def start(self) -> None:
        """Begins recording a trace of the step (in this thread)."""
        self.traced = True  # what it outputs is fixed from now on
        _step.recording, _step.y_pred = bool(self.wanted), None

    def finish(self, model: Any, data: Any, flavour_unpack: Callable[[Any], Any]) -> dict[str, Any]:
        """Ends the trace's recording: the wanted leaves' tensors, by leaf name.

        Args:
            model: The Keras model, for its input and output names.
            data: What the step was called with.
            flavour_unpack: `keras.utils.unpack_x_y_sample_weight` of the model's flavour.
        """
        if not _step.recording:
            return {}
        _step.recording = False
        y_pred, _step.y_pred = _step.y_pred, None
        x, y, sample_weight = flavour_unpack(data)
        found = {"features": x, "labels": y, "sample_weight": sample_weight, "predictions": y_pred}
        leaves: dict[str, Any] = {}
        parts: dict[str, Any] = {}
        why: dict[str, str] = {}
        for root, value in found.items():
            if value is None:
                continue
            names = _input_names(model) if root == "features" else _output_names(model)
            leaves.update(_name_leaves(root, value, names, parts))
        out: dict[str, Any] = {}
        for name in sorted(self.wanted):
            chosen = {k: v for k, v in leaves.items() if k == name or k.startswith(name + "/")}
            if chosen:
                out.update(chosen)
            else:
                why[name] = self._why_none(name, found, leaves)
        # Set whole: under tf.distribute every replica's thread traces the step, to the same result.
        self.parts, self.why = parts, why
        return _gathered(out)

    @staticmethod
    def _why_none(name: str, found: Mapping[str, Any], leaves: Mapping[str, Any]) -> str:
        root = root_of(name) or name
        if found.get(root) is not None:
            return f"the step's {root} have no part {name!r}; its names are {sorted(leaves)}"
        if root == "predictions":
            return (
                "the step passed no y_pred to compute_metrics or compute_loss (nor, on tf_keras, to "
                "compiled_metrics.update_state): a custom train_step or test_step of its own; "
                "call self.compute_metrics(x, y, y_pred, sample_weight) in it, or fetch a log key "
                "the step returns"
            )
        return f"the step's data has no {root} (fit()/evaluate() were given none)"

    def leaves(self, name: str) -> Any:
        """The leaf names that batch name `name` stands for: its own, or its part's structure of them.

        Raises:
            LookupError: The step outputs no value for `name` (`explain` says why).
        """
        if name not in self.wanted or name in self.why:
            raise LookupError(name)
        return self.parts[name]

    def explain(self, name: str) -> str:
        """Why `name` has no value in this step's outputs."""
        if name in self.why:
            return self.why[name]
        return (
            "no hook named it before the run's first step, when the step was compiled without it; "
            "HookCallback outputs the batch's tensors that hook code names by then: in a hooks "
            "factory, begin(), after_create_session() or the first before_run() (look the "
            f"tensor up there, as TF1 hooks did in begin(): log_tensor({name!r}))"
        )


def _name_leaves(prefix: str, value: Any, names: list[str] | None, parts: dict[str, Any]) -> dict[str, Any]:
    """The leaves of `value` by name; puts each name's structure of leaf names in `parts`."""
    if isinstance(value, Mapping):
        labels = [str(key) for key in value]
        values = list(value.values())
    elif isinstance(value, (list, tuple)):
        labels = names if names is not None and len(names) == len(value) else [str(i) for i in range(len(value))]
        values = list(value)
    else:
        parts[prefix] = prefix
        return {prefix: value}
    leaves: dict[str, Any] = {}
    for label, part in zip(labels, values, strict=True):
        leaves.update(_name_leaves(f"{prefix}/{label}", part, None, parts))
    children = [parts[f"{prefix}/{label}"] for label in labels]
    parts[prefix] = dict(zip(labels, children, strict=True)) if isinstance(value, Mapping) else children
    return leaves


def _input_names(model: Any) -> list[str] | None:
    inputs = getattr(model, "inputs", None)
    return [str(getattr(t, "name", i)).split(":")[0] for i, t in enumerate(inputs)] if inputs else None


def _output_names(model: Any) -> list[str] | None:
    names = getattr(model, "output_names", None)
    return list(names) if names else None


def _gathered(leaves: dict[str, Any]) -> dict[str, Any]:
    """Each replica's leaves, as the global batch's, one tensor for all replicas (tf.distribute)."""
    if not leaves:
        return leaves
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return leaves
    gathered = {k: context.all_gather(v, axis=0) for k, v in leaves.items()}
    # Keras reduces what replicas return (a mean, or a sum on tf_keras); a value that is
    # one tensor for all replicas is passed through as it is.
    return context.merge_call(
        lambda strategy, per_replica: {k: strategy.experimental_local_results(v)[0] for k, v in per_replica.items()},
        args=(gathered,),
    )


def placeholder_dtype(model: Any, key: str) -> tf.DType:
    """The dtype of the placeholder standing for batch name `key`: the model's declared one, else float32."""
    root = root_of(key)
    if root == "labels":
        return tf.int64 if _sparse_loss(model, key.split("/", 1)[1] if "/" in key else None) else tf.float32
    if root != "features" and root != "predictions":
        return tf.float32
    declared = getattr(model, "inputs" if root == "features" else "outputs", None)
    if declared:
        names = _input_names(model) if root == "features" else _output_names(model)
        part = key.split("/", 1)[1] if "/" in key else None
        for i, tensor in enumerate(declared):
            if (part is None and len(declared) == 1) or (names is not None and part == names[i]):
                return tf.as_dtype(keras.backend.standardize_dtype(tensor.dtype))
    return tf.float32


def _sparse_loss(model: Any, part: str | None) -> bool:
    """Whether the loss of output `part` (the only one: None) takes class ids: sparse categorical."""
    loss = getattr(model, "loss", None)
    if isinstance(loss, Mapping):
        loss = loss.get(part) if part is not None else None
    elif isinstance(loss, (list, tuple)):
        names = _output_names(model)
        loss = loss[names.index(part)] if part is not None and names and part in names else None
    if loss is None:
        return False
    name = loss if isinstance(loss, str) else getattr(loss, "name", None) or getattr(loss, "__name__", "")
    return "sparse" in f"{type(loss).__name__} {name}".lower()


def prediction_logs(outputs: Any, model: Any) -> dict[str, Any]:
    """In predict: the batch names of the predicted batch (`predictions` and its leaves)."""
    flat = _name_leaves("predictions", outputs, _output_names(model), {})
    flat["predictions"] = outputs
    return flat


def fed(tensor: tf.Tensor, value: Any, key: str, where: str) -> Any:
    """A batch value as fed to its placeholder: floats to its float dtype (Keras's loss casts so
    too), anything else only where the cast is exact.

    Raises:
        TypeError: The value does not fit the placeholder's dtype (integers a float32 cannot hold).
    """
    array = np.asarray(value)
    dtype = tensor.dtype.as_numpy_dtype
    if array.dtype == dtype:
        return array
    cast = array.astype(dtype)
    if array.dtype.kind == "f" and cast.dtype.kind == "f":
        return cast
    if array.dtype.kind in "biuf" and np.array_equal(
        cast.astype(array.dtype), array, equal_nan=array.dtype.kind == "f"
    ):
        return cast
    raise TypeError(
        f"{where} computes an op over {key!r}, whose placeholder is {tensor.dtype.name} (the "
        f"model declares no other dtype for it), but this step's {key} are {array.dtype} values "
        f"that {tensor.dtype.name} cannot hold exactly. Give the model's input (or output) that "
        "dtype (keras.Input(..., dtype=...)), or fetch the tensor itself and compute in the hook."
    )


def missing_help(key: str, from_loop: bool = False) -> str:
    """What the error for batch name `key` says where the step's logs have none (no wrapped step).

    Args:
        key: The batch name.
        from_loop: Whether the user's own training loop passed the logs (`_batch_logs.LoopLogs`).
    """
    if from_loop:
        return (
            f" {key!r} names the batch's {root_of(key)}, which your training loop computes: pass it "
            f"in the logs of each step, callbacks.on_train_batch_end(step, {{'loss': loss, "
            f"{root_of(key)!r}: ...}})."
        )
    return (
        f" {key!r} names the batch's {root_of(key)}: HookCallback outputs those that hook code names "
        "before the run's first step (in a hooks factory, begin(), after_create_session() or the "
        "first before_run()), in train and eval; predict has only 'predictions' (the predicted batch)."
    )
