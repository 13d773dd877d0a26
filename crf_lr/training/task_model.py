"""The model of a task script (examples/task_ner.py, examples/task_cws_crf.py), built the same way
for every task: numerics checks, precision and seed; the encoder (``--encoder``, else chosen by the
script of the text, its vocabulary checked against the training units; its first ``--layers``);
the head on its piece states; the training windows; ``LayerwiseAdam`` with the
warmup schedule; a ``Tagger`` over it all.

    >>> built = build_task_model(args, strategy, data.units, lambda: make_head('crf', types),
    ...                          [(e.tokens, e.tags, e.spans) for e in data.train],
    ...                          [e.source for e in data.train])
    >>> built.tagger, built.samples, built.lr          # Tagger, training windows, learning rate
"""
from collections import namedtuple

TaskModel = namedtuple('TaskModel', 'tagger samples encoder encoder_info lr')


def build_task_model(args, strategy, units, make_head, examples, sources):
    """Build and compile a task script's model; print a line describing it.

    Args:
        args: the parsed flags of ``crf_lr.utils.cli.add_common_arguments`` (``reinit_top``
        optional). strategy: a ``tf.distribute`` strategy
        (``crf_lr.training.distribute.make_strategy``). units: 'chars' or 'words', the text units of
        the data. make_head: a function of no argument giving the head (called in the strategy's
        scope). examples: ``(units, tags, spans)`` of every training sentence.
        sources: the ``path:line`` of each: a span longer than a window stops the run there
            (``crf_lr.data.pieces.check_spans_fit``), before any epoch.
    Returns:
        ``TaskModel(tagger, samples, encoder, encoder_info, lr)``: the ``Tagger``, the training
        windows (``crf_lr.training.loop.make_samples``), the encoder's name and description, the
        rate.
    """
    from crf_lr import set_check_numerics, set_precision
    from crf_lr.utils.cli import user_errors
    from crf_lr.compat import keras
    from crf_lr.model.encoders import check_maxlen, default_learning_rate, load_encoder
    from crf_lr.speed.fused_kernels import status as fused_kernels_status
    from crf_lr.model.heads import piece_states
    from crf_lr.training.optimizers import LayerwiseAdam
    from crf_lr.data.pieces import UnitEncoder, check_spans_fit
    from crf_lr.training.loop import make_samples, warmup_schedule
    from crf_lr.serving.tagger import Tagger
    from crf_lr.data.vocabulary import check_vocabulary, choose_encoder

    set_check_numerics(True)  # the default, said: NaN/inf in a layer or loss stops the run
    print(set_precision(args.precision))                 # e.g. 'precision: float32 (...)'
    print(fused_kernels_status())                        # built here the first time (once)
    keras.utils.set_random_seed(args.seed)
    encoder, why = ((args.encoder, 'as given') if args.encoder else   # else by the text's script
                    choose_encoder(units_of for units_of, _, _ in examples))
    print(f'encoder {encoder} ({why})')
    with strategy.scope():                   # the model's variables on every replica
        bert, vocab_path, encoder_info = load_encoder(encoder, args.layers, args.vocab)
        with user_errors():                      # before any window runs past its positions
            check_maxlen(bert, args.maxlen, encoder)
        if getattr(args, 'reinit_top', 0):
            from crf_lr.model.finetune import reinitialize_top_layers
            reinitialize_top_layers(bert, args.reinit_top, seed=args.seed)
        head = make_head()
        model = keras.Model(bert.inputs, head.build(piece_states(bert)))
        unit_encoder = UnitEncoder(vocab_path, units, max_pieces=args.maxlen - 2)
        with user_errors():                        # most units [UNK]: stop, name an encoder to try
            print(check_vocabulary(unit_encoder, (units_of for units_of, _, _ in examples),
                                   encoder, args.allow_unknown))
            check_spans_fit(examples, sources, args.maxlen, unit_encoder)   # no window holds one
        samples = make_samples(examples, unit_encoder, args.maxlen, head)
        lr = args.lr or default_learning_rate(encoder, args.layers)
        schedule = warmup_schedule(args.warmup_proportion, len(samples), args.batch_size,
                                   args.epochs)
        model.compile(LayerwiseAdam(lr, bias_correction=args.bias_correction, **schedule),
                      loss=head.loss, metrics=head.metrics)
    tagger = Tagger(model, unit_encoder, head, args.maxlen, args.batch_size)
    print(f'encoder {encoder_info}; {head}: {head.count_params()} parameters; lr {lr}; '
          f'{len(samples)} training windows')
    return TaskModel(tagger, samples, encoder, encoder_info, lr)
