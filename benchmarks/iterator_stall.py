"""How long deleting a ``tf.data`` iterator takes after a training-sized step, with tf.data's
autotuning on (TensorFlow's default) and off (:func:`crf_lr.compat.without_autotune`, what
``train_steps`` and, through crf_lr's fix, ``train_on_batch`` use). Model-free: a one-batch
dataset feeds a ``tf.function`` of matrix products sized to run ``--step-s`` seconds.

    $ python benchmarks/iterator_stall.py --rounds 8      # one JSON line, then a summary line

A stall shows as a deletion of tenths of a second or more where it should take a millisecond
(TF 2.21, 2 CPU cores: benchmarks/results/iterator_stall.json).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

import crf_lr  # noqa: F401  (environment before TensorFlow)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import write_lines  # noqa: E402

STALL_S = 0.1          # a deletion longer than this counts as a stall


def sized_step(tf, seconds):
    """A ``tf.function(iterator)`` of chained 2048 x 1024 x 1024 products, about ``seconds``
    long here (calibrated on three calls)."""
    weights = tf.Variable(tf.random.normal((1024, 1024)) * 0.01)

    def make(products):
        @tf.function
        def step(iterator):
            batch = next(iterator)
            y = tf.random.normal((2048, 1024))
            for _ in range(products):
                y = tf.tanh(tf.matmul(y, weights))
            return tf.reduce_sum(y) + tf.reduce_sum(batch)
        return step
    probe = make(4)
    iterator = iter(tf.data.Dataset.from_tensors(np.zeros(4, np.float32)).repeat())
    probe(iterator).numpy()
    started = time.perf_counter()
    for _ in range(3):
        probe(iterator).numpy()
    per_product = (time.perf_counter() - started) / 12
    return make(max(1, round(seconds / per_product)))


def deletion_seconds(tf, step, autotune):
    """Run ``step`` on a fresh one-batch iterator, then time the iterator's deletion."""
    from crf_lr.compat import without_autotune
    dataset = tf.data.Dataset.from_tensors(np.zeros(4, np.float32))
    iterator = iter(dataset if autotune else without_autotune(dataset))
    step(iterator).numpy()
    started = time.perf_counter()
    del iterator
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rounds', type=int, default=8)
    parser.add_argument('--step-s', type=float, default=1.3, help='seconds per step (default 1.3)')
    parser.add_argument('--out',
                        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results',
                                             'iterator_stall.json'),
                        help='JSON line (default: benchmarks/results/iterator_stall.json)')
    args = parser.parse_args()
    from crf_lr.compat import tf
    step = sized_step(tf, args.step_s)
    times = {'autotune on': [], 'autotune off': []}
    for round_ in range(args.rounds):                   # interleaved, order alternating
        for name in sorted(times, reverse=bool(round_ % 2)):
            times[name].append(deletion_seconds(tf, step, name == 'autotune on'))
    summary = {name: dict(median_ms=round(1e3 * float(np.median(t)), 1),
                          min_ms=round(1e3 * min(t), 1), max_ms=round(1e3 * max(t), 1),
                          stalls=sum(x > STALL_S for x in t), deletions=len(t))
               for name, t in times.items()}
    line = json.dumps(dict(step_s=args.step_s, rounds=args.rounds, tensorflow=tf.__version__,
                           load_average=[round(x, 2) for x in os.getloadavg()], **summary))
    print(line)
    if args.out:
        write_lines(args.out, [line])
    print('; '.join(f'{name}: {s["stalls"]} of {s["deletions"]} deletions over '
                    f'{STALL_S * 1e3:.0f} ms, median {s["median_ms"]} ms '
                    f'[{s["min_ms"]}-{s["max_ms"]}]' for name, s in summary.items()))


if __name__ == '__main__':
    main()
