"""crf_lr.speed.layer_norm: bert4keras's layer norm with the gradient in closed form computes the
same outputs (to the last bit) and gradients (to float rounding) as bert4keras's own ops, in float32
and bf16, with a short graph; the layers it does not handle keep bert4keras's code."""
import numpy as np
import pytest

from crf_lr.compat import tf
from crf_lr.speed.layer_norm import closed_form_layer_norm, normalized

SHAPE = (3, 6, 16)


def _layer(**options):
    from bert4keras.layers import LayerNormalization
    layer = LayerNormalization(**options)
    layer.build([SHAPE, (SHAPE[0], 4)] if options.get('conditional') else SHAPE)
    rng = np.random.default_rng(7)
    layer.set_weights([rng.normal(size=w.shape).astype('float32') for w in layer.weights])
    return layer


def _inputs(dtype='float32', seed=1, constant_row=False):
    x = np.random.default_rng(seed).normal(size=SHAPE) * 3 + 1
    if constant_row:
        x[0, 2] = 5.0                                  # variance 0: bert4keras's divide_no_nan
    return tf.constant(x, dtype)


def _run(layer, inputs, closed_form):
    """(outputs, gradients of a weighted sum wrt inputs and weights, the traced graph's ops)."""
    def forward(*tensors):
        return layer(list(tensors) if len(tensors) > 1 else tensors[0])
    with closed_form_layer_norm(closed_form):
        traced = tf.function(forward).get_concrete_function(*inputs)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        outputs = traced(*inputs)
        weights = tf.cast(tf.cos(tf.range(outputs.shape[-1], dtype=tf.float32)), outputs.dtype)
        total = tf.reduce_sum(outputs * weights)
    gradients = tape.gradient(total, list(inputs) + layer.trainable_weights)
    return outputs, gradients, traced.graph.get_operations()


CASES = {'bert4keras defaults (epsilon 1e-7)': dict(),
         'BERT epsilon 1e-12': dict(epsilon=1e-12),
         'a large epsilon': dict(epsilon=0.5),
         'no scale, no offset': dict(scale=False, offset=False)}


@pytest.mark.parametrize('case', CASES)
@pytest.mark.parametrize('constant_row', [False, True], ids=['', 'a constant row'])
def test_same_outputs_and_gradients_as_bert4keras(case, constant_row):
    layer = _layer(**CASES[case])
    inputs = [_inputs(constant_row=constant_row)]
    expected, expected_gradients, _ = _run(layer, inputs, closed_form=False)
    outputs, gradients, _ = _run(layer, inputs, closed_form=True)
    np.testing.assert_array_equal(outputs.numpy(), expected.numpy())
    for got, want in zip(gradients, expected_gradients):
        scale = np.abs(want.numpy()).max()
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=2e-6 * scale)
    assert np.isfinite(gradients[0].numpy()).all()


def test_bfloat16_gives_bert4keras_outputs_and_gradients_closer_to_float32():
    """Under mixed_bfloat16 the outputs are bert4keras's; the input gradient, computed in float32
    from the bf16 values, is nearer the float32 layer's than bert4keras's bf16 ops come."""
    layer = _layer(epsilon=1e-12, dtype='mixed_bfloat16')     # weights float32, compute bf16
    inputs = [_inputs('bfloat16')]
    expected, expected_gradients, _ = _run(layer, inputs, closed_form=False)
    outputs, gradients, _ = _run(layer, inputs, closed_form=True)
    assert outputs.dtype == tf.bfloat16
    np.testing.assert_array_equal(tf.cast(outputs, tf.float32).numpy(),
                                  tf.cast(expected, tf.float32).numpy())
    reference_layer = _layer(epsilon=1e-12)
    _, reference, _ = _run(reference_layer, [tf.cast(inputs[0], tf.float32)], closed_form=False)
    errors = [np.abs(tf.cast(g[0], tf.float32).numpy() - reference[0].numpy()).mean()
              for g in (gradients, expected_gradients)]
    assert errors[0] < errors[1] < 0.05 * np.abs(reference[0].numpy()).mean()


