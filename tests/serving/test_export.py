"""``python -m crf_lr.export``: the SavedModel runs in a fresh process that never imports crf_lr or
bert4keras (as TF Serving does) and decodes exactly as :class:`~crf_lr.serving.tagger.Tagger`.

Oracles: Tagger's own scores, tags and spans on the same texts (random tiny models, so many
overlapping spans and non-trivial transitions), and the closed-form path score (emissions plus
constrained transitions, start and end summed along Tagger's path) recomputed in NumPy.
"""
import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest

from helpers.paths import REPO
from helpers.tiny_models import load_script, save_random_tagger

ROOT = str(REPO)
MAXLEN = 16
TEXTS = ['张三去上海工作', '我们喜欢北京的天气。', '', '今天很好', '李四王五赵六去北京上海工作']
HEADS = {'crf': ('crf', ['LOC', 'PER'], 'BIOES'),
         'softmax': ('softmax', ['LOC', 'PER'], 'BIO'),
         'pointer_flat': ('global_pointer', ['LOC', 'PER', 'ORG'], 'BIO'),
         'pointer_nested': ('efficient_global_pointer', ['LOC', 'PER'], 'BIO'),
         'segmenter': ('crf', (), 'SEG')}

# Run in a fresh interpreter: load every export, run it, and run examples/serving_client.py on
# the texts; prove crf_lr and bert4keras never loaded.
FRESH = """
import json, sys, numpy as np, tensorflow as tf
sys.path.insert(0, sys.argv[3])
from serving_client import Client
inputs = np.load(sys.argv[1])
outputs, client = {}, {}
for name in sys.argv[4:-1]:
    served = tf.saved_model.load(sys.argv[2] + '/' + name).signatures['serving_default']
    result = served(token_ids=tf.constant(inputs['token_ids']),
                    segment_ids=tf.constant(inputs['segment_ids']))
    outputs.update({name + '/' + key: value.numpy() for key, value in result.items()})
    client[name] = Client(sys.argv[2] + '/' + name).predict(json.loads(sys.argv[-1]))
leaked = [m for m in sys.modules if m.split('.')[0] in ('crf_lr', 'bert4keras')]
assert not leaked, leaked
np.savez(sys.argv[1].replace('inputs', 'outputs'), **outputs)
with open(sys.argv[1].replace('inputs.npz', 'client.json'), 'w') as f:
    json.dump(client, f)
"""


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
    """Tiny random models of four heads, saved, exported, and run in a fresh process."""
    from crf_lr.compat import keras
    from crf_lr.serving.export import main
    from crf_lr.serving.tagger import Tagger
    root = tmp_path_factory.mktemp('export')
    keras.utils.set_random_seed(2)
    taggers = {}
    for name, (head_name, types, scheme) in HEADS.items():
        model_dir = save_random_tagger(str(root / 'models' / name), head_name, types, scheme,
                                       MAXLEN, crf_scale=2, flat=name != 'pointer_nested')
        main([model_dir, str(root / 'exported' / name)])
        taggers[name] = Tagger.load(model_dir)
    encoder = next(iter(taggers.values())).encoder
    ids = [encoder.encode(text)[0] for text in TEXTS]
    token_ids = np.zeros((len(ids), max(map(len, ids))), np.int32)
    for row, sequence in enumerate(ids):
        token_ids[row, :len(sequence)] = sequence
    inputs = root / 'inputs.npz'
    np.savez(inputs, token_ids=token_ids, segment_ids=np.zeros_like(token_ids))
    env = dict(os.environ, PYTHONPATH='')               # nothing of ours on the path
    subprocess.run([sys.executable, '-c', FRESH, str(inputs), str(root / 'exported'),
                    os.path.join(ROOT, 'examples'), *HEADS, json.dumps(TEXTS)],
                   check=True, env=env, cwd=str(root))
    outputs = dict(np.load(root / 'outputs.npz'))
    client = json.loads((root / 'client.json').read_text())
    return root, taggers, token_ids, outputs, client


def test_files_beside_the_savedmodel(exported):
    """... in a folder whose mode follows the umask (a TF Serving user may read it), with no
    scratch folder left beside it."""
    root, taggers = exported[:2]
    umask = os.umask(0)
    os.umask(umask)
    assert not [name for name in os.listdir(root / 'exported') if name.startswith('.')]
    for name in HEADS:
        folder = root / 'exported' / name
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o777 & ~umask
        assert {'saved_model.pb', 'variables', 'labels.json', 'vocab.txt'} <= set(
            os.listdir(folder))
        assert json.loads((folder / 'labels.json').read_text('utf-8'))['labels'] == \
            taggers[name].head.labels


