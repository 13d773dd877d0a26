#! -*- coding: utf-8 -*-
"""Named-entity recognition on a BERT-family encoder, with a CRF, softmax, GlobalPointer or
Efficient GlobalPointer head: on your own files, or on a benchmark.

    python examples/task_ner.py --train-file data/char-bio/train.txt \\
        --dev-file data/char-bio/dev.txt --test-file data/char-bio/test.txt
    python examples/task_ner.py --dataset cluener --head efficient_global_pointer --epochs 2
    python examples/task_ner.py --dataset conll2003 --encoder minilm-en --train-limit 400 \\
        --no-bias-correction --reinit-top 1                       # experiment 3

After every epoch the development split is scored (strict span P/R/F1; relaxed F1, the share of
characters or words given their gold entity type whatever the boundaries; per type); it selects the
epoch. The selected model is saved to OUTPUT/model and scored once on the test split at the end.
Then a temperature for its entity confidences is fitted on the development split, kept only where it
lowers the dev expected calibration error (else T = 1), and saved with it; results.json's
``calibration`` holds which was kept and why, and the expected calibration error before and after
(dev, and test when labelled), OUTPUT/reliability_*.png the diagrams. Words of English text are
split into WordPieces; a word's label goes to all its pieces and the first piece's prediction is the
word's (--label-pieces first: only the first piece is labelled, and the CRF runs over the first
pieces only).
"""
import os
import time

# no TensorFlow before --help:
from crf_lr.utils.atomic import atomic_write
from crf_lr.utils.cli import (LABEL_PIECES_HELP, ArgumentParser, add_common_arguments,
                             parse_checked, user_errors)
from crf_lr.data.benchmarks import DATASETS


def parse_args(argv=None):
    parser = ArgumentParser(
        description=__doc__.split('\n\n')[0],
        epilog='Outputs in --output: log.jsonl (one line per epoch, with every step loss), '
               'results.json, model/ (the selected model, for python -m crf_lr.predict), '
               'confusion_*.txt, reliability_*.png.')
    parser.add_argument('--dataset', choices=sorted(name for name, spec in DATASETS.items()
                                                    if spec.task == 'ner'),
                        help='a benchmark (default: msra, unless --train-file is given)')
    parser.add_argument('--reinit-top', type=int, default=0,
                        help='re-initialise the top L transformer layers before training '
                             '(BERT-style encoders only; default: 0)')
    parser.add_argument('--label-pieces', choices=('all', 'first'), default='all',
                        help=LABEL_PIECES_HELP)
    add_common_arguments(parser, default_output='runs/ner')
    args = parse_checked(parser, argv)
    if args.reinit_top < 0:
        parser.error(f'--reinit-top must be >= 0, got {args.reinit_top}')
    if args.dataset and args.train_file:
        parser.error('give --dataset or --train-file, not both')
    args.dataset = args.dataset or (None if args.train_file else 'msra')
    return args


