"""Tables and plots of the finished runs of an experiment (from ``runs/<exp>/summary.jsonl``).

    python experiments/report.py exp2 > /tmp/exp2.md      # markdown tables; PNGs into docs/figures
    python experiments/report.py exp3 --export experiments/results/exp3.jsonl   # keep the runs
    python experiments/report.py exp3 --summary experiments/results/exp3.jsonl  # from that copy

Only runs that finished are counted, and each table says how many seeds it averages; settings
without a finished run are listed as missing, never filled in. ``--export`` writes the summaries
with every run's per-step training losses, so the tables and curves can be rebuilt without the
run folders (``experiments/results/`` holds the copies behind ``docs/results.md``). An export adds
to the file it writes: the runs already kept there (from an earlier machine) stay, this run
folder's replace those of the same name, and the tables cover them all.
"""
import argparse
import json
import os
import re
import shutil
from collections import defaultdict

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(path):
    """Finished-run summaries from a ``summary.jsonl``, the last one per run name, each with its
    ``step_losses`` (read from the run's ``log.jsonl`` beside the summary when not in the
    record)."""
    if not os.path.isfile(path):
        raise SystemExit(f'no finished runs yet: {path} does not exist')
    runs = {}
    with open(path, encoding='utf-8') as f:
        for line in f:
            record = test_scores_as_recorded_before(json.loads(line))
            runs[record['name']] = record
    for record in runs.values():
        if 'step_losses' not in record:
            log = os.path.join(os.path.dirname(path), record['name'], 'log.jsonl')
            if os.path.isfile(log):
                with open(log, encoding='utf-8') as f:
                    record['step_losses'] = [x for line in f
                                             for x in json.loads(line)['step_losses']]
    return list(runs.values())


def with_kept(path, runs):
    """``runs`` added to the summaries already kept in ``path`` (if any), a run of the same name
    replacing the kept one."""
    merged = {run['name']: run for run in (load(path) if os.path.isfile(path) else [])}
    merged.update((run['name'], run) for run in runs)
    return list(merged.values())


def test_scores_as_recorded_before(run):
    """A summary of the scripts since model selection moved to the development split, in the
    layout of the earlier summaries, so one report reads both; a summary already in that layout
    (as ``--export`` keeps it) comes back the same.

    Runs with ``--test-every-epoch`` log each epoch's test scores as ``test_*``, primary scores
    with the scheme's decoding constraints and ``test_*_unconstrained`` beside them. The earlier
    layout kept test scores unprefixed, unconstrained, with ``f1_constrained`` beside, and
    ``first_epoch`` was epoch 1's test F1. ``best_epoch`` and ``best`` stay the development
    split's choice (the earlier summaries, without ``dev_f1``, chose on test and pass unchanged).
    A run without test scores per epoch passes unchanged.
    """
    epochs = run.get('epochs', [])
    if not epochs or 'dev_f1' not in epochs[0]:
        return run
    if 'test_f1' in epochs[0]:
        epochs = [_unprefixed_test_scores(epoch) for epoch in epochs]
    if 'f1' not in epochs[0]:
        return run
    return dict(run, epochs=epochs, first_epoch=epochs[0]['f1'])


def _unprefixed_test_scores(epoch):
    test = {k[5:]: v for k, v in epoch.items() if k.startswith('test_')}
    if 'f1_unconstrained' in test:
        free = {k[:-len('_unconstrained')]: v for k, v in test.items()
                if k.endswith('_unconstrained')}
        test = dict({k: v for k, v in test.items() if not k.endswith('_unconstrained')},
                    **free, f1_constrained=test['f1'])
    return dict({k: v for k, v in epoch.items() if not k.startswith('test_')}, **test)


def mean_std(values):
    """'mean ± std (n)' in percent; a single value has no std."""
    values = [v for v in values if v is not None]
    if not values:
        return 'n/a'
    if len(values) == 1:
        return f'{100 * values[0]:.2f} (1 seed)'
    return f'{100 * np.mean(values):.2f} ± {100 * np.std(values, ddof=1):.2f}'


