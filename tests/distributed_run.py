"""Training runs under tf.distribute, each in a process of its own; run by test_distribute.py.

TF fixes its devices and cluster when it initializes, so these cannot run in
the pytest process:

    python distributed_run.py mirrored RESULT.json
        2 logical CPUs, MirroredStrategy, with Keras 3 and with tf_keras.
    python distributed_run.py mirrored_loop DIRECTORY RESULT.json
        2 logical CPUs, a custom `strategy.run` loop (docs/custom-loops.md) with
        HookCallback, and the same hooks under a MonitoredSession on the TF1 twin.
    python distributed_run.py worker HOOK_DIR RESULT.json     (TF_CONFIG set)
        one worker of a MultiWorkerMirroredStrategy cluster, with tf_keras.
    python distributed_run.py data_parallel RESULT.json
        (KERAS_BACKEND=jax, XLA_FLAGS=--xla_force_host_platform_device_count=2)
        Keras 3's keras.distribution.DataParallel on 2 JAX CPU devices, and on one.

Each writes what its hooks saw as JSON to RESULT.json.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

MIRRORED_STEPS = 15  # StopAtStepHook(last_step=...) within 2 epochs of 10 steps
WORKER_STOP_STEP = 3  # the non-chief worker asks to stop after this (stale) step
DATA_PARALLEL_STOP = 17  # StopAtStepHook(last_step=...) in the second of 3 epochs of 10 steps


def mirrored(result_path: str) -> None:
    two_logical_cpus()
    import keras
    import tf_keras

    results = {}
    for name, K in (("keras", keras), ("tf_keras", tf_keras)):
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        results[name] = train_mirrored(K, strategy)
    write(result_path, results)


def two_logical_cpus() -> None:
    """Splits the CPU in 2 logical devices; must run before TF initializes its devices."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def mirrored_loop(directory: str, result_path: str) -> None:
    """The `strategy.run` loop of docs/custom-loops.md (Keras 3 and tf_keras), and the TF1 twin."""
    two_logical_cpus()
    import keras
    import tf_keras
    from support import run_tf1_mlp, weights_of
    from test_loops import Fetch, hooks, mlp

    results: dict = {}
    for name, K in (("keras", keras), ("tf_keras", tf_keras)):
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            model, optimizer = mlp(K), K.optimizers.SGD(0.05)
        start = weights_of(model)
        logged: list = []
        fetch = Fetch("loss:0")
        passed = strategy_loop(K, strategy, model, optimizer, hooks(os.path.join(directory, name), logged, fetch))
        tf1_logged: list = []
        tf1_fetch = Fetch("loss:0")
        run_tf1_mlp(hooks(os.path.join(directory, f"{name}_tf1"), tf1_logged, tf1_fetch), start, steps=20)
        results[name] = {
            "replicas": strategy.num_replicas_in_sync,
            "passed": passed,
            "logged": [float(v) for v in logged],
            "fetched": [float(r["loss:0"]) for r in fetch.seen],
            "fetched_types": sorted({type(r["loss:0"]).__name__ for r in fetch.seen}),
            "steps": [int(r["step"]) for r in fetch.seen],
            "iterations": int(optimizer.iterations.numpy()),
            "tf1_logged": [float(v) for v in tf1_logged],
            "tf1_steps": [int(r["step"]) for r in tf1_fetch.seen],
        }
    write(result_path, results)


def strategy_loop(K, strategy, model, optimizer, hooks) -> list:
    """docs/custom-loops.md's MirroredStrategy loop: 20 batches at most, in order. Returns the losses passed."""
    from support import BATCH, make_data

    from hooks2callbacks import HookCallback

    x, y = make_data()
    loss_object = K.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(features, labels):
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=BATCH)
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights, strict=True))
        return loss

    @tf.function
    def distributed_step(features, labels):
        per_replica = strategy.run(replica_step, args=(features, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat()
    callbacks = K.callbacks.CallbackList([HookCallback(hooks, optimizer=optimizer)], model=model)
    passed: list = []
    callbacks.on_train_begin()
    for step, (features, labels) in enumerate(strategy.experimental_distribute_dataset(dataset)):
        if step == 20:
            break
        callbacks.on_train_batch_begin(step)
        loss = distributed_step(features, labels)
        passed.append(float(loss))
        callbacks.on_train_batch_end(step, {"loss": loss})
        if model.stop_training:
            break
    callbacks.on_train_end()
    return passed


def train_mirrored(K, strategy) -> dict:
    from support import RecordingHook, iterations, make_data, make_model

    from hooks2callbacks import HookCallback

    x, y = make_data()
    with strategy.scope():
        model = make_model(K)
    calls: list = []
    hook = RecordingHook("h", calls, fetches="loss")
    seen_logs: list = []
    recorder = K.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs=None: seen_logs.append(dict(logs)))
    stop = tf.compat.v1.train.StopAtStepHook(last_step=MIRRORED_STEPS)
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[recorder, HookCallback([hook, stop])])
    # The same training on one device: the loss over the whole batch, which is
    # what the hooks must see under the strategy (one replica's loss would not).
    single_model = make_model(K)
    single = RecordingHook("single", [], fetches="loss")
    single_model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[HookCallback([single, stop])])
    final = tf.compat.v1.train.FinalOpsHook({"loss": "loss", "accuracy": "accuracy"})
    means = tf.compat.v1.train.FinalOpsHook({"loss": "loss", "accuracy": "accuracy"})
    evaluated = model.evaluate(
        x,
        y,
        batch_size=32,
        verbose=0,
        return_dict=True,
        callbacks=[
            HookCallback(final, mode="eval", values="batch"),
            HookCallback(means, mode="eval", values="running_mean"),
        ],
    )
    return {
        **batch_tensors(K, strategy, x, y),
        **written_to_every_replica(K, strategy, x, y),
        **multi_worker_early_stopping(K, strategy, x, y),
        "replicas": strategy.num_replicas_in_sync,
        "steps": [c[2] for c in calls if c[1] == "after_run"],
        "hook_loss": hook.results,
        "hook_loss_types": sorted({type(v).__name__ for v in hook.results}),
        "keras_loss": [step_logs["loss"] for step_logs in seen_logs],
        "single_device_loss": single.results,
        "iterations": iterations(model),
        "final_ops": {k: float(v) for k, v in final.final_ops_values.items()},
        "final_means": {k: float(v) for k, v in means.final_ops_values.items()},
        "evaluated": {k: float(evaluated[k]) for k in ("loss", "accuracy")},
    }


