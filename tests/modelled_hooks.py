"""Hooks WRITTEN FOR THIS PROJECT, each modelled on the behaviour of a public TF1 hook.

The public hooks named below cannot be imported here: their packages are not on PyPI, or do not
import under TensorFlow 2.18-2.21 (tests/estimator_era/README.md, "Public code in the tests", says
which and why). None of this code is theirs. Each class does, in code of its own, the things of
its model that the tests rely on: what it reads from the graph and when, what it fetches, feeds or
logs, and when it stops. The tests run each of them under a real `tf.compat.v1.train.
MonitoredSession` and through `HookCallback` and compare the two.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import signal
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tf_slim.ops.variables import get_variables_to_restore

V1 = tf.compat.v1
# The logger criteo/deepr logs to; tests/test_differential.py listens to it.
DEEPR_LOGGER = logging.getLogger("deepr")


class ParameterCountHook(V1.train.SessionRunHook):
    """Logs the number of trainable parameters once, in `begin()`.

    Modelled on OpenNMT-tf 1.x's `LogParametersCountHook`: it multiplies the dimensions of each of
    `tf.compat.v1.trainable_variables()` as TF1 shapes give them (`Dimension.value`, so TF2 shapes
    must be turned off with `tf.compat.v1.disable_v2_tensorshape()`, as TF1 code under TF2 needs).
    """

    def begin(self) -> None:
        total = 0
        for variable in V1.trainable_variables():
            total += math.prod(dimension.value for dimension in variable.get_shape())
        V1.logging.info("Number of trainable parameters: %d", total)


class PredictionTimeHook(V1.train.SessionRunHook):
    """Times a predict loop and counts its examples; logs the totals in `end()`.

    Modelled on OpenNMT-tf 1.x's `LogPredictionTimeHook`: each step it fetches again what the
    predict loop itself ran (`run_context.original_args.fetches`, a `model_fn`'s predictions
    dict), counts the batch's examples from the first prediction's leading dimension and, where a
    `"length"` prediction exists, its tokens.
    """

    def begin(self) -> None:
        self.seconds = 0.0
        self.examples = 0
        self.tokens = 0

    def before_run(self, run_context: Any) -> Any:
        self._started = time.time()
        return V1.train.SessionRunArgs(run_context.original_args.fetches)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.seconds += time.time() - self._started
        predictions = run_values.results
        self.examples += next(iter(predictions.values())).shape[0]
        lengths = predictions.get("length")
        if lengths is not None:
            # One length per example, or per example and beam: the first beam's.
            self.tokens += int(np.sum(lengths[:, 0] if lengths.ndim == 2 else lengths))

    def end(self, session: Any) -> None:
        V1.logging.info("Total prediction time (s): %f", self.seconds)
        V1.logging.info("Average prediction time (s): %f", self.seconds / self.examples)
        if self.tokens:
            V1.logging.info("Tokens per second: %f", self.tokens / self.seconds)


class BatchExportHook(V1.train.SessionRunHook):
    """Appends the values of `fetches` at each step to one `.npy` file, one `numpy.save` a step.

    Modelled on donatasrep/bert's `ExportHook`, an eval hook given a `model_fn`'s tensors (labels,
    predictions): the file is `<output_dir>/eval_results/<timestamp>.npy`, made when the hook is.
    """

    def __init__(self, fetches: Mapping[str, Any], output_dir: str) -> None:
        self.fetches = fetches
        folder = os.path.join(output_dir, "eval_results")
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + ".npy")

    def before_run(self, run_context: Any) -> Any:
        return V1.train.SessionRunArgs(self.fetches)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        with open(self.path, "ab") as file:
            np.save(file, run_values.results)


# The rate for the steps below each bound, then the last rate: the step schedule of the model below.
RATE_SCHEDULE = ((40000, 0.1), (60000, 0.01), (80000, 0.001))
LAST_RATE = 0.0001


class FedRateHook(V1.train.SessionRunHook):
    """Feeds the learning rate in every step's `SessionRunArgs`, chosen from the global step.

    Modelled on the `_LearningRateSetterHook` of tensorflow/models' TF1 ResNet
    (`research/resnet/resnet_main.py`): the model holds `global_step` and its rate tensor
    `lrn_rate` (here, by name); the hook starts at 0.1, fetches the global step and feeds the rate,
    and after each step picks the next step's rate from `RATE_SCHEDULE`.
    """

    def __init__(self, global_step: str, rate: str) -> None:
        self.global_step = global_step
        self.rate_tensor = rate

    def begin(self) -> None:
        self.rate = RATE_SCHEDULE[0][1]

    def before_run(self, run_context: Any) -> Any:
        return V1.train.SessionRunArgs(self.global_step, feed_dict={self.rate_tensor: self.rate})

    def after_run(self, run_context: Any, run_values: Any) -> None:
        step = run_values.results
        self.rate = next((rate for bound, rate in RATE_SCHEDULE if step < bound), LAST_RATE)


class ScopedRestoreHook(V1.train.SessionRunHook):
    """Warm-starts variables from a checkpoint in `begin()`, mapping one scope's names to another's.

    Modelled on tensor2tensor's `RestoreHook`: the variables are tf-slim's
    `get_variables_to_restore(include, exclude)` (TF1's `tf.contrib.framework`; imported from the
    PyPI package tf-slim); a variable named `<new_model_scope><name>:0` is restored from the
    checkpoint's `<name>` where `<name>` starts with `old_model_scope`, by
    `tf.compat.v1.train.init_from_checkpoint`, so the restore happens when the session is made.
    """

    def __init__(
        self,
        checkpoint_path: str,
        new_model_scope: str = "",
        old_model_scope: str = "",
        include: list[str] | None = None,
        exclude: list[str] | None = None,
    ) -> None:
        self.checkpoint_path = checkpoint_path
        self.new_model_scope = new_model_scope
        self.old_model_scope = old_model_scope
        self.include = include
        self.exclude = exclude

    def begin(self) -> None:
        assignment_map = {}
        for variable in get_variables_to_restore(include=self.include, exclude=self.exclude):
            if not variable.name.startswith(self.new_model_scope):
                continue
            name = variable.name[len(self.new_model_scope) :].split(":")[0]
            if name.startswith(self.old_model_scope):
                assignment_map[name] = variable
        V1.logging.info("restoring %d variables from checkpoint %s", len(assignment_map), self.checkpoint_path)
        V1.train.init_from_checkpoint(self.checkpoint_path, assignment_map)


COUNTERS = "counters"  # the graph collection a model_fn registered its counters in


def register_counter(name: str, tensor: Any) -> Any:
    """Adds `tensor` (cast to int64) to a running total at every run of the returned op, and puts
    that op in the `COUNTERS` collection for `CounterRatesHook`.

    Modelled on OpenNMT-tf 1.x's `add_counter`, called in a `model_fn`: the total is a
    non-trainable variable named `<name>_init`, and the op `<name>`.
    """
    increment = tf.cast(tensor, tf.int64)
    total = V1.Variable(0, name=f"{name}_init", trainable=False, dtype=tf.int64)
    counter = V1.assign_add(total, increment, name=name)
    V1.add_to_collection(COUNTERS, counter)
    return counter


class CounterRatesHook(V1.train.SessionRunHook):
    """Logs how fast each registered counter grows, per second, every `every_n_steps` global steps.

    Modelled on OpenNMT-tf 1.x's `CountersHook`: in `begin()` it takes the `COUNTERS` collection (or
    the `counters` given) and does nothing if it is empty; each step it fetches the counters and the
    global step. A `SecondOrStepTimer` on the global step decides when to report; the first report
    only keeps the counts, each later one logs `<counter op name>: <rate>` (and writes it to a
    summary writer, if there is one) for the time since the report before.
    """

    def __init__(
        self,
        every_n_steps: int | None = 100,
        every_n_secs: float | None = None,
        output_dir: str | None = None,
        counters: list[Any] | None = None,
    ) -> None:
        if (every_n_steps is None) == (every_n_secs is None):
            raise ValueError("CounterRatesHook takes one of every_n_steps and every_n_secs.")
        self.timer = V1.train.SecondOrStepTimer(every_steps=every_n_steps, every_secs=every_n_secs)
        self.output_dir = output_dir
        self.counters = counters

    def begin(self) -> None:
        if self.counters is None:
            self.counters = V1.get_collection(COUNTERS)
        if not self.counters:
            return
        self.writer = V1.summary.FileWriterCache.get(self.output_dir) if self.output_dir else None
        self.previous: list[Any] = [None] * len(self.counters)
        self.global_step = V1.train.get_global_step()
        if self.global_step is None:
            raise RuntimeError("CounterRatesHook needs a global step.")

    def before_run(self, run_context: Any) -> Any:
        if not self.counters:
            return None
        return V1.train.SessionRunArgs([self.counters, self.global_step])

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if not self.counters:
            return
        counts, step = run_values.results
        if not self.timer.should_trigger_for_step(step):
            return
        seconds, _ = self.timer.update_last_triggered_step(step)
        if seconds is None:  # the first report: nothing to compare with yet
            return
        for index, (counter, count) in enumerate(zip(self.counters, counts, strict=True)):
            if self.previous[index] is not None:
                name = counter.name.split(":")[0]
                rate = (count - self.previous[index]) / seconds
                if self.writer is not None:
                    self.writer.add_summary(V1.Summary(value=[V1.Summary.Value(tag=name, simple_value=rate)]), step)
                V1.logging.info("%s: %g", name, rate)
            self.previous[index] = count


class VariableStatisticsHook(V1.train.SessionRunHook):
    """Logs, once the session exists, each global variable's mean norm and its number of zero rows.

    Modelled on criteo/deepr's `LogVariablesInitHook`: in `after_create_session` it reads every
    global variable with `session.run`, leaving out those whose lower-cased name holds one of
    `excluded` (optimizer slots, the global step, ...) or, when `included` is given, none of it.
    For a matrix (or more) the norm is the mean of the L2 norms of its rows (over the last axis)
    and a zero row is one whose entries sum to 0; for a vector, the mean absolute value and the zero
    entries. Partitions of one variable (`.../part_0`, `.../part_1`) are reported as one: norms
    averaged, zeros added up. Each is logged as `<name>_init_average_norm = <value>` and
    `<name>_init_num_zeros = <value>` (norms first), on the `deepr` logger.
    """

    def __init__(
        self,
        included: tuple[str, ...] | None = None,
        excluded: tuple[str, ...] | None = ("adam", "beta", "stopping", "step"),
    ) -> None:
        self.included = included
        self.excluded = excluded

    def _wanted(self, name: str) -> bool:
        name = name.lower()
        if self.included is not None and not any(part in name for part in self.included):
            return False
        return self.excluded is None or not any(part in name for part in self.excluded)

    def after_create_session(self, session: Any, coord: Any) -> None:
        norms: dict[str, list[float]] = {}
        zeros: dict[str, list[int]] = {}
        for variable in V1.global_variables():
            if not self._wanted(variable.name):
                continue
            value = session.run(variable)
            # The variable's name without its partition scopes and its ":0".
            name = "/".join(p for p in variable.name.split("/") if not p.startswith("part")).split(":")[0]
            if value.ndim > 1:
                norm = float(np.mean(np.linalg.norm(value, axis=-1)))
                zero = int(np.count_nonzero(np.sum(value, axis=tuple(range(1, value.ndim))) == 0))
            else:
                norm = float(np.mean(np.abs(value)))
                zero = int(np.count_nonzero(value == 0))
            norms.setdefault(f"{name}_init_average_norm", []).append(norm)
            zeros.setdefault(f"{name}_init_num_zeros", []).append(zero)
        for key, values in norms.items():
            DEEPR_LOGGER.info(f"{key} = {np.mean(values)}")
        for key, counts in zeros.items():
            DEEPR_LOGGER.info(f"{key} = {sum(counts)}")


# What this process receives from the root rank in a broadcast, by the variable's op name. A
# variable not named here keeps its own value, which is what the root itself receives. Tests set it.
ROOT_VALUES: dict[str, np.ndarray] = {}


def broadcast_from_root(tensor: Any) -> Any:
    """What a broadcast from the root rank gives this process, without Horovod (not installed: it
    builds native code): the root's value from `ROOT_VALUES`, else the tensor's own."""
    value = ROOT_VALUES.get(tensor.op.name)
    if value is None:
        return tf.identity(tensor)
    return tf.constant(value, dtype=tensor.dtype.base_dtype)


class BroadcastVariablesHook(V1.train.SessionRunHook):
    """Sets every global variable to the root rank's value once the session exists.

    Modelled on Horovod's TF1 `BroadcastGlobalVariablesHook`: in `begin()` it builds, once per
    graph, one op grouping an `assign` of the broadcast value to each of
    `tf.compat.v1.global_variables()` (on `device`), and runs it in `after_create_session`, after
    any restore, so that every worker starts from the root's weights. The broadcast here is
    `broadcast_from_root`.
    """

    def __init__(self, root_rank: int = 0, device: str = "") -> None:
        self.root_rank = root_rank  # the rank whose values every process takes: ROOT_VALUES here
        self.device = device
        self.op: Any = None

    def begin(self) -> None:
        if self.op is None or self.op.graph is not V1.get_default_graph():
            with tf.device(self.device):
                assigns = [variable.assign(broadcast_from_root(variable)) for variable in V1.global_variables()]
                self.op = tf.group(*assigns)

    def after_create_session(self, session: Any, coord: Any) -> None:
        session.run(self.op)


class StepMetricsHook(V1.train.SessionRunHook):
    """Keeps, at every step, a model's losses and rate fetched by their TF1 names, and the throughput.

    Modelled on the `TrainingLoggingHook` of NVIDIA/DeepLearningExamples' TF1 ConvNets, which a
    names map serves under Keras: each step it fetches the global step and the tensors
    `cross_entropy_loss_ref:0`, `l2_loss_ref:0`, `total_loss_ref:0` and `learning_rate_ref:0`; after
    `warmup_steps` steps it records them every `logging_steps` steps, as floats, with the images
    per second, under `(epoch, global step)`, and at the last step of each epoch the four values
    under `(epoch,)`. `logged` holds what NVIDIA's dllogger would have been given (not installed:
    not on PyPI), as `(step, values)`.
    """

    NAMES = ("cross_entropy_loss_ref:0", "l2_loss_ref:0", "total_loss_ref:0", "learning_rate_ref:0")
    KEYS = ("cross_entropy", "l2_loss", "total_loss", "learning_rate")

    def __init__(self, global_batch_size: int, steps_per_epoch: int, warmup_steps: int = 20, logging_steps: int = 1):
        self.global_batch_size = global_batch_size
        self.steps_per_epoch = steps_per_epoch
        self.warmup_steps = warmup_steps
        self.logging_steps = logging_steps
        self.steps_run = 0
        self.throughputs: list[float] = []
        self.logged: list[tuple[tuple[int, ...], dict[str, float]]] = []

    def before_run(self, run_context: Any) -> Any:
        self._started = time.time()
        return V1.train.SessionRunArgs([V1.train.get_global_step(), *self.NAMES])

    def after_run(self, run_context: Any, run_values: Any) -> None:
        step, *values = run_values.results
        metrics = dict(zip(self.KEYS, (float(v) for v in values), strict=True))
        epoch = int(step // self.steps_per_epoch)
        if self.steps_run >= self.warmup_steps:
            throughput = self.global_batch_size / (time.time() - self._started)
            self.throughputs.append(throughput)
            if self.steps_run % self.logging_steps == 0:
                self.logged.append(((epoch, int(step)), {"imgs_per_sec": throughput, **metrics}))
        self.steps_run += 1
        if (step + 1) % self.steps_per_epoch == 0:  # the epoch's last step
            self.logged.append(((epoch,), metrics))


class SignalStopHook(V1.train.SessionRunHook):
    """Stops every worker once one of them has received SIGUSR1 or SIGTERM, checked every `sync_freq` steps.

    Modelled on the `TrainingPartitionHook` of NVIDIA/DeepLearningExamples' TF1 ConvNets (its
    Horovod path): the constructor installs the signal handlers; `begin()` builds a placeholder and
    the sum of it over the workers (one process here: the placeholder's own value, as Horovod's
    `allreduce` would give); every `sync_freq` steps the hook feeds 1 if this worker had a signal,
    else 0, fetches the sum, and asks to stop when it is above 0.
    """

    def __init__(self, sync_freq: int = 10) -> None:
        self.signal_received = False
        self.sync_freq = sync_freq
        self.global_step = 0
        for signum in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signal_received = True

    def begin(self) -> None:
        with tf.device("/cpu:0"):
            self.received = V1.placeholder(tf.int32, shape=())
            self.received_anywhere = tf.identity(self.received, name="signal_sum_over_workers")

    def before_run(self, run_context: Any) -> Any:
        if self.global_step % self.sync_freq == 0:
            return V1.train.SessionRunArgs(
                [V1.train.get_global_step(), self.received_anywhere],
                feed_dict={self.received: int(self.signal_received)},
            )
        return V1.train.SessionRunArgs([V1.train.get_global_step()])

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.global_step = run_values.results[0] + 1
        if len(run_values.results) == 2:
            if run_values.results[1] > 0:
                run_context.request_stop()
        elif self.signal_received:
            run_context.request_stop()


def plateaued(steps: list[int], values: list[float], num_steps: int, delta: float, decrease: bool) -> bool:
    """Whether a metric has moved less than `delta` (down if `decrease`, else up) over at least its
    last `num_steps` steps: every value since the last one recorded `num_steps` or more steps before
    the newest is within `delta` of that one."""
    if len(steps) < 2:
        return False
    old_enough = [index for index, step in enumerate(steps) if step <= steps[-1] - num_steps]
    if not old_enough:
        return False
    start = old_enough[-1]
    sign = 1.0 if decrease else -1.0
    return all(sign * (values[start] - value) < delta for value in values[start:])


class OpOnPlateauHook(V1.train.SessionRunHook):
    """Runs `plateau_op` once a scalar summary read back from event files has stopped improving.

    Modelled on tensor2tensor's `PlateauOpHook` (a `MetricsBasedHook`): in `after_create_session`
    it notes the global step; every `every_n_steps` global steps from there it reloads the scalars
    tagged `tag` from the event files in `events_dir` (written by an evaluation, say) and, if their
    newest step is new to it and the metric has plateaued (`plateaued`), adds `plateau_op` to the
    next step's fetches. With `only_once`, that happens at most once.
    """

    def __init__(
        self,
        events_dir: str,
        tag: str,
        plateau_op: Any,
        num_plateau_steps: int = 1000,
        plateau_delta: float = 0.1,
        plateau_decrease: bool = True,
        every_n_steps: int = 1000,
        only_once: bool = False,
    ) -> None:
        if num_plateau_steps <= 0:
            raise ValueError(f"OpOnPlateauHook: num_plateau_steps must be positive, got {num_plateau_steps}.")
        self.events = EventAccumulator(events_dir)
        self.tag = tag
        self.plateau_op = plateau_op
        self.num_plateau_steps = num_plateau_steps
        self.plateau_delta = plateau_delta
        self.plateau_decrease = plateau_decrease
        self.every_n_steps = every_n_steps
        self.only_once = only_once
        self.first_step: int | None = None
        self.run_op_next = False
        self.ran = False
        self.newest_seen = 0

    def _active(self) -> bool:
        return not (self.only_once and self.ran)

    def begin(self) -> None:
        self.global_step = V1.train.get_global_step()
        if self.global_step is None:
            raise RuntimeError("OpOnPlateauHook needs a global step.")

    def after_create_session(self, session: Any, coord: Any) -> None:
        if self.first_step is None:
            self.first_step = session.run(self.global_step)

    def before_run(self, run_context: Any) -> Any:
        fetches = [self.global_step]
        if self.run_op_next and self._active():
            fetches.append(self.plateau_op)
            self.run_op_next, self.ran = False, True
        return V1.train.SessionRunArgs(fetches)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        step = run_values.results[0]
        if (step - self.first_step) % self.every_n_steps != 0 or not self._active():
            return
        self.events.Reload()
        if self.tag not in self.events.Tags()["scalars"]:
            return
        scalars = self.events.Scalars(self.tag)
        if not scalars or scalars[-1].step == self.newest_seen:
            return
        self.newest_seen = scalars[-1].step
        steps, values = [s.step for s in scalars], [s.value for s in scalars]
        if plateaued(steps, values, self.num_plateau_steps, self.plateau_delta, self.plateau_decrease):
            self.run_op_next = True
