"""The run folder of a task script (arguments, per-epoch log, results, checkpoints) and the
resumable training loop that fills it.

    >>> run = RunLog('runs/ner', config=dict(lr=1e-3), overwrite=False)
    >>> results = fit(model, run, batches_for_epoch, evaluate, epochs=3, metric='f1',
    ...               save_best=lambda: tagger.save(run.model_dir))
"""
import contextlib
import json
import os
import time

import numpy as np

from crf_lr.utils.atomic import replace_folder
from crf_lr.utils.console import show_progress
from crf_lr.speed.graph_optimisation import optimised_lightly
from crf_lr.speed.tracing import as_arrays, free_signature, traced_without_autograph


def make_samples(examples, encoder, maxlen, head):
    """Training windows of token ids with the head's targets.

    Args:
        examples: iterable of ``(units, tags, spans)``: units (str of characters or list of
            words), one tag per unit (or None), and ``(start, end, label)`` unit spans (windows
            never cut one: entities, or words when segmenting).
        encoder: :class:`~crf_lr.data.pieces.UnitEncoder`; maxlen: tokens per window with [CLS] and
            [SEP]; head: :class:`~crf_lr.model.heads.Head` (its ``target`` makes each window's
            target).
    Returns:
        list of ``(token_ids, target)``.

        >>> samples = make_samples([(e.tokens, e.tags, e.spans) for e in train], enc, 128, head)
    """
    from crf_lr.data.pieces import windows_of
    from crf_lr.data.windows import spans_to_windows
    samples = []
    for units, tags, spans in examples:
        windows = windows_of(units, maxlen, encoder, spans)
        for (offset, window), window_spans in zip(windows, spans_to_windows(windows, spans)):
            token_ids, starts = encoder.encode(window)
            window_tags = None if tags is None else tags[offset:offset + len(window)]
            samples.append((token_ids, head.target(window_tags, window_spans, starts)))
    return samples


def epoch_batches(samples, batch_size, seed, epoch, head):
    """The batches of one epoch, as ``crf_lr.data.batching.Batches`` orders them (seeded shuffle,
    length buckets) with the seed ``(seed, epoch)``, so a resumed run sees the same order.

    Returns:
        list of ``(inputs, targets)``: ``[token_ids, segment_ids]`` int32 (batch, n), and the
        head's batch targets.
    """
    from crf_lr.data.batching import Batches, Encoded
    items = [Encoded(token_ids, labels=target) for token_ids, target in samples]
    batches = Batches(items, batch_size, label_fn=head.batch_targets, seed=[seed, epoch])
    return [(batch.inputs, batch.labels) for batch in batches]


