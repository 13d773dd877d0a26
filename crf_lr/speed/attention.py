"""bert4keras's multi-head attention with its products as batched matrix products.

bert4keras scores and mixes with ``tf.einsum`` and masks the scores with a select; this module
gives ``bert4keras.layers.MultiHeadAttention.pay_attention_to`` the same computation as two
``tf.matmul`` products on head-major tensors (four with NEZHA's relative positions), the key mask
added as a 0 / -inf bias. In float32
the outputs are the same to the last bit (a + 0 = a, a + (-inf) = -inf, as the select gives, and
the fused kernel computed the same scores in every case tested); in bf16 they differ by rounding
(the fused kernel rounds once where the separate ops round three times). TensorFlow's graph
optimiser fuses product, scale and mask into one oneDNN kernel, and the products' gradients need
fewer re-layouts than ``Einsum``'s: a training step of the 4-layer ALBERT-tiny shape is 1.07-1.11x
faster in float32 and in bf16 (``python benchmarks/graph_probe.py --change batched_attention``;
docs/performance.md). In a training call the softmax's gradient is one kernel with the scale
inside it (:func:`crf_lr.speed.fused_kernels.softmax`), where no additive bias needs the scores'
gradient before the scale. The same weights, checkpoints and configs: only the graph changes. One
difference at the edge: a masked key whose score is +inf or NaN makes the row NaN (the select
dropped it); layer-normalised inputs keep scores finite.

:mod:`crf_lr.compat` installs it for every model of the process (so does importing this module,
which imports :mod:`crf_lr.compat`). Rotary positions (RoFormer) and relative position biases
(NEZHA's ``typical_relative``, its terms in scores and outputs products batched over the
queries; T5's ``t5_relative``, added to the scores) take the same path; attention with
``normalization`` other than softmax or a boolean ``a_bias`` (bert4keras's language-model and
UniLM masks) keeps bert4keras's own code.

    >>> import crf_lr.compat                       # installed; nothing to call
    >>> with batched_attention(False):             # bert4keras's einsum form, e.g. to compare
    ...     scores = tf.function(lambda x: model(x))(inputs)
"""
import crf_lr  # noqa: F401  (sets TF_KERAS / TF_USE_LEGACY_KERAS before TensorFlow loads)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from bert4keras.backend import K, apply_rotary_position_embeddings, keras  # noqa: E402

from crf_lr.speed import fused_kernels  # noqa: E402
from crf_lr.patches import apply  # noqa: E402
from crf_lr.speed.shared_layers import dropout_seed  # noqa: E402
from crf_lr.speed.switches import ThreadSwitch  # noqa: E402

_BATCHED = ThreadSwitch(default=True)     # read when an attention layer is traced
_EINSUM_TRANSPOSES = ThreadSwitch(default=False)


def batched_attention(enabled=True):
    """Within the block, bert4keras attention layers traced use the batched products (the
    default) or, with ``enabled=False``, bert4keras's own einsum form. Per thread; traced
    functions keep the form they were traced with.

        >>> with batched_attention(False):
        ...     scores = model.predict(inputs)     # traced with bert4keras's code
    """
    return _BATCHED.set(enabled)


def einsum_transposes(enabled=True):
    """Within the block, attention layers traced swap heads and positions with a one-operand
    ``tf.einsum`` instead of ``tf.transpose``: the same values, bit for bit. oneDNN's
    ``_MklTranspose``, which grappler puts in place of every ``Transpose``, pays a fixed cost
    per call (4 per layer) that outweighs moving the few elements of one short text, where
    ``Einsum`` moves them in Eigen. :class:`crf_lr.serving.tagger.Tagger` traces
    prediction under it. Per thread; traced functions keep the form they were traced with."""
    return _EINSUM_TRANSPOSES.set(enabled)


def _permuted(x, perm):
    """``tf.transpose(x, perm)``, as a one-operand ``tf.einsum`` within
    :func:`einsum_transposes`."""
    if _EINSUM_TRANSPOSES.enabled:
        axes = 'abcd'[:len(perm)]
        return tf.einsum(f'{axes}->{"".join(axes[k] for k in perm)}', x)
    return tf.transpose(x, perm)


def heads_first(x):
    """(batch, n, heads, size) -> (batch, heads, n, size)."""
    return _permuted(x, [0, 2, 1, 3])


def _query_rows(x, perm):
    """``x`` (rank 4) permuted by ``perm``, which puts the queries first and batch and heads
    next, as (n_q, batch x heads, last)."""
    moved = _permuted(x, perm)
    shape = tf.shape(moved)
    return tf.reshape(moved, [shape[0], shape[1] * shape[2], shape[3]])


def _from_query_rows(x, batch, heads, perm):
    """``x`` (n_q, batch x heads, last) as (n_q, batch, heads, last), permuted by ``perm``."""
    shape = tf.shape(x)
    return _permuted(tf.reshape(x, [shape[0], batch, heads, shape[2]]), perm)


def _typical_relative_scores(qw, position):
    """NEZHA's position term of the scores, ``einsum('bjhd,jkd->bhjk', qw, position)``, as one
    product batched over the queries j."""
    shape = tf.shape(qw)                                                   # (b, j, h, d)
    scores = tf.matmul(_query_rows(qw, [1, 0, 2, 3]), position, transpose_b=True)  # (j, b h, k)
    return _from_query_rows(scores, shape[0], shape[2], [1, 2, 0, 3])


