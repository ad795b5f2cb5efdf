import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import importlib.util  # noqa: E402
import logging  # noqa: E402

import keras  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from support import FakeClock  # noqa: E402
from tensorflow.python.training import basic_session_run_hooks  # noqa: E402

FLAVOURS = ("keras", "tf_keras")


@pytest.fixture(params=FLAVOURS)
def K(request):
    """The Keras package under test: Keras 3 (on $KERAS_BACKEND), then tf_keras (Keras 2).

    The contract suites take it as their first argument, so that each of their
    tests runs once per flavour. tf_keras is imported as `tf_keras`, which is
    what `tf.keras` means under TF_USE_LEGACY_KERAS=1; it can share a process
    with Keras 3.
    """
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
    fake = FakeClock()
    monkeypatch.setattr(basic_session_run_hooks, "time", fake)
    return fake


@pytest.fixture
def tf_info():
    """The messages TF's logger logs at INFO (the stock hooks' lines), as a TF1 script set it."""
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
