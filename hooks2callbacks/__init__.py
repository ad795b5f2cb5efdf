"""hooks2callbacks: run TF1 hooks (`SessionRunHook`) unchanged inside Keras training."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hooks2callbacks._batch_logs import BatchValueError
    from hooks2callbacks._checkpoint import restore_checkpoint
    from hooks2callbacks._estimator import estimator_hooks, install_estimator_aliases
    from hooks2callbacks._fetch import UnknownLogKeyError
    from hooks2callbacks._graph import log_tensor
    from hooks2callbacks._notebook import notebook_logging
    from hooks2callbacks._tf1_restore import TF1Restore, restore_tf1_checkpoint
    from hooks2callbacks.callback import HookCallback
    from hooks2callbacks.callback_hook import CallbackHook, TF1Model
    from hooks2callbacks.migration import MigrationReport, check_migration

# Each public name is imported on first use (PEP 562), so that importing the package does not import
# TensorFlow yet: `python -m hooks2callbacks` quiets TensorFlow's start-up lines before it loads.
_MODULES = {
    "BatchValueError": "hooks2callbacks._batch_logs",
    "CallbackHook": "hooks2callbacks.callback_hook",
    "HookCallback": "hooks2callbacks.callback",
    "MigrationReport": "hooks2callbacks.migration",
    "TF1Model": "hooks2callbacks.callback_hook",
    "TF1Restore": "hooks2callbacks._tf1_restore",
    "UnknownLogKeyError": "hooks2callbacks._fetch",
    "check_migration": "hooks2callbacks.migration",
    "estimator_hooks": "hooks2callbacks._estimator",
    "install_estimator_aliases": "hooks2callbacks._estimator",
    "log_tensor": "hooks2callbacks._graph",
    "notebook_logging": "hooks2callbacks._notebook",
    "restore_checkpoint": "hooks2callbacks._checkpoint",
    "restore_tf1_checkpoint": "hooks2callbacks._tf1_restore",
}
__all__ = [
    "BatchValueError",
    "CallbackHook",
    "HookCallback",
    "MigrationReport",
    "TF1Model",
    "TF1Restore",
    "UnknownLogKeyError",
    "check_migration",
    "estimator_hooks",
    "install_estimator_aliases",
    "log_tensor",
    "notebook_logging",
    "restore_checkpoint",
    "restore_tf1_checkpoint",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'hooks2callbacks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
