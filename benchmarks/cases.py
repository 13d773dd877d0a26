"""The CRF-loss and Viterbi comparisons: inputs, implementations, correctness checks, timings.

Every comparison first checks that the implementations agree on the very inputs it then times
(losses, gradients and decoded paths; a brute-force oracle for Viterbi on short sequences) and
raises ``AssertionError`` before timing anything if they do not.

    >>> tf, tfa = load_tensorflow()
    >>> case = crf_loss_case(tf, tfa, n=256, labels=7, rounds=20)
"""
import numpy as np

import peers
from timing import interleaved, ratio_summary

CRF_BATCH = 32
LOSS_RTOL = 1e-4          # relative error allowed on a mean loss (float32 arithmetic)
GRAD_TOL = 1e-3           # max |g - g_ref| / max(1, max |g_ref|) allowed on every gradient
# Also timed with the whole loss + gradient compiled by XLA (TFA's crf_log_likelihood is not
# compilable: XLA has no kernel for the FakeParam op of its tf.cond).
XLA_COMPILED = ('crf_lr sparse_loss', 'bert4keras sparse_loss', 'softmax cross-entropy')
XLA = ' [XLA]'
# crf_lr's losses run their forward-backward pass as one CPU kernel under a tape (where it is
# built: the case's 'kernels' line); its sparse loss is also traced with the kernels off, the
# pass compiled by XLA (use_xla(True)) and as TensorFlow's ops (use_xla(False))
KERNELS_OFF = {' [XLA pass]': True, ' [TensorFlow ops]': False}
# The headline ratios of a CRF-loss case: label -> (numerator, denominator) implementations
CRF_RATIOS = {
    'bert4keras sparse / crf_lr sparse': ('bert4keras sparse_loss', 'crf_lr sparse_loss'),
    'bert4keras dense / crf_lr dense': ('bert4keras dense_loss', 'crf_lr dense_loss'),
    'crf_lr sparse / softmax': ('crf_lr sparse_loss', 'softmax cross-entropy'),
    'TFA / crf_lr sparse': ('TFA crf_log_likelihood', 'crf_lr sparse_loss'),
    'XLA: bert4keras sparse / crf_lr sparse': ('bert4keras sparse_loss' + XLA,
                                               'crf_lr sparse_loss' + XLA),
    'XLA: crf_lr sparse / softmax': ('crf_lr sparse_loss' + XLA, 'softmax cross-entropy' + XLA),
    'crf_lr sparse: XLA pass / one kernel': ('crf_lr sparse_loss [XLA pass]',
                                             'crf_lr sparse_loss'),
    'crf_lr sparse: TensorFlow ops / one kernel': ('crf_lr sparse_loss [TensorFlow ops]',
                                                   'crf_lr sparse_loss')}


def load_tensorflow():
    """TensorFlow (through crf_lr.compat, with the bert4keras fixes) and TensorFlow Addons
    (None when not installed), imported in the order that lets them live in one process."""
    tfa = peers.import_tensorflow_addons()
    from crf_lr.compat import tf
    return tf, tfa


def random_lengths(rng, batch, low, high):
    """int32 lengths uniform in [low, high], the first one equal to ``high`` (the padded width)."""
    lengths = rng.integers(low, high + 1, size=batch).astype(np.int32)
    lengths[0] = high
    return lengths


