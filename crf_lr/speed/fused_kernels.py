"""One-pass CPU kernels for a training step: bert4keras's erf GELU and layer norm (with its scale
and offset), each with its gradient, the gradient of the attention's softmax, the gradient of
every bias in bfloat16, and the CRF's forward-backward pass.

TensorFlow runs the GELU of every feed-forward layer as five element-wise ops and its gradient
as about nine, a layer norm as seven each way (its scale and offset two more) and a softmax's
gradient as four, each a pass over memory. The kernels of ``crf_lr/speed/kernels/fused_ops.cc`` make
each of them one pass, and ``crf_lr/speed/kernels/crf_forward_backward.cc`` makes the CRF loss's
loop over positions (a while loop of small ops to trace and optimise, each dispatched at every
position) one op. They are compiled against the installed TensorFlow the first time they are
needed (one compiler run; ``make install`` does it), cached per machine
(:mod:`crf_lr.speed.native_build`), and used in training calls (``training=True``) of float32
and bfloat16 tensors and in losses whose gradient is being recorded, outside XLA, and for the
layer norms of a prediction traced in a :func:`prediction_kernels` block (what
:meth:`crf_lr.serving.tagger.Tagger.scores` traces); other prediction, export, saving,
XLA-compiled steps, a visible GPU and a machine without a C++ compiler keep TensorFlow's own
ops. The same values to float rounding
(``tests/speed/test_fused_kernels.py``); what they buy a step is in docs/performance.md ("What
each speed patch buys").

:mod:`crf_lr.compat` installs the GELU and the bias gradient (``BiasAdd``'s in bfloat16, summed
in float32 where TensorFlow sums in bfloat16) for every model of the process,
:mod:`crf_lr.speed.attention` calls :func:`softmax`, :mod:`crf_lr.speed.layer_norm`
:func:`layer_norm` and :mod:`crf_lr.model.crf` :func:`crf_forward_backward` (a training step's loss,
outside a step compiled whole by XLA).
Switch them off for a block (per thread, read when a function is traced):

    >>> print(status())                  # fused kernels: on (...), or off and why
    >>> with fused_kernels(False):       # TensorFlow's ops, e.g. to compare
    ...     model.fit(x, y)

The block is per thread: replicas of a ``MirroredStrategy`` trace in threads of their own and
take the default, so set ``CRF_LR_FUSED_KERNELS=0`` in the environment to switch them off for the
whole process.
"""
import crf_lr  # noqa: F401  (sets TF_KERAS / TF_USE_LEGACY_KERAS before TensorFlow loads)

import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

import tensorflow as tf  # noqa: E402

from crf_lr import patches  # noqa: E402
from crf_lr.speed.native_build import (BuildError, cached_library, record,  # noqa: E402
                                       timed_build)
from crf_lr.speed.switches import ThreadSwitch  # noqa: E402

SOURCES = tuple(Path(__file__).with_name('kernels') / name
                for name in ('fused_ops.cc', 'crf_forward_backward.cc'))
_ENABLED = ThreadSwitch(default=True)          # read when a layer is traced
_BIAS_GRADIENT = ThreadSwitch(default=True)    # read when a bias's gradient is traced
_PREDICTION = ThreadSwitch(default=False)      # read when a prediction's layer norm is traced
_DTYPES = (tf.float32, tf.bfloat16)
_lock = threading.Lock()
_loaded = {}                # 'ops', 'built_s' and 'note', or 'error': filled once per process


def fused_kernels(enabled=True):
    """Within the block, training calls traced use the fused kernels (the default, where they
    can be built) or, with ``enabled=False``, TensorFlow's ops. Per thread.

        >>> with fused_kernels(False):
        ...     loss = train_step(batch)        # traced with TensorFlow's ops
    """
    return _ENABLED.set(enabled)


def fused_bias_gradient(enabled=True):
    """Within the block, bfloat16 bias gradients traced where the kernels run are summed by
    :func:`bias_gradient` (the default) or, with ``enabled=False``, by TensorFlow's
    ``BiasAddGrad``. Per thread.

        >>> with fused_bias_gradient(False):
        ...     loss = train_step(batch)        # traced with TensorFlow's BiasAddGrad
    """
    return _BIAS_GRADIENT.set(enabled)


