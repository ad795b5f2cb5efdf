"""One process of a 2-process training job on localhost; run by test_cluster.py.

    python cluster_run.py jax INDEX PORT DIRECTORY PHASES      (KERAS_BACKEND=jax)
        Keras 3 on JAX across 2 processes: jax.distributed (gloo collectives on CPU)
        and keras.distribution.DataParallel over both processes' devices, fit() on
        a tf.data.Dataset. PHASES "main" runs phases 1 to 3 in one pair of processes
        (each process start costs seconds), which exit 0; "error" runs phase 4 in a
        pair of its own, which its error ends:
          1. chief-only hooks (a recorder, a step file, a CheckpointSaverHook) and a stop
             asked on process 0 alone;
          2. a new model, a stop asked on process 1 alone;
          3. ModelParallel (a kernel sharded across the processes): a chief-only
             CheckpointSaverHook is refused, naming the variable;
          4. a hook raising on process 1 alone: both processes end, the error propagates.
    python cluster_run.py torch INDEX PORT DIRECTORY PHASES    (KERAS_BACKEND=torch)
        keras.io's "Multi-GPU distributed training with PyTorch" loop on CPU with
        gloo (DistributedDataParallel, a DistributedSampler), hooks through
        HookCallback(optimizer=...). Phases 1, 2 and 4 as above.

Each process writes DIRECTORY/result<INDEX>.json after phase 3 (JAX) or 2 (PyTorch),
or DIRECTORY/error<INDEX>.txt with the error that ends phase 4.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import numpy as np
import tensorflow as tf

T = tf.compat.v1.train
STOP_0 = 2  # phase 1: process 0 alone asks to stop after this (stale) step
STOP_1 = 3  # phase 2: process 1 alone asks to stop after this step
RAISE_AT = 1  # phase 4: a hook on process 1 raises in after_run at this step
CHECKPOINT_STEPS = 2


class StopOn(T.SessionRunHook):
    """Asks to stop after `step`, on process `process` only."""

    def __init__(self, process: int, this_process: int, step: int) -> None:
        self.stops_here = process == this_process
        self.step = step

    def before_run(self, run_context):
        return T.SessionRunArgs(T.get_global_step())

    def after_run(self, run_context, run_values):
        if self.stops_here and run_values.results >= self.step:
            run_context.request_stop()


class Seen(T.SessionRunHook):
    """Records each step's stale global step and loss."""

    def __init__(self) -> None:
        self.rows: list = []

    def before_run(self, run_context):
        return T.SessionRunArgs({"step": T.get_global_step(), "loss": "loss"})

    def after_run(self, run_context, run_values):
        self.rows.append([int(run_values.results["step"]), float(run_values.results["loss"])])


