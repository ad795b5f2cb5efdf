"""An Estimator user's kit: `tf.estimator` names for hook files, and the hooks Estimator added.

* `install_estimator_aliases()` gives back `tf.estimator.<X>` (and
  `tf.compat.v1.estimator.<X>`) for the hook API, which TF 2.16 removed with
  `tf.estimator`: the very classes of `tf.compat.v1.train`, plus `ModeKeys`,
  a plain `EstimatorSpec` record and `tpu.TPUEstimatorSpec` (as
  `TPUEstimator(use_tpu=False)` ran it). Hook files and model_fns written
  against `tf.estimator` then import and run unchanged.
* `estimator_hooks(model_dir)` returns the hooks `Estimator.train` added to
  every run without being asked, as stock `tf.compat.v1.train` hooks, so a
  Keras run writes the `model_dir` an Estimator wrote:

      Estimator.train (MonitoredTrainingSession(checkpoint_dir=model_dir))
          restore the newest checkpoint of model_dir   -> _ModelDir.begin()
          Saver(max_to_keep=keep_checkpoint_max)       -> _ModelDir.begin(): the
                                                          Keras saver in SAVERS
          CheckpointSaverHook(model_dir, ...)          -> the same hook
          StepCounterHook(output_dir=model_dir)        -> the same hook
          SummarySaverHook(scaffold.summary_op)        -> the same hook; the op
                                                          (a `loss` summary over
                                                          log_tensor("loss"), and
                                                          every summary built
                                                          before) made in
                                                          _ModelDir.begin()
          NanTensorHook(loss)                          -> NanTensorHook("loss")
          LoggingTensorHook({"loss": loss,             -> the same hook, "step"
              "step": global_step})                       named to a tensor made in
                                                          _ModelDir.begin()

  and in eval mode the writer of `Estimator.evaluate`'s results
  (`_EvalResultsWriter`). Only `_ModelDir` and the eval writer are this
  package's own hooks; `_ModelDir` has no per-step method.
"""

from __future__ import annotations

import os
import types
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from google.protobuf import text_format

from hooks2callbacks._checkpoint import install_saver, restore_checkpoint
from hooks2callbacks._graph import OP_NAME, AdapterGraph, log_tensor
from hooks2callbacks._keras_state import global_step_of
from hooks2callbacks._model import outside_strategy
from hooks2callbacks._seams import context, graph_mode_on
from hooks2callbacks._tf1_restore import check_assignment_map, restore_tf1_checkpoint

_T = tf.compat.v1.train
_KEYS = tf.compat.v1.GraphKeys

# -- install_estimator_aliases ------------------------------------------------


class ModeKeys:
    """The modes of a `model_fn`, as `tf.estimator.ModeKeys` named them."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


class EstimatorSpec(NamedTuple):
    """What a `model_fn` returned: a plain record of its fields, without Estimator's checks."""

    mode: str
    predictions: Any = None
    loss: Any = None
    train_op: Any = None
    eval_metric_ops: Any = None
    export_outputs: Any = None
    training_chief_hooks: Any = ()
    training_hooks: Any = ()
    scaffold: Any = None
    evaluation_hooks: Any = ()
    prediction_hooks: Any = ()


class TPUEstimatorSpec(NamedTuple):
    """What a TPU job's `model_fn` returned: `tf.estimator.tpu.TPUEstimatorSpec`'s fields.

    `eval_metrics` is a `(metric_fn, tensors)` pair, not `eval_metric_ops`;
    `as_estimator_spec()` converts it as `TPUEstimator(use_tpu=False)` did on
    CPU. `host_call` ran on the TPU host only and is not converted.
    """

    mode: str
    predictions: Any = None
    loss: Any = None
    train_op: Any = None
    eval_metrics: Any = None
    export_outputs: Any = None
    scaffold_fn: Any = None
    host_call: Any = None
    training_hooks: Any = ()
    evaluation_hooks: Any = ()
    prediction_hooks: Any = ()

    def as_estimator_spec(self) -> EstimatorSpec:
        """The EstimatorSpec a CPU run made of it: `eval_metric_ops` from `metric_fn(*tensors)`."""
        ops = None
        if self.eval_metrics is not None:
            metric_fn, tensors = self.eval_metrics
            ops = metric_fn(**tensors) if isinstance(tensors, dict) else metric_fn(*tensors)
        return EstimatorSpec(
            mode=self.mode,
            predictions=self.predictions,
            loss=self.loss,
            train_op=self.train_op,
            eval_metric_ops=ops,
            export_outputs=self.export_outputs,
            training_hooks=self.training_hooks,
            scaffold=self.scaffold_fn() if self.scaffold_fn else None,
            evaluation_hooks=self.evaluation_hooks,
            prediction_hooks=self.prediction_hooks,
        )


