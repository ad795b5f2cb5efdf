"""HookCallback under tf.distribute: MirroredStrategy on 2 logical CPUs, and 2 local workers.

TF fixes its devices and cluster when it initializes, so each run is a process
of its own (`distributed_run.py`); these tests start it and check what its
hooks saw.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys

import distributed_run
import numpy as np
import pytest
import tensorflow as tf
from support import iterations, make_model

from hooks2callbacks import restore_checkpoint

RUN = pathlib.Path(distributed_run.__file__)
TIMEOUT_S = 300

needs_tf_keras = pytest.mark.skipif(
    importlib.util.find_spec("tf_keras") is None,
    reason="tf_keras is not installed: pip install '.[test]' (or tf-keras)",
)


def start(args: list[str], **env: str) -> subprocess.Popen:
    # A session of its own, so that cleanup can end the process and anything it started.
    return subprocess.Popen(
        [sys.executable, str(RUN), *args],
        cwd=RUN.parent,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def finish(processes: list[subprocess.Popen]) -> list[str]:
    """Waits for every process (TIMEOUT_S in all); kills any left. Returns their outputs."""
    outputs = []
    try:
        for process in processes:
            try:
                outputs.append(process.communicate(timeout=TIMEOUT_S)[0])
            except subprocess.TimeoutExpired:
                pytest.fail(f"{process.args} did not finish within {TIMEOUT_S} s (a worker left waiting?)")
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    assert all(process.poll() is not None for process in processes)
    return outputs


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    if importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf_keras is not installed: pip install '.[test]' (or tf-keras)")
    result = tmp_path_factory.mktemp("mirrored") / "result.json"
    process = start(["mirrored", str(result)])
    (output,) = finish([process])
    assert process.returncode == 0, output[-5000:]
    return json.loads(result.read_text())


@pytest.fixture(scope="module")
def mirrored_loop(tmp_path_factory):
    """`distributed_run.py mirrored_loop`: its checkpoint directory and what its hooks saw."""
    if importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf_keras is not installed: pip install '.[test]' (or tf-keras)")
    directory = tmp_path_factory.mktemp("mirrored_loop")
    process = start(["mirrored_loop", str(directory), str(directory / "result.json")])
    (output,) = finish([process])
    assert process.returncode == 0, output[-5000:]
    return directory, json.loads((directory / "result.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["keras", "tf_keras"])
def test_mirrored_strategy_hooks_see_global_batch_values_and_each_step_once(mirrored, flavour):
    run = mirrored[flavour]
    steps = distributed_run.MIRRORED_STEPS
    assert run["replicas"] == 2
    assert run["steps"] == list(range(steps)) and run["iterations"] == steps
    assert run["hook_loss_types"] == ["float32"]  # np.float32, as Session.run gave a float32 loss
    # Each batch's own value over the global batch: the loss one device computes on
    # it (one replica's half would not be).
    assert run["hook_loss"] == pytest.approx(run["single_device_loss"], rel=1e-4)
    # Keras's running mean equals the batch's value at each epoch's first step only.
    first_steps = [0, 10]
    assert [run["hook_loss"][i] for i in first_steps] == pytest.approx(
        [run["keras_loss"][i] for i in first_steps], rel=1e-6
    )
    assert run["hook_loss"][1] != pytest.approx(run["keras_loss"][1], rel=1e-3)
    # At the end of an evaluation, evaluate()'s results (Keras's all-reduced logs), whatever `values`.
    assert run["final_ops"] == pytest.approx(run["evaluated"], rel=1e-6)
    assert run["final_means"] == pytest.approx(run["evaluated"], rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["keras", "tf_keras"])
def test_mirrored_strategy_hooks_see_the_global_batch_tensors(mirrored, flavour):
    """Each replica's half of the batch is gathered: hooks see the whole batch, in order, and the
    predictions that one device computes for it."""
    run = mirrored[flavour]
    assert run["tensor_steps"] == 4
    assert run["tensor_features_are_the_batches"] and run["tensor_labels_are_the_batches"]
    assert run["tensor_predictions_shapes"] == [[32, 3]]
    assert run["tensor_predictions_max_difference"] < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["keras", "tf_keras"])
def test_mirrored_strategy_writes_reach_every_replica_and_hooks_begin_in_cross_replica_context(mirrored, flavour):
    run = mirrored[flavour]
    # Rate 0 assigned at session creation, bias [1, 2, 3] in the first step: every replica has them at the end.
    assert run["begin_in_cross_replica_context"] is True
    assert run["replica_biases"] == [[1.0, 2.0, 3.0]] * 2 and run["replica_rates"] == [0.0, 0.0]
    # tensorflow/estimator's own _MultiWorkerEarlyStoppingHook (its begin() asserts a cross-replica
    # context, and its stop op is a per-replica assign_add fed through a placeholder) checks at
    # steps 0 and 3, asks to stop at 3, and the stop variable ends training after step 4.
    assert run["early_stop_checks"] == [1, 2] and run["early_stop_iterations"] == 5


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.mark.slow
@needs_tf_keras
def test_multi_worker_chief_only_hooks_and_a_stop_on_one_worker(tmp_path):
    workers = [f"localhost:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        args = ["worker", str(tmp_path / f"hooks{index}"), str(tmp_path / f"result{index}.json")]
        processes.append(start(args, TF_CONFIG=json.dumps(config)))
    outputs = finish(processes)
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-5000:]
    chief, other = (json.loads((tmp_path / f"result{i}.json").read_text()) for i in range(2))

    # The cluster module's tf.distribute engine: worker 0 of 2 is the chief.
    assert chief["cluster"] == ["tf.distribute", 0, 2, True] and other["cluster"] == ["tf.distribute", 1, 2, False]
    # Worker 1 alone asked to stop after step 3; both stopped there, neither hung.
    last = distributed_run.WORKER_STOP_STEP
    assert chief["iterations"] == other["iterations"] == last + 1
    # A second fit, where a hook raises on worker 1 alone at (stale) step 5: both fits raised
    # after that same step, the other worker's naming the hook.
    assert chief["raised_iterations"] == other["raised_iterations"] == last + 3
    assert other["raised"].startswith("ValueError: RaiseOn: a local check failed at step 5")
    assert "process 1: Raised in RaiseOn.after_run()" in chief["raised"]
    assert "this process (process 0 of 2) ends too" in chief["raised"]
    # Each batch's own loss over the global batch: the same on both workers, and at
    # the first step (a running mean of one batch) Keras's own value.
    assert chief["hook_loss"] == other["hook_loss"] and len(chief["hook_loss"]) == last + 1
    assert chief["hook_loss"][0] == pytest.approx(chief["keras_loss"][0], rel=1e-6)
    assert chief["hook_loss"][1:] != pytest.approx(chief["keras_loss"][1:], rel=1e-3)
    every = [tuple(c) for c in other["calls"]]
    assert {c[0] for c in every} == {"every"}
    assert [c[2] for c in every if c[1] == "after_run"] == list(range(last + 1))
    # On the chief the chief-only hooks run too, after the others at every event.
    expected = []
    for call in every:
        expected += [call, ("chief", *call[1:])]
    assert [tuple(c[:2]) for c in chief["calls"]] == [tuple(c[:2]) for c in expected]
    assert [c for c in map(tuple, chief["calls"]) if c[0] == "every"] == every
    # Only the chief's directory gets files.
    assert (tmp_path / "hooks0" / "steps.txt").read_text().split() == [str(s) for s in range(last + 1)]
    # A stock CheckpointSaverHook among the chief-only hooks: the chief's checkpoints,
    # on TF1's schedule (at creation, every 2 steps, and at the end), restorable.
    state = tf.train.get_checkpoint_state(str(tmp_path / "hooks0" / "ckpt"))
    assert [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths] == [0, 2, 4]
    import tf_keras

    restored = make_model(tf_keras)
    assert restore_checkpoint(restored, str(tmp_path / "hooks0" / "ckpt")).endswith("model.ckpt-4")
    assert iterations(restored) == last + 1
    assert not (tmp_path / "hooks1").exists()


def test_across_workers_an_error_in_begin_says_the_hooks_run_outside_the_strategy():
    # Under MultiWorkerMirroredStrategy the callback runs begin() outside the strategy
    # (a local session cannot run its collectives) and says so on an error from there.
    from hooks2callbacks._dispatch import HookRunner

    class NeedsCrossReplica(tf.compat.v1.train.SessionRunHook):
        def begin(self):
            assert tf.distribute.in_cross_replica_context()

    runner = HookRunner([[NeedsCrossReplica()]], make_model(), 0, advances=True, outside_strategy_note="the note")
    with pytest.raises(AssertionError) as info:
        runner.begin()
    assert info.value.__notes__ == ["Raised in NeedsCrossReplica.begin(), called by HookCallback.", "the note"]


@pytest.mark.slow
def test_keras_distribution_data_parallel_on_jax_gives_global_batch_values_and_the_same_stop(tmp_path):
    """Keras 3's distribution API (JAX, 2 virtual CPU devices): hooks see what one device gives them."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs the 'jax' package: pip install '.[backends]' (CI does)")
    result = tmp_path / "result.json"
    process = start(
        ["data_parallel", str(result)], KERAS_BACKEND="jax", XLA_FLAGS="--xla_force_host_platform_device_count=2"
    )
    (output,) = finish([process])
    assert process.returncode == 0, output[-5000:]
    run = json.loads(result.read_text())
    one, both = run["one_device"], run["data_parallel"]
    assert run["devices"] == 2 and both["sharded"] == 2 and one["sharded"] == 1
    assert one["batches_in_order"] and both["batches_in_order"]
    stop = distributed_run.DATA_PARALLEL_STOP
    assert one["iterations"] == both["iterations"] == stop
    assert [r["step"] for r in both["rows"]] == [r["step"] for r in one["rows"]] == list(range(stop))
    # The global batch's own values: those of the same batch on one device, to float32 rounding.
    for key in ("loss", "accuracy"):
        assert [r[key] for r in both["rows"]] == pytest.approx([r[key] for r in one["rows"]], rel=1e-5, abs=1e-6)


