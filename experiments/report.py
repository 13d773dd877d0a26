"""Tables and plots of the finished runs of an experiment (from ``runs/<exp>/summary.jsonl``).

    python experiments/report.py exp1 > /tmp/exp1.md      # markdown tables; PNGs into docs/figures

Only runs that finished are counted, and each table says how many seeds it averages; settings
without a finished run are listed as missing, never filled in.
"""
import argparse
import json
import os
import re
import shutil
from collections import defaultdict

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(folder):
    """Finished-run summaries, the last one per run name."""
    path = os.path.join(folder, 'summary.jsonl')
    if not os.path.isfile(path):
        raise SystemExit(f'no finished runs yet: {path} does not exist')
    runs = {}
    with open(path, encoding='utf-8') as f:
        for line in f:
            record = json.loads(line)
            runs[record['name']] = record
    return list(runs.values())


def mean_std(values):
    """'mean ± std (n)' in percent; a single value has no std."""
    values = [v for v in values if v is not None]
    if not values:
        return 'n/a'
    if len(values) == 1:
        return f'{100 * values[0]:.2f} (1 seed)'
    return f'{100 * np.mean(values):.2f} ± {100 * np.std(values, ddof=1):.2f}'


def grouped(runs):
    """{setting name without the seed: [runs]} in first-seen order."""
    groups = defaultdict(list)
    for run in runs:
        groups[run['name'].rsplit('/seed', 1)[0]].append(run)
    return groups


def scale_line(runs):
    first = runs[0]
    wall = sum(r['wall_seconds'] for r in runs)
    return (f'Machine: {first["machine"]}. {len(runs)} finished runs, {wall / 60:.0f} min of wall '
            f'time in total (one after another, machine shared with other jobs).')


def report_exp1(runs, figures, folder):
    lines = ['| encoder | setting | main lr | CRF lr | F1 after epoch 1 | best F1 | '
             'best F1, constrained decoding | sane tags (seed 0) | emission margin / '
             'transition spread (seed 0) | largest transition change from init (seed 0) | seeds |',
             '|' + '---|' * 11]
    groups = grouped(runs)
    for name, members in groups.items():
        encoder, setting = name.split('/')
        config = members[0]['config']
        best = [max(r['epochs'], key=lambda e: e['f1']) for r in members]
        seed0 = min(members, key=lambda r: r['config']['seed'])['epochs'][-1]
        crf = config['head'] == 'crf'
        crf_lr = f'{config["lr"] * config["crf_lr_multiplier"]:g}' if crf else '—'
        lines.append(
            f'| {encoder} | {setting} | {config["lr"]:g} | {crf_lr} '
            f'| {mean_std([r["first_epoch"] for r in members])} '
            f'| {mean_std([r["best"] for r in members])} '
            f'| {mean_std([b["f1_constrained"] for b in best])} '
            f'| {seed0.get("sane_tags", "—")}{"/4" if crf else ""} '
            f'| {seed0["margin_to_spread"] if crf else "—"} '
            f'| {seed0.get("transition_change", "—") if crf else "—"} | {len(members)} |')
    lines.append('')
    for name in [n for n in groups if n.endswith(('CRF-1', 'CRF-x1000', 'CRF-x100'))
                 and n.startswith('albert-L1')]:
        run = min(groups[name], key=lambda r: r['config']['seed'])
        epoch = run['epochs'][-1]['epoch']
        text = os.path.join(folder, run['name'], f'transitions_epoch{epoch}.txt')
        png = os.path.join(folder, run['name'], f'transitions_epoch{epoch}.png')
        if os.path.isfile(text):
            with open(text, encoding='utf-8') as f:
                lines += [f'{name}, seed {run["config"]["seed"]}, after epoch {epoch}:', '',
                          '```', f.read().rstrip(), '```', '']
        if os.path.isfile(png):
            target = os.path.join(figures, 'exp1-' + name.replace('/', '-') + '.png')
            shutil.copyfile(png, target)
            lines += [f'![{name}](figures/{os.path.basename(target)})', '']
    return lines


