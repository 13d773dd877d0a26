"""CRF maths and layer against oracles: brute-force enumeration of every label path, finite
differences, bert4keras's ConditionalRandomField on the same weights, the closed-form first Adam
step, and save/reload round trips."""
import numpy as np
import pytest

from crf_lr.model import crf as crf_module
from crf_lr.compat import keras, tf
from crf_lr.model.crf import (ConditionalRandomField, crf_log_likelihood, crf_log_partition,
                              crf_sequence_score)
from crf_lr.speed.fused_kernels import fused_kernels
from crf_lr.decoding.viterbi import DISALLOWED_SCORE, viterbi_decode
from helpers.crf_oracles import brute_force, effective, path_scores, random_case, stable_seed


@pytest.mark.parametrize('shape', [(6, 5, 3), (6, 4, 4), (6, 7, 2)])
@pytest.mark.parametrize('boundary', [False, True])
@pytest.mark.parametrize('constrained', [False, True])
def test_log_likelihood_equals_brute_force(shape, boundary, constrained):
    rng = np.random.default_rng(hash((shape, boundary, constrained)) % 2**32)
    case = random_case(rng, *shape, boundary=boundary, constrained=constrained)
    tags = rng.integers(0, shape[2], size=shape[:2])
    mask = np.arange(shape[1]) < case['lengths'][:, None]
    score, log_z = brute_force(case, tags)
    args = (case['emissions'], mask, *effective(case))
    np.testing.assert_allclose(crf_log_partition(*args).numpy(), log_z, rtol=1e-10, atol=1e-10)
    ll = crf_log_likelihood(case['emissions'], tags, *args[1:]).numpy()
    np.testing.assert_allclose(ll, np.minimum(score - log_z, 0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(crf_sequence_score(case['emissions'], tags, *args[1:]).numpy(),
                               score, rtol=1e-10, atol=1e-10)
    assert (ll <= 0).all() and (ll[case['lengths'] == 0] == 0).all()


def test_scores_hundreds_of_nats_apart_stay_exact():
    rng = np.random.default_rng(12)
    case = random_case(rng, 6, 6, 3, boundary=True, constrained=True)
    case['emissions'] *= 100                       # neighbouring labels differ by ~200 nats
    case['transitions'] *= 50
    tags = rng.integers(0, 3, size=(6, 6))
    mask = np.arange(6) < case['lengths'][:, None]
    score, log_z = brute_force(case, tags)
    got = crf_log_partition(case['emissions'], mask, *effective(case)).numpy()
    np.testing.assert_allclose(got, log_z, rtol=1e-12, atol=1e-9)
    ll = crf_log_likelihood(case['emissions'].astype('float32'), tags, mask, *effective(case))
    np.testing.assert_allclose(ll.numpy(), np.minimum(score - log_z, 0), rtol=1e-5, atol=1e-2)


def test_without_xla_and_in_a_tf_function_with_unknown_length(monkeypatch):
    rng = np.random.default_rng(5)
    case = random_case(rng, 6, 5, 3, boundary=True, constrained=True)
    tags = rng.integers(0, 3, size=(6, 5))
    mask = np.arange(5) < case['lengths'][:, None]
    score, log_z = brute_force(case, tags)
    trans, start, end = effective(case)
    spec = [tf.TensorSpec([None, None, 3], tf.float64), tf.TensorSpec([None, None], tf.int32),
            tf.TensorSpec([None, None], tf.bool)]
    graph = tf.function(lambda e, y, m: crf_log_likelihood(e, y, m, trans, start, end),
                        input_signature=spec)
    np.testing.assert_allclose(graph(case['emissions'], tags, mask), score - log_z, atol=1e-10)

    def value_and_gradient():
        emissions = tf.constant(case['emissions'])
        with tf.GradientTape() as tape, fused_kernels(False):     # not the CPU kernel
            tape.watch(emissions)
            ll = crf_log_likelihood(emissions, tags, mask, trans, start, end)
        return ll.numpy(), tape.gradient(ll, emissions).numpy()
    compiled = value_and_gradient()
    monkeypatch.setattr(crf_module, 'USE_XLA', False)
    plain = value_and_gradient()
    np.testing.assert_allclose(plain[0], score - log_z, atol=1e-10)
    np.testing.assert_allclose(plain[1], compiled[1], atol=1e-10)


def test_gradients_equal_finite_differences():
    rng = np.random.default_rng(6)
    case = random_case(rng, 4, 4, 3, boundary=True, constrained=True)
    tags = np.zeros((4, 4), int)                              # label 0 is always allowed
    mask = np.arange(4) < case['lengths'][:, None]
    trans, start, end = (tf.constant(x) for x in effective(case))
    allowed = tf.constant(case['allowed_transitions'])
    weights = tf.constant(rng.normal(size=4))                 # a non-uniform upstream gradient

    def objective(emissions, transitions, start, end):
        transitions = tf.where(allowed, transitions, DISALLOWED_SCORE)
        ll = crf_log_likelihood(emissions, tags, mask, transitions, start, end)
        return tf.reduce_sum(weights * ll)
    theoretical, numerical = tf.test.compute_gradient(
        objective, [tf.constant(case['emissions']), tf.constant(case['transitions']), start, end])
    for got, expected in zip(theoretical, numerical):
        np.testing.assert_allclose(got, expected, atol=1e-6)


def _bert4keras_pair(num_labels, lr_multiplier):
    from bert4keras.layers import ConditionalRandomField as Peer
    peer, ours = Peer(lr_multiplier=lr_multiplier), ConditionalRandomField(lr_multiplier)
    peer.build((None, None, num_labels))
    ours.build((None, None, num_labels))
    ours.set_weights(peer.get_weights())
    return peer, ours


@pytest.mark.parametrize('lr_multiplier', [1, 10])
def test_losses_equal_bert4keras_on_the_same_weights(lr_multiplier):
    rng = np.random.default_rng(7)
    batch, n, num_labels = 6, 9, 5
    peer, ours = _bert4keras_pair(num_labels, lr_multiplier)
    np.testing.assert_allclose(ours.trans.numpy(), peer.trans.numpy())
    lengths = np.array([9, 1, 4, 7, 2, 9])
    y_pred = rng.normal(size=(batch, n, num_labels)).astype('float32') * 3
    y_pred[np.arange(n) >= lengths[:, None]] = -np.inf                # what call() produces
    tags = rng.integers(0, num_labels, size=(batch, n))
    one_hot = np.eye(num_labels, dtype='float32')[tags]
    smoothed = 0.8 * one_hot + 0.2 / num_labels                         # soft labels, too
    weights = tf.constant(rng.random(batch), tf.float32)               # uneven sample weights
    for loss, y_true in (('sparse_loss', tags), ('dense_loss', one_hot), ('dense_loss', smoothed)):
        results = []
        for layer in (ours, peer):
            y = tf.constant(y_pred)
            with tf.GradientTape() as tape:
                tape.watch(y)
                value = getattr(layer, loss)(y_true, y)
                weighted = tf.reduce_sum(weights * value)
            results.append([value] + tape.gradient(weighted, [y, layer._trans]))
        for mine, theirs in zip(*results):
            np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-5)
    for metric in ('sparse_accuracy', 'dense_accuracy'):
        y_true = tags if metric == 'sparse_accuracy' else one_hot
        np.testing.assert_allclose(getattr(ours, metric)(y_true, y_pred).numpy(),
                                   getattr(peer, metric)(y_true, y_pred).numpy(), rtol=1e-6)


@pytest.mark.parametrize('lr_multiplier', [1, 50])
def test_one_adam_step_moves_the_effective_transitions_by_lr_multiplier_times_lr(lr_multiplier):
    rng = np.random.default_rng(8)
    layer = ConditionalRandomField(lr_multiplier)
    layer.build((None, None, 4))
    y_pred = tf.constant(rng.normal(size=(6, 5, 4)), tf.float32)
    tags = rng.integers(0, 4, size=(6, 5))
    before = layer.trans.numpy()
    optimizer = keras.optimizers.Adam(learning_rate=1e-3, epsilon=1e-12)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(layer.sparse_loss(tags, y_pred))
    gradient = tape.gradient(loss, layer.trainable_weights)
    optimizer.apply_gradients(zip(gradient, layer.trainable_weights))
    # Adam's first step is lr * sign(gradient) on the stored weight, whatever the gradient's scale
    step = layer.trans.numpy() - before
    np.testing.assert_allclose(step, -lr_multiplier * 1e-3 * np.sign(gradient[0].numpy()),
                               rtol=1e-3)


def test_padding_length_one_float16_and_extreme_scores_give_no_nan():
    layer = ConditionalRandomField(lr_multiplier=100, boundary_scores=True,
                                   allowed_transitions=np.array([[1, 1, 0], [1, 1, 1],
                                                                 [0, 1, 1]], bool))
    layer.build((None, None, 3))
    emissions = np.array([[[60, -60, 0], [0, 0, 0]],            # length 2, extreme scores
                          [[0, 0, 0], [1, 2, 3]],                # length 2
                          [[5, 0, -5], [0, 0, 0]],               # length 1
                          [[0, 0, 0], [0, 0, 0]]], 'float16')    # all padding
    mask = np.array([[1, 1], [1, 1], [1, 0], [0, 0]], bool)
    emissions[1, 0, 2] = -np.inf                    # a label ruled out by the model: allowed
    y_pred = tf.where(mask[..., None], tf.constant(emissions), -np.inf)   # as call() under
    assert y_pred.dtype == tf.float16                                        # mixed precision
    tags = np.array([[0, 2], [1, 1], [2, 0], [0, 0]])      # row 0 breaks 0 -> 2
    with tf.GradientTape() as tape:
        tape.watch(y_pred)
        loss = layer.sparse_loss(tags, y_pred)
    grads = tape.gradient(loss, [y_pred] + layer.trainable_weights)
    loss = loss.numpy()
    assert np.isfinite(loss).all() and (loss >= 0).all() and loss[3] == 0
    assert loss[0] > 0.9e4                      # a disallowed gold transition costs ~1e4, not inf
    assert all(np.isfinite(g.numpy()).all() for g in grads)
    assert (grads[0].numpy()[3] == 0).all() and (grads[0].numpy()[2, 1] == 0).all()
    assert grads[0].numpy()[1, 0, 2] == 0


def test_empty_batches_and_zero_length_sequences():
    for batch, n in [(2, 0), (0, 5)]:
        ll = crf_log_likelihood(np.zeros((batch, n, 3)), np.zeros((batch, n), int),
                                np.zeros((batch, n)), np.zeros((3, 3)))
        assert ll.shape == (batch,) and (ll.numpy() == 0).all()


def test_without_a_keras_mask_every_position_is_scored():
    rng = np.random.default_rng(9)
    layer = ConditionalRandomField()
    emissions = rng.normal(size=(3, 4, 3)).astype('float32')
    tags = rng.integers(0, 3, size=(3, 4))
    out = layer(emissions)
    np.testing.assert_array_equal(out, emissions)
    np.testing.assert_allclose(
        layer.sparse_loss(tags, out),
        -crf_log_likelihood(emissions, tags, np.ones((3, 4), bool), layer.trans), rtol=1e-6)


def test_non_left_aligned_mask_and_bad_arguments_raise():
    emissions = np.zeros((2, 3, 2))
    with pytest.raises(tf.errors.InvalidArgumentError, match='left-aligned'):
        crf_log_partition(emissions, [[1, 0, 1], [1, 1, 1]], np.zeros((2, 2)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r'(?s)label ids in \[0, num_labels\) '
                                                             r'where unmasked; num_labels and the '
                                                             r'first other id:.*\b2\b.*\b7\b'):
        crf_log_likelihood(emissions, [[0, 1, 0], [0, 7, 0]], np.ones((2, 3)), np.zeros((2, 2)))
    crf = ConditionalRandomField()
    with pytest.raises(ValueError, match=r'got shape \(2, 3, 2\): one-hot labels go to '
                                         'dense_loss, not sparse_loss'):
        crf.sparse_loss(np.eye(2)[[[0, 1, 0], [1, 1, 0]]], emissions)
    with pytest.raises(ValueError, match=r'one label id for each position .* \(2, 2\), '
                                         r'\(2, 3, 2\)$'):
        crf.sparse_loss([[0, 1], [1, 1]], emissions)            # labels shorter than the scores
    crf.build((None, None, 2))
    traced = tf.function(lambda tags, scores: crf.sparse_loss(tags, scores), input_signature=[
        tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, None, 2), tf.float32)])
    for _ in range(3):            # as in fit, shapes unknown: the check runs before the reshape
        with pytest.raises(tf.errors.InvalidArgumentError, match='one label id for each position'):
            traced(tf.constant([[0, 1], [1, 1]]), tf.constant(emissions, tf.float32))
    with pytest.raises(ValueError, match=r'takes scores \(batch, n, num_labels\), one row a '
                                         r'position, got shape \(None, 4\): put it on a sequence '
                                         'output'):
        ConditionalRandomField()(keras.Input((4,)))               # on a pooled output
    with pytest.raises(ValueError, match=r'transitions must have shape \(2, 2\)'):
        crf_log_partition(emissions, np.ones((2, 3)), np.zeros((3, 3)))
    with pytest.raises(TypeError, match='boolean array'):
        ConditionalRandomField(allowed_starts=[0, 1])
    with pytest.raises(ValueError, match='positive'):
        ConditionalRandomField(lr_multiplier=0)
    with pytest.raises(ValueError, match=r'allowed_transitions must have shape \(2, 2\)'):
        ConditionalRandomField(allowed_transitions=np.ones((3, 3), bool)).build((None, 4, 2))


