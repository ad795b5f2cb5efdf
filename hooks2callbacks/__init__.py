"""hooks2callbacks: run TF1 hooks (`SessionRunHook`) unchanged inside Keras training."""

from hooks2callbacks._batch import BatchValueError
from hooks2callbacks._fetch import UnknownLogKeyError
from hooks2callbacks._graph import log_tensor
from hooks2callbacks._translate import restore_checkpoint
from hooks2callbacks.callback import HookCallback

__all__ = ["BatchValueError", "HookCallback", "UnknownLogKeyError", "log_tensor", "restore_checkpoint"]
__version__ = "0.1.0"
