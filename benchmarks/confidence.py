"""Confidence beside Viterbi: marginals, entity probabilities and whole predictions with and
without confidences, timed in interleaved rounds (part of ``benchmarks/run.py``).

Two cases, each checked before it is timed:

- decoding: 32 sequences of 128 positions, 7 BIO labels (3 types) with the scheme's constraints:
  NumPy Viterbi; NumPy forward-backward marginals (``crf_lr.decoding.posteriors.Posteriors``); the
  probability of every decoded entity and path (forward-backward + one span message per entity);
  in-graph marginals (``crf_marginals``, XLA); and the CRF head's whole ``decode`` with and
  without confidences, of the same scores read as characters (one piece each) and as words
  of 1-3 pieces (a word's tag read off its pieces: the entity probabilities run a forward pass
  through each entity);
- prediction: ``Tagger.decode(Tagger.run(texts))`` of 32 texts of 126 characters (n = 128 with
  [CLS] and [SEP]) on ALBERT-tiny (4 layers, random weights: only time is measured) with a CRF
  head, with confidences and without (``confidences=False``). Target: at most 1.5x.

    $ python benchmarks/run.py --part confidence
"""
import numpy as np

from timing import interleaved, ratio_summary

BATCH, N, TYPES = 32, 128, ['LOC', 'ORG', 'PER']
TARGET = 1.5


def _windows(scores, rng=None):
    """One :class:`~crf_lr.model.heads.Window` per row of ``scores`` (B, n, L): one piece per unit,
    or (``rng``) units of 1, 2 or 3 pieces, as WordPiece cuts English words."""
    from crf_lr.model.heads import Window
    windows = []
    for row in scores:
        counts = [1] * len(row) if rng is None else rng.choice([1, 1, 1, 2, 3], size=len(row))
        starts = np.concatenate([[0], np.cumsum(counts)])
        starts = np.append(starts[starts < len(row)], len(row))
        windows.append(Window(0, ['w'] * (len(starts) - 1), starts.tolist(), row))
    return windows


def decoding_case(tf, rounds, seed=0):
    """Time decoding-level confidence against Viterbi (see the module docstring)."""
    from crf_lr.model.crf import crf_marginals
    from crf_lr.model.heads import make_head
    from crf_lr.decoding.posteriors import Posteriors, span_events
    from crf_lr.decoding.viterbi import viterbi_decode
    rng = np.random.default_rng(seed)
    head = make_head('crf', TYPES, 'BIO')
    labels = head.labels
    allowed, starts, ends = head.scheme.allowed(labels)
    emissions = rng.normal(scale=2.0, size=(BATCH, N, len(labels)))
    transitions = rng.normal(scale=0.5, size=(len(labels),) * 2)
    parameters = dict(transitions=transitions, allowed_transitions=allowed,
                      allowed_starts=starts, allowed_ends=ends)
    constrained = np.where(allowed, transitions, -1e4)
    mask = np.ones((BATCH, N), bool)

    spans = [(row, s, e, kind) for row, path in enumerate(viterbi_decode(emissions, **parameters))
             for s, e, kind in head.scheme.decode([labels[i] for i in path], strict=True)]

    def entity_probabilities():
        posteriors = Posteriors(emissions, **parameters)
        rows, begins, stops, kinds = zip(*spans)
        events = [span_events(head.scheme, labels, kind, e - s) for _, s, e, kind in spans]
        return (posteriors.span_probabilities(rows, begins, stops, events),
                [posteriors.path_probability(row, path) for row, path in enumerate(paths)])

    class Fixed:       # the head reads its CRF's parameters: give it these
        @staticmethod
        def effective_parameters(dtype):
            return tuple(None if p is None else tf.constant(p, dtype)
                         for p in (transitions, np.where(starts, 0.0, -1e4),
                                   np.where(ends, 0.0, -1e4)))
    head.crf = Fixed()
    windows, words = _windows(emissions), _windows(emissions, rng)
    paths = viterbi_decode(emissions, **parameters)
    graph_inputs = [x.astype('float32') for x in (emissions, mask, constrained,
                                                  np.where(starts, 0.0, -1e4),
                                                  np.where(ends, 0.0, -1e4))]
    in_graph = crf_marginals(*graph_inputs).numpy()
    numpy_marginals = Posteriors(emissions, **parameters).marginals()
    assert np.abs(in_graph - numpy_marginals).max() < 1e-4, 'in-graph and NumPy marginals differ'
    assert [d.spans for d in head.decode(windows)] == [
        d.spans for d in head.decode(windows, confidences=False)]
    entities = len(entity_probabilities()[0])
    calls = {
        'Viterbi (NumPy)': lambda: viterbi_decode(emissions, **parameters),
        'marginals (NumPy)': lambda: Posteriors(emissions, **parameters).marginals(),
        'entity + path probabilities (NumPy)': entity_probabilities,
        'marginals (in-graph, XLA)': lambda: crf_marginals(*graph_inputs).numpy(),
        'CRFHead.decode without confidences': lambda: head.decode(windows, confidences=False),
        'CRFHead.decode with confidences': lambda: head.decode(windows),
        'CRFHead.decode of words without confidences':
            lambda: head.decode(words, confidences=False),
        'CRFHead.decode of words with confidences': lambda: head.decode(words)}
    timings = interleaved(calls, rounds=rounds)
    return {'name': 'confidence_decoding',
            'shape': {'batch': BATCH, 'n': N, 'labels': len(labels), 'entities': entities,
                      'word_entities': sum(len(d.spans) for d in head.decode(words))},
            'timings': timings,
            'ratios': {'decode with / without confidences': ratio_summary(
                timings, 'CRFHead.decode with confidences',
                'CRFHead.decode without confidences'),
                'decode of words with / without confidences': ratio_summary(
                timings, 'CRFHead.decode of words with confidences',
                'CRFHead.decode of words without confidences')}}


