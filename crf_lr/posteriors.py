"""Posterior probabilities of a linear-chain CRF in NumPy: label marginals, the probability of an
entity span, and of a whole path.

The CRF scores paths as in ``crf_lr.viterbi`` (disallowed moves score ``DISALLOWED_SCORE``), so
``p(y) = exp(s(y) - log Z)``. :class:`Posteriors` runs the forward-backward algorithm once, in
log space and float64, and answers every question from its messages:

- ``log_alpha[b, t, j]``: log-sum of the scores of all prefixes ``y_0..y_t`` with ``y_t = j``;
- ``log_beta[b, t, j]``: log-sum of the scores of all suffixes after ``t`` given ``y_t = j``
  (the end score included);
- ``marginals()``: ``p(y_t = j) = exp(log_alpha + log_beta - log Z)``, zero on padding rows;
- ``span_probability``: the probability that positions ``begin..stop-1`` carry exactly one
  :class:`SpanEvent`'s labels with an allowed label (or the sequence's edge) on either side:
  a forward message into the span, the span's own score, a backward message out of it.

:func:`span_events` turns a tagging scheme's reading of a span into such events, asking only
the scheme's ``encode`` and ``decode``, so every scheme of ``crf_lr.tagging`` works alike
(BIO's ``B-T I-T ... I-T`` then anything but ``I-T``; BIOES/BMES's ``B-T ... E-T`` or ``S-T``).

    >>> posteriors = Posteriors(emissions, trans, lengths=[5, 3])      # (batch, n, L) scores
    >>> posteriors.marginals().shape                                   # (2, n, L)
    >>> events = span_events(get_scheme('BIO'), labels, 'PER', 2)
    >>> posteriors.span_probability(0, 1, 3, events)                   # p(tokens 1-2 are a PER)
"""
import dataclasses
import functools

import numpy as np

from crf_lr.viterbi import DISALLOWED_SCORE, checked_chain


def _logsumexp(x, axis):
    """``log(sum(exp(x)))`` over ``axis``, stable for any finite scores."""
    peak = x.max(axis=axis, keepdims=True)
    return np.squeeze(peak, axis) + np.log(np.exp(x - peak).sum(axis=axis))


