"""Checks that make NaN and inf inputs of the layers, losses and decoders raise instead of pass.

In the graph (layers, losses) the checks are behind a switch, on by default: each is one pass
over a head's or loss's input, small next to the encoder's products, and builds its message only
in the failing branch, so a training step costs the same with them as without, to the precision
of a measurement (docs/reliability.md, "The check-numerics switch"). Off, every layer and loss
builds exactly the graph it builds without this module. On, a NaN or inf where none may be
raises ``tf.errors.InvalidArgumentError`` naming the layer or loss, the argument, the first bad
index and the shape. The NumPy decoders (``decode_spans``, ``ConditionalRandomField.decode``)
always check, with ``ValueError``: there it is cheap.

The switch is read when a graph is traced: turn it on before a model is compiled and fitted (a
training function traced earlier keeps the checks it was traced with).

    >>> crf_lr.set_check_numerics(False)                 # graphs traced from now on: no checks
    >>> with crf_lr.set_check_numerics(False): loss = crf.sparse_loss(tags, emissions)

No TensorFlow at import: ``crf_lr.decoding.spans`` uses the NumPy half.
"""
import numpy as np

_enabled = True          # measured free (docs/reliability.md): on unless turned off
_MAX_INDEX = 8          # bad positions shown in a message (a message stays one readable line)


class set_check_numerics:  # noqa: N801 (a function that also works as a context manager)
    """Turn the in-graph NaN / inf checks of the layers and losses on or off (on by default).

    A call sets the switch; used as a context manager it restores the previous setting on exit,
    as ``torch.autograd.set_detect_anomaly`` does.

    Args:
        enabled: bool, check (True) or not (False).

        >>> crf_lr.set_check_numerics(True)                       # before compile / fit
        >>> with crf_lr.set_check_numerics(False): model.predict(x)   # traced without checks
    """

    def __init__(self, enabled=True):
        global _enabled
        self.previous, _enabled = _enabled, bool(enabled)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        global _enabled
        _enabled = self.previous


def check_numerics_enabled():
    """Whether the in-graph checks are on (see :class:`set_check_numerics`)."""
    return _enabled


def _non_finite(values, minus_inf_allowed):
    """Where ``values`` is NaN, +inf, or -inf unless allowed: what a finite check refuses."""
    return ~(np.isfinite(values) | (minus_inf_allowed & np.isneginf(values)))


def _what(minus_inf_allowed):
    return 'NaN or +inf' if minus_inf_allowed else 'NaN or inf'


def require_finite(array, owner, argument, minus_inf_allowed=False):
    """Raise ``ValueError`` if a NumPy ``array`` holds NaN or inf (always: NumPy side).

    Args:
        array: array-like of floats; owner: str, the function or layer named in the message;
        argument: str, the argument's name; minus_inf_allowed: bool, accept ``-inf`` (masked).
    Returns:
        ``np.asarray(array)``.

        >>> scores = require_finite(scores, 'decode_spans', 'scores', minus_inf_allowed=True)
    """
    array = np.asarray(array)
    if array.dtype.kind in 'fc':
        bad = _non_finite(array, minus_inf_allowed)
        if bad.any():
            found = np.argwhere(bad)
            raise ValueError(_message(owner, argument, _what(minus_inf_allowed), len(found),
                                      array.shape, found[:_MAX_INDEX].tolist(),
                                      array[bad][:_MAX_INDEX].tolist()))
    return array


def _message(owner, argument, what, count, shape, first, values, context=''):
    return (f'{owner}: {argument} holds {what} in {count} of its {int(np.prod(shape))} values '
            f'(shape {tuple(shape)}), first at {first} (values {values}){context}')


def guard(tensor, is_bad, owner, argument, what, always=False, context=()):
    """``tensor``, after a check that ``is_bad(tensor)`` (a bool tensor) is False everywhere.

    Only when the switch is on, or ``always``: off, ``tensor`` is returned untouched and
    ``is_bad`` is never called. Eagerly the check raises at once; in a graph it is an ``Assert``
    op that ``tensor`` depends on (the message's indices are computed only when it fails).

    Args:
        tensor: a tensor; is_bad: callable tensor -> bool tensor of its shape; owner, argument:
        str, named in the message; what: str, the fault ('NaN or inf', 'values outside [0, 1]');
        always: check even when the switch is off (for checks that cost nothing);
        context: (label, scalar tensor) pairs added to the message, e.g. ``[('n', n)]``.
    Raises:
        ``tf.errors.InvalidArgumentError``: ``{owner}: {argument} holds {what} ...``, with the
        first bad indices and values (at most 8).

        >>> y_pred = guard(y_pred, tf.math.is_nan, 'my_loss', 'y_pred', 'NaN')
    """
    if not (_enabled or always):
        return tensor
    from crf_lr.compat import tf
    tensor = tf.convert_to_tensor(tensor)
    with tf.name_scope('check_numerics'):
        bad = is_bad(tensor)
        if tf.executing_eagerly():
            if bool(tf.reduce_any(bad)):
                found = tf.where(bad)
                raise tf.errors.InvalidArgumentError(None, None, _message(
                    owner, argument, what, len(found), tensor.shape.as_list(),
                    found[:_MAX_INDEX].numpy().tolist(),
                    tf.gather_nd(tensor, found[:_MAX_INDEX]).numpy().tolist(),
                    ''.join(f'; {label} = {int(value)}' for label, value in context)))
            return tensor
        valid = tf.logical_not(tf.reduce_any(bad))

        def report():                # traced into the failing branch: costs nothing on success
            first = tf.where(bad)[:_MAX_INDEX]
            data = [f'{owner}: {argument} holds {what}; first at', first, 'values',
                    tf.gather_nd(tensor, first), 'of shape', tf.shape(tensor)]
            for label, value in context:
                data += [label, value]
            with tf.control_dependencies([tf.debugging.Assert(valid, data, 4 * _MAX_INDEX)]):
                return tf.identity(valid)
        with tf.control_dependencies([tf.cond(valid, lambda: valid, report)]):
            return tf.identity(tensor)


def guard_finite(tensor, owner, argument, minus_inf_allowed=False):
    """``guard`` against NaN and inf (or only +inf and NaN, when ``-inf`` marks masked cells).

        >>> emissions = guard_finite(emissions, 'crf_log_likelihood', 'emissions', True)
    """
    def is_bad(x):
        from crf_lr.compat import tf
        if not x.dtype.is_floating:
            return tf.zeros_like(x, tf.bool)
        finite = tf.math.is_finite(x)
        return ~(finite | (x < 0)) if minus_inf_allowed else ~finite
    return guard(tensor, is_bad, owner, argument, _what(minus_inf_allowed))
