"""Run the configurations of an experiment one after another, resumably.

    python experiments/run.py exp1 --data-dir /work/shared/data          # in the foreground
    nohup python experiments/run.py exp1 > runs/exp1.log 2>&1 &          # in the background
    python experiments/run.py exp1 --list                                # what would run

Each configuration is one task-script run in its own folder ``runs/<experiment>/<name>``; a
finished run is skipped, an interrupted one resumes from its last finished epoch (the scripts do
that themselves), so rerunning the same command continues where it stopped. Drivers started side
by side share the runs: each claims a run folder while it trains it. As each run finishes, its
summary is appended to ``runs/<experiment>/summary.jsonl``; ``experiments/report.py`` turns the
summaries into the tables of ``docs/results.md``, and ``report.py --export`` keeps them in
``experiments/results/<experiment>.jsonl``: a run recorded there with the same flags counts as
done too, so a new machine without the run folders goes on with the runs still missing
(``--kept``). The scripts import this checkout's ``crf_lr`` (ahead of any installed copy), and
each summary records its commit (``code``), so a fixed checkout (``git worktree add --detach
../expcode``) runs one version of the library throughout.

The configurations are ordered so that a run cut short still leaves a complete comparison: all
settings for the first seed, then the next seed, and so on (``--seeds`` and ``--only`` narrow it).
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Experiment 1: the CRF learning rate, PKU segmentation. Same seeded PFR sample, same epochs.
# Every experiment scores its test split after every epoch for the record (--test-every-epoch);
# the scripts still select their saved model on the development split (docs/results.md).
EXP1_SCALE = ['--train-limit', '2000', '--epochs', '2', '--maxlen', '128', '--batch-size', '16',
              '--test-every-epoch']
EXP1_SETTINGS = [  # name, main lr, CRF multiplier, head
    ('CRF-1', 1e-3, 1, 'crf'), ('CRF-2', 1e-3, 10, 'crf'), ('CRF-3', 1e-2, 1, 'crf'),
    ('Softmax', 1e-3, 1, 'softmax'), ('CRF-x100', 1e-3, 100, 'crf'),
    ('CRF-x1000', 1e-3, 1000, 'crf')]
# What the library adds on top of the seed's CRF-2 (10x): constraints in training (decoding always
# has them), start/end scores, 4 epochs. The later --epochs overrides EXP1_SCALE's.
EXP1_PLUS = [('CRF-2-plus', 1e-3, 10, 'crf', ['--constrain', '--boundary-scores', '--epochs', '4'])]
EXP1_FINETUNE = [('FT-1e-4-x1', 1e-4, 1), ('FT-1e-4-x1000', 1e-4, 1000), ('FT-1e-5-x1', 1e-5, 1),
                 ('FT-1e-5-x1000', 1e-5, 1000)]

# Experiment 2: CRF vs GlobalPointer vs Efficient GlobalPointer, ALBERT-tiny (4 layers). The CRF
# gets its own 100x rate (experiment 1; bert4keras's NER example uses 1000x): at 1x it would be
# compared with its transitions still near their random start.
EXP2_SCALE = ['--train-limit', '3000', '--eval-limit', '1000', '--epochs', '2', '--lr', '2e-4',
              '--crf-lr-multiplier', '100', '--test-every-epoch']
EXP2_DATASETS = ('cluener', 'cmeee', 'msra')
EXP2_HEADS = ('crf', 'global_pointer', 'efficient_global_pointer')


def exp2c_scale(stop_epochs):
    """Experiment 2 to convergence: the whole training sets, every dev sentence; stop once dev F1
    has risen by less than 0.3 points over ``stop_epochs`` epochs, at most 15 epochs."""
    return ['--epochs', '15', '--stop-gain', '0.003', '--stop-epochs', str(stop_epochs), '--lr',
            '2e-4', '--crf-lr-multiplier', '100']


EXP2C_SCALE = exp2c_scale(2)        # the rule
EXP2C_DATASETS = ('cluener', 'cmeee')
# experiment -> (datasets, stop window); exp2c-stop3: CMeEE's runs with a three-epoch window, the
# rule's sensitivity on that dataset's noisy dev curves
EXP2C_VARIANTS = {'exp2c': (EXP2C_DATASETS, 2), 'exp2c-stop3': (('cmeee',), 3)}

# bf16 accuracy parity: examples/demo.py's settings (ALBERT-tiny layer 1, PKU) and the 300-sentence
# MSRA default NER run per head, for every seed, each in float32 and in mixed_bfloat16.
PARITY_DEMO = ['--encoder', 'albert-tiny-zh', '--layers', '1', '--lr', '1e-3', '--epochs', '1',
               '--train-limit', '2000', '--eval-limit', '500']
PARITY_DEMO_HEADS = (('crf1', ['--head', 'crf', '--crf-lr-multiplier', '1']),
                     ('crf100', ['--head', 'crf', '--crf-lr-multiplier', '100']),
                     ('softmax', ['--head', 'softmax']))
PARITY_NER = ['--dataset', 'msra', '--train-limit', '300', '--epochs', '3']
PRECISIONS = ('float32', 'mixed_bfloat16')

# Experiment 3: few-sample fine-tuning, 400 seeded training sentences, CRF head, Adam with and
# without bias correction. Not a full factorial (that is 240 runs, ~4.5 h on 2 cores): blocks in
# priority order, each (dataset, encoder, rates, warmups, re-initialised top layers, seeds).
# ALBERT shares one layer across depths, so only the BERT-style MiniLM re-initialises top layers.
EXP3_SCALE = ['--train-limit', '400', '--eval-limit', '1000', '--epochs', '5', '--batch-size', '16',
              '--crf-lr-multiplier', '1', '--test-every-epoch']
EXP3_BLOCKS = (
    ('conll2003', 'minilm-en', (1e-4,), ('0',), (0, 1, 2), (0, 1, 2, 3, 4)),   # re-init x 5 seeds
    ('conll2003', 'minilm-en', (3e-5, 3e-4), ('0',), (0,), (0, 1, 2)),         # rate sweep
    ('msra', 'albert-tiny-zh', (1e-4,), ('0',), (0,), (0, 1, 2, 3, 4)),
    ('msra', 'albert-tiny-zh', (3e-5, 3e-4), ('0',), (0,), (0, 1, 2)),
    ('conll2003', 'minilm-en', (3e-5, 1e-4, 3e-4), ('0.1',), (0,), (0, 1, 2)),  # with warmup
    ('msra', 'albert-tiny-zh', (3e-5, 1e-4, 3e-4), ('0.1',), (0,), (0, 1, 2)),
)


def exp3_runs(seeds=None):
    """Experiment 3's runs, block by block (``seeds`` replaces every block's own seeds)."""
    runs = []
    for dataset, encoder, rates, warmups, reinits, block_seeds in EXP3_BLOCKS:
        for seed in seeds if seeds is not None else block_seeds:
            for lr in rates:
                for warmup in warmups:
                    for reinit in reinits:
                        for correction in (True, False):
                            tag = (f'lr{lr:g}-wu{warmup}-reinit{reinit}-'
                                   f'{"bc" if correction else "nobc"}')
                            runs.append((f'{dataset}/{tag}/seed{seed}', 'task_ner.py',
                                         EXP3_SCALE + ['--seed', str(seed), '--dataset', dataset,
                                                       '--encoder', encoder, '--head', 'crf',
                                                       '--lr', str(lr), '--warmup-proportion',
                                                       warmup, '--reinit-top', str(reinit)]
                                         + ([] if correction else ['--no-bias-correction'])))
    return runs


# exp3: each block's own seeds (EXP3_BLOCKS)
DEFAULT_SEEDS = {'exp1': '0,1,2', 'exp2': '0,1', 'exp2c': '0,1,2', 'exp2c-stop3': '0,1,2',
                 'parity': '0,1,2'}
EXPERIMENTS = ('exp1', 'exp2', 'exp2c', 'exp2c-stop3', 'exp3', 'parity')


def experiment(name, seeds=None):
    """The list of ``(run name, script, arguments)`` of an experiment, seed-major (exp3: block by
    block); ``seeds`` (list of ints) defaults to ``DEFAULT_SEEDS`` (exp3: the blocks' own)."""
    if name == 'exp3':
        return exp3_runs(seeds)
    runs = []
    for seed in seeds if seeds is not None else map(int, DEFAULT_SEEDS[name].split(',')):
        s = ['--seed', str(seed)]
        if name == 'exp1':
            for encoder, label, layers in (('albert-tiny-zh', 'albert-L1', '1'),
                                           ('random:1:312', 'random-L1', '1')):
                plus = EXP1_PLUS if label == 'albert-L1' else []
                for setting, lr, mult, head, *more in EXP1_SETTINGS + plus:
                    runs.append((f'{label}/{setting}/seed{seed}', 'task_cws_crf.py',
                                 EXP1_SCALE + s + ['--encoder', encoder, '--layers', layers,
                                                   '--lr', str(lr), '--crf-lr-multiplier',
                                                   str(mult), '--head', head]
                                 + [flag for flags in more for flag in flags]))
            for setting, lr, mult in EXP1_FINETUNE:
                runs.append((f'albert-L4/{setting}/seed{seed}', 'task_cws_crf.py',
                             EXP1_SCALE + s + ['--encoder', 'albert-tiny-zh', '--lr', str(lr),
                                               '--crf-lr-multiplier', str(mult)]))
        elif name == 'exp2':
            for dataset in EXP2_DATASETS:
                for head in EXP2_HEADS:
                    runs.append((f'{dataset}/{head}/seed{seed}', 'task_ner.py',
                                 EXP2_SCALE + s + ['--dataset', dataset, '--head', head]))
        elif name in EXP2C_VARIANTS:
            datasets, stop_epochs = EXP2C_VARIANTS[name]
            for dataset in datasets:
                for head in EXP2_HEADS:
                    runs.append((f'{dataset}/{head}/seed{seed}', 'task_ner.py',
                                 exp2c_scale(stop_epochs) + s
                                 + ['--dataset', dataset, '--head', head]))
        elif name == 'parity':
            for precision in PRECISIONS:
                p = ['--precision', precision]
                runs += [(f'demo/{label}/{precision}/seed{seed}', 'task_cws_crf.py',
                          PARITY_DEMO + flags + s + p) for label, flags in PARITY_DEMO_HEADS]
                runs += [(f'ner/{head}/{precision}/seed{seed}', 'task_ner.py',
                          PARITY_NER + ['--head', head] + s + p)
                         for head in EXP2_HEADS + ('softmax',)]
        else:
            raise SystemExit(f'unknown experiment {name!r}: expected one of '
                             f'{", ".join(EXPERIMENTS)}')
    return runs


def finished(output, epochs):
    """True if the run folder holds ``epochs`` finished epochs, or a run that stopped early, and
    the final test of the selected model (``test``, None where the dataset has no labelled test
    split): a run cut short between its last epoch and that test is not finished."""
    try:
        with open(os.path.join(output, 'results.json'), encoding='utf-8') as f:
            results = json.load(f)
        return 'test' in results and (len(results['epochs']) >= epochs
                                      or 'stopped_after_epoch' in results)
    except (OSError, ValueError, KeyError):
        return False


def kept_flags(path):
    """Run name -> the flags it ran with, from the summaries kept in ``path`` (``report.py
    --export``; their command without ``python <script>``, ``--data-dir`` and ``--output``);
    empty if it is missing or ``path`` is empty."""
    if not path or not os.path.isfile(path):
        return {}
    with open(path, encoding='utf-8') as f:
        records = [json.loads(line) for line in f if line.strip()]
    return {record['name']: _flags_of(record.get('command', '')) for record in records}


def _flags_of(command):
    words = shlex.split(command)[2:]
    placed = {k + step for k, word in enumerate(words) if word in ('--data-dir', '--output')
              for step in (0, 1)}
    return [word for k, word in enumerate(words) if k not in placed]


def epochs_of(flags):
    """The ``--epochs`` a run asks for (the last one given wins, as in argparse)."""
    return int(flags[len(flags) - 1 - flags[::-1].index('--epochs') + 1])


CLAIM = 'driver.pid'     # in a run folder while a driver trains it
BEGUN_FROM = 'begun_from.txt'    # in a run folder begun from another run: that run's folder


def claim(output):
    """Claim a run folder for this driver, so that drivers started side by side share the runs
    instead of training the same one. False when another live driver holds it; the claim of a
    driver that died is taken over."""
    path = os.path.join(output, CLAIM)
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            with open(path, encoding='utf-8') as f:
                os.kill(int(f.read()), 0)          # raises if no such process
            return False
        except PermissionError:                    # alive, someone else's
            return False
        except (ValueError, ProcessLookupError, FileNotFoundError):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            return claim(output)
    with os.fdopen(descriptor, 'w', encoding='utf-8') as f:
        f.write(str(os.getpid()))
    return True


def begin_from(source, output):
    """Begin the run in ``output`` from the finished run in ``source``: its record, epochs,
    checkpoint and best model, not its results (so the run is not finished yet). The task script
    then resumes it, and refuses if the two runs' arguments differ in more than a resumed run may
    change (``crf_lr.training.run_folder.RESUMABLE_CHANGES``: the epochs, the stop rule);
    ``BEGUN_FROM`` names ``source``. False, copying nothing, where ``source`` has no checkpoint or
    ``output`` has begun already.

        >>> begin_from('runs/exp2c/cmeee/crf/seed1', 'runs/exp2c-stop3/cmeee/crf/seed1')
    """
    if (not os.path.isfile(os.path.join(source, 'checkpoint', 'last.index'))
            or os.path.exists(os.path.join(output, 'log.jsonl'))):
        return False
    shutil.copytree(source, output, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns('results.json', 'log.jsonl', CLAIM))
    with open(os.path.join(output, BEGUN_FROM), 'w', encoding='utf-8') as f:
        f.write(source)
    shutil.copy2(os.path.join(source, 'log.jsonl'), output)     # last: it marks the run begun
    return True


def start(name, script, flags, output, data_dir, epochs, heading):
    """Run one configuration to the end (resuming it if it was interrupted); its summary, or None
    if it failed."""
    command = [sys.executable, os.path.join(ROOT, 'examples', script), *flags,
               '--data-dir', data_dir, '--output', output]
    print(heading, flush=True)
    started = time.time()
    # this checkout's crf_lr first, before any installed (or editable) copy of another checkout
    path = os.pathsep.join([ROOT] + [p for p in [os.environ.get('PYTHONPATH')] if p])
    with open(os.path.join(output, 'stdout.log'), 'a', encoding='utf-8') as log:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT,
                               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=path))
    if code != 0 or not finished(output, epochs):
        print(f'  failed (exit {code}); see {output}/stdout.log', flush=True)
        return None
    with open(os.path.join(output, 'results.json'), encoding='utf-8') as f:
        results = json.load(f)
    return dict(name=name, script=script, wall_seconds=round(time.time() - started, 1),
                code=code_version(), **{k: v for k, v in results.items() if k != 'metric'})


