"""A trained model with its head and unit encoder: texts of any length -> spans.

:class:`Tagger` cuts texts into windows at sentence ends, runs the model, lets the head decode
each window and stitches the spans back; it saves and loads the ``model/`` folder of a task
script run, which is what ``python -m crf_lr.predict`` serves.

    >>> tagger = Tagger.load('runs/ner/model')
    >>> tagger.predict(['中共中央总书记江泽民发表新年讲话'])   # [[(0, 4, 'ORG'),
    (7, 10, 'PER')]]
"""
import dataclasses
import json
import math
import os
import shutil
import warnings

import numpy as np

from crf_lr.utils.atomic import replace_folder
from crf_lr.data.batching import Batches, Encoded
from crf_lr.model.heads import Decoded, Window, make_head
from crf_lr.data.pieces import UnitEncoder, windows_of
from crf_lr.model.precision import load_model, save_model
from crf_lr.serving.model_folder import LABELS_KEYS, check_model_folder
from crf_lr.data.windows import PAUSES, merge_window_spans
from crf_lr.speed.tracing import (conformed, free_signature, frozen_step,
                                  traced_without_autograph)


@dataclasses.dataclass
class Prediction(Decoded):
    """One text's prediction, its windows' :class:`~crf_lr.model.heads.Decoded` stitched: unit spans
    ``(start, end, label)`` (end exclusive); for tag heads, one tag per unit (None for span heads);
    a confidence in [0, 1] per span, aligned with ``spans``; the probability of the text's whole
    decoded tag path (the product over its windows; None for span heads; 0.0 where it underflows, on
    a long text); when asked for, each unit's label probabilities ``(units, L)`` in the order of
    ``head.labels``; and the path probability's natural log, ``path_log_probability`` (the sum over
    the windows, finite at any length; -inf where a custom head gives a path probability of 0.0,
    which ``crf_lr.serving.predict.predict_records`` and the server write as null).

    Confidence: CRF head, the exact probability under the CRF that the text holds exactly this
    entity (its units read as the head reads them: a word's tag off its pieces); softmax head,
    the same probability with each piece's tag independent (a product of tag probabilities,
    summed over the pieces that do not decide the reading; for word segmentation, whose reading
    forgives ill-formed tags, over the word's well-formed tags only); GlobalPointer heads,
    the logistic of the span's score (not a calibrated probability unless the head's
    temperature was fitted). See ``crf_lr.model.heads.Head.temperature``."""


