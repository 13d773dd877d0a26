"""The CRF's forward-backward pass as one kernel (crf_lr/speed/kernels/crf_forward_backward.cc): its
outputs equal crf_lr.model.crf's TensorFlow ops output by output, a loss through it equals
brute-force enumeration with its gradients, and training steps use it where evaluation, XLA, saving
and a switched-off block do not."""
import numpy as np
import pytest

from crf_lr.model import crf as crf_module
from crf_lr.speed import fused_kernels
from crf_lr.compat import keras, tf
from crf_lr.model.crf import ConditionalRandomField, crf_log_likelihood
from crf_lr.decoding.viterbi import DISALLOWED_SCORE
from helpers.crf_oracles import brute_force, effective
from helpers.crf_oracles import random_case

OUTPUTS = ('objective', 'd_emissions', 'd_start', 'd_end', 'labels', 'alphas', 'following',
           'exp_trans')


def _inputs(batch, n, num_labels, seed, soft=False, lengths=None, aligned=True):
    """The forward-backward pass's six inputs: emissions with -inf, a score below the floor and
    huge finite ones; one-hot or soft labels; a mask of ``lengths`` (random, with 0 and 1)."""
    rng = np.random.default_rng(seed)
    emissions = rng.normal(size=(batch, n, num_labels)) * 3
    emissions.flat[[0, -1]] = -np.inf, 2 * DISALLOWED_SCORE
    if batch > 2 and n > 1:
        emissions[2, 1] = 1e30                                  # exact only relative to the peak
    if lengths is None:
        lengths = rng.integers(0, n + 1, batch)
        lengths[:2] = [0, 1][:batch]
    mask = np.arange(n)[None] < np.asarray(lengths)[:, None]
    if not aligned:
        mask = rng.random((batch, n)) < 0.6                       # the ops read it position-wise
    labels = (rng.random((batch, n, num_labels)) if soft
              else np.eye(num_labels)[rng.integers(0, num_labels, (batch, n))])
    parameters = [rng.normal(size=shape) for shape in ((num_labels, num_labels), (num_labels,),
                                                        (num_labels,))]
    return emissions, labels, mask, *parameters


CASES = [dict(batch=4, n=9, num_labels=5), dict(batch=6, n=17, num_labels=7, soft=True),
         dict(batch=3, n=1, num_labels=3), dict(batch=3, n=6, num_labels=1),
         dict(batch=5, n=8, num_labels=4, lengths=[0, 0, 8, 1, 3]),
         dict(batch=5, n=7, num_labels=3, aligned=False),
         dict(batch=64, n=40, num_labels=9)]                     # several threads' share


def _assert_the_same_outputs(fused_ops, args, **tolerance):
    """The kernel's eight outputs on ``args`` against crf_lr.model.crf's ops' (NaN where they are).
    """
    objective, gradients, factors = crf_module._COMPILED[False](*args)
    got = fused_ops.crf_lr_forward_backward(*args, floor=DISALLOWED_SCORE)
    for name, ours, theirs in zip(OUTPUTS, got, [objective, *gradients, *factors]):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, name
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), **tolerance, err_msg=name)


def _tensors(dtype, emissions, labels, mask, transitions, start, end):
    return ([tf.constant(x, dtype) for x in (emissions, labels)] + [tf.constant(mask)]
            + [tf.constant(x, dtype) for x in (transitions, start, end)])


@pytest.mark.kernel_values
@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('case', CASES, ids=lambda case: '-'.join(f'{k}{v}' for k, v in
                                                                  case.items()))
def test_the_kernel_equals_the_forward_backward_ops(fused_ops, case, dtype):
    args = _tensors(dtype, *_inputs(**case, seed=len(str(case))))
    _assert_the_same_outputs(fused_ops, args, **(dict(rtol=1e-12, atol=1e-12)
                                                 if dtype == 'float64' else
                                                 dict(rtol=1e-6, atol=1e-7)))


