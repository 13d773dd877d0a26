"""Brute-force oracles of the CRF: every label path of a small case enumerated with plain
Python loops (constraints and boundary scores included), and the random cases they check.

    case = random_case(np.random.default_rng(0), batch=4, n=5, num_labels=3)
    paths = brute_force_paths(case)             # the best path of each row
"""
import itertools
import zlib

import numpy as np

from crf_lr.decoding.viterbi import DISALLOWED_SCORE


def path_scores(emissions, transitions, start=None, end=None, allowed=None, allowed_starts=None,
                allowed_ends=None):
    """{path tuple: score} over all L**l paths of one sequence ``emissions`` (l, L), l >= 1."""
    length, num_labels = emissions.shape

    def pick(table, allowed, *index):
        if allowed is not None and not allowed[index]:
            return DISALLOWED_SCORE
        return 0.0 if table is None else table[index]
    scores = {}
    for path in itertools.product(range(num_labels), repeat=length):
        score = pick(start, allowed_starts, path[0]) + pick(end, allowed_ends, path[-1])
        score += sum(emissions[t, y] for t, y in enumerate(path))
        score += sum(pick(transitions, allowed, a, b) for a, b in zip(path, path[1:]))
        scores[path] = score
    return scores


def stable_seed(*parts):
    """A seed from ``parts`` that is the same in every process (``hash`` of a str is not)."""
    return zlib.crc32(repr(parts).encode())


def path_probabilities(case, row):
    """{path tuple: p(path)} over every path of sequence ``row`` of a case (its length >= 1)."""
    length = case['lengths'][row]
    table = path_scores(case['emissions'][row, :length], case['transitions'], case.get('start'),
                        case.get('end'), case.get('allowed_transitions'),
                        case.get('allowed_starts'), case.get('allowed_ends'))
    peak = max(table.values())
    weights = {path: np.exp(score - peak) for path, score in table.items()}
    total = sum(weights.values())
    return {path: weight / total for path, weight in weights.items()}


def brute_force_marginals(case):
    """p(y_t = j) (batch, n, L) by summing path probabilities; padding rows 0."""
    batch, n, num_labels = case['emissions'].shape
    marginals = np.zeros((batch, n, num_labels))
    for row, length in enumerate(case['lengths']):
        if length:
            for path, p in path_probabilities(case, row).items():
                marginals[row, np.arange(length), path] += p
    return marginals


def random_case(rng, batch, n, num_labels, boundary=False, constrained=False):
    """Random emissions, lengths (with 0 and 1 when the batch is large enough) and parameters."""
    lengths = rng.integers(0, n + 1, size=batch)
    lengths[:3] = [n, 1, 0][:batch]
    case = dict(emissions=rng.normal(size=(batch, n, num_labels)) * 2,
                transitions=rng.normal(size=(num_labels, num_labels)), lengths=lengths)
    if boundary:
        case.update(start=rng.normal(size=num_labels), end=rng.normal(size=num_labels))
    if constrained:
        allowed = rng.random((num_labels, num_labels)) < 0.6
        allowed[:, 0] = allowed[0, :] = True       # label 0 keeps some path legal at every length
        starts, ends = rng.random(num_labels) < 0.6, rng.random(num_labels) < 0.6
        starts[0] = ends[0] = True
        case.update(allowed_transitions=allowed, allowed_starts=starts, allowed_ends=ends)
    return case


def brute_force_paths(case):
    paths = []
    for b, length in enumerate(case['lengths']):
        if length == 0:
            paths.append(())
            continue
        scores = path_scores(case['emissions'][b, :length], case['transitions'],
                             case.get('start'), case.get('end'), case.get('allowed_transitions'),
                             case.get('allowed_starts'), case.get('allowed_ends'))
        paths.append(max(scores, key=scores.get))
    return paths


def brute_force(case, tags):
    """(score of tags, log Z) per sequence by enumerating every path; (0, 0) for empty rows."""
    scores, log_z = [], []
    for b, length in enumerate(case['lengths']):
        if length == 0:
            scores.append(0.0)
            log_z.append(0.0)
            continue
        table = path_scores(case['emissions'][b, :length], case['transitions'], case.get('start'),
                            case.get('end'), case.get('allowed_transitions'),
                            case.get('allowed_starts'), case.get('allowed_ends'))
        values = np.array(list(table.values()))
        log_z.append(np.log(np.exp(values - values.max()).sum()) + values.max())
        scores.append(table[tuple(tags[b, :length])])
    return np.array(scores), np.array(log_z)


def effective(case):
    """transitions, start, end of a case with the constraints applied (as the layer does)."""
    num_labels = case['transitions'].shape[0]
    out = []
    for key, allowed in (('transitions', 'allowed_transitions'), ('start', 'allowed_starts'),
                         ('end', 'allowed_ends')):
        value = case.get(key)
        if allowed in case:
            value = np.where(case[allowed], 0 if value is None else value, DISALLOWED_SCORE)
        out.append(value if value is not None or key == 'transitions' else np.zeros(num_labels))
    return out
