"""Heads as objects: the registry, targets, and decoding (flat spans without overlaps, nested on
request), against brute force and hand-made cases. The end-to-end runs through the task scripts
(a CRF subclass, a fifth head registered from outside) are in test_examples.py."""
import itertools

import numpy as np
import pytest

import crf_lr  # noqa: F401  (environment before TensorFlow)
from crf_lr.model.heads import (HEADS, CRFHead, EfficientGlobalPointerHead, SoftmaxHead, Window,
                                make_head, register_head)
from crf_lr.decoding.spans import non_overlapping, outermost
from helpers.crf_oracles import stable_seed


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


def test_non_overlapping_keeps_the_best_scoring_flat_set_greedily():
    """Brute force of the greedy rule: a span is kept iff no kept span with a higher score (ties:
    earlier, then shorter) overlaps it; the result never overlaps."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        spans = {(int(s), int(s + rng.integers(1, 4)), str(rng.choice(['A', 'B'])))
                 for s in rng.integers(0, 8, rng.integers(1, 7))}
        scored = [(span, float(rng.choice([0.5, 1.0, 2.0, rng.normal()]))) for span in spans]
        kept = non_overlapping(scored)
        assert all(not _overlap(a, b) for a, b in itertools.combinations(kept, 2))
        order = sorted(scored, key=lambda item: (-item[1], item[0][0], item[0][1]))
        expected = []
        for span, _ in order:
            if not any(_overlap(span, other) for other in expected):
                expected.append(span)
        assert kept == sorted(expected)
    assert non_overlapping([((0, 3, 'ORG'), 2.0), ((1, 2, 'LOC'), 5.0), ((3, 4, 'PER'), 1.0)]) == [
        (1, 2, 'LOC'), (3, 4, 'PER')]


def test_outermost_drops_exactly_the_nested_spans():
    assert outermost([(0, 4, 'ORG'), (0, 2, 'LOC'), (5, 6, 'PER'), (5, 6, 'LOC')]) == [
        (0, 4, 'ORG'), (5, 6, 'LOC')]
    assert outermost([]) == []


def test_span_heads_decode_flat_by_default_and_nested_on_request():
    """Two overlapping predictions (one nested in the other) and a separate one: flat keeps the
    higher-scoring of the pair, nested keeps all; piece spans come back as unit spans."""
    scores = np.full((2, 5, 5), -10.0)
    scores[0, 0, 3] = 2.0                  # type A over pieces 0..3
    scores[1, 1, 2] = 3.0                  # type B over pieces 1..2, inside it, higher score
    scores[1, 4, 4] = 1.0
    starts = [0, 1, 2, 3, 4, 5]             # one piece per unit
    results = {}
    for flat in (True, False):
        head = make_head('efficient_global_pointer', ['A', 'B'], flat=flat)
        window = Window(0, 'abcde', starts, head.window_output(scores, 5))
        results[flat] = head.decode([window])[0]
    assert results[True].spans == [(1, 3, 'B'), (4, 5, 'B')] and results[True].tags is None
    assert results[False].spans == [(0, 4, 'A'), (1, 3, 'B'), (4, 5, 'B')]
    logistic = lambda x: 1 / (1 + np.exp(-x))                        # noqa: E731
    np.testing.assert_allclose(results[True].confidences, logistic(np.array([3.0, 1.0])))
    np.testing.assert_allclose(results[False].confidences, logistic(np.array([2.0, 3.0, 1.0])))
    head.temperature = 2.0
    np.testing.assert_allclose(head.decode([window])[0].confidences,
                               logistic(np.array([1.0, 1.5, 0.5])))


def test_span_heads_return_unit_spans_of_multi_piece_words():
    head = make_head('global_pointer', ['X'])
    scores = np.full((1, 4, 4), -5.0)
    scores[0, 1, 2] = 1.0                  # pieces 1..2 = the second word (two pieces)
    scores[0, 0, 1] = 0.5                  # ends inside a word: not a unit span, dropped
    window = Window(0, ['a', 'bc', 'd'], [0, 1, 3, 4], head.window_output(scores, 4))
    assert head.decode([window])[0].spans == [(1, 2, 'X')]


def test_tag_head_targets_spread_unit_tags_to_pieces_and_pad():
    head = make_head('crf', ['PER'], 'BIO')
    assert head.labels == ['O', 'B-PER', 'I-PER']
    target = head.target(['B-PER', 'O'], [(0, 1, 'PER')], [0, 2, 3])     # first unit: 2 pieces
    assert target == [1, 2, 0]
    batch = head.batch_targets([target, [0]], n=5)
    assert batch.tolist() == [[1, 2, 0, 0], [0, 0, 0, 0]] and batch.dtype == np.int32
    with pytest.raises(ValueError, match="tags \\['B-LOC'\\] are not among the labels"):
        head.target(['B-LOC'], [], [0, 1])


def test_span_head_targets_are_piece_pairs_padded_with_minus_one():
    head = make_head('efficient_global_pointer', ['A', 'B'])
    target = head.target(None, [(1, 2, 'B')], [0, 1, 3, 4])
    assert target == [(1, 3, 'B')]
    batch = head.batch_targets([target, []], n=6)
    assert batch.shape == (2, 2, 1, 2)
    assert batch[0, 1, 0].tolist() == [1,
                                       2] and (batch[0, 0] == -1).all() and (batch[1] == -1).all()


def test_make_head_takes_only_the_options_a_head_accepts():
    crf = make_head('crf', ['X'], 'BIOES', lr_multiplier=100, head_size=8, flat=False)
    assert isinstance(crf, CRFHead) and crf.lr_multiplier == 100 and crf.scheme.name == 'BIOES'
    egp = make_head('efficient_global_pointer', ['X'], lr_multiplier=100, head_size=8)
    assert isinstance(egp, EfficientGlobalPointerHead) and egp.head_size == 8
    assert make_head('softmax', scheme='SEG').labels == ['s', 'b', 'm', 'e']
    with pytest.raises(ValueError, match="unknown head 'lstm'.*register_head"):
        make_head('lstm', ['X'])


def test_register_head_with_fixed_options_and_a_layer_class():
    class Marked(SoftmaxHead):
        pass

    register_head('marked', Marked, layer_class=str)      # any class: only stored here
    try:
        head = make_head('marked', ['X'])
        assert isinstance(head, Marked) and head.layer_class is str and head.name == 'marked'
        assert head.config() == dict(head='marked', types=['X'], scheme='BIO',
                                     labels=['O', 'B-X', 'I-X'])
    finally:
        HEADS.pop('marked')
    with pytest.raises(TypeError, match='not a Head subclass'):
        register_head('bad', dict)


def _first_piece_case(rng, head, counts, tags, n):
    """Targets (batch, n) and emissions (batch, n, L) with -inf padding rows, as the CRF's
    output pads, for words of ``counts`` pieces."""
    starts = [np.concatenate([[0], np.cumsum(c)]).astype(int) for c in counts]
    y_true = head.batch_targets([head.target(t, [], s) for t, s in zip(tags, starts)], n + 1)
    emissions = 2 * rng.normal(size=(len(counts), n, len(head.labels)))
    for row, s in enumerate(starts):
        emissions[row, s[-1]:] = -np.inf
    return starts, y_true, emissions


def _path_scores(rows, trans):
    """Every label path over ``rows`` (W, L) with its score: (paths (P, W), scores (P,))."""
    paths = np.array(list(itertools.product(range(rows.shape[1]), repeat=len(rows))))
    scores = rows[np.arange(len(rows)), paths].sum(axis=1)
    return paths, scores + trans[paths[:, :-1], paths[:, 1:]].sum(axis=1)


def test_first_piece_crf_is_a_word_level_crf_by_brute_force():
    """label_pieces='first': only a word's first piece has a target; the loss equals the
    negative log-likelihood of a linear-chain CRF over the first pieces' emissions (every
    word-level path enumerated), whatever the other pieces' emissions; masking those pieces in
    place instead (a path through them paying two transitions) gives another value."""
    from crf_lr.compat import keras, tf
    head = make_head('crf', ['A'], 'BIO', lr_multiplier=1, label_pieces='first')
    head.build(keras.Input((None, 4)))
    rng = np.random.default_rng(0)
    head.crf._trans.assign(rng.normal(size=(3, 3)).astype('float32'))
    trans = head.crf.trans.numpy().astype(float)
    counts, tags = [[1, 2, 1, 3], [2, 1], [3]], [['B-A', 'I-A', 'O', 'B-A'], ['O', 'B-A'], ['O']]
    starts, y_true, emissions = _first_piece_case(rng, head, counts, tags, n=8)
    assert y_true[0].tolist() == [1, 2, -1, 0, 1, -1, -1, -1]        # -1: not a first piece
    loss = head.loss(tf.constant(y_true), tf.constant(emissions, 'float32')).numpy()
    expected, in_place = [], []
    for row, (s, word_tags) in enumerate(zip(starts, tags)):
        paths, scores = _path_scores(emissions[row, s[:-1]], trans)
        gold = np.all(paths == [head.labels.index(t) for t in word_tags], axis=1)
        expected.append(np.logaddexp.reduce(scores) - scores[gold][0])
        every, every_scores = _path_scores(emissions[row, :s[-1]], trans)  # all pieces, no skip
        kept = np.all(every[:, s[:-1]] == [head.labels.index(t) for t in word_tags], axis=1)
        in_place.append(np.logaddexp.reduce(every_scores) - np.logaddexp.reduce(every_scores[kept]))
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    assert not np.allclose(loss, in_place, rtol=1e-3)
    noisy = emissions.copy()
    noisy[y_true == -1] += 5 * rng.normal(size=noisy[y_true == -1].shape)
    np.testing.assert_allclose(
        head.loss(tf.constant(y_true), tf.constant(noisy, 'float32')).numpy(), loss, rtol=1e-6)
    accuracy = head.metrics[0](tf.constant(y_true), tf.constant(emissions, 'float32')).numpy()
    firsts = [emissions[row, s[:-1]].argmax(axis=1) for row, s in enumerate(starts)]
    hits = [np.sum(f == [head.labels.index(t) for t in w]) for f, w in zip(firsts, tags)]
    assert accuracy == pytest.approx(sum(hits) / 7)


def test_first_piece_crf_decodes_words_from_their_first_pieces_by_brute_force():
    """Decoding under label_pieces='first' is the best word-level path over the first pieces'
    scores, among the paths the BIO constraints allow (enumerated); one tag per word."""
    from crf_lr.compat import keras
    head = make_head('crf', ['A', 'B'], 'BIO', lr_multiplier=1, label_pieces='first')
    head.build(keras.Input((None, 4)))
    rng = np.random.default_rng(1)
    head.crf._trans.assign(rng.normal(size=(5, 5)).astype('float32'))
    trans = head.crf.trans.numpy().astype(float)
    allowed, allowed_starts, _ = head.scheme.allowed(head.labels)
    for _ in range(20):
        counts = rng.integers(1, 4, rng.integers(1, 5))
        starts = np.concatenate([[0], np.cumsum(counts)])
        scores = 3 * rng.normal(size=(starts[-1], 5))
        window = Window(0, ['w'] * len(counts), list(starts),
                        head.window_output(scores, starts[-1]))
        decoded = head.decode([window])[0]
        paths, totals = _path_scores(scores[starts[:-1]], trans)
        legal = allowed_starts[paths[:, 0]] & np.all(allowed[paths[:, :-1], paths[:, 1:]], axis=1)
        best = paths[legal][np.argmax(totals[legal])]
        assert decoded.tags == [head.labels[i] for i in best]


@pytest.mark.parametrize('name, scheme', [('crf', 'BIO'), ('crf', 'BIOES'), ('softmax', 'BIOES')])
def test_confidence_of_words_of_several_pieces_is_the_probability_of_their_reading(name, scheme):
    """label_pieces='all' (a word's tag read off its pieces, ``Scheme.collect``): each decoded
    entity's confidence = the summed probability of every piece path whose word reading holds
    it (enumerated; CRF with the scheme's constraints, softmax tags independent), so at least
    the decoded path's probability, which it contains; each word's marginals = the
    probability of each tag read for it."""
    from crf_lr.compat import keras
    head = make_head(name, ['A'], scheme)
    rng = np.random.default_rng(stable_seed(name, scheme))
    size = len(head.labels)
    if name == 'crf':
        head.build(keras.Input((None, 4)))
        head.crf._trans.assign(rng.normal(size=(size, size)).astype('float32'))
        trans = head.crf.trans.numpy().astype(float)
        allowed, allowed_starts, allowed_ends = head.scheme.allowed(head.labels)
    else:
        trans, allowed = np.zeros((size, size)), np.ones((size, size), dtype=bool)
        allowed_starts = allowed_ends = np.ones(size, dtype=bool)
    checked = 0
    for _ in range(12):
        counts = rng.integers(1, 4, rng.integers(2, 4))
        starts = np.concatenate([[0], np.cumsum(counts)])
        if starts[-1] > 6:
            continue
        scores = 2 * rng.normal(size=(starts[-1], size)) + 2 * (np.arange(size) > 0)
        if name == 'softmax':
            scores = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
        window = Window(0, ['w'] * len(counts), list(starts),
                        head.window_output(scores, starts[-1]))
        decoded = head.decode([window], marginals=True)[0]
        paths, totals = _path_scores(scores if name == 'crf' else np.log(scores), trans)
        legal = (allowed_starts[paths[:, 0]] & allowed_ends[paths[:, -1]]
                 & np.all(allowed[paths[:, :-1], paths[:, 1:]], axis=1))
        probabilities = np.where(legal, np.exp(totals - totals[legal].max()), 0.0)
        probabilities /= probabilities.sum()
        word_index = np.repeat(np.arange(len(counts)), counts)
        word_tags = [head.scheme.collect(word_index, [head.labels[i] for i in path], len(counts))
                     for path in paths]
        readings = [head.scheme.decode(tags, strict=True) for tags in word_tags]
        marginals = np.zeros((len(counts), size))
        for p, tags in zip(probabilities, word_tags):
            marginals[np.arange(len(counts)), [head.labels.index(t) for t in tags]] += p
        np.testing.assert_allclose(decoded.marginals, marginals, atol=1e-9)
        for span, confidence in zip(decoded.spans, decoded.confidences):
            expected = sum(p for p, found in zip(probabilities, readings) if span in found)
            np.testing.assert_allclose(confidence, expected, rtol=1e-6, atol=1e-12)
            assert confidence >= decoded.path_probability * (1 - 1e-9)
            checked += counts[span[0]:span[1]].max() > 1
    assert checked >= 2                          # entities over words of several pieces seen


def test_label_pieces_is_checked_and_saved_with_the_head():
    assert make_head('crf', ['A'], label_pieces='first').config()['label_pieces'] == 'first'
    assert make_head('crf', ['A']).label_pieces == 'all'
    with pytest.raises(ValueError, match="label_pieces must be one of"):
        CRFHead(['A'], label_pieces='last')
