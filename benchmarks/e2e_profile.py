"""Where the end-to-end step's time goes, on each side: the encoder's forward, its forward and
backward, the whole training step (head, loss, optimiser) on the fixed 32 x 128 batch and the
optimiser's update alone, timed
in interleaved rounds; then the ops of a few whole steps by kind (TensorFlow's profiler trace read
from its XSpace file; ``torch.profiler``), self time summed per op type. One side per process.

    $ python benchmarks/e2e_profile.py --side crf_lr --precision float32     # one JSON line
    $ python benchmarks/e2e_profile.py --side torch --precision bfloat16
"""
import argparse
import collections
import glob
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved  # noqa: E402


def keras_parts(side, batch):
    """{'encoder forward', 'encoder forward+backward', 'step'} callables of crf_lr's side."""
    from crf_lr.compat import keras, tf
    inputs, labels = batch
    states = keras.Model(side.model.inputs, side.model.get_layer('Piece-States').output)
    ids = [tf.constant(x) for x in inputs]
    weights = states.trainable_variables

    @tf.function
    def forward():
        return tf.reduce_sum(tf.cast(states(ids, training=True), tf.float32))

    @tf.function
    def backward():
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(tf.cast(states(ids, training=True), tf.float32))
        return tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32))
                         for g in tape.gradient(total, weights)])
    variables = side.model.trainable_variables
    gradients = [tf.fill(tf.shape(v), 1e-3) for v in variables]

    @tf.function
    def update():                      # the optimiser alone, on fixed gradients
        side.model.optimizer.apply_gradients(zip(gradients, variables))
        return tf.constant(0)
    return {'encoder forward': lambda: forward().numpy(),
            'encoder forward+backward': lambda: backward().numpy(),
            'step': lambda: list(side.train([batch])),       # first: creates the optimiser's slots
            'optimiser update': lambda: update().numpy()}


def torch_parts(side, batch):
    """The same parts of the PyTorch side."""
    torch = side.torch
    ids, _, _ = side._tensors(*batch)
    encoder = side.model.encoder if side.head_name == 'crf' else side.model.base_model
    side.model.train()

    def states():
        with side.autocast():
            return encoder(input_ids=ids, attention_mask=(ids != 0).long(),
                           token_type_ids=torch.zeros_like(ids)).last_hidden_state.float().sum()

    def forward():
        with torch.no_grad():
            return float(states())

    def backward():
        side.optimizer.zero_grad(set_to_none=True)
        states().backward()
    def update():                      # the optimiser alone, on the last step's gradients
        side.optimizer.step()
    return {'encoder forward': forward, 'encoder forward+backward': backward,
            'step': lambda: list(side.train([batch])), 'optimiser update': update}


# Events of Eigen's thread pool: the shards of an op already counted as the op itself.
THREAD_POOL_TASKS = ('Process', 'ParallelFor')


def keras_op_kinds(step, calls):
    """Self time (ms per step) of TensorFlow's ops by type over ``calls`` steps."""
    from crf_lr.compat import tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    folder = tempfile.mkdtemp(prefix='crf_lr-profile-')
    tf.profiler.experimental.start(folder)
    for _ in range(calls):
        step()
    tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    with open(glob.glob(os.path.join(folder, '**', '*.xplane.pb'), recursive=True)[0], 'rb') as f:
        space.ParseFromString(f.read())
    totals, lines = collections.Counter(), []
    for plane in space.planes:
        for line in plane.lines:           # the executor's threads: one line each
            lines.append(f'{plane.name}/{line.name}')
            if not line.name.startswith(('tf_Compute', 'tf_numa')):
                continue
            for event in line.events:      # op kernels, and the thread pool's tasks inside them
                kind = plane.event_metadata[event.metadata_id].name.split(':')[-1]
                if kind not in THREAD_POOL_TASKS:
                    totals[kind] += event.duration_ps / 1e9 / calls
    if not totals:
        raise RuntimeError(f'no op events in the profile; lines: {lines}')
    return totals


def torch_op_kinds(step, calls):
    """Self CPU time (ms per step) of torch's ops by name over ``calls`` steps."""
    import torch
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        for _ in range(calls):
            step()
    return collections.Counter({e.key: e.self_cpu_time_total / 1e3 / calls
                                for e in profile.key_averages()})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--side', choices=('crf_lr', 'torch'), required=True)
    parser.add_argument('--precision', choices=('float32', 'bfloat16'), default='float32')
    parser.add_argument('--head', choices=('crf', 'softmax'), default='crf')
    parser.add_argument('--threads', type=int, default=os.cpu_count())
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--top', type=int, default=15)
    parser.add_argument('--data-dir', default=None)
    args = parser.parse_args()
    from crf_lr.model.pretrained import packaged_source
    from crf_lr.data.splits import load_splits
    from e2e_job import prepare
    from e2e_worker import make_side
    data = load_splits('conll2003', data_dir=args.data_dir, train_limit=32, eval_limit=1)
    job = prepare(data.train, data.test, data.types, data.units, packaged_source('minilm-en'),
                  'minilm-en', 1e-4, 1, 0, batch1_sentences=1)
    side = make_side(job, dict(side=args.side, head=args.head, precision=args.precision,
                               threads=args.threads))
    parts = (keras_parts if args.side == 'crf_lr' else torch_parts)(side, job['step_batch'])
    timings = interleaved(parts, rounds=args.rounds, warmup=1)
    print(json.dumps({k: {m: v[m] for m in ('median_ms', 'min_ms', 'max_ms')}
                      for k, v in timings.items()}), flush=True)
    kinds = (keras_op_kinds if args.side == 'crf_lr' else torch_op_kinds)(parts['step'], 3)
    total = sum(kinds.values())
    print(json.dumps(dict(vars(args), op_ms_per_step=round(total, 1),
                          top_ops=[(name, round(ms, 1), round(100 * ms / total, 1))
                                   for name, ms in kinds.most_common(args.top)],
                          load_average=[round(x, 2) for x in os.getloadavg()])))


if __name__ == '__main__':
    main()
