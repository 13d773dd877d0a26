"""Which sentences train, select and test a run: user files and benchmark specs, the seeded sample
and hold-out, and the errors raised before any training starts."""
import os
import re

import numpy as np
import pytest

from crf_lr.data import files as datasets_files
from crf_lr.data import benchmarks
from crf_lr.data import formats as datasets_formats
from crf_lr.data.splits import load_splits
from helpers.paths import SAMPLES


def _char_bio(path, sentences):
    """A char-bio file: each sentence a list of (characters, type or None)."""
    lines = []
    for sentence in sentences:
        for chars, kind in sentence:
            lines += [f'{c} {"O" if kind is None else ("B-" if i == 0 else "I-") + kind}'
                      for i, c in enumerate(chars)]
        lines.append('')
    path.write_text('\n'.join(lines) + '\n', encoding='utf-8')
    return str(path)


SENTENCES = [[('张三', 'PER'), ('去', None), ('北京', 'LOC')],
             [('李四', 'PER'), ('好', None)],
             [('上海', 'LOC'), ('很', None), ('大', None)]] * 10          # 30 sentences


def test_user_files_take_types_from_training_and_hold_out_the_end_of_one_permutation(tmp_path):
    train = _char_bio(tmp_path / 'train.txt', SENTENCES)
    test = _char_bio(tmp_path / 'test.txt', SENTENCES[:4])
    full = load_splits(train_file=train, test_file=test, sample_seed=3)
    assert full.types == ('LOC', 'PER') and full.units == 'chars' and not full.nested
    assert (len(full.train), len(full.dev), len(full.test)) == (27, 3, 4)   # 10% held out
    assert 'hold-out of' in full.names['dev'] and full.names['test'] == (
        f'{test} (format char-bio); note: 4 of its 4 sentences are in the training file, so its '
        'scores are on text the model may have trained on')
    # the hold-out comes from the end of the seeded permutation whose start is the sample:
    # asking for fewer training sentences keeps the same dev and a prefix of the same order
    small = load_splits(train_file=train, test_file=test, sample_seed=3, train_limit=5)
    assert [e.source for e in small.dev] == [e.source for e in full.dev]
    assert set(e.source for e in small.train) <= set(e.source for e in full.train)
    assert not set(e.source for e in small.train) & set(e.source for e in small.dev)
    limited = load_splits(train_file=train, dev_file=test, eval_limit=2)
    assert len(limited.dev) == 2 and limited.test is None and len(limited.train) == 30
    assert 'the dev score of the selected epoch is the final figure' in limited.describe()


def test_a_type_seen_only_in_dev_is_an_error_naming_the_file(tmp_path):
    train = _char_bio(tmp_path / 'train.txt', SENTENCES)
    dev = _char_bio(tmp_path / 'dev.txt', [[('华为', 'ORG')]])
    with pytest.raises(ValueError, match=r'dev\.txt:\d+:.*ORG'):
        load_splits(train_file=train, dev_file=dev)


def test_empty_or_too_small_splits_are_errors_before_training(tmp_path, monkeypatch):
    train = _char_bio(tmp_path / 'train.txt', SENTENCES[:1])
    with pytest.raises(ValueError, match='cannot hold out 1 of 1 training sentences'):
        load_splits(train_file=train)
    (tmp_path / 'msra_ner').mkdir()
    (tmp_path / 'msra_ner' / 'msra_bio.txt').write_text('甲\tO\n\n乙\tO\n\n丙\tO\n',
                                                      encoding='utf-8')
    with pytest.raises(ValueError, match=r'msra/test: no examples in .*msra_bio\.txt \(official '
                                         r'test part: the chunks from #50658\)'):
        load_splits('msra', data_dir=str(tmp_path))
    monkeypatch.setattr(benchmarks, 'MSRA_TRAIN_CHUNKS', 2)
    data = load_splits('msra', data_dir=str(tmp_path))
    assert [e.text for e in data.test] == ['丙'] and (len(data.train), len(data.dev)) == (1, 1)
    with pytest.raises(ValueError, match='cannot hold out 2 of 2'):
        load_splits('msra', data_dir=str(tmp_path), holdout=2)


