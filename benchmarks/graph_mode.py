"""Per-step cost of the four stock hooks in TF1 graph mode (tf_keras under `disable_eager_execution()`).

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/graph_mode.py --rounds 20 --steps 200

Variants: `bare` (tf_keras's graph-mode `fit`, no callback) and `hooked` (the same `fit`
with `HookCallback` of `_common.stock_hooks`: StopAtStepHook, LoggingTensorHook,
NanTensorHook and StepCounterHook, as in `overhead.py`). tf_keras's v1 loop holds its step function for
the whole `fit`, so variants cannot take turns inside one `fit` (as `interleaved.py`
does); they take turns of one `fit` of `--steps` batches each, the order alternating
every round, on one model (the benchmarks' MLP, with the legacy Adam graph mode needs).
A step's time is from one `on_train_batch_begin` of a timing callback (listed first)
to the next; the first `--settle` steps of each `fit` are left out (its `begin()` and
the caches). Printed: each variant's median µs/step, and the median of the per-round
ratios hooked/bare with its interquartile range.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import _common  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.compat.v1.disable_eager_execution()

import tf_keras  # noqa: E402

from hooks2callbacks import HookCallback  # noqa: E402


class Timer(tf_keras.callbacks.Callback):
    """The time of each step: from one batch begin to the next (the last to train end)."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: list[float] = []

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        self.stamps.append(time.perf_counter())

    def on_train_end(self, logs: object = None) -> None:
        self.stamps.append(time.perf_counter())


def graph_mlp(widths: tuple[int, ...]) -> tf_keras.Model:
    tf.compat.v1.set_random_seed(_common.SEED)
    layers = [tf_keras.Input((widths[0],))]
    layers += [tf_keras.layers.Dense(w, activation="relu") for w in widths[1:-1]]
    layers += [tf_keras.layers.Dense(widths[-1])]
    model = tf_keras.Sequential(layers)
    model.compile(
        optimizer=tf_keras.optimizers.legacy.Adam(1e-3),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="small", choices=sorted(_common.MODELS))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--settle", type=int, default=10)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    widths = _common.MODELS[args.model]
    x, y = _common.synthetic_arrays(widths)
    n = min(len(x), args.steps * _common.BATCH)
    x, y = x[:n], y[:n]
    model = graph_mlp(widths)
    directory = tempfile.mkdtemp()
    model.fit(x, y, batch_size=_common.BATCH, epochs=1, verbose=0)  # builds the graph's functions
    steps: dict[str, list[float]] = {"bare": [], "hooked": []}
    ratios: list[float] = []
    for round_index in range(args.rounds):
        order = ("bare", "hooked") if round_index % 2 == 0 else ("hooked", "bare")
        medians = {}
        for variant in order:
            timer = Timer()
            callbacks: list[object] = [timer]
            if variant == "hooked":
                callbacks.append(HookCallback(_common.stock_hooks(directory, loss="loss:0")))
            model.fit(x, y, batch_size=_common.BATCH, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
            times = [b - a for a, b in zip(timer.stamps, timer.stamps[1:], strict=False)][args.settle :]
            steps[variant].extend(times)
            medians[variant] = statistics.median(times)
        ratios.append(medians["hooked"] / medians["bare"])
    quartiles = statistics.quantiles(ratios, n=4)
    figures = {
        "model": args.model,
        "rounds": args.rounds,
        "steps": args.steps,
        "bare_us": round(statistics.median(steps["bare"]) * 1e6, 1),
        "hooked_us": round(statistics.median(steps["hooked"]) * 1e6, 1),
        "ratio": round(statistics.median(ratios), 3),
        "ratio_iqr": [round(quartiles[0], 3), round(quartiles[2], 3)],
        "machine": _common.machine_info(),
    }
    print(json.dumps(figures))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(figures, file, indent=2)


if __name__ == "__main__":
    main()
