"""A spec of `TPUEstimatorSpec`'s fields, as TF 1.x's TPU jobs returned from their model_fn.

Modelled on TF 1.x's `tf.contrib.tpu.TPUEstimatorSpec` (its fields, and `eval_metrics` as a
`(metric_fn, tensors)` pair rather than `eval_metric_ops`); `as_estimator_spec()` gives what
`TPUEstimator(use_tpu=False)` ran on CPU: the metric_fn called on the tensors. Written here;
TF 2 has no such class.
"""

from __future__ import annotations

import collections

from hooks2callbacks._estimator import EstimatorSpec

_FIELDS = ("mode", "predictions", "loss", "train_op", "eval_metrics", "export_outputs", "scaffold_fn", "host_call")


class TPUSpecLike(collections.namedtuple("TPUSpecLike", _FIELDS, defaults=(None,) * (len(_FIELDS) - 1))):
    """A model_fn's result with `TPUEstimatorSpec`'s fields."""

    def as_estimator_spec(self) -> EstimatorSpec:
        """The EstimatorSpec a CPU run made of it: `eval_metric_ops` from `metric_fn(*tensors)`."""
        ops = None
        if self.eval_metrics is not None:
            metric_fn, tensors = self.eval_metrics
            ops = metric_fn(**tensors) if isinstance(tensors, dict) else metric_fn(*tensors)
        return EstimatorSpec(
            mode=self.mode,
            predictions=self.predictions,
            loss=self.loss,
            train_op=self.train_op,
            eval_metric_ops=ops,
            scaffold=self.scaffold_fn() if self.scaffold_fn else None,
        )
