"""Which worker this is, and one stop decision shared by all workers.

Under `tf.distribute`, every worker runs the same `fit` with its own copy of the
callback. Keras all-reduces the logs, so the hooks on every worker see the same
values and the same global step; what can differ is *who* runs a hook
(chief-only hooks run on the chief alone) and so who asks to stop. A worker that
left the loop alone would leave the others waiting in the next step's
all-reduce forever, so in multi-worker training the stop flag is all-reduced
too, and every worker stops after the same step.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from hooks2callbacks._seams import is_default_strategy


def strategy_of(model: Any) -> tf.distribute.Strategy:
    """Returns the model's `tf.distribute` strategy, or TF's default one.

    Keras 3 on JAX or PyTorch has no TF strategy; the default strategy then says
    "one worker, the chief".
    """
    strategy = getattr(model, "distribute_strategy", None)
    return strategy if isinstance(strategy, tf.distribute.Strategy) else tf.distribute.get_strategy()


def is_default(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` is TF's default strategy (no tf.distribute at all)."""
    return is_default_strategy(strategy)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this worker is the chief (the one that writes checkpoints and summaries)."""
    # False exactly on MultiWorkerMirroredStrategy's non-chief workers.
    return bool(strategy.extended.should_checkpoint)


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` spans several worker processes."""
    # tf_keras asks the same private question wherever it handles workers.
    in_multi_worker_mode = getattr(strategy.extended, "_in_multi_worker_mode", None)
    return bool(in_multi_worker_mode is not None and in_multi_worker_mode())


class StopAgreement:
    """Turns each worker's own stop request into one decision for all workers.

    Calling it is a collective: every worker must call it once per step, which
    the callback does at every train batch end.
    """

    def __init__(self, strategy: tf.distribute.Strategy) -> None:
        self.strategy = strategy

        def requests(flag: tf.Tensor) -> tf.Tensor:
            per_replica = strategy.run(tf.identity, args=(flag,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        self._requests = tf.function(requests)

    def __call__(self, stop: bool) -> bool:
        """Returns whether any worker asked to stop this step."""
        return bool(self._requests(tf.constant(1 if stop else 0, tf.int32)).numpy() > 0)
