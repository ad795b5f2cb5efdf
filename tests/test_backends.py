"""The contract suites again, with Keras 3 on the JAX and PyTorch backends.

Keras fixes its backend at import, so each backend runs in a pytest subprocess
of its own, with `KERAS_BACKEND` set. The adapter graph stays plain TensorFlow
there; only the model runs on the other backend.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

TESTS = pathlib.Path(__file__).parent
CONTRACT_SUITES = (
    "test_batch.py",
    "test_callback.py",
    "test_differential.py",
    "test_invariance.py",
    "test_model.py",
    "test_run_options.py",
    "test_seams.py",
    "test_stock_hooks.py",
    "test_tensors.py",
)
TIMEOUT_S = 900


@pytest.mark.slow
@pytest.mark.parametrize("suite", CONTRACT_SUITES)
@pytest.mark.parametrize("backend, package", [("jax", "jax"), ("torch", "torch")])
def test_contract_suite_passes_on_backend(backend, package, suite):
    # One test per backend and suite, so that pytest-xdist spreads them over its workers (one test
    # of all nine suites ran 6 minutes on 2 cores and held one worker to the end of the run).
    if importlib.util.find_spec(package) is None:
        pytest.skip(
            f"KERAS_BACKEND={backend} needs the {package!r} package, which is not installed: "
            "pip install '.[backends]' (CI does)"
        )
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", suite]
    done = subprocess.run(command, cwd=TESTS, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    failed = "\n".join(line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR")))
    assert done.returncode == 0, (
        f"KERAS_BACKEND={backend} {suite}: {summary}\n{failed}\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    )
    assert " passed" in summary and not re.search(r"\d+ (failed|errors?)\b", summary), summary
