"""Every reliance on what Keras, tf_keras, TensorFlow and JAX do not publish, in one place.

A new Keras can break only what is listed here. Each seam is one function (or,
for TensorFlow's private modules, one import) that names the versions it was
checked on and what happens when the internal is missing: a fallback, or a
loud error. `tests/test_seams.py` exercises each on the versions CI runs: the
newest and the floor of `setup.cfg` (`.ci/floor.txt`).

Each seam, what it reaches, and what happens when that is missing:

* `keras3_multi_step`: the closure of Keras 3's TF `train_function`. None, so
  Keras's own call serves (speed only).
* `keras3_train_batch`: Keras 3's TF `train_function` called with an iterator of
  one batch, as its `train_on_batch` calls it. None, so the caller fits one batch (speed only).
* `keras3_metric_containers`: `model._compile_metrics` and `._compile_loss`.
  Metrics built in the first step are not recorded: their keys are a BatchValueError.
* `keras3_compile_metrics_leaves`: `CompileMetrics.metrics` and `.built`. ImportError.
* `tf_keras_metric_containers`: `model.compiled_metrics` and `.compiled_loss`. As Keras 3's.
* `tf_keras_loss_metric`: `compiled_loss._total_loss_mean`. RuntimeError, never a
  running mean passed off as the batch's loss.
* `compiled_loss_keys`: the metrics of the compiled loss (Keras 3's `model._compile_loss`,
  tf_keras's `model.compiled_loss`). None, and the keys are made from `model.output_names`.
* `tf_keras_test_runner`: the `test_function_runner` local of tf_keras's
  `evaluate`. RuntimeError naming `values="running_mean"`.
* `optimizer_micro_steps`: Keras 3's `optimizer._iterations` under gradient
  accumulation. AttributeError.
* `jax_nested_tracer`: the class name of JAX's `jit` tracer. Every traced value
  counts as nested: a BatchValueError, never a wrong value.
* `_model._redirect_assigns`: `tf.compat.v1` as two module objects made from one
  file (`tensorflow._api.v2.compat.v1`, and `tensorflow.compat.v1` once imported), each in
  a `TFModuleWrapper` (`_tfmw_wrapped_module`). A module not found is an ImportError at
  import; a third one would keep TF's own `assign`, whose error gets its note.
* `keras3_close_stopped_epoch`: the `epoch_iterator` local of Keras 3's fit/evaluate/predict and
  its `EpochIterator._epoch_iterator` generator. Nothing is closed: the garbage collector frees
  the epoch's data later, as it does without hooks.
* `nan_hook_loss`: `NanTensorHook._loss_tensor` (`check_migration`'s TF1 side of
  `estimator_hooks`). AttributeError.
* `eager_outside_graph`: `context.eager_mode()`, an eager context while a (finalized) TF1 graph
  is the default (`CallbackHook` calls Keras callbacks in it). AttributeError at the call.
* `tf_keras_graph_step`: in TF1 graph mode (`_graph_mode`), tf_keras's `backend.GraphExecutionFunction`
  (the model's `train_function`/`test_function`, whose attributes `inputs`, `outputs`,
  `updates_op`, `feed_dict`, `fetches`, `fetch_callbacks`, `run_options`, `run_metadata` and
  `_outputs_structure` a joined step reads), `backend.get_session` and
  `BaseSession._make_callable_from_options`. RuntimeError naming graph mode and eager tf_keras.
* `graph_mode_on`: `context.default_execution_mode`, which `disable_eager_execution()` sets
  process-wide (true inside a `tf.Graph().as_default()` scope of an eager program too, where
  `executing_eagerly_outside_functions()` is not). ImportError at import, with `context`.
* `is_default_strategy`, and TensorFlow's private modules imported below (`context`,
  `ops`, `meta_graph`, `training_util`, `tensor_conversion_registry`,
  `resource_variable_ops`, `FileWriterCache`): ImportError at import.

Also private, but of TF objects this package makes itself (its own graphs,
variables and writers), used where they are; `tests/test_seams.py` and the suites
that use them run on both versions:
`ops._default_graph_stack`, `context.ContextSwitch`, `Graph._device_function_stack`
and the eager context's `_thread_local_data` (`_graph.DefaultGraphScope`);
`Graph._unsafe_unfinalize` (`_graph.Unsealed`); `Graph._distribution_strategy_stack`
and `._variable_creator_stack` (`_model`, making the mirror outside the model's
strategy); `RefVariable._ref()` and `DType._is_ref_dtype` (`_model`, `_graph`);
`FileWriterCache._lock` and `._cache` (`_runs`, closing the run's writers);
`Operation._add_control_input` (`migration._races`, ordering a read and a write that
`check_migration`'s own TF1 graph left unordered).

`CallbackHook` (`callback_hook`) relies on what Keras's callbacks read of a model, which its
stand-in provides: tf_keras's `TensorBoard` reads `model._train_counter`, `_test_counter`,
`_is_graph_network` and `train_tf_function`; both `TensorBoard`s `train_function` (checked on
Keras 3.15.1 and tf_keras 2.21.0; another attribute a callback reads is an AttributeError naming
the callback). The stand-in's learning rate sets `is_tensor_like`, which `tf.is_tensor` honours,
so that tf_keras's `backend.get_value` reads it as a number (checked on TF 2.21.0).

Not private, but a reliance on how Keras calls its own code: instance-level
overrides for a run with batch values (the model's `train_step`/`test_step`, its
`compute_metrics` and `compute_loss`, which record `y_pred` for the batch's tensors, its
metrics' `update_state` and `result`, their variables' `assign*`, the metric
containers' `build`; `_flavours.Patches`, undone at the run's end); the order of the step's
outputs (tf_keras orders its step counter after the first in `tf.nest`'s sorted order, so the keys
that carry values out of the step sort last: `_batch.BATCH_KEY`, `_tensors.TENSORS_KEY`); a tf_keras
metric's state variables held as its attributes (`_flavours._with_state` reads its `result()` with
tensors in their place); the model's `make_train_function`,
`make_test_function` and `make_predict_function`, which every `fit`, `evaluate` and `predict` calls
before its first step (`_runs._watch`, instance-level overrides while a run is open, to close a run an
interrupt left open; missing, the run is closed at the next run as before); during `check_migration`
only, `tf.compat.v1.summary.FileWriter.add_summary` wrapped (which hook wrote a summary) and
`tf.compat.v1.layers` pointed at tf_keras's legacy layers (a `model_fn` under Keras 3), both put back
after (`migration`); stack frames: the Keras loop of a run
(`_runs.loop_frame`, Keras's `CallbackList` calls `on_*`), TF's own collection reads
(`_graph._called_by_hook_code`, `_graph._exporting_meta_graph`); and, for an error's
note only, the frame of `tf.compat.v1.assign*` in a traceback (`_hook_errors`).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

import keras

# TensorFlow's private modules, imported here only (checked on TF 2.18.1 and 2.21.0).
from tensorflow.python.distribute import distribute_lib
from tensorflow.python.eager import context
from tensorflow.python.framework import meta_graph, ops, tensor_conversion_registry
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.summary.writer.writer_cache import FileWriterCache
from tensorflow.python.training import training_util

# The hook contract's classes, public as tf.compat.v1.train.*; from their module, for their types.
from tensorflow.python.training.session_run_hook import (
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)

__all__ = [
    "FileWriterCache",
    "SessionRunArgs",
    "SessionRunContext",
    "SessionRunHook",
    "SessionRunValues",
    "context",
    "eager_outside_graph",
    "is_default_strategy",
    "jax_nested_tracer",
    "keras3_close_stopped_epoch",
    "keras3_compile_metrics_leaves",
    "keras3_metric_containers",
    "keras3_multi_step",
    "meta_graph",
    "ops",
    "optimizer_micro_steps",
    "resource_variable_ops",
    "tensor_conversion_registry",
    "graph_mode_on",
    "tf_keras_graph_step",
    "keras3_train_batch",
    "tf_keras_loss_metric",
    "tf_keras_metric_containers",
    "tf_keras_test_runner",
    "training_util",
]


def keras3_multi_step(function: Any) -> Any:
    """The compiled multi-step function inside Keras 3's TensorFlow `train_function`/`test_function`.

    `TensorFlowTrainer._make_function` returns a Python function whose closure
    holds `multi_step_on_iterator`, a `tf.function` returning the step's outputs
    in a `tf.experimental.Optional`. Checked on Keras 3.8.0 and 3.15.1.

    Returns:
        That `tf.function`, or None where `function` has another shape (another
        Keras, `run_eagerly`): the caller then calls `function` as Keras made it.
    """
    names = getattr(getattr(function, "__code__", None), "co_freevars", ())
    cells = getattr(function, "__closure__", None) or ()
    if "multi_step_on_iterator" not in names:
        return None
    return cells[names.index("multi_step_on_iterator")].cell_contents


def keras3_train_batch(model: Any, x: Any, y: Any) -> Any:
    """One train step of a Keras 3 model on TensorFlow, its `train_step` handed `(x, y)` as by `fit`.

    Keras 3's `train_on_batch` hands the step `(x, y, sample_weight)`, None
    included, which a step written as keras.io's guide writes it (`x, y = data`)
    cannot unpack; a `fit` of one batch hands it `(x, y)` but builds a
    `tf.data` pipeline each time (~0.1 s). `train_on_batch`'s own path serves
    instead: `make_train_function()`, then `model.train_function` on an iterator
    of the one batch (`TensorFlowTrainer._make_function` steps through a Python
    iterator with `one_step_on_data`). Checked on Keras 3.8.0 and 3.15.1.

    Returns:
        The step's logs (`{"loss": tensor, ...}`, the metrics reset before it), or
        None on another backend or where the model has no `train_function` after
        `make_train_function()`: the caller then fits one batch.
    """
    if keras.backend.backend() != "tensorflow" or not callable(getattr(model, "make_train_function", None)):
        return None
    model.make_train_function()
    function = getattr(model, "train_function", None)
    if not callable(function):
        return None
    model.reset_metrics()
    return function(iter([(x, y)]))


def keras3_metric_containers(model: Any) -> list[Any]:
    """Keras 3's containers of compiled metrics and losses, which build their metrics lazily.

    Checked on Keras 3.8.0 and 3.15.1. Missing: an empty list, so metrics built
    in the first step are not recorded, and fetching their keys is a BatchValueError.
    """
    return [c for c in (getattr(model, "_compile_metrics", None), getattr(model, "_compile_loss", None)) if c]


def keras3_compile_metrics_leaves(model: Any) -> list[Any]:
    """The model's metrics, with Keras 3's `CompileMetrics` container opened into its metrics.

    Checked on Keras 3.8.0 and 3.15.1; a Keras without the class fails at import, loudly.
    """
    from keras.src.trainers.compile_utils import CompileMetrics  # pylint: disable=import-outside-toplevel

    found: list[Any] = []
    for metric in model.metrics:
        if isinstance(metric, CompileMetrics):
            found += metric.metrics if metric.built else []
        else:
            found.append(metric)
    return found


def tf_keras_metric_containers(model: Any) -> list[Any]:
    """tf_keras's `compiled_metrics` and `compiled_loss` (checked on tf_keras 2.18.0 and 2.21.0)."""
    return [c for c in (getattr(model, "compiled_metrics", None), getattr(model, "compiled_loss", None)) if c]


