"""Segment or tag text with a model saved by a task script.

    python -m crf_lr.predict runs/cws/model input.txt         # words separated by two spaces
    echo '中共中央总书记江泽民发表新年讲话' | python -m crf_lr.predict runs/ner/model

One input line is one text, of any length: it is cut into windows of the model's ``maxlen`` at
sentence ends and the predictions are stitched back. A word-segmentation model prints each line's
words (whitespace in the input always separates words). An NER model prints each line's entities,
one per line as ``start<TAB>end<TAB>type<TAB>mention`` (character offsets, end exclusive), then a
blank line; ``--format json`` prints one JSON object per input line instead, with each entity's
(or word's) ``confidence`` in [0, 1] and the line's ``path_probability`` and its natural log,
``path_log_probability`` (see the README).

    python -m crf_lr.predict runs/ner/model input.txt --format json --min-confidence 0.5
    python -m crf_lr.predict runs/ner/model input.txt --format json --marginals
"""
import argparse
import json
import os
import re
import sys

import numpy as np
import regex

from crf_lr.utils.cli import ArgumentParser, add_precision_option, quiet_tensorflow
from crf_lr.serving.model_folder import check_model_folder


def parse_args(argv=None):
    parser = ArgumentParser(prog='python -m crf_lr.predict',
                            description=__doc__.split('\n\n')[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog='\n\n'.join(__doc__.split('\n\n')[1:]))
    parser.add_argument('model_dir', help='the model/ folder of a task script run (model.h5, '
                                          'labels.json, vocab.txt)')
    parser.add_argument('file', nargs='?', help='UTF-8 text, one text a line (default: stdin)')
    parser.add_argument('--format', choices=('text', 'json', 'conll'), default='text',
                        help="text: each line's entities (start, end, type, mention), a blank line "
                             "after; json: one record a line; conll: an NER model's units (words, "
                             "or characters but whitespace) and BIO tags, one a line, a blank line "
                             "after each text: a training file once corrected (default: text)")
    parser.add_argument('--no-constrain', dest='constrain', action='store_false',
                        help="decode tags without the scheme's hard constraints (CRF / softmax; "
                             "default: with them)")
    parser.add_argument('--separator', default='  ', help='between words (default: two spaces)')
    parser.add_argument('--min-confidence', type=float, metavar='P',
                        help='drop entities whose confidence is below P (in [0, 1])')
    parser.add_argument('--marginals', action='store_true',
                        help='with --format json: add each unit\'s label probabilities (tag heads)')
    parser.add_argument('--batch-size', type=int, default=32)
    add_precision_option(parser)           # the model may have been trained in another
    parser.add_argument('--verbose', action='store_true', help="show TensorFlow's log lines")
    return parser, parser.parse_args(argv)


def word_offsets(line):
    """Words of an English line, punctuation split off as CoNLL-style corpora write it
    (``Berlin.`` -> ``Berlin`` ``.``, ``Germany's`` -> ``Germany`` ``'s``, ``we're`` -> ``we``
    ``'re``, ``didn't`` -> ``did`` ``n't``, ``can't`` -> ``ca`` ``n't``; ``U.S.``, ``J.``, ``Mr.``,
    ``1,200``, ``New-York``, ``U.S.-based``, ``O'Neil``, ``three-`` before a space, ``...`` stay
    whole),
    and URLs, e-mail addresses, @handles and #hashtags whole, as tweet corpora keep them (a URL
    without the punctuation that ends its sentence, its own parentheses kept); and their
    ``(start, end)`` character offsets.

        >>> word_offsets('In Berlin, U.S. aid.')[0]
        ['In', 'Berlin', ',', 'U.S.', 'aid', '.']
        >>> word_offsets('@ann_b: see https://t.co/Turkey1. #Turkey')[0]
        ['@ann_b', ':', 'see', 'https://t.co/Turkey1', '.', '#Turkey']
    """
    spans = []
    for match in _WORD.finditer(line):
        start, end = match.span()
        if (line[start:end] == '.' and spans and spans[-1][1] == start
                and line[spans[-1][0]:start] in _ABBREVIATIONS):
            start = spans.pop()[0]                             # 'Mr' '.' -> 'Mr.'
        spans.append((start, end))
    return [line[s:e] for s, e in spans], spans


# a URL (a scheme:// or www., or a domain and a path; its characters: URL-legal ASCII and any
# other that is neither punctuation, a symbol, nor CJK, so '。', '，', '…', '」' end it; its
# balanced () and [] kept, an unclosed one at its end too; not ending with the punctuation after
# it), an e-mail address, an @handle or #hashtag; a number with its separators (1,200; 3.5), a
# clitic ('s, 're, 've, 'll, 'm, 'd, n't: CoNLL-2003's 'did n't', 'ca n't', 'wo n't') and the
# word before it, a run of word characters joined by - ' ’ . & / or .- (an abbreviation or an
# initial keeps its final '.', a word its final '-' before a space), a run of one punctuation
# mark ('...', '--'), or one other non-space character
_URL_CHAR = r"(?:[^\s\p{P}\p{S}\p{Han}\p{Hiragana}\p{Katakana}]|[-._~:/?#@!$&'*+,;=%])"
_URL_BODY = (rf"(?:\({_URL_CHAR}*\)|\[{_URL_CHAR}*\]|{_URL_CHAR})+(?:[(\[]{_URL_CHAR}+)?"
             r"(?<![.,;:!?'*])")
_CLITIC = r"(?i:['’](?:s|re|ve|ll|m|d)\b|n['’]t\b)"
_WORD = regex.compile(
    rf"(?:[a-zA-Z][a-zA-Z0-9+.-]*://|www\.){_URL_BODY}"
    rf"|[\w-]+(?:\.[\w-]+)*\.[a-zA-Z]{{2,}}/{_URL_BODY}"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[a-zA-Z]{2,}|(?<![\w@])@\w+|(?<![\w#&])#\w+"
    rf"|\d+(?:[.,]\d+)+|{_CLITIC}|\w+(?={_CLITIC})|\w+(?:\.?-\w+|[.&/]\w+|(?!{_CLITIC})['’]\w+)*"
    r"(?:(?<=\.\w)\.|(?<=\b[A-Z])\.|-(?=\s|$))?|([^\w\s])\1+|[^\w\s]")
_ABBREVIATIONS = frozenset(
    'Mr Mrs Ms Dr Prof St Jr Sr Inc Ltd Co Corp Bros Gen Gov Sen Rep Lt Col Sgt Capt Adm '
    'Jan Feb Mar Apr Aug Sep Sept Oct Nov Dec No vs etc'.split())


def conll_block(line, entities, units):
    """A line's units and their BIO tags, one ``unit tag`` a line, then a blank line: the CoNLL
    (words: :func:`word_offsets`'s) or char-bio (characters, whitespace left out) training format,
    so that predictions, corrected, train again. Of overlapping entities (a span head's nested
    ones) the first is tagged; one of whitespace only has no unit to tag.

        >>> conll_block('Peter left.', [dict(start=0, end=5, type='PER')], 'words')
        'Peter B-PER\\nleft O\\n. O\\n\\n'
    """
    units, offsets = (word_offsets(line) if units == 'words' else
                      (list(line), [(i, i + 1) for i in range(len(line))]))
    tags = ['O'] * len(units)
    for entity in entities:
        inside = [k for k, (start, end) in enumerate(offsets)
                  if entity['start'] <= start and end <= entity['end']]
        if all(tags[k] == 'O' for k in inside):
            for k in inside:
                tags[k] = ('I-' if k > inside[0] else 'B-') + entity['type']
    return ''.join(f'{unit} {tag}\n' for unit, tag in zip(units, tags) if unit.strip()) + '\n'


def predict_lines(tagger, lines, constrain=True, min_confidence=None):
    """Predictions for raw text lines.

    Args:
        tagger: ``crf_lr.serving.tagger.Tagger``; lines: list of str; constrain: bool;
        min_confidence: optional float: entities less confident are dropped.
    Returns:
        list (per line) of lists: words (str) for a segmentation model, else entity dicts
        ``{'start', 'end', 'type', 'text', 'confidence'}`` with character offsets (end
        exclusive) and the confidence in [0, 1] of ``crf_lr.serving.tagger.Prediction``.

        >>> predict_lines(Tagger.load('runs/cws/model'), ['今天天气很好'])
        [['今天', '天气', '很', '好']]
    """
    key = result_key(tagger)
    return [record[key] for record in predict_records(tagger, lines, constrain, min_confidence)]


def result_key(tagger):
    """The key of a line's result in :func:`predict_records`: 'words' for a segmentation model,
    else 'entities'.

        >>> [record[result_key(tagger)] for record in predict_records(tagger, lines)]
    """
    return 'words' if tagger.head.scheme.segmentation else 'entities'


def predict_records(tagger, lines, constrain=True, min_confidence=None, marginals=False,
                    predictions=None):
    """One JSON-ready dict per line: ``text``; ``entities`` (as :func:`predict_lines`) or, for a
    segmentation model, ``words`` and their ``confidences``; ``path_probability`` (the whole
    decoded tag path's probability, None for span heads; 0.0 where it underflows, on a long line)
    and ``path_log_probability``, its natural log (finite at any length; None where a custom
    head gives a path probability of 0.0, whose log JSON cannot write); with ``marginals``,
    ``labels``, ``marginals``, the label probabilities of each unit (characters, or words of an
    English model; a segmentation line's characters without its whitespace), and ``offsets``,
    each unit's ``[start, end]`` in ``text``. ``predictions``: the Tagger's predictions of
    :func:`line_units`'s sequences, when already made (decoded with ``marginals`` if asked).

        >>> records = predict_records(tagger, lines)
        >>> sorted(records, key=lambda r: r['path_log_probability'])[:100]   # least sure first
    """
    check_options(tagger, min_confidence, marginals)
    segmenting = tagger.head.scheme.segmentation
    pieces, flat = line_units(tagger, lines)
    predicted = iter(tagger.decode(tagger.run(flat), constrain, marginals)
                     if predictions is None else predictions)
    records = []
    for line, line_pieces in zip(lines, pieces):
        found = [next(predicted) for _ in line_pieces]
        record = dict(text=line)
        if segmenting:
            record['words'] = [chunk[s:e] for chunk, p in zip(line_pieces, found)
                               for s, e, _ in p.spans]
            record['confidences'] = [c for p in found for c in p.confidences]
        else:
            (prediction,) = found
            offsets = (line_pieces[0][1] if tagger.encoder.units == 'words'
                       else [(i, i + 1) for i in range(len(line))])
            record['entities'] = [
                dict(start=offsets[s][0], end=offsets[e - 1][1], type=label,
                     text=line[offsets[s][0]:offsets[e - 1][1]], confidence=confidence)
                for (s, e, label), confidence in zip(prediction.spans, prediction.confidences)
                if min_confidence is None or confidence >= min_confidence]
        logs = [p.path_log_probability for p in found]
        log_probability = None if None in logs else float(sum(logs))
        record['path_probability'] = None if None in logs else float(np.exp(log_probability))
        record['path_log_probability'] = (log_probability if log_probability != -np.inf else
                                          None)           # JSON has no -Infinity
        if marginals:
            record['labels'] = list(tagger.head.labels)
            record['marginals'] = np.round(np.concatenate(
                [p.marginals for p in found] or [np.zeros((0, len(record['labels'])))]),
                6).tolist()
            record['offsets'] = _unit_offsets(line, line_pieces, segmenting)
        records.append(record)
    return records


def check_options(tagger, min_confidence, marginals):
    """ValueError when :func:`predict_records`'s options do not fit ``tagger``'s model."""
    if min_confidence is not None and tagger.head.scheme.segmentation:
        raise ValueError('--min-confidence drops entities, but this model segments words')
    if marginals and tagger.head.kind != 'tags':
        raise ValueError(f'--marginals needs a tag head (crf, softmax), not {tagger.head.name}')


def line_units(tagger, lines):
    """What the model reads of each line: ``(pieces, sequences)``, per line its pieces (a
    segmentation line's whitespace-separated chunks, a word model's ``(words, offsets)``, else
    the line), and every piece's units in order, for :meth:`Tagger.run`."""
    if tagger.head.scheme.segmentation:
        pieces = [line.split() for line in lines]
    elif tagger.encoder.units == 'words':
        pieces = [[word_offsets(line)] for line in lines]
    else:
        pieces = [[line] for line in lines]
    return pieces, [piece[0] if isinstance(piece, tuple) else piece
                    for line in pieces for piece in line]


def _unit_offsets(line, line_pieces, segmenting):
    """``[start, end]`` in ``line`` of the unit of each marginals row: a word of a word model,
    else a character (a segmentation line's characters without its whitespace)."""
    if segmenting:
        return [[match.start() + i, match.start() + i + 1]
                for match in re.finditer(r'\S+', line) for i in range(len(match.group()))]
    if isinstance(line_pieces[0], tuple):                       # (words, offsets)
        return [list(span) for span in line_pieces[0][1]]
    return [[i, i + 1] for i in range(len(line))]


def _model_error(parser, error):
    """Exit with status 2 and one line naming the model file and its fault (no usage text)."""
    parser.exit(2, f'{parser.prog}: error: {error}\n')


def _labelled_corpus(path, lines):
    """The format of ``path`` (read as ``lines``) where it is a corpus with tags or entities
    (conll, char-*, char-seg, jsonl), else None: raw and segmented text are what predict reads.
    JSON needs a first line that opens an array (detection has read it as one), that is a whole
    JSON record, or that opens a record alone: text whose first line merely opens with ``{"`` is
    text."""
    from crf_lr.data.files import DataFormatError
    from crf_lr.data.formats import detect_format
    try:
        found = detect_format(path)
    except DataFormatError:
        return None
    if found == 'jsonl':
        first = next((line.strip(' \t\ufeff') for line in lines if line.strip()), '')
        try:
            whole = isinstance(json.loads(first), (dict, list))
        except ValueError:
            whole = False
        return found if whole or first == '{' or first.startswith('[') else None
    return None if found == 'segmented' else found


def main(argv=None):
    parser, args = parse_args(argv)
    if args.batch_size < 1:
        parser.error(f'--batch-size must be >= 1, got {args.batch_size}')
    if args.min_confidence is not None and not 0 <= args.min_confidence <= 1:
        parser.error(f'--min-confidence must lie in [0, 1], got {args.min_confidence}')
    if args.marginals and args.format != 'json':
        parser.error('--marginals needs --format json')
    try:
        labels = check_model_folder(args.model_dir)[3]  # before TensorFlow loads: answers at once
    except (FileNotFoundError, ValueError) as error:
        _model_error(parser, error)
    if args.format == 'conll' and labels.get('scheme') == 'SEG':
        parser.error('--format conll writes NER tags; a segmentation model\'s default output '
                     '(its words, --separator between them) is already a training file')
    from crf_lr.data.files import DataFormatError, decode_text, read_text, split_lines
    if not args.file and sys.stdin is None:
        parser.error('no file given, and no stdin to read: name a text file')
    try:                      # stdin as bytes: decoded as a file is (BOM, encodings, the line)
        lines = split_lines(read_text(args.file) if args.file else decode_text(
            sys.stdin.buffer.read(), 'stdin'), args.file or 'stdin')
        if lines[-1] == '':                            # the last line's end starts no line
            lines.pop()
    except DataFormatError as error:                         # it names the file (and line)
        parser.exit(2, f'{parser.prog}: error: {error}\n')
    except OSError as error:
        parser.exit(2, f'{parser.prog}: error: cannot read {args.file or "stdin"}: {error}\n')
    labelled, ids = args.file and _labelled_corpus(args.file, lines), None
    if labelled == 'jsonl':                    # records without entities: their texts, in order
        from crf_lr.data.ner import json_texts
        try:
            texts = json_texts(args.file)
        except DataFormatError as error:
            parser.exit(2, f'{parser.prog}: error: {error}\n')
        if texts is not None:
            lines, ids, labelled = [text for text, _ in texts], [i for _, i in texts], None
    if labelled:
        parser.exit(2, f'{parser.prog}: error: {args.file} is a labelled corpus (format '
                       f'{labelled}), not raw text: predict reads one sentence a line; to score '
                       'a labelled file, give the task script\'s command that trained the model '
                       f'--test-file {args.file} (with --train-file: a finished run scores it, '
                       'training nothing)\n')
    quiet_tensorflow(args.verbose, native=argv is None)  # keep TensorFlow's log off the console
    from crf_lr.model.precision import set_precision
    from crf_lr.serving.tagger import Tagger
    from crf_lr.data.vocabulary import unknown_warning, unspaced_warning
    print(set_precision(args.precision), file=sys.stderr)     # what 'auto' became, and why
    try:
        tagger = Tagger.load(args.model_dir, args.batch_size)
    except (FileNotFoundError, OSError, ValueError) as error:
        _model_error(parser, error)
    warnings = (unknown_warning(tagger.encoder, [line.split() if tagger.encoder.units == 'words'
                                                 else line for line in lines]),
                unspaced_warning(tagger.encoder, lines))
    for warning in filter(None, warnings):
        print(warning, file=sys.stderr)
    try:
        records = predict_records(tagger, lines, args.constrain, args.min_confidence,
                                  args.marginals)
    except ValueError as error:
        parser.error(str(error))
    key = result_key(tagger)
    results = [record[key] for record in records]
    out = sys.stdout
    try:
        for number, (record, result) in enumerate(zip(records, results)):
            if args.format == 'json':
                if ids and ids[number] is not None:           # a JSON record's id, first
                    record = dict(id=ids[number], **record)
                out.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + '\n')
            elif args.format == 'conll':
                out.write(conll_block(record['text'], result, tagger.encoder.units))
            elif tagger.head.scheme.segmentation:
                out.write(args.separator.join(result) + '\n')
            else:
                out.writelines(f'{e["start"]}\t{e["end"]}\t{e["type"]}\t{e["text"]}\n'
                               for e in result)
                out.write('\n')
        out.flush()
    except BrokenPipeError:                # | head: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return results



def command():
    """The ``crf-lr-predict`` console script: :func:`main`, whose records (returned for tests)
    the script's wrapper would otherwise take for an exit status."""
    main()


if __name__ == '__main__':
    main()
