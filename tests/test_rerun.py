"""Re-run traps of a notebook: a reused StopAtStepHook(num_steps=...), a checkpoint directory ahead of the model."""

from __future__ import annotations

import warnings

import pytest
import tensorflow as tf
from support import iterations, make_data, make_model

from hooks2callbacks import HookCallback, estimator_hooks, restore_checkpoint

X, Y = make_data()  # 320 samples: 10 batches of 32
T = tf.compat.v1.train


def fit(model, hooks, chief_only_hooks=(), epochs=1):
    model.fit(
        X,
        Y,
        batch_size=32,
        epochs=epochs,
        verbose=0,
        callbacks=[HookCallback(hooks, chief_only_hooks=chief_only_hooks)],
    )
    return iterations(model)


def test_a_reused_stop_at_step_hook_says_its_next_run_stops_after_one_step(K):
    stop = T.StopAtStepHook(num_steps=5)
    model = make_model(K)
    assert fit(model, [stop]) == 5
    # The cell run again with the same hook: TF1 keeps last_step=5, so 1 step is trained.
    with pytest.warns(
        UserWarning, match=r"StopAtStepHook\(num_steps=5\) is reused.*last_step=5.*global step 5, stops after 1 step"
    ):
        assert fit(model, [stop]) == 6


def test_a_reused_stop_at_step_hook_of_a_fresh_model_says_how_many_steps_are_left(K):
    stop = T.StopAtStepHook(num_steps=8)
    fit(make_model(K), [stop])
    with pytest.warns(UserWarning, match=r"global step 0, stops after 8 step\(s\), not 8"):
        assert fit(make_model(K), [stop]) == 8


def test_a_new_stop_at_step_hook_or_a_last_step_one_gets_no_note(K):
    model = make_model(K)
    last = T.StopAtStepHook(last_step=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # what the package warns; not TF's own deprecations
        assert fit(model, [T.StopAtStepHook(num_steps=3)]) == 3
        assert fit(model, [T.StopAtStepHook(num_steps=3)]) == 6
        fit(make_model(K), [last])
        fit(make_model(K), [last])  # last_step= is meant to be kept


def test_a_checkpoint_directory_ahead_of_the_model_is_pointed_out(K, tmp_path):
    def saver():
        return [T.CheckpointSaverHook(str(tmp_path), save_steps=5)]

    fit(make_model(K), [T.StopAtStepHook(num_steps=10)], saver())
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("-10")
    # Restored first, as the note advises: the model continues from step 10, with no note.
    model = make_model(K)
    restore_checkpoint(model, str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # what the package warns; not TF's own deprecations
        assert fit(model, [T.StopAtStepHook(num_steps=2)], saver()) == 12
    # A fresh model (the cell that builds it run again), the same directory: the note.
    match = rf"CheckpointSaverHook: {tmp_path} holds a checkpoint of step 12, later than this model's global step 0"
    with pytest.warns(UserWarning, match=match + r".*restore_checkpoint\(model, "):
        fit(make_model(K), [T.StopAtStepHook(num_steps=3)], saver())
    # What it warned of: the directory's latest checkpoint is now the older step.
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("-3")


def test_a_model_dir_that_estimator_hooks_restores_gets_no_note(K, tmp_path):
    """`estimator_hooks(model_dir)` continues from the directory's checkpoint, as Estimator did:
    its CheckpointSaverHook's directory being ahead of the fresh model is no trap."""
    model_dir = str(tmp_path)
    fit(make_model(K), [T.StopAtStepHook(num_steps=10), *estimator_hooks(model_dir, save_checkpoints_steps=5)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # what the package warns; not TF's own deprecations
        warnings.filterwarnings("ignore", message=".*log at INFO.*")  # the stock hooks' silent-logging note
        assert fit(make_model(K), [T.StopAtStepHook(last_step=15), *estimator_hooks(model_dir)]) == 15
