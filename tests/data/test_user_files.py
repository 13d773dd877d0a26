"""Users' own corpus files: format detection, the six readers on the samples in data/ (entity counts
counted by hand from the files), types found only in dev/test, encodings and line endings, and the
errors for broken files (named, and never echoing a huge line whole)."""
import json
import os
import re

import pytest

from crf_lr.data.formats import FORMATS, detect_format, read_corpus
from crf_lr.data.files import WORD_REPAIR_NOTE, DataFormatError
from crf_lr.data.tagging import REPAIR_HINT
from helpers.paths import SAMPLES

DATA = str(SAMPLES)


def sample(format, split):
    return os.path.join(DATA, format, f'{split}.jsonl' if format == 'jsonl' else f'{split}.txt')


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content.encode('utf-8') if isinstance(content, str) else content)
    return str(path)


def raises_at(path, line, match=''):
    where = f'{path}:{line}: ' if line else f'{path}: '
    return pytest.raises(DataFormatError, match=f'^{where}.*{match}')


def as_tuples(dataset):
    return [(e.text, list(e.tokens), e.spans, e.tags, e.words) for e in dataset]


# ----------------------------------------------------------------------------------------------
# The samples: detection, and the entities counted by hand in each file

SPLITS = ('train', 'dev', 'test')
THREE = {'train': {'LOC': 24, 'ORG': 16, 'PER': 13}, 'dev': {'LOC': 7, 'ORG': 5, 'PER': 4},
         'test': {'LOC': 6, 'ORG': 5, 'PER': 5}}
ENTITIES = {
    'conll': {'train': {'LOC': 20, 'MISC': 8, 'ORG': 12, 'PER': 11},
              'dev': {'LOC': 6, 'MISC': 2, 'ORG': 4, 'PER': 3},
              'test': {'LOC': 7, 'MISC': 3, 'ORG': 3, 'PER': 3}},
    'char-bio': THREE, 'char-bmes': THREE, 'char-bioes': THREE,   # the same sentences
    'segmented': {split: {} for split in SPLITS},
    'char-seg': {split: {} for split in SPLITS},
    'jsonl': {'train': {'address': 9, 'book': 5, 'company': 10, 'government': 4, 'name': 8,
                        'organization': 4, 'position': 12},
              'dev': {'address': 2, 'book': 2, 'company': 4, 'government': 2, 'name': 3,
                      'organization': 1, 'position': 3},
              'test': {'address': 2, 'book': 2, 'company': 2, 'government': 1, 'name': 2,
                       'organization': 2, 'position': 3}},
}
UNITS = {'conll': ('words', {'train': 277, 'dev': 78, 'test': 82}),      # tokens (units) a split
         'char-bio': ('chars', {'train': 400, 'dev': 122, 'test': 109}),
         'segmented': ('chars', {'train': 400, 'dev': 122, 'test': 109}),
         'char-seg': ('chars', {'train': 400, 'dev': 122, 'test': 109})}
WORDS = {'train': 265, 'dev': 79, 'test': 74}                             # segmented/ words


@pytest.mark.parametrize('format', FORMATS)
@pytest.mark.parametrize('split', SPLITS)
def test_every_sample_is_detected(format, split):
    assert detect_format(sample(format, split)) == format


@pytest.mark.parametrize('format', FORMATS)
def test_samples_read_with_hand_counted_entities(format):
    train = read_corpus(sample(format, 'train'))
    assert train.format == format and f'format {format} detected' in train.note
    assert train.types == tuple(sorted(ENTITIES[format]['train']))
    for split in SPLITS:
        data = (read_corpus(sample(format, split), format, train.types) if split != 'train'
                else train)
        assert len(data) == (30 if split == 'train' else 10)
        assert dict(data.entity_counts()) == ENTITIES[format][split]
        assert data.units == ('words' if format == 'conll' else 'chars')
        if format in UNITS:
            assert sum(len(e.tokens) for e in data) == UNITS[format][1][split]
        if format in ('segmented', 'char-seg'):
            assert sum(len(e.words) for e in data) == WORDS[split]


def test_first_sentences_by_hand():
    """Tags come out in BIO for every NER format (SEG for segmented); spans index the units."""
    conll = read_corpus(sample('conll', 'train'))[0]           # after the -DOCSTART- line
    assert conll.tokens == ['Maria', 'Lopez', 'flew', 'to', 'Lisbon', 'on', 'Monday', '.']
    assert conll.spans == [(0, 2, 'PER'), (4, 5, 'LOC')]
    assert conll.tags == ['B-PER', 'I-PER', 'O', 'O', 'B-LOC', 'O', 'O', 'O']
    assert conll.source.endswith('train.txt:3')
    bio_tags = ['B-PER', 'I-PER', 'O', 'O', 'O', 'B-LOC', 'I-LOC', 'O', 'O', 'B-LOC', 'I-LOC', 'O']
    for format in ('char-bio', 'char-bmes', 'char-bioes'):
        first = read_corpus(sample(format, 'train'))[0]
        assert first.text == '李明昨天从北京飞到上海。'
        assert first.spans == [(0, 2, 'PER'), (5, 7, 'LOC'), (9, 11, 'LOC')]
        assert first.tags == bio_tags
    (single,) = [e for e in read_corpus(sample('char-bmes', 'train')) if e.text.startswith('何')]
    assert single.spans[0] == (0, 1, 'PER') and single.tags[:2] == ['B-PER', 'O']   # was S-PER
    seg = read_corpus(sample('segmented', 'train'))[0]
    assert seg.words == ['李', '明', '昨天', '从', '北京', '飞', '到', '上海', '。']
    assert seg.tags == ['s', 's', 'b', 'e', 's', 'b', 'e', 's', 's', 'b', 'e', 's']
    assert seg.spans == [] and read_corpus(sample('segmented', 'train')).types == ()
    for split in SPLITS:                  # char-seg: the same words, a character a line
        assert ([(e.text, e.words, e.tags) for e in read_corpus(sample('char-seg', split))]
                == [(e.text, e.words, e.tags) for e in read_corpus(sample('segmented', split))])


