"""The arguments of `HookCallback(...)`, checked when it is made: hooks, the names map, an optimizer.

Each error names the argument, what was received and what would work, before any Keras run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

from hooks2callbacks._graph import OP_NAME, log_key_of
from hooks2callbacks._hook_list import Hooks, as_hook_list, is_factory


def hooks_argument(hooks: Any, argument: str) -> Hooks:
    """Validates a hooks argument: a factory is kept, hooks become a tuple."""
    return hooks if is_factory(hooks) else tuple(as_hook_list(hooks, f"HookCallback({argument}=...)"))


def names_argument(names: Any) -> dict[str, Any]:
    """Validates the names map; returns it keyed by op name (`'cross_entropy:0'` -> `'cross_entropy'`)."""
    if names is None:
        return {}
    if not isinstance(names, Mapping):
        raise TypeError(
            f"HookCallback(names=...) takes a dict from TF1 names to Keras log keys or variables, "
            f"such as {{'cross_entropy': 'loss'}}, got {names!r} of type {type(names).__name__}."
        )
    checked: dict[str, Any] = {}
    for key, value in names.items():
        name = log_key_of(key) if isinstance(key, str) else None
        if name is None or not OP_NAME.match(name):
            raise ValueError(
                f"HookCallback(names=...): the key {key!r} is not a TF1 tensor name. Use names such "
                "as 'cross_entropy' or 'cross_entropy:0'."
            )
        if name in checked:
            raise ValueError(f"HookCallback(names=...): {key!r} names {name!r} a second time; give it once.")
        if isinstance(value, str):
            if not OP_NAME.match(log_key_of(value)) or ":" in value and not value.endswith(":0"):
                raise ValueError(
                    f"HookCallback(names=...): {key!r} maps to {value!r}, which is no log key or "
                    "tensor name. Map it to a log key such as 'loss', or to a name such as "
                    "'learning_rate' or 'dense/kernel:0'."
                )
        elif not isinstance(value, (tf.Variable, keras.Variable)):
            hint = (
                " A learning rate that a schedule computes is a tensor, not a variable: map the name "
                "to 'learning_rate' instead."
                if hasattr(value, "numpy") or isinstance(value, tf.Tensor)
                else ""
            )
            raise TypeError(
                f"HookCallback(names=...): {key!r} maps to {value!r} of type {type(value).__name__}. "
                "A TF1 name maps to a Keras log key or another name (a str, such as 'loss' or "
                "'learning_rate'), or to a variable (keras.Variable or tf.Variable, such as "
                f"model.optimizer.learning_rate).{hint}"
            )
        checked[name] = value
    for name in checked:
        seen, target = {name}, checked[name]
        while isinstance(target, str) and log_key_of(target) in checked:
            target_name = log_key_of(target)
            if target_name in seen:
                raise ValueError(
                    f"HookCallback(names=...): the names {sorted(seen)} map to each other in a "
                    "circle; map one of them to a log key or a variable."
                )
            seen.add(target_name)
            target = checked[target_name]
    return checked


def optimizer_argument(optimizer: Any) -> Any:
    """Validates `HookCallback(optimizer=...)`: a Keras (or tf_keras) optimizer, or None."""
    if optimizer is None:
        return None
    if type(optimizer).__module__.startswith("torch.optim"):
        raise TypeError(
            f"HookCallback(optimizer=...) got the torch.optim optimizer {type(optimizer).__name__}, "
            "which counts no steps that a global step could be read from. Train with a Keras "
            "optimizer (keras.optimizers.Adam(...): optimizer.apply(grads, model.trainable_weights) "
            "in your loop works on the PyTorch backend), whose `iterations` is the global step."
        )
    if isinstance(optimizer, type) or getattr(optimizer, "iterations", None) is None:
        raise TypeError(
            f"HookCallback(optimizer=...) takes the Keras optimizer that trains the model in your "
            f"loop (one with an `iterations` step count, such as keras.optimizers.SGD(...)), got "
            f"{optimizer!r} of type {type(optimizer).__name__}."
        )
    return optimizer
