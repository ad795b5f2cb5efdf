"""`restore_tf1_checkpoint`: a TF1 name-based checkpoint (an Estimator's `model_dir`) into a Keras model.

The model's variables, its optimizer's state and the global step are read by their TF1 names
(`_model.saved_variables`); where the optimizer's names differ (a TF1 optimizer built under its own
variable scope, another optimizer's slot names), a map is proposed, once, as code. What could not
be restored, and the hyperparameters that make Keras's optimizer differ from TF1's, are said.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from hooks2callbacks._keras_state import (
    accumulation_steps,
    lent_optimizer,
    optimizer_of,
    step_source,
    write_variable,
)
from hooks2callbacks._model import GLOBAL_STEP, LEARNING_RATE, Saved, saved_variables
from hooks2callbacks._seams import context
from hooks2callbacks._tf1_names import optimizer_variables, tf1_name

_KEYS = tf.compat.v1.GraphKeys


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
        return restore_tf1_into(model, path, assignment_map)


def restore_tf1_into(model: Any, path: str, assignment_map: Mapping[str, str] | None) -> TF1Restore:
    where = f"restore_tf1_checkpoint(model, {path!r})"
    prefix = checkpoint_prefix(path, where, "an Estimator's model_dir (or a TF1 Saver's directory)")
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
    build_model(model, where)
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
        source = source_name(variable.name, mapping)
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
    powers = {power: source_name(power, mapping) for power in ("beta1_power", "beta2_power")}
    used |= {source for source in powers.values() if source in shapes and is_adam(model)}
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
            mine.setdefault((source_name(variable, mapping), _dims(shape_of[name])), {})[kind] = name
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
    if proposed and is_adam(model):
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


def checkpoint_prefix(path: str, where: str, directory: str) -> str:
    prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
    if prefix is None or not tf.io.gfile.exists(prefix + ".index"):
        raise FileNotFoundError(
            f"{where}: no checkpoint there. Pass {directory}, or a prefix such as 'dir/model.ckpt-100'."
        )
    return prefix


def build_model(model: Any, where: str) -> None:
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


def source_name(name: str, mapping: Mapping[str, str]) -> str:
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


def is_adam(model: Any) -> bool:
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
    if not is_adam(model) or not any(n.endswith("/Adam") or n == "beta1_power" for n in shapes):
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
    if not is_adam(model) or step is None:
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
