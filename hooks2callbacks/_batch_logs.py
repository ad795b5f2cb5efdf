"""The logs hooks see for a step: Keras's logs with each batch's own values (`BatchLogs`), or the
logs a training loop of the user's own passed (`LoopLogs`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, cast

import keras
import numpy as np
import tensorflow as tf

from hooks2callbacks import _tensors

# Where one key's batch value sits in the packed output: (key, start, stop, shape),
# shape None for a scalar.
Slot = tuple[str, int, int, "tuple[int, ...] | None"]


class BatchValueError(ValueError):
    """A hook fetched a log key whose per-batch value cannot be derived."""

    __module__ = "hooks2callbacks"  # as tracebacks show it: the public name


def to_numpy(packed: Any) -> Any:
    # A TF eager tensor's own conversion costs a few µs; Keras's generic one
    # (backend dispatch and checks) several times that, on every step.
    if isinstance(packed, tf.Tensor) and hasattr(packed, "numpy"):
        return packed.numpy()
    return keras.ops.convert_to_numpy(packed)


def unpack(flat: Any, numbers: list[float], layout: tuple[Slot, ...]) -> dict[str, Any]:
    """The batch values by key: a Python float for a scalar, else a numpy array (as Keras's logs hold them)."""
    return {
        key: numbers[start] if shape is None else flat[start:stop].reshape(shape) for key, start, stop, shape in layout
    }


class BatchLogs(Mapping[str, Any]):
    """A step's logs with each derivable metric's batch value in place of Keras's running mean,
    and the batch's tensors by their names (`_tensors`), which are not among its keys.

    Values are what Keras's logs hold (`python_utils.pythonify_logs`): a Python
    float for a scalar, else a numpy array.

    Args:
        logs: The logs Keras passed to callbacks.
        batch: The batch values by key; or the packed output of the step, brought
            to numpy on the first read, so that a step whose values no hook reads
            costs nothing more.
        layout: Where each key's value sits in a packed output.
        underivable: Why each key that has no batch value has none.
        outputs: Which batch tensors the step outputs (None: none).
        tensors: The step's batch tensors, by leaf name.
    """

    __slots__ = ("_logs", "_packed", "_layout", "_underivable", "_batch", "_outputs", "_tensors", "_arrays")

    def __init__(
        self,
        logs: Mapping[str, Any],
        batch: Any,
        layout: tuple[Slot, ...],
        underivable: Mapping[str, str],
        outputs: _tensors.Outputs | None = None,
        tensors: Mapping[str, Any] | None = None,
    ) -> None:
        self._outputs = outputs
        self._tensors = tensors or {}
        self._arrays: dict[str, Any] = {}
        self._logs = logs
        self._batch: dict[str, Any] | None = batch if isinstance(batch, dict) else (None if layout else {})
        self._packed = batch
        self._layout = layout
        self._underivable = underivable

    def _unpacked(self) -> dict[str, Any]:
        batch = self._batch
        if batch is None:
            flat = to_numpy(self._packed)
            batch = self._batch = unpack(flat, flat.tolist(), self._layout)
        return batch

    def __getitem__(self, key: str) -> Any:
        batch = self._unpacked()
        if key in batch:
            return batch[key]
        if self._outputs is not None and _tensors.root_of(key) is not None:
            return self._tensor(key)
        why = self._underivable.get(key)
        if why is not None:
            raise BatchValueError(
                f"The log key {key!r} has no per-batch value: {why}. HookCallback gives hooks "
                "each batch's own value, as TF1 tensors held it, and will not pass Keras's running "
                "mean off as one. Either pass HookCallback(..., values='running_mean') to give "
                "hooks Keras's running means for every key, or compute the value as a metric "
                "whose update_state is Keras's own (a keras.metrics.MeanMetricWrapper of a "
                "per-sample function)."
            )
        return self._logs[key]

    def _tensor(self, key: str) -> Any:
        outputs = cast(_tensors.Outputs, self._outputs)
        try:
            leaves = outputs.leaves(key)
        except LookupError:
            why = outputs.explain(key)
            raise BatchValueError(f"The batch tensor {key!r} has no value in this step: {why}.") from None
        return keras.tree.map_structure(self._array, leaves)

    def _array(self, leaf: str) -> Any:
        """One leaf's value, brought to numpy once a step (a root and its parts share it)."""
        array = self._arrays.get(leaf)
        if array is None:
            array = self._arrays[leaf] = to_numpy(self._tensors[leaf])
        return array

    def __contains__(self, key: object) -> bool:
        return key in self._logs

    def __iter__(self) -> Iterator[str]:
        return iter(self._logs)

    def __len__(self) -> int:
        return len(self._logs)

    def __repr__(self) -> str:
        batch = self._unpacked()
        return f"BatchLogs({ {k: batch.get(k, v) for k, v in self._logs.items()}!r})"


class LoopLogs(Mapping[str, Any]):
    """The logs that a training loop of the user's own passed for a step, as hooks see them.

    The loop ran the step, so its logs are the step's values: `"loss"` as the
    loop passed it, and the batch's tensors under their names (`"features"`,
    `"labels"`, `"sample_weight"`, `"predictions"`) when the loop passes them.
    The model's compiled step, which gives batch values under `fit`, did not
    run, so nothing of it is served. A tensor (of any backend) is brought to
    numpy when a hook reads it, as `Session.run` gave it.

    A `tf.distribute` per-replica value (what `strategy.run` returns) is refused
    when read: its replicas hold their shards' values, and how they add up (a
    sum of losses scaled by the global batch, a mean) is the loop's to say.

    Args:
        logs: The logs the loop passed to `on_train_batch_end`.
    """

    __slots__ = ("_logs",)
    from_loop = True  # for the error of a missing key (`_fetch.log_value`)

    def __init__(self, logs: Mapping[str, Any]) -> None:
        self._logs = logs

    def __getitem__(self, key: str) -> Any:
        value = self._logs[key]
        kind = type(value)
        if kind is float or kind is int or kind is np.ndarray:
            return value
        if isinstance(value, tf.distribute.DistributedValues):
            raise BatchValueError(
                f"The log key {key!r} holds a tf.distribute per-replica value "
                f"({type(value).__name__} of {len(value.values)} replicas), as strategy.run returns "
                "it. Its replicas hold the values of their shards of the batch, which only your loop "
                "knows how to combine. Reduce it before passing it in the logs, as the "
                "distributed-training guide does: strategy.reduce(tf.distribute.ReduceOp.SUM, "
                "per_replica_losses, axis=None) (losses scaled by the global batch size), or "
                "ReduceOp.MEAN for a mean."
            )
        if isinstance(value, Mapping):
            return {k: self._leaf(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._leaf(v) for v in value)
        return self._leaf(value)

    @staticmethod
    def _leaf(value: Any) -> Any:
        if keras.ops.is_tensor(value) or isinstance(value, tf.Tensor) or hasattr(value, "__array__"):
            return np.asarray(to_numpy(value) if not isinstance(value, np.generic) else value)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._logs

    def __iter__(self) -> Iterator[str]:
        return iter(self._logs)

    def __len__(self) -> int:
        return len(self._logs)

    def __repr__(self) -> str:
        return f"LoopLogs({dict(self._logs)!r})"
