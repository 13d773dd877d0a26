"""The experiment driver and its report, without training anything.

Oracles: every configuration the driver would start is accepted by its task script's own argument
parser; experiment 3 pairs every setting with and without bias correction over the same seeds;
the report's paired differences and steps-to-loss equal values worked out by hand on synthetic
summaries, and a report rebuilt from its exported copy is identical.
"""
import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers.paths import REPO

ROOT = str(REPO)


def load(folder, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, folder, f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run = load('experiments', 'run')
report = load('experiments', 'report')


@pytest.mark.parametrize('name', run.EXPERIMENTS)
def test_every_configuration_parses(name):
    assert name in report.REPORTS, 'every experiment the driver runs has a report'
    scripts = {s: load('examples', s[:-3]) for s in ('task_cws_crf.py', 'task_ner.py')}
    runs = run.experiment(name)
    assert len({r[0] for r in runs}) == len(runs), 'run names must be unique'
    for run_name, script, flags in runs:
        args = scripts[script].parse_args(flags + ['--output', 'unused'])
        assert f'seed{args.seed}' in run_name


def test_exp3_design():
    runs = run.experiment('exp3')
    settings = Counter()
    for name, _, flags in runs:
        dataset, tag, seed = name.split('/')
        setting, correction = tag.rsplit('-', 1)
        settings[(dataset, setting, seed)] += 1
        assert ('--no-bias-correction' in flags) == (correction == 'nobc')
        reinit = int(flags[flags.index('--reinit-top') + 1])
        assert reinit == 0 or flags[flags.index('--encoder') + 1] == 'minilm-en'
    assert set(settings.values()) == {2}, 'each setting runs with and without bias correction'
    rates = {float(f[f.index('--lr') + 1]) for _, _, f in runs}
    assert max(rates) / min(rates) >= 10 - 1e-9
    minilm_grid = [n for n in settings if n[0] == 'conll2003' and n[1].startswith('lr0.0001-wu0-')]
    assert len(minilm_grid) == 3 * 5, 're-init 0/1/2 x 5 seeds'
    assert {n[1].split('-wu')[1].split('-')[0] for n in settings} == {'0', '0.1'}
    assert {n[2] for n in settings if n[0] == 'msra'} == {f'seed{s}' for s in range(5)}
    assert {name.rsplit('/', 1)[1] for name, _, _ in run.experiment('exp3', seeds=[7])} == {'seed7'}


def test_steps_to():
    curve = [5, 4, 3, 2, 1, 1, 1]
    # 2-step means: 4.5 3.5 2.5 1.5 1 1 -> first <= 1.5 is the 4th mean, ending at step 5
    assert report.steps_to(curve, 1.5, width=2) == 5
    assert report.steps_to(curve, 0.5, width=2) is None


def _summary(dataset, lr, correction, seed, f1s, losses):
    setting = f'lr{lr:g}-wu0-reinit0-{"bc" if correction else "nobc"}'
    return dict(name=f'{dataset}/{setting}/seed{seed}', command=f'python x --seed {seed}',
                machine='m', wall_seconds=1.0, best=max(f1s),
                config=dict(lr=lr, warmup_proportion=0.0, reinit_top=0, seed=seed,
                            bias_correction=correction),
                epochs=[dict(epoch=i + 1, f1=f) for i, f in enumerate(f1s)],
                step_losses=list(losses))


@pytest.fixture
def exp3_summaries():
    # with bias correction the loss falls linearly 3 -> 0.5 in 40 steps; without, twice as fast
    # and then flat. Seed 1's curves are seed 0's, so the seed means are these curves.
    slow = np.linspace(3.0, 0.5, 40)
    fast = np.concatenate([np.linspace(3.0, 0.5, 20), np.full(20, 0.5)])
    return [_summary('conll2003', 1e-4, True, 0, [0.5, 0.70], slow),
            _summary('conll2003', 1e-4, True, 1, [0.5, 0.60], slow),
            _summary('conll2003', 1e-4, False, 0, [0.6, 0.75], fast),
            _summary('conll2003', 1e-4, False, 1, [0.6, 0.55], fast)]


def test_exp3_report_pairs_seeds(exp3_summaries, tmp_path):
    lines = report.report_exp3(exp3_summaries, str(tmp_path), str(tmp_path))
    row = next(line for line in lines if line.startswith('| conll2003 |'))
    cells = [c.strip() for c in row.strip('|').split('|')]
    assert cells[4] == '65.00 ± 7.07' and cells[5] == '65.00 ± 14.14'
    # paired differences +5 and -5 points: mean 0, std 7.07, one seed of two favours no correction
    assert cells[6] == '+0.00 ± 7.07 (1/2)'
    # common level = the slow curve's lowest 10-step mean, 3 - 2.5 * 34.5 / 39 = 0.7885: the slow
    # curve reaches it only in its last window (step 40); the fast one in the window of steps
    # 14..23, whose mean is (sum of its values at 13..19 + 3 * 0.5) / 10 = 0.7763
    assert cells[8] == '40 / 23'
    assert any(os.path.basename(p).startswith('exp3-conll2003') for p in os.listdir(tmp_path))


def test_report_rebuilds_from_its_export(exp3_summaries, tmp_path, capsys):
    folder = tmp_path / 'runs' / 'exp3'
    folder.mkdir(parents=True)
    with open(folder / 'summary.jsonl', 'w', encoding='utf-8') as f:
        for record in exp3_summaries:
            f.write(json.dumps(record) + '\n')
    export = tmp_path / 'copy.jsonl'
    first = report.main(['exp3', '--runs', str(tmp_path / 'runs'), '--export', str(export),
                         '--figures', str(tmp_path / 'fig')])
    again = report.main(['exp3', '--summary', str(export), '--figures', str(tmp_path / 'fig')])
    assert first == again
    assert '--seed {s}' in capsys.readouterr().out


def test_exp1_report_sanity_margins(tmp_path):
    # rows from s, b, m, e; columns to s, b, m, e. Impossible: s->m s->e b->s b->b m->s m->b
    # e->m e->e. Row s: possible {s: 0.5, b: 1.0}, impossible {m: 0.2, e: 0.9} -> 0.5 - 0.9 = -0.4.
    trans = [[0.5, 1.0, 0.2, 0.9],
             [-2.0, -1.0, 2.0, 3.0],      # b: min(2, 3) - max(-2, -1) = 3.0
             [-1.0, -3.0, 1.5, 1.0],      # m: 1.0 - (-1.0) = 2.0
             [0.0, 0.5, -1.0, -0.5]]      # e: 0.0 - (-0.5) = 0.5
    config = dict(lr=1e-3, crf_lr_multiplier=10, head='crf', seed=0)
    epoch = dict(epoch=1, f1=0.9, f1_constrained=0.91, sane_tags=3, margin_to_spread=0.5,
                 transition_change=1.0, transitions=trans)
    runs = [dict(name='albert-L1/CRF-2/seed0', command='python x --seed 0', machine='m',
                 wall_seconds=1.0, config=config, epochs=[epoch], best=0.9, best_epoch=1,
                 first_epoch=0.9)]
    margins = report.transition_margins(report.grouped(runs))
    assert margins['albert-L1']['CRF-2 (emission / transition 0.5)'] == pytest.approx(
        dict(s=-0.4, b=3.0, m=2.0, e=0.5))
    lines = report.report_exp1(runs, str(tmp_path), str(tmp_path))
    assert '| albert-L1 | CRF-2 | 0.001 | 0.01 | 90.00 (1 seed) |' in '\n'.join(lines)
    assert os.path.isfile(tmp_path / 'exp1-albert-L1-sanity.png')


def test_exp1_report_scores_the_epoch_chosen_on_dev_on_test(tmp_path):
    # dev chooses epoch 2, test peaks at epoch 1: the table reports epoch 1's test F1 first, then
    # epoch 2's (free Viterbi, then constrained), never a dev F1 or the best test epoch
    def epoch(k, dev, test, test_free):
        return dict(epoch=k, dev_f1=dev, test_f1=test, test_f1_unconstrained=test_free,
                    sane_tags=4, margin_to_spread=0.5, transition_change=1.0)
    record = dict(name='albert-L1/CRF-2/seed0', command='python x --seed 0', machine='m',
                  wall_seconds=1.0, config=dict(lr=1e-3, crf_lr_multiplier=10, head='crf', seed=0),
                  epochs=[epoch(1, 0.90, 0.85, 0.75), epoch(2, 0.95, 0.80, 0.70)], best=0.95,
                  best_epoch=2, first_epoch=0.90)
    run = report.test_scores_as_recorded_before(record)
    assert (run['best_epoch'], run['best'], run['first_epoch']) == (2, 0.95, 0.75)
    assert report.test_scores_as_recorded_before(run) == run, 'a kept (converted) summary'
    table = '\n'.join(report.report_exp1([run], str(tmp_path), str(tmp_path)))
    assert ('| albert-L1 | CRF-2 | 0.001 | 0.01 | 75.00 (1 seed) | 70.00 (1 seed) '
            '| 80.00 (1 seed) | 2 | 4/4 |') in table
    assert 'selected their epoch on the test F1' not in table
    masked = dict(run, name='albert-L1/CRF-2-plus/seed0',
                  config=dict(run['config'], constrain=True))
    table = '\n'.join(report.report_exp1([masked], str(tmp_path), str(tmp_path)))
    assert '| 2 | — | — | 1.0 | 1 |' in table, 'no sanity figures for masked transitions'


def test_exp1_report_reads_the_summaries_that_chose_on_test(tmp_path):
    epochs = [dict(epoch=1, f1=0.8, f1_constrained=0.82),
              dict(epoch=2, f1=0.9, f1_constrained=0.91)]
    run = dict(name='albert-L1/Softmax/seed0', command='python x --seed 0', machine='m',
               wall_seconds=1.0, config=dict(lr=1e-3, crf_lr_multiplier=1, head='softmax', seed=0),
               epochs=epochs, best=0.9, best_epoch=2, first_epoch=0.8)
    assert report.test_scores_as_recorded_before(run) is run
    table = '\n'.join(report.report_exp1([run], str(tmp_path), str(tmp_path)))
    assert '| 80.00 (1 seed) | 90.00 (1 seed) | 91.00 (1 seed) | 2 | — |' in table
    assert 'selected their epoch on the test F1' in table


@pytest.mark.parametrize('results, done', [
    (dict(epochs=[{}, {}]), False),                         # cut short before its final test
    (dict(epochs=[{}, {}], test=dict(f1=0.9)), True),
    (dict(epochs=[{}, {}], test=None), True),               # no labelled test split
    (dict(epochs=[{}], test=dict(f1=0.9)), False),          # a shorter run, asked for more
    (dict(epochs=[{}], stopped_after_epoch=1, test=None), True)])
def test_a_run_is_finished_after_its_epochs_and_its_final_test(tmp_path, results, done):
    assert not run.finished(str(tmp_path), 2)
    (tmp_path / 'results.json').write_text(json.dumps(results))
    assert run.finished(str(tmp_path), 2) is done


def test_a_run_folder_is_claimed_by_one_live_driver(tmp_path):
    assert run.claim(str(tmp_path))
    assert not run.claim(str(tmp_path)), 'this (live) process holds the claim'
    dead = subprocess.Popen([sys.executable, '-c', 'pass'])
    dead.wait()
    (tmp_path / run.CLAIM).write_text(str(dead.pid))
    assert run.claim(str(tmp_path)), "a dead driver's claim is taken over"
    assert (tmp_path / run.CLAIM).read_text() == str(os.getpid())


def test_exp2_report_speed_ratios(tmp_path):
    def summary(dataset, head, seed, f1, train_speed, predict_speed):
        epochs = [dict(epoch=1, f1=0.0, relaxed_f1=0.0, train_windows_per_second=1.0,
                       predict_sentences_per_second=1.0),        # epoch 1 (tracing) is left out
                  dict(epoch=2, f1=f1, relaxed_f1=f1 + 0.1, train_windows_per_second=train_speed,
                       predict_sentences_per_second=predict_speed)]
        return dict(name=f'{dataset}/{head}/seed{seed}', epochs=epochs, head_parameters=1000,
                    config=dict(seed=seed))
    runs = [summary('msra', 'crf', 0, 0.80, 10.0, 100.0),
            summary('msra', 'crf', 1, 0.70, 30.0, 100.0),
            summary('msra', 'global_pointer', 0, 0.90, 30.0, 50.0)]
    lines = report.report_exp2(runs, str(tmp_path), str(tmp_path))
    assert ('| msra | crf | 75.00 ± 7.07 | 85.00 ± 7.07 | 1,000 | 20.0 (1.00x) | 100.0 (1.00x) '
            '| 2 |') in lines
    assert ('| msra | global_pointer | 90.00 (1 seed) | 100.00 (1 seed) | 1,000 | 30.0 (1.50x) '
            '| 50.0 (0.50x) | 1 |') in lines
    assert os.path.isfile(tmp_path / 'exp2-f1.png')


def test_exp2c_report_reads_the_dev_selected_epoch_and_where_each_run_stopped(tmp_path):
    def summary(head, seed, dev_f1, stopped=None, test=None):
        epochs = [dict(epoch=k + 1, dev_precision=f, dev_recall=f, dev_f1=f,
                       dev_f1_unconstrained=f - 0.1, train_windows_per_second=10.0,
                       dev_predict_sentences_per_second=100.0) for k, f in enumerate(dev_f1)]
        best = max(range(len(dev_f1)), key=dev_f1.__getitem__) + 1
        run = dict(name=f'cmeee/{head}/seed{seed}', epochs=epochs, best_epoch=best,
                   head_parameters=500, config=dict(seed=seed), test=test)
        return dict(run, stopped_after_epoch=stopped) if stopped else run
    runs = [summary('crf', 0, [0.5, 0.7, 0.6, 0.6], stopped=4, test=dict(f1=0.68)),
            summary('crf', 1, [0.5, 0.5, 0.9], test=dict(f1=0.88)),
            summary('global_pointer', 0, [0.2, 0.4], test=None)]
    lines = report.report_exp2c(runs, str(tmp_path), str(tmp_path / 'exp2c-stop3'))
    assert ('| cmeee | crf | 2, 3 | 4, 3 | 80.00 ± 14.14 | 80.00 ± 14.14 | 80.00 ± 14.14 '
            '| 70.00 ± 14.14 | 78.00 ± 14.14 | 500 | 10.0 | 100.0 | 2 |') in lines
    assert ('| cmeee | global_pointer | 2 | 2 | 40.00 (1 seed) | 40.00 (1 seed) | 40.00 (1 seed) '
            '| — | no labelled test | 500 | 10.0 | 100.0 | 1 |') in lines
    assert os.path.isfile(tmp_path / 'exp2c-stop3-cmeee.png')


def test_exp2c_ordering_compares_the_dev_selected_f1_at_each_epoch_budget():
    # seed-mean best-so-far dev F1; a stopped run keeps its last value
    budgets = {'cmeee': {'crf': [np.array([0.5, 0.7, 0.7])],
                         'global_pointer': [np.array([0.4, 0.6]), np.array([0.4, 0.8])],
                         'efficient_global_pointer': [np.array([0.3, 0.75, 0.8])]},
               'cluener': {'crf': [np.array([0.5])]}}                 # incomplete: left out
    assert report.ordering_by_budget(budgets)[3:] == [
        '| cmeee | 1 | 30.00 | 40.00 | 50.00 | no |',
        '| cmeee | 2 | 75.00 | 70.00 | 70.00 | yes |',
        '| cmeee | 3 | 80.00 | 70.00 | 70.00 | yes |']
    run = dict(epochs=[dict(dev_f1=f) for f in (0.5, 0.7, 0.6)])
    np.testing.assert_array_equal(report._selected_f1(run), [0.5, 0.7, 0.7])


def test_parity_pairs_every_run_with_its_bf16_twin():
    runs = run.experiment('parity')
    names = {name for name, _, _ in runs}
    for name, _, flags in runs:
        precision = flags[flags.index('--precision') + 1]
        assert f'/{precision}/' in name
        twin = name.replace('float32', 'mixed_bfloat16')
        assert precision != 'float32' or twin in names
    assert {n.split('/')[1] for n in names if n.startswith('ner/')} == {
        'crf', 'softmax', 'global_pointer', 'efficient_global_pointer'}


def test_parity_report_pairs_seeds_and_judges_against_the_fp32_range(tmp_path):
    def summary(precision, seed, f1, speed):
        return dict(name=f'demo/crf1/{precision}/seed{seed}', config=dict(seed=seed),
                    test=dict(f1=f1), epochs=[dict(epoch=1, train_windows_per_second=speed)])
    runs = [summary('float32', 0, 0.90, 10.0), summary('float32', 1, 0.92, 12.0),
            summary('float32', 2, 0.91, 11.0), summary('mixed_bfloat16', 0, 0.905, 5.0),
            summary('mixed_bfloat16', 1, 0.93, 6.0), summary('mixed_bfloat16', 2, 0.95, 5.5)]
    lines = report.report_parity(runs, str(tmp_path), str(tmp_path))
    assert ('| demo/crf1 | 0, 1, 2 | 91.00 [90.00–92.00] | 93.00 [90.50–95.00] '
            '| +0.50, +1.00, +4.00 | no | 0.50 |') in lines
    lines = report.report_parity(runs[:1] + runs[3:4], str(tmp_path), str(tmp_path))
    assert '| demo/crf1 | 0 | 90.00 | 90.50 | +0.50 | one seed: no range | 0.50 |' in lines


def test_parity_takes_experiment_1_layer_1_pairs_once_both_precisions_have_runs(tmp_path):
    def write(folder, names):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / 'summary.jsonl').write_text(''.join(
            json.dumps(dict(name=name, config=dict(seed=0), test=dict(f1=0.9), epochs=[])) + '\n'
            for name in names))
    write('exp1', ['albert-L1/CRF-1/seed0', 'random-L1/CRF-1/seed0'])
    assert report.exp1_layer1_pairs(str(tmp_path)) == []            # no bf16 runs yet
    write('exp1-mixed_bfloat16', ['albert-L1/CRF-1/seed0'])
    assert sorted(r['name'] for r in report.exp1_layer1_pairs(str(tmp_path))) == [
        'exp1/albert-L1/CRF-1/float32/seed0', 'exp1/albert-L1/CRF-1/mixed_bfloat16/seed0']


