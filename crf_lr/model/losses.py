"""Multilabel categorical crossentropy (MCCE) and the GlobalPointer losses and F1 built on it.

MCCE (https://kexue.fm/archives/7359) scores ``C`` classes with real logits ``s`` and a set ``P`` of
positive classes (the others, ``N``, are negatives) with a threshold fixed at 0:

    loss = log(1 + sum_{i in P} exp(-s_i)) + log(1 + sum_{j in N} exp(s_j))

so at inference a class is predicted when ``s > 0``. Cells whose logit is ``-inf`` (what the
GlobalPointer layers put in padding and lower-triangle cells) belong to neither set: they add
nothing to the loss and receive a zero gradient, never NaN.

All losses compute in float32 when given float16/bfloat16 logits (mixed precision). Reductions:
the two MCCE functions return one value per row (all axes but the last); the two GlobalPointer
losses return one value per example, ``(batch,)``, the **sum over heads** of the per-type MCCE,
which Keras then averages over the batch. (bert4keras's example ``global_pointer_crossentropy``
averages over batch and heads instead, i.e. it equals ours divided by ``heads``.)
Every function is registered with Keras (``'crf_lr>' + name``), so a model compiled with them
reloads with ``keras.models.load_model`` and no ``custom_objects``.

Bad input: a sparse target index out of range always raises ``InvalidArgumentError`` naming the
loss, the index and the range. NaN or ``+inf`` logits and dense targets outside [0, 1] raise
(naming the loss and the argument) while ``crf_lr.set_check_numerics`` is on, the default (it costs
nothing measurable: docs/reliability.md); with the checks off each function's docstring says what
they give, under "NaN / inf (checks off)": mostly a NaN loss, but never an error.

    >>> model.compile(optimizer='adam', loss=sparse_global_pointer_crossentropy,
    ...               metrics=[sparse_global_pointer_f1])
"""
import numpy as np

from crf_lr.model.checks import dice_f1
from crf_lr.compat import tf
from crf_lr.model.numerics import guard, guard_finite
from crf_lr.model.serialization import register


def _logits(y_pred, owner=None):
    """``y_pred`` as a float tensor of at least float32 precision; with an ``owner`` (a loss
    name), NaN or +inf raise under ``crf_lr.set_check_numerics`` (``-inf`` = masked cell)."""
    y_pred = tf.convert_to_tensor(y_pred)
    if not y_pred.dtype.is_floating:
        raise TypeError(f'y_pred must hold float logits, got dtype {y_pred.dtype.name}')
    y_pred = tf.cast(y_pred, 'float32') if y_pred.dtype.size < 4 else y_pred
    return y_pred if owner is None else guard_finite(y_pred, owner, 'y_pred',
                                                     minus_inf_allowed=True)


def _logsumexp_with_zero(x):
    """``log(1 + sum(exp(x), axis=-1))``: logsumexp over the last axis with a 0 logit (the
    threshold class) included, without materialising a concatenated copy of ``x``. Finite, with a
    zero gradient on ``-inf`` entries, even when every entry is ``-inf``."""
    shift = tf.stop_gradient(tf.maximum(tf.reduce_max(x, axis=-1, keepdims=True), 0))
    total = tf.reduce_sum(tf.exp(x - shift), axis=-1) + tf.exp(-shift[..., 0])
    return shift[..., 0] + tf.math.log(total)


@register
def multilabel_categorical_crossentropy(y_true, y_pred):
    """Dense multilabel categorical crossentropy.

    Args:
        y_true: float tensor ``(..., C)``: 1 for a positive class, 0 for a negative one (values in
            between are soft targets, as in bert4keras; outside [0, 1] the loss is NaN, and
            ``crf_lr.set_check_numerics(True)`` makes them raise).
        y_pred: float tensor ``(..., C)`` of real logits (no sigmoid/softmax); ``-inf`` excludes a
            class from the loss (a positive target on such a cell is ignored).
    Returns:
        Float tensor ``(...)``: the loss of every row.
    NaN / inf (checks off): a NaN or ``+inf`` logit, or a target outside [0, 1] or NaN, makes its
    row's loss NaN; under ``crf_lr.set_check_numerics(True)`` each raises naming the argument.

        >>> multilabel_categorical_crossentropy([[1., 0., 0.]], [[2., -1., 0.5]])
        <tf.Tensor: shape=(1,), ...>
    """
    return _dense_mcce(y_true, y_pred, 'multilabel_categorical_crossentropy')


