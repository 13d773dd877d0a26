"""GlobalPointer heads: every (start, end) pair of a sequence scored at once, one score per type.

``GlobalPointer`` (https://kexue.fm/archives/8373) projects each token to a query and a key per type
and scores a span by their scaled dot product. ``EfficientGlobalPointer``
(https://kexue.fm/archives/8877) shares one query/key projection between all types and adds a cheap
per-type term. Both give scores of shape ``(batch, heads, n, n)`` where cell ``[b, t, i, j]`` scores
the span of tokens ``i..j`` (inclusive) of type ``t``; ``crf_lr.decoding.spans.decode_spans`` turns
them into ``(start, end_exclusive, type)`` spans,
``crf_lr.model.losses.global_pointer_crossentropy`` trains them.

Masked cells (padding rows/columns and, with ``tril_mask=True``, the strict lower triangle
``i > j``) hold ``-inf``: the losses of ``crf_lr.model.losses`` exclude them with no NaN value or
gradient, ``y_pred > 0`` never selects them and the span decoder never returns them. The math and
the weight layout equal bert4keras 0.11.5's layers of the same names, so
``ours.set_weights(theirs.get_weights())`` gives identical scores.

    >>> scores = EfficientGlobalPointer(heads=4, head_size=64)(encoder.output)
    >>> model.compile(loss=global_pointer_crossentropy, optimizer='adam')
"""
import numpy as np

from crf_lr.model.checks import PointerRules, rope_size
from crf_lr.compat import keras, tf
from crf_lr.model.numerics import guard_finite
from crf_lr.model.serialization import register


