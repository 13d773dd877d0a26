"""Training and prediction inside a CPU quota: TensorFlow's thread pools as TensorFlow sizes them
(a thread a pool for every CPU the process may run on) against crf_lr's sizing
(:mod:`crf_lr.speed.threads`: the quota's cores), each in a fresh process inside a cgroup that
allows ``--quota`` cores' worth of CPU time, as ``docker run --cpus`` sets it (cgroup v1's ``cpu``
controller or v2; needs root and a writable cgroup file system).

Each worker times the 4-layer ALBERT-tiny-shaped training step (``models.probe_step``: batch 32,
n = 128, CRF head, float32; median of 5 after 2) and the packaged ALBERT-tiny ``Tagger`` with a
CRF head predicting 100 sentences one at a time (batch 1, as ``crf_lr.serve`` sees them; after 10
warm ones). ``--host-threads N`` gives TensorFlow's side N threads a pool, what it takes on an
N-core host, where this machine has fewer CPUs. Rounds interleave the sides.

    $ sudo python benchmarks/cpu_quota.py --quota 1 --rounds 3         # results/cpu_quota.json
    $ sudo python benchmarks/cpu_quota.py --quota 1 --host-threads 64  # as on a 64-core host
"""
import argparse
import contextlib
import datetime
import json
import os
import shlex
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
from predict_start import ranged  # noqa: E402
from timing import load_average, machine, write_lines  # noqa: E402

# importing crf_lr sizes a worker's pools to its quota where unset, before TensorFlow loads
from crf_lr.speed.threads import THREAD_VARIABLES, affinity_cores, cgroup_mounts  # noqa: E402

CHARS = '中共中央总书记国家主席江泽民发表新年讲话今天天气很好我们喜欢北京'


class NoCgroup(RuntimeError):
    """No cgroup with a CPU controller can be created here."""


@contextlib.contextmanager
def quota_cgroup(cores):
    """A new cgroup allowing ``cores`` cores' worth of CPU time a 100 ms period (v1's ``cpu``
    controller or v2, the first this process may create), as its folder (:func:`inside` starts a
    command in it). Removed at the end (empty by then).

    Raises:
        NoCgroup saying what is missing, where no cgroup with a CPU controller can be created.

        >>> with quota_cgroup(1) as folder:
        ...     subprocess.run(inside(folder, [sys.executable, 'job.py']))
    """
    quota_us = round(cores * 100000)
    for kind, _, point in cgroup_mounts():
        folder = os.path.join(point, f'crf_lr_quota_{os.getpid()}')
        name, value = (('cpu.max', f'{quota_us} 100000') if kind == 'v2'
                       else ('cpu.cfs_quota_us', str(quota_us)))
        try:
            os.mkdir(folder)
        except OSError:
            continue
        try:
            with open(os.path.join(folder, name), 'w') as f:
                f.write(value)
        except OSError:                      # v2 without the cpu controller in this subtree
            os.rmdir(folder)
            continue
        try:
            yield folder
        finally:
            os.rmdir(folder)
        return
    raise NoCgroup('no cgroup with a CPU controller can be created here: run as root on a '
                   'machine whose cgroup file system is writable')


def inside(folder, command):
    """``command`` (a list) started by a shell that first moves itself into the cgroup
    ``folder``."""
    return ['sh', '-c', 'echo $$ > "$0/cgroup.procs" && exec "$@"', folder] + list(command)


def worker():
    """One side's timings: {'threads': TensorFlow's two pool sizes, 'step_ms': [...],
    'predict_ms': [...] (one sentence each)}."""
    import models
    from crf_lr.compat import keras, tf
    from crf_lr.data.pieces import UnitEncoder
    from crf_lr.model.encoders import load_encoder
    from crf_lr.model.heads import make_head, piece_states
    from crf_lr.serving.tagger import Tagger
    threads = [int(os.environ.get(name) or affinity_cores())    # unset: TensorFlow's own
               for name in THREAD_VARIABLES]
    _, step = models.probe_step(tf, keras, 'CRF (crf_lr)', 'float32')
    step_ms = []
    for k in range(7):
        started = time.perf_counter()
        step()
        if k >= 2:
            step_ms.append((time.perf_counter() - started) * 1e3)
    keras.utils.set_random_seed(0)
    encoder, vocab, _ = load_encoder('albert-tiny-zh')
    head = make_head('crf', ['LOC', 'ORG', 'PER'], 'BIO')
    tagger = Tagger(keras.Model(encoder.inputs, head.build(piece_states(encoder))),
                    UnitEncoder(vocab), head, 128)
    rng = np.random.default_rng(0)
    texts = [''.join(rng.choice(list(CHARS), n)) for n in rng.integers(5, 60, 110)]
    predict_ms = []
    for k, text in enumerate(texts):
        started = time.perf_counter()
        tagger.predict([text])
        if k >= 10:
            predict_ms.append((time.perf_counter() - started) * 1e3)
    return dict(threads=threads, step_ms=step_ms, predict_ms=predict_ms)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quota', type=float, default=1.0, help="cores' worth of CPU time")
    parser.add_argument('--host-threads', type=int, default=None,
                        help="TensorFlow's side: this many threads a pool (default: the CPUs "
                             'this process may run on, what TensorFlow takes)')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--out', default=os.path.join(HERE, 'results', 'cpu_quota.json'))
    parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker()))
        return
    tensorflow_threads = str(args.host_threads or affinity_cores())
    base = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    sides = {"TensorFlow's": dict(base, **dict.fromkeys(THREAD_VARIABLES, tensorflow_threads)),
             "crf_lr's": base}
    runs = {side: [] for side in sides}
    load = [load_average()]
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')
    try:
        with quota_cgroup(args.quota) as folder:
            for _ in range(args.rounds):
                for side, environ in sides.items():
                    done = subprocess.run(inside(folder, [sys.executable, __file__, '--worker']),
                                          env=environ, capture_output=True, text=True, check=True)
                    runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    except NoCgroup as error:
        parser.error(str(error))
    load.append(load_average())
    print(f'quota {args.quota:g} cores, {args.rounds} rounds, load {load[0]}–{load[1]}\n')
    print("| thread pools | threads a pool | training step, ms | one sentence, ms |\n"
          '|---|---|---|---|')
    rows = []
    for side, done in runs.items():
        step = [np.median(r['step_ms']) for r in done]
        predict = [np.median(r['predict_ms']) for r in done]
        print(f'| {side} | {done[0]["threads"][0]} | {ranged(step, 0)} | {ranged(predict)} |')
        rows.append(dict(side=side, threads=done[0]['threads'], step_ms=step,
                         predict_ms=predict))
    ours = rows[1]
    for name in ('step_ms', 'predict_ms'):
        ratios = [a / b for a, b in zip(rows[0][name], ours[name])]
        print(f"{name}: TensorFlow's sizing over crf_lr's, same round: {ranged(ratios)}")
    command = 'python benchmarks/cpu_quota.py ' + ' '.join(shlex.quote(a) for a in sys.argv[1:])
    write_lines(args.out, [json.dumps(dict(
        command=command.strip(), started=started, machine=machine(), quota=args.quota,
        rounds=args.rounds,
        load_average=load, rows=rows))])


if __name__ == '__main__':
    main()
