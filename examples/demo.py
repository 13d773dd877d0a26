#! -*- coding: utf-8 -*-
"""A short experiment 1 (what ``make demo`` runs): does the CRF need its own learning rate?

The first layer of the packaged Chinese ALBERT-tiny, one epoch on a seeded sample of People's
Daily 1998 sentences, with three heads at the main learning rate 1e-3: a CRF whose transitions
learn at the same rate (multiplier 1), a CRF whose transitions learn 100x faster, and a softmax.
Each is scored on the PKU test gold (its first 500 sentences) when the shared data is available
(--data-dir / CRF_LR_DATA), else on the PFR sentences held out of training for development.
Prints the results table and the two learned transition matrices with their sanity reports.

    python examples/demo.py                          # 2,000 sentences, a few minutes on 2 cores
    python examples/demo.py --train-limit 4000 --epochs 2
"""
import argparse
import json
import os
import time

CONFIGS = (('CRF, transitions lr x1', 'crf1', ['--head', 'crf', '--crf-lr-multiplier', '1']),
           ('CRF, transitions lr x100', 'crf100', ['--head', 'crf', '--crf-lr-multiplier', '100']),
           ('Softmax', 'softmax', ['--head', 'softmax']))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--data-dir', default=None,
                        help='shared data folder (default: $CRF_LR_DATA, else packaged PFR only)')
    parser.add_argument('--train-limit', type=int, default=2000, help='(default: %(default)s)')
    parser.add_argument('--eval-limit', type=int, default=500, help='(default: %(default)s)')
    parser.add_argument('--epochs', type=int, default=1, help='(default: %(default)s)')
    parser.add_argument('--encoder', default='albert-tiny-zh', help='(default: %(default)s)')
    parser.add_argument('--layers', type=int, default=1, help='(default: %(default)s)')
    parser.add_argument('--output', default='runs/demo', help='(default: %(default)s)')
    parser.add_argument('--verbose', action='store_true', help="show TensorFlow's log lines")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from crf_lr.utils.atomic import atomic_write
    from crf_lr.utils.cli import quiet_tensorflow
    from crf_lr.data.files import resolve_data_dir
    from crf_lr.training.run_folder import machine
    quiet_tensorflow(args.verbose, native=argv is None)
    from task_cws_crf import main as run_cws

    data_dir = resolve_data_dir(args.data_dir)     # without it the script holds out PFR sentences
    common = ['--encoder', args.encoder, '--layers', str(args.layers), '--lr', '1e-3',
              '--epochs', str(args.epochs), '--train-limit', str(args.train_limit),
              '--eval-limit', str(args.eval_limit), '--overwrite']
    common += ['--data-dir', data_dir] if data_dir else []
    common += ['--verbose'] if args.verbose else []
    rows, started = [], time.time()
    for name, folder, flags in CONFIGS:
        output = os.path.join(args.output, folder)
        print(f'\n=== {name} ===', flush=True)
        began = time.time()
        results = run_cws(common + flags + ['--output', output])
        rows.append((name, output, results, time.time() - began))

    last = rows[0][2]
    scored = last['splits']['test' if last.get('test') else 'dev']
    print(f'\nExperiment 1, short version: {last["encoder"]["encoder"]} first {args.layers} '
          f'layer(s), lr 1e-3, {args.epochs} epoch(s) on {last["train_sentences"]} sentences of '
          f"pku/train (People's Daily, January 1998; sample seed 0); scored on {scored}.")
    print(f'{machine()}; total {time.time() - started:.0f}s.\n')
    header = ('| head                      | F1 (constrained) | F1 unconstrained | OOV recall '
              '| sane tags | emission margin / transition spread | seconds |')
    print(header + '\n|' + '|'.join('-' * (len(c)) for c in header.split('|')[1:-1]) + '|')
    for name, output, results, seconds in rows:
        epoch = results['epochs'][-1]
        final = results['test'] or {k[4:]: v for k, v in epoch.items() if k.startswith('dev_')}
        sane = f'{epoch["sane_tags"]}/4' if 'sane_tags' in epoch else 'n/a'
        ratio = f'{epoch["margin_to_spread"]:.1f}' if 'margin_to_spread' in epoch else 'n/a'
        print(f'| {name:<26}| {final["f1"]:>16.4f} | {final["f1_unconstrained"]:>16.4f} '
              f'| {final["oov_recall"]:>10.4f} | {sane:>9} | {ratio:>35} | {seconds:>7.0f} |')
    for name, output, results, _ in rows[:2]:
        path = os.path.join(output, f'transitions_epoch{args.epochs}.txt')
        with open(path, encoding='utf-8') as f:
            print(f'\n{name} -- {path}:\n{f.read().rstrip()}')
    print(f'\nPer-epoch logs, results.json, saved models (python -m crf_lr.predict '
          f'{os.path.join(rows[0][1], "model")}) and heatmaps are under {args.output}/.')
    with atomic_write(os.path.join(args.output, 'demo.json')) as f:
        json.dump([dict(head=name, output=output, seconds=round(seconds, 1), test=results['test'],
                        **{k: v for k, v in results['epochs'][-1].items() if k != 'transitions'})
                   for name, output, results, seconds in rows], f, ensure_ascii=False, indent=1)
    return rows


if __name__ == '__main__':
    main()
