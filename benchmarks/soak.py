"""Soak test: one long `fit` with the full stock hook stack through HookCallback; looks for leaks.

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/soak.py                 # 100000 steps, full stack
    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/soak.py --steps 5000 --json soak.json
    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/soak.py --stack basic   # the four hooks of overhead.py

One `model.fit(dataset.repeat(), epochs=1, steps_per_epoch=--steps)` runs the
small MLP with one HookCallback. `--stack full` (the default) gives it every
stock `tf.compat.v1.train` hook that HookCallback supports (ProfilerHook and
FeedFnHook are refused by design), built by a hooks factory so that the
summary ops are in the adapter graph from the start:

* StopAtStepHook(last_step=10**9);
* LoggingTensorHook(["loss", "accuracy"], every_n_iter=100);
* NanTensorHook("loss");
* StepCounterHook(every_n_steps=100, output_dir=<tmp>/events);
* CheckpointSaverHook(<tmp>/ckpt, save_steps=--save-steps, default 1000);
  HookCallback keeps the newest 5 checkpoints;
* SummarySaverHook(save_steps=100, output_dir=<tmp>/events), its summary_op
  the merged `tf.compat.v1.summary.scalar`s of `log_tensor("loss")` and
  `log_tensor("accuracy")`;
* FinalOpsHook({"loss": "loss", "accuracy": "accuracy"});
* GlobalStepWaiterHook(wait_until_step=0).

`--stack basic` gives it only the first four, as a plain list: the "adapted"
stack of `overhead.py`, and what this script ran before it had the full stack
(so earlier soak numbers can be reproduced). Either stack
ends with a probe hook (last in the list, fetching nothing) whose `after_run`
samples, at step 1 and every `--every` steps:

* RSS: VmRSS from /proc/self/status;
* the adapter graph's op count: `len(get_default_graph().get_operations())`;
  the adapter graph is the default graph during hook calls (the probe checks
  that it is the HookCallback's own graph);
* open file descriptors: the entries of /proc/self/fd;
* Python threads: `threading.active_count()`;
* the number of files in the checkpoint directory, and of checkpoints there
  (`model.ckpt-<step>.index` files);
* the bytes on disk of the event files in <tmp>/events: what their writers
  have written so far (each writer's thread flushes every 120 s; the end of
  `fit` flushes the rest; observed here: each checkpoint save, an eager
  `tf.train.Checkpoint.write`, also brings the open event files to disk).

After `fit` returns (the writers flushed), it reads the event files back as
records of `tf.compat.v1.Event` and counts the summary values of each tag.

It prints one table row per sample and exits with status 1 if not every step
ran, or if, after the warm-up (`--warmup` steps; the baseline is the first
sample at or after it; by default steps/10, at most 5000, and with the full
stack at least `--save-steps`, since the first checkpoint saved in training
costs a one-time ~8 MB of RSS):

* RSS at the last sample exceeds the baseline by more than `--rss-limit-mb`
  (default 20);
* the op count differs from step 1's at any sample (with the factory the
  summary ops are built before step 1, so they are in step 1's count);
* the fd count or the thread count at the last sample exceeds the baseline's;
* the default graph during the probe's `after_run` was not the adapter graph;
* the event files after `fit` are no bigger than at the baseline, or hold a
  different number of `global_step/sec` values than StepCounterHook's schedule
  gives ((steps - 1) // 100); full stack also: of `loss` and `accuracy` values
  than SummarySaverHook's ((steps - 1) // 100 + 1);
* full stack: a `loss` or `accuracy` summary differs (as float32) from the
  value the hooks saw at its step, or every loss summary equals Keras's running
  mean (hooks see each batch's own values);
* full stack: more than 5 checkpoints at any sample or after `fit`; once 5 are
  kept, the checkpoint directory's file count ever exceeds its count at the
  first such sample; after `fit`, the newest checkpoint is not
  `model.ckpt-<steps>`, or FinalOpsHook got no values.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import collections
import json
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from hooks2callbacks import HookCallback, log_tensor  # noqa: E402
from hooks2callbacks._translate import MAX_TO_KEEP  # noqa: E402  # the checkpoints HookCallback keeps

# What the full stack's hooks are given.
EVERY_N = 100  # LoggingTensorHook, StepCounterHook, SummarySaverHook
_CHECKPOINT_INDEX = re.compile(r"^model\.ckpt-\d+\.index$")


def checkpoint_files(directory: str | None) -> tuple[int, int]:
    """Returns (files, checkpoints) in `directory`: all entries, and `model.ckpt-<n>.index` ones."""
    if directory is None or not os.path.isdir(directory):
        return 0, 0
    names = os.listdir(directory)
    return len(names), sum(1 for name in names if _CHECKPOINT_INDEX.match(name))


def event_bytes(directory: str) -> int:
    """Total size of the event files (`events.out.tfevents.*`) in `directory`."""
    if not os.path.isdir(directory):
        return 0
    return sum(
        os.path.getsize(os.path.join(directory, name))
        for name in os.listdir(directory)
        if name.startswith("events.out.tfevents.")
    )


def tag_values(directory: str) -> dict[str, dict[int, float]]:
    """The summary values of each tag in the event files of `directory`: tag -> {step: value}."""
    values: dict[str, dict[int, float]] = collections.defaultdict(dict)
    for name in sorted(os.listdir(directory)):
        if name.startswith("events.out.tfevents."):
            for record in tf.data.TFRecordDataset(os.path.join(directory, name)):
                event = tf.compat.v1.Event.FromString(record.numpy())
                for value in event.summary.value:
                    values[value.tag][event.step] = value.simple_value
    return values


class ProbeHook(tf.compat.v1.train.SessionRunHook):
    """Samples RSS, op count, fds, threads, checkpoint and event files every `every` steps.

    It fetches nothing, so it gets the step's values as a mapping; at the steps
    SummarySaverHook writes (the first, then every EVERY_N), it keeps the loss and
    accuracy, under the global step their summaries are written at.
    """

    def __init__(self, every: int, events_dir: str, checkpoint_dir: str | None) -> None:
        self.every = every
        self.events_dir = events_dir
        self.checkpoint_dir = checkpoint_dir
        self.callback: HookCallback | None = None
        self.samples: list[dict[str, Any]] = []
        self.steps = 0
        self.foreign_graph = False
        self.t0 = time.perf_counter()
        self.summarized: dict[str, dict[int, float]] = {"loss": {}, "accuracy": {}}

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.steps += 1
        if (self.steps - 1) % EVERY_N == 0:
            for tag, seen in self.summarized.items():
                seen[self.steps] = run_values.results[tag]
        if self.steps != 1 and self.steps % self.every:
            return
        graph = tf.compat.v1.get_default_graph()
        runner = getattr(self.callback, "_runner", None)
        if runner is not None and graph is not runner.graph:
            self.foreign_graph = True
        files, checkpoints = checkpoint_files(self.checkpoint_dir)
        self.samples.append(
            {
                "step": self.steps,
                "time_s": time.perf_counter() - self.t0,
                "rss_kb": _common.read_rss_kb(),
                "ops": len(graph.get_operations()),
                "fds": _common.count_fds(),
                "threads": threading.active_count(),
                "ckpt_files": files,
                "ckpts": checkpoints,
                "event_bytes": event_bytes(self.events_dir),
            }
        )


def basic_stack(probe: ProbeHook) -> list[Any]:
    """The four stock hooks of `overhead.py`'s "adapted" variant, then the probe."""
    return [*_common.stock_hooks(probe.events_dir), probe]


