"""Whole training steps: a randomly initialised ALBERT-tiny-sized bert4keras encoder, each head.

The encoder is bert4keras's ``albert`` with the configuration of ALBERT-tiny (zh): hidden 312,
12 attention heads, intermediate 1248, embedding 128, vocabulary 21,128, no dropout; 4 layers
(ALBERT-tiny) or 1 (the CRF learning-rate experiment's setting). ALBERT shares one layer's weights
across depth, but the arithmetic per layer is that of an unshared layer.

Heads (7 tags = BIO over 3 entity types; the pointer heads score the 3 types):

* ``softmax``: Dense(7) + token-level softmax cross-entropy over real tokens.
* ``CRF (crf_lr)`` / ``CRF (bert4keras)``: Dense(7) + the CRF layer (lr_multiplier 100) and its
  ``sparse_loss``.
* ``GlobalPointer`` / ``EfficientGlobalPointer`` (crf_lr.model.global_pointer, head_size 64) with
  the dense loss (targets (batch, 3, n, n)) or the sparse one (targets (batch, 3, 8, 2)).

One step = forward + loss + backward + ``LayerwiseAdam`` update, in a ``tf.function`` traced for
its input shape.

    >>> heads = build_heads(tf, keras, layers=4); batch = random_batch(rng, 16, 128)
    >>> train_step(tf, heads['softmax'])(*step_arguments(tf, heads['softmax'], batch))
"""
import contextlib

import numpy as np

import peers

ALBERT_TINY = dict(vocab_size=21128, embedding_size=128, hidden_size=312, num_hidden_layers=4,
                   num_attention_heads=12, intermediate_size=1248, hidden_act='gelu',
                   max_position_embeddings=512, type_vocab_size=2, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0)
NUM_TAGS = 7
NUM_TYPES = 3
HEAD_SIZE = 64
MAX_ENTITIES = 8
CRF_LR_MULTIPLIER = 100
HEADS = ('softmax', 'CRF (crf_lr)', 'CRF (bert4keras)', 'GlobalPointer dense',
         'GlobalPointer sparse', 'EfficientGlobalPointer dense', 'EfficientGlobalPointer sparse')


class HeadModel:
    """A Keras model (token_ids, segment_ids) -> head output, its loss ``loss(y, output, mask)``
    returning (batch,), the kind of targets it takes (``'tags'``, ``'dense'``, ``'sparse'``),
    and its own optimizer (crf_lr's ``LayerwiseAdam``, the scripts' optimizer)."""

    def __init__(self, model, loss, targets, optimizer):
        self.model, self.loss, self.targets, self.optimizer = model, loss, targets, optimizer


def build_head(tf, keras, head, layers, encoder='albert'):
    """One HeadModel: a fresh random encoder of ``layers`` layers under ``head`` (one of HEADS);
    ``encoder``: the bert4keras model kind of ALBERT-tiny's sizes (``'albert'``, or e.g.
    ``'nezha'``, whose attention adds relative positions, with one embedding mapping)."""
    from bert4keras.layers import ConditionalRandomField as Bert4kerasCRF
    from bert4keras.models import build_transformer_model
    from crf_lr.model.crf import ConditionalRandomField
    from crf_lr.model.global_pointer import EfficientGlobalPointer, GlobalPointer
    from crf_lr.model.losses import global_pointer_crossentropy, sparse_global_pointer_crossentropy
    from crf_lr.training.optimizers import LayerwiseAdam

    encoder = build_transformer_model(model=encoder,
                                      **dict(ALBERT_TINY, num_hidden_layers=layers))
    hidden = encoder.output
    if head == 'softmax':
        output, targets = keras.layers.Dense(NUM_TAGS)(hidden), 'tags'

        def loss(y, out, mask):
            return peers.token_cross_entropy(tf, y, out, mask)
    elif head.startswith('CRF'):
        crf_class = ConditionalRandomField if head == 'CRF (crf_lr)' else Bert4kerasCRF
        crf = crf_class(lr_multiplier=CRF_LR_MULTIPLIER)
        output, targets = crf(keras.layers.Dense(NUM_TAGS)(hidden)), 'tags'

        def loss(y, out, mask):
            return crf.sparse_loss(y, out)
    else:
        pointer = GlobalPointer if head.startswith('GlobalPointer') else EfficientGlobalPointer
        output = pointer(heads=NUM_TYPES, head_size=HEAD_SIZE)(hidden)
        targets = 'dense' if head.endswith('dense') else 'sparse'
        pointer_loss = {'dense': global_pointer_crossentropy,
                        'sparse': sparse_global_pointer_crossentropy}[targets]

        def loss(y, out, mask):
            return pointer_loss(y, out)
    model = keras.Model(encoder.inputs, output)
    return HeadModel(model, loss, targets, LayerwiseAdam(1e-4))


def build_head_in(tf, keras, head, layers, precision, encoder='albert'):
    """:func:`build_head` (random seed 0) under ``precision``
    (``crf_lr.model.precision.set_precision``: 'float32' or 'mixed_bfloat16'); float32 is set again
    afterwards.

        >>> head_model = build_head_in(tf, keras, 'CRF (crf_lr)', 4, 'mixed_bfloat16')
    """
    from crf_lr.model.precision import set_precision
    set_precision(precision)
    keras.utils.set_random_seed(0)
    try:
        return build_head(tf, keras, head, layers, encoder)
    finally:
        set_precision('float32')


