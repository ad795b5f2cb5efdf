"""The cost of each batch's own values (`hooks2callbacks._batch`) in the step, without `fit` or callbacks.

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/batch_values.py --cycles 500 [--model mid] [--custom-metric]

It times, called directly in a loop on the same distributed `tf.data` iterator
that `fit` uses, what happens between two callbacks for each step:

  own    the model's own compiled train function, then Keras's conversion of
         its logs for the callbacks (`pythonify_logs`);
  batch  the function `HookCallback` puts in its place for `values="batch"`
         (the same step, which also computes each metric's value on the batch
         and returns them with Keras's scalar logs in one output), the same
         conversion, then a read of every batch value, as a hook that fetches
         them all makes. On Keras 3's TensorFlow backend it calls the compiled
         step directly (`_batch._direct_step`), not through Keras's Python.
  keras  `batch` with its compiled step called as Keras calls its own (through
         Keras's Python function): keras/own is what the batch values cost,
         batch/keras what calling the step directly saves.
  outputs  `batch` on a second, identical model whose step also outputs the
         batch's predictions (`hooks2callbacks._tensors`), read as a numpy
         array every step, as a hook that fetches "predictions" makes:
         outputs/batch is what asking for them costs.

The functions take turns of `--block` calls, `--cycles` turns each. The first
`--settle` calls of a turn are left out: after the other function ran, the
first few calls of a function are slower, which in a `fit` only happens once.
Reported: the median µs per call, and the ratio of the medians with a 95%
bootstrap interval over the cycles (medians, because of the machine's long
tail of slow calls; the ratio of the means is shown beside it); and the number
of nodes of each function's graphs.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import collections
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras.src.utils.python_utils import pythonify_logs  # noqa: E402

from hooks2callbacks._batch import BatchSource  # noqa: E402


def graph_nodes(function: Any) -> collections.Counter[str]:
    """Node types of the tf.functions a Keras train function calls (and of the functions they call)."""
    counts: collections.Counter[str] = collections.Counter()
    for cell in function.__closure__ or ():
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        for concrete in getattr(inner, "_list_all_concrete_functions", list)():
            counts.update(op.type for op in concrete.graph.get_operations())
            for library in concrete.graph._functions.values():  # pylint: disable=protected-access
                counts.update(node.op for node in library.definition.node_def)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cycles", type=int, default=500, help="turns per function")
    parser.add_argument("--block", type=int, default=20, help="calls per turn")
    parser.add_argument("--settle", type=int, default=5, help="calls at the start of each turn left out")
    parser.add_argument("--model", choices=sorted(_common.MODELS), default="small")
    parser.add_argument(
        "--custom-metric", action="store_true", help="also a metric with its own update_state (run again per step)"
    )
    args = parser.parse_args(argv)
    if args.cycles < 2 or not 0 <= args.settle < args.block:
        parser.error("bad --cycles/--block/--settle")

    widths = _common.MODELS[args.model]
    model = _common.keras_mlp(widths, custom_metric=args.custom_metric)
    dataset = _common.synthetic_dataset(widths)
    model.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)  # Keras builds and traces its function
    own = model.train_function
    iterator = iter(tf.distribute.get_strategy().experimental_distribute_dataset(dataset))
    source = BatchSource(model, "train")
    wrapped = model.train_function
    wrapped(iterator)  # traced while attached, as in a run
    keys = [slot[0] for slot in wrapped.info.layout]  # type: ignore[attr-defined]
    # The same model again (same seed), whose step outputs the predictions too.
    twin = _common.keras_mlp(widths, custom_metric=args.custom_metric)
    twin.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)
    twin_iterator = iter(tf.distribute.get_strategy().experimental_distribute_dataset(dataset))
    twin_source = BatchSource(twin, "train", tensors=frozenset({"predictions"}))
    twin_wrapped = twin.train_function
    twin_wrapped(twin_iterator)

    def own_step() -> None:
        pythonify_logs(own(iterator))

    def batch_step() -> None:
        logs = source.logs(pythonify_logs(wrapped(iterator)))
        for key in keys:
            logs[key]

    def outputs_step() -> None:
        logs = twin_source.logs(pythonify_logs(twin_wrapped(twin_iterator)))
        for key in keys:
            logs[key]
        logs["predictions"]

    direct = wrapped._direct  # type: ignore[attr-defined]

    def keras_call_step() -> None:
        wrapped._direct = None  # type: ignore[attr-defined]
        try:
            batch_step()
        finally:
            wrapped._direct = direct  # type: ignore[attr-defined]

    functions: dict[str, Callable[[], None]] = {
        "own": own_step,
        "batch": batch_step,
        "keras": keras_call_step,
        "outputs": outputs_step,
    }
    for function in functions.values():
        for _ in range(50):
            function()
    n = len(functions)
    times = np.zeros((n, args.cycles, args.block))
    clock = time.perf_counter
    for cycle in range(args.cycles):
        for turn in range(n):
            v = (turn + cycle) % n
            function = list(functions.values())[v]
            for call in range(args.block):
                t0 = clock()
                function()
                times[v, cycle, call] = clock() - t0
    source.close()
    twin_source.close()
    kept = times[:, :, args.settle :] * 1e6

    info = _common.machine_info()
    nodes = {"own": graph_nodes(own), "batch": graph_nodes(wrapped.compiled)}  # type: ignore[attr-defined]
    nodes["keras"] = nodes["batch"]
    nodes["outputs"] = graph_nodes(twin_wrapped.compiled)  # type: ignore[attr-defined]
    extra = nodes["batch"].copy()
    extra.subtract(nodes["own"])
    print(
        f"Model `{args.model}` (MLP {'→'.join(map(str, widths))}, batch {_common.BATCH}, Adam, loss + accuracy"
        f"{' + a custom running maximum' if args.custom_metric else ''}), "
        f"turns of {args.block} calls, {args.cycles} turns per function, the first {args.settle} of each turn "
        f"left out; batch values of {keys}. {info['cpus_usable']} of {info['cpu_count']} CPUs "
        f"({info['cpu_model']}), Python {info['python']}, TensorFlow {info['tensorflow']}, Keras {info['keras']}, "
        f"load average {info['loadavg'][0]:.2f}, git {info['git']}.\n"
    )
    print("| function | µs/call (median) | µs/call (mean) | graph nodes |")
    print("|---|---:|---:|---:|")
    for v, name in enumerate(functions):
        print(f"| {name} | {np.median(kept[v]):.0f} | {kept[v].mean():.0f} | {sum(nodes[name].values())} |")
    print("\n| ratio | of medians | 95% interval | of means |")
    print("|---|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for a, b in ((1, 0), (2, 0), (1, 2), (3, 1), (3, 0)):
        r, low, high = _common.ratio_of_medians(kept[a], kept[b], rng)
        names = list(functions)
        print(f"| {names[a]}/{names[b]} | {r:.3f} | {low:.3f} – {high:.3f} | {kept[a].mean() / kept[b].mean():.3f} |")
    print(f"\nNodes the batch values add, by type: {dict(sorted((k, v) for k, v in extra.items() if v))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
