"""GlobalPointer / EfficientGlobalPointer against bert4keras's layers (same weights), closed forms
for RoPE and the efficient per-type term, masking, parameter counts, saving, and a tiny BERT that
learns with the dense and the sparse loss."""
import numpy as np
import pytest

from crf_lr.compat import keras, tf
from crf_lr.model.global_pointer import (EfficientGlobalPointer, GlobalPointer,
                                         rotary_position_embedding)
from crf_lr.model.losses import global_pointer_crossentropy, sparse_global_pointer_crossentropy
from crf_lr.decoding.spans import dense_targets, pad_sparse_targets, sparse_targets

from bert4keras import layers as b4k_layers
from bert4keras.models import build_transformer_model

PAIRS = [(GlobalPointer, b4k_layers.GlobalPointer),
         (EfficientGlobalPointer, b4k_layers.EfficientGlobalPointer)]


def random_inputs(seed=0, batch=3, n=7, hidden=10):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, n, hidden)).astype('float32')
    mask = np.ones((batch, n), bool)
    mask[1, 5:] = False
    mask[2, 2:] = False
    return rng, x, mask


def expected_keep(mask, tril):
    """Oracle for the cells left unmasked: both tokens real and, with tril, start <= end."""
    n = mask.shape[1]
    keep = mask[:, None, :, None] & mask[:, None, None, :]
    return keep & np.triu(np.ones((n, n), bool)) if tril else keep


@pytest.mark.parametrize('ours, theirs', PAIRS, ids=['GP', 'EGP'])
@pytest.mark.parametrize('rope', [True, False], ids=['rope', 'no-rope'])
@pytest.mark.parametrize('tril', [True, False], ids=['tril', 'full'])
@pytest.mark.parametrize('use_bias', [True, False], ids=['bias', 'no-bias'])
def test_scores_equal_bert4keras_given_the_same_weights(ours, theirs, rope, tril, use_bias):
    rng, x, mask = random_inputs()
    kwargs = dict(heads=3, head_size=4, RoPE=rope, tril_mask=tril, use_bias=use_bias)
    reference, layer = theirs(**kwargs), ours(**kwargs)
    reference(x, mask=tf.constant(mask))
    layer(x)
    weights = [rng.normal(size=w.shape) for w in reference.get_weights()]
    reference.set_weights(weights)
    layer.set_weights(weights)
    for m in (None, mask):
        expected = reference(x, mask=None if m is None else tf.constant(m)).numpy()
        got = layer(x, mask=None if m is None else tf.constant(m)).numpy()
        assert got.shape == (3, 3, 7, 7)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)   # -inf cells included
        keep = expected_keep(np.ones_like(mask) if m is None else m, tril)
        assert (np.isneginf(got) == ~np.broadcast_to(keep, got.shape)).all()


