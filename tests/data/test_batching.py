"""Batches: per-batch padding, masks, seeded length buckets, label formats, the overflow rule, and
the padding-invariance of metrics (garbage predicted on padding / [CLS] / [SEP] changes no
score)."""
import warnings

import numpy as np
import pytest

from crf_lr.data.batching import Batch, Batches, Encoded, strip_padding
from crf_lr.decoding.viterbi import viterbi_decode
from crf_lr.evaluation.metrics import entity_scores
from crf_lr.decoding.spans import dense_targets, pad_sparse_targets, sparse_targets
from crf_lr.data.tagging import label_list, spans_to_tags
from helpers.doc_examples import example_code

LABELS = label_list(['LOC', 'PER'], 'BIO')          # ['O', 'B-LOC', 'I-LOC', 'B-PER', 'I-PER']
CLS, SEP = 101, 102


def random_spans(rng, length):
    spans, position = [], 0
    while position < length:
        start = position + int(rng.integers(0, 4))
        end = min(length, start + int(rng.integers(1, 4)))
        if start < end:
            spans.append((start, end, ['LOC', 'PER'][int(rng.integers(2))]))
        position = end + 1
    return spans


@pytest.fixture(scope='module')
def corpus():
    """40 sequences of 1-30 tokens: their spans, and Encoded items with [CLS]/[SEP] labelled 'O'
    (0)."""
    rng = np.random.default_rng(0)
    spans, items = [], []
    for k in range(40):
        length = int(rng.integers(1, 31))
        spans.append(random_spans(rng, length))
        ids = [LABELS.index(t) for t in spans_to_tags(spans[-1], length)]
        items.append(Encoded([CLS] + rng.integers(1, 100, length).tolist() + [SEP],
                             labels=[0] + ids + [0], source=f'sample.txt:{k + 1}'))
    return spans, items


def test_each_batch_is_padded_to_its_own_longest_item(corpus):
    _, items = corpus
    batches = Batches(items, batch_size=6, seed=3)
    assert len(batches) == 7
    seen = []
    for batch in batches:
        lengths = [len(items[i].token_ids) for i in batch.indices]
        assert batch.token_ids.shape == (len(lengths),
                                         max(lengths)) and batch.token_ids.dtype == np.int32
        for row, i in enumerate(batch.indices):
            n = len(items[i].token_ids)
            assert batch.token_ids[row, :n].tolist() == items[i].token_ids
            assert batch.labels[row, :n].tolist() == items[i].labels
            assert not batch.token_ids[row, n:].any() and not batch.labels[row, n:].any()
            assert batch.mask[row].tolist() == [1] * n + [0] * (max(lengths) - n)
            assert batch.label_mask[row].tolist() == [0] + [1] * (n - 2) + [0] * (max(lengths) - n
                                                                                  + 1)
        assert batch.lengths.tolist() == lengths and not batch.segment_ids.any()
        seen.extend(batch.indices.tolist())
    assert sorted(seen) == list(range(len(items)))                   # every item once per epoch


