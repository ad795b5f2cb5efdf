import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
from filelock import FileLock  # noqa: E402

# TensorFlow and Keras are imported in the fixtures, not here: under pytest-xdist the controller
# loads this file too, and importing them there held up every worker's start by about 10 s.

FLAVOURS = ("keras", "tf_keras")


@pytest.fixture(params=FLAVOURS)
def K(request):
    """The Keras package under test: Keras 3 (on $KERAS_BACKEND), then tf_keras (Keras 2).

    The contract suites take it as their first argument, so that each of their
    tests runs once per flavour. tf_keras is imported as `tf_keras`, which is
    what `tf.keras` means under TF_USE_LEGACY_KERAS=1; it can share a process
    with Keras 3.
    """
    import keras

    if request.param == "keras":
        return keras
    if keras.backend.backend() != "tensorflow":
        pytest.skip(
            f"tf_keras is TensorFlow-only; it is tested in the run with KERAS_BACKEND=tensorflow, "
            f"not again with {keras.backend.backend()!r}"
        )
    if importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf_keras is not installed: pip install '.[test]' (or tf-keras)")
    import tf_keras

    return tf_keras


@pytest.fixture
def clock(monkeypatch):
    """A fake clock in place of the `time` module of the stock hooks (never sleeps)."""
    from support import FakeClock
    from tensorflow.python.training import basic_session_run_hooks

    fake = FakeClock()
    monkeypatch.setattr(basic_session_run_hooks, "time", fake)
    return fake


@pytest.fixture
def tf_info():
    """The messages TF's logger logs at INFO (the stock hooks' lines), as a TF1 script set it."""
    import tensorflow as tf

    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler, logger = Collect(level=logging.INFO), tf.get_logger()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(level)


# The quick check after install (`python -m pytest -m quick`): the hook contract on Keras 3 and
# tf_keras, fetch resolution, the session and graph hooks see, refused hooks, the package's names and
# the demo, without their slow tests: about a minute on 2 cores.
QUICK_MODULES = {
    "test_callback",
    "test_fetch",
    "test_graph",
    "test_init",
    "test_main",
    "test_session",
    "test_translate",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__ in QUICK_MODULES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.quick)


def pytest_collection_finish(session):
    # What is alive once the tests are collected (TensorFlow, Keras) lives on: the collections
    # after each test (below) need not go through it again.
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _collect_garbage_while_it_is_young():
    """Collects each test's garbage at its end, not at some later test's allocation.

    Keras 3's fit leaves a reference cycle through its epoch iterator when training stops
    mid-epoch (a hook's stop request, an error), as it does without hooks. Only the garbage
    collector frees that tf.data iterator, and deleting one that has lived long waits on its
    threads: the suite stood still for 10 to 35 s at a time, a third of its time in one file
    (tests/test_stock_hooks.py: 218 s, 155 s collecting after each test). What outlives the
    test is then frozen, so that the next test's collection goes through its own objects only.
    """
    yield
    gc.collect()
    gc.freeze()


# The Keras 3 backends that the README's test command does not install (`.[backends]` adds them).
BACKEND_PACKAGES = {"jax": "jax", "torch": "torch"}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Ends the run by naming the Keras backends it could not test, and how to add them."""
    missing = [backend for backend, package in BACKEND_PACKAGES.items() if importlib.util.find_spec(package) is None]
    if not missing:
        return
    terminalreporter.write_sep("=", "Keras 3 backends not tested in this run")
    terminalreporter.write_line(
        f"Not installed here: {', '.join(missing)}. The tests of Keras 3 on "
        f"{' and '.join(missing)} were skipped (their reasons are listed below)."
    )
    terminalreporter.write_line(
        'Add them with:  pip install ".[test,backends]"  then run the tests again '
        "(the backends extra pins torch==2.13.0, this project's CPU build; elsewhere install the torch build you need)."
    )


@pytest.fixture(scope="session")
def graph_mode_results(tmp_path_factory):
    """`graph_mode_run.py`'s results: TF1 graph mode's scenarios in one process, eager tf_keras's in another.

    Graph mode is process-wide and cannot be undone, so its scenarios share one
    subprocess (tests/test_graph_mode.py, tests/test_invariance.py read the results);
    the eager run, for comparison, runs beside it. Under pytest-xdist the first
    worker to ask runs them and the others read its results: a run costs a minute
    of both cores.
    """
    if importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf_keras is not installed: pip install '.[test]' (or tf-keras)")
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return _run_graph_mode()
    # The workers' temporary folders share this parent, one per pytest run.
    shared = tmp_path_factory.getbasetemp().parent / "graph_mode_results.json"
    with FileLock(f"{shared}.lock"):
        if not shared.is_file():
            shared.write_text(json.dumps(_run_graph_mode()))
        return json.loads(shared.read_text())


def _run_graph_mode() -> dict:
    run = pathlib.Path(__file__).parent / "graph_mode_run.py"
    processes = [
        subprocess.Popen(
            [sys.executable, str(run), mode],
            cwd=run.parent,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mode in ("graph", "eager")
    ]
    results: dict = {}
    for process in processes:
        try:
            out, err = process.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert process.returncode == 0 and lines, f"{process.args} failed:\n{out[-4000:]}\n{err[-4000:]}"
        results.update(json.loads(lines[-1][len("RESULT ") :]))
    return results
