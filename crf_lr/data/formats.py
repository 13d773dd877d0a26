"""The user's own files: seven formats, detected (`detect_format`) or named, read by `read_corpus`.
"""
import json
import os
import re
from collections import Counter

from crf_lr.data.tagging import BIO, BIOES, BMES, echo
from crf_lr.data.files import (WORD_REPAIR_NOTE, DataFormatError, Dataset, _document_start,
                               _lines, _no_sentence, read_text)
from crf_lr.data.ner import (_char_and_tag, _columns, _fields, _flat_tags, _marked_character,
                             _normal_tag, _position_marked, _tag_scheme, _unit_note, read_bio,
                             read_conll, read_json_records)
from crf_lr.data.segmentation import _segmentation_example, read_pfr, read_segmented


# --------------------------------------------------------------------------------------------------
# User files: seven formats, detected or named

def _read_chars(scheme):
    return lambda path, types, repair: read_bio(path, None, types, scheme, repair, chunked=False,
                                                marks=None)


def _read_words(path):
    """Segmented text; People's Daily 1998's ``word/TAG`` tokens (:func:`read_pfr`) where every
    token of the file is one."""
    return read_pfr(path) if _pos_tagged(path) else read_segmented(path)


def _pos_tagged(path):
    """True when every token of the file is ``word/TAG`` (People's Daily 1998 style)."""
    tokens = [token for _, line in _lines(path) for token in line.split()]
    return bool(tokens) and all(_POS_TOKEN.fullmatch(token) for token in tokens)


_POS_TOKEN = re.compile(r'\[?\S+/[A-Za-z]{1,4}(\][A-Za-z]{1,4})?')

# format -> (units, reader(path, types, repair))
_FORMAT_READERS = {
    'conll': ('words', read_conll),
    'char-bio': ('chars', _read_chars(BIO)),
    'char-bmes': ('chars', _read_chars(BMES)),
    'char-bioes': ('chars', _read_chars(BIOES)),
    'segmented': ('chars', lambda path, types, repair: _read_words(path)),
    'char-seg': ('chars', lambda path, types, repair: read_char_segmentation(path, repair)),
    'jsonl': ('chars', lambda path, types, repair: read_json_records(path, types)),
}
FORMATS = tuple(_FORMAT_READERS)
SEGMENTATION_FORMATS = ('segmented', 'char-seg')
_TAG_FIELD = re.compile(r'O|[BIMES]-\S+')
_WORD_POSITION_TAG = re.compile('[BMIES]', re.IGNORECASE)
_JSON_OBJECT_LINE = re.compile(r'\s*\{\s*"')
_JSON_ARRAY_START = re.compile(r'[\s\ufeff]*\[\s*[{\]]')


def read_char_segmentation(path, repair=True):
    """Word segmentation as a character and its word-position tag a line (B begins a word, M or I
    continues it, E ends it, S is a word of one character; either case), a blank line between
    sentences: ``中 B``, ``国 E``. A word begins at B or S, and after E or S.

    A tag that breaks its word (an M or E that continues no word; a B or S, or the sentence's end,
    before the open word's E) is read by that rule and noted with its line (``repair``), or is a
    DataFormatError naming the line and the fault (``repair=False``, the scripts' ``--strict``).

    Returns:
        list of Example with ``words`` and ``tags`` (SEG), as :func:`read_segmented` gives.

        >>> read_char_segmentation('data/char-seg/train.txt')[0].words[:4]
        ['李', '明', '昨天', '从']
    """
    examples, words, noted, first_line = [], [], [], 0
    opened = last = None                    # the line that opened the open word; the last line
    stray = False                           # the open word was opened by a tag noted already

    def fault(number, message):
        if not repair:
            raise DataFormatError(path, number, f'{message} (--strict refuses broken '
                                                'word-position tags; without it they are read by '
                                                'the rule that B and S begin a word)')
        noted.append((WORD_REPAIR_NOTE, f'{path}:{number}'))

    for number, line in list(_lines(path)) + [(None, '')]:
        if not line or _document_start(line):
            if words:
                if opened is not None and not stray:
                    fault(last, f'the sentence ends inside the word opened at line {opened} (no E '
                                'closes it)')
                examples.append(_segmentation_example(words, f'{path}:{first_line}'))
                examples[-1].notes, examples[-1].noted_at = tuple(n for n, _ in noted), tuple(noted)
                words, noted, opened = [], [], None
            continue
        pair = _char_and_tag(line)
        if pair is None or not _WORD_POSITION_TAG.fullmatch(pair[1]):
            raise DataFormatError(path, number, 'expected one character, spaces or tabs and its '
                                                'word-position tag (B, M, I, E or S), got '
                                                f'{echo(line)}')
        char, tag = pair[0], pair[1].upper()
        noted += _unit_note(char, path, number)
        if not words:
            first_line = number
        if tag in 'BS' and opened is not None and not stray:
            fault(number, f'{tag} before the word opened at line {opened} is closed by E')
        elif tag not in 'BS' and opened is None:
            where = 'the word before it is closed' if words else 'it opens the sentence'
            fault(number, f'{tag} continues no word ({where})')
            stray = tag != 'E'                  # one fault, not two for its unclosed word
        if tag in 'BS':
            stray = False
        if opened is None or tag in 'BS':
            words.append(char)
        else:
            words[-1] += char
        opened = None if tag in 'ES' else (opened if opened is not None and tag not in 'BS'
                                          else number)
        last = number
    return examples


