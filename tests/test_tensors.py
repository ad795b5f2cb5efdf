"""The batch's tensors: features, labels, sample weights and predictions, fetched by name (`_tensors`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import BATCH, TF1_NAMES, fit_in_order, make_data, make_model, run_tf1_mlp, tf1_mlp, weights_of

from hooks2callbacks import BatchValueError, HookCallback, UnknownLogKeyError, log_tensor
from hooks2callbacks._batch import _Wrapped

T = tf.compat.v1.train
JAX = keras.backend.backend() == "jax"
X, Y = make_data()
STEPS = 5


class Each(T.SessionRunHook):
    """Fetches `fetches(graph)` (built in begin(), by name, as a TF1 hook did) every step and keeps the results."""

    def __init__(self, fetches, first_step=0):
        self.make = fetches
        self.first_step = first_step
        self.results = []
        self.calls = 0

    def begin(self):
        self.fetches = self.make(tf.compat.v1.get_default_graph()) if self.first_step == 0 else None

    def before_run(self, run_context):
        self.calls += 1
        if self.calls <= self.first_step:
            return None
        if self.fetches is None:
            self.fetches = self.make(tf.compat.v1.get_default_graph())
        return T.SessionRunArgs(self.fetches)

    def after_run(self, run_context, run_values):
        if self.calls > self.first_step:
            self.results.append(run_values.results)


def tf1_fetches(graph):
    """What a TF1 hook made of a model_fn's tensors: the tensors themselves and ops over them."""
    x, y, logits = (graph.get_tensor_by_name(n) for n in ("x:0", "y:0", "logits:0"))
    correct = tf.equal(tf.argmax(logits, 1), y)
    return {
        "x": x,
        "y": y,
        "logits": logits,
        "accuracy": tf.reduce_mean(tf.cast(correct, tf.float32)),
        "mean_x": tf.reduce_mean(x, axis=0),
        "loss": "loss:0",
    }


TF1_TO_KERAS = {"x": "features", "y": "labels", "logits": "predictions"}


def test_a_hook_over_the_inputs_labels_and_logits_sees_what_it_saw_under_monitored_session(K):
    """The same hook, looking up `x`, `y` and `logits` by name in begin(), under a real
    MonitoredSession on the TF1 MLP and under HookCallback with the names map pointing them
    to the batch's features, labels and predictions: the same values at every step."""
    tf1, keras_hook = Each(tf1_fetches), Each(tf1_fetches)
    run_tf1_mlp([tf1], weights_of(make_model(K, layer_names=TF1_NAMES)), STEPS)
    model = make_model(K, layer_names=TF1_NAMES)
    fit_in_order(model, [HookCallback([keras_hook], names=TF1_TO_KERAS)], STEPS)
    assert len(tf1.results) == len(keras_hook.results) == STEPS
    for step, (old, new) in enumerate(zip(tf1.results, keras_hook.results, strict=True)):
        batch = slice(step * BATCH, (step + 1) * BATCH)
        np.testing.assert_array_equal(new["x"], X[batch])
        np.testing.assert_array_equal(new["y"], Y[batch])
        # What the step got: JAX (without x64) makes 64-bit data 32-bit.
        assert old["y"].dtype == np.int64 and new["y"].dtype == (np.int32 if JAX and K is keras else np.int64)
        np.testing.assert_allclose(new["logits"], old["logits"], atol=1e-5)
        np.testing.assert_allclose(new["mean_x"], old["mean_x"], rtol=1e-6)
        assert new["accuracy"] == old["accuracy"]
        np.testing.assert_allclose(new["loss"], old["loss"], atol=1e-5)


def exported(directory):
    """What `modelled_hooks.BatchExportHook` appended: one dict of arrays per batch."""
    (path,) = (directory / "eval_results").glob("*.npy")
    with open(path, "rb") as file:
        return [np.load(file, allow_pickle=True).item() for _ in range(2)]


