"""Text units (characters or words) -> WordPiece ids, unit <-> piece spans, and windows.

A unit is a character of Chinese text or a word of English text. Labels live on units; the
model reads pieces. :class:`UnitEncoder` maps units to pieces and remembers where each unit's
pieces start, so labels and spans move between the two without shifting.

    >>> enc = UnitEncoder('vocab.txt')
    >>> ids, starts = enc.encode('北京欢迎你')
    >>> windows_of('很长的文本。' * 100, 128, enc)[:1]      # [(0, '很长的文本。很长...')]
"""
import os
import unicodedata

from crf_lr.data.windows import SENTENCE_ENDS, WORD_SENTENCE_ENDS, split_into_windows


class UnitEncoder:
    """Maps the units of a text to WordPiece ids and back.

    Units are the characters of Chinese text (one id each, so labels never shift: a character
    missing from the vocabulary is looked up lower-cased, then NFKC-normalised -- full-width digits
    and letters become ASCII -- and is ``[UNK]`` otherwise) or the words of English text (each
    word split into its WordPieces by bert4keras's ``Tokenizer``). A word of more than
    ``max_pieces`` pieces is one ``[UNK]``, as BERT's tokenizer reads a word of over 100
    characters: it could share no window with anything, nor fit one alone.

    Args:
        vocab_path: str, a BERT ``vocab.txt``.
        units: 'chars' or 'words'.
        lowercase: bool, lower-case before lookup (True for uncased / Chinese vocabularies).
        max_pieces: the most pieces of one unit, or None for no limit; a window of ``maxlen``
            tokens holds ``maxlen - 2`` pieces (``Tagger.load`` and the task scripts pass that).

        >>> enc = UnitEncoder('vocab.txt')
        >>> ids, starts = enc.encode('１９９８年')   # [CLS] 1 9 9 8 年 [SEP]; starts = [0..5]
    """

    def __init__(self, vocab_path, units='chars', lowercase=True, max_pieces=None):
        if units not in ('chars', 'words'):
            raise ValueError(f"units must be 'chars' or 'words', got {units!r}")
        if not os.path.isfile(vocab_path):
            raise FileNotFoundError(f'vocabulary file not found: {vocab_path}')
        self.vocab = {}
        with open(vocab_path, encoding='utf-8') as f:
            for i, line in enumerate(f):          # id = line number, as in the embedding matrix
                self.vocab.setdefault((line.split() or [line.strip()])[0], i)
        for token in ('[CLS]', '[SEP]', '[UNK]', '[PAD]'):
            if token not in self.vocab:
                raise ValueError(f'{vocab_path}: not a BERT vocabulary (no {token} token)')
        self.vocab_path, self.units, self.lowercase = vocab_path, units, lowercase
        self.max_pieces = max_pieces
        self.cls, self.sep, self.unk = self.vocab['[CLS]'], self.vocab['[SEP]'], self.vocab['[UNK]']
        self._tokenizer = None
        self._cache = {}

    def pieces(self, unit):
        """The ids of one unit: a list of >= 1 ints, ``[UNK]`` alone past ``max_pieces``."""
        ids = self._cache.get(unit)
        if ids is None:
            ids = self._char_id(unit) if self.units == 'chars' else self._word_ids(unit)
            self._cache[unit] = ids
        return ids if self.max_pieces is None or len(ids) <= self.max_pieces else [self.unk]

    def _char_id(self, char):
        candidates = [char, char.lower()] if self.lowercase else [char]
        normal = unicodedata.normalize('NFKC', char)
        candidates += [normal, normal.lower()] if self.lowercase else [normal]
        for candidate in candidates:
            if candidate in self.vocab:
                return [self.vocab[candidate]]
        return [self.unk]

    def _word_ids(self, word):
        if self._tokenizer is None:
            from bert4keras.tokenizers import Tokenizer
            self._tokenizer = Tokenizer(self.vocab, do_lower_case=self.lowercase)
        tokens = self._tokenizer.tokenize(word)[1:-1]
        return self._tokenizer.tokens_to_ids(tokens) or [self.unk]

    def encode(self, units):
        """Token ids of a sequence of units, and where each unit's pieces start.

        Args:
            units: str (characters) or list of str (words).
        Returns:
            ``(token_ids, starts)``: list of ints ``[CLS] pieces... [SEP]``, and a list of
            ``len(units) + 1`` ints: the pieces of unit i are positions ``starts[i]:starts[i+1]``
            counted after [CLS] (``starts[-1]`` = number of pieces).
        """
        ids, starts = [self.cls], [0]
        for unit in units:
            ids.extend(self.pieces(unit))
            starts.append(len(ids) - 1)
        ids.append(self.sep)
        return ids, starts

    def length(self, units):
        """Number of pieces of ``units`` ([CLS]/[SEP] not counted)."""
        return sum(len(self.pieces(unit)) for unit in units)


