"""Trace a transformer's attention and feed-forward layers once per training step, and call that
trace for every layer of the encoder with the layer's own weights.

A traced step holds each of bert4keras's layers as ops of its own: tracing builds them again for
every layer, about 0.17 s a layer of MiniLM's size with their gradients, most of a step's trace
(docs/performance.md, "The first epoch against a steady one"). Inside
:func:`shared_trace_scope` the first ``MultiHeadAttention`` and ``FeedForward`` of each
configuration are traced into a nested ``tf.function`` that takes the layer's variables as
arguments; every later layer of that configuration calls the same trace with its own variables.
TensorFlow inlines the nested calls before it optimises the graph, so the step that runs holds
the ops a step traced layer by layer holds, on the same values (the same forward pass; gradient
terms a tensor gets from several layers are added in another order). Profiles name every
layer's inlined ops after the first layer of its configuration.

Randomness is what a shared trace must not share: one stateful random op inlined once per layer
would draw the same dropout mask in every layer. Attention dropout inside a shared trace
therefore draws from a seed that each call draws outside it at every step
(:func:`dropout_seed`, read by :mod:`crf_lr.speed.attention`), and a configuration whose trace
holds any other stateful op or reads anything besides its arguments (a captured variable or
tensor) is not shared: every layer of it is traced on its own, as outside the block.

    >>> with shared_trace_scope():
    ...     step.get_concrete_function(signature)    # 1 attention and 1 feed-forward trace
"""
import contextlib
import functools
import json
import os
import threading
import types
import weakref

from crf_lr.patches import apply
from crf_lr.speed.switches import ThreadSwitch

_LOCAL = threading.local()      # .shared: {key: trace}; .seed, .dropouts: while tracing one
_SWITCH = ThreadSwitch(default=os.environ.get('CRF_LR_SHARED_LAYER_TRACES') != '0')
_UNSHARED = object()
_TRACE_GRAPHS = weakref.WeakSet()            # the graphs of shared traces
_VARIABLE_READS = {'ReadVariableOp', 'ResourceGather'}  # the stateful ops a shared trace may hold


def shared_layer_traces(enabled=True):
    """Within the block, steps traced in a :func:`shared_trace_scope` (the scripts' loop,
    ``crf_lr.training.loop.trace_once``) share one trace among the attention layers (and one
    among the feed-forward layers) of each configuration, as they do by default, or, with
    ``enabled=False``, trace every layer on its own (``CRF_LR_SHARED_LAYER_TRACES=0`` in the
    environment makes that the default). Per thread; traced functions keep what they were
    traced with.

        >>> with shared_layer_traces(False):
        ...     steps = train_steps(model, batches)       # every layer traced on its own
    """
    return _SWITCH.set(enabled)


def sharing_enabled():
    """Whether a :func:`shared_trace_scope` shares layer traces in this thread now.

        >>> sharing_enabled()          # False where CRF_LR_SHARED_LAYER_TRACES=0
        True
    """
    return _SWITCH.enabled


@contextlib.contextmanager
def shared_trace_scope():
    """Within the block, functions traced in this thread share layer traces (see the module)
    unless :func:`shared_layer_traces` is off; the traces are kept for the block only.

        >>> with shared_trace_scope():
        ...     traced = tf.function(train_step).get_concrete_function(signature)
    """
    previous = getattr(_LOCAL, 'shared', None)
    _LOCAL.shared = {} if _SWITCH.enabled else None
    try:
        yield
    finally:
        _LOCAL.shared = previous


def dropout_seed():
    """A ``[2]`` int32 seed tensor for a dropout inside the shared trace being traced now (each
    call another: the call's seed folded with a count), or None outside one (dropout then draws
    as it would without sharing). Each layer's call passes a seed drawn anew at every step, so
    each layer has masks of its own.

        >>> seed = dropout_seed()
        >>> weights = (keras.layers.Dropout(rate)(weights) if seed is None else
        ...            tf.nn.experimental.stateless_dropout(weights, rate, seed))
    """
    from crf_lr.compat import tf
    seed = getattr(_LOCAL, 'seed', None)
    if seed is None:
        return None
    _LOCAL.dropouts += 1
    return tf.random.experimental.stateless_fold_in(seed, _LOCAL.dropouts)


def is_shared_trace(graph):
    """True where ``graph`` is a shared trace's: the gradients of its ops are traced in a graph
    of their own and inlined with it into the step that called it (where
    :mod:`crf_lr.speed.fused_kernels` may put its kernels as in the step's own graph)."""
    return graph in _TRACE_GRAPHS


def _members(layer):
    """``([(attribute path, variable)], [(attribute path, id)] of the Python functions it
    calls)`` of ``layer`` and its sublayers, reached by public attributes (``'q_dense.kernel'``;
    a list's items as ``'activation.0'``), each sorted by path."""
    from crf_lr.compat import keras, tf
    variables, functions, seen = {}, {}, {id(layer)}

    def walk(owner, path):
        for name, value in vars(owner).items():
            if name.startswith('_'):
                continue
            items = (enumerate(value) if isinstance(value, (list, tuple))
                     else [(None, value)])
            for index, item in items:
                where = path + name + ('' if index is None else f'.{index}')
                if isinstance(item, tf.Variable):
                    variables.setdefault(id(item), (where, item))
                elif isinstance(item, (types.FunctionType, types.MethodType,
                                       types.BuiltinFunctionType, functools.partial)):
                    functions[where] = id(item)
                elif isinstance(item, keras.layers.Layer) and id(item) not in seen:
                    seen.add(id(item))
                    walk(item, where + '.')
    walk(layer, '')
    return sorted(variables.values(), key=lambda pair: pair[0]), sorted(functions.items())


