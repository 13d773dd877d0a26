"""bert4keras's layer normalisation with its gradient in closed form.

bert4keras normalises with ``divide_no_nan(x - mean, sqrt(variance + epsilon))`` and leaves the
gradient to TensorFlow, which differentiates each of those ops in turn (broadcast gradients,
tiles, sums, two ``AddN`` per norm): a large share of a traced step's ops are its layer norms',
each created in Python when the step is traced, optimised at its first call and scheduled at
every call. This module gives ``bert4keras.layers.LayerNormalization.call`` the same forward ops
(less ``K.sqrt``'s clip at 0, which its argument never needs: the same values to the last bit)
with the textbook gradient, ``(dy - mean(dy) - x̂ · mean(dy · x̂)) / std``: seven ops, computed
in float32 under mixed precision. Fewer ops to create, optimise and schedule: step 1 of a run
is shorter, and every step a little faster (docs/performance.md, "What each speed patch buys",
``closed_form_layer_norm``; ``python benchmarks/first_step.py`` counts a step's ops and its
layer norms'). Gradients equal TensorFlow's to float rounding, and under bf16 come nearer
float32's than bert4keras's bf16 ops (``tests/speed/test_layer_norm.py``).

In a training call where :mod:`crf_lr.speed.fused_kernels` apply, and in a prediction traced
within :func:`crf_lr.speed.fused_kernels.prediction_kernels`, the norm and bert4keras's scale and
offset after it are instead one kernel each way (:func:`crf_lr.speed.fused_kernels.layer_norm`:
statistics, affine step and gradients in float32, ``gamma`` and ``beta``'s gradients summed in
float32 over chunks of rows).

:mod:`crf_lr.compat` installs it for every model of the process (so does importing this
module). Conditional layer norms, ``zero_mean`` or ``unit_variance`` off, and bert4keras's
``RECOMPUTE`` mode keep bert4keras's own code. The switch is per thread: replicas of a
``MirroredStrategy``, which trace in threads of their own, take the default (the closed form).

    >>> import crf_lr.compat                       # installed; nothing to call
    >>> with closed_form_layer_norm(False):        # bert4keras's form, e.g. to compare
    ...     scores = tf.function(lambda x: model(x))(inputs)
"""
import crf_lr  # noqa: F401  (sets TF_KERAS / TF_USE_LEGACY_KERAS before TensorFlow loads)

import tensorflow as tf  # noqa: E402

from crf_lr.speed import fused_kernels  # noqa: E402
from crf_lr.patches import apply  # noqa: E402
from crf_lr.speed.switches import ThreadSwitch  # noqa: E402

_CLOSED_FORM = ThreadSwitch(default=True)     # read when a layer norm is traced


def closed_form_layer_norm(enabled=True):
    """Within the block, bert4keras layer norms traced use the closed-form gradient (the
    default) or, with ``enabled=False``, bert4keras's own ops. Per thread; traced functions keep
    the form they were traced with.

        >>> with closed_form_layer_norm(False):
        ...     model.fit(x, y)                   # traced with bert4keras's code
    """
    return _CLOSED_FORM.set(enabled)


def normalized(x, epsilon):
    """``x`` centred and scaled to unit variance along its last axis, as bert4keras computes it
    (``divide_no_nan`` by ``sqrt(variance + epsilon)``), with the gradient in closed form,
    computed in float32 for 16-bit ``x`` (its three terms nearly cancel).

        >>> normalized(tf.constant([[1., 2., 3.]]), 1e-12)     # [[-1.2247, 0., 1.2247]]

    (In a training call with :mod:`crf_lr.speed.fused_kernels` built, the layer runs
    :func:`crf_lr.speed.fused_kernels.layer_norm` instead: this and its scale and offset, one kernel
    each way.)
    """
    @tf.custom_gradient
    def forward(x):
        centred = x - tf.reduce_mean(x, -1, keepdims=True)
        std = tf.sqrt(tf.reduce_mean(tf.square(centred), -1, keepdims=True) + epsilon)
        x_hat = tf.math.divide_no_nan(centred, std)

        def gradient(dy):
            wide = tf.float32 if dy.dtype in (tf.bfloat16, tf.float16) else dy.dtype
            dy_, x_hat_, std_ = (tf.cast(t, wide) for t in (dy, x_hat, std))
            mean_dy = tf.reduce_mean(dy_, -1, keepdims=True)
            mean_dy_x_hat = tf.reduce_mean(dy_ * x_hat_, -1, keepdims=True)
            return tf.cast(tf.math.divide_no_nan(dy_ - mean_dy - x_hat_ * mean_dy_x_hat, std_),
                           dy.dtype)
        return x_hat, gradient
    return forward(x)


def _scale_and_offset(layer, inputs):
    """(gamma, beta) of a bert4keras ``ScaleOffset`` that is not conditional, as vectors of the
    inputs' last axis: its weights, or its constant ``scale`` / ``offset`` (a number or a vector)
    broadcast (1 and 0 where it has none, as bert4keras reads ``False`` and ``None``)."""
    def vector(setting, weight, none):
        if setting is True:
            return weight
        value = none if setting is False or setting is None else setting
        return tf.broadcast_to(tf.constant(value, inputs.dtype), tf.shape(inputs)[-1:])
    return (vector(layer.scale, getattr(layer, 'gamma', None), 1),
            vector(layer.offset, getattr(layer, 'beta', None), 0))


def _handles(layer):
    """True where :func:`normalized` computes what bert4keras's layer would."""
    from bert4keras.backend import do_recompute
    return (_CLOSED_FORM.enabled and not layer.conditional and layer.zero_mean
            and layer.unit_variance and not do_recompute)


def install():
    """Route ``bert4keras.layers.LayerNormalization.call`` through
    :func:`crf_lr.speed.fused_kernels.layer_norm` (scale and offset included) where
    :func:`crf_lr.speed.fused_kernels.layer_norm_applies`, else through :func:`normalized` and
    bert4keras's ``ScaleOffset.call`` where it computes what bert4keras would (idempotent; the
    registry's row 'layer norm', off with the speed patches)."""
    from bert4keras.layers import ScaleOffset

    def call(original, self, inputs, **kwargs):     # kwargs: what RECOMPUTE's wrapper takes
        if _handles(self) and fused_kernels.layer_norm_applies(inputs):
            gamma, beta = _scale_and_offset(self, inputs)
            return fused_kernels.layer_norm(inputs, gamma, beta, self.epsilon)
        if _handles(self):
            return ScaleOffset.call(self, normalized(inputs, self.epsilon))
        return original(self, inputs, **kwargs)

    apply('layer norm', call)


install()        # on import too (idempotent); crf_lr.compat applies every row
