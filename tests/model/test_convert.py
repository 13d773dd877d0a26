"""HF -> bert4keras conversion, checked against the original implementation.

Oracles: tests/fixtures/reference_outputs.npz, made by tools/make_reference_outputs.py with
Hugging Face transformers + PyTorch (token ids from the HF tokenizer, every hidden state, pooler
output) on real sentences; bert4keras's own variable mapping for the checkpoint names; NumPy for
the readers. No PyTorch is needed here.
"""
import io
import os
import pickle
import sys
import types

import numpy as np
import pytest

from crf_lr.model.convert import (ConversionError, RestrictedUnpickler, convert_checkpoint,
                                  google_config, main, read_safetensors, read_torch_bin)
from crf_lr.model.pretrained import packaged_checkpoint, packaged_source
from helpers.checkpoint_files import TINY_HF_CONFIG, tiny_hf_bert, torch_zip, write_safetensors
from helpers.paths import FIXTURES

FIXTURE = str(FIXTURES / 'reference_outputs.npz')
MODELS = {'minilm': 'minilm-en', 'albert': 'albert-tiny-zh'}
TOLERANCE = 1e-4


# ----------------------------------------------------------------------------- real models

@pytest.fixture(scope='module')
def reference():
    with np.load(FIXTURE) as data:
        return dict(data)


@pytest.fixture(scope='module')
def converted(tmp_path_factory):
    """Both packaged models converted once: MiniLM by convert_checkpoint, the ALBERT through
    the cache of packaged_checkpoint."""
    root = tmp_path_factory.mktemp('converted')
    return {'minilm': convert_checkpoint(packaged_source('minilm-en'), str(root / 'minilm')),
            'albert': packaged_checkpoint('albert-tiny-zh', cache_dir=str(root / 'cache'))}


@pytest.fixture(scope='module')
def loaded(converted):
    """Each converted model loaded by bert4keras, unchanged (with the pooler): name -> Transformer.
    """
    from bert4keras.models import build_transformer_model
    return {name: build_transformer_model(out.config_path, out.checkpoint_path, with_pool=True,
                                          model=out.model_type, return_keras_model=False)
            for name, out in converted.items()}


@pytest.fixture(scope='module')
def outputs(loaded, reference):
    """bert4keras's hidden states and pooler output of each converted model on the fixture ids."""
    from crf_lr.compat import keras
    from crf_lr.model.finetune import hidden_states_model
    results = {}
    for name, transformer in loaded.items():
        model = transformer.model
        probe = keras.Model(model.inputs, hidden_states_model(model).outputs + [model.output])
        ids = reference[f'{name}/token_ids']
        predicted = [np.asarray(x) for x in probe([ids, np.zeros_like(ids)], training=False)]
        results[name] = (np.stack(predicted[:-1]), predicted[-1])
    return results


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(MODELS))
def test_hidden_states_match_original_implementation(name, reference, outputs):
    hidden, _ = outputs[name]
    expected = reference[f'{name}/hidden']
    stride = int(reference[f'{name}/dim_stride'])
    lengths = reference[f'{name}/lengths']
    real = (np.arange(hidden.shape[2])[None, :] < lengths[:, None])[None, :, :, None]
    assert hidden.shape[0] == expected.shape[0]          # embedding output + every layer
    diffs = np.abs(hidden[..., ::stride] - expected).max(axis=(1, 2, 3), where=real, initial=0)
    assert diffs.max() < TOLERANCE, f'{name}: max abs difference per hidden state {diffs}'


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(MODELS))
def test_pooler_matches_original_implementation(name, reference, outputs):
    _, pooled = outputs[name]
    np.testing.assert_allclose(pooled, reference[f'{name}/pooler'], atol=TOLERANCE, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(MODELS))
