#! -*- coding: utf-8 -*-
"""Chinese word segmentation with a CRF (or softmax) head on a BERT-family encoder: PKU by default,
or your own files: words between spaces (segmented), or a character and its B/M/E/S tag a
line (char-seg), detected.

By default it trains on People's Daily 1998-01 (PFR: the PKU standard), selects the epoch on PFR
sentences held out of training, and scores the selected model once on the SIGHAN 2005 PKU test
gold with the bakeoff's measures (precision, recall, F1, OOV and IV recall against the PKU
training-word list). After every epoch it prints and saves the learned transition matrix in the
s/b/m/e layout (text table + heatmap PNG) with its sanity report.

    python examples/task_cws_crf.py --layers 1 --train-limit 2000 --crf-lr-multiplier 100
    python examples/task_cws_crf.py --train-file data/segmented/train.txt \\
        --dev-file data/segmented/dev.txt --test-file data/segmented/test.txt
"""
import os
import time

# no TensorFlow before --help:
from crf_lr.utils.atomic import atomic_write
from crf_lr.utils.cli import ArgumentParser, add_common_arguments, parse_checked, user_errors


def parse_args(argv=None):
    parser = ArgumentParser(
        description=__doc__.split('\n\n')[0],
        epilog='Outputs in --output: log.jsonl (one line per epoch), results.json, model/ (the '
               'selected model, for python -m crf_lr.predict), transitions_epoch*.txt/png.')
    add_common_arguments(parser, default_output='runs/cws')
    return parse_checked(parser, argv)


