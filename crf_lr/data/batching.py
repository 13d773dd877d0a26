"""Padded, length-bucketed batches (bert4keras ``DataGenerator`` style), NumPy only.

Each item is one encoded sequence (:class:`Encoded`): token ids that start with ``[CLS]`` and end
with ``[SEP]``, optional segment ids, labels, and a label mask. :class:`Batches` pads every batch to
the length of ITS longest item (not a global maxlen) and groups items of similar length (a seeded
shuffle, then sorting inside pools of ``bucket`` batches, then a shuffle of the batches), so little
is padded.

How padding and [CLS]/[SEP] are kept out of the loss and the metrics:

- ``mask`` (batch, n) is 1 on ``[CLS]``, the tokens and ``[SEP]``, 0 on padding. Padding ids are
  ``pad_id`` (0, as in BERT vocabularies), so a Keras ``Embedding(mask_zero=True)`` mask equals
  ``mask``: the CRF never scores padding. Labels at ``[CLS]``/``[SEP]`` are what the item gives
  (use the id of 'O' -- ``0`` -- for NER, as bert4keras does); the CRF sees them as fixed boundary
  labels, they are never counted by any metric.
- ``label_mask`` (batch, n) float32 is 1 only on positions that are scored: the tokens between
  ``[CLS]`` and ``[SEP]`` (or the item's own ``label_mask``, e.g. first WordPieces only), 0 on
  ``[CLS]``, ``[SEP]`` and padding. ``forfit(sample_weights=True)`` yields it as Keras sample
  weights (softmax head: the loss then ignores those positions). GlobalPointer targets from a
  ``label_fn`` with ``offset=1`` hold no entity on ``[CLS]``/``[SEP]``/padding rows.
- Before any metric, :meth:`Batch.strip` (or :func:`strip_padding`) keeps only the ``label_mask``
  positions of each predicted row; :meth:`Batches.collect` does this for a whole set, in item order.

Over-long items (more than ``maxlen`` ids): ``overflow='error'`` (default) raises naming the item's
source; ``overflow='truncate'`` keeps the first ``maxlen - 1`` ids and ``[SEP]``, records each item
in ``Batches.truncated`` and warns once with the count. Split long texts into windows
(``crf_lr.data.windows.split_into_windows``) to lose nothing.

    >>> batches = Batches([Encoded([101, 7, 8, 102], labels=[0, 1, 2, 0])], batch_size=32)
    >>> model.fit(batches.forfit(), steps_per_epoch=len(batches), epochs=3)
"""
import dataclasses
import warnings
from typing import Any, Optional

import numpy as np


@dataclasses.dataclass
class Encoded:
    """One encoded sequence.

    Attributes:
        token_ids: list of int, ``[CLS] ... [SEP]`` (when ``Batches(special_tokens=True)``).
        segment_ids: list of int of the same length, or None for all zeros.
        labels: list of int of the same length (CRF / softmax heads; the values at
            ``[CLS]``/``[SEP]`` included), or any object a ``label_fn`` turns into targets (e.g.
            spans for GlobalPointer), or None.
        label_mask: list of 0/1 of the same length: the positions scored. None: every position
            but the first and last (``[CLS]``/``[SEP]``), or every position when
            ``special_tokens=False``.
        source: str naming where the sequence comes from (``'path:line'``), used in error messages.
    """
    token_ids: list
    segment_ids: Optional[list] = None
    labels: Any = None
    label_mask: Optional[list] = None
    source: str = '<item>'


