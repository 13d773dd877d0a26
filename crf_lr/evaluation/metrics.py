"""Scores: strict and relaxed entity P/R/F1, span F1, a tag confusion matrix, the SIGHAN
segmentation score.

Every entity score returns the same dict: micro ``precision``, ``recall``, ``f1`` and ``support``
(the number of gold items) plus ``per_type`` ``{type: {precision, recall, f1, support}}`` over the
types found in gold or predictions. A ratio whose denominator is 0 is 0.0 (seqeval's default).

Inputs are unpadded: the gold sequences fix the lengths and a prediction of another length is an
error naming the sentence, so strip padding and [CLS]/[SEP] before scoring. Pure Python/NumPy.

    >>> entity_scores([['B-PER', 'I-PER', 'O']], [['B-PER', 'I-PER', 'O']])['f1']
    1.0
"""
import os
from collections import defaultdict

import numpy as np

from crf_lr.utils.atomic import atomic_path
from crf_lr.data.tagging import tag_types, tags_to_spans


def _ratio(numerator, denominator):
    return numerator / denominator if denominator else 0.0


def _scores(correct, predicted, gold):
    """``{precision, recall, f1, support}`` from counts."""
    precision, recall = _ratio(correct, predicted), _ratio(correct, gold)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {'precision': precision, 'recall': recall, 'f1': f1, 'support': gold}


def _report(counts):
    """Micro scores and ``per_type`` from ``{type: [correct, predicted, gold]}``."""
    report = _scores(*(sum(c[k] for c in counts.values()) for k in range(3)))
    report['per_type'] = {kind: _scores(*counts[kind]) for kind in sorted(counts)}
    return report


def _check_pairs(gold, pred, what):
    """Same number of sentences, and (for tag sequences) the same length in each."""
    if len(gold) != len(pred):
        raise ValueError(f'{len(gold)} gold sentences but {len(pred)} predicted ones')
    if what == 'tags':
        for i, (g, p) in enumerate(zip(gold, pred)):
            if len(g) != len(p):
                raise ValueError(f'sentence {i}: {len(g)} gold tags but {len(p)} predicted tags '
                                 '(strip padding and special tokens before scoring)')


def span_scores(gold_spans, pred_spans):
    """Exact-match span P/R/F1 (GlobalPointer outputs; nested and overlapping spans allowed).

    Args:
        gold_spans: list over sentences of iterables of ``(start, end, type)``.
        pred_spans: the same for predictions (same number of sentences).
    Returns:
        dict with micro ``precision``, ``recall``, ``f1``, ``support`` and ``per_type``.

        >>> span_scores([{(0, 2, 'LOC'), (0, 1, 'ORG')}], [{(0, 2, 'LOC')}])['recall']
        0.5
    """
    _check_pairs(gold_spans, pred_spans, 'spans')
    counts = defaultdict(lambda: [0, 0, 0])
    for i, (gold, pred) in enumerate(zip(gold_spans, pred_spans)):
        gold, pred = set(map(tuple, gold)), set(map(tuple, pred))
        for span in gold | pred:
            if len(span) != 3:
                raise ValueError(f'sentence {i}: expected spans (start, end, type), got {span!r}')
            kind = span[2]
            counts[kind][0] += span in gold and span in pred
            counts[kind][1] += span in pred
            counts[kind][2] += span in gold
    return _report(counts)


def entity_scores(gold_tags, pred_tags, scheme='BIO', strict=True):
    """Entity P/R/F1 from tag sequences, micro and per type (seqeval's numbers).

    With ``strict=True`` only well-formed entities count, as in seqeval's ``mode='strict'`` with
    IOB2 (scheme 'BIO') or IOBES ('BIOES'; 'BMES' the same with M for I); ``strict=False`` chunks
    like conlleval (seqeval's default mode). IOB1 is converted to IOB2 first.

    Args:
        gold_tags: list over sentences of lists of tag strings.
        pred_tags: the same for predictions, each sentence as long as its gold one.
        scheme: 'BIO', 'IOB1', 'BIOES' or 'BMES'.
    Returns:
        dict with micro ``precision``, ``recall``, ``f1``, ``support`` (gold entities) and
        ``per_type`` ``{type: {precision, recall, f1, support}}``.
    Raises:
        ValueError naming the sentence whose lengths differ, or the position of an unknown tag.

        >>> entity_scores([['B-LOC', 'I-LOC']], [['B-LOC', 'O']])['per_type']['LOC']['f1']
        0.0
    """
    _check_pairs(gold_tags, pred_tags, 'tags')
    return span_scores([tags_to_spans(tags, scheme, strict) for tags in gold_tags],
                       [tags_to_spans(tags, scheme, strict) for tags in pred_tags])


