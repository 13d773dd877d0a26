"""Benchmark suite: crf_lr's CRF loss, Viterbi and whole training steps against bert4keras and
TensorFlow Addons (and softmax / GlobalPointer heads), in one process, after warm-up.

    $ python benchmarks/run.py            # full run (10-20 min on 2 cores): results/run.json, plots
    $ python benchmarks/run.py --quick    # a subset, under 2 minutes
    $ python benchmarks/run.py --report benchmarks/results/run.json   # tables of a saved run
    $ python benchmarks/run.py --part precision   # only float32 / XLA / bf16 steps, first epoch
    $ python benchmarks/run.py --part confidence  # only marginals / entity probabilities
    $ python benchmarks/run.py --part step        # the targets' step: batch 32, n = 128, 4 heads

Installs nothing: ``make bench`` installs the benchmark extras (TensorFlow Addons) first; without
them the TFA columns are left out. Every comparison checks that the implementations agree (loss,
gradients, decoded paths) on the inputs it times before timing them; the heads of a training
step are timed in interleaved rounds. Peak memory per head comes from ``memory.py`` run in a
subprocess. Tables are printed as Markdown; ``--out`` gets the JSON (each case: name, shape,
median / min / max ms per implementation, per-round ratios as median / min / max, 1-minute load
average before/after). Times are quoted as median [min–max] of the interleaved rounds, ratios as
median [min–max] of the per-round ratios; ``--report`` restates a run saved before that rule.
"""
import argparse
import copy
import datetime
import json
import operator
import os
import shlex
import subprocess
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
warnings.filterwarnings('ignore', category=UserWarning)   # TFA's end-of-life notice, Keras

import cases  # noqa: E402
import confidence  # noqa: E402
import models  # noqa: E402
from precision_steps import VARIANTS, precision_step_cases  # noqa: E402
from timing import (cpu_name, gflops, interleaved, load_average, machine, matmul_gflops,  # noqa: E402
                    paired_ratios, ratio_summary)

FULL = dict(crf_shapes=[(n, labels) for n in (64, 128, 256, 512) for labels in (4, 7, 21)],
            crf_rounds=20, viterbi_rounds=15, matmul_rounds=10,
            # (layers, n, rounds): the four target cases, then the rest of the scaling series
            steps=[(4, 128, 20), (4, 256, 20), (1, 128, 20), (1, 256, 20),
                   (4, 64, 10), (4, 512, 5)],
            heads=models.HEADS,
            # (layers, batch, n, rounds): batch 16 is the task scripts' default
            precision_steps=[(4, 16, 64, 5)] + [(4, batch, 128, 5) for batch in (8, 16, 32)],
            precision_heads=('softmax', 'CRF (crf_lr)', 'GlobalPointer sparse',
                             'EfficientGlobalPointer sparse'),
            first_epoch=dict(heads=('crf',), multiples=(1, 32),
                             steps=('train_steps', 'train_on_batch'),
                             layers=4, sentences=1000, epochs=2))
QUICK = dict(crf_shapes=[(256, 7)], crf_rounds=10, viterbi_rounds=5, matmul_rounds=5,
             steps=[(1, 64, 4)],
             heads=('softmax', 'CRF (crf_lr)', 'CRF (bert4keras)', 'EfficientGlobalPointer sparse'),
             precision_steps=[(1, 16, 64, 3)], precision_heads=('softmax', 'CRF (crf_lr)'),
             first_epoch=dict(heads=('crf',), multiples=(1, 32), steps=('train_steps',), layers=1,
                              sentences=200, epochs=2))
# --part step: the step of issue 29's targets only (no first epoch), every variant of
# precision_steps.VARIANTS
STEP = dict(matmul_rounds=10, precision_steps=[(4, 32, 128, 5)],
            precision_heads=FULL['precision_heads'], first_epoch=None)
QUICK_STEP = dict(STEP, matmul_rounds=5, precision_steps=[(4, 32, 128, 3)],
                  precision_heads=('CRF (crf_lr)',))
# --part crf_loss: the CRF loss and gradient alone (batch 32), up to 121 labels (40 entity
# types in BIO)
CRF_LOSS = dict(crf_shapes=[(128, 7), (256, 7), (128, 21), (128, 61), (128, 121)],
                crf_rounds=10, matmul_rounds=3)
QUICK_CRF_LOSS = dict(CRF_LOSS, crf_shapes=[(128, 7)], crf_rounds=5)
STEP_BATCH = 16


