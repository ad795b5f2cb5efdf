"""Translations for the stock hooks that need more than the adapter graph.

* `CheckpointSaverHook` finds its saver in the graph's `SAVERS` collection, as
  under a TF1 `Scaffold`. The adapter puts a `KerasSaver` there: the hook's own
  code runs (schedule, listeners, event-file records) and its `saver.save`
  writes an object-based checkpoint of the Keras model and optimizer, under the
  TF1 name `model.ckpt-<global step>`. `restore_checkpoint` reads one back.
* `ProfilerHook` and `FeedFnHook` cannot work in Keras and are refused when the
  hooks are given, with what to use instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from hooks2callbacks._model import has_weights, outside_strategy
from hooks2callbacks._seams import context, ops

# What a TF1 Scaffold's default saver keeps.
MAX_TO_KEEP = 5


class KerasSaver:
    """What `CheckpointSaverHook` gets as its saver: saves the Keras model's state.

    It has the part of `tf.compat.v1.train.Saver` that the hook uses: `save`
    and `saver_def`.

    Args:
        model: The Keras model whose weights (and optimizer state) are saved.
    """

    saver_def = None  # There is no graph saver to describe in a MetaGraphDef.

    def __init__(self, model: Any, max_to_keep: int | None = MAX_TO_KEEP) -> None:
        self._model = model
        self._max_to_keep = max_to_keep
        self._managers: dict[str, tf.train.CheckpointManager] = {}

    def save(
        self,
        sess: Any,
        save_path: str,
        global_step: Any = None,
        latest_filename: str | None = None,
        meta_graph_suffix: str = "meta",
        write_meta_graph: bool = True,
        write_state: bool = True,
        strip_default_attrs: bool = False,
        save_debug_info: bool = False,
    ) -> str:
        """Writes `<save_path>-<global_step>` and records it as the latest checkpoint.

        The signature is `tf.compat.v1.train.Saver.save`'s. As with a Scaffold's
        saver, the newest `MAX_TO_KEEP` checkpoints are kept and the directory's
        `checkpoint` state file names them. No meta graph is written: the
        adapter graph holds no model.

        Returns:
            The checkpoint's path prefix, as `Saver.save` returns it.

        Raises:
            OSError: The checkpoint could not be written (the message names the
                path).
        """
        del sess, latest_filename, meta_graph_suffix, write_meta_graph, write_state
        del strip_default_attrs, save_debug_info
        number = None if global_step is None else int(global_step)
        if not has_weights(self._model):
            warnings.warn(
                f"HookCallback: CheckpointSaverHook saved {save_path}-{number} before the tf_keras model "
                f"{getattr(self._model, 'name', '?')!r} made its weights (tf_keras makes those of a model "
                "given no input shape in its first step): this checkpoint holds no model weights, where "
                "TF1's initial checkpoint held them. Later checkpoints hold them. To save them from the "
                "start, give the model an input shape or call model.build(input_shape) before fit().",
                UserWarning,
                stacklevel=2,
            )
        # Hooks run with the adapter graph as default; object-based checkpoints
        # must be written eagerly, and outside the strategy the hooks' begin/end run in.
        with context.eager_mode(), outside_strategy(ops.get_default_graph()), _root_left_alone():
            manager = self._manager(save_path)
            try:
                return manager.save(checkpoint_number=number, check_interval=False)
            except (tf.errors.OpError, OSError) as error:
                raise OSError(
                    f"Could not write the checkpoint {save_path}-{number} of the Keras model: "
                    f"{error}. Check that {os.path.dirname(save_path) or '.'} is writable and "
                    "has free space."
                ) from error

    def _manager(self, save_path: str) -> tf.train.CheckpointManager:
        manager = self._managers.get(save_path)
        if manager is None:
            directory, name = os.path.split(save_path)
            with context.eager_mode():
                manager = tf.train.CheckpointManager(
                    _checkpoint(self._model), directory or ".", self._max_to_keep, checkpoint_name=name
                )
            self._managers[save_path] = manager
        return manager


def _checkpoint(model: Any) -> tf.train.Checkpoint:
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return tf.train.Checkpoint(model=model)
    return tf.train.Checkpoint(model=model, optimizer=optimizer)


@contextlib.contextmanager
def _root_left_alone() -> Iterator[None]:
    """Keeps absl from configuring the root logger while TF writes a checkpoint.

    TF's checkpoint writer logs through `absl.logging`, whose first call runs
    `logging.basicConfig()` when the root logger has no handler: every
    `tensorflow` line then prints twice (TF's handler and the root's). A real
    MonitoredSession's saver does not, so neither may this one. A handler that
    drops records stands in for the save; absl's INFO line would not have
    printed at the root's WARNING level anyway.
    """
    root = logging.getLogger()
    stand_in = None if root.handlers else logging.NullHandler()
    if stand_in is not None:
        root.addHandler(stand_in)
    try:
        yield
    finally:
        if stand_in is not None:
            root.removeHandler(stand_in)


def install_saver(graph: tf.Graph, model: Any, max_to_keep: int | None = MAX_TO_KEEP) -> None:
    """Puts a `KerasSaver` for `model` in `graph`'s `SAVERS` collection, keeping the newest `max_to_keep`."""
    graph.add_to_collection(tf.compat.v1.GraphKeys.SAVERS, KerasSaver(model, max_to_keep))