def relaxed_scores(gold_tags, pred_tags, scheme='BIO'):
    """Token-level type match, whatever the boundaries (B-/I-/E-/S- prefixes are ignored).

    Recall of type X: the share of tokens tagged X in gold whose predicted tag also has type X
    ("United States of America" as LOC with 3 of its 4 tokens predicted LOC: 0.75). Precision of
    type X: the share of tokens predicted with type X whose gold tag has type X. Micro scores pool
    the counts of all types; ``support`` counts gold entity tokens.

    Args:
        gold_tags: list over sentences of lists of tag strings.
        pred_tags: the same for predictions, each sentence as long as its gold one.
        scheme: 'BIO', 'IOB1', 'BIOES' or 'BMES'.
    Returns:
        dict with micro ``precision``, ``recall``, ``f1``, ``support`` and ``per_type``.

        >>> gold, pred = [['B-LOC', 'I-LOC', 'I-LOC', 'I-LOC']], [['B-LOC', 'I-LOC', 'O', 'B-LOC']]
        >>> relaxed_scores(gold, pred)['recall']
        0.75
    """
    _check_pairs(gold_tags, pred_tags, 'tags')
    counts = defaultdict(lambda: [0, 0, 0])
    for gold, pred in zip(gold_tags, pred_tags):
        for g, p in zip(tag_types(gold, scheme), tag_types(pred, scheme)):
            if g is not None:
                counts[g][2] += 1
                counts[g][0] += g == p
            if p is not None:
                counts[p][1] += 1
    return _report(counts)


def _label_key(label):
    """'O' first, then by type, then by prefix in B, I, M, E, S order."""
    label = str(label)
    return label != 'O', label[2:], 'BIMES'.find(label[:1]), label


def confusion_matrix(gold_tags, pred_tags, labels=None):
    """Counts of (gold tag, predicted tag) over the real tokens of every sentence.

    Args:
        gold_tags: list over sentences of lists of tags (unpadded).
        pred_tags: the same for predictions, each sentence as long as its gold one.
        labels: optional list of L tags fixing the order; default: every tag seen, 'O' first, then
            by type and prefix.
    Returns:
        ``(matrix, labels)``: int64 array (L, L), ``matrix[i, j]`` = tokens with gold ``labels[i]``
        predicted as ``labels[j]``; and the list of labels.

        >>> matrix, labels = confusion_matrix([['B-PER', 'O']], [['O', 'O']])
        >>> labels, matrix.tolist()
        (['O', 'B-PER'], [[1, 0], [1, 0]])
    """
    _check_pairs(gold_tags, pred_tags, 'tags')
    if labels is None:
        labels = sorted({t for tags in (*gold_tags, *pred_tags) for t in tags}, key=_label_key)
    labels = list(labels)
    index = {label: k for k, label in enumerate(labels)}
    matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for i, (gold, pred) in enumerate(zip(gold_tags, pred_tags)):
        for g, p in zip(gold, pred):
            if g not in index or p not in index:
                raise ValueError(f'sentence {i}: tag {g if g not in index else p!r} is not in '
                                 'labels')
            matrix[index[g], index[p]] += 1
    return matrix, labels


def format_confusion_matrix(matrix, labels):
    """The confusion matrix as aligned text: one row per gold tag, one column per predicted tag.

    Args:
        matrix: (L, L) integer array from ``confusion_matrix``.
        labels: list of L tags.
    Returns:
        str, L + 1 lines.

        >>> print(format_confusion_matrix(*confusion_matrix([['B-PER', 'O']], [['O', 'O']])))
    """
    matrix = np.asarray(matrix)
    names = ['gold\\pred'] + [str(label) for label in labels]
    width = max(max(map(len, names)), len(str(matrix.max(initial=0))))
    rows = [' '.join(name.rjust(width) for name in names)]
    for name, row in zip(names[1:], matrix):
        rows.append(' '.join([name.rjust(width)] + [str(int(v)).rjust(width) for v in row]))
    return '\n'.join(rows)


