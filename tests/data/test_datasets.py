"""Readers on tiny inline files (expected values written by hand), malformed variants (the error
names file and line), the data-folder lookup and packaged fallback, and the real files' published
counts (skipped without CRF_LR_DATA)."""
import hashlib
import json
import os
from collections import Counter

import pytest

from crf_lr.data import benchmarks
from crf_lr.data import files as datasets_files
from crf_lr.data.files import DataFormatError, resolve_data_dir
from crf_lr.data.benchmarks import dataset_path, load_dataset, packaged_file
from crf_lr.data.ner import read_bio, read_cluener, read_cmeee, read_conll, split_examples
from crf_lr.data.formats import read_corpus
from crf_lr.data.segmentation import read_pfr, read_raw, read_segmented, read_word_list
from crf_lr.data.tagging import tags_to_spans


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content.encode('utf-8') if isinstance(content, str) else content)
    return str(path)


def raises_at(path, line, match=''):
    """pytest.raises for a DataFormatError whose message starts with ``path:line:``."""
    return pytest.raises(DataFormatError, match=f'^{path}:{line}: .*{match}')


# ----------------------------------------------------------------------------------------------
# Segmentation


def test_sighan_gold_raw_and_word_list(tmp_path):
    gold = write(tmp_path, 'gold.utf8', '共同  创造  美好  \r\n\r\n女士  们  ，\r\n\r\n')
    examples = read_segmented(gold)
    assert [e.words for e in examples] == [['共同', '创造', '美好'], ['女士', '们', '，']]
    assert [e.text for e in examples] == ['共同创造美好', '女士们，']
    assert examples[0].tags == ['b', 'e', 'b', 'e', 'b', 'e']
    assert examples[1].tags == ['b', 'e', 's', 's']
    assert [e.source for e in examples] == [f'{gold}:1', f'{gold}:3']  # blank line 2 skipped
    assert examples[0].tokens == '共同创造美好' and examples[0].spans == []

    raw = read_raw(write(tmp_path, 'raw.utf8', '共同创造美好\r\n\r\n 女士们， \r\n'))
    assert [(e.text, e.tags, e.words) for e in raw] == [('共同创造美好', None, None),
                                                        ('女士们，', None, None)]

    words = write(tmp_path, 'words.utf8', '共同\n创造\n\n美好\n')
    assert read_word_list(words) == {'共同', '创造', '美好'}
    bad = write(tmp_path, 'bad_words.utf8', '共同\n创造  美好\n')
    with raises_at(bad, 2, 'one word a line'):
        read_word_list(bad)


def test_pfr_words_entities_date_ids_and_brackets(tmp_path):
    path = write(tmp_path, '199801.txt',
                 '19980101-01-001-002/m  中共中央/nt  总书记/n  、/w  江/nr  泽民/nr\n'
                 '\n'
                 '[中央/n  人民/n  广播/vn  电台/n]nt 记者/n   李/nr  鹏/nr  在/p  北京/ns\n')
    first, second = read_pfr(path)
    assert first.words == ['中共中央', '总书记', '、', '江', '泽民']
    assert first.text == '中共中央总书记、江泽民'
    assert first.spans == [(0, 4, 'ORG'), (8, 11, 'PER')]       # surname + given name merged
    assert first.tags == ['b', 'm', 'm', 'e', 'b', 'm', 'e', 's', 's', 'b', 'e']
    assert second.source == f'{path}:3'                        # the empty line 2 is no example
    assert second.words == ['中央', '人民', '广播', '电台', '记者', '李', '鹏', '在',
                            '北京']
    assert second.spans == [(10, 12, 'PER'), (13, 15, 'LOC')]


@pytest.mark.parametrize('line, match', [('中共中央nt  总书记/n', "'中共中央nt'"),
                                         ('中共中央/nt  /n', "'/n'"),
                                         ('中共中央/nt  总书记/', "'总书记/'"),
                                         ('中共中央/nt  总书记/n1', "'总书记/n1'")])
def test_pfr_malformed_token_names_line(tmp_path, line, match):
    path = write(tmp_path, 'pfr.txt', f'江/nr  泽民/nr\n{line}\n')
    with raises_at(path, 2, match):
        read_pfr(path)


@pytest.mark.parametrize('line, match', [
    ('中共/nt  [中央/n  人民/n',
     r"the '\[' compound opened by '\[中央/n' is never closed by '\]TAG'"),
    ('中共/nt  人民/n]nt', r"'人民/n\]nt' closes no '\[' compound"),
    ('[中共/n  [中央/n  人民/n]nt',
     r"'\[中央/n' opens a '\[' compound inside the one '\[中共/n' opened")])
def test_pfr_unbalanced_brackets_name_line(tmp_path, line, match):
    path = write(tmp_path, 'pfr.txt', f'江/nr  泽民/nr\n{line}\n')
    with raises_at(path, 2, match):
        read_pfr(path)


# ----------------------------------------------------------------------------------------------
# Character-per-line BIO


