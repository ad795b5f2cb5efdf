"""Per-step cost of each variant of `overhead.py`, with the variants taking turns in one `fit`.

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/interleaved.py --cycles 1000
    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/interleaved.py --variants bare,manual,adapted --json out.json

Why. On a shared virtual machine the speed of the same step drifts by tens of
percent over fractions of a second (`overhead.py` sees per-round ratios of
0.6–1.8 with rounds of 100 steps), so variants timed one `fit` after another
cannot resolve a cost of 1–3% of a step. Here they take turns of a few dozen
steps, and each variant's steps are compared with the others' of the same
cycle, taken within a fraction of a second.

How. One real `model.fit` of the shared model runs `--cycles` turns of
`--block` steps for every variant. Its only callback is a `Rotator`, which
hands each turn to the next variant (the order rotates by one every cycle, so
that each variant follows each other one equally often). For each step the
Rotator:

  1. sets `model.train_function` to the variant's own: the one Keras made, or
     the one `HookCallback` put there for its batch values (Keras reads the
     attribute at every step);
  2. calls the variant's callbacks' `on_train_batch_begin`, Keras runs the
     step and converts its logs, then the Rotator calls the variant's
     callbacks' `on_train_batch_end`. They see the variant's own steps as
     batches 0, 1, 2, ...

A step's time is `on_train_batch_begin` of the Rotator to the end of its
`on_train_batch_end`: the variant's callbacks, its train function and Keras's
conversion of the logs; "in callbacks" is the part spent in the variant's
callbacks. All variants' `on_train_begin`/`on_train_end` run once, around the
whole fit, and `--warmup` turns each come first.

The first steps of a turn are slower for most variants (the code and data of
the one before it are in the CPU caches): up to about 10 steps for those that
run the TF1 hooks' code or a train function of their own. A variant runs
all the steps of its own `fit` in real use, so the first
`--settle` steps of each turn are left out, and the figures are those of the
rest: the median µs/step of each variant, and for each pair the ratio of the
medians with a 95% interval from a bootstrap over whole cycles. Medians,
because the machine adds a long tail of slow steps (stalls of milliseconds)
that lands on one variant or another at random; the ratio of means is shown
beside them.

What differs from a variant's own `fit`: each variant's callbacks are called at
every k-th turn, so their hooks count fewer steps than the model takes
(LoggingTensorHook logs every 100 of its own calls) and the manual callback's
values from the running means are not the batch values (the work is the same).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import json
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import overhead  # noqa: E402

KERAS_VARIANTS = tuple(v for v in overhead.VARIANTS if v != "tf1")
PAIRS = (
    ("adapted", "bare"),
    ("adapted", "manual"),
    ("idle", "bare"),
    ("weights", "bare"),
    ("adapted", "means"),
    ("means", "bare"),
    ("direct", "manual"),
    ("adapted", "direct"),
    ("manual", "bare"),
    ("kerascall", "bare"),
    ("kerascall", "manual"),
    ("kerascall", "means"),
    ("adapted", "kerascall"),
)


class Rotator(keras.callbacks.Callback):
    """Hands each block of steps of one `fit` to the next variant's callbacks and train function.

    Args:
        groups: Each variant's callbacks.
        cycles: How many turns each variant gets.
        block: Consecutive steps per turn.
    """

    def __init__(self, groups: list[list[Any]], cycles: int, block: int) -> None:
        super().__init__()
        self.groups = groups
        k = len(groups)
        # Cycle c gives the variants their turns in the order c, c+1, ... (mod k).
        self.order = [((c + i) % k, c, j) for c in range(cycles) for i in range(k) for j in range(block)]
        self.times = np.zeros((k, cycles, block))
        self.inside = np.zeros((k, cycles, block))
        self.functions: list[Any] = []
        self.seen = [0] * k

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        for group in self.groups:
            for callback in group:
                callback.set_model(model)

    def set_params(self, params: Any) -> None:
        super().set_params(params)
        for group in self.groups:
            for callback in group:
                callback.set_params(params)

    def on_train_begin(self, logs: Any = None) -> None:
        # Each variant's train function is known after its first batch begin, where
        # HookCallback's hooks begin (and attach the step that gives batch values).
        self.own = self.model.train_function
        self.functions = [None] * len(self.groups)
        for group in self.groups:
            for callback in group:
                callback.on_train_begin(logs)

    def on_train_end(self, logs: Any = None) -> None:
        for group in reversed(self.groups):
            for callback in group:
                callback.on_train_end(logs)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.t0 = time.perf_counter()
        self.current = v, _, _ = self.order[batch]
        self.model.train_function = self.own if self.functions[v] is None else self.functions[v]
        for callback in self.groups[v]:  # a variant's callbacks see its own steps as batches 0, 1, ...
            callback.on_train_batch_begin(self.seen[v], logs)
        if self.functions[v] is None:
            self.functions[v] = self.model.train_function
        self.t1 = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        t2 = time.perf_counter()
        v, cycle, position = self.current
        for callback in self.groups[v]:
            callback.on_train_batch_end(self.seen[v], logs)
        t3 = time.perf_counter()
        self.seen[v] += 1
        self.times[v, cycle, position] = t3 - self.t0
        self.inside[v, cycle, position] = (self.t1 - self.t0) + (t3 - t2)


def run(variants: list[Any], cycles: int, block: int) -> Rotator:
    """One fit in which each variant takes `cycles` turns of `block` steps; returns the Rotator with the times."""
    model, dataset = variants[0].model, variants[0].dataset
    rotator = Rotator([list(v.callbacks[1:-1]) for v in variants], cycles, block)  # without overhead's markers
    k = len(variants)
    model.fit(dataset, epochs=1, steps_per_epoch=k * cycles * block, verbose=0, callbacks=[rotator])
    if rotator.seen != [cycles * block] * k:
        raise RuntimeError(f"steps per variant: {rotator.seen}, expected {cycles * block} each")
    return rotator


def summarize(names: list[str], rotator: Rotator, settle: int) -> dict[str, Any]:
    """Per variant and per pair, over the steps of each turn after its first `settle`."""
    times, inside = rotator.times[:, :, settle:] * 1e6, rotator.inside[:, :, settle:] * 1e6
    rng = np.random.default_rng(0)
    summary: dict[str, Any] = {"variants": {}, "pairs": {}}
    for v, name in enumerate(names):
        summary["variants"][name] = {
            "median_us": float(np.median(times[v])),
            "mean_us": float(times[v].mean()),
            "in_callbacks_median_us": float(np.median(inside[v])),
            "in_callbacks_mean_us": float(inside[v].mean()),
            "by_position_median_us": np.median(rotator.times[v] * 1e6, axis=0).tolist(),
        }
    for a, b in PAIRS:
        if a in names and b in names:
            ta, tb = times[names.index(a)], times[names.index(b)]
            r, low, high = _common.ratio_of_medians(ta, tb, rng)
            summary["pairs"][f"{a}/{b}"] = {
                "ratio_of_medians": r,
                "ci95": [low, high],
                "ratio_of_means": float(ta.mean() / tb.mean()),
            }
    return summary


def markdown(args: argparse.Namespace, names: list[str], info: dict[str, Any], summary: dict[str, Any]) -> str:
    widths = _common.MODELS[args.model]
    lines = [
        f"Model `{args.model}` (MLP {'→'.join(map(str, widths))}, batch {_common.BATCH}), {len(names)} variants "
        f"taking turns of {args.block} steps, {args.cycles} turns each (after {args.warmup} warm-up turns); "
        f"the first {args.settle} steps of each turn are left out (see the docstring). CPU only: "
        f"{info['cpus_usable']} of {info['cpu_count']} CPUs usable ({info['cpu_model'] or 'unknown CPU'}), "
        f"Python {info['python']}, TensorFlow {info['tensorflow']}, Keras {info['keras']}, load average "
        f"{info['loadavg'][0]:.2f} at start, {info['loadavg_end'][0]:.2f} at end; git {info['git'] or '?'}, "
        f"hooks2callbacks sources {info['hooks2callbacks_sources']}.",
        "",
        "| variant | µs/step (median) | µs/step (mean) | in callbacks, µs/step (median) | (mean) "
        "| median by position in the turn, µs |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, v in summary["variants"].items():
        positions = " ".join(f"{x:.0f}" for x in v["by_position_median_us"][: args.settle + 3])
        lines.append(
            f"| {name} | {v['median_us']:.0f} | {v['mean_us']:.0f} | {v['in_callbacks_median_us']:.1f} "
            f"| {v['in_callbacks_mean_us']:.1f} | {positions} … |"
        )
    lines += [
        "",
        "| pair | ratio of medians | 95% interval | ratio of means |",
        "|---|---:|---:|---:|",
    ]
    for key, p in summary["pairs"].items():
        low, high = p["ci95"]
        lines.append(f"| {key} | {p['ratio_of_medians']:.3f} | {low:.3f} – {high:.3f} | {p['ratio_of_means']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cycles", type=int, default=1000, help="timed turns per variant")
    parser.add_argument("--block", type=int, default=40, help="consecutive steps per turn")
    parser.add_argument("--settle", type=int, default=10, help="steps at the start of each turn left out")
    parser.add_argument("--warmup", type=int, default=10, help="untimed turns per variant first")
    _common.add_variant_arguments(parser, KERAS_VARIANTS, "write the configuration, per-step times and summary here")
    args = parser.parse_args(argv)
    names, unknown = _common.variant_names(args.variants, KERAS_VARIANTS)
    if unknown or len(names) < 2 or args.cycles < 2 or args.warmup < 1 or not 0 <= args.settle < args.block:
        parser.error(f"bad --variants/--cycles/--block/--settle/--warmup (unknown or not Keras variants: {unknown})")

    info = _common.machine_info()
    with tempfile.TemporaryDirectory(prefix="h2c-bench-") as tmp:
        variants = overhead.build_variants(names, _common.MODELS[args.model], tmp)
        run(variants, args.warmup, args.block)
        rotator = run(variants, args.cycles, args.block)
    info["loadavg_end"] = list(os.getloadavg())
    summary = summarize(names, rotator, args.settle)
    print(markdown(args, names, info, summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "config": vars(args) | {"variants": names},
                    "machine": info,
                    "us_per_step_by_turn": {n: (rotator.times[v] * 1e6).tolist() for v, n in enumerate(names)},
                    "summary": summary,
                },
                f,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