def _dense_mcce(y_true, y_pred, owner):
    """``multilabel_categorical_crossentropy``; ``owner``: the loss named in errors."""
    y_pred = _logits(y_pred, owner)
    y_true = tf.cast(y_true, y_pred.dtype)
    if y_true.shape.rank is not None and y_pred.shape.rank is not None:
        if not y_true.shape.is_compatible_with(y_pred.shape):
            raise ValueError(f'{owner}: y_true and y_pred must have the same shape; got '
                             f'{y_true.shape} and {y_pred.shape}')
    y_true = guard(y_true, lambda t: ~((t >= 0) & (t <= 1)), owner, 'y_true',
                   'values outside [0, 1] (or NaN)')
    neg_inf = tf.constant(-np.inf, y_pred.dtype)
    # Masked cells: -y_pred would be +inf, so they are replaced by -inf before the logsumexp.
    positive = tf.where(tf.not_equal(y_pred, neg_inf), -y_pred, neg_inf) + tf.math.log(y_true)
    negative = y_pred + tf.math.log(1 - y_true)
    return _logsumexp_with_zero(positive) + _logsumexp_with_zero(negative)


@register
def sparse_multilabel_categorical_crossentropy(y_true, y_pred, mask_zero=False):
    """Multilabel categorical crossentropy with the positive classes given as indices.

    The negative term ``log(1 + sum_N exp(s))`` is a logsumexp over a copy of the logits in which
    the listed positives are overwritten with ``-inf`` (one scatter of O(positives) indices), so it
    is exact in every regime. bert4keras instead computes it as
    ``lse_all + log(1 - exp(lse_P - lse_all))`` clipped at 1e-7, which cancels catastrophically
    once the positives carry most of the mass, i.e. for a well-trained model: ``1 - exp(...)``
    subtracts two numbers near 1, so the negatives' share keeps only the digits float32 has left
    below 1, and the clip puts a floor of 1e-7 under it.
    Target memory is O(positives), not O(C); the scatter makes one copy of the logits, as
    bert4keras's concatenation of the threshold logit does.

    Args:
        y_true: int tensor ``(..., P)``: indices into the last axis of ``y_pred`` of the positive
            classes, each at most once per row (a repeated index counts twice in the positive
            term). Negative indices are padding; with ``mask_zero=True`` index 0 is padding too and
            class 0 is removed from the loss altogether (the bert4keras convention). An index
            >= C raises ``InvalidArgumentError`` (always: the check is O(P)).
        y_pred: float tensor ``(..., C)`` of real logits; ``-inf`` cells count as neither positive
            nor negative (a positive index on such a cell is ignored, as in the dense loss).
        mask_zero: treat class 0 as padding (see above).
    Returns:
        Float tensor ``(...)``: the loss of every row.
    NaN / inf (checks off): a NaN logit makes its row's loss NaN, and so does ``+inf`` on a
    negative class; ``+inf`` on a positive class is silently taken as a perfect score (its term
    is 0, the loss finite and wrong). Under ``crf_lr.set_check_numerics(True)`` both raise.

        >>> sparse_multilabel_categorical_crossentropy([[0, -1]], [[2., -1., 0.5]])
        <tf.Tensor: shape=(1,), ...>
    """
    return _sparse_mcce(y_true, y_pred, mask_zero, 'sparse_multilabel_categorical_crossentropy')


