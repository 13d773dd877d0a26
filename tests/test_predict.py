"""``python -m crf_lr.predict`` on saved tiny models (random weights: decoding, windowing and output
are what is tested, not accuracy).

Oracles: brute-force enumeration of every label path (CRF best path; softmax constrained to the
BIO scheme), the per-window predictions for the stitched long input, and the input text itself
(words concatenate back to it; every entity's offsets cover its mention).
"""
import itertools
import json

import numpy as np
import pytest

from test_examples import WORDS, write_tiny_encoder

MAXLEN = 12


@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    """A word-segmentation CRF model and a BIO softmax NER model, saved as the scripts save them."""
    from crf_lr.compat import keras
    from crf_lr.tagger import Tagger, build_model, load_encoder
    from crf_lr.tagging import label_list
    from crf_lr.training import UnitEncoder
    root = tmp_path_factory.mktemp('predict')
    config = write_tiny_encoder(str(root / 'encoder'))
    keras.utils.set_random_seed(1)
    folders = {}
    for name, head, labels, scheme in (('cws', 'crf', list('sbme'), 'SEG'),
                                       ('ner', 'softmax', label_list(['LOC', 'PER']), 'BIO')):
        encoder, vocab, _ = load_encoder(config)
        model, _, _ = build_model(encoder, head, len(labels))
        if name == 'cws':   # make the transitions matter: emissions and transitions of one scale
            crf = model.get_layer('CRF')
            crf.set_weights([np.random.default_rng(0).normal(0, 2, (4, 4))])
        Tagger(model, UnitEncoder(vocab), labels, head, scheme, MAXLEN).save(str(root / name))
        folders[name] = str(root / name)
    return folders


def _run(argv, tmp_path, lines, capsys):
    from crf_lr.predict import main
    path = tmp_path / 'input.txt'
    path.write_text('\n'.join(lines) + '\n', encoding='utf-8')
    capsys.readouterr()
    results = main(argv[:1] + [str(path)] + argv[1:])
    return results, capsys.readouterr().out


def _emissions(tagger, text):
    inputs = [np.array([tagger.encoder.encode(text)[0]]), np.zeros((1, len(text) + 2), 'int32')]
    return np.asarray(tagger.model.predict_on_batch(inputs))[0, :len(text)].astype(np.float64)


def test_crf_segmentation_is_the_brute_force_best_path(saved, tmp_path, capsys):
    from crf_lr.tagger import Tagger
    from crf_lr.tagging import tags_to_words
    tagger = Tagger.load(saved['cws'])
    text = '我们喜欢北京'
    emissions, trans = _emissions(tagger, text), tagger.crf.trans.numpy().astype(np.float64)
    best = max(itertools.product(range(4), repeat=len(text)),
               key=lambda p: emissions[np.arange(len(p)), p].sum()
               + sum(trans[a, b] for a, b in zip(p, p[1:])))
    expected = tags_to_words(text, ['sbme'[i] for i in best])
    results, out = _run([saved['cws']], tmp_path, [text], capsys)
    assert results == [expected]
    assert out == '  '.join(expected) + '\n'


def test_long_input_is_windowed_and_stitched(saved, tmp_path, capsys):
    from crf_lr.tagger import Tagger
    from crf_lr.tagging import split_into_windows
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
    from crf_lr.tagger import Tagger
    from crf_lr.tagging import allowed_transitions
    tagger = Tagger.load(saved['ner'])
    text = '张三去上海'
    log_p = np.log(_emissions(tagger, text))
    allowed, starts, _ = allowed_transitions(tagger.labels, 'BIO')
    legal = [p for p in itertools.product(range(len(tagger.labels)), repeat=len(text))
             if starts[p[0]] and all(allowed[a, b] for a, b in zip(p, p[1:]))]
    best = max(legal, key=lambda p: log_p[np.arange(len(p)), p].sum())
    (spans, tags), = tagger.decode(tagger.run([text]), constrain=True)
    assert tags == [tagger.labels[i] for i in best]
    (_, free), = tagger.decode(tagger.run([text]), constrain=False)
    assert free == [tagger.labels[i] for i in log_p.argmax(-1)]
    results, out = _run([saved['ner'], '--constrain'], tmp_path, [text], capsys)
    assert [(e['start'], e['end'], e['type']) for e in results[0]] == spans
    assert out.endswith('\n\n')


def test_entities_print_offsets_that_cover_their_mentions(saved, tmp_path, capsys):
    from crf_lr.tagger import Tagger
    tagger = Tagger.load(saved['ner'])
    dense = tagger.model.get_layer('Tag-Scores')
    kernel, bias = dense.get_weights()
    bias[tagger.labels.index('B-PER')] = 50.0       # every character a one-character PER
    dense.set_weights([kernel, bias])
    tagger.save(str(tmp_path / 'per'))
    text = '张三去上海工作，今天很好。' * 3
    results, out = _run([str(tmp_path / 'per')], tmp_path, [text], capsys)
    assert [(e['start'], e['end']) for e in results[0]] == [(i, i + 1) for i in range(len(text))]
    rows = [line.split('\t') for line in out.splitlines() if line]
    assert all(text[int(s):int(e)] == mention and kind == 'PER' for s, e, kind, mention in rows)


def test_missing_model_folder_is_a_clear_error(tmp_path, capsys):
    from crf_lr.predict import main
    (tmp_path / 'input.txt').write_text('北京\n', encoding='utf-8')
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path), str(tmp_path / 'input.txt')])
    assert exit_info.value.code == 2
    assert 'missing model.h5, labels.json, vocab.txt' in capsys.readouterr().err
