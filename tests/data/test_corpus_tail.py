"""The long tail of users' corpus files: bytes that are not text, Label Studio's other export
layouts, and dev or test files that cannot score a run."""
import gzip
import json

import pytest

from crf_lr.data.files import DataFormatError
from crf_lr.data.formats import read_corpus


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content.encode('utf-8') if isinstance(content, str) else content)
    return str(path)


# ----------------------------------------------------------------------------------------------
# Bytes that are not text

def test_a_nul_character_is_an_error_naming_its_line(tmp_path):
    """A NUL was read into the tag of its line: 'I-PER\\x00' became a type of its own."""
    path = write(tmp_path, 'nul.txt', '张 B-PER\n三 I-PER\x00\n在 O\n')
    with pytest.raises(DataFormatError, match=f'^{path}:2: a NUL character .*: remove it$'):
        read_corpus(path)


@pytest.mark.parametrize('encoding', ['utf-16-le', 'utf-16-be'])
def test_utf16_without_its_byte_order_mark_gives_the_iconv_command(tmp_path, encoding):
    """English UTF-16 decoded as UTF-8 (ASCII and NULs) and was 'a NUL character' at line 1;
    Chinese UTF-16 was 'binary, or UTF-16 without its byte-order mark', without the command."""
    name = encoding.upper().replace('-LE', 'LE').replace('-BE', 'BE')
    for content in ('EU B-ORG\nrejects O\n', '张 B-PER\n三 I-PER\n'):
        path = write(tmp_path, 'train.txt', content.encode(encoding))
        with pytest.raises(DataFormatError, match=f'^{path}: {name} text without its byte-order '
                                                  rf'mark .*: convert it, e\.g\. iconv -f {name} '
                                                  r'-t UTF-8 train\.txt > utf8\.txt$'):
            read_corpus(path)
    path = write(tmp_path, 'bom.txt', '张 B-PER\n三 I-PER\n'.encode(encoding.replace('-le', '')
                                                                    .replace('-be', '')))
    assert read_corpus(path)[0].spans == [(0, 2, 'PER')]        # with its mark: read


@pytest.mark.parametrize('content, kind', [
    (gzip.compress('张 B-PER\n三 I-PER\n'.encode()), 'a gzip file'),
    (b'PK\x03\x04\x14\x00\x00\x00\x08\x00', 'a zip archive'),
], ids=['gzip', 'zip'])
def test_a_compressed_file_is_named_as_such(tmp_path, content, kind):
    path = write(tmp_path, 'train.txt.gz', content)
    with pytest.raises(DataFormatError, match=f'^{path}: {kind} .*not text: unpack it'):
        read_corpus(path)


# ----------------------------------------------------------------------------------------------
# Label Studio: JSON-MIN, other data keys, and what is left out said

def region(start, end, text, *labels):
    return {'start': start, 'end': end, 'text': text, 'labels': list(labels)}


def test_label_studio_json_min_rows_are_read(tmp_path):
    """JSON-MIN (a row per annotation, the regions under the control tag's name) was 'expected
    "label": {type: {mention: ...}}', or, under another name, a record silently without entities.
    An annotation that found nothing is a row without regions; another annotator's row of the
    same task is skipped and noted."""
    rows = [dict(id=1, text='张三在北京', label=[region(0, 2, '张三', 'PER'),
                                            region(3, 5, '北京', 'LOC')],
                 annotator=1, annotation_id=1, created_at='2026-11-01T10:00:00Z'),
            dict(id=1, text='张三在北京', label=[region(0, 2, '张三', 'LOC')], annotator=2,
                 annotation_id=2),
            dict(id=2, text='没有', annotator=1, annotation_id=3),
            dict(id=3, sentence='李四', ner=[region(0, 2, '李四', 'PER')], annotator=1,
                 annotation_id=4, created_at='2026-11-01T10:00:00Z')]
    path = write(tmp_path, 'min.json', json.dumps(rows))
    data = read_corpus(path)
    assert [(e.text, e.spans) for e in data] == [
        ('张三在北京', [(0, 2, 'PER'), (3, 5, 'LOC')]), ('没有', []), ('李四', [(0, 2, 'PER')])]
    assert (f"noted 1x ({path}:1): a JSON-MIN row of a Label Studio task already read (another "
            "annotator's annotation, the same id) is skipped") in data.summary()