def test_bert4keras_tokenizer_gives_the_original_ids(name, reference, converted):
    from bert4keras.tokenizers import Tokenizer
    tokenizer = Tokenizer(converted[name].vocab_path, do_lower_case=True)
    for sentence, ids, length in zip(reference[f'{name}/sentences'],
                                     reference[f'{name}/token_ids'], reference[f'{name}/lengths']):
        assert tokenizer.encode(str(sentence))[0] == ids[:length].tolist(), sentence


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(MODELS))
def test_checkpoint_holds_exactly_bert4keras_variables(name, converted, loaded):
    """Every name bert4keras maps (encoder + pooler) is in the checkpoint with the shape of its
    Keras weight, and nothing else is."""
    from crf_lr.compat import tf
    transformer = loaded[name]
    expected = {}
    for layer, names in transformer.variable_mapping().items():
        if layer in transformer.layers:
            for weight, var in zip(transformer.layers[layer].trainable_weights, names):
                expected[var] = tuple(weight.shape)
    stored = dict(tf.train.list_variables(converted[name].checkpoint_path))
    assert {k: tuple(v) for k, v in stored.items()} == expected


@pytest.mark.slow
def test_packaged_checkpoint_is_converted_once(converted):
    out = converted['albert']
    index = out.checkpoint_path + '.index'
    before = os.stat(index).st_mtime_ns
    again = packaged_checkpoint('albert-tiny-zh', cache_dir=os.path.dirname(os.path.dirname(index)))
    assert again == out and os.stat(index).st_mtime_ns == before
    assert out.model_type == 'albert' and 'crf.transitions' in out.ignored
    with pytest.raises(ValueError, match='unknown packaged model'):
        packaged_source('gpt-9')


# ----------------------------------------------------------------------------- config mapping

def test_gelu_variants_map_to_the_matching_bert4keras_activation():
    from bert4keras.backend import gelu_tanh
    from crf_lr.compat import keras
    from crf_lr.speed.fused_kernels import gelu_erf  # bert4keras's, one kernel in training calls
    base = dict(model_type='bert', vocab_size=8, hidden_size=4, num_hidden_layers=1,
                num_attention_heads=1, intermediate_size=8)
    for hf_act, function in (('gelu', gelu_erf), ('gelu_new', gelu_tanh),
                             ('gelu_pytorch_tanh', gelu_tanh)):
        _, config = google_config({**base, 'hidden_act': hf_act})
        assert keras.activations.get(config['hidden_act']) is function
    x = np.linspace(-3, 3, 7).astype('float32')   # the two GELUs really differ
    assert np.abs(keras.backend.eval(gelu_erf(x)) - keras.backend.eval(gelu_tanh(x))).max() > 1e-4


def test_config_errors_and_epsilon_warning():
    base = dict(model_type='albert', vocab_size=8, hidden_size=4, num_hidden_layers=2,
                num_attention_heads=1, intermediate_size=8, embedding_size=2)
    _, config = google_config(base)
    assert (config['embedding_size'], config['num_hidden_groups'], config['hidden_act']) == \
        (2, 1, 'gelu_erf')
    without_hidden = {k: v for k, v in base.items() if k != 'hidden_size'}
    for config, message in (({**base, 'model_type': 'roberta'}, "model_type 'roberta'"),
                            ({**base, 'model_type': 'gpt2'}, "model_type 'gpt2'"),
                            ({**base, 'num_hidden_groups': 2}, 'num_hidden_groups=2'),
                            ({**base, 'hidden_act': 'mish'}, "hidden_act 'mish'"),
                            ({**base, 'position_embedding_type': 'relative_key'}, 'relative_key'),
                            (without_hidden, "'hidden_size' is missing")):
        with pytest.raises(ConversionError, match=message):
            google_config(config, 'some/config.json')
    with pytest.warns(UserWarning, match='layer_norm_eps=1e-05'):
        google_config({**base, 'layer_norm_eps': 1e-5})


# ----------------------------------------------------------------------------- readers