def test_benchmark_roles_come_from_the_spec(tmp_path):
    (tmp_path / 'cluener2020').mkdir()
    record = '{"text": "张三在北京", "label": {"name": {"张三": [[0, 1]]}}}\n'
    for split in ('train', 'dev'):
        (tmp_path / 'cluener2020' / f'{split}.json').write_text(record * 3, encoding='utf-8')
    data = load_splits('cluener', data_dir=str(tmp_path))
    assert (len(data.train), len(data.dev), data.test) == (3, 3, None)
    assert data.names == {'train': 'cluener/train', 'dev': 'cluener/dev',
                          'test': 'cluener has no labelled test split'}
    assert data.types == benchmarks.dataset_spec('cluener').types
    with pytest.raises(ValueError, match='needs a dataset name or a train_file'):
        load_splits()


def test_a_training_file_without_an_entity_is_an_error_for_ner(tmp_path):
    """Every tag O (char-bio), every "label" empty (JSON), or a --train-limit sample of only O
    sentences: one line before any model is built (a head of no types, a traceback, before)."""
    plain = _char_bio(tmp_path / 'train.txt', [[('今天', None), ('好', None)]] * 5)
    with pytest.raises(ValueError, match=rf'^{plain} \(.*\): no entity in the training file '
                                         r'\(every tag is O\): nothing for a tagger to learn'):
        load_splits(train_file=plain, task='ner')
    assert load_splits(train_file=plain).types == ()          # a library call checks nothing
    records = tmp_path / 'records.jsonl'
    records.write_text('{"text": "张三", "label": {}}\n' * 5, encoding='utf-8')
    with pytest.raises(ValueError, match='no entity in the training file'):
        load_splits(train_file=str(records), task='ner')
    mostly_plain = _char_bio(tmp_path / 'mostly.txt',
                             [[('今天', None)]] * 40 + [[('张三', 'PER'), ('好', None)]])
    seed = next(seed for seed in range(100) if 40 not in np.random.default_rng(seed).permutation(
        41)[:3])                                          # a sample of 3 without the PER sentence
    with pytest.raises(ValueError, match=r'no entity is left in the 3 training sentences \(the '
                                         r'--train-limit 3 sample took every sentence with one\): '
                                         r'raise --train-limit, give a --dev-file or another '
                                         r'--sample-seed$'):
        load_splits(train_file=mostly_plain, dev_file=mostly_plain, train_limit=3,
                    sample_seed=seed, task='ner')
    seed = next(seed for seed in range(100) if np.random.default_rng(seed).permutation(41)[-1]
                == 40)                           # the hold-out (the last 4) takes the PER one
    with pytest.raises(ValueError, match=r'\(the development hold-out took every sentence with '
                                         r'one\): give a --dev-file or another --sample-seed$'):
        load_splits(train_file=mostly_plain, sample_seed=seed, task='ner')


