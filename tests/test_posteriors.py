"""NumPy posteriors (crf_lr.posteriors) against brute-force enumeration of every label path:
marginals, path probabilities and the probability of an entity span under each tagging scheme."""
import numpy as np
import pytest

from crf_lr.posteriors import Posteriors, span_events, unit_reading
from crf_lr.tagging import SCHEMES
from crf_lr.viterbi import viterbi_decode
from test_viterbi import brute_force_marginals, path_probabilities, random_case


@pytest.mark.parametrize('shape', [(6, 5, 3), (5, 4, 4), (3, 1, 5)])
@pytest.mark.parametrize('boundary', [False, True])
@pytest.mark.parametrize('constrained', [False, True])
def test_marginals_and_path_probability_equal_brute_force(shape, boundary, constrained):
    rng = np.random.default_rng(hash((shape, boundary, constrained, 'posteriors')) % 2**32)
    case = random_case(rng, *shape, boundary=boundary, constrained=constrained)
    posteriors = Posteriors(**case)
    marginals = posteriors.marginals()
    np.testing.assert_allclose(marginals, brute_force_marginals(case), atol=1e-12)
    live = np.arange(shape[1]) < case['lengths'][:, None]
    np.testing.assert_allclose(marginals.sum(axis=2), live.astype(float), atol=1e-12)
    for row, path in enumerate(viterbi_decode(**case)):
        expected = path_probabilities(case, row)[tuple(path)] if len(path) else 1.0
        np.testing.assert_allclose(posteriors.path_probability(row, path), expected, rtol=1e-9)


def test_temperature_divides_every_score():
    rng = np.random.default_rng(3)
    case = random_case(rng, 4, 4, 3, boundary=True, constrained=True)
    scaled = dict(case, emissions=case['emissions'] / 2.5, transitions=case['transitions'] / 2.5,
                  start=case['start'] / 2.5, end=case['end'] / 2.5)
    np.testing.assert_allclose(Posteriors(**case, temperature=2.5).marginals(),
                               brute_force_marginals(scaled), atol=1e-9)  # -1e4 / 2.5: still 0


def scheme_case(rng, scheme, types, batch, n):
    """A random case on ``scheme``'s labels with its constraints (as the heads decode)."""
    labels = scheme.labels(types)
    allowed, starts, ends = scheme.allowed(labels)
    case = dict(emissions=rng.normal(size=(batch, n, len(labels))) * 1.5,
                transitions=rng.normal(size=(len(labels),) * 2), start=rng.normal(size=len(labels)),
                end=rng.normal(size=len(labels)), lengths=np.array([n, n - 1, 1, 0][:batch]),
                allowed_transitions=allowed, allowed_starts=starts, allowed_ends=ends)
    return labels, case


@pytest.mark.parametrize('name', ['BIO', 'IOB1', 'BIOES', 'BMES', 'SEG'])
def test_every_span_probability_equals_brute_force(name):
    """For every span and type: p(the strict reading of the path holds it) summed over all paths."""
    scheme = SCHEMES[name]
    types = [] if scheme.segmentation else ['A', 'B']
    rng = np.random.default_rng(hash(name) % 2**32)
    labels, case = scheme_case(rng, scheme, types, 4, 5 if len(types) < 2 or name == 'BIO' else 4)
    posteriors = Posteriors(**case)
    kinds = ['w'] if scheme.segmentation else types
    for row, length in enumerate(case['lengths']):
        if not length:
            continue
        expected = {}
        for path, p in path_probabilities(case, row).items():
            for span in scheme.decode([labels[i] for i in path], strict=True):
                expected[span] = expected.get(span, 0.0) + p
        for begin in range(length):
            for stop in range(begin + 1, length + 1):
                for kind in kinds:
                    got = posteriors.span_probability(
                        row, begin, stop, span_events(scheme, labels, kind, stop - begin))
                    np.testing.assert_allclose(got, expected.get((begin, stop, kind), 0.0),
                                               atol=1e-9, err_msg=f'{name} {(begin, stop, kind)}')


def test_span_events_read_the_scheme():
    bio = SCHEMES['BIO']
    labels = bio.labels(['T', 'U'])                # O B-T I-T B-U I-U
    (event,) = span_events(bio, labels, 'T', 2)
    assert event.labels == (1, 2) and event.at_start and event.at_end
    assert event.before.all() and event.after.tolist() == [True, True, False, True, True]
    bioes = SCHEMES['BIOES']
    (single,) = span_events(bioes, bioes.labels(['T']), 'T', 1)
    assert single.labels == (4,)                                     # S-T
    assert len(span_events(SCHEMES['IOB1'], SCHEMES['IOB1'].labels(['T']), 'T', 2)) == 2


