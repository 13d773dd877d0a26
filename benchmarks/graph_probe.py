"""Probe: one change to the graph that TensorFlow runs, off against on, timed in interleaved
rounds, each precision in its own rounds. ``--change``:

* ``flat_dense``: tf-keras's ``Dense`` on (batch, n, d) inputs as Keras calls it (``tensordot``,
  then bias and activation on the 3-D result) against :func:`crf_lr.compat.flat_dense` (the
  flattened input: the graph optimiser fuses product, bias and activation into one kernel);
* ``batched_attention``: bert4keras's attention (``einsum`` products, the mask as a select)
  against :func:`crf_lr.speed.attention.batched_attention` (batched products, the mask as a bias);
* ``closed_form_layer_norm``: bert4keras's layer norm with TensorFlow's gradient of each op
  against :func:`crf_lr.speed.layer_norm.closed_form_layer_norm` (the same forward ops, the gradient
  in closed form);
* ``fused_adam`` (``--part step`` or ``update``): :class:`crf_lr.training.optimizers.Adam`'s update
  as separate ops against :func:`crf_lr.training.optimizers.fused_adam` (one ``ResourceApplyAdam``
  kernel per variable);
* ``light_graph_optimisation``: grappler's default optimisation of the function at its first
  call against :func:`crf_lr.speed.graph_optimisation.optimised_lightly` (one round, no memory or
  layout optimiser);
* ``fused_kernels`` (``--part step``): TensorFlow's ops for bert4keras's GELU and the attention
  softmax's gradient against :func:`crf_lr.speed.fused_kernels.fused_kernels` (one kernel each);
* ``fused_bias_gradient`` (``--part step``): TensorFlow's ``BiasAddGrad`` for every bias against
  :func:`crf_lr.speed.fused_kernels.bias_gradient` (one kernel, float32 sums);
* ``shared_layer_traces`` (``--part step``): every attention and feed-forward layer traced on its
  own against :func:`crf_lr.speed.shared_layers.shared_trace_scope` (one trace per
  configuration, called per layer; the step TensorFlow runs should be the same);
* ``inference_only`` (``--part predict``): the model saved and reloaded by
  :func:`crf_lr.model.precision.load_model` against the same with ``inference_only=True`` (bf16
  encoder weights under mixed_bfloat16, as :meth:`crf_lr.serving.tagger.Tagger.load` loads);
* ``einsum_transposes`` (``--part predict``): attention's transposes as ``tf.transpose`` against
  :func:`crf_lr.speed.attention.einsum_transposes` (one-operand ``Einsum``);
* ``prediction_kernels`` (``--part predict``): the layer norms of a prediction as TensorFlow's
  ops against :func:`crf_lr.speed.fused_kernels.prediction_kernels` (one kernel each);
* ``frozen_weights`` (``--part predict``): the model loaded as ``Tagger.load`` loads it, its weights
  variables against constants (:func:`crf_lr.speed.tracing.frozen_step`, what ``Tagger.freeze``
  does), with the resident memory before and after freezing and the first frozen call.

Everything else as the library runs it (prediction under ``flat_dense``, ``einsum_transposes``
and ``prediction_kernels``, batched attention on).
``--part``:

* ``predict``: the end-to-end benchmark's prediction step (packaged MiniLM + Dense + CRF,
  CoNLL-2003's first test sentences in the end-to-end benchmark's batches of 32, or with
  ``--batch 1`` its first 100 sentences one at a time): the model's scores, as
  :class:`crf_lr.serving.tagger.Tagger` computes them;
* ``step``: the whole training step of the CRF head (4-layer ALBERT-tiny shape, batch 32,
  n = 128; ``models.train_step``, with ``LayerwiseAdam``), of ALBERT or, with ``--encoder``,
  another bert4keras model kind of those sizes (NEZHA: relative positions in the attention);
* ``update`` (``--change fused_adam``): ``LayerwiseAdam``'s update alone of the packaged MiniLM's
  weights (22.7 M) on fixed gradients, the word embedding's sparse as in training (the rows of
  32 x 128 looked-up ids).

    $ python benchmarks/graph_probe.py --change flat_dense --part predict   # a line a precision
    $ python benchmarks/graph_probe.py --change einsum_transposes --part predict --batch 1
    $ python benchmarks/graph_probe.py --change frozen_weights --part predict --batch 1
    $ python benchmarks/graph_probe.py --change prediction_kernels --part predict --batch 1
    $ python benchmarks/graph_probe.py --change batched_attention --part step
    $ python benchmarks/graph_probe.py --change batched_attention --part step --encoder nezha
    $ python benchmarks/graph_probe.py --change batched_attention --part predict --profile 3
    $ python benchmarks/graph_probe.py --change closed_form_layer_norm --part step
    $ python benchmarks/graph_probe.py --change fused_adam --part step
    $ python benchmarks/graph_probe.py --change fused_adam --part update
    $ python benchmarks/graph_probe.py --change light_graph_optimisation --part step
    $ python benchmarks/graph_probe.py --change fused_kernels --part step
    $ python benchmarks/graph_probe.py --change fused_bias_gradient --part step
    $ python benchmarks/graph_probe.py --change shared_layer_traces --part step
"""
import argparse
import contextlib
import json
import os
import sys
import tempfile

