"""Where step 1 of ``crf_lr.runs.train_steps`` spends its time: the scripts' model (bert4keras
ALBERT-tiny-shaped random encoder, ``crf_lr.heads`` head, ``LayerwiseAdam``) on one synthetic batch
of 16, profiled with cProfile in a fresh process. Prints one JSON line: the whole first step, the
trace (``get_concrete_function``) and inside it the forward pass, the gradients and the optimiser's
update, the first call of the traced graph (graph optimisation and the first run) and a second step
for comparison. ``TF_CPP_VMODULE=meta_optimizer=1`` in the environment adds grappler's own per-pass
times to stderr.

    $ python benchmarks/first_step.py --head crf --layers 4
"""
import argparse
import cProfile
import json
import os
import pstats
import sys
import time

import crf_lr  # noqa: F401  (environment before TensorFlow)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from epochs import scripts_model, synthetic_items  # noqa: E402

# cProfile entries (file suffix, function name) -> what they are in a Keras train step
PARTS = {'trace': (('polymorphic_function.py',), 'get_concrete_function'),
         'forward': (('engine/training.py',), '__call__'),
         'gradients': (('eager/backprop.py',), 'gradient'),
         'optimizer_apply': (('optimizers/optimizer.py', 'optimizer_v2.py'), 'apply_gradients'),
         'first_graph_call': (('atomic_function.py',), 'call_flat')}


def first_step_seconds(head_name, layers):
    from crf_lr.batching import Batches
    from crf_lr.compat import keras
    from crf_lr.runs import train_steps
    model = scripts_model(keras, head_name, layers)
    batches = [(b.inputs, b.labels) for b in Batches(synthetic_items(32, 128), 16, maxlen=128)]
    profile, steps = cProfile.Profile(), train_steps(model, batches)
    started = time.perf_counter()
    profile.runcall(next, steps)
    first = time.perf_counter() - started
    started = time.perf_counter()
    next(steps)
    second = time.perf_counter() - started
    stats = pstats.Stats(profile).stats       # (file, line, name) -> (..., cumulative, callers)
    parts = {part: max((v[3] for (f, _, name), v in stats.items()
                        if f.endswith(suffixes) and name == function), default=0.0)
             for part, (suffixes, function) in PARTS.items()}
    return dict(head=head_name, layers=layers, first_step=round(first, 2),
                **{k: round(v, 2) for k, v in parts.items()}, second_step=round(second, 2),
                load_average=round(os.getloadavg()[0], 2))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--head', default='crf')
    parser.add_argument('--layers', type=int, default=4)
    args = parser.parse_args()
    print(json.dumps(first_step_seconds(args.head, args.layers)))


if __name__ == '__main__':
    main()
