"""HookCallback across 2 real processes on localhost: JAX (jax.distributed) and PyTorch (DDP).

Each engine runs one pair of processes (`cluster_run.py`, phases listed there);
the tests read what each process wrote. The tf.distribute engine of the same
cluster module is tested in test_distribute.py (MultiWorkerMirroredStrategy).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import cluster_run
import numpy as np
import pytest
import tensorflow as tf
from support import iterations, make_model
from test_distribute import finish, free_ports

from hooks2callbacks import restore_tf1_checkpoint
from hooks2callbacks._cluster import Cluster, cluster_of

RUN = cluster_run.__file__


def start_pair(engine: str, directory, phases: str) -> list:
    (port,) = free_ports(1)
    return [
        subprocess.Popen(
            [sys.executable, RUN, engine, str(index), str(port), str(directory), phases],
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND=engine),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for index in range(2)
    ]


def run_pairs(engine: str, tmp_path_factory) -> tuple:
    """Runs the engine's two pairs of processes side by side: phases 1 to 3, and the error of phase 4."""
    if importlib.util.find_spec(engine) is None:
        pytest.skip(f"needs the {engine!r} package: pip install '.[backends]' (CI does)")
    directory = tmp_path_factory.mktemp(engine)
    main, error = start_pair(engine, directory, "main"), start_pair(engine, directory, "error")
    outputs = finish(main + error)
    for process, output in zip(main, outputs[:2], strict=True):
        assert process.returncode == 0, output[-5000:]  # the stops ended both processes normally
    for process, output in zip(error, outputs[2:], strict=True):
        # A hook's error on process 1 ended both processes, within finish()'s timeout.
        assert process.returncode == 1, output[-5000:]
    results = [json.loads((directory / f"result{index}.json").read_text()) for index in range(2)]
    errors = [(directory / f"error{i}.txt").read_text() for i in range(2)]
    return directory, results, errors


@pytest.fixture(scope="module")
def jax_pair(tmp_path_factory):
    return run_pairs("jax", tmp_path_factory)


def test_one_process_alone_is_the_chief_and_agrees_with_itself():
    cluster = cluster_of(make_model())
    assert type(cluster) is Cluster and cluster.engine == "local"
    assert (cluster.index, cluster.count, cluster.is_chief, cluster.several) == (0, 1, True, False)
    assert cluster.agree(1) == [1] and cluster.share_error("x") == ["x"]


def check_chief_only_and_stops(directory, results, restored_model) -> None:
    """Shared by the engines: chief-only hooks, one writer, a stop on either process alone."""
    chief, other = results
    assert (chief["process"], other["process"], chief["processes"]) == (0, 1, 2)
    for phase, last in (("stop0", cluster_run.STOP_0), ("stop1", cluster_run.STOP_1)):
        # Asked on one process alone; both ended after the same step, and exited 0 (see run_pairs).
        assert chief[phase]["iterations"] == other[phase]["iterations"] == last + 1, phase
        assert [r[0] for r in chief[phase]["rows"]] == [r[0] for r in other[phase]["rows"]] == list(range(last + 1))
        # Every process runs `hooks`; the chief runs chief_only_hooks too, after them (as the
        # distribute coordinator ordered them); the other process never does.
        every = [c for c in other[phase]["calls"]]
        assert {c[0] for c in every} == {"every"}
        assert [c[1] for c in every] == ["begin"] + ["after_run"] * (last + 1) + ["end"]
        expected = []
        for call in every:
            expected += [call, ["chief", call[1]]]
        assert chief[phase]["calls"] == expected
    # One writer: the chief's directory alone gets files; its checkpoints, on TF1's schedule.
    assert (directory / "chief0" / "steps.txt").read_text().split() == [str(s) for s in range(cluster_run.STOP_0 + 1)]
    assert not (directory / "chief1").exists()
    state = tf.train.get_checkpoint_state(str(directory / "chief0" / "ckpt"))
    assert [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths] == [0, 2, 3]
    # It restores into a plain model (this process: Keras on TensorFlow), with the weights trained
    # there. On JAX and PyTorch it holds TF1's names alone (a Keras model there is no TF trackable).
    restore_tf1_checkpoint(restored_model, tf.train.latest_checkpoint(str(directory / "chief0" / "ckpt")))
    assert iterations(restored_model) == cluster_run.STOP_0 + 1
    for restored, trained in zip(restored_model.get_weights(), chief["stop0"]["weights"], strict=True):
        np.testing.assert_allclose(restored, np.array(trained), rtol=1e-6)


