"""The matrix products of one training step at their own shapes, timed alone: how close to the
2048^3 matmul limit any step of issue 29's encoder can come.

``benchmarks/run.py --part step`` divides a step's time by its encoder FLOPs at the 2048^3
matmul rate (:func:`models.encoder_flops`). Here the same FLOPs run as the products the step
really does (4-layer ALBERT-tiny shape, batch 32, n = 128: tokens x 312 x 312 and tokens x 312 x
1248, 32 x 12 batched 128 x 26 x 128 attention products, each forward, its input gradient and
its weight gradient), nothing else, in one ``tf.function``: ``floor / limit`` is what the
products alone cost over the limit, so a step can come no closer than that without faster
products. Float32 and bfloat16, the floors and the 2048^3 products timed in interleaved rounds.

    $ python benchmarks/matmul_floor.py --rounds 7      # one JSON line, then a table
"""
import argparse
import json
import os
import sys

import crf_lr  # noqa: F401  (environment before TensorFlow)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from timing import gflops, interleaved, load_average, machine, write_lines  # noqa: E402

SHAPE = dict(layers=4, batch=32, n=128)


def step_products(layers, batch, n, hidden=models.ALBERT_TINY['hidden_size'],
                  intermediate=models.ALBERT_TINY['intermediate_size'],
                  embedding=models.ALBERT_TINY['embedding_size'],
                  heads=models.ALBERT_TINY['num_attention_heads']):
    """``[(batch_count, m, k, n), ...]``: every product of one training step (forward, input
    gradient, weight gradient of each dense projection and attention product), in the
    arithmetic of :func:`models.encoder_flops` (checked there: same FLOPs)."""
    tokens, size = batch * n, hidden // heads
    dense = [(embedding, hidden)] + layers * [(hidden, hidden)] * 4 + layers * [
        (hidden, intermediate), (intermediate, hidden)] + [(hidden, models.NUM_TAGS)]
    products = []
    for d_in, d_out in dense:
        products += [(1, tokens, d_in, d_out),        # forward
                     (1, tokens, d_out, d_in),        # gradient w.r.t. the input
                     (1, d_in, tokens, d_out)]        # gradient w.r.t. the weights
    pairs = batch * heads
    for _ in range(layers):
        for _ in range(2):                            # scores q k^T, then weights x values
            products += [(pairs, n, size, n), (pairs, n, n, size), (pairs, size, n, n)]
    return products


def product_flops(products):
    return sum(2 * count * m * k * n for count, m, k, n in products)


def floor_function(tf, products, dtype):
    """A callable running every product once (random operands of ``dtype``), blocking."""
    operands = [(tf.cast(tf.random.normal([count, m, k]), dtype),
                 tf.cast(tf.random.normal([count, k, n]), dtype))
                for count, m, k, n in products]

    @tf.function
    def run():
        return tf.add_n([tf.cast(tf.matmul(a, b)[0, 0, 0], 'float32') for a, b in operands])
    return lambda: run().numpy()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--out',
                        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results',
                                             'matmul_floor.json'),
                        help='JSON line (default: benchmarks/results/matmul_floor.json)')
    args = parser.parse_args()
    from crf_lr.compat import tf
    products = step_products(**SHAPE)
    flops = product_flops(products)
    if flops != models.encoder_flops(**SHAPE):
        raise AssertionError(f'{flops} FLOPs of products against '
                             f'{models.encoder_flops(**SHAPE)} of models.encoder_flops')
    size = 2048
    squares = {dtype: (tf.cast(tf.random.normal([size, size]), dtype),
                       tf.cast(tf.random.normal([size, size]), dtype))
               for dtype in ('float32', 'bfloat16')}
    square = tf.function(lambda a, b: tf.cast(tf.matmul(a, b)[0, 0], 'float32'))
    functions = {}
    for dtype in ('float32', 'bfloat16'):
        functions[f'floor {dtype}'] = floor_function(tf, products, dtype)
        functions[f'2048^3 {dtype}'] = (lambda pair: lambda: square(*pair).numpy())(
            squares[dtype])
    load_before = load_average()
    timings = interleaved(functions, rounds=args.rounds)
    rows = {}
    for dtype in ('float32', 'bfloat16'):
        rate = gflops(size, timings[f'2048^3 {dtype}']['min_ms'])    # the best call, as run.py
        limit_ms = flops / (rate * 1e9) * 1e3
        floor = timings[f'floor {dtype}']
        rows[dtype] = dict(rate_2048_gflops=rate, limit_ms=round(limit_ms, 1),
                           floor_ms=floor['median_ms'], floor_min_ms=floor['min_ms'],
                           floor_max_ms=floor['max_ms'],
                           floor_over_limit=round(floor['median_ms'] / limit_ms, 2),
                           floor_gflops=round(flops / floor['median_ms'] / 1e6, 1))
    result = dict(command='python benchmarks/matmul_floor.py' + (
        f' --rounds {args.rounds}' if args.rounds != 7 else ''), shape=SHAPE,
        gflop=round(flops / 1e9, 2), products=len(products), machine=machine(),
        load_average=[load_before, load_average()], rows=rows,
        timings={k: {m: v[m] for m in ('median_ms', 'min_ms', 'max_ms')}
                 for k, v in timings.items()})
    line = json.dumps(result)
    print(line)
    if args.out:
        write_lines(args.out, [line])
    print('| precision | 2048^3 GFLOP/s | limit ms | products alone ms | products / limit |')
    print('|---|---|---|---|---|')
    for dtype, row in rows.items():
        print(f'| {dtype} | {row["rate_2048_gflops"]} | {row["limit_ms"]} | {row["floor_ms"]} '
              f'[{row["floor_min_ms"]}-{row["floor_max_ms"]}] | {row["floor_over_limit"]} |')


if __name__ == '__main__':
    main()