def test_a_dev_file_in_another_kind_of_format_or_for_another_task_is_named(tmp_path):
    """The dev file's own format must be the training file's kind; the training file must be in
    one of the task's formats; every record of a JSON file needs its entities."""
    train = _char_bio(tmp_path / 'train.txt', SENTENCES)
    segmented = tmp_path / 'seg.txt'
    segmented.write_text('张三  去  北京\n李四  好\n', encoding='utf-8')
    with pytest.raises(datasets_files.DataFormatError, match=(
            f'^{segmented}: format segmented detected, but the training file {train} is '
            'char-bio: give the training, dev and test files in one format$')):
        load_splits(train_file=train, dev_file=str(segmented))
    with pytest.raises(datasets_files.DataFormatError, match=(
            f'^{segmented}: format segmented detected: word segmentation, no entity tags; train '
            'it with examples/task_cws_crf.py')):
        load_splits(train_file=str(segmented), task='ner')
    with pytest.raises(datasets_files.DataFormatError, match=(
            f'^{train}: format char-bio detected: entity tags; train NER with '
            'examples/task_ner.py')):
        load_splits(train_file=train, task='segmentation')
    pfr = tmp_path / 'pfr.txt'                   # People's Daily 1998: names in its POS tags
    pfr.write_text('19980101-01-001-001/m  江/nr  泽民/nr  在/p  北京/ns\n', encoding='utf-8')
    with pytest.raises(datasets_files.DataFormatError, match=(
            f'^{pfr}: format segmented detected: word segmentation, its nr/ns/nt part-of-speech '
            'tags mark names, but they are no NER training tags; train it with '
            'examples/task_cws_crf.py')):
        load_splits(train_file=str(pfr), task='ner')
    raw = tmp_path / 'raw.txt'                                  # unsegmented text as a test file
    raw.write_text('张三去北京\n李四好\n', encoding='utf-8')
    with pytest.raises(datasets_files.DataFormatError, match=f'^{raw}: cannot detect the format: '
                                                       'no line ends with a tag and none holds '
                                                       r'several words \(raw text\?\)'):
        load_splits(train_file=str(segmented), test_file=str(raw), task='segmentation')
    spans = tmp_path / 'dev.jsonl'                  # JSON beside char-bio: both character NER
    spans.write_text('{"text": "李四去北京", "spans": [[0, 2, "PER"], [3, 5, "LOC"]]}\n',
                     encoding='utf-8')
    assert load_splits(train_file=train, dev_file=str(spans)).dev[0].spans == [
        (0, 2, 'PER'), (3, 5, 'LOC')]
    assert len(load_splits(train_file=str(spans), dev_file=train).dev) == 30
    records = tmp_path / 'records.jsonl'
    records.write_text('{"text": "张三", "label": {"name": {"张三": [[0, 1]]}}}\n'
                       '{"text": "李四"}\n', encoding='utf-8')
    with pytest.raises(datasets_files.DataFormatError, match=(
            f'^{records}:2: a record without "label", "spans" or "entities": training, dev and '
            'test files need the entities of every record')):
        load_splits(train_file=str(records), dev_file=str(records))


def test_repairs_and_notes_count_the_sentences_the_run_uses(tmp_path):
    train = _char_bio(tmp_path / 'train.txt', SENTENCES)
    dev = tmp_path / 'dev.txt'
    dev.write_text('张 B-PER\n三 I-PER\n\n去 O\n京 I-LOC\n', encoding='utf-8')  # a stray I-LOC
    assert load_splits(train_file=train, dev_file=str(dev)).repaired_at == [f'{dev}:5']
    assert load_splits(train_file=train, dev_file=str(dev), eval_limit=1).repaired_at == []
    nested = tmp_path / 'nested.jsonl'
    nested.write_text('{"text": "北京大学", "spans": [[0, 4, "ORG"], [0, 2, "LOC"]]}\n' * 20,
                      encoding='utf-8')
    assert re.search(f'^noted 20x \\(({nested}:[0-9]+, ){{3}}…\\): a nested span is left out of '
                     'the flat tags', load_splits(train_file=str(nested), holdout=2).describe(),
                     re.M)


def test_segmentation_files_in_either_layout_go_together(tmp_path):
    segmented = tmp_path / 'seg.txt'
    segmented.write_text('张三  去  北京\n李四  好\n' * 5, encoding='utf-8')
    char_seg = tmp_path / 'char_seg.txt'
    char_seg.write_text('张 B\n三 E\n去 S\n北 B\n京 E\n\n李 B\n四 E\n好 S\n\n' * 5,
                        encoding='utf-8')
    data = load_splits(train_file=str(char_seg), dev_file=str(segmented),
                       test_file=str(segmented), task='segmentation')
    assert data.dev[0].words == data.train[0].words == ['张三', '去', '北京']


def test_a_dev_file_in_another_scheme_of_the_same_kind_reads_in_its_own(tmp_path):
    """char-bio training and char-bioes / char-bmes dev files: the same entities."""
    root = str(SAMPLES)
    data = {dev: load_splits(train_file=os.path.join(root, 'char-bio', 'train.txt'),
                             dev_file=os.path.join(root, dev, 'dev.txt')).dev
            for dev in ('char-bio', 'char-bioes', 'char-bmes')}
    spans = [[e.spans for e in examples] for examples in data.values()]
    assert spans[0] == spans[1] == spans[2] and any(spans[0])


