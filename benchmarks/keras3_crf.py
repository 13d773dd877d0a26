"""CRF loss + gradient: crf_lr.keras3 on JAX against crf_lr's tf-keras layer, in interleaved rounds.

The two cannot share a process (tf-keras needs TF_USE_LEGACY_KERAS before TensorFlow loads, and
bert4keras swaps ``sys.modules['keras']``), so each runs in a worker process that times one call
when asked; this process asks them in turn (A, B, B, A, ...), so load from other processes hits
both alike. Both first compute the loss and gradients on the same inputs (batch 32, lengths in
[n/2, n], float32), which must agree before anything is timed. Prints and writes (--output) the
median [min-max] per call and the per-round ratio JAX / tf-keras.

    python benchmarks/keras3_crf.py --n 256 --labels 7 --rounds 30
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cases import CRF_BATCH, check_crf_losses, crf_inputs  # noqa: E402
from timing import load_average, paired_ratios, summarise  # noqa: E402

WORKERS = {'tf-keras': 'tensorflow', 'keras3 jax': 'jax'}


def tf_keras_step(emissions, tags, lengths, transitions):
    """crf_lr.model.crf's sparse_loss + gradient in a tf.function (benchmarks/cases.py's setup)."""
    from crf_lr.compat import tf
    from cases import crf_lr_losses, loss_and_gradient
    step = loss_and_gradient(tf, crf_lr_losses(tf, transitions)['crf_lr sparse_loss'])
    args = tf.constant(emissions), tf.constant(tags), tf.constant(lengths)

    def call():
        loss, grads = step(*args)
        return loss.numpy(), [g.numpy() for g in grads]
    return call


def keras3_jax_step(emissions, tags, lengths, transitions):
    """crf_lr.keras3's sparse_loss + gradient, jitted with jax.value_and_grad."""
    import jax
    import keras
    from crf_lr.keras3 import ConditionalRandomField
    layer = ConditionalRandomField()
    layer.build((None, None, transitions.shape[0]))
    layer.set_weights([transitions])
    mask = np.arange(emissions.shape[1]) < lengths[:, None]

    def loss(emissions, trans):
        with keras.StatelessScope(state_mapping=[(layer._trans, trans)]):
            return keras.ops.mean(layer.sparse_loss.call(tags, layer(emissions, mask=mask)))
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    args = jax.numpy.asarray(emissions), jax.numpy.asarray(transitions)

    def call():
        value, grads = step(*args)
        return np.asarray(value), [np.asarray(g) for g in grads]
    return call


def worker(name, n, labels, seed, reference_path):
    """Build the step, save its first result, then time one call per 'time' line on stdin."""
    emissions, tags, lengths, transitions = crf_inputs(np.random.default_rng(seed), CRF_BATCH,
                                                       n, labels)
    call = (tf_keras_step if name == 'tf-keras' else keras3_jax_step)(emissions, tags, lengths,
                                                                      transitions)
    loss, grads = call()
    np.savez(reference_path, *grads, loss=loss, lengths=lengths)
    for _ in range(2):
        call()                                                            # warm-up
    print('ready', flush=True)
    for line in sys.stdin:
        start = time.perf_counter()
        call()
        print(time.perf_counter() - start, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=256)
    parser.add_argument('--labels', type=int, default=7)
    parser.add_argument('--rounds', type=int, default=30)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--output', default=None, help='JSON results file')
    parser.add_argument('--worker', choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument('--reference', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.n, args.labels, args.seed, args.reference)

    folder = tempfile.mkdtemp(prefix='keras3_crf_')
    processes = {}
    for name, backend in WORKERS.items():
        path = os.pathsep.join([os.path.dirname(HERE), os.environ.get('PYTHONPATH', '')])
        env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=path)
        processes[name] = subprocess.Popen(
            [sys.executable, __file__, '--worker', name, '--n', str(args.n), '--labels',
             str(args.labels), '--seed', str(args.seed), '--reference',
             os.path.join(folder, name.replace(' ', '_') + '.npz')],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    for name, process in processes.items():
        if process.stdout.readline().strip() != 'ready':
            raise SystemExit(f'worker {name!r} failed (exit {process.wait()})')
    results = {}
    for name in WORKERS:
        saved = np.load(os.path.join(folder, name.replace(' ', '_') + '.npz'))
        results[name] = (saved['loss'], [saved['arr_0'], saved['arr_1']])
    check = check_crf_losses(results, saved['lengths'])
    load_before, names, times = load_average(), list(WORKERS), {name: [] for name in WORKERS}
    for r in range(args.rounds):
        for name in names[r % 2:] + names[:r % 2]:                       # rotate who goes first
            processes[name].stdin.write('time\n')
            processes[name].stdin.flush()
            times[name].append(float(processes[name].stdout.readline()))
    for process in processes.values():
        process.stdin.close()
        process.wait()
    timings = {name: dict(summarise(t), times_ms=[round(x * 1e3, 3) for x in t])
               for name, t in times.items()}
    ratio = paired_ratios(timings, 'tf-keras')['keras3 jax']
    report = dict(shape=dict(batch=CRF_BATCH, n=args.n, labels=args.labels), rounds=args.rounds,
                  check=check, load_before=load_before, load_after=load_average(),
                  timings=timings, ratio_jax_over_tf_keras=ratio,
                  command=' '.join(['python', os.path.relpath(__file__)] + sys.argv[1:]))
    for name, t in timings.items():
        print(f'{name:<12} {t["median_ms"]:8.2f} ms [{t["min_ms"]:.2f}-{t["max_ms"]:.2f}]')
    print(f'JAX / tf-keras per round: median {ratio["median"]} '
          f'[{ratio["min"]}-{ratio["max"]}]; check {check}')
    if args.output:
        with open(args.output, 'w') as f:
            json.dump(report, f, indent=1)


if __name__ == '__main__':
    main()