def prediction_kernels(enabled=True):
    """Within the block, the layer norms of a prediction (a call with ``training`` not True)
    traced run as one kernel (:func:`layer_norm`: statistics and affine step in float32) where
    the kernels apply and are built already (``make install``, or any training run on this
    machine and TensorFlow), in place of about nine TensorFlow ops each, which one short text
    feels as much as their work. A prediction never compiles them: a server's container that
    starts without the cache starts as fast as before, with TensorFlow's ops. Other ops of a
    prediction stay TensorFlow's: the graph optimiser fuses the dense layers' GELU into their
    products. Per thread.

        >>> with prediction_kernels():
        ...     scores = tf.function(lambda x: model(x, training=False))(inputs)
    """
    return _PREDICTION.set(enabled)


def _ops():
    """The loaded op library, built first where needed; None where it cannot be."""
    with _lock:
        if not _loaded:
            try:
                path, seconds = timed_build(SOURCES, on_build=_announce_build)
                _loaded['ops'] = tf.load_op_library(str(path))
                _loaded['built_s'] = seconds
                _loaded['note'] = record(path).get('note')
            except (BuildError, tf.errors.NotFoundError) as error:
                _loaded['error'] = str(error).splitlines()[0]
        return _loaded.get('ops')


def _announce_build():
    """One line on stderr, where a build is about to start: stdout may be what a command prints
    for a pipe."""
    print('building the fused kernels (once per machine and TensorFlow version, about 17 s)',
          file=sys.stderr, flush=True)


def _why_off():
    """Why this thread's training calls would not use the kernels now, or None: switched off
    (the block or ``CRF_LR_FUSED_KERNELS=0``), the speed patches off
    (:func:`crf_lr.patches.speed_off_reason`), a GPU visible, or the kernels not built."""
    if not _ENABLED.enabled or os.environ.get('CRF_LR_FUSED_KERNELS', '1') == '0':
        return 'switched off'
    speed_off = patches.speed_off_reason()
    if speed_off is not None:
        return f'speed patches off: {speed_off}'
    if tf.config.list_logical_devices('GPU'):
        return 'a GPU is visible: they are CPU kernels'
    if _ops() is None:
        return f"{_loaded['error']}; TensorFlow's ops are used, {cost_without_them()}"
    return None


def cost_without_them(cpuinfo='/proc/cpuinfo'):
    """What TensorFlow's ops in place of the kernels cost a training step, as measured on the
    kind of CPU ``cpuinfo`` describes (docs/performance.md): with AMX, bf16 steps lose most.

        >>> cost_without_them()
        'training steps about 1.1x slower (float32 and bf16, measured on an AMD EPYC)'
    """
    from crf_lr.model.precision import native_bf16
    if 'amx_bf16' in native_bf16(cpuinfo):
        return ('training steps about 1.05x slower in float32, 1.6x in bf16 (measured on an '
                'Intel Xeon with AMX)')
    return 'training steps about 1.1x slower (float32 and bf16, measured on an AMD EPYC)'


def status():
    """One line: whether the fused kernels are in use for training calls on this CPU, and why not
    where they are not.

        >>> status()
        'fused kernels: on (built in 9.1 s, cached)'

    A build at a baseline instead of ``-march=native``
    (:func:`crf_lr.speed.native_build.built_library`) says so: ``on (cached; built at
    -march=x86-64-v3: -march=native failed: g++ failed: ...)``.
    """
    why = _why_off()
    if why is not None:
        return f'fused kernels: off ({why})'
    built, note = _loaded['built_s'], _loaded['note']
    return (f'fused kernels: on ({f"built in {built:.1f} s, cached" if built else "cached"}'
            f'{f"; {note}" if note else ""})')


@tf.autograph.experimental.do_not_convert     # a Python decision at trace time
def _graph_takes_them():
    """True where a function traced now may hold the kernels: not being saved (a SavedModel
    holds TensorFlow's ops only), not compiled by XLA (which has no kernel for them), and none
    of :func:`_why_off`'s reasons."""
    from tensorflow.python.framework.ops import get_default_graph
    from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext
    from tensorflow.python.saved_model.save_context import in_save_context
    from tf_keras.src.engine.base_layer_utils import call_context
    return (not call_context().saving and not in_save_context()
            and not GraphOrParentsInXlaContext(get_default_graph()) and _why_off() is None)


@tf.autograph.experimental.do_not_convert     # a Python decision at trace time
def applies(x):
    """True where a call traced now computes on ``x`` with the fused kernels: float32 or
    bfloat16, a training call (``training`` True, not a tensor, whose value a trace may not
    know), and :func:`_graph_takes_them`."""
    from tf_keras.src.engine.base_layer_utils import call_context
    return x.dtype in _DTYPES and call_context().training is True and _graph_takes_them()


