"""`check_migration`: a job's hooks under its TF1 `model_fn` and under its Keras model, compared.

The parts, one module each: the report (`_report`), what each side records
(`_record`), the batches (`_data`), the TF1 side (`_tf1`), the Keras side
(`_keras`), the comparison (`_compare`), the hints (`_hints`), and the check
that composes them (`_check`, whose docstring draws the whole run).
"""

from hooks2callbacks.migration._check import MODES, check_migration
from hooks2callbacks.migration._record import side
from hooks2callbacks.migration._report import Difference, MigrationReport

__all__ = ["MODES", "Difference", "MigrationReport", "check_migration", "side"]
