"""What hooks ask of a step's run through RunOptions (`SessionRunArgs.options`, `session.run(options=...)`).

TF1's `MonitoredSession` merged every hook's RunOptions into the step's one `Session.run`. Keras's
step is a compiled function of its backend that takes no RunOptions, so each field a hook sets is
honoured as far as TF2 allows (`report_tensor_allocations_upon_oom`: the step's out-of-memory error
carries what TF2 knows of the device's memory), or said once per run, naming the hook, the field and
the way out; `trace_level` is refused. `SessionRunValues.options` holds the step's merged options as
in TF1. docs/errors.md has the table.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from hooks2callbacks._flavours import is_tf_keras
from hooks2callbacks._seams import SessionRunArgs

NO_OPTIONS = tf.compat.v1.RunOptions()
_NO_TRACE = tf.compat.v1.RunOptions.NO_TRACE


def check_args(where: str, args: Any) -> None:
    """Raises for a `before_run` result that is not usable `SessionRunArgs`."""
    if not isinstance(args, SessionRunArgs):
        raise TypeError(
            f"{where} returned {args!r} of type {type(args).__name__}. It must return "
            "None or tf.compat.v1.train.SessionRunArgs(fetches)."
        )
    if args.options is not None and args.options.trace_level != _NO_TRACE:
        raise ValueError(
            f"{where} requested RunOptions with trace_level="
            f"{tf.compat.v1.RunOptions.TraceLevel.Name(args.options.trace_level)}. Keras "
            "steps cannot be traced through RunOptions; profile with "
            "keras.callbacks.TensorBoard(profile_batch=...) instead."
        )


_REPORT_OOM = "report_tensor_allocations_upon_oom"

# Why each RunOptions field other than trace_level (refused) and report_tensor_allocations_upon_oom
# (honoured as TF2 allows) cannot be honoured on Keras's step, and the way out. docs/errors.md has the table.
_UNHONOURED = {
    "timeout_in_ms": (
        "Keras's step is a compiled function of its backend, not a Session.run, and takes no RunOptions, "
        "so it has no timeout. Remove the option; under tf.distribute, bound how long collectives wait "
        "with tf.distribute.experimental.CommunicationOptions(timeout_seconds=...)."
    ),
    "inter_op_thread_pool": (
        "Keras's step is not a Session.run: it runs on its backend's own threads (on TensorFlow, TF2's "
        "one inter-op thread pool; a session's extra pools, ConfigProto.session_inter_op_thread_pool, "
        "do not exist in TF2's runtime). Remove the option; on TensorFlow, size that pool before TF "
        "starts with tf.config.threading.set_inter_op_parallelism_threads(n)."
    ),
    "output_partition_graphs": (
        "Keras's step is not a Session.run, so no partition graphs come back: "
        "run_values.run_metadata.partition_graphs stays empty. Remove the option; "
        "keras.callbacks.TensorBoard(write_graph=True) writes the step's graph."
    ),
    "debug_options": (
        "tfdbg's tensor watches are not run on Keras's step. Remove the option; on TensorFlow, TF2's "
        "debugger dumps the step's tensors: call tf.debugging.experimental.enable_dump_debug_info(dump_root, "
        "tensor_debug_mode='FULL_HEALTH') before fit, and read the dump in TensorBoard's Debugger V2."
    ),
    "experimental": (
        "TF1's MonitoredSession did not pass a hook's RunOptions.experimental (collective_graph_key, "
        "use_run_handler_pool, run_handler_pool_options) to the run either: it merged only the other "
        "fields. Nothing changes from TF1; remove the option to silence this warning."
    ),
}
_UNKNOWN_FIELD = "HookCallback knows no TF2 equivalent of this field for Keras's step. Remove the option."

_OOM_OWN_LOOP = (
    "in a training loop of your own, HookCallback does not run the step, so it cannot add what TF2 "
    "knows about the device's memory to its error. Catch tf.errors.ResourceExhaustedError around your "
    "step and read tf.config.experimental.get_memory_info(device) there."
)
_OOM_BACKEND = (
    "the model runs on the %s backend, whose out-of-memory errors HookCallback does not annotate "
    "(it reads TensorFlow's). Read the backend's own memory statistics: jax.Device.memory_stats(), "
    "torch.cuda.memory_summary()."
)
_OOM_TF_KERAS_EVAL = (
    "tf_keras's evaluate() calls its step through a runner that HookCallback does not wrap, so an "
    "out-of-memory error there carries no report. In fit() the report is made; to find what fills "
    "the memory, profile the step with tf_keras.callbacks.TensorBoard(profile_batch=...)."
)


def _oom_unreachable(where: str, why: str) -> str:
    return (
        f"HookCallback: {where} asked for RunOptions(report_tensor_allocations_upon_oom=True), which "
        f"cannot be honoured here: {why}"
    )


def _shown(options: tf.compat.v1.RunOptions, name: str) -> str:
    """A RunOptions field's value as a hook would have written it."""
    value = getattr(options, name)
    if name == "trace_level":
        return str(tf.compat.v1.RunOptions.TraceLevel.Name(value))
    if isinstance(value, (bool, int)):
        return repr(value)
    return f"{type(value).__name__}(...)"  # a message: DebugOptions, Experimental