@tf.autograph.experimental.do_not_convert     # a Python decision at trace time
def layer_norm_applies(x):
    """True where a layer norm traced now computes on ``x`` with :func:`layer_norm`: as
    :func:`applies`, or in a prediction traced within :func:`prediction_kernels` where the
    kernels are loaded or cached (:func:`_built_already`: a prediction compiles nothing)."""
    from tf_keras.src.engine.base_layer_utils import call_context
    if x.dtype not in _DTYPES:
        return False
    if call_context().training is True:
        return _graph_takes_them()
    return _PREDICTION.enabled and _built_already() and _graph_takes_them()


def _built_already():
    """True where the kernels are loaded, or cached whole so that loading them compiles
    nothing (:func:`crf_lr.speed.native_build.cached_library`)."""
    return 'ops' in _loaded or (not _loaded and cached_library(SOURCES) is not None)


def crf_applies(emissions):
    """True where a CRF loss traced now runs its forward-backward pass as one kernel
    (:func:`crf_forward_backward`): float32 or float64 ``emissions``, a gradient being recorded
    (a training step; Keras's evaluation and prediction functions, traced without a tape, keep
    XLA's program or TensorFlow's ops), and :func:`_graph_takes_them`. Decided when a function
    is traced: one first traced under an outer tape keeps the kernel in later calls."""
    from tensorflow.python.eager.record import could_possibly_record
    return (emissions.dtype in (tf.float32, tf.float64) and could_possibly_record()
            and _graph_takes_them())


def crf_forward_backward(emissions, labels, mask, transitions, start, end):
    """``crf_lr.model.crf._forward_backward``'s outputs from one kernel (float64 inside, as there):
    ``(objective, [d_emissions, d_start, d_end], [labels, alphas, following, exp_trans])``.

        >>> objective, gradients, pair_factors = crf_forward_backward(
        ...     emissions, labels, mask, transitions, start, end)
    """
    from crf_lr.decoding.viterbi import DISALLOWED_SCORE
    outputs = _ops().crf_lr_forward_backward(emissions, labels, mask, transitions, start, end,
                                             floor=DISALLOWED_SCORE)
    return outputs[0], list(outputs[1:4]), list(outputs[4:])


def gelu_erf(x):
    """bert4keras's ``gelu_erf``, ``0.5 x (1 + erf(x / sqrt 2))``: one kernel each way in a
    training call, bert4keras's ops elsewhere.

        >>> gelu_erf(tf.constant([-1., 0., 1.]))        # [-0.1587, 0., 0.8413]
    """
    from bert4keras.backend import gelu_erf as bert4keras_gelu_erf
    if not applies(x):
        return bert4keras_gelu_erf(x)
    return _ops().crf_lr_gelu(x)


def softmax(x, divisor=None, shift=None):
    """``softmax(x / divisor + shift)`` over the last axis (TensorFlow's ops; ``divisor`` a number,
    ``shift`` a tensor that is not differentiated, such as a mask's 0 / -inf bias); in a training
    call the gradient with respect to ``x`` is one kernel, the division included (where ``shift``
    does not broadcast ``x`` to a larger shape).

        >>> softmax(tf.constant([[0., 0.]]))                 # [[0.5, 0.5]]
        >>> softmax(scores, divisor=8.0, shift=mask_bias)    # attention's weights
    """
    def logits(x):
        scaled = x if divisor is None else x / divisor
        return scaled if shift is None else scaled + shift
    if not applies(x) or not _keeps_the_shape(x, shift):
        return tf.nn.softmax(logits(x))

    @tf.custom_gradient
    def forward(x):
        y = tf.nn.softmax(logits(x))
        scale = 1.0 if divisor is None else 1.0 / divisor
        return y, lambda dy: _ops().crf_lr_softmax_grad(dy, y, scale=scale)
    return forward(x)


def _keeps_the_shape(x, shift):
    """True where adding ``shift`` (or None) to ``x`` is known, when traced, to give ``x``'s shape:
    the kernel's gradient has the softmax's shape, which must be ``x``'s."""
    if shift is None:
        return True
    if x.shape.rank is None or shift.shape.rank is None:
        return False
    try:
        return tf.broadcast_static_shape(x.shape, shift.shape).as_list() == x.shape.as_list()
    except ValueError:                      # not broadcastable: TensorFlow's add says so
        return False


