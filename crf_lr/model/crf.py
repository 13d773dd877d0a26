"""Linear-chain conditional random field: the maths as TensorFlow functions, and the Keras layer.

A path ``y`` of a sequence of length ``l`` (its left-aligned mask has ``l`` ones) scores

    s(y) = start[y_0] + sum_{t<l} emissions[t, y_t]
           + sum_{1<=t<l} transitions[y_{t-1}, y_t] + end[y_{l-1}]

and ``log p(y) = s(y) - log Z`` with ``log Z = logsumexp`` of ``s`` over all ``L**l`` paths.
An empty sequence (``l = 0``) has ``s = log Z = 0``, hence log-likelihood 0 and no gradient.

``log Z`` and its gradients (the label marginals) come from one forward-backward pass in exponent
space, rescaled at every step, in float64 (scores may differ by ~700 nats before anything
underflows), compiled with XLA (``use_xla``) and exposed as a custom-gradient op
(``_forward_backward``). A training step's loss on a CPU (a gradient being recorded, outside an
XLA-compiled step) runs the same pass as one kernel instead
(``crf_lr.speed.fused_kernels.crf_forward_backward``, where it can be built; the same outputs to
float64 rounding); ``use_xla(False)`` gives TensorFlow's ops elsewhere. As the kernel or XLA's
program the loop over positions runs as one piece of compiled code, where bert4keras's and TF
Addons' CRFs dispatch a few small ops at every position (their speed against this one, and this
one's against a softmax cross-entropy: docs/performance.md, "The CRF loss alone, against
peers"). A parallel scan (tree of batched L x L products) and chunked GEMMs were slower here:
they do L times more work, and tiny batched matmuls are slow on CPU, while XLA makes one step of
the plain loop cost microseconds.

Masks must be left-aligned (``mask[b] = [1] * l + [0] * (n - l)``); the functions check this and
raise ``InvalidArgumentError`` otherwise. Disallowed transitions / starts / ends score
``DISALLOWED_SCORE`` (-1e4): finite, so no loss or gradient is ever inf or NaN (a gold path
that breaks a constraint costs about 1e4 per violation), and negligible next to any allowed path.

Emissions of any finite size (up to float32's 3.4e38) give the exact loss; ``-inf`` rules a label
out. NaN or ``+inf`` scores make the loss NaN, and raise ``InvalidArgumentError`` naming the
function or layer and the argument once ``crf_lr.set_check_numerics(True)`` is on; ``decode``
always refuses them (``ValueError``).

    >>> ll = crf_log_likelihood(emissions, tags, mask, transitions)   # (batch,)
    >>> crf = ConditionalRandomField(lr_multiplier=100); loss = crf.sparse_loss
"""
import contextlib

import numpy as np

from crf_lr.model.checks import check_num_labels, constrained, crf_config, set_crf_arguments
from crf_lr.compat import keras, tf
from crf_lr.model.numerics import guard_finite, require_finite
from crf_lr.model.serialization import LayerMethodOwner, layer_method, register
from crf_lr.decoding.viterbi import DISALLOWED_SCORE, decode_layer_output, viterbi_decode_tf

_TINY = 1e-300    # floor of float64 sums before log: log(_TINY) ~ -690, never -inf


def _compute_dtype(emissions):
    """float64 for float64 inputs (gradient checks), float32 for everything else (incl. float16)."""
    return tf.float64 if emissions.dtype == tf.float64 else tf.float32


def _validated(emissions, mask, transitions, start, end, owner):
    """Cast inputs to the compute dtype; check their shapes and that the mask is left-aligned, and
    under ``crf_lr.set_check_numerics`` that no score is NaN or inf (``-inf`` emissions allowed).
    ``owner``: the public function named in errors."""
    emissions = tf.convert_to_tensor(emissions)
    if emissions.shape.rank != 3:
        raise ValueError(f'emissions must have shape (batch, n, num_labels), got {emissions.shape}')
    dtype = _compute_dtype(emissions)
    emissions = guard_finite(tf.cast(emissions, dtype), owner, 'emissions', minus_inf_allowed=True)
    num_labels = emissions.shape[-1]
    transitions = guard_finite(tf.cast(tf.convert_to_tensor(transitions), dtype), owner,
                               'transitions')
    if transitions.shape.rank != 2 or not transitions.shape.is_compatible_with(
            [num_labels, num_labels]):
        raise ValueError(f'transitions must have shape ({num_labels}, {num_labels}), '
                         f'got {transitions.shape}')
    vectors = []
    for name, vector in (('start', start), ('end', end)):
        if vector is not None:
            vector = tf.cast(vector, dtype)
            if not vector.shape.is_compatible_with([num_labels]):
                raise ValueError(f'{name} must have shape ({num_labels},), got {vector.shape}')
            vector = guard_finite(vector, owner, name)
        vectors.append(vector)
    mask = tf.convert_to_tensor(mask)
    if mask.shape.rank != 2:
        raise ValueError(f'mask must have shape (batch, n), got {mask.shape}')
    mask = tf.cast(mask, tf.bool)
    tf.debugging.assert_equal(tf.shape(mask), tf.shape(emissions)[:2],
                              message='mask must have shape (batch, n) of emissions')
    _assert_left_aligned(mask)
    return emissions, mask, transitions, vectors[0], vectors[1]


