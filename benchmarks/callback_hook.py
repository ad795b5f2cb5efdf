"""Per-step cost of `CallbackHook` with four stock Keras callbacks, against the bare TF1 loop.

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/callback_hook.py --cycles 200
    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/callback_hook.py --keras tf_keras --json out.json

How. A TF1 graph of the benchmarks' MLP (`--model`, Adam, fed batches of
`_common.BATCH`) and a `MonitoredTrainingSession` over it per variant, in one process:
"bare" with no hooks, and "callbacks" with `CallbackHook` running `CSVLogger`,
`EarlyStopping(monitor="loss")`, `TerminateOnNaN` and `TensorBoard` (epoch
summaries), with `steps_per_epoch=--epoch` so that epochs end during the run; and "empty", a
`CallbackHook` with no callbacks (the hook's own work: fetching and averaging
the logs, the `CallbackList` calls, in an eager context); and "fetch", a plain
hook that fetches the same tensors and does nothing else (TF1's own cost of
fetching them, as a `LoggingTensorHook` pays it).
They take turns of `--block` steps (the order rotates each cycle), since the
speed of a shared machine drifts by tens of percent within a second (see
`interleaved.py`); the first `--settle` steps of each turn are left out. A
step's time is the `session.run(train_op)` call, hooks included. Reported: the
median µs/step of each and the ratio of the medians with a 95% interval from a
bootstrap over whole cycles.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import importlib
import json
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from hooks2callbacks import CallbackHook  # noqa: E402

VARIANTS = ("bare", "fetch", "empty", "callbacks")
PAIRS = (("fetch", "bare"), ("empty", "bare"), ("empty", "fetch"), ("callbacks", "bare"), ("callbacks", "empty"))


class FetchOnly(tf.compat.v1.train.SessionRunHook):
    """Fetches what CallbackHook fetches (the log tensors and the step's read), and does nothing else."""

    def begin(self) -> None:
        from hooks2callbacks import _seams  # pylint: disable=import-outside-toplevel

        graph = tf.compat.v1.get_default_graph()
        read = _seams.training_util._get_or_create_global_step_read(graph)  # pylint: disable=protected-access
        self._args = tf.compat.v1.train.SessionRunArgs(["loss:0", "accuracy:0", read])

    def before_run(self, run_context: Any) -> Any:
        return self._args


def build_graph(widths: tuple[int, ...]) -> Any:
    """The MLP of `widths` as a TF1 graph in the default graph; returns its train op."""
    v1 = tf.compat.v1
    step = v1.train.get_or_create_global_step()
    x = v1.placeholder(tf.float32, [None, widths[0]], name="x")
    y = v1.placeholder(tf.int64, [None], name="y")
    h = x
    rng = np.random.default_rng(_common.SEED)
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=False)):
        kernel = v1.get_variable(f"kernel_{i}", initializer=rng.normal(0, n_in**-0.5, (n_in, n_out)).astype("float32"))
        bias = v1.get_variable(f"bias_{i}", initializer=np.zeros(n_out, "float32"))
        h = tf.matmul(h, kernel) + bias
        if i < len(widths) - 2:
            h = tf.nn.relu(h)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h), name="loss")
    tf.reduce_mean(tf.cast(tf.equal(tf.argmax(h, 1), y), tf.float32), name="accuracy")
    return v1.train.AdamOptimizer(1e-3).minimize(loss, global_step=step)


def stock_callbacks(keras: Any, directory: str) -> list[Any]:
    """The four stock callbacks timed (fresh instances)."""
    return [
        keras.callbacks.CSVLogger(os.path.join(directory, "log.csv")),
        keras.callbacks.EarlyStopping(monitor="loss", patience=10**9),
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.TensorBoard(os.path.join(directory, "tb")),
    ]


def run(args: argparse.Namespace) -> dict[str, Any]:
    keras = importlib.import_module(args.keras)
    widths = _common.MODELS[args.model]
    x, y = _common.synthetic_arrays(widths)
    times = {name: np.zeros((args.cycles, args.block - args.settle)) for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        sessions, train_ops = {}, {}
        for name in VARIANTS:
            # A graph per variant (the same MLP, the same initial weights): MonitoredSession finalizes its graph.
            # Made outside the graph: tf_keras's TensorBoard would otherwise be its TF1 one.
            callbacks = stock_callbacks(keras, tmp) if name == "callbacks" else []
            with tf.Graph().as_default():
                train_ops[name] = build_graph(widths)
                logs = {"loss": "loss", "accuracy": "accuracy"}
                hooks: list[Any] = []
                if name == "fetch":
                    hooks = [FetchOnly()]
                elif name != "bare":
                    hooks = [CallbackHook(callbacks, logs=logs, steps_per_epoch=args.epoch)]
                sessions[name] = tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks)
        cursor = {name: 0 for name in VARIANTS}

        def turn(name: str, cycle: int | None) -> None:
            session = sessions[name]
            for i in range(args.block):
                start = cursor[name] % _common.N_BATCHES * _common.BATCH
                feed = {"x:0": x[start : start + _common.BATCH], "y:0": y[start : start + _common.BATCH]}
                cursor[name] += 1
                began = time.perf_counter()
                session.run(train_ops[name], feed)
                took = time.perf_counter() - began
                if cycle is not None and i >= args.settle:
                    times[name][cycle, i - args.settle] = took

        for _ in range(args.warmup):
            for name in VARIANTS:
                turn(name, None)
        for cycle in range(args.cycles):
            # The order rotates by one each cycle, so that each variant follows each other one equally often.
            for k in range(len(VARIANTS)):
                turn(VARIANTS[(cycle + k) % len(VARIANTS)], cycle)
        for session in sessions.values():
            session.close()

    rng = np.random.default_rng(0)
    ratios = {f"{a}/{b}": _common.ratio_of_medians(times[a], times[b], rng) for a, b in PAIRS}
    return {
        "keras": args.keras,
        "model": args.model,
        "cycles": args.cycles,
        "block": args.block,
        "settle": args.settle,
        "steps_per_epoch": args.epoch,
        "median_us": {name: float(np.median(t) * 1e6) for name, t in times.items()},
        "mean_us": {name: float(np.mean(t) * 1e6) for name, t in times.items()},
        "ratios": ratios,
        "machine": _common.machine_info(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(_common.MODELS), default="small")
    parser.add_argument("--keras", choices=("keras", "tf_keras"), default="keras")
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--block", type=int, default=40)
    parser.add_argument("--settle", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--epoch", type=int, default=100, help="CallbackHook's steps_per_epoch")
    parser.add_argument("--json", metavar="PATH", help="write the results here as JSON")
    args = parser.parse_args()
    if not 0 <= args.settle < args.block:
        parser.error("--settle must be in 0..--block-1")
    result = run(args)
    print(_common.python_line(), f"TF {result['machine']['tensorflow']}", f"{args.keras}", f"model {args.model}")
    for name in VARIANTS:
        print(f"{name:10s} median {result['median_us'][name]:8.1f} µs/step   mean {result['mean_us'][name]:8.1f}")
    for pair, (ratio, low, high) in result["ratios"].items():
        print(f"{pair:16s} {ratio:.3f} ({low:.3f}-{high:.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