def selected_epoch(run):
    """The record of the epoch ``run`` selected (its saved model)."""
    return run['epochs'][run['best_epoch'] - 1]


def selected_epochs(runs):
    """'4, 6': the epoch each of ``runs`` selected."""
    return ', '.join(str(r['best_epoch']) for r in runs)


def grouped(runs):
    """{setting name without the seed: [runs]} in first-seen order."""
    groups = defaultdict(list)
    for run in runs:
        groups[run['name'].rsplit('/seed', 1)[0]].append(run)
    return groups


def scale_line(runs):
    wall = sum(r['wall_seconds'] for r in runs)
    finished = max((r['epochs'][-1].get('time', '') for r in runs), default='')
    begun = sorted(r['begun_from'] for r in runs if r.get('begun_from'))
    return (f'Machine: {runs[0]["machine"]}. {len(runs)} finished runs, {wall / 60:.0f} min of run '
            f'time summed over the runs'
            + (f', the last one finished {finished}' if finished else '')
            + '. Code: ' + ', '.join(sorted({r.get('code', 'not recorded') for r in runs})) + '.'
            + (f' Begun from the finished runs {", ".join(begun)} (`run.py --begin-from`): '
               f'their epochs up to where those stopped, and their code, are those runs\'; their '
               f'run time counts only the epochs after.' if begun else ''))


def report_exp1(runs, figures, folder):
    """The table of experiment 1: test F1 (decoded without constraints unless the column says
    so) after epoch 1 and at the epoch each run selected, and the seed-0 transition diagnostics;
    then the sanity figures and the seed-0 transition matrices of three settings."""
    lines = ['| encoder | setting | main lr | CRF lr | test F1 after epoch 1 | test F1, selected '
             'epoch | test F1, selected epoch, constrained decoding | selected epoch | sane tags '
             '(seed 0, last epoch) | emission margin / transition spread (seed 0, last epoch) | '
             'largest transition change from init (seed 0, last epoch) | seeds |',
             '|' + '---|' * 12]
    groups = grouped(runs)
    for name, members in groups.items():
        encoder, setting = name.split('/')
        config = members[0]['config']
        selected = [selected_epoch(r) for r in members]
        seed0 = _seed0_last_epoch(members)
        crf = config['head'] == 'crf'
        crf_lr = f'{config["lr"] * config["crf_lr_multiplier"]:g}' if crf else '—'
        sanity = _has_sanity(config)
        sane_tags = f'{seed0["sane_tags"]}/4' if sanity and 'sane_tags' in seed0 else '—'
        lines.append(
            f'| {encoder} | {setting} | {config["lr"]:g} | {crf_lr} '
            f'| {mean_std([r["epochs"][0].get("f1") for r in members])} '
            f'| {mean_std([e.get("f1") for e in selected])} '
            f'| {mean_std([e.get("f1_constrained") for e in selected])} '
            f'| {selected_epochs(members)} '
            f'| {sane_tags} '
            f'| {seed0["margin_to_spread"] if sanity else "—"} '
            f'| {seed0.get("transition_change", "—") if crf else "—"} | {len(members)} |')
    lines.append('')
    if any(r['config'].get('constrain') for r in runs):
        lines += ['Settings trained with the constraints (`--constrain`) have no sanity figures: '
                  'the impossible transitions are masked in training, get no gradient and keep '
                  'their initial values.', '']
    if any('dev_f1' not in r['epochs'][0] for r in runs):
        lines += ['Runs without development-split scores (before 2026-11-23) selected their '
                  'epoch on the test F1.', '']
    lines += _sanity_figures(groups, figures)
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


def _seed0_last_epoch(members):
    """The last epoch's record of the lowest seed among ``members``."""
    return min(members, key=lambda r: r['config']['seed'])['epochs'][-1]