def _typical_relative_outputs(weights, position):
    """NEZHA's position term of the outputs, ``einsum('bhjk,jkd->bjhd', weights, position)``,
    as one product batched over the queries j."""
    shape = tf.shape(weights)                                              # (b, h, j, k)
    mixed = tf.matmul(_query_rows(weights, [2, 0, 1, 3]), position)        # (j, b h, d)
    return _from_query_rows(mixed, shape[0], shape[1], [1, 0, 2, 3])


def _key_mask_bias(key_mask, dtype):
    """(batch, k) mask -> (batch, 1, 1, k) bias: 0 where kept, -inf where masked."""
    kept = tf.cast(key_mask, tf.bool)[:, None, None, :]
    return tf.where(kept, tf.constant(0, dtype), tf.constant(-np.inf, dtype))


def batched_pay_attention_to(layer, inputs, mask=None, **kwargs):
    """Softmax attention of ``layer`` (a bert4keras ``MultiHeadAttention``) on head-split
    ``inputs`` [q, k, v (batch, n, heads, size), optional a_bias, optional position input:
    rotary sinusoids, NEZHA's (n_q, n_k, key_size) or T5's (n_q, n_k, heads) relative bias].

    Returns (o (batch, n_q, heads, head_size), the scores with their position terms, scaled,
    before ``a_bias`` and mask), as bert4keras's ``pay_attention_to`` does.
    """
    (qw, kw, vw), extra = inputs[:3], list(inputs[3:])
    bias = extra.pop(0) if kwargs.get('a_bias') else None
    p_bias = kwargs.get('p_bias')
    position = extra.pop(0) if p_bias else None
    if p_bias == 'rotary':
        qw, kw = apply_rotary_position_embeddings(position, qw, kw)
    products = tf.matmul(heads_first(qw), heads_first(kw), transpose_b=True)
    if p_bias == 'typical_relative':
        products = products + _typical_relative_scores(qw, position)
    elif p_bias == 't5_relative':                  # (n_q, n_k, heads) -> (1, heads, n_q, n_k)
        products = products + _permuted(position, [2, 0, 1])[None]
    divisor = layer.key_size**0.5 if layer.attention_scale else None
    scores = products if divisor is None else products / divisor
    key_mask = mask[1] if mask is not None else None
    mask_bias = None if key_mask is None else _key_mask_bias(key_mask, products.dtype)
    if bias is None:        # the scale inside the softmax: its gradient is one pass, not two
        weights = fused_kernels.softmax(products, divisor, mask_bias)
    else:
        biased = scores + (bias[:, None] if K.ndim(bias) == 3 else bias)
        weights = fused_kernels.softmax(biased, shift=mask_bias)
    if layer.attention_dropout:
        weights = _dropout(weights, layer.attention_dropout)
    outputs = heads_first(tf.matmul(weights, heads_first(vw)))
    if p_bias == 'typical_relative':
        outputs = outputs + _typical_relative_outputs(weights, position)
    return outputs, scores


def _dropout(weights, rate):
    """Keras's dropout of the attention ``weights``; inside a shared layer trace
    (:mod:`crf_lr.speed.shared_layers`), :func:`seeded_dropout` with the seed its call passed,
    so that every layer keeps masks of its own."""
    seed = dropout_seed()
    if seed is None:
        return keras.layers.Dropout(rate)(weights)
    return seeded_dropout(weights, rate, seed)


def seeded_dropout(x, rate, seed):
    """``x`` with each element dropped with probability ``rate`` (rounded to a multiple of
    1/65,536) and the others scaled by one over the probability kept, from the ``[2]`` int32
    ``seed``: two elements of ``x`` a 32-bit random number, where Keras's dropout draws a float
    each, which halves the random numbers drawn for the largest tensor of a training step (the
    attention weights). The same seed gives the same mask.

        >>> seeded_dropout(tf.ones([2, 3]), 0.5, tf.constant([1, 2]))     # 0s and 2s
    """
    threshold = min(round(rate * 65536), 65535)
    size = tf.size(x)
    bits = tf.random.stateless_uniform([(size + 1) // 2], seed, minval=None, maxval=None,
                                       dtype=tf.uint32)
    halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
    kept = tf.reshape(halves >= tf.constant(threshold, tf.uint16), tf.shape(x))
    scale = tf.constant(65536 / (65536 - threshold), x.dtype)
    return tf.where(kept, x * scale, tf.zeros_like(x))


def _handles(layer, inputs, kwargs):
    """True where :func:`batched_pay_attention_to` computes what bert4keras would."""
    a_bias = inputs[3] if kwargs.get('a_bias') else None
    return (_BATCHED.enabled and layer.normalization == 'softmax'
            and kwargs.get('p_bias') in (None, 'rotary', 'typical_relative', 't5_relative')
            and (a_bias is None or a_bias.dtype != tf.bool))


def install():
    """Route ``bert4keras.layers.MultiHeadAttention.pay_attention_to`` through
    :func:`batched_pay_attention_to` where it applies (idempotent; the registry's row
    'attention', off with the speed patches)."""
    def pay_attention_to(original, self, inputs, mask=None, **kwargs):
        if _handles(self, inputs, kwargs):
            return batched_pay_attention_to(self, inputs, mask, **kwargs)
        return original(self, inputs, mask, **kwargs)

    apply('attention', pay_attention_to)


install()        # on import too (idempotent); crf_lr.compat applies every row
