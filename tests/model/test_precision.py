"""Mixed bfloat16: the switch, and every head trained and decoded under it against float32.

One tiny BERT (2 layers, hidden 16) per precision carries the four heads, each as its own model;
the bf16 models get the float32 models' weights, so every difference comes from bf16 arithmetic.
bfloat16 keeps 8 bits of mantissa (relative rounding 2**-9 = 0.2%); each product and sum of the
encoder rounds once, so outputs and gradients land a few roundings off float32. Tolerances:
scores within 5% of their largest magnitude, loss within 2%, the gradient (all weights, as one
vector) within 10% in norm -- 10-50 bf16 roundings, far below what a float32 head on bf16
activations would miss by if it overflowed, went NaN or lost its mask (O(1) or worse).
"""
import os

import numpy as np
import pytest

import crf_lr  # noqa: F401  (environment before TensorFlow)
from crf_lr.compat import keras, tf
from crf_lr.model.precision import NATIVE_BF16_FLAGS, load_model, native_bf16, set_precision

HEADS = ('crf', 'softmax', 'global_pointer', 'efficient_global_pointer')
TINY_LAYERS = 2                               # conftest's TINY_BERT_CONFIG
TYPES = ['A', 'B']
SCORE_TOLERANCE, LOSS_TOLERANCE, GRADIENT_TOLERANCE = 0.05, 0.02, 0.10


@pytest.fixture(autouse=True)
def float32_after():
    """Every test leaves Keras's global policy at float32."""
    yield
    keras.mixed_precision.set_global_policy('float32')


def _build(config_path, precision, weights=None):
    """dict head -> (head, model) on one fresh tiny encoder, built under ``precision``."""
    from bert4keras.models import build_transformer_model
    from crf_lr.model.heads import make_head, piece_states
    set_precision(precision)
    keras.utils.set_random_seed(0)
    encoder = build_transformer_model(config_path, model='bert')
    built = {}
    for name in HEADS:
        head = make_head(name, TYPES, 'BIO', head_size=8)
        model = keras.Model(encoder.inputs, head.build(piece_states(encoder)))
        model.compile(loss=head.loss)
        if weights is not None:
            model.set_weights(weights[name])
        built[name] = head, model
    keras.mixed_precision.set_global_policy('float32')
    return built


@pytest.fixture(scope='module')
def models(tiny_bert_config_path):
    float32 = _build(tiny_bert_config_path, 'float32')
    weights = {name: model.get_weights() for name, (_, model) in float32.items()}
    bfloat16 = _build(tiny_bert_config_path, 'mixed_bfloat16', weights)
    keras.mixed_precision.set_global_policy('float32')
    return {'float32': float32, 'mixed_bfloat16': bfloat16}


@pytest.fixture(scope='module')
def batch():
    """Token ids (6, 12) with lengths 4..12 ([CLS] 2, [SEP] 3, padding 0), tag and span targets."""
    rng = np.random.default_rng(0)
    lengths = np.array([12, 4, 7, 9, 12, 5])
    ids = np.zeros((6, 12), np.int32)
    for row, length in enumerate(lengths):
        ids[row, :length] = [2] + list(rng.integers(5, 64, length - 2)) + [3]
    tags = rng.integers(0, 5, (6, 11)).astype(np.int32)
    spans = [[(0, 2, 'A'), (3, 4, 'B')] if length > 6 else [(1, 2, 'B')] for length in lengths]
    return ids, lengths, tags, spans


def _targets(head, batch):
    ids, _, tags, spans = batch
    if head.kind == 'tags':
        return tags
    return head.batch_targets(spans, ids.shape[1])


def _loss_and_gradient(head, model, batch):
    ids = batch[0]
    with tf.GradientTape() as tape:
        output = model([ids, 0 * ids])
        loss = model.compiled_loss(tf.constant(_targets(head, batch)), output)
    gradient = tape.gradient(loss, model.trainable_weights)
    return output, float(loss), np.concatenate([tf.reshape(g, [-1]).numpy() for g in gradient])


def _real(output, name, lengths):
    """The output at real positions only (tags: pieces; spans: cells of pieces), float64."""
    output = np.asarray(output, np.float64)
    keep = np.arange(output.shape[-2])[None] < (lengths - 2)[:, None]           # (batch, n - 1)
    if name in ('crf', 'softmax'):
        return output[keep]
    cells = keep[:, None, :, None] & keep[:, None, None, :]
    return output[np.broadcast_to(cells, output.shape) & (output > -np.inf)]


