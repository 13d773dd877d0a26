"""The task scripts end to end on tiny data (a hidden-16 random encoder, a dozen sentences written
in the shared data layout), run in-process through their ``main(argv)``.

Oracles: the test F1 a script reports equals the score recomputed from its saved model with
``crf_lr.evaluation.metrics``, and equals the test score logged at the epoch the development split
selected; a run resumed after epoch 2 gives the same epoch-3 loss as an uninterrupted run; a CRF
subclass that halves the loss logs exactly half the stock CRF's first loss; head parameter counts
equal the closed forms of the GlobalPointer designs; the unit encoder's ids are the vocabulary's
line numbers.
"""
import json
import os
import re

import numpy as np
import pytest

import crf_lr  # noqa: F401  (environment before TensorFlow)
from helpers.paths import REPO
from helpers.tiny_models import WORDS, load_script, write_tiny_encoder

ROOT = str(REPO)


def _sentences(rng, count, length):
    return [[WORDS[i] for i in rng.integers(0, len(WORDS), length)] for _ in range(count)]


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    """A data folder in the shared layout (PFR, PKU gold + word list, CLUENER, CoNLL) and a tiny
    encoder config."""
    root = tmp_path_factory.mktemp('tiny')
    data = root / 'data'
    rng = np.random.default_rng(0)
    for sub in ('pfr1998', 'icwb2', 'cluener2020', 'conll2003'):
        (data / sub).mkdir(parents=True)
    train = _sentences(rng, 16, 9)
    (data / 'pfr1998' / '199801.txt').write_text(
        '\n'.join('  '.join(f'{w}/n' for w in s) for s in train) + '\n', encoding='utf-8')
    (data / 'icwb2' / 'pku_test_gold.utf8').write_text(
        '\n'.join('  '.join(s) for s in _sentences(rng, 5, 12)) + '\n', encoding='utf-8')
    (data / 'icwb2' / 'pku_training_words.utf8').write_text('\n'.join(WORDS[:10]) + '\n',
                                                           encoding='utf-8')
    for split, count in (('train', 12), ('dev', 4)):
        lines = []
        for s in _sentences(rng, count, 6):
            text = ''.join(s)
            labels = {}
            for name, kind in (('张三', 'name'), ('北京', 'address'), ('上海', 'address')):
                start = text.find(name)
                if start >= 0:
                    labels.setdefault(kind, {})[name] = [[start, start + len(name) - 1]]
            lines.append(json.dumps({'text': text, 'label': labels}, ensure_ascii=False))
        (data / 'cluener2020' / f'{split}.json').write_text('\n'.join(lines) + '\n',
                                                            encoding='utf-8')
    conll = ('-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP '
             'I-MISC\ncall NN I-NP O\nto TO B-VP O\nboycott VB I-VP O\nBritish JJ B-NP I-MISC\n'
             'lamb NN I-NP O\n. . O O\n\nPeter NNP B-NP I-PER\nruns VBZ B-VP O\nin IN B-PP O\n'
             'London NNP B-NP I-LOC\n. . O O\n')
    for split in ('train', 'valid', 'test'):
        (data / 'conll2003' / f'{split}.txt').write_text(conll * (4 if split == 'train' else 1),
                                                         encoding='utf-8')
    files = root / 'files'
    files.mkdir()
    for split, count in (('train', 12), ('dev', 4), ('test', 4)):       # a user's char-bio files
        lines = []
        for s in _sentences(rng, count, 5):
            for word in s:
                kind = {'张三': 'PER', '北京': 'LOC', '上海': 'LOC'}.get(word)
                lines += [f'{c}\t{"O" if kind is None else ("B-" if i == 0 else "I-") + kind}'
                          for i, c in enumerate(word)]
            lines.append('')
        (files / f'{split}.txt').write_text('\n'.join(lines) + '\n', encoding='utf-8')
    return dict(data=str(data), config=write_tiny_encoder(str(root / 'encoder')), root=root,
                files=str(files))


def _common(tiny, output, epochs=2):
    return ['--data-dir', tiny['data'], '--encoder', tiny['config'], '--epochs', str(epochs),
            '--batch-size', '4', '--lr', '1e-2', '--maxlen', '16', '--output', str(output)]


