"""Span decoding and span -> target conversion, against brute-force loops over every cell."""
import itertools

import numpy as np
import pytest

from crf_lr.decoding.spans import decode_spans, dense_targets, pad_sparse_targets, sparse_targets


def brute_force_spans(scores, threshold, length, offset):
    """Every cell visited one by one: the oracle for decode_spans."""
    heads, n, _ = scores.shape
    found = []
    for t, i, j in itertools.product(range(heads), range(n), range(n)):
        if offset <= i <= j < length and np.isfinite(scores[t, i, j]) and \
                scores[t, i, j] > threshold:
            found.append((i - offset, j + 1 - offset, t))
    return sorted(found)


@pytest.mark.parametrize('seed', range(5))
def test_decode_spans_matches_brute_force_on_a_batch(seed):
    rng = np.random.default_rng(seed)
    batch, heads, n = 3, 3, 7
    scores = rng.normal(size=(batch, heads, n, n))
    scores[rng.random(scores.shape) < 0.2] = -np.inf          # masked cells, some above diagonal
    lengths = rng.integers(1, n + 1, size=batch)
    offset = int(rng.integers(0, 2))
    threshold = float(rng.normal(scale=0.3))
    got = decode_spans(scores, threshold=threshold, lengths=lengths, offset=offset)
    assert got == [brute_force_spans(s, threshold, length, offset)
                   for s, length in zip(scores, lengths)]
    assert decode_spans(scores[0], threshold, int(lengths[0]), offset=offset) == got[0]


def test_nested_and_overlapping_spans_are_all_returned_with_names():
    scores = np.full((2, 6, 6), -5.0)
    scores[0, 0, 4] = scores[0, 1, 2] = scores[1, 1, 2] = scores[1, 2, 3] = 3.0
    scores[1, 4, 1] = 9.0                                           # start > end: never a span
    assert decode_spans(scores, labels=['ORG', 'PER']) == [
        (0, 5, 'ORG'), (1, 3, 'ORG'), (1, 3, 'PER'), (2, 4, 'PER')]


def test_masked_cells_are_never_returned():
    scores = np.array([[[-np.inf, 0.5], [-np.inf, -np.inf]]])
    assert decode_spans(scores, threshold=-1e30) == [(0, 2, 0)]
    assert decode_spans(scores, threshold=-np.inf) == [(0, 2, 0)]


def test_decode_spans_rejects_bad_arguments():
    with pytest.raises(ValueError, match='heads, n, n'):
        decode_spans(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match='lengths'):
        decode_spans(np.zeros((2, 1, 3, 3)), lengths=[3])
    with pytest.raises(ValueError, match='labels'):
        decode_spans(np.zeros((2, 3, 3)), labels=['A'])


@pytest.mark.parametrize('offset', [0, 1])
def test_targets_round_trip_through_the_decoder(offset):
    labels = ['LOC', 'PER', 'ORG']
    spans = [(0, 3, 'PER'), (1, 2, 'PER'), (0, 3, 'LOC'), (2, 5, 'PER'), (1, 2, 'PER')]
    n = 5 + offset + 1
    dense = dense_targets(spans, n, labels, offset=offset)
    assert dense.shape == (3, n, n) and dense.sum() == 4
    expected = sorted({(s, e, labels.index(t)) for s, e, t in spans})
    assert decode_spans(2 * dense - 1, offset=offset) == expected
    sparse = sparse_targets(spans, n, labels, offset=offset)
    assert sparse.shape == (3, 3, 2) and sparse.dtype == np.int32
    cells = {(t, i, j) for t in range(3) for i, j in sparse[t] if i >= 0}
    assert cells == {tuple(c) for c in np.argwhere(dense == 1)}
    assert (sparse[0, 1:] == -1).all() and (sparse[2] == -1).all()   # padding slots


def test_target_builders_raise_clear_errors():
    with pytest.raises(ValueError, match='outside the sequence'):
        dense_targets([(3, 5, 0)], length=5, labels=1, offset=1)
    with pytest.raises(ValueError, match='outside the sequence'):
        sparse_targets([(2, 2, 0)], length=5, labels=1)
    with pytest.raises(ValueError, match='unknown label'):
        dense_targets([(0, 1, 'X')], length=3, labels=['A'])
    with pytest.raises(ValueError, match=r'int in \[0, 2\)'):
        dense_targets([(0, 1, 2)], length=3, labels=2)
    with pytest.raises(ValueError, match='max_entities'):
        sparse_targets([(0, 1, 0), (1, 2, 0)], length=3, labels=1, max_entities=1)


def test_pad_sparse_targets_pads_with_minus_one():
    a = sparse_targets([(0, 1, 0), (1, 3, 0)], length=4, labels=2)
    b = sparse_targets([], length=4, labels=2)
    batch = pad_sparse_targets([a, b], max_entities=3)
    assert batch.shape == (2, 2, 3, 2)
    assert batch[0, 0, :2].tolist() == [[0, 0], [1, 2]]
    assert (batch[0, 0, 2:] == -1).all() and (batch[1] == -1).all()
    with pytest.raises(ValueError, match='max_entities'):
        pad_sparse_targets([a], max_entities=1)
