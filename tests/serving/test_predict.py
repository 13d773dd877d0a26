"""``python -m crf_lr.predict`` on saved tiny models (random weights: decoding, windowing and output
are what is tested, not accuracy).

Oracles: brute-force enumeration of every label path (CRF best path; softmax constrained to the
BIO scheme), the per-window predictions for the stitched long input, and the input text itself
(words concatenate back to it; every entity's offsets cover its mention).
"""
import itertools
import json
import re

import numpy as np
import pytest

from helpers.tiny_models import WORDS, write_tiny_encoder

MAXLEN = 12


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    """A word-segmentation CRF model and a BIO softmax NER model, saved as the scripts save them."""
    from crf_lr.compat import keras
    from crf_lr.model.encoders import load_encoder
    from crf_lr.model.heads import make_head, piece_states
    from crf_lr.data.pieces import UnitEncoder
    from crf_lr.serving.tagger import Tagger
    root = tmp_path_factory.mktemp('predict')
    config = write_tiny_encoder(str(root / 'encoder'))
    keras.utils.set_random_seed(1)
    folders = {}
    for name, head_name, types, scheme in (('cws', 'crf', (), 'SEG'),
                                           ('ner', 'softmax', ['LOC', 'PER'], 'BIO'),
                                           ('ner_crf', 'crf', ['LOC', 'PER'], 'BIOES')):
        encoder, vocab, _ = load_encoder(config)
        head = make_head(head_name, types, scheme)
        model = keras.Model(encoder.inputs, head.build(piece_states(encoder)))
        if head_name == 'crf':   # make the transitions matter: of the emissions' scale
            size = len(head.labels)
            head.crf.set_weights([np.random.default_rng(0).normal(0, 2, (size, size))])
        if name == 'ner_crf':    # entities likely, but not certain
            dense = model.get_layer('Tag-Scores')
            bias = np.zeros(size, 'float32')
            bias[[head.labels.index(t) for t in ('S-PER', 'B-LOC', 'E-LOC')]] = 3.0
            dense.set_weights([dense.get_weights()[0], bias])
        Tagger(model, UnitEncoder(vocab), head, MAXLEN).save(str(root / name))
        folders[name] = str(root / name)
    return folders


def _run(argv, tmp_path, lines, capsys):
    from crf_lr.serving.predict import main
    path = tmp_path / 'input.txt'
    path.write_text('\n'.join(lines) + '\n', encoding='utf-8')
    capsys.readouterr()
    results = main(argv[:1] + [str(path)] + argv[1:])
    return results, capsys.readouterr().out


def _emissions(tagger, text):
    inputs = [np.array([tagger.encoder.encode(text)[0]]), np.zeros((1, len(text) + 2), 'int32')]
    return np.asarray(tagger.model.predict_on_batch(inputs))[0, :len(text)].astype(np.float64)


def test_crf_segmentation_is_the_brute_force_best_legal_path(saved, tmp_path, capsys):
    from crf_lr.serving.tagger import Tagger
    from crf_lr.data.tagging import allowed_transitions, tags_to_words
    tagger = Tagger.load(saved['cws'])
    text = '我们喜欢北京'
    emissions, trans = _emissions(tagger, text), tagger.head.crf.trans.numpy().astype(np.float64)
    allowed, starts, ends = allowed_transitions(list('sbme'), 'SEG')
    legal = [p for p in itertools.product(range(4), repeat=len(text))
             if starts[p[0]] and ends[p[-1]] and all(allowed[a, b] for a, b in zip(p, p[1:]))]
    best = max(legal, key=lambda p: emissions[np.arange(len(p)), p].sum()
               + sum(trans[a, b] for a, b in zip(p, p[1:])))
    expected = tags_to_words(text, ['sbme'[i] for i in best])
    results, out = _run([saved['cws']], tmp_path, [text], capsys)
    assert results == [expected]
    assert out == '  '.join(expected) + '\n'
    free = max(itertools.product(range(4), repeat=len(text)),
               key=lambda p: emissions[np.arange(len(p)), p].sum()
               + sum(trans[a, b] for a, b in zip(p, p[1:])))
    free_tags, = [p.tags for p in tagger.decode(tagger.run([text]), constrain=False)]
    assert free_tags == ['sbme'[i] for i in free]


def test_long_input_is_windowed_and_stitched(saved, tmp_path, capsys):
    from crf_lr.serving.tagger import Tagger
    from crf_lr.data.windows import split_into_windows
    tagger = Tagger.load(saved['cws'])
    text = '。'.join(''.join(WORDS[i % 6:i % 6 + 3]) for i in range(12))   # ~80 chars, maxlen 12
    windows = split_into_windows(text, MAXLEN - 2)
    assert len(windows) > 4
    expected = [piece[s:e] for _, piece in windows for s, e, _ in tagger.predict([piece])[0]]
    results, out = _run([saved['cws'], '--format', 'json'], tmp_path, [text, '', text[:5]], capsys)
    assert results[0] == expected and ''.join(results[0]) == text
    assert results[1] == [] and ''.join(results[2]) == text[:5]
    assert [json.loads(line)['words'] for line in out.splitlines()] == results


def test_softmax_constrained_decoding_is_the_best_legal_path(saved, tmp_path, capsys):
    from crf_lr.serving.tagger import Tagger
    from crf_lr.data.tagging import allowed_transitions
    tagger = Tagger.load(saved['ner'])
    labels = tagger.head.labels
    text = '张三去上海'
    log_p = np.log(_emissions(tagger, text))
    allowed, starts, _ = allowed_transitions(labels, 'BIO')
    legal = [p for p in itertools.product(range(len(labels)), repeat=len(text))
             if starts[p[0]] and all(allowed[a, b] for a, b in zip(p, p[1:]))]
    best = max(legal, key=lambda p: log_p[np.arange(len(p)), p].sum())
    constrained, = tagger.decode(tagger.run([text]))          # constraints by default
    assert constrained.tags == [labels[i] for i in best]
    free, = tagger.decode(tagger.run([text]), constrain=False)
    assert free.tags == [labels[i] for i in log_p.argmax(-1)]
    results, out = _run([saved['ner']], tmp_path, [text], capsys)
    assert [(e['start'], e['end'], e['type']) for e in results[0]] == constrained.spans
    assert out.endswith('\n\n')
    results, _ = _run([saved['ner'], '--no-constrain'], tmp_path, [text], capsys)
    assert [(e['start'], e['end'], e['type']) for e in results[0]] == free.spans


def _brute_force(tagger, text):
    """{path: probability} over every label path of ``text`` under the CRF with the scheme's
    constraints (one piece per character here)."""
    from helpers.crf_oracles import path_probabilities
    labels = tagger.head.labels
    allowed, starts, ends = tagger.head.scheme.allowed(labels)
    case = dict(emissions=_emissions(tagger, text)[None], lengths=[len(text)],
                transitions=tagger.head.crf.trans.numpy().astype(np.float64),
                allowed_transitions=allowed, allowed_starts=starts, allowed_ends=ends)
    return {tuple(labels[i] for i in path): p
            for path, p in path_probabilities(case, 0).items()}