import numpy as np

import crf_lr  # noqa: F401  (environment before TensorFlow)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved, load_average, probe_fields, write_lines  # noqa: E402


def changes():
    """{name: context manager factory taking on/off} (``inference_only`` is a way of loading)."""
    from crf_lr.speed.attention import batched_attention, einsum_transposes
    from crf_lr.compat import flat_dense
    from crf_lr.speed.fused_kernels import fused_bias_gradient, fused_kernels, prediction_kernels
    from crf_lr.speed.graph_optimisation import light_graph_optimisation, optimised_lightly
    from crf_lr.speed.layer_norm import closed_form_layer_norm
    from crf_lr.speed.shared_layers import shared_layer_traces, shared_trace_scope
    from crf_lr.training.optimizers import fused_adam

    @contextlib.contextmanager
    def lightly_optimised(on):
        with light_graph_optimisation(on), optimised_lightly():
            yield

    @contextlib.contextmanager
    def shared_traces(on):
        with shared_layer_traces(on), shared_trace_scope():
            yield
    return {'flat_dense': flat_dense, 'batched_attention': batched_attention,
            'closed_form_layer_norm': closed_form_layer_norm, 'fused_adam': fused_adam,
            'light_graph_optimisation': lightly_optimised, 'fused_kernels': fused_kernels,
            'fused_bias_gradient': fused_bias_gradient, 'einsum_transposes': einsum_transposes,
            'prediction_kernels': prediction_kernels, 'shared_layer_traces': shared_traces,
            'inference_only': lambda on: contextlib.nullcontext(),
            'frozen_weights': lambda on: contextlib.nullcontext()}


def within(change, on, function):
    """``function`` called inside the change's block every time: a change read at a call
    (``light_graph_optimisation``: TensorFlow optimises a function again when it is called with
    other options) as much as one read when traced."""
    block = changes()[change]

    def called():
        with block(on):
            return function()
    return called


def reloaded(model, inference_only=(False, True)):
    """{False: ``model`` saved and reloaded by crf_lr.model.precision.load_model, True: the same
    with ``inference_only`` (bf16 encoder weights under mixed_bfloat16)}, for the keys asked."""
    from crf_lr.model.precision import load_model
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, 'model.h5')
        model.save(path, include_optimizer=False)
        return {on: load_model(path, inference_only=on) for on in inference_only}


