"""The TF1 side: the graph built from the `model_fn`, run under a real `MonitoredSession`."""

from __future__ import annotations

import contextlib
import os
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from hooks2callbacks._estimator import _LOSS_NAME, _STEP_NAME, ModeKeys, _EvalResultsWriter, _ModelDir
from hooks2callbacks._seams import nan_hook_loss
from hooks2callbacks.migration._races import Race, RaceWatch
from hooks2callbacks.migration._record import _call_factory, _Side, _wrap

_TF1_MODE = {"train": ModeKeys.TRAIN, "eval": ModeKeys.EVAL, "predict": ModeKeys.PREDICT}


class _Tf1Run:
    """The TF1 graph built from model_fn; its initial values written to `prefix`."""

    def __init__(self, model_fn: Any, batches: list[tuple[Any, Any]], mode: str, params: Any) -> None:
        self.graph = tf.Graph()
        self.batches = batches
        self.mode = mode
        with self.graph.as_default():
            v1 = tf.compat.v1
            # As Estimator made it: a ref variable in GLOBAL_STEP, and the read hooks take.
            self.global_step = v1.get_variable(
                "global_step",
                [],
                tf.int64,
                v1.zeros_initializer(),
                trainable=False,
                use_resource=False,
                collections=[v1.GraphKeys.GLOBAL_VARIABLES, v1.GraphKeys.GLOBAL_STEP],
            )
            from tensorflow.python.training import training_util  # pylint: disable=import-outside-toplevel

            read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
            features, labels = self._inputs()
            # The step's read happens before the increment, so hooks see the stale step as the
            # stock hooks assume (Estimator left it to the scheduler).
            with tf.control_dependencies([read]), _legacy_layers(), _fixed_start():
                spec = model_fn(features=features, labels=labels, mode=_TF1_MODE[mode], params=params or {})
                spec = _as_estimator_spec(spec)
            self.fetches = self._fetches(spec)
            self.loss = getattr(spec, "loss", None)
            # eval_metric_ops by the keys the user knows: (value tensor, update op).
            self.metric_ops = dict(getattr(spec, "eval_metric_ops", None) or {}) if mode == "eval" else {}
            self.results: dict[str, Any] = {}  # what Estimator.evaluate returned, by key (eval mode)
            if mode == "eval" and self.loss is not None:
                # Estimator.evaluate added the mean of the loss to the eval metrics ("loss").
                with tf.name_scope("estimator_evaluate"):
                    loss_mean = tf.compat.v1.metrics.mean(self.loss)
                self.fetches = [*self.fetches, loss_mean[1]]
                self.results = {
                    key: pair[0] for key, pair in self.metric_ops.items() if isinstance(pair, (tuple, list))
                }
                self.results["loss"] = loss_mean[0]
            self.trainable = [v.op.name for v in v1.trainable_variables()]
            self.adam = any(v.op.name.endswith("/Adam") for v in v1.global_variables())
            self.saver = v1.train.Saver(v1.global_variables(), max_to_keep=None)

    def _inputs(self) -> tuple[Any, Any]:
        features, labels = self.batches[0]
        pairs = labels is not None and self.mode != "predict"
        first = (features, labels) if pairs else features

        def signature(a: Any) -> tf.TensorSpec:
            a = np.asarray(a)
            return tf.TensorSpec((None, *a.shape[1:]), tf.as_dtype(a.dtype))

        def generate() -> Iterator[Any]:
            for f, y in self.batches:
                yield (f, y) if pairs else f

        dataset = tf.data.Dataset.from_generator(generate, output_signature=tf.nest.map_structure(signature, first))
        element = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        return element if pairs else (element, None)

    def _fetches(self, spec: Any) -> Any:
        mode = self.mode
        loss = getattr(spec, "loss", None)
        if mode == "train":
            if loss is None or getattr(spec, "train_op", None) is None:
                raise ValueError(
                    f"check_migration(model_fn=...): in train mode the model_fn must return an EstimatorSpec "
                    f"with a loss and a train_op (as Estimator required), got loss={loss!r}, "
                    f"train_op={getattr(spec, 'train_op', None)!r}. Return "
                    "EstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, global_step))."
                )
            return spec.train_op
        if mode == "eval":
            if loss is None:
                raise ValueError(
                    f"check_migration(model_fn=...): in eval mode the model_fn must return an EstimatorSpec "
                    f"with a loss (as Estimator required), got {spec!r}."
                )
            updates = [value[1] for value in (getattr(spec, "eval_metric_ops", None) or {}).values()]
            return [loss, *updates]
        predictions = getattr(spec, "predictions", None)
        if predictions is None:
            raise ValueError(
                f"check_migration(model_fn=...): in predict mode the model_fn must return an EstimatorSpec "
                f"with predictions, got {spec!r}."
            )
        return predictions

    def save_initial(self, directory: str) -> str:
        with self.graph.as_default(), tf.compat.v1.Session(graph=self.graph) as session:
            # The global step first: model_fn's initializers (a warm start's restores) were built
            # under the dependency on its read, which needs it initialized.
            session.run(self.global_step.initializer)
            session.run(tf.compat.v1.global_variables_initializer())
            return str(self.saver.save(session, os.path.join(directory, "initial.ckpt"), write_meta_graph=False))

    def run(self, factory: Callable[[], Any], side: _Side, steps: int | None, prefix: str, order: int = 0) -> None:
        """Runs the hooks under a `MonitoredSession` from the checkpoint at `prefix`, recorded on `side`.

        Args:
            factory: The hooks factory, called once in this graph.
            side: Where the calls are recorded.
            steps: Session runs at most (None: until the data ends).
            prefix: The checkpoint both sides start from.
            order: Where a hook's fetch races with the run's writes (`_races`), the order the
                hook is given: 0, the value read before the run; 1, the value read after it.
        """
        side.watch = RaceWatch(self.graph, self.fetches)
        side.order = order
        races = side.watch.run_races()
        for read, variable, write in races:
            side.races.setdefault(
                ("(run)", read.name),
                Race("(run)", "the train op", read.name, variable.name, f"{write.name} ({write.type})"),
            )
        side.watch.order(races, order)
        with self.graph.as_default():
            made = _call_factory(factory, "TF1")
            if any(type(h) is _ModelDir for h in made):
                # estimator_hooks(): its NanTensorHook("loss") fetched the loss tensor under Estimator.
                for hook in made:
                    if isinstance(hook, tf.compat.v1.train.NanTensorHook) and vars(hook).get("_loss_tensor") == "loss":
                        nan_hook_loss(hook, self.loss)
            hooks = [_wrap(_on_tf1(h, self.loss, self.results), i, side) for i, h in enumerate(made)]
            # init_fn restores every global variable, so init_op need only initialize the step whose
            # read the model_fn's initializers (a warm start's) depend on.
            scaffold = tf.compat.v1.train.Scaffold(
                init_op=self.global_step.initializer, init_fn=lambda _, session: self.saver.restore(session, prefix)
            )
            creator = tf.compat.v1.train.ChiefSessionCreator(scaffold=scaffold)
            limit = len(self.batches) if steps is None else steps
            with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=hooks) as session:
                while side.step < limit and not session.should_stop():
                    session.run(self.fetches)
                    side.step += 1