@dataclasses.dataclass
class Batch:
    """One padded batch; ``n`` is its longest item's length rounded up (``length_multiple``).

    Attributes:
        token_ids, segment_ids: int32 arrays (batch, n), padding = ``pad_id`` / 0.
        labels: int32 array (batch, n) padded with ``label_pad``; or the ``label_fn`` output; or
        None. mask: int32 (batch, n), 1 on ``[CLS]``, tokens and ``[SEP]``; 0 on padding.
        label_mask: float32 (batch, n), 1 on scored positions only.
        lengths: int (batch,), the unpadded lengths (``[CLS]`` and ``[SEP]`` included).
        indices: int (batch,), the items' positions in the list given to :class:`Batches`.
    """
    token_ids: np.ndarray
    segment_ids: np.ndarray
    labels: Any
    mask: np.ndarray
    label_mask: np.ndarray
    lengths: np.ndarray
    indices: np.ndarray

    @property
    def inputs(self):
        """``[token_ids, segment_ids]``, the inputs of a bert4keras model."""
        return [self.token_ids, self.segment_ids]

    def strip(self, predictions):
        """Per-item predictions at the scored positions only (padding, [CLS], [SEP] dropped).

        Args:
            predictions: array (batch, n, ...) aligned with ``token_ids`` (tag ids, scores, ...).
        Returns:
            list of ``batch`` arrays of shape (scored positions of item k, ...).

            >>> tags = model.predict(batch.inputs).argmax(-1)    # (batch, n): softmax tag ids
            >>> per_item = batch.strip(tags)
        """
        return _select(predictions, self.label_mask)


def _select(predictions, keep):
    predictions, keep = np.asarray(predictions), np.asarray(keep) > 0
    if predictions.shape[:2] != keep.shape:
        raise ValueError(f'predictions of shape {predictions.shape} do not match the batch: '
                         f'expected (batch, n) = {keep.shape} as the first two dimensions')
    return [row[k] for row, k in zip(predictions, keep)]


def strip_padding(predictions, lengths, special_tokens=True):
    """Drop padding (and ``[CLS]``/``[SEP]``) from padded predicted sequences.

    Args:
        predictions: array (batch, n, ...) aligned with padded token ids.
        lengths: ints (batch,), each row's unpadded length including ``[CLS]`` and ``[SEP]``.
        special_tokens: True drops each row's first position and its position ``lengths[k] - 1``.
    Returns:
        list of arrays, row k of shape (lengths[k] - 2, ...) (or (lengths[k], ...)).

        >>> strip_padding(np.array([[0, 5, 6, 0, 9, 9]]), [4])
        [array([5, 6])]
    """
    predictions, lengths = np.asarray(predictions), np.asarray(lengths)
    if predictions.ndim < 2 or lengths.shape != predictions.shape[:1]:
        raise ValueError(f'expected predictions (batch, n, ...) and lengths (batch,), got shapes '
                         f'{predictions.shape} and {lengths.shape}')
    n, edge = predictions.shape[1], int(special_tokens)
    if lengths.size and (lengths.min() < 2 * edge or lengths.max() > n):
        raise ValueError(f'lengths must lie in [{2 * edge}, {n}], got {lengths.tolist()}')
    positions = np.arange(n)
    keep = (positions >= edge) & (positions < lengths[:, None] - edge)
    return _select(predictions, keep)


def _int_list(values, name, source, length=None):
    values = list(values)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        raise ValueError(f'{source}: {name} must be integers, got {values[:8]!r}...')
    if length is not None and len(values) != length:
        raise ValueError(f'{source}: {name} has {len(values)} entries for {length} token ids '
                         '(labels include the [CLS]/[SEP] positions)')
    return values


