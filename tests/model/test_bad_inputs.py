"""Bad and edge inputs of the converter, the layers, the losses and span decoding: each gets an
error of the stated class whose message names the file / layer / loss and the argument at fault,
in one readable line, or (where documented) an exact result checked against an oracle.

Every test here but the pickle assembler's control fails on main's code (66 of 67 items, see
docs/reliability.md); new names are imported inside the tests so that the file also runs
against the old code and counts them.
"""
import json
import os
import struct
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

import crf_lr
from crf_lr.compat import keras, tf
from crf_lr.model.convert import (ConversionError, convert_checkpoint, google_config,
                                  read_safetensors)
from crf_lr.model.convert import read_torch_bin
from crf_lr.model.crf import ConditionalRandomField, crf_log_likelihood
from crf_lr.model.global_pointer import EfficientGlobalPointer, GlobalPointer
from crf_lr.model.losses import (global_pointer_crossentropy, multilabel_categorical_crossentropy,
                                 sparse_global_pointer_crossentropy,
                                 sparse_multilabel_categorical_crossentropy)
from crf_lr.decoding.spans import decode_spans
from helpers.float16_probe import assert_float32_scores_equal, large_activations
from helpers.checkpoint_files import tiny_hf_bert, torch_zip, write_safetensors
from helpers.crf_oracles import path_scores

READABLE = 600          # characters: an error message stays one readable line or two


def _check_message(error, *names):
    message = str(error.value)
    assert len(message) < READABLE, f'{len(message)} characters: {message[:200]}...'
    for name in names:
        assert name in message, f'{name!r} not in {message!r}'


@pytest.fixture
def check_numerics():
    """The switch on for one test, restored afterwards."""
    with crf_lr.set_check_numerics(True):
        yield


# ----------------------------------------------------------------------------- safetensors

def _raw_safetensors(path, header, data=b'\0' * 16):
    """A safetensors file with exactly this header (any JSON) and data bytes."""
    encoded = (header if isinstance(header, str) else json.dumps(header)).encode()
    path.write_bytes(struct.pack('<Q', len(encoded)) + encoded + data)
    return str(path)


F32_4 = {'dtype': 'F32', 'shape': [4], 'data_offsets': [0, 16]}
LONG_NAME = 'w' * 100_000


@pytest.mark.parametrize('header, fault', [
    ([F32_4], 'header is a JSON list'),
    ({'a': 5}, 'dtype, shape and data_offsets'),
    ({'a': {'shape': [4], 'data_offsets': [0, 16]}}, 'dtype, shape and data_offsets'),
    ({'a': {'dtype': 'F32', 'data_offsets': [0, 16]}}, 'dtype, shape and data_offsets'),
    ({'a': {'dtype': 'F32', 'shape': [4]}}, 'dtype, shape and data_offsets'),
    ({'a': {**F32_4, 'dtype': ['F32']}}, 'unsupported dtype'),
    ({'a': {**F32_4, 'shape': [-2, -2]}}, 'must be a list of ints >= 0'),
    ({'a': {**F32_4, 'shape': [2.0, 2]}}, 'must be a list of ints >= 0'),
    ({'a': {**F32_4, 'data_offsets': [-8, 8]}}, 'with 0 <= begin <= end'),
    ({'a': {**F32_4, 'shape': [-4], 'data_offsets': [16, 0]}}, 'must be a list of ints >= 0'),
    ({'a': {**F32_4, 'data_offsets': [16, 0]}}, 'with 0 <= begin <= end'),
    ({'a': {**F32_4, 'data_offsets': [16, 32]}}, 'the data holds 16 bytes'),
    ({'a': {**F32_4, 'shape': [3]}}, 'needs 12 bytes'),
    ({'a': F32_4, 'b': {**F32_4, 'shape': [2], 'data_offsets': [8, 16]}}, "'a' and 'b' overlap"),
    ({LONG_NAME: {'dtype': 'F32', 'shape': [4]}}, 'www...www'),
    ('[' * 100_000, 'not valid JSON'),
], ids=['list', 'entry-not-object', 'no-dtype', 'no-shape', 'no-offsets', 'dtype-list',
        'negative-shape', 'float-shape', 'negative-offset', 'reversed-offsets-negative-shape',
        'reversed-offsets', 'past-the-end', 'size-mismatch', 'overlap', 'long-name', 'deep-json'])
