"""Shared pieces of the benchmark scripts: models, data, the hook stacks, machine info.

Not part of the library; imported by the scripts of `benchmarks/` (run them from
the repository root or from `benchmarks/`; each script puts its own folder on
`sys.path`).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import platform
import subprocess
import sys
from typing import Any

import numpy as np

# Layer widths per model: inputs, hidden..., classes.
MODELS = {
    "small": (32, 64, 10),
    "mid": (512, 1024, 1024, 10),
}
BATCH = 32
# Distinct batches in the synthetic data set; it is repeated forever.
N_BATCHES = 64
SEED = 1234


def synthetic_arrays(widths: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Returns (x, y): BATCH * N_BATCHES random samples for an MLP of `widths`."""
    rng = np.random.default_rng(SEED)
    n = BATCH * N_BATCHES
    x = rng.standard_normal((n, widths[0]), dtype=np.float32)
    y = rng.integers(0, widths[-1], size=(n,), dtype=np.int64)
    return x, y


def synthetic_dataset(widths: tuple[int, ...]) -> Any:
    """An endless `tf.data.Dataset` of (x, y) batches of BATCH, the same in every variant."""
    import tensorflow as tf

    x, y = synthetic_arrays(widths)
    return (
        tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)
    )


def keras_mlp(widths: tuple[int, ...], custom_metric: bool = False) -> Any:
    """A compiled Keras MLP: Dense(relu) hidden layers, logits out, Adam, accuracy metric.

    With `custom_metric`, also a metric with its own `update_state` (a running maximum
    of the batch-mean |logit|), whose batch value is its update run again from its reset state.
    """
    import keras

    keras.utils.set_random_seed(SEED)
    layers = [keras.Input((widths[0],))]
    layers += [keras.layers.Dense(w, activation="relu") for w in widths[1:-1]]
    layers += [keras.layers.Dense(widths[-1])]
    model = keras.Sequential(layers)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy", *([_RunningMax(keras)] if custom_metric else [])],
    )
    return model


def _RunningMax(keras: Any) -> Any:  # noqa: N802  (a class made for the Keras package)
    class RunningMax(keras.metrics.Metric):
        def __init__(self) -> None:
            super().__init__(name="running_max")
            self.top = self.add_weight(name="top", shape=(), initializer="zeros")

        def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
            self.top.assign(keras.ops.maximum(self.top.value, keras.ops.mean(keras.ops.abs(y_pred))))

        def result(self) -> Any:
            return self.top.value

    return RunningMax()


def stock_hooks(output_dir: str, loss: Any = "loss") -> list[Any]:
    """The four stock hooks of the "adapted" and "tf1" variants (fresh instances).

    `loss` is what NanTensorHook watches: the log key "loss" under the adapter;
    in TF1 the loss tensor itself (there a bare name would fetch the op, None).
    """
    import tensorflow as tf

    train = tf.compat.v1.train
    return [
        train.StopAtStepHook(last_step=10**9),
        train.LoggingTensorHook(["loss", "accuracy"], every_n_iter=100),
        train.NanTensorHook(loss),
        train.StepCounterHook(every_n_steps=100, output_dir=output_dir),
    ]


class BatchFromMeans:
    """Each batch's own loss and accuracy, derived by hand from Keras's running means.

    For equal-size, unweighted batches (as in these benchmarks), batch k of an
    epoch has `(k+1) * mean_k - k * mean_(k-1)`; this is what a hand-written
    callback can do at almost no cost. `HookCallback` gets the exact values
    from the step itself (any batch sizes and weights), at the cost measured
    here.
    """

    KEYS = ("loss", "accuracy")

    def __init__(self) -> None:
        self.previous: dict[str, float] = {}

    def __call__(self, batch: int, logs: dict[str, Any]) -> dict[str, Any]:
        if batch == 0:
            self.previous = {}
        values = dict(logs)
        for key in self.KEYS:
            mean = logs[key]
            values[key] = mean if batch == 0 else (batch + 1) * mean - batch * self.previous[key]
            self.previous[key] = mean
        return values


