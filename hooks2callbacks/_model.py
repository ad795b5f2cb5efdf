"""The Keras model inside the adapter graph: its variables as TF1 variables.

Real TF1 hooks reach into the model graph: `tf.compat.v1.trainable_variables()`
to count parameters or take norms, `global_variables()` to broadcast them,
`tf.compat.v1.train.init_from_checkpoint` to warm-start them, assign ops to
decay a learning rate. A `ModelMirror` gives a run's adapter graph one TF1
variable per variable of the Keras model and of its optimizer, made on first
need: a run whose hooks never look at them pays nothing for them.

* **Names**, by one rule: the Keras path (`Variable.path` in Keras 3, the name
  without `:0` in tf_keras), less the model's own name as prefix; characters
  TF refuses in op names become `_` (and a leading one gets a `v` in front); a
  clash gets `_1`, `_2`, ... as TF1 uniquified names. So the Keras 3 path
  `sequential/dense/kernel` is `dense/kernel:0`, as `tf.compat.v1.layers.dense`
  named it. The optimizer's learning rate is `learning_rate` (its path works
  too); the optimizer's step counter is the graph's global step.
* **Collections**: model weights in `GLOBAL_VARIABLES` and `MODEL_VARIABLES`,
  the trainable ones in `TRAINABLE_VARIABLES` too; the optimizer's variables
  (a learning rate that is a variable, the slots) in `GLOBAL_VARIABLES`; all in
  the variable store, where `init_from_checkpoint` looks names up.
* **Values**: a mirror variable keeps no state of its own. A graph run that
  only reads a mirror variable through its value tensor is fed the current
  Keras value there; one that writes it (or reads its ref) first loads the
  Keras value into the variable, and after the run the new values of the
  written variables are assigned to the Keras variables
  (`AdapterSession.run_graph`, the one place that syncs). A fetch of a mirror
  variable itself just reads the Keras variable.
* **init_from_checkpoint** replaces a variable's initializer, as in TF1; the
  session runs those initializers when it is made, right after every `begin()`
  (as a TF1 `Scaffold` did), and assigns the restored values to Keras.
* A learning rate computed by a `LearningRateSchedule` (or a callable) cannot
  be written. It reads as the rate of a global step (`Entry.read_at`): in a
  step's results, the step's own (the stale step hooks see), which is the rate
  that trained it, as TF1's rate tensor computed from the global step's read
  that the train op depended on; in a `session.run` of a hook, the current
  step's, the rate of the next step. Keras's `optimizer.learning_rate` after
  the step is already the next step's.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import keras
import numpy as np
import tensorflow as tf

from hooks2callbacks._cluster import sharded_across_processes
from hooks2callbacks._graph import Unsealed
from hooks2callbacks._seams import (
    context,
    ops,
    optimizer_micro_steps,
    resource_variable_ops,
    tensor_conversion_registry,
)

_KEYS = tf.compat.v1.GraphKeys
LEARNING_RATE = "learning_rate"
GLOBAL_STEP = "global_step"
# Characters TF refuses in op names, and what a name may start with.
_REFUSED = re.compile(r"[^A-Za-z0-9_.\-/>]")
_FIRST = re.compile(r"[A-Za-z0-9.]")
# Ops that do not change the variable whose ref they take.
_READS_REF = frozenset({"IsVariableInitialized"})


def read_variable(variable: Any, model: Any = None) -> Any:
    """Reads an eager TF or Keras variable, also from inside the adapter graph's context."""
    if _loop_states:  # a stateless loop's state, handed in, reaches the variables at the first read
        _sync_loop_state(model)
    # Keras's JAX trainer keeps the state outside the variables during an epoch;
    # this writes it back (as `Callback.model` does), so the value is current.
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()
    # tf.init_scope does not leave a graph entered with as_default().
    with context.eager_mode():
        # A TF variable (also Keras 3's on the TF backend) reads fastest with numpy():
        # np.array() goes through a deprecation warning, and for a scalar mirrored
        # variable fails (its __array__ gives a numpy scalar).
        value = variable.value if isinstance(variable, keras.Variable) else variable
        if isinstance(value, tf.Variable):
            return np.asarray(value.numpy())
        try:
            return keras.ops.convert_to_numpy(variable)
        except RuntimeError as error:
            refusal = sharded_across_processes(variable)
            if refusal is None:
                raise
            raise refusal from error


def write_variable(variable: Any, value: Any, model: Any = None) -> None:
    """Assigns `value` to an eager TF or Keras variable, so that Keras's next step uses it."""
    if _loop_states:
        loop_state = _sync_loop_state(model)
        if loop_state is not None:
            loop_state.wrote()
    # After a JAX sync the trainer takes its state from the variables again
    # at the next batch (`_jax_state_synced`), so the assignment survives.
    sync = getattr(model, "jax_state_sync", None)
    if sync is not None:
        sync()
    with context.eager_mode():
        variable.assign(value)