def _assert_left_aligned(mask):
    """Raise InvalidArgumentError unless every row of the bool ``mask`` is ones, then zeros."""
    grows = tf.logical_and(mask[:, 1:], tf.logical_not(mask[:, :-1]))
    tf.debugging.assert_equal(tf.reduce_any(grows), False,
                              message='mask must be left-aligned (ones, then zeros) in every row')


def _path_score(emissions, labels, mask, transitions, start, end):
    """Score (B,) of one-hot (or soft) label paths ``labels`` (B, n, L); padding scores 0.

    ``transitions`` (L, L), ``start`` / ``end`` (L,), ``mask`` (B, n) bool, left-aligned."""
    labels = labels * tf.cast(mask, labels.dtype)[..., None]
    score = tf.reduce_sum(labels * emissions, axis=[1, 2])
    following = tf.tensordot(labels[:, :-1], transitions, 1)            # (B, n-1, L), one GEMM
    score += tf.reduce_sum(following * labels[:, 1:], axis=[1, 2])
    # the last real position is where the mask drops from 1 to 0 (or the end of the row)
    after = tf.concat([mask[:, 1:], tf.zeros_like(mask[:, :1])], axis=1)
    last = tf.cast(tf.logical_and(mask, tf.logical_not(after)), labels.dtype)
    score += tf.reduce_sum(labels[:, 0] * start, axis=-1)
    return score + tf.reduce_sum(last[..., None] * labels * end, axis=[1, 2])