def merge_run_options(options: tf.compat.v1.RunOptions, incoming: tf.compat.v1.RunOptions) -> None:
    """Merges `incoming` into `options` as TF1's `_HookedSession._merge_run_options` does.

    Numbers take the larger, flags the OR, tensor watches are extended; `experimental` is
    not merged (TF1 did not merge it either).
    """
    options.trace_level = max(options.trace_level, incoming.trace_level)
    options.timeout_in_ms = max(options.timeout_in_ms, incoming.timeout_in_ms)
    options.inter_op_thread_pool = max(options.inter_op_thread_pool, incoming.inter_op_thread_pool)
    options.output_partition_graphs = options.output_partition_graphs or incoming.output_partition_graphs
    options.debug_options.debug_tensor_watch_opts.extend(incoming.debug_options.debug_tensor_watch_opts)
    options.debug_options.reset_disk_byte_usage = (
        options.debug_options.reset_disk_byte_usage or incoming.debug_options.reset_disk_byte_usage
    )
    options.report_tensor_allocations_upon_oom = (
        options.report_tensor_allocations_upon_oom or incoming.report_tensor_allocations_upon_oom
    )


class StepOptions:
    """The RunOptions hooks ask for in one run: merged per step, honoured or said once.

    Args:
        model: The Keras model whose step function the run's loop calls.
        step_function: The name of that function on the model (`"train_function"`, ...).
        own_loop: Whether the user's own training loop runs the step (not Keras's).

    Attributes:
        options: The step's options, merged from the hooks' as TF1's `MonitoredSession`
            merged them; None when no hook asked for any (usually).
    """

    __slots__ = ("askers", "_model", "_own_loop", "report", "_step_function", "_unreachable", "_warned", "options")

    def __init__(self, model: Any, step_function: str, own_loop: bool) -> None:
        self._model = model
        self._step_function = step_function
        self._own_loop = own_loop
        self.options: tf.compat.v1.RunOptions | None = None
        # The hooks that asked for report_tensor_allocations_upon_oom in this step.
        self.askers: list[str] = []
        self.report: _OomReport | None = None
        self._unreachable: str | None = None  # why the report cannot be made ("": it can); None: not asked yet
        # (hook method, what it asked for) already warned of in this run: each is said once.
        self._warned: set[tuple[str, str]] = set()

    def new_step(self) -> None:
        """Forgets the previous step's options."""
        if self.options is not None:
            self.options, self.askers = None, []

    def request(self, where: str, options: tf.compat.v1.RunOptions) -> None:
        """Takes a hook's RunOptions for the step: each field it sets is honoured, or said once
        that it cannot be, naming the hook, the field and the way out.

        `trace_level` is refused earlier (`check_args`). The fields are merged into the
        step's options as TF1's `MonitoredSession` merged them (`SessionRunValues.options`).
        """
        for field, _ in options.ListFields():
            name = field.name
            if name == _REPORT_OOM:
                self._ask_report(where)
            elif name != "trace_level":
                self.warn_once(
                    where,
                    name,
                    f"HookCallback: {where} asked for RunOptions({name}={_shown(options, name)}), which "
                    f"cannot be honoured: {_UNHONOURED.get(name, _UNKNOWN_FIELD)}",
                )
        if self.options is None:
            self.options = tf.compat.v1.RunOptions()
        merge_run_options(self.options, options)

    def _ask_report(self, where: str) -> None:
        """A hook asked for the allocations on OOM: the step's error will carry what TF2 can say."""
        if self._unreachable is None:
            self._unreachable = self._why_unreachable()
        if self._unreachable:
            self.warn_once(where, _REPORT_OOM, _oom_unreachable(where, self._unreachable))
        else:
            self.askers.append(where)

    def _why_unreachable(self) -> str:
        """Why this run cannot note the step's out-of-memory error; empty where it can."""
        model = self._model
        if self._own_loop:
            return _OOM_OWN_LOOP
        if not is_tf_keras(model) and keras.backend.backend() != "tensorflow":
            return _OOM_BACKEND % keras.backend.backend()
        if self._step_function == "test_function" and is_tf_keras(model):
            return _OOM_TF_KERAS_EVAL
        return ""

    def warn_once(self, where: str, what: str, message: str) -> None:
        """Warns with `message`, once per run for each hook method and what it asked for."""
        if (where, what) in self._warned:
            return
        self._warned.add((where, what))
        warnings.warn(message, UserWarning, stacklevel=3)

    def session_options_unused(self, where: str, options: tf.compat.v1.RunOptions) -> None:
        """For `session.run(..., options=...)` that HookCallback answered without a graph run.

        Says once, for each field set, that there was no run to apply it to.
        """
        for field, _ in options.ListFields():
            self.warn_once(
                where,
                f"session.run {field.name}",
                f"HookCallback: {where} passed RunOptions({field.name}={_shown(options, field.name)}) to "
                "session.run, but every fetch was answered from Keras's step (log keys, the global step, "
                "model variables) without a graph run: there was no run for the option to apply to, and "
                "run_metadata stays empty. Keras's step takes no RunOptions. Options apply to fetches of "
                "ops the hook built, which run in a real session; to profile Keras's step, use "
                "keras.callbacks.TensorBoard(profile_batch=...).",
            )

    def wrap_step(self, step: int) -> None:
        """Makes Keras's loop call the model's step through `_OomReport` for this step."""
        function = getattr(self._model, self._step_function, None)
        if function is None:
            return
        self.report = report = _OomReport(function, self, tuple(self.askers), step)
        # Past Keras's __setattr__, as `_batch` sets it: nothing for it to track.
        object.__setattr__(self._model, self._step_function, report)

    def unwrap_step(self) -> None:
        """Gives the model back the step function it had before `_wrap_step`."""
        report = self.report
        if report is None:
            return
        self.report = None
        function = report.function
        if getattr(self._model, self._step_function, None) is report:
            object.__setattr__(self._model, self._step_function, function)


