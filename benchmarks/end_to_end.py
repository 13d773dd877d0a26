"""End to end against what users would pick instead: crf_lr (``examples/task_ner.py``'s model) and
Hugging Face ``transformers`` + ``pytorch-crf`` on the same CPU, encoder weights, data, batches,
labels, order, head initialisation, optimiser settings and thread count.

    $ python benchmarks/end_to_end.py --quick   # CoNLL-2003 subset, CRF, no train_on_batch, 1 seed
                                                # (2.6 min of CPU time; 13.6 min wall at load 10)
    $ nice -n 19 python benchmarks/end_to_end.py   # CoNLL-2003 and MSRA, CRF and softmax, 3 seeds
    $ python benchmarks/end_to_end.py --report benchmarks/results/end_to_end.json   # the tables

Stacks: ``crf_lr train_steps`` (the scripts' loop, ``crf_lr.training.loop.train_steps``), ``crf_lr
train_on_batch`` (Keras's ``model.train_on_batch``, bert4keras style), ``crf_lr trace_once +
train_on_batch`` (the same after one ``crf_lr.training.loop.trace_once`` call) and ``PyTorch``
(``e2e_torch.py``). Corpora: CoNLL-2003 with the packaged MiniLM (``minilm-en``; transformers'
``BertModel``) and MSRA with the packaged ALBERT-tiny (``albert-tiny-zh``; ``AlbertModel``), a
fixed seeded training subset each (``crf_lr.data.splits.load_splits``), the first test sentences.
Precisions: float32, and bf16 where the CPU has native bf16
(``crf_lr.model.precision.native_bf16``): ``--precision mixed_bfloat16`` against
``torch.autocast('cpu', dtype=torch.bfloat16)``.

Every (stack, head, precision, seed) runs in a fresh process (``e2e_worker.py``, so peak RSS is its
own), the stacks interleaved in rounds (one round per seed, the order rotated each round). Threads:
``--threads`` (default: every core) for TensorFlow's intra- and inter-op pools and torch's
``set_num_threads`` / ``set_num_interop_threads``, and ``OMP_NUM_THREADS`` in every worker.
Reported per stack, as median [min–max] over the rounds: first epoch, steady epoch (the mean of
epochs 2..E), one training step on a fixed 32 x 128 batch, prediction throughput at batch 32 (all
test sentences) and batch 1 (the first 100; each the median of three timed passes after a warm
one), peak RSS of the process, strict test F1 after the same epochs. Results: ``--out`` (JSON,
default ``benchmarks/results/end_to_end.json``, or ``results/end_to_end.quick.json`` with
``--quick``), the Markdown table printed.

Needs the ``bench`` extra for the PyTorch side (``make bench`` installs it: torch's CPU build,
transformers, pytorch-crf); without it the PyTorch rows are left out and the run says so.
"""
import argparse
import datetime
import json
import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from e2e_torch import missing  # noqa: E402
from timing import cpu_name, machine  # noqa: E402

# corpus -> (packaged encoder, crf_lr's default rate for it: crf_lr.model.encoders.DEFAULT_LR)
CORPORA = {'conll2003': ('minilm-en', 1e-4), 'msra': ('albert-tiny-zh', 2e-4)}
STACKS = {'crf_lr train_steps': dict(side='crf_lr', step='train_steps'),
          'crf_lr train_on_batch': dict(side='crf_lr', step='train_on_batch'),
          'crf_lr trace_once + train_on_batch': dict(side='crf_lr', step='trace_once'),
          'PyTorch': dict(side='torch')}
FULL = dict(corpora=('conll2003', 'msra'), heads=('crf', 'softmax'), stacks=tuple(STACKS),
            seeds=(0, 1, 2), epochs=3, train_sentences=2000, test_sentences=1000, step_calls=5,
            predict_passes=3)
QUICK = dict(corpora=('conll2003',), heads=('crf',), stacks=('crf_lr train_steps', 'PyTorch'),
             seeds=(0,), epochs=2, train_sentences=200, test_sentences=200, step_calls=3,
             predict_passes=3)