def train_step_cases(tf, keras, plan, heads, progress=print, batch=STEP_BATCH):
    """Time the whole training step of every head in ``heads`` for each (layers, n, rounds) of
    ``plan``, heads interleaved in rounds; ``progress(message)`` reports each case. Returns one
    results dict per (layers, n)."""
    results = []
    for layers in sorted({layers for layers, _, _ in plan}, reverse=True):
        head_models = models.build_heads(tf, keras, layers, heads)
        for _, n, rounds in [p for p in plan if p[0] == layers]:
            data = models.random_batch(np.random.default_rng(n), batch, n)
            calls = {}
            for head, head_model in head_models.items():
                step = models.train_step(tf, head_model)
                arguments = models.step_arguments(tf, head_model, data)
                calls[head] = lambda s=step, a=arguments: s(*a).numpy()
            timings = interleaved(calls, rounds=rounds, warmup=2)
            gflop = models.encoder_flops(layers, batch, n) / 1e9
            shape = {'layers': layers, 'batch': batch, 'n': n}
            results.append({'name': 'train_step', 'shape': shape,
                            'timings': timings, 'encoder_gflop': round(gflop, 2),
                            'ratios': step_ratios(timings)})
            progress(f'training step, {layers} layers, n={n}: {medians(results[-1]["ratios"])}')
    return results


def step_ratios(timings):
    """Per-round ratios ``head / softmax`` of one training-step case (``paired_ratios``).

        >>> step_ratios(case['timings'])['CRF (crf_lr) / softmax']['median']
    """
    return {f'{head} / softmax': ratio
            for head, ratio in paired_ratios(timings, 'softmax').items()}


def medians(ratios):
    """label -> median of a dict of per-round ratio summaries (for progress lines).

        >>> medians({'a / b': {'median': 1.5, 'min': 1.2, 'max': 2.0}})
        {'a / b': 1.5}
    """
    return {label: ratio['median'] for label, ratio in ratios.items()}


def memory_cases(plan, heads):
    """Peak step memory per head from ``memory.py`` subprocesses (one per encoder depth)."""
    rows = []
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC='true')
    for layers in sorted({layers for layers, _, _ in plan}, reverse=True):
        lengths = sorted({n for depth, n, _ in plan if depth == layers})
        command = [sys.executable, os.path.join(HERE, 'memory.py'), '--layers', str(layers),
                   '--n', *map(str, lengths), '--heads', *heads]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f'{" ".join(command)} failed:\n{done.stderr[-3000:]}')
        rows.extend(json.loads(done.stdout.strip().splitlines()[-1]))
    return rows


def add_memory_and_limit(steps, memory, gflops):
    """Attach each head's step memory, and the arithmetic limit, to the train-step results."""
    by_key = {(row['layers'], row['n'], row['head']): row['step_peak_mb'] for row in memory}
    for case in steps:
        shape = case['shape']
        for head, timing in case['timings'].items():
            timing['step_peak_mb'] = by_key.get((shape['layers'], shape['n'], head))
        limit_ms = case['encoder_gflop'] / gflops * 1e3
        case['limit'] = {'matmul_gflops': gflops, 'limit_ms': round(limit_ms, 2),
                         'softmax_step_over_limit':
                         round(case['timings']['softmax']['median_ms'] / limit_ms, 2)}