def _as_estimator_spec(spec: Any) -> Any:
    """The EstimatorSpec that Estimator ran: a `TPUEstimatorSpec` converted as `TPUEstimator(use_tpu=False)` did.

    TPUEstimator called `spec.as_estimator_spec()` on CPU, which calls `eval_metrics`'
    metric_fn on its tensors (giving `eval_metric_ops`) and `scaffold_fn`.
    """
    convert = getattr(spec, "as_estimator_spec", None)
    return convert() if callable(convert) else spec


@contextlib.contextmanager
def _fixed_start(seed: int = 0) -> Iterator[None]:
    """The TF1 graph's initial values the same in every check, in any process: one start, one verdict.

    Both sides start from the TF1 graph's initial values. TF1 drew them from the graph
    seed, random where the model_fn set none, so the graph seed defaults to `seed` (a
    model_fn's own `set_random_seed` replaces it). `tf.compat.v1.layers` in TF 2.16+
    (tf_keras's legacy layers) draw an unseeded initializer's seed from Python's
    `random`, whatever the graph seed (`tf_keras` backend, `RandomGenerator._create_seed`),
    so the start depended on what the process had drawn before (the tests that ran
    earlier in its worker): Python's and NumPy's global generators are seeded too while
    the model_fn builds, and the caller's states put back after.
    """
    tf.compat.v1.set_random_seed(seed)
    python_state, numpy_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    # After tf_keras.utils.set_random_seed, tf_keras draws those seeds from a generator of its own.
    seeds = getattr(sys.modules.get("tf_keras.src.backend"), "_SEED_GENERATOR", None)
    generator = getattr(seeds, "generator", None)
    if generator is not None:
        seeds.generator = random.Random(seed)  # type: ignore[union-attr]
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        if generator is not None:
            seeds.generator = generator  # type: ignore[union-attr]


