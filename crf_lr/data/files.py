"""The data files: the types every reader returns (`Example`, `Dataset`, `DataFormatError`), the
notes readers leave on what they repaired, decoding with line numbers, the data folder.
"""
import dataclasses
import os
import re
from collections import Counter
from typing import Optional, Sequence


_MESSAGE_LIMIT = 600


class DataFormatError(ValueError):
    """A malformed data file; the message starts with ``path:line:`` (``path:`` when ``line`` is
    None) and is cut to a readable length."""

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
        name, split: str, as passed to :func:`load_dataset` (:func:`read_corpus`: the file name,
        ''). examples: list of :class:`Example`.
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
                 f'{sum(len(e.tokens) for e in self.examples)} '
                 f'{"words" if self.units == "words" else "tokens"}'
                 + (f', {words} words' if words and self.units != 'words' else '')
                 + f' from {self.path}' + (f' ({self.note})' if self.note else '')]
        counts = self.entity_counts()
        if counts:
            lines.append(f'  entities {sum(counts.values())}: '
                         + ', '.join(f'{k} {v}' for k, v in sorted(counts.items())))
        for note, count in sorted(Counter(n for e in self.examples for n in e.notes).items()):
            lines.append(f'  {note_line(note, count, note_places(self.examples, note))}')
        return '\n'.join(lines)


# --------------------------------------------------------------------------------------------------
# Files: decoding with line numbers, the data folder, the packaged fallback

def read_text(path):
    """Text of the file ``path`` as :func:`decode_text` decodes it; a DataFormatError where it is
    missing or a folder.

        >>> read_text('data/char-bio/dev.txt')[:7]
        '胡 B-PER'
    """
    if os.path.isdir(path):
        raise DataFormatError(path, None, 'a folder, not a file: name the corpus file inside it')
    if not os.path.exists(path):
        raise DataFormatError(path, None, 'no such file')
    with open(path, 'rb') as f:
        return decode_text(f.read(), path, file=True)


def decode_text(data, name, file=False):
    """``data`` (bytes read from the stream ``name``, e.g. ``'stdin'``, or the file ``name``
    where ``file``) as text: UTF-8 (a BOM dropped), or UTF-16 / UTF-32 opening with its BOM;
    other bytes a DataFormatError naming the line and what the text seems to be (GB18030,
    Latin-1, or UTF-8 but for some lines); so are a NUL character (its line) and a compressed
    file (gzip, zip). UTF-16 surrogates written as UTF-8 (CESU-8) are read:
    a pair as the character it encodes, a lone one as U+FFFD (a character broken in transit,
    which the character readers note).

        >>> decode_text(sys.stdin.buffer.read(), 'stdin')
    """
    packed = next((kind for magic, kind in _ARCHIVES if data.startswith(magic)), None)
    if packed:
        raise DataFormatError(name, None, f'{packed}, not text: unpack it and give the corpus '
                                          'file itself')
    wide = not data.startswith(tuple(mark for mark, _ in _WIDE_BOMS)) and _utf16_without_bom(data)
    if wide:
        raise DataFormatError(name, None, f'{wide} text without its byte-order mark (every other '
                                          f'byte NUL): convert it, {_iconv(wide, name, file)}')
    text = _decoded(data, name, file)
    nul = text.find('\x00')
    if nul >= 0:
        raise DataFormatError(name, text.count('\n', 0, nul) + 1,
                              'a NUL character (binary data, or a file cut off while written): '
                              'remove it')
    return text


# what a compressed file opens with (its magic number), and what it is
_ARCHIVES = ((b'\x1f\x8b', 'a gzip file (.gz)'), (b'PK\x03\x04', 'a zip archive (or .xlsx, .docx)'))


