"""The one dispatch path: every call from the adapter into a hook goes through here.

`HookRunner` lives for one run (a `fit`, one validation pass, an `evaluate`) and
keeps TF1's `MonitoredSession` contract for it: list order, one shared
`SessionRunContext` per step, one real graph run per step at most, stop
requests, and what is skipped on error. `hooks2callbacks.callback` decides
*when* to call it; this module decides *how* hooks are called.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any, cast

import numpy as np
import tensorflow as tf

from hooks2callbacks import _runs
from hooks2callbacks._batch import BatchSource
from hooks2callbacks._batch_logs import LoopLogs
from hooks2callbacks._checkpoint import install_saver
from hooks2callbacks._fetch import Plan, check_feeds, compile_fetches, fetched
from hooks2callbacks._graph import AdapterGraph, DefaultGraphScope, log_key_of
from hooks2callbacks._hook_errors import note_caller
from hooks2callbacks._hook_list import (
    Bound,
    Hooks,
    as_hook_list,
    is_factory,
    overridden,
    warn_silent_logging,
    warn_steps_per_execution,
)
from hooks2callbacks._keras_state import LoopState, register_loop_state, return_optimizer
from hooks2callbacks._model import Entry, ModelMirror
from hooks2callbacks._run_options import NO_OPTIONS, StepOptions, check_args
from hooks2callbacks._seams import SessionRunArgs, SessionRunContext, SessionRunValues
from hooks2callbacks._session import NOTHING_RAN, AdapterSession

# Keras runs the step; outside predict, hooks have no caller's fetches to see.
_ORIGINAL_ARGS = SessionRunArgs(fetches=None)

# The hook methods that see a step's values (through results or their session).
_SEES_VALUES = ("before_run", "after_run", "after_create_session", "end")


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
            the step's values as passed (`_batch_logs.LoopLogs`).
        lent_optimizer: Whether an optimizer is lent for the run
            (`_keras_state.lend_optimizer`); it is given back when the run closes.
        loop_state: Where a stateless loop's state, passed as `logs["state"]`, goes
            (`_keras_state.LoopState`); None outside the user's own loop.

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
        self._bound: list[Bound] = []
        # The hooks that have a before_run / an after_run: the per-step loops.
        self._befores: list[Bound] = []
        self._afters: list[Bound] = []
        # Hooks that fetch without an after_run to see the results (usually none).
        self._fetch_only: list[Bound] = []
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
        # The model's function that Keras's loop calls for each step of this run.
        step_function = (
            "train_function" if advances else "predict_function" if original_fetches is not None else "test_function"
        )
        # What hooks ask of the step through RunOptions.
        self.run_options = StepOptions(model, step_function, loop_logs)

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
            self._bound = [Bound(h) for h in self.hooks]
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
        warn_steps_per_execution(self.model, self._bound)  # outside the graph: reads a variable
        warn_silent_logging(self.hooks)

    def before_run(self) -> None:
        """Calls every `before_run` with the step's shared context and compiles its fetches."""
        self._context = context = SessionRunContext(self._original_args, self.session)
        self._feeds = None
        run_options = self.run_options
        if run_options.options is not None:  # inline: a step of hooks that ask for none calls nothing
            run_options.new_step()
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
            note_caller(error, self.caller, self.graph)
            self._abort(scope)
            raise
        if scope is not None:
            scope.__exit__(None, None, None)
        self._derived = derived
        if self._batch_pending:
            self._start_batch()
        if self._fed:
            self._set_fed()
        if run_options.askers:
            run_options.wrap_step(int(self.step))

    def _start_batch(self) -> None:
        """At the first step, before Keras runs it: the model's step gives the batch values and
        the batch's tensors that hook code has named by now (in begin() or this before_run)."""
        self._batch_pending = False
        tensors = frozenset(self.graph.batch_names)
        # Only a hook with one of these methods can see a step's values (through
        # results or its session): for none, the model keeps its own step.
        values = self._batch_values and any(overridden(h, m) is not None for h in self.hooks for m in _SEES_VALUES)
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
        if self.run_options.report is not None:
            self.run_options.unwrap_step()
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
            options = NO_OPTIONS if self.run_options.options is None else self.run_options.options
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
                note_caller(error, self.caller, self.graph)
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
            self.run_options.unwrap_step()
            self._put_back()
            self.coord.join(stop_grace_period_secs=10, ignore_live_threads=True)
        finally:
            if self._batch is not None:
                self._batch.close()
            self.session.close()
            _runs.leave(self)
            # The loop's frame keeps its locals, Keras's data iterator among them, and they keep
            # this run (the callbacks): a cycle that only the garbage collector would break, later,
            # where tf.data's iterator can hold up its deletion for seconds.
            self._loop = None
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
            note_caller(error, caller, self.graph)
            if self._outside_strategy_note is not None and hasattr(error, "add_note"):
                error.add_note(self._outside_strategy_note)
            raise

    def _plan(self, bound: Bound, args: Any) -> Plan:
        # The stock hooks return plain SessionRunArgs of the same fetches every
        # step: they skip the checks and hit the cache.
        if type(args) is not SessionRunArgs or args.feed_dict or args.options is not None:
            check_args(bound.before_name, args)
            if args.options is not None:
                self.run_options.request(bound.before_name, args.options)
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

    def _merge_feeds(self, feeds: dict[Any, Any], bound: Bound) -> None:
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
