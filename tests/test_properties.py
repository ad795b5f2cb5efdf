"""Property tests: what `results` holds for any fetch structure, and the call
sequence of any hook list compared with TF1's `MonitoredSession`.

Each property trains one compiled model per Keras flavour (kept across examples,
so its optimizer iterations keep counting) for a few steps per example.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import BeforeStep, Recorder, iterations, make_data, make_model, run_keras, run_tf1

from hooks2callbacks import HookCallback

PROPERTY_SETTINGS = settings(
    max_examples=30,
    deadline=None,  # a fit takes tens of milliseconds, and the first one traces the step
    # The K fixture is the same for every example (it names a package), and a
    # few fits per example are slow by Hypothesis's measure, not by ours.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_MODELS: dict[str, Any] = {}


def model_of(K: Any, role: str = "trained") -> Any:
    """One compiled model per Keras flavour and role, shared by the examples: building
    and tracing a model costs far more than the few steps an example trains. The
    "reference" model computes each batch's own values for `Recorder`."""
    if (K.__name__, role) not in _MODELS:
        _MODELS[K.__name__, role] = make_model(K)
    return _MODELS[K.__name__, role]


# -- 1. what `results` holds ------------------------------------------------------

Pair = collections.namedtuple("Pair", ["first", "second"])
Triple = collections.namedtuple("Triple", ["x", "y", "z"])


@dataclasses.dataclass(frozen=True)
class Built:
    """A leaf the hook can only make in `begin()`, when the adapter graph is the
    default graph; `make` builds the fetch, `log_key` says what it stands for
    (None: the global step)."""

    label: str
    make: Callable[[Any], Any]
    log_key: str | None

    def __repr__(self) -> str:  # what Hypothesis prints for a falsifying example
        return self.label


