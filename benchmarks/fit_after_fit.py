"""Many short fits in a row, with and without hooks: wall time, CPU time and the steps that stood still.

A run that outlives its fit through a reference cycle keeps Keras's tf.data
iterator alive until the garbage collector runs; deleting an iterator that has
lived long waits on tf.data's threads, so some later fit stands still for
seconds with the CPU idle. This script shows it as wall time far above CPU time.
The variants alternate, one fit each, in one process, so a pause lands in
whichever fit runs when the collector does: read the totals.

    TF_CPP_MIN_LOG_LEVEL=3 PYTHONPATH=. python benchmarks/fit_after_fit.py --fits 30
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import tensorflow as tf

from hooks2callbacks import HookCallback


def one_fit(hooks: bool, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Builds a small MLP and fits it 2 epochs (14 steps), then evaluates it; returns (wall, CPU) seconds."""
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    callbacks = [HookCallback([tf.compat.v1.train.StopAtStepHook(num_steps=100)])] if hooks else []
    wall, cpu = time.perf_counter(), time.process_time()
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=callbacks)
    model.evaluate(x, y, verbose=0)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=30, help="fits per variant")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x, y = rng.random((200, 8), dtype=np.float32), rng.integers(0, 3, 200)
    totals = {False: [0.0, 0.0, 0], True: [0.0, 0.0, 0]}
    for _ in range(args.fits):
        for hooks in (False, True):
            wall, cpu = one_fit(hooks, x, y)
            total = totals[hooks]
            total[0] += wall
            total[1] += cpu
            total[2] += wall > cpu + 1.0  # a second or more with nothing to do
    for hooks, (wall, cpu, stalls) in totals.items():
        name = "with HookCallback" if hooks else "without hooks    "
        print(f"{name}: {args.fits} fits, wall {wall:.1f} s, CPU {cpu:.1f} s, fits that stood still >1 s: {stalls}")
    wall, cpu = (sum(total[i] for total in totals.values()) for i in (0, 1))
    print(f"all fits: wall {wall:.1f} s, CPU {cpu:.1f} s (wall/CPU {wall / cpu:.2f})")
    print(f"wall ratio, with/without hooks: {totals[True][0] / totals[False][0]:.2f}")


if __name__ == "__main__":
    main()
