"""Posterior probabilities of a linear-chain CRF in NumPy: label marginals, the probability of an
entity span, and of a whole path.

The CRF scores paths as in ``crf_lr.decoding.viterbi`` (disallowed moves score
``DISALLOWED_SCORE``), so ``p(y) = exp(s(y) - log Z)``. :class:`Posteriors` runs the
forward-backward algorithm once, in log space and float64, and answers every question from its
messages:

- ``log_alpha[b, t, j]``: log-sum of the scores of all prefixes ``y_0..y_t`` with ``y_t = j``;
- ``log_beta[b, t, j]``: log-sum of the scores of all suffixes after ``t`` given ``y_t = j``
  (the end score included);
- ``marginals()``: ``p(y_t = j) = exp(log_alpha + log_beta - log Z)``, zero on padding rows;
- ``span_probability``: the probability that units ``begin..stop-1`` carry exactly one
  :class:`SpanEvent`'s labels with an allowed label (or the sequence's edge) on either side:
  a forward message into the span, a forward pass through it, a backward message out of it.
  A unit is one position by default; given ``unit_starts`` it is a run of positions (a word's
  WordPieces) whose label is read off its first and last positions' labels (``reading``, see
  :func:`unit_reading`), the positions between them free: the probability of what the heads
  read, not of one labelling of every piece.

:func:`span_events` turns a tagging scheme's reading of a span into such events, asking only
the scheme's ``encode`` and ``decode``, so every scheme of ``crf_lr.tagging`` works alike
(BIO's ``B-T I-T ... I-T`` then anything but ``I-T``; BIOES/BMES's ``B-T ... E-T`` or ``S-T``).

    >>> posteriors = Posteriors(emissions, trans, lengths=[5, 3])      # (batch, n, L) scores
    >>> posteriors.marginals().shape                                   # (2, n, L)
    >>> events = span_events(get_scheme('BIO'), labels, 'PER', 2)
    >>> posteriors.span_probability(0, 1, 3, events)                   # p(tokens 1-2 are a PER)
    >>> word = span_events(get_scheme('BIO'), labels, 'PER', 1)       # words of 1, 2, 2 pieces:
    >>> posteriors.span_probability(0, 1, 2, word, unit_starts=[0, 1, 3, 5],
    ...                             reading=unit_reading(get_scheme('BIO'), labels))
"""
import dataclasses
import functools

import numpy as np

from crf_lr.decoding.viterbi import DISALLOWED_SCORE, checked_chain


