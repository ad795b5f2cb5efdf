"""Per-step overhead of hooks2callbacks, against bare Keras, a hand-written callback and TF1.

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/overhead.py --steps 500 --rounds 7
    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/overhead.py --model mid --json mid.json

Variants (each trains the same-shaped MLP on the same synthetic data):

  bare      `model.fit` with no callbacks but the shared timing markers.
  manual    a hand-written `keras.callbacks.Callback` doing what the four hooks
            do: stop at step 10**9, log loss/accuracy every 100 steps through
            TF's logger, a NaN check on the loss every step, and global_step/sec
            every 100 steps to a `tf.summary` file writer.
  adapted   the real hooks through `HookCallback`: StopAtStepHook(last_step=10**9),
            LoggingTensorHook(["loss", "accuracy"], every_n_iter=100),
            NanTensorHook("loss"), StepCounterHook(every_n_steps=100, output_dir=tmp).
  tf1       the same four hooks (NanTensorHook given the loss tensor, as TF1
            code does) in a real `tf.compat.v1.train.MonitoredTrainingSession`
            training the same MLP in graph mode (raw variables, Adam, the same
            tf.data pipeline through a one-shot iterator); no default hooks.
  idle      ten hooks whose `before_run` returns None and whose `after_run` does
            nothing, through `HookCallback`: the adapter's fixed per-hook cost.
  direct    the four hooks with no adapter: a plain Keras callback calls their
            `before_run`/`after_run` itself, with results made from the batch
            values that manual derives
            (the hooks sit on their own TF1 graph; StepCounterHook's one
            `session.run(global_step)` gets the step). adapted - direct is the
            adapter's own share of adapted - bare; the rest is the hooks' code.
  weights   one TF1 hook through `HookCallback` that builds, in `begin()`, the
            global norm of `tf.compat.v1.trainable_variables()` (the Keras
            model's weights, mirrored into the adapter graph) and fetches it
            every 100 steps: a real graph run on those steps, with the weights
            loaded from Keras first; on the other steps the hook asks for nothing.
  means     the adapted variant's hooks with `HookCallback(values="running_mean")`:
            Keras's logs as reported, no batch values. Keras's own train
            function runs, as in bare.
  kerascall the adapted variant with the step `HookCallback` compiles called
            through Keras's own Python function, as bare calls Keras's step.
            adapted calls it directly (`hooks2callbacks._batch._direct_step`,
            Keras 3 on TensorFlow), which costs less than Keras's own call:
            kerascall/bare and kerascall/manual are the like-for-like cost of
            the hooks, the adapter and the batch values, without that saving;
            kerascall/means what the batch values cost.

How a step is timed. Every Keras variant gets the same two extra callbacks: a
start marker placed *first* in the callback list, which records
`time.perf_counter()` at each `on_train_batch_begin`/`end`, and a stop marker
placed *last*, which records it at every `on_train_batch_end`. The time per step
is (last batch end - first batch end) / (steps - 1): steps 2 to N, with every
callback's per-step work (the adapter's `before_run`/`after_run`). It leaves out
what `fit` does once per call: building the callback list, the data iterator,
the first step (where the adapter builds its graph and calls the hooks'
`begin()`, after every callback's `on_train_begin`, and Keras traces the step),
`on_train_end` (`end()`, closing, flushing writers) and the History bookkeeping.

Those once-per-fit costs are reported separately, as "setup" = (first batch
end - fit called) + (end of the last `on_train_end` - last batch end). What
`fit` does after `on_train_end` is left out: on this machine the Keras/TF
teardown at fit's return (the data iterator's destruction) sometimes stalls for
seconds, in every variant alike, with or without hooks or prefetch.

"In callbacks": the same markers also time the stretch between them at each
batch event (start marker's `on_train_batch_begin` to the stop marker's, and
likewise for `on_train_batch_end`), i.e. the per-step time spent inside the
variant's own callbacks during the real fit. It is a direct measure, far less
noisy than the difference of two step times on a busy machine; the bare
variant's value is the markers' own floor. The markers cost every variant the
same four `perf_counter` calls per step.

For tf1 the interval is the plain loop of `steps` `MonitoredSession.run(train_op)`
calls on a session kept open across rounds (the graph is built and the session
created once, before the warm-up), so it has no setup or in-callbacks column.

The Keras variants share one model (and so one compiled train step): only
their callbacks differ. It is built, compiled and traced before the rounds (in
the warm-up round, whose numbers are dropped); each variant reuses its
callbacks and hooks in every round, and the global step keeps counting across
fits, as it would across a user's fits. Rounds run the variants in a fixed order
(bare manual adapted tf1 idle direct weights means kerascall, then again), so slow drift of a shared machine
hits all variants alike; the ratios are computed within each round and their
median is reported, which cancels drift better than a ratio of medians.
`gc.collect()` runs before each timed fit, outside the interval.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import gc
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.platform import tf_logging  # noqa: E402

from hooks2callbacks import HookCallback  # noqa: E402

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ("bare", "manual", "adapted", "tf1", "idle", "direct", "weights", "means", "kerascall")
RATIOS = (
    ("adapted", "bare"),
    ("adapted", "manual"),
    ("adapted", "direct"),
    ("manual", "bare"),
    ("idle", "bare"),
    ("tf1", "bare"),
    ("weights", "bare"),
    ("adapted", "means"),
    ("kerascall", "bare"),
    ("kerascall", "manual"),
    ("kerascall", "means"),
)


# -- timing markers --------------------------------------------------------------


class StartMarker(keras.callbacks.Callback):
    """First in the list: the time of the first `on_train_batch_begin` of a fit.

    Also notes the time of each batch event before the variant's callbacks see it.
    """

    def on_train_begin(self, logs: Any = None) -> None:
        self.t: float | None = None
        self.begin = self.end = 0.0

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.begin = now = time.perf_counter()
        if self.t is None:
            self.t = now

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.end = time.perf_counter()


class StopMarker(keras.callbacks.Callback):
    """Last in the list: the time of the latest `on_train_batch_end`, the step count, and
    the time spent in the callbacks between the two markers (summed over both batch events)."""

    def __init__(self, start: StartMarker) -> None:
        super().__init__()
        self.start = start

    def on_train_begin(self, logs: Any = None) -> None:
        self.t: float | None = None
        self.n = 0
        self.in_callbacks = 0.0

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.in_callbacks += time.perf_counter() - self.start.begin

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.t = now = time.perf_counter()
        self.in_callbacks += now - self.start.end
        if self.n == 0:
            # Timed from the end of the first step: HookCallback's hooks begin() at
            # the first batch (after every callback's on_train_begin), Keras traces there.
            self.first = now
            self.in_callbacks = 0.0
        self.n += 1

    def on_train_end(self, logs: Any = None) -> None:
        self.end_t = time.perf_counter()


# -- the hand-written equivalent of the four hooks -----------------------------------


class ManualCallback(keras.callbacks.Callback):
    """What StopAtStep + LoggingTensor + NanTensor + StepCounter hooks do, by hand."""

    def __init__(self, logdir: str, last_step: int = 10**9, every: int = 100) -> None:
        super().__init__()
        self.last_step = last_step
        self.every = every
        self.writer = tf.summary.create_file_writer(logdir)

    def on_train_begin(self, logs: Any = None) -> None:
        self.step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        self.count = 0
        self.rate_time: float | None = None
        self.rate_step = self.step
        self.batch_values = _common.BatchFromMeans()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        logs = self.batch_values(batch, logs or {})
        self.step += 1
        loss = logs["loss"]
        if math.isnan(loss):
            raise RuntimeError("NaN loss during training.")
        if self.count % self.every == 0:
            tf_logging.info("loss = %s, accuracy = %s", loss, logs["accuracy"])
        self.count += 1
        if self.step % self.every == 0:
            now = time.time()
            if self.rate_time is not None:
                rate = (self.step - self.rate_step) / (now - self.rate_time)
                with self.writer.as_default():
                    tf.summary.scalar("global_step/sec", rate, step=self.step)
                tf_logging.info("global_step/sec: %g", rate)
            self.rate_time, self.rate_step = now, self.step
        if self.step >= self.last_step:
            self.model.stop_training = True

    def on_train_end(self, logs: Any = None) -> None:
        self.writer.flush()


class DirectHooksCallback(keras.callbacks.Callback):
    """The four stock hooks called straight from a Keras callback: no adapter."""

    def __init__(self, output_dir: str) -> None:
        super().__init__()
        self.direct = _common.DirectHooks(output_dir)

    def on_train_begin(self, logs: Any = None) -> None:
        self.direct.step = np.int64(int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)))
        self.batch_values = _common.BatchFromMeans()

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.direct.before_run()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.direct.after_run(self.batch_values(batch, logs or {})):
            self.model.stop_training = True


class KerasCall(keras.callbacks.Callback):
    """After a `HookCallback`: has its compiled step called through Keras's own Python function."""

    def on_train_begin(self, logs: Any = None) -> None:
        self.function: Any = None

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.function is None:  # after HookCallback's first batch begin, where it attaches its step
            self._wrap()

    def _wrap(self) -> None:
        wrapped = self.model.train_function  # the function HookCallback put in place
        self.wrapped, self.own = wrapped, wrapped.original
        direct = wrapped._direct  # pylint: disable=protected-access

        def function(iterator: Any) -> Any:
            wrapped._direct = None
            try:
                return wrapped(iterator)
            finally:
                wrapped._direct = direct

        self.function = self.model.train_function = function

    def on_train_end(self, logs: Any = None) -> None:
        # HookCallback's on_train_end, before this one, leaves a function not its own in place.
        if self.function is not None and self.model.train_function is self.function:
            self.model.train_function = self.own


