"""The cluster: which process this is, whether it is the chief, and one stop decision for all.

Training can span several processes, each running the same `fit` (or the same
loop) with its own copy of the callback. Three engines do it, and each answers
the same three questions here, so that the callback asks this module and never
a framework:

  engine              this process, of how many    the chief             the collective
  tf.distribute       the strategy's worker task   should_checkpoint     strategy.reduce(SUM)
  (MultiWorkerMirroredStrategy, tf_keras)
  JAX processes       jax.process_index(),         process 0             a jitted sum of a global array
  (jax.distributed + keras.distribution)           jax.process_count()
  torch.distributed   get_rank(), get_world_size() rank 0                all_reduce(SUM)
  (DDP in a loop of the user's own)
  one process         0 of 1                       itself (or the strategy's chief)  none

Every process's hooks must see the same steps, and every process must leave
the loop after the same step: a process that left alone would leave the others
waiting in the next step's collective (an all-reduce of gradients) until a
timeout or the coordination service aborts the job. So, once per step, each
process's own outcome (go on, stop, or a hook raised) is summed across the
processes with one tiny collective (`Cluster.agree`), and every process acts on
the same decision. Only when a hook raised does a second collective share the
error's text, so that every process ends with a message naming the process and
the hook.

JAX and PyTorch are imported only where a program has imported them already:
a TensorFlow-only program pays nothing for them.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import tensorflow as tf

from hooks2callbacks._seams import is_default_strategy

GO_ON, STOP, RAISED = 0, 1, 2
# An error's text shared across processes is cut to this many bytes.
MESSAGE_BYTES = 512


def strategy_of(model: Any) -> tf.distribute.Strategy:
    """Returns the model's `tf.distribute` strategy, or TF's default one.

    Keras 3 on JAX or PyTorch has no TF strategy; the default strategy then says
    "one worker, the chief".
    """
    strategy = getattr(model, "distribute_strategy", None)
    return strategy if isinstance(strategy, tf.distribute.Strategy) else tf.distribute.get_strategy()


def is_default(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` is TF's default strategy (no tf.distribute at all)."""
    return is_default_strategy(strategy)


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` spans several worker processes."""
    # tf_keras asks the same private question wherever it handles workers.
    in_multi_worker_mode = getattr(strategy.extended, "_in_multi_worker_mode", None)
    return bool(in_multi_worker_mode is not None and in_multi_worker_mode())


class Cluster:
    """The processes of one training job; this base class is one process alone.

    Attributes:
        engine: What runs the processes: `"local"`, `"tf.distribute"`, `"jax"` or
            `"torch.distributed"`.
        index: This process's index, from 0.
        count: How many processes there are.
        is_chief: Whether this process is the chief (the one that writes files
            and runs `chief_only_hooks`).
        strategy: The model's `tf.distribute` strategy (TF's default one outside
            `tf.distribute`), in which the hooks' graph is built.
    """

    engine = "local"

    def __init__(self, strategy: tf.distribute.Strategy, index: int = 0, count: int = 1, chief: bool = True) -> None:
        self.strategy = strategy
        self.index = index
        self.count = count
        self.is_chief = chief

    @property
    def several(self) -> bool:
        """Whether the job spans several processes (and so must agree on each step's outcome)."""
        return self.count > 1

    def agree(self, outcome: int) -> list[int]:
        """Shares this process's outcome of a step with every process: a collective.

        Every process must call it once per step, at the same point.

        Args:
            outcome: `GO_ON`, `STOP` or `RAISED`.

        Returns:
            Every process's outcome, by process index.
        """
        vector = np.zeros(self.count, np.int32)
        vector[self.index] = outcome
        return [int(v) for v in self._sum(vector)]

    def share_error(self, text: str | None) -> list[str]:
        """Shares each process's error text (its first MESSAGE_BYTES bytes): a collective.

        Called by every process, after `agree` told them all that some process raised.

        Args:
            text: This process's error, or None where it raised none.

        Returns:
            Every process's text, by process index ("" where none).
        """
        vector = np.zeros((self.count, MESSAGE_BYTES), np.int32)
        data = (text or "").encode("utf-8", "replace")[:MESSAGE_BYTES]
        vector[self.index, : len(data)] = np.frombuffer(data, np.uint8)
        summed = self._sum(vector)
        return [bytes(row.astype(np.uint8)).rstrip(b"\0").decode("utf-8", "replace") for row in summed]

    def _sum(self, vector: np.ndarray) -> np.ndarray:
        """The elementwise sum of `vector` over every process."""
        return vector

    def __repr__(self) -> str:
        return f"{type(self).__name__}(process {self.index} of {self.count}, chief={self.is_chief})"


class TFDistributeCluster(Cluster):
    """The workers of a multi-worker `tf.distribute` strategy (MultiWorkerMirroredStrategy)."""

    engine = "tf.distribute"

    def __init__(self, strategy: tf.distribute.Strategy) -> None:
        resolver = strategy.cluster_resolver
        spec = resolver.cluster_spec()
        tasks = [(job, i) for job in ("chief", "worker") if job in spec.jobs for i in range(spec.num_tasks(job))]
        task = (resolver.task_type, resolver.task_id)
        # False exactly on MultiWorkerMirroredStrategy's non-chief workers.
        chief = bool(strategy.extended.should_checkpoint)
        super().__init__(strategy, tasks.index(task) if task in tasks else 0, max(len(tasks), 1), chief)
        self._replicas_per_worker = max(strategy.num_replicas_in_sync // self.count, 1)

        def requests(vector: tf.Tensor) -> tf.Tensor:
            per_replica = strategy.run(tf.identity, args=(vector,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        self._requests = tf.function(requests)

    def _sum(self, vector: np.ndarray) -> np.ndarray:
        # Each worker's vector is counted once per replica it holds.
        return np.asarray(self._requests(tf.constant(vector)).numpy()) // self._replicas_per_worker


class JaxCluster(Cluster):
    """The processes of `jax.distributed` (Keras 3's `keras.distribution` across hosts)."""

    engine = "jax"

    def __init__(self, strategy: tf.distribute.Strategy) -> None:
        import jax  # pylint: disable=import-outside-toplevel

        index = jax.process_index()
        super().__init__(strategy, index, jax.process_count(), index == 0)
        self._sums: dict[tuple[int, ...], Any] = {}

    def _sum(self, vector: np.ndarray) -> np.ndarray:
        # One jitted sum over a global array that holds every process's vector. On 2 CPU
        # processes here (benchmarks/cluster.py, a loaded machine): 3.0 ms a call alone,
        # against 3.9 ms for multihost_utils.process_allgather; the coordination service's
        # key-value store took 1.3 ms, but is reached only through JAX's private modules.
        import jax  # pylint: disable=import-outside-toplevel
        from jax.sharding import Mesh, NamedSharding, PartitionSpec  # pylint: disable=import-outside-toplevel

        compiled = self._sums.get(vector.shape)
        if compiled is None:
            mesh = Mesh(np.array(jax.devices()), ("processes",))
            rows = NamedSharding(mesh, PartitionSpec("processes"))  # type: ignore[no-untyped-call]
            whole = NamedSharding(mesh, PartitionSpec())  # type: ignore[no-untyped-call]
            compiled = self._sums[vector.shape] = (rows, jax.jit(lambda a: a.sum(axis=0), out_shardings=whole))
        rows, total = compiled
        # One row per local device; the first holds this process's vector, the others zeros.
        local = np.zeros((jax.local_device_count(), *vector.shape), vector.dtype)
        local[0] = vector
        summed = total(jax.make_array_from_process_local_data(rows, local))  # type: ignore[no-untyped-call]
        return np.asarray(summed.addressable_data(0))


class TorchCluster(Cluster):
    """The ranks of an initialized `torch.distributed` process group (DDP)."""

    engine = "torch.distributed"

    def __init__(self, strategy: tf.distribute.Strategy) -> None:
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel

        rank = dist.get_rank()
        super().__init__(strategy, rank, dist.get_world_size(), rank == 0)

    def _sum(self, vector: np.ndarray) -> np.ndarray:
        import torch  # pylint: disable=import-outside-toplevel
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel

        tensor = torch.from_numpy(vector.copy())
        if dist.get_backend() == "nccl":  # NCCL reduces only tensors on the GPU
            tensor = tensor.cuda()
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return np.asarray(tensor.cpu().numpy())


def sharded_across_processes(variable: Any) -> ValueError | None:
    """The error for a model variable whose shards lie on other processes, or None.

    Under `keras.distribution.ModelParallel` across `jax.distributed` processes, a
    variable sharded over the processes' devices cannot be read by one process:
    every process would have to take part in gathering it, and a hook runs when
    its own process decides (a chief-only `CheckpointSaverHook` on its timer). So
    such a read is refused, naming the variable, and never gives a partial value.
    """
    value = getattr(variable, "value", variable)
    if getattr(value, "is_fully_addressable", True) or getattr(value, "is_fully_replicated", False):
        return None
    import jax  # pylint: disable=import-outside-toplevel

    name = getattr(variable, "path", None) or getattr(variable, "name", None) or repr(variable)
    local = tuple(value.addressable_data(0).shape)
    return ValueError(
        f"The model variable {name!r} (shape {tuple(value.shape)}) is sharded across the "
        f"{jax.process_count()} processes of this JAX job (this process holds a {local} shard), and a hook "
        "on one process cannot read the other processes' shards: a CheckpointSaverHook (it saves every "
        "model variable) or a hook that fetches this variable. Ways out: keep the variable whole on every "
        "process (leave it out of the ModelParallel LayoutMap, or use DataParallel), or save the sharded "
        "model with a checkpointer that every process calls at the same step (Orbax); HookCallback never "
        "writes a partial checkpoint."
    )


def _jax_processes() -> int:
    """How many `jax.distributed` processes there are; 1 where JAX is not in use."""
    if "jax" not in sys.modules:
        return 1
    import jax  # pylint: disable=import-outside-toplevel

    return int(jax.process_count())


def _torch_world() -> int:
    """The size of the default `torch.distributed` process group; 1 where there is none."""
    if "torch" not in sys.modules:
        return 1
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel

    return int(dist.get_world_size()) if dist.is_available() and dist.is_initialized() else 1


def cluster_of(model: Any, previous: Cluster | None = None) -> Cluster:
    """Returns the cluster that `model` trains in.

    In order: a multi-worker `tf.distribute` strategy; several `jax.distributed`
    processes (on the JAX backend); an initialized `torch.distributed` group of
    several ranks; otherwise one process, the chief unless its strategy says not.

    Args:
        model: The Keras model being trained.
        previous: The cluster of this callback's previous run: returned again when
            it is the same engine in the same strategy, so that its compiled
            collective (a `tf.function`, a jitted sum) is not built again each run.
    """
    strategy = strategy_of(model)
    kind: type[Cluster]
    if is_multi_worker(strategy):
        kind = TFDistributeCluster
    else:
        import keras  # pylint: disable=import-outside-toplevel

        if keras.backend.backend() == "jax" and _jax_processes() > 1:
            kind = JaxCluster
        elif _torch_world() > 1:
            kind = TorchCluster
        else:
            return Cluster(strategy, chief=bool(strategy.extended.should_checkpoint))
    if previous is not None and type(previous) is kind and previous.strategy is strategy:
        return previous
    return kind(strategy)
