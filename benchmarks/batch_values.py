"""The cost, inside the train step, of computing each batch's own values (`hooks2callbacks._batch`).

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/batch_values.py --calls 300 --rounds 41 [--model mid]

It times the model's own compiled train function and the one `HookCallback`
uses for `values="batch"` (the same model's step, which also computes each
metric's value on the batch and returns it beside the logs, then hands Keras
its logs without those values), called directly in a tight loop on the same
`tf.data` iterator: no `fit`, no callbacks, so only the step and the wrapper
differ. Rounds alternate the two functions, `--calls` calls each; the ratio is
taken within each round and the median reported, with wall time and this
process's CPU time (the latter is less sensitive to other processes on a
shared machine).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402

from hooks2callbacks._batch import BatchSource  # noqa: E402


def time_calls(function: Callable[[Any], Any], iterator: Any, calls: int) -> tuple[float, float]:
    """Seconds per call of `function(iterator)`: (wall, this process's CPU)."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        function(iterator)
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=300, help="train steps per function per round")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--model", choices=sorted(_common.MODELS), default="small")
    args = parser.parse_args(argv)

    widths = _common.MODELS[args.model]
    model = _common.keras_mlp(widths)
    dataset = _common.synthetic_dataset(widths)
    model.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)  # Keras builds and traces its function
    own = model.train_function
    iterator = iter(dataset)
    source = BatchSource(model, "train")
    batch = model.train_function
    batch(iterator)  # traced while attached, as in a run
    keys = [slot[0] for slot in batch.info.layout]  # type: ignore[attr-defined]
    source.close()
    own(iterator)

    rows: dict[str, list[tuple[float, float]]] = {"own": [], "batch": []}
    for _ in range(args.rounds):
        for name, function in (("own", own), ("batch", batch)):
            rows[name].append(time_calls(function, iterator, args.calls))

    info = _common.machine_info()
    print(
        f"Model `{args.model}` (MLP {'→'.join(map(str, widths))}, batch {_common.BATCH}, Adam, loss + accuracy), "
        f"{args.calls} calls × {args.rounds} rounds per function; batch values of {list(keys)}. "
        f"{info['cpus_usable']} of {info['cpu_count']} CPUs ({info['cpu_model']}), Python {info['python']}, "
        f"TensorFlow {info['tensorflow']}, Keras {info['keras']}, load average {info['loadavg'][0]:.2f}, "
        f"git {info['git']}.\n"
    )
    print("| function | wall µs/step (median) | CPU µs/step (median) |")
    print("|---|---:|---:|")
    for name in rows:
        wall = statistics.median(w for w, _ in rows[name]) * 1e6
        cpu = statistics.median(c for _, c in rows[name]) * 1e6
        print(f"| {name} | {wall:.0f} | {cpu:.0f} |")
    print("\n| ratio batch/own (per round, then median) | median | min – max |")
    print("|---|---:|---:|")
    for index, label in ((0, "wall"), (1, "CPU")):
        ratios = [b[index] / o[index] for b, o in zip(rows["batch"], rows["own"], strict=True)]
        print(f"| {label} | {statistics.median(ratios):.3f} | {min(ratios):.3f} – {max(ratios):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
