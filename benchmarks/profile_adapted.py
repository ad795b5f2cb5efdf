"""Where the adapter's per-step time goes: HookCallback driven without Keras, then profiled.

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/profile_adapted.py --steps 20000
    TF_CPP_MIN_LOG_LEVEL=3 python benchmarks/profile_adapted.py --pyinstrument  # also a real fit

1. Timing (no profiler): a HookCallback's `on_train_batch_begin` /
   `on_train_batch_end` are called in a tight loop with fixed logs
   ({"loss": float, "accuracy": float}), as Keras would call them, but with no
   train step between. That isolates the adapter's per-step cost, for: no hooks,
   the 4 stock hooks of overhead.py, 10 idle hooks; and, for comparison, the 4
   stock hooks' own `before_run`/`after_run` called directly with a minimal
   context and prepared results (what the hooks cost with no adapter at all).
2. cProfile of the stock-hook loop: the functions with the most own time per
   step (µs/step = tottime / steps; cProfile inflates small Python calls, so
   read the ranking and call counts, not the absolute numbers).
3. With --pyinstrument: a real `fit` of --fit-steps steps with the stock hooks,
   sampled by pyinstrument, printed as a call tree.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402
import tensorflow as tf  # noqa: E402

from hooks2callbacks import HookCallback  # noqa: E402

LOGS = {"loss": 0.6931, "accuracy": 0.5}


class IdleHook(tf.compat.v1.train.SessionRunHook):
    pass


def drive(callback: HookCallback, model: Any, steps: int) -> float:
    """Runs `steps` adapter steps with no train step; returns µs per step."""
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_train_batch_begin(0)  # the hooks begin at the first batch: left out of the timing
    callback.on_train_batch_end(0, LOGS)
    t0 = time.perf_counter()
    for batch in range(1, steps + 1):
        callback.on_train_batch_begin(batch)
        callback.on_train_batch_end(batch, LOGS)
    elapsed = time.perf_counter() - t0
    callback.on_train_end()
    return elapsed / steps * 1e6


def drive_raw_hooks(tmp: str, steps: int) -> float:
    """The 4 stock hooks' before_run/after_run on their own TF1 graph, no session runs.

    Results are made from fixed logs (see `_common.DirectHooks`), so only the
    hooks' own Python runs.
    """
    direct = _common.DirectHooks(tmp)
    logs = {"loss": 0.5, "accuracy": 0.5}
    t0 = time.perf_counter()
    for _ in range(steps):
        direct.before_run()
        direct.after_run(logs)
    elapsed = time.perf_counter() - t0
    direct.end()
    return elapsed / steps * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=20000, help="adapter-only steps per measurement")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--pyinstrument", action="store_true", help="also profile a real fit with pyinstrument")
    parser.add_argument("--fit-steps", type=int, default=2000)
    args = parser.parse_args(argv)

    widths = _common.MODELS["small"]
    model = _common.keras_mlp(widths)
    dataset = _common.synthetic_dataset(widths)
    model.fit(dataset, epochs=1, steps_per_epoch=5, verbose=0, shuffle=False)  # build + trace
    with tempfile.TemporaryDirectory(prefix="h2c-prof-") as tmp:
        stock = HookCallback(_common.stock_hooks(tmp))
        cases = {
            "HookCallback([]) (no hooks)": lambda: HookCallback([]),
            "HookCallback(4 stock hooks)": lambda: stock,
            "HookCallback(10 idle hooks)": lambda: HookCallback([IdleHook() for _ in range(10)]),
        }
        for cb_factory in cases.values():  # warm up each path once
            drive(cb_factory(), model, 300)
        print("| adapter-only loop (no train step) | µs/step (best of 3) |")
        print("|---|---:|")
        for label, cb_factory in cases.items():
            best = min(drive(cb_factory(), model, args.steps) for _ in range(3))
            print(f"| {label} | {best:.1f} |")
        raw = min(drive_raw_hooks(tmp, args.steps) for _ in range(3))
        print(f"| the 4 stock hooks called directly, no adapter | {raw:.1f} |")

        profiler = cProfile.Profile()
        profiler.enable()
        drive(stock, model, args.steps)
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        print(f"\ncProfile of the 4-stock-hook loop, {args.steps} steps; top {args.top} by own time:\n")
        print("| function | calls/step | own µs/step | cum µs/step |")
        print("|---|---:|---:|---:|")
        table = stats.stats  # type: ignore[attr-defined]
        rows = sorted(table.items(), key=lambda kv: kv[1][2], reverse=True)[: args.top]
        for (path, line, func), (_cc, nc, tt, ct, _callers) in rows:
            where = _short(path)
            per_step = f"{nc / args.steps:.2f} | {tt / args.steps * 1e6:.2f} | {ct / args.steps * 1e6:.2f}"
            print(f"| `{where}:{line} {func}` | {per_step} |")
        print("\nCumulative time of the adapter's entry points and the hook methods (µs/step):\n")
        print("| function | cum µs/step |")
        print("|---|---:|")
        wanted = (
            "on_train_batch_begin",
            "on_train_batch_end",
            "before_run",
            "after_run",
            "_run_derived",
            "resolve",
            "_guard",
            "as_default",
            "__exit__",
            "__enter__",
            "__init__",
            "run",
        )
        picked = [
            (k, v)
            for k, v in table.items()
            if k[2] in wanted
            and (
                "hooks2callbacks" in k[0]
                or "session_run_hook" in k[0]
                or "basic_session_run_hooks" in k[0]
                or "framework/ops.py" in k[0]
            )
        ]
        for (path, line, func), (_cc, _nc, _tt, ct, _c) in sorted(picked, key=lambda kv: kv[1][3], reverse=True)[:20]:
            print(f"| `{_short(path)}:{line} {func}` | {ct / args.steps * 1e6:.2f} |")

        if args.pyinstrument:
            from pyinstrument import Profiler

            fit_cb = HookCallback(_common.stock_hooks(tmp))
            model.fit(dataset, epochs=1, steps_per_epoch=50, verbose=0, shuffle=False, callbacks=[fit_cb])
            profiler_pi = Profiler(interval=0.0002)
            profiler_pi.start()
            model.fit(dataset, epochs=1, steps_per_epoch=args.fit_steps, verbose=0, shuffle=False, callbacks=[fit_cb])
            profiler_pi.stop()
            print(f"\npyinstrument, real fit of {args.fit_steps} steps with the 4 stock hooks:\n")
            print(profiler_pi.output_text(unicode=True, color=False, show_all=False))
    return 0


def _short(path: str) -> str:
    for marker in ("site-packages/", "/work/main/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


if __name__ == "__main__":
    sys.exit(main())