@pytest.mark.kernel_values
@pytest.mark.parametrize('where, value', [('emissions', np.nan), ('emissions', np.inf),
                                          ('transitions', np.nan), ('transitions', -np.inf),
                                          ('start', np.nan)])
def test_non_finite_scores_give_what_the_ops_give(fused_ops, where, value):
    """With the numerics checks off: NaN where the ops give NaN, the same values elsewhere."""
    inputs = dict(zip(('emissions', 'labels', 'mask', 'transitions', 'start', 'end'),
                      _inputs(4, 5, 3, seed=1, lengths=[5, 5, 3, 2])))
    inputs[where][(1, 2, 0)[:inputs[where].ndim]] = value
    _assert_the_same_outputs(fused_ops, _tensors('float64', **inputs), rtol=1e-12, atol=1e-12)
    objective = fused_ops.crf_lr_forward_backward(*_tensors('float64', **inputs),
                                                  floor=DISALLOWED_SCORE)[0].numpy()
    if where == 'emissions':
        assert np.isnan(objective[1]) and np.isfinite(objective[[0, 2, 3]]).all()
    else:
        assert np.isnan(objective[1:]).all()                # every row that reads the score


def test_inputs_of_wrong_shapes_are_refused_and_no_label_scores_zero(fused_ops):
    emissions, labels, mask, transitions, start, end = _inputs(2, 4, 3, seed=2)
    for bad, message in (((emissions, labels[:, :3], mask), 'labels'),
                         ((emissions, labels, mask[:, :3]), 'mask'),
                         ((emissions, labels, mask, transitions[:2]), 'transitions'),
                         ((emissions, labels, mask, transitions, start[:2]), 'start'),
                         ((emissions, labels, mask, transitions, start, end[:2]), 'end')):
        args = list(bad) + [transitions, start, end][len(bad) - 3:]
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
            fused_ops.crf_lr_forward_backward(*args, floor=DISALLOWED_SCORE)
    empty = np.zeros((2, 3, 0))
    objective = fused_ops.crf_lr_forward_backward(empty, empty, mask[:, :3], np.zeros((0, 0)),
                                                  np.zeros(0), np.zeros(0),
                                                  floor=DISALLOWED_SCORE)[0]
    np.testing.assert_array_equal(objective, [0.0, 0.0])


def _loss_step(tags, mask, weights):
    """A tf.function: the weighted log-likelihood and its gradients with respect to the
    emissions, transitions, start and end, recorded on a tape (a training step's loss)."""
    def step(emissions, transitions, start, end):
        with tf.GradientTape() as tape:
            tape.watch([emissions, transitions, start, end])
            ll = crf_log_likelihood(emissions, tags, mask, transitions, start, end)
            loss = tf.reduce_sum(weights * ll)
        return ll, tape.gradient(loss, [emissions, transitions, start, end])
    return tf.function(step)


@pytest.mark.kernel_values
@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_a_loss_through_the_kernel_equals_brute_force(fused_ops, dtype):
    rng = np.random.default_rng(7)
    case = random_case(rng, 6, 5, 3, boundary=True, constrained=True)
    tags = rng.integers(0, 3, size=(6, 5))
    mask = np.arange(5) < case['lengths'][:, None]
    score, log_z = brute_force(case, tags)
    weights = tf.constant(rng.normal(size=6), dtype)
    parameters = [tf.constant(x, dtype) for x in (case['emissions'], *effective(case))]
    step = _loss_step(tags, mask, weights)               # use_xla(True), the default
    traced = step.get_concrete_function(*parameters)
    types = {op.type for op in traced.graph.get_operations()}
    assert 'CrfLrForwardBackward' in types and 'While' not in types
    ll, gradients = step(*parameters)
    tolerance = 1e-10 if dtype == 'float64' else 1e-4
    np.testing.assert_allclose(ll, np.minimum(score - log_z, 0), rtol=tolerance, atol=tolerance)

    def weighted(emissions, transitions, start, end):               # no tape: TensorFlow's ops
        ll = crf_log_likelihood(emissions, tags, mask, transitions, start, end)
        return tf.reduce_sum(tf.cast(weights, tf.float64) * ll)
    parameters64 = [tf.cast(x, tf.float64) for x in parameters]
    numerical = tf.test.compute_gradient(weighted, parameters64)[1]
    for got, expected in zip(gradients, numerical):
        np.testing.assert_allclose(tf.reshape(got, [-1]), np.sum(expected, axis=0),
                                   atol=1e-6 if dtype == 'float64' else 1e-4)


