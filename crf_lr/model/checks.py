"""Argument checks and shape rules of the layers, losses and optimizers, written once for the
tf-keras modules (``crf_lr.model.crf``, ``crf_lr.model.global_pointer``, ``crf_lr.model.losses``,
``crf_lr.training.optimizers``) and their Keras 3 twins (``crf_lr.keras3.*``). No TensorFlow, no
Keras: NumPy and plain Python, so both sides import it (as they share ``crf_lr.model.multipliers``).

The few rules that compute on tensors take the array namespace as ``backend``: ``tf`` on the
tf-keras side, ``keras.ops`` on the Keras 3 side (both spell ``cast``, ``zeros``, ``where``,
``ones_like``, ``maximum``, ``minimum`` alike).

    >>> check_lr_multiplier(100)                                         # 100
    >>> check_pointer('GlobalPointer', heads=4, head_size=64, rope=True)   # (4, 64)
    >>> check_schedule(warmup_steps=10, total_steps=100, min_lr_ratio=0.0)   # (10, 100, 0.0)
"""
import math
import numbers

import numpy as np

from crf_lr.model.multipliers import check_patterns
from crf_lr.decoding.viterbi import DISALLOWED_SCORE, _check_mask_array

# ---- ConditionalRandomField ----

CONSTRAINTS = ('allowed_transitions', 'allowed_starts', 'allowed_ends')


def check_lr_multiplier(lr_multiplier):
    """``lr_multiplier`` if it is a positive finite number, else ValueError."""
    if not np.isscalar(lr_multiplier) or not 0 < lr_multiplier < np.inf:
        raise ValueError(f'lr_multiplier must be a positive finite number, '
                         f'got {lr_multiplier!r}')
    return lr_multiplier


def as_bool_array(allowed, ndim, name):
    """A bool NumPy array of ``ndim`` dims (shape checked against L by ``check_num_labels``),
    or None; TypeError naming ``name`` for anything else."""
    if allowed is None:
        return None
    array = np.asarray(allowed)
    if array.dtype != bool or array.ndim != ndim:
        raise TypeError(f'{name} must be a boolean array with {ndim} dimension(s), got dtype '
                        f'{array.dtype} and shape {array.shape}; for label ids use '
                        f'np.isin(np.arange(num_labels), ids)')
    return array


def set_crf_arguments(layer, lr_multiplier, allowed_transitions, allowed_starts, allowed_ends,
                      boundary_scores):
    """Check a CRF layer's arguments and set them on ``layer`` (constraints as bool arrays of
    2, 1, 1 dims or None; their shapes against L are checked by ``check_num_labels``)."""
    layer.lr_multiplier = check_lr_multiplier(lr_multiplier)
    layer.allowed_transitions = as_bool_array(allowed_transitions, 2, 'allowed_transitions')
    layer.allowed_starts = as_bool_array(allowed_starts, 1, 'allowed_starts')
    layer.allowed_ends = as_bool_array(allowed_ends, 1, 'allowed_ends')
    layer.boundary_scores = bool(boundary_scores)
    layer.supports_masking = True


def check_num_labels(input_shape, layer):
    """The static number of labels L of a CRF's input shape ``(batch, n, L)``, after checking the
    layer's constraint arrays have shapes (L, L), (L,), (L,)."""
    if len(input_shape) != 3:
        raise ValueError(f'ConditionalRandomField takes scores (batch, n, num_labels), one row a '
                         f'position, got shape {tuple(input_shape)}: put it on a sequence output '
                         f'(a Dense over every token), not a pooled one')
    num_labels = input_shape[-1]
    if num_labels is None:
        raise ValueError('ConditionalRandomField needs a static number of labels (last axis)')
    num_labels = int(num_labels)
    for name in CONSTRAINTS:
        shape = (num_labels,) * (2 if name == 'allowed_transitions' else 1)
        _check_mask_array(getattr(layer, name), shape, name)
    return num_labels


def constrained(layer, dtype, backend):
    """``(transitions, start, end)`` of a CRF layer as used in training: its learned ``trans``,
    ``starts``, ``ends`` cast to ``dtype``, disallowed entries ``DISALLOWED_SCORE``; ``start`` /
    ``end`` None when there are neither boundary scores nor constraints on them."""
    result = []
    for learned, name in zip((layer.trans, layer.starts, layer.ends), CONSTRAINTS):
        allowed = getattr(layer, name)
        if learned is not None:
            learned = backend.cast(learned, dtype)
        if allowed is not None:
            base = backend.zeros(allowed.shape, dtype) if learned is None else learned
            learned = backend.where(allowed, base, backend.cast(DISALLOWED_SCORE, dtype))
        result.append(learned)
    return tuple(result)


