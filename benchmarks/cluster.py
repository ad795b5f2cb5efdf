"""What agreeing on each step costs across processes: 2 processes on localhost, JAX or PyTorch.

Run from the repository root (it starts its 2 processes itself, on free localhost ports):

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/cluster.py --engine jax --rounds 4 --steps 60
    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/cluster.py --engine torch --rounds 4 --steps 60

Each process trains the benchmarks' small MLP (`_common.MODELS["small"]`, global batch
32, 16 per process):

  * jax: `jax.distributed` (gloo collectives on CPU), `keras.distribution.DataParallel`
    over both processes' devices, `fit` on a `tf.data.Dataset`;
  * torch: keras.io's DDP loop (gloo), a Keras optimizer, hooks through
    `HookCallback(optimizer=...)` in a `CallbackList`.

Variants, taking turns round by round (the same order in both processes, as their
collectives must): "bare" (no callback) and "hooked" (`HookCallback` with the four
stock hooks of `_common.stock_hooks`; across processes it agrees on each step's
outcome with one collective); on JAX also "synced" (a batch-end callback that does
nothing: Keras then fetches each step's logs, which waits for the step, as any
batch-end callback does). Step time is the time from the 6th batch's begin to the
run's return, per step; the median over rounds. Apart from training, it times the
agreement alone (`Cluster.agree`, 300 calls: on JAX a jitted sum of a global array
that holds each process's vector) and, on JAX, the other ways: `multihost_utils.
process_allgather` (public, what the first version used) and the coordination
service's key-value store (JAX's private `distributed.global_state.client`).

It prints, from process 0: µs per agreement, ms per step of each variant and the
ratio hooked/bare. The machine is shared: quote ratios from one run, and rerun.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402
import numpy as np  # noqa: E402

WARM_STEPS = 5
AGREEMENTS = 300


class BatchTimes:
    """Records perf_counter at each batch begin (a plain Keras callback, or called by hand)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.times.append(time.perf_counter())

    def step_ms(self, end: float) -> float:
        """ms per step from the begin of batch WARM_STEPS to `end` (when the run returned: JAX
        dispatches steps asynchronously, so intervals between batch begins undercount)."""
        return 1000 * (end - self.times[WARM_STEPS]) / (len(self.times) - WARM_STEPS)


def time_agreements(ways: dict[str, Any], rounds: int = 5, calls: int = AGREEMENTS // 5) -> dict[str, float]:
    """µs per call of each way to agree, the ways taking turns round by round (median of rounds)."""
    for way in ways.values():
        for _ in range(20):
            way.agree(0)
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, way in ways.items():
            start = time.perf_counter()
            for _ in range(calls):
                way.agree(0)
            times[name].append(1e6 * (time.perf_counter() - start) / calls)
    return {f"{name}_us": statistics.median(t) for name, t in times.items()}


def jax_process(index: int, port: int, rounds: int, steps: int) -> dict[str, Any]:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=index)
    import keras

    from hooks2callbacks import HookCallback
    from hooks2callbacks._cluster import JaxCluster, cluster_of

    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
    widths = _common.MODELS["small"]
    dataset = _common.synthetic_dataset(widths)
    model = _common.keras_mlp(widths)
    cluster = cluster_of(model)
    assert isinstance(cluster, JaxCluster), cluster  # noqa: S101 - a benchmark's own precondition

    from jax.experimental import multihost_utils

    class AllGather:
        def agree(self, outcome: int) -> None:
            row = np.zeros(2, np.int32)
            row[index] = outcome
            multihost_utils.process_allgather(row).sum(axis=0)

    class KeyValue:
        def __init__(self) -> None:
            from jax._src import distributed

            self.client = distributed.global_state.client
            self.step = 0

        def agree(self, outcome: int) -> None:
            self.step += 1
            self.client.key_value_set(f"bench/{self.step}/{index}", str(outcome))
            [int(self.client.blocking_key_value_get(f"bench/{self.step}/{j}", 60_000)) for j in range(2)]

    result: dict[str, Any] = time_agreements({"agree": cluster, "allgather": AllGather(), "key_value": KeyValue()})
    times: dict[str, list[float]] = {"bare": [], "synced": [], "hooked": []}
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(rounds):
            for variant in times:
                timer = keras.callbacks.LambdaCallback()
                recorder = BatchTimes()
                timer.on_train_batch_begin = recorder.on_train_batch_begin
                callbacks = [timer]
                if variant == "hooked":
                    callbacks.append(HookCallback(_common.stock_hooks(directory)))
                if variant == "synced":  # any batch-end callback makes Keras fetch the logs each step
                    callbacks.append(keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: None))
                model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=callbacks)
                times[variant].append(recorder.step_ms(time.perf_counter()))
    result.update({f"{k}_ms": statistics.median(v) for k, v in times.items()})
    return result