def predict_functions(change, precision, sentences, batch=32):
    """{False: the change off, True: on} -> a callable scoring every prediction batch of
    ``batch`` (32, or 1: the first 100 sentences one at a time), and {'max_difference': the
    largest difference between their scores (finite entries)}, with the resident memory before
    and after freezing for ``frozen_weights``."""
    from crf_lr.compat import flat_dense, tf
    from crf_lr.speed.attention import einsum_transposes
    from crf_lr.speed.fused_kernels import prediction_kernels
    from crf_lr.model.pretrained import packaged_source
    from crf_lr.data.splits import load_splits
    from crf_lr.speed.tracing import conformed, free_signature, frozen_step
    from e2e_job import prepare
    from e2e_worker import make_side
    data = load_splits('conll2003', train_limit=32, eval_limit=sentences)
    job = prepare(data.train, data.test, data.types, data.units, packaged_source('minilm-en'),
                  'minilm-en', 1e-4, 1, 0)
    model = make_side(job, dict(side='crf_lr', head='crf', precision=precision, threads=None)).model
    models = reloaded(model) if change == 'inference_only' else {False: model, True: model}
    if change == 'frozen_weights':
        models = dict.fromkeys((False, True), reloaded(model, (True,))[True])  # as Tagger.load
    batches = job['predict'][batch]
    signature = free_signature(batches[0])
    functions, scores = {}, {}
    for on in (False, True):
        with flat_dense(), einsum_transposes(), prediction_kernels(), changes()[change](on):
            step = tf.function(lambda x, m=models[on]: m(x, training=False),
                               reduce_retracing=True, autograph=False)
            step.get_concrete_function(signature)
        if change == 'frozen_weights' and on:
            before = resident_mb()
            step = frozen_step(step, signature)
            step(conformed(batches[0], signature))
            memory = dict(resident_mb_before_freezing=before, resident_mb_after=resident_mb())
        scores[on] = [np.asarray(step(conformed(b, signature))) for b in batches]
        functions[on] = (lambda s: lambda: [s(conformed(b, signature)).numpy()
                                            for b in batches])(step)
    difference = max(float(np.abs(np.where(np.isfinite(a), a - b, 0)).max())
                     for a, b in zip(scores[False], scores[True]))
    return functions, dict(max_difference=difference, **(memory if change == 'frozen_weights'
                                                          else {}))


def resident_mb():
    """This process's resident memory now, in MB (``VmRSS``)."""
    with open('/proc/self/status') as status:
        return next(int(line.split()[1]) // 1024 for line in status
                    if line.startswith('VmRSS'))


def step_functions(change, precision, encoder='albert'):
    """The same for the training step of the CRF head on ``encoder`` (a bert4keras model kind);
    the difference of the first losses."""
    from crf_lr.compat import keras, tf
    from models import probe_step
    functions, losses = {}, {}
    for on in (False, True):
        losses[on], functions[on] = probe_step(tf, keras, 'CRF (crf_lr)', precision,
                                               tracing=lambda: changes()[change](on),
                                               encoder=encoder)
    return functions, abs(losses[False] - losses[True])


def update_functions(change, precision):
    """The same for ``LayerwiseAdam``'s update of MiniLM's weights alone; the largest difference
    between the two forms' changes of the weights by one update from the same values."""
    from crf_lr.compat import keras, tf
    from crf_lr.model.encoders import load_encoder
    from crf_lr.training.optimizers import LayerwiseAdam
    from crf_lr.model.precision import set_precision
    set_precision(precision)
    encoder, _, _ = load_encoder('minilm-en')
    set_precision('float32')
    variables = encoder.trainable_variables
    rng = np.random.default_rng(0)

    def gradient(variable):
        if 'Embedding-Token' not in variable.name:       # dense: every weight but the word table
            return tf.constant(rng.normal(0, 1e-3, variable.shape), variable.dtype)
        ids = np.unique(rng.integers(0, variable.shape[0], 32 * 128))
        return tf.IndexedSlices(tf.constant(rng.normal(0, 1e-3, (ids.size, variable.shape[1])),
                                            variable.dtype), tf.constant(ids))
    gradients = [gradient(v) for v in variables]
    start = [v.numpy() for v in variables]
    functions, moved = {}, {}
    for on in (False, True):
        optimizer = LayerwiseAdam(1e-4, lr_multipliers={'Embedding-': 0.5})
        def apply(o=optimizer):
            o.apply_gradients(zip(gradients, variables))
            return tf.constant(0)
        update = tf.function(apply)
        with changes()[change](on):
            update()                                              # traced here
        moved[on] = [v.numpy() - w for v, w in zip(variables, start)]
        for v, w in zip(variables, start):
            v.assign(w)
        functions[on] = (lambda u: lambda: u().numpy())(update)
    keras.backend.clear_session()
    return functions, max(float(np.abs(a - b).max()) for a, b in zip(moved[False], moved[True]))