def crf_config(layer):
    """The CRF arguments of ``layer.get_config()`` (constraints as nested lists)."""
    def listed(array):
        return None if array is None else array.tolist()
    return dict(lr_multiplier=layer.lr_multiplier, boundary_scores=layer.boundary_scores,
                **{name: listed(getattr(layer, name)) for name in CONSTRAINTS})


# ---- GlobalPointer, EfficientGlobalPointer ----

def check_pointer(owner, heads, head_size, rope):
    """``(heads, head_size)`` as ints after checking both are positive ints and, with RoPE,
    ``head_size`` is even; ValueError naming ``owner`` (the layer class) otherwise."""
    for name, value in (('heads', heads), ('head_size', head_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f'{owner}: {name} must be a positive int, got {value!r}')
    if rope and head_size % 2:
        raise ValueError(f'{owner}: RoPE rotates feature pairs, so head_size must be even; '
                         f'got {head_size}')
    return int(heads), int(head_size)


def rope_size(shape):
    """The last dimension ``d`` of a tensor shape that RoPE rotates: static and even."""
    d = shape[-1]
    if d is None or d % 2:
        raise ValueError(f'rotary_position_embedding needs an even, static last dimension; got {d}')
    return d


class PointerRules:
    """What the pointer layers of both Keras versions share that computes no tensor, as a mixin
    before the Keras ``Layer``: the arguments and their checks, the weights, the input / output
    shapes and the config. The layer sets ``initializers`` to its Keras's initializers module.

        >>> class _PointerBase(PointerRules, keras.layers.Layer):
        ...     initializers = keras.initializers
    """
    initializers = None

    def __init__(self, heads, head_size, RoPE=True, use_bias=True, tril_mask=True,
                 kernel_initializer='lecun_normal', **kwargs):
        super().__init__(**kwargs)
        self.heads, self.head_size = check_pointer(type(self).__name__, heads, head_size, RoPE)
        self.RoPE, self.use_bias, self.tril_mask = bool(RoPE), bool(use_bias), bool(tril_mask)
        self.kernel_initializer = self.initializers.get(kernel_initializer)
        self.supports_masking = True

    def _dense_weights(self, name, input_dim, units):
        """A kernel ``(input_dim, units)`` and, with ``use_bias``, a zero bias ``(units,)``."""
        # a fresh initializer per kernel: one Keras initializer reused across weights warns
        # (tf-keras, unseeded) or repeats its draws (Keras 3, seeded)
        initializer = type(self.kernel_initializer).from_config(
            self.kernel_initializer.get_config())
        kernel = self.add_weight(name=f'{name}_kernel', shape=(input_dim, units),
                                 initializer=initializer)
        bias = (self.add_weight(name=f'{name}_bias', shape=(units,), initializer='zeros')
                if self.use_bias else None)
        return kernel, bias

    def _input_dim(self, input_shape):
        """The hidden size of inputs ``(batch, n, hidden)`` (a tuple or a ``tf.TensorShape``)."""
        rank = input_shape.rank if hasattr(input_shape, 'rank') else len(input_shape)
        if rank != 3 or input_shape[-1] is None:
            shown = input_shape if hasattr(input_shape, 'rank') else tuple(input_shape)
            raise ValueError(f'{type(self).__name__} expects inputs (batch, n, hidden) with a '
                             f'known hidden size; got shape {shown}')
        return int(input_shape[-1])

    def compute_mask(self, inputs, mask=None):
        return None          # padding cells already hold -inf

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.heads, input_shape[1], input_shape[1])

    def get_config(self):
        return dict(super().get_config(), heads=self.heads, head_size=self.head_size,
                    RoPE=self.RoPE, use_bias=self.use_bias, tril_mask=self.tril_mask,
                    kernel_initializer=self.initializers.serialize(self.kernel_initializer))


# ---- losses ----

