"""Bad input: one table of what users get wrong, each with its error type and message.

Every message names where the input came from (the `HookCallback` argument, or
the hook class and method), what was received, and what would work. The cases
that need a step run in a real `fit` of the small model.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import OnlyAfterRun, RecordingHook, make_data, make_model
from tensorflow.python.debug.wrappers import hooks as tfdbg_hooks

from hooks2callbacks import BatchValueError, HookCallback, UnknownLogKeyError, log_tensor

T = tf.compat.v1.train
X, Y = make_data(96)  # 3 batches of 32


class Nothing:
    pass


class NotCallable:
    before_run = "loss"  # a hook method that is not a method


class Returns:
    """A hook whose before_run returns `args` (built in begin, when `args` is a function)."""

    def __init__(self, args: Any) -> None:
        self.args = args

    def begin(self) -> None:
        if callable(self.args) and not isinstance(self.args, type):
            self.args = self.args()

    def before_run(self, run_context):
        return self.args


class Fetches(Returns):
    """A hook fetching `fetches` (built in begin, when a function)."""

    def before_run(self, run_context):
        return T.SessionRunArgs(self.args)

    def after_run(self, run_context, run_values):
        self.results = run_values.results


class SessionRun:
    """A hook asking its session for `fetches` in after_run."""

    def __init__(self, fetches: Any) -> None:
        self.fetches = fetches

    def after_run(self, run_context, run_values):
        run_context.session.run(self.fetches)


def fit(hooks: Any, *more: keras.callbacks.Callback, model: Any = None, **kwargs: Any) -> None:
    model = model or make_model()
    callbacks = [hooks if isinstance(hooks, HookCallback) else HookCallback(hooks), *more]
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0, callbacks=callbacks, **kwargs)


class Calls(keras.metrics.Metric):
    """A metric whose own update_state also writes outside its state: run again for its batch
    value, that write would happen twice, so HookCallback gives it none."""

    def __init__(self) -> None:
        super().__init__(name="calls")
        self.count = self.add_weight(name="count", initializer="zeros")
        self.total_calls = tf.Variable(0.0, trainable=False)

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        self.count.assign_add(1.0)
        self.total_calls.assign_add(1.0)

    def result(self) -> Any:
        return self.count * 1.0


def model_with_a_custom_metric() -> Any:
    model = make_model()
    model.compile(optimizer="sgd", loss=model.loss, metrics=[Calls()])
    return model


FOREIGN = tf.Graph()
with FOREIGN.as_default():
    FOREIGN_TENSOR = tf.constant(1.0, name="foreign")


def deep(depth: int) -> Any:
    fetch: Any = "loss"
    for _ in range(depth):
        fetch = [fetch]
    return fetch


def tensor_of_an_earlier_run() -> None:
    class Keeps:
        def begin(self):
            self.tensor = tf.compat.v1.get_default_graph().get_tensor_by_name("loss:0")

    kept = Keeps()
    fit(kept)
    fit(Fetches(kept.tensor))


def same_hook_in_two_callbacks() -> None:
    hook = OnlyAfterRun()
    fit(HookCallback(hook), HookCallback(hook))


def same_hook_in_train_and_eval_callbacks() -> None:
    hook = OnlyAfterRun()
    fit(HookCallback(hook), HookCallback(hook, mode="eval"), validation_data=(X, Y))


def model_without_optimizer() -> None:
    model = make_model()
    model.compile(optimizer=None, loss="sparse_categorical_crossentropy")
    fit(OnlyAfterRun(), model=model)


STRAY = tf.Variable(1.0, name="stray")  # an eager variable that is no model's


def write_to_a_scheduled_rate() -> None:
    model = make_model(learning_rate=keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5))
    fit(
        Fetches(
            lambda: tf.compat.v1.assign(tf.compat.v1.get_default_graph().get_tensor_by_name("learning_rate:0"), 0.0)
        ),
        model=model,
    )


class Feeds(Fetches):
    """Fetches an op on `placeholder`, feeding it."""

    def __init__(self, placeholder: tf.Tensor) -> None:
        super().__init__(placeholder * 1.0)
        self.placeholder = placeholder

    def before_run(self, run_context):
        return T.SessionRunArgs(self.args, feed_dict={self.placeholder: 1.0})


def fed_by_two_hooks() -> None:
    def make():
        shared = tf.compat.v1.placeholder(tf.float32, [], name="shared")
        return [Feeds(shared), Feeds(shared)]

    fit(make)


FULL_TRACE = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
LOG_KEYS = r"Available log keys: \['accuracy', 'loss'\]"
ACCEPTED = r"Accepted: a Keras log key .* or a dict, list, tuple or namedtuple of these"
HOOK_TYPES = r"A hook is any object with some of begin, after_create_session, before_run, after_run, end"

# (id, what the user does, the error, a pattern for its message)
CASES: list[tuple[str, Callable[[], Any], type[BaseException], str]] = [
    # -- HookCallback's arguments ------------------------------------------------
    (
        "hooks-not-a-hook",
        lambda: HookCallback(Nothing()),
        TypeError,
        rf"HookCallback\(hooks=\.\.\.\) takes a hook, .*got <.*Nothing object.*> of type Nothing\. {HOOK_TYPES}",
    ),
    (
        "hooks-a-string",
        lambda: HookCallback("LoggingTensorHook"),
        TypeError,
        r"HookCallback\(hooks=\.\.\.\) takes .*got 'LoggingTensorHook' of type str",
    ),
    ("hooks-a-number", lambda: HookCallback(42), TypeError, r"got 42 of type int"),
    (
        "hooks-a-dict",
        lambda: HookCallback({"log": OnlyAfterRun()}),
        TypeError,
        r"HookCallback\(hooks=\.\.\.\) got a dict \(dict with keys \['log'\]\), whose items would be its "
        r"keys\. Pass the hooks themselves: list\(hooks\.values\(\)\)\.",
    ),
    (
        "no-hook-methods",
        lambda: HookCallback([OnlyAfterRun(), Nothing()]),
        TypeError,
        r"HookCallback\(hooks=\.\.\.\): item 1 is .*Nothing.* of type Nothing, which has none of the hook "
        r"methods begin, .*Pass tf\.compat\.v1\.train\.SessionRunHook instances",
    ),
    (
        "hook-method-not-callable",
        lambda: HookCallback([NotCallable()]),
        TypeError,
        r"item 0 is .*NotCallable.*none of the hook methods",
    ),
    (
        "a-hook-class",
        lambda: HookCallback([OnlyAfterRun]),
        TypeError,
        r"item 0 is the class OnlyAfterRun, not an instance of it\. Pass OnlyAfterRun\(\.\.\.\)",
    ),
    (
        "a-hook-class-alone",
        lambda: HookCallback(T.NanTensorHook),
        TypeError,
        r"takes a hook, .*got <class .*NanTensorHook'> of type type",
    ),
    (
        "feed-fn-hook",
        lambda: HookCallback([T.FeedFnHook(lambda: {})]),
        TypeError,
        r"item 0 is a FeedFnHook.*not from feeds.*tf\.data\.Dataset\.map",
    ),
    (
        "feed-fn-hook-alone",
        lambda: HookCallback(T.FeedFnHook(lambda: {})),
        TypeError,
        r"HookCallback\(hooks=\.\.\.\) got a FeedFnHook.*not from feeds.*tf\.data\.Dataset\.map",
    ),
    *[
        (
            f"tfdbg-{name}",
            make,
            TypeError,
            rf"item 0 is tfdbg's {name}\. It wraps run_context\.session in a debug session, which takes only a "
            r"TF1 BaseSession or MonitoredSession.*tf\.debugging\.experimental\.enable_dump_debug_info",
        )
        for name, make in (
            ("DumpingDebugHook", lambda: HookCallback([tfdbg_hooks.DumpingDebugHook("/tmp/never-written")])),
            ("LocalCLIDebugHook", lambda: HookCallback([tfdbg_hooks.LocalCLIDebugHook()])),
            ("TensorBoardDebugHook", lambda: HookCallback([tfdbg_hooks.TensorBoardDebugHook("localhost:1")])),
        )
    ],
    (
        "duplicate-hook",
        lambda: HookCallback([h := OnlyAfterRun(), h]),
        ValueError,
        r"item 1 \(OnlyAfterRun\) appears twice in the list\. .*pass it once",
    ),
    (
        "hook-in-hooks-and-chief-only",
        lambda: HookCallback(h := OnlyAfterRun(), chief_only_hooks=[h]),
        ValueError,
        r"HookCallback\(chief_only_hooks=\.\.\.\): item 0 \(OnlyAfterRun\) is also in hooks.*List it in one",
    ),
    (
        "bad-chief-only-hooks",
        lambda: HookCallback([], chief_only_hooks=[Nothing()]),
        TypeError,
        r"HookCallback\(chief_only_hooks=\.\.\.\): item 0 is .*Nothing",
    ),
    (
        "mode-misspelt",
        lambda: HookCallback(OnlyAfterRun(), mode="training"),
        ValueError,
        r"HookCallback\(mode=\.\.\.\) must be one of \('train', 'eval', 'predict'\), got 'training'",
    ),
    ("mode-none", lambda: HookCallback(OnlyAfterRun(), mode=None), ValueError, r"must be one of .*got None"),
    (
        "values-misspelt",
        lambda: HookCallback(OnlyAfterRun(), values="mean"),
        ValueError,
        r"HookCallback\(values=\.\.\.\) must be one of \('batch', 'running_mean'\), got 'mean': \"batch\" gives "
        r"hooks each batch's own loss and metric values",
    ),
    (
        "is-chief-not-bool",
        lambda: HookCallback([], is_chief="yes"),
        TypeError,
        r"HookCallback\(is_chief=\.\.\.\) must be True, False or None .*got 'yes' of type str",
    ),
    (
        "factory-returns-non-hooks",
        lambda: fit(lambda: 3),
        TypeError,
        r"What the hooks factory .*<lambda>\(\) returned takes a hook, .*got 3 of type int",
    ),
    # -- Keras calls ---------------------------------------------------------------
    (
        "eval-callback-in-predict",
        lambda: make_model().predict(X, verbose=0, callbacks=[HookCallback(OnlyAfterRun(), mode="eval")]),
        ValueError,
        r"HookCallback\(mode='eval', hooks=\[OnlyAfterRun\]\) was passed to a Keras predict\(\) call.*"
        r"Use HookCallback\(\.\.\., mode='predict'\) there",
    ),
    (
        "model-without-optimizer",
        model_without_optimizer,
        ValueError,
        r"HookCallback\(mode='train', hooks=\[OnlyAfterRun\]\) was passed to fit\(\) of a model without an "
        r"optimizer .*model\.compile\(optimizer=\.\.\., loss=\.\.\.\)",
    ),
    (
        "same-hook-in-two-callbacks",
        same_hook_in_two_callbacks,
        ValueError,
        r"HookCallback\(mode='train', hooks=\[OnlyAfterRun\]\): hook 0 \(OnlyAfterRun\) is already running in "
        r"HookCallback\(mode='train'.*Give each HookCallback its own hook instances",
    ),
    (
        "same-hook-in-train-and-eval",
        same_hook_in_train_and_eval_callbacks,
        ValueError,
        r"HookCallback\(mode='eval', hooks=\[OnlyAfterRun\]\): hook 0 \(OnlyAfterRun\) is already running in "
        r"HookCallback\(mode='train'",
    ),
    # -- what before_run returns --------------------------------------------------------
    (
        "before-run-returns-a-string",
        lambda: fit(Returns("loss")),
        TypeError,
        r"Returns\.before_run\(\) returned 'loss' of type str\. It must return None or "
        r"tf\.compat\.v1\.train\.SessionRunArgs\(fetches\)",
    ),
    (
        "before-run-returns-a-dict",
        lambda: fit(Returns({"fetches": "loss"})),
        TypeError,
        r"Returns\.before_run\(\) returned \{'fetches': 'loss'\} of type dict",
    ),
    (
        "feed-dict-of-a-model-input",
        lambda: fit(Returns(T.SessionRunArgs("loss", feed_dict={"x:0": 1}))),
        ValueError,
        r"Returns\.before_run\(\) feeds 'x:0', which names no tensor of the adapter graph\. Feed only placeholders "
        r"the hook built in begin\(\).*Keras takes its inputs from the data given to fit\(\)/evaluate\(\).*"
        r"tf\.data map or a keras\.utils\.PyDataset",
    ),
    (
        "feed-dict-of-a-log-tensor",
        lambda: fit(Returns(lambda: T.SessionRunArgs("loss", feed_dict={log_tensor("loss"): 1.0}))),
        ValueError,
        r"Returns\.before_run\(\) feeds <tf\.Tensor 'keras_logs/loss:0'.*>, the tensor of the Keras log key "
        r"'loss'\. Its value is the step's own value of that key, and a feed would replace it\. "
        r"Feed only placeholders the hook built itself in begin\(\)",
    ),
    (
        "feed-dict-of-the-global-step",
        lambda: fit(Returns(T.SessionRunArgs("loss", feed_dict={"global_step:0": 7}))),
        ValueError,
        r"Returns\.before_run\(\) feeds 'global_step:0', the global step\. Its value is the Keras "
        r"optimizer's step count \(model\.optimizer\.iterations\), and a feed would replace it",
    ),
    (
        "full-trace",
        lambda: fit(Returns(T.SessionRunArgs("loss", options=FULL_TRACE))),
        ValueError,
        r"Returns\.before_run\(\) requested RunOptions with trace_level=FULL_TRACE.*"
        r"keras\.callbacks\.TensorBoard\(profile_batch=\.\.\.\)",
    ),
    # -- fetches ---------------------------------------------------------------------------
    (
        "unknown-log-key",
        lambda: fit(Fetches("val_loss")),
        UnknownLogKeyError,
        rf"Fetches\.before_run\(\) fetched the Keras log key 'val_loss', which this step's logs do not "
        rf"contain\. {LOG_KEYS}",
    ),
    (
        "unknown-log-key-no-after-run",
        lambda: fit(Returns(T.SessionRunArgs("val_loss"))),
        UnknownLogKeyError,
        rf"Returns\.before_run\(\) fetched the Keras log key 'val_loss'.*{LOG_KEYS}",
    ),
    (
        "unknown-key-nested",
        lambda: fit(Fetches(["loss", {"x": "acc"}])),
        UnknownLogKeyError,
        rf"Fetches\.before_run\(\) fetched the Keras log key 'acc'.*{LOG_KEYS}",
    ),
    (
        "unknown-tensor-name",
        lambda: fit(Fetches("loss:1")),
        ValueError,
        r"Fetches\.before_run\(\) fetched 'loss:1', which names no tensor of the adapter graph; a Keras "
        r"log key is fetched as 'key' or 'key:0'",
    ),
    (
        # SessionRunArgs(fetches=None) fetches nothing (results None, as in TF1): None inside a structure.
        "fetch-none",
        lambda: fit(Fetches(["loss", None])),
        TypeError,
        rf"Fetches\.before_run\(\) fetched None of type NoneType\. {ACCEPTED}",
    ),
    (
        "fetch-numpy-array",
        lambda: fit(Fetches(np.zeros(2))),
        TypeError,
        rf"Fetches\.before_run\(\) fetched array\(\[0\., 0\.\]\) of type ndarray\. {ACCEPTED}",
    ),
    ("fetch-set", lambda: fit(Fetches({"loss"})), TypeError, rf"fetched \{{'loss'\}} of type set\. {ACCEPTED}"),
    (
        "fetch-generator",
        lambda: fit(Fetches(lambda: (k for k in ["loss"]))),
        TypeError,
        rf"Fetches\.before_run\(\) fetched <generator .*> of type generator\. {ACCEPTED}",
    ),
    (
        "fetch-too-deep",
        lambda: fit(Fetches(deep(120))),
        ValueError,
        r"Fetches\.before_run\(\) fetched a structure nested deeper than 100 levels",
    ),
    (
        "foreign-graph-tensor",
        lambda: fit(Fetches(FOREIGN_TENSOR)),
        ValueError,
        r"Fetches\.before_run\(\) fetched .*foreign.*, which belongs to another graph\. Hooks must build their "
        r"tensors in begin\(\).*or fetch log keys by name",
    ),
    (
        "tensor-of-an-earlier-run",
        tensor_of_an_earlier_run,
        ValueError,
        r"Fetches\.before_run\(\) fetched .*keras_logs/loss.*, which belongs to the adapter graph of another "
        r"run \(an earlier fit/evaluate, or another HookCallback\)",
    ),
    (
        "session-run-unknown-key",
        lambda: fit(SessionRun("lr")),
        UnknownLogKeyError,
        rf"SessionRun\.after_run\(\) \(through session\.run\) fetched the Keras log key 'lr'.*{LOG_KEYS}",
    ),
    (
        "fetch-a-metric-without-batch-values",
        lambda: fit(Fetches("calls"), model=model_with_a_custom_metric()),
        BatchValueError,
        r"The log key 'calls' has no per-batch value: it is the result of the metric Calls\(name='calls'\), which "
        r"defines its own update_state, which, run again .* would also run the stateful ops \['AssignAddVariableOp'\]"
        r".*Either pass HookCallback\(\.\.\., values='running_mean'\)",
    ),
    (
        "session-run-numpy",
        lambda: fit(SessionRun(np.ones(1))),
        TypeError,
        rf"SessionRun\.after_run\(\) \(through session\.run\) fetched .* of type ndarray\. {ACCEPTED}",
    ),
    (
        "unknown-tf1-names",
        lambda: fit(Fetches(["cross_entropy:0", "loss", "train_accuracy"])),
        UnknownLogKeyError,
        rf"Fetches\.before_run\(\) fetched the Keras log keys 'cross_entropy', 'train_accuracy', which this "
        rf"step's logs do not contain\. {LOG_KEYS}\. Names map: none "
        r"\(HookCallback\(names=\.\.\.\) was not given\)\. .*"
        r"HookCallback\(names=\{'tf1_name': 'loss'\}\)",
    ),
    (
        "near-miss-log-key",
        lambda: fit(Fetches("los")),
        UnknownLogKeyError,
        rf"fetched the Keras log key 'los', which this step's logs do not contain\. Did you mean 'loss' for "
        rf"'los'\? {LOG_KEYS}",
    ),
    (
        "typo-in-a-names-map-value",
        lambda: fit(HookCallback(Fetches("xent"), names={"xent": "los"})),
        UnknownLogKeyError,
        r"The names map sends 'xent' to 'los', which names no log key of this step \(did you mean 'loss'\?\); "
        r"correct that entry\.",
    ),
    (
        "unknown-name-with-a-names-map",
        lambda: fit(HookCallback(Fetches("l2_loss"), names={"cross_entropy": "loss"})),
        UnknownLogKeyError,
        rf"fetched the Keras log key 'l2_loss'.*{LOG_KEYS}\. Names map: \{{'cross_entropy': 'loss'\}}",
    ),
    (
        "log-tensor-of-a-names-map-typo",
        lambda: fit(HookCallback(Fetches(lambda: log_tensor("train_accuracy") * 1.0), names={"train_accuracy": "acc"})),
        UnknownLogKeyError,
        r"\(the step's graph run\) fetched the Keras log key 'acc'.* The names map sends 'train_accuracy' to 'acc', "
        r"which names no log key of this step; correct that entry\. "
        rf"{LOG_KEYS}\. Names map: \{{'train_accuracy': 'acc'\}}",
    ),
    # -- the model's variables ------------------------------------------------------------
    (
        "write-to-a-scheduled-learning-rate",
        write_to_a_scheduled_rate,
        ValueError,
        r"Fetches\.before_run\(\) runs the op 'Assign(_\d+)?' \(Assign\), which writes 'learning_rate': the "
        r"optimizer's learning rate is computed from the global step by a schedule \(or a callable\) at every "
        r"step, so a value written to it would be overwritten\. Compile with a float rate "
        r".*keras\.callbacks\.LearningRateScheduler",
    ),
    (
        "eager-variable-not-of-the-model",
        lambda: fit(Fetches(lambda: tf.multiply(STRAY, 2.0))),
        ValueError,
        r"Fetches\.begin\(\) used the eager variable 'stray:0' in an op of the adapter graph, and it is neither the "
        r"Keras model's nor its optimizer's.*HookCallback\(names=\{'some_name': variable\}\)",
    ),
    (
        "a-placeholder-fed-by-two-hooks",
        fed_by_two_hooks,
        RuntimeError,
        r"Feeds\.before_run\(\) feeds \['shared:0'\], which another hook feeds in the same step\.",
    ),
    # -- HookCallback(names=...) ------------------------------------------------------------
    (
        "names-not-a-dict",
        lambda: HookCallback([], names=[("cross_entropy", "loss")]),
        TypeError,
        r"HookCallback\(names=\.\.\.\) takes a dict from TF1 names to Keras log keys or variables, such as "
        r"\{'cross_entropy': 'loss'\}, got \[\('cross_entropy', 'loss'\)\] of type list",
    ),
    (
        "names-key-not-a-name",
        lambda: HookCallback([], names={"cross entropy": "loss"}),
        ValueError,
        r"HookCallback\(names=\.\.\.\): the key 'cross entropy' is not a TF1 tensor name\. Use names such as "
        r"'cross_entropy' or 'cross_entropy:0'",
    ),
    (
        "names-value-a-number",
        lambda: HookCallback([], names={"learning_rate_ref": 0.05}),
        TypeError,
        r"HookCallback\(names=\.\.\.\): 'learning_rate_ref' maps to 0\.05 of type float\. A TF1 name maps to a Keras "
        r"log key or another name \(a str, such as 'loss' or 'learning_rate'\), or to a variable",
    ),
    (
        "names-value-a-scheduled-rate",
        lambda: HookCallback([], names={"lr": tf.constant(0.1)}),
        TypeError,
        r"'lr' maps to .* of type EagerTensor\..* A learning rate that a schedule computes is a tensor, not a "
        r"variable: map the name to 'learning_rate' instead",
    ),
    (
        "names-in-a-circle",
        lambda: HookCallback([], names={"a": "b", "b": "a:0"}),
        ValueError,
        r"HookCallback\(names=\.\.\.\): the names \['a', 'b'\] map to each other in a circle",
    ),
]


@pytest.mark.parametrize("case, action, error, message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_error(case, action, error, message):
    with pytest.raises(error, match=message) as info:
        action()
    assert type(info.value) is error  # the exact type, not a subclass
    if re.match(r"\w+\\\.(before|after)_run", message):
        # Raised inside a hook call: the note says which one.
        assert any(note.startswith("Raised in ") for note in getattr(info.value, "__notes__", []))


def test_the_public_errors_show_their_public_names_in_tracebacks():
    assert f"{UnknownLogKeyError.__module__}.{UnknownLogKeyError.__name__}" == "hooks2callbacks.UnknownLogKeyError"
    assert f"{BatchValueError.__module__}.{BatchValueError.__name__}" == "hooks2callbacks.BatchValueError"


def test_the_table_has_at_least_25_cases():
    assert len(CASES) >= 25 and len({c[0] for c in CASES}) == len(CASES)


def test_a_failed_run_from_bad_input_leaves_the_hooks_usable():
    # The conflict is found before the second callback calls any hook method, and the run is released.
    calls: list = []
    hook = RecordingHook("h", calls)
    with pytest.raises(ValueError, match="already running"):
        fit(HookCallback(hook), HookCallback(hook))
    # Hooks begin at the first batch: the first callback's run began and called before_run.
    assert [c[1] for c in calls] == ["begin", "after_create_session", "before_run"]
    calls.clear()
    fit(HookCallback(hook))
    assert [c[1] for c in calls][-1] == "end" and len([c for c in calls if c[1] == "after_run"]) == 3


@pytest.mark.parametrize(
    "make_hooks, warned",
    [
        (lambda: [T.LoggingTensorHook(["loss"], every_n_iter=2)], "LoggingTensorHook"),
        (lambda: [OnlyAfterRun(), T.NanTensorHook("loss")], "OnlyAfterRun"),
        (
            lambda: [
                T.LoggingTensorHook(["loss"], every_n_secs=60),
                T.StopAtStepHook(last_step=100),
                T.NanTensorHook("loss"),
            ],
            None,
        ),
    ],
    ids=["every-n-iter", "custom-hook", "step-scheduled-only"],
)
def test_steps_per_execution_warns_for_hooks_that_count_calls(make_hooks, warned):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(make_hooks(), model=make_model(steps_per_execution=3))
    messages = [str(w.message) for w in caught if "steps_per_execution" in str(w.message)]
    if warned is None:
        assert messages == []
    else:
        assert len(messages) == 1
        assert "steps_per_execution=3, so hooks are called once per 3 steps" in messages[0]
        assert f"count those calls as steps: {warned} " in messages[0]
        assert "compile with steps_per_execution=1" in messages[0]


def test_reading_an_empty_collection_a_model_fn_filled_warns_naming_hook_collection_and_what_to_do():
    class Predictions:
        def begin(self):
            self.predictions = tf.compat.v1.get_collection("predictions")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(Predictions())
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert messages == [
        "HookCallback: Predictions.begin() read the graph collection 'predictions', which is empty. A TF1 "
        "model_fn filled it, and a Keras model does not, so the hook sees nothing there (a count of 0, nothing "
        "to log or broadcast). HookCallback fills GLOBAL_VARIABLES, TRAINABLE_VARIABLES and MODEL_VARIABLES (the "
        "model's and optimizer's variables) and LOSSES (the loss). The batch's tensors have names of their "
        "own: log_tensor('predictions'), 'features', 'labels' and 'sample_weight' (docs: What hooks see, the "
        "batch's tensors). Fill this one yourself in a hooks factory, "
        "before making the hooks (tf.compat.v1.add_to_collection('predictions', "
        "hooks2callbacks.log_tensor('some_key'))), or change the hook to fetch log keys or variables."
    ]


def test_hooks_that_log_at_info_under_a_warning_level_logger_say_so_once(monkeypatch):
    from hooks2callbacks import _hook_list

    monkeypatch.setattr(_hook_list, "_warned_logging", False)
    logger = tf.get_logger()
    monkeypatch.setattr(logger, "level", logging.WARNING)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            fit(T.LoggingTensorHook(["loss"], every_n_iter=1))
    said = [w for w in caught if "log at INFO" in str(w.message)]
    assert len(said) == 1
    assert "LoggingTensorHook log at INFO, and TF's logger is at WARNING" in str(said[0].message)
    assert 'tf.get_logger().setLevel("INFO")' in str(said[0].message)
    monkeypatch.setattr(_hook_list, "_warned_logging", False)
    monkeypatch.setattr(logger, "level", logging.INFO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(T.LoggingTensorHook(["loss"], every_n_iter=1))
    assert not [w for w in caught if "log at INFO" in str(w.message)]