def prepare_jobs(plan, data_dir, folder):
    """Write one job pickle per (corpus, seed) into ``folder``; returns {(corpus, seed): path}."""
    from crf_lr.model.pretrained import packaged_source
    from crf_lr.data.splits import load_splits
    from e2e_job import prepare
    paths = {}
    for corpus in plan['corpora']:
        encoder, lr = CORPORA[corpus]
        data = load_splits(corpus, data_dir=data_dir, train_limit=plan['train_sentences'],
                           eval_limit=plan['test_sentences'])
        for seed in plan['seeds']:
            job = prepare(data.train, data.test, data.types, data.units, packaged_source(encoder),
                          encoder, lr, plan['epochs'], seed)
            paths[corpus, seed] = os.path.join(folder, f'{corpus}-{seed}.pkl')
            with open(paths[corpus, seed], 'wb') as f:
                pickle.dump(job, f)
        print(f'{corpus}: {len(data.train)} training sentences ({job["train_windows"]} windows), '
              f'{len(data.test)} test sentences, encoder {encoder}, lr {lr}', flush=True)
    return paths


def run_worker(job_path, config, threads, omp_passive=False):
    """One worker process's result dict (``{'error': ...}`` when it failed)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               TF_CPP_MIN_LOG_LEVEL='2')
    if omp_passive:               # OpenMP threads sleep at barriers instead of spinning (torch's)
        env['OMP_WAIT_POLICY'] = 'PASSIVE'
    done = subprocess.run([sys.executable, os.path.join(HERE, 'e2e_worker.py'), job_path,
                           json.dumps(config)], env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode:
        return dict(config, error=done.stderr.strip().splitlines()[-1:] or ['no output'],
                    stderr_tail=done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(plan, stacks, precisions, threads, data_dir, omp_passive=False, progress=print):
    """Every worker of ``plan``, stacks interleaved round by round; returns the list of results
    (each with its corpus, seed, stack and test F1)."""
    from e2e_job import test_f1
    results = []
    with tempfile.TemporaryDirectory(prefix='crf_lr-e2e-') as folder:
        jobs = prepare_jobs(plan, data_dir, folder)
        cells = [(corpus, head, precision) for corpus in plan['corpora']
                 for head in plan['heads'] for precision in precisions]
        for r, seed in enumerate(plan['seeds']):
            for corpus, head, precision in cells:
                names = [s for s in stacks if not (head == 'softmax' and 'train_on_batch' in s)]
                for stack in names[r % len(names):] + names[:r % len(names)]:
                    config = dict(STACKS[stack], head=head, precision=precision,
                                  threads=threads, step_calls=plan['step_calls'],
                                  predict_passes=plan['predict_passes'])
                    result = run_worker(jobs[corpus, seed], config, threads, omp_passive)
                    result.update(corpus=corpus, seed=seed, stack=stack)
                    if 'error' not in result:
                        with open(jobs[corpus, seed], 'rb') as f:
                            result['test_f1'] = round(test_f1(pickle.load(f),
                                                              result.pop('paths')), 4)
                    results.append(result)
                    progress(summary_line(result))
    return results


def summary_line(result):
    """One progress line of a worker's result."""
    where = (f'{result["corpus"]} {result["head"]} {result["precision"]} seed {result["seed"]} '
             f'{result["stack"]}')
    if 'error' in result:
        return f'{where}: FAILED {result["error"]}'
    return (f'{where}: epochs {result["epoch_s"]} s, step {np.median(result["step_ms"]):.0f} ms, '
            f'predict {result["predict_sentences_per_s"]} sentences/s, '
            f'RSS {result["peak_rss_mb"]:.0f} MB, F1 {result["test_f1"]:.4f}')


METRICS = (('first epoch s', lambda r: r['epoch_s'][0], 2),
           ('steady epoch s', lambda r: np.mean(r['epoch_s'][1:]) if len(r['epoch_s']) > 1
            else float('nan'), 2),
           ('step ms (32 x 128)', lambda r: np.median(r['step_ms']), 0),
           ('predict sent/s, batch 32', lambda r: r['predict_sentences_per_s']['32'], 1),
           ('predict sent/s, batch 1', lambda r: r['predict_sentences_per_s']['1'], 1),
           ('peak RSS MB', lambda r: r['peak_rss_mb'], 0),
           ('test F1', lambda r: r['test_f1'], 4))


