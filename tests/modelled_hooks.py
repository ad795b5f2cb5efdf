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
import math
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.training import training_util
from tf_slim.ops.variables import get_variables_to_restore

V1 = tf.compat.v1


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


def checkpointed_step(directory: str) -> int:
    """The global step saved in the newest checkpoint of `directory`, or 0 where there is none
    (no checkpoint, or one without a `global_step`), as Estimator read it."""
    path = tf.train.latest_checkpoint(directory)
    if path is None or "global_step" not in dict(tf.train.list_variables(path)):
        return 0
    return int(tf.train.load_variable(path, "global_step"))


class StopAtCheckpointedStepHook(V1.train.SessionRunHook):
    """Stops once the newest checkpoint in `model_dir` holds `last_step` or later.

    Modelled on tensorflow_estimator's `_StopAtCheckpointStepHook` (a worker that may only stop
    when the chief's checkpoint of the last step is on disk): each step it fetches the stale global
    step; from the step whose global step reaches `last_step` on, it reads the step back from the
    newest checkpoint by name, and requests a stop if that is far enough, else waits `wait_secs`.
    """

    def __init__(self, model_dir: str, last_step: int, wait_secs: float = 30) -> None:
        if model_dir is None or last_step is None:
            raise ValueError("StopAtCheckpointedStepHook needs a model_dir and a last_step.")
        self.model_dir = model_dir
        self.last_step = last_step
        self.wait_secs = wait_secs

    def begin(self) -> None:
        self.step_read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        if self.step_read is None:
            raise RuntimeError("StopAtCheckpointedStepHook needs a global step.")

    def before_run(self, run_context: Any) -> Any:
        return V1.train.SessionRunArgs(self.step_read)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if run_values.results + 1 < self.last_step:  # the step just run is results + 1
            return
        if checkpointed_step(self.model_dir) >= self.last_step:
            run_context.request_stop()
        else:
            time.sleep(self.wait_secs)


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
