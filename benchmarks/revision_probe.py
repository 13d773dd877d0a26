"""Probe: the pointer heads' training step with ``crf_lr/model/global_pointer.py`` as it was at a
git revision against the working tree's, in interleaved rounds, each head and precision in its own.

The old module is read with ``git show REV:crf_lr/model/global_pointer.py`` (a revision since the
wings, 540f0d8: an older module imports modules by their old paths) and loaded beside the
current one (its layers not registered with Keras); each side builds the benchmark's model
(``models.build_head_in``: 4-layer ALBERT-tiny-shaped random encoder, seed 0, batch 32, n = 128,
``LayerwiseAdam``) with its own layer classes, so the two start from the same weights and their
first losses are compared. Prints a JSON line per (head, precision): each side's step ms and
before / now per round, median [min-max].

    $ python benchmarks/revision_probe.py --before e406173^    # before the strided copies went
"""
import argparse
import json
import linecache
import os
import subprocess
import sys
import types
from unittest import mock

import crf_lr  # noqa: F401  (environment before TensorFlow)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from timing import interleaved, load_average, probe_fields, write_lines  # noqa: E402

MODULE = 'crf_lr/model/global_pointer.py'
HEADS = ('GlobalPointer sparse', 'EfficientGlobalPointer sparse')


def module_at(revision):
    """``crf_lr.model.global_pointer`` as it was at ``revision`` (a new module object, its layers
    not registered with Keras).

        >>> old = module_at('e406173^'); old.GlobalPointer(heads=3, head_size=64)
    """
    import crf_lr.model.global_pointer  # noqa: F401  (every module it imports registers first)
    import crf_lr.model.serialization
    source = subprocess.run(['git', 'show', f'{revision}:{MODULE}'], cwd=os.path.dirname(HERE),
                            check=True, capture_output=True, text=True).stdout
    filename = f'{revision}:{MODULE}'
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(f'global_pointer_at_{revision}')

    def unregistered(obj=None, **_):                 # @register and @register(name=...)
        return obj if obj is not None else (lambda o: o)
    with mock.patch.object(crf_lr.model.serialization, 'register', unregistered):
        exec(compile(source, filename, 'exec'), module.__dict__)
    return module


def step_functions(old, head, precision):
    """{'before': step, 'now': step} of ``head`` under ``precision``, and the difference of the
    two sides' first losses."""
    import crf_lr.model.global_pointer as current
    from crf_lr.compat import keras, tf
    from models import probe_step
    functions, losses = {}, {}
    for side, module in (('before', old), ('now', current)):
        losses[side], functions[side] = probe_step(
            tf, keras, head, precision, building=lambda m=module: mock.patch.multiple(
                current, GlobalPointer=m.GlobalPointer,
                EfficientGlobalPointer=m.EfficientGlobalPointer))
    return functions, abs(losses['before'] - losses['now'])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--before', required=True, help='git revision of the old module')
    parser.add_argument('--heads', nargs='+', default=list(HEADS), choices=HEADS)
    parser.add_argument('--precisions', nargs='+', default=['float32', 'mixed_bfloat16'],
                        choices=('float32', 'mixed_bfloat16'))
    parser.add_argument('--rounds', type=int, default=9)
    parser.add_argument('--out', default=None, help='also write the JSON lines to this file')
    args = parser.parse_args()
    old = module_at(args.before)
    lines = []
    for head in args.heads:
        for precision in args.precisions:
            functions, difference = step_functions(old, head, precision)
            load = load_average()
            timings = interleaved(functions, rounds=args.rounds)
            lines.append(json.dumps(dict(
                before=args.before, head=head, precision=precision, rounds=args.rounds,
                first_loss_difference=difference, **probe_fields(timings, 'before', 'now'),
                load_average=[load, load_average()])))
            print(lines[-1], flush=True)
    if args.out:
        write_lines(args.out, lines)


if __name__ == '__main__':
    main()