def test_an_export_hook_modelled_on_berts_writes_each_eval_batch_as_under_monitored_session(K, tmp_path):
    """A hook modelled on donatasrep/bert's ExportHook (tests/modelled_hooks.py), given a model_fn's
    labels and logits, appends each eval batch's values to a file: the same arrays under a real
    MonitoredSession and under HookCallback."""
    import modelled_hooks

    def export(graph, directory):
        return modelled_hooks.BatchExportHook(
            {"labels": graph.get_tensor_by_name("y:0"), "logits": graph.get_tensor_by_name("logits:0")},
            str(directory),
        )

    model = make_model(K, layer_names=TF1_NAMES)
    weights = weights_of(model)
    with tf.Graph().as_default() as graph:
        tf1_mlp(weights)
        with T.MonitoredSession(hooks=[export(graph, tmp_path / "tf1")]) as session:
            for start in (0, BATCH):
                session.run("loss:0", {"x:0": X[start : start + BATCH], "y:0": Y[start : start + BATCH]})
    hooks = HookCallback(
        lambda: [export(tf.compat.v1.get_default_graph(), tmp_path / "keras")], mode="eval", names=TF1_TO_KERAS
    )
    model.evaluate(X[: 2 * BATCH], Y[: 2 * BATCH], batch_size=BATCH, verbose=0, callbacks=[hooks])
    for old, new in zip(exported(tmp_path / "tf1"), exported(tmp_path / "keras"), strict=True):
        assert sorted(new) == ["labels", "logits"]
        np.testing.assert_array_equal(new["labels"], old["labels"])
        np.testing.assert_allclose(new["logits"], old["logits"], atol=1e-5)


def test_the_predictions_are_the_outputs_the_step_computed_its_loss_from(K):
    """Per step, the loss computed in the hook's graph from predictions and labels is the batch loss."""

    def fetches(graph):
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(log_tensor("labels"), log_tensor("predictions"))
        return {"from_tensors": loss, "loss": "loss"}

    hook = Each(fetches)
    fit_in_order(make_model(K), [HookCallback([hook])], STEPS)
    assert len(hook.results) == STEPS
    for result in hook.results:
        np.testing.assert_allclose(result["from_tensors"], result["loss"], rtol=1e-5)


def test_eval_hooks_see_each_batch_and_its_predictions(K):
    model = make_model(K)
    hook = Each(lambda graph: {"x": "features:0", "p": "predictions", "y": "labels", "w": "sample_weight"})
    weights = np.linspace(0.5, 1.5, 64).astype("float32")
    model.evaluate(
        X[:64],
        Y[:64],
        sample_weight=weights,
        batch_size=BATCH,
        verbose=0,
        callbacks=[HookCallback([hook], mode="eval")],
    )
    assert len(hook.results) == 2
    for i, result in enumerate(hook.results):
        batch = slice(i * BATCH, (i + 1) * BATCH)
        np.testing.assert_array_equal(result["x"], X[batch])
        np.testing.assert_array_equal(result["y"], Y[batch])
        np.testing.assert_array_equal(result["w"], weights[batch])
        np.testing.assert_allclose(result["p"], model.predict(X[batch], verbose=0), atol=1e-5)


def test_a_collection_filled_in_the_factory_holds_the_predictions_for_hooks_that_read_it(K):
    """The docs' TF1 idiom: `add_to_collection("predictions", log_tensor("predictions"))`, read by a hook."""
    made = []

    def factory():
        tf.compat.v1.add_to_collection("predictions", log_tensor("predictions"))
        made.append(Each(lambda graph: {"p": graph.get_collection("predictions")[0], "y": "labels"}))
        return made

    model = make_model(K)
    fit_in_order(model, [HookCallback(factory)], 2)
    assert len(made[0].results) == 2
    assert made[0].results[0]["p"].shape == (BATCH, 3)


def multi_output(K, sparse="sparse_categorical_crossentropy"):
    inputs = K.Input((X.shape[1],), name="x")
    hidden = K.layers.Dense(8, activation="relu")(inputs)
    model = K.Model(inputs, [K.layers.Dense(3, name="classes")(hidden), K.layers.Dense(1, name="size")(hidden)])
    model.compile("sgd", [sparse, "mse"])
    return model