def _sparse_mcce(y_true, y_pred, mask_zero, owner):
    """``sparse_multilabel_categorical_crossentropy``; ``owner``: the loss named in errors."""
    y_pred = _logits(y_pred, owner)
    y_true = tf.convert_to_tensor(y_true)
    if y_true.dtype.is_floating:
        y_true = tf.round(y_true)
    y_true = tf.cast(y_true, 'int32')
    if y_true.shape.rank is None or y_pred.shape.rank is None or \
            y_true.shape.rank != y_pred.shape.rank or \
            not y_true.shape[:-1].is_compatible_with(y_pred.shape[:-1]):
        raise ValueError(f'{owner}: y_true (..., P) and y_pred (..., C) must have a known rank '
                         f'and agree on every axis but the last; got {y_true.shape} and '
                         f'{y_pred.shape}')
    classes = tf.shape(y_pred)[-1]
    y_true = guard(y_true, lambda t: t >= classes, owner, 'y_true', 'class indices >= C',
                   always=True, context=[('C', classes)])
    neg_inf = tf.constant(-np.inf, y_pred.dtype)
    valid = y_true >= 0
    if mask_zero:
        valid &= tf.not_equal(y_true, 0)
        y_pred = tf.concat([tf.fill(tf.shape(y_pred[..., :1]), neg_inf), y_pred[..., 1:]], -1)
    scores = tf.gather(y_pred, tf.where(valid, y_true, 0), batch_dims=y_true.shape.rank - 1)
    valid &= tf.not_equal(scores, neg_inf)  # as in the dense loss: masked cells ignored
    positive_loss = _logsumexp_with_zero(tf.where(valid, -scores, neg_inf))
    # Negatives: the logits with every listed positive overwritten by -inf.
    rows = tf.reshape(y_pred, [-1, tf.shape(y_pred)[-1]])
    row_of_slot = tf.repeat(tf.range(tf.shape(rows)[0]), tf.shape(y_true)[-1])
    cells = tf.boolean_mask(tf.stack([row_of_slot, tf.reshape(y_true, [-1])], axis=1),
                            tf.reshape(valid, [-1]))
    negatives = tf.tensor_scatter_nd_update(rows, cells, tf.fill(tf.shape(cells)[:1], neg_inf))
    negative_loss = tf.reshape(_logsumexp_with_zero(negatives), tf.shape(y_pred)[:-1])
    return positive_loss + negative_loss


def _flatten_cells(y):
    """(batch, heads, n, n) -> (batch, heads, n * n)."""
    shape = tf.shape(y)
    return tf.reshape(y, tf.concat([shape[:2], [shape[2] * shape[3]]], 0))


def _global_pointer_scores(y_pred, owner=None):
    """Validated GlobalPointer scores (batch, heads, n, n), at least float32 (``owner``: as in
    ``_logits``)."""
    y_pred = _logits(y_pred, owner)
    if y_pred.shape.rank is not None and y_pred.shape.rank != 4:
        raise ValueError(f'{owner or "GlobalPointer"}: scores y_pred must be (batch, heads, n, n); '
                         f'got {y_pred.shape}')
    return y_pred


@register
def global_pointer_crossentropy(y_true, y_pred):
    """MCCE over all cells of each head of a GlobalPointer output (dense targets).

    Args:
        y_true: float/int tensor ``(batch, heads, n, n)``, 1 where ``[b, t, i, j]`` is an entity of
            type ``t`` from token ``i`` to token ``j`` inclusive
            (``crf_lr.decoding.spans.dense_targets``).
        y_pred: the layer's scores ``(batch, heads, n, n)``, ``-inf`` in masked cells.
    Returns:
        Float tensor ``(batch,)``: the per-type losses summed over heads.
    NaN / inf (checks off): a NaN or ``+inf`` score makes its example's loss NaN (as the dense
    MCCE); under ``crf_lr.set_check_numerics(True)`` it raises naming the loss.

        >>> model.compile(optimizer='adam', loss=global_pointer_crossentropy,
        ...               metrics=[global_pointer_f1])
    """
    owner = 'global_pointer_crossentropy'
    y_pred = _flatten_cells(_global_pointer_scores(y_pred, owner))
    return tf.reduce_sum(_dense_mcce(_flatten_cells(y_true), y_pred, owner), 1)


def _sparse_cell_indices(y_true, n, owner):
    """(batch, heads, E, 2) start/end pairs -> (batch, heads, E) flat cell indices, -1 = padding.
    An index outside [-1, n) raises ``InvalidArgumentError`` naming ``owner`` (always: O(E))."""
    y_true = tf.convert_to_tensor(y_true)
    if y_true.dtype.is_floating:
        y_true = tf.round(y_true)
    y_true = tf.cast(y_true, 'int32')
    if y_true.shape.rank is not None and (y_true.shape.rank != 4
                                          or y_true.shape[-1] not in (None, 2)):
        raise ValueError(f'{owner}: sparse GlobalPointer targets y_true must be (batch, heads, '
                         f'max_entities, 2) start/end pairs; got shape {y_true.shape}')
    y_true = guard(y_true, lambda t: (t < -1) | (t >= n), owner, 'y_true',
                   'start/end indices outside [-1, n), the sequence length n', always=True,
                   context=[('n', n)])
    start, end = y_true[..., 0], y_true[..., 1]
    valid = (start >= 0) & (end >= 0)
    return tf.where(valid, start * n + end, -1)


