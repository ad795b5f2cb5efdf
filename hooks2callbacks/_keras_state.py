"""The Keras model's state as this package reads and writes it, eagerly, from any context.

Every read of a model's variable, its optimizer and its global step goes through here:
a stateless custom loop's state (keras.io's JAX loop) held outside the model reaches the
variables at the first read or write (`LoopState`), JAX's trainer state is synced first,
and an optimizer lent for a run (`HookCallback(optimizer=...)`) is the model's optimizer
for that run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from hooks2callbacks._cluster import sharded_across_processes
from hooks2callbacks._seams import context, optimizer_micro_steps


def read_variable(variable: Any, model: Any = None) -> Any:
    """Reads an eager TF or Keras variable, also from inside the adapter graph's context."""
    if _loop_states:  # a stateless loop's state, handed in, reaches the variables at the first read
        sync_loop_state(model)
    # Keras's JAX trainer keeps the state outside the variables during an epoch;
    # this writes it back (as `Callback.model` does), so the value is current.
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()
    # tf.init_scope does not leave a graph entered with as_default().
    with context.eager_mode():
        # A TF variable (also Keras 3's on the TF backend) reads fastest with numpy():
        # np.array() goes through a deprecation warning, and for a scalar mirrored
        # variable fails (its __array__ gives a numpy scalar).
        value = variable.value if isinstance(variable, keras.Variable) else variable
        if isinstance(value, tf.Variable):
            return np.asarray(value.numpy())
        try:
            return keras.ops.convert_to_numpy(variable)
        except RuntimeError as error:
            refusal = sharded_across_processes(variable)
            if refusal is None:
                raise
            raise refusal from error


def write_variable(variable: Any, value: Any, model: Any = None) -> None:
    """Assigns `value` to an eager TF or Keras variable, so that Keras's next step uses it."""
    if _loop_states:
        loop_state = sync_loop_state(model)
        if loop_state is not None:
            loop_state.wrote()
    # After a JAX sync the trainer takes its state from the variables again
    # at the next batch (`_jax_state_synced`), so the assignment survives.
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()
    with context.eager_mode():
        variable.assign(value)


class LoopState:
    """A stateless training loop's state (keras.io's JAX loop), held outside the model.

    The loop hands it in with its logs (`"state"`: trainable, non-trainable and
    optimizer variables' values); it reaches the Keras variables only when hook code
    reads or writes one of them (a fetch by name, a checkpoint, an assign op), so a
    step whose hooks touch no variable costs nothing. `take()` gives it back, with
    the hooks' writes where they wrote.

    Attributes:
        pending: The state handed in and not yet in the variables, or None.
        writer: Describes the hook call that last wrote a variable (None: no write
            since the state was last taken).
    """

    def __init__(self, model: Any, optimizer: Any, caller: Callable[[], str]) -> None:
        self.model = model
        self.optimizer = optimizer
        self.pending: Any = None
        self.current: Any = None
        self.writer: str | None = None
        self._caller = caller

    def groups(self) -> tuple[list[Any], list[Any], list[Any]]:
        optimizer_variables = list(self.optimizer.variables) if self.optimizer is not None else []
        return list(self.model.trainable_variables), list(self.model.non_trainable_variables), optimizer_variables

    def hand(self, state: Any, step: int) -> None:
        """Takes the loop's state after a step.

        Raises:
            ValueError: `state` is not the three lists of values, or hooks wrote a
                variable since the loop last took the state back (their write would be lost).
        """
        if self.writer is not None:
            raise ValueError(
                f"{self.writer} wrote the model's variables, and the state the loop passed at step {step} "
                "does not hold that write: the loop kept its own state, so the write would be lost. Take "
                "the state back after on_train_begin() and after each on_train_batch_end(): "
                "`state = callback.state()` (docs/custom-loops.md)."
            )
        groups = self.groups()
        if not isinstance(state, (tuple, list)) or len(state) != 3:
            raise ValueError(
                f"HookCallback: logs['state'] at step {step} takes the loop's state as "
                "(trainable_values, non_trainable_values, optimizer_values), got "
                f"{type(state).__name__}{f' of {len(state)} items' if isinstance(state, (tuple, list)) else ''}."
            )
        for what, values, variables in zip(("trainable", "non-trainable", "optimizer"), state, groups, strict=True):
            if len(values) != len(variables):
                raise ValueError(
                    f"HookCallback: logs['state'] at step {step} holds {len(values)} {what} values; the "
                    f"model (and the optimizer given as HookCallback(optimizer=...)) has {len(variables)}."
                )
        self.pending = self.current = state

    def sync(self) -> None:
        """Puts the handed-in state into the Keras variables."""
        state, self.pending = self.pending, None
        with context.eager_mode():
            for variables, values in zip(self.groups(), state, strict=True):
                for variable, value in zip(variables, values, strict=True):
                    variable.assign(value)

    def wrote(self) -> None:
        self.writer = self._caller()

    def take(self) -> tuple[list[Any], list[Any], list[Any]]:
        """The state for the loop's next step: the one handed in, or the variables' values after writes."""
        if self.current is None or self.writer is not None:
            self.writer = None
            self.current = tuple([v.value for v in variables] for variables in self.groups())
        return self.current