class LoopState:
    """A stateless training loop's state (keras.io's JAX loop), held outside the model.

    The loop hands it in with its logs (`"state"`: trainable, non-trainable and
    optimizer variables' values); it reaches the Keras variables only when hook code
    reads or writes one of them (a fetch by name, a checkpoint, an assign op), so a
    step whose hooks touch no variable costs nothing. `take()` gives it back, with
    the hooks' writes where they wrote.

    Attributes:
        pending: The state handed in and not yet in the variables, or None.
        writer: Describes the hook call that last wrote a variable (None: no write
            since the state was last taken).
    """

    def __init__(self, model: Any, optimizer: Any, caller: Callable[[], str]) -> None:
        self.model = model
        self.optimizer = optimizer
        self.pending: Any = None
        self.current: Any = None
        self.writer: str | None = None
        self._caller = caller

    def groups(self) -> tuple[list[Any], list[Any], list[Any]]:
        optimizer_variables = list(self.optimizer.variables) if self.optimizer is not None else []
        return list(self.model.trainable_variables), list(self.model.non_trainable_variables), optimizer_variables

    def hand(self, state: Any, step: int) -> None:
        """Takes the loop's state after a step.

        Raises:
            ValueError: `state` is not the three lists of values, or hooks wrote a
                variable since the loop last took the state back (their write would be lost).
        """
        if self.writer is not None:
            raise ValueError(
                f"{self.writer} wrote the model's variables, and the state the loop passed at step {step} "
                "does not hold that write: the loop kept its own state, so the write would be lost. Take "
                "the state back after on_train_begin() and after each on_train_batch_end(): "
                "`state = callback.state()` (docs/custom-loops.md)."
            )
        groups = self.groups()
        if not isinstance(state, (tuple, list)) or len(state) != 3:
            raise ValueError(
                f"HookCallback: logs['state'] at step {step} takes the loop's state as "
                "(trainable_values, non_trainable_values, optimizer_values), got "
                f"{type(state).__name__}{f' of {len(state)} items' if isinstance(state, (tuple, list)) else ''}."
            )
        for what, values, variables in zip(("trainable", "non-trainable", "optimizer"), state, groups, strict=True):
            if len(values) != len(variables):
                raise ValueError(
                    f"HookCallback: logs['state'] at step {step} holds {len(values)} {what} values; the "
                    f"model (and the optimizer given as HookCallback(optimizer=...)) has {len(variables)}."
                )
        self.pending = self.current = state

    def sync(self) -> None:
        """Puts the handed-in state into the Keras variables."""
        state, self.pending = self.pending, None
        with context.eager_mode():
            for variables, values in zip(self.groups(), state, strict=True):
                for variable, value in zip(variables, values, strict=True):
                    variable.assign(value)

    def wrote(self) -> None:
        self.writer = self._caller()

    def take(self) -> tuple[list[Any], list[Any], list[Any]]:
        """The state for the loop's next step: the one handed in, or the variables' values after writes."""
        if self.current is None or self.writer is not None:
            self.writer = None
            self.current = tuple([v.value for v in variables] for variables in self.groups())
        return self.current


# Stateless loops' states (`LoopState`) of runs in progress: id(model) -> the state.
_loop_states: dict[int, LoopState] = {}


def _sync_loop_state(model: Any) -> LoopState | None:
    loop_state = _loop_states.get(id(model))
    if loop_state is not None and loop_state.pending is not None:
        loop_state.sync()
    return loop_state


def register_loop_state(model: Any, loop_state: LoopState | None) -> None:
    """Makes reads and writes of `model`'s variables see `loop_state` (None: ends it)."""
    if loop_state is None:
        _loop_states.pop(id(model), None)
    else:
        _loop_states[id(model)] = loop_state


