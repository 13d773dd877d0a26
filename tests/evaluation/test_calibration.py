"""Calibration (crf_lr.evaluation.calibration) against hand-computed cases: ECE and reliability
bins, the temperature of a logistic confidence in closed form, and a fitted temperature that lowers
the NLL and ECE of a tiny model's entities."""
import numpy as np
import pytest

from crf_lr.evaluation.calibration import (correctness_nll, entity_outcomes,
                                           expected_calibration_error, fit_temperature, reliability)
from crf_lr.serving.tagger import Prediction


def test_ece_by_hand():
    # bins of width 0.1: {0.9, 0.9} right 1 of 2 -> |0.5 - 0.9| * 2/4; {0.6} right -> 0.4 / 4;
    # {0.2} wrong -> 0.2 / 4: 0.2 + 0.1 + 0.05
    assert expected_calibration_error([0.9, 0.9, 0.6, 0.2], [1, 0, 1, 0]) == pytest.approx(0.35)
    assert expected_calibration_error([1.0, 0.0], [1, 0]) == 0.0          # 1.0: the last bin
    assert expected_calibration_error([], []) == 0.0
    counts, mean, accuracy = reliability([0.9, 0.9, 0.2], [1, 0, 0], bins=2)
    assert counts.tolist() == [1, 2]
    np.testing.assert_allclose(mean, [0.2, 0.9])
    np.testing.assert_allclose(accuracy, [0.0, 0.5])
    with pytest.raises(ValueError, match=r'must lie in \[0, 1\]'):
        reliability([1.2], [1])
    with pytest.raises(ValueError, match='one length'):
        reliability([0.5, 0.5], [1])


def test_nll_by_hand():
    assert correctness_nll([0.8, 0.25], [1, 0]) == pytest.approx(-(np.log(0.8) + np.log(0.75)) / 2)


def test_temperature_of_a_logistic_confidence_in_closed_form():
    """Every entity has score z = 2 and a fraction q = sigmoid(1) of them is right: the NLL of
    sigmoid(z / T) is least where sigmoid(z / T) = q, i.e. T = z / logit(q) = 2."""
    correct = np.array([1] * 7311 + [0] * 2689)              # q = 0.7311 = sigmoid(1.0)
    q = correct.mean()
    expected = 2.0 / np.log(q / (1 - q))

    def loss(temperature):
        return correctness_nll(np.full(correct.shape, 1 / (1 + np.exp(-2.0 / temperature))),
                               correct)
    assert fit_temperature(loss) == pytest.approx(expected, rel=1e-4)
    assert fit_temperature(lambda t: (np.log(t) - np.log(0.3)) ** 2) == pytest.approx(0.3, 1e-4)
    assert fit_temperature(lambda t: t) == pytest.approx(0.05)       # the range's edge


def test_entity_outcomes_match_span_and_type():
    predictions = [Prediction([(0, 2, 'A'), (3, 4, 'B')], confidences=[0.9, 0.4]),
                   Prediction([(1, 2, 'A')], confidences=[0.7])]
    confidences, correct = entity_outcomes(predictions, [[(0, 2, 'A'), (3, 4, 'A')], [(1, 2, 'A')]])
    assert confidences.tolist() == [0.9, 0.4, 0.7] and correct.tolist() == [True, False, True]


def _report(temperature, fitted=20.0):
    outcomes = {when: dict(entities=40, outcomes=([0.9], [1])) for when in ('before', 'after')}
    return dict(temperature=temperature, fitted=fitted, bound='upper', dev_right=3, dev=outcomes)


def test_the_bound_note_and_the_reliability_plot_say_what_was_kept():
    """A fit at the top of its range whose T was not kept (T 1: it would not lower the dev ECE):
    the note says so rather than that the fit lowers every confidence, and the plot draws one
    curve, not two equal ones labelled 'temperature 1' and 'temperature 1.0'."""
    from crf_lr.evaluation.calibration import bound_note, reliability_series
    assert bound_note(_report(1.0)) == (
        'the temperature stopped at the top of its range (20.0): 3 of the 40 dev entities '
        'predicted are right, so T 1 was kept, as it would not lower dev ECE; train longer or '
        'give a larger development split for confidences worth reading')
    assert 'so the fit lowers every confidence as far as it can' in bound_note(_report(20.0))
    kept, fitted = _report(1.0), _report(20.0)
    assert list(reliability_series(kept['dev'], 1.0)) == ['temperature 1']
    assert list(reliability_series(fitted['dev'], 20.0)) == ['temperature 1', 'temperature 20.0']
    assert 'outcomes' not in kept['dev']['before'] and 'outcomes' not in fitted['dev']['after']