def test_what_a_label_studio_task_leaves_out_is_noted(tmp_path):
    """Other annotators' annotations, regions whose labels were cleared and relations or choices
    were dropped without a word; a text under another data key was 'expected an object with a
    "text" string'."""
    task = {'id': 7, 'data': {'sentence': '张三在北京', 'source': 'news'}, 'annotations': [
        {'completed_by': 1, 'result': [
            {'id': 'a', 'type': 'labels', 'value': region(0, 2, '张三', 'PER')},
            {'id': 'b', 'type': 'labels', 'value': region(3, 5, '北京')},
            {'type': 'relation', 'from_id': 'a', 'to_id': 'b', 'labels': []},
            {'type': 'choices', 'value': {'choices': ['news']}}]},
        {'completed_by': 2, 'result': [{'type': 'labels', 'value': region(3, 5, '北京', 'LOC')}]}]}
    path = write(tmp_path, 'tasks.json', json.dumps([task]))
    data = read_corpus(path)
    assert [(e.text, e.spans) for e in data] == [('张三在北京', [(0, 2, 'PER')])]
    summary = data.summary()
    for note in ('a Label Studio task with several annotations (annotators): the first neither '
                 'cancelled nor skipped read, the others left out',
                 'a Label Studio region without a label ("labels": []) is left out',
                 "a Label Studio result of type 'relation' is left out",
                 "a Label Studio result of type 'choices' is left out"):
        assert f'noted 1x ({path}:1): {note}' in summary
    task['data'] = {'sentence': '张三在北京', 'title': '北京'}        # the regions tell which
    assert read_corpus(write(tmp_path, 'two.json', json.dumps([task])))[0].text == '张三在北京'
    task['data'] = {'a': '张三在北京', 'b': '张三在北京'}
    with pytest.raises(DataFormatError, match='holds no "text", and these strings: .*"a", "b"'):
        read_corpus(write(tmp_path, 'unclear.json', json.dumps([task])))


# ----------------------------------------------------------------------------------------------
# Dev and test files that cannot score a run

def test_a_dev_or_test_split_without_an_entity_stops_an_ner_run(tmp_path):
    """A dev file of O tags only scored F1 0 every epoch (epoch 1 'selected'), a test file 'F1
    0.0000' whatever the model predicted; now one line names the split before training."""
    from crf_lr.data.splits import load_splits
    train = write(tmp_path, 'train.txt', '张 B-PER\n三 I-PER\n去 O\n\n北 B-LOC\n京 I-LOC\n')
    plain = write(tmp_path, 'plain.txt', '今 O\n天 O\n\n下 O\n雨 O\n')
    with pytest.raises(ValueError, match=rf'^the dev split \({plain} \(format char-bio\)\) holds '
                                         r'no entity in its 2 sentences: no epoch can be selected '
                                         'on it, and its F1 is 0 whatever the model predicts; '
                                         'give a dev file with entity tags$'):
        load_splits(train_file=train, dev_file=plain, task='ner')
    with pytest.raises(ValueError, match=r'^the test split .* holds no entity in its 1 sentences '
                                         r'\(the first 1: --eval-limit\): its F1 is 0 whatever '
                                         'the model predicts; give a test file with entity tags, '
                                         'or raise --eval-limit$'):
        load_splits(train_file=train, dev_file=train, test_file=write(
            tmp_path, 'test.txt', '今 O\n\n张 B-PER\n'), eval_limit=1, task='ner')
    # the whole file, or its first sentence: raising --eval-limit finds no entity either
    for limit, what in ((2, ''), (1, r' \(the first 1: --eval-limit\)')):
        with pytest.raises(ValueError, match=rf'holds no entity in its {limit} sentences{what}: '
                                             '.*give a dev file with entity tags$'):
            load_splits(train_file=train, dev_file=plain, eval_limit=limit, task='ner')
    assert load_splits(train_file=train, dev_file=plain).dev      # a library call checks nothing


