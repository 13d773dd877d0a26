"""Heads: what sits on the encoder's piece states, with its loss, training targets and decoding.

A head turns the hidden states of the text pieces into an output, says how to train it (loss,
metrics, targets) and how to read it back (spans and tags of the text units). Four are built in:
``crf`` (Dense + :class:`~crf_lr.model.crf.ConditionalRandomField`), ``softmax`` (Dense + softmax),
``global_pointer`` and ``efficient_global_pointer`` (span scores). The task scripts pick one by
name from :data:`HEADS`; :func:`register_head` adds another, and every head takes a
``layer_class``, so a subclass of our layers trains and predicts through the same code.

    >>> head = make_head('crf', types=['LOC', 'PER'], scheme='BIO', lr_multiplier=100)
    >>> output = head.build(piece_states(encoder))    # Dense(5) -> ConditionalRandomField(100)
    >>> model = keras.Model(encoder.inputs, output)
    >>> model.compile(LayerwiseAdam(1e-3), loss=head.loss, metrics=head.metrics)
"""
import dataclasses
import inspect
from typing import Optional

import numpy as np

from crf_lr.compat import keras, tf
from crf_lr.model.crf import ConditionalRandomField
from crf_lr.model.global_pointer import EfficientGlobalPointer, GlobalPointer
from crf_lr.model.losses import sparse_global_pointer_crossentropy, sparse_global_pointer_f1
from crf_lr.data.pieces import piece_spans_to_unit_spans, unit_spans_to_piece_spans
from crf_lr.decoding.posteriors import Posteriors, span_events, unit_reading
from crf_lr.model.serialization import register
from crf_lr.decoding.spans import decode_spans, non_overlapping, pad_sparse_targets, sparse_targets
from crf_lr.data.tagging import get_scheme
from crf_lr.decoding.viterbi import DISALLOWED_SCORE, viterbi_decode