def main(argv=None):
    args = parse_args(argv)
    from crf_lr.evaluation.calibration import bound_note, calibrate, reliability_series
    from crf_lr.training.distribute import make_strategy, strategy_line, worker_folder
    from crf_lr.model.heads import make_head
    from crf_lr.evaluation.metrics import (confusion_matrix, format_confusion_matrix,
                                           relaxed_scores, span_scores)
    from crf_lr.evaluation.plots import plot_reliability
    from crf_lr.training.run_folder import RunLog, file_contents, refuse_other_arguments
    from crf_lr.training.loop import epoch_batches, fit
    from crf_lr.decoding.spans import outermost
    from crf_lr.data.splits import load_splits
    from crf_lr.serving.tagger import Tagger
    from crf_lr.data.tagging import label_list, spans_to_tags
    from crf_lr.training.task_model import build_task_model

    # ---- data: train, dev (selects the epoch), test (scored once at the end) ----
    with user_errors():                                    # a bad file: its path:line, no traceback
        strategy = make_strategy(args.strategy)    # before any other TensorFlow work: multiworker
        data = load_splits(args.dataset, args.train_file, args.dev_file, args.test_file,
                           args.format, not args.strict, args.data_dir, args.train_limit,
                           args.eval_limit, args.holdout, args.sample_seed, task='ner')
    print(data.describe() + f'\ntypes: {list(data.types)}\n{strategy_line(strategy)}')
    config = dict(vars(args), script='task_ner', **file_contents(data.files))
    if not args.overwrite:                  # refused now, before an encoder loads for nothing
        refuse_other_arguments(worker_folder(args.output, strategy), config)

    # ---- model: encoder -> piece states -> head (Dense + CRF, Dense + softmax, span scores) ----
    flat = args.spans == 'flat' or (args.spans == 'auto' and not data.nested)
    built = build_task_model(args, strategy, data.units, lambda: make_head(
        args.head, data.types, 'BIO', lr_multiplier=args.crf_lr_multiplier,
        constrain_training=args.constrain, boundary_scores=args.boundary_scores,
        head_size=args.head_size, flat=flat, label_pieces=args.label_pieces),
        [(e.tokens, e.tags, e.spans) for e in data.train], [e.source for e in data.train])
    tagger, samples = built.tagger, built.samples
    head, model = tagger.head, tagger.model
    if getattr(head, 'label_pieces', 'all') != args.label_pieces:
        raise SystemExit(f'task_ner.py: error: --label-pieces {args.label_pieces} needs a head '
                         f'that takes it (crf); --head {args.head} does not')
    # the run folder once the data and the model are known good: a refused run leaves none
    run = RunLog(worker_folder(args.output, strategy), config, args.overwrite, argv,
                 program=__file__)

    # ---- evaluator: strict spans, relaxed types, confusion matrix without padding, speed ----
    tag_labels = label_list(data.types, 'BIO')
    unit = 'word' if data.units == 'words' else 'character'   # what relaxed F1 counts

    def score(tagger, examples, name):
        started = time.time()
        outputs = tagger.run([e.tokens for e in examples])
        seconds = time.time() - started
        predicted = tagger.decode(outputs, confidences=False)   # the scheme's constraints
        strict = span_scores([e.spans for e in examples], [p.spans for p in predicted])
        tags = [p.tags if p.tags is not None else spans_to_tags(outermost(p.spans), len(e.tokens))
                for e, p in zip(examples, predicted)]
        relaxed = relaxed_scores([e.tags for e in examples], tags)
        matrix, _ = confusion_matrix([e.tags for e in examples], tags, tag_labels)
        with atomic_write(os.path.join(run.output, f'confusion_{name}.txt')) as f:
            f.write(format_confusion_matrix(matrix, tag_labels) + '\n')
        result = {k: round(strict[k], 5) for k in ('precision', 'recall', 'f1')}
        if tagger.head.kind == 'tags':
            free = tagger.decode(outputs, constrain=False, confidences=False)
            result['f1_unconstrained'] = round(span_scores([e.spans for e in examples],
                                                           [p.spans for p in free])['f1'], 5)
        result.update(relaxed_f1=round(relaxed['f1'], 5),
                      predict_sentences_per_second=round(len(examples) / max(seconds, 1e-9), 2),
                      per_type={kind: dict(
                          strict_f1=round(strict['per_type'].get(kind, {}).get('f1', 0.0), 5),
                          relaxed_f1=round(relaxed['per_type'].get(kind, {}).get('f1', 0.0), 5),
                          support=strict['per_type'].get(kind, {}).get('support', 0))
                          for kind in data.types})
        print(f'{name}: strict P {result["precision"]:.4f} R {result["recall"]:.4f} '
              f'F1 {result["f1"]:.4f}; relaxed (per-{unit} type) F1 {result["relaxed_f1"]:.4f}'
              + (f'; without constraints F1 {result["f1_unconstrained"]:.4f}'
                 if 'f1_unconstrained' in result else ''))
        print(f'{"type":<14}{"strict F1":>10}{"relaxed F1":>11}{"support":>9}')
        for kind, row in result['per_type'].items():
            print(f'{kind:<14}{row["strict_f1"]:>10.4f}{row["relaxed_f1"]:>11.4f}'
                  f'{row["support"]:>9}')
        return result

    def evaluate(epoch):
        scores = {f'dev_{k}': v for k, v in score(tagger, data.dev, f'dev_epoch{epoch}').items()}
        if args.test_every_epoch and data.test:            # for the record; dev still selects
            scores.update({f'test_{k}': v for k, v in
                           score(tagger, data.test, f'test_epoch{epoch}').items()})
        return scores

    def final_test():
        return score(Tagger.load(run.model_dir), data.test, 'test') if data.test else None

    # ---- fit: resumable; the best dev epoch is kept and scored once on test ----
    extra = dict(task='ner', dataset=args.dataset or args.train_file, splits=data.names,
                 train_sentences=len(data.train), train_windows=len(samples),
                 dev_sentences=len(data.dev), test_sentences=len(data.test or ()),
                 repairs=data.repairs, repaired_tags=len(data.repaired_at),
                 repaired_at=data.repaired_at[:100], encoder=built.encoder_info, lr=built.lr,
                 head=head.config(), head_parameters=head.count_params())
    results = fit(model, run, lambda epoch: epoch_batches(samples, args.batch_size, args.seed,
                                                          epoch, head),
                  evaluate, args.epochs, 'dev_f1', lambda: tagger.save(run.model_dir), extra,
                  final_test=final_test, stop_gain=args.stop_gain, stop_epochs=args.stop_epochs,
                  announce=False)

    # ---- calibration: a temperature for the confidences, fitted on dev, saved with the model ----
    selected = Tagger.load(run.model_dir, inference_only=False)     # saved again: float32 weights
    report = calibrate(selected, ([e.tokens for e in data.dev], [e.spans for e in data.dev]),
                       ([e.tokens for e in data.test], [e.spans for e in data.test])
                       if data.test else None)
    selected.save(run.model_dir)
    for split in ('dev', 'test'):
        if split in report:
            plot_reliability(reliability_series(report[split], report['temperature']),
                             os.path.join(run.output, f'reliability_{split}.png'),
                             title=f'{head.name}, {split}')
            print(f'{split}: entity confidence ECE {report[split]["before"]["ece"]:.4f} -> '
                  f'{report[split]["after"]["ece"]:.4f} at temperature {report["temperature"]}')
    print(f'calibration: {report["choice"]}')
    note = bound_note(report)
    if note:
        print(f'note: {note}')
    written = run.write_results('dev_f1', **dict(results, calibration=report))
    print(run.model_line())
    return written


if __name__ == '__main__':
    main()
