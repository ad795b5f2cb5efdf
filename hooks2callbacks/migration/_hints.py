"""The hints: a known cause, with its fix, for a difference whose evidence fits it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from hooks2callbacks._fetch import UnknownLogKeyError
from hooks2callbacks._model import ModelMirror
from hooks2callbacks.migration._record import _Side
from hooks2callbacks.migration._report import Difference
from hooks2callbacks.migration._steps import PER_STEP

_TF1_ADAM_EPSILON = 1e-8


def _hints(
    differences: list[Difference],
    tf1: _Side,
    keras: _Side,
    names: Mapping[str, Any],
    graph: Any,
    keras_model: Any,
    shuffled: bool,
) -> list[Difference]:
    """Each difference with the hint whose evidence fits it, if one does.

    Args:
        differences: The differences found.
        tf1: The TF1 side's record (what each hook fetched, and its values).
        keras: The Keras side's record (its values, and each batch's logs).
        names: The names map, by op name.
        graph: The TF1 graph (its optimizer's epsilon, its batch norms).
        keras_model: The Keras model (its optimizer, its layers).
        shuffled: Whether the dataset gave another order each pass.

    Returns:
        The differences, hinted.
    """
    optimizer = getattr(keras_model, "optimizer", None)
    epsilon = getattr(optimizer, "epsilon", None)
    tf1_epsilon = adam_epsilon(graph)
    adam_hint = None
    if (
        tf1_epsilon is not None
        and type(optimizer).__name__ in ("Adam", "AdamW")
        and not (isinstance(epsilon, float) and math.isclose(epsilon, tf1_epsilon, rel_tol=1e-6))
    ):
        adam_hint = (
            f"the Keras model's Adam has epsilon={epsilon}, and the TF1 graph's Adam {tf1_epsilon:g}: every "
            f"update differs. Compile keras.optimizers.Adam(epsilon={tf1_epsilon:g})."
        )
    bn_hint = None
    if _fused_batch_norm(graph) and any("BatchNormalization" in type(layer).__name__ for layer in _layers(keras_model)):
        bn_hint = (
            "TF1's fused batch norm moved moving_variance toward the unbiased batch variance (n/(n-1)), "
            "Keras's BatchNormalization toward the biased one: use a layer over "
            "tf.compat.v1.nn.fused_batch_norm (docs/check-migration.md, 'Batch norm as TF1 had it')."
        )
    slot_hint = _slot_hint(differences)
    # The TF1 graph's own summaries by tag (a v1 summary op is named as its tag) and the function that writes one.
    summary_ops = graph.get_collection(tf.compat.v1.GraphKeys.SUMMARIES) if graph is not None else []
    graph_summaries = {t.op.name: _SUMMARY_FUNCTIONS.get(t.op.type, "scalar") for t in summary_ops}
    rate_changed = _momentum_rate_changes(graph, keras_model)
    # Under Adam's epsilon difference the two sides drift apart a little: a streaming value
    # is then the running mean of the other side's only to about 1% (`_streaming`).
    drifting = adam_hint is not None
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
        if d.hint is not None:  # TF1's own nondeterminism, named where it was found
            hinted.append(d)
            continue
        hint = None
        fetch = fetched.get((d.hook, d.key), "")
        op = fetch.split(":")[0]
        values = series.get((d.hook, d.key))
        if d.kind == "error" and isinstance(keras.error, UnknownLogKeyError):
            hint = (
                "a TF1 name the hooks use is not in the names map, and no Keras log key is called so: "
                "add it to names=, such as names={'cross_entropy': 'loss'}."
            )
        elif tags := _tf1_only_summaries(d, graph_summaries):
            hint = (
                f"TF1 wrote {', '.join(map(repr, tags))} from the TF1 graph's own summary ops (tf.compat.v1.summary.* "
                "in the model_fn, which SummarySaverHook merges); the Keras model has no such op. Build it in "
                f"the hooks factory on the Keras side: if side() == 'keras': "
                f"tf.compat.v1.summary.{graph_summaries[tags[0]]}({tags[0]!r}, log_tensor(...)) "
                "(docs/check-migration.md, 'Summaries in the model_fn')."
            )
        elif values and _streaming(values[0], values[1], drifting):
            hint = (
                f"TF1's value ({fetch or d.key}) is the mean since the run began, a streaming tf.metrics "
                "value, and Keras's the batch's own: build the metric in the hooks factory "
                "(tf.compat.v1.metrics.mean(log_tensor(...))) or pass values='running_mean'."
            )
        elif values and _streaming(values[1], values[0], drifting):
            hint = (
                "Keras's value is a running mean and TF1's the batch's: map the name to the batch's value "
                "(values='batch'), or fetch the streaming tf.metrics value on the TF1 side."
            )
        elif adam_hint is not None and d.kind == "value" and _near(d.tf1, d.keras):
            # Adam's epsilon moves every update a little: a near value, not another tensor.
            hint = adam_hint
        elif bn_hint is not None and "moving_variance" in d.key and d.kind == "value":
            hint = bn_hint
        elif (
            rate_changed is not None
            and d.kind == "value"
            and d.step is not None
            and (rate_changed(d.step) if d.hook == PER_STEP else _first_change(rate_changed, d.step))
        ):
            hint = (
                "TF1's MomentumOptimizer summed the gradients (a = momentum * a + g; variable -= rate * a), "
                "Keras's SGD sums them times each step's rate (m = momentum * m - rate * g; variable += m): "
                "the same while the rate is constant, but the first step at a new rate (the schedule's) "
                "still carries the old rate's momentum in Keras. Write the update as TF1 did "
                "(docs/check-migration.md, 'Momentum as TF1 had it')."
            )
        elif slot_hint is not None and d.key.endswith(" names") and d.kind == "missing":
            hint = slot_hint
        elif op and op in names and d.kind in ("value", "shape", "dtype") and values and d.key.startswith("results"):
            other = _matching_key(values[0], keras.logs, names[op])
            if other is not None:
                hint = (
                    f"names maps {op!r} to {names[op]!r}, which holds another value than the TF1 tensor "
                    f"{fetch!r} held; the Keras log key {other!r} holds TF1's values: map {op!r} to {other!r}."
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


_TF1_MOMENTUM_OPS = ("ApplyMomentum", "ResourceApplyMomentum", "SparseApplyMomentum", "ResourceSparseApplyMomentum")


def _momentum_rate_changes(graph: Any, keras_model: Any) -> Callable[[int], bool] | None:
    """Whether the rate changes at a step, where TF1's MomentumOptimizer meets Keras's SGD under a schedule.

    Returns None unless the TF1 graph applies Momentum and the Keras model's
    optimizer is an `SGD` with momentum whose rate a schedule computes; else a
    function telling whether step k trains at another rate than step k - 1.
    """
    optimizer = getattr(keras_model, "optimizer", None)
    momentum = getattr(optimizer, "momentum", None)
    if type(optimizer).__name__ != "SGD" or not isinstance(momentum, (int, float)) or momentum <= 0:
        return None
    if not any(op.type in _TF1_MOMENTUM_OPS for op in graph.get_operations()):
        return None
    mirror = ModelMirror(None, keras_model, {}, train=True)
    mirror.entries()  # makes the rate's entry
    rate = mirror.rate
    read_at = getattr(rate, "read_at", None)
    if read_at is None:
        return None
    at: dict[int, float] = {}

    def rate_of(step: int) -> float:
        if step not in at:
            at[step] = float(read_at(step))
        return at[step]

    return lambda step: step > 0 and not math.isclose(rate_of(step), rate_of(step - 1), rel_tol=1e-7)


def _first_change(changed: Callable[[int], bool], step: int) -> bool:
    """Whether the rate changed at a step before `step` (a free-running value shows an update late)."""
    return any(changed(k) for k in range(1, step))


_SUMMARY_FUNCTIONS = {"HistogramSummary": "histogram", "ImageSummary": "image", "AudioSummaryV2": "audio"}


def _tf1_only_summaries(d: Difference, graph_summaries: Mapping[str, str]) -> list[str]:
    """The tags of the TF1 graph's summary ops that `d` shows written on the TF1 side only."""
    if d.key.startswith("summary '") and d.kind == "missing" and d.keras is None:
        shown = [d.key.split("'")[1]]
    elif d.key.startswith("results") and isinstance(d.tf1, dict) and isinstance(d.keras, dict):
        shown = sorted(k.split("'")[1] for k in d.tf1.keys() - d.keras.keys() if str(k).startswith("summary '"))
    else:
        return []
    return [tag for tag in shown if tag in graph_summaries]


def _streaming(tf1: list[float], keras: list[float], drifting: bool = False) -> bool:
    """Whether the TF1 values are the running means of the Keras ones (and the two differ).

    Exactly (to 1e-4), unless the sides drift (another Adam epsilon): then to 2%, or, for a
    metric of whole samples (an accuracy) that one sample classified otherwise moves, far
    nearer the running means than the batch's own values.
    """
    n = min(len(tf1), len(keras))
    if n < 2:
        return False
    rtol = 2e-2 if drifting else 1e-4
    ours, theirs = np.asarray(tf1[:n]), np.asarray(keras[:n])
    means = np.cumsum(theirs) / np.arange(1, n + 1)
    if np.allclose(ours, theirs, rtol=rtol):
        return False
    if np.allclose(ours, means, rtol=rtol, atol=1e-6):
        return True
    return drifting and n >= 4 and bool(np.mean(np.abs(ours - means)) < 0.2 * np.mean(np.abs(ours - theirs)))


def _near(tf1: Any, keras: Any, rtol: float = 0.05) -> bool:
    """Whether two differing values are numbers within `rtol` of each other (a drift, not another value)."""
    try:
        return bool(np.allclose(np.asarray(tf1, dtype=float), np.asarray(keras, dtype=float), rtol=rtol))
    except (TypeError, ValueError):  # not numbers, or shapes that differ: no drift
        return False


def _op_names(names: Mapping[str, Any] | None) -> Iterator[tuple[str, Any]]:
    for key, value in (names or {}).items():
        yield key.split(":")[0], value


def adam_epsilon(graph: Any) -> float | None:
    """The epsilon of the TF1 graph's Adam updates (`ApplyAdam` ops), or None where it has none or many."""
    found = set()
    for op in graph.get_operations():
        if op.type in ("ApplyAdam", "ResourceApplyAdam", "ResourceSparseApplyAdam", "SparseApplyAdam"):
            value = tf.get_static_value(op.inputs[8])
            if value is None:
                return None
            found.add(float(value))
    return found.pop() if len(found) == 1 else None


def _fused_batch_norm(graph: Any) -> bool:
    """Whether the TF1 graph trains a fused batch norm (its kernel keeps the unbiased variance)."""
    for op in graph.get_operations():
        if op.type.startswith("FusedBatchNorm") and not op.type.endswith("Grad"):
            try:
                if op.get_attr("is_training"):
                    return True
            except ValueError:
                continue
    return False


def _layers(model: Any) -> list[Any]:
    """The model's layers, nested models' included."""
    found, stack = [], list(getattr(model, "layers", None) or [])
    while stack:
        layer = stack.pop()
        found.append(layer)
        stack.extend(getattr(layer, "layers", None) or [])
    return found


def _matching_key(tf1: list[float], logs: list[dict[str, float]], mapped: Any) -> str | None:
    """The Keras log key (other than `mapped`) whose batch values, or running means, are TF1's values."""
    n = min(len(tf1), len(logs))
    if n == 0:
        return None
    want = np.asarray(tf1[:n])
    for key in sorted(set().union(*(set(step) for step in logs[:n]))):
        if key == mapped or any(key not in step for step in logs[:n]):
            continue
        means = np.asarray([step[key] for step in logs[:n]])
        # Keras's logs are running means: the batch's own value is what they add each step.
        counts = np.arange(1, n + 1)
        batch = means * counts - np.concatenate([[0.0], means[:-1] * counts[:-1]])
        for candidate in (means, batch):
            if np.allclose(want, candidate, rtol=1e-3, atol=1e-5):
                return str(key)
    return None


def _slot_hint(differences: list[Difference]) -> str | None:
    """An `assignment_map` for optimizer slots the two sides name differently, matched by variable and order."""
    pairs: dict[str, str] = {}
    for d in differences:
        if not d.key.endswith(" names") or not isinstance(d.tf1, list) or not isinstance(d.keras, list):
            continue
        theirs: dict[str, list[str]] = {}
        for name in d.keras:
            theirs.setdefault(name.rsplit("/", 1)[0], []).append(name)
        mine: dict[str, list[str]] = {}
        for name in d.tf1:
            mine.setdefault(name.rsplit("/", 1)[0], []).append(name)
        for variable, names in mine.items():
            for tf1_name, keras_name in zip(sorted(names), sorted(theirs.get(variable, [])), strict=False):
                pairs.setdefault(tf1_name, keras_name)
    if not pairs:
        return None
    code = ", ".join(f"{k!r}: {v!r}" for k, v in sorted(pairs.items()))
    return (
        "the TF1 optimizer's slots have other names than the Keras optimizer's (a custom optimizer, such as "
        "BERT's AdamWeightDecayOptimizer): if they are the same slots, by variable and order, pass "
        f"assignment_map={{{code}}}"
    )


def epsilon_notes_fit(graph: Any, keras_model: Any) -> bool:
    """Whether the Keras model's Adam has the TF1 graph's own epsilon (the restore's epsilon note is moot)."""
    tf1_epsilon = adam_epsilon(graph)
    epsilon = getattr(getattr(keras_model, "optimizer", None), "epsilon", None)
    return tf1_epsilon is not None and isinstance(epsilon, float) and math.isclose(epsilon, tf1_epsilon, rel_tol=1e-6)
