"""The cost of `check_migration`: 100 train steps of a small MNIST-sized model, both sides, compared.

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/check_migration.py [--steps 100] [--repeats 3] [--no-per-step]

The model is a TF1 `model_fn` of 784 inputs (28x28), a 128-unit ReLU layer and
10 classes, with its Keras twin; the data are random images in batches of 32.
The hooks are the ones a migrated Estimator job typically runs: StopAtStepHook,
LoggingTensorHook on the loss every 10 steps, NanTensorHook, CheckpointSaverHook
every 50 steps, StepCounterHook and a SummarySaverHook every 10 steps. Reported:
the wall time of each whole check (graph building, the same start, both runs,
reading the checkpoints, the comparison), the first one apart (it traces Keras's
step), and whether the report was ok. Target (issue 30): under a minute.

With `--real-jobs`, it times instead the checks the tests make of real public
Estimator jobs, run unchanged from PyPI packages (tests/test_public_jobs_*.py:
google-research/bert's run_classifier and run_pretraining, tensorflow/models'
official r1 ResNet on CIFAR-10), and of the jobs
written for this project after public ones (tests/test_real_jobs.py), in train
(8 steps, the job's schedule and warm start) and eval (4 batches), each against the
time of the Keras twin's own `fit` or `evaluate` of the same batches with no hooks,
in the same process (issue 38).

With `--per-step-against DIR`, it times the per-step comparison alone (each of
`--steps` train steps of the MLP above from TF1's state of that step, both sides),
for the package in DIR (another version of it: `git archive <commit> hooks2callbacks
| tar -x -C DIR`) and for this checkout's, in separate processes that take turns
(the order swapped every round) for `--rounds` rounds: on a shared machine a
version timed after the other would take the load of another moment. Reported:
each version's median and, per round, the ratio of this checkout's time to DIR's,
with their median (issue 46: the per-step state kept in memory, against a
checkpoint written and restored per step).
"""

from __future__ import annotations

import argparse
import inspect
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from hooks2callbacks import check_migration
from hooks2callbacks._estimator import EstimatorSpec

V1 = tf.compat.v1


def model_fn(features, labels, mode, params):
    hidden = V1.layers.dense(features, 128, activation=tf.nn.relu, name="dense")
    logits = V1.layers.dense(hidden, 10, name="dense_1")
    loss = tf.identity(V1.losses.sparse_softmax_cross_entropy(labels, logits), name="cross_entropy")
    train_op = V1.train.GradientDescentOptimizer(0.05).minimize(loss, V1.train.get_global_step())
    return EstimatorSpec(mode, loss=loss, train_op=train_op)