# What tf.estimator exported of the hook API (tensorflow_estimator 2.15's
# `tf.estimator` namespace), each the tf.compat.v1.train class it was.
_HOOK_API = (
    "CheckpointSaverHook",
    "CheckpointSaverListener",
    "FeedFnHook",
    "FinalOpsHook",
    "GlobalStepWaiterHook",
    "LoggingTensorHook",
    "NanLossDuringTrainingError",
    "NanTensorHook",
    "ProfilerHook",
    "SecondOrStepTimer",
    "SessionRunArgs",
    "SessionRunContext",
    "SessionRunHook",
    "SessionRunValues",
    "StepCounterHook",
    "StopAtStepHook",
    "SummarySaverHook",
)


class _EstimatorAliases(types.ModuleType):
    """`tf.estimator` as `install_estimator_aliases` gives it: the hook API only."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{self.__name__.replace('tensorflow', 'tf')}.{name} is not one of the names "
            "hooks2callbacks.install_estimator_aliases() "
            f"gives back: it gives the hook API ({', '.join(_HOOK_API)}), ModeKeys, EstimatorSpec and "
            "tpu.TPUEstimatorSpec. "
            "tf.estimator itself was removed in TensorFlow 2.16. The TF2 way: train with "
            "model.fit(callbacks=[hooks2callbacks.HookCallback(hooks)]), take the Estimator's "
            "settings from hooks2callbacks.estimator_hooks(model_dir), and see the migration page's "
            "table 'What Estimator did for you'."
        )


_installed: dict[str, Any] | None = None


def _real_estimator() -> Any:
    """`tf.estimator` when it is not ours (tensorflow_estimator, TF <= 2.15), else None."""
    try:
        existing = getattr(tf, "estimator")  # noqa: B009  # TF's lazy loader raises here since 2.16
    except (AttributeError, ImportError):
        return None
    return None if isinstance(existing, _EstimatorAliases) else existing


def install_estimator_aliases() -> dict[str, Any]:
    """Makes `tf.estimator.<X>` resolve to the hook API, for hook files written against `tf.estimator`.

    Call it once, before importing such files. `tf.estimator` was removed in
    TensorFlow 2.16, and a file with `class MyHook(tf.estimator.SessionRunHook)`
    fails at import; the classes themselves live on as `tf.compat.v1.train.*`.
    After this call `tf.estimator.SessionRunHook`, `SessionRunArgs`,
    `SessionRunContext`, `SessionRunValues`, `SecondOrStepTimer`,
    `CheckpointSaverListener` and every stock hook `tf.estimator` exported
    (`LoggingTensorHook`, `StopAtStepHook`, ...) are those very classes, under
    `tf.estimator` and `tf.compat.v1.estimator`, with `ModeKeys` (`"train"`,
    `"eval"`, `"infer"`), `EstimatorSpec`, a plain record of the fields a
    `model_fn` passed, and `tpu.TPUEstimatorSpec`, whose `as_estimator_spec()`
    converts it as `TPUEstimator(use_tpu=False)` did. Any other name fails with an `AttributeError` that names
    this function and the TF2 way.

    Example:

    ```python
    import hooks2callbacks

    hooks2callbacks.install_estimator_aliases()
    from official.utils.logs import hooks  # class ExamplesPerSecondHook(tf.estimator.SessionRunHook)
    ```

    It is idempotent, and leaves a real `tf.estimator` (tensorflow_estimator,
    TensorFlow 2.15 and earlier) alone.

    Returns:
        What it installed: each name under `tf.estimator` to its object; empty
        when a real `tf.estimator` is there.
    """
    global _installed  # pylint: disable=global-statement
    if _real_estimator() is not None:
        return {}
    if _installed is None:
        names: dict[str, Any] = {name: getattr(_T, name) for name in _HOOK_API}
        tpu = _EstimatorAliases("tensorflow.estimator.tpu", "tf.estimator.tpu's spec, given back by hooks2callbacks")
        tpu.__dict__["TPUEstimatorSpec"] = TPUEstimatorSpec
        names.update(ModeKeys=ModeKeys, EstimatorSpec=EstimatorSpec, tpu=tpu)
        aliases = _EstimatorAliases(
            "tensorflow.estimator", "tf.estimator's hook API, given back by hooks2callbacks.install_estimator_aliases()"
        )
        aliases.__dict__.update(names)
        tf.estimator = aliases
        tf.compat.v1.estimator = aliases
        _installed = names
    return dict(_installed)


# -- estimator_hooks ---------------------------------------------------------

MODES = ("train", "eval")
_STEP_NAME = "hooks2callbacks_estimator/global_step"
_LOSS_NAME = "hooks2callbacks_estimator/loss"


class _Scaffold:
    """What `SummarySaverHook(scaffold=...)` reads: `summary_op`, set in `_ModelDir.begin()`.

    MonitoredTrainingSession's summary hook took the scaffold's `summary_op`,
    all the graph's summaries merged when the session was made.
    """

    summary_op: Any = None


def _adapter_graph(hook: str, train: bool) -> AdapterGraph:
    """The run's adapter graph; raises where the hooks of `estimator_hooks` would be misplaced."""
    graph = tf.compat.v1.get_default_graph()
    if not isinstance(graph, AdapterGraph) or graph.model is None:
        raise RuntimeError(
            f"{hook}.begin(): the hooks of hooks2callbacks.estimator_hooks() write a Keras model's "
            "model_dir, and run only inside HookCallback: "
            "model.fit(callbacks=[HookCallback([*estimator_hooks(model_dir), *my_hooks])]). Under a "
            "TF1 MonitoredTrainingSession, pass checkpoint_dir=model_dir and its save_* arguments instead."
        )
    if bool(getattr(graph.owner, "advances", train)) != train:
        raise ValueError(
            f"{hook}.begin(): estimator_hooks(model_dir, mode={'train' if train else 'eval'!r}) runs "
            f"in a HookCallback of another mode. Pass estimator_hooks(model_dir) to fit() (mode "
            "'train') and estimator_hooks(model_dir, mode='eval') to evaluate() in "
            "HookCallback(..., mode='eval')."
        )
    return graph


