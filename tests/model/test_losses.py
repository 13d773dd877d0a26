"""MCCE (dense, sparse) and the GlobalPointer losses against the closed form in float64, against
bert4keras's own functions, against each other; -inf cells; gradients; F1 against span sets."""
import numpy as np
import pytest

from bert4keras import backend as b4k
from crf_lr.compat import tf
from crf_lr.model.losses import (global_pointer_crossentropy, global_pointer_f1,
                                 multilabel_categorical_crossentropy,
                                 sparse_global_pointer_crossentropy, sparse_global_pointer_f1,
                                 sparse_multilabel_categorical_crossentropy)
from crf_lr.decoding.spans import decode_spans, dense_targets, pad_sparse_targets, sparse_targets


def closed_form(labels, logits):
    """log(1 + sum_P exp(-s)) + log(1 + sum_N exp(s)) row by row in float64; -inf cells skipped."""
    labels, logits = np.asarray(labels, bool), np.asarray(logits, np.float64)
    out = np.empty(logits.shape[:-1])
    for index in np.ndindex(out.shape):
        s, y = logits[index], labels[index]
        real = np.isfinite(s)
        out[index] = (np.log1p(np.exp(-s[real & y]).sum())
                      + np.log1p(np.exp(s[real & ~y]).sum()))
    return out


