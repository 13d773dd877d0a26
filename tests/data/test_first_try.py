"""A real corpus on the first try (issue 25): messy tags repaired by default and placed,
word-position marks read as characters, blank lines of whitespace and BOMs, the encoder chosen by
the text's script, the unknown-piece guard, and a console free of TensorFlow's native log lines.

Oracles: hand-written files whose repairs, characters, types and blank lines are known; the shares
of CJK and Latin letters counted by hand; a vocabulary written by the test, so the share of
``[UNK]`` units is known exactly.
"""
import json
import os
import re
import subprocess
import sys

import pytest

from crf_lr.utils.console import NATIVE_LOG_LINE
from crf_lr.data.formats import detect_format, read_corpus
from crf_lr.data.pieces import UnitEncoder
from crf_lr.data.splits import load_splits, repair_line
from crf_lr.data.vocabulary import (check_vocabulary, choose_encoder, script_shares,
                                    unknown_warning, unspaced_warning)
from helpers.paths import REPO

ROOT = str(REPO)
SPECIAL = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']


def write(folder, name, text):
    path = os.path.join(str(folder), name)
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)
    return path


def vocabulary(folder, tokens):
    return write(folder, 'vocab.txt', '\n'.join(SPECIAL + sorted(tokens)) + '\n')


# A Weibo-NER-like file: each character with its position in its word, dotted types, a tab.
MARKED = ('李0\tB-PER.NAM\n明1\tI-PER.NAM\n在0\tO\n北0\tB-GPE.NAM\n京1\tI-GPE.NAM\n'
          '工0\tO\n作1\tO\n\n'
          '王0\tB-PER.NOM\n老1\tI-PER.NOM\n师2\tI-PER.NOM\n说0\tO\n20\tO\n\n')


# ---------------------------------------------------------------------------------------------
# Word-position marks

def test_position_marked_characters_are_read_alone_and_the_detection_says_so(tmp_path):
    path = write(tmp_path, 'train.txt', MARKED)
    found, why = detect_format(path, reason=True)
    assert found == 'char-bio'
    assert "word-position number" in why and "'李0' read as '李'" in why and 'conll' not in why
    data = read_corpus(path)
    assert [e.text for e in data] == ['李明在北京工作', '王老师说2']
    assert data[0].spans == [(0, 2, 'PER.NAM'), (3, 5, 'GPE.NAM')]
    assert data[1].spans == [(0, 3, 'PER.NOM')]
    assert data.types == ('GPE.NAM', 'PER.NAM', 'PER.NOM')
    assert [e.text for e in read_corpus(path, format='char-bio')] == ['李明在北京工作',
                                                                      '王老师说2']
    kept = read_corpus(path, format='conll')                   # the user keeps the tokens
    assert kept[0].tokens[:2] == ['李0', '明1'] and kept.units == 'words'


@pytest.mark.parametrize('content', [
    'Peter0 B-PER\nruns1 O\n',                       # Latin: not marks but words
    '李0\tO\n明\tO\n',                                # not every token marked
])
def test_tokens_that_are_not_all_marked_characters_stay_words(tmp_path, content):
    path = write(tmp_path, 'train.txt', content)
    assert detect_format(path) == 'conll'


# ---------------------------------------------------------------------------------------------
# Blank is blank: whitespace and byte-order marks

@pytest.mark.parametrize('name, content, texts', [
    ('conll.txt', 'EU B-ORG\nrejects O\n\n\ufeff\n', ['EU rejects']),  # a BOM-only last line
    ('conll2.txt', 'EU B-ORG\n \ufeff \t\nPeter B-PER\n', ['EU', 'Peter']),      # BOM + whitespace
    # concatenated
    ('chars.txt', '张\tB-PER\n\ufeff\n\ufeff李\tB-PER\n四\tI-PER\n', ['张', '李四']),
    ('lines.jsonl',
     '{"text": "北京", "label": {}}\n\ufeff\n\ufeff{"text": "上海", "label": {}}\n',
     ['北京', '上海']),
    ('seg.txt', '我们  爱  北京\n\ufeff  \n', ['我们爱北京']),
])
def test_a_line_of_whitespace_and_byte_order_marks_is_blank_in_every_format(tmp_path, name, content,
                                                                            texts):
    path = write(tmp_path, name, content)
    assert [e.text for e in read_corpus(path)] == texts