def test_jsonl_nested_sample_keeps_both_spans_and_tags_the_outer_one():
    nested = read_corpus(sample('jsonl', 'train'))[8]
    assert nested.text == '腾讯的创始人推荐了《腾讯传》这本书。'
    assert nested.spans == [(0, 2, 'company'), (3, 6, 'position'), (9, 14, 'book'),
                            (10, 12, 'company')]
    assert nested.tags[9:14] == ['B-book'] + ['I-book'] * 4 and len(nested.notes) == 1


def test_jsonl_spans_layout(tmp_path):
    path = write(tmp_path, 'spans.jsonl',
                 json.dumps({'text': '张三在北京', 'spans': [[0, 2, 'PER'],
                                                                                [3, 5, 'LOC']]},
                                                       ensure_ascii=False) + '\n')
    (example,) = read_corpus(path)
    assert example.spans == [(0, 2, 'PER'), (3, 5, 'LOC')]
    assert example.tags == ['B-PER', 'I-PER', 'O', 'B-LOC', 'I-LOC']


# ----------------------------------------------------------------------------------------------
# Detection where it is unclear

@pytest.mark.parametrize('content, format, reason', [
    ('张 B-PER\n在 O\n京 B-LOC\n', 'char-bio', 'BIOES would read each B- as S-'),  # O and B- only
    ('张 B-PER\n三 E-PER\n京 S-LOC\n', 'char-bioes', 'BMES reads them alike'),         # no I-, no M-  # noqa: E501 (CJK: ruff counts 2 columns each)
    ('在 O\n京 O\n', 'char-bio', "only 'O' tags"),
    ('EU\tNNP\tB-ORG\nrejects\tVBZ\tO\n', 'conll', '3 columns'),
    ('Peter B-PER\nrejects O\n', 'conll', '2 columns'),  # a word is no character
    ('我们  爱  北京\n', 'segmented', 'no tags'),
])
def test_detection_says_which_rule_decided(tmp_path, content, format, reason):
    path = write(tmp_path, 'file.txt', content)
    found, why = detect_format(path, reason=True)
    assert found == format and reason in why
    assert read_corpus(path).note == f'format {format} detected: {why}'


ASK = r'.*pass --format \(format= in Python\) one of conll, char-bio'


@pytest.mark.parametrize('content, line, match', [
    ('张 B-PER\n三 I-PER\n我们 爱 北京\n', 3,
     "expected 2 columns \\(word ... tag\\) like the lines with a tag \\(line 1\\), got 3: "
     "'我们 爱 北京'"),
    ('Boston B-LOC\nis O\nBoston B-LOC extra-junk\n', 3,    # a newcomer's: --format did not help
     "expected 2 columns \\(word ... tag\\) like the lines with a tag \\(line 1\\), got 3"),
    ('张 B-PER\n三 I-PER\n我们\n', 3,
     "expected 2 columns \\(word ... tag\\) like the lines with a tag \\(line 1\\), got 1: '我们'"),
    ('张 B-PER\nAnn NNP B-PER\n我们\n', 3, 'line 1 ends with a tag, this line does not' + ASK),
    ('我们\n北京\n', None, 'no line ends with a tag and none holds several words' + ASK),
    ('# id 1 domain=en\nEU _ _ B-ORG\nrejects _ _ O\n', 1,         # MultiCoNER, CoNLL-U
     r"'# id 1 domain=en' is a comment line \(CoNLL-U, MultiCoNER\): remove the lines that open "
     r"with '# ', e.g. grep -v '\^# ' file.txt > clean.txt$"),
    ('张 B-PER\n三 I-PER\n\n李 B-PER\n四 M-PER\n五 E-PER\n', 5,      # no scheme fits: no --format helps  # noqa: E501 (CJK: ruff counts 2 columns each)
     r'the tags mix I- \(first at line 2\) and M- \(first at line 5\): BIO and BIOES continue an '
     r'entity with I-, BMES with M-$'),
])
def test_unclear_input_is_an_error_that_says_why(tmp_path, content, line, match):
    path = write(tmp_path, 'file.txt', content)
    with raises_at(path, line, match):
        detect_format(path)
    with raises_at(path, line, match):
        read_corpus(path)


def test_unknown_format_lists_the_formats():
    with pytest.raises(ValueError, match="unknown format 'csv': expected one of conll, char-bio"):
        read_corpus(sample('conll', 'dev'), format='csv')


# ----------------------------------------------------------------------------------------------
# Types of the training file; repair by default, refusal on request