def main(argv=None):
    args = parse_args(argv)
    import numpy as np
    from crf_lr.data.segmentation import read_word_list
    from crf_lr.data.files import resolve_data_dir
    from crf_lr.evaluation.diagnostics import (count_violations, diagnose, format_sanity,
                                               format_transitions)
    from crf_lr.training.distribute import make_strategy, strategy_line, worker_folder
    from crf_lr.model.heads import make_head
    from crf_lr.evaluation.metrics import segmentation_scores
    from crf_lr.training.run_folder import RunLog, file_contents, refuse_other_arguments
    from crf_lr.training.loop import epoch_batches, fit
    from crf_lr.data.splits import load_splits
    from crf_lr.serving.tagger import Tagger
    from crf_lr.data.tagging import SEG
    from crf_lr.training.task_model import build_task_model

    # ---- data: PFR 1998-01 (or your file) to train, a hold-out (or your dev file) to select ----
    with user_errors():                                    # a bad file: its path:line, no traceback
        strategy = make_strategy(args.strategy)    # before any other TensorFlow work: multiworker
        data = load_splits(None if args.train_file else 'pku', args.train_file, args.dev_file,
                           args.test_file, args.format, not args.strict, args.data_dir,
                           args.train_limit, args.eval_limit, args.holdout, args.sample_seed,
                           task='segmentation')
    print(f'{data.describe()}\n{strategy_line(strategy)}')
    config = dict(vars(args), script='task_cws_crf', **file_contents(data.files))
    if not args.overwrite:                  # refused now, before an encoder loads for nothing
        refuse_other_arguments(worker_folder(args.output, strategy), config)
    data_dir = None if args.train_file else resolve_data_dir(args.data_dir)
    words_file = data_dir and os.path.join(data_dir, 'icwb2', 'pku_training_words.utf8')
    train_words = (read_word_list(words_file) if words_file and os.path.isfile(words_file)
                   else {w for e in data.train for w in e.words})      # OOV against what trained

    # ---- model: encoder (first k layers) -> Dense -> CRF whose transitions learn faster ----
    built = build_task_model(args, strategy, 'chars', lambda: make_head(
        args.head, scheme=SEG, lr_multiplier=args.crf_lr_multiplier,
        constrain_training=args.constrain, boundary_scores=args.boundary_scores),
        [(e.text, e.tags, SEG.decode(e.tags)) for e in data.train], [e.source for e in data.train])
    # the run folder once the data and the model are known good: a refused run leaves none
    run = RunLog(worker_folder(args.output, strategy), config, args.overwrite, argv,
                 program=__file__)
    tagger, samples = built.tagger, built.samples
    head, model = tagger.head, tagger.model
    crf = getattr(head, 'crf', None)
    initial = crf.trans.numpy() if crf is not None else None          # before training

    # ---- evaluator: SIGHAN scores with and without constraints, transition diagnostics ----
    def score(tagger, examples, name):
        started = time.time()
        outputs = tagger.run([e.text for e in examples])
        result = dict(predict_sentences_per_second=round(
            len(examples) / max(time.time() - started, 1e-9), 2))
        gold = [e.words for e in examples]
        for constrain, suffix in ((True, ''), (False, '_unconstrained')):
            predicted = tagger.decode(outputs, constrain, confidences=False)
            words = [[e.text[s:t] for s, t, _ in p.spans] for e, p in zip(examples, predicted)]
            scores = segmentation_scores(gold, words, train_words)
            result.update({k + suffix: _rounded(scores[k]) for k in
                           ('precision', 'recall', 'f1', 'oov_recall', 'iv_recall')})
        index = {label: i for i, label in enumerate(head.labels)}    # of the unconstrained paths
        result['violations'] = count_violations([[index[t] for t in p.tags] for p in predicted],
                                                *SEG.allowed(head.labels))
        shown = {k: '-' if v is None else f'{v:.4f}' for k, v in result.items()
                 if not isinstance(v, dict)}                 # a recall of no words is None
        print(f'{name}: P {shown["precision"]} R {shown["recall"]} F1 {shown["f1"]} (without '
              f'constraints {shown["f1_unconstrained"]}) OOV-R {shown["oov_recall"]} IV-R '
              f'{shown["iv_recall"]}; without constraints, '
              f'{result["violations"]["bad_paths"]} sentences with illegal tag sequences')
        return result, [w.output for windows in outputs for w in windows]

    def evaluate(epoch):
        result, emissions = score(tagger, data.dev, f'dev epoch {epoch}')
        scores = {f'dev_{k}': v for k, v in result.items()}
        if args.test_every_epoch and data.test:            # for the record; dev still selects
            scores.update({f'test_{k}': v for k, v in
                           score(tagger, data.test, f'test epoch {epoch}')[0].items()})
        if crf is not None:
            trans = crf.trans.numpy()
            diagnosis = diagnose(trans, head.labels, emissions=emissions)
            change = float(np.abs(trans - initial).max())
            report = (f'epoch {epoch} transitions (lr multiplier {args.crf_lr_multiplier}):\n'
                      f'{format_transitions(trans, head.labels)}\n{format_sanity(diagnosis)}\n'
                      f'largest change since initialisation: {change:.3f}')
            print(report)
            with atomic_write(os.path.join(run.output, f'transitions_epoch{epoch}.txt')) as f:
                f.write(report + '\n')
            try:
                from crf_lr.evaluation.plots import plot_transitions
                plot_transitions(trans, head.labels,
                                 os.path.join(run.output, f'transitions_epoch{epoch}.png'),
                                 title=f'CRF transitions, epoch {epoch}, '
                                       f'lr x{args.crf_lr_multiplier:g}')
            except ImportError as error:
                print(f'no heatmap: {error}')
            scores.update(transitions=trans.astype(float).round(4).tolist(),
                          transition_change=round(change, 4), sane_tags=diagnosis['sane_tags'],
                          emission_margin=round(diagnosis['emission_margin'], 4),
                          transition_spread=round(diagnosis['transition_spread'], 4),
                          margin_to_spread=round(diagnosis['margin_to_spread'], 3))
        return scores

    def final_test():
        return score(Tagger.load(run.model_dir), data.test, 'test')[0] if data.test else None

    # ---- fit: resumable; the best dev epoch is kept and scored once on test ----
    extra = dict(task='cws', splits=data.names, train_sentences=len(data.train),
                 train_windows=len(samples), dev_sentences=len(data.dev),
                 test_sentences=len(data.test or ()), repairs=data.repairs,
                 encoder=built.encoder_info, lr=built.lr, head=head.config(),
                 head_parameters=head.count_params(),
                 initial_transitions=(None if initial is None
                                      else initial.astype(float).round(4).tolist()))
    return fit(model, run, lambda epoch: epoch_batches(samples, args.batch_size, args.seed,
                                                       epoch, head),
               evaluate, args.epochs, 'dev_f1', lambda: tagger.save(run.model_dir), extra,
               final_test=final_test, stop_gain=args.stop_gain, stop_epochs=args.stop_epochs)


def _rounded(value):
    return None if value is None else round(float(value), 5)


if __name__ == '__main__':
    main()