class DirectHooks:
    """The four stock hooks with no adapter: their own TF1 graph, their methods called directly.

    `after_run` builds each hook's results from the step's batch values (a dict
    fetch by tag, the loss tensor as the "loss" value, anything else as the stale
    global step), so only the hooks' own Python runs. Their
    `session.run(global_step)` gets the step.
    """

    def __init__(self, output_dir: str) -> None:
        import tensorflow as tf

        train = tf.compat.v1.train
        with tf.Graph().as_default():
            train.get_or_create_global_step()
            self.loss = tf.constant(0.5, name="loss")
            tf.constant(0.5, name="accuracy")
            self.hooks = stock_hooks(output_dir, self.loss)
            for hook in self.hooks:
                hook.begin()
        owner = self

        class Session:
            def run(self, fetches: Any) -> Any:
                return owner.step

        self.session = Session()
        self._original = train.SessionRunArgs(None)
        self._context_type, self._values_type = train.SessionRunContext, train.SessionRunValues
        self.step = np.int64(0)
        self.context: Any = None
        self._fetches: list[Any] = []

    def before_run(self) -> None:
        self.context = context = self._context_type(self._original, self.session)
        self._fetches = [hook.before_run(context) for hook in self.hooks]

    def after_run(self, logs: dict[str, Any]) -> bool:
        """Finishes the step; returns whether a hook asked to stop."""
        stale, self.step = self.step, self.step + 1
        for hook, args in zip(self.hooks, self._fetches, strict=True):
            fetches = None if args is None else args.fetches
            if fetches is None:
                value: Any = None
            elif isinstance(fetches, dict):
                value = {tag: logs[tag] for tag in fetches}
            elif fetches is self.loss:
                value = logs["loss"]
            else:
                value = stale
            hook.after_run(self.context, self._values_type(value, None, None))
        return bool(self.context.stop_requested)

    def end(self) -> None:
        for hook in self.hooks:
            hook.end(self.session)


def add_variant_arguments(parser: Any, variants: tuple[str, ...], json_help: str) -> None:
    """Adds the options `overhead.py` and `interleaved.py` share: --model, --variants and --json."""
    parser.add_argument("--model", choices=sorted(MODELS), default="small")
    parser.add_argument("--variants", default=",".join(variants), help="comma-separated subset, in this order")
    parser.add_argument("--json", metavar="PATH", help=json_help)


def variant_names(text: str, variants: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The variants named in a --variants value, and those of them not in `variants`."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    return names, sorted(set(names) - set(variants))


def machine_info() -> dict[str, Any]:
    """CPU, Python and library versions, the load average and the git state."""
    import keras
    import tensorflow as tf

    model_name = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model_name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    affinity: int | None
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    here = os.path.dirname(os.path.abspath(__file__))

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=here, capture_output=True, text=True, timeout=10, check=False
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "cpu_model": model_name,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
        "devices": [d.device_type for d in tf.config.list_physical_devices()],
        "loadavg": list(os.getloadavg()),
        "git": commit + ("-dirty" if dirty else ""),
        "hooks2callbacks_sources": source_digest(),
        "hooks2callbacks_file": _package_file(),
    }


def _package_file() -> str:
    import hooks2callbacks

    return os.path.abspath(hooks2callbacks.__file__)


def source_digest() -> str:
    """A short hash of the hooks2callbacks sources in use, to tie results to the code."""
    import hashlib

    import hooks2callbacks

    folder = os.path.dirname(os.path.abspath(hooks2callbacks.__file__))
    digest = hashlib.sha1()
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:12]


def read_rss_kb() -> int:
    """VmRSS of this process in kB, from /proc/self/status."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS line in /proc/self/status")


def count_fds() -> int:
    """Open file descriptors of this process (entries of /proc/self/fd)."""
    return len(os.listdir("/proc/self/fd"))


def python_line() -> str:
    return f"Python {sys.version.split()[0]}"


def ratio_of_medians(a: np.ndarray, b: np.ndarray, rng: Any, reps: int = 500) -> tuple[float, float, float]:
    """median(a)/median(b), and a 95% bootstrap interval that resamples whole cycles.

    Args:
        a: Step times of one variant, shaped (cycles, steps per cycle).
        b: The other variant's, in the same cycles.
        rng: A numpy random Generator.
        reps: Bootstrap resamples.

    Returns:
        The ratio and the interval's low and high ends.
    """
    r = float(np.median(a) / np.median(b))
    cycles = len(a)
    samples = []
    for _ in range(reps):
        pick = rng.integers(0, cycles, cycles)
        samples.append(np.median(a[pick]) / np.median(b[pick]))
    low, high = np.percentile(samples, [2.5, 97.5])
    return r, float(low), float(high)