@pytest.mark.parametrize('format, content, line, kind', [
    ('char-bio', '张 B-PER\n三 I-PER\n\n在 O\n东 B-GPE\n京 I-GPE\n', 5, 'GPE'),
    ('conll', 'Ann NNP B-PER\nin IN O\nParis NNP B-GPE\n', 3, 'GPE'),
    ('jsonl', '{"text": "北京", "label": {"address": {"北京": [[0, 1]]}}}\n'
              '{"text": "小说《三体》", "label": {"game": {"《三体》": [[2, 5]]}}}\n', 2, 'game'),
])
def test_a_type_found_only_in_dev_names_line_type_and_training_types(tmp_path, format, content,
                                                                     line,
                                                                      kind):
    train = read_corpus(sample(format, 'train'))
    dev = write(tmp_path, 'dev.txt', content)
    with raises_at(dev, line, f"'{kind}' is not among the types of the training data "
                              + re.escape(repr(list(train.types)))):
        read_corpus(dev, format, train.types)
    assert kind in read_corpus(dev, format).types          # without training types: taken from it


@pytest.mark.parametrize('content, format, line, fault, tags, spans, repaired_lines', [
    ('张 B-PER\n三 I-PER\n在 O\n京 I-LOC\n城 I-LOC\n\n李 I-PER\n', 'char-bio', 4,
     r"'I-LOC' continues no entity \(it follows 'O'\)",
     [['B-PER', 'I-PER', 'O', 'B-LOC', 'I-LOC'], ['B-PER']],
     [[(0, 2, 'PER'), (3, 5, 'LOC')], [(0, 1, 'PER')]], [4, 7]),
    ('张 B-PER\n小 M-PER\n在 O\n京 M-LOC\n城 E-LOC\n', 'char-bmes', 3,
     r"the entity opened by 'B-PER' at line 1 is never closed \(expected 'E-PER' before 'O'\)",
     [['B-PER', 'I-PER', 'O', 'B-LOC', 'I-LOC']], [[(0, 2, 'PER'), (3, 5, 'LOC')]], [2, 4]),
])
def test_messy_tags_repaired_and_placed_by_default_or_rejected_with_the_fault(
        tmp_path, content, format, line, fault, tags, spans, repaired_lines):
    path = write(tmp_path, 'dev.txt', content)
    with raises_at(path, line, f'{fault} {re.escape(REPAIR_HINT)}$'):
        read_corpus(path, repair=False)                   # --strict
    data = read_corpus(path)                              # the default: tags come out in BIO
    assert data.format == format
    assert [e.tags for e in data] == tags and [e.spans for e in data] == spans
    assert 'repaired 2x: a tag breaking its entity' in data.summary()
    assert [place for e in data for place in e.repaired_at] == [f'{path}:{n}'
                                                                for n in repaired_lines]


# ----------------------------------------------------------------------------------------------
# Bytes, line endings, columns

@pytest.mark.parametrize('format', FORMATS)
def test_bom_and_crlf_read_like_the_plain_file(tmp_path, format):
    with open(sample(format, 'dev'), 'rb') as f:
        plain = f.read()
    path = write(tmp_path, 'dev.txt', b'\xef\xbb\xbf' + plain.replace(b'\n', b'\r\n'))
    assert detect_format(path) == format
    assert as_tuples(read_corpus(path)) == as_tuples(read_corpus(sample(format, 'dev')))
    twice = write(tmp_path, 'twice.txt', plain.replace(b'\n', b'\r\r\n'))  # CRLF made CRLF again
    assert detect_format(twice) == format
    assert as_tuples(read_corpus(twice)) == as_tuples(read_corpus(sample(format, 'dev')))


@pytest.mark.parametrize('format', ['char-bio', 'conll'])
def test_space_and_tab_columns_read_alike(tmp_path, format):
    with open(sample(format, 'dev'), encoding='utf-8') as f:
        plain = f.read()
    tabs = write(tmp_path, 'tabs.txt', plain.replace(' ', '\t'))
    assert detect_format(tabs) == format
    assert as_tuples(read_corpus(tabs)) == as_tuples(read_corpus(sample(format, 'dev')))
    if format == 'conll':                           # several spaces or a mix between columns
        mixed = write(tmp_path, 'mixed.txt', plain.replace(' ', ' \t  ', 1).replace(' ', '   '))
        assert as_tuples(read_corpus(mixed)) == as_tuples(read_corpus(sample(format, 'dev')))


def test_cr_only_line_endings_are_named_not_echoed(tmp_path):
    path = write(tmp_path, 'mac.txt', '张 B-PER\r三 I-PER\r\r在 O\r' * 1000)
    for read in (detect_format, read_corpus):
        with raises_at(path, 1, 'a line ends with a lone CR \\(old Mac line endings\\)') as caught:
            read(path)
        assert len(str(caught.value)) < 200


