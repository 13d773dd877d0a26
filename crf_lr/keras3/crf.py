"""Linear-chain CRF in ``keras.ops`` (TensorFlow, JAX and PyTorch backends): the maths and the
layer.

A path ``y`` of a sequence of length ``l`` (its left-aligned mask has ``l`` ones) scores

    s(y) = start[y_0] + sum_{t<l} emissions[t, y_t]
           + sum_{1<=t<l} transitions[y_{t-1}, y_t] + end[y_{l-1}]

and ``log p(y) = s(y) - log Z``, ``log Z`` = logsumexp of ``s`` over all ``L**l`` paths, as in
``crf_lr.model.crf`` (the tf-keras layer). Here ``log Z`` is the forward algorithm in log space
(``keras.ops.scan``, one ``logsumexp`` over an (L, L) table per step) and the backend's autodiff
gives the gradients; the tf-keras layer's hand-written float64 forward-backward pass agrees to
float32 rounding (tests/keras3/test_keras3.py states the tolerances). An empty sequence has
log-likelihood 0. Disallowed transitions / starts / ends score ``DISALLOWED_SCORE`` (-1e4), never
``-inf``.

Masks must be left-aligned (``mask[b] = [1] * l + [0] * (n - l)``): the public functions check
this when their inputs are concrete; inside a compiled train step nothing can be checked.

    >>> ll = crf_log_likelihood(emissions, tags, mask, transitions)     # (batch,)
    >>> crf = ConditionalRandomField(lr_multiplier=100); model.compile(loss=crf.sparse_loss)
"""
import weakref

import keras
import numpy as np
from keras import ops

from crf_lr.model.checks import check_num_labels, constrained, crf_config, set_crf_arguments
from crf_lr.decoding.viterbi import DISALLOWED_SCORE, decode_layer_output


def _compute_dtype(x):
    """float64 for float64 inputs (where the backend has it), float32 for everything else."""
    return 'float64' if keras.backend.standardize_dtype(x.dtype) == 'float64' else 'float32'


def _concrete(x):
    """``x`` as a NumPy array when it holds values (eager), None while it is being traced."""
    if isinstance(x, np.ndarray):
        return x
    try:
        return ops.convert_to_numpy(x)
    except Exception:   # a tracer or symbolic tensor: the backends raise different types
        return None


def _check_left_aligned(mask):
    """Raise ValueError naming the first row of a concrete ``mask`` that is not ones, then zeros."""
    values = _concrete(mask)
    if values is None:
        return
    values = values.astype(bool)
    grows = values[:, 1:] & ~values[:, :-1]
    if grows.any():
        row = int(np.nonzero(grows.any(axis=1))[0][0])
        raise ValueError(f'mask must be left-aligned (ones, then zeros); row {row} is '
                         f'{values[row].astype(int).tolist()}')


def _validated(emissions, mask, transitions, start, end):
    """Cast to the compute dtype; check shapes and (when concrete) that the mask is left-aligned.

    Returns ``(emissions, mask bool, transitions, start, end)``, zeros for a missing start / end."""
    emissions = ops.convert_to_tensor(emissions)
    if len(emissions.shape) != 3:
        raise ValueError(f'emissions must have shape (batch, n, num_labels), got {emissions.shape}')
    dtype = _compute_dtype(emissions)
    emissions = ops.cast(emissions, dtype)
    num_labels = emissions.shape[-1]
    parameters = []
    for name, value, shape in (('transitions', transitions, (num_labels, num_labels)),
                               ('start', start, (num_labels,)), ('end', end, (num_labels,))):
        value = ops.zeros(shape, dtype) if value is None else ops.cast(value, dtype)
        if tuple(value.shape) != shape:
            raise ValueError(f'{name} must have shape {shape}, got {tuple(value.shape)}')
        parameters.append(value)
    mask = ops.convert_to_tensor(mask)
    if tuple(mask.shape) != tuple(emissions.shape[:2]):
        raise ValueError(f'mask must have shape (batch, n) = {tuple(emissions.shape[:2])}, '
                         f'got {tuple(mask.shape)}')
    mask = ops.cast(mask, 'bool')
    _check_left_aligned(mask)
    return (emissions, mask, *parameters)