def cell(values, digits):
    """``median [min–max]`` of ``values`` (the median alone when there is one)."""
    values = np.asarray(values, np.float64)
    fmt = f'{{:.{digits}f}}'
    if values.size == 1:
        return fmt.format(values[0])
    return (fmt.format(np.median(values)) + ' [' + fmt.format(values.min()) + '–'
            + fmt.format(values.max()) + ']')


# (name, index of the metric in METRICS): crf_lr / PyTorch per round
RATIOS = (('step', 2), ('steady epoch', 1), ('first epoch', 0), ('predict, batch 32', 3),
          ('predict, batch 1', 4))


def ratio_table(ok):
    """Markdown lines: each crf_lr stack over PyTorch in the same round (seed), median [min–max]
    of the per-round ratios; [] without PyTorch rows."""
    torch = {(r['corpus'], r['head'], r['precision'], r['seed']): r for r in ok
             if r['stack'] == 'PyTorch'}
    keys = sorted({(r['corpus'], r['head'], r['precision'], r['stack']) for r in ok
                   if r['stack'] != 'PyTorch'},
                  key=lambda k: (k[0], k[1], k[2], list(STACKS).index(k[3])))
    lines = []
    for key in keys:
        pairs = [(r, torch[key[:3] + (r['seed'],)]) for r in ok
                 if (r['corpus'], r['head'], r['precision'], r['stack']) == key
                 and key[:3] + (r['seed'],) in torch]
        if not pairs:
            continue
        cells = [cell([METRICS[index][1](ours) / METRICS[index][1](theirs)
                       for ours, theirs in pairs], 2) for _, index in RATIOS]
        lines.append('| ' + ' | '.join(key) + ' | ' + ' | '.join(cells) + ' |')
    if not lines:
        return []
    return ['', 'crf_lr over PyTorch in the same round, median [min–max] of the per-round ratios '
            '(time: < 1 is faster; prediction: throughput, > 1 is faster):', '',
            '| corpus | head | precision | stack | ' + ' | '.join(name for name, _ in RATIOS)
            + ' |',
            '|---' * (4 + len(RATIOS)) + '|'] + lines


def report(saved):
    """The Markdown tables of a saved run (one row per corpus, head, precision and stack), then
    crf_lr over PyTorch per round."""
    ok = [r for r in saved['results'] if 'error' not in r]
    lines = [f'{cpu_name(saved["machine"])}, {saved["machine"]["nproc"]} cores, bf16 flags: '
             f'{", ".join(saved["bf16_flags"]) or "none"}; threads {saved["threads"]} per side '
             f'(OMP_WAIT_POLICY {saved.get("omp_wait_policy", "default")}); '
             f'{saved["rounds"]} round(s); load average {saved["load_average"]}; '
             f'command `{saved["command"]}`; {saved["versions"]}', '',
             '| corpus | head | precision | stack | '
             + ' | '.join(name for name, _, _ in METRICS) + ' |',
             '|---' * (4 + len(METRICS)) + '|']
    keys = sorted({(r['corpus'], r['head'], r['precision'], r['stack']) for r in ok},
                  key=lambda k: (k[0], k[1], k[2], list(STACKS).index(k[3])))
    for key in keys:
        rows = [r for r in ok if (r['corpus'], r['head'], r['precision'], r['stack']) == key]
        lines.append('| ' + ' | '.join(key) + ' | ' + ' | '.join(
            cell([get(r) for r in rows], digits) for _, get, digits in METRICS) + ' |')
    lines += ratio_table(ok)
    failed = [r for r in saved['results'] if 'error' in r]
    lines += [f'FAILED: {r["corpus"]} {r["head"]} {r["precision"]} {r["stack"]}: {r["error"]}'
              for r in failed]
    if saved.get('absent'):
        lines.append(f'PyTorch rows left out: {", ".join(saved["absent"])} not installed '
                     f'(pip install -e ".[bench]")')
    return '\n'.join(lines)


