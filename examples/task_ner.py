#! -*- coding: utf-8 -*-
"""Named-entity recognition with a CRF, softmax, GlobalPointer or Efficient GlobalPointer head.

Datasets: MSRA (official split), People's Daily NER (its dev file for training, test), CLUENER
(train, dev), CMeEE (nested; the seeded 4,000 / 1,000 split of the labelled dev file) and
CoNLL-2003 (English, words split into WordPieces; a word's label goes to all its pieces, the
first piece's prediction is the word's). Tag heads use BIO tags (on CMeEE the outermost spans);
span heads score every span, nested ones included. After every epoch: strict span P/R/F1 and
relaxed (token type) scores per type, the tag confusion matrix without padding, and training /
prediction speed; the head's parameter count is printed once.

    python examples/task_ner.py --dataset cluener --head efficient_global_pointer --epochs 2
    python examples/task_ner.py --dataset conll2003 --encoder minilm-en --train-limit 400 \\
        --no-bias-correction --reinit-top 1        # experiment 3
"""
import argparse
import os
import time

from crf_lr.training import add_common_arguments, check_arguments   # no TensorFlow before --help

# dataset -> (training split, evaluation split, units)
DATASETS = {'msra': ('train', 'test', 'chars'), 'people_daily': ('dev', 'test', 'chars'),
            'cluener': ('train', 'dev', 'chars'), 'cmeee': ('train', 'test', 'chars'),
            'conll2003': ('train', 'test', 'words')}
HEADS = ('crf', 'softmax', 'global_pointer', 'efficient_global_pointer')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        epilog='Outputs in --output: log.jsonl (one line per epoch, with every step loss), '
               'results.json, model/ (best model + label map, for python -m crf_lr.predict), '
               'confusion_epoch*.txt.')
    parser.add_argument('--dataset', choices=sorted(DATASETS), default='msra',
                        help='(default: %(default)s)')
    parser.add_argument('--train-split', default=None, help='override the training split')
    parser.add_argument('--eval-split', default=None, help='override the evaluation split')
    parser.add_argument('--reinit-top', type=int, default=0,
                        help='re-initialise the top L transformer layers before training '
                             '(BERT-style encoders only; default: 0)')
    add_common_arguments(parser, heads=HEADS, default_head='crf', default_lr=2e-5,
                         default_output='runs/ner')
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    if args.reinit_top < 0:
        parser.error(f'--reinit-top must be >= 0, got {args.reinit_top}')
    return args