def test_a_dev_or_test_file_of_training_sentences_is_said(tmp_path):
    """The training file given as dev and test too scored the model on what it trained on,
    without a word; the split's name (printed, and kept in results.json) now says so."""
    from crf_lr.data.splits import load_splits
    train = write(tmp_path, 'train.txt', '张 B-PER\n三 I-PER\n去 O\n\n北 B-LOC\n京 I-LOC\n')
    data = load_splits(train_file=train, dev_file=train, test_file=train, task='ner')
    for role in ('dev', 'test'):
        assert data.names[role] == (f'{train} (format char-bio); note: 2 of its 2 sentences are '
                                    'in the training file, so its scores are on text the model '
                                    'may have trained on')
    other = write(tmp_path, 'dev.txt', '张 B-PER\n三 I-PER\n去 O\n\n上 B-LOC\n海 I-LOC\n')
    assert load_splits(train_file=train, dev_file=other).names['dev'] == (
        f'{other} (format char-bio)')                                 # 1 of 2: not said


# ----------------------------------------------------------------------------------------------
# Layouts around the tags

@pytest.mark.parametrize('content, line, rest', [
    ('word\ttag\nEU\tB-ORG\nrejects\tO\n', 1, 2),
    ('Word POS Tag\nEU NNP B-ORG\nrejects VBZ O\n', 1, 2),
    ('\nchar label\n张 B-PER\n三 I-PER\n', 2, 3),
])
def test_a_header_row_is_named_as_one(tmp_path, content, line, rest):
    """A first line of column names was "'tag' is not a tag (line 2 ends with 'B-ORG')"."""
    path = write(tmp_path, 'train.txt', content)
    with pytest.raises(DataFormatError, match=rf'^{path}:{line}: .* is a header row \(the column '
                                              rf'names\): remove it, e\.g\. tail -n \+{rest} '
                                              r'train\.txt > clean\.txt$'):
        read_corpus(path)


@pytest.mark.parametrize('name, content, line', [
    ('train.jsonl', '{"text": "张三", "spans": [[0, 2, "PER"],]}\n', 1),
    ('train.jsonl', '{"text": "张三", "spans": [[0, 2, "PER"]],}\n', 1),
    ('train.json', '[\n{"text": "张三",\n "spans": [[0, 2, "PER"],]}\n]\n', 3),
])
def test_a_trailing_comma_inside_a_record_is_named(tmp_path, name, content, line):
    """JavaScript's and Python's trailing commas were 'invalid JSON: Expecting value' alone."""
    path = write(tmp_path, name, content)
    with pytest.raises(DataFormatError, match=rf"^{path}:{line}: invalid JSON: .*\(a comma "
                                              r"before the closing '\]' or '}': JSON allows none "
                                              r"there\)$"):
        read_corpus(path)


def test_a_tab_separated_file_with_spaces_in_its_words_is_described_as_read(tmp_path):
    """'New York<TAB>NNP<TAB>B-LOC' was read right (tabs alone separate) but described as '4
    columns a line', as if split at the space too."""
    path = write(tmp_path, 'train.txt', 'New York\tNNP\tB-LOC\nis\tVBZ\tO\n\nSan Francisco\tNNP'
                                        '\tB-LOC\n')
    data = read_corpus(path)
    assert [e.tokens for e in data] == [['New York', 'is'], ['San Francisco']]
    assert data.note.startswith('format conll detected: 3 columns a line (tab-separated), a word '
                                'first and its tag last;')


