"""Spans <-> GlobalPointer cells, in NumPy (no TensorFlow).

Cell ``[t, i, j]`` of a ``(heads, n, n)`` score array scores the mention of type ``t`` covering
tokens ``i..j`` inclusive; as a span it is ``(i - offset, j + 1 - offset, t)`` with the end
EXCLUSIVE, the project's convention. ``offset`` is the number of tokens before the text (1 for a
leading ``[CLS]``). Nested and overlapping spans are allowed everywhere.

    >>> spans = decode_spans(model.predict(x)[0], labels=['LOC', 'PER'], offset=1)
    >>> y = dense_targets([(0, 2, 'PER')], length=8, labels=['LOC', 'PER'], offset=1)
"""
import numpy as np

from crf_lr.model.numerics import require_finite


def _type_names(labels, heads=None):
    """``labels`` (int count or sequence of names) -> list of names or None, and the count."""
    if isinstance(labels, (int, np.integer)) and not isinstance(labels, bool):
        names, count = None, int(labels)
    else:
        names = list(labels)
        count = len(names)
        if len(set(names)) != count:
            raise ValueError(f'labels must be distinct; got {names}')
    if count < 1 or (heads is not None and count != heads):
        raise ValueError(f'labels must name {heads if heads else "at least one"} type(s); '
                         f'got {labels!r}')
    return names, count


def _check_count(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f'{name} must be an int >= 0, got {value!r}')


def decode_spans(scores, threshold=0.0, lengths=None, labels=None, offset=0):
    """Spans whose GlobalPointer score exceeds ``threshold``.

    Only cells with ``i <= j``, ``offset <= i``, ``j < length`` and a score ``> threshold`` are
    returned, so masked (``-inf``) cells never are. NaN or ``+inf`` scores raise ``ValueError``.

    Args:
        scores: float array ``(heads, n, n)`` for one sequence or ``(batch, heads, n, n)``.
        threshold: a cell is a mention when its score is strictly greater.
        lengths: number of real positions (including any ``[CLS]``/``[SEP]``): an int in
            ``[0, n]`` for one sequence, a sequence of ``batch`` of them for a batch; default ``n``.
        labels: optional sequence of ``heads`` type names returned in place of the type index.
        offset: positions before the text; cells starting before it are ignored.
    Returns:
        For one sequence a list of ``(start, end_exclusive, type)`` sorted by start, end, type
        index; for a batch a list of such lists.

        >>> decode_spans(np.array([[[1., -2.], [-np.inf, 0.5]]]))
        [(0, 1, 0), (1, 2, 0)]
    """
    scores = np.asarray(scores)
    if scores.ndim not in (3, 4) or scores.shape[-1] != scores.shape[-2]:
        raise ValueError(f'decode_spans: scores must be (heads, n, n) or (batch, heads, n, n); '
                         f'got shape {scores.shape}')
    if not np.issubdtype(scores.dtype, np.floating) and not np.issubdtype(scores.dtype, np.integer):
        raise ValueError(f'decode_spans: scores must be real numbers; got dtype {scores.dtype}')
    require_finite(scores, 'decode_spans', 'scores', minus_inf_allowed=True)
    if not isinstance(threshold, (int, float, np.integer, np.floating)) or np.isnan(threshold):
        raise ValueError(f'decode_spans: threshold must be a real number, got {threshold!r}')
    single = scores.ndim == 3
    batch = scores[None] if single else scores
    size, heads, n = batch.shape[:3]
    names = None if labels is None else _type_names(labels, heads)[0]
    if lengths is None:
        lengths = np.full(size, n)
    else:
        lengths = np.atleast_1d(np.asarray(lengths))
        if (lengths.shape != (size,) or not np.issubdtype(lengths.dtype, np.integer)
                or not ((0 <= lengths) & (lengths <= n)).all()):
            expected = 'an int' if single else f'{size} ints'
            got = np.array2string(lengths, threshold=8)
            raise ValueError(f'decode_spans: lengths must be {expected} in [0, {n}] for scores '
                             f'of shape {scores.shape}; got {got}')
    _check_count(offset, 'offset')
    position = np.arange(n)
    inside = position[None, :] < lengths[:, None]                          # (batch, n)
    valid = (inside[:, :, None] & inside[:, None, :]
             & (position[:, None] <= position[None, :]) & (position >= offset)[:, None])
    hit = (batch > threshold) & (batch > -np.inf) & valid[:, None]
    found = [[] for _ in range(size)]
    for b, t, i, j in zip(*np.nonzero(hit)):
        found[b].append((int(i) - offset, int(j) + 1 - offset, int(t)))
    found = [[(s, e, names[t]) if names else (s, e, t) for s, e, t in sorted(spans)]
             for spans in found]
    return found[0] if single else found


def _target_cells(spans, length, labels, offset):
    """Validated, de-duplicated ``(type, i, j)`` cells of ``spans``, as an int array (k, 3)."""
    names, heads = _type_names(labels)
    _check_count(offset, 'offset')
    _check_count(length, 'length')
    cells = set()
    for span in spans:
        if len(span) != 3:
            raise ValueError(f'spans must be (start, end_exclusive, label) triples; got {span!r}')
        start, end, label = span
        if names is None:
            if not isinstance(label, (int, np.integer)) or not 0 <= label < heads:
                raise ValueError(f'span {span!r}: label must be an int in [0, {heads})')
            t = int(label)
        elif label in names:
            t = names.index(label)
        else:
            raise ValueError(f'span {span!r}: unknown label {label!r}; expected one of {names}')
        if not all(isinstance(x, (int, np.integer)) for x in (start, end)):
            raise ValueError(f'span {span!r}: start and end must be ints')
        if not 0 <= start < end or end + offset > length:
            raise ValueError(f'span {span!r} is outside the sequence: need 0 <= start < end and '
                             f'end + offset <= length, with offset {offset} and length {length}')
        cells.add((t, int(start) + offset, int(end) - 1 + offset))
    return heads, np.array(sorted(cells), dtype=np.int64).reshape(-1, 3)


