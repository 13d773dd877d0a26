"""The implementations crf_lr is measured against, behind one calling convention each.

* CRF loss: ``loss(emissions, tags, lengths) -> mean negative log-likelihood`` (a scalar), where
  ``emissions`` is float32 (batch, n, labels), ``tags`` int32 (batch, n) and ``lengths`` int32
  (batch,); padded positions (index >= length) are ignored. Each implementation also lists the
  ``variables`` (the transition matrix) that its gradient is taken with respect to.
* Viterbi: ``decode(emissions, lengths) -> list of int arrays``, one best path per sequence, from
  NumPy emissions (batch, n, labels) to NumPy paths, everything in between included.

TensorFlow Addons 0.23 must be imported before bert4keras: call ``import_tensorflow_addons()``
first thing (see its docstring), then ``from crf_lr.compat import tf``.

    >>> tfa = import_tensorflow_addons()
    >>> losses = crf_losses(transitions)                 # name -> CrfLoss
"""
import importlib
import itertools
import sys
from dataclasses import dataclass, field

import numpy as np


def import_tensorflow_addons():
    """Import TensorFlow Addons 0.23 on TF 2.21 next to bert4keras, in the same process.

    TFA 0.23 imports ``keras.src.engine.keras_tensor``, which Keras 3 no longer has; it is the
    same module as ``tf_keras.src.engine`` (Keras 2, which TFA really uses through ``tf.keras``
    once ``TF_USE_LEGACY_KERAS=1``). Importing TFA leaves Keras 3 in ``sys.modules['keras']``,
    after which bert4keras would build Keras 3 layers, so every ``keras*`` entry is dropped again.
    Must run before anything imports bert4keras or ``crf_lr.compat``.

    Returns the ``tensorflow_addons`` module, or None when it is not installed (``make bench``
    installs it).
    """
    if 'bert4keras' in sys.modules:
        raise RuntimeError('import_tensorflow_addons() must run before bert4keras is imported')
    import crf_lr  # noqa: F401  (TF_USE_LEGACY_KERAS=1, so tf.keras is tf_keras)
    try:
        importlib.import_module('keras')
        sys.modules['keras.src.engine'] = importlib.import_module('tf_keras.src.engine')
        import tensorflow_addons
    except ImportError:
        tensorflow_addons = None
    for name in [m for m in sys.modules if m == 'keras' or m.startswith('keras.')]:
        del sys.modules[name]
    return tensorflow_addons


@dataclass
class CrfLoss:
    """A CRF loss under test: ``fn(emissions, tags, lengths)`` returns the mean NLL (tf scalar);
    ``variables`` are the tf.Variables (transitions) it is differentiated with respect to;
    ``exact`` is False for a loss that is not the CRF likelihood (softmax cross-entropy)."""
    fn: callable
    variables: list = field(default_factory=list)
    exact: bool = True


def lengths_mask(tf, lengths, n):
    """Bool mask (batch, n): True where position < length."""
    return tf.sequence_mask(lengths, n)


def bert4keras_crf_losses(tf, transitions):
    """bert4keras's ``ConditionalRandomField.dense_loss`` and ``sparse_loss`` as CrfLoss objects.

    bert4keras reads the mask from ``-inf`` emissions (what its layer's ``call`` outputs), so the
    padded positions are set to ``-inf`` inside the timed function, and dense_loss gets one-hot
    tags built there too (a model using dense_loss would receive them from the data pipeline).
    """
    from bert4keras.layers import ConditionalRandomField
    layer = ConditionalRandomField()
    layer.build((None, None, transitions.shape[0]))
    layer._trans.assign(transitions)

    def masked(emissions, lengths):
        mask = lengths_mask(tf, lengths, tf.shape(emissions)[1])[:, :, None]
        return tf.where(mask, emissions, -np.inf)

    def sparse(emissions, tags, lengths):
        return tf.reduce_mean(layer.sparse_loss(tags, masked(emissions, lengths)))

    def dense(emissions, tags, lengths):
        one_hot = tf.one_hot(tags, transitions.shape[0])
        return tf.reduce_mean(layer.dense_loss(one_hot, masked(emissions, lengths)))

    return {'bert4keras sparse_loss': CrfLoss(sparse, [layer._trans]),
            'bert4keras dense_loss': CrfLoss(dense, [layer._trans])}


def tfa_crf_loss(tf, tfa, transitions):
    """TensorFlow Addons' ``crf_log_likelihood`` (sequence lengths, no start/end scores)."""
    variable = tf.Variable(transitions, name='tfa_transitions')

    def loss(emissions, tags, lengths):
        log_likelihood, _ = tfa.text.crf_log_likelihood(emissions, tags, lengths, variable)
        return -tf.reduce_mean(log_likelihood)

    return CrfLoss(loss, [variable])


def token_cross_entropy(tf, tags, logits, mask):
    """Softmax cross-entropy of int ``tags`` (batch, n) under ``logits`` (batch, n, labels),
    summed over the positions where the bool ``mask`` (batch, n) is True: (batch,)."""
    logits = tf.cast(logits, 'float32')           # bf16 logits (mixed precision): float32 loss
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(tags, logits)
    return tf.reduce_sum(xent * tf.cast(mask, xent.dtype), axis=1)


def softmax_loss(tf):
    """Token-level softmax cross-entropy on the same emissions, summed over the valid positions
    of each sequence and averaged over the batch (the cost a CRF is compared with)."""
    def loss(emissions, tags, lengths):
        mask = lengths_mask(tf, lengths, tf.shape(emissions)[1])
        return tf.reduce_mean(token_cross_entropy(tf, tags, emissions, mask))

    return CrfLoss(loss, [], exact=False)


def bert4keras_viterbi(transitions):
    """bert4keras's ``ViterbiDecoder``, one sequence at a time (its only mode)."""
    from bert4keras.snippets import ViterbiDecoder
    decoder = ViterbiDecoder(np.asarray(transitions, dtype=np.float64))

    def decode(emissions, lengths):
        return [decoder.decode(emissions[i, :length].copy()) for i, length in enumerate(lengths)]

    return decode


def tfa_viterbi(tf, tfa, transitions):
    """TensorFlow Addons' ``crf_decode`` inside a ``tf.function`` (a graph)."""
    trans = tf.constant(transitions, tf.float32)
    graph = tf.function(lambda e, lens: tfa.text.crf_decode(e, trans, lens)[0])

    def decode(emissions, lengths):
        tags = graph(tf.constant(emissions), tf.constant(lengths, tf.int32)).numpy()
        return [tags[i, :length] for i, length in enumerate(lengths)]

    return decode


def brute_force_paths(emissions, transitions, lengths):
    """Best paths by enumerating every label sequence (the oracle; only for short sequences).

    Args: emissions float (batch, n, labels); transitions float (labels, labels); lengths ints.
    Returns: list of int arrays, one per sequence.
    """
    labels = transitions.shape[0]
    paths = []
    for sequence, length in zip(emissions, lengths):
        candidates = np.array(list(itertools.product(range(labels), repeat=int(length))))
        scores = sequence[np.arange(length), candidates].sum(1)
        scores += transitions[candidates[:, :-1], candidates[:, 1:]].sum(1)
        paths.append(candidates[scores.argmax()])
    return paths