def _has_sanity(config):
    """A CRF whose impossible transitions learn (not masked in training by ``--constrain``),
    so that their sanity means something."""
    return config['head'] == 'crf' and not config.get('constrain')


def transition_margins(groups):
    """{encoder: {setting label: {tag: margin}}}: each tag's weakest possible successor minus its
    strongest impossible one (> 0 is sane), from every CRF setting's seed-0 run's last epoch."""
    from crf_lr.evaluation.diagnostics import transition_sanity
    by_encoder = defaultdict(dict)
    for name, members in groups.items():
        epoch = _seed0_last_epoch(members)
        if 'transitions' in epoch and _has_sanity(members[0]['config']):
            encoder, setting = name.split('/')
            margins = transition_sanity(np.array(epoch['transitions']))
            label = f'{setting} (emission / transition {epoch["margin_to_spread"]:g})'
            by_encoder[encoder][label] = {tag: m['margin'] for tag, m in margins.items()}
    return by_encoder


def _sanity_figures(groups, figures):
    """One bar chart of :func:`transition_margins` per encoder."""
    by_encoder = transition_margins(groups)
    try:
        from crf_lr.evaluation.plots import plot_bars
    except ImportError as error:
        return [f'(no sanity figure: {error})', ''] if by_encoder else []
    lines = []
    for encoder, series in by_encoder.items():
        path = os.path.join(figures, f'exp1-{encoder}-sanity.png')
        plot_bars(series, path, ylabel='weakest possible minus strongest impossible',
                  title=f'Transition sanity per tag, {encoder} (seed 0, last epoch)')
        lines += [f'![transition sanity, {encoder}](figures/{os.path.basename(path)})', '']
    return lines


def last_f1(run):
    """The run's F1 after its last epoch (no epoch is chosen on the test data)."""
    return run['epochs'][-1]['f1']


def _later_epochs(run):
    """The epochs after the first (tracing and XLA compilation slow epoch 1), or all if one."""
    return run['epochs'][1:] or run['epochs']


def report_exp2(runs, figures, folder):
    lines = ['| dataset | head | strict F1 (last epoch) | relaxed F1 | head parameters | '
             'training speed (windows/s, vs CRF) | '
             'prediction speed (sentences/s, vs CRF) | seeds |',
             '|' + '---|' * 8]
    groups = grouped(runs)

    def speeds(members):
        epochs = [e for r in members for e in _later_epochs(r)]
        return (np.mean([e['train_windows_per_second'] for e in epochs]),
                np.mean([e['predict_sentences_per_second'] for e in epochs]))

    f1 = defaultdict(dict)
    for name, members in groups.items():
        dataset, head = name.split('/')
        f1[head][dataset] = 100 * np.mean([last_f1(r) for r in members])
        train, predict = speeds(members)
        crf = groups.get(f'{dataset}/crf')
        ratios = ('', '')
        if crf:
            crf_train, crf_predict = speeds(crf)
            ratios = (f' ({train / crf_train:.2f}x)', f' ({predict / crf_predict:.2f}x)')
        lines.append(f'| {dataset} | {head} | {mean_std([last_f1(r) for r in members])} '
                     f'| {mean_std([r["epochs"][-1]["relaxed_f1"] for r in members])} '
                     f'| {members[0]["head_parameters"]:,} | {train:.1f}{ratios[0]} '
                     f'| {predict:.1f}{ratios[1]} | {len(members)} |')
    try:
        from crf_lr.evaluation.plots import plot_bars
    except ImportError as error:
        return lines + ['', f'(no figure: {error})']
    path = plot_bars(dict(f1), os.path.join(figures, 'exp2-f1.png'),
                     ylabel='strict entity F1 (last epoch, mean over seeds)',
                     title='Experiment 2: heads on ALBERT-tiny')
    return lines + ['', f'![F1 per head](figures/{os.path.basename(path)})']


EXP2C_TITLES = {'exp2c': 'Experiment 2 to convergence',
                'exp2c-stop3': 'Experiment 2 to convergence, 3-epoch stop window'}


