"""SessionRunHooks from public TF1 codebases, copied unchanged, with their sources: THE COPIES LEFT.

The project's rule is now that public code is used only by importing it, unchanged, from an
installed PyPI package. The blocks below are those that no PyPI package provides in a form that
imports under TensorFlow 2.18-2.21: tensor2tensor's PlateauOpHook, NVIDIA/DeepLearningExamples'
training hooks and tensorflow_estimator's early-stopping hook.
tests/estimator_era/README.md ("Public code in the tests") lists each, why it cannot be imported,
and what replaced the others: imports from tf-slim and tf-models-official, and hooks written for
this project in tests/modelled_hooks.py.

Each section names the repository, path and commit its code was copied from;
the code between the markers is as it is there (helpers they call included).
It was written for TensorFlow 1, where `import tensorflow as tf` meant the TF1
API: here `tf` is `tensorflow.compat.v1`, that same API in TF2, plus the name
TF2 removed that these hooks use (`tf.estimator.SessionRunHook`, given from what it was).
What a hook imports that is not installed here (NVIDIA's dllogger, Horovod)
is replaced by the smallest stand-in, marked STAND-IN and said why.
"""

from __future__ import annotations

import types
from typing import Any

import tensorflow

# pylint: disable=invalid-name,missing-docstring,unused-argument,protected-access,redefined-outer-name


class _TF1(types.ModuleType):
    """`tensorflow` as this TF1 code used it: `tensorflow.compat.v1`, then the TF2 names it lacks."""

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(tensorflow.compat.v1, name)
        except AttributeError:
            return getattr(tensorflow, name)


tf = _TF1("tf")
# tf.estimator was removed in TF 2.16; its SessionRunHook was tf.compat.v1.train's.
tf.estimator = types.SimpleNamespace(SessionRunHook=tensorflow.compat.v1.train.SessionRunHook)


import os  # noqa: E402

from tensorboard.backend.event_processing import event_accumulator  # noqa: E402
from tensorboard.backend.event_processing import event_multiplexer  # noqa: E402


# =============================================================================
# tensorflow/tensor2tensor, tensor2tensor/utils/metrics_hook.py,
# commit 0d149eaeb07acac9b8967935f44694e8d308e49e.
# =============================================================================
class MetricsBasedHook(tf.train.SessionRunHook):
  """Base class for hooks based on summary metrics.

  Subclasses should override _process_metrics.

  If _process_metrics returns True, calls run_context.request_stop().

  This can be used to something like "Stop after the loss has stopped decreasing
  for 5000 steps.
  """
  _RUN_NAME = "run%d"

  def __init__(self, events_dir, subdirs=None, tags=None, every_n_steps=1000):
    """Construct MetricsBasedHook.

    Args:
      events_dir: str, top-level directory containing events files.
      subdirs: list<str>, subdirectories of events_dir that also contain
        events files. Use "" to specify the top-level directory. Defaults to
        [""].
      tags: list<str>, names of metrics to collect. Default will collect all
        metrics.
      every_n_steps: int, collect metrics every n steps.
    """
    self._events_dir = events_dir
    self._subdirs = subdirs or [""]
    self._tags = tags
    self._every_n_steps = every_n_steps
    self._start_step = None
    self._event_multiplexer = self._init_multiplexer()

  def _init_multiplexer(self):
    dirs = [os.path.join(self._events_dir, subdir) for subdir in self._subdirs]
    run_path_map = dict([(self._RUN_NAME % i, d) for i, d in enumerate(dirs)])
    return event_multiplexer.EventMultiplexer(run_path_map)

  def begin(self):
    self._global_step_tensor = tf.train.get_global_step()
    if self._global_step_tensor is None:
      raise RuntimeError("Global step must be created to use MetricsBasedHook.")

  def after_create_session(self, session, coord):
    del coord
    if self._start_step is None:
      self._start_step = session.run(self._global_step_tensor)

  def before_run(self, run_context):
    del run_context
    return tf.train.SessionRunArgs([self._global_step_tensor])

  def after_run(self, run_context, run_values):
    global_step = run_values.results[0]
    if (global_step - self._start_step) % self._every_n_steps != 0:
      return
    metrics = self._collect_metrics()
    self._after_run(run_context, run_values, global_step, metrics)

  def _after_run(self, run_context, run_values, global_step, metrics):
    del run_values
    if self._process_metrics(global_step, metrics):
      run_context.request_stop()

  def _collect_metrics(self):
    self._event_multiplexer.Reload()
    subdir_data = {}
    for i, subdir in enumerate(self._subdirs):
      subdir_metrics = {}

      accum = self._event_multiplexer.GetAccumulator(self._RUN_NAME % i)
      for tag in accum.Tags()[event_accumulator.SCALARS]:
        steps, vals = zip(*[
            (event.step, event.value) for event in accum.Scalars(tag)])
        subdir_metrics[tag] = (steps, vals)

      subdir_data[subdir] = subdir_metrics
    return subdir_data

  def _process_metrics(self, global_step, metrics):
    """Process the collected metrics.

    Args:
      global_step: int, the current global step value.
      metrics: dict<str subdirectory, dict subdir_metrics>. The collected
        metrics. subdir_metrics is a dict from tag name to tuple of lists. The
        lists are a list of global steps and a list of values.
        i.e. subdir_metrics:
          `dict<str tag, tuple<list<int> global steps, list<float> values>>>`

    Returns:
      should_stop: bool. If True, will request that the session stops.
    """
    del global_step, metrics
    return False


