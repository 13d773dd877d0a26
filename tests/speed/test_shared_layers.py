"""crf_lr.speed.shared_layers: a training step traced with one trace per attention and
feed-forward configuration trains as the step traced layer by layer (the same losses; float32
weights within the rounding of a sum taken in another order, bf16 within bf16's), holds fewer
traced ops, gives every layer dropout masks of its own, and traces on its own every layer whose
trace would read more than its arguments."""
import contextlib
import os

import numpy as np
import pytest

from crf_lr.compat import keras, tf
from crf_lr.speed.shared_layers import shared_layer_traces, shared_trace_scope

TINY = dict(vocab_size=40, hidden_size=16, num_attention_heads=2, intermediate_size=32,
            hidden_act='gelu', max_position_embeddings=32, type_vocab_size=2)


def _model(kind='bert', layers=3, dropout=0.0, freeze_query_of=None):
    """A tiny bert4keras encoder (seed 0) + CRF head, compiled as the scripts compile it."""
    from bert4keras.models import build_transformer_model

    from crf_lr.model.heads import make_head
    from crf_lr.training.optimizers import LayerwiseAdam
    keras.utils.set_random_seed(0)
    extra = dict(embedding_size=8) if kind == 'albert' else {}
    encoder = build_transformer_model(
        model=kind, num_hidden_layers=layers, hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout, **TINY, **extra)
    if freeze_query_of is not None:
        encoder.get_layer(f'Transformer-{freeze_query_of}-MultiHeadSelfAttention') \
            .q_dense.trainable = False
    head = make_head('crf', ['A', 'B'], 'BIO', lr_multiplier=100)
    model = keras.Model(encoder.inputs, head.build(encoder.output))
    model.compile(LayerwiseAdam(1e-3), loss=head.loss)
    return model


def _batches():
    rng = np.random.default_rng(3)
    batches = []
    for n in (9, 12, 7):
        tokens = rng.integers(5, TINY['vocab_size'], (4, n)).astype('int32')
        tokens[1, n - 3:] = 0                                  # padding in one row
        tags = rng.integers(0, 5, (4, n)).astype('int32') * (tokens > 0)
        batches.append(([tokens, np.zeros_like(tokens)], tags))
    return batches


def _trained(shared, steps=3, **options):
    """(losses, {name: weight} after ``steps`` steps, ops of the traced step) of
    :func:`_model`."""
    from crf_lr.training.loop import trace_once, train_steps
    model = _model(**options)
    batches = _batches()
    with shared_layer_traces(shared):
        traced = trace_once(model, batches[0])
        losses = [float(loss) for loss, _ in zip(train_steps(model, batches * 2), range(steps))]
    graph, = [f.graph for f in traced._list_all_concrete_functions_for_serialization()]
    return losses, {w.name: w.numpy() for w in model.weights}, len(graph.get_operations())


@pytest.mark.parametrize('options', [dict(kind='bert'), dict(kind='albert'),
                                     dict(kind='bert', freeze_query_of=1), dict(kind='roformer'),
                                     dict(kind='nezha')],
                         ids=['bert', 'albert (one layer called again)', 'one query frozen',
                              'roformer (rotary positions inside the attention)',
                              'nezha (relative positions as an argument)'])
# a query frozen puts its weights last in ``layer.weights``: a mapping by position would fail
def test_a_step_traced_once_per_configuration_trains_as_one_traced_layer_by_layer(options):
    losses, weights, ops = _trained(True, **options)
    own_losses, own_weights, own_ops = _trained(False, **options)
    assert losses[0] == own_losses[0]           # the forward pass: the same ops on the same values
    np.testing.assert_allclose(losses, own_losses, rtol=1e-6)
    # a tensor several ops read (the attention's query, key and value input and the residual)
    # gets its gradients summed in another order: float32 rounding, no more. Adam divides by
    # the root of the squared gradients, so where a gradient is near 0 its rounding moves the
    # weight more (the key bias, whose gradient is 0 but for rounding; one RoFormer
    # feed-forward weight, by 7.6e-7): allowed, 1e-6, a thousandth of the rate
    for name, own in own_weights.items():
        np.testing.assert_allclose(weights[name], own, rtol=1e-5, atol=1e-6, err_msg=name)
    assert ops < 0.8 * own_ops          # the 2 later layers' ops are a call each


