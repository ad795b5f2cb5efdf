"""Soak test: one long `fit` with the four stock hooks through HookCallback; looks for leaks.

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/soak.py                 # 100000 steps
    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/soak.py --steps 5000 --json soak.json

One `model.fit(dataset.repeat(), epochs=1, steps_per_epoch=--steps)` runs the
small MLP with StopAtStepHook(last_step=10**9), LoggingTensorHook(["loss",
"accuracy"], every_n_iter=100), NanTensorHook("loss") and
StepCounterHook(every_n_steps=100) through one HookCallback, plus a fifth,
probe hook (last in the list, fetching nothing) whose `after_run` samples,
at step 1 and every `--every` steps:

* RSS: VmRSS from /proc/self/status;
* the adapter graph's op count: `len(get_default_graph().get_operations())`;
  the adapter graph is the default graph during hook calls (the probe checks
  that it is the HookCallback's own graph);
* open file descriptors: the entries of /proc/self/fd.

It prints one table row per sample and exits with status 1 if, after the
warm-up (`--warmup` steps): RSS at the last sample exceeds the first sample
after warm-up by more than `--rss-limit-mb` (default 20), the op count differs
from step 1's at any sample, or the fd count at the last sample exceeds the
first sample after warm-up; or if not every step ran.
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
import tensorflow as tf  # noqa: E402

from hooks2callbacks import HookCallback  # noqa: E402


class ProbeHook(tf.compat.v1.train.SessionRunHook):
    """Samples RSS, the default graph's op count and the fd count every `every` steps."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.callback: HookCallback | None = None
        self.samples: list[dict[str, Any]] = []
        self.steps = 0
        self.foreign_graph = False
        self.t0 = time.perf_counter()

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.steps += 1
        if self.steps != 1 and self.steps % self.every:
            return
        graph = tf.compat.v1.get_default_graph()
        runner = getattr(self.callback, "_runner", None)
        if runner is not None and graph is not runner.graph:
            self.foreign_graph = True
        self.samples.append(
            {
                "step": self.steps,
                "time_s": time.perf_counter() - self.t0,
                "rss_kb": _common.read_rss_kb(),
                "ops": len(graph.get_operations()),
                "fds": _common.count_fds(),
            }
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=None, help="sample every K steps (default steps/50, at least 100)")
    parser.add_argument("--warmup", type=int, default=None, help="steps before the baseline (default steps/10, at most 5000)")
    parser.add_argument("--rss-limit-mb", type=float, default=20.0)
    parser.add_argument("--model", choices=sorted(_common.MODELS), default="small")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    every = args.every or max(100, args.steps // 50)
    warmup = args.warmup if args.warmup is not None else min(5000, args.steps // 10)
    if args.steps < 1 or every < 1 or warmup < 0 or warmup >= args.steps:
        parser.error("need --steps >= 1, --every >= 1 and 0 <= --warmup < --steps")

    widths = _common.MODELS[args.model]
    info = _common.machine_info()
    model = _common.keras_mlp(widths)
    dataset = _common.synthetic_dataset(widths)
    probe = ProbeHook(every)
    with tempfile.TemporaryDirectory(prefix="h2c-soak-") as tmp:
        callback = HookCallback([*_common.stock_hooks(tmp), probe])
        probe.callback = callback
        t0 = time.perf_counter()
        model.fit(dataset, epochs=1, steps_per_epoch=args.steps, verbose=0, shuffle=False, callbacks=[callback])
        wall = time.perf_counter() - t0

    samples = probe.samples
    after = [s for s in samples if s["step"] >= warmup and s["step"] > 1]
    if not after:
        after = samples[-1:]
    base, last = after[0], samples[-1]
    rss_growth_mb = (last["rss_kb"] - base["rss_kb"]) / 1024
    rss_peak_mb = (max(s["rss_kb"] for s in after) - base["rss_kb"]) / 1024
    op_counts = sorted({s["ops"] for s in samples})
    failures = []
    if probe.steps != args.steps:
        failures.append(f"{probe.steps} steps ran, expected {args.steps}")
    if rss_growth_mb > args.rss_limit_mb:
        failures.append(f"RSS grew {rss_growth_mb:.1f} MB after warm-up (limit {args.rss_limit_mb:g} MB)")
    if len(op_counts) != 1:
        failures.append(f"adapter graph op count changed: {op_counts}")
    if last["fds"] > base["fds"]:
        failures.append(f"fd count grew from {base['fds']} to {last['fds']}")
    if probe.foreign_graph:
        failures.append("the default graph during after_run was not the adapter graph")

    print(
        f"Soak: {args.steps} steps of `{args.model}` MLP in one fit, {wall:.1f} s "
        f"({args.steps / wall:.0f} steps/s overall), sampled every {every} steps; "
        f"baseline = first sample at or after step {warmup} (step {base['step']}). "
        f"{info['cpus_usable']} CPUs, Python {info['python']}, TensorFlow {info['tensorflow']}, "
        f"Keras {info['keras']}.\n"
    )
    print("| step | time, s | steps/s since prev | RSS, MB | ΔRSS vs baseline, MB | graph ops | open fds |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    prev = None
    for s in samples:
        rate = "—" if prev is None else f"{(s['step'] - prev['step']) / max(s['time_s'] - prev['time_s'], 1e-9):.0f}"
        delta = f"{(s['rss_kb'] - base['rss_kb']) / 1024:+.1f}" if s["step"] >= base["step"] else "(warm-up)"
        print(f"| {s['step']} | {s['time_s']:.1f} | {rate} | {s['rss_kb'] / 1024:.1f} | {delta} | {s['ops']} | {s['fds']} |")
        prev = s
    print(
        f"\nRSS: {rss_growth_mb:+.1f} MB from baseline to last sample (peak {rss_peak_mb:+.1f} MB); "
        f"graph ops: {op_counts}; fds: {base['fds']} → {last['fds']} "
        f"(max {max(s['fds'] for s in after)})."
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"config": {"steps": args.steps, "every": every, "warmup": warmup, "model": args.model,
                            "rss_limit_mb": args.rss_limit_mb},
                 "machine": info, "wall_s": wall, "samples": samples, "failures": failures},
                f,
                indent=2,
            )
    if failures:
        print("FAIL: " + "; ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