def dice_f1(y_true, predicted, backend):
    """``2 TP / (|true| + |predicted|)`` of float 0/1 tensors of one shape, summed over all
    cells; 1.0 when both are empty. A float32 scalar."""
    total_sum = getattr(backend, 'reduce_sum', None) or backend.sum      # tf / keras.ops
    true_positives = total_sum(y_true * predicted)
    total = total_sum(y_true) + total_sum(predicted)
    return backend.where(total > 0, 2 * true_positives / backend.maximum(total, 1.0), 1.0)


# ---- optimizers ----

def check_learning_rate(learning_rate):
    """ValueError unless ``learning_rate`` is a schedule (callable) or a number > 0."""
    if not callable(learning_rate) and not learning_rate > 0:
        raise ValueError(f'learning_rate must be > 0, got {learning_rate!r}')


def check_adam(learning_rate, beta_1, beta_2, epsilon):
    """ValueError unless the rate is > 0 (or a schedule), the betas in [0, 1), epsilon > 0."""
    check_learning_rate(learning_rate)
    for argument, beta in (('beta_1', beta_1), ('beta_2', beta_2)):
        if not 0 <= beta < 1:
            raise ValueError(f'{argument} must be in [0, 1), got {beta!r}')
    if not epsilon > 0:
        raise ValueError(f'epsilon must be > 0, got {epsilon!r}')


def check_weight_decay(weight_decay_rate, exclude_from_weight_decay):
    """``(rate float >= 0, exclusion regexes tuple)``; one str counts as one pattern."""
    if not weight_decay_rate >= 0:
        raise ValueError(f'weight_decay_rate must be >= 0, got {weight_decay_rate!r}')
    if isinstance(exclude_from_weight_decay, str):
        exclude_from_weight_decay = (exclude_from_weight_decay,)
    exclusions = tuple(exclude_from_weight_decay or ())
    check_patterns(exclusions, 'exclude_from_weight_decay')
    return float(weight_decay_rate), exclusions


def check_lr_multipliers(lr_multipliers):
    """``{regex: float}`` after checking the patterns and that every multiplier is finite, >= 0."""
    lr_multipliers = dict(lr_multipliers or {})
    check_patterns(lr_multipliers, 'lr_multipliers')
    for pattern, multiplier in lr_multipliers.items():
        if not (isinstance(multiplier, numbers.Real) and math.isfinite(multiplier)
                and multiplier >= 0):
            raise ValueError(f'lr_multipliers[{pattern!r}] must be a finite number >= 0, '
                             f'got {multiplier!r}')
    return {pattern: float(m) for pattern, m in lr_multipliers.items()}


def check_schedule(warmup_steps, total_steps, min_lr_ratio):
    """``(warmup_steps, total_steps, min_lr_ratio)`` as int, int or None, float after checking
    ``warmup_steps >= 0``, ``total_steps > warmup_steps`` (or None), ``min_lr_ratio`` in [0, 1]."""
    if not isinstance(warmup_steps, numbers.Integral) or warmup_steps < 0:
        raise ValueError(f'warmup_steps must be an int >= 0, got {warmup_steps!r}')
    if total_steps is not None and (not isinstance(total_steps, numbers.Integral)
                                    or total_steps <= warmup_steps):
        raise ValueError(f'total_steps must be None or an int > warmup_steps '
                         f'({warmup_steps}), got {total_steps!r}')
    if not 0 <= min_lr_ratio <= 1:
        raise ValueError(f'min_lr_ratio must be in [0, 1], got {min_lr_ratio!r}')
    total_steps = None if total_steps is None else int(total_steps)
    return int(warmup_steps), total_steps, float(min_lr_ratio)


def schedule_factor(step, warmup_steps, total_steps, min_lr_ratio, backend):
    """The warmup + linear-decay factor ``s(k)`` at float32 step ``k`` (see
    ``crf_lr.training.optimizers.WarmupLinearDecay``): ``k / warmup_steps`` during the warmup, then
    a linear fall from 1 to ``min_lr_ratio`` at ``total_steps`` (with ``total_steps``), else 1."""
    factor = backend.ones_like(step)
    if total_steps is not None:
        remaining = (total_steps - step) / (total_steps - warmup_steps)
        remaining = backend.minimum(backend.maximum(remaining, 0.0), 1.0)
        factor = min_lr_ratio + (1 - min_lr_ratio) * remaining
    if warmup_steps > 0:
        factor = backend.where(step < warmup_steps, step / warmup_steps, factor)
    return factor