def test_runs_import_the_drivers_own_checkout_and_record_its_commit(tmp_path, monkeypatch):
    seen = {}

    def call(command, env, **kwargs):
        seen.update(command=command, env=env)
        return 1
    monkeypatch.setattr(run.subprocess, 'call', call)
    monkeypatch.setenv('PYTHONPATH', '/elsewhere')
    assert run.start('x/seed0', 'task_ner.py', ['--epochs', '1'], str(tmp_path), 'data', 1,
                     'x') is None
    assert seen['env']['PYTHONPATH'].split(os.pathsep) == [run.ROOT, '/elsewhere']
    assert seen['command'][1] == os.path.join(run.ROOT, 'examples', 'task_ner.py')
    import re
    assert re.fullmatch(r'([0-9a-f]{10}|unknown)(\+changes)?', run.code_version())


def test_the_driver_skips_runs_kept_in_the_repository(tmp_path, monkeypatch, capsys):
    started = []
    monkeypatch.setattr(run, 'start', lambda name, *args: started.append(name))
    (name, _, flags), (other, _, other_flags) = run.experiment('exp2', [0])[:2]
    kept = tmp_path / 'exp2.jsonl'
    kept.write_text(json.dumps(dict(name=name, command='python x ' + ' '.join(flags))) + '\n'
                    + json.dumps(dict(name=other, command='python x --epochs 9')) + '\n')
    argv = ['exp2', '--only', 'cluener/', '--seeds', '0', '--data-dir', 'data',
            '--output', str(tmp_path / 'runs')]
    run.main(argv + ['--kept', str(kept)])
    assert name == 'cluener/crf/seed0' and name not in started
    assert started == [other, 'cluener/efficient_global_pointer/seed0']   # other flags: rerun
    assert f'{other}: kept with other flags' in capsys.readouterr().out
    started.clear()
    run.main(argv + ['--kept', ''])
    assert started[0] == name