def _clean(emissions, mask):
    """Emissions with padding set to 0 and real scores floored at DISALLOWED_SCORE (no -inf)."""
    floored = ops.maximum(emissions, ops.cast(DISALLOWED_SCORE, emissions.dtype))
    return ops.where(mask[..., None], floored, ops.zeros_like(emissions))


def _first_and_last(mask):
    """Float indicators (B, n) of the first and the last real position of every row."""
    before = ops.pad(mask[:, :-1], [[0, 0], [1, 0]], constant_values=False)
    after = ops.pad(mask[:, 1:], [[0, 0], [0, 1]], constant_values=False)
    return (ops.logical_and(mask, ops.logical_not(before)),
            ops.logical_and(mask, ops.logical_not(after)))


def _path_score(emissions, labels, mask, transitions, start, end):
    """Score (B,) of one-hot (or soft) label paths ``labels`` (B, n, L) of clean emissions."""
    dtype = emissions.dtype
    labels = labels * ops.cast(mask, dtype)[..., None]
    first, last = (ops.cast(x, dtype)[..., None] for x in _first_and_last(mask))
    score = ops.sum(labels * (emissions + first * start + last * end), axis=(1, 2))
    following = ops.tensordot(labels[:, :-1], transitions, axes=1)        # (B, n-1, L)
    return score + ops.sum(following * labels[:, 1:], axis=(1, 2))


def _log_partition(emissions, mask, transitions, start, end):
    """``log Z`` (B,) of clean emissions by the forward algorithm in log space; 0 for empty rows."""
    steps = (ops.transpose(emissions, (1, 0, 2)), ops.transpose(mask),
             ops.arange(ops.shape(emissions)[1]) == 0)

    def step(alpha, inputs):
        emission, live, first = inputs
        moved = ops.logsumexp(alpha[:, :, None] + transitions[None], axis=1)
        moved = ops.where(first, start, moved) + emission
        return ops.where(live[:, None], moved, alpha), None

    alpha, _ = ops.scan(step, ops.zeros_like(emissions[:, 0]), steps)
    log_z = ops.logsumexp(alpha + end, axis=1)
    return ops.where(ops.any(mask, axis=1), log_z, ops.zeros_like(log_z))


def _marginals(emissions, mask, transitions, start, end):
    """``p(y_t = j)`` (B, n, L) of clean emissions by forward and backward scans in log space;
    padding rows 0."""
    first, last = _first_and_last(mask)
    steps = (ops.transpose(emissions, (1, 0, 2)), ops.transpose(mask), ops.transpose(first),
             ops.transpose(last))

    def forward(alpha, inputs):
        emission, live, opens, _ = inputs
        moved = ops.logsumexp(alpha[:, :, None] + transitions[None], axis=1)
        moved = ops.where(opens[:, None], start, moved) + emission
        alpha = ops.where(live[:, None], moved, alpha)
        return alpha, alpha

    def backward(following, inputs):
        # following = emissions[t + 1] + beta[t + 1]; beta[t] = end at the last real position
        emission, _, _, closes = inputs
        beta = ops.logsumexp(transitions[None] + following[:, None, :], axis=2)
        beta = ops.where(closes[:, None], end, beta)
        return emission + beta, beta

    zeros = ops.zeros_like(emissions[:, 0])
    _, alphas = ops.scan(forward, zeros, steps)
    _, betas = ops.scan(backward, zeros, steps, reverse=True)
    # normalised per position: each row sums to 1 exactly (log Z cancels)
    marginals = ops.softmax(ops.transpose(alphas + betas, (1, 0, 2)), axis=-1)
    return marginals * ops.cast(mask, marginals.dtype)[..., None]


def _one_hot(tags, emissions, mask):
    """One-hot (B, n, L) of int ``tags``, after checking (when concrete) they are label ids."""
    num_labels = emissions.shape[-1]
    tags = ops.reshape(ops.cast(ops.convert_to_tensor(tags), 'int32'), ops.shape(mask))
    values, live = _concrete(tags), _concrete(mask)
    if values is not None and live is not None:
        bad = live & ((values < 0) | (values >= num_labels))
        if bad.any():
            row, col = (int(i[0]) for i in np.nonzero(bad))
            raise ValueError(f'tags must be label ids in [0, {num_labels}) where unmasked; '
                             f'tags[{row}, {col}] = {values[row, col]}')
    tags = ops.where(mask, tags, ops.zeros_like(tags))
    return ops.one_hot(tags, num_labels, dtype=emissions.dtype)


