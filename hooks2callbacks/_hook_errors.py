"""Notes on a hook's error: which hook method raised it, and the way out of TF's errors for an eager value
(a Keras variable) used in an op of the adapter graph."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from hooks2callbacks._graph import AdapterGraph


def note_caller(error: BaseException, caller: str, graph: AdapterGraph) -> None:
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