def test_a_run_begins_from_the_finished_run_of_another_experiment(tmp_path, monkeypatch, capsys):
    """exp2c-stop3 --begin-from exp2c: each CMeEE run starts from exp2c's finished run of the same
    name (record, epochs, checkpoint, best model; not its results), one still training is left
    alone, one missing starts afresh; the summary names where it began."""
    runs_dir = tmp_path / 'runs'

    def source(name, finished):
        folder = runs_dir / 'exp2c' / name
        (folder / 'checkpoint').mkdir(parents=True)
        (folder / 'model').mkdir()
        for path, text in (('checkpoint/last.index', 'i'), ('model/model.h5', 'm'),
                           ('log.jsonl', '{"epoch": 1}\n'), ('run.json', '{}'),
                           ('results.json', json.dumps(dict(epochs=[{}], **(
                               dict(test=None, stopped_after_epoch=1) if finished else {}))))):
            (folder / path).write_text(text)
    source('cmeee/crf/seed1', finished=True)
    source('cmeee/global_pointer/seed1', finished=False)
    seen = {}

    def start(name, script, flags, output, *args):
        seen[name] = sorted(str(p.relative_to(output)) for p in Path(output).rglob('*')
                            if p.name != run.CLAIM)
        return dict(name=name, wall_seconds=1.0, best=0.5, first_epoch=0.4)
    monkeypatch.setattr(run, 'start', start)
    run.main(['exp2c-stop3', '--seeds', '1', '--data-dir', 'data', '--output', str(runs_dir),
              '--kept', '', '--begin-from', 'exp2c'])
    assert seen == {'cmeee/crf/seed1': ['begun_from.txt', 'checkpoint', 'checkpoint/last.index',
                                        'log.jsonl', 'model', 'model/model.h5', 'run.json'],
                    'cmeee/efficient_global_pointer/seed1': []}
    assert 'cmeee/global_pointer/seed1: ' in capsys.readouterr().out
    summaries = [json.loads(line) for line in
                 (runs_dir / 'exp2c-stop3' / 'summary.jsonl').read_text().splitlines()]
    assert [s.get('begun_from') for s in summaries] == ['exp2c/cmeee/crf/seed1', None]
    line = report.scale_line([dict(s, machine='m', epochs=[{}], code='c') for s in summaries])
    assert 'Begun from the finished runs exp2c/cmeee/crf/seed1 (' in line
    begun = runs_dir / 'exp2c-stop3' / 'cmeee' / 'crf' / 'seed1'
    assert not run.begin_from(str(runs_dir / 'exp2c' / 'cmeee' / 'crf' / 'seed1'), str(begun))
    assert ['--stop-epochs', '3'] == run.experiment('exp2c-stop3', [1])[0][2][4:6]