@pytest.mark.parametrize('name', ['ner_crf', 'cws'])
def test_crf_confidences_and_path_probability_equal_brute_force(saved, name):
    """Each entity's (word's) confidence = the summed probability of every path whose strict
    reading holds it; the path probability = that of the decoded path."""
    from crf_lr.serving.tagger import Tagger
    tagger = Tagger.load(saved[name])
    text = '张三上海' if name == 'ner_crf' else '我们喜欢北京'
    table = _brute_force(tagger, text)
    prediction, = tagger.decode(tagger.run([text]), marginals=True)
    assert prediction.spans and len(prediction.confidences) == len(prediction.spans)
    for span, confidence in zip(prediction.spans, prediction.confidences):
        expected = sum(p for tags, p in table.items()
                       if span in tagger.head.scheme.decode(list(tags), strict=True))
        np.testing.assert_allclose(confidence, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(prediction.path_probability, table[tuple(prediction.tags)],
                               rtol=1e-6)
    np.testing.assert_allclose(np.exp(prediction.path_log_probability),
                               table[tuple(prediction.tags)], rtol=1e-6)
    labels = tagger.head.labels
    expected = np.zeros((len(text), len(labels)))
    for tags, p in table.items():
        expected[np.arange(len(text)), [labels.index(t) for t in tags]] += p
    np.testing.assert_allclose(prediction.marginals, expected, atol=1e-6)   # float32 model


def test_softmax_confidence_is_the_probability_of_the_entity_under_independent_tags(saved):
    """Softmax head: each entity's confidence = the summed probability (a product of per-unit
    tag probabilities) of every tag path whose strict reading holds it, the next unit's tag
    included; the path probability = the product along the decoded path."""
    from crf_lr.serving.tagger import Tagger
    tagger = Tagger.load(saved['ner'])
    dense = tagger.model.get_layer('Tag-Scores')
    kernel, bias = dense.get_weights()
    bias[tagger.head.labels.index('B-PER')] = 2.0                      # some entities
    dense.set_weights([kernel, bias])
    text = '张三去上海'
    probabilities = _emissions(tagger, text)
    labels = tagger.head.labels
    prediction, = tagger.decode(tagger.run([text]))
    assert prediction.spans
    for span, confidence in zip(prediction.spans, prediction.confidences):
        expected = sum(np.prod(probabilities[np.arange(len(text)), path])
                       for path in itertools.product(range(len(labels)), repeat=len(text))
                       if span in tagger.head.scheme.decode([labels[i] for i in path],
                                                            strict=True))
        np.testing.assert_allclose(confidence, expected, rtol=1e-5)
    ids = [labels.index(t) for t in prediction.tags]
    np.testing.assert_allclose(prediction.path_probability,
                               probabilities[np.arange(len(text)), ids].prod(), rtol=1e-5)


@pytest.mark.parametrize('name', ['ner', 'ner_crf', 'cws'])
def test_a_long_line_keeps_a_finite_path_log_probability(saved, name):
    """A line of sentences of 8 characters (a window each), as many as underflow its path
    probability to 0.0: its log is the sum of its windows' logs, finite; a short line's log is
    that of its probability, in ``predict_records`` (which the server answers with) as in the
    ``Tagger``'s result."""
    from crf_lr.serving.predict import predict_records
    from crf_lr.serving.tagger import Tagger
    tagger = Tagger.load(saved[name])
    sentence = '张三去上海工作。'
    one = predict_records(tagger, [sentence])[0]['path_log_probability']
    count = max(875, int(800 / -one) + 1)          # exp(-800) underflows
    assert count < 20_000, f'{one}: a model too sure of one sentence for this test'
    long, short = sentence * count, '张三上海'
    records = predict_records(tagger, [long, short])
    log_p = records[0]['path_log_probability']
    assert records[0]['path_probability'] == 0.0 and -np.inf < log_p < -745
    assert records[1]['path_log_probability'] == pytest.approx(
        np.log(records[1]['path_probability']))
    if name != 'cws':                                # a segmentation line: one text a chunk
        predictions = tagger.decode(tagger.run([long, short]))
        assert [p.path_log_probability for p in predictions] == pytest.approx(
            [r['path_log_probability'] for r in records])
        windows = tagger.decode(tagger.run([sentence]))
        assert records[0]['path_log_probability'] == pytest.approx(
            count * windows[0].path_log_probability)


@pytest.fixture
def custom_decode(saved, monkeypatch):
    """``set(**fields)``: the CRF head's windows decoded with ``fields`` replaced, as a user's
    head might give them (a path probability and no log of it)."""
    import dataclasses
    from crf_lr.serving.tagger import Tagger
    head_class = type(Tagger.load(saved['ner_crf']).head)
    decode = head_class.decode

    def set(**fields):
        monkeypatch.setattr(head_class, 'decode', lambda *args, **kw: [
            dataclasses.replace(d, **fields) for d in decode(*args, **kw)])
    return set


def test_a_custom_heads_zero_path_probability_is_a_null_log_in_json(
        saved, tmp_path, capsys, custom_decode):
    """Its log would be -inf, which JSON cannot write (``-Infinity``): null; and a NaN that
    ever reaches predict's JSON fails loudly rather than writing ``NaN``."""
    custom_decode(path_probability=0.0, path_log_probability=None)
    _, out = _run([saved['ner_crf'], '--format', 'json'], tmp_path, ['张三上海'], capsys)
    record = json.loads(out, parse_constant=lambda name: pytest.fail(f'{name} in {out}'))
    assert record['path_probability'] == 0.0 and record['path_log_probability'] is None
    custom_decode(confidences=[np.nan] * 9)
    with pytest.raises(ValueError, match='not JSON compliant'):
        _run([saved['ner_crf'], '--format', 'json'], tmp_path, ['张三上海'], capsys)


def test_json_carries_confidences_marginals_and_drops_the_unsure(saved, tmp_path, capsys):
    texts = ['张三上海', '上海张三去']
    results, out = _run([saved['ner_crf'], '--format', 'json', '--marginals'], tmp_path, texts,
                        capsys)
    records = [json.loads(line) for line in out.splitlines()]
    assert [r['entities'] for r in records] == results
    confidences = [e['confidence'] for r in results for e in r]
    assert confidences and all(0 <= c <= 1 for c in confidences)
    for text, record in zip(texts, records):
        assert 0 < record['path_probability'] <= 1
        assert record['path_log_probability'] == pytest.approx(np.log(record['path_probability']))
        marginals = np.array(record['marginals'])
        assert marginals.shape == (len(text), len(record['labels']))
        np.testing.assert_allclose(marginals.sum(axis=1), 1, atol=1e-5)
        assert record['offsets'] == [[i, i + 1] for i in range(len(text))]
    threshold = float(np.median(confidences))
    kept, _ = _run([saved['ner_crf'], '--min-confidence', str(threshold)], tmp_path, texts,
                   capsys)
    assert kept == [[e for e in line if e['confidence'] >= threshold] for line in results]
    words, out = _run([saved['cws'], '--format', 'json', '--marginals'], tmp_path,
                      ['我们 喜欢北京'], capsys)
    record = json.loads(out)
    assert len(record['confidences']) == len(words[0]) and 0 < record['path_probability'] <= 1
    assert record['offsets'] == [[0, 1], [1, 2], [3, 4], [4, 5], [5, 6], [6, 7]]    # no space
    assert len(record['marginals']) == len(record['offsets'])
    for argv, message in (([saved['cws'], '--min-confidence', '0.5'], 'segments words'),
                          ([saved['ner'], '--min-confidence', '2'], r'must lie in \[0, 1\]'),
                          ([saved['ner'], '--marginals'], 'needs --format json')):
        with pytest.raises(SystemExit):
            _run(argv, tmp_path, ['上海'], capsys)
        assert re.search(message, capsys.readouterr().err)


def test_entities_print_offsets_that_cover_their_mentions(saved, tmp_path, capsys):
    from crf_lr.serving.tagger import Tagger
    tagger = Tagger.load(saved['ner'])
    dense = tagger.model.get_layer('Tag-Scores')
    kernel, bias = dense.get_weights()
    bias[tagger.head.labels.index('B-PER')] = 50.0       # every character a one-character PER
    dense.set_weights([kernel, bias])
    tagger.save(str(tmp_path / 'per'))
    text = '张三去上海工作，今天很好。' * 3
    results, out = _run([str(tmp_path / 'per')], tmp_path, [text], capsys)
    assert [(e['start'], e['end']) for e in results[0]] == [(i, i + 1) for i in range(len(text))]
    rows = [line.split('\t') for line in out.splitlines() if line]
    assert all(text[int(s):int(e)] == mention and kind == 'PER' for s, e, kind, mention in rows)


def test_missing_model_folder_is_a_clear_error(tmp_path, capsys):
    from crf_lr.serving.predict import main
    (tmp_path / 'input.txt').write_text('北京\n', encoding='utf-8')
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path), str(tmp_path / 'input.txt')])
    assert exit_info.value.code == 2
    assert 'missing model.h5, labels.json, vocab.txt' in capsys.readouterr().err