def profiled(function, calls):
    """{'on_profile': {wall_ms, ms_by_kind, ms_by_op_type, ms_by_place}} of ``calls`` calls of
    ``function``, or {} when ``calls`` is 0."""
    if not calls:
        return {}
    from crf_lr.compat import tf
    from step_profile import profile_step
    wall, kinds, types, places = profile_step(tf, function, [], calls)
    return {'on_profile': dict(wall_ms=wall, ms_by_kind=kinds, ms_by_op_type=types,
                               ms_by_place=places)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--change', required=True, choices=(
        'flat_dense', 'batched_attention', 'closed_form_layer_norm', 'fused_adam',
        'light_graph_optimisation', 'fused_kernels', 'fused_bias_gradient', 'inference_only',
        'einsum_transposes', 'prediction_kernels', 'frozen_weights', 'shared_layer_traces'))
    parser.add_argument('--part', choices=('predict', 'step', 'update'), default='predict')
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--sentences', type=int, default=200, help='--part predict: test sentences')
    parser.add_argument('--batch', type=int, choices=(1, 32), default=32,
                        help='--part predict: batches of 32, or the first 100 sentences one by one')
    parser.add_argument('--out', default=None, help='JSON lines (default: '
                        'benchmarks/results/graph_probe.<change>.<part>.json)')
    parser.add_argument('--encoder', choices=('albert', 'nezha', 'roformer', 'bert'),
                        default='albert', help='--part step: the bert4keras model kind of the '
                        'ALBERT-tiny-sized encoder')
    parser.add_argument('--profile', type=int, default=0, metavar='CALLS',
                        help='also profile this many calls with the change on: op ms by kind '
                             'and the costliest op types (step_profile.py)')
    args = parser.parse_args()
    args.out = (args.out
                or
                os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results',
                             f'graph_probe.{args.change}.{args.part}'
                             f'{"" if args.batch == 32 else f".batch{args.batch}"}'
                             f'{"" if args.encoder == "albert" else f".{args.encoder}"}.json'))
    if (args.change in ('inference_only', 'einsum_transposes', 'prediction_kernels',
                        'frozen_weights')
            and args.part != 'predict'):
        parser.error(f'--change {args.change} is made for prediction: use it with --part predict')
    if args.change == 'shared_layer_traces' and args.part != 'step':
        parser.error('--change shared_layer_traces changes how a training step is traced: use it '
                     'with --part step')
    if args.change == 'fused_adam' and args.part == 'predict':
        parser.error('--change fused_adam changes the optimizer\'s update: use it with --part '
                     'step or --part update')
    if args.encoder != 'albert' and args.part != 'step':
        parser.error('--encoder chooses the encoder of the training step: use it with --part step')
    if args.part == 'update' and args.change != 'fused_adam':
        parser.error('--part update times the optimizer alone: use it with --change fused_adam')
    lines = []
    for precision in ('float32', 'mixed_bfloat16'):
        if args.part == 'predict':
            functions, found = predict_functions(
                args.change, 'bfloat16' if precision != 'float32' else precision, args.sentences,
                args.batch)
        else:
            functions, difference = (
                update_functions(args.change, precision) if args.part == 'update'
                else step_functions(args.change, precision, args.encoder))
            found = dict(max_difference=difference,
                         **(dict(encoder=args.encoder) if args.part == 'step' else {}))
        load = load_average()
        timings = interleaved({side: within(args.change, on, functions[on])
                               for side, on in (('off', False), ('on', True))},
                              rounds=args.rounds)
        lines.append(json.dumps(dict(change=args.change, part=args.part, precision=precision,
                                     rounds=args.rounds, **found,
                                     **probe_fields(timings, 'off', 'on'),
                                     load_average=[load, load_average()],
                                     **profiled(within(args.change, True, functions[True]),
                                                args.profile))))
        print(lines[-1], flush=True)
    if args.out:
        write_lines(args.out, lines)


if __name__ == '__main__':
    main()