def _stored(weight):
    """The variable a mixed-precision layer's weight (a tf-keras ``AutoCastVariable``) reads
    from, which a trace maps onto its argument; ``weight`` itself otherwise. (Where this
    tf-keras stores it elsewhere, the trace captures the variable and is not shared.)"""
    from tf_keras.src.mixed_precision.autocast_variable import AutoCastVariable
    return getattr(weight, '_variable', weight) if isinstance(weight, AutoCastVariable) else weight


def _described(leaf):
    """A call argument as the key sees it: a tensor's dtype and shape, a plain value itself,
    anything else by identity."""
    from crf_lr.compat import tf
    if tf.is_tensor(leaf):
        return ('tensor', leaf.dtype.name,
                leaf.shape.as_list() if leaf.shape.rank is not None else None)
    if leaf is None or isinstance(leaf, (bool, int, float, str)):
        return leaf
    return ('object', id(leaf))


def _key(layer, variables, functions, arguments, training):
    """What one trace can serve: the layer's class and configuration (its name aside), policy,
    training mode, its weights (paths, shapes, dtypes, trainable), the functions it calls and
    the call's arguments as :func:`_described`."""
    from crf_lr.compat import tf
    config = {k: v for k, v in layer.get_config().items() if k != 'name'}
    return (type(layer), json.dumps(config, sort_keys=True, default=repr),
            layer.dtype_policy.name, training,
            tuple((path, tuple(weight.shape), weight.dtype.name, weight.trainable)
                  for path, weight in variables),
            tuple(functions), repr(tf.nest.map_structure(_described, arguments)))


def _seeded(layer, training):
    """True where ``layer``'s shared trace takes a dropout seed: attention with dropout in a
    training call."""
    return training is True and bool(getattr(layer, 'attention_dropout', 0))


def _shareable(concrete):
    """True where ``concrete`` (a shared trace) reads only its arguments and holds no stateful
    op besides variable reads."""
    if concrete.captured_inputs:
        return False
    return not any(op.op_def.is_stateful and op.type not in _VARIABLE_READS
                   for op in concrete.graph.get_operations())


def _trace(original, layer, arguments, stored, tensors, seeded):
    """A concrete function of ``original`` (the layer's own ``call``) on ``layer`` called with
    ``arguments``, taking ``(variables, tensors, a [2] int32 seed or None)`` like ``stored``
    (the layer's variables, :func:`_stored`) and ``tensors`` (:func:`_tensors`); None where it
    cannot be shared."""
    from crf_lr.compat import tf
    leaves = tf.nest.flatten(arguments)

    def body(variables, tensors, seed):     # the variables map onto ``layer``'s own reads
        new = iter(tensors)
        inputs, args, kwargs = tf.nest.pack_sequence_as(
            arguments, [next(new) if tf.is_tensor(leaf) else leaf for leaf in leaves])
        _TRACE_GRAPHS.add(tf.compat.v1.get_default_graph())
        _LOCAL.seed, _LOCAL.dropouts = seed, 0
        try:
            return original(layer, inputs, *args, **kwargs)
        finally:
            _LOCAL.seed = None
    try:
        concrete = tf.function(body, autograph=False).get_concrete_function(
            stored, tensors, tf.TensorSpec([2], tf.int32) if seeded else None)
    except Exception:       # noqa: BLE001  (traced on its own instead, where it raises again)
        return None
    return concrete if _shareable(concrete) else None


def _tensors(arguments):
    """The tensors among ``arguments``, in order: a tensor passed twice is two, as it is two
    inputs of the layer (their gradients add up where they would)."""
    from crf_lr.compat import tf
    return [leaf for leaf in tf.nest.flatten(arguments) if tf.is_tensor(leaf)]


def _call(original, layer, inputs, *args, **kwargs):
    """``layer.call(inputs, ...)`` through the shared trace of its configuration where this
    thread is in a :func:`shared_trace_scope` and a graph is being traced, else as it was."""
    from bert4keras.backend import do_recompute
    from tf_keras.src.engine import base_layer_utils

    from crf_lr.compat import tf
    shared = getattr(_LOCAL, 'shared', None)
    context = base_layer_utils.call_context()
    training = context.training
    if (shared is None or do_recompute or not tf.inside_function() or context.in_keras_graph
            or not (training is None or isinstance(training, bool))
            or is_shared_trace(tf.compat.v1.get_default_graph())):
        return original(layer, inputs, *args, **kwargs)
    variables, functions = _members(layer)
    arguments = (inputs, args, kwargs)
    if sorted(id(w) for _, w in variables) != sorted(id(w) for w in layer.weights):
        return original(layer, inputs, *args, **kwargs)      # a weight no attribute reaches
    try:
        key = _key(layer, variables, functions, arguments, training)
    except (TypeError, ValueError, NotImplementedError):      # a config it cannot write
        return original(layer, inputs, *args, **kwargs)
    stored, tensors, seeded = ([_stored(w) for _, w in variables], _tensors(arguments),
                               _seeded(layer, training))
    if key not in shared:
        shared[key] = _trace(original, layer, arguments, stored, tensors, seeded) or _UNSHARED
    if shared[key] is _UNSHARED:
        return original(layer, inputs, *args, **kwargs)
    seed = tf.random.uniform([2], maxval=tf.int32.max, dtype=tf.int32) if seeded else None
    return shared[key](stored, tensors, seed)


def install():
    """Route bert4keras's ``MultiHeadAttention.call`` and ``FeedForward.call`` through
    :func:`_call` (idempotent; the registry's row 'shared layer traces', off with the speed
    patches)."""
    apply('shared layer traces', _call)


install()        # on import too (idempotent); crf_lr.compat applies every row