def test_bf16_steps_shared_stay_within_rounding_of_steps_traced_layer_by_layer():
    from crf_lr.model.precision import set_precision
    try:
        set_precision('mixed_bfloat16')
        losses, weights, ops = _trained(True, steps=2)
        own_losses, own_weights, own_ops = _trained(False, steps=2)
    finally:
        set_precision('float32')
    assert losses[0] == own_losses[0]           # the forward pass: the same ops on the same values
    np.testing.assert_allclose(losses, own_losses, rtol=2e-3)
    for name, own in own_weights.items():
        if not _is_key_bias(name):     # its gradient is 0 but for rounding, which Adam scales up
            np.testing.assert_allclose(weights[name], own, rtol=1e-2, atol=2e-4, err_msg=name)
    assert ops < 0.8 * own_ops


def _is_key_bias(name):
    """True for the bias of an attention layer's key projection (bert4keras's second Dense)."""
    return 'MultiHeadSelfAttention/dense_1/bias' in name


def _twin_attention_outputs(training, seed=7):
    """Two attention layers with the same weights, called on the same input in one traced
    function inside :func:`shared_trace_scope`: their outputs, and the names of the functions
    the graph calls."""
    from bert4keras.layers import MultiHeadAttention
    keras.utils.set_random_seed(seed)
    first, second = (MultiHeadAttention(2, 8, attention_dropout=0.5, name=f'Twin-{i}')
                     for i in range(2))
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 6, 16)), tf.float32)
    first([x, x, x]), second([x, x, x])
    second.set_weights(first.get_weights())

    def both(x):
        return first([x, x, x], training=training), second([x, x, x], training=training)
    with shared_trace_scope():
        traced = tf.function(both, autograph=False).get_concrete_function(x)
    return [y.numpy() for y in traced(x)], _called(traced)


def _called(concrete):
    """The names of the functions ``concrete``'s graph calls."""
    return {op.get_attr('f').name for op in concrete.graph.get_operations()
            if op.type in ('PartitionedCall', 'StatefulPartitionedCall')}


def test_each_layer_of_a_shared_trace_draws_its_own_dropout_masks():
    (one, other), called = _twin_attention_outputs(training=True)
    (kept, kept_too), _ = _twin_attention_outputs(training=False)
    assert len(called) == 1                                 # one trace, called by both
    np.testing.assert_array_equal(kept, kept_too)          # the same weights and input
    assert not np.allclose(one, other)                      # ... but masks of their own
    assert not np.allclose(one, kept)
    (again, other_again), _ = _twin_attention_outputs(training=True)
    np.testing.assert_array_equal(again, one)               # seeded: the same masks again


def test_a_seeded_dropout_keeps_and_scales_as_keras_dropout_and_each_draws_its_own_mask():
    from crf_lr.speed import shared_layers
    from crf_lr.speed.attention import _dropout
    weights = tf.ones([64, 64, 32])
    shared_layers._LOCAL.seed, shared_layers._LOCAL.dropouts = tf.constant([1, 2]), 0
    try:
        dropped, again = _dropout(weights, 0.25).numpy(), _dropout(weights, 0.25).numpy()
    finally:
        shared_layers._LOCAL.seed = None
    assert set(np.unique(dropped)) == {0.0, np.float32(1 / 0.75)}
    assert abs((dropped == 0).mean() - 0.25) < 0.01
    assert (dropped != again).mean() > 0.3                 # two dropouts of one trace


@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_seeded_dropout_keeps_the_mean_at_any_size(dtype):
    from crf_lr.speed.attention import seeded_dropout
    ones = tf.ones([31, 33, 65], dtype)                     # an odd number of elements
    dropped = seeded_dropout(ones, 0.1, tf.constant([3, 4])).numpy().astype('float64')
    assert abs((dropped == 0).mean() - 0.1) < 0.005
    assert abs(dropped.mean() - 1) < 0.01                   # kept ones scaled by 1 / P(kept)
    np.testing.assert_array_equal(
        dropped, seeded_dropout(ones, 0.1, tf.constant([3, 4])).numpy().astype('float64'))


def test_a_shared_trace_draws_new_masks_at_every_call():
    from bert4keras.layers import MultiHeadAttention
    keras.utils.set_random_seed(5)
    layer = MultiHeadAttention(2, 8, attention_dropout=0.5, name='Again')
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 6, 16)), tf.float32)
    layer([x, x, x])
    with shared_trace_scope():
        traced = tf.function(lambda x: layer([x, x, x], training=True),
                             autograph=False).get_concrete_function(x)
    assert _called(traced)
    assert not np.allclose(traced(x).numpy(), traced(x).numpy())