def batch_tensors(K, strategy, x, y) -> dict:
    """Hooks fetch the batch's features, labels and predictions: the global batch's, in order,
    and the predictions one device computes for it."""
    from support import make_model

    from hooks2callbacks import HookCallback

    def fetched(model) -> list:
        seen: list = []

        class Tensors(tf.compat.v1.train.SessionRunHook):
            def before_run(self, run_context):
                return tf.compat.v1.train.SessionRunArgs({"x": "features", "y": "labels", "p": "predictions"})

            def after_run(self, run_context, run_values):
                seen.append(run_values.results)

        model.fit(x[:128], y[:128], batch_size=32, shuffle=False, verbose=0, callbacks=[HookCallback([Tensors()])])
        return seen

    with strategy.scope():
        both = fetched(make_model(K))
    one = fetched(make_model(K))
    rows = range(0, 128, 32)
    return {
        "tensor_steps": len(both),
        "tensor_features_are_the_batches": all(
            np.array_equal(r["x"], x[i : i + 32]) for r, i in zip(both, rows, strict=True)
        ),
        "tensor_labels_are_the_batches": all(
            np.array_equal(r["y"], y[i : i + 32]) for r, i in zip(both, rows, strict=True)
        ),
        "tensor_predictions_shapes": sorted({r["p"].shape for r in both}),
        "tensor_predictions_max_difference": max(
            float(np.abs(a["p"] - b["p"]).max()) for a, b in zip(both, one, strict=True)
        ),
    }


class WriteAtCreation(tf.compat.v1.train.SessionRunHook):
    """Sets the learning rate to 0 at session creation, and the last bias to [1, 2, 3] in the first step's fetches."""

    def begin(self):
        graph = tf.compat.v1.get_default_graph()
        bias = [v for v in tf.compat.v1.trainable_variables() if v.op.name.endswith("bias")][-1]
        self.bias = tf.compat.v1.assign(bias, [1.0, 2.0, 3.0])
        self.rate = tf.compat.v1.assign(graph.get_tensor_by_name("learning_rate:0"), 0.0)
        self.in_cross_replica_context = tf.distribute.in_cross_replica_context()
        self.first = True

    def after_create_session(self, session, coord):
        session.run(self.rate)

    def before_run(self, run_context):
        first, self.first = self.first, False
        return tf.compat.v1.train.SessionRunArgs(self.bias) if first else None


def replicas(variable) -> list:
    """The values of each replica of a (Keras 3 or tf_keras) mirrored variable."""
    variable = getattr(variable, "value", variable) if not isinstance(variable, tf.Variable) else variable
    return [v.numpy().tolist() for v in variable.values]


def written_to_every_replica(K, strategy, x, y) -> dict:
    from support import make_model

    from hooks2callbacks import HookCallback

    with strategy.scope():
        model = make_model(K)
    hook = WriteAtCreation()
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[HookCallback(hook)])
    return {
        "begin_in_cross_replica_context": hook.in_cross_replica_context,
        "replica_biases": replicas(model.weights[-1]),
        "replica_rates": replicas(model.optimizer.learning_rate),
    }


def multi_worker_early_stopping(K, strategy, x, y) -> dict:
    """tensorflow/estimator's own early-stopping hook, which Estimator used under any train_distribute
    strategy (run unchanged from the installed tensorflow-estimator, tests/installed.py)."""
    from installed import estimator_hooks
    from support import iterations, make_model

    from hooks2callbacks import HookCallback

    with strategy.scope():
        model = make_model(K)
    checks = []

    def should_stop():  # called every 3 steps; asks to stop at its second call
        checks.append(len(checks) + 1)
        return len(checks) == 2

    hook = estimator_hooks().MultiWorkerEarlyStoppingHook(should_stop, run_every_steps=3)
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[HookCallback(hook)])
    return {"early_stop_checks": checks, "early_stop_iterations": iterations(model)}


