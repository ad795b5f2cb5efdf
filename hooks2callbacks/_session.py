"""The session hooks call: `session` in `after_create_session`/`end` and `run_context.session`.

It answers what it can from Keras's own values (log keys, the global step,
eager variables) and runs a real `tf.compat.v1.Session` on the adapter graph
only for the rest. The real session is made on first need and initialised as
TF1's Scaffold would, so a run whose hooks only read logs never makes one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import tensorflow as tf

from hooks2callbacks._fetch import compile_fetches, log_value

if TYPE_CHECKING:
    from hooks2callbacks._dispatch import HookRunner

# What a step without derived fetches ran: nothing (shared, never written to).
NOTHING_RAN: Mapping[Any, Any] = {}


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
            options: Passed to the real run, if one is needed.
            run_metadata: Passed to the real run, if one is needed.

        Returns:
            The values, in the structure of `fetches`.

        Raises:
            TypeError, ValueError: For fetches that cannot be resolved.
        """
        runner = self._runner
        where = f"{runner.caller} (through session.run)"
        plan = compile_fetches(fetches, runner.graph, runner.model, where)
        ran = self.run_graph(
            plan.derived, plan.fed_keys, runner.logs, runner.step, where, feed_dict, options, run_metadata
        )
        return plan.resolve(runner.logs, runner.step, ran)

    def run_graph(
        self,
        derived: tuple[Any, ...],
        fed_keys: tuple[str, ...],
        logs: Mapping[str, Any],
        step: np.int64,
        where: str,
        feed_dict: Mapping[Any, Any] | None = None,
        options: tf.compat.v1.RunOptions | None = None,
        run_metadata: tf.compat.v1.RunMetadata | None = None,
    ) -> Mapping[Any, Any]:
        """Runs graph elements for real, with the global step set to `step`.

        Returns:
            A mapping from each element of `derived` to its value.
        """
        if not derived:
            return NOTHING_RAN
        session = self._real_session()
        graph = self._runner.graph
        if self._synced_step != step:
            session.run(graph.step_assign, graph.step_feed(step))
            self._synced_step = step
        feeds = {graph.log_tensors[k]: log_value(logs, k, where) for k in fed_keys}
        if feed_dict:
            feeds.update(feed_dict)
        values = session.run(list(derived), feeds, options, run_metadata)
        return dict(zip(derived, values))

    def _real_session(self) -> tf.compat.v1.Session:
        if self._session is None:
            graph = self._runner.graph
            self._session = tf.compat.v1.Session(graph=graph)
            if graph.init_op is not None:
                self._session.run(graph.init_op)
        return self._session

    def close(self) -> None:
        """Closes the real session, if one was made."""
        if self._session is not None:
            self._session.close()
            self._session = None