def tf_keras_loss_metric(model: Any) -> Any:
    """The `Mean` behind tf_keras's `"loss"` log key, or None for a model compiled without a loss.

    Checked on tf_keras 2.18.0 and 2.21.0.

    Raises:
        RuntimeError: The model has a compiled loss without this metric (another
            tf_keras), where hooks would otherwise get the running mean as the
            batch's loss.
    """
    compiled = getattr(model, "compiled_loss", None)
    if compiled is None:
        return None
    if not hasattr(compiled, "_total_loss_mean"):
        raise RuntimeError(
            "HookCallback cannot find the loss metric of this tf_keras version "
            "(compiled_loss._total_loss_mean), so it cannot give hooks each batch's own loss. Pass "
            "HookCallback(..., values='running_mean') to give them tf_keras's running means."
        )
    return compiled._total_loss_mean  # pylint: disable=protected-access


def compiled_loss_keys(model: Any) -> frozenset[str] | None:
    """The log keys of the model's compiled loss: `loss`, and each output's loss (`<output>_loss`) of a
    multi-output model, as Keras names the metrics that track them.

    Keras 3's `model._compile_loss` (a `CompileLoss`, whose per-output `Mean`s exist once it is
    built, in the first step; checked on Keras 3.8.0 and 3.15.1) or tf_keras's
    `model.compiled_loss` (a `LossesContainer`, whose `metrics` are its total and per-output
    `Mean`s once built; checked on tf_keras 2.18.0 and 2.21.0). A model compiled without a loss
    has none: `{"loss"}` (a Keras 3 model that overrides `compute_loss` logs its loss so). Keras
    3's `_compile_loss` is then None, and its `compiled_loss` is a deprecated method, not a
    container: it is read only where `_compile_loss` does not exist. Missing (another Keras):
    None, for the caller to make the keys from the model's output names.
    """
    if hasattr(model, "_compile_loss"):
        container = model._compile_loss  # pylint: disable=protected-access
    elif hasattr(model, "compiled_loss"):
        container = model.compiled_loss
    else:
        return None
    names = {"loss"}
    if container is not None:
        names.update(str(metric.name) for metric in container.metrics)
    return frozenset(names)


