"""Where step 1 of ``crf_lr.training.loop.train_steps`` spends its time: the scripts' model
(bert4keras ALBERT-tiny-shaped random encoder, ``crf_lr.model.heads`` head, ``LayerwiseAdam``) on
one synthetic batch of 16, profiled with cProfile in a fresh process. Prints one JSON line: the
whole first step, the trace (``get_concrete_function``) and inside it the forward pass, the
gradients and the optimiser's update, the first call of the traced graph (graph optimisation and the
first run), a second step for comparison, and how many ops the traced graph holds (and how many
under layer-norm scopes). ``TF_CPP_VMODULE=meta_optimizer=1`` in the environment adds grappler's own
per-pass times to stderr.

    $ python benchmarks/first_step.py --head crf --layers 4
    $ python benchmarks/first_step.py --head crf --layers 4 --bert4keras-layer-norm
    $ python benchmarks/first_step.py --head crf --layers 4 --tensorflow-graph-optimisation
    $ CRF_LR_SHARED_LAYER_TRACES=0 python benchmarks/first_step.py --head crf --layers 4
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


def graph_ops(function):
    """(ops, of them under a layer norm's scope) of the graph ``function`` (a ``tf.function``
    traced once) holds, its gradient's and optimiser update's included."""
    graph, = [f.graph for f in function._list_all_concrete_functions_for_serialization()]
    names = [op.name for op in graph.get_operations()]
    return len(names), sum('-Norm/' in name for name in names)


def first_step_seconds(head_name, layers, bert4keras_layer_norm=False,
                       tensorflow_graph_optimisation=False):
    """Step 1's parts (see the module's docstring); ``bert4keras_layer_norm``: traced with
    bert4keras's layer-norm gradient; ``tensorflow_graph_optimisation``: first called with
    grappler's default options, not :func:`crf_lr.speed.graph_optimisation.optimised_lightly`'s."""
    from crf_lr.data.batching import Batches
    from crf_lr.compat import keras
    from crf_lr.speed.graph_optimisation import light_graph_optimisation
    from crf_lr.speed.layer_norm import closed_form_layer_norm
    from crf_lr.speed.shared_layers import sharing_enabled
    from crf_lr.training.loop import train_steps
    model = scripts_model(keras, head_name, layers)
    batches = [(b.inputs, b.labels) for b in Batches(synthetic_items(32, 128), 16, maxlen=128)]
    profile, steps = cProfile.Profile(), train_steps(model, batches)
    with closed_form_layer_norm(not bert4keras_layer_norm), \
            light_graph_optimisation(not tensorflow_graph_optimisation):
        started = time.perf_counter()
        profile.runcall(next, steps)                   # traced and first called here
        first = time.perf_counter() - started
        started = time.perf_counter()
        next(steps)                                    # the same options: not optimised again
        second = time.perf_counter() - started
    stats = pstats.Stats(profile).stats       # (file, line, name) -> (..., cumulative, callers)
    parts = {part: max((v[3] for (f, _, name), v in stats.items()
                        if f.endswith(suffixes) and name == function), default=0.0)
             for part, (suffixes, function) in PARTS.items()}
    ops, layer_norm_ops = graph_ops(model.train_function)
    return dict(head=head_name, layers=layers, first_step=round(first, 2),
                **{k: round(v, 2) for k, v in parts.items()}, second_step=round(second, 2),
                ops=ops, layer_norm_ops=layer_norm_ops, shared_layer_traces=sharing_enabled(),
                load_average=round(os.getloadavg()[0], 2))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--head', default='crf')
    parser.add_argument('--layers', type=int, default=4)
    parser.add_argument('--bert4keras-layer-norm', action='store_true',
                        help="trace bert4keras's layer-norm gradient, not "
                             "crf_lr.speed.layer_norm's")
    parser.add_argument('--tensorflow-graph-optimisation', action='store_true',
                        help="first call the step with grappler's default options, not "
                             "crf_lr.speed.graph_optimisation's lighter ones")
    args = parser.parse_args()
    print(json.dumps(first_step_seconds(args.head, args.layers, args.bert4keras_layer_norm,
                                        args.tensorflow_graph_optimisation)))


if __name__ == '__main__':
    main()