def test_a_100k_character_line_is_capped_in_the_message(tmp_path):
    huge = '中' * 100000
    for content, format, line in [(f'张 B-PER\n{huge} O\n', 'char-bio', 2),
                                  (f'张 B-PER\n{huge}\n', None, 2),
                                  (f'Ann NNP B-PER\n{huge}\n', 'conll', 2)]:
        path = write(tmp_path, 'long.txt', content)
        with raises_at(path, line, '…') as caught:
            read_corpus(path, format)
        assert len(str(caught.value)) < len(path) + 400 and huge[:81] not in str(caught.value)
    record = json.dumps({'text': huge, 'label': {'book': {'国' * 99999: [[0, 99998]]}}},
                        ensure_ascii=False)
    path = write(tmp_path, 'long.jsonl', record + '\n')
    with raises_at(path, 1, '"国+… \\(100001 characters\\) covers') as caught:
        read_corpus(path)
    assert len(str(caught.value)) < len(path) + 300
    (long_sentence,) = read_corpus(write(tmp_path, 'long_ok.txt', f'{huge}  {huge}\n'))   # fine
    assert len(long_sentence.words) == 2 and len(long_sentence.tags) == 200000


@pytest.mark.parametrize('content, formats, match', [
    ('', FORMATS, 'the file is empty'),
    ('\n\n\r\n', FORMATS, 'no sentence in the file'),
    ('-DOCSTART- -X- O\n\n', ('conll',), 'no sentence in the file'),
])
def test_files_without_a_sentence(tmp_path, content, formats, match):
    path = write(tmp_path, 'empty.txt', content)
    for format in (None,) + formats:
        with pytest.raises(DataFormatError, match=f'^{path}: {match}'):
            read_corpus(path, format)
    with pytest.raises(DataFormatError, match=f'^{path}: {match}'):
        detect_format(path)


# ----------------------------------------------------------------------------------------------
# The family of layouts and faults real files bring

CHAR_BIO = '张 B-PER\n三 I-PER\n去 O\n北 B-LOC\n京 I-LOC\n\n李 B-PER\n四 I-PER\n'


@pytest.mark.parametrize('content, format', [
    (CHAR_BIO.replace('\n', ' \n'), 'char-bio'),                         # trailing spaces
    (CHAR_BIO.replace(' ', '  '), 'char-bio'),                           # two spaces
    (CHAR_BIO.replace(' ', ' \t'), 'char-bio'),                          # a space and a tab
    (CHAR_BIO.replace('\n\n', '\n \t\n'), 'char-bio'),  # a blank line of whitespace
    ('-DOCSTART- O\n\n' + CHAR_BIO, 'char-bio'),                         # CoNLL's document line
    (CHAR_BIO.lower(), 'char-bio'),                                      # b-per, o
    (CHAR_BIO.replace('I-PER', 'L-PER').replace('B-LOC\n京 I-LOC', 'B-LOC\n京 L-LOC'), 'char-bioes'),  # noqa: E501 (CJK: ruff counts 2 columns each)
    ('\ufeff' + CHAR_BIO.replace('\n\n', '\n\ufeff \n'), 'char-bio'),  # BOMs of concatenated files
])
def test_char_files_with_loose_layouts_read_like_the_plain_one(tmp_path, content, format):
    plain = read_corpus(write(tmp_path, 'plain.txt', CHAR_BIO))
    data = read_corpus(write(tmp_path, 'loose.txt', content))
    assert data.format == format and data.units == 'chars'
    assert ([(e.text, e.spans) for e in data]
            == [(e.text, [(a, b, k.lower() if content.islower() else k) for a, b, k in e.spans])
                for e in plain])


def test_a_space_character_and_its_tag(tmp_path):
    data = read_corpus(write(tmp_path, 'space.txt', '张 B-PER\n三 I-PER\n  O\n好 O\n'))
    assert data.format == 'char-bio' and data[0].text == '张三 好' and data[0].spans == [
        (0, 2, 'PER')]


@pytest.mark.parametrize('content, line, match', [
    ('张 B-PER\n三 I-PER\n去 X\n', 3, r"'X' is not a tag \(line 1 ends with 'B-PER'\): tags are O, "
                                    r"or B-, I-, M-, E-, S- \(BILOU's L-, U-\) "
                                    r"and an entity type$"),
    ('张 B-PER\n三 B_PER\n', 2, "'B_PER' is not a tag"),
    ('张 B-PER\n去 0\n', 2, "'0' is not a tag"),
    ('B-PER 张\nI-PER 三\nO 去\n', 1,
     "the tag stands first \\('B-PER 张'\\): put each line's tag last"),
    ('B 中\nE 国\nS 人\n', 1, "the tag stands first \\('B 中'\\): put each line's tag last"),
    ('张 B-PER\n' * 12 + 'iPhone O\n', 13, "expected one character, spaces or tabs and a tag like "
                                         "92% of the lines, got 'iPhone O': give one character a "
                                         'line, as the other lines do$'),
    ('{"text": "张三", "label": {"name": {"张三": [[0, 1]]}}},\n', 1,
     'a comma ends the line: JSON lines hold one object a line'),
])
def test_faults_named_with_what_to_fix(tmp_path, content, line, match):
    path = write(tmp_path, 'file.txt', content)
    with raises_at(path, line, match):
        read_corpus(path)


@pytest.mark.parametrize('content, line, hint', [
    ('EU B-ORG\nrejects O\nGerman B-MISC\ncall O\n.\tO\n', 1, True),     # words: conll reads them
    ('张 B-PER\n三 I-PER\n去 O\n上海 B-LOC\n', 4, False),                   # characters and a word
])
def test_a_character_format_given_to_a_file_of_words_says_what_reads_words(tmp_path, content,
                                                                           line, hint):
    """--format char-bio on a file whose tokens are mostly words names --format conll (and
    what it trains); on a file of characters it does not."""
    path = write(tmp_path, 'file.txt', content)
    with raises_at(path, line, 'expected one character, spaces or tabs and a tag, got ') as found:
        read_corpus(path, format='char-bio')
    assert found.value.args[0].endswith(
        '; most of its tokens are words: --format conll reads them (a word model, which cannot '
        'tag unspaced text)') == hint


