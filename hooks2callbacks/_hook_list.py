"""The hooks of a run: what counts as a hook, the list a user gives, and each hook's methods looked up once.

`HookCallback`, the migration check and the user's own loops all take hooks through `as_hook_list`,
so one hook is checked the same way wherever it comes from. The warnings at the start of a run
(hooks that log at INFO under TF's default WARNING level, hooks that count calls under
`steps_per_execution`) are about the list as a whole, and live here too.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from hooks2callbacks._fetch import Plan
from hooks2callbacks._seams import SessionRunHook
from hooks2callbacks._translate import refusal

HOOK_METHODS = ("begin", "after_create_session", "before_run", "after_run", "end")

# A list of hooks, or a zero-argument function that builds them in the adapter graph.
Hooks = Sequence[Any] | Callable[[], Any]


def overridden(hook: Any, method: str) -> Callable[..., Any] | None:
    """Returns `hook.method`, or None when it is missing or SessionRunHook's no-op."""
    fn = getattr(hook, method, None)
    if getattr(type(hook), method, None) is getattr(SessionRunHook, method):
        return None
    return fn


# The stock hooks' before_run/after_run never use the default graph (checked
# for each of them), so a step of stock hooks alone skips the graph switch.
STOCK_MODULE = "tensorflow.python.training.basic_session_run_hooks"


class Bound:
    """A hook with its methods looked up once, and its fetch plan."""

    __slots__ = (
        "after_name",
        "after_run",
        "before_name",
        "before_run",
        "cached",
        "fetch_name",
        "hook",
        "needs_graph",
        "plan",
    )

    def __init__(self, hook: Any) -> None:
        self.hook = hook
        self.before_name = f"{type(hook).__name__}.before_run()"
        self.after_name = f"{type(hook).__name__}.after_run()"
        self.fetch_name = f"the fetches of {type(hook).__name__}.before_run"
        self.before_run = overridden(hook, "before_run")
        self.after_run = overridden(hook, "after_run")
        self.needs_graph = any(
            fn is not None and getattr(fn, "__module__", None) != STOCK_MODULE
            for fn in (self.before_run, self.after_run)
        )
        self.cached: Plan | None = None
        self.plan: Plan | None = None


def is_hook(obj: Any) -> bool:
    """Whether `obj` is a hook instance: it has some of the hook methods."""
    return not isinstance(obj, type) and any(callable(getattr(obj, name, None)) for name in HOOK_METHODS)


def is_factory(obj: Any) -> bool:
    """Whether `obj` is a function that builds hooks, rather than hooks."""
    return callable(obj) and not is_hook(obj) and not isinstance(obj, type)


def as_hook_list(hooks: Any, where: str = "HookCallback(hooks=...)") -> list[Any]:
    """Validates `hooks` (one hook or a sequence of hooks) and returns it as a list.

    Args:
        hooks: What the user gave, or what their hooks factory returned.
        where: Names the origin of `hooks` in error messages.

    Returns:
        The hooks, in order.

    Raises:
        TypeError: `hooks` is not a hook or a sequence of hooks, or holds a
            hook class, a non-hook, or a hook that cannot run under Keras.
        ValueError: A hook instance appears twice.
    """
    if is_hook(hooks):
        # One hook without a list is checked as a list's items are.
        reason = refusal(hooks)
        if reason is not None:
            raise TypeError(f"{where} got {reason}")
        return [hooks]
    if isinstance(hooks, Mapping):
        raise TypeError(
            f"{where} got a dict ({type(hooks).__name__} with keys {list(hooks)[:5]!r}), whose items "
            "would be its keys. Pass the hooks themselves: list(hooks.values())."
        )
    if isinstance(hooks, (str, bytes, type)) or not isinstance(hooks, Iterable):
        raise TypeError(
            f"{where} takes a hook, a sequence of hooks or a zero-argument function returning "
            f"them, got {hooks!r} of type {type(hooks).__name__}. A hook is any object with "
            f"some of {', '.join(HOOK_METHODS)}, such as a tf.compat.v1.train.SessionRunHook."
        )
    hook_list = list(hooks)
    seen: set[int] = set()
    for index, hook in enumerate(hook_list):
        if isinstance(hook, type):
            raise TypeError(
                f"{where}: item {index} is the class {hook.__name__}, not an instance of it. Pass {hook.__name__}(...)."
            )
        if not is_hook(hook):
            raise TypeError(
                f"{where}: item {index} is {hook!r} of type {type(hook).__name__}, which has "
                f"none of the hook methods {', '.join(HOOK_METHODS)}. Pass "
                "tf.compat.v1.train.SessionRunHook instances, or objects with some of those methods."
            )
        reason = refusal(hook)
        if reason is not None:
            raise TypeError(f"{where}: item {index} is {reason}")
        if id(hook) in seen:
            raise ValueError(
                f"{where}: item {index} ({type(hook).__name__}) appears twice in the list. "
                "Each hook instance would be called twice per event; pass it once."
            )
        seen.add(id(hook))
    return hook_list


