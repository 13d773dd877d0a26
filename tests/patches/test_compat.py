"""The environment set-up, each of the bert4keras fixes (tested on a tiny BERT and single layers)
and the flattened Dense call of ``crf_lr.compat.flat_dense``."""
import os
import subprocess
import sys

import numpy as np
import pytest

from crf_lr.compat import keras
import tensorflow as tf


def test_environment_variables_are_set_before_tensorflow():
    assert os.environ['TF_KERAS'] == '1'
    assert os.environ['TF_USE_LEGACY_KERAS'] == '1'
    assert keras.__name__.startswith('tf_keras')


# 1,100 bf16 products of as many shapes, twice: oneDNN's primitives created in each pass
_PRIMITIVE_PASSES = """
import sys, crf_lr, tensorflow as tf
if sys.argv[1:] == ['serving']:
    from crf_lr.speed.primitive_cache import size_for_serving
    size_for_serving()
b = tf.ones([64, 8], tf.bfloat16)
f = tf.function(lambda x: tf.matmul(x, b), input_signature=[tf.TensorSpec([None, 64], tf.bfloat16)])
for name in ('FIRST', 'SECOND'):
    print(name, flush=True)
    for m in range(1, 1101):
        f(tf.ones([m, 64], tf.bfloat16))
"""


def _primitives_created(capacity, *argv):
    """oneDNN's cache misses (primitives created) in each pass of :data:`_PRIMITIVE_PASSES`,
    with ``ONEDNN_PRIMITIVE_CACHE_CAPACITY=capacity`` set beforehand (None: not set), ``argv``
    its arguments (``'serving'``: sized as ``crf_lr.serve`` sizes it)."""
    env = {k: v for k, v in os.environ.items()      # as from a shell: this process set them
           if k not in ('ONEDNN_PRIMITIVE_CACHE_CAPACITY', 'CRF_LR_SET_PRIMITIVE_CACHE')}
    env.update(ONEDNN_VERBOSE='profile_create', TF_CPP_MIN_LOG_LEVEL='3')
    if capacity is not None:
        env['ONEDNN_PRIMITIVE_CACHE_CAPACITY'] = str(capacity)
    out = subprocess.run([sys.executable, '-c', _PRIMITIVE_PASSES, *argv], capture_output=True,
                         text=True, env=env, timeout=300, check=True).stdout
    first, _, second = out.split('FIRST\n')[1].partition('SECOND\n')
    return first.count('create:cache_miss'), second.count('create:cache_miss')


def test_onednn_keeps_the_primitives_of_more_shapes_than_its_default_unless_set():
    """Importing crf_lr sets oneDNN's primitive cache to 8,192 where nothing set it: a second
    pass over 1,100 product shapes creates nothing again, where oneDNN's own 1,024 (or a
    user's value, kept) creates some again."""
    first, second = _primitives_created(None)
    if first == 0:
        pytest.skip("this CPU's TensorFlow runs bf16 products without oneDNN's primitives")
    assert (first, second) == (1100, 0)
    first, second = _primitives_created(1024)
    assert first == 1100 and second > 0


def test_a_server_keeps_onednns_own_cache_unless_the_user_set_one():
    """crf_lr.serve's shapes have no end, and each cached primitive holds memory (8,192 grew a
    server to 3.5 GB): it keeps oneDNN's 1,024, and a user's value."""
    first, second = _primitives_created(None, 'serving')
    if first == 0:
        pytest.skip("this CPU's TensorFlow runs bf16 products without oneDNN's primitives")
    assert first == 1100 and second > 0
    assert _primitives_created(8192, 'serving') == (1100, 0)


def test_a_server_started_from_a_process_that_imported_crf_lr_keeps_onednns_own(monkeypatch):
    """The child inherits the 8,192 crf_lr set here (a server started from a notebook): it is
    crf_lr's, not the user's, so the server still keeps 1,024."""
    from crf_lr.speed import primitive_cache
    monkeypatch.delenv(primitive_cache.VARIABLE, raising=False)
    monkeypatch.delenv(primitive_cache.SET_BY_CRF_LR, raising=False)
    primitive_cache.size_for_training()
    code = ('import crf_lr; from crf_lr.speed.primitive_cache import size_for_serving; '
            'print(size_for_serving())')
    child = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                           timeout=120, check=True)
    assert child.stdout.strip() == '1024'