def test_bio_tab_and_space_files(tmp_path):
    tab = write(tmp_path, 'msra.txt',
                '中\tB-ORG\n共\tI-ORG\n在\tO\n\n\n\n京\tI-LOC\n城\tI-LOC\n人\tO\n\n')
    first, second = read_bio(tab, types=['LOC', 'ORG', 'PER'])
    assert (first.text, first.tags, first.spans, first.notes) == (
        '中共在', ['B-ORG', 'I-ORG', 'O'], [(0, 2, 'ORG')], ())
    # A chunk that opens inside an entity (MSRA's fixed-size chunks cut some): I-X read as B-X,
    # noted.
    assert second.tags == ['B-LOC', 'I-LOC', 'O'] and second.spans == [(0, 2, 'LOC')]
    assert second.notes == (datasets_files._CHUNK_START_NOTE,) and second.source == f'{tab}:7'

    space = write(tmp_path, 'pd.txt', '海 O\n钓 O\n\n张 B-PER\n三 I-PER\n')  # no final blank line
    examples = read_bio(space)
    assert [(e.text, e.spans) for e in examples] == [('海钓', []), ('张三', [(0, 2, 'PER')])]


@pytest.mark.parametrize('lines, line, match', [
    ('中\tO\n共\n', 2, 'expected one character'),               # no tag
    ('中\tO\n共\tO\textra\n', 2, 'expected one character'),     # ragged: three fields
    ('中\tO\n共产\tO\n', 2, 'expected one character'),           # two characters
    ('中\tO\n\n共\tB-XYZ\n', 3, "unknown tag 'B-XYZ'"),
    ('中\tO\n共\tS-PER\n', 2, "unknown tag 'S-PER'"),
    ('中\tB-PER\n共\tO\n产\tI-LOC\n', 3,
     r"'I-LOC' continues no entity \(it follows 'O'\) \(the readers repair"),
    ('中\tB-PER\n共\tI-LOC\n', 2, r"'I-LOC' continues no entity \(it follows 'B-PER'\)"),
])
def test_bio_malformed_names_line(tmp_path, lines, line, match):
    path = write(tmp_path, 'bad.txt', lines)
    with raises_at(path, line, match):
        read_bio(path, types=['PER', 'LOC', 'ORG'])


def test_bmes_file_and_its_broken_entities(tmp_path):
    path = write(tmp_path, 'bmes.txt', '张 B-PER\n小 M-PER\n三 E-PER\n在 O\n京 S-LOC\n\n')
    (example,) = read_bio(path, scheme='BMES')
    assert example.spans == [(0, 3, 'PER'), (4, 5, 'LOC')]
    assert example.tags == ['B-PER', 'M-PER', 'E-PER', 'O', 'S-LOC']
    for lines, line, fault in [
            ('在 O\n张 B-PER\n三 O\n', 3,                          # B- never closed by E-
             r"the entity opened by 'B-PER' at line 2 is never closed "
             r"\(expected 'E-PER' before 'O'"),
            ('在 O\n张 B-PER\n三 E-LOC\n', 3,                      # closed by another type
             r"opened by 'B-PER' at line 2 is never closed \(expected 'E-PER' before 'E-LOC'"),
            ('在 O\n三 E-PER\n', 2, r"'E-PER' ends no entity \(it follows 'O'\)")]:   # E- without B-  # noqa: E501 (CJK: ruff counts 2 columns each)
        bad = write(tmp_path, 'bad_bmes.txt', lines)
        with raises_at(bad, line, fault + r'.*drop --strict, or pass repair=True'):
            read_bio(bad, scheme='BMES')
    with raises_at(path, 2, "unknown tag 'M-PER' for the BIO scheme"):
        read_bio(path, types=['PER', 'LOC'])
    with pytest.raises(ValueError, match='scheme must be'):
        read_bio(path, scheme='IOB1')


def test_repair_fixes_tags_by_the_conlleval_rule_and_notes_it(tmp_path):
    """repair=True: the hand-written repaired tags and spans; one note per tag changed."""
    bio = write(tmp_path, 'bio.txt', '张 B-PER\n在 O\n京 I-LOC\n城 I-LOC\n\n中 I-ORG\n')
    first, second = read_bio(bio, repair=True, chunked=False)
    assert (first.tags, first.spans) == (['B-PER', 'O', 'B-LOC', 'I-LOC'],
                                         [(0, 1, 'PER'), (2, 4, 'LOC')])
    assert first.notes == (datasets_files.REPAIR_NOTE,)
    assert (second.tags, second.spans, second.notes) == (['B-ORG'], [(0, 1, 'ORG')],
                                                         (datasets_files.REPAIR_NOTE,))
    bioes = write(tmp_path, 'bioes.txt', '张 B-PER\n小 I-PER\n在 O\n京 E-LOC\n')
    (example,) = read_bio(bioes, scheme='BIOES', repair=True)
    assert example.tags == ['B-PER', 'E-PER', 'O', 'S-LOC']
    assert example.spans == [(0, 2, 'PER'), (3, 4, 'LOC')] and len(example.notes) == 2
    conll = write(tmp_path, 'conll.txt', 'Ann NNP B-PER\nsaw VBD O\nthe DT O\nUN NNP I-ORG\n')
    (example,) = read_conll(conll, repair=True)      # IOB1 would also read it: B-PER is the fault
    assert example.tags == ['B-PER', 'O', 'O',
                            'B-ORG'] and example.notes == (datasets_files.REPAIR_NOTE,)
    examples = read_bio(bio, repair=True, chunked=False)
    summary = datasets_files.Dataset('bio.txt', '', examples, ('LOC', 'ORG', 'PER'), bio).summary()
    assert f'  repaired 2x: {datasets_files.REPAIR_NOTE}' in summary.splitlines()


