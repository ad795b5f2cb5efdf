"""STAND-IN for tensorflow/models' official/utils/logs/logger.py, which `hooks.py` beside it imports.

The real module pulls in the benchmark uploaders (Google Cloud BigQuery) that are not
installed here. `ExamplesPerSecondHook` uses only `BaseBenchmarkLogger().log_metric(name,
value, global_step=...)`, whose real version logs "Benchmark metric: %s" at INFO; this
stand-in keeps what it was given instead, so a test can compare it.
"""


class BaseBenchmarkLogger:
    """Keeps each `log_metric` call as `(name, value, global_step)`."""

    def __init__(self):
        self.metrics = []

    def log_metric(self, name, value, unit=None, global_step=None, extras=None):
        self.metrics.append((name, value, global_step))