def test_a_multi_output_model_has_a_name_per_output_and_the_root_gives_them_all(K):
    model = multi_output(K)
    hook = Each(lambda graph: {"classes": "predictions/classes", "all": "predictions", "ids": "labels/classes"})
    size = X[:, :1] * 2.0
    model.fit(X[:64], [Y[:64], size[:64]], batch_size=BATCH, shuffle=False, verbose=0, callbacks=[HookCallback([hook])])
    first = hook.results[0]
    assert first["classes"].shape == (BATCH, 3)
    assert isinstance(first["all"], list) and len(first["all"]) == 2
    np.testing.assert_array_equal(first["all"][0], first["classes"])
    np.testing.assert_array_equal(first["ids"], Y[:BATCH])


def test_placeholders_take_the_dtypes_the_model_declares(K):
    """Ops are built over the placeholders before any batch: their dtypes come from the model."""
    inputs = K.Input((2,), dtype="int32", name="ids")
    model = K.Model(
        inputs,
        [
            K.layers.Dense(3, name="classes")(K.layers.Embedding(10, 4)(inputs)[:, 0]),
            K.layers.Dense(1, name="size")(K.layers.Flatten()(K.layers.Embedding(10, 2)(inputs))),
        ],
    )
    model.compile("sgd", ["sparse_categorical_crossentropy", "mse"])
    dtypes = {}

    class Look(T.SessionRunHook):
        def begin(self):
            for name in ("features", "labels/classes", "labels/size", "predictions/size", "sample_weight"):
                dtypes[name] = log_tensor(name).dtype.name

    ids = np.random.default_rng(0).integers(0, 10, size=(32, 2)).astype("int32")
    model.fit(ids, [Y[:32], X[:32, :1]], batch_size=16, verbose=0, callbacks=[HookCallback([Look()])])
    assert dtypes == {
        "features": "int32",
        "labels/classes": "int64",
        "labels/size": "float32",
        "predictions/size": "float32",
        "sample_weight": "float32",
    }


def test_in_predict_the_predictions_are_the_predicted_batch_and_features_fail_clearly(K):
    model = make_model(K)
    hook = Each(lambda graph: {"p": "predictions"})
    out = model.predict(X[:64], batch_size=BATCH, verbose=0, callbacks=[HookCallback([hook], mode="predict")])
    np.testing.assert_array_equal(np.concatenate([r["p"] for r in hook.results]), out)
    with pytest.raises(UnknownLogKeyError, match="predict has only 'predictions'"):
        model.predict(
            X[:64], batch_size=BATCH, verbose=0, callbacks=[HookCallback([Each(lambda g: "features")], mode="predict")]
        )


def test_a_tensor_first_named_after_the_first_step_is_an_error_saying_where_to_name_it(K):
    late = Each(lambda graph: {"p": "predictions"}, first_step=2)
    with pytest.raises(
        BatchValueError, match=r"'predictions' has no value in this step: no hook named it before the run's first step"
    ):
        fit_in_order(make_model(K), [HookCallback([late, Each(lambda graph: "loss")])], 4)


class StepFunction(T.SessionRunHook):
    """Keeps the model's train_function during each step of the run."""

    def __init__(self, model, fetches):
        self.model, self.fetches, self.functions = model, fetches, []

    def before_run(self, run_context):
        return T.SessionRunArgs(self.fetches)

    def after_run(self, run_context, run_values):
        self.functions.append(self.model.train_function)