def test_raw_text_with_a_spaced_line_is_not_taken_for_segmented_text(tmp_path):
    raw = tmp_path / 'raw.txt'
    raw.write_text('张三昨天去北京大学看望李四。\n苹果公司发布了 iPhone 15 '
                   '新手机\n王五在上海市工作\n',
                   encoding='utf-8')
    with pytest.raises(datasets_files.DataFormatError, match=f'^{raw}:1: raw text\\? no line ends '
                                                       'with a tag, and most lines hold one word'):
        datasets_formats.read_corpus(str(raw))


def test_the_summary_says_when_a_split_is_too_small_to_score(tmp_path):
    """A tried-out run of a few sentences is told that its scores mean little; a run of enough
    sentences is not."""
    train = _char_bio(tmp_path / 'train.txt', SENTENCES)
    small = load_splits(train_file=train, holdout=1).describe().splitlines()
    assert small[-1] == ('note: only 29 training sentences and 1 development sentence: a model '
                         'learns little from so few, and their scores change by chance from one '
                         'run to the next')
    enough = _char_bio(tmp_path / 'enough.txt', SENTENCES * 4)
    described = load_splits(train_file=enough, dev_file=enough).describe()
    assert 'train: 120 sentences' in described and 'note: only' not in described


@pytest.mark.parametrize('dataset, task, script', [('pku', 'ner', 'task_cws_crf.py'),
                                                   ('msra', 'segmentation', 'task_ner.py')])
def test_a_benchmark_of_another_task_is_named_before_it_is_read(dataset, task, script):
    """``task_ner.py --dataset pku`` ended in a traceback from the NER head (PKU's examples
    carry word-position tags); its --help listed pku."""
    kind = 'word segmentation' if task == 'ner' else 'NER'
    with pytest.raises(ValueError, match=f'^{dataset} is a {kind} benchmark: train it with '
                                         f'examples/{script}$'):
        load_splits(dataset, data_dir='/nonexistent', task=task)


def test_a_dev_or_test_file_of_your_own_beside_a_benchmark(tmp_path, monkeypatch):
    """A run trained on a benchmark scores your corrected file: --test-file needed --train-file.
    The file is read with the benchmark's types, and must hold its units."""
    (tmp_path / 'msra_ner').mkdir()
    (tmp_path / 'msra_ner' / 'msra_bio.txt').write_text(
        '张\tB-PER\n三\tI-PER\n\n北\tB-LOC\n京\tI-LOC\n\n好\tO\n', encoding='utf-8')
    monkeypatch.setattr(benchmarks, 'MSRA_TRAIN_CHUNKS', 2)
    mine = _char_bio(tmp_path / 'mine.txt', SENTENCES[:3])
    data = load_splits('msra', test_file=mine, dev_file=mine, data_dir=str(tmp_path))
    assert [e.text for e in data.test] == [e.text for e in data.dev] == ['张三去北京', '李四好',
                                                                        '上海很大']
    assert data.names['test'].startswith(f'{mine} (format char-bio detected')
    assert data.files['test'] == mine
    words = tmp_path / 'words.txt'
    words.write_text('Peter B-PER\nleft O\n', encoding='utf-8')
    with pytest.raises(datasets_files.DataFormatError, match=f'^{words}: format conll holds '
                                                             'words, but the benchmark msra '
                                                             'trains on chars'):
        load_splits('msra', test_file=str(words), data_dir=str(tmp_path))


def test_english_text_read_as_characters_is_said_to_train_a_character_model(tmp_path):
    """JSON records of English text (predict's corrected output of a word model) trained a
    character model without a word; CoNLL is named for a word model. Chinese text says nothing."""
    english = tmp_path / 'en.jsonl'
    english.write_text('{"text": "Peter Blackburn visited Germany", "spans": [[0, 15, "PER"]]}\n'
                       * 30, encoding='utf-8')
    described = load_splits(train_file=str(english)).describe()
    assert described.splitlines()[-1] == (
        'note: the training text is mostly Latin words, read one character at a time (as JSON '
        'records and character-tag files are): a model of characters; for one of words, write a '
        'word and its tag a line (CoNLL)')
    chinese = _char_bio(tmp_path / 'train.txt', SENTENCES * 4)
    assert 'Latin words' not in load_splits(train_file=chinese).describe()