def test_malformed_safetensors_headers_name_the_file_and_the_tensor(tmp_path, header, fault):
    path = _raw_safetensors(tmp_path / 'model.safetensors', header)
    with pytest.raises(ConversionError) as error:
        read_safetensors(path)
    tensor = [] if not isinstance(header, dict) or LONG_NAME in header else ["tensor", "'a'"]
    _check_message(error, path, fault, *tensor)


# ----------------------------------------------------------------------------- pytorch_model.bin

class _Global:
    def __init__(self, module, name):
        self.module, self.name = module, name


class _Call:
    def __init__(self, function, *args):
        self.function, self.args = function, args


class _PersistentId(tuple):
    pass


def _opcodes(value):
    """Pickle bytes of a literal built only from the opcodes a torch state dict uses."""
    if isinstance(value, _Global):
        return f'c{value.module}\n{value.name}\n'.encode()
    if isinstance(value, _Call):
        return _opcodes(value.function) + _opcodes(tuple(value.args)) + b'R'
    if isinstance(value, _PersistentId):
        return _opcodes(tuple(value)) + b'Q'
    if isinstance(value, bool):
        return b'I0%d\n' % value
    if isinstance(value, int):
        return b'I%d\n' % value
    if isinstance(value, str):
        raw = value.encode()
        return b'X' + struct.pack('<I', len(raw)) + raw
    if isinstance(value, tuple):
        return b'(' + b''.join(map(_opcodes, value)) + b't'
    if isinstance(value, dict):
        return b'}(' + b''.join(_opcodes(k) + _opcodes(v) for k, v in value.items()) + b'u'
    raise TypeError(value)


def _tensor(offset, size, stride, numel, key='0'):
    storage = _PersistentId(('storage', _Global('torch', 'FloatStorage'), key, 'cpu', numel))
    return _Call(_Global('torch._utils', '_rebuild_tensor_v2'), storage, offset, tuple(size),
                 tuple(stride), False, _Call(_Global('collections', 'OrderedDict')))


def _torch_bin(folder, state, storage=np.arange(4, dtype='<f4'), compress=False):
    """A pytorch_model.bin in ``folder`` whose data.pkl holds ``state`` (opcode literals)."""
    path = str(folder / 'pytorch_model.bin')
    payload = b'\x80\x02' + _opcodes(state) + b'.'
    if compress:
        with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED) as z:
            z.writestr('archive/data.pkl', payload)
            z.writestr('archive/data/0', storage.tobytes())
    else:
        torch_zip(path, payload, {'0': storage})
    return path


def test_a_well_formed_torch_pickle_of_the_test_assembler_reads_back(tmp_path):
    """The assembler above writes what torch writes: a valid file reads (so the cases below
    fail for their fault, not for the assembler)."""
    path = _torch_bin(tmp_path,
                      {'w': _tensor(1, (3,), (1,), 4), 't': _tensor(0, (2, 2), (1, 2), 4)})
    read = read_torch_bin(path)
    np.testing.assert_array_equal(read['w'], [1, 2, 3])
    np.testing.assert_array_equal(read['t'], [[0, 2], [1, 3]])


@pytest.mark.parametrize('state, fault', [
    ({'w': _Call(_Global('os', 'system'), 'echo pwned')}, 'refusing to load global os.system'),
    ({'w': _tensor(0, (2 ** 40,), (0,), 1)}, 'does not fit its storage of 1 elements'),
    ({'w': _tensor(0, (2 ** 20,), (0,), 4)}, 'does not fit its storage of 4 elements'),
    ({'w': _tensor(-1, (2,), (1,), 4)}, 'expected ints >= 0'),
    ({'w': _tensor(0, (2,), (-1,), 4)}, 'expected ints >= 0'),
    ({'w': _tensor(0, ('2',), (1,), 4)}, 'expected ints >= 0'),
    ({'w': _tensor(0, (2,), (1, 1), 4)}, 'one stride per dimension'),
    ({'w': _tensor(0, (2,), (1,), -5)}, 'unexpected persistent id'),
    ({'w': _Call(_Global('torch._utils', '_rebuild_tensor_v2'), 7, 0, (1,), (1,))},
     'storage must be a persistent storage id'),
    ({'w': 'a string'}, "entry 'w' of the state dict is a str"),
    ({'w': _Call(_Global('torch', 'FloatStorage'))}, 'not a plain PyTorch state-dict pickle'),
], ids=['code', 'stride0-4TiB', 'stride0-4MiB', 'negative-offset', 'negative-stride',
        'string-size', 'ragged-stride', 'negative-numel', 'storage-not-pid', 'not-a-tensor',
        'call-storage'])