def _records(output):
    with open(os.path.join(output, 'log.jsonl'), encoding='utf-8') as f:
        return [json.loads(line) for line in f]


def _user_files(tiny):
    return ['--train-file', os.path.join(tiny['files'], 'train.txt'),
            '--dev-file', os.path.join(tiny['files'], 'dev.txt'),
            '--test-file', os.path.join(tiny['files'], 'test.txt')]


def _user_common(tiny, output, epochs=2):
    return [a for a in _common(tiny, output, epochs) if a not in ('--data-dir', tiny['data'])]


@pytest.fixture(scope='module')
def cws_run(tiny):
    cws = load_script('task_cws_crf')
    output = tiny['root'] / 'cws'
    results = cws.main(_common(tiny, output, epochs=3)
                       + ['--crf-lr-multiplier', '10', '--test-every-epoch'])
    return cws, output, results


def test_cws_script_writes_scores_tables_and_model_and_the_loss_falls(cws_run, tiny):
    from crf_lr.data.benchmarks import load_dataset
    from crf_lr.data.segmentation import read_word_list
    from crf_lr.evaluation.metrics import segmentation_scores
    from crf_lr.serving.tagger import Tagger
    _, output, results = cws_run
    records = _records(output)
    assert [r['epoch'] for r in records] == [1, 2, 3]
    assert records[1]['loss'] < records[0]['loss']
    assert all(len(r['step_losses']) == r['steps'] > 0 for r in records)
    for name in ('results.json', 'run.json', 'transitions_epoch1.txt', 'transitions_epoch2.txt',
                 'transitions_epoch2.png', 'model/model.h5', 'model/labels.json',
                 'model/vocab.txt'):
        assert os.path.isfile(output / name), name
    assert 'from\\to' in (output / 'transitions_epoch2.txt').read_text()
    assert np.shape(records[-1]['transitions']) == (4, 4)
    assert 0 <= records[-1]['sane_tags'] <= 4 and records[-1]['transition_change'] > 0
    assert results['head_parameters'] == 16 * 4 + 4 + 16
    # the saved (selected) model scores on the PKU gold exactly what results.json says
    gold = load_dataset('pku', 'test', tiny['data']).examples
    words = read_word_list(os.path.join(tiny['data'], 'icwb2', 'pku_training_words.utf8'))
    spans = Tagger.load(str(output / 'model')).predict([e.text for e in gold])
    predicted = [[e.text[s:t] for s, t, _ in sent] for e, sent in zip(gold, spans)]
    assert segmentation_scores([e.words for e in gold], predicted, words)['f1'] == pytest.approx(
        results['test']['f1'], abs=1e-5)


def test_the_epoch_is_selected_on_dev_and_test_is_scored_with_it(cws_run):
    """The first best dev epoch is the one saved; its test score (logged that epoch, for the
    record) is what the reloaded model scores once at the end."""
    _, output, results = cws_run
    records = _records(output)
    dev = [r['dev_f1'] for r in records]
    selected = dev.index(max(dev)) + 1
    assert results['best_epoch'] == selected and results['metric'] == 'dev_f1'
    assert results['test']['f1'] == pytest.approx(records[selected - 1]['test_f1'], abs=1e-9)
    assert results['splits']['dev'].startswith('a seeded hold-out of pku/train')


def test_resumed_run_equals_an_uninterrupted_one(cws_run, tiny):
    """Stop after epoch 2, resume to epoch 3: the same losses as 3 epochs in one go (softmax head,
    the cheapest to build; resuming does not depend on the head)."""
    cws = cws_run[0]
    args = ['--head', 'softmax']
    output, straight = tiny['root'] / 'resumed', tiny['root'] / 'straight'
    cws.main(_common(tiny, output, epochs=2) + args)
    before = _records(output)
    (output / 'checkpoint' / 'last_temp').mkdir()               # left by an interrupted write
    cws.main(_common(tiny, output, epochs=3) + args)
    after = _records(output)
    assert after[:2] == before and after[2]['epoch'] == 3
    assert not (output / 'checkpoint' / 'last_temp').exists()
    cws.main(_common(tiny, straight, epochs=3) + args)
    assert [r['loss'] for r in after] == pytest.approx([r['loss'] for r in _records(straight)],
                                                       rel=1e-4)
    with pytest.raises(SystemExit, match='other arguments'):
        cws.main(_common(tiny, output, epochs=3) + ['--head', 'crf'])


