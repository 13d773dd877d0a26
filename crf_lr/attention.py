"""bert4keras's multi-head attention with its products as batched matrix products.

bert4keras scores and mixes with ``tf.einsum`` and masks the scores with a select; this module
gives ``bert4keras.layers.MultiHeadAttention.pay_attention_to`` the same computation as two
``tf.matmul`` products on head-major tensors, the key mask added as a 0 / -inf bias. In float32
the outputs are the same to the last bit (a + 0 = a, a + (-inf) = -inf, as the select gives, and
the fused kernel computed the same scores in every case tested); in bf16 they differ by rounding
(the fused kernel rounds once where the separate ops round three times). TensorFlow's graph
optimiser fuses product, scale and mask into one oneDNN kernel, and the products' gradients need
fewer re-layouts than ``Einsum``'s: a training step of the 4-layer ALBERT-tiny shape is 1.07-1.11x
faster in float32 and in bf16 (``python benchmarks/graph_probe.py --change batched_attention``;
docs/performance.md). The same weights, checkpoints and configs: only the graph changes. One
difference at the edge: a masked key whose score is +inf or NaN makes the row NaN (the select
dropped it); layer-normalised inputs keep scores finite.

:mod:`crf_lr.compat` installs it for every model of the process (so does importing this module,
which imports :mod:`crf_lr.compat`); attention with ``normalization`` other than softmax,
relative position biases (NEZHA, T5) or a boolean ``a_bias`` (bert4keras's language-model and
UniLM masks) keeps bert4keras's own code.

    >>> import crf_lr.compat                       # installed; nothing to call
    >>> with batched_attention(False):             # bert4keras's einsum form, e.g. to compare
    ...     scores = tf.function(lambda x: model(x))(inputs)
"""
import crf_lr  # noqa: F401  (sets TF_KERAS / TF_USE_LEGACY_KERAS before TensorFlow loads)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from bert4keras.backend import K, apply_rotary_position_embeddings, keras  # noqa: E402

from crf_lr.patching import patch  # noqa: E402
from crf_lr.switches import ThreadSwitch  # noqa: E402

_BATCHED = ThreadSwitch(default=True)     # read when an attention layer is traced
_FUSED_PROJECTIONS = ThreadSwitch(default=True)     # the same: fused_projections


def batched_attention(enabled=True):
    """Within the block, bert4keras attention layers traced use the batched products (the
    default) or, with ``enabled=False``, bert4keras's own einsum form. Per thread; traced
    functions keep the form they were traced with.

        >>> with batched_attention(False):
        ...     scores = model.predict(inputs)     # traced with bert4keras's code
    """
    return _BATCHED.set(enabled)


def fused_projections(enabled=True):
    """Within the block, bert4keras self-attention layers traced compute their query, key and
    value projections as one product (the default) or, with ``enabled=False``, as three
    ``Dense`` calls. Per thread; traced functions keep the form they were traced with.

        >>> with fused_projections(False):
        ...     loss = train_step(batch)           # traced with three projections
    """
    return _FUSED_PROJECTIONS.set(enabled)


def heads_first(x):
    """(batch, n, heads, size) -> (batch, heads, n, size)."""
    return tf.transpose(x, [0, 2, 1, 3])


def _key_mask_bias(key_mask, dtype):
    """(batch, k) mask -> (batch, 1, 1, k) bias: 0 where kept, -inf where masked."""
    kept = tf.cast(key_mask, tf.bool)[:, None, None, :]
    return tf.where(kept, tf.constant(0, dtype), tf.constant(-np.inf, dtype))


def _attend(layer, q, k, v, bias, key_mask, q_scaled=False):
    """Softmax attention of ``layer`` on head-first q, k, v (batch, heads, n, size), with an
    optional additive ``bias`` and (batch, n_k) ``key_mask``; ``q_scaled``: q already carries
    the layer's scale. Returns (o (batch, n_q, heads, size), the scaled scores before bias and
    mask)."""
    scores = tf.matmul(q, k, transpose_b=True)
    if layer.attention_scale and not q_scaled:
        scores = scores / layer.key_size**0.5
    logits = scores
    if bias is not None:
        logits = logits + (bias[:, None] if K.ndim(bias) == 3 else bias)
    if key_mask is not None:
        logits = logits + _key_mask_bias(key_mask, logits.dtype)
    weights = K.softmax(logits)
    if layer.attention_dropout:
        weights = keras.layers.Dropout(layer.attention_dropout)(weights)
    return heads_first(tf.matmul(weights, v)), scores