# The leaf descriptors. A str is fetched as it is: a log key ('loss', 'loss:0')
# or the global step's name.
NAMES = ("loss", "accuracy", "loss:0", "accuracy:0", "global_step", "global_step:0")
BUILT = (
    Built("get_global_step()", lambda model: tf.compat.v1.train.get_global_step(), None),
    Built("get_global_step().value()", lambda model: tf.compat.v1.train.get_global_step().value(), None),
    Built("model.optimizer.iterations", lambda model: model.optimizer.iterations, None),
    Built(
        "get_tensor_by_name('loss:0')",
        lambda model: tf.compat.v1.get_default_graph().get_tensor_by_name("loss:0"),
        "loss",
    ),
)
STEP_NAMES = frozenset({"global_step", "global_step:0"})


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """Applies `fn` to every leaf of a dict/list/tuple/namedtuple tree, keeping each container's type."""
    if isinstance(tree, dict):
        return {key: tree_map(fn, value) for key, value in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(tree_map(fn, value) for value in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(tree_map(fn, value) for value in tree)
    return fn(tree)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    small = st.lists(children, max_size=3)
    return st.one_of(
        st.dictionaries(st.sampled_from(["a", "b", "loss", "step"]), children, max_size=3),
        small,
        small.map(tuple),
        st.builds(Pair, children, children),
        st.builds(Triple, children, children, children),
    )


STRUCTURES = st.recursive(st.sampled_from(NAMES + BUILT), _containers, max_leaves=10)


class StructureHook(tf.compat.v1.train.SessionRunHook):
    """Fetches `description` with its leaves made into fetches in `begin()`.

    With `fresh`, `before_run` returns a new, equal structure every step (so the
    adapter cannot reuse its compiled plan by identity); otherwise the same object,
    as the stock hooks do.
    """

    def __init__(self, description: Any, model: Any, fresh: bool) -> None:
        self.description = description
        self.model = model
        self.fresh = fresh
        self.fetches: Any = None
        self.made: dict[Built, Any] = {}
        self.results: list[Any] = []

    def begin(self) -> None:
        self.made = {leaf: leaf.make(self.model) for leaf in BUILT}
        self.fetches = self._fetches()

    def _fetches(self) -> Any:
        return tree_map(lambda leaf: self.made[leaf] if isinstance(leaf, Built) else leaf, self.description)

    def before_run(self, run_context: Any) -> Any:
        return tf.compat.v1.train.SessionRunArgs(self._fetches() if self.fresh else self.fetches)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.results.append(run_values.results)


def expected_results(description: Any, batch: dict[str, Any], stale_step: int) -> Any:
    """What a hook fetching `description` should get for a step: the batch's own
    loss and metrics (as TF1 tensors held them), and for the global step its value
    from before the step's increment, as the numpy int64 TF1's `Session.run`
    returns for the int64 variable."""

    def value(leaf: Any) -> Any:
        key = leaf.log_key if isinstance(leaf, Built) else (None if leaf in STEP_NAMES else leaf.removesuffix(":0"))
        return np.int64(stale_step) if key is None else batch[key]

    return tree_map(value, description)


def leaves_by_key(description: Any, results: Any) -> dict[str, set[float]]:
    """The values `results` holds for each log key of `description`."""
    found: dict[str, set[float]] = collections.defaultdict(set)

    def walk(leaf: Any, value: Any) -> None:
        key = leaf.log_key if isinstance(leaf, Built) else (None if leaf in STEP_NAMES else leaf.removesuffix(":0"))
        if key is not None:
            found[key].add(value)

    def pair(d: Any, r: Any) -> None:
        if isinstance(d, dict):
            for k in d:
                pair(d[k], r[k])
        elif isinstance(d, (list, tuple)):
            for a, b in zip(d, r, strict=True):
                pair(a, b)
        else:
            walk(d, r)

    pair(description, results)
    return found


def assert_same(actual: Any, expected: Any, path: str = "results") -> None:
    """Asserts the same container types, keys (in order), lengths, and leaves of the
    same type and value (floats, computed apart from the step: to float32 rounding). A log value
    comes back as Session.run gave a float32 tensor's: an np.float32."""
    if type(expected) is float:
        assert type(actual) is np.float32, f"{path}: {type(actual).__name__} != float32"
    else:
        assert type(actual) is type(expected), f"{path}: {type(actual).__name__} != {type(expected).__name__}"
    if isinstance(expected, dict):
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for key in expected:
            assert_same(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{path}[{index}]")
    elif isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=1e-6), f"{path}: {actual!r} != {expected!r}"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


X, Y = make_data(96)


@PROPERTY_SETTINGS
@given(description=STRUCTURES, fresh=st.booleans())
def test_results_have_the_fetched_structure_and_the_batch_values(K, description, fresh):
    """For any nested dict/list/tuple/namedtuple of log keys and global-step leaves,
    `run_values.results` at every step has exactly that structure, with each batch's
    own values (computed apart, by `test_on_batch` of a copy holding the step's
    starting weights) and the iterations a plain Keras callback sees at batch begin.
    Every leaf of one key holds the same float in a step."""
    model = model_of(K)
    hook = StructureHook(description, model, fresh)
    stale_steps: list[int] = []
    stepper = K.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: stale_steps.append(iterations(model)))
    recorder = Recorder(K, X, Y, reference=lambda K: model_of(K, "reference"))
    model.fit(
        X, Y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[stepper, recorder, HookCallback([hook])]
    )

    assert len(hook.results) == len(recorder.train_batch) == len(stale_steps) == 3
    # The model is shared, so the steps go on from where the previous example left them.
    assert stale_steps == list(range(stale_steps[0], stale_steps[0] + 3))
    for step, (results, batch, stale) in enumerate(zip(hook.results, recorder.train_batch, stale_steps, strict=True)):
        assert_same(results, expected_results(description, batch, stale), f"step {step}: results")
        assert all(len(values) == 1 for values in leaves_by_key(description, results).values())


# -- 2. the call sequence, against TF1's MonitoredSession ---------------------------

METHODS = ("begin", "after_create_session", "before_run", "after_run", "end")
MAX_STEPS = 6
STEPS_PER_EPOCH = 3  # two epochs, so stops fall on both sides of an epoch boundary


@dataclasses.dataclass(frozen=True)
class Stop:
    """Hook `hook` calls `request_stop()` in `method` at step `step` (1-based)."""

    hook: int
    method: str
    step: int


@st.composite
def hook_lists(draw: Any) -> tuple[list[frozenset[str]], Stop | None]:
    """0-4 hooks, each with a set of methods, and maybe one stop request.

    Every hook has at least one method: an object with none of them is not a hook,
    and HookCallback refuses it (TypeError).
    """
    methods = draw(st.lists(st.frozensets(st.sampled_from(METHODS), min_size=1), max_size=4))
    stop = None
    if methods and draw(st.booleans()):
        # Step MAX_STEPS + 1 is never reached: the request is drawn but never made.
        stop = Stop(
            draw(st.integers(0, len(methods) - 1)),
            draw(st.sampled_from(["before_run", "after_run"])),
            draw(st.integers(1, MAX_STEPS + 1)),
        )
        methods[stop.hook] |= {stop.method}
    return methods, stop


class StepCounter:
    """Counts the steps begun; the hooks record it with each call."""

    def __init__(self) -> None:
        self.step = 0

    def advance(self, *args: Any, **kwargs: Any) -> None:  # also a Keras batch callback
        self.step += 1


def build_hooks(
    methods: list[frozenset[str]], stop: Stop | None, calls: list, counter: StepCounter, base: type
) -> list[Any]:
    """Builds the described hooks as instances of classes deriving from `base`, with
    only the methods drawn; each call appends (hook, method, step[, stop_requested])."""

    def method(index: int, name: str) -> Callable[..., None]:
        def call(self: Any, *args: Any) -> None:
            record: tuple = (f"h{index}", name, counter.step)
            if name in ("before_run", "after_run"):
                run_context = args[0]
                record += (run_context.stop_requested,)
                if stop is not None and (stop.hook, stop.method, stop.step) == (index, name, counter.step):
                    run_context.request_stop()
            calls.append(record)

        return call

    return [
        type(f"Hook{index}", (base,), {name: method(index, name) for name in names})()
        for index, names in enumerate(methods)
    ]


@PROPERTY_SETTINGS
@given(drawn=hook_lists())
def test_any_hook_list_is_called_as_monitored_session_calls_it(K, drawn):
    """Any list of duck-typed hooks with any methods, one of them maybe stopping at
    some step in before_run or after_run, gets the same calls (hook, method, step,
    stop_requested), in the same order, under HookCallback in a real fit as under
    a real TF1 MonitoredSession, and training stops after the same step."""
    methods, stop = drawn
    records: dict[str, list] = {}
    steps: dict[str, int] = {}
    for system in ("tf1", "keras"):
        calls: list = []
        counter = StepCounter()
        if system == "tf1":
            # MonitoredSession calls all five methods of every hook (a plain object
            # lacking one is an AttributeError), so TF1's twin of a hook inherits
            # SessionRunHook's no-ops for the methods it lacks: what HookCallback
            # promises for a plain object's missing methods.
            hooks = build_hooks(methods, stop, calls, counter, tf.compat.v1.train.SessionRunHook)
            run_tf1(hooks, MAX_STEPS, before_step=counter.advance)
        else:
            hooks = build_hooks(methods, stop, calls, counter, object)
            assert not any(isinstance(hook, tf.compat.v1.train.SessionRunHook) for hook in hooks)
            # Advances before the hooks' before_run of each step, as before_step before session.run.
            run_keras(K, [BeforeStep(counter.advance), *hooks], MAX_STEPS, STEPS_PER_EPOCH, model=model_of(K))
        records[system] = calls
        steps[system] = counter.step

    assert records["keras"] == records["tf1"]
    stopped_at = stop.step if stop is not None and stop.step <= MAX_STEPS else MAX_STEPS
    assert steps["keras"] == steps["tf1"] == stopped_at
    # Every hook got every call its methods ask for, up to the last step.
    per_hook = sum(
        ("begin" in m)
        + ("after_create_session" in m)
        + ("end" in m)
        + stopped_at * (("before_run" in m) + ("after_run" in m))
        for m in methods
    )
    assert len(records["tf1"]) == per_hook