def report_exp2(runs, figures, folder):
    lines = ['| dataset | head | strict F1 | relaxed F1 | head parameters | training speed '
             '(windows/s, vs CRF) | prediction speed (sentences/s, vs CRF) | seeds |',
             '|' + '---|' * 8]
    groups = grouped(runs)
    for name, members in groups.items():
        dataset, head = name.split('/')
        best = [max(r['epochs'], key=lambda e: e['f1']) for r in members]
        train = np.mean([e['train_windows_per_second'] for r in members for e in r['epochs']])
        predict = np.mean([e['predict_sentences_per_second'] for r in members for e in r['epochs']])
        crf = groups.get(f'{dataset}/crf')
        ratio = ''
        if crf:
            ratio_train = train / np.mean([e['train_windows_per_second'] for r in crf
                                           for e in r['epochs']])
            ratio_predict = predict / np.mean([e['predict_sentences_per_second'] for r in crf
                                               for e in r['epochs']])
            ratio = (f' ({ratio_train:.2f}x)', f' ({ratio_predict:.2f}x)')
        lines.append(f'| {dataset} | {head} | {mean_std([r["best"] for r in members])} '
                     f'| {mean_std([b["relaxed_f1"] for b in best])} '
                     f'| {members[0]["head_parameters"]:,} | {train:.1f}{ratio and ratio[0]} '
                     f'| {predict:.1f}{ratio and ratio[1]} | {len(members)} |')
    return lines


def _smoothed(losses, width=10):
    losses = np.asarray(losses, dtype=float)
    kernel = np.ones(min(width, len(losses))) / min(width, len(losses))
    return np.convolve(losses, kernel, mode='valid')


def step_losses(folder, name):
    """Every training step's loss of a run, in order (from its ``log.jsonl``)."""
    with open(os.path.join(folder, name, 'log.jsonl'), encoding='utf-8') as f:
        return np.concatenate([json.loads(line)['step_losses'] for line in f])


def report_exp3(runs, figures, folder):
    groups = grouped(runs)
    curves = {name: [step_losses(folder, r['name']) for r in members]
              for name, members in groups.items()}
    mean_curves = {name: np.mean([c[:min(map(len, cs))] for c in cs], axis=0)
                   for name, cs in curves.items()}
    # the training loss every setting reaches: the highest of the settings' lowest smoothed losses
    target = max(_smoothed(c).min() for c in mean_curves.values()) if mean_curves else None
    lines = [f'Steps to reach the smoothed (10-step mean) training loss {target:.3f}, the level '
             f'every setting reaches:' if target is not None else '', '',
             '| setting | test F1 (best epoch) | test F1 (last epoch) | steps to the common '
             'training loss | seeds |', '|' + '---|' * 5]
    for name, members in groups.items():
        steps = 'n/a'
        if name in mean_curves:
            below = np.nonzero(_smoothed(mean_curves[name]) <= target + 1e-12)[0]
            steps = str(int(below[0]) + 10) if below.size else 'not reached'
        lines.append(f'| {name} | {mean_std([r["best"] for r in members])} '
                     f'| {mean_std([r["epochs"][-1]["f1"] for r in members])} | {steps} '
                     f'| {len(members)} |')
    try:
        from crf_lr.plots import plot_curves
        for dataset in sorted({n.split('/')[0] for n in mean_curves}):
            series = {n.split('/', 1)[1]: _smoothed(c) for n, c in mean_curves.items()
                      if n.startswith(dataset + '/')}
            path = os.path.join(figures, f'exp3-{dataset}-loss.png')
            plot_curves(series, path, ylabel='training loss (10-step mean, mean over seeds)',
                        title=f'Experiment 3, {dataset}', logy=True)
            lines += ['', f'![{dataset} training loss](figures/{os.path.basename(path)})']
    except ImportError as error:
        lines += ['', f'(no loss plot: {error})']
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('experiment', choices=('exp1', 'exp2', 'exp3'))
    parser.add_argument('--runs', default=os.path.join(ROOT, 'runs'))
    parser.add_argument('--figures', default=os.path.join(ROOT, 'docs', 'figures'))
    args = parser.parse_args(argv)
    folder = os.path.join(args.runs, args.experiment)
    runs = load(folder)
    os.makedirs(args.figures, exist_ok=True)
    body = {'exp1': report_exp1, 'exp2': report_exp2, 'exp3': report_exp3}[args.experiment](
        runs, args.figures, folder)
    print(scale_line(runs) + '\n')
    print('Commands (one per setting, as `experiments/run.py` started them; {s} = the seed):\n')
    for name, members in grouped(runs).items():
        command = re.sub(r'(--seed |/seed)\d+', r'\1{s}', members[0]['command'])
        seeds = ', '.join(str(r['config']['seed']) for r in members)
        print(f'    {command}    # seeds {seeds}')
    print('\n' + '\n'.join(body))


if __name__ == '__main__':
    main()
