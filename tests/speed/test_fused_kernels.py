"""crf_lr.speed.fused_kernels and crf_lr.speed.native_build: the one-pass GELU and layer norm (with
its scale and offset) with their gradients, and the softmax's gradient, against float64 closed forms
and TensorFlow's own ops; a model's training calls use them, its other calls do not, and its
gradients stay TensorFlow's to float rounding, and TensorFlow's ops stand in without a compiler
(the build and its cache: test_native_build.py)."""
import math

import numpy as np
import pytest

from crf_lr.speed import fused_kernels, native_build
from crf_lr.compat import tf


def _values(shape, seed=0, spread=3.0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) * spread
    x.flat[:4] = [0.0, -12.0, 12.0, 1e-30]                   # zero, both tails, a denormal-ish
    return x


def _gelu64(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _gelu_grad64(x):
    return 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / \
        math.sqrt(2 * math.pi)


def _bf16_tolerance(reference):
    return 2.0 ** -8 * np.abs(reference) + 1e-6          # rounded once to 8 significant bits


@pytest.mark.kernel_values
@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_gelu_and_its_gradient_match_the_closed_form(fused_ops, dtype):
    x = _values((600, 257))                  # several threads' share
    dy = _values((600, 257), seed=1, spread=1.0)
    x_t, dy_t = tf.cast(x, dtype), tf.cast(dy, dtype)
    x64 = tf.cast(x_t, tf.float64).numpy()                # what the kernel sees
    y = tf.cast(fused_ops.crf_lr_gelu(x_t), tf.float64).numpy()
    dx = tf.cast(fused_ops.crf_lr_gelu_grad(dy_t, x_t), tf.float64).numpy()
    y_ref = _gelu64(x64)
    dx_ref = tf.cast(dy_t, tf.float64).numpy() * _gelu_grad64(x64)
    if dtype == 'float32':    # 1 + erf cancels in the left tail: absolute, as bert4keras's ops
        np.testing.assert_allclose(y, y_ref, rtol=2e-6, atol=1e-6)
        np.testing.assert_allclose(dx, dx_ref, rtol=2e-6, atol=1e-6)
    else:
        assert np.all(np.abs(y - y_ref) <= _bf16_tolerance(y_ref))
        assert np.all(np.abs(dx - dx_ref) <= _bf16_tolerance(dx_ref))


@pytest.mark.kernel_values
def test_gelu_matches_bert4keras_and_its_gradient_tensorflows(fused_ops):
    from bert4keras.backend import gelu_erf
    x = tf.constant(_values((4, 300)), tf.float32)
    dy = tf.constant(_values((4, 300), seed=2, spread=1.0), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours, theirs = fused_ops.crf_lr_gelu(x), gelu_erf(x)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    exact = _gelu64(x.numpy().astype(np.float64))                # no less accurate than theirs
    assert np.abs(ours.numpy() - exact).max() <= 1.01 * np.abs(theirs.numpy() - exact).max()
    np.testing.assert_allclose(tape.gradient(ours, x, output_gradients=dy),     # registered
                               tape.gradient(theirs, x, output_gradients=dy), rtol=1e-5, atol=1e-6)


@pytest.mark.kernel_values
@pytest.mark.parametrize('scale', [1.0, 0.125])
@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
@pytest.mark.parametrize('shape',
                         [(2, 3, 5, 7), (4, 1), (0, 6), (3, 0), (3, 130), (2, 12, 64, 128)])
def test_softmax_gradient_matches_tensorflows(fused_ops, dtype, shape, scale):
    """The gradient of softmax(scale x) with respect to x (a power of two: the same rounding)."""
    logits = _values(shape, seed=3)
    if logits.size:
        logits[..., -1] = -np.inf                          # a masked key, as attention's bias gives
        logits[..., 0] = np.maximum(logits[..., 0], 0.0)   # every row keeps one key
    if shape == (4, 1):
        logits[:] = 0.0
    dy = tf.cast(_values(shape, seed=4, spread=1.0), dtype)
    y = tf.nn.softmax(tf.cast(logits, dtype))
    dx = tf.cast(fused_ops.crf_lr_softmax_grad(dy, y, scale=scale), tf.float64).numpy() / scale
    y64 = tf.cast(y, tf.float64)
    with tf.GradientTape() as tape:
        x64 = tf.constant(np.where(np.isinf(logits), -1e30, logits))
        tape.watch(x64)
        softmax64 = tf.nn.softmax(x64)
    reference = tape.gradient(softmax64, x64, output_gradients=tf.cast(dy, tf.float64)).numpy()
    if dtype == 'float32':                  # dy - sum(dy y) cancels: no worse than TensorFlow's
        with tf.GradientTape() as tape:
            x32 = tf.constant(logits, tf.float32)
            tape.watch(x32)
            softmax32 = tf.nn.softmax(x32)
        theirs = tape.gradient(softmax32, x32, output_gradients=dy).numpy()
        np.testing.assert_allclose(dx, reference, rtol=1e-5, atol=2e-6)
        assert np.abs(dx - reference).max(initial=0) <= \
            2 * np.abs(theirs - reference).max(initial=0) + 1e-9
    else:        # from the bf16 y and dy: their rounding, not the kernel's, bounds the difference
        own = (y64 * (tf.cast(dy, tf.float64)
                      - tf.reduce_sum(tf.cast(dy, tf.float64) * y64, -1, keepdims=True))).numpy()
        assert np.all(np.abs(dx - own) <= _bf16_tolerance(own) + 1e-5)
    if logits.size and shape != (4, 1):
        assert np.all(dx[..., -1] == 0)                    # no gradient reaches a masked key


@pytest.mark.kernel_values
def test_bfloat16_results_are_rounded_bit_for_bit_as_tensorflows_cast(fused_ops):
    """The kernels' float32 -> bfloat16 rounding (ties to even, NaN kept, overflow to inf, signed
    zeros) is ``tf.cast``'s: the softmax gradient of y = [0.5, 0.5] and dy = [4, 0] with ``scale``
    v is exactly [v, -v] in float32, then rounded. (Subnormal v are left out: TensorFlow's threads
    flush arithmetic's subnormal results to zero, for its own ops as for these.)"""
    rng = np.random.default_rng(11)
    randoms = (rng.normal(size=300) * 10.0 ** rng.integers(-40, 38, 300)).astype(np.float32)
    representable = tf.bitcast(tf.cast(tf.constant(randoms[:100]), tf.bfloat16), tf.uint16)
    high = tf.cast(representable, tf.uint32).numpy() << 16
    near_ties = np.concatenate([high + 0x8000, high + 0x7fff, high + 0x8001, high + 0x18000])
    specials = np.array([np.finfo(np.float32).max, -np.finfo(np.float32).max, np.inf, -np.inf,
                         np.nan, 0.0, -0.0, 1.0, 1.00390625, 1.01171875], np.float32)
    values = np.concatenate([randoms, near_ties.astype(np.uint32).view(np.float32), specials])
    values = values[~(np.abs(values) < np.finfo(np.float32).tiny) | (values == 0)]
    y = tf.constant([[0.5, 0.5]], tf.bfloat16)
    dy = tf.constant([[4.0, 0.0]], tf.bfloat16)
    ours = np.stack([fused_ops.crf_lr_softmax_grad(dy, y, scale=float(v)).numpy()[0]
                     for v in values])
    theirs = tf.cast(tf.constant(np.stack([values, -values], -1)), tf.bfloat16).numpy()
    bits = lambda a: a.view(np.uint16)                         # noqa: E731
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(bits(ours[finite]), bits(theirs[finite]))
    assert np.isnan(ours[~finite].astype(np.float32)).all()


def _layer_norm64(x, epsilon):
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + epsilon)


@pytest.mark.kernel_values
@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
@pytest.mark.parametrize('shape', [(2, 3, 312), (5, 7), (0, 4), (3, 0), (2048, 312)])
def test_layer_norm_and_its_gradients_match_the_closed_form(fused_ops, dtype, shape):
    """y = x_hat gamma + beta and dx, dgamma, dbeta against float64 TensorFlow ops on the same
    (rounded) inputs; the statistics outputs are the rows' float64 mean and std."""
    epsilon = 1e-12
    x = _values(shape, seed=5) + 4.0                       # a mean away from 0, as residuals have
    if x.size:
        x[0] = 2.5                                          # a constant row: std = sqrt(epsilon)
    x_t, gamma, beta, dy = (tf.cast(v, dtype) for v in (
        x, _values(shape[-1:], seed=8, spread=0.5) + 1.0, _values(shape[-1:], seed=9, spread=0.5),
        _values(shape, seed=6, spread=1.0)))
    x64, gamma64, beta64, dy64 = (tf.cast(v, tf.float64) for v in (x_t, gamma, beta, dy))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x_t, gamma, beta, x64, gamma64, beta64])
        ours = fused_kernels.layer_norm(x_t, gamma, beta, epsilon)
        exact = _layer_norm64_tf(x64, epsilon) * gamma64 + beta64
    dx, dgamma, dbeta = (tf.cast(g, tf.float64).numpy() for g in tape.gradient(
        ours, [x_t, gamma, beta], output_gradients=dy))
    dx_ref, dgamma_ref, dbeta_ref = (g.numpy() for g in tape.gradient(
        exact, [x64, gamma64, beta64], output_gradients=dy64))
    ours, exact = tf.cast(ours, tf.float64).numpy(), exact.numpy()
    assert ours.shape == dx.shape == x.shape and dgamma.shape == dbeta.shape == shape[-1:]
    _, mean, std = fused_ops.crf_lr_layer_norm(x_t, gamma, beta, epsilon=epsilon)
    flat = (math.prod(shape[:-1]), shape[-1])
    rows64 = np.pad(x64.numpy().reshape(flat), [(0, 0), (0, 0 if shape[-1] else 1)])
    np.testing.assert_allclose(mean.numpy().ravel(), rows64.mean(-1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(std.numpy().ravel(), np.sqrt(rows64.var(-1) + epsilon),
                               rtol=1e-5, atol=1e-7)        # no entries: 0 and sqrt(epsilon)
    # per row: the constant row's gradient is (g - mean g) / sqrt(epsilon), 1e6 times the rest
    row_scale = np.abs(dx_ref).max(axis=-1, keepdims=True, initial=0) + 1
    # per column: the sums' terms' magnitudes
    x_hat64 = _layer_norm64_tf(x64, epsilon).numpy()
    gamma_scale = np.abs(dy64.numpy() * x_hat64).reshape(flat).sum(0) + 1e-30
    beta_scale = np.abs(dy64.numpy()).reshape(flat).sum(0) + 1e-30
    if dtype == 'float32':
        np.testing.assert_allclose(ours, exact, rtol=1e-5, atol=1e-5)
        assert np.all(np.abs(dx - dx_ref) <= 1e-5 * row_scale)
        assert np.all(np.abs(dgamma - dgamma_ref) <= 1e-5 * gamma_scale)
        assert np.all(np.abs(dbeta - dbeta_ref) <= 1e-6 * beta_scale)
    else:
        assert np.all(np.abs(ours - exact) <= _bf16_tolerance(exact) + 1e-4)
        assert np.all(np.abs(dx - dx_ref) <= 2.0 ** -6 * row_scale)
        # one rounding to bfloat16 of sums taken in float32 (x_hat from float32 statistics)
        assert np.all(np.abs(dgamma - dgamma_ref) <= 2.0 ** -8 * np.abs(dgamma_ref)
                      + 1e-5 * gamma_scale)
        assert np.all(np.abs(dbeta - dbeta_ref) <= 2.0 ** -8 * np.abs(dbeta_ref)
                      + 1e-6 * beta_scale)


@pytest.mark.parametrize('rows', [None, 40, 2000])
def test_a_layer_norms_traced_gradient_is_one_kernel(fused_ops, rows):
    """The gradient of y with respect to x, gamma and beta, traced: the gradient kernel and no
    arithmetic op beside it, whether the rows are known when traced (the tape's zeros for the
    statistics are then a constant or a Fill) or not (ZerosLike)."""
    def gradients(x, gamma, beta, dy):
        with tf.GradientTape() as tape:
            tape.watch([x, gamma, beta])
            y = fused_kernels.layer_norm(x, gamma, beta, 1e-6)
        return tape.gradient(y, [x, gamma, beta], output_gradients=dy)
    specs = [tf.TensorSpec([rows, 9]), tf.TensorSpec([9]), tf.TensorSpec([9]),
             tf.TensorSpec([rows, 9])]
    types = {op.type for op in tf.function(gradients).get_concrete_function(*specs)
             .graph.get_operations()}
    assert {'CrfLrLayerNorm', 'CrfLrLayerNormGrad'} <= types
    assert not types & {'Mul', 'Sum', 'AddV2', 'AddN', 'RealDiv', 'Cast', 'Sub'}


@pytest.mark.parametrize('options', [dict(), dict(scale=False, offset=False),
                                     dict(scale=2.0, offset=-0.5), dict(scale=0, offset=None),
                                     dict(scale=list(np.linspace(0.5, 2, 16)),
                                          offset=np.arange(16.0))],
                         ids=['weights', 'no scale or offset', 'constant scale and offset',
                              'a zero scale, no offset', 'constant vectors'])
@pytest.mark.parametrize('policy', ['float32', 'mixed_bfloat16'])
def test_a_layer_norm_layers_training_call_is_one_kernel_with_the_same_values(
        fused_ops, options, policy):
    """bert4keras's LayerNormalization in a training call: one kernel each way, with the outputs
    and the gradients (input, gamma, beta) of its TensorFlow ops to float32 rounding, and
    nearer float32's in bf16 than those ops come."""
    from bert4keras.layers import LayerNormalization

    def run(fused, layer, x):
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, training=True)
                total = tf.reduce_sum(tf.cast(y, tf.float32) * tf.cos(tf.range(16.)))
            return y, tape.gradient(total, [x] + layer.trainable_weights)
        with fused_kernels.fused_kernels(fused):
            traced = tf.function(step).get_concrete_function(x)
        y, gradients = traced(x)
        return ([tf.cast(t, tf.float64).numpy() for t in [y] + gradients],
                {op.type for op in traced.graph.get_operations()})

    def layer(dtype):
        built = LayerNormalization(epsilon=1e-12, dtype=dtype, **options)
        built.build((3, 6, 16))
        rng = np.random.default_rng(7)
        built.set_weights([rng.normal(size=w.shape).astype('float32') for w in built.weights])
        return built

    x = np.random.default_rng(1).normal(size=(3, 6, 16)) * 3 + 1
    compute = 'bfloat16' if policy == 'mixed_bfloat16' else 'float32'
    if compute == 'float32':
        x[0, 2] = 5.0          # a constant row (in bf16 its 1e6-times gradient would be the mean)
    ours, types = run(True, layer(policy), tf.constant(x, compute))
    theirs, their_types = run(False, layer(policy), tf.constant(x, compute))
    assert 'CrfLrLayerNormGrad' in types and 'CrfLrLayerNorm' not in their_types
    if policy == 'float32':
        for got, want in zip(ours, theirs):
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * (np.abs(want).max() + 1))
        return
    reference, _ = run(True, layer('float32'), tf.constant(tf.cast(tf.constant(x, compute),
                                                                   tf.float32)))
    for got, want, exact in zip(ours, theirs, reference):
        assert np.abs(got - exact).mean() <= np.abs(want - exact).mean() + 1e-12
        assert np.abs(got - exact).max() <= 2.0 ** -6 * (np.abs(exact).max() + 1)