def restore_checkpoint(model: Any, path: str) -> str:
    """Restores a checkpoint that `CheckpointSaverHook` wrote through `HookCallback`.

    Example: `restore_checkpoint(model, "ckpt_dir")` restores the newest
    checkpoint in `ckpt_dir` into `model`, a built model of the same
    architecture. The optimizer's state (and so the global step,
    `optimizer.iterations`) is restored too when the model is compiled, so a
    following `fit` continues from the saved step, as TF1 does on restart.

    The plain TensorFlow equivalent, for the weights only:
    `tf.train.Checkpoint(model=model).read(tf.train.latest_checkpoint(dir)).expect_partial()`.

    Args:
        model: A built Keras model of the architecture that was saved.
        path: A checkpoint directory (its newest checkpoint is used) or a
            checkpoint path prefix such as `ckpt_dir/model.ckpt-100`.

    Returns:
        The path prefix of the checkpoint restored.

    Raises:
        FileNotFoundError: `path` holds no checkpoint.
        ValueError: `path` is a name-based TF1 checkpoint (a `Saver`'s or an
            Estimator's), `model` is not built, or its variables do not match
            the checkpoint's.
    """
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None or not tf.io.gfile.exists(prefix + ".index"):
        raise FileNotFoundError(
            f"restore_checkpoint(model, {path!r}): no checkpoint there. Pass the directory a "
            "CheckpointSaverHook wrote to, or a prefix such as 'dir/model.ckpt-100'."
        )
    names = {name for name, _ in tf.train.list_variables(prefix)}
    if "_CHECKPOINTABLE_OBJECT_GRAPH" not in names:
        shown = sorted(names)[:5]
        raise ValueError(
            f"restore_checkpoint(model, {prefix!r}): this is a name-based TF1 checkpoint (a "
            f"tf.compat.v1.train.Saver's or an Estimator's: variables {shown}"
            f"{' ...' if len(names) > 5 else ''}), not one CheckpointSaverHook wrote through "
            "HookCallback. Warm-start the model from it by name instead: a hook calling "
            "tf.compat.v1.train.init_from_checkpoint in begin(), with an assignment_map where the "
            "scopes differ (see the migrating page, 'Warm starts from TF1 checkpoints')."
        )
    if not getattr(model, "built", True):
        raise ValueError(
            f"restore_checkpoint(model, {path!r}): the model is not built, so it has no "
            "variables to restore into. Build it first: give it a keras.Input, or call it on "
            "one batch."
        )
    optimizer = getattr(model, "optimizer", None)
    with context.eager_mode():
        # Slot variables must exist to be restored into (Keras 3: `built`; tf_keras: `_built`).
        if optimizer is not None and not getattr(optimizer, "built", getattr(optimizer, "_built", True)):
            optimizer.build(model.trainable_variables)
        try:
            status = _checkpoint(model).read(prefix)
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError) as error:
            raise ValueError(
                f"restore_checkpoint(model, {prefix!r}): the model's variables do not match "
                f"the checkpoint's ({error}). Restore into a model of the architecture that "
                "was saved."
            ) from error
        status.expect_partial()
    return prefix


def refusal(hook: Any) -> str | None:
    """Returns why `hook` cannot run under `HookCallback`, and what to do instead; or None."""
    train = tf.compat.v1.train
    if isinstance(hook, train.FeedFnHook):
        return (
            "a FeedFnHook. Keras takes its inputs from the dataset given to fit()/evaluate(), "
            "not from feeds, so there is nothing for it to feed. Do what its feed_fn did in "
            "the input pipeline: a tf.data.Dataset.map, or a keras.utils.PyDataset."
        )
    if isinstance(hook, train.ProfilerHook):
        return (
            "a ProfilerHook. It writes its trace from RunMetadata.step_stats of a TF1 "
            "Session.run, and Keras's compiled steps report no step stats in TF2, so its "
            "traces would be empty. Profile the same steps with "
            "keras.callbacks.TensorBoard(log_dir, profile_batch=(start, stop)), whose trace "
            "TensorBoard's profile plugin reads."
        )
    if isinstance(hook, train.CheckpointSaverHook):
        saver = getattr(hook, "_saver", None)
        if getattr(hook, "_scaffold", None) is not None or (saver is not None and not isinstance(saver, KerasSaver)):
            return (
                "a CheckpointSaverHook given its own saver= or scaffold=. A TF1 Saver saves "
                "graph variables, and the Keras model's weights are not in a graph. Leave "
                "both out: HookCallback gives the hook a saver of the Keras model and "
                "optimizer, as a Scaffold gave it one of the graph."
            )
    return None