def test_bad_encoding_names_file_and_line(tmp_path):
    path = write(tmp_path, 'latin.txt', '中\tO\n'.encode('utf-8') + b'\xe9t\xe9\tO\n')
    with raises_at(path, 2, "not UTF-8: b'.xe9t' cannot be decoded; if it is Latin-1 "
                            r'\(Windows-1252\) text, convert it, e.g. iconv -f CP1252'):
        read_bio(path)
    gbk = write(tmp_path, 'gbk.txt', '张\tB-PER\n三\tI-PER\n'.encode('gb18030'))
    with raises_at(gbk, 1, 'reads as GB18030 \\(GBK\\) Chinese text: convert it, e.g. iconv -f '
                           'GB18030 -t UTF-8 gbk.txt > utf8.txt'):
        read_bio(gbk)
    joined = write(tmp_path, 'joined.txt', '张\tB-PER\n三\tI-PER\n\n'.encode('utf-8') * 3
                   + '李\tB-PER\n'.encode('gb18030') + '四\tI-PER\n'.encode('utf-8'))
    with raises_at(joined, 10, r"not UTF-8: b'.xc0.xee' cannot be decoded; only line 10 \(1 "
                               r'of the 8 lines with non-ASCII text\) is not UTF-8: fix or remove '
                               r'it$'):
        read_bio(joined)              # mostly UTF-8: no advice to convert the whole file
    utf16 = write(tmp_path, 'utf16.txt', '张\tB-PER\n三\tI-PER\n'.encode('utf-16'))  # BOM first
    assert read_bio(utf16)[0].spans == [(0, 2, 'PER')]
    with pytest.raises(DataFormatError, match=f'^{tmp_path}: a folder, not a file'):
        read_bio(str(tmp_path))


# ----------------------------------------------------------------------------------------------
# CLUENER, CMeEE


def cluener_line(text, label):
    return json.dumps({'text': text, 'label': label}, ensure_ascii=False)


def test_records_of_empty_text_are_skipped_counted_and_placed(tmp_path):
    """They were dropped without a word: 202 records came out as 201 sentences."""
    path = write(tmp_path, 'train.json', '\n'.join([
        cluener_line('', {}), cluener_line('张三去', {'name': {'张三': [[0, 1]]}}),
        cluener_line('', {}), cluener_line('李四', {}), cluener_line('', {})]) + '\n')
    data = read_corpus(path)
    assert [e.text for e in data] == ['张三去', '李四']
    assert (f'  noted 3x ({path}:1, {path}:3, {path}:5): a record with empty text is skipped'
            in data.summary().splitlines())


def test_cluener_inclusive_ends_repeated_mentions_and_nesting(tmp_path):
    path = write(tmp_path, 'train.json', '\n'.join([
        cluener_line('叶老桂博士说，叶老桂认为', {'name': {'叶老桂': [[0, 2], [7, 9]]},
                                          'position': {'博士': [[3, 4]]}}),
        '',
        cluener_line('读《浙商银行史》', {'book': {'《浙商银行史》': [[1, 7]]},
                                  'company': {'浙商银行': [[2, 5]]}}),
        json.dumps({'id': 0, 'text': '无标签'}, ensure_ascii=False)]) + '\n')
    first, nested, unlabeled = read_cluener(path)
    assert first.spans == [(0, 3, 'name'), (3, 5, 'position'), (7, 10, 'name')]
    assert first.tags == ['B-name', 'I-name', 'I-name', 'B-position', 'I-position', 'O', 'O',
                          'B-name', 'I-name', 'I-name', 'O', 'O']
    assert nested.spans == [(1, 8, 'book'), (2, 6, 'company')]       # both kept as spans
    assert tags_to_spans(nested.tags) == [(1, 8, 'book')]             # the tags keep the outer one
    assert nested.notes == (datasets_files._NESTED_NOTE,) and nested.source == f'{path}:3'
    assert (unlabeled.text, unlabeled.spans, unlabeled.tags) == ('无标签', [], None)   # no gold at all  # noqa: E501 (CJK: ruff counts 2 columns each)


@pytest.mark.parametrize('record, match', [
    (cluener_line('北京', {'address': {'北京': [[0, 2]]}}), 'outside a text of 2 characters'),
    (cluener_line('北京', {'address': {'南京': [[0, 1]]}}), "\"南京\" covers '北京', not its mention"),  # noqa: E501 (CJK: ruff counts 2 columns each)
    (cluener_line('北京', {'address': {'北京': [[0]]}}), 'integer pairs'),
    (cluener_line('北京', {'address': {'北京': [0, 1]}}), r'a list of pairs: \[\[0, 1\]\]'),
    (cluener_line('北京', {'address': ['北京']}), 'expected "label"'),
    ('{"text": "北京", "label": ', 'invalid JSON'),
    (json.dumps({'label': {}}), '"text" string'),
])
def test_cluener_malformed_names_line(tmp_path, record, match):
    good = cluener_line('上海', {'address': {'上海': [[0, 1]]}})
    path = write(tmp_path, 'dev.json', f'{good}\n{record}\n')
    with raises_at(path, 2, match):
        read_cluener(path)