@register(aliases=('PieceStates',))
class PieceStates(keras.layers.Layer):
    """The hidden states of the text pieces: ``[CLS]`` dropped, ``[SEP]`` and padding masked.

    Call on ``[hidden (batch, n, d), token_ids (batch, n) int]``; returns ``(batch, n - 1, d)``
    whose Keras mask ``(batch, n - 1)`` is True on the pieces only (left-aligned: piece i is at
    position i). Token id 0 is padding.

        >>> states = PieceStates()([bert.output, bert.inputs[0]])
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        return inputs[0][:, 1:]

    def compute_mask(self, inputs, mask=None):
        # position i is a piece iff token i + 2 exists (it is the next piece or [SEP])
        real = tf.not_equal(inputs[1][:, 2:], 0)
        return tf.concat([real, tf.zeros_like(real[:, :1])], axis=1)

    def compute_output_shape(self, input_shape):
        shape = input_shape[0]
        return (shape[0], None if shape[1] is None else shape[1] - 1, shape[2])



def piece_states(encoder):
    """:class:`PieceStates` of a bert4keras encoder (inputs ``[token_ids, segment_ids]``).

        >>> states = piece_states(encoder)             # (batch, n - 1, hidden), masked
    """
    return PieceStates(name='Piece-States')([encoder.output, encoder.inputs[0]])


@dataclasses.dataclass
class Window:
    """One window of a text as the model saw it.

    Attributes:
        offset: int, index of the window's first unit in the text.
        units: the window's units (str of characters or list of words).
        starts: list of ``len(units) + 1`` ints, where each unit's pieces start (strictly
            increasing: every unit has a piece).
        output: what the head keeps of the model's output (see :meth:`Head.window_output`).
    """
    offset: int
    units: object
    starts: list
    output: object = None


@dataclasses.dataclass
class Decoded:
    """A head's reading of one window: unit spans ``(start, end, label)`` (end exclusive; words
    are labelled ``'w'`` when segmenting), one tag per unit (tag heads; None for span heads), a
    confidence in [0, 1] per span (see :meth:`Head.decode`), the probability of the whole
    decoded tag path (tag heads; None for span heads), when asked, the label probabilities
    of every unit ``(units, L)`` (tag heads), and the path probability's natural log (finite
    where the probability underflows to 0)."""
    spans: list
    tags: Optional[list] = None
    confidences: Optional[list] = None
    path_probability: Optional[float] = None
    marginals: Optional[np.ndarray] = None
    path_log_probability: Optional[float] = None


class Head:
    """Base class: a head on piece states (see the module docstring).

    Subclasses set ``layer_class`` and implement :meth:`build`, :meth:`target`,
    :meth:`batch_targets`, :meth:`window_output` and :meth:`decode`.

    Args:
        types: entity types (ignored when the scheme segments words).
        scheme: a ``crf_lr.data.tagging.SCHEMES`` name or a ``crf_lr.data.tagging.Scheme``.
        layer_class: the Keras layer class to build (default: the head's own), e.g. a subclass.

    Attributes:
        temperature: positive float dividing every score before confidences are computed (1:
            as trained; ``crf_lr.evaluation.calibration.calibrate`` fits it on the development
            split). It never changes what is decoded, only the confidences.
    """
    name = None
    layer_class = None
    kind = None             # 'tags' or 'spans'

    def __init__(self, types=(), scheme='BIO', layer_class=None):
        self.scheme = get_scheme(scheme)
        self.types = [] if self.scheme.segmentation else list(types)
        self.layer_class = layer_class or type(self).layer_class
        self.layers, self.loss, self.metrics = [], None, []
        self.temperature = 1.0

    @property
    def labels(self):
        """What the model's last axis indexes: tag labels or entity types."""
        raise NotImplementedError

    def options(self):
        """The constructor's options beyond types and scheme (saved beside the model)."""
        return {}

    def config(self):
        """JSON-serialisable description, enough for :func:`make_head` to rebuild the head."""
        return dict(head=self.name, types=self.types, scheme=self.scheme.name,
                    labels=self.labels, **self.options())

    def count_params(self):
        """Parameters of the layers :meth:`build` made (the encoder excluded)."""
        return int(sum(layer.count_params() for layer in self.layers))

    def _add(self, layer):
        self.layers.append(layer)
        return layer

    def __repr__(self):
        options = ''.join(f', {k}={v!r}' for k, v in self.options().items())
        layers = ' + '.join(type(layer).__name__ for layer in self.layers) or getattr(
            self.layer_class, '__name__', 'not built')
        return (f'{type(self).__name__}({layers}, {len(self.labels)} labels, '
                f'scheme {self.scheme.name}{options})')


# ---------------------------------------------------------------------------------------------
# Tag heads: one label per piece


LABEL_PIECES = ('all', 'first')
IGNORED = -1            # the target of a piece left out of the loss and the metrics


def first_pieces_only(function):
    """A CRF's loss or metric ``function(y_true, y_pred)`` on the first pieces of the words
    only, for ``label_pieces='first'``.

    ``y_true`` (batch, n) holds ``IGNORED`` at every other piece and at padding. Masking those
    positions would break a linear-chain CRF (its mask is left-aligned, and a path through a
    masked middle piece would still pay two transitions); instead the rows of the first pieces
    are gathered to the left, in order, so that the CRF sees one row per word and its
    transitions go from word to word. Rows after them become padding: ``-inf`` rows, as the
    CRF's own output pads, with label 0.

        >>> loss = first_pieces_only(crf.sparse_loss)        # loss(y_true, y_pred): (batch,)
    """
    def on_first_pieces(y_true, y_pred):
        y_true = tf.cast(tf.reshape(y_true, tf.shape(y_pred)[:2]), tf.int32)
        keep = y_true != IGNORED
        order = tf.argsort(tf.cast(tf.logical_not(keep), tf.int32), axis=1, stable=True)
        count = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1, keepdims=True)
        live = tf.range(tf.shape(y_true)[1])[None] < count                  # left-aligned
        y_pred = tf.where(live[..., None], tf.gather(y_pred, order, batch_dims=1),
                          tf.constant(-np.inf, y_pred.dtype))
        return function(tf.where(live, tf.gather(y_true, order, batch_dims=1), 0), y_pred)

    on_first_pieces.__name__ = getattr(function, '__name__', type(function).__name__)
    return on_first_pieces