def crf_inputs(rng, batch, n, labels):
    """Random float32 emissions (batch, n, labels), int32 tags (batch, n), int32 lengths in
    [n/2, n] (padding after them) and float32 transitions (labels, labels)."""
    emissions = rng.normal(size=(batch, n, labels)).astype(np.float32)
    tags = rng.integers(0, labels, size=(batch, n)).astype(np.int32)
    lengths = random_lengths(rng, batch, max(1, n // 2), n)
    transitions = rng.normal(scale=0.5, size=(labels, labels)).astype(np.float32)
    return emissions, tags, lengths, transitions


def crf_lr_losses(tf, transitions):
    """crf_lr's ``ConditionalRandomField.sparse_loss`` and ``dense_loss``, used as in a model: the
    layer's ``call`` turns the padding (Keras mask) into ``-inf`` rows, the loss reads them."""
    from crf_lr.model.crf import ConditionalRandomField
    layer = ConditionalRandomField()
    layer.build((None, None, transitions.shape[0]))
    layer._trans.assign(transitions)

    def output(emissions, lengths):
        return layer(emissions, mask=peers.lengths_mask(tf, lengths, tf.shape(emissions)[1]))

    def sparse(emissions, tags, lengths):
        return tf.reduce_mean(layer.sparse_loss(tags, output(emissions, lengths)))

    def dense(emissions, tags, lengths):
        one_hot = tf.one_hot(tags, transitions.shape[0])
        return tf.reduce_mean(layer.dense_loss(one_hot, output(emissions, lengths)))

    return {'crf_lr sparse_loss': peers.CrfLoss(sparse, [layer._trans]),
            'crf_lr dense_loss': peers.CrfLoss(dense, [layer._trans])}


def crf_loss_implementations(tf, tfa, transitions):
    """name -> CrfLoss for every implementation compared (TFA only when installed)."""
    implementations = crf_lr_losses(tf, transitions)
    implementations.update(peers.bert4keras_crf_losses(tf, transitions))
    if tfa is not None:
        implementations['TFA crf_log_likelihood'] = peers.tfa_crf_loss(tf, tfa, transitions)
    implementations['softmax cross-entropy'] = peers.softmax_loss(tf)
    return implementations


def loss_and_gradient(tf, implementation, jit_compile=False):
    """A ``tf.function`` (emissions, tags, lengths) -> (loss, [d loss / d emissions, d loss / d
    each variable]): what one training step asks of the loss. ``jit_compile=True`` compiles the
    whole function with XLA (as ``model.compile(jit_compile=True)`` would)."""
    @tf.function(jit_compile=jit_compile)
    def step(emissions, tags, lengths):
        with tf.GradientTape() as tape:
            tape.watch(emissions)
            loss = implementation.fn(emissions, tags, lengths)
        return loss, tape.gradient(loss, [emissions] + implementation.variables)
    return step


def traced_without_kernels(tf, implementation, args, xla):
    """:func:`loss_and_gradient` traced for ``args`` with crf_lr's kernels off: the CRF's
    forward-backward pass compiled by XLA (``xla``) or TensorFlow's ops."""
    from crf_lr.model.crf import use_xla
    from crf_lr.speed.fused_kernels import fused_kernels
    step = loss_and_gradient(tf, implementation)
    with use_xla(xla), fused_kernels(False):
        step.get_concrete_function(*args)
    return step


def check_crf_losses(results, lengths):
    """Check that every exact implementation gives the reference's loss and gradients.

    Args:
        results: dict name -> (loss, gradients) as NumPy values (from ``loss_and_gradient``),
            the first entry being the reference.
        lengths: int array (batch,); emission gradients are compared at real positions only.
    Returns:
        dict name -> {'loss_rel_err', 'grad_err'} (floats) for every compared implementation.
    Raises:
        AssertionError naming the implementation and the error when a tolerance is exceeded.
    """
    (ref_name, (ref_loss, ref_grads)), *others = results.items()
    n = ref_grads[0].shape[1]
    valid = (np.arange(n)[None, :] < np.asarray(lengths)[:, None])[..., None]
    errors = {}
    for name, (loss, grads) in others:
        loss_err = abs(float(loss) - float(ref_loss)) / max(1.0, abs(float(ref_loss)))
        grad_err = 0.0
        for i, (grad, ref) in enumerate(zip(grads, ref_grads)):
            grad, ref = np.asarray(grad), np.asarray(ref)
            if i == 0:
                grad, ref = grad * valid, ref * valid
            grad_err = max(grad_err, float(np.abs(grad - ref).max() / max(1.0, np.abs(ref).max())))
        errors[name] = {'loss_rel_err': loss_err, 'grad_err': grad_err}
        if loss_err > LOSS_RTOL or grad_err > GRAD_TOL:
            raise AssertionError(f'{name} disagrees with {ref_name}: loss {float(loss)!r} vs '
                                 f'{float(ref_loss)!r} (relative error {loss_err:.2e}), gradient '
                                 f'error {grad_err:.2e} (tolerances {LOSS_RTOL}, {GRAD_TOL})')
    return errors


def crf_loss_case(tf, tfa, n, labels, rounds, seed=0):
    """Check, then time, CRF NLL + gradient for one shape (batch 32, float32).

    Returns a results dict: ``name``, ``shape``, per-implementation timing summaries
    (``timings``), ``check`` errors, and the per-round ratios ``peer / crf_lr`` (and crf_lr /
    softmax): :func:`crf_loss_ratios`.
    """
    rng = np.random.default_rng(seed)
    emissions, tags, lengths, transitions = crf_inputs(rng, CRF_BATCH, n, labels)
    implementations = crf_loss_implementations(tf, tfa, transitions)
    args = (tf.constant(emissions), tf.constant(tags), tf.constant(lengths))
    steps = {name: loss_and_gradient(tf, impl) for name, impl in implementations.items()}
    for name in XLA_COMPILED:
        implementations[name + XLA] = implementations[name]
        steps[name + XLA] = loss_and_gradient(tf, implementations[name], jit_compile=True)
    for suffix, xla in KERNELS_OFF.items():
        implementations['crf_lr sparse_loss' + suffix] = implementations['crf_lr sparse_loss']
        steps['crf_lr sparse_loss' + suffix] = traced_without_kernels(
            tf, implementations['crf_lr sparse_loss'], args, xla)
    outputs = {name: steps[name](*args) for name in steps}
    check = check_crf_losses({name: (loss.numpy(), [g.numpy() for g in grads])
                              for name, (loss, grads) in outputs.items()
                              if implementations[name].exact}, lengths)
    timings = interleaved({name: (lambda s=step: s(*args)[0].numpy())
                           for name, step in steps.items()}, rounds=rounds)
    from crf_lr.speed.fused_kernels import status
    return {'name': 'crf_loss_and_gradient', 'kernels': status(),
            'shape': {'batch': CRF_BATCH, 'n': n, 'labels': labels},
            'timings': timings, 'check': check, 'ratios': crf_loss_ratios(timings)}


def crf_loss_ratios(timings):
    """The headline ratios (``CRF_RATIOS``) of one CRF-loss case, each the ``ratio_summary`` of
    its per-round ratios in ``timings`` (``interleaved`` results); only those whose two sides
    were timed (TFA's where it is installed, one kernel's in runs since it exists).

        >>> crf_loss_ratios(case['timings'])['TFA / crf_lr sparse']['median']
    """
    return {label: ratio_summary(timings, *pair) for label, pair in CRF_RATIOS.items()
            if pair[0] in timings and pair[1] in timings}


def viterbi_ratios(timings):
    """``peer / crf_lr decoder`` per-round ratio summaries of every peer to every crf_lr decoder.

        >>> viterbi_ratios(case['timings'])['TFA crf_decode (graph) / crf_lr in-graph']['max']
    """
    return {f'{peer} / {ours}': ratio_summary(timings, peer, ours)
            for peer in timings if not peer.startswith('crf_lr')
            for ours in timings if ours.startswith('crf_lr')}


def crf_lr_viterbi_decoders(tf, transitions):
    """crf_lr's NumPy ``viterbi_decode`` and in-graph ``viterbi_decode_tf`` (in a tf.function)."""
    from crf_lr.decoding.viterbi import viterbi_decode, viterbi_decode_tf
    trans = tf.constant(transitions)
    graph = tf.function(lambda e, lens: viterbi_decode_tf(e, trans, lengths=lens))

    def numpy_decode(emissions, lengths):
        return viterbi_decode(emissions, transitions, lengths=lengths)

    def graph_decode(emissions, lengths):
        tags = graph(tf.constant(emissions), tf.constant(lengths)).numpy()
        return [tags[i, :length] for i, length in enumerate(lengths)]

    return {'crf_lr NumPy': numpy_decode, 'crf_lr in-graph': graph_decode}


def viterbi_decoders(tf, tfa, transitions):
    """name -> decode(emissions, lengths) for every Viterbi implementation compared."""
    decoders = crf_lr_viterbi_decoders(tf, transitions)
    if tfa is not None:
        decoders['TFA crf_decode (graph)'] = peers.tfa_viterbi(tf, tfa, transitions)
    decoders['bert4keras ViterbiDecoder'] = peers.bert4keras_viterbi(transitions)
    return decoders


def check_viterbi(decoders, emissions, lengths, oracle=None):
    """Check that every decoder returns the same paths (and the oracle's, when given).

    Args:
        decoders: dict name -> decode(emissions, lengths) returning a list of int arrays.
        emissions: float32 array (batch, n, labels); lengths: int array (batch,).
        oracle: optional list of the true best paths.
    Returns:
        The number of sequences checked (int).
    Raises:
        AssertionError naming the decoder and the first sequence where it differs.
    """
    reference_name = 'oracle' if oracle is not None else next(iter(decoders))
    reference = oracle if oracle is not None else decoders[reference_name](emissions, lengths)
    for name, decode in decoders.items():
        paths = decode(emissions, lengths)
        for i, (path, expected) in enumerate(zip(paths, reference, strict=True)):
            if not np.array_equal(np.asarray(path), np.asarray(expected)):
                raise AssertionError(f'Viterbi: {name} differs from {reference_name} on sequence '
                                     f'{i} (length {lengths[i]}): {list(path)} vs {list(expected)}')
    return len(reference)


def viterbi_case(tf, tfa, rounds, batch=256, low=64, high=128, labels=7, seed=0):
    """Check, then time, Viterbi decoding of ``batch`` sequences of lengths in [low, high].

    Returns a results dict with per-decoder timings (ms per batch), throughput (sequences / s),
    the number of sequences checked, and the per-round ratios ``peer / crf_lr``
    (:func:`viterbi_ratios`).
    """
    rng = np.random.default_rng(seed)
    emissions = rng.normal(size=(batch, high, labels)).astype(np.float32)
    lengths = random_lengths(rng, batch, low, high)
    transitions = rng.normal(scale=0.5, size=(labels, labels)).astype(np.float32)
    decoders = viterbi_decoders(tf, tfa, transitions)
    short = rng.normal(size=(16, 5, labels)).astype(np.float32)
    short_lengths = np.array([1 + i % 5 for i in range(16)], dtype=np.int32)
    checked = check_viterbi(decoders, short, short_lengths,
                            oracle=peers.brute_force_paths(short, transitions, short_lengths))
    checked += check_viterbi(decoders, emissions, lengths)
    timings = interleaved({name: (lambda d=decode: d(emissions, lengths))
                           for name, decode in decoders.items()}, rounds=rounds)
    for t in timings.values():
        t['sequences_per_s'] = round(batch / (t['median_ms'] * 1e-3), 1)
    return {'name': 'viterbi', 'shape': {'batch': batch, 'lengths': [low, high], 'labels': labels},
            'timings': timings, 'sequences_checked': checked, 'ratios': viterbi_ratios(timings)}