@contextlib.contextmanager
def _legacy_layers() -> Iterator[None]:
    """`tf.compat.v1.layers` as tf_keras's legacy layers, for a model_fn that builds with them.

    Under Keras 3, TensorFlow's `tf.compat.v1.layers` raises "not available with
    Keras 3"; tf_keras (`pip install tf-keras`) still has them, as TF1 had them.
    """
    v1 = tf.compat.v1
    try:
        v1.layers.dense  # noqa: B018  # TF's lazy loader raises here under Keras 3
        yield
        return
    except AttributeError:
        pass
    try:
        from tf_keras.api._v1.keras.__internal__.legacy import layers  # pylint: disable=import-outside-toplevel
    except ImportError:
        yield  # the model_fn fails on its own line, with TF's message
        return
    previous = v1.__dict__.get("layers")
    v1.layers = layers
    try:
        yield
    finally:
        if previous is None:
            del v1.layers
        else:
            v1.layers = previous


def _on_tf1(hook: Any, loss: Any, results: Any = None) -> Any:
    """The TF1 side's counterpart of a hook of `estimator_hooks`: what MonitoredTrainingSession did for it.

    `estimator_hooks(model_dir)` gives the hooks Estimator added to a run; its
    first hook does, in a Keras run, what `MonitoredTrainingSession(checkpoint_dir=
    model_dir)` did at session creation. On the TF1 side the check does that in
    the TF1 graph itself (a saver keeping `keep_checkpoint_max` checkpoints, the
    `loss` summary Estimator added and every summary merged, the loss and step
    the logging hook prints), under the hook's own class name, so that both sides
    record the same calls. Other hooks are returned as they are.
    """
    if type(hook) is _EvalResultsWriter:
        writer: Any = object.__new__(_Tf1EvalResultsWriter)
        writer.__dict__ = hook.__dict__
        writer.tf1_results = results or {}
        return writer
    if type(hook) is not _ModelDir:
        return hook
    counterpart: Any = object.__new__(_Tf1ModelDir)
    counterpart.__dict__ = hook.__dict__
    counterpart.tf1_loss = loss
    return counterpart


class _Tf1EvalResultsWriter(_EvalResultsWriter):
    """`estimator_hooks(mode="eval")`'s writer on the TF1 side: what `Estimator.evaluate` wrote at its end.

    The `eval_metric_ops`' values and the mean of the loss, at the global step:
    logged ("Saving dict for global step N: ...") and written as scalars in the
    eval directory.
    """

    tf1_results: Any = None

    def begin(self) -> None:
        self._results = {}
        self._global_step = tf.compat.v1.train.get_global_step()

    def before_run(self, run_context: Any) -> None:
        return None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        return None

    def end(self, session: Any) -> None:
        self._write(session, dict(self.tf1_results))


_Tf1EvalResultsWriter.__name__ = _EvalResultsWriter.__name__
_Tf1EvalResultsWriter.__qualname__ = _EvalResultsWriter.__qualname__


class _Tf1ModelDir(_ModelDir):
    """`_ModelDir` on the TF1 side of `check_migration` (see `_on_tf1`)."""

    tf1_loss: Any = None

    def begin(self) -> None:
        v1 = tf.compat.v1
        graph = v1.get_default_graph()
        graph.clear_collection(v1.GraphKeys.SAVERS)
        saver = v1.train.Saver(sharded=True, max_to_keep=self._keep_checkpoint_max or 0)
        graph.add_to_collection(v1.GraphKeys.SAVERS, saver)
        if self._scaffold is not None:
            if not any(op.name == "loss" for op in v1.get_collection(v1.GraphKeys.SUMMARIES)):
                v1.summary.scalar("loss", self.tf1_loss)
            self._scaffold.summary_op = v1.summary.merge_all()
        with graph.name_scope(None):
            tf.identity(self.tf1_loss, name=_LOSS_NAME)
            # Estimator's logging hook fetched the global step variable next to the train op:
            # TF1's own race (the check runs both orders).
            tf.identity(v1.train.get_global_step(), name=_STEP_NAME)
        self.restored = None  # the side's model_dir is its own, empty at the start


_ModelDir_name = _ModelDir.__name__
_Tf1ModelDir.__name__ = _ModelDir_name
_Tf1ModelDir.__qualname__ = _ModelDir.__qualname__