def test_malicious_or_malformed_torch_pickles_are_conversion_errors(tmp_path, state, fault):
    path = _torch_bin(tmp_path, state)
    tracemalloc.start()
    try:
        with pytest.raises(ConversionError) as error:
            read_torch_bin(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    _check_message(error, path, fault)
    assert peak < 2 ** 20, f'{peak} bytes allocated before the refusal'   # nothing amplified


def test_a_truncated_pickle_is_refused(tmp_path):
    path = _torch_bin(tmp_path, {'w': _tensor(0, (4,), (1,), 4)})
    with zipfile.ZipFile(path) as z:
        payload = z.read('archive/data.pkl')
    torch_zip(path, payload[:-6], {'0': np.arange(4, dtype='<f4')})
    with pytest.raises(ConversionError) as error:
        read_torch_bin(path)
    _check_message(error, path, 'truncated')


def test_a_compressed_zip_member_is_refused(tmp_path):
    """4 MB of zeros deflate to a few kB: a zip bomb in small."""
    path = _torch_bin(tmp_path, {'w': _tensor(0, (2 ** 20,), (1,), 2 ** 20)},
                      storage=np.zeros(2 ** 20, '<f4'), compress=True)
    assert os.path.getsize(path) < 2 ** 15
    with pytest.raises(ConversionError) as error:
        read_torch_bin(path)
    _check_message(error, path, "zip member 'archive/data.pkl' is compressed")


def test_cli_refuses_a_malicious_checkpoint_in_one_line(tmp_path):
    src = tmp_path / 'hf'
    tiny_hf_bert(str(src))
    os.remove(src / 'model.safetensors')
    marker = tmp_path / 'pwned'
    path = _torch_bin(src, {'w': _Call(_Global('os', 'system'), f'touch {marker}')})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, '-m', 'crf_lr.convert', str(src), str(tmp_path / 'out')],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 1 and not marker.exists()
    assert run.stderr.startswith('error: ' + path) and 'os.system' in run.stderr
    assert run.stderr.count('\n') == 1 and 'Traceback' not in run.stderr, run.stderr


# ------------------------------------------------------------------------- config, vocab, weights

BASE_CONFIG = dict(model_type='bert', vocab_size=8, hidden_size=4, num_hidden_layers=1,
                   num_attention_heads=1, intermediate_size=8)


@pytest.mark.parametrize('config, fault', [
    ([1, 2], 'JSON list'),
    ({**BASE_CONFIG, 'hidden_size': '4'}, 'hidden_size must be a positive int'),
    ({**BASE_CONFIG, 'num_hidden_layers': 0}, 'num_hidden_layers must be a positive int'),
    ({**BASE_CONFIG, 'vocab_size': True}, 'vocab_size must be a positive int'),
], ids=['list', 'string-size', 'zero-layers', 'bool-vocab'])
def test_a_config_that_would_break_later_is_refused_up_front(config, fault):
    with pytest.raises(ConversionError) as error:
        google_config(config, 'hf/config.json')
    _check_message(error, 'hf/config.json', fault)


def test_a_vocab_that_is_not_utf8_names_the_file(tmp_path):
    src = tiny_hf_bert(str(tmp_path / 'hf'))
    with open(os.path.join(src, 'vocab.txt'), 'ab') as f:
        f.write(b'\xff\xfe bad bytes\n')
    with pytest.raises(ConversionError) as error:
        convert_checkpoint(src, str(tmp_path / 'out'))
    _check_message(error, 'vocab.txt', 'not UTF-8')