def test_a_run_folder_gets_a_did_you_mean(saved, tmp_path, capsys):
    from crf_lr.serving.predict import main
    import shutil
    shutil.copytree(saved['ner'], tmp_path / 'run' / 'model')
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / 'run'), str(tmp_path / 'nothing.txt')])
    assert exit_info.value.code == 2
    assert f'did you mean {tmp_path / "run" / "model"}?' in capsys.readouterr().err


def test_a_model_and_labels_from_different_runs_are_refused(saved, tmp_path):
    import shutil
    from crf_lr.serving.tagger import Tagger
    shutil.copytree(saved['ner'], tmp_path / 'mixed')
    shutil.copyfile(f'{saved["cws"]}/model.h5', tmp_path / 'mixed' / 'model.h5')
    with pytest.raises(ValueError, match='model.h5 scores 4 labels but .*labels.json lists 5'):
        Tagger.load(str(tmp_path / 'mixed'))


def test_help_and_path_errors_answer_before_tensorflow_loads(tmp_path):
    """``--help`` and a wrong model path never import TensorFlow (they answer at once)."""
    import subprocess
    import sys
    code = ('import sys\nfrom crf_lr.serving.predict import main\n'
            'for argv in ([\'--help\'], [sys.argv[1]]):\n'
            '    try: main(argv)\n'
            '    except SystemExit: pass\n'
            'print(sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras")))')
    done = subprocess.run([sys.executable, '-c', code, str(tmp_path / 'nowhere')],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == '[]', done.stderr[-2000:]
    assert 'no such folder' in done.stderr


def test_prediction_is_predict_on_batch_s_from_one_trace(saved):
    """Tagger.scores: predict_on_batch's outputs, for batches of any size, length and integer
    dtype, from one trace (predict_on_batch traces again for a second shape); a model set on the
    tagger afterwards is traced anew. Tolerance 1e-5: the tagger's step multiplies with fused
    dense kernels (crf_lr.compat.flat_dense), which round differently in the last float32 bits."""
    from crf_lr.serving.tagger import Tagger
    tagger = Tagger.load(saved['ner'])
    rng = np.random.default_rng(0)
    batches = [[rng.integers(5, 10, (rows, length)).astype(dtype),
                np.zeros((rows, length), dtype)]
               for rows, length, dtype in ((2, 7, 'int32'), (3, 12, 'int32'), (1, 5, 'int64'))]
    for inputs in batches:
        np.testing.assert_allclose(tagger.scores(inputs), tagger.model.predict_on_batch(inputs),
                                   rtol=1e-5, atol=1e-5)
    model, step, signature = tagger._prediction
    assert step.experimental_get_tracing_count() == 1
    operations = step.get_concrete_function(signature).graph.get_operations()
    assert not any('Tensordot' in op.name for op in operations)      # traced under flat_dense
    other = Tagger.load(saved['ner']).model
    other.set_weights([w + 0.5 for w in other.get_weights()])
    tagger.model = other
    np.testing.assert_allclose(tagger.scores(batches[0]), other.predict_on_batch(batches[0]),
                               rtol=1e-5, atol=1e-5)
    assert not np.allclose(tagger.scores(batches[0]), model.predict_on_batch(batches[0]))


def test_a_model_that_needs_autograph_predicts_through_predict_on_batch():
    from crf_lr.compat import keras, tf
    from crf_lr.serving.tagger import Tagger

    class Branching(keras.layers.Layer):          # Python control flow on a tensor's value
        def call(self, inputs):
            return inputs * 0 if tf.reduce_sum(inputs) > 1e9 else inputs
    keras.utils.set_random_seed(0)
    dense = keras.layers.Dense(2, input_shape=(3,))
    model = keras.Sequential([dense, Branching()])
    tagger = Tagger(model, encoder=None, head=None, maxlen=8)
    x = np.random.default_rng(0).normal(size=(4, 3)).astype('float32')
    kernel, bias = dense.get_weights()
    np.testing.assert_allclose(tagger.scores(x), x @ kernel + bias, rtol=1e-5)
    assert tagger._prediction[1] is None                      # predict_on_batch, not a trace


BROKEN = {   # name -> (file, how to break it, what the one line must say)
    'model-missing': ('model.h5', None, 'missing model.h5'),
    'model-empty': ('model.h5', b'', r'model.h5: empty file \(0 bytes\)'),
    'model-truncated': ('model.h5', 'half', r'model.h5: a damaged or truncated HDF5 file'),
    'model-not-hdf5': ('model.h5', b'<html>not found</html>', r'model.h5: not an HDF5 file'),
    'labels-missing': ('labels.json', None, 'missing labels.json'),
    'labels-invalid': ('labels.json', b'{"head": "crf",\n', r'labels.json: not valid JSON '
                                                            r'\(Expecting .* at line 2'),
    'labels-empty-object': ('labels.json', b'{}', r'labels.json: missing the keys head, types'),
    'labels-a-list': ('labels.json', b'[]', r'labels.json: expected a JSON object, found a list'),
    'labels-no-maxlen': ('labels.json', 'no-maxlen', r'labels.json: missing the key maxlen'),
    'vocab-missing': ('vocab.txt', None, 'missing vocab.txt'),
    'vocab-empty': ('vocab.txt', b'', r'vocab.txt: empty file'),
}


@pytest.mark.parametrize('case', sorted(BROKEN))
def test_a_broken_model_folder_is_one_line_naming_the_file_before_tensorflow(saved, tmp_path,
                                                                             case):
    """predict exits 2 with one line naming the file and the fault, and Tagger.load raises the
    same message, both before any TensorFlow work (before: a KeyError or h5py traceback, or a
    JSON message naming no file)."""
    import re
    import shutil
    import subprocess
    import sys
    from crf_lr.serving.tagger import Tagger
    folder = tmp_path / 'model'
    shutil.copytree(saved['ner'], folder)
    name, content, expected = BROKEN[case]
    path = folder / name
    if content is None:
        path.unlink()
    elif content == 'half':
        path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
    elif content == 'no-maxlen':
        meta = json.loads(path.read_text())
        del meta['maxlen']
        path.write_text(json.dumps(meta))
    else:
        path.write_bytes(content)
    with pytest.raises((FileNotFoundError, ValueError), match=expected):
        Tagger.load(str(folder))
    code = ('import sys\nfrom crf_lr.serving.predict import main\ntry: main(sys.argv[1:])\n'
            'finally: print(sorted(m for m in sys.modules if m.split(".")[0] in '
            '("tensorflow", "keras", "tf_keras")))')
    done = subprocess.run([sys.executable, '-c', code, str(folder), str(tmp_path / 'in.txt')],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout.strip() == '[]', done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(expected, lines[0]), done.stderr
    assert lines[0].startswith('python -m crf_lr.predict: error: ') and str(folder) in lines[0]


def test_calibrate_fits_a_temperature_that_lowers_the_nll_and_travels_with_the_model(
        saved, tmp_path):
    """Gold = half of the predicted entities: the fitted temperature lowers the dev NLL, changes
    no prediction, is saved in labels.json and applied after loading."""
    from crf_lr.evaluation.calibration import calibrate
    from crf_lr.evaluation.plots import plot_reliability
    from crf_lr.serving.tagger import Tagger
    tagger = Tagger.load(saved['ner_crf'])
    texts = ['张三上海', '上海张三去', '张三去上海工作', '今天很好']
    predicted = tagger.decode(tagger.run(texts))
    gold = [p.spans[::2] for p in predicted]
    report = calibrate(tagger, (texts, gold), test=(texts[:2], gold[:2]))
    dev = report['dev']
    assert dev['after']['nll'] <= dev['before']['nll'] and report['temperature'] != 1.0
    assert dev['after']['ece'] < dev['before']['ece'] and report['fitted'] == report['temperature']
    assert tagger.head.temperature == report['temperature']
    assert dev['before']['entities'] == sum(len(p.spans) for p in predicted) > 2
    assert set(report['test']) == {'before', 'after'}
    again = tagger.decode(tagger.run(texts))
    assert [p.spans for p in again] == [p.spans for p in predicted]
    tagger.save(str(tmp_path / 'calibrated'))
    reloaded = Tagger.load(str(tmp_path / 'calibrated'))
    assert reloaded.head.temperature == report['temperature']
    np.testing.assert_allclose([c for p in reloaded.decode(reloaded.run(texts))
                                for c in p.confidences],
                               [c for p in again for c in p.confidences], rtol=1e-6)
    path = plot_reliability({'T = 1': dev['before']['outcomes'],
                             'fitted': dev['after']['outcomes']}, str(tmp_path / 'r.png'))
    assert open(path, 'rb').read(8) == b'\x89PNG\r\n\x1a\n'
    assert report['bound'] is None and report['dev_right'] == sum(len(g) for g in gold)


def test_a_fitted_temperature_that_would_raise_the_dev_ece_is_not_kept(saved, monkeypatch):
    """Gold: about half of the predicted entities. A temperature that sharpens the confidences
    (the fit made to return T 0.5: which T minimises the NLL depends on the random model, and is
    tested in tests/evaluation) raises the ECE, recomputed here from the entities' outcomes at
    that temperature: T stays 1 and the report says why, with both ECEs."""
    from crf_lr.evaluation import calibration
    from crf_lr.evaluation.calibration import calibrate, entity_outcomes, expected_calibration_error
    from crf_lr.serving.tagger import Tagger
    monkeypatch.setattr(calibration, 'fit_temperature', lambda loss: 0.5)
    tagger = Tagger.load(saved['ner_crf'])
    texts = ['张三上海', '上海张三去', '张三去上海工作', '今天很好',
             '北京张三',
             '去上海了']
    predicted = tagger.decode(tagger.run(texts))
    gold = [p.spans[:3] if k % 2 else p.spans[3:] for k, p in enumerate(predicted)]
    report = calibrate(tagger, (texts, gold))
    fitted = report['fitted']
    tagger.head.temperature = fitted
    ece = [expected_calibration_error(*entity_outcomes(decoded, gold)) for decoded in (
        predicted, tagger.decode(tagger.run(texts)))]
    assert fitted == 0.5 and ece[1] > ece[0]
    dev = {when: {k: v for k, v in scores.items() if k != 'outcomes'}
           for when, scores in report['dev'].items()}
    assert report['temperature'] == 1.0 and dev['after'] == dev['before']
    assert report['choice'] == (f'T 1 kept: the fitted temperature {fitted} would not lower dev '
                                f'ECE ({ece[0]:.4f} at T 1, {ece[1]:.4f} at T {fitted})')
    reloaded = Tagger.load(saved['ner_crf'])
    assert calibrate(reloaded, (texts, gold)) and reloaded.head.temperature == 1.0


def test_kept_temperature_keeps_only_a_lower_ece():
    from crf_lr.evaluation.calibration import kept_temperature
    assert kept_temperature(1.7, 0.08, 0.02) == (
        1.7, 'the fitted temperature 1.7 kept: it lowers dev ECE from 0.0800 at T 1 to 0.0200')
    assert kept_temperature(1.146, 0.0467, 0.0505)[0] == 1.0
    assert kept_temperature(0.9, 0.03, 0.03) == (
        1.0, 'T 1 kept: the fitted temperature 0.9 would not lower dev ECE (0.0300 at T 1, 0.0300 '
             'at T 0.9)')


def test_a_temperature_at_the_end_of_its_range_is_named(saved):
    """Every predicted dev entity wrong: the fit lowers the confidences as far as the range
    lets it, and the report and its note say so (it was silent)."""
    from crf_lr.evaluation.calibration import TEMPERATURE_RANGE, bound_note, calibrate
    from crf_lr.serving.tagger import Tagger
    tagger = Tagger.load(saved['ner_crf'])
    texts = ['张三上海', '上海张三去', '张三去上海工作']
    found = sum(len(p.spans) for p in tagger.decode(tagger.run(texts)))
    assert found                                  # entities to be wrong (else T stays 1)
    report = calibrate(tagger, (texts, [[] for _ in texts]))
    assert report['temperature'] == TEMPERATURE_RANGE[1] and report['bound'] == 'upper'
    assert bound_note(report).startswith(
        f'the temperature stopped at the top of its range (20.0): 0 of the {found} dev '
        f'entities predicted are right, so the fit lowers every confidence')
    assert bound_note(dict(report, bound=None)) is None


def test_a_temperature_at_the_bottom_of_its_range_is_not_kept(saved):
    """Every predicted dev entity right (a small or easy development split): the fit would make
    every confidence read 1, which no development split can show; T 1 is kept, and the choice
    and the note say why (a newcomer's 8-sentence dev set got confidences of 1.0 everywhere)."""
    from crf_lr.evaluation.calibration import TEMPERATURE_RANGE, bound_note, calibrate
    from crf_lr.serving.tagger import Tagger
    tagger = Tagger.load(saved['ner_crf'])
    texts = ['张三上海', '上海张三去', '张三去上海工作']
    predicted = tagger.decode(tagger.run(texts))
    found = sum(len(p.spans) for p in predicted)
    assert found                                  # entities to be right
    untempered = [c for p in predicted for c in p.confidences]
    report = calibrate(tagger, (texts, [p.spans for p in predicted]))
    assert report['fitted'] == TEMPERATURE_RANGE[0] and report['bound'] == 'lower'
    assert report['temperature'] == 1.0 and tagger.head.temperature == 1.0
    assert report['choice'] == (f'T 1 kept: the fitted temperature {TEMPERATURE_RANGE[0]} is the '
                                f'bottom of its range ({found} of the {found} dev entities '
                                f'predicted right): '
                                f'every confidence would read 1')
    assert bound_note(report) == (
        f'the temperature stopped at the bottom of its range ({TEMPERATURE_RANGE[0]}): {found} '
        f'of the {found} dev entities predicted are right, so T 1 was kept, where every '
        f'confidence would read 1; a larger development split can fit one')
    np.testing.assert_allclose([c for p in tagger.decode(tagger.run(texts))
                                for c in p.confidences], untempered, rtol=1e-6)
    assert max(untempered) < 1


@pytest.mark.parametrize('line, words', [
    ('He met officials in Berlin.', ['He', 'met', 'officials', 'in', 'Berlin', '.']),
    ('In Berlin, U.S. aid (AP) rose 3.5%.', ['In', 'Berlin', ',', 'U.S.', 'aid', '(', 'AP', ')',
                                             'rose', '3.5', '%', '.']),
    ("J. Smith of AT&T met O'Neil in New-York", ['J.', 'Smith', 'of', 'AT&T', 'met', "O'Neil",
                                                 'in', 'New-York']),
    ("Mr. Smith's 1,200 shares in Acme Inc. on Jan. 5", ['Mr.', 'Smith', "'s", '1,200', 'shares',
                                                       'in', 'Acme', 'Inc.', 'on', 'Jan.', '5']),
    ("Bonn didn't, can't and won't; IBM ISN'T", ['Bonn', 'did', "n't", ',', 'ca', "n't", 'and',
                                                  'wo', "n't", ';', 'IBM', 'IS', "N'T"]),
    ("we're sure I'm IT'S O'Neil's d'affaires", ['we', "'re", 'sure', 'I', "'m", 'IT', "'S",
                                                "O'Neil", "'s", "d'affaires"]),
    ('U.S.-based and Ill.-based firms', ['U.S.-based', 'and', 'Ill.-based', 'firms']),
])
def test_english_lines_split_punctuation_off_as_conll_writes_it(line, words):
    """An entity's text and offsets then stop at the word (``Berlin``, not ``Berlin.``); a
    clitic is a word (CoNLL-2003's ``did n't``, ``ca n't``, ``we 're``, ``IT 'S``), and
    ``U.S.-based`` one word, as there."""
    from crf_lr.serving.predict import word_offsets
    found, offsets = word_offsets(line)
    assert found == words and [line[s:e] for s, e in offsets] == words


@pytest.mark.parametrize('line, words', [
    ('RT @Nadia_88: Turkey wins! https://t.co/Turkey123. #Turkey #WorldCup2018',
     ['RT', '@Nadia_88', ':', 'Turkey', 'wins', '!', 'https://t.co/Turkey123', '.', '#Turkey',
      '#WorldCup2018']),
    ('mail me@ex.co.uk, or www.turkey.com/news?id=3&x=y)',
     ['mail', 'me@ex.co.uk', ',', 'or', 'www.turkey.com/news?id=3&x=y', ')']),
    ('(see http://en.wikipedia.org/wiki/Turkey_(bird)).',
     ['(', 'see', 'http://en.wikipedia.org/wiki/Turkey_(bird)', ')', '.']),
    ('visit bit.ly/2xYz?a=1, or "http://x.com/a"!',
     ['visit', 'bit.ly/2xYz?a=1', ',', 'or', '"', 'http://x.com/a', '"', '!']),
    ('Seoul- and Busan-based fans -- wow!!! ...',
     ['Seoul-', 'and', 'Busan-based', 'fans', '--', 'wow', '!!!', '...']),
    ('@人民日报 #北京 AT&T#1 &#39; a@b',
     ['@人民日报', '#北京', 'AT&T', '#', '1', '&', '#', '39', ';',
                                      'a', '@', 'b']),
    ('see https://a.com/x。Then, https://b.com/y，ok',  # CJK punctuation ends it
     ['see', 'https://a.com/x', '。', 'Then', ',', 'https://b.com/y', '，', 'ok']),
    ('https://t.co/AbC12… 「https://a.com/x」と https://a.com/y点击',
     ['https://t.co/AbC12', '…', '「', 'https://a.com/x', '」', 'と', 'https://a.com/y',
      '点击']),
    ('see https://a.com/x] https://a.com/x* ok <http://a.com/x> «http://a.com/x»',
     ['see', 'https://a.com/x', ']', 'https://a.com/x', '*', 'ok', '<', 'http://a.com/x', '>', '«',
      'http://a.com/x', '»']),
    ('[http://[::1]:80/a_b] http://a.com/x?q=(1 http://a.com/x?q=(1.',     # [] balanced, ( open
     ['[', 'http://[::1]:80/a_b', ']', 'http://a.com/x?q=(1', 'http://a.com/x?q=(1', '.']),
    ('https://de.wikipedia.org/wiki/Köln, हिन्दी भाषा', ['https://de.wikipedia.org/wiki/Köln', ',',
                                                      'हिन्दी', 'भाषा']),   # letters, marks kept
])
def test_tweets_keep_urls_addresses_handles_and_hashtags_whole(line, words):
    """As tweet corpora (WNUT) write them, so no entity is found inside a URL; a trailing
    hyphen and a run of one punctuation mark stay whole, as CoNLL-2003's training file keeps
    ``three-`` and ``...``; a sentence's full stop, a closing bracket or any punctuation that is
    not URL-legal ASCII (CJK's '。', '…') after a URL is not part of it, nor CJK text."""
    from crf_lr.serving.predict import word_offsets
    found, offsets = word_offsets(line)
    assert found == words and [line[s:e] for s, e in offsets] == words


@pytest.mark.parametrize('content, format', [
    ('张 B-PER\n三 I-PER\n去 O\n', 'char-bio'),
    ('{"text": "张三去", "label": {"name": {"张三": [[0, 1]]}}}\n', 'jsonl'),
    ('[\n {"text": "张三去", "spans": [[0, 2, "name"]]}\n]\n', 'jsonl'),
    ('[ {"text": "张三去", "spans": [[0, 2, "name"]]},\n {"text": "李四", "spans": []} ]\n',
     'jsonl'),
    ('{\n "text": "张三去",\n "spans": [[0, 2, "name"]]\n}\n', 'jsonl'),
])
def test_a_labelled_corpus_given_as_text_is_named(saved, tmp_path, capsys, content, format):
    """A CoNLL, character-tag or JSON file is not raw text: predict says what it is and what
    to do."""
    from crf_lr.serving.predict import main
    corpus = tmp_path / 'test.txt'
    corpus.write_text(content, encoding='utf-8')
    with pytest.raises(SystemExit) as exit_info:
        main([saved['ner'], str(corpus)])
    assert exit_info.value.code == 2
    assert (f'{corpus} is a labelled corpus (format {format}), not raw text: predict reads one '
            "sentence a line; to score a labelled file, give the task script's command that "
            f'trained the model --test-file {corpus} (with --train-file: a finished run scores '
            'it, training nothing)'
            ) in capsys.readouterr().err


def test_stdin_is_decoded_as_a_file_is(saved, tmp_path, capsys, monkeypatch):
    """Text piped in: a BOM dropped (the offsets are the file's), GB18030 bytes an error naming
    the line and the conversion (it was tagged as garbage, exit status 0)."""
    import io
    import sys
    from crf_lr.serving.predict import main
    text = '张三去北京\n李四在上海\n'
    path = tmp_path / 'text.txt'
    path.write_text(text, encoding='utf-8')
    from_file = main([saved['ner_crf'], str(path), '--format', 'json'])
    capsys.readouterr()
    monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(text.encode('utf-8-sig'))))
    assert main([saved['ner_crf'], '--format', 'json']) == from_file
    twice = text.replace('\n', '\r\r\n').encode()           # a CRLF file made CRLF again
    monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(twice)))
    assert main([saved['ner_crf'], '--format', 'json']) == from_file
    monkeypatch.setattr(sys, 'stdin', io.TextIOWrapper(io.BytesIO(text.encode('gb18030'))))
    with pytest.raises(SystemExit) as exit_info:
        main([saved['ner_crf']])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.endswith(
        "stdin:1: not UTF-8: b'\\xd5\\xc5' cannot be decoded; it reads as GB18030 (GBK) Chinese "
        "text: convert it, pipe it through iconv -f GB18030 -t UTF-8\n")