@pytest.mark.parametrize('name', ['crf', 'softmax'])
def test_tag_heads_decode_as_the_tagger(exported, name):
    from crf_lr.decoding.viterbi import constrained_parameters
    _, taggers, token_ids, outputs, _ = exported
    tagger = taggers[name]
    head, labels = tagger.head, tagger.head.labels
    scores = tagger.scores([token_ids, np.zeros_like(token_ids)])
    np.testing.assert_allclose(outputs[f'{name}/scores'], scores, rtol=1e-5, atol=1e-5)
    if name == 'crf':
        trans, start, end = (None if p is None else p.numpy()
                             for p in head.crf.effective_parameters('float64'))
        emissions = scores.astype(np.float64)
    else:
        trans, start, end = np.zeros((len(labels),) * 2), None, None
        emissions = np.log(np.maximum(scores.astype(np.float64), 1e-30))
    trans, start, end = constrained_parameters(trans, start, end, *head.scheme.allowed(labels))
    predictions = tagger.decode(tagger.run(TEXTS))
    for row, (text, prediction) in enumerate(zip(TEXTS, predictions)):
        label_ids = outputs[f'{name}/label_ids'][row]
        assert (label_ids[len(text):] == -1).all()
        path = [labels.index(tag) for tag in prediction.tags]      # one piece per character here
        assert label_ids[:len(text)].tolist() == path
        expected = (emissions[row, np.arange(len(path)), path].sum()
                    + sum(trans[a, b] for a, b in zip(path, path[1:]))
                    + (start[path[0]] + end[path[-1]] if path else 0))
        assert outputs[f'{name}/path_score'][row] == pytest.approx(expected, rel=1e-5, abs=1e-3)
    assert any(p.spans for p in predictions)
    if name == 'crf':                  # the forward-backward pass in the graph, as Tagger's
        readings = tagger.decode(tagger.run(TEXTS), marginals=True)
        for row, (text, reading) in enumerate(zip(TEXTS, readings)):
            marginals = outputs['crf/marginals'][row]
            np.testing.assert_allclose(marginals[:len(text)], reading.marginals, atol=1e-5)
            assert (marginals[len(text):] == 0).all()
    else:
        assert f'{name}/marginals' not in outputs


@pytest.mark.parametrize('name', ['pointer_flat', 'pointer_nested'])
def test_span_heads_decode_as_the_tagger(exported, name):
    _, taggers, token_ids, outputs, _ = exported
    tagger = taggers[name]
    types = tagger.head.labels
    scores = outputs[f'{name}/scores']     # the tagger's to float32 rounding (its layer norms
    np.testing.assert_allclose(                # are one kernel, the export's TensorFlow's ops)
        scores, tagger.scores([token_ids, np.zeros_like(token_ids)]), rtol=1e-5, atol=1e-5)
    spans, span_scores = outputs[f'{name}/spans'], outputs[f'{name}/span_scores']
    for row, expected in enumerate(tagger.predict(TEXTS)):
        real = spans[row, :, 0] >= 0
        got = [(int(s), int(e), types[t]) for t, s, e in spans[row][real]]
        assert got == expected
        assert (spans[row][~real] == -1).all() and np.isneginf(span_scores[row][~real]).all()
        np.testing.assert_allclose(span_scores[row][real],
                                   [scores[row, t, s, e - 1] for t, s, e in spans[row][real]])
    hits = sum(len(window.output) for windows in tagger.run(TEXTS) for window in windows)
    kept = sum(len(spans_) for spans_ in tagger.predict(TEXTS))
    assert (hits > kept) == (name == 'pointer_flat')      # the flat decoder had overlaps to drop


@pytest.mark.parametrize('name', list(HEADS))
def test_the_example_client_gives_the_entities_of_predict_lines(exported, name):
    """examples/serving_client.py (no crf_lr): text -> ids -> SavedModel -> entities or words."""
    from crf_lr.serving.predict import predict_lines
    taggers, client = exported[1], exported[4]
    expected = [[{k: v for k, v in entity.items() if k != 'confidence'} if isinstance(entity, dict)
                 else entity for entity in line] for line in predict_lines(taggers[name], TEXTS)]
    assert client[name] == expected         # the confidences are crf_lr's (Tagger, the server)
    assert any(client[name])


def test_bad_arguments_are_one_line_errors(exported, tmp_path, capsys):
    from crf_lr.serving.export import main
    root = exported[0]
    for argv, message in (([str(tmp_path), str(tmp_path / 'out')], 'missing model.h5'),
                          ([str(root / 'models' / 'crf' / 'model'), str(root / 'exported' / 'crf')],
                           'exists: choose another folder or pass --overwrite')):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize('overwrite', [[], ['--overwrite']])