def test_ner_span_head_on_nested_capable_data(tiny):
    ner = load_script('task_ner')
    output = tiny['root'] / 'egp'
    results = ner.main(_common(tiny, output) + ['--dataset', 'cluener',
                                                '--head', 'efficient_global_pointer',
                                                '--head-size', '8'])
    records = _records(output)
    assert records[1]['loss'] < records[0]['loss']
    per_type = records[-1]['dev_per_type']
    assert len(per_type) == 10 and per_type['address']['support'] > 0
    assert 0 <= records[-1]['dev_relaxed_f1'] <= 1 and 'dev_f1_unconstrained' not in records[-1]
    assert os.path.isfile(output / 'confusion_dev_epoch2.txt')
    assert results['test'] is None and 'no labelled test split' in results['splits']['test']
    assert set(results['calibration']) == {'temperature', 'fitted', 'choice', 'bound', 'dev_right',
                                           'dev'}
    assert os.path.isfile(output / 'reliability_dev.png')
    heads, d, hidden = 10, 8, 16                     # CLUENER types, head size, hidden
    assert results['head_parameters'] == 2 * d * (hidden + 1) + heads * (4 * d + 2)


def test_ner_softmax_on_word_pieces_scores_like_its_saved_model(tiny):
    from crf_lr.data.benchmarks import load_dataset
    from crf_lr.evaluation.metrics import span_scores
    from crf_lr.serving.tagger import Tagger
    ner = load_script('task_ner')
    output = tiny['root'] / 'conll'
    results = ner.main(_common(tiny, output) + ['--dataset', 'conll2003', '--head', 'softmax'])
    records = _records(output)
    assert records[1]['loss'] < records[0]['loss']
    assert 'dev_f1_unconstrained' in records[-1]
    assert records[-1]['dev_predict_sentences_per_second'] > 0
    calibration = results['calibration']               # fitted on dev, saved with the model
    assert set(calibration) == {'temperature', 'fitted', 'choice', 'bound', 'dev_right', 'dev',
                                'test'}
    assert calibration['dev']['after']['ece'] <= calibration['dev']['before']['ece']
    assert all(0 <= calibration[s][w]['ece'] <= 1 for s in ('dev', 'test')
               for w in ('before', 'after'))
    assert os.path.isfile(output / 'reliability_test.png')
    assert json.load(open(output / 'results.json'))['calibration'] == calibration
    assert Tagger.load(str(output / 'model')).head.temperature == calibration['temperature']
    test = load_dataset('conll2003', 'test', tiny['data']).examples
    predicted = Tagger.load(str(output / 'model')).predict([e.tokens for e in test])
    assert span_scores([e.spans for e in test], predicted)['f1'] == pytest.approx(
        results['test']['f1'], abs=1e-5)


def test_ner_crf_on_first_pieces_only_trains_and_scores_like_its_saved_model(tiny):
    """--label-pieces first on WordPieces ('runs' is 'run ##s'): training targets leave the
    other pieces out, the loss falls, the saved model keeps the setting and scores on test what
    the script reported; a head that cannot take the setting is refused."""
    import json as json_module
    from crf_lr.data.benchmarks import load_dataset
    from crf_lr.evaluation.metrics import span_scores
    from crf_lr.serving.tagger import Tagger
    ner = load_script('task_ner')
    output = tiny['root'] / 'conll-first'
    results = ner.main(_common(tiny, output)
                       + ['--dataset', 'conll2003', '--label-pieces', 'first'])
    records = _records(output)
    assert records[1]['loss'] < records[0]['loss']
    with open(output / 'model' / 'labels.json', encoding='utf-8') as f:
        assert json_module.load(f)['label_pieces'] == 'first'
    tagger = Tagger.load(str(output / 'model'))
    assert tagger.head.label_pieces == 'first'
    test = load_dataset('conll2003', 'test', tiny['data']).examples
    assert span_scores([e.spans for e in test], tagger.predict([e.tokens for e in test]))[
        'f1'] == pytest.approx(results['test']['f1'], abs=1e-5)
    with pytest.raises(SystemExit, match='--label-pieces first needs a head'):
        ner.main(_common(tiny, tiny['root'] / 'refused', epochs=1)
                 + ['--dataset', 'conll2003', '--label-pieces', 'first', '--head', 'softmax'])