def full_stack(probe: ProbeHook, save_steps: int) -> tuple[Callable[[], list[Any]], list[Any]]:
    """A hooks factory making every supported stock hook, then the probe.

    Returns the factory and a list that holds the hooks of its latest call.
    """
    made: list[Any] = []

    def make_hooks() -> list[Any]:
        train = tf.compat.v1.train
        tf.compat.v1.summary.scalar("loss", log_tensor("loss"))
        tf.compat.v1.summary.scalar("accuracy", log_tensor("accuracy"))
        hooks = [
            *_common.stock_hooks(probe.events_dir),
            train.CheckpointSaverHook(probe.checkpoint_dir, save_steps=save_steps),
            train.SummarySaverHook(
                save_steps=EVERY_N, output_dir=probe.events_dir, summary_op=tf.compat.v1.summary.merge_all()
            ),
            train.FinalOpsHook({"loss": "loss", "accuracy": "accuracy"}),
            train.GlobalStepWaiterHook(wait_until_step=0),
            probe,
        ]
        made[:] = hooks
        return hooks

    return make_hooks, made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument(
        "--stack",
        choices=("full", "basic"),
        default="full",
        help="full: every supported stock hook (default); basic: the four of overhead.py",
    )
    parser.add_argument("--save-steps", type=int, default=1000, help="CheckpointSaverHook's save_steps (full stack)")
    parser.add_argument("--every", type=int, default=None, help="sample every K steps (default steps/50, at least 100)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="steps before the baseline (default steps/10, at most 5000; full stack: at least --save-steps)",
    )
    parser.add_argument("--rss-limit-mb", type=float, default=20.0)
    parser.add_argument("--model", choices=sorted(_common.MODELS), default="small")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    every = args.every or max(100, args.steps // 50)
    warmup = args.warmup
    if warmup is None:
        warmup = min(5000, args.steps // 10)
        if args.stack == "full" and args.save_steps < args.steps:
            # The first checkpoint saved in training (the first with the optimizer's
            # state) costs a one-time ~8 MB of RSS: keep it out of the baseline.
            warmup = max(warmup, args.save_steps)
    if args.steps < 1 or every < 1 or warmup < 0 or warmup >= args.steps or args.save_steps < 1:
        parser.error("need --steps >= 1, --every >= 1, --save-steps >= 1 and 0 <= --warmup < --steps")
    full = args.stack == "full"

    widths = _common.MODELS[args.model]
    info = _common.machine_info()
    model = _common.keras_mlp(widths)
    dataset = _common.synthetic_dataset(widths)
    threads_before = threading.active_count()
    with tempfile.TemporaryDirectory(prefix="h2c-soak-") as tmp:
        events_dir = os.path.join(tmp, "events")
        checkpoint_dir = os.path.join(tmp, "ckpt")
        probe = ProbeHook(every, events_dir, checkpoint_dir if full else None)
        made: list[Any] = []
        if full:
            factory, made = full_stack(probe, args.save_steps)
            callback = HookCallback(factory)
        else:
            callback = HookCallback(basic_stack(probe))
        probe.callback = callback
        # Keras's own logs (running means) at the summary steps, to tell them from the batch values.
        means: dict[int, float] = {}
        keep_means = keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda batch, logs: (
                means.update({batch + 1: logs["loss"]}) if batch % EVERY_N == 0 else None
            )
        )
        t0 = time.perf_counter()
        model.fit(
            dataset, epochs=1, steps_per_epoch=args.steps, verbose=0, shuffle=False, callbacks=[callback, keep_means]
        )
        wall = time.perf_counter() - t0
        # fit has returned: every writer is flushed.
        values = tag_values(events_dir)
        final: dict[str, Any] = {
            "event_bytes": event_bytes(events_dir),
            "tags": {tag: len(v) for tag, v in values.items()},
            "threads": threading.active_count(),
            "fds": _common.count_fds(),
        }
        if full:
            files, checkpoints = checkpoint_files(checkpoint_dir)
            latest = tf.train.latest_checkpoint(checkpoint_dir)
            final_ops = next(h for h in made if isinstance(h, tf.compat.v1.train.FinalOpsHook)).final_ops_values
            final.update(
                ckpt_files=files,
                ckpts=checkpoints,
                ckpt_names=sorted(os.listdir(checkpoint_dir)),
                latest_checkpoint=None if latest is None else os.path.basename(latest),
                ckpt_event_bytes=event_bytes(checkpoint_dir),
                final_ops_values=None if final_ops is None else {k: float(v) for k, v in final_ops.items()},
            )

    samples = probe.samples
    after = [s for s in samples if s["step"] >= warmup and s["step"] > 1]
    if not after:
        after = samples[-1:]
    base, last = after[0], samples[-1]
    rss_growth_mb = (last["rss_kb"] - base["rss_kb"]) / 1024
    rss_peak_mb = (max(s["rss_kb"] for s in after) - base["rss_kb"]) / 1024
    op_counts = sorted({s["ops"] for s in samples})
    expected_rates = (args.steps - 1) // EVERY_N  # StepCounterHook: its first trigger starts the timer
    expected_summaries = (args.steps - 1) // EVERY_N + 1  # SummarySaverHook: step 1, then every EVERY_N
    failures = []
    if probe.steps != args.steps:
        failures.append(f"{probe.steps} steps ran, expected {args.steps}")
    if rss_growth_mb > args.rss_limit_mb:
        failures.append(f"RSS grew {rss_growth_mb:.1f} MB after warm-up (limit {args.rss_limit_mb:g} MB)")
    if op_counts != [samples[0]["ops"]]:
        failures.append(f"adapter graph op count changed from step 1's {samples[0]['ops']}: {op_counts}")
    if last["fds"] > base["fds"]:
        failures.append(f"fd count grew from {base['fds']} to {last['fds']}")
    if last["threads"] > base["threads"]:
        failures.append(f"thread count grew from {base['threads']} to {last['threads']}")
    if probe.foreign_graph:
        failures.append("the default graph during after_run was not the adapter graph")
    if final["event_bytes"] <= base["event_bytes"]:
        failures.append(f"event files did not grow after warm-up: {base['event_bytes']} → {final['event_bytes']} bytes")
    expected_tags = {"global_step/sec": expected_rates}
    if full:
        expected_tags.update(loss=expected_summaries, accuracy=expected_summaries)
    for tag, expected in expected_tags.items():
        if final["tags"].get(tag, 0) != expected:
            failures.append(f"event files hold {final['tags'].get(tag, 0)} {tag!r} values, expected {expected}")
    mismatched = {}
    if full:
        # Each summary holds the batch's own value that the hooks saw at its step (float32).
        for tag, seen in probe.summarized.items():
            written = values.get(tag, {})
            wrong = [s for s, v in seen.items() if s not in written or np.float32(v) != np.float32(written[s])]
            if wrong:
                mismatched[tag] = wrong[:5]
                failures.append(
                    f"{len(wrong)} {tag!r} summaries differ from the values the hooks saw, first at steps {wrong[:5]}"
                )
        loss = probe.summarized["loss"]
        if not any(np.float32(loss[s]) != np.float32(means[s]) for s in loss if s > 1 and s in means):
            failures.append("every loss summary equals Keras's running mean: hooks did not get batch values")
    final["summaries_checked"] = {tag: len(seen) for tag, seen in probe.summarized.items()} if full else {}
    ckpt_bound = None
    if full:
        most = max(max(s["ckpts"] for s in samples), final["ckpts"])
        if most > MAX_TO_KEEP:
            failures.append(f"up to {most} checkpoints kept, expected at most {MAX_TO_KEEP}")
        full_kept = [s for s in samples if s["ckpts"] == MAX_TO_KEEP]
        if full_kept:
            ckpt_bound = full_kept[0]["ckpt_files"]
            grown = [s for s in samples if s["step"] >= full_kept[0]["step"] and s["ckpt_files"] > ckpt_bound]
            if grown or final["ckpt_files"] > ckpt_bound:
                failures.append(
                    f"checkpoint dir grew past its {ckpt_bound} files once {MAX_TO_KEEP} checkpoints were kept: "
                    f"{[s['ckpt_files'] for s in grown] + [final['ckpt_files']]}"
                )
        if final["latest_checkpoint"] != f"model.ckpt-{args.steps}":
            failures.append(f"newest checkpoint is {final['latest_checkpoint']}, expected model.ckpt-{args.steps}")
        if final["final_ops_values"] is None:
            failures.append("FinalOpsHook got no values at end()")

    hooks = "the full stock stack (8 hooks)" if full else "the basic stack (4 stock hooks)"
    print(
        f"Soak: {args.steps} steps of `{args.model}` MLP in one fit with {hooks} and the probe, "
        f"{wall:.1f} s ({args.steps / wall:.0f} steps/s overall), sampled every {every} steps; "
        f"baseline = first sample at or after step {warmup} (step {base['step']}). "
        f"{info['cpus_usable']} CPUs, Python {info['python']}, TensorFlow {info['tensorflow']}, "
        f"Keras {info['keras']}, git {info['git']}.\n"
    )
    print(
        "| step | time, s | steps/s since prev | RSS, MB | ΔRSS vs baseline, MB | graph ops | open fds "
        "| threads | ckpt files (ckpts) | event bytes |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    prev = None
    for s in samples:
        rate = "—" if prev is None else f"{(s['step'] - prev['step']) / max(s['time_s'] - prev['time_s'], 1e-9):.0f}"
        delta = f"{(s['rss_kb'] - base['rss_kb']) / 1024:+.1f}" if s["step"] >= base["step"] else "(warm-up)"
        ckpt = f"{s['ckpt_files']} ({s['ckpts']})" if full else "—"
        print(
            f"| {s['step']} | {s['time_s']:.1f} | {rate} | {s['rss_kb'] / 1024:.1f} | {delta} | {s['ops']} "
            f"| {s['fds']} | {s['threads']} | {ckpt} | {s['event_bytes']} |"
        )
        prev = s
    print(
        f"\nRSS: {rss_growth_mb:+.1f} MB from baseline to last sample (peak {rss_peak_mb:+.1f} MB); "
        f"graph ops: {op_counts}; fds: {base['fds']} → {last['fds']} (max {max(s['fds'] for s in after)}); "
        f"threads: {base['threads']} → {last['threads']} (max {max(s['threads'] for s in after)}; "
        f"{threads_before} before fit, {final['threads']} after)."
    )
    print(
        f"Event files in events/ after fit: {final['event_bytes']} bytes (baseline sample {base['event_bytes']}, "
        f"last sample {last['event_bytes']}); values per tag: {dict(sorted(final['tags'].items()))} "
        f"(expected {expected_tags}); summaries equal to the batch values the hooks saw: "
        f"{final['summaries_checked'] or '(basic stack: none written)'}."
    )
    if full:
        print(
            f"Checkpoint dir: {last['ckpt_files']} files ({last['ckpts']} checkpoints) at the last sample, "
            f"{final['ckpt_files']} ({final['ckpts']}) after fit, bound {ckpt_bound}; newest "
            f"{final['latest_checkpoint']}; its event file {final['ckpt_event_bytes']} bytes. "
            f"FinalOpsHook: {final['final_ops_values']}."
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "config": {
                        "steps": args.steps,
                        "stack": args.stack,
                        "save_steps": args.save_steps,
                        "every": every,
                        "warmup": warmup,
                        "model": args.model,
                        "rss_limit_mb": args.rss_limit_mb,
                    },
                    "machine": info,
                    "wall_s": wall,
                    "samples": samples,
                    "final": final,
                    "threads_before_fit": threads_before,
                    "failures": failures,
                },
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