def random_problem(seed, rows=(3, 4), classes=12, masked=0.25, positives=3, padded=True):
    """Logits with -inf cells, dense 0/1 labels on real cells, and the positives as indices
    padded with -1 (a random number per row up to ``positives``; exactly that many if not
    ``padded``)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=3, size=rows + (classes,)).astype('float32')
    logits[rng.random(logits.shape) < masked] = -np.inf
    indices = np.full(rows + (positives,), -1)
    labels = np.zeros(logits.shape, 'float32')
    for index in np.ndindex(rows):
        real = np.flatnonzero(np.isfinite(logits[index]))
        size = rng.integers(0, positives + 1) if padded else positives
        chosen = rng.choice(real, size=size, replace=False)
        indices[index][:len(chosen)] = chosen
        labels[index][chosen] = 1
    return logits, labels, indices


@pytest.mark.parametrize('seed', range(4))
def test_dense_and_sparse_equal_the_closed_form_and_each_other(seed):
    logits, labels, indices = random_problem(seed)
    expected = closed_form(labels, logits)
    dense = multilabel_categorical_crossentropy(labels, logits).numpy()
    sparse = sparse_multilabel_categorical_crossentropy(indices, logits).numpy()
    np.testing.assert_allclose(dense, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sparse, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('seed', range(3))
def test_equal_bert4keras_functions_including_minus_inf_cells(seed):
    logits, labels, _ = random_problem(seed)
    soft = labels * np.random.default_rng(seed).uniform(0.5, 1, labels.shape).astype('float32')
    np.testing.assert_allclose(
        multilabel_categorical_crossentropy(soft, logits),
        b4k.multilabel_categorical_crossentropy(tf.constant(soft), tf.constant(logits)),
        rtol=1e-6)
    # bert4keras's sparse version has no padding index unless mask_zero: full rows first
    logits, labels, indices = random_problem(seed, padded=False)
    np.testing.assert_allclose(
        sparse_multilabel_categorical_crossentropy(indices, logits),
        b4k.sparse_multilabel_categorical_crossentropy(tf.constant(indices), tf.constant(logits)),
        rtol=1e-4, atol=1e-4)
    # mask_zero: index 0 is padding and class 0 leaves the loss, as in bert4keras
    logits, labels, indices = random_problem(seed)
    logits[..., 0], labels[..., 0] = 1.0, 0
    shifted = np.where(indices > 0, indices, 0)
    got = sparse_multilabel_categorical_crossentropy(shifted, logits, mask_zero=True)
    np.testing.assert_allclose(got, b4k.sparse_multilabel_categorical_crossentropy(
        tf.constant(shifted), tf.constant(logits), mask_zero=True), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, closed_form(labels[..., 1:], logits[..., 1:]), rtol=1e-5)


def test_positives_on_minus_inf_cells_are_ignored_by_both():
    logits = np.array([[1.5, -np.inf, -0.5, 2.0]], 'float32')
    labels = np.array([[1, 1, 0, 0]], 'float32')
    expected = closed_form([[1, 0, 0, 0]], logits)
    np.testing.assert_allclose(multilabel_categorical_crossentropy(labels, logits), expected,
                               rtol=1e-6)
    np.testing.assert_allclose(sparse_multilabel_categorical_crossentropy([[1, 0]], logits),
                               expected, rtol=1e-6)


def gradient(loss, y_true, logits):
    logits = tf.Variable(logits)
    with tf.GradientTape() as tape:
        value = tf.reduce_sum(loss(y_true, logits))
    return value.numpy(), tape.gradient(value, logits).numpy()


def closed_form_gradient(labels, logits):
    """d/ds of the closed form: -e^{-s}/(1+sum_P e^{-s}) on P, e^{s}/(1+sum_N e^{s}) on N."""
    labels, s = np.asarray(labels, bool), np.asarray(logits, np.float64)
    real = np.isfinite(s)
    pos = np.where(real & labels, np.exp(-np.where(real, s, 0)), 0)
    neg = np.where(real & ~labels, np.exp(np.where(real, s, 0)), 0)
    return -pos / (1 + pos.sum(-1, keepdims=True)) + neg / (1 + neg.sum(-1, keepdims=True))


def test_gradients_are_finite_zero_on_minus_inf_cells_and_match_the_closed_form():
    logits, labels, indices = random_problem(7)
    logits[0, 0] = -np.inf                            # a row with every cell masked
    labels[0, 0], indices[0, 0] = 0, -1
    indices[0, 1] = -1                                # and one with no positive
    labels[0, 1] = 0
    expected = closed_form_gradient(labels, logits)
    for loss, y_true in ((multilabel_categorical_crossentropy, labels),
                         (sparse_multilabel_categorical_crossentropy, indices)):
        value, grad = gradient(loss, y_true, logits)
        assert np.isfinite(value) and np.isfinite(grad).all()
        assert (grad[np.isneginf(logits)] == 0).all()
        np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-5)


def test_sparse_is_exact_where_positives_dominate():
    """A trained model's regime: the positives carry almost all the mass. bert4keras's
    ``log(1 - exp(lse_P - lse_all))`` cancels there; the scatter-based negative term does not."""
    logits = np.array([[30., 28., -25., -np.inf], [4., 9., -3., 0.5], [12., 11., -9., -8.]],
                      'float32')
    indices = np.array([[0, 1], [0, 1], [0, 1]])
    labels = np.zeros(logits.shape, 'float32')
    labels[:, :2] = 1
    exact = closed_form(labels, logits)
    _, grad = gradient(sparse_multilabel_categorical_crossentropy, indices, logits)
    np.testing.assert_allclose(grad, closed_form_gradient(labels, logits), rtol=1e-5, atol=1e-9)
    got = sparse_multilabel_categorical_crossentropy(indices, logits).numpy()
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-7)   # float32 log(1 + x) floor
    peer = b4k.sparse_multilabel_categorical_crossentropy(tf.constant(indices),
                                                          tf.constant(logits)).numpy()
    assert np.abs(peer - exact).max() > 1.0    # bert4keras: 14.0 for 1.5e-11, and -0.16 < 0


def random_scores(seed, batch=3, heads=2, n=6):
    rng = np.random.default_rng(seed)
    scores = rng.normal(scale=2, size=(batch, heads, n, n)).astype('float32')
    lengths = rng.integers(2, n + 1, size=batch)
    real = np.arange(n)[None] < lengths[:, None]
    keep = real[:, None, :, None] & real[:, None, None, :] & np.triu(np.ones((n, n), bool))
    scores[~np.broadcast_to(keep, scores.shape)] = -np.inf
    spans = [sorted({(int(s), int(s + w), int(t)) for t, s, w in zip(
        rng.integers(0, heads, 4), rng.integers(0, length - 1, 4), rng.integers(1, 3, 4))
        if s + w <= length}) for length in lengths]
    return scores, spans


@pytest.mark.parametrize('seed', range(3))
def test_global_pointer_losses_dense_sparse_closed_form_and_bert4keras(seed):
    scores, spans = random_scores(seed)
    batch, heads, n, _ = scores.shape
    dense = np.stack([dense_targets(s, n, heads) for s in spans])
    sparse = pad_sparse_targets([sparse_targets(s, n, heads) for s in spans], max_entities=5)
    expected = closed_form(dense.reshape(batch, heads, -1), scores.reshape(batch, heads, -1))
    got_dense = global_pointer_crossentropy(dense, scores).numpy()
    got_sparse = sparse_global_pointer_crossentropy(sparse, scores).numpy()
    np.testing.assert_allclose(got_dense, expected.sum(1), rtol=1e-5)
    np.testing.assert_allclose(got_sparse, expected.sum(1), rtol=1e-4)
    # bert4keras's example loss: the mean over batch and heads of the same MCCE
    reference = b4k.multilabel_categorical_crossentropy(
        tf.constant(dense.reshape(batch * heads, -1)),
        tf.constant(scores.reshape(batch * heads, -1)))
    np.testing.assert_allclose(got_dense.sum() / (batch * heads), np.mean(reference), rtol=1e-5)
    _, grad_dense = gradient(global_pointer_crossentropy, dense, scores)
    _, grad_sparse = gradient(sparse_global_pointer_crossentropy, sparse, scores)
    assert np.isfinite(grad_dense).all() and (grad_dense[np.isneginf(scores)] == 0).all()
    np.testing.assert_allclose(grad_sparse, grad_dense, rtol=1e-4, atol=1e-6)


def test_float16_logits_are_scored_in_float32():
    scores, spans = random_scores(5)
    dense = np.stack([dense_targets(s, scores.shape[-1], 2) for s in spans])
    half = scores.astype('float16')
    got = global_pointer_crossentropy(dense, half)
    assert got.dtype == tf.float32
    np.testing.assert_allclose(got, global_pointer_crossentropy(dense, half.astype('float32')))


def test_sparse_targets_outside_the_sequence_are_an_error():
    scores, _ = random_scores(0)
    with pytest.raises(tf.errors.InvalidArgumentError, match='sequence length'):
        sparse_global_pointer_crossentropy(np.full((3, 2, 1, 2), 6), scores)
    with pytest.raises(ValueError, match='max_entities, 2'):
        sparse_global_pointer_crossentropy(np.zeros((3, 2, 1)), scores)


@pytest.mark.parametrize('seed', range(3))
def test_f1_equals_the_span_set_f1(seed):
    scores, spans = random_scores(seed)
    batch, heads, n, _ = scores.shape
    predicted = {(b,) + s for b, found in enumerate(decode_spans(scores)) for s in found}
    true = {(b,) + s for b, found in enumerate(spans) for s in found}
    expected = 2 * len(predicted & true) / (len(predicted) + len(true))
    dense = np.stack([dense_targets(s, n, heads) for s in spans])
    sparse = pad_sparse_targets([sparse_targets(s, n, heads) for s in spans])
    assert global_pointer_f1(dense, scores).numpy() == pytest.approx(expected)
    assert sparse_global_pointer_f1(sparse, scores).numpy() == pytest.approx(expected)
    empty = np.full_like(scores, -np.inf)
    assert global_pointer_f1(np.zeros_like(dense), empty).numpy() == 1.0
