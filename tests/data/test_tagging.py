"""Tagging: round trips for every scheme, seqeval's chunkers as oracles, brute-force transition
checks, hand-written WordPiece/rematch alignments and random window round trips."""
import itertools
import random
import re

import numpy as np
import pytest
from seqeval.metrics.sequence_labeling import get_entities
from seqeval.scheme import IOB2, IOBES, Tokens

from crf_lr.data.tagging import (REPAIR_HINT, SCHEMES, Scheme, TagError, allowed_transitions,
                                 get_scheme, iob1_to_iob2, label_list, pieces_to_word_labels,
                                 spans_to_tags, spread_labels, tags_to_spans, tags_to_words,
                                 validate_spans, words_to_tags)
from crf_lr.data.alignment import (align_word_labels, char_spans_to_token_spans, offsets_to_tags,
                                   token_spans_to_char_spans)
from crf_lr.data.windows import merge_window_spans, spans_to_windows, split_into_windows
from helpers.doc_examples import example_code, example_output

FLAT = ['BIO', 'IOB1', 'BIOES', 'BMES']
TYPES = ['PER', 'LOC']


def random_flat_spans(rng, length, types=TYPES):
    """Random non-overlapping spans over ``length`` positions, adjacent same-type spans included."""
    spans, position = [], 0
    while position < length:
        position += rng.choice([0, 0, 1, 2])
        size = rng.randint(1, 4)
        if position + size > length:
            break
        spans.append((position, position + size, rng.choice(types)))
        position += size
    return spans


def random_tags(rng, scheme, length):
    """Any tag sequence (valid or not) over the scheme's alphabet."""
    return [rng.choice(label_list(TYPES, scheme)) for _ in range(length)]


def seqeval_spans(tags, scheme):
    """seqeval's strict chunker, with BMES's M read as IOBES's I."""
    tags = [t.replace('M-', 'I-', 1) if t.startswith('M-') else t for t in tags]
    entities = Tokens(tags, IOB2 if scheme == 'BIO' else IOBES).entities
    return sorted((e.start, e.end, e.tag) for e in entities)


def conlleval_spans(tags):
    """seqeval's default (conlleval) chunker, end made exclusive."""
    return sorted((start, end + 1, kind) for kind, start, end in get_entities(list(tags)))


@pytest.mark.parametrize('scheme', FLAT)
def test_spans_tags_round_trip(scheme):
    rng = random.Random(0)
    for _ in range(300):
        length = rng.randint(0, 12)
        spans = random_flat_spans(rng, length)
        tags = spans_to_tags(spans, length, scheme)
        assert len(tags) == length
        assert tags_to_spans(tags, scheme) == spans
        assert tags_to_spans(tags, scheme, strict=False) == spans


def test_hand_written_encodings():
    spans = [(0, 2, 'PER'), (2, 3, 'PER'), (4, 5, 'LOC')]
    assert spans_to_tags(spans, 6, 'BIO') == ['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC', 'O']
    assert spans_to_tags(spans, 6, 'IOB1') == ['I-PER', 'I-PER', 'B-PER', 'O', 'I-LOC', 'O']
    assert spans_to_tags(spans, 6, 'BIOES') == ['B-PER', 'E-PER', 'S-PER', 'O', 'S-LOC', 'O']
    assert spans_to_tags([(0, 3, 'X')], 3, 'BMES') == ['B-X', 'M-X', 'E-X']
    assert iob1_to_iob2(['I-PER', 'I-PER', 'B-PER', 'O', 'I-LOC', 'I-PER']) == \
        ['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC', 'B-PER']


@pytest.mark.parametrize('scheme', FLAT)
def test_nested_spans_rejected(scheme):
    with pytest.raises(ValueError, match='overlap'):
        spans_to_tags([(0, 3, 'ORG'), (1, 2, 'LOC')], 4, scheme)
    with pytest.raises(ValueError, match='outside'):
        spans_to_tags([(2, 5, 'ORG')], 4, scheme)


@pytest.mark.parametrize('scheme, tags, position', [
    ('BIO', ['O', 'X-PER'], 1), ('BIO', ['B_PER'], 0), ('BIO', ['B-'], 0), ('BIO', ['E-PER'], 0),
    ('IOB1', ['O', 'O', 'S-PER'], 2), ('BMES', ['B-PER', 'I-PER'], 1), ('BIOES', ['M-LOC'], 0)])
def test_unknown_tags_name_their_position(scheme, tags, position):
    with pytest.raises(ValueError, match=f'at position {position} for scheme {scheme}'):
        tags_to_spans(tags, scheme)


@pytest.mark.parametrize('scheme', ['BIO', 'BIOES', 'BMES'])
def test_strict_decoding_matches_seqeval(scheme):
    rng = random.Random(1)
    for _ in range(1000):
        tags = random_tags(rng, scheme, rng.randint(0, 10))
        assert tags_to_spans(tags, scheme) == seqeval_spans(tags, scheme), tags