def keras_model() -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(128, activation="relu", name="dense"),
            keras.layers.Dense(10, name="dense_1"),
        ]
    )
    model.compile(keras.optimizers.SGD(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def hooks(steps: int):
    def make():
        summary = V1.summary.scalar("loss", V1.get_default_graph().get_tensor_by_name("cross_entropy:0"))
        return [
            V1.train.StopAtStepHook(last_step=steps),
            V1.train.LoggingTensorHook({"loss": "cross_entropy:0"}, every_n_iter=10),
            V1.train.NanTensorHook("cross_entropy:0"),
            V1.train.CheckpointSaverHook("model_dir", save_steps=50),
            V1.train.StepCounterHook(every_n_steps=10, output_dir="model_dir"),
            V1.train.SummarySaverHook(save_steps=10, output_dir="model_dir", summary_op=summary),
        ]

    return make


def real_job_checks() -> dict[str, tuple[Any, Any, Any]]:
    """Each real job's check as the tests make it: `{name: (check(directory, mode), twin(), data())}`."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:0] = [os.path.join(root, "tests"), os.path.join(root, "tests", "estimator_era")]
    # The tests' jobs and twins, as the tests run them.
    import test_public_jobs_bert as bert  # noqa: PLC0415
    import test_public_jobs_resnet as resnet  # noqa: PLC0415
    import test_real_jobs as shaped  # noqa: PLC0415

    def seeds():
        return shaped.types.SimpleNamespace(seed=None, seed2=None)

    # name: (check(directory, mode), the twin, its data)
    jobs = {
        "run_classifier (bert-tensorflow 1.0.4)": (
            bert.check_classifier,
            lambda: bert.bert_twin(seeds()),
            lambda: bert.data(shaped.BATCH * 4),
        ),
        "run_pretraining (bert-tensorflow 1.0.4)": (
            bert.check_pretraining,
            bert.pretraining_twin,
            lambda: bert.pretraining_data(shaped.BATCH * 4),
        ),
        "official r1 ResNet-8 (tf-models-official 2.1.0.dev2)": (
            resnet.check_resnet,
            resnet.resnet_twin,
            lambda: resnet.cifar_data(resnet.BATCH * 4),
        ),
        "bert_like (tests/estimator_era/jobs)": (
            shaped.check_bert,
            lambda: shaped.bert_twin(seeds()),
            lambda: shaped.bert_like.data(shaped.BATCH * 4),
        ),
        "mnist_like (tests/estimator_era/jobs)": (
            shaped.check_mnist,
            lambda: shaped.mnist_twin(seeds()),
            lambda: shaped.mnist_like.data(shaped.BATCH * 4),
        ),
    }
    return jobs


def real_jobs(repeats: int) -> None:
    """Times each real job's check, and its Keras twin's fit/evaluate alone."""
    jobs = real_job_checks()
    import test_real_jobs as shaped  # noqa: PLC0415  (on sys.path now: the tests' batch size and steps)

    for name, (check, make, data) in jobs.items():
        for mode in ("train", "eval"):
            for _ in range(repeats):
                with tempfile.TemporaryDirectory() as directory:
                    start = time.perf_counter()
                    report = check(pathlib.Path(directory), mode)
                    took = time.perf_counter() - start
                model = make()
                x, y = data()
                start = time.perf_counter()
                if mode == "train":
                    model.fit(x, y, batch_size=shaped.BATCH, steps_per_epoch=shaped.STEPS, epochs=1, verbose=0)
                else:
                    model.evaluate(x, y, batch_size=shaped.BATCH, verbose=0)
                bare = time.perf_counter() - start
                print(
                    f"{name} {mode}: check {took:.1f} s (session runs {report.steps}, ok={report.ok}); "
                    f"the twin alone {bare:.1f} s",
                    flush=True,
                )


def per_step_once(steps: int) -> float:
    """Seconds of one per-step comparison of `steps` steps of the MLP, after one of 2 steps (tracing)."""
    # The version under test is the one first on sys.path (PYTHONPATH): its private stages, called
    # as check_migration calls them.
    from hooks2callbacks._tf1_restore import restore_tf1_checkpoint  # noqa: PLC0415
    from hooks2callbacks.migration._compare import _Compare  # noqa: PLC0415
    from hooks2callbacks.migration._data import _batches  # noqa: PLC0415
    from hooks2callbacks.migration._steps import per_step  # noqa: PLC0415
    from hooks2callbacks.migration._tf1 import _Tf1Run  # noqa: PLC0415

    rng = np.random.default_rng(0)
    x = rng.random((steps * 32, 784), dtype=np.float32)
    y = rng.integers(0, 10, steps * 32).astype("int64")
    batches, _ = _batches((x, y), steps, 32, "train")
    model = keras_model()
    took = 0.0
    with tempfile.TemporaryDirectory() as work:
        prefix = _Tf1Run(model_fn, batches, "train", {}).save_initial(work)
        restore_tf1_checkpoint(model, prefix)
        for count in (2, steps):
            arguments = {
                "tf1_run": _Tf1Run(model_fn, batches, "train", {}),
                "keras_model": model,
                "prefix": prefix,
                "steps": count,
                "assignment_map": None,
                "compare": _Compare(1e-5, 1e-6),
            }
            if "work" in inspect.signature(per_step).parameters:  # the version that wrote checkpoints
                arguments["work"] = work
            start = time.perf_counter()
            found, compared = per_step(**arguments)
            took = time.perf_counter() - start
            assert compared == count and not found, (compared, found)
    return took


def per_step_against(reference: str, steps: int, rounds: int) -> None:
    """Runs `per_step_once` for the package in `reference` and this checkout's, taking turns."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    versions = {"before": os.path.abspath(reference), "after": root}
    times: dict[str, list[float]] = {"before": [], "after": []}
    for round_ in range(rounds):
        order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
        for name in order:
            env = {**os.environ, "PYTHONPATH": versions[name], "TF_CPP_MIN_LOG_LEVEL": "3"}
            command = [sys.executable, os.path.abspath(__file__), "--per-step-once", "--steps", str(steps)]
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
            times[name].append(float(out.split("PER_STEP ")[1].split()[0]))
        ratio = times["after"][-1] / times["before"][-1]
        print(
            f"round {round_}: before {times['before'][-1]:.2f} s, after {times['after'][-1]:.2f} s, "
            f"after/before {ratio:.3f}",
            flush=True,
        )
    ratios = np.array(times["after"]) / np.array(times["before"])
    print(
        f"per-step comparison of {steps} steps: before median {np.median(times['before']):.2f} s, after median "
        f"{np.median(times['after']):.2f} s; after/before per round: median {np.median(ratios):.3f} "
        f"(min {ratios.min():.3f}, max {ratios.max():.3f}, {rounds} rounds)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--real-jobs", action="store_true", help="time the real jobs' checks instead")
    parser.add_argument("--no-per-step", action="store_true", help="skip the per-step comparison")
    parser.add_argument("--per-step-against", metavar="DIR", help="time the per-step comparison against DIR's")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --per-step-against")
    parser.add_argument("--per-step-once", action="store_true", help=argparse.SUPPRESS)  # one turn of it
    args = parser.parse_args()
    if args.per_step_once:
        print(f"PER_STEP {per_step_once(args.steps)}")
        return
    if args.per_step_against:
        per_step_against(args.per_step_against, args.steps, args.rounds)
        return
    if args.real_jobs:
        real_jobs(args.repeats)
        return
    rng = np.random.default_rng(0)
    x = rng.random((args.steps * 32, 784), dtype=np.float32)
    y = rng.integers(0, 10, args.steps * 32).astype("int64")
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        report = check_migration(
            model_fn,
            keras_model(),
            hooks(args.steps),
            (x, y),
            steps=args.steps,
            names={"cross_entropy": "loss"},
            per_step=not args.no_per_step,
        )
        times.append(time.perf_counter() - start)
        print(f"check of {report.steps} session runs: {times[-1]:.1f} s, ok={report.ok}", flush=True)
        if not report.ok:
            print(report)
    later = times[1:] or times
    print(f"first {times[0]:.1f} s; later: median {np.median(later):.1f} s (of {len(later)})")


if __name__ == "__main__":
    main()
