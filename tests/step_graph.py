"""Whether a wrapped step leaves Keras's training computation as Keras built it: a graph check.

TF's graph rewrites (Grappler's remapper, oneDNN's fusions and its kernel choice
for 16-bit types) decide by the shape of the graph around an op: a `MatMul` +
`BiasAdd` is fused only when nothing else depends on the `BiasAdd`'s place in
the order of execution. A wrapped step that gives one of Keras's ops a new
control output, or new inputs, can make a CPU that has those kernels compute
another rounding, and so train to other weights, while a CPU without them
trains to the same bits. This check looks at the graphs themselves, so it fails
on any CPU.

Keras's training computation is every op of Keras's own step function that
some write to a variable depends on (the optimizer's updates, the metrics'
updates, the iteration count): in the wrapped step each of those must be there
with the same inputs, data and control, and no op may depend on it by control
that did not before. New *data* consumers are allowed: the batch values read
the loss, the predictions and what each metric's update added.

Ops are matched by what they compute, not by name (a hash over the op, its
attributes and its inputs, through function calls into their bodies), so new
ops elsewhere in the graph do not count as changes.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from typing import Any

import tensorflow as tf
from tensorflow.python.framework import op_def_registry

# Stateful ops that write nothing: reading is not a sink of the training computation.
_READS = frozenset(
    {"ReadVariableOp", "VarHandleOp", "VarIsInitializedOp", "Placeholder", "NoOp", "_Arg", "_Retval", "Const"}
)
_CALLS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
_SUFFIX = re.compile(r"_\d+$")


def _digest(*parts: Any) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def _stateful(op: str) -> bool:
    op_def = op_def_registry.get(op)
    return op_def is None or op_def.is_stateful  # a function's name: a call, treated as stateful


class _Record:
    """The ops of a step, over all function bodies reached from it."""

    def __init__(self) -> None:
        self.ops: Counter[str] = Counter()  # hash of each op of the training computation
        # (op, control consumer) from every op: the consumer hashed without its own control
        # inputs, so that an op that only gained some still counts as the same consumer.
        self.control: Counter[tuple[str, str]] = Counter()
        self.names: dict[str, str] = {}  # hash -> a readable name


def _walk(nodes: Any, library: dict[str, Any], args: dict[str, str], path: str, record: _Record) -> None:
    """Hashes one graph body (`nodes`, whose argument names map to `args` hashes) into `record`."""
    by_name = {n.name: n for n in nodes}
    hashes: dict[str, str] = dict(args)
    shallow: dict[str, str] = {}  # without control inputs: a consumer as what it computes

    def input_hash(text: str) -> str:
        name, _, port = text.partition(":")
        return f"{hash_of(name)}:{port}"

    def hash_of(name: str) -> str:
        # Iterative post-order: step graphs have long chains.
        stack = [name]
        while stack:
            current = stack[-1]
            if current in hashes:
                stack.pop()
                continue
            node = by_name[current]
            pending = [i.lstrip("^").partition(":")[0] for i in node.input]
            pending = [p for p in pending if p not in hashes]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            data = [input_hash(i) for i in node.input if not i.startswith("^")]
            control = sorted(hashes[i[1:].partition(":")[0]] for i in node.input if i.startswith("^"))
            attrs = []
            for key in sorted(node.attr):
                value = node.attr[key]
                if value.HasField("func"):
                    attrs.append((key, _SUFFIX.sub("", value.func.name.removeprefix("__inference_"))))
                elif not key.startswith("_") and not (node.op in _CALLS and key == "Tout"):
                    # A call's output types: the wrapped body returns more, read elsewhere.
                    attrs.append((key, value.SerializeToString(deterministic=True)))
            hashes[current] = _digest(path, node.op, data, control, attrs)
            shallow[current] = _digest(path, node.op, data, attrs)
            record.names.setdefault(hashes[current], f"{path}/{current} ({node.op})")
        return hashes[name]

    for node in nodes:
        hash_of(node.name)
    # The training computation: what some write depends on, by data or control.
    sinks = [n for n in nodes if n.op not in _READS and _stateful(n.op)]
    training: set[str] = set()
    stack = [n.name for n in sinks]
    while stack:
        name = stack.pop()
        if name in training or name not in by_name:
            continue
        training.add(name)
        stack.extend(i.lstrip("^").partition(":")[0] for i in by_name[name].input)
    for name in training:
        record.ops[hashes[name]] += 1
    for node in nodes:
        for text in node.input:
            if text.startswith("^"):
                record.control[(hashes[text[1:]], shallow[node.name])] += 1
                record.names.setdefault(shallow[node.name], f"{path}/{node.name} ({node.op})")
    # Into the bodies of calls, their arguments hashed as the call's inputs.
    for node in nodes:
        for key in sorted(node.attr):
            value = node.attr[key]
            if not value.HasField("func") or value.func.name not in library:
                continue
            body = library[value.func.name]
            names = [a.name for a in body.signature.input_arg]
            inputs = [i for i in node.input if not i.startswith("^")]
            if node.op in _CALLS:
                bound = [input_hash(i) for i in inputs]
            else:  # a branch or a loop body: its arguments by place
                bound = [_digest(path, node.name, key, index) for index in range(len(names))]
            _walk(
                body.node_def,
                library,
                dict(zip(names, bound, strict=False)),
                f"{path}/{_SUFFIX.sub('', body.signature.name.removeprefix('__inference_'))}",
                record,
            )


def _record(graph: Any) -> _Record:
    """Hashes a concrete function's graph: captured variables by identity, so two traces agree."""
    graph_def = graph.as_graph_def()
    library = {f.signature.name: f for f in graph_def.library.function}
    args: dict[str, str] = {}
    captured = {id(internal) for _, internal in graph.captures}
    for external, internal in graph.captures:
        args[internal.op.name] = _digest("capture", id(external))
    for index, tensor in enumerate(t for t in graph.inputs if id(t) not in captured):
        args[tensor.op.name] = _digest("input", index)
    record = _Record()
    nodes = [n for n in graph_def.node if n.name not in args]
    _walk(nodes, library, {name: value for name, value in args.items()}, "", record)
    return record