def _log_likelihood(emissions, labels, mask, transitions, start, end):
    """``min(s(labels) - log Z, 0)`` (B,); rounding may leave it a hair above 0 otherwise."""
    emissions = _clean(emissions, mask)
    objective = (_path_score(emissions, labels, mask, transitions, start, end)
                 - _log_partition(emissions, mask, transitions, start, end))
    return ops.minimum(objective, 0)


def crf_log_partition(emissions, mask, transitions, start=None, end=None):
    """Log partition function ``log Z`` of every sequence.

    Args:
        emissions: float tensor (batch, n, L).
        mask: bool or 0/1 tensor (batch, n), left-aligned; all zeros = empty sequence (log Z = 0).
        transitions: float tensor (L, L); ``transitions[i, j]`` scores label i followed by j.
        start, end: optional float tensors (L,) of first-label / last-label scores.
    Returns:
        float tensor (batch,) (float64 for float64 emissions where the backend allows, else
        float32).

        >>> log_z = crf_log_partition(emissions, lengths[:, None] > np.arange(n), transitions)
        >>> log_z.shape                     # (batch,)
    """
    emissions, mask, transitions, start, end = _validated(emissions, mask, transitions, start, end)
    return _log_partition(_clean(emissions, mask), mask, transitions, start, end)


def crf_marginals(emissions, mask, transitions, start=None, end=None):
    """Posterior probability ``p(y_t = j | emissions)`` (batch, n, L) of every label at every
    position: rows sum to 1, padding rows are 0. Arguments as in ``crf_log_partition``.

        >>> p = crf_marginals(emissions, lengths[:, None] > np.arange(n), transitions)
        >>> p.shape                         # (batch, n, L)
    """
    emissions, mask, transitions, start, end = _validated(emissions, mask, transitions, start, end)
    return _marginals(_clean(emissions, mask), mask, transitions, start, end)


def crf_sequence_score(emissions, tags, mask, transitions, start=None, end=None):
    """Unnormalised score ``s(y)`` (batch,) of the label paths ``tags`` (batch, n) int.

    Arguments as in ``crf_log_partition``; tags may hold any value at padding positions.

        >>> s = crf_sequence_score(emissions, tags, mask, transitions)
        >>> s.shape                         # (batch,)
    """
    emissions, mask, transitions, start, end = _validated(emissions, mask, transitions, start, end)
    return _path_score(_clean(emissions, mask), _one_hot(tags, emissions, mask), mask,
                       transitions, start, end)


def crf_log_likelihood(emissions, tags, mask, transitions, start=None, end=None):
    """Log-likelihood ``log p(tags | emissions)`` (batch,) of every sequence (<= 0; 0 if empty).

    Arguments as in ``crf_log_partition``; ``tags`` int (batch, n), any value at padding.

        >>> ll = crf_log_likelihood(emissions, tags, mask, transitions, start, end)
        >>> loss = -keras.ops.mean(ll)
    """
    emissions, mask, transitions, start, end = _validated(emissions, mask, transitions, start, end)
    return _log_likelihood(emissions, _one_hot(tags, emissions, mask), mask, transitions,
                           start, end)


