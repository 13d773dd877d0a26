"""What ``crf_lr.set_check_numerics(True)`` costs in a training step: the task scripts' step
(``crf_lr.training.loop.train_steps``: bert4keras ALBERT-tiny-shaped random encoder, a
``crf_lr.model.heads`` head, ``LayerwiseAdam``) on one synthetic batch, traced once with the checks
and once without, timed in interleaved rounds (benchmarks/timing.py). Prints one JSON line per case:
the step's median [min-max] ms each way, the per-round ratio on / off, and the number of check ops
(``Assert``) in each traced step (0 when off: the graph is the one without checks).

    $ nice -n 19 python benchmarks/check_numerics.py --heads crf efficient_global_pointer \
          --layers 4 1 --rounds 20
"""
import argparse
import json
import os
import sys

import numpy as np

import crf_lr  # noqa: F401  (environment before TensorFlow)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import ALBERT_TINY  # noqa: E402
from timing import interleaved, load_average, machine, ratio_summary  # noqa: E402

TYPES = ['A', 'B', 'C']


def one_batch(head, batch, maxlen, vocab_size, seed=0):
    """``(inputs, targets)`` of ``batch`` random sentences of ``maxlen`` tokens ([CLS] and [SEP]
    included), two random entities each, as ``crf_lr.training.loop.epoch_batches`` makes them."""
    from crf_lr.training.loop import epoch_batches
    from crf_lr.data.tagging import spans_to_tags
    rng, length, samples = np.random.default_rng(seed), maxlen - 2, []
    for _ in range(batch):
        starts = sorted(rng.choice(length - 3, 2, replace=False))
        spans = [(int(s), int(s) + 2, TYPES[k % len(TYPES)]) for k, s in enumerate(starts)
                 if k == 0 or s >= starts[0] + 2]
        tokens = [2] + rng.integers(5, vocab_size, length).tolist() + [3]
        samples.append((tokens, head.target(spans_to_tags(spans, length), spans,
                                            list(range(length + 1)))))
    return epoch_batches(samples, batch, seed, 0, head)[0]


def assert_ops(model):
    """``Assert`` ops in the traced train step of ``model`` (its graph and its functions)."""
    total = 0
    for function in model.train_function._list_all_concrete_functions():
        graph_def = function.graph.as_graph_def()
        nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
        total += sum(node.op == 'Assert' for node in nodes)
    return total


def traced_step(head_name, layers, batch, maxlen, steps, checks):
    """The next-step callable of ``train_steps`` for a fresh model (same seed either way), traced
    with the checks on or off, and the number of ``Assert`` ops in its graph."""
    from bert4keras.models import build_transformer_model
    from crf_lr.compat import keras
    from crf_lr.model.heads import make_head, piece_states
    from crf_lr.model.numerics import set_check_numerics
    from crf_lr.training.optimizers import LayerwiseAdam
    from crf_lr.training.loop import train_steps
    with set_check_numerics(checks):                   # read while the step is traced
        keras.utils.set_random_seed(0)
        encoder = build_transformer_model(model='albert',
                                          **dict(ALBERT_TINY, num_hidden_layers=layers))
        head = make_head(head_name, TYPES, 'BIO', lr_multiplier=100)
        model = keras.Model(encoder.inputs, head.build(piece_states(encoder)))
        model.compile(LayerwiseAdam(1e-4), loss=head.loss)
        data = one_batch(head, batch, maxlen, ALBERT_TINY['vocab_size'])
        generator = train_steps(model, [data] * steps)
        next(generator)                                    # traces
    return (lambda: next(generator)), assert_ops(model)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--heads', nargs='+', default=['crf', 'efficient_global_pointer'])
    parser.add_argument('--layers', nargs='+', type=int, default=[4, 1])
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--maxlen', type=int, default=128)
    parser.add_argument('--rounds', type=int, default=20)
    args = parser.parse_args(argv)
    print(json.dumps({'machine': machine()}))
    for layers in args.layers:
        for head in args.heads:
            calls, asserts = {}, {}
            for checks in (False, True):
                name = 'on' if checks else 'off'
                calls[name], asserts[name] = traced_step(head, layers, args.batch, args.maxlen,
                                                         args.rounds + 4, checks)
            timings = interleaved(calls, rounds=args.rounds, warmup=1)
            ratio = ratio_summary(timings, 'on', 'off')
            print(json.dumps({
                'head': head, 'layers': layers, 'batch': args.batch, 'n': args.maxlen,
                'off_ms': [timings['off'][k] for k in ('median_ms', 'min_ms', 'max_ms')],
                'on_ms': [timings['on'][k] for k in ('median_ms', 'min_ms', 'max_ms')],
                'on_over_off': [ratio[k] for k in ('median', 'min', 'max')],
                'assert_ops': asserts, 'load': [timings['off']['load_before'], load_average()]}),
                flush=True)


if __name__ == '__main__':
    main()
