"""First epoch against a steady one: a ~1,000-sentence synthetic set trained batch by batch on the
scripts' model (bert4keras ALBERT-tiny-shaped random encoder, ``crf_lr.model.heads`` head,
``LayerwiseAdam``), with ``crf_lr.training.loop.train_steps`` (what ``crf_lr.training.loop.fit``
runs: Keras's train function traced once for batches of every shape, fed from ``tf.data``) or with
plain ``model.train_on_batch`` (traced for the first batch's exact shape, twice: once creating the
optimiser's variables, then once more with generalised shapes: 3 traces).

Epoch 1 pays for tracing Keras's train function and, with ``--crf-xla`` where the CRF's CPU
kernel does not run (``CRF_LR_FUSED_KERNELS=0``, no compiler), for compiling the CRF's XLA
program once per (batch, length bucket); epoch 2 (a new shuffled order of the same batches) runs
traced and compiled code.
Each configuration runs in a fresh process.

    $ python benchmarks/epochs.py --head crf --length-multiple 1     # one JSON line
    $ python benchmarks/epochs.py --head crf --step train_on_batch
    $ CRF_LR_SHARED_LAYER_TRACES=0 python benchmarks/epochs.py --head crf   # every layer traced
    $ CRF_LR_FUSED_KERNELS=0 python benchmarks/epochs.py --head crf --crf-xla   # the CRF in XLA
    $ python benchmarks/epochs.py --step train_on_batch --unused-generator
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np

import crf_lr  # noqa: F401,E402  (environment before TensorFlow)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import ALBERT_TINY  # noqa: E402


def synthetic_items(sentences, maxlen, seed=0):
    """``sentences`` Encoded items, [CLS]=2 ... [SEP]=3, lengths 8..maxlen (skewed short, like
    sentences), BIO tags over 3 types as label ids 0..6."""
    from crf_lr.data.batching import Encoded
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.gamma(2.0, maxlen / 5, sentences).astype(int) + 8, 8, maxlen)
    vocab = ALBERT_TINY['vocab_size']
    return [Encoded([2] + rng.integers(5, vocab, n - 2).tolist() + [3],
                    labels=[0] + rng.integers(0, 7, n - 2).tolist() + [0]) for n in lengths]


def scripts_model(keras, head_name, layers, jit_compile=False):
    """The scripts' model, compiled as they compile it: a random bert4keras ALBERT-tiny-shaped
    encoder of ``layers`` layers (seed 0), a ``crf_lr.model.heads`` head over 3 BIO types (the CRF's
    rate x100) and ``LayerwiseAdam(1e-4)``; ``jit_compile``: the whole step XLA-compiled.

        >>> model = scripts_model(keras, 'crf', layers=4)
    """
    from bert4keras.models import build_transformer_model
    from crf_lr.model.heads import make_head
    from crf_lr.training.optimizers import LayerwiseAdam
    keras.utils.set_random_seed(0)
    encoder = build_transformer_model(model='albert', **dict(ALBERT_TINY, num_hidden_layers=layers))
    head = make_head(head_name, ['A', 'B', 'C'], 'BIO', lr_multiplier=100)
    model = keras.Model(encoder.inputs, head.build(encoder.output))
    model.compile(LayerwiseAdam(1e-4), loss=head.loss, jit_compile=jit_compile)
    return model


def first_shapes_excess(timed):
    """Seconds epoch 1's steps after step 1 took beyond the same batch shapes' median step in
    later epochs (``timed``: per epoch, a (shape, seconds) pair per step), over the shapes a
    later epoch ran; None with one epoch. Per-shape costs (each shape's first run) and a
    slower phase of the machine both show here; step 1 is ``first_steps_s[0]``.

        >>> first_shapes_excess([[((2, 5), 3.0), ((2, 7), 0.5)], [((2, 7), 0.25)]])   # 0.25
    """
    later = {}
    for epoch in timed[1:]:
        for shape, seconds in epoch:
            later.setdefault(shape, []).append(seconds)
    if not later:
        return None
    return round(sum(seconds - float(np.median(later[shape]))
                     for shape, seconds in timed[0][1:] if shape in later), 2)


def epoch_times(tf, keras, head_name, length_multiple, epochs=2, layers=4, sentences=1000,
                batch=16, maxlen=128, precision='float32', step='train_steps', crf_xla=False,
                unused_generator=False, jit_compile=False):
    """Seconds per epoch of one fresh model trained on :func:`synthetic_items`; returns a dict:
    epoch seconds, epoch 1 / last epoch, the distinct batch shapes of the run and the first
    three steps' seconds (where the traces fall), and how many times the train function was
    traced, the memory pages each epoch touched for the first time (minor page faults), the
    process's peak resident memory, and the capacity of oneDNN's primitive cache it ran with
    (``$ONEDNN_PRIMITIVE_CACHE_CAPACITY``: importing crf_lr sets 8,192 where it is unset).
    ``step``: ``'train_steps'`` or ``'train_on_batch'``; ``crf_xla``: the CRF's
    forward-backward compiled with XLA (``crf_lr.model.crf.USE_XLA``) or not where its CPU kernel
    does not run; ``unused_generator``:
    first create and drop an iterator over a ``tf.data.Dataset.from_generator`` (the pitfall
    that made the first ``train_steps`` slow: every later step of the process slows);
    ``precision``: ``crf_lr.model.precision.set_precision``'s; ``jit_compile``: the whole step
    XLA-compiled (``model.compile(jit_compile=True)``; one program per batch shape). Run it in
    a fresh process (``main``): XLA's cache of the CRF op is process-wide, so a second model would
    find its programs compiled. ``later_first_shapes_excess_s``: :func:`first_shapes_excess`."""
    from crf_lr.data.batching import Batches
    from crf_lr.model.precision import set_precision
    from crf_lr.speed.shared_layers import sharing_enabled
    from crf_lr.training.loop import train_steps
    import crf_lr.model.crf
    crf_lr.model.crf.USE_XLA = crf_xla  # train_on_batch's; train_steps takes it
    if unused_generator:
        iter(tf.data.Dataset.from_generator(lambda: iter(()), output_signature=tf.TensorSpec([])))
    set_precision(precision)
    model = scripts_model(keras, head_name, layers, jit_compile)
    set_precision('float32')
    batches = Batches(synthetic_items(sentences, maxlen), batch, maxlen=maxlen,
                      length_multiple=length_multiple)
    timed, page_faults = [], []                 # per epoch, (batch shape, seconds) per step
    for _ in range(epochs):
        epoch = [(b.inputs, b.labels) for b in batches]
        steps = (train_steps(model, epoch, crf_xla) if step == 'train_steps' else
                 (model.train_on_batch(*b) for b in epoch))
        times, started = [], time.perf_counter()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in steps:
            times.append(time.perf_counter() - started)
            started = time.perf_counter()
        timed.append([(inputs[0].shape, t) for (inputs, _), t in zip(epoch, times)])
        page_faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
    seconds = [round(sum(t for _, t in epoch), 2) for epoch in timed]
    shapes = {shape for epoch in timed for shape, _ in epoch}
    first_steps = [round(t, 2) for _, t in timed[0][:3]]
    return dict(head=head_name, step=step, crf_xla=crf_xla, unused_generator=unused_generator,
                jit_compile=jit_compile,
                length_multiple=length_multiple,
                layers=layers, batch=batch, sentences=sentences, maxlen=maxlen, precision=precision,
                epoch_s=seconds, ratio=round(seconds[0] / seconds[-1], 3), shapes=len(shapes),
                first_steps_s=first_steps, later_first_shapes_excess_s=first_shapes_excess(timed),
                traces=model.train_function.experimental_get_tracing_count(),
                page_faults=page_faults, load_average=[round(x, 2) for x in os.getloadavg()],
                peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                onednn_primitive_cache_capacity=os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'],
                shared_layer_traces=sharing_enabled())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--head', default='crf')
    parser.add_argument('--length-multiple', type=int, default=1)
    parser.add_argument('--step', choices=('train_steps', 'train_on_batch'),
                        default='train_steps', help='(default: %(default)s, what '
                                                    'crf_lr.training.loop.fit runs)')
    parser.add_argument('--crf-xla', action='store_true',
                        help="compile the CRF's forward-backward with XLA where its CPU kernel "
                             "does not run (crf_lr.model.crf.use_xla; with the kernel, as by "
                             "default, training steps run the kernel either way)")
    parser.add_argument('--unused-generator', action='store_true',
                        help='first create and drop an iterator over a Dataset.from_generator')
    parser.add_argument('--precision', default='float32',
                        help="float32, mixed_bfloat16 or auto "
                             "(crf_lr.model.precision.set_precision)")
    parser.add_argument('--jit-compile', action='store_true',
                        help='the whole step XLA-compiled (one program per batch shape)')
    for name, default in (('epochs', 2), ('layers', 4), ('sentences', 1000), ('batch', 16),
                          ('maxlen', 128)):
        parser.add_argument(f'--{name}', type=int, default=default)
    args = parser.parse_args()
    from crf_lr.compat import keras, tf
    tf.get_logger().setLevel('ERROR')
    print(json.dumps(epoch_times(tf, keras, args.head, args.length_multiple, args.epochs,
                                 args.layers, args.sentences, args.batch, args.maxlen,
                                 precision=args.precision, step=args.step, crf_xla=args.crf_xla,
                                 unused_generator=args.unused_generator,
                                 jit_compile=args.jit_compile)))


if __name__ == '__main__':
    main()