def test_a_crf_subclass_that_changes_the_loss_trains_through_the_script(tiny):
    """A user's ConditionalRandomField subclass, registered as a head from outside the package,
    trains through task_ner.py: its first step loss is exactly half the stock CRF's (same seed,
    same weights), and its saved model reloads and predicts."""
    from crf_lr.compat import keras
    from crf_lr.model.crf import ConditionalRandomField
    from crf_lr.model.heads import HEADS, CRFHead, register_head
    from crf_lr.serving.tagger import Tagger

    @keras.utils.register_keras_serializable(package='test')
    class HalfLossCRF(ConditionalRandomField):
        def sparse_loss(self, y_true, y_pred):
            return 0.5 * super().sparse_loss(y_true, y_pred)

    register_head('half_crf', CRFHead, layer_class=HalfLossCRF)
    try:
        ner = load_script('task_ner')
        runs = {}
        for head in ('crf', 'half_crf'):
            output = tiny['root'] / f'user-{head}'
            runs[head] = ner.main(_user_common(tiny, output, epochs=1) + _user_files(tiny)
                                  + ['--head', head])
            runs[head] = (_records(output)[0]['step_losses'][0], output)
        assert runs['half_crf'][0] == pytest.approx(0.5 * runs['crf'][0], rel=1e-4)
        tagger = Tagger.load(str(runs['half_crf'][1] / 'model'))
        assert isinstance(tagger.head.crf, HalfLossCRF)
        assert len(tagger.predict(['张三去北京'])) == 1
    finally:
        HEADS.pop('half_crf')


def test_a_fifth_head_registered_from_outside_runs_end_to_end(tiny):
    """A toy head (Dense logits, crossentropy from logits, argmax decoding) defined here, in one
    class plus one registry line, trains, selects, saves, reloads and predicts."""
    from crf_lr.compat import keras
    from crf_lr.model.heads import HEADS, TagHead, register_head
    from crf_lr.serving.tagger import Tagger

    class LogitsHead(TagHead):
        def build(self, states):
            layer = self._add(keras.layers.Dense(len(self.labels), name='Tag-Scores'))
            self.loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            return layer(states)

        def _transitions(self):
            return (lambda logits: logits), np.zeros((len(self.labels),) * 2), None, None

    register_head('logits', LogitsHead)
    try:
        output = tiny['root'] / 'logits'
        results = load_script('task_ner').main(_user_common(tiny, output) + _user_files(tiny)
                                               + ['--head', 'logits'])
        assert results['head']['head'] == 'logits' and 0 <= results['test']['f1'] <= 1
        tagger = Tagger.load(str(output / 'model'))
        assert isinstance(tagger.head, LogitsHead) and tagger.head.labels == [
            'O', 'B-LOC', 'I-LOC', 'B-PER', 'I-PER']
    finally:
        HEADS.pop('logits')


def test_head_parameter_counts_follow_the_designs(tiny):
    from crf_lr.model.encoders import load_encoder
    from crf_lr.model.heads import make_head, piece_states
    hidden, d = 16, 8
    types = ['A', 'B', 'C']
    counts = {}
    for name in ('global_pointer', 'efficient_global_pointer', 'crf', 'softmax'):
        head = make_head(name, types, head_size=d)
        head.build(piece_states(load_encoder(tiny['config'])[0]))
        counts[name] = head.count_params()
    assert counts['global_pointer'] == 3 * 2 * d * (hidden + 1)
    assert counts['efficient_global_pointer'] == 2 * d * (hidden + 1) + 3 * (4 * d + 2)
    assert counts['crf'] == counts['softmax'] + 7 * 7 == (hidden + 1) * 7 + 49


