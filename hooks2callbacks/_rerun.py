"""Notes on the re-run traps of a notebook: TF1 behaviour that surprises when a cell runs again.

TF1 scripts built their hooks once per process and started from their
`model_dir`; a notebook keeps hook instances and directories from one run of a
cell to the next. Two TF1 behaviours then surprise, and each gets a one-line
warning when it happens (the behaviour itself stays TF1's):

* A `StopAtStepHook(num_steps=N)` fixes `last_step` (the global step plus N) in
  its first run's `after_create_session`, and keeps it: reused, it stops at that
  step, so the next run trains 1 step (or the few left), not N.
* A `CheckpointSaverHook` directory that holds a checkpoint of a later step than
  the model's: TF1 restored that checkpoint at start (`MonitoredTrainingSession`),
  Keras does not, so the run writes older steps next to it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from typing import Any

import tensorflow as tf


def note_traps(hooks: Iterable[Any], step: int) -> None:
    """Warns, one line each, about the re-run traps among `hooks`, before their run begins.

    Args:
        hooks: The run's hooks (not those a factory makes: they are new each run).
        step: The model's global step at the start of the run.
    """
    hooks = list(hooks)
    # Directories a hook of the run restores at its start (`estimator_hooks`), as TF1 did.
    restored = {os.path.abspath(d) for d in (getattr(h, "restores_model_dir", None) for h in hooks) if d}
    for hook in hooks:
        if isinstance(hook, tf.compat.v1.train.StopAtStepHook):
            _stop_at_step(hook, step)
        elif isinstance(hook, tf.compat.v1.train.CheckpointSaverHook):
            directory = getattr(hook, "_checkpoint_dir", None)
            if directory and os.path.abspath(directory) not in restored:
                _checkpoint_dir(hook, directory, step)


def _stop_at_step(hook: Any, step: int) -> None:
    num_steps = getattr(hook, "_num_steps", None)
    last_step = getattr(hook, "_last_step", None)
    if num_steps is None or last_step is None:  # built with last_step=..., or not run yet
        return
    warnings.warn(
        f"StopAtStepHook(num_steps={num_steps}) is reused from an earlier run, which fixed its "
        f"last_step={last_step} (as TF1 does), so this run, at global step {step}, stops after "
        f"{max(1, last_step - step)} step(s), not {num_steps}. Make a new StopAtStepHook in the cell "
        "that calls fit (or pass a hooks factory).",
        UserWarning,
        stacklevel=4,
    )


def _checkpoint_dir(hook: Any, directory: str, step: int) -> None:
    latest = tf.train.latest_checkpoint(directory)
    suffix = latest.rsplit("-", 1)[-1] if latest else ""
    if not suffix.isdigit() or int(suffix) <= step:
        return
    warnings.warn(
        f"CheckpointSaverHook: {directory} holds a checkpoint of step {suffix}, later than this "
        f"model's global step {step}, so this run writes older steps beside it (TF1 restored it at "
        f"start; Keras does not). Continue from it with hooks2callbacks.restore_checkpoint(model, "
        f"{directory!r}) before fit, or save into a new directory.",
        UserWarning,
        stacklevel=4,
    )