def _json_array_file(path):
    """True where the file opens a JSON array: ``[`` and a record, or a whole array that parses
    (a raw text's ``[图]`` or People's Daily's ``[中央/n`` compound opens none)."""
    text = read_text(path)
    if _JSON_ARRAY_START.match(text):
        return True
    try:
        return isinstance(json.JSONDecoder().raw_decode(text.lstrip())[0], list)
    except json.JSONDecodeError:
        return False


def _json_object(line):
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _check_untagged(path):
    """A DataFormatError where ``path``, given as 'segmented' (which reads any line as words),
    is detected as a tagged or JSON corpus: its tags would be read as words."""
    try:
        found, why = detect_format(path, reason=True)
    except DataFormatError:                  # unclear to the detection: read as the user says
        return
    if found != 'segmented':
        what = 'records' if found == 'jsonl' else 'tags'
        raise DataFormatError(path, None, f'given as segmented (words between spaces), but it '
                                          f'reads as {found} ({why}): its {what} would be read '
                                          f'as words; drop --format (format= in Python)')


def detect_format(path, reason=False):
    """The format of a user's corpus file, one of :data:`FORMATS`, or an error saying why it is
    unclear.

    Rules, in order (``-DOCSTART-`` and blank lines aside): a JSON array, or a first line opening a
    JSON object -> 'jsonl'; every line ending with a tag (``O`` or ``B-``/``I-``/``M-``/``E-``/
    ``S-`` + type; BILOU's ``L-``/``U-`` and lower-case prefixes read alike) and holding one
    character, spaces or tabs, and the tag -> 'char-bio', 'char-bmes' or 'char-bioes' by the tag
    prefixes (M- -> bmes, else E-/S- -> bioes, else bio; where two fit they read the same
    entities); every line ending with a tag otherwise -> 'conll'; every line one character and a
    word-position tag (B, M, I, E, S) -> 'char-seg'; no line ending with a tag and some line
    holding several words -> 'segmented'. Some lines ending with a tag and others not (a tag
    that is none: the line and the tag are named), a file of one-character lines where a few
    hold more, I- mixed with M-, tags first on the line, or one-word lines only, raise
    DataFormatError.

    Args:
        path: str.
        reason: also return why (one line, for the caller to print).
    Returns:
        str, or ``(str, reason)`` with ``reason=True``.

        >>> detect_format('data/char-bmes/train.txt', reason=True)
        ('char-bmes', 'one character and its tag a line; M- tags: BMES')
    """
    found, why = _detected(path)
    return (found, why) if reason else found