def test_one_answer_per_line_whatever_control_characters_a_line_holds(saved, tmp_path, capsys):
    """Lines split at LF and CRLF only, as the corpus readers split them: a form feed, U+0085,
    U+2028 or U+001C inside a line ended it (``str.splitlines``), so the answers no longer lined
    up with the file's lines. A lone CR is an error naming its line."""
    from crf_lr.serving.predict import main
    lines = ['张三去\x0c北京', '李四\x85在上海', '王五\u2028去广州', '赵六\x1c在深圳']
    path = tmp_path / 'text.txt'
    path.write_text('\n'.join(lines) + '\n', encoding='utf-8')
    main([saved['ner'], str(path), '--format', 'json'])
    records = [json.loads(line) for line in capsys.readouterr().out.split('\n')[:-1]]
    assert [r['text'] for r in records] == lines
    path.write_bytes('张三去北京\n李四\r在上海\n'.encode())
    with pytest.raises(SystemExit) as exit_info:
        main([saved['ner'], str(path)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.endswith(
        f'{path}:2: a line ends with a lone CR (old Mac line endings): save the file with LF or '
        'CRLF line endings\n')


def test_predictions_in_json_read_back_as_a_training_file(saved, tmp_path, capsys):
    """predict's JSON entities (start, end exclusive, type, text, confidence) are read as a
    corpus, so corrected predictions train and test again: the reader refused them, and predict
    advised --test-file for them, which then failed. A segmentation model's "words" records are
    named, with the output to give instead."""
    from crf_lr.data.files import DataFormatError
    from crf_lr.data.formats import read_corpus
    from crf_lr.serving.predict import main
    lines = ['张三去北京', '李四在上海工作', '']
    path = tmp_path / 'text.txt'
    path.write_text('\n'.join(lines) + '\n', encoding='utf-8')
    main([saved['ner_crf'], str(path), '--format', 'json'])
    written = capsys.readouterr().out
    records = [json.loads(line) for line in written.splitlines()]
    assert [r['text'] for r in records] == lines
    records[1]['entities'] = [dict(records[1]['entities'][0] if records[1]['entities'] else {},
                                   start=3, end=5, type='LOC', text='上海', confidence=0.5)]
    predictions = tmp_path / 'predictions.json'                           # corrected by hand
    predictions.write_text(''.join(json.dumps(r, ensure_ascii=False) + '\n' for r in records),
                           encoding='utf-8')
    corpus = read_corpus(str(predictions))
    assert corpus.format == 'jsonl' and [e.text for e in corpus] == lines[:2]
    assert [e.spans for e in corpus] == [
        [(d['start'], d['end'], d['type']) for d in r['entities']] for r in records[:2]]
    assert corpus[1].spans == [(3, 5, 'LOC')]
    records[0]['entities'] = [dict(start=0, end=2, type='PER', text='张四')]   # a wrong text
    predictions.write_text(json.dumps(records[0], ensure_ascii=False), encoding='utf-8')
    with pytest.raises(DataFormatError, match=f'^{predictions}:1: .*"start": 0, "end": 2 of '
                                              '"PER" "张四"'):
        read_corpus(str(predictions))
    main([saved['cws'], str(path), '--format', 'json'])
    predictions.write_text(capsys.readouterr().out, encoding='utf-8')
    with pytest.raises(DataFormatError, match=f'^{predictions}:1: a record of "words" '
                                              r"\(crf_lr.predict's word segmentation\): to train "
                                              "on it, give predict's text output"):
        read_corpus(str(predictions))


def test_json_records_without_entities_are_read_as_texts(saved, tmp_path, capsys):
    """CLUENER's test.json (records of "id" and "text"): one answer per record, in order, an
    empty text too; predict refused it as a labelled corpus, and the task script as a test file
    without entities."""
    from crf_lr.serving.predict import main
    path = tmp_path / 'test.json'
    path.write_text('{"id": 0, "text": "张三去北京"}\n{"id": 1, "text": ""}\n'
                    '{"id": 2, "text": "李四\\n在上海"}\n', encoding='utf-8')
    main([saved['ner'], str(path), '--format', 'json'])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r['text'] for r in records] == ['张三去北京', '', '李四\n在上海']
    assert [r['id'] for r in records] == [0, 1, 2]         # the records' ids, to join them by
    for second in ('{"id": 1}', '5', '"my label"'):              # no text, no object
        path.write_text('{"id": 0, "text": "张三"}\n' + second + '\n', encoding='utf-8')
        with pytest.raises(SystemExit):
            main([saved['ner'], str(path)])
        assert f'{path}:2: ' in capsys.readouterr().err


def test_text_whose_first_line_opens_like_json_is_tagged(saved, tmp_path, capsys):
    """A first line opening with '{"' that is no whole JSON record is text (it was refused as
    a JSON corpus)."""
    from crf_lr.serving.predict import main
    text = tmp_path / 'log.txt'
    text.write_text('{"level": "info"} 张三去北京\n李四在上海\n', encoding='utf-8')
    main([saved['ner'], str(text), '--format', 'json'])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r['text'] for r in records] == ['{"level": "info"} 张三去北京', '李四在上海']