def test_cluener_type_outside_the_given_types_names_line(tmp_path):
    path = write(tmp_path, 'dev.json', cluener_line('上海', {'address': {'上海': [[0, 1]]}}) + '\n'
                 + cluener_line('北京', {'city': {'北京': [[0, 1]]}}) + '\n')
    with raises_at(path, 2, r"entity type 'city' is not among the types of the training data "
                            r"\['address', 'name'\]"):
        read_cluener(path, types=['address', 'name'])


def span_lines(text, written):
    """``{layout: (record line, the span as messages quote it)}`` of one span written alike in each
    JSON layout (read inclusive in CLUENER's and CMeEE's, exclusive in ``spans``)."""
    start, end = written
    mention = text[start:end + 1] if isinstance(start, int) and isinstance(end, int) else text
    return {
        'label': (cluener_line(text, {'LOC': {mention: [[start, end]]}}),
                  f'{json.dumps([start, end])} of "LOC" "{mention}"'),
        'spans': (json.dumps({'text': text, 'spans': [[start, end, 'LOC']]}),
                  json.dumps([start, end, 'LOC'])),
        'entities': (json.dumps({'text': text, 'entities': [{'start_idx': start, 'end_idx': end,
                                                             'type': 'LOC', 'entity': mention}]},
                                ensure_ascii=False),
                     f'"start_idx": {json.dumps(start)}, "end_idx": {json.dumps(end)} of "LOC" '
                     f'"{mention}"'),
    }


@pytest.mark.parametrize('layout', ['label', 'spans', 'entities'])
@pytest.mark.parametrize('written, fault', [
    ((3, 9), 'is outside a text of 8 characters'),
    ((8, 9), 'is outside a text of 8 characters'),
    ((1, 0), 'ends before it starts'),
    ((-1, 2), r'has a negative start \(positions count from 0\)'),
    ((1.0, 2), 'has positions that are not integers'),
    (('1', 2), 'has positions that are not integers'),
    ((True, 2), 'has positions that are not integers'),
])
def test_bad_span_is_quoted_as_the_file_writes_it(tmp_path, layout, written, fault):
    good = cluener_line('上海', {'LOC': {'上海': [[0, 1]]}})
    line, quoted = span_lines('我爱北京天安门。', written)[layout]
    path = write(tmp_path, 'F.jsonl', f'{good}\n{good}\n\n{line}\n')
    with raises_at(path, 4, 'span ' + quoted.replace('[', r'\[').replace(']', r'\]') + ' ' + fault):
        read_cluener(path)


def test_outside_the_text_says_which_ends_the_format_counts(tmp_path):
    lines = span_lines('我爱北京天安门。', (3, 9))
    path = write(tmp_path, 'F.jsonl', lines['label'][0] + '\n')
    with raises_at(path, 1, r'span \[3, 9\] of "LOC" "京天安门。" is outside a text of 8 characters '  # noqa: E501 (CJK: ruff counts 2 columns each)
                            r'\(positions 0 to 7, the end inclusive\)$'):
        read_cluener(path)
    path = write(tmp_path, 'G.jsonl', lines['spans'][0] + '\n')
    with raises_at(path, 1, r'span \[3, 9, "LOC"\] is outside a text of 8 characters '
                            r'\(the end exclusive, at most 8\)$'):
        read_cluener(path)


@pytest.mark.parametrize('spans, fault', [
    ([[2, 2, 'LOC']], r'span \[2, 2, "LOC"\] is empty \(its end is exclusive'),
    ([[0, 2, '']], r'span \[0, 2, ""\] needs a type: a non-empty string'),
    ([[0, 2, 7]], r'span \[0, 2, 7\] needs a type'),
    ([[0, 2]], r'expected "spans": \[\[start, end, type\], ...\] \(end exclusive\), got \[0, 2\]'),
    ([[0, 2, ' LOC']], r'span \[0, 2, " LOC"\] has the type " LOC": a type with spaces around it$'),
    ([[0, 2, 'NAME\tPER']], r'has the type "NAME\\tPER": a type with whitespace in it, which the '
                            r'tags written from it \(B-TYPE\) would not read back as one$'),
])
def test_exclusive_spans_empty_or_without_type_name_line(tmp_path, spans, fault):
    path = write(tmp_path, 'F.jsonl', json.dumps({'text': '北京大学', 'spans': spans}) + '\n')
    with raises_at(path, 1, fault):
        read_cluener(path)


def test_a_doccano_label_list_is_pointed_to_spans(tmp_path):
    path = write(tmp_path, 'F.jsonl', json.dumps({'text': '北京大学', 'label': [[0, 2, 'LOC']]}))
    with raises_at(path, 1, r'expected "label": \{type: \{mention: \[\[start, end\]\]\}\}; a list '
                            r'of \[start, end, type\] \(doccano\) goes under "spans" \(its end '
                            r'exclusive\)$'):
        read_cluener(path)