def _detected(path):
    """``(format, reason)`` by :func:`detect_format`'s rules."""
    lines = [(number, line) for number, line in _lines(path) if line]
    ask = f'; pass --format (format= in Python) one of {", ".join(FORMATS)}'
    if lines and lines[0][1].lstrip().startswith('[') and _json_array_file(path):
        return 'jsonl', f'line {lines[0][0]} opens a JSON array'
    if lines and (_JSON_OBJECT_LINE.match(lines[0][1]) or lines[0][1].strip() == '{'
                  or _json_object(lines[0][1])):
        return 'jsonl', f'line {lines[0][0]} opens a JSON object'
    lines = [entry for entry in lines
             if not (entry[1].startswith('-DOCSTART-') and _document_start(entry[1]))]
    if not lines:
        raise _no_sentence(path)
    if _tagged_csv(line for _, line in lines[:200]):
        raise DataFormatError(path, None, f'comma-separated columns, a tag last (a CSV file, such '
                                          f'as ner_dataset.csv\'s {echo(lines[0][1], 40)}): '
                                          f'write it as CoNLL instead, a word and its tag a '
                                          f'line, a blank line between sentences')
    if {'annotation_id', 'annotator'} <= set(re.split('[,\t]', lines[0][1].strip())):
        raise DataFormatError(path, lines[0][0], f'a Label Studio CSV or TSV export (its header '
                                                 f'{echo(lines[0][1], 40)}): export the project '
                                                 'as JSON or JSON-MIN instead, which read as '
                                                 'they are')
    facts = _line_facts(line for _, line in lines)              # per distinct line
    if not all(tag for _, tag, _ in facts.values()):
        with_fields = [(number, line, facts[line][0]) for number, line in lines]
        if not any(tag for _, tag, _ in facts.values()):
            return _untagged(path, with_fields, ask)
        _raise_untagged_line(path, with_fields, {n for n, line in lines if facts[line][1]}, ask)
    prefixes = {tag[0] for _, tag, _ in facts.values() if tag != 'O'}
    first_lines = {}
    for number, line in lines:                                  # until every prefix is placed
        if len(first_lines) == len(prefixes):
            break
        if facts[line][1] != 'O':
            first_lines.setdefault(facts[line][1][0], number)
    counts = Counter()
    if prefixes & {'E', 'S'}:                                   # tags, not distinct lines
        counts = Counter(facts[line][1][0] for _, line in lines if facts[line][1][1:2] == '-')
    scheme, why = _tag_scheme(first_lines, path, counts)
    read_as = _read_as(fields[-1] for fields, _, _ in facts.values())
    if read_as:
        why += f'; {read_as}'
    if all(char for _, _, char in facts.values()):
        return f'char-{scheme.name.lower()}', f'one character and its tag a line; {why}'
    if (all(len(fields) == 2 for fields, _, _ in facts.values())
            and _position_marked(fields[0] for fields, _, _ in facts.values())):
        example = facts[lines[0][1]][0][0]
        return (f'char-{scheme.name.lower()}',
                f'one character with its word-position number and its tag a line '
                f'({example!r} read as {_marked_character(example)!r}); {why}')
    chars = [facts[line][2] for _, line in lines]
    marked = [_marked_line(facts[line][0]) for _, line in lines]
    kind, name = ((marked, 'one character with its word-position number')
                  if sum(marked) > sum(chars) else (chars, 'one character'))
    if len(lines) >= 10 and len(lines) - sum(kind) <= len(lines) // 10:
        number, line = next(entry for entry, ok in zip(lines, kind) if not ok)
        raise DataFormatError(path, number, f'expected {name}, spaces or tabs and a tag like '
                                            f'{100 * sum(kind) // len(lines)}% of the lines, got '
                                            f'{echo(line)}: give {name} a line, as the other '
                                            'lines do')
    tabbed = 2 * sum('\t' in line for _, line in lines) > len(lines)   # as read_conll splits
    return ('conll', f'{len(_columns(lines[0][1], tabbed))} columns a line'
                     f'{" (tab-separated)" * tabbed}, a word first and its tag last; {why}')


def _tagged_csv(lines):
    """True where ``lines`` are comma-separated columns, a header and then rows whose last
    column is a tag (three rows in four: a quoted comma token splits its row)."""
    rows = [line.split(',') for line in lines]
    body = [row for row in rows[1:] if len(row) == len(rows[0])]
    return (len(rows) > 1 and len(rows[0]) > 1 and len(body) * 4 >= (len(rows) - 1) * 3
            and all(_TAG_FIELD.fullmatch(row[-1].strip()) for row in body))