@pytest.mark.parametrize("values", ["batch", "running_mean"])
def test_the_step_outputs_only_the_tensors_that_hooks_name(K, values):
    """Unasked, they cost nothing: with running means the model keeps its own step, and with batch
    values the step outputs no tensor. Asked, the step outputs exactly those asked for."""
    model = make_model(K)
    plain = StepFunction(model, "loss")
    fit_in_order(model, [HookCallback([plain], values=values)], 2)
    if values == "running_mean":
        assert not any(isinstance(f, _Wrapped) for f in plain.functions)
    else:
        assert all(isinstance(f, _Wrapped) and not f.tensors.wanted for f in plain.functions)
    asking = StepFunction(model, {"y": "labels", "p": "predictions/0"})
    with pytest.raises(
        BatchValueError, match=r"'predictions/0' has no value.*its names are \['features', 'labels', 'predictions'\]"
    ):
        fit_in_order(model, [HookCallback([asking], values=values)], 2)
    assert asking.functions == []
    asking = StepFunction(model, {"y": "labels"})
    fit_in_order(model, [HookCallback([asking], values=values)], 2)
    wrapped = asking.functions[0]
    assert isinstance(wrapped, _Wrapped) and wrapped.tensors.wanted >= {"labels"}


def test_float64_labels_reach_an_op_over_their_float32_placeholder(K):
    """Keras's loss casts float labels to the model's float type; an op of a hook does so too."""
    inputs = K.Input((X.shape[1],))
    model = K.Model(inputs, K.layers.Dense(1)(inputs))
    model.compile("sgd", "mse")
    targets = X[:64, :1].astype("float64") / 3.0
    hook = Each(lambda graph: {"mean": tf.reduce_mean(log_tensor("labels")), "labels": "labels"})
    model.fit(X[:64], targets, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[HookCallback([hook])])
    for i, result in enumerate(hook.results):
        np.testing.assert_allclose(result["labels"].ravel(), targets[i * BATCH : (i + 1) * BATCH].ravel(), rtol=1e-7)
        assert result["mean"] == pytest.approx(targets[i * BATCH : (i + 1) * BATCH].mean(), rel=1e-6)


def test_an_op_over_a_placeholder_whose_dtype_cannot_hold_the_batch_fails_naming_the_tensor(K):
    """A float32 placeholder for labels of ids above 2**24: a cast would change them silently."""
    inputs = K.Input((X.shape[1],))
    model = K.Model(inputs, K.layers.Dense(1)(inputs))
    model.compile("sgd", "mse")
    big = (Y[:64] + 2**24 + 1).astype("int64")
    hook = Each(lambda graph: tf.reduce_max(log_tensor("labels")))
    with pytest.raises(
        TypeError, match="over 'labels', whose placeholder is float32.*int(32|64) values that float32 cannot hold"
    ):
        model.fit(X[:64], big, batch_size=BATCH, verbose=0, callbacks=[HookCallback([hook])])


def test_two_hook_callbacks_of_one_run_share_a_step_that_outputs_what_either_asks_for(K):
    model = make_model(K)
    losses, outputs = Each(lambda graph: "loss"), Each(lambda graph: "predictions")
    fit_in_order(model, [HookCallback([losses]), HookCallback([outputs])], 2)
    assert len(outputs.results) == 2 and outputs.results[0].shape == (BATCH, 3)
    # A later run whose first callback reuses the step compiled without them: an error with the way out.
    with pytest.raises(ValueError, match="list the HookCallback whose hooks fetch them first"):
        fit_in_order(model, [HookCallback([Each(lambda g: "loss")]), HookCallback([Each(lambda g: "labels")])], 2)
    fit_in_order(model, [HookCallback([late := Each(lambda g: "labels")]), HookCallback([Each(lambda g: "loss")])], 2)
    np.testing.assert_array_equal(late.results[1], Y[BATCH : 2 * BATCH])