def test_an_export_onto_a_file_names_the_file(exported, tmp_path, capsys, overwrite):
    """With --overwrite it named the scratch folder (``[Errno 20] Not a directory:
    '.afile.partial-…'``); without, it asked for --overwrite, which could not help."""
    from crf_lr.serving.export import main
    target = tmp_path / 'afile'
    target.write_text('mine')
    with pytest.raises(SystemExit) as exit_info:
        main([str(exported[0] / 'models' / 'crf' / 'model'), str(target), *overwrite])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2 and error.endswith(
        f'error: {target} is a file, not a folder: remove it or choose another path')
    assert target.read_text() == 'mine' and os.listdir(tmp_path) == ['afile']


def test_an_export_killed_between_its_renames_is_restored_by_the_next_one(exported, tmp_path,
                                                                         capsys):
    """The version folder set aside as ``.1.previous`` and the new one never renamed in: the
    next export puts it back, says so, and then finds it there (no --overwrite: refused);
    a served model folder left so is put back when the server starts (its first check)."""
    import shutil
    from crf_lr.serving.export import main
    from crf_lr.serving.model_folder import check_model_folder
    root = exported[0]
    version, previous = tmp_path / 'ner' / '1', tmp_path / 'ner' / '.1.previous'
    shutil.copytree(root / 'exported' / 'crf', previous)
    with pytest.raises(SystemExit) as exit_info:
        main([str(root / 'models' / 'crf' / 'model'), str(version)])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == (f'restored {version} from {previous}, where a kill between the two renames '
                      f'of its replacement had left it')
    assert exit_info.value.code == 2 and err[-1].endswith(f'{version} exists: choose another '
                                                          'folder or pass --overwrite')
    assert sorted(os.listdir(version)) == sorted(os.listdir(root / 'exported' / 'crf'))
    assert not previous.exists()
    model, set_aside = tmp_path / 'run' / 'model', tmp_path / 'run' / '.model.previous'
    shutil.copytree(root / 'models' / 'crf' / 'model', set_aside)
    assert check_model_folder(str(model))[0] == str(model / 'model.h5')
    assert capsys.readouterr().err == (f'restored {model} from {set_aside}, where a kill between '
                                       'the two renames of its replacement had left it\n')


def test_a_head_trained_on_first_pieces_is_refused_in_one_line(tmp_path, capsys):
    """Its scores past a word's first piece were never trained: decoding every piece (all that a
    served graph can do) would give other tags than the Tagger's."""
    from crf_lr.serving.export import main
    model_dir = save_random_tagger(str(tmp_path), 'crf', ['LOC', 'PER'], 'BIO', maxlen=16,
                                   units='words', label_pieces='first')
    with pytest.raises(SystemExit) as exit_info:
        main([model_dir, str(tmp_path / 'exported')])
    assert exit_info.value.code == 2
    assert 'first pieces only (--label-pieces first)' in capsys.readouterr().err
    assert not (tmp_path / 'exported').exists()


# Word models: 'runs' is two WordPieces (run ##s), 'Peter' is read lower-cased, '.' split off.
WORD_TEXTS = ['Peter runs in London.', 'EU rejects German call to boycott British lamb.', '']
WORD_HEADS = {'crf': ('crf', ['LOC', 'PER'], 'BIOES'),
              'pointer_flat': ('global_pointer', ['LOC', 'PER'], 'BIO')}


@pytest.fixture(scope='module')
def word_exported(exported):
    """Tiny random word models (English WordPieces), saved and exported beside the others."""
    from crf_lr.serving.export import main
    from crf_lr.serving.predict import predict_lines
    from crf_lr.serving.tagger import Tagger
    root, expected = exported[0], {}
    for name, (head_name, types, scheme) in WORD_HEADS.items():
        model_dir = save_random_tagger(str(root / 'models' / f'words_{name}'), head_name, types,
                                       scheme, MAXLEN, crf_scale=2, units='words')
        main([model_dir, str(root / 'exported' / f'words_{name}')])
        expected[name] = [[{k: v for k, v in entity.items() if k != 'confidence'}
                           for entity in line]
                          for line in predict_lines(Tagger.load(model_dir), WORD_TEXTS)]
        assert any(expected[name])
    return root, expected


@pytest.mark.parametrize('name', list(WORD_HEADS))
def test_the_example_client_reads_a_word_model_as_predict_lines(word_exported, name):
    """examples/serving_client.py on a word model: crf_lr's word splitter and WordPieces."""
    Client = load_script('serving_client').Client
    root, expected = word_exported
    assert Client(str(root / 'exported' / f'words_{name}')).predict(WORD_TEXTS) == expected[name]


def test_the_example_client_command_line_is_quiet(word_exported):
    """As a user runs it: one JSON line per text on stdout, no TensorFlow log line on stderr."""
    root, expected = word_exported
    done = subprocess.run([sys.executable, os.path.join(ROOT, 'examples', 'serving_client.py'),
                           str(root / 'exported' / 'words_crf'), *WORD_TEXTS],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT),
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ''
    assert [json.loads(line) for line in done.stdout.splitlines()] == [
        {'text': text, 'result': result} for text, result in zip(WORD_TEXTS, expected['crf'])]