@pytest.mark.parametrize('format, what', [('char-bio', 'tags'), ('conll', 'tags'),
                                           ('jsonl', 'records'), ('char-seg', 'tags')])
def test_segmented_given_to_a_tagged_or_json_file_is_refused(format, what):
    """'segmented' reads any line as words: a char-bio file given so trained on 'O' and 'B-LOC'
    as words. A file detected as another format is refused; segmented text is read."""
    path = sample(format, 'dev')
    with pytest.raises(DataFormatError, match=(
            rf'^{re.escape(path)}: given as segmented \(words between spaces\), but it reads as '
            rf'{format} \(.*\): its {what} would be read as words; drop --format')):
        read_corpus(path, format='segmented')
    assert len(read_corpus(sample('segmented', 'dev'), format='segmented')) > 0


def test_conll_documents_tabs_and_no_break_spaces(tmp_path):
    data = read_corpus(write(tmp_path, 'docs.txt', 'EU B-ORG\n-DOCSTART- O\nPeter B-PER\n'))
    assert [e.tokens for e in data] == [['EU'], ['Peter']]               # two sentences
    data = read_corpus(write(tmp_path, 'tabs.txt',
                             'New York\tNNP\tB-LOC\nis\tVBZ\tO\nbig\tJJ\tO\n'))
    assert data[0].tokens == ['New York', 'is', 'big'] and data[0].spans == [(0, 1, 'LOC')]
    data = read_corpus(write(tmp_path, 'nbsp.txt', 'New\u00a0York B-LOC\nis O\n'))
    assert data[0].tokens == ['New\u00a0York', 'is']
    data = read_corpus(write(tmp_path, 'bilou.txt', 'EU U-ORG\nPeter B-PER\nBlack L-PER\n'))
    assert data.format == 'conll' and data[0].spans == [(0, 1, 'ORG'), (1, 3, 'PER')]
    assert "BILOU's L-/U- read as E-/S-" in data.note


RECORDS = [{'text': '张三在北京', 'label': {'name': {'张三': [[0, 1]]}, 'address': {'北京': [[3, 4]]}}},  # noqa: E501 (CJK: ruff counts 2 columns each)
           {'text': '李四', 'spans': [[0, 2, 'name']]},
           {'text': '头痛', 'entities': [{'start_idx': 0, 'end_idx': 1, 'type': 'sym',
                                       'entity': '头痛'}]}]


@pytest.mark.parametrize('layout', ['lines', 'array', 'indented array'])
def test_json_records_one_a_line_or_in_an_array_with_three_label_layouts(tmp_path, layout):
    text = {'lines': '\n'.join(json.dumps(r, ensure_ascii=False) for r in RECORDS) + '\n',
            'array': json.dumps(RECORDS, ensure_ascii=False),
            'indented array': json.dumps(RECORDS, ensure_ascii=False, indent=2)}[layout]
    data = read_corpus(write(tmp_path, 'records.json', text))
    assert data.format == 'jsonl' and data.types == ('address', 'name', 'sym')
    assert [e.spans for e in data] == [[(0, 2, 'name'), (3, 5, 'address')], [(0, 2, 'name')],
                                       [(0, 2, 'sym')]]


def test_char_seg_words_and_pos_tagged_segmented_text(tmp_path):
    data = read_corpus(write(tmp_path, 'seg.txt', '中 B\n国 E\n人 S\n\n北 b\n京 m\n市 e\n'))
    assert data.format == 'char-seg' and [e.words for e in data] == [['中国', '人'], ['北京市']]
    assert data[0].tags == ['b', 'e', 's']
    data = read_corpus(write(tmp_path, 'pfr.txt', '迈向/v  充满/v  希望/n  的/u  新/a  世纪/n\n'))
    assert data.format == 'segmented' and data[0].words == ['迈向', '充满', '希望', '的', '新', '世纪']  # noqa: E501 (CJK: ruff counts 2 columns each)
    assert 'part-of-speech tags dropped' in data.note


