"""One verdict per job? Each real-job check of the tests, run N times in a row, under load (not in CI).

Run from the repository root:

    TF_CPP_MIN_LOG_LEVEL=3 PYTHONPATH=. python benchmarks/verdict_loop.py [--runs 10] [--load 1]
        [--jobs ner,mnist_like] [--modes train,eval] [--save DIR]

For each job of `check_migration.py --real-jobs` (the public BERT and ResNet jobs, the jobs written
after public ones) and the tagging job of tests/test_public_jobs_ner.py (with its proposed map), and
each mode, the check runs `--runs` times in a row while `--load` other processes keep the CPUs busy
(a numpy matrix product in a loop, started here and ended here). Each run prints its verdict and its
first difference, and a digest of the whole printed report (every value, difference and drift
line); each job ends with the verdicts and digests counted. A check whose verdict flips with the
machine's load prints two verdicts for one job; one whose report moves at all, two digests.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import pathlib
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import check_migration as bench


def _busy(stop: Any) -> None:
    import numpy as np  # noqa: PLC0415

    a = np.random.default_rng(0).random((300, 300))
    while not stop.is_set():
        a = a @ a
        a /= np.abs(a).max()


def ner_check(directory: pathlib.Path, mode: str) -> Any:
    """The tagging job's check with the map it proposes, as tests/test_public_jobs_ner.py runs it."""
    del directory
    import test_public_jobs_ner as ner  # noqa: PLC0415

    if not hasattr(ner_check, "pasted"):
        ner_check.pasted = {**ner.WEIGHTS, **ner.proposed_map(ner.check(ner.WEIGHTS))}  # type: ignore[attr-defined]
    return ner.check(ner_check.pasted, mode=mode)  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--load", type=int, default=1, help="busy processes beside the checks")
    parser.add_argument("--jobs", default="", help="comma-separated substrings of the job names (default: all)")
    parser.add_argument("--modes", default="train,eval")
    parser.add_argument("--save", default="", help="a folder to write each printed report to, to diff them")
    args = parser.parse_args()
    checks = {name: check for name, (check, _, _) in bench.real_job_checks().items()}
    checks["ner (after zjy-ucas/ChineseNER)"] = ner_check
    wanted = [w for w in args.jobs.split(",") if w]
    stop = multiprocessing.Event()
    load = [multiprocessing.Process(target=_busy, args=(stop,), daemon=True) for _ in range(args.load)]
    for process in load:
        process.start()
    try:
        for name, check in checks.items():
            if wanted and not any(w in name for w in wanted):
                continue
            for mode in args.modes.split(","):
                verdicts: Counter[str] = Counter()
                digests: Counter[str] = Counter()
                for run in range(args.runs):
                    with tempfile.TemporaryDirectory() as directory:
                        start = time.perf_counter()
                        report = check(pathlib.Path(directory), mode)
                        took = time.perf_counter() - start
                    verdict = "ok" if report.ok else f"{len(report.differences)} differences"
                    first = str(report.differences[0]).split("\n")[0] if report.differences else "-"
                    digest = hashlib.sha1(str(report).encode()).hexdigest()[:8]
                    if args.save:
                        slug = "".join(c if c.isalnum() else "_" for c in name)
                        (pathlib.Path(args.save) / f"{slug}-{mode}-{run}-{digest}.txt").write_text(str(report))
                    verdicts[verdict] += 1
                    digests[digest] += 1
                    print(
                        f"{name} {mode} run {run}: {verdict} ({took:.1f} s), report {digest}; first: {first}",
                        flush=True,
                    )
                print(
                    f"{name} {mode}: {dict(verdicts)}, {len(digests)} distinct report(s) over {args.runs} runs, "
                    f"load {args.load}",
                    flush=True,
                )
    finally:
        stop.set()
        for process in load:
            process.join()
    sys.exit(0)


if __name__ == "__main__":
    main()