def versions():
    """Versions of the two stacks (those installed)."""
    import importlib.metadata as metadata
    found = []
    for name in ('tensorflow-cpu', 'tensorflow', 'tf-keras', 'bert4keras', 'torch', 'transformers',
                 'pytorch-crf'):
        try:
            found.append(f'{name} {metadata.version(name)}')
        except metadata.PackageNotFoundError:
            pass
    return ', '.join(found)


def save(results, path):
    """Write ``results`` as JSON atomically (temporary file in the same folder, fsync, replace)."""
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile('w', dir=folder, suffix='.tmp', delete=False,
                                     encoding='utf-8') as f:
        json.dump(results, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(f.name, 0o644)
    os.replace(f.name, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='CoNLL-2003, CRF, 1 seed: < 5 min')
    parser.add_argument('--data-dir', default=None, help='benchmark data (default $CRF_LR_DATA)')
    parser.add_argument('--threads', type=int, default=os.cpu_count(),
                        help='threads per side (default: every core, %(default)s)')
    parser.add_argument('--corpora', nargs='+', choices=sorted(CORPORA), default=None)
    parser.add_argument('--heads', nargs='+', choices=('crf', 'softmax'), default=None)
    parser.add_argument('--stacks', nargs='+', choices=list(STACKS), default=None,
                        help='(train_on_batch runs with the CRF head only)')
    parser.add_argument('--precisions', nargs='+', choices=('float32', 'bfloat16'), default=None,
                        help='(default: float32, and bfloat16 where the CPU has native bf16)')
    parser.add_argument('--seeds', type=int, nargs='+', default=None, help='one round per seed')
    parser.add_argument('--epochs', type=int, default=None)
    parser.add_argument('--train-sentences', type=int, default=None)
    parser.add_argument('--test-sentences', type=int, default=None)
    parser.add_argument('--omp-passive', action='store_true',
                        help="OMP_WAIT_POLICY=PASSIVE in the workers: on a loaded machine torch's "
                             "spinning OpenMP threads slow it 3x or more (TensorFlow's pools are "
                             "not OpenMP); leave it off on a quiet machine, as users run")
    parser.add_argument('--out', default=None, help='results JSON')
    parser.add_argument('--report', metavar='JSON', help='print the tables of a saved run and exit')
    args = parser.parse_args(argv)
    if args.report:
        with open(args.report, encoding='utf-8') as f:
            print(report(json.load(f)))
        return
    plan = dict(QUICK if args.quick else FULL)
    plan.update({k: v for k, v in vars(args).items() if k in plan and v is not None})
    if plan['epochs'] < 2:
        parser.error('--epochs must be >= 2 (the steady epoch is epochs 2..E)')
    from crf_lr.utils.cli import quiet_tensorflow
    quiet_tensorflow(native=argv is None)      # TensorFlow's C++ log lines off the console
    from crf_lr.model.precision import native_bf16
    flags = native_bf16()
    precisions = args.precisions or (('float32', 'bfloat16') if flags else ('float32',))
    absent = missing()
    stacks = [s for s in plan['stacks'] if not (absent and STACKS[s]['side'] == 'torch')]
    if absent:
        print(f'PyTorch side left out: {", ".join(absent)} not installed; install the bench '
              f'extra (make bench, or pip install -e ".[bench]")', flush=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    results = run(plan, stacks, precisions, args.threads, args.data_dir, args.omp_passive,
                  progress=lambda line: print(line, flush=True))
    given = sys.argv[1:] if argv is None else argv
    saved = dict(command=' '.join(['python', 'benchmarks/end_to_end.py'] + given),
                 started=started.isoformat(timespec='seconds'), machine=machine(),
                 bf16_flags=list(flags), threads=args.threads, rounds=len(plan['seeds']),
                 omp_wait_policy='PASSIVE' if args.omp_passive else 'default',
                 plan=plan, precisions=list(precisions), absent=absent, versions=versions(),
                 load_average=[round(x, 2) for x in os.getloadavg()], results=results)
    out = args.out or os.path.join(HERE, 'results', 'end_to_end'
                                   + ('.quick' if args.quick else '') + '.json')
    save(saved, out)
    print(f'\n{report(saved)}\n\nsaved to {out}')


if __name__ == '__main__':
    main()
