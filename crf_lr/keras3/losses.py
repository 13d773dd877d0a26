"""Multilabel categorical crossentropy (MCCE) and the GlobalPointer losses and F1 in ``keras.ops``.

The same functions as ``crf_lr.model.losses`` (tf-keras), for Keras 3 on any backend. MCCE
(https://kexue.fm/archives/7359) with logits ``s``, positive classes ``P`` and negatives ``N``:

    loss = log(1 + sum_{i in P} exp(-s_i)) + log(1 + sum_{j in N} exp(s_j))

Cells whose logit is ``-inf`` (GlobalPointer padding and lower triangle) belong to neither set and
get a zero gradient. Float16/bfloat16 logits are computed in float32. The two MCCE functions return
one value per row; the GlobalPointer losses return (batch,), the sum over heads.
NaN / inf (no check-numerics switch on this side): as the tf-keras losses with the switch off, a
NaN or ``+inf`` logit (or a dense target outside [0, 1]) gives a NaN loss, except ``+inf`` on a
positive class of the sparse losses, taken as a perfect score; the F1 metrics never give NaN.

    >>> model.compile(optimizer='adam', loss=sparse_global_pointer_crossentropy,
    ...               metrics=[sparse_global_pointer_f1])
"""
import keras
import numpy as np
from keras import ops

from crf_lr.model.checks import dice_f1
from crf_lr.keras3.crf import _concrete

_register = keras.saving.register_keras_serializable(package='crf_lr')


def _logits(y_pred):
    """``y_pred`` as a float tensor of at least float32 precision."""
    y_pred = ops.convert_to_tensor(y_pred)
    dtype = keras.backend.standardize_dtype(y_pred.dtype)
    if not dtype.startswith(('float', 'bfloat')):
        raise TypeError(f'y_pred must hold float logits, got dtype {dtype}')
    return y_pred if dtype in ('float32', 'float64') else ops.cast(y_pred, 'float32')


def _int_targets(y_true):
    """Integer targets (rounded first when given as floats, as Keras passes them)."""
    y_true = ops.convert_to_tensor(y_true)
    if keras.backend.standardize_dtype(y_true.dtype).startswith(('float', 'bfloat')):
        y_true = ops.round(y_true)
    return ops.cast(y_true, 'int32')


def _logsumexp_with_zero(x):
    """``log(1 + sum(exp(x), axis=-1))``; finite with a zero gradient on ``-inf`` entries."""
    shift = ops.stop_gradient(ops.maximum(ops.max(x, axis=-1, keepdims=True), 0))
    total = ops.sum(ops.exp(x - shift), axis=-1) + ops.exp(-shift[..., 0])
    return shift[..., 0] + ops.log(total)


def _neg_inf(like):
    return ops.full_like(like, -np.inf)


@_register
def multilabel_categorical_crossentropy(y_true, y_pred):
    """Dense multilabel categorical crossentropy.

    Args:
        y_true: float tensor ``(..., C)``: 1 positive, 0 negative (soft values allowed).
        y_pred: float tensor ``(..., C)`` of logits; ``-inf`` excludes a class from the loss.
    Returns:
        Float tensor ``(...)``: the loss of every row.

        >>> multilabel_categorical_crossentropy(np.array([[1., 0., 0.]]), np.array([[2., -1., .5]]))
    """
    y_pred = _logits(y_pred)
    y_true = ops.cast(y_true, y_pred.dtype)
    if tuple(y_true.shape) != tuple(y_pred.shape):
        raise ValueError(f'y_true and y_pred must have the same shape; got {tuple(y_true.shape)} '
                         f'and {tuple(y_pred.shape)}')
    positive = ops.where(y_pred > -np.inf, -y_pred, _neg_inf(y_pred)) + ops.log(y_true)
    negative = y_pred + ops.log(1 - y_true)
    return _logsumexp_with_zero(positive) + _logsumexp_with_zero(negative)