class Tagger:
    """A trained model, its head and its unit encoder.

    Args:
        model: keras.Model whose output the head reads (built with ``head.build``).
        encoder: :class:`~crf_lr.data.pieces.UnitEncoder`.
        head: :class:`~crf_lr.model.heads.Head` (built, or attached to a loaded model).
        maxlen: tokens per window, [CLS] and [SEP] included (an encoder of words whose
            ``max_pieces`` is ``maxlen - 2`` reads a word too long for a window as ``[UNK]``).
        batch_size: windows per prediction batch.

        >>> tagger = Tagger(model, UnitEncoder(vocab_path), head, maxlen=128)
        >>> tagger.predict(['今天天气很好。'])
    """

    def __init__(self, model, encoder, head, maxlen, batch_size=32):
        self.model, self.encoder, self.head = model, encoder, head
        self.maxlen, self.batch_size = maxlen, batch_size
        self._prediction = None  # (model, its traced step or None, signature), made on first use

    # -- saving -------------------------------------------------------------------------------
    def save(self, folder):
        """Write ``model.h5``, ``labels.json`` (the head's config and temperature, units,
        maxlen) and ``vocab.txt`` into ``folder``, replacing it whole
        (:func:`crf_lr.utils.atomic.replace_folder`): a kill while saving leaves the previous model,
        complete. The weights are float32 whatever the precision (a Tagger loaded for
        prediction under ``mixed_bfloat16`` saves its bf16 weights widened:
        :func:`crf_lr.model.precision.save_model`)."""
        with replace_folder(folder) as scratch:
            with warnings.catch_warnings():   # "HDF5 is legacy": it is the format bert4keras loads
                warnings.simplefilter('ignore')
                save_model(self.model, os.path.join(scratch, 'model.h5'))
            with open(os.path.join(scratch, 'labels.json'), 'w', encoding='utf-8') as f:
                json.dump(dict(self.head.config(), units=self.encoder.units,
                               lowercase=self.encoder.lowercase, maxlen=self.maxlen,
                               temperature=self.head.temperature),
                          f, ensure_ascii=False, indent=1)
            shutil.copyfile(self.encoder.vocab_path, os.path.join(scratch, 'vocab.txt'))

    @classmethod
    def load(cls, folder, batch_size=32, inference_only=True):
        """The Tagger saved in ``folder`` by :meth:`save`, for prediction: in the current
        precision, and under ``mixed_bfloat16`` with the encoder's weights rounded to bf16 once
        (:func:`crf_lr.model.precision.load_model`'s ``inference_only``; the same outputs).
        ``inference_only=False`` keeps the float32 weights, for a Tagger to save again exactly
        (:meth:`save` of a rounded one writes the rounded weights).

        Raises:
            FileNotFoundError naming what is missing (with a hint when ``folder`` is a run
            folder); ValueError naming a damaged file (checked before TensorFlow work:
            :func:`crf_lr.serving.model_folder.check_model_folder`) or when ``model.h5`` and
            ``labels.json`` do not belong together.
        """
        model_path, labels_path, vocab_path, meta = check_model_folder(folder)
        options = {k: v for k, v in meta.items() if k not in LABELS_KEYS + ('temperature',)}
        head = make_head(meta['head'], meta['types'], meta['scheme'], **options)
        head.temperature = float(meta.get('temperature', 1.0))     # older folders: none
        if head.labels != meta['labels']:
            raise ValueError(f'{labels_path}: labels {meta["labels"]} differ from those of a '
                             f'{meta["head"]} head on types {meta["types"]}: {head.labels}')
        model = load_model(model_path, inference_only=inference_only)   # current precision
        width = model.output_shape[1 if head.kind == 'spans' else -1]
        if width != len(head.labels):
            raise ValueError(f'{model_path} scores {width} labels but {labels_path} lists '
                             f'{len(head.labels)}: the two files come from different runs')
        if hasattr(head, 'attach'):
            head.attach(model)
        encoder = UnitEncoder(vocab_path, meta['units'], meta['lowercase'],
                              max_pieces=meta['maxlen'] - 2)      # every unit fits a window
        return cls(model, encoder, head, meta['maxlen'], batch_size)

    # -- prediction ---------------------------------------------------------------------------
    def run(self, sequences):
        """Model outputs for every window of every sequence (the expensive part).

        Args:
            sequences: list of units (str of characters, or list of words).
        Returns:
            list (per sequence) of :class:`~crf_lr.model.heads.Window` with the head's outputs.
        """
        per_sequence = self.windows(sequences)
        self.fill([window for windows in per_sequence for window in windows])
        return [[window for window, _ in windows] for windows in per_sequence]

    def windows(self, sequences):
        """Each sequence's windows as :meth:`run` cuts them, each with its token ids: a list
        (per sequence) of ``(Window, ids)``, the windows' outputs not yet filled."""
        per_sequence = []
        for units in sequences:
            per_sequence.append([])
            for offset, window in windows_of(units, self.maxlen, self.encoder, pauses=PAUSES):
                ids, starts = self.encoder.encode(window)
                per_sequence[-1].append((Window(offset, window, starts), ids))
        return per_sequence

    def fill(self, windows):
        """Run the model on ``windows`` (``[(Window, ids)]``, any sequences') in batches of
        ``batch_size`` and set each Window's ``output``."""
        if not windows:
            return
        batches = Batches([Encoded(ids) for _, ids in windows], self.batch_size, shuffle=False)
        for batch in batches:
            predicted = self.scores(batch.inputs)
            for row, w in enumerate(batch.indices):
                window = windows[w][0]
                window.output = self.head.window_output(predicted[row], window.starts[-1])

    def scores(self, inputs):
        """The model's outputs for one batch of ``inputs`` (NumPy arrays), as a NumPy array.

        What ``model.predict_on_batch`` computes, from a step traced once for batches of every
        size and length, without AutoGraph (:mod:`crf_lr.speed.tracing`) and with fusable dense
        layers (:func:`crf_lr.compat.flat_dense`) and attention's transposes in Eigen
        (:func:`crf_lr.speed.attention.einsum_transposes`: no fixed oneDNN cost per transpose,
        which one short text feels) and layer norms as one kernel each
        (:func:`crf_lr.speed.fused_kernels.prediction_kernels`), where ``predict_on_batch``
        traces for the first batch's shape and again for a second; ``predict_on_batch`` itself
        where a layer needs AutoGraph or the model has several replicas. Inputs are cast to the
        first batch's dtypes; a new ``self.model`` is traced anew.
        """
        from crf_lr.compat import flat_dense
        from crf_lr.speed.attention import einsum_transposes
        from crf_lr.speed.fused_kernels import prediction_kernels
        model = self.model
        if self._prediction is None or self._prediction[0] is not model:   # or a new model
            step, signature = None, free_signature(inputs)
            if model.distribute_strategy.num_replicas_in_sync == 1:
                with (model.distribute_strategy.scope(), flat_dense(), einsum_transposes(),
                      prediction_kernels()):
                    step = traced_without_autograph(lambda x: model(x, training=False), signature)
            self._prediction = model, step, signature
        _, step, signature = self._prediction
        if step is None:
            return np.asarray(model.predict_on_batch(inputs))
        with model.distribute_strategy.scope():
            return np.asarray(step(conformed(inputs, signature)))

    def freeze(self):
        """Prediction from now on with the model's weights as constants, where they are bf16
        (:meth:`load` under ``mixed_bfloat16``): the same scores to bf16's rounding (the graph
        optimiser may order a few ops otherwise), faster one text at a time
        (:func:`crf_lr.speed.tracing.frozen_step`; docs/performance.md, "Prediction against
        PyTorch"). Float32 weights stay variables: there it was slower. It costs seconds
        once, so a long-running process does it at start (``crf_lr.serve``); the weights are
        read then, and later changes of them are not seen. Returns whether it froze.

            >>> tagger = Tagger.load('runs/ner/model')
            >>> tagger.freeze()
            True
        """
        from crf_lr.compat import tf
        if not any(w.dtype == tf.bfloat16 for w in self.model.weights):
            return False                                   # nothing to trace for it
        if self._prediction is None or self._prediction[0] is not self.model:
            self.run([['warm', 'up'] if self.encoder.units == 'words' else 'warm up'])
        model, step, signature = self._prediction
        if step is None:
            return False
        with model.distribute_strategy.scope():
            frozen = frozen_step(step, signature)
        if frozen is None:
            return False
        self._prediction = model, frozen, signature
        return True

    def decode(self, outputs, constrain=True, marginals=False, confidences=True, readings=None):
        """:class:`Prediction` of each sequence from :meth:`run`'s outputs.

        Args:
            outputs: from :meth:`run`.
            constrain: tag heads decode with the scheme's hard constraints (Viterbi with the
                impossible transitions forbidden); span heads ignore it.
            marginals: tag heads: also give each unit's label probabilities.
            confidences: give confidences and path probabilities (False: None, and tag heads
                skip the forward-backward pass).
            readings: :meth:`read` of the windows of ``outputs`` in order, when already read
                (a server reads each batch of windows as it comes).
        """
        flat = [window for windows in outputs for window in windows]
        decoded = iter(self.read(flat, constrain, marginals, confidences)
                       if readings is None else readings)
        tagging = self.head.kind == 'tags'
        results = []
        for windows in outputs:
            local, tags, log_probability, rows = [], [], 0.0, []
            for window in windows:
                reading = next(decoded)
                # the label carries the confidence through the merge (which sorts the spans)
                local.append((window.offset, [
                    (s, e, (label, confidence)) for (s, e, label), confidence in
                    zip(reading.spans, reading.confidences or [None] * len(reading.spans))]))
                tags = None if reading.tags is None or tags is None else tags + reading.tags
                if tagging and confidences:
                    log_probability += _path_log_probability(reading)
                rows.append(reading.marginals)
            merged = merge_window_spans(local)
            results.append(Prediction(
                [(s, e, label) for s, e, (label, _) in merged], tags if tagging else None,
                [confidence for _, _, (_, confidence) in merged] if confidences else None,
                math.exp(log_probability) if tagging and confidences else None,
                _stacked(rows, len(self.head.labels)) if marginals and tagging else None,
                log_probability if tagging and confidences else None))
        return results

    def read(self, windows, constrain=True, marginals=False, confidences=True):
        """The head's :class:`~crf_lr.model.heads.Decoded` of each of ``windows`` (filled ones),
        decoded together; options as :meth:`decode`'s."""
        # only the options asked for: a user's head may define decode(windows, constrain)
        options = dict(marginals=True) if marginals else {}
        if not confidences:
            options['confidences'] = False
        return self.head.decode(windows, constrain, **options) if windows else []

    def predict(self, sequences, constrain=True):
        """Spans of each sequence: ``run`` then ``decode``; returns a list of span lists."""
        return [p.spans for p in self.decode(self.run(sequences), constrain, confidences=False)]


def _path_log_probability(reading):
    """A window's path log probability; from ``path_probability`` where a user's head sets only
    that (``-inf`` for 0)."""
    if reading.path_log_probability is not None:
        return reading.path_log_probability
    return math.log(reading.path_probability) if reading.path_probability > 0 else -math.inf


def _stacked(rows, num_labels):
    """Windows' unit marginals, one after another: (units, L)."""
    return np.concatenate(rows) if rows else np.zeros((0, num_labels))