@pytest.mark.parametrize('name', HEADS)
def test_every_head_trains_under_mixed_bfloat16_like_float32(models, batch, name):
    """Finite loss, float32 output, scores / loss / gradient within the stated tolerances, and
    the bf16 model really computes in bf16 (its outputs are not float32's bit for bit)."""
    head32, model32 = models['float32'][name]
    head16, model16 = models['mixed_bfloat16'][name]
    assert model16.layers[3].compute_dtype == 'bfloat16'              # the encoder's embeddings
    output32, loss32, gradient32 = _loss_and_gradient(head32, model32, batch)
    output16, loss16, gradient16 = _loss_and_gradient(head16, model16, batch)
    assert np.isfinite(loss16) and np.all(np.isfinite(gradient16))
    scores32, scores16 = (_real(o, name, batch[1]) for o in (output32, output16))
    error = np.max(np.abs(scores16 - scores32)) / np.max(np.abs(scores32))
    assert 0 < error <= SCORE_TOLERANCE, f'{name}: scores off by {error:.3g} of their range'
    assert loss16 == pytest.approx(loss32, rel=LOSS_TOLERANCE)
    gap = np.linalg.norm(gradient16 - gradient32) / np.linalg.norm(gradient32)
    assert gap <= GRADIENT_TOLERANCE, f'{name}: gradient off by {gap:.3g} in norm'
    assert output16.dtype == tf.float32, f'{name}: the model output must be float32'


def test_crf_paths_under_mixed_bfloat16_equal_float32_where_the_margin_is_clear(models, batch):
    """Viterbi paths of the bf16 model equal float32's for every sequence whose best path beats
    the runner-up by more than twice the largest path-score change that bf16 scores can cause
    (brute force over all 5**l paths); at least half the sequences are that clear."""
    import itertools
    ids, lengths = batch[0], batch[1] - 2
    outputs, paths = {}, {}
    for precision in ('float32', 'mixed_bfloat16'):
        head, model = models[precision]['crf']
        outputs[precision] = np.asarray(model.predict([ids, 0 * ids], verbose=0), np.float64)
        paths[precision] = head.crf.decode(outputs[precision], lengths=lengths)
    trans = models['float32']['crf'][0].crf.trans.numpy()
    clear = 0
    for row, length in enumerate(lengths):
        if length > 6:
            continue                                        # brute force up to 5**6 paths
        emissions = outputs['float32'][row, :length]
        scores = sorted(emissions[np.arange(length), p].sum() + trans[p[:-1], p[1:]].sum()
                        for p in map(np.array, itertools.product(range(5), repeat=length)))
        change = np.abs(outputs['mixed_bfloat16'][row, :length] - emissions).max(1).sum()
        if scores[-1] - scores[-2] > 2 * change:
            clear += 1
            assert np.array_equal(paths['float32'][row], paths['mixed_bfloat16'][row])
    assert clear >= (lengths <= 6).sum() / 2


@pytest.mark.parametrize('name', ['global_pointer', 'efficient_global_pointer'])
def test_spans_under_mixed_bfloat16_equal_float32_where_the_margin_is_clear(models, batch, name):
    """Every cell scoring clear of the threshold 0 by more than the score tolerance is decided
    alike (span or not) by both models; at least 80% of the cells are that clear."""
    ids, lengths = batch[0], batch[1]
    scores = [_real(models[p][name][1].predict([ids, 0 * ids], verbose=0), name, lengths)
              for p in ('float32', 'mixed_bfloat16')]
    clear = np.abs(scores[0]) > SCORE_TOLERANCE * np.abs(scores[0]).max()
    assert clear.mean() >= 0.8
    assert np.array_equal(scores[0][clear] > 0, scores[1][clear] > 0)


@pytest.mark.parametrize('saved, loaded', [('mixed_bfloat16', 'float32'),
                                           ('float32', 'mixed_bfloat16')])
def test_models_saved_under_one_precision_reload_under_the_other(models, batch, tmp_path, saved,
                                                                 loaded):
    """``load_model`` rebuilds each head's saved model in the current precision (its encoder
    computes in it), with predictions equal to the model built in that precision within the score
    tolerance (a float32 model cannot say which of its layers were float32 on purpose), and plain
    ``keras.models.load_model`` still reads it."""
    ids, lengths = batch[0], batch[1]
    for name in HEADS:
        path = os.path.join(tmp_path, f'{name}.h5')
        models[saved][name][1].save(path, include_optimizer=False)
        set_precision(loaded)
        model = load_model(path)
        assert model.layers[3].compute_dtype == ('float32' if loaded == 'float32' else 'bfloat16')
        expected = models[loaded][name][1].predict([ids, 0 * ids], verbose=0)
        got = model.predict([ids, 0 * ids], verbose=0)
        error = np.abs(_real(got, name, lengths) - _real(expected, name, lengths)).max()
        assert error <= SCORE_TOLERANCE * np.abs(_real(expected, name, lengths)).max(), name
        plain = keras.models.load_model(path, compile=False)
        assert plain.predict([ids, 0 * ids], verbose=0).shape == got.shape