def viterbi_decode_ops(emissions, transitions, mask=None, start=None, end=None):
    """Best label paths in ``keras.ops`` (works eagerly and inside a jitted function).

    Same scoring and constraints as ``crf_lr.decoding.viterbi.viterbi_decode`` (pass constrained
    parameters, e.g. from ``ConditionalRandomField.effective_parameters``).

    Args:
        emissions: float tensor (batch, n, L); transitions: (L, L); start, end: optional (L,).
        mask: optional bool/0-1 tensor (batch, n), left-aligned; None: every position counts.
    Returns:
        int32 tensor (batch, n): the best label at each position, -1 at padding.

        >>> tags = viterbi_decode_ops(scores, *crf.effective_parameters(), mask=token_ids > 0)
        >>> tags.shape                      # (batch, n)
    """
    emissions = ops.convert_to_tensor(emissions)
    if mask is None:
        mask = ops.ones(ops.shape(emissions)[:2], 'bool')
    emissions, mask, transitions, start, end = _validated(emissions, mask, transitions, start, end)
    emissions = _clean(emissions, mask)
    num_labels = emissions.shape[-1]
    labels = ops.arange(num_labels, dtype='int32')[None]
    # one padding position beyond every length, so that n = 0 and n = 1 need no special case
    steps = ops.transpose(ops.pad(emissions, [[0, 0], [0, 1], [0, 0]]), (1, 0, 2))
    live = ops.transpose(ops.pad(mask, [[0, 0], [0, 1]], constant_values=False))

    def forward(carry, inputs):
        # carry and output are both (score, pointers): TensorFlow's scan needs them alike
        score, emission, alive = carry[0], inputs[0], inputs[1][:, None]
        candidates = score[:, :, None] + transitions                      # (B, from, to)
        best = ops.cast(ops.argmax(candidates, axis=1), 'int32')
        moved = ops.max(candidates, axis=1) + emission
        carry = ops.where(alive, moved, score), ops.where(alive, best, labels)
        return carry, carry

    first = (start + steps[0], ops.zeros_like(ops.cast(steps[0], 'int32')))
    (score, _), (_, pointers) = ops.scan(forward, first, (steps[1:], live[1:]))

    def backward(state, pointer):                                         # pointer: (B, L)
        previous = ops.take_along_axis(pointer, state[:, None], axis=1)[:, 0]
        return previous, previous

    last = ops.cast(ops.argmax(score + end, axis=1), 'int32')
    _, path = ops.scan(backward, last, pointers, reverse=True)           # labels at 0 .. n-1
    path = ops.transpose(ops.concatenate([path, last[None]], axis=0))[:, :-1]
    return ops.where(mask, path, -ops.ones_like(path))


@keras.saving.register_keras_serializable(package='crf_lr')
def crf_sparse_accuracy(y_true, y_pred):
    """Per-position accuracy of the argmax of CRF output ``y_pred`` (batch, n, L) against int
    ``y_true`` (batch, n); padding rows (all ``-inf``) are excluded. Float32 scalar.

        >>> model.compile(loss=crf.sparse_loss, metrics=[crf.sparse_accuracy])
    """
    y_pred = ops.convert_to_tensor(y_pred)
    mask = ops.any(y_pred > -np.inf, axis=-1)
    y_true = ops.cast(ops.reshape(y_true, ops.shape(mask)), 'int32')
    hits = ops.logical_and(ops.equal(y_true, ops.cast(ops.argmax(y_pred, axis=-1), 'int32')), mask)
    return (ops.sum(ops.cast(hits, 'float32'))
            / ops.maximum(ops.sum(ops.cast(mask, 'float32')), 1.0))


@keras.saving.register_keras_serializable(package='crf_lr')
def crf_dense_accuracy(y_true, y_pred):
    """``crf_sparse_accuracy`` against one-hot ``y_true`` (batch, n, L). Float32 scalar."""
    return crf_sparse_accuracy(ops.argmax(y_true, axis=-1), y_pred)


# The CRF layers alive in this process, by name: a loss read back from a saved model binds to
# the layer of its name created last, i.e. the one ``keras.saving.load_model`` has just built.
_LAYERS = weakref.WeakValueDictionary()