@register
def sparse_global_pointer_crossentropy(y_true, y_pred):
    """MCCE over all cells of each head of a GlobalPointer output, targets as index pairs.

    Equals ``global_pointer_crossentropy`` on the same entities, with target memory
    O(entities) instead of O(n^2).

    Args:
        y_true: int tensor ``(batch, heads, max_entities, 2)``: ``[b, t, e] = (i, j)`` lists the
            entity of type ``t`` from token ``i`` to token ``j`` *inclusive* (the cell ``[t, i,
            j]``). Padding slots are ``(-1, -1)`` (any slot with a -1); each entity at most once; an
            index below -1 or >= n raises ``InvalidArgumentError``.
            ``crf_lr.decoding.spans.sparse_targets`` builds this. Unlike bert4keras's examples,
            which pad with ``(0, 0)`` and rely on cell (0, 0) being ``[CLS]``, no real cell is
            reserved.
        y_pred: the layer's scores ``(batch, heads, n, n)``.
    Returns:
        Float tensor ``(batch,)``: the per-type losses summed over heads.
    NaN / inf (checks off): a NaN score, or ``+inf`` on a cell that is not an entity, makes its
    example's loss NaN; ``+inf`` on an entity's cell counts as a perfect score (finite, wrong).
    Under ``crf_lr.set_check_numerics(True)`` both raise naming the loss.

        >>> model.compile(optimizer='adam', loss=sparse_global_pointer_crossentropy,
        ...               metrics=[sparse_global_pointer_f1])
    """
    owner = 'sparse_global_pointer_crossentropy'
    y_pred = _global_pointer_scores(y_pred, owner)
    indices = _sparse_cell_indices(y_true, tf.shape(y_pred)[2], owner)
    return tf.reduce_sum(_sparse_mcce(indices, _flatten_cells(y_pred), False, owner), 1)


@register
def global_pointer_f1(y_true, y_pred):
    """Cell-level (= span-level) F1 of a batch, for display during training.

    A cell is predicted when its score is > 0. Returns ``2 TP / (|true| + |predicted|)`` over the
    whole batch, 1.0 when both are empty. Keras averages it over batches, so the epoch figure is
    an approximation; use ``crf_lr.decoding.spans.decode_spans`` and ``crf_lr.evaluation.metrics``
    for exact scores.

    Args:
        y_true: ``(batch, heads, n, n)`` 0/1 targets; y_pred: scores of the same shape.
    Returns:
        Float32 scalar.
    NaN / inf (checks off): never NaN: a NaN score counts as not predicted, ``+inf`` as predicted;
    under ``crf_lr.set_check_numerics(True)`` both raise.

        >>> model.compile(optimizer='adam', loss=global_pointer_crossentropy,
        ...               metrics=[global_pointer_f1])
    """
    return dice_f1(tf.cast(y_true, 'float32'), tf.cast(_logits(y_pred) > 0, 'float32'), tf)


@register
def sparse_global_pointer_f1(y_true, y_pred):
    """``global_pointer_f1`` with targets ``(batch, heads, max_entities, 2)`` as for
    ``sparse_global_pointer_crossentropy`` (densified inside the metric). NaN / inf: as
    ``global_pointer_f1``.

        >>> model.compile(optimizer='adam', loss=sparse_global_pointer_crossentropy,
        ...               metrics=[sparse_global_pointer_f1])
    """
    y_pred = _global_pointer_scores(y_pred)
    shape = tf.shape(y_pred)
    cells = _sparse_cell_indices(y_true, shape[2], 'sparse_global_pointer_f1')
    slots = tf.where(cells >= 0)                                          # (k, 3): b, t, e
    flat = tf.gather_nd(cells, slots)
    indices = tf.stack([slots[:, 0], slots[:, 1], tf.cast(flat, 'int64')], axis=1)
    dense = tf.scatter_nd(indices, tf.ones_like(flat, 'float32'),
                          tf.cast([shape[0], shape[1], shape[2] * shape[3]], 'int64'))
    return global_pointer_f1(tf.minimum(dense, 1.0), _flatten_cells(y_pred))