@pytest.mark.slow
@needs_tf_keras
@pytest.mark.parametrize("flavour", ["keras", "tf_keras"])
def test_mirrored_strategy_custom_loop_runs_hooks_as_monitored_session_does(mirrored_loop, flavour):
    """docs/custom-loops.md's `strategy.run` loop on 2 logical CPUs, the model not compiled, with
    test_loops.py's hooks (StopAtStepHook, LoggingTensorHook, a fetch by name, CheckpointSaverHook,
    NanTensorHook), against the same hooks under a MonitoredSession on the TF1 twin."""
    directory, runs = mirrored_loop
    run = runs[flavour]
    assert run["replicas"] == 2
    # The same stop step, and the hooks saw exactly the reduced losses the loop passed.
    assert len(run["passed"]) == len(run["tf1_logged"]) == 7 and run["iterations"] == 7
    assert run["logged"] == run["fetched"] == run["passed"]
    assert run["fetched_types"] == ["float32"]
    assert run["steps"] == run["tf1_steps"] == list(range(7))
    # The global batch's loss: what one device (the TF1 twin) computes for it.
    assert run["passed"] == pytest.approx(run["tf1_logged"], rel=1e-5)
    # Checkpoints at the same steps, each holding the weights after the steps it is named for.
    ours, tf1 = directory / flavour, directory / f"{flavour}_tf1"
    state = tf.train.get_checkpoint_state(str(ours))
    assert [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths] == [0, 3, 6, 7]
    for step in (0, 3, 6, 7):
        for name in ("global_step", "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"):
            np.testing.assert_allclose(
                tf.train.load_variable(str(ours / f"model.ckpt-{step}"), name),
                tf.train.load_variable(str(tf1 / f"model.ckpt-{step}"), name),
                rtol=1e-5,
                atol=1e-6,
                err_msg=f"{name} at step {step}",
            )