def report_exp2c(runs, figures, folder):
    """Experiment 2 to convergence: each run's dev-selected epoch, where it stopped, dev P/R/F1
    there (CRF also without decoding constraints), the test F1 of the selected model where the
    dataset has a labelled test part, speeds, the heads' order at each epoch budget
    (:func:`ordering_by_budget`), and the mean dev-F1 curve per head (epoch 2 marked: the budget
    of the fixed-scale experiment 2), drawn as ``<experiment>-<dataset>.png`` (``folder``'s name is
    the experiment's)."""
    lines = ['| dataset | head | selected epoch | stopped after | dev P | dev R | dev F1 | dev F1 '
             'without constraints | test F1 (selected model) | head parameters | training '
             'windows/s | prediction sentences/s | seeds |', '|' + '---|' * 13]
    curves, budgets = defaultdict(dict), defaultdict(dict)
    for name, members in grouped(runs).items():
        dataset, head = name.split('/')
        chosen = [selected_epoch(r) for r in members]
        budgets[dataset][head] = [_selected_f1(r) for r in members]

        def cell(key, records=chosen):
            return mean_std([r.get(key) for r in records])
        stopped = ', '.join(str(r.get('stopped_after_epoch', len(r['epochs']))) for r in members)
        tests = [r['test']['f1'] for r in members if r.get('test')]
        epochs = [e for r in members for e in _later_epochs(r)]
        lines.append(
            f'| {dataset} | {head} | {selected_epochs(members)} '
            f'| {stopped} | {cell("dev_precision")} | {cell("dev_recall")} | {cell("dev_f1")} '
            f'| {cell("dev_f1_unconstrained") if head == "crf" else "—"} '
            f'| {mean_std(tests) if tests else "no labelled test"} '
            f'| {members[0]["head_parameters"]:,} '
            f'| {np.mean([e["train_windows_per_second"] for e in epochs]):.1f} '
            f'| {np.mean([e["dev_predict_sentences_per_second"] for e in epochs]):.1f} '
            f'| {len(members)} |')
        length = min(len(r['epochs']) for r in members)      # epochs every seed reached
        curves[dataset][head] = [100 * np.mean([r['epochs'][k]['dev_f1'] for r in members])
                                 for k in range(length)]
    lines += ordering_by_budget(budgets)
    try:
        from crf_lr.evaluation.plots import plot_curves
    except ImportError as error:
        return lines + ['', f'(no figure: {error})']
    for dataset, series in curves.items():
        series = {head: series[head] for head in ORDER[::-1] if head in series}  # same colours
        marked = dict(series, **{'epoch 2 (fixed-scale experiment 2)': (
            [2, 2], [min(min(v) for v in series.values()), max(max(v) for v in series.values())])})
        experiment = os.path.basename(folder)                  # exp2c, exp2c-stop3
        path = plot_curves(marked, os.path.join(figures, f'{experiment}-{dataset}.png'),
                           xlabel='epoch', ylabel='dev strict F1 (mean over seeds)',
                           title=f'{EXP2C_TITLES[experiment]}: {dataset}',
                           styles={'epoch 2 (fixed-scale experiment 2)': 'k:'})
        lines += ['', f'![{dataset}: dev F1 per epoch](figures/{os.path.basename(path)})']
    return lines


def _selected_f1(run):
    """Per epoch k, the dev F1 of the model the run would have selected after k epochs (the best
    so far); a run that stopped early keeps its last value."""
    return np.maximum.accumulate([e['dev_f1'] for e in run['epochs']])


ORDER = ('efficient_global_pointer', 'global_pointer', 'crf')    # the claim: each >= the next


