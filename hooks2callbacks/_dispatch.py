"""The one dispatch path: every call from the adapter into a hook goes through here.

`HookRunner` lives for one run (a `fit`, one validation pass, an `evaluate`) and
keeps TF1's `MonitoredSession` contract for it: list order, one shared
`SessionRunContext` per step, one real graph run per step at most, stop
requests, and what is skipped on error. `hooks2callbacks.callback` decides
*when* to call it; this module decides *how* hooks are called.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any, cast

import keras
import numpy as np
import tensorflow as tf

from hooks2callbacks import _runs
from hooks2callbacks._batch import BatchSource, LoopLogs, is_tf_keras
from hooks2callbacks._checkpoint import install_saver
from hooks2callbacks._fetch import Plan, check_feeds, compile_fetches, fetched
from hooks2callbacks._graph import AdapterGraph, DefaultGraphScope, log_key_of
from hooks2callbacks._model import Entry, LoopState, ModelMirror, register_loop_state, return_optimizer
from hooks2callbacks._seams import SessionRunArgs, SessionRunContext, SessionRunHook, SessionRunValues
from hooks2callbacks._session import NOTHING_RAN, AdapterSession
from hooks2callbacks._translate import refusal

HOOK_METHODS = ("begin", "after_create_session", "before_run", "after_run", "end")

# A list of hooks, or a zero-argument function that builds them in the adapter graph.
Hooks = Sequence[Any] | Callable[[], Any]

# Keras runs the step; outside predict, hooks have no caller's fetches to see.
_ORIGINAL_ARGS = SessionRunArgs(fetches=None)
_NO_OPTIONS = tf.compat.v1.RunOptions()
_NO_TRACE = tf.compat.v1.RunOptions.NO_TRACE


def _overridden(hook: Any, method: str) -> Callable[..., Any] | None:
    """Returns `hook.method`, or None when it is missing or SessionRunHook's no-op."""
    fn = getattr(hook, method, None)
    if getattr(type(hook), method, None) is getattr(SessionRunHook, method):
        return None
    return fn


# The stock hooks' before_run/after_run never use the default graph (checked
# for each of them), so a step of stock hooks alone skips the graph switch.
_STOCK_MODULE = "tensorflow.python.training.basic_session_run_hooks"


_SEES_VALUES = ("before_run", "after_run", "after_create_session", "end")


class _Bound:
    """A hook with its methods looked up once, and its fetch plan."""

    __slots__ = (
        "after_name",
        "after_run",
        "before_name",
        "before_run",
        "cached",
        "fetch_name",
        "hook",
        "needs_graph",
        "plan",
    )

    def __init__(self, hook: Any) -> None:
        self.hook = hook
        self.before_name = f"{type(hook).__name__}.before_run()"
        self.after_name = f"{type(hook).__name__}.after_run()"
        self.fetch_name = f"the fetches of {type(hook).__name__}.before_run"
        self.before_run = _overridden(hook, "before_run")
        self.after_run = _overridden(hook, "after_run")
        self.needs_graph = any(
            fn is not None and getattr(fn, "__module__", None) != _STOCK_MODULE
            for fn in (self.before_run, self.after_run)
        )
        self.cached: Plan | None = None
        self.plan: Plan | None = None


class _Guard:
    """The adapter graph as default graph (and the model's tf.distribute strategy);
    on an exception, the run is closed.

    For `begin` and `end`; the per-step methods do the graph part inline.
    """

    __slots__ = ("_runner", "_scope", "_strategy", "_strategy_scope")

    def __init__(self, runner: HookRunner, strategy: tf.distribute.Strategy | None) -> None:
        self._runner = runner
        self._scope = runner.graph.scope
        self._strategy = strategy
        self._strategy_scope: Any = None

    def __enter__(self) -> None:
        self._scope.__enter__()
        # As under a distributed Estimator: the hooks' begin/after_create_session/end
        # run in the model's strategy, in cross-replica context. Entered with the
        # adapter graph as default, the strategy's scope is on that graph only.
        if self._strategy is not None:
            self._strategy_scope = self._strategy.scope()
            self._strategy_scope.__enter__()

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        if self._strategy_scope is not None:
            scope, self._strategy_scope = self._strategy_scope, None
            scope.__exit__(kind, error, tb)
        if error is None:
            self._scope.__exit__(None, None, None)
        else:
            self._runner._abort(self._scope)  # pylint: disable=protected-access


