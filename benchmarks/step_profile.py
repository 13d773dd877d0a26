"""Where the time of one training step goes, by op kind: the TensorFlow profiler's trace of a few
steps of ``models.train_step`` (4-layer ALBERT-tiny-shaped random encoder, a head, Adam) per
precision, parsed from its ``.xplane.pb`` (the XSpace protobuf TensorFlow ships).

Each TensorFlow op the executor ran is one event ``name:type`` on a ``tf_Compute`` thread of the
host plane; its duration is summed by kind (:func:`op_kind`), per step. Two executor threads run
ops side by side, so the kinds add up to more than the step's wall time (the ``op ms / wall ms``
column says by how much). An XLA cluster is one op (kind ``xla``). Each row also names its 15
costliest op types and its 15 costliest ``place: type`` pairs (:func:`op_place`: the encoder
block and sub-layer, forward or gradient), which tell, say, the feed-forward layer's GELU from
the attention's softmax gradient.

    $ python benchmarks/step_profile.py                       # CRF head, batch 32, n = 128
    $ python benchmarks/step_profile.py --heads softmax 'CRF (crf_lr)' --steps 3

Writes ``benchmarks/results/step_profile.json`` and prints a Markdown table.
"""
import argparse
import collections
import datetime
import glob
import json
import os
import re
import shlex
import sys
import tempfile
import time

import numpy as np

import crf_lr  # noqa: F401  (environment before TensorFlow)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
import models  # noqa: E402
from timing import load_average, machine  # noqa: E402

KINDS = ('matmul', 'cast', 'element-wise', 'layer norm', 'softmax', 'embedding', 'head + loss',
         'optimizer', 'xla')
MATMUL_TYPES = {'MatMul', '_MklMatMul', '_FusedMatMul', '_MklFusedMatMul', '_MklNativeFusedMatMul',
                'BatchMatMulV2', '_MklBatchMatMulV2', 'Einsum', '_MklEinsum', 'BatchMatMulV3',
                '_MklNativeMatMul', '_MklNativeBatchMatMulV2'}
XLA_TYPES = {'_XlaRun', 'XlaLaunch', '_XlaCompile', 'Execute', 'ExecuteAsyncOnStream', 'Start'}
ENCODER_SCOPES = ('Embedding-', 'Transformer-')


def op_kind(name, op_type):
    """The kind (one of ``KINDS``) of the op ``name`` (its graph name) of type ``op_type``.

        >>> op_kind('gradient_tape/model_1/Transformer-FeedForward/dense/Tensordot/MatMul',
        ...         '_MklMatMul')
        'matmul'
    """
    parts = name.split('/')
    if parts[0].startswith(('Adam', 'LayerwiseAdam')) or op_type.startswith('ResourceApply'):
        return 'optimizer'
    if op_type in XLA_TYPES:
        return 'xla'
    scope = next((p for p in parts if p.startswith(ENCODER_SCOPES)), None)
    if op_type == 'Cast':
        return 'cast'
    if scope is None and not parts[0].startswith('AddN'):      # AddN: gradients of shared weights
        return 'head + loss'
    if scope is not None and scope.endswith('-Norm'):
        return 'layer norm'
    if op_type in MATMUL_TYPES:
        return 'matmul'
    if 'Softmax' in op_type or 'softmax' in name.lower():
        return 'softmax'
    if scope is not None and scope.startswith('Embedding-') and scope != 'Embedding-Mapping':
        return 'embedding'
    return 'element-wise'


def op_place(name):
    """Where in the model the op ``name`` (its graph name) sits: the encoder block without its
    layer number and the sub-layer inside it, else the first scope below the model's, with
    ``(gradient)`` for the backward pass's ops; numeric suffixes are dropped, so the layers and
    repeated ops of one place add up.

        >>> op_place('gradient_tape/model_1/Transformer-3-FeedForward/dense_1/mul_2')
        'Transformer-FeedForward/dense (gradient)'
        >>> op_place('LayerwiseAdam/update_4/ResourceApplyAdam')
        'LayerwiseAdam'
    """
    parts = [re.sub(r'_\d+$', '', part) for part in name.split('/')]
    gradient = parts[0] == 'gradient_tape'
    inner = [part for part in parts[:-1] if part not in ('gradient_tape', 'model')] or parts[-1:]
    encoder = next((i for i, part in enumerate(inner) if part.startswith(ENCODER_SCOPES)), None)
    if encoder is None:
        place = inner[0]
    else:
        place = '/'.join([re.sub(r'-\d+-', '-', inner[encoder])] + inner[encoder + 1:encoder + 2])
    return place + (' (gradient)' if gradient else '')