@pytest.mark.parametrize("passes_y_pred", [True, False], ids=["as_its_guide_writes_it", "to_nothing_of_keras"])
def test_a_custom_train_step_has_the_predictions_it_passes_to_keras(K, passes_y_pred):
    """Keras 3's custom-step guide calls compute_loss(y=..., y_pred=...); tf_keras's calls
    compiled_loss and compiled_metrics.update_state. A step that passes y_pred to none of them
    (its own loss tracker) has no predictions, and fetching them says so."""
    if K is keras and keras.backend.backend() != "tensorflow":
        pytest.skip("a train_step with tf.GradientTape is the TensorFlow backend's pattern")

    class Custom(K.Model):
        def __init__(self):
            super().__init__()
            self.dense = K.layers.Dense(3)
            self.tracker = K.metrics.Mean(name="loss")
            self.xent = K.losses.SparseCategoricalCrossentropy(from_logits=True)

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                if not passes_y_pred:
                    loss = self.xent(y, y_pred)
                elif K is keras:
                    loss = self.compute_loss(y=y, y_pred=y_pred)
                else:
                    loss = self.compiled_loss(y, y_pred)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
            if passes_y_pred and K is not keras:
                self.compiled_metrics.update_state(y, y_pred)
            self.tracker.update_state(loss)
            return {"loss": self.tracker.result()}

    model = Custom()
    model.compile(optimizer="sgd", loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
    hook = Each(lambda graph: {"p": "predictions", "x": "features"})
    if passes_y_pred:
        fit_in_order(model, [HookCallback([hook], values="running_mean")], 2)
        assert [r["p"].shape for r in hook.results] == [(BATCH, 3)] * 2
        np.testing.assert_array_equal(hook.results[1]["x"], X[BATCH : 2 * BATCH])
    else:
        with pytest.raises(BatchValueError, match="passed no y_pred to compute_metrics or compute_loss"):
            fit_in_order(model, [HookCallback([hook], values="running_mean")], 2)


def streaming_train_accuracy(labels, logits, logged):
    """TF1's official MNIST `train_accuracy`: `tf.metrics.accuracy(labels, argmax(logits))[1]`,
    logged each step by the stock LoggingTensorHook, beside the batch's own accuracy; its
    formatter keeps what it was given."""

    def formatter(values):
        logged.append(values)
        return ", ".join(f"{k} = {v}" for k, v in values.items())

    predicted = tf.argmax(logits, 1)
    tensors = {
        "train_accuracy": tf.compat.v1.metrics.accuracy(labels, predicted)[1],
        "batch_accuracy": tf.reduce_mean(tf.cast(tf.equal(predicted, tf.cast(labels, tf.int64)), tf.float32)),
    }
    return [T.LoggingTensorHook(tensors, every_n_iter=1, formatter=formatter)]


def test_a_streaming_train_metric_rebuilt_in_a_factory_aggregates_across_epochs_as_under_tf1(K):
    """The exact rebuild of a TF1 streaming train metric: in a hooks factory, over the batch's
    labels and predictions. Two epochs under HookCallback and the same 20 steps under a real
    MonitoredSession log the same aggregate at every step, never reset at the epoch boundary."""
    per_epoch = len(X) // BATCH
    tf1, keras_side = [], []

    def tf1_hooks():
        graph = tf.compat.v1.get_default_graph()
        return streaming_train_accuracy(graph.get_tensor_by_name("y:0"), graph.get_tensor_by_name("logits:0"), tf1)

    run_tf1_mlp(tf1_hooks, weights_of(make_model(K, layer_names=TF1_NAMES)), 2 * per_epoch)
    model = make_model(K, layer_names=TF1_NAMES)
    factory = lambda: streaming_train_accuracy(log_tensor("labels"), log_tensor("predictions"), keras_side)  # noqa: E731
    model.fit(X, Y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0, callbacks=[HookCallback(factory)])
    assert len(tf1) == len(keras_side) == 2 * per_epoch
    for key in ("train_accuracy", "batch_accuracy"):
        np.testing.assert_allclose([v[key] for v in keras_side], [v[key] for v in tf1], rtol=1e-5)
    # Not reset at Keras's epoch boundary: epoch 2's first step adds its batch to the 10 before.
    first, last = keras_side[per_epoch], keras_side[per_epoch - 1]
    assert first["train_accuracy"] == pytest.approx(
        (last["train_accuracy"] * per_epoch + first["batch_accuracy"]) / (per_epoch + 1), rel=1e-5
    )
    assert first["train_accuracy"] != pytest.approx(first["batch_accuracy"])