def warmup_schedule(warmup_proportion, windows, batch_size, epochs):
    """``LayerwiseAdam`` keyword arguments that warm the rate up over ``warmup_proportion`` of a
    run's steps, then decay it linearly to 0; ``{}`` (a constant rate) when the proportion is 0.

        >>> warmup_schedule(0.1, windows=1000, batch_size=16, epochs=3)
        {'warmup_steps': 19, 'total_steps': 189}
    """
    steps = -(-windows // batch_size) * epochs
    return (dict(warmup_steps=round(warmup_proportion * steps), total_steps=steps)
            if warmup_proportion else {})


def plateaued(values, min_gain, epochs=2):
    """True when the best of ``values`` (one per epoch) rose by less than ``min_gain`` over the
    last ``epochs`` epochs.

        >>> plateaued([0.50, 0.70, 0.702, 0.704], min_gain=0.003)     # +0.004 over 2 epochs
        False
    """
    return len(values) > epochs and max(values) - max(values[:-epochs]) < min_gain


def fit(model, run, batches_for_epoch, evaluate, epochs, metric, save_best, extra=None,
        final_test=None, progress=True, stop_gain=None, stop_epochs=2, announce=True):
    """Train epoch by epoch; after each, evaluate, log, keep the best model and checkpoint.

    Resumable: the epochs ``run`` has finished are skipped after restoring the model and
    optimiser state from its checkpoint; a rerun of a finished (or early-stopped) run trains
    nothing and says so, and its final test line says whether the selected model was scored
    again or for the first time (a run killed before its test scores). Ctrl-C stops with
    one line saying where the last finished epoch is saved and how to resume.

    Args:
        model: a compiled keras.Model.
        run: :class:`RunLog`.
        batches_for_epoch: function epoch (0-based) -> list of ``(inputs, targets)``.
        evaluate: function epoch (1-based) -> dict of JSON-serialisable scores holding ``metric``
            (scored on the development split: it selects the epoch).
        epochs: total number of epochs.
        metric: name of the score that selects the epoch.
        save_best: function called when ``metric`` improves (e.g. ``tagger.save(run.model_dir)``).
        extra: dict added to ``results.json``.
        final_test: function -> dict of test scores of the selected model (run once, after the
            last epoch; stored as ``test`` in ``results.json``), or None.
        progress: show a tqdm bar per epoch on a terminal (never in a file or pipe, where the
            one line per epoch stands alone).
        stop_gain: stop before ``epochs`` once the best ``metric`` has risen by less than this
            over the last ``stop_epochs`` epochs (:func:`plateaued`); None: run every epoch.
        announce: end with :meth:`RunLog.model_line` (False: the caller prints it when it is
            done with the model).
    Returns:
        the results dict written to ``results.json``.

        >>> fit(model, run, lambda e: batches, lambda e: {'f1': 0.9}, 3, 'f1', save)
    """
    from tqdm import tqdm

    from crf_lr.compat import tf
    done = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=done)

    def stops():
        return stop_gain is not None and plateaued([r[metric] for r in run.records], stop_gain,
                                                   stop_epochs)

    stop_reason = f'{metric} rose by less than {stop_gain} over {stop_epochs} epochs'
    resumed, tested = run.finished_epochs, False
    if resumed:
        checkpoint.read(run.checkpoint_prefix).expect_partial()
        run.truncate(int(done.numpy()))
        resumed = run.finished_epochs
        tested = run.tested_alike and _scored_test(run.results_path)     # this test file's
        done_before = (f'had finished its {resumed} epochs' if resumed >= epochs else
                       f'had stopped after epoch {resumed} ({stop_reason})' if stops() else None)
        print(f'{run.output} {done_before}: nothing to train (--overwrite trains afresh)'
              if done_before else f'resuming {run.output} after epoch {resumed}')
    results = run.write_results(metric, **(extra or {}))
    epoch = run.finished_epochs
    try:
        for epoch in range(run.finished_epochs, epochs):
            if stops():
                extra = dict(extra or {}, stopped_after_epoch=epoch)
                results = run.write_results(metric, **extra)
                if epoch > resumed:                              # a rerun said so above
                    print(f'stopped after epoch {epoch}: {stop_reason}')
                break
            record = _train_epoch(model, batches_for_epoch(epoch), epoch, epochs, progress, tqdm)
            started = time.time()
            scores = evaluate(epoch + 1)
            record.update(eval_seconds=round(time.time() - started, 2), **scores)
            record['step_losses'] = record.pop('step_losses')       # last: the long field
            best = run.best(metric)
            if best is None or scores[metric] > best[metric]:
                save_best()
            run.append(record)
            done.assign(epoch + 1)
            with replace_folder(run.checkpoint_dir) as scratch:     # index and data together
                checkpoint.write(os.path.join(scratch, os.path.basename(run.checkpoint_prefix)))
            results = run.write_results(metric, **(extra or {}))
            print(f'epoch {epoch + 1}: loss {record["loss"]:.4f}, {metric} {scores[metric]:.4f} '
                  f'(best {results["best"]:.4f} at epoch {results["best_epoch"]}), '
                  f'{record["train_seconds"]:.0f}s training')
    except KeyboardInterrupt:
        saved = (f'the run after epoch {epoch} is saved in {run.output}' if epoch else
                 'no epoch had finished')
        raise SystemExit(f'\ninterrupted during epoch {epoch + 1}: {saved}; run the same command '
                         f'again to resume') from None
    if final_test is not None:
        test = final_test()
        results = run.write_results(metric, **(extra or {}), test=test)
        if test is not None:
            rerun = resumed and run.finished_epochs == resumed
            scored = (f'scored {"again" if tested and rerun else "once"} with the selected model'
                      + (' (a rerun: no epoch trained)' if rerun else ''))
            print(f'selected epoch {results["best_epoch"]} ({metric} {results["best"]:.4f}); '
                  f'test F1 {test["f1"]:.4f}, {scored}')
    if announce and os.path.isdir(run.model_dir):
        print(run.model_line())
    return results


def _scored_test(path):
    """True where the ``results.json`` at ``path`` holds test scores (a run killed before its
    final test has none; one without a test file holds null)."""
    try:
        with open(path, encoding='utf-8') as f:
            return json.load(f).get('test') is not None
    except (OSError, ValueError):
        return False