def test_rotary_embedding_is_the_closed_form_rotation_and_relative():
    rng = np.random.default_rng(1)
    n, d = 6, 8
    x = rng.normal(size=(2, n, 3, d)).astype('float32')
    got = rotary_position_embedding(tf.constant(x)).numpy()
    theta = np.arange(n)[:, None] * 10000.0 ** (-2 * np.arange(d // 2) / d)   # (n, d/2)
    cos, sin = np.cos(theta)[None, :, None], np.sin(theta)[None, :, None]
    expected = np.empty_like(x)
    expected[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    expected[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # the same q and k at every position: q_m . k_n depends on n - m only
    q, k = (np.tile(rng.normal(size=(1, 1, d)), (1, n, 1)).astype('float32') for _ in range(2))
    dots = np.einsum('md,nd->mn', rotary_position_embedding(tf.constant(q)).numpy()[0],
                     rotary_position_embedding(tf.constant(k)).numpy()[0])
    for shift in range(-n + 1, n):
        np.testing.assert_allclose(np.diagonal(dots, shift), np.diagonal(dots, shift)[0],
                                   atol=1e-4)


def test_rotary_embedding_along_another_axis_equals_it_along_axis_1():
    x = np.random.default_rng(3).normal(size=(2, 5, 3, 8)).astype('float32')
    along_1 = rotary_position_embedding(tf.constant(x)).numpy()
    moved = tf.constant(np.moveaxis(x, 1, 2))                     # positions on axis 2
    along_2 = rotary_position_embedding(moved, position_axis=2).numpy()
    np.testing.assert_array_equal(np.moveaxis(along_2, 2, 1), along_1)


@pytest.mark.parametrize('ours, theirs', PAIRS, ids=['GP', 'EGP'])
def test_gradients_equal_bert4keras_and_no_strided_copies(ours, theirs):
    """Inputs' and weights' gradients equal bert4keras's, and neither the forward nor the
    backward graph slices an activation with strides (queries and keys are whole-block splits,
    RoPE's pair swap a reversal: strided copies cost a GlobalPointer step 3-6 %)."""
    rng, x, mask = random_inputs(seed=4)
    reference, layer = theirs(heads=3, head_size=4), ours(heads=3, head_size=4)
    reference(x, mask=tf.constant(mask))
    layer(x)
    weights = [rng.normal(size=w.shape) for w in reference.get_weights()]
    reference.set_weights(weights)
    layer.set_weights(weights)

    def gradients(pointer, inputs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            scores = pointer(inputs, mask=tf.constant(mask))
            loss = tf.reduce_sum(tf.where(tf.math.is_finite(scores), tf.sin(scores), 0.))
        return tape.gradient(loss, [inputs] + pointer.trainable_weights)

    inputs = tf.constant(x)
    for got, expected in zip(gradients(layer, inputs), gradients(reference, inputs), strict=True):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)
    graph = tf.function(gradients).get_concrete_function(
        layer, tf.TensorSpec([None, None, x.shape[-1]], 'float32')).graph
    assert any(op.type == 'BatchMatMulV2' for op in graph.get_operations())   # the layer is here
    strided = [op.name for op in graph.get_operations()
               if op.type in ('StridedSlice', 'StridedSliceGrad')
               and op.outputs[0].dtype.is_floating and op.outputs[0].shape.rank >= 3]
    assert strided == [], strided


def test_rotary_embedding_refuses_positions_along_the_feature_axis():
    with pytest.raises(ValueError, match='position_axis -1 is the feature axis'):
        rotary_position_embedding(tf.zeros((2, 5, 8)), position_axis=-1)


def test_efficient_score_is_shared_dot_product_plus_per_type_linear_term():
    """s_t(i,j) = q_i.k_j / sqrt(D) + w_t.[q_i;k_i;q_j;k_j] + b_t, written out in NumPy."""
    rng, x, _ = random_inputs(seed=2)
    heads, d = 3, 4
    layer = EfficientGlobalPointer(heads, d, RoPE=False, tril_mask=False)
    layer(x)
    layer.set_weights([rng.normal(size=w.shape) for w in layer.get_weights()])
    qk_kernel, qk_bias, type_kernel, type_bias = layer.get_weights()
    qk = x @ qk_kernel + qk_bias                          # (b, n, 2D), q/k interleaved
    q, k = qk[..., 0::2], qk[..., 1::2]
    w = np.concatenate([type_kernel[:, 1::2], type_kernel[:, 0::2]], 0).T / 2   # (heads, 4D)
    b = (type_bias[0::2] + type_bias[1::2]) / 2
    n = x.shape[1]
    expected = np.empty((x.shape[0], heads, n, n))
    for t in range(heads):
        for i in range(n):
            for j in range(n):
                features = np.concatenate([qk[:, i], qk[:, j]], -1)          # [q_i;k_i;q_j;k_j]
                expected[:, t, i, j] = ((q[:, i] * k[:, j]).sum(-1) / d ** 0.5
                                        + features @ w[t] + b[t])
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('use_bias', [True, False])
def test_parameter_counts_follow_the_formulas(use_bias):
    hidden, heads, d = 12, 5, 6
    gp = GlobalPointer(heads, d, use_bias=use_bias)
    egp = EfficientGlobalPointer(heads, d, use_bias=use_bias)
    x = tf.zeros((1, 3, hidden))
    gp(x), egp(x)
    assert gp.count_params() == heads * 2 * d * hidden + use_bias * heads * 2 * d
    assert egp.count_params() == 2 * d * hidden + use_bias * 2 * d + heads * (4 * d + 2 * use_bias)
    theirs = b4k_layers.EfficientGlobalPointer(heads, d, use_bias=use_bias)
    theirs(x)
    assert theirs.count_params() == egp.count_params()


def test_invalid_arguments_are_rejected():
    with pytest.raises(ValueError, match='head_size must be even'):
        GlobalPointer(2, 5)
    with pytest.raises(ValueError, match='heads must be a positive int'):
        EfficientGlobalPointer(0, 4)
    with pytest.raises(ValueError, match=r'\(batch, n, hidden\)'):
        GlobalPointer(2, 4)(tf.zeros((2, 3)))


def test_float16_policy_keeps_the_mask_and_gives_no_nan():
    _, x, mask = random_inputs(seed=3)
    layer = EfficientGlobalPointer(2, 4, dtype='mixed_float16')
    scores = layer(x, mask=tf.constant(mask)).numpy()
    assert scores.dtype == np.float32 and not np.isnan(scores).any()   # span logits in float32
    assert (np.isneginf(scores) == ~np.broadcast_to(expected_keep(mask, True), scores.shape)).all()


@pytest.mark.parametrize('cls', [GlobalPointer, EfficientGlobalPointer])
@pytest.mark.parametrize('suffix', ['.h5', '.keras'])
def test_saved_model_reloads_without_custom_objects(cls, suffix, tmp_path):
    inputs = keras.Input((None,), dtype='int32')
    hidden = keras.layers.Embedding(20, 8, mask_zero=True)(inputs)   # mask from padding id 0
    model = keras.Model(inputs, cls(3, 4, RoPE=True, use_bias=False, tril_mask=False)(hidden))
    tokens = np.array([[3, 4, 5, 0], [7, 1, 0, 0]])
    expected = model.predict(tokens, verbose=0)
    assert np.isneginf(expected[1, :, 2:, :]).all() and np.isneginf(expected[1, :, :, 2:]).all()
    path = str(tmp_path / f'model{suffix}')
    model.save(path)
    reloaded = keras.models.load_model(path)
    layer = reloaded.layers[-1]
    assert type(layer) is cls and layer.get_config() == model.layers[-1].get_config()
    np.testing.assert_array_equal(reloaded.predict(tokens, verbose=0), expected)


def test_tiny_bert_with_efficient_global_pointer_learns_with_dense_and_sparse_loss(
        tiny_bert_config_path):
    """Same initial weights, same data: the dense and the sparse loss give the same (falling)
    loss curve, and padding rows of the predicted scores stay masked."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    batch, n, heads = 8, 10, 2
    tokens = rng.integers(3, 64, size=(batch, n))
    lengths = rng.integers(5, n + 1, size=batch)
    padded = np.arange(n)[None] >= lengths[:, None]
    tokens[padded] = 0                                                 # padding id 0 -> Keras mask
    inputs = [tokens, np.zeros_like(tokens)]
    spans = [[(s, s + 2, t) for t in range(heads) for s in range(t, length - 3, 3)]
             for length in lengths]                                    # offset 1 for [CLS]
    bert = build_transformer_model(tiny_bert_config_path, model='bert')
    model = keras.Model(bert.inputs, EfficientGlobalPointer(heads, 8)(bert.output))
    initial = model.get_weights()
    curves = {}
    for loss, targets in (
            (global_pointer_crossentropy,
             np.stack([dense_targets(s, n, heads, offset=1) for s in spans])),
            (sparse_global_pointer_crossentropy,
             pad_sparse_targets([sparse_targets(s, n, heads, offset=1) for s in spans]))):
        model.set_weights(initial)
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
        history = model.fit(inputs, targets, batch_size=batch, epochs=5, verbose=0)
        curves[loss.__name__] = losses = history.history['loss']
        assert np.isfinite(losses).all() and losses[-1] < 0.7 * losses[0]
        scores = model.predict(inputs, verbose=0)
        assert np.isneginf(scores.transpose(0, 2, 1, 3)[padded]).all()   # padding rows masked
    np.testing.assert_allclose(curves['global_pointer_crossentropy'],
                               curves['sparse_global_pointer_crossentropy'], rtol=1e-4)
