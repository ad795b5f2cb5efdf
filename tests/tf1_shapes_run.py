"""The package's checkpoint paths under TF1 shapes, in a process of their own; run by test_checkpoint.py.

    python tf1_shapes_run.py DIRECTORY

`tf.compat.v1.disable_v2_tensorshape()` is process-wide (a `TensorShape`'s items become
`Dimension`s, as BERT's `shape[-1].value` needs): so this script turns it on before anything
else, and runs, on the sequence-tagging job of test_public_jobs_ner (its optimizer under a
variable scope), `restore_tf1_checkpoint` (the map proposed, then pasted), `estimator_hooks`
(its restore through the map, in `fit`) and `check_migration` (train and eval with the map).
Each check asserts; each passed check prints one line `ok <name>`.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.compat.v1.disable_v2_tensorshape()

import test_public_jobs_ner as job  # noqa: E402

import hooks2callbacks  # noqa: E402

V1 = tf.compat.v1


def tf1_model_dir(directory: str, steps: int = 2) -> dict[str, np.ndarray]:
    """The job trained `steps` steps under MonitoredTrainingSession(checkpoint_dir=directory); its variables."""
    x, y = job.data()
    with tf.Graph().as_default():
        V1.train.get_or_create_global_step()
        spec = job.model_fn(tf.constant(x[: job.BATCH]), tf.constant(y[: job.BATCH]), "train", {})
        assert isinstance(V1.global_variables()[1].shape[0], tf.compat.v1.Dimension)  # TF1 shapes indeed
        with V1.train.MonitoredTrainingSession(
            checkpoint_dir=directory, save_summaries_steps=None, log_step_count_steps=None
        ) as session:
            for _ in range(steps):
                session.run(spec.train_op)
    prefix = tf.train.latest_checkpoint(directory)
    return {name: tf.train.load_variable(prefix, name) for name, _ in tf.train.list_variables(prefix)}


def main(directory: str) -> None:
    model_dir = os.path.join(directory, "model_dir")
    tf1 = tf1_model_dir(model_dir)
    scoped = sorted(n for n in tf1 if n.startswith("optimizer/"))

    report = hooks2callbacks.restore_tf1_checkpoint(job.twin(), model_dir, job.WEIGHTS)
    assert sorted(report.proposed_map) == scoped, report
    print("ok restore_tf1_checkpoint proposes the map", flush=True)

    pasted = {**job.WEIGHTS, **report.proposed_map}
    model = job.twin()
    again = hooks2callbacks.restore_tf1_checkpoint(model, model_dir, pasted)
    assert again.not_restored == [] and again.proposed_map == {} and again.global_step == 2, again
    slots = {v.name: v.read() for v in hooks2callbacks._model.saved_variables(model)[0]}
    for theirs, mine in report.proposed_map.items():
        if mine in slots:
            np.testing.assert_array_equal(slots[mine], tf1[theirs], err_msg=mine)
    print("ok restore_tf1_checkpoint restores through it", flush=True)

    hooks = hooks2callbacks.estimator_hooks(
        model_dir, assignment_map=pasted, save_summary_steps=None, log_step_count_steps=None
    )
    stop = V1.train.StopAtStepHook(last_step=3)
    x, y = job.data()
    callback = hooks2callbacks.HookCallback([*hooks, stop])
    job.twin().fit(x, y, batch_size=job.BATCH, epochs=1, verbose=0, callbacks=[callback])
    assert hooks[0].report.not_restored == [] and hooks[0].report.global_step == 2, hooks[0].report
    assert "optimizer/beta1_power" in dict(tf.train.list_variables(tf.train.latest_checkpoint(model_dir)))
    print("ok estimator_hooks restores through it and writes the TF1 names", flush=True)

    # The map's proposal itself ran above (restore_tf1_checkpoint is the one proposer); here the check's
    # own paths: its restores, both sides' runs and the per-step comparison.
    train = job.check(pasted)
    train.assert_ok()
    assert train.per_step_steps == job.STEPS
    job.check(pasted, mode="eval").assert_ok()
    print("ok check_migration train and eval", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
