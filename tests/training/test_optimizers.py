"""LayerwiseAdam against a closed-form NumPy Adam written here from the published update rule
(Kingma & Ba, Algorithm 1; BERT's AdamWeightDecayOptimizer without bias correction), against
bert4keras's Adam, through save/reload in three formats and under MirroredStrategy."""
import contextlib
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from crf_lr.compat import tf, keras
from crf_lr.model.serialization import OptimizerStateWarning
from crf_lr.training.optimizers import (Adam, LayerwiseAdam, WarmupLinearDecay,
                                        extend_with_layerwise_lr, extend_with_weight_decay,
                                        fused_adam, layerwise_decay_multipliers, match_multiplier,
                                        restore_optimizer_state)


def f32(x):
    return float(np.float32(x))


def reference_schedule(k, warmup_steps=0, total_steps=None, min_lr_ratio=0.0):
    """Schedule factor after k completed updates: linear warmup from 0, then linear decay."""
    if k < warmup_steps:
        return k / warmup_steps
    if total_steps is None:
        return 1.0
    if k >= total_steps:
        return min_lr_ratio
    return min_lr_ratio + (1 - min_lr_ratio) * (total_steps - k) / (total_steps - warmup_steps)


def reference_adam(weights, gradient, steps, lr, multipliers, decayed, beta_1=0.9, beta_2=0.999,
                   epsilon=1e-6, bias_correction=True, weight_decay_rate=0.0, **schedule):
    """Closed-form Adam in float64. weights: dict name -> array; gradient(name, w) -> array;
    multipliers: name -> float; decayed: name -> bool. Returns the weights after ``steps``."""
    w = {name: np.asarray(value, np.float64).copy() for name, value in weights.items()}
    m = {name: np.zeros_like(value) for name, value in w.items()}
    v = {name: np.zeros_like(value) for name, value in w.items()}
    for k in range(steps):
        t = k + 1
        rate = lr * reference_schedule(k, **schedule)
        for name in w:
            g = gradient(name, w[name])
            m[name] = beta_1 * m[name] + (1 - beta_1) * g
            v[name] = beta_2 * v[name] + (1 - beta_2) * g ** 2
            m_hat, v_hat = m[name], v[name]
            if bias_correction:
                m_hat, v_hat = m_hat / (1 - beta_1 ** t), v_hat / (1 - beta_2 ** t)
            update = m_hat / (np.sqrt(v_hat) + epsilon)
            if decayed[name]:
                update = update + weight_decay_rate * w[name]
            w[name] = w[name] - rate * multipliers[name] * update
    return w


def run_steps(step, steps, fused):
    """Call the ``tf.function`` ``step`` ``steps`` times, traced under ``fused_adam(fused)``;
    check that its graph holds the one-kernel update exactly when ``fused``."""
    with fused_adam(fused):                          # read when step() is traced
        for _ in range(steps):
            step()
    kernels = {op.type for op in step.get_concrete_function().graph.get_operations()}
    assert ('ResourceApplyAdam' in kernels) == fused


# Variables named as bert4keras names them, the gradient of sum(C*w) + sum(D*w**2)/2 on each.
SHAPES = {'Transformer-0-FeedForward/dense/kernel': (3, 2),
          'Transformer-0-FeedForward-Norm/gamma': (2,),
          'CRF/trans': (3, 3), 'Head/bias': (3,), 'Transformer-10-FeedForward/dense/kernel': (2, 2)}
PATTERNS = {'Transformer-0-': 0.5, 'FeedForward': 3.0, 'CRF': 20.0}
# By hand: the longest match wins ('Transformer-0-' is 14 characters, 'FeedForward' 11);
# 'Transformer-0-' does not occur in 'Transformer-10-'; 'Head/bias' matches nothing.
EXPECTED_MULTIPLIERS = {'Transformer-0-FeedForward/dense/kernel': 0.5,
                        'Transformer-0-FeedForward-Norm/gamma': 0.5, 'CRF/trans': 20.0,
                        'Head/bias': 1.0, 'Transformer-10-FeedForward/dense/kernel': 3.0}
EXPECTED_DECAYED = {'Transformer-0-FeedForward/dense/kernel': True,
                    'Transformer-0-FeedForward-Norm/gamma': False, 'CRF/trans': True,
                    'Head/bias': False, 'Transformer-10-FeedForward/dense/kernel': True}