def test_label_studio_offsets_in_utf16_code_units_are_read_at_their_characters(tmp_path):
    """Label Studio (JavaScript) counts an emoji as 2: every region after one was 'covers ..., not
    its mention (misaligned offsets?)'; where its text stands at the UTF-16 positions, it is
    read there and noted."""
    task = {'data': {'text': '👍🏽张三在北京'}, 'annotations': [{'result': [
        {'type': 'labels', 'value': region(4, 6, '张三', 'PER')},
        {'type': 'labels', 'value': region(7, 9, '北京', 'LOC')}]}]}
    path = write(tmp_path, 'tasks.json', json.dumps([task]))
    data = read_corpus(path)
    assert data[0].spans == [(2, 4, 'PER'), (5, 7, 'LOC')]
    assert (f'noted 2x ({path}:1): a Label Studio region whose offsets count UTF-16 code units'
            in data.summary())
    task['annotations'][0]['result'][0]['value'] = region(4, 6, '李四', 'PER')   # stands nowhere
    with pytest.raises(DataFormatError, match='not its mention'):
        read_corpus(write(tmp_path, 'wrong.json', json.dumps([task])))


def test_a_json_min_row_whose_id_is_no_int_or_string_is_read(tmp_path):
    """An id such as [1] (unhashable) was a TypeError from deep inside the reader."""
    rows = [dict(id=[1], text='李四', label=[region(0, 2, '李四', 'PER')], annotation_id=1)] * 2
    data = read_corpus(write(tmp_path, 'min.json', json.dumps(rows)))
    assert [e.spans for e in data] == [[(0, 2, 'PER')]] * 2


def test_a_json_min_row_of_a_task_without_an_annotation_is_skipped(tmp_path):
    """The converter writes a task not annotated yet as a row whose annotation_id is null (no
    regions): it was read as a sentence without an entity, trained on as all O."""
    rows = [dict(id=1, text='李四', label=[region(0, 2, '李四', 'PER')], annotation_id=1),
            dict(id=2, text='张三在北京', annotator='', annotation_id=None, created_at=None,
                 updated_at=None, lead_time=None)]
    path = write(tmp_path, 'min.json', json.dumps(rows))
    data = read_corpus(path)
    assert [(e.text, e.spans) for e in data] == [('李四', [(0, 2, 'PER')])]
    assert 'a Label Studio task without an annotation is skipped' in data.summary()


def test_a_json_min_value_of_another_control_is_noted(tmp_path):
    """A HyperText control's regions (xpath starts, "hypertextlabels") were dropped without a
    word: the row read as a sentence without an entity, as the JSON export's note says."""
    rows = [dict(id=1, text='<p>张三</p>', ner=[{'start': '/p[1]/text()[1]', 'startOffset': 0,
                                               'end': '/p[1]/text()[1]', 'endOffset': 2,
                                               'text': '张三', 'hypertextlabels': ['PER']}],
                 annotator=1, annotation_id=1)]
    path = write(tmp_path, 'min.json', json.dumps(rows))
    assert f"({path}:1): a JSON-MIN value 'ner' of objects" in read_corpus(path).summary()


@pytest.mark.parametrize('separator', [',', '\t'])
def test_a_label_studio_csv_export_is_named(tmp_path, separator):
    """Label Studio's CSV and TSV exports were read as segmented text (the header a sentence of
    one word, each row a sentence): task_ner.py called them word segmentation, and
    task_cws_crf.py would have trained on them."""
    rows = [['annotation_id', 'annotator', 'id', 'label', 'text'],
            ['1', '1', '1', '"[{""start"": 0, ""end"": 2, ""text"": ""张三"", ""labels"": '
                               '[""PER""]}]"', '张三在北京']]
    path = write(tmp_path, 'export.csv', ''.join(separator.join(row) + '\n' for row in rows))
    with pytest.raises(DataFormatError, match=f'^{path}:1: a Label Studio CSV or TSV export .*: '
                                              'export the project as JSON or JSON-MIN instead'):
        read_corpus(path)