def test_a_trace_with_a_stateful_random_op_is_not_shared():
    from bert4keras.layers import MultiHeadAttention

    from crf_lr.speed.attention import batched_attention
    keras.utils.set_random_seed(5)
    layers = [MultiHeadAttention(2, 8, attention_dropout=0.5, name=f'Keras-{i}')
              for i in range(2)]
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 6, 16)), tf.float32)
    for layer in layers:
        layer([x, x, x])
    with batched_attention(False), shared_trace_scope():    # bert4keras's own Dropout
        traced = tf.function(lambda x: [layer([x, x, x], training=True) for layer in layers],
                             autograph=False).get_concrete_function(x)
    assert not _called(traced)


def test_nezha_with_attention_dropout_shares_its_traces():
    """NEZHA's attention (relative positions) draws seeded dropout masks too, so its layers
    share one trace where bert4keras's stateful Dropout would have kept them apart."""
    losses, _, ops = _trained(True, steps=2, kind='nezha', dropout=0.1)
    _, _, own_ops = _trained(False, steps=2, kind='nezha', dropout=0.1)
    assert np.all(np.isfinite(losses)) and ops < 0.8 * own_ops


def test_a_layer_whose_trace_reads_more_than_its_arguments_is_traced_on_its_own():
    from bert4keras.layers import FeedForward
    outside = tf.Variable(3.0)

    def scaled(t):
        return t * outside
    layers = [FeedForward(4, activation=scaled, name=f'Scaled-{i}')
              for i in range(2)]                     # each reads a variable it does not own
    x = tf.constant(np.random.default_rng(1).normal(size=(2, 3, 4)), tf.float32)

    def stacked(x):
        return layers[1](layers[0](x) + x)
    stacked(x)
    with shared_trace_scope():
        traced = tf.function(stacked, autograph=False).get_concrete_function(x)
    outside.assign(5.0)                              # read at the call, by each layer
    np.testing.assert_array_equal(traced(x).numpy(), stacked(x).numpy())
    assert not _called(traced)


def test_layers_of_other_configurations_do_not_share_a_trace():
    from bert4keras.layers import FeedForward
    layers = [FeedForward(8, activation='relu', name='Relu'),
              FeedForward(8, activation='gelu', name='Gelu')]
    x = tf.constant(np.random.default_rng(2).normal(size=(2, 3, 4)), tf.float32)

    def stacked(x):
        return layers[1](layers[0](x))
    stacked(x)
    traced = {}
    for shared in (False, True):
        with shared_trace_scope() if shared else contextlib.nullcontext():
            traced[shared] = tf.function(stacked, autograph=False).get_concrete_function(x)
    np.testing.assert_array_equal(traced[True](x).numpy(), traced[False](x).numpy())
    assert len(_called(traced[True])) == 2                  # a trace each


def test_the_environment_can_make_every_layer_traced_on_its_own_by_default():
    import subprocess
    import sys
    code = ('from crf_lr.speed.shared_layers import sharing_enabled, shared_layer_traces\n'
            'off = sharing_enabled()\n'
            'with shared_layer_traces():\n'
            '    print(off, sharing_enabled())')
    for setting, expected in (('0', 'False True'), ('1', 'True True')):
        shown = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                               env=dict(os.environ, CRF_LR_SHARED_LAYER_TRACES=setting),
                               check=True).stdout.split()
        assert ' '.join(shown[-2:]) == expected


def test_feed_forwards_calling_other_functions_do_not_share_a_trace():
    from bert4keras.layers import FeedForward

    def scaled_by(factor):
        def scaled(t):
            return t * factor
        scaled.__name__ = 'scaled'                  # one name in both configs
        return scaled
    layers = [FeedForward(8, activation=scaled_by(factor), name=f'Scaled-{factor}')
              for factor in (2.0, 3.0)]
    x = tf.constant(np.random.default_rng(2).normal(size=(2, 3, 4)), tf.float32)

    def stacked(x):
        return layers[1](layers[0](x))
    stacked(x)
    with shared_trace_scope():
        traced = tf.function(stacked, autograph=False).get_concrete_function(x)
    np.testing.assert_array_equal(traced(x).numpy(), stacked(x).numpy())
    assert len(_called(traced)) == 2