class Entry:
    """One Keras variable (or computed learning rate) and its TF1 variable in the graph.

    Attributes:
        name: The TF1 op name, such as `dense/kernel`.
        source: The Keras (or tf_keras) variable, or None for a computed rate.
        trainable: Whether it is in `TRAINABLE_VARIABLES`.
        collections: The other graph collections it is in.
        read: Returns the current Keras value.
        read_at: For a rate a schedule computes: returns the rate of a given
            global step (the rate that trains, or trained, that step); None
            for a variable, whose value `read` gives at any step.
        read_only: Why it cannot be written, or None.
        variable: The TF1 variable, once built.
    """

    __slots__ = (
        "name",
        "source",
        "trainable",
        "collections",
        "dtype",
        "shape",
        "read",
        "read_at",
        "write",
        "read_only",
        "variable",
        "feed",
        "load_op",
    )

    def __init__(
        self,
        source: Any,
        trainable: bool,
        collections: tuple[str, ...],
        read: Callable[[], Any],
        write: Callable[[Any], None] | None,
        read_only: str | None = None,
        dtype: tf.DType | None = None,
        shape: tuple[int, ...] | None = None,
        read_at: Callable[[Any], Any] | None = None,
    ) -> None:
        self.name = ""
        self.source = source
        self.trainable = trainable
        self.collections = collections
        self.dtype = dtype if dtype is not None else _dtype_of(source)
        self.shape = shape if shape is not None else tuple(source.shape)
        self.read = read
        self.read_at = read_at
        self.write = write
        self.read_only = read_only
        self.variable: Any = None
        self.feed: tf.Tensor | None = None
        self.load_op: tf.Operation | None = None

    def __repr__(self) -> str:
        return f"<mirror of {self.name!r}>"

    def reader_at(self) -> Callable[[Any], Any]:
        """Returns the entry's value at a global step: `read_at`, or `read` for a variable (the same at any step)."""
        if self.read_at is not None:
            return self.read_at
        read = self.read
        return lambda step: read()


# Optimizers lent for a run (`HookCallback(optimizer=...)`): id(model) -> the optimizer
# that trains it there. `optimizer_of` is the one place that reads a model's optimizer.
_lent: dict[int, Any] = {}


def optimizer_of(model: Any) -> Any:
    """The optimizer that trains `model`: one lent for the run in progress, else `model.optimizer` (or None).

    Every read of a model's optimizer in this package goes through here, so that a
    custom training loop's optimizer (`HookCallback(optimizer=...)`) is the one whose
    `iterations` is the global step, whose variables hooks see and checkpoints hold.
    """
    lent = _lent.get(id(model))
    return getattr(model, "optimizer", None) if lent is None else lent


def lend_optimizer(model: Any, optimizer: Any) -> None:
    """Makes `optimizer_of(model)` return `optimizer` until `return_optimizer(model)`."""
    _lent[id(model)] = optimizer


def return_optimizer(model: Any) -> None:
    """Ends `lend_optimizer(model, ...)`; nothing if none is lent."""
    _lent.pop(id(model), None)


@contextlib.contextmanager
def lent_optimizer(model: Any, optimizer: Any) -> Iterator[None]:
    """`optimizer_of(model)` is `optimizer` inside the block (nothing changes for None)."""
    if optimizer is None:
        yield
        return
    before = _lent.get(id(model))
    lend_optimizer(model, optimizer)
    try:
        yield
    finally:
        if before is None:
            return_optimizer(model)
        else:
            _lent[id(model)] = before


def accumulation_steps(optimizer: Any) -> int:
    """Micro-batches per applied update: Keras 3's `gradient_accumulation_steps`, else 1."""
    return int(getattr(optimizer, "gradient_accumulation_steps", None) or 1)


def step_source(optimizer: Any) -> Any:
    """The variable that counts the optimizer's steps.

    With gradient accumulation, Keras 3's `iterations` is computed anew at each
    read (micro-batches // accumulation steps) from the micro-batch count.
    """
    if accumulation_steps(optimizer) > 1:
        return optimizer_micro_steps(optimizer)
    return optimizer.iterations


def global_step_of(model: Any) -> int:
    """The model's global step: its optimizer's applied updates (`iterations`), read eagerly."""
    optimizer: Any = optimizer_of(model)
    if getattr(optimizer, "iterations", None) is None:
        return 0
    if _loop_states:
        _sync_loop_state(model)
    with context.eager_mode():
        iterations = optimizer.iterations
    if isinstance(iterations, keras.Variable):
        iterations = iterations.value
    if isinstance(iterations, tf.Variable):  # TF backend, tf_keras (also mirrored)
        return int(iterations.numpy())
    return int(keras.ops.convert_to_numpy(iterations))


def has_weights(model: Any) -> bool:
    """Whether the model has made its weights (tf_keras makes those of a model given
    no input shape only in its first step, after `on_train_begin`)."""
    if getattr(model, "built", True):
        return True
    try:
        # Trainable ones: a metric tracker the model holds (`self.loss_tracker = Mean()`)
        # makes its variables at once, the layers' only in the first step.
        return bool(model.trainable_weights)
    except ValueError:  # tf_keras's Sequential before it is built
        return False


