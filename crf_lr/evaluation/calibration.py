"""Calibration of entity confidence: a temperature per head fitted on the development split, and
the expected calibration error (ECE) before and after.

An entity's confidence (``crf_lr.serving.tagger.Prediction.confidences``) says how likely it is to
be right. It is calibrated when, of all entities given confidence about c, a fraction c is right
(the span and the type both equal a gold entity). The head's ``temperature`` T divides every
score before the confidences are computed (CRF: emissions, transitions, start and end scores;
softmax: log-probabilities; GlobalPointer: span scores); it changes no prediction, only the
confidences. :func:`calibrate` chooses T by minimising the negative log-likelihood of entity
correctness on the development split (binary cross-entropy of each predicted entity's confidence
against whether it is right): the quantity the ECE measures, and one that every head shares.
The fitted T is kept only where it lowers the dev ECE; else T stays 1 (:func:`kept_temperature`).
A fit that stops at the bottom of its range (every dev entity right, or all but a few: every
confidence would read 1, which no development split can show) is not kept either. Missed
entities carry no confidence and play no part.

    >>> report = calibrate(tagger, ([e.tokens for e in data.dev], [e.spans for e in data.dev]))
    >>> report['temperature'], report['dev']['before']['ece'], report['dev']['after']['ece']
    (1.7, 0.08, 0.02)
    >>> report['choice']
    'the fitted temperature 1.7 kept: it lowers dev ECE from 0.0800 at T 1 to 0.0200'
    >>> tagger.head.temperature                                            # 1.7: now applied
"""
import numpy as np

TEMPERATURE_RANGE = (0.05, 20.0)


def reliability(confidences, correct, bins=10):
    """Per-bin counts, mean confidence and accuracy of ``bins`` equal-width confidence bins
    (bin k holds ``[k / bins, (k + 1) / bins)``, the last one 1.0 too).

    Args:
        confidences: floats in [0, 1]; correct: bools of the same length.
    Returns:
        ``(counts, mean_confidence, accuracy)``: arrays (bins,), NaN in an empty bin.

        >>> reliability([0.9, 0.9, 0.2], [1, 0, 0], bins=2)[2]    # array([0. , 0.5])
    """
    confidences = np.asarray(confidences, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    if confidences.shape != correct.shape or confidences.ndim != 1:
        raise ValueError(f'confidences and correct must be two lists of one length, got shapes '
                         f'{confidences.shape} and {correct.shape}')
    if confidences.size and not ((confidences >= 0) & (confidences <= 1)).all():
        raise ValueError('confidences must lie in [0, 1]')
    index = np.minimum((confidences * bins).astype(int), bins - 1)
    counts = np.bincount(index, minlength=bins)
    with np.errstate(invalid='ignore', divide='ignore'):
        mean = np.bincount(index, confidences, minlength=bins) / counts
        accuracy = np.bincount(index, correct, minlength=bins) / counts
    return counts, mean, accuracy


def expected_calibration_error(confidences, correct, bins=10):
    """ECE: the count-weighted mean of ``|accuracy - mean confidence|`` over the bins of
    :func:`reliability` (0 for no entity).

        >>> expected_calibration_error([0.9, 0.9, 0.6, 0.2], [1, 0, 1, 0])   # 0.35
    """
    counts, mean, accuracy = reliability(confidences, correct, bins)
    filled = counts > 0
    if not filled.any():
        return 0.0
    return float((counts[filled] * np.abs(accuracy[filled] - mean[filled])).sum() / counts.sum())


def correctness_nll(confidences, correct):
    """Mean binary cross-entropy of ``confidences`` against ``correct`` (clipped at 1e-12)."""
    p = np.clip(np.asarray(confidences, dtype=np.float64), 1e-12, 1 - 1e-12)
    y = np.asarray(correct, dtype=np.float64)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean()) if p.size else 0.0


