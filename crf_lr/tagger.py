"""Encoder + head models of the task scripts, their resumable training loop, and inference.

The model reads ``[CLS] pieces [SEP]`` and scores the pieces only: :class:`PieceStates` drops
[CLS] and masks [SEP] and padding, so neither ever reaches a loss, a metric or a decoder.
Heads: ``crf`` (Dense + ConditionalRandomField), ``softmax`` (Dense + softmax), ``global_pointer``
and ``efficient_global_pointer`` (span scores). :class:`Tagger` turns texts of any length into spans
(windows cut at sentence ends, predictions stitched back) and is what ``crf_lr.predict`` loads.

    >>> encoder, vocab, info = load_encoder('albert-tiny-zh', layers=1)
    >>> model, loss, metrics = build_model(encoder, 'crf', num_labels=4, crf_lr_multiplier=100)
    >>> tagger = Tagger(model, UnitEncoder(vocab), list('sbme'), 'crf', 'SEG', maxlen=128)
"""
import json
import os
import shutil
import tempfile
import time
import warnings
from functools import partial

import numpy as np

from crf_lr.batching import Batches, Encoded
from crf_lr.compat import keras, tf
from crf_lr.crf import ConditionalRandomField
from crf_lr.global_pointer import EfficientGlobalPointer, GlobalPointer
from crf_lr.losses import sparse_global_pointer_crossentropy, sparse_global_pointer_f1
from crf_lr.optimizers import LayerwiseAdam
from crf_lr.spans import decode_spans, pad_sparse_targets, sparse_targets
from crf_lr.tagging import (allowed_transitions, merge_window_spans, pieces_to_word_labels,
                            spans_to_windows, split_into_windows, spread_labels, tags_to_spans,
                            tags_to_words)
from crf_lr.training import UnitEncoder, piece_spans_to_unit_spans, unit_spans_to_piece_spans
from crf_lr.viterbi import DISALLOWED_SCORE, viterbi_decode

TAG_HEADS = ('crf', 'softmax')
SPAN_HEADS = ('global_pointer', 'efficient_global_pointer')
PACKAGED_ENCODERS = ('albert-tiny-zh', 'minilm-en')


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


keras.utils.get_custom_objects()['PieceStates'] = PieceStates


# ---------------------------------------------------------------------------------------------
# Encoder and model


def _config_in(folder):
    for name in ('bert_config.json', 'albert_config.json', 'config.json'):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise FileNotFoundError(f'{folder}: no bert_config.json / albert_config.json / config.json')


def _model_type(config_path):
    with open(config_path, encoding='utf-8') as f:
        config = json.load(f)
    albert = 'albert' in os.path.basename(config_path) or config.get('model_type') == 'albert'
    return 'albert' if albert or 'embedding_size' in config else 'bert'


def random_config(layers, hidden, vocab_size, heads=None):
    """A BERT config dict for a randomly initialised encoder (intermediate size 4 x hidden).

    ``heads`` defaults to the first of 12, 8, 4, 2, 1 that divides ``hidden`` into heads of >= 8.
    """
    if heads is None:
        heads = next(h for h in (12, 8, 4, 2, 1) if hidden % h == 0 and hidden // h >= 8
                     or h == 1)
    if hidden % heads:
        raise ValueError(f'hidden size {hidden} is not divisible by {heads} attention heads')
    return dict(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=4 * hidden, hidden_act='gelu',
                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02)


def _vocab_size(path):
    with open(path, encoding='utf-8') as f:
        return sum(1 for _ in f)


