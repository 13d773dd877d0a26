"""GlobalPointer heads in ``keras.ops``: every (start, end) pair scored at once, one score per type.

The Keras 3 twins of ``crf_lr.model.global_pointer`` (same arguments, weights, weight order and
config): ``GlobalPointer`` (https://kexue.fm/archives/8373) gives each type its own query/key
projection; ``EfficientGlobalPointer`` (https://kexue.fm/archives/8877) shares one and adds a
per-type term. Scores are ``(batch, heads, n, n)``, cell ``[b, t, i, j]`` the span ``i..j``
(inclusive) of type ``t``; padding rows/columns and (``tril_mask=True``) the strict lower triangle
hold ``-inf``. Under a mixed policy (``mixed_float16``, ``mixed_bfloat16``) the projection runs in
the compute dtype and the scores in float32, as in the tf-keras layers (float16 span logits
overflow).

    >>> scores = EfficientGlobalPointer(heads=4, head_size=64)(hidden)    # (batch, 4, n, n)
    >>> model.compile(loss=sparse_global_pointer_crossentropy, optimizer='adam')
"""
import keras
import numpy as np
from keras import ops

from crf_lr.model.checks import PointerRules, rope_size


def rotary_position_embedding(x, base=10000):
    """Rotate feature pairs ``(x[2i], x[2i+1])`` at position ``p`` by ``p * base**(-2i/d)`` (RoPE,
    bert4keras's interleaved layout), so that ``rope(q)_m . rope(k)_n`` depends on ``n - m`` only.

    Args:
        x: float tensor ``(batch, n, ..., d)``, ``d`` even and static; positions along axis 1.
        base: the frequency base.
    Returns:
        A tensor of the shape and dtype of ``x``.

        >>> q = rotary_position_embedding(q)          # q: (batch, n, heads, head_size)
    """
    d = rope_size(x.shape)
    positions = ops.arange(ops.shape(x)[1], dtype='float32')
    frequencies = ops.power(float(base), -2 * ops.arange(d // 2, dtype='float32') / d)
    angles = positions[:, None] * frequencies[None]                       # (n, d/2)
    broadcast = (1, -1) + (1,) * (len(x.shape) - 3) + (d,)
    cos, sin = (ops.cast(ops.reshape(ops.repeat(f(angles), 2, axis=-1), broadcast), x.dtype)
                for f in (ops.cos, ops.sin))
    # (x0, x1) -> (-x1, x0) for every pair, so that x*cos + rotated*sin is the rotation
    rotated = ops.reshape(ops.stack([-x[..., 1::2], x[..., ::2]], axis=-1), ops.shape(x))
    return x * cos + rotated * sin


class _PointerBase(PointerRules, keras.layers.Layer):
    """What GlobalPointer and EfficientGlobalPointer share (arguments, weights, shapes and
    config: ``crf_lr.model.checks.PointerRules``), RoPE and masking.

    Subclasses create their weights in ``build`` and implement ``_scores(inputs)``: ``(batch, n,
    hidden)`` to unmasked scores ``(batch, heads, n, n)`` using ``self._rope``."""
    initializers = keras.initializers          # PointerRules makes and saves the kernel's

    @staticmethod
    def _affine(x, kernel, bias):
        """``x @ kernel + bias`` in the dtype of ``x`` (weights cast to it)."""
        y = ops.matmul(x, ops.cast(kernel, x.dtype))
        return y if bias is None else y + ops.cast(bias, x.dtype)

    def _projection(self, inputs, kernel, bias):
        """The query/key projection, computed in the layer's compute dtype and returned in at
        least float32: span logits are products of two of its units, summed over ``head_size``,
        which overflow float16 (65504) at activations that the projection itself keeps finite."""
        qk = self._affine(inputs, kernel, bias)
        return qk if keras.backend.standardize_dtype(qk.dtype) in ('float32', 'float64') \
            else ops.cast(qk, 'float32')

    def _rope(self, q, k):
        if not self.RoPE:
            return q, k
        return rotary_position_embedding(q), rotary_position_embedding(k)

    def call(self, inputs, mask=None):
        """Scores ``(batch, heads, n, n)``; ``mask`` ``(batch, n)`` (bool or 0/1) marks real tokens.
        """
        scores = self._scores(inputs)
        keep = None
        if mask is not None:
            mask = ops.cast(mask, 'bool')
            keep = ops.logical_and(mask[:, None, :, None], mask[:, None, None, :])
        if self.tril_mask:
            position = ops.arange(ops.shape(scores)[-1])
            upper = (position[:, None] <= position[None, :])[None, None]    # start <= end
            keep = upper if keep is None else ops.logical_and(keep, upper)
        if keep is None:
            return scores
        return ops.where(keep, scores, ops.cast(-np.inf, scores.dtype))



@keras.saving.register_keras_serializable(package='crf_lr')
class GlobalPointer(_PointerBase):
    """GlobalPointer: ``s_t(i, j) = q_{t,i} . k_{t,j} / sqrt(head_size)``, one query and key
    projection per type ``t`` (RoPE on both when ``RoPE=True``).

    Weights (bert4keras layout): ``kernel`` ``(hidden, heads * 2 * head_size)``, ``bias``; the
    units of type ``t`` are ``[t*2D, (t+1)*2D)``, first half query, second half key.

    Args:
        heads: number of span types (int >= 1).
        head_size: query/key size ``D`` (even when ``RoPE``).
        RoPE: rotary position embedding on queries and keys.
        use_bias: bias in the projection.
        tril_mask: mask the strict lower triangle (``start > end``) with ``-inf``.
        kernel_initializer: Keras initializer of the kernel.
    Input ``(batch, n, hidden)`` with an optional Keras mask; output ``(batch, heads, n, n)``.

        >>> scores = GlobalPointer(heads=len(types), head_size=64)(hidden)
        >>> model = keras.Model(inputs, scores)
    """

    def build(self, input_shape):
        self.kernel, self.bias = self._dense_weights(
            'qk', self._input_dim(input_shape), self.heads * 2 * self.head_size)

    def _scores(self, inputs):
        qk = self._projection(inputs, self.kernel, self.bias)
        shape = ops.shape(qk)
        qk = ops.reshape(qk, (shape[0], shape[1], self.heads, 2 * self.head_size))
        q, k = self._rope(qk[..., :self.head_size], qk[..., self.head_size:])
        return ops.einsum('bmhd,bnhd->bhmn', q, k) / self.head_size ** 0.5


@keras.saving.register_keras_serializable(package='crf_lr')
class EfficientGlobalPointer(_PointerBase):
    """Efficient GlobalPointer: one query/key projection shared by all types plus a per-type term,
    ``s_t(i, j) = q_i . k_j / sqrt(D) + w_t . [q_i; k_i; q_j; k_j] + b_t``.

    Weights (bert4keras layout, in this order): ``qk_kernel`` ``(hidden, 2D)``, ``qk_bias``,
    ``type_kernel`` ``(2D, 2 * heads)``, ``type_bias``; ``q = units[0::2]``, ``k = units[1::2]``;
    the even type units score the end token, the odd ones the start token. Arguments, input and
    output as ``GlobalPointer``.

        >>> scores = EfficientGlobalPointer(heads=len(types), head_size=64)(hidden)
        >>> model = keras.Model(inputs, scores)
    """

    def build(self, input_shape):
        self.qk_kernel, self.qk_bias = self._dense_weights(
            'qk', self._input_dim(input_shape), 2 * self.head_size)
        self.type_kernel, self.type_bias = self._dense_weights(
            'type', 2 * self.head_size, 2 * self.heads)

    def _scores(self, inputs):
        qk = self._projection(inputs, self.qk_kernel, self.qk_bias)          # (b, n, 2D)
        q, k = self._rope(qk[..., ::2], qk[..., 1::2])
        shared = ops.einsum('bmd,bnd->bmn', q, k) / self.head_size ** 0.5
        per_type = ops.transpose(self._affine(qk, self.type_kernel, self.type_bias),
                                 (0, 2, 1)) / 2
        end_term, start_term = per_type[:, ::2, None, :], per_type[:, 1::2, :, None]
        return shared[:, None] + end_term + start_term
