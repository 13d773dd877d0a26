"""crf_lr.speed.attention: bert4keras's attention as batched products computes what bert4keras's
einsum form does (outputs, scores and gradients, with and without masks, an additive bias, rotary
position embeddings, NEZHA's and T5's relative positions), and a model traced with it holds no
Einsum; under einsum_transposes (prediction) the same bits again."""
import numpy as np
import pytest

from crf_lr.speed.attention import batched_attention, einsum_transposes
from crf_lr.compat import tf

BATCH, N, HEADS, SIZE = 2, 5, 2, 4
KEY_MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], 'float32')


def _layer(**options):
    from bert4keras.layers import MultiHeadAttention
    tf.keras.utils.set_random_seed(0)
    return MultiHeadAttention(HEADS, SIZE, **options)


def _run(layer, inputs, mask, batched, **kwargs):
    """(outputs, gradients of a weighted sum wrt inputs and weights, the traced graph's ops)."""
    def forward(*tensors):
        return layer(list(tensors), mask=mask, **kwargs)
    forward(*inputs)                                # builds the layer's weights, eagerly
    with batched_attention(batched):
        traced = tf.function(forward).get_concrete_function(*inputs)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        outputs = traced(*inputs)
        first = outputs[0] if isinstance(outputs, list) else outputs
        total = tf.reduce_sum(first * tf.cos(tf.range(first.shape[-1], dtype=first.dtype)))
    gradients = tape.gradient(total, list(inputs) + layer.trainable_weights)
    return outputs, gradients, traced.graph.get_operations()


def _types(operations):
    return {op.type for op in operations}


def _inputs(count=3, seed=1, query_length=N):
    """q (batch, query_length, .), k and v (batch, N, .)."""
    rng = np.random.default_rng(seed)
    return [tf.constant(rng.normal(size=(BATCH, query_length if i == 0 else N, HEADS * SIZE)),
                        tf.float32) for i in range(count)]


QUERY_MASK = np.array([[1, 1, 0], [1, 1, 1]], 'float32')       # cross-attention: 3 queries


def _extra(kind, rng, key_size=SIZE, query_length=N):
    """One extra input of bert4keras's attention, by kind."""
    if kind == 'bias3':                             # a causal (language-model) bias, as bert4keras
        causal = np.tril(np.ones((N, N), 'float32'))
        return tf.constant(np.repeat((1 - causal)[None] * -1e12, BATCH, 0))
    shapes = {'bias4': (BATCH, HEADS, N, N), 'rotary': (BATCH, N, key_size),
              'typical_relative': (query_length, N, key_size),
              't5_relative': (query_length, N, HEADS)}
    return tf.constant(rng.normal(size=shapes[kind]), tf.float32)


CASES = {
    'no mask': dict(),
    'key mask': dict(mask='key'),
    'key mask, no scale': dict(options=dict(attention_scale=False), mask='key'),
    'key size other than head size': dict(options=dict(key_size=3), mask='key'),
    'additive bias (rank 3) and key mask': dict(mask='key', extra=['bias3'],
                                                kwargs=dict(a_bias=True)),
    'additive bias (rank 4)': dict(extra=['bias4'], kwargs=dict(a_bias=True)),
    'rotary, key mask': dict(mask='key', extra=['rotary'], kwargs=dict(p_bias='rotary')),
    'rotary after an additive bias': dict(mask='key', extra=['bias4', 'rotary'],
                                          kwargs=dict(a_bias=True, p_bias='rotary')),
    'cross-attention: 3 queries, 5 keys, their own masks': dict(mask='cross', query_length=3),
    'scores returned': dict(options=dict(return_attention_scores=True), mask='key'),
    'NEZHA relative positions': dict(mask='key', extra=['typical_relative'],
                                     kwargs=dict(p_bias='typical_relative')),
    'NEZHA relative positions, cross-attention': dict(
        mask='cross', query_length=3, extra=['typical_relative'],
        kwargs=dict(p_bias='typical_relative')),
    'NEZHA relative positions after an additive bias': dict(
        mask='key', extra=['bias4', 'typical_relative'],
        kwargs=dict(a_bias=True, p_bias='typical_relative')),
    'T5 relative positions': dict(mask='key', extra=['t5_relative'],
                                  kwargs=dict(p_bias='t5_relative'),
                                  options=dict(attention_scale=False)),
    'T5 relative positions, scaled': dict(mask='key', extra=['t5_relative'],
                                          kwargs=dict(p_bias='t5_relative')),
    'T5 relative positions, cross-attention': dict(
        mask='cross', query_length=3, extra=['t5_relative'], kwargs=dict(p_bias='t5_relative')),
    'NEZHA relative positions, no scale': dict(
        mask='key', extra=['typical_relative'], kwargs=dict(p_bias='typical_relative'),
        options=dict(attention_scale=False)),
    'NEZHA relative positions, scores returned': dict(
        mask='key', extra=['typical_relative'], kwargs=dict(p_bias='typical_relative'),
        options=dict(return_attention_scores=True)),
    'T5 relative positions, scores returned': dict(
        mask='key', extra=['t5_relative'], kwargs=dict(p_bias='t5_relative'),
        options=dict(return_attention_scores=True)),
}