def build_heads(tf, keras, layers, heads=HEADS):
    """dict head name -> HeadModel, each with its own encoder of ``layers`` layers."""
    return {head: build_head(tf, keras, head, layers) for head in heads}


def train_step(tf, head_model, jit_compile=False):
    """A ``tf.function`` (token_ids, segment_ids, targets) -> mean loss that also applies one
    optimizer update to every trainable weight of the model (``jit_compile``: the whole step
    XLA-compiled)."""
    model, loss_fn, optimizer = head_model.model, head_model.loss, head_model.optimizer

    @tf.function(jit_compile=jit_compile)
    def step(token_ids, segment_ids, targets):
        with tf.GradientTape() as tape:
            output = model([token_ids, segment_ids], training=True)
            loss = tf.reduce_mean(loss_fn(targets, output, token_ids > 0))
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss
    return step


def random_batch(rng, batch, n):
    """Token ids (batch, n) with lengths in [n/2, n] (0 = padding), segment ids, BIO tags (batch,
    n), and the same entities (up to MAX_ENTITIES per sequence, 1-4 tokens, 3 types) as dense
    (batch, 3, n, n) float32 and sparse (batch, 3, MAX_ENTITIES, 2) int32 (-1 = empty) targets."""
    lengths = rng.integers(n // 2, n + 1, size=batch)
    lengths[0] = n
    token_ids = rng.integers(1, ALBERT_TINY['vocab_size'], size=(batch, n)).astype(np.int32)
    token_ids[np.arange(n)[None, :] >= lengths[:, None]] = 0
    tags = np.zeros((batch, n), np.int32)
    dense = np.zeros((batch, NUM_TYPES, n, n), np.float32)
    sparse = -np.ones((batch, NUM_TYPES, MAX_ENTITIES, 2), np.int32)
    for b, length in enumerate(lengths):
        slot = np.zeros(NUM_TYPES, int)
        starts = np.arange(0, length - 3, 5)
        for start in rng.choice(starts, min(MAX_ENTITIES, starts.size), replace=False):
            end, kind = start + rng.integers(0, 4), rng.integers(NUM_TYPES)
            tags[b, start], tags[b, start + 1:end + 1] = 1 + 2 * kind, 2 + 2 * kind
            dense[b, kind, start, end] = 1
            sparse[b, kind, slot[kind]] = start, end
            slot[kind] += 1
    return {'token_ids': token_ids, 'segment_ids': np.zeros_like(token_ids), 'tags': tags,
            'dense': dense, 'sparse': sparse}


def step_arguments(tf, head_model, batch):
    """The tensors (token_ids, segment_ids, targets) of ``batch`` for this head."""
    return (tf.constant(batch['token_ids']), tf.constant(batch['segment_ids']),
            tf.constant(batch[head_model.targets]))


def probe_step(tf, keras, head, precision, building=contextlib.nullcontext,
               tracing=contextlib.nullcontext, encoder='albert'):
    """The probes' step: ``head`` at 4 layers (seed 0, ``encoder``: :func:`build_head`'s) under
    ``precision``, built inside
    ``building()`` and traced inside ``tracing()`` (context manager factories), on the batch
    ``random_batch(default_rng(128), 32, 128)``. Returns (the first step's loss, a zero-argument
    callable running one more step and waiting for it).

        >>> loss, step = probe_step(tf, keras, 'CRF (crf_lr)', 'float32',
        ...                         tracing=lambda: fused_adam(False))
    """
    data = random_batch(np.random.default_rng(128), 32, 128)
    with building():
        head_model = build_head_in(tf, keras, head, 4, precision, encoder)
    step = train_step(tf, head_model)
    arguments = step_arguments(tf, head_model, data)
    with tracing():
        loss = float(step(*arguments).numpy())                  # traced here
    return loss, lambda: step(*arguments).numpy()


def encoder_flops(layers, batch, n, hidden=ALBERT_TINY['hidden_size'],
                  intermediate=ALBERT_TINY['intermediate_size'],
                  embedding=ALBERT_TINY['embedding_size']):
    """Arithmetic of one training step of the encoder (+ a Dense(7) head), in FLOPs:

        6 x P x T  +  12 x layers x hidden x n x T

    with T = batch x n tokens (padding included: it is computed) and P the weights used in
    matrix products per token: layers x (4 hidden^2 + 2 hidden intermediate) + embedding x hidden
    (ALBERT's factorised projection) + hidden x 7. Forward is 2 FLOPs per weight per token,
    backward twice that; attention adds 2 x 2 x n x hidden per token per layer (scores and
    weighted values) forward, x3 with backward. Embedding look-ups, softmax, layer norm, GELU
    and the optimizer are not counted (they are not matrix products).
    """
    tokens = batch * n
    params = layers * (4 * hidden ** 2 + 2 * hidden * intermediate) + embedding * hidden \
        + hidden * NUM_TAGS
    return 6 * params * tokens + 12 * layers * hidden * n * tokens