class StopOnTask(tf.compat.v1.train.SessionRunHook):
    """Asks to stop after `step`, on the worker with task index `task` only."""

    def __init__(self, task: int, this_task: int, step: int) -> None:
        self.stops_here = task == this_task
        self.step = step

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(tf.compat.v1.train.get_global_step())

    def after_run(self, run_context, run_values):
        if self.stops_here and run_values.results >= self.step:
            run_context.request_stop()


class StepFileHook(tf.compat.v1.train.SessionRunHook):
    """Writes each (stale) global step to a file in `directory`, as a summary writer would."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "steps.txt")

    def begin(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.step = tf.compat.v1.train.get_global_step()

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self.step)

    def after_run(self, run_context, run_values):
        with open(self.path, "a") as file:
            file.write(f"{run_values.results}\n")


def worker(hook_dir: str, result_path: str) -> None:
    # The strategy must exist before any other TF work in the process.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import tf_keras as K
    from support import RecordingHook, iterations, make_data, make_model

    from hooks2callbacks import HookCallback

    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    x, y = make_data()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options)
    with strategy.scope():
        model = make_model(K)
    calls: list = []
    hooks = [RecordingHook("every", calls, fetches="loss"), StopOnTask(1, task, WORKER_STOP_STEP)]
    checkpoints = os.path.join(hook_dir, "ckpt")
    chief_only = [
        RecordingHook("chief", calls),
        StepFileHook(hook_dir),
        tf.compat.v1.train.CheckpointSaverHook(checkpoints, save_steps=2),
    ]
    callback = HookCallback(hooks, chief_only_hooks=chief_only)
    keras_loss: list = []
    recorder = K.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs=None: keras_loss.append(logs["loss"]))
    model.fit(dataset, epochs=3, verbose=0, callbacks=[recorder, callback])
    from hooks2callbacks._cluster import cluster_of

    cluster = cluster_of(model)
    trained = iterations(model)
    # A hook raising on worker 1 alone: every worker's fit raises after the same step.
    from cluster_run import RaiseOn

    try:
        model.fit(dataset, epochs=1, verbose=0, callbacks=[HookCallback([RaiseOn(1, task, WORKER_STOP_STEP + 2)])])
    except Exception as error:  # noqa: BLE001 - recorded for the test to read
        raised = f"{type(error).__name__}: {error}"
    else:
        raised = None
    write(
        result_path,
        {
            "task": task,
            "cluster": [cluster.engine, cluster.index, cluster.count, cluster.is_chief],
            "calls": calls,
            "iterations": trained,
            "hook_loss": hooks[0].results,
            "keras_loss": keras_loss,
            "raised": raised,
            "raised_iterations": iterations(model),
        },
    )


def data_parallel(result_path: str) -> None:
    import jax
    import keras
    from support import make_data, make_model

    from hooks2callbacks import HookCallback

    T = tf.compat.v1.train

    class Seen(T.SessionRunHook):
        def __init__(self) -> None:
            self.rows: list = []
            self.batches: list = []

        def begin(self) -> None:
            self.step = T.get_global_step()

        def before_run(self, run_context):
            return T.SessionRunArgs(
                {"step": self.step, "loss": "loss", "accuracy": "accuracy", "batch": ("features", "labels")}
            )

        def after_run(self, run_context, run_values) -> None:
            results = dict(run_values.results)
            self.batches.append(results.pop("batch"))
            self.rows.append({key: float(value) for key, value in results.items()})

    x, y = make_data()
    results = {"devices": len(jax.devices())}
    for name in ("one_device", "data_parallel"):
        if name == "data_parallel":
            keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
        model = make_model(keras)
        seen = Seen()
        stop = T.StopAtStepHook(last_step=DATA_PARALLEL_STOP)
        model.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0, callbacks=[HookCallback([seen, stop])])
        results[name] = {"rows": seen.rows, "iterations": int(model.optimizer.iterations)}
        # The global batch's features and labels, in order (10 batches an epoch).
        results[name]["batches_in_order"] = all(
            np.array_equal(features, x[i % 10 * 32 : i % 10 * 32 + 32])
            and np.array_equal(labels, y[i % 10 * 32 : i % 10 * 32 + 32])
            for i, (features, labels) in enumerate(seen.batches)
        )
        results[name]["sharded"] = len(model.trainable_variables[0].value.sharding.device_set)
    write(result_path, results)


def write(path: str, value) -> None:
    with open(path, "w") as file:
        json.dump(value, file, default=_plain)


def _plain(value):
    """A numpy value (what hooks get, as Session.run gave it) as JSON: a number or a list."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if sys.argv[1] == "mirrored":
        mirrored(sys.argv[2])
    elif sys.argv[1] == "mirrored_loop":
        mirrored_loop(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "data_parallel":
        data_parallel(sys.argv[2])
    else:
        raise SystemExit(f"unknown run {sys.argv[1]!r}; expected mirrored, mirrored_loop, worker or data_parallel")