class TagHead(Head):
    """A label per piece, read back per unit by the scheme; Viterbi decoding with the scheme's
    constraints by default.

    ``label_pieces`` (set by the heads that take it, :class:`CRFHead`): 'all' (a unit's tag
    spreads to all its pieces, by the scheme's rule; the unit's prediction is its first
    piece's) or 'first' (only a unit's first piece carries its tag; the other pieces are left
    out of the loss, the metrics and the decoding: the head runs on the first pieces only,
    gathered into one row per unit, see :func:`first_pieces_only`). The two are the same for
    characters, which are one piece each.
    """
    kind = 'tags'
    label_pieces = 'all'

    @property
    def labels(self):
        return self.scheme.labels(self.types)

    def target(self, tags, spans, starts):
        """Label ids of a window's pieces, from its unit tags (a unit's tag spreads to its pieces
        by the scheme's rule; with ``label_pieces='first'`` the other pieces get ``IGNORED``)."""
        index = {label: i for i, label in enumerate(self.labels)}
        strategy = 'propagate' if self.label_pieces == 'all' else 'first'
        piece_tags = self.scheme.spread(tags, np.diff(starts), strategy, ignore_label=None)
        unknown = sorted(set(piece_tags) - set(index) - {None})
        if unknown:
            raise ValueError(f'tags {unknown} are not among the labels {self.labels}')
        return [IGNORED if t is None else index[t] for t in piece_tags]

    def batch_targets(self, targets, n):
        """``(batch, n - 1)`` int32 label ids, padded with 0 (the mask keeps padding out), or
        with ``IGNORED`` under ``label_pieces='first'``."""
        padding = 0 if self.label_pieces == 'all' else IGNORED
        padded = np.full((len(targets), n - 1), padding, dtype=np.int32)
        for row, label_ids in enumerate(targets):
            padded[row, :len(label_ids)] = label_ids
        return padded

    def window_output(self, prediction, pieces):
        """The window's scores ``(pieces, L)`` in float64."""
        return np.asarray(prediction[:pieces], dtype=np.float64)

    def _transitions(self):
        """``(scores -> Viterbi inputs, trans, start, end)`` of this head."""
        raise NotImplementedError

    def _posteriors(self, scores, lengths, parameters):
        """What the confidences are read from, for one batch of Viterbi inputs ``scores``
        (B, n, L): an object with ``path_log_probability(row, path)`` and ``marginals()``. By
        default the CRF that Viterbi decodes: ``p(path) ~ exp(score / temperature)``."""
        return Posteriors(scores, lengths=lengths, temperature=self.temperature, **parameters)

    def _span_confidences(self, posteriors, spans, starts):
        """Confidence of each entity ``(row, begin, stop, kind)`` (over units ``begin..stop-1``
        of row ``row``, whose pieces start at ``starts[row]``): the exact probability under
        :meth:`_posteriors` (at ``temperature``) that the units read as exactly this entity,
        whatever the rest of the text; a unit reads its label off its pieces as :meth:`_read`
        does (``crf_lr.decoding.posteriors``)."""
        if not spans:
            return []
        rows, begins, stops, _ = zip(*spans)
        labels = self.labels
        events = [span_events(self.scheme, labels, kind, stop - begin)
                  for _, begin, stop, kind in spans]
        return posteriors.span_probabilities(rows, begins, stops, events, starts,
                                             unit_reading(self.scheme, labels)).tolist()

    def decode(self, windows, constrain=True, marginals=False, confidences=True):
        """:class:`Decoded` of each window; all windows decoded together (batched Viterbi).

        Args:
            windows: list of :class:`Window` with ``output`` from :meth:`window_output`.
            constrain: forbid the scheme's impossible transitions, starts and ends.
            marginals: also return each unit's label probabilities (of the label read off its
                pieces).
            confidences: compute each span's confidence and the path probability (False:
                both None, and no forward-backward pass).
        """
        allowed = self.scheme.allowed(self.labels) if constrain else (None,) * 3
        prepare, trans, start, end = self._transitions()
        parameters = dict(transitions=trans, start=start, end=end,
                          allowed_transitions=allowed[0], allowed_starts=allowed[1],
                          allowed_ends=allowed[2])
        scores = [prepare(w.output) for w in windows]
        if self.label_pieces == 'first':                     # one row per unit: its first piece
            scores = [s[np.asarray(w.starts[:-1], dtype=int)] for s, w in zip(scores, windows)]
        decoded = []
        for begin in range(0, len(scores), 256):
            group, lengths = scores[begin:begin + 256], [len(s) for s in scores[begin:begin + 256]]
            batch = np.zeros((len(group), max(lengths), len(self.labels)))
            for row, s in enumerate(group):
                batch[row, :len(s)] = np.maximum(s, DISALLOWED_SCORE)
            paths = viterbi_decode(batch, lengths=lengths, **parameters)
            readings = [self._read(window, path) for window, path in
                        zip(windows[begin:begin + 256], paths)]
            if confidences or marginals:
                self._add_confidences(readings, windows[begin:begin + 256], paths,
                                      self._posteriors(batch, lengths, parameters), marginals)
            decoded += readings
        return decoded

    def _row_starts(self, window):
        """Where each unit's rows start in the decoded scores, and their end: the piece starts,
        or one row per unit under ``label_pieces='first'``."""
        if self.label_pieces == 'first':
            return np.arange(len(window.units) + 1)
        return np.asarray(window.starts)

    def _read(self, window, path):
        """The :class:`Decoded` of one window from its Viterbi ``path`` (no confidences yet)."""
        labels = self.labels
        tags = [labels[i] for i in path]
        if self.label_pieces == 'all':
            word_index = np.repeat(np.arange(len(window.units)), np.diff(window.starts))
            tags = self.scheme.collect(word_index, tags, len(window.units))
        return Decoded(self.scheme.decode(tags, strict=True), tags)

    def _add_confidences(self, readings, windows, paths, posteriors, marginals):
        """Fill in the confidences, path probabilities and (``marginals``) unit marginals of
        the :class:`Decoded` of one batch of windows."""
        starts = [self._row_starts(window) for window in windows]
        spans = [(row, s, e, kind)
                 for row, reading in enumerate(readings) for s, e, kind in reading.spans]
        found = iter(self._span_confidences(posteriors, spans, starts))
        units = (posteriors.unit_marginals(starts, unit_reading(self.scheme, self.labels))
                 if marginals else None)
        for row, (reading, path) in enumerate(zip(readings, paths)):
            reading.confidences = [next(found) for _ in reading.spans]
            reading.path_log_probability = posteriors.path_log_probability(row, path)
            reading.path_probability = float(np.exp(reading.path_log_probability))
            if marginals:
                reading.marginals = units[row]