@pytest.mark.parametrize('scheme', ['BIO', 'IOB1', 'BIOES'])
def test_lenient_decoding_matches_conlleval(scheme):
    # IOB1 is read by its own rule, which for IOB1 input is exactly the conlleval chunker's.
    rng = random.Random(2)
    for _ in range(1000):
        tags = random_tags(rng, scheme, rng.randint(0, 10))
        assert tags_to_spans(tags, scheme, strict=False) == conlleval_spans(tags), tags
        if scheme == 'IOB1':
            assert tags_to_spans(tags, 'IOB1') == conlleval_spans(tags)


def test_label_list_order():
    assert label_list(['PER', 'LOC'], 'BIO') == ['O', 'B-PER', 'I-PER', 'B-LOC', 'I-LOC']
    assert label_list({'PER', 'LOC'}, 'BMES') == \
        ['O', 'B-LOC', 'M-LOC', 'E-LOC', 'S-LOC', 'B-PER', 'M-PER', 'E-PER', 'S-PER']
    assert label_list(None, 'SEG') == ['s', 'b', 'm', 'e']
    with pytest.raises(ValueError, match='duplicate'):
        label_list(['PER', 'PER'])
    with pytest.raises(ValueError, match='unknown tag scheme'):
        label_list(['PER'], 'IOE2')


def canonical(tags, scheme):
    """Oracle: a sequence is well formed iff decoding and re-encoding gives it back."""
    if scheme == 'SEG':
        return words_to_tags(tags_to_words('x' * len(tags), tags)) == list(tags)
    return spans_to_tags(tags_to_spans(tags, scheme), len(tags), scheme) == list(tags)


@pytest.mark.parametrize('scheme, types, length', [
    ('BIO', TYPES, 4), ('IOB1', TYPES, 4), ('BIOES', TYPES, 3), ('BMES', ['X'], 4),
    ('SEG', None, 5)])
def test_allowed_transitions_brute_force(scheme, types, length):
    labels = label_list(types, scheme)
    allowed, starts, ends = allowed_transitions(labels, scheme)
    assert allowed.shape == (len(labels), len(labels)) and allowed.dtype == bool
    for n in range(1, length + 1):
        for path in itertools.product(range(len(labels)), repeat=n):
            permitted = (starts[path[0]] and ends[path[-1]]
                         and all(allowed[a, b] for a, b in zip(path, path[1:])))
            assert permitted == canonical([labels[k] for k in path], scheme), path


def test_allowed_transitions_named_cases():
    labels = label_list(None, 'SEG')
    allowed, starts, ends = allowed_transitions(labels, 'SEG')
    forbidden = {('s', 'm'), ('s', 'e'), ('b', 's'), ('b', 'b'), ('m', 's'), ('m', 'b'),
                 ('e', 'm'), ('e', 'e')}
    for (i, a), (j, b) in itertools.product(enumerate(labels), repeat=2):
        assert allowed[i, j] == ((a, b) not in forbidden)
    assert starts.tolist() == [True, True, False, False] and ends.tolist() == [True, False, False,
                                                                               True]
    labels = label_list(['X', 'Y'], 'BIO')  # O B-X I-X B-Y I-Y
    allowed, starts, ends = allowed_transitions(labels, 'BIO')
    assert not allowed[0, 2] and not allowed[1, 4] and allowed[1, 2] and allowed[2, 3]
    assert starts.tolist() == [True, True, False, True, False] and ends.all()


def test_words_tags_round_trip():
    assert words_to_tags(['我们', '爱', '北京市']) == ['b', 'e', 's', 'b', 'm', 'e']
    assert tags_to_words('我们爱北京', ['b', 'e', 's', 'b', 'e']) == ['我们', '爱',
                                                                 '北京']
    assert tags_to_words('abcd', ['m', 'e', 'e', 'b']) == ['ab', 'c', 'd']  # invalid yet lossless
    rng = random.Random(3)
    for _ in range(200):
        words = [''.join(rng.choice('甲乙丙') for _ in range(rng.randint(1, 4)))
                 for _ in range(rng.randint(0, 6))]
        assert tags_to_words(''.join(words), words_to_tags(words)) == words
    with pytest.raises(ValueError, match='word 1'):
        words_to_tags(['a', ''])
    with pytest.raises(ValueError, match="'x' at position 1"):
        tags_to_words('ab', ['s', 'x'])