class Posteriors:
    """Forward-backward messages of a batch of sequences under a linear-chain CRF.

    Args:
        emissions: float array (batch, n, L) of label scores (``-inf`` is read as -1e4).
        transitions, lengths, mask, start, end, allowed_transitions, allowed_starts,
            allowed_ends: as in ``crf_lr.decoding.viterbi.viterbi_decode``.
        temperature: positive float; every score is divided by it (1: the CRF as trained).

    Attributes:
        log_alpha, log_beta: float64 (batch, n, L) (rows past a sequence's length: unused).
        log_z: float64 (batch,), 0 for an empty sequence. lengths: int64 (batch,).
        emissions, transitions, start, end: the float64 scores used (constraints applied).

        >>> p = Posteriors(model.predict(x), crf.trans, mask=x > 0)
        >>> p.path_probability(0, best_path), p.marginals()[0, 3]       # float, (L,)
    """

    def __init__(self, emissions, transitions, lengths=None, mask=None, start=None, end=None,
                 allowed_transitions=None, allowed_starts=None, allowed_ends=None,
                 temperature=1.0):
        if not 0 < temperature < np.inf:
            raise ValueError(f'temperature must be a positive finite number, got {temperature!r}')
        emissions, trans, start, end, self.lengths = checked_chain(
            emissions, transitions, lengths, mask, start, end, allowed_transitions,
            allowed_starts, allowed_ends)
        batch, n, _ = emissions.shape
        self.emissions = np.maximum(emissions, DISALLOWED_SCORE) / temperature
        self.transitions, self.start, self.end = trans / temperature, start / temperature, \
            end / temperature
        allowed = trans > DISALLOWED_SCORE / 2                      # the allowed transitions
        self._forward = _LogProduct(self.transitions, allowed)
        self._backward = _LogProduct(self.transitions.T, allowed.T)
        for exact in (False, True):
            self.log_alpha, self.log_beta = self._messages(exact)
            last = np.maximum(self.lengths - 1, 0)
            log_z = (_logsumexp(self.log_alpha[np.arange(batch), last] + self.end, axis=1) if n
                     else np.zeros(batch))
            self.log_z = np.where(self.lengths > 0, log_z, 0.0)
            if np.isfinite(self.log_z).all():       # else a sequence has no allowed path: the
                break                               # disallowed moves' -1e4 scores decide

    def _messages(self, exact=False):
        """``(log_alpha, log_beta)``; ``exact``: with the disallowed moves' scores (see
        :class:`_LogProduct`)."""
        emissions = self.emissions
        batch, n, num_labels = emissions.shape
        log_alpha = np.zeros((batch, n, num_labels))
        log_beta = np.zeros((batch, n, num_labels))
        if n == 0:
            return log_alpha, log_beta
        log_alpha[:, 0] = self.start + emissions[:, 0]
        for t in range(1, n):
            moved = self._forward(log_alpha[:, t - 1], exact) + emissions[:, t]
            log_alpha[:, t] = np.where((t < self.lengths)[:, None], moved, log_alpha[:, t - 1])
        log_beta[:, n - 1] = self.end
        for t in range(n - 2, -1, -1):
            # beta_t(i) = logsumexp_j trans[i, j] + emissions[t + 1, j] + beta_{t+1}(j)
            moved = self._backward(emissions[:, t + 1] + log_beta[:, t + 1], exact)
            log_beta[:, t] = np.where((t + 1 < self.lengths)[:, None], moved, self.end)
        return log_alpha, log_beta

    def marginals(self):
        """``p(y_t = j)``: float64 (batch, n, L); each real row sums to 1, padding rows are 0.

            >>> Posteriors(emissions, trans, lengths=[2]).marginals()[0].sum(axis=1)  # [1., 1.]
        """
        log_p = self.log_alpha + self.log_beta - self.log_z[:, None, None]
        live = np.arange(self.emissions.shape[1]) < self.lengths[:, None]
        return np.where(live[..., None], np.exp(np.minimum(log_p, 0)), 0.0)

    def unit_marginals(self, unit_starts=None, reading=None):
        """``p(unit u reads label j)`` of every sequence: a list (batch,) of float64 (units, L).

        A unit of one position takes its position's marginals, and so does every unit when
        ``reading`` reads the first position alone (BIO); a longer unit read off its first and
        last positions (BIOES) is summed over both with :meth:`span_probabilities`' forward
        pass. Arguments as in :meth:`span_probabilities`.

            >>> Posteriors(scores, trans, lengths=[3]).unit_marginals(        # units of 1, 2
            ...     [[0, 1, 3]], unit_reading(get_scheme('BIOES'), labels))[0].shape  # (2, L)
        """
        table = self._unit_table(unit_starts)
        starts, units, _ = table
        marginals = self.marginals()
        result = [marginals[row, starts[row, :count]] for row, count in enumerate(units)]
        num_labels = self.emissions.shape[2]
        reading = _checked_reading(reading, num_labels)
        if (reading == np.arange(num_labels)[:, None]).all():        # the first position's
            return result
        long = [(row, unit) for row, count in enumerate(units)
                for unit in np.nonzero(np.diff(starts[row, :count + 1]) > 1)[0]]
        if long:
            anything = np.ones(num_labels, dtype=bool)
            each_label = [[SpanEvent((label,), anything, anything, True, True)]
                          for label in range(num_labels)]
            rows, begins = (np.repeat(column, num_labels) for column in zip(*long))
            found = self._span_probabilities(rows, begins, begins + 1, each_label * len(long),
                                             table, reading).reshape(len(long), num_labels)
            for (row, unit), probabilities in zip(long, found):
                result[row][unit] = probabilities
        return result

    def path_log_score(self, row, path):
        """Score ``s(path)`` of the label ids ``path`` (length ``lengths[row]``) of row ``row``."""
        path = np.asarray(path, dtype=np.intp)
        if len(path) != self.lengths[row]:
            raise ValueError(f'path of length {len(path)} for a sequence of length '
                             f'{self.lengths[row]}')
        if not len(path):
            return 0.0
        return float(self.start[path[0]] + self.emissions[row, np.arange(len(path)), path].sum()
                     + self.transitions[path[:-1], path[1:]].sum() + self.end[path[-1]])

    def path_log_probability(self, row, path):
        """``s(path) - log Z`` of sequence ``row``, the natural log of its probability (at most
        0; 0 for an empty sequence): finite where the probability underflows."""
        return min(self.path_log_score(row, path) - float(self.log_z[row]), 0.0)

    def path_probability(self, row, path):
        """``exp(s(path) - log Z)`` of sequence ``row`` (1 for an empty sequence)."""
        return float(np.exp(self.path_log_probability(row, path)))

    def span_probability(self, row, begin, stop, events, unit_starts=None, reading=None):
        """Probability that units ``begin..stop-1`` of sequence ``row`` hold one of ``events``.

        Args:
            row: int; begin, stop: the span of units, ``0 <= begin < stop <= units``.
            events: list of :class:`SpanEvent` of length ``stop - begin`` (disjoint: their label
                sequences differ), e.g. from :func:`span_events`.
            unit_starts: ints (units + 1,): where each unit's positions start, from 0 to
                ``lengths[row]`` (default: one position per unit).
            reading: int array (L, L): the label read for a unit whose first position holds
                label ``a`` and last one label ``b`` (default: ``a``), e.g. :func:`unit_reading`.
        Returns:
            float in [0, 1].
        """
        starts = None
        if unit_starts is not None:
            starts = [None] * len(self.lengths)
            starts[row] = unit_starts
        return float(self.span_probabilities([row], [begin], [stop], [events], starts,
                                             reading)[0])

    def span_probabilities(self, rows, begins, stops, events, unit_starts=None, reading=None):
        """:meth:`span_probability` of many spans at once (vectorised over spans and events).

        Args:
            rows, begins, stops: ints (S,); events: list (S,) of lists of :class:`SpanEvent`;
            unit_starts: None or a list (batch,) of each sequence's unit starts (None: one
                position per unit); reading: as in :meth:`span_probability`.
        Returns:
            float64 array (S,).
        """
        rows, begins, stops = (np.asarray(x, dtype=np.intp).reshape(-1)
                               for x in (rows, begins, stops))
        return self._span_probabilities(rows, begins, stops, events,
                                        self._unit_table(unit_starts),
                                        _checked_reading(reading, self.emissions.shape[2]))

    def _span_probabilities(self, rows, begins, stops, events, table, reading):
        """:meth:`span_probabilities` with the unit table of :meth:`_unit_table` and a checked
        reading."""
        starts, units, several = table
        bad = ~((0 <= begins) & (begins < stops) & (stops <= units[rows]))
        if bad.any():
            k = int(np.nonzero(bad)[0][0])
            raise ValueError(f'span ({begins[k]}, {stops[k]}) outside the sequence of length '
                             f'{units[rows[k]]}')
        # spans whose units and neighbours are one position each take the closed form
        low, high = np.maximum(begins - 1, 0), np.minimum(stops, units[rows] - 1) + 1
        plain = several[rows, high] == several[rows, low]
        num_labels = self.emissions.shape[2]
        if any(len(event.labels) != stop - begin for found, begin, stop in
               zip(events, begins, stops) for event in found):
            raise ValueError('an event has a different number of labels than its span')
        flat = [(k, event) for k, found in enumerate(events) for event in found]
        result = np.full(len(rows), -np.inf)
        closed_form = [(k, event) for k, event in flat if plain[k]]
        if closed_form:
            owner = np.array([k for k, _ in closed_form])
            np.logaddexp.at(result, owner, self._event_log_scores(
                rows[owner], starts[rows[owner], begins[owner]],
                starts[rows[owner], stops[owner]], [event for _, event in closed_form]))
        passes = [(k, event) for k, event in flat if not plain[k]]
        for chunk in range(0, len(passes), 512):            # bounded memory: (E, size, L, L)
            part = passes[chunk:chunk + 512]
            owner = np.array([k for k, _ in part])
            windows = [_event_window(event, begins[k], stops[k], starts[rows[k]], units[rows[k]],
                                     num_labels) for k, event in part]
            np.logaddexp.at(result, owner, self._window_log_scores(rows[owner], windows, reading))
        return np.exp(np.minimum(result - self.log_z[rows], 0.0))

    def _unit_table(self, unit_starts):
        """Each sequence's unit starts padded into one array (batch, units + 1), its number of
        units (batch,), and the running count of units of several positions (batch, units + 1);
        ValueError unless each row's starts cut it into units of one or more positions."""
        if unit_starts is not None and len(unit_starts) != len(self.lengths):
            raise ValueError(f'{len(unit_starts)} unit starts for {len(self.lengths)} sequences')
        table = []
        for row, length in enumerate(self.lengths):
            found = None if unit_starts is None else unit_starts[row]
            starts = np.arange(length + 1) if found is None else np.asarray(found, np.intp)
            if (starts.ndim != 1 or not len(starts) or starts[0] != 0 or starts[-1] != length
                    or (np.diff(starts) < 1).any()):
                raise ValueError(f'unit starts {starts.tolist()} do not cut the sequence of '
                                 f'length {length} into units of one or more positions')
            table.append(starts)
        width = max((len(starts) for starts in table), default=1)
        starts = np.array([np.pad(t, (0, width - len(t)), mode='edge') for t in table],
                          dtype=np.intp).reshape(len(table), width)
        several = np.cumsum(np.diff(starts, axis=1, prepend=0) > 1, axis=1)
        return starts, np.array([len(t) - 1 for t in table], dtype=np.intp), several

    def _event_log_scores(self, rows, begins, stops, events):
        """log-sum of the scores of all paths holding each event at positions
        ``begins..stops-1``, one unit a position: (E,), in closed form (vectorised)."""
        sizes = stops - begins
        labels = np.concatenate([event.labels for event in events]).astype(np.intp)
        owner = np.repeat(np.arange(len(events)), sizes)
        firsts = np.cumsum(sizes) - sizes
        positions = np.repeat(begins, sizes) + np.arange(len(labels)) - np.repeat(firsts, sizes)
        inner = np.bincount(owner, self.emissions[np.repeat(rows, sizes), positions, labels],
                            minlength=len(events))
        inside = owner[1:] == owner[:-1]                    # consecutive labels of one event
        inner += np.bincount(owner[1:][inside],
                             self.transitions[labels[:-1][inside], labels[1:][inside]],
                             minlength=len(events))
        first, last = labels[firsts], labels[firsts + sizes - 1]
        before, after = (np.stack([getattr(e, name) for e in events]) for name in
                         ('before', 'after'))
        into = self.log_alpha[rows, np.maximum(begins - 1, 0)] + self.transitions[:, first].T
        left = np.where(begins == 0,
                        np.where([e.at_start for e in events], self.start[first], -np.inf),
                        _logsumexp(np.where(before, into, -np.inf), axis=-1))
        following = np.minimum(stops, self.emissions.shape[1] - 1)
        out = (self.transitions[last] + self.emissions[rows, following]
               + self.log_beta[rows, following])
        right = np.where(stops == self.lengths[rows],
                         np.where([e.at_end for e in events], self.end[last], -np.inf),
                         _logsumexp(np.where(after, out, -np.inf), axis=-1))
        return left + inner + right

    def _window_log_scores(self, rows, windows, reading):
        """log-sum of the scores of the paths through each :class:`_EventWindow` it allows: (E,).

        A forward pass over the window's positions whose state is (the label of the current
        unit's first position, the current label); at a unit's last position the states whose
        reading the window does not allow for that unit are dropped."""
        size = max(window.size for window in windows)
        count = len(windows)
        offsets = np.arange(size)
        sizes = np.array([window.size for window in windows])
        firsts = np.array([window.first for window in windows])
        active = offsets < sizes[:, None]
        positions = np.minimum(firsts[:, None] + offsets, self.emissions.shape[1] - 1)
        emissions = self.emissions[rows[:, None], positions]                  # (E, size, L)
        opens = np.zeros((count, size), dtype=bool)
        allowed = np.ones((count, size) + reading.shape, dtype=bool)         # (E, size, L, L)
        for e, window in enumerate(windows):
            opens[e, window.opens] = True
            allowed[e, window.closes] = window.masks[:, reading]
        diagonal = np.eye(reading.shape[0], dtype=bool)
        incoming = np.where((firsts == 0)[:, None], self.start,
                            self._forward(self.log_alpha[rows, np.maximum(firsts - 1, 0)]))
        state = np.where(diagonal, (incoming + emissions[:, 0])[:, :, None], -np.inf)
        state = np.where(allowed[:, 0], state, -np.inf)
        for t in range(1, size):
            opened = self._forward(_logsumexp(state, axis=1)) + emissions[:, t]
            moved = self._forward(state) + emissions[:, t, None, :]
            step = np.where(opens[:, t, None, None],
                            np.where(diagonal, opened[:, :, None], -np.inf), moved)
            step = np.where(allowed[:, t], step, -np.inf)
            state = np.where(active[:, t, None, None], step, state)
        last = firsts + sizes - 1
        total = _logsumexp(_logsumexp(state, axis=1) + self.log_beta[rows, last], axis=1)
        return np.where([window.possible for window in windows], total, -np.inf)