class ModelMirror:
    """The TF1 variables standing for a Keras model's and optimizer's variables in one adapter graph.

    Args:
        graph: The adapter graph, or None for the names alone (a checkpoint's).
        model: The Keras model.
        extra: Variables of the names map (`HookCallback(names=...)`), by TF1
            name; those that are not the model's or the optimizer's are mirrored too.
        train: Whether the run trains: only then are the optimizer's slots
            listed, as only a TF1 training graph had them.
    """

    def __init__(self, graph: tf.Graph | None, model: Any, extra: Mapping[str, Any], train: bool) -> None:
        _register_conversions()
        self._graph = graph
        self._model = model
        self._extra = extra
        self._train = train
        self._entries: list[Entry] | None = None
        self._by_name: dict[str, Entry] = {}
        self._by_source: dict[int, Entry] = {}  # id of a Keras/TF variable (or a replica of it)
        self._step_sources: set[int] = set()  # ids of optimizer.iterations and what backs it
        self._by_element: dict[int, Entry] = {}  # id of a TF1 variable or its tensors
        self.by_op: dict[tf.Operation, Entry] = {}
        self.rate: Entry | None = None
        self.built = False
        self._building = False

    # -- what there is (no graph ops) ------------------------------------------

    def entries(self) -> list[Entry]:
        """The mirrored variables in collection order: model weights, learning rate, optimizer variables."""
        if self._entries is None:
            if not has_weights(self._model):
                return []  # none yet; looked for again once the model has made its weights
            self._entries = self._collect()
        return self._entries

    def find(self, name: str) -> Entry | None:
        """The entry called `name` (a TF1 op name such as `dense/kernel`, or `learning_rate`)."""
        self.entries()
        return self._by_name.get(name)

    def of_variable(self, variable: Any) -> Entry | None:
        """The entry of a Keras or TF variable (or of one replica of it), or None."""
        self.entries()
        return self._by_source.get(id(variable))

    def is_step(self, variable: Any) -> bool:
        """Whether `variable` is the optimizer's step counter, which the graph's global step stands for."""
        self.entries()
        return id(variable) in self._step_sources

    def entry_of_element(self, element: Any) -> Entry | None:
        """The entry whose TF1 variable, or whose variable's tensor, `element` is."""
        return self._by_element.get(id(element)) if self._by_element else None

    def owns(self, variable: Any) -> bool:
        """Whether `variable` (of the graph) is a mirror variable."""
        return id(variable) in self._by_element

    def restored(self) -> list[Entry]:
        """The entries whose initializer `init_from_checkpoint` replaced."""
        return [e for e in self._entries or () if e.variable is not None and e.variable.initializer is not e.load_op]

    def ready(self) -> bool:
        """Whether there is anything to mirror yet (see `has_weights`)."""
        return self._entries is not None or has_weights(self._model)

    def _collect(self) -> list[Entry]:
        model = self._model
        optimizer = optimizer_of(model)
        ordered: list[Entry] = []  # in collection order
        named: list[tuple[str, Entry]] = []  # in naming priority: the rate claims its name first

        def add(variable: Any, collections: tuple[str, ...], trainable: bool, name: str) -> None:
            entry = Entry(variable, trainable, collections, _reader(variable, model), _writer(variable, model))
            self._index(entry, variable)
            ordered.append(entry)
            named.append((name, entry))

        prefix = f"{getattr(model, 'name', '')}/"
        trainable = {id(v) for v in model.trainable_weights}
        for variable in model.weights:
            if id(variable) not in self._by_source:
                add(
                    variable,
                    (_KEYS.GLOBAL_VARIABLES, _KEYS.MODEL_VARIABLES),
                    id(variable) in trainable,
                    tf1_name(variable, prefix),
                )
        if optimizer is not None:
            for backing in _backing(step_source(optimizer)):
                self._step_sources.add(id(backing))
            rate = self.rate = _rate_entry(optimizer, model, self._train)
            ordered.append(rate)
            named.insert(0, (LEARNING_RATE, rate))
            for backing in _backing(rate.source) + _rate_backing(optimizer):
                self._by_source.setdefault(id(backing), rate)
            if self._train:  # a TF1 eval graph had no optimizer slots
                slots = slot_names(optimizer, model, prefix)
                for variable in _optimizer_variables(optimizer):
                    if id(variable) not in self._by_source and id(variable) not in self._step_sources:
                        name = slots.get(id(variable)) or tf1_name(variable, prefix)
                        add(variable, (_KEYS.GLOBAL_VARIABLES,), False, name)
        for name, variable in self._extra.items():
            if id(variable) not in self._by_source and id(variable) not in self._step_sources:
                add(variable, (), False, name)
        used = {GLOBAL_STEP}
        for name, entry in named:
            entry.name = _unique(name, used)
            self._by_name[entry.name] = entry
        if self.rate is not None and self.rate.source is not None:
            # The Keras 3 path of the rate (`sgd/learning_rate`) names it too.
            self._by_name.setdefault(tf1_name(self.rate.source, prefix), self.rate)
        return ordered

    def _index(self, entry: Entry, variable: Any) -> None:
        for backing in _backing(variable):
            self._by_source.setdefault(id(backing), entry)

    # -- the graph variables -------------------------------------------------------

    def build(self) -> None:
        """Makes the TF1 variables, once; also after the graph is finalized."""
        if self.built or self._building:
            return
        model = self._model
        if not self.ready():
            raise ValueError(
                f"The variables of the model {getattr(model, 'name', '?')!r} do not exist yet: tf_keras "
                "makes the weights of a model given no input shape in its first step, after the hooks' "
                "begin() and before_run(). TF1 hooks found the model's variables in the graph from "
                "begin() on. Give the model an input shape (tf_keras.Input(shape=...) or input_shape= on "
                "its first layer), or call model.build(input_shape) before fit()/evaluate()."
            )
        graph = cast(tf.Graph, self._graph)
        self._building = True
        try:
            with Unsealed(graph), graph.as_default(), _bare(graph):
                for entry in self.entries():
                    self._make(entry)
            self.built = True
        finally:
            self._building = False

    def _make(self, entry: Entry) -> None:
        def keras_value(shape: Any, dtype: Any = None, partition_info: Any = None) -> tf.Tensor:
            # The initializer assigns a fed value: what loads the Keras value,
            # and what `variable.load(value, session)` feeds.
            return tf.compat.v1.placeholder(entry.dtype, entry.shape, name="keras_value")

        variable = tf.compat.v1.get_variable(
            entry.name,
            shape=entry.shape,
            dtype=entry.dtype,
            initializer=keras_value,
            trainable=entry.trainable,
            collections=list(entry.collections),
            use_resource=False,
        )
        entry.variable = variable
        entry.load_op = variable.initializer
        entry.feed = variable.initializer.inputs[1]
        for element in (variable, variable._ref(), variable.value()):  # pylint: disable=protected-access
            self._by_element[id(element)] = entry
        self.by_op[variable.op] = entry

    def tensor(self, entry: Entry) -> tf.Tensor:
        """The tensor that `graph.get_tensor_by_name` gives for the entry's name (the variable's ref, as in TF1)."""
        self.build()
        return entry.variable._ref()  # pylint: disable=protected-access

    # -- values ------------------------------------------------------------------------

    @staticmethod
    def feeds(entries: tuple[Entry, ...], step: Any) -> dict[tf.Tensor, Any]:
        """The Keras values of `entries` at global step `step`, to feed their TF1 variables' value tensors.

        A variable's value is its current one; a scheduled rate's, the rate of `step` (`Entry.read_at`).
        """
        return {e.variable.value(): e.reader_at()(step) for e in entries}

    def load(self, session: tf.compat.v1.Session, entries: tuple[Entry, ...], step: Any) -> None:
        """Sets the TF1 variables of `entries` to the Keras values at global step `step`, in one run."""
        feeds = {e.feed: e.reader_at()(step) for e in entries}
        session.run([e.load_op for e in entries], feeds)

    def store(self, session: tf.compat.v1.Session, entries: tuple[Entry, ...] | list[Entry], where: str) -> None:
        """Assigns the values of the TF1 variables of `entries` to their Keras variables.

        Raises:
            ValueError: An entry cannot be written (`where` says what wrote it).
        """
        writers = []
        for entry in entries:
            if entry.write is None:
                raise ValueError(f"{where} wrote {entry.name!r}: {entry.read_only}")
            writers.append(entry.write)
        values = session.run([e.variable for e in entries])
        for write, value in zip(writers, values, strict=True):
            write(value)

    # -- what a graph run touches ----------------------------------------------------

    def uses(
        self, ops_seen: set[tf.Operation], where: str
    ) -> tuple[tuple[Entry, ...], tuple[Entry, ...], tuple[Entry, ...]]:
        """What a run of `ops_seen` needs of the Keras values.

        Returns:
            `(fed, loads, stores)`: the entries only read through their value
            tensor, which the run can be fed; those read otherwise or written,
            which must be loaded into the TF1 variable first; those written,
            whose new values go back into Keras.

        Raises:
            ValueError: An op writes a learning rate that a schedule computes.
        """
        if not self.by_op:
            return (), (), ()
        touched: dict[Entry, None] = {}
        written: dict[Entry, None] = {}
        for op in ops_seen:
            entry = self.by_op.get(op)
            if entry is not None:
                touched[entry] = None
            writes = writes_ref(op)
            entry = self.by_op.get(writes) if writes is not None else None
            if entry is not None:
                if entry.read_only is not None:
                    raise ValueError(
                        f"{where} runs the op {op.name!r} ({op.type}), which writes {entry.name!r}: {entry.read_only}"
                    )
                written[entry] = None
        fed: list[Entry] = []
        loads: list[Entry] = []
        for entry in touched:
            snapshot = entry.variable.value().op
            others = [op for op in entry.variable._ref().consumers() if op in ops_seen and op is not snapshot]  # pylint: disable=protected-access
            (loads if others or entry in written else fed).append(entry)
        return tuple(fed), tuple(loads), tuple(written)