@keras.saving.register_keras_serializable(package='crf_lr')
class ConditionalRandomField(keras.layers.Layer):
    """CRF output layer with its own learning rate, optional start/end scores and constraints.

    Place it after a Dense layer that gives one score per label. ``call`` returns the emissions
    unchanged except that padding positions (from the Keras mask) become ``-inf`` rows, which the
    losses read as padding. Without a Keras mask every position is scored. The mask must be
    left-aligned. The stored weights are ``trans / lr_multiplier`` (``start``, ``end`` likewise),
    multiplied back on use: under Adam the transitions move ``lr_multiplier`` times faster.

    Arguments (checked by ``crf_lr.model.checks``) as the tf-keras layer's: ``lr_multiplier``
    (positive, finite), ``allowed_transitions`` (bool (L, L), ``[i, j]`` False forbids i -> j),
    ``allowed_starts`` / ``allowed_ends`` (bool (L,)): forbidden choices score -1e4
    (``DISALLOWED_SCORE``) in training and decoding; ``boundary_scores``: learn start and end
    scores (L,) too.
    Input (batch, n, L) float with an optional Keras mask (batch, n); output the same shape.

        >>> crf = ConditionalRandomField(lr_multiplier=100, name='CRF')
        >>> model = keras.Model(inputs, crf(keras.layers.Dense(num_labels)(hidden)))
        >>> model.compile(loss=crf.sparse_loss, optimizer='adam', metrics=[crf.sparse_accuracy])
    """

    def __init__(self, lr_multiplier=1, allowed_transitions=None, allowed_starts=None,
                 allowed_ends=None, boundary_scores=False, **kwargs):
        super().__init__(**kwargs)
        set_crf_arguments(self, lr_multiplier, allowed_transitions, allowed_starts, allowed_ends,
                          boundary_scores)
        self.sparse_loss = ConditionalRandomFieldLoss(self, sparse=True)
        self.dense_loss = ConditionalRandomFieldLoss(self, sparse=False)
        _LAYERS[self.name] = self

    def build(self, input_shape):
        num_labels = check_num_labels(input_shape, self)
        # glorot_uniform / lr_multiplier: a uniform VarianceScaling's limit grows as sqrt(scale)
        initializer = keras.initializers.VarianceScaling(
            scale=1.0 / self.lr_multiplier ** 2, mode='fan_avg', distribution='uniform')
        self._trans = self.add_weight(name='trans', shape=(num_labels, num_labels),
                                      initializer=initializer)
        if self.boundary_scores:
            self._start = self.add_weight(name='start', shape=(num_labels,), initializer='zeros')
            self._end = self.add_weight(name='end', shape=(num_labels,), initializer='zeros')

    @property
    def trans(self):
        """The learned transition matrix (L, L): ``lr_multiplier`` x the stored weight.

        Constraints are not applied here; ``effective_parameters()`` applies them."""
        return self.lr_multiplier * ops.convert_to_tensor(self._trans)

    @property
    def starts(self):
        """Learned start scores (L,) (``lr_multiplier`` x stored); None without boundary scores."""
        return self.lr_multiplier * ops.convert_to_tensor(self._start) if self.boundary_scores \
            else None

    @property
    def ends(self):
        """Learned end scores (L,) (``lr_multiplier`` x stored); None without boundary scores."""
        return self.lr_multiplier * ops.convert_to_tensor(self._end) if self.boundary_scores \
            else None

    def effective_parameters(self, dtype='float32'):
        """``(transitions, start, end)`` as used in training: learned, scaled, constraints applied.

        ``start`` / ``end`` are None when there are neither boundary scores nor constraints on them.
        """
        return constrained(self, dtype, ops)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, inputs, mask=None):
        if mask is None:
            return inputs
        mask = ops.cast(mask, 'bool')[..., None]
        return ops.where(mask, inputs, ops.cast(-np.inf, inputs.dtype))

    def negative_log_likelihood(self, y_true, y_pred, sparse=True):
        """Per-sequence loss (batch,) of int labels (batch, n) (``sparse``) or one-hot (batch, n,
        L).

        ``y_pred`` is this layer's output (``-inf`` rows = padding).

            >>> nll = crf.negative_log_likelihood(tags, model(x))      # (batch,)
        """
        y_pred = ops.convert_to_tensor(y_pred)
        mask = ops.any(y_pred > -np.inf, axis=-1)                        # row all -inf = padding
        _check_left_aligned(mask)
        emissions = ops.cast(y_pred, _compute_dtype(y_pred))
        labels = (_one_hot(y_true, emissions, mask) if sparse else
                  ops.cast(ops.reshape(y_true, ops.shape(emissions)), emissions.dtype))
        return -_log_likelihood(emissions, labels, mask, *self._scoring_parameters(emissions.dtype))

    def _scoring_parameters(self, dtype):
        """``effective_parameters`` with zeros for a missing start / end (not ``_parameters``:
        on the PyTorch backend a layer is a ``torch.nn.Module``, which owns that name)."""
        zeros = ops.zeros((self._trans.shape[0],), dtype)
        return tuple(zeros if p is None else p for p in self.effective_parameters(dtype))

    # registered functions (not methods), so that a saved model's metrics load back
    sparse_accuracy = staticmethod(crf_sparse_accuracy)
    dense_accuracy = staticmethod(crf_dense_accuracy)

    def marginals(self, emissions, mask=None):
        """Posterior label probabilities (batch, n, L) with the layer's parameters and
        constraints, in ``keras.ops``; ``mask`` None: this layer's ``-inf`` rows are padding.

            >>> probabilities = crf.marginals(model(x))                      # rows sum to 1
        """
        emissions = ops.convert_to_tensor(emissions)
        if mask is None:
            mask = ops.any(emissions > -np.inf, axis=-1)
        dtype = _compute_dtype(emissions)
        return crf_marginals(emissions, mask, *self._scoring_parameters(dtype))

    def decode(self, emissions, lengths=None, mask=None):
        """Viterbi paths (NumPy): a list of int64 arrays, one per sequence, of its own length,
        from ``emissions`` (batch, n, L) and optional ``lengths`` (batch,) or ``mask`` (batch, n);
        without either, rows all ``-inf`` (padding in this layer's output) are left out.

            >>> paths = crf.decode(model.predict(token_ids))
        """
        transitions, start, end = (None if p is None else ops.convert_to_numpy(p)
                                   for p in self.effective_parameters('float32'))
        return decode_layer_output(emissions, transitions, lengths, mask, start, end)

    def decode_ops(self, y_pred):
        """Viterbi paths of this layer's output in ``keras.ops`` (int32 (batch, n), -1 at padding).

            >>> tags = crf.decode_ops(model(x))
        """
        y_pred = ops.convert_to_tensor(y_pred)
        transitions, start, end = self._scoring_parameters('float32')
        return viterbi_decode_ops(y_pred, transitions, mask=ops.any(y_pred > -np.inf, axis=-1),
                                  start=start, end=end)

    def get_config(self):
        return dict(super().get_config(), **crf_config(self))