@dataclasses.dataclass
class _EventWindow:
    """The positions an event constrains: ``first`` and ``size`` (consecutive positions), the
    offsets in it where a unit opens and closes, each closing unit's allowed labels (rows of
    ``masks``), and whether the event is possible at all (a sequence edge it may not touch)."""
    first: int
    size: int
    opens: list
    closes: list
    masks: np.ndarray
    possible: bool


def _event_window(event, begin, stop, starts, units, num_labels):
    """The :class:`_EventWindow` of ``event`` over units ``begin..stop-1`` (``starts``: the row's
    unit starts, ``units`` of them): its units, and the neighbouring units whose labels it
    restricts."""
    constrained = [(begin + i, np.arange(num_labels) == label)
                   for i, label in enumerate(event.labels)]
    if begin > 0 and not event.before.all():
        constrained.insert(0, (begin - 1, event.before))
    if stop < units and not event.after.all():
        constrained.append((stop, event.after))
    first = starts[constrained[0][0]]
    return _EventWindow(
        first, starts[constrained[-1][0] + 1] - first,
        [starts[unit] - first for unit, _ in constrained],
        [starts[unit + 1] - 1 - first for unit, _ in constrained],
        np.array([mask for _, mask in constrained]),
        (begin > 0 or event.at_start) and (stop < units or event.at_end))