@_register
def sparse_multilabel_categorical_crossentropy(y_true, y_pred, mask_zero=False):
    """Multilabel categorical crossentropy with the positive classes given as indices.

    Exact in every regime: the negative term is a logsumexp over the logits with the positives
    overwritten by ``-inf`` (one scatter into a copy with one spare column for padding slots).

    Args:
        y_true: int tensor ``(..., P)`` of class indices, each at most once per row; negative
            indices are padding (and index 0 too with ``mask_zero=True``, which also removes class
            0 from the loss, the bert4keras convention).
        y_pred: float tensor ``(..., C)`` of logits; ``-inf`` cells count as neither set.
        mask_zero: treat class 0 as padding.
    Returns:
        Float tensor ``(...)``: the loss of every row.

        >>> sparse_multilabel_categorical_crossentropy(np.array([[0, -1]]), np.array([[2., -1.,
        .5]]))
    """
    y_pred = _logits(y_pred)
    y_true = _int_targets(y_true)
    if len(y_true.shape) != len(y_pred.shape) or \
            any(a is not None and b is not None and a != b
                for a, b in zip(y_true.shape[:-1], y_pred.shape[:-1])):
        raise ValueError(f'y_true (..., P) and y_pred (..., C) must agree on every axis but the '
                         f'last; got {tuple(y_true.shape)} and {tuple(y_pred.shape)}')
    num_classes = y_pred.shape[-1]
    valid = y_true >= 0
    if mask_zero:
        valid = ops.logical_and(valid, y_true != 0)
        y_pred = ops.concatenate([_neg_inf(y_pred[..., :1]), y_pred[..., 1:]], axis=-1)
    scores = ops.take_along_axis(y_pred, ops.where(valid, y_true, 0), axis=-1)
    valid = ops.logical_and(valid, scores > -np.inf)  # as in the dense loss: masked cells ignored
    positive_loss = _logsumexp_with_zero(ops.where(valid, -scores, _neg_inf(scores)))
    # Negatives: the logits with every listed positive overwritten by -inf.
    negatives = _scatter_into_rows(ops.reshape(y_pred, (-1, num_classes)),
                                   ops.reshape(y_true, (-1, y_true.shape[-1])),
                                   ops.reshape(valid, (-1, y_true.shape[-1])), -np.inf)
    negative_loss = ops.reshape(_logsumexp_with_zero(negatives), ops.shape(y_pred)[:-1])
    return positive_loss + negative_loss


def _scatter_into_rows(rows, columns, valid, value):
    """``rows`` (R, C) with ``value`` written at ``[r, columns[r, k]]`` wherever ``valid[r, k]``.

    ``columns`` / ``valid``: (R, K). Invalid slots write into a spare last column, dropped after,
    so the scatter has a static shape (no boolean masking) on every backend."""
    num_columns, slots = rows.shape[-1], columns.shape[-1]
    padded = ops.pad(rows, [[0, 0], [0, 1]])
    row_of_slot = ops.repeat(ops.arange(ops.shape(rows)[0], dtype='int32'), slots)
    column = ops.reshape(ops.where(valid, columns, num_columns), (-1,))
    updates = ops.full(ops.shape(column), value, dtype=rows.dtype)
    return ops.scatter_update(padded, ops.stack([row_of_slot, column], axis=1),
                              updates)[:, :num_columns]


def _flatten_cells(y):
    """(batch, heads, n, n) -> (batch, heads, n * n)."""
    shape = ops.shape(y)
    return ops.reshape(y, (shape[0], shape[1], shape[2] * shape[3]))


def _global_pointer_scores(y_pred):
    """Validated GlobalPointer scores (batch, heads, n, n), at least float32."""
    y_pred = _logits(y_pred)
    if len(y_pred.shape) != 4:
        raise ValueError(f'GlobalPointer scores must be (batch, heads, n, n); got '
                         f'{tuple(y_pred.shape)}')
    return y_pred