def tf_keras_test_runner(function: Any, replacement: Any) -> None:
    """Makes tf_keras's `evaluate` loop call `replacement` in place of `function`.

    tf_keras's `evaluate` hands `model.test_function` to a runner object
    (`test_function_runner`, a local of `evaluate`) before it calls
    `on_test_begin`, so setting the attribute alone comes too late. Checked on
    tf_keras 2.18.0 and 2.21.0.

    Raises:
        RuntimeError: No such runner is on the stack (another tf_keras version).
    """
    frame: FrameType | None = sys._getframe(1)  # pylint: disable=protected-access
    while frame is not None:
        runner = frame.f_locals.get("test_function_runner")
        if runner is not None and getattr(runner, "_function", None) is function:
            runner._function = replacement  # pylint: disable=protected-access
            return
        frame = frame.f_back
    raise RuntimeError(
        "HookCallback(mode='eval') could not find the test function runner of this tf_keras "
        "evaluate() call, so it cannot give hooks each batch's own values. Pass "
        "HookCallback(..., values='running_mean') to give them tf_keras's running means."
    )


def optimizer_micro_steps(optimizer: Any) -> Any:
    """Keras 3's count of micro-batches, of which `iterations` is `// gradient_accumulation_steps`.

    Checked on Keras 3.8.0 and 3.15.1.
    """
    return optimizer._iterations  # pylint: disable=protected-access