class Batches:
    """Padded batches of :class:`Encoded` items: iterate for one epoch, ``forfit()`` for
    ``model.fit``.

    Args:
        items: list of :class:`Encoded` (or dicts with its fields).
        batch_size: int >= 1.
        label_fn: None for per-token integer labels, padded with ``label_pad``; or a callable
            ``label_fn(labels, n) -> array (batch, ...)`` given the batch's ``labels`` objects and
            its padded length, e.g. ``lambda spans, n: pad_sparse_targets([sparse_targets(s, n,
            types, 1) for s in spans])`` (``crf_lr.decoding.spans``) for GlobalPointer.
        maxlen: int or None; items longer than this follow ``overflow``.
        overflow: 'error' or 'truncate' (per-token labels only; see the module docstring).
        shuffle: True: a new seeded order every epoch, a smaller last batch first (so the first
            two batches differ in size and length, and plain ``model.train_on_batch`` generalises
            its trace at once instead of tracing again when the small batch comes; ``fit`` traces
            once anyway); False: the same order every epoch.
        bucket: pool size, in batches, inside which items are sorted by length (0: no sorting). With
            ``shuffle=False`` and ``bucket > 0`` all items are sorted by length (fastest prediction;
            ``Batch.indices`` / :meth:`collect` restore the item order).
        seed: int (or list of ints, e.g. ``[seed, epoch]``) seeding the shuffles (numpy
        default_rng). special_tokens: True if every item starts with [CLS] and ends with [SEP].
        pad_id, label_pad: int padding values of token ids and labels.
        length_multiple: int >= 1; every batch is padded to a multiple of it (but never beyond
            ``maxlen`` unless its longest item is), so an epoch has few distinct batch shapes:
            for a model compiled with ``jit_compile=True`` (XLA compiles the whole step once per
            shape). 1 (default): pad to the longest item only; Keras's own train function
            generalises its shapes after two traces, and extra padding is extra compute there
            (docs/performance.md, "The first epoch against a steady one"). The masks keep the
            padding out of every loss.

        >>> batches = Batches(items, batch_size=16, maxlen=128, seed=0)
        >>> for batch in batches: loss = model.train_on_batch(batch.inputs, batch.labels)
    """

    def __init__(self, items, batch_size=32, label_fn=None, maxlen=None, overflow='error',
                 shuffle=True,
                 bucket=100, seed=0, special_tokens=True, pad_id=0, label_pad=0,
                 length_multiple=1):
        for name, value in (('batch_size', batch_size), ('length_multiple', length_multiple)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f'{name} must be an int >= 1, got {value!r}')
        if overflow not in ('error', 'truncate'):
            raise ValueError(f"overflow must be 'error' or 'truncate', got {overflow!r}")
        if overflow == 'truncate' and label_fn is not None:
            raise ValueError("overflow='truncate' needs per-token labels (label_fn=None): span "
                             'targets cannot be cut safely; split long texts into windows instead')
        minimum = 3 if special_tokens else 1
        if maxlen is not None and (not isinstance(maxlen, int) or maxlen < minimum):
            raise ValueError(f'maxlen must be None or an int >= {minimum}, got {maxlen!r}')
        self.batch_size, self.label_fn, self.maxlen, self.overflow = (batch_size, label_fn, maxlen,
                                                                      overflow)
        self.shuffle, self.bucket, self.special_tokens = shuffle, bucket, special_tokens
        self.pad_id, self.label_pad, self.length_multiple = pad_id, label_pad, length_multiple
        self.rng = np.random.default_rng(seed)
        self.truncated = []  # (source, original length) of every truncated item
        self.items = [self._check(item if isinstance(item, Encoded) else Encoded(**item))
                      for item in items]
        if not self.items:
            raise ValueError('Batches needs at least one item')
        if self.truncated:
            warnings.warn(f'{len(self.truncated)} of {len(self.items)} sequences were longer than '
                          f'maxlen={maxlen} and were truncated (first: {self.truncated[0][0]}, '
                          f'{self.truncated[0][1]} ids); see Batches.truncated', stacklevel=2)
        self.lengths = np.array([len(item.token_ids) for item in self.items])

    def _check(self, item):
        """Validated copy of ``item``: lists of ints, default segment ids and label mask, maxlen."""
        source = item.source
        ids = _int_list(item.token_ids, 'token_ids', source)
        length = len(ids)
        if length < (2 if self.special_tokens else 1):
            raise ValueError(f'{source}: token_ids has {length} ids; expected [CLS] ... [SEP]')
        segments = [0] * length if item.segment_ids is None else _int_list(
            item.segment_ids, 'segment_ids', source, length)
        labels = item.labels
        if self.label_fn is None and labels is not None:
            labels = _int_list(labels, 'labels', source, length)
        if item.label_mask is None:
            edge = int(self.special_tokens)
            label_mask = [0] * edge + [1] * (length - 2 * edge) + [0] * edge
        else:
            label_mask = _int_list(item.label_mask, 'label_mask', source, length)
        if self.maxlen is not None and length > self.maxlen:
            if self.overflow == 'error':
                raise ValueError(f'{source}: {length} token ids exceed maxlen={self.maxlen}; split '
                                 "the text into windows (crf_lr.data.windows.split_into_windows) "
                                 "or pass overflow='truncate'")
            self.truncated.append((source, length))
            keep, tail = self.maxlen - int(self.special_tokens), int(self.special_tokens)

            # the first ``keep`` values, and the last one ([SEP]) if special tokens
            def cut(values):
                return None if values is None else values[:keep] + values[length - tail:length]

            ids, segments, labels, label_mask = (cut(ids), cut(segments), cut(labels),
                                                 cut(label_mask))
        return Encoded(ids, segments, labels, label_mask, source)

    def __len__(self):
        """Number of batches per epoch."""
        return -(-len(self.items) // self.batch_size)

    def _order(self):
        """Batches of item indices for one epoch."""
        n, size = len(self.items), self.batch_size
        order = self.rng.permutation(n) if self.shuffle else np.arange(n)
        if self.bucket:
            pool = n if not self.shuffle else size * self.bucket
            order = np.concatenate([chunk[np.argsort(self.lengths[chunk], kind='stable')]
                                    for chunk in np.split(order, range(pool, n, pool))])
        batches = np.split(order, range(size, n, size))
        if self.shuffle:
            batches = [batches[i] for i in self.rng.permutation(len(batches))]
            # A smaller last batch goes first (a stable sort moves only it): the first two batches
            # then differ in size and length, so Keras's train function, traced for the first
            # shape, is traced once more for any (batch, n) instead of again later in the epoch.
            batches.sort(key=len)
        return batches

    def padded_length(self, longest):
        """The padded length of a batch whose longest item has ``longest`` ids."""
        n = -(-longest // self.length_multiple) * self.length_multiple
        return n if self.maxlen is None else max(longest, min(n, self.maxlen))

    def _pad(self, indices):
        items = [self.items[i] for i in indices]
        lengths = self.lengths[indices]
        b, n = len(items), self.padded_length(int(lengths.max()))
        token_ids = np.full((b, n), self.pad_id, dtype=np.int32)
        segment_ids = np.zeros((b, n), dtype=np.int32)
        label_mask = np.zeros((b, n), dtype=np.float32)
        has_labels = any(item.labels is not None for item in items)
        if has_labels and any(item.labels is None for item in items):
            raise ValueError(f'{items[0].source}: some items of a batch have labels and others not')
        labels = np.full((b, n), self.label_pad, dtype=np.int32) if has_labels else None
        for k, item in enumerate(items):
            token_ids[k, :lengths[k]] = item.token_ids
            segment_ids[k, :lengths[k]] = item.segment_ids
            label_mask[k, :lengths[k]] = item.label_mask
            if has_labels and self.label_fn is None:
                labels[k, :lengths[k]] = item.labels
        if has_labels and self.label_fn is not None:
            labels = self.label_fn([item.labels for item in items], n)
        mask = (np.arange(n) < lengths[:, None]).astype(np.int32)
        return Batch(token_ids, segment_ids, labels, mask, label_mask, lengths, np.asarray(indices))

    def __iter__(self):
        """One epoch of :class:`Batch` (a new order each epoch when ``shuffle``)."""
        for indices in self._order():
            yield self._pad(indices)

    def forfit(self, sample_weights=False):
        """Endless ``(inputs, labels)`` tuples for ``model.fit(..., steps_per_epoch=len(self))``.

        Args:
            sample_weights: True adds ``label_mask`` as a third element (Keras sample weights), so a
                per-token loss (softmax head) ignores [CLS], [SEP] and padding.

            >>> model.fit(batches.forfit(), steps_per_epoch=len(batches), epochs=5)
        """
        while True:
            for batch in self:
                yield (batch.inputs, batch.labels) + ((batch.label_mask,) if sample_weights else ())

    def collect(self, predict):
        """Run ``predict`` over one epoch and return its stripped outputs in item order.

        Args:
            predict: callable ``predict(batch) -> array (batch, n, ...)`` aligned with the token
            ids.
        Returns:
            list (one per item, in the order given to the constructor) of arrays at the scored
            positions only.

            >>> scores = Batches(test_items, 64, shuffle=False).collect(
            ...     lambda batch: model.predict(batch.inputs))           # per item: (units, L)
            >>> tag_ids = [viterbi_decode(row[None], trans)[0] for row in scores]   # CRF paths
        """
        outputs = [None] * len(self.items)
        for batch in self:
            for index, row in zip(batch.indices, batch.strip(predict(batch))):
                outputs[index] = row
        return outputs
