"""Transition sanity checks for a trained CRF (NumPy only, no TensorFlow).

The seed experiment's diagnosis of a CRF trained at the encoder's learning rate: the emissions of
neighbouring tags end up 6-8 apart while the transitions stay around 0.5, so the transitions never
change a decision and the CRF is a softmax in disguise. These functions put numbers on that:

- :func:`transition_sanity` -- for each tag, does every impossible successor score below every
  possible one (the BMES rules: s->m, s->e, b->s, b->b, m->s, m->b, e->m, e->e are impossible)?
- :func:`emission_margin` -- the typical gap between the best and second-best emission of a token.
- :func:`transition_spread` -- the largest amount by which one transition can outweigh another.
- :func:`format_transitions` / :func:`format_sanity` -- text tables for logs and reports.

    >>> report = transition_sanity(crf_trans, labels='sbme')
    >>> print(format_transitions(crf_trans, 'sbme')); print(format_sanity(report))
"""
import numpy as np

from crf_lr.data.tagging import SEG

BMES_LABELS = ('s', 'b', 'm', 'e')


def _matrix(trans, labels):
    """Validate ``trans`` as a finite-or-(-inf) square float matrix matching ``labels``."""
    trans = np.asarray(trans, dtype=np.float64)
    labels = list(labels)
    if trans.ndim != 2 or trans.shape[0] != trans.shape[1]:
        raise ValueError(f'transitions must be a square matrix (num_labels, num_labels), '
                         f'got shape {trans.shape}')
    if trans.shape[0] != len(labels):
        raise ValueError(f'transitions are {trans.shape[0]}x{trans.shape[1]} but {len(labels)} '
                         f'labels were given: {labels}')
    if np.isnan(trans).any():
        raise ValueError('transitions contain NaN')
    return trans, labels


def impossible_from_allowed(allowed, labels):
    """The impossible (from, to) label pairs of a boolean allowed-transition matrix.

    Args:
        allowed: bool array (num_labels, num_labels); ``allowed[i, j]`` means label i may be
            followed by label j.
        labels: sequence of num_labels label names.
    Returns:
        frozenset of (from_label, to_label) pairs that are not allowed.

        >>> impossible_from_allowed([[True, False], [True, True]], ['O', 'I'])
        frozenset({('O', 'I')})
    """
    allowed = np.asarray(allowed, dtype=bool)
    _matrix(allowed.astype(np.float64), labels)
    labels = list(labels)
    return frozenset((labels[i], labels[j]) for i, j in zip(*np.nonzero(~allowed)))


# The word-segmentation scheme's rules, from the same table that feeds the CRF's constraints:
# s->m, s->e, b->s, b->b, m->s, m->b, e->m, e->e.
BMES_IMPOSSIBLE = impossible_from_allowed(SEG.allowed(list(BMES_LABELS))[0], BMES_LABELS)


def transition_sanity(trans, labels=BMES_LABELS, impossible=BMES_IMPOSSIBLE):
    """For each tag, whether every impossible successor scores below every possible one.

    Args:
        trans: float array (num_labels, num_labels), the effective CRF transition matrix;
            ``trans[i, j]`` scores label i followed by label j.
        labels: sequence of num_labels label names (a string such as ``'sbme'`` works); names are
            matched case-insensitively against ``impossible``.
        impossible: set of (from_label, to_label) pairs that the scheme forbids (default BMES).
    Returns:
        dict label -> dict with ``ok`` (bool, or None when the tag has no impossible successor),
        ``margin`` (float: lowest possible score minus highest impossible score; > 0 means sane),
        ``worst_impossible`` and ``weakest_possible`` (the label names behind the margin).

        >>> transition_sanity(np.zeros((4, 4)))['s']['ok']      # all ties: not sane
        False
    """
    trans, labels = _matrix(trans, labels)
    lowered = [str(label).lower() for label in labels]
    forbidden = {(str(a).lower(), str(b).lower()) for a, b in impossible}
    unknown = {name for pair in forbidden for name in pair} - set(lowered)
    if unknown:
        raise ValueError(f'impossible transitions name labels {sorted(unknown)} that are not '
                         f'among the labels {labels}')
    report = {}
    for i, label in enumerate(labels):
        bad = [j for j in range(len(labels)) if (lowered[i], lowered[j]) in forbidden]
        good = [j for j in range(len(labels)) if j not in bad]
        if not bad or not good:
            report[label] = dict(ok=None, margin=float('nan'), worst_impossible=None,
                                 weakest_possible=None)
            continue
        worst = max(bad, key=lambda j: trans[i, j])
        weakest = min(good, key=lambda j: trans[i, j])
        margin = trans[i, weakest] - trans[i, worst]
        report[label] = dict(ok=bool(margin > 0), margin=float(margin),
                             worst_impossible=labels[worst], weakest_possible=labels[weakest])
    return report