def test_unit_encoder_ids_are_vocabulary_lines(tiny):
    from crf_lr.data.pieces import UnitEncoder, piece_spans_to_unit_spans, unit_spans_to_piece_spans
    from crf_lr.data.tagging import spread_labels
    vocab_path = os.path.join(os.path.dirname(tiny['config']), 'vocab.txt')
    lines = open(vocab_path, encoding='utf-8').read().split('\n')
    chars = UnitEncoder(vocab_path)
    ids, starts = chars.encode('北１Ａ☃')          # full-width 1 and A are looked up as 1 and a
    assert ids == [2, lines.index('北'), lines.index('1'), lines.index('a'), 1, 3]
    assert starts == [0, 1, 2, 3, 4]
    words = UnitEncoder(vocab_path, 'words')
    ids, starts = words.encode(['Peter', 'runs'])
    assert ids == [2, lines.index('peter'), lines.index('run'), lines.index('##s'), 3]
    assert starts == [0, 1, 3]
    assert spread_labels(['B-PER', 'B-ORG'], np.diff(starts)) == ['B-PER', 'B-ORG', 'I-ORG']
    assert unit_spans_to_piece_spans([(1, 2, 'X')], starts) == [(1, 3, 'X')]
    assert piece_spans_to_unit_spans([(1, 3, 'X'), (1, 2, 'Y'), (2, 3, 'Z')],
                                     starts) == [(1, 2, 'X')]


