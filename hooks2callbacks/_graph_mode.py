"""TF1 graph mode: hooks run in tf_keras's own graph, on the Session Keras runs.

After `tf.compat.v1.disable_eager_execution()`, tf_keras's `fit` and `evaluate`
run their v1 loops (`training_arrays_v1`), and each step is one call of a
`GraphExecutionFunction` (the model's `train_function` or `test_function`) over
`tf_keras.backend.get_session()`. That is a real TF1 graph and Session, so this
source of values is the most literal of the three (Keras 3, eager tf_keras,
graph-mode tf_keras): no adapter graph, no mirror of the model.

The mapping (train mode; eval uses `test_function` and the `on_test_*` events):

  run's first batch begin (HookCallback defers it, as for the other sources):
    graph = the model's graph; session = Keras's Session
    in graph: "loss" (and each metric's log key) = identity of the step's own
        output, where the graph has no op of that name yet
    GLOBAL_STEP collection = [optimizer.iterations], unless it holds one already
    call hooks.begin()                      # in list order; they build ops here
    initialize what begin() made (Keras's get_session initializes global
        variables; the hooks' local variables here)
    model.train_function joins hooks' runs (its class becomes _JoinedStep)
    [graph finalized] call hooks.after_create_session(session, coord)
  on_train_batch_begin:
    run_context = SessionRunContext(SessionRunArgs(None), session)
    [graph finalized] call hooks.before_run(run_context)
    fetches, feeds and RunOptions merged as MonitoredSession merged them
  (Keras calls train_function: one Session.run, with the hooks' fetches
   and feeds joined in, under the merged RunOptions, filling one RunMetadata)
  on_train_batch_end:
    [graph finalized] call hooks.after_run(run_context, SessionRunValues(results,
        options, run_metadata)); results: the step's own values; the global step
        (the variable, its reads) the stale value, counted
    stop requested: model.stop_training = True
  on_train_end:
    [graph finalized] call hooks.end(session); the step function gets its class back

A step where no hook asks for anything beyond the step's own outputs and the
global step runs Keras's own cached callable, unchanged. A step with more (a
derived tensor, an op, a feed, RunOptions) runs one callable made for that set of
fetches and feeds (made once per set, cached for the run).

"[graph finalized]": MonitoredSession finalized the graph after `begin()`, so a hook
that built an op later failed. Here the graph is finalized only while a hook
method runs, and open again while Keras runs: Keras builds ops lazily (its test
function on the first `evaluate`, `backend.set_value`'s assign ops).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2

from hooks2callbacks import _runs
from hooks2callbacks._hook_list import as_hook_list, is_factory
from hooks2callbacks._run_options import merge_run_options  # TF1's merge, one copy
from hooks2callbacks._seams import (
    SessionRunArgs,
    SessionRunContext,
    SessionRunValues,
    graph_mode_on,
    tf_keras_graph_step,
    training_util,
)

_FUNCTION = {"train": "train_function", "eval": "test_function"}
_STEP = object()  # a fetch answered with the stale global step
_SINGLE = object()  # the structure of a fetch that is one leaf
_NO_FETCHES = SessionRunArgs(None)


def active() -> bool:
    """Whether TF1 graph mode is on (`tf.compat.v1.disable_eager_execution()` was called)."""
    return graph_mode_on()


def check_model(caller: str, model: Any, tf_keras: bool, mode: str) -> None:
    """Raises where hooks cannot run in graph mode with this model and mode.

    Args:
        caller: The callback's repr, for messages.
        model: The Keras model.
        tf_keras: Whether the model is a tf_keras model.
        mode: `"train"`, `"eval"` or `"predict"`.

    Raises:
        RuntimeError: The model is a Keras 3 model (Keras 3 does not run in graph
            mode), or the mode is predict (not built here yet).
    """
    if not tf_keras:
        raise RuntimeError(
            f"{caller} was given a Keras 3 model ({type(model).__name__}) after "
            "tf.compat.v1.disable_eager_execution() (or disable_v2_behavior()): Keras 3 does not run "
            "in TF1 graph mode. Either train with tf_keras (pip install tf-keras; import tf_keras, "
            "with a legacy optimizer such as tf_keras.optimizers.legacy.SGD), whose fit runs its "
            "graph-mode loop on a real Session, where HookCallback runs the hooks; or remove "
            "disable_eager_execution() and run Keras 3 eagerly."
        )
    if mode not in _FUNCTION:
        raise RuntimeError(
            f"{caller}: hooks in predict() are not supported in TF1 graph mode yet. Run predict() "
            "without HookCallback, or run the model eagerly (without "
            "tf.compat.v1.disable_eager_execution()), where predict-mode hooks run."
        )


class _Plan:
    """What the hooks asked of one step: extra fetches, feeds, RunOptions, and how to answer each hook."""

    __slots__ = ("feeds", "hooks", "merged", "options", "run_metadata", "targets", "tensors")

    def __init__(self) -> None:
        self.tensors: list[Any] = []  # tensors fetched beyond the step's outputs
        self.targets: list[Any] = []  # ops run beyond the step's update
        self.feeds: dict[int, tuple[Any, Any]] = {}  # id(tensor) -> (tensor, value)
        self.options: tf.compat.v1.RunOptions | None = None  # the hooks' own, merged
        self.merged = tf.compat.v1.RunOptions()  # with the caller's (compile(options=...)): the run's
        self.run_metadata = tf.compat.v1.RunMetadata()
        # Per hook: None (results=None), or (structure, leaves), each leaf an index into the run's
        # values (outputs, then `tensors`), _STEP, or None for an op.
        self.hooks: list[tuple[Any, list[Any]] | None] = []

    @property
    def joins(self) -> bool:
        """Whether the step's run needs more than Keras's own callable."""
        return bool(self.tensors or self.targets or self.feeds or self.options is not None)


class _JoinedStep:
    """Stands in for `GraphExecutionFunction.__call__` while hooks run (its instance's class).

    Made a subclass of tf_keras's class at run time (`_joined_class`); the loop of
    tf_keras holds the function object itself, so the object changes class, not the model.
    """

    def __call__(self, inputs: Any) -> Any:
        runner: GraphModeRunner | None = self.__dict__.get("_hooks2callbacks_runner")
        if runner is None or runner.plan is None or not runner.plan.joins:
            outputs = super().__call__(inputs)  # type: ignore[misc]
            if runner is not None:
                runner.outputs = list(tf.nest.flatten(outputs))
            return outputs
        return runner.joined_call(self, inputs)


_joined_classes: dict[type[Any], type[Any]] = {}


def _joined_class(step_class: type[Any]) -> type[Any]:
    joined = _joined_classes.get(step_class)
    if joined is None:
        joined = _joined_classes[step_class] = type("HookedGraphExecutionFunction", (_JoinedStep, step_class), {})
    return joined


# Per graph, the saver made for the last run and the variables it saves (`_make_saver`).
_SAVERS: weakref.WeakKeyDictionary[tf.Graph, tuple[Any, Any]] = weakref.WeakKeyDictionary()

# Per graph, the global steps made here (each names a model's iterations); not a graph
# collection, which a meta-graph export would try to write.
_STEP_ALIASES: weakref.WeakKeyDictionary[tf.Graph, list[Any]] = weakref.WeakKeyDictionary()


def _reads(alias: Any, variable: Any) -> bool:
    """Whether `alias` (an identity of a variable's read) reads `variable`."""
    read = alias.op.inputs[0]
    return any(source is getattr(variable, "handle", None) for source in read.op.inputs)


@contextmanager
def _sealed(graph: tf.Graph) -> Iterator[None]:
    """The graph finalized while a hook method runs, as MonitoredSession's was after begin()."""
    if graph.finalized:
        yield
        return
    graph.finalize()
    try:
        yield
    finally:
        graph._unsafe_unfinalize()  # pylint: disable=protected-access


def _alias(graph: tf.Graph, name: str, tensor: Any) -> Any:
    """`name:0` in the graph as the identity of `tensor`; None where the name is some other op's."""
    try:
        op = graph.get_operation_by_name(name)
    except KeyError:
        with graph.as_default():
            # A trailing "/" takes the name as given: Keras's "loss" name scope has made
            # plain "loss" look used, though no op has that name.
            return tf.identity(tensor, name=name + "/")
    source = graph.as_graph_element(tensor)  # a variable's read
    if op.type == "Identity" and op.inputs[0] is source:
        return op.outputs[0]  # made by an earlier run over the same graph
    return None


class GraphModeRunner:
    """Calls hooks through one tf_keras `fit` or `evaluate` in TF1 graph mode.

    It answers what `callback.HookCallback` asks of a `_dispatch.HookRunner`:
    `begin`, `before_run`, `after_run`, `end` and `close`.

    Args:
        sources: The hooks in call order: sequences of hooks, or zero-argument
            functions returning them (called in `begin`, the model's graph as default).
        model: The tf_keras model.
        mode: `"train"` or `"eval"`.
        name: The callback's repr, for messages.
        loop: The frame of the Keras loop (see `_runs.loop_frame`).
        keep_checkpoint_max: How many checkpoints the saver made for hooks keeps (None: all).

    Attributes:
        session: Keras's Session, which hooks get.
        plan: What the hooks asked of the current step, or None between steps.
        outputs: The step's own outputs (loss, then metrics), as the run returned them.
        caller: `"HookClass.method()"` of the hook call in progress, for messages.
    """

    def __init__(
        self, sources: Sequence[Any], model: Any, mode: str, name: str, loop: Any, keep_checkpoint_max: int | None
    ) -> None:
        self.model = model
        self._keep_checkpoint_max = keep_checkpoint_max
        self._saver: Any = None
        self.name = name
        self.mode = mode
        self.caller = name
        self._sources = sources
        self._loop = loop
        self.hooks: list[Any] = []
        self.plan: _Plan | None = None
        self.outputs: list[Any] = []
        self.closed = False
        self._function: Any = None
        self._class: type[Any] | None = None
        self._callables: dict[tuple[Any, ...], Any] = {}
        self._context: Any = None
        self._coord = tf.compat.v1.train.Coordinator()
        self._step = 0
        self._step_reads: set[Any] = set()
        self._aliases: dict[Any, int] = {}
        self._resolved: dict[int, tuple[Any, Any, Any]] = {}

    # -- the run -----------------------------------------------------------------

    def begin(self) -> None:
        """Finds Keras's graph, Session and step; calls `begin()` and `after_create_session()`."""
        step_class, get_session = tf_keras_graph_step()
        function = getattr(self.model, _FUNCTION[self.mode], None)
        if not isinstance(function, step_class):
            raise RuntimeError(
                f"{self.name}: in TF1 graph mode the model's {_FUNCTION[self.mode]} is "
                f"{type(function).__name__}, not tf_keras's GraphExecutionFunction, so HookCallback "
                "cannot run the hooks in its step. Compile the model with tf_keras (a legacy optimizer, "
                "tf_keras.optimizers.legacy.*) and no tf.distribute strategy, or run it eagerly."
            )
        self._function = function
        self.graph = graph = function.outputs[0].graph
        self.session = get_session(function.inputs)
        _runs.enter(self, self._loop)
        try:
            with graph.as_default():
                self._prepare_graph(function)
                for source in self._sources:
                    if is_factory(source):  # checked as the eager path checks a factory's hooks
                        name = f"the hooks factory {getattr(source, '__qualname__', repr(source))}()"
                        self.hooks += as_hook_list(self._call_factory(name, source), f"What {name} returned")
                    else:
                        self.hooks += list(source)
                _runs.claim(self, self.hooks)
                keys = (tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
                before = {id(v) for key in keys for v in graph.get_collection(key)}
                for hook in self.hooks:
                    self._call(hook, "begin")
                self._make_saver()
                # After begin(): the stock hooks' reads of the step (`global_step_read`).
                self._step_reads.update(id(t) for t in graph.get_collection(training_util.GLOBAL_STEP_READ_KEY))
                # The variables begin() made are initialized, as Scaffold's init ops did; the
                # model's keep Keras's values (Scaffold would have reset them).
                self.session = get_session(function.inputs)
                made = [v for key in keys for v in graph.get_collection(key) if id(v) not in before]
                if made:
                    self.session.run(tf.compat.v1.variables_initializer(made))
                self._step = int(self.session.run(self._global_step))
            self._class = type(function)
            function.__class__ = _joined_class(self._class)
            function._hooks2callbacks_runner = self  # pylint: disable=protected-access
            with graph.as_default(), _sealed(graph):
                for hook in self.hooks:
                    self._call(hook, "after_create_session", self.session, self._coord)
        except BaseException:
            self.close()
            raise

    def _prepare_graph(self, function: Any) -> None:
        """Names the step's outputs by their log keys and makes the optimizer's step the global step."""
        graph = self.graph
        names = list(getattr(self.model, "metrics_names", None) or ())
        for index, (name, tensor) in enumerate(zip(names, function.outputs, strict=False)):
            alias = _alias(graph, name, tensor)
            self._aliases[id(tensor)] = index
            if alias is not None:
                self._aliases[id(alias)] = index
            else:
                warnings.warn(
                    f"{self.name}: the graph's op {name!r} is not this model's {name!r} (another model "
                    f"in the same graph, or an op of yours), so a hook that fetches {name + ':0'!r} gets "
                    f"that op, not this model's value. Fetch the model's own tensor ({tensor.name!r}), or "
                    "give each model a graph of its own (tf_keras.backend.clear_session() between them).",
                    UserWarning,
                    stacklevel=5,
                )
        optimizer = getattr(self.model, "optimizer", None)
        iterations = getattr(optimizer, "iterations", None)  # legacy optimizers make it on first use
        if iterations is not None:
            self._step_reads.update({id(iterations), id(graph.as_graph_element(iterations))})
        step = tf.compat.v1.train.get_global_step(graph)
        ours = _STEP_ALIASES.setdefault(graph, [])
        if step is not None and any(step is alias for alias in ours) and not _reads(step, iterations):
            # Our name for another model's step (an earlier model of this graph): this model's now.
            graph.clear_collection(tf.compat.v1.GraphKeys.GLOBAL_STEP)
            graph.clear_collection(training_util.GLOBAL_STEP_READ_KEY)
            step = None
        if step is None:
            if iterations is None:
                raise RuntimeError(
                    f"{self.name}: the model has no optimizer, so there is no global step for its hooks "
                    "in TF1 graph mode. Compile the model with an optimizer (model.compile(optimizer="
                    "tf_keras.optimizers.legacy.SGD(...), loss=...))."
                )
            # Named as TF1 named it ("global_step:0", which a fetch by name reads as a value,
            # and StepCounterHook's "global_step/sec"), where the graph has no such op.
            step = _alias(graph, tf.compat.v1.GraphKeys.GLOBAL_STEP, iterations)
            if step is None:
                with graph.as_default():
                    step = tf.identity(iterations, name=tf.compat.v1.GraphKeys.GLOBAL_STEP)
            graph.add_to_collection(tf.compat.v1.GraphKeys.GLOBAL_STEP, step)
            ours.append(step)
        self._global_step = step
        self._step_reads.update({id(step), id(graph.as_graph_element(step))})

    def _make_saver(self) -> None:
        """A saver in SAVERS, where begin() left none, as MonitoredSession's Scaffold made one.

        Over the graph's global variables under their graph names; the optimizer's
        `iterations` under "global_step", the name TF1 checkpoints gave the step (which
        `tf.train.load_variable(path, "global_step")` and Estimator read).
        """
        graph = self.graph
        if graph.get_collection(tf.compat.v1.GraphKeys.SAVERS):
            return
        variables = graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
        key = (tuple(id(v) for v in variables), self._keep_checkpoint_max)
        cached = _SAVERS.get(graph)
        if cached is not None and cached[0] == key:
            # The same variables as the last run's: its saver, not a new set of save ops per fit().
            saver = cached[1]
            graph.add_to_collection(tf.compat.v1.GraphKeys.SAVERS, saver)
            self._saver = saver
            return
        iterations = getattr(getattr(self.model, "optimizer", None), "iterations", None)
        names: dict[str, Any] = {}
        for variable in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
            name = variable.op.name
            if variable is iterations and not any(
                v.op.name == "global_step" for v in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
            ):
                name = "global_step"
            names.setdefault(name, variable)
        saver = tf.compat.v1.train.Saver(
            names,
            sharded=True,
            max_to_keep=self._keep_checkpoint_max,
            allow_empty=True,
            save_relative_paths=True,
        )
        graph.add_to_collection(tf.compat.v1.GraphKeys.SAVERS, saver)
        _SAVERS[graph] = (key, saver)
        self._saver = saver

    def before_run(self) -> None:
        """Calls every hook's `before_run` with one shared run context; plans the step's run."""
        plan = _Plan()
        self._context = context = SessionRunContext(original_args=_NO_FETCHES, session=self.session)
        outputs = len(self._function.outputs)
        indices: dict[int, int] = {}
        with _sealed(self.graph):
            for hook in self.hooks:
                args = self._call(hook, "before_run", context)
                plan.hooks.append(self._plan_hook(hook, args, plan, indices, outputs))
        if self._function.run_options is not None:
            plan.merged.CopyFrom(self._function.run_options)
        if plan.options is not None:
            merge_run_options(plan.merged, plan.options)
        if self._function.run_metadata is not None:
            # The caller's RunMetadata (compile(run_metadata=...)) is the one the run fills,
            # as TF1 filled the caller's, and the hooks see that same one.
            plan.run_metadata = self._function.run_metadata
        self.plan = plan

    def _plan_hook(
        self, hook: Any, args: Any, plan: _Plan, indices: dict[int, int], outputs: int
    ) -> tuple[Any, list[Any]] | None:
        where = f"{type(hook).__name__}.before_run()"
        if args is None:
            return None
        if not isinstance(args, SessionRunArgs):
            raise TypeError(
                f"{where} returned {args!r} of type {type(args).__name__}. It must return "
                "None or tf.compat.v1.train.SessionRunArgs(fetches)."
            )
        if args.options is not None:
            if plan.options is None:
                plan.options = tf.compat.v1.RunOptions()
            merge_run_options(plan.options, args.options)
        for key, value in (args.feed_dict or {}).items():
            tensor = self.graph.as_graph_element(key, allow_tensor=True, allow_operation=False)
            if id(tensor) in plan.feeds:  # graph tensors are unhashable in TF2: keyed by id
                # MonitoredSession's own words (`_HookedSession._call_hook_before_run`).
                raise RuntimeError(f"Same tensor is fed by two hooks: {tensor.name} (in {where}).")
            plan.feeds[id(tensor)] = (tensor, value)
        if args.fetches is None:
            return None
        leaves = []
        # A single fetch (most stock hooks') needs no flattening, nor packing in after_run.
        nested = tf.nest.is_nested(args.fetches)
        for fetch in tf.nest.flatten(args.fetches) if nested else (args.fetches,):
            kind, element = self._resolve(fetch, where)
            if kind is _STEP or kind == "alias":
                leaves.append(_STEP if kind is _STEP else element)
            elif kind == "op":
                if all(op is not element for op in plan.targets):
                    plan.targets.append(element)
                leaves.append(None)
            else:
                if id(element) not in indices:
                    indices[id(element)] = outputs + len(plan.tensors)
                    plan.tensors.append(element)
                leaves.append(indices[id(element)])
        return (args.fetches if nested else _SINGLE), leaves

    def _resolve(self, fetch: Any, where: str) -> tuple[Any, Any]:
        """What a fetch is: the step, a step output's index, an op or a tensor; memoized per run.

        The stock hooks fetch the same objects every step, so a step looks each up once.
        """
        known = self._resolved.get(id(fetch))
        if known is not None and known[0] is fetch:
            return known[1], known[2]
        element = self._element(fetch, where)
        if id(element) in self._step_reads or id(fetch) in self._step_reads:
            kind, value = _STEP, None
        elif isinstance(element, tf.Operation):
            kind, value = "op", element
        elif id(element) in self._aliases:
            kind, value = "alias", self._aliases[id(element)]
        else:
            kind, value = "tensor", element
        self._resolved[id(fetch)] = (fetch, kind, value)  # the fetch held: its id stays its own
        return kind, value

    def _element(self, fetch: Any, where: str) -> Any:
        try:
            return self.graph.as_graph_element(fetch, allow_tensor=True, allow_operation=True)
        except (TypeError, ValueError, KeyError) as error:
            raise type(error)(
                f"{where} asked to fetch {fetch!r}, which is not a tensor, op, variable or name of "
                f"the model's graph in TF1 graph mode ({error}). Fetch tensors of "
                "tf.compat.v1.get_default_graph(), or names such as 'loss' and the metrics' log keys "
                f"{list(getattr(self.model, 'metrics_names', ()))}."
            ) from error

    def joined_call(self, function: Any, inputs: Any) -> Any:
        """Keras's step with the hooks' fetches, feeds and RunOptions joined in: one Session.run."""
        plan = cast(_Plan, self.plan)  # _JoinedStep checked it
        flat = tf.nest.flatten(inputs, expand_composites=True)
        feed_names, arrays, connections = [], [], []
        for tensor, value in zip(function.inputs, flat, strict=False):
            if value is None:
                continue
            if tf.is_tensor(value):  # a dataset's iterator: connected, as Keras connects it
                connections.append((value, tensor))
            else:
                feed_names.append(tensor.name)
                arrays.append(np.asarray(value, dtype=tensor.dtype.as_numpy_dtype))
        for key, value in (function.feed_dict or {}).items():  # compile(feed_dict=...)
            feed_names.append(key.name)
            arrays.append(np.asarray(value, dtype=key.dtype.as_numpy_dtype))
        for tensor, value in plan.feeds.values():
            feed_names.append(tensor.name)
            arrays.append(np.asarray(value, dtype=tensor.dtype.as_numpy_dtype))
        key = (
            tuple(feed_names),
            tuple(id(v) for v, _ in connections),
            tuple(t.name for t in plan.tensors),
            tuple(op.name for op in plan.targets),
            b"" if plan.options is None else plan.options.SerializeToString(),
        )
        callable_fn = self._callables.get(key)
        if callable_fn is None:
            callable_fn = self._callables[key] = self._make_callable(function, feed_names, connections, plan)
        try:
            values = callable_fn(*arrays, run_metadata=plan.run_metadata)
        except tf.errors.ResourceExhaustedError as error:
            asked = plan.options is not None and plan.options.report_tensor_allocations_upon_oom
            if asked and hasattr(error, "add_note"):
                error.add_note(
                    "HookCallback: the step ran with RunOptions(report_tensor_allocations_upon_oom=True), "
                    "asked by a hook, so TF's allocation report is in the message above."
                )
            raise
        count = len(function.outputs)
        keras_fetches = list(function.fetches)
        for fetch, value in zip(keras_fetches, values[count : count + len(keras_fetches)], strict=True):
            if fetch in function.fetch_callbacks:
                function.fetch_callbacks[fetch](value)
        self.outputs = list(values[:count]) + list(values[count + len(keras_fetches) :])
        structure = tf.nest.pack_sequence_as(function._outputs_structure, values[:count], expand_composites=True)
        return tf.nest.map_structure(function._eval_if_composite, structure)

    def _make_callable(self, function: Any, feed_names: list[str], connections: list[Any], plan: _Plan) -> Any:
        options = config_pb2.CallableOptions()
        options.feed.extend(feed_names)
        for value, placeholder in connections:
            connection = options.tensor_connection.add()
            if value.dtype != placeholder.dtype:
                value = tf.cast(value, placeholder.dtype)
            connection.from_tensor = value.name
            connection.to_tensor = placeholder.name
        options.fetch.extend(t.name for t in function.outputs)
        options.fetch.extend(t.name for t in function.fetches)
        options.fetch.extend(t.name for t in plan.tensors)
        options.target.append(function.updates_op.name)
        options.target.extend(op.name for op in plan.targets)
        options.run_options.CopyFrom(plan.merged)
        return self.session._make_callable_from_options(options)  # pylint: disable=protected-access

    def after_run(self, logs: Any, step: int | None = None) -> bool:
        """Calls every hook's `after_run` with the step's values; returns whether a hook asked to stop.

        Args:
            logs: Keras's logs (unused: the step's own outputs are read from its run).
            step: Unused: the v1 loop applies one update per batch, so the step is counted.

        Returns:
            Whether a hook requested a stop.
        """
        plan, self.plan = self.plan, None
        context = self._context
        if plan is None or context is None:
            return False
        stale = np.int64(self._step)
        values = self.outputs
        options = plan.merged
        with _sealed(self.graph):
            for hook, planned in zip(self.hooks, plan.hooks, strict=True):
                results = None
                if planned is not None:
                    structure, leaves = planned
                    answered = [stale if leaf is _STEP else None if leaf is None else values[leaf] for leaf in leaves]
                    results = answered[0] if structure is _SINGLE else tf.nest.pack_sequence_as(structure, answered)
                self._call(hook, "after_run", context, SessionRunValues(results, options, plan.run_metadata))
        if self.mode == "train":
            self._step += 1
        return bool(context.stop_requested)

    def end(self) -> None:
        """Calls every hook's `end(session)`, then closes the run."""
        with self.graph.as_default(), _sealed(self.graph):
            for hook in self.hooks:
                self._call(hook, "end", self.session)
        self.close()

    def close(self) -> None:
        """Gives the step function its class back and flushes the writers; `end()` is not called."""
        if self.closed:
            return
        self.closed = True
        self._coord.request_stop()
        function, self._function = self._function, None
        if function is not None and self._class is not None:
            function.__class__ = self._class
            function.__dict__.pop("_hooks2callbacks_runner", None)
        self._callables.clear()
        if self._saver is not None:  # the next run's model may differ: it makes its own
            savers = self.graph.get_collection_ref(tf.compat.v1.GraphKeys.SAVERS)
            savers[:] = [saver for saver in savers if saver is not self._saver]
        _runs.leave(self)
        self._loop = None  # as HookRunner.close: no cycle through the loop's frame

    def _call_factory(self, name: str, factory: Callable[[], Any]) -> Any:
        self.caller = name
        try:
            return factory()
        except BaseException as error:
            if hasattr(error, "add_note"):
                error.add_note(f"Raised in {name}, called by HookCallback (TF1 graph mode).")
            raise

    def _call(self, hook: Any, method: str, *args: Any) -> Any:
        fn: Callable[..., Any] | None = getattr(hook, method, None)
        if fn is None:
            return None
        self.caller = caller = f"{type(hook).__name__}.{method}()"
        try:
            return fn(*args)
        except BaseException as error:
            if hasattr(error, "add_note"):
                error.add_note(f"Raised in {caller}, called by HookCallback (TF1 graph mode).")
                if "Graph is finalized" in str(error):
                    error.add_note(
                        "As under MonitoredSession, the graph is finalized once begin() has run: build "
                        "the hook's ops in begin()."
                    )
            if method != "begin":  # begin's caller closes the run
                self.close()
            raise
