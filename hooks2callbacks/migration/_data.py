"""The batches both sides get, and the checks of `data` against the Keras model."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf


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