def _line_facts(lines):
    """{line: (its fields, its tag read by :func:`_normal_tag` or None where the line ends with
    none, whether it is one character and its tag)} for each distinct line: a corpus of
    characters repeats few lines many times."""
    facts = {}
    for line in lines:
        if line not in facts:
            fields, pair = _fields(line), _char_and_tag(line)
            last = pair[1] if pair else fields[-1] if len(fields) > 1 else None   # '  O': a space
            tag = last and _normal_tag(last)
            facts[line] = (fields, tag if tag and _TAG_FIELD.fullmatch(tag) else None, bool(pair))
    return facts


def _marked_line(fields):
    """True for a line's fields that are a character with its word-position number and a tag."""
    return len(fields) == 2 and bool(_marked_character(fields[0]))


def _read_as(tags):
    """What :func:`_normal_tag` changes in ``tags``, for the detection's reason ('' for nothing)."""
    changed = [tag for tag in tags if _normal_tag(tag) != tag]
    said = []
    if any(tag[:1].islower() for tag in changed):
        said.append('lower-case tag prefixes read as upper case')
    if any(tag[:1] in 'LUlu' for tag in changed):
        said.append("BILOU's L-/U- read as E-/S-")
    return '; '.join(said)


def _untagged(path, lines, ask):
    """``(format, reason)`` of a file where no line ends with a tag: 'char-seg' or 'segmented',
    or the error saying why neither fits."""
    pairs = [_char_and_tag(line) for _, line, _ in lines]
    positions = [bool(pair and _WORD_POSITION_TAG.fullmatch(pair[1])) for pair in pairs]
    if all(positions):
        return 'char-seg', 'one character and its word-position tag (B, M, I, E, S) a line'
    if 2 * sum(positions) > len(positions):
        number, line, _ = next(entry for entry, ok in zip(lines, positions) if not ok)
        raise DataFormatError(path, number, 'expected one character, spaces or tabs and its '
                                            f'word-position tag (B, M, I, E or S) like '
                                            f'{100 * sum(positions) // len(positions)}% of the '
                                            f'lines, got {echo(line)}')
    if all(len(fields) > 1 for _, _, fields in lines) and (
            all(_TAG_FIELD.fullmatch(_normal_tag(fields[0])) for _, _, fields in lines)
            or all(len(fields) == 2 and len(fields[1]) == 1
                   and _WORD_POSITION_TAG.fullmatch(fields[0]) for _, _, fields in lines)):
        number, line, _ = lines[0]
        raise DataFormatError(path, number, f'the tag stands first ({echo(line)}): put each '
                                            "line's tag last, after its word or character")
    words = [line.split() for _, line, _ in lines]              # any whitespace: U+3000 too
    if all(len(fields) == 1 for fields in words):
        raise DataFormatError(path, None, 'cannot detect the format: no line ends with a tag and '
                                          'none holds several words (raw text?)' + ask)
    if 2 * sum(len(fields) > 1 for fields in words) < len(words):
        number = next(n for (n, _, _), fields in zip(lines, words) if len(fields) == 1)
        raise DataFormatError(path, number, 'raw text? no line ends with a tag, and most lines '
                                            'hold one word, as this one: a segmented file '
                                            'separates the words of its lines by spaces')
    tokens = [(number, word) for (number, _, _), fields in zip(lines, words) for word in fields]
    tagged = [bool(_POS_TOKEN.fullmatch(word)) for _, word in tokens]
    if all(tagged):
        return 'segmented', ("no tags; words separated by whitespace, each word/TAG (People's "
                             'Daily 1998): the part-of-speech tags dropped')
    if 10 * sum(tagged) >= 9 * len(tagged):
        number, word = next(token for token, ok in zip(tokens, tagged) if not ok)
        raise DataFormatError(path, number, f'{echo(word)} has no /TAG where '
                                            f'{100 * sum(tagged) // len(tagged)}% of the words are '
                                            "word/TAG (People's Daily 1998): tag it, or drop the "
                                            'tags of every word')
    return 'segmented', 'no tags; words separated by whitespace'


# what a header row names the tag column
_TAG_COLUMN_NAMES = frozenset(('tag', 'tags', 'label', 'labels', 'ner', 'ner_tag', 'ner_tags',
                               'entity', 'bio', 'iob', 'class', 'target'))