def jax_nested_tracer(values: Sequence[Any]) -> bool:
    """Whether JAX `values` belong to a transformation nested in the step's trace (`jax.grad`'s).

    Such tracers cannot leave that transformation: packed into the step's
    output, they fail with `UnexpectedTracerError`. The step's own trace under
    `jit` is a `DynamicJaxprTracer` (checked on JAX 0.10.2). A JAX that renames
    it makes every traced value count as nested: keys lose their batch value
    (a BatchValueError), never get a wrong one.
    """
    if keras.backend.backend() != "jax":
        return False
    import jax  # pylint: disable=import-outside-toplevel

    return any(isinstance(v, jax.core.Tracer) and type(v).__name__ != "DynamicJaxprTracer" for v in values)


def eager_outside_graph() -> Any:
    """A context manager in which TF executes eagerly, though a TF1 graph (finalized) is the default.

    `CallbackHook` calls Keras callbacks from a `MonitoredSession`'s hooks, where
    the finalized graph is the default: Keras 3's callbacks run TF2 ops
    (`keras.ops`, `tf.summary`), and both Keras packages create eager variables and
    summary writers, which that graph refuses ("Graph is finalized").
    `tf.init_scope()` leaves only function graphs. `context.eager_mode()` switches
    the thread to eager execution, so those ops run at once and add nothing to the
    graph. Checked on TF 2.18.1 and 2.21.0; missing, an AttributeError at the call.
    """
    return context.eager_mode()


def is_default_strategy(strategy: Any) -> bool:
    """Whether `strategy` is TF's default (no) strategy. Checked on TF 2.18.1 and 2.21.0."""
    return strategy is distribute_lib._get_default_strategy()  # pylint: disable=protected-access