def _forward_backward(emissions, labels, mask, transitions, start, end):
    """``score(labels) - log Z`` (B,) and its gradients, by the forward-backward algorithm.

    Args: emissions (B, n, L), labels (B, n, L), transitions (L, L), start / end (L,), all of
        one float dtype; mask (B, n) bool, left-aligned. Emissions are read where the mask is
        set only, floored at ``DISALLOWED_SCORE`` (so ``-inf`` is allowed).
    Returns: ``(objective (B,), [d_emissions (B, n, L), d_start (B, L), d_end (B, L)],
        [labels, alphas, following (n, B, L) time-major, exp_trans (L, L)])`` in the input dtype
        (computed in float64). Gradients are per example, so that any upstream weighting
        applies; the last four give the transition gradient (see ``_objective_op``), a product
        summed over the batch that one GEMM computes best once the upstream weights are known.

    Exponent space with rescaling: every exponent is taken relative to its maximum and the
    forward / backward vectors ``alpha_t``, ``beta_t`` are normalised to sum 1 at every step (in
    float64 only paths ~700 nats below the best one underflow). One loop computes ``alpha_i`` and
    ``beta_{n-1-i}`` together, a vector-matrix product each; the marginals that form the
    gradient are then computed for all positions at once:
    ``p(y_t = j) ~ alpha_t(j) beta_t(j)`` and
    ``p(y_{t-1} = i, y_t = j) ~ alpha_{t-1}(i) exp(transitions[i, j]) following_t(j)``.
    """
    n = tf.shape(emissions)[1]
    input_dtype, dtype = emissions.dtype, tf.float64
    floored = tf.logical_and(mask[..., None], emissions < DISALLOWED_SCORE)   # no gradient there
    emissions = tf.where(mask[..., None],
                         tf.maximum(tf.cast(emissions, dtype), DISALLOWED_SCORE), 0)
    labels, transitions, start, end = (tf.cast(x, dtype) for x in (labels, transitions, start, end))
    labels = labels * tf.cast(mask, dtype)[..., None]
    # Emissions relative to each position's best label: score and log Z both lose the sum of the
    # peaks, which a one-hot row (label mass 1) cancels exactly instead of by subtracting two
    # huge numbers, so emissions of any finite size (1e30, float32's 3e38) give the exact loss.
    emission_peak = tf.reduce_max(emissions, axis=2, keepdims=True)          # (B, n, 1)
    emissions -= emission_peak
    label_mass = tf.reduce_sum(labels, axis=2, keepdims=True)               # 1 for one-hot rows
    score = (_path_score(emissions, labels, mask, transitions, start, end)
             + tf.reduce_sum((label_mass - 1) * emission_peak, axis=[1, 2]))
    # time-major from here on: (n, B, L), so that a step reads contiguous rows
    emissions, labels = (tf.transpose(x, [1, 0, 2]) for x in (emissions, labels))
    mask = tf.transpose(mask)
    weights = tf.exp(emissions)
    exp_trans = tf.exp(transitions - tf.reduce_max(transitions))
    peaks = [tf.reduce_max(transitions), tf.reduce_max(start), tf.reduce_max(end)]
    exp_start, exp_end = tf.exp(start - peaks[1]), tf.exp(end - peaks[2])
    # log Z - sum of the emission peaks = these peaks + log of the rescaled sum over paths
    log_z = (tf.reduce_sum(tf.where(mask[1:], peaks[0], tf.zeros_like(peaks[0])), axis=0)
             + peaks[1] + peaks[2])

    def step(i, alpha, beta, log_z, alphas, betas, totals):
        moved = tf.matmul(alpha, exp_trans) * weights[i]                    # forward to i
        total = _safe_divisor(tf.reduce_sum(moved, axis=1))
        alpha = tf.where(mask[i, :, None], moved / total[:, None], alpha)
        total = tf.where(mask[i], total, 1)
        t = n - 1 - i                                                       # backward to t
        back = tf.matmul(weights[t + 1] * beta, exp_trans, transpose_b=True)
        beta = tf.where(mask[t + 1, :, None],
                        back / _safe_divisor(tf.reduce_sum(back, axis=1))[:, None], beta)
        return (i + 1, alpha, beta, log_z + tf.math.log(total), alphas.write(i, alpha),
                betas.write(t, beta), totals.write(i, total))

    alpha = exp_start * weights[0]
    total = _safe_divisor(tf.reduce_sum(alpha, axis=1))
    alpha = alpha / total[:, None]
    beta = tf.tile((exp_end / tf.reduce_sum(exp_end))[None], [tf.shape(alpha)[0], 1])
    alphas, betas, totals = (tf.TensorArray(dtype, size=n, element_shape=x.shape)
                             for x in (alpha, beta, total))
    _, alpha, _, log_z, alphas, betas, totals = tf.while_loop(
        lambda i, *_: i < n, step,
        [1, alpha, beta, log_z + tf.math.log(total), alphas.write(0, alpha),
         betas.write(n - 1, beta), totals.write(0, total)],
        maximum_iterations=n - 1)
    log_z += tf.math.log(tf.maximum(tf.reduce_sum(alpha * exp_end, axis=1), _TINY))
    alphas, betas, totals = alphas.stack(), betas.stack(), totals.stack()  # (n, B, L), (n, B)
    live = tf.cast(mask, dtype)[..., None]
    overlap = _safe_divisor(tf.reduce_sum(alphas * betas, axis=2))[..., None]
    marginals = alphas * betas / overlap * live                             # p(y_t = j)
    # p(y_{t-1} = i, y_t = j) = alphas[t-1, i] * exp_trans[i, j] * following[t, j]
    following = weights * betas / (totals[..., None] * overlap) * live
    after = tf.concat([mask[1:], tf.zeros_like(mask[:1])], axis=0)
    last = tf.cast(tf.logical_and(mask, tf.logical_not(after)), dtype)[..., None]
    objective = tf.where(mask[0], score - log_z, 0)
    d_emissions = tf.transpose(labels - marginals, [1, 0, 2])
    gradients = [tf.where(floored, tf.zeros_like(d_emissions), d_emissions),
                 labels[0] - marginals[0], tf.reduce_sum(last * (labels - marginals), axis=0)]
    pair_factors = [labels, alphas, following, exp_trans]
    return (tf.cast(objective, input_dtype), [tf.cast(g, input_dtype) for g in gradients],
            [tf.cast(x, input_dtype) for x in pair_factors])


def _safe_divisor(x):
    """``x`` where positive, else 1: a sum that underflowed to 0 (no allowed path) stays 0."""
    return tf.where(x > 0, x, tf.ones_like(x))


# autograph=False: plain tf.while_loop code, nothing for AutoGraph to convert, and its rewrite
# would cost every process time at the first trace
_COMPILED = {True: tf.function(_forward_backward, jit_compile=True, autograph=False),
             False: tf.function(_forward_backward, autograph=False, reduce_retracing=True)}