def ordering_by_budget(budgets):
    """Per dataset and epoch budget, the mean over seeds of each head's dev-selected F1
    (:func:`_selected_f1`) and whether Efficient GlobalPointer >= GlobalPointer >= CRF holds;
    Markdown lines. ``budgets``: dataset -> head -> list (seeds) of per-epoch arrays."""
    lines = ['', '| dataset | epochs | ' + ' | '.join(ORDER) + ' | '
             'efficient_global_pointer >= global_pointer >= crf |', '|' + '---|' * (len(ORDER) + 3)]
    for dataset, heads in budgets.items():
        if not all(head in heads for head in ORDER):
            continue
        longest = max(len(c) for head in ORDER for c in heads[head])
        for k in range(longest):
            means = [100 * np.mean([c[min(k, len(c) - 1)] for c in heads[head]]) for head in ORDER]
            holds = all(a >= b for a, b in zip(means, means[1:]))
            lines.append(f'| {dataset} | {k + 1} | ' + ' | '.join(f'{m:.2f}' for m in means)
                         + f' | {"yes" if holds else "no"} |')
    return lines


def report_parity(runs, figures, folder):
    """bf16 accuracy parity: per setting, the test F1 of each seed in float32 and in
    mixed_bfloat16 (median [min–max] over seeds), the bf16 − fp32 difference per seed, whether the
    bf16 median lies within the float32 seeds' range, and the steady training speed ratio."""
    lines = ['| task / setting | seeds | float32 test F1 | mixed_bfloat16 test F1 | bf16 − fp32 '
             'per seed (points) | bf16 median within the fp32 range | training speed bf16 / fp32 |',
             '|' + '---|' * 7]
    by_setting = defaultdict(dict)
    for name, members in grouped(runs).items():
        setting, precision = name.rsplit('/', 1)
        by_setting[setting][precision] = {r['config']['seed']: r for r in members}
    for setting, precisions in by_setting.items():
        fp32, bf16 = precisions.get('float32', {}), precisions.get('mixed_bfloat16', {})
        seeds = sorted(set(fp32) & set(bf16))
        if not seeds:
            lines.append(f'| {setting} | 0 | {len(fp32)} run(s) | {len(bf16)} run(s) | '
                         f'no seed finished in both | — | — |')
            continue
        a = [100 * fp32[s]['test']['f1'] for s in seeds]
        b = [100 * bf16[s]['test']['f1'] for s in seeds]

        def speed(members):
            return np.median([e['train_windows_per_second'] for r in members
                              for e in _later_epochs(r)])
        ratio = speed([bf16[s] for s in seeds]) / speed([fp32[s] for s in seeds])
        within = ('yes' if min(a) <= np.median(b) <= max(a) else 'no') if len(seeds) > 1 else \
            'one seed: no range'
        lines.append(f'| {setting} | {", ".join(map(str, seeds))} | {_ranged(a)} | {_ranged(b)} '
                     f'| {", ".join(f"{y - x:+.2f}" for x, y in zip(a, b))} | {within} '
                     f'| {ratio:.2f} |')
    return lines


def exp1_layer1_pairs(folder):
    """Experiment 1's layer-1 runs in float32 (``FOLDER/exp1``) and in mixed_bfloat16
    (``FOLDER/exp1-mixed_bfloat16``, ``run.py exp1 --precision mixed_bfloat16``), named as the
    parity experiment names its runs (``exp1/albert-L1/<setting>/<precision>/seed<s>``); none
    until both summaries exist.

        >>> report_parity(load(parity_summary) + exp1_layer1_pairs('runs'), figures, folder)
    """
    paths = {precision: os.path.join(folder, sub, 'summary.jsonl') for precision, sub in
             (('float32', 'exp1'), ('mixed_bfloat16', 'exp1-mixed_bfloat16'))}
    if not all(os.path.isfile(path) for path in paths.values()):
        return []
    runs = []
    for precision, path in paths.items():
        for record in load(path):
            if record['name'].startswith('albert-L1/'):
                setting, seed = record['name'].rsplit('/', 1)
                runs.append(dict(record, name=f'exp1/{setting}/{precision}/{seed}'))
    return runs


