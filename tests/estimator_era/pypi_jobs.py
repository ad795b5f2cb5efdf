"""What real public Estimator jobs, installed from PyPI, need to import and build on TensorFlow 2.

The jobs themselves are imported from their packages and run unchanged; this module only gives
back, around them, two things of TensorFlow 1.x that TensorFlow 2 took away:

- `tensorflow.contrib`: google-research/bert's `modeling.py` (PyPI `bert-tensorflow`) does
  `from tensorflow.contrib import layers as contrib_layers`, for `contrib_layers.layer_norm`.
  `tf.contrib` was removed in TF 2.0; TensorFlow's migration guide names tf-slim (`tf_slim`) as
  the home of `tf.contrib.layers` since. `install_contrib_layers()` registers a module
  `tensorflow.contrib` whose `layers` is `tf_slim.layers` in `sys.modules`, before the import.
- TF 1.x's `TensorShape`: `run_classifier.create_model` reads `output_layer.shape[-1].value`,
  a `Dimension`'s `.value`; in TF 2 a shape's items are ints. `tf1_shapes(model_fn)` runs the
  model_fn with `tf.compat.v1.disable_v2_tensorshape()` in force (TF 1.x's behaviour, the one
  the job was written for), and puts TF 2's back when it returns, so that Keras never sees it.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types

import tensorflow as tf


def install_contrib_layers():
    """Registers `tensorflow.contrib` with `layers = tf_slim.layers`, as the TF 1.x jobs import it.

    Idempotent. Leaves a real `tensorflow.contrib` (TF 1.x) alone.

    Returns:
        The `tensorflow.contrib` module in `sys.modules`.
    """
    import tf_slim

    contrib = sys.modules.get("tensorflow.contrib")
    if contrib is None:
        contrib = types.ModuleType(
            "tensorflow.contrib", "tf.contrib's layers for TF 1.x code, from tf_slim (its successor)"
        )
        contrib.layers = tf_slim.layers
        sys.modules["tensorflow.contrib"] = contrib
    return contrib


def import_bert():
    """google-research/bert's modules from PyPI `bert-tensorflow`, after the aliases they need.

    `install_estimator_aliases()` gives `tf.estimator.ModeKeys` and
    `tf.estimator.tpu.TPUEstimatorSpec`, which `run_classifier`'s and `run_pretraining`'s
    model_fns use.

    `run_classifier` and `run_pretraining` were scripts of their own, and each defines the same
    absl flags (`bert_config_file`, ...) at import: in one process the second import raised
    `DuplicateFlagError`. Before each import the flags that bert's modules defined already are
    made overridable (`Flag.allow_override`), so the later module's definitions replace them. The
    jobs' `model_fn_builder`s take everything as arguments and read no flag.

    Returns:
        The modules `modeling`, `optimization`, `run_classifier`, `run_pretraining`.
    """
    import importlib

    import hooks2callbacks

    install_contrib_layers()
    hooks2callbacks.install_estimator_aliases()
    modules = {}
    for name in ("modeling", "optimization", "run_classifier", "run_pretraining"):
        _bert_flags_overridable()
        modules[name] = importlib.import_module(f"bert.{name}")
    return types.SimpleNamespace(**modules)


def _bert_flags_overridable():
    from absl import flags

    for module, defined in flags.FLAGS.flags_by_module_dict().items():
        if module.startswith("bert."):
            for flag in defined:
                flag.allow_override = True


@contextlib.contextmanager
def tf1_tensor_shapes():
    """TF 1.x's `TensorShape` (items are `Dimension`s, with `.value`) while the block runs."""
    was_v2 = isinstance(tf.TensorShape([1])[0], int)
    tf.compat.v1.disable_v2_tensorshape()
    try:
        yield
    finally:
        if was_v2:
            tf.compat.v1.enable_v2_tensorshape()


def tf1_shapes(model_fn):
    """`model_fn`, building its graph with TF 1.x's `TensorShape`; see `tf1_tensor_shapes`."""

    @functools.wraps(model_fn)
    def built_as_in_tf1(features, labels, mode, params):
        with tf1_tensor_shapes():
            return model_fn(features, labels, mode, params)

    return built_as_in_tf1
