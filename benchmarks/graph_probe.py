"""Probe: one change to the graph that TensorFlow runs, off against on, timed in interleaved
rounds, each precision in its own rounds. ``--change``:

* ``flat_dense``: tf-keras's ``Dense`` on (batch, n, d) inputs as Keras calls it (``tensordot``,
  then bias and activation on the 3-D result) against :func:`crf_lr.compat.flat_dense` (the
  flattened input: the graph optimiser fuses product, bias and activation into one kernel);
* ``batched_attention``: bert4keras's attention (``einsum`` products, the mask as a select)
  against :func:`crf_lr.attention.batched_attention` (batched products, the mask as a bias).

Everything else as the library runs it (prediction under ``flat_dense``, batched attention on).
``--part``:

* ``predict``: the end-to-end benchmark's prediction step (packaged MiniLM + Dense + CRF,
  CoNLL-2003's first test sentences in the end-to-end benchmark's batches of 32): the model's
  scores, as :class:`crf_lr.tagger.Tagger` computes them;
* ``step``: the whole training step of the CRF head (4-layer ALBERT-tiny shape, batch 32,
  n = 128; ``models.train_step``).

    $ python benchmarks/graph_probe.py --change flat_dense --part predict   # a JSON line per precision
    $ python benchmarks/graph_probe.py --change batched_attention --part step --out results.json
"""
import argparse
import json
import os
import sys

import numpy as np

import crf_lr  # noqa: F401  (environment before TensorFlow)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved, load_average, ratio_summary  # noqa: E402


def changes():
    """{name: context manager factory taking on/off}."""
    from crf_lr.attention import batched_attention
    from crf_lr.compat import flat_dense
    return {'flat_dense': flat_dense, 'batched_attention': batched_attention}


def predict_functions(change, precision, sentences):
    """{False: the change off, True: on} -> a callable scoring every prediction batch, and the
    largest difference between their scores (finite entries)."""
    from crf_lr.compat import flat_dense, tf
    from crf_lr.pretrained import packaged_source
    from crf_lr.splits import load_splits
    from crf_lr.tracing import conformed, free_signature
    from e2e_job import prepare
    from e2e_worker import make_side
    data = load_splits('conll2003', train_limit=32, eval_limit=sentences)
    job = prepare(data.train, data.test, data.types, data.units, packaged_source('minilm-en'),
                  'minilm-en', 1e-4, 1, 0)
    model = make_side(job, dict(side='crf_lr', head='crf', precision=precision, threads=None)).model
    batches = job['predict'][32]
    signature = free_signature(batches[0])
    functions, scores = {}, {}
    for on in (False, True):
        with flat_dense(), changes()[change](on):
            step = tf.function(lambda x: model(x, training=False), reduce_retracing=True,
                               autograph=False)
            step.get_concrete_function(signature)
        scores[on] = [np.asarray(step(conformed(b, signature))) for b in batches]
        functions[on] = (lambda s: lambda: [s(conformed(b, signature)).numpy()
                                            for b in batches])(step)
    difference = max(float(np.abs(np.where(np.isfinite(a), a - b, 0)).max())
                     for a, b in zip(scores[False], scores[True]))
    return functions, difference


def step_functions(change, precision):
    """The same for the training step of the CRF head; the difference of the first losses."""
    from crf_lr.compat import keras, tf
    import models
    data = models.random_batch(np.random.default_rng(128), 32, 128)
    functions, losses = {}, {}
    for on in (False, True):
        head_model = models.build_head_in(tf, keras, 'CRF (crf_lr)', 4, precision)
        step = models.train_step(tf, head_model)
        arguments = models.step_arguments(tf, head_model, data)
        with changes()[change](on):
            losses[on] = float(step(*arguments).numpy())         # traced here
        functions[on] = (lambda s, a: lambda: s(*a).numpy())(step, arguments)
    return functions, abs(losses[False] - losses[True])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--change', choices=('flat_dense', 'batched_attention'), required=True)
    parser.add_argument('--part', choices=('predict', 'step'), default='predict')
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--sentences', type=int, default=200, help='--part predict: test sentences')
    parser.add_argument('--out', default=None, help='also write the JSON lines to this file')
    args = parser.parse_args()
    lines = []
    for precision in ('float32', 'mixed_bfloat16'):
        if args.part == 'predict':
            functions, difference = predict_functions(
                args.change, 'bfloat16' if precision != 'float32' else precision, args.sentences)
        else:
            functions, difference = step_functions(args.change, precision)
        load = load_average()
        timings = interleaved({'off': functions[False], 'on': functions[True]},
                              rounds=args.rounds)
        lines.append(json.dumps(dict(change=args.change, part=args.part, precision=precision,
                                     rounds=args.rounds, max_difference=difference,
                                     **{f'{k} ms': [v['median_ms'], v['min_ms'], v['max_ms']]
                                        for k, v in timings.items()},
                                     off_over_on=ratio_summary(timings, 'off', 'on'),
                                     load_average=[load, load_average()])))
        print(lines[-1], flush=True)
    if args.out:
        from crf_lr.atomic import atomic_write
        with atomic_write(args.out) as f:
            f.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
