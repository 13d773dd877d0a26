"""crf_lr.evaluation.diagnostics and crf_lr.evaluation.plots against hand-made matrices whose
answers are counted by hand."""
import numpy as np
import pytest

from crf_lr.evaluation.diagnostics import (BMES_IMPOSSIBLE, count_violations, diagnose,
                                           emission_margin, format_sanity, format_transitions,
                                           impossible_from_allowed, transition_sanity,
                                           transition_spread)

S, B, M, E = range(4)
# BMES by hand: after s or e a word starts (s, b); after b or m the word goes on (m, e).
ALLOWED = np.array([[1, 1, 0, 0],
                    [0, 0, 1, 1],
                    [0, 0, 1, 1],
                    [1, 1, 0, 0]], dtype=bool)


def sane_matrix():
    """+1 on every possible transition, -1 on every impossible one."""
    return np.where(ALLOWED, 1.0, -1.0)


def test_bmes_rules_match_the_allowed_matrix():
    assert impossible_from_allowed(ALLOWED, 'sbme') == BMES_IMPOSSIBLE
    assert len(BMES_IMPOSSIBLE) == 8


def test_sane_matrix_passes_with_margin_two():
    report = transition_sanity(sane_matrix(), 'sbme')
    assert all(r['ok'] for r in report.values())
    assert [r['margin'] for r in report.values()] == [2.0] * 4


def test_one_impossible_successor_above_one_possible_fails_only_that_tag():
    trans = sane_matrix()
    trans[S, E] = 0.7          # s->e impossible, but now above s->b
    trans[S, B] = 0.5
    report = transition_sanity(trans, 'sbme')
    assert report['s'] == dict(ok=False, margin=pytest.approx(-0.2), worst_impossible='e',
                               weakest_possible='b')
    assert [report[t]['ok'] for t in 'bme'] == [True, True, True]


def test_ties_are_not_sane_and_labels_match_case_insensitively():
    report = transition_sanity(np.zeros((4, 4)), ['S', 'B', 'M', 'E'])
    assert [r['ok'] for r in report.values()] == [False] * 4
    assert [r['margin'] for r in report.values()] == [0.0] * 4


def test_a_tag_without_impossible_successors_is_not_judged():
    report = transition_sanity(np.zeros((2, 2)), ['O', 'I'], impossible={('O', 'I')})
    assert report['O']['ok'] is False and report['I']['ok'] is None


def test_emission_margin_skips_padding_by_length_and_by_minus_inf():
    emissions = np.array([[[5., 1., 0., 0.], [0., 3., 2.5, 0.], [9., 0., 0., 0.]],
                          [[0., 0., 0., 7.], [-np.inf] * 4, [-np.inf] * 4]])
    # real tokens: margins 4, 0.5 (row 3 of sentence 1 cut by length), 7 -> median 4
    assert emission_margin(emissions, lengths=[2, 3]) == 4.0
    # without lengths the -inf rows are still skipped: margins 4, 0.5, 9, 7 -> median 5.5
    assert emission_margin(emissions) == 5.5
    assert emission_margin([emissions[0][:2], emissions[1][:1]]) == 4.0


def test_spread_ignores_forbidden_cells():
    trans = sane_matrix() * 0.25
    trans[S, M] = -np.inf
    assert transition_spread(trans) == 0.5
    assert transition_spread(np.full((2, 2), 3.0)) == 0.0


def test_diagnose_reproduces_the_seed_situation():
    """Transitions ~0.5 apart and emissions ~7 apart: margin-to-spread 14, and every tag sane."""
    trans = sane_matrix() * 0.25
    emissions = np.zeros((1, 3, 4))
    emissions[0, :, 0] = 7.0
    d = diagnose(trans, 'sbme', emissions=emissions)
    assert (d['sane_tags'], d['checked_tags']) == (4, 4)
    assert d['transition_spread'] == 0.5 and d['emission_margin'] == 7.0
    assert d['margin_to_spread'] == 14.0
    text = format_sanity(d)
    assert '4/4' in text and '14.0 x' in text


def test_count_violations_by_hand():
    paths = [[S, M], [B, E], [B, M, E, S], [M], [], [B, B]]
    # pairs only: s->m and b->b are the two illegal transitions, in two paths
    assert count_violations(paths, ALLOWED) == dict(paths=6, bad_paths=2, bad_transitions=2)
    starts = np.array([1, 1, 0, 0], bool)
    ends = np.array([1, 0, 0, 1], bool)
    # plus ends: [s, m] ends on m (+1), [m] starts and ends on m (+2), [b, b] ends on b (+1)
    assert count_violations(paths, ALLOWED, starts, ends) == dict(paths=6, bad_paths=3,
                                                                  bad_transitions=6)
    with pytest.raises(ValueError, match='outside'):
        count_violations([[0, 4]], ALLOWED)


def test_format_transitions_layout():
    trans = sane_matrix()
    trans[S, M] = -np.inf
    lines = format_transitions(trans, 'sbme').splitlines()
    assert lines[0].split() == ['from\\to', 's', 'b', 'm', 'e']
    assert lines[1].split() == ['s', '1.00', '1.00', '-inf', '-1.00']
    assert len(lines) == 5


def test_bad_input_says_what_came():
    with pytest.raises(ValueError, match='square'):
        transition_sanity(np.zeros((4, 3)), 'sbme')
    with pytest.raises(ValueError, match='4 labels'):
        transition_sanity(np.zeros((3, 3)), 'sbme')
    with pytest.raises(ValueError, match='not among the labels'):
        transition_sanity(np.zeros((4, 4)), 'abcd')
    with pytest.raises(ValueError, match='lengths must have shape'):
        emission_margin(np.zeros((2, 3, 4)), lengths=[1, 2, 3])


def test_heatmap_and_curves_are_written_as_png(tmp_path):
    pytest.importorskip('matplotlib')
    from crf_lr.evaluation.plots import plot_bars, plot_curves, plot_transitions
    trans = sane_matrix()
    trans[S, M] = -np.inf
    heatmap = plot_transitions(trans, 'sbme', str(tmp_path / 'sub' / 't.png'), title='epoch 1')
    curves = plot_curves({'a': ([1, 2, 3], [3.0, 2.0, 1.0]), 'b': [2.5, 1.5]},
                         str(tmp_path / 'c.png'), logy=True)
    bars = plot_bars({'x1': {'s': -1.0, 'b': 0.5}, 'x100': {'s': 3.0}}, str(tmp_path / 'b.png'))
    for path in (heatmap, curves, bars):
        with open(path, 'rb') as f:
            assert f.read(8) == b'\x89PNG\r\n\x1a\n'
    with pytest.raises(ValueError, match='matrix for labels'):
        plot_transitions(np.zeros((3, 3)), 'sbme', str(tmp_path / 'x.png'))
    with pytest.raises(ValueError, match='at least one series'):
        plot_bars({}, str(tmp_path / 'y.png'))