# Stock hooks whose per-step work is scheduled by the global step (or by time),
# which act at the first execution boundary at or after their step.
_STEP_SCHEDULED = frozenset(
    {
        "StopAtStepHook",
        "CheckpointSaverHook",
        "StepCounterHook",
        "SummarySaverHook",
        "NanTensorHook",
        "GlobalStepWaiterHook",
        "FinalOpsHook",
    }
)


def _counts_calls(bound: Bound) -> bool:
    """Whether a hook would behave differently when called once per N steps."""
    if bound.before_run is None and bound.after_run is None:
        return False
    hook = bound.hook
    if type(hook).__module__ != STOCK_MODULE:
        return True  # a custom hook: it may count its calls as steps
    if type(hook).__name__ == "LoggingTensorHook":
        return getattr(getattr(hook, "_timer", None), "_every_steps", None) is not None
    return type(hook).__name__ not in _STEP_SCHEDULED


# The stock hooks whose output is lines of TF's logger at INFO.
_LOGS_AT_INFO = (tf.compat.v1.train.LoggingTensorHook, tf.compat.v1.train.StepCounterHook)
_warned_logging = False


def warn_silent_logging(hooks: Sequence[Any]) -> None:
    """Says once per process that hooks which log at INFO print nothing at TF's default level (WARNING)."""
    global _warned_logging  # pylint: disable=global-statement
    if _warned_logging or tf.get_logger().getEffectiveLevel() <= logging.INFO:
        return
    logging_hooks = sorted({type(h).__name__ for h in hooks if isinstance(h, _LOGS_AT_INFO)})
    if logging_hooks:
        _warned_logging = True
        warnings.warn(
            f"HookCallback: {', '.join(logging_hooks)} log at INFO, and TF's logger is at "
            f"{logging.getLevelName(tf.get_logger().getEffectiveLevel())}, so their lines are dropped. "
            'Add tf.get_logger().setLevel("INFO") before fit (TF1 scripts called '
            "tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)).",
            UserWarning,
            stacklevel=2,
        )


def steps_per_execution(model: Any) -> int:
    """The steps Keras runs between two batch callbacks."""
    value: Any = getattr(model, "steps_per_execution", None)
    if hasattr(value, "numpy"):  # tf_keras: a (possibly mirrored) tf.Variable
        value = value.numpy()
    return int(value or 1)


def warn_steps_per_execution(model: Any, bound: list[Bound]) -> None:
    """Warns when Keras calls the hooks once per N steps and some hook counts calls."""
    per_execution = steps_per_execution(model)
    counting = [type(b.hook).__name__ for b in bound if _counts_calls(b)]
    if per_execution > 1 and counting:
        warnings.warn(
            f"HookCallback: the model was compiled with steps_per_execution={per_execution}, so "
            f"hooks are called once per {per_execution} steps, and these hooks may count those "
            f"calls as steps: {', '.join(counting)} (LoggingTensorHook(every_n_iter=k) logs every "
            f"{per_execution}*k steps). The global-step schedules of StopAtStepHook and the "
            "checkpoint, summary and step-counter hooks act at the first execution boundary at "
            "or after their step. For a call per step, compile with steps_per_execution=1.",
            UserWarning,
            stacklevel=2,
        )