CASES = {
    'plain': dict(),
    'multipliers+decay': dict(lr_multipliers=PATTERNS, weight_decay_rate=0.05),
    'schedule': dict(lr_multipliers=PATTERNS, weight_decay_rate=0.05, warmup_steps=2,
                     total_steps=5, min_lr_ratio=0.1),
}


@pytest.mark.parametrize('fused', [True, False], ids=['one kernel', 'separate ops'])
@pytest.mark.parametrize('bias_correction', [True, False])
@pytest.mark.parametrize('case', sorted(CASES))
def test_steps_equal_closed_form(case, bias_correction, fused):
    options = CASES[case]
    rng = np.random.default_rng(0)
    initial = {name: rng.normal(size=shape) for name, shape in SHAPES.items()}
    linear = {name: rng.normal(size=shape) for name, shape in SHAPES.items()}
    quadratic = {name: rng.uniform(0.5, 2.0, size=shape) for name, shape in SHAPES.items()}
    # float64 so that the comparison can be tight; the optimizer keeps its hyperparameters and
    # schedule factor in float32, so the reference uses the float32-rounded constants
    variables = [tf.Variable(value, name=name) for name, value in initial.items()]
    opt = LayerwiseAdam(1e-2, bias_correction=bias_correction, **options)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = sum(tf.reduce_sum(linear[name] * var + quadratic[name] * var ** 2 / 2)
                       for name, var in zip(SHAPES, variables))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

    steps = 7
    run_steps(step, steps, fused)
    if 'lr_multipliers' in options:
        multipliers, decayed = EXPECTED_MULTIPLIERS, EXPECTED_DECAYED
    else:
        multipliers, decayed = dict.fromkeys(SHAPES, 1.0), dict.fromkeys(SHAPES, False)
    schedule = {key: options[key] for key in ('warmup_steps', 'total_steps', 'min_lr_ratio')
                if key in options}
    expected = reference_adam(initial, lambda name, w: linear[name] + quadratic[name] * w, steps,
                              f32(1e-2), multipliers, decayed, beta_1=f32(0.9), beta_2=f32(0.999),
                              bias_correction=bias_correction,
                              weight_decay_rate=options.get('weight_decay_rate', 0.0), **schedule)
    assert int(opt.iterations.numpy()) == steps
    for name, var in zip(SHAPES, variables):
        moved = np.abs(expected[name] - initial[name]).max()
        assert moved > 1e-3, name  # every variable really moves
        np.testing.assert_allclose(var.numpy(), expected[name], rtol=1e-7, atol=1e-7 * moved,
                                   err_msg=f'{case}, bias_correction={bias_correction}: {name}')


@pytest.mark.parametrize('bias_correction', [True, False])
def test_plain_case_equals_bert4keras_adam(bias_correction):
    from bert4keras.optimizers import Adam as Bert4kerasAdam
    rng = np.random.default_rng(1)
    initial, target = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    ours, theirs = (tf.Variable(initial.astype(np.float32), name='w') for _ in range(2))
    for var, opt in ((ours, LayerwiseAdam(1e-2, bias_correction=bias_correction)),
                     (theirs, Bert4kerasAdam(1e-2, bias_correction=bias_correction))):
        for _ in range(5):
            opt.minimize(lambda: tf.reduce_sum((var - target) ** 4), [var])
    assert np.abs(ours.numpy() - initial).max() > 1e-2
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('fused', [True, False], ids=['one kernel', 'separate ops'])
@pytest.mark.parametrize('bias_correction', [True, False])
def test_sparse_gradient_equals_closed_form(bias_correction, fused):
    rng = np.random.default_rng(2)
    initial, linear = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    table = tf.Variable(initial, name='Embedding-Token/embeddings')
    ids = np.array([1, 3, 3, 5])  # a repeated id, and rows 0, 2, 4 never looked up
    opt = LayerwiseAdam(1e-2, lr_multipliers={'Embedding-': 2.0}, weight_decay_rate=0.1,
                        bias_correction=bias_correction)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            rows = tf.gather(table, ids)
            loss = tf.reduce_sum(tf.gather(linear, ids) * rows + rows ** 2)
        grad = tape.gradient(loss, table)
        assert isinstance(grad, tf.IndexedSlices)
        opt.apply_gradients([(grad, table)])

    steps = 4
    run_steps(step, steps, fused)

    def dense_gradient(name, w):
        g = np.zeros_like(w)
        np.add.at(g, ids, linear[ids] + 2 * w[ids])
        return g

    expected = reference_adam({'t': initial}, dense_gradient, steps, f32(1e-2), {'t': 2.0},
                              {'t': True}, beta_1=f32(0.9), beta_2=f32(0.999),
                              bias_correction=bias_correction, weight_decay_rate=0.1)['t']
    np.testing.assert_allclose(table.numpy(), expected, rtol=1e-7, atol=1e-9)


