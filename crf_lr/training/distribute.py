"""Training on several devices or machines with ``tf.distribute``: the strategy of the task
scripts' ``--strategy`` flag, and where each worker writes (docs/distribute.md).

Build and compile the model inside ``strategy.scope()``; :func:`crf_lr.training.loop.fit` then
trains it on every replica, each global batch (``--batch-size``) split between them.

    >>> strategy = make_strategy('mirrored')
    >>> print(strategy_line(strategy))        # 'strategy: mirrored, 2 replicas (...)'
    >>> with strategy.scope():
    ...     model = keras.Model(encoder.inputs, head.build(piece_states(encoder)))
    ...     model.compile(LayerwiseAdam(1e-3), loss=head.loss)
    >>> run = RunLog(worker_folder('runs/ner', strategy), config)
"""
import os

STRATEGIES = ('default', 'mirrored', 'multiworker')


def make_strategy(name='default'):
    """The ``tf.distribute`` strategy called ``name`` (:func:`strategy_line` describes it).

    - ``default``: TensorFlow's default strategy (one device).
    - ``mirrored``: ``MirroredStrategy`` over this machine's GPUs, or, without GPUs, over its
      logical CPU devices (one unless configured).
    - ``multiworker``: ``MultiWorkerMirroredStrategy`` over the machines listed in the
      ``TF_CONFIG`` environment variable, each with its own GPUs (or its CPU). Call this first,
      before any other TensorFlow work of the process.

    Raises:
        ValueError for another name, or for ``multiworker`` without ``TF_CONFIG``.

        >>> strategy = make_strategy('multiworker')
    """
    if name not in STRATEGIES:
        raise ValueError(f'strategy {name!r}: expected one of {", ".join(STRATEGIES)}')
    if name == 'multiworker' and not os.environ.get('TF_CONFIG'):
        raise ValueError('--strategy multiworker reads the cluster from the TF_CONFIG environment '
                         'variable, which is not set (docs/distribute.md shows one)')
    from crf_lr.compat import tf
    if name == 'default':
        return tf.distribute.get_strategy()
    if name == 'mirrored':
        devices = (tf.config.list_logical_devices('GPU')
                   or tf.config.list_logical_devices('CPU'))
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    return tf.distribute.MultiWorkerMirroredStrategy()


def strategy_line(strategy):
    """One line naming ``strategy`` (from :func:`make_strategy`), its replicas, its workers and
    devices, as the task scripts print it once their data is read.

        >>> strategy_line(make_strategy('mirrored'))
        'strategy: mirrored, 2 replicas (/job:localhost/replica:0/task:0/device:CPU:0, ...)'
    """
    from crf_lr.compat import tf
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        name = 'multiworker'
    elif isinstance(strategy, tf.distribute.MirroredStrategy):
        name = 'mirrored'
    else:
        return 'strategy: default, 1 replica (the device TensorFlow places it on)'
    replicas = strategy.num_replicas_in_sync
    line = f'strategy: {name}, {replicas} replica{"s" if replicas > 1 else ""}'
    resolver = strategy.cluster_resolver
    if resolver is not None and resolver.task_type:
        workers = sum(len(tasks) for tasks in resolver.cluster_spec().as_dict().values())
        line += (f' on {workers} workers; this is {resolver.task_type} {resolver.task_id}'
                 f'{" (chief)" if is_chief(strategy) else ""}')
    return f'{line} ({", ".join(strategy.extended.worker_devices)})'


def is_chief(strategy):
    """True for the worker that writes the run folder: the only one, the ``chief`` task, or worker
    0 of a cluster without a chief task."""
    resolver = strategy.cluster_resolver
    if resolver is None or not resolver.task_type or resolver.task_type == 'chief':
        return True
    return (resolver.task_type == 'worker' and resolver.task_id == 0
            and 'chief' not in resolver.cluster_spec().as_dict())


def worker_folder(output, strategy):
    """The folder a worker writes its run to: ``output`` for the chief; for another worker
    ``output/workertemp_<id>`` (TensorFlow's convention), so that it writes its checkpoints and
    model (every worker must) without overwriting the chief's, and finds them again to resume.

        >>> run = RunLog(worker_folder(args.output, strategy), vars(args))
    """
    if is_chief(strategy):
        return output
    return os.path.join(output, f'workertemp_{strategy.cluster_resolver.task_id}')
