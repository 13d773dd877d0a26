"""First epoch against a steady one: a ~1,000-sentence synthetic set trained with
``model.train_on_batch`` batch by batch, as ``crf_lr.runs.fit`` does, on the scripts' model
(bert4keras ALBERT-tiny-shaped random encoder, ``crf_lr.heads`` head, Adam).

Epoch 1 pays for tracing Keras's train function and compiling the CRF's XLA program for every new
batch shape; epoch 2 (a new shuffled order of the same batches) runs traced code. The ratio
``epoch 1 / epoch 2`` is what :class:`crf_lr.batching.Batches` ``length_multiple`` is for.

    >>> epoch_times(tf, keras, 'crf', length_multiple=32)['ratio']
"""
import time

import numpy as np

from models import ALBERT_TINY


def synthetic_items(sentences, maxlen, seed=0):
    """``sentences`` Encoded items, [CLS]=2 ... [SEP]=3, lengths 8..maxlen (skewed short, like
    sentences), BIO tags over 3 types as label ids 0..6."""
    from crf_lr.batching import Encoded
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.gamma(2.0, maxlen / 5, sentences).astype(int) + 8, 8, maxlen)
    vocab = ALBERT_TINY['vocab_size']
    return [Encoded([2] + rng.integers(5, vocab, n - 2).tolist() + [3],
                    labels=[0] + rng.integers(0, 7, n - 2).tolist() + [0]) for n in lengths]


def epoch_times(tf, keras, head_name, multiples=(1, 32), epochs=2, layers=4, sentences=1000,
                batch=16, maxlen=128, precision='float32'):
    """Seconds per epoch of one model per ``length_multiple`` in ``multiples``, their epochs
    interleaved (epoch 1 of each, then epoch 2 of each, ...) so that load from other processes
    falls on all; returns one dict per multiple: epoch seconds, epoch 1 / last epoch, and the
    distinct batch shapes of an epoch."""
    from bert4keras.models import build_transformer_model
    from crf_lr.batching import Batches
    from crf_lr.heads import make_head
    from crf_lr.precision import set_precision
    items = synthetic_items(sentences, maxlen)
    runs = []
    for multiple in multiples:
        set_precision(precision)
        keras.utils.set_random_seed(0)
        encoder = build_transformer_model(model='albert',
                                          **dict(ALBERT_TINY, num_hidden_layers=layers))
        head = make_head(head_name, ['A', 'B', 'C'], 'BIO', lr_multiplier=100)
        model = keras.Model(encoder.inputs, head.build(encoder.output))
        model.compile(keras.optimizers.Adam(1e-4), loss=head.loss)
        set_precision('float32')
        batches = Batches(items, batch, maxlen=maxlen, length_multiple=multiple)
        runs.append(dict(model=model, batches=batches, seconds=[], shapes=set()))
    for _ in range(epochs):
        for run in runs:
            epoch = list(run['batches'])
            run['shapes'] |= {b.token_ids.shape for b in epoch}
            started = time.perf_counter()
            for b in epoch:
                run['model'].train_on_batch(b.inputs, b.labels)
            run['seconds'].append(round(time.perf_counter() - started, 2))
    return [dict(head=head_name, length_multiple=multiple, layers=layers, batch=batch,
                 sentences=sentences, maxlen=maxlen, precision=precision,
                 epoch_s=run['seconds'], ratio=round(run['seconds'][0] / run['seconds'][-1], 3),
                 shapes=len(run['shapes']))
            for multiple, run in zip(multiples, runs)]