@pytest.mark.parametrize('case', list(CASES))
def test_batched_attention_equals_bert4keras_einsum_form(case):
    """Outputs and gradients equal; batched where it applies, bert4keras's code elsewhere."""
    spec = dict(dict(options={}, mask=None, extra=[], kwargs={}, query_length=N, batched=True),
                **CASES[case])
    rng = np.random.default_rng(2)
    options = spec['options']
    inputs = _inputs(query_length=spec['query_length']) + [
        _extra(kind, rng, options.get('key_size', SIZE), spec['query_length'])
        for kind in spec['extra']]
    mask = {None: None, 'key': [tf.constant(KEY_MASK)] * 3,
            'cross': [tf.constant(QUERY_MASK), None, tf.constant(KEY_MASK)]}[spec['mask']]
    layer = _layer(**options)
    reference, reference_gradients, einsum_ops = _run(layer, inputs, mask, False, **spec['kwargs'])
    batched, batched_gradients, batched_ops = _run(layer, inputs, mask, True, **spec['kwargs'])
    for got, expected in zip(tf.nest.flatten(batched), tf.nest.flatten(reference)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    for got, expected in zip(batched_gradients, reference_gradients):
        if expected is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert 'Einsum' in _types(einsum_ops)
    assert ('Einsum' not in _types(batched_ops)) == spec['batched']
    with einsum_transposes():          # as prediction traces it: the same bits, no Transpose
        swapped, _, swapped_ops = _run(layer, inputs, mask, True, **spec['kwargs'])
    for got, expected in zip(tf.nest.flatten(swapped), tf.nest.flatten(batched)):
        np.testing.assert_array_equal(got, expected)
    assert ('Transpose' not in _types(swapped_ops)) == spec['batched']
    selects = [op.outputs[0].shape.as_list() for op in batched_ops if op.type == 'SelectV2']
    assert not spec['batched'] or all(shape[1:3] == [1, 1] for shape in selects)  # a bias


def test_masked_keys_get_no_weight():
    """A key behind the mask changes nothing: its values may be anything."""
    layer = _layer()
    inputs = _inputs()
    changed = [inputs[0], inputs[1], tf.tensor_scatter_nd_update(
        inputs[2], [[0, 4]], tf.fill([1, HEADS * SIZE], 1e3))]
    mask = [tf.constant(KEY_MASK)] * 3
    outputs = _run(layer, inputs, mask, True)[0]
    np.testing.assert_allclose(_run(layer, changed, mask, True)[0], outputs, rtol=1e-6)


def test_other_normalisations_and_boolean_biases_keep_bert4keras_code():
    layer = _layer(normalization='squared_relu')
    assert 'Einsum' in _types(_run(layer, _inputs(), None, True)[2])
    boolean = tf.constant(np.tril(np.ones((BATCH, N, N), bool)))
    layer = _layer()
    assert 'Einsum' in _types(_run(layer, _inputs() + [boolean], None, True, a_bias=True)[2])


@pytest.mark.parametrize('p_bias', [None, 'typical_relative'])
def test_dropout_drops_the_same_weights_in_training_only(p_bias):
    """Under one seed, training drops what bert4keras's form drops (NEZHA: its position term
    mixes the weights after dropout, as bert4keras's does); inference drops nothing."""
    layer = _layer(attention_dropout=0.5)
    extra = [_extra(p_bias, np.random.default_rng(4))] if p_bias else []
    inputs = _inputs() + extra
    outputs = {}
    for batched in (False, True):
        with batched_attention(batched):
            tf.keras.utils.set_random_seed(5)
            outputs[batched] = layer(inputs, training=True, p_bias=p_bias)
            inference = layer(inputs, training=False, p_bias=p_bias)
    np.testing.assert_allclose(outputs[True], outputs[False], rtol=1e-5, atol=1e-6)
    assert np.abs(np.asarray(outputs[True]) - np.asarray(inference)).max() > 1e-3


def _bert_traced_both_ways(config_path, switch):
    """build_transformer_model's BERT on two padded texts, traced for prediction with ``switch``
    off and on: ({False, True} -> sequence output, {False, True} -> the trace's op types)."""
    from bert4keras.models import build_transformer_model
    model = build_transformer_model(config_path)
    token_ids = np.array([[2, 5, 7, 3, 0, 0], [2, 9, 11, 13, 17, 3]])
    inputs = [tf.constant(token_ids), tf.zeros_like(token_ids)]
    outputs, graphs = {}, {}
    for enabled in (False, True):
        with switch(enabled):
            traced = tf.function(lambda x, s: model([x, s], training=False)
                                 ).get_concrete_function(*inputs)
        outputs[enabled] = traced(*inputs).numpy()
        graphs[enabled] = _types(traced.graph.get_operations())
    return outputs, graphs


def test_a_model_built_by_bert4keras_computes_the_same_without_einsum(tiny_bert_config_path):
    """build_transformer_model's BERT (padding masked) gives the same sequence output traced
    either way, and the batched trace holds no Einsum."""
    outputs, graphs = _bert_traced_both_ways(tiny_bert_config_path, batched_attention)
    np.testing.assert_allclose(outputs[True], outputs[False], rtol=1e-5, atol=1e-6)
    assert 'Einsum' in graphs[False] and 'Einsum' not in graphs[True]


@pytest.mark.parametrize('case', ['no mask', 'key mask', 'key mask, no scale',
                                  'key size other than head size', 'additive bias (rank 4)'])
def test_a_training_calls_score_gradient_is_the_softmax_kernel_alone(fused_ops, case):
    """In a training call the scores' gradient is the softmax kernel's, with the scale inside it
    (no pass over the scores to divide; an additive bias keeps one), and the gradients equal
    bert4keras's einsum form's."""
    spec = dict(dict(options={}, mask=None, extra=[], kwargs={}), **CASES[case])
    inputs = _inputs() + [_extra(kind, np.random.default_rng(2)) for kind in spec['extra']]
    mask = None if spec['mask'] is None else [tf.constant(KEY_MASK)] * 3
    layer = _layer(**spec['options'])

    def gradients(*tensors):
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            outputs = layer(list(tensors), mask=mask, training=True, **spec['kwargs'])
            total = tf.reduce_sum(outputs * tf.cos(tf.range(outputs.shape[-1], dtype=tf.float32)))
        return tape.gradient(total, list(tensors) + layer.trainable_weights)
    gradients(*inputs)                              # builds the layer's weights, eagerly
    traced = {}
    for batched in (False, True):
        with batched_attention(batched):
            traced[batched] = tf.function(gradients).get_concrete_function(*inputs)
    for got, expected in zip(traced[True](*inputs), traced[False](*inputs)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    operations = traced[True].graph.get_operations()
    assert 'CrfLrSoftmaxGrad' in _types(operations)
    score_passes = [op for op in operations if op.name.startswith('gradient_tape/')
                    and op.type in ('Mul', 'RealDiv') and op.outputs[0].shape[-2:] == (N, N)]
    assert bool(score_passes) == (case == 'additive bias (rank 4)')


def test_einsum_transposes_compute_the_same_outputs_bit_for_bit(tiny_bert_config_path):
    """Under einsum_transposes a bert4keras BERT (padding masked) gives exactly the outputs of the
    Transpose form, and its trace swaps heads and positions with Einsum, never Transpose."""
    outputs, graphs = _bert_traced_both_ways(tiny_bert_config_path, einsum_transposes)
    np.testing.assert_array_equal(outputs[True], outputs[False])
    assert 'Transpose' in graphs[False] and 'Einsum' not in graphs[False]
    assert 'Einsum' in graphs[True] and 'Transpose' not in graphs[True]