def test_char_seg_tags_breaking_their_word_are_counted_and_placed_or_refused(tmp_path):
    """A B or S before the open word's E, an M or E that continues no word, a sentence ending
    inside a word: read by the rule (B and S begin a word, so does a tag after E or S), counted
    with their lines, and refused under --strict; they were changed without a word."""
    path = write(tmp_path, 'seg.txt', '中 B\n华 B\n人 E\n民 S\n\n共 S\n和 M\n国 E\n\n北 B\n京 M\n'
                                      '\n上 M\n海 E\n')
    data = read_corpus(path)
    assert [e.words for e in data] == [['中', '华人', '民'], ['共', '和国'], ['北京'], ['上海']]
    assert [e.tags for e in data][1:] == [['s', 'b', 'e'], ['b', 'e'], ['b', 'e']]
    assert data.summary().splitlines()[1] == (
        f'  repaired 4x ({path}:2, {path}:7, {path}:11, …): a word-position tag breaking its word '
        '(an M or E continuing no word, a word never closed by E): B and S begin a word, and so '
        'does a tag after E or S')
    for strict_fault in ('2: B before the word opened at line 1 is closed by E',):
        with pytest.raises(DataFormatError, match=f'^{path}:{strict_fault} \\(--strict refuses'):
            read_corpus(path, repair=False)
    fine = write(tmp_path, 'fine.txt', '中 B\n国 E\n人 S\n')
    assert 'repaired' not in read_corpus(fine).summary()
    once = write(tmp_path, 'once.txt', '我 S\n们 I\n\n你 M\n好 S\n')   # a stray, its word unclosed
    assert [e.noted_at for e in read_corpus(once)] == [
        ((WORD_REPAIR_NOTE, f'{once}:2'),), ((WORD_REPAIR_NOTE, f'{once}:4'),)]
    for text, fault in (('北 B\n京 M\n', '2: the sentence ends inside the word opened at line 1'),
                        ('上 M\n海 E\n', '1: M continues no word \\(it opens the sentence\\)'),
                        ('上 S\n海 E\n', '2: E continues no word \\(the word before it is '
                                          'closed\\)'),
                        ('上 B\n海 S\n', '2: S before the word opened at line 1')):
        broken = write(tmp_path, 'broken.txt', text + '\n中 S\n')
        with pytest.raises(DataFormatError, match=f'^{broken}:{fault}'):
            read_corpus(broken, format='char-seg', repair=False)


def test_an_iob1_file_says_it_was_read_as_bio(tmp_path):
    path = write(tmp_path, 'iob1.txt', 'EU I-ORG\nrejects O\nGerman I-MISC\n\nPeter I-PER\nBlack '
                                       'I-PER\n\nOK O\n')
    data = read_corpus(path)
    assert [e.spans for e in data] == [[(0, 1, 'ORG'), (2, 3, 'MISC')], [(0, 2, 'PER')], []]
    assert (f'noted 3x ({path}:1, {path}:3, {path}:5): IOB1 tags (an entity opening with I-X) '
            'read as BIO' in data.summary())         # each tag read as B-X, on its line


@pytest.mark.parametrize('content, line, match', [
    ('中 B\n国 E\n人 S\n\n北 B\n京 E\n天天 S\n', 7, 'expected one character, spaces or tabs and its '  # noqa: E501 (CJK: ruff counts 2 columns each)
                                              r"word-position tag \(B, M, I, E or S\) like 83% of "
                                              "the lines, got '天天 S'"),
    ('[{"text": "张三", "spans": [[0, 2, "name"]]}]\n[{"text": "李四", "spans": []}]\n', 2,
     "more after the JSON array's closing ']': give one array, or one record a line"),
    ('\n'.join(f'{c}{k % 3} O' for k, c in enumerate('中国人民共和国是一个美丽的国家')) + '\n国 O\n', 16,  # noqa: E501 (CJK: ruff counts 2 columns each)
     'expected one character with its word-position number, spaces or tabs and a tag like 93% of '
     "the lines, got '国 O': give one character with its word-position number a line, as the "
     'other lines do$'),
    ('迈向/v  充满/v  希望/n  的/u  新/a  世纪/n\n迈向/v  充满  希望/n  的/u  新/a  世纪/n\n', 2,
     "'充满' has no /TAG where 91% of the words are word/TAG"),
    ('Müller B-PER\nKöln B-LOC\n'.encode('latin-1'), 1,
     r'not UTF-8: .* cannot be decoded; if it is Latin-1 \(Windows-1252\) text'),
])
def test_a_few_odd_lines_among_a_layout_are_named(tmp_path, content, line, match):
    path = write(tmp_path, 'file.txt', content)
    with raises_at(path, line, match):
        read_corpus(path)


@pytest.mark.parametrize('content, format, spans', [
    ('张\u3000B-PER\n三\u3000I-PER\n去\u00a0O\n', 'char-bio', [[(0, 2, 'PER')]]),     # U+3000, NBSP
    ('张 B-PER\n去 O\u00a0\n', 'char-bio', [[(0, 1, 'PER')]]),                        # NBSP after
    ('New York\tB-LOC\nLos Angeles\tB-LOC\nthe city\tO\n', 'conll',
     [[(0, 1, 'LOC'), (1, 2, 'LOC')]]),
    ('{\n  "text": "张三",\n  "spans": [[0, 2, "name"]]\n}\n{\n  "text": "李四",\n  "spans": []\n}\n',  # noqa: E501 (CJK: ruff counts 2 columns each)
     'jsonl', [[(0, 2, 'name')], []]),                                  # pretty-printed records
    ('张 B-PER\n三 I-PER\n'.encode('utf-32'), 'char-bio', [[(0, 2, 'PER')]]),
])
def test_more_layouts_read(tmp_path, content, format, spans):
    data = read_corpus(write(tmp_path, 'file.txt', content))
    assert data.format == format and [e.spans for e in data] == spans


def test_raw_text_opening_with_a_bracket_is_not_json(tmp_path):
    path = write(tmp_path, 'raw.txt', '[图]李明昨天从北京飞到上海。\n华为公司在深圳发布了新手机。\n')  # noqa: E501 (CJK: ruff counts 2 columns each)
    with raises_at(path, None, r'no line ends with a tag and none holds several words \(raw text'):
        detect_format(path)
    pfr = write(tmp_path, 'pfr.txt', '[中央/n  人民/n  广播/vn  电台/n]nt  记者/n\n迈向/v  新/a\n')
    assert read_corpus(pfr)[0].words == ['中央', '人民', '广播', '电台', '记者']