def emission_margin(emissions, lengths=None):
    """The median gap between the best and the second-best emission score of a real token.

    Args:
        emissions: float array (batch, seq_len, num_labels) or a list of (seq_len_i, num_labels)
            arrays. Padding rows are skipped: positions at or beyond ``lengths``, and rows whose
            scores are not all finite (the CRF layer writes -inf on padding).
        lengths: optional int array (batch,) of real lengths.
    Returns:
        float, the median top-1 minus top-2 score over real tokens (nan if there are none).

        >>> emission_margin(np.array([[[3., 1., 0.], [0., 0., 2.]]]))
        2.0
    """
    if isinstance(emissions, (list, tuple)):
        rows = [np.asarray(e, dtype=np.float64).reshape(-1, np.shape(e)[-1]) for e in emissions]
        if lengths is not None:
            rows = [r[:int(n)] for r, n in zip(rows, lengths)]
        rows = np.concatenate(rows) if rows else np.zeros((0, 2))
    else:
        emissions = np.asarray(emissions, dtype=np.float64)
        if emissions.ndim != 3:
            raise ValueError(f'emissions must be (batch, seq_len, num_labels), '
                             f'got shape {emissions.shape}')
        keep = np.ones(emissions.shape[:2], dtype=bool)
        if lengths is not None:
            lengths = np.asarray(lengths)
            if lengths.shape != (emissions.shape[0],):
                raise ValueError(f'lengths must have shape ({emissions.shape[0]},), '
                                 f'got {lengths.shape}')
            keep = np.arange(emissions.shape[1])[None, :] < lengths[:, None]
        rows = emissions[keep]
    if rows.shape[-1] < 2:
        raise ValueError(f'need at least 2 labels to measure a margin, got {rows.shape[-1]}')
    rows = rows[np.isfinite(rows).all(axis=-1)]
    if len(rows) == 0:
        return float('nan')
    top2 = np.sort(rows, axis=-1)[:, -2:]
    return float(np.median(top2[:, 1] - top2[:, 0]))


def transition_spread(trans):
    """The largest amount by which one transition score can outweigh another: max - min over
    the finite entries of the matrix (forbidden -inf entries are ignored).

    Args:
        trans: float array (num_labels, num_labels).
    Returns:
        float (0.0 for a constant matrix).

        >>> transition_spread([[0.5, -0.25], [0.0, float('-inf')]])
        0.75
    """
    trans = np.asarray(trans, dtype=np.float64)
    finite = trans[np.isfinite(trans)]
    return float(finite.max() - finite.min()) if finite.size else 0.0


def diagnose(trans, labels=BMES_LABELS, impossible=BMES_IMPOSSIBLE, emissions=None, lengths=None):
    """Everything above in one JSON-serialisable dict.

    Returns:
        dict with ``sanity`` (from :func:`transition_sanity`), ``sane_tags`` (how many tags pass),
        ``checked_tags``, ``transition_spread`` and, when emissions are given,
        ``emission_margin`` and ``margin_to_spread`` (the emission margin divided by the spread:
        far above 1 means the transitions cannot overturn a typical emission decision).

        >>> d = diagnose(crf.trans, 'sbme', emissions=model.predict(x))
        >>> d['sane_tags'], d['margin_to_spread']
    """
    sanity = transition_sanity(trans, labels, impossible)
    checked = [r for r in sanity.values() if r['ok'] is not None]
    result = dict(sanity=sanity, sane_tags=sum(r['ok'] for r in checked),
                  checked_tags=len(checked), transition_spread=transition_spread(trans))
    if emissions is not None:
        margin = emission_margin(emissions, lengths)
        spread = result['transition_spread']
        result['emission_margin'] = margin
        result['margin_to_spread'] = margin / spread if spread > 0 else float('inf')
    return result