class _ModelDir(tf.compat.v1.train.SessionRunHook):
    """What `MonitoredTrainingSession(checkpoint_dir=model_dir)` and Estimator did at session creation.

    In `begin()`, before the other hooks' `after_create_session`: the newest
    checkpoint of `model_dir` is restored into the Keras model (weights,
    optimizer state, global step), whether a Keras run (`restore_checkpoint`)
    or an Estimator (`restore_tf1_checkpoint`, through `assignment_map`) wrote
    it; the saver that `CheckpointSaverHook` finds keeps `keep_checkpoint_max`
    checkpoints, and writes what `assignment_map` names under its checkpoint
    names; the summary op of the summary hook and the step the logging hook
    prints are made.
    """

    def __init__(
        self,
        model_dir: str,
        keep_checkpoint_max: int | None,
        scaffold: _Scaffold | None,
        assignment_map: dict[str, str] | None = None,
    ) -> None:
        self._model_dir = model_dir
        self.restores_model_dir = model_dir  # no re-run note for this directory (`_rerun`): it is restored
        self._keep_checkpoint_max = keep_checkpoint_max
        self._scaffold = scaffold
        self._assignment_map = assignment_map
        self.restored: str | None = None  # the checkpoint restored by the latest run
        self.report: Any = None  # what restore_tf1_checkpoint restored, for a TF1 checkpoint

    def begin(self) -> None:
        graph = _adapter_graph(type(self).__name__, train=True)
        model = graph.model
        # Estimator's Saver(max_to_keep=keep_checkpoint_max) in SAVERS: every
        # CheckpointSaverHook of the run saves through it, as through Estimator's.
        graph.clear_collection(_KEYS.SAVERS)
        install_saver(graph, model, self._keep_checkpoint_max, self._assignment_map)
        if self._scaffold is not None:
            # Estimator.train: a `loss` summary unless model_fn made one; the scaffold
            # then merged every summary of the graph.
            if not any(op.name == "loss" for op in tf.compat.v1.get_collection(_KEYS.SUMMARIES)):
                tf.compat.v1.summary.scalar("loss", log_tensor("loss"))
            self._scaffold.summary_op = tf.compat.v1.summary.merge_all()
        # What Estimator's LoggingTensorHook printed: the loss tensor, a float32 (so
        # "loss = 1.2901869"), and the global step variable, whose value TF1 read
        # after the step's increment ("step = 1" for the first step). Computed by
        # a graph run on the logging steps only.
        with graph.name_scope(None):
            tf.identity(log_tensor("loss"), name=_LOSS_NAME)
            tf.math.add(_T.get_global_step(), 1, name=_STEP_NAME)
        self.restored = self._restore(graph, model)

    def _restore(self, graph: AdapterGraph, model: Any) -> str | None:
        prefix = tf.train.latest_checkpoint(self._model_dir)
        if prefix is None:
            return None
        tf.compat.v1.logging.info("Restoring parameters from %s", prefix)
        _stamp_checkpoints(self._model_dir)
        names = {name for name, _ in tf.train.list_variables(prefix)}
        with context.eager_mode(), outside_strategy(graph):
            if "_CHECKPOINTABLE_OBJECT_GRAPH" in names:
                restore_checkpoint(model, prefix)  # a Keras run's, through CheckpointSaverHook
                self.report = None
            else:  # an Estimator's (name-based)
                self.report = restore_tf1_checkpoint(model, prefix, self._assignment_map)
            # The run's global step is the restored one, as after TF1's restore.
            graph.owner.step = np.int64(global_step_of(model))
        return str(prefix)