def unit_spans_to_piece_spans(spans, starts):
    """``(start, end, label)`` unit spans -> piece spans (end exclusive)."""
    return [(starts[s], starts[e], label) for s, e, label in spans]


def piece_spans_to_unit_spans(spans, starts):
    """Piece spans -> unit spans; a span that does not start and end on unit boundaries (it
    cuts a word) is dropped."""
    first = {piece: unit for unit, piece in enumerate(starts)}
    return [(first[s], first[e], label) for s, e, label in spans if s in first and e in first]


def windows_of(units, maxlen, encoder, spans=(), pauses=()):
    """Split a sequence of units into ``(offset, units)`` windows of at most ``maxlen - 2``
    pieces (room for [CLS] and [SEP]), cutting at sentence ends (a sentence too long for one
    window after its last unit in ``pauses``, if any) and never inside ``spans``.

        >>> windows_of('北京。上海。', 5, enc)    # [(0, '北京。'), (3, '上海。')]
    """
    separators = WORD_SENTENCE_ENDS if encoder.units == 'words' else SENTENCE_ENDS
    return split_into_windows(units, maxlen - 2, spans=spans, separators=separators,
                              length=encoder.length, pauses=pauses)


def _uncut_stretches(spans):
    """``(start, end, count)`` of each stretch of units no window cuts: a span, or ``count``
    overlapping spans together."""
    stretches = []
    for start, end, _ in sorted(spans):
        if stretches and start < stretches[-1][1]:
            first, last, count = stretches[-1]
            stretches[-1] = (first, max(last, end), count + 1)
        else:
            stretches.append((start, end, 1))
    return stretches


def check_spans_fit(examples, sources, maxlen, encoder):
    """ValueError, in one line, where a training span is longer than a window of ``maxlen``
    tokens holds (:func:`windows_of` never cuts one): it names the longest such span's
    ``path:line`` and length, the smallest ``--maxlen`` that holds it (and so every span), and
    where the first of several is.

    Args:
        examples: ``(units, tags, spans)`` of each training sentence; sources: the ``path:line``
            of each; maxlen: tokens per window with [CLS] and [SEP]; encoder: :class:`UnitEncoder`.

        >>> check_spans_fit([('北京欢迎你', None, [(0, 5, 'X')])], ['a.txt:1'], 6, enc)
        ValueError: a.txt:1: a span of 5 characters does not fit --maxlen 6 (windows of 4); use
        --maxlen 7 or more
    """
    stretches = ((encoder.length(units[start:end]), source, units[start:end], count)
                 for (units, _, spans), source in zip(examples, sources)
                 for start, end, count in _uncut_stretches(spans))
    too_long = [stretch for stretch in stretches if stretch[0] > maxlen - 2]
    if not too_long:
        return
    size, source, span, count = max(too_long, key=lambda stretch: stretch[0])     # the first
    what = 'a span' if count == 1 else f'{count} overlapping spans'
    if encoder.units == 'words':
        what, window = f'{what} of {len(span)} words ({size} pieces)', f'{maxlen - 2} pieces'
    else:
        what, window = f'{what} of {len(span)} characters', maxlen - 2
    text = span if isinstance(span, str) else ' '.join(span)
    text = repr(text if len(text) <= 30 else text[:30] + '…')
    first = too_long[0][1]
    others = (f' (the longest of {len(too_long)} that do not fit'
              + (f'; the first is at {first})' if first != source else ')')
              if len(too_long) > 1 else '')
    raise ValueError(f'{source}: {what}, {text} in the sentence opening at that line, '
                     f'{"does" if count == 1 else "do"} not fit --maxlen {maxlen} (windows of '
                     f'{window}); use --maxlen {size + 2} or more{others}')
