"""check_migration's report: FinalOpsHook's final values compared, report.plot, the drift lines."""

from __future__ import annotations

import sys

import keras
import pytest
from test_migration import NAMES, V1, X, Y, keras_twin, model_fn, under_keras
from test_migration_steps import log_loss

from hooks2callbacks import check_migration
from hooks2callbacks.migration._report import Difference, _drift_lines

EVAL_NAMES = {"cross_entropy": "loss", "accuracy/update_op": "accuracy", "accuracy/value": "accuracy"}


def test_final_ops_values_are_compared():
    def hooks():
        # Aggregates only: in end(), a batch tensor would pull another batch from TF1's input.
        return [V1.train.FinalOpsHook({"acc": "accuracy/value:0"})]

    report = check_migration(
        model_fn, keras_twin(), hooks, (X[:128], Y[:128]), steps=None, mode="eval", names=EVAL_NAMES
    )
    assert report.ok, str(report)
    assert report.compared["0 FinalOpsHook"]["values"] == 1


def test_a_final_op_of_another_value_is_found_in_end():
    def hooks():
        return [V1.train.FinalOpsHook({"acc": "cross_entropy:0" if under_keras() else "accuracy/value:0"})]

    report = check_migration(
        model_fn, keras_twin(), hooks, (X[:128], Y[:128]), steps=None, mode="eval", names=EVAL_NAMES
    )
    (found,) = report.differences
    assert (found.method, found.key) == ("end", "final_ops_values['acc']")


def test_plot_draws_both_sides_and_marks_where_they_parted():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    report = check_migration(model_fn, keras_twin(keras.optimizers.SGD(0.0505)), log_loss, (X, Y), steps=6, names=NAMES)
    ax = report.plot("0 LoggingTensorHook", "results['loss']")
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["TF1", "Keras", "parted (step 1)"]
    tf1 = [v for _, v in report.values[("0 LoggingTensorHook", "results['loss']")]["tf1"]]
    assert list(lines[0].get_ydata()) == pytest.approx([float(v) for v in tf1])
    with pytest.raises(KeyError, match="no per-step values of that result; held: "):
        report.plot("0 LoggingTensorHook", "results['nope']")


def test_plot_without_matplotlib_says_how_to_get_it(monkeypatch):
    report = check_migration(model_fn, keras_twin(), log_loss, (X, Y), steps=2, names=NAMES, per_step=False)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)  # as if not installed
    with pytest.raises(ImportError, match="pip install matplotlib"):
        report.plot("0 LoggingTensorHook", "results['loss']")


def test_a_drift_line_gives_tf1s_own_spread_where_tf1_ran_in_both_orders():
    drift = [
        Difference("0 LoggingTensorHook", "after_run", step, "results['loss']", 1.0, 1.0 + size, "value")
        for step, size in ((3, 2e-6), (4, 5e-6))
    ]
    spread = {("0 LoggingTensorHook", "results['loss']"): 7e-6}
    (line,) = _drift_lines(drift, spread)
    assert line == (
        "0 LoggingTensorHook results['loss']: from step 3, 2 step(s), max |diff| 5e-06 at step 4; "
        "TF1 against TF1 (its two orders): max |diff| 7e-06"
    )
    (alone,) = _drift_lines(drift, {})
    assert "TF1 against TF1" not in alone