@_register
def global_pointer_crossentropy(y_true, y_pred):
    """MCCE over all cells of each head of a GlobalPointer output (dense targets).

    Args:
        y_true: tensor ``(batch, heads, n, n)``, 1 where ``[b, t, i, j]`` is an entity of type
            ``t`` from token ``i`` to ``j`` inclusive (``crf_lr.decoding.spans.dense_targets``).
        y_pred: the layer's scores ``(batch, heads, n, n)``, ``-inf`` in masked cells.
    Returns:
        Float tensor ``(batch,)``: the per-type losses summed over heads.

        >>> model.compile(optimizer='adam', loss=global_pointer_crossentropy,
        ...               metrics=[global_pointer_f1])
    """
    y_pred = _flatten_cells(_global_pointer_scores(y_pred))
    return ops.sum(multilabel_categorical_crossentropy(_flatten_cells(y_true), y_pred), axis=1)


def _sparse_cell_indices(y_true, n):
    """(batch, heads, E, 2) start/end pairs -> (batch, heads, E) flat cell indices, -1 = padding."""
    y_true = _int_targets(y_true)
    if len(y_true.shape) != 4 or y_true.shape[-1] != 2:
        raise ValueError(f'sparse GlobalPointer targets must be (batch, heads, max_entities, 2) '
                         f'start/end pairs; got shape {tuple(y_true.shape)}')
    start, end = y_true[..., 0], y_true[..., 1]
    valid = ops.logical_and(start >= 0, end >= 0)
    values = _concrete(ops.where(valid, ops.maximum(start, end), 0))
    if values is not None and values.size and values.max() >= n:
        raise ValueError(f'sparse GlobalPointer targets: a start/end index ({values.max()}) is '
                         f'>= the sequence length n = {n}')
    return ops.where(valid, start * n + end, -1)


@_register
def sparse_global_pointer_crossentropy(y_true, y_pred):
    """MCCE over all cells of each head of a GlobalPointer output, targets as index pairs.

    Args:
        y_true: int tensor ``(batch, heads, max_entities, 2)``: ``[b, t, e] = (i, j)``, the entity
            of type ``t`` from token ``i`` to ``j`` inclusive; padding slots ``(-1, -1)``
            (``crf_lr.decoding.spans.sparse_targets`` builds this).
        y_pred: the layer's scores ``(batch, heads, n, n)``.
    Returns:
        Float tensor ``(batch,)``: the per-type losses summed over heads.

        >>> model.compile(optimizer='adam', loss=sparse_global_pointer_crossentropy,
        ...               metrics=[sparse_global_pointer_f1])
    """
    y_pred = _global_pointer_scores(y_pred)
    indices = _sparse_cell_indices(y_true, y_pred.shape[2])
    return ops.sum(sparse_multilabel_categorical_crossentropy(indices, _flatten_cells(y_pred)),
                   axis=1)


@_register
def global_pointer_f1(y_true, y_pred):
    """Cell-level (= span-level) F1 of a batch, for display during training.

    A cell is predicted when its score is > 0; ``2 TP / (|true| + |predicted|)`` over the batch,
    1.0 when both are empty. Args: ``(batch, heads, n, n)`` 0/1 targets and scores. Float32 scalar.

        >>> model.compile(loss=global_pointer_crossentropy, optimizer='adam',
        ...               metrics=[global_pointer_f1])
    """
    return dice_f1(ops.cast(y_true, 'float32'), ops.cast(_logits(y_pred) > 0, 'float32'), ops)


@_register
def sparse_global_pointer_f1(y_true, y_pred):
    """``global_pointer_f1`` of index-pair targets ``(batch, heads, max_entities, 2)``, the
    targets of ``sparse_global_pointer_crossentropy``, densified here. Float32 scalar.

        >>> model.compile(loss=sparse_global_pointer_crossentropy, optimizer='adam',
        ...               metrics=[sparse_global_pointer_f1])
    """
    y_pred = _global_pointer_scores(y_pred)
    cells = _sparse_cell_indices(y_true, y_pred.shape[2])                 # (batch, heads, E)
    y_pred = _flatten_cells(y_pred)
    slots = cells.shape[-1]
    dense = _scatter_into_rows(ops.reshape(ops.zeros_like(y_pred), (-1, y_pred.shape[-1])),
                               ops.reshape(cells, (-1, slots)),
                               ops.reshape(cells >= 0, (-1, slots)), 1.0)
    return global_pointer_f1(ops.reshape(dense, ops.shape(y_pred)), y_pred)
