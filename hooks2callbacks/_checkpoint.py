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
* `restore_tf1_checkpoint` reads those names back from any name-based
  checkpoint (an Estimator's `model_dir`): the model, its optimizer's state and
  the global step, so a Keras `fit` continues a TF1 run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from hooks2callbacks._keras_state import (
    accumulation_steps,
    global_step_of,
    has_weights,
    lent_optimizer,
    optimizer_of,
    step_source,
    write_variable,
)
from hooks2callbacks._model import GLOBAL_STEP, LEARNING_RATE, Saved, outside_strategy, saved_variables
from hooks2callbacks._seams import context, ops
from hooks2callbacks._tf1_names import optimizer_variables, tf1_name

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
        if _is_adam(model):
            # TF1's Adam kept beta ** (steps + 1) in variables; Keras computes it from the step.
            for index in (1, 2):
                beta = getattr(optimizer, f"beta_{index}", None)
                if isinstance(beta, float):
                    name = _source_name(f"beta{index}_power", self._assignment_map)
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
    checkpoint names (`_source_name`), unless another variable already holds that name there."""
    written = [_source_name(name, mapping) for name in names]
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
    prefix = _checkpoint_prefix(path, where, "the directory a CheckpointSaverHook wrote to")
    names = {name for name, _ in tf.train.list_variables(prefix)}
    if "_CHECKPOINTABLE_OBJECT_GRAPH" not in names and not trackable(model):
        # JAX or PyTorch: CheckpointSaverHook wrote the TF1 names alone, which are read back by name.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # what differs from a TF1 run is not this run's concern
            _restore_tf1_checkpoint(model, prefix, None)
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
    _build(model, where)
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


@dataclasses.dataclass(frozen=True)
class TF1Restore:
    """What `restore_tf1_checkpoint` restored; `print()` it for a report.

    Attributes:
        path: The checkpoint's path prefix.
        restored: For each variable restored, its TF1 name in the model (the
            mirror's, such as `dense/kernel/Adam`) and the checkpoint name it
            was read from.
        not_restored: The TF1 names of the optimizer's variables the checkpoint
            lacks: they keep their values.
        unused: The checkpoint's names that nothing was restored from.
        global_step: The step restored into `optimizer.iterations`, or None.
        notes: What makes the continued run differ from TF1's, if anything
            (each warned of, except a learning rate not in the checkpoint and
            an Adam epsilon other than TF1's 1e-8).
        proposed_map: For optimizer variables not restored, checkpoint names
            of the same variable and shape that nothing was restored from,
            paired by slot kind, else in name order (`{"dense/kernel/adam_m":
            "dense/kernel/Adam", ...}`): an `assignment_map` to check and
            pass, when they are the same slots under a custom optimizer's names.
    """

    path: str
    restored: dict[str, str]
    not_restored: list[str]
    unused: list[str]
    global_step: int | None
    notes: list[str]
    proposed_map: dict[str, str] = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"Restored {len(self.restored)} variables from {self.path}"]
        if self.global_step is not None:
            lines[0] += f", and the global step {self.global_step} into optimizer.iterations"
        lines += [f"  {mine} <- {theirs}" for mine, theirs in self.restored.items()]
        if self.not_restored:
            lines.append(f"Not in the checkpoint, left as they were: {', '.join(self.not_restored)}")
        if self.unused:
            lines.append(f"In the checkpoint, restored into nothing: {', '.join(self.unused)}")
        lines += [f"Note: {note}" for note in self.notes]
        if self.proposed_map:
            lines.append(f"Proposed assignment_map (check it): {self.proposed_map!r}")
        return "\n".join(lines)


def restore_tf1_checkpoint(
    model: Any, path: str, assignment_map: Mapping[str, str] | None = None, optimizer: Any = None
) -> TF1Restore:
    """Continues an Estimator's run: restores a name-based TF1 checkpoint into the model and its optimizer.

    Example: `print(restore_tf1_checkpoint(model, estimator_model_dir))`, then
    `model.fit(...)` continues the run: the weights, the optimizer's state and
    the global step are the checkpoint's.

    Each of the model's and optimizer's variables is read by its TF1 name, the
    one hooks see in the graph (`dense/kernel`; the naming rule of the model
    graph page): weights by their names; Adam's `<variable>/Adam` and
    `<variable>/Adam_1` into its momentum and velocity, Adagrad's
    `<variable>/Adagrad`, RMSProp's `<variable>/RMSProp`, `_1`, `_2`, and
    Momentum's `<variable>/Momentum` (converted: Keras's SGD keeps
    -learning_rate times it, at the rate of the checkpoint's last step, a
    schedule's too); a `learning_rate` variable; `global_step` into
    `optimizer.iterations`. Compile the model with the TF1 optimizer's
    hyperparameters (TF1's Adam had `epsilon=1e-8`, Keras's has 1e-7; the
    report's notes say so when they differ).

    What the checkpoint holds that the model does not take is warned of
    (`warnings.warn`, naming the variables and the fix): the global step into
    a model with no optimizer, the slots of another optimizer; so is the
    optimizer state the checkpoint lacks.

    Args:
        model: A built, compiled Keras model of the architecture that was saved.
        path: An Estimator `model_dir` (its newest checkpoint is used) or a
            checkpoint path prefix such as `model_dir/model.ckpt-100`.
        assignment_map: Where the scopes differ, as in
            `init_from_checkpoint`: checkpoint names (or scopes, ending in `/`)
            to the model's TF1 names (or scopes), such as
            `{"mlp/": "dense/"}` or `{"mlp/hidden/kernel": "dense/kernel"}`.
        optimizer: The optimizer that trains the model in your own training
            loop (as passed to `HookCallback(optimizer=...)`), to restore its
            state and step into; defaults to `model.optimizer`.

    Returns:
        What was restored, and what was not.

    Raises:
        FileNotFoundError: `path` holds no checkpoint.
        ValueError: The model is not built; a weight of the model is not in
            the checkpoint, or has another shape there (nothing is restored
            then); `assignment_map` is not a dict of str.
    """
    with lent_optimizer(model, optimizer):
        return _restore_tf1_checkpoint(model, path, assignment_map)


def _restore_tf1_checkpoint(model: Any, path: str, assignment_map: Mapping[str, str] | None) -> TF1Restore:
    where = f"restore_tf1_checkpoint(model, {path!r})"
    prefix = _checkpoint_prefix(path, where, "an Estimator's model_dir (or a TF1 Saver's directory)")
    return _restore_tf1(model, tf.train.load_checkpoint(prefix), prefix, assignment_map, where)


class _Values:
    """TF1 variables' values held in memory, read as `tf.train.load_checkpoint`'s reader reads a checkpoint."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = values

    def get_variable_to_shape_map(self) -> dict[str, list[int]]:
        return {name: list(np.shape(value)) for name, value in self._values.items()}

    def get_tensor(self, name: str) -> Any:
        return self._values[name]


def restore_tf1_values(
    model: Any, values: Mapping[str, Any], assignment_map: Mapping[str, str] | None, label: str
) -> TF1Restore:
    """`restore_tf1_checkpoint` from values in memory (`{TF1 name: value}`, as a TF1 `Saver` saved them).

    What the per-step comparison of `check_migration` restores TF1's state of each
    step with: the same names, conversions and map, without writing and reading a
    checkpoint per step. `label` stands for the checkpoint's path in the report.
    """
    where = f"restore_tf1_checkpoint(model, {label!r})"
    return _restore_tf1(model, _Values(values), label, assignment_map, where)


def _restore_tf1(
    model: Any, reader: Any, prefix: str, assignment_map: Mapping[str, str] | None, where: str
) -> TF1Restore:
    """The restore itself, from a reader of TF1 names (a checkpoint's, or `_Values`)."""
    mapping = check_assignment_map(assignment_map, where)
    _build(model, where)
    shapes = reader.get_variable_to_shape_map()
    # SGD's momentum is converted at the rate of the checkpoint's last step (a schedule's too).
    at = int(reader.get_tensor(GLOBAL_STEP)) if GLOBAL_STEP in shapes else None
    saved, differs = saved_variables(model, at)  # what makes the run differ from TF1's: warned
    notes: list[str] = []
    plan: list[tuple[Saved, str]] = []
    missing: list[str] = []
    not_restored: list[str] = []
    shape_of: dict[str, tuple[int | None, ...]] = {}  # of what was not restored
    for variable in saved:
        source = _source_name(variable.name, mapping)
        if source in shapes and _dims(shapes[source]) == _dims(variable.entry.shape):
            plan.append((variable, source))
        elif source in shapes:
            raise ValueError(
                f"{where}: {variable.name!r} has shape {variable.entry.shape} in the model, and "
                f"{source!r} has {tuple(shapes[source])} in the checkpoint. Restore into a model of "
                "the architecture that was saved, or map the name elsewhere with assignment_map."
            )
        elif _KEYS.MODEL_VARIABLES in variable.entry.collections:
            missing.append(variable.name if source == variable.name else f"{variable.name} (as {source})")
        elif variable.name == LEARNING_RATE:
            notes.append(
                "learning_rate is not in the checkpoint (the TF1 graph's rate was a constant or computed), "
                "so the compiled rate stays: compile with the TF1 run's rate"
            )
        else:
            not_restored.append(variable.name)
            shape_of[variable.name] = _dims(variable.entry.shape)
    if missing:
        shown = sorted(n for n in shapes if not n.startswith("_"))
        raise ValueError(
            f"{where}: the checkpoint has no variable for the model's {missing}, so nothing was "
            f"restored. Its variables: {shown[:12]}{' ...' if len(shown) > 12 else ''}. Name the "
            "layers as the TF1 scopes were (keras.layers.Dense(..., name='dense')), or pass "
            "assignment_map={'checkpoint_scope/': 'model_scope/'}. For a warm start of some "
            "variables only, call tf.compat.v1.train.init_from_checkpoint in a hook's begin()."
        )
    with context.eager_mode():
        for variable, source in plan:
            variable.write(reader.get_tensor(source))
        step = _restore_step(model, reader, shapes)
    used = {source for _, source in plan} | ({GLOBAL_STEP} if step is not None else set())
    powers = {power: _source_name(power, mapping) for power in ("beta1_power", "beta2_power")}
    used |= {source for source in powers.values() if source in shapes and _is_adam(model)}
    unused = sorted(n for n in shapes if n not in used and not n.startswith("_") and ".ATTRIBUTES" not in n)
    differs += _adam_notes(model, reader, shapes, step, powers)
    differs += _state_left_behind(model, reader, unused, {source for _, source in plan})
    # tf_keras's SGD keeps momentum slots at momentum 0 too, where TF1's GradientDescentOptimizer
    # kept none: unused, they leave nothing of TF1's state behind.
    left_behind = [n for n in not_restored if not _unused_momentum(model, n)]
    proposed = _propose_map(model, left_behind, shape_of, unused, shapes, mapping)
    if left_behind:
        note = (
            "the optimizer's variables not in the checkpoint keep their values, so the run does not "
            f"continue the TF1 optimizer's state (a different optimizer, or other slot names): {left_behind}"
        )
        if proposed:
            first = dict(list(proposed.items())[:2])
            note += (
                f". The checkpoint holds {len(proposed)} variables of the same variables and shapes that "
                "nothing was restored from, perhaps those slots under another scope or a custom optimizer's "
                "names: if so, pass assignment_map= (restore_tf1_checkpoint, or estimator_hooks) with them, such as "
                f"{str(first)[:-1]}{', ...' if len(proposed) > 2 else ''}}} (the report's proposed_map holds "
                "all of them)"
            )
        else:
            note += ". Where the checkpoint names them otherwise, pass assignment_map= from its names to these"
        differs.append(note)
    for note in differs:
        warnings.warn(f"{where}: {note}", UserWarning, stacklevel=4)
    notes = differs + notes + _epsilon_notes(model, shapes)
    restored = {variable.name: source for variable, source in plan}
    return TF1Restore(prefix, restored, not_restored, unused, step, notes, proposed)


def _unused_momentum(model: Any, name: str) -> bool:
    """Whether `name` is a momentum slot of an SGD at momentum 0, which no step reads."""
    optimizer = optimizer_of(model)
    momentum = getattr(optimizer, "momentum", None)
    return (
        type(optimizer).__name__ == "SGD"
        and name.endswith("/Momentum")
        and isinstance(momentum, (int, float))
        and momentum == 0
    )


def _propose_map(
    model: Any,
    not_restored: list[str],
    shape_of: Mapping[str, tuple[int | None, ...]],
    unused: list[str],
    shapes: Mapping[str, Any],
    mapping: Mapping[str, str],
) -> dict[str, str]:
    """Checkpoint names that may hold the optimizer variables not restored: an `assignment_map` to propose.

    Each slot not restored is found beside its variable: by its TF1 name
    (`dense/kernel/Adam`) or, for a custom Keras optimizer, by the name Keras gave it
    (`<variable path with _ for />_<kind>`, such as `..._adam_m`). It pairs with an
    unused checkpoint name beside the same variable's (`dense/kernel/adam_m`) of its
    shape: first by slot kind (`adam_m` with `..._adam_m`; `m` with `Adam`, `v` with
    `Adam_1`), then the rest in name order, where both sides count the same.
    """
    owners = _slot_owners(model)
    mine: dict[tuple[str, tuple[int | None, ...]], dict[str, str]] = {}  # {(variable, shape): {kind: name}}
    for name in not_restored:
        owner = owners.get(name)
        if owner is None and "/" in name:
            owner = (name.rsplit("/", 1)[0], name.rsplit("/", 1)[1])
        if owner is not None:
            variable, kind = owner
            mine.setdefault((_source_name(variable, mapping), _dims(shape_of[name])), {})[kind] = name
    variables = {variable for variable, _ in mine}
    theirs: dict[tuple[str, tuple[int | None, ...]], list[str]] = {}
    scoped: dict[str, str] = {}  # candidates found under another scope, and that scope: paired by kind only
    for name in unused:
        if "/" not in name:
            continue
        parent = name.rsplit("/", 1)[0]
        # A TF1 optimizer built under a variable scope put its slots under it too:
        # `<scope>/<variable>/Adam`. The longest variable the name ends with owns it.
        holder = max((v for v in variables if parent == v or parent.endswith(f"/{v}")), key=len, default=parent)
        theirs.setdefault((holder, _dims(shapes[name])), []).append(name)
        if holder != parent:
            scoped[name] = parent[: -len(holder)]
    proposed: dict[str, str] = {}
    for key, kinds in mine.items():
        candidates = sorted(theirs.get(key, []))
        for candidate in list(candidates):
            match = next((k for k in sorted(kinds) if _same_kind(k, candidate.rsplit("/", 1)[1])), None)
            if match is not None:
                proposed[candidate] = kinds.pop(match)
                candidates.remove(candidate)
        # Name order is a guess only beside the variable itself: a scoped name of another kind may be
        # anything of that variable's shape.
        candidates = [c for c in candidates if c not in scoped]
        if kinds and len(candidates) == len(kinds):
            proposed.update(zip(candidates, sorted(kinds.values()), strict=True))
    if proposed and _is_adam(model):
        # TF1's Adam kept its bias corrections in `<scope>/beta1_power`, `<scope>/beta2_power`,
        # beside the slots' scope: read (as a check of the step) under that name.
        scopes = {scoped[c] for c in proposed if c in scoped}
        for power in ("beta1_power", "beta2_power"):
            found = [f"{scope}{power}" for scope in scopes if f"{scope}{power}" in shapes]
            if power not in shapes and len(found) == 1 and found[0] in unused:
                proposed[found[0]] = power
    return proposed


def _dims(shape: Any) -> tuple[int | None, ...]:
    """A shape as a tuple of ints (None where unknown), hashable under TF1 shapes too.

    Under `tf.compat.v1.disable_v2_tensorshape()` a `TensorShape`'s items are
    `Dimension`s, which are not hashable; a checkpoint reader's shapes are lists of ints.
    """
    values = (getattr(d, "value", d) for d in shape)
    return tuple(None if v is None else int(v) for v in values)


def _slot_owners(model: Any) -> dict[str, tuple[str, str]]:
    """`{slot's TF1 name: (its variable's TF1 name, the slot's kind)}` for slots that kept Keras's names.

    Keras 3 names a variable's slot `<the variable's path with _ for />_<kind>`; the
    slots TF1 names were given (`dense/kernel/Adam`) are found by those names instead.
    """
    optimizer = optimizer_of(model)
    if optimizer is None:
        return {}
    prefix = f"{getattr(model, 'name', '')}/"
    bases = {
        f"{path.replace('/', '_')}_": tf1_name(weight, prefix)
        for weight in model.trainable_weights
        if isinstance(path := getattr(weight, "path", None), str)
    }
    owners: dict[str, tuple[str, str]] = {}
    for slot in optimizer_variables(optimizer):
        name = str(slot.name)
        # The longest base: a variable whose path starts another's (dense, dense_1) is not its owner.
        base = max((b for b in bases if name.startswith(b)), key=len, default=None)
        if base is not None:
            owners[tf1_name(slot, prefix)] = (bases[base], name[len(base) :])
    return owners


# A TF1 slot suffix and the Keras kind that holds the same moment.
_KIND_ALIASES = {"adam": "m", "adamm": "m", "adam1": "v", "adamv": "v", "momentum": "m", "velocity": "v"}


def _same_kind(kind: str, suffix: str) -> bool:
    """Whether a slot of `kind` (`adam_m`, `Adam`, `momentum`) is the checkpoint's `suffix` (`adam_m`)."""

    def plain(name: str) -> str:
        name = name.lower().replace("_", "")
        return _KIND_ALIASES.get(name, name)

    return plain(kind) == plain(suffix)


def _checkpoint_prefix(path: str, where: str, directory: str) -> str:
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None or not tf.io.gfile.exists(prefix + ".index"):
        raise FileNotFoundError(
            f"{where}: no checkpoint there. Pass {directory}, or a prefix such as 'dir/model.ckpt-100'."
        )
    return prefix


def _build(model: Any, where: str) -> None:
    """Makes the optimizer's slots, which must exist to be restored into."""
    if not getattr(model, "built", True):
        raise ValueError(
            f"{where}: the model is not built, so it has no variables to restore into. Build it "
            "first: give it a keras.Input, or call it on one batch."
        )
    optimizer = optimizer_of(model)
    # Keras 3: `built`; tf_keras: `_built`, set by its first build.
    built = getattr(optimizer, "built", getattr(optimizer, "_built", False))
    if optimizer is not None and not built and callable(getattr(optimizer, "build", None)):
        with context.eager_mode():
            optimizer.build(model.trainable_variables)


def check_assignment_map(assignment_map: Any, where: str) -> dict[str, str]:
    """`assignment_map` as a dict (empty for None).

    Raises:
        ValueError: It is not a mapping of str to str (`where` names the caller).
    """
    if assignment_map is None:
        return {}
    if not isinstance(assignment_map, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in assignment_map.items()
    ):
        raise ValueError(
            f"{where}: assignment_map must be a dict from checkpoint names (or scopes ending in '/') "
            f"to the model's TF1 names (or scopes), such as {{'mlp/': 'dense/'}}; got {assignment_map!r}."
        )
    return dict(assignment_map)


def _source_name(name: str, mapping: Mapping[str, str]) -> str:
    """The checkpoint name of the model's TF1 `name`, through an `init_from_checkpoint`-style map.

    A key and value ending in `/` map scopes; `"/"` (or `""`) is the root scope.
    """
    for theirs, mine in mapping.items():
        if mine == name:
            return theirs  # a name's own entry before any scope's: a proposed slot map beside scope maps
    best: tuple[str, str] | None = None
    for theirs, mine in mapping.items():
        scope = "" if mine == "/" else mine
        holds = (scope == "" or scope.endswith("/")) and name.startswith(scope)
        if holds and (best is None or len(scope) > len(best[1])):
            best = (theirs, scope)  # the innermost scope that holds the name
    if best is not None:
        return ("" if best[0] == "/" else best[0]) + name[len(best[1]) :]
    return name


def _restore_step(model: Any, reader: Any, shapes: Mapping[str, Any]) -> int | None:
    optimizer = optimizer_of(model)
    if optimizer is None or GLOBAL_STEP not in shapes:
        return None
    step = int(reader.get_tensor(GLOBAL_STEP))
    write_variable(step_source(optimizer), step * accumulation_steps(optimizer), model)
    return step


def _is_adam(model: Any) -> bool:
    return type(optimizer_of(model)).__name__ == "Adam"


# The slots each TF1 optimizer kept beside a variable, by the suffix of their names.
_TF1_SLOTS = (
    "Adam",
    "Adam_1",
    "Momentum",
    "Adagrad",
    "RMSProp",
    "RMSProp_1",
    "Ftrl",
    "Ftrl_1",
    "Adadelta",
    "Adadelta_1",
)
# Adam's TF1 epsilon: `tf.compat.v1.train.AdamOptimizer`'s default; Keras's Adam defaults to 1e-7.
_TF1_ADAM_EPSILON = 1e-8


def _state_left_behind(model: Any, reader: Any, unused: list[str], weights: set[str]) -> list[str]:
    """What the checkpoint holds of the TF1 run's state that nothing in the model took, with the fix.

    That is the global step when the model has no optimizer, and the slots (and
    Adam's `beta1_power`/`beta2_power`) of the restored weights that the model's
    optimizer does not keep: the run then starts that state afresh, quietly,
    where TF1 continued it.
    """
    optimizer = optimizer_of(model)
    kind = type(optimizer).__name__
    # SGD's own momentum slots, left out for a scheduled rate, are warned of by saved_variables.
    momentum = getattr(optimizer, "momentum", None)
    own = ("Momentum",) if kind == "SGD" and momentum else ()
    slots = [
        name
        for name in unused
        if "/" in name
        and name.rsplit("/", 1)[0] in weights
        and name.rsplit("/", 1)[1] in _TF1_SLOTS
        and name.rsplit("/", 1)[1] not in own
    ]
    slots += [name for name in unused if name in ("beta1_power", "beta2_power")]
    notes = []
    if optimizer is None:
        if GLOBAL_STEP in unused:
            step = int(reader.get_tensor(GLOBAL_STEP))
            notes.append(
                f"the checkpoint's {GLOBAL_STEP} ({step}) was not restored: the model is not compiled, so it "
                "has no optimizer.iterations to hold it, and fit() would start again at step 0. Compile the "
                "model with the TF1 run's optimizer before restore_tf1_checkpoint"
            )
        if slots:
            notes.append(
                f"the checkpoint's optimizer state {slots} was not restored: the model is not compiled. "
                "Compile it with the TF1 run's optimizer (AdamOptimizer: keras.optimizers.Adam(epsilon=1e-8)) "
                "before restore_tf1_checkpoint to continue that state"
            )
    elif slots:
        notes.append(
            f"the checkpoint's {slots} are the state of another optimizer than the model's {kind}, and "
            f"were not restored: {kind} starts its own state afresh, so the run does not continue TF1's. "
            "Compile the model with the TF1 run's optimizer (AdamOptimizer: keras.optimizers.Adam("
            "epsilon=1e-8); MomentumOptimizer: keras.optimizers.SGD(momentum=...)) to continue it"
        )
    return notes


def _epsilon_notes(model: Any, shapes: Mapping[str, Any]) -> list[str]:
    """TF1's `AdamOptimizer` epsilon is 1e-8 and Keras's 1e-7: alone, that moves each step by ~1e-5."""
    if not _is_adam(model) or not any(n.endswith("/Adam") or n == "beta1_power" for n in shapes):
        return []
    epsilon = getattr(optimizer_of(model), "epsilon", None)
    if isinstance(epsilon, float) and np.isclose(epsilon, _TF1_ADAM_EPSILON, rtol=1e-6, atol=0):
        return []
    return [
        f"the model's Adam has epsilon={epsilon}, and TF1's AdamOptimizer defaulted to 1e-8: unless the TF1 "
        "run set its own, each step differs (~1e-5 a step at rate 0.1). Compile "
        "keras.optimizers.Adam(epsilon=1e-8) to continue it exactly"
    ]


def _adam_notes(
    model: Any, reader: Any, shapes: Mapping[str, Any], step: int | None, powers: Mapping[str, str]
) -> list[str]:
    """Where TF1's Adam bias correction (`beta1_power`) disagrees with Keras's, computed from the step.

    `powers` gives the checkpoint name of each (`optimizer/beta1_power` under a scope).
    """
    if not _is_adam(model) or step is None:
        return []
    notes = []
    for index in (1, 2):
        name, beta = powers[f"beta{index}_power"], getattr(optimizer_of(model), f"beta_{index}", None)
        if name in shapes and isinstance(beta, float):
            kept, computed = float(reader.get_tensor(name)), beta ** (step + 1)
            if not np.isclose(kept, computed, rtol=1e-5):
                notes.append(
                    f"the checkpoint's {name} is {kept:.6g}, where Keras's Adam computes "
                    f"beta_{index} ** (step + 1) = {computed:.6g} from the global step {step}: the "
                    "TF1 graph stepped Adam and the global step apart, so the bias correction differs"
                )
    return notes
