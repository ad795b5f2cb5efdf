"""Translations for the stock hooks that need more than the adapter graph.

* `CheckpointSaverHook` gets a saver of the Keras model (`hooks2callbacks._checkpoint`).
* `ProfilerHook` and `FeedFnHook` cannot work in Keras and are refused when the
  hooks are given, with what to use instead; so is a `CheckpointSaverHook`
  given a TF1 saver of its own.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from hooks2callbacks._checkpoint import KerasSaver


def refusal(hook: Any) -> str | None:
    """Returns why `hook` cannot run under `HookCallback`, and what to do instead; or None."""
    train = tf.compat.v1.train
    if isinstance(hook, train.FeedFnHook):
        return (
            "a FeedFnHook. Keras takes its inputs from the dataset given to fit()/evaluate(), "
            "not from feeds, so there is nothing for it to feed. Do what its feed_fn did in "
            "the input pipeline: a tf.data.Dataset.map, or a keras.utils.PyDataset."
        )
    if isinstance(hook, train.ProfilerHook):
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