@keras.saving.register_keras_serializable(package='crf_lr')
class ConditionalRandomFieldLoss(keras.losses.Loss):
    """The negative log-likelihood of a ``ConditionalRandomField``, as ``crf.sparse_loss`` /
    ``crf.dense_loss`` give it (a Loss object, so that a saved model compiles again on reload).

    Args:
        layer: the ``ConditionalRandomField`` (or its name: then the layer of that name created
            last in this process, which is what ``keras.saving.load_model`` needs).
        sparse: int labels (batch, n) if True, one-hot (batch, n, L) if False.
    Called as ``loss(y_true, y_pred)``: the mean over the batch (Keras's default reduction).

        >>> model.compile(loss=crf.sparse_loss, optimizer='adam')
    """

    def __init__(self, layer, sparse=True, name=None, **kwargs):
        name = name or ('crf_sparse_loss' if sparse else 'crf_dense_loss')
        super().__init__(name=name, **kwargs)
        if isinstance(layer, str):
            if layer not in _LAYERS:
                raise ValueError(f'no ConditionalRandomField named {layer!r} exists: build or '
                                 f'load the model before its loss')
            layer = _LAYERS[layer]
        # a weak reference: the layer holds its losses, and Keras's saving walks every
        # attribute of both (a plain reference would be a cycle it never leaves)
        self._layer, self.sparse = weakref.ref(layer), bool(sparse)

    def crf(self):
        """The ConditionalRandomField this loss belongs to (a method, not an attribute: Keras's
        saving reads every attribute)."""
        layer = self._layer()
        if layer is None:
            raise RuntimeError('the ConditionalRandomField of this loss no longer exists')
        return layer

    def call(self, y_true, y_pred):
        return self.crf().negative_log_likelihood(y_true, y_pred, sparse=self.sparse)

    def get_config(self):
        return dict(super().get_config(), layer=self.crf().name, sparse=self.sparse)
