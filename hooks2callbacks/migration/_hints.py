"""The hints: a known cause, with its fix, for a difference whose evidence fits it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from hooks2callbacks._fetch import UnknownLogKeyError
from hooks2callbacks.migration._record import _Side
from hooks2callbacks.migration._report import Difference

_TF1_ADAM_EPSILON = 1e-8


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


def _op_names(names: Mapping[str, Any] | None) -> Iterator[tuple[str, Any]]:
    for key, value in (names or {}).items():
        yield key.split(":")[0], value
