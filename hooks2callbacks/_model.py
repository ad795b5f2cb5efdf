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
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import keras
import numpy as np
import tensorflow as tf

from hooks2callbacks._conversions import register_conversions
from hooks2callbacks._graph import Unsealed
from hooks2callbacks._keras_state import (
    accumulation_steps,
    global_step_of,
    has_weights,
    optimizer_of,
    read_variable,
    step_source,
    write_variable,
)
from hooks2callbacks._seams import context
from hooks2callbacks._tf1_names import TF1_MOMENTUM, optimizer_variables, slot_names, tf1_name, unique

_KEYS = tf.compat.v1.GraphKeys
LEARNING_RATE = "learning_rate"
GLOBAL_STEP = "global_step"
# Ops that do not change the variable whose ref they take.
_READS_REF = frozenset({"IsVariableInitialized"})


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
        register_conversions()
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
                for variable in optimizer_variables(optimizer):
                    if id(variable) not in self._by_source and id(variable) not in self._step_sources:
                        name = slots.get(id(variable)) or tf1_name(variable, prefix)
                        add(variable, (_KEYS.GLOBAL_VARIABLES,), False, name)
        for name, variable in self._extra.items():
            if id(variable) not in self._by_source and id(variable) not in self._step_sources:
                add(variable, (), False, name)
        used = {GLOBAL_STEP}
        for name, entry in named:
            entry.name = unique(name, used)
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
    momentum = slot_names(optimizer, model, f"{getattr(model, 'name', '')}/", TF1_MOMENTUM) if optimizer else {}
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