def test_a_nan_weight_names_the_file_and_the_tensor(tmp_path):
    src = tiny_hf_bert(str(tmp_path / 'nan'))
    weights = read_safetensors(os.path.join(src, 'model.safetensors'))
    weights['encoder.layer.0.output.dense.bias'][1] = np.nan
    write_safetensors(os.path.join(src, 'model.safetensors'),
                       {k: (v, None) for k, v in weights.items()})
    with pytest.raises(ConversionError) as error:
        convert_checkpoint(src, str(tmp_path / 'out'))
    _check_message(error, 'model.safetensors', 'encoder.layer.0.output.dense.bias', '1 NaN or inf')


@pytest.mark.parametrize('saved', [
    '[1, 2]',
    '{"stamp": {"source": "x"}, "files": ["c", "m", "v"], "model_type": "bert", "ignored": []}',
], ids=['stamp-a-list', 'files-gone'])
def test_a_damaged_converted_cache_is_not_returned(tmp_path, saved):
    from crf_lr.model.pretrained import _STAMP, _cached
    (tmp_path / _STAMP).write_text(saved)
    assert _cached(str(tmp_path), {'source': 'x'}) is None


# ----------------------------------------------------------------------------- the switch

def test_switch_is_a_call_and_a_context_manager_and_adds_nothing_when_off():
    from crf_lr.model.numerics import check_numerics_enabled, guard_finite
    assert check_numerics_enabled()                        # on by default: measured free
    with crf_lr.set_check_numerics(False):
        assert not check_numerics_enabled()
        with crf_lr.set_check_numerics(True):
            assert check_numerics_enabled()
        assert not check_numerics_enabled()
    assert check_numerics_enabled()
    x = tf.constant([1.0, np.nan])
    with crf_lr.set_check_numerics(False):
        assert guard_finite(x, 'f', 'x') is x                          # off: no op at all
    layer = ConditionalRandomField(name='crf')
    layer.build((None, None, 3))
    spec = (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None, 3], tf.float32))

    def checks(enabled):
        with crf_lr.set_check_numerics(enabled):
            graph = tf.function(layer.sparse_loss).get_concrete_function(*spec).graph
        return [op.name for op in graph.get_operations() if 'check_numerics' in op.name]
    assert checks(False) == [] and len(checks(True)) > 0


# ----------------------------------------------------------------------------- CRF

def _crf_case(big):
    rng = np.random.default_rng(3)
    emissions = rng.normal(size=(2, 4, 3)).astype('float32')
    emissions[0, 1, 2] = emissions[1, 2, 0] = big
    tags = rng.integers(0, 3, size=(2, 4))
    tags[0, 1], tags[1, 2] = 2, 1           # row 0's gold path takes the huge score, row 1's not
    return emissions, tags


@pytest.mark.parametrize('big', [1e30, 3e38])
def test_crf_loss_is_exact_for_emissions_of_any_finite_size(big):
    """Documented behaviour, against brute force: log p(tags) does not change when a constant is
    added to every label's score at one position, so the oracle enumerates the paths of the
    emissions minus each position's maximum (float64, no huge numbers left)."""
    emissions, tags = _crf_case(big)
    layer = ConditionalRandomField(name='crf')
    layer.build((None, None, 3))
    transitions = layer.trans.numpy().astype('float64')
    shifted = emissions.astype('float64') - emissions.max(axis=2, keepdims=True)
    expected = []
    for b in range(2):
        table = path_scores(shifted[b], transitions)
        values = np.array(list(table.values()))
        expected.append(np.log(np.exp(values - values.max()).sum()) + values.max()
                        - table[tuple(tags[b])])
    got = layer.sparse_loss(tags, emissions).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert expected[0] < 10 and expected[1] > big / 2                 # both regimes covered


