"""The adapter graph: the TF1 global step and log-key tensors made on lookup."""

from __future__ import annotations

import pytest
import tensorflow as tf
from tensorflow.python.training import training_util

from hooks2callbacks import log_tensor
from hooks2callbacks._graph import AdapterGraph


def test_global_step_is_found_the_tf1_ways():
    graph = AdapterGraph()
    with graph.as_default():
        step = tf.compat.v1.train.get_global_step()
        assert step is graph.global_step
        assert step.dtype.base_dtype == tf.int64 and not step.trainable
        assert graph.get_tensor_by_name("global_step:0").dtype._is_ref_dtype  # not a resource handle
        read = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        assert graph.is_step(read) and graph.is_step(step) and graph.is_step(step.value())


def test_an_unknown_name_becomes_a_log_key_tensor_once():
    graph = AdapterGraph()
    loss = graph.get_tensor_by_name("loss:0")
    assert loss.op.type == "Placeholder" and loss.dtype == tf.float32
    assert graph.as_graph_element("loss:0") is loss
    assert graph.get_operation_by_name("loss") is loss.op
    assert loss.name == "keras_logs/loss:0"  # leaves the name "loss" to summaries
    assert graph.placeholder_keys[loss] == "loss"
    assert graph.existing_element("accuracy") is None  # looking without making


def test_other_outputs_and_invalid_names_still_miss():
    graph = AdapterGraph()
    graph.get_tensor_by_name("loss:0")
    # LoggingTensorHook probes "name:1" to reject ambiguous names.
    with pytest.raises(KeyError):
        graph.as_graph_element("loss:1")
    with pytest.raises(KeyError):
        graph.as_graph_element("has space:0")


def test_log_key_tensors_can_be_made_after_the_graph_is_sealed():
    graph = AdapterGraph()
    graph.seal()
    assert graph.finalized
    accuracy = graph.get_tensor_by_name("accuracy:0")
    assert graph.finalized and accuracy.op.type == "Placeholder"
    with pytest.raises(RuntimeError, match="finalized"), graph.as_default():
        tf.constant(1.0)


def test_default_graph_scope_does_what_as_default_does():
    graph = AdapterGraph()
    seen = {}
    for name, make in (("as_default", graph.as_default), ("scope", lambda: graph.scope)):
        assert tf.executing_eagerly()
        with make():
            seen[name] = (
                tf.compat.v1.get_default_graph() is graph,
                tf.executing_eagerly(),
                tf.compat.v1.train.get_global_step() is graph.global_step,
                tf.constant(1.0).graph is graph,
            )
            with tf.init_scope():  # stays in the graph, as it does under as_default()
                seen[name] += (tf.executing_eagerly(),)
            with graph.scope:  # re-entrant
                pass
            seen[name] += (tf.compat.v1.get_default_graph() is graph, tf.executing_eagerly())
        assert tf.executing_eagerly() and tf.compat.v1.get_default_graph() is not graph
    assert seen["scope"] == seen["as_default"] == (True, False, True, True, False, True, False)


def test_a_summary_named_after_a_log_key_gets_that_tag_and_leaves_the_name_to_the_key():
    graph = AdapterGraph()
    with graph.as_default():
        summary = tf.compat.v1.summary.scalar("loss", log_tensor("loss"))
        assert summary.op.name == "loss"  # so its tag is "loss", not "loss_1"
        assert graph.get_tensor_by_name("loss:0") is log_tensor("loss")
        assert graph.as_graph_element("loss") is log_tensor("loss").op
        assert graph.existing_element("loss") is None
        # Any other op does own its name.
        doubled = tf.identity(log_tensor("loss") * 2, name="doubled")
        assert graph.get_tensor_by_name("doubled:0") is doubled


def test_log_tensor_outside_an_adapter_graph_says_where_it_works():
    with pytest.raises(RuntimeError, match=r"log_tensor\('loss'\) was called outside HookCallback.*hooks factory"):
        log_tensor("loss")
    with tf.Graph().as_default(), pytest.raises(RuntimeError, match="not an adapter graph"):
        log_tensor("loss")


@pytest.mark.parametrize("key", ["", "has space", 3, "loss:1"])
def test_log_tensor_rejects_names_that_cannot_be_log_keys(key):
    with AdapterGraph().as_default(), pytest.raises(ValueError, match=r"a log key is a name such as 'loss'"):
        log_tensor(key)