def _constrained_layer():
    allowed = np.array([[1, 1, 1], [0, 1, 1], [1, 0, 1]], bool)
    return ConditionalRandomField(lr_multiplier=10, allowed_transitions=allowed,
                                  allowed_starts=np.array([1, 0, 1], bool),
                                  allowed_ends=np.array([1, 1, 0], bool), boundary_scores=True)


def test_get_config_round_trip():
    layer = _constrained_layer()
    config = layer.get_config()
    clone = ConditionalRandomField.from_config(config)
    assert clone.get_config() == config
    assert (clone.allowed_transitions == layer.allowed_transitions).all()
    assert keras.utils.get_registered_object('crf_lr>ConditionalRandomField') is not None


@pytest.fixture(scope='module')
def tagger():
    """Embedding (mask_zero) -> Dense -> constrained CRF, with perturbed CRF weights."""
    token_ids = keras.layers.Input((None,), dtype='int32')
    hidden = keras.layers.Embedding(20, 8, mask_zero=True)(token_ids)
    crf = _constrained_layer()
    model = keras.Model(token_ids, crf(keras.layers.Dense(3)(hidden)))
    rng = np.random.default_rng(10)
    crf.set_weights([rng.normal(size=w.shape) for w in crf.get_weights()])
    return model, crf