def test_mention_mismatch_quotes_the_span_as_written(tmp_path):
    path = write(tmp_path, 'F.jsonl', cluener_line('我爱北京', {'LOC': {'北京': [[1, 2]]}}) + '\n')
    with raises_at(path, 1, r'span \[1, 2\] of "LOC" "北京" covers \'爱北\', not its mention '
                            r'\(misaligned offsets\?\)$'):
        read_cluener(path)


def test_duplicate_crossing_and_two_typed_spans_are_noted_where_they_stand(tmp_path):
    path = write(tmp_path, 'F.jsonl', '\n'.join([
        cluener_line('我爱北京', {'LOC': {'北京': [[2, 3], [2, 3]]}}),                 # written twice  # noqa: E501 (CJK: ruff counts 2 columns each)
        cluener_line('我在北京大学', {'ORG': {'北京大': [[2, 4]], '京大学': [[3, 5]]}}),  # crossing
        cluener_line('北京', {'LOC': {'北京': [[0, 1]]}, 'GPE': {'北京': [[0, 1]]}}),     # two types  # noqa: E501 (CJK: ruff counts 2 columns each)
        cluener_line('北京大学', {'ORG': {'北京大学': [[0, 3]]}, 'LOC': {'北京': [[0, 1]]}}),  # nested  # noqa: E501 (CJK: ruff counts 2 columns each)
    ]) + '\n')
    twice, crossing, two_types, nested = read_cluener(path)
    assert twice.spans == [(2, 4, 'LOC')] and twice.notes == (datasets_files._DUPLICATE_NOTE,)
    assert crossing.spans == [(2, 5, 'ORG'), (3, 6, 'ORG')]                   # both kept as spans
    assert tags_to_spans(crossing.tags) == [(2, 5, 'ORG')]  # the earlier in the tags
    assert crossing.notes == (datasets_files._CROSSING_NOTE,)
    assert two_types.spans == [(0, 2, 'GPE'), (0, 2, 'LOC')]
    assert two_types.notes == (datasets_files._TWO_TYPES_NOTE,)
    assert nested.notes == (datasets_files._NESTED_NOTE,)
    summary = read_corpus(path).summary().splitlines()
    for number, note in [(1, datasets_files._DUPLICATE_NOTE), (2, datasets_files._CROSSING_NOTE),
                         (3, datasets_files._TWO_TYPES_NOTE), (4, datasets_files._NESTED_NOTE)]:
        assert f'  noted 1x ({path}:{number}): {note}' in summary
    assert 'crossing' in datasets_files._CROSSING_NOTE
    assert 'nested' not in datasets_files._CROSSING_NOTE


CMEEE = [
    {'text': '儿童SARST细胞亚群', 'entities': [
        {'start_idx': 2, 'end_idx': 8, 'type': 'bod', 'entity': 'SARST细胞'},
        {'start_idx': 0, 'end_idx': 1, 'type': 'bod', 'entity': '儿童'},
        {'start_idx': 2, 'end_idx': 6, 'type': 'dis', 'entity': 'SARST'}]},
    {'text': '', 'entities': []},
    {'text': '肺炎', 'entities': [{'start_idx': 0, 'end_idx': 1, 'type': 'dis', 'entity': '肺炎'}]},
]


def test_cmeee_nested_inclusive_ends_and_record_lines(tmp_path):
    path = write(tmp_path, 'CMeEE_dev.json', json.dumps(CMEEE, ensure_ascii=False, indent=2))
    first, second = read_cmeee(path)                                   # the empty record is skipped
    assert first.spans == [(0, 2, 'bod'), (2, 7, 'dis'), (2, 9, 'bod')]
    assert tags_to_spans(first.tags) == [(0, 2, 'bod'), (2, 9, 'bod')]
    assert first.notes == (datasets_files._NESTED_NOTE,)
    assert first.source == f'{path}:2'
    # indent=2: '[' is line 1, record 1 lines 2-24, the empty record 25-28, record 3 from line 29.
    assert second.source == f'{path}:29' and second.spans == [(0, 2, 'dis')]


def test_cmeee_malformed_names_record_line(tmp_path):
    records = json.loads(json.dumps(CMEEE))
    records[2]['entities'][0]['end_idx'] = 0                          # 肺 != 肺炎
    path = write(tmp_path, 'bad.json', json.dumps(records, ensure_ascii=False, indent=2))
    with raises_at(path, 29,
                   '"start_idx": 0, "end_idx": 0 of "dis" "肺炎" covers \'肺\', not its mention'):
        read_cmeee(path)
    del records[2]['entities'][0]['type']
    path = write(tmp_path, 'bad2.json', json.dumps(records, ensure_ascii=False, indent=2))
    with raises_at(path, 29, r'start_idx, end_idx \(inclusive\), type and entity \(CMeEE\), or '
                             r'start, end \(exclusive\), type and text'):
        read_cmeee(path)
    path = write(tmp_path, 'bad3.json', '[\n  {"text": "a", "entities": []}\n  {"text": "b"}\n]')
    with raises_at(path, 3, "expected ',' or ']'"):
        read_cmeee(path)
    path = write(tmp_path, 'bad4.json', '[\n  {"text": "a", "entities": []},\n  {"text": }\n]')
    with raises_at(path, 3, 'invalid JSON'):
        read_cmeee(path)


