"""Steady training and prediction speed of each head at the converged experiment 2's settings
(``experiments/run.py``'s ``EXP2C_SCALE``: ``examples/task_ner.py``, ALBERT-tiny with 4 layers,
batch 16, rate 2e-4, the CRF at 100x) on real CLUENER and CMeEE sentences, in interleaved rounds
(the order of the heads rotates from round to round):

- training: a fresh 3-epoch run of the script on a seeded sample of the training set; windows/s
  over epochs 2 and 3 (the train function is traced once, in epoch 1);
- prediction: in a fresh process, the run's saved model (``Tagger.load``, its default batch of
  32) predicts the run's development sentences twice, spans decoded (``Tagger.predict``: the
  model, then Viterbi or span extraction); sentences/s of the second pass.

Each figure is the median [min-max] of the rounds, and its ratio to the CRF measured in the same
round on the same dataset. Run it with nothing else on the machine: it prints the load average
before and after.

    $ python benchmarks/heads_speed.py --data-dir ../shared/data    # Markdown table on stdout
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

from predict_start import ranged

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location('experiment_driver',
                                               os.path.join(ROOT, 'experiments', 'run.py'))
driver = importlib.util.module_from_spec(_spec)    # not ``import run``: that is benchmarks/run.py
_spec.loader.exec_module(driver)


def _run(command):
    """Run ``command`` quietly; on failure, raise with the tail of its output."""
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
    if done.returncode:
        raise RuntimeError(f'{" ".join(command)} failed:\n{(done.stdout + done.stderr)[-3000:]}')
    return done.stdout


def speeds(dataset, head, args, output):
    """``(training windows/s, prediction sentences/s)`` of one fresh run and its saved model."""
    split = ['--train-limit', str(args.train_limit), '--eval-limit', str(args.eval_limit),
             '--dataset', dataset]
    # the later --epochs replaces EXP2C_SCALE's (argparse keeps the last value)
    _run([sys.executable, os.path.join(ROOT, 'examples', 'task_ner.py')] + driver.EXP2C_SCALE
         + split + ['--epochs', '3', '--seed', '0', '--head', head, '--data-dir', args.data_dir,
                    '--output', output])
    with open(os.path.join(output, 'results.json'), encoding='utf-8') as f:
        steady = json.load(f)['epochs'][1:]
    training = (sum(e['train_windows_per_second'] * e['train_seconds'] for e in steady)
                / sum(e['train_seconds'] for e in steady))
    predicted = _run([sys.executable, __file__, '--predict', os.path.join(output, 'model'),
                      '--data-dir', args.data_dir] + split)
    return training, float(predicted.strip().splitlines()[-1])


def prediction_speed(model_dir, args):
    """Sentences/s of the second of two ``Tagger.predict`` passes over the run's dev split."""
    import crf_lr  # noqa: F401  (environment before TensorFlow)
    from crf_lr.data.splits import load_splits
    from crf_lr.serving.tagger import Tagger
    data = load_splits(args.dataset, data_dir=args.data_dir, train_limit=args.train_limit,
                       eval_limit=args.eval_limit)
    sentences = [e.tokens for e in data.dev]
    tagger = Tagger.load(model_dir)
    tagger.predict(sentences)
    started = time.perf_counter()
    tagger.predict(sentences)
    return len(sentences) / (time.perf_counter() - started)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--data-dir', default=os.environ.get('CRF_LR_DATA'),
                        help='the shared data folder (default: $CRF_LR_DATA)')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--train-limit', type=int, default=640, help='training sentences')
    parser.add_argument('--eval-limit', type=int, default=400, help='dev sentences')
    parser.add_argument('--datasets', default=','.join(driver.EXP2C_DATASETS))
    parser.add_argument('--dataset', help=argparse.SUPPRESS)
    parser.add_argument('--predict', metavar='MODEL_DIR', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.data_dir:
        parser.error('give --data-dir or set CRF_LR_DATA')
    if args.predict:
        print(prediction_speed(args.predict, args))
        return
    heads, datasets = driver.EXP2_HEADS, args.datasets.split(',')
    seen = {(d, h): [] for d in datasets for h in heads}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as root:
        for r in range(args.rounds):
            order = heads[r % len(heads):] + heads[:r % len(heads)]
            for dataset in datasets:
                for head in order:
                    output = os.path.join(root, f'{dataset}-{head}-{r}')
                    seen[dataset, head].append(speeds(dataset, head, args, output))
                    print(f'round {r + 1}: {dataset} {head} {seen[dataset, head][-1]}',
                          file=sys.stderr)
    print(f'{args.rounds} rounds, {args.train_limit} training and {args.eval_limit} dev sentences '
          f'per run; load average (1, 5, 15 min) before {load_before}, after {os.getloadavg()}\n')
    print('| dataset | head | training windows/s | vs CRF | prediction sentences/s | vs CRF |\n'
          '|---|---|---|---|---|---|')
    for (dataset, head), own in seen.items():
        crf = seen[dataset, 'crf']
        cells = []
        for k in (0, 1):
            cells += [ranged([s[k] for s in own]),
                      '—' if head == 'crf' else ranged([s[k] / c[k] for s, c in zip(own, crf)])]
        print(f'| {dataset} | {head} | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    main()