def test_validation_messages():
    with pytest.raises(ValueError, match='temperature must be a positive'):
        Posteriors(np.zeros((1, 2, 3)), np.zeros((3, 3)), temperature=0)
    posteriors = Posteriors(np.zeros((1, 2, 3)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r'span \(1, 3\) outside'):
        posteriors.span_probability(0, 1, 3, [])
    with pytest.raises(ValueError, match='path of length 1'):
        posteriors.path_probability(0, [0])


def test_many_spans_at_once_equal_one_at_a_time():
    scheme = SCHEMES['BIOES']
    rng = np.random.default_rng(9)
    labels, case = scheme_case(rng, scheme, ['A', 'B'], 3, 6)
    posteriors = Posteriors(**case)
    spans = [(row, b, e, kind) for row in range(2) for b in range(case['lengths'][row])
             for e in range(b + 1, case['lengths'][row] + 1) for kind in ('A', 'B')]
    events = [span_events(scheme, labels, kind, e - b) for _, b, e, kind in spans]
    rows, begins, stops, _ = zip(*spans)
    together = posteriors.span_probabilities(rows, begins, stops, events)
    one_by_one = [posteriors.span_probability(r, b, e, ev)
                  for (r, b, e, _), ev in zip(spans, events)]
    np.testing.assert_allclose(together, one_by_one, rtol=1e-12, atol=1e-15)
    assert posteriors.span_probabilities([], [], [], []).shape == (0,)


@pytest.mark.parametrize('name', ['BIO', 'IOB1', 'BIOES', 'BMES', 'SEG'])
def test_span_probability_of_words_of_several_pieces_equals_brute_force(name):
    """Units of 1-3 pieces read as the tag heads read words (``Scheme.collect``: first piece,
    and the last one in closed schemes): for every unit span and type, the summed probability
    of every piece path whose reading holds it; at least the decoded path's probability."""
    scheme = SCHEMES[name]
    types = [] if scheme.segmentation else ['A']
    kinds = ['w'] if scheme.segmentation else types
    rng = np.random.default_rng(hash((name, 'pieces')) % 2**32)
    labels, case = scheme_case(rng, scheme, types, 1, 7)
    reading = unit_reading(scheme, labels)
    likeliest = 0.0
    for starts in ([0, 2, 3, 6, 7], [0, 3, 4, 5, 7], [0, 1, 2, 4], [0, 2]):
        length = starts[-1]
        expected = {}
        for path, p in path_probabilities(dict(case, lengths=[length]), 0).items():
            word_index = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
            tags = scheme.collect(word_index, [labels[i] for i in path], len(starts) - 1)
            for span in scheme.decode(tags, strict=True):
                expected[span] = expected.get(span, 0.0) + p
        posteriors = Posteriors(**dict(case, lengths=[length]))
        spans = [(b, e, kind) for b in range(len(starts) - 1) for e in range(b + 1, len(starts))
                 for kind in kinds]
        got = posteriors.span_probabilities(
            [0] * len(spans), [b for b, _, _ in spans], [e for _, e, _ in spans],
            [span_events(scheme, labels, kind, e - b) for b, e, kind in spans], [starts], reading)
        want = [expected.get(span, 0.0) for span in spans]
        np.testing.assert_allclose(got, want, atol=1e-9, err_msg=f'{name} {starts}')
        likeliest = max(likeliest, max(want))
        path, = viterbi_decode(**dict(case, lengths=[length]))
        word_index = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
        for b, e, kind in scheme.decode(
                scheme.collect(word_index, [labels[i] for i in path], len(starts) - 1),
                strict=True):
            assert posteriors.span_probability(0, b, e, span_events(scheme, labels, kind, e - b),
                                               starts, reading) >= \
                posteriors.path_probability(0, path) * (1 - 1e-9)
    assert likeliest > 0.05                            # some spans are likely: not all zeros


def test_unit_reading_reads_first_and_last_pieces():
    bioes = SCHEMES['BIOES']
    labels = bioes.labels(['T'])
    reading = unit_reading(bioes, labels)
    assert labels[reading[labels.index('B-T'), labels.index('E-T')]] == 'S-T'
    assert labels[reading[labels.index('I-T'), labels.index('I-T')]] == 'I-T'
    assert [labels[reading[i, i]] for i in range(len(labels))] == labels   # one piece: itself
    bio = SCHEMES['BIO']
    assert (unit_reading(bio, bio.labels(['T'])) == np.arange(3)[:, None]).all()   # first piece