def test_read_safetensors_dtypes_and_bfloat16(tmp_path):
    rng = np.random.RandomState(0)
    a = rng.randn(3, 5).astype('float32')
    half = rng.randn(4).astype('float16')
    ints = np.arange(6, dtype='int64').reshape(2, 3)
    bf16 = np.array([1.0, -2.5, 3.140625], 'float32')          # exactly representable
    bf16_bits = (bf16.view('<u4') >> 16).astype('<u2')
    path = str(tmp_path / 'm.safetensors')
    write_safetensors(path, {'a': (a, None), 'h': (half, None), 'i': (ints, None),
                              'b': (bf16_bits, 'BF16')})
    read = read_safetensors(path)
    np.testing.assert_array_equal(read['a'], a)
    np.testing.assert_array_equal(read['h'], half)
    np.testing.assert_array_equal(read['i'], ints)
    np.testing.assert_array_equal(read['b'], bf16)
    with open(path, 'r+b') as f:                                  # truncate the data
        f.truncate(os.path.getsize(path) - 4)
    with pytest.raises(ConversionError, match='does not fit its byte range'):
        read_safetensors(path)


class _FakeStorage:
    """Pickled by the fake ``torch`` module below as ``torch.FloatStorage``."""


def test_read_torch_bin_strided_views_without_torch(tmp_path, monkeypatch):
    """Pickle a state dict the way torch does (rebuild function + persistent storage ids), with
    a fake ``torch`` module standing in only while pickling, and read it back."""
    fake_torch = types.ModuleType('torch')
    fake_utils = types.ModuleType('torch._utils')

    def _rebuild_tensor_v2(*args):
        raise AssertionError('never called: only pickled by reference')

    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = ('torch._utils',
                                                                      '_rebuild_tensor_v2')
    fake_utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    storage_cls = type('FloatStorage', (), {'__module__': 'torch'})
    fake_torch.FloatStorage = storage_cls
    monkeypatch.setitem(sys.modules, 'torch', fake_torch)
    monkeypatch.setitem(sys.modules, 'torch._utils', fake_utils)

    storage = np.arange(12, dtype='<f4')

    class Tensor:
        def __init__(self, offset, size, stride):
            self.args = (offset, size, stride)

        def __reduce__(self):
            return _rebuild_tensor_v2, (('storage', storage_cls, '0', 'cpu', 12), *self.args,
                                        False, __import__('collections').OrderedDict())

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return obj if isinstance(obj, tuple) and obj and obj[0] == 'storage' else None

    buffer = io.BytesIO()
    Pickler(buffer, protocol=2).dump({'matrix': Tensor(0, (3, 4), (4, 1)),
                                      'transposed': Tensor(0, (4, 3), (1, 4)),
                                      'row_slice': Tensor(5, (2,), (2,))})
    monkeypatch.delitem(sys.modules, 'torch')
    monkeypatch.delitem(sys.modules, 'torch._utils')
    path = str(tmp_path / 'pytorch_model.bin')
    torch_zip(path, buffer.getvalue(), {'0': storage})
    read = read_torch_bin(path)
    np.testing.assert_array_equal(read['matrix'], storage.reshape(3, 4))
    np.testing.assert_array_equal(read['transposed'], storage.reshape(3, 4).T)
    np.testing.assert_array_equal(read['row_slice'], [5, 7])


class _Malicious:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f'touch {self.marker}',)


def test_restricted_unpickler_refuses_code(tmp_path):
    marker = tmp_path / 'pwned'
    payload = pickle.dumps({'weight': _Malicious(marker)}, protocol=2)
    with pytest.raises(pickle.UnpicklingError,
                       match=r'refusing to load global (posix|os|nt)\.system'):
        RestrictedUnpickler(io.BytesIO(payload), None, 'evil.bin').load()
    path = str(tmp_path / 'pytorch_model.bin')
    torch_zip(path, payload, {})
    with pytest.raises(pickle.UnpicklingError, match='refusing to load global'):
        read_torch_bin(path)
    with pytest.raises(pickle.UnpicklingError, match='builtins.eval'):
        RestrictedUnpickler(io.BytesIO(b'cbuiltins\neval\n(S"1"\ntR.'), None, 'x').load()
    assert not marker.exists()
    legacy = tmp_path / 'legacy.bin'
    legacy.write_bytes(pickle.dumps({'a': 1}))
    with pytest.raises(ConversionError, match='not a zip-format PyTorch checkpoint'):
        read_torch_bin(str(legacy))