class IdleHook(tf.compat.v1.train.SessionRunHook):
    """A hook that fetches nothing and does nothing (SessionRunHook's defaults)."""


class WeightNormHook(tf.compat.v1.train.SessionRunHook):
    """Fetches the global norm of all trainable weights every `every_n_iter` steps, as a TF1 hook would."""

    def __init__(self, every_n_iter: int = 100) -> None:
        self.every_n_iter = every_n_iter
        self.norms: list[float] = []

    def begin(self) -> None:
        norm = tf.linalg.global_norm(tf.compat.v1.trainable_variables())
        self.args = tf.compat.v1.train.SessionRunArgs(norm)
        self.iteration = 0

    def before_run(self, run_context: Any) -> Any:
        return self.args if self.iteration % self.every_n_iter == 0 else None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self.iteration % self.every_n_iter == 0:
            self.norms.append(float(run_values.results))
        self.iteration += 1


# -- variants ----------------------------------------------------------------------


class KerasVariant:
    """A Keras model and its callbacks, built once and fitted each round."""

    def __init__(self, name: str, model: Any, dataset: Any, callbacks: list[Any]) -> None:
        self.name = name
        self.model = model
        self.dataset = dataset
        self.start = StartMarker()
        self.stop = StopMarker(self.start)
        self.callbacks = [self.start, *callbacks, self.stop]

    def run(self, steps: int) -> tuple[float, float | None, float | None]:
        """Fits `steps` steps; returns seconds of (the timed interval, setup, in callbacks)."""
        gc.collect()
        t0 = time.perf_counter()
        self.model.fit(
            self.dataset, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False, callbacks=self.callbacks
        )
        if self.stop.n != steps or self.start.t is None or self.stop.t is None:
            raise RuntimeError(f"{self.name}: {self.stop.n} train steps ran, expected {steps}")
        # Steps 2..N, scaled to `steps` steps, so per-step figures divide by `steps` as before.
        scale = steps / (steps - 1)
        interval = (self.stop.t - self.stop.first) * scale
        # fit's start to the end of the first step, plus the last batch to the end of on_train_end.
        setup = (self.stop.first - t0) + (self.stop.end_t - self.stop.t)
        return interval, setup, self.stop.in_callbacks * scale

    def close(self) -> None:
        pass