def changes(original: Any, wrapped: Any) -> list[str]:
    """How the wrapped step's graph changes Keras's training computation; empty when it does not.

    Args:
        original: The graph of Keras's own compiled step (a concrete function's `.graph`).
        wrapped: The graph of the wrapped step, traced for the same model and input.

    Returns:
        One line per change: an op of the training computation missing or changed
        (its inputs), or one that gained a control output.
    """
    before, after = _record(original), _record(wrapped)
    found = []
    for op, count in (before.ops - after.ops).items():
        found.append(f"changed or missing: {before.names[op]} (its inputs or control inputs differ) x{count}")
    for (op, consumer), count in (after.control - before.control).items():
        if op in before.ops:
            name = after.names.get(consumer, consumer)
            found.append(f"gained a control output: {before.names[op]} -> {name} x{count}")
    return sorted(found)


def traced(function: Any, x: Any, y: Any, batch: int) -> Any:
    """The graph of a model's compiled step `function` (Keras 3 on TensorFlow, or tf_keras), for batches of x, y.

    Args:
        function: `model.train_function` or `model.test_function`, Keras's own or,
            during a run of a `HookCallback`, the wrapped one (its `compiled`).
        x, y: The data whose batches' types the function is traced for.
        batch: The batch size.
    """
    # A local import: this module is imported by tests that run on every backend.
    from hooks2callbacks._seams import keras3_multi_step

    function = getattr(function, "compiled", function)  # the wrapped step's: Keras's make_*_function's
    compiled = keras3_multi_step(function) or function  # Keras 3: the tf.function inside; tf_keras: itself
    iterator = iter(tf.data.Dataset.from_tensor_slices((x, y)).batch(batch))
    return compiled.get_concrete_function(iterator).graph