def _stamp_checkpoints(model_dir: str) -> None:
    """Gives the checkpoints of a state file a TF1 `Saver` wrote their times, so the Keras saver keeps them.

    TF1's `Saver` recovered the checkpoints the state file lists, and counted
    them in `max_to_keep`. `tf.train.CheckpointManager` recovers only those with
    a timestamp after `last_preserved_timestamp`, which TF1's state file lacks:
    without them, its earlier checkpoints would drop out of the state file.
    """
    state = tf.train.get_checkpoint_state(model_dir)
    if state is None or state.all_model_checkpoint_timestamps or not state.all_model_checkpoint_paths:
        return
    times = []
    for path in state.all_model_checkpoint_paths:
        index = (path if os.path.isabs(path) else os.path.join(model_dir, path)) + ".index"
        times.append(tf.io.gfile.stat(index).mtime_nsec / 1e9 if tf.io.gfile.exists(index) else 0.0)
    state.all_model_checkpoint_timestamps.extend(times)
    state.last_preserved_timestamp = min(times) - 1.0
    with tf.io.gfile.GFile(os.path.join(model_dir, "checkpoint"), "w") as file:
        file.write(text_format.MessageToString(state))


class _EvalResultsWriter(tf.compat.v1.train.SessionRunHook):
    """`Estimator.evaluate`'s results, as it wrote them: scalars in `eval_dir` at the global step.

    Its `after_run` keeps the step's log keys; `end()` fetches them (in an
    eval-mode `HookCallback`'s `end()`, the evaluation's results, what
    `evaluate()` returns), logs them and writes each as a scalar summary, as
    `_write_dict_to_summary` did with `evaluate()`'s results.
    """

    def __init__(self, eval_dir: str) -> None:
        self._eval_dir = eval_dir
        self._results: dict[str, Any] = {}
        self._global_step: Any = None
        self.written: dict[str, Any] = {}  # the results the latest run wrote

    def begin(self) -> None:
        _adapter_graph(type(self).__name__, train=False)
        self._results = {}
        self._global_step = _T.get_global_step()

    def before_run(self, run_context: Any) -> None:
        return None  # so after_run gets the step's values by log key

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._results = dict(run_values.results)

    def end(self, session: Any) -> None:
        keys = [k for k, v in self._results.items() if _is_scalar(v) and OP_NAME.match(k)]
        self._write(session, {k: f"{k}:0" for k in keys})

    def _write(self, session: Any, fetches: dict[str, Any]) -> None:
        """Fetches the results and the global step, logs them and writes them as Estimator did."""
        step = int(session.run(self._global_step))
        results: dict[str, Any] = session.run(fetches)
        results["global_step"] = np.int64(step)
        tf.compat.v1.logging.info(
            "Saving dict for global step %d: %s", step, ", ".join(f"{k} = {v}" for k, v in sorted(results.items()))
        )
        summary = tf.compat.v1.Summary()
        for key, value in results.items():
            if key != "global_step":
                summary.value.add(tag=key, simple_value=float(value))
        writer = tf.compat.v1.summary.FileWriterCache.get(self._eval_dir)
        writer.add_summary(summary, step)
        writer.flush()
        self.written = results


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (float, int, np.floating, np.integer)) or (
        isinstance(value, np.ndarray) and value.shape == ()
    )


