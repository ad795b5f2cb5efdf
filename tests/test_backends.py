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
# The contract suites and the custom loops: one pytest process per backend. Each process pays
# 10 to 17 s of imports and collection; three groups per backend paid them six times over, and
# with the suites as fast as they now are (2 to 3 minutes per backend on a loaded 2-core machine)
# one process per backend no longer holds a pytest-xdist worker while the other runs dry.
SUITES = (
    "test_invariance.py",
    "test_callback.py",
    "test_run_options.py",
    "test_batch.py",
    "test_loops.py",
    "test_seams.py",
    "test_stock_hooks.py",
    "test_model.py",
    "test_tensors.py",
    "test_differential.py",
)
TIMEOUT_S = 1200


@pytest.mark.slow
@pytest.mark.parametrize("backend, package", [("jax", "jax"), ("torch", "torch")])
def test_contract_suites_pass_on_backend(backend, package, tmp_path_factory):
    # Their slow tests are left out: each is TensorFlow's alone (the step's graph, the OOM report,
    # tf_keras's graph mode) and skips or repeats the TensorFlow run's work under another KERAS_BACKEND.
    if importlib.util.find_spec(package) is None:
        pytest.skip(
            f"KERAS_BACKEND={backend} needs the {package!r} package, which is not installed: "
            "pip install '.[backends]' (CI does)"
        )
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    if backend == "jax":
        # The suites compile the same small models' steps over and over: XLA's persistent cache
        # compiles each once (test_callback.py on JAX: 30 s, 21 s with it).
        env.update(
            JAX_COMPILATION_CACHE_DIR=str(tmp_path_factory.getbasetemp().parent / "jax-cache"),
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
            JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
        )
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", "not slow"]
    done = subprocess.run([*command, *SUITES], cwd=TESTS, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    failed = "\n".join(line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR")))
    assert done.returncode == 0, (
        f"KERAS_BACKEND={backend}: {summary}\n{failed}\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    )
    assert " passed" in summary and not re.search(r"\d+ (failed|errors?)\b", summary), summary