def batched_pay_attention_to(layer, inputs, mask=None, **kwargs):
    """Softmax attention of ``layer`` (a bert4keras ``MultiHeadAttention``) on head-split
    ``inputs`` [q, k, v (batch, n, heads, size), optional a_bias, optional rotary sinusoids].

    Returns (o (batch, n_q, heads, head_size), the scaled scores before bias and mask), as
    bert4keras's ``pay_attention_to`` does.
    """
    (qw, kw, vw), extra = inputs[:3], list(inputs[3:])
    bias = extra.pop(0) if kwargs.get('a_bias') else None
    if kwargs.get('p_bias') == 'rotary':
        qw, kw = apply_rotary_position_embeddings(extra.pop(0), qw, kw)
    return _attend(layer, heads_first(qw), heads_first(kw), heads_first(vw), bias,
                   mask[1] if mask is not None else None)


def _projections(layer):
    """The layer's query, key and value ``Dense`` layers."""
    return layer.q_dense, layer.k_dense, layer.v_dense


def fused_self_attention(layer, inputs, mask=None, **kwargs):
    """bert4keras's ``MultiHeadAttention.call`` for self-attention (q, k and v the same
    tensor): the three projections as one product with the kernels side by side, split into
    head-first q, k, v by one transpose, the scores' scale carried by the query's kernel and
    bias (a (hidden, hidden) product where the scores are (heads, n, n) per sentence). Same
    weights; the same values up to float rounding."""
    x = inputs[0]
    projections = _projections(layer)
    scale = layer.key_size**-0.5 if layer.attention_scale else 1.0
    product = tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), tf.concat(
        [projections[0].kernel * scale] + [p.kernel for p in projections[1:]], axis=1))
    if layer.use_bias:
        product = tf.nn.bias_add(product, tf.concat(
            [projections[0].bias * scale] + [p.bias for p in projections[1:]], axis=0))
    shape = tf.shape(x)
    split = tf.reshape(product, [shape[0], shape[1], 3, layer.heads, layer.key_size])
    q, k, v = tf.unstack(tf.transpose(split, [2, 0, 3, 1, 4]))
    bias = inputs[3] if kwargs.get('a_bias') else None
    o, scores = _attend(layer, q, k, v, bias, mask[2] if mask is not None else None,
                        q_scaled=True)
    o = layer.o_dense(tf.reshape(o, [shape[0], shape[1], layer.heads * layer.head_size]))
    return [o, scores] if layer.return_attention_scores else o


def _handles(layer, inputs, kwargs):
    """True where :func:`batched_pay_attention_to` computes what bert4keras would."""
    a_bias = inputs[3] if kwargs.get('a_bias') else None
    return (_BATCHED.enabled and layer.normalization == 'softmax'
            and kwargs.get('p_bias') in (None, 'rotary')
            and (a_bias is None or a_bias.dtype != tf.bool))


def _fuses(layer, inputs, kwargs):
    """True where :func:`fused_self_attention` computes what bert4keras would: batched
    softmax attention without position biases, q, k and v one tensor, the projections plain
    linear ``Dense`` layers already built (by the model's construction, through bert4keras's
    code), and bert4keras's ``RECOMPUTE`` mode off."""
    from bert4keras.backend import do_recompute
    from tf_keras.src.layers.core.dense import Dense
    q, k, v = inputs[:3]
    return (_FUSED_PROJECTIONS.enabled and _handles(layer, inputs, kwargs)
            and kwargs.get('p_bias') is None and q is k and k is v and not do_recompute
            and isinstance(q, tf.Tensor) and q.shape.rank == 3
            and layer.key_size == layer.head_size
            and all(type(p) is Dense and p.built and p.use_bias == layer.use_bias
                    and p.activation is keras.activations.linear
                    for p in _projections(layer)))


def install():
    """Route ``bert4keras.layers.MultiHeadAttention``'s ``call`` through
    :func:`fused_self_attention` and its ``pay_attention_to`` through
    :func:`batched_pay_attention_to` where they apply (idempotent)."""
    from bert4keras.layers import MultiHeadAttention

    def call(original, self, inputs, mask=None, **kwargs):
        if _fuses(self, inputs, kwargs):
            return fused_self_attention(self, inputs, mask, **kwargs)
        return original(self, inputs, mask, **kwargs)

    def pay_attention_to(original, self, inputs, mask=None, **kwargs):
        if _handles(self, inputs, kwargs):
            return batched_pay_attention_to(self, inputs, mask, **kwargs)
        return original(self, inputs, mask, **kwargs)

    patch(MultiHeadAttention, 'call', call)
    patch(MultiHeadAttention, 'pay_attention_to', pay_attention_to)


import crf_lr.compat  # noqa: E402,F401  (installs the patch, with TensorFlow's other fixes)