def torch_process(index: int, port: int, rounds: int, steps: int) -> dict[str, Any]:
    import keras
    import torch
    import torch.distributed as dist

    from hooks2callbacks import HookCallback
    from hooks2callbacks._cluster import TorchCluster, cluster_of

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=2)
    torch.set_num_threads(1)  # 2 processes on a shared machine
    widths = _common.MODELS["small"]
    x, y = _common.synthetic_arrays(widths)
    data = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=2, rank=index, shuffle=False)
    loader = torch.utils.data.DataLoader(data, batch_size=_common.BATCH // 2, sampler=sampler)
    model = _common.keras_mlp(widths)
    optimizer = keras.optimizers.SGD(0.01)
    ddp_model = torch.nn.parallel.DistributedDataParallel(model)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    cluster = cluster_of(model)
    assert isinstance(cluster, TorchCluster), cluster  # noqa: S101 - a benchmark's own precondition

    def run(callbacks: Any, recorder: BatchTimes) -> None:
        if callbacks is not None:
            callbacks.on_train_begin()
        for step, (inputs, targets) in enumerate(loader):
            if step == steps:
                break
            recorder.on_train_batch_begin(step)
            if callbacks is not None:
                callbacks.on_train_batch_begin(step)
            logits = ddp_model(inputs)
            loss = loss_fn(targets, logits)
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                optimizer.apply([v.value.grad for v in model.trainable_weights], model.trainable_weights)
            if callbacks is not None:
                accuracy = (logits.detach().argmax(dim=1) == targets).float().mean()
                callbacks.on_train_batch_end(step, {"loss": loss.detach(), "accuracy": accuracy})
        if callbacks is not None:
            callbacks.on_train_end()

    result: dict[str, Any] = time_agreements({"agree": cluster})
    times: dict[str, list[float]] = {"bare": [], "hooked": []}
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(rounds):
            for variant in times:
                recorder = BatchTimes()
                callbacks = None
                if variant == "hooked":
                    hooks = _common.stock_hooks(directory)
                    callback = HookCallback(hooks, optimizer=optimizer)
                    callbacks = keras.callbacks.CallbackList([callback], model=model)
                run(callbacks, recorder)
                times[variant].append(recorder.step_ms(time.perf_counter()))
    result.update({f"{k}_ms": statistics.median(v) for k, v in times.items()})
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=("jax", "torch"), default="jax")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60, help="steps per run (the torch loader has 64 batches)")
    parser.add_argument("--process", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.process is not None:
        run = jax_process if args.engine == "jax" else torch_process
        print("RESULT " + json.dumps(run(args.process, args.port, args.rounds, args.steps)), flush=True)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repository = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, KERAS_BACKEND=args.engine, PYTHONPATH=repository)
    command = [sys.executable, os.path.abspath(__file__), "--engine", args.engine, "--port", str(port)]
    command += ["--rounds", str(args.rounds), "--steps", str(args.steps)]
    processes = [
        subprocess.Popen([*command, "--process", str(i)], env=env, stdout=subprocess.PIPE, text=True) for i in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=600)[0] for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
    results = [json.loads(next(line[7:] for line in o.splitlines() if line.startswith("RESULT "))) for o in outputs]
    sys.path.insert(0, repository)
    info = _common.machine_info()
    print(
        f"engine {args.engine}, 2 processes on localhost; {info['cpu_model']}, {info['cpus_usable']} usable CPUs, "
        f"load {info['loadavg'][0]:.1f} (a shared machine), git {info['git']}"
    )
    for index, result in enumerate(results):
        text = ", ".join(f"{k} {v:.1f}" for k, v in result.items())
        print(f"process {index}: {text}, hooked/bare {result['hooked_ms'] / result['bare_ms']:.3f}")


if __name__ == "__main__":
    main()