def versions(tf, tfa):
    """Versions of the libraries measured, the repository's commit, and where crf_lr was
    imported from, with its files that differ from that commit ([]: a clean measure; None:
    imported from outside the repository)."""
    import bert4keras
    import crf_lr
    source = os.path.dirname(crf_lr.__file__)

    def git(*args):
        done = subprocess.run(['git', '-C', HERE, *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    changed = git('status', '--porcelain', '--', source)     # None: crf_lr is not from this repo
    return {'tensorflow': tf.__version__, 'bert4keras': bert4keras.__version__,
            'tensorflow_addons': tfa.__version__ if tfa is not None else None,
            'numpy': np.__version__, 'git_commit': git('rev-parse', 'HEAD'),
            'crf_lr_source': source,
            'crf_lr_uncommitted': None if changed is None else changed.splitlines()}


def precision_part(tf, keras, plan, results, progress):
    """Fill ``results`` with the bf16 matmul rate, the float32 / XLA / bf16 step table and the
    first-epoch case (epoch 1 against epoch 2, per ``Batches`` length_multiple and training step,
    each in a process of its own: ``epochs.py``)."""
    results['matmul_bf16'] = matmul_gflops(tf, rounds=plan['matmul_rounds'], dtype='bfloat16')
    progress(f"matmul 2048^3 bfloat16: best {results['matmul_bf16']['gflops']} GFLOP/s")
    rates = {'float32': max(m['gflops'] for m in results['matmul']),
             'bfloat16': results['matmul_bf16']['gflops']}
    results['precision_step'] = precision_step_cases(
        tf, keras, plan['precision_steps'], plan['precision_heads'],
        variants=plan['precision_variants'], rates=rates, progress=progress)
    results['first_epoch'] = []
    if plan['first_epoch'] is None:
        return
    options = dict(plan['first_epoch'])
    heads, multiples, steps = (options.pop(k) for k in ('heads', 'multiples', 'steps'))
    for head, multiple, step in [(h, m, s) for h in heads for m in multiples for s in steps]:
        command = [sys.executable, os.path.join(HERE, 'epochs.py'), '--head', head,
                   '--length-multiple', str(multiple), '--step', step]
        for name, value in options.items():
            command += [f'--{name}', str(value)]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results['first_epoch'].append(json.loads(output.strip().splitlines()[-1]))
        progress(f'first epoch, {head}: {results["first_epoch"][-1]}')


def run(quick, out, part='all', heads=None, variants=None):
    """Every comparison of the plan (``part='precision'``: the matmul rates and
    :func:`precision_part` only; ``part='confidence'``: the matmul rate and
    :func:`confidence_part` only; ``part='crf_loss'``: the CRF loss cases only); returns the
    results dict. ``heads`` / ``variants`` narrow
    the precision step table (default: the plan's heads, every variant). After each
    comparison, the results so far are written to ``out`` (JSON), so a failure late in a run
    keeps the rest."""
    plans = {'step': (STEP, QUICK_STEP), 'crf_loss': (CRF_LOSS, QUICK_CRF_LOSS)}
    plan = dict(plans.get(part, (FULL, QUICK))[quick])
    plan['precision_heads'] = heads or plan.get('precision_heads')
    plan['precision_variants'] = variants or VARIANTS
    started = datetime.datetime.now(datetime.timezone.utc)
    tf, tfa = cases.load_tensorflow()
    tf.get_logger().setLevel('ERROR')
    from crf_lr.compat import keras
    command = (['python', 'benchmarks/run.py'] + (['--quick'] if quick else [])
               + (['--part', part] if part != 'all' else [])
               + (['--heads', *heads] if heads else [])
               + (['--variants', *variants] if variants else []))
    results = {'command': shlex.join(command),
               'date_utc': started.strftime('%Y-%m-%d %H:%M'), 'machine': machine(),
               'versions': versions(tf, tfa), 'load_average_start': list(os.getloadavg())}

    def progress(message):
        elapsed = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
        print(f'[{elapsed:6.0f} s, load {load_average()}] {message}', flush=True)
        save(results, out)

    def measure_matmul():
        results['matmul'].append(matmul_gflops(tf, rounds=plan['matmul_rounds']))
        progress(f"matmul 2048^3 float32: best {results['matmul'][-1]['gflops']} GFLOP/s, "
                 f"median {results['matmul'][-1]['gflops_median']}")

    results['matmul'] = []        # measured at the start and at the end; the best rate counts
    measure_matmul()
    if part in ('precision', 'step'):
        precision_part(tf, keras, plan, results, progress)
        measure_matmul()
        results['load_average_end'] = list(os.getloadavg())
        save(results, out)
        return results
    if part == 'confidence':
        confidence_part(tf, keras, plan, results, progress)
        results['load_average_end'] = list(os.getloadavg())
        save(results, out)
        return results
    results['crf_loss'] = []
    for n, labels in plan['crf_shapes']:
        results['crf_loss'].append(cases.crf_loss_case(tf, tfa, n, labels, plan['crf_rounds']))
        progress(f'CRF loss n={n} labels={labels}: {medians(results["crf_loss"][-1]["ratios"])}')
    if part == 'crf_loss':
        results['load_average_end'] = list(os.getloadavg())
        save(results, out)
        return results
    results['viterbi'] = cases.viterbi_case(tf, tfa, plan['viterbi_rounds'])
    progress(f'Viterbi: {medians(results["viterbi"]["ratios"])}')
    confidence_part(tf, keras, plan, results, progress)
    results['train_step'] = train_step_cases(tf, keras, plan['steps'], plan['heads'], progress)
    memory = memory_cases(plan['steps'], plan['heads'])
    progress('step memory measured')
    measure_matmul()
    add_memory_and_limit(results['train_step'], memory, max(m['gflops'] for m in results['matmul']))
    precision_part(tf, keras, plan, results, progress)
    results['targets'] = targets(results)
    results['load_average_end'] = list(os.getloadavg())
    results['minutes'] = round((datetime.datetime.now(datetime.timezone.utc) - started)
                               .total_seconds() / 60, 1)
    save(results, out)
    return results


def confidence_part(tf, keras, plan, results, progress):
    """Marginals and entity probabilities beside Viterbi, and whole predictions with and without
    confidences (``benchmarks/confidence.py``), with the Viterbi case's rounds."""
    results['confidence'] = [confidence.decoding_case(tf, plan['viterbi_rounds'])]
    progress(f"confidence decoding: {medians(results['confidence'][-1]['ratios'])}")
    results['confidence'].append(confidence.prediction_case(keras, plan['viterbi_rounds']))
    progress(f"confidence prediction: {medians(results['confidence'][-1]['ratios'])}")


def save(results, path):
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(results, f, indent=1)


def targets(results):
    """The targets of issue 6, each as {'target', 'required', 'measured', 'met'}, from one run:
    met when the per-round median ratio of every measured case satisfies the bound; measured
    quotes each as median [min–max] (:func:`ratio_cell`).

        >>> all(t['met'] for t in targets(results))
    """
    rows = []

    def add(target, relation, bound, ratios):
        met = {'≥': operator.ge, '≤': operator.le}[relation]
        rows.append({'target': target, 'required': f'{relation} {bound}',
                     'met': all(met(r['median'], bound) for r in ratios),
                     'measured': ', '.join(ratio_cell(r) for r in ratios)})

    crf = {(c['shape']['n'], c['shape']['labels']): c['ratios'] for c in results['crf_loss']}
    headline = crf.get((256, 7), {})
    for label, bound in (('bert4keras sparse / crf_lr sparse', 5), ('TFA / crf_lr sparse', 3)):
        if label in headline:
            add(f'CRF loss+grad n=256, 7 labels: {label}', '≥', bound, [headline[label]])
    peer_ratios = [k for k in next(iter(crf.values()))
                   if 'softmax' not in k and not k.startswith('XLA')]   # peers as shipped
    by_median = operator.itemgetter('median')
    add(f'CRF loss+grad, every shape: min of {", ".join(peer_ratios)} (each)', '≥', 1,
        [min((r[k] for r in crf.values()), key=by_median) for k in peer_ratios])
    add('CRF loss+grad, every shape: max crf_lr sparse / softmax', '≤', 4,
        [max((r['crf_lr sparse / softmax'] for r in crf.values()), key=by_median)])
    viterbi = results['viterbi']['ratios']
    for peer, bound in (('TFA crf_decode (graph)', 1.5), ('bert4keras ViterbiDecoder', 15)):
        keys = [k for k in viterbi if k.startswith(peer)]
        if keys:
            add(f'Viterbi: {peer} / crf_lr (' + ', '.join(k.split(' / ')[1] for k in keys) + ')',
                '≥', bound, [viterbi[k] for k in keys])
    steps = [c for c in results['train_step'] if c['shape']['n'] in (128, 256)]
    if steps:
        add('Training step: CRF (crf_lr) / softmax (' + ', '.join(
            f"{c['shape']['layers']}L n={c['shape']['n']}" for c in steps) + ')', '≤', 1.10,
            [c['ratios']['CRF (crf_lr) / softmax'] for c in steps])
    return rows


def markdown_table(header, rows):
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    lines += ['| ' + ' | '.join(str(cell) for cell in row) + ' |' for row in rows]
    return '\n'.join(lines)


def milliseconds(ms):
    """Three significant digits without exponent: 1460, 383, 15.4, 0.805."""
    return f'{ms:.0f}' if ms >= 100 else f'{ms:.3g}'


def ratio_cell(ratio):
    """Median [min–max] of per-round ratios (``ratio_summary``).

        >>> ratio_cell({'median': 1.02, 'min': 0.97, 'max': 1.1})
        '1.02 [0.97–1.10]'
    """
    return f"{ratio['median']:.2f} [{ratio['min']:.2f}–{ratio['max']:.2f}]"


def gflops_cell(matmul):
    """Median [min–max] GFLOP/s of a ``matmul_gflops`` result.

        >>> gflops_cell(results['matmul'][0])
        '333.3 [261.3–347.9]'
    """
    return (f"{matmul['gflops_median']} [{gflops(matmul['size'], matmul['max_ms'])}–"
            f"{matmul['gflops']}]")


def predates_min_max(results):
    """Whether ``results`` come from a run before times and ratios were quoted as median
    [min–max] (its ratios are plain ratios of medians).

        >>> predates_min_max(json.load(open('benchmarks/results/run.json')))
    """
    return not isinstance(next(iter(results['crf_loss'][0]['ratios'].values())), dict)


def restated(results):
    """A copy of the results of a run that :func:`predates_min_max`, with each timing's
    ``max_ms``, every ratio and the targets restated from the per-call times (``times_ms``,
    round by round) it kept.

        >>> print(report(restated(json.load(open('benchmarks/results/run.json')))))
    """
    results = copy.deepcopy(results)
    cases_ = results['crf_loss'] + [results['viterbi']] + results['train_step']
    for timing in results['matmul'] + [t for case in cases_ for t in case['timings'].values()]:
        timing.setdefault('max_ms', max(timing['times_ms']))
    for case in results['crf_loss']:
        case['ratios'] = cases.crf_loss_ratios(case['timings'])
    results['viterbi']['ratios'] = cases.viterbi_ratios(results['viterbi']['timings'])
    for case in results['train_step']:
        case['ratios'] = step_ratios(case['timings'])
        case.pop('paired_ratios', None)
    results['targets'] = targets(results)
    return results


def crf_loss_tables(crf):
    """The CRF loss cases' tables (Markdown lines): milliseconds per call, per-round ratios."""
    names = list(crf[0]['timings'])
    ratio_names = list(crf[0]['ratios'])
    return ['### CRF negative log-likelihood + gradient (batch 32, float32, tf.function)', '',
            'Milliseconds per call; `[XLA]`: the whole loss + gradient function compiled with '
            '`jit_compile=True` (TFA\'s loss does not compile); crf_lr\'s losses run their '
            'forward-backward pass as one kernel where it is built ('
            + '; '.join(sorted({c.get('kernels', 'no kernel: an earlier run') for c in crf}))
            + '), `[XLA pass]` and `[TensorFlow ops]` with the kernels off.', '',
            markdown_table(['n', 'labels'] + names + ['load'],
                           [[c['shape']['n'], c['shape']['labels']]
                            + [ranged(c['timings'][k]) for k in names]
                            + [c['timings'][names[0]]['load_before']] for c in crf]), '',
            'Per-round ratios (> 1: crf_lr faster, except the softmax ratios: crf_lr / softmax):',
            '', markdown_table(['n', 'labels'] + ratio_names,
                               [[c['shape']['n'], c['shape']['labels']]
                                + [ratio_cell(c['ratios'][k]) for k in ratio_names]
                                for c in crf]), '']


def report(results):
    """The Markdown tables of a results dict."""
    if 'crf_loss' in results and 'viterbi' not in results:        # --part crf_loss
        return '\n'.join([f"CRF loss cases ({results['date_utc']} UTC, "
                          f"{cpu_name(results['machine'])})", ''] + crf_loss_tables(
                              results['crf_loss']))
    if 'crf_loss' not in results:                          # --part precision / confidence
        if 'confidence' in results:
            return confidence.report(results['confidence'], ranged, ratio_cell, markdown_table)
        return precision_report(results)
    old = predates_min_max(results)
    if old:
        results = restated(results)
    out = [f"Command: `{results['command']}` — {results['date_utc']} UTC, "
           f"{results['machine']['nproc']} cores {cpu_name(results['machine'])}, "
           f"{results['machine'].get('cpu_mhz')} MHz"
           f"{', VM' if results['machine'].get('hypervisor') else ''}), "
           f"TF {results['versions']['tensorflow']}, "
           f"TFA {results['versions']['tensorflow_addons']}, "
           f"bert4keras {results['versions']['bert4keras']}, crf_lr at commit "
           f"{(results['versions'].get('git_commit') or '?')[:10]}"
           f"{'' if results['versions'].get('crf_lr_uncommitted') == [] else ' (+ changes)'}; "
           f"load average (1/5/15 min) "
           f"{'/'.join(f'{x:.1f}' for x in results['load_average_start'])} at start, "
           f"{'/'.join(f'{x:.1f}' for x in results['load_average_end'])} at end; "
           f"{results['minutes']} min. Times: median ms [min–max] of the interleaved rounds; "
           f"ratios: median [min–max] of the per-round ratios (both sides timed in the same "
           f"round)."
           + (' This run predates that quoting: its ratios and targets are restated here from '
              'the per-call times it kept.' if old else ''),
           '', "Matmul (2048³ float32 in TF), at start / end of the run: "
           + ' / '.join(gflops_cell(m) for m in results['matmul'])
           + f" GFLOP/s, median [min–max] of {results['matmul'][0]['calls']} calls each; the "
           f"max (the best call) is the limit below.", '',
           '### Targets of issue 6', '',
           markdown_table(['target', 'required', 'measured', 'met'],
                          [[t['target'], t['required'], t['measured'], '✔' if t['met'] else '✘']
                           for t in results['targets']]), '']
    crf = results['crf_loss']
    errors = [e for c in crf for e in c['check'].values()]
    out += [f"Correctness, checked in this run before timing: over all {len(crf)} CRF shapes, "
            f"every peer's mean loss is within a relative "
            f"{max(e['loss_rel_err'] for e in errors):.1e} "
            f"of crf_lr's and its gradients (emissions, transitions) within "
            f"{max(e['grad_err'] for e in errors):.1e} (max abs difference / max(1, max abs)); "
            f"every Viterbi decoder returned identical paths on "
            f"{results['viterbi']['sequences_checked']} sequences.", '']
    out += crf_loss_tables(crf)
    viterbi = results['viterbi']
    shape = viterbi['shape']
    out += [f"### Viterbi: {shape['batch']} sequences of length {shape['lengths'][0]}–"
            f"{shape['lengths'][1]}, {shape['labels']} labels "
            f"({viterbi['sequences_checked']} sequences checked identical, "
            f"16 of them against brute force)", '',
            markdown_table(['decoder', 'ms per batch', 'sequences/s', 'load'],
                           [[name, ranged(t), f"{t['sequences_per_s']:,.0f}", t['load_before']]
                            for name, t in viterbi['timings'].items()]), '',
            'Per-round ratios: ' + ', '.join(f'{k} = {ratio_cell(v)}'
                                             for k, v in viterbi['ratios'].items()), '']
    steps = sorted(results['train_step'], key=lambda c: (-c['shape']['layers'], c['shape']['n']))
    heads = list(steps[0]['timings'])
    others = [h for h in heads if h != 'softmax']
    out += ['### Whole training step (forward + backward + Adam), batch 16', '',
            markdown_table(['layers', 'n'] + heads + ['load before/after'],
                           [[c['shape']['layers'], c['shape']['n']]
                            + [ranged(c['timings'][h]) for h in heads]
                            + [f"{c['timings']['softmax']['load_before']}/"
                               f"{c['timings']['softmax']['load_after']}"]
                            for c in steps]), '',
            'Per-round ratios to the softmax head (the two steps timed in the same round):', '',
            markdown_table(['layers', 'n'] + others,
                           [[c['shape']['layers'], c['shape']['n']]
                            + [ratio_cell(c['ratios'][h + ' / softmax']) for h in others]
                            for c in steps]), '',
            '### Peak step memory per head (MB above weights and optimizer state)', '',
            markdown_table(['layers', 'n'] + heads,
                           [[c['shape']['layers'], c['shape']['n']]
                            + [c['timings'][h]['step_peak_mb'] for h in heads] for c in steps]), '',
            '### Distance from the arithmetic limit (encoder FLOPs / measured matmul rate)', '',
            markdown_table(['layers', 'n', 'encoder GFLOP per step', 'limit ms', 'softmax step ms',
                            'step / limit'],
                           [[c['shape']['layers'], c['shape']['n'], c['encoder_gflop'],
                             f"{c['limit']['limit_ms']:.0f}",
                             ranged(c['timings']['softmax']),
                             f"{c['limit']['softmax_step_over_limit']:.1f}×"] for c in steps])]
    series = scaling_series(results)
    if len(series) > 1:
        lengths = [c['shape']['n'] for c in series]
        out += ['', f"### Scaling with n ({series[0]['shape']['layers']} layers, batch "
                f"{series[0]['shape']['batch']}): step ms / peak step MB, and the growth of the "
                f"median from n={lengths[0]} to n={lengths[-1]}", '',
                markdown_table(['head'] + [f'n={n}' for n in lengths] + ['time ×', 'memory ×'],
                               [[h] + [f"{ranged(c['timings'][h])} / "
                                       f"{c['timings'][h]['step_peak_mb']:.0f}" for c in series]
                                + [f"{growth(series, h, key):.1f}"
                                   for key in ('median_ms', 'step_peak_mb')]
                                for h in heads])]
    if 'confidence' in results:
        out += ['', confidence.report(results['confidence'], ranged, ratio_cell, markdown_table)]
    if 'precision_step' in results:
        out += ['', precision_report(results)]
    return '\n'.join(out)


def ranged(timing):
    """'1234 [1100–1300]': median ms [min–max] of the interleaved rounds."""
    return (f"{milliseconds(timing['median_ms'])} [{milliseconds(timing['min_ms'])}–"
            f"{milliseconds(timing['max_ms'])}]")


def precision_report(results):
    """The tables of :func:`precision_part`: matmul rates, steps per precision, first epoch."""
    fp32 = max(m['gflops'] for m in results['matmul'])
    out = [f"### Whole training step per precision ({results['date_utc']} UTC, "
           f"{cpu_name(results['machine'])}, load average "
           f"{'/'.join(f'{x:.1f}' for x in results['load_average_start'])} at start, "
           f"{'/'.join(f'{x:.1f}' for x in results['load_average_end'])} at end)", '',
           f"Matmul 2048³: float32 {fp32} GFLOP/s, bfloat16 {results['matmul_bf16']['gflops']} "
           f"GFLOP/s (best of {results['matmul_bf16']['calls']}). Step: median ms [min–max] of "
           f"the interleaved rounds; `× fp32`: float32 / variant time, median [min–max] of the "
           f"per-round ratios; `/ limit`: the step over encoder FLOPs / that precision's matmul "
           f"rate; `same rounds`: the same with the 2048³ product timed in each round, median "
           f"[min–max] of the per-round ratios.", '']
    rows = []
    for case in results['precision_step']:
        shape = case['shape']
        for head, summary in case['heads'].items():
            cells = [shape['layers'], shape['batch'], shape['n'], head]
            for variant in VARIANTS:
                timing = case['timings'].get(f'{head} | {variant}')
                if timing is None:
                    cells.append('')
                    continue
                speed = ('reference' if variant == 'float32' else ratio_cell(ratio_summary(
                    case['timings'], f'{head} | float32', f'{head} | {variant}')) + '× fp32')
                same_rounds = summary.get(f'{variant} step / limit, same rounds')
                cells.append(f"{ranged(timing)} ({speed}, "
                             f"{summary.get(f'{variant} step / limit', float('nan')):.1f}× limit"
                             + (f"; same rounds {ratio_cell(same_rounds)}×" if same_rounds
                                else '') + ')')
            rows.append(cells)
    out += [markdown_table(['layers', 'batch', 'n', 'head', 'float32', 'XLA (whole step)',
                            'mixed_bfloat16', 'mixed_bfloat16, XLA (whole step)'], rows), '']
    if not results['first_epoch']:
        return '\n'.join(out)
    # step 'train_steps' ('fit' in earlier runs): crf_lr.training.loop.train_steps; older:
    # train_on_batch
    out += ['### First epoch against a steady one', '',
            markdown_table(['head', 'step', 'layers', 'sentences', 'batch', 'maxlen',
                            'length_multiple', 'batch shapes', 'traces', 'epoch seconds',
                            'epoch 1 / last', 'first 3 steps, s'],
                           [[r['head'], r.get('step', 'train_on_batch'), r['layers'],
                             r['sentences'], r['batch'], r['maxlen'], r['length_multiple'],
                             r['shapes'], r.get('traces', ''),
                             ' / '.join(f'{s:.1f}' for s in r['epoch_s']), r['ratio'],
                             ', '.join(f'{s:.1f}' for s in r.get('first_steps_s', []))]
                            for r in results['first_epoch']])]
    return '\n'.join(out)


def growth(series, head, key):
    """Last over first value of ``key`` of ``head`` along a scaling series."""
    return series[-1]['timings'][head][key] / series[0]['timings'][head][key]


def scaling_series(results):
    """The training-step cases of the deepest encoder, by increasing n."""
    depth = max(c['shape']['layers'] for c in results['train_step'])
    return sorted((c for c in results['train_step'] if c['shape']['layers'] == depth),
                  key=lambda c: c['shape']['n'])


def plot(results, directory):
    """docs/perf_crf_loss.png (CRF loss time vs n, one panel per label count) and
    docs/perf_scaling.png (step time and memory vs n per head, deepest encoder).
    Returns the paths written."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    def log_axes(ax, lengths, ylabel):
        ax.set(xscale='log', yscale='log', xlabel='sequence length n', ylabel=ylabel)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(lengths, [str(n) for n in lengths])

    paths = []
    labels = sorted({c['shape']['labels'] for c in results['crf_loss']})
    by_labels = [[c for c in results['crf_loss'] if c['shape']['labels'] == k] for k in labels]
    if max(len(cases_) for cases_ in by_labels) > 1:
        fig, axes = plt.subplots(1, len(labels), figsize=(4.5 * len(labels), 4), squeeze=False)
        for ax, k, crf in zip(axes[0], labels, by_labels):
            lengths = [c['shape']['n'] for c in crf]
            for name in crf[0]['timings']:
                ax.plot(lengths, [c['timings'][name]['median_ms'] for c in crf], marker='o',
                        label=name)
            log_axes(ax, lengths, 'ms per call (median)')
            ax.set_title(f'CRF NLL + gradient, batch 32, {k} labels')
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        paths.append(os.path.join(directory, 'perf_crf_loss.png'))
        fig.savefig(paths[-1], dpi=110)
    series = scaling_series(results)
    if len(series) > 1:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        lengths = [c['shape']['n'] for c in series]
        for head in series[0]['timings']:
            for ax, key in zip(axes, ('median_ms', 'step_peak_mb')):
                ax.plot(lengths, [c['timings'][head][key] for c in series], marker='o', label=head)
        axes[0].plot(lengths, [c['limit']['limit_ms'] for c in series], 'k--',
                     label='arithmetic limit (encoder FLOPs / matmul rate)')
        log_axes(axes[0], lengths, 'ms per training step (median)')
        log_axes(axes[1], lengths, 'MB, peak memory of one step')
        axes[0].set_title(f"{series[0]['shape']['layers']}-layer ALBERT-tiny, batch "
                          f"{series[0]['shape']['batch']}: step time")
        axes[1].set_title('peak memory of one step (above weights)')
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        paths.append(os.path.join(directory, 'perf_scaling.png'))
        fig.savefig(paths[-1], dpi=110)
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='a subset, under 2 minutes')
    parser.add_argument('--out', default=None, help='results JSON (default '
                        'benchmarks/results/run.json, or benchmarks/results/<part>.json with '
                        '--part; .quick.json with --quick)')
    parser.add_argument('--plots', default=None, help='folder for the PNG plots (default docs/ for '
                        'a full run, none with --quick)')
    parser.add_argument('--report', metavar='JSON', help='print the tables of a saved run and exit')
    parser.add_argument('--part', choices=('all', 'precision', 'confidence', 'step', 'crf_loss'),
                        default='all',
                        help='precision: only the float32 / XLA / bf16 step table and the first '
                        'epoch case (results/precision.json); confidence: only marginals, '
                        'entity probabilities and predictions with confidences '
                        '(results/confidence.json); step: only the step table at batch 32, '
                        'n = 128 (results/step.json); crf_loss: only the CRF loss and gradient '
                        '(results/crf_loss.json)')
    parser.add_argument('--heads', nargs='+', choices=FULL['precision_heads'], metavar='HEAD',
                        help="only these of the precision step table's heads "
                        f"({', '.join(FULL['precision_heads'])}; default: all)")
    parser.add_argument('--variants', nargs='+', choices=VARIANTS, metavar='VARIANT',
                        help=f"only these of {', '.join(VARIANTS)} in the precision step table "
                        "(default: all)")
    args = parser.parse_args()
    if (args.heads or args.variants) and args.part not in ('precision', 'step'):
        parser.error('--heads and --variants narrow --part precision or --part step')
    if args.variants and 'float32' not in args.variants:
        parser.error('--variants needs float32: the other variants are timed against it')
    if args.report:
        with open(args.report, encoding='utf-8') as f:
            print(report(json.load(f)))
        return
    from crf_lr.utils.cli import quiet_tensorflow
    quiet_tensorflow()                       # TensorFlow's C++ log lines off the console
    name = ('run' if args.part == 'all' else args.part) + ('.quick' if args.quick else '') + '.json'
    out = args.out or os.path.join(HERE, 'results', name)
    results = run(args.quick, out, args.part, args.heads, args.variants)
    print(report(results))
    plots = args.plots or (None if args.quick or args.part != 'all'
                           else os.path.join(HERE, '..', 'docs'))
    written = plot(results, plots) if plots else []
    print(f'\nwrote {out}' + ''.join(f', {p}' for p in written))


if __name__ == '__main__':
    main()