def train_steps(model, batches, crf_xla=False):
    """Train ``model`` on each of ``batches`` in turn, one step each; yield each step's loss.

    The step is Keras's own train function (``model.make_train_function()``, the one ``fit`` and
    ``train_on_batch`` run, under the model's distribution strategy), fed from a ``tf.data``
    dataset whose signature is the first batch's with every dimension None, traced once per
    model by :func:`trace_once` (for batches of every size and length, without AutoGraph where
    the model allows, the CRF's forward-backward one CPU kernel, or where the kernel does not
    run compiled by XLA only if ``crf_xla``) and called within
    :func:`crf_lr.speed.graph_optimisation.optimised_lightly` (on CPU, grappler's passes in one
    round at the first call: fewer passes before the first step, so step 1 is shorter;
    docs/performance.md, "The first epoch against a steady one").

    Args:
        model: a compiled keras.Model; built inside ``strategy.scope()``
            (:func:`crf_lr.training.distribute.make_strategy`), each batch is the global batch,
            split between the replicas.
        batches: list of ``(inputs, targets)``, NumPy arrays or lists / tuples of them, all of
            one structure, ranks and dtypes (float arrays are cast to Keras's float type, as
            ``train_on_batch`` does).
    Yields:
        float: the loss of each step, as ``train_on_batch`` returns it (computed before the
        update); with several replicas, the mean over the whole global batch. Sets
        ``model.distribute_reduction_method = 'first'`` (see :func:`trace_once`).

        >>> for loss in train_steps(model, batches):
        ...     print(loss)
    """
    if not batches:
        raise ValueError('train_steps: no batches to train on')
    iterator = _step_iterator(model, _batches_dataset(batches))
    train_function = trace_once(model, batches[0], crf_xla, iterator)
    for _ in batches:
        with _tracing(model, crf_xla):                   # where a Keras-traced function traces
            model.reset_metrics()                            # the loss of this step alone
            with optimised_lightly():                    # grappler in one round at the first call
                logs = train_function(iterator)
        yield float(logs['loss'])


def trace_once(model, batch, crf_xla=False, iterator=None):
    """Trace ``model``'s train step now, once, for batches like ``batch`` of every size and
    length: ``model.fit``, ``model.train_on_batch`` and :func:`train_steps` then run it without
    tracing again. Plain ``train_on_batch`` traces for the first batch's exact shape and again,
    generalised, for a second shape, with AutoGraph: every trace is paid again in the first
    epoch (docs/performance.md, "The first epoch against a steady one"). Call it after
    ``model.compile``
    (which forgets the traced step); a second call with the same ``crf_xla`` keeps the step.

    Traced without AutoGraph where the model allows (:func:`_traced_without_autograph`), with
    the CRF's forward-backward as one CPU kernel (:mod:`crf_lr.speed.fused_kernels`), or where the
    kernel does not run (a GPU, no compiler, switched off) compiled by XLA only if ``crf_xla``
    (:func:`crf_lr.model.crf.use_xla`): in a training step on CPU XLA's compilations cost more than
    they save. With several replicas it only prepares the step and Keras traces it at the first
    call. Creates the optimiser's slots and the compiled loss and metrics first, and sets
    ``model.distribute_reduction_method = 'first'``: Keras's metrics are reduced over every
    replica already, and its default ('auto') summed them again over the workers of a
    multi-worker strategy (the loss came out x workers).

        >>> trace_once(model, (inputs, labels))       # a batch of NumPy arrays
        >>> model.train_on_batch(inputs, labels)      # no trace here, nor for other shapes
    """
    if model.optimizer is None:
        raise ValueError('trace_once: the model is not compiled; call model.compile(...) first')
    traced = model.train_function
    if traced is not None and getattr(traced, '_crf_lr_crf_xla', None) == bool(crf_xla):
        return traced                                     # traced here, since the compile
    strategy = model.distribute_strategy
    _create_step_variables(model, as_arrays(batch[1]))
    model.distribute_reduction_method = 'first'
    traced = model.make_train_function(force=True)
    if strategy.num_replicas_in_sync == 1:
        if iterator is None:
            iterator = _step_iterator(model, _batches_dataset([batch]))
        with _tracing(model, crf_xla):
            traced = _traced_without_autograph(traced, iterator)
    traced._crf_lr_crf_xla = bool(crf_xla)
    model.train_function = traced
    return traced


@contextlib.contextmanager
def _tracing(model, crf_xla):
    """Where ``model``'s train step is traced: its strategy's scope, the CRF's forward-backward
    in XLA only if ``crf_xla`` where its kernel does not run (:func:`crf_lr.model.crf.use_xla`),
    dense layers on flattened inputs (:func:`crf_lr.compat.flat_dense`: fewer ops to trace and
    schedule, so step 1 is shorter, and a step no slower; docs/performance.md, "What each speed
    patch buys", ``flat_dense``) and one trace per attention and feed-forward configuration
    (:func:`crf_lr.speed.shared_layers.shared_trace_scope`: about half the ops to trace). Per
    thread: replicas of a ``MirroredStrategy``, which trace in threads of their own, keep
    Keras's dense layers and trace every layer."""
    from crf_lr.compat import flat_dense
    from crf_lr.model.crf import use_xla
    from crf_lr.speed.shared_layers import shared_trace_scope
    with model.distribute_strategy.scope(), use_xla(crf_xla), flat_dense(), \
            shared_trace_scope():
        yield