def writes_ref(op: tf.Operation) -> tf.Operation | None:
    """The variable op whose ref `op` takes as its first input to change it, or None."""
    if not op.inputs or op.type in _READS_REF:
        return None
    first = op.inputs[0]
    if not first.dtype._is_ref_dtype:  # pylint: disable=protected-access
        return None
    if not op.op_def.input_arg[0].is_ref:
        return None  # auto-dereferenced: a read (Identity, for one)
    return first.op


def tf1_name(variable: Any, model_prefix: str = "") -> str:
    """The TF1 op name of a Keras variable, by the rule in this module's docstring."""
    path = getattr(variable, "path", None)
    if not isinstance(path, str):  # tf_keras, tf.Variable: "dense/kernel:0"
        path = re.sub(r":\d+$", "", str(getattr(variable, "name", "variable")))
    if model_prefix and path.startswith(model_prefix):
        path = path[len(model_prefix) :]
    path = _REFUSED.sub("_", path) or "variable"
    return path if _FIRST.match(path) else "v" + path


def _unique(name: str, used: set[str]) -> str:
    candidate, count = name, 0
    while candidate in used:
        count += 1
        candidate = f"{name}_{count}"
    used.add(candidate)
    return candidate


def _dtype_of(variable: Any) -> tf.DType:
    dtype = variable.dtype
    if isinstance(dtype, tf.DType):
        return dtype.base_dtype
    return tf.as_dtype(keras.backend.standardize_dtype(dtype))


