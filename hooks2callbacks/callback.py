"""`HookCallback`: TF1 `SessionRunHook`s run inside Keras `fit`, `evaluate` and `predict`.

The mapping, for a callback of mode "train" (Keras events on the left; "eval"
uses the `on_test_*` events, "predict" the `on_predict_*` events):

  on_train_begin:
    graph = a new adapter graph (global step, log-key tensors, a saver of the
            Keras model in SAVERS), made default
    if hooks is a factory: hooks = hooks()  # may build ops over log tensors
    call hooks.begin()                      # in list order; may build ops
    finalize graph
    call hooks.after_create_session(session, coord)
  on_train_batch_begin:
    run_context = SessionRunContext(original_args, session)   # shared by all hooks
    call hooks.before_run(run_context)      # each returns None or SessionRunArgs
  (Keras runs the train step)
  on_train_batch_end(logs):
    if any hook fetched an op derived from the logs: one real Session.run,
        with the log values fed to their tensors
    call hooks.after_run(run_context, SessionRunValues(results, ...))
    if run_context.stop_requested: model.stop_training = True
  on_train_end:
    call hooks.end(session)
    close session, flush summary writers

What `results` holds, per hook:
  * the structure of its fetches, leaf by leaf: a log key gives the float Keras
    reported (an epoch-to-date mean, as Keras logs are), the global step gives
    its *stale* value (from before this step's increment, as in TF1), a
    derived tensor gives the value the graph run computed for it;
  * when `before_run` returned None: a read-only mapping of the step's logs.

On stop: the step that requested it is the last; Keras still finishes the
epoch's bookkeeping (`on_epoch_end`, validation) and then `end()` runs.

On error: an exception raised by a hook propagates unchanged, with a note that
names the hook and method. As in TF1, `after_run` of the failing step and all
`end()` calls are skipped; the session is closed and summary writers are
flushed. When Keras itself raises, it calls no callback; the run left open is
closed (without `end()`) at the next `begin`, or by `HookCallback.close()`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import keras

from hooks2callbacks._dispatch import HookRunner, as_hook_list, is_factory

MODES = ("train", "eval", "predict")
_STOP_ATTRIBUTE = {"train": "stop_training", "eval": "stop_evaluating", "predict": "stop_predicting"}
_KERAS_CALL = {"train": "fit()", "eval": "evaluate() or fit(validation_data=...)", "predict": "predict()"}


def _initial_step(model: Any) -> int:
    optimizer = getattr(model, "optimizer", None)
    iterations = getattr(optimizer, "iterations", None)
    return 0 if iterations is None else int(keras.ops.convert_to_numpy(iterations))


class HookCallback(keras.callbacks.Callback):
    """Runs TF1 `SessionRunHook`s as a Keras callback.

    Example:

    ```python
    hooks = [
        tf.compat.v1.train.StopAtStepHook(last_step=500),
        tf.compat.v1.train.LoggingTensorHook(["loss", "accuracy"], every_n_iter=100),
    ]
    model.fit(x, y, epochs=10, callbacks=[HookCallback(hooks)])
    model.evaluate(x, y, callbacks=[HookCallback(eval_hooks, mode="eval")])
    ```

    Args:
        hooks: One hook or a sequence of hooks, called in order. A hook is any
            object with some of `begin`, `after_create_session`, `before_run`,
            `after_run` and `end`; missing methods are no-ops. Or a
            zero-argument function returning them: it is called at the start
            of each run with the adapter graph as default graph, so it can
            build ops such as summaries over `log_tensor("loss")`, as a TF1
            `model_fn` built them.
        mode: `"train"` (the `fit` loop), `"eval"` (`evaluate`, and each
            validation pass inside `fit`) or `"predict"`. Defaults to `"train"`.

    Raises:
        TypeError: `hooks` is not a hook, a sequence of hooks or a function,
            or holds a hook class or a hook that cannot run under Keras
            (`FeedFnHook`, `ProfilerHook`, a `CheckpointSaverHook` with its own
            saver).
        ValueError: `mode` is not one of the modes, or a hook appears twice.
    """

    def __init__(self, hooks: Any | Callable[[], Any], mode: str = "train") -> None:
        super().__init__()
        if not isinstance(mode, str) or mode not in MODES:
            raise ValueError(f"HookCallback(mode=...) must be one of {MODES}, got {mode!r}.")
        self.hooks: Sequence[Any] | Callable[[], Any] = hooks if is_factory(hooks) else tuple(as_hook_list(hooks))
        self.mode = mode
        self._runner: HookRunner | None = None
        self._in_fit = False
        self._first_batch = 0

    def __repr__(self) -> str:
        if callable(self.hooks):
            hooks = getattr(self.hooks, "__qualname__", repr(self.hooks))
        else:
            hooks = f"[{', '.join(type(h).__name__ for h in self.hooks)}]"
        return f"HookCallback(mode={self.mode!r}, hooks={hooks})"

    # -- run lifetime ----------------------------------------------------------

    def _start(self, mode: str) -> None:
        if mode != self.mode:
            raise ValueError(
                f"{self!r} was passed to a Keras {_KERAS_CALL[mode]} call, where its hooks would "
                f"never run. Use HookCallback(..., mode={mode!r}) there, or pass this callback "
                f"to {_KERAS_CALL[self.mode]}."
            )
        self.close()
        self._runner = HookRunner(
            self.hooks, self.model, _initial_step(self.model), advances=mode == "train"
        )
        self._runner.begin()

    def _finish(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.end()

    def close(self) -> None:
        """Closes a run that an exception in Keras left open, without calling `end()`.

        `begin` of the next run does this too; call it to release the session
        and flush writers right after a failed `fit`.
        """
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.close()

    def _batch_begin(self, batch: int) -> None:
        runner = self._runner
        if runner is not None:
            self._first_batch = batch
            runner.before_run()

    def _batch_end(self, batch: int, logs: Any, mode: str) -> None:
        runner = self._runner
        if runner is not None and runner.after_run(logs or {}, batch - self._first_batch + 1):
            setattr(self.model, _STOP_ATTRIBUTE[mode], True)

    # -- Keras events ------------------------------------------------------------

    def on_train_begin(self, logs: Any = None) -> None:
        self._in_fit = True
        if self.mode != "eval":  # eval-mode callbacks run on the validation passes
            self._start("train")

    def on_train_end(self, logs: Any = None) -> None:
        self._in_fit = False
        if self.mode == "train":
            self._finish()

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.mode == "train":
            self._batch_begin(batch)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.mode == "train":
            self._batch_end(batch, logs, "train")

    def on_test_begin(self, logs: Any = None) -> None:
        # A train-mode callback ignores the validation passes inside fit().
        if self.mode == "eval" or not self._in_fit:
            self._start("eval")

    def on_test_end(self, logs: Any = None) -> None:
        if self.mode == "eval":
            self._finish()

    def on_test_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.mode == "eval":
            self._batch_begin(batch)

    def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.mode == "eval":
            self._batch_end(batch, logs, "eval")

    def on_predict_begin(self, logs: Any = None) -> None:
        self._start("predict")

    def on_predict_end(self, logs: Any = None) -> None:
        if self.mode == "predict":
            self._finish()

    def on_predict_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.mode == "predict":
            self._batch_begin(batch)

    def on_predict_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.mode == "predict":
            self._batch_end(batch, logs, "predict")