def keras3_close_stopped_epoch(loop: FrameType | None) -> None:
    """Closes the epoch that Keras 3's `loop` (the frame of its fit/evaluate/predict) stopped in.

    `EpochIterator.__iter__` keeps the epoch's generator (`_epoch_iterator`),
    whose frame keeps the `EpochIterator`. A loop that stops mid-epoch (a hook's
    stop request) leaves that generator suspended: a cycle, which only the
    garbage collector breaks, holding the epoch's data iterator (a tf.data
    iterator's threads and buffers), which a later collection then deletes in
    whatever step it runs. Closing the generator, after the loop left it for
    good, breaks the cycle; the iterator goes with Keras's own loop, as a TF1
    session let go of its input when it closed. Checked on Keras 3.8.0 and
    3.15.1 (TensorFlow, JAX, PyTorch).

    Args:
        loop: The loop of a run that ends; a frame without that local (tf_keras's
            loops, a training loop of the user's own) is left as it is.
    """
    # Loaded by every Keras 3 loop; absent from a process that never ran one.
    epoch_iterator = getattr(sys.modules.get("keras.src.trainers.epoch_iterator"), "EpochIterator", None)
    epoch = None if loop is None else loop.f_locals.get("epoch_iterator")
    if epoch_iterator is None or not isinstance(epoch, epoch_iterator):
        return
    generator = getattr(epoch, "_epoch_iterator", None)
    if inspect.isgenerator(generator) and inspect.getgeneratorstate(generator) == inspect.GEN_SUSPENDED:
        generator.close()


def nan_hook_loss(hook: Any, loss: Any) -> None:
    """Gives a `NanTensorHook` made with the name `"loss"` the TF1 graph's loss tensor, as Estimator gave it.

    `estimator_hooks()` makes `NanTensorHook("loss")` for a Keras run (where
    `"loss"` is the log key); in `check_migration`'s TF1 graph the hook must
    fetch the model_fn's loss, as Estimator's did. The hook keeps it in
    `_loss_tensor` (checked on TF 2.18.1 and 2.21.0); missing, AttributeError.
    """
    if not hasattr(hook, "_loss_tensor"):
        raise AttributeError(f"{type(hook).__name__} has no _loss_tensor on this TensorFlow")
    hook._loss_tensor = loss  # pylint: disable=protected-access


def tf_keras_graph_step() -> tuple[type[Any], Any]:
    """tf_keras's graph-mode step function class and its `get_session`, for `_graph_mode`.

    Checked on tf_keras 2.21.0 (the floor, 2.18, not yet): `tf_keras.src.backend.GraphExecutionFunction` is what
    `model.train_function` and `model.test_function` are under `disable_eager_execution()`, and
    `get_session(inputs)` the Session they run in.

    Returns:
        `(GraphExecutionFunction, get_session)`.

    Raises:
        RuntimeError: This tf_keras has neither, so HookCallback cannot run hooks in its graph mode.
    """
    try:
        from tf_keras.src import backend  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        raise RuntimeError(_NO_GRAPH_STEP) from error
    step_class = getattr(backend, "GraphExecutionFunction", None)
    get_session = getattr(backend, "get_session", None)
    if step_class is None or get_session is None:
        raise RuntimeError(_NO_GRAPH_STEP)
    return step_class, get_session


_NO_GRAPH_STEP = (
    "HookCallback: this tf_keras has no tf_keras.src.backend.GraphExecutionFunction or get_session, "
    "through which HookCallback runs hooks in TF1 graph mode (checked on tf_keras 2.21). "
    "Run the model eagerly (without tf.compat.v1.disable_eager_execution()), or use a tf_keras "
    "of those versions."
)


def graph_mode_on() -> bool:
    """Whether `tf.compat.v1.disable_eager_execution()` (or `disable_v2_behavior()`) was called.

    Process-wide: False in an eager program even inside `with tf.Graph().as_default():`
    (the adapter graph). Checked on TF 2.21.0 (the floor, 2.18, not yet).
    """
    return bool(context.default_execution_mode == context.GRAPH_MODE)
