"""`HookCallback`: TF1 hooks (`SessionRunHook`) run inside Keras `fit`, `evaluate` and `predict`.

The mapping, for a callback of mode "train" (Keras events on the left; "eval"
uses the `on_test_*` events, "predict" the `on_predict_*` events):

  on_train_begin:
    check the call; nothing of the hooks runs yet
  on_train_batch_begin, the run's first (or on_train_end of a run of no batch):
    # after every callback's on_train_begin, so the hooks see the step that one
    # restored there (BackupAndRestore), as TF1 hooks saw it restored from model_dir
    global step = optimizer.iterations      # HookCallback(optimizer=...), else model.optimizer's
    graph = a new adapter graph (global step, log-key tensors, a saver of the
            Keras model in SAVERS, and, when hook code asks for them, the
            model's and optimizer's variables as TF1 variables), made default,
            in the model's tf.distribute strategy (cross-replica context)
    if hooks is a factory: hooks = hooks()  # may build ops over log tensors
    call hooks.begin()                      # in list order; may build ops
    finalize graph
    if hooks built ops or init_from_checkpoint was called: make the real
        session (restored variables go into the Keras model)
    call hooks.after_create_session(session, coord)
  on_train_batch_begin:
    run_context = SessionRunContext(original_args, session)   # shared by all hooks
    # original_args.fetches: None; in predict, the "outputs" tensor (as
    # Estimator's predict loop ran its predictions)
    call hooks.before_run(run_context)      # each returns None or SessionRunArgs
    the run's first: unless values == "running_mean", or if hook code has named the batch's
        tensors (features, labels, sample_weight, predictions; see _tensors):
        model.train_function = the model's own step, which also returns each
        batch's own values and those tensors (built once per model, see _batch)
  (Keras runs the train step)
  on_train_batch_end(logs):
    values = the batch's own values, or the logs (values="running_mean"; in eval
             by default, the logs for metric keys and the batch's for losses)
    if any hook fetched an op of the graph: one real Session.run, with the
        values and the model variables' Keras values fed or loaded; what it
        wrote to model variables is assigned to the Keras variables
    call hooks.after_run(run_context, SessionRunValues(results, the step's merged RunOptions,
                                                       RunMetadata()))   # see docs/errors.md
    if run_context.stop_requested: model.stop_training = True
    (multi-worker: the stop is agreed across workers first, see below)
  on_train_end:
    call hooks.end(session)                 # eval: log keys give evaluate()'s results
    close session, flush summary writers, give the model its own train_function

In TF1 graph mode (tf_keras after `tf.compat.v1.disable_eager_execution()`), the hooks
run in Keras's own graph and Session instead, their requests joining the step's own
`Session.run` (`hooks2callbacks._graph_mode`, whose docstring has its mapping); a Keras 3
model there is refused at on_train_begin.

The hooks of a run are, in one process, `chief_only_hooks` then `hooks`; across
several processes (tf.distribute workers, JAX processes, torch.distributed ranks;
see `_cluster`), `hooks` then, on the chief only, `chief_only_hooks`: the orders
of `MonitoredTrainingSession(hooks, chief_only_hooks)` (its non-distributed path,
and under the distribute coordinator). One process alone is the chief.

What `results` holds, per hook:
  * the structure of its fetches, leaf by leaf: a log key gives, as a numpy
    float32, in train mode that batch's own loss or metric value, as a TF1
    tensor held it; in eval mode a key of the compiled loss (`"loss"`, and
    a multi-output model's `"<output>_loss"`) the batch's loss, as
    `EstimatorSpec.loss` held it, and a metric key (whatever its name: a
    metric named `"eval_loss"` too) the
    evaluation's aggregate so far, as TF1's streaming eval metrics held it
    (Keras's own logs); in eval's `end()` every log key the evaluation's
    result, what `evaluate()` returns (`values=` makes every key one or the
    other during the steps); the global step
    gives its *stale* value (from before this step's increment, as in TF1), the
    batch's tensors (`"features"`, `"labels"`, `"sample_weight"`,
    `"predictions"`) that step's arrays, a
    derived tensor gives the value the graph run computed for it, a model
    variable its value after the step's update;
  * when `before_run` returned None: a read-only mapping of the step's values.

On stop: the step that requested it is the last the hooks see; Keras still
finishes the epoch's bookkeeping (`on_epoch_end`, validation) and then `end()`
runs. tf_keras cannot stop `evaluate()` or `predict()` early: there the loop runs
on, but the hooks see no further batch. Under multi-worker training, a stop
requested on any process (a chief-only hook, or a hook that reads a local clock)
stops every process after that same step: each batch end, the processes share
their outcomes with one tiny collective (`_cluster`: tf.distribute's workers,
JAX processes, torch.distributed ranks), so none is left waiting in an
all-reduce. A hook that raises on one process ends every process after that
step (its error is held until the step's collective; an error from
before_run comes after the step ran): the others raise a RuntimeError naming
the process and the hook.

On error: an exception raised by a hook propagates unchanged, with a note that
names the hook and method. As in TF1, `after_run` of the failing step and all
`end()` calls are skipped; the session is closed, summary writers are flushed
and the model gets its own train function back. When Keras itself raises, it calls no callback; the run left open is
closed (without `end()`), and the model gets its own train function back, at the
first of: the end of the Jupyter cell, the model's next `fit`, `evaluate` or
`predict` (hooked or not), `HookCallback.close()`, leaving a `with
HookCallback(...)` block, the next run of any HookCallback in the thread,
interpreter exit (see `hooks2callbacks._runs`).

In a training loop of the user's own (`keras.callbacks.CallbackList([callback],
model=model)` driven by hand; docs/custom-loops.md): on_train_begin sets
`model.stop_training = False`, as fit does; the logs the loop passes to
on_train_batch_end are the step's values (`"loss"` as passed, the batch's tensors
under their names when passed; `_batch_logs.LoopLogs`), and the model's compiled step
is left as it is. Batch values of the compiled step serve only a batch for which
it ran. A batch after a stop, or without on_train_begin, is warned of once a run.

A callback listed k times in one call gets each event k times in a row; the
first of each k goes to the hooks (with a warning), so they run once per event.

The global step counts the optimizer's applied updates. It is counted, one a
batch, where a batch callback means one update; read from `optimizer.iterations`
where it need not: under `steps_per_execution=N`, each batch callback covers up
to N steps and counts as its last (the stale global step is the new step minus
one); under gradient accumulation, a micro-batch that applied no update leaves
the step, stale and new, as it was.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any, cast

import keras
import tensorflow as tf

from hooks2callbacks import _graph_mode, _runs
from hooks2callbacks._arguments import hooks_argument, names_argument, optimizer_argument
from hooks2callbacks._batch import loss_keys
from hooks2callbacks._cluster import GO_ON, RAISED, STOP, Cluster, cluster_of, is_default
from hooks2callbacks._dispatch import HookRunner
from hooks2callbacks._flavours import is_tf_keras
from hooks2callbacks._hook_list import Hooks, is_factory, steps_per_execution
from hooks2callbacks._keras_state import (
    LoopState,
    accumulation_steps,
    global_step_of,
    has_weights,
    lend_optimizer,
    optimizer_of,
    return_optimizer,
)
from hooks2callbacks._rerun import note_traps
from hooks2callbacks._seams import context
from hooks2callbacks._tensors import prediction_logs

MODES = ("train", "eval", "predict")
VALUES = ("batch", "running_mean")
_STOP_ATTRIBUTE = {"train": "stop_training", "eval": "stop_evaluating", "predict": "stop_predicting"}
_BATCH_EVENT = {"train": "on_train_batch", "eval": "on_test_batch", "predict": "on_predict_batch"}
_BEGIN_EVENT = {"train": "on_train_begin", "eval": "on_test_begin", "predict": "on_predict_begin"}
_KERAS_CALL = {"train": "fit()", "eval": "evaluate() or fit(validation_data=...)", "predict": "predict()"}


def _build_optimizer(model: Any, strategy: tf.distribute.Strategy) -> None:
    """Creates the optimizer's slot variables now, if Keras would only at the first step (tf_keras).

    Hooks see them in `begin()`, as TF1 hooks saw the slots the graph held.
    """
    optimizer = optimizer_of(model)
    # Keras 3: `built`; tf_keras: `_built`, set only once built.
    built = getattr(optimizer, "built", None)
    if built is None:
        built = getattr(optimizer, "_built", False)
    if optimizer is None or built or not callable(getattr(optimizer, "build", None)) or not has_weights(model):
        return
    # In the optimizer's name scope, as when Keras builds it in its first step.
    with context.eager_mode(), strategy.scope(), tf.name_scope(getattr(optimizer, "name", None) or "optimizer"):
        optimizer.build(model.trainable_variables)


class HookCallback(keras.callbacks.Callback):
    """Runs TF1 hooks (`SessionRunHook`) as a Keras callback.

    The same class works with Keras 3 (any backend) and with tf_keras (Keras 2):
    pass it to either's `fit`, `evaluate` or `predict`.

    Example:

    ```python
    hooks = [
        tf.compat.v1.train.StopAtStepHook(last_step=500),
        tf.compat.v1.train.LoggingTensorHook(["loss", "accuracy"], every_n_iter=100),
    ]
    writers = [tf.compat.v1.train.CheckpointSaverHook(model_dir, save_steps=100)]  # the chief only
    model.fit(x, y, epochs=10, callbacks=[HookCallback(hooks, chief_only_hooks=writers)])
    eval_hooks = [tf.compat.v1.train.LoggingTensorHook(["loss"], every_n_iter=10)]
    model.evaluate(x, y, callbacks=[HookCallback(eval_hooks, mode="eval")])
    ```

    Args:
        hooks: One hook or a sequence of hooks, called in order on every worker.
            A hook is any object with some of `begin`, `after_create_session`,
            `before_run`, `after_run` and `end`; missing methods are no-ops. Or a
            zero-argument function returning them: it is called at the start
            of each run with the adapter graph as default graph, so it can
            build ops such as summaries over `log_tensor("loss")`, as a TF1
            `model_fn` built them.
        mode: `"train"` (the `fit` loop), `"eval"` (`evaluate`, and each
            validation pass inside `fit`) or `"predict"`. Defaults to `"train"`.
        chief_only_hooks: Hooks called only on the chief worker, as with
            `MonitoredTrainingSession(chief_only_hooks=...)`: before `hooks` in one
            process, after them across workers (its two orders). Hooks that
            write files (checkpoints, summaries, step counters). Defaults to none.
            A sequence or a factory, as `hooks`.
        is_chief: Whether this process is the chief. Defaults to `None`: ask the
            cluster (`hooks2callbacks._cluster`): a non-chief worker of
            `MultiWorkerMirroredStrategy`, a `jax.distributed` process other
            than 0 and a `torch.distributed` rank other than 0 are not the
            chief; one process alone is. Set it to organise processes otherwise.
        values: What a log key's value is for the hooks. `"batch"`: the loss
            and each metric's value on that batch alone, as a TF1 tensor held
            it; Keras's step computes them alongside its own logs.
            `"running_mean"`: the logs as Keras reports them, aggregates since
            the epoch (or the evaluation) began. Defaults to `None`: `"batch"`
            in train and predict mode; in eval mode, key by key as a TF1 eval
            graph held them: a key of the compiled loss (`"loss"`, a
            multi-output model's `"<output>_loss"`) the batch's loss
            (`EstimatorSpec.loss`), a metric key, whatever its name, the
            aggregate since the evaluation began (a `tf.metrics` value). In eval mode a fetch in `end()` gives the
            evaluation's results whatever `values` is, so a summary written
            there equals `evaluate()`'s. Other callbacks, the progress bar and
            `History` get Keras's own logs either way.
        names: TF1 names that Keras calls differently, for hooks that use them
            by name: a dict from a TF1 name (`"cross_entropy"` or
            `"cross_entropy:0"`) to a Keras log key or another name (`"loss"`,
            `"learning_rate"`, `"dense/kernel"`), or to a Keras variable
            (`model.optimizer.learning_rate`). A hook that fetches the TF1
            name, looks it up with `graph.get_tensor_by_name`, or builds ops on
            it then gets the log value or the variable. Defaults to none.
        keep_checkpoint_max: How many of the newest checkpoints a
            `CheckpointSaverHook` keeps, as Estimator's
            `RunConfig(keep_checkpoint_max=...)`; None keeps all. Defaults to
            5, what TF1's default saver kept.
        optimizer: The optimizer that trains the model, for a training loop of
            your own where it is not `model.optimizer` (the model is not
            compiled, or trains with another one): its `iterations` is the
            global step, and its variables are the ones hooks see and
            checkpoints save. A Keras (or tf_keras) optimizer; a
            `torch.optim` optimizer is refused. Defaults to `model.optimizer`.

    Raises:
        TypeError: `hooks` or `chief_only_hooks` is not a hook, a sequence of
            hooks or a function, or holds a hook class or a hook that cannot run
            under Keras (`FeedFnHook`, `ProfilerHook`, a `CheckpointSaverHook`
            with its own saver); `is_chief` is not a bool or None; `names` is
            not a dict, or maps a name to something other than a str or a variable;
            `optimizer` is not a Keras optimizer (a `torch.optim` one, a class).
        ValueError: `mode` or `values` is not one of its choices,
            `keep_checkpoint_max` is not a positive int or None, a hook appears
            twice, or a name of `names` is not a tensor name (or the names map
            in a circle).
    """

    # tf_keras's CallbackList reads these; Keras 3 ignores them. No tensors in
    # logs: hooks get the floats TF1 gave them, converted by tf_keras itself.
    _supports_tf_logs = False
    # Every worker must run the callback, to take part in the stop agreement.
    _chief_worker_only = False

    def __init__(
        self,
        hooks: Any | Callable[[], Any],
        mode: str = "train",
        chief_only_hooks: Any | Callable[[], Any] = (),
        is_chief: bool | None = None,
        values: str | None = None,
        names: Mapping[str, Any] | None = None,
        keep_checkpoint_max: int | None = 5,
        optimizer: Any = None,
    ) -> None:
        super().__init__()
        if not isinstance(mode, str) or mode not in MODES:
            raise ValueError(f"HookCallback(mode=...) must be one of {MODES}, got {mode!r}.")
        if values is None and mode != "eval":
            values = "batch"
        # None in eval: TF1's eval graph held the batch's loss and streaming metrics.
        if values is not None and (not isinstance(values, str) or values not in VALUES):
            raise ValueError(
                f'HookCallback(values=...) must be one of {VALUES}, got {values!r}: "batch" gives '
                'hooks each batch\'s own loss and metric values (as TF1 tensors), "running_mean" '
                "Keras's logs as reported."
            )
        if is_chief is not None and not isinstance(is_chief, bool):
            raise TypeError(
                f"HookCallback(is_chief=...) must be True, False or None (ask the cluster), "
                f"got {is_chief!r} of type {type(is_chief).__name__}."
            )
        self.hooks: Hooks = hooks_argument(hooks, "hooks")
        self.chief_only_hooks: Hooks = hooks_argument(chief_only_hooks, "chief_only_hooks")
        # Factories make new hooks each run; only two lists can share one.
        both = not callable(self.hooks) and not callable(self.chief_only_hooks)
        for index, hook in enumerate(cast(Sequence[Any], self.chief_only_hooks) if both else ()):
            if any(hook is other for other in cast(Sequence[Any], self.hooks)):
                raise ValueError(
                    f"HookCallback(chief_only_hooks=...): item {index} ({type(hook).__name__}) is "
                    "also in hooks, so the chief would call it twice per event. List it in one "
                    "of the two."
                )
        self.names = names_argument(names)
        if keep_checkpoint_max is not None and (
            isinstance(keep_checkpoint_max, bool) or not isinstance(keep_checkpoint_max, int) or keep_checkpoint_max < 1
        ):
            raise ValueError(
                f"HookCallback(keep_checkpoint_max=...) takes a positive int (how many of the newest "
                f"checkpoints CheckpointSaverHook keeps, as Estimator's RunConfig(keep_checkpoint_max=...)) "
                f"or None to keep all, got {keep_checkpoint_max!r}."
            )
        self.keep_checkpoint_max = keep_checkpoint_max
        self.optimizer = optimizer_argument(optimizer)
        self.mode = mode
        self.values = values
        self.is_chief = is_chief
        self._runner: HookRunner | None = None
        self._pending: str | None = None  # the mode of a run whose hooks have not begun yet
        self._loop: FrameType | None = None  # and its Keras loop (see `_runs`)
        self._cluster: Cluster | None = None  # where several processes must agree on each step
        self._last_cluster: Cluster | None = None  # kept across runs: its collective is compiled once
        self._failure: Exception | None = None  # a hook's error held until the processes agree
        self._stopped = False
        self._in_fit = False
        self._reads_step = False
        # Listed k times in one Keras call, the callback gets each event k times in a row:
        # the first of each k goes to the hooks (see `_repeat`).
        self._copies = 1
        self._echo = 0
        # An eval-mode callback in fit(): whether a validation pass ran it (None: warned, or not in fit).
        self._ran_in_fit: bool | None = None
        # Driven by the user's own loop (keras.callbacks.CallbackList), not by Keras's fit/evaluate/predict.
        self._custom = False
        self._loop_state: LoopState | None = None  # a custom loop's state (`state()`)
        self._warned_idle = False

    def __repr__(self) -> str:
        text = f"HookCallback(mode={self.mode!r}, hooks={_describe(self.hooks)}"
        if self.chief_only_hooks:
            text += f", chief_only_hooks={_describe(self.chief_only_hooks)}"
        return text + ")"

    # -- tf_keras's CallbackList asks which batch events to call --------------

    def _implements_train_batch_hooks(self) -> bool:
        return self.mode == "train"

    def _implements_test_batch_hooks(self) -> bool:
        return self.mode == "eval"

    def _implements_predict_batch_hooks(self) -> bool:
        return self.mode == "predict"

    # -- run lifetime ----------------------------------------------------------

    def _start(self, mode: str) -> None:
        if mode != self.mode:
            raise ValueError(
                f"{self!r} was passed to a Keras {_KERAS_CALL[mode]} call, where its hooks would "
                f"never run. Use HookCallback(..., mode={mode!r}) there, or pass this callback "
                f"to {_KERAS_CALL[self.mode]}."
            )
        loop = _runs.loop_frame()
        if self._pending == mode and loop is not None and loop is self._loop:
            self._listed_again(mode)
            return
        self.close()
        model = self.model
        if _graph_mode.active():  # Keras 3 gets its error here, before Keras's own obscure one
            _graph_mode.check_model(repr(self), model, is_tf_keras(model), mode)
        self._custom = not _runs.in_keras_call(loop)
        if mode == "train" and self.optimizer is None and optimizer_of(model) is None:
            where = "a training loop" if self._custom else "fit()"
            raise ValueError(
                f"{self!r} was passed to {where} of a model without an optimizer (model.optimizer "
                "is None), so there is no global step for its hooks. In your own training loop, pass "
                "the optimizer that trains the model: HookCallback(hooks, optimizer=optimizer) (see "
                "the docs page 'Custom training loops', docs/custom-loops.md); for fit(), compile the "
                "model with one: model.compile(optimizer=..., loss=...)."
            )
        if mode == "train" and self._custom:
            # As fit() does before its first step; a loop checks it after each.
            model.stop_training = False
        # The hooks begin at the run's first batch, after every callback's on_*_begin:
        # as TF1 hooks saw the step restored from model_dir, they see the step that a
        # callback such as BackupAndRestore restores there, wherever it is listed.
        self._pending = mode
        self._loop = loop
        self._stopped = False
        self._cluster, self._failure = None, None
        self._warned_idle = False
        self._copies, self._echo = 1, 0

    def _listed_again(self, mode: str) -> None:
        """The same callback is in this call's callbacks once more: its hooks still run once per event."""
        self._copies += 1
        if self._copies == 2:
            warnings.warn(
                f"{self!r} is listed more than once in the callbacks of this Keras "
                f"{_KERAS_CALL[mode].split(' or ')[0]} call (a notebook cell that runs "
                "callbacks.append(callback) again does this). Its hooks run once per event, "
                "as if it were listed once; pass it once to silence this warning.",
                UserWarning,
                stacklevel=4,
            )

    def _repeat(self) -> bool:
        """Whether this call repeats the event just handled, for a callback listed more than once."""
        if self._copies == 1:
            return False
        self._echo = (self._echo + 1) % self._copies
        return self._echo != 1

    def _begin(self, mode: str, steps: bool = True) -> None:
        """Begins the hooks of the pending run; `steps=False` for a run of no batch (no step to wrap)."""
        self._pending = None
        loop, self._loop = self._loop, None
        model = self.model
        lent = mode == "train" and self.optimizer is not None
        if lent:
            lend_optimizer(model, self.optimizer)  # the runner gives it back when it closes
        try:
            self._make_runner(mode, steps, loop, lent)
        except BaseException:
            if lent and self._runner is None:
                return_optimizer(model)
            raise
        cast(HookRunner, self._runner).begin()

    def _make_runner(self, mode: str, steps: bool, loop: FrameType | None, lent: bool) -> None:
        model = self.model
        cluster = self._last_cluster = cluster_of(model, self._last_cluster)
        strategy = cluster.strategy
        chief = cluster.is_chief if self.is_chief is None else self.is_chief
        # As MonitoredTrainingSession orders them: in one process chief_only_hooks come
        # first (its non-distributed path); under the distribute coordinator, after hooks.
        if not chief:
            hooks: tuple[Hooks, ...] = (self.hooks,)
        elif cluster.several:
            hooks = (self.hooks, self.chief_only_hooks)
        else:
            hooks = (self.chief_only_hooks, self.hooks)
        if _graph_mode.active():  # tf_keras's v1 loop: the hooks run in its graph and Session
            self._reads_step = False
            self._runner = _graph_mode.GraphModeRunner(  # type: ignore[assignment]
                hooks, model, mode, repr(self), loop, self.keep_checkpoint_max
            )
            return
        # Every process leaves the loop after the same step. tf_keras cannot stop
        # evaluate() or predict() (its loops run on), so there only training agrees;
        # Keras 3's loops (JAX) and a loop of the user's own (PyTorch) stop in any mode.
        agrees = cluster.several and (mode == "train" or cluster.engine != "tf.distribute")
        self._cluster = cluster if agrees else None
        if mode == "train":
            _build_optimizer(model, strategy)  # on every worker alike: its variables are collective
        # Across workers, the hooks' graph cannot run in the strategy: its session
        # is local to this worker, and the strategy's ops are collectives placed
        # on the cluster's devices.
        across_workers = cluster.engine == "tf.distribute"
        # Where a batch callback need not mean one update, the step is read from the optimizer.
        self._reads_step = mode == "train" and (
            steps_per_execution(model) != 1 or accumulation_steps(optimizer_of(model)) != 1
        )
        step = global_step_of(model)
        if mode == "train" and self._custom:
            self._loop_state = LoopState(model, optimizer_of(model), self._writer)
        if mode == "train":  # a factory's hooks are new each run
            note_traps([h for source in hooks if not is_factory(source) for h in cast(Sequence[Any], source)], step)
        self._runner = HookRunner(
            hooks,
            model,
            step,
            advances=mode == "train",
            name=repr(self),
            # In the user's own loop, the model's compiled step does not run: the loop's
            # logs are the step's values (`_batch_logs.LoopLogs`).
            batch_mode=mode if mode != "predict" and steps and not self._custom else None,
            loop_logs=self._custom,
            loop_state=self._loop_state if mode == "train" and self._custom else None,
            lent_optimizer=lent,
            batch_values=self.values != "running_mean",
            batch_keys=loss_keys(model) if self.values is None else None,
            names=self.names,
            strategy=None if is_default(strategy) or across_workers else strategy,
            outside_strategy_note=_ACROSS_WORKERS if across_workers else None,
            loop=loop,
            keep_checkpoint_max=self.keep_checkpoint_max,
            original_fetches="outputs" if mode == "predict" else None,
        )

    def _finish(self) -> None:
        if self._pending is not None:  # a run of no batch: TF1 hooks began and ended all the same
            self._begin(self._pending, steps=False)
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.end()

    def __enter__(self) -> HookCallback:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def state(self) -> tuple[list[Any], list[Any], list[Any]]:
        """The state of a stateless training loop (keras.io's JAX loop), for its next step.

        The loop passes its state with the logs, `callbacks.on_train_batch_end(step,
        {"loss": loss, "state": state})`, as `(trainable_values, non_trainable_values,
        optimizer_values)` (the optimizer's, given as `HookCallback(optimizer=...)`).
        The values reach the Keras variables only when hook code reads or writes one
        (a fetch by name, a checkpoint, an assign op), so steps whose hooks touch no
        variable cost nothing. Take the state back after `on_train_begin()` and after
        each `on_train_batch_end(...)`: `state = callback.state()`.

        Returns:
            The state passed last, or, where hooks wrote variables since (an assign op,
            `init_from_checkpoint`), or before any was passed, the variables' values.

        Raises:
            RuntimeError: No custom training loop run has begun with this callback.
        """
        if self._pending == "train" and self._custom:
            self._begin(self._pending)  # hooks' begin() runs now, as at the first batch: it may write
        if self._loop_state is None:
            raise RuntimeError(
                f"{self!r}.state() gives a custom training loop its state, and no such run has begun: "
                "call callbacks.on_train_begin() first (docs/custom-loops.md)."
            )
        return self._loop_state.take()

    def _writer(self) -> str:
        runner = self._runner
        return "HookCallback" if runner is None else runner.caller

    def close(self) -> None:
        """Closes a run that an exception in Keras left open, without calling `end()`.

        The next run's `begin` (of any `HookCallback` in the thread) does this
        too, and so does leaving `with HookCallback(...) as callback:`. Call it
        to release the session and flush writers right after a failed `fit`.
        """
        self._pending = self._loop = None
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.close()

    def _batch_begin(self, batch: int) -> None:
        if self._copies != 1 and self._repeat():
            return
        try:
            if self._pending is not None:
                self._begin(self._pending)
            runner = self._runner
            if runner is not None and not self._stopped:
                runner.before_run()
            else:
                self._idle_batch()
        except Exception as error:
            if self._cluster is None or self._runner is None:
                raise
            # The other processes are about to run this step, whose collectives need this
            # process too: it runs the step, and the error ends every process after it.
            self._failure = error

    def _idle_batch(self) -> None:
        """A batch whose hooks do not run: says why once a run, where a loop may not know."""
        if self._warned_idle or (self._stopped and not self._custom):
            return  # Keras's own loops stop (tf_keras's evaluate cannot: documented)
        self._warned_idle = True
        event = _BATCH_EVENT[self.mode]
        if self._stopped:
            message = (
                f"{self!r}: batches keep coming after a hook requested a stop (model."
                f"{_STOP_ATTRIBUTE[self.mode]} is True), and the hooks see none of them, as after "
                "MonitoredSession.should_stop(). End the loop when the flag is set: "
                f"`if model.{_STOP_ATTRIBUTE[self.mode]}: break` after callbacks.{event}_end(...)."
            )
        else:
            message = (
                f"{self!r} got {event}_begin with no run begun, so its hooks do not run. Call "
                f"callbacks.{_BEGIN_EVENT[self.mode]}() before the loop's first batch, and "
                f"callbacks.{_BEGIN_EVENT[self.mode].replace('begin', 'end')}() after its last."
            )
        warnings.warn(message, UserWarning, stacklevel=4)

    def _batch_end(self, batch: int, logs: Any, mode: str) -> None:
        if self._copies != 1 and self._repeat():
            return
        runner = self._runner
        failure, self._failure = self._failure, None
        if runner is None or self._stopped:
            return
        stop = False
        if failure is None:
            try:
                stop = self._after_run(runner, logs, mode)
            except Exception as error:
                if self._cluster is None:
                    raise
                failure = error
        if self._cluster is not None:
            stop = self._agree(self._cluster, stop, failure)
        if stop:
            # The hooks' loop is over even where Keras cannot stop (tf_keras's evaluate).
            self._stopped = True
            setattr(self.model, _STOP_ATTRIBUTE[mode], True)

    def _after_run(self, runner: HookRunner, logs: Any, mode: str) -> bool:
        if mode == "predict" and logs:
            # Keras before 3.12 hands callbacks the predicted batch as backend tensors
            # (later Keras as numpy arrays, as a TF1 session.run returned them).
            logs = tf.nest.map_structure(
                lambda v: keras.ops.convert_to_numpy(v) if keras.ops.is_tensor(v) else v, dict(logs)
            )
            if "outputs" not in logs:
                # Keras 3.12+ flattens a dict of outputs into the logs themselves: "outputs"
                # gives the dict back, as the model's predictions (Estimator's dict of them).
                logs["outputs"] = dict(logs)
            if runner.graph.batch_names:
                logs.update(prediction_logs(logs["outputs"], self.model))
        return runner.after_run(logs or {}, global_step_of(self.model) if self._reads_step else None)

    def _agree(self, cluster: Cluster, stop: bool, failure: Exception | None) -> bool:
        """The step's outcome on every process: whether to stop; raises where any hook raised.

        One collective per step; a second, only after an error, shares its text, so that
        every process ends after this same step, naming the process and the hook.
        """
        outcomes = cluster.agree(RAISED if failure is not None else STOP if stop else GO_ON)
        if RAISED not in outcomes:
            return STOP in outcomes
        texts = cluster.share_error(None if failure is None else _error_text(failure, self._writer()))
        if failure is not None:
            if hasattr(failure, "add_note"):
                failure.add_note(
                    f"Process {cluster.index} of {cluster.count} ({cluster.engine}); HookCallback told the "
                    "other processes, which end after this same step with an error naming this one."
                )
            raise failure
        raised = "; ".join(f"process {i}: {texts[i]}" for i, outcome in enumerate(outcomes) if outcome == RAISED)
        raise RuntimeError(
            f"{self!r}: a hook raised on another process of this {cluster.engine} job, so this process "
            f"(process {cluster.index} of {cluster.count}) ends too, after the same step. {raised}"
        )

    # -- Keras events ------------------------------------------------------------

    def on_train_begin(self, logs: Any = None) -> None:
        self._in_fit = True
        if self.mode != "eval":  # eval-mode callbacks run on the validation passes
            self._start("train")
        else:
            self._ran_in_fit = False

    def on_train_end(self, logs: Any = None) -> None:
        self._in_fit = False
        if self.mode == "train" and not self._repeat():
            self._finish()
        elif self.mode == "eval" and self._ran_in_fit is False:
            self._ran_in_fit = None
            warnings.warn(
                f"{self!r} was passed to fit(), which ran no validation pass, so its hooks never "
                "ran. An eval-mode HookCallback runs on fit()'s validation passes: pass "
                "validation_data=... (and a validation_freq that falls within the epochs), or "
                "pass it to evaluate().",
                UserWarning,
                stacklevel=2,
            )

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.mode == "train":
            self._batch_begin(batch)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.mode == "train":
            self._batch_end(batch, logs, "train")

    def on_test_begin(self, logs: Any = None) -> None:
        # A train-mode callback ignores the validation passes inside fit().
        if self.mode == "eval" or not self._in_fit:
            self._start("eval")
            if self._ran_in_fit is False:
                self._ran_in_fit = True

    def on_test_end(self, logs: Any = None) -> None:
        if self.mode == "eval" and not self._repeat():
            self._finish()

    def on_test_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.mode == "eval":
            self._batch_begin(batch)

    def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.mode == "eval":
            self._batch_end(batch, logs, "eval")

    def on_predict_begin(self, logs: Any = None) -> None:
        self._start("predict")

    def on_predict_end(self, logs: Any = None) -> None:
        if self.mode == "predict" and not self._repeat():
            self._finish()

    def on_predict_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.mode == "predict":
            self._batch_begin(batch)

    def on_predict_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.mode == "predict":
            self._batch_end(batch, logs, "predict")


_ACROSS_WORKERS = (
    "HookCallback: under MultiWorkerMirroredStrategy the hooks' begin(), after_create_session() "
    "and end() run outside the strategy, in a graph whose session is local to this worker: "
    "tf.distribute.get_strategy() is the default strategy there and in_cross_replica_context() is "
    "False, and the strategy's collective ops cannot run. Hooks that need it run under "
    "MirroredStrategy (one worker); across workers, use the stop agreement of HookCallback (a "
    "stop requested on any worker stops all)."
)


def _error_text(error: BaseException, caller: str) -> str:
    """What another process says of `error`: its type, its message and the hook method that raised it."""
    notes = [n for n in getattr(error, "__notes__", ()) if n.startswith("Raised in ")]
    where = notes[0] if notes else f"Raised in {caller}, called by HookCallback."
    return f"{where} {type(error).__name__}: {error}"


def _describe(hooks: Hooks) -> str:
    if callable(hooks):
        return str(getattr(hooks, "__qualname__", repr(hooks)))
    return f"[{', '.join(type(h).__name__ for h in hooks)}]"