@pytest.mark.kernel_values
def test_column_sums_are_the_same_in_every_run(fused_ops):
    """gamma's, beta's and the bf16 bias's gradients: chunks of rows summed in a fixed order,
    whatever the threads (1e17 + 1 - 1e17 across three chunks: one answer, every run)."""
    dy = np.zeros((20000, 3), np.float32)
    dy[[0, 10000, 19999], 0] = [1e17, 1.0, -1e17]
    dy[:, 1] = np.random.default_rng(4).normal(size=20000)
    x = tf.constant(np.random.default_rng(5).normal(size=(20000, 3)), tf.float32)
    _, mean, std = fused_ops.crf_lr_layer_norm(x, tf.ones([3]), tf.zeros([3]), epsilon=1e-6)
    sums = {tuple(np.concatenate([g.numpy() for g in fused_ops.crf_lr_layer_norm_grad(
                tf.constant(dy), x, tf.ones([3]), mean, std)[1:]]))
            + tuple(tf.cast(fused_ops.crf_lr_bias_grad(tf.cast(dy[:, 1:], tf.bfloat16)),
                            tf.float32).numpy())
            for _ in range(40)}
    assert len(sums) == 1


@pytest.mark.kernel_values
def test_a_shift_that_enlarges_the_softmax_keeps_tensorflows_gradient(fused_ops):
    """x (1, 5) shifted by (4, 5): the gradient has x's shape (summed over the broadcast axis)."""
    from tf_keras.src.engine.base_layer_utils import call_context
    x = tf.constant(_values((1, 5), seed=2), tf.float32)
    shift = tf.constant(_values((4, 5), seed=3), tf.float32)
    dy = tf.reshape(tf.cos(tf.range(20.0)), (4, 5))
    with call_context().enter(None, None, False, {'training': True}):
        assert fused_kernels.applies(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fused_kernels.softmax(x, 2.0, shift)
        ours = tape.gradient(y, x, output_gradients=dy)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.nn.softmax(x / 2.0 + shift)
    theirs = tape.gradient(y, x, output_gradients=dy)
    assert ours.shape == (1, 5)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def _layer_norm64_tf(x, epsilon):
    centred = x - tf.reduce_mean(x, -1, keepdims=True)
    return centred / tf.sqrt(tf.reduce_mean(centred ** 2, -1, keepdims=True) + epsilon)


@pytest.mark.kernel_values
@pytest.mark.parametrize('shape', [(4096, 312), (300, 70), (2, 3, 130), (5,), (0, 6), (3, 0)])
def test_the_bf16_bias_gradient_is_the_exact_sum_rounded_once(fused_ops, shape):
    """The float64 sum of the bfloat16 values, rounded once to bfloat16, where float32 sums of
    256 rows lose nothing (TensorFlow's BiasAddGrad sums in bfloat16 and drifts far from it)."""
    dy = tf.constant(_values(shape, seed=3) * 3.0, tf.bfloat16)
    exact = tf.cast(dy, tf.float64).numpy().reshape(math.prod(shape[:-1]), shape[-1]).sum(0)
    ours = tf.cast(fused_ops.crf_lr_bias_grad(dy), tf.float64).numpy()
    np.testing.assert_array_equal(ours, tf.cast(tf.cast(exact, tf.bfloat16), tf.float64).numpy())
    if shape == (4096, 312):
        theirs = tf.cast(tf.raw_ops.BiasAddGrad(out_backprop=dy), tf.float64).numpy()
        assert np.abs(theirs - exact).max() > 10 * np.abs(ours - exact).max()


@pytest.mark.kernel_values
def test_the_bf16_bias_gradient_rounds_once_across_chunks_of_rows(fused_ops):
    """1 + 2^-8 + 2^-30 lies just above a bfloat16 halfway point: rounded once it goes up;
    through float32 first it would land on the halfway point and go down to 1 (ties to even)."""
    column = np.zeros(512)
    column[[0, 1, 300]] = [1.0, 2.0 ** -8, 2.0 ** -30]           # 300: another chunk of rows
    dy = tf.constant(column[:, None], tf.bfloat16)
    assert float(fused_ops.crf_lr_bias_grad(dy)[0]) == 1.0 + 2.0 ** -7


def test_a_bias_gradient_has_its_gradient_and_refuses_a_scalar(fused_ops):
    dy = tf.constant(_values((3, 4), seed=5), tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(dy)
        db = fused_ops.crf_lr_bias_grad(dy)
        total = tf.reduce_sum(db * tf.range(4, dtype=tf.bfloat16))
    np.testing.assert_array_equal(tf.cast(tape.gradient(total, dy), tf.float32),
                                  np.tile(np.arange(4.), (3, 1)))
    with pytest.raises(ValueError, match='must be at least rank 1'):
        tf.function(fused_ops.crf_lr_bias_grad).get_concrete_function(
            tf.TensorSpec([], tf.bfloat16))


def test_bias_adds_outside_the_kernels_reach_keep_tensorflows_gradient(fused_ops):
    """A bias along another axis than the last (channels first, NCHW), and any bias within
    ``fused_bias_gradient(False)``, keep BiasAddGrad."""
    x, bias = (tf.constant(_values((2, 3, 4, 5), seed=1), tf.bfloat16),
               tf.constant([1., 2., 3.], tf.bfloat16))

    def gradient(data_format):
        with tf.GradientTape() as tape:
            tape.watch(bias)                 # the same sum either way: channels first or last
            y = tf.nn.bias_add(x if data_format == 'NCHW' else tf.transpose(x, [0, 2, 3, 1]),
                               bias, data_format=data_format)     # None: the default, NHWC
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, bias)
    exact = 2 * (tf.cast(x, tf.float64) + tf.cast(bias, tf.float64)[:, None, None]).numpy()

    def assert_sums(gradients):                          # to bfloat16's rounding of 2 y
        np.testing.assert_allclose(tf.cast(gradients, tf.float64), exact.sum((0, 2, 3)),
                                   rtol=2e-2)
    traced = tf.function(gradient).get_concrete_function('NCHW')
    channels_last = tf.function(gradient).get_concrete_function('NHWC')
    with fused_kernels.fused_bias_gradient(False):
        switched_off = tf.function(gradient).get_concrete_function('NHWC')
    assert 'BiasAddGrad' in {op.type for op in traced.graph.get_operations()}
    assert 'CrfLrBiasGrad' in {op.type for op in channels_last.graph.get_operations()}
    assert 'BiasAddGrad' in {op.type for op in switched_off.graph.get_operations()}
    for gradients in (traced(), channels_last(), switched_off(), gradient(None)):   # last: eager
        assert_sums(gradients)


def test_a_bias_added_in_an_xla_function_keeps_tensorflows_gradient_outside_it(fused_ops):
    """The gradient of a function compiled by XLA, traced apart from it (here in the calling
    function), is compiled with it: BiasAddGrad there, where the kernel failed to compile."""
    x = tf.constant(_values((64, 8), seed=2), tf.bfloat16)
    bias = tf.Variable(tf.zeros([8], tf.bfloat16))
    forward = tf.function(lambda b: tf.nn.bias_add(x, b), jit_compile=True)

    @tf.function
    def outer():
        with tf.GradientTape() as tape:
            y = forward(bias)
        return tape.gradient(y, bias, output_gradients=x)
    exact = tf.cast(x, tf.float64).numpy().sum(0)
    np.testing.assert_allclose(tf.cast(outer(), tf.float64), exact, rtol=2e-2, atol=0.1)


def test_inputs_of_different_shapes_are_refused(fused_ops):
    with pytest.raises(tf.errors.InvalidArgumentError, match='inputs of different shapes'):
        fused_ops.crf_lr_softmax_grad(tf.zeros([2, 3]), tf.zeros([2, 4]))
    with pytest.raises(tf.errors.InvalidArgumentError, match='inputs of different shapes'):
        fused_ops.crf_lr_gelu_grad(tf.zeros([2, 3]), tf.zeros([3, 2]))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match='mean and std have 3 and 2 entries for 2 rows'):
        fused_ops.crf_lr_layer_norm_grad(tf.zeros([2, 3]), tf.zeros([2, 3]), tf.ones([3]),
                                         tf.zeros([3]), tf.ones([2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match='input 1 has 4 entries for rows of 3'):
        fused_ops.crf_lr_layer_norm(tf.zeros([2, 3]), tf.ones([4]), tf.zeros([3]), epsilon=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match='input 2 has 2 entries for rows of 3'):
        fused_ops.crf_lr_layer_norm_grad(tf.zeros([2, 3]), tf.zeros([2, 3]), tf.ones([2]),
                                         tf.zeros([2]), tf.ones([2]))


def _tiny_model(tiny_bert_config_path):
    from bert4keras.models import build_transformer_model
    tf.keras.utils.set_random_seed(0)
    return build_transformer_model(tiny_bert_config_path, model='bert')


def _step_graph(model, inputs, training, jit_compile=False):
    """(op types of a traced loss-and-gradient step, the gradients)."""
    def step(token_ids, segment_ids):
        with tf.GradientTape() as tape:
            states = model([token_ids, segment_ids], training=training)
            loss = tf.reduce_sum(states * tf.cos(tf.range(states.shape[-1], dtype=states.dtype)))
        return tape.gradient(loss, model.trainable_weights)
    traced = tf.function(step, jit_compile=jit_compile).get_concrete_function(*inputs)
    return {op.type for op in traced.graph.get_operations()}, traced(*inputs)


def test_training_calls_use_the_kernels_and_keep_the_gradients(fused_ops, tiny_bert_config_path):
    model = _tiny_model(tiny_bert_config_path)
    token_ids = tf.constant([[2, 5, 9, 7, 3, 0, 0], [2, 4, 4, 8, 11, 6, 3]])
    inputs = (token_ids, tf.zeros_like(token_ids))
    fused_types, fused = _step_graph(model, inputs, training=True)
    assert {'CrfLrGelu', 'CrfLrGeluGrad', 'CrfLrSoftmaxGrad', 'CrfLrLayerNorm',
            'CrfLrLayerNormGrad'} <= fused_types
    assert 'BiasAddGrad' in fused_types                       # float32: TensorFlow's bias sums
    with fused_kernels.fused_kernels(False):
        plain_types, plain = _step_graph(model, inputs, training=True)
    assert not {t for t in plain_types if t.startswith('CrfLr')}
    for ours, theirs in zip(fused, plain):
        np.testing.assert_allclose(tf.convert_to_tensor(ours), tf.convert_to_tensor(theirs),
                                   rtol=1e-4, atol=1e-5)
    prediction_types, _ = _step_graph(model, inputs, training=False)
    assert not {t for t in prediction_types if t.startswith('CrfLr')}   # oneDNN fuses these
    xla_types, xla = _step_graph(model, inputs, training=True, jit_compile=True)
    assert not {t for t in xla_types if t.startswith('CrfLr')}          # XLA has no kernel
    for ours, theirs in zip(xla, plain):
        np.testing.assert_allclose(tf.convert_to_tensor(ours), tf.convert_to_tensor(theirs),
                                   rtol=1e-4, atol=1e-5)


def _ops_in(types):
    return {t for t in types if t.startswith('CrfLr')}


def test_the_kernels_stay_out_of_saved_models_tensor_flags_and_a_process_switched_off(
        fused_ops, tiny_bert_config_path, tmp_path, monkeypatch):
    model = _tiny_model(tiny_bert_config_path)
    token_ids = tf.constant([[2, 5, 9, 7, 3]])
    inputs = (token_ids, tf.zeros_like(token_ids))
    model.save(str(tmp_path / 'saved'), save_format='tf')     # traces training calls too
    assert b'CrfLr' not in (tmp_path / 'saved' / 'saved_model.pb').read_bytes()

    def step(token_ids, segment_ids, training):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model([token_ids, segment_ids], training=training))
        return tape.gradient(loss, model.trainable_weights)
    flag = tf.TensorSpec([], tf.bool)
    unknown = tf.function(step).get_concrete_function(*inputs, flag)     # a tensor: not known
    assert not _ops_in({op.type for op in unknown.graph.get_operations()})
    gradients = [g for g in unknown(*inputs, tf.constant(True)) if g is not None]
    assert gradients and all(np.isfinite(tf.convert_to_tensor(g)).all() for g in gradients)
    monkeypatch.setenv('CRF_LR_FUSED_KERNELS', '0')                       # the whole process
    assert not _ops_in(_step_graph(model, inputs, training=True)[0])
    assert fused_kernels.status() == 'fused kernels: off (switched off)'


def test_bf16_gradients_come_no_further_from_float32s(fused_ops, tiny_bert_config_path):
    from crf_lr.model.precision import set_precision
    token_ids = tf.constant([[2, 5, 9, 7, 3, 0, 0], [2, 4, 4, 8, 11, 6, 3]])
    inputs = (token_ids, tf.zeros_like(token_ids))
    reference = _step_graph(_tiny_model(tiny_bert_config_path), inputs, training=True)[1]
    set_precision('mixed_bfloat16')
    try:
        model = _tiny_model(tiny_bert_config_path)            # the same seed: the same weights
        fused = _step_graph(model, inputs, training=True)
        with fused_kernels.fused_kernels(False):
            plain = _step_graph(model, inputs, training=True)
    finally:
        set_precision('float32')
    assert {'CrfLrGelu', 'CrfLrLayerNorm', 'CrfLrSoftmaxGrad', 'CrfLrBiasGrad'} <= _ops_in(fused[0])
    assert 'BiasAddGrad' not in fused[0] and 'BiasAddGrad' in plain[0]

    def distance(gradients):
        return np.sqrt(sum(float(tf.reduce_sum(tf.square(tf.cast(tf.convert_to_tensor(g),
                                                                 tf.float32) - r)))
                           for g, r in zip(gradients, reference)))
    scale = np.sqrt(sum(float(tf.reduce_sum(tf.square(r))) for r in reference))
    assert distance(fused[1]) <= max(1.25 * distance(plain[1]), 1e-3 * scale)


def test_saved_configs_keep_bert4keras_activation_name():
    from bert4keras.layers import FeedForward
    layer = FeedForward(8, activation='gelu')
    assert layer.activation[0] is fused_kernels.gelu_erf
    assert layer.get_config()['activation'] == ['gelu_erf']


def test_without_a_compiler_tensorflows_ops_stand_in(monkeypatch, tiny_bert_config_path):
    monkeypatch.setattr(native_build, 'compiler', lambda: None)
    monkeypatch.setattr(fused_kernels, '_loaded', {})
    assert fused_kernels.status() == ("fused kernels: off (no C++ compiler to build them: "
                                      "install g++ or set $CXX; TensorFlow's ops are used, "
                                      f"{fused_kernels.cost_without_them()})")
    model = _tiny_model(tiny_bert_config_path)
    token_ids = tf.constant([[2, 5, 9, 3]])
    types, gradients = _step_graph(model, (token_ids, tf.zeros_like(token_ids)), training=True)
    assert not {t for t in types if t.startswith('CrfLr')}
    assert all(np.isfinite(tf.convert_to_tensor(g)).all() for g in gradients)




def test_a_training_step_traces_without_autograph_warnings(monkeypatch):
    """The kernels' choice is Python run at trace time: AutoGraph converted it and warned that it
    could not transform importlib's and os.path's functions on the first step of every model."""
    from tensorflow.python.autograph.utils import ag_logging
    from crf_lr.compat import keras
    from crf_lr.model.crf import ConditionalRandomField
    warned = []
    monkeypatch.setattr(ag_logging, 'warning', lambda message, *args: warned.append(
        message % args))
    inputs = keras.Input((None, 3))
    crf = ConditionalRandomField(name='CRF')
    model = keras.Model(inputs, crf(keras.layers.Dense(4, activation='gelu')(
        keras.layers.LayerNormalization()(inputs))))
    model.compile(loss=crf.sparse_loss, optimizer='adam', metrics=[crf.sparse_accuracy])
    model.train_on_batch(np.ones((2, 3, 3), 'float32'), np.zeros((2, 3), 'int32'))
    assert [message for message in warned if 'could not transform' in message] == []