def test_import_after_keras3_gives_clear_error():
    """After TensorFlow loaded Keras 3: ``import crf_lr`` and crf_lr.keras3 work (the import
    raised), the tf-keras side raises one ImportError saying what to do."""
    code = ('import os; os.environ.pop("TF_USE_LEGACY_KERAS", None); os.environ.pop("TF_KERAS", '
            'None)\nimport tensorflow as tf, keras\nimport crf_lr\n'
            'from crf_lr.keras3 import ConditionalRandomField as CRF\n'
            'print("KERAS3", tuple(CRF()(keras.ops.zeros((1, 2, 3))).shape))\n'
            'try:\n    import crf_lr.layers\nexcept ImportError as e:\n    print("ERR", e)\n')
    env = {k: v for k, v in os.environ.items() if k not in ('TF_USE_LEGACY_KERAS', 'TF_KERAS')}
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         env=dict(env, KERAS_BACKEND='tensorflow'), timeout=120).stdout
    assert "KERAS3 (1, 2, 3)" in out
    assert 'ERR crf_lr must be imported before TensorFlow loads Keras 3: its tf-keras side' in out


def test_bert4keras_optimizers_use_the_legacy_base_and_public_name_is_restored():
    from bert4keras.optimizers import Adam
    assert issubclass(Adam, keras.optimizers.legacy.Optimizer)
    assert keras.optimizers.Optimizer is not keras.optimizers.legacy.Optimizer
    variable = keras.backend.variable(np.ones(3, 'float32'))
    with_grad = Adam(learning_rate=0.1)
    import tensorflow as tf
    with_grad.apply_gradients([(tf.constant([1.0, -1.0, 0.0]), variable)])
    np.testing.assert_allclose(keras.backend.get_value(variable), [0.9, 1.1, 1.0], atol=1e-5)


def _tiny_bert(config_path, checkpoint_path=None):
    from bert4keras.models import build_transformer_model
    return build_transformer_model(config_path, checkpoint_path, model='bert',
                                   return_keras_model=False)


def test_save_weights_as_checkpoint_round_trips(tiny_bert_config_path, tmp_path):
    bert = _tiny_bert(tiny_bert_config_path)
    checkpoint = str(tmp_path / 'model.ckpt')
    bert.save_weights_as_checkpoint(checkpoint)
    reloaded = _tiny_bert(tiny_bert_config_path, checkpoint)
    inputs = [np.array([[2, 5, 7, 3]]), np.zeros((1, 4))]
    np.testing.assert_array_equal(bert.model.predict(inputs, verbose=0),
                                  reloaded.model.predict(inputs, verbose=0))


def test_feed_forward_config_reloads_from_h5(tiny_bert_config_path, tmp_path):
    from bert4keras.layers import FeedForward
    layer = FeedForward(8, activation='gelu')
    assert layer.get_config()['activation'] == ['gelu_erf']
    bert = _tiny_bert(tiny_bert_config_path)
    path = str(tmp_path / 'model.h5')
    bert.model.save(path)
    reloaded = keras.models.load_model(path)
    inputs = [np.array([[2, 5, 7, 3]]), np.zeros((1, 4))]
    np.testing.assert_allclose(bert.model.predict(inputs, verbose=0),
                               reloaded.predict(inputs, verbose=0), atol=1e-6)


def _kernels(layer):
    return [weight.numpy() for weight in layer.weights if 'kernel' in weight.name]


def test_a_random_encoder_draws_each_dense_kernel_of_a_layer_afresh(tiny_bert_config_path):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('error', UserWarning)   # tf-keras's 'unseeded ... identical values'
        keras.utils.set_random_seed(0)
        bert = _tiny_bert(tiny_bert_config_path)
    attention = bert.model.get_layer('Transformer-0-MultiHeadSelfAttention')
    query, key, value, output = _kernels(attention)
    for first, second in [(query, key), (query, value), (key, value), (query, output)]:
        assert not np.array_equal(first, second)
    inner, outer = _kernels(bert.model.get_layer('Transformer-0-FeedForward'))
    assert not np.array_equal(inner.ravel()[:outer.size], outer.ravel()[:inner.size])
    keras.utils.set_random_seed(0)                 # reproducible under Keras's seed
    again = _tiny_bert(tiny_bert_config_path)
    for mine, theirs in zip(bert.model.weights, again.model.weights):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


@pytest.mark.parametrize('make', [
    lambda init: __import__('bert4keras.layers').layers.EfficientGlobalPointer(
        2, 4, kernel_initializer=init),
    lambda init: __import__('bert4keras.layers').layers.GatedAttentionUnit(
        8, key_size=4, kernel_initializer=init)])
