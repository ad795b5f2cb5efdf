"""The session hooks call: `session` in `after_create_session`/`end` and `run_context.session`.

It answers what it can from Keras's own values (log keys, the global step,
eager variables, the model's variables) and runs a real `tf.compat.v1.Session`
on the adapter graph only for the rest. The real session is made on first need
and initialised as TF1's Scaffold would, so a run whose hooks only read logs
never makes one; it is made right after `begin()` when `init_from_checkpoint`
gave model variables an initializer, as TF1 restored them at session creation.

`run_graph` is the one place where the model's variables and their TF1
variables (`hooks2callbacks._model`) are synced: before a run, the variables it
reads or writes are loaded with their Keras values; after a run that wrote
some, their new values are assigned to the Keras variables (and a written
global step to `optimizer.iterations`), before Keras's next step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from hooks2callbacks._fetch import Plan, check_feeds, compile_fetches, log_value
from hooks2callbacks._keras_state import accumulation_steps, optimizer_of, step_source, write_variable
from hooks2callbacks._seams import context
from hooks2callbacks._tensors import fed, root_of

if TYPE_CHECKING:
    from hooks2callbacks._dispatch import HookRunner

# What a step without derived fetches ran: nothing (shared, never written to).
NOTHING_RAN: Mapping[Any, Any] = {}


def _session_config() -> tf.compat.v1.ConfigProto:
    """The real session's config: the context's (its devices), without graph rewriting.

    The adapter graph's runs are tiny; Grappler's rewriting of each new set of
    fetches and feeds costs milliseconds at its first run, which is every run's
    first step of a hook that fetches an op of its own.
    """
    config = tf.compat.v1.ConfigProto()
    config.CopyFrom(context.context().config)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


class AdapterSession:
    """A stand-in for `tf.compat.v1.Session`, serving the calls hooks make.

    `run()` sees the *current* global step (after the step's increment, once the
    step has run), and the logs of the latest finished step.
    """

    def __init__(self, runner: HookRunner) -> None:
        self._runner = runner
        self._session: tf.compat.v1.Session | None = None
        self._synced_step: np.int64 | None = None

    @property
    def graph(self) -> tf.Graph:
        """The adapter graph, as `tf.compat.v1.Session.graph`."""
        return self._runner.graph

    def run(
        self,
        fetches: Any,
        feed_dict: Mapping[Any, Any] | None = None,
        options: tf.compat.v1.RunOptions | None = None,
        run_metadata: tf.compat.v1.RunMetadata | None = None,
    ) -> Any:
        """Evaluates `fetches` as `tf.compat.v1.Session.run` would.

        Args:
            fetches: A fetch structure (see `hooks2callbacks._fetch`).
            feed_dict: Feeds for graph elements, as in TF1 (for example the
                initializer feed of `tf.Variable.load`).
            options: Passed to the real run, if one is needed; where every fetch is
                answered from Keras's values, there is no run for them, and the
                dispatch path says so once (`StepOptions.session_options_unused`).
            run_metadata: Passed to the real run, if one is needed (else left as it is).

        Returns:
            The values, in the structure of `fetches`.

        Raises:
            TypeError, ValueError: For fetches that cannot be resolved.
        """
        runner = self._runner
        where = f"{runner.caller} (through session.run)"
        feeds = check_feeds(feed_dict, runner.graph, where) if feed_dict else None
        plan = compile_fetches(fetches, runner.graph, runner.model, where)
        ran = self.run_graph(plan, runner.logs, runner.step, where, feeds, options, run_metadata)
        if options is not None and not plan.derived:
            runner.run_options.session_options_unused(where, options)
        return plan.resolve(runner.logs, runner.step, ran)

    def run_graph(
        self,
        plan: Plan,
        logs: Mapping[str, Any],
        step: np.int64,
        where: str,
        feed_dict: Mapping[Any, Any] | None = None,
        options: tf.compat.v1.RunOptions | None = None,
        run_metadata: tf.compat.v1.RunMetadata | None = None,
    ) -> Mapping[Any, Any]:
        """Runs a plan's derived elements for real, with the global step set to `step` if they use it.

        Args:
            plan: What to run (`derived`), which log keys and model variables
                to feed (`fed_keys`, `reads`), and which model variables to
                load before and store after (`loads`, `stores`, `writes_step`).
            logs: The step's logs, fed to the log-key tensors.
            step: The global step to set first (and at which a scheduled
                learning rate is read).
            where: Who runs it, for messages.
            feed_dict: The hooks' own feeds (checked).

        Returns:
            A mapping from each element of `plan.derived` to its value.
        """
        if not plan.derived:
            return NOTHING_RAN
        session = self._real_session()
        graph = self._runner.graph
        if plan.uses_step and self._synced_step != step:
            session.run(graph.step_assign, graph.step_feed(step))
            self._synced_step = step
        if plan.loads:
            graph.mirror.load(session, plan.loads, step)
        feeds = {}
        for k in plan.fed_keys:
            tensor, value = graph.log_tensors[k], log_value(logs, k, where, plan.fed_keys, graph.names)
            # A batch tensor's placeholder dtype was chosen before the first step.
            feeds[tensor] = value if root_of(k) is None else fed(tensor, value, k, where)
        if plan.reads:
            feeds.update(graph.mirror.feeds(plan.reads, step))
        if feed_dict:
            feeds.update(feed_dict)
        values = session.run(list(plan.derived), feeds, options, run_metadata)
        if plan.stores:
            graph.mirror.store(session, plan.stores, where)
        if plan.writes_step:
            self._store_step(session)
        return dict(zip(plan.derived, values, strict=True))

    def open(self) -> None:
        """Makes the real session now (TF1 made it after `begin()`); it restores what
        `init_from_checkpoint` set up, into Keras, and sets the global step (whose
        first run would otherwise be paid in the first step)."""
        session = self._real_session()
        runner = self._runner
        if self._synced_step != runner.step:
            session.run(runner.graph.step_assign, runner.graph.step_feed(runner.step))
            self._synced_step = runner.step

    def _store_step(self, session: tf.compat.v1.Session) -> None:
        """After a hook wrote (or init_from_checkpoint restored) the global step: Keras continues from it."""
        runner = self._runner
        value = session.run(runner.graph.global_step)
        if value != self._synced_step:
            optimizer = optimizer_of(runner.model)
            if optimizer is not None:
                write_variable(step_source(optimizer), value * accumulation_steps(optimizer), runner.model)
            runner.step = self._synced_step = value

    def _real_session(self) -> tf.compat.v1.Session:
        if self._session is None:
            graph = self._runner.graph
            self._session = tf.compat.v1.Session(graph=graph, config=_session_config())
            if graph.init_op is not None:
                self._session.run(graph.init_op)
            # What init_from_checkpoint restored goes into Keras, as TF1 restored it at session creation.
            restored = graph.mirror.restored() if graph.mirror is not None else []
            if restored:
                graph.mirror.store(self._session, restored, "tf.compat.v1.train.init_from_checkpoint")
            if graph.step_restored():
                self._store_step(self._session)
        return self._session

    def close(self) -> None:
        """Closes the real session, if one was made."""
        if self._session is not None:
            self._session.close()
            self._session = None