class TF1Variant:
    """The same MLP and hooks in a graph-mode MonitoredTrainingSession, kept open."""

    name = "tf1"

    def __init__(self, widths: tuple[int, ...], output_dir: str) -> None:
        v1 = tf.compat.v1
        self.graph = tf.Graph()
        with self.graph.as_default():
            v1.set_random_seed(_common.SEED)
            global_step = v1.train.get_or_create_global_step()
            x, y = v1.data.make_one_shot_iterator(_common.synthetic_dataset(widths)).get_next()
            h = x
            for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
                kernel = v1.get_variable(
                    f"dense_{i}/kernel", [n_in, n_out], initializer=v1.glorot_uniform_initializer()
                )
                bias = v1.get_variable(f"dense_{i}/bias", [n_out], initializer=v1.zeros_initializer())
                h = tf.matmul(h, kernel) + bias
                if i < len(widths) - 2:
                    h = tf.nn.relu(h)
            loss = tf.identity(
                tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h)),
                name="loss",
            )
            correct = tf.cast(tf.equal(tf.argmax(h, axis=1), y), tf.float32)
            tf.reduce_mean(correct, name="accuracy")
            self.train_op = v1.train.AdamOptimizer(1e-3).minimize(loss, global_step=global_step)
            self.session = v1.train.MonitoredTrainingSession(
                hooks=_common.stock_hooks(output_dir, loss),
                checkpoint_dir=None,
                save_checkpoint_secs=None,
                save_summaries_steps=None,
                save_summaries_secs=None,
                log_step_count_steps=None,
            )

    def run(self, steps: int) -> tuple[float, float | None, float | None]:
        gc.collect()
        session, train_op = self.session, self.train_op
        t0 = time.perf_counter()
        for _ in range(steps):
            session.run(train_op)
        return time.perf_counter() - t0, None, None

    def close(self) -> None:
        self.session.close()


