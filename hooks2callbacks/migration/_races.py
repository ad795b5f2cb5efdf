"""TF1's own nondeterminism: a fetched tensor that reads a variable the same run writes, unordered.

In a TF1 graph, one `session.run` runs every op its fetches need, in an order
the scheduler chooses among those the graph's edges allow. Where a hook fetches
a tensor that reads a variable, and the same run writes that variable (the
train op's `global_step` increment, an eval run's `tf.metrics` update op), and
no path orders the read and the write, TF1 gave the value read before the
write or the one read after it, as the scheduler chose, run by run:

    fetched tensor T --reads--> variable V <--writes-- op W (in the same run)
    race: W is not an ancestor of the read, and the read is not an ancestor of W

The check finds each such place in the graph (`RaceWatch.racy`), and runs the
TF1 side once in each order: it evaluates T alone, side-effect free, just
before the step's run (read-before-write) or just after it (read-after-write),
and gives the hook that value. The Keras side passes where it matches one of
the two runs from its first step to its last.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

import tensorflow as tf

ORDERS = ("read before write", "read after write")

_VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp"})
# Stateful ops a side-effect-free re-evaluation may run: they only read state.
# The ops that read a resource variable's value through its handle (input 0): a read, an embedding
# lookup's gather. The other ops that take a handle write it, or read no value (`VariableShape`).
_RESOURCE_READS = frozenset({"ReadVariableOp", "ResourceGather", "ResourceGatherNd"})
_READ_ONLY_STATEFUL = frozenset({"VariableV2", "Variable", "VarHandleOp", "Const", *_RESOURCE_READS})
_PASS_REF = frozenset({"RefIdentity", "Identity"})


@dataclasses.dataclass(frozen=True)
class Race:
    """One place where TF1 left the order of a read and a write to its scheduler.

    Attributes:
        hook: The hook that fetched the tensor, as `"<index> <class>"`.
        key: The fetched leaf, as the report names it (`"results['step']"`).
            For a race inside the step's run itself, `hook` is `"(run)"`,
            `key` `"the train op"` and `tensor` the reading op.
        tensor: The tensor fetched.
        variable: The variable it reads.
        write: The op of the same run that writes the variable.
    """

    hook: str
    key: str
    tensor: str
    variable: str
    write: str

    def __str__(self) -> str:
        if self.hook == "(run)":
            return (
                f"the train op: its op {self.tensor!r} reads the variable {self.variable!r}, which the same run "
                f"writes ({self.write!r}), and no edge orders the two: TF1 trained on the value read before or "
                "after the write, as its scheduler chose"
            )
        return (
            f"{self.hook} {self.key}: the fetched tensor {self.tensor!r} reads the variable {self.variable!r}, "
            f"which the same run writes ({self.write!r}), and no edge orders the two: TF1 gave the value "
            "read before or after the write, as its scheduler chose"
        )


def _is_ref(tensor: Any) -> bool:
    """Whether a tensor is a ref variable's reference (read when its consumer runs)."""
    return bool(tensor.dtype != tensor.dtype.base_dtype)


def _is_writer(op: Any) -> bool:
    kind = op.type
    return bool(op.inputs) and (
        kind.startswith(("Assign", "ResourceApply", "ResourceSparseApply", "Scatter", "ResourceScatter"))
        or kind.startswith(("Apply", "SparseApply"))
        or kind in ("CountUpTo", "ResourceCountUpTo")
    )


def _variable_of(tensor: Any) -> Any:
    """The variable op a tensor stands for (through identities), else None.

    A ref variable's `Identity` shares the variable's buffer: what reads it reads
    the variable when it runs, so identities are followed whatever their dtype.
    """
    op = tensor.op
    for _ in range(32):
        if op.type in _VARIABLE_OPS:
            return op
        if op.type not in _PASS_REF or not op.inputs:
            return None
        op = op.inputs[0].op
    return None


def _reads(op: Any) -> Iterator[Any]:
    """The variables `op` reads when it runs (identities pass a variable on: their consumers read it)."""
    if _is_writer(op) or op.type in _PASS_REF or op.type in _VARIABLE_OPS:
        return
    for index, given in enumerate(op.inputs):
        variable = _variable_of(given)
        if variable is None or (variable.type == "VarHandleOp") != (op.type in _RESOURCE_READS):
            continue  # a resource variable's value is read by the ops that read through its handle only
        if index == 0 or op.type not in _RESOURCE_READS:
            yield variable