@pytest.mark.parametrize('saved', ['mixed_bfloat16', 'float32'])
def test_a_model_loaded_for_inference_keeps_bf16_weights_and_predicts_the_same(models, batch,
                                                                               tmp_path, saved):
    """``load_model(..., inference_only=True)`` under mixed_bfloat16: the encoder's layers hold
    bf16 weights (rounded once, no cast at each call), the heads float32 ones, and every head
    predicts exactly what the mixed model predicts; under float32 it changes nothing."""
    ids = batch[0]
    for name in HEADS:
        path = os.path.join(tmp_path, f'{name}.h5')
        models[saved][name][1].save(path, include_optimizer=False)
        set_precision('mixed_bfloat16')
        mixed = load_model(path)
        inference = load_model(path, inference_only=True)
        np.testing.assert_array_equal(inference.predict_on_batch([ids, 0 * ids]),
                                      mixed.predict_on_batch([ids, 0 * ids]))
        encoder = [layer for layer in inference.layers
                   if layer.name.startswith(('Embedding-', 'Transformer-')) and layer.weights]
        assert {w.dtype for layer in encoder for w in layer.weights} == {tf.bfloat16}, \
            [(layer.name, layer.dtype_policy.name) for layer in encoder]
        assert len(encoder) >= 2 * TINY_LAYERS + 3, name          # every encoder layer
        head_weights = [w for layer in inference.layers if layer.name.startswith(('Tag-', 'CRF',
                                                                                  'Span-'))
                        for w in layer.weights]
        assert head_weights and {w.dtype for w in head_weights} == {tf.float32}, name
        set_precision('float32')
        assert {w.dtype for w in load_model(path, inference_only=True).weights} == {tf.float32}


def test_set_precision_auto_reads_the_cpu_flags(tmp_path):
    cpuinfo = tmp_path / 'cpuinfo'
    cpuinfo.write_text('processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 fma\n')
    assert native_bf16(str(cpuinfo)) == ('avx512_bf16',)
    line = set_precision('auto', str(cpuinfo))
    assert keras.mixed_precision.global_policy().name == 'mixed_bfloat16'
    assert line == f'precision: auto -> mixed_bfloat16 (avx512_bf16 in {cpuinfo})'
    cpuinfo.write_text('flags\t\t: fpu avx2 fma\nflags\t\t: amx_bf16 amx_tile\n')
    assert native_bf16(str(cpuinfo)) == ('amx_bf16',)
    cpuinfo.write_text('flags\t\t: fpu avx2 fma\n')
    line = set_precision('auto', str(cpuinfo))
    assert keras.mixed_precision.global_policy().name == 'float32'
    assert line.startswith('precision: auto -> float32 (no amx_bf16/avx512_bf16 in')
    cpuinfo.write_text('processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16 i8mm\n'
                       'CPU implementer\t: 0x41\nCPU part\t: 0xd40\n')            # Graviton 3
    assert native_bf16(str(cpuinfo)) == ()
    assert set_precision('auto', str(cpuinfo)) == (
        f"precision: auto -> float32 (Arm's bf16 in {cpuinfo}, whose speed and accuracy are not "
        f"measured: --precision mixed_bfloat16 to try it)")
    assert keras.mixed_precision.global_policy().name == 'float32'
    cpuinfo.write_text('processor\t: 0\nFeatures\t: fp asimd fphp asimdhp\n')       # Graviton 2
    assert 'bf16 would be emulated' in set_precision('auto', str(cpuinfo))
    assert native_bf16(str(tmp_path / 'missing')) == ()
    assert set(native_bf16()) <= set(NATIVE_BF16_FLAGS)
    with pytest.raises(ValueError, match=r"set_precision: precision must be one of .*'bf16'"):
        set_precision('bf16')


def _non_float32_weights(path):
    """The weights of the Keras HDF5 file at ``path`` not stored as float32: [(name, dtype)]."""
    import h5py
    found = []
    with h5py.File(path, 'r') as f:
        f['model_weights'].visititems(lambda name, item: found.append((name, str(item.dtype)))
                                      if isinstance(item, h5py.Dataset)
                                      and item.dtype != np.float32 else None)
    return found