def build_variants(names: list[str], widths: tuple[int, ...], tmp: str) -> list[Any]:
    dataset = _common.synthetic_dataset(widths)
    # One model for every Keras variant: they time the same compiled step, so
    # a difference between two model instances cannot pass for a callback's cost.
    model = _common.keras_mlp(widths)
    makers: dict[str, Callable[[], Any]] = {
        "bare": lambda: KerasVariant("bare", model, dataset, []),
        "manual": lambda: KerasVariant("manual", model, dataset, [ManualCallback(os.path.join(tmp, "manual"))]),
        "adapted": lambda: KerasVariant(
            "adapted", model, dataset, [HookCallback(_common.stock_hooks(os.path.join(tmp, "adapted")))]
        ),
        "tf1": lambda: TF1Variant(widths, os.path.join(tmp, "tf1")),
        "idle": lambda: KerasVariant("idle", model, dataset, [HookCallback([IdleHook() for _ in range(10)])]),
        "direct": lambda: KerasVariant("direct", model, dataset, [DirectHooksCallback(os.path.join(tmp, "direct"))]),
        "weights": lambda: KerasVariant("weights", model, dataset, [HookCallback(WeightNormHook())]),
        "kerascall": lambda: KerasVariant(
            "kerascall",
            model,
            dataset,
            [HookCallback(_common.stock_hooks(os.path.join(tmp, "kerascall"))), KerasCall()],
        ),
        "means": lambda: KerasVariant(
            "means",
            model,
            dataset,
            [HookCallback(_common.stock_hooks(os.path.join(tmp, "means")), values="running_mean")],
        ),
    }
    return [makers[n]() for n in names]


# -- reporting -------------------------------------------------------------------


def summarize(
    names: list[str],
    per_step: dict[str, list[float]],
    setup: dict[str, list[float]],
    in_callbacks: dict[str, list[float]],
) -> dict[str, Any]:
    rounds = len(next(iter(per_step.values())))
    summary: dict[str, Any] = {"variants": {}, "ratios": {}, "overhead_us": {}}
    for name in names:
        values = per_step[name]
        summary["variants"][name] = {
            "median_us_per_step": statistics.median(values),
            "min_us_per_step": min(values),
            "max_us_per_step": max(values),
            "median_setup_ms": statistics.median(setup[name]) if setup[name] else None,
            "median_in_callbacks_us_per_step": (statistics.median(in_callbacks[name]) if in_callbacks[name] else None),
        }
    for num, den in RATIOS:
        if num in per_step and den in per_step:
            ratios = [per_step[num][r] / per_step[den][r] for r in range(rounds)]
            diffs = [per_step[num][r] - per_step[den][r] for r in range(rounds)]
            summary["ratios"][f"{num}/{den}"] = {
                "median": statistics.median(ratios),
                "min": min(ratios),
                "max": max(ratios),
                "per_round": ratios,
            }
            summary["overhead_us"][f"{num}-{den}"] = statistics.median(diffs)
    return summary