# Stateless loops' states (`LoopState`) of runs in progress: id(model) -> the state.
_loop_states: dict[int, LoopState] = {}


def sync_loop_state(model: Any) -> LoopState | None:
    loop_state = _loop_states.get(id(model))
    if loop_state is not None and loop_state.pending is not None:
        loop_state.sync()
    return loop_state


def register_loop_state(model: Any, loop_state: LoopState | None) -> None:
    """Makes reads and writes of `model`'s variables see `loop_state` (None: ends it)."""
    if loop_state is None:
        _loop_states.pop(id(model), None)
    else:
        _loop_states[id(model)] = loop_state


# Optimizers lent for a run (`HookCallback(optimizer=...)`): id(model) -> the optimizer
# that trains it there. `optimizer_of` is the one place that reads a model's optimizer.
_lent: dict[int, Any] = {}


def optimizer_of(model: Any) -> Any:
    """The optimizer that trains `model`: one lent for the run in progress, else `model.optimizer` (or None).

    Every read of a model's optimizer in this package goes through here, so that a
    custom training loop's optimizer (`HookCallback(optimizer=...)`) is the one whose
    `iterations` is the global step, whose variables hooks see and checkpoints hold.
    """
    lent = _lent.get(id(model))
    return getattr(model, "optimizer", None) if lent is None else lent


def lend_optimizer(model: Any, optimizer: Any) -> None:
    """Makes `optimizer_of(model)` return `optimizer` until `return_optimizer(model)`."""
    _lent[id(model)] = optimizer


def return_optimizer(model: Any) -> None:
    """Ends `lend_optimizer(model, ...)`; nothing if none is lent."""
    _lent.pop(id(model), None)


@contextlib.contextmanager
def lent_optimizer(model: Any, optimizer: Any) -> Iterator[None]:
    """`optimizer_of(model)` is `optimizer` inside the block (nothing changes for None)."""
    if optimizer is None:
        yield
        return
    before = _lent.get(id(model))
    lend_optimizer(model, optimizer)
    try:
        yield
    finally:
        if before is None:
            return_optimizer(model)
        else:
            _lent[id(model)] = before


def accumulation_steps(optimizer: Any) -> int:
    """Micro-batches per applied update: Keras 3's `gradient_accumulation_steps`, else 1."""
    return int(getattr(optimizer, "gradient_accumulation_steps", None) or 1)


def step_source(optimizer: Any) -> Any:
    """The variable that counts the optimizer's steps.

    With gradient accumulation, Keras 3's `iterations` is computed anew at each
    read (micro-batches // accumulation steps) from the micro-batch count.
    """
    if accumulation_steps(optimizer) > 1:
        return optimizer_micro_steps(optimizer)
    return optimizer.iterations


def global_step_of(model: Any) -> int:
    """The model's global step: its optimizer's applied updates (`iterations`), read eagerly."""
    optimizer: Any = optimizer_of(model)
    if getattr(optimizer, "iterations", None) is None:
        return 0
    if _loop_states:
        sync_loop_state(model)
    with context.eager_mode():
        iterations = optimizer.iterations
    if isinstance(iterations, keras.Variable):
        iterations = iterations.value
    if isinstance(iterations, tf.Variable):  # TF backend, tf_keras (also mirrored)
        return int(iterations.numpy())
    return int(keras.ops.convert_to_numpy(iterations))


def has_weights(model: Any) -> bool:
    """Whether the model has made its weights (tf_keras makes those of a model given
    no input shape only in its first step, after `on_train_begin`)."""
    if getattr(model, "built", True):
        return True
    try:
        # Trainable ones: a metric tracker the model holds (`self.loss_tracker = Mean()`)
        # makes its variables at once, the layers' only in the first step.
        return bool(model.trainable_weights)
    except ValueError:  # tf_keras's Sequential before it is built
        return False