class StepFileHook(T.SessionRunHook):
    """Appends each (stale) global step to `directory`/steps.txt, as a summary writer would."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "steps.txt")

    def begin(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)

    def before_run(self, run_context):
        return T.SessionRunArgs(T.get_global_step())

    def after_run(self, run_context, run_values):
        with open(self.path, "a") as file:
            file.write(f"{run_values.results}\n")


class RaiseOn(T.SessionRunHook):
    """Raises in after_run at `step`, on process `process` only."""

    def __init__(self, process: int, this_process: int, step: int) -> None:
        self.raises_here = process == this_process
        self.step = step

    def before_run(self, run_context):
        return T.SessionRunArgs(T.get_global_step())

    def after_run(self, run_context, run_values):
        if self.raises_here and run_values.results >= self.step:
            raise ValueError(f"RaiseOn: a local check failed at step {run_values.results}")


def hooks_of(index: int, directory: str, stop_process: int, stop_step: int, chief_dir: str | None):
    """The hooks of phases 1 and 2, and the Seen recorder among them."""
    seen = Seen()
    calls: list = []

    class Calls(T.SessionRunHook):
        def __init__(self, name: str) -> None:
            self.name = name

        def begin(self):
            calls.append([self.name, "begin"])

        def after_run(self, run_context, run_values):
            calls.append([self.name, "after_run"])

        def end(self, session):
            calls.append([self.name, "end"])

    hooks = [Calls("every"), seen, StopOn(stop_process, index, stop_step)]
    chief_only = [Calls("chief")]
    if chief_dir is not None:
        chief_only += [StepFileHook(chief_dir), T.CheckpointSaverHook(os.path.join(chief_dir, "ckpt"), save_steps=2)]
    return hooks, chief_only, seen, calls


def jax_process(index: int, port: int, directory: str, phases: str) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=index)
    import keras
    from support import make_data, make_model

    from hooks2callbacks import HookCallback

    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
    x, y = make_data()
    # Each process reads its own half of every global batch of 32 (Keras shards the dataset).
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    result: dict = {"process": jax.process_index(), "processes": jax.process_count(), "devices": len(jax.devices())}
    if phases == "error":
        model = make_model(keras)
        callback = HookCallback([RaiseOn(1, index, RAISE_AT)])
        fit_until_error(directory, index, lambda: model.fit(dataset, epochs=1, verbose=0, callbacks=[callback]))

    def phase(name: str, stop_process: int, stop_step: int, chief_dir: str | None) -> None:
        model = make_model(keras)
        hooks, chief_only, seen, calls = hooks_of(index, directory, stop_process, stop_step, chief_dir)
        model.fit(dataset, epochs=2, verbose=0, callbacks=[HookCallback(hooks, chief_only_hooks=chief_only)])
        result[name] = {
            "rows": seen.rows,
            "calls": calls,
            "iterations": int(np.asarray(model.optimizer.iterations.value.addressable_data(0))),
            "weights": [np.asarray(w.value.addressable_data(0)).tolist() for w in model.weights],
        }

    phase("stop0", 0, STOP_0, os.path.join(directory, f"chief{index}"))
    phase("stop1", 1, STOP_1, None)

    # ModelParallel: the first kernel's columns split across the 2 processes' devices.
    mesh = keras.distribution.DeviceMesh((1, 2), ("batch", "model"), devices=jax.devices())
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*dense/kernel"] = (None, "model")  # 16 hidden units, 8 on each process
    keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch"))
    model = make_model(keras, layer_names=("dense", "dense_1"))
    saver = [T.CheckpointSaverHook(os.path.join(directory, f"model_parallel{index}"), save_steps=2)]
    try:
        model.fit(dataset, epochs=1, verbose=0, callbacks=[HookCallback([], chief_only_hooks=saver)])
    except Exception as error:  # noqa: BLE001 - recorded for the test to read
        result["model_parallel_error"] = f"{type(error).__name__}: {error}"
    else:
        result["model_parallel_error"] = None
    from jax.experimental import multihost_utils

    kernel = model.weights[0]
    result["model_parallel"] = {
        "path": kernel.path,
        "fully_addressable": kernel.value.is_fully_addressable,
        "local_shape": list(kernel.value.addressable_data(0).shape),
        # Every process takes part in gathering the whole kernel, for the test to compare.
        "weights": [np.asarray(multihost_utils.process_allgather(w.value, tiled=True)).tolist() for w in model.weights],
        "iterations": int(np.asarray(model.optimizer.iterations.value.addressable_data(0))),
    }
    write(os.path.join(directory, f"result{index}.json"), result)


def torch_process(index: int, port: int, directory: str, phases: str) -> None:
    import keras
    import torch
    import torch.distributed as dist
    from support import LEARNING_RATE, make_data, make_model

    from hooks2callbacks import HookCallback

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=2)
    x, y = make_data()
    data = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    # As keras.io's guide: each rank reads its own part of the data (16 of each global batch of 32).
    sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=2, rank=index, shuffle=False)
    dataloader = torch.utils.data.DataLoader(data, batch_size=16, sampler=sampler)
    result: dict = {"process": dist.get_rank(), "processes": dist.get_world_size()}

    def train(hooks, chief_only, steps: int | None = None) -> tuple:
        model = make_model(keras)
        optimizer = keras.optimizers.SGD(LEARNING_RATE)  # a Keras optimizer counts the global step
        ddp_model = torch.nn.parallel.DistributedDataParallel(model)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        callback = HookCallback(hooks, chief_only_hooks=chief_only, optimizer=optimizer)
        callbacks = keras.callbacks.CallbackList([callback], model=model)
        passed: list = []
        callbacks.on_train_begin()
        step = 0
        for _epoch in range(2):
            for inputs, targets in dataloader:
                callbacks.on_train_batch_begin(step)
                # The guide's step: the loss of this rank's own batch; DDP averages the gradients.
                loss = loss_fn(targets, ddp_model(inputs))
                model.zero_grad()
                loss.backward()
                with torch.no_grad():
                    optimizer.apply([v.value.grad for v in model.trainable_weights], model.trainable_weights)
                passed.append(loss.item())
                callbacks.on_train_batch_end(step, {"loss": loss.detach()})
                step += 1
                if model.stop_training:
                    break
            if model.stop_training:
                break
        callbacks.on_train_end()
        return model, optimizer, passed

    if phases == "error":
        fit_until_error(directory, index, lambda: train([RaiseOn(1, index, RAISE_AT)], []))
    for phase, stop_process, stop_step, chief_dir in (
        ("stop0", 0, STOP_0, os.path.join(directory, f"chief{index}")),
        ("stop1", 1, STOP_1, None),
    ):
        hooks, chief_only, seen, calls = hooks_of(index, directory, stop_process, stop_step, chief_dir)
        model, optimizer, passed = train(hooks, chief_only)
        result[phase] = {
            "rows": seen.rows,
            "passed": passed,
            "calls": calls,
            "iterations": int(optimizer.iterations.numpy()),
            "weights": [w.tolist() for w in model.get_weights()],
        }
    write(os.path.join(directory, f"result{index}.json"), result)
    dist.destroy_process_group()


def fit_until_error(directory: str, index: int, run) -> None:
    """Runs phase 4, writing the error that ends it, and raises it on."""
    try:
        run()
    except Exception:
        with open(os.path.join(directory, f"error{index}.txt"), "w") as file:
            file.write(traceback.format_exc())
        raise
    raise SystemExit(f"process {index}: phase 4 ended without an error")


def write(path: str, value) -> None:
    with open(path, "w") as file:
        json.dump(value, file)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    engine, index, port, directory, phases = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6]
    if engine == "jax":
        jax_process(index, port, directory, phases)
    elif engine == "torch":
        torch_process(index, port, directory, phases)
    else:
        raise SystemExit(f"unknown engine {engine!r}; expected jax or torch")