def code_version():
    """The checkout's commit, with ``+changes`` when its library or scripts differ from it."""
    def git(*args):
        done = subprocess.run(['git', '-C', ROOT, *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ''
    commit = git('rev-parse', '--short=10', 'HEAD') or 'unknown'
    return commit + ('+changes' if git('status', '--porcelain', 'crf_lr', 'examples') else '')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('experiment', choices=EXPERIMENTS)
    parser.add_argument('--data-dir', default=os.environ.get('CRF_LR_DATA'),
                        help='shared data folder (default: $CRF_LR_DATA)')
    parser.add_argument('--seeds', default=None,
                        help='comma-separated (default: exp1, exp2c, parity 0,1,2; exp2 0,1; '
                             'exp3 each block\'s own, see EXP3_BLOCKS)')
    parser.add_argument('--only', default='', help='run only names containing this string')
    parser.add_argument('--output', default=os.path.join(ROOT, 'runs'),
                        help='parent folder of the run folders (default: runs/)')
    parser.add_argument('--precision', choices=('float32', 'mixed_bfloat16', 'auto'),
                        default='float32',
                        help='passed to every run; other than float32, the runs go to '
                             'runs/<experiment>-<precision>/ (default: %(default)s; the parity '
                             'experiment sets each run\'s own)')
    parser.add_argument('--kept', default=None,
                        help='summaries kept in the repository; a run recorded there with the '
                             'same flags is done '
                             '(default: experiments/results/<experiment>[-<precision>].jsonl; '
                             "'' runs everything again)")
    parser.add_argument('--begin-from', default=None, metavar='EXPERIMENT',
                        help='begin each run not yet started from the run of the same name in '
                             'OUTPUT/EXPERIMENT (its epochs, checkpoint and best model), where the '
                             'two differ only in the epochs or the stop rule: exp2c-stop3 '
                             '--begin-from exp2c goes on from where the two-epoch window stopped')
    parser.add_argument('--list', action='store_true', help='print the runs and exit')
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(',')] if args.seeds else None
    runs = [(name, script, flags + (['--precision', args.precision]
                                    if args.precision != 'float32' else []))
            for name, script, flags in experiment(args.experiment, seeds) if args.only in name]
    folder = os.path.join(args.output, args.experiment + (
        '' if args.precision == 'float32' else f'-{args.precision}'))
    if args.list:
        for name, script, flags in runs:
            print(name, script, ' '.join(flags))
        return runs
    if not args.data_dir:
        parser.error('the experiments need the shared data: pass --data-dir or set CRF_LR_DATA')
    kept_path = args.kept if args.kept is not None else os.path.join(
        ROOT, 'experiments', 'results', os.path.basename(folder) + '.jsonl')
    kept = kept_flags(kept_path)
    done = {name for name, _, flags in runs if kept.get(name) == flags}
    for name in sorted(kept.keys() & {name for name, _, _ in runs} - done):
        print(f'{name}: kept with other flags ({" ".join(kept[name])}); running it again',
              flush=True)
    if done:
        print(f'{len(done)} of {len(runs)} runs already kept in {kept_path}', flush=True)
    os.makedirs(folder, exist_ok=True)
    for k, (name, script, flags) in enumerate(runs, 1):
        output = os.path.join(folder, name)
        epochs = epochs_of(flags)
        if name in done or finished(output, epochs):
            continue
        os.makedirs(output, exist_ok=True)
        if not claim(output):
            print(f'[{time.strftime("%H:%M:%S")}] {k}/{len(runs)} {name}: another driver runs it',
                  flush=True)
            continue
        try:
            if finished(output, epochs):   # finished by another driver since the check above
                continue
            if args.begin_from and not os.path.exists(os.path.join(output, 'log.jsonl')):
                source = os.path.join(args.output, args.begin_from, name)
                if os.path.isdir(source) and not finished(source, 0):
                    print(f'[{time.strftime("%H:%M:%S")}] {k}/{len(runs)} {name}: {source} has '
                          f'not finished; skipped', flush=True)
                    continue
                begin_from(source, output)
            summary = start(name, script, flags, output, args.data_dir, epochs,
                            f'[{time.strftime("%H:%M:%S")}] {k}/{len(runs)} {name}')
        finally:
            os.remove(os.path.join(output, CLAIM))
        if summary is None:
            continue
        if os.path.exists(os.path.join(output, BEGUN_FROM)):  # wall time: this run's epochs only
            with open(os.path.join(output, BEGUN_FROM), encoding='utf-8') as f:
                summary['begun_from'] = os.path.relpath(f.read(), args.output)
        with open(os.path.join(folder, 'summary.jsonl'), 'a', encoding='utf-8') as f:
            f.write(json.dumps(summary, ensure_ascii=False) + '\n')
        print(f'  done in {summary["wall_seconds"]:.0f}s: best {summary["best"]:.4f} '
              f'(epoch 1: {summary["first_epoch"]:.4f})', flush=True)
    return runs


if __name__ == '__main__':
    main()
