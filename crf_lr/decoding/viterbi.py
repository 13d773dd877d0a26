"""Viterbi decoding of a linear-chain CRF: NumPy (vectorised over the batch) and in-graph TF.

Both decoders score a path ``y`` of a sequence of length ``l`` as

    start[y_0] + sum_t emissions[t, y_t] + sum_{t>=1} transitions[y_{t-1}, y_t] + end[y_{l-1}]

and return the best path. A disallowed transition, start or end (``allowed_* == False``) scores
``DISALLOWED_SCORE`` (-1e4) instead of its learned value, exactly as in training
(``crf_lr.model.crf``), so a decoded path is never illegal unless every path of that length is.

Padding never leaks: the NumPy decoder returns one array per sequence with its own length, the
TensorFlow decoder fills padding positions with -1. Only the first ``length`` positions of a
sequence are read (masks must be left-aligned, i.e. ``mask[b] = [1] * length + [0] * rest``).

Speed against bert4keras and TF Addons: docs/performance.md.

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
    transitions = np.array(transitions, dtype=np.float64)          # a copy: set below
    if transitions.ndim != 2 or transitions.shape[0] != transitions.shape[1]:
        raise ValueError(f'transitions must be a square (num_labels, num_labels) matrix, '
                         f'got shape {transitions.shape}')
    num_labels = transitions.shape[0]
    vectors = []
    for name, vector in (('start', start), ('end', end)):
        vector = np.zeros(num_labels) if vector is None else np.array(vector, dtype=np.float64)
        if vector.shape != (num_labels,):
            raise ValueError(f'{name} must have shape ({num_labels},), got {vector.shape}')
        vectors.append(vector)
    start, end = vectors
    for scores, allowed, name in ((transitions, allowed_transitions, 'allowed_transitions'),
                                  (start, allowed_starts, 'allowed_starts'),
                                  (end, allowed_ends, 'allowed_ends')):
        allowed = _check_mask_array(allowed, scores.shape, name)
        if allowed is not None:
            scores[~allowed] = DISALLOWED_SCORE     # on the copies: the caller's arrays stay
    return transitions, start, end


def checked_chain(emissions, transitions, lengths=None, mask=None, start=None, end=None,
                  allowed_transitions=None, allowed_starts=None, allowed_ends=None):
    """The inputs of a linear-chain computation, checked: ``(emissions, transitions, start,
    end, lengths)`` as float64 (batch, n, L), the constrained (L, L), (L,), (L,)
    (:func:`constrained_parameters`) and int64 (batch,); ValueError naming a shape that does not
    fit. Arguments as in :func:`viterbi_decode`.

        >>> emissions, trans, start, end, lengths = checked_chain(scores, crf.trans, mask=x > 0)
    """
    emissions = np.asarray(emissions, dtype=np.float64)
    if emissions.ndim != 3:
        raise ValueError(f'emissions must have shape (batch, n, num_labels), got {emissions.shape}')
    batch, n, num_labels = emissions.shape
    trans, start, end = constrained_parameters(transitions, start, end, allowed_transitions,
                                               allowed_starts, allowed_ends)
    if trans.shape[0] != num_labels:
        raise ValueError(f'emissions have {num_labels} labels but transitions are {trans.shape}')
    return emissions, trans, start, end, _lengths_array(batch, n, lengths, mask)


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
                   allowed_transitions=None, allowed_starts=None, allowed_ends=None, top_k=None):
    """Best label path of every sequence of a batch, or its ``top_k`` best (NumPy; loops over
    time only).

    Args:
        emissions: float array (batch, n, L) of per-position label scores (e.g. ``model.predict``).
        transitions: float array (L, L); ``transitions[i, j]`` scores label i followed by j.
        lengths: optional int array (batch,) of sequence lengths in [0, n]; or
        mask: optional bool/0-1 array (batch, n), left-aligned. Neither: every position counts.
        start, end: optional float arrays (L,) of first-label / last-label scores.
        allowed_transitions: optional bool (L, L); allowed_starts, allowed_ends: optional bool (L,).
            Disallowed choices score -1e4 (``DISALLOWED_SCORE``), as in training.
        top_k: optional int >= 1: return the ``top_k`` best paths of each sequence instead.
    Returns:
        A list of ``batch`` int64 arrays; array ``b`` has shape (lengths[b],). With ``top_k``: a
        list (per sequence) of up to ``top_k`` ``(path, probability)`` pairs, best first
        (``probability = exp(score - log Z)`` under the same constraints; fewer pairs when the
        sequence has fewer paths, one empty path of probability 1 for an empty sequence).

        >>> paths = viterbi_decode(model.predict(x), crf.trans, mask=x > 0)
        >>> paths[0]                               # array([0, 1, 2, 2, 0])
        >>> viterbi_decode(emissions, crf.trans, top_k=2)[0]   # [(array, 0.61), (array, 0.2)]
    """
    if top_k is not None:
        return _top_k_paths(emissions, transitions, lengths, mask, start, end,
                            allowed_transitions, allowed_starts, allowed_ends, top_k)
    emissions, trans, start, end, lengths = checked_chain(
        emissions, transitions, lengths, mask, start, end, allowed_transitions, allowed_starts,
        allowed_ends)
    batch, n, num_labels = emissions.shape
    if n == 0:
        return [np.zeros(0, dtype=np.int64) for _ in range(batch)]
    emissions = emissions.transpose(1, 0, 2).copy()                       # (n, batch, L)
    incoming = np.ascontiguousarray(trans.T)                                # [to, from]
    labels = np.arange(num_labels)
    score = start + emissions[0]                                            # (batch, L)
    backpointers = np.empty((n, batch, num_labels), dtype=np.intp)          # [t] -> label at t-1
    candidates = np.empty((batch, num_labels, num_labels))                  # (batch, to, from)
    row_starts = np.arange(batch * num_labels) * num_labels
    for t in range(1, n):
        np.add(score[:, None, :], incoming, out=candidates)
        # argmax over the last axis, then a flat gather: the fastest NumPy pair here (a max
        # reduction or take_along_axis over a 7-wide axis costs several times more)
        best = candidates.argmax(axis=2)
        moved = candidates.reshape(-1)[row_starts + best.reshape(-1)].reshape(batch, num_labels)
        moved += emissions[t]
        live = t < lengths
        if live.all():
            backpointers[t], score = best, moved
        else:
            # past its end a sequence keeps its scores and points each label at itself, so the
            # backtrace walks through the padding unchanged to the last real position
            backpointers[t] = np.where(live[:, None], best, labels)
            score = np.where(live[:, None], moved, score)
    state = (score + end).argmax(axis=1)
    rows = np.arange(batch)
    path = np.empty((n, batch), dtype=np.int64)
    path[n - 1] = state
    for t in range(n - 1, 0, -1):
        state = backpointers[t, rows, state]
        path[t - 1] = state
    path = path.T
    return [path[b, :lengths[b]] for b in range(batch)]


def decode_layer_output(emissions, transitions, lengths=None, mask=None, start=None, end=None):
    """``viterbi_decode`` of a CRF layer's output (``ConditionalRandomField.decode`` of either
    Keras): scores floored at ``DISALLOWED_SCORE`` (``-inf`` rules a label out) and, when neither
    ``lengths`` nor ``mask`` is given, rows all ``-inf`` read as padding.

        >>> paths = decode_layer_output(model.predict(x), *crf.effective_parameters('float64'))
    """
    emissions = np.asarray(emissions, dtype=np.float64)
    if lengths is None and mask is None:
        mask = (emissions > -np.inf).any(axis=-1)
    return viterbi_decode(np.maximum(emissions, DISALLOWED_SCORE), transitions, lengths=lengths,
                          mask=mask, start=start, end=end)


def _top_k_paths(emissions, transitions, lengths, mask, start, end, allowed_transitions,
                 allowed_starts, allowed_ends, top_k):
    """``viterbi_decode(..., top_k=k)``: list Viterbi, keeping the k best prefixes per label."""
    from crf_lr.decoding.posteriors import Posteriors
    if not isinstance(top_k, (int, np.integer)) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError(f'top_k must be an int >= 1, got {top_k!r}')
    posteriors = Posteriors(emissions, transitions, lengths, mask, start, end,
                            allowed_transitions, allowed_starts, allowed_ends)
    emissions, trans = posteriors.emissions, posteriors.transitions
    batch, n, num_labels = emissions.shape
    lengths, k = posteriors.lengths, int(top_k)
    results = [[(np.zeros(0, dtype=np.int64), 1.0)] for _ in range(batch)]
    if n == 0:
        return results
    # score[b, j, r]: r-th best score of a prefix ending in label j; pointer: (label, rank) before
    score = np.full((batch, num_labels, k), -np.inf)
    score[:, :, 0] = posteriors.start + emissions[:, 0]
    pointers = np.empty((n, batch, num_labels, k), dtype=np.intp)
    keep = np.arange(num_labels * k).reshape(num_labels, k)               # point at itself
    for t in range(1, n):
        candidates = (score[:, None, :, :] + trans.T[None, :, :, None]).reshape(
            batch, num_labels, num_labels * k)                              # (B, to, from * k)
        best = np.argsort(-candidates, axis=2, kind='stable')[:, :, :k]
        moved = np.take_along_axis(candidates, best, axis=2) + emissions[:, t, :, None]
        live = (t < lengths)[:, None, None]
        pointers[t] = np.where(live, best, keep)
        score = np.where(live, moved, score)
    final = (score + posteriors.end[None, :, None]).reshape(batch, num_labels * k)
    order = np.argsort(-final, axis=1, kind='stable')[:, :k]
    for b in range(batch):
        if lengths[b] == 0:
            continue
        found = []
        for flat in order[b]:
            if final[b, flat] == -np.inf:
                break
            path = np.empty(lengths[b], dtype=np.int64)
            for t in range(lengths[b] - 1, -1, -1):
                path[t] = flat // k
                flat = pointers[t, b].reshape(-1)[flat] if t else flat
            found.append((path, posteriors.path_probability(b, path)))
        results[b] = found
    return results


def viterbi_decode_tf(emissions, transitions, lengths=None, mask=None, start=None, end=None,
                      allowed_transitions=None, allowed_starts=None, allowed_ends=None,
                      jit_compile=True):
    """Best label paths in the TensorFlow graph (works in ``tf.function`` and SavedModels).

    Same scoring and constraints as ``viterbi_decode``, in float32; the time loop runs compiled
    with XLA unless ``jit_compile=False`` (plain graph ops: what a SavedModel for TensorFlow
    Serving needs, which runs no XLA by default).

    Args:
        emissions: float tensor (batch, n, L).
        transitions: float tensor (L, L) (e.g. ``crf.trans``); start, end: optional (L,).
        lengths: optional int tensor (batch,); or mask: optional bool/0-1 tensor (batch, n),
            left-aligned (its row sums are used as lengths). Neither: every position counts.
        allowed_transitions: optional bool (L, L); allowed_starts, allowed_ends: optional bool (L,).
    Returns:
        int32 tensor (batch, n): the best label at each position, -1 at padding.

        >>> tags = viterbi_decode_tf(model.output, crf.trans, mask=token_ids > 0)
        >>> serving = keras.Model(model.input, tags)
    """
    from crf_lr.compat import tf
    emissions = tf.convert_to_tensor(emissions)
    if emissions.shape.rank != 3:
        raise ValueError(f'emissions must have shape (batch, n, num_labels), got {emissions.shape}')
    emissions = tf.cast(emissions, tf.float32)
    num_labels = emissions.shape[-1]
    batch, n = tf.shape(emissions)[0], tf.shape(emissions)[1]
    parameters = []
    for name, value, allowed, shape in (
            ('transitions', transitions, allowed_transitions, (num_labels, num_labels)),
            ('start', start, allowed_starts, (num_labels,)),
            ('end', end, allowed_ends, (num_labels,))):
        value = tf.zeros(shape) if value is None else tf.cast(value, tf.float32)
        if not value.shape.is_compatible_with(shape):
            raise ValueError(f'{name} must have shape {shape}, got {value.shape}')
        allowed = _check_mask_array(allowed, shape, 'allowed_' + name.replace('start', 'starts')
                                    .replace('end', 'ends'))
        if allowed is not None:
            value = tf.where(allowed, value, DISALLOWED_SCORE)
        parameters.append(value)
    if lengths is not None and mask is not None:
        raise ValueError('give lengths or mask, not both')
    if mask is not None:
        lengths = tf.reduce_sum(tf.cast(tf.cast(mask, tf.bool), tf.int32), axis=1)
    elif lengths is None:
        lengths = tf.fill([batch], n)
    # one padding position at the end, beyond every length, so that n = 0 needs no special case
    padded = tf.pad(emissions, [[0, 0], [0, 1], [0, 0]])
    decode = _viterbi_graph if jit_compile else _viterbi_steps
    return decode(padded, tf.cast(lengths, tf.int32), *parameters)[:, :n]


def _viterbi_steps(emissions, lengths, transitions, start, end):
    """The Viterbi recursion and backtrace on tensors (see ``viterbi_decode_tf``)."""
    from crf_lr.compat import tf
    batch, n, num_labels = tf.shape(emissions)[0], tf.shape(emissions)[1], emissions.shape[-1]
    labels = tf.range(num_labels)[None]

    def forward(t, score, pointers):
        candidates = score[:, :, None] + transitions                        # (B, from, to)
        best = tf.argmax(candidates, axis=1, output_type=tf.int32)
        live = (t < lengths)[:, None]
        pointers = pointers.write(t, tf.where(live, best, labels))
        moved = tf.reduce_max(candidates, axis=1) + emissions[:, t]
        return t + 1, tf.where(live, moved, score), pointers

    pointers = tf.TensorArray(tf.int32, size=n, element_shape=[None, num_labels])
    pointers = pointers.write(0, tf.zeros([batch, num_labels], tf.int32))
    _, score, pointers = tf.while_loop(lambda t, *_: t < n, forward,
                                       [1, start + emissions[:, 0], pointers],
                                       maximum_iterations=n - 1)
    pointers = pointers.stack()                                             # (n, B, L)

    def backward(t, state, path):
        path = path.write(t, state)
        return t - 1, tf.gather(pointers[t], state, batch_dims=1), path

    state = tf.argmax(score + end, axis=1, output_type=tf.int32)
    _, _, path = tf.while_loop(lambda t, *_: t >= 0, backward,
                               [n - 1, state, tf.TensorArray(tf.int32, size=n)],
                               maximum_iterations=n)
    path = tf.transpose(path.stack())                                       # (B, n)
    return tf.where(tf.range(n)[None] < lengths[:, None], path, -1)


def _viterbi_graph(*args):
    """``_viterbi_steps`` compiled with XLA (created on first use, so NumPy users skip TF)."""
    global _VITERBI_COMPILED
    if _VITERBI_COMPILED is None:
        from crf_lr.compat import tf
        _VITERBI_COMPILED = tf.function(_viterbi_steps, jit_compile=True, autograph=False)
    return _VITERBI_COMPILED(*args)


_VITERBI_COMPILED = None
