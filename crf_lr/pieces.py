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

from crf_lr.tagging import split_into_windows


class UnitEncoder:
    """Maps the units of a text to WordPiece ids and back.

    Units are the characters of Chinese text (one id each, so labels never shift: a character
    missing from the vocabulary is looked up lower-cased, then NFKC-normalised -- full-width digits
    and letters become ASCII -- and is ``[UNK]`` otherwise) or the words of English text (each
    word split into its WordPieces by bert4keras's ``Tokenizer``).

    Args:
        vocab_path: str, a BERT ``vocab.txt``.
        units: 'chars' or 'words'.
        lowercase: bool, lower-case before lookup (True for uncased / Chinese vocabularies).

        >>> enc = UnitEncoder('vocab.txt')
        >>> ids, starts = enc.encode('１９９８年')   # [CLS] 1 9 9 8 年 [SEP]; starts = [0..5]
    """

    def __init__(self, vocab_path, units='chars', lowercase=True):
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
        self.cls, self.sep, self.unk = self.vocab['[CLS]'], self.vocab['[SEP]'], self.vocab['[UNK]']
        self._tokenizer = None
        self._cache = {}

    def pieces(self, unit):
        """The ids of one unit: a list of >= 1 ints."""
        ids = self._cache.get(unit)
        if ids is None:
            ids = self._char_id(unit) if self.units == 'chars' else self._word_ids(unit)
            self._cache[unit] = ids
        return ids

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


def windows_of(units, maxlen, encoder, spans=()):
    """Split a sequence of units into ``(offset, units)`` windows of at most ``maxlen - 2``
    pieces (room for [CLS] and [SEP]), cutting at sentence ends and never inside ``spans``.

        >>> windows_of('北京。上海。', 5, enc)    # [(0, '北京。'), (3, '上海。')]
    """
    return split_into_windows(units, maxlen - 2, spans=spans, length=encoder.length)