def test_validate_spans_and_offsets():
    text = '我爱北京天安门'
    assert validate_spans(text, [[4, 7, 'LOC'], (2, 4, 'LOC')],
                          mentions=['天安门', '北京']) == \
        [(2, 4, 'LOC'), (4, 7, 'LOC')]
    with pytest.raises(ValueError,
                       match=r"train\.json:7: span \(2, 4, 'LOC'\) covers '北京' but"):
        validate_spans(text, [(2, 4, 'LOC')], source='train.json:7', mentions=['天安'])
    with pytest.raises(ValueError, match=r'dev\.txt:3: span .* outside'):
        validate_spans(text, [(5, 9, 'LOC')], source='dev.txt:3')
    with pytest.raises(ValueError, match='a:1: spans .* overlap'):
        validate_spans(text, [(2, 7, 'LOC'), (4, 7, 'LOC')], source='a:1', flat=True)
    assert len(validate_spans(text, [(2, 7, 'LOC'), (4, 7, 'LOC')])) == 2  # nested is fine
    assert offsets_to_tags(text, [(2, 4, 'LOC'), (4, 7, 'LOC')], 'BIOES') == \
        ['O', 'O', 'B-LOC', 'E-LOC', 'B-LOC', 'I-LOC', 'E-LOC']
    with pytest.raises(ValueError, match='x.json:2: span'):
        offsets_to_tags(text, [(6, 8, 'LOC')], source='x.json:2')


# ---------------------------------------------------------------- bert4keras Tokenizer alignment
VOCAB = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '我', '在', '北', '京', '用', '年',
         '。',
         '，',
         'un', '##aff', '##able', 'york', 'new', '##s']


@pytest.fixture(scope='module')
def tokenizer(tmp_path_factory):
    from bert4keras.tokenizers import Tokenizer
    path = tmp_path_factory.mktemp('vocab') / 'vocab.txt'
    path.write_text('\n'.join(VOCAB) + '\n', encoding='utf-8')
    return Tokenizer(str(path), do_lower_case=True)


def test_rematch_spans_with_spaces_digits_and_english(tokenizer):
    text = '我 在北京用iPhone12，2010年。'
    spans = [(3, 5, 'LOC'), (6, 14, 'PROD'), (15, 20, 'DATE')]
    tokens = tokenizer.tokenize(text)
    # The space is dropped; 'iPhone12' and '2010' are one token each (unknown to the vocab).
    assert tokens == ['[CLS]', '我', '在', '北', '京', '用', 'iphone12', '，', '2010', '年',
                      '。',
                      '[SEP]']
    mapping = tokenizer.rematch(text, tokens)
    token_spans = char_spans_to_token_spans(mapping, spans)
    assert token_spans == [(3, 5, 'LOC'), (6, 7, 'PROD'), (8, 10, 'DATE')]
    assert token_spans_to_char_spans(mapping, token_spans) == spans
    assert offsets_to_tags(text, spans, 'BIO', mapping=mapping) == \
        ['O', 'O', 'O', 'B-LOC', 'I-LOC', 'O', 'B-PROD', 'O', 'B-DATE', 'I-DATE', 'O', 'O']
    # A span starting on the dropped space keeps its tokens and comes back trimmed.
    assert char_spans_to_token_spans(mapping, [(1, 5, 'LOC')]) == [(2, 5, 'LOC')]
    # 'iPhone' alone cuts the merged token 'iphone12'.
    with pytest.raises(ValueError,
                       match=r"a\.json:4: span \(6, 12, 'PROD'\) does not fall on token"):
        offsets_to_tags(text, [(6, 12, 'PROD')], mapping=mapping, source='a.json:4')
    assert char_spans_to_token_spans(mapping, [(6, 12, 'PROD')],
                                     misaligned='expand') == [(6, 7, 'PROD')]
    assert char_spans_to_token_spans(mapping, [(6, 12, 'PROD')], misaligned='drop') == []
    with pytest.raises(ValueError, match='covers no token'):
        char_spans_to_token_spans(mapping, [(1, 2, 'X')])
    with pytest.raises(ValueError, match='only special tokens'):
        token_spans_to_char_spans(mapping, [(11, 12, 'X')])


def test_align_word_labels_hand_case(tokenizer):
    words, labels = ['unaffable', 'news', 'York', '\xad'], ['B-MISC', 'O', 'I-LOC', 'B-PER']
    ids, piece_labels, word_index = align_word_labels(words, labels, tokenizer)
    # [CLS] un ##aff ##able new ##s york [UNK] [SEP]; the soft hyphen yields no piece -> [UNK].
    assert ids == [2, 13, 14, 15, 17, 18, 16, 1, 3]
    assert piece_labels == [None, 'B-MISC', 'I-MISC', 'I-MISC', 'O', 'O', 'I-LOC', 'B-PER', None]
    assert word_index == [-1, 0, 0, 0, 1, 1, 2, 3, -1]
    _, piece_labels, _ = align_word_labels(words, labels, tokenizer, strategy='first',
                                           ignore_label=-100)
    assert piece_labels == [-100, 'B-MISC', -100, -100, 'O', -100, 'I-LOC', 'B-PER', -100]
    _, piece_labels, _ = align_word_labels(words[:2], ['S-MISC', 'O'], tokenizer, scheme='BIOES')
    assert piece_labels == [None, 'B-MISC', 'I-MISC', 'E-MISC', 'O', 'O', None]
    ids, piece_labels, word_index = align_word_labels(words, labels, tokenizer, maxlen=5)
    assert word_index == [-1, 0, 0, 0, -1]
    assert pieces_to_word_labels(word_index, piece_labels, n_words=4) == ['B-MISC', 'O', 'O', 'O']