def _checked_reading(reading, num_labels):
    """``reading`` as an int array (L, L) (None: the first position's label), or ValueError
    unless a unit of one position reads its own label (``reading[j, j] == j``)."""
    if reading is None:
        return np.repeat(np.arange(num_labels)[:, None], num_labels, axis=1)
    reading = np.asarray(reading)
    if reading.shape != (num_labels, num_labels) or (
            np.diagonal(reading) != np.arange(num_labels)).any():
        raise ValueError(f'reading must be an ({num_labels}, {num_labels}) table whose diagonal '
                         f'reads each label as itself, got {reading.tolist()}')
    return reading


class _LogProduct:
    """``x -> log(exp(x) @ exp(matrix))``: the log-sum over i of ``x[..., i] + matrix[i, j]``.

    One matrix product of shifted exponentials over the allowed moves (``allowed``, bool
    (L, L)); a disallowed move, scored -1e4, adds nothing. An entry whose allowed terms all
    fall below 1e-300 of the shift (scores spread over more than ~690 nats, as at a low
    temperature) is summed exactly instead. ``exact=True``: every entry by log-sum-exp, with
    every move's score.
    """

    def __init__(self, matrix, allowed):
        self.matrix = matrix
        self.allowed = np.where(allowed, matrix, -np.inf)
        top = self.allowed.max(axis=0)
        self.top = np.where(np.isfinite(top), top, 0.0)
        self.shifted = np.exp(self.allowed - self.top)
        self.reach = allowed.astype(np.float64)

    def __call__(self, x, exact=False):
        if exact:
            return _logsumexp(x[..., :, None] + self.matrix, axis=-2)
        peak = x.max(axis=-1, keepdims=True)
        peak = np.where(np.isfinite(peak), peak, 0.0)
        with np.errstate(divide='ignore', under='ignore'):
            product = np.exp(x - peak) @ self.shifted
            result = np.log(product) + peak + self.top
        small = product < 1e-300
        if small.any():
            lost = small & (np.isfinite(x).astype(np.float64) @ self.reach > 0)
            where = np.nonzero(lost)
            result[where] = _logsumexp(x[where[:-1]] + self.allowed[:, where[-1]].T, axis=-1)
        return result