def test_pattern_rules():
    patterns = {'Transformer-1-': 0.5, 'Transformer-': 0.8, '': 2.0, 'kernel$': 3.0}
    assert match_multiplier('Transformer-1-FeedForward/dense/bias:0', patterns) == 0.5
    assert match_multiplier('Transformer-10-FeedForward/dense/bias:0', patterns) == 0.8
    assert match_multiplier('Head/bias:0', patterns) == 2.0  # only '' matches
    assert match_multiplier('Head/kernel/replica_1:0', patterns) == 3.0  # suffixes stripped
    assert match_multiplier('Head/bias', {'CRF': 100}) == 1.0
    assert match_multiplier('CRF/trans', {'CRF': 100, 'trans': 100}) == 100.0  # same value: fine
    with pytest.raises(ValueError, match='ambiguous'):
        match_multiplier('CRF/trans', {'CRF': 100, 'ran': 2})


@pytest.mark.parametrize('kwargs, message', [
    (dict(lr_multipliers={'(': 2}), 'not a valid regular expression'),
    (dict(lr_multipliers={'CRF': -1}), 'finite number >= 0'),
    (dict(exclude_from_weight_decay=['[']), 'not a valid regular expression'),
    (dict(warmup_steps=5, total_steps=5), 'total_steps must be'),
    (dict(beta_1=1.0), 'beta_1 must be in'),
    (dict(min_lr_ratio=2), 'min_lr_ratio'),
    (dict(epsilon=0), 'epsilon'),
])
def test_invalid_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LayerwiseAdam(**kwargs)


def test_config_round_trip_keeps_class():
    opt = LayerwiseAdam(3e-4, beta_2=0.98, bias_correction=False, lr_multipliers={'CRF': 100.0},
                        weight_decay_rate=0.01, warmup_steps=10, total_steps=100, min_lr_ratio=0.1,
                        clipnorm=1.0)
    config = opt.get_config()
    json.dumps(config)  # plain JSON types only
    assert LayerwiseAdam.from_config(config).get_config() == config
    restored = keras.optimizers.deserialize(json.loads(json.dumps(keras.optimizers.serialize(opt))))
    assert type(restored) is LayerwiseAdam and restored.get_config() == config


def _tiny_compiled_model():
    keras.utils.set_random_seed(0)
    inputs = keras.layers.Input((4,))
    hidden = keras.layers.Dense(3, name='Encoder')(inputs)
    outputs = keras.layers.Dense(2, name='Head')(hidden)
    model = keras.models.Model(inputs, outputs)
    optimizer = LayerwiseAdam(1e-2, lr_multipliers={'Head': 3.0}, weight_decay_rate=0.01,
                              warmup_steps=1, total_steps=10, bias_correction=False)
    model.compile(optimizer=optimizer, loss='mse')
    return model