# Compile the forward-backward pass with XLA where the CPU kernel does not run it (evaluation,
# prediction, a GPU, no compiler): one program for the loop instead of TensorFlow's ops run one
# by one, faster on CPU (docs/performance.md, "The CRF loss alone, against peers": its `XLA
# pass` and `TensorFlow ops` columns). XLA compiles one program per (batch size, padded length),
# a compiler run each, so the sequence axis is padded to a multiple of _LENGTH_BUCKET and batches
# of varying length share a few programs. Read when a function is traced: see use_xla.
USE_XLA = True
_LENGTH_BUCKET = 32


@contextlib.contextmanager
def use_xla(enabled):
    """Within the block, the CRF's forward-backward is compiled with XLA (``enabled``) or not,
    where the CPU kernel does not run it: a training step's loss on a CPU runs the kernel either
    way (``crf_lr.speed.fused_kernels.crf_applies``; ``fused_kernels(False)`` to compare). The
    previous setting comes back after the block; a ``tf.function`` keeps the choice it was
    traced with. Without XLA the maths is the same and no sequence is padded.

        >>> with use_xla(False):
        ...     log_z = tf.function(crf_log_partition)(emissions, mask, trans)  # TF's ops
    """
    global USE_XLA
    previous, USE_XLA = USE_XLA, bool(enabled)
    try:
        yield
    finally:
        USE_XLA = previous


def _objective_op(forward_backward):
    """``_objective``'s op with ``forward_backward`` (``_forward_backward`` or a pass with its
    outputs) inside, as a custom gradient."""
    @tf.custom_gradient
    def objective_op(emissions, labels, mask, transitions, start, end):
        # stop_gradient: an outer tape must not record the compiled call itself (its gradient is
        # below), or TensorFlow asks the XLA program for its loop's intermediates and fails
        inputs = [tf.stop_gradient(x) for x in (emissions, labels, mask, transitions, start, end)]
        objective, (d_emissions, d_start, d_end), (labels, alphas, following, exp_trans) = \
            forward_backward(*inputs)
        num_labels = emissions.shape[-1]

        def pair_sum(weights, left, right):
            """sum_b weights_b sum_t left[t-1, b] (outer) right[t, b]: (L, L), one GEMM."""
            left = tf.reshape(weights[None, :, None] * left[:-1], [-1, num_labels])
            return tf.matmul(left, tf.reshape(right[1:], [-1, num_labels]), transpose_a=True)

        def gradient(upstream):
            # d objective / d transitions = label pair counts - pair marginals
            d_trans = (pair_sum(upstream, labels, labels)
                       - exp_trans * pair_sum(upstream, alphas, following))
            return (upstream[:, None, None] * d_emissions, None, None, d_trans,
                    tf.linalg.matvec(d_start, upstream, transpose_a=True),
                    tf.linalg.matvec(d_end, upstream, transpose_a=True))
        return objective, gradient
    return objective_op


def _forward_backward_pass(emissions):
    """The forward-backward pass a function traced now runs: one CPU kernel where it applies
    (``crf_lr.speed.fused_kernels.crf_applies``: a training step's loss on a CPU; faster than XLA's
    program at the median of every shape measured, and nothing to compile per shape), else
    XLA's program under ``USE_XLA``, else TensorFlow's ops."""
    from crf_lr.speed import fused_kernels
    if fused_kernels.crf_applies(emissions):
        return fused_kernels.crf_forward_backward
    return _COMPILED[USE_XLA]


def _objective(emissions, labels, mask, transitions, start, end):
    """``score(labels) - log Z`` (B,) of validated inputs (start / end may be None), in their
    dtype (computed in float64).

    ``labels`` (B, n, L) one-hot or soft; all zeros gives ``-log Z``. The value and all its
    gradients come from one forward-backward pass (compiled, or one kernel) wrapped as a custom
    gradient, so an outer tape never walks the loop. Gradients w.r.t. labels: none."""
    forward_backward = _forward_backward_pass(emissions)
    emissions, labels, mask, transitions, start, end = _padded(
        emissions, labels, mask, transitions, start, end, forward_backward is _COMPILED[True])
    return _objective_op(forward_backward)(
        emissions, tf.stop_gradient(labels), mask, transitions, start, end)