# ----------------------------------------------------------------------------- bad folders, CLI


def test_cli_converts_and_the_weights_land_transposed(tmp_path, capsys):
    from crf_lr.compat import tf
    src = tiny_hf_bert(str(tmp_path / 'hf'))
    assert main([src, str(tmp_path / 'out')]) == 0
    printed = capsys.readouterr().out
    assert "model='bert'" in printed
    ckpt = str(tmp_path / 'out' / 'model.ckpt')
    hf = read_safetensors(os.path.join(src, 'model.safetensors'))
    np.testing.assert_array_equal(tf.train.load_variable(ckpt,
                                                         'bert/encoder/layer_0/intermediate/dense/kernel'),
                                  hf['encoder.layer.0.intermediate.dense.weight'].T)
    np.testing.assert_array_equal(tf.train.load_variable(ckpt, 'bert/embeddings/LayerNorm/gamma'),
                                  hf['embeddings.LayerNorm.weight'])
    with pytest.raises(SystemExit) as exit_info:
        main(['--help'])
    assert exit_info.value.code == 0 and 'Hugging Face' in capsys.readouterr().out


def test_prefixed_keys_and_gamma_beta_names(tmp_path):
    from crf_lr.compat import tf
    src = tiny_hf_bert(str(tmp_path / 'hf'), prefix='bert.', norm_names=('gamma', 'beta'))
    out = convert_checkpoint(src, str(tmp_path / 'out'))
    hf = read_safetensors(os.path.join(src, 'model.safetensors'))
    for hf_name, tf_name in (('bert.encoder.layer.0.output.LayerNorm.beta',
                              'bert/encoder/layer_0/output/LayerNorm/beta'),
                             ('bert.pooler.dense.weight', 'bert/pooler/dense/kernel')):
        expected = hf[hf_name].T if tf_name.endswith('kernel') else hf[hf_name]
        np.testing.assert_array_equal(tf.train.load_variable(out.checkpoint_path, tf_name),
                                      expected)
    assert out.ignored == ()
    with pytest.raises(ConversionError, match='must differ from the source'):
        convert_checkpoint(src, src)


@pytest.mark.parametrize('case, message', [
    ('no_config', r'config\.json: missing'),
    ('no_vocab', r'vocab\.txt: missing'),
    ('no_weights', 'no model.safetensors or pytorch_model.bin'),
    ('roberta', "model_type 'roberta' is not supported"),
    ('shape', r"'encoder.layer.0.intermediate.dense.weight' has shape \(6, 4\), expected \(8, 4\)"),
    ('missing_tensor', r"missing, e.g. \['encoder.layer.0.output.dense.weight'\]"),
    ('no_folder', 'source folder does not exist'),
])
def test_bad_folders_give_clear_errors(tmp_path, capsys, case, message):
    config = {**TINY_HF_CONFIG, 'model_type': 'roberta'} if case == 'roberta' else \
        {**TINY_HF_CONFIG, 'intermediate_size': 8} if case == 'shape' else TINY_HF_CONFIG
    drop = ('encoder.layer.0.output.dense.weight',) if case == 'missing_tensor' else ()
    src = tiny_hf_bert(str(tmp_path / 'hf'), config, drop)
    removed = {'no_config': 'config.json', 'no_vocab': 'vocab.txt',
               'no_weights': 'model.safetensors'}.get(case)
    if removed:
        os.remove(os.path.join(src, removed))
    if case == 'no_folder':
        src = str(tmp_path / 'nowhere')
    with pytest.raises(ConversionError, match=message):
        convert_checkpoint(src, str(tmp_path / 'out'))
    assert main([src, str(tmp_path / 'out2')]) == 1
    assert 'error:' in capsys.readouterr().err