# ---------------------------------------------------------------------------------------------
# Repair by default, refusal on request

MESSY_BMES = ('张\tB-PER\n小\tM-PER\n在\tO\n京\tM-LOC\n城\tE-LOC\n\n'
              '李\tB-PER\n四\tE-PER\n\n王\tB-ORG\n五\tM-ORG\n')


def test_messy_tags_are_repaired_by_default_counted_and_placed(tmp_path):
    path = write(tmp_path, 'train.txt', MESSY_BMES)
    data = load_splits(train_file=path, holdout=1)
    places = [f'{path}:{n}' for n in (2, 4, 11)]
    assert data.repaired_at == places
    assert repair_line(places) in data.describe().splitlines()
    assert repair_line(places) == ('repaired 3 tags that broke their scheme '
                                   f'({", ".join(places)}); --strict refuses them')
    assert repair_line(places + ['x:1'], shown=3).endswith(', …); --strict refuses them')
    with pytest.raises(ValueError, match=re.escape(f'{path}:3: the entity opened by ') +
                       '.*drop --strict'):
        load_splits(train_file=path, holdout=1, repair=False)


# ---------------------------------------------------------------------------------------------
# The encoder follows the text's script

def test_script_shares_count_letters_only():
    assert script_shares(['中文abc，123', ['ab', '。']]) == (2 / 7, 5 / 7)


@pytest.mark.parametrize('sequences, name, reason', [
    (['李明在北京工作。', '王老师说2'], 'albert-tiny-zh',
     '100% of the letters are CJK'),
    ([['EU', 'rejects', 'German', 'call']], 'minilm-en', '100% of the letters are Latin'),
    ([['李0', '明1']], 'albert-tiny-zh', '100% of the letters are CJK'),     # words of CJK text
    (['Москва'], 'minilm-en', '0% of the letters are CJK and 0% Latin'),
])
def test_the_encoder_is_chosen_by_the_script_of_the_text(sequences, name, reason):
    assert choose_encoder(sequences) == (name, reason)


# ---------------------------------------------------------------------------------------------
# The unknown-piece guard

def test_the_guard_names_the_share_three_units_and_a_way_on(tmp_path):
    latin = UnitEncoder(vocabulary(tmp_path, list('abcdefghij') + ['李']), 'chars')
    texts = ['李明明明在在在北北京', 'abc']  # 9 of 13 units unknown: 明 x3, 在 x3, 北 x2, 京
    with pytest.raises(ValueError) as error:
        check_vocabulary(latin, texts, 'my-encoder')
    message = str(error.value)
    assert '\n' not in message
    assert message.startswith('69.2% of the training units are unknown to the vocabulary of '
                              "my-encoder ([UNK]), e.g. '明', '在', '北': ")
    assert 'try --encoder albert-tiny-zh (0.0% unknown)' in message    # the packaged Chinese one
    assert message.endswith('or pass --allow-unknown to train anyway')
    assert check_vocabulary(latin, texts, 'my-encoder', allow=True).endswith(
        '(--allow-unknown: training anyway)')
    assert check_vocabulary(latin, ['abc李'], 'my-encoder') == (
        '0.0% of the training units are unknown to the vocabulary of my-encoder ([UNK])')
    assert unknown_warning(latin, ['abc']) is None
    assert unknown_warning(latin, texts).startswith("warning: 69.2% of the input's units")
    words = UnitEncoder(vocabulary(tmp_path, ['abc']), 'words')      # an unspaced line: one word
    assert "e.g. 'zzzzzzzzzzzzzzzzzzzz…': " in unknown_warning(words, [['z' * 300]])


def test_a_word_model_warns_of_cjk_text_without_spaces(tmp_path):
    """Each unspaced run is one word to it (it tagged a whole line as one entity, silently);
    segmented Chinese, English and character models are left alone."""
    vocab = vocabulary(tmp_path, list('中共央总书记江泽民在北京会见了') + ['peter', 'runs'])
    words, chars = UnitEncoder(vocab, 'words'), UnitEncoder(vocab, 'chars')
    unspaced = ['中共中央总书记江泽民在北京会见了联合国秘书长安南。', '江泽民在北京会见了安南']
    warning = unspaced_warning(words, unspaced)
    assert warning.startswith("warning: most of the input is CJK text without spaces, which a "
                              "word model reads as one word per run (e.g. '中共中央总书记江泽民在北', "  # noqa: E501 (CJK: ruff counts 2 columns each)
                              "2 of 2 words): its tags there mean little; space the words as "
                              "its training file did, or predict with a model trained on a "
                              "character file (one character and its tag a line)"
                              ) and '\n' not in warning
    assert unspaced_warning(words, ['中共中央 总书记 江泽民 在 北京 会见 了 安南']) is None
    assert unspaced_warning(words, ['Peter runs in London.', '北京']) is None
    assert unspaced_warning(chars, unspaced) is None