class PlateauOpHook(MetricsBasedHook):
  """Runs an op when a metric has plateaued."""

  def __init__(self,
               events_dir,
               tag,
               plateau_op,
               num_plateau_steps=1000,
               plateau_delta=0.1,
               plateau_decrease=True,
               every_n_steps=1000,
               only_once=False):
    """See EarlyStoppingHook for args. Runs plateau_op if plateaued."""
    super(PlateauOpHook, self).__init__(
        events_dir=events_dir, tags=[tag], every_n_steps=every_n_steps)
    self._num_plateau_steps = num_plateau_steps
    self._plateau_delta = plateau_delta
    self._plateau_decrease = plateau_decrease
    self._plateau_op = plateau_op
    self._only_once = only_once
    self._should_run_op = False
    self._ever_ran = False
    self._last_metric_step_seen = 0

  @property
  def keep_alive(self):
    if self._only_once and self._ever_ran:
      return False
    return True

  def before_run(self, run_context):
    del run_context

    fetches = [self._global_step_tensor]
    if self._should_run_op and self.keep_alive:
      fetches.append(self._plateau_op)
      self._should_run_op = False
      self._ever_ran = True

    return tf.train.SessionRunArgs(fetches)

  def _after_run(self, run_context, run_values, global_step, metrics):
    del run_context
    del run_values
    del global_step

    if not self.keep_alive:
      return

    if not metrics:
      return

    if not list(metrics.values())[0]:
      return

    # There should be only a single subdir and a single tag
    steps, vals = list(metrics.values())[0][self._tags[0]]

    if not steps:
      return

    last_step = steps[-1]
    if last_step == self._last_metric_step_seen:
      return
    self._last_metric_step_seen = last_step

    if has_metric_plateaued(
        steps,
        vals,
        num_steps=self._num_plateau_steps,
        delta=self._plateau_delta,
        decrease=self._plateau_decrease):
      self._should_run_op = True


def has_metric_plateaued(steps, values, num_steps=100, delta=0.1,
                         decrease=True):
  """Check if metric has plateaued.

  A metric has plateaued if the value has not increased/decreased (depending on
  `decrease`) by `delta` for at least `num_steps`.

  Args:
    steps: list<int> list of global steps for values.
    values: list<float> list of metric values.
    num_steps: int, number of steps the metric has to have been plateaued for.
    delta: float, how much the metric should have changed by over num_steps.
    decrease: bool, whether to check if the metric has decreased by delta or
      increased by delta.

  Returns:
    bool, whether the metric has plateaued.
  """
  assert num_steps > 0
  if len(steps) < 2:
    return False

  steps_at_least_num_steps_ago = [
      s for s in steps if s <= (steps[-1] - num_steps)
  ]
  if not steps_at_least_num_steps_ago:
    # Not enough steps yet
    return False
  delta_step_idx = len(steps_at_least_num_steps_ago) - 1

  start_val = values[delta_step_idx]
  values_to_check = values[delta_step_idx:]
  observed_deltas = []
  for val in values_to_check:
    if decrease:
      observed_delta = start_val - val
    else:
      observed_delta = val - start_val
    observed_deltas.append(observed_delta)

  within_range = [obs < delta for obs in observed_deltas]
  return all(within_range)