def check_error_ends_both(errors) -> None:
    """A hook raising on process 1 alone: both processes end with an error naming it (exit 1, see run_pairs)."""
    raised, told = errors[1], errors[0]
    assert "ValueError: RaiseOn: a local check failed" in raised and "Process 1 of 2" in raised
    assert "RuntimeError" in told and "process 1: Raised in RaiseOn.after_run()" in told
    assert "this process (process 0 of 2) ends too, after the same step" in told


@pytest.mark.slow
def test_jax_processes_chief_only_hooks_one_writer_and_a_stop_on_either_process(jax_pair):
    directory, results, _ = jax_pair
    assert results[0]["devices"] == 2  # one CPU device per process, DataParallel over both
    check_chief_only_and_stops(directory, results, make_model(layer_names=("dense", "dense_1")))


@pytest.mark.slow
def test_jax_processes_hooks_see_the_same_values_at_the_same_steps(jax_pair):
    _, (chief, other), _ = jax_pair
    for phase in ("stop0", "stop1"):
        # The global batch's own loss (the processes' halves reduced), identical on both.
        assert chief[phase]["rows"] == other[phase]["rows"]
        assert len({r[1] for r in chief[phase]["rows"]}) == len(chief[phase]["rows"])


@pytest.mark.slow
def test_jax_model_parallel_a_checkpoint_of_a_sharded_variable_is_refused_naming_it(jax_pair):
    directory, (chief, other), _ = jax_pair
    # The first kernel is split across the 2 processes (8 of its 16 columns each).
    assert chief["model_parallel"]["fully_addressable"] is False
    assert chief["model_parallel"]["local_shape"] == [8, 8]
    # The chief's CheckpointSaverHook cannot read the other process's shards: refused at its
    # first save (after_create_session), naming the variable and the ways out; the other
    # process ends after the same step (the first), and no checkpoint is written.
    error = chief["model_parallel_error"]
    assert error.startswith("ValueError: The model variable 'sequential_2/dense/kernel' (shape (8, 16))")
    assert "leave it out of the ModelParallel LayoutMap" in error and "never writes a partial checkpoint" in error
    assert "process 0: Raised in CheckpointSaverHook.after_create_session()" in other["model_parallel_error"]
    assert chief["model_parallel"]["iterations"] == other["model_parallel"]["iterations"] == 1
    assert tf.train.latest_checkpoint(str(directory / "model_parallel0")) is None


@pytest.mark.slow
def test_jax_processes_a_hook_raising_on_one_process_ends_both_naming_it(jax_pair):
    check_error_ends_both(jax_pair[2])


@pytest.fixture(scope="module")
def torch_pair(tmp_path_factory):
    return run_pairs("torch", tmp_path_factory)


@pytest.mark.slow
def test_torch_ddp_chief_only_hooks_one_writer_and_a_stop_on_either_rank(torch_pair):
    directory, results, _ = torch_pair
    check_chief_only_and_stops(directory, results, make_model(layer_names=("dense", "dense_1")))


@pytest.mark.slow
def test_torch_ddp_hooks_see_each_ranks_own_loss_as_the_guides_loop_computes_it(torch_pair):
    _, (chief, other), _ = torch_pair
    for phase in ("stop0", "stop1"):
        # The loss of the rank's own batch, exactly what the loop passed (the guide's loss.item()):
        # it differs between the ranks, which read different halves of each global batch.
        for rank in (chief, other):
            assert [r[1] for r in rank[phase]["rows"]] == rank[phase]["passed"]
        assert [r[1] for r in chief[phase]["rows"]] != pytest.approx([r[1] for r in other[phase]["rows"]])
        # DDP kept the replicas in sync: the same weights on both ranks.
        for mine, theirs in zip(chief[phase]["weights"], other[phase]["weights"], strict=True):
            np.testing.assert_allclose(np.array(mine), np.array(theirs), rtol=1e-6)


@pytest.mark.slow
def test_torch_ddp_a_hook_raising_on_one_rank_ends_both_naming_it(torch_pair):
    check_error_ends_both(torch_pair[2])