def _backing(variable: Any) -> list[Any]:
    """The variable and what holds its value: a TF backend's tf.Variable, a mirrored variable's replicas."""
    found = [variable]
    if variable is None:
        return []
    inner = getattr(variable, "_value", None) if isinstance(variable, keras.Variable) else None
    if isinstance(inner, tf.Variable):
        found.append(inner)
        variable = inner
    if isinstance(variable, tf.distribute.DistributedValues):
        found.extend(variable.values)
    return found


def _optimizer_variables(optimizer: Any) -> list[Any]:
    variables = getattr(optimizer, "variables", ())
    return list(variables() if callable(variables) else variables)


# TF1's slot names (`<variable>/<name>`), by Keras optimizer and slot kind (Keras 3's
# name, tf_keras's). SGD's momentum is left out: Keras keeps -lr * TF1's accumulator.
_TF1_SLOTS: dict[str, dict[str, str]] = {
    "Adam": {"momentum": "Adam", "m": "Adam", "velocity": "Adam_1", "v": "Adam_1"},
    "Adagrad": {"accumulator": "Adagrad"},
    "RMSprop": {"velocity": "RMSProp", "average_gradient": "RMSProp_1", "momentum": "RMSProp_1"},
}


# TF1's MomentumOptimizer kept an accumulator of gradients, `<variable>/Momentum`; Keras's SGD
# keeps -lr times it. Checkpoints convert between the two, at the current (constant) rate.
_TF1_MOMENTUM: dict[str, dict[str, str]] = {"SGD": {"momentum": "Momentum", "m": "Momentum"}}


def slot_names(
    optimizer: Any, model: Any, model_prefix: str = "", table: Mapping[str, Mapping[str, str]] = _TF1_SLOTS
) -> dict[int, str]:
    """TF1's names of the optimizer's slot variables (`dense/kernel/Adam_1`), by the slot's id.

    TF1's Adam, Adagrad and RMSProp named a variable's slots `<variable>/<Optimizer>`,
    `<variable>/<Optimizer>_1`, ...; those of Keras's Adam, Adagrad and RMSprop
    hold the same values and get those names. Other optimizers' slots (and SGD's
    momentum, kept in other units) keep their Keras names.

    Slots are matched to their variables by the names Keras gives them:
    `<path with _ for />_<kind>` (Keras 3), `[<Optimizer>/]<kind>/<variable name>` (tf_keras).
    """
    kind = type(optimizer).__name__  # exactly: a subclass may keep other slots
    if kind not in table:
        return {}
    name_of = dict(table[kind])
    if kind == "RMSprop" and getattr(optimizer, "centered", False):
        name_of["momentum"] = "RMSProp_2"  # TF1 made "mg" before "momentum"
    by_slot_name: dict[str, str] = {}
    for variable in model.trainable_weights:
        base = tf1_name(variable, model_prefix)
        path = getattr(variable, "path", None)
        for kind, suffix in name_of.items():
            if isinstance(path, str):  # Keras 3
                by_slot_name[f"{path.replace('/', '_')}_{kind}"] = f"{base}/{suffix}"
            else:  # tf_keras: "Adam/m/dense/kernel:0"
                shared = re.sub(r":\d+$", "", str(variable.name))
                by_slot_name[f"{kind}/{shared}"] = f"{base}/{suffix}"
    found: dict[int, str] = {}
    # Keras before 3.9 names Adagrad's slots plainly "accumulator": made one per variable, in order.
    bare: dict[str, list[Any]] = {kind: [] for kind in name_of}
    for slot in _optimizer_variables(optimizer):
        name = re.sub(r":\d+$", "", str(slot.name))
        # tf_keras puts the optimizer's name in front when the slots are made in its name scope (in fit).
        for key in (name, name.partition("/")[2]):
            if key in by_slot_name:
                found[id(slot)] = by_slot_name[key]
                break
        else:
            if name in bare:
                bare[name].append(slot)
    weights = list(model.trainable_weights)
    for kind, slots in bare.items():
        if len(slots) == len(weights) and all(
            tuple(s.shape) == tuple(w.shape) for s, w in zip(slots, weights, strict=True)
        ):
            for slot, weight in zip(slots, weights, strict=True):
                found[id(slot)] = f"{tf1_name(weight, model_prefix)}/{name_of[kind]}"
    return found


