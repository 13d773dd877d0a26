"""Steady training and prediction speed of each head at the converged experiment 2's settings
(``experiments/run.py``'s ``EXP2C_SCALE``: ``examples/task_ner.py``, ALBERT-tiny with 4 layers,
batch 16, rate 2e-4, the CRF at 100x) on real CLUENER and CMeEE sentences. Each (dataset, head) is
a fresh 2-epoch run of the script on a seeded sample of the training set, in interleaved rounds:
its epoch-2 training windows/s (the train function was traced in epoch 1) and its epoch-2 dev
prediction sentences/s (prediction traced at epoch 1's scoring), as the median [min-max] of the
rounds, and as the ratio to the CRF run of the same dataset and round. Run it with nothing else
on the machine: it prints the load average before and after.

    $ python benchmarks/heads_speed.py --data-dir ../shared/data --rounds 2    # Markdown table
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from predict_start import ranged  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location('experiment_driver',
                                               os.path.join(ROOT, 'experiments', 'run.py'))
driver = importlib.util.module_from_spec(_spec)    # not ``import run``: that is benchmarks/run.py
_spec.loader.exec_module(driver)


def epoch2_speeds(dataset, head, data_dir, output, train_limit, eval_limit):
    """``(training windows/s, dev prediction sentences/s)`` of epoch 2 of a fresh run."""
    script = os.path.join(ROOT, 'examples', 'task_ner.py')
    command = [sys.executable, script] + driver.EXP2C_SCALE + [
        '--epochs', '2', '--train-limit', str(train_limit), '--eval-limit', str(eval_limit),
        '--seed', '0', '--dataset', dataset, '--head', head, '--data-dir', data_dir,
        '--output', output]
    subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
    with open(os.path.join(output, 'results.json'), encoding='utf-8') as f:
        epoch = json.load(f)['epochs'][1]
    return epoch['train_windows_per_second'], epoch['dev_predict_sentences_per_second']


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--data-dir', default=os.environ.get('CRF_LR_DATA'),
                        help='the shared data folder (default: $CRF_LR_DATA)')
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--train-limit', type=int, default=480, help='training sentences')
    parser.add_argument('--eval-limit', type=int, default=300, help='dev sentences')
    parser.add_argument('--datasets', default=','.join(driver.EXP2C_DATASETS))
    args = parser.parse_args()
    if not args.data_dir:
        parser.error('give --data-dir or set CRF_LR_DATA')
    cases = [(d, h) for d in args.datasets.split(',') for h in driver.EXP2_HEADS]
    speeds = {case: [] for case in cases}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as root:
        for r in range(args.rounds):
            for dataset, head in cases:
                output = os.path.join(root, f'{dataset}-{head}-{r}')
                speeds[dataset, head].append(epoch2_speeds(dataset, head, args.data_dir, output,
                                                           args.train_limit, args.eval_limit))
                print(f'round {r + 1}: {dataset} {head} {speeds[dataset, head][-1]}',
                      file=sys.stderr)
    print(f'{args.rounds} rounds, {args.train_limit} training and {args.eval_limit} dev sentences '
          f'per run; load average (1, 5, 15 min) before {load_before}, after {os.getloadavg()}\n')
    print('| dataset | head | training windows/s | vs CRF | prediction sentences/s | vs CRF |\n'
          '|---|---|---|---|---|---|')
    for dataset, head in cases:
        own, crf = speeds[dataset, head], speeds[dataset, 'crf']
        cells = []
        for k in (0, 1):
            cells += [ranged([s[k] for s in own]),
                      ranged([s[k] / c[k] for s, c in zip(own, crf)])]
        print(f'| {dataset} | {head} | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    main()
