"""NumPy posteriors (crf_lr.decoding.posteriors) against brute-force enumeration of every label
path: marginals, path probabilities and the probability of an entity span under each tagging
scheme."""
import numpy as np
import pytest

from crf_lr.decoding.posteriors import Posteriors, SpanEvent, span_events, unit_reading
from crf_lr.data.tagging import SCHEMES
from crf_lr.decoding.viterbi import viterbi_decode
from helpers.crf_oracles import brute_force_marginals, path_probabilities, random_case, stable_seed


@pytest.mark.parametrize('shape', [(6, 5, 3), (5, 4, 4), (3, 1, 5)])
@pytest.mark.parametrize('boundary', [False, True])
@pytest.mark.parametrize('constrained', [False, True])
def test_marginals_and_path_probability_equal_brute_force(shape, boundary, constrained):
    rng = np.random.default_rng(stable_seed(shape, boundary, constrained, 'posteriors'))
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
    rng = np.random.default_rng(stable_seed(name))
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
    rng = np.random.default_rng(stable_seed(name, 'pieces'))
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


def _read_units(path, starts, reading):
    """The unit labels a piece path reads (brute force of ``unit_reading``'s use)."""
    return [reading[path[starts[u]], path[starts[u + 1] - 1]] for u in range(len(starts) - 1)]


def _random_starts(rng, length):
    """Unit starts cutting ``length`` positions into units of one or more."""
    cuts = rng.choice(np.arange(1, length), size=rng.integers(0, length), replace=False) \
        if length > 1 else []
    return [0] + sorted(int(c) for c in cuts) + [length] if length else [0]


def test_any_event_on_units_equals_brute_force_in_one_batch():
    """Random events (edges they may not touch, random neighbour masks), a random reading with
    each label reading itself alone, rows of different lengths (one empty), one call for every
    span of every row: each probability = the summed probability of the piece paths whose unit
    reading holds the event; unit_marginals likewise."""
    for seed in range(6):
        rng = np.random.default_rng(stable_seed('events', seed))
        size = 3
        case = random_case(rng, 4, 6, size, boundary=True, constrained=seed % 2 == 1)
        reading = rng.integers(0, size, size=(size, size))
        np.fill_diagonal(reading, np.arange(size))
        starts = [_random_starts(rng, int(length)) for length in case['lengths']]
        posteriors = Posteriors(**case)
        rows, begins, stops, events, expected = [], [], [], [], []
        marginals = posteriors.unit_marginals(starts, reading)
        for row, length in enumerate(case['lengths']):
            units = len(starts[row]) - 1
            read = {path: _read_units(path, starts[row], reading)
                    for path in (path_probabilities(case, row) if length else {})}
            if length:
                want = np.zeros((units, size))
                for path, p in path_probabilities(case, row).items():
                    want[np.arange(units), read[path]] += p
                np.testing.assert_allclose(marginals[row], want, atol=1e-12)
            assert marginals[row].shape == (units, size)
            for begin in range(units):
                for stop in range(begin + 1, units + 1):
                    found = []
                    for _ in range(2):
                        event = SpanEvent(tuple(rng.integers(0, size, stop - begin)),
                                          rng.random(size) < 0.6, rng.random(size) < 0.6,
                                          bool(rng.random() < 0.5), bool(rng.random() < 0.5))
                        if not found or found[0].labels != event.labels:
                            found.append(event)
                    total = 0.0
                    for path, p in path_probabilities(case, row).items():
                        labels = read[path]
                        total += p * any(
                            tuple(labels[begin:stop]) == e.labels
                            and (e.before[labels[begin - 1]] if begin else e.at_start)
                            and (e.after[labels[stop]] if stop < units else e.at_end)
                            for e in found)
                    rows.append(row), begins.append(begin), stops.append(stop)
                    events.append(found), expected.append(total)
        got = posteriors.span_probabilities(rows, begins, stops, events, starts, reading)
        np.testing.assert_allclose(got, expected, atol=1e-12, err_msg=f'seed {seed}')