def rotary_position_embedding(x, base=10000, position_axis=1):
    """Rotate pairs of features of ``x`` by position-dependent angles (RoPE, Su et al. 2021).

    Feature pair ``(x[2i], x[2i+1])`` at position ``p`` is rotated by ``p * base**(-2i/d)``, the
    interleaved layout of bert4keras, so that ``rope(q)_m . rope(k)_n`` depends on ``n - m`` only.

    Args:
        x: float tensor ``(..., d)`` with ``d`` even and static.
        base: the frequency base.
        position_axis: the axis of ``x`` that positions run along (1: ``(batch, n, ..., d)``).
    Returns:
        A tensor of the shape and dtype of ``x``.

        >>> q = rotary_position_embedding(q)          # q: (batch, n, heads, head_size)
        >>> scores = tf.einsum('bmhd,bnhd->bhmn', q, rotary_position_embedding(k))
    """
    d = rope_size(x.shape)
    if position_axis % x.shape.rank == x.shape.rank - 1:
        raise ValueError(f'rotary_position_embedding: position_axis {position_axis} is the '
                         f'feature axis; positions must run along another axis of {x.shape}')
    positions = tf.range(tf.shape(x)[position_axis], dtype='float32')
    frequencies = tf.pow(float(base), -2 * tf.range(d // 2, dtype='float32') / d)
    angles = positions[:, None] * frequencies[None]                       # (n, d/2)
    broadcast = [1] * x.shape.rank
    broadcast[position_axis], broadcast[-1] = -1, d
    cos, sin = (tf.cast(tf.reshape(tf.repeat(f(angles), 2, axis=-1), broadcast), x.dtype)
                for f in (tf.cos, tf.sin))
    # (x0, x1) -> (-x1, x0) for every pair, so that x*cos + rotated*sin is the rotation: the pairs
    # reversed in place and the sign put on sin. Strided slices of x (x[..., 1::2]) would copy it
    # element by element, forwards and backwards.
    pairs = tf.reshape(x, tf.concat([tf.shape(x)[:-1], [d // 2, 2]], 0))
    swapped = tf.reshape(tf.reverse(pairs, [-1]), tf.shape(x))
    return x * cos + swapped * (sin * tf.constant(np.tile([-1, 1], d // 2), x.dtype))


class _PointerBase(PointerRules, keras.layers.Layer):
    """What GlobalPointer and EfficientGlobalPointer share (arguments, weights, shapes and
    config: ``crf_lr.model.checks.PointerRules``), RoPE and masking.

    Subclasses create their weights in ``build`` and implement ``_scores(inputs)``, which maps
    ``(batch, n, hidden)`` to unmasked scores ``(batch, heads, n, n)`` using ``self._queries_keys``.
    """
    initializers = keras.initializers          # PointerRules makes and saves the kernel's

    @staticmethod
    def _affine(x, kernel, bias):
        """``x @ kernel + bias`` in the dtype of ``x`` (weights cast to it)."""
        y = tf.tensordot(x, tf.cast(kernel, x.dtype), axes=1)
        return y if bias is None else y + tf.cast(bias, x.dtype)

    def _projection(self, inputs, kernel, bias):
        """The query/key projection, computed in the layer's compute dtype and returned in at
        least float32: span logits are products of two of its units, summed over ``head_size``,
        which overflow float16 (65504) at activations that the projection itself keeps finite."""
        qk = self._affine(inputs, kernel, bias)
        return tf.cast(qk, 'float32') if qk.dtype.size < 4 else qk

    def _queries_keys(self, stacked, position_axis):
        """``stacked`` ``(2, ..., D)``, queries then keys along axis 0, with RoPE applied along
        ``position_axis`` when ``self.RoPE``, as the pair ``(queries, keys)``. Queries and keys
        are split along the leading axis: a slice of whole blocks, where slicing them out of the
        projection's last axis copied them element by element, forwards and backwards."""
        if self.RoPE:
            stacked = rotary_position_embedding(stacked, position_axis=position_axis)
        return tf.unstack(stacked)

    def call(self, inputs, mask=None):
        """Scores ``(batch, heads, n, n)``; ``mask`` ``(batch, n)`` (bool or 0/1) marks real tokens
        (Keras passes the encoder's padding mask here; without one, no position is masked).
        Under ``crf_lr.set_check_numerics``, NaN or inf in ``inputs`` or in the unmasked scores
        (weights gone NaN, overflow) raise ``InvalidArgumentError`` naming the layer."""
        owner = f'{type(self).__name__}(name={self.name})'       # no quotes: see crf.py
        scores = guard_finite(self._scores(guard_finite(inputs, owner, 'inputs')), owner, 'scores')
        keep = None
        if mask is not None:
            mask = tf.cast(mask, 'bool')
            keep = mask[:, None, :, None] & mask[:, None, None, :]
        if self.tril_mask:
            position = tf.range(tf.shape(scores)[-1])
            upper = position[:, None] <= position[None, :]                  # start <= end
            keep = upper[None, None] if keep is None else keep & upper
        # mixed precision: the scores leave in float32, the model's output (as the CRF's do)
        scores = tf.cast(scores, 'float32') if scores.dtype.size < 4 else scores
        if keep is None:
            return scores
        return tf.where(keep, scores, tf.cast(-np.inf, scores.dtype))


@register
class GlobalPointer(_PointerBase):
    """GlobalPointer: span score ``s_t(i, j) = q_{t,i} . k_{t,j} / sqrt(head_size)``, one query and
    key projection per type ``t`` (with RoPE applied to both when ``RoPE=True``).

    Weights (bert4keras layout): ``kernel`` ``(hidden, heads * 2 * head_size)`` and ``bias``
    ``(heads * 2 * head_size,)``; the units of type ``t`` are ``[t*2D, (t+1)*2D)``, the first half
    its query, the second its key (``D = head_size``). Parameter count:
    ``heads * 2 * head_size * (hidden + use_bias)``.

    Args:
        heads: number of span types (int >= 1).
        head_size: query/key size ``D`` (even when ``RoPE``).
        RoPE: rotary position embedding on queries and keys (relative positions).
        use_bias: bias in the projection.
        tril_mask: mask the strict lower triangle (``start > end``) with ``-inf``.
        kernel_initializer: Keras initializer of the kernel.
    Input ``(batch, n, hidden)`` float, with an optional Keras mask ``(batch, n)``; output
    ``(batch, heads, n, n)``, ``-inf`` in masked cells, in the compute dtype but at least float32:
    under ``mixed_float16`` the projection runs in float16 and the span logits in float32.

        >>> scores = GlobalPointer(heads=len(labels), head_size=64)(bert.model.output)
        >>> model = keras.Model(bert.model.input, scores)
    """

    def build(self, input_shape):
        self.kernel, self.bias = self._dense_weights(
            'qk', self._input_dim(input_shape), self.heads * 2 * self.head_size)
        super().build(input_shape)

    def _scores(self, inputs):
        qk = self._projection(inputs, self.kernel, self.bias)          # (b, n, heads * 2D)
        shape = tf.shape(qk)
        qk = tf.reshape(qk, [shape[0], shape[1], self.heads, 2, self.head_size])
        q, k = self._queries_keys(tf.transpose(qk, [3, 0, 2, 1, 4]), 3)   # (2, b, heads, n, D)
        return tf.matmul(q, k, transpose_b=True) / self.head_size ** 0.5   # batched: no Einsum


@register
class EfficientGlobalPointer(_PointerBase):
    """Efficient GlobalPointer: one query/key projection shared by all types plus a per-type term,
    ``s_t(i, j) = q_i . k_j / sqrt(D) + w_t . [q_i; k_i; q_j; k_j] + b_t``.

    ``[q; k]`` is the shared projection before RoPE (``D = head_size``, units interleaved as in
    bert4keras: ``q = units[0::2]``, ``k = units[1::2]``). The per-type term is computed as
    ``(type_kernel . [q;k]_j)[2t] / 2 + (type_kernel . [q;k]_i)[2t + 1] / 2`` (biases included):
    the even units score the end token, the odd ones the start token.

    Weights (bert4keras layout, in this order): ``qk_kernel`` ``(hidden, 2D)``, ``qk_bias``
    ``(2D,)``, ``type_kernel`` ``(2D, 2 * heads)``, ``type_bias`` ``(2 * heads,)``. Parameter count:
    ``2D * (hidden + use_bias) + heads * (4D + 2 * use_bias)``, i.e. ``4D`` weights (+ 2 biases) per
    type against ``2D * (hidden + use_bias)`` per type for ``GlobalPointer``.

    Arguments, input and output as ``GlobalPointer``.

        >>> scores = EfficientGlobalPointer(heads=len(labels), head_size=64)(bert.model.output)
        >>> model = keras.Model(bert.model.input, scores)
    """

    def build(self, input_shape):
        self.qk_kernel, self.qk_bias = self._dense_weights(
            'qk', self._input_dim(input_shape), 2 * self.head_size)
        self.type_kernel, self.type_bias = self._dense_weights(
            'type', 2 * self.head_size, 2 * self.heads)
        super().build(input_shape)

    def _scores(self, inputs):
        qk = self._projection(inputs, self.qk_kernel, self.qk_bias)         # (b, n, 2D)
        shape = tf.shape(qk)
        pairs = tf.reshape(qk, [shape[0], shape[1], self.head_size, 2])      # q, k interleaved
        q, k = self._queries_keys(tf.transpose(pairs, [3, 0, 1, 2]), 2)     # (2, b, n, D)
        shared = tf.matmul(q, k, transpose_b=True) / self.head_size ** 0.5
        per_type = self._affine(qk, self.type_kernel, self.type_bias) / 2    # (b, n, 2 * heads)
        per_type = tf.reshape(per_type, [shape[0], shape[1], self.heads, 2])  # end, start units
        end_term, start_term = tf.unstack(tf.transpose(per_type, [3, 0, 2, 1]))   # (b, heads, n)
        return (tf.expand_dims(shared, 1) + tf.expand_dims(end_term, 2)
                + tf.expand_dims(start_term, 3))