def test_a_chinese_file_with_an_english_encoder_stops_before_training(tmp_path):
    """The script, in-process, as a user would call it with an English encoder forced."""
    from helpers.tiny_models import load_script
    train = write(tmp_path, 'train.txt', MARKED)
    english = vocabulary(tmp_path, ['peter', 'runs', 'in', 'london'])
    with pytest.raises(SystemExit, match=r"error: 100\.0% of the training units are unknown .*"
                                         r"try --encoder albert-tiny-zh"):
        load_script('task_ner').main(['--train-file', train, '--encoder', 'random:1:16', '--vocab',
                                      english, '--output', str(tmp_path / 'run')])
    log = tmp_path / 'run' / 'log.jsonl'
    assert not log.exists() or log.read_text() == ''                    # no epoch trained


def test_a_maxlen_beyond_the_encoders_positions_stops_before_training(tmp_path):
    """--maxlen 600 on an encoder of 512 positions: one line naming both, before any epoch (it
    stopped at the first long window deep in TensorFlow, or trained on while none came)."""
    from helpers.tiny_models import load_script
    train = write(tmp_path, 'train.txt', MARKED)
    with pytest.raises(SystemExit, match=r"^error: --maxlen 600 is longer than the 512 positions "
                                         r"random:1:16 has learned .*use --maxlen 512 or less$"):
        load_script('task_ner').main(['--train-file', train, '--encoder', 'random:1:16',
                                      '--maxlen', '600', '--output', str(tmp_path / 'run')])
    log = tmp_path / 'run' / 'log.jsonl'
    assert not log.exists() or log.read_text() == ''


@pytest.mark.parametrize('script', ['task_ner', 'task_cws_crf'])
def test_a_bad_file_is_the_first_line_the_script_says(tmp_path, capsys, script):
    """A training file with a line of three columns: the error names its path and line, and no
    line about the run (the strategy came first) is printed before it."""
    from helpers.tiny_models import load_script
    train = write(tmp_path, 'train.txt', 'Boston B-LOC\nis O\nbig O extra\n\n')
    with pytest.raises(SystemExit, match=re.escape(f'{train}:3:')):
        load_script(script).main(['--train-file', train, '--format', 'conll',
                                  '--output', str(tmp_path / 'run')])
    assert capsys.readouterr().out == ''


@pytest.mark.parametrize('head', ['crf', 'efficient_global_pointer'])
def test_a_training_file_of_o_tags_only_stops_in_one_line(tmp_path, capsys, head):
    """Nothing to learn: one line before a model is built (a 112-line traceback from the CRF's
    loss, or a head of 0 types, before)."""
    from helpers.tiny_models import load_script
    train = write(tmp_path, 'train.txt', '今 O\n天 O\n\n好 O\n\n' * 5)
    with pytest.raises(SystemExit, match='no entity in the training file'):
        load_script('task_ner').main(['--train-file', train, '--head', head,
                                      '--output', str(tmp_path / 'run')])
    assert capsys.readouterr().out == '' and not (tmp_path / 'run').exists()


# ---------------------------------------------------------------------------------------------
# Quiet by default