def test_low_temperatures_keep_exact_messages():
    """Scores spread over more than 700 nats (BIO, temperature 0.05): a matrix product of
    shifted exponentials would lose the only allowed path into I-A; marginals, log Z and a
    word's probability still equal brute force."""
    scheme = SCHEMES['BIO']
    labels = scheme.labels(['A'])                           # O B-A I-A
    allowed, starts, ends = scheme.allowed(labels)
    emissions = np.array([[[0., -40., -40.], [0., 0., 45.], [0., 0., 0.]]])
    case = dict(emissions=emissions, transitions=np.zeros((3, 3)), lengths=np.array([3]),
                allowed_transitions=allowed, allowed_starts=starts, allowed_ends=ends)
    scaled = dict(case, emissions=emissions / 0.05)
    posteriors = Posteriors(**case, temperature=0.05)
    np.testing.assert_allclose(posteriors.marginals(), brute_force_marginals(scaled), atol=1e-12)
    expected = sum(p for path, p in path_probabilities(scaled, 0).items()
                   if (0, 1, 'A') in scheme.decode(scheme.collect(
                       [0, 0, 1], [labels[i] for i in path], 2), strict=True))
    got = posteriors.span_probability(0, 0, 1, span_events(scheme, labels, 'A', 1), [0, 2, 3],
                                      unit_reading(scheme, labels))
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert 0.5 < got < 1                               # a likely entity, not a lost one


def test_a_sequence_without_an_allowed_path_keeps_the_disallowed_scores():
    """Every path pays a disallowed move: the probabilities are those of the -1e4 scores
    (brute force), not NaN."""
    allowed = np.array([[False, True], [False, False]])        # 0 -> 1 only; no end allowed
    case = dict(emissions=np.random.default_rng(0).normal(size=(1, 3, 2)),
                transitions=np.zeros((2, 2)), lengths=np.array([3]), allowed_transitions=allowed)
    posteriors = Posteriors(**case)
    np.testing.assert_allclose(posteriors.marginals(), brute_force_marginals(case), atol=1e-9)
    assert np.isfinite(posteriors.log_z).all()


def test_bad_unit_starts_readings_and_events_are_named():
    posteriors = Posteriors(np.zeros((1, 3, 3)), np.zeros((3, 3)))
    events = span_events(SCHEMES['BIO'], SCHEMES['BIO'].labels(['A']), 'A', 1)
    for starts in ([0, 0, 3], [0, 2], [], [[0, 3]]):
        with pytest.raises(ValueError, match='do not cut the sequence of length 3'):
            posteriors.span_probability(0, 0, 1, events, starts)
    with pytest.raises(ValueError, match='diagonal reads each label as itself'):
        posteriors.span_probability(0, 0, 1, events, [0, 1, 3], np.zeros((3, 3), dtype=int))
    with pytest.raises(ValueError, match='different number of labels'):
        posteriors.span_probability(0, 0, 2, events, [0, 1, 3])


@pytest.mark.parametrize('constrained', [False, True])
def test_path_log_probability_is_the_log_of_the_brute_force_probability(constrained):
    """Every path of a small CRF: ``exp(path_log_probability)`` is its enumerated probability and
    ``path_probability``; on a sequence of 20,000 positions, where the probability underflows
    to 0.0, the log stays finite."""
    rng = np.random.default_rng(stable_seed(constrained, 'path log'))
    case = random_case(rng, 2, 4, 3, boundary=True, constrained=constrained)
    posteriors = Posteriors(**case)
    for row in range(2):
        for path, expected in path_probabilities(case, row).items():
            log_p = posteriors.path_log_probability(row, path)
            np.testing.assert_allclose(np.exp(log_p), expected, rtol=1e-9, atol=1e-300)
            assert np.exp(log_p) == posteriors.path_probability(row, path)
    long = random_case(rng, 1, 20000, 3, boundary=True, constrained=False)
    posteriors = Posteriors(**long)
    path = viterbi_decode(**long)[0]
    log_p = posteriors.path_log_probability(0, path)
    assert posteriors.path_probability(0, path) == 0.0 and -np.inf < log_p < -745