# ----------------------------------------------------------------------------------------------
# CoNLL-2003


CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER
Jones NNP I-NP B-PER
"""


def test_conll_iob1_to_iob2_and_docstart(tmp_path):
    path = write(tmp_path, 'train.txt', CONLL)
    first, second = read_conll(path, types=['LOC', 'MISC', 'ORG', 'PER'])
    assert first.words == ['EU', 'rejects', 'German',
                           'call'] and first.text == 'EU rejects German call'
    assert first.tags == ['B-ORG', 'O', 'B-MISC', 'O'] and first.source == f'{path}:3'
    assert first.spans == [(0, 1, 'ORG'), (2, 3, 'MISC')]             # word indices
    assert second.tags == ['B-PER', 'I-PER', 'B-PER']  # IOB1 B- = a new adjacent entity
    assert second.spans == [(0, 2, 'PER'), (2, 3, 'PER')]


@pytest.mark.parametrize('bad, line, match', [('call NN O', 6, 'expected 4 columns'),
                                              ('call NN I-NP X-PER', 6, "unknown tag 'X-PER'")])
def test_conll_malformed_names_line(tmp_path, bad, line, match):
    path = write(tmp_path, 'bad.txt', CONLL.replace('call NN I-NP O', bad))
    with raises_at(path, line, match):
        read_conll(path, types=['LOC', 'MISC', 'ORG', 'PER'])


# ----------------------------------------------------------------------------------------------
# Splits, data folder, packaged copies, registry


def test_split_examples_is_seeded_disjoint_and_ordered():
    train, test = split_examples(list(range(100)), 20, seed=0)
    assert (len(train), len(test)) == (80, 20)
    assert sorted(train
                  + test) == list(range(100)) and train == sorted(train) and test == sorted(test)
    assert split_examples(list(range(100)), 20, seed=0) == (train, test)
    assert split_examples(list(range(100)), 20, seed=1)[1] != test
    with pytest.raises(ValueError, match='n_test'):
        split_examples([1, 2], 3)


def test_resolve_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv('CRF_LR_DATA', raising=False)
    assert resolve_data_dir() is None
    assert resolve_data_dir(str(tmp_path)) == str(tmp_path)
    monkeypatch.setenv('CRF_LR_DATA', str(tmp_path))
    assert resolve_data_dir() == str(tmp_path)
    with pytest.raises(FileNotFoundError, match='not a folder'):
        resolve_data_dir(str(tmp_path / 'missing'))


def test_registry_reads_a_data_folder_and_names_missing_files(tmp_path, monkeypatch):
    monkeypatch.delenv('CRF_LR_DATA', raising=False)
    (tmp_path / 'people_daily_ner').mkdir()
    (tmp_path / 'people_daily_ner' / 'example.dev').write_text('张 B-PER\n三 I-PER\n\n',
                                                               encoding='utf-8')
    dev = load_dataset('people_daily_ner', 'dev', str(tmp_path))
    assert (dev.name, dev.split, len(dev), dev.types) == ('people_daily', 'dev', 1,
                                                          ('LOC', 'ORG', 'PER'))
    assert dev.entity_counts() == Counter(PER=1) and 'entities 1: PER 1' in dev.summary()
    with pytest.raises(FileNotFoundError, match='example.test does not exist'):
        load_dataset('people_daily', 'test', str(tmp_path))
    with pytest.raises(FileNotFoundError, match='CRF_LR_DATA.*no PyPI package ships'):
        load_dataset('people_daily', 'dev')
    with pytest.raises(ValueError, match="unknown dataset 'ontonotes'"):
        load_dataset('ontonotes')
    with pytest.raises(ValueError, match="unknown split 'dev' of 'msra'"):
        load_dataset('msra', 'dev')


PACKAGED = {(name, split): part.package for name, spec in benchmarks.DATASETS.items()
            for split, part in spec.splits.items() if part.package}


@pytest.mark.parametrize('name, split', sorted(PACKAGED))
def test_packaged_copies_are_found_without_importing_them(name, split, monkeypatch):
    package = PACKAGED[(name, split)][0]
    path = packaged_file(name, split)
    if path is None:
        pytest.skip(f'{package} is not installed')
    monkeypatch.delenv('CRF_LR_DATA', raising=False)
    assert dataset_path(name, split) == path
    with open(path, 'rb') as f:
        assert hashlib.sha256(f.read()).hexdigest() == PACKAGED[(name, split)][2]
    import sys
    assert package not in sys.modules


# ----------------------------------------------------------------------------------------------
# Real files (CRF_LR_DATA): the published counts


@pytest.fixture(scope='module')
def real(data_dir):
    loaded = {}

    def get(name, split):
        if (name, split) not in loaded:
            loaded[name, split] = load_dataset(name, split, data_dir)
        return loaded[name, split]
    return get


def test_real_pku(real, data_dir):
    gold, raw = real('pku', 'test'), real('pku', 'raw_test')
    assert len(gold) == 1944 and sum(len(e.words) for e in gold) == 104372
    assert [e.text for e in raw] == [e.text for e in gold]  # raw text = gold without spaces
    assert len(read_word_list(os.path.join(data_dir, 'icwb2', 'pku_training_words.utf8'))) == 55303


def test_real_pfr(real):
    pfr = real('pku', 'train')
    assert len(pfr) == 19484                                          # the file has no empty line
    assert sum(len(e.words) for e in pfr) == 1121447
    # ns and nt words in the file (counted with grep), nr runs merged into fewer PER spans.
    counts = pfr.entity_counts()
    assert (counts['LOC'], counts['ORG']) == (27890, 3573) and counts['PER'] < 35267


def fragments(dataset):
    """Spans opening a chunk that was cut inside an entity (read as B-X and noted)."""
    return Counter(e.spans[0][2] for e in dataset if datasets_files._CHUNK_START_NOTE in e.notes)


def test_msra_split_by_position(tmp_path, monkeypatch):
    (tmp_path / 'msra_ner').mkdir()
    (tmp_path / 'msra_ner' / 'msra_bio.txt').write_text('甲\tO\n\n乙\tO\n\n丙\tO\n', encoding='utf-8')  # noqa: E501 (CJK: ruff counts 2 columns each)
    monkeypatch.setattr(benchmarks, 'MSRA_TRAIN_CHUNKS', 2)
    split = {s: [e.text for e in load_dataset('msra', s, str(tmp_path))]
             for s in ('train', 'test', 'all')}
    assert split == {'train': ['甲', '乙'], 'test': ['丙'], 'all': ['甲', '乙', '丙']}


def test_real_msra_official_split(real):
    everything = real('msra', 'all')  # read once, split as load_dataset does
    train, test = (everything[:benchmarks.MSRA_TRAIN_CHUNKS],
                   everything[benchmarks.MSRA_TRAIN_CHUNKS:])
    train, test = (datasets_files.Dataset('msra', split, part, everything.types, everything.path)
                   for split, part in (('train', train), ('test', test)))
    assert (len(train), len(test)) == (50658, 4631)
    assert sum(len(e.text) for e in train) == 2169879 and sum(len(e.text) for e in test) == 172601
    assert test[0].text.startswith('中共中央致中国致公党十一大的贺词')
    # Published counts are the file's B- tags; chunk-opening I- fragments come on top.
    assert train.entity_counts() - fragments(train) == Counter(PER=17615, LOC=36517, ORG=20571)
    assert sum((test.entity_counts() - fragments(test)).values()) == 6181
    assert (sum(fragments(train).values()), sum(fragments(test).values())) == (6, 11)


def test_real_people_daily(real):
    dev, test = real('people_daily', 'dev'), real('people_daily', 'test')
    assert (len(dev), len(test)) == (2318, 4636)
    assert sum(len(e.text) for e in dev) == 109870 and sum(len(e.text) for e in test) == 219197
    assert dev.entity_counts() == Counter(LOC=1951, ORG=984, PER=884)
    assert test.entity_counts() == Counter(LOC=3658, ORG=2185, PER=1864)
    assert all(tags_to_spans(e.tags) == e.spans for e in dev)


def test_real_cluener(real):
    train, dev, test = real('cluener', 'train'), real('cluener', 'dev'), real('cluener', 'test')
    assert (len(train), len(dev), len(test)) == (10748, 1343, 1345)
    # Distinct mentions per record and type: the official CLUENER2020 README table.
    distinct = Counter(label for e in train for label,
                       _ in {(kind, e.text[s:t]) for s, t, kind in e.spans})
    assert distinct == Counter(address=2829, book=1131, company=2897, game=2325, government=1797,
                               movie=1109, name=3661, organization=3075, position=3052, scene=1462)
    assert sum(dev.entity_counts().values()) == 3072
    assert not test.entity_counts() and all(e.tags is None for e in test)


def test_real_cluener_packaged_copy_differs_only_on_line_1(real):
    path = packaged_file('cluener', 'train')
    if path is None:
        pytest.skip('envtext is not installed')
    shared, packaged = real('cluener', 'train'), read_cluener(path)
    assert [(e.text, e.spans) for e in packaged[1:]] == [(e.text, e.spans) for e in shared[1:]]
    assert shared[0].spans == packaged[0].spans + [(32, 35, 'name')]


def test_real_cmeee_split(real):
    dev, train, test = real('cmeee', 'dev'), real('cmeee', 'train'), real('cmeee', 'test')
    assert len(dev) == 5000 and dev.entity_counts() == Counter(
        bod=5883, dis=4935, sym=4130, pro=2057, dru=1440, ite=923, mic=584, equ=238, dep=110)
    assert (len(train), len(test)) == (4000, 1000) and 'seed=0' in test.summary()
    assert sorted(e.source for e in train.examples + test.examples) == sorted(e.source for e in dev)


def test_real_conll(real):
    counts = {'train': (14041, 203621, Counter(LOC=7140, MISC=3438, ORG=6321, PER=6600)),
              'valid': (3250, 51362, Counter(LOC=1837, MISC=922, ORG=1341, PER=1842)),
              'test': (3453, 46435, Counter(LOC=1668, MISC=702, ORG=1661, PER=1617))}
    for split, (sentences, tokens, entities) in counts.items():
        data = real('conll2003', split)
        assert len(data) == sentences and sum(len(e.words) for e in data) == tokens
        assert data.entity_counts() == entities


def test_a_span_cutting_a_character_of_several_code_points_is_noted(tmp_path):
    """A span starting on a combining mark (or ending before it, or inside an emoji sequence):
    read as written, counted and placed; it was taken without a word."""
    records = [{'text': 'e\u0301李四', 'spans': [[1, 3, 'PER']]},             # on the mark
               {'text': '李四👍🏽', 'spans': [[0, 3, 'PER']]},                # inside the emoji
               {'text': 'Jose\u0301去', 'spans': [[0, 5, 'PER']]},            # whole: no note
               {'text': '张三去北京', 'spans': [[0, 2, 'PER']]}]
    path = write(tmp_path, 'F.jsonl', ''.join(json.dumps(r) + '\n' for r in records))
    data = read_cluener(path)
    assert [e.spans for e in data] == [[(1, 3, 'PER')], [(0, 3, 'PER')], [(0, 5, 'PER')],
                                       [(0, 2, 'PER')]]
    assert [e.notes.count(datasets_files.CUT_CHARACTER_NOTE) for e in data] == [1, 1, 0, 0]


def test_a_type_that_reads_as_a_tag_is_noted_not_refused(tmp_path):
    """'B-PER' or 's-loc' as a span's type: tags given where types belong (trained as the type
    B-PER, tagged B-B-PER) are counted and placed; a type such as 'B-cell' may be meant."""
    records = [{'text': '北京大学', 'spans': [[0, 2, 'B-LOC'], [2, 4, 's-org']]},
               {'text': '北京大学', 'spans': [[0, 4, 'ORG']]}]
    path = write(tmp_path, 'F.jsonl', ''.join(json.dumps(r) + '\n' for r in records))
    data = read_cluener(path)
    assert data[0].spans == [(0, 2, 'B-LOC'), (2, 4, 's-org')]
    assert [e.notes.count(datasets_files.TAG_LIKE_TYPE_NOTE) for e in data] == [2, 0]


def test_label_studio_exports_and_spacy_entities_are_read_and_tokens_records_named(tmp_path):
    """The layouts annotation tools write: Label Studio's tasks (its first annotation not
    cancelled; relations left out; a task without one unlabelled) and spaCy's [start, end, type]
    entities; a Hugging Face "tokens" record gets a line saying how to write it. They were all
    'expected an object with a "text" string' or a mis-read entity."""
    from crf_lr.data.ner import json_texts
    task = {'data': {'text': '李四在上海'}, 'annotations': [
        {'was_cancelled': True, 'result': [{'value': {'start': 0, 'end': 2, 'text': '李四',
                                                      'labels': ['PER']}}]},
        {'result': [{'value': {'start': 3, 'end': 5, 'text': '上海', 'labels': ['LOC']},
                     'type': 'labels'}, {'type': 'relation', 'from_id': 'a', 'to_id': 'b'}]}]}
    old = {'data': {'text': '王五'}, 'completions': [                # Label Studio 0.x
        {'skipped': True, 'result': [{'value': {'start': 0, 'end': 2, 'text': '王五',
                                                'labels': ['LOC']}}]},
        {'result': [{'value': {'start': 0, 'end': 2, 'text': '王五', 'labels': ['PER']}}]}]}
    path = write(tmp_path, 'export.json', json.dumps([task, {'data': {'text': '王五'}}, old]))
    data = read_cluener(path)                                       # the task without one: left
    assert [(e.text, e.spans) for e in data] == [('李四在上海', [(3, 5, 'LOC')]),    # out, noted
                                                 ('王五', [(0, 2, 'PER')])]
    assert data[1].noted_at == (('a Label Studio task without an annotation is skipped',
                                 f'{path}:1'),)
    tasks = write(tmp_path, 'tasks.json', json.dumps([{'data': {'text': '王五'}, 'id': 7}]))
    assert json_texts(tasks) == [('王五', 7)]                       # predict keeps the id
    task['annotations'][1]['result'][0]['value']['text'] = '上山'
    with raises_at(write(tmp_path, 'wrong.json', json.dumps([task])), 1, 'not its mention'):
        read_cluener(str(tmp_path / 'wrong.json'))
    spacy = write(tmp_path, 'spacy.jsonl', json.dumps({'text': '张三去北京', 'entities': [
        [0, 2, 'PER'], [3, 5, 'LOC']]}) + '\n')
    assert read_cluener(spacy)[0].spans == [(0, 2, 'PER'), (3, 5, 'LOC')]
    tokens = write(tmp_path, 'hf.jsonl', json.dumps({'tokens': ['EU', 'rejects'],
                                                     'ner_tags': [3, 0]}) + '\n')
    with raises_at(tokens, 1, r'a record of "tokens" \(the Hugging Face datasets layout\): .* '
                              'write tokens as CoNLL instead'):
        read_cluener(tokens)