def fit_temperature(loss, bounds=TEMPERATURE_RANGE, grid=25, iterations=20):
    """The temperature in ``bounds`` minimising ``loss(temperature)``: the best of a log-spaced
    grid, refined by golden-section search between its neighbours (20 steps narrow the grid's
    log-steps of 0.25 to 3e-5 in log-temperature).

        >>> fit_temperature(lambda t: (np.log(t) - np.log(2)) ** 2)    # 2.0
    """
    low, high = np.log(bounds[0]), np.log(bounds[1])
    points = np.linspace(low, high, grid)
    values = [loss(float(np.exp(x))) for x in points]
    best = int(np.argmin(values))
    a, b = points[max(best - 1, 0)], points[min(best + 1, grid - 1)]
    ratio = (np.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = loss(float(np.exp(c))), loss(float(np.exp(d)))
    for _ in range(iterations):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = loss(float(np.exp(c)))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = loss(float(np.exp(d)))
    refined = (c, fc) if fc <= fd else (d, fd)
    return float(np.exp(refined[0] if refined[1] <= values[best] else points[best]))


def entity_outcomes(predictions, gold_spans):
    """Each predicted entity's confidence and whether it is a gold entity (span and type).

    Args:
        predictions: list of ``crf_lr.serving.tagger.Prediction``; gold_spans: list (per text) of
            ``(start, end, type)`` spans.
    Returns:
        ``(confidences, correct)``: float and bool arrays, one entry per predicted entity.
    """
    confidences, correct = [], []
    for prediction, gold in zip(predictions, gold_spans):
        gold = {tuple(span) for span in gold}
        confidences += prediction.confidences
        correct += [tuple(span) in gold for span in prediction.spans]
    return np.array(confidences, dtype=np.float64), np.array(correct, dtype=bool)


def kept_temperature(fitted, ece_untempered, ece_fitted):
    """``(temperature, why)``: ``fitted`` where it lowers the dev ECE ``ece_untempered`` (at
    T = 1) to ``ece_fitted``, else 1.0; ``why`` says which and gives both ECEs.

        >>> kept_temperature(1.074, 0.0156, 0.0158)[1]       # (0.0156 at T 1, 0.0158 at T 1.074)
        'T 1 kept: the fitted temperature 1.074 would not lower dev ECE (0.0156 at T 1, ...'
    """
    if ece_fitted < ece_untempered:
        return fitted, (f'the fitted temperature {fitted} kept: it lowers dev ECE from '
                        f'{ece_untempered:.4f} at T 1 to {ece_fitted:.4f}')
    return 1.0, (f'T 1 kept: the fitted temperature {fitted} would not lower dev ECE '
                 f'({ece_untempered:.4f} at T 1, {ece_fitted:.4f} at T {fitted})')


def calibrate(tagger, dev, test=None, bins=10):
    """Fit ``tagger.head.temperature`` on the development split; ECE before and after.

    Args:
        tagger: ``crf_lr.serving.tagger.Tagger``.
        dev: ``(sequences, gold_spans)``: texts (lists of units) and their gold
            ``(start, end, type)`` spans; the temperature is fitted here.
        test: optional ``(sequences, gold_spans)`` scored with the same two temperatures.
        bins: ECE bins.
    Returns:
        dict: ``temperature``, the one kept (now set on the head): ``fitted``, the fitted one,
        where it lowers the dev ECE and is above the bottom of ``TEMPERATURE_RANGE``, else 1.0;
        ``choice``, one line saying which and why, with both dev ECEs
        (:func:`kept_temperature`); ``bound``: None, or 'lower' / 'upper' when the fit stopped
        at that end of ``TEMPERATURE_RANGE`` (every dev entity right, or nearly every one wrong:
        the confidences pushed as far as the range lets them), and
        ``dev_right``: how many of the dev entities predicted are right; per split (``dev``,
        ``test``), ``{'before': scores, 'after': scores}`` at T = 1 and at the kept temperature,
        where scores are ``entities`` (how many were predicted), ``ece``, ``nll`` and ``outcomes``
        ``(confidences, correct)`` (arrays, for :func:`crf_lr.evaluation.plots.plot_reliability`;
        drop them before writing JSON).
    """
    splits = {'dev': dev} if test is None else {'dev': dev, 'test': test}
    outputs = {name: _with_entities(tagger, tagger.run(sequences), gold)
               for name, (sequences, gold) in splits.items()}

    def outcomes(name, temperature):
        tagger.head.temperature = temperature
        found, gold = outputs[name]
        return entity_outcomes(tagger.decode(found), gold)

    before = outcomes('dev', 1.0)
    fitted = (round(fit_temperature(lambda t: correctness_nll(*outcomes('dev', t))), 4)
              if len(before[0]) else 1.0)
    ends = [name for name, end in zip(('lower', 'upper'), TEMPERATURE_RANGE)
            if abs(np.log(fitted / end)) < 1e-3]
    if not len(before[0]):
        temperature, choice = 1.0, 'T 1: the model predicts no dev entity to fit a temperature on'
    elif ends == ['lower']:
        temperature, choice = 1.0, (
            f'T 1 kept: the fitted temperature {fitted} is the bottom of its range '
            f'({int(before[1].sum())} of the {len(before[0])} dev entities predicted right): '
            f'every confidence would read 1')
    else:
        temperature, choice = kept_temperature(    # the ECEs as the report rounds them
            fitted, *(round(expected_calibration_error(*outcomes('dev', t), bins=bins), 5)
                      for t in (1.0, fitted)))
    report = dict(temperature=temperature, fitted=fitted, choice=choice,
                  bound=ends[0] if ends else None, dev_right=int(before[1].sum()))
    for name in splits:
        report[name] = {}
        for when, value in (('before', 1.0), ('after', temperature)):
            found = outcomes(name, value)
            report[name][when] = dict(
                entities=int(len(found[0])),
                ece=round(expected_calibration_error(*found, bins=bins), 5),
                nll=round(correctness_nll(*found), 5), outcomes=found)
    tagger.head.temperature = temperature
    return report


def _with_entities(tagger, found, gold):
    """The run outputs and gold spans of the texts the model finds an entity in: the others
    carry no confidence at any temperature (a temperature changes no prediction)."""
    kept = [k for k, prediction in enumerate(tagger.decode(found, confidences=False))
            if prediction.spans]
    return [found[k] for k in kept], [gold[k] for k in kept]


def bound_note(report):
    """A line saying why a fitted temperature sits at an end of its range, or None.

        >>> bound_note(dict(fitted=20.0, temperature=20.0, bound='upper', dev_right=3,
        ...                 dev={'before': {'entities': 40}}))
        'the temperature stopped at the top of its range (20.0): 3 of the 40 dev entities ...'
    """
    if not report.get('bound'):
        return None
    upper = report['bound'] == 'upper'
    if not upper:                     # calibrate keeps T 1 there
        effect = ('T 1 was kept, where every confidence would read 1; a larger development '
                  'split can fit one')
    else:
        effect = ('the fit lowers every confidence as far as it can'
                  if report['temperature'] != 1 else 'T 1 was kept, as it would not lower dev ECE')
        effect += '; train longer or give a larger development split for confidences worth reading'
    return (f"the temperature stopped at the {'top' if upper else 'bottom'} of its range "
            f"({report['fitted']}): {report['dev_right']} of "
            f"the {report['dev']['before']['entities']} dev entities predicted are right, so "
            f"{effect}")


def reliability_series(scores, temperature):
    """What :func:`crf_lr.evaluation.plots.plot_reliability` draws for a split's ``scores`` (a
    :func:`calibrate` report's ``'dev'`` or ``'test'``, whose outcomes are taken out, for JSON):
    the confidences at T 1, and at the kept ``temperature`` where it is another.

        >>> plot_reliability(reliability_series(report['dev'], report['temperature']), path)
    """
    before, after = (scores[when].pop('outcomes') for when in ('before', 'after'))
    return {'temperature 1': before} if temperature == 1 else {
        'temperature 1': before, f'temperature {temperature}': after}