def test_crf_nan_and_inf_emissions_raise_under_the_switch(check_numerics):
    layer = ConditionalRandomField(name='tagger_crf')
    layer.build((None, None, 3))
    emissions, tags = _crf_case(np.inf)
    emissions[1, 0, 1] = -np.inf                            # allowed: rules a label out
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        layer.sparse_loss(tags, emissions)
    _check_message(error, "ConditionalRandomField(name=tagger_crf).sparse_loss", 'y_pred',
                   'NaN or +inf in 2 of its 24 values', '[[0, 1, 2], [1, 2, 0]]')
    emissions[0, 1, 2] = emissions[1, 2, 0] = 0
    assert np.isfinite(layer.sparse_loss(tags, emissions).numpy()).all()


def test_crf_nan_transitions_raise_under_the_switch(check_numerics):
    emissions, tags = _crf_case(0.0)
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        crf_log_likelihood(emissions, tags, np.ones((2, 4)), np.full((3, 3), np.nan))
    _check_message(error, 'crf_log_likelihood', 'transitions', 'NaN or inf')


def test_crf_graph_mode_error_names_the_layer():
    layer = ConditionalRandomField(name='tagger_crf')
    layer.build((None, None, 3))
    emissions, tags = _crf_case(np.nan)
    with crf_lr.set_check_numerics(True):
        loss = tf.function(layer.sparse_loss)
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            loss(tags, emissions)
    # TF puts the Python stack where the op was defined first (as long as the caller's stack);
    # our part, from 'assertion failed', stays short
    ours = str(error.value).split('assertion failed: ', 1)[1]
    assert ours.startswith("[ConditionalRandomField(name=tagger_crf).sparse_loss: y_pred holds "
                           "NaN or +inf; first at] [[0 1 2][1 2 0]] [values] [nan nan]"), ours
    assert len(ours) < READABLE, ours


def test_crf_decode_always_refuses_nan_emissions():
    layer = ConditionalRandomField(name='crf')
    layer.build((None, None, 3))
    emissions, _ = _crf_case(np.nan)
    with pytest.raises(ValueError) as error:
        layer.decode(emissions)
    _check_message(error, "ConditionalRandomField(name=crf).decode", 'emissions', 'NaN or +inf')


def test_crf_lr_multiplier_must_be_finite():
    with pytest.raises(ValueError) as error:
        ConditionalRandomField(lr_multiplier=np.inf)
    _check_message(error, 'lr_multiplier', 'positive finite')


# ----------------------------------------------------------------------------- GlobalPointer

@pytest.mark.parametrize('cls', [GlobalPointer, EfficientGlobalPointer])
def test_mixed_float16_span_logits_do_not_overflow(cls):
    """Oracle: the same layer in float32 with the same weights. At activations x 300 the span
    logits reach ~2e5, past float16's 65504."""
    x = large_activations()
    mixed = cls(2, 8, dtype='mixed_float16')
    scores = mixed(x).numpy()
    reference = cls(2, 8)
    reference.build(x.shape)
    reference.set_weights(mixed.get_weights())
    assert_float32_scores_equal(scores, reference(x).numpy())


def test_global_pointer_nan_inputs_raise_under_the_switch(check_numerics):
    x = np.ones((1, 3, 4), 'float32')
    x[0, 2, 1] = np.nan
    layer = EfficientGlobalPointer(2, 4, name='ner_head')
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        layer(x)
    _check_message(error, "EfficientGlobalPointer(name=ner_head)", 'inputs', '[[0, 2, 1]]')


def test_fit_with_the_switch_on_names_the_layer_not_just_a_nan_loss():
    with crf_lr.set_check_numerics(True):
        inputs = keras.Input((None, 4))
        model = keras.Model(inputs, GlobalPointer(2, 4, name='span_head')(inputs))
        model.compile(loss=sparse_global_pointer_crossentropy, optimizer='sgd')
        x = np.ones((2, 3, 4), 'float32')
        x[1, 0, 0] = np.inf
        y = np.full((2, 2, 1, 2), -1)
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            model.fit(x, y, verbose=0)
    assert "GlobalPointer(name=span_head): inputs holds NaN or inf" in str(error.value)


# ----------------------------------------------------------------------------- losses

@pytest.mark.parametrize('y_true', [[[2., 0., 0.]], [[-1., 0., 0.]], [[np.nan, 0., 0.]]],
                         ids=['two', 'minus-one', 'nan'])
