#! -*- coding: utf-8 -*-
"""PKU Chinese word segmentation with a CRF (or softmax) head on a BERT-family encoder.

Trains on People's Daily 1998-01 (PFR: the PKU standard) and scores on the SIGHAN 2005 PKU test
gold with the bakeoff's measures (precision, recall, F1, OOV and IV recall against the PKU
training-word list). After every epoch it prints and saves the learned transition matrix in the
s/b/m/e layout (text table + heatmap PNG) with its sanity report, and the F1 of decoding with and
without the BMES hard constraints. Without the PKU test file (no --data-dir / CRF_LR_DATA) it
holds out PFR sentences instead and says so.

    python examples/task_cws_crf.py --layers 1 --train-limit 2000 --crf-lr-multiplier 100
"""
import argparse
import os
import time

from crf_lr.training import add_common_arguments, check_arguments   # no TensorFlow before --help


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        epilog='Outputs in --output: log.jsonl (one line per epoch), results.json, model/ (best '
               'model + label map, for python -m crf_lr.predict), transitions_epoch*.txt/png.')
    add_common_arguments(parser, heads=('crf', 'softmax'), default_head='crf',
                         default_output='runs/cws')
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    return args


def main(argv=None):
    args = parse_args(argv)
    import numpy as np
    from crf_lr.compat import keras
    from crf_lr.datasets import load_dataset, read_word_list, resolve_data_dir
    from crf_lr.diagnostics import count_violations, diagnose, format_sanity, format_transitions
    from crf_lr.metrics import segmentation_scores
    from crf_lr.tagger import (Tagger, build_model, build_optimizer, epoch_batches,
                               head_parameters, load_encoder, make_samples, train)
    from crf_lr.tagging import allowed_transitions, label_list
    from crf_lr.training import RunLog, UnitEncoder, choose_examples

    # ---- data: PFR 1998-01 for training, the PKU test gold (or a PFR hold-out) for scoring ----
    run = RunLog(args.output, dict(vars(args), script='task_cws_crf'), args.overwrite, argv,
                 program=__file__)
    data_dir = resolve_data_dir(args.data_dir)
    gold_file = data_dir and os.path.join(data_dir, 'icwb2', 'pku_test_gold.utf8')
    test_data, train_words = None, None
    if gold_file and os.path.isfile(gold_file):
        test_data = load_dataset('pku', 'test', args.data_dir).examples
        train_words = read_word_list(os.path.join(data_dir, 'icwb2', 'pku_training_words.utf8'))
    train_data, test_data, test_name = choose_examples(
        load_dataset('pku', 'train', args.data_dir).examples, test_data, args,
        'the PKU test gold (icwb2/pku_test_gold.utf8)')
    if train_words is None or args.holdout:      # OOV against the words actually trained on
        train_words = {w for e in train_data for w in e.words}
    print(f'train: {len(train_data)} PFR sentences; test: {len(test_data)} sentences, {test_name}')

    # ---- model: encoder (first k layers) + Dense + CRF with its own learning rate ----
    keras.utils.set_random_seed(args.seed)
    labels = label_list(None, 'SEG')                       # ['s', 'b', 'm', 'e']
    scheme_constraints = allowed_transitions(labels, 'SEG')
    encoder, vocab_path, encoder_info = load_encoder(args.encoder, args.layers, args.vocab)
    model, loss, metrics = build_model(encoder, args.head, len(labels), args.crf_lr_multiplier,
                                       scheme_constraints if args.constrain else None)
    units = UnitEncoder(vocab_path)
    samples = make_samples([(e.text, e.tags, word_spans(e.words)) for e in train_data],
                           units, args.maxlen, args.head, labels, scheme='SEG')
    model.compile(optimizer=build_optimizer(args, len(samples)), loss=loss, metrics=metrics)
    tagger = Tagger(model, units, labels, args.head, 'SEG', args.maxlen, args.batch_size)
    initial = tagger.crf.trans.numpy() if tagger.crf is not None else None   # before training
    print(f'encoder {encoder_info}; head {args.head}: {head_parameters(model)} parameters; '
          f'{len(samples)} training windows')

    # ---- evaluator: SIGHAN scores with and without constraints, transition diagnostics ----
    def evaluate(epoch):
        started = time.time()
        outputs = tagger.run([e.text for e in test_data])
        predict_seconds = time.time() - started
        result = dict(predict_sentences_per_second=round(len(test_data) / predict_seconds, 2))
        gold = [e.words for e in test_data]
        for constrain, suffix in ((False, ''), (True, '_constrained')):
            decoded = tagger.decode(outputs, constrain)
            words = [[e.text[s:t] for s, t, _ in spans] for e, (spans, _) in zip(test_data, decoded)]
            scores = segmentation_scores(gold, words, train_words)
            keys = ('precision', 'recall', 'f1', 'oov_recall', 'iv_recall')
            result.update({k + suffix: _rounded(scores[k]) for k in keys})
            if not constrain:
                result.update(oov_rate=_rounded(scores['oov_rate']), gold_words=scores['gold_words'])
            if not constrain:
                index = {label: i for i, label in enumerate(labels)}
                result['violations'] = count_violations(
                    [[index[t] for t in tags] for _, tags in decoded], *scheme_constraints)
        crf = tagger.crf
        if crf is not None:
            trans = crf.trans.numpy()
            emissions = [w[3] for windows in outputs for w in windows]
            diagnosis = diagnose(trans, labels, emissions=emissions)
            table = format_transitions(trans, labels)
            report = (f'epoch {epoch} transitions (lr multiplier {args.crf_lr_multiplier}):\n'
                      f'{table}\n{format_sanity(diagnosis)}\nlargest change since '
                      f'initialisation: {np.abs(trans - initial).max():.3f}')
            print(report)
            with open(os.path.join(args.output, f'transitions_epoch{epoch}.txt'), 'w') as f:
                f.write(report + '\n')
            try:
                from crf_lr.plots import plot_transitions
                plot_transitions(trans, labels,
                                 os.path.join(args.output, f'transitions_epoch{epoch}.png'),
                                 title=f'CRF transitions, epoch {epoch}, '
                                       f'lr x{args.crf_lr_multiplier:g}')
            except ImportError as error:
                print(f'no heatmap: {error}')
            result.update(transitions=trans.astype(float).round(4).tolist(),
                          transition_change=round(float(np.abs(trans - initial).max()), 4),
                          sane_tags=diagnosis['sane_tags'],
                          emission_margin=round(diagnosis['emission_margin'], 4),
                          transition_spread=round(diagnosis['transition_spread'], 4),
                          margin_to_spread=round(diagnosis['margin_to_spread'], 3))
        print(f'epoch {epoch}: P {result["precision"]:.4f} R {result["recall"]:.4f} '
              f'F1 {result["f1"]:.4f} (constrained {result["f1_constrained"]:.4f}) '
              f'OOV-R {result["oov_recall"]:.4f} IV-R {result["iv_recall"]:.4f}; '
              f'{result["violations"]["bad_paths"]} sentences with illegal tag sequences')
        return result

    # ---- fit ----
    extra = dict(task='cws', train_sentences=len(train_data), train_windows=len(samples),
                 test=test_name, test_sentences=len(test_data), encoder=encoder_info,
                 head_parameters=head_parameters(model),
                 initial_transitions=(None if initial is None
                                      else initial.astype(float).round(4).tolist()))
    return train(model, run,
                 lambda epoch: epoch_batches(samples, args.batch_size, args.seed, epoch,
                                             args.head, labels),
                 evaluate, args.epochs, 'f1', tagger, extra)


def _rounded(value):
    return None if value is None else round(float(value), 5)


def word_spans(words):
    """``(start, end, 'w')`` character spans of consecutive words (windows never cut them)."""
    spans, start = [], 0
    for word in words:
        spans.append((start, start + len(word), 'w'))
        start += len(word)
    return spans


if __name__ == '__main__':
    main()
