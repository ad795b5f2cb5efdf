"""Code of an installed PyPI package that cannot be imported any more, run unchanged from its file.

tensorflow-estimator 2.15.0 (the package's last release, a `test` extra) installs, but none of its
modules imports under TensorFlow 2.16 and later: every import runs the package's `__init__`, which
reaches `tensorflow.python.distribute.estimator_training`, removed in 2.16. Its hooks and helpers
themselves need only TensorFlow's public API. `load` takes the top-level definitions a test needs
from the installed file (found without running the package), and executes them, unchanged, with
the names the module's own imports gave them. Nothing of the package is copied into this repository.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import types
from collections.abc import Mapping
from typing import Any

import tensorflow as tf


def load(package: str, path: str, names: tuple[str, ...], imports: Mapping[str, Any]) -> types.SimpleNamespace:
    """The top-level functions and classes `names` of the installed `<package>/<path>`, run unchanged.

    Args:
        package: The installed package (`"tensorflow_estimator"`).
        path: The module's file, relative to the package's folder.
        names: The definitions to take.
        imports: The names the module's imports bound that these definitions use.

    Returns:
        The definitions, as attributes.

    Raises:
        ImportError: The package is not installed, or the file lacks a definition.
    """
    spec = importlib.util.find_spec(package)  # finds the package; runs none of it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the tests read {package}/{path} from the installed PyPI package: pip install '.[test]'")
    file = os.path.join(spec.submodule_search_locations[0], path)
    with open(file, encoding="utf-8") as source:
        tree = ast.parse(source.read(), file)
    kept = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names]
    if sorted(n.name for n in kept) != sorted(names):
        raise ImportError(f"{file} does not define all of {names}")
    namespace = dict(imports)
    exec(compile(ast.Module(body=kept, type_ignores=[]), file, "exec"), namespace)  # noqa: S102
    return types.SimpleNamespace(**{name: namespace[name] for name in names})


def estimator_hooks() -> types.SimpleNamespace:
    """tensorflow/estimator's `_StopAtCheckpointStepHook` (`hooks/hooks.py`, with `estimator.py`'s
    `_load_global_step_from_checkpoint_dir`) and `_MultiWorkerEarlyStoppingHook` (`early_stopping.py`)."""
    import time

    from tensorflow.python.training import training_util

    estimator_lib = load(
        "tensorflow_estimator", "python/estimator/estimator.py", ("_load_global_step_from_checkpoint_dir",), {"tf": tf}
    )
    hooks = load(
        "tensorflow_estimator",
        "python/estimator/hooks/hooks.py",
        ("_StopAtCheckpointStepHook",),
        {"tf": tf, "os": os, "time": time, "training_util": training_util, "estimator_lib": estimator_lib},
    )
    early_stopping = load(
        "tensorflow_estimator", "python/estimator/early_stopping.py", ("_MultiWorkerEarlyStoppingHook",), {"tf": tf}
    )
    return types.SimpleNamespace(
        load_global_step_from_checkpoint_dir=estimator_lib._load_global_step_from_checkpoint_dir,
        StopAtCheckpointStepHook=hooks._StopAtCheckpointStepHook,
        MultiWorkerEarlyStoppingHook=early_stopping._MultiWorkerEarlyStoppingHook,
    )