def test_each_dense_layer_has_its_own_unseeded_initializer_and_a_seeded_one_is_kept(make):
    unseeded, seeded = make(keras.initializers.TruncatedNormal()), make(
        keras.initializers.TruncatedNormal(seed=1))
    for layer in (unseeded, seeded):
        layer.build((None, 5, 8))
    denses = [v for v in vars(unseeded).values() if hasattr(v, 'kernel_initializer')]
    assert len(denses) >= 2
    assert len({id(d.kernel_initializer) for d in denses} | {id(unseeded.kernel_initializer)}) \
        == len(denses) + 1
    assert all(v.kernel_initializer is seeded.kernel_initializer
               for v in vars(seeded).values() if hasattr(v, 'kernel_initializer'))


class _ScaledNormal(keras.initializers.Initializer):       # no get_config: not rebuilt from it
    def __init__(self, scale):
        self.scale = scale

    def __call__(self, shape, dtype=None, **kwargs):
        return self.scale * tf.random.normal(shape, dtype=dtype or tf.float32)


@pytest.mark.parametrize('init', [_ScaledNormal(0.02),
                                  lambda shape, dtype=None: tf.random.normal(shape, dtype=dtype)])
def test_an_initializer_its_config_cannot_rebuild_builds_the_layer_as_it_did(init):
    from bert4keras.layers import MultiHeadAttention
    layer = MultiHeadAttention(heads=2, head_size=4, kernel_initializer=init)
    inputs = keras.Input((5, 8))
    layer([inputs, inputs, inputs])         # was AttributeError / TypeError inside the fix
    assert layer.q_dense.kernel_initializer is init


def test_missing_no_deps_packages_are_named_with_the_install_command():
    from crf_lr.compat import check_no_deps_requirements
    check_no_deps_requirements()                      # both present here
    with pytest.raises(ImportError, match=r'needs bert4keras==0\.11\.5 and x==1, which pip cannot '
                                          r'install.*pip install --no-deps bert4keras==0\.11\.5 '
                                          r'x==1'):
        check_no_deps_requirements({'bert4keras_missing_': 'bert4keras==0.11.5',
                                    'no_such_module_': 'x==1'})


@pytest.mark.parametrize('shape', [(2, 3, 4), (2, 3, 5, 4), (0, 7, 4)])
def test_flat_dense_computes_what_keras_dense_does_and_keeps_the_static_shape(shape):
    """crf_lr.compat.flat_dense: a Dense layer on a rank > 2 input, flattened for the fused
    kernel, gives Keras's outputs (and gradients) and static shape; outside the block Keras's
    own call runs (a Tensordot reshape), inside it none does; rank 2 inputs are untouched."""
    from crf_lr.compat import flat_dense, keras, tf
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(6, activation='gelu')
    inputs = tf.random.normal(shape)
    layer(inputs)

    def traced(flat):
        with flat_dense(flat):
            step = tf.function(lambda x: layer(x))
            graph = step.get_concrete_function(
                tf.TensorSpec([None] * (len(shape) - 1) + [4])).graph
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = step(inputs)
            total = tf.reduce_sum(outputs * outputs)
        return outputs, tape.gradient(total, [inputs] + layer.trainable_weights), graph
    keras_outputs, keras_gradients, keras_graph = traced(False)
    flat_outputs, flat_gradients, flat_graph = traced(True)
    np.testing.assert_allclose(flat_outputs, keras_outputs, rtol=1e-5, atol=1e-6)
    for flat, reference in zip(flat_gradients, keras_gradients):
        np.testing.assert_allclose(flat, reference, rtol=1e-5, atol=1e-5)
    assert flat_outputs.shape == shape[:-1] + (6,)
    assert [t.shape.as_list() for t in flat_graph.outputs][0][-1] == 6
    assert any('Tensordot' in op.name for op in keras_graph.get_operations())
    assert not any('Tensordot' in op.name for op in flat_graph.get_operations())
    # the result takes the input's shape with its last entry changed: no slicing nor joining
    assert not {'StridedSlice', 'ConcatV2'} & {op.type for op in flat_graph.get_operations()}
    with flat_dense():                                  # rank 2: Keras's own call, no reshape
        rows = tf.function(lambda x: layer(x)).get_concrete_function(tf.TensorSpec([None, 4]))
    assert not any(op.type == 'Reshape' for op in rows.graph.get_operations())