class CRFHead(TagHead):
    """``Dense(L)`` then a :class:`~crf_lr.model.crf.ConditionalRandomField` whose transitions learn
    at ``lr_multiplier`` times the main rate; loss ``crf.sparse_loss``.

    Args:
        lr_multiplier: the CRF's own learning-rate multiplier (see docs/results.md).
        constrain_training: give the scheme's impossible transitions -1e4 in training too.
        boundary_scores: learn start and end scores per label as well.
        label_pieces: 'all' or 'first' (see :class:`TagHead`): with 'first' the CRF runs over
            the words' first pieces only, gathered into one row per word.

        >>> head = CRFHead(['PER'], 'BIO', lr_multiplier=100)
        >>> head.build(states); head.crf.trans.shape          # (3, 3)
    """
    name = 'crf'
    layer_class = ConditionalRandomField

    def __init__(self, types=(), scheme='BIO', lr_multiplier=1.0, constrain_training=False,
                 boundary_scores=False, label_pieces='all', layer_class=None):
        super().__init__(types, scheme, layer_class)
        if label_pieces not in LABEL_PIECES:
            raise ValueError(f'label_pieces must be one of {LABEL_PIECES}, got {label_pieces!r}')
        self.label_pieces = label_pieces
        self.lr_multiplier, self.constrain_training = lr_multiplier, constrain_training
        self.boundary_scores = boundary_scores
        self.crf = None

    def options(self):
        return dict(lr_multiplier=self.lr_multiplier, constrain_training=self.constrain_training,
                    boundary_scores=self.boundary_scores, label_pieces=self.label_pieces)

    def build(self, states):
        constraints = self.scheme.allowed(self.labels) if self.constrain_training else (None,) * 3
        scores = self._add(keras.layers.Dense(len(self.labels), name='Tag-Scores'))(states)
        self.crf = self._add(self.layer_class(self.lr_multiplier, *constraints, name='CRF',
                                              boundary_scores=self.boundary_scores))
        self.loss, self.metrics = self.crf.sparse_loss, [self.crf.sparse_accuracy]
        if self.label_pieces == 'first':
            self.loss, self.metrics = (first_pieces_only(self.loss),
                                       [first_pieces_only(self.crf.sparse_accuracy)])
        return self.crf(scores)

    def attach(self, model):
        """Find the CRF layer again in a loaded ``model`` (see :meth:`Tagger.load`)."""
        self.crf = next(layer for layer in model.layers
                        if isinstance(layer, ConditionalRandomField))

    def _transitions(self):
        trans, start, end = (None if p is None else p.numpy()
                             for p in self.crf.effective_parameters('float64'))
        return (lambda scores: scores), trans, start, end


