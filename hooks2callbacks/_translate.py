"""Translations for the stock hooks that need more than the adapter graph.

* `CheckpointSaverHook` gets a saver of the Keras model (`hooks2callbacks._checkpoint`).
* `ProfilerHook` and `FeedFnHook` cannot work in Keras and are refused when the
  hooks are given, with what to use instead; so are tfdbg's hooks, and a
  `CheckpointSaverHook` given a TF1 saver of its own. `ProfilerHook` runs in TF1
  graph mode (`_graph_mode`), where each step is a Session.run.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from hooks2callbacks._checkpoint import KerasSaver
from hooks2callbacks._seams import graph_mode_on


def refusal(hook: Any) -> str | None:
    """Returns why `hook` cannot run under `HookCallback`, and what to do instead; or None."""
    train = tf.compat.v1.train
    if isinstance(hook, train.FeedFnHook):
        return (
            "a FeedFnHook. Keras takes its inputs from the dataset given to fit()/evaluate(), "
            "not from feeds, so there is nothing for it to feed. Do what its feed_fn did in "
            "the input pipeline: a tf.data.Dataset.map, or a keras.utils.PyDataset."
        )
    debug = _tfdbg_hook(hook)
    if debug is not None:
        return (
            f"tfdbg's {debug}. It wraps run_context.session in a debug session, which takes "
            "only a TF1 BaseSession or MonitoredSession, and watches the tensors of TF1 "
            "Session.run calls; Keras's compiled steps make none. Debug the steps with TF2's "
            "tf.debugging.experimental.enable_dump_debug_info(dump_root, "
            'tensor_debug_mode="FULL_HEALTH") before fit(), and read the dump with '
            "TensorBoard's Debugger V2."
        )
    # In TF1 graph mode (tf_keras's v1 loop) each step is a Session.run that reports step stats.
    if isinstance(hook, train.ProfilerHook) and not graph_mode_on():
        return (
            "a ProfilerHook. It writes its trace from RunMetadata.step_stats of a TF1 "
            "Session.run, and Keras's compiled steps report no step stats in TF2, so its "
            "traces would be empty. Profile the same steps with "
            "keras.callbacks.TensorBoard(log_dir, profile_batch=(start, stop)), whose trace "
            "TensorBoard's profile plugin reads."
        )
    if isinstance(hook, train.CheckpointSaverHook):
        saver = getattr(hook, "_saver", None)
        if getattr(hook, "_scaffold", None) is not None or (saver is not None and not isinstance(saver, KerasSaver)):
            return (
                "a CheckpointSaverHook given its own saver= or scaffold=. A TF1 Saver saves "
                "graph variables, and the Keras model's weights are not in a graph. Leave "
                "both out: HookCallback gives the hook a saver of the Keras model and "
                "optimizer, as a Scaffold gave it one of the graph."
            )
    return None


# tensorflow/python/debug/wrappers/hooks.py: LocalCLIDebugHook, DumpingDebugHook,
# TensorBoardDebugHook (a GrpcDebugHook). Matched by module, so that the check
# imports nothing of tfdbg.
_TFDBG_MODULE = "tensorflow.python.debug.wrappers.hooks"


def _tfdbg_hook(hook: Any) -> str | None:
    """The name of the tfdbg hook class `hook` is (or derives from), else None."""
    for klass in type(hook).__mro__:
        if klass.__module__ == _TFDBG_MODULE:
            return klass.__name__
    return None