class LogsView(Mapping[Any, Any]):
    """The results of a hook that fetched nothing: the step's logs, read-only.

    Indexable by log key (`'loss'`, `'loss:0'`) and by the adapter graph's
    tensor for a log key.
    """

    __slots__ = ("_logs", "_graph")

    def __init__(self, logs: Mapping[str, Any], graph: AdapterGraph) -> None:
        self._logs = logs
        self._graph = graph

    def __getitem__(self, key: Any) -> Any:
        name: str | None
        if isinstance(key, str):
            name = log_key_of(key)
        else:
            name = self._graph.placeholder_keys.get(key) if isinstance(key, tf.Tensor) else None
        if name is None or name not in self._logs:
            raise KeyError(f"{key!r} is not a log key of this step. Available log keys: {sorted(self._logs)}")
        return fetched(self._logs[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._logs)

    def __len__(self) -> int:
        return len(self._logs)

    def __repr__(self) -> str:
        return f"LogsView({dict(self._logs)!r})"


def _note_caller(error: BaseException, caller: str, graph: AdapterGraph) -> None:
    """Notes on `error` which hook method raised it, and the way out of the errors TF gives
    for an eager value in an op of the adapter graph."""
    if not hasattr(error, "add_note"):  # Python 3.10
        return
    error.add_note(f"Raised in {caller}, called by HookCallback.")
    assigned = _assigned_keras_variable(error)
    if assigned is not None:
        error.add_note(_assign_help(caller, *assigned, graph))
    elif _EAGER_CAPTURE in str(error):
        error.add_note(_EAGER_CAPTURE_HELP)


# TF's own tf.compat.v1.assign(ref, value) asks `ref.dtype._is_ref_dtype` (a Keras 3
# variable's dtype is a string) or calls `ref.assign`, eagerly (a tf_keras variable): neither
# can write a Keras variable from a TF1 graph. tf.compat.v1's are redirected
# (`_model._redirect_assigns`); TF's own, bound before that, still fail so, with this note.
_ASSIGNS = {
    getattr(f, "__wrapped__", f).__code__: f.__name__
    for f in (tf.compat.v1.assign, tf.compat.v1.assign_add, tf.compat.v1.assign_sub)
}


def _assigned_keras_variable(error: BaseException) -> tuple[str, Any] | None:
    """The `tf.compat.v1.assign*` function that failed with `error`, and its `ref` if that is eager (Keras)."""
    trace = error.__traceback__
    while trace is not None:
        function = _ASSIGNS.get(trace.tb_frame.f_code)
        if function is not None:
            ref = trace.tb_frame.f_locals.get("ref")
            eager = isinstance(ref, keras.Variable) or not getattr(ref, "_in_graph_mode", True)
            return (function, ref) if eager else None
        trace = trace.tb_next
    return None


def _assign_help(caller: str, function: str, ref: Any, graph: AdapterGraph) -> str:
    entry = graph.mirror.of_variable(ref) if graph.mirror is not None else None
    if entry is None:
        target = "the TF1 variable, found by name in tf.compat.v1.global_variables()"
        example = "variable"
    else:
        target = f"its TF1 variable, {entry.name + ':0'!r} in the adapter graph"
        example = f"tf.compat.v1.get_default_graph().get_tensor_by_name({entry.name + ':0'!r})"
    return (
        f"HookCallback: {caller} called tf.compat.v1.{function} on the Keras variable "
        f"{getattr(ref, 'path', None) or getattr(ref, 'name', ref)!r}, which TF cannot write from a TF1 "
        f"graph (ops may read a Keras variable, not assign it). Pass {target}: "
        f"tf.compat.v1.{function}({example}, value). The write reaches the Keras variable before "
        "Keras's next step, as for any write to a model variable."
    )


_EAGER_CAPTURE = "Attempting to capture an EagerTensor"
_EAGER_CAPTURE_HELP = (
    "HookCallback: an eager value (a Keras variable, or a tensor computed from one) was used in "
    "an op of the adapter graph. The model's variables have TF1 variables there: look them up by "
    "name (graph.get_tensor_by_name('learning_rate:0'), 'dense/kernel:0') or in "
    "tf.compat.v1.global_variables(), or map a variable with HookCallback(names={'lr': variable}). "
    "TF converts a variable passed to an op (tf.multiply(variable, 0.5)) to its TF1 variable, but a "
    "tf.Variable's own operators (variable * 0.5, in tf_keras) read the eager value, and so do JAX "
    "and PyTorch variables' operators, in their backend."
)


def is_hook(obj: Any) -> bool:
    """Whether `obj` is a hook instance: it has some of the hook methods."""
    return not isinstance(obj, type) and any(callable(getattr(obj, name, None)) for name in HOOK_METHODS)


def is_factory(obj: Any) -> bool:
    """Whether `obj` is a function that builds hooks, rather than hooks."""
    return callable(obj) and not is_hook(obj) and not isinstance(obj, type)


def as_hook_list(hooks: Any, where: str = "HookCallback(hooks=...)") -> list[Any]:
    """Validates `hooks` (one hook or a sequence of hooks) and returns it as a list.

    Args:
        hooks: What the user gave, or what their hooks factory returned.
        where: Names the origin of `hooks` in error messages.

    Returns:
        The hooks, in order.

    Raises:
        TypeError: `hooks` is not a hook or a sequence of hooks, or holds a
            hook class, a non-hook, or a hook that cannot run under Keras.
        ValueError: A hook instance appears twice.
    """
    if is_hook(hooks):
        # One hook without a list is checked as a list's items are.
        reason = refusal(hooks)
        if reason is not None:
            raise TypeError(f"{where} got {reason}")
        return [hooks]
    if isinstance(hooks, Mapping):
        raise TypeError(
            f"{where} got a dict ({type(hooks).__name__} with keys {list(hooks)[:5]!r}), whose items "
            "would be its keys. Pass the hooks themselves: list(hooks.values())."
        )
    if isinstance(hooks, (str, bytes, type)) or not isinstance(hooks, Iterable):
        raise TypeError(
            f"{where} takes a hook, a sequence of hooks or a zero-argument function returning "
            f"them, got {hooks!r} of type {type(hooks).__name__}. A hook is any object with "
            f"some of {', '.join(HOOK_METHODS)}, such as a tf.compat.v1.train.SessionRunHook."
        )
    hook_list = list(hooks)
    seen: set[int] = set()
    for index, hook in enumerate(hook_list):
        if isinstance(hook, type):
            raise TypeError(
                f"{where}: item {index} is the class {hook.__name__}, not an instance of it. Pass {hook.__name__}(...)."
            )
        if not is_hook(hook):
            raise TypeError(
                f"{where}: item {index} is {hook!r} of type {type(hook).__name__}, which has "
                f"none of the hook methods {', '.join(HOOK_METHODS)}. Pass "
                "tf.compat.v1.train.SessionRunHook instances, or objects with some of those methods."
            )
        reason = refusal(hook)
        if reason is not None:
            raise TypeError(f"{where}: item {index} is {reason}")
        if id(hook) in seen:
            raise ValueError(
                f"{where}: item {index} ({type(hook).__name__}) appears twice in the list. "
                "Each hook instance would be called twice per event; pass it once."
            )
        seen.add(id(hook))
    return hook_list


class HookRunner:
    """Calls a list of hooks through one run, as `MonitoredSession` would.

    Args:
        sources: Where the hooks come from, in call order: each a sequence of
            hooks, or a zero-argument function that returns them. A function is
            called in `begin`, with the adapter graph as default graph, so it
            can build ops over the log-key tensors.
        model: The Keras model.
        step: The global step at the start of the run.
        advances: Whether the run's steps advance the global step (training).
        name: Names the run in messages (the callback's repr).
        batch_mode: `"train"` or `"eval"`: the mode of the model's step, which
            may give hooks each batch's own values and tensors (see
            `hooks2callbacks._batch` and `._tensors`); None where it cannot (predict,
            a run of no step).
        batch_values: Whether hooks get each batch's own values (else the logs
            as Keras reports them).
        batch_keys: Which log keys get their batch value (the others Keras's
            logs); None for every key. In eval mode `end()` sees Keras's logs,
            the evaluation's results, for every key.
        names: The names map: TF1 name -> log key, name, or Keras variable.
        strategy: The model's `tf.distribute` strategy, in which `begin`,
            `after_create_session` and `end` run; None for none.
        outside_strategy_note: Noted on an exception from those methods when
            they run outside the model's strategy (across workers), saying why.
        loop: The frame of the Keras loop of the run (see `_runs.loop_frame`).
        keep_checkpoint_max: How many checkpoints `CheckpointSaverHook` keeps (None: all).
        original_fetches: The log key whose tensor `run_context.original_args.fetches`
            holds (`"outputs"` in predict, as Estimator's predict loop ran its
            predictions); None for none (`fetches=None`).
        loop_logs: Whether the user's own training loop passes the logs: they are
            the step's values as passed (`_batch.LoopLogs`).
        lent_optimizer: Whether an optimizer is lent for the run
            (`_model.lend_optimizer`); it is given back when the run closes.
        loop_state: Where a stateless loop's state, passed as `logs["state"]`, goes
            (`_model.LoopState`); None outside the user's own loop.

    Attributes:
        graph: The adapter graph of this run.
        session: What hooks get as their session.
        step: The current global step.
        logs: The logs of the latest finished step.
        caller: `"HookClass.method"` of the hook call in progress, for messages.
    """

    def __init__(
        self,
        sources: Sequence[Hooks],
        model: Any,
        step: int,
        advances: bool,
        name: str = "HookCallback",
        batch_mode: str | None = None,
        batch_values: bool = True,
        batch_keys: Callable[[str], bool] | None = None,
        names: Mapping[str, Any] | None = None,
        strategy: tf.distribute.Strategy | None = None,
        outside_strategy_note: str | None = None,
        loop: FrameType | None = None,
        keep_checkpoint_max: int | None = 5,
        original_fetches: str | None = None,
        loop_logs: bool = False,
        lent_optimizer: bool = False,
        loop_state: LoopState | None = None,
    ) -> None:
        self._sources = sources
        self._loop_state = loop_state
        self._loop_logs = loop_logs
        self._lent_optimizer = lent_optimizer
        self._original_fetches = original_fetches
        self._original_args = _ORIGINAL_ARGS
        self._keep_checkpoint_max = keep_checkpoint_max
        self._loop = loop
        self._batch_mode = batch_mode
        self._batch_values = batch_values
        self._batch_keys = batch_keys
        self._keras_logs: Mapping[str, Any] = {}
        self._batch: BatchSource | None = None
        self._batch_pending = batch_mode is not None  # decided at the end of the first before_run
        self.name = name
        self.hooks: list[Any] = []
        self.model = model
        self.step = np.int64(step)
        self.advances = advances
        self.logs: Mapping[str, Any] = {}
        self.caller = "HookCallback"
        self.graph = AdapterGraph()
        self.graph.owner = self
        self.graph.names = names = dict(names or {})
        self.graph.model = model
        # The model's variables as TF1 variables, made only if hook code asks for them.
        self.graph.mirror = ModelMirror(
            self.graph, model, {k: v for k, v in names.items() if not isinstance(v, str)}, train=advances
        )
        self.session = AdapterSession(self)
        self.coord = tf.compat.v1.train.Coordinator()
        self.closed = False
        self._outside_strategy_note = outside_strategy_note
        self._bound: list[_Bound] = []
        # The hooks that have a before_run / an after_run: the per-step loops.
        self._befores: list[_Bound] = []
        self._afters: list[_Bound] = []
        # Hooks that fetch without an after_run to see the results (usually none).
        self._fetch_only: list[_Bound] = []
        self._context: SessionRunContext | None = None
        self._derived = False
        # The step's feeds of hooks' own placeholders (usually none).
        self._feeds: dict[Any, Any] | None = None
        # Model variables hooks fed for the step (the learning rate), and, once set, the values to put back.
        self._fed: dict[Entry, np.ndarray] = {}
        self._kept: list[tuple[Entry, Any]] = []
        # Makes the adapter graph the default graph, and closes the run on error.
        self._guard = _Guard(self, strategy)
        # The graph scope of the per-step calls; None when no per-step hook needs it.
        self._step_scope: DefaultGraphScope | None = self.graph.scope
        # The step's RunOptions, merged from the hooks' as TF1's MonitoredSession merged them;
        # None when no hook asked for any (usually). See `_request_options`.
        self._options: tf.compat.v1.RunOptions | None = None
        # The hooks that asked for report_tensor_allocations_upon_oom in this step.
        self._oom_askers: list[str] = []
        self._oom_report: _OomReport | None = None
        self._oom_unreachable: str | None = None  # why the report cannot be made ("": it can); None: not asked yet
        # (hook method, what it asked for) already warned of in this run: each is said once.
        self._warned: set[tuple[str, str]] = set()
        # The model's function that Keras's loop calls for each step of this run.
        self._step_function = (
            "train_function" if advances else "predict_function" if original_fetches is not None else "test_function"
        )

    # -- the TF1 events ------------------------------------------------------

    def begin(self) -> None:
        """Builds the hooks of factories, calls every `begin()`, seals the graph,
        then calls every `after_create_session`.

        Raises:
            ValueError: A hook is already in another run that is still going.
        """
        _runs.enter(self, self._loop)
        if self._loop_state is not None:
            register_loop_state(self.model, self._loop_state)  # before begin(): init_from_checkpoint writes
        with self._guard:
            install_saver(self.graph, self.model, self._keep_checkpoint_max)
            if self._original_fetches is not None:
                self._original_args = SessionRunArgs(fetches=self.graph.log_tensor(self._original_fetches))
            for source in self._sources:
                if is_factory(source):
                    factory = cast(Callable[[], Any], source)
                    name = f"the hooks factory {getattr(factory, '__qualname__', repr(factory))}()"
                    self.hooks += as_hook_list(self._invoke(name, factory), f"What {name} returned")
                else:
                    self.hooks += cast(Sequence[Any], source)
            _runs.claim(self, self.hooks)
            self._bound = [_Bound(h) for h in self.hooks]
            self._befores = [b for b in self._bound if b.before_run is not None]
            self._afters = [b for b in self._bound if b.after_run is not None]
            self._fetch_only = [b for b in self._befores if b.after_run is None]
            if not any(b.needs_graph for b in self._bound):
                self._step_scope = None
            for hook in self.hooks:
                self._call(hook, "begin")
            # As TF1 did, before after_create_session: restore what init_from_checkpoint
            # set up, and spare the first step the session's creation. Only a
            # graph with ops of the hooks' own needs one at all.
            needs_session = self.graph.built_by_hooks()
            self.graph.seal()
            if needs_session or self.graph.restores():
                self.caller = "HookCallback (session creation, restoring init_from_checkpoint's variables)"
                self.session.open()
            for hook in self.hooks:
                self._call(hook, "after_create_session", self.session, self.coord)
        _warn_steps_per_execution(self.model, self._bound)  # outside the graph: reads a variable
        _warn_silent_logging(self.hooks)

    def before_run(self) -> None:
        """Calls every `before_run` with the step's shared context and compiles its fetches."""
        self._context = context = SessionRunContext(self._original_args, self.session)
        self._feeds = None
        if self._options is not None:
            self._options, self._oom_askers = None, []
        derived = False
        # The per-step methods do inline what `_Guard` and `_invoke` do, as
        # two calls fewer per hook and step count here.
        scope = self._step_scope
        if scope is not None:
            scope.__enter__()
        try:
            for bound in self._befores:
                self.caller = bound.before_name
                args = bound.before_run(context)  # type: ignore[misc]  # not None here
                bound.plan = plan = None if args is None else self._plan(bound, args)
                derived = derived or (plan is not None and bool(plan.derived))
        except BaseException as error:
            _note_caller(error, self.caller, self.graph)
            self._abort(scope)
            raise
        if scope is not None:
            scope.__exit__(None, None, None)
        self._derived = derived
        if self._batch_pending:
            self._start_batch()
        if self._fed:
            self._set_fed()
        if self._oom_askers:
            self._wrap_step()

    def _start_batch(self) -> None:
        """At the first step, before Keras runs it: the model's step gives the batch values and
        the batch's tensors that hook code has named by now (in begin() or this before_run)."""
        self._batch_pending = False
        tensors = frozenset(self.graph.batch_names)
        # Only a hook with one of these methods can see a step's values (through
        # results or its session): for none, the model keeps its own step.
        values = self._batch_values and any(_overridden(h, m) is not None for h in self.hooks for m in _SEES_VALUES)
        if not values and not tensors:
            return
        try:  # outside the adapter graph: it may build the model's step function
            self._batch = BatchSource(self.model, cast(str, self._batch_mode), values, tensors, self._batch_keys)
        except BaseException:
            self.close()
            raise

    def after_run(self, logs: Mapping[str, Any], step: int | None = None) -> bool:
        """Finishes the step: one graph run if needed, then every `after_run`.

        Args:
            logs: The logs Keras reported for the step (as batch values where a
                `BatchSource` gives them).
            step: The global step after the batch callback, as read from the
                optimizer (several steps per execution, gradient accumulation);
                None for one step more.

        Returns:
            Whether a hook (or the coordinator) asked to stop.
        """
        context = cast(SessionRunContext, self._context)  # set by before_run
        if self._oom_report is not None:
            self._unwrap_step()
        batch = self._batch
        self._keras_logs = logs
        if batch is not None:
            logs = batch.logs(logs)
        elif self._loop_logs:
            if "state" in logs:  # a stateless loop's state: into the variables only if hooks touch them
                cast(LoopState, self._loop_state).hand(logs["state"], int(self.step))
                logs = {k: v for k, v in logs.items() if k != "state"}
            logs = LoopLogs(logs)
        stale = self.step
        if self.advances:
            self.step = stale + 1 if step is None else np.int64(step)
            # An execution of N steps counts as its last step, whose stale
            # value is one less than the new step: StopAtStepHook and the
            # step schedules then act at the first boundary reaching their step.
            # A micro-batch that applied no update leaves the step as it was.
            if self.step - stale > 1:
                stale = self.step - 1
        self.logs = logs
        scope = self._step_scope
        if scope is not None:
            scope.__enter__()
        try:
            ran = self._run_derived(logs, stale) if self._derived else NOTHING_RAN
            if self._kept:
                self._put_back()  # after the step's graph run, which saw the fed value too
            logs_values = None  # read-only, so one per step serves every hook
            # As TF1's: the step's merged RunOptions, and one RunMetadata shared by the step's
            # hooks. Keras's step is not traced (trace_level is refused), so it stays empty.
            options = _NO_OPTIONS if self._options is None else self._options
            metadata = tf.compat.v1.RunMetadata() if self._afters else None
            try:
                # TF1's run fetched these too, and failed on a bad fetch.
                for bound in self._fetch_only:
                    if bound.plan is not None:
                        self.caller = bound.fetch_name
                        bound.plan.resolve(logs, stale, ran)
                for bound in self._afters:
                    plan = bound.plan
                    if plan is None:
                        if logs_values is None:
                            logs_values = SessionRunValues(LogsView(logs, self.graph), options, metadata)
                        values = logs_values
                    else:
                        self.caller = bound.fetch_name
                        values = SessionRunValues(plan.resolve(logs, stale, ran), options, metadata)
                    self.caller = bound.after_name
                    bound.after_run(context, values)  # type: ignore[misc]  # not None here
            except BaseException as error:
                _note_caller(error, self.caller, self.graph)
                raise
        except BaseException:
            self._abort(scope)
            raise
        if scope is not None:
            scope.__exit__(None, None, None)
        return context.stop_requested or self.coord.should_stop()

    def end(self) -> None:
        """Calls every `end(session)`, then closes the run."""
        if self._batch_mode == "eval":
            # A TF1 fetch in end() could read only the streaming aggregates (a batch tensor
            # would pull another batch), and Estimator reported them: evaluate()'s results.
            self.logs = self._keras_logs
        with self._guard:
            for hook in self.hooks:
                self._call(hook, "end", self.session)
        self.close()

    def close(self) -> None:
        """Releases the run: stops the coordinator, closes the session, flushes writers.

        Called after `end()`, after an error in a hook, and for a run that an
        error in Keras left open. Hooks' `end()` is not called here.
        """
        if self.closed:
            return
        self.closed = True
        self.coord.request_stop()
        try:
            self._unwrap_step()
            self._put_back()
            self.coord.join(stop_grace_period_secs=10, ignore_live_threads=True)
        finally:
            if self._batch is not None:
                self._batch.close()
            self.session.close()
            _runs.leave(self)
            if self._loop_state is not None:
                register_loop_state(self.model, None)
            if self._lent_optimizer:
                return_optimizer(self.model)

    # -- the mechanism -------------------------------------------------------

    def _abort(self, scope: DefaultGraphScope | None) -> None:
        """After an error in a hook: leaves the graph scope and closes the run.

        TF1 skips `end()` after an error; the run is over either way.
        """
        if scope is not None:
            scope.__exit__(None, None, None)
        self.close()

    def _call(self, hook: Any, method: str, *args: Any) -> Any:
        fn = getattr(hook, method, None)
        return None if fn is None else self._invoke(f"{type(hook).__name__}.{method}()", fn, *args)

    def _invoke(self, caller: str, fn: Callable[..., Any], *args: Any) -> Any:
        self.caller = caller
        try:
            return fn(*args)
        except BaseException as error:
            _note_caller(error, caller, self.graph)
            if self._outside_strategy_note is not None and hasattr(error, "add_note"):
                error.add_note(self._outside_strategy_note)
            raise

    def _plan(self, bound: _Bound, args: Any) -> Plan:
        # The stock hooks return plain SessionRunArgs of the same fetches every
        # step: they skip the checks and hit the cache.
        if type(args) is not SessionRunArgs or args.feed_dict or args.options is not None:
            _check_args(bound.before_name, args)
            if args.options is not None:
                self._request_options(bound.before_name, args.options)
            if args.feed_dict:
                feeds = check_feeds(args.feed_dict, self.graph, bound.before_name)
                self._merge_feeds(feeds, bound)
                self._take_variable_feeds(feeds, bound.before_name)
        if args.fetches is None:  # TF1 kept no fetches for the hook, and gave it results=None
            return _NO_FETCHES
        cached = bound.cached
        if cached is not None and cached.fetches is args.fetches:
            return cached
        bound.cached = plan = compile_fetches(args.fetches, self.graph, self.model, bound.before_name)
        return plan

    # -- what hooks ask of the run (RunOptions; see docs/errors.md) ----------

    def _request_options(self, where: str, options: tf.compat.v1.RunOptions) -> None:
        """Takes a hook's RunOptions for the step: each field it sets is honoured, or said once
        that it cannot be, naming the hook, the field and the way out.

        `trace_level` is refused earlier (`_check_args`). The fields are merged into the
        step's options as TF1's `MonitoredSession` merged them (`SessionRunValues.options`).
        """
        for field, _ in options.ListFields():
            name = field.name
            if name == _REPORT_OOM:
                self._ask_oom_report(where)
            elif name != "trace_level":
                self.warn_once(
                    where,
                    name,
                    f"HookCallback: {where} asked for RunOptions({name}={_shown(options, name)}), which "
                    f"cannot be honoured: {_UNHONOURED.get(name, _UNKNOWN_FIELD)}",
                )
        if self._options is None:
            self._options = tf.compat.v1.RunOptions()
        _merge_run_options(self._options, options)

    def _ask_oom_report(self, where: str) -> None:
        """A hook asked for the allocations on OOM: the step's error will carry what TF2 can say."""
        if self._oom_unreachable is None:
            self._oom_unreachable = self._why_no_oom_report()
        if self._oom_unreachable:
            self.warn_once(where, _REPORT_OOM, _oom_unreachable(where, self._oom_unreachable))
        else:
            self._oom_askers.append(where)

    def _why_no_oom_report(self) -> str:
        """Why this run cannot note the step's out-of-memory error; empty where it can."""
        model = self.model
        if self._loop_logs:
            return _OOM_OWN_LOOP
        if not is_tf_keras(model) and keras.backend.backend() != "tensorflow":
            return _OOM_BACKEND % keras.backend.backend()
        if self._step_function == "test_function" and is_tf_keras(model):
            return _OOM_TF_KERAS_EVAL
        return ""

    def warn_once(self, where: str, what: str, message: str) -> None:
        """Warns with `message`, once per run for each hook method and what it asked for."""
        if (where, what) in self._warned:
            return
        self._warned.add((where, what))
        warnings.warn(message, UserWarning, stacklevel=3)

    def session_options_unused(self, where: str, options: tf.compat.v1.RunOptions) -> None:
        """For `session.run(..., options=...)` that HookCallback answered without a graph run.

        Says once, for each field set, that there was no run to apply it to.
        """
        for field, _ in options.ListFields():
            self.warn_once(
                where,
                f"session.run {field.name}",
                f"HookCallback: {where} passed RunOptions({field.name}={_shown(options, field.name)}) to "
                "session.run, but every fetch was answered from Keras's step (log keys, the global step, "
                "model variables) without a graph run: there was no run for the option to apply to, and "
                "run_metadata stays empty. Keras's step takes no RunOptions. Options apply to fetches of "
                "ops the hook built, which run in a real session; to profile Keras's step, use "
                "keras.callbacks.TensorBoard(profile_batch=...).",
            )

    def _wrap_step(self) -> None:
        """Makes Keras's loop call the model's step through `_OomReport` for this step."""
        function = getattr(self.model, self._step_function, None)
        if function is None:
            return
        self._oom_report = report = _OomReport(function, self, tuple(self._oom_askers), int(self.step))
        # Past Keras's __setattr__, as `_batch` sets it: nothing for it to track.
        object.__setattr__(self.model, self._step_function, report)

    def _unwrap_step(self) -> None:
        """Gives the model back the step function it had before `_wrap_step`."""
        report = self._oom_report
        if report is None:
            return
        self._oom_report = None
        function = report.function
        if getattr(self.model, self._step_function, None) is report:
            object.__setattr__(self.model, self._step_function, function)

    def _merge_feeds(self, feeds: dict[Any, Any], bound: _Bound) -> None:
        """Adds a hook's feeds to the step's, refusing a tensor fed twice (as TF1's merge did)."""
        if self._feeds is None:
            self._feeds = {}
        twice = [t.name for t in feeds if t in self._feeds]
        if twice:
            raise RuntimeError(
                f"{bound.before_name} feeds {twice}, which another hook feeds in the same step. "
                "Same tensor is fed by two hooks; feed each placeholder from one hook."
            )
        self._feeds.update(feeds)

    def _take_variable_feeds(self, feeds: Mapping[Any, Any], where: str) -> None:
        """Keeps the feeds of model variables, which must reach Keras's step, not only the graph run.

        A TF1 run computed from a fed variable value and left the variable as it
        was. Keras's step reads the Keras variable, so a fed learning rate is
        assigned before the step and the value before it put back after; other
        model variables are refused, as the step itself updates them.

        Raises:
            ValueError: A feed of a variable the step updates, of a computed
                learning rate, or of a value of the wrong shape.
        """
        mirror = self.graph.mirror
        for tensor, value in feeds.items():
            entry = mirror.entry_of_element(tensor) if mirror is not None else None
            if entry is None:
                continue
            if entry is not mirror.rate:
                raise ValueError(
                    f"{where} feeds {entry.name + ':0'!r}, the TF1 variable of a Keras model's or "
                    "optimizer's variable. TF1 computed that step from the fed value and updated the "
                    "variable's own; Keras's step reads and updates one value, so the feed cannot be "
                    "honoured. Assign the variable instead (an assign op run with session.run, or "
                    "variable.load(value, session)), or feed a placeholder the hook built."
                )
            if entry.write is None:
                raise ValueError(f"{where} feeds {entry.name + ':0'!r}, the learning rate: {entry.read_only}")
            array = np.asarray(value, dtype=entry.dtype.as_numpy_dtype)
            if array.shape != entry.shape:
                raise ValueError(
                    f"{where} feeds {entry.name + ':0'!r} a value of shape {array.shape}; it has shape {entry.shape}."
                )
            self._fed[entry] = array

    def _set_fed(self) -> None:
        """Before the step: assigns the fed values to their Keras variables, keeping the values they had."""
        fed, self._fed = self._fed, {}
        for entry, value in fed.items():
            self._kept.append((entry, entry.read()))
            cast(Callable[[Any], None], entry.write)(value)

    def _put_back(self) -> None:
        """After the step (or a run cut short): the fed variables get their own values back."""
        kept, self._kept = self._kept, []
        for entry, value in kept:
            cast(Callable[[Any], None], entry.write)(value)

    def _run_derived(self, logs: Mapping[str, Any], stale: np.int64) -> Mapping[Any, Any]:
        """One real graph run for every hook's derived fetches, as TF1's merged run."""
        derived: dict[Any, None] = {}
        fed: set[str] = set()
        reads: dict[Any, None] = {}
        loads: dict[Any, None] = {}
        stores: dict[Any, None] = {}
        uses_step = writes_step = False
        for bound in self._bound:
            plan = bound.plan
            if plan is not None and plan.derived:
                derived.update(dict.fromkeys(plan.derived))
                fed.update(plan.fed_keys)
                reads.update(dict.fromkeys(plan.reads))
                loads.update(dict.fromkeys(plan.loads))
                stores.update(dict.fromkeys(plan.stores))
                uses_step = uses_step or plan.uses_step
                writes_step = writes_step or plan.writes_step
        # A variable another hook writes in the same run is loaded, not fed.
        merged = Plan(
            None,
            _no_resolve,
            tuple(derived),
            tuple(sorted(fed)),
            tuple(e for e in reads if e not in loads),
            tuple(loads),
            tuple(stores),
            uses_step,
            writes_step,
        )
        self.caller = "HookCallback (the step's graph run)"
        return self.session.run_graph(merged, logs, stale, self.caller, self._feeds)


def _no_resolve(logs: Any, step: Any, ran: Any) -> None:
    return None


# `SessionRunArgs(fetches=None)` (a hook that asks only for options or feeds): results=None, as in TF1.
_NO_FETCHES = Plan(None, _no_resolve, ())


def _check_args(where: str, args: Any) -> None:
    """Raises for a `before_run` result that is not usable `SessionRunArgs`."""
    if not isinstance(args, SessionRunArgs):
        raise TypeError(
            f"{where} returned {args!r} of type {type(args).__name__}. It must return "
            "None or tf.compat.v1.train.SessionRunArgs(fetches)."
        )
    if args.options is not None and args.options.trace_level != _NO_TRACE:
        raise ValueError(
            f"{where} requested RunOptions with trace_level="
            f"{tf.compat.v1.RunOptions.TraceLevel.Name(args.options.trace_level)}. Keras "
            "steps cannot be traced through RunOptions; profile with "
            "keras.callbacks.TensorBoard(profile_batch=...) instead."
        )


_REPORT_OOM = "report_tensor_allocations_upon_oom"

# Why each RunOptions field other than trace_level (refused) and report_tensor_allocations_upon_oom
# (honoured as TF2 allows) cannot be honoured on Keras's step, and the way out. docs/errors.md has the table.
_UNHONOURED = {
    "timeout_in_ms": (
        "Keras's step is a compiled function of its backend, not a Session.run, and takes no RunOptions, "
        "so it has no timeout. Remove the option; under tf.distribute, bound how long collectives wait "
        "with tf.distribute.experimental.CommunicationOptions(timeout_seconds=...)."
    ),
    "inter_op_thread_pool": (
        "Keras's step is not a Session.run: it runs on its backend's own threads (on TensorFlow, TF2's "
        "one inter-op thread pool; a session's extra pools, ConfigProto.session_inter_op_thread_pool, "
        "do not exist in TF2's runtime). Remove the option; on TensorFlow, size that pool before TF "
        "starts with tf.config.threading.set_inter_op_parallelism_threads(n)."
    ),
    "output_partition_graphs": (
        "Keras's step is not a Session.run, so no partition graphs come back: "
        "run_values.run_metadata.partition_graphs stays empty. Remove the option; "
        "keras.callbacks.TensorBoard(write_graph=True) writes the step's graph."
    ),
    "debug_options": (
        "tfdbg's tensor watches are not run on Keras's step. Remove the option; on TensorFlow, TF2's "
        "debugger dumps the step's tensors: call tf.debugging.experimental.enable_dump_debug_info(dump_root, "
        "tensor_debug_mode='FULL_HEALTH') before fit, and read the dump in TensorBoard's Debugger V2."
    ),
    "experimental": (
        "TF1's MonitoredSession did not pass a hook's RunOptions.experimental (collective_graph_key, "
        "use_run_handler_pool, run_handler_pool_options) to the run either: it merged only the other "
        "fields. Nothing changes from TF1; remove the option to silence this warning."
    ),
}
_UNKNOWN_FIELD = "HookCallback knows no TF2 equivalent of this field for Keras's step. Remove the option."

_OOM_OWN_LOOP = (
    "in a training loop of your own, HookCallback does not run the step, so it cannot add what TF2 "
    "knows about the device's memory to its error. Catch tf.errors.ResourceExhaustedError around your "
    "step and read tf.config.experimental.get_memory_info(device) there."
)
_OOM_BACKEND = (
    "the model runs on the %s backend, whose out-of-memory errors HookCallback does not annotate "
    "(it reads TensorFlow's). Read the backend's own memory statistics: jax.Device.memory_stats(), "
    "torch.cuda.memory_summary()."
)
_OOM_TF_KERAS_EVAL = (
    "tf_keras's evaluate() calls its step through a runner that HookCallback does not wrap, so an "
    "out-of-memory error there carries no report. In fit() the report is made; to find what fills "
    "the memory, profile the step with tf_keras.callbacks.TensorBoard(profile_batch=...)."
)


def _oom_unreachable(where: str, why: str) -> str:
    return (
        f"HookCallback: {where} asked for RunOptions(report_tensor_allocations_upon_oom=True), which "
        f"cannot be honoured here: {why}"
    )


def _shown(options: tf.compat.v1.RunOptions, name: str) -> str:
    """A RunOptions field's value as a hook would have written it."""
    value = getattr(options, name)
    if name == "trace_level":
        return str(tf.compat.v1.RunOptions.TraceLevel.Name(value))
    if isinstance(value, (bool, int)):
        return repr(value)
    return f"{type(value).__name__}(...)"  # a message: DebugOptions, Experimental


def _merge_run_options(options: tf.compat.v1.RunOptions, incoming: tf.compat.v1.RunOptions) -> None:
    """Merges `incoming` into `options` as TF1's `_HookedSession._merge_run_options` does.

    Numbers take the larger, flags the OR, tensor watches are extended; `experimental` is
    not merged (TF1 did not merge it either).
    """
    options.trace_level = max(options.trace_level, incoming.trace_level)
    options.timeout_in_ms = max(options.timeout_in_ms, incoming.timeout_in_ms)
    options.inter_op_thread_pool = max(options.inter_op_thread_pool, incoming.inter_op_thread_pool)
    options.output_partition_graphs = options.output_partition_graphs or incoming.output_partition_graphs
    options.debug_options.debug_tensor_watch_opts.extend(incoming.debug_options.debug_tensor_watch_opts)
    options.debug_options.reset_disk_byte_usage = (
        options.debug_options.reset_disk_byte_usage or incoming.debug_options.reset_disk_byte_usage
    )
    options.report_tensor_allocations_upon_oom = (
        options.report_tensor_allocations_upon_oom or incoming.report_tensor_allocations_upon_oom
    )


class _OomReport:
    """The model's step function, for one step in which a hook asked for
    `report_tensor_allocations_upon_oom`.

    TF1 passed the option to the step's `Session.run`, and TF's out-of-memory error then
    listed the tensors allocated on the device. Keras's step is a `tf.function`, which takes
    no RunOptions, so that list cannot be made. When the step runs out of memory, the error
    (still a `tf.errors.ResourceExhaustedError`, the same object on Python 3.11+) gets a
    note naming the hooks that asked and the step, with what TF2 can say about the device's
    memory (`tf.config.experimental.get_memory_info`).
    """

    __slots__ = ("askers", "function", "runner", "step")

    def __init__(self, function: Callable[..., Any], runner: HookRunner, askers: tuple[str, ...], step: int) -> None:
        self.function = function
        self.runner = runner
        self.askers = askers
        self.step = step

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.function(*args, **kwargs)
        except tf.errors.ResourceExhaustedError as error:
            # Keras calls no callback after a failed step: the model gets its function back now.
            self.runner._unwrap_step()  # pylint: disable=protected-access
            report = _oom_note(error, self.askers, self.step)
            if hasattr(error, "add_note"):  # Python 3.11+: the same error, with a note
                error.add_note(report)
                raise
            # Python 3.10 shows no notes: the same type, with the report in its message.
            raise type(error)(error.node_def, error.op, f"{error.message}\n\n{report}") from error


# TF's out-of-memory message names the device: "... on /job:localhost/replica:0/task:0/device:GPU:0 by allocator ..."
_OOM_DEVICE = re.compile(r" on (/\S*device:([A-Za-z_]+):(\d+))")


def _oom_note(error: tf.errors.ResourceExhaustedError, askers: Sequence[str], step: int) -> str:
    """What TF2 can say, for the hooks that asked for allocations on OOM, about the device's memory."""
    match = _OOM_DEVICE.search(error.message or "")
    if match is not None:
        devices = [(match.group(1), f"{match.group(2)}:{match.group(3)}")]
    else:  # no device named: every GPU's
        devices = [(d.name, d.name.split("device:")[-1]) for d in tf.config.list_logical_devices("GPU")]
    lines = [_device_memory(full, short) for full, short in devices] or ["no device is named in the error"]
    asked = " and ".join(askers)
    return (
        f"HookCallback: {asked} asked for RunOptions(report_tensor_allocations_upon_oom=True) for "
        f"this step (global step {step}). Keras runs its step without RunOptions, so TF cannot list the "
        "tensors that were allocated (its hint to add that option does not apply to Keras's step). "
        "What TF2 can say about the device's memory: " + "; ".join(lines) + ". To see what fills it, "
        "profile a step with keras.callbacks.TensorBoard(profile_batch=...) (the profiler's memory "
        "profile), or lower the batch size."
    )


def _device_memory(full: str, short: str) -> str:
    try:
        info = tf.config.experimental.get_memory_info(short)
    except (ValueError, tf.errors.OpError) as why:
        return f"{full}: no memory statistics ({str(why).strip()})"
    if short.upper().startswith("CPU") and not any(info.values()):
        return (
            f"{full}: TF recorded no allocations on this CPU device before the step "
            "(tf.config.experimental.get_memory_info reports 0 bytes), so there is nothing more to say"
        )
    return (
        f"{full}: {_mib(info['current'])} in use after the failed step, peak {_mib(info['peak'])} since TF "
        "started or the last tf.config.experimental.reset_memory_stats (tf.config.experimental.get_memory_info)"
    )


def _mib(count: int) -> str:
    return f"{count / 2**20:.1f} MiB"


# Stock hooks whose per-step work is scheduled by the global step (or by time),
# which act at the first execution boundary at or after their step.
_STEP_SCHEDULED = frozenset(
    {
        "StopAtStepHook",
        "CheckpointSaverHook",
        "StepCounterHook",
        "SummarySaverHook",
        "NanTensorHook",
        "GlobalStepWaiterHook",
        "FinalOpsHook",
    }
)


def _counts_calls(bound: _Bound) -> bool:
    """Whether a hook would behave differently when called once per N steps."""
    if bound.before_run is None and bound.after_run is None:
        return False
    hook = bound.hook
    if type(hook).__module__ != _STOCK_MODULE:
        return True  # a custom hook: it may count its calls as steps
    if type(hook).__name__ == "LoggingTensorHook":
        return getattr(getattr(hook, "_timer", None), "_every_steps", None) is not None
    return type(hook).__name__ not in _STEP_SCHEDULED


# The stock hooks whose output is lines of TF's logger at INFO.
_LOGS_AT_INFO = (tf.compat.v1.train.LoggingTensorHook, tf.compat.v1.train.StepCounterHook)
_warned_logging = False


def _warn_silent_logging(hooks: Sequence[Any]) -> None:
    """Says once per process that hooks which log at INFO print nothing at TF's default level (WARNING)."""
    global _warned_logging  # pylint: disable=global-statement
    if _warned_logging or tf.get_logger().getEffectiveLevel() <= logging.INFO:
        return
    logging_hooks = sorted({type(h).__name__ for h in hooks if isinstance(h, _LOGS_AT_INFO)})
    if logging_hooks:
        _warned_logging = True
        warnings.warn(
            f"HookCallback: {', '.join(logging_hooks)} log at INFO, and TF's logger is at "
            f"{logging.getLevelName(tf.get_logger().getEffectiveLevel())}, so their lines are dropped. "
            'Add tf.get_logger().setLevel("INFO") before fit (TF1 scripts called '
            "tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)).",
            UserWarning,
            stacklevel=2,
        )


def steps_per_execution(model: Any) -> int:
    """The steps Keras runs between two batch callbacks."""
    value: Any = getattr(model, "steps_per_execution", None)
    if hasattr(value, "numpy"):  # tf_keras: a (possibly mirrored) tf.Variable
        value = value.numpy()
    return int(value or 1)


def _warn_steps_per_execution(model: Any, bound: list[_Bound]) -> None:
    """Warns when Keras calls the hooks once per N steps and some hook counts calls."""
    per_execution = steps_per_execution(model)
    counting = [type(b.hook).__name__ for b in bound if _counts_calls(b)]
    if per_execution > 1 and counting:
        warnings.warn(
            f"HookCallback: the model was compiled with steps_per_execution={per_execution}, so "
            f"hooks are called once per {per_execution} steps, and these hooks may count those "
            f"calls as steps: {', '.join(counting)} (LoggingTensorHook(every_n_iter=k) logs every "
            f"{per_execution}*k steps). The global-step schedules of StopAtStepHook and the "
            "checkpoint, summary and step-counter hooks act at the first execution boundary at "
            "or after their step. For a call per step, compile with steps_per_execution=1.",
            UserWarning,
            stacklevel=2,
        )