def profiled_ops(logdir):
    """op (name, type) -> summed microseconds, from the host plane of the trace in ``logdir``."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    paths = glob.glob(os.path.join(logdir, 'plugins', 'profile', '*', '*.xplane.pb'))
    space = xplane_pb2.XSpace()
    with open(max(paths, key=os.path.getmtime), 'rb') as f:
        space.ParseFromString(f.read())
    plane = next(p for p in space.planes if p.name == '/host:CPU')
    ops = collections.Counter()
    for line in plane.lines:
        if not line.name.startswith('tf_Compute'):
            continue
        for event in line.events:
            name = plane.event_metadata[event.metadata_id].name
            if ':' in name and not name.startswith('ExecutorState'):
                ops[tuple(name.rsplit(':', 1))] += event.duration_ps / 1e6
    return ops


def profile_step(tf, step, arguments, steps):
    """Profile ``steps`` calls of ``step(*arguments)`` (already warm; a tensor or NumPy values);
    returns (wall ms per step, kind -> op ms per step, the 15 costliest op types with their ms
    per step, the 15 costliest ``place: type`` pairs (:func:`op_place`) with theirs)."""
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        started = time.perf_counter()
        for _ in range(steps):
            result = step(*arguments)
            getattr(result, 'numpy', lambda: result)()      # waits for a tensor's value
        wall = (time.perf_counter() - started) / steps * 1e3
        tf.profiler.experimental.stop()
        ops = profiled_ops(logdir)
    kinds = collections.Counter()
    types = collections.Counter()
    places = collections.Counter()
    for (name, op_type), us in ops.items():
        kinds[op_kind(name, op_type)] += us / 1e3 / steps
        types[op_type] += us / 1e3 / steps
        places[f'{op_place(name)}: {op_type}'] += us / 1e3 / steps
    return (round(wall, 1), {k: round(kinds[k], 3) for k in KINDS},
            {t: round(ms, 3) for t, ms in types.most_common(15)},
            {p: round(ms, 3) for p, ms in places.most_common(15)})


def profile(heads, precisions, batch, n, layers, steps, xla=False):
    """One row per (head, precision): the step profiled after 2 warm-up steps (see module doc)."""
    from crf_lr.compat import keras, tf
    tf.get_logger().setLevel('ERROR')
    data = models.random_batch(np.random.default_rng(n), batch, n)
    rows = []
    for head in heads:
        for precision in precisions:
            head_model = models.build_head_in(tf, keras, head, layers, precision)
            step = models.train_step(tf, head_model, jit_compile=xla)
            arguments = models.step_arguments(tf, head_model, data)
            for _ in range(2):
                step(*arguments).numpy()
            load = load_average()
            wall, kinds, types, places = profile_step(tf, step, arguments, steps)
            rows.append(dict(head=head, precision=precision, xla=xla, wall_ms=wall,
                             op_ms=kinds, top_op_types=types, top_op_places=places,
                             load_before=load,
                             load_after=load_average()))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows):
    """Markdown: per (head, precision), wall ms per step and each kind's op ms (share of the
    summed op time)."""
    header = ['head', 'precision', 'wall ms/step', 'op ms / wall ms'] + list(KINDS)
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    for row in rows:
        total = sum(row['op_ms'].values())
        cells = [row['head'], row['precision'] + (' (XLA)' if row['xla'] else ''),
                 f"{row['wall_ms']:.0f}", f"{total / row['wall_ms']:.2f}"]
        cells += [f"{ms:.0f} ({ms / total:.0%})" if ms else '–' for ms in row['op_ms'].values()]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--heads', nargs='+', default=['CRF (crf_lr)'], choices=models.HEADS)
    parser.add_argument('--precisions', nargs='+', default=['float32', 'mixed_bfloat16'])
    parser.add_argument('--batch', type=int, default=32)
    parser.add_argument('--n', type=int, default=128)
    parser.add_argument('--layers', type=int, default=4)
    parser.add_argument('--steps', type=int, default=3, help='profiled steps per row')
    parser.add_argument('--xla', action='store_true', help='the whole step XLA-compiled')
    parser.add_argument('--out', default=os.path.join(HERE, 'results', 'step_profile.json'))
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc)
    rows = profile(args.heads, args.precisions, args.batch, args.n, args.layers, args.steps,
                   args.xla)
    results = dict(command=shlex.join(['python', 'benchmarks/step_profile.py'] + sys.argv[1:]),
                   date_utc=started.strftime('%Y-%m-%d %H:%M'), machine=machine(),
                   shape=dict(layers=args.layers, batch=args.batch, n=args.n), rows=rows)
    with open(args.out, 'w', encoding='utf-8') as f:
        json.dump(results, f, indent=1)
    print(table(rows))
    print(f'\nwrote {args.out}')


if __name__ == '__main__':
    main()
