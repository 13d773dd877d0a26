"""Viterbi decoding of a linear-chain CRF: NumPy (vectorised over the batch) and in-graph TensorFlow.

Both decoders score a path ``y`` of a sequence of length ``l`` as

    start[y_0] + sum_t emissions[t, y_t] + sum_{t>=1} transitions[y_{t-1}, y_t] + end[y_{l-1}]

and return the best path. A disallowed transition, start or end (``allowed_* == False``) scores
``DISALLOWED_SCORE`` (-1e4) instead of its learned value, exactly as in training
(``crf_lr.crf``), so a decoded path is never illegal unless every path of that length is.

Padding never leaks: the NumPy decoder returns one array per sequence with its own length, the
TensorFlow decoder fills padding positions with -1. Only the first ``length`` positions of a
sequence are read (masks must be left-aligned, i.e. ``mask[b] = [1] * length + [0] * rest``).

    >>> paths = viterbi_decode(emissions, crf.trans, lengths=[5, 3])   # [array(5), array(3)]
    >>> tags = viterbi_decode_tf(emissions, crf.trans, mask=mask)       # (batch, n) int32, -1 pad
"""
import numpy as np

# Score of a disallowed transition / start / end, in training and decoding. Finite, so that no
# gradient or loss is ever NaN or inf, and so low that an allowed path always wins (emission and
# transition scores would have to differ by 10,000 nats for it to matter).
DISALLOWED_SCORE = -1e4


def _check_mask_array(allowed, shape, name):
    """A boolean constraint array of the given shape, or None."""
    if allowed is None:
        return None
    array = np.asarray(allowed)
    if array.dtype != bool:
        raise TypeError(f'{name} must be a boolean mask of shape {shape}, got dtype {array.dtype}; '
                        f'to allow a list of label ids use np.isin(np.arange(num_labels), ids)')
    if array.shape != shape:
        raise ValueError(f'{name} must have shape {shape} (num_labels = {shape[0]}), '
                         f'got {array.shape}')
    return array


def constrained_parameters(transitions, start=None, end=None, allowed_transitions=None,
                           allowed_starts=None, allowed_ends=None):
    """Transition, start and end scores (NumPy float64) with disallowed entries set to -1e4.

    Args:
        transitions: array (L, L), ``transitions[i, j]`` scores label i followed by label j.
        start, end: optional arrays (L,) of first-label / last-label scores (zeros if None).
        allowed_transitions: optional bool array (L, L); allowed_starts / allowed_ends: (L,).
    Returns:
        ``(transitions, start, end)``: float64 arrays (L, L), (L,), (L,).

        >>> T, s, e = constrained_parameters(crf.trans, allowed_transitions=allowed)
        >>> T[~allowed].max()          # -10000.0
    """
    transitions = np.asarray(transitions, dtype=np.float64)
    if transitions.ndim != 2 or transitions.shape[0] != transitions.shape[1]:
        raise ValueError(f'transitions must be a square (num_labels, num_labels) matrix, '
                         f'got shape {transitions.shape}')
    num_labels = transitions.shape[0]
    vectors = []
    for name, vector in (('start', start), ('end', end)):
        vector = np.zeros(num_labels) if vector is None else np.asarray(vector, dtype=np.float64)
        if vector.shape != (num_labels,):
            raise ValueError(f'{name} must have shape ({num_labels},), got {vector.shape}')
        vectors.append(vector)
    start, end = vectors
    for scores, allowed, name in ((transitions, allowed_transitions, 'allowed_transitions'),
                                  (start, allowed_starts, 'allowed_starts'),
                                  (end, allowed_ends, 'allowed_ends')):
        allowed = _check_mask_array(allowed, scores.shape, name)
        if allowed is not None:
            scores[~allowed] = DISALLOWED_SCORE     # the arrays above are fresh float64 copies
    return transitions, start, end