def load_encoder(spec, layers=None, vocab=None):
    """Build a bert4keras encoder from a specification (see ``--encoder`` of the task scripts).

    Args:
        spec: 'albert-tiny-zh' / 'minilm-en' (packaged, converted once into a cache), a folder
            with a converted checkpoint (config JSON, TF checkpoint, vocab.txt), a config JSON
            (random initialisation), or 'random:LAYERS:HIDDEN[:HEADS]' (random BERT).
        layers: int or None, keep only the first k transformer layers.
        vocab: vocab.txt for a random encoder (default: beside the config, else ALBERT-tiny's).
    Returns:
        ``(encoder, vocab_path, info)``: a keras.Model with inputs ``[token_ids, segment_ids]``
        and output ``(batch, n, hidden)``; the vocabulary path; a dict describing the encoder.

        >>> encoder, vocab_path, info = load_encoder('random:1:312')
    """
    from crf_lr.finetune import build_encoder
    from crf_lr.pretrained import packaged_checkpoint, packaged_source
    checkpoint, scratch = None, None
    if spec in PACKAGED_ENCODERS:
        converted = packaged_checkpoint(spec)
        config_path, checkpoint, vocab_path = converted[:3]
        model_type = converted.model_type
    elif isinstance(spec, str) and spec.startswith('random:'):
        try:
            sizes = [int(part) for part in spec.split(':')[1:]]
            if len(sizes) not in (2, 3) or min(sizes) < 1:
                raise ValueError
        except ValueError:
            raise ValueError(f"--encoder {spec!r}: expected 'random:LAYERS:HIDDEN' or "
                             f"'random:LAYERS:HIDDEN:HEADS' with positive integers") from None
        vocab_path = vocab or os.path.join(packaged_source('albert-tiny-zh'), 'vocab.txt')
        scratch = tempfile.mkdtemp(prefix='crf_lr-config-')
        config_path = os.path.join(scratch, 'bert_config.json')
        with open(config_path, 'w', encoding='utf-8') as f:
            json.dump(random_config(*sizes[:2], _vocab_size(vocab_path), *sizes[2:]), f)
        model_type = 'bert'
    elif isinstance(spec, str) and os.path.isdir(spec):
        config_path = _config_in(spec)
        checkpoint = tf.train.latest_checkpoint(spec)
        if checkpoint is None:
            indexes = sorted(f for f in os.listdir(spec) if f.endswith('.index'))
            if not indexes:
                raise FileNotFoundError(f'{spec}: no TF checkpoint (*.index); to train from a '
                                        f'random initialisation pass the config JSON instead')
            checkpoint = os.path.join(spec, indexes[0][:-len('.index')])
        vocab_path = vocab or os.path.join(spec, 'vocab.txt')
        model_type = _model_type(config_path)
    elif isinstance(spec, str) and spec.endswith('.json') and os.path.isfile(spec):
        config_path = spec
        vocab_path = vocab or os.path.join(os.path.dirname(spec), 'vocab.txt')
        model_type = _model_type(config_path)
    else:
        raise ValueError(f'--encoder {spec!r}: expected one of {PACKAGED_ENCODERS}, a converted '
                         f"checkpoint folder, a config .json, or 'random:LAYERS:HIDDEN' "
                         f'(no such file or folder)')
    if not os.path.isfile(vocab_path):
        raise FileNotFoundError(f'vocabulary not found: {vocab_path} (pass --vocab)')
    try:
        encoder = build_encoder(config_path, checkpoint, model=model_type, num_layers=layers)
        with open(config_path, encoding='utf-8') as f:
            config = json.load(f)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    info = dict(encoder=spec, model_type=model_type, pretrained=checkpoint is not None,
                layers=layers or config['num_hidden_layers'], hidden=config['hidden_size'],
                parameters=int(encoder.count_params()))
    return encoder, vocab_path, info


