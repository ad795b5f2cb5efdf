"""Where a check's run-to-run variation came from: the start, not the scheduler (issue 46; not in CI).

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 PYTHONPATH=.:tests python benchmarks/one_start.py [--runs 4]

On the official r1 ResNet job of tests/test_public_jobs_resnet.py (tf-models-official's
`resnet_model_fn`, built as Estimator built it, its graph seed set), in one process:

1. **TF1 from one start**: the job's TF1 graph trains its 8 steps `--runs` times from the same
   initial values, at TensorFlow's default thread counts; a digest of every variable after
   each step. One digest per step means TF1's scheduler gave the same bits every run.
2. **Keras from one start**: the Keras twin trains the same 8 batches `--runs` times from the
   same weights; the same digests.
3. **The start**: the job's graph is built `--runs` times, each time after the process drew from
   Python's `random` (as earlier tests in a pytest worker do), and its initial values digested:
   as `tf.compat.v1.layers` builds it (tf_keras's legacy layers seed an unseeded initializer from
   Python's `random`, whatever the graph seed), and as `check_migration` builds it
   (`migration._tf1._fixed_start`).

Run it beside a busy process (benchmarks/verdict_loop.py `--load`) to see the same under load.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import random
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf
import test_public_jobs_resnet as job

from hooks2callbacks.migration._tf1 import _fixed_start, _legacy_layers

V1 = tf.compat.v1


def digest(values: list[Any]) -> str:
    return hashlib.sha1(b"".join(np.ascontiguousarray(v).tobytes() for v in values)).hexdigest()[:8]


@contextlib.contextmanager
def job_graph(checkpoint: str, seeding: Callable[[], Any]) -> Iterator[tuple[Any, Any, Any, list[Any]]]:
    with tf.Graph().as_default(), _legacy_layers(), seeding():
        V1.train.get_or_create_global_step()
        x = V1.placeholder(tf.float32, [job.BATCH, 32, 32, 3])
        y = V1.placeholder(tf.int32, [job.BATCH])
        spec = job.as_estimator_ran(checkpoint)(x, y, "train", {})
        yield x, y, spec.train_op, V1.global_variables()


def tf1_from_one_start(checkpoint: str, x: Any, y: Any, runs: int) -> list[list[str]]:
    start, digests = None, []
    for _ in range(runs):
        with job_graph(checkpoint, contextlib.nullcontext) as (fx, fy, train_op, variables), V1.Session() as session:
            session.run([V1.global_variables_initializer(), V1.local_variables_initializer()])
            if start is None:
                start = session.run(variables)
            for variable, value in zip(variables, start, strict=True):
                variable.load(value, session)
            steps = []
            for k in range(job.STEPS):
                batch = slice(k * job.BATCH, (k + 1) * job.BATCH)
                session.run(train_op, {fx: x[batch], fy: y[batch]})
                steps.append(digest(session.run(variables)))
        digests.append(steps)
    return digests


def keras_from_one_start(x: Any, y: Any, runs: int) -> list[list[str]]:
    start, digests = None, []
    for _ in range(runs):
        model = job.resnet_twin()
        model.optimizer.build(model.trainable_variables)
        if start is None:
            start = [v.numpy() for v in model.weights]
        for variable, value in zip(model.weights, start, strict=True):
            variable.assign(value)
        steps = []
        for k in range(job.STEPS):
            batch = slice(k * job.BATCH, (k + 1) * job.BATCH)
            model.train_on_batch(x[batch], y[batch])
            steps.append(digest([v.numpy() for v in [*model.weights, *model.optimizer.variables]]))
        digests.append(steps)
    return digests


def starts(checkpoint: str, runs: int, seeding: Callable[[], Any]) -> list[str]:
    found = []
    for run in range(runs):
        for _ in range(run):
            random.random()  # what earlier code in the process drew
        with job_graph(checkpoint, seeding) as (_, _, _, variables), V1.Session() as session:
            session.run([V1.global_variables_initializer(), V1.local_variables_initializer()])
            found.append(digest(session.run(variables)))
    return found


def say(what: str, digests: list[list[str]]) -> None:
    for run, steps in enumerate(digests):
        print(f"{what} run {run}: {' '.join(steps)}")
    distinct = [len({steps[k] for steps in digests}) for k in range(len(digests[0]))]
    print(f"{what}: distinct states per step over {len(digests)} runs: {distinct}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    checkpoint = job.pretrained_checkpoint(tempfile.mkdtemp())
    x, y = job.cifar_data(job.STEPS * job.BATCH)
    say("TF1 from one start", tf1_from_one_start(checkpoint, x, y, args.runs))
    say("Keras from one start", keras_from_one_start(x, y, args.runs))
    for what, seeding in (
        ("as tf.compat.v1.layers builds it", contextlib.nullcontext),
        ("as the check builds it", _fixed_start),
    ):
        found = starts(checkpoint, args.runs, seeding)
        print(f"the start, {what}: {' '.join(found)} ({len(set(found))} distinct over {args.runs} builds)", flush=True)


if __name__ == "__main__":
    main()
