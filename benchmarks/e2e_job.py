"""The job of the end-to-end benchmark (``end_to_end.py``): one corpus encoded once by crf_lr, so
that crf_lr and the PyTorch stack train on the very same batches, labels and order, start from the
same head weights, predict on the same batches, and are scored by the same code.

    >>> job = prepare(data.train, data.test, data.types, 'words', packaged_source('minilm-en'),
    ...               'minilm-en', lr=1e-4, epochs=3, seed=0)
    >>> job['epochs'][0][0]    # ([token_ids, segment_ids] int32 (32, n), labels int32 (32, n - 1))
    >>> f1 = test_f1(job, paths) # paths: one label-id list per test window, batch by batch

Word-piece labelling is crf_lr's (``crf_lr.training.loop.make_samples``: a word's tag goes to all
its pieces; the first piece's prediction is the word's), the order
``crf_lr.training.loop.epoch_batches``'s, the prediction batches those
``crf_lr.serving.tagger.Tagger.run`` makes. Targets and scores are per piece: ``[CLS]`` dropped,
``[SEP]`` and padding masked (``crf_lr.model.heads.PieceStates``).
"""
import os

import numpy as np

LR_MULTIPLIER = 100     # the CRF's transitions learn at 100x the main rate (task_ner's default)
STEP_SHAPE = (32, 128)         # the fixed batch of the step timing (issue 31's shape)


def replay_tagger(vocab, units, types, maxlen, batch_size, scores):
    """A :class:`crf_lr.serving.tagger.Tagger` whose model outputs come from ``scores`` (a callable
    ``inputs -> (batch, n - 1, L)``): to record the prediction batches, and to score paths that
    another process predicted, with crf_lr's own windowing, decoding and span merging (its head is
    a softmax head: one-hot outputs decode to their own path)."""
    from crf_lr.model.heads import make_head
    from crf_lr.data.pieces import UnitEncoder
    from crf_lr.serving.tagger import Tagger

    class Replay(Tagger):
        def scores(self, inputs):
            return scores(inputs)
    return Replay(None, UnitEncoder(vocab, units), make_head('softmax', types, 'BIO'), maxlen,
                  batch_size)


def head_weights(hidden, labels, seed):
    """The head's first weights, the same on both sides: Dense kernel ``(hidden, labels)`` and CRF
    transitions ``(labels, labels)`` (Glorot-uniform, seeded), Dense bias zeros (float32)."""
    rng = np.random.default_rng([seed, 31])

    def glorot(rows, cols):
        limit = np.sqrt(6.0 / (rows + cols))
        return rng.uniform(-limit, limit, (rows, cols)).astype(np.float32)
    return {'kernel': glorot(hidden, labels), 'bias': np.zeros(labels, np.float32),
            'trans': glorot(labels, labels)}


def prepare(train, test, types, units, hf_folder, encoder, lr, epochs, seed, maxlen=128,
            batch_size=32, batch1_sentences=100):
    """The job dict of one seed (see the module docstring); ``train`` / ``test``: crf_lr examples
    (``.tokens``, ``.tags``, ``.spans``); ``encoder``: crf_lr's ``load_encoder`` spec of the same
    weights as the Hugging Face folder ``hf_folder``."""
    import json

    from crf_lr.model.heads import make_head
    from crf_lr.data.pieces import UnitEncoder
    from crf_lr.training.loop import epoch_batches, make_samples
    head = make_head('crf', types, 'BIO')        # softmax: the same labels and targets
    vocab = os.path.join(hf_folder, 'vocab.txt')
    encoder_units = UnitEncoder(vocab, units)
    samples = make_samples([(e.tokens, e.tags, e.spans) for e in train], encoder_units, maxlen,
                           head)
    with open(os.path.join(hf_folder, 'config.json'), encoding='utf-8') as f:
        config = json.load(f)
    tokens = [e.tokens for e in test]
    tagger_args = (vocab, units, list(types), maxlen)
    job = dict(hf_folder=hf_folder, encoder=encoder, types=list(types), labels=head.labels,
               units=units, maxlen=maxlen, batch_size=batch_size, lr=lr, seed=seed,
               hidden=config['hidden_size'], vocab=vocab, train_sentences=len(train),
               train_windows=len(samples), test_tokens=tokens,
               test_spans=[list(e.spans) for e in test],
               epochs=[epoch_batches(samples, batch_size, seed, epoch, head)
                       for epoch in range(epochs)],
               predict={size: _recorded_batches(tagger_args + (size,), part)
                        for size, part in ((32, tokens), (1, tokens[:batch1_sentences]))},
               predict_sentences={32: len(tokens), 1: len(tokens[:batch1_sentences])},
               head=head_weights(config['hidden_size'], len(head.labels), seed))
    rng = np.random.default_rng([seed, 32])
    rows, n = STEP_SHAPE
    vocab_size = config['vocab_size']
    ids = np.concatenate([np.full((rows, 1), encoder_units.cls),
                          rng.integers(vocab_size // 10, vocab_size, (rows, n - 2)),
                          np.full((rows, 1), encoder_units.sep)], axis=1).astype(np.int32)
    job['step_batch'] = ([ids, np.zeros_like(ids)],
                         rng.integers(0, len(head.labels), (rows, n - 1)).astype(np.int32))
    return job


def _recorded_batches(tagger_args, tokens):
    """The input batches ``Tagger.run`` predicts on for ``tokens``, in its order."""
    recorded = []
    labels = 2 * len(tagger_args[2]) + 1

    def record(inputs):
        recorded.append([np.asarray(x) for x in inputs])
        return np.zeros(inputs[0].shape + (labels,), np.float32)[:, 1:]
    replay_tagger(*tagger_args, record).run(tokens)
    return recorded


def piece_lengths(token_ids):
    """Pieces per row of a batch of token ids ([CLS] pieces [SEP] padding): ``(batch,)`` int."""
    return (np.asarray(token_ids) != 0).sum(axis=1) - 2


def test_f1(job, paths):
    """Strict span F1 on the job's test sentences of ``paths`` (per prediction batch of size 32, a
    list of per-window label-id lists), decoded and merged by crf_lr's ``Tagger.decode``."""
    from crf_lr.evaluation.metrics import span_scores
    batches = iter(paths)
    labels = len(job['labels'])

    def replay(inputs):
        one_hot = np.zeros((inputs[0].shape[0], inputs[0].shape[1] - 1, labels), np.float32)
        for row, path in enumerate(next(batches)):
            one_hot[row, np.arange(len(path)), path] = 1.0
        return one_hot
    tagger = replay_tagger(job['vocab'], job['units'], job['types'], job['maxlen'], 32, replay)
    predicted = tagger.decode(tagger.run(job['test_tokens']), constrain=False)
    return span_scores(job['test_spans'], [p.spans for p in predicted])['f1']