class Saved:
    """A variable as a TF1 `Saver` of the training graph saved it: its TF1 name and value.

    Attributes:
        name: The name in a name-based checkpoint (`dense/kernel/Adam`).
        entry: The mirror entry of the Keras variable.
        scale: What the TF1 value is multiplied by to give the Keras one
            (SGD's momentum: `-learning_rate`), or None for the same value.
    """

    __slots__ = ("name", "entry", "scale")

    def __init__(self, name: str, entry: Entry, scale: float | None) -> None:
        self.name, self.entry, self.scale = name, entry, scale

    def read(self) -> Any:
        """The value as TF1 kept it."""
        value = self.entry.read()
        return value if self.scale is None else (value / self.scale).astype(value.dtype)

    def write(self, value: Any) -> None:
        """Sets the Keras variable from the value as TF1 kept it."""
        value = np.asarray(value)
        cast(Callable[[Any], None], self.entry.write)(
            value if self.scale is None else (value * self.scale).astype(value.dtype)
        )


def saved_variables(model: Any, step: int | None = None) -> tuple[list[Saved], list[str]]:
    """What a TF1 `Saver` of the model's training graph saved: its global variables, by TF1 name.

    The names are the mirror's (a training graph's); SGD's momentum is saved as
    TF1's `<variable>/Momentum`, converted at the rate of the last step trained:
    the rate variable's value, or a schedule's rate at the step before `step`.
    TF1's accumulator summed the gradients (`a = momentum * a + g`, then
    `variable -= rate * a`), Keras's SGD sums them times each step's rate
    (`m = momentum * m - rate * g`, then `variable += m`): the two are `-rate`
    apart exactly where the rate was constant over the momentum's memory, and a
    step after the rate changed differs between them (official r1 ResNet's
    piecewise rate with TF1's `MomentumOptimizer`).

    Args:
        model: The Keras model (its optimizer's slots are included).
        step: The global step the values are at (a checkpoint's, being
            restored). Defaults to the optimizer's current step.

    Returns:
        `(saved, left_out)`: the variables, and what has no TF1 counterpart and why.
    """
    mirror = ModelMirror(None, model, {}, train=True)
    entries = [e for e in mirror.entries() if _KEYS.GLOBAL_VARIABLES in e.collections]
    optimizer = optimizer_of(model)
    momentum = slot_names(optimizer, model, f"{getattr(model, 'name', '')}/", _TF1_MOMENTUM) if optimizer else {}
    left_out: list[str] = []
    rate = None
    if momentum:
        if mirror.rate is not None and mirror.rate.write is not None:
            rate = float(mirror.rate.read())
        elif mirror.rate is not None and mirror.rate.read_at is not None:
            step = global_step_of(model) if step is None else step
            rate = float(mirror.rate.read_at(max(step - 1, 0)))  # the rate the last step trained at
        else:
            left_out.append(
                "SGD's momentum slots: Keras keeps -learning_rate times TF1's accumulator, and the "
                "rate is computed by a callable of no argument, so the rate of the last step is not known"
            )
    saved = []
    for entry in entries:
        name = momentum.get(id(entry.source))
        if name is None:
            saved.append(Saved(entry.name, entry, None))
        elif rate:
            saved.append(Saved(name, entry, -rate))
    return saved, left_out


def _reader(variable: Any, model: Any) -> Callable[[], Any]:
    return lambda: read_variable(variable, model)


def _writer(variable: Any, model: Any) -> Callable[[Any], None]:
    return lambda value: write_variable(variable, value, model)


_SCHEDULED = (
    "the optimizer's learning rate is computed from the global step by a schedule "
    "(or a callable) at every step, so a value written to it would be overwritten. "
    "Compile with a float rate (a variable, which hooks may assign), or change the "
    "rate with keras.callbacks.LearningRateScheduler."
)