def _ranged(values):
    """'median [min–max]' (2 decimals); a single value alone."""
    if len(values) == 1:
        return f'{values[0]:.2f}'
    return f'{np.median(values):.2f} [{min(values):.2f}–{max(values):.2f}]'


def _smoothed(losses, width=10):
    losses = np.asarray(losses, dtype=float)
    kernel = np.ones(min(width, len(losses))) / min(width, len(losses))
    return np.convolve(losses, kernel, mode='valid')


def steps_to(curve, target, width=10):
    """Steps until the ``width``-step mean of ``curve`` first reaches ``target`` (None if never)."""
    below = np.nonzero(_smoothed(curve, width) <= target + 1e-12)[0]
    return int(below[0]) + min(width, len(curve)) if below.size else None


def _mean_curve(members):
    curves = [np.asarray(r['step_losses'], dtype=float) for r in members]
    return np.mean([c[:min(map(len, curves))] for c in curves], axis=0)


def _paired(with_bc, without_bc, key):
    """Differences (without - with bias correction) of ``key(run)`` over the seeds both have."""
    by_seed = {r['config']['seed']: r for r in with_bc}
    return [key(r) - key(by_seed[r['config']['seed']]) for r in without_bc
            if r['config']['seed'] in by_seed]


def report_exp3(runs, figures, folder):
    """Bias correction on / off side by side for every (dataset, rate, warmup, re-init) setting,
    with paired differences per seed and the steps each needs to reach the loss both reach."""
    pairs = defaultdict(dict)
    for name, members in grouped(runs).items():
        dataset, tag = name.split('/')
        setting, correction = tag.rsplit('-', 1)
        pairs[(dataset, setting)][correction] = members
    curves = {key: {correction: _mean_curve(members) for correction, members in sides.items()
                    if all('step_losses' in r for r in members)}
              for key, sides in pairs.items()}
    lines = ["Test F1 is the last epoch's (never chosen on the test set). 'Paired' is the mean ± "
             'std over seeds of F1 without minus F1 with bias correction, and how many seeds '
             'favour no correction. \'Steps\' is when the 10-step mean of the seed-averaged '
             'training loss first reaches the lowest level both settings of the pair reach.', '',
             '| dataset | lr | warmup | re-init top | F1, bias correction | F1, no bias correction '
             '| paired (no bc − bc) | F1 after epoch 1 (bc / no bc) | steps (bc / no bc) | seeds |',
             '|' + '---|' * 10]
    for (dataset, setting), sides in sorted(pairs.items(), key=_setting_key):
        bc, nobc = sides.get('bc', []), sides.get('nobc', [])
        config = (bc or nobc)[0]['config']
        diffs = _paired(bc, nobc, last_f1)
        paired = (f'{100 * np.mean(diffs):+.2f} ± {100 * np.std(diffs, ddof=1):.2f} '
                  f'({sum(d > 0 for d in diffs)}/{len(diffs)})' if len(diffs) > 1 else 'n/a')
        steps = 'n/a'
        if {'bc', 'nobc'} <= set(curves[(dataset, setting)]):
            both = [curves[(dataset, setting)][side] for side in ('bc', 'nobc')]
            target = max(_smoothed(c).min() for c in both)
            steps = ' / '.join(str(steps_to(c, target) or 'not reached') for c in both)
        first = ' / '.join(mean_std([r['epochs'][0]['f1'] for r in side]) for side in (bc, nobc))
        lines.append(f'| {dataset} | {config["lr"]:g} | {config["warmup_proportion"]:g} '
                     f'| {config["reinit_top"]} | {mean_std([last_f1(r) for r in bc])} '
                     f'| {mean_std([last_f1(r) for r in nobc])} | {paired} | {first} | {steps} '
                     f'| {len(bc)} / {len(nobc)} |')
    lines += _exp3_plots(pairs, curves, figures)
    return lines