@pytest.mark.parametrize('layout', ['conll', 'char'])
def test_a_few_bioes_tags_in_a_bio_file_are_read_as_bio_and_named(tmp_path, layout):
    """Ten BIO entities and three typos (an E-X closing one, an S-X for a single token, an E-X
    after O): the file stays BIO, each typo is read as I-X / B-X and repaired once with its
    line, and --strict names the first; a true BIOES file whose entities all end in one
    character (one distinct E- line) stays BIOES, without repairs."""
    if layout == 'conll':
        entity = 'Peter B-PER\nBlack I-PER\nsaid O\n\n'
        typos = 'Peter B-PER\nBlack E-PER\nsaid O\n\nParis S-LOC\nsaid O\n\nsaid O\nBlack E-PER\n\n'
        company = 'at O\nAcme B-ORG\nSteel I-ORG\nInc E-ORG\n\n'
    else:
        entity = '张 B-PER\n三 I-PER\n说 O\n\n'
        typos = '张 B-PER\n三 E-PER\n说 O\n\n京 S-LOC\n说 O\n\n说 O\n三 E-PER\n\n'
        company = '在 O\n华 B-ORG\n公 I-ORG\n司 E-ORG\n\n'
    path = write(tmp_path, 'train.txt', entity * 5 + typos + entity * 5)
    first = 5 * 4 + 2                                          # the first E- line
    data = read_corpus(path)
    assert data.format == ('conll' if layout == 'conll' else 'char-bio')
    assert [e.spans for e in data][5:8] == [[(0, 2, 'PER')], [(0, 1, 'LOC')], [(1, 2, 'PER')]]
    assert sum(len(e.spans) for e in data) == 13
    assert 'repaired 3x: a BIOES tag in a BIO file: E-X read as I-X, S-X as B-X' in data.summary()
    assert 'conlleval' not in data.summary()                   # the E-X after O: one repair
    assert [place for e in data for place in e.repaired_at] == [
        f'{path}:{first}', f'{path}:{first + 3}', f'{path}:{first + 7}']
    with raises_at(path, first, r"unknown tag 'E-PER' for the BIO scheme: .*the default repair "
                                r'reads E-X as I-X and S-X as B-X\)$'):
        read_corpus(path, repair=False)
    bioes = write(tmp_path, 'bioes.txt', company * 20)
    genuine = read_corpus(bioes)
    assert genuine.format == ('conll' if layout == 'conll' else 'char-bioes')
    assert 'repaired' not in genuine.summary() and sum(len(e.spans) for e in genuine) == 20
    assert read_corpus(bioes, repair=False) and 'BIOES' in detect_format(bioes, reason=True)[1]


# ----------------------------------------------------------------------------------------------
# Characters of several code points, and characters broken in transit

BROKEN, FAMILY = '\ufffd\ufffd', '\U0001f468\u200d\U0001f469\u200d\U0001f467'


def test_a_weibo_style_file_reads_broken_characters_and_emoji_as_one_unit_each(tmp_path):
    """Word-position marks after a character broken to two U+FFFD, an emoji, an emoji with its
    variation selector, a ZWJ family and a flag: each line is one character whose tag spreads
    over its code points, counted with its lines; the detection advises no word format."""
    lines = ['张0\tB-PER.NAM', '三1\tE-PER.NAM', f'{BROKEN}0\tO', '在0\tO', '北0\tB-GPE.NAM',
             '京1\tE-GPE.NAM', '😀0\tO', '工0\tO', '❤️1\tS-PER.NOM',
             '作0\tO', '', f'{FAMILY}0\tO', '\U0001f1e8\U0001f1f30\tS-GPE.NAM', '好0\tO',
             f'{BROKEN}0\tO', '说1\tO', '了2\tO', '吗3\tO', '的0\tO', '人1\tO']
    path = write(tmp_path, 'weibo.train', '\n'.join(lines) + '\n')
    found, why = detect_format(path, reason=True)
    assert found == 'char-bioes' and 'conll' not in why
    data = read_corpus(path)
    assert [e.text for e in data] == [f'张三{BROKEN}在北京😀工❤️作',
                                      f'{FAMILY}\U0001f1e8\U0001f1f3好{BROKEN}说了吗的人']
    assert data[0].spans == [(0, 2, 'PER.NAM'), (5, 7, 'GPE.NAM'), (9, 11, 'PER.NOM')]
    assert data[1].spans == [(5, 7, 'GPE.NAM')]
    assert data[0].tags[9:11] == ['B-PER.NOM', 'I-PER.NOM']     # the variation selector's tag
    summary = data.summary()
    assert (f'noted 2x ({path}:3, {path}:15): a character broken in transit (U+FFFD or ?: a '
            'character outside the BMP often arrives as two) read as one unit') in summary
    assert (f'noted 3x ({path}:9, {path}:12, {path}:13): a character of several code points'
            in summary)