def _rate_entry(optimizer: Any, model: Any, train: bool) -> Entry:
    """The learning rate's entry: a variable, or a value a schedule computes (read-only).

    Only a training graph lists a rate variable in `GLOBAL_VARIABLES`: a TF1
    eval graph had no optimizer, and a hook restoring all of its global
    variables (moving averages for evaluation) must not look for one.
    """
    raw = getattr(optimizer, "_learning_rate", None)
    if raw is None:  # tf_keras's legacy optimizers keep it as a hyperparameter
        raw = getattr(optimizer, "_hyper", {}).get(LEARNING_RATE)
    if isinstance(raw, (tf.Variable, keras.Variable)):
        collections = (_KEYS.GLOBAL_VARIABLES,) if train else ()
        return Entry(raw, False, collections, _reader(raw, model), _writer(raw, model))
    at: Callable[[Any], Any] | None = None  # a callable of no argument: only its value now can be known
    if isinstance(optimizer, keras.optimizers.Optimizer):

        def computed() -> Any:
            if getattr(model, "jax_state_sync", None) is not None:
                model.jax_state_sync()  # the schedule reads `iterations`
            with context.eager_mode():
                return keras.ops.convert_to_numpy(optimizer.learning_rate)

        if isinstance(raw, keras.optimizers.schedules.LearningRateSchedule):
            every = accumulation_steps(optimizer)
            counter_dtype = step_source(optimizer).dtype  # a variable (`iterations` may compute)

            def keras_at(step: Any) -> Any:
                # Keras 3 calls the schedule with its step counter before the step's increment.
                # With gradient accumulation that counter counts micro-batches, and update
                # `step` is applied at the last of its `every`: at micro-batch step*every+every-1.
                counter = int(step) if every == 1 else int(step) * every + every - 1
                with context.eager_mode():
                    value = raw(keras.ops.convert_to_tensor(counter, dtype=counter_dtype))
                    return keras.ops.convert_to_numpy(value)

            at = keras_at
    else:  # tf_keras: `learning_rate` is the rate of the last step; ask the schedule for the current one

        def computed() -> Any:
            with context.eager_mode():
                value = raw(optimizer.iterations) if callable(raw) else optimizer.learning_rate
                return np.asarray(value, dtype=np.float32)

        def tf_keras_at(step: Any) -> Any:
            # tf_keras calls the schedule with `iterations` before the step's increment.
            with context.eager_mode():
                value = raw(tf.constant(int(step), tf.int64)) if callable(raw) else optimizer.learning_rate
                return np.asarray(value, dtype=np.float32)

        at = tf_keras_at

    # Not in GLOBAL_VARIABLES: in TF1 a decayed rate was a tensor, not a variable.
    return Entry(None, False, (), computed, None, read_only=_SCHEDULED, dtype=tf.float32, shape=(), read_at=at)


def _rate_backing(optimizer: Any) -> list[Any]:
    # tf_keras keeps the last step's scheduled rate in a variable of its own.
    current = getattr(optimizer, "_current_learning_rate", None)
    return _backing(current) if isinstance(current, tf.Variable) else []


@contextlib.contextmanager
def outside_strategy(graph: tf.Graph) -> Iterator[None]:
    """Leaves, for the block, the tf.distribute strategy entered on `graph` (for the hooks' `begin`/`end`).

    The adapter's own objects (the mirror's variables, the Keras saver's
    checkpoint counter) must not become the strategy's variables: a chief-only
    save would then broadcast alone under MultiWorkerMirroredStrategy.
    """
    # pylint: disable=protected-access
    strategies, creators = graph._distribution_strategy_stack, graph._variable_creator_stack
    graph._distribution_strategy_stack, graph._variable_creator_stack = [], []
    try:
        yield
    finally:
        graph._distribution_strategy_stack, graph._variable_creator_stack = strategies, creators


@contextlib.contextmanager
def _bare(graph: tf.Graph) -> Iterator[None]:
    """No name, variable or device scope, control dependency or tf.distribute strategy.

    The mirror is built on first need, which may be inside a hook's scopes (or
    inside the model's strategy, in `begin()`); its variables must not depend on them.
    """
    with (
        outside_strategy(graph),
        graph.name_scope(None),
        graph.control_dependencies(None),
        graph.device(None),
        graph.colocate_with(None, ignore_existing=True),
        tf.compat.v1.variable_scope(tf.compat.v1.VariableScope(False), auxiliary_name_scope=False),
    ):
        yield


# -- Keras variables used in ops of the adapter graph -------------------------------

_registered = False


def _register_conversions() -> None:
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
    error, with a note naming the TF1 variable (`_dispatch._assign_help`).
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
