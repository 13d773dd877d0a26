"""Metrics: seqeval as the oracle for entity scores, hand counts for relaxed, confusion and SIGHAN
scores."""
import random
import warnings

import numpy as np
import pytest
from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
from seqeval.scheme import IOB2, IOBES

from crf_lr.evaluation.metrics import (confusion_matrix, entity_scores, format_confusion_matrix,
                                       plot_confusion_matrix, relaxed_scores, segmentation_scores,
                                       span_scores)
from crf_lr.data.tagging import label_list, spans_to_tags, tags_to_spans

TYPES = ['PER', 'LOC', 'ORG']


def random_corpus(rng, scheme, valid):
    """Random gold tag sequences (from spans when ``valid``, else any tag anywhere) and predictions
    that copy each gold tag with probability 0.7 and draw any tag otherwise (often ill-formed)."""
    labels = label_list(TYPES, scheme)

    def gold_sentence(n):
        if not valid:
            return [rng.choice(labels) for _ in range(n)]
        spans, position = [], 0
        while position < n:
            position += rng.randint(0, 2)
            size = rng.randint(1, 3)
            if position + size <= n:
                spans.append((position, position + size, rng.choice(TYPES)))
            position += size
        return spans_to_tags(spans, n, scheme)
    gold = [gold_sentence(rng.randint(0, 9)) for _ in range(rng.randint(1, 6))]
    pred = [[t if rng.random() < 0.7 else rng.choice(labels) for t in s] for s in gold]
    return gold, pred


def seqeval_report(gold, pred, scheme, strict):
    """seqeval's numbers in our dict layout (BMES read as IOBES with M for I)."""
    gold = [[t.replace('M-', 'I-') for t in s] for s in gold]
    pred = [[t.replace('M-', 'I-') for t in s] for s in pred]
    options = dict(mode='strict', scheme=IOB2 if scheme == 'BIO' else IOBES) if strict else {}
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        micro = {'precision': precision_score(gold, pred, **options),
                 'recall': recall_score(gold, pred, **options),
                 'f1': f1_score(gold, pred, **options)}
        try:
            report = classification_report(gold, pred, output_dict=True, **options)
        except ValueError:  # seqeval cannot report when no entity exists at all
            report = {}
    per_type = {k:
                {m: v[m if m != 'f1' else 'f1-score']
                 for m in ('precision', 'recall', 'f1', 'support')}
                for k, v in report.items() if not k.endswith(' avg')}
    return micro, per_type


def assert_same(ours, micro, per_type):
    for metric, value in micro.items():
        assert ours[metric] == pytest.approx(value, abs=1e-12), metric
    assert set(ours['per_type']) == set(per_type)
    for kind, scores in per_type.items():
        for metric, value in scores.items():
            assert ours['per_type'][kind][metric] == pytest.approx(value, abs=1e-12), (kind, metric)


@pytest.mark.parametrize('scheme, strict', [('BIO', True), ('BIOES', True), ('BMES', True),
                                             ('BIO', False), ('BIOES', False)])
@pytest.mark.parametrize('valid', [True, False])
def test_entity_scores_match_seqeval(scheme, strict, valid):
    rng = random.Random(len(scheme) * 10 + 2 * strict + valid)
    for _ in range(150):
        gold, pred = random_corpus(rng, scheme, valid)
        assert_same(entity_scores(gold, pred, scheme, strict),
                    *seqeval_report(gold, pred, scheme, strict))


def test_iob1_scores_match_conlleval():
    # IOB1 converted to IOB2 and chunked strictly equals the conlleval chunker on IOB1 tags.
    rng = random.Random(7)
    for _ in range(150):
        gold, pred = random_corpus(rng, 'IOB1', valid=False)
        assert_same(entity_scores(gold, pred, 'IOB1'), *seqeval_report(gold, pred, 'IOB1', False))


def test_entity_scores_hand_case_and_errors():
    gold = [['B-PER', 'I-PER', 'O', 'B-LOC'], ['B-ORG', 'O']]
    pred = [['B-PER', 'I-PER', 'O', 'B-ORG'], ['I-ORG', 'O']]  # I-ORG after nothing: not an entity
    scores = entity_scores(gold, pred)
    assert (scores['precision'], scores['recall'], scores['support']) == (0.5, 1 / 3, 3)
    assert scores['per_type']['ORG'] == {'precision': 0.0, 'recall': 0.0, 'f1': 0.0, 'support': 1}
    with pytest.raises(ValueError, match='sentence 1: 2 gold tags but 3 predicted'):
        entity_scores(gold, [pred[0], ['O', 'O', 'O']])
    with pytest.raises(ValueError, match='2 gold sentences but 1'):
        entity_scores(gold, pred[:1])
    with pytest.raises(ValueError, match="'B_PER' at position 0"):
        entity_scores([['B_PER']], [['O']])


def test_span_scores_equal_entity_scores_on_flat_cases():
    rng = random.Random(8)
    for _ in range(100):
        gold, pred = random_corpus(rng, 'BIO', valid=True)
        gold_spans = [set(tags_to_spans(s)) for s in gold]
        pred_spans = [set(tags_to_spans(s)) for s in pred]
        assert span_scores(gold_spans, pred_spans) == entity_scores(gold, pred)
        assert_same(span_scores(gold_spans, pred_spans), *seqeval_report(gold, pred, 'BIO', True))


