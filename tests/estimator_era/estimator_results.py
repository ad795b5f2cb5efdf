"""How `Estimator.evaluate` wrote its results into `model_dir/eval`: the reference of the eval test.

The two functions are tensorflow/estimator's own, `_dict_to_str` and `_write_dict_to_summary` of
`tensorflow_estimator/python/estimator/estimator.py`, read from the installed PyPI package
tensorflow-estimator 2.15.0 and run unchanged (`installed.load`: the package no longer imports).
"""

import numpy as np
import six
import tensorflow as tf
from google.protobuf import message
from installed import load
from tensorflow.core.framework import summary_pb2

_estimator = load(
    "tensorflow_estimator",
    "python/estimator/estimator.py",
    ("_dict_to_str", "_write_dict_to_summary"),
    {"np": np, "six": six, "tf": tf, "message": message, "summary_pb2": summary_pb2},
)
_dict_to_str, _write_dict_to_summary = _estimator._dict_to_str, _estimator._write_dict_to_summary