def test_an_export_adds_to_the_runs_it_already_keeps(exp3_summaries, tmp_path):
    export = tmp_path / 'kept.jsonl'
    half = len(exp3_summaries) // 2
    for part in (exp3_summaries[:half], exp3_summaries[half - 1:]):  # one run in both halves
        folder = tmp_path / 'runs' / 'exp3'
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / 'summary.jsonl', 'w', encoding='utf-8') as f:
            for record in part:
                f.write(json.dumps(record) + '\n')
        report.main(['exp3', '--runs', str(tmp_path / 'runs'), '--export', str(export),
                     '--figures', str(tmp_path / 'fig')])
    records = [json.loads(line) for line in export.read_text().splitlines()]
    assert sorted(r['name'] for r in records) == sorted(r['name'] for r in exp3_summaries)
    assert not os.path.exists(str(export) + '.partial')
    # a run of the same name from a later run folder replaces the kept one
    replaced = dict(exp3_summaries[0], wall_seconds=12345.0)
    with open(tmp_path / 'runs' / 'exp3' / 'summary.jsonl', 'w', encoding='utf-8') as f:
        f.write(json.dumps(replaced) + '\n')
    report.main(['exp3', '--runs', str(tmp_path / 'runs'), '--export', str(export),
                 '--figures', str(tmp_path / 'fig')])
    records = {json.loads(line)['name']: json.loads(line)
               for line in export.read_text().splitlines()}
    assert len(records) == len(exp3_summaries)
    assert records[replaced['name']]['wall_seconds'] == 12345.0


@pytest.mark.parametrize('experiment, document', [
    ('exp1', 'results.md'), ('exp2', 'results.md'), ('exp2c', 'results.md'),
    ('exp2c-stop3', 'results.md'), ('exp3', 'results.md'), ('parity', 'performance.md')])
def test_the_documented_tables_are_rebuilt_from_the_kept_runs(experiment, document, tmp_path,
                                                              capsys):
    pytest.importorskip('matplotlib')
    report.main([experiment, '--summary', os.path.join(ROOT, 'experiments', 'results',
                                                       f'{experiment}.jsonl'),
                 '--figures', str(tmp_path)])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith('|')]
    with open(os.path.join(ROOT, 'docs', document), encoding='utf-8') as f:
        lines = set(f.read().splitlines())
    assert rows and [row for row in rows if row not in lines] == []