def test_save_and_reload_compiled_model_then_continue_training(tmp_path):
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(8, 4)).astype(np.float32), rng.normal(size=(8, 2)).astype(np.float32)
    model = _tiny_compiled_model()
    for _ in range(3):
        model.train_on_batch(x, y)
    paths = {'h5': str(tmp_path / 'model.h5'), 'tf': str(tmp_path / 'savedmodel'),
             'keras': str(tmp_path / 'model.keras')}

    def stateless(save_format):
        """The .keras format of tf-keras keeps no OptimizerV2 state: saving and loading say so."""
        if save_format != 'keras':
            return contextlib.nullcontext()
        return pytest.warns(OptimizerStateWarning, match='keeps no state of a legacy')

    for save_format, path in paths.items():
        with stateless(save_format):
            model.save(path, save_format=None if save_format == 'keras' else save_format)
    saved_weights = model.get_weights()
    model.train_on_batch(x, y)
    for save_format, path in paths.items():
        with stateless(save_format):
            reloaded = keras.models.load_model(path, compile=True)
        assert type(reloaded.optimizer) is LayerwiseAdam, save_format
        assert reloaded.optimizer.get_config() == model.optimizer.get_config(), save_format
        for ours, theirs in zip(saved_weights, reloaded.get_weights()):
            np.testing.assert_array_equal(theirs, ours, err_msg=save_format)
        if save_format == 'tf':  # tf-keras's SavedModel loader restarts every OptimizerV2
            restore_optimizer_state(reloaded, path)
        loss = reloaded.train_on_batch(x, y)
        assert np.isfinite(loss), save_format
        if save_format == 'keras':  # the .keras format of tf-keras keeps no OptimizerV2 state
            assert int(reloaded.optimizer.iterations.numpy()) == 1
            continue
        # identical to the uninterrupted run only if m, v and the step count were restored
        assert int(reloaded.optimizer.iterations.numpy()) == 4, save_format
        for ours, theirs in zip(model.get_weights(), reloaded.get_weights()):
            np.testing.assert_allclose(theirs, ours, rtol=1e-6, atol=1e-7, err_msg=save_format)


@pytest.mark.parametrize('save_format', ['h5', 'tf'])
def test_a_rate_set_during_training_is_the_one_saved(tmp_path, save_format):
    """``K.set_value(optimizer.lr, ...)``, as LearningRateScheduler and ReduceLROnPlateau set it:
    the saved model resumes at that rate (the .h5 file held the constructor's)."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(loss='mse', optimizer=LayerwiseAdam(1e-2, lr_multipliers={'dense': 2.0}))
    model.train_on_batch(np.ones((1, 2)), np.ones((1, 1)))
    keras.backend.set_value(model.optimizer.lr, 1e-5)
    assert model.optimizer.get_config()['learning_rate'] == pytest.approx(1e-5)
    path = str(tmp_path / ('model.h5' if save_format == 'h5' else 'savedmodel'))
    model.save(path, save_format=save_format)
    reloaded = keras.models.load_model(path).optimizer
    assert keras.backend.get_value(reloaded.lr) == pytest.approx(1e-5)
    assert reloaded.get_config() == model.optimizer.get_config()


def test_a_pattern_that_matches_no_trained_variable_is_warned_once():
    """A misspelt or renamed layer in lr_multipliers trained at 1x without a word."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, name='Head')])
    model.compile(loss='mse', optimizer=LayerwiseAdam(1e-2, lr_multipliers={'Head': 2.0,
                                                                            'CFR': 100.0}))
    with pytest.warns(UserWarning) as caught:
        model.train_on_batch(np.ones((1, 2)), np.ones((1, 1)))
    messages = [str(w.message) for w in caught if 'lr_multipliers' in str(w.message)]
    assert messages == ["lr_multipliers pattern 'CFR' (100x) matches none of the 2 trained "
                        "variables (names such as 'Head/kernel', 'Head/bias'): it changes nothing"]
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        model.train_on_batch(np.ones((1, 2)), np.ones((1, 1)))          # warned once


def test_bias_correction_takes_a_bool_only():
    """'no' was taken for True."""
    with pytest.raises(TypeError, match="bias_correction must be True or False, got 'no'"):
        LayerwiseAdam(bias_correction='no')


MIRRORED_SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    import crf_lr
    from crf_lr.compat import tf, keras
    from crf_lr.training.optimizers import LayerwiseAdam
    cpu = tf.config.list_physical_devices('CPU')[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1'])
    keras.backend.set_floatx('float64')  # a tight comparison with the closed form
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(8, 3)), rng.normal(size=(8, 1))
    w0 = rng.normal(size=(3, 1))
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(1, use_bias=False, name='Head',
                                                     input_shape=(3,))])
        model.set_weights([w0])
        model.compile(optimizer=LayerwiseAdam(0.05, lr_multipliers={'Head': 2.0},
                                              weight_decay_rate=0.1, warmup_steps=2,
                                              total_steps=6, bias_correction=False), loss='mse')
    model.fit(x, y, batch_size=8, epochs=5,
              shuffle=False, verbose=0)
    json.dump(dict(replicas=strategy.num_replicas_in_sync, x=x.tolist(), y=y.tolist(),
                   w0=w0.tolist(), w=model.get_weights()[0].tolist(),
                   iterations=int(model.optimizer.iterations.numpy())), sys.stdout)