def _padded(emissions, labels, mask, transitions, start, end, for_xla):
    """The forward-backward pass's inputs: the sequence axis padded to the XLA length bucket
    (``for_xla``) or to at least 1, zeros for a missing start / end."""
    n = tf.shape(emissions)[1]
    bucket = _LENGTH_BUCKET if for_xla else 1                            # XLA: few programs
    padded = tf.maximum(n + (-n) % bucket, bucket)                       # n = 0 included
    padding = [[0, 0], [0, padded - n], [0, 0]]
    zeros = tf.zeros_like(transitions[0])
    return (tf.pad(emissions, padding), tf.pad(labels, padding), tf.pad(mask, padding[:2]),
            transitions, zeros if start is None else start, zeros if end is None else end)


def _marginals(emissions, mask, transitions, start, end):
    """``p(y_t = j)`` (B, n, L) of validated inputs, 0 on padding rows: the forward-backward
    pass's gradient of ``-log Z`` with respect to the emissions (no gradient flows back)."""
    inputs = [tf.stop_gradient(x) for x in _padded(
        emissions, tf.zeros_like(emissions), mask, transitions, start, end, USE_XLA)]
    _, (d_emissions, _, _), _ = _COMPILED[USE_XLA](*inputs)
    return tf.zeros_like(emissions) - d_emissions[:, :tf.shape(emissions)[1]]


def crf_marginals(emissions, mask, transitions, start=None, end=None):
    """Posterior probability ``p(y_t = j | emissions)`` of every label at every position.

    Forward-backward in the graph (float64, compiled with XLA like the loss), with the same
    scores and constraints as ``crf_log_partition``.

    Args:
        emissions, mask, transitions, start, end: as in ``crf_log_partition``.
    Returns:
        float tensor (batch, n, L) in the compute dtype: each real row sums to 1, padding rows
        are all 0.

        >>> p = crf_marginals(emissions, tf.sequence_mask(lengths, n), transitions)
        >>> p.shape                         # (batch, n, L)
    """
    emissions, mask, transitions, start, end = _validated(
        emissions, mask, transitions, start, end, 'crf_marginals')
    return _marginals(emissions, mask, transitions, start, end)


def crf_log_partition(emissions, mask, transitions, start=None, end=None):
    """Log partition function ``log Z`` of every sequence.

    Args:
        emissions: float tensor (batch, n, L) (float16/32 computed in float32, float64 in float64).
        mask: bool or 0/1 tensor (batch, n), left-aligned; all zeros = empty sequence (log Z = 0).
        transitions: float tensor (L, L); ``transitions[i, j]`` scores label i followed by j.
        start, end: optional float tensors (L,) of first-label / last-label scores.
    Returns:
        float tensor (batch,) in the compute dtype. NaN / inf: a NaN or ``+inf`` emission,
        transition or start/end score raises naming the argument (``set_check_numerics``, on by
        default), or gives NaN for its row with the checks off.

        >>> log_z = crf_log_partition(emissions, tf.sequence_mask(lengths, n), transitions)
        >>> log_z.shape                     # (batch,)
    """
    emissions, mask, transitions, start, end = _validated(
        emissions, mask, transitions, start, end, 'crf_log_partition')
    return -_objective(emissions, tf.zeros_like(emissions), mask, transitions, start, end)


def crf_sequence_score(emissions, tags, mask, transitions, start=None, end=None):
    """Unnormalised score ``s(y)`` of the label paths ``tags``.

    Args:
        emissions, mask, transitions, start, end: as in ``crf_log_partition``.
        tags: int tensor (batch, n) of label ids in [0, L) (any value at padding positions).
    Returns:
        float tensor (batch,) in the compute dtype.

        >>> s = crf_sequence_score(emissions, tags, mask, transitions)
        >>> s.shape                         # (batch,)
    """
    emissions, mask, transitions, start, end = _validated(
        emissions, mask, transitions, start, end, 'crf_sequence_score')
    zeros = tf.zeros_like(transitions[0])
    return _path_score(emissions, _one_hot(tags, emissions, mask), mask, transitions,
                       zeros if start is None else start, zeros if end is None else end)