@pytest.mark.parametrize('scheme', ['BIO', 'BIOES', 'BMES'])
@pytest.mark.parametrize('strategy', ['propagate', 'first'])
def test_align_word_labels_round_trip(tokenizer, scheme, strategy):
    rng = random.Random(4)
    vocabulary = ['unaffable', 'un', 'york', 'news', 'new', 'x', '北京', '我在']
    for _ in range(100):
        n = rng.randint(1, 8)
        words = [rng.choice(vocabulary) for _ in range(n)]
        labels = spans_to_tags(random_flat_spans(rng, n), n, scheme)
        ids, piece_labels, word_index = align_word_labels(words, labels, tokenizer, strategy,
                                                          scheme)
        assert len(ids) == len(piece_labels) == len(word_index)
        if strategy == 'propagate':  # the pieces spell the same entities, in piece positions
            starts = {w: word_index.index(w) for w in range(n)}
            ends = {w: len(word_index) - word_index[::-1].index(w) for w in range(n)}
            assert tags_to_spans(piece_labels[1:-1], scheme) == \
                [(starts[s] - 1, ends[e - 1] - 1, k) for s, e, k in tags_to_spans(labels, scheme)]
        assert pieces_to_word_labels(word_index, piece_labels, scheme, strategy) == labels


def test_spread_labels_segmentation_round_trip():
    """SEG tags spread over multi-piece units spell the same words in pieces, and invert."""
    rng = random.Random(5)
    for _ in range(200):
        words = [rng.randint(1, 4) for _ in range(rng.randint(1, 6))]     # word lengths in units
        tags = words_to_tags(['x' * n for n in words])
        counts = [rng.randint(1, 3) for _ in tags]
        pieces = spread_labels(tags, counts, scheme='SEG')
        lengths = [len(w) for w in tags_to_words('x' * len(pieces), pieces)]
        expected, k = [], 0                    # pieces per word = sum of its units' piece counts
        for n in words:
            expected.append(sum(counts[k:k + n]))
            k += n
        assert lengths == expected
        word_index = [i for i, c in enumerate(counts) for _ in range(c)]
        assert pieces_to_word_labels(word_index, pieces, 'SEG') == tags


def test_spread_labels_errors():
    assert spread_labels(['B-X', 'O'], [3, 1], strategy='first', ignore_label=-1) == \
        ['B-X', -1, -1, 'O']
    with pytest.raises(ValueError, match='2 labels for 1 units'):
        spread_labels(['O', 'O'], [1])
    with pytest.raises(ValueError, match='unit 1 has 0 pieces'):
        spread_labels(['O', 'O'], [1, 0])
    with pytest.raises(ValueError, match='unknown tag'):
        spread_labels(['x'], [2])
    with pytest.raises(ValueError, match='strategy'):
        spread_labels(['O'], [1], strategy='last')


# ---------------------------------------------------------------- windows
def test_windows_prefer_sentence_ends():
    text = '今天很好。明天下雨！后天晴'
    assert split_into_windows(text, 6) == [(0, '今天很好。'), (5, '明天下雨！'),
                                           (10, '后天晴')]
    assert split_into_windows(text, 11) == [(0, '今天很好。明天下雨！'),
                                            (10, '后天晴')]
    assert split_into_windows('他说：“好。”我走', 7) == [(0, '他说：“好。”'),
                                                  (7, '我走')]
    assert split_into_windows('一二三四五六七', 3, spans=[(2, 4, 'X')]) == \
        [(0, '一二'), (2, '三四五'), (5, '六七')]
    with pytest.raises(ValueError, match='does not fit'):
        split_into_windows('一二三四五六七', 3, spans=[(1, 5, 'X')])
    # A list of words: offsets count words, and a word equal to a separator ends a sentence.
    words = ['It', 'rains', '!', 'We', 'stay', 'home', '!?', 'ok']
    assert split_into_windows(words, 4, separators={'!'}) == \
        [(0, ['It', 'rains', '!']), (3, ['We', 'stay', 'home', '!?']), (7, ['ok'])]
    # Measured in tokens with [CLS]/[SEP]: a window of 5 holds 3 characters.
    assert split_into_windows('一二三四五六七', 5, length=lambda s: len(s) + 2) == \
        [(0, '一二三'), (3, '四五六'), (6, '七')]