def _step_iterator(model, dataset):
    """An iterator over ``dataset`` (:func:`_batches_dataset`) under ``model``'s strategy."""
    from crf_lr.compat import tf, without_autotune
    options = tf.data.Options()     # several workers: each takes its replicas' rows of a batch
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = without_autotune(dataset.with_options(options))     # no stall when it is deleted
    return iter(model.distribute_strategy.experimental_distribute_dataset(dataset))


def _batches_dataset(batches):
    """A ``tf.data`` dataset of ``batches`` (non-empty list of ``(inputs, targets)`` of varying
    shapes), in order, with the signature :func:`crf_lr.speed.tracing.free_signature`. Built from
    tensors: a ``Dataset.from_generator`` made every later training step of the process slower,
    used or not (its Python generator holds the interpreter's lock beside the step's threads).

        >>> next(iter(_batches_dataset([((ids, segments), tags)])))    # the batch, as tensors
    """
    from crf_lr.compat import tf
    signature = free_signature(batches[0])
    per_batch = [tf.nest.flatten(as_arrays(batch)) for batch in batches]
    columns = []
    for k, spec in enumerate(tf.nest.flatten(signature)):
        leaves = [batch[k] for batch in per_batch]
        values = np.concatenate([leaf.ravel() for leaf in leaves]).astype(
            spec.dtype.as_numpy_dtype, copy=False)
        columns.append((tf.RaggedTensor.from_row_lengths(values, [leaf.size for leaf in leaves]),
                        np.array([leaf.shape for leaf in leaves], np.int64)))

    def unpack(*pieces):
        return tf.nest.pack_sequence_as(signature, [tf.reshape(values, shape)
                                                    for values, shape in pieces])
    return tf.data.Dataset.from_tensor_slices(tuple(columns)).map(unpack)


def _traced_without_autograph(function, iterator):
    """Keras's train ``function`` (a ``tf.function``) re-made without AutoGraph and traced now for
    ``iterator``'s batches (:func:`crf_lr.speed.tracing.traced_without_autograph`: no rewrite of
    every layer's source before the trace, so the trace is shorter), or ``function`` itself
    where a layer needs AutoGraph. One replica only: under a mirrored strategy the function
    without AutoGraph was traced again for the next epoch's iterator (2 traces against 1)."""
    from crf_lr.compat import tf
    if not isinstance(function, tf.types.experimental.PolymorphicFunction):
        return function                                      # run_eagerly
    return traced_without_autograph(function.python_function, iterator) or function


def _create_step_variables(model, targets):
    """Create the optimiser's slots and the compiled loss and metrics of ``model`` (for
    ``targets``, a batch's) before its train function is traced: a ``tf.function`` that creates
    variables when first called is traced twice, once to create them and once without."""
    optimizer = model.optimizer
    with model.distribute_strategy.scope():
        # legacy (OptimizerV2) optimisers, such as crf_lr's, create their weights privately
        create = getattr(optimizer, '_create_all_weights', None) or optimizer.build
        create(model.trainable_variables)
        if not model.compiled_loss.built:
            model.compiled_loss.build(model.output)
        if not model.compiled_metrics.built:
            model.compiled_metrics.build(model.output, targets)


def _train_epoch(model, batches, epoch, epochs, progress, tqdm):
    """One pass over ``batches``; the epoch's record (mean loss, step losses, speed)."""
    windows = sum(len(targets) for _, targets in batches)
    losses, started = [], time.time()
    bar = tqdm(train_steps(model, batches), total=len(batches), desc=f'epoch {epoch + 1}/{epochs}',
               disable=not (progress and show_progress()), mininterval=2, leave=False)
    for loss in bar:
        if not np.isfinite(loss):
            raise FloatingPointError(f'epoch {epoch + 1}, step {len(losses) + 1}: the loss is '
                                     f'{loss} (lower --lr?)')
        losses.append(loss)
        bar.set_postfix(loss=f'{np.mean(losses[-50:]):.4f}', refresh=False)
    seconds = time.time() - started
    return dict(epoch=epoch + 1, loss=float(np.mean(losses)), steps=len(losses),
                train_seconds=round(seconds, 2),
                train_windows_per_second=round(windows / max(seconds, 1e-9), 2),
                step_losses=[round(x, 5) for x in losses])
