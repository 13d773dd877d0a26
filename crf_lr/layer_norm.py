"""bert4keras's layer normalisation with its gradient in closed form.

bert4keras normalises with ``divide_no_nan(x - mean, sqrt(variance + epsilon))`` and leaves the
gradient to TensorFlow, which differentiates each of those ops in turn: about 70 ops per layer
norm in a training step's graph (broadcast gradients, tiles, sums, two ``AddN``), a fifth of
the graph of a 4-layer ALBERT step, each created in Python when the step is traced. This module
gives ``bert4keras.layers.LayerNormalization.call`` the same forward ops (the same values to the
last bit) with the textbook gradient, ``(dy - mean(dy) - x̂ · mean(dy · x̂)) / std``: seven ops.
The step's graph loses 17 % of its ops and its trace a quarter (docs/performance.md, "A shorter
trace"); the step itself runs as fast. Gradients equal TensorFlow's to float rounding
(``tests/test_layer_norm.py``).

:mod:`crf_lr.compat` installs it for every model of the process (so does importing this
module). Conditional layer norms, ``zero_mean`` or ``unit_variance`` off, and bert4keras's
``RECOMPUTE`` mode keep bert4keras's own code.

    >>> import crf_lr.compat                       # installed; nothing to call
    >>> with closed_form_layer_norm(False):        # bert4keras's form, e.g. to compare
    ...     scores = tf.function(lambda x: model(x))(inputs)
"""
import crf_lr  # noqa: F401  (sets TF_KERAS / TF_USE_LEGACY_KERAS before TensorFlow loads)

import tensorflow as tf  # noqa: E402

from crf_lr.patching import patch  # noqa: E402
from crf_lr.switches import ThreadSwitch  # noqa: E402

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
    (``divide_no_nan`` by ``sqrt(variance + epsilon)``), with the gradient in closed form.

        >>> normalized(tf.constant([[1., 2., 3.]]), 1e-12)     # [[-1.2247, 0., 1.2247]]
    """
    @tf.custom_gradient
    def forward(x):
        centred = x - tf.reduce_mean(x, -1, keepdims=True)
        std = tf.sqrt(tf.reduce_mean(tf.square(centred), -1, keepdims=True) + epsilon)
        x_hat = tf.math.divide_no_nan(centred, std)

        def gradient(dy):
            mean_dy = tf.reduce_mean(dy, -1, keepdims=True)
            mean_dy_x_hat = tf.reduce_mean(dy * x_hat, -1, keepdims=True)
            return tf.math.divide_no_nan(dy - mean_dy - x_hat * mean_dy_x_hat, std)
        return x_hat, gradient
    return forward(x)


def _handles(layer):
    """True where :func:`normalized` computes what bert4keras's layer would."""
    from bert4keras.backend import do_recompute
    return (_CLOSED_FORM.enabled and not layer.conditional and layer.zero_mean
            and layer.unit_variance and not do_recompute)


def install():
    """Route ``bert4keras.layers.LayerNormalization.call`` through :func:`normalized` where it
    applies (idempotent); the scale and offset stay bert4keras's (``ScaleOffset.call``)."""
    from bert4keras.layers import LayerNormalization, ScaleOffset

    def call(original, self, inputs):
        if _handles(self):
            return ScaleOffset.call(self, normalized(inputs, self.epsilon))
        return original(self, inputs)

    patch(LayerNormalization, 'call', call)


import crf_lr.compat  # noqa: E402,F401  (installs the patch, with TensorFlow's other fixes)