class SoftmaxHead(TagHead):
    """``Dense(L, softmax)``; loss sparse categorical crossentropy. Decoding: argmax per piece, or
    (``constrain=True``) Viterbi over log-probabilities with the scheme's constraints."""
    name = 'softmax'
    layer_class = keras.layers.Dense

    def build(self, states):
        layer = self._add(self.layer_class(len(self.labels), activation='softmax',
                                           name='Tag-Scores', dtype='float32'))
        self.loss, self.metrics = 'sparse_categorical_crossentropy', ['sparse_categorical_accuracy']
        return layer(states)

    def _transitions(self):
        return ((lambda probabilities: np.log(np.maximum(probabilities, 1e-30))),
                np.zeros((len(self.labels),) * 2), None, None)

    def _posteriors(self, scores, lengths, parameters):
        """Independent positions: ``Posteriors`` of the log-probabilities with zero transitions
        and no constraints, so a path's probability is the product of its tags' probabilities."""
        return Posteriors(scores, parameters['transitions'], lengths=lengths,
                          temperature=self.temperature)


# ---------------------------------------------------------------------------------------------
# Span heads: a score per (type, start piece, end piece)


class SpanHead(Head):
    """Scores every span of pieces per entity type; loss sparse multilabel categorical
    crossentropy (MCCE). Nested spans are predicted as they come; ``flat=True`` keeps no
    overlaps, highest score first.

    Args:
        head_size: size of the query/key projections.
        flat: decode without overlapping spans (default for flat data; the task script sets
            False on nested data such as CMeEE).
    """
    kind = 'spans'

    def __init__(self, types=(), scheme='BIO', head_size=64, flat=True, layer_class=None):
        super().__init__(types, scheme, layer_class)
        self.head_size, self.flat = head_size, flat

    @property
    def labels(self):
        return self.types

    def options(self):
        return dict(head_size=self.head_size, flat=self.flat)

    def build(self, states):
        layer = self._add(self.layer_class(len(self.types), self.head_size, name='Span-Scores'))
        self.loss, self.metrics = sparse_global_pointer_crossentropy, [sparse_global_pointer_f1]
        return layer(states)

    def target(self, tags, spans, starts):
        """The window's unit spans as piece spans."""
        return unit_spans_to_piece_spans(spans, starts)

    def batch_targets(self, targets, n):
        """``(batch, types, E, 2)`` inclusive piece pairs, padded with (-1, -1)."""
        return pad_sparse_targets([sparse_targets(spans, n - 1, self.types) for spans in targets])

    def window_output(self, prediction, pieces):
        """Piece spans scoring above 0, each with its score: ``[((start, end, type), score)]``."""
        found = decode_spans(prediction, lengths=pieces)
        return [((s, e, self.types[t]), float(prediction[t, s, e - 1])) for s, e, t in found]

    def decode(self, windows, constrain=True, marginals=False, confidences=True):
        """:class:`Decoded` of each window (``constrain`` and ``marginals`` have no meaning for
        span heads; ``confidences`` False gives None). A span's confidence is the logistic of
        its score divided by ``temperature``: a score that ranks spans, not a calibrated
        probability unless the temperature was fitted (``crf_lr.evaluation.calibration``)."""
        decoded = []
        for window in windows:
            scored = dict(window.output)
            spans = non_overlapping(window.output) if self.flat else [s for s, _ in window.output]
            # each label carries its span's confidence through the piece -> unit mapping
            spans = [(s, e, (label, _logistic(scored[s, e, label] / self.temperature)))
                     for s, e, label in sorted(spans)]
            units = piece_spans_to_unit_spans(spans, window.starts)
            decoded.append(Decoded([(s, e, label) for s, e, (label, _) in units], None,
                                   [confidence for _, _, (_, confidence) in units]
                                   if confidences else None))
        return decoded