def _decoded(data, name, file):
    """``data`` decoded as :func:`decode_text` says, NUL characters and all."""
    wide = next((encoding for mark, encoding in _WIDE_BOMS if data.startswith(mark)), None)
    if wide:
        try:
            return data.decode(wide)
        except UnicodeDecodeError:
            raise DataFormatError(name, None, f'opens with a {wide.upper()} byte-order mark but is '
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
        bad = data[error.start:error.start + 2]
        raise DataFormatError(name, line, f'not UTF-8: {bad!r} cannot be decoded'
                                          f'{_encoding_hint(name, data, file)}') from None


# byte-order marks of the wide encodings, UTF-32's first (UTF-16 LE's mark begins UTF-32 LE's)
_WIDE_BOMS = ((b'\xff\xfe\x00\x00', 'utf-32'), (b'\x00\x00\xfe\xff', 'utf-32'),
              (b'\xff\xfe', 'utf-16'), (b'\xfe\xff', 'utf-16'))


def _encoding_hint(name, data, file):
    """What text that is not UTF-8 seems to be, for the error: binary; UTF-8 but for a few
    lines (files joined, a line pasted from elsewhere), which are listed; GB18030 (GBK) Chinese
    (its non-ASCII bytes in pairs, each from 0xA1, as GB2312's characters are); or Latin-1."""
    if b'\x00' in data:
        return ' (it holds NUL bytes: a binary file, or UTF-16 without its byte-order mark)'
    wide = [(number, line) for number, line in enumerate(data.split(b'\n'), 1)
            if re.search(rb'[\x80-\xff]', line)]                 # lines of non-ASCII bytes
    broken = [number for number, line in wide if not _utf8(line)]
    if 2 * len(broken) < len(wide):
        lines = place_list([str(number) for number in broken], 5)
        return (f'; only line {lines} (1 of the {len(wide)} lines with non-ASCII text) is not '
                f'UTF-8: fix or remove it' if len(broken) == 1 else
                f'; only lines {lines} ({len(broken)} of the {len(wide)} lines with non-ASCII '
                f'text) are not UTF-8: fix or remove them')
    runs = re.findall(rb'[\x80-\xff]+', data)
    paired = sum(len(run) for run in runs if len(run) % 2 == 0 and min(run) >= 0xa1)
    chinese = 5 * paired >= 4 * sum(len(run) for run in runs)
    encoding = 'GB18030' if chinese else 'CP1252'
    command = _iconv(encoding, name, file)
    return (f'; it reads as GB18030 (GBK) Chinese text: convert it, {command}' if chinese else
            f'; if it is Latin-1 (Windows-1252) text, convert it, {command}')


def _utf16_without_bom(data):
    """'UTF-16LE' or 'UTF-16BE' where ``data`` reads as such text without its byte-order mark (a
    quarter of its bytes or more NUL, nearly all at odd positions, or at even ones), else None."""
    if 4 * data.count(0) < len(data) or not data:
        return None
    odd, even = data[1::2].count(0), data[0::2].count(0)
    return 'UTF-16LE' if odd > 9 * even else 'UTF-16BE' if even > 9 * odd else None


def _iconv(encoding, name, file):
    """The iconv command converting the file (or stream) ``name`` from ``encoding``."""
    return (f'e.g. iconv -f {encoding} -t UTF-8 {os.path.basename(name)} > utf8.txt' if file
            else f'pipe it through iconv -f {encoding} -t UTF-8')


def _utf8(line):
    try:
        line.decode('utf-8', 'surrogatepass')
    except UnicodeDecodeError:
        return False
    return True


def split_lines(text, name):
    """The lines of ``text``, split at LF, CRLF and CR CR LF (a CRLF file converted to CRLF
    again) only: not at the form feeds, U+0085 or U+2028 that ``str.splitlines`` also takes for
    line ends, which a line of text can hold. Text ending with a line end gives a last ''.

    Raises:
        DataFormatError naming ``name`` and the line of a lone CR.

        >>> split_lines('a\r\nb\x0cc\n', 'my.txt')
        ['a', 'b\x0cc', '']
    """
    text = text.replace('\r\r\n', '\n').replace('\r\n', '\n')
    cr = text.find('\r')
    if cr >= 0:
        raise DataFormatError(name, text.count('\n', 0, cr) + 1,
                              'a line ends with a lone CR (old Mac line endings): save the file '
                              'with LF or CRLF line endings')
    return text.split('\n')


def _lines(path):
    """``(line_number, line)`` pairs of :func:`split_lines`.

    A BOM (U+FEFF) opening a line is dropped, and a line of only whitespace and BOMs comes out
    empty: concatenated files leave both behind.
    """
    text = read_text(path)
    lines = split_lines(text, path)
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
    return DataFormatError(path, None, 'no sentence in the file (only blank lines, -DOCSTART- '
                                       'lines or records with empty text)')



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


# --------------------------------------------------------------------------------------------------
# NER: character-per-line tags, CLUENER and JSON lines, CMeEE, CoNLL columns

_CHUNK_START_NOTE = 'an I-X tag opens the chunk (an entity cut by the chunking): read as B-X'
_NESTED_NOTE = 'a nested span is left out of the flat tags (kept in spans)'
_CROSSING_NOTE = ('the later of two crossing spans (they overlap, neither inside the other) is '
                  'left out of the flat tags (kept in spans)')
_TWO_TYPES_NOTE = 'a span given a second type is left out of the flat tags under it (kept in spans)'
_DUPLICATE_NOTE = 'a span written twice in its record is read once'
_EMPTY_TEXT_NOTE = 'a record with empty text is skipped'
_IOB1_NOTE = 'IOB1 tags (an entity opening with I-X) read as BIO'
REPAIR_NOTE = 'a tag breaking its entity (a stray I-X, or an entity never closed): conlleval rule'
STRAY_NOTE = 'a BIOES tag in a BIO file: E-X read as I-X, S-X as B-X'
WORD_REPAIR_NOTE = ('a word-position tag breaking its word (an M or E continuing no word, a word '
                    'never closed by E): B and S begin a word, and so does a tag after E or S')
BROKEN_NOTE = ('a character broken in transit (U+FFFD or ?: a character outside the BMP often '
               'arrives as two) read as one unit')
TAG_LIKE_TYPE_NOTE = ('a span whose type reads as a tag (B-PER, s-loc): if the file gives tags '
                      'where types belong, write the type alone (PER)')
CUT_CHARACTER_NOTE = ('a span starting or ending inside a character of several code points (a '
                      'letter and its combining mark, an emoji sequence): read as written')
CLUSTER_NOTE = ('a character of several code points (an emoji sequence, a letter and its marks, '
                'Hangul jamo, an Indic conjunct, a zero-width character) read as one unit, its tag '
                'on each code point')


def note_line(note, count, places=()):
    """One line counting a kind of note (tags repaired, or spans left out of the flat tags) and
    naming the first ``places``.

        >>> note_line(REPAIR_NOTE, 14)
        'repaired 14x: a tag breaking its entity (a stray I-X, or an entity never closed): conlleval
        rule'
        >>> note_line(_NESTED_NOTE, 2, ['a.jsonl:3', 'a.jsonl:9'])
        'noted 2x (a.jsonl:3, a.jsonl:9): a nested span is left out of the flat tags (kept in
        spans)'
    """
    where = f' ({place_list(places)})' if places else ''
    repaired = (REPAIR_NOTE, _CHUNK_START_NOTE, STRAY_NOTE, WORD_REPAIR_NOTE)
    return (f'{"repaired" if note in repaired else "noted"} '
            f'{count}x{where}: {note}')


def listed(value):
    """``value`` where it is a list, else a list of it: JSON that writes one item bare."""
    return value if isinstance(value, list) else [value]


def place_list(places, shown=3):
    """The first ``shown`` of ``places`` joined by commas, an ellipsis after them when there are
    more.

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
