"""Keras variables used in ops of an adapter graph stand for their TF1 variables there.

Hook code writes `model.optimizer.learning_rate * 0.5` or `tf.compat.v1.assign(keras_variable, v)`
in `begin()`; TF cannot capture an eager value into a TF1 graph, so a conversion function
(registered once, when the first mirror is made) and wrappers of `tf.compat.v1.assign*` (installed
at import) give TF the variable's mirror in the default adapter graph, and decline everywhere else.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from hooks2callbacks._seams import context, ops, resource_variable_ops, tensor_conversion_registry

if TYPE_CHECKING:
    from hooks2callbacks._model import ModelMirror

_registered = False


def register_conversions() -> None:
    """Makes a Keras variable used in an op of an adapter graph stand for its mirror variable.

    Without this, `model.optimizer.learning_rate * 0.5` in `begin()` fails with
    "Attempting to capture an EagerTensor". Registered once, when the first
    mirror is made; outside an adapter graph the function declines, and TF's
    own conversion runs.
    """
    global _registered
    if _registered:
        return
    _registered = True
    # Keras 3 TF-backend variables convert through their tf.Variable (`__tf_tensor__`);
    # tf_keras variables are tf.Variables; JAX and PyTorch Keras variables reach the registry.
    for kind in (resource_variable_ops.BaseResourceVariable, keras.Variable):
        tensor_conversion_registry.register_tensor_conversion_function(kind, _to_mirror, priority=50)


def _redirect_assigns() -> None:
    """Makes `tf.compat.v1.assign`, `assign_add` and `assign_sub`, given a Keras variable in an op
    of an adapter graph, write its TF1 variable (the write reaches Keras as any write to it does).

    TF's own cannot take one (they ask `ref.dtype._is_ref_dtype`, a string's in Keras 3, or assign
    eagerly, tf_keras) and offer no dispatch to register with, so `tf.compat.v1`'s three are
    replaced, when this package is imported, by wrappers that give TF's own the TF1 variable there
    and pass every other call unchanged. Code that bound TF's own before
    (`from tensorflow.compat.v1 import assign` ahead of importing hooks2callbacks) keeps TF's
    error, with a note naming the TF1 variable (`_hook_errors._assign_help`).
    """
    # `tf.compat.v1` and `import tensorflow.compat.v1` are two module objects (and two
    # wrappers around them) made from the same file: both get the wrappers.
    modules = [importlib.import_module(name) for name in ("tensorflow._api.v2.compat.v1", "tensorflow.compat.v1")]
    modules += [getattr(m, "_tfmw_wrapped_module", m) for m in modules]
    for name in ("assign", "assign_add", "assign_sub"):
        original = getattr(tf.compat.v1, name)
        original = getattr(original, "__wrapped__", original)

        @functools.wraps(original)
        def redirected(ref: Any, *args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            return _original(_tf1_variable(ref), *args, **kwargs)

        for module in modules:
            if getattr(module, name) is original:
                setattr(module, name, redirected)


_redirect_assigns()


def _tf1_variable(ref: Any) -> Any:
    """`ref`'s TF1 variable where `ref` is a Keras variable used in an adapter graph; else `ref`."""
    if not isinstance(ref, (keras.Variable, resource_variable_ops.BaseResourceVariable)):
        return ref
    found = _mirrored(ref)
    return ref if found is None or found is _NOT_MODELS else found


def _mirrored(value: Any) -> Any:
    """The TF1 variable standing for eager variable `value` in the default adapter graph:
    the global step's or its mirror entry's; `_NOT_MODELS` where the model has no such
    variable; None outside an adapter graph (or eagerly, or for a graph variable)."""
    if context.executing_eagerly() or getattr(value, "_in_graph_mode", False):
        return None
    graph = ops.get_default_graph()
    mirror: ModelMirror | None = getattr(graph, "mirror", None)
    if mirror is None:
        return None
    if mirror.is_step(value):
        return graph.global_step
    entry = mirror.of_variable(value)
    if entry is None:
        return _NOT_MODELS
    mirror.build()
    return entry.variable


_NOT_MODELS = object()


def _to_mirror(value: Any, dtype: Any = None, name: Any = None, as_ref: bool = False) -> Any:
    variable = _mirrored(value)
    if variable is None:
        return NotImplemented  # not an adapter graph, or a variable of a graph
    if variable is _NOT_MODELS:
        caller = getattr(getattr(ops.get_default_graph(), "owner", None), "caller", "a hook")
        raise ValueError(
            f"{caller} used the eager variable {getattr(value, 'name', value)!r} in an op of the "
            "adapter graph, and it is neither the Keras model's nor its optimizer's, so it has "
            "no TF1 variable there (TF cannot capture an eager value into a TF1 graph). Give it "
            "one with HookCallback(names={'some_name': variable}), or use the model's variables: "
            "tf.compat.v1.trainable_variables(), or by name such as 'dense/kernel:0'."
        )
    return ops.convert_to_tensor(variable, dtype=dtype, name=name, as_ref=as_ref)