def test_length_multiple_pads_to_few_shapes_and_never_past_maxlen(corpus):
    """Rows hold the same values as with length_multiple=1, followed by more padding; every batch
    length is a multiple of 8, capped at maxlen=28 unless an item is longer (error otherwise)."""
    _, items = corpus
    plain = {tuple(b.indices): b for b in Batches(items, 6, seed=3)}
    for maxlen, multiple in ((None, 8), (32, 8), (28, 8)):
        kept = [item for item in items if maxlen is None or len(item.token_ids) <= maxlen]
        for batch in Batches(kept, 6, seed=3, maxlen=maxlen, length_multiple=multiple):
            n, longest = batch.token_ids.shape[1], batch.lengths.max()
            assert n == (min(-(-longest // 8) * 8, maxlen or np.inf) if longest <= (maxlen or n)
                         else longest)
            assert n >= longest and (n % 8 == 0 or n == maxlen)
            assert not batch.token_ids[:, longest:].any() and not batch.mask[:, longest:].any()
            assert not batch.label_mask[:, longest:].any() and not batch.labels[:, longest:].any()
            if maxlen is None:
                reference = plain[tuple(batch.indices)]
                for field in ('token_ids', 'labels', 'mask', 'label_mask'):
                    assert np.array_equal(getattr(batch, field)[:, :longest],
                                          getattr(reference, field))
    assert len({b.token_ids.shape[1] for b in Batches(items, 6, seed=3, length_multiple=8)}) <= 4


def test_a_smaller_last_batch_comes_first_when_shuffling(corpus):
    """40 items in batches of 6: the batch of 4 opens every shuffled epoch (the others keep
    their seeded order); unshuffled batches keep the item order."""
    _, items = corpus
    batches = Batches(items, 6, seed=3)
    orders = [[tuple(b.indices) for b in batches] for _ in range(3)]
    assert all(len(order[0]) == 4 and {len(o) for o in order[1:]} == {6} for order in orders)
    assert len({tuple(order) for order in orders}) == 3
    assert [len(b.indices) for b in Batches(items, 6, shuffle=False, bucket=0)] == [6] * 6 + [4]


@pytest.mark.parametrize('name', ['crf', 'softmax', 'global_pointer', 'efficient_global_pointer'])
def test_extra_padding_never_changes_the_loss(tiny_bert_config_path, corpus, name):
    """Each head's loss on every batch is the same with length_multiple=1 and 32 (the masks keep
    the padding out), to float32 rounding. Tag heads read labels without [CLS] (piece states)."""
    from bert4keras.models import build_transformer_model
    from crf_lr.compat import keras
    from crf_lr.model.heads import make_head, piece_states
    spans, items = corpus
    keras.utils.set_random_seed(0)
    encoder = build_transformer_model(tiny_bert_config_path, model='bert')
    head = make_head(name, ['LOC', 'PER'], 'BIO', head_size=8)
    model = keras.Model(encoder.inputs, head.build(piece_states(encoder)))
    model.compile(loss=head.loss)
    small = [Encoded([i % 60 + 4 for i in item.token_ids],
                     labels=item.labels if head.kind == 'tags' else spans[k])
             for k, item in enumerate(items[:16])]
    label_fn = None if head.kind == 'tags' else (
        lambda rows, n: head.batch_targets(rows, n))

    def losses(multiple):
        batches = Batches(small, 8, label_fn=label_fn, seed=1, length_multiple=multiple)
        return {tuple(b.indices): (model.test_on_batch(b.inputs, b.labels[:, 1:] if label_fn is None
                                                       else b.labels), b.token_ids.shape[1])
                for b in batches}
    plain, padded = losses(1), losses(32)
    assert all(padded[k][1] == 32 for k in plain) and min(plain[k][1] for k in plain) < 32
    np.testing.assert_allclose([padded[k][0] for k in plain], [plain[k][0] for k in plain],
                               rtol=1e-5)


def to_tags(rows):
    return [[LABELS[i] for i in row] for row in rows]


def padded_cells(batches):
    return sum(batch.token_ids.size - batch.lengths.sum() for batch in batches)


def test_buckets_cut_padding_and_the_order_is_seeded(corpus):
    _, items = corpus

    def epochs(batches):
        return [[batch.indices.tolist() for batch in batches] for _ in range(2)]

    first, again = epochs(Batches(items, 4, seed=0)), epochs(Batches(items, 4, seed=0))
    assert first == again and first[0] != first[1]  # seeded; a new order each epoch
    assert epochs(Batches(items, 4, seed=1)) != first
    bucketed, unsorted = Batches(items, 4, bucket=10, seed=0), Batches(items, 4, bucket=0, seed=0)
    assert padded_cells(bucketed) < padded_cells(unsorted)
    in_order = Batches(items, 4, shuffle=False, bucket=0)
    assert [i for batch in in_order for i in batch.indices] == list(range(len(items)))
    by_length = [len(items[i].token_ids) for batch in Batches(items, 4, shuffle=False)
                 for i in batch.indices]
    assert by_length == sorted(by_length)


def test_garbage_on_padding_and_special_positions_changes_no_score(corpus):
    spans, items = corpus
    gold = [spans_to_tags(s, len(item.token_ids) - 2) for s, item in zip(spans, items)]
    rng = np.random.default_rng(1)
    noise = {}  # a fixed wrong guess at some real tokens, so the scores are not trivially 1.0

    def predict(batch, garbage):
        pred = batch.labels.copy()
        for row, i in enumerate(batch.indices):
            noise.setdefault(i, rng.integers(0, len(LABELS), batch.lengths[row] - 2) * (rng.random(
                batch.lengths[row] - 2) < 0.2))
            pred[row, 1:batch.lengths[row] - 1] = np.where(noise[i] > 0, noise[i],
                                                           pred[row, 1:batch.lengths[row] - 1])
        if garbage:   # any label on [CLS], [SEP] and padding
            outside = batch.label_mask == 0
            pred[outside] = rng.integers(1, len(LABELS), pred.shape)[outside]
        return pred

    batches = Batches(items, batch_size=8, seed=0)
    clean = to_tags(batches.collect(lambda b: predict(b, False)))
    dirty = to_tags(batches.collect(lambda b: predict(b, True)))
    assert clean == dirty
    assert entity_scores(gold, clean) == entity_scores(gold, dirty)
    assert 0.3 < entity_scores(gold, clean)['f1'] < 1.0

    # The test can fail: without stripping, the garbage is scored.
    batch = next(iter(batches))
    dirty_rows, clean_rows = predict(batch, True), predict(batch, False)
    gold_rows = [['O'] + gold[i] + ['O'] * (batch.token_ids.shape[1] - len(gold[i]) - 1)
                 for i in batch.indices]
    assert (entity_scores(gold_rows, to_tags(dirty_rows))['f1']
            < entity_scores(gold_rows, to_tags(clean_rows))['f1'])
    # strip_padding by lengths agrees with the batch's label mask.
    assert all((a == b).all() for a, b in zip(strip_padding(dirty_rows, batch.lengths),
                                              batch.strip(dirty_rows)))


def test_strip_padding_by_hand():
    predictions = np.array([[7, 5, 6, 7, 9, 9], [7, 1, 2, 3, 4, 7]])
    assert [r.tolist() for r in strip_padding(predictions, [4, 6])] == [[5, 6], [1, 2, 3, 4]]
    assert [r.tolist() for r in strip_padding(predictions, [4, 6], special_tokens=False)] == [
        [7, 5, 6, 7], [7, 1, 2, 3, 4, 7]]
    scores = np.arange(2 * 6 * 3).reshape(2, 6, 3)                     # trailing dims are kept
    first, second = strip_padding(scores, [3, 2])
    assert first.tolist() == [[3, 4, 5]] and second.shape == (0, 3)
    with pytest.raises(ValueError, match=r'lengths must lie in \[2, 6\]'):
        strip_padding(predictions, [1, 6])
    with pytest.raises(ValueError, match='lengths'):
        strip_padding(predictions, [4])


def test_item_label_mask_keeps_first_pieces_only():
    # 'Blackburn' -> 2 pieces; only first pieces are scored.
    item = Encoded([CLS, 11, 12, 13, SEP], labels=[0, 3, 4, 4, 0], label_mask=[0, 1, 1, 0, 0])
    batches = Batches([item, Encoded([CLS, 20, SEP], labels=[0, 1, 0])], batch_size=2,
                      shuffle=False)
    assert [r.tolist() for r in batches.collect(lambda b: b.labels)] == [[3, 4], [1]]


def test_forfit_yields_keras_tuples_forever(corpus):
    _, items = corpus
    batches = Batches(items, batch_size=16, seed=0)
    stream = batches.forfit()
    steps = [next(stream) for _ in range(2 * len(batches) + 1)]
    (token_ids, segment_ids), labels = steps[0]
    assert token_ids.shape == segment_ids.shape == labels.shape
    inputs, labels, weights = next(Batches(items, 16, seed=0).forfit(sample_weights=True))
    first_batch = next(iter(Batches(items, 16, seed=0)))
    assert weights.dtype == np.float32 and weights.shape == labels.shape
    assert weights.sum() == sum(len(items[i].token_ids) - 2 for i in first_batch.indices)


@pytest.mark.parametrize('kind', ['dense', 'sparse'])
def test_label_fn_builds_global_pointer_targets_at_the_batch_length(corpus, kind):
    spans, items = corpus
    span_items = [Encoded(item.token_ids, labels=s, source=item.source) for s,
                  item in zip(spans, items)]
    def label_fn(batch_spans, n):
        if kind == 'dense':
            return np.stack([dense_targets(s, n, ['LOC', 'PER'], 1) for s in batch_spans])
        return pad_sparse_targets([sparse_targets(s, n, ['LOC', 'PER'], 1) for s in batch_spans])
    for batch in Batches(span_items, batch_size=8, label_fn=label_fn, seed=0):
        n = batch.token_ids.shape[1]
        assert batch.labels.shape[:2] == (len(batch.indices), 2)
        for row, i in enumerate(batch.indices):
            if kind == 'dense':
                assert (batch.labels[row] == dense_targets(spans[i], n, ['LOC', 'PER'], 1)).all()
                # nothing on padding rows
                assert not batch.labels[row][:, batch.lengths[row]:].any()
            else:
                own = sparse_targets(spans[i], n, ['LOC', 'PER'], 1)
                assert (batch.labels[row, :, :own.shape[1]] == own).all()


def test_overflow_is_an_error_or_a_counted_truncation(corpus):
    _, items = corpus
    longest = max(items, key=lambda item: len(item.token_ids))
    with pytest.raises(ValueError, match=f'{longest.source}: {len(longest.token_ids)} token ids '
                                         'exceed maxlen=20'):
        Batches([longest], maxlen=20)
    too_long = sum(len(item.token_ids) > 20 for item in items)
    with pytest.warns(UserWarning, match=f'{too_long} of 40 sequences were longer than maxlen=20'):
        batches = Batches(items, 8, maxlen=20, overflow='truncate')
    assert len(batches.truncated) == too_long and max(batches.lengths) == 20
    cut = batches.items[items.index(longest)]
    assert cut.token_ids == longest.token_ids[:19] + [SEP]
    assert cut.labels == longest.labels[:19] + [0]
    assert cut.label_mask == [0] + [1] * 18 + [0]
    with pytest.raises(ValueError, match='span targets cannot be cut'):
        Batches(items, maxlen=20, overflow='truncate', label_fn=lambda spans, n: None)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no warning when nothing is cut
        Batches(items, 8, maxlen=40, overflow='truncate')


@pytest.mark.parametrize('item, match', [
    (Encoded([CLS, 5, SEP], labels=[0, 1], source='a.txt:3'),
     'a.txt:3: labels has 2 entries for 3'),
    (Encoded([CLS, 5.0, SEP], source='a.txt:4'), 'a.txt:4: token_ids must be integers'),
    (Encoded([CLS, 5, SEP], segment_ids=[0, 0], source='a.txt:5'), 'a.txt:5: segment_ids has 2'),
    (Encoded([CLS], source='a.txt:6'), r'a.txt:6: token_ids has 1 ids; expected \[CLS\]'),
    (dict(token_ids=[CLS, 5, SEP], label_mask=[0, 1], source='a.txt:7'),
     'a.txt:7: label_mask has 2'),
])
def test_bad_items_name_their_source(item, match):
    with pytest.raises(ValueError, match=match):
        Batches([item])


def test_bad_arguments():
    item = Encoded([CLS, 5, SEP])
    for kwargs, match in [(dict(batch_size=0), 'batch_size'), (dict(overflow='drop'), 'overflow'),
                          (dict(maxlen=2), 'maxlen'), (dict(length_multiple=0), 'length_multiple'),
                          (dict(length_multiple=8.0), 'length_multiple')]:
        with pytest.raises(ValueError, match=match):
            Batches([item], **kwargs)
    with pytest.raises(ValueError, match='at least one item'):
        Batches([])
    mixed = Batches([item, Encoded([CLS, 6, SEP], labels=[0, 1, 0], source='b:1')], 2,
                    shuffle=False)
    with pytest.raises(ValueError, match='some items of a batch have labels'):
        next(iter(mixed))
    with pytest.raises(ValueError, match=r'do not match the batch'):
        next(iter(Batches([item], 1))).strip(np.zeros((1, 4)))


def test_the_examples_of_strip_and_collect_run_as_written():
    """Batch.strip's and Batches.collect's docstring examples, on a stand-in model: one row per
    item, in the items' order, of its scored positions (they once called a ``crf_decode`` that
    does not exist, and collected Viterbi's ragged paths, which no batch can strip)."""
    rng = np.random.default_rng(0)
    items = [Encoded(token_ids=[CLS] + [7] * n + [SEP]) for n in (5, 2, 7)]

    class Model:
        @staticmethod
        def predict(inputs):
            return rng.normal(size=(*inputs[0].shape, len(LABELS)))

    batch = next(iter(Batches(items, 2, shuffle=False)))
    namespace = dict(Batches=Batches, viterbi_decode=viterbi_decode, model=Model, batch=batch,
                     test_items=items, trans=rng.normal(size=(len(LABELS),) * 2))
    exec(example_code(Batch.strip), namespace)
    assert [len(row) for row in namespace['per_item']] == [
        len(items[i].token_ids) - 2 for i in batch.indices]
    exec(example_code(Batches.collect), namespace)
    assert [len(path) for path in namespace['tag_ids']] == [5, 2, 7]