def _lengths_array(batch, n, lengths, mask):
    """int64 lengths (batch,) from ``lengths`` or a left-aligned ``mask`` (or all ``n``)."""
    if lengths is not None and mask is not None:
        raise ValueError('give lengths or mask, not both')
    if mask is not None:
        mask = np.asarray(mask).astype(bool)
        if mask.shape != (batch, n):
            raise ValueError(f'mask must have shape (batch, n) = {(batch, n)}, got {mask.shape}')
        lengths = mask.sum(axis=1)
        if not (mask == (np.arange(n) < lengths[:, None])).all():
            bad = int(np.nonzero((mask != (np.arange(n) < lengths[:, None])).any(axis=1))[0][0])
            raise ValueError(f'mask must be left-aligned (ones then zeros); row {bad} is '
                             f'{mask[bad].astype(int).tolist()}')
        return lengths
    if lengths is None:
        return np.full(batch, n, dtype=np.int64)
    lengths = np.asarray(lengths)
    if lengths.shape != (batch,) or not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(f'lengths must be integers of shape ({batch},), got {lengths.dtype} '
                         f'{lengths.shape}')
    if lengths.size and (lengths.min() < 0 or lengths.max() > n):
        raise ValueError(f'lengths must lie in [0, {n}], got {lengths.min()}..{lengths.max()}')
    return lengths.astype(np.int64)


def viterbi_decode(emissions, transitions, lengths=None, mask=None, start=None, end=None,
                   allowed_transitions=None, allowed_starts=None, allowed_ends=None):
    """Best label path of every sequence of a batch (NumPy; loops over time only).

    Args:
        emissions: float array (batch, n, L) of per-position label scores (e.g. ``model.predict``).
        transitions: float array (L, L); ``transitions[i, j]`` scores label i followed by j.
        lengths: optional int array (batch,) of sequence lengths in [0, n]; or
        mask: optional bool/0-1 array (batch, n), left-aligned. Neither: every position counts.
        start, end: optional float arrays (L,) of first-label / last-label scores.
        allowed_transitions: optional bool (L, L); allowed_starts, allowed_ends: optional bool (L,).
            Disallowed choices score -1e4 (``DISALLOWED_SCORE``), as in training.
    Returns:
        A list of ``batch`` int64 arrays; array ``b`` has shape (lengths[b],).

        >>> paths = viterbi_decode(model.predict(x), crf.trans, mask=x > 0)
        >>> paths[0]                               # array([0, 1, 2, 2, 0])
    """
    emissions = np.asarray(emissions, dtype=np.float64)
    if emissions.ndim != 3:
        raise ValueError(f'emissions must have shape (batch, n, num_labels), got {emissions.shape}')
    batch, n, num_labels = emissions.shape
    trans, start, end = constrained_parameters(transitions, start, end, allowed_transitions,
                                               allowed_starts, allowed_ends)
    if trans.shape[0] != num_labels:
        raise ValueError(f'emissions have {num_labels} labels but transitions are {trans.shape}')
    lengths = _lengths_array(batch, n, lengths, mask)
    if n == 0:
        return [np.zeros(0, dtype=np.int64) for _ in range(batch)]
    rows = np.arange(batch)
    labels = np.arange(num_labels)
    score = start + emissions[:, 0]                                         # (batch, L)
    backpointers = np.empty((n, batch, num_labels), dtype=np.int64)         # [t] -> label at t-1
    for t in range(1, n):
        candidates = score[:, :, None] + trans                              # (batch, from, to)
        best = candidates.argmax(axis=1)                                    # (batch, L)
        live = (t < lengths)[:, None]
        # Past its end a sequence keeps its scores and points each label at itself, so the
        # backtrace walks through the padding unchanged to the last real position.
        backpointers[t] = np.where(live, best, labels)
        score = np.where(live, np.take_along_axis(candidates, best[:, None], 1)[:, 0]
                         + emissions[:, t], score)
    state = (score + end).argmax(axis=1)
    path = np.empty((batch, n), dtype=np.int64)
    path[:, n - 1] = state
    for t in range(n - 1, 0, -1):
        state = backpointers[t, rows, state]
        path[:, t - 1] = state
    return [path[b, :lengths[b]] for b in range(batch)]