def _setting_key(item):
    """Sort key of a ``((dataset, setting), sides)`` pair: dataset, warmup, re-init, rate."""
    (dataset, _), sides = item
    config = next(iter(sides.values()))[0]['config']
    return dataset, config['warmup_proportion'], config['reinit_top'], config['lr']


def _exp3_plots(pairs, curves, figures):
    """One loss-curve figure per dataset and warmup (the seed-mean ``curves`` of every pair, 10-step
    means): one colour per setting, solid with and dashed without bias correction."""
    try:
        from crf_lr.evaluation.plots import plot_curves
    except ImportError as error:
        return ['', f'(no loss plots: {error})']
    figures_of = defaultdict(dict)
    for (dataset, setting), sides in curves.items():
        warmup = next(iter(pairs[(dataset, setting)].values()))[0]['config']['warmup_proportion']
        for correction, curve in sides.items():
            figures_of[(dataset, warmup)][(setting, correction)] = _smoothed(curve)
    lines = []
    for (dataset, warmup), curves_of in sorted(figures_of.items()):
        colour = {setting: f'C{k % 10}'
                  for k, setting in enumerate(sorted({setting for setting, _ in curves_of}))}
        series, styles = {}, {}
        for (setting, correction), curve in sorted(curves_of.items()):
            label = f'{setting} {"bc" if correction == "bc" else "no bc"}'
            series[label] = curve
            styles[label] = colour[setting] + ('-' if correction == 'bc' else '--')
        path = os.path.join(figures, f'exp3-{dataset}-warmup{warmup:g}-loss.png')
        plot_curves(series, path, ylabel='training loss (10-step mean, mean over seeds)',
                    logy=True, styles=styles,
                    title=f'Experiment 3, {dataset}, warmup {warmup:g}: solid with, dashed '
                          f'without bias correction')
        lines += ['', f'![{dataset}, warmup {warmup:g}](figures/{os.path.basename(path)})']
    return lines


REPORTS = {'exp1': report_exp1, 'exp2': report_exp2, 'exp2c': report_exp2c,
           'exp2c-stop3': report_exp2c, 'exp3': report_exp3, 'parity': report_parity}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('experiment', choices=REPORTS)
    parser.add_argument('--runs', default=os.path.join(ROOT, 'runs'),
                        help='parent of the run folders (default: runs/)')
    parser.add_argument('--summary', default=None,
                        help='summary file to read (default: RUNS/EXPERIMENT/summary.jsonl)')
    parser.add_argument('--export', default=None,
                        help='also write the summaries, with per-step losses, to this file')
    parser.add_argument('--figures', default=os.path.join(ROOT, 'docs', 'figures'))
    args = parser.parse_args(argv)
    folder = os.path.join(args.runs, args.experiment)
    runs = load(args.summary or os.path.join(folder, 'summary.jsonl'))
    if args.experiment == 'parity' and not args.summary:     # the export keeps them
        runs += exp1_layer1_pairs(args.runs)
    if args.export:
        runs = with_kept(args.export, runs)
        os.makedirs(os.path.dirname(os.path.abspath(args.export)), exist_ok=True)
        with open(args.export + '.partial', 'w', encoding='utf-8') as f:
            for record in runs:
                f.write(json.dumps(record, ensure_ascii=False) + '\n')
        os.replace(args.export + '.partial', args.export)     # the kept runs, never half-written
    os.makedirs(args.figures, exist_ok=True)
    body = REPORTS[args.experiment](runs, args.figures, folder)
    print(scale_line(runs) + '\n')
    print('Commands (one per setting, as `experiments/run.py` started them; {s} = the seed):\n')
    for name, members in grouped(runs).items():
        command = re.sub(r'(--seed |/seed)\d+', r'\1{s}', members[0]['command'])
        command = re.sub(r'^python \S*/(examples/)', r'python \1', command)  # from any checkout
        seeds = ', '.join(str(r['config']['seed']) for r in members)
        print(f'    {command}    # seeds {seeds}')
    print('\n' + '\n'.join(body))
    return body


if __name__ == '__main__':
    main()