def _one_hot(tags, emissions, mask):
    """One-hot (batch, n, L) of int ``tags``, after checking they are one label id a position,
    (batch, n) or (batch, n, 1), in [0, L) where unmasked (the first other id is named)."""
    tags = tf.convert_to_tensor(tags)
    rank = tags.shape.rank
    if rank is not None and (rank not in (2, 3) or rank == 3 and tags.shape[-1] not in (1, None)):
        raise ValueError(f'tags must be label ids (batch, n) or (batch, n, 1), got shape '
                         f'{tags.shape}: one-hot labels go to dense_loss, not sparse_loss')
    one_each = ('tags must hold one label id for each position of the scores (batch, n, '
                'num_labels): one-hot labels go to dense_loss; shapes of tags and scores:')
    sizes = tags.shape.num_elements(), emissions.shape[:2].num_elements()
    if None not in sizes and sizes[0] != sizes[1]:                      # known when traced
        raise ValueError(f'{one_each} {tags.shape}, {emissions.shape}')
    one_each = tf.debugging.Assert(
        tf.equal(tf.size(tags), tf.reduce_prod(tf.shape(emissions)[:2])),
        [one_each, tf.shape(tags), tf.shape(emissions)])
    with tf.control_dependencies([one_each]):               # in a graph: before the reshape
        tags = tf.cast(tf.reshape(tags, tf.shape(emissions)[:2]), tf.int32)
    num_labels = tf.shape(emissions)[2]
    outside = tf.logical_and(tf.logical_or(tags < 0, tags >= num_labels), mask)
    first = tf.argmax(tf.concat([tf.reshape(tf.cast(outside, tf.int32), [-1]), [1]], 0))
    tf.debugging.Assert(tf.logical_not(tf.reduce_any(outside)), [    # [1], [-1]: none, or empty
        'tags must be label ids in [0, num_labels) where unmasked; num_labels and the first other '
        'id:', num_labels, tf.concat([tf.reshape(tags, [-1]), [-1]], 0)[first]])
    return tf.one_hot(tags, num_labels, dtype=emissions.dtype)


def crf_log_likelihood(emissions, tags, mask, transitions, start=None, end=None):
    """Log-likelihood ``log p(tags | emissions)`` of every sequence (<= 0; 0 for empty rows).

    Args:
        emissions, mask, transitions, start, end: as in ``crf_log_partition``.
        tags: int tensor (batch, n) of label ids in [0, L) (any value at padding positions).
    Returns:
        float tensor (batch,) in the compute dtype. NaN / inf: as ``crf_log_partition``.

        >>> ll = crf_log_likelihood(emissions, tags, mask, transitions, start, end)
        >>> loss = -tf.reduce_mean(ll)
    """
    emissions, mask, transitions, start, end = _validated(
        emissions, mask, transitions, start, end, 'crf_log_likelihood')
    labels = _one_hot(tags, emissions, mask)
    return _log_likelihood(emissions, labels, mask, transitions, start, end)


def _log_likelihood(emissions, labels, mask, transitions, start, end):
    # rounding can leave ll a hair above 0 when one path takes all the mass; a probability is at
    # most 1, so clip (the gradient there is ~0 anyway)
    return tf.minimum(_objective(emissions, labels, mask, transitions, start, end), 0)


