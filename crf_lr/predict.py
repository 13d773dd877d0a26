"""Segment or tag text with a model saved by a task script.

    python -m crf_lr.predict runs/cws/model input.txt         # words separated by two spaces
    echo '中共中央总书记江泽民发表新年讲话' | python -m crf_lr.predict runs/ner/model

One input line is one text, of any length: it is cut into windows of the model's ``maxlen`` at
sentence ends and the predictions are stitched back. A word-segmentation model prints each line's
words (whitespace in the input always separates words). An NER model prints each line's entities,
one per line as ``start<TAB>end<TAB>type<TAB>mention`` (character offsets, end exclusive), then a
blank line; ``--format json`` prints one JSON object per input line instead.
"""
import argparse
import json
import re
import sys

from crf_lr.cli import quiet_tensorflow
from crf_lr.runs import check_model_folder


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog='python -m crf_lr.predict',
                                     description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog='\n\n'.join(__doc__.split('\n\n')[1:]))
    parser.add_argument('model_dir', help='the model/ folder of a task script run (model.h5, '
                                          'labels.json, vocab.txt)')
    parser.add_argument('file', nargs='?', help='UTF-8 text, one text a line (default: stdin)')
    parser.add_argument('--format', choices=('text', 'json'), default='text')
    parser.add_argument('--no-constrain', dest='constrain', action='store_false',
                        help="decode tags without the scheme's hard constraints (CRF / softmax; "
                             "default: with them)")
    parser.add_argument('--separator', default='  ', help='between words (default: two spaces)')
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--precision', choices=('float32', 'mixed_bfloat16', 'auto'),
                        default='float32', help='compute precision (default: %(default)s; the '
                                                'model may have been trained in another)')
    parser.add_argument('--verbose', action='store_true', help="show TensorFlow's log lines")
    return parser, parser.parse_args(argv)


def _word_offsets(line):
    """Words of an English line and their ``(start, end)`` character offsets."""
    found = list(re.finditer(r'\S+', line))
    return [m.group() for m in found], [(m.start(), m.end()) for m in found]


def predict_lines(tagger, lines, constrain=True):
    """Predictions for raw text lines.

    Args:
        tagger: ``crf_lr.tagger.Tagger``; lines: list of str; constrain: bool.
    Returns:
        list (per line) of lists: words (str) for a segmentation model, else entity dicts
        ``{'start', 'end', 'type', 'text'}`` with character offsets (end exclusive).

        >>> predict_lines(Tagger.load('runs/cws/model'), ['今天天气很好'])
        [['今天', '天气', '很', '好']]
    """
    if tagger.head.scheme.segmentation:
        chunks = [line.split() for line in lines]
        flat = [chunk for line in chunks for chunk in line]
        predicted = iter(tagger.predict(flat, constrain))
        return [[chunk[s:e] for chunk in line for s, e, _ in next(predicted)] for line in chunks]
    if tagger.encoder.units == 'words':
        split = [_word_offsets(line) for line in lines]
        predicted = tagger.predict([words for words, _ in split], constrain)
        results = []
        for line, (_, offsets), spans in zip(lines, split, predicted):
            char_spans = [(offsets[s][0], offsets[e - 1][1], label) for s, e, label in spans]
            results.append([dict(start=s, end=e, type=label, text=line[s:e])
                            for s, e, label in char_spans])
        return results
    predicted = tagger.predict(lines, constrain)
    return [[dict(start=s, end=e, type=label, text=line[s:e]) for s, e, label in spans]
            for line, spans in zip(lines, predicted)]


def _model_error(parser, error):
    """Exit with status 2 and one line naming the model file and its fault (no usage text)."""
    parser.exit(2, f'{parser.prog}: error: {error}\n')


def main(argv=None):
    parser, args = parse_args(argv)
    if args.batch_size < 1:
        parser.error(f'--batch-size must be >= 1, got {args.batch_size}')
    try:
        check_model_folder(args.model_dir)              # before TensorFlow loads: answers at once
    except (FileNotFoundError, ValueError) as error:
        _model_error(parser, error)
    try:
        if args.file:
            with open(args.file, encoding='utf-8') as f:
                lines = f.read().splitlines()
        else:
            lines = sys.stdin.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        parser.error(f'cannot read {args.file or "stdin"}: {error}')
    quiet_tensorflow(args.verbose)                      # keep TensorFlow's log off stdout
    from crf_lr.precision import set_precision
    from crf_lr.tagger import Tagger
    set_precision(args.precision)
    try:
        tagger = Tagger.load(args.model_dir, args.batch_size)
    except (FileNotFoundError, OSError, ValueError) as error:
        _model_error(parser, error)
    results = predict_lines(tagger, lines, args.constrain)
    out = sys.stdout
    for line, result in zip(lines, results):
        if args.format == 'json':
            key = 'words' if tagger.head.scheme.segmentation else 'entities'
            out.write(json.dumps({'text': line, key: result}, ensure_ascii=False) + '\n')
        elif tagger.head.scheme.segmentation:
            out.write(args.separator.join(result) + '\n')
        else:
            out.writelines(f'{e["start"]}\t{e["end"]}\t{e["type"]}\t{e["text"]}\n' for e in result)
            out.write('\n')
    return results


if __name__ == '__main__':
    main()