def test_dense_mcce_targets_outside_zero_one_raise_under_the_switch(y_true):
    """Documented: off, the loss is NaN (no cost); on, the target raises."""
    y_pred = np.array([[2., -1., 0.5]], 'float32')
    with crf_lr.set_check_numerics(False):
        assert np.isnan(multilabel_categorical_crossentropy(y_true, y_pred).numpy()).all()
    with crf_lr.set_check_numerics(True), pytest.raises(tf.errors.InvalidArgumentError) as error:
        multilabel_categorical_crossentropy(y_true, y_pred)
    _check_message(error, 'multilabel_categorical_crossentropy', 'y_true', 'outside [0, 1]')


def test_dense_mcce_soft_targets_in_zero_one_pass_the_switch_unchanged():
    y_pred = np.array([[2., -1., 0.5]], 'float32')
    soft = multilabel_categorical_crossentropy([[0.5, 0., 1.]], y_pred)
    with crf_lr.set_check_numerics(True):
        np.testing.assert_array_equal(
            multilabel_categorical_crossentropy([[0.5, 0., 1.]], y_pred), soft)


def test_nan_global_pointer_logits_raise_under_the_switch_naming_the_loss(check_numerics):
    scores = np.zeros((1, 2, 3, 3), 'float32')
    scores[0, 1, 0, 2] = np.nan
    scores[0, :, 1, 0] = -np.inf                                    # masked cells: allowed
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        global_pointer_crossentropy(np.zeros_like(scores), scores)
    _check_message(error, 'global_pointer_crossentropy', 'y_pred', 'NaN or +inf')


def test_plus_inf_logit_of_sparse_mcce_raises_under_the_switch(check_numerics):
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        sparse_multilabel_categorical_crossentropy([[0]], [[np.inf, 0.]])
    _check_message(error, 'sparse_multilabel_categorical_crossentropy', 'y_pred')


@pytest.mark.parametrize('index', [3, 9, -2])
def test_sparse_global_pointer_targets_out_of_range_name_loss_index_and_length(index):
    scores = np.zeros((1, 2, 3, 3), 'float32')
    y_true = np.array([[[[0, index]], [[-1, -1]]]])
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        sparse_global_pointer_crossentropy(y_true, scores)
    _check_message(error, 'sparse_global_pointer_crossentropy', 'y_true', f'values [{index}]',
                   'n = 3')


def test_sparse_mcce_index_past_the_classes_names_the_loss():
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        sparse_multilabel_categorical_crossentropy([[7, -1]], [[2., -1., 0.5]])
    _check_message(error, 'sparse_multilabel_categorical_crossentropy', 'y_true', 'values [7]',
                   'C = 3')


# ----------------------------------------------------------------------------- decode_spans

@pytest.mark.parametrize('value', [np.nan, np.inf])
def test_decode_spans_refuses_nan_and_plus_inf_scores(value):
    scores = np.full((2, 1, 3, 3), -1.0)
    scores[1, 0, 0, 2] = value
    with pytest.raises(ValueError) as error:
        decode_spans(scores)
    _check_message(error, 'decode_spans', 'scores', 'NaN or +inf', '[[1, 0, 0, 2]]')


def test_decode_spans_refuses_a_nan_threshold():
    with pytest.raises(ValueError) as error:
        decode_spans(np.ones((1, 3, 3)), threshold=np.nan)
    _check_message(error, 'decode_spans', 'threshold')


@pytest.mark.parametrize('lengths', [4, -1])
def test_decode_spans_refuses_lengths_outside_zero_n(lengths):
    with pytest.raises(ValueError) as error:
        decode_spans(np.ones((1, 3, 3)), lengths=lengths)
    _check_message(error, 'decode_spans', 'lengths', 'in [0, 3]')


def test_decode_spans_message_on_a_large_nan_input_stays_short():
    with pytest.raises(ValueError) as error:
        decode_spans(np.full((1, 1, 400, 400), np.nan))
    _check_message(error, 'decode_spans', 'scores', 'in 160000 of its 160000 values')