@register
class ConditionalRandomField(LayerMethodOwner, keras.layers.Layer):
    """CRF output layer with its own learning rate, optional start/end scores and constraints.

    Place it after a Dense layer that gives one score per label. ``call`` returns the emissions
    unchanged except that padding positions (from the Keras mask) become ``-inf`` rows, so the
    losses keep Keras's ``(y_true, y_pred)`` signature and find padding as rows that are all
    ``-inf``. Without a Keras mask every position is scored. The mask must be left-aligned.
    Under mixed precision (``crf_lr.model.precision``) the output is float32, never bf16 or float16.

    The stored weights are ``trans / lr_multiplier`` (and ``start``, ``end`` likewise) and are
    multiplied back on use, so under Adam (scale-invariant) the effective step on the
    transitions is ``lr_multiplier`` times the optimizer's rate; under plain SGD the gradient is
    also multiplied by ``lr_multiplier``, so the effective step is ``lr_multiplier ** 2`` times.

    Args:
        lr_multiplier: positive float, learning-rate multiplier of the CRF parameters.
        allowed_transitions: optional bool array (L, L); ``[i, j]`` False forbids i -> j.
        allowed_starts, allowed_ends: optional bool arrays (L,) of labels allowed first / last.
            Forbidden choices score -1e4 (``DISALLOWED_SCORE``) in training and decoding.
        boundary_scores: learn start and end score vectors (L,) as well.

        >>> crf = ConditionalRandomField(lr_multiplier=100)
        >>> output = crf(keras.layers.Dense(num_labels)(bert.output)); loss = crf.sparse_loss
    """

    def __init__(self, lr_multiplier=1, allowed_transitions=None, allowed_starts=None,
                 allowed_ends=None, boundary_scores=False, **kwargs):
        kwargs.setdefault('autocast', False)    # mixed precision: see call
        super().__init__(**kwargs)
        set_crf_arguments(self, lr_multiplier, allowed_transitions, allowed_starts, allowed_ends,
                          boundary_scores)

    def build(self, input_shape):
        num_labels = check_num_labels(input_shape, self)
        scale = 1.0 / self.lr_multiplier
        self._trans = self.add_weight(name='trans', shape=(num_labels, num_labels),
                                      initializer=_ScaledInitializer('glorot_uniform', scale))
        if self.boundary_scores:
            self._start = self.add_weight(name='start', shape=(num_labels,), initializer='zeros')
            self._end = self.add_weight(name='end', shape=(num_labels,), initializer='zeros')
        super().build(input_shape)

    @property
    def trans(self):
        """The learned transition matrix (L, L): ``lr_multiplier`` x the stored weight.

        Constraints are not applied here; ``effective_parameters()`` applies them."""
        return self.lr_multiplier * self._trans

    @property
    def starts(self):
        """Learned start scores (L,) (``lr_multiplier`` x stored); None without boundary scores."""
        return self.lr_multiplier * self._start if self.boundary_scores else None

    @property
    def ends(self):
        """Learned end scores (L,) (``lr_multiplier`` x stored); None without boundary scores."""
        return self.lr_multiplier * self._end if self.boundary_scores else None

    def effective_parameters(self, dtype='float32'):
        """``(transitions, start, end)`` as used in training: learned, scaled, constraints applied.

        ``start`` / ``end`` are None when there are neither boundary scores nor constraints on them.
        """
        return constrained(self, dtype, tf)

    def compute_mask(self, inputs, mask=None):
        return None

    def call(self, inputs, mask=None):
        # Under mixed precision the emissions leave in float32 (the model's output), and are never
        # cast down on entry (autocast off): the losses and decoders compute in float32 / float64.
        inputs = tf.cast(inputs, tf.float32) if inputs.dtype.size < 4 else inputs
        if mask is None:
            return inputs
        mask = tf.cast(mask, tf.bool)[..., None]
        return tf.where(mask, inputs, tf.constant(-np.inf, inputs.dtype))

    def _owner(self, method):
        # no quotes: a graph Assert prints its message escaped (\'), which a user cannot grep
        return f'ConditionalRandomField(name={self.name}).{method}'

    def _unpack(self, y_pred, method):
        """Emissions (compute dtype, -inf kept: the maths floors them) and mask from ``y_pred``;
        under ``crf_lr.set_check_numerics``, NaN or +inf emissions raise, naming ``method``."""
        y_pred = guard_finite(tf.convert_to_tensor(y_pred), self._owner(method), 'y_pred',
                              minus_inf_allowed=True)
        mask = tf.reduce_any(y_pred > -np.inf, axis=-1)                   # row all -inf = padding
        return tf.cast(y_pred, _compute_dtype(y_pred)), mask

    @layer_method
    def dense_loss(self, y_true, y_pred):
        """Negative log-likelihood (batch,) of one-hot (or soft) labels ``y_true`` (batch, n, L).

        NaN / inf: a NaN or ``+inf`` emission, label or transition raises naming the layer and
        the argument (``crf_lr.set_check_numerics``, on by default); checks off, its row's loss
        is NaN.
        ``-inf`` emissions are masked positions (what ``call`` puts at padding), never an error.
        """
        emissions, mask = self._unpack(y_pred, 'dense_loss')
        labels = tf.cast(tf.reshape(y_true, tf.shape(emissions)), emissions.dtype)
        labels = guard_finite(labels, self._owner('dense_loss'), 'y_true')
        return self._negative_log_likelihood(emissions, labels, mask, 'dense_loss')

    @layer_method
    def sparse_loss(self, y_true, y_pred):
        """Negative log-likelihood (batch,) of int labels ``y_true`` (batch, n) or (batch, n, 1).

        NaN / inf: as ``dense_loss``.
        """
        emissions, mask = self._unpack(y_pred, 'sparse_loss')
        return self._negative_log_likelihood(emissions, _one_hot(y_true, emissions, mask), mask,
                                             'sparse_loss')

    def _negative_log_likelihood(self, emissions, labels, mask, method):
        _assert_left_aligned(mask)
        transitions, start, end = self.effective_parameters(emissions.dtype)
        transitions = guard_finite(transitions, self._owner(method), 'trans')
        return -_log_likelihood(emissions, labels, mask, transitions, start, end)

    @layer_method
    def dense_accuracy(self, y_true, y_pred):
        """Per-position accuracy of the emission argmax against one-hot ``y_true`` (no padding)."""
        return self.sparse_accuracy(tf.argmax(y_true, axis=-1), y_pred)

    @layer_method
    def sparse_accuracy(self, y_true, y_pred):
        """Per-position accuracy of the emission argmax against int ``y_true`` (padding excluded).

        Like bert4keras, this is a cheap training-time proxy; decode with ``decode`` to evaluate."""
        _, mask = self._unpack(y_pred, 'sparse_accuracy')
        y_true = tf.cast(tf.reshape(y_true, tf.shape(mask)), tf.int32)
        hits = tf.logical_and(tf.equal(y_true, tf.argmax(y_pred, -1, output_type=tf.int32)), mask)
        return (tf.reduce_sum(tf.cast(hits, 'float32'))
                / tf.maximum(tf.reduce_sum(tf.cast(mask, 'float32')), 1.0))

    def marginals(self, emissions, mask=None):
        """Posterior label probabilities with the layer's parameters and constraints, in-graph.

        Args:
            emissions: float tensor (batch, n, L), e.g. this layer's output (its ``-inf`` rows
                are read as padding when ``mask`` is None).
            mask: optional bool / 0-1 tensor (batch, n), left-aligned.
        Returns:
            float32 tensor (batch, n, L) (float64 for float64 emissions): ``p(y_t = j)``, rows
            summing to 1, padding rows all 0.

            >>> probabilities = crf.marginals(model.predict(token_ids))      # (batch, n, L)
        """
        emissions, found = self._unpack(emissions, 'marginals')
        mask = found if mask is None else mask
        transitions, start, end = self.effective_parameters(emissions.dtype)
        emissions, mask, transitions, start, end = _validated(
            emissions, mask, transitions, start, end, self._owner('marginals'))
        return _marginals(emissions, mask, transitions, start, end)

    def decode(self, emissions, lengths=None, mask=None):
        """Viterbi paths with the layer's current parameters and constraints (NumPy).

        Args:
            emissions: float array (batch, n, L), e.g. ``model.predict(x)`` (``-inf`` padding rows
                are read as padding when neither ``lengths`` nor ``mask`` is given).
            lengths: optional int array (batch,); mask: optional bool array (batch, n).
        Returns:
            A list of int64 arrays, one per sequence, of its own length.

            >>> paths = crf.decode(model.predict(token_ids), mask=token_ids > 0)
        """
        emissions = require_finite(np.asarray(emissions, dtype=np.float64), self._owner('decode'),
                                   'emissions', minus_inf_allowed=True)
        transitions, start, end = (None if p is None else p.numpy()
                                   for p in self.effective_parameters('float64'))
        require_finite(transitions, self._owner('decode'), 'trans')
        return decode_layer_output(emissions, transitions, lengths, mask, start, end)

    def decode_tf(self, y_pred):
        """In-graph Viterbi paths of the layer's output (for a serving model or SavedModel).

        Args:
            y_pred: float tensor (batch, n, L), the output of this layer (``-inf`` rows = padding);
                or a model's symbolic output, decoded by a layer that shares this one's weights.
        Returns:
            int32 tensor (batch, n), -1 at padding.

            >>> serving = keras.Model(model.input, crf.decode_tf(model.output))
            >>> tf.saved_model.save(serving, 'serving')
        """
        if keras.backend.is_keras_tensor(y_pred):                 # a model being built
            return ViterbiPaths(self)(y_pred)
        emissions, mask = self._unpack(y_pred, 'decode_tf')
        transitions, start, end = self.effective_parameters()
        return viterbi_decode_tf(emissions, transitions, mask=mask, start=start, end=end)

    def get_config(self):
        return dict(super().get_config(), **crf_config(self))


class ViterbiPaths(keras.layers.Layer):
    """The layer :meth:`ConditionalRandomField.decode_tf` puts on a model's symbolic output: the
    Viterbi paths of ``crf``'s output, with ``crf``'s (shared) weights. For a serving model, saved
    as a SavedModel; it has no config of its own to save to .h5.

        >>> serving = keras.Model(model.input, ViterbiPaths(crf)(model.output))
    """

    def __init__(self, crf, **kwargs):
        super().__init__(trainable=False, dtype='float32', **kwargs)
        self.crf = crf
        self.supports_masking = True          # the CRF's -inf rows are its mask: none to pass on

    def call(self, y_pred):
        return self.crf.decode_tf(y_pred)

    def compute_mask(self, inputs, mask=None):
        return None


class _ScaledInitializer(keras.initializers.Initializer):
    """``scale`` times a named Keras initializer (stores trans / lr_multiplier)."""

    def __init__(self, base, scale):
        self.base = keras.initializers.get(base)
        self.scale = scale

    def __call__(self, shape, dtype=None, **kwargs):
        return self.scale * self.base(shape, dtype=dtype)
