"""hooks2callbacks: run TF1 hooks (`SessionRunHook`) unchanged inside Keras training."""

from hooks2callbacks._batch import BatchValueError
from hooks2callbacks._checkpoint import TF1Restore, restore_checkpoint, restore_tf1_checkpoint
from hooks2callbacks._estimator import estimator_hooks, install_estimator_aliases
from hooks2callbacks._fetch import UnknownLogKeyError
from hooks2callbacks._graph import log_tensor
from hooks2callbacks._notebook import notebook_logging
from hooks2callbacks.callback import HookCallback
from hooks2callbacks.migration import MigrationReport, check_migration

__all__ = [
    "BatchValueError",
    "HookCallback",
    "MigrationReport",
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