def main(argv=None):
    args = parse_args(argv)
    from crf_lr.compat import keras
    from crf_lr.datasets import load_dataset
    from crf_lr.metrics import (confusion_matrix, format_confusion_matrix, relaxed_scores,
                                span_scores)
    from crf_lr.tagger import (SPAN_HEADS, Tagger, build_model, build_optimizer, epoch_batches,
                               head_parameters, load_encoder, make_samples, train)
    from crf_lr.tagging import allowed_transitions, label_list, spans_to_tags
    from crf_lr.training import RunLog, UnitEncoder, choose_examples

    # ---- data ----
    run = RunLog(args.output, dict(vars(args), script='task_ner'), args.overwrite, argv,
                 program=__file__)
    train_split, eval_split, unit_kind = DATASETS[args.dataset]
    train_split, eval_split = args.train_split or train_split, args.eval_split or eval_split
    training = load_dataset(args.dataset, train_split, args.data_dir)
    try:
        evaluation = load_dataset(args.dataset, eval_split, args.data_dir).examples
    except FileNotFoundError:
        evaluation = None
    if evaluation is not None and any(e.tags is None for e in evaluation):
        raise SystemExit(f'{args.dataset}/{eval_split} is unlabelled: choose another --eval-split')
    train_data, test_data, test_name = choose_examples(
        training.examples, evaluation, args, f'{args.dataset}/{eval_split}')
    types = list(training.types)
    span_head = args.head in SPAN_HEADS
    labels = types if span_head else label_list(types, 'BIO')
    print(f'{args.dataset}: train {len(train_data)} sentences ({train_split}); evaluation '
          f'{len(test_data)} sentences: {test_name}; types {types}')

    # ---- model ----
    keras.utils.set_random_seed(args.seed)
    encoder, vocab_path, encoder_info = load_encoder(args.encoder, args.layers, args.vocab)
    if args.reinit_top:
        from crf_lr.finetune import reinitialize_top_layers
        reinitialize_top_layers(encoder, args.reinit_top, seed=args.seed)
    constraints = allowed_transitions(labels, 'BIO') if args.constrain else None
    model, loss, metrics = build_model(encoder, args.head, len(labels), args.crf_lr_multiplier,
                                       constraints, args.head_size)
    units = UnitEncoder(vocab_path, unit_kind)
    samples = make_samples([(e.tokens, e.tags, e.spans) for e in train_data], units, args.maxlen,
                           args.head, labels)
    model.compile(optimizer=build_optimizer(args, len(samples)), loss=loss, metrics=metrics)
    tagger = Tagger(model, units, labels, args.head, 'BIO', args.maxlen, args.batch_size)
    parameters = head_parameters(model)
    print(f'encoder {encoder_info}; head {args.head}: {parameters} parameters; '
          f'{len(samples)} training windows')

    # ---- evaluator: strict spans, relaxed types, confusion matrix, speed ----
    gold_spans = [e.spans for e in test_data]
    gold_tags = [e.tags for e in test_data]
    tag_labels = label_list(types, 'BIO')

    def evaluate(epoch):
        started = time.time()
        outputs = tagger.run([e.tokens for e in test_data])
        result = dict(predict_sentences_per_second=round(
            len(test_data) / max(time.time() - started, 1e-9), 2))
        modes = ((False, ''),) if span_head else ((False, ''), (True, '_constrained'))
        for constrain, suffix in modes:
            decoded = tagger.decode(outputs, constrain)
            strict = span_scores(gold_spans, [spans for spans, _ in decoded])
            result.update({f'{k}{suffix}': round(strict[k], 5) for k in ('precision', 'recall', 'f1')})
            if constrain:
                continue
            pred_tags = [tags if tags is not None else spans_to_tags(outermost(spans), len(e.tokens))
                         for e, (spans, tags) in zip(test_data, decoded)]
            relaxed = relaxed_scores(gold_tags, pred_tags)
            matrix, _ = confusion_matrix(gold_tags, pred_tags, tag_labels)
            table = format_confusion_matrix(matrix, tag_labels)
            with open(os.path.join(args.output, f'confusion_epoch{epoch}.txt'), 'w') as f:
                f.write(table + '\n')
            result.update(relaxed_f1=round(relaxed['f1'], 5), per_type={
                kind: dict(strict_f1=round(strict['per_type'].get(kind, {}).get('f1', 0.0), 5),
                           relaxed_f1=round(relaxed['per_type'].get(kind, {}).get('f1', 0.0), 5),
                           support=strict['per_type'].get(kind, {}).get('support', 0))
                for kind in types})
        print(f'epoch {epoch}: strict P {result["precision"]:.4f} R {result["recall"]:.4f} '
              f'F1 {result["f1"]:.4f}; relaxed F1 {result["relaxed_f1"]:.4f}'
              + (f'; constrained F1 {result["f1_constrained"]:.4f}' if not span_head else ''))
        print(f'{"type":<14}{"strict F1":>10}{"relaxed F1":>11}{"support":>9}')
        for kind, row in result['per_type'].items():
            print(f'{kind:<14}{row["strict_f1"]:>10.4f}{row["relaxed_f1"]:>11.4f}'
                  f'{row["support"]:>9}')
        if epoch == args.epochs:
            print('confusion matrix (gold rows, predicted columns; real tokens only):\n' + table)
        return result

    # ---- fit ----
    extra = dict(task='ner', dataset=args.dataset, train_split=train_split,
                 train_sentences=len(train_data), train_windows=len(samples), test=test_name,
                 test_sentences=len(test_data), encoder=encoder_info, head_parameters=parameters)
    return train(model, run,
                 lambda epoch: epoch_batches(samples, args.batch_size, args.seed, epoch,
                                             args.head, labels),
                 evaluate, args.epochs, 'f1', tagger, extra)


def outermost(spans):
    """The spans not inside an earlier, longer one (flat, so they can be written as tags)."""
    kept = []
    for start, end, label in sorted(spans, key=lambda s: (s[0], -s[1])):
        if not kept or start >= kept[-1][1]:
            kept.append((start, end, label))
    return kept


if __name__ == '__main__':
    main()
