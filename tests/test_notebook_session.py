"""A notebook session: the same cell (new hooks, a new `HookCallback`, `fit`) run many times.

In a Jupyter kernel nothing is torn down between cells. Each run of such a cell
must start clean: its adapter graph, sessions and runner must be collectable
once the cell's objects are dropped, TF's own default graph must be left as it
was, and the names hooks see must not drift (`loss_1`, `global_step_1`, ...).
"""

from __future__ import annotations

import gc
import logging
import re
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tensorflow as tf
from support import make_data, make_model, read_scalars

from hooks2callbacks import HookCallback, log_tensor
from hooks2callbacks._graph import AdapterGraph

X, Y = make_data()  # 320 samples: 10 batches of 32
REPEATS = 20


class DerivedOpHook:
    """A duck-typed hook that builds an op on a log key, so each run needs a real graph run.

    Attributes:
        names: The names of the graph elements this hook saw in `begin()`.
        values: The value of the derived op at each step.
    """

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: list[float] = []
        self._double: Any = None
        self.refs: dict[str, weakref.ref[Any]] = {}

    def begin(self) -> None:
        graph = tf.compat.v1.get_default_graph()
        loss = graph.get_tensor_by_name("loss:0")
        self._double = tf.multiply(loss, 2.0, name="double_loss")
        step = tf.compat.v1.train.get_global_step()
        self.names = {"loss": loss.name, "double": self._double.name, "step": step.name}
        self.refs["graph"] = weakref.ref(graph)

    def after_create_session(self, session: Any, coord: Any) -> None:
        self.refs["session"] = weakref.ref(session)
        self.refs["coord"] = weakref.ref(coord)

    def before_run(self, run_context: Any) -> Any:
        return tf.compat.v1.train.SessionRunArgs(self._double)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.values.append(float(run_values.results))


@pytest.fixture
def quiet_tf_logger() -> Iterator[None]:
    """Keras retraces its train function for each new model; that warning is Keras's, not ours."""
    logger = logging.getLogger("tensorflow")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _live(kind: type) -> list[Any]:
    """Returns the objects of class `kind` (or a subclass) that the garbage collector tracks."""
    gc.unfreeze()  # those of earlier tests too (tests/conftest.py freezes what outlives each)
    return [obj for obj in gc.get_objects() if isinstance(obj, kind)]


def _one_cell_run(model: Any) -> tuple[dict[str, str], dict[str, weakref.ref[Any]], str]:
    """What a re-run notebook cell does: new hooks, a new HookCallback, fit."""
    derived = DerivedOpHook()
    logging_hook = tf.compat.v1.train.LoggingTensorHook({"loss": "loss", "acc": "accuracy"}, every_n_iter=2)
    hooks = [tf.compat.v1.train.StopAtStepHook(num_steps=3), logging_hook, derived]
    callback = HookCallback(hooks)
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[callback])
    assert len(derived.values) == 3
    tensor_names = ",".join(sorted(t.name for t in logging_hook._current_tensors.values()))  # pylint: disable=protected-access
    return derived.names, derived.refs, tensor_names


@pytest.mark.slow
@pytest.mark.parametrize("new_model_each_time", [False, True], ids=["same-model", "new-model"])
@pytest.mark.usefixtures("quiet_tf_logger")
def test_twenty_repeated_fits_leak_nothing_and_keep_names(new_model_each_time: bool) -> None:
    default_graph = tf.compat.v1.get_default_graph()
    ops_before = len(default_graph.get_operations())
    gc.collect()
    sessions_before = len(_live(tf.compat.v1.Session))

    model = make_model()
    all_refs: list[dict[str, weakref.ref[Any]]] = []
    seen: list[tuple[dict[str, str], str]] = []
    for _ in range(REPEATS):
        if new_model_each_time:
            model = make_model()
        names, refs, logged = _one_cell_run(model)
        seen.append((names, logged))
        all_refs.append(refs)

    # The same names every time: a fresh graph per run, nothing left over to clash with.
    assert seen == [seen[0]] * REPEATS
    names, logged = seen[0]
    assert names["double"] == "double_loss:0" and names["step"] == "global_step:0"
    assert not any(re.search(r"_\d+:0$", name) for name in [*names.values(), *logged.split(",")])

    gc.collect()
    dead = {name: sum(ref() is None for refs in all_refs for ref in [refs[name]]) for name in all_refs[0]}
    assert dead == {"graph": REPEATS, "session": REPEATS, "coord": REPEATS}
    assert len(_live(tf.compat.v1.Session)) == sessions_before
    assert _live(AdapterGraph) == []
    # TF's own default graph and eager mode are as they were.
    assert tf.compat.v1.get_default_graph() is default_graph
    assert len(default_graph.get_operations()) == ops_before
    assert tf.executing_eagerly()


def test_repr_reads_well_as_a_cell_output() -> None:
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=10), tf.compat.v1.train.LoggingTensorHook(["loss"], 5)]
    assert repr(HookCallback(hooks)) == "HookCallback(mode='train', hooks=[StopAtStepHook, LoggingTensorHook])"


@pytest.mark.slow
@pytest.mark.usefixtures("quiet_tf_logger")
def test_twenty_repeated_fits_of_a_hooks_factory_keep_summary_tags(tmp_path: Path) -> None:
    """The cell of notebook 03, run 20 times: summaries, step rates and checkpoints into one directory."""
    logdir, ckpt_dir = str(tmp_path / "logs"), str(tmp_path / "ckpt")
    graphs: list[weakref.ref[Any]] = []
    summary_names: list[list[str]] = []

    def make_hooks() -> list[Any]:
        graphs.append(weakref.ref(tf.compat.v1.get_default_graph()))
        summaries = [
            tf.compat.v1.summary.scalar("loss", log_tensor("loss")),
            tf.compat.v1.summary.scalar("accuracy", log_tensor("accuracy")),
        ]
        summary_names.append([s.name for s in summaries])
        return [
            tf.compat.v1.train.StopAtStepHook(num_steps=4),
            tf.compat.v1.train.SummarySaverHook(
                save_steps=2, output_dir=logdir, summary_op=tf.compat.v1.summary.merge_all()
            ),
            tf.compat.v1.train.StepCounterHook(every_n_steps=2, output_dir=logdir),
            tf.compat.v1.train.CheckpointSaverHook(ckpt_dir, save_steps=4),
        ]

    model = make_model()
    for _ in range(REPEATS):
        model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=[HookCallback(make_hooks)])

    assert summary_names == [summary_names[0]] * REPEATS
    assert not any(re.search(r"_\d+:0$", name) for name in summary_names[0])
    scalars = read_scalars(logdir)
    assert sorted(scalars) == ["accuracy", "global_step/sec", "loss"]
    # The global step carries on across the runs: summaries of every run, in order.
    loss_steps = [step for step, _ in scalars["loss"]]
    assert loss_steps == sorted(loss_steps) and loss_steps[-1] > 4 * (REPEATS - 1)
    assert tf.train.latest_checkpoint(ckpt_dir).endswith(f"model.ckpt-{4 * REPEATS}")
    gc.collect()
    assert [ref() for ref in graphs] == [None] * REPEATS
    assert _live(AdapterGraph) == []