def _logsumexp(x, axis):
    """``log(sum(exp(x)))`` over ``axis``, stable for any scores; -inf where all are -inf."""
    peak = x.max(axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide='ignore'):
        return np.squeeze(peak, axis) + np.log(np.exp(x - peak).sum(axis=axis))


@dataclasses.dataclass(frozen=True)
class SpanEvent:
    """Exact labels over a span and what may surround it.

    Attributes:
        labels: tuple of label ids, one per position of the span.
        before, after: bool arrays (L,): the labels allowed just before / just after the span.
        at_start, at_end: whether the span may open / close the sequence.
    """
    labels: tuple
    before: np.ndarray
    after: np.ndarray
    at_start: bool
    at_end: bool


def span_events(scheme, labels, kind, size):
    """The :class:`SpanEvent` list meaning "these ``size`` positions are exactly one ``kind``
    entity" under ``scheme``'s strict reading (``scheme.decode(tags, strict=True)``).

    The span's tags are the scheme's encoding of it alone and right after an entity of its type
    (they differ in IOB1 only); a neighbouring label is allowed when the scheme still reads the
    span with that label beside it.

    Args:
        scheme: a ``crf_lr.data.tagging.Scheme``; labels: its label list (L,); kind: entity type
            (``'w'`` for a word of SEG); size: int >= 1.
    Returns:
        list of :class:`SpanEvent` (labels missing from ``labels`` give no event); the answers
        are cached, so treat them as read-only.

        >>> [e.labels for e in span_events(get_scheme('BIO'), ['O', 'B-T', 'I-T'], 'T', 2)]
        [(1, 2)]
    """
    return _span_events(scheme, tuple(labels), kind, size)