def dense_targets(spans, length, labels, offset=0, dtype='float32'):
    """Dense GlobalPointer targets of one sequence, for ``global_pointer_crossentropy``.

    Args:
        spans: iterable of ``(start, end_exclusive, label)`` in text-token positions.
        length: ``n``, the number of positions of the model input (including special tokens
            and padding).
        labels: number of types, or the sequence of type names (labels are then names).
        offset: positions before the text (1 for ``[CLS]``).
        dtype: NumPy dtype of the result.
    Returns:
        Array ``(heads, n, n)``: 1 at ``[type, start + offset, end - 1 + offset]``, 0 elsewhere.
    Raises:
        ValueError for an unknown label or a span outside ``[0, length - offset)``.

        >>> dense_targets([(0, 2, 'PER')], length=4, labels=['LOC', 'PER'], offset=1)[1, 1, 2]
        1.0
    """
    heads, cells = _target_cells(spans, length, labels, offset)
    targets = np.zeros((heads, length, length), dtype=dtype)
    targets[tuple(cells.T)] = 1
    return targets


def sparse_targets(spans, length, labels, offset=0, max_entities=None):
    """Sparse GlobalPointer targets of one sequence, for ``sparse_global_pointer_crossentropy``.

    Args as ``dense_targets``, plus ``max_entities``: slots per type (default: the largest number
    of distinct mentions of one type, at least 1).
    Returns:
        Int32 array ``(heads, max_entities, 2)`` of inclusive ``(start + offset, end - 1 + offset)``
        cell pairs, sorted, duplicates removed, padded with ``(-1, -1)``.
    Raises:
        ValueError as ``dense_targets``, or when a type has more than ``max_entities`` mentions.

        >>> sparse_targets([(0, 2, 'PER')], length=4, labels=['LOC', 'PER'], offset=1)[1]
        array([[1, 2]], dtype=int32)
    """
    heads, cells = _target_cells(spans, length, labels, offset)
    counts = np.bincount(cells[:, 0], minlength=heads)
    needed = max(int(counts.max()), 1)
    if max_entities is None:
        max_entities = needed
    elif needed > max_entities:
        raise ValueError(f'a type has {needed} mentions but max_entities is {max_entities}')
    targets = np.full((heads, max_entities, 2), -1, dtype=np.int32)
    for t in range(heads):
        pairs = cells[cells[:, 0] == t, 1:]
        targets[t, :len(pairs)] = pairs
    return targets


def pad_sparse_targets(targets, max_entities=None):
    """Stack per-sequence sparse targets ``(heads, e_k, 2)`` into ``(batch, heads, E, 2)``,
    padding with ``(-1, -1)``; ``E`` is ``max_entities`` or the largest ``e_k``.

        >>> batch = pad_sparse_targets([sparse_targets(s, n, labels, 1) for s in batch_spans])
        >>> model.train_on_batch(x, batch)
    """
    targets = [np.asarray(t) for t in targets]
    if not targets or any(t.ndim != 3 or t.shape[-1] != 2 or t.shape[0] != targets[0].shape[0]
                          for t in targets):
        raise ValueError(f'expected a non-empty list of (heads, entities, 2) arrays with one '
                         f'heads count; got shapes {[t.shape for t in targets]}')
    longest = max(t.shape[1] for t in targets)
    size = longest if max_entities is None else max_entities
    if longest > size:
        raise ValueError(f'a sequence has {longest} entity slots but max_entities is {size}')
    batch = np.full((len(targets), targets[0].shape[0], size, 2), -1, dtype=np.int32)
    for k, t in enumerate(targets):
        batch[k, :, :t.shape[1]] = t
    return batch


def non_overlapping(scored_spans):
    """Flat spans from scored, possibly overlapping ones: highest score first, a span kept only if
    it overlaps no span already kept (ties: the earlier, then the shorter span first).

    Args:
        scored_spans: list of ``((start, end, label), score)``, end exclusive.
    Returns:
        list of ``(start, end, label)`` sorted by start.

        >>> non_overlapping([((0, 3, 'ORG'), 2.0), ((1, 2, 'LOC'), 5.0), ((3, 4, 'PER'), 1.0)])
        [(1, 2, 'LOC'), (3, 4, 'PER')]
    """
    kept = []
    for span, _ in sorted(scored_spans, key=lambda item: (-item[1], item[0][0], item[0][1])):
        if all(span[1] <= other[0] or other[1] <= span[0] for other in kept):
            kept.append(span)
    return sorted(kept)


def outermost(spans):
    """The spans not inside an earlier, longer one: flat spans that tags can hold (of equal
    spans, the first label in sort order).

        >>> outermost([(0, 4, 'ORG'), (0, 2, 'LOC'), (5, 6, 'PER')])
        [(0, 4, 'ORG'), (5, 6, 'PER')]
    """
    kept, end = [], 0
    for span in sorted(spans, key=lambda s: (s[0], -s[1], s[2])):
        if span[0] >= end:
            kept.append(span)
            end = span[1]
    return kept
