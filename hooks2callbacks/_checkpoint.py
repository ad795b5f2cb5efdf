"""Checkpoints: what `CheckpointSaverHook` writes, and reading them (and TF1's) back.

* `CheckpointSaverHook` finds its saver in the graph's `SAVERS` collection, as
  under a TF1 `Scaffold`. The adapter puts a `KerasSaver` there: the hook's own
  code runs (schedule, listeners, event-file records) and its `saver.save`
  writes an object-based checkpoint of the Keras model and optimizer, under the
  TF1 name `model.ckpt-<global step>`. `restore_checkpoint` reads one back.
* The same file also holds every variable a TF1 `Saver` of the training graph
  saved, under its TF1 name (`_model.saved_variables`: `dense/kernel`,
  `dense/kernel/Adam`, `learning_rate`), `global_step`, and Adam's
  `beta1_power`/`beta2_power`, so TF1 tools that read checkpoints by name
  (`tf.train.load_variable(path, "global_step")`, `init_from_checkpoint`, a
  TF1 `Saver`) read it too.
* `restore_tf1_checkpoint` (`_tf1_restore`) reads those names back from any name-based
  checkpoint (an Estimator's `model_dir`): the model, its optimizer's state and
  the global step, so a Keras `fit` continues a TF1 run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from hooks2callbacks._keras_state import (
    global_step_of,
    has_weights,
    lent_optimizer,
    optimizer_of,
)
from hooks2callbacks._model import GLOBAL_STEP, outside_strategy, saved_variables
from hooks2callbacks._seams import context, ops
from hooks2callbacks._tf1_restore import build_model, checkpoint_prefix, is_adam, restore_tf1_into, source_name

_KEYS = tf.compat.v1.GraphKeys

# What a TF1 Scaffold's default saver keeps.
MAX_TO_KEEP = 5


class KerasSaver:
    """What `CheckpointSaverHook` gets as its saver: saves the Keras model's state.

    It has the part of `tf.compat.v1.train.Saver` that the hook uses: `save`
    and `saver_def`.

    Args:
        model: The Keras model whose weights (and optimizer state) are saved.
        max_to_keep: The newest checkpoints kept; None keeps all.
        assignment_map: The map a TF1 checkpoint was restored with
            (`restore_tf1_checkpoint`'s): each variable it names is written under
            its checkpoint name (`dense/kernel/adam_m` rather than Keras's
            `dense/kernel/Adam`), so the same map, and the TF1 job's own code,
            read the checkpoint back.
    """

    saver_def = None  # There is no graph saver to describe in a MetaGraphDef.

    def __init__(
        self, model: Any, max_to_keep: int | None = MAX_TO_KEEP, assignment_map: Mapping[str, str] | None = None
    ) -> None:
        self._model = model
        self._max_to_keep = max_to_keep
        self._assignment_map = dict(assignment_map or {})
        self._managers: dict[str, tf.train.CheckpointManager] = {}
        self._kept: dict[str, list[str]] = {}  # name-based saves (JAX, PyTorch): the prefixes kept

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
            try:
                if not trackable(self._model):
                    return self._save_by_name(save_path, number)
                manager = self._manager(save_path)
                prefix = manager.save(checkpoint_number=number, check_interval=False)
                _add_tf1_names(prefix, self._tf1_values(number))
                return prefix
            except (tf.errors.OpError, OSError) as error:
                raise OSError(
                    f"Could not write the checkpoint {save_path}-{number} of the Keras model: "
                    f"{error}. Check that {os.path.dirname(save_path) or '.'} is writable and "
                    "has free space."
                ) from error

    def _tf1_values(self, step: int | None) -> dict[str, Any]:
        """What a TF1 `Saver` of the training graph saved, by TF1 name: its global variables."""
        model = self._model
        step = global_step_of(model) if step is None else step
        values: dict[str, Any] = {GLOBAL_STEP: np.int64(step)}
        saved = saved_variables(model)[0]
        names = [variable.name for variable in saved]
        if self._assignment_map:
            names = _written_names(names, self._assignment_map)
        values.update((name, variable.read()) for name, variable in zip(names, saved, strict=True))
        optimizer = optimizer_of(model)
        if is_adam(model):
            # TF1's Adam kept beta ** (steps + 1) in variables; Keras computes it from the step.
            for index in (1, 2):
                beta = getattr(optimizer, f"beta_{index}", None)
                if isinstance(beta, float):
                    name = source_name(f"beta{index}_power", self._assignment_map)
                    values[name] = np.float32(beta ** (step + 1))
        return values

    def _save_by_name(self, save_path: str, number: int | None) -> str:
        """Writes the TF1 names alone, as a TF1 `Saver` did: a JAX or PyTorch model is no TF trackable.

        The newest `max_to_keep` are kept and named in the directory's `checkpoint`
        file, as by `tf.train.CheckpointManager` (and a Scaffold's saver).
        """
        step = global_step_of(self._model) if number is None else number
        prefix = f"{save_path}-{step}"
        values = self._tf1_values(step)
        names = sorted(values)
        tf.raw_ops.SaveV2(
            prefix=prefix,
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            tensors=[tf.constant(np.asarray(values[name])) for name in names],
        )
        directory = os.path.dirname(save_path) or "."
        kept = self._kept.get(save_path)
        if kept is None:  # the directory's earlier checkpoints of this name count, as a manager's
            state = tf.train.get_checkpoint_state(directory)
            earlier = list(state.all_model_checkpoint_paths) if state is not None else []
            mine = os.path.abspath(save_path) + "-"
            kept = self._kept[save_path] = [p for p in earlier if os.path.abspath(p).startswith(mine)]
        if prefix in kept:
            kept.remove(prefix)
        kept.append(prefix)
        while self._max_to_keep is not None and len(kept) > self._max_to_keep:
            for path in tf.io.gfile.glob(kept.pop(0) + ".*"):
                tf.io.gfile.remove(path)
        _write_state(directory, prefix, kept)
        return prefix

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


def _write_state(directory: str, latest: str, kept: list[str]) -> None:
    """Writes the directory's `checkpoint` file (a text `CheckpointState`), which `latest_checkpoint` reads.

    As `tf.train.CheckpointManager` writes it, paths relative to the directory;
    by hand, since TF's public writer (`update_checkpoint_state`) logs a deprecation.
    """

    def quoted(path: str) -> str:
        relative = os.path.relpath(path, directory)
        return '"' + relative.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"model_checkpoint_path: {quoted(latest)}"]
    lines += [f"all_model_checkpoint_paths: {quoted(path)}" for path in kept]
    state = os.path.join(directory, "checkpoint")
    tf.io.write_file(state + ".tmp", "\n".join(lines) + "\n")
    tf.io.gfile.rename(state + ".tmp", state, overwrite=True)


def trackable(model: Any) -> bool:
    """Whether `model` is a TF trackable (Keras 3 on TensorFlow, tf_keras), which object-based checkpoints save.

    A Keras 3 model on JAX or PyTorch is not: its checkpoints are name-based (TF1's names alone).
    """
    return isinstance(model, tf.__internal__.tracking.Trackable)


def _checkpoint(model: Any) -> tf.train.Checkpoint:
    optimizer = optimizer_of(model)
    if optimizer is None:
        return tf.train.Checkpoint(model=model)
    return tf.train.Checkpoint(model=model, optimizer=optimizer)


def _add_tf1_names(prefix: str, values: dict[str, Any]) -> None:
    """Rewrites the checkpoint at `prefix` with `values` added under their own names.

    The object-based keys stay as they are, so `tf.train.Checkpoint` (and
    `restore_checkpoint`) reads the file as before. The new file is written
    beside the old one and then moved over it, index last.
    """
    reader = tf.train.load_checkpoint(prefix)
    keys = sorted(reader.get_variable_to_dtype_map())
    tensors = [reader.get_tensor(key) for key in keys]
    added = [name for name in values if name not in set(keys)]
    staging = prefix + ".tf1-names"
    tf.raw_ops.SaveV2(
        prefix=staging,
        tensor_names=keys + added,
        shape_and_slices=[""] * (len(keys) + len(added)),
        tensors=[tf.constant(t) for t in tensors] + [tf.constant(values[name]) for name in added],
    )
    stale = set(tf.io.gfile.glob(prefix + ".data-*"))
    for path in tf.io.gfile.glob(staging + ".data-*"):
        target = prefix + path[len(staging) :]
        tf.io.gfile.rename(path, target, overwrite=True)
        stale.discard(target)
    for path in stale:
        tf.io.gfile.remove(path)
    tf.io.gfile.rename(staging + ".index", prefix + ".index", overwrite=True)


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


def _written_names(names: list[str], mapping: Mapping[str, str]) -> list[str]:
    """The names a checkpoint holds `names` (the model's TF1 names) under: through `mapping`, their
    checkpoint names (`source_name`), unless another variable already holds that name there."""
    written = [source_name(name, mapping) for name in names]
    taken: set[str] = set()
    for index, (name, mapped) in enumerate(zip(names, written, strict=True)):
        if mapped != name and (mapped in taken or mapped in names):
            written[index] = name  # two variables under one name: the later keeps its own
        taken.add(written[index])
    return written


def install_saver(
    graph: tf.Graph, model: Any, max_to_keep: int | None = MAX_TO_KEEP, assignment_map: Mapping[str, str] | None = None
) -> None:
    """Puts a `KerasSaver` for `model` in `graph`'s `SAVERS` collection, keeping the newest `max_to_keep`
    and writing the variables `assignment_map` names under their checkpoint names."""
    graph.add_to_collection(tf.compat.v1.GraphKeys.SAVERS, KerasSaver(model, max_to_keep, assignment_map))


def restore_checkpoint(model: Any, path: str, optimizer: Any = None) -> str:
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
        optimizer: The optimizer that trains the model in your own training
            loop (as passed to `HookCallback(optimizer=...)`), to restore its
            state and step into; defaults to `model.optimizer`.

    On JAX and PyTorch, where a Keras model is no TF trackable, the checkpoint
    holds the TF1 names alone, and is read back by name (as
    `restore_tf1_checkpoint` reads it).

    Returns:
        The path prefix of the checkpoint restored.

    Raises:
        FileNotFoundError: `path` holds no checkpoint.
        ValueError: `path` is a name-based TF1 checkpoint (a `Saver`'s or an
            Estimator's), `model` is not built, or its variables do not match
            the checkpoint's.
    """
    with lent_optimizer(model, optimizer):
        return _restore_checkpoint(model, path)


def _restore_checkpoint(model: Any, path: str) -> str:
    where = f"restore_checkpoint(model, {path!r})"
    prefix = checkpoint_prefix(path, where, "the directory a CheckpointSaverHook wrote to")
    names = {name for name, _ in tf.train.list_variables(prefix)}
    if "_CHECKPOINTABLE_OBJECT_GRAPH" not in names and not trackable(model):
        # JAX or PyTorch: CheckpointSaverHook wrote the TF1 names alone, which are read back by name.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # what differs from a TF1 run is not this run's concern
            restore_tf1_into(model, prefix, None)
        return prefix
    if "_CHECKPOINTABLE_OBJECT_GRAPH" not in names:
        shown = sorted(names)[:5]
        raise ValueError(
            f"restore_checkpoint(model, {prefix!r}): this is a name-based TF1 checkpoint (a "
            f"tf.compat.v1.train.Saver's or an Estimator's: variables {shown}"
            f"{' ...' if len(names) > 5 else ''}), not one CheckpointSaverHook wrote through "
            "HookCallback. Restore it by name, optimizer state and global step included, with "
            "hooks2callbacks.restore_tf1_checkpoint(model, path) (an assignment_map where the "
            "scopes differ), or warm-start some variables with init_from_checkpoint in a hook."
        )
    build_model(model, where)
    with context.eager_mode():
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