@pytest.fixture(scope='module')
def crf_model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None,), dtype='int32')
    hidden = keras.layers.Embedding(20, 8, mask_zero=True)(inputs)
    crf = ConditionalRandomField(lr_multiplier=100)
    model = keras.Model(inputs, crf(keras.layers.Dense(5)(hidden)))
    model.compile(keras.optimizers.Adam(1e-2), loss=crf.sparse_loss)
    return model


def _loss_and_gradients(model, x, y):
    """``model``'s loss and gradients, as Keras's train step computes them."""
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x, y, model(x, training=True))
    return loss, tape.gradient(loss, model.trainable_weights)


def _train_types(model, x, y, jit_compile=False):
    """(op types of :func:`_loss_and_gradients` traced, its values)."""
    traced = tf.function(_loss_and_gradients, jit_compile=jit_compile).get_concrete_function(
        model, x, y)
    return {op.type for op in traced.graph.get_operations()}, traced(x, y)


def test_training_steps_use_the_kernel_and_evaluation_xla_saving_and_switching_off_do_not(
        fused_ops, crf_model, monkeypatch):
    x = tf.constant([[3, 4, 5, 0], [6, 7, 8, 9]])
    y = tf.constant([[1, 2, 0, 0], [4, 3, 2, 1]])
    kernel_types, (kernel_loss, kernel_gradients) = _train_types(crf_model, x, y)
    assert 'CrfLrForwardBackward' in kernel_types and 'XlaLaunch' not in kernel_types
    for use_xla in (True, False):                         # XLA's program and TensorFlow's ops
        monkeypatch.setattr(crf_module, 'USE_XLA', use_xla)
        with fused_kernels.fused_kernels(False):
            plain_types, (plain_loss, plain_gradients) = _train_types(crf_model, x, y)
        assert 'CrfLrForwardBackward' not in plain_types
        np.testing.assert_allclose(kernel_loss, plain_loss, rtol=1e-6)
        for ours, theirs in zip(kernel_gradients, plain_gradients):
            np.testing.assert_allclose(tf.convert_to_tensor(ours), tf.convert_to_tensor(theirs),
                                       rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(crf_module, 'USE_XLA', True)
    evaluation = tf.function(lambda x, y: crf_model.compute_loss(x, y, crf_model(x)))
    assert 'CrfLrForwardBackward' not in {
        op.type for op in evaluation.get_concrete_function(x, y).graph.get_operations()}
    assert 'CrfLrForwardBackward' not in _train_types(crf_model, x, y, jit_compile=True)[0]
    from tensorflow.python.saved_model.save_context import save_context
    from tensorflow.python.saved_model.save_options import SaveOptions
    with save_context(SaveOptions()):
        assert 'CrfLrForwardBackward' not in _train_types(crf_model, x, y)[0]


def test_the_scripts_train_step_holds_the_kernel_and_no_loop(fused_ops, crf_model):
    from crf_lr.training.loop import trace_once
    x, y = np.array([[3, 4, 5, 0], [6, 7, 8, 9]]), np.array([[1, 2, 0, 0], [4, 3, 2, 1]])
    traced = trace_once(crf_model, (x, y))                      # the CRF without XLA
    graph, = [f.graph for f in traced._list_all_concrete_functions_for_serialization()]
    types = {op.type for op in graph.get_operations()}
    assert 'CrfLrForwardBackward' in types and 'While' not in types
    losses = [crf_model.train_on_batch(x, y) for _ in range(20)]
    assert np.isfinite(losses).all() and losses[-1] < 0.5 * losses[0]