def _mixed_tagger(folder):
    """A tiny random CRF tagger built and saved under mixed_bfloat16 (as ``--precision auto``
    trains on a bf16 CPU), then loaded as the NER script loads it to calibrate it."""
    from crf_lr.serving.tagger import Tagger
    from helpers.tiny_models import save_random_tagger
    set_precision('mixed_bfloat16')
    keras.utils.set_random_seed(0)
    return Tagger.load(save_random_tagger(folder, 'crf', ['LOC', 'PER'], 'BIO', 32, crf_scale=1.0))


def _reload_and_compare(tagger, folder, texts):
    """``folder`` (a saved Tagger) loads in float32 and in mixed_bfloat16, with ``tagger``'s
    temperature and its scores within the bf16 tolerance."""
    from crf_lr.serving.tagger import Tagger
    expected = np.concatenate([w.output for ws in tagger.run(texts) for w in ws])
    for precision in ('float32', 'mixed_bfloat16'):
        set_precision(precision)
        loaded = Tagger.load(folder)
        assert loaded.head.temperature == tagger.head.temperature
        got = np.concatenate([w.output for ws in loaded.run(texts) for w in ws])
        assert np.abs(got - expected).max() <= SCORE_TOLERANCE * np.abs(expected).max(), precision
        assert len(loaded.predict(texts)) == len(texts)


def test_a_tagger_calibrated_under_mixed_bfloat16_saves_float32_weights_that_load_anywhere(
        tmp_path):
    """The NER script's path under ``--precision auto``: train under mixed_bfloat16, load the
    best model (for prediction: bf16 encoder weights), calibrate, save. The file holds float32
    weights only (it held bf16 ones that neither precision could load) and reloads in float32
    and mixed_bfloat16; loaded with ``inference_only=False`` the model saves back bit for bit."""
    import h5py
    from crf_lr.evaluation.calibration import calibrate
    from crf_lr.serving.tagger import Tagger
    texts = ['张三去北京工作。', '我们喜欢上海的天气', '今天很好']
    tagger = _mixed_tagger(str(tmp_path / 'run'))
    calibrate(tagger, ([list(t) for t in texts], [[(0, 2, 'PER'), (3, 5, 'LOC')], [], []]))
    tagger.save(str(tmp_path / 'calibrated'))
    assert _non_float32_weights(str(tmp_path / 'calibrated' / 'model.h5')) == []
    assert sorted(os.listdir(tmp_path / 'calibrated')) == ['labels.json', 'model.h5', 'vocab.txt']
    _reload_and_compare(tagger, str(tmp_path / 'calibrated'), texts)
    set_precision('mixed_bfloat16')
    exact = Tagger.load(str(tmp_path / 'run' / 'model'), inference_only=False)
    exact.save(str(tmp_path / 'exact'))
    with h5py.File(tmp_path / 'run' / 'model' / 'model.h5', 'r') as trained, \
            h5py.File(tmp_path / 'exact' / 'model.h5', 'r') as saved:
        names = []
        trained['model_weights'].visititems(
            lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
        for name in names:
            np.testing.assert_array_equal(saved['model_weights'][name][()],
                                          trained['model_weights'][name][()], name)


def test_a_model_h5_with_bf16_weights_loads_widened_to_float32(tmp_path):
    """A ``model.h5`` that Keras wrote from a model loaded for prediction under mixed_bfloat16
    (bf16 weights, the encoder's layers under the ``bfloat16`` policy: what crf_lr wrote before
    ``save_model``) loads in float32 and in mixed_bfloat16, its weights the bf16 values exactly,
    and predicts what the model it was saved from predicts."""
    import shutil
    texts = ['张三去北京工作。', '我们喜欢上海的天气']
    tagger = _mixed_tagger(str(tmp_path / 'run'))
    shutil.copytree(tmp_path / 'run' / 'model', tmp_path / 'old')
    tagger.model.save(str(tmp_path / 'old' / 'model.h5'), include_optimizer=False)
    assert _non_float32_weights(str(tmp_path / 'old' / 'model.h5'))          # the old files
    _reload_and_compare(tagger, str(tmp_path / 'old'), texts)
    set_precision('float32')
    widened = load_model(str(tmp_path / 'old' / 'model.h5'))
    for saved, loaded in zip(tagger.model.weights, widened.weights):
        np.testing.assert_array_equal(np.asarray(saved, np.float32), loaded.numpy(), saved.name)