class _OomReport:
    """The model's step function, for one step in which a hook asked for
    `report_tensor_allocations_upon_oom`.

    TF1 passed the option to the step's `Session.run`, and TF's out-of-memory error then
    listed the tensors allocated on the device. Keras's step is a `tf.function`, which takes
    no RunOptions, so that list cannot be made. When the step runs out of memory, the error
    (still a `tf.errors.ResourceExhaustedError`, the same object on Python 3.11+) gets a
    note naming the hooks that asked and the step, with what TF2 can say about the device's
    memory (`tf.config.experimental.get_memory_info`).
    """

    __slots__ = ("askers", "function", "runner", "step")

    def __init__(self, function: Callable[..., Any], runner: StepOptions, askers: tuple[str, ...], step: int) -> None:
        self.function = function
        self.runner = runner
        self.askers = askers
        self.step = step

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.function(*args, **kwargs)
        except tf.errors.ResourceExhaustedError as error:
            # Keras calls no callback after a failed step: the model gets its function back now.
            self.runner.unwrap_step()
            report = _oom_note(error, self.askers, self.step)
            if hasattr(error, "add_note"):  # Python 3.11+: the same error, with a note
                error.add_note(report)
                raise
            # Python 3.10 shows no notes: the same type, with the report in its message.
            raise type(error)(error.node_def, error.op, f"{error.message}\n\n{report}") from error


# TF's out-of-memory message names the device: "... on /job:localhost/replica:0/task:0/device:GPU:0 by allocator ..."
_OOM_DEVICE = re.compile(r" on (/\S*device:([A-Za-z_]+):(\d+))")


def _oom_note(error: tf.errors.ResourceExhaustedError, askers: Sequence[str], step: int) -> str:
    """What TF2 can say, for the hooks that asked for allocations on OOM, about the device's memory."""
    match = _OOM_DEVICE.search(error.message or "")
    if match is not None:
        devices = [(match.group(1), f"{match.group(2)}:{match.group(3)}")]
    else:  # no device named: every GPU's
        devices = [(d.name, d.name.split("device:")[-1]) for d in tf.config.list_logical_devices("GPU")]
    lines = [_device_memory(full, short) for full, short in devices] or ["no device is named in the error"]
    asked = " and ".join(askers)
    return (
        f"HookCallback: {asked} asked for RunOptions(report_tensor_allocations_upon_oom=True) for "
        f"this step (global step {step}). Keras runs its step without RunOptions, so TF cannot list the "
        "tensors that were allocated (its hint to add that option does not apply to Keras's step). "
        "What TF2 can say about the device's memory: " + "; ".join(lines) + ". To see what fills it, "
        "profile a step with keras.callbacks.TensorBoard(profile_batch=...) (the profiler's memory "
        "profile), or lower the batch size."
    )


def _device_memory(full: str, short: str) -> str:
    try:
        info = tf.config.experimental.get_memory_info(short)
    except (ValueError, tf.errors.OpError) as why:
        return f"{full}: no memory statistics (tf.config.experimental.get_memory_info: {str(why).strip()})"
    if short.upper().startswith("CPU") and not any(info.values()):
        return (
            f"{full}: TF recorded no allocations on this CPU device before the step "
            "(tf.config.experimental.get_memory_info reports 0 bytes), so there is nothing more to say"
        )
    return (
        f"{full}: {_mib(info['current'])} in use after the failed step, peak {_mib(info['peak'])} since TF "
        "started or the last tf.config.experimental.reset_memory_stats (tf.config.experimental.get_memory_info)"
    )


def _mib(count: int) -> str:
    return f"{count / 2**20:.1f} MiB"
