"""A tiny BERT (no dropout) under each head of ``crf_lr.model.heads`` and batches of random
sentences of several shapes: the cases of the training-step tests (tests/training/test_runs.py,
tests/training/test_distribute.py).

    >>> model, head = head_model('crf')
    >>> losses = list(train_steps(model, random_batches(head, sentences=14, batch_size=4)))
"""
import numpy as np

import crf_lr  # noqa: F401  (environment before TensorFlow)

BUILT_IN_HEADS = ('crf', 'softmax', 'global_pointer', 'efficient_global_pointer')
CONFIG = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=32, hidden_act='gelu', max_position_embeddings=64,
              type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def head_model(head_name, seed=0):
    """``(model, head)``: the tiny BERT with the head, compiled with Adam; the same ``seed`` gives
    the same weights. Call it inside ``strategy.scope()`` to train on a strategy's replicas."""
    from bert4keras.models import build_transformer_model

    from crf_lr.compat import keras
    from crf_lr.model.heads import make_head, piece_states
    keras.utils.set_random_seed(seed)
    bert = build_transformer_model(**CONFIG)
    head = make_head(head_name, ['A', 'B'], 'BIO', lr_multiplier=10, head_size=8)
    model = keras.Model(bert.inputs, head.build(piece_states(bert)))
    model.compile(keras.optimizers.legacy.Adam(1e-2), loss=head.loss, metrics=head.metrics)
    return model, head


def random_batches(head, sentences, batch_size, seed=0):
    """One epoch of ``crf_lr.training.loop.epoch_batches`` over ``sentences`` random sentences of
    1-18 tokens with one random entity each: length-bucketed, the smaller batch first."""
    from crf_lr.training.loop import epoch_batches
    from crf_lr.data.tagging import spans_to_tags
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(sentences):
        length = int(rng.integers(1, 19))
        start = int(rng.integers(0, length))
        spans = [(start, min(length, start + int(rng.integers(1, 3))), 'AB'[start % 2])]
        tokens = [2] + rng.integers(5, CONFIG['vocab_size'], length).tolist() + [3]
        samples.append((tokens, head.target(spans_to_tags(spans, length), spans,
                                            list(range(length + 1)))))
    return epoch_batches(samples, batch_size, seed, 0, head)
