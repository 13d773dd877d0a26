"""A lighter graph optimisation for a training step's first call on CPU: one round of
grappler's passes, without the two that change nothing in a graph run on CPU.

TensorFlow optimises a ``tf.function``'s graph when it is first called (grappler), and by
default runs every pass twice. In a training step the second round removes few of the nodes
the first left, and on CPU the memory optimiser (swapping to host memory, recomputation hints)
and the layout optimiser (NHWC / NCHW for GPU kernels) change none. Functions called for the
first time within :func:`optimised_lightly` (where crf_lr's training loop calls its step) get
one round and neither of those two: fewer passes at the first call, so step 1 is shorter and
the step after it the same (docs/performance.md, "The first epoch against a steady one";
``python benchmarks/graph_probe.py --change light_graph_optimisation``). Only where TensorFlow
sees no GPU: that is where it was measured, and on a GPU those two passes can matter.
``tf.config.optimizer.set_experimental_options(dict(layout_optimizer=...))`` keeps its setting.

TensorFlow reads these options from its per-thread function-call options when a function is
called, and optimises it again at a call with other options: call a step within the block every
time, as crf_lr's loop does (a ``model.fit`` after :func:`crf_lr.training.loop.train_steps`
optimises the step once more, with TensorFlow's options). Trace outside the block: a graph traced
within it keeps these options for the functions it calls. No public call sets them for one function:
:func:`available` says whether this TensorFlow has them (``tests/speed/test_graph_optimisation.py``
asserts it for the pinned version, and reads grappler's log to check that they are honoured);
where it does not, the block changes nothing. :func:`light_graph_optimisation` switches it off.

    >>> with optimised_lightly():
    ...     logs = model.train_function(iterator)          # first call: optimised here
"""
import contextlib

import crf_lr  # noqa: F401  (sets TF_KERAS / TF_USE_LEGACY_KERAS before TensorFlow loads)
from crf_lr import patches
from crf_lr.speed.switches import ThreadSwitch

_LIGHT = ThreadSwitch(default=True)     # read where a step is first called: optimised_lightly


def _eager_context():
    """TensorFlow's eager context module, or None where it lacks per-thread call options."""
    from tensorflow.python.eager import context
    has_options = (hasattr(context, 'FunctionCallOptions')
                   and hasattr(type(context.context()), 'function_call_options'))
    return context if has_options else None


def available():
    """True where this TensorFlow has the per-thread options :func:`optimised_lightly` sets."""
    return _eager_context() is not None


def _sees_gpu():
    from crf_lr.compat import tf
    return bool(tf.config.list_logical_devices('GPU'))


def lighter(config):
    """A copy of the ``ConfigProto`` ``config`` with one round of grappler's passes and without
    the memory and layout optimisers, where ``config`` leaves them at TensorFlow's defaults."""
    from tensorflow.core.protobuf import rewriter_config_pb2
    options = rewriter_config_pb2.RewriterConfig
    light = type(config)()
    light.CopyFrom(config)
    rewrite = light.graph_options.rewrite_options
    if rewrite.meta_optimizer_iterations == options.DEFAULT_NUM_ITERS:
        rewrite.meta_optimizer_iterations = options.ONE
    if rewrite.memory_optimization == options.DEFAULT_MEM_OPT:
        rewrite.memory_optimization = options.NO_MEM_OPT
    if rewrite.layout_optimizer == options.DEFAULT:
        rewrite.layout_optimizer = options.OFF
    return light


def light_graph_optimisation(enabled=True):
    """Within the block, in this thread, steps first called inside :func:`optimised_lightly`
    (crf_lr's training loop, :func:`crf_lr.training.loop.train_steps`) get the :func:`lighter`
    optimisation (the default) or, with ``enabled=False``, TensorFlow's own.

        >>> with light_graph_optimisation(False):      # grappler's defaults, e.g. to compare
        ...     losses = list(train_steps(model, batches))
    """
    return _LIGHT.set(enabled)


@contextlib.contextmanager
def optimised_lightly():
    """Within the block, in this thread, functions called for the first time with these options
    are optimised with :func:`lighter` ones, unless :func:`light_graph_optimisation` or the speed
    patches (row 'graph options') are off, TensorFlow sees a GPU or lacks the options
    (:func:`available`). A function called with these
    options before is not optimised again; one called with others is. A ``tf.config`` setting
    changed within the block stays after it."""
    light = _LIGHT.enabled and not _sees_gpu() and patches.apply('graph options')
    context = _eager_context() if light else None
    if context is None:
        yield
        return
    from tensorflow.core.protobuf import config_pb2
    eager = context.context()
    previous = eager.function_call_options
    config = config_pb2.ConfigProto.FromString(previous.config_proto_serialized)
    light = context.FunctionCallOptions(previous.executor_type, lighter(config))
    eager.function_call_options = light
    try:
        yield
    finally:
        if eager.function_call_options is light:     # else tf.config reset them within the block
            eager.function_call_options = previous