@pytest.mark.parametrize('filename', ['model.h5', 'model.keras', 'saved_model'])
def test_saved_model_reloads_with_the_same_effective_parameters(tagger, tmp_path, filename):
    model, crf = tagger
    model.save(str(tmp_path / filename))
    reloaded = keras.models.load_model(str(tmp_path / filename), compile=False)
    crf2 = reloaded.layers[-1]
    assert isinstance(crf2, ConditionalRandomField) and crf2.lr_multiplier == 10
    for mine, theirs in zip(crf.effective_parameters(), crf2.effective_parameters()):
        np.testing.assert_allclose(theirs, mine)
    x = np.array([[3, 4, 5, 0], [6, 0, 0, 0]])
    np.testing.assert_allclose(reloaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_decode_uses_the_effective_parameters_and_constraints(tagger, tmp_path):
    model, crf = tagger
    x = np.array([[3, 4, 5, 7, 0], [6, 0, 0, 0, 0], [1, 2, 3, 4, 5]])
    emissions = model.predict(x, verbose=0)
    paths = crf.decode(emissions)
    assert [len(p) for p in paths] == [4, 1, 5]
    case = dict(transitions=crf.trans.numpy(), start=crf.starts.numpy(), end=crf.ends.numpy(),
                allowed_transitions=crf.allowed_transitions, allowed_starts=crf.allowed_starts,
                allowed_ends=crf.allowed_ends)
    expected = viterbi_decode(np.where(np.isinf(emissions), 0, emissions), lengths=[4, 1, 5],
                              **case)
    for b, path in enumerate(paths):
        table = path_scores(emissions[b, :len(path)], **{k: v for k, v in case.items()
                                                          if k != 'allowed_transitions'},
                            allowed=case['allowed_transitions'])
        assert tuple(path) == max(table, key=table.get) == tuple(expected[b])
    in_graph = crf.decode_tf(tf.constant(emissions)).numpy()
    assert [row[row >= 0].tolist() for row in in_graph] == [p.tolist() for p in paths]
    # the docstring's serving model, on the model's symbolic output (a TypeError from deep in
    # tf-keras before): the CRF's own weights, saved and loaded as a SavedModel
    serving = keras.Model(model.input, crf.decode_tf(model.output))
    assert serving.predict(x, verbose=0).tolist() == in_graph.tolist()
    assert {w.ref() for w in crf.weights} <= {w.ref() for w in serving.weights}
    tf.saved_model.save(serving, str(tmp_path / 'serving'))
    loaded = tf.saved_model.load(str(tmp_path / 'serving'))
    assert loaded.signatures['serving_default'](**{serving.input_names[0]: tf.constant(x, 'int32')}
                                                ).popitem()[1].numpy().tolist() == in_graph.tolist()


def test_tiny_bert_with_crf_trains_and_the_loss_falls(tiny_bert_config_path):
    from bert4keras.models import build_transformer_model
    bert = build_transformer_model(tiny_bert_config_path, model='bert')
    crf = ConditionalRandomField(lr_multiplier=100)
    model = keras.Model(bert.inputs, crf(keras.layers.Dense(4)(bert.output)))
    model.compile(loss=crf.sparse_loss, optimizer=keras.optimizers.Adam(1e-3),
                  metrics=[crf.sparse_accuracy])
    rng = np.random.default_rng(11)
    token_ids = rng.integers(1, 64, size=(8, 12))
    token_ids[4:, 8:] = 0
    tags = token_ids % 4 * (token_ids > 0)
    history = model.fit([token_ids, np.zeros_like(token_ids)], tags, epochs=8, batch_size=8,
                        verbose=0).history['loss']
    assert np.isfinite(history).all() and history[-1] < 0.8 * history[0]


@pytest.mark.parametrize('shape', [(6, 5, 3), (6, 4, 4)])
@pytest.mark.parametrize('boundary', [False, True])
@pytest.mark.parametrize('constrained', [False, True])
def test_marginals_equal_brute_force_in_float32(shape, boundary, constrained):
    """The layer's and the function's marginals against summed path probabilities (1e-5)."""
    from crf_lr.model.crf import crf_marginals
    from helpers.crf_oracles import brute_force_marginals
    rng = np.random.default_rng(stable_seed(shape, boundary, constrained, 'marginals'))
    case = random_case(rng, *shape, boundary=boundary, constrained=constrained)
    expected = brute_force_marginals(case)
    mask = np.arange(shape[1]) < case['lengths'][:, None]
    emissions = case['emissions'].astype('float32')
    got = crf_marginals(emissions, mask, *effective(case))
    assert got.dtype == tf.float32
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-5)
    crf = _layer_of(case, multiplier=10.0)
    y_pred = crf(tf.constant(emissions), mask=tf.constant(mask))     # -inf padding rows
    from_layer = crf.marginals(y_pred).numpy()
    np.testing.assert_allclose(from_layer, expected, atol=1e-5)
    np.testing.assert_allclose(from_layer.sum(axis=2), mask.astype(float), atol=1e-5)
    assert (from_layer[~mask] == 0).all()
    np.testing.assert_allclose(crf.marginals(emissions, mask=mask).numpy(), expected, atol=1e-5)


