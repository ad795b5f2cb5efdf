"""`python -m hooks2callbacks`: TF1 hooks, unchanged, inside Keras 3 `fit` and `evaluate`.

Trains a small classifier on scikit-learn's handwritten digits (8x8 images,
bundled with scikit-learn, so no download) with stock TF1 hooks and a custom
duck-typed hook run through `HookCallback`, then evaluates it with a TF1
logging hook. A `CheckpointSaverHook` saves the Keras model; the demo restores
the newest checkpoint into a fresh model and compares their predictions. The
hooks' log lines and a short summary go to stdout.

Needs scikit-learn: `pip install scikit-learn` (in a checkout: `pip install ".[demo]"`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

_DEMO_EXTRA_HINT = (
    "The hooks2callbacks demo needs scikit-learn (for its bundled digits data set). "
    'Install it with:  pip install scikit-learn  (or, in a checkout of hooks2callbacks:  pip install ".[demo]")'
)


# What TensorFlow's C++ runtime prints to stderr while it loads, before it reads
# TF_CPP_MIN_LOG_LEVEL (oneDNN's notice, "Could not find cuda drivers", the CPU
# feature notice, absl's own preamble): lines that are not about the demo.
_START_UP_LINE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IW]\d{4} [\d:. ]+\d+ \w+\.cc:\d+\] .*"
    r"|To enable the following instructions: .*)$"
)


def _load_tensorflow_quietly() -> None:
    """Imports TensorFlow and Keras without their C++ start-up lines, unless the user chose.

    A user who set `TF_CPP_MIN_LOG_LEVEL` gets TensorFlow's logs as they asked. Otherwise the
    level is set to 3 (errors and below hidden once TensorFlow reads it), and what the C++
    runtime writes to stderr while it loads, before it reads the level, is held back: start-up
    notices are dropped, and any other line is written to stderr afterwards, as is everything
    if the import fails.
    """
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ or "tensorflow" in sys.modules:
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    sys.stderr.flush()
    saved = os.dup(2)
    failed = True
    with tempfile.TemporaryFile(mode="w+b") as held:
        os.dup2(held.fileno(), 2)
        try:
            import keras  # noqa: F401
            import tensorflow  # noqa: F401

            failed = False
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode(errors="replace").splitlines()
            kept = lines if failed else [line for line in lines if not _START_UP_LINE.match(line)]
            if kept:
                print("\n".join(kept), file=sys.stderr, flush=True)


class StepRecorderHook:
    """A custom hook: a plain class, not a `SessionRunHook` subclass.

    `HookCallback` accepts any object with some of the hook methods. This one
    fetches the global step and the Keras log key `"loss"` at every step and
    records them, and notes the step at which another hook requested a stop
    (the `SessionRunContext` is shared by all hooks of a step).

    Attributes:
        records: `(global_step, loss)` per step. The step is the stale value
            from before the step's own increment, as in TF1; the loss is that
            batch's own loss, as a TF1 loss tensor held it (not the running
            mean Keras's progress bar shows).
        stop_seen_at: The number of steps done when a stop was first
            requested, or None.
        ended: Whether `end()` was called.
    """

    def __init__(self) -> None:
        self.records: list[tuple[int, float]] = []
        self.stop_seen_at: int | None = None
        self.ended = False
        self._fetches: dict[str, Any] | None = None

    def begin(self) -> None:
        import tensorflow as tf

        # As TF1 hooks do: look graph elements up in begin(); "loss" is a Keras log key.
        self._fetches = {"step": tf.compat.v1.train.get_global_step(), "loss": "loss"}

    def before_run(self, run_context: Any) -> Any:
        import tensorflow as tf

        return tf.compat.v1.train.SessionRunArgs(self._fetches)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        step = int(run_values.results["step"])
        self.records.append((step, float(run_values.results["loss"])))
        if run_context.stop_requested and self.stop_seen_at is None:
            self.stop_seen_at = step + 1

    def end(self, session: Any) -> None:
        self.ended = True


@contextlib.contextmanager
def _show_tensorflow_logs(stream: Any) -> Iterator[None]:
    """Shows the `tensorflow` logger's INFO lines (where TF1 hooks log) on `stream`.

    The logger's level, handlers and propagation are restored afterwards.
    """
    logger = logging.getLogger("tensorflow")
    saved = (logger.level, list(logger.handlers), logger.propagate)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("  [tensorflow %(levelname)s] %(message)s"))
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        handler.flush()
        logger.setLevel(saved[0])
        logger.handlers = saved[1]
        logger.propagate = saved[2]


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m hooks2callbacks",
        description=(
            "Demo: train a small Keras model on scikit-learn's handwritten digits with "
            "TF1 SessionRunHooks (StopAtStepHook, LoggingTensorHook, NanTensorHook, "
            "CheckpointSaverHook and a custom hook) run through hooks2callbacks.HookCallback."
        ),
    )

    def positive_int(text: str) -> int:
        value = int(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
        return value

    parser.add_argument(
        "--last-step",
        type=positive_int,
        default=300,
        help="StopAtStepHook(last_step=...): the training step to stop at (default: 300)",
    )
    parser.add_argument(
        "--log-every",
        type=positive_int,
        default=50,
        help="LoggingTensorHook(every_n_iter=...) during training (default: 50)",
    )
    parser.add_argument(
        "--epochs",
        type=positive_int,
        default=100,
        help="fit(epochs=...): an upper bound; StopAtStepHook normally stops first (default: 100)",
    )
    parser.add_argument("--batch-size", type=positive_int, default=32, help="batch size (default: 32)")
    parser.add_argument("--seed", type=int, default=0, help="random seed for the split and the model (default: 0)")
    parser.add_argument(
        "--checkpoint-dir",
        default=None,
        help="CheckpointSaverHook's directory, kept afterwards (default: a temporary one, removed)",
    )
    parser.add_argument("--version", action="version", version=f"hooks2callbacks {_version()}")
    return parser.parse_args(argv)


def _version() -> str:
    from hooks2callbacks import __version__  # pylint: disable=import-outside-toplevel

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the demo: trains and evaluates with TF1 hooks, and prints a summary.

    Args:
        argv: Command-line arguments, without the program name; None reads
            `sys.argv[1:]`.

    Returns:
        The exit status: 0 on success, 1 if scikit-learn is not installed.
    """
    args = _parse_args(argv)
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        print(_DEMO_EXTRA_HINT, file=sys.stderr)
        return 1

    _load_tensorflow_quietly()
    import keras
    import tensorflow as tf

    from hooks2callbacks import HookCallback, restore_checkpoint

    started = time.perf_counter()
    out = sys.stdout

    # -- data and model --------------------------------------------------------
    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = digits.target.astype("int64")
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=args.seed)
    steps_per_epoch = math.ceil(len(x_train) / args.batch_size)

    def build_model() -> keras.Model:
        model = keras.Sequential(
            [
                keras.Input((x.shape[1],)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        return model

    keras.utils.set_random_seed(args.seed)
    model = build_model()
    # A temporary directory is removed below, or at exit if training fails.
    scratch = None
    checkpoint_dir = args.checkpoint_dir
    if checkpoint_dir is None:
        scratch = tempfile.TemporaryDirectory(prefix="hooks2callbacks-demo-")
        checkpoint_dir = scratch.name

    # -- the hooks: stock TF1 hooks, unchanged, plus a duck-typed one ----------
    stop_hook = tf.compat.v1.train.StopAtStepHook(last_step=args.last_step)
    # "global_step" is a graph tensor name, "loss" and "accuracy" are Keras log keys:
    # hooks get each batch's own values, as TF1 tensors held them.
    train_logging_hook = tf.compat.v1.train.LoggingTensorHook(
        {"step": "global_step", "loss": "loss", "accuracy": "accuracy"}, every_n_iter=args.log_every
    )
    nan_hook = tf.compat.v1.train.NanTensorHook("loss")
    recorder = StepRecorderHook()
    # Saves the Keras model at step 0, every 200 steps and at the end, as model.ckpt-<step>.
    checkpoint_hook = tf.compat.v1.train.CheckpointSaverHook(checkpoint_dir, save_steps=200)
    train_hooks = [stop_hook, train_logging_hook, nan_hook, checkpoint_hook, recorder]
    eval_logging_hook = tf.compat.v1.train.LoggingTensorHook(
        {"loss": "loss", "accuracy": "accuracy"}, every_n_iter=4, at_end=True
    )

    print(
        f"hooks2callbacks demo: digits, {len(x_train)} train / {len(x_test)} test samples, "
        f"{x.shape[1]} features, 10 classes",
        file=out,
    )
    print(
        f"Training with batch size {args.batch_size} ({steps_per_epoch} steps per epoch), "
        f"up to {args.epochs} epochs, hooks: {', '.join(type(h).__name__ for h in train_hooks)}",
        file=out,
    )
    out.flush()

    with _show_tensorflow_logs(out):
        history = model.fit(
            x_train,
            y_train,
            batch_size=args.batch_size,
            epochs=args.epochs,
            verbose=0,
            callbacks=[HookCallback(train_hooks)],
        )
        print(
            "Evaluating on the test set, hooks: LoggingTensorHook (every 4 batches and at end; "
            "the evaluation's aggregates so far, as TF1's streaming eval metrics)",
            file=out,
        )
        out.flush()
        scores = model.evaluate(
            x_test,
            y_test,
            batch_size=args.batch_size,
            verbose=0,
            return_dict=True,
            callbacks=[HookCallback([eval_logging_hook], mode="eval")],
        )

    # -- the checkpoint the hook wrote, restored into a fresh model ---------------
    restored_model = build_model()
    restored_path = restore_checkpoint(restored_model, checkpoint_dir)
    difference = float(abs(restored_model.predict(x_test, verbose=0) - model.predict(x_test, verbose=0)).max())
    restored_step = int(keras.ops.convert_to_numpy(restored_model.optimizer.iterations))
    step_by_name = int(tf.train.load_variable(restored_path, "global_step"))  # as TF1 tools read it
    if scratch is not None:
        scratch.cleanup()

    # -- summary ------------------------------------------------------------------
    steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    epoch = (steps - 1) // steps_per_epoch + 1 if steps else 0
    batch = (steps - 1) % steps_per_epoch + 1 if steps else 0
    if recorder.stop_seen_at is not None:
        why = f"StopAtStepHook requested a stop (last_step={args.last_step})"
    elif len(history.epoch) >= args.epochs:
        why = f"fit() ran all {args.epochs} epochs before last_step={args.last_step}"
    else:
        why = "unknown"

    print("Summary", file=out)
    print(f"  steps trained (model.optimizer.iterations): {steps}", file=out)
    print(f"  stopped at step {steps}, epoch {epoch} batch {batch}/{steps_per_epoch}: {why}", file=out)
    if recorder.records:
        first_step, first_loss = recorder.records[0]
        last_step, last_loss = recorder.records[-1]
        print(
            f"  StepRecorderHook: {len(recorder.records)} steps recorded; loss {first_loss:.4f} "
            f"at global step {first_step} -> {last_loss:.4f} at global step {last_step} "
            "(each step as a TF1 hook read it, before that step's own update; each batch's own loss)",
            file=out,
        )
    print(f"  test loss {scores['loss']:.4f}, test accuracy {scores['accuracy']:.4f}", file=out)
    print(
        f"  CheckpointSaverHook: restored {restored_path.rsplit('/', 1)[-1]} into a fresh model at step "
        f"{restored_step}; its test predictions differ from the trained model's by at most {difference:g}; "
        f'TF1 tools read it by name too: tf.train.load_variable(path, "global_step") = {step_by_name}',
        file=out,
    )
    if args.checkpoint_dir is None:
        print(
            "  (the checkpoints were in a temporary folder, now removed; keep them with --checkpoint-dir DIR)", file=out
        )
    print(f"  done in {time.perf_counter() - started:.1f} s", file=out)
    out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