def markdown(args: argparse.Namespace, widths: tuple[int, ...], info: dict[str, Any], summary: dict[str, Any]) -> str:
    shape = "→".join(str(w) for w in widths)
    lines = [
        f"Model `{args.model}` (MLP {shape}, batch {_common.BATCH}), {args.steps} steps × "
        f"{args.rounds} rounds (after 1 warm-up round), CPU only: "
        f"{info['cpus_usable']} of {info['cpu_count']} CPUs usable ({info['cpu_model'] or 'unknown CPU'}), "
        f"Python {info['python']}, TensorFlow {info['tensorflow']}, Keras {info['keras']}, "
        f"load average {info['loadavg'][0]:.2f} at start, {info['loadavg_end'][0]:.2f} at end; "
        f"git {info['git'] or '?'}, hooks2callbacks sources {info['hooks2callbacks_sources']}"
        + ("" if info["hooks2callbacks_file"].startswith(_REPO) else f" from {info['hooks2callbacks_file']}")
        + ".",
        "",
        "| variant | µs/step (median) | min – max over rounds | + µs/step vs bare (median of rounds) "
        "| in callbacks, µs/step (median) | per-fit setup, ms (median) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, v in summary["variants"].items():
        extra = "—" if name == "bare" else _fmt(summary["overhead_us"].get(f"{name}-bare"), "+.0f")
        setup = _fmt(v["median_setup_ms"], ".1f")
        inside = _fmt(v["median_in_callbacks_us_per_step"], ".1f")
        lines.append(
            f"| {name} | {v['median_us_per_step']:.0f} | {v['min_us_per_step']:.0f} – "
            f"{v['max_us_per_step']:.0f} | {extra} | {inside} | {setup} |"
        )
    lines += ["", "| ratio (per round, then median) | median | min – max |", "|---|---:|---:|"]
    for key, r in summary["ratios"].items():
        lines.append(f"| {key} | {r['median']:.3f} | {r['min']:.3f} – {r['max']:.3f} |")
    if info["hooks2callbacks_sources_end"] != info["hooks2callbacks_sources"]:
        lines += [
            "",
            "WARNING: the hooks2callbacks sources changed during the run "
            f"({info['hooks2callbacks_sources']} → {info['hooks2callbacks_sources_end']}); "
            "the modules were imported at the start, but rerun to be sure.",
        ]
    return "\n".join(lines)


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


# -- main ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=500, help="train steps per variant per round")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (after one warm-up round)")
    _common.add_variant_arguments(parser, VARIANTS, "write the configuration, raw rounds and summary here")
    args = parser.parse_args(argv)
    names, unknown = _common.variant_names(args.variants, VARIANTS)
    if unknown or not names or args.steps < 1 or args.rounds < 1:
        parser.error(f"bad --variants/--steps/--rounds (unknown variants: {unknown})")

    widths = _common.MODELS[args.model]
    info = _common.machine_info()
    per_step: dict[str, list[float]] = {n: [] for n in names}
    setup: dict[str, list[float]] = {n: [] for n in names}
    in_callbacks: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="h2c-bench-") as tmp:
        variants = build_variants(names, widths, tmp)
        try:
            for round_index in range(args.rounds + 1):  # round 0 is the warm-up
                for variant in variants:
                    interval, fit_setup, callbacks_s = variant.run(args.steps)
                    if round_index == 0:
                        continue
                    per_step[variant.name].append(interval / args.steps * 1e6)
                    if fit_setup is not None:
                        setup[variant.name].append(fit_setup * 1e3)
                    if callbacks_s is not None:
                        in_callbacks[variant.name].append(callbacks_s / args.steps * 1e6)
                label = "warm-up" if round_index == 0 else f"round {round_index}/{args.rounds}"
                done = "" if round_index == 0 else "  " + "  ".join(f"{n}={per_step[n][-1]:.0f}" for n in names)
                print(f"[{label}]{done}", file=sys.stderr, flush=True)
        finally:
            for variant in variants:
                variant.close()
    info["loadavg_end"] = list(os.getloadavg())
    info["hooks2callbacks_sources_end"] = _common.source_digest()

    summary = summarize(names, per_step, setup, in_callbacks)
    print(markdown(args, widths, info, summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "config": {
                        "steps": args.steps,
                        "rounds": args.rounds,
                        "model": args.model,
                        "widths": widths,
                        "batch": _common.BATCH,
                        "variants": names,
                    },
                    "machine": info,
                    "us_per_step_by_round": per_step,
                    "setup_ms_by_round": setup,
                    "in_callbacks_us_per_step_by_round": in_callbacks,
                    "summary": summary,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