def _layer_of(case, multiplier):
    """A built ConditionalRandomField holding a case's parameters and constraints."""
    num_labels = case['transitions'].shape[0]
    crf = ConditionalRandomField(lr_multiplier=multiplier, boundary_scores='start' in case,
                                 allowed_transitions=case.get('allowed_transitions'),
                                 allowed_starts=case.get('allowed_starts'),
                                 allowed_ends=case.get('allowed_ends'))
    crf.build((None, None, num_labels))
    crf.set_weights([(case[k] / multiplier).astype('float32')
                     for k in ('transitions', 'start', 'end') if k in case])
    return crf


# bf16 rounds a Dense layer's scores to 8 significant bits: on scores of a few nats, labels'
# posteriors move by up to a few hundredths (measured on this case: 0.0024)
BF16_MARGINAL_TOLERANCE = 0.05


def test_marginals_under_mixed_bfloat16():
    """Under mixed_bfloat16 the marginals of the model's (float32) output equal brute force on
    that output within 1e-5, and float32's marginals within BF16_MARGINAL_TOLERANCE."""
    from helpers.crf_oracles import brute_force_marginals
    rng = np.random.default_rng(31)
    case = random_case(rng, 5, 5, 3, boundary=True, constrained=True)
    features = rng.normal(size=(5, 5, 8)).astype('float32')
    mask = np.arange(5) < case['lengths'][:, None]
    dense_weights = [rng.normal(size=(8, 3)).astype('float32') * 0.7, np.zeros(3, 'float32')]
    marginals, outputs = {}, {}
    try:
        for precision in ('float32', 'mixed_bfloat16'):
            keras.mixed_precision.set_global_policy(precision)
            dense = keras.layers.Dense(3)
            crf = _layer_of(case, multiplier=1.0)
            output = crf(dense(tf.constant(features)), mask=tf.constant(mask))
            dense.set_weights(dense_weights)
            output = crf(dense(tf.constant(features)), mask=tf.constant(mask))
            assert output.dtype == tf.float32
            outputs[precision] = output.numpy()
            marginals[precision] = crf.marginals(output).numpy()
    finally:
        keras.mixed_precision.set_global_policy('float32')
    emissions = np.where(mask[..., None], outputs['mixed_bfloat16'], 0.0)
    expected = brute_force_marginals(dict(case, emissions=emissions))
    np.testing.assert_allclose(marginals['mixed_bfloat16'], expected, atol=1e-5)
    assert 0 < np.abs(marginals['mixed_bfloat16'] - marginals['float32']).max() \
        < BF16_MARGINAL_TOLERANCE
