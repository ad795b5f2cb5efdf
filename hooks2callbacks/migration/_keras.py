"""The Keras side: `fit`, `evaluate` or `predict` with the hooks in one `HookCallback`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from hooks2callbacks._flavours import is_tf_keras
from hooks2callbacks.callback import HookCallback
from hooks2callbacks.migration._record import _call_factory, _SessionRunHook, _Side, _wrap


def _run_keras(
    model: Any,
    batches: list[tuple[Any, Any]],
    mode: str,
    callback: HookCallback,
    side: _Side,
) -> None:
    xs = [f for f, _ in batches]
    sizes = [len(tf.nest.flatten(f)[0]) for f in xs]
    batch_size = sizes[0]
    regular = all(s == batch_size for s in sizes[:-1]) and sizes[-1] <= batch_size
    common = {"verbose": 0, "callbacks": [callback, _logs_recorder(model, mode, side)]}

    def joined(parts: list[Any]) -> Any:
        return tf.nest.map_structure(lambda *a: np.concatenate(a), *parts)

    def generate() -> Iterator[Any]:
        for f, y in batches:
            yield f if mode == "predict" else (f, y)

    if mode == "predict":
        if regular:
            model.predict(joined(xs), batch_size=batch_size, **common)
        else:
            model.predict(generate(), steps=len(batches), **common)
    elif regular:
        x, y = joined(xs), joined([y for _, y in batches])
        if mode == "train":
            model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, **common)
        else:
            model.evaluate(x, y, batch_size=batch_size, **common)
    elif mode == "train":
        model.fit(generate(), steps_per_epoch=len(batches), epochs=1, **common)
    else:
        model.evaluate(generate(), steps=len(batches), **common)


def _counting(factory: Callable[[], Any], side: _Side) -> Callable[[], list[Any]]:
    """The Keras side's factory: the hooks wrapped, and a last hook that counts the steps."""

    class _Count(_SessionRunHook):
        def after_run(self, run_context: Any, run_values: Any) -> None:
            side.step += 1

    def make() -> list[Any]:
        return [*(_wrap(h, i, side) for i, h in enumerate(_call_factory(factory, "Keras"))), _Count()]

    return make


def _logs_recorder(model: Any, mode: str, side: _Side) -> Any:
    """A Keras callback that keeps each batch's logs on `side.logs` (for the names-map hint's evidence)."""
    if is_tf_keras(model):
        import tf_keras as framework  # pylint: disable=import-outside-toplevel
    else:
        import keras as framework  # pylint: disable=import-outside-toplevel

    class _Logs(framework.callbacks.Callback):
        def _keep(self, batch: int, logs: Any = None) -> None:
            side.logs.append(
                {
                    k: float(v)
                    for k, v in (logs or {}).items()
                    if isinstance(v, (int, float, np.number)) or np.ndim(v) == 0
                }
            )

        if mode == "train":
            on_train_batch_end = _keep
        elif mode == "eval":
            on_test_batch_end = _keep

    return _Logs()
