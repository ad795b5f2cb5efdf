"""`check_migration`: a job's hooks under its TF1 `model_fn` and under its Keras model, compared.

The check runs the same hooks twice, each time from the same weights over the
same batches, and records what each hook saw and did:

    same start:
        TF1 graph = model_fn(features, labels, mode, params), features and
            labels from the batches (a one-shot iterator, as an input_fn's)
        its initial variables -> a checkpoint -> restore_tf1_checkpoint(keras_model,
            assignment_map=...)          # a name that cannot be matched: an error, now
    TF1 side (in a directory of its own, made the working directory):
        hooks = factory()                # inside the TF1 graph, each wrapped in a recorder
        MonitoredSession(hooks): run train_op (train), the loss and the
            eval_metric_ops' update ops (eval) or the predictions (predict)
            until `steps` runs, a stop, or the end of the data
    Keras side (in another directory):
        fit / evaluate / predict(callbacks=[HookCallback(wrapped factory, mode, names, values)])
    compare, hook by hook (the i-th hook of each side):
        the calls in order (method, step), what before_run returned, after_run's
        results leaf by leaf (type, dtype, shape, value), request_stop, the lines
        the hook logged, the summaries it wrote (tag by tag), the checkpoints it
        wrote (by step and TF1 name) and the other files it made

What each side records, and how: `_record`.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from hooks2callbacks._hook_list import is_factory
from hooks2callbacks._tf1_restore import restore_tf1_checkpoint
from hooks2callbacks.callback import HookCallback
from hooks2callbacks.migration._compare import _Compare, _report_in_orders, split_drift, tf1_spread, with_first_steps
from hooks2callbacks.migration._data import _batches, _check_inputs, _kind
from hooks2callbacks.migration._hints import _hints, _op_names, epsilon_notes_fit
from hooks2callbacks.migration._keras import _counting, _run_keras
from hooks2callbacks.migration._record import _file_items, _logs_captured, _run_side, _Side, _summaries_recorded
from hooks2callbacks.migration._report import MigrationReport
from hooks2callbacks.migration._slots import keras_checkpoints_as_tf1, slot_map_note
from hooks2callbacks.migration._steps import optimizer_state
from hooks2callbacks.migration._steps import per_step as _per_step
from hooks2callbacks.migration._tf1 import _Tf1Run

_NOT_RESTORED = "the optimizer's variables not in the checkpoint keep their values"

MODES = ("train", "eval", "predict")


def check_migration(
    model_fn: Callable[..., Any],
    keras_model: Any,
    hooks: Callable[[], Any],
    data: Any,
    *,
    steps: int | None,
    mode: str = "train",
    names: Mapping[str, Any] | None = None,
    values: str | None = None,
    params: Any = None,
    assignment_map: Mapping[str, str] | None = None,
    batch_size: int = 32,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    per_step: bool = True,
    step_rtol: float = 1e-5,
    step_atol: float = 1e-6,
    drift_rtol: float = 1e-3,
    drift_atol: float = 1e-5,
) -> MigrationReport:
    """Runs the hooks under the TF1 `model_fn` and under the Keras model, and compares what they saw and did.

    Example:

    ```python
    report = hooks2callbacks.check_migration(
        model_fn, model, lambda: [tf.compat.v1.train.LoggingTensorHook(["loss"], every_n_iter=10)],
        (x, y), steps=100, names={"cross_entropy": "loss"},
    )
    print(report)
    report.assert_ok()
    ```

    Both sides start from the same weights: the TF1 graph's initial variables
    are written to a checkpoint and read into `keras_model` with
    `restore_tf1_checkpoint` (the check trains or evaluates `keras_model`;
    pass a fresh one). Both get the same batches in the same order. Each side
    runs in a temporary working directory of its own, so hooks that write to
    relative paths (`"model_dir"`) write apart; the files are compared by what
    each hook made (checkpoints by TF1 name, summaries by tag and step, other
    files by content). Time-dependent values (`global_step/sec`, "(0.3 sec)"
    in a log line) are compared as present or absent.

    Args:
        model_fn: The TF1 `model_fn(features, labels, mode, params)` returning
            an `EstimatorSpec` (hooks2callbacks's, or any record with its fields).
        keras_model: The compiled, built Keras model that replaces it, its
            weights named as the TF1 graph's (or mapped with `assignment_map`).
        hooks: A zero-argument function returning the hooks: called once per
            side, inside that side's graph, so that each side has its own.
        data: `(x, y)` arrays (cut into batches of `batch_size`, repeated in
            train mode until `steps`) or a batched `tf.data.Dataset` of
            `(features, labels)`. In predict mode `x` alone will do.
        steps: Session runs (train steps, or eval/predict batches) at most.
            None in eval and predict: until the data ends.
        mode: `"train"` (`fit`), `"eval"` (`evaluate`) or `"predict"`.
            Defaults to `"train"`.
        names: `HookCallback(names=...)`: TF1 names Keras calls differently.
        values: `HookCallback(values=...)`. Defaults to None (its default).
        params: The `params` passed to `model_fn`. Defaults to `{}`.
        assignment_map: Where the Keras model's TF1 names differ from the
            graph's: as in `restore_tf1_checkpoint`.
        batch_size: The batch size for `(x, y)` arrays. Defaults to 32.
        rtol: Relative tolerance for floats, free-running: a difference beyond
            it is reported (as drift where the per-step comparison holds).
            Defaults to 1e-5.
        atol: Absolute tolerance for floats, free-running. Defaults to 1e-6.
        per_step: In train mode, also compare each step from the same weights
            (TF1's of that step, restored into the Keras model): its loss and
            every variable after it. Defaults to True.
        step_rtol: Relative tolerance of the per-step comparison. Defaults to 1e-5.
        step_atol: Absolute tolerance of the per-step comparison. Defaults to 1e-6.
        drift_rtol: Relative tolerance within which a free-running difference
            is drift (float order compounding over steps), not the verdict,
            where every step before it was equal from the same weights.
            Defaults to 1e-3.
        drift_atol: Absolute tolerance of the same. Defaults to 1e-5.

    Returns:
        The report: `.ok`, `.differences`, `print(report)`, `.assert_ok()`.

    Raises:
        ValueError: `mode` is not one of the three; `steps` is not a positive
            int (or None outside train mode); the model_fn returned no loss in
            train or eval mode (or no predictions in predict mode); the data's
            features do not fit the Keras model's inputs; a weight cannot be
            matched between the TF1 graph and the Keras model.
        TypeError: `hooks` is not a zero-argument function, or it returned
            something other than hooks; `model_fn` is not callable; `data` is
            neither arrays nor a dataset.
    """
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"check_migration(mode=...) must be one of {MODES}, got {mode!r}.")
    if not callable(model_fn):
        raise TypeError(f"check_migration(model_fn=...) takes the TF1 model_fn, a function, got {_kind(model_fn)}.")
    if not is_factory(hooks):
        raise TypeError(
            f"check_migration(hooks=...) takes a zero-argument function returning the hooks, got "
            f"{_kind(hooks)}. Each side needs hooks of its own, made in its graph: pass "
            "lambda: [hook1, hook2] (or the function your job made them with)."
        )
    if (
        steps is None
        and mode == "train"
        or steps is not None
        and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1)
    ):
        raise ValueError(
            f"check_migration(steps=...) takes a positive int (None only in eval and predict mode: until "
            f"the data ends), got {steps!r}."
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"check_migration(batch_size=...) takes a positive int, got {batch_size!r}.")
    batches, shuffled = _batches(data, steps, batch_size, mode)
    _check_inputs(keras_model, batches[0][0])
    if mode != "predict" and batches[0][1] is None:
        raise ValueError(f"check_migration(data=...): {mode} mode needs labels: pass (x, y).")
    tf1_run = _Tf1Run(model_fn, batches, mode, params)
    notes: list[str] = []
    not_compared = [
        "event files byte by byte (their names hold a time and a host): their summaries are compared "
        "as each hook wrote them, tag by tag",
        "graph files (.meta, graph.pbtxt): the TF1 graph and HookCallback's adapter graph differ by construction",
        "after_run's results where before_run returned None: TF1 gave None, HookCallback a read-only view "
        "of the step's values",
        "a checkpoint's learning_rate where the TF1 graph had no such variable (Keras's optimizer keeps one)",
        "image, audio, histogram and tensor summaries' contents (pixels, samples, buckets): compared by tag and "
        "step as written or not; scalar summaries are compared by value",
        "the summaries a hook fetched as a serialized Summary, where not scalar: by tag, as written or not",
    ]
    if shuffled:
        notes.append("the dataset gives another order each pass (shuffled); both sides got the batches of one pass")
    with tempfile.TemporaryDirectory(prefix="check_migration_") as work:
        prefix = tf1_run.save_initial(work)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                restored = restore_tf1_checkpoint(keras_model, prefix, assignment_map)
            except ValueError as error:
                raise ValueError(
                    f"check_migration(): the Keras model cannot start from the TF1 graph's initial weights, "
                    f"so nothing was run. {error}"
                ) from error
        start = optimizer_state(keras_model)  # what the optimizer starts from: step 0's state on the Keras side
        unmatched = [n for n in tf1_run.trainable if n in restored.unused]
        if unmatched:
            raise ValueError(
                f"check_migration(): the TF1 graph's trainable variables {unmatched} match no weight of the "
                f"Keras model (its TF1 names: {sorted(restored.restored)}), so nothing was run. Name the Keras "
                "layers as the TF1 scopes (keras.layers.Dense(..., name='dense')) or pass "
                "assignment_map={'tf1_scope/': 'keras_scope/'}."
            )
        # Slots a custom optimizer named otherwise: one note, the map that restores them, as code.
        # An eval or predict graph has no optimizer: the Keras optimizer's slots take no part there.
        training = mode == "train"
        proposal = restored.proposed_map if training else {}
        left = [n for n in restored.not_restored if n not in set(proposal.values())]
        # The optimizer's state not restored is one cause, said once: from step 1 on, Keras steps
        # from another optimizer state than TF1's, so every later difference follows from it.
        cause = _cause(proposal, left, assignment_map) if training and (proposal or _not_restored(restored)) else None
        shown = [n for n in restored.notes if not ((cause or not training) and _NOT_RESTORED in n)]
        notes += [f"same start: {note}" for note in shown]
        # restore_tf1_checkpoint warned of each of its notes too (prefixed with where): shown once
        notes += [
            f"same start: {w.message}" for w in caught if not any(note in str(w.message) for note in restored.notes)
        ]
        if epsilon_notes_fit(tf1_run.graph, keras_model):
            # The restore compares with TF1's default epsilon; the graph's own is known and the Keras one's.
            notes = [note for note in notes if "epsilon" not in note]
        notes = list(dict.fromkeys(notes))  # each note once
        sides = {name: _Side(name, os.path.join(work, name)) for name in ("tf1", "keras")}
        for side in sides.values():
            os.makedirs(side.root)
        names = _with_metric_keys(names, tf1_run.metric_ops)
        callback = HookCallback(_counting(hooks, sides["keras"]), mode=mode, names=names, values=values)
        with _logs_captured(), _summaries_recorded():
            _run_side(sides["tf1"], lambda: tf1_run.run(hooks, sides["tf1"], steps, prefix))
            if sides["tf1"].races:
                # TF1 left an order to its scheduler: run its side again in the other order, on a
                # graph of its own (the first one is finalized), so both orders it allowed are known.
                after_run = _Tf1Run(model_fn, batches, mode, params)
                sides["tf1 after"] = after = _Side("tf1 after", os.path.join(work, "tf1-after"))
                os.makedirs(after.root)
                _run_side(after, lambda: after_run.run(hooks, after, steps, prefix, order=1))
            try:
                _run_side(sides["keras"], lambda: _run_keras(keras_model, batches, mode, callback, sides["keras"]))
            except Exception as error:  # noqa: BLE001  # a finding: reported, with its type and message
                sides["keras"].error = error
        for side in sides.values():
            _file_items(side)
        keras_checkpoints_as_tf1(sides["keras"], assignment_map)
        tf1_sides = [sides["tf1"], *([sides["tf1 after"]] if "tf1 after" in sides else [])]
        report, run_order = _report_in_orders(
            mode, tf1_sides, sides["keras"], _Compare(rtol, atol), not_compared, notes
        )
        report.cause = cause
        if mode == "train" and per_step and sides["tf1"].step:
            # From the same weights at every step, with tight tolerances: a real difference shows at
            # its first step; float order does not compound (see _steps).
            with _logs_captured():  # the per-step run logs lines no hook made: kept out
                found, report.per_step_steps = _per_step(
                    _Tf1Run(model_fn, batches, mode, params),
                    keras_model,
                    prefix,
                    1 if cause else sides["tf1"].step,  # step 0 alone starts from the same (initial) state
                    assignment_map,
                    _Compare(step_rtol, step_atol),
                    order=run_order,  # where the train op raced, the order the free-running run matched
                    start=start if cause else None,
                )
            # Where only the first steps were compared, the later ones are not known to be equal.
            compared = report.per_step_steps if report.per_step_steps < sides["tf1"].step else None
            parted_at = min((d.step for d in found if d.step is not None), default=compared)
            kept, drift = split_drift(report.differences, parted_at, _Compare(drift_rtol, drift_atol))
            report.differences = kept + found
            report.drift = with_first_steps(drift)
            report.tf1_spread = tf1_spread(tf1_sides, mode)
        report.differences = with_first_steps(
            _hints(
                report.differences,
                sides["tf1"],
                sides["keras"],
                dict(_op_names(names)),
                tf1_run.graph,
                keras_model,
                shuffled,
            )
        )
    return report


def _not_restored(restored: Any) -> bool:
    """Whether the restore left optimizer variables of the Keras model at their values (its note says so)."""
    return any(_NOT_RESTORED in note for note in restored.notes)


def _cause(proposal: Mapping[str, str], left: list[str], assignment_map: Mapping[str, str] | None) -> str:
    """The one reason the train check cannot hold from step 1 on: the optimizer's state not restored, and the fix."""
    text = (
        "the Keras optimizer's state cannot be restored from the TF1 graph's, so the per-step comparison "
        "(each step from TF1's weights and optimizer state of that step) compared step 0 alone, from both "
        "sides' initial state; from step 1 on it would differ by that alone. The free-running comparison "
        "starts both optimizers afresh and is not affected; the checkpoints' optimizer names differ."
    )
    if proposal:
        text += " " + slot_map_note(proposal, assignment_map)
    if left:
        text += (
            f"\n{_NOT_RESTORED} (no checkpoint entry of their variable, kind and shape): {left}; where the TF1 "
            "graph names them otherwise, add assignment_map entries from its names to these"
        )
    return text


def _with_metric_keys(names: Mapping[str, Any] | None, metric_ops: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """`names` with each `eval_metric_ops` key in it also given as its value's and update op's TF1 names.

    A user knows `eval_metric_ops={"accuracy": tf.compat.v1.metrics.accuracy(...)}`
    by its key; hooks fetch the metric by its ops' names (`accuracy/value`,
    `accuracy/update_op`, or `<scope>/mean/update_op`), which HookCallback's
    names map must hold. A key the Keras model logs under the same name
    (`{"accuracy": "accuracy"}`, as official r1 ResNet's `eval_metric_ops`) is
    already a log key: only its ops' names are added, since HookCallback takes a
    name mapped to itself for a circle.
    """
    if not names or not metric_ops:
        return names
    expanded = dict(names)
    for key, target in names.items():
        pair = metric_ops.get(key)
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            continue
        for element in pair:
            name = getattr(element, "name", None)
            if isinstance(name, str):
                expanded.setdefault(name.split(":")[0], target)
        if target == key:
            del expanded[key]
    return expanded