def build_model(encoder, head, num_labels, crf_lr_multiplier=1.0, constraints=None,
                head_size=64):
    """Put a head on an encoder.

    Args:
        encoder: keras.Model from :func:`load_encoder`.
        head: 'crf', 'softmax', 'global_pointer' or 'efficient_global_pointer'.
        num_labels: number of tags (tag heads) or entity types (span heads).
        crf_lr_multiplier: float, the CRF's ``lr_multiplier``.
        constraints: optional ``(allowed, starts, ends)`` bool arrays for the CRF (training and
            decoding), e.g. from ``crf_lr.tagging.allowed_transitions``.
        head_size: GlobalPointer head size.
    Returns:
        ``(model, loss, metrics)`` to compile: the model's output is emissions (batch, n-1, L)
        with -inf padding rows (crf), probabilities (softmax) or span scores (batch, types, n-1,
        n-1). Targets: label ids (batch, n-1) for tag heads, ``(batch, types, E, 2)`` inclusive
        piece index pairs for span heads.

        >>> model, loss, metrics = build_model(encoder, 'crf', 4, crf_lr_multiplier=100)
        >>> model.compile(LayerwiseAdam(1e-3), loss=loss, metrics=metrics)
    """
    states = PieceStates(name='Piece-States')([encoder.output, encoder.inputs[0]])
    if head == 'crf':
        allowed, starts, ends = constraints if constraints is not None else (None,) * 3
        crf = ConditionalRandomField(crf_lr_multiplier, allowed, starts, ends, name='CRF')
        output = crf(keras.layers.Dense(num_labels, name='Tag-Scores')(states))
        loss, metrics = crf.sparse_loss, [crf.sparse_accuracy]
    elif head == 'softmax':
        output = keras.layers.Dense(num_labels, activation='softmax', name='Tag-Scores')(states)
        loss, metrics = 'sparse_categorical_crossentropy', ['sparse_categorical_accuracy']
    elif head in SPAN_HEADS:
        layer = GlobalPointer if head == 'global_pointer' else EfficientGlobalPointer
        output = layer(num_labels, head_size, name='Span-Scores')(states)
        loss, metrics = sparse_global_pointer_crossentropy, [sparse_global_pointer_f1]
    else:
        raise ValueError(f'unknown head {head!r}: expected one of {TAG_HEADS + SPAN_HEADS}')
    return keras.Model(encoder.inputs, output), loss, metrics