# ============================================================================= end of copy

import signal  # noqa: E402
import time  # noqa: E402


class dllogger:  # noqa: N801
    """STAND-IN for NVIDIA's dllogger (not installed): keeps what the hooks log."""

    logged: list[tuple[Any, dict]] = []

    @classmethod
    def log(cls, data, step):
        cls.logged.append((step, dict(data)))


class hvd:  # noqa: N801
    """STAND-IN for horovod.tensorflow, one process: the sum over one process is its own value."""

    Sum = "Sum"

    @staticmethod
    def allreduce(tensor, op=None, name=None):
        return tf.identity(tensor, name=name)


def is_using_hvd():
    """STAND-IN for utils.hvd_utils.is_using_hvd: the Horovod branch, which feeds its own placeholder."""
    return True


# =============================================================================
# NVIDIA/DeepLearningExamples, TensorFlow/Classification/ConvNets/utils/hooks/training_hooks.py,
# commit 33110132cc60095a772194cef51254b03e7d1801.
# =============================================================================
class MeanAccumulator:

    def __init__(self):
        self.sum = 0
        self.count = 0

    def consume(self, value):
        self.sum += value
        self.count += 1

    def value(self):
        if self.count:
            return self.sum / self.count
        else:
            return 0


class TrainingLoggingHook(tf.estimator.SessionRunHook):

    def __init__(
        self, global_batch_size, num_steps, num_samples, num_epochs, steps_per_epoch, warmup_steps=20, logging_steps=1
    ):
        self.global_batch_size = global_batch_size
        self.num_steps = num_steps
        self.num_samples = num_samples
        self.num_epochs = num_epochs
        self.steps_per_epoch = steps_per_epoch
        self.warmup_steps = warmup_steps
        self.logging_steps = logging_steps

        self.current_step = 0
        self.current_epoch = 0
        self.t0 = None

        self.mean_throughput = MeanAccumulator()

    # Determines if its the last step of the epoch
    def _last_step_of_epoch(self, global_step):
        return (global_step + 1) // self.steps_per_epoch > (global_step // self.steps_per_epoch)

    def before_run(self, run_context):
        run_args = tf.train.SessionRunArgs(
            fetches=[
                tf.train.get_global_step(), 'cross_entropy_loss_ref:0', 'l2_loss_ref:0', 'total_loss_ref:0',
                'learning_rate_ref:0'
            ]
        )

        self.t0 = time.time()

        return run_args

    def after_run(self, run_context, run_values):
        global_step, cross_entropy, l2_loss, total_loss, learning_rate = run_values.results
        batch_time = time.time() - self.t0
        ips = self.global_batch_size / batch_time

        metrics = {
            "imgs_per_sec": ips,
            "cross_entropy": cross_entropy,
            "l2_loss": l2_loss,
            "total_loss": total_loss,
            "learning_rate": learning_rate
        }

        if self.current_step >= self.warmup_steps:
            self.mean_throughput.consume(metrics['imgs_per_sec'])

            if (self.current_step % self.logging_steps) == 0:
                metrics = {k: float(v) for k, v in metrics.items()}
                dllogger.log(data=metrics, step=(int(global_step // self.steps_per_epoch), int(global_step)))

        self.current_step += 1

        if self._last_step_of_epoch(global_step):
            metrics = {
                "cross_entropy": cross_entropy,
                "l2_loss": l2_loss,
                "total_loss": total_loss,
                "learning_rate": learning_rate
            }
            metrics = {k: float(v) for k, v in metrics.items()}
            dllogger.log(data=metrics, step=(int(global_step // self.steps_per_epoch), ))
            self.current_epoch += 1


class TrainingPartitionHook(tf.estimator.SessionRunHook):

    def __init__(self, sync_freq=10):
        super().__init__()
        self.signal_recieved = False
        self.sync_freq = sync_freq
        self.global_step = 0

        signal.signal(signal.SIGUSR1, self._signal_handler)
        signal.signal(signal.SIGTERM, self._signal_handler)

    def begin(self):
        if is_using_hvd():
            with tf.device("/cpu:0"):
                self.input_op = tf.placeholder(tf.int32, shape=())
                self.allreduce_op = hvd.allreduce(self.input_op, op=hvd.Sum, 
                                                  name="signal_handler_all_reduce")

    def before_run(self, run_context):
        fetches = [tf.train.get_global_step()]
        feed_dict = None

        if is_using_hvd() and (self.global_step % self.sync_freq) == 0:
            fetches += [self.allreduce_op]
            feed_dict = {self.input_op: int(self.signal_recieved)}
            
        return tf.train.SessionRunArgs(fetches, feed_dict=feed_dict)

    def after_run(self, run_context, run_values):
        self.global_step = run_values.results[0] + 1

        if is_using_hvd() and len(run_values.results) == 2:
            if run_values.results[1] > 0:
                run_context.request_stop()
        elif self.signal_recieved:
            run_context.request_stop()

    def _signal_handler(self, signum, frame):
        print("Stop signal received")
        self.signal_recieved = True
# ============================================================================= end of copy


# =============================================================================
# tensorflow/estimator, tensorflow_estimator/python/estimator/early_stopping.py,
# commit 07d38ddc4e1daaf244bdccb06da667bbecd6cce7 (written against TF2's `tf`;
# the names it uses are the same in tf.compat.v1).
# =============================================================================
class _MultiWorkerEarlyStoppingHook(tf.compat.v1.train.SessionRunHook):
  """Hook that requests stop when `should_stop_fn` returns `True`."""

  def _get_or_create_stop_var_with_aggregation(self):
    with tf.compat.v1.variable_scope(
        name_or_scope='signal_early_stopping',
        values=[],
        reuse=tf.compat.v1.AUTO_REUSE):
      return tf.compat.v1.get_variable(
          name='STOP',
          shape=[],
          dtype=tf.dtypes.int32,
          initializer=tf.compat.v1.keras.initializers.constant(0),
          collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES],
          synchronization=tf.VariableSynchronization.ON_WRITE,
          aggregation=tf.compat.v1.VariableAggregation.SUM,
          trainable=False)

  def __init__(self, should_stop_fn, run_every_steps=None):
    if not callable(should_stop_fn):
      raise TypeError('`should_stop_fn` must be callable.')

    self._should_stop_fn = should_stop_fn
    self._timer = tf.compat.v1.train.SecondOrStepTimer(
        every_secs=None, every_steps=run_every_steps)
    self._global_step_tensor = None
    self._stop_var = None
    self._stop_op = None
    self._non_stop_op = None

  def begin(self):
    self._global_step_tensor = tf.compat.v1.train.get_global_step()
    self._stop_var = self._get_or_create_stop_var_with_aggregation()
    assert tf.distribute.in_cross_replica_context()

    strategy = tf.distribute.get_strategy()
    self._stop_placeholder = None

    def stop_op_fn(var):
      placeholder = tf.compat.v1.placeholder_with_default(
          0, tuple(), name='stop_value')
      if self._stop_placeholder is None:
        self._stop_placeholder = placeholder
      return var.assign_add(placeholder)

    self._stop_op = strategy.run(
        stop_op_fn, args=(self._stop_var,))

  def before_run(self, run_context):
    del run_context
    return tf.compat.v1.train.SessionRunArgs({
        'global_step': self._global_step_tensor,
        'stop_var': self._stop_var
    })

  def after_run(self, run_context, run_values):
    global_step = run_values.results['global_step']
    should_early_stop = run_values.results['stop_var']

    if should_early_stop > 0:
      tf.compat.v1.logging.info('Early stopping requested, suspending run.')
      run_context.request_stop()
      return
    if self._timer.should_trigger_for_step(global_step):
      self._timer.update_last_triggered_step(global_step)
      if self._should_stop_fn():
        run_context.session.run(
            self._stop_op, feed_dict={self._stop_placeholder: 1})
        tf.compat.v1.logging.info('Requesting early stopping at global step %d',
                        global_step)
      else:
        run_context.session.run(
            self._stop_op, feed_dict={self._stop_placeholder: 0})
# ============================================================================= end of copy
