"""PNG figures for reports: transition heatmaps, training curves, grouped bars and reliability
diagrams.

matplotlib is an optional extra (``pip install crf_lr[plots]``); it is imported on first use, with
the non-interactive Agg backend, so the rest of the package never needs it.

    >>> plot_transitions(crf_trans, 'sbme', 'runs/cws/transitions_epoch1.png', title='epoch 1')
    >>> plot_curves({'bias correction': (steps, losses)}, 'loss.png', ylabel='training loss')
    >>> plot_bars({'CRF x1': {'s': -1.2, 'b': 0.4}}, 'sanity.png', ylabel='margin')
    >>> plot_reliability({'before': (confidences, correct)}, 'reliability.png')
"""
import os

import numpy as np

from crf_lr.utils.atomic import atomic_path


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError('plots need matplotlib, an optional extra: '
                          'pip install "crf_lr[plots]" (or pip install matplotlib)') from error
    matplotlib.use('Agg', force=True)
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with atomic_path(path) as temporary:                 # a kill leaves no torn image
        fig.savefig(temporary, dpi=120, bbox_inches='tight', format=os.path.splitext(path)[1][1:])
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path


def plot_transitions(trans, labels, path, title=None):
    """Save a heatmap of a transition matrix (rows = from, columns = to), values written in
    each cell; -inf (forbidden) cells are shown blank and marked.

    Args:
        trans: float array (num_labels, num_labels).
        labels: sequence of num_labels names (``'sbme'`` works).
        path: output PNG path (folders are created).
        title: optional figure title.
    Returns:
        path.

        >>> plot_transitions(model_crf.trans.numpy(), 'sbme', 'transitions.png')
        'transitions.png'
    """
    trans = np.asarray(trans, dtype=np.float64)
    labels = [str(label) for label in labels]
    if trans.ndim != 2 or trans.shape != (len(labels), len(labels)):
        raise ValueError(f'expected a ({len(labels)}, {len(labels)}) matrix for labels {labels}, '
                         f'got shape {trans.shape}')
    plt = _pyplot()
    finite = np.isfinite(trans)
    shown = np.where(finite, trans, np.nan)
    bound = float(np.nanmax(np.abs(shown))) if finite.any() else 1.0
    size = 1.0 + 0.55 * len(labels)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    image = ax.imshow(shown, cmap='RdBu_r', vmin=-bound or -1, vmax=bound or 1)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel('to')
    ax.set_ylabel('from')
    if len(labels) <= 16:
        for (i, j), value in np.ndenumerate(trans):
            text = f'{value:.2f}' if np.isfinite(value) else '-inf'
            ax.text(j, i, text, ha='center', va='center', fontsize=8)
    if title:
        ax.set_title(title)
    return _save(fig, path)


def plot_curves(series, path, xlabel='step', ylabel='loss', title=None, logy=False, styles=None):
    """Save line plots of several named series on one set of axes.

    Args:
        series: dict name -> (x, y), two equal-length 1-D sequences; or name -> y (x = 1..len(y)).
        path: output PNG path (folders are created).
        xlabel, ylabel, title: axis labels and optional title.
        logy: log-scale y axis.
        styles: optional dict name -> matplotlib format string ('--', ':', 'C1--') for some series.
    Returns:
        path.

        >>> plot_curves({'lr 1e-3': [2.0, 1.1, 0.7]}, 'loss.png')
        'loss.png'
    """
    if not series:
        raise ValueError('plot_curves needs at least one series')
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, values in series.items():
        if isinstance(values, tuple) and len(values) == 2:
            x, y = (np.asarray(v, dtype=np.float64) for v in values)
        else:
            y = np.asarray(values, dtype=np.float64)
            x = np.arange(1, len(y) + 1)
        if x.shape != y.shape or y.ndim != 1:
            raise ValueError(f'series {name!r}: x and y must be 1-D of equal length, '
                             f'got {x.shape} and {y.shape}')
        ax.plot(x, y, (styles or {}).get(name, '-'), label=str(name), linewidth=1.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale('log')
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_bars(groups, path, ylabel='', title=None):
    """Save a grouped bar chart: one group of bars per category, one bar colour per series, and a
    line at zero (so signs read at a glance).

    Args:
        groups: dict series name -> dict category -> float (NaN: no bar); the categories of the
            first series give the order.
        path: output PNG path (folders are created).
        ylabel, title: axis label and optional title.
    Returns:
        path.

        >>> plot_bars({'CRF x1': {'s': -1.2, 'b': 0.4}, 'CRF x100': {'s': 3.5, 'b': 5.6}},
        ...           'sanity.png', ylabel='possible minus impossible')
        'sanity.png'
    """
    if not groups:
        raise ValueError('plot_bars needs at least one series')
    categories = list(next(iter(groups.values())))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(categories) * max(1, len(groups) / 3)), 4))
    width = 0.8 / len(groups)
    for k, (name, values) in enumerate(groups.items()):
        heights = [values.get(c, np.nan) for c in categories]
        ax.bar(np.arange(len(categories)) + (k - (len(groups) - 1) / 2) * width, heights, width,
               label=str(name))
    ax.axhline(0.0, color='black', linewidth=0.8)
    ax.set_xticks(range(len(categories)), [str(c) for c in categories])
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(axis='y', alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_reliability(series, path, bins=10, title=None):
    """Save a reliability diagram: per confidence bin, the fraction of entities that are right
    against their mean confidence (a calibrated model lies on the diagonal); each series' ECE
    in the legend.

    Args:
        series: dict name -> ``(confidences, correct)`` (e.g.
        ``crf_lr.evaluation.calibration.calibrate``'s
            outcomes before and after the temperature).
        path: output PNG path (folders are created).
        bins: equal-width confidence bins; title: optional.
    Returns:
        path.

        >>> plot_reliability({'T = 1': before, 'T = 1.7': after}, 'runs/ner/reliability.png')
        'runs/ner/reliability.png'
    """
    from crf_lr.evaluation.calibration import expected_calibration_error, reliability
    if not series:
        raise ValueError('plot_reliability needs at least one series')
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], color='grey', linestyle='--', linewidth=0.8, label='calibrated')
    for name, (confidences, correct) in series.items():
        counts, mean, accuracy = reliability(confidences, correct, bins)
        filled = counts > 0
        ece = expected_calibration_error(confidences, correct, bins)
        ax.plot(mean[filled], accuracy[filled], marker='o',
                label=f'{name} (ECE {ece:.3f}, {int(counts.sum())} entities)')
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel('confidence (bin mean)')
    ax.set_ylabel('fraction of entities right')
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc='upper left')
    return _save(fig, path)
