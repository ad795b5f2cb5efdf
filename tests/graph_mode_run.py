"""Scenarios of hooks in TF1 graph mode, run in a process of their own; prints one JSON object.

`python graph_mode_run.py graph`: tf_keras under `disable_eager_execution()` through
HookCallback, the same hooks under a real `MonitoredSession` over a TF1 twin of the
model (same weights, same batches), Keras 3 in graph mode, RunOptions, invariance.
`python graph_mode_run.py eager`: the same fit and evaluate on eager tf_keras.
Graph mode cannot be undone, hence the processes (tests/test_graph_mode.py reads them).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

GRAPH = sys.argv[1] == "graph"
if GRAPH:
    tf.compat.v1.disable_eager_execution()

import keras  # noqa: E402
import tf_keras  # noqa: E402

# Normalized: `_runs` tells the package's frames from Keras's by their file names.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hooks2callbacks import HookCallback, estimator_hooks, log_tensor  # noqa: E402

train = tf.compat.v1.train
RATE = 0.1
rng = np.random.RandomState(7)
X = rng.rand(12, 3).astype("float32")
Y = rng.rand(12, 1).astype("float32")
X_EVAL = rng.rand(6, 3).astype("float32")
Y_EVAL = rng.rand(6, 1).astype("float32")
KERNEL = rng.rand(3, 1).astype("float32") - 0.5
BIAS = np.zeros(1, "float32")
LAST_STEP = 8  # stops in the second epoch of 6 batches


class Lines(logging.Handler):
    """The lines the stock hooks log (TF's logger at INFO)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Recorder(train.SessionRunHook):
    """Records each call and what it saw; builds an op in begin() and runs it on the session."""

    def __init__(self, finalized_at: int | None = None) -> None:
        self.calls: list[list] = []
        self.finalized_at = finalized_at
        self.seen = 0

    def begin(self) -> None:
        self.calls.append(["begin"])
        graph = tf.compat.v1.get_default_graph()
        self.step = train.get_global_step()
        self.double = graph.get_tensor_by_name("loss:0") * 2.0  # derived: joins the step's run
        self.count = tf.compat.v1.Variable(0, name="recorder_count", trainable=False, use_resource=False)
        self.bump = tf.compat.v1.assign_add(self.count, 1)
        self.fed = tf.compat.v1.placeholder(tf.float32, [], name="recorder_fed")
        self.fed_twice = self.fed * 2.0

    def after_create_session(self, session, coord) -> None:
        self.calls.append(["after_create_session", type(session).__name__, int(session.run(self.count))])

    def before_run(self, run_context):
        self.calls.append(["before_run"])
        if self.seen == self.finalized_at:
            try:
                tf.constant(1.0)
                self.calls.append(["built an op"])
            except RuntimeError as error:
                self.calls.append(["refused", str(error)])
        return train.SessionRunArgs(
            {"loss": "loss:0", "step": self.step, "double": self.double, "bump": self.bump, "fed": self.fed_twice},
            feed_dict={self.fed: float(self.seen)},
        )

    def after_run(self, run_context, run_values) -> None:
        results = run_values.results
        self.seen += 1
        self.calls.append(
            [
                "after_run",
                float(results["loss"]),
                type(results["loss"]).__name__,
                int(results["step"]),
                type(results["step"]).__name__,
                float(results["double"]),
                results["bump"] is None,
                int(run_context.session.run(self.step)),  # the step now: the stale one plus one
                int(run_context.session.run(self.count)),
                float(results["fed"]),  # the hook's feed, fed in the step's run
            ]
        )

    def end(self, session) -> None:
        self.calls.append(["end", int(session.run(self.step))])


def stock_hooks(recorder: Recorder, summaries: str) -> list:
    return [
        train.StopAtStepHook(last_step=LAST_STEP),
        train.LoggingTensorHook(["loss"], every_n_iter=3),
        recorder,
        train.NanTensorHook("loss:0"),
        train.StepCounterHook(every_n_steps=2, output_dir=summaries),
    ]


def events(directory: str) -> list:
    tf.compat.v1.summary.FileWriterCache.get(directory).flush()  # flushed every 120 s otherwise (TF1's own)
    found = []
    for path in sorted(glob.glob(os.path.join(directory, "events.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                found.append([value.tag, int(event.step)])
    return found


def keras_model(module):
    model = module.Sequential([module.Input((3,)), module.layers.Dense(1, name="dense")])
    model.set_weights([KERNEL, BIAS])
    return model


def run_keras(result: dict, logged: Lines) -> None:
    """tf_keras fit and evaluate with the stock hooks (graph or eager, by the process's mode)."""
    optimizer = tf_keras.optimizers.legacy.SGD(RATE) if GRAPH else tf_keras.optimizers.SGD(RATE)
    model = keras_model(tf_keras)
    model.compile(optimizer, "mse")
    recorder = Recorder(finalized_at=1)
    summaries = tempfile.mkdtemp()
    logged.lines.clear()
    history = model.fit(
        X,
        Y,
        batch_size=2,
        epochs=2,
        shuffle=False,
        verbose=0,
        callbacks=[HookCallback(stock_hooks(recorder, summaries))],
    )
    result["fit"] = {
        "calls": recorder.calls,
        "lines": [line for line in logged.lines if line.startswith("loss")],
        "events": [e for e in events(summaries) if e[0].endswith("/sec")],
        "epochs": len(history.history["loss"]),
        "weights": [w.tolist() for w in model.get_weights()],
    }
    evaluator = Recorder()
    model.evaluate(X_EVAL, Y_EVAL, batch_size=2, verbose=0, callbacks=[HookCallback([evaluator], mode="eval")])
    result["evaluate"] = evaluator.calls


def twin(kernel_value, bias_value, step_value=0):
    """The model in plain TF1, in the default graph: (x, y, loss, train_op, variables)."""
    step = tf.compat.v1.get_variable(
        "global_step",
        initializer=np.int64(step_value),
        trainable=False,
        collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.GLOBAL_STEP],
    )
    x = tf.compat.v1.placeholder(tf.float32, (None, 3))
    y = tf.compat.v1.placeholder(tf.float32, (None, 1))
    kernel = tf.compat.v1.get_variable("dense/kernel", initializer=kernel_value)
    bias = tf.compat.v1.get_variable("dense/bias", initializer=bias_value)
    loss = tf.reduce_mean(tf.square(tf.matmul(x, kernel) + bias - y), name="loss")
    train_op = train.GradientDescentOptimizer(RATE).minimize(loss, global_step=step)
    return x, y, loss, train_op, [kernel, bias]


def run_twin(result: dict, logged: Lines) -> None:
    """The same model in plain TF1 under MonitoredSession: same weights, same batches, same hooks."""
    with tf.Graph().as_default():
        x, y, loss, train_op, variables = twin(KERNEL, BIAS)
        recorder = Recorder(finalized_at=1)
        summaries = tempfile.mkdtemp()
        logged.lines.clear()
        batches = [(X[i : i + 2], Y[i : i + 2]) for i in range(0, 12, 2)] * 2
        final = train.FinalOpsHook(variables + [train.get_global_step()])
        with train.MonitoredSession(hooks=[*stock_hooks(recorder, summaries), final]) as session:
            for xb, yb in batches:
                if session.should_stop():
                    break
                session.run(train_op, {x: xb, y: yb})
        *weights, step = final.final_ops_values
        result["fit"] = {
            "calls": recorder.calls,
            "lines": [line for line in logged.lines if line.startswith("loss")],
            "events": [e for e in events(summaries) if e[0].endswith("/sec")],
            "weights": [w.tolist() for w in weights],
        }
    with tf.Graph().as_default():  # evaluation: the trained weights at the trained step
        x, y, loss, _, _ = twin(weights[0], weights[1], step)
        evaluator = Recorder()
        with train.MonitoredSession(hooks=[evaluator]) as session:
            for i in range(0, 6, 2):
                session.run(loss, {x: X_EVAL[i : i + 2], y: Y_EVAL[i : i + 2]})
        result["evaluate"] = evaluator.calls


def file_hooks(directory: str):
    """A hooks factory: CheckpointSaverHook and SummarySaverHook over the loss, as a model_fn made them."""

    def make():
        summary = tf.compat.v1.summary.scalar("loss_summary", log_tensor("loss"))  # the graph's "loss:0"
        return [
            train.CheckpointSaverHook(directory, save_steps=3),
            train.SummarySaverHook(save_steps=2, output_dir=directory, summary_op=summary),
        ]

    return make


def files(directory: str) -> dict:
    tf.compat.v1.summary.FileWriterCache.get(directory).flush()
    found = []
    for path in sorted(glob.glob(os.path.join(directory, "events.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "loss_summary":
                    found.append([int(event.step), float(value.simple_value)])
    state = tf.train.get_checkpoint_state(directory)
    latest = state.model_checkpoint_path
    return {
        "checkpoints": sorted(int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths),
        "global_step": int(tf.train.load_variable(latest, "global_step")),
        "kernel": tf.train.load_variable(latest, "dense/kernel").tolist(),
        "summaries": found,
    }


def run_files(result: dict) -> None:
    """Checkpoints and summaries: tf_keras in graph mode, and the twin under MonitoredSession."""
    tf_keras.backend.clear_session()
    model = keras_model(tf_keras)
    model.compile(tf_keras.optimizers.legacy.SGD(RATE), "mse")
    ours = tempfile.mkdtemp()
    model.fit(X, Y, batch_size=2, epochs=1, shuffle=False, verbose=0, callbacks=[HookCallback(file_hooks(ours))])
    result["files"] = files(ours)
    result["files"]["weights"] = model.get_weights()[0].tolist()
    # The checkpoint restores into the TF1 twin (TF1 names), and the twin's into tf_keras.
    with tf.Graph().as_default():
        _, _, _, _, variables = twin(np.zeros_like(KERNEL), np.ones_like(BIAS))
        with tf.compat.v1.Session() as session:
            tf.compat.v1.train.Saver().restore(session, tf.train.latest_checkpoint(ours))
            result["files"]["restored_in_tf1"] = session.run(variables[0]).tolist()
    theirs = tempfile.mkdtemp()
    with tf.Graph().as_default():
        x, y, _, train_op, _ = twin(KERNEL, BIAS)
        with train.MonitoredSession(hooks=file_hooks(theirs)()) as session:
            for i in range(0, 12, 2):
                session.run(train_op, {x: X[i : i + 2], y: Y[i : i + 2]})
    result["twin_files"] = files(theirs)
    tf_keras.backend.clear_session()
    model = keras_model(tf_keras)
    model.compile(tf_keras.optimizers.legacy.SGD(RATE), "mse")

    class Restore(train.SessionRunHook):
        """Restores the TF1 checkpoint into the tf_keras model, by TF1 names, on Keras's Session."""

        def begin(self):
            self.saver = tf.compat.v1.train.Saver({"dense/kernel": model.layers[0].kernel})

        def after_create_session(self, session, coord):
            self.saver.restore(session, tf.train.latest_checkpoint(theirs))
            result["files"]["restored_from_tf1"] = session.run(model.layers[0].kernel).tolist()

    model.fit(X[:2], Y[:2], batch_size=2, epochs=1, verbose=0, callbacks=[HookCallback([Restore()])])
    result["files"]["tf1_kernel"] = result["twin_files"]["kernel"]


def run_predict(result: dict) -> None:
    model = keras_model(tf_keras)
    model.compile(tf_keras.optimizers.legacy.SGD(RATE), "mse")
    try:
        model.predict(X, verbose=0, callbacks=[HookCallback([Recorder()], mode="predict")])
        result["predict"] = None
    except RuntimeError as error:
        result["predict"] = str(error)


def run_estimator_hooks(result: dict) -> None:
    try:
        estimator_hooks(tempfile.mkdtemp())
        result["estimator_hooks"] = None
    except RuntimeError as error:
        result["estimator_hooks"] = str(error)


def run_keras3(result: dict) -> None:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    try:
        model.fit(X, Y, verbose=0, callbacks=[HookCallback([train.StopAtStepHook(last_step=2)])])
        result["keras3"] = None
    except RuntimeError as error:
        result["keras3"] = str(error)


class Options(train.SessionRunHook):
    """Asks for a trace on one step; records the RunOptions and RunMetadata it got back."""

    def __init__(self) -> None:
        self.seen: list = []

    def before_run(self, run_context):
        traced = len(self.seen) == 1
        options = tf.compat.v1.RunOptions(
            trace_level=tf.compat.v1.RunOptions.FULL_TRACE if traced else tf.compat.v1.RunOptions.NO_TRACE,
            timeout_in_ms=60000,
        )
        return train.SessionRunArgs(fetches=None, options=options)

    def after_run(self, run_context, run_values) -> None:
        nodes = [n.node_name for d in run_values.run_metadata.step_stats.dev_stats for n in d.node_stats]
        self.seen.append(
            [
                run_values.options.trace_level,
                run_values.options.timeout_in_ms,
                run_values.options.report_tensor_allocations_upon_oom,
                any("MatMul" in n for n in nodes),
            ]
        )


class Oom(train.SessionRunHook):
    """NVIDIA's OomReportingHook's request."""

    def before_run(self, run_context):
        return train.SessionRunArgs(
            fetches=[], options=tf.compat.v1.RunOptions(report_tensor_allocations_upon_oom=True)
        )


class Huge(train.SessionRunHook):
    """Makes the step ask for 2**40 floats."""

    def begin(self) -> None:
        size = tf.compat.v1.placeholder_with_default(np.int64(2**40), [])  # not folded at build
        self.huge = tf.reduce_sum(tf.fill(tf.reshape(size, [1]), 1.0))

    def before_run(self, run_context):
        return train.SessionRunArgs(self.huge)


def run_options(result: dict) -> None:
    tf_keras.backend.clear_session()  # a graph of its own, as a TF1 job had
    model = keras_model(tf_keras)
    model.compile(tf_keras.optimizers.legacy.SGD(RATE), "mse")
    options = Options()
    profiles = tempfile.mkdtemp()
    hooks = [options, train.ProfilerHook(save_steps=2, output_dir=profiles)]
    model.fit(X, Y, batch_size=2, epochs=1, shuffle=False, verbose=0, callbacks=[HookCallback(hooks)])
    timelines = {}
    for path in sorted(glob.glob(os.path.join(profiles, "timeline-*.json"))):
        with open(path) as file:
            trace = json.load(file)
        timelines[os.path.basename(path)] = any("MatMul" in e.get("name", "") for e in trace["traceEvents"])
    result["options"] = {"seen": options.seen, "timelines": timelines}
    try:
        model.fit(X, Y, batch_size=2, epochs=1, verbose=0, callbacks=[HookCallback([Oom(), Huge()])])
        result["oom"] = None
    except tf.errors.ResourceExhaustedError as error:
        result["oom"] = str(error)


def run_invariance(result: dict) -> None:
    """The same seeded fit with and without HookCallback (whose hooks join the step's run)."""
    weights = []
    for hooked in (False, True):
        tf_keras.backend.clear_session()
        tf.compat.v1.set_random_seed(3)
        model = tf_keras.Sequential(
            [
                tf_keras.Input((3,)),
                tf_keras.layers.Dense(4, activation="relu"),
                tf_keras.layers.Dropout(0.3),
                tf_keras.layers.Dense(1),
            ]
        )
        model.compile(tf_keras.optimizers.legacy.SGD(RATE, momentum=0.9), "mse", metrics=["mae"])
        model.set_weights([np.full(w.shape, 0.1, w.dtype) for w in model.get_weights()])
        callbacks = [HookCallback(stock_hooks(Recorder(), tempfile.mkdtemp()))] if hooked else []
        model.fit(X, Y, batch_size=2, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
        weights.append([w.tobytes().hex() for w in model.get_weights()])
    result["invariance"] = weights


def main() -> None:
    logged = Lines()
    tf.get_logger().addHandler(logged)
    tf.get_logger().setLevel("INFO")
    result: dict = {}
    if GRAPH:
        graph: dict = {}
        run_keras(graph, logged)
        twin: dict = {}
        run_twin(twin, logged)
        result["graph"], result["twin"] = graph, twin
        run_options(result)
        run_invariance(result)
        run_files(result)
        run_predict(result)
        run_estimator_hooks(result)
        run_keras3(result)  # last: its variables join the default graph
    else:
        eager: dict = {}
        run_keras(eager, logged)
        result["eager"] = eager
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