def test_a_sentence_of_words_ends_at_a_full_stop_not_at_an_abbreviation_or_a_number():
    """'.' ends an English sentence ('...', '."' and a '"' after it too), as '!' does: a window
    of words was cut where it ended, through an entity, though a full stop came before; 'U.S.',
    'Mr.' and '3.5' end none. Characters keep their rule: '.' in Chinese text is no end."""
    words = 'the the the the . International Business Machines Corporation said .'.split()
    assert split_into_windows(words, 8) == [(0, words[:5]), (5, words[5:])]
    assert split_into_windows(words, 8, spans=[(5, 9, 'ORG')]) == \
        [(0, words[:5]), (5, words[5:])]
    words = 'He left . Mr. Smith of U.S. Steel paid 3.5 million'.split()
    assert split_into_windows(words, 10) == [(0, words[:3]), (3, words[3:])]
    words = ['Go', '."', 'Run', '...', 'Now', '.', '"', 'Ok', 'then']
    assert [offset for offset, _ in split_into_windows(words, 3)] == [0, 2, 4, 7]
    assert split_into_windows('价格3.5元。很好', 6) == [(0, '价格3.5元'), (6, '。很好')]


def test_windows_of_words_cut_after_a_full_stop_in_training_and_prediction(tmp_path):
    """``windows_of`` (training's windows and ``Tagger.windows``'s, which scoring and the
    server use) at --maxlen 10: the tester's line was cut inside its entity."""
    from crf_lr.data.pieces import UnitEncoder, windows_of
    from crf_lr.data.windows import PAUSES
    words = 'the the the the . International Business Machines Corporation said .'.split()
    for options in ({'spans': [(5, 9, 'ORG')]}, {}, {'pauses': PAUSES}):
        assert windows_of(words, 10, _word_encoder(tmp_path), **options) == \
            [(0, words[:5]), (5, words[5:])]
    path = tmp_path / 'chars.txt'                   # characters, even as a list: '3.5' stays whole
    path.write_text('[PAD]\n[UNK]\n[CLS]\n[SEP]\n', encoding='utf-8')
    characters = list('价格3.5元很好。')
    assert windows_of(characters, 8, UnitEncoder(str(path))) == [(0, characters[:6]),
                                                                 (6, characters[6:])]


def test_prediction_cuts_a_sentence_too_long_for_a_window_at_a_pause():
    """After its last comma (or space) in the window, not inside a word or an entity there;
    a sentence end still comes first, and a stretch without either is cut hard."""
    from crf_lr.data.windows import PAUSES
    text = '我们在北京，明天去上海开会'
    assert split_into_windows(text, 8) == [(0, '我们在北京，明天'), (8, '去上海开会')]
    assert split_into_windows(text, 8, pauses=PAUSES) == [(0, '我们在北京，'),
                                                          (6, '明天去上海开会')]
    assert split_into_windows('好，很好。明天见', 6,
                              pauses=PAUSES) == [(0, '好，很好。'),
                                                                 (5, '明天见')]
    assert split_into_windows('我们在北京明天去', 5,
                              pauses=PAUSES) == [(0, '我们在北京'),
                                                                (5, '明天去')]
    assert split_into_windows('a b,c d', 4, pauses=PAUSES) == [(0, 'a b,'), (4, 'c d')]


def _word_encoder(tmp_path, max_pieces=None):
    """A UnitEncoder of English words over a tiny vocabulary: 'eu' 'call', and '##s'."""
    from crf_lr.data.pieces import UnitEncoder
    path = tmp_path / 'vocab.txt'
    path.write_text('\n'.join(['[PAD]', '[UNK]', '[CLS]', '[SEP]', 'eu', 'call', '##s']) + '\n',
                    encoding='utf-8')
    return UnitEncoder(str(path), 'words', max_pieces=max_pieces)


def test_a_word_of_more_pieces_than_a_window_holds_is_one_unk(tmp_path):
    """A word whose WordPieces exceed a window (maxlen 6: 4 pieces) could not be windowed (a
    ValueError for the whole text); read as [UNK], as BERT reads an over-long word, every text
    windows, and its neighbours keep their pieces."""
    from crf_lr.data.pieces import windows_of
    long_word, cjk = 'eu' + 's' * 8, '北京' * 160           # 9 pieces; 320 pieces
    words = ['call', long_word, 'eus', cjk, 'call']
    with pytest.raises(ValueError, match='does not fit'):
        windows_of(words, 6, _word_encoder(tmp_path))       # no limit: the window's own rule
    encoder = _word_encoder(tmp_path, max_pieces=4)
    assert encoder.pieces(long_word) == encoder.pieces(cjk) == [encoder.unk]
    assert encoder.pieces('eus') == [4, 6] and encoder.pieces('euss') == [4, 6, 6]
    windows = windows_of(words, 6, encoder)
    assert [window for _, window in windows] == [['call', long_word, 'eus'], [cjk, 'call']]
    assert encoder.encode(windows[0][1])[0] == [2, 5, 1, 4, 6, 3]