def _positive(name: str, value: Any, none: bool = True) -> None:
    if value is None and none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(
            f"estimator_hooks({name}=...) takes a positive number{' or None' if none else ''}, as "
            f"RunConfig({name}=...) did, got {value!r}."
        )


def estimator_hooks(
    model_dir: str | os.PathLike[str],
    *,
    mode: str = "train",
    save_summary_steps: int | None = 100,
    save_checkpoints_steps: int | None = None,
    save_checkpoints_secs: float | None = 600,
    keep_checkpoint_max: int | None = 5,
    log_step_count_steps: int | None = 100,
    name: str | None = None,
    assignment_map: dict[str, str] | None = None,
) -> list[Any]:
    """The hooks `Estimator.train` added to every run (or `Estimator.evaluate`'s results writer).

    Pass them with your own hooks, and the Keras run writes the `model_dir` an
    Estimator with the same `RunConfig` wrote:

    ```python
    hooks = [*estimator_hooks(model_dir, save_checkpoints_steps=1000), *my_hooks]
    model.fit(ds, epochs=100, callbacks=[HookCallback(hooks)])
    model.evaluate(eval_ds, callbacks=[HookCallback(estimator_hooks(model_dir, mode="eval"), mode="eval")])
    ```

    In `"train"` mode, in this order:

    * a hook that, when the run begins, restores the newest checkpoint of
      `model_dir` (weights, optimizer state, global step; one a Keras run or an
      Estimator wrote; an Estimator's through `assignment_map`) with TF1's
      "Restoring parameters from ..." line, and makes `CheckpointSaverHook`s
      keep `keep_checkpoint_max` checkpoints;
    * `CheckpointSaverHook(model_dir)`: `model.ckpt-<step>` when the run begins,
      then every `save_checkpoints_steps` steps or `save_checkpoints_secs`
      seconds, and at the end; none if both are None;
    * `StepCounterHook` (`global_step/sec`, in the log and in `model_dir`'s
      events) every `log_step_count_steps` steps;
    * `SummarySaverHook` every `save_summary_steps` steps, of a `loss` summary
      and every summary a hooks factory built (as a `model_fn` did);
    * `NanTensorHook("loss")`, and `LoggingTensorHook` printing
      "loss = ..., step = ..." every `log_step_count_steps` steps (the TF
      logger must be at INFO, as TF1 scripts set it).

    In `"eval"` mode, one hook: at the end of `evaluate()`, it logs
    "Saving dict for global step N: ..." and writes each result (`loss` and
    each metric, the evaluation's aggregates) as a scalar under
    `model_dir/eval` (or `model_dir/eval_<name>`) at the global step.

    Args:
        model_dir: The directory Estimator's `model_dir` was.
        mode: `"train"` (for `fit`) or `"eval"` (for `evaluate`, with
            `HookCallback(..., mode="eval")`). Defaults to `"train"`.
        save_summary_steps: Steps between summaries; None for none. Defaults to 100.
        save_checkpoints_steps: Steps between checkpoints. Defaults to None.
        save_checkpoints_secs: Seconds between checkpoints, when
            `save_checkpoints_steps` is None. Defaults to 600.
        keep_checkpoint_max: Checkpoints kept, the newest (the earlier run's
            count); None keeps all. Defaults to 5. It governs every
            `CheckpointSaverHook` of the run, as Estimator's saver did.
        log_step_count_steps: Steps between the loss lines and the
            `global_step/sec` counts; None for neither. Defaults to 100.
        name: In eval mode, the evaluation's name: results go to
            `model_dir/eval_<name>`. Defaults to None (`model_dir/eval`).
        assignment_map: In train mode, for an Estimator's checkpoint whose
            names differ from the model's TF1 names, as
            `tf.compat.v1.train.init_from_checkpoint`'s: checkpoint names (or
            scopes ending in `/`) to the model's TF1 names (or scopes), such as
            a custom optimizer's slots, `{"dense/kernel/adam_m":
            "dense/kernel/Adam", ...}` (see `restore_tf1_checkpoint`). The
            checkpoints the run writes hold those variables under their
            checkpoint names, so that the same map, and the TF1 job itself,
            read them back. Defaults to None (the names are the model's).

    Returns:
        The hooks, a list to give `HookCallback` with your own.

    Raises:
        ValueError: `mode` is not `"train"` or `"eval"`; a count is not a
            positive number or None; both `save_checkpoints_steps` and
            `save_checkpoints_secs` are given (as `RunConfig` refused it);
            `name` is given in train mode, or `assignment_map` in eval mode;
            `assignment_map` is not a dict of str.
        TypeError: `model_dir` is not a path, or `name` not a str.
        RuntimeError: Called in TF1 graph mode (not supported there yet).
    """
    if graph_mode_on():
        raise RuntimeError(
            "estimator_hooks() is not supported in TF1 graph mode (tf.compat.v1.disable_eager_execution()) "
            "yet. Pass the stock hooks it would add to HookCallback yourself: CheckpointSaverHook(model_dir, "
            "save_steps=...), SummarySaverHook over log_tensor('loss') in a hooks factory, "
            "StepCounterHook(output_dir=model_dir), NanTensorHook('loss:0') and LoggingTensorHook(['loss'], "
            "every_n_iter=...); or run the model eagerly."
        )
    if not isinstance(model_dir, (str, os.PathLike)):
        raise TypeError(f"estimator_hooks(model_dir=...) takes a directory path, got {model_dir!r}.")
    model_dir = os.fspath(model_dir)
    if mode not in MODES:
        raise ValueError(f"estimator_hooks(mode=...) must be one of {MODES}, got {mode!r}.")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"estimator_hooks(name=...) takes a str (results go to eval_<name>), got {name!r}.")
    mapping = check_assignment_map(assignment_map, "estimator_hooks(assignment_map=...)")
    if mode == "eval":
        if assignment_map is not None:
            raise ValueError(
                "estimator_hooks(assignment_map=...) maps the names of the checkpoint the train hooks "
                "restore; mode='eval' restores nothing (evaluate() runs the model as it is). Pass it "
                "to estimator_hooks(model_dir) for fit(), or restore_tf1_checkpoint(model, model_dir, "
                "assignment_map) before evaluate()."
            )
        return [_EvalResultsWriter(os.path.join(model_dir, "eval" if not name else f"eval_{name}"))]
    if name is not None:
        raise ValueError(
            "estimator_hooks(name=...) names an evaluation (Estimator.evaluate(name=...)); it is for mode='eval' only."
        )
    for argument, value in (
        ("save_summary_steps", save_summary_steps),
        ("save_checkpoints_steps", save_checkpoints_steps),
        ("save_checkpoints_secs", save_checkpoints_secs),
        ("log_step_count_steps", log_step_count_steps),
    ):
        _positive(argument, value)
    if keep_checkpoint_max is not None and (
        isinstance(keep_checkpoint_max, bool) or not isinstance(keep_checkpoint_max, int) or keep_checkpoint_max < 1
    ):
        raise ValueError(
            f"estimator_hooks(keep_checkpoint_max=...) takes a positive int or None (keep all), "
            f"got {keep_checkpoint_max!r}."
        )
    if save_checkpoints_steps is not None and save_checkpoints_secs is not None:
        # RunConfig's defaults are steps=None, secs=600: giving steps means secs=None.
        if save_checkpoints_secs != 600:
            raise ValueError(
                "estimator_hooks(): give save_checkpoints_steps or save_checkpoints_secs, not both "
                f"(got {save_checkpoints_steps!r} and {save_checkpoints_secs!r}), as RunConfig required."
            )
        save_checkpoints_secs = None
    scaffold = _Scaffold() if save_summary_steps is not None else None
    hooks: list[Any] = [_ModelDir(model_dir, keep_checkpoint_max, scaffold, mapping or None)]
    if save_checkpoints_steps is not None or save_checkpoints_secs is not None:
        hooks.append(
            _T.CheckpointSaverHook(model_dir, save_secs=save_checkpoints_secs, save_steps=save_checkpoints_steps)
        )
    if log_step_count_steps is not None:
        hooks.append(_T.StepCounterHook(every_n_steps=log_step_count_steps, output_dir=model_dir))
    if scaffold is not None:
        hooks.append(_T.SummarySaverHook(save_steps=save_summary_steps, output_dir=model_dir, scaffold=scaffold))
    hooks.append(_T.NanTensorHook("loss"))
    if log_step_count_steps is not None:
        hooks.append(_T.LoggingTensorHook({"loss": _LOSS_NAME, "step": _STEP_NAME}, every_n_iter=log_step_count_steps))
    return hooks