def prediction_case(keras, rounds, seed=0):
    """Time whole predictions with and without confidences (see the module docstring)."""
    from crf_lr.model.encoders import load_encoder
    from crf_lr.model.heads import make_head, piece_states
    from crf_lr.data.pieces import UnitEncoder
    from crf_lr.serving.tagger import Tagger
    keras.utils.set_random_seed(seed)
    encoder, vocab, _ = load_encoder('albert-tiny-zh')
    head = make_head('crf', TYPES, 'BIO')
    model = keras.Model(encoder.inputs, head.build(piece_states(encoder)))
    tagger = Tagger(model, UnitEncoder(vocab), head, N, batch_size=BATCH)
    chars = list('中共中央总书记国家主席江泽民发表新年讲话今天天气很好我们喜欢北京')
    rng = np.random.default_rng(seed)
    texts = [''.join(rng.choice(chars, N - 2)) for _ in range(BATCH)]
    plain = tagger.decode(tagger.run(texts), confidences=False)
    full = tagger.decode(tagger.run(texts))
    assert [p.spans for p in plain] == [p.spans for p in full]
    calls = {'predict without confidences':
             lambda: tagger.decode(tagger.run(texts), confidences=False),
             'predict with confidences': lambda: tagger.decode(tagger.run(texts))}
    timings = interleaved(calls, rounds=rounds)
    return {'name': 'confidence_prediction',
            'shape': {'batch': BATCH, 'n': N, 'layers': 4,
                      'entities': sum(len(p.spans) for p in full)},
            'timings': timings,
            'ratios': {'with / without confidences': ratio_summary(
                timings, 'predict with confidences', 'predict without confidences')},
            'target': TARGET}


def report(cases, ranged, ratio_cell, markdown_table):
    """Markdown tables of the two cases (helpers from run.py)."""
    out = []
    for case in cases:
        shape = case['shape']
        title = ('Decoding with confidence' if case['name'] == 'confidence_decoding' else
                 f"Prediction with confidence (ALBERT-tiny, {shape['layers']} layers)")
        out += [f"### {title}: batch {shape['batch']}, n = {shape['n']}"
                f"{', ' + str(shape['labels']) + ' labels' if 'labels' in shape else ''}, "
                f"{shape['entities']} entities"
                + (f" ({shape['word_entities']} as words)" if 'word_entities' in shape else ''),
                '',
                markdown_table(['what', 'ms [min–max]', 'load'],
                               [[name, ranged(t), t['load_before']]
                                for name, t in case['timings'].items()]), '',
                'Per-round ratio: ' + ', '.join(f'{k} = {ratio_cell(v)}'
                                                for k, v in case['ratios'].items())
                + (f" (target ≤ {case['target']})" if 'target' in case else ''), '']
    return '\n'.join(out)