def build_optimizer(args, num_samples):
    """The ``LayerwiseAdam`` the task scripts' flags describe.

    Args:
        args: parsed flags (``lr``, ``bias_correction``, ``warmup_proportion``, ``epochs``,
            ``batch_size``).
        num_samples: number of training windows (sets the schedule's length).
    Returns:
        LayerwiseAdam: constant rate, or linear warmup over ``warmup_proportion`` of all steps
        then linear decay to 0.
    """
    total = -(-num_samples // args.batch_size) * args.epochs
    warmup = int(round(args.warmup_proportion * total))
    schedule = dict(warmup_steps=warmup, total_steps=total) if args.warmup_proportion else {}
    return LayerwiseAdam(args.lr, bias_correction=args.bias_correction, **schedule)


def head_parameters(model):
    """Number of parameters after the encoder (Dense + CRF, or the GlobalPointer layer)."""
    names = ('Tag-Scores', 'CRF', 'Span-Scores')
    return int(sum(layer.count_params() for layer in model.layers if layer.name in names))


def find_crf(model):
    """The model's ConditionalRandomField layer, or None."""
    found = [layer for layer in model.layers if isinstance(layer, ConditionalRandomField)]
    return found[0] if found else None


# ---------------------------------------------------------------------------------------------
# Samples and batches


def windows_of(units, maxlen, encoder, spans=()):
    """Split a sequence of units into ``(offset, units)`` windows of at most ``maxlen - 2``
    pieces (room for [CLS] and [SEP]), cutting at sentence ends and never inside ``spans``."""
    return split_into_windows(units, maxlen - 2, spans=spans, length=encoder.length)


def make_samples(examples, encoder, maxlen, head, labels, scheme='BIO'):
    """Encode training examples as windows of token ids with their targets.

    Args:
        examples: iterable of ``(units, tags, spans)``: units (str of characters or list of
            words), one tag per unit (tag heads), and ``(start, end, label)`` unit spans
            (span heads; also used so windows never cut a span or a word).
        encoder: UnitEncoder; maxlen: int, tokens per window including [CLS] and [SEP].
        head: head name; labels: tag labels (tag heads) or type names (span heads).
        scheme: the tags' scheme ('BIO', 'SEG', ...); a unit's tag spreads to all its pieces
            (``crf_lr.tagging.spread_labels``).
    Returns:
        list of ``(token_ids, target)``: target = list of label ids per piece (tag heads) or
        list of piece spans (span heads).
    """
    index = {label: i for i, label in enumerate(labels)}
    samples = []
    for units, tags, spans in examples:
        windows = windows_of(units, maxlen, encoder, spans)
        local_spans = spans_to_windows(windows, spans)
        for (offset, window), window_spans in zip(windows, local_spans):
            token_ids, starts = encoder.encode(window)
            if head in TAG_HEADS:
                piece_tags = spread_labels(tags[offset:offset + len(window)], np.diff(starts),
                                           scheme=scheme)
                unknown = sorted(set(piece_tags) - set(index))
                if unknown:
                    raise ValueError(f'tags {unknown} are not among the labels {labels}')
                samples.append((token_ids, [index[t] for t in piece_tags]))
            else:
                samples.append((token_ids, unit_spans_to_piece_spans(window_spans, starts)))
    return samples


def _targets(head, labels, targets, n):
    """Batch targets for sequences padded to ``n`` tokens (so ``n - 1`` scored positions):
    label ids padded with 0 (tag heads; the model's mask keeps padding out of the loss), or
    inclusive piece pairs padded with (-1, -1) (span heads)."""
    if head in SPAN_HEADS:
        return pad_sparse_targets([sparse_targets(spans, n - 1, list(labels)) for spans in targets])
    padded = np.zeros((len(targets), n - 1), dtype=np.int32)
    for row, label_ids in enumerate(targets):
        padded[row, :len(label_ids)] = label_ids
    return padded


def epoch_batches(samples, batch_size, seed, epoch, head, labels):
    """The batches of one epoch, as ``crf_lr.batching.Batches`` orders them (seeded shuffle,
    length buckets) with the seed ``(seed, epoch)``, so a resumed run sees the same order.

    Returns:
        list of ``(inputs, targets)``: ``[token_ids, segment_ids]`` int32 (batch, n), and
        targets as :func:`build_model` expects them.
    """
    items = [Encoded(token_ids, labels=target) for token_ids, target in samples]
    batches = Batches(items, batch_size, label_fn=partial(_targets, head, labels),
                      seed=[seed, epoch])
    return [(batch.inputs, batch.labels) for batch in batches]


# ---------------------------------------------------------------------------------------------
# Inference


class Tagger:
    """A trained model with its label map: texts of any length -> spans.

    Args:
        model: keras.Model from :func:`build_model` (or loaded by :meth:`load`).
        encoder: UnitEncoder.
        labels: tag labels (tag heads, e.g. ``['s', 'b', 'm', 'e']`` or ``label_list(types)``)
            or entity type names (span heads).
        head: head name; scheme: 'SEG' or a flat NER scheme ('BIO'); maxlen: tokens per window.
        batch_size: windows per prediction batch.

        >>> tagger = Tagger.load('runs/cws/model')
        >>> tagger.predict(['今天天气很好。'])          # [[(0, 2, 'w'), (2, 4, 'w'), ...]]
    """

    def __init__(self, model, encoder, labels, head, scheme, maxlen, batch_size=32):
        if head not in TAG_HEADS + SPAN_HEADS:
            raise ValueError(f'unknown head {head!r}')
        self.model, self.encoder, self.labels = model, encoder, list(labels)
        self.head, self.scheme, self.maxlen, self.batch_size = head, scheme, maxlen, batch_size
        self.crf = find_crf(model)

    # -- saving -------------------------------------------------------------------------------
    def save(self, folder):
        """Write ``model.h5``, ``labels.json`` (labels, head, scheme, units, maxlen) and
        ``vocab.txt`` into ``folder`` (replacing what was there)."""
        os.makedirs(folder, exist_ok=True)
        with warnings.catch_warnings():       # "HDF5 is legacy": it is the format bert4keras loads
            warnings.simplefilter('ignore')
            self.model.save(os.path.join(folder, 'model.h5'), include_optimizer=False)
        with open(os.path.join(folder, 'labels.json'), 'w', encoding='utf-8') as f:
            json.dump(dict(labels=self.labels, head=self.head, scheme=self.scheme,
                           units=self.encoder.units, lowercase=self.encoder.lowercase,
                           maxlen=self.maxlen), f, ensure_ascii=False, indent=1)
        if os.path.abspath(self.encoder.vocab_path) != os.path.abspath(
                os.path.join(folder, 'vocab.txt')):
            shutil.copyfile(self.encoder.vocab_path, os.path.join(folder, 'vocab.txt'))

    @classmethod
    def load(cls, folder, batch_size=32):
        """The Tagger saved in ``folder`` by :meth:`save`."""
        paths = [os.path.join(folder, name) for name in ('model.h5', 'labels.json', 'vocab.txt')]
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise FileNotFoundError(f'{folder} is not a saved model folder: missing '
                                    f'{", ".join(os.path.basename(p) for p in missing)} (expected '
                                    f'the model/ folder of a task script run)')
        with open(paths[1], encoding='utf-8') as f:
            meta = json.load(f)
        model = keras.models.load_model(paths[0], compile=False)
        encoder = UnitEncoder(paths[2], meta['units'], meta['lowercase'])
        return cls(model, encoder, meta['labels'], meta['head'], meta['scheme'], meta['maxlen'],
                   batch_size)

    # -- prediction ---------------------------------------------------------------------------
    def run(self, sequences):
        """Model outputs for every window of every sequence (the expensive part).

        Args:
            sequences: list of units (str of characters, or list of words).
        Returns:
            an opaque object for :meth:`decode`: per sequence, its windows with their
            ``starts`` and outputs (emissions (pieces, L), or the decoded piece spans).
        """
        windows = []        # (sequence index, offset, units, token_ids, starts)
        for k, units in enumerate(sequences):
            for offset, window in windows_of(units, self.maxlen, self.encoder):
                windows.append((k, offset, window) + self.encoder.encode(window))
        outputs = [None] * len(windows)
        if not windows:
            return [[] for _ in sequences]
        batches = Batches([Encoded(w[3]) for w in windows], self.batch_size, shuffle=False)
        for batch in batches:
            predicted = self.model.predict_on_batch(batch.inputs)
            for row, w in enumerate(batch.indices):
                pieces = windows[w][4][-1]
                if self.head in TAG_HEADS:
                    outputs[w] = np.asarray(predicted[row, :pieces], dtype=np.float64)
                else:
                    outputs[w] = decode_spans(predicted[row], lengths=pieces,
                                              labels=self.labels)
        per_sequence = [[] for _ in sequences]
        for (k, offset, window, _, starts), output in zip(windows, outputs):
            per_sequence[k].append((offset, window, starts, output))
        return per_sequence

    def _paths(self, emissions, constrain):
        """Label-id paths of a list of (pieces, L) emission arrays."""
        if self.head == 'softmax' and not constrain:
            return [e.argmax(-1) for e in emissions]
        allowed = allowed_transitions(self.labels, self.scheme) if constrain else (None,) * 3
        if self.crf is not None:
            trans, start, end = (None if p is None else p.numpy()
                                 for p in self.crf.effective_parameters('float64'))
            scores = emissions
        else:                      # softmax with constraints: Viterbi over log-probabilities
            trans, start, end = np.zeros((len(self.labels),) * 2), None, None
            scores = [np.log(np.maximum(e, 1e-30)) for e in emissions]
        paths = []
        for begin in range(0, len(scores), 256):
            group = scores[begin:begin + 256]
            n = max(len(e) for e in group)
            batch = np.zeros((len(group), n, len(self.labels)))
            for row, e in enumerate(group):
                batch[row, :len(e)] = np.maximum(e, DISALLOWED_SCORE)
            paths += viterbi_decode(batch, trans, lengths=[len(e) for e in group], start=start,
                                    end=end, allowed_transitions=allowed[0],
                                    allowed_starts=allowed[1], allowed_ends=allowed[2])
        return paths

    def decode(self, outputs, constrain=False):
        """Spans (and unit tags) from :meth:`run`'s outputs.

        Args:
            outputs: from :meth:`run`.
            constrain: decode tag heads with the scheme's hard constraints (CRF: Viterbi with
                impossible transitions forbidden; softmax: Viterbi over log-probabilities).
        Returns:
            list (per sequence) of ``(spans, tags)``: ``(start, end, label)`` unit spans, end
            exclusive (words are labelled 'w' in the SEG scheme), and one tag per unit (None for
            span heads).
        """
        flat = [w for windows in outputs for w in windows]
        paths = iter(self._paths([w[3] for w in flat], constrain)
                     if self.head in TAG_HEADS else [])
        results = []
        for windows in outputs:
            local, tags = [], [] if self.head in TAG_HEADS else None
            for offset, window, starts, output in windows:
                if self.head in SPAN_HEADS:
                    local.append((offset, piece_spans_to_unit_spans(output, starts)))
                    continue
                piece_tags = [self.labels[i] for i in next(paths)]
                window_tags = pieces_to_word_labels(np.repeat(np.arange(len(window)),
                                                              np.diff(starts)),
                                                    piece_tags, self.scheme, n_words=len(window))
                tags += window_tags
                local.append((offset, self._tag_spans(window, window_tags)))
            results.append((merge_window_spans(local), tags))
        return results

    def _tag_spans(self, units, tags):
        if self.scheme == 'SEG':
            spans, begin = [], 0
            for word in tags_to_words(list(units), tags):
                spans.append((begin, begin + len(word), 'w'))
                begin += len(word)
            return spans
        return tags_to_spans(tags, self.scheme, strict=True)

    def predict(self, sequences, constrain=False):
        """Spans of each sequence: ``run`` then ``decode``; returns a list of span lists."""
        return [spans for spans, _ in self.decode(self.run(sequences), constrain)]


# ---------------------------------------------------------------------------------------------
# Training loop


def train(model, run, batches_for_epoch, evaluate, epochs, metric, tagger, extra=None,
          progress=True):
    """Train epoch by epoch, evaluating, logging and checkpointing after each; resumable.

    Args:
        model: a compiled keras.Model.
        run: ``crf_lr.training.RunLog``; its finished epochs are skipped after restoring the
            model and optimiser state from its checkpoint.
        batches_for_epoch: function epoch (0-based) -> list of ``(inputs, targets)``.
        evaluate: function epoch (1-based) -> dict of JSON-serialisable results (must hold
            ``metric``).
        epochs: total number of epochs.
        metric: name of the figure that picks the best epoch (saved to ``run.model_dir``).
        tagger: the Tagger saved when ``metric`` improves.
        extra: dict added to ``results.json`` (e.g. data scale, head parameter count).
        progress: show a tqdm bar per epoch.
    Returns:
        the results dict written to ``results.json``.
    """
    from tqdm import tqdm
    done = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=done)
    if run.finished_epochs:
        checkpoint.read(run.checkpoint_prefix).expect_partial()
        run.truncate(int(done.numpy()))
        print(f'resuming {run.output} after epoch {int(done.numpy())}')
    results = run.write_results(metric, **(extra or {}))
    for epoch in range(run.finished_epochs, epochs):
        batches = batches_for_epoch(epoch)
        windows = sum(len(targets) for _, targets in batches)
        losses, started = [], time.time()
        bar = tqdm(batches, desc=f'epoch {epoch + 1}/{epochs}', disable=not progress,
                   mininterval=2, leave=False)
        for inputs, targets in bar:
            loss = float(model.train_on_batch(inputs, targets, return_dict=True)['loss'])
            if not np.isfinite(loss):
                raise FloatingPointError(f'epoch {epoch + 1}, step {len(losses) + 1}: the loss '
                                         f'is {loss} (lower --lr?)')
            losses.append(loss)
            bar.set_postfix(loss=f'{np.mean(losses[-50:]):.4f}', refresh=False)
        train_seconds = time.time() - started
        started = time.time()
        scores = evaluate(epoch + 1)
        record = dict(epoch=epoch + 1, loss=float(np.mean(losses)), steps=len(losses),
                      train_seconds=round(train_seconds, 2),
                      train_windows_per_second=round(windows / max(train_seconds, 1e-9), 2),
                      eval_seconds=round(time.time() - started, 2), **scores,
                      step_losses=[round(x, 5) for x in losses])
        best = run.best(metric)
        if best is None or scores[metric] > best[metric]:
            tagger.save(run.model_dir)
        run.append(record)
        done.assign(epoch + 1)
        checkpoint.write(run.checkpoint_prefix)
        results = run.write_results(metric, **(extra or {}))
        print(f'epoch {epoch + 1}: loss {record["loss"]:.4f}, {metric} {scores[metric]:.4f} '
              f'(best {results["best"]:.4f} at epoch {results["best_epoch"]}), '
              f'{train_seconds:.0f}s training')
    return results