def test_a_span_longer_than_a_window_is_named_with_the_maxlen_that_fits(tmp_path):
    """One line: the longest span (or overlapping spans) no window holds, its length, the
    --maxlen that holds it and so every span (derived from the span named, at any --maxlen),
    where the first is; spans that fit pass."""
    from crf_lr.data.pieces import UnitEncoder, check_spans_fit
    path = tmp_path / 'vocab.txt'
    path.write_text('[PAD]\n[UNK]\n[CLS]\n[SEP]\n', encoding='utf-8')
    chars = UnitEncoder(str(path))
    examples = [('一二三四', None, [(0, 4, 'X')]),
                ('一二三四五六七', None, [(0, 5, 'X')]),
                ('一二三四五六七', None, [(0, 3, 'X'), (1, 7, 'Y')])]
    check_spans_fit(examples[:1], ['t.txt:1'], 6, chars)
    with pytest.raises(ValueError) as error:
        check_spans_fit(examples, ['t.txt:1', 't.txt:6', 't.txt:14'], 6, chars)
    assert str(error.value) == (
        "t.txt:14: 2 overlapping spans of 7 characters, '一二三四五六七' in the sentence opening "
        'at that line, do not fit --maxlen 6 (windows of 4); use --maxlen 9 or more (the longest '
        'of 2 that do not fit; the first is at t.txt:6)')
    with pytest.raises(ValueError) as error:
        check_spans_fit([('一二三', None, [(0, 2, 'X')])], ['t.txt:1'], 3, chars)
    assert str(error.value) == (
        "t.txt:1: a span of 2 characters, '一二' in the sentence opening at that line, does not "
        'fit --maxlen 3 (windows of 1); use --maxlen 4 or more')
    words = _word_encoder(tmp_path, max_pieces=4)
    with pytest.raises(ValueError) as error:
        check_spans_fit([(['eus', 'call', 'eus'], None, [(0, 3, 'X')])], ['c.txt:3'], 6, words)
    assert str(error.value) == (
        "c.txt:3: a span of 3 words (5 pieces), 'eus call eus' in the sentence opening at that "
        'line, does not fit --maxlen 6 (windows of 4 pieces); use --maxlen 7 or more')


def test_windows_of_a_long_text_measure_linear_work_and_fit_as_tightly_as_a_scan():
    """Oracle: the largest fitting end found by scanning every end; spaces measure 0, so a unit
    need not add length. The measured characters stay within a few times the text's length
    (each window was once measured against the whole rest of the text)."""
    rng = random.Random(7)
    measured = [0]

    def length(window):                      # tokens: spaces are free
        measured[0] += len(window)
        return len(window) - window.count(' ')
    for size in (0, 1, 50, 3000):
        text = ''.join(rng.choice('甲乙丙  ab') for _ in range(size))
        measured[0] = 0
        windows = split_into_windows(text, 9, length=length, separators='')
        assert measured[0] <= 8 * max(len(text), 1) * 9
        start = 0
        for offset, piece in windows:
            fits = [end for end in range(start + 1, len(text) + 1)
                    if len(text[start:end]) - text[start:end].count(' ') <= 9]
            assert (offset, piece) == (start, text[start:max(fits)])
            start = offset + len(piece)
        assert start == len(text)


def test_windows_round_trip_random():
    rng = random.Random(5)
    for _ in range(300):
        text = ''.join(rng.choice('甲乙丙丁 a1。！；\n') for _ in range(rng.randint(0, 60)))
        maxlen = rng.randint(4, 15)
        spans = [s for s in random_flat_spans(rng, len(text)) if s[1] - s[0] <= maxlen]
        windows = split_into_windows(text, maxlen, spans=spans)
        assert ''.join(piece for _, piece in windows) == text
        assert all(0 < len(piece) <= maxlen for _, piece in windows)
        assert all(text[o:o + len(p)] == p for o, p in windows)
        local = spans_to_windows(windows, spans)
        for (offset, piece), piece_spans in zip(windows, local):
            assert all(0 <= s < e <= len(piece) for s, e, _ in piece_spans)
        assert merge_window_spans(zip((o for o, _ in windows), local)) == sorted(spans)
    with pytest.raises(ValueError, match='crosses a window'):
        spans_to_windows([(0, 'ab'), (2, 'cd')], [(1, 3, 'X')])


def test_allowed_transitions_rejects_unknown_label():
    with pytest.raises(ValueError, match="'B_PER' at position 1"):
        allowed_transitions(['O', 'B_PER'], 'BIO')
    assert np.array_equal(allowed_transitions(['O'], 'BIO')[0], [[True]])


# ---------------------------------------------------------------- scheme objects, faults, repair
def test_get_scheme_names_aliases_and_table():
    assert sorted(SCHEMES) == ['BIO', 'BIOES', 'BMES', 'IOB1', 'SEG']
    assert get_scheme('iobes') is SCHEMES['BIOES'] and get_scheme('IOB2') is SCHEMES['BIO']
    assert get_scheme('seg') is SCHEMES['SEG'] and get_scheme(SCHEMES['BMES']) is SCHEMES['BMES']
    assert [name for name, scheme in SCHEMES.items() if scheme.segmentation] == ['SEG']
    assert all(isinstance(scheme, Scheme) and scheme.name == name for name,
               scheme in SCHEMES.items())
    with pytest.raises(ValueError,
                       match=r"unknown tag scheme 'IOE2': expected one of .*'BMES'.*'IOBES'"):
        get_scheme('IOE2')