def test_the_gradient_is_the_closed_form_of_the_textbook():
    """Against central differences of NumPy's layer norm, in float64."""
    rng = np.random.default_rng(3)
    x, dy = rng.normal(size=(2, 5)), rng.normal(size=(2, 5))

    def loss(values):
        centred = values - values.mean(-1, keepdims=True)
        return (dy * centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-3)).sum()

    numeric = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = 1e-6
        numeric[index] = (loss(x + step) - loss(x - step)) / 2e-6
    tensor = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(tensor)
        total = tf.reduce_sum(normalized(tensor, 1e-3) * dy)
    np.testing.assert_allclose(tape.gradient(total, tensor).numpy(), numeric, atol=1e-7)


def test_the_graph_is_short():
    """A layer norm, its scale and offset and their gradients: 84 ops with bert4keras's code,
    52 with the closed form."""
    layer = _layer(epsilon=1e-12)
    inputs = _inputs()

    def count(closed_form):
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                total = tf.reduce_sum(layer(x))
            return tape.gradient(total, [x] + layer.trainable_weights)
        with closed_form_layer_norm(closed_form):
            graph = tf.function(step).get_concrete_function(inputs).graph
        return len(graph.get_operations())
    assert count(True) < 0.7 * count(False)


@pytest.mark.parametrize('options', [dict(conditional=True), dict(zero_mean=False),
                                     dict(unit_variance=False)],
                         ids=['conditional', 'no zero mean', 'no unit variance'])
def test_other_layer_norms_keep_bert4keras_code(options):
    layer = _layer(**options)
    inputs = [_inputs()] + ([tf.constant(np.ones((SHAPE[0], 4)), tf.float32)]
                            if options.get('conditional') else [])
    _, _, ops = _run(layer, inputs, closed_form=False)
    _, _, closed_ops = _run(layer, inputs, closed_form=True)
    assert [op.type for op in closed_ops] == [op.type for op in ops]


def test_a_bert4keras_model_uses_it_and_computes_the_same():
    """The ALBERT encoder of ``build_transformer_model``: the same scores and close gradients
    with and without the closed form, and no bert4keras layer-norm ops in the traced graph."""
    from bert4keras.models import build_transformer_model
    tf.keras.utils.set_random_seed(0)
    encoder = build_transformer_model(model='albert', vocab_size=50, hidden_size=16,
                                      num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=32, hidden_act='gelu',
                                      max_position_embeddings=16, embedding_size=8)
    ids = tf.constant(np.random.default_rng(0).integers(1, 50, (2, 7)), tf.int32)
    inputs = [ids, tf.zeros_like(ids)]

    def run(closed_form):
        def step(*tensors):
            with tf.GradientTape() as tape:
                total = tf.reduce_sum(tf.sin(encoder(list(tensors), training=False)))
            return total, tape.gradient(total, encoder.trainable_weights)
        with closed_form_layer_norm(closed_form):
            traced = tf.function(step).get_concrete_function(*inputs)
        return traced(*inputs), traced.graph.get_operations()
    (total, gradients), ops = run(True)
    (expected, expected_gradients), old_ops = run(False)
    assert len(ops) < len(old_ops) - 40

    def autodiff_ops(operations):                  # what TensorFlow's gradient of each op adds
        return [op for op in operations
                if '-Norm' in op.name and op.type in ('Tile', 'BroadcastGradientArgs')]
    assert autodiff_ops(old_ops) and not autodiff_ops(ops)
    np.testing.assert_allclose(total.numpy(), expected.numpy(), rtol=1e-6)
    for got, want in zip(gradients, expected_gradients):
        got, want = (tf.convert_to_tensor(g).numpy() for g in (got, want))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(np.abs(want).max(), 1e-3))