def plot_confusion_matrix(matrix, labels, ax=None, normalize=False, path=None):
    """Heatmap of a confusion matrix with matplotlib (imported here, not at module load).

    Args:
        matrix: (L, L) integer array; labels: list of L tags.
        ax: optional matplotlib Axes; default a new figure (no pyplot, so no display needed).
        normalize: divide each row by its gold count (rows of zeros stay zero).
        path: optional file to save the figure to (e.g. 'confusion.png').
    Returns:
        the matplotlib Axes.

        >>> plot_confusion_matrix(*confusion_matrix(gold, pred), path='confusion.png')
    """
    from matplotlib.figure import Figure
    matrix = np.asarray(matrix, dtype=float)
    if normalize:
        totals = matrix.sum(axis=1, keepdims=True)
        matrix = np.divide(matrix, totals, out=np.zeros_like(matrix), where=totals > 0)
    if ax is None:
        size = 1.5 + 0.45 * len(labels)
        ax = Figure(figsize=(size + 1, size)).subplots()
    image = ax.imshow(matrix, cmap='Blues')
    ax.figure.colorbar(image, ax=ax)
    ax.set_xticks(range(len(labels)), labels, rotation=90)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel('predicted')
    ax.set_ylabel('gold')
    for (i, j), value in np.ndenumerate(matrix):
        if value:
            ax.text(j, i, f'{value:.2f}' if normalize else str(int(value)),
                    ha='center', va='center', fontsize=7,
                    color='white' if value > matrix.max() / 2 else 'black')
    if path is not None:
        ax.figure.tight_layout()
        with atomic_path(path) as temporary:             # a kill leaves no torn image
            ax.figure.savefig(temporary, dpi=120, format=os.path.splitext(path)[1][1:] or 'png')
    return ax


def _word_spans(words, i, side):
    spans, start = set(), 0
    for word in words:
        if not isinstance(word, str) or not word:
            raise ValueError(f'sentence {i}: {side} word {word!r} is not a non-empty string')
        spans.add((start, start + len(word)))
        start += len(word)
    return spans


def segmentation_scores(gold, pred, train_words=None):
    """The SIGHAN bakeoff ``score`` numbers for word segmentation.

    A predicted word is correct when the same characters form a gold word at the same place.
    OOV words are gold words absent from ``train_words``; IV words are the others.

    Args:
        gold: list over sentences of lists of words (str).
        pred: the same segmentation of the same sentences (equal text, sentence by sentence).
        train_words: optional iterable of training-dictionary words.
    Returns:
        dict with ``precision``, ``recall``, ``f1``, ``oov_recall``, ``iv_recall``, ``oov_rate``
        (the last three None without ``train_words``; a recall is None when it has no words to
        count) and the counts ``gold_words``, ``pred_words``, ``correct_words``.
    Raises:
        ValueError naming the first sentence whose gold and predicted text differ.

        >>> segmentation_scores([['我们', '爱']], [['我', '们', '爱']])['recall']
        0.5
    """
    _check_pairs(gold, pred, 'words')
    dictionary = None if train_words is None else set(train_words)
    n_gold = n_pred = n_correct = 0
    oov = [0, 0]  # [correct, total] over gold words not in the dictionary
    iv = [0, 0]
    for i, (gold_words, pred_words) in enumerate(zip(gold, pred)):
        if ''.join(gold_words) != ''.join(pred_words):
            raise ValueError(f'sentence {i}: gold and predicted words spell different texts: '
                             f'{"".join(gold_words)[:40]!r} vs {"".join(pred_words)[:40]!r}')
        gold_spans, pred_spans = (_word_spans(gold_words, i, 'gold'),
                                  _word_spans(pred_words, i, 'pred'))
        n_gold, n_pred = n_gold + len(gold_spans), n_pred + len(pred_spans)
        n_correct += len(gold_spans & pred_spans)
        if dictionary is not None:
            text = ''.join(gold_words)
            for start, end in gold_spans:
                counter = iv if text[start:end] in dictionary else oov
                counter[0] += (start, end) in pred_spans
                counter[1] += 1
    scores = _scores(n_correct, n_pred, n_gold)
    del scores['support']
    known = dictionary is not None
    scores.update(
        oov_recall=_ratio(*oov) if known and oov[1] else None,
        iv_recall=_ratio(*iv) if known and iv[1] else None,
        oov_rate=_ratio(oov[1], n_gold) if known else None,
        gold_words=n_gold, pred_words=n_pred, correct_words=n_correct)
    return scores