def _describe(op: Any) -> str:
    return f"{op.name} ({op.type})"


def _parents(op: Any) -> Iterator[Any]:
    for tensor in op.inputs:
        yield tensor.op
    yield from op.control_inputs


def _ancestors(ops: Iterable[Any]) -> list[Any]:
    """Every op the given ops need (themselves included), by name.

    By name, not in a set's order: that follows the ops' addresses, which differ from run to
    run, and the races found, in that order, were the report's lines.
    """
    found: set[Any] = set()
    stack = list(ops)
    while stack:
        op = stack.pop()
        if op in found:
            continue
        found.add(op)
        stack.extend(_parents(op))
    return sorted(found, key=lambda op: op.name)


def _reaches(start: Any, target: Any) -> bool:
    """Whether `target` is an ancestor of `start` (a path orders target before start)."""
    seen: set[Any] = set()
    stack = [start]
    while stack:
        op = stack.pop()
        if op is target:
            return True
        if op in seen:
            continue
        seen.add(op)
        stack.extend(_parents(op))
    return False


def _as_op(element: Any) -> Any:
    return element if isinstance(element, tf.Operation) else element.op


class RaceWatch:
    """Finds the races of a hook's fetches against the step's run, in one TF1 graph.

    Args:
        graph: The TF1 graph.
        run_fetches: What the check's loop runs each step (the train op, the eval update ops).
    """

    def __init__(self, graph: Any, run_fetches: Any) -> None:
        self.graph = graph
        self._run_ops = [_as_op(graph.as_graph_element(f)) for f in tf.nest.flatten(run_fetches)]
        self._writes: dict[Any, list[Any]] | None = None
        self._cache: dict[str, tuple[str, str] | None] = {}
        self._pure: dict[str, bool] = {}

    def _written(self) -> dict[Any, list[Any]]:
        """The variables the step's run writes, each with its writing ops."""
        if self._writes is None:
            self._writes = {}
            for op in _ancestors(self._run_ops):
                if _is_writer(op):
                    variable = _variable_of(op.inputs[0])
                    if variable is not None:
                        self._writes.setdefault(variable, []).append(op)
        return self._writes

    def run_races(self) -> list[tuple[Any, Any, Any]]:
        """`(read, variable, write)`: the step's run itself reads a variable it writes, unordered.

        A model_fn whose rate reads the global step that its own train op
        increments (`global_step.assign(global_step + 1)` grouped with the
        update, as BERT's `create_optimizer`) trained on the rate of the step
        or of the next one, as TF1's scheduler chose.
        """
        writes = self._written()
        found = []
        for op in _ancestors(self._run_ops):
            for read in _reads(op):
                for write in writes.get(read, []):
                    if not _reaches(op, write) and not _reaches(write, op):
                        found.append((op, read, write))
        return found

    def order(self, races: list[tuple[Any, Any, Any]], order: int) -> None:
        """Adds the edges that run each racing read before (order 0) or after (1) its write.

        The graph is the check's own, not finalized yet.
        """
        for read, _, write in races:
            if order == 0:
                write._add_control_input(read)  # pylint: disable=protected-access
            else:
                read._add_control_input(write)  # pylint: disable=protected-access

    def race(self, tensor: Any) -> tuple[str, str] | None:
        """`(variable, write)` where `tensor` reads a variable the step writes, unordered; else None."""
        name = tensor.name
        if name not in self._cache:
            self._cache[name] = self._find(tensor)
        return self._cache[name]

    def _find(self, tensor: Any) -> tuple[str, str] | None:
        writes = self._written()
        if not writes:
            return None
        fetched = tensor.op
        variable = _variable_of(tensor)
        if variable is not None and variable in writes and variable.type != "VarHandleOp":
            # A ref variable (or an identity of it) fetched itself: read when the fetch is taken,
            # which no edge orders with the write.
            return variable.name, _describe(writes[variable][0])
        for op in _ancestors([fetched]):
            for read in _reads(op):
                for write in writes.get(read, []):
                    if not _reaches(op, write) and not _reaches(write, op):
                        return read.name, _describe(write)
        return None

    def pure(self, tensor: Any) -> bool:
        """Whether `tensor` can be evaluated alone without side effects (it only reads state)."""
        name = tensor.name
        if name not in self._pure:
            self._pure[name] = all(
                not op.op_def.is_stateful or op.type in _READ_ONLY_STATEFUL for op in _ancestors([tensor.op])
            )
        return self._pure[name]