def test_the_command_line_console_holds_no_tensorflow_line_and_no_progress_bar(tmp_path):
    """The README's command, run as a user runs it, output to files: every line ours."""
    files = [arg for role in ('train', 'dev', 'test')
             for arg in (f'--{role}-file', write(tmp_path, f'{role}.txt', MARKED))]
    vocab = vocabulary(tmp_path, set(re.sub(r'[\x00-\x7f]', '', MARKED)) | {'2'})
    out, err = open(tmp_path / 'out.txt', 'w+'), open(tmp_path / 'err.txt', 'w+')
    done = subprocess.run([sys.executable, os.path.join(ROOT, 'examples', 'task_ner.py'), *files,
                           '--encoder', 'random:1:16', '--vocab', vocab, '--epochs', '2',
                           '--maxlen', '16', '--output', str(tmp_path / 'run')],
                          stdout=out, stderr=err, env=dict(os.environ, PYTHONPATH=ROOT),
                          timeout=300)
    out.seek(0), err.seek(0)
    stdout, stderr = out.read(), err.read()
    assert done.returncode == 0, stderr
    assert stderr == ''
    assert '\r' not in stdout and 'oneDNN' not in stdout and 'absl' not in stdout
    assert "one character with its word-position number and its tag a line ('李0' read as '李'" \
        in stdout
    assert [line[:8] for line in stdout.splitlines() if line.startswith('epoch ')] == \
        ['epoch 1:', 'epoch 2:']                                  # one line per epoch
    # the default precision is auto; the console and results.json name what it became here
    from crf_lr.model.precision import native_bf16
    used = 'mixed_bfloat16' if native_bf16() else 'float32'
    assert f'precision: auto -> {used} (' in stdout
    results = json.loads((tmp_path / 'run' / 'results.json').read_text())
    assert results['config']['precision'] == 'auto' and results['precision_used'] == used


@pytest.mark.parametrize('script',
                         sorted(name for name in os.listdir(os.path.join(ROOT, 'examples'))
                                           if name.endswith('.py')))
def test_every_example_answers_help_with_its_usage_only(script):
    """``--help`` answers before TensorFlow loads: the usage, with --verbose, and nothing else."""
    done = subprocess.run([sys.executable, os.path.join(ROOT, 'examples', script), '--help'],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT),
                          timeout=120)
    assert done.returncode == 0 and done.stderr == '', done.stderr
    assert done.stdout.startswith('usage: ') and '--verbose' in done.stdout


@pytest.mark.parametrize('command, message', [
    (['examples/task_ner.py', '--train-file', 'my/trian.txt'],
     'task_ner.py: error: --train-file my/trian.txt: no such file'),
    (['examples/task_cws_crf.py', '--epocs', '3'],
     'task_cws_crf.py: error: unrecognized arguments: --epocs 3 (did you mean --epochs?)'),
    (['examples/task_ner.py', '--epoch', '3', '--zzz'],       # a prefix is not taken for a flag
     'task_ner.py: error: unrecognized arguments: --epoch 3 --zzz (did you mean --epochs?)'),
    (['-m', 'crf_lr.serve', 'runs/none', '--batch-wait=5'],
     'python -m crf_lr.serve: error: unrecognized arguments: --batch-wait=5 '
     '(did you mean --batch-wait-ms?)'),
    (['-m', 'crf_lr.predict', 'runs/none', 'x.txt', '--min-confidence', '2'],
     'python -m crf_lr.predict: error: --min-confidence must lie in [0, 1], got 2.0'),
    (['-m', 'crf_lr.serve', 'runs/none', '--port', 'http'],
     "python -m crf_lr.serve: error: argument --port: invalid int value: 'http'"),
])
def test_a_flag_error_is_one_line_without_the_usage(command, message):
    """A misspelt file or flag: one line on stderr saying what is wrong, where argparse printed
    the whole usage first (22 lines for task_ner.py, a newcomer's report)."""
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    assert done.returncode == 2
    assert done.stderr == f'{message}\n'


def test_the_native_log_filter_keeps_every_other_line(tmp_path):
    """Lines written to file descriptor 2 from outside Python: TensorFlow's go, the rest stays."""
    code = ('import os, sys; from crf_lr.utils.console import filter_native_log; '
            'filter_native_log(); print("python line", file=sys.stderr); '
            'os.write(2, b"I0000 00:00:1795619637.205835    7212 port.cc:153] oneDNN on\\n'
            'WARNING: All log messages before absl::InitializeLog() is called are written to '
            'STDERR\\nE0000 00:00:1795619643.581915    7212 util.cc:131] oneDNN DT_BOOL\\n'
            '2026-11-25 15:22:01.123456: I tensorflow/core/x.cc:1] old style\\n'
            'F0000 00:00:1.0    7 x.cc:1] fatal stays\\nnative line\\n")')
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stderr.splitlines()) == sorted(
        ['python line', 'F0000 00:00:1.0    7 x.cc:1] fatal stays', 'native line'])
    assert not NATIVE_LOG_LINE.match(b'native line')