@functools.lru_cache(maxsize=4096)
def _span_events(scheme, labels, kind, size):
    labels = list(labels)
    index = {label: i for i, label in enumerate(labels)}
    alone = scheme.encode([(0, size, kind)], size)
    after_one = scheme.encode([(0, 1, kind), (1, size + 1, kind)], size + 1)[1:]
    events = []
    for tags in (alone, after_one) if after_one != alone else (alone,):
        if not all(tag in index for tag in tags):
            continue

        def reads(window, offset):
            return (offset, offset + size, kind) in scheme.decode(window, strict=True)
        events.append(SpanEvent(
            tuple(index[tag] for tag in tags),
            np.array([reads([label] + tags, 1) for label in labels]),
            np.array([reads(tags + [label], 0) for label in labels]),
            reads(tags, 0), reads(tags, 0)))
    return events


def unit_reading(scheme, labels):
    """The label ``scheme`` reads for a unit of several pieces from its first and last pieces'
    labels (``Scheme.collect``, as the tag heads read words): an int array ``(L, L)``, row: the
    first piece's label, column: the last one's. A one-piece unit reads its own label.

        >>> reading = unit_reading(get_scheme('BIOES'), labels)
        >>> labels[reading[labels.index('B-T'), labels.index('E-T')]]
        'S-T'
    """
    return _unit_reading(scheme, tuple(labels)).copy()


@functools.lru_cache(maxsize=256)
def _unit_reading(scheme, labels):
    index = {label: i for i, label in enumerate(labels)}
    return np.array([[index[scheme.collect([0, 0], [first, last])[0]] for last in labels]
                     for first in labels])
