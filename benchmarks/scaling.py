"""Does the adapter's per-step cost grow with the epoch or with the number of log keys?

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/scaling.py --epochs 20 --steps 100

The small MLP is compiled once with 2 log keys (loss, accuracy) and once with
50 (48 more accuracy metrics under other names). Each gets, in turn, the four
stock hooks of `overhead.py` through one HookCallback ("adapted"), the same
hooks called by a plain callback with no adapter ("direct"), and `overhead.py`'s
hand-written callback doing the same work ("manual", the control). `overhead.py`'s
timing markers measure the time spent inside the callbacks between them, per epoch, so Keras's own step (which the extra
metrics slow down) is left out. The four runs alternate block by block of
epochs in one process, so drift hits all alike.

It prints the median in-callback µs/step of the first and of the last quarter
of the epochs for each run, the ratio last/first, and the ratio 50 keys / 2
keys for each: a bigger Keras step leaves the CPU's caches colder for any
callback, so direct and manual are the baselines that adapted is compared
against.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import statistics
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402
import keras  # noqa: E402
from overhead import DirectHooksCallback, ManualCallback, StartMarker, StopMarker  # noqa: E402

from hooks2callbacks import HookCallback  # noqa: E402

KINDS = ("adapted", "direct", "manual")


class EpochStopMarker(StopMarker):
    """The stop marker, also noting the in-callback seconds and steps of each epoch."""

    def on_train_begin(self, logs: Any = None) -> None:
        super().on_train_begin(logs)
        self.epochs: list[tuple[float, int]] = []
        self._mark = (0.0, 0)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        seconds, steps = self.in_callbacks - self._mark[0], self.n - self._mark[1]
        steps -= 0 if self.epochs else 1  # the stop marker leaves the first step out (hooks begin there)
        self.epochs.append((seconds, steps))
        self._mark = (self.in_callbacks, self.n)


def build(n_keys: int, kind: str, output_dir: str) -> tuple[Any, list[Any], EpochStopMarker]:
    widths = _common.MODELS["small"]
    model = _common.keras_mlp(widths)
    extra = [keras.metrics.SparseCategoricalAccuracy(name=f"acc_{i}") for i in range(n_keys - 2)]
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy", *extra],
    )
    start = StartMarker()
    stop = EpochStopMarker(start)
    under_test = {
        "adapted": lambda: HookCallback(_common.stock_hooks(output_dir)),
        "direct": lambda: DirectHooksCallback(output_dir),
        "manual": lambda: ManualCallback(output_dir),
    }[kind]()
    callbacks = [start, under_test, stop]
    return model, callbacks, stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=20, help="epochs per model (in blocks of --block)")
    parser.add_argument("--steps", type=int, default=100, help="steps per epoch")
    parser.add_argument("--block", type=int, default=5, help="epochs per fit call; the models alternate per block")
    args = parser.parse_args(argv)

    dataset = _common.synthetic_dataset(_common.MODELS["small"])
    per_epoch: dict[tuple[str, int], list[float]] = {(kind, keys): [] for kind in KINDS for keys in (2, 50)}
    with tempfile.TemporaryDirectory() as output_dir:
        runs = {run: build(run[1], run[0], os.path.join(output_dir, f"{run[0]}{run[1]}")) for run in per_epoch}
        for model, callbacks, _ in runs.values():  # warm-up: trace the step functions
            model.fit(dataset, epochs=1, steps_per_epoch=args.steps, verbose=0, shuffle=False, callbacks=callbacks)
        done = 0
        while done < args.epochs:
            block = min(args.block, args.epochs - done)
            for run, (model, callbacks, stop) in runs.items():
                # One fit of `block` epochs continues the global step across epochs.
                model.fit(
                    dataset,
                    initial_epoch=done,
                    epochs=done + block,
                    steps_per_epoch=args.steps,
                    verbose=0,
                    shuffle=False,
                    callbacks=callbacks,
                )
                per_epoch[run] += [seconds / steps * 1e6 for seconds, steps in stop.epochs]
            done += block

    quarter = max(1, args.epochs // 4)
    print(f"in-callback µs/step, {args.epochs} epochs x {args.steps} steps\n")
    print("| callback | log keys | first quarter of epochs | last quarter | last/first |")
    print("|---|---:|---:|---:|---:|")
    medians = {}
    for (kind, keys), values in per_epoch.items():
        first, last = statistics.median(values[:quarter]), statistics.median(values[-quarter:])
        medians[kind, keys] = statistics.median(values)
        print(f"| {kind} | {keys} | {first:.1f} | {last:.1f} | {last / first:.3f} |")
    print()
    for kind in KINDS:
        print(f"{kind}: all epochs, 50 keys / 2 keys = {medians[kind, 50] / medians[kind, 2]:.3f}")
    print(f"machine: {_common.python_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