def test_predict_piped_into_a_reader_that_stops_ends_quietly(saved, tmp_path):
    """``python -m crf_lr.predict MODEL FILE | head -1``: no BrokenPipeError traceback."""
    import subprocess
    import sys
    text = tmp_path / 'text.txt'
    text.write_text('张三去北京工作\n' * 4000, encoding='utf-8')     # > a pipe's buffer
    shell = subprocess.run(f'{sys.executable} -m crf_lr.predict {saved["ner"]} {text} '
                           '--format json | head -1',
                           shell=True, capture_output=True, text=True, timeout=300)
    assert shell.stdout and 'Traceback' not in shell.stderr and 'BrokenPipe' not in shell.stderr


def test_python_m_crf_lr_predict_exits_0_and_says_only_its_precision_on_stderr(saved, tmp_path):
    """The README's command as a user types it: exit status 0, the spans on stdout, one line on
    stderr (what --precision auto became). The module's main returns its records (for tests),
    which an entry point taking them for an exit status would print and turn into status 1."""
    import subprocess
    import sys
    text = tmp_path / 'text.txt'
    text.write_text('张三去北京工作\n', encoding='utf-8')
    done = subprocess.run([sys.executable, '-m', 'crf_lr.predict', saved['ner'], str(text)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith('precision: auto -> ') and done.stderr.count('\n') == 1

def test_a_prediction_where_the_kernels_were_never_built_compiles_nothing(saved, tmp_path):
    """crf_lr.predict on a machine whose kernel cache is empty (a server's fresh container): it
    answers with TensorFlow's ops for its layer norms and compiles nothing (no build line, no
    library in the cache); where the kernels are built it takes them (the test above)."""
    import os
    import subprocess
    import sys
    text, cache = tmp_path / 'text.txt', tmp_path / 'cache'
    text.write_text('张三去北京工作\n', encoding='utf-8')
    done = subprocess.run([sys.executable, '-m', 'crf_lr.predict', saved['ner'], str(text)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, CRF_LR_CACHE=str(cache)))
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith('precision: auto -> ') and done.stderr.count('\n') == 1
    assert not list(cache.glob('*.so'))


def test_a_word_longer_than_a_window_is_read_as_unk_and_every_line_is_answered(tmp_path, capsys):
    """A line holding a word of more WordPieces than a window holds (here 16 of 10), or a long
    CJK run given to a word model, stopped the whole run with a usage error and no output; it is
    read as one [UNK], as BERT reads an over-long word. Oracle: the same line with an unknown
    short word there (one [UNK]) gives the same types, confidences and path probability."""
    from crf_lr.compat import keras
    from crf_lr.serving.predict import predict_records
    from crf_lr.serving.tagger import Tagger
    from helpers.tiny_models import save_random_tagger
    keras.utils.set_random_seed(2)
    model_dir = save_random_tagger(str(tmp_path / 'words'), 'crf', ['LOC', 'PER'], 'BIOES',
                                   MAXLEN, crf_scale=2, units='words')
    long_line, short_line = ('peter runs in london ' + word + ' call to boycott'
                             for word in ('eu' + 's' * 15, 'zz'))
    lines = ['eu rejects german call', long_line, '北京' * 160, 'peter runs in london']
    results, out = _run([model_dir, '--format', 'json'], tmp_path, lines, capsys)
    assert [json.loads(line)['text'] for line in out.splitlines()] == lines
    tagger = Tagger.load(model_dir)
    assert results == [record['entities'] for record in predict_records(tagger, lines)]
    found, expected = predict_records(tagger, [long_line, short_line])
    assert found['path_probability'] == pytest.approx(expected['path_probability'])
    assert ([(e['type'], pytest.approx(e['confidence'])) for e in found['entities']]
            == [(e['type'], e['confidence']) for e in expected['entities']])


def test_a_word_model_cuts_a_long_line_after_its_full_stop_not_inside_an_entity(tmp_path):
    """The tester's line at --maxlen 12 (10 pieces): its windows were cut where the first window
    ended, inside 'International Business Machines Corporation', though a '.' came before."""
    from crf_lr.serving.predict import line_units
    from crf_lr.serving.tagger import Tagger
    from helpers.tiny_models import save_random_tagger
    tagger = Tagger.load(save_random_tagger(str(tmp_path / 'words'), 'crf', ['ORG'], 'BIO',
                                            MAXLEN, units='words'))
    line = 'the the the the the the . International Business Machines Corporation said .'
    _, sequences = line_units(tagger, [line])
    assert all(len(tagger.encoder.pieces(word)) == 1 for word in sequences[0])
    windows, = tagger.windows(sequences)
    assert [' '.join(window.units) for window, _ in windows] == [
        'the the the the the the .', 'International Business Machines Corporation said .']


def test_prediction_traces_attention_transposes_as_einsum(saved):
    """Tagger.scores traces under einsum_transposes: its step holds no Transpose (oneDNN's pays a
    fixed cost per call that one short text feels) and the outputs stay predict_on_batch's."""
    from crf_lr.serving.tagger import Tagger
    tagger = Tagger.load(saved['ner'])
    inputs = [np.array([[2, 5, 7, 3]], 'int32'), np.zeros((1, 4), 'int32')]
    np.testing.assert_allclose(tagger.scores(inputs), tagger.model.predict_on_batch(inputs),
                               rtol=1e-5, atol=1e-5)
    _, step, signature = tagger._prediction
    types = {op.type for op in step.get_concrete_function(signature).graph.get_operations()}
    assert 'Einsum' in types and 'Transpose' not in types


@pytest.mark.parametrize('precision', ['float32', 'mixed_bfloat16'])
def test_prediction_runs_each_layer_norm_as_one_kernel_with_predict_on_batch_s_scores(
        saved, fused_ops, precision):
    """Tagger.scores traces under prediction_kernels: each of the model's layer norms is one
    CrfLrLayerNorm (none of the closed form's ops left), and the scores stay predict_on_batch's:
    to float32 rounding in float32; in bf16 the kernel's statistics are float32 where
    predict_on_batch's are bf16, so they agree to a few bf16 steps of the largest score."""
    from bert4keras.layers import LayerNormalization
    from crf_lr.model.precision import set_precision
    from crf_lr.serving.tagger import Tagger
    set_precision(precision)
    tagger = Tagger.load(saved['ner'])
    inputs = [np.array([[2, 5, 7, 5, 9, 3], [2, 7, 3, 0, 0, 0]], 'int32'),
              np.zeros((2, 6), 'int32')]
    expected = np.asarray(tagger.model.predict_on_batch(inputs), np.float64)
    tolerance = 1e-5 if precision == 'float32' else 4 * 2.0 ** -8 * np.abs(expected).max()
    np.testing.assert_allclose(tagger.scores(inputs), expected, rtol=0, atol=tolerance)
    _, step, signature = tagger._prediction
    types = [op.type for op in step.get_concrete_function(signature).graph.get_operations()]
    norms = sum(isinstance(layer, LayerNormalization) for layer in tagger.model.layers)
    assert norms > 0 and types.count('CrfLrLayerNorm') == norms
    assert 'DivNoNan' not in types


@pytest.mark.parametrize('precision', ['mixed_bfloat16', 'float32'])
def test_a_frozen_tagger_scores_as_before_with_constant_weights_only_in_bf16(saved, precision):
    """Tagger.freeze: under mixed_bfloat16 (bf16 weights) prediction runs with the weights as
    constants and scores every batch shape as the traced step with variables does, to bf16's
    rounding (the graph optimiser may order a few ops otherwise); under float32 it keeps the
    variables (frozen was slower there) and says so."""
    from crf_lr.model.precision import set_precision
    from crf_lr.serving.tagger import Tagger
    set_precision(precision)
    tagger = Tagger.load(saved['ner'])
    batches = [[np.array([[2, 5, 7, 3]], 'int32'), np.zeros((1, 4), 'int32')],
               [np.array([[2, 5, 3, 0, 0, 0], [2, 7, 5, 7, 5, 3]], 'int32'),
                np.zeros((2, 6), 'int32')]]
    before = [tagger.scores(batch) for batch in batches]
    model, step, signature = tagger._prediction
    assert tagger.freeze() is (precision == 'mixed_bfloat16')
    if precision == 'float32':
        assert tagger._prediction[1] is step
        return
    one_bf16_step = 2.0 ** -7
    for batch, expected in zip(batches, before):
        np.testing.assert_allclose(tagger.scores(batch), expected, rtol=one_bf16_step, atol=1e-6)
    reads = {op.type for op in step.get_concrete_function(signature).graph.get_operations()}
    assert 'ReadVariableOp' in reads                      # the step frozen had variables
    model.get_layer(index=-1).set_weights([w * 0 for w in model.get_layer(index=-1).get_weights()])
    np.testing.assert_allclose(tagger.scores(batches[0]), before[0],     # read once, at freeze
                               rtol=one_bf16_step, atol=1e-6)


@pytest.mark.parametrize('units', ['words', 'chars'])
def test_predictions_in_conll_read_back_as_the_models_training_format(saved, tmp_path, capsys,
                                                                      units):
    """--format conll: a word model's words (as it read them) or a character model's characters
    and their BIO tags, a training file once corrected; the JSON round trip holds characters
    only, so an English model's corrections had no way back."""
    from crf_lr.compat import keras
    from crf_lr.data.formats import read_corpus
    from crf_lr.serving.predict import word_offsets
    from helpers.tiny_models import save_random_tagger
    keras.utils.set_random_seed(3)
    model_dir = (save_random_tagger(str(tmp_path / 'words'), 'crf', ['LOC', 'PER'], 'BIO', MAXLEN,
                                    crf_scale=4, units='words')
                 if units == 'words' else saved['ner_crf'])
    lines = (['peter runs in london.', 'eu rejects german call', 'london calls peter']
             if units == 'words' else ['张三去北京', '李四 在上海', '北京张三'])
    records, out = _run([model_dir, '--format', 'json'], tmp_path, lines, capsys)
    _, conll = _run([model_dir, '--format', 'conll'], tmp_path, lines, capsys)
    assert sum(map(len, records))                                  # entities to write
    path = tmp_path / 'predictions.txt'
    path.write_text(conll, encoding='utf-8')
    corpus = read_corpus(str(path))
    assert corpus.format == ('conll' if units == 'words' else 'char-bio')
    for example, line, entities in zip(corpus, lines, records):
        units_, offsets = (word_offsets(line) if units == 'words' else
                           zip(*[(c, (i, i + 1)) for i, c in enumerate(line) if c.strip()]))
        offsets = list(offsets)
        assert list(example.tokens) == list(units_)
        mentions = [(d['start'], d['end'], d['type'], line[d['start']:d['end']])
                    for d in entities]                  # whitespace has no unit to tag
        assert [(offsets[s][0], offsets[e - 1][1], t) for s, e, t in example.spans] == [
            (start + len(text) - len(text.lstrip()), end - len(text) + len(text.rstrip()), kind)
            for start, end, kind, text in mentions if text.strip()]


def test_conll_output_is_refused_for_a_segmentation_model(saved, capsys):
    from crf_lr.serving.predict import main
    with pytest.raises(SystemExit) as exit_info:
        main([saved['cws'], '--format', 'conll'])
    assert exit_info.value.code == 2
    assert "a segmentation model's default output" in capsys.readouterr().err
