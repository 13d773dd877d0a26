"""How long ``python -m crf_lr.predict`` makes a user wait: ``--help``, a wrong model path, and the
time to the first prediction of a saved ALBERT-tiny model (4 layers, hidden 312; CRF or
GlobalPointer head; random weights: only time is measured), each in a fresh process, median
[min-max] over ``--rounds`` interleaved rounds.

The first prediction is split into its phases, as the process sees them: Python and argument
checks, ``import crf_lr.serving.tagger`` (TensorFlow, bert4keras), ``Tagger.load`` (the h5 model)
and the first line (the traced predict function), then a second line (steady state).

    $ python benchmarks/predict_start.py --rounds 5        # Markdown table on stdout
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TEXT = '中共中央总书记、国家主席江泽民发表新年讲话。'

# One fresh process: the phases of a first prediction, timed from interpreter start.
PHASES = r'''
import json, sys, time
started = time.time()
import crf_lr.serving.predict
from crf_lr.serving.model_folder import model_files
model_files(sys.argv[1])
checked = time.time()
from crf_lr.serving.tagger import Tagger
imported = time.time()
tagger = Tagger.load(sys.argv[1])
loaded = time.time()
tagger.predict([sys.argv[2]])
first = time.time()
tagger.predict([sys.argv[2]])
second = time.time()
print(json.dumps(dict(checks=checked - started, import_tagger=imported - checked,
                      load=loaded - imported, first_line=first - loaded,
                      second_line=second - first, startup=float(sys.argv[3]))))
'''


def save_model(folder, head_name):
    """A random-weight ALBERT-tiny model with ``head_name``, saved as the task scripts save it."""
    import crf_lr  # noqa: F401  (environment before TensorFlow)
    from crf_lr.compat import keras
    from crf_lr.model.encoders import load_encoder
    from crf_lr.model.heads import make_head, piece_states
    from crf_lr.data.pieces import UnitEncoder
    from crf_lr.serving.tagger import Tagger
    keras.utils.set_random_seed(0)
    encoder, vocab, _ = load_encoder('albert-tiny-zh')
    head = make_head(head_name, ['LOC', 'ORG', 'PER'], 'BIO')
    model = keras.Model(encoder.inputs, head.build(piece_states(encoder)))
    Tagger(model, UnitEncoder(vocab), head, 128).save(folder)


def wall_seconds(argv):
    """Wall time of ``python argv...`` from launch to exit (a fresh interpreter)."""
    started = time.time()
    subprocess.run([sys.executable] + argv, capture_output=True, cwd=ROOT, check=False)
    return time.time() - started


def first_prediction(folder):
    """The phases of a first prediction in a fresh process (seconds), with the interpreter's own
    start-up (``python -c pass``) measured just before it."""
    startup = wall_seconds(['-c', 'pass'])
    done = subprocess.run([sys.executable, '-c', PHASES, folder, TEXT, str(startup)],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def ranged(values, digits=2):
    """``median [min–max]``, to ``digits`` decimals (seconds: 2)."""
    return f'{np.median(values):.{digits}f} [{min(values):.{digits}f}–{max(values):.{digits}f}]'


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--heads', default='crf,global_pointer')
    args = parser.parse_args()
    heads = args.heads.split(',')
    with tempfile.TemporaryDirectory() as root:
        folders = {h: os.path.join(root, h) for h in heads}
        for head, folder in folders.items():
            save_model(folder, head)
        rows = {'help': [], 'wrong path': []}
        phases = {h: [] for h in heads}
        for _ in range(args.rounds):
            rows['help'].append(wall_seconds(['-m', 'crf_lr.predict', '--help']))
            rows['wrong path'].append(wall_seconds(['-m', 'crf_lr.predict',
                                                    os.path.join(root, 'nowhere')]))
            for head in heads:
                phases[head].append(first_prediction(folders[head]))
    load = os.getloadavg()[0]
    print(f'{args.rounds} rounds; 1-minute load average at the end {load:.2f}\n')
    print('| command | seconds, median [min–max] |\n|---|---|')
    print(f'| `python -m crf_lr.predict --help` | {ranged(rows["help"])} |')
    print(f'| `python -m crf_lr.predict <wrong path>` | {ranged(rows["wrong path"])} |\n')
    names = ('startup', 'checks', 'import_tagger', 'load', 'first_line', 'second_line')
    print('| head | ' + ' | '.join(names) + ' | to first prediction |\n' + '|---' * 8 + '|')
    for head in heads:
        cells = [ranged([p[n] for p in phases[head]]) for n in names]
        total = [sum(p[n] for n in names[:5]) for p in phases[head]]
        print(f'| {head} | ' + ' | '.join(cells) + f' | {ranged(total)} |')


if __name__ == '__main__':
    main()