def test_seg_scheme_encodes_and_decodes_word_spans():
    seg = SCHEMES['SEG']
    tags = ['b', 'e', 's', 'b', 'm', 'e']
    assert seg.decode(tags) == [(0, 2, 'w'), (2, 3, 'w'), (3, 6, 'w')]
    assert seg.encode([(0, 2, 'w'), (2, 3, 'w'), (3, 6, 'w')], 6) == tags
    assert seg.decode(['m', 'e', 'e', 'b']) == [(0, 2, 'w'), (2, 3, 'w'), (3, 4, 'w')]  # every unit
    assert seg.labels() == ['s', 'b', 'm', 'e']
    with pytest.raises(ValueError, match='unit 2 is in no word'):
        seg.encode([(0, 2, 'w'), (3, 6, 'w')], 6)
    with pytest.raises(ValueError, match='unit 6 is in no word'):
        seg.encode([(0, 6, 'w')], 7)


@pytest.mark.parametrize('scheme, types, length', [
    ('BIO', TYPES, 4), ('IOB1', TYPES, 4), ('BIOES', TYPES, 3), ('BMES', ['X'], 4),
    ('SEG', None, 5)])
def test_check_and_repair_brute_force(scheme, types, length):
    """check fails exactly on the sequences that are not canonical; repair gives a canonical
    sequence spelling the entities of conlleval's reading (seqeval's default chunker, M read as I,
    SEG's tags as IOBES tags of one type)."""
    scheme = get_scheme(scheme)
    labels = scheme.labels(types)
    as_iobes = {'s': 'S-w', 'b': 'B-w', 'm': 'I-w', 'e': 'E-w'}
    for n in range(1, length + 1):
        for tags in itertools.product(labels, repeat=n):
            tags = list(tags)
            well_formed = canonical(tags, scheme.name)
            assert scheme.valid(tags) == well_formed, tags
            if well_formed:
                scheme.check(tags)
            else:
                with pytest.raises(TagError, match=re.escape(REPAIR_HINT) + '$'):
                    scheme.check(tags)
            repaired, count = scheme.repair(tags)
            assert canonical(repaired, scheme.name), (tags, repaired)
            assert count == sum(a != b for a, b in zip(tags, repaired))
            assert (count == 0) == well_formed
            oracle = conlleval_spans([as_iobes.get(t, t).replace('M-', 'I-', 1) for t in tags])
            assert scheme.decode(repaired) == oracle, tags


@pytest.mark.parametrize('scheme, tags, position, fault, repaired, spans', [
    ('BIO', ['B-PER', 'O', 'I-ORG', 'I-ORG'], 2, "'I-ORG' continues no entity (it follows 'O')",
     ['B-PER', 'O', 'B-ORG', 'I-ORG'], [(0, 1, 'PER'), (2, 4, 'ORG')]),
    ('BIO', ['B-PER', 'I-LOC', 'O'], 1, "'I-LOC' continues no entity (it follows 'B-PER')",
     ['B-PER', 'B-LOC', 'O'], [(0, 1, 'PER'), (1, 2, 'LOC')]),
    ('BIO', ['I-LOC'], 0, "'I-LOC' continues no entity (it opens the sentence)",
     ['B-LOC'], [(0, 1, 'LOC')]),
    ('BIOES', ['O', 'I-ORG', 'E-ORG', 'O'], 1, "'I-ORG' continues no entity (it follows 'O')",
     ['O', 'B-ORG', 'E-ORG', 'O'], [(1, 3, 'ORG')]),
    ('BIOES', ['O', 'B-ORG', 'I-ORG', 'O'], 3,
     "the entity opened by 'B-ORG' at token 1 is never closed (expected 'E-ORG' before 'O')",
     ['O', 'B-ORG', 'E-ORG', 'O'], [(1, 3, 'ORG')]),
    ('BIOES', ['S-PER', 'E-PER', 'B-LOC'], 1, "'E-PER' ends no entity (it follows 'S-PER')",
     ['S-PER', 'S-PER', 'S-LOC'], [(0, 1, 'PER'), (1, 2, 'PER'), (2, 3, 'LOC')]),
    ('BMES', ['B-LOC', 'M-LOC', 'M-PER', 'E-PER'], 2,
     "the entity opened by 'B-LOC' at token 0 is never closed (expected 'E-LOC' before 'M-PER')",
     ['B-LOC', 'E-LOC', 'B-PER', 'E-PER'], [(0, 2, 'LOC'), (2, 4, 'PER')]),
    ('BMES', ['O', 'M-PER', 'E-PER', 'B-LOC'], 1, "'M-PER' continues no entity (it follows 'O')",
     ['O', 'B-PER', 'E-PER', 'S-LOC'], [(1, 3, 'PER'), (3, 4, 'LOC')]),
    ('BMES', ['B-LOC', 'O'], 1, "the entity opened by 'B-LOC' at token 0 is never closed (expected "
     "'E-LOC' before 'O', or 'S-LOC' for a one-token entity)", ['S-LOC', 'O'], [(0, 1, 'LOC')]),
    ('IOB1', ['O', 'B-PER', 'I-PER'], 1, "'B-PER' is not right after a PER entity (it follows 'O'",
     ['O', 'I-PER', 'I-PER'], [(1, 3, 'PER')]),
    ('SEG', ['s', 'm', 'e', 'b'], 1, "'m' continues no word (it follows 's')",
     ['s', 'b', 'e', 's'], [(0, 1, 'w'), (1, 3, 'w'), (3, 4, 'w')]),
])
def test_stray_and_unclosed_tags_named_and_repaired(scheme, tags, position, fault, repaired, spans):
    scheme = get_scheme(scheme)
    with pytest.raises(TagError) as caught:
        scheme.check(tags, where='dev.txt: ')
    error = caught.value
    assert str(error).startswith(f'dev.txt: token {position}: {fault}')
    assert str(error).endswith(REPAIR_HINT) and error.position == position
    assert error.fault == str(error)[len(f'dev.txt: token {position}: '):]
    assert scheme.repair(tags) == (repaired, sum(a != b for a, b in zip(tags, repaired)))
    assert scheme.decode(repaired) == spans
    scheme.check(repaired)