def _raise_untagged_line(path, lines, tagged, ask):
    """The error for a file where some lines end with a tag and others do not: a first line that
    names the columns is a header row; where the line has the tagged lines' columns, its last
    field is named as a tag that is none."""
    first = min(tagged)
    number, line, fields = next(entry for entry in lines if entry[0] not in tagged)
    columns = {len(f) for n, _, f in lines if n in tagged}
    example = next(f for n, _, f in lines if n == first)[-1]
    if line.startswith('#'):             # CoNLL-U's and MultiCoNER's '# id ... domain=en' lines
        raise DataFormatError(path, number, f'{echo(line)} is a comment line (CoNLL-U, '
                                            "MultiCoNER): remove the lines that open with '# ', "
                                            f"e.g. grep -v '^# ' {os.path.basename(path)} > "
                                            'clean.txt')
    if (number == lines[0][0] and len(tagged) == len(lines) - 1 and len(fields) in columns
            and fields[-1].lower() in _TAG_COLUMN_NAMES):
        raise DataFormatError(path, number, f'{echo(line)} is a header row (the column names): '
                              f'remove it, e.g. tail -n +{number + 1} '
                              f'{os.path.basename(path)} > clean.txt')
    if len(fields) in columns and len(fields) > 1:
        raise DataFormatError(path, number, f'{echo(fields[-1])} is not a tag (line {first} ends '
                                            f'with {echo(example)}): tags are O, or B-, I-, M-, '
                                            "E-, S- (BILOU's L-, U-) and an entity type")
    if len(columns) == 1:                     # a word or a column too many or too few
        raise DataFormatError(path, number, f'expected {min(columns)} columns (word ... tag) like '
                                            f'the lines with a tag (line {first}), got '
                                            f'{len(fields)}: {echo(line)}')
    raise DataFormatError(path, number, f'cannot detect the format: line {first} ends with a tag, '
                                        f'this line does not: {echo(line)}' + ask)


def read_corpus(path, format=None, types=None, repair=True):
    """A user's corpus file in one of :data:`FORMATS`, as a :class:`Dataset`.

    Formats: 'conll' (a word a line, the tag last; BIO, IOB1 or BIOES; units are words), 'char-bio',
    'char-bmes', 'char-bioes' (a character and its tag a line), 'segmented' (a sentence a line,
    words separated by whitespace), 'jsonl' (CLUENER's ``label`` layout or ``spans``).
    ``Example.tags`` are BIO for NER (the outermost of nested spans; ``spans`` are the truth) and
    SEG for 'segmented'.

    Args:
        path: str.
        format: one of FORMATS, or None to detect it (:func:`detect_format`; the rule used is in
            ``Dataset.note``: print it).
        types: the entity types of the training file, or None to take them from this file (sorted).
            A type found only in this file is then a DataFormatError naming its line.
        repair: True (the default, as in the task scripts): fix tags that break their entity by
            the conlleval rule, as conlleval and seqeval read them (noted in ``Example.notes``,
            placed in ``Example.repaired_at`` and counted by ``Dataset.summary()``); False (the
            scripts' ``--strict``): raise a DataFormatError naming the line and the fault.
    Returns:
        Dataset with ``name`` = the file name, ``units`` ('chars' or 'words') and ``format``.
    Raises:
        DataFormatError naming ``path:line`` for malformed input, an empty file, or a file with no
        sentence; ValueError for an unknown ``format``.

        >>> train = read_corpus('data/char-bio/train.txt')
        >>> dev = read_corpus('data/char-bio/dev.txt', train.format, train.types)
    """
    why = ''
    if format is None:
        format, why = detect_format(path, reason=True)
    if format not in _FORMAT_READERS:
        raise ValueError(f'unknown format {format!r}: expected one of {", ".join(FORMATS)}')
    if format == 'segmented' and not why:
        _check_untagged(path)
    units, reader = _FORMAT_READERS[format]
    examples = reader(path, None if types is None else tuple(types), repair)
    if not examples:
        raise _no_sentence(path)
    if format in SEGMENTATION_FORMATS:
        types = ()
    else:
        for example in examples:
            if example.tags is not None:
                example.tags = _flat_tags(example.spans, len(example.tokens))[0]
        types = (sorted({kind for e in examples for _, _, kind in e.spans}) if types is None
                 else types)
    return Dataset(name=os.path.basename(path), split='', examples=examples, types=tuple(types),
                   path=path, note=f'format {format} detected: {why}' if why else '', units=units,
                   format=format)