@pytest.mark.parametrize('char, tag, text, spans, note', [
    ('e\u0301', 'S-PER', 'e\u0301', [(0, 2, 'PER')], 'several'),            # a combining accent
    ('中\u200b', 'B-PER', '中\u200b三', [(0, 3, 'PER')], 'several'),         # a zero-width space
    ('\u200b', 'O', '\u200b', [], None),                                  # one alone
    ('\U0001f44d\U0001f3fd', 'O', '\U0001f44d\U0001f3fd', [], 'several'),  # a skin tone
    ('\u1100\u1161', 'S-PER', '\u1100\u1161', [(0, 2, 'PER')], 'several'),  # Hangul jamo (NFD)
    ('\u1100\u1161\u11a8', 'O', '\u1100\u1161\u11a8', [], 'several'),      # with a final
    ('क्षि', 'S-PER', 'क्षि', [(0, 4, 'PER')], 'several'),                   # a Devanagari conjunct
    ('\ufffd', 'S-LOC', '\ufffd', [(0, 1, 'LOC')], 'broken'),              # one U+FFFD
    ('??', 'S-LOC', '??', [(0, 2, 'LOC')], 'broken'),                      # Java / GBK: one ? each
    ('???', 'O', '???', [], 'broken'),
    ('\ufffd?', 'O', '\ufffd?', [], 'broken'),                             # U+FFFD and ? mixed
    ('?', 'O', '?', [], None),                                            # a question mark
    ('\u00a0', 'O', '\u00a0', [], None),                                  # a no-break space
    ('\u3000', 'O', '\u3000', [], None),                                  # a full-width space
])
def test_characters_of_several_code_points_keep_them_all_and_spread_the_tag(
        tmp_path, char, tag, text, spans, note):
    follow = '三 E-PER\n' if tag == 'B-PER' else ''
    path = write(tmp_path, 'train.txt', f'\ufeff{char} {tag}\n{follow}\n说 O\n\ufeff话 O\n')
    data = read_corpus(path)
    assert data.format.startswith('char-') and [e.text for e in data] == [text, '说话']
    assert data[0].spans == spans
    summary = data.summary()
    assert ('noted' in summary, 'broken in transit' in summary) == (bool(note), note == 'broken')


@pytest.mark.parametrize('char', ['??', '\ufffd?', '?\ufffd', '\u1100\u1161', 'क्षि'])
@pytest.mark.parametrize('marked', [False, True])
def test_a_few_characters_of_several_code_points_among_characters_are_read(tmp_path, char, marked):
    """A character broken to ``??`` (or U+FFFD and ``?``), Hangul in jamo or a Devanagari
    conjunct on 1 line in 13, with or without a word-position number (Weibo's ``??0``): read
    as one character, not refused as a word among characters."""
    mark = (lambda k: str(k % 2)) if marked else (lambda k: '')
    lines = [f'{c}{mark(k)}\tO' for k, c in enumerate('中国人民共和国是一个美丽的')]
    lines.insert(5, f'{char}{mark(1)}\tO')
    data = read_corpus(write(tmp_path, 'weibo.txt', '\n'.join(lines) + '\n'))
    assert data.format == 'char-bio' and data[0].text == f'中国人民共{char}和国是一个美丽的'
    assert 'noted 1x' in data.summary()


def test_cesu8_surrogates_read_as_their_character_or_as_broken(tmp_path):
    """Java's modified UTF-8: a surrogate pair is the emoji it encodes, a lone one U+FFFD."""
    pair = ''.join(chr(int.from_bytes('\U0001f600'.encode('utf-16-be')[i:i + 2], 'big'))
                   for i in (0, 2))
    content = f'中 O\n{pair} O\n\ud83d O\n'.encode('utf-8', 'surrogatepass')
    data = read_corpus(write(tmp_path, 'java.txt', content))
    assert data[0].text == '中\U0001f600\ufffd'
    assert 'noted 1x' in data.summary() and 'broken in transit' in data.summary()


def test_segmentation_reads_a_broken_character_inside_its_word(tmp_path):
    path = write(tmp_path, 'seg.txt', f'中 B\n{BROKEN} E\ne\u0301 S\n')
    data = read_corpus(path)
    assert data.format == 'char-seg' and data[0].words == [f'中{BROKEN}', 'e\u0301']
    assert f'noted 1x ({path}:2): a character broken in transit' in data.summary()


def test_a_csv_file_with_a_tag_column_is_named(tmp_path):
    """Kaggle's ner_dataset.csv (GMB: Sentence #, Word, POS, Tag) was read as segmented text of
    one 'word' a line and refused by task_ner as segmentation; it is named as CSV, with what to
    write instead. A CoNLL file whose words hold commas is still CoNLL."""
    path = write(tmp_path, 'ner_dataset.csv', 'Sentence #,Word,POS,Tag\nSentence: 1,Thousands,NNS,'
                                              'O\n,of,IN,O\n,London,NNP,B-geo\n,",",",",O\n'
                                              'Sentence: 2,Peter,NNP,B-per\n')
    with pytest.raises(DataFormatError, match=f"^{path}: comma-separated columns, a tag last .*"
                                              "'Sentence #,Word,POS,Tag'\\): write it as CoNLL"):
        read_corpus(path)
    conll = write(tmp_path, 'conll.txt', 'Sales O\nof O\n1,200 O\ncars O\n\nBMW B-ORG\n')
    assert read_corpus(conll).format == 'conll'