def test_check_names_lines_and_an_unclosed_end():
    bioes = get_scheme('BIOES')
    with pytest.raises(TagError, match=r"^line 13: the entity opened by 'B-X' at line 12 is never "
                                       r"closed \(expected 'E-X' at the end of the sentence, got "
                                       r"'I-X'\)"):
        bioes.check(['O', 'B-X', 'I-X'], lines=[11, 12, 13])
    assert bioes.repair(['O', 'B-X', 'I-X']) == (['O', 'B-X', 'E-X'], 1)
    assert bioes.repair(['B-X']) == (['S-X'], 1)
    with pytest.raises(ValueError, match="unknown tag 'M-X' at position 1 for scheme BIOES"):
        bioes.check(['O', 'M-X'])


@pytest.mark.parametrize('scheme', sorted(SCHEMES))
def test_functions_are_the_scheme_methods(scheme):
    rng = random.Random(6)
    obj = get_scheme(scheme)
    types = None if obj.segmentation else TYPES
    labels = label_list(types, scheme)
    assert labels == obj.labels(types)
    assert all(np.array_equal(a, b) for a, b in zip(allowed_transitions(labels, scheme),
                                                    obj.allowed(labels)))
    for _ in range(50):
        tags = [rng.choice(labels) for _ in range(rng.randint(1, 8))]
        counts = [rng.randint(1, 3) for _ in tags]
        assert tags_to_spans(tags, scheme) == obj.decode(tags)
        assert tags_to_spans(tags, scheme, strict=False) == obj.decode(tags, strict=False)
        pieces = spread_labels(tags, counts, scheme=scheme)
        assert pieces == obj.spread(tags, counts)
        word_index = [i for i, c in enumerate(counts) for _ in range(c)]
        assert pieces_to_word_labels(word_index, pieces, scheme) == obj.collect(word_index, pieces)
        spans = obj.decode(obj.repair(tags)[0])
        assert spans_to_tags(spans, len(tags), scheme) == obj.encode(spans, len(tags))


@pytest.mark.parametrize('scheme, single', [('BIOES', 'S-PER'), ('BMES', 'S-PER')])
def test_a_word_whose_entity_closes_before_its_last_piece_ends_it(scheme, single):
    """Pieces ``S-PER O`` (a one-piece entity, then the word's second piece outside it) are a
    one-word entity; read as B-PER, the word opened an entity the next word's B never closed,
    and the strict reading dropped it (a word model's prediction lost 'runs')."""
    obj = get_scheme(scheme)
    words = obj.collect([0, 0, 1, 2], [single, 'O', 'B-LOC', 'E-LOC'])
    assert words == [single, 'B-LOC', 'E-LOC']
    assert obj.decode(words) == [(0, 1, 'PER'), (1, 3, 'LOC')]
    begun = obj.collect([0, 0, 0, 1], ['B-PER', 'E-PER', 'O', 'O'])      # closed mid-word
    assert begun == [single, 'O']


def test_the_check_example_shows_the_message_raised():
    """Scheme.check's docstring shows the error its example raises, word for word (it once named
    a --repair flag that no script has)."""
    with pytest.raises(TagError) as raised:
        exec(example_code(Scheme.check), {'get_scheme': get_scheme})
    assert example_output(Scheme.check) == f'TagError: {raised.value}'