def test_span_scores_nested_hand_case():
    gold = [{(0, 4, 'ORG'), (0, 2, 'LOC'), (5, 6, 'PER')}, set()]
    # duplicate counted once
    pred = [[(0, 4, 'ORG'), (0, 2, 'LOC'), (0, 2, 'LOC')], [(1, 2, 'PER')]]
    scores = span_scores(gold, pred)
    assert (scores['precision'], scores['recall'], scores['support']) == (2 / 3, 2 / 3, 3)
    assert scores['per_type']['PER'] == {'precision': 0.0, 'recall': 0.0, 'f1': 0.0, 'support': 1}
    assert scores['per_type']['LOC']['f1'] == 1.0


def test_relaxed_scores_hand_counts():
    # United States of America (LOC): 3 of 4 tokens predicted LOC with broken boundaries.
    gold = [['B-LOC', 'I-LOC', 'I-LOC', 'I-LOC', 'O', 'B-PER']]
    pred = [['B-LOC', 'I-LOC', 'O', 'B-LOC', 'B-LOC', 'B-ORG']]
    scores = relaxed_scores(gold, pred)
    # LOC: gold 4 tokens, 3 right; predicted LOC 4 tokens, 3 with gold LOC (one on a gold O).
    assert scores['per_type']['LOC'] == {'precision': 0.75, 'recall': 0.75, 'f1': 0.75,
                                         'support': 4}
    assert scores['per_type']['PER'] == {'precision': 0.0, 'recall': 0.0, 'f1': 0.0, 'support': 1}
    assert scores['per_type']['ORG'] == {'precision': 0.0, 'recall': 0.0, 'f1': 0.0, 'support': 0}
    # micro: 3 right of 5 gold entity tokens and of 5 predicted entity tokens.
    assert (scores['precision'], scores['recall'], scores['support']) == (0.6, 0.6, 5)
    assert relaxed_scores([['B-LOC', 'E-LOC']], [['S-LOC', 'S-LOC']], 'BIOES')['f1'] == 1.0
    with pytest.raises(ValueError, match='sentence 0'):
        relaxed_scores(gold, [pred[0][:-1]])


def test_confusion_matrix_hand_counts(tmp_path):
    gold = [['B-PER', 'I-PER', 'O'], ['B-LOC', 'O']]
    pred = [['B-PER', 'B-PER', 'O'], ['O', 'O']]
    matrix, labels = confusion_matrix(gold, pred)
    assert labels == ['O', 'B-LOC', 'B-PER', 'I-PER']
    assert matrix.tolist() == [[2, 0, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0]]
    assert matrix.sum() == 5  # only real tokens
    with pytest.raises(ValueError, match='sentence 1: 2 gold tags but 4 predicted'):
        confusion_matrix(gold, [pred[0], ['O', 'O', 'O', 'O']])  # padded predictions are refused
    with pytest.raises(ValueError, match="sentence 1: tag 'B-LOC' is not in labels"):
        confusion_matrix(gold, pred, labels=['O', 'B-PER', 'I-PER'])
    text = format_confusion_matrix(matrix, labels)
    lines = text.splitlines()
    assert len(lines) == 5 and len({len(line) for line in lines}) == 1
    assert lines[2].split() == ['B-LOC', '1', '0', '0', '0']
    ax = plot_confusion_matrix(matrix, labels, normalize=True, path=tmp_path / 'cm.png')
    assert (tmp_path / 'cm.png').stat().st_size > 0
    assert [t.get_text() for t in ax.get_yticklabels()] == labels


def test_segmentation_scores_hand_counts():
    gold = [['我们', '在', '北京'], ['今天', '好']]
    assert segmentation_scores(gold, gold, train_words=['我们', '好'])['f1'] == 1.0
    chars = [list(''.join(s)) for s in gold]
    scores = segmentation_scores(gold, chars)
    # correct: 在, 好 -> 2 of 8 predicted, 2 of 5 gold.
    assert (scores['precision'], scores['recall']) == (2 / 8, 2 / 5)
    assert scores['f1'] == pytest.approx(2 * 0.25 * 0.4 / 0.65)
    assert scores['oov_recall'] is None and scores['iv_recall'] is None
    pred = [['我们', '在', '北', '京'], ['今天好']]
    scores = segmentation_scores(gold, pred, train_words={'我们', '在', '好', '北'})
    # IV gold words: 我们 (right), 在 (right), 好 (wrong); OOV: 北京 (wrong), 今天 (wrong).
    assert (scores['iv_recall'], scores['oov_recall'], scores['oov_rate']) == (2 / 3, 0.0, 2 / 5)
    assert (scores['precision'], scores['recall']) == (2 / 5, 2 / 5)
    with pytest.raises(ValueError, match='sentence 1: gold and predicted words spell different'):
        segmentation_scores(gold, [gold[0], ['今天', '坏']])
    with pytest.raises(ValueError, match="sentence 0: pred word '' "):
        segmentation_scores(gold[:1], [['我们', '', '在', '北京']])


def test_segmentation_scores_brute_force():
    # Oracle: words as character-offset sets compared by brute enumeration of boundaries.
    rng = random.Random(9)
    for _ in range(100):
        text = ''.join(rng.choice('甲乙丙丁') for _ in range(rng.randint(1, 12)))

        def segment():
            cuts = ([0] + sorted(rng.sample(range(1, len(text)), rng.randint(0, len(text) - 1)))
                    + [len(text)])
            return [text[a:b] for a, b in zip(cuts, cuts[1:])]
        gold, pred = segment(), segment()
        def bounds(ws):
            return {(sum(map(len, ws[:k])), sum(map(len, ws[:k + 1]))) for k in range(len(ws))}
        correct = len(bounds(gold) & bounds(pred))
        scores = segmentation_scores([gold], [pred])
        assert (scores['correct_words'], scores['gold_words'], scores['pred_words']) == \
            (correct, len(gold), len(pred))
        assert np.isclose(scores['recall'], correct / len(gold))
