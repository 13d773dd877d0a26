"""Heads as objects: the registry, targets, and decoding (flat spans without overlaps, nested on
request), against brute force and hand-made cases. The end-to-end runs through the task scripts
(a CRF subclass, a fifth head registered from outside) are in test_examples.py."""
import itertools

import numpy as np
import pytest

import crf_lr  # noqa: F401  (environment before TensorFlow)
from crf_lr.heads import (HEADS, CRFHead, EfficientGlobalPointerHead, SoftmaxHead, Window,
                          make_head, register_head)
from crf_lr.spans import non_overlapping, outermost


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
    assert batch[0, 1, 0].tolist() == [1, 2] and (batch[0, 0] == -1).all() and (batch[1] == -1).all()


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