def format_transitions(trans, labels=BMES_LABELS, digits=2):
    """A text table of the transition matrix, rows = from, columns = to.

        >>> print(format_transitions(np.eye(4), 'sbme').splitlines()[1])
        s          1.00    0.00    0.00    0.00
    """
    trans, labels = _matrix(trans, labels)
    width = max(7, digits + 6, *(len(str(label)) + 1 for label in labels))
    lines = ['from\\to' + ''.join(f'{label:>{width}}' for label in labels)]
    for label, row in zip(labels, trans):
        cells = ''.join(f'{value:>{width}.{digits}f}' if np.isfinite(value)
                        else f'{"-inf":>{width}}' for value in row)
        lines.append(f'{str(label):<7}' + cells)
    return '\n'.join(lines)


def format_sanity(diagnosis):
    """A text table of :func:`diagnose` (or of a bare :func:`transition_sanity` report).

        >>> print(format_sanity(diagnose(trans, 'sbme')))
    """
    sanity = diagnosis.get('sanity', diagnosis)
    lines = [f'{"tag":<5}{"sane":>6}{"margin":>9}  (weakest possible vs strongest impossible)']
    for label, r in sanity.items():
        if r['ok'] is None:
            lines.append(f'{str(label):<5}{"n/a":>6}')
            continue
        lines.append(f'{str(label):<5}{"yes" if r["ok"] else "NO":>6}{r["margin"]:>9.3f}  '
                     f'{label}->{r["weakest_possible"]} vs {label}->{r["worst_impossible"]}')
    if 'transition_spread' in diagnosis:
        lines.append(f'sane tags: {diagnosis["sane_tags"]}/{diagnosis["checked_tags"]}; '
                     f'transition spread {diagnosis["transition_spread"]:.3f}')
    if 'emission_margin' in diagnosis:
        lines.append(f'typical emission margin {diagnosis["emission_margin"]:.3f} = '
                     f'{diagnosis["margin_to_spread"]:.1f} x the transition spread')
    return '\n'.join(lines)


def count_violations(paths, allowed, starts=None, ends=None):
    """How many decoded label paths break the scheme, and how many transitions they break.

    Args:
        paths: iterable of int sequences (label ids, padding already stripped).
        allowed: bool array (num_labels, num_labels), ``allowed[i, j]`` = i may precede j.
        starts, ends: optional bool arrays (num_labels,) of labels allowed first / last.
    Returns:
        dict with ``paths`` (total), ``bad_paths`` (paths with at least one violation) and
        ``bad_transitions`` (illegal adjacent pairs, plus an illegal first or last label).

        >>> count_violations([[0, 2], [1, 3]], bmes_allowed)       # s->m is illegal
        {'paths': 2, 'bad_paths': 1, 'bad_transitions': 1}
    """
    allowed = np.asarray(allowed, dtype=bool)
    total = bad_paths = bad = 0
    for path in paths:
        path = np.asarray(path, dtype=np.int64)
        total += 1
        if path.size == 0:
            continue
        if path.min() < 0 or path.max() >= len(allowed):
            raise ValueError(f'path {path.tolist()} has label ids outside [0, {len(allowed)})')
        n = int((~allowed[path[:-1], path[1:]]).sum())
        n += int(starts is not None and not np.asarray(starts, dtype=bool)[path[0]])
        n += int(ends is not None and not np.asarray(ends, dtype=bool)[path[-1]])
        bad += n
        bad_paths += n > 0
    return dict(paths=total, bad_paths=bad_paths, bad_transitions=bad)
