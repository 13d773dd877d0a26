"""A bias's gradient alone in bfloat16: TensorFlow's ``BiasAddGrad`` against
:func:`crf_lr.speed.fused_kernels.bias_gradient` (one kernel, float32 sums), on the training step's
shapes (4-layer ALBERT-tiny shape, batch 32 x n 128 = 4,096 rows: the projections' 312 columns,
the feed-forward's 1,248, the CRF head's 7), in interleaved rounds; and how far each is from the
float64 sum of the same bfloat16 values (normal, standard deviation 3). Prints one JSON line per
shape.

    $ python benchmarks/bias_gradient.py --rounds 30    # writes
    benchmarks/results/bias_gradient.json
"""
import argparse
import json
import os
import sys


import crf_lr  # noqa: F401  (environment before TensorFlow)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved, load_average, probe_fields, write_lines  # noqa: E402

ROWS = 32 * 128
COLUMNS = (312, 1248, 7)


def largest_errors(tf, ops, dy):
    """{side: the largest distance of its sums from the float64 sums of ``dy``'s values}."""
    exact = tf.reduce_sum(tf.cast(dy, tf.float64), 0)
    results = {'tensorflow': tf.raw_ops.BiasAddGrad(out_backprop=dy),
               'crf_lr': ops.crf_lr_bias_grad(dy)}
    return {side: float(tf.reduce_max(tf.abs(tf.cast(result, tf.float64) - exact)))
            for side, result in results.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rounds', type=int, default=30)
    parser.add_argument('--out',
                        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results',
                                             'bias_gradient.json'),
                        help='JSON lines (default: benchmarks/results/bias_gradient.json)')
    args = parser.parse_args()
    from crf_lr.speed import fused_kernels
    from crf_lr.compat import tf
    ops = fused_kernels._ops()
    if ops is None:
        sys.exit(fused_kernels.status())
    lines = []
    for columns in COLUMNS:
        dy = tf.cast(tf.random.stateless_normal([ROWS, columns], [0, columns]) * 3, tf.bfloat16)
        theirs = tf.function(lambda: tf.raw_ops.BiasAddGrad(out_backprop=dy))
        ours = tf.function(lambda: ops.crf_lr_bias_grad(dy))
        load = load_average()
        timings = interleaved({'tensorflow': lambda: theirs().numpy(),
                               'crf_lr': lambda: ours().numpy()}, rounds=args.rounds)
        lines.append(json.dumps(dict(
            precision='bfloat16', rows=ROWS, columns=columns, rounds=args.rounds,
            **probe_fields(timings, 'tensorflow', 'crf_lr'),
            largest_error=largest_errors(tf, ops, dy), load_average=[load, load_average()],
            kernels=fused_kernels.status())))
        print(lines[-1], flush=True)
    if args.out:
        write_lines(args.out, lines)


if __name__ == '__main__':
    main()