def test_bad_arguments_are_reported(tiny, tmp_path, capsys):
    cws, ner = load_script('task_cws_crf'), load_script('task_ner')
    for argv, message in ((['--epochs', '0'], '--epochs must be >= 1'),
                          (['--train-file', str(tmp_path / 'none.txt')], 'no such file')):
        with pytest.raises(SystemExit) as exit_info:
            cws.parse_args(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(ValueError, match='random:LAYERS:HIDDEN'):
        cws.main(_common(tiny, tmp_path / 'x') + ['--encoder', 'random:one:16'])
    with pytest.raises(SystemExit, match='^error: .*not a folder'):         # one line, no traceback
        cws.main(['--data-dir', str(tmp_path / 'missing'), '--output', str(tmp_path / 'y')])
    with pytest.raises(ValueError, match="unknown head 'crff'.*register_head"):
        ner.main(_user_common(tiny, tmp_path / 'z') + _user_files(tiny) + ['--head', 'crff'])


@pytest.mark.parametrize('script', ['task_ner', 'task_cws_crf'])
def test_a_folder_of_another_trained_run_is_refused_before_the_encoder_loads(
        tiny, tmp_path, monkeypatch, script):
    """Rerunning into the Start-here example's folder with other arguments was refused only
    after the encoder had loaded (6 s on MiniLM): refused once the data is read, and the
    folder's run left as it was."""
    from crf_lr.training import task_model
    output = tmp_path / 'run'
    (output / 'model').mkdir(parents=True)
    (output / 'model' / 'model.h5').write_text('', encoding='utf-8')
    (output / 'run.json').write_text(json.dumps(dict(config=dict(lr=0.5))), encoding='utf-8')

    def built(*args, **kwargs):
        raise AssertionError('the model was built before the refusal')
    monkeypatch.setattr(task_model, 'build_task_model', built)
    with pytest.raises(SystemExit, match=r'holds a trained run .*lr: 0\.5 there, 0\.01 now.*'
                                         r'choose another --output'):
        load_script(script).main(_common(tiny, output) if script == 'task_cws_crf'
                                 else _user_common(tiny, output) + _user_files(tiny))
    assert json.loads((output / 'run.json').read_text(encoding='utf-8')) == dict(
        config=dict(lr=0.5))


def test_a_changed_training_file_is_refused_and_a_new_test_file_scored_without_training(
        tiny, tmp_path, capsys):
    """A rerun resumed on the recorded arguments alone, so a training file edited since was
    'trained' on the old one and its new counts recorded: the files' sizes and sha256 are
    arguments of the run. Another --test-file is not (it selects nothing): a finished run scores
    it, training nothing, as predict's message for a labelled file says."""
    import shutil
    ner, output = load_script('task_ner'), tmp_path / 'run'
    files = tmp_path / 'files'
    shutil.copytree(tiny['files'], files)
    command = _user_common(tiny, output, epochs=1) + [
        '--train-file', str(files / 'train.txt'), '--dev-file', str(files / 'dev.txt')]
    ner.main(command)
    recorded = json.loads((output / 'run.json').read_text(encoding='utf-8'))['config']
    assert re.fullmatch(r'[\d,]+ bytes, sha256 [0-9a-f]{16}', recorded['train_file_content'])
    with open(files / 'train.txt', 'a', encoding='utf-8') as f:
        f.write('\n张 B-PER\n三 I-PER\n')
    with pytest.raises(SystemExit, match=r"other arguments \(train_file_content: '[\d,]+ bytes, "
                                         r"sha256 \w+' there, '[\d,]+ bytes, sha256 \w+' now\)"):
        ner.main(command)
    shutil.copy(os.path.join(tiny['files'], 'train.txt'), files / 'train.txt')
    capsys.readouterr()
    results = ner.main(command + ['--test-file', str(files / 'test.txt')])
    said = capsys.readouterr().out
    assert 'had finished its 1 epochs: nothing to train' in said
    assert 'scored once with the selected model (a rerun: no epoch trained)' in said
    assert results['test']['f1'] >= 0 and len(_records(output)) == 1
    assert json.loads((output / 'run.json').read_text(encoding='utf-8'))['config'][
        'test_file'] == str(files / 'test.txt')
    ner.main(command + ['--test-file', str(files / 'test.txt')])          # the same test
    assert 'scored again with the selected model' in capsys.readouterr().out
    ner.main(command + ['--test-file', str(files / 'dev.txt')])           # another one
    assert 'scored once with the selected model' in capsys.readouterr().out


LONG_NAME = '北京上海张三我们喜欢天气的'                       # 13 characters


@pytest.mark.parametrize('script, sentences, line', [
    ('task_ner', [['张 B-PER', '三 I-PER'], ['去 O'] + [
        f'{c} {"B" if i == 0 else "I"}-ORG' for i, c in enumerate(LONG_NAME)]], 4),
    ('task_cws_crf', [['张三  去  北京'], [f'我们  {LONG_NAME}  很  好']], 3),
])
def test_a_span_longer_than_a_window_stops_the_run_before_training(tiny, tmp_path, capsys,
                                                                   script, sentences, line):
    """An entity (or a word) longer than --maxlen's windows crashed inside the windowing with a
    traceback, leaving run.json and an empty log; the run stops with one line naming the file,
    the line, the span's length and the --maxlen that fits, before any epoch and any file."""
    files = []
    for name, chosen in (('train', sentences), ('dev', sentences[:1])):
        files.append(tmp_path / f'{name}.txt')
        files[-1].write_text('\n\n'.join('\n'.join(lines) for lines in chosen) + '\n',
                             encoding='utf-8')
    output = tmp_path / 'run'
    with pytest.raises(SystemExit) as exit_info:
        load_script(script).main(['--train-file', str(files[0]), '--dev-file', str(files[1]),
                                  '--encoder', tiny['config'], '--epochs', '1', '--maxlen', '10',
                                  '--output', str(output)])
    assert exit_info.value.code == (f"error: {files[0]}:{line}: a span of 13 characters, "
                                    f"'{LONG_NAME}' in the sentence opening at that line, does "
                                    'not fit --maxlen 10 (windows of 8); use --maxlen 15 or more')
    assert 'epoch 1' not in capsys.readouterr().out and not output.exists()


@pytest.mark.parametrize('name', ['crf', 'softmax'])
def test_padding_and_special_tokens_never_reach_the_loss(tiny, name):
    """Labels under [SEP] and padding, and extra padding, leave the loss unchanged."""
    from crf_lr.compat import keras
    from crf_lr.model.encoders import load_encoder
    from crf_lr.model.heads import make_head, piece_states
    keras.utils.set_random_seed(0)
    head = make_head(name, ['X'])                      # 3 labels: O, B-X, I-X
    encoder = load_encoder(tiny['config'])[0]
    model = keras.Model(encoder.inputs, head.build(piece_states(encoder)))
    model.compile('adam', loss=head.loss)
    ids = np.array([[2, 5, 6, 3, 0, 0], [2, 5, 6, 7, 8, 3]])
    labels = np.array([[1, 2, 0, 0, 0], [1, 2, 1, 2, 0]])
    garbage = labels.copy()
    garbage[0, 2:] = 1
    reference = model.evaluate([ids, 0 * ids], labels, verbose=0)
    assert model.evaluate([ids, 0 * ids], garbage, verbose=0) == pytest.approx(reference)
    row = model.evaluate([ids[:1, :4], 0 * ids[:1, :4]], labels[:1, :3], verbose=0)
    assert model.evaluate([ids[:1], 0 * ids[:1]], garbage[:1], verbose=0) == pytest.approx(row)


SAMPLES = [('conll', 'txt', 'task_ner'), ('char-bio', 'txt', 'task_ner'),
           ('char-bmes', 'txt', 'task_ner'), ('char-bioes', 'txt', 'task_ner'),
           ('jsonl', 'jsonl', 'task_ner'), ('segmented', 'txt', 'task_cws_crf')]


@pytest.fixture(scope='module')
def sample_vocab(tmp_path_factory):
    """A vocab.txt holding every character and every lowercased word of the data/ samples."""
    tokens = set()
    for folder, _, _ in SAMPLES:
        for name in os.listdir(os.path.join(ROOT, 'data', folder)):
            with open(os.path.join(ROOT, 'data', folder, name), encoding='utf-8') as f:
                text = f.read()
            tokens |= set(text.lower().split()) | set(text)
    path = tmp_path_factory.mktemp('sample_vocab') / 'vocab.txt'
    special = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
    path.write_text('\n'.join(special + sorted(t for t in tokens if t.strip())) + '\n',
                    encoding='utf-8')
    return str(path)


@pytest.mark.parametrize('folder, ext, script', SAMPLES)
def test_every_sample_format_trains_one_epoch_through_its_script(sample_vocab, tmp_path, folder,
                                                                ext, script):
    """The README's one command on each data/ sample: format detected and said, one epoch, the
    dev split selects, the test file is scored once."""
    files = [arg for role in ('train', 'dev', 'test')
             for arg in (f'--{role}-file', os.path.join(ROOT, 'data', folder, f'{role}.{ext}'))]
    results = load_script(script).main(files + [
        '--encoder', 'random:1:16', '--vocab', sample_vocab, '--epochs', '1', '--batch-size', '8',
        '--maxlen', '32', '--lr', '1e-2', '--output', str(tmp_path / 'run')])
    assert results['best_epoch'] == 1 and 0 <= results['test']['f1'] <= 1
    if script == 'task_ner':
        assert f'format {folder} detected' in results['splits']['train']
        assert results['test_sentences'] == 10 and results['dev_sentences'] == 10


def test_plain_ner_example_learns_in_one_epoch(tmp_path):
    """examples/plain_ner.py, the flat bert4keras-style script, as a user runs it (packaged
    ALBERT-tiny, data/char-bio): one epoch lowers the loss below its first batch's and lifts the
    test F1 above 0.1, which the untrained model (F1 0.0 with --lr 1e-12, measured) never
    reaches."""
    import re
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]),
               TF_CPP_MIN_LOG_LEVEL='2')
    run = subprocess.run([sys.executable, os.path.join(ROOT, 'examples', 'plain_ner.py'),
                          '--epochs', '1'], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    losses = [float(x) for x in re.findall(r'loss: ([\d.]+)', run.stdout)]
    assert losses and losses[-1] < 0.8 * losses[0], losses
    assert re.search(r'valid:  f1: [\d.]+, best f1: [\d.]+', run.stdout)
    test_f1 = float(re.search(r'test:  f1: ([\d.]+)', run.stdout).group(1))
    assert 0.1 < test_f1 <= 1, run.stdout[-2000:]