''')


def test_mirrored_strategy_on_two_logical_cpus_equals_closed_form():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
    run = subprocess.run([sys.executable, '-c', MIRRORED_SCRIPT], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out['replicas'] == 2 and out['iterations'] == 5
    x, y, w0 = (np.array(out[key]) for key in ('x', 'y', 'w0'))
    # mse over the global batch of 8 (4 examples per replica, gradients summed across replicas)
    expected = reference_adam({'w': w0}, lambda name, w: 2 * x.T @ (x @ w - y) / len(x), 5,
                              f32(0.05), {'w': 2.0}, {'w': True}, beta_1=f32(0.9),
                              beta_2=f32(0.999), bias_correction=False, weight_decay_rate=0.1,
                              warmup_steps=2, total_steps=6)['w']
    assert np.abs(expected - w0).max() > 1e-2
    np.testing.assert_allclose(np.array(out['w']), expected, rtol=1e-7, atol=1e-9)


def test_layerwise_decay_multipliers_map_to_bert_variables(tiny_bert_config_path):
    from bert4keras.models import build_transformer_model
    bert = build_transformer_model(tiny_bert_config_path, model='bert')
    tagger = keras.layers.Dense(5, name='Tagger')
    model = keras.models.Model(bert.inputs, tagger(bert.output))
    decay, layers = 0.8, 2
    patterns = {**layerwise_decay_multipliers(layers, decay, head_multiplier=1.5), 'Tagger': 100}
    assert patterns[''] == 1.5 and patterns['Transformer-1-'] == 1.0
    opt = LayerwiseAdam(lr_multipliers=patterns)
    seen = set()
    for layer in model.layers:  # the expected depth read from the layer objects, not the names
        if layer is tagger:
            expected = 100
        elif layer.name.startswith('Embedding-'):
            expected = decay ** layers
        elif layer in (bert.get_layer(f'Transformer-{i}-{part}') for i in range(layers)
                       for part in ('MultiHeadSelfAttention', 'MultiHeadSelfAttention-Norm',
                                    'FeedForward', 'FeedForward-Norm')):
            expected = decay ** (layers - 1 - int(layer.name.split('-')[1]))
        else:
            expected = 1.5
        for weight in layer.trainable_weights:
            assert opt.multiplier(weight) == pytest.approx(expected), weight.name
            seen.add(weight.name)
    assert len(seen) == len(model.trainable_weights) > 20
    with pytest.raises(ValueError, match='decay'):
        layerwise_decay_multipliers(2, 1.5)


def _crf_transitions_after_training(lr_multiplier, optimizer, initial, steps):
    """Train a lone CRF (emissions are the input); the effective matrix after each step."""
    from crf_lr.model.crf import ConditionalRandomField
    rng = np.random.default_rng(5)
    emissions = rng.normal(size=(4, 6, 3)).astype(np.float32)
    labels = rng.integers(0, 3, size=(4, 6))
    inputs = keras.layers.Input((None, 3))
    crf = ConditionalRandomField(lr_multiplier=lr_multiplier, name='crf')
    model = keras.models.Model(inputs, crf(inputs))
    model.compile(optimizer=optimizer, loss=crf.sparse_loss)
    model.set_weights([initial / lr_multiplier])
    history = []
    for _ in range(steps):
        model.train_on_batch(emissions, labels)
        history.append(crf.trans.numpy())
    return np.array(history)


def test_crf_lr_multiplier_equals_optimizer_multiplier_under_adam():
    """Stored weight s = T / m gets the gradient m * dL/dT; Adam divides m out of
    m_hat / sqrt(v_hat) except in epsilon, so CRF(lr_multiplier=m) under Adam(eps) is exactly
    Adam(eps / m) with {'crf': m} on an unscaled CRF. With the same eps they differ by
    O(eps / sqrt(v_hat))."""
    m, lr, eps, steps = 100.0, 1e-3, 1e-6, 4
    initial = np.random.default_rng(6).normal(size=(3, 3)).astype(np.float32)
    scaled = _crf_transitions_after_training(m, LayerwiseAdam(lr, epsilon=eps), initial, steps)
    by_optimizer = _crf_transitions_after_training(
        1, LayerwiseAdam(lr, epsilon=eps / m, lr_multipliers={'crf': m}), initial, steps)
    same_eps = _crf_transitions_after_training(
        1, LayerwiseAdam(lr, epsilon=eps, lr_multipliers={'crf': m}), initial, steps)
    change = scaled - initial
    # the first bias-corrected Adam step moves every entry by lr * m (|gradient| >> eps)
    np.testing.assert_allclose(np.abs(change[0]), lr * m, rtol=1e-3)
    atol = 1e-5 * np.abs(change).max()  # float32 rounding of the scaled parameterisation
    np.testing.assert_allclose(by_optimizer - initial, change, rtol=0, atol=atol)
    # measured: 6e-7 and 3e-5 of the largest change
    np.testing.assert_allclose(same_eps - initial, change, rtol=0, atol=1e-4 * np.abs(change).max())


def reference_sgd(weights, gradient, steps, lr, multipliers, decayed, momentum=0.0,
                  weight_decay_rate=0.0, **schedule):
    """Closed-form SGD with momentum (Keras's: ``a = momentum * a - rate * g; w += a``), the rate
    scaled per variable, then decoupled decay ``w -= rate * wd * w_before``; float64."""
    w = {name: np.asarray(value, np.float64).copy() for name, value in weights.items()}
    accumulator = {name: np.zeros_like(value) for name, value in w.items()}
    for k in range(steps):
        for name in w:
            rate = lr * reference_schedule(k, **schedule) * multipliers[name]
            before = w[name].copy()
            accumulator[name] = momentum * accumulator[name] - rate * gradient(name, before)
            w[name] = w[name] + accumulator[name]
            if decayed[name]:
                w[name] = w[name] - rate * weight_decay_rate * before
    return w


@pytest.mark.parametrize('with_decay', [False, True])
def test_extensions_wrap_keras_sgd_as_its_closed_form(with_decay):
    """The wrappers compose on another base: SGD with momentum, per-variable multipliers, the
    schedule as its learning rate and (outermost extension inside) decoupled weight decay."""
    base = keras.optimizers.legacy.SGD
    cls = extend_with_layerwise_lr(extend_with_weight_decay(base) if with_decay else base)
    assert cls is extend_with_layerwise_lr(extend_with_weight_decay(base) if with_decay else base)
    rng = np.random.default_rng(7)
    initial = {name: rng.normal(size=shape) for name, shape in SHAPES.items()}
    linear = {name: rng.normal(size=shape) for name, shape in SHAPES.items()}
    variables = [tf.Variable(value, name=name) for name, value in initial.items()]
    decay = dict(weight_decay_rate=0.05) if with_decay else {}
    opt = cls(WarmupLinearDecay(0.1, warmup_steps=2, total_steps=5, min_lr_ratio=0.1),
              momentum=0.9, lr_multipliers=PATTERNS, **decay)
    steps = 7
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = sum(tf.reduce_sum(linear[name] * var + var ** 2)
                       for name, var in zip(SHAPES, variables))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
    decayed = EXPECTED_DECAYED if with_decay else dict.fromkeys(SHAPES, False)
    expected = reference_sgd(initial, lambda name, w: linear[name] + 2 * w, steps, f32(0.1),
                             EXPECTED_MULTIPLIERS, decayed, momentum=f32(0.9),
                             warmup_steps=2, total_steps=5, min_lr_ratio=0.1, **decay)
    for name, var in zip(SHAPES, variables):
        moved = np.abs(expected[name] - initial[name]).max()
        assert moved > 1e-2, name
        np.testing.assert_allclose(var.numpy(), expected[name], rtol=1e-6, atol=1e-6 * moved,
                                   err_msg=name)


def test_schedule_equals_closed_form_and_round_trips():
    schedule = WarmupLinearDecay(1e-3, warmup_steps=10, total_steps=20, min_lr_ratio=0.1)
    for k in range(0, 31):
        for dtype in (tf.int64, tf.float32, tf.float64):
            rate = schedule(tf.constant(k, dtype))
            assert rate.dtype == (tf.float64 if dtype == tf.float64 else tf.float32)
            assert float(rate) == pytest.approx(1e-3 * reference_schedule(k, 10, 20, 0.1),
                                                rel=1e-6, abs=1e-12), k
    assert float(WarmupLinearDecay(0.5, warmup_steps=4)(100)) == 0.5    # no total: constant
    nested = WarmupLinearDecay(keras.optimizers.schedules.ExponentialDecay(1.0, 1, 0.5),
                               warmup_steps=2)
    assert float(nested(3)) == pytest.approx(0.5 ** 3)                   # the two multiply
    for original in (schedule, nested):
        serialized = json.loads(json.dumps(keras.optimizers.schedules.serialize(original)))
        restored = keras.optimizers.schedules.deserialize(serialized)
        assert type(restored) is WarmupLinearDecay
        assert float(restored(13)) == float(original(13))
    with pytest.raises(ValueError, match='warmup_steps'):
        WarmupLinearDecay(1e-3, warmup_steps=-1)


def test_layerwise_adam_is_the_composition_and_every_class_round_trips():
    composed = extend_with_layerwise_lr(extend_with_weight_decay(Adam))
    assert issubclass(LayerwiseAdam, composed)
    options = dict(lr_multipliers=PATTERNS, weight_decay_rate=0.05, bias_correction=False)
    ready = LayerwiseAdam(1e-2, warmup_steps=2, total_steps=5, **options)
    by_hand = composed(WarmupLinearDecay(1e-2, warmup_steps=2, total_steps=5), **options)
    results = []
    for opt in (ready, by_hand):
        var = tf.Variable(np.linspace(-1, 1, 6).reshape(2, 3), name='CRF/trans')
        with pytest.warns(UserWarning, match='matches none of the 1 trained variables'):
            for _ in range(4):                     # PATTERNS' encoder patterns: no such variable
                opt.minimize(lambda: tf.reduce_sum((var - 0.3) ** 4), [var])
        results.append(var.numpy())
    assert np.abs(results[0] - np.linspace(-1, 1, 6).reshape(2, 3)).max() > 1e-2
    np.testing.assert_array_equal(results[0], results[1])
    sgd = extend_with_layerwise_lr(keras.optimizers.legacy.SGD)(0.1, momentum=0.5,
                                                               lr_multipliers={'CRF': 3.0})
    for opt in (Adam(1e-3, bias_correction=False), by_hand, sgd):   # not Keras's Adam or SGD
        for legacy in (False, True):        # the .keras / SavedModel and the .h5 formats
            serialized = keras.optimizers.serialize(opt, use_legacy_format=legacy)
            restored = keras.optimizers.deserialize(json.loads(json.dumps(serialized)),
                                                    use_legacy_format=legacy)
            assert type(restored) is type(opt) and restored.get_config() == opt.get_config()


def test_extensions_refuse_bases_that_cannot_take_a_rate():
    from bert4keras.optimizers import Adam as Bert4kerasAdam
    with pytest.raises(TypeError, match='takes no apply_state'):
        extend_with_layerwise_lr(Bert4kerasAdam)
    with pytest.raises(TypeError, match='BaseOptimizer must be a legacy'):
        extend_with_weight_decay(keras.optimizers.Adam)


def test_a_model_compiled_with_an_extension_class_loads_in_a_process_that_never_made_it(
        tmp_path):
    """``extend_with_layerwise_lr(SGD)`` makes its class when called: a fresh process loading
    the model failed with Keras's ``Unknown optimizer: 'crf_lr>LayerwiseLR(SGD)'``. The loader
    now makes the class from its name, in every format."""
    made = extend_with_layerwise_lr(extend_with_weight_decay(keras.optimizers.legacy.RMSprop))
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, name='Head')])
    model.compile(loss='mse', optimizer=made(0.1, lr_multipliers={'Head': 3.0},
                                             weight_decay_rate=0.01))
    model.train_on_batch(np.ones((1, 2)), np.ones((1, 1)))
    paths = [str(tmp_path / name) for name in ('model.h5', 'savedmodel', 'model.keras')]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')                  # .keras: the optimizer-state warning
        for path in paths:
            model.save(path)
    code = ('import sys, warnings; warnings.simplefilter("ignore"); import crf_lr\n'
            'from crf_lr.compat import keras\n'
            'for path in sys.argv[1:]:\n'
            '    optimizer = keras.models.load_model(path).optimizer\n'
            '    name = keras.utils.get_registered_name(type(optimizer))\n'
            '    print(name, optimizer.lr_multipliers)\n')
    done = subprocess.run([sys.executable, '-c', code, *paths], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "crf_lr>LayerwiseLR(crf_lr>WeightDecay(RMSprop)) {'Head': 3.0}"] * 3