class Posteriors:
    """Forward-backward messages of a batch of sequences under a linear-chain CRF.

    Args:
        emissions: float array (batch, n, L) of label scores (``-inf`` is read as -1e4).
        transitions, lengths, mask, start, end, allowed_transitions, allowed_starts,
            allowed_ends: as in ``crf_lr.viterbi.viterbi_decode``.
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
        self.log_alpha, self.log_beta = self._messages()
        last = np.maximum(self.lengths - 1, 0)
        rows = np.arange(batch)
        if n:
            log_z = _logsumexp(self.log_alpha[rows, last] + self.end, axis=1)
        else:
            log_z = np.zeros(batch)
        self.log_z = np.where(self.lengths > 0, log_z, 0.0)

    def _messages(self):
        emissions, trans = self.emissions, self.transitions
        batch, n, num_labels = emissions.shape
        log_alpha = np.zeros((batch, n, num_labels))
        log_beta = np.zeros((batch, n, num_labels))
        if n == 0:
            return log_alpha, log_beta
        log_alpha[:, 0] = self.start + emissions[:, 0]
        for t in range(1, n):
            moved = _logsumexp(log_alpha[:, t - 1, :, None] + trans, axis=1) + emissions[:, t]
            log_alpha[:, t] = np.where((t < self.lengths)[:, None], moved, log_alpha[:, t - 1])
        log_beta[:, n - 1] = self.end
        for t in range(n - 2, -1, -1):
            # beta_t(i) = logsumexp_j trans[i, j] + emissions[t + 1, j] + beta_{t+1}(j)
            moved = _logsumexp(trans + (emissions[:, t + 1] + log_beta[:, t + 1])[:, None], axis=2)
            log_beta[:, t] = np.where((t + 1 < self.lengths)[:, None], moved, self.end)
        return log_alpha, log_beta

    def marginals(self):
        """``p(y_t = j)``: float64 (batch, n, L); each real row sums to 1, padding rows are 0.

            >>> Posteriors(emissions, trans, lengths=[2]).marginals()[0].sum(axis=1)  # [1., 1.]
        """
        log_p = self.log_alpha + self.log_beta - self.log_z[:, None, None]
        live = np.arange(self.emissions.shape[1]) < self.lengths[:, None]
        return np.where(live[..., None], np.exp(np.minimum(log_p, 0)), 0.0)

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

    def path_probability(self, row, path):
        """``exp(s(path) - log Z)`` of sequence ``row`` (1 for an empty sequence)."""
        return float(np.exp(min(self.path_log_score(row, path) - self.log_z[row], 0.0)))

    def span_probability(self, row, begin, stop, events):
        """Probability that positions ``begin..stop-1`` of sequence ``row`` hold one of ``events``.

        Args:
            row: int; begin, stop: the span, ``0 <= begin < stop <= lengths[row]``.
            events: list of :class:`SpanEvent` of length ``stop - begin`` (disjoint: their label
                sequences differ), e.g. from :func:`span_events`.
        Returns:
            float in [0, 1].
        """
        return float(self.span_probabilities([row], [begin], [stop], [events])[0])

    def span_probabilities(self, rows, begins, stops, events):
        """:meth:`span_probability` of many spans at once (vectorised over spans and events).

        Args:
            rows, begins, stops: ints (S,); events: list (S,) of lists of :class:`SpanEvent`.
        Returns:
            float64 array (S,).
        """
        rows, begins, stops = (np.asarray(x, dtype=np.intp).reshape(-1)
                               for x in (rows, begins, stops))
        lengths = self.lengths[rows]
        bad = ~((0 <= begins) & (begins < stops) & (stops <= lengths))
        if bad.any():
            k = int(np.nonzero(bad)[0][0])
            raise ValueError(f'span ({begins[k]}, {stops[k]}) outside the sequence of length '
                             f'{lengths[k]}')
        flat = [(k, event) for k, found in enumerate(events) for event in found]
        result = np.full(len(rows), -np.inf)
        if flat:
            owner = np.array([k for k, _ in flat])
            terms = self._event_log_scores(rows[owner], begins[owner], stops[owner],
                                           [event for _, event in flat])
            np.logaddexp.at(result, owner, terms)
        return np.exp(np.minimum(result - self.log_z[rows], 0.0))

    def _event_log_scores(self, rows, begins, stops, events):
        """log-sum of the scores of all paths holding each event at its span: (E,)."""
        sizes = stops - begins
        if any(len(event.labels) != size for event, size in zip(events, sizes)):
            raise ValueError('an event has a different number of labels than its span')
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
                        _logsumexp_where(into, before))
        following = np.minimum(stops, self.emissions.shape[1] - 1)
        out = (self.transitions[last] + self.emissions[rows, following]
               + self.log_beta[rows, following])
        right = np.where(stops == self.lengths[rows],
                         np.where([e.at_end for e in events], self.end[last], -np.inf),
                         _logsumexp_where(out, after))
        return left + inner + right


class PositionProbabilities:
    """Per-position label probabilities (a softmax head's), with :class:`Posteriors`'s reading
    methods: under such a model positions are independent.

    Args:
        log_probabilities: float array (batch, n, L); lengths: ints (batch,);
        temperature: positive float: ``p ~ exp(log p / temperature)`` at each position.

        >>> PositionProbabilities(np.log(p), [3]).path_probability(0, [0, 2, 1])
    """

    def __init__(self, log_probabilities, lengths, temperature=1.0):
        scaled = np.asarray(log_probabilities, dtype=np.float64) / temperature
        self.log_p = scaled - _logsumexp(scaled, axis=2)[..., None]
        self.lengths = np.asarray(lengths)

    def marginals(self):
        """float64 (batch, n, L), padding rows 0."""
        live = np.arange(self.log_p.shape[1]) < self.lengths[:, None]
        return np.where(live[..., None], np.exp(self.log_p), 0.0)

    def labels_probability(self, row, begin, labels):
        """Product of the probabilities of ``labels`` at positions ``begin, begin + 1, ...``."""
        labels = np.asarray(labels, dtype=np.intp)
        return float(np.exp(self.log_p[row, np.arange(begin, begin + len(labels)), labels].sum()))

    def path_probability(self, row, path):
        """Product of the probabilities of ``path`` (length ``lengths[row]``) of row ``row``."""
        return self.labels_probability(row, 0, path)


def _logsumexp_where(x, allowed):
    """logsumexp over the last axis of the entries of ``x`` where ``allowed``; -inf if none."""
    x = np.where(allowed, x, -np.inf)
    peak = x.max(axis=-1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide='ignore'):
        return peak[..., 0] + np.log(np.exp(x - peak).sum(axis=-1))


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
        scheme: a ``crf_lr.tagging.Scheme``; labels: its label list (L,); kind: entity type
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
