"""Prediction of many sentences: ``Tagger.scores`` (one trace without AutoGraph, for batches of
every size and length; what ``Tagger.predict`` runs) against Keras's ``model.predict_on_batch``
(traced for the first batch's shape, then again with generalised shapes). ALBERT-tiny (4 layers,
hidden 312, random weights: only time is measured) with a CRF or GlobalPointer head; 300 random
sentences of 5-119 characters, 10 batches of 32. Each variant runs in a fresh process: its first
``predict`` (which traces) and a second one (steady), in interleaved rounds.

    $ python benchmarks/predict_steps.py --rounds 3          # Markdown table on stdout
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from predict_start import ranged  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHARS = '中共中央总书记国家主席江泽民发表新年讲话今天天气很好我们喜欢北京'


def predict_twice(step, head_name, sentences=300):
    """Seconds of a fresh tagger's first and second ``predict`` of the same sentences, with
    ``step`` ``'scores'`` (the Tagger's own) or ``'predict_on_batch'``."""
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
    tagger = Tagger(model, UnitEncoder(vocab), head, 128)
    if step == 'predict_on_batch':
        tagger.scores = lambda inputs: np.asarray(model.predict_on_batch(inputs))
    rng = np.random.default_rng(0)
    texts = [''.join(rng.choice(list(CHARS), n)) for n in rng.integers(5, 120, sentences)]
    seconds = []
    for _ in range(2):
        started = time.perf_counter()
        tagger.predict(texts)
        seconds.append(time.perf_counter() - started)
    return dict(first=seconds[0], second=seconds[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--heads', default='crf,global_pointer')
    parser.add_argument('--worker', nargs=2, metavar=('STEP', 'HEAD'), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(predict_twice(*args.worker)))
        return
    steps = ('predict_on_batch', 'scores')
    seen = {(h, s): [] for h in args.heads.split(',') for s in steps}
    for _ in range(args.rounds):
        for head, step in seen:
            done = subprocess.run([sys.executable, __file__, '--worker', step, head], cwd=ROOT,
                                  capture_output=True, text=True, check=True,
                                  env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
            seen[head, step].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f'{args.rounds} rounds; 1-minute load average at the end {os.getloadavg()[0]:.2f}\n')
    print('| head | step | first predict, s | second predict, s | first − second, s |\n'
          '|---|---|---|---|---|')
    for (head, step), runs in seen.items():
        print(f'| {head} | {step} | {ranged([r["first"] for r in runs])} '
              f'| {ranged([r["second"] for r in runs])} '
              f'| {ranged([r["first"] - r["second"] for r in runs])} |')


if __name__ == '__main__':
    main()
