"""Peak memory of one training step per head, measured in a process of its own.

Run by ``run.py`` with ``TF_CPU_ALLOCATOR_USE_BFC=true``, which makes TensorFlow allocate CPU
tensors through its BFC allocator, the one that keeps statistics: for each (layers, n, head) the
step runs once (tracing), the allocator's peak is reset, and the step runs again. Reported:
``step_peak_mb`` = peak bytes in use during that step minus bytes in use just before it (the
activations, gradients and temporaries of the step; weights, Adam slots and inputs excluded).
oneDNN's internal scratch buffers are not TensorFlow tensors and are not counted. The timed
process keeps TensorFlow's default allocator; this one is never timed.

    $ TF_CPU_ALLOCATOR_USE_BFC=true python benchmarks/memory.py --layers 1 --n 64 128
    [{"layers": 1, "n": 64, "head": "softmax", "step_peak_mb": 41.3}, ...]     (last line)
"""
import argparse
import json
import os

import numpy as np

import models

MEMORY_BATCH = 16


def measure(tf, keras, layers, lengths, heads=models.HEADS, batch=MEMORY_BATCH):
    """List of {'layers', 'n', 'head', 'step_peak_mb'} for every n in ``lengths`` and head."""
    head_models = models.build_heads(tf, keras, layers, heads)
    rows = []
    for n in lengths:
        data = models.random_batch(np.random.default_rng(n), batch, n)
        for head, head_model in head_models.items():
            step = models.train_step(tf, head_model)
            arguments = models.step_arguments(tf, head_model, data)
            step(*arguments).numpy()
            tf.config.experimental.reset_memory_stats('CPU:0')
            before = tf.config.experimental.get_memory_info('CPU:0')['current']
            step(*arguments).numpy()
            peak = tf.config.experimental.get_memory_info('CPU:0')['peak']
            rows.append({'layers': layers, 'n': n, 'head': head,
                         'step_peak_mb': round((peak - before) / 2 ** 20, 1)})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--layers', type=int, required=True)
    parser.add_argument('--n', type=int, nargs='+', required=True)
    parser.add_argument('--heads', nargs='+', default=list(models.HEADS), choices=models.HEADS)
    args = parser.parse_args()
    if os.environ.get('TF_CPU_ALLOCATOR_USE_BFC') != 'true':
        parser.error('set TF_CPU_ALLOCATOR_USE_BFC=true: only the BFC allocator keeps statistics')
    from crf_lr.compat import keras, tf
    print(json.dumps(measure(tf, keras, args.layers, args.n, args.heads)))


if __name__ == '__main__':
    main()
