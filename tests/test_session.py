"""The session hooks call: current values, variable.load, ops built in begin()."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from support import Recorder, make_data, make_model

from hooks2callbacks import HookCallback

X, Y = make_data()


def fit(hooks, model=None, epochs=1):
    model = model or make_model()
    model.fit(X, Y, batch_size=32, epochs=epochs, verbose=0, callbacks=[HookCallback(hooks)])
    return model


def test_session_run_sees_the_current_global_step():
    class Reader:
        def begin(self):
            self.step = tf.compat.v1.train.get_global_step()
            self.seen = []

        def after_create_session(self, session, coord):
            self.seen.append(("created", session.run(self.step)))

        def before_run(self, run_context):
            self.seen.append(("before", run_context.session.run(self.step)))

        def after_run(self, run_context, run_values):
            self.seen.append(("after", run_context.session.run("global_step:0")))

        def end(self, session):
            self.seen.append(("end", session.run(self.step)))

    hook = Reader()
    fit(hook)
    expected = [("created", 0)]
    for step in range(10):
        expected += [("before", step), ("after", step + 1)]
    assert hook.seen == expected + [("end", 10)]


def test_variables_made_in_begin_are_initialised_loadable_and_runnable():
    class Counter:
        def begin(self):
            self.total = tf.compat.v1.Variable(0.0, use_resource=False, name="total")
            loss = tf.compat.v1.get_default_graph().get_tensor_by_name("loss:0")
            self.add = tf.compat.v1.assign_add(self.total, loss)

        def after_create_session(self, session, coord):
            self.total.load(100.0, session)  # a real session.run of the initializer, with a feed

        def before_run(self, run_context):
            return tf.compat.v1.train.SessionRunArgs(self.add)

        def after_run(self, run_context, run_values):
            self.last = run_values.results

        def end(self, session):
            self.final = session.run(self.total)

    hook = Counter()
    model = make_model()
    recorder = Recorder(keras, X, Y)
    model.fit(X, Y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[recorder, HookCallback(hook)])
    # As in TF1: the sum of each batch's own loss.
    assert hook.final == pytest.approx(100.0 + np.float32([b["loss"] for b in recorder.train_batch]).sum(), rel=1e-5)
    assert hook.last == hook.final


def test_log_and_step_fetches_never_make_a_real_session():
    class Probe:
        def begin(self):
            self.loss = tf.compat.v1.get_default_graph().get_tensor_by_name("loss:0")

        def before_run(self, run_context):
            return tf.compat.v1.train.SessionRunArgs([self.loss, "accuracy", tf.compat.v1.train.get_global_step()])

        def after_run(self, run_context, run_values):
            self.made = run_context.session._session is not None

    hooks = [Probe(), tf.compat.v1.train.StopAtStepHook(last_step=8), tf.compat.v1.train.NanTensorHook("loss")]
    fit(hooks)
    assert hooks[0].made is False


def test_coordinator_stop_ends_training():
    class CoordStop:
        def after_create_session(self, session, coord):
            self.coord = coord

        def after_run(self, run_context, run_values):
            self.coord.request_stop()

    model = fit(CoordStop(), epochs=3)
    assert int(model.optimizer.iterations.numpy()) == 1