def _logistic(score):
    return float(1 / (1 + np.exp(-score)))


class GlobalPointerHead(SpanHead):
    """:class:`~crf_lr.model.global_pointer.GlobalPointer`: a query/key projection per type."""
    name = 'global_pointer'
    layer_class = GlobalPointer


class EfficientGlobalPointerHead(SpanHead):
    """:class:`~crf_lr.model.global_pointer.EfficientGlobalPointer`: one shared projection plus
    ``4 * head_size`` parameters per type."""
    name = 'efficient_global_pointer'
    layer_class = EfficientGlobalPointer


# ---------------------------------------------------------------------------------------------
# Registry

HEADS = {}


def register_head(name, head_class, **defaults):
    """Make ``head_class`` available to :func:`make_head`, the task scripts' ``--head`` and
    :meth:`Tagger.load` under ``name``; ``defaults`` are fixed keyword arguments.

        >>> register_head('focal_crf', CRFHead, layer_class=FocalCRF)   # a user's CRF subclass
    """
    if not (isinstance(head_class, type) and issubclass(head_class, Head)):
        raise TypeError(f'register_head({name!r}): {head_class!r} is not a Head subclass')
    HEADS[name] = (head_class, defaults)


for _head in (CRFHead, SoftmaxHead, GlobalPointerHead, EfficientGlobalPointerHead):
    register_head(_head.name, _head)


def make_head(name, types=(), scheme='BIO', **options):
    """The head registered as ``name``, given the options its constructor takes.

    Options it does not take are ignored, so one set of command-line options serves every head
    (``lr_multiplier`` means nothing to a GlobalPointer).

        >>> make_head('efficient_global_pointer', ['LOC'], head_size=64, lr_multiplier=100)
    """
    if name not in HEADS:
        raise ValueError(f'unknown head {name!r}: expected one of {sorted(HEADS)} '
                         f'(crf_lr.model.heads.register_head adds one)')
    head_class, defaults = HEADS[name]
    accepted = inspect.signature(head_class.__init__).parameters
    kwargs = {k: v for k, v in {**options, **defaults}.items() if k in accepted}
    head = head_class(types, scheme, **kwargs)
    head.name = name
    return head