def layer_norm(x, gamma, beta, epsilon):
    """``x`` centred and scaled to unit variance along its last axis, times ``gamma`` plus
    ``beta`` (vectors of the last axis's length), statistics and the affine step in float32, one
    kernel each way, for :mod:`crf_lr.speed.layer_norm` where :func:`applies`.

        >>> layer_norm(tf.constant([[1., 2., 3.]]), tf.ones([3]), tf.zeros([3]), 1e-12)
        ... # [[-1.2247, 0., 1.2247]]
    """
    return _ops().crf_lr_layer_norm(x, gamma, beta, epsilon=epsilon)[0]


tf.no_gradient('CrfLrForwardBackward')   # crf_lr.model.crf's custom gradient uses its outputs


@tf.RegisterGradient('CrfLrGelu')
def _gelu_gradient(op, dy):
    return _ops().crf_lr_gelu_grad(dy, op.inputs[0])


@tf.RegisterGradient('CrfLrLayerNorm')
def _layer_norm_gradient(op, dy, dmean, dstd):
    """dx, dgamma, dbeta; the mean and std outputs are the gradient's inputs, which
    :func:`layer_norm` does not return (their gradients are the tape's zeros)."""
    x, gamma, _ = op.inputs
    _, mean, std = op.outputs
    return _ops().crf_lr_layer_norm_grad(dy, x, gamma, mean, std)


def bias_gradient(dy):
    """The gradient of a bias added along the last axis of ``dy`` (bfloat16): ``dy`` summed over
    its other axes in float32 (float64 across chunks of rows), one kernel. TensorFlow's
    ``BiasAddGrad`` sums bfloat16 in bfloat16, so its sums of thousands of rows are far off
    (docs/performance.md, "What each speed patch buys"); float32 keeps it.

        >>> bias_gradient(tf.ones([4, 3], tf.bfloat16))         # [4., 4., 4.]
    """
    return _ops().crf_lr_bias_grad(dy)


@tf.RegisterGradient('CrfLrBiasGrad')
def _bias_gradient_gradient(op, ddb):
    return tf.broadcast_to(ddb, tf.shape(op.inputs[0]))


def _along_the_last_axis(bias_add):
    """True where ``bias_add`` (a ``BiasAdd`` op, or the tape's record of one, which may hold no
    ``data_format``: the default) adds its bias along the last axis (``NHWC``)."""
    try:
        data_format = bias_add.get_attr('data_format')
    except ValueError:
        return True
    return data_format is None or tf.compat.as_str(data_format) == 'NHWC'


def _traced_with_its_forward(op):
    """True where ``op``'s gradient is traced in the graph that holds ``op``: a tape's record of
    it (a training step's forward and backward in one function, or eager) or the same graph, or
    where ``op`` is in a shared layer trace (:mod:`crf_lr.speed.shared_layers`), whose gradient
    is inlined into the step with it. A function's gradient traced apart from it is compiled
    with it where the function is compiled by XLA, which has no kernel of ours."""
    from crf_lr.speed.shared_layers import is_shared_trace
    graph = getattr(op, 'graph', None)                 # a tape's record of an op has none
    return (graph is None or graph is tf.compat.v1.get_default_graph()
            or is_shared_trace(graph))


def _install_bias_gradient():
    """Give TensorFlow's ``BiasAdd`` (every Dense layer's bias) :func:`bias_gradient` where a
    gradient traced now may hold the kernels (:func:`_graph_takes_them`, bfloat16, the bias along
    the last axis, :func:`fused_bias_gradient`); elsewhere TensorFlow's own gradient
    (idempotent; the registry's row 'bias gradient')."""
    def gradient(tensorflow_gradient, op, dy):
        if (_BIAS_GRADIENT.enabled and dy.dtype == tf.bfloat16 and _along_the_last_axis(op)
                and _traced_with_its_forward(op) and _graph_takes_them()):
            return dy, bias_gradient(dy)
        return tensorflow_gradient(op, dy)
    patches.apply('bias gradient', gradient)


def install():
    """Resolve the activations ``'gelu'`` and ``'gelu_erf'`` (bert4keras's BERT and ALBERT) to
    :func:`gelu_erf` for the layers built from now on, and give ``BiasAdd`` the gradient of
    :func:`bias_gradient` (idempotent). Saved configs keep the name ``gelu_erf``, so a model
    saved here loads with bert4keras alone. The registry's rows 'GELU' and 'bias gradient', off
    with the speed patches."""
    patches.apply('GELU', gelu_erf, wrap=False)
    _install_bias_gradient()
