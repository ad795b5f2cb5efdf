"""Tests of the `python -m hooks2callbacks` demo."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest

from hooks2callbacks.__main__ import main


def _hook_lines(text: str) -> list[str]:
    """The LoggingTensorHook lines (the CheckpointSaverHook logs its saves too)."""
    return [line for line in text.splitlines() if line.strip().startswith("[tensorflow INFO]") and "loss = " in line]


def test_demo_stops_at_requested_step_and_shows_hook_output(capsys):
    logger = logging.getLogger("tensorflow")
    before = (logger.level, list(logger.handlers), logger.propagate)

    assert main(["--last-step", "20", "--log-every", "5"]) == 0

    out = capsys.readouterr().out
    assert "steps trained (model.optimizer.iterations): 20" in out
    assert "temporary folder, now removed; keep them with --checkpoint-dir DIR" in out
    assert "stopped at step 20, epoch 1 batch 20/45: StopAtStepHook requested a stop (last_step=20)" in out
    assert "StepRecorderHook: 20 steps recorded" in out
    assert "at global step 0 ->" in out and "at global step 19 (" in out
    accuracy = re.search(r"test accuracy (\d\.\d+)", out)
    assert accuracy is not None and 0.0 <= float(accuracy.group(1)) <= 1.0

    training, _, evaluation = out.partition("Evaluating on the test set")
    # LoggingTensorHook(every_n_iter=5) over 20 steps logs at iterations 0, 5, 10, 15,
    # with the stale global step, as in TF1.
    train_lines = _hook_lines(training)
    assert len(train_lines) == 4, out
    assert [re.search(r"step = (\d+)", line).group(1) for line in train_lines] == ["0", "5", "10", "15"]
    assert all("loss = " in line and "accuracy = " in line for line in train_lines)
    # Eval: 12 batches, every 4 iterations (0, 4, 8) and at_end, which logs evaluate()'s results.
    eval_lines = _hook_lines(evaluation)
    assert len(eval_lines) == 4, out
    final = dict(re.findall(r"(loss|accuracy) = ([\d.]+)", eval_lines[-1]))
    scores = re.search(r"test loss ([\d.]+), test accuracy ([\d.]+)", out)
    assert scores is not None
    assert float(final["loss"]) == pytest.approx(float(scores.group(1)), abs=5e-5)
    assert float(final["accuracy"]) == pytest.approx(float(scores.group(2)), abs=5e-5)

    # The demo restores the tensorflow logger it reconfigured.
    assert (logger.level, list(logger.handlers), logger.propagate) == before
    # CheckpointSaverHook saved at step 0 and at the end; the newest restores exactly.
    assert "Saving checkpoints for 0 into" in training and "Saving checkpoints for 20 into" in training
    assert (
        "CheckpointSaverHook: restored model.ckpt-20 into a fresh model at step 20; its test "
        "predictions differ from the trained model's by at most 0; TF1 tools read it by name too: "
        'tf.train.load_variable(path, "global_step") = 20'
    ) in out


def test_missing_scikit_learn_exits_with_install_hint(monkeypatch, capsys):
    # A None entry in sys.modules makes importing that module raise ImportError.
    for name in ("sklearn", "sklearn.datasets", "sklearn.model_selection"):
        monkeypatch.setitem(sys.modules, name, None)

    assert main([]) == 1

    err = capsys.readouterr().err
    assert "pip install scikit-learn" in err and 'pip install ".[demo]"' in err


def test_rejects_non_positive_last_step(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["--last-step", "0"])
    assert raised.value.code == 2
    assert "--last-step" in capsys.readouterr().err


@pytest.mark.slow
def test_python_dash_m_runs_the_demo_and_its_first_screen_is_the_demo():
    # As a newcomer runs it: no TF_CPP_MIN_LOG_LEVEL in the environment.
    env = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-m", "hooks2callbacks", "--last-step", "10", "--log-every", "5"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "stopped at step 10" in result.stdout
    assert "StopAtStepHook requested a stop (last_step=10)" in result.stdout
    assert len(_hook_lines(result.stdout)) >= 2
    # TensorFlow's C++ start-up lines (oneDNN, CUDA, CPU features) are not shown.
    assert result.stderr == "", result.stderr


@pytest.mark.slow
def test_the_demo_leaves_tensorflow_logs_alone_when_the_user_set_their_level():
    script = "import hooks2callbacks.__main__ as m; m._load_tensorflow_quietly(); import tensorflow; print('loaded')"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0 and result.stdout.strip() == "loaded", result.stderr
    # TensorFlow printed what the user's level asks for (its CPU build notice, at least).
    assert ".cc:" in result.stderr, result.stderr


def test_version_prints_the_package_version(capsys):
    from hooks2callbacks import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"hooks2callbacks {__version__}"
